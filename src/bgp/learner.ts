/**
 * The learner: reads the sidecar gobgpd's table through a long-lived
 * `gobgp monitor global rib -j --current` and keeps the routes, with the
 * hold-down (docs/bgp.md "Hold-down"):
 * - a withdrawal (stale or not) keeps the route for `holdDownMs`, then it
 *   goes; a re-advertisement in the meantime cancels that;
 * - each (re)start of the monitor begins with the whole table (--current,
 *   the first line): routes held from before that are not in it are
 *   withdrawn the same way (held, then gone);
 * - a table too large for one gRPC message (gobgp's 4 MiB limit: about
 *   6,000 MUP routes) cannot come with --current: from then on the monitor
 *   runs without it, and once it is connected the table is read with
 *   `gobgp global rib -a mup-ipv4|mup-ipv6 -j` (streamed per destination);
 *   the monitor's lines of meanwhile are applied after the table;
 * - gobgp's own failure line (`{"error": ...}` on stdout) is a reason, not
 *   a table: nothing is withdrawn for it;
 * - a table read while the sidecar has not every peer's table yet (gobgpd
 *   just restarted: empty until its sessions are back) is not the whole
 *   table: the routes it lacks are kept until the peers have sent
 *   End-of-RIB (`peersReady`) or the graceful-restart time has passed, and
 *   only those still missing then are withdrawn (held, then gone); the
 *   learner is synced only then;
 * - the monitor dying (gobgpd stopped or restarted) changes nothing: the
 *   routes stay, the monitor is started again with backoff.
 * Every change calls `onChange` (coalesced: one call per turn of the event
 * loop), with the monotonic time its first line was read, for the
 * route-to-data-plane latency.
 */
// Drawn before this module makes a thread, which takes the same seed (src/host/hash-seed.ts).
import '../host/hash-seed.js';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { apiText, type GobgpApi } from './gobgpd.js';
import type { FromMonitor } from './monitor-worker.js';
import { describeRoute, ROUTE_TYPES, type DecodedLine, type MupRoute, type Rejected, type RouteType } from './routes.js';

/** USER_HZ: the unit of /proc/PID/stat's utime and stime (100 on Linux for every architecture the daemon runs on). */
const CLK_TCK = 100;

export interface LearnerOptions {
  readonly api: GobgpApi;
  readonly holdDownMs: number;
  /** Called after changes, coalesced; `readAt`: performance.now() when the first line of the batch was read. */
  readonly onChange: (readAt: number) => void;
  /** The first table of the first monitor has been read (and applied by onChange before this). */
  readonly onSynced?: () => void;
  readonly onRejected?: (r: Rejected) => void;
  readonly onMonitor?: (event: 'up' | 'down', detail: string) => void;
  /** Backoff of monitor restarts: first, max (ms). */
  readonly backoffMs?: readonly [number, number];
  /** The gobgp binary; default gobgp. */
  readonly gobgp?: string;
  /**
   * Starts the reader of one monitor run, or of one table read (default:
   * the monitor-worker.ts thread). Tests give a fake that posts decoded
   * lines, so the learner is tested without gobgp or a thread.
   */
  readonly reader?: (argv: string[], format: ReaderFormat) => MonitorReader;
  /** Is the monitor process `pid` connected to gobgpd's API (default: its TCP socket, from /proc)? Tests fake it. */
  readonly monitorWatching?: (pid: number, api: GobgpApi) => boolean;
  /** ms from the monitor's connection to the table read (its watch registered in gobgpd meanwhile); default TABLE_DELAY_MS. */
  readonly tableDelayMs?: number;
  /**
   * Has the sidecar every peer's table: each neighbor established, and
   * End-of-RIB received in each family with graceful restart? Asked after
   * each table read, again while it says no (PEERS_POLL_MS, doubling): until then (or
   * `peersWaitMs`) the routes the table lacks are kept. Absent: they are
   * withdrawn at once.
   */
  readonly peersReady?: () => Promise<boolean>;
  /** Tests: TABLE_READ_TIMEOUT_MS. */
  readonly tableReadTimeoutMs?: number;
  /** Tests: CONNECT_TIMEOUT_MS. */
  readonly connectTimeoutMs?: number;
  /** The longest wait for peersReady (the sidecar's graceful-restart time), ms. */
  readonly peersWaitMs?: number;
  /** What the learner has to say besides up and down (the wait for the peers). */
  readonly onNote?: (msg: string) => void;
}

/** What the learner uses of the reader thread of a monitor run (a Worker; a fake in tests). */
export type MonitorReader = Pick<Worker, 'on' | 'postMessage' | 'terminate'>;
/** 'lines': `gobgp monitor` (a JSON array of paths per line); 'rib': `gobgp global rib -j` (one object of destinations). */
export type ReaderFormat = 'lines' | 'rib';

/** The MUP families a table read covers, in turn. */
const TABLE_FAMILIES = ['mup-ipv4', 'mup-ipv6'] as const;
/**
 * From the monitor's TCP connection to the table read. gobgp sends its
 * WatchEvent request as soon as it is connected, and gobgpd registers the
 * watch when it takes the request; a change between that and the read is
 * in the table, one after it on the monitor. A watch registered later than
 * this after the connection would miss a change made in between (gobgp
 * gives no sign of the registration without --current).
 */
export const TABLE_DELAY_MS = 250;
/**
 * peersReady is asked again after PEERS_POLL_MS while it says no, the wait
 * doubling up to PEERS_POLL_MAX_MS: each ask is a `gobgp neighbor -j`
 * process, and a wait can last the whole bulk load of a starting sidecar
 * (15 s in bench:bgp's leg 5, where asking every 500 ms took CPU from the
 * load on this 2-core host).
 */
export const PEERS_POLL_MS = 500;
export const PEERS_POLL_MAX_MS = 4000;
/** The longest a table read of one family may take (a million routes: about 700 MB of JSON from the CLI). */
export const TABLE_READ_TIMEOUT_MS = 600_000;
/** gobgpd's answer for a family it does not carry (GoBGP's getRib: "address family: ... not supported"). */
const NOT_CARRIED = /address family: .* not supported/;
/** How long the monitor may take to connect before its run is given up. */
const CONNECT_TIMEOUT_MS = 10_000;
/** gobgp's message when the table does not fit one gRPC message (client's 4 MiB, or gobgpd's 256 MiB send limit). */
const TOO_LARGE = /ResourceExhausted|message larger than max/;

/** A monitor run, and (without --current) the reading of its table. */
interface Run {
  readonly worker: MonitorReader;
  pid?: number;
  /** gobgp's error line, or the table read's failure: the reason given when the run ends. */
  error?: string;
  /** Without --current: the table is read; lines of the monitor wait here until it is. */
  table?: { readonly buffered: { d: DecodedLine; readAt: number }[]; readonly present: Set<string>; reader?: MonitorReader; connectTimer?: NodeJS.Timeout; startedAt?: number };
}

/** The routes a table lacked, while the sidecar waits for its peers' tables. */
interface AbsentWait {
  readonly keys: Set<string>;
  readonly since: number;
  /** ms waited before this wait by waits it replaced. */
  readonly spent: number;
  timer?: NodeJS.Timeout;
  /** peersReady answers so far. */
  asked: number;
}

interface Held {
  route: MupRoute;
  /** Withdrawn (or missing from a new table) at this time; the timer deletes it. */
  timer?: NodeJS.Timeout;
  since?: number;
}

export interface LearnerCounts {
  readonly received: Record<RouteType, number>;
  readonly held: Record<RouteType, number>;
  readonly malformed: number;
}

export class Learner {
  readonly #o: LearnerOptions;
  readonly #table = new Map<string, Held>();
  /** #table's entries without and with a hold-down timer, per type (counts()). */
  readonly #received = Object.fromEntries(ROUTE_TYPES.map((t) => [t, 0])) as Record<RouteType, number>;
  readonly #held = Object.fromEntries(ROUTE_TYPES.map((t) => [t, 0])) as Record<RouteType, number>;
  /** The running monitor: its reader thread, its gobgp's pid, its table read. */
  #child: Run | undefined;
  /** The table came too large for --current once: read it with `global rib` from then on. */
  #largeTable = false;
  #stopped = false;
  #restartTimer: NodeJS.Timeout | undefined;
  #backoff: number;
  #pending: number | undefined;
  /** Keys whose route changed (came, changed, went) since the last takeChanged(): incremental resolution. */
  #dirty = new Set<string>();
  /** The monitor started and its first line (the table) is not read yet. */
  #awaitingTable = true;
  #synced = false;
  #malformed = 0;
  /**
   * Our own routes (locally originated: no source-id) as the monitor shows
   * them, by key: what the sidecar advertises for us, for the 30-s
   * re-advertisement (no read of the whole table). Valid while the monitor
   * is up: from a table read whole to the end of its run.
   */
  readonly #own = new Map<string, MupRoute>();
  /** Routes a table lacked, kept until the sidecar has every peer's table (see peersReady). */
  #absent: AbsentWait | undefined;
  /** ms waited by waits that were cut short (a run's end, a newer table) and not completed since: counted against the next wait's limit. */
  #absentSpent: number | undefined;
  /** Monitor (re)starts, lines read. */
  readonly stats = { monitorStarts: 0, lines: 0, up: false, lastChange: undefined as Date | undefined, lastError: undefined as string | undefined };
  /**
   * Where reading time goes (docs/bgp.md "Where the time goes"), since the
   * daemon started: stdout reads and bytes of the monitor, routes decoded,
   * ms decoding lines (the reader thread), ms updating the table with them
   * (the main thread), wall-clock ms (Date.now) of the first line with a
   * learned route and of the last line read.
   */
  readonly work = { reads: 0, bytes: 0, routes: 0, decodeMs: 0, learnMs: 0, flushes: 0, firstRouteAt: undefined as number | undefined, lastLineAt: undefined as number | undefined };

  constructor(o: LearnerOptions) {
    this.#o = o;
    this.#backoff = o.backoffMs?.[0] ?? 200;
  }

  /** The routes as the data plane should see them: advertised ones and withdrawn ones still held. */
  routes(): MupRoute[] {
    return [...this.#table.values()].map((h) => h.route);
  }

  /** The route of this key now (advertised, or withdrawn and still held), or undefined. */
  route(key: string): MupRoute | undefined {
    return this.#table.get(key)?.route;
  }

  /** Learned routes a table lacked, kept now while the sidecar waits for its peers' tables (relearned or withdrawn ones leave the count). */
  get keptForPeers(): number {
    return this.#absent?.keys.size ?? 0;
  }

  /** Our own routes in the sidecar as the monitor shows them; undefined while no table has been read in this run. */
  ownRoutes(): MupRoute[] | undefined {
    return this.stats.up ? [...this.#own.values()] : undefined;
  }

  /** The keys whose route changed since the last call (a route's object is kept until it changes). */
  takeChanged(): Set<string> {
    const d = this.#dirty;
    this.#dirty = new Set();
    return d;
  }

  get synced(): boolean {
    return this.#synced;
  }

  /** Routes received (advertised) and held (withdrawn, in their hold-down) per type: kept as the table changes (a scrape reads them). */
  counts(): LearnerCounts {
    return { received: { ...this.#received }, held: { ...this.#held }, malformed: this.#malformed };
  }

  start(): void {
    this.#spawn();
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#restartTimer);
    clearTimeout(this.#absent?.timer);
    for (const h of this.#table.values()) clearTimeout(h.timer);
    const c = this.#child;
    if (c !== undefined) {
      this.#stopTable(c);
      kill(c.worker);
    }
  }

  /** setpriv: the kernel kills gobgp when its parent thread dies (the reader thread, or the daemon with it), however it dies. */
  #gobgpArgv(...args: string[]): string[] {
    return ['setpriv', '--pdeathsig', 'KILL', this.#o.gobgp ?? 'gobgp', '-u', this.#o.api.host, '-p', String(this.#o.api.port), ...args];
  }

  #reader(argv: string[], format: ReaderFormat): MonitorReader {
    // Read and decoded in a thread of its own: the table writes of the main thread do not stop the stream (docs/bgp.md "Where the time goes").
    return this.#o.reader?.(argv, format) ?? new Worker(new URL('./monitor-worker.js', import.meta.url), { workerData: { argv, format } });
  }

  #spawn(): void {
    if (this.#stopped) return;
    const argv = this.#gobgpArgv('monitor', 'global', 'rib', '-j', ...(this.#largeTable ? [] : ['--current']));
    const me: Run = { worker: this.#reader(argv, 'lines') };
    if (this.#largeTable) me.table = { buffered: [], present: new Set() };
    const worker = me.worker;
    this.#child = me;
    this.#awaitingTable = true;
    this.stats.monitorStarts++;
    let ended = false;
    const end = (code: number | null, signal: string | null, stderr: string): void => {
      if (ended) return;
      ended = true;
      this.#stopTable(me);
      if (this.#child === me) this.#child = undefined;
      // A wait for the peers belongs to its run: ended here, it would withdraw what it kept with no monitor
      // running (or in the middle of the next run's table read). The next table counts them absent again.
      if (this.#absent !== undefined) this.#absentSpent = this.#endWait();
      const was = this.stats.up;
      this.stats.up = false;
      if (this.#stopped) return;
      const detail = exitDetail(stderr, me.error);
      const why = `gobgp monitor against ${apiText(this.#o.api)} exited (${signal ?? `code ${code}`})${detail === '' ? '' : `: ${detail}`}`;
      this.stats.lastError = why;
      if (!this.#largeTable && TOO_LARGE.test(detail)) {
        // Not a failure to back off from: the same monitor would fail the same way.
        this.#largeTable = true;
        this.#o.onMonitor?.('down', `${why}; the table is too large for one message: reading it with \`gobgp global rib -j\` beside a monitor without --current from now on`);
        this.#restartTimer = setTimeout(() => this.#spawn(), 0);
        this.#restartTimer.unref();
        return;
      }
      if (was || this.stats.monitorStarts === 1) this.#o.onMonitor?.('down', `${why}; the data plane is kept as it is, retrying`);
      this.#restartTimer = setTimeout(() => this.#spawn(), this.#backoff);
      this.#restartTimer.unref();
      this.#backoff = Math.min(this.#backoff * 2, this.#o.backoffMs?.[1] ?? 5000);
    };
    worker.on('message', (m: FromMonitor) => {
      // After stop(): a line still on its way is not a table (it would sync, and start the daemon's sweep after its stop).
      if (ended || this.#stopped) return;
      if (m.t === 'spawned') {
        if (m.pid !== undefined) me.pid = m.pid;
        if (me.table !== undefined) this.#readTableOnceWatching(me);
      } else if (m.t === 'lines') {
        const readAt = this.#counted(m);
        for (const d of m.lines) {
          if (d.error !== undefined) me.error = d.error;
          else if (me.table !== undefined) me.table.buffered.push({ d, readAt });
          else if (d.notPaths !== undefined && this.#awaitingTable) {
            // The first line is the table: one that is no list of paths (garbage, a line cut short as gobgp
            // died) is no table. Taken as an empty one, it withdrew every learned route; the run is given up.
            this.#rejectedLine(d);
            this.#abandon(me, `the monitor's first line is not its table (${d.notPaths})`);
            break;
          } else this.#line(d, readAt);
        }
      } else {
        end(m.code, m.signal, m.stderr);
      }
    });
    worker.on('error', (e) => end(null, null, `reader thread: ${e.message}`));
    worker.on('exit', (code) => end(null, null, `reader thread exited (${code})`));
  }

  /** A reader's chunk counted in `work`; its read time on this thread's clock (route -> map write latency). */
  #counted(m: Extract<FromMonitor, { t: 'lines' }>): number {
    this.work.reads++;
    this.work.bytes += m.bytes;
    this.work.decodeMs += m.decodeMs;
    return m.readAt - performance.timeOrigin;
  }

  /** Give the run up (its monitor killed): `why` is the reason its end gives. */
  #abandon(me: Run, why: string): void {
    me.error = why;
    this.#stopTable(me);
    me.worker.postMessage({ t: 'kill' });
    // Its thread ended too if the kill was not taken: then the run ends by the thread's 'exit'.
    setTimeout(() => {
      if (this.#child === me) void me.worker.terminate();
    }, 1000).unref();
  }

  #stopTable(me: Run): void {
    const t = me.table;
    if (t === undefined) return;
    clearTimeout(t.connectTimer);
    const r = t.reader;
    t.reader = undefined;
    if (r !== undefined) kill(r);
  }

  /** Without --current: once the monitor is connected (and a moment more), read the table, family by family. */
  #readTableOnceWatching(me: Run): void {
    const t = me.table!;
    const watching = this.#o.monitorWatching ?? monitorConnected;
    const limit = this.#o.connectTimeoutMs ?? CONNECT_TIMEOUT_MS;
    const since = performance.now();
    const poll = (): void => {
      if (this.#child !== me || this.#stopped) return;
      if (me.pid !== undefined && watching(me.pid, this.#o.api)) {
        t.connectTimer = setTimeout(() => this.#readFamily(me, 0), this.#o.tableDelayMs ?? TABLE_DELAY_MS);
      } else if (performance.now() - since > limit) {
        this.#abandon(me, `the monitor did not connect to ${apiText(this.#o.api)} within ${limit / 1000} s`);
      } else {
        t.connectTimer = setTimeout(poll, 20);
      }
      t.connectTimer?.unref();
    };
    poll();
  }

  #readFamily(me: Run, i: number): void {
    const t = me.table!;
    if (this.#child !== me || this.#stopped) return;
    if (i === TABLE_FAMILIES.length) {
      this.#tableRead(me);
      return;
    }
    if (t.startedAt === undefined) {
      t.startedAt = performance.now();
      this.#own.clear();
    }
    const family = TABLE_FAMILIES[i]!;
    const reader = this.#reader(this.#gobgpArgv('global', 'rib', '-a', family, '-j'), 'rib');
    t.reader = reader;
    let error: string | undefined;
    let notCarried = false;
    let done = false;
    // A read that hangs would leave the learner never up and never synced, the monitor's lines piling up.
    const limit = this.#o.tableReadTimeoutMs ?? TABLE_READ_TIMEOUT_MS;
    const deadline = setTimeout(() => finish(`no end within ${limit / 1000} s`), limit);
    deadline.unref();
    const finish = (why: string | undefined): void => {
      if (done) return;
      done = true;
      clearTimeout(deadline);
      if (t.reader !== reader || this.#child !== me) return; // the run ended meanwhile
      if (why === undefined) {
        t.reader = undefined;
        this.#readFamily(me, i + 1);
      } else {
        // The reader still held: #abandon kills it (a read that hangs is still running).
        this.#abandon(me, `reading the table (gobgp global rib -a ${family} -j) failed: ${why}`);
      }
    };
    reader.on('message', (m: FromMonitor) => {
      if (done || t.reader !== reader) return;
      if (m.t === 'lines') {
        const readAt = this.#counted(m);
        for (const d of m.lines) {
          // A family the sidecar does not carry (global afi-safis without it) has no routes: an empty table, not a failure.
          if (d.error !== undefined && NOT_CARRIED.test(d.error)) notCarried = true;
          else if (d.error !== undefined) error ??= d.error;
          else this.#line(d, readAt, t.present);
        }
      } else if (m.t === 'exit') {
        const detail = exitDetail(m.stderr, error);
        finish((m.code === 0 || notCarried) && error === undefined ? undefined : `exited (${m.signal ?? `code ${m.code}`})${detail === '' ? '' : `: ${detail}`}`);
      }
    });
    reader.on('error', (e) => finish(`reader thread: ${e.message}`));
    reader.on('exit', (code) => finish(`reader thread exited (${code}) before gobgp did`));
  }

  /** The whole table is read: what it lacks is withdrawn, then the monitor's lines of meanwhile apply, and from now on as they come. */
  #tableRead(me: Run): void {
    const t = me.table!;
    me.table = undefined;
    const ms = performance.now() - (t.startedAt ?? performance.now());
    const how = `with \`gobgp global rib -j\` (${t.present.size} learned routes in ${ms.toFixed(0)} ms; ${t.buffered.length} monitor lines of meanwhile applied after them)`;
    if (this.#tableComplete(t.present, how)) this.#changed(performance.now());
    for (const { d, readAt } of t.buffered) this.#line(d, readAt);
    this.#afterRead();
  }

  /** CPU ms the running `gobgp monitor` process has used (utime + stime), or undefined. */
  monitorCpuMs(): number | undefined {
    const pid = this.#child?.pid;
    if (pid === undefined) return undefined;
    try {
      // setpriv execs gobgp: the same pid. Fields after the command's ")": utime, stime are the 12th and 13th.
      const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ');
      return f === undefined ? undefined : ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
    } catch {
      return undefined;
    }
  }

  /** `present`: the line is part of a table being read; its learned routes go there. */
  #line(d: DecodedLine, readAt: number, present?: Set<string>): void {
    const t0 = performance.now();
    this.stats.lines++;
    this.work.lastLineAt = Date.now();
    try {
      this.#read(d, readAt, present);
    } finally {
      this.work.learnMs += performance.now() - t0;
    }
  }

  /** A line's rejected paths, counted and told (onRejected). */
  #rejectedLine(d: DecodedLine): readonly Rejected[] {
    for (const r of d.rejected) {
      this.#malformed++;
      this.#o.onRejected?.(r);
    }
    return d.rejected;
  }

  #read(d: DecodedLine, readAt: number, present?: Set<string>): void {
    // A learned path rejected with its key (only fields outside the key are bad) has replaced or withdrawn the
    // route of that key in gobgpd: it is that route's withdrawal here too, else the old route's rule would stay
    // installed until the monitor restarts (its later withdrawal carries the same bad fields).
    let gone: string[] | undefined;
    for (const r of this.#rejectedLine(d)) {
      if (r.key !== undefined && r.learned === true) (gone ??= []).push(r.key);
    }
    // Our own routes (locally originated: no source-id) are what we advertise, not what we learn.
    const learned = d.routes.filter((r) => r.sourceId !== undefined || r.neighbor !== undefined);
    if (present === undefined && this.#awaitingTable) this.#own.clear(); // the --current table: ours are in it
    if (learned.length < d.routes.length) {
      for (const r of d.routes) {
        if (r.sourceId !== undefined || r.neighbor !== undefined) continue;
        if (r.withdrawal) this.#own.delete(r.key);
        else this.#own.set(r.key, r);
      }
    }
    this.work.routes += learned.length;
    if (learned.length > 0) this.work.firstRouteAt ??= this.work.lastLineAt;
    let changed = false;
    if (present !== undefined) {
      for (const r of learned) if (!r.withdrawal) present.add(r.key);
    } else if (this.#awaitingTable) {
      // The first line is the whole table: anything held from before that is not in it is withdrawn (held, then gone).
      changed = this.#tableComplete(new Set(learned.filter((r) => !r.withdrawal).map((r) => r.key)));
    }
    // Before the line's routes, so that a good path of the same key in the same line wins.
    for (const key of gone ?? []) {
      const h = this.#table.get(key);
      if (h !== undefined && h.timer === undefined) {
        this.#withdraw(key, h);
        changed = true;
      }
    }
    for (const r of learned) {
      const h = this.#table.get(r.key);
      if (r.withdrawal) {
        if (h !== undefined && h.timer === undefined) {
          this.#withdraw(r.key, h);
          changed = true;
        }
        continue;
      }
      if (h !== undefined) {
        clearTimeout(h.timer);
        (h.timer === undefined ? this.#received : this.#held)[h.route.type]--;
      }
      this.#table.set(r.key, { route: r });
      this.#received[r.type]++;
      this.#absent?.keys.delete(r.key);
      this.#dirty.add(r.key);
      changed = true;
    }
    if (changed) this.#changed(readAt);
    if (present === undefined) this.#afterRead();
  }

  /**
   * The table is read whole (`present`: its learned routes): the monitor is
   * up, and what was learned before and is not there is withdrawn, at once
   * or once the sidecar has every peer's table (peersReady).
   */
  #tableComplete(present: ReadonlySet<string>, how?: string): boolean {
    this.#awaitingTable = false;
    this.stats.up = true;
    this.#backoff = this.#o.backoffMs?.[0] ?? 200;
    this.#o.onMonitor?.('up', how === undefined ? `reading the table of ${apiText(this.#o.api)}` : `read the table of ${apiText(this.#o.api)} ${how}`);
    const absent = new Set<string>();
    for (const [key, h] of this.#table) if (!present.has(key) && h.timer === undefined) absent.add(key);
    // A wait of an earlier table is replaced: what it kept and this table lacks too is in `absent` (never
    // withdrawn). The time it waited counts against the limit: a sidecar restarting over and over keeps
    // nothing for good (the time with no monitor running does not count: the data plane stays as it is then).
    const spent = this.#absent === undefined ? (this.#absentSpent ?? 0) : this.#endWait();
    this.#absentSpent = undefined;
    // Asked even when the table lacks nothing: at a daemon start the pinned entries of the earlier run are
    // not in this table of routes, and the sweep of those not learned again waits for the sync.
    if (this.#o.peersReady === undefined) return this.#withdrawAbsent(absent);
    const wait = { keys: absent, since: performance.now(), spent, asked: 0 };
    this.#absent = wait;
    void this.#askPeers(wait);
    return false;
  }

  /** End the wait for the peers without withdrawing anything; the ms it (and those it replaced) waited. */
  #endWait(): number {
    const w = this.#absent!;
    clearTimeout(w.timer);
    this.#absent = undefined;
    return w.spent + (performance.now() - w.since);
  }

  #withdrawAbsent(keys: Iterable<string>): boolean {
    let changed = false;
    for (const key of keys) {
      const h = this.#table.get(key);
      if (h !== undefined && h.timer === undefined) {
        this.#withdraw(key, h);
        changed = true;
      }
    }
    return changed;
  }

  /** Ask whether the sidecar has its peers' tables; again later while it has not, until peersWaitMs. */
  async #askPeers(wait: AbsentWait): Promise<void> {
    let ready: boolean;
    try {
      ready = await this.#o.peersReady!();
    } catch {
      ready = false;
    }
    if (this.#absent !== wait || this.#stopped) return; // a newer table, or stopped
    wait.asked++;
    const waited = wait.spent + (performance.now() - wait.since);
    const limit = this.#o.peersWaitMs ?? 120_000;
    if (!ready && waited < limit) {
      if (wait.asked === 1) {
        this.#o.onNote?.(
          `the sidecar does not have every peer's table yet (a session down, or no End-of-RIB): the ${wait.keys.size} learned routes its table lacks (and, at a start, the entries of the earlier run) are kept until it has, at most ${limit / 1000} s (graceful_restart)`,
        );
      }
      wait.timer = setTimeout(() => void this.#askPeers(wait), Math.min(PEERS_POLL_MS * 2 ** (wait.asked - 1), PEERS_POLL_MAX_MS));
      wait.timer.unref();
      return;
    }
    this.#absent = undefined;
    const n = wait.keys.size;
    if (wait.asked > 1 || !ready) {
      this.#o.onNote?.(
        ready
          ? `the sidecar has every peer's table (${(waited / 1000).toFixed(1)} s): ${n} routes still missing from it are withdrawn (held for the hold-down)`
          : `no End-of-RIB from every peer of the sidecar within ${limit / 1000} s: the ${n} routes still missing are withdrawn (held for the hold-down)`,
      );
    }
    if (this.#withdrawAbsent(wait.keys)) this.#changed(performance.now());
    this.#afterRead();
  }

  /** After a line outside a table read, or a table read whole: the first time, the learner is synced. */
  #afterRead(): void {
    if (this.#synced || this.#awaitingTable || this.#absent !== undefined) return;
    this.#synced = true;
    this.#flush();
    this.#o.onSynced?.();
  }

  #withdraw(key: string, h: Held): void {
    const go = (): void => {
      if (this.#table.get(key) !== h) return;
      this.#table.delete(key);
      this.#held[h.route.type]--;
      this.#dirty.add(key);
      this.#changed(performance.now());
    };
    h.since = Date.now();
    this.#absent?.keys.delete(key); // withdrawn on its own: no longer kept for the peers
    this.#received[h.route.type]--;
    if (this.#o.holdDownMs <= 0) {
      this.#table.delete(key);
      this.#dirty.add(key);
      return;
    }
    h.timer = setTimeout(go, this.#o.holdDownMs);
    h.timer.unref();
    this.#held[h.route.type]++;
  }

  #changed(readAt: number): void {
    this.stats.lastChange = new Date();
    if (this.#pending !== undefined) return;
    this.#pending = readAt;
    setImmediate(() => this.#flush());
  }

  #flush(): void {
    const at = this.#pending;
    if (at === undefined) return;
    this.#pending = undefined;
    this.work.flushes++;
    if (!this.#stopped) this.#o.onChange(at);
  }

  /** For logs: the routes held in their hold-down. */
  heldRoutes(): string[] {
    return [...this.#table.values()].filter((h) => h.timer !== undefined).map((h) => describeRoute(h.route));
  }
}

/** gobgp's last stderr line and its error line (gobgp -j prints its failure on stdout, not stderr), for a reason. */
function exitDetail(stderr: string, error: string | undefined): string {
  return [stderr.trim().split('\n').pop() ?? '', error ?? ''].filter((x) => x !== '').join('; ');
}

/** Kill a reader's gobgp, and the thread 100 ms later (its gobgp dies with it too: setpriv --pdeathsig). */
function kill(r: MonitorReader): void {
  r.postMessage({ t: 'kill' });
  setTimeout(() => void r.terminate(), 100).unref();
}

/**
 * Is process `pid` connected to the API's TCP port (an established socket
 * of its own in /proc/PID/net/tcp or tcp6)? The monitor's sign that its
 * WatchEvent request is on its way.
 */
export function monitorConnected(pid: number, api: GobgpApi): boolean {
  try {
    const inodes = new Set<string>();
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m !== null) inodes.add(m[1]!);
      } catch {
        // closed meanwhile
      }
    }
    const port = api.port.toString(16).toUpperCase().padStart(4, '0');
    for (const f of ['tcp', 'tcp6']) {
      let text: string;
      try {
        text = readFileSync(`/proc/${pid}/net/${f}`, 'utf8');
      } catch {
        continue;
      }
      for (const line of text.split('\n').slice(1)) {
        // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
        const c = line.trim().split(/\s+/);
        if (c.length > 9 && c[3] === '01' && c[2]!.endsWith(`:${port}`) && inodes.has(c[9]!)) return true;
      }
    }
  } catch {
    // the process is gone: not connected
  }
  return false;
}
