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


def paced(a, n_ue, send_one):
    """The send loop of ues and dl: round-robin over n_ue UEs at --rate in
    total for --seconds (busy-wait pacing); send_one(i, sent, now) sends UE
    i's datagram number sent[i]. An OSError counts as sent (and so as lost).
    Prints "started" as it starts; returns the JSON line's fields."""
    total = int(a.rate * a.seconds)
    interval = 1e9 / a.rate
    sent = [0] * n_ue
    errors = 0
    mono = time.monotonic_ns
    print("started", flush=True)
    start = mono()
    n = 0
    while n < total:
        now = mono()
        if now < start + int(n * interval):
            continue
        i = n % n_ue
        try:
            send_one(i, sent, now)
        except OSError:
            errors += 1
        sent[i] += 1
        n += 1
    end = mono()
    return {"sent": sent, "total": n, "errors": errors, "start_ns": start, "end_ns": end, "rate": n * 1e9 / max(1, end - start)}


def ues(a):
    addrs = a.ues.split(",")
    socks = []
    for ad in addrs:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((ad, 0))
        socks.append(s.sendto)
    pad = b"\0" * max(0, a.size - UHDR.size)
    dst = (a.dst, a.port)
    pack = UHDR.pack

    def send_one(i, sent, now):
        socks[i](pack(UMAGIC, i, sent[i], now, 0) + pad, dst)

    print(json.dumps(paced(a, len(addrs), send_one)))


def parse_ue(data, size, n_ue):
    """(ue index or -1, seq, sent ns, site, ok)."""
    if len(data) < UHDR.size:
        return -1, 0, 0, 0, False
    magic, ue, seq, ts, site = UHDR.unpack_from(data)
    if magic != UMAGIC or ue >= n_ue:
        return -1, 0, 0, 0, False
    ok = len(data) == size and data[UHDR.size:].count(0) == size - UHDR.size
    return ue, seq, ts, site, ok


def receive_ues(a, s, space, accept):
    """The receive loop of echo and back on socket s (bound, with a
    timeout): says "ready", then records (UE, sequence, kernel arrival ns,
    site, send ns) of every per-UE datagram that accept(ue, site, data, anc,
    src) takes, until --seconds, --idle seconds without a datagram once some
    arrived (--idle 0: never), or SIGTERM and the socket drained. A datagram
    that is not a valid per-UE one, or that accept refuses, is counted as
    malformed (for its UE when the index is valid, else as unattributed).
    space: the ancillary buffer (timestamp included). Returns the JSON
    line's fields."""
    n_ue = len(a.ues.split(","))
    arrival = kernel_stamps(s)
    stop_on_sigterm()  # before "ready": the caller may ask it to stop as soon as it reads that
    print("ready", flush=True)
    rec_ue, rec_seq, rec_t, rec_site, rec_sent = [], [], [], [], []
    bad = [0] * n_ue
    unattributed = 0
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
        ue, seq, ts, site, ok = parse_ue(data, a.size, n_ue)
        if ue < 0:
            unattributed += 1
            continue
        if not ok or not accept(ue, site, data, anc, src):
            bad[ue] += 1
            continue
        rec_ue.append(ue)
        rec_seq.append(seq)
        rec_t.append(t)
        rec_site.append(site)
        rec_sent.append(ts)
    return {"ue": rec_ue, "seq": rec_seq, "t": rec_t, "site": rec_site, "sent": rec_sent, "malformed": bad, "unattributed": unattributed}


def udp_socket(bind, port):
    """A bound UDP socket with big buffers and a 50 ms receive timeout (echo, back)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    big_buffers(s)
    s.bind((bind, port))
    s.settimeout(0.05)
    return s


def echo(a):
    addrs = a.ues.split(",")
    s = udp_socket(a.bind, a.port)
    site = bytes([a.site])
    off = UHDR.size - 1
    errors = []

    def accept(ue, st, data, _anc, src):
        if st != 0 or src[0] != addrs[ue]:
            return False
        try:
            s.sendto(data[:off] + site + data[off + 1:], (addrs[ue], a.reply_port))
        except OSError:
            errors.append(1)
        return True

    out = receive_ues(a, s, socket.CMSG_SPACE(TS.size), accept)
    del out["site"]  # all 0: from the UEs
    out["echo_errors"] = len(errors)
    print(json.dumps(out))


def back(a):
    addrs = a.ues.split(",")
    s = udp_socket("0.0.0.0", a.port)
    s.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)

    def accept(ue, site, _data, anc, _src):
        dst = None
        for level, typ, val in anc:
            if level == socket.IPPROTO_IP and typ == IP_PKTINFO and len(val) >= 12:
                dst = socket.inet_ntoa(val[8:12])  # struct in_pktinfo: ifindex, spec_dst, addr
        return site in (1, 2) and dst == addrs[ue]

    print(json.dumps(receive_ues(a, s, socket.CMSG_SPACE(12) + socket.CMSG_SPACE(TS.size), accept)))


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
    pack = UHDR.pack
    send = {1: sa.sendto, 2: sb.sendto}
    dsts = [(ad, a.port) for ad in addrs]
    switch = {"switch_ns": None, "switch_seq": None}

    def send_one(i, sent, now):
        if move and switch["switch_ns"] is None and 0 <= a.move < n_ue:
            site_of[a.move] = 2
            switch["switch_ns"] = now
            switch["switch_seq"] = sent[a.move]
        st = site_of[i]
        send[st](pack(UMAGIC, i, sent[i], now, st) + pad, dsts[i])

    print(json.dumps({**paced(a, n_ue, send_one), **switch}))


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
