/**
 * npm run bench:daemon — the scale targets of the daemon (issue 3, item 7):
 *
 *   (a) loading 65,536 policies + 65,536 local SIDs from a config file:
 *       under 1.5 s from process start to the API answering;
 *   (b) one add / one delete through the API with those tables loaded:
 *       under 5 ms median;
 *   (c) the daemon's resident memory (VmRSS) with those tables: under 150 MB.
 *   (e) 10,000 operations (deletes, then adds back) through one POST
 *       /v1/batch each: under 500 ms each; next to it, for comparison, the
 *       same 10,000 as single requests (DELETE, POST), one at a time;
 *       during the same two batches run again, issue 19's loop targets as in (h): the
 *       daemon's loop delay max < 50 ms, p99 < 10 ms, and GET /v1/status on
 *       a kept-alive connection p99 < 5 ms, max < 50 ms, no reset; the
 *       same targets during a POST /v1/reload of an edit (one policy's SID
 *       prefix: the whole file read, checked and diffed again);
 *   (i) with --sessions N (alone, instead of the rest; N = 1048576 for issue
 *       19's target): N (N3, TEID) policies + N PE sessions, loaded from a
 *       JSON config file (spawn -> API answers) and, after a teardown, through
 *       /v1/batch (10,000 operations a request) into a daemon started with
 *       none: under 5 s each, VmRSS under 400 MB after each; then an
 *       edited reload of that daemon (one local SID added to the file) with
 *       all 2N as API rules on top, the loop and a status poller watched as
 *       for (e)'s reload (loop max < 50 ms, p99 < 10 ms; status lines); then
 *       a POST /v1/config/save of those 2N API rules into the config file,
 *       watched the same way;
 * and, for information (no target):
 *   (d) the time of a /metrics scrape and of GET /v1/counters (`mup stats`)
 *       with those tables, --scrapes N of each (default 50), 150 ms apart;
 *       then, with (e)'s loop and status targets (issue 19: nothing holds
 *       the loop for long), the largest reads, GET /v1/counters?rules=all
 *       and GET /v1/policies, 3 of each in turn with the loop and a status
 *       poller watched;
 * and (issue 19):
 *   (f) /metrics with default settings: under 50 ms median and 200 KB; with
 *       daemon.metrics.per_rule all (a reload), its time and size reported;
 *   (g) 4 writers, each on its own kept-alive connection, deleting and
 *       adding back policies as fast as answered for 10 s: at least 2,000
 *       changes/s in total, single-change p99 under 5 ms (group commit);
 *       the loop and status targets of (e) during 10 s more of the same
 *       (apart: the status poller is a fifth client); beside the client's
 *       times, here and for (e)'s batches and reloads, the daemon's own
 *       (mup_api_request_duration_seconds, read from a /metrics scrape
 *       before and one after: what of a slow answer is the daemon's, what
 *       the host's);
 *   (h) idle, then route churn of 1 change/s, with the daemon's own
 *       event-loop metric and GET /v1/status on a kept-alive connection
 *       (loop max < 50 ms, p99 < 10 ms; status p99 < 5 ms, max < 50 ms),
 *       and next-hop convergence p99 < 200 ms (--churn-seconds 0 skips it);
 *       between them, for information, the host's floor: status polled
 *       beside the idle daemon with every CPU kept busy by a spinning
 *       process (busyFloor);
 *   (j) with --churn-minutes N (issue 19 asks 10): N minutes of route churn
 *       (1 change/s, as in (h)) plus API changes (one writer deleting and
 *       adding back policies, 50 changes/s), VmRSS sampled every 30 s:
 *       VmRSS at the end <= 1.2 x VmRSS right after the load ((a)).
 *
 * It runs the real daemon (bin/mup.js, the compiled dist/: run `make` first)
 * in a network namespace it creates, attached to one veth there, with its
 * own bpffs mount, socket and state file in a temporary directory. It
 * removes all of it at the end, on error, and on Ctrl-C / SIGTERM.
 *
 * GET /v1/status is polled (status-poll.mjs) on one kept-alive connection,
 * one request every 2 ms, its latency from its send, and an answer slower
 * than 2 ms also counting a request for each 2 ms it took (HdrHistogram's
 * expected-interval correction: requests due during a stall each count
 * it); an answer other than 200 or a failed poll is an error, and a status line
 * with an error FAILs. n is printed beside every p99 (under 100 samples a
 * nearest-rank p99 is the max).
 *
 * (a) is timed from the spawn (and from the kernel's start time of the
 * process) to the first 200 of GET /v1/status, and split with the daemon's
 * own log timestamps: "mounted a bpf filesystem" comes right after the
 * config is read and validated (the bench leaves the bpffs unmounted so that
 * this line appears), "data plane loaded" after the tables are filled and
 * the program attached, "control API listening" when it serves.
 * (b) is timed at the client, one request at a time on a kept-alive
 * connection: what `mup policy del` / `mup policy add` wait for, minus
 * node's start. Each round deletes a rule of the config and adds it back,
 * so the table stays full (65,535 or 65,536 entries) throughout.
 *
 * Options: --rules N (each table, default 65536) --ops N (default 500)
 * --scrapes N (default 50) --single-ops N ((e): how many operations also go as single requests; default all 10,000)
 * --cpu-prof DIR (profile the daemon once it serves: MUP_CPU_PROFILE, a .cpuprofile per daemon in DIR)
 * --node-flag FLAG (repeatable: one more node/V8 flag for the daemon, after
 * its own, e.g. --node-flag --heap-growing-percent=20; printed in the report)
 * --json (print the result as JSON too) --keep-going (do not stop at the
 * first failed request).
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, fdatasyncSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { Agent, request, type IncomingMessage } from 'node:http';
import { availableParallelism, cpus, loadavg, release } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { synchronizeRcu } from '../dataplane/libbpf.js';
import { rcuExpedited } from '../dataplane/grace.js';
import { quantileBetween, type QuantileBetween } from './histogram-delta.js';
import { DAEMON_NODE_FLAGS } from '../host/node-flags.js';
import { makeDirs } from '../host/mkdirs.js';
import { f2, LOOP_TARGETS, loopVerdict, nText, p99Text, pf, pollerMethod, statusTargetLine, summarize, type Latency, type LoopWindow } from './latency-lines.js';
import { startStatusPoller, type Polled } from './status-poll.mjs';

/** The status pollers' schedule: one GET /v1/status due every this many ms (status-poll.mjs). */
const POLL_PERIOD_MS = 2;

const MUP_BIN = fileURLToPath(new URL('../../bin/mup.js', import.meta.url));
const DIST_MAIN = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

/** (d): the largest reads, one at a time with the loop and a status poller watched (LARGE_READS_EACH of each). */
const LARGE_READS = ['/v1/counters?rules=all', '/v1/policies'] as const;
const LARGE_READS_EACH = 3;

/** (d): what a Prometheus scrape and `mup stats` cost with full tables. */
const SCRAPE_PATHS = ['/metrics', '/v1/counters?rules=none', '/v1/counters?rules=active', '/v1/counters?rules=all'] as const;

const TARGETS = { loadSeconds: 1.5, medianAddMs: 5, medianDelMs: 5, rssMB: 150, batchMs: 500, sessionsLoadSeconds: 5, sessionsRssMB: 400 } as const;
/** (i): at most this many of each (settings.max_policies / max_sessions allow 2^21 with the address-only entries). */
const MAX_SESSIONS_BENCH = 1_048_576;
/** (i): TEID policies per N3 address (each address also takes an address-only entry in the policy table). */
const TEIDS_PER_N3 = 1024;
/** (e): operations per batch (at most --rules). */
const BATCH_OPS = 10_000;

interface Options {
  rules: number;
  ops: number;
  /** (d): how many of each scrape. */
  scrapes: number;
  cpuProf?: string;
  /** --node-flag: more node/V8 flags for the daemon (experiments), after DAEMON_NODE_FLAGS. */
  nodeFlags: string[];
  json: boolean;
  keepGoing: boolean;
  /** (e): how many of the batch's operations are also sent as single requests (default all; fewer on a busy host). */
  singleOps?: number;
  /** Config file format: yaml (default) or json (which is YAML too). */
  format?: 'yaml' | 'json';
  /** (i) only: N (N3, TEID) policies + N PE sessions, from a file and through /v1/batch. */
  sessions?: number;
  /** (h): seconds idle and of route churn; 0 churn skips (h). */
  idleS: number;
  churnS: number;
  /** (j): minutes of route churn plus API changes, RSS sampled (0: skip). */
  churnMinutes: number;
  /** (f): leave out the per_rule all scrapes (for information; two reloads and 19 MB answers). */
  skipPerRuleAll: boolean;
  /** Write the daemon's log (JSON lines, its whole life) to this file at the end; with --sessions, both daemons' logs, in turn, however (i) ended. */
  daemonLog?: string;
}

function parseArgs(argv: readonly string[]): Options {
  const o: Options = { rules: 65536, ops: 500, scrapes: 50, json: false, keepGoing: false, idleS: 15, churnS: 30, churnMinutes: 0, skipPerRuleAll: false, nodeFlags: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    if (a === '--rules') o.rules = Number(next());
    else if (a === '--ops') o.ops = Number(next());
    else if (a === '--scrapes') o.scrapes = Number(next());
    else if (a === '--cpu-prof') o.cpuProf = next();
    else if (a === '--node-flag') o.nodeFlags.push(next());
    else if (a === '--single-ops') o.singleOps = Number(next());
    else if (a === '--sessions') o.sessions = Number(next());
    else if (a === '--json') o.json = true;
    else if (a === '--format') {
      const f = next();
      if (f !== 'yaml' && f !== 'json') throw new Error('--format: yaml or json');
      o.format = f;
    }
    else if (a === '--keep-going') o.keepGoing = true;
    else if (a === '--idle-seconds') o.idleS = Number(next());
    else if (a === '--churn-seconds') o.churnS = Number(next());
    else if (a === '--churn-minutes') o.churnMinutes = Number(next());
    else if (a === '--skip-per-rule-all') o.skipPerRuleAll = true;
    else if (a === '--daemon-log') o.daemonLog = next();
    else if (a === '--help' || a === '-h') {
      process.stdout.write('usage: npm run bench:daemon -- [--rules N] [--ops N] [--scrapes N] [--single-ops N] [--format yaml|json] [--idle-seconds N] [--churn-seconds N (0: skip the loop phase)] [--churn-minutes N ((j): RSS over N minutes of churn and changes; issue 19 asks 10)] [--skip-per-rule-all] [--daemon-log FILE] [--cpu-prof DIR] [--node-flag FLAG]... [--json] [--keep-going] [--sessions N]\n');
      process.exit(0);
    } else throw new Error(`unknown option ${String(a)}; see --help`);
  }
  if (!Number.isInteger(o.rules) || o.rules < o.ops || o.rules > 65536) throw new Error('--rules: a whole number from --ops to 65536');
  if (!Number.isInteger(o.ops) || o.ops < 1) throw new Error('--ops: a whole number >= 1');
  if (!Number.isInteger(o.scrapes) || o.scrapes < 1) throw new Error('--scrapes: a whole number >= 1');
  if (!Number.isFinite(o.churnMinutes) || o.churnMinutes < 0) throw new Error('--churn-minutes: a number of minutes >= 0');
  if (o.singleOps !== undefined && (!Number.isInteger(o.singleOps) || o.singleOps < 1)) throw new Error('--single-ops: a whole number >= 1');
  if (o.sessions !== undefined && (!Number.isInteger(o.sessions) || o.sessions < 1 || o.sessions > MAX_SESSIONS_BENCH)) throw new Error(`--sessions: a whole number from 1 to ${MAX_SESSIONS_BENCH}`);
  return o;
}

// ---------------------------------------------------------------------------
// The config

const policyMatch = (i: number): string => `10.${i >> 8}.${i & 255}.0/24`;
const localSid = (i: number): string => `2001:db8:${i.toString(16)}::/48`;

/**
 * (e)'s reload of an edit: policy EDITED with this SID prefix instead. A
 * policy no API change of (b) or (e) touches (they take every 6th and every
 * (rules / ops)th): an edit of a rule the API changed is refused (409).
 */
const EDITED = 1;
const EDITED_SR_PREFIX = '2001:db9:ff00::/48';

function policyEntry(i: number, edited = false): Record<string, unknown> {
  const srPrefix = edited && i === EDITED ? EDITED_SR_PREFIX : `2001:db9:${(i & 0xff).toString(16)}::/48`;
  return { name: `p${i}`, match: policyMatch(i), sr_prefix: srPrefix, src_prefix: '2001:db8:ffff::/64' };
}

function localSidEntry(i: number): Record<string, unknown> {
  return { name: `l${i}`, sid: localSid(i), src_prefix_len: 64 };
}

/** The same config as JSON (which is YAML too), as a generator would write it. */
function configJson(rules: number, ifname: string, edited = false): string {
  const c = {
    interfaces: [{ name: ifname }],
    settings: { max_policies: 65536, max_localsids: 65536 },
    policies: Array.from({ length: rules }, (_, i) => policyEntry(i, edited)),
    localsids: Array.from({ length: rules }, (_, i) => localSidEntry(i)),
  };
  return `${JSON.stringify(c, null, 1)}\n`;
}

/** YAML as an operator would write it: block style, one key per line. */
function configText(rules: number, ifname: string, edited = false): string {
  const out: string[] = [
    '# generated by src/bench/daemon.ts',
    'interfaces:',
    `  - name: ${ifname}`,
    'settings:',
    `  max_policies: 65536`,
    `  max_localsids: 65536`,
    'policies:',
  ];
  for (let i = 0; i < rules; i++) {
    const p = policyEntry(i, edited);
    out.push(`  - name: ${String(p['name'])}`, `    match: ${String(p['match'])}`, `    sr_prefix: ${String(p['sr_prefix'])}`, `    src_prefix: ${String(p['src_prefix'])}`);
  }
  out.push('localsids:');
  for (let i = 0; i < rules; i++) {
    const l = localSidEntry(i);
    out.push(`  - name: ${String(l['name'])}`, `    sid: ${String(l['sid'])}`, `    src_prefix_len: ${String(l['src_prefix_len'])}`);
  }
  return `${out.join('\n')}\n`;
}

// ---------------------------------------------------------------------------
// Environment, with cleanup that runs whatever happens

class Env {
  readonly dir: string;
  readonly ns: string;
  readonly bpffs: string;
  readonly socket: string;
  readonly stateFile: string;
  readonly configPath: string;
  readonly instance = `bench${process.pid}`;
  daemon: ChildProcess | undefined;
  #nsMade = false;
  #cleaning: Promise<string[]> | undefined;

  constructor() {
    // Under /var/tmp (disk, like /var/lib/mup), so the state file's fsync costs what it would in service.
    makeDirs('/var/tmp');
    this.dir = mkdtempSync(join('/var/tmp', 'mup-bench-daemon-'));
    this.ns = `mupb-${process.pid}`;
    this.bpffs = join(this.dir, 'bpffs');
    this.socket = join(this.dir, 'mup.sock');
    this.stateFile = join(this.dir, 'state.json');
    this.configPath = join(this.dir, 'mup.yaml');
  }

  makeNamespace(): void {
    const ip = (...args: string[]): void => {
      execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    };
    ip('netns', 'add', this.ns);
    this.#nsMade = true;
    ip('-n', this.ns, 'link', 'set', 'lo', 'up');
    ip('-n', this.ns, 'link', 'add', 'mup0', 'type', 'veth', 'peer', 'name', 'peer0');
    ip('-n', this.ns, 'link', 'set', 'mup0', 'up');
    ip('-n', this.ns, 'link', 'set', 'peer0', 'up');
  }

  /**
   * Stop the daemon (by its pid), remove pins, bpffs mount, namespace and
   * directory. Asynchronous on purpose: tsx relays Ctrl-C to this process and
   * SIGKILLs it when its event loop does not answer within 30 ms.
   */
  cleanup(): Promise<string[]> {
    this.#cleaning ??= this.#cleanup();
    return this.#cleaning;
  }

  async #cleanup(): Promise<string[]> {
    const problems: string[] = [];
    const d = this.daemon;
    if (d?.pid !== undefined && d.exitCode === null && d.signalCode === null) {
      const gone = new Promise<void>((r) => d.once('exit', () => r()));
      try {
        process.kill(d.pid, 'SIGKILL');
        await gone;
      } catch {
        // gone already
      }
    }
    if (this.#nsMade) {
      await run('node', [MUP_BIN, 'teardown', '--instance', this.instance, '--bpffs', this.bpffs, '--netns', this.ns]);
    }
    const um = await run('umount', [this.bpffs]);
    if (um.status !== 0 && !/not mounted|no mount point|mountpoint not found|No such file/.test(um.stderr)) problems.push(`umount ${this.bpffs}: ${um.stderr.trim()}`);
    if (this.#nsMade) {
      const del = await run('ip', ['netns', 'delete', this.ns]);
      if (del.status !== 0) problems.push(`ip netns delete ${this.ns}: ${del.stderr.trim()}`);
    }
    try {
      rmSync(this.dir, { recursive: true, force: true });
    } catch (e) {
      problems.push(`rm ${this.dir}: ${(e as Error).message}`);
    }
    return problems;
  }
}

/** Run a command to its end; its status and stderr. */
function run(cmd: string, args: readonly string[]): Promise<{ status: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    p.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    p.on('error', (e) => resolve({ status: -1, stderr: e.message }));
    p.on('close', (status) => resolve({ status, stderr }));
  });
}

// ---------------------------------------------------------------------------
// API client (one connection, kept alive)

const agent = new Agent({ keepAlive: true, maxSockets: 1 });

/**
 * One request. A kept-alive connection the daemon closes as the request
 * goes out (its 5 s keep-alive timer fires late after the event loop was
 * busy, e.g. resolving 131,072 next hops, and wins over the unread request)
 * fails with ECONNRESET on a reused socket: the request was never read, so
 * it is sent once more on a new connection (the retry Node's http docs
 * recommend for this race).
 */
async function api(socket: string, method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
  try {
    return await apiOnce(socket, method, path, body);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ECONNRESET' && (e as { reusedSocket?: boolean }).reusedSocket === true) return apiOnce(socket, method, path, body);
    throw e;
  }
}

/**
 * Read an answer to its end. An answer cut off (the daemon closed the
 * connection, e.g. its stall_timeout on a bench starved by a loaded host)
 * rejects: without this, 'end' never comes and the bench waited forever.
 */
function collectAnswer(res: IncomingMessage, what: string, resolve: (r: { status: number; text: string }) => void, reject: (e: Error) => void): void {
  const chunks: Buffer[] = [];
  res.on('data', (c: Buffer) => chunks.push(c));
  res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
  res.on('error', reject);
  res.on('close', () => {
    if (!res.complete) reject(new Error(`${what}: the connection closed before the whole answer came`));
  });
}

function apiOnce(socket: string, method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        socketPath: socket,
        agent,
        method,
        path,
        headers: payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
        timeout: 60_000,
      },
      (res) => collectAnswer(res, `${method} ${path}`, resolve, reject),
    );
    req.on('error', (e) => reject(Object.assign(e, { reusedSocket: req.reusedSocket })));
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer within 60 s`)));
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

// ---------------------------------------------------------------------------
// Measurements

/**
 * CPU seconds a process has used, all its threads, user + system
 * (/proc/PID/stat utime + stime, in USER_HZ ticks: 1/100 s, which the
 * kernel fixes for this interface whatever its own HZ; its children not
 * counted): less
 * moved by the host's other work than the wall time (on this host a run's
 * wall time moves 10-20 % within minutes), so A/B comparisons read both.
 */
function procCpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (in parentheses, which may hold spaces): utime and stime are the 12th and 13th.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

function procStatus(pid: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of readFileSync(`/proc/${pid}/status`, 'utf8').split('\n')) {
    const m = /^(Vm\w+|Rss\w+):\s+(\d+) kB/.exec(line);
    if (m !== null) out[m[1]!] = Number(m[2]) / 1024;
  }
  return out;
}


/**
 * The daemon's own answer times of a phase, as read from its histogram
 * (mup_api_request_duration_seconds: from a request's headers read to its
 * answer handed to the socket): p50 and p99 interpolated inside their
 * bucket (as histogram_quantile does), the bucket's bounds after them.
 */
function ownText(d: OwnTimes | undefined, what = 'change'): string {
  const ms = (s: number): string => String(Math.round(s * 1e4) / 10);
  const one = (x: QuantileBetween): string => `${f2(x.value * 1000)} ms (bucket ${ms(x.bucket[0])}-${Number.isFinite(x.bucket[1]) ? ms(x.bucket[1]) : 'inf'})`;
  if (d === undefined) return 'not read';
  return d.count === 0 ? `no ${what}` : `${d.count} ${what}s, p50 ${one(d.p50)}, p99 ${one(d.p99)}`;
}

/** The daemon's loop-delay samples in a window: one per 10 ms tick (src/daemon/loop.ts); it does not export their count. */
function ticksText(windowMs: number): string {
  const n = Math.round(windowMs / 10);
  return `about ${n} ticks${n < 100 ? '; n < 100: p99 is the max' : ''}`;
}

/** `p99 X (about N ticks...)` for the daemon's loop delay over a window of `windowMs`. */
function loopP99Text(l: LoopWindow, windowMs: number): string {
  return `p99 ${f2(l.p99)} (${ticksText(windowMs)})`;
}

/** A phase's 2-s windows as `n/p99` pairs. */
function windowsText(ws: readonly { n: number; p99: number }[]): string {
  return ws.map((w) => `${w.n}/${f2(w.p99)}${w.n < 100 ? '*' : ''}`).join(' ') + (ws.some((w) => w.n < 100) ? ' (*: n < 100: p99 is the max)' : '');
}

interface LogLine {
  time: string;
  msg: string;
  [k: string]: unknown;
}

function logLines(text: string): LogLine[] {
  const out: LogLine[] = [];
  for (const l of text.split('\n')) {
    if (!l.startsWith('{')) continue;
    try {
      out.push(JSON.parse(l) as LogLine);
    } catch {
      // not a log line
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// (f) bounded /metrics and (g) 4 writers: issue 19's scrape and group-commit targets

const METRICS_TARGETS = { scrapeMs: 50, scrapeKB: 200 } as const;
const WRITER_TARGETS = { writers: 4, changesPerSecond: 2000, p99Ms: 5 } as const;

/** One request on `agent` (its own kept-alive connection per writer). */
function apiWith(agent: Agent, socket: string, method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      { socketPath: socket, agent, method, path, headers: payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) }, timeout: 60_000 },
      (res) => collectAnswer(res, `${method} ${path}`, resolve, reject),
    );
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer within 60 s`)));
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

interface MetricsPhase {
  /** Default settings (per_rule off): scrape time and size. */
  readonly byDefault: { readonly ms: Latency; readonly bytes: number };
  /** per_rule all (set in the config, then mup reload): for information. */
  readonly all: { readonly ms: Latency; readonly bytes: number; readonly series: number; readonly loopMaxMs: number } | undefined;
  /** Why per_rule all was not measured (its scrape failed). */
  readonly allError?: string;
}

/** (f): /metrics with the default config, then with daemon.metrics.per_rule all (a reload of the same rules). */
async function metricsPhase(socket: string, configPath: string, scrapes: number, skipAll = false): Promise<MetricsPhase> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  // loopMaxMs: the daemon's loop delay max (mup_event_loop_delay_seconds) each scrape after the first reports: it
  // covers the scrape before it, whose series were made and sent after its own window was read.
  const scrape = async (n: number): Promise<{ ms: Latency; bytes: number; text: string; loopMaxMs: number }> => {
    const ms: number[] = [];
    let text = '';
    let loopMaxMs = NaN;
    for (let k = 0; k < n; k++) {
      const t = performance.now();
      const r = await apiWith(agent, socket, 'GET', '/metrics');
      ms.push(performance.now() - t);
      if (r.status !== 200) throw new Error(`GET /metrics: ${r.status} ${r.text.slice(0, 200)}`);
      text = r.text;
      const max = 1000 * Number(/^mup_event_loop_delay_seconds\{quantile="1"\} (\S+)$/m.exec(text)?.[1] ?? NaN);
      if (k > 0) loopMaxMs = Number.isNaN(loopMaxMs) ? max : Math.max(loopMaxMs, max);
    }
    return { ms: summarize(ms), bytes: Buffer.byteLength(text), text, loopMaxMs };
  };
  try {
    const d = await scrape(scrapes);
    const yaml = readFileSync(configPath, 'utf8');
    let all: MetricsPhase['all'];
    let allError: string | undefined = skipAll ? 'left out: --skip-per-rule-all' : undefined;
    if (!skipAll && !/^daemon:/m.test(yaml)) {
      writeFileSync(configPath, `${yaml}daemon:\n  metrics:\n    per_rule: all\n`);
      try {
        const r = await apiWith(agent, socket, 'POST', '/v1/reload');
        if (r.status !== 200) throw new Error(`POST /v1/reload (per_rule all): ${r.status} ${r.text.slice(0, 300)}`);
        const a = await scrape(Math.min(3, scrapes));
        all = { ms: a.ms, bytes: a.bytes, series: a.text.split('\n').filter((l) => l.startsWith('mup_rule_packets_total{')).length, loopMaxMs: a.loopMaxMs };
      } catch (e) {
        // For information only: a 19 MB answer this bench (starved on a loaded host) does not read within the
        // daemon's stall_timeout is cut (EPIPE/ECONNRESET); reported, and the bench goes on.
        allError = (e as Error).message;
      } finally {
        writeFileSync(configPath, yaml);
        const back = new Agent({ keepAlive: false });
        try {
          await apiWith(back, socket, 'POST', '/v1/reload');
        } finally {
          back.destroy();
        }
      }
    }
    return { byDefault: { ms: d.ms, bytes: d.bytes }, all, ...(allError === undefined ? {} : { allError }) };
  } finally {
    agent.destroy();
  }
}

interface WritersPhase {
  readonly writers: number;
  readonly seconds: number;
  readonly changes: number;
  readonly perSecond: number;
  readonly ms: Latency;
  readonly failures: number;
  /** Each 2-s window of the phase in order: changes answered in it and their p99, ms (a warm-up or a stall shows as a window apart). */
  readonly windows: readonly { n: number; p99: number }[];
  /** status.state: fdatasyncs and records during the phase (group commit). */
  readonly syncs: number;
  readonly records: number;
  /**
   * The daemon's own time per change in the phase (mup_api_request_duration_seconds{class="change"}
   * from a scrape before and one after: headers read to answer handed to the socket), ms.
   */
  readonly daemon?: OwnTimes;
}

/** The daemon's own answer times of one class between two scrapes: count, p50, p99 (seconds). */
interface OwnTimes {
  readonly count: number;
  readonly p50: QuantileBetween;
  readonly p99: QuantileBetween;
}

function ownTimes(before: string, after: string, cls: 'change' | 'read'): OwnTimes {
  const q = (x: number): QuantileBetween => quantileBetween(before, after, 'mup_api_request_duration_seconds', { class: cls }, x);
  const p99 = q(0.99);
  return { count: p99.count, p50: q(0.5), p99 };
}

/**
 * (g): `writers` clients, each on its own kept-alive connection, each
 * deleting and adding back rules of its own share of the policies as fast
 * as its answers come, for `seconds`; every change is timed at the client.
 */
async function writersPhase(socket: string, rules: number, writers: number, seconds: number, o: { scrapes?: boolean } = {}): Promise<WritersPhase> {
  const state = async (): Promise<{ syncs: number; records: number }> => {
    const a = new Agent({ keepAlive: false });
    try {
      return (JSON.parse((await apiWith(a, socket, 'GET', '/v1/status')).text) as { state: { syncs: number; records: number } }).state;
    } finally {
      a.destroy();
    }
  };
  const scrape = async (): Promise<string> => {
    const a = new Agent({ keepAlive: false });
    try {
      const r = await apiWith(a, socket, 'GET', '/metrics');
      if (r.status !== 200) throw new Error(`(g) GET /metrics: ${r.status} ${r.text.slice(0, 200)}`);
      return r.text;
    } finally {
      a.destroy();
    }
  };
  const before = await state();
  // Scraped around the phase unless told not to (a watchLoop around it: a scrape starts its loop window anew).
  const scrapes = o.scrapes !== false;
  const metricsBefore = scrapes ? await scrape() : undefined;
  const ms: number[] = [];
  const ends: number[] = [];
  let failures = 0;
  const until = performance.now() + seconds * 1000;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: writers }, async (_, w) => {
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      try {
        // Writer w takes policies w, w + writers, ... (disjoint shares), from the end of the table.
        for (let k = 0; performance.now() < until; k++) {
          const i = rules - 1 - ((w + k * writers) % rules);
          let t = performance.now();
          let r = await apiWith(agent, socket, 'DELETE', `/v1/policies?match=${encodeURIComponent(policyMatch(i))}`);
          ms.push(performance.now() - t);
          ends.push(performance.now() - t0);
          if (r.status !== 200) failures++;
          t = performance.now();
          r = await apiWith(agent, socket, 'POST', '/v1/policies', policyEntry(i));
          ms.push(performance.now() - t);
          ends.push(performance.now() - t0);
          if (r.status !== 201) failures++;
        }
      } finally {
        agent.destroy();
      }
    }),
  );
  const elapsed = (performance.now() - t0) / 1000;
  const windowCount = Math.max(1, Math.floor(elapsed / 2));
  const metricsAfter = scrapes ? await scrape() : undefined;
  const after = await state();
  return {
    writers,
    seconds: elapsed,
    changes: ms.length,
    perSecond: ms.length / elapsed,
    ms: summarize(ms),
    failures,
    // The changes still in flight when the time is up end just after it: counted in the last window.
    windows: Array.from({ length: windowCount }, (_, w) => {
      const s = summarize(ms.filter((_, i) => (ends[i] ?? -1) >= w * 2000 && (w === windowCount - 1 || (ends[i] ?? -1) < (w + 1) * 2000)));
      return { n: s.n, p99: s.p99 };
    }),
    syncs: after.syncs - before.syncs,
    records: after.records - before.records,
    ...(metricsBefore === undefined || metricsAfter === undefined ? {} : { daemon: ownTimes(metricsBefore, metricsAfter, 'change') }),
  };
}

// ---------------------------------------------------------------------------
// (h) idle, route churn and next-hop convergence, with the daemon's own
// event-loop metric (issue 19): functions of their own, called from main.


/** The daemon's event-loop delay since the previous scrape (mup_event_loop_delay_seconds), ms; and the scrape's own time. */
async function loopWindow(socket: string): Promise<LoopWindow & { scrapeMs: number }> {
  return (await loopWindowText(socket)).window;
}

/** loopWindow, and the scrape's text. */
async function loopWindowText(socket: string): Promise<{ window: LoopWindow & { scrapeMs: number }; text: string }> {
  const t = performance.now();
  const r = await api(socket, 'GET', '/metrics');
  const scrapeMs = performance.now() - t;
  const q = (x: string): number => 1000 * Number(new RegExp(`^mup_event_loop_delay_seconds\\{quantile="${x}"\\} (\\S+)$`, 'm').exec(r.text)?.[1] ?? NaN);
  return { window: { p50: q('0.5'), p99: q('0.99'), max: q('1'), scrapeMs }, text: r.text };
}

interface NhStatus {
  nexthops: { rulesResolved: number; fullPasses: number; incrementalPasses: number; cached: number | null; last: { at: string; rules: number; full: boolean; ms: number } | null } | null;
}

/** The status poller (status-poll.mjs) on this thread, with each 200's status handed to onStatus. */
function statusPoller(socket: string, onStatus?: (s: NhStatus, at: number) => void): { stop: () => Promise<Polled> } {
  return startStatusPoller({ socket, periodMs: POLL_PERIOD_MS, ...(onStatus === undefined ? {} : { onBody: (text, at) => onStatus(JSON.parse(text) as NhStatus, at) }) });
}

/** What watchLoop saw: the daemon's loop delay over the window, and a status poller's latencies and resets. */
interface LoopSeen {
  readonly loop: LoopWindow;
  readonly status: Latency;
  readonly resets: number;
  /** Polls answered other than 200, cut off or failed (the first few of their texts in errorTexts). */
  readonly errors: number;
  readonly errorTexts: readonly string[];
  /** The most the poller's own thread delayed a send (its timers, its CPU), ms: part of every latency above it. */
  readonly clientLateMs: number;
  /** The window's length, ms (the daemon's loop delay: a sample per 10 ms tick). */
  readonly windowMs: number;
  /** The window's two /metrics scrapes (the daemon's own answer times between them: ownTimes). */
  readonly metrics: { readonly before: string; readonly after: string };
}

/**
 * The status poller of watchLoop on a thread of its own
 * (status-poll-thread.mjs): the phases it watches make this process busy
 * too ((e) serialises a 2 MB batch body in one JSON.stringify, 10-20 ms),
 * and a poller on this thread's event loop counted those stalls as the
 * daemon's (status p99 33-46 ms during a batch whose daemon loop max was
 * 19-32 ms). Plain JavaScript: the thread needs no TypeScript loader.
 */
async function statusPollerThread(socket: string): Promise<{ stop: () => Promise<Polled> }> {
  // execArgv []: the thread is plain JavaScript; it inherits no --import tsx (nor --cpu-prof).
  const w = new Worker(new URL('./status-poll-thread.mjs', import.meta.url), { workerData: { socket, periodMs: POLL_PERIOD_MS }, execArgv: [] });
  let ready: () => void = () => {};
  const started = new Promise<void>((resolve) => (ready = resolve));
  const done = new Promise<Polled>((resolve, reject) => {
    w.on('message', (m: 'ready' | Polled) => (m === 'ready' ? ready() : resolve(m)));
    w.once('error', reject);
    w.once('exit', (code) => reject(new Error(`the status poller's thread exited (${code}) before it answered`)));
  });
  // A thread that fails before stop() is awaited must not be an unhandled rejection; stop() still throws it.
  done.catch(() => {});
  // Its first poll goes out before the watched phase starts (a thread takes ~45 ms to start).
  await Promise.race([started, done]);
  return {
    stop: async () => {
      w.postMessage('stop');
      const r = await done;
      await w.terminate();
      return r;
    },
  };
}

/**
 * Issue 19's event-loop targets during another phase ((e) the batch load,
 * (g) the writers): a /metrics scrape starts the daemon's window (its
 * loop-delay quantiles are since the previous scrape), a status poller runs
 * on its own kept-alive connection, on a thread of its own
 * (statusPollerThread), until stop(), which scrapes again.
 */
async function watchLoop(socket: string): Promise<{ stop: () => Promise<LoopSeen> }> {
  const before = (await loopWindowText(socket)).text;
  const t0 = performance.now();
  const poller = await statusPollerThread(socket);
  return {
    stop: async () => {
      const polled = await poller.stop();
      const { window: loop, text: after } = await loopWindowText(socket);
      return { loop, status: summarize(polled.ms), resets: polled.resets, errors: polled.errors.length, errorTexts: polled.errors.slice(0, 3), clientLateMs: polled.clientLateMs, windowMs: performance.now() - t0, metrics: { before, after } };
    },
  };
}

/** A LoopSeen for the JSON report: its figures, not the scrapes' texts. */
function seenJson(s: LoopSeen | undefined): Omit<LoopSeen, 'metrics'> | undefined {
  return s === undefined ? undefined : { loop: s.loop, status: s.status, resets: s.resets, errors: s.errors, errorTexts: s.errorTexts, clientLateMs: s.clientLateMs, windowMs: s.windowMs };
}

function loopSeenOk(s: LoopSeen | undefined): boolean {
  if (s === undefined) return false;
  const v = loopVerdict(s.loop, s.status, s.resets, s.errors);
  return v.loopOk && v.statusOk;
}

/** PASS/FAIL lines of one watchLoop window, as the churn lines of (h). */
function loopTargetLines(phase: string, s: LoopSeen | undefined): string[] {
  const t = LOOP_TARGETS;
  if (s === undefined) return [`${phase}: loop and status not measured (the phase failed)            FAIL`];
  const { loopOk } = loopVerdict(s.loop, s.status, s.resets, s.errors);
  return [
    `${`${phase}: loop delay max < ${t.loopMaxMs} ms, p99 < ${t.loopP99Ms} ms`.padEnd(55)}${f2(s.loop.max).padStart(9)} / ${f2(s.loop.p99)} ms (${ticksText(s.windowMs)})  ${pf(loopOk)}`,
    statusTargetLine(phase, s.status, s.resets, s.errors),
  ];
}

function ipIn(ns: string, ...args: string[]): void {
  execFileSync('ip', ['-n', ns, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
}

/** Forwarding on, addresses, permanent neighbours and the two routes every rule resolves through ((h) and (j); idempotent). */
function nextHopRoutes(ns: string): void {
  execFileSync('ip', ['netns', 'exec', ns, 'sysctl', '-q', '-w', 'net.ipv6.conf.all.forwarding=1', 'net.ipv4.conf.all.forwarding=1', 'net.ipv6.conf.all.accept_dad=0'], { stdio: 'ignore' });
  ipIn(ns, 'addr', 'replace', 'fd00::1/64', 'dev', 'mup0', 'nodad');
  ipIn(ns, 'addr', 'replace', '10.255.0.1/24', 'dev', 'mup0');
  ipIn(ns, 'neigh', 'replace', 'fd00::2', 'lladdr', '02:00:00:00:00:02', 'dev', 'mup0', 'nud', 'permanent');
  ipIn(ns, 'neigh', 'replace', 'fd00::3', 'lladdr', '02:00:00:00:00:03', 'dev', 'mup0', 'nud', 'permanent');
  ipIn(ns, 'neigh', 'replace', '10.255.0.2', 'lladdr', '02:00:00:00:00:04', 'dev', 'mup0', 'nud', 'permanent');
  ipIn(ns, 'route', 'replace', '2001:db9::/32', 'via', 'fd00::2', 'dev', 'mup0');
  ipIn(ns, 'route', 'replace', '192.0.2.0/24', 'via', '10.255.0.2', 'dev', 'mup0');
}

/** How long busyFloor polls. */
const FLOOR_SECONDS = 5;

/**
 * GET /v1/status against the idle daemon (polled as watchLoop polls: the
 * same thread, the same connection reuse) while one process per CPU spins:
 * the latency this host's scheduler alone adds when every CPU is busy. On
 * this 2-vCPU machine an idle daemon with 2 rules answered p99 2.6-3.3 ms,
 * max 15 ms, with nothing beside it; 4.6 / 21 ms beside one spinning
 * process; 6.3 / 35.5 ms beside two (session 37). The spinners are killed
 * whatever happens (they also end on their own after the window).
 */
async function busyFloor(sock: string): Promise<{ spinners: number; seen: LoopSeen }> {
  const n = availableParallelism();
  const spinners: ChildProcess[] = [];
  // Also on the bench's own exit (a signal's cleanup exits without unwinding this function).
  const kill = (): void => {
    for (const c of spinners) c.kill('SIGKILL');
  };
  process.once('exit', kill);
  try {
    for (let i = 0; i < n; i++) {
      const c = spawn(process.execPath, ['-e', `const end = Date.now() + ${(FLOOR_SECONDS + 5) * 1000}; while (Date.now() < end);`], { stdio: 'ignore' });
      c.once('error', () => {}); // a spawn that fails: one spinner fewer, said by nothing worse than a lower floor
      spinners.push(c);
    }
    const w = await watchLoop(sock);
    await new Promise((r) => setTimeout(r, FLOOR_SECONDS * 1000));
    return { spinners: n, seen: await w.stop() };
  } finally {
    kill();
    process.removeListener('exit', kill);
  }
}

/**
 * (h) With the tables loaded: routes for every rule's range (one /32 over
 * the policies' 256 SR prefixes, an IPv4 gateway route for the End.M.GTP4.E
 * local SIDs), then
 *   idle: status polled for `idleS` s, nothing changing;
 *   the host's floor: status polled FLOOR_SECONDS s more, one spinning
 *   process per CPU beside the idle daemon (busyFloor);
 *   churn: one route change per second for `churnS` s (a /48 inside the /32
 *   moved to another gateway and back: 256 policies each; every fifth an
 *   IPv4 /24 that cannot move the End.M.GTP4.E rules' prefix: a pass that
 *   re-points nothing), status polled throughout;
 *   convergence: per change, from just before `ip route` runs to the end of
 *   the daemon's pass that wrote it (its status `nexthops.last.at`).
 * Returns report lines, PASS/FAIL lines and whether all passed.
 */
async function loopPhases(env: Env, o: { idleS: number; churnS: number }, progress: (what: string) => void): Promise<{ lines: string[]; targets: string[]; ok: boolean; json: unknown }> {
  const ns = env.ns;
  const sock = env.socket;
  nextHopRoutes(ns);
  // Settle: the interface and forwarding changes make a full pass; wait until passes stop.
  progress('(h) routes set; waiting for the next hops to settle');
  const st = async (): Promise<NhStatus> => JSON.parse((await api(sock, 'GET', '/v1/status')).text) as NhStatus;
  let lastAt = '';
  for (let quiet = 0, t0 = performance.now(); quiet < 3 && performance.now() - t0 < 60_000; ) {
    await new Promise((r) => setTimeout(r, 500));
    const at = (await st()).nexthops?.last?.at ?? '';
    quiet = at === lastAt ? quiet + 1 : 0;
    lastAt = at;
  }
  const settled = await st();
  const load = (): string => loadavg().map((x) => x.toFixed(1)).join(' ');

  // Idle.
  progress(`(h) idle ${o.idleS} s, status polled`);
  const idleLoad = load();
  await loopWindow(sock);
  let poll = statusPoller(sock);
  await new Promise((r) => setTimeout(r, o.idleS * 1000));
  const idle = await poll.stop();
  const idleLoop = await loopWindow(sock);

  // The host's floor: the same idle daemon, every CPU kept busy by a spinning process (as a batch or a
  // reload with its client keeps a 2-CPU host busy), polled as (e), (d) and (g) poll (watchLoop's thread).
  progress(`(h) the host's floor: ${FLOOR_SECONDS} s, the daemon idle, ${availableParallelism()} spinning processes beside it`);
  const floor = await busyFloor(sock);

  // Churn.
  progress(`(h) route churn: 1 change/s for ${o.churnS} s, status polled`);
  const churnLoad = load();
  const before = (await st()).nexthops;
  const passes: Array<{ at: number; rules: number; full: boolean }> = [];
  await loopWindow(sock);
  poll = statusPoller(sock, (s) => {
    const l = s.nexthops?.last;
    if (l !== undefined && l !== null && (passes.length === 0 || Date.parse(l.at) !== passes[passes.length - 1]!.at)) passes.push({ at: Date.parse(l.at), rules: l.rules, full: l.full });
  });
  const changes: Array<{ at: number; what: string }> = [];
  const t0 = performance.now();
  for (let i = 0; i < o.churnS; i++) {
    const k = (Math.floor(i / 2) % 256).toString(16);
    const what =
      i % 5 === 4 ? ['route', 'replace', `198.18.${i}.0/24`, 'via', '10.255.0.2', 'dev', 'mup0'] : i % 2 === 0 ? ['route', 'replace', `2001:db9:${k}::/48`, 'via', 'fd00::3', 'dev', 'mup0'] : ['route', 'del', `2001:db9:${k}::/48`];
    if (what[1] === 'del' && changes.length > 0 && !changes[changes.length - 1]!.what.includes(`2001:db9:${k}::/48`)) what.splice(0, what.length, 'route', 'replace', `2001:db9:${k}::/48`, 'via', 'fd00::2', 'dev', 'mup0');
    const at = Date.now();
    ipIn(ns, ...what);
    changes.push({ at, what: what.join(' ') });
    const next = t0 + (i + 1) * 1000;
    await new Promise((r) => setTimeout(r, Math.max(0, next - performance.now())));
  }
  await new Promise((r) => setTimeout(r, 1000));
  const churn = await poll.stop();
  const churnLoop = await loopWindow(sock);
  const after = (await st()).nexthops;
  // Convergence: each change to the first pass that ended after it.
  const conv: number[] = [];
  let missed = 0;
  for (const c of changes) {
    // A /48 change re-points its 256 policies; an IPv4 change (198.18.i.0/24) moves no End.M.GTP4.E
    // rule's prefix (192.0.2.0/24 is tried first), so its pass re-points none: the first pass after it.
    const p = passes.find((x) => x.at >= c.at && (x.rules > 0 || !c.what.includes(':')));
    if (p === undefined) missed++;
    else conv.push(p.at - c.at);
  }
  const idleL = summarize(idle.ms);
  const churnL = summarize(churn.ms);
  const convL = summarize(conv);
  const reResolved = (after?.rulesResolved ?? 0) - (before?.rulesResolved ?? 0);
  const full = (after?.fullPasses ?? 0) - (before?.fullPasses ?? 0);
  const incr = (after?.incrementalPasses ?? 0) - (before?.incrementalPasses ?? 0);
  const lines = [
    `(h) next hops and the event loop: ${settled.nexthops?.cached ?? '-'} rules cached after settling`,
    `    idle ${o.idleS} s (load average ${idleLoad}): GET /v1/status p50 ${f2(idleL.median)} ${p99Text(idleL)} max ${f2(idleL.max)} ms, resets ${idle.resets}, errors ${idle.errors.length}, poller's own send delay max ${f2(idle.clientLateMs)} ms; ` +
      `daemon loop delay ${loopP99Text(idleLoop, o.idleS * 1000)} max ${f2(idleLoop.max)} ms; polls over 20 ms: ${idle.ms.filter((x) => x > 20).length}`,
    `    the host's floor, ${FLOOR_SECONDS} s: the daemon idle, every CPU kept busy by a spinning process (${floor.spinners}): GET /v1/status ` +
      `p50 ${f2(floor.seen.status.median)} ${p99Text(floor.seen.status)} max ${f2(floor.seen.status.max)} ms, resets ${floor.seen.resets}, errors ${floor.seen.errors}; daemon loop delay ${loopP99Text(floor.seen.loop, floor.seen.windowMs)} max ${f2(floor.seen.loop.max)} ms ` +
      '(what the scheduler alone adds to a status poll when every CPU is busy, as a batch, a reload or a large read with its client makes a 2-CPU host: for information)',
    `    churn ${o.churnS} s, 1 route change/s (load average ${churnLoad}): GET /v1/status p50 ${f2(churnL.median)} ${p99Text(churnL)} max ${f2(churnL.max)} ms, ` +
      `resets ${churn.resets}, errors ${churn.errors.length}${churn.errors.length > 0 ? ` (${churn.errors.slice(0, 3).join('; ')})` : ''}; daemon loop delay p50 ${f2(churnLoop.p50)} ${loopP99Text(churnLoop, (o.churnS + 1) * 1000)} max ${f2(churnLoop.max)} ms (/metrics scrape ${f2(churnLoop.scrapeMs)} ms); poller's own send delay max ${f2(churn.clientLateMs)} ms`,
    `    passes: ${incr} incremental, ${full} full; rules resolved again ${reResolved} (${changes.length} changes: 256 policies per /48; an IPv4 route resolves the End.M.GTP4.E rules again only if it can move their prefix, these cannot)`,
    `    convergence (before \`ip route\` -> the pass's map writes done, daemon clock): p50 ${f2(convL.median)} ${p99Text(convL)} max ${f2(convL.max)} ms; changes with no pass seen: ${missed}`,
  ];
  const { loopOk: okLoop, statusOk: okStatus } = loopVerdict(churnLoop, churnL, churn.resets, churn.errors.length);
  const okConv = convL.p99 < LOOP_TARGETS.convergenceP99Ms && missed === 0;
  const targets = [
    `${`churn: loop delay max < ${LOOP_TARGETS.loopMaxMs} ms, p99 < ${LOOP_TARGETS.loopP99Ms} ms`.padEnd(55)}${f2(churnLoop.max).padStart(9)} / ${f2(churnLoop.p99)} ms (${ticksText((o.churnS + 1) * 1000)})  ${pf(okLoop)}`,
    statusTargetLine('churn', churnL, churn.resets, churn.errors.length),
    `next-hop convergence p99 < ${LOOP_TARGETS.convergenceP99Ms} ms                ${f2(convL.p99).padStart(7)} ms (${nText(convL.n)})  ${pf(okConv)}`,
  ];
  return {
    lines,
    targets,
    ok: okLoop && okStatus && okConv,
    json: { idle: { status: idleL, resets: idle.resets, loop: idleLoop, load: idleLoad }, floor: { spinners: floor.spinners, ...seenJson(floor.seen) }, churn: { status: churnL, resets: churn.resets, loop: churnLoop, load: churnLoad, passes: { full, incremental: incr }, reResolved }, convergence: { ...convL, missed } },
  };
}

// ---------------------------------------------------------------------------
// (j) RSS after minutes of churn and changes (issue 19: <= 1.2 x after load)

const CHURN_TARGETS = { rssRatio: 1.2, sampleSeconds: 30, apiChangesPerSecond: 50 } as const;

/**
 * (j): `minutes` of route churn (one change a second: a /48 of the policies'
 * SR range moved to another gateway and back, every fifth change an IPv4
 * route) and API changes (one writer on a kept-alive connection deleting and
 * adding back policies, paced at 50 changes/s, cycling over the whole table),
 * VmRSS of the daemon sampled every 30 s. The routes of (h) are set (again,
 * with replace) so that (j) also runs when (h) is skipped.
 */
async function churnPhase(
  env: Env,
  pid: number,
  rules: number,
  minutes: number,
  rssAfterLoad: number,
  progress: (what: string) => void,
): Promise<{ lines: string[]; target: string; ok: boolean; failures: number; json: unknown }> {
  const ns = env.ns;
  nextHopRoutes(ns);
  const load = (): string => loadavg().map((x) => x.toFixed(1)).join(' ');
  const loadStart = load();
  const rssStart = procStatus(pid)['VmRSS'] ?? NaN;
  progress(`(j) ${minutes} min of route churn (1/s) and API changes (${CHURN_TARGETS.apiChangesPerSecond}/s), VmRSS every ${CHURN_TARGETS.sampleSeconds} s`);
  const t0 = performance.now();
  const until = t0 + minutes * 60_000;
  const samples: Array<{ s: number; rss: number }> = [{ s: 0, rss: rssStart }];
  let routeChanges = 0;
  let apiChanges = 0;
  let failures = 0;
  const firstFailure: string[] = [];
  const routes = (async () => {
    for (let i = 0; performance.now() < until; i++) {
      const k = (Math.floor(i / 2) % 256).toString(16);
      const what =
        i % 5 === 4
          ? ['route', 'replace', `198.18.${i % 250}.0/24`, 'via', '10.255.0.2', 'dev', 'mup0']
          : ['route', 'replace', `2001:db9:${k}::/48`, 'via', i % 2 === 0 ? 'fd00::3' : 'fd00::2', 'dev', 'mup0'];
      ipIn(ns, ...what);
      routeChanges++;
      const next = t0 + (i + 1) * 1000;
      await new Promise((r) => setTimeout(r, Math.max(0, next - performance.now())));
    }
  })();
  const writer = (async () => {
    const ag = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const gap = 1000 / CHURN_TARGETS.apiChangesPerSecond;
      for (let k = 0; performance.now() < until; k++) {
        const i = k % rules;
        const r1 = await apiWith(ag, env.socket, 'DELETE', `/v1/policies?match=${encodeURIComponent(policyMatch(i))}`).catch((e: Error) => ({ status: 0, text: e.message }));
        const r2 = await apiWith(ag, env.socket, 'POST', '/v1/policies', policyEntry(i)).catch((e: Error) => ({ status: 0, text: e.message }));
        apiChanges += 2;
        for (const [r, want] of [[r1, 200], [r2, 201]] as const) {
          if (r.status !== want) {
            failures++;
            if (firstFailure.length === 0) firstFailure.push(`${r.status} ${r.text.slice(0, 200)}`);
          }
        }
        const next = t0 + ((k + 1) * 2 * gap);
        await new Promise((r) => setTimeout(r, Math.max(0, next - performance.now())));
      }
    } finally {
      ag.destroy();
    }
  })();
  const sampler = (async () => {
    for (let n = 1; ; n++) {
      const next = t0 + n * CHURN_TARGETS.sampleSeconds * 1000;
      if (next > until) break;
      await new Promise((r) => setTimeout(r, Math.max(0, next - performance.now())));
      samples.push({ s: Math.round((performance.now() - t0) / 1000), rss: procStatus(pid)['VmRSS'] ?? NaN });
    }
  })();
  await Promise.all([routes, writer, sampler]);
  const end = procStatus(pid);
  const rssEnd = end['VmRSS'] ?? NaN;
  samples.push({ s: Math.round((performance.now() - t0) / 1000), rss: rssEnd });
  const ratio = rssEnd / rssAfterLoad;
  const ok = ratio <= CHURN_TARGETS.rssRatio && failures === 0;
  const f1 = (x: number): string => (Number.isNaN(x) ? '-' : x.toFixed(1));
  const lines = [
    `(j) ${minutes} min of churn and changes (load average at start ${loadStart}, at end ${load()}): ${routeChanges} route changes, ${apiChanges} API changes, ${failures} failed${firstFailure.length > 0 ? ` (first: ${firstFailure[0]})` : ''}`,
    `    VmRSS, MB: ${f1(rssAfterLoad)} after the load ((a)), ${f1(rssStart)} at the start of (j) (after the phases before it), ${f1(rssEnd)} at the end (RssAnon ${f1(end['RssAnon'] ?? NaN)}, VmHWM ${f1(end['VmHWM'] ?? NaN)})`,
    `    over time (s: MB): ${samples.map((x) => `${x.s}: ${f1(x.rss)}`).join(', ')}`,
  ];
  const target = `churn ${minutes} min: VmRSS <= ${CHURN_TARGETS.rssRatio} x after load    ${f1(rssEnd).padStart(7)} MB = ${ratio.toFixed(2)} x ${f1(rssAfterLoad)}  ${ok ? 'PASS' : 'FAIL'}`;
  return { lines, target, ok, failures, json: { minutes, routeChanges, apiChanges, failures, rssAfterLoad, rssStart, rssEnd, ratio, samples, pass: ok } };
}

/**
 * How long an RCU grace period takes here. It varies between hosts and boots
 * (0.02 ms to 10 ms median seen on the same kind of VM), and every change
 * that flips the configuration or deletes waits for one, so the change
 * figures below are read against it.
 */
function graceMs(n = 30): { n: number; median: number; max: number } {
  const t: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    synchronizeRcu();
    t.push(performance.now() - t0);
  }
  t.sort((a, b) => a - b);
  return { n, median: t[Math.floor(n / 2)] ?? NaN, max: t[n - 1] ?? NaN };
}

/**
 * The disk's own fdatasync time in `dir` (the state file's filesystem): a
 * 200-byte append and its fdatasync, n in a row. An API change is answered
 * after the fdatasync that makes its record durable (shared by the changes
 * of a group): this is the floor under the writers' per-change times.
 */
function fdatasyncMs(dir: string, n = 1000): { n: number; median: number; p99: number; max: number } {
  const file = join(dir, 'fdatasync-probe');
  const fd = openSync(file, 'a');
  const t: number[] = [];
  try {
    const line = `${'x'.repeat(199)}\n`;
    for (let i = 0; i < n; i++) {
      writeSync(fd, line);
      const t0 = performance.now();
      fdatasyncSync(fd);
      t.push(performance.now() - t0);
    }
  } finally {
    closeSync(fd);
    rmSync(file, { force: true });
  }
  t.sort((a, b) => a - b);
  return { n, median: t[Math.floor(n / 2)] ?? NaN, p99: t[Math.floor(n * 0.99)] ?? NaN, max: t[n - 1] ?? NaN };
}

async function main(): Promise<number> {
  const o = parseArgs(process.argv.slice(2));
  if (process.getuid?.() !== 0) throw new Error('run as root: the bench creates a network namespace and mounts a bpffs');
  try {
    readFileSync(DIST_MAIN);
  } catch {
    throw new Error(`${DIST_MAIN} is missing: build first (make, or make bench-daemon)`);
  }

  const loadAtStart = loadavg();
  const grace = graceMs();
  const env = new Env();
  // `on`, not `once`: Ctrl-C reaches this process twice (from the terminal and
  // relayed by npm/tsx), and a second one without a listener would kill it
  // in the middle of the cleanup.
  let signalled = false;
  const onSignal = (sig: NodeJS.Signals): void => {
    if (signalled) return;
    signalled = true;
    process.stderr.write(`\n${sig}: cleaning up\n`);
    void env.cleanup().then((problems) => {
      for (const p of problems) process.stderr.write(`cleanup: ${p}\n`);
      process.exit(130);
    });
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  let log = '';
  try {
    env.makeNamespace();
    if (o.sessions !== undefined) return await sessionsPhase(o, o.sessions, env, loadAtStart);
    const t0 = performance.now();
    const yaml = o.format === 'json' ? configJson(o.rules, 'mup0') : configText(o.rules, 'mup0');
    writeFileSync(env.configPath, yaml);
    const genMs = performance.now() - t0;
    const configMB = Buffer.byteLength(yaml) / 1e6;

    const args = daemonArgv(o, env);

    // Node's own start, for scale: `node bin/mup.js --version`.
    const v0 = performance.now();
    spawnSync('node', [MUP_BIN, '--version'], { stdio: 'ignore' });
    const nodeStartMs = performance.now() - v0;

    // (a) load
    const spawnedAt = Date.now();
    const s0 = performance.now();
    const d = spawn('node', args, { stdio: ['ignore', 'pipe', 'pipe'], env: daemonEnv(o) });
    env.daemon = d;
    d.stdout!.on('data', (c: Buffer) => (log += c.toString()));
    d.stderr!.on('data', (c: Buffer) => (log += c.toString()));
    const pid = d.pid!;
    let answeredMs: number | undefined;
    for (;;) {
      if (d.exitCode !== null || d.signalCode !== null) throw new Error(`the daemon exited (${d.exitCode ?? d.signalCode}) before serving:\n${log}`);
      try {
        const r = await api(env.socket, 'GET', '/v1/status');
        if (r.status === 200) {
          answeredMs = performance.now() - s0;
          break;
        }
      } catch {
        // not listening yet
      }
      if (performance.now() - s0 > 120_000) throw new Error(`no answer within 120 s:\n${log}`);
      await new Promise((r) => setTimeout(r, 5));
    }
    const status = JSON.parse((await api(env.socket, 'GET', '/v1/status')).text) as {
      tables: { policies: { entries: number }; localsids: { entries: number } };
      interfaces: { attached: boolean }[];
    };
    const lines = logLines(log);
    const at = (msg: string): number | undefined => {
      const l = lines.find((x) => x.msg === msg);
      return l === undefined ? undefined : Date.parse(l.time);
    };
    const tMounted = at('mounted a bpf filesystem');
    const tLoaded = at('data plane loaded') ?? at('took over the running data plane');
    const tListening = at('control API listening');
    // The daemon's own breakdown of the load: ms per phase and memory (MB) right after it.
    const loadedLine = lines.find((x) => x.msg === 'data plane loaded' || x.msg === 'took over the running data plane');
    const phaseMs = (loadedLine?.['ms'] ?? {}) as Record<string, number>;
    const memLoaded = (loadedLine?.['memory'] ?? {}) as Record<string, number>;
    // The spawn is the base: /proc/stat's btime has a resolution of 1 s, too coarse here.
    const base = spawnedAt;
    const rssLoaded = procStatus(pid);

    const progress = (what: string): void => void process.stderr.write(`bench:daemon: ${what} (${((performance.now() - s0) / 1000).toFixed(0)} s)\n`);
    progress('loaded; (b) adds and deletes');
    // (b) add / delete on full tables
    const delMs: Record<'policy' | 'localsid', number[]> = { policy: [], localsid: [] };
    const addMs: Record<'policy' | 'localsid', number[]> = { policy: [], localsid: [] };
    const failures: string[] = [];
    // Spread the rules over the table rather than the first few hundred.
    const stride = Math.max(1, Math.floor(o.rules / o.ops));
    for (const kind of ['policy', 'localsid'] as const) {
      const path = kind === 'policy' ? '/v1/policies' : '/v1/localsids';
      for (let k = 0; k < o.ops; k++) {
        const i = (k * stride) % o.rules;
        const q = kind === 'policy' ? `match=${encodeURIComponent(policyMatch(i))}` : `sid=${encodeURIComponent(localSid(i))}`;
        let t = performance.now();
        let r = await api(env.socket, 'DELETE', `${path}?${q}`);
        delMs[kind].push(performance.now() - t);
        if (r.status !== 200) failures.push(`DELETE ${path}?${q}: ${r.status} ${r.text.trim()}`);
        t = performance.now();
        r = await api(env.socket, 'POST', path, kind === 'policy' ? policyEntry(i) : localSidEntry(i));
        addMs[kind].push(performance.now() - t);
        if (r.status !== 201) failures.push(`POST ${path} (${i}): ${r.status} ${r.text.trim()}`);
        if (failures.length > 0 && !o.keepGoing) throw new Error(`request failed: ${failures[0]}\n${log.slice(-4000)}`);
      }
    }
    // (e) 10,000 operations in one batch, and the same as single requests.
    const nBatch = Math.min(BATCH_OPS, o.rules);
    const nSingle = Math.min(nBatch, o.singleOps ?? nBatch);
    progress(`(e) ${nBatch} operations through /v1/batch, then as single requests`);
    const batchMs = { del: NaN, add: NaN };
    let batchSeen: LoopSeen | undefined;
    const singleMs = { del: NaN, add: NaN };
    // VmRSS at each step of (e), MB: where the memory right after it comes from.
    const rssSteps = { batches: NaN, singles: NaN, sameReload: NaN, editedReload: NaN };
    {
      const ids = Array.from({ length: nBatch }, (_, k) => (k * Math.max(1, Math.floor(o.rules / nBatch))) % o.rules);
      const dels = { operations: ids.map((i) => ({ op: 'delete', policy: { match: policyMatch(i) } })) };
      const adds = { operations: ids.map((i) => ({ op: 'add', policy: policyEntry(i) })) };
      for (const [what, doc] of [['del', dels], ['add', adds]] as const) {
        const t = performance.now();
        const r = await api(env.socket, 'POST', '/v1/batch', doc);
        batchMs[what] = performance.now() - t;
        if (r.status !== 200) failures.push(`POST /v1/batch (${nBatch} ${what}): ${r.status} ${r.text.slice(0, 300)}`);
      }
      // The same two batches again with the daemon's loop and a status poller watched (a large load must not be
      // one long stall); apart from the timed ones above, whose time the poller's requests would lengthen.
      const batchLoop = await watchLoop(env.socket);
      for (const doc of [dels, adds]) {
        const r = await api(env.socket, 'POST', '/v1/batch', doc);
        if (r.status !== 200) failures.push(`POST /v1/batch (${nBatch}, watched): ${r.status} ${r.text.slice(0, 300)}`);
      }
      batchSeen = await batchLoop.stop();
      rssSteps.batches = procStatus(pid)['VmRSS'] ?? NaN;
      progress(`(e) /v1/batch of ${nBatch}: deletes ${batchMs.del.toFixed(1)} ms, adds ${batchMs.add.toFixed(1)} ms; now ${nSingle} of each as single requests`);
      const singles = ids.slice(0, nSingle);
      let t = performance.now();
      for (const i of singles) {
        const r = await api(env.socket, 'DELETE', `/v1/policies?match=${encodeURIComponent(policyMatch(i))}`);
        if (r.status !== 200) failures.push(`DELETE policy ${i}: ${r.status}`);
      }
      singleMs.del = performance.now() - t;
      t = performance.now();
      for (const i of singles) {
        const r = await api(env.socket, 'POST', '/v1/policies', policyEntry(i));
        if (r.status !== 201) failures.push(`POST policy ${i}: ${r.status}`);
      }
      singleMs.add = performance.now() - t;
      rssSteps.singles = procStatus(pid)['VmRSS'] ?? NaN;
      if (failures.length > 0 && !o.keepGoing) throw new Error(`request failed: ${failures[0]}\n${log.slice(-4000)}`);
    }
    const batchWorst = Math.max(batchMs.del, batchMs.add);
    // A reload of the same file: the daemon keeps its rule set (nothing parsed again); for information.
    progress('(e) POST /v1/reload of the same file, then of an edit (loop and status watched)');
    const reloadMs = { same: NaN, edited: NaN };
    {
      const t = performance.now();
      const r = await api(env.socket, 'POST', '/v1/reload');
      reloadMs.same = performance.now() - t;
      if (r.status !== 200 || !r.text.includes('"configChanged":false')) failures.push(`POST /v1/reload (same file): ${r.status} ${r.text.slice(0, 300)}`);
      rssSteps.sameReload = procStatus(pid)['VmRSS'] ?? NaN;
    }
    // A reload of an edit (policy EDITED given another SID prefix), the loop and a status poller watched: the whole
    // file is read, parsed and checked again, the rule set diffed against the running one, one rule replaced.
    writeFileSync(env.configPath, o.format === 'json' ? configJson(o.rules, 'mup0', true) : configText(o.rules, 'mup0', true));
    const reloadLoop = await watchLoop(env.socket);
    const tReload = performance.now();
    const reloaded = await api(env.socket, 'POST', '/v1/reload');
    reloadMs.edited = performance.now() - tReload;
    rssSteps.editedReload = procStatus(pid)['VmRSS'] ?? NaN;
    const reloadSeen = await reloadLoop.stop();
    // The daemon's own answer times of the reads in the two windows (the poller's status, the opening scrape).
    const eOwn = {
      batch: batchSeen === undefined ? undefined : ownTimes(batchSeen.metrics.before, batchSeen.metrics.after, 'read'),
      reload: ownTimes(reloadSeen.metrics.before, reloadSeen.metrics.after, 'read'),
    };
    // The daemon's own account of that reload: its phases and how many rule objects it kept.
    // The edited reload's line (configChanged), not the same-file one before it: its pipe may lag the answer a little.
    const editedLog = (): LogLine | undefined => logLines(log).filter((x) => x.msg === 'reloaded' && x['configChanged'] === true).at(-1);
    for (let i = 0; i < 40 && editedLog() === undefined; i++) await new Promise((r) => setTimeout(r, 50));
    const reloadLog = editedLog();
    const reloadPhases = reloadLog === undefined ? 'not in its log' : `${Object.entries((reloadLog['phases'] ?? {}) as Record<string, number>).map(([k, v]) => `${k} ${v}`).join(', ')}; rule objects kept ${String(reloadLog['rulesKept'] ?? '?')}, rules that crossed from the parser's thread ${String(reloadLog['rulesCrossed'] ?? '?')}`;
    if (reloaded.status !== 200 || !/"replaced":1\b/.test(reloaded.text)) failures.push(`POST /v1/reload (edited): ${reloaded.status} ${reloaded.text.slice(0, 300)}`);
    const rssAfter = procStatus(pid);
    // Reads with full tables, for information (no target): what a scrape and `mup stats` cost.
    const reads: Record<string, { ms: number; bytes: number }> = {};
    for (const path of ['/v1/status', '/v1/policies', '/v1/counters', '/metrics']) {
      const t = performance.now();
      const r = await api(env.socket, 'GET', path);
      reads[path] = { ms: performance.now() - t, bytes: Buffer.byteLength(r.text) };
      if (r.status !== 200) failures.push(`GET ${path}: ${r.status}`);
    }
    // (d) scrape cost, full tables: N scrapes of each, one at a time, spaced
    // over the metrics' 100 ms snapshot reuse so every scrape reads the counters.
    const scrapeMs: Record<string, number[]> = {};
    for (const path of SCRAPE_PATHS) {
      progress(`(d) ${o.scrapes} x GET ${path}`);
      scrapeMs[path] = [];
      for (let k = 0; k < o.scrapes; k++) {
        await new Promise((r) => setTimeout(r, 150));
        const t = performance.now();
        const r = await api(env.socket, 'GET', path);
        scrapeMs[path].push(performance.now() - t);
        if (r.status !== 200) failures.push(`GET ${path}: ${r.status}`);
      }
    }
    const scrapes = Object.fromEntries(Object.entries(scrapeMs).map(([p, ms]) => [p, summarize(ms)]));
    // The largest reads an operator makes (`mup stats` of every rule, a full listing), the loop and a status
    // poller watched: a read must not stall the daemon either (before session 29 each held the loop 100-440 ms).
    progress(`(d) ${LARGE_READS_EACH} x each of ${LARGE_READS.join(', ')}, loop and status watched`);
    const readsLoop = await watchLoop(env.socket);
    for (let k = 0; k < LARGE_READS_EACH; k++) {
      for (const path of LARGE_READS) {
        const r = await api(env.socket, 'GET', path);
        if (r.status !== 200) failures.push(`GET ${path} (watched): ${r.status}`);
      }
    }
    const readsSeen = await readsLoop.stop();
    progress('(f) /metrics, default and per_rule all');
    const metrics = await metricsPhase(env.socket, env.configPath, o.scrapes, o.skipPerRuleAll);
    progress(`(g) ${WRITER_TARGETS.writers} writers for 10 s`);
    const loadWriters = loadavg();
    const disk = fdatasyncMs(env.dir);
    const writers = await writersPhase(env.socket, o.rules, WRITER_TARGETS.writers, 10);
    // Again with the daemon's loop and a status poller watched: apart from the run above, whose rate and
    // latencies the poller's requests (one every ~2 ms, a fifth client) would lower.
    progress(`(g) ${WRITER_TARGETS.writers} writers for 10 s more, loop and status watched`);
    const writersLoop = await watchLoop(env.socket);
    const watchedWriters = await writersPhase(env.socket, o.rules, WRITER_TARGETS.writers, 10, { scrapes: false });
    const writersSeen = await writersLoop.stop();
    // The daemon's own times in the watched window: the writers' changes, and the poller's status reads.
    const watchedOwn = { change: ownTimes(writersSeen.metrics.before, writersSeen.metrics.after, 'change'), read: ownTimes(writersSeen.metrics.before, writersSeen.metrics.after, 'read') };
    if (watchedWriters.failures > 0) failures.push(`(g) ${watchedWriters.failures} changes of the watched writers failed`);
    if (writers.failures > 0) failures.push(`(g) ${writers.failures} changes of the writers failed`);
    const rssReads = procStatus(pid);
    // At rest: the daemon's full collection after a reload waits for a second without requests (memory.ts).
    await new Promise((r) => setTimeout(r, 2500));
    const rssRest = procStatus(pid);
    // (h) idle, route churn, next-hop convergence (issue 19).
    const loopRes = o.churnS > 0 ? await loopPhases(env, o, progress) : undefined;
    // (j) RSS over minutes of churn and changes (issue 19).
    const churnRes = o.churnMinutes > 0 ? await churnPhase(env, pid, o.rules, o.churnMinutes, rssLoaded['VmRSS'] ?? NaN, progress) : undefined;
    if (churnRes !== undefined && churnRes.failures > 0) failures.push(`(j) ${churnRes.failures} API changes failed`);
    const after = JSON.parse((await api(env.socket, 'GET', '/v1/status')).text) as typeof status;
    agent.destroy();

    // Stop as a service manager would (SIGTERM), so a --cpu-prof profile is written.
    d.kill('SIGTERM');
    await new Promise<void>((r) => {
      if (d.exitCode !== null || d.signalCode !== null) r();
      else d.once('exit', () => r());
    });

    // ------------------------------------------------------------------ report
    const loadS = answeredMs / 1000;
    const pol = { add: summarize(addMs.policy), del: summarize(delMs.policy) };
    const sid = { add: summarize(addMs.localsid), del: summarize(delMs.localsid) };
    const allAdd = summarize([...addMs.policy, ...addMs.localsid]);
    const allDel = summarize([...delMs.policy, ...delMs.localsid]);
    const rss = Math.max(rssLoaded['VmRSS'] ?? NaN, rssAfter['VmRSS'] ?? NaN);
    const f1 = (x: number | undefined): string => (x === undefined || Number.isNaN(x) ? '-' : x.toFixed(1));
    const rel = (t: number | undefined): string => (t === undefined ? '-' : `${((t - base) / 1000).toFixed(3)} s`);

    const metricsOk = { time: metrics.byDefault.ms.median < METRICS_TARGETS.scrapeMs, size: metrics.byDefault.bytes < METRICS_TARGETS.scrapeKB * 1000 };
    const writersOk = { rate: writers.perSecond >= WRITER_TARGETS.changesPerSecond, p99: writers.ms.p99 < WRITER_TARGETS.p99Ms };
    const out: string[] = [];
    out.push(
      `bench:daemon  ${new Date().toISOString()}  ${cpus().length}x ${cpus()[0]?.model ?? '?'}  Linux ${release()}  node ${process.version}  ` +
        `load average at start ${loadAtStart.map((x) => x.toFixed(1)).join(' ')} (other work on the host slows every figure)${nodeFlagsNote(o)}`,
      `RCU grace period on this host (membarrier(MEMBARRIER_CMD_GLOBAL), ${grace.n} in a row before the bench): ` +
        `median ${f2(grace.median)} max ${f2(grace.max)} ms, /sys/kernel/rcu_expedited ${rcuExpedited() ?? 'unknown'}; an insert after a delete waits for one (docs/datapath.md, docs/daemon.md)`,
      `config: ${o.rules} policies + ${o.rules} local SIDs, ${configMB.toFixed(1)} MB of ${o.format === 'json' ? 'JSON' : 'YAML'} (written in ${f1(genMs)} ms); ` +
        `loaded: ${status.tables.policies.entries} policies, ${status.tables.localsids.entries} local SIDs, interface attached: ${status.interfaces.every((i) => i.attached)}`,
      '',
      '(a) load, from the spawn of `node bin/mup.js daemon`',
      `    node start alone (mup --version)              ${f1(nodeStartMs)} ms`,
      `    config checked, rule set built ("mounted a bpf filesystem")${rel(tMounted)}`,
      `    tables filled + attached ("data plane loaded")          ${rel(tLoaded)}`,
      `    API listening            ("control API listening")      ${rel(tListening)}`,
      `    API answered GET /v1/status                             ${loadS.toFixed(3)} s`,
      `    daemon's breakdown, ms: ${Object.entries(phaseMs).map(([k, v]) => `${k} ${v}`).join(', ') || '-'} ` +
        '(config: read + parse + validate; rules: the rule set; load: program + tables; attach)',
      `    daemon's memory right after the load, MB: ${Object.entries(memLoaded).map(([k, v]) => `${k} ${v}`).join(', ') || '-'} ` +
        '(heapUsed: JS objects; external/arrayBuffers: buffers and typed arrays)',
      '',
      `(b) one request at a time, tables full, ${o.ops} of each (client side, kept-alive unix socket), ms`,
      `    op                 median     p99     min     max   (n=${o.ops} each${o.ops < 100 ? '; n < 100: p99 is the max' : ''})`,
      `    DELETE policy    ${f2(pol.del.median).padStart(8)}${f2(pol.del.p99).padStart(8)}${f2(pol.del.min).padStart(8)}${f2(pol.del.max).padStart(8)}`,
      `    POST   policy    ${f2(pol.add.median).padStart(8)}${f2(pol.add.p99).padStart(8)}${f2(pol.add.min).padStart(8)}${f2(pol.add.max).padStart(8)}`,
      `    DELETE localsid  ${f2(sid.del.median).padStart(8)}${f2(sid.del.p99).padStart(8)}${f2(sid.del.min).padStart(8)}${f2(sid.del.max).padStart(8)}`,
      `    POST   localsid  ${f2(sid.add.median).padStart(8)}${f2(sid.add.p99).padStart(8)}${f2(sid.add.min).padStart(8)}${f2(sid.add.max).padStart(8)}`,
      `    failed requests: ${failures.length}; tables after: ${after.tables.policies.entries} policies, ${after.tables.localsids.entries} local SIDs`,
      `    reads, full tables: ${Object.entries(reads)
        .map(([p, r]) => `GET ${p} ${r.ms.toFixed(0)} ms (${(r.bytes / 1e6).toFixed(1)} MB)`)
        .join(', ')}`,
      '',
      `(e) ${nBatch} policy operations, tables full, client side (kept-alive unix socket): all in one POST /v1/batch vs one request each`,
      `    ${nBatch} deletes: /v1/batch ${f1(batchMs.del).padStart(8)} ms   ${nSingle} single requests ${f1(singleMs.del).padStart(9)} ms (${f2(singleMs.del / nSingle)} ms each)`,
      `    ${nBatch} adds:    /v1/batch ${f1(batchMs.add).padStart(8)} ms   ${nSingle} single requests ${f1(singleMs.add).padStart(9)} ms (${f2(singleMs.add / nSingle)} ms each)`,
      `    POST /v1/reload, the file unchanged (the running rule set kept, nothing parsed again): ${f1(reloadMs.same)} ms`,
      `    POST /v1/reload, policy p${EDITED} edited (${o.rules * 2} rules read, checked and diffed again, 1 replaced): ${f1(reloadMs.edited)} ms`,
      `      daemon's phases, ms: ${reloadPhases}`,
      `    the daemon's own time for the reads beside them (mup_api_request_duration_seconds{class="read"}: the poller's GET /v1/status, and the`,
      `    window's opening /metrics scrape; the client's times are the batch and reload status lines): batches: ${ownText(eOwn.batch, 'read')}; reloads: ${ownText(eOwn.reload, 'read')}`,
      '',
      `(c) memory, MB: VmRSS ${f1(rssLoaded['VmRSS'])} loaded, ${f1(rssAfter['VmRSS'])} right after (e) (its batches, single changes and two reloads) ` +
        `(RssAnon ${f1(rssAfter['RssAnon'])}, RssFile ${f1(rssAfter['RssFile'])}), ${f1(rssReads['VmRSS'])} after the reads and writers, ` +
        `${f1(rssRest['VmRSS'])} after 2.5 s more without a request (the daemon's collection waits for a quiet second); VmHWM (peak) ${f1(rssReads['VmHWM'])}`,
      `    VmRSS at each step of (e), MB: ${f1(rssSteps.batches)} after the batches, ${f1(rssSteps.singles)} after the single requests, ${f1(rssSteps.sameReload)} after the reload of the same file, ${f1(rssSteps.editedReload)} as the edited reload answered`,
      '',
      `(d) scrapes, full tables: ${o.scrapes} of each, one at a time 150 ms apart (client side, kept-alive unix socket), ms`,
      `    GET                              median     p99     min     max   (n=${o.scrapes} each${o.scrapes < 100 ? '; n < 100: p99 is the max' : ''})`,
      ...SCRAPE_PATHS.map((p) => {
        const l = scrapes[p]!;
        return `    ${p.padEnd(30)}${f2(l.median).padStart(8)}${f2(l.p99).padStart(8)}${f2(l.min).padStart(8)}${f2(l.max).padStart(8)}`;
      }),
      '    /metrics: default settings (no per-rule series: daemon.metrics.per_rule off). /v1/counters: what',
      '    `mup stats` asks (?rules=active above 2000 rules; none of these rules has packets); ?rules=all lists every rule',
      '    (JSON of several MB). Wall time at the client: the daemon reading the counter map, building and serialising',
      '    the answer, the socket. With few samples p99 is about the max. Other work on the host (load average at start',
      '    above; other test runs may start during the bench) adds to every figure: compare runs made back to back.',
      '',
      `(f) /metrics, ${o.rules * 2} rules, client side, ms: default (per_rule off) median ${f2(metrics.byDefault.ms.median)} ${p99Text(metrics.byDefault.ms)} max ${f2(metrics.byDefault.ms.max)}, ` +
        `${(metrics.byDefault.bytes / 1024).toFixed(1)} KiB`,
      metrics.all === undefined
        ? `    per_rule all: not measured (${metrics.allError ?? 'the config has a daemon section'})`
        : `    per_rule all (${metrics.all.series} per-rule series): median ${f2(metrics.all.ms.median)} max ${f2(metrics.all.ms.max)} ms, ${(metrics.all.bytes / 1024 / 1024).toFixed(1)} MiB; the daemon's loop delay max through them ${Number.isNaN(metrics.all.loopMaxMs) ? 'not measured (one scrape: --scrapes 2 or more)' : `${f2(metrics.all.loopMaxMs)} ms`} (for information)`,
      '',
      `(g) ${writers.writers} writers, ${writers.seconds.toFixed(1)} s, each deleting and adding back policies on its own kept-alive connection ` +
        `(load average before ${loadWriters.map((x) => x.toFixed(1)).join(' ')})`,
      `    ${writers.changes} changes, ${writers.perSecond.toFixed(0)}/s; per change ms: median ${f2(writers.ms.median)} ${p99Text(writers.ms)} max ${f2(writers.ms.max)}; ` +
        `failed ${writers.failures}; ${writers.syncs} fdatasyncs for ${writers.records} records (group commit: ${(writers.records / Math.max(1, writers.syncs)).toFixed(1)} per sync)`,
      `    the daemon's own time (mup_api_request_duration_seconds, from a request's headers read to its answer handed to the socket): ${ownText(writers.daemon)}`,
      `    each 2 s in turn, changes/p99 ms: ${windowsText(writers.windows)}`,
      `    watched run (a status poller beside them, for the loop and status lines): ${watchedWriters.changes} changes, ${watchedWriters.perSecond.toFixed(0)}/s; ` +
        `per change ms: median ${f2(watchedWriters.ms.median)} ${p99Text(watchedWriters.ms)} max ${f2(watchedWriters.ms.max)}`,
      `    each 2 s of the watched run in turn, changes/p99 ms: ${windowsText(watchedWriters.windows)}`,
      `    the daemon's own time in the watched run: ${ownText(watchedOwn.change)}; ${ownText(watchedOwn.read, 'read')} (the poller's status and the opening scrape)`,
      `    this disk alone, right before: a 200-byte append and its fdatasync, ${disk.n} in a row: median ${f2(disk.median)} p99 ${f2(disk.p99)} max ${f2(disk.max)} ms ` +
        '(a change is answered after the fdatasync of its group: a floor under its p99)',
      '',
      `status polls (the status lines below, and (h)): ${pollerMethod(POLL_PERIOD_MS)}. The poller's own send delay (its thread's timers and CPU, ` +
        `part of its figures) was at most ${[batchSeen, writersSeen, reloadSeen, readsSeen].map((x) => f2(x?.clientLateMs)).join(' / ')} ms (batch / writers / reload / reads). ` +
        'The (g) writers are closed-loop (each waits for its answer before its next change): a stall adds one slow change per writer however long it lasts, so their p99 does not see stalls; the loop and status lines do.',
      '',
      'target                                          measured   result',
      `load < ${TARGETS.loadSeconds} s (start -> API answers)               ${loadS.toFixed(3).padStart(7)} s   ${pf(loadS < TARGETS.loadSeconds)}`,
      `add < ${TARGETS.medianAddMs} ms median (policies + local SIDs)     ${f2(allAdd.median).padStart(7)} ms  ${pf(allAdd.median < TARGETS.medianAddMs)}`,
      `delete < ${TARGETS.medianDelMs} ms median (policies + local SIDs)  ${f2(allDel.median).padStart(7)} ms  ${pf(allDel.median < TARGETS.medianDelMs)}`,
      `VmRSS < ${TARGETS.rssMB} MB with the tables loaded            ${f1(rss).padStart(7)} MB  ${pf(rss < TARGETS.rssMB)}`,
      `${nBatch} ops in one /v1/batch < ${TARGETS.batchMs} ms (worst of 2)  ${f1(batchWorst).padStart(7)} ms  ${pf(batchWorst < TARGETS.batchMs)}`,
      `/metrics < ${METRICS_TARGETS.scrapeMs} ms median, default settings      ${f2(metrics.byDefault.ms.median).padStart(7)} ms  ${pf(metricsOk.time)}`,
      `/metrics < ${METRICS_TARGETS.scrapeKB} KB, default settings             ${(metrics.byDefault.bytes / 1000).toFixed(1).padStart(7)} KB  ${pf(metricsOk.size)}`,
      `${WRITER_TARGETS.writers} writers >= ${WRITER_TARGETS.changesPerSecond} changes/s in total          ${writers.perSecond.toFixed(0).padStart(7)}/s   ${pf(writersOk.rate)}`,
      `single change p99 < ${WRITER_TARGETS.p99Ms} ms under ${WRITER_TARGETS.writers} writers        ${f2(writers.ms.p99).padStart(7)} ms (${nText(writers.ms.n)})  ${pf(writersOk.p99)}`,
      ...loopTargetLines('batch', batchSeen),
      ...loopTargetLines('writers', writersSeen),
      ...loopTargetLines('reload', reloadSeen),
      ...loopTargetLines('reads', readsSeen),
    );
    if (loopRes !== undefined) out.push(...loopRes.targets, '', ...loopRes.lines);
    if (churnRes !== undefined) out.push('', ...churnRes.lines, churnRes.target);
    if (o.cpuProf !== undefined) out.push('', `daemon CPU profile (.cpuprofile) written to ${o.cpuProf}`);
    process.stdout.write(`${out.join('\n')}\n`);
    const ok =
      loadS < TARGETS.loadSeconds &&
      allAdd.median < TARGETS.medianAddMs &&
      allDel.median < TARGETS.medianDelMs &&
      rss < TARGETS.rssMB &&
      batchWorst < TARGETS.batchMs &&
      metricsOk.time &&
      metricsOk.size &&
      writersOk.rate &&
      writersOk.p99 &&
      loopSeenOk(batchSeen) &&
      loopSeenOk(writersSeen) &&
      loopSeenOk(reloadSeen) &&
      loopSeenOk(readsSeen) &&
      (loopRes?.ok ?? true) &&
      (churnRes?.ok ?? true) &&
      failures.length === 0;
    if (o.json) {
      process.stdout.write(
        `${JSON.stringify({
          rules: o.rules,
          ops: o.ops,
          nodeFlags: o.nodeFlags,
          load: { seconds: loadS, configValidated: tMounted === undefined ? null : (tMounted - base) / 1000, tablesFilled: tLoaded === undefined ? null : (tLoaded - base) / 1000, listening: tListening === undefined ? null : (tListening - base) / 1000 },
          latencyMs: { policy: pol, localsid: sid, add: allAdd, del: allDel },
          reads,
          batch: { operations: nBatch, batchMs, singleOperations: nSingle, singleMs, pass: batchWorst < TARGETS.batchMs },
          scrapesMs: scrapes,
          metrics,
          writers,
          fdatasyncMs: disk,
          reloadMs,
          // Without the scrapes' texts (the own times from them are in writers.daemon and watchedOwn).
          loopDuring: { batch: seenJson(batchSeen), writers: seenJson(writersSeen), reload: seenJson(reloadSeen), reads: seenJson(readsSeen) },
          watchedOwn,
          ownReadsDuring: eOwn,
          memoryMB: { loaded: rssLoaded, after: rssAfter, steps: rssSteps, afterReads: rssReads, atRest: rssRest },
          failures,
          loop: loopRes?.json,
          churn: churnRes?.json,
          pass: ok,
        })}\n`,
      );
    }
    return ok ? 0 : 1;
  } catch (e) {
    if (!signalled) {
      const msg = (e as Error).message;
      process.stderr.write(`bench:daemon: ${msg}\n`);
      // A failed request says little by itself: the daemon's last words do.
      const tail = log.trimEnd().split('\n').slice(-15).join('\n');
      if (tail !== '' && !msg.includes(tail)) process.stderr.write(`daemon log (last lines):\n${tail}\n`);
    }
    return 2;
  } finally {
    // (i) writes its daemons' logs itself, as each stops.
    if (o.daemonLog !== undefined && o.sessions === undefined) writeFileSync(o.daemonLog, log);
    // After a signal, the handler reports and exits; wait for the same cleanup here.
    const problems = await env.cleanup();
    if (!signalled) for (const p of problems) process.stderr.write(`cleanup: ${p}\n`);
  }
}

// ---------------------------------------------------------------------------
/** What a --node-flag run says of itself, after the report's first line ('' without). */
function nodeFlagsNote(o: Options): string {
  return o.nodeFlags.length > 0 ? `  daemon's extra node flags: ${o.nodeFlags.join(' ')}` : '';
}

/** The daemon's environment: with --cpu-prof, MUP_CPU_PROFILE names its profile (src/daemon/profile.ts). */
function daemonEnv(o: Options): NodeJS.ProcessEnv {
  if (o.cpuProf === undefined) return process.env;
  makeDirs(o.cpuProf);
  return { ...process.env, MUP_CPU_PROFILE: join(o.cpuProf, `daemon-${Date.now()}-${process.pid}.cpuprofile`) };
}

/**
 * node's command line for the daemon under test: its own flags, then the
 * --node-flag ones. --cpu-prof is not node's (its SIGPROF interrupts the
 * verifier and BPF_PROG_LOAD gives up with EAGAIN): daemonEnv asks the
 * daemon to profile itself once it serves.
 */
function daemonArgv(o: Options, env: Env): string[] {
  return [
    ...DAEMON_NODE_FLAGS,
    ...o.nodeFlags,
    MUP_BIN,
    'daemon',
    '--config', env.configPath,
    '--instance', env.instance,
    '--netns', env.ns,
    '--socket', env.socket,
    '--state-file', env.stateFile,
    '--bpffs', env.bpffs,
    '--log-format', 'json',
  ];
}

// (i) A million sessions

/** (N3, TEID) policy i: N3 address 100.64.0.0 + i / TEIDS_PER_N3, TEID i % TEIDS_PER_N3 (/32). */
function teidPolicyEntry(i: number): Record<string, unknown> {
  const a = 0x64400000 + Math.floor(i / TEIDS_PER_N3);
  return {
    match: `${a >>> 24}.${(a >> 16) & 255}.${(a >> 8) & 255}.${a & 255}/32`,
    teid: `${i % TEIDS_PER_N3}/32`,
    sr_prefix: '2001:db9:1::/48',
    src_prefix: '2001:db8:ffff::/64',
  };
}

/** PE session i: UE 10.0.0.0 + i /32. */
function sessionEntry(i: number): Record<string, unknown> {
  const u = 0x0a000000 + i;
  return {
    ue: `${u >>> 24}.${(u >> 16) & 255}.${(u >> 8) & 255}.${u & 255}/32`,
    teid: `0x${(i + 1).toString(16)}`,
    qfi: 9,
    endpoint: '192.0.2.1',
    source: '198.51.100.1',
    isd: '2001:db8:2::/48',
    src_prefix: '2001:db8:ffff::/64',
  };
}

/** (i): how long after the batch load its VmRSS is read again (the daemon collects after a quiet second, and compacts: a few seconds). */
const QUIET_WAIT_MS = 5000;

async function sessionsPhase(o: Options, n: number, env: Env, loadAtStart: number[]): Promise<number> {
  const n3 = Math.ceil(n / TEIDS_PER_N3);
  const settings = { max_policies: n + n3, max_localsids: 64, max_sessions: n };
  const writeConfig = (withRules: boolean): number => {
    // JSON (which is YAML too), written a piece at a time: one string of a million entries is hundreds of MB.
    const parts: string[] = [`{"interfaces":[{"name":"mup0"}],"settings":${JSON.stringify(settings)},"policies":[`];
    if (withRules) for (let i = 0; i < n; i++) parts.push(`${i === 0 ? '' : ','}\n${JSON.stringify(teidPolicyEntry(i))}`);
    parts.push('],"localsids":[],"sessions":[');
    if (withRules) for (let i = 0; i < n; i++) parts.push(`${i === 0 ? '' : ','}\n${JSON.stringify(sessionEntry(i))}`);
    parts.push(']}\n');
    const text = parts.join('');
    writeFileSync(env.configPath, text);
    return Buffer.byteLength(text);
  };
  let log = '';
  const start = async (): Promise<{ d: ChildProcess; ms: number }> => {
    log = '';
    const args = daemonArgv(o, env);
    const s0 = performance.now();
    const d = spawn('node', args, { stdio: ['ignore', 'pipe', 'pipe'], env: daemonEnv(o) });
    env.daemon = d;
    d.stdout!.on('data', (c: Buffer) => (log += c.toString()));
    d.stderr!.on('data', (c: Buffer) => (log += c.toString()));
    for (;;) {
      if (d.exitCode !== null || d.signalCode !== null) throw new Error(`the daemon exited (${d.exitCode ?? d.signalCode}) before serving:\n${log.slice(-4000)}`);
      try {
        if ((await api(env.socket, 'GET', '/v1/status')).status === 200) return { d, ms: performance.now() - s0 };
      } catch {
        // not listening yet
      }
      if (performance.now() - s0 > 600_000) throw new Error(`no answer within 600 s:\n${log.slice(-4000)}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  /** The logs of the daemons stopped so far (--daemon-log: the file load's, then the batch load's). */
  const logs: string[] = [];
  const stop = async (d: ChildProcess): Promise<void> => {
    agent.destroy();
    d.kill('SIGTERM');
    await new Promise<void>((r) => (d.exitCode !== null || d.signalCode !== null ? r() : d.once('exit', () => r())));
    logs.push(log);
    log = '';
    await run('node', [MUP_BIN, 'teardown', '--instance', env.instance, '--bpffs', env.bpffs, '--netns', env.ns]);
    rmSync(env.stateFile, { force: true });
  };
  const tables = async (): Promise<{ policies: number; sessions: number }> => {
    const st = JSON.parse((await api(env.socket, 'GET', '/v1/status')).text) as { tables: { policies: { entries: number }; sessions?: { entries: number } } };
    return { policies: st.tables.policies.entries, sessions: st.tables.sessions?.entries ?? NaN };
  };
  const breakdown = (): string => {
    const l = logLines(log).find((x) => x.msg === 'data plane loaded');
    return `daemon: ms ${JSON.stringify(l?.['ms'] ?? {})}, memory MB ${JSON.stringify(l?.['memory'] ?? {})}`;
  };
  try {
    const failures: string[] = [];
    progress0(`(i) writing ${n} (N3, TEID) policies + ${n} sessions as a JSON config`);
    const bytes = writeConfig(true);
    // 1. From the file.
    progress0(`(i) loading them from the file (${(bytes / 1e6).toFixed(0)} MB)`);
    const file = await start();
    const fileRss = procStatus(file.d.pid!);
    const fileCpu = procCpuSeconds(file.d.pid!);
    const fileTables = await tables();
    const fileBreakdown = breakdown();
    // Said now: the batch load that follows can fail and end the run before the report.
    progress0(`(i) from the file: API answered after ${(file.ms / 1000).toFixed(3)} s; tables ${JSON.stringify(fileTables)}; VmRSS ${(fileRss['VmRSS'] ?? NaN).toFixed(1)} MB; ${fileBreakdown}`);
    await stop(file.d);
    // 2. Through /v1/batch, into a daemon started with none.
    writeConfig(false);
    progress0(`(i) the same through /v1/batch, ${BATCH_OPS} operations a request`);
    const empty = await start();
    const cpu0 = procCpuSeconds(empty.d.pid!);
    const t0 = performance.now();
    for (const [kind, entry] of [['policy', teidPolicyEntry], ['session', sessionEntry]] as const) {
      for (let at = 0; at < n; at += BATCH_OPS) {
        const ops = Array.from({ length: Math.min(BATCH_OPS, n - at) }, (_, k) => ({ op: 'add', [kind]: entry(at + k) }));
        const r = await api(env.socket, 'POST', '/v1/batch', { operations: ops });
        if (r.status !== 200) {
          failures.push(`POST /v1/batch (${kind} ${at}..): ${r.status} ${r.text.slice(0, 300)}`);
          break;
        }
      }
    }
    const batchS = (performance.now() - t0) / 1000;
    const batchCpu = procCpuSeconds(empty.d.pid!) - cpu0;
    const batchRss = procStatus(empty.d.pid!);
    // Again once the daemon has had its quiet second (collectAfterBatches, releaseMemoryWhenQuiet): what the
    // rules hold, apart from the batches' garbage not collected yet when the last answer came.
    const batchTables = await tables();
    await new Promise((r) => setTimeout(r, QUIET_WAIT_MS));
    const quietRss = procStatus(empty.d.pid!);
    // 3. An edited reload with all of them as API rules on top of the file (one local SID added to it): the
    // rule set made again with the API's changes on top, diffed, and the state file written whole for the new
    // file, with the loop and a status poller watched as (e)'s reload (issue 19: no long turn).
    progress0(`(i) an edited reload with ${2 * n} API rules on top of the file, loop and status watched`);
    writeFileSync(env.configPath, readFileSync(env.configPath, 'utf8').replace('"localsids":[]', `"localsids":[${JSON.stringify(localSidEntry(0))}]`));
    const reloadLoop = await watchLoop(env.socket);
    const tReload = performance.now();
    const reloaded = await api(env.socket, 'POST', '/v1/reload');
    const reloadS = (performance.now() - tReload) / 1000;
    const reloadSeen = await reloadLoop.stop();
    if (reloaded.status !== 200 || !/"added":1\b/.test(reloaded.text)) failures.push(`POST /v1/reload (edited): ${reloaded.status} ${reloaded.text.slice(0, 300)}`);
    for (let i = 0; i < 40 && !logLines(log).some((x) => x.msg === 'reloaded'); i++) await new Promise((r) => setTimeout(r, 50));
    const reloadPhases = JSON.stringify(logLines(log).filter((x) => x.msg === 'reloaded').at(-1)?.['phases'] ?? 'not in its log');
    const stateBytes = statSync(env.stateFile, { throwIfNoEntry: false })?.size ?? NaN;
    // 4. `mup config save` of them: the running config made and read again, checked against the running rules,
    // written over the config file, the state file emptied; the loop and status watched as the reload's.
    progress0(`(i) POST /v1/config/save of the ${2 * n} API rules into the config file, loop and status watched`);
    const saveLoop = await watchLoop(env.socket);
    const tSave = performance.now();
    // A save with no answer within the client's 60 s is a failure of the run, not its end: the lines above stand.
    const saved = await api(env.socket, 'POST', '/v1/config/save').catch((e: Error) => ({ status: 0, text: e.message }));
    const saveS = (performance.now() - tSave) / 1000;
    const saveSeen = await saveLoop.stop();
    if (saved.status !== 200 || !new RegExp(`"saved":${2 * n}\\b`).test(saved.text)) failures.push(`POST /v1/config/save: ${saved.status} ${saved.text.slice(0, 300)}`);
    const savedBytes = statSync(env.configPath, { throwIfNoEntry: false })?.size ?? NaN;
    await stop(empty.d);

    const fileS = file.ms / 1000;
    const rssF = fileRss['VmRSS'] ?? NaN;
    const rssB = batchRss['VmRSS'] ?? NaN;
    const all = (t: { policies: number; sessions: number }): boolean => t.policies === n && t.sessions === n;
    const out = [
      `bench:daemon (i)  ${new Date().toISOString()}  ${cpus().length}x ${cpus()[0]?.model ?? '?'}  Linux ${release()}  node ${process.version}  ` +
        `load average at start ${loadAtStart.map((x) => x.toFixed(1)).join(' ')}, at the end ${loadavg().map((x) => x.toFixed(1)).join(' ')} (other work on the host slows every figure)${nodeFlagsNote(o)}`,
      `${n} (N3, TEID) policies on ${n3} N3 addresses + ${n} PE sessions; settings ${JSON.stringify(settings)}`,
      `from a ${(bytes / 1e6).toFixed(0)} MB JSON config: API answered after ${fileS.toFixed(3)} s (the daemon's CPU to then, all its threads: ${fileCpu.toFixed(2)} s); tables ${JSON.stringify(fileTables)}; VmRSS ${rssF.toFixed(1)} MB (RssAnon ${(fileRss['RssAnon'] ?? NaN).toFixed(1)})`,
      `    ${fileBreakdown}`,
      `through /v1/batch (${Math.ceil(n / BATCH_OPS) * 2} requests of up to ${BATCH_OPS}): ${batchS.toFixed(3)} s (the daemon's CPU meanwhile, all its threads: ${batchCpu.toFixed(2)} s); tables ${JSON.stringify(batchTables)}; VmRSS ${rssB.toFixed(1)} MB (RssAnon ${(batchRss['RssAnon'] ?? NaN).toFixed(1)}) right after the last answer, ${(quietRss['VmRSS'] ?? NaN).toFixed(1)} MB ${QUIET_WAIT_MS / 1000} s later (the daemon's collection after a quiet second)`,
      `an edited reload (one local SID added to the file) with those ${2 * n} API rules on top: ${reloadS.toFixed(3)} s; the daemon's phases, ms: ${reloadPhases}; ` +
        `state file ${(stateBytes / 1e6).toFixed(1)} MB; the daemon's loop delay over it p50 ${f2(reloadSeen.loop.p50)} p99 ${f2(reloadSeen.loop.p99)} max ${f2(reloadSeen.loop.max)} ms (${ticksText(reloadSeen.windowMs)})`,
      `POST /v1/config/save of those API rules into the config file: ${saveS.toFixed(3)} s; the file ${(savedBytes / 1e6).toFixed(1)} MB; ` +
        `the daemon's loop delay over it p50 ${f2(saveSeen.loop.p50)} p99 ${f2(saveSeen.loop.p99)} max ${f2(saveSeen.loop.max)} ms (${ticksText(saveSeen.windowMs)})`,
      `failed requests: ${failures.length}${failures.length > 0 ? ` (first: ${failures[0]})` : ''}`,
      '',
      'target                                          measured   result',
      `load from the file < ${TARGETS.sessionsLoadSeconds} s                      ${fileS.toFixed(3).padStart(8)} s  ${pf(fileS < TARGETS.sessionsLoadSeconds && all(fileTables))}`,
      `load through /v1/batch < ${TARGETS.sessionsLoadSeconds} s                  ${batchS.toFixed(3).padStart(8)} s  ${pf(batchS < TARGETS.sessionsLoadSeconds && all(batchTables) && failures.length === 0)}`,
      `VmRSS < ${TARGETS.sessionsRssMB} MB after the file load             ${rssF.toFixed(1).padStart(8)} MB ${pf(rssF < TARGETS.sessionsRssMB)}`,
      `VmRSS < ${TARGETS.sessionsRssMB} MB after the batch load            ${rssB.toFixed(1).padStart(8)} MB ${pf(rssB < TARGETS.sessionsRssMB)}`,
      ...loopTargetLines('reload of API rules', reloadSeen),
      ...loopTargetLines('config save of API rules', saveSeen),
    ];
    process.stdout.write(`${out.join('\n')}\n`);
    if (o.json) process.stdout.write(`${JSON.stringify({ sessions: n, nodeFlags: o.nodeFlags, file: { seconds: fileS, cpuSeconds: fileCpu, tables: fileTables, memoryMB: fileRss }, batch: { seconds: batchS, cpuSeconds: batchCpu, tables: batchTables, memoryMB: batchRss, quietMemoryMB: quietRss }, reload: { seconds: reloadS, phases: reloadPhases, stateBytes: stateBytes, loop: seenJson(reloadSeen) }, save: { seconds: saveS, fileBytes: savedBytes, loop: seenJson(saveSeen) }, failures })}\n`);
    const ok =
      fileS < TARGETS.sessionsLoadSeconds && batchS < TARGETS.sessionsLoadSeconds && rssF < TARGETS.sessionsRssMB && rssB < TARGETS.sessionsRssMB && all(fileTables) && all(batchTables) && failures.length === 0 && loopSeenOk(reloadSeen) && loopSeenOk(saveSeen);
    return ok ? 0 : 1;
  } finally {
    // Written whatever happens: a daemon that failed to start or to load is when its log is wanted (it is in
    // `log` then, not stopped).
    if (o.daemonLog !== undefined) writeFileSync(o.daemonLog, [...logs, log].join(''));
  }
}

function progress0(what: string): void {
  process.stderr.write(`bench:daemon: ${what}\n`);
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`bench:daemon: ${(e as Error).message}\n`);
    process.exit(2);
  },
);
