#!/usr/bin/python3
"""The MEC relocation stream of `mup lab relocate` (src/lab/relocate.ts).

send: sequence-numbered UDP datagrams at a steady rate (busy-wait pacing,
      one sendto per packet), then one JSON line {sent, seconds, rate}.
recv: prints "ready", records (sequence, CLOCK_MONOTONIC arrival ns) of every
      datagram until --seconds have passed, or --idle seconds without a
      datagram once some arrived; then one JSON line.

Payload: 8-byte magic, 8-byte sequence number, 8-byte send time (ns,
CLOCK_MONOTONIC, the same clock as Node's process.hrtime on this host),
padded to --size bytes. A datagram with another magic or length is counted
as malformed.
"""
import argparse
import json
import socket
import struct
import sys
import time

MAGIC = b"MUPRELOC"
HDR = struct.Struct("!8sQQ")


def send(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((a.src, 0))
    pad = b"\0" * max(0, a.size - HDR.size)
    dst = (a.dst, a.port)
    total = int(a.rate * a.seconds)
    interval = 1e9 / a.rate
    start = time.monotonic_ns()
    sent = 0
    pack = HDR.pack
    sendto = s.sendto
    mono = time.monotonic_ns
    while sent < total:
        now = mono()
        due = start + int(sent * interval)
        if now < due:
            continue
        try:
            sendto(pack(MAGIC, sent, now) + pad, dst)
        except OSError as e:  # no buffer space: counts as sent and lost
            print(json.dumps({"send_error": str(e), "seq": sent}), file=sys.stderr)
        sent += 1
    end = time.monotonic_ns()
    print(json.dumps({"sent": sent, "start_ns": start, "end_ns": end, "rate": sent * 1e9 / max(1, end - start)}))


def recv(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((a.bind, a.port))
    s.settimeout(0.05)
    print("ready", flush=True)
    seqs = []
    times = []
    sent = []
    malformed = 0
    deadline = time.monotonic() + a.seconds
    last = None
    mono = time.monotonic_ns
    while time.monotonic() < deadline:
        if last is not None and time.monotonic() - last > a.idle:
            break
        try:
            data = s.recv(65535)
        except socket.timeout:
            continue
        t = mono()
        last = time.monotonic()
        if len(data) != a.size or data[:8] != MAGIC:
            malformed += 1
            continue
        _, seq, ts = HDR.unpack_from(data)
        seqs.append(seq)
        times.append(t)
        sent.append(ts)
    print(json.dumps({"seqs": seqs, "times": times, "sent": sent, "malformed": malformed}))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("send")
    sp.add_argument("--src", required=True)
    sp.add_argument("--dst", required=True)
    sp.add_argument("--port", type=int, required=True)
    sp.add_argument("--rate", type=float, required=True)
    sp.add_argument("--seconds", type=float, required=True)
    sp.add_argument("--size", type=int, default=100)
    rp = sub.add_parser("recv")
    rp.add_argument("--bind", required=True)
    rp.add_argument("--port", type=int, required=True)
    rp.add_argument("--seconds", type=float, required=True)
    rp.add_argument("--idle", type=float, default=1.0)
    rp.add_argument("--size", type=int, default=100)
    a = p.parse_args()
    send(a) if a.cmd == "send" else recv(a)


if __name__ == "__main__":
    main()
