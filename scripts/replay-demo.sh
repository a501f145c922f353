#!/usr/bin/env bash
# make replay-demo: the replay demo (before the lab, this was make demo). Frames an N3 link would carry go through the
# compiled XDP program (BPF_PROG_TEST_RUN, nothing is sent on any network);
# the translated frames are written to a pcap and decoded by tshark.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/demo
in=build/demo/in.pcap
out=build/demo/out.pcap

echo "== 1. Input frames (test/fixtures/demo.py) =="
/usr/bin/python3 test/fixtures/demo.py "$in"
tshark -r "$in" 2>/dev/null

echo
echo "== 2. Translate: mup replay --config config/demo.yaml =="
node bin/mup.js replay --config config/demo.yaml --in "$in" --out "$out"

echo
echo "== 3. Output frames, decoded by tshark =="
fields() { tshark -r "$out" -Y "$1" -T fields -E header=y -E occurrence=a -E aggregator=' ' -E separator='|' "${@:2}" 2>/dev/null | column -t -s '|'; }
echo "-- uplink, now SRv6 (outer IPv6 SA/DA, SRH segment list, segments left, inner packet):"
fields 'ipv6 && !gtp' -e frame.number -e ipv6.src -e ipv6.dst -e ipv6.routing.srh.addr -e ipv6.routing.segleft -e _ws.col.Info
echo "-- downlink, now GTP-U (outer IPv4 SA/DA, UDP source port from the inner hash, TEID, QFI):"
tshark -r "$out" -Y 'gtp.message == 255' -T fields -E header=y -E occurrence=f -E separator='|' \
  -e frame.number -e ip.src -e ip.dst -e udp.srcport -e gtp.teid -e gtp.ext_hdr.pdu_ses_con.qos_flow_id -e _ws.col.Info \
  2>/dev/null | column -t -s '|'
echo "-- passed through unchanged:"
tshark -r "$out" -Y '!(gtp.message == 255) && !(ipv6 && !gtp)' 2>/dev/null

echo
echo "== 4. One translated frame in full (uplink GTP-U -> SRv6) =="
tshark -r "$out" -V -c 1 2>/dev/null | sed -n '/^Internet Protocol Version 6/,$p' | head -40
echo
echo "Frames: $in (in), $out (out). Open them in Wireshark to compare."
