/**
 * The daemon's BGP MUP wiring (docs/bgp.md): the learner reads the sidecar
 * gobgpd's table, resolution turns it into policies (gw) and sessions (pe),
 * the daemon installs them as origin "bgp" rules; the advertiser keeps our
 * ISD/DSD routes in the sidecar. The daemon never starts gobgpd: when it is
 * down, the data plane stays as it is and the monitor is retried.
 */
import { Histogram } from 'prom-client';
import { desiredRoutes, ownOf, reconcileOwn, type OwnRoute } from '../bgp/advertise.js';
import { gobgp, apiText, type GobgpApi } from '../bgp/gobgpd.js';
import { Learner, type LearnerOptions } from '../bgp/learner.js';
import { IncrementalResolver, type LearnedDelta } from '../bgp/incremental.js';
import type { RejectReason, Rejection } from '../bgp/resolve.js';
import { ROUTE_TYPES, type RouteType } from '../bgp/routes.js';
import type { BgpConfig, LocalSid, Policy, Session } from '../config/types.js';
import { policyKey, sessionKey } from '../config/keys.js';
import type { Logger } from './log.js';
import { formatIpv4, formatIpv6, parseIpv4, parseIpv6 } from '../sid/addr.js';

/** What the daemon did with one learned set. */
export interface LearnedApplied {
  /** "policy <key>" / "session <key>" of the learned rules in the tables now. */
  readonly installed: ReadonlySet<string>;
  /** Rules refused: their key or name is a config/API rule's, or the table refused them. */
  readonly refused: readonly { readonly rule: string; readonly reason: 'conflict' | 'table'; readonly why: string }[];
  /** Rules written or deleted. */
  readonly changed: number;
}

export interface BgpHost {
  readonly log: Logger;
  /**
   * Change the learned rules by this delta (tables, then the rule set); never
   * half: a rule is in whole or not at all. Rules refused earlier (a config/API
   * rule held the key or name, the table was full) are tried again.
   */
  applyLearned(delta: LearnedDelta): Promise<LearnedApplied>;
  /**
   * The pinned tables' entries no rule lists any more go (after the first table was read and its hold-down
   * passed): how many; undefined when there was nothing to sweep (tables this daemon made).
   */
  sweep(): Promise<number | undefined>;
  localsids(): Iterable<LocalSid>;
}

export interface BgpStatus {
  readonly api: string;
  /** keptForPeers: learned routes the last table read lacked, kept until the sidecar has its peers' tables (docs/bgp.md "Hold-down"). */
  readonly monitor: { readonly up: boolean; readonly starts: number; readonly lastError: string | null; readonly keptForPeers: number };
  readonly synced: boolean;
  readonly sessions: readonly Record<string, unknown>[] | { readonly error: string };
  readonly routes: Record<RouteType, { received: number; installed: number; rejected: number; held: number; unresolved: number; filtered: number }>;
  readonly rejected: Record<RejectReason, number>;
  readonly malformed: number;
  readonly lastChange: string | null;
  readonly advertised: { readonly routes: number; readonly errors: readonly string[]; readonly at: string | null };
  readonly holdDownSeconds: number;
  readonly roles: readonly string[];
  /** Where the time went since the daemon started (docs/bgp.md "Where the time goes"). */
  readonly work: BgpWork;
}

export interface BgpWork {
  /** The monitor's stdout: reads ('data' chunks), bytes, lines; routes decoded (learned ones). */
  readonly reads: number;
  readonly bytes: number;
  readonly lines: number;
  readonly routes: number;
  /** ms decoding monitor lines (the monitor's reader thread), ms updating the learner's table with them (the main thread). */
  readonly decodeMs: number;
  readonly learnMs: number;
  /** CPU ms of the running `gobgp monitor` process (null: not running). */
  readonly monitorCpuMs: number | null;
  /** Applies (resolve + table write) that changed at least one rule, and all of them. */
  readonly applies: number;
  readonly appliesAll: number;
  /** ms resolving (incremental), ms in applyLearned (the serial section: table writes and their waits). */
  readonly resolveMs: number;
  readonly writeMs: number;
  /** Wall clock (ISO, ms) of the first line with a learned route, the last line read, the end of the first and of the last apply that changed rules. */
  readonly firstRouteAt: string | null;
  readonly lastLineAt: string | null;
  readonly firstApplyAt: string | null;
  readonly lastApplyAt: string | null;
}

/** Status and metrics counts as of an apply (the learner's received and held are read fresh). */
export interface RuleCounts {
  readonly routes: Record<RouteType, { installed: number; rejected: number; unresolved: number; filtered: number }>;
  readonly rejected: Record<RejectReason, number>;
}

/** Buckets (seconds) of the route-to-data-plane latency. */
const LATENCY_BUCKETS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5];

/**
 * Refused learned rules and a delta that could not be applied are tried
 * again after this wait (ms) when no route change does it first; the wait
 * doubles, up to the second figure, while the retries change nothing (a
 * full table refuses the same rules, one by one, at every try).
 */
const RETRY_MS: readonly [number, number] = [5_000, 60_000];

/** Knobs for tests: the sidecar faked (its monitor's reader, the reconciliation of our own routes), the retry's waits. */
export interface BgpServiceOptions {
  readonly reader?: LearnerOptions['reader'];
  /** Default: the sidecar's `gobgp neighbor -j` (sidecarHasPeersTables). */
  readonly peersReady?: LearnerOptions['peersReady'];
  readonly reconcile?: typeof reconcileOwn;
  readonly retryMs?: readonly [number, number];
}

export class BgpService {
  readonly #bgp: BgpConfig;
  readonly #h: BgpHost;
  readonly #api: GobgpApi;
  readonly #learner: Learner;
  readonly #reconcile: typeof reconcileOwn;
  /** monitor line read -> map written, seconds. */
  readonly latency = new Histogram({
    name: 'mup_bgp_route_latency_seconds',
    help: 'Time from a BGP MUP route change read from the sidecar to its data-plane write',
    buckets: LATENCY_BUCKETS,
    registers: [],
  });
  /** Resolution, kept up to date route by route (src/bgp/incremental.ts). */
  readonly #resolver: IncrementalResolver;
  #unapplied: LearnedDelta | undefined;
  /** The rules the daemon refused at the last apply that went through (ruleCounts corrects the resolver's counts with them). */
  #refused: LearnedApplied['refused'] = [];
  /** snapshot()'s counts, for the resolver state (its version) and refused list they were made from. */
  #counts: { readonly version: number; readonly refused: LearnedApplied['refused']; readonly counts: RuleCounts } | undefined;
  #busy: Promise<void> = Promise.resolve();
  /**
   * Advertising runs on its own chain: its gobgp CLI calls (every 30 s, at
   * start, on reload) take 100 ms and more on a loaded host, and a learned
   * change must not wait behind them (route -> map write latency).
   */
  #advBusy: Promise<void> = Promise.resolve();
  #dirtyAt: number | undefined;
  readonly #work = { applies: 0, appliesAll: 0, resolveMs: 0, writeMs: 0, firstApplyAt: undefined as number | undefined, lastApplyAt: undefined as number | undefined };
  #sweepTimer: NodeJS.Timeout | undefined;
  #advTimer: NodeJS.Timeout | undefined;
  #advertised: { routes: number; errors: string[]; at: Date | undefined } = { routes: 0, errors: [], at: undefined };
  #stopped = false;
  /**
   * Rejected routes already logged, by route key: the reason. Logged once,
   * counted while they last; forgotten when the route changes to something
   * not rejected for that reason or goes, so this holds no more than the
   * rejected routes in the learner's table (and a route rejected again
   * later is logged again).
   */
  readonly #loggedRoutes = new Map<string, string>();
  /** The refused learned rules of the last apply, all logged: "<kind> <key>" -> reason. */
  #refusedLogged = new Map<string, string>();
  readonly #retryMs: readonly [number, number];
  #retryTimer: NodeJS.Timeout | undefined;
  #retryWait: number;
  /** A retry is queued: the next apply runs even if no route changed. */
  #retryDue = false;

  constructor(bgp: BgpConfig, host: BgpHost, opts: BgpServiceOptions = {}) {
    this.#bgp = bgp;
    this.#h = host;
    this.#api = { host: bgp.api.host, port: bgp.api.port };
    this.#reconcile = opts.reconcile ?? reconcileOwn;
    this.#retryMs = opts.retryMs ?? RETRY_MS;
    this.#retryWait = this.#retryMs[0];
    this.#resolver = new IncrementalResolver({
      importRts: bgp.importRts,
      gw: bgp.roles.includes('gw'),
      pe: bgp.roles.includes('pe'),
      ...(bgp.policyDefaults === undefined ? {} : { policyDefaults: bgp.policyDefaults }),
      ...(bgp.sessionDefaults === undefined ? {} : { sessionDefaults: bgp.sessionDefaults }),
    });
    this.#learner = new Learner({
      api: this.#api,
      holdDownMs: bgp.holdDown * 1000,
      ...(opts.reader === undefined ? {} : { reader: opts.reader }),
      peersReady:
        opts.peersReady ??
        (async () =>
          sidecarHasPeersTables(
            JSON.parse((await gobgp(this.#api, ['neighbor', '-j'], { timeout: 3000 })) || '[]'),
            bgp.neighbors.map((n) => n.address),
          )),
      peersWaitMs: bgp.gracefulRestart * 1000,
      onNote: (msg) => this.#h.log.info({ api: apiText(this.#api) }, `BGP: ${msg}`),
      onChange: (at) => this.#schedule(at),
      onSynced: () => {
        // Entries of an earlier run that are not learned again go after the hold-down (as a withdrawal would).
        this.#sweepTimer = setTimeout(() => {
          this.#busy = this.#busy.then(async () => {
            try {
              const t0 = performance.now();
              const n = await this.#h.sweep();
              const ms = Math.round(performance.now() - t0);
              if (n !== undefined && n > 0) this.#h.log.info({ deleted: n, ms }, 'BGP: entries of an earlier run that were not learned again are gone (after the hold-down)');
              else if (n === 0) this.#h.log.info({ deleted: 0, ms }, 'BGP: every entry of an earlier run was learned again (the sweep after the hold-down deleted none)');
            } catch (e) {
              // Never a rejected #busy: every later apply chains on it (and an unhandled rejection ends the process).
              this.#h.log.warn({ error: (e as Error).message }, 'BGP: the sweep of the entries an earlier run left failed; they stay in the tables');
            }
          });
        }, bgp.holdDown * 1000);
        this.#sweepTimer.unref();
      },
      onRejected: (r) =>
        this.#h.log.warn(
          { reason: r.reason, ...(r.key === undefined ? {} : { route: r.key }), path: JSON.stringify(r.path).slice(0, 500) },
          r.key !== undefined && r.learned === true ? 'BGP: a MUP path could not be decoded; taken as a withdrawal of its route' : 'BGP: a MUP path could not be decoded; ignored',
        ),
      onMonitor: (ev, detail) => {
        if (ev === 'down') this.#h.log.warn({ api: apiText(this.#api) }, `BGP: ${detail}`);
        else {
          this.#h.log.info({ api: apiText(this.#api) }, `BGP: ${detail}`);
          // gobgpd (re)started: its table of our own routes is gone; advertise again.
          this.readvertise();
        }
      },
    });
  }

  start(): void {
    this.#learner.start();
    this.#advTimer = setInterval(() => this.readvertise(), 30_000);
    this.#advTimer.unref();
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#sweepTimer);
    clearTimeout(this.#retryTimer);
    clearInterval(this.#advTimer);
    this.#learner.stop();
  }

  /**
   * Bring our ISD/DSD routes in the sidecar to what the config says (when
   * the sidecar's table has been read, on reload, every 30 s). What the
   * sidecar has of ours comes from the monitor (Learner.ownRoutes), not
   * from a read of its whole table (at 20,000 learned routes that read held
   * the event loop 0.8 s every 30 s, and past about 150,000 it failed).
   * While no table is read (the monitor down or starting) nothing is
   * checked: the monitor's 'up' calls this again.
   */
  readvertise(): void {
    const want = desiredRoutes(this.#bgp, this.#h.localsids());
    this.#advBusy = this.#advBusy.then(async () => {
      if (this.#stopped) return;
      const seen = this.#learner.ownRoutes();
      if (seen === undefined) return;
      const have = seen.map(ownOf).filter((r): r is OwnRoute => r !== undefined);
      try {
        const r = await this.#reconcile(this.#api, want, have);
        this.#advertised = { routes: want.length, errors: r.errors, at: new Date() };
        if (r.added.length > 0 || r.deleted.length > 0) this.#h.log.info({ added: r.added, withdrawn: r.deleted }, 'BGP: advertised routes updated');
        for (const e of r.errors) this.#h.log.warn({ error: e }, 'BGP: could not advertise or withdraw a route; retried in 30 s');
      } catch (e) {
        this.#advertised = { ...this.#advertised, errors: [(e as Error).message] };
      }
    });
  }

  #schedule(readAt: number): void {
    this.#dirtyAt ??= readAt;
    this.#busy = this.#busy.then(() => this.#apply());
  }

  /**
   * The config/API rules changed (an API change, a reload): a learned rule
   * they refused may fit now. Tries the refused rules (and a delta not
   * applied) again at once; does nothing when none waits.
   */
  rulesChanged(): void {
    if (!this.#waiting()) return;
    this.#retryWait = this.#retryMs[0];
    this.#retryNow();
  }

  /** The wait of the retry armed now, ms; undefined when none is (nothing waits). */
  get retryWaitMs(): number | undefined {
    return this.#retryTimer === undefined ? undefined : this.#retryWait;
  }

  /** Refused learned rules or a delta not applied wait for a retry. */
  #waiting(): boolean {
    return this.#unapplied !== undefined || this.#refusedLogged.size > 0;
  }

  #retryNow(): void {
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    if (this.#stopped || this.#retryDue) return;
    this.#retryDue = true;
    this.#busy = this.#busy.then(() => this.#apply());
  }

  /**
   * After an apply: while something waits, try again after a while, so that
   * a learned rule refused because an API rule held its key is installed
   * once that rule is gone, without waiting for another route to change.
   * `idle`: a retry that changed nothing (the wait doubles).
   */
  #armRetry(idle: boolean): void {
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    if (this.#stopped || !this.#waiting()) {
      this.#retryWait = this.#retryMs[0];
      return;
    }
    this.#retryWait = idle ? Math.min(this.#retryWait * 2, this.#retryMs[1]) : this.#retryMs[0];
    this.#retryTimer = setTimeout(() => this.#retryNow(), this.#retryWait);
    this.#retryTimer.unref();
  }

  async #apply(): Promise<void> {
    const at = this.#dirtyAt;
    const retry = this.#retryDue;
    if ((at === undefined && !retry) || this.#stopped) return;
    this.#dirtyAt = undefined;
    this.#retryDue = false;
    // Only the routes that changed since the last apply, and the ST routes depending on them, are resolved again.
    const t0 = performance.now();
    const keys = this.#learner.takeChanged();
    // A retry with no route changed has nothing to resolve (and keeps the resolution view the counts are made from).
    const delta = keys.size === 0 ? { policies: { put: [], del: [] }, sessions: { put: [], del: [] }, rejected: [] } : this.#resolver.update(keys, (key) => this.#learner.route(key));
    const t1 = performance.now();
    this.#work.resolveMs += t1 - t0;
    this.#work.appliesAll++;
    this.#logRejected(keys, delta.rejected);
    // A delta that could not be applied is applied with the next one (the later change of a rule wins).
    const todo = this.#unapplied === undefined ? delta : mergeDeltas(this.#unapplied, delta);
    this.#unapplied = todo;
    let changed = 0;
    try {
      const applied = await this.#h.applyLearned(todo).finally(() => (this.#work.writeMs += performance.now() - t1));
      changed = applied.changed;
      if (applied.changed > 0) {
        this.#work.applies++;
        this.#work.lastApplyAt = Date.now();
        this.#work.firstApplyAt ??= this.#work.lastApplyAt;
      }
      this.#unapplied = undefined;
      // The refused are the whole list each time: what is logged is exactly what is refused now, so a rule
      // refused again after it was installed (or its route went) is logged again.
      const before = this.#refusedLogged;
      const now = new Map<string, string>();
      for (const x of applied.refused) {
        if (before.get(x.rule) !== x.reason) this.#h.log.warn({ rule: x.rule, routes: this.#resolver.from(x.rule), reason: x.reason, detail: x.why }, 'BGP: learned rule not installed');
        now.set(x.rule, x.reason);
      }
      this.#refusedLogged = now;
      this.#refused = applied.refused;
      if (applied.changed > 0 && at !== undefined) this.latency.observe((performance.now() - at) / 1000);
    } catch (e) {
      this.#h.log.error({ error: (e as Error).message }, 'BGP: could not apply the learned rules; retried with the next change, or after a few seconds');
    }
    this.#armRetry(at === undefined && keys.size === 0 && changed === 0);
  }

  /**
   * Log each rejected route once while it lasts. `keys`: the routes this
   * apply resolved again; one of them not rejected now (installed,
   * unresolved, gone) is forgotten.
   */
  #logRejected(keys: ReadonlySet<string>, rejected: readonly Rejection[]): void {
    for (const x of rejected) {
      if (this.#loggedRoutes.get(x.key) === x.reason) continue;
      this.#loggedRoutes.set(x.key, x.reason);
      this.#h.log.warn({ route: x.key, type: x.type, reason: x.reason, detail: x.detail }, 'BGP: route not installed');
    }
    if (this.#loggedRoutes.size === 0) return;
    const still = rejected.length === 0 ? undefined : new Set(rejected.map((x) => x.key));
    for (const k of keys) if (still?.has(k) !== true) this.#loggedRoutes.delete(k);
  }

  /** Wait until every change read so far is applied (tests, status). */
  async settled(): Promise<void> {
    let b: Promise<void>;
    let a: Promise<void>;
    do {
      b = this.#busy;
      a = this.#advBusy;
      await Promise.all([b, a]);
    } while (b !== this.#busy || a !== this.#advBusy);
  }

  async status(): Promise<BgpStatus> {
    let sessions: BgpStatus['sessions'];
    try {
      const out = await gobgp(this.#api, ['neighbor', '-j'], { timeout: 3000 });
      const list = JSON.parse(out === '' ? '[]' : out) as Record<string, unknown>[] | null;
      sessions = (list ?? []).map((n) => {
        const conf = (n['conf'] ?? {}) as Record<string, unknown>;
        const state = (n['state'] ?? {}) as Record<string, unknown>;
        const timers = ((n['timers'] ?? {}) as Record<string, unknown>)['state'] as Record<string, unknown> | undefined;
        return {
          address: conf['neighbor_address'] ?? state['neighbor_address'] ?? null,
          asn: conf['peer_asn'] ?? state['peer_asn'] ?? null,
          state: sessionState(state['session_state']),
          uptime: timers?.['uptime'] ?? null,
        };
      });
    } catch (e) {
      sessions = { error: (e as Error).message };
    }
    return { ...this.snapshot(), sessions };
  }

  /** Where the time went (reading, decoding, resolving, writing), for status and bench:bgp. */
  work(): BgpWork {
    const l = this.#learner.work;
    const w = this.#work;
    const iso = (t: number | undefined): string | null => (t === undefined ? null : new Date(t).toISOString());
    const ms = (x: number): number => Math.round(x * 10) / 10;
    return {
      reads: l.reads,
      bytes: l.bytes,
      lines: this.#learner.stats.lines,
      routes: l.routes,
      decodeMs: ms(l.decodeMs),
      learnMs: ms(l.learnMs),
      monitorCpuMs: this.#learner.monitorCpuMs() ?? null,
      applies: w.applies,
      appliesAll: w.appliesAll,
      resolveMs: ms(w.resolveMs),
      writeMs: ms(w.writeMs),
      firstRouteAt: iso(l.firstRouteAt),
      lastLineAt: iso(l.lastLineAt),
      firstApplyAt: iso(w.firstApplyAt),
      lastApplyAt: iso(w.lastApplyAt),
    };
  }

  /** The counts without asking gobgpd (for metrics). */
  snapshot(): Omit<BgpStatus, 'sessions'> {
    const c = this.#learner.counts();
    // Made again only when the resolver changed or an apply refused other rules: nothing per learned route.
    let cached = this.#counts;
    if (cached === undefined || cached.version !== this.#resolver.version || cached.refused !== this.#refused) {
      cached = this.#counts = { version: this.#resolver.version, refused: this.#refused, counts: ruleCounts(this.#resolver, this.#refused) };
    }
    const k = cached.counts;
    const routes = Object.fromEntries(
      ROUTE_TYPES.map((t) => [t, { received: c.received[t], installed: k.routes[t].installed, rejected: k.routes[t].rejected, held: c.held[t], unresolved: k.routes[t].unresolved, filtered: k.routes[t].filtered }]),
    ) as BgpStatus['routes'];
    const rejected = { ...k.rejected };
    return {
      api: apiText(this.#api),
      monitor: { up: this.#learner.stats.up, starts: this.#learner.stats.monitorStarts, lastError: this.#learner.stats.lastError ?? null, keptForPeers: this.#learner.keptForPeers },
      synced: this.#learner.synced,
      routes,
      rejected,
      malformed: c.malformed,
      lastChange: this.#learner.stats.lastChange?.toISOString() ?? null,
      advertised: { routes: this.#advertised.routes, errors: this.#advertised.errors, at: this.#advertised.at?.toISOString() ?? null },
      holdDownSeconds: this.#bgp.holdDown,
      roles: this.#bgp.roles,
      work: this.work(),
    };
  }
}

/** `a` then `b`, as one delta: per rule key the later change wins. */
export function mergeDeltas(a: LearnedDelta, b: LearnedDelta): LearnedDelta {
  const one = <R extends Policy | Session>(x: { put: R[]; del: R[] }, y: { put: R[]; del: R[] }, key: (r: R) => string): { put: R[]; del: R[] } => {
    const m = new Map<string, { put: boolean; r: R }>();
    for (const d of [x, y]) {
      for (const r of d.del) m.set(key(r), { put: false, r });
      for (const r of d.put) m.set(key(r), { put: true, r });
    }
    const out = { put: [] as R[], del: [] as R[] };
    for (const v of m.values()) (v.put ? out.put : out.del).push(v.r);
    return out;
  };
  return { policies: one(a.policies, b.policies, policyKey), sessions: one(a.sessions, b.sessions, sessionKey) };
}

/** An address as one text for comparison (2001:DB8::1 and 2001:db8:0::1 alike); the text itself if it is none. */
function canonicalAddress(a: string): string {
  try {
    return a.includes(':') ? formatIpv6(parseIpv6(a, '')) : formatIpv4(parseIpv4(a, ''));
  } catch {
    return a;
  }
}

/**
 * Has the sidecar every peer's table, by its `gobgp neighbor -j`: each
 * neighbor established, and in each family whose graceful restart the peer
 * negotiated (`mp_graceful_restart.state.received`), End-of-RIB received.
 * A peer without graceful restart sends no End-of-RIB: established is all
 * there is to go by.
 */
export function sidecarHasPeersTables(neighbors: unknown, configured: readonly string[] = []): boolean {
  // Every configured peer must be listed: gobgpd serves its API before it has added them (StartBgp, then
  // AddPeer), and an empty list then read as "every peer's table is in" withdrew every learned route into
  // the hold-down at once (found in review, session 43).
  const listed = new Set(
    (Array.isArray(neighbors) ? (neighbors as Record<string, unknown>[]) : []).map((n) => canonicalAddress(String(((n?.['conf'] ?? {}) as Record<string, unknown>)['neighbor_address'] ?? ''))),
  );
  if (configured.some((a) => !listed.has(canonicalAddress(a)))) return false;
  if (neighbors === null) return true;
  if (!Array.isArray(neighbors)) return false;
  for (const n of neighbors as Record<string, unknown>[]) {
    const state = (n?.['state'] ?? {}) as Record<string, unknown>;
    if (sessionState(state['session_state']) !== 'established') return false;
    for (const a of (n['afi_safis'] ?? []) as Record<string, unknown>[]) {
      const gr = ((a?.['mp_graceful_restart'] ?? {}) as Record<string, unknown>)['state'] as Record<string, unknown> | undefined;
      if (gr?.['received'] === true && gr['end_of_rib_received'] !== true) return false;
    }
  }
  return true;
}

/**
 * The counts of status and metrics, from the resolver's running counts and
 * the rules the daemon refused at its last apply: nothing per learned
 * route (made from the resolution view, they were a pass over every route
 * at the first scrape or status after each change: 1.4 s at 200,000
 * policies). Rejected, unresolved and filtered follow the resolver even
 * while applies fail; installed is what the resolver gives less what the
 * last apply refused. A rule's routes
 * are its T1STs/T2STs and each one's ISD/DSD: installed when the rule is (a
 * discovery route when any rule using it is), rejected once per refused
 * rule they feed. test/unit/bgp-incremental.test.ts holds it to the
 * definition made from the view.
 */
export function ruleCounts(resolver: IncrementalResolver, refused: LearnedApplied['refused']): RuleCounts {
  const rc = resolver.counts();
  const routes = Object.fromEntries(
    ROUTE_TYPES.map((t) => [t, { installed: rc.ruled[t] + rc.discUsed[t], rejected: rc.rejected[t], unresolved: rc.unresolved[t], filtered: rc.filtered[t] }]),
  ) as RuleCounts['routes'];
  const rejected = { ...rc.rejectedBy };
  const refusedUsers = new Map<string, { type: RouteType; n: number }>();
  for (const x of refused) {
    if (x.reason === 'conflict') rejected.conflict++;
    for (const { route, disc } of resolver.contributors(x.rule)) {
      routes[route.type].rejected++;
      routes[disc.type].rejected++;
      routes[route.type].installed--;
      const u = refusedUsers.get(disc.key) ?? { type: disc.type, n: 0 };
      u.n++;
      refusedUsers.set(disc.key, u);
    }
  }
  for (const [key, u] of refusedUsers) if (u.n === resolver.discUsers(key)) routes[u.type].installed--;
  return { routes, rejected };
}

/** gobgp's session_state: a number (the gRPC enum) or a name. */
function sessionState(v: unknown): string {
  const names = ['unknown', 'idle', 'connect', 'active', 'opensent', 'openconfirm', 'established'];
  if (typeof v === 'number') return names[v] ?? String(v);
  return typeof v === 'string' ? v.toLowerCase().replace(/^session_state_/, '') : 'unknown';
}
