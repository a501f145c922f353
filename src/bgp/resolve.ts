/**
 * Resolution of learned MUP routes into the rules the data plane holds
 * (docs/bgp.md "Resolution"). Pure: the same table in any order gives the
 * same rules, names and rejections.
 *
 * Gateway role (uplink, H.M.GTP4.D): a T2ST (UPF N3 endpoint, TEID) is
 * resolved to a DSD with the same MUP extended community (segment id) and
 * intersecting route targets; the policy (endpoint/32, TEID prefix) sends to
 * the DSD's SID used as is (a plain SID: End.DT4/DT6/DT46/DX4/DX6 take no Args).
 * PE role (downlink, H.M.Session.Encaps): a T1ST's endpoint (gNB) is looked
 * up by longest match over the ISDs (route targets intersecting); the
 * session encapsulates to ISD SID (L = LB+LN+FN bits) || gNB || Args, which
 * needs L + 72 <= 128 (RFC 9433 §6.6 SID layout).
 */
import { MAX_SID_PREFIX_LEN } from '../sid/mobile.js';
import { formatIpv4, formatIpv6, formatIpv6Prefix, ipv4Prefix, ipv6Prefix, mask4, mask6 } from '../sid/addr.js';
import type { Ipv4Addr, Ipv6Addr, Ipv6Prefix } from '../sid/types.js';
import type { Policy, Session, SrhMode } from '../config/types.js';
import { policyKey, sessionKey } from '../config/keys.js';
import { formatAddr, type DsdRoute, type IsdRoute, type MupRoute, type RouteType, type Srv6Sid, type T1stRoute, type T2stRoute } from './routes.js';

/** SRv6 endpoint behaviors (IANA "SRv6 Endpoint Behaviors"): what a DSD may carry, what an ISD may. */
export const BEHAVIOR = { END_DX6: 16, END_DX4: 17, END_DT6: 18, END_DT4: 19, END_DT46: 20, END_M_GTP6_E: 71, END_M_GTP4_E: 72 } as const;
/**
 * A DSD's SID ends the direct segment into the DN and takes no Args, so the
 * gateway uses it as is whatever it does there: a table lookup (End.DT4/DT6/
 * DT46) or a cross-connect to the DN's next hop (End.DX4/DX6, a PE without
 * VRFs). docs/bgp.md "Resolution".
 */
const DSD_BEHAVIORS: ReadonlySet<number> = new Set([BEHAVIOR.END_DT4, BEHAVIOR.END_DT6, BEHAVIOR.END_DT46, BEHAVIOR.END_DX4, BEHAVIOR.END_DX6]);
const ISD_BEHAVIORS: ReadonlySet<number> = new Set([BEHAVIOR.END_M_GTP4_E, BEHAVIOR.END_M_GTP6_E]);

/** Why a route cannot be installed (a counter label each; docs/bgp.md). */
export type RejectReason =
  | 'no_sid' // ISD/DSD without an SRv6 SID (Prefix-SID attribute)
  | 'bad_sid_structure' // LB+LN+FN+AL > 128, or an ISD without a structure / with LB+LN+FN = 0
  | 'sid_too_long' // ISD for End.M.GTP4.E with L + 72 > 128: no room for the gNB address and Args
  | 'unknown_behavior' // a DSD not End.DT4/DT6/DT46/DX4/DX6, an ISD not End.M.GTP4.E/GTP6.E
  | 'no_segment_id' // T2ST or DSD without the MUP extended community
  | 'unsupported' // a T2ST/T1ST with an IPv6 endpoint (GTP-U over IPv6 is not learned)
  | 'conflict'; // the rule's key or name is taken by a config/API rule (they win; docs/bgp.md "Precedence")

export const REJECT_REASONS: readonly RejectReason[] = ['no_sid', 'bad_sid_structure', 'sid_too_long', 'unknown_behavior', 'no_segment_id', 'unsupported', 'conflict'];

export interface Rejection {
  readonly key: string;
  readonly type: RouteType;
  readonly reason: RejectReason;
  readonly detail: string;
}

export interface PolicyDefaults {
  readonly srcPrefix: Ipv6Prefix;
  readonly segments: readonly Ipv6Addr[];
  readonly srh: SrhMode;
  readonly hopLimit: number;
  readonly mtu?: number;
}

export interface SessionDefaults extends PolicyDefaults {
  /** The UPF N3 address End.M.GTP4.E restores as the GTP-U source (3.10's T1ST has no source). */
  readonly source: Ipv4Addr;
}

export interface ResolveOptions {
  /** Routes whose RTs do not intersect these are not ours (filtered, not rejected). Empty: import all. */
  readonly importRts: readonly string[];
  readonly gw: boolean;
  readonly pe: boolean;
  readonly policyDefaults?: PolicyDefaults;
  readonly sessionDefaults?: SessionDefaults;
  /**
   * Rules of the previous resolve, by the routes they came from: an
   * unchanged rule is the same object again (the daemon then skips it
   * without comparing; 10,000 learned rules, one change). Replaced by the
   * rules of this resolve.
   */
  readonly memo?: ResolveMemo;
}

/** See ResolveOptions.memo: per route object (the learner keeps a route's object until it changes), the rule and what it was made from. */
export type ResolveMemo = WeakMap<MupRoute, { readonly from: MupRoute; readonly rule: Policy | Session }>;

export interface Resolved {
  readonly policies: Policy[];
  readonly sessions: Session[];
  /** The route each rule came from, by rule key ("policy <key>" / "session <key>"): for logs and latency. */
  readonly from: Map<string, string[]>;
  readonly rejected: Rejection[];
  /** T2STs without a matching DSD, T1STs without a covering ISD: waiting, installed when it comes. */
  readonly unresolved: { readonly key: string; readonly type: RouteType; readonly why: string }[];
  /** Routes whose RTs do not intersect the import RTs. */
  readonly filtered: number;
  /** The same, per route type. */
  readonly filteredBy: Record<RouteType, number>;
}

function intersects(a: readonly string[], b: readonly string[]): boolean {
  return a.some((x) => b.includes(x));
}

/** Order: lowest SID first, then route key (Vinbero breaks ties the same way; any fixed order would do). */
export function bySid(a: { sid?: Srv6Sid; key: string }, b: { sid?: Srv6Sid; key: string }): number {
  const x = a.sid?.sid ?? 0n;
  const y = b.sid?.sid ?? 0n;
  return x < y ? -1 : x > y ? 1 : a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}

/** L = LB + LN + FN of an ISD's SID, or the reason it has none. */
function isdLength(r: IsdRoute): { len: number } | { reason: RejectReason; detail: string } {
  if (r.sid === undefined) return { reason: 'no_sid', detail: 'no SRv6 SID (Prefix-SID attribute) in the route' };
  if (!ISD_BEHAVIORS.has(r.sid.behavior)) return { reason: 'unknown_behavior', detail: `behavior ${r.sid.behavior} is not End.M.GTP4.E (72) or End.M.GTP6.E (71)` };
  const s = r.sid.structure;
  if (s === undefined) return { reason: 'bad_sid_structure', detail: 'no SID structure: where the Args start is not known' };
  const len = s.lb + s.ln + s.fn;
  if (len === 0 || len + s.al > 128) return { reason: 'bad_sid_structure', detail: `LB ${s.lb} + LN ${s.ln} + FN ${s.fn} + AL ${s.al} is not a SID layout (1..128 bits)` };
  if (r.sid.behavior === BEHAVIOR.END_M_GTP4_E && len > MAX_SID_PREFIX_LEN) {
    return { reason: 'sid_too_long', detail: `L = LB+LN+FN = ${len}: L + 32 (gNB IPv4) + 40 (Args.Mob.Session) > 128; L must be <= ${MAX_SID_PREFIX_LEN}` };
  }
  return { len };
}

function dsdCheck(r: DsdRoute): { reason: RejectReason; detail: string } | undefined {
  if (r.sid === undefined) return { reason: 'no_sid', detail: 'no SRv6 SID (Prefix-SID attribute) in the route' };
  if (!DSD_BEHAVIORS.has(r.sid.behavior)) return { reason: 'unknown_behavior', detail: `behavior ${r.sid.behavior} is not End.DT4 (19), End.DT6 (18), End.DT46 (20), End.DX4 (17) or End.DX6 (16)` };
  const s = r.sid.structure;
  if (s !== undefined && s.lb + s.ln + s.fn + s.al > 128) return { reason: 'bad_sid_structure', detail: `LB ${s.lb} + LN ${s.ln} + FN ${s.fn} + AL ${s.al} > 128` };
  if (r.segmentId === undefined) return { reason: 'no_segment_id', detail: 'no MUP extended community (segment id)' };
  return undefined;
}

/** The learned policy's name: "bgp:<endpoint>:<TEID hex>[/len]". */
export function policyName(endpoint: Ipv4Addr, teid: number, teidLen: number): string {
  return `bgp:${formatIpv4(endpoint)}:0x${teid.toString(16).padStart(8, '0')}${teidLen === 32 ? '' : `/${teidLen}`}`;
}

/** The learned session's name: "bgp:<UE prefix>". */
export function sessionName(ue: string): string {
  return `bgp:${ue}`;
}

/** What one route is to resolution, on its own (src/bgp/incremental.ts keeps this per route). */
export type Classified =
  | { readonly kind: 'skip' } // withdrawn, or of a role we do not have
  | { readonly kind: 'filtered' }
  | { readonly kind: 'rejected'; readonly reason: RejectReason; readonly detail: string }
  | { readonly kind: 'isd'; readonly len: number }
  | { readonly kind: 'dsd' }
  | { readonly kind: 't1st' }
  | { readonly kind: 't2st' };

export function classify(r: MupRoute, o: Pick<ResolveOptions, 'importRts' | 'gw' | 'pe'>): Classified {
  if (r.withdrawal) return { kind: 'skip' };
  if (o.importRts.length > 0 && !intersects(r.rts, o.importRts)) return { kind: 'filtered' };
  switch (r.type) {
    case 'isd': {
      if (!o.pe) return { kind: 'skip' };
      const l = isdLength(r);
      return 'reason' in l ? { kind: 'rejected', reason: l.reason, detail: l.detail } : { kind: 'isd', len: l.len };
    }
    case 'dsd': {
      if (!o.gw) return { kind: 'skip' };
      const bad = dsdCheck(r);
      return bad !== undefined ? { kind: 'rejected', ...bad } : { kind: 'dsd' };
    }
    case 't1st':
      if (!o.pe) return { kind: 'skip' };
      if (r.endpoint.family !== 4) return { kind: 'rejected', reason: 'unsupported', detail: 'the endpoint (gNB) is IPv6: sessions restore GTP-U over IPv4 only' };
      return { kind: 't1st' };
    case 't2st':
      if (!o.gw) return { kind: 'skip' };
      if (r.endpoint.family !== 4) return { kind: 'rejected', reason: 'unsupported', detail: 'the endpoint (UPF N3) is IPv6: learned policies match GTP-U over IPv4 only' };
      if (r.segmentId === undefined) return { kind: 'rejected', reason: 'no_segment_id', detail: 'no MUP extended community (segment id)' };
      return { kind: 't2st' };
  }
}

/** Can this ISD carry sessions for a gNB (End.M.GTP4.E over an IPv4 prefix)? Only such ISDs take part in the longest match. */
export function isdForGtp4(r: IsdRoute): boolean {
  return r.prefix.family === 4 && r.sid!.behavior === BEHAVIOR.END_M_GTP4_E;
}

/** The first DSD (the list sorted by bySid) a T2ST resolves to. */
export function pickDsd(t: T2stRoute, sameSegment: readonly DsdRoute[]): DsdRoute | undefined {
  return sameSegment.find((d) => intersects(d.rts, t.rts));
}

export function rtsMatch(a: MupRoute, b: MupRoute): boolean {
  return intersects(a.rts, b.rts);
}

export function t2stUnresolved(t: T2stRoute): string {
  return `no DSD with segment id ${t.segmentId} and a route target of ${t.rts.join(', ') || '(none)'}`;
}

export function t1stUnresolved(t: T1stRoute): string {
  return `no End.M.GTP4.E ISD covering ${formatIpv4((t.endpoint as { addr: Ipv4Addr }).addr)} with a route target of ${t.rts.join(', ') || '(none)'}`;
}

export function makePolicy(t: T2stRoute, dsd: DsdRoute, pd: PolicyDefaults): Policy {
  const endpoint = (t.endpoint as { addr: Ipv4Addr }).addr;
  const teid = t.teidLen === 0 ? undefined : { value: t.teidLen === 32 ? t.teid : (t.teid & ((0xffffffff << (32 - t.teidLen)) >>> 0)) >>> 0, len: t.teidLen };
  const sid = dsd.sid!.sid;
  return {
    where: `bgp ${t.key}`,
    name: policyName(endpoint, teid?.value ?? 0, t.teidLen),
    match: ipv4Prefix(endpoint, 32),
    ...(teid === undefined ? {} : { teid }),
    srPrefix: ipv6Prefix(sid, 128),
    sid,
    srcPrefix: pd.srcPrefix,
    segments: pd.segments,
    srh: pd.srh,
    hopLimit: pd.hopLimit,
    ...(pd.mtu === undefined ? {} : { mtu: pd.mtu }),
  };
}

export function makeSession(t: T1stRoute, isdRoute: IsdRoute, len: number, sd: SessionDefaults): Session {
  const gnb = (t.endpoint as { addr: Ipv4Addr }).addr;
  const ue = formatAddr(t.prefix);
  const isd = ipv6Prefix(mask6(isdRoute.sid!.sid, len), len);
  return {
    where: `bgp ${t.key}`,
    name: sessionName(ue),
    ue: t.prefix.family === 4 ? { family: 4, prefix: t.prefix.prefix } : { family: 6, prefix: t.prefix.prefix },
    teid: t.teid,
    qfi: t.qfi,
    rqi: false,
    endpoint: gnb,
    source: t.source !== undefined && t.source.family === 4 ? t.source.addr : sd.source,
    isd,
    srcPrefix: sd.srcPrefix,
    segments: sd.segments,
    srh: sd.srh,
    hopLimit: sd.hopLimit,
    ...(sd.mtu === undefined ? {} : { mtu: sd.mtu }),
  };
}

/** Route key order (duplicates resolve the same way whatever the arrival order: the first by key wins). */
export function byKey(a: { key: string }, b: { key: string }): number {
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}

/**
 * The rules the live routes give, in one pass over the whole table (the
 * daemon resolves incrementally, src/bgp/incremental.ts; this is the
 * reference it is tested against). `routes`: the table as it is (withdrawn
 * routes left out, or still in during their hold-down).
 */
export function resolve(routes: Iterable<MupRoute>, o: ResolveOptions): Resolved {
  const rejected: Rejection[] = [];
  const unresolved: Resolved['unresolved'] = [];
  let filtered = 0;
  const filteredBy: Record<RouteType, number> = { isd: 0, dsd: 0, t1st: 0, t2st: 0 };
  const isds: { r: IsdRoute; len: number }[] = [];
  const dsds = new Map<string, DsdRoute[]>();
  const t1sts: T1stRoute[] = [];
  const t2sts: T2stRoute[] = [];
  for (const r of routes) {
    const c = classify(r, o);
    switch (c.kind) {
      case 'skip':
        break;
      case 'filtered':
        filtered++;
        filteredBy[r.type]++;
        break;
      case 'rejected':
        rejected.push({ key: r.key, type: r.type, reason: c.reason, detail: c.detail });
        break;
      case 'isd':
        isds.push({ r: r as IsdRoute, len: c.len });
        break;
      case 'dsd': {
        const d = r as DsdRoute;
        const list = dsds.get(d.segmentId!) ?? [];
        list.push(d);
        dsds.set(d.segmentId!, list);
        break;
      }
      case 't1st':
        t1sts.push(r as T1stRoute);
        break;
      case 't2st':
        t2sts.push(r as T2stRoute);
        break;
    }
  }
  for (const list of dsds.values()) list.sort(bySid);

  const from = new Map<string, string[]>();
  // A rule is made of its ST route and the discovery route it resolved to (the defaults are fixed per memo).
  const remember = <R extends Policy | Session>(st: MupRoute, disc: MupRoute, make: () => R): R => {
    const m = o.memo?.get(st);
    if (m !== undefined && m.from === disc) return m.rule as R;
    const r = make();
    o.memo?.set(st, { from: disc, rule: r });
    return r;
  };
  const policies = new Map<string, Policy>();
  const pd = o.policyDefaults;
  // Sorted by route key: duplicates (the same endpoint and TEID under two RDs) resolve the same way whatever the arrival order.
  t2sts.sort(byKey);
  for (const t of t2sts) {
    const dsd = pickDsd(t, dsds.get(t.segmentId!) ?? []);
    if (dsd === undefined) {
      unresolved.push({ key: t.key, type: 't2st', why: t2stUnresolved(t) });
      continue;
    }
    if (pd === undefined) continue;
    const p: Policy = remember(t, dsd, () => makePolicy(t, dsd, pd));
    const k = policyKey(p);
    if (policies.has(k)) {
      from.get(`policy ${k}`)!.push(t.key, dsd.key);
      continue; // first by route key wins
    }
    policies.set(k, p);
    from.set(`policy ${k}`, [t.key, dsd.key]);
  }

  const sessions = new Map<string, Session>();
  const sd = o.sessionDefaults;
  // Longest prefix first, then lowest SID: the first covering ISD is the one.
  isds.sort((a, b) => b.r.prefix.prefix.len - a.r.prefix.prefix.len || bySid(a.r, b.r));
  t1sts.sort(byKey);
  for (const t of t1sts) {
    const gnb = (t.endpoint as { addr: Ipv4Addr }).addr;
    const hit = isds.find(({ r }) => isdForGtp4(r) && mask4(gnb, r.prefix.prefix.len) === r.prefix.prefix.addr && intersects(r.rts, t.rts));
    if (hit === undefined) {
      unresolved.push({ key: t.key, type: 't1st', why: t1stUnresolved(t) });
      continue;
    }
    if (sd === undefined) continue;
    const s: Session = remember(t, hit.r, () => makeSession(t, hit.r, hit.len, sd));
    const sk = sessionKey(s);
    if (sessions.has(sk)) {
      from.get(`session ${sk}`)!.push(t.key, hit.r.key);
      continue;
    }
    sessions.set(sk, s);
    from.set(`session ${sk}`, [t.key, hit.r.key]);
  }
  return { policies: [...policies.values()], sessions: [...sessions.values()], from, rejected, unresolved, filtered, filteredBy };
}

/**
 * IPv4 prefixes split to /25 or longer, IPv6 to /121 or longer: gobgpd 3.10
 * drops every received ISD shorter than that (a decoder bug fixed in 3.11),
 * so what we advertise is cut into pieces it keeps. A /24 gives two /25s.
 */
/** At most 2^8 pieces per advertised prefix (a /17 in IPv4). */
export const MAX_SPLIT_BITS = 8;

export function splitForIsd(p: { family: 4; addr: Ipv4Addr; len: number } | { family: 6; addr: Ipv6Addr; len: number }): string[] {
  const min = p.family === 4 ? 25 : 121;
  if (min - p.len > MAX_SPLIT_BITS) throw new RangeError(`/${p.len} would be ${2 ** (min - p.len)} ISD routes of /${min}; advertise /${min - MAX_SPLIT_BITS} or longer prefixes`);
  if (p.len >= min) return [p.family === 4 ? `${formatIpv4(p.addr)}/${p.len}` : `${formatIpv6(p.addr)}/${p.len}`];
  const n = 1 << (min - p.len);
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    if (p.family === 4) out.push(`${formatIpv4(((p.addr as number) + i * (1 << (32 - min))) >>> 0 as Ipv4Addr)}/${min}`);
    else out.push(formatIpv6Prefix(ipv6Prefix(((p.addr as bigint) + BigInt(i) * (1n << BigInt(128 - min))) as Ipv6Addr, min)));
  }
  return out;
}
