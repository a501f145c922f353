/**
 * `npm run soak`: the daemon under faults while traffic flows both ways.
 *
 * The RFC 2544 bench's namespaces (BenchLab: a ── dut ── b) with the real
 * daemon (`mup daemon --netns <dut>`, bin/mup.js, a child process) attached
 * to da and db; numbered frames (soak-frames.py over AF_PACKET) uplink
 * GTP-U a -> b (H.M.GTP4.D) and downlink SRv6 b -> a (End.M.GTP4.E), at a
 * fixed rate, counted at the far ends. Meanwhile, on a seeded schedule, one
 * fault at a time: SIGKILL and restart of the daemon, the state file's
 * tmpfs filled and freed, the link pins removed, the gNB-side veth deleted
 * and recreated; and throughout, API churn on rules the measured flows do
 * not use (plus equivalent replaces of theirs), journaled client-side. At
 * the end, after one more restart, the daemon's tables against the journal.
 * Report: soak-analysis.ts; method and how to read it: docs/bench.md "Soak".
 *
 * Everything it makes (namespaces, bpffs and tmpfs mounts, processes) is
 * removed at the end, also on failure and on SIGINT/SIGTERM.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import { request } from 'node:http';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { execa } from 'execa';
import { BenchLab, GNB, MAC, MTU, ip, sweepStale } from './rfc2544/lab.js';
import { DAEMON_NODE_FLAGS } from '../host/node-flags.js';
import { downlinkFrame, uplinkFrame } from './rfc2544/cases.js';
import { GTPU_OVERHEAD, SRV6_OVERHEAD } from '../packet/frames.js';
import { pidAlive } from '../host/process.js';
import { L3fwd, attachXdp } from '../packet/generator.js';
import {
  FAULTS, RSS_MIN_COVERAGE, RSS_MIN_TROUGHS, RSS_MIN_TROUGH_SPAN_MS, RSS_MIN_WARM_MS, analyzeStream, pathDrops, vethDelta, type PathDrops, type VethStats, minLifeAuto, compareJournal, judgedTroughs, judgedKb, ok2xx, rssSummary, type Fault, type FaultWindow, type JournalEntry, type JournalReport, type RecvResult,
  type GcTrough, parseGcLog, type RssReport, type Trend, type RssSample, type Rule, type RuleKind, type SendResult, type StreamReport,
} from './soak-analysis.js';

const MUP_BIN = fileURLToPath(new URL('../../bin/mup.js', import.meta.url));
const PRELOAD_MJS = new URL('./soak-preload.mjs', import.meta.url).href;
const FRAMES_PY = fileURLToPath(new URL('./soak-frames.py', import.meta.url));
const PYTHON = '/usr/bin/python3';
/** Frame size (RFC 2544 style: inner packet = size - 18): room for the 24-byte stamp. */
const FRAME_SIZE = 128;
/** Offset of the inner UDP payload in each direction's input frame. */
const UP_OFF = GTPU_OVERHEAD + 28;
const DOWN_OFF = SRV6_OVERHEAD + 28;
const STATE_TMPFS = '2m';
/**
 * How long the soak waits for the daemon to answer after a start (a restart took 5 to 10 s at load 20, over 20 s
 * at load 30: the soak then killed it as failed, and the next faults found no daemon), to re-attach a recreated
 * interface, to put removed link pins back. Bounds, not targets: the time taken is reported.
 */
const START_BOUND_MS = 60_000;
const REATTACH_BOUND_MS = 10_000;
const REPIN_BOUND_MS = 15_000;
/** Label of the losses between an interface up and the daemon's attach (iface). */
const BEFORE_ATTACH = 'iface before attach';
const FIRST_START_BOUND_MS = 90_000;
const CHURN_KEYS = 32;
/** First fault this long after the traffic starts. */
const FAULT_START_MS = 5000;
/** The disk stays full until this many API changes were answered meanwhile (a change may fit in the state file's last page), 4 to 10 s. */
const DISK_FULL_CHANGES = 25;

export interface SoakOptions {
  readonly durationMs: number;
  readonly seed: number;
  readonly faults: ReadonlySet<Fault>;
  /** Frames per second, each way. */
  readonly rate: number;
  /** Per daemon process: RSS samples before this are warm-up. */
  readonly warmupMs: number;
  /**
   * A kill only once the running daemon has lived this long (0: kills come
   * in the schedule like any fault), so that each life has a judged warm
   * phase: see minLifeAuto.
   */
  readonly minLifeMs: number;
  /** Test only: the daemon retains this many KB per minute (a leak the RSS verdict must see). */
  readonly leakKbPerMin: number;
  /** The daemon collects its heap in full every this many ms of its life (soak-preload.mjs); 0: only when V8 decides. */
  readonly gcEveryMs: number;
  /** After each forced collection, glibc's malloc_trim(0) (soak-preload.mjs): the troughs judged leave out the free memory malloc's arenas keep. */
  readonly mallocTrim: boolean;
  /** Diagnosis: the daemon logs process.memoryUsage() every 5 s (soak-preload.mjs); the report sums it up per life. */
  readonly memoryLog: boolean;
  /** Diagnosis: the daemon writes V8 heap snapshots into this directory (soak-preload.mjs); '' none. */
  readonly heapSnapshots: string;
  /** API changes per second (churn). */
  readonly churnRate: number;
  readonly out: string;
}

// --- small things ---------------------------------------------------------------

/** mulberry32: the schedule from --seed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const aborter = new AbortController();
const aborted = (): boolean => aborter.signal.aborted;
/** Sleep, cut short by SIGINT/SIGTERM. */
const sleep = (ms: number): Promise<void> =>
  new Promise((res) => {
    if (aborted()) return res();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      aborter.signal.removeEventListener('abort', done);
      res();
    }
    aborter.signal.addEventListener('abort', done, { once: true });
  });

export function parseDuration(s: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(s.trim());
  if (m === null) throw new Error(`duration '${s}': a number with ms, s or m (60s, 2m)`);
  const n = Number(m[1]);
  return Math.round(m[2] === 'ms' ? n : m[2] === 'm' ? n * 60_000 : n * 1000);
}

interface Answer {
  readonly status: number;
  readonly body: unknown;
}

/** One request on the daemon's socket. Rejects with code ECONNREFUSED/ENOENT when nothing listens (never sent). */
function api(socket: string, method: string, path: string, body?: unknown, timeoutMs = 5000): Promise<Answer> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      { socketPath: socket, method, path, timeout: timeoutMs, headers: payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {
            // not JSON
          }
          resolve({ status: res.statusCode ?? 0, body: parsed });
        });
      },
    );
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer within ${timeoutMs} ms`)));
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

const notListening = (e: unknown): boolean => ['ECONNREFUSED', 'ENOENT'].includes((e as NodeJS.ErrnoException).code ?? '');

// --- the daemon -------------------------------------------------------------------

interface Exit {
  readonly atMs: number;
  readonly pid: number;
  readonly code: number | null;
  readonly signal: string | null;
  readonly expected: boolean;
}

class Daemon {
  #proc: ChildProcess | undefined;
  #startedAt = 0;
  #expectExit = false;
  readonly exits: Exit[] = [];
  readonly startFailures: string[] = [];

  constructor(
    readonly dir: string,
    readonly netns: string,
    readonly instance: string,
    readonly now: () => number,
    readonly leakKbPerMin = 0,
    readonly memoryLog = false,
    readonly heapSnapshots = '',
    readonly gcEveryMs = 0,
    readonly mallocTrim = false,
  ) {
    this.wallAtZero = Date.now() - now();
  }

  /** Wall-clock ms (Date.now()) at the soak's time 0, to put the daemon's log times on the soak's clock. */
  readonly wallAtZero: number;

  get memlogFile(): string {
    return join(this.dir, 'memory.jsonl');
  }

  /** soak-preload.mjs appends process.memoryUsage() at the end of every major GC here (every life). */
  get gclogFile(): string {
    return join(this.dir, 'gc.jsonl');
  }

  /** The post-GC records of every life so far, on the soak's clock; [] when none could be read. */
  gcTroughs(): GcTrough[] {
    let text = '';
    try {
      text = readFileSync(this.gclogFile, 'utf8');
    } catch {
      return [];
    }
    return parseGcLog(text, this.wallAtZero);
  }

  get socket(): string {
    return join(this.dir, 'mup.sock');
  }
  get stateFile(): string {
    return join(this.dir, 'state', 'state.json');
  }
  get bpffs(): string {
    return join(this.dir, 'bpffs');
  }
  get pinDir(): string {
    return join(this.bpffs, 'mup', this.instance);
  }
  get logFile(): string {
    return join(this.dir, 'daemon.log');
  }
  get pid(): number | undefined {
    return this.#proc?.exitCode === null && this.#proc.signalCode === null ? this.#proc.pid : undefined;
  }
  /** ms since the running process started. */
  get lifeMs(): number {
    return this.now() - this.#startedAt;
  }

  logTail(lines = 8): string {
    try {
      return readFileSync(this.logFile, 'utf8').trim().split('\n').slice(-lines).join('\n');
    } catch {
      return '';
    }
  }

  /**
   * Soak time (ms) of the first line of the daemon's log after `afterMs`
   * whose message contains `msg`, about interface `iface`; undefined if none.
   */
  eventMs(msg: string, iface: string, afterMs: number): number | undefined {
    let text = '';
    try {
      text = readFileSync(this.logFile, 'utf8');
    } catch {
      return undefined;
    }
    for (const l of text.split('\n')) {
      if (!l.startsWith('{') || !l.includes(msg)) continue;
      try {
        const o = JSON.parse(l) as { time?: string; msg?: string; interface?: string };
        if (o.interface !== iface || typeof o.time !== 'string' || !String(o.msg).includes(msg)) continue;
        const t = Date.parse(o.time) - this.wallAtZero;
        if (t >= afterMs) return t;
      } catch {
        // not a JSON line (a crash's stack)
      }
    }
    return undefined;
  }

  /** Start and wait (bounded) until the API answers as this process. False (and the reason kept) if it does not. */
  async start(boundMs = START_BOUND_MS): Promise<boolean> {
    const fd = openSync(this.logFile, 'a');
    const args = [MUP_BIN, 'daemon', '--config', join(this.dir, 'mup.yaml'), '--instance', this.instance, '--socket', this.socket,
      '--state-file', this.stateFile, '--bpffs', this.bpffs, '--netns', this.netns, '--log-format', 'json'];
    // A module loaded before the daemon (soak-preload.mjs), always: the post-GC log the RSS verdict judges;
    // when asked, the test-only leak, the memory log, heap snapshots.
    const env = {
      ...process.env, ...daemonEnv(), MUP_SOAK_GCLOG: this.gclogFile, MUP_SOAK_LEAK_KB_PER_MIN: String(this.leakKbPerMin),
      MUP_SOAK_MEMLOG: this.memoryLog ? this.memlogFile : '', MUP_SOAK_HEAPSNAP: this.heapSnapshots, MUP_SOAK_GC_EVERY_MS: String(this.gcEveryMs),
      MUP_SOAK_MALLOC_TRIM: this.gcEveryMs > 0 && this.mallocTrim ? '1' : '',
    };
    const proc = spawn(process.execPath, [...DAEMON_NODE_FLAGS, '--import', PRELOAD_MJS, ...args], { stdio: ['ignore', fd, fd], env });
    closeSync(fd);
    this.#proc = proc;
    this.#startedAt = this.now();
    this.#expectExit = false;
    proc.once('exit', (code, signal) => {
      this.exits.push({ atMs: Math.round(this.now()), pid: proc.pid ?? 0, code, signal, expected: this.#expectExit });
    });
    const deadline = Date.now() + boundMs;
    while (Date.now() < deadline && !aborted()) {
      if (proc.exitCode !== null || proc.signalCode !== null) break;
      try {
        const r = await api(this.socket, 'GET', '/v1/status', undefined, 2000);
        if (r.status === 200 && (r.body as { pid?: number }).pid === proc.pid) return true;
      } catch {
        // not yet
      }
      await sleep(50);
    }
    if (proc.exitCode === null && proc.signalCode === null) await this.stop('SIGKILL');
    const last = this.logTail(1).replace(/^mup: /, '').slice(0, 300);
    this.startFailures.push(`at ${(this.now() / 1000).toFixed(1)} s: ${proc.exitCode !== null ? `exited ${proc.exitCode}` : `no answer within ${boundMs / 1000} s`}: ${last}`);
    return false;
  }

  /** Signal the process and wait for it to exit (SIGKILL after 10 s). */
  async stop(signal: NodeJS.Signals): Promise<void> {
    const proc = this.#proc;
    if (proc === undefined || proc.exitCode !== null || proc.signalCode !== null) return;
    this.#expectExit = true;
    const gone = new Promise<void>((r) => proc.once('exit', () => r()));
    proc.kill(signal);
    const t = setTimeout(() => proc.kill('SIGKILL'), 10_000);
    await gone;
    clearTimeout(t);
  }

  async status(): Promise<{ interfaces: { name: string; attached: boolean }[] } | undefined> {
    try {
      const r = await api(this.socket, 'GET', '/v1/status', undefined, 3000);
      return r.status === 200 ? (r.body as { interfaces: { name: string; attached: boolean }[] }) : undefined;
    } catch {
      return undefined;
    }
  }
}

// --- traffic -------------------------------------------------------------------------

interface Py {
  readonly proc: ChildProcess;
  readonly out: () => string;
  readonly done: Promise<void>;
}

/** soak-frames.py in namespace `ns`; --owner (the soak's directory) lets a later soak find it if this one is killed. */
function py(ns: string, owner: string, args: readonly string[], input?: string): Py {
  const proc = spawn('ip', ['netns', 'exec', ns, PYTHON, FRAMES_PY, ...args, '--owner', `${owner}/`], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stdout?.on('data', (c: Buffer) => (out += c.toString()));
  proc.stderr?.on('data', (c: Buffer) => (err += c.toString()));
  proc.stdin?.on('error', () => undefined);
  if (input !== undefined) proc.stdin?.write(input);
  const done = new Promise<void>((r) => proc.once('exit', () => r()));
  return { proc, out: () => out + (err === '' ? '' : `\n${err}`), done };
}

function lastJson<T>(p: Py, what: string): T {
  const line = p.out().trim().split('\n').reverse().find((l) => l.startsWith('{'));
  if (line === undefined) throw new Error(`${what}: no result (exit ${p.proc.exitCode}): ${p.out().slice(-400)}`);
  return JSON.parse(line) as T;
}

// --- churn and the journal --------------------------------------------------------

interface RuleSpec {
  readonly kind: RuleKind;
  readonly key: string;
  readonly path: string;
  /** The two values a replace alternates between. */
  readonly values: readonly [Rule, Rule];
  /** Measured flow: only replaced, with the value it has. */
  readonly measured: boolean;
}

const MEASURED_UP: Rule = { name: 'measured-up', match: '192.0.2.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' };
const MEASURED_DOWN: Rule = { name: 'measured-down', sid: '2001:db8:2::/48', src_prefix_len: 64 };

function ruleSpecs(): RuleSpec[] {
  const specs: RuleSpec[] = [
    { kind: 'policy', key: `policy:${String(MEASURED_UP.match)}`, path: '/v1/policies', values: [MEASURED_UP, MEASURED_UP], measured: true },
    { kind: 'localsid', key: `localsid:${String(MEASURED_DOWN.sid)}`, path: '/v1/localsids', values: [MEASURED_DOWN, MEASURED_DOWN], measured: true },
  ];
  for (let i = 0; i < CHURN_KEYS; i++) {
    const match = `10.200.${i}.0/24`;
    const p = (hop: number, hi: number): Rule => ({ name: `churn-p${i}`, match, sr_prefix: `2001:db8:${(hi + i).toString(16)}::/48`, src_prefix: '2001:db8:ff::/64', hop_limit: hop });
    specs.push({ kind: 'policy', key: `policy:${match}`, path: '/v1/policies', values: [p(64, 0x100), p(63, 0x300)], measured: false });
    const sid = `2001:db8:${(0x1000 + i).toString(16)}::/48`;
    const l = (ttl: number): Rule => ({ name: `churn-l${i}`, sid, src_prefix_len: 64, ttl });
    specs.push({ kind: 'localsid', key: `localsid:${sid}`, path: '/v1/localsids', values: [l(64), l(63)], measured: false });
  }
  return specs;
}

function daemonConfig(): string {
  const y = (r: Rule): string =>
    Object.entries(r)
      .map(([k, v], i) => `${i === 0 ? '  - ' : '    '}${k}: ${String(v)}`)
      .join('\n');
  return [
    'interfaces:', '  - name: da', '  - name: db',
    'settings:', '  forwarding: fib', '  max_policies: 1024', '  max_localsids: 1024',
    'policies:', y(MEASURED_UP),
    'localsids:', y(MEASURED_DOWN), '',
  ].join('\n');
}

class Churn {
  readonly journal: JournalEntry[] = [];
  notConnected = 0;
  #present = new Map<string, number>();
  #n = 0;

  constructor(
    readonly socket: string,
    readonly rand: () => number,
    readonly now: () => number,
  ) {}

  async step(specs: readonly RuleSpec[]): Promise<void> {
    const measured = this.rand() < 0.1;
    const pool = specs.filter((s) => s.measured === measured);
    const s = pool[Math.floor(this.rand() * pool.length)]!;
    const idx = this.#present.get(s.key);
    let op: JournalEntry['op'];
    let rule: Rule | undefined;
    if (s.measured) [op, rule] = ['replace', s.values[0]];
    else if (idx === undefined) [op, rule] = ['add', s.values[0]];
    else if (this.rand() < 0.6) [op, rule] = ['replace', s.values[1 - idx]!];
    else op = 'delete';
    const keyField = s.kind === 'policy' ? 'match' : 'sid';
    const keyValue = s.key.slice(s.key.indexOf(':') + 1);
    const at = this.now();
    let status: number;
    try {
      const r = op === 'delete'
        ? await api(this.socket, 'DELETE', `${s.path}?${keyField}=${encodeURIComponent(keyValue)}`)
        : await api(this.socket, op === 'add' ? 'POST' : 'PUT', s.path, rule);
      status = r.status;
    } catch (e) {
      if (notListening(e)) {
        this.notConnected++;
        return;
      }
      status = 0;
    }
    this.journal.push({ n: this.#n++, kind: s.kind, op, key: s.key, ...(rule === undefined ? {} : { rule }), status, atMs: Math.round(at), tookMs: Math.round(this.now() - at) });
    if (s.measured) return;
    // What the next step assumes is there (a refusal tells too: 404 absent, 409 present).
    if (ok2xx(status)) {
      if (op === 'delete') this.#present.delete(s.key);
      else this.#present.set(s.key, rule === s.values[0] ? 0 : 1);
    } else if (status === 404) this.#present.delete(s.key);
    else if (status === 409) this.#present.set(s.key, 0);
  }
}

// --- faults -------------------------------------------------------------------------

interface FaultRecord {
  readonly fault: Fault;
  readonly startMs: number;
  readonly endMs: number;
  /** What happened, one line. */
  readonly note: string;
  /** Did the daemon do what the fault asks of it (restart served, re-attached, re-pinned, refused cleanly)? */
  readonly recovered: boolean;
  /** iface: how long frames had no wire (deleted, or not yet up at both ends). */
  readonly noWireMs?: number;
  /** iface: how long after the interface was up the daemon attached (its log), when it was after. */
  readonly lateAttachMs?: number;
  /** What the veths' counters say the kernel dropped during the fault, per direction. */
  readonly drops?: { readonly uplink: PathDrops; readonly downlink: PathDrops };
}

/** The four veths' drop counters, in their namespaces (ethtool -S; per-queue fields summed). */
async function vethStats(L: BenchLab): Promise<Record<string, VethStats>> {
  const out: Record<string, VethStats> = {};
  await Promise.all(([[L.a, 'ea'], [L.dut, 'da'], [L.dut, 'db'], [L.b, 'eb']] as const).map(async ([ns, dev]) => {
    const [r, l] = await Promise.all([
      execa('ip', ['netns', 'exec', ns, 'ethtool', '-S', dev], { reject: false }),
      execa('ip', ['-n', ns, '-s', '-j', 'link', 'show', 'dev', dev], { reject: false }),
    ]);
    const m: Record<string, number> = {};
    try {
      const tx = (JSON.parse(l.stdout) as { stats64?: { tx?: { dropped?: number } } }[])[0]?.stats64?.tx?.dropped;
      if (typeof tx === 'number') m.tx_dropped = tx;
    } catch {
      // the device is gone (iface fault): no counters this time
    }
    for (const line of r.stdout.split('\n')) {
      const x = /^\s*(rx_queue|tx_queue)_\d+_(\w+):\s*(\d+)$/.exec(line);
      if (x !== null && /drops|errors/.test(x[2]!)) m[`${x[1]}_${x[2]}`] = (m[`${x[1]}_${x[2]}`] ?? 0) + Number(x[3]);
    }
    out[dev] = m;
  }));
  return out;
}

/** Drop counters sampled over the run: the deltas between consecutive samples add up across a device made again. */
class VethLog {
  #last: Record<string, VethStats> | undefined;
  readonly total: Record<string, Record<string, number>> = {};
  constructor(readonly lab: BenchLab) {}
  /** Sample; returns the drops since the previous sample per device. */
  async sample(): Promise<Record<string, Record<string, number>>> {
    const now = await vethStats(this.lab);
    const d: Record<string, Record<string, number>> = {};
    for (const [dev, st] of Object.entries(now)) {
      d[dev] = vethDelta(st, this.#last?.[dev] ?? (this.#last === undefined ? st : {}));
      for (const [k, v] of Object.entries(d[dev]!)) (this.total[dev] ??= {})[k] = (this.total[dev]?.[k] ?? 0) + v;
    }
    this.#last = now;
    return d;
  }
}

const dropsText = (p: PathDrops): string =>
  `not taken in (ring full or interface down) ${p.ringIn}, redirect failed (target gone or down) ${p.redirectFailed}, XDP_DROP ${p.xdpDrop}, ` +
  `not taken out (far ring full or down) ${p.redirectOut}, dropped at the far end ${p.farEnd}`;
const anyDrops = (p: PathDrops): boolean => p.ringIn + p.redirectFailed + p.xdpDrop + p.redirectOut + p.farEnd > 0;

// --- the run ---------------------------------------------------------------------------

export interface SoakResult {
  readonly options: Omit<SoakOptions, 'faults'> & { faults: Fault[] };
  readonly uplink: StreamReport;
  readonly downlink: StreamReport;
  readonly journal: JournalReport;
  readonly finalRead: string | null;
  readonly rss: RssReport;
  readonly faults: readonly FaultRecord[];
  /** Kernel drops over the whole traffic per direction (veth counters), and the receivers' socket drops. */
  readonly kernelDrops?: { readonly uplink: PathDrops; readonly downlink: PathDrops; readonly socketUp: number; readonly socketDown: number };
  readonly unexpectedExits: readonly Exit[];
  readonly startFailures: readonly string[];
  /** The senders' marks ([seq, ns, 1?]) from 100 ms before to 500 ms after each iface fault: how the frames around a recreation were dated. */
  readonly senderMarks?: { readonly uplink: SendResult['marks']; readonly downlink: SendResult['marks'] };
  /** The soak's clock origin (CLOCK_MONOTONIC ns): every `…Ms` of the result is after it, so kernel traces (perf -k mono) line up. */
  readonly t0Ns?: number;
  readonly churnNotConnected: number;
  readonly entries: readonly JournalEntry[];
  readonly rssSamples: readonly RssSample[];
  /** Every major GC of the sampled lives, with the memory right after it (soak-preload.mjs): what the RSS verdict judges. */
  readonly gcTroughs: readonly GcTrough[];
  /** --memory-log: per life, how each part of the memory moved after warm-up. */
  readonly memory: readonly string[];
}

/**
 * --memory-log, per daemon life after warm-up: the floor (lowest value) of
 * the last third minus that of the first third, for rss, heapUsed,
 * external + arrayBuffers, and rss minus heapTotal and external (native).
 */
function memorySummary(text: string, warmupMs: number): string[] {
  type M = { pid: number; lifeMs: number; rss: number; heapTotal: number; heapUsed: number; external: number; arrayBuffers: number };
  const rows = text.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as M).filter((m) => m.lifeMs >= warmupMs);
  const out: string[] = [];
  for (const pid of new Set(rows.map((m) => m.pid))) {
    const ms = rows.filter((m) => m.pid === pid);
    const third = Math.floor(ms.length / 3);
    if (third === 0) continue;
    const growth = (f: (m: M) => number): string => {
      const g = Math.min(...ms.slice(-third).map(f)) - Math.min(...ms.slice(0, third).map(f));
      return `${g >= 0 ? '+' : ''}${(g / 1048576).toFixed(1)} MB`;
    };
    const last = ms.at(-1)!;
    out.push(`pid ${pid} (${ms.length} samples over ${((last.lifeMs - ms[0]!.lifeMs) / 1000).toFixed(0)} s): floor growth rss ${growth((m) => m.rss)}, heapUsed ${growth((m) => m.heapUsed)}, ` +
      `heapTotal ${growth((m) => m.heapTotal)}, external ${growth((m) => m.external)}, native (rss - heapTotal - external) ${growth((m) => m.rss - m.heapTotal - m.external)}; ` +
      `at the end heapUsed ${(last.heapUsed / 1048576).toFixed(1)} MB of ${(last.heapTotal / 1048576).toFixed(1)}, external ${(last.external / 1048576).toFixed(1)} MB`);
  }
  return out;
}

async function cleanupAll(steps: (() => Promise<unknown> | unknown)[]): Promise<string[]> {
  const errors: string[] = [];
  for (const s of steps) {
    try {
      await s();
    } catch (e) {
      errors.push((e as Error).message);
    }
  }
  return errors;
}

const SOAK_DIR = '/tmp/mup-soak-';

/** Diagnosis: MUP_SOAK_DAEMON_ENV="K=V K2=V2" is added to the daemon's environment (e.g. MALLOC_ARENA_MAX=2). */
function daemonEnv(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const kv of (process.env['MUP_SOAK_DAEMON_ENV'] ?? '').split(/\s+/).filter((x) => x.includes('='))) out[kv.slice(0, kv.indexOf('='))] = kv.slice(kv.indexOf('=') + 1);
  return out;
}

/**
 * What a soak killed with SIGKILL left: its namespaces (sweepStale), and in
 * /tmp/mup-soak-<pid>-*: the daemon and frame processes it started (their
 * command lines name the directory), the bpffs and tmpfs mounts, the directory. Only for owners
 * no longer alive.
 */
async function sweepStaleSoaks(log: (s: string) => void): Promise<void> {
  await sweepStale();
  for (const name of readdirSync('/tmp')) {
    const m = /^mup-soak-(\d+)-/.exec(name);
    if (m === null || pidAlive(Number(m[1]))) continue;
    const dir = `/tmp/${name}`;
    for (const p of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
      try {
        if (readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(`${dir}/`)) process.kill(Number(p), 'SIGKILL');
      } catch {
        // gone
      }
    }
    for (const sub of ['state', 'bpffs']) await execa('umount', [join(dir, sub)], { reject: false });
    rmSync(dir, { recursive: true, force: true });
    log(`removed what soak ${m[1]} left: ${dir}`);
  }
}

export async function soak(o: SoakOptions, log: (s: string) => void): Promise<SoakResult> {
  await sweepStaleSoaks(log);
  const t0Ns = Number(process.hrtime.bigint());
  const now = (): number => (Number(process.hrtime.bigint()) - t0Ns) / 1e6;
  const dir = mkdtempSync(`${SOAK_DIR}${process.pid}-`);
  const procs: ChildProcess[] = [];
  let lab: BenchLab | undefined;
  let l3: L3fwd | undefined;
  let daemon: Daemon | undefined;
  const mounted: string[] = [];
  try {
    for (const d of ['bpffs', 'state']) mkdirSync(join(dir, d));
    await execa('mount', ['-t', 'bpf', 'bpf', join(dir, 'bpffs')]);
    mounted.push(join(dir, 'bpffs'));
    await execa('mount', ['-t', 'tmpfs', '-o', `size=${STATE_TMPFS},mode=0700`, 'tmpfs', join(dir, 'state')]);
    mounted.push(join(dir, 'state'));
    log(`dir ${dir}; namespaces mup2544-${process.pid}-soak{a,dut,b}`);
    lab = await BenchLab.create('soak');
    const L = lab;
    l3 = new L3fwd();
    const pass = l3.passFd;
    // The far ends run XDP_PASS: a veth delivers XDP-redirected frames only to a peer with a program.
    attachXdp(pass, 'ea', L.a);
    attachXdp(pass, 'eb', L.b);
    writeFileSync(join(dir, 'mup.yaml'), daemonConfig());
    const d = new Daemon(dir, L.dut, `soak${process.pid}`, now, o.leakKbPerMin, o.memoryLog, o.heapSnapshots, o.gcEveryMs, o.mallocTrim);
    daemon = d;
    // The first start, before any traffic or fault, is not a fault's recovery: it may take longer on a loaded host.
    if (!(await d.start(FIRST_START_BOUND_MS))) throw new Error(`the daemon did not start: ${d.startFailures.join('; ')}`);
    log(`daemon pid ${d.pid} on da, db in ${L.dut}`);

    // Traffic.
    const seconds = o.durationMs / 1000;
    const recvUp = py(L.b, dir, ['recv', '--magic', 'MUPSOAKU', '--ethertype', '86dd', '--seconds', String(seconds + 60)]);
    const recvDown = py(L.a, dir, ['recv', '--magic', 'MUPSOAKD', '--ethertype', '0800', '--seconds', String(seconds + 60)]);
    procs.push(recvUp.proc, recvDown.proc);
    for (const r of [recvUp, recvDown]) {
      const until = Date.now() + 10_000;
      while (!r.out().includes('ready') && Date.now() < until && r.proc.exitCode === null) await sleep(20);
      if (!r.out().includes('ready')) throw new Error(`receiver did not start: ${r.out()}`);
    }
    const up = uplinkFrame(FRAME_SIZE, 1).frame.toString('hex');
    const down = downlinkFrame(FRAME_SIZE, 1).frame.toString('hex');
    const sendArgs = (dev: string, off: number, magic: string): string[] => ['send', '--dev', dev, '--off', String(off), '--magic', magic, '--rate', String(o.rate), '--seconds', String(seconds)];
    const sendUp = py(L.a, dir, sendArgs('ea', UP_OFF, 'MUPSOAKU'), `${up}\n`);
    const sendDown = py(L.b, dir, sendArgs('eb', DOWN_OFF, 'MUPSOAKD'), `${down}\n`);
    procs.push(sendUp.proc, sendDown.proc);
    const trafficStart = now();
    const endAt = trafficStart + o.durationMs;
    const veth = new VethLog(L);
    await veth.sample();

    // RSS every second.
    const rss: RssSample[] = [];
    const sampler = setInterval(() => {
      const pid = d.pid;
      if (pid === undefined) return;
      try {
        const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
        if (Number.isFinite(kb)) rss.push({ tMs: Math.round(now()), pid, lifeMs: Math.round(d.lifeMs), rssKb: kb });
      } catch {
        // exited meanwhile
      }
    }, 1000);

    // Churn, throughout.
    const rand = rng(o.seed);
    const churn = new Churn(d.socket, rng(o.seed ^ 0x5eed), now);
    const specs = ruleSpecs();
    let churning = o.faults.has('churn');
    const churnLoop = (async () => {
      while (churning && !aborted() && now() < endAt) {
        await churn.step(specs);
        await sleep(1000 / o.churnRate);
      }
    })();

    // Faults, one at a time, on a seeded schedule.
    const windows: FaultWindow[] = [];
    const records: FaultRecord[] = [];
    const kinds = FAULTS.filter((f) => f !== 'churn' && o.faults.has(f));
    if (o.faults.has('churn')) windows.push({ fault: 'churn', startMs: trafficStart, endMs: endAt });
    const ensureDaemon = async (): Promise<void> => {
      if (d.pid === undefined && !aborted()) {
        log(`  daemon not running (${d.logTail(1)}); starting it`);
        await d.start();
      }
    };
    const attached = async (name: string): Promise<boolean> => ((await d.status())?.interfaces ?? []).some((i) => i.name === name && i.attached);
    await sleep(FAULT_START_MS);
    let order: Fault[] = [];
    // With a minimum life, kill is taken out of the shuffled order and comes as soon as the daemon has lived that long.
    const pool = o.minLifeMs > 0 ? kinds.filter((k) => k !== 'kill') : kinds;
    while (kinds.length > 0 && !aborted() && now() < endAt - 8000) {
      let f: Fault;
      if (o.minLifeMs > 0 && kinds.includes('kill') && d.lifeMs >= o.minLifeMs) f = 'kill';
      else if (pool.length === 0) {
        await sleep(500);
        continue;
      } else {
        if (order.length === 0) order = [...pool].sort(() => rand() - 0.5);
        f = order.shift()!;
      }
      await ensureDaemon();
      await veth.sample();
      const start = now();
      let note = '';
      let recovered = true;
      let noWireMs: number | undefined;
      let lateAttachMs: number | undefined;
      const win = (extra: Partial<FaultWindow> = {}): void => void windows.push({ fault: f, startMs: start, endMs: now(), ...extra });
      if (f === 'kill') {
        await d.stop('SIGKILL');
        await sleep(300 + rand() * 700);
        const t = now();
        recovered = await d.start();
        note = recovered ? `restarted, serving after ${Math.round(now() - t)} ms` : `did not start: ${d.startFailures.at(-1) ?? ''}`;
        win();
      } else if (f === 'disk') {
        const filler = join(dir, 'state', 'filler');
        const fd = openSync(filler, 'w');
        const chunk = Buffer.alloc(64 * 1024, 0x5a);
        try {
          for (;;) writeSync(fd, chunk);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'ENOSPC') throw e;
        } finally {
          closeSync(fd);
        }
        const before = churn.journal.length;
        const full = Date.now();
        while (!aborted() && Date.now() - full < 10_000 && (Date.now() - full < 4000 || (o.faults.has('churn') && churn.journal.length - before < DISK_FULL_CHANGES))) await sleep(100);
        const during = churn.journal.slice(before);
        unlinkSync(filler);
        await sleep(500);
        const codes = new Map<number, number>();
        for (const e of during) codes.set(e.status, (codes.get(e.status) ?? 0) + 1);
        // The state file is one JSON record per line (docs/daemon.md): a line that does not parse is a torn record.
        let text = '';
        try {
          text = readFileSync(d.stateFile, 'utf8');
        } catch {
          // none yet (no API change)
        }
        const torn = text.split('\n').findIndex((l) => {
          try {
            if (l !== '') JSON.parse(l);
            return false;
          } catch {
            return true;
          }
        });
        recovered = d.pid !== undefined && torn < 0;
        note = `disk full for ${Math.round(now() - start - 500)} ms; answers meanwhile ${[...codes].map(([c, n]) => `${c}x${n}`).join(' ') || 'none'}; ` +
          `daemon ${d.pid !== undefined ? 'still running' : 'exited'}; state file ${torn < 0 ? 'whole' : `torn at line ${torn + 1}`}`;
        win();
      } else if (f === 'pins') {
        const links = readdirSync(d.pinDir).filter((n) => n.startsWith('link'));
        for (const n of links) rmSync(join(d.pinDir, n));
        // Pins removed make no netlink event: the daemon's periodic check (every second, queued behind API
        // changes) puts them back. Polled up to a bound (a fixed 3 s wait failed 12 of 35 on a host at load 15-30).
        const until = Date.now() + REPIN_BOUND_MS;
        let back: string[] = [];
        let att = false;
        while (!aborted()) {
          back = readdirSync(d.pinDir).filter((n) => n.startsWith('link'));
          if (back.length >= links.length && (att = (await attached('da')) && (await attached('db')))) break;
          if (Date.now() > until) break;
          await sleep(200);
        }
        recovered = links.length === 2 && back.length === 2 && att;
        note = links.length === 0
          ? `no link pins to remove (none since the last removal); status attached ${att}`
          : `removed ${links.join(', ')}; ${recovered ? `pinned again and attached after ${Math.round(now() - start)} ms` : `after ${REPIN_BOUND_MS / 1000} s: link pins ${back.length}/${links.length}, status attached ${att}`}`;
        win();
      } else {
        // The gNB-side veth pair (da in dut, ea in a): deleted, then made again as BenchLab makes it, in the
        // order an operator would: made (down), the far end's XDP_PASS (a veth delivers redirected frames only
        // to a peer with a program), addresses, da up, the gNB's neighbour entry, and ea up last: from then on
        // the wire is whole. Until then frames have no path whatever the daemon does (no wire: inherent, on a
        // line of its own); after it, every lost frame counts.
        await ip(['-n', L.dut, 'link', 'del', 'da']);
        await sleep(1000);
        // Where the excused window ends a frame must be dated to the sub-ms: the senders mark every burst
        // until the interface is back (soak-frames.py; 20 ms apart the interpolation misdated frames by ms).
        for (const p of [sendUp, sendDown]) if (p.out().includes('sending')) p.proc.kill('SIGUSR1');
        const made = now();
        await ip(['-n', L.a, 'link', 'add', 'ea', 'address', MAC.ea, 'mtu', String(MTU), 'type', 'veth', 'peer', 'name', 'da', 'address', MAC.da, 'mtu', String(MTU), 'netns', L.dut]);
        attachXdp(pass, 'ea', L.a);
        await ip(['-n', L.dut, '-batch', '-'], ['addr add 198.51.100.254/24 dev da', 'addr add fd00:a::2/64 dev da', 'link set da up', `neigh replace ${GNB} lladdr ${MAC.ea} dev da nud permanent`].join('\n') + '\n');
        await ip(['-n', L.a, 'link', 'set', 'ea', 'up']);
        const up = now();
        windows.push({ fault: f, startMs: start, endMs: up, excused: true });
        noWireMs = up - start;
        const until = Date.now() + REATTACH_BOUND_MS;
        recovered = false;
        while (Date.now() < until && !aborted() && !(recovered = await attached('da'))) await sleep(200);
        const seen = now();
        for (const p of [sendUp, sendDown]) if (p.out().includes('sending')) p.proc.kill('SIGUSR2');
        // When the daemon attached, by its own log (it logs the re-attach as it happens).
        const at = d.eventMs('attached our program again', 'da', made);
        const when = at === undefined ? 'no re-attach in its log'
          : at <= up ? `attached ${Math.round(up - at)} ms before the interface was up` : `attached ${Math.round(at - up)} ms AFTER the interface was up`;
        note = `no wire for ${Math.round(up - start)} ms (absent ${Math.round(made - start)} ms, made and brought up in ${Math.round(up - made)} ms); daemon ${when}; ` +
          (recovered ? `status attached ${Math.round(seen - up)} ms after up` : `status not attached within ${REATTACH_BOUND_MS / 1000} s`);
        windows.push({ fault: f, startMs: up, endMs: seen });
        // The daemon attached after the wire was up: what crossed meanwhile went through the kernel untranslated.
        if (at !== undefined && at > up) {
          lateAttachMs = at - up;
          windows.push({ fault: f, startMs: up, endMs: at, label: BEFORE_ATTACH });
        }
      }
      const end = now();
      const dd = await veth.sample();
      const drops = { uplink: pathDrops('uplink', dd), downlink: pathDrops('downlink', dd) };
      records.push({ fault: f, startMs: Math.round(start), endMs: Math.round(end), note, recovered, ...(noWireMs === undefined ? {} : { noWireMs: Math.round(noWireMs) }), ...(lateAttachMs === undefined ? {} : { lateAttachMs: Math.round(lateAttachMs) }), drops });
      log(`  ${Math.round(start / 1000)} s ${f}: ${note}`);
      await sleep(2000 + rand() * 2000);
    }

    // The end: traffic stops, receivers drain, one more restart, the tables read.
    while (!aborted() && now() < endAt) await sleep(Math.min(500, endAt - now()));
    churning = false;
    await churnLoop;
    await Promise.race([Promise.all([sendUp.done, sendDown.done]), sleep(10_000)]);
    await sleep(1000);
    await veth.sample();
    for (const r of [recvUp, recvDown]) r.proc.stdin?.write('stop\n');
    await Promise.race([Promise.all([recvUp.done, recvDown.done]), sleep(5000)]);
    clearInterval(sampler);
    if (aborted()) throw new Error('interrupted');
    const sentUp = lastJson<SendResult>(sendUp, 'uplink sender');
    const sentDown = lastJson<SendResult>(sendDown, 'downlink sender');
    const upRep = analyzeStream(sentUp, lastJson<RecvResult>(recvUp, 'uplink receiver'), windows, t0Ns);
    const downRep = analyzeStream(sentDown, lastJson<RecvResult>(recvDown, 'downlink receiver'), windows, t0Ns);
    const nearIface = (m: SendResult['marks']): SendResult['marks'] => m.filter(([, ns]) => records.some((f) => f.fault === 'iface' && (ns - t0Ns) / 1e6 >= f.startMs - 100 && (ns - t0Ns) / 1e6 <= f.endMs + 500));
    const senderMarks = { uplink: nearIface(sentUp.marks), downlink: nearIface(sentDown.marks) };
    const kernelDrops = {
      uplink: pathDrops('uplink', veth.total), downlink: pathDrops('downlink', veth.total),
      socketUp: lastJson<RecvResult>(recvUp, 'uplink receiver').socketDrops ?? 0, socketDown: lastJson<RecvResult>(recvDown, 'downlink receiver').socketDrops ?? 0,
    };

    await d.stop('SIGTERM');
    let finalRead: string | null = null;
    const final = new Map<string, Rule>();
    // Not a fault's recovery either: the long bound.
    if (await d.start(FIRST_START_BOUND_MS)) {
      const [p, l] = await Promise.all([api(d.socket, 'GET', '/v1/policies'), api(d.socket, 'GET', '/v1/localsids')]);
      for (const r of (p.body as { policies: Rule[] }).policies) final.set(`policy:${String(r.match)}`, r);
      for (const r of (l.body as { localsids: Rule[] }).localsids) final.set(`localsid:${String(r.sid)}`, r);
    } else {
      finalRead = 'not read: the daemon did not start after the soak (see faults)';
    }
    const initial = new Map<string, Rule>([
      [`policy:${String(MEASURED_UP.match)}`, MEASURED_UP],
      [`localsid:${String(MEASURED_DOWN.sid)}`, MEASURED_DOWN],
    ]);
    const journal = compareJournal(initial, churn.journal, final);
    // The post-GC records of the lives the RSS sampler saw (not the final restart's, after the traffic).
    const sampled = new Set(rss.map((x) => x.pid));
    const gcTroughs = d.gcTroughs().filter((g) => sampled.has(g.pid));
    let memory: string[] = [];
    if (o.memoryLog) {
      try {
        memory = memorySummary(readFileSync(d.memlogFile, 'utf8'), o.warmupMs);
      } catch (e) {
        memory = [`memory log not read: ${(e as Error).message}`];
      }
    }
    return {
      options: { ...o, faults: [...o.faults] },
      uplink: upRep,
      downlink: downRep,
      journal,
      finalRead,
      rss: rssSummary(rss, o.warmupMs, gcTroughs),
      faults: records,
      kernelDrops,
      unexpectedExits: d.exits.filter((e) => !e.expected),
      startFailures: d.startFailures,
      t0Ns,
      senderMarks,
      churnNotConnected: churn.notConnected,
      entries: churn.journal,
      rssSamples: rss,
      gcTroughs,
      memory,
    };
  } finally {
    const d = daemon;
    const errors = await cleanupAll([
      () => d?.stop('SIGKILL'),
      () => procs.forEach((p) => p.exitCode === null && p.signalCode === null && p.kill('SIGKILL')),
      () => Promise.all(procs.map((p) => (p.exitCode === null && p.signalCode === null ? new Promise((r) => p.once('exit', r)) : undefined))),
      () => lab?.destroy(),
      () => l3?.close(),
      ...mounted.reverse().map((m) => () => execa('umount', [m])),
      // The daemon's log (every life) next to the report, for digging into a failing window.
      () => d !== undefined && existsSync(d.logFile) && copyFileSync(d.logFile, `${o.out}.daemon.log`),
      () => rmSync(dir, { recursive: true, force: true }),
    ]);
    if (errors.length > 0) log(`cleanup: ${errors.join('; ')}`);
  }
}

// --- the report ------------------------------------------------------------------------

const pct = (es: readonly JournalEntry[], q: number): number => {
  const t = es.map((e) => e.tookMs ?? 0).sort((a, b) => a - b);
  return t.length === 0 ? 0 : t[Math.min(t.length - 1, Math.floor(q * t.length))]!;
};
const mb = (kb: number): string => `${(kb / 1024).toFixed(1)} MB`;
const sgn = (kb: number): string => `${kb >= 0 ? '+' : ''}${mb(kb)}`;
const trendText = (t: Trend): string => `${sgn(t.riseKb)} (${(t.kbPerMin / 1024).toFixed(2)} MB/min)`;
/** The post-GC RSS of the troughs a life is judged on (judgedTroughs), in MB, in order; with the new space, what is judged (less it) after each. */
const troughsText = (gs: readonly GcTrough[], pid: number, warmupMs: number): string =>
  judgedTroughs(gs, pid, warmupMs)
    .map((g) => `${(g.rssKb / 1024).toFixed(1)}${g.newSpaceKb === undefined ? '' : ` [${(judgedKb(g) / 1024).toFixed(1)}]`}`)
    .join(', ') + ' MB';

function streamLines(name: string, s: StreamReport): string[] {
  const by = Object.entries(s.lostBy).map(([k, n]) => `${k} ${n}`).join(', ');
  return [
    `${name}: sent ${s.sent}, received ${s.received}, lost ${s.lost}${s.lost > 0 ? ` (by fault window: ${by}; no wire ${s.lostExcused}; arrived untranslated ${s.lostUntranslated})` : ''}, duplicated ${s.duplicated}, reordered ${s.reordered}, untranslated ${s.untranslated}, unknown ${s.unknown}, send errors ${s.sendErrors}`,
    ...(s.untranslatedRuns.length === 0 ? [] : [`    arrived untranslated in ${s.untranslatedRuns.length} runs of consecutive frames, longest ${Math.max(...s.untranslatedRuns)} (median ${[...s.untranslatedRuns].sort((a, b) => a - b)[s.untranslatedRuns.length >> 1]})`]),
    ...s.runs.slice(0, 8).map((r) => `    lost ${r.to - r.from + 1} from #${r.from} at ${(r.atMs / 1000).toFixed(1)} s (${r.faults})`),
    ...(s.runs.length > 8 ? [`    ... ${s.runs.length - 8} more runs`] : []),
  ];
}

/**
 * The inherent loss of the iface fault, on its own line: frames sent while the
 * recreated interface had no wire (deleted, or not yet up at both ends of the
 * veth) have no path whatever the daemon does. The window is measured per
 * fault (delete to the last end up) and summed.
 */
export function noWireLines(r: SoakResult): string[] {
  const ws = r.faults.filter((f) => f.noWireMs !== undefined);
  if (ws.length === 0) return [];
  const late = ws.filter((f) => f.lateAttachMs !== undefined);
  const before = (st: StreamReport): number => Object.entries(st.lostBy).filter(([k]) => k.includes(BEFORE_ATTACH)).reduce((n, [, v]) => n + v, 0);
  const lateLine = late.length === 0 ? [] : [
    `BEFORE ATTACH (counted above)  iface: ${late.length} of ${ws.length} times the daemon attached after the interface was up, ${late.reduce((n, f) => n + f.lateAttachMs!, 0)} ms in all` +
      ` (longest ${Math.max(...late.map((f) => f.lateAttachMs!))} ms): uplink ${before(r.uplink)}, downlink ${before(r.downlink)} frames lost then (through the kernel untranslated;` +
      ' the daemon reacts to the new device, it cannot hold it down: docs/daemon.md "An interface made again")',
  ];
  const ms = ws.reduce((n, f) => n + (f.noWireMs ?? 0), 0);
  return [
    `NO WIRE (inherent, not counted above)  iface: ${ws.length} times, ${ms} ms in all (median ${[...ws.map((f) => f.noWireMs!)].sort((a, b) => a - b)[ws.length >> 1]} ms):` +
      ` uplink ${r.uplink.lostExcused} frames, downlink ${r.downlink.lostExcused} frames lost while the interface was deleted or not yet up at both ends (no path to take)`,
    ...lateLine,
  ];
}

export function verdicts(r: SoakResult): { line: string; pass: boolean }[] {
  const v = (pass: boolean, what: string): { line: string; pass: boolean } => ({ line: `${pass ? 'PASS' : 'FAIL'}  ${what}`, pass });
  const out = [
    v(r.uplink.lost - r.uplink.lostExcused === 0, `uplink frames lost: ${r.uplink.lost - r.uplink.lostExcused} (target 0; not counting ${r.uplink.lostExcused} with no wire: the NO WIRE line under frames)`),
    v(r.downlink.lost - r.downlink.lostExcused === 0, `downlink frames lost: ${r.downlink.lost - r.downlink.lostExcused} (target 0; not counting ${r.downlink.lostExcused} with no wire: the NO WIRE line under frames)`),
    v(r.uplink.duplicated + r.downlink.duplicated === 0, `frames duplicated: ${r.uplink.duplicated + r.downlink.duplicated} (target 0)`),
    v(r.finalRead === null && r.journal.lost.length === 0, `acknowledged changes lost: ${r.finalRead ?? r.journal.lost.length} (target 0)`),
    v(r.finalRead === null && r.journal.resurrected.length === 0, `refused changes come back: ${r.finalRead ?? r.journal.resurrected.length} (target 0)`),
    r.rss.verdict === 'inconclusive'
      ? { line: `INCONCLUSIVE  daemon RSS after warm-up: ${r.rss.why} (target flat: not shown; run longer, kills no more often than --min-life)`, pass: false }
      : v(r.rss.verdict === 'flat', `daemon RSS after warm-up: ${r.rss.verdict}: ${r.rss.why} (target flat)`),
    v(r.unexpectedExits.length === 0, `daemon exits not asked for: ${r.unexpectedExits.length} (target 0)`),
  ];
  for (const f of FAULTS.filter((x) => x !== 'churn')) {
    const rs = r.faults.filter((x) => x.fault === f);
    if (rs.length === 0) continue;
    const bad = rs.filter((x) => !x.recovered).length;
    out.push(v(bad === 0, `fault ${f}: ${rs.length - bad}/${rs.length} recovered`));
  }
  return out;
}

export function report(r: SoakResult): string {
  const o = r.options;
  const j = r.journal;
  const lines = [
    `# soak: ${o.durationMs / 1000} s, seed ${o.seed}, faults ${o.faults.join(',')}, ${o.rate} frames/s each way, ${o.churnRate} API changes/s`,
    '',
    'Method: numbered frames (AF_PACKET) uplink GTP-U a -> da [daemon\'s XDP] db -> b (H.M.GTP4.D) and downlink SRv6 b -> a (End.M.GTP4.E),',
    'counted by sequence number at the far end; faults one at a time on a seeded schedule after the warm-up; API churn journaled client-side;',
    'after the traffic, one more restart (SIGTERM, start) and the tables (GET /v1/policies, /v1/localsids) compared with the journal.',
    '',
    '## frames',
    ...streamLines('uplink  ', r.uplink),
    ...streamLines('downlink', r.downlink),
    ...noWireLines(r),
    ...(r.kernelDrops === undefined ? [] : [
      'kernel drops (the veths\' counters, ethtool -S; the receivers\' sockets): where frames were dropped on the way, whatever the window:',
      `  uplink  : ${dropsText(r.kernelDrops.uplink)}; receiver's socket full ${r.kernelDrops.socketUp}`,
      `  downlink: ${dropsText(r.kernelDrops.downlink)}; receiver's socket full ${r.kernelDrops.socketDown}`,
    ]),
    '',
    '## faults',
    ...FAULTS.map((f) => `${f}: ${f === 'churn' ? (o.faults.includes('churn') ? `${j.acknowledged + j.refused + j.unanswered} changes` : '0') : `${r.faults.filter((x) => x.fault === f).length} injected`}`),
    ...r.faults.map((f) => `  ${(f.startMs / 1000).toFixed(1)}-${(f.endMs / 1000).toFixed(1)} s ${f.fault}: ${f.note}` +
      (f.drops !== undefined && (anyDrops(f.drops.uplink) || anyDrops(f.drops.downlink)) ? ` [kernel drops meanwhile: uplink ${dropsText(f.drops.uplink)}; downlink ${dropsText(f.drops.downlink)}]` : '')),
    ...r.unexpectedExits.map((e) => `  daemon pid ${e.pid} exited by itself at ${(e.atMs / 1000).toFixed(1)} s: code ${e.code} signal ${e.signal}`),
    ...r.startFailures.map((s) => `  start failed: ${s}`),
    '',
    '## API journal',
    `answer time: median ${pct(r.entries, 0.5)} ms, 99th percentile ${pct(r.entries, 0.99)} ms, max ${pct(r.entries, 1)} ms`,
    `acknowledged ${j.acknowledged}, refused ${j.refused} (${Object.entries(j.refusedBy).map(([k, n]) => `${k}: ${n}`).join(', ') || 'none'}), unanswered ${j.unanswered}, not connected (daemon down) ${r.churnNotConnected}`,
    ...(r.finalRead === null ? [] : [`final tables ${r.finalRead}`]),
    ...(r.finalRead !== null ? [] : j.lost).slice(0, 10).map((m) => `  lost: ${m.key}: expected ${JSON.stringify(m.expected)} (change #${m.entry?.n ?? 'config'}), found ${JSON.stringify(m.found)}`),
    ...(r.finalRead !== null ? [] : j.resurrected).slice(0, 10).map((m) => `  refused came back: ${m.key}: found ${JSON.stringify(m.found)}, expected ${JSON.stringify(m.expected)}`),
    '',
    `## daemon RSS (judged on the post-GC troughs: RSS at the end of ${o.gcEveryMs > 0 ? `the full collections the soak forced every ${o.gcEveryMs / 1000} s` : 'each major GC'}, soak-preload.mjs; 1 s samples beside them)`,
    `after ${r.rss.warmupMs / 1000} s warm-up per process, 1 s samples: min ${mb(r.rss.minKb)}, median ${mb(r.rss.medianKb)}, max ${mb(r.rss.maxKb)}; ${r.rss.verdict}: ${r.rss.why}`,
    ...r.rss.lives.flatMap((l) => [
      `  pid ${l.pid} (${(l.fromMs / 1000).toFixed(0)}-${(l.toMs / 1000).toFixed(0)} s): ${l.verdict}${l.why === '' ? '' : ` (${l.why})`}; ` +
        `${l.troughs} ${l.forcedTroughs > 0 ? 'forced ' : ''}major GCs after warm-up judged${l.troughs === 0 ? '' : `, RSS after them ${troughsText(r.gcTroughs, l.pid, r.rss.warmupMs)}`}`,
      ...(l.troughRss === null ? [] : [`    post-GC trend (least squares over ${l.troughRss.n} troughs): ${l.troughRssRaw == null ? `rss ${trendText(l.troughRss)}` : `rss less new space (judged) ${trendText(l.troughRss)}, rss ${trendText(l.troughRssRaw)}`}, heapUsed ${trendText(l.troughHeapUsed!)}, external ${trendText(l.troughExternal!)}` +
        (l.troughHeapTotal != null && l.troughNative != null ? `, heapTotal ${trendText(l.troughHeapTotal)}, native (rss - heapTotal - external) ${trendText(l.troughNative)}` : '') +
        (l.troughFile != null ? `; of rss, file-backed (RssFile) ${trendText(l.troughFile)}` : '')]),
      ...(l.troughNewSpace == null || l.troughOldSpace == null
        ? []
        : [`    of heapTotal: new space ${trendText(l.troughNewSpace)} (${mb(l.newSpaceKb!.first)} at the first trough, ${mb(l.newSpaceKb!.last)} at the last), old space ${trendText(l.troughOldSpace)}`]),
      ...(l.troughUntrimmed == null ? [] : [`    before malloc_trim (not judged): rss ${trendText(l.troughUntrimmed)}, floor ${mb(l.untrimmedFloorKb!)}` +
        (l.troughMallocInUse == null ? '' : `; malloc's bytes in use ${trendText(l.troughMallocInUse)}, free in its arenas ${trendText(l.troughMallocFree!)}`)]),
      `    1 s samples: ${l.samples} warm over ${(l.warmMs / 1000).toFixed(0)} s` +
        (l.samples === 0 ? '' : `, ${mb(l.minKb)} .. ${mb(l.maxKb)}, slope ${(l.slopeKbPerMin / 1024).toFixed(1)} MB/min, lowest of last third vs first ${sgn(l.thirdsGrowthKb)} (the judge before session 9; not judged: the sawtooth's phase)`),
    ]),
    `  within lives, pooled over ${r.rss.pooledTroughs} troughs of the judged lives (need ${r.rss.troughsNeeded}): ${r.rss.pooledGrowthKb === null ? 'n/a' : `${sgn(r.rss.pooledGrowthKb)} over a median warm phase`}: ${r.rss.pooledVerdict}`,
    `  across judged lives: trough floor ${r.rss.acrossGrowthKb === null ? 'n/a' : sgn(r.rss.acrossGrowthKb)} (first to last, least squares): ${r.rss.acrossVerdict}` +
      (r.rss.acrossUntrimmedKb == null ? '' : `; before malloc_trim ${sgn(r.rss.acrossUntrimmedKb)} (not judged)`),
    ...(r.memory.length > 0 ? ['  memory log (process.memoryUsage() every 5 s, after warm-up):', ...r.memory.map((l) => `    ${l}`)] : []),
    `  MB every 5 s: ${r.rssSamples.filter((_, i) => i % 5 === 0).map((x) => `${Math.round(x.tMs / 1000)}s:${(x.rssKb / 1024).toFixed(0)}${x.lifeMs < r.rss.warmupMs ? '*' : ''}`).join(' ')} (* warm-up)`,
    `  major GCs (s: MB after): ${r.gcTroughs.map((g) => `${Math.round(g.tMs / 1000)}s:${(g.rssKb / 1024).toFixed(0)}${g.rssUntrimmedKb === undefined ? '' : `(${(g.rssUntrimmedKb / 1024).toFixed(0)})`}${g.forced === true ? 'f' : ''}${g.lifeMs < r.rss.warmupMs ? '*' : ''}`).join(' ')} (f forced, (n) before malloc_trim, * warm-up)`,
    '',
    'Caveats: loss is dated by the sender\'s clock (marks every 20 ms, every frame around a recreation) and put in every fault window within 300 ms; frames lost while the',
    'recreated interface was deleted or not yet up at both ends had no wire (the NO WIRE line); those sent after it was up count, as does any frame that arrived',
    `untranslated. RSS is judged on the RSS right after each major GC (the floor the process returns to), per daemon process (each restart starts`,
    `afresh) on a warm phase of ${RSS_MIN_WARM_MS / 1000} s after warm-up with two major GCs ${RSS_MIN_TROUGH_SPAN_MS / 1000} s apart, pooled over those lives, and across them (trough floors);`,
    `with fewer than two judged lives (one without restarts), under ${RSS_MIN_COVERAGE * 100} % of the time judged or under ${RSS_MIN_TROUGHS} troughs: inconclusive.`,
    'Where the log has the new space (V8\'s young generation, capped at 8 MB by the daemon\'s --max-semi-space-size), a trough is judged on its RSS less the new',
    'space as committed ([MB] after each trough\'s RSS): V8 commits it under allocation and gives part of it back when the process looks idle, so the',
    'troughs of a life rise or fall by up to 7 MB with the phase of the API churn; the RSS trend itself is listed beside the judged one.',
    ...(o.gcEveryMs > 0 ? [`Here the troughs judged are those of the full collections the soak forced every ${o.gcEveryMs / 1000} s of a life (--gc-every): what stays after one is`,
      'still referenced. They also keep V8 from sizing its heap as it would alone: a heap V8 grows for speed shows in the 1 s samples, not in the verdict.'] : []),
    ...(o.gcEveryMs > 0 && o.mallocTrim ? ['After each forced collection glibc\'s malloc_trim(0) gave the free pages of malloc\'s arenas back (--malloc-trim): each thread\'s arena keeps the free',
      'memory of its busiest moment, a level that differs from one process to the next; memory malloc has handed out and not got back is not trimmed, so a',
      'native leak still shows. The troughs before the trim are listed and their floor across lives given, not judged.'] : []),
    ...(o.minLifeMs > 0 ? [`Kills came only once a daemon had lived ${o.minLifeMs / 1000} s (--min-life).`] : []),
    ...(o.leakKbPerMin > 0 ? [`TEST LEAK: the daemon was made to retain ${o.leakKbPerMin} KB/min (--leak-kb-per-min); the RSS verdict must say growing.`] : []),
    'One run, one host, other load on it: a FAIL names what to rerun, a PASS is one sample.',
    '',
    ...verdicts(r).map((x) => x.line),
  ];
  return lines.join('\n');
}

// --- self-check: the comparisons detect a loss ------------------------------------------

/** The analysis against made-up records where something is lost: each must be detected. Lines, and whether all were. */
export function selfCheck(): { lines: string[]; ok: boolean } {
  const rule: Rule = { name: 'x', match: '10.200.1.0/24', sr_prefix: '2001:db8:101::/48' };
  const j = compareJournal(new Map(), [
    { n: 0, kind: 'policy', op: 'add', key: 'policy:10.200.1.0/24', rule, status: 201, atMs: 0 },
    { n: 1, kind: 'policy', op: 'replace', key: 'policy:10.200.1.0/24', rule: { ...rule, sr_prefix: '2001:db8:301::/48' }, status: 507, atMs: 1 },
  ], new Map([['policy:10.200.1.0/24', { ...rule, sr_prefix: '2001:db8:301::/48' }]]));
  const j2 = compareJournal(new Map(), [{ n: 0, kind: 'policy', op: 'add', key: 'policy:10.200.1.0/24', rule, status: 201, atMs: 0 }], new Map());
  const s = analyzeStream({ sent: 100, errors: 0, marks: [[0, 0], [100, 1e9]] }, { frames: 90, ranges: [[0, 49], [60, 99]], duplicated: 0, reordered: 0, untranslated: 0 }, [{ fault: 'kill', startMs: 450, endMs: 650 }], 0);
  const u = analyzeStream({ sent: 100, errors: 0, marks: [[0, 0], [100, 1e9]] }, { frames: 70, ranges: [[0, 19], [50, 99]], duplicated: 0, reordered: 0, untranslated: 10, untranslatedRanges: [[40, 49]] },
    [{ fault: 'iface', startMs: 200, endMs: 400, excused: true }], 0);
  // RSS: daemon lives (pid, first second, length s): 1 s samples and the troughs (major GCs) of a sawtooth of 35 MB with a period of 100 s,
  // GCs at 70 and 170 s of each 260 s life, over a floor of 80 MB after a 50 s climb; `extra` KB added at second t of life l.
  const warmup = 60_000;
  const judge = (spec: readonly (readonly [number, number, number])[], extra: (l: number, t: number) => number, period = 100, phase = 30): RssReport => {
    const base = (t: number): number => 70_000 + Math.min(t, 50) * 200;
    const samples = spec.flatMap(([pid, from, len], l) => Array.from({ length: len }, (_, t) => ({ tMs: (from + t) * 1000, pid, lifeMs: t * 1000, rssKb: base(t) + ((t + phase) % period) * (35_000 / period) + extra(l, t) })));
    const troughs = spec.flatMap(([pid, from, len], l) => Array.from({ length: len }, (_, t) => t).filter((t) => t > 0 && (t + phase) % period === 0)
      .map((t) => ({ tMs: (from + t) * 1000, pid, lifeMs: t * 1000, rssKb: base(t) + extra(l, t), heapUsedKb: 15_000, externalKb: 10_000 })));
    return rssSummary(samples, warmup, troughs);
  };
  const four = [[1, 0, 260], [2, 261, 260], [3, 522, 260], [4, 783, 260]] as const;
  const saw = judge(four, () => 0);
  const leak = judge(four, (_, t) => t * 77);
  const slow = judge(four, (_, t) => t * 33);
  const across = judge(four, (l) => l * 8000);
  const storm = judge(Array.from({ length: 30 }, (_, i) => [i + 1, i * 41, 40] as const), () => 0);
  const rare = judge(four, () => 0, 150);
  const checks = [
    { what: 'an acknowledged add missing from the final tables is a lost change', ok: j2.lost.length === 1 },
    { what: 'a refused replace found in the final tables is a refused change come back', ok: j.resurrected.length === 1 },
    { what: 'frames 50..59 not received are 10 lost, in the kill window', ok: s.lost === 10 && s.lostBy['kill'] === 10 },
    { what: 'frames 40..49 that arrived untranslated just after the interface came back are lost, not excused', ok: u.lost === 30 && u.lostExcused === 20 && u.lostUntranslated === 10 },
    { what: 'troughs that rise 20 MB over each of four 260 s lives are growing', ok: leak.verdict === 'growing' },
    { what: 'troughs that rise 2 MB/min, under the threshold in any one life, are growing pooled over four', ok: slow.verdict === 'growing' && slow.pooledVerdict === 'growing' },
    { what: 'lives each flat whose trough floors climb 8 MB a life are growing', ok: across.verdict === 'growing' && across.acrossVerdict === 'growing' },
    { what: 'a sawtooth of period 100 s over flat troughs is flat (the last third of a warm phase is mid-tooth)', ok: saw.verdict === 'flat' },
    { what: '30 lives of 40 s (a kill every 40 s) are inconclusive, not flat', ok: storm.verdict === 'inconclusive' },
    { what: 'one major GC per warm phase (period 150 s) is inconclusive, not flat', ok: rare.verdict === 'inconclusive' },
  ];
  return { lines: checks.map((c) => `${c.ok ? 'detected' : 'MISSED  '}  ${c.what}`), ok: checks.every((c) => c.ok) };
}

// --- command line --------------------------------------------------------------------------


async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      duration: { type: 'string', default: '60s' },
      seed: { type: 'string', default: '1' },
      faults: { type: 'string', default: FAULTS.join(',') },
      rate: { type: 'string', default: '5000' },
      'churn-rate': { type: 'string', default: '20' },
      warmup: { type: 'string', default: '60s' },
      'min-life': { type: 'string', default: 'auto' },
      'leak-kb-per-min': { type: 'string', default: '0' },
      'memory-log': { type: 'boolean', default: false },
      'heap-snapshots': { type: 'string', default: '' },
      'gc-every': { type: 'string', default: '30s' },
      'malloc-trim': { type: 'string' },
      out: { type: 'string', default: 'build/soak.json' },
      'self-check': { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.log('npm run soak -- [--duration 60s] [--seed 1] [--faults kill,disk,pins,iface,churn] [--rate 5000] [--churn-rate 20] [--warmup 60s] [--min-life auto|0|4m] [--gc-every 30s|0] [--malloc-trim on|off (default: on with --gc-every)] [--out build/soak.json] [--self-check] [--memory-log] [--heap-snapshots DIR] [--leak-kb-per-min N]');
    return 0;
  }
  if (values['self-check']) {
    const c = selfCheck();
    console.log(c.lines.join('\n'));
    return c.ok ? 0 : 1;
  }
  const faults = new Set(values.faults.split(',').map((s) => s.trim()).filter((s) => s !== ''));
  for (const f of faults) if (!(FAULTS as readonly string[]).includes(f)) throw new Error(`--faults: unknown fault '${f}' (${FAULTS.join(', ')})`);
  const onOff = (s: string, what: string): boolean => {
    if (s !== 'on' && s !== 'off') throw new Error(`${what} ${s}: on or off`);
    return s === 'on';
  };
  const num = (s: string, what: string, min: number, max: number): number => {
    const n = Number(s);
    if (!Number.isFinite(n) || n < min || n > max) throw new Error(`${what} ${s}: a number from ${min} to ${max}`);
    return n;
  };
  const o: SoakOptions = {
    durationMs: parseDuration(values.duration),
    seed: num(values.seed, '--seed', 0, 2 ** 32 - 1),
    faults: faults as Set<Fault>,
    rate: num(values.rate, '--rate', 100, 50_000),
    churnRate: num(values['churn-rate'], '--churn-rate', 1, 200),
    warmupMs: parseDuration(values.warmup),
    minLifeMs: 0,
    leakKbPerMin: num(values['leak-kb-per-min'], '--leak-kb-per-min', 0, 1024 * 1024),
    memoryLog: values['memory-log'],
    heapSnapshots: values['heap-snapshots'] === '' ? '' : resolve(values['heap-snapshots']),
    gcEveryMs: parseDuration(values['gc-every']),
    // Default: with forced collections (it runs after each), and only then.
    mallocTrim: values['malloc-trim'] === undefined ? parseDuration(values['gc-every']) > 0 : onOff(values['malloc-trim'], '--malloc-trim'),
    out: values.out,
  };
  if (o.mallocTrim && o.gcEveryMs === 0) throw new Error('--malloc-trim on needs --gc-every (it runs after each forced collection)');
  const minLife = values['min-life'] === 'auto' ? minLifeAuto(o.durationMs, o.warmupMs) : parseDuration(values['min-life']);
  if (o.durationMs < 15_000 || o.durationMs > 24 * 3600_000) throw new Error('--duration: 15s to 24h');
  if (o.gcEveryMs !== 0 && o.gcEveryMs < 5000) throw new Error('--gc-every: 0 (only the collections V8 decides on) or at least 5s (each is a full stop of the daemon)');
  const opts: SoakOptions = { ...o, minLifeMs: minLife };
  if (process.getuid?.() !== 0) throw new Error('the soak needs root (namespaces, mounts, XDP)');
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.on(sig, () => {
      console.error(`\n${sig}: stopping and cleaning up`);
      aborter.abort();
    });
  }
  const r = await soak(opts, (s) => console.error(s));
  const text = report(r);
  console.log(text);
  writeFileSync(opts.out, JSON.stringify(r, null, 1));
  console.log(`\n(details: ${opts.out}; the daemon's log: ${opts.out}.daemon.log)`);
  return verdicts(r).every((x) => x.pass) ? 0 : 1;
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  main().then(
    (code) => process.exit(code),
    (e: unknown) => {
      console.error(`soak: ${(e as Error).message}`);
      process.exit(aborted() ? 130 : 2);
    },
  );
}
