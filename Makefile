# srv6-mup: `make demo` runs the main job, `make test` runs every test.
# Both install what is missing first (Debian packages, npm packages).

SHELL := /bin/bash
CLANG ?= clang
# bpf/cflags is the one place the flags are written (the benchmarks and tests
# that build variants read it too). -mcpu=v3: 32-bit ALU and jump
# instructions, about 6 % fewer instructions than clang 14's default v1, and
# 3-4 ns less per translated packet (bench:micro).
BPF_CFLAGS := $(shell cat bpf/cflags) -I/usr/include/$(shell uname -m)-linux-gnu
BPF_SRC := $(wildcard bpf/*.c)
BPF_HDR := $(wildcard bpf/*.h)
BPF_OBJ := $(patsubst bpf/%.c,build/%.o,$(BPF_SRC))
DEB_PKGS := clang llvm libbpf-dev bpftool iproute2 procps python3 python3-scapy tshark tcpdump iputils-ping iperf3 bsdextrautils make g++ ethtool
STAMP := build/.deps
# The timestamping addon (node-addon-api, built by node-gyp: scripts/native-build.sh).
NATIVE_SRC := native/binding.gyp $(wildcard native/src/*.cc native/src/*.h)
NATIVE_ADDON := native/build/Release/mup_tstamp.node

.PHONY: all deps bpf ts native test demo replay-demo lab-relocate bench bench-micro bench-daemon fuzz clean

all: bpf ts native

# Debian and npm packages, once per machine / lockfile change.
$(STAMP): package.json package-lock.json scripts/deps.sh Makefile
	@bash scripts/deps.sh $(DEB_PKGS)
	@mkdir -p build && touch $@

deps: $(STAMP)

build/%.bpf.o: bpf/%.bpf.c $(BPF_HDR) bpf/cflags | $(STAMP)
	@mkdir -p build
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

bpf: $(BPF_OBJ)

# tsconfig.test.json: type check of the test code that is not a test
# itself (the fuzzer, the RFC 9433 model, the helpers); emits nothing.
ts: $(STAMP)
	npx tsc -p tsconfig.json
	npx tsc -p tsconfig.test.json

$(NATIVE_ADDON): $(NATIVE_SRC) scripts/native-build.sh | $(STAMP)
	@bash scripts/native-build.sh

native: $(NATIVE_ADDON)

test: bpf ts native
	@rm -f build/vitest.json
	npx vitest run --reporter=default --reporter=json --outputFile.json=build/vitest.json; \
	  rc=$$?; node scripts/test-summary.mjs build/vitest.json; exit $$rc

# The lab (namespaces of its own, removed at the end): translated vs plain
# ping / iperf3, counters, decoded wires. ARGS=--keep leaves it up.
demo: bpf ts
	bash scripts/demo.sh $(ARGS)

# The earlier demo: N3 frames replayed through the XDP program (no network).
replay-demo: bpf ts
	bash scripts/replay-demo.sh

# MEC relocation under a 20,000 frames/s stream (mup lab relocate).
lab-relocate: bpf ts
	node bin/mup.js lab relocate $(ARGS)

# RFC 2544 throughput, translator vs kernel and XDP baselines (namespaces of
# its own, removed at the end). Not part of `make test`. ARGS=--quick for 2 s trials.
bench: bpf ts
	npm run bench -- $(ARGS)

bench-micro: bpf ts
	npm run bench:micro

fuzz: bpf ts
	npm run fuzz

# The daemon at scale (65,536 policies + 65,536 local SIDs): load time,
# add/delete latency, memory. Not part of `make test`.
bench-daemon: bpf ts
	npm run bench:daemon

clean:
	rm -rf build dist native/build
