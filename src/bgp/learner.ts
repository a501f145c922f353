/**
 * The learner: reads the sidecar gobgpd's table through a long-lived
 * `gobgp monitor global rib -j --current` and keeps the routes, with the
 * hold-down (docs/bgp.md "Hold-down"):
 * - a withdrawal (stale or not) keeps the route for `holdDownMs`, then it
 *   goes; a re-advertisement in the meantime cancels that;
 * - each (re)start of the monitor begins with the whole table (--current,
 *   the first line): routes held from before that are not in it are
 *   withdrawn the same way (held, then gone);
 * - the monitor dying (gobgpd stopped or restarted) changes nothing: the
 *   routes stay, the monitor is started again with backoff.
 * Every change calls `onChange` (coalesced: one call per turn of the event
 * loop), with the monotonic time its first line was read, for the
 * route-to-data-plane latency.
 */
import { readFileSync } from 'node:fs';
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
   * Starts the reader of one monitor run (default: the monitor-worker.ts
   * thread). Tests give a fake that posts decoded lines, so the learner is
   * tested without gobgp or a thread.
   */
  readonly reader?: (argv: string[]) => MonitorReader;
}

/** What the learner uses of the reader thread of a monitor run (a Worker; a fake in tests). */
export type MonitorReader = Pick<Worker, 'on' | 'postMessage' | 'terminate'>;

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
  /** The reader thread of the running monitor, and its gobgp's pid. */
  #child: { worker: MonitorReader; pid?: number } | undefined;
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

  /** The keys whose route changed since the last call (a route's object is kept until it changes). */
  takeChanged(): Set<string> {
    const d = this.#dirty;
    this.#dirty = new Set();
    return d;
  }

  get synced(): boolean {
    return this.#synced;
  }

  counts(): LearnerCounts {
    const received = Object.fromEntries(ROUTE_TYPES.map((t) => [t, 0])) as Record<RouteType, number>;
    const held = Object.fromEntries(ROUTE_TYPES.map((t) => [t, 0])) as Record<RouteType, number>;
    for (const h of this.#table.values()) {
      if (h.timer === undefined) received[h.route.type]++;
      else held[h.route.type]++;
    }
    return { received, held, malformed: this.#malformed };
  }

  start(): void {
    this.#spawn();
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#restartTimer);
    for (const h of this.#table.values()) clearTimeout(h.timer);
    const c = this.#child;
    if (c !== undefined) {
      c.worker.postMessage({ t: 'kill' });
      // Its gobgp dies with the thread too (setpriv --pdeathsig: the thread that started it).
      setTimeout(() => void c.worker.terminate(), 100).unref();
    }
  }

  #spawn(): void {
    if (this.#stopped) return;
    const bin = this.#o.gobgp ?? 'gobgp';
    // setpriv: the kernel kills the monitor when its parent thread dies (the reader thread, or the daemon with it), however it dies.
    const argv = ['setpriv', '--pdeathsig', 'KILL', bin, '-u', this.#o.api.host, '-p', String(this.#o.api.port), 'monitor', 'global', 'rib', '-j', '--current'];
    // Read and decoded in a thread of its own: the table writes of the main thread do not stop the stream (docs/bgp.md "Where the time goes").
    const worker = this.#o.reader?.(argv) ?? new Worker(new URL('./monitor-worker.js', import.meta.url), { workerData: { argv } });
    const me: { worker: MonitorReader; pid?: number } = { worker };
    this.#child = me;
    this.#awaitingTable = true;
    this.stats.monitorStarts++;
    let ended = false;
    const end = (code: number | null, signal: string | null, stderr: string): void => {
      if (ended) return;
      ended = true;
      if (this.#child === me) this.#child = undefined;
      const was = this.stats.up;
      this.stats.up = false;
      if (this.#stopped) return;
      const why = `gobgp monitor against ${apiText(this.#o.api)} exited (${signal ?? `code ${code}`})${stderr.trim() === '' ? '' : `: ${stderr.trim().split('\n').pop()}`}`;
      this.stats.lastError = why;
      if (was || this.stats.monitorStarts === 1) this.#o.onMonitor?.('down', `${why}; the data plane is kept as it is, retrying`);
      this.#restartTimer = setTimeout(() => this.#spawn(), this.#backoff);
      this.#restartTimer.unref();
      this.#backoff = Math.min(this.#backoff * 2, this.#o.backoffMs?.[1] ?? 5000);
    };
    worker.on('message', (m: FromMonitor) => {
      if (ended) return;
      if (m.t === 'spawned') {
        if (m.pid !== undefined) me.pid = m.pid;
      } else if (m.t === 'lines') {
        this.work.reads++;
        this.work.bytes += m.bytes;
        this.work.decodeMs += m.decodeMs;
        // The read time on this thread's clock (route -> map write latency).
        const readAt = m.readAt - performance.timeOrigin;
        for (const d of m.lines) this.#line(d, readAt);
      } else {
        end(m.code, m.signal, m.stderr);
      }
    });
    worker.on('error', (e) => end(null, null, `reader thread: ${e.message}`));
    worker.on('exit', (code) => end(null, null, `reader thread exited (${code})`));
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

  #line(d: DecodedLine, readAt: number): void {
    const t0 = performance.now();
    this.stats.lines++;
    this.work.lastLineAt = Date.now();
    try {
      this.#read(d, readAt);
    } finally {
      this.work.learnMs += performance.now() - t0;
    }
  }

  #read(d: DecodedLine, readAt: number): void {
    // A learned path rejected with its key (only fields outside the key are bad) has replaced or withdrawn the
    // route of that key in gobgpd: it is that route's withdrawal here too, else the old route's rule would stay
    // installed until the monitor restarts (its later withdrawal carries the same bad fields).
    let gone: string[] | undefined;
    for (const r of d.rejected) {
      this.#malformed++;
      this.#o.onRejected?.(r);
      if (r.key !== undefined && r.learned === true) (gone ??= []).push(r.key);
    }
    // Our own routes (locally originated: no source-id) are what we advertise, not what we learn.
    const learned = d.routes.filter((r) => r.sourceId !== undefined || r.neighbor !== undefined);
    this.work.routes += learned.length;
    if (learned.length > 0) this.work.firstRouteAt ??= this.work.lastLineAt;
    let changed = false;
    if (this.#awaitingTable) {
      // The first line is the whole table: anything held from before that is not in it is withdrawn (held, then gone).
      this.#awaitingTable = false;
      this.stats.up = true;
      this.#backoff = this.#o.backoffMs?.[0] ?? 200;
      this.#o.onMonitor?.('up', `reading the table of ${apiText(this.#o.api)}`);
      const present = new Set(learned.filter((r) => !r.withdrawal).map((r) => r.key));
      for (const [key, h] of this.#table) {
        if (!present.has(key) && h.timer === undefined) {
          this.#withdraw(key, h);
          changed = true;
        }
      }
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
      if (h !== undefined) clearTimeout(h.timer);
      this.#table.set(r.key, { route: r });
      this.#dirty.add(r.key);
      changed = true;
    }
    if (changed) this.#changed(readAt);
    if (!this.#synced) {
      this.#synced = true;
      this.#flush();
      this.#o.onSynced?.();
    }
  }

  #withdraw(key: string, h: Held): void {
    const go = (): void => {
      if (this.#table.get(key) !== h) return;
      this.#table.delete(key);
      this.#dirty.add(key);
      this.#changed(performance.now());
    };
    h.since = Date.now();
    if (this.#o.holdDownMs <= 0) {
      this.#table.delete(key);
      this.#dirty.add(key);
      return;
    }
    h.timer = setTimeout(go, this.#o.holdDownMs);
    h.timer.unref();
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
