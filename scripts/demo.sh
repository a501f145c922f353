#!/usr/bin/env bash
# make demo: the lab (docs/lab.md). A UE's traffic crosses the gNB emulator
# (GTP-U), the translator (mup daemon: H.M.GTP4.D / End.M.GTP4.E) and the
# Linux kernel's SRv6 (End.DX4, seg6 encap) to a data network and back, all
# in network namespaces that `mup lab run` builds and removes again; ping,
# iperf3 TCP and UDP are measured on that path and on a plain routed one.
# On a kernel without SRv6 routes the lab says so and uses the kernel's SRH
# endpoint and our PEs instead (--core srh --pe mup, docs/lab.md).
# Report: build/lab/lab-run.{json,md}. The replay demo: make replay-demo.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "make demo builds network namespaces: run it as root" >&2
  exit 2
fi
exec node bin/mup.js lab run --out build/lab "$@"
