#!/usr/bin/python3
"""Numbered frames for `npm run soak` (src/bench/soak.ts), over AF_PACKET.

send: writes a template frame (hex on stdin's first line) out of --dev at
      --rate frames/s for --seconds (paced in 1 ms ticks, so it sleeps rather
      than spins), with a sequence number patched in at --off: 8-byte magic,
      its complement, 4-byte sequence, its complement; each word next to its
      complement keeps the inner UDP checksum valid without recomputing it.
      A send that fails (interface missing) does not use up a sequence
      number; it is counted and the interface looked up again. Prints one
      JSON line: sent, errors, marks [[seq, CLOCK_MONOTONIC ns], ...] every
      20 ms and at the first send that works after failed ones (to date each
      sequence number: the one that ends an interface's absence exactly).
      It prints "sending" first. Between SIGUSR1 and SIGUSR2 it also marks every frame as it sends it
      ([seq, ns, 1]): the soak asks for it around the moment a recreated
      interface comes up, where a frame dated by interpolation between marks
      20 ms apart can be off by milliseconds (the sender sleeps 1 ms ticks,
      sends late frames in a burst, and may be preempted within one).
recv: counts frames carrying --magic that arrive (not outgoing) on any
      interface of the namespace, until "stop" on stdin or --seconds. A
      frame with the magic but without --ethertype is "untranslated". Prints
      one JSON line: ranges of sequence numbers seen, duplicates, reordered
      (arrived after a higher one), untranslated (a count, and the ranges of
      their sequence numbers: they crossed the translator untouched), and
      socketDrops: frames the kernel dropped because this socket's buffer was
      full (PACKET_STATISTICS; the receiver fell behind on a loaded host, not
      a loss of the translator), with socketDropMarks [[drops, ns], ...].
"""
import argparse
import json
import os
import select
import signal
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_STATISTICS = 6


def send(a):
    tmpl = bytearray(bytes.fromhex(sys.stdin.readline().strip()))
    magic = a.magic.encode()
    inv = bytes(b ^ 0xFF for b in magic)
    tmpl[a.off:a.off + 16] = magic + inv
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((a.dev, 0))
    seq = 0
    errors = 0
    marks = []
    start = time.monotonic_ns()
    end = start + int(a.seconds * 1e9)
    next_mark = start
    base_seq, base_t = 0, start  # pacing: seq due = base_seq + elapsed * rate
    burst = max(1, int(a.rate * 0.02))  # behind more than 20 ms: start again from now, no burst
    seq_at = a.off + 16
    failing = False
    dense = [False]
    signal.signal(signal.SIGUSR1, lambda *_: dense.__setitem__(0, True))
    signal.signal(signal.SIGUSR2, lambda *_: dense.__setitem__(0, False))
    print("sending", flush=True)  # the signals are safe from now on (before, SIGUSR1 would end the process)
    while True:
        now = time.monotonic_ns()
        if now >= end:
            break
        if now >= next_mark:
            marks.append([seq, now])
            next_mark += 20_000_000
        due = base_seq + (now - base_t) * a.rate / 1e9
        if due - seq > burst:
            base_seq, base_t, due = seq, now, seq + 1
        while seq < due:
            struct.pack_into("!II", tmpl, seq_at, seq, seq ^ 0xFFFFFFFF)
            if dense[0]:
                marks.append([seq, time.monotonic_ns(), 1])
            try:
                s.sendto(tmpl, (a.dev, 0))
                if failing:
                    marks.append([seq, time.monotonic_ns()])
                    failing = False
                seq += 1
            except OSError:
                errors += 1
                failing = True
                base_seq, base_t = seq, now  # do not catch up on frames that could not leave
                try:
                    s.close()
                    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                    s.bind((a.dev, 0))
                except OSError:
                    pass
                time.sleep(0.01)
                break
        time.sleep(0.001)
    marks.append([seq, time.monotonic_ns()])
    print(json.dumps({"sent": seq, "errors": errors, "marks": marks}), flush=True)


def recv(a):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    # Not bound to an interface: every one of the namespace, also one recreated later.
    magic = a.magic.encode()
    ethertype = int(a.ethertype, 16)
    seen = bytearray()
    utr = bytearray()
    dup = 0
    reordered = 0
    untranslated = 0
    frames = 0
    top = -1
    sock_drops = 0
    drop_marks = []
    print("ready", flush=True)
    deadline = time.monotonic() + a.seconds
    stdin = sys.stdin.fileno()
    while time.monotonic() < deadline:
        r, _, _ = select.select([s, stdin], [], [], 0.2)
        # Reading the statistics resets them: each read is what was dropped since the last.
        _, dropped = struct.unpack("II", s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        if dropped:
            sock_drops += dropped
            drop_marks.append([dropped, time.monotonic_ns()])
        if stdin in r:
            line = os.read(stdin, 64)
            if not line or b"stop" in line:
                break
        if s not in r:
            continue
        for _ in range(256):
            try:
                data, addr = s.recvfrom(4096, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            if addr[2] == PACKET_OUTGOING:
                continue
            i = data.find(magic)
            if i < 0 or len(data) < i + 24:
                continue
            seq, check = struct.unpack_from("!II", data, i + 16)
            if seq ^ check != 0xFFFFFFFF:
                continue
            if struct.unpack_from("!H", data, 12)[0] != ethertype:
                untranslated += 1
                if seq >= len(utr):
                    utr.extend(bytes(max(seq + 1 - len(utr), 65536)))
                utr[seq] = 1
                continue
            frames += 1
            if seq >= len(seen):
                seen.extend(bytes(max(seq + 1 - len(seen), 65536)))
            if seen[seq]:
                dup += 1
                continue
            seen[seq] = 1
            if seq < top:
                reordered += 1
            else:
                top = seq
    print(json.dumps({"frames": frames, "ranges": ranges_of(seen), "duplicated": dup, "reordered": reordered,
                      "untranslated": untranslated, "untranslatedRanges": ranges_of(utr),
                      "socketDrops": sock_drops, "socketDropMarks": drop_marks}), flush=True)


def ranges_of(bits):
    """Inclusive ranges of the indexes set in a bytearray of 0/1."""
    ranges = []
    i = 0
    n = len(bits)
    while i < n:
        j = bits.find(1, i)
        if j < 0:
            break
        k = bits.find(0, j)
        k = n if k < 0 else k
        ranges.append([j, k - 1])
        i = k
    return ranges


def main():
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("send")
    sp.add_argument("--dev", required=True)
    sp.add_argument("--off", type=int, required=True)
    sp.add_argument("--magic", required=True)
    sp.add_argument("--rate", type=float, required=True)
    sp.add_argument("--seconds", type=float, required=True)
    rp = sub.add_parser("recv")
    rp.add_argument("--magic", required=True)
    rp.add_argument("--ethertype", required=True)
    rp.add_argument("--seconds", type=float, required=True)
    for sub_p in (sp, rp):  # the soak's directory: how a later soak finds what a killed one left
        sub_p.add_argument("--owner", default="")
    a = p.parse_args()
    if len(a.magic) != 8:
        p.error("--magic: 8 characters")
    send(a) if a.cmd == "send" else recv(a)


if __name__ == "__main__":
    main()
