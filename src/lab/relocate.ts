/**
 * `mup lab relocate`: MEC relocation of ONE UE. Every MEC user (ues[1..],
 * 100 of them) sends a steady, sequence-numbered UDP stream to the anycast
 * address both MEC sites carry, and the site that receives a datagram
 * echoes it back to the UE (the downlink, through that site's PE in core).
 * The MEC users' (N3, TEID) policies point at mec-a's PE SID and mec-a's PE
 * holds their sessions. One UE moves to mec-b: its session is added at
 * mec-b's PE before the streams start (make before break), mid-stream its
 * policy is replaced with mec-b's SID (PUT /v1/policies), and once site A
 * has answered all it received, its session is deleted at mec-a's PE.
 * With --direction downlink or both, the sites also send a steady
 * sequence-numbered stream to every UE, each UE's from the site serving it
 * (the moved UE's from B after the switch).
 * Receivers at both sites and at the UEs record every sequence number and
 * its arrival time (CLOCK_MONOTONIC, the clock of process.hrtime here), so
 * the report gives, per UE and per stream, frames lost, duplicated,
 * reordered and malformed, and for the moved UE the time from the API call
 * to the first frame at B. Per run: frames.csv and timeline.svg besides the
 * JSON; over --repeat runs a summary (relocate-stats.ts). docs/lab.md.
 */
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa, type ResultPromise } from 'execa';
import { labApi, labCore, labDown, labPe, labUp, labPaths, peApi, uePolicy, type CoreMode, type LabPaths, type Progress } from './lab.js';
import { kernelPeAdd, kernelPeDel, ueSession, type PeMode } from './pe.js';
import { nsRun, sleep } from './sh.js';
import { labTopology, type LabTopology, type LabUe } from './topology.js';
import { timelineSvg } from './relocate-plot.js';
import { fmtCi, medianCi, type MedianCi } from './relocate-stats.js';
import { makeDirs } from '../host/mkdirs.js';

const STREAM_PY = fileURLToPath(new URL('../../src/lab/stream.py', import.meta.url));
const PYTHON = '/usr/bin/python3';
const PORT = 7000;
const REPLY_PORT = 7001;
/** The downlink stream's port at the UEs. */
const DL_PORT = 7002;

/** Which streams run: the UEs' uplink (each frame echoed back), the sites' downlink stream, or both. */
export type Direction = 'uplink' | 'downlink' | 'both';
export const DIRECTIONS: readonly Direction[] = ['uplink', 'downlink', 'both'];

export interface RelocateOptions {
  readonly prefix: string;
  readonly out: string;
  readonly keep: boolean;
  /** Frames per second of the stream, all UEs together. */
  readonly rate: number;
  readonly seconds: number;
  /** When to switch, seconds after the stream starts. */
  readonly switchAfter: number;
  readonly size: number;
  /** Which UE moves: its index in the topology's ues (1..100). */
  readonly ue: number;
  /** The PE mode of a lab this builds (a running lab keeps its own). */
  readonly pe?: PeMode;
  /** How core ends the uplink, for a lab it builds. */
  readonly core?: CoreMode;
  /** Which streams run (default uplink). */
  readonly direction?: Direction;
  /** Runs on the same lab (relocate only; default 1). */
  readonly repeat?: number;
  /** false: move the policy only, leave the PE session at A (what a broken relocation does; for the tests). */
  readonly movePeSession?: boolean;
  readonly progress: Progress;
}

export const RELOCATE_DEFAULTS = { rate: 10_000, seconds: 4, switchAfter: 2, size: 100, ue: 1, direction: 'uplink', repeat: 1 } as const;
/** The datagrams carry a 29-byte header (stream.py); 1472 fills a 1500-byte IPv4 MTU. */
export const RELOCATE_SIZE = { min: 29, max: 1472 } as const;

/** One direction of one UE's stream. */
export interface DirStats {
  /** Uplink: datagrams the UE sent; downlink: distinct numbers the sites echoed (a duplicated uplink frame is echoed twice: a downlink duplicate). */
  readonly sent: number;
  readonly received: number;
  readonly lost: number;
  readonly duplicated: number;
  /** Arrivals with a lower number than one that arrived before (uplink: at either site). */
  readonly reordered: number;
  readonly malformed: number;
  /** Uplink: arrivals at site A / B; downlink: echoes from A / B. */
  readonly viaA: number;
  readonly viaB: number;
}

export interface UeRecord {
  readonly index: number;
  readonly addr: string;
  readonly ulTeid: number;
  readonly dlTeid: number;
  readonly qfi: number;
  readonly moved: boolean;
  readonly uplink: DirStats;
  /** The echoes of the uplink frames (the site that received a frame sends it back). */
  readonly downlink: DirStats;
  /** The downlink stream (null when it did not run): one sequence per UE across both sites. */
  readonly dlStream: DirStats | null;
}

export interface MovedUe {
  readonly index: number;
  readonly addr: string;
  /** Whether its PE session moved too (false only in the broken variant). */
  readonly peSessionMoved: boolean;
  /** Durations of the calls, ms: session added at B, policy replaced, session deleted at A (null: not done). */
  readonly sessionAddMs: number | null;
  readonly policyMs: number;
  readonly sessionDelMs: number | null;
  /** From the policy call (ms; negative = before it): first uplink frame at B, last at A, first echo from B at the UE. */
  readonly firstAtBMs: number | null;
  readonly lastAtAMs: number | null;
  readonly firstFromBMs: number | null;
  /** Uplink sequence numbers: the last at A, the first at B (a clean split: B's first = A's last + 1). */
  readonly lastSeqAtA: number | null;
  readonly firstSeqAtB: number | null;
  /** The downlink stream (null when it did not run): when its sender moved the UE to B, the first frame from B and last from A at the UE (ms from the policy call), and the sequence split. */
  readonly dl: {
    readonly senderSwitchMs: number | null;
    readonly firstFromBMs: number | null;
    readonly lastFromAMs: number | null;
    readonly switchSeq: number | null;
    readonly lastSeqFromA: number | null;
    readonly firstSeqFromB: number | null;
  } | null;
}

export interface RelocateReport {
  readonly at: string;
  readonly loadavg: readonly number[];
  readonly pe: PeMode;
  readonly direction: Direction;
  readonly size: number;
  readonly seconds: number;
  readonly switchAfter: number;
  /** Uplink frames the UEs sent (all UEs), and the rate they reached (0 without the uplink stream). */
  readonly sent: number;
  readonly rate: number;
  /** Offered and achieved rate of each stream's sender. */
  readonly senders: readonly SenderRate[];
  readonly ues: readonly UeRecord[];
  readonly moved: MovedUe;
  /** Sums over every UE and both directions, plus datagrams no UE could be named for (unattributed malformed). */
  readonly totals: { readonly lost: number; readonly duplicated: number; readonly reordered: number; readonly malformed: number };
  readonly unattributed: number;
  /** Send errors at the sites' echo sockets (each also shows as a lost echo). */
  readonly echoErrors: number;
  /** Datagrams the receivers' kernels dropped for a full socket buffer (nstat UdpRcvbufErrors): the receiving program, not the path. */
  readonly socketDrops: { readonly siteA: number; readonly siteB: number; readonly ues: number };
  readonly notes: readonly string[];
  readonly file: string;
  /** This run's files: the report, the per-frame CSV, the timeline SVG. */
  readonly files: { readonly json: string; readonly csv: string; readonly svg: string };
}

/** UdpRcvbufErrors of a namespace (absolute, without touching nstat's history file). */
async function rcvbufErrors(ns: string): Promise<number> {
  return Number(/UdpRcvbufErrors\s+(\d+)/.exec((await nsRun(ns, 'nstat', ['-asz', 'UdpRcvbufErrors'])).stdout)?.[1] ?? 0);
}

export interface SiteOut {
  ue: number[];
  seq: number[];
  t: number[];
  sent: number[];
  malformed: number[];
  unattributed: number;
  echo_errors: number;
}
export interface BackOut {
  ue: number[];
  seq: number[];
  t: number[];
  site: number[];
  /** Send time from the payload (echo: the UE's uplink send time; downlink stream: the site's). */
  sent: number[];
  malformed: number[];
  unattributed: number;
}

/** Start a stream.py process in namespace `ns`; resolves once it printed `ready`/`started`, with its JSON result to come. */
export async function pyProc<T>(ns: string, args: readonly string[], readyLine: string, timeoutS: number): Promise<{ done: Promise<T>; kill: () => void; stop: () => void; signal: (s: NodeJS.Signals) => void }> {
  // SIGTERM asks a receiver to drain its socket and stop, which on a busy host
  // takes longer than the 5 s after which execa by default follows a SIGTERM
  // with SIGKILL (a site killed mid-drain lost the whole run's record at
  // 10,000 frames/s both ways, load 23): no force kill, and the timeout (a
  // safety) and the cleanup use SIGKILL.
  const proc: ResultPromise = execa('ip', ['netns', 'exec', ns, PYTHON, STREAM_PY, ...args], {
    reject: false,
    timeout: timeoutS * 1000,
    killSignal: 'SIGKILL',
    forceKillAfterDelay: false,
    maxBuffer: 512 * 1024 * 1024,
  });
  let out = '';
  await new Promise<void>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`stream.py ${args[0]} in ${ns} not ${readyLine} within 10 s`)), 10_000);
    proc.stdout?.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.startsWith(`${readyLine}\n`)) {
        clearTimeout(timer);
        res();
      }
    });
    proc.then((r) => {
      clearTimeout(timer);
      rej(new Error(`stream.py ${args[0]} in ${ns} exited (${r.exitCode}): ${String(r.stderr)}`));
    }, rej);
  });
  const done = proc.then((r) => {
    const line = String(r.stdout).split('\n').find((l) => l.startsWith('{'));
    if (r.exitCode !== 0 || line === undefined) throw new Error(`stream.py ${args[0]} in ${ns} failed (${r.timedOut ? `timed out after ${timeoutS} s` : r.exitCode ?? r.signal}): ${String(r.stderr)}`);
    return JSON.parse(line) as T;
  });
  done.catch(() => undefined);
  // `ip netns exec` execs python, so the signal reaches it.
  return { done, kill: () => proc.kill('SIGKILL'), stop: () => proc.kill('SIGTERM'), signal: (s) => proc.kill(s) };
}

/** Where one UE's session is: add / delete it at a MEC site's PE, for either PE mode. */
async function peSession(t: LabTopology, p: LabPaths, pe: PeMode, op: 'add' | 'del', site: 'meca' | 'mecb', u: LabUe): Promise<void> {
  if (pe === 'kernel') {
    await (op === 'add' ? kernelPeAdd(t, site, u) : kernelPeDel(t, site, u));
    return;
  }
  const r =
    op === 'add'
      ? await peApi<{ error?: string }>(p, site, 'POST', '/v1/sessions', ueSession(t, u))
      : await peApi<{ error?: string }>(p, site, 'DELETE', `/v1/sessions?ue=${encodeURIComponent(`${u.addr}/32`)}`);
  if (r.status !== (op === 'add' ? 201 : 200)) throw new Error(`PE ${site}: ${op === 'add' ? 'POST' : 'DELETE'} /v1/sessions (UE ${u.addr}): HTTP ${r.status} ${r.body.error ?? ''}`);
}

async function setPolicy(t: LabTopology, p: LabPaths, u: LabUe, site: 'meca' | 'mecb', core: CoreMode): Promise<void> {
  const r = await labApi<{ error?: string }>(p, 'PUT', '/v1/policies', uePolicy(t, u, site, core));
  if (r.status !== 200) throw new Error(`PUT /v1/policies (UE ${u.addr} to ${site}): HTTP ${r.status} ${r.body.error ?? ''}`);
}

async function timed(f: () => Promise<void>): Promise<number> {
  const t0 = process.hrtime.bigint();
  await f();
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

/**
 * Lost, duplicated and reordered among arrivals (in arrival order, each with
 * the stream it belongs to) of `sent` numbered frames (`isSent`). Reordered:
 * a number below one that arrived before it in the same stream.
 */
function dirStats(arrivals: readonly { seq: number; stream: number }[], sent: number, isSent: (q: number) => boolean, malformed: number, viaA: number, viaB: number): DirStats {
  const seen = new Set<number>();
  const max = new Map<number, number>();
  let reordered = 0;
  let duplicated = 0;
  for (const { seq: q, stream } of arrivals) {
    if (q < (max.get(stream) ?? -1)) reordered++;
    else max.set(stream, q);
    if (seen.has(q)) duplicated++;
    else seen.add(q);
  }
  let got = 0;
  for (const q of seen) if (isSent(q)) got++;
  return { sent, received: arrivals.length, lost: sent - got, duplicated, reordered, malformed, viaA, viaB };
}

/** Per-UE records from the sites' and the UEs' receivers (MEC user j of the stream is t.ues[j + 1]). */
export function perUe(t: LabTopology, moved: number, sentPerUe: readonly number[], a: SiteOut, b: SiteOut, back: BackOut): UeRecord[] {
  const n = sentPerUe.length;
  type Arr = { t: number; seq: number; site: 1 | 2 }[];
  const up: Arr[] = Array.from({ length: n }, () => []);
  const down: Arr[] = Array.from({ length: n }, () => []);
  for (const [s, site] of [
    [a, 1],
    [b, 2],
  ] as const) {
    for (let i = 0; i < s.ue.length; i++) up[s.ue[i]!]?.push({ t: s.t[i]!, seq: s.seq[i]!, site });
  }
  for (let i = 0; i < back.ue.length; i++) down[back.ue[i]!]?.push({ t: back.t[i]!, seq: back.seq[i]!, site: back.site[i] === 2 ? 2 : 1 });
  return sentPerUe.map((sent, j) => {
    const u = t.ues[j + 1]!;
    const ua = up[j]!.sort((x, y) => x.t - y.t);
    const da = down[j]!.sort((x, y) => x.t - y.t);
    const echoed = new Set(ua.map((x) => x.seq));
    return {
      index: u.index,
      addr: u.addr,
      ulTeid: u.ulTeid,
      dlTeid: u.dlTeid,
      qfi: u.qfi,
      moved: u.index === moved,
      // Uplink: one stream, whichever site it reaches (arrival times are the kernel's, on one clock).
      uplink: dirStats(
        ua.map((x) => ({ seq: x.seq, stream: 0 })),
        sent,
        (q) => q < sent,
        (a.malformed[j] ?? 0) + (b.malformed[j] ?? 0),
        ua.filter((x) => x.site === 1).length,
        ua.filter((x) => x.site === 2).length,
      ),
      // Downlink: each site's echoes are a stream of their own (each site's
      // application answers at its own pace; their interleaving is not the network's).
      downlink: dirStats(
        da.map((x) => ({ seq: x.seq, stream: x.site })),
        echoed.size,
        (q) => echoed.has(q),
        back.malformed[j] ?? 0,
        da.filter((x) => x.site === 1).length,
        da.filter((x) => x.site === 2).length,
      ),
      dlStream: null,
    };
  });
}

export const KERNEL_PE_NOTE =
  "--pe kernel: the kernel's seg6 encap takes its IPv6 source only from `ip sr tunsrc` (one per namespace: every PE and session shares the UPF " +
  'source 192.0.2.10) and sets traffic class 0 for inner IPv4 (the DSCP does not reach the GTP-U header); a kernel that forwards before it ' +
  'encapsulates lowers the inner TTL too. The echoes are compared by sequence number and payload, which none of these touch';

/** A stream sender's result (stream.py ues / dl). */
interface SenderOut {
  sent: number[];
  total: number;
  rate: number;
  errors: number;
  start_ns: number;
  end_ns: number;
  switch_ns?: number | null;
  switch_seq?: number | null;
}

/** Downlink-stream stats per UE (MEC user j is t.ues[j + 1]): one stream per UE across both sites (one clock at the UE). */
export function dlPerUe(sentPerUe: readonly number[], back: BackOut): DirStats[] {
  const n = sentPerUe.length;
  const arr: { t: number; seq: number; site: number }[][] = Array.from({ length: n }, () => []);
  for (let i = 0; i < back.ue.length; i++) arr[back.ue[i]!]?.push({ t: back.t[i]!, seq: back.seq[i]!, site: back.site[i]! });
  return sentPerUe.map((sent, j) => {
    const a = arr[j]!.sort((x, y) => x.t - y.t);
    return dirStats(
      a.map((x) => ({ seq: x.seq, stream: 0 })),
      sent,
      (q) => q < sent,
      back.malformed[j] ?? 0,
      a.filter((x) => x.site === 1).length,
      a.filter((x) => x.site === 2).length,
    );
  });
}

const csvCell = (x: number | string | null | undefined): string => (x === null || x === undefined ? '' : String(x));

/**
 * The per-frame CSV of a run: one row per frame sent (a lost frame: no
 * receive time, site "lost"), every UE, each stream: `ul` (UE to the site
 * that received it), `echo` (that site's echo back at the UE; send time =
 * the UE's uplink send time, so recv - send is the round trip), `dl` (the
 * downlink stream, site = the site that sent it). Times CLOCK_MONOTONIC ns;
 * `recv_ms` = receive time from the API call (PUT /v1/policies), ms.
 */
export function framesCsv(t: LabTopology, tCallNs: bigint, ul: { sender: SenderOut; a: SiteOut; b: SiteOut; back: BackOut } | null, dl: { sender: SenderOut; back: BackOut } | null): string {
  const rows: string[] = ['dir,ue,ue_addr,seq,send_ns,recv_ns,site,recv_ms'];
  const call = Number(tCallNs);
  const row = (dir: string, j: number, seq: number, send: number | null, recv: number | null, site: string): void => {
    rows.push(`${dir},${t.ues[j + 1]!.index},${t.ues[j + 1]!.addr},${seq},${csvCell(send)},${csvCell(recv)},${site},${recv === null ? '' : ((recv - call) / 1e6).toFixed(3)}`);
  };
  const siteName = (s: number): string => (s === 1 ? 'A' : s === 2 ? 'B' : `?${s}`);
  if (ul !== null) {
    const got = ul.sender.sent.map(() => new Set<number>());
    for (const [s, name] of [
      [ul.a, 'A'],
      [ul.b, 'B'],
    ] as const) {
      for (let i = 0; i < s.ue.length; i++) {
        got[s.ue[i]!]?.add(s.seq[i]!);
        row('ul', s.ue[i]!, s.seq[i]!, s.sent[i]!, s.t[i]!, name);
      }
    }
    ul.sender.sent.forEach((n, j) => {
      for (let q = 0; q < n; q++) if (!got[j]!.has(q)) row('ul', j, q, null, null, 'lost');
    });
    const echoed = ul.sender.sent.map(() => new Set<number>());
    for (let i = 0; i < ul.back.ue.length; i++) {
      echoed[ul.back.ue[i]!]?.add(ul.back.seq[i]!);
      row('echo', ul.back.ue[i]!, ul.back.seq[i]!, ul.back.sent[i] ?? null, ul.back.t[i]!, siteName(ul.back.site[i]!));
    }
    got.forEach((g, j) => {
      for (const q of [...g].sort((x, y) => x - y)) if (!echoed[j]!.has(q)) row('echo', j, q, null, null, 'lost');
    });
  }
  if (dl !== null) {
    const got = dl.sender.sent.map(() => new Set<number>());
    for (let i = 0; i < dl.back.ue.length; i++) {
      got[dl.back.ue[i]!]?.add(dl.back.seq[i]!);
      row('dl', dl.back.ue[i]!, dl.back.seq[i]!, dl.back.sent[i] ?? null, dl.back.t[i]!, siteName(dl.back.site[i]!));
    }
    dl.sender.sent.forEach((n, j) => {
      for (let q = 0; q < n; q++) if (!got[j]!.has(q)) row('dl', j, q, null, null, 'lost');
    });
  }
  return rows.join('\n') + '\n';
}

/** A sender's offered and achieved rate; `short` when it reached less than 98 % of the offered rate. */
export interface SenderRate {
  readonly stream: 'uplink' | 'downlink';
  readonly offered: number;
  readonly achieved: number;
  readonly sent: number;
  readonly errors: number;
  readonly short: boolean;
}

/** A sender fell short when it reached less than this share of the rate asked (docs/lab.md). */
export const SHORT_FRACTION = 0.98;

const senderRate = (stream: 'uplink' | 'downlink', offered: number, s: SenderOut): SenderRate => ({
  stream,
  offered,
  achieved: Math.round(s.rate),
  sent: s.total,
  errors: s.errors,
  short: s.rate < offered * SHORT_FRACTION,
});

/** Run the scenario on a lab that is up. */
export async function relocateOnLab(t: LabTopology, p: LabPaths, o: RelocateOptions): Promise<RelocateReport> {
  const mec = t.ues.slice(1);
  const u = t.ues[o.ue];
  if (u === undefined || o.ue < 1) throw new Error(`--ue ${o.ue}: a MEC user, 1 to ${t.ues.length - 1} (UE 0, ${t.ue.addr}, is the data network's)`);
  const direction = o.direction ?? 'uplink';
  const doUl = direction !== 'downlink';
  const doDl = direction !== 'uplink';
  const pe = labPe(p);
  const core = labCore(p);
  const movePe = o.movePeSession !== false;
  const at = new Date().toISOString();
  const load = loadavg().map((x) => Math.round(x * 100) / 100);
  const addrs = mec.map((x) => x.addr).join(',');
  // Receivers stop on SIGTERM, sent 2 s after the sender's last frame (a
  // busy host may send for much longer than --seconds); this is only a safety.
  const waitS = o.seconds * 10 + 60;
  const common = ['--ues', addrs, '--size', String(o.size), '--seconds', String(waitS), '--idle', '0'];
  const procs: { kill: () => void }[] = [];
  let state: 'a' | 'moving' | 'b' = 'a';
  let sessionAtB = false;
  let sessionAtA = true;
  const drops0 = await Promise.all([rcvbufErrors(t.ns.meca), rcvbufErrors(t.ns.mecb), rcvbufErrors(t.ns.ue)]);
  try {
    // The receivers, started together; each is recorded for the cleanup as soon as it is ready.
    const rx = <T>(ns: string, args: string[]): Promise<Awaited<ReturnType<typeof pyProc<T>>>> =>
      pyProc<T>(ns, args, 'ready', waitS + 10).then((q) => {
        procs.push(q);
        return q;
      });
    const settled = await Promise.allSettled([
      doUl ? rx<SiteOut>(t.ns.meca, ['echo', '--bind', t.mec.anycast, '--port', String(PORT), '--reply-port', String(REPLY_PORT), '--site', '1', ...common]) : null,
      doUl ? rx<SiteOut>(t.ns.mecb, ['echo', '--bind', t.mec.anycast, '--port', String(PORT), '--reply-port', String(REPLY_PORT), '--site', '2', ...common]) : null,
      doUl ? rx<BackOut>(t.ns.ue, ['back', '--port', String(REPLY_PORT), ...common]) : null,
      doDl ? rx<BackOut>(t.ns.ue, ['back', '--port', String(DL_PORT), ...common]) : null,
    ] as const);
    for (const x of settled) if (x.status === 'rejected') throw x.reason;
    const val = <T>(x: PromiseSettledResult<T>): T => (x as PromiseFulfilledResult<T>).value;
    const [ulA, ulB, ulBack, dlBack] = [val(settled[0]), val(settled[1]), val(settled[2]), val(settled[3])];
    const ulProcs = ulA !== null && ulB !== null && ulBack !== null ? { a: ulA, b: ulB, back: ulBack } : null;
    o.progress(
      `stream: ${o.rate} frames/s for ${o.seconds} s, ${o.size}-byte datagrams, ${mec.length} UEs` +
        (doUl ? `; uplink to ${t.mec.anycast}:${PORT}, echoed by the site that receives` : '') +
        (doDl ? `; downlink from the site serving each UE to UE:${DL_PORT}` : '') +
        `; UE ${o.ue} (${u.addr}) moves to mec-b after ${o.switchAfter} s (--pe ${pe})`,
    );
    // Make before break: B's PE learns the UE's session before the streams
    // start, so that the switch is the policy call alone, at --switch-at (a
    // session at B changes nothing while the UE's traffic goes to A).
    state = 'moving';
    let sessionAddMs: number | null = null;
    let tSessionAdd = 0n;
    if (movePe) {
      tSessionAdd = process.hrtime.bigint();
      sessionAddMs = await timed(() => peSession(t, p, pe, 'add', 'mecb', u));
      sessionAtB = true;
    }
    // Both senders start together (each prints `started` when it is about to send).
    const [sender, dlSender] = await Promise.all([
      doUl
        ? pyProc<SenderOut>(t.ns.ue, ['ues', '--ues', addrs, '--dst', t.mec.anycast, '--port', String(PORT), '--rate', String(o.rate), '--seconds', String(o.seconds), '--size', String(o.size)], 'started', o.seconds * 10 + 30)
        : null,
      doDl
        ? pyProc<SenderOut>(
            t.ns.meca,
            ['dl', '--ues', addrs, '--src', t.mec.anycast, '--other-netns', `/run/netns/${t.ns.mecb}`, '--move', String(o.ue - 1), '--port', String(DL_PORT), '--rate', String(o.rate), '--seconds', String(o.seconds), '--size', String(o.size)],
            'started',
            o.seconds * 10 + 30,
          )
        : null,
    ]);
    if (sender !== null) procs.push(sender);
    if (dlSender !== null) procs.push(dlSender);
    await sleep(o.switchAfter * 1000);
    const tPolicy = process.hrtime.bigint();
    // The MEC application moves with its user: the downlink sender sends the UE's frames from B from now on.
    dlSender?.signal('SIGUSR1');
    const policyMs = await timed(() => setPolicy(t, p, u, 'mecb', core));
    state = 'b';
    let sessionDelMs: number | null = null;
    const [s, ds] = await Promise.all([sender?.done ?? null, dlSender?.done ?? null]);
    // The sites first: each reads (and echoes) what is still in its socket
    // (a receiver behind on a busy host has a backlog), then the UEs'.
    o.progress('the sites drain their sockets and stop, then the UEs\' receivers');
    await sleep(1000);
    ulProcs?.a.stop();
    ulProcs?.b.stop();
    const [ra, rb] = ulProcs === null ? [null, null] : await Promise.all([ulProcs.a.done, ulProcs.b.done]);
    // Site A has answered everything it received: now its PE can forget the
    // UE (earlier, A's late echoes would be lost: a site's program answers
    // up to 400 ms after the frame arrived on a host at load 20).
    if (movePe) {
      sessionDelMs = await timed(() => peSession(t, p, pe, 'del', 'meca', u));
      sessionAtA = false;
    }
    await sleep(1000);
    ulProcs?.back.stop();
    dlBack?.stop();
    const [rback, rdl] = await Promise.all([ulProcs?.back.done ?? null, dlBack?.done ?? null]);
    const none: SiteOut = { ue: [], seq: [], t: [], sent: [], malformed: [], unattributed: 0, echo_errors: 0 };
    const noBack: BackOut = { ue: [], seq: [], t: [], site: [], sent: [], malformed: [], unattributed: 0 };
    const ulSent = s?.sent ?? mec.map(() => 0);
    const ues0 = perUe(t, o.ue, ulSent, ra ?? none, rb ?? none, rback ?? noBack);
    const dlStats = ds !== null && rdl !== null ? dlPerUe(ds.sent, rdl) : null;
    const ues = ues0.map((r, j) => ({ ...r, dlStream: dlStats?.[j] ?? null }));
    const drops1 = await Promise.all([rcvbufErrors(t.ns.meca), rcvbufErrors(t.ns.mecb), rcvbufErrors(t.ns.ue)]);
    const ms = (ns: number | undefined): number | null => (ns === undefined ? null : Number(BigInt(ns) - tPolicy) / 1e6);
    const j = o.ue - 1;
    const idx = <T extends { ue: number[] }>(r: T | null, f: (i: number) => boolean = () => true): number[] => (r === null ? [] : r.ue.flatMap((x, i) => (x === j && f(i) ? [i] : [])));
    const atA = idx(ra);
    const atB = idx(rb);
    const fromB = idx(rback, (i) => rback!.site[i] === 2);
    let dlMoved: MovedUe['dl'] = null;
    if (ds !== null && rdl !== null) {
      const dA = idx(rdl, (i) => rdl.site[i] === 1).sort((x, y) => rdl.t[x]! - rdl.t[y]!);
      const dB = idx(rdl, (i) => rdl.site[i] === 2).sort((x, y) => rdl.t[x]! - rdl.t[y]!);
      dlMoved = {
        senderSwitchMs: ds.switch_ns === null || ds.switch_ns === undefined ? null : ms(ds.switch_ns),
        firstFromBMs: dB.length > 0 ? ms(rdl.t[dB[0]!]) : null,
        lastFromAMs: dA.length > 0 ? ms(rdl.t[dA[dA.length - 1]!]) : null,
        switchSeq: ds.switch_seq ?? null,
        lastSeqFromA: dA.length > 0 ? Math.max(...dA.map((i) => rdl.seq[i]!)) : null,
        firstSeqFromB: dB.length > 0 ? Math.min(...dB.map((i) => rdl.seq[i]!)) : null,
      };
    }
    const moved: MovedUe = {
      index: o.ue,
      addr: u.addr,
      peSessionMoved: movePe,
      sessionAddMs,
      policyMs,
      sessionDelMs,
      firstAtBMs: atB.length > 0 ? ms(rb!.t[atB[0]!]) : null,
      lastAtAMs: atA.length > 0 ? ms(ra!.t[atA[atA.length - 1]!]) : null,
      firstFromBMs: fromB.length > 0 ? ms(Math.min(...fromB.map((i) => rback!.t[i]!))) : null,
      lastSeqAtA: atA.length > 0 ? ra!.seq[atA[atA.length - 1]!]! : null,
      firstSeqAtB: atB.length > 0 ? rb!.seq[atB[0]!]! : null,
      dl: dlMoved,
    };
    const sum = (f: (r: UeRecord) => number): number => ues.reduce((acc, r) => acc + f(r), 0);
    const unattributed = (ra?.unattributed ?? 0) + (rb?.unattributed ?? 0) + (rback?.unattributed ?? 0) + (rdl?.unattributed ?? 0);
    const dlc = (r: UeRecord, f: (d: DirStats) => number): number => (r.dlStream === null ? 0 : f(r.dlStream));
    const totals = {
      lost: sum((r) => r.uplink.lost + r.downlink.lost + dlc(r, (d) => d.lost)),
      duplicated: sum((r) => r.uplink.duplicated + r.downlink.duplicated + dlc(r, (d) => d.duplicated)),
      reordered: sum((r) => r.uplink.reordered + r.downlink.reordered + dlc(r, (d) => d.reordered)),
      malformed: sum((r) => r.uplink.malformed + r.downlink.malformed + dlc(r, (d) => d.malformed)) + unattributed,
    };
    const senders = [...(s === null ? [] : [senderRate('uplink', o.rate, s)]), ...(ds === null ? [] : [senderRate('downlink', o.rate, ds)])];
    const dir = resolve(o.out);
    makeDirs(dir);
    const file = join(dir, 'lab-relocate.json');
    const csv = join(dir, 'frames.csv');
    writeFileSync(csv, framesCsv(t, tPolicy, s !== null && ra !== null && rb !== null && rback !== null ? { sender: s, a: ra, b: rb, back: rback } : null, ds !== null && rdl !== null ? { sender: ds, back: rdl } : null));
    // The timeline: the moved UE's arrivals around the switch, per direction.
    const rel = (r: { t: number[] } | null, is: number[]): number[] => (r === null ? [] : is.map((i) => Number(BigInt(r.t[i]!) - tPolicy) / 1e6));
    const starts = [s, ds].filter((x): x is SenderOut => x !== null);
    // Bins that hold about 3 of the moved UE's frames at the rate its senders
    // reached (1 ms at least; a busy host's sender is slower than asked), one edge at the call.
    const perUeRate = Math.min(...starts.map((x) => x.rate)) / mec.length;
    const binMs = Math.max(1, Math.round((3 * 1000) / Math.max(perUeRate, 1e-3)));
    // Around the switch: the call and the first frame at B in the middle part
    // of the window, clipped to the streams (frames.csv has all of them).
    const span = Math.max(policyMs, moved.firstAtBMs ?? 0, dlMoved?.firstFromBMs ?? 0, dlMoved?.senderSwitchMs ?? 0);
    const streamFrom = Math.min(...starts.map((x) => Number(BigInt(x.start_ns) - tPolicy) / 1e6));
    const streamTo = Math.max(...starts.map((x) => Number(BigInt(x.end_ns) - tPolicy) / 1e6)) + 50;
    const from = Math.floor(Math.max(streamFrom, -Math.max(250, span / 2)) / binMs) * binMs;
    const to = Math.ceil(Math.min(streamTo, Math.max(500, span * 1.5 + 250)) / binMs) * binMs;
    const panels = [];
    if (s !== null) {
      panels.push({
        title: `uplink: UE ${o.ue}'s frames at the sites`,
        series: [
          { label: 'at A (mec-a)', color: '#1f77b4', t: rel(ra, atA) },
          { label: 'at B (mec-b)', color: '#ff7f0e', t: rel(rb, atB) },
        ],
        marks: moved.firstAtBMs === null ? [] : [{ at: moved.firstAtBMs, label: `first at B ${moved.firstAtBMs.toFixed(1)} ms` }],
      });
    }
    if (ds !== null && rdl !== null) {
      panels.push({
        title: `downlink stream: UE ${o.ue}'s frames at the UE, by the site that sent them`,
        series: [
          { label: 'from A (mec-a)', color: '#1f77b4', t: rel(rdl, idx(rdl, (i) => rdl.site[i] === 1)) },
          { label: 'from B (mec-b)', color: '#ff7f0e', t: rel(rdl, idx(rdl, (i) => rdl.site[i] === 2)) },
        ],
        marks: dlMoved?.firstFromBMs === null || dlMoved === null ? [] : [{ at: dlMoved.firstFromBMs, label: `first from B ${dlMoved.firstFromBMs.toFixed(1)} ms` }],
      });
    }
    const svg = join(dir, 'timeline.svg');
    writeFileSync(
      svg,
      timelineSvg({
        title: `MEC relocation of UE ${o.ue} (${u.addr}) from mec-a to mec-b, --pe ${pe}`,
        subtitle: `${at}, load average ${load.join(' ')}; ${senders.map((x) => `${x.stream} ${x.achieved} of ${x.offered} frames/s`).join(', ')} (all ${mec.length} UEs, ${o.size} B)`,
        from,
        to,
        binMs,
        spans: [
          ...(sessionAddMs === null ? [] : [{ from: Number(tSessionAdd - tPolicy) / 1e6, to: Number(tSessionAdd - tPolicy) / 1e6 + sessionAddMs, label: `session add at B's PE (${sessionAddMs.toFixed(0)} ms)`, color: '#2ca02c' }]),
          { from: 0, to: policyMs, label: `PUT /v1/policies (${policyMs.toFixed(0)} ms)`, color: '#d62728' },
        ],
        panels,
      }),
    );
    const report: RelocateReport = {
      at,
      loadavg: load,
      pe,
      direction,
      size: o.size,
      seconds: o.seconds,
      switchAfter: o.switchAfter,
      sent: s?.total ?? 0,
      rate: Math.round(s?.rate ?? 0),
      senders,
      ues,
      moved,
      totals,
      unattributed,
      echoErrors: (ra?.echo_errors ?? 0) + (rb?.echo_errors ?? 0),
      socketDrops: { siteA: drops1[0]! - drops0[0]!, siteB: drops1[1]! - drops0[1]!, ues: drops1[2]! - drops0[2]! },
      notes: [
        ...(pe === 'kernel' ? [KERNEL_PE_NOTE] : []),
        ...(s !== null && atB.length === 0 ? [`UE ${o.ue} sent nothing that reached B: the stream ended ${Number(BigInt(s.end_ns) - tPolicy) / 1e6} ms after the policy call began (it took ${policyMs.toFixed(0)} ms); give it more --seconds`] : []),
        ...senders.filter((x) => x.short).map((x) => `WARN the ${x.stream} sender reached ${x.achieved} of the ${x.offered} frames/s asked (${((x.achieved / x.offered) * 100).toFixed(1)} %, below ${SHORT_FRACTION * 100} %): the host could not keep up; the run's counts stand, its rate does not`),
      ],
      file,
      files: { json: file, csv, svg },
    };
    writeFileSync(file, JSON.stringify(report, null, 2) + '\n');
    return report;
  } finally {
    for (const q of procs) q.kill();
    // Put the UE back at A (policy and session), as lab up left it.
    if (state !== 'a') await setPolicy(t, p, u, 'meca', core).catch(() => undefined);
    if (!sessionAtA) await peSession(t, p, pe, 'add', 'meca', u).catch(() => undefined);
    if (sessionAtB) await peSession(t, p, pe, 'del', 'mecb', u).catch(() => undefined);
  }
}

/** The summary over the runs of one `mup lab relocate --repeat N`. */
export interface RelocateSummary {
  readonly at: string;
  readonly runs: number;
  readonly direction: Direction;
  readonly pe: PeMode;
  readonly ue: number;
  readonly offered: number;
  readonly size: number;
  readonly seconds: number;
  readonly switchAfter: number;
  readonly loadavg: { readonly first: readonly number[]; readonly last: readonly number[] };
  /** How the intervals are made (docs/lab.md, "Repeats"). */
  readonly interval: string;
  /** Per measure: median and order-statistic interval over the runs. */
  readonly measures: Record<string, MedianCi>;
  /** Per run: the offered and achieved rates, and whether a sender fell short (> 2 % below the rate asked). */
  readonly rates: readonly { readonly run: number; readonly senders: readonly SenderRate[] }[];
  readonly shortRuns: readonly number[];
  readonly runDirs: readonly string[];
  readonly file: string;
}

export const INTERVAL_METHOD =
  'distribution-free confidence interval for the median from order statistics (the k-th smallest to the k-th largest run, binomial coverage); below 6 runs no interval reaches 95 %: min..max with its coverage';

export function summarize(runs: readonly RelocateReport[], o: RelocateOptions, file: string): RelocateSummary {
  const r0 = runs[0]!;
  const moved = (r: RelocateReport): UeRecord => r.ues.find((x) => x.moved)!;
  const measures: Record<string, MedianCi> = {};
  const add = (name: string, f: (r: RelocateReport) => number | null): void => {
    measures[name] = medianCi(runs.map(f));
  };
  const doUl = r0.direction !== 'downlink';
  const doDl = r0.direction !== 'uplink';
  if (doUl) {
    add('uplink: first frame at B, ms from the call', (r) => r.moved.firstAtBMs);
    add('uplink: last frame at A, ms from the call', (r) => r.moved.lastAtAMs);
    add('uplink: moved UE lost', (r) => moved(r).uplink.lost);
    add('uplink: moved UE reordered', (r) => moved(r).uplink.reordered);
    add('echo: moved UE lost', (r) => moved(r).downlink.lost);
    add('echo: moved UE reordered', (r) => moved(r).downlink.reordered);
  }
  if (doDl) {
    add('downlink: first frame from B at the UE, ms from the call', (r) => r.moved.dl?.firstFromBMs ?? null);
    add('downlink: last frame from A at the UE, ms from the call', (r) => r.moved.dl?.lastFromAMs ?? null);
    add('downlink: moved UE lost', (r) => moved(r).dlStream?.lost ?? null);
    add('downlink: moved UE reordered', (r) => moved(r).dlStream?.reordered ?? null);
  }
  add('calls: PUT /v1/policies, ms', (r) => r.moved.policyMs);
  add('calls: session add at B, ms', (r) => r.moved.sessionAddMs);
  add('all UEs, all streams: lost', (r) => r.totals.lost);
  add('all UEs, all streams: reordered', (r) => r.totals.reordered);
  for (const dir of ['uplink', 'downlink'] as const) {
    if ((dir === 'uplink' && doUl) || (dir === 'downlink' && doDl)) add(`${dir} sender: achieved frames/s`, (r) => r.senders.find((x) => x.stream === dir)?.achieved ?? null);
  }
  const rates = runs.map((r, i) => ({ run: i + 1, senders: r.senders }));
  return {
    at: r0.at,
    runs: runs.length,
    direction: r0.direction,
    pe: r0.pe,
    ue: o.ue,
    offered: o.rate,
    size: o.size,
    seconds: o.seconds,
    switchAfter: o.switchAfter,
    loadavg: { first: r0.loadavg, last: runs[runs.length - 1]!.loadavg },
    interval: INTERVAL_METHOD,
    measures,
    rates,
    shortRuns: rates.filter((x) => x.senders.some((y) => y.short)).map((x) => x.run),
    runDirs: runs.map((r) => dirname(r.file)),
    file,
  };
}

export function renderSummary(s: RelocateSummary): string {
  const w = Math.max(...Object.keys(s.measures).map((k) => k.length));
  return [
    '',
    `Relocation summary: ${s.runs} run${s.runs === 1 ? '' : 's'} of UE ${s.ue} to mec-b, --direction ${s.direction}, --pe ${s.pe}, ${s.offered} frames/s asked (all UEs, each direction), ${s.size} B, ${s.seconds} s, switch at ${s.switchAfter} s`,
    `  load average: ${s.loadavg.first.join(' ')} at the first run, ${s.loadavg.last.join(' ')} at the last`,
    `  median [interval] (its coverage): ${s.interval}`,
    ...Object.entries(s.measures).map(([k, c]) => `  ${k.padEnd(w)}  ${fmtCi(c, '', /\bms\b/.test(k) ? 1 : 0)}`),
    '  offered vs achieved, per run:',
    ...s.rates.map((r) => `    run ${r.run}: ${r.senders.map((x) => `${x.stream} ${x.achieved} of ${x.offered} frames/s (${((x.achieved / x.offered) * 100).toFixed(1)} %)${x.short ? ' SHORT' : ''}`).join(', ')}`),
    ...(s.shortRuns.length > 0
      ? [`  WARN runs ${s.shortRuns.join(', ')}: a sender reached less than ${SHORT_FRACTION * 100} % of the rate asked (SHORT above): the host could not keep up; lower --rate or use a quieter host`]
      : [`  every sender reached at least ${SHORT_FRACTION * 100} % of the rate asked`]),
    `  per run (frames.csv, timeline.svg, lab-relocate.json): ${s.runDirs.join(' ')}`,
    `  written: ${s.file}`,
    '',
  ].join('\n');
}

/** lab up (unless a lab with this prefix is up), the scenario `repeat` times, lab down (unless kept or it was up before). */
export async function relocate(o: RelocateOptions): Promise<{ runs: RelocateReport[]; summary: RelocateSummary }> {
  const t = labTopology(o.prefix);
  const p = labPaths(t);
  const running = await labApi(p, 'GET', '/v1/status').then(
    (r) => r.status === 200,
    () => false,
  );
  if (!running) {
    o.progress(`lab up (prefix ${o.prefix})`);
    await labUp(o.prefix, o.progress, { ...(o.pe === undefined ? {} : { pe: o.pe }), ...(o.core === undefined ? {} : { core: o.core }) });
    o.progress(`lab up with --core ${labCore(p)} --pe ${labPe(p)}`);
  } else {
    const pe = labPe(p);
    const core = labCore(p);
    const again = `mup lab up --pe ${o.pe ?? pe} --core ${o.core ?? core}${o.prefix === 'mlab' ? '' : ` --prefix ${o.prefix}`} first`;
    if (o.pe !== undefined && o.pe !== pe) throw new Error(`lab "${o.prefix}" is up with --pe ${pe}, not ${o.pe}: ${again}, or leave --pe out`);
    if (o.core !== undefined && o.core !== core) throw new Error(`lab "${o.prefix}" is up with --core ${core}, not ${o.core}: ${again}, or leave --core out`);
    o.progress(`using the running lab "${o.prefix}" (--core ${core} --pe ${pe})`);
  }
  try {
    const n = o.repeat ?? 1;
    const runs: RelocateReport[] = [];
    for (let k = 1; k <= n; k++) {
      if (n > 1) o.progress(`run ${k} of ${n}`);
      runs.push(await relocateOnLab(t, p, { ...o, out: join(o.out, `run-${k}`) }));
    }
    const file = join(resolve(o.out), 'lab-relocate-summary.json');
    const summary = summarize(runs, o, file);
    writeFileSync(file, JSON.stringify(summary, null, 2) + '\n');
    return { runs, summary };
  } finally {
    if (running || o.keep) {
      o.progress(`UE ${o.ue} back at mec-a (policy and PE session); lab kept`);
    } else {
      o.progress('lab down');
      await labDown(o.prefix);
    }
  }
}

const pad = (s: string | number, n: number): string => String(s).padStart(n);

/** The per-UE table: the moved UE first, then every other. */
export function renderUeTable(ues: readonly UeRecord[]): string[] {
  const dl = ues.some((r) => r.dlStream !== null);
  const head = `  ${'UE'.padEnd(12)} ${pad('UL TEID', 8)} ${pad('DL TEID', 8)} ${pad('QFI', 3)} | uplink ${pad('sent', 5)} ${pad('lost', 4)} ${pad('dup', 4)} ${pad('reord', 5)} ${pad('malf', 4)} ${pad('at A', 5)} ${pad('at B', 5)} | echoes ${pad('lost', 4)} ${pad('dup', 4)} ${pad('reord', 5)} ${pad('malf', 4)} ${pad('from A', 6)} ${pad('from B', 6)}${dl ? ` | downlink ${pad('sent', 5)} ${pad('lost', 4)} ${pad('dup', 4)} ${pad('reord', 5)} ${pad('malf', 4)} ${pad('from A', 6)} ${pad('from B', 6)}` : ''}`;
  const row = (r: UeRecord): string =>
    `  ${`${r.addr}${r.moved ? ' *' : ''}`.padEnd(12)} ${pad(`0x${r.ulTeid.toString(16)}`, 8)} ${pad(`0x${r.dlTeid.toString(16)}`, 8)} ${pad(r.qfi, 3)} | ${' '.repeat(6)} ${pad(r.uplink.sent, 5)} ${pad(r.uplink.lost, 4)} ${pad(r.uplink.duplicated, 4)} ${pad(r.uplink.reordered, 5)} ${pad(r.uplink.malformed, 4)} ${pad(r.uplink.viaA, 5)} ${pad(r.uplink.viaB, 5)} | ${' '.repeat(6)} ${pad(r.downlink.lost, 4)} ${pad(r.downlink.duplicated, 4)} ${pad(r.downlink.reordered, 5)} ${pad(r.downlink.malformed, 4)} ${pad(r.downlink.viaA, 6)} ${pad(r.downlink.viaB, 6)}` +
    (r.dlStream === null ? (dl ? ` | ${' '.repeat(8)} ${'-'.padStart(5)}` : '') : ` | ${' '.repeat(8)} ${pad(r.dlStream.sent, 5)} ${pad(r.dlStream.lost, 4)} ${pad(r.dlStream.duplicated, 4)} ${pad(r.dlStream.reordered, 5)} ${pad(r.dlStream.malformed, 4)} ${pad(r.dlStream.viaA, 6)} ${pad(r.dlStream.viaB, 6)}`);
  return [head, ...ues.filter((r) => r.moved).map(row), ...ues.filter((r) => !r.moved).map(row)];
}

export function renderRelocate(r: RelocateReport, o: { table?: boolean } = {}): string {
  const ms = (x: number | null): string => (x === null ? 'never' : `${x.toFixed(3)} ms`);
  const m = r.moved;
  const others = r.ues.filter((x) => !x.moved);
  const badUl = (x: UeRecord): boolean => x.uplink.lost + x.uplink.duplicated + x.uplink.reordered + x.uplink.malformed + x.downlink.lost + x.downlink.duplicated + x.downlink.reordered + x.downlink.malformed > 0;
  const mr = r.ues.find((x) => x.moved)!;
  const line = (d: DirStats): string => `lost ${d.lost}, duplicated ${d.duplicated}, reordered ${d.reordered}, malformed ${d.malformed}`;
  const ul = r.direction !== 'downlink';
  const dl = m.dl;
  const dls = mr.dlStream;
  const bad = (x: UeRecord): boolean => badUl(x) || (x.dlStream !== null && x.dlStream.lost + x.dlStream.duplicated + x.dlStream.reordered + x.dlStream.malformed > 0);
  return [
    '',
    `MEC relocation of one UE, ${r.at}, load average ${r.loadavg.join(' ')}, --pe ${r.pe}, --direction ${r.direction}, ${r.size}-byte datagrams`,
    ...r.senders.map(
      (x) =>
        `  ${x.stream} sender: offered ${x.offered} frames/s, achieved ${x.achieved} (${((x.achieved / x.offered) * 100).toFixed(1)} %)${x.short ? ` SHORT (below ${SHORT_FRACTION * 100} %)` : ''}, ${x.sent} frames from ${r.ues.length} UEs` +
        (x.stream === 'uplink' ? ' to the anycast address, each echoed by the site that received it' : ', each from the site serving its UE'),
    ),
    `  moved: UE ${m.index} (${m.addr}): ${m.peSessionMoved ? 'session added at mec-b\'s PE, ' : ''}policy to mec-b's SID (PUT /v1/policies)${m.peSessionMoved ? ", session deleted at mec-a's PE" : ', PE session NOT moved'}`,
    ...(ul
      ? [
          `    uplink   ${line(mr.uplink)}; ${mr.uplink.viaA} at A (seq ..${m.lastSeqAtA ?? '-'}), ${mr.uplink.viaB} at B (seq ${m.firstSeqAtB ?? '-'}..)`,
          `    echoes   ${line(mr.downlink)}; ${mr.downlink.viaA} echoes from A, ${mr.downlink.viaB} from B`,
        ]
      : []),
    ...(dls !== null && dl !== null ? [`    downlink ${line(dls)}; ${dls.viaA} from A (seq ..${dl.lastSeqFromA ?? '-'}), ${dls.viaB} from B (seq ${dl.firstSeqFromB ?? '-'}..; the sender moved at seq ${dl.switchSeq ?? '-'})`] : []),
    `    calls: session add ${ms(m.sessionAddMs)}, policy ${ms(m.policyMs)}, session delete ${ms(m.sessionDelMs)}`,
    ...(ul ? [`    from the policy call: first frame at B ${ms(m.firstAtBMs)}, last at A ${ms(m.lastAtAMs)}, first echo from B at the UE ${ms(m.firstFromBMs)}`] : []),
    ...(dl !== null ? [`    downlink, from the policy call: sender moved ${ms(dl.senderSwitchMs)}, first frame from B at the UE ${ms(dl.firstFromBMs)}, last from A ${ms(dl.lastFromAMs)}`] : []),
    `  the ${others.length} others: ${others.filter(bad).length === 0 ? 'every one 0 lost, 0 duplicated, 0 reordered, 0 malformed in every stream' : `${others.filter(bad).length} with a non-zero count (table below)`}`,
    `  totals (all UEs, every stream): lost ${r.totals.lost}, duplicated ${r.totals.duplicated}, reordered ${r.totals.reordered}, malformed ${r.totals.malformed} (${r.unattributed} unattributed); echo send errors ${r.echoErrors}`,
    `  of those, dropped by a receiver's full socket buffer (nstat UdpRcvbufErrors: the program fell behind, not the path): site A ${r.socketDrops.siteA}, site B ${r.socketDrops.siteB}, UEs ${r.socketDrops.ues}`,
    ...r.notes.map((n) => (n.startsWith('WARN') ? `  ${n}` : `  note: ${n}`)),
    ...(o.table === false ? [] : ['', '  per UE (* = moved):', ...renderUeTable(r.ues)]),
    '',
    `  written: ${r.files.json} ${r.files.csv} ${r.files.svg}`,
    '',
  ].join('\n');
}
