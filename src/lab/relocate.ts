/**
 * `mup lab relocate`: MEC relocation of ONE UE. Every MEC user (ues[1..],
 * 100 of them) sends a steady, sequence-numbered UDP stream to the anycast
 * address both MEC sites carry, and the site that receives a datagram
 * echoes it back to the UE (the downlink, through that site's PE in core).
 * The MEC users' (N3, TEID) policies point at mec-a's PE SID and mec-a's PE
 * holds their sessions. Mid-stream one UE moves to mec-b: its session is
 * added at mec-b's PE, its policy is replaced with mec-b's SID (PUT
 * /v1/policies), and once site A has answered all it received, its session
 * is deleted at mec-a's PE.
 * Receivers at both sites and at the UEs record every sequence number and
 * its arrival time (CLOCK_MONOTONIC, the clock of process.hrtime here), so
 * the report gives, per UE and per direction, frames lost, duplicated,
 * reordered and malformed, and for the moved UE the time from the API call
 * to the first frame at B.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa, type ResultPromise } from 'execa';
import { labApi, labDown, labPe, labUp, labPaths, peApi, uePolicy, type LabPaths, type Progress } from './lab.js';
import { kernelPeAdd, kernelPeDel, ueSession, type PeMode } from './pe.js';
import { nsRun, sleep } from './sh.js';
import { labTopology, type LabTopology, type LabUe } from './topology.js';

const STREAM_PY = fileURLToPath(new URL('../../src/lab/stream.py', import.meta.url));
const PYTHON = '/usr/bin/python3';
const PORT = 7000;
const REPLY_PORT = 7001;

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
  /** false: move the policy only, leave the PE session at A (what a broken relocation does; for the tests). */
  readonly movePeSession?: boolean;
  readonly progress: Progress;
}

export const RELOCATE_DEFAULTS = { rate: 10_000, seconds: 4, switchAfter: 2, size: 100, ue: 1 } as const;

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
  readonly downlink: DirStats;
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
}

export interface RelocateReport {
  readonly at: string;
  readonly loadavg: readonly number[];
  readonly pe: PeMode;
  /** Frames the UEs sent (all UEs), and the rate they reached. */
  readonly sent: number;
  readonly rate: number;
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
  malformed: number[];
  unattributed: number;
}

/** Start a stream.py process; resolves once it printed `ready`/`started`, with its JSON result to come. */
async function pyProc<T>(ns: string, args: readonly string[], readyLine: string, timeoutS: number): Promise<{ done: Promise<T>; kill: () => void; stop: () => void }> {
  const proc: ResultPromise = execa('ip', ['netns', 'exec', ns, PYTHON, STREAM_PY, ...args], { reject: false, timeout: timeoutS * 1000, maxBuffer: 512 * 1024 * 1024 });
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
    if (r.exitCode !== 0 || line === undefined) throw new Error(`stream.py ${args[0]} in ${ns} failed (${r.exitCode}): ${String(r.stderr)}`);
    return JSON.parse(line) as T;
  });
  done.catch(() => undefined);
  // `ip netns exec` execs python, so the signal reaches it.
  return { done, kill: () => proc.kill('SIGKILL'), stop: () => proc.kill('SIGTERM') };
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

async function setPolicy(t: LabTopology, p: LabPaths, u: LabUe, site: 'meca' | 'mecb'): Promise<void> {
  const r = await labApi<{ error?: string }>(p, 'PUT', '/v1/policies', uePolicy(t, u, site));
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
    };
  });
}

export const KERNEL_PE_NOTE =
  "--pe kernel: the kernel's seg6 encap takes its IPv6 source only from `ip sr tunsrc` (one per namespace: every PE and session shares the UPF " +
  'source 192.0.2.10) and sets traffic class 0 for inner IPv4 (the DSCP does not reach the GTP-U header); a kernel that forwards before it ' +
  'encapsulates lowers the inner TTL too. The echoes are compared by sequence number and payload, which none of these touch';

/** Run the scenario on a lab that is up. */
export async function relocateOnLab(t: LabTopology, p: LabPaths, o: RelocateOptions): Promise<RelocateReport> {
  const mec = t.ues.slice(1);
  const u = t.ues[o.ue];
  if (u === undefined || o.ue < 1) throw new Error(`--ue ${o.ue}: a MEC user, 1 to ${t.ues.length - 1} (UE 0, ${t.ue.addr}, is the data network's)`);
  const pe = labPe(p);
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
    const siteA = await pyProc<SiteOut>(t.ns.meca, ['echo', '--bind', t.mec.anycast, '--port', String(PORT), '--reply-port', String(REPLY_PORT), '--site', '1', ...common], 'ready', waitS + 10);
    procs.push(siteA);
    const siteB = await pyProc<SiteOut>(t.ns.mecb, ['echo', '--bind', t.mec.anycast, '--port', String(PORT), '--reply-port', String(REPLY_PORT), '--site', '2', ...common], 'ready', waitS + 10);
    procs.push(siteB);
    const back = await pyProc<BackOut>(t.ns.ue, ['back', '--port', String(REPLY_PORT), ...common], 'ready', waitS + 10);
    procs.push(back);
    o.progress(`stream: ${o.rate} frames/s for ${o.seconds} s from ${mec.length} UEs to ${t.mec.anycast}:${PORT}, echoed by the site that receives; UE ${o.ue} (${u.addr}) moves to mec-b after ${o.switchAfter} s (--pe ${pe})`);
    const sender = await pyProc<{ sent: number[]; total: number; rate: number; errors: number; end_ns: number }>(
      t.ns.ue,
      ['ues', '--ues', addrs, '--dst', t.mec.anycast, '--port', String(PORT), '--rate', String(o.rate), '--seconds', String(o.seconds), '--size', String(o.size)],
      'started',
      o.seconds + 30,
    );
    procs.push(sender);
    await sleep(o.switchAfter * 1000);
    state = 'moving';
    let sessionAddMs: number | null = null;
    if (movePe) {
      sessionAddMs = await timed(() => peSession(t, p, pe, 'add', 'mecb', u));
      sessionAtB = true;
    }
    const tPolicy = process.hrtime.bigint();
    const policyMs = await timed(() => setPolicy(t, p, u, 'mecb'));
    state = 'b';
    let sessionDelMs: number | null = null;
    const s = await sender.done;
    // The sites first: each reads (and echoes) what is still in its socket
    // (a receiver behind on a busy host has a backlog), then the UEs'.
    o.progress('the sites drain their sockets and stop, then the UEs\' receiver');
    await sleep(1000);
    siteA.stop();
    siteB.stop();
    const [ra, rb] = await Promise.all([siteA.done, siteB.done]);
    // Site A has answered everything it received: now its PE can forget the
    // UE (earlier, A's late echoes would be lost: a site's program answers
    // up to 400 ms after the frame arrived on a host at load 20).
    if (movePe) {
      sessionDelMs = await timed(() => peSession(t, p, pe, 'del', 'meca', u));
      sessionAtA = false;
    }
    await sleep(1000);
    back.stop();
    const rback = await back.done;
    const ues = perUe(t, o.ue, s.sent, ra, rb, rback);
    const drops1 = await Promise.all([rcvbufErrors(t.ns.meca), rcvbufErrors(t.ns.mecb), rcvbufErrors(t.ns.ue)]);
    const ms = (ns: number | undefined): number | null => (ns === undefined ? null : Number(BigInt(ns) - tPolicy) / 1e6);
    const j = o.ue - 1;
    const atA = ra.ue.flatMap((x, i) => (x === j ? [i] : []));
    const atB = rb.ue.flatMap((x, i) => (x === j ? [i] : []));
    const fromB = rback.ue.flatMap((x, i) => (x === j && rback.site[i] === 2 ? [i] : []));
    const moved: MovedUe = {
      index: o.ue,
      addr: u.addr,
      peSessionMoved: movePe,
      sessionAddMs,
      policyMs,
      sessionDelMs,
      firstAtBMs: atB.length > 0 ? ms(rb.t[atB[0]!]) : null,
      lastAtAMs: atA.length > 0 ? ms(ra.t[atA[atA.length - 1]!]) : null,
      firstFromBMs: fromB.length > 0 ? ms(Math.min(...fromB.map((i) => rback.t[i]!))) : null,
      lastSeqAtA: atA.length > 0 ? ra.seq[atA[atA.length - 1]!]! : null,
      firstSeqAtB: atB.length > 0 ? rb.seq[atB[0]!]! : null,
    };
    const sum = (f: (r: UeRecord) => number): number => ues.reduce((acc, r) => acc + f(r), 0);
    const unattributed = ra.unattributed + rb.unattributed + rback.unattributed;
    const totals = {
      lost: sum((r) => r.uplink.lost + r.downlink.lost),
      duplicated: sum((r) => r.uplink.duplicated + r.downlink.duplicated),
      reordered: sum((r) => r.uplink.reordered + r.downlink.reordered),
      malformed: sum((r) => r.uplink.malformed + r.downlink.malformed) + unattributed,
    };
    mkdirSync(resolve(o.out), { recursive: true });
    const file = join(resolve(o.out), 'lab-relocate.json');
    const report: RelocateReport = {
      at,
      loadavg: load,
      pe,
      sent: s.total,
      rate: Math.round(s.rate),
      ues,
      moved,
      totals,
      unattributed,
      echoErrors: ra.echo_errors + rb.echo_errors,
      socketDrops: { siteA: drops1[0]! - drops0[0]!, siteB: drops1[1]! - drops0[1]!, ues: drops1[2]! - drops0[2]! },
      notes: [
        ...(pe === 'kernel' ? [KERNEL_PE_NOTE] : []),
        ...(atB.length === 0 ? [`UE ${o.ue} sent nothing that reached B: the stream ended ${Number(BigInt(s.end_ns) - tPolicy) / 1e6} ms after the policy call began (it took ${policyMs.toFixed(0)} ms); give it more --seconds`] : []),
      ],
      file,
    };
    writeFileSync(file, JSON.stringify(report, null, 2) + '\n');
    return report;
  } finally {
    for (const q of procs) q.kill();
    // Put the UE back at A (policy and session), as lab up left it.
    if (state !== 'a') await setPolicy(t, p, u, 'meca').catch(() => undefined);
    if (!sessionAtA) await peSession(t, p, pe, 'add', 'meca', u).catch(() => undefined);
    if (sessionAtB) await peSession(t, p, pe, 'del', 'mecb', u).catch(() => undefined);
  }
}

/** lab up (unless a lab with this prefix is up), the scenario, lab down (unless kept or it was up before). */
export async function relocate(o: RelocateOptions): Promise<RelocateReport> {
  const t = labTopology(o.prefix);
  const p = labPaths(t);
  const running = await labApi(p, 'GET', '/v1/status').then(
    (r) => r.status === 200,
    () => false,
  );
  if (!running) {
    o.progress(`lab up (prefix ${o.prefix}, --pe ${o.pe ?? 'kernel'})`);
    await labUp(o.prefix, o.progress, o.pe === undefined ? {} : { pe: o.pe });
  } else {
    const pe = labPe(p);
    if (o.pe !== undefined && o.pe !== pe) throw new Error(`lab "${o.prefix}" is up with --pe ${pe}, not ${o.pe}: mup lab up --pe ${o.pe}${o.prefix === 'mlab' ? '' : ` --prefix ${o.prefix}`} first, or leave --pe out`);
    o.progress(`using the running lab "${o.prefix}" (--pe ${pe})`);
  }
  try {
    return await relocateOnLab(t, p, o);
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
  const head = `  ${'UE'.padEnd(12)} ${pad('UL TEID', 8)} ${pad('DL TEID', 8)} ${pad('QFI', 3)} | uplink ${pad('sent', 5)} ${pad('lost', 4)} ${pad('dup', 4)} ${pad('reord', 5)} ${pad('malf', 4)} ${pad('at A', 5)} ${pad('at B', 5)} | downlink ${pad('lost', 4)} ${pad('dup', 4)} ${pad('reord', 5)} ${pad('malf', 4)} ${pad('from A', 6)} ${pad('from B', 6)}`;
  const row = (r: UeRecord): string =>
    `  ${`${r.addr}${r.moved ? ' *' : ''}`.padEnd(12)} ${pad(`0x${r.ulTeid.toString(16)}`, 8)} ${pad(`0x${r.dlTeid.toString(16)}`, 8)} ${pad(r.qfi, 3)} | ${' '.repeat(6)} ${pad(r.uplink.sent, 5)} ${pad(r.uplink.lost, 4)} ${pad(r.uplink.duplicated, 4)} ${pad(r.uplink.reordered, 5)} ${pad(r.uplink.malformed, 4)} ${pad(r.uplink.viaA, 5)} ${pad(r.uplink.viaB, 5)} | ${' '.repeat(8)} ${pad(r.downlink.lost, 4)} ${pad(r.downlink.duplicated, 4)} ${pad(r.downlink.reordered, 5)} ${pad(r.downlink.malformed, 4)} ${pad(r.downlink.viaA, 6)} ${pad(r.downlink.viaB, 6)}`;
  return [head, ...ues.filter((r) => r.moved).map(row), ...ues.filter((r) => !r.moved).map(row)];
}

export function renderRelocate(r: RelocateReport): string {
  const ms = (x: number | null): string => (x === null ? 'never' : `${x.toFixed(3)} ms`);
  const m = r.moved;
  const others = r.ues.filter((x) => !x.moved);
  const bad = (x: UeRecord): boolean => x.uplink.lost + x.uplink.duplicated + x.uplink.reordered + x.uplink.malformed + x.downlink.lost + x.downlink.duplicated + x.downlink.reordered + x.downlink.malformed > 0;
  const mr = r.ues.find((x) => x.moved)!;
  const line = (d: DirStats): string => `lost ${d.lost}, duplicated ${d.duplicated}, reordered ${d.reordered}, malformed ${d.malformed}`;
  return [
    '',
    `MEC relocation of one UE, ${r.at}, load average ${r.loadavg.join(' ')}, --pe ${r.pe}`,
    `  stream: ${r.sent} frames at ${r.rate} frames/s from ${r.ues.length} UEs to the anycast address, each echoed by the site that received it`,
    `  moved: UE ${m.index} (${m.addr}): ${m.peSessionMoved ? 'session added at mec-b\'s PE, ' : ''}policy to mec-b's SID (PUT /v1/policies)${m.peSessionMoved ? ", session deleted at mec-a's PE" : ', PE session NOT moved'}`,
    `    uplink   ${line(mr.uplink)}; ${mr.uplink.viaA} at A (seq ..${m.lastSeqAtA ?? '-'}), ${mr.uplink.viaB} at B (seq ${m.firstSeqAtB ?? '-'}..)`,
    `    downlink ${line(mr.downlink)}; ${mr.downlink.viaA} echoes from A, ${mr.downlink.viaB} from B`,
    `    calls: session add ${ms(m.sessionAddMs)}, policy ${ms(m.policyMs)}, session delete ${ms(m.sessionDelMs)}`,
    `    from the policy call: first frame at B ${ms(m.firstAtBMs)}, last at A ${ms(m.lastAtAMs)}, first echo from B at the UE ${ms(m.firstFromBMs)}`,
    `  the ${others.length} others: ${others.filter(bad).length === 0 ? 'every one 0 lost, 0 duplicated, 0 reordered, 0 malformed both ways' : `${others.filter(bad).length} with a non-zero count (table below)`}`,
    `  totals (all UEs, both directions): lost ${r.totals.lost}, duplicated ${r.totals.duplicated}, reordered ${r.totals.reordered}, malformed ${r.totals.malformed} (${r.unattributed} unattributed); echo send errors ${r.echoErrors}`,
    `  of those, dropped by a receiver's full socket buffer (nstat UdpRcvbufErrors: the program fell behind, not the path): site A ${r.socketDrops.siteA}, site B ${r.socketDrops.siteB}, UEs ${r.socketDrops.ues}`,
    ...r.notes.map((n) => `  note: ${n}`),
    '',
    '  per UE (* = moved):',
    ...renderUeTable(r.ues),
    '',
    `  written: ${r.file}`,
    '',
  ].join('\n');
}
