/**
 * The lab's measurements, each on the translated path (UE 10.45.0.2: GTP-U,
 * H.M.GTP4.D / End.M.GTP4.E, kernel SRv6) and on the plain path (UE
 * 10.99.0.2: the same namespaces and veths, routed IPv4): ping, iperf3 TCP,
 * iperf3 UDP; a short capture on both wires decoded by tshark.
 */
import { spawn, type ChildProcess } from 'node:child_process';
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
        run('tshark', ['-n', '-r', w.file, '-P', '-O', w.detail], { allowFail: true }),
        run('tshark', ['-n', '-r', w.file, '-V'], { allowFail: true }),
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
