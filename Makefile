# srv6-mup: `make demo` runs the main job, `make test` runs every test.
# Both install what is missing first (Debian packages, npm packages).

SHELL := /bin/bash
CLANG ?= clang
# bpf/cflags is the one place the flags are written (the benchmarks and tests
# that build variants read it too). -mcpu=v3: 32-bit ALU and jump
# instructions, about 6 % fewer instructions than clang 14's default v1, and
# 3-4 ns less per translated packet (bench:micro).
BPF_CFLAGS := $(shell cat bpf/cflags) -I/usr/include/$(shell uname -m)-linux-gnu
# bpf/ holds the product (mup.bpf.c and its headers); bpf/bench/ the
# benchmarks' programs, bpf/lab/ the lab's and the tests' peers. Objects go
# flat into build/ (build/gnb.bpf.o, ...), where src/ and test/ load them, so
# no two sources may share a name. Every object depends on every header: a
# change to any header rebuilds them all.
BPF_DIRS := bpf bpf/bench bpf/lab
BPF_SRC := $(foreach d,$(BPF_DIRS),$(wildcard $(d)/*.c))
BPF_HDR := $(foreach d,$(BPF_DIRS),$(wildcard $(d)/*.h))
BPF_OBJ := $(patsubst %.c,build/%.o,$(notdir $(BPF_SRC)))
ifneq ($(words $(BPF_OBJ)),$(words $(sort $(BPF_OBJ))))
$(error two BPF sources share a name, and so an object in build/: $(BPF_SRC))
endif
DEB_PKGS := clang llvm libbpf-dev bpftool iproute2 procps python3 python3-scapy tshark tcpdump iputils-ping iperf3 bsdextrautils make g++ ethtool curl passwd util-linux gobgpd
STAMP := build/.deps
# The timestamping addon (node-addon-api, built by node-gyp: scripts/native-build.sh).
NATIVE_SRC := native/binding.gyp $(wildcard native/src/*.cc native/src/*.h)
NATIVE_ADDON := native/build/Release/mup_tstamp.node

# build/build-info.json: the commit `mup --version` names (scripts/build-info.sh).
.PHONY: all deps bpf ts native build-info deb install pack test demo replay-demo lab-relocate bench bench-micro bench-daemon bench-bgp soak fuzz stalls clean

all: bpf ts native build-info

build-info:
	@bash scripts/build-info.sh

# Debian and npm packages, once per machine / lockfile change.
$(STAMP): package.json package-lock.json scripts/deps.sh Makefile
	@bash scripts/deps.sh $(DEB_PKGS)
	@mkdir -p build && touch $@

deps: $(STAMP)

define BPF_RULE
build/%.bpf.o: $(1)/%.bpf.c $$(BPF_HDR) bpf/cflags | $$(STAMP)
	@mkdir -p build
	$$(CLANG) $$(BPF_CFLAGS) -c $$< -o $$@
endef
$(foreach d,$(BPF_DIRS),$(eval $(call BPF_RULE,$(d))))

bpf: $(BPF_OBJ)

# tsconfig.test.json: type check of the test code that is not a test
# itself (the fuzzer, the RFC 9433 model, the helpers); emits nothing.
ts: $(STAMP)
	npx tsc -p tsconfig.json
	npx tsc -p tsconfig.test.json

$(NATIVE_ADDON): $(NATIVE_SRC) scripts/native-build.sh | $(STAMP)
	@bash scripts/native-build.sh

native: $(NATIVE_ADDON)

# Two runs of vitest: the parallel project (files that share no kernel or host
# state with another: vitest.config.ts) two files at a time, then the serial
# one, one file at a time (vitest.config.ts says why).
# The second runs even when the first failed; the summary covers both.
test: bpf ts native build-info
	@rm -f build/vitest.json build/vitest-parallel.json build/vitest-serial.json
	npx vitest run --project parallel --fileParallelism --maxWorkers 2 \
	  --reporter=default --reporter=json --outputFile.json=build/vitest-parallel.json; u=$$?; \
	npx vitest run --project serial \
	  --reporter=default --reporter=json --outputFile.json=build/vitest-serial.json; s=$$?; \
	node scripts/test-summary.mjs build/vitest-parallel.json build/vitest-serial.json; \
	[ $$u -eq 0 ] && [ $$s -eq 0 ]

# The lab (namespaces of its own, removed at the end): translated vs plain
# ping / iperf3, counters, decoded wires. ARGS=--keep leaves it up.
demo: bpf ts
	bash scripts/demo.sh $(ARGS)

# The earlier demo: N3 frames replayed through the XDP program (no network).
replay-demo: bpf ts
	bash scripts/replay-demo.sh

# MEC relocation: one UE of 100 moved from mec-a to mec-b under a stream to all of them (mup lab relocate).
lab-relocate: bpf ts
	node bin/mup.js lab relocate $(ARGS)

# RFC 2544 throughput, translator vs kernel and XDP baselines (namespaces of
# its own, removed at the end). Not part of `make test`. ARGS=--quick for 2 s trials.
bench: bpf ts
	npm run bench -- $(ARGS)

bench-micro: bpf ts
	npm run bench:micro

# How long each CPU stops running a never-yielding thread (the hypervisor):
# what sets the RFC 2544 zero-loss rate on a VM (docs/bench.md "vCPU stalls").
stalls:
	scripts/vcpu-stalls.sh $(or $(ARGS),60)

fuzz: bpf ts
	npm run fuzz

# The daemon at scale (65,536 policies + 65,536 local SIDs): load time,
# add/delete latency, memory. Not part of `make test`.
bench-daemon: bpf ts
	npm run bench:daemon

# The BGP MUP control plane (issue 14): bulk origination method, 10,000 T2ST +
# 10,000 T1ST at a starting translator, 1,000 single T2ST changes, gobgpd RSS;
# gobgpd processes on loopback only, removed at the end. Not part of `make test`.
bench-bgp: ts
	npm run bench:bgp -- $(ARGS)

# The daemon under faults (kill, disk full, pins removed, interface
# recreated, API churn) while traffic flows both ways: frames lost,
# acknowledged changes lost, RSS. Not part of `make test`.
# ARGS='--duration 20s --faults kill'.
soak: bpf ts native
	npm run soak -- $(ARGS)

# Packages (docs/install.md): build/srv6-mup_<version>_<arch>.deb; an
# install into DESTDIR under PREFIX for other distributions; the npm
# tarball (`npm i -g build/srv6-mup-<version>.tgz`, dependencies bundled).
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
deb: all
	bash packaging/deb.sh --out build

install: all
	bash packaging/install.sh --destdir "$(DESTDIR)" --prefix "$(PREFIX)" --sysconfdir "$(SYSCONFDIR)"

pack: all
	npm pack --ignore-scripts --pack-destination build

clean:
	rm -rf build dist native/build
