/**
 * Incremental resolution (docs/bgp.md "Incremental resolution"): the same
 * rules, rejections and unresolved routes as resolve() over the whole table,
 * but each update costs what changed, not the table (20,000 learned routes,
 * one T2ST change). Per changed route only it and its dependents are
 * resolved again:
 * - a T1ST or T2ST: itself;
 * - a DSD: the T2STs with its segment id (MUP extended community);
 * - an ISD: the T1STs whose endpoint (gNB) falls inside its prefix (the
 *   longest match may move).
 * The result is a delta of learned rules (put / delete) for the daemon.
 */
import { mask4 } from '../sid/addr.js';
import type { Ipv4Addr } from '../sid/types.js';
import type { Policy, Session } from '../config/types.js';
import { policyKey, sessionKey } from '../config/keys.js';
import type { DsdRoute, IsdRoute, MupRoute, RouteType, T1stRoute, T2stRoute } from './routes.js';
import {
  REJECT_REASONS,
  bySid,
  classify,
  isdForGtp4,
  makePolicy,
  makeSession,
  pickDsd,
  rtsMatch,
  t1stUnresolved,
  t2stUnresolved,
  type Classified,
  type RejectReason,
  type Rejection,
  type ResolveOptions,
  type Resolved,
} from './resolve.js';

/** Learned rules to write (new or changed) and to delete, per kind. */
export interface LearnedDelta {
  readonly policies: { readonly put: Policy[]; readonly del: Policy[] };
  readonly sessions: { readonly put: Session[]; readonly del: Session[] };
}

/** What a T1ST/T2ST resolved to. */
interface StResult {
  readonly route: MupRoute;
  /** The discovery route (DSD / ISD) it resolved to. */
  readonly disc?: MupRoute;
  /** An ISD's length (LB + LN + FN) the session's isd was cut to. */
  readonly discLen?: number;
  /** "policy <key>" / "session <key>", when it makes a rule. */
  readonly ruleKey?: string;
  readonly rule?: Policy | Session;
  readonly unresolved?: string;
}

/**
 * Running counts of the resolver's state, kept as it changes (status and
 * metrics read them after every change; made from view() they cost a pass
 * over every route: 1.4 s at 200,000 learned policies).
 */
export interface ResolverCounts {
  /** Routes classified rejected, per type and per reason; filtered (RTs), per type. */
  readonly rejected: Record<RouteType, number>;
  readonly rejectedBy: Record<RejectReason, number>;
  readonly filtered: Record<RouteType, number>;
  /** T1STs/T2STs waiting for their ISD/DSD. */
  readonly unresolved: Record<RouteType, number>;
  /** T1STs/T2STs that give a rule. */
  readonly ruled: Record<RouteType, number>;
  /** Discovery routes (ISD/DSD) that at least one ruled T1ST/T2ST resolved to. */
  readonly discUsed: Record<RouteType, number>;
}

const perType = (): Record<RouteType, number> => ({ isd: 0, dsd: 0, t1st: 0, t2st: 0 });

interface IsdEntry {
  readonly r: IsdRoute;
  readonly len: number;
}

export class IncrementalResolver {
  readonly #o: Omit<ResolveOptions, 'memo'>;
  readonly #routes = new Map<string, MupRoute>();
  readonly #cls = new Map<string, Classified>();
  /** Valid DSDs by segment id, in bySid order. */
  readonly #dsds = new Map<string, DsdRoute[]>();
  /** Valid T2STs by segment id. */
  readonly #t2stBySeg = new Map<string, Set<string>>();
  /** End.M.GTP4.E ISDs over IPv4 prefixes: prefix length -> prefix address -> entries in bySid order. */
  readonly #isds = new Map<number, Map<number, IsdEntry[]>>();
  /** Prefix lengths present in #isds, longest first. */
  #isdLens: number[] = [];
  /** Valid T1STs by endpoint (gNB). */
  readonly #t1stByGnb = new Map<number, Set<string>>();
  readonly #st = new Map<string, StResult>();
  /** ST routes giving a rule key, and the current rule (the first ST by route key wins). */
  readonly #contrib = new Map<string, Set<string>>();
  readonly #rules = new Map<string, Policy | Session>();
  #view: Resolved | undefined;
  readonly #counts: ResolverCounts = {
    rejected: perType(),
    rejectedBy: Object.fromEntries(REJECT_REASONS.map((r) => [r, 0])) as Record<RejectReason, number>,
    filtered: perType(),
    unresolved: perType(),
    ruled: perType(),
    discUsed: perType(),
  };
  /** Ruled T1STs/T2STs per discovery route key (discUsed counts the keys here). */
  readonly #discUsers = new Map<string, { type: RouteType; n: number }>();

  constructor(o: Omit<ResolveOptions, 'memo'>) {
    this.#o = o;
  }

  #version = 0;
  /** Grows with every update that changed a route (a cache of what is made from the state can tell it is stale). */
  get version(): number {
    return this.#version;
  }

  /** T1STs/T2STs resolved again by the last update (tests: the work follows the change, not the table). */
  lastResolved = 0;

  /** The routes the resolver holds now (tests). */
  get size(): number {
    return this.#routes.size;
  }

  /**
   * Take these routes' new state (`get(key)`: the route now, undefined when
   * gone) and return the rule changes. Keys that did not change cost nothing.
   */
  update(keys: Iterable<string>, get: (key: string) => MupRoute | undefined): LearnedDelta & { readonly rejected: Rejection[] } {
    const dirtySt = new Set<string>();
    const rejected: Rejection[] = [];
    for (const key of keys) {
      const old = this.#routes.get(key);
      const now = get(key);
      if (old === now) continue;
      if (old !== undefined) this.#remove(old, dirtySt);
      if (now !== undefined && !now.withdrawal) {
        const c = this.#add(now, dirtySt);
        if (c.kind === 'rejected') rejected.push({ key: now.key, type: now.type, reason: c.reason, detail: c.detail });
      }
      if (old?.type === 't1st' || old?.type === 't2st' || now?.type === 't1st' || now?.type === 't2st') dirtySt.add(key);
    }
    const dirtyRules = new Set<string>();
    this.lastResolved = dirtySt.size;
    for (const key of dirtySt) {
      const prev = this.#st.get(key);
      const next = this.#resolveSt(key, prev);
      if (prev !== undefined) this.#countSt(prev, -1);
      if (next !== undefined) this.#countSt(next, 1);
      if (prev?.ruleKey !== undefined && prev.ruleKey !== next?.ruleKey) {
        const set = this.#contrib.get(prev.ruleKey)!;
        set.delete(key);
        if (set.size === 0) this.#contrib.delete(prev.ruleKey);
      }
      if (prev?.ruleKey !== undefined) dirtyRules.add(prev.ruleKey);
      if (next === undefined) this.#st.delete(key);
      else {
        this.#st.set(key, next);
        if (next.ruleKey !== undefined) {
          let set = this.#contrib.get(next.ruleKey);
          if (set === undefined) this.#contrib.set(next.ruleKey, (set = new Set()));
          set.add(key);
          dirtyRules.add(next.ruleKey);
        }
      }
    }
    const delta = { policies: { put: [] as Policy[], del: [] as Policy[] }, sessions: { put: [] as Session[], del: [] as Session[] }, rejected };
    for (const rk of dirtyRules) {
      const set = this.#contrib.get(rk);
      const had = this.#rules.get(rk);
      const out = rk.startsWith('policy ') ? delta.policies : delta.sessions;
      if (set === undefined) {
        if (had !== undefined) {
          this.#rules.delete(rk);
          (out.del as (Policy | Session)[]).push(had);
        }
        continue;
      }
      let winner: string | undefined;
      for (const k of set) if (winner === undefined || k < winner) winner = k;
      const rule = this.#st.get(winner!)!.rule!;
      if (rule !== had) {
        this.#rules.set(rk, rule);
        (out.put as (Policy | Session)[]).push(rule);
      }
    }
    this.#view = undefined;
    this.#version++;
    return delta;
  }

  /** A route's classification entered (+1) or left (-1) the counts. */
  #countCls(r: MupRoute, c: Classified, d: 1 | -1): void {
    if (c.kind === 'rejected') {
      this.#counts.rejected[r.type] += d;
      this.#counts.rejectedBy[c.reason] += d;
    } else if (c.kind === 'filtered') this.#counts.filtered[r.type] += d;
  }

  /** A T1ST/T2ST result entered (+1) or left (-1) the counts. */
  #countSt(x: StResult, d: 1 | -1): void {
    if (x.unresolved !== undefined) this.#counts.unresolved[x.route.type] += d;
    if (x.ruleKey === undefined) return;
    this.#counts.ruled[x.route.type] += d;
    const disc = x.disc!;
    let u = this.#discUsers.get(disc.key);
    if (u === undefined) this.#discUsers.set(disc.key, (u = { type: disc.type, n: 0 }));
    u.n += d;
    if (u.n === 0) {
      this.#discUsers.delete(disc.key);
      this.#counts.discUsed[u.type]--;
    } else if (u.n === 1 && d === 1) this.#counts.discUsed[u.type]++;
  }

  /** The running counts (a copy). */
  counts(): ResolverCounts {
    return structuredClone(this.#counts);
  }

  /** Ruled T1STs/T2STs using this discovery route. */
  discUsers(key: string): number {
    return this.#discUsers.get(key)?.n ?? 0;
  }

  /** The routes a rule came from (its T1STs/T2STs and each one's ISD/DSD), as view().from gives them, without the view. */
  from(ruleKey: string): string[] | undefined {
    const set = this.#contrib.get(ruleKey);
    if (set === undefined) return undefined;
    const list: string[] = [];
    for (const k of [...set].sort()) list.push(k, this.#st.get(k)!.disc!.key);
    return list;
  }

  /** The route's key and type, and its discovery route's, of a ruled T1ST/T2ST (for counts per refused rule). */
  contributors(ruleKey: string): { readonly route: MupRoute; readonly disc: MupRoute }[] {
    const out: { route: MupRoute; disc: MupRoute }[] = [];
    for (const k of this.#contrib.get(ruleKey) ?? []) {
      const x = this.#st.get(k)!;
      out.push({ route: x.route, disc: x.disc! });
    }
    return out;
  }

  #add(r: MupRoute, dirtySt: Set<string>): Classified {
    const c = classify(r, this.#o);
    this.#routes.set(r.key, r);
    this.#cls.set(r.key, c);
    this.#countCls(r, c, 1);
    if (c.kind === 'dsd') {
      const d = r as DsdRoute;
      const list = this.#dsds.get(d.segmentId!) ?? [];
      list.push(d);
      list.sort(bySid);
      this.#dsds.set(d.segmentId!, list);
      for (const k of this.#t2stBySeg.get(d.segmentId!) ?? []) dirtySt.add(k);
    } else if (c.kind === 'isd') {
      const i = r as IsdRoute;
      if (isdForGtp4(i)) {
        const p = i.prefix.prefix as { addr: Ipv4Addr; len: number };
        let byAddr = this.#isds.get(p.len);
        if (byAddr === undefined) {
          this.#isds.set(p.len, (byAddr = new Map()));
          this.#isdLens = [...this.#isds.keys()].sort((a, b) => b - a);
        }
        const list = byAddr.get(p.addr) ?? [];
        list.push({ r: i, len: c.len });
        list.sort((a, b) => bySid(a.r, b.r));
        byAddr.set(p.addr, list);
        this.#coveredT1sts(p.addr, p.len, dirtySt);
      }
    } else if (c.kind === 't2st') {
      const seg = (r as T2stRoute).segmentId!;
      let set = this.#t2stBySeg.get(seg);
      if (set === undefined) this.#t2stBySeg.set(seg, (set = new Set()));
      set.add(r.key);
    } else if (c.kind === 't1st') {
      const gnb = ((r as T1stRoute).endpoint as { addr: Ipv4Addr }).addr;
      let set = this.#t1stByGnb.get(gnb);
      if (set === undefined) this.#t1stByGnb.set(gnb, (set = new Set()));
      set.add(r.key);
    }
    return c;
  }

  #remove(r: MupRoute, dirtySt: Set<string>): void {
    const c = this.#cls.get(r.key)!;
    this.#routes.delete(r.key);
    this.#cls.delete(r.key);
    this.#countCls(r, c, -1);
    if (c.kind === 'dsd') {
      const d = r as DsdRoute;
      const list = this.#dsds.get(d.segmentId!)!.filter((x) => x !== d);
      if (list.length === 0) this.#dsds.delete(d.segmentId!);
      else this.#dsds.set(d.segmentId!, list);
      for (const k of this.#t2stBySeg.get(d.segmentId!) ?? []) dirtySt.add(k);
    } else if (c.kind === 'isd') {
      const i = r as IsdRoute;
      if (isdForGtp4(i)) {
        const p = i.prefix.prefix as { addr: Ipv4Addr; len: number };
        const byAddr = this.#isds.get(p.len)!;
        const list = byAddr.get(p.addr)!.filter((x) => x.r !== i);
        if (list.length > 0) byAddr.set(p.addr, list);
        else {
          byAddr.delete(p.addr);
          if (byAddr.size === 0) {
            this.#isds.delete(p.len);
            this.#isdLens = [...this.#isds.keys()].sort((a, b) => b - a);
          }
        }
        this.#coveredT1sts(p.addr, p.len, dirtySt);
      }
    } else if (c.kind === 't2st') {
      const seg = (r as T2stRoute).segmentId!;
      const set = this.#t2stBySeg.get(seg)!;
      set.delete(r.key);
      if (set.size === 0) this.#t2stBySeg.delete(seg);
    } else if (c.kind === 't1st') {
      const gnb = ((r as T1stRoute).endpoint as { addr: Ipv4Addr }).addr;
      const set = this.#t1stByGnb.get(gnb)!;
      set.delete(r.key);
      if (set.size === 0) this.#t1stByGnb.delete(gnb);
    }
  }

  /** The T1STs whose gNB is inside addr/len (an ISD there came or went). */
  #coveredT1sts(addr: number, len: number, dirtySt: Set<string>): void {
    for (const [gnb, keys] of this.#t1stByGnb) if (mask4(gnb as Ipv4Addr, len) === addr) for (const k of keys) dirtySt.add(k);
  }

  /** Resolve one T1ST/T2ST again; reuses the previous rule object when neither it nor what the rule takes of its discovery route (SID, ISD length) changed. */
  #resolveSt(key: string, prev: StResult | undefined): StResult | undefined {
    const r = this.#routes.get(key);
    if (r === undefined) return undefined;
    const c = this.#cls.get(key)!;
    if (c.kind === 't2st') {
      const t = r as T2stRoute;
      const dsd = pickDsd(t, this.#dsds.get(t.segmentId!) ?? []);
      if (dsd === undefined) return { route: t, unresolved: t2stUnresolved(t) };
      const pd = this.#o.policyDefaults;
      if (pd === undefined) return { route: t, disc: dsd };
      // The policy takes only the DSD's SID: a DSD advertised again with the same SID (a new route object) changes no rule.
      const same = prev !== undefined && prev.route === t && prev.rule !== undefined && (prev.disc === dsd || (prev.disc as DsdRoute | undefined)?.sid?.sid === dsd.sid!.sid);
      const rule = same ? prev.rule! : makePolicy(t, dsd, pd);
      return { route: t, disc: dsd, rule, ruleKey: `policy ${policyKey(rule as Policy)}` };
    }
    if (c.kind === 't1st') {
      const t = r as T1stRoute;
      const gnb = (t.endpoint as { addr: Ipv4Addr }).addr;
      let hit: IsdEntry | undefined;
      for (const len of this.#isdLens) {
        hit = this.#isds.get(len)!.get(mask4(gnb, len))?.find((e) => rtsMatch(e.r, t));
        if (hit !== undefined) break;
      }
      if (hit === undefined) return { route: t, unresolved: t1stUnresolved(t) };
      const sd = this.#o.sessionDefaults;
      if (sd === undefined) return { route: t, disc: hit.r };
      // The session takes the ISD's SID cut to its length: the same SID and length from a new route object change no rule.
      const same =
        prev !== undefined && prev.route === t && prev.rule !== undefined && (prev.disc === hit.r || ((prev.disc as IsdRoute | undefined)?.sid?.sid === hit.r.sid!.sid && prev.discLen === hit.len));
      const rule = same ? prev.rule! : makeSession(t, hit.r, hit.len, sd);
      return { route: t, disc: hit.r, discLen: hit.len, rule, ruleKey: `session ${sessionKey(rule as Session)}` };
    }
    return undefined; // rejected, filtered or skipped: no result
  }

  /** The whole state in resolve()'s shape (status, metrics, tests); built when asked, kept until the next update. */
  view(): Resolved {
    if (this.#view !== undefined) return this.#view;
    const rejected: Rejection[] = [];
    const unresolved: { key: string; type: RouteType; why: string }[] = [];
    const filteredBy: Record<RouteType, number> = { isd: 0, dsd: 0, t1st: 0, t2st: 0 };
    let filtered = 0;
    for (const [key, c] of this.#cls) {
      const type = this.#routes.get(key)!.type;
      if (c.kind === 'rejected') rejected.push({ key, type, reason: c.reason, detail: c.detail });
      else if (c.kind === 'filtered') {
        filtered++;
        filteredBy[type]++;
      }
    }
    for (const [key, s] of this.#st) if (s.unresolved !== undefined) unresolved.push({ key, type: s.route.type, why: s.unresolved });
    const from = new Map<string, string[]>();
    for (const rk of this.#contrib.keys()) from.set(rk, this.from(rk)!);
    const policies: Policy[] = [];
    const sessions: Session[] = [];
    for (const [rk, rule] of this.#rules) (rk.startsWith('policy ') ? (policies as unknown[]) : (sessions as unknown[])).push(rule);
    this.#view = { policies, sessions, from, rejected, unresolved, filtered, filteredBy };
    return this.#view;
  }
}
