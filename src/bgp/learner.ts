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
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { apiText, type GobgpApi } from './gobgpd.js';
import { decodeMonitorLine, describeRoute, ROUTE_TYPES, type MupRoute, type Rejected, type RouteType } from './routes.js';

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
  #child: ChildProcess | undefined;
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
    this.#child?.kill('SIGKILL');
  }

  #spawn(): void {
    if (this.#stopped) return;
    const bin = this.#o.gobgp ?? 'gobgp';
    // setpriv: the kernel kills the monitor when the daemon dies, however it dies.
    const child = spawn('setpriv', ['--pdeathsig', 'KILL', bin, '-u', this.#o.api.host, '-p', String(this.#o.api.port), 'monitor', 'global', 'rib', '-j', '--current'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.#child = child;
    this.#awaitingTable = true;
    this.stats.monitorStarts++;
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-500);
    });
    const rl = createInterface({ input: child.stdout });
    rl.on('line', (line) => this.#line(line));
    child.on('error', (e) => {
      stderr += e.message;
    });
    child.on('close', (code, signal) => {
      if (this.#child === child) this.#child = undefined;
      const was = this.stats.up;
      this.stats.up = false;
      if (this.#stopped) return;
      const why = `gobgp monitor against ${apiText(this.#o.api)} exited (${signal ?? `code ${code}`})${stderr.trim() === '' ? '' : `: ${stderr.trim().split('\n').pop()}`}`;
      this.stats.lastError = why;
      if (was || this.stats.monitorStarts === 1) this.#o.onMonitor?.('down', `${why}; the data plane is kept as it is, retrying`);
      this.#restartTimer = setTimeout(() => this.#spawn(), this.#backoff);
      this.#restartTimer.unref();
      this.#backoff = Math.min(this.#backoff * 2, this.#o.backoffMs?.[1] ?? 5000);
    });
  }

  #line(line: string): void {
    const readAt = performance.now();
    this.stats.lines++;
    const d = decodeMonitorLine(line);
    for (const r of d.rejected) {
      this.#malformed++;
      this.#o.onRejected?.(r);
    }
    // Our own routes (locally originated: no source-id) are what we advertise, not what we learn.
    const learned = d.routes.filter((r) => r.sourceId !== undefined || r.neighbor !== undefined);
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
    if (!this.#stopped) this.#o.onChange(at);
  }

  /** For logs: the routes held in their hold-down. */
  heldRoutes(): string[] {
    return [...this.#table.values()].filter((h) => h.timer !== undefined).map((h) => describeRoute(h.route));
  }
}
