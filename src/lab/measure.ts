/**
 * The lab's measurements, each on the translated path (UE 10.45.0.2: GTP-U,
 * H.M.GTP4.D / End.M.GTP4.E, kernel SRv6) and on the plain path (UE
 * 10.99.0.2: the same namespaces and veths, routed IPv4): ping, iperf3 TCP,
 * iperf3 UDP; a short capture on both wires decoded by tshark.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { nsRun, run, sleep } from './sh.js';
import type { LabTopology } from './topology.js';

export type PathName = 'translated' | 'plain';

export interface PingResult {
  readonly sent: number;
  readonly received: number;
  readonly lossPct: number;
  readonly rttMs: { readonly min: number; readonly median: number; readonly max: number } | null;
}

export interface TcpResult {
  readonly seconds: number;
  readonly gbps: number;
  readonly retransmits: number;
}

export interface UdpResult {
  readonly seconds: number;
  readonly offeredMbps: number;
  readonly receivedMbps: number;
  readonly packets: number;
  readonly lost: number;
  readonly lossPct: number;
  readonly datagramBytes: number;
  /** What the iperf3 client managed to send (a busy host sends less than offered). */
  readonly sentMbps: number;
  /** Datagrams the data network's kernel dropped because the iperf3 server's socket buffer was full (nstat UdpRcvbufErrors). */
  readonly rcvbufErrors: number;
  /** Socket buffer asked of iperf3 (-w) on both ends. */
  readonly socketBuffer: string;
}

/** UDP socket buffer for iperf3 UDP (-w, both ends): the receiving application, not the path, should be what runs out last. */
export const UDP_SOCKET_BUFFER = '4M';

const srcOf = (t: LabTopology, path: PathName): string => (path === 'translated' ? t.ue.addr : t.ue.plainAddr);

/** ping -c count from the UE's address of `path` to the data network. */
export async function ping(t: LabTopology, path: PathName, count: number, dst = t.dn.addr, interval = '0.05'): Promise<PingResult> {
  return pingFrom(t.ns.ue, srcOf(t, path), dst, count, interval);
}

/**
 * The RTT floor of this host: one veth hop (dn to the core's address on
 * that link), no XDP, no TC, the same ping. On a VM whose idle vCPUs sleep
 * between pings, every hop pays a wake-up; this row says how much.
 */
export async function pingOneHop(t: LabTopology, count: number, interval = '0.05'): Promise<PingResult> {
  return pingFrom(t.ns.dn, t.dn.addr, t.core.dnLink, count, interval);
}

async function pingFrom(ns: string, src: string, dst: string, count: number, interval: string): Promise<PingResult> {
  const r = await nsRun(ns, 'ping', ['-n', '-c', String(count), '-i', interval, '-W', '1', '-I', src, dst], {
    allowFail: true,
    timeout: count * 1000 + 10_000,
  });
  const rtts = [...r.stdout.matchAll(/time=([\d.]+) ms/g)].map((m) => Number(m[1])).sort((a, b) => a - b);
  const received = rtts.length;
  const median = received === 0 ? 0 : received % 2 === 1 ? rtts[(received - 1) / 2]! : (rtts[received / 2 - 1]! + rtts[received / 2]!) / 2;
  return {
    sent: count,
    received,
    lossPct: (100 * (count - received)) / count,
    rttMs: received === 0 ? null : { min: rtts[0]!, median, max: rtts[received - 1]! },
  };
}

/** An iperf3 server in dn, on the data network's address; stop() kills it (by its pid). */
export async function iperfServer(t: LabTopology, port = 5201): Promise<{ stop: () => Promise<void> }> {
  const child: ChildProcess = spawn('ip', ['netns', 'exec', t.ns.dn, 'iperf3', '-s', '--forceflush', '-B', t.dn.addr, '-p', String(port)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout?.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const deadline = Date.now() + 5000;
  while (!out.includes('Server listening')) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`iperf3 server in ${t.ns.dn} did not start: ${out.trim()}`);
    }
    await sleep(50);
  }
  return {
    stop: async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      await Promise.race([exited, sleep(2000)]);
      if (child.exitCode === null) child.kill('SIGKILL');
    },
  };
}

interface IperfJson {
  error?: string;
  end?: {
    sum_sent?: { bits_per_second: number; retransmits?: number; seconds: number };
    sum_received?: { bits_per_second: number; seconds: number };
    sum?: { bits_per_second: number; lost_packets: number; packets: number; lost_percent: number; seconds: number };
  };
}

async function iperf(t: LabTopology, path: PathName, args: readonly string[], seconds: number, port: number): Promise<IperfJson> {
  const r = await nsRun(t.ns.ue, 'iperf3', ['-c', t.dn.addr, '-B', srcOf(t, path), '-p', String(port), '-t', String(seconds), '-J', ...args], {
    allowFail: true,
    timeout: (seconds + 20) * 1000,
  });
  let j: IperfJson;
  try {
    j = JSON.parse(r.stdout) as IperfJson;
  } catch {
    throw new Error(`iperf3 ${path}: no JSON result (exit ${r.exitCode}): ${r.stderr.trim() || r.stdout.slice(0, 200)}`);
  }
  if (j.error !== undefined) throw new Error(`iperf3 ${path}: ${j.error}`);
  return j;
}

/** iperf3 TCP, one stream, UE -> data network. */
export async function tcp(t: LabTopology, path: PathName, seconds: number, port = 5201): Promise<TcpResult> {
  const j = await iperf(t, path, [], seconds, port);
  const rx = j.end?.sum_received;
  if (rx === undefined) throw new Error(`iperf3 TCP ${path}: no receiver summary`);
  return { seconds: rx.seconds, gbps: rx.bits_per_second / 1e9, retransmits: j.end?.sum_sent?.retransmits ?? 0 };
}

/** iperf3 UDP at `mbps` offered, `bytes`-byte datagrams, UE -> data network; loss as the server counted it. */
export async function udp(t: LabTopology, path: PathName, seconds: number, mbps: number, bytes: number, port = 5201): Promise<UdpResult> {
  // Absolute values, without touching nstat's history file (shared by every namespace).
  const rcvbufErrors = async (): Promise<number> =>
    Number(/UdpRcvbufErrors\s+(\d+)/.exec((await nsRun(t.ns.dn, 'nstat', ['-asz', 'UdpRcvbufErrors'])).stdout)?.[1] ?? NaN);
  const before = await rcvbufErrors();
  const j = await iperf(t, path, ['-u', '-b', `${mbps}M`, '-l', String(bytes), '-w', UDP_SOCKET_BUFFER], seconds, port);
  const s = j.end?.sum;
  if (s === undefined) throw new Error(`iperf3 UDP ${path}: no summary`);
  const rcvbuf = (await rcvbufErrors()) - before;
  return {
    sentMbps: (s.packets * bytes * 8) / s.seconds / 1e6,
    rcvbufErrors: rcvbuf,
    socketBuffer: UDP_SOCKET_BUFFER,
    seconds: s.seconds,
    offeredMbps: mbps,
    receivedMbps: (s.bits_per_second * (s.packets - s.lost_packets)) / Math.max(1, s.packets) / 1e6,
    packets: s.packets,
    lost: s.lost_packets,
    lossPct: s.lost_percent,
    datagramBytes: bytes,
  };
}

export interface WireCapture {
  /** Which wire: N3 (gnb's veth to the translator) or SRv6 (core's veth to the translator). */
  readonly wire: 'N3' | 'SRv6';
  readonly ns: string;
  readonly dev: string;
  readonly file: string;
  readonly frames: number;
  /** tshark's detail of the first uplink frame. */
  readonly decoded: string;
  /** tshark's one-line summaries of every captured frame. */
  readonly summary: string[];
  /** Frames tshark calls malformed or flags with an error. */
  readonly malformed: number;
}

/**
 * Capture `count` frames on each wire while `traffic` runs, then decode
 * them with tshark. N3: UDP 2152 on the gNB's N3 veth; SRv6: IPv6 on the
 * core's veth facing the translator.
 */
export async function captureWires(t: LabTopology, dir: string, count: number, traffic: () => Promise<unknown>): Promise<WireCapture[]> {
  const wires = [
    { wire: 'N3' as const, ns: t.ns.gnb, dev: t.gnb.n3, filter: 'udp port 2152', file: `${dir}/n3.pcap`, detail: 'gtp' },
    { wire: 'SRv6' as const, ns: t.ns.core, dev: t.core.toMup, filter: 'ip6 and not icmp6', file: `${dir}/srv6.pcap`, detail: 'ipv6' },
  ];
  const procs = wires.map((w) => {
    const child = spawn('ip', ['netns', 'exec', w.ns, 'tcpdump', '-i', w.dev, '-U', '-c', String(count), '-s', '256', '-w', w.file, w.filter], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    child.stderr?.on('data', (c: Buffer) => (err += c.toString()));
    const done = new Promise<void>((r) => child.once('exit', () => r()));
    return { child, done, err: () => err };
  });
  // tcpdump prints "listening on" once its socket is open.
  const deadline = Date.now() + 5000;
  while (!procs.every((p) => p.err().includes('listening on'))) {
    if (Date.now() > deadline || procs.some((p) => p.child.exitCode !== null)) {
      for (const p of procs) p.child.kill('SIGKILL');
      throw new Error(`tcpdump did not start: ${procs.map((p) => p.err().trim()).join(' | ')}`);
    }
    await sleep(20);
  }
  try {
    await traffic();
    await Promise.race([Promise.all(procs.map((p) => p.done)), sleep(3000)]);
  } finally {
    for (const p of procs) if (p.child.exitCode === null) p.child.kill('SIGINT');
    await Promise.race([Promise.all(procs.map((p) => p.done)), sleep(2000)]);
    for (const p of procs) if (p.child.exitCode === null) p.child.kill('SIGKILL');
  }
  // One tshark for the summaries and the first frame's detail, one for the
  // full detail (expert errors), per wire, all at once (tshark starts slowly).
  return Promise.all(
    wires.map(async (w) => {
      const [detail, verbose] = await Promise.all([
        // 60 s: four tshark at once took over 20 s on this 2-CPU host at load 20.
        run('tshark', ['-n', '-r', w.file, '-P', '-O', w.detail], { allowFail: true, timeout: 60_000 }),
        run('tshark', ['-n', '-r', w.file, '-V'], { allowFail: true, timeout: 60_000 }),
      ]);
      const lines = detail.stdout.split('\n');
      const isSummary = (l: string): boolean => /^\s*\d+\s+\d+\.\d+\s/.test(l);
      const summary = lines.filter(isSummary);
      const first = lines.findIndex(isSummary);
      const next = lines.findIndex((l, i) => i > first && isSummary(l));
      const decoded = first < 0 ? '' : lines.slice(first + 1, next < 0 ? undefined : next).join('\n').trim();
      const malformed = verbose.stdout.split(/\n(?=Frame \d+:)/).filter((fr) => /Malformed|\[Expert Info \(Error/.test(fr)).length;
      return { wire: w.wire, ns: w.ns, dev: w.dev, file: w.file, frames: summary.length, decoded, summary, malformed };
    }),
  );
}

/**
 * One downlink frame of the core's PE, as the gNB receives it after the
 * gateway's End.M.GTP4.E: a UDP datagram from dn to UE 0 with DSCP 46 / ECN
 * 0 (TOS 0xb8), captured on the gNB's N3 veth (GTP-U to the gNB). There, not
 * between core and mup: with --pe mup the frame goes from XDP to XDP and no
 * packet socket on that link sees it. Returns the bytes from the outer
 * IPv4 header on.
 */
export async function peDownlinkFrame(t: LabTopology, file: string, streamPy: string): Promise<Buffer> {
  const ue0 = t.ues[0]!;
  const child = spawn('ip', ['netns', 'exec', t.ns.gnb, 'tcpdump', '-i', t.gnb.n3, '-U', '-c', '1', '-s', '512', '-w', file, `ip dst ${t.gnb.addr} and udp dst port 2152`], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr?.on('data', (c: Buffer) => (err += c.toString()));
  const done = new Promise<void>((r) => child.once('exit', () => r()));
  try {
    const deadline = Date.now() + 10_000;
    while (!err.includes('listening on')) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`tcpdump in ${t.ns.gnb} did not start: ${err.trim()}`);
      await sleep(20);
    }
    await nsRun(t.ns.dn, '/usr/bin/python3', [streamPy, 'send', '--src', t.dn.addr, '--dst', ue0.addr, '--port', '7200', '--rate', '10', '--seconds', '0.1', '--tos', String(0xb8)]);
    await Promise.race([done, sleep(5000)]);
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
  }
  const pcap = readFileSync(file);
  // pcap: 24-byte file header, 16-byte record header, then the Ethernet frame.
  if (pcap.length < 24 + 16 + 14 + 36 + 20) throw new Error(`${file}: no downlink G-PDU to ${t.gnb.addr} captured on ${t.gnb.n3} in ${t.ns.gnb}`);
  const caplen = pcap.readUInt32LE(24 + 8);
  return pcap.subarray(24 + 16 + 14, 24 + 16 + caplen);
}

/** The fields of a downlink G-PDU (outer IPv4/UDP/GTP-U, inner IPv4 from stream.py send) the lab compares between PEs. */
export function peFrameFields(f: Buffer): { outerTos: number; src: string; dst: string; teid: number; pduType: number | null; qfi: number | null; innerTtl: number; innerTos: number; inner: string } {
  const ihl = (f[0]! & 0x0f) * 4;
  const g = ihl + 8;
  const flags = f[g]!;
  const teid = f.readUInt32BE(g + 4);
  let p = g + 8;
  let qfi: number | null = null;
  let pduType: number | null = null;
  if ((flags & 0x07) !== 0) {
    let next = f[p + 3]!;
    p += 4;
    for (let i = 0; i < 4 && next !== 0; i++) {
      const len = f[p]! * 4;
      if (len === 0) break;
      if (next === 0x85) {
        pduType = f[p + 1]! >> 4;
        qfi = f[p + 2]! & 0x3f;
      }
      next = f[p + len - 1]!;
      p += len;
    }
  }
  const inner = Buffer.from(f.subarray(p));
  const innerTtl = inner[8]!;
  const innerTos = inner[1]!;
  // What differs between two datagrams of one sender, and the TTL the
  // kernel's PE lowers: zeroed (no PE touches the rest).
  inner[8] = 0; // TTL
  inner.writeUInt16BE(0, 10); // header checksum (covers the TTL)
  inner.writeUInt16BE(0, 4); // IP ID
  if (inner.length >= 20 + 8 + 24) {
    inner.writeUInt16BE(0, 20); // UDP source port (one socket per run)
    inner.writeUInt16BE(0, 26); // UDP checksum (covers the send time)
    inner.fill(0, 28 + 16, 28 + 24); // stream.py's send time
  }
  const ip4 = (o: number): string => [...f.subarray(o, o + 4)].join('.');
  return { outerTos: f[1]!, src: ip4(12), dst: ip4(16), teid, pduType, qfi, innerTtl, innerTos, inner: inner.toString('hex') };
}
