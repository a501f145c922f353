#!/usr/bin/python3
"""The MEC relocation stream of `mup lab relocate` (src/lab/relocate.ts).

send: sequence-numbered UDP datagrams at a steady rate (busy-wait pacing,
      one sendto per packet), then one JSON line {sent, seconds, rate}.
recv: prints "ready", records (sequence, CLOCK_MONOTONIC arrival ns) of every
      datagram until --seconds have passed, or --idle seconds without a
      datagram once some arrived; then one JSON line.

ues:  one UDP socket per UE address (--ues), datagrams round-robin over the
      UEs at --rate in total (UE i's sequence numbers count its own
      datagrams), then one JSON line {sent: [per UE], ...}.
echo: at a MEC site: records (UE, sequence, arrival ns, send ns) of every
      per-UE datagram and sends it back, with the site's byte set, to the
      UE's address at --reply-port; then one JSON line.
back: at the UEs: one socket on --port records (UE, sequence, arrival ns,
      site, send ns from the payload) of every echo (or downlink-stream
      datagram), checking with IP_PKTINFO that it reached the UE its header
      names; then one JSON line.
dl:   the downlink stream: from a MEC site to every UE (--ues) at --port,
      round-robin at --rate in total (UE i's sequence numbers count its own
      datagrams), from the site that serves the UE: site A (the namespace
      it starts in) for all at first; SIGUSR1 moves UE --move to site B (a
      socket opened in the network namespace --other-netns, a path under
      /run/netns) with its sequence numbers continuing, as a MEC
      application that relocates with its user would; then one JSON line
      {sent: [per UE], switch_ns, switch_seq, ...}.

echo and back run until SIGTERM and then until their socket is empty (or --seconds, or --idle seconds without a
datagram once some arrived; --idle 0: never), then print their JSON line.
echo and back take arrival times from the kernel (SO_TIMESTAMPNS), not from
the moment Python reads the datagram: on a busy host a receiver can lag by
tens of milliseconds, which would otherwise show as reordering between
sites.

Per-UE payload (ues/echo/back): 8-byte magic MUPUES01, 4-byte UE index,
8-byte sequence number, 8-byte send time (CLOCK_MONOTONIC ns), 1-byte site
(0 from the UE, 1 = A, 2 = B after the echo), zero padding to --size. A
datagram that is not exactly that (length, magic, UE index, the UE's
address as source or destination, padding) is counted as malformed: for
its UE when the index is valid, else as unattributed.

Payload of send/recv: 8-byte magic, 8-byte sequence number, 8-byte send time (ns,
CLOCK_MONOTONIC, the same clock as Node's process.hrtime on this host),
padded to --size bytes. A datagram with another magic or length is counted
as malformed.
"""
import argparse
import json
import signal
import socket
import struct
import sys
import time

MAGIC = b"MUPRELOC"
HDR = struct.Struct("!8sQQ")


def send(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if a.tos:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, a.tos)
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
    big_buffers(s)
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


IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)  # <linux/in.h>; not exported by every Python
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # <asm-generic/socket.h>
TS = struct.Struct("@qq")  # struct timespec


def kernel_stamps(s):
    """Arrival times stamped by the kernel (SO_TIMESTAMPNS, CLOCK_REALTIME) as
    CLOCK_MONOTONIC ns: a receiver's own lag (a busy host) does not move them."""
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    off = time.clock_gettime_ns(time.CLOCK_REALTIME) - time.monotonic_ns()

    def arrival(anc, fallback):
        for level, typ, val in anc:
            if level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS and len(val) >= TS.size:
                sec, nsec = TS.unpack_from(val)
                return sec * 1_000_000_000 + nsec - off
        return fallback

    return arrival
STOP = []
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)


def big_buffers(s):
    """32 MiB socket buffers, past net.core.rmem_max (root: the *FORCE
    options): a receiver that falls behind on a busy host must not drop."""
    try:
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
        s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 32 << 20)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)


def stop_on_sigterm():
    """echo/back: SIGTERM ends the loop (the caller sends it once the stream and its echoes are over)."""
    signal.signal(signal.SIGTERM, lambda *_: STOP.append(1))


UMAGIC = b"MUPUES01"
UHDR = struct.Struct("!8sIQQB")


def ues(a):
    addrs = a.ues.split(",")
    socks = []
    for ad in addrs:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((ad, 0))
        socks.append(s.sendto)
    n_ue = len(addrs)
    pad = b"\0" * max(0, a.size - UHDR.size)
    dst = (a.dst, a.port)
    total = int(a.rate * a.seconds)
    interval = 1e9 / a.rate
    sent = [0] * n_ue
    errors = 0
    mono = time.monotonic_ns
    pack = UHDR.pack
    print("started", flush=True)
    start = mono()
    n = 0
    while n < total:
        now = mono()
        if now < start + int(n * interval):
            continue
        i = n % n_ue
        try:
            socks[i](pack(UMAGIC, i, sent[i], now, 0) + pad, dst)
        except OSError:  # counts as sent (and so as lost)
            errors += 1
        sent[i] += 1
        n += 1
    end = mono()
    print(json.dumps({"sent": sent, "total": n, "errors": errors, "start_ns": start, "end_ns": end, "rate": n * 1e9 / max(1, end - start)}))


def parse_ue(data, size, n_ue):
    """(ue index or -1, seq, sent ns, site, ok)."""
    if len(data) < UHDR.size:
        return -1, 0, 0, 0, False
    magic, ue, seq, ts, site = UHDR.unpack_from(data)
    if magic != UMAGIC or ue >= n_ue:
        return -1, 0, 0, 0, False
    ok = len(data) == size and data[UHDR.size:].count(0) == size - UHDR.size
    return ue, seq, ts, site, ok


def echo(a):
    addrs = a.ues.split(",")
    n_ue = len(addrs)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    big_buffers(s)
    s.bind((a.bind, a.port))
    s.settimeout(0.05)
    stop_on_sigterm()  # before "ready": the caller may ask it to stop as soon as it reads that
    print("ready", flush=True)
    arrival = kernel_stamps(s)
    space = socket.CMSG_SPACE(TS.size)
    rec_ue, rec_seq, rec_t, rec_sent = [], [], [], []
    bad = [0] * n_ue
    unattributed = 0
    echo_errors = 0
    site = bytes([a.site])
    off = UHDR.size - 1
    deadline = time.monotonic() + a.seconds
    last = None
    mono = time.monotonic_ns
    while time.monotonic() < deadline:
        if last is not None and a.idle > 0 and time.monotonic() - last > a.idle:
            break
        try:
            data, anc, _flags, src = s.recvmsg(65535, space)
        except socket.timeout:
            if STOP:  # asked to stop, and the socket is drained
                break
            continue
        t = arrival(anc, mono())
        last = time.monotonic()
        ue, seq, ts, st, ok = parse_ue(data, a.size, n_ue)
        if ue < 0:
            unattributed += 1
            continue
        if not ok or st != 0 or src[0] != addrs[ue]:
            bad[ue] += 1
            continue
        rec_ue.append(ue)
        rec_seq.append(seq)
        rec_t.append(t)
        rec_sent.append(ts)
        try:
            s.sendto(data[:off] + site + data[off + 1:], (addrs[ue], a.reply_port))
        except OSError:
            echo_errors += 1
    print(json.dumps({"ue": rec_ue, "seq": rec_seq, "t": rec_t, "sent": rec_sent, "malformed": bad, "unattributed": unattributed, "echo_errors": echo_errors}))


def back(a):
    addrs = a.ues.split(",")
    n_ue = len(addrs)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    big_buffers(s)
    s.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
    s.bind(("0.0.0.0", a.port))
    s.settimeout(0.05)
    stop_on_sigterm()  # before "ready": the caller may ask it to stop as soon as it reads that
    print("ready", flush=True)
    rec_ue, rec_seq, rec_t, rec_site, rec_sent = [], [], [], [], []
    bad = [0] * n_ue
    unattributed = 0
    deadline = time.monotonic() + a.seconds
    last = None
    mono = time.monotonic_ns
    arrival = kernel_stamps(s)
    space = socket.CMSG_SPACE(12) + socket.CMSG_SPACE(TS.size)
    while time.monotonic() < deadline:
        if last is not None and a.idle > 0 and time.monotonic() - last > a.idle:
            break
        try:
            data, anc, _flags, _src = s.recvmsg(65535, space)
        except socket.timeout:
            if STOP:  # asked to stop, and the socket is drained
                break
            continue
        t = arrival(anc, mono())
        last = time.monotonic()
        dst = None
        for level, typ, val in anc:
            if level == socket.IPPROTO_IP and typ == IP_PKTINFO and len(val) >= 12:
                dst = socket.inet_ntoa(val[8:12])  # struct in_pktinfo: ifindex, spec_dst, addr
        ue, seq, ts, site, ok = parse_ue(data, a.size, n_ue)
        if ue < 0:
            unattributed += 1
            continue
        if not ok or site not in (1, 2) or dst != addrs[ue]:
            bad[ue] += 1
            continue
        rec_ue.append(ue)
        rec_seq.append(seq)
        rec_t.append(t)
        rec_site.append(site)
        rec_sent.append(ts)
    print(json.dumps({"ue": rec_ue, "seq": rec_seq, "t": rec_t, "site": rec_site, "sent": rec_sent, "malformed": bad, "unattributed": unattributed}))


CLONE_NEWNET = 0x40000000


def socket_in_netns(path, bind):
    """A UDP socket created in the network namespace `path` (the thread
    goes back to its own afterwards; a socket keeps the namespace it was
    created in). Python 3.11 has no os.setns: libc's setns(2)."""
    import ctypes
    import os
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    other = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(other, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            big_buffers(s)
            s.bind((bind, 0))
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
        return s
    finally:
        os.close(own)
        os.close(other)


def dl(a):
    addrs = a.ues.split(",")
    n_ue = len(addrs)
    sa = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    big_buffers(sa)
    sa.bind((a.src, 0))
    sb = socket_in_netns(a.other_netns, a.src)
    site_of = [1] * n_ue
    move = []
    signal.signal(signal.SIGUSR1, lambda *_: move.append(1))
    pad = b"\0" * max(0, a.size - UHDR.size)
    total = int(a.rate * a.seconds)
    interval = 1e9 / a.rate
    sent = [0] * n_ue
    errors = 0
    mono = time.monotonic_ns
    pack = UHDR.pack
    send = {1: sa.sendto, 2: sb.sendto}
    dsts = [(ad, a.port) for ad in addrs]
    switch_ns = None
    switch_seq = None
    print("started", flush=True)
    start = mono()
    n = 0
    while n < total:
        now = mono()
        if now < start + int(n * interval):
            continue
        if move and switch_ns is None and 0 <= a.move < n_ue:
            site_of[a.move] = 2
            switch_ns = now
            switch_seq = sent[a.move]
        i = n % n_ue
        st = site_of[i]
        try:
            send[st](pack(UMAGIC, i, sent[i], now, st) + pad, dsts[i])
        except OSError:  # counts as sent (and so as lost)
            errors += 1
        sent[i] += 1
        n += 1
    end = mono()
    print(json.dumps({"sent": sent, "total": n, "errors": errors, "start_ns": start, "end_ns": end, "rate": n * 1e9 / max(1, end - start),
                      "switch_ns": switch_ns, "switch_seq": switch_seq}))


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
    sp.add_argument("--tos", type=int, default=0, help="IPv4 TOS byte (DSCP << 2 | ECN)")
    rp = sub.add_parser("recv")
    rp.add_argument("--bind", required=True)
    rp.add_argument("--port", type=int, required=True)
    rp.add_argument("--seconds", type=float, required=True)
    rp.add_argument("--idle", type=float, default=1.0)
    rp.add_argument("--size", type=int, default=100)
    up = sub.add_parser("ues")
    up.add_argument("--ues", required=True, help="comma-separated UE addresses; index = position")
    up.add_argument("--dst", required=True)
    up.add_argument("--port", type=int, required=True)
    up.add_argument("--rate", type=float, required=True)
    up.add_argument("--seconds", type=float, required=True)
    up.add_argument("--size", type=int, default=100)
    ep = sub.add_parser("echo")
    ep.add_argument("--ues", required=True)
    ep.add_argument("--bind", required=True)
    ep.add_argument("--port", type=int, required=True)
    ep.add_argument("--reply-port", type=int, required=True)
    ep.add_argument("--site", type=int, required=True, choices=(1, 2))
    ep.add_argument("--seconds", type=float, required=True)
    ep.add_argument("--idle", type=float, default=1.0)
    ep.add_argument("--size", type=int, default=100)
    bp = sub.add_parser("back")
    bp.add_argument("--ues", required=True)
    bp.add_argument("--port", type=int, required=True)
    bp.add_argument("--seconds", type=float, required=True)
    bp.add_argument("--idle", type=float, default=1.0)
    bp.add_argument("--size", type=int, default=100)
    dp = sub.add_parser("dl")
    dp.add_argument("--ues", required=True)
    dp.add_argument("--src", required=True, help="the sites' (anycast) source address, in both namespaces")
    dp.add_argument("--other-netns", required=True, help="site B's network namespace, e.g. /run/netns/mlab-mecb")
    dp.add_argument("--move", type=int, required=True, help="index in --ues of the UE SIGUSR1 moves to site B")
    dp.add_argument("--port", type=int, required=True)
    dp.add_argument("--rate", type=float, required=True)
    dp.add_argument("--seconds", type=float, required=True)
    dp.add_argument("--size", type=int, default=100)
    a = p.parse_args()
    {"send": send, "recv": recv, "ues": ues, "echo": echo, "back": back, "dl": dl}[a.cmd](a)


if __name__ == "__main__":
    main()
