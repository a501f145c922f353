#!/usr/bin/python3
"""Traffic of the BGP lab (src/lab/bgp-lab.ts), sequence-numbered per UE.

send (in the gNB namespace): for each UE i, one UDP socket bound to the gNB
      address, source port --sport-base + i, sending GTP-U G-PDUs (flags
      0x34, PDU Session Container UL with the UE's QFI, the UE's uplink TEID)
      to the translators' N3 address port 2152; inside, IPv4/UDP from the
      UE's address to --dst:--dport. The kernel routes them over its
      multipath route; with fib_multipath_hash_policy 1 the source port
      picks the translator, so each UE sticks to one. Datagrams go
      round-robin over the UEs at --rate in total for --seconds; then one
      JSON line {sent: [per UE], seconds}.
recv (at a MEC site): records (UE, sequence, arrival ns) of every datagram
      on --dport until SIGTERM (then until the socket is empty), then one
      JSON line {site, got: [[ue, seq, ns, sent_ns], ...]} (sent_ns: the
      send time the sender wrote into the payload). With --echo PORT it sends
      each datagram back to its source address at PORT (the downlink).
gtprecv (in the gNB namespace): a UDP socket on the gNB address port 2152;
      each G-PDU's header is parsed (extension chain included), the inner
      IPv4/UDP must carry our payload; records (UE, sequence, arrival ns,
      TEID, the uplink send time in the payload) until SIGTERM, then one
      JSON line {got: [[ue, seq, ns, teid, sent_ns]], malformed}.

Inner payload: 8-byte magic MUPBGP01, 4-byte UE index, 8-byte sequence
number, 8-byte send time (CLOCK_MONOTONIC ns), zero padding to --size.
"""
import argparse
import json
import select
import signal
import socket
import struct
import sys
import time

MAGIC = b"MUPBGP01"
HDR = struct.Struct("!8sIQQ")


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def inner(src, dst, dport, payload):
    udp = struct.pack("!HHHH", 5000, dport, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return ip + udp


def gpdu(teid, qfi, pkt):
    # flags: version 1, PT 1, E 1; extension: PDU Session Container, UL (type 1), QFI.
    ext = bytes([1, 0x10, qfi & 0x3F, 0])
    return struct.pack("!BBHIHBB", 0x34, 0xFF, 4 + len(ext) + len(pkt), teid, 0, 0, 0x85) + ext + pkt


def send(a):
    ues = json.loads(a.ues)  # [[addr, teid, qfi], ...]
    socks = []
    for i in range(len(ues)):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((a.src, a.sport_base + i))
        s.connect((a.n3, 2152))
        socks.append(s)
    pad = b"\0" * max(0, a.size - HDR.size)
    total = int(a.rate * a.seconds)
    interval = 1e9 / a.rate
    sent = [0] * len(ues)
    # SIGUSR1: stop early (the caller's scenario is over) and report what was sent.
    stop = [False]
    signal.signal(signal.SIGUSR1, lambda *_: stop.__setitem__(0, True))
    start = time.monotonic_ns()
    for k in range(total):
        if stop[0]:
            break
        due = start + int(k * interval)
        while time.monotonic_ns() < due:
            pass
        i = k % len(ues)
        addr, teid, qfi = ues[i]
        payload = HDR.pack(MAGIC, i, sent[i], time.monotonic_ns()) + pad
        try:
            socks[i].send(gpdu(teid, qfi, inner(addr, a.dst, a.dport, payload)))
            sent[i] += 1
        except OSError:
            sent[i] += 1  # counted as sent: a local refusal is a loss too
    print(json.dumps({"sent": sent, "seconds": (time.monotonic_ns() - start) / 1e9}), flush=True)


def recv(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("0.0.0.0", a.dport))
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    got = []
    bad = 0
    print("ready", flush=True)
    while True:
        r, _, _ = select.select([s], [], [], 0.05)
        if not r:
            if stop[0]:
                break
            continue
        d, src = s.recvfrom(65535)
        now = time.monotonic_ns()
        if len(d) < HDR.size or d[:8] != MAGIC:
            bad += 1
            continue
        _, ue, seq, sent_ns = HDR.unpack_from(d)
        got.append([ue, seq, now, sent_ns])
        if a.echo:
            try:
                s.sendto(d, (src[0], a.echo))
            except OSError:
                pass
    print(json.dumps({"site": a.site, "got": got, "malformed": bad}), flush=True)


def gtprecv(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind((a.src, 2152))
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    got = []
    bad = 0
    print("ready", flush=True)
    while True:
        r, _, _ = select.select([s], [], [], 0.05)
        if not r:
            if stop[0]:
                break
            continue
        d = s.recv(65535)
        now = time.monotonic_ns()
        try:
            flags, mtype, length, teid = struct.unpack_from("!BBHI", d)
            if flags >> 5 != 1 or mtype != 0xFF or length != len(d) - 8:
                raise ValueError
            off = 8
            if flags & 0x07:
                nxt = d[off + 3]
                off += 4
                while nxt:
                    n = d[off] * 4
                    if n == 0:
                        raise ValueError
                    nxt = d[off + n - 1]
                    off += n
            ip = d[off:]
            ihl = (ip[0] & 0x0F) * 4
            if ip[0] >> 4 != 4 or ip[9] != 17:
                raise ValueError
            payload = ip[ihl + 8:]
            if len(payload) < HDR.size or payload[:8] != MAGIC:
                raise ValueError
            _, ue, seq, sent_ns = HDR.unpack_from(payload)
            got.append([ue, seq, now, teid, sent_ns])
        except (ValueError, IndexError, struct.error):
            bad += 1
    print(json.dumps({"got": got, "malformed": bad}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["send", "recv", "gtprecv"])
    p.add_argument("--src")
    p.add_argument("--n3")
    p.add_argument("--ues")
    p.add_argument("--sport-base", type=int, default=20000)
    p.add_argument("--dst")
    p.add_argument("--dport", type=int, default=7000)
    p.add_argument("--rate", type=float, default=1000)
    p.add_argument("--seconds", type=float, default=2)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--site", default="")
    p.add_argument("--echo", type=int, default=0)
    a = p.parse_args()
    {"send": send, "recv": recv, "gtprecv": gtprecv}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
