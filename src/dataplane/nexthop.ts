/**
 * The next-hop cache: per rule, the next hop its translated packets go to,
 * resolved here from the kernel's routes and neighbours and written into
 * the data plane's mup_nh_rules / mup_nexthops (bpf/maps.h, used by bpf/fwd.h), so that a
 * packet skips bpf_fib_lookup (≈ 195 ns for IPv6 here, ≈ 72 ns for IPv4).
 *
 * Soundness first. A rule's packets do not all go to one address: for
 * H.M.GTP4.D the IPv6 DA is sr_prefix | IPv4 DA | args (or S1 with
 * segments). One next hop serves the rule only when the FIB would give the
 * same answer for every address of that range:
 * - only the default policy-routing rules (local, main, default);
 * - no route of the local table overlaps the range;
 * - in main, exactly one route of the longest length covers the range, and
 *   no route lies strictly inside it;
 * - that route is plain unicast with one gateway (no multipath, nexthop
 *   object, encapsulation, source or TOS selector, dead/linkdown flag); a
 *   connected route only when the range is a single address (the next hop is
 *   then that address);
 * - the egress interface is up, has a MAC, and the gateway's neighbour entry
 *   is REACHABLE, STALE or PERMANENT;
 * - forwarding is on for the family on every ingress interface (otherwise
 *   the FIB lookup would refuse).
 * For End.M.GTP4.E the IPv4 DA is whatever the SID carries, all of IPv4,
 * which never passes: its slot names one route's prefix that passes, and the
 * data plane checks each packet's destination against it. Which prefix: the
 * widest sound one around the rule's last destination that missed the cache
 * (the data plane leaves it in mup_nh_hints; resolveNear4), before any
 * traffic the widest gateway route (resolveAnyIpv4). gNBs behind one router
 * converge on the router's prefix; gNBs with a /32 route each, or on a
 * connected subnet, are served one at a time, the rest by the FIB lookup.
 * End.M.GTP6.E (the gNB from SRH[0]) always uses the FIB lookup.
 * Anything else, or any doubt, leaves the rule on the FIB lookup, with the
 * reason kept for `status`. The data plane also checks, per packet, that the
 * slot was resolved for exactly the rule's range (a reused rule id with a
 * stale pointer falls back), that the packet fits the cached MTU, and that
 * the lease is running (a dead daemon stops renewing it: FIB again).
 *
 * Kept current: a child `ip monitor route neigh link rule netconf` (killed
 * with the daemon, also on SIGKILL: PR_SET_PDEATHSIG through setpriv) wakes
 * a re-resolution 50 ms after a change, and a full one runs every few
 * seconds anyway. Resolution reads the kernel's tables once (`ip -json`) and
 * resolves each distinct range once, not each rule.
 *
 * An interface deleted or made again (a new ifindex under a name a slot was
 * resolved through) is not left to that re-resolution, which reads the
 * kernel's tables with eight `ip` processes and takes hundreds of ms on a
 * loaded host: on every event (and after every resolution, which may have
 * read the tables before the change) each slot's interface name is looked up
 * again (if_nametoindex, one per distinct interface), and the rules of slots
 * whose ifindex is no longer that name's go back to the FIB lookup at once
 * (which finds the new device), until the re-resolution gives them a slot on
 * the new ifindex. Before that, frames kept being redirected to the dead
 * ifindex and dropped (issue 16, soak fault iface).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import type { Config } from '../config/types.js';
import { AF_INET, AF_INET6, LAYOUTS, encodeNextHop, type NextHopFields } from './codec.js';
import type { Dataplane, NextHopFds } from './dataplane.js';
import { BPF_ANY, mapLookup, mapLookupArrayRange, mapUpdate, mapUpdateBatch, synchronizeRcu } from './libbpf.js';
import { ifIndex } from './netns.js';

const run = promisify(execFile);

/** A destination range: every address a rule's translated packets may go to. */
export interface Range {
  readonly family: 4 | 6;
  /** Prefix, host bits clear. */
  readonly addr: bigint;
  readonly len: number;
  /**
   * End.M.GTP4.E: all of IPv4, and `addr` (len 32) is the rule's last
   * destination that missed the cache: the slot should name the widest
   * sound prefix around it (resolveNear4).
   */
  readonly near?: boolean;
}

const keys = new WeakMap<Range, string>();
/** A range as a map key (memoised: the watcher asks for each of 65,536 ranges twice per resolution). */
export function rangeKey(r: Range): string {
  let k = keys.get(r);
  if (k === undefined) {
    k = `${r.family}/${r.addr.toString(16)}/${r.len}${r.near === true ? '~' : ''}`;
    keys.set(r, k);
  }
  return k;
}

/** The destination range of a policy's translated packets: S1, else the SR prefix. */
export function policyRange(p: Config['policies'][number]): Range {
  const s1 = p.segments[0];
  return s1 !== undefined ? { family: 6, addr: s1, len: 128 } : { family: 6, addr: p.srPrefix.addr, len: p.srPrefix.len };
}

/** The range of a local SID's output, if it has one (GTP6.E: the gNB is per packet in SRH[0], all of IPv6: none). */
export function localSidRange(l: Config['localsids'][number]): Range | undefined {
  const b = l.behavior ?? 'end.m.gtp4.e';
  if (b === 'end.m.gtp4.e') return ANY_IPV4;
  if (b === 'end.m.gtp6.d' || b === 'end.m.gtp6.d.di') {
    const s1 = l.segments?.[0];
    if (s1 !== undefined) return { family: 6, addr: s1, len: 128 };
    if (l.srPrefix !== undefined) return { family: 6, addr: l.srPrefix.addr, len: l.srPrefix.len };
  }
  return undefined;
}

/** The range of each rule that has one. */
export function ruleRanges(config: Pick<Config, 'policies' | 'localsids'>, dp: Pick<Dataplane, 'rules'>): Array<{ rule: number; range: Range }> {
  const out: Array<{ rule: number; range: Range }> = [];
  for (const p of config.policies) {
    const rule = dp.rules.policyRule(p.match, p.teid);
    if (rule !== undefined) out.push({ rule, range: policyRange(p) });
  }
  for (const l of config.localsids) {
    const rule = dp.rules.localsidRule(l.sid);
    const range = localSidRange(l);
    if (rule !== undefined && range !== undefined) out.push({ rule, range: { ...range } });
  }
  return out;
}

// --- the kernel's state -----------------------------------------------------

/** One route as `ip -json route show table all` gives it. */
export interface IpRoute {
  readonly type?: string;
  readonly dst: string;
  readonly table?: string;
  readonly gateway?: string;
  readonly via?: unknown;
  readonly dev?: string;
  readonly flags?: readonly string[];
  readonly nexthops?: unknown;
  readonly nhid?: number;
  readonly encap?: unknown;
  readonly from?: string;
  readonly src?: string;
  readonly tos?: string;
  readonly dsfield?: string;
  readonly metrics?: ReadonlyArray<Record<string, unknown>> | Record<string, unknown>;
}
export interface IpNeigh {
  readonly dst: string;
  readonly dev?: string;
  readonly lladdr?: string;
  readonly state?: readonly string[];
}
export interface IpLink {
  readonly ifindex: number;
  readonly ifname: string;
  readonly flags?: readonly string[];
  readonly mtu: number;
  readonly address?: string;
}

export interface KernelState {
  readonly routes: { readonly 4: readonly IpRoute[]; readonly 6: readonly IpRoute[] };
  /** Only the default policy-routing rules (local, main[, default]). */
  readonly defaultRules: { readonly 4: boolean; readonly 6: boolean };
  readonly neighbours: readonly IpNeigh[];
  readonly links: readonly IpLink[];
  /** Interfaces with forwarding on, per family. */
  readonly forwarding: { readonly 4: ReadonlySet<string>; readonly 6: ReadonlySet<string> };
  /** Everything `ip` printed: equal text, equal tables (the watcher skips the resolution). */
  readonly text?: string;
}

async function ipJson<T>(netns: string | undefined, args: string[], texts?: string[]): Promise<T> {
  const { stdout } = await run('ip', [...(netns === undefined ? [] : ['-n', netns]), '-json', ...args], { maxBuffer: 256 << 20 });
  const text = stdout.trim();
  texts?.push(text);
  return (text === '' ? [] : JSON.parse(text)) as T;
}

function defaultRulesOnly(rules: ReadonlyArray<Record<string, unknown>>, family: 4 | 6): boolean {
  const want = family === 4 ? ['0 local', '32766 main', '32767 default'] : ['0 local', '32766 main'];
  const got = rules.map((r) => {
    const extra = Object.keys(r).filter((k) => !['priority', 'src', 'table'].includes(k));
    return extra.length === 0 && r['src'] === 'all' ? `${String(r['priority'])} ${String(r['table'])}` : 'other';
  });
  // IPv4 may lack the default-table rule (deleted): fewer is still plain.
  return got.every((g) => want.includes(g)) && got.includes('0 local') && got.includes('32766 main');
}

/** The routes, rules, neighbours, links and forwarding switches of a namespace (default: this thread's). */
export async function readKernelState(netns?: string): Promise<KernelState> {
  const t: string[][] = Array.from({ length: 8 }, () => []);
  const [r4, r6, ru4, ru6, neighbours, links, nc4, nc6] = await Promise.all([
    ipJson<IpRoute[]>(netns, ['-4', 'route', 'show', 'table', 'all'], t[0]),
    ipJson<IpRoute[]>(netns, ['-6', 'route', 'show', 'table', 'all'], t[1]),
    ipJson<Array<Record<string, unknown>>>(netns, ['-4', 'rule', 'show'], t[2]),
    ipJson<Array<Record<string, unknown>>>(netns, ['-6', 'rule', 'show'], t[3]),
    ipJson<IpNeigh[]>(netns, ['neigh', 'show'], t[4]),
    ipJson<IpLink[]>(netns, ['link', 'show'], t[5]),
    ipJson<Array<{ interface: string; forwarding: boolean }>>(netns, ['-4', 'netconf', 'show'], t[6]),
    ipJson<Array<{ interface: string; forwarding: boolean }>>(netns, ['-6', 'netconf', 'show'], t[7]),
  ]);
  const on = (l: Array<{ interface: string; forwarding: boolean }>): Set<string> => new Set(l.filter((x) => x.forwarding).map((x) => x.interface));
  return {
    routes: { 4: r4, 6: r6 },
    defaultRules: { 4: defaultRulesOnly(ru4, 4), 6: defaultRulesOnly(ru6, 6) },
    neighbours,
    links,
    forwarding: { 4: on(nc4), 6: on(nc6) },
    text: t.map((x) => x.join('')).join('\n'),
  };
}

// --- resolution -------------------------------------------------------------

export interface NextHop {
  readonly ifindex: number;
  readonly ifname: string;
  readonly gateway: string;
  readonly mtu: number;
  readonly dmac: Buffer;
  readonly smac: Buffer;
}
export type Resolution =
  | {
      readonly ok: true;
      readonly nh: NextHop;
      readonly route: string;
      /** The range the slot names, when not the rule's own (End.M.GTP4.E: one route's prefix). */
      readonly tag?: Range;
    }
  | { readonly ok: false; readonly reason: string };

const WIDTH = { 4: 32, 6: 128 } as const;

export function parseAddr(s: string, family: 4 | 6): bigint | undefined {
  if (family === 4) {
    const m = /^(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(s);
    if (m === null) return undefined;
    return m.slice(1).reduce((a, x) => (a << 8n) | BigInt(Number(x) & 255), 0n);
  }
  if (!s.includes(':') || s.includes('.') || s.includes('%')) return undefined;
  const [head, tail] = s.split('::') as [string, string | undefined];
  const h = head === '' ? [] : head.split(':');
  const t = tail === undefined || tail === '' ? [] : tail.split(':');
  const fill = tail === undefined ? 0 : 8 - h.length - t.length;
  const groups = [...h, ...Array<string>(fill).fill('0'), ...t];
  if (groups.length !== 8) return undefined;
  return groups.reduce((a, g) => (a << 16n) | BigInt(parseInt(g, 16) & 0xffff), 0n);
}

/** `ip`'s dst ("default", "10.0.0.0/8", "2001:db8::1") as a prefix. */
export function parsePrefix(dst: string, family: 4 | 6): { addr: bigint; len: number } | undefined {
  if (dst === 'default') return { addr: 0n, len: 0 };
  const [a, l] = dst.split('/') as [string, string | undefined];
  const addr = parseAddr(a, family);
  const len = l === undefined ? WIDTH[family] : Number(l);
  if (addr === undefined || !Number.isInteger(len) || len < 0 || len > WIDTH[family]) return undefined;
  return { addr, len };
}

const mask = (addr: bigint, len: number, w: number): bigint => (len === 0 ? 0n : (addr >> BigInt(w - len)) << BigInt(w - len));
/** a contains b (a is at most as long, and b's address starts with a). */
const contains = (a: { addr: bigint; len: number }, b: { addr: bigint; len: number }, w: number): boolean =>
  a.len <= b.len && mask(b.addr, a.len, w) === mask(a.addr, a.len, w);

function parseMac(s: string | undefined): Buffer | undefined {
  if (s === undefined || !/^([0-9a-f]{2}:){5}[0-9a-f]{2}$/i.test(s)) return undefined;
  return Buffer.from(s.split(':').map((x) => parseInt(x, 16)));
}

function routeMtu(r: IpRoute): number | undefined {
  const ms = Array.isArray(r.metrics) ? r.metrics : r.metrics === undefined ? [] : [r.metrics];
  for (const m of ms) {
    const v = (m as Record<string, unknown>)['mtu'];
    if (typeof v === 'number') return v;
    if (typeof v === 'object' && v !== null && typeof (v as Record<string, unknown>)['value'] === 'number') return (v as { value: number }).value;
  }
  return undefined;
}

const USABLE_NEIGH = new Set(['REACHABLE', 'STALE', 'PERMANENT']);

interface ParsedRoute {
  readonly r: IpRoute;
  readonly p: { addr: bigint; len: number } | undefined;
}
/** The routes parsed once per read of the kernel's tables, not once per range (65,536 ranges). */
const parsed = new WeakMap<KernelState, { 4: ParsedRoute[]; 6: ParsedRoute[] }>();
function routesOf(k: KernelState, f: 4 | 6): ParsedRoute[] {
  let v = parsed.get(k);
  if (v === undefined) {
    v = { 4: k.routes[4].map((r) => ({ r, p: parsePrefix(r.dst, 4) })), 6: k.routes[6].map((r) => ({ r, p: parsePrefix(r.dst, 6) })) };
    parsed.set(k, v);
  }
  return v[f];
}

/**
 * The one next hop of every address of `range`, or why there is none.
 * `ingress`: the interfaces packets arrive on (their forwarding switch must be on).
 */
export function resolveRange(k: KernelState, range: Range, ingress: readonly string[]): Resolution {
  const f = range.family;
  const w = WIDTH[f];
  const no = (reason: string): Resolution => ({ ok: false, reason });
  if (!k.defaultRules[f]) return no(`IPv${f} policy-routing rules other than the defaults`);
  for (const i of ingress) if (!k.forwarding[f].has(i)) return no(`IPv${f} forwarding is off on ${i}`);
  const covering: Array<{ r: IpRoute; len: number }> = [];
  for (const { r, p } of routesOf(k, f)) {
    if (p === undefined) return no(`route ${r.dst}: not understood`);
    const table = r.table ?? 'main';
    if (table === 'local') {
      if (contains(p, range, w) || contains(range, p, w)) return no(`local route ${r.dst} overlaps the range`);
      continue;
    }
    if (table !== 'main') continue; // other tables: not consulted with the default rules (default only on a miss in main)
    if (p.len > range.len && contains(range, p, w)) return no(`route ${r.dst} lies inside the range`);
    if (contains(p, range, w)) covering.push({ r, len: p.len });
  }
  if (covering.length === 0) return no('no route covers the range');
  const best = Math.max(...covering.map((c) => c.len));
  const top = covering.filter((c) => c.len === best);
  if (top.length > 1) return no(`${top.length} routes for ${top[0]!.r.dst} (metrics, ECMP)`);
  const r = top[0]!.r;
  const why = (s: string): Resolution => no(`route ${r.dst}: ${s}`);
  if ((r.type ?? 'unicast') !== 'unicast') return why(`type ${r.type}`);
  if (r.nexthops !== undefined || r.nhid !== undefined) return why('multipath or nexthop object');
  if (r.encap !== undefined) return why('encapsulation (the FIB lookup refuses it too)');
  if (r.from !== undefined || (r.src !== undefined && r.src.includes('/')) || r.tos !== undefined || r.dsfield !== undefined) {
    return why('source or TOS selector');
  }
  if ((r.flags ?? []).some((x) => x === 'dead' || x === 'linkdown')) return why('dead or linkdown');
  if (r.dev === undefined) return why('no device');
  let gw: bigint;
  let gwText: string;
  if (r.gateway !== undefined) {
    const g = parseAddr(r.gateway, f);
    if (g === undefined) return why(`gateway ${r.gateway} not understood`);
    gw = g;
    gwText = r.gateway;
  } else if (r.via !== undefined) {
    return why('gateway of the other family');
  } else if (range.len === w) {
    gw = range.addr;
    gwText = 'the destination itself';
  } else {
    return why('connected: the next hop is each destination itself');
  }
  const link = k.links.find((l) => l.ifname === r.dev);
  if (link === undefined) return why(`device ${r.dev} not found`);
  if (!(link.flags ?? []).includes('UP') || !(link.flags ?? []).includes('LOWER_UP')) return why(`${r.dev} is not up`);
  const smac = parseMac(link.address);
  if (smac === undefined) return why(`${r.dev} has no Ethernet address`);
  const n = k.neighbours.find((x) => x.dev === r.dev && parseAddr(x.dst, f) === gw);
  if (n === undefined) return why(`no neighbour entry for ${gwText} on ${r.dev}`);
  const state = (n.state ?? []).find((s) => USABLE_NEIGH.has(s));
  const dmac = parseMac(n.lladdr);
  if (state === undefined || dmac === undefined) return why(`neighbour ${n.dst} on ${r.dev} is ${(n.state ?? []).join(',') || 'without state'}`);
  const mtu = Math.min(routeMtu(r) ?? link.mtu, link.mtu);
  return { ok: true, route: r.dst, nh: { ifindex: link.ifindex, ifname: link.ifname, gateway: gwText, mtu, dmac, smac } };
}

/** The range of End.M.GTP4.E rules: every IPv4 address (the gNB comes from the SID). */
export const ANY_IPV4: Range = { family: 4, addr: 0n, len: 0 };

/**
 * End.M.GTP4.E: all of IPv4 never has one next hop (local addresses, a
 * connected subnet), so the slot names one route's prefix instead, and the
 * data plane uses it for destinations inside it. Sound for a route that
 * passes resolveRange() for its own prefix (nothing more specific or local
 * inside, one gateway). Of those, the one that covers the most addresses:
 * the gNBs behind one router (10.10.0.0/16 via R) are the case it serves; a
 * world of /32 routes per gNB serves one gNB per rule, the others use the FIB.
 * Without such a route, one usable neighbour on a connected subnet (a range
 * of one address): the first the kernel lists.
 */
export function resolveAnyIpv4(k: KernelState, ingress: readonly string[]): Resolution {
  let best: Resolution | undefined;
  let bestLen = 33;
  let why = 'no route of main has a gateway and nothing more specific or local inside';
  for (const r of k.routes[4]) {
    if ((r.table ?? 'main') !== 'main' || r.gateway === undefined) continue;
    const p = parsePrefix(r.dst, 4);
    if (p === undefined || p.len >= bestLen) continue;
    const tag: Range = { family: 4, addr: p.addr, len: p.len };
    const res = resolveRange(k, tag, ingress);
    if (res.ok) {
      best = { ...res, tag };
      bestLen = p.len;
    } else if (best === undefined && !/inside the range|overlaps/.test(res.reason)) {
      why = res.reason;
    }
  }
  if (best !== undefined) return best;
  // No such route: a gNB on a connected subnet is a range of one address.
  for (const n of k.neighbours) {
    const a = parseAddr(n.dst, 4);
    if (a === undefined) continue;
    const tag: Range = { family: 4, addr: a, len: 32 };
    const res = resolveRange(k, tag, ingress);
    if (res.ok) return { ...res, tag };
  }
  return { ok: false, reason: why };
}

/**
 * End.M.GTP4.E with a hint: the widest prefix around address `a` that one
 * next hop serves: a gateway route of main containing it that passes
 * resolveRange() for its own prefix, the shortest first; else `a` alone.
 */
export function resolveNear4(k: KernelState, a: bigint, ingress: readonly string[]): Resolution {
  const host = { addr: a, len: 32 };
  const around: Array<{ addr: bigint; len: number }> = [];
  for (const r of k.routes[4]) {
    if ((r.table ?? 'main') !== 'main' || r.gateway === undefined) continue;
    const p = parsePrefix(r.dst, 4);
    if (p !== undefined && p.len < 32 && contains(p, host, 32)) around.push(p);
  }
  around.sort((x, y) => x.len - y.len);
  for (const p of around) {
    const tag: Range = { family: 4, addr: p.addr, len: p.len };
    const res = resolveRange(k, tag, ingress);
    if (res.ok) return { ...res, tag };
  }
  const tag: Range = { family: 4, addr: a, len: 32 };
  const res = resolveRange(k, tag, ingress);
  return res.ok ? { ...res, tag } : res;
}

// --- the maps -----------------------------------------------------------------

const nhId = (range: Range, nh: NextHop): string =>
  `${rangeKey(range)} ${nh.ifindex} ${nh.mtu} ${nh.dmac.toString('hex')} ${nh.smac.toString('hex')}`;

export interface CacheSummary {
  /** Rules that have a next hop now. */
  readonly cached: number;
  /** Rules on the FIB lookup, by reason. */
  readonly fib: Readonly<Record<string, number>>;
  /** Distinct ranges resolved. */
  readonly ranges: number;
  /** Rule entries written this time. */
  readonly written: number;
}

/**
 * Writes one data plane's next-hop maps. A slot is written once, then only
 * pointed at; a slot no rule points to any more is reused only after an RCU
 * grace period (no packet can still hold it).
 */
export class NextHopCache {
  readonly #fds: NextHopFds;
  readonly #nRules: number;
  readonly #ruleSlot: Uint32Array;
  /** range+next hop -> slot */
  readonly #slots = new Map<string, number>();
  readonly #free: number[] = [];
  #retired: number[] = [];
  #nextSlot = 1;
  readonly #nSlots: number;
  /** Per ifindex the slots resolved through it, and the interface's name then. */
  readonly #byIf = new Map<number, { ifname: string; slots: Set<number> }>();

  constructor(fds: NextHopFds, nRules: number) {
    this.#fds = fds;
    this.#nRules = nRules;
    this.#nSlots = 2 * nRules + 1;
    this.#ruleSlot = new Uint32Array(nRules);
    // Start from a known state: a reused map may hold pointers from an earlier run.
    this.#writeRules(new Uint32Array(nRules), true);
  }

  /** Write the rule entries that differ from `want` (all of them when `force`), in one batch. */
  #writeRules(want: Uint32Array, force = false): number {
    const todo: number[] = [];
    for (let r = 0; r < this.#nRules; r++) if (force || this.#ruleSlot[r] !== want[r]) todo.push(r);
    if (todo.length === 0) return 0;
    const keys = Buffer.alloc(4 * todo.length);
    const values = Buffer.alloc(4 * todo.length);
    todo.forEach((r, i) => {
      keys.writeUInt32LE(r, 4 * i);
      values.writeUInt32LE(want[r]!, 4 * i);
      this.#ruleSlot[r] = want[r]!;
    });
    mapUpdateBatch(this.#fds.rulesFd, keys, values, todo.length, 'mup_nh_rules');
    return todo.length;
  }

  #alloc(): number {
    if (this.#free.length === 0 && this.#nextSlot < this.#nSlots) return this.#nextSlot++;
    if (this.#free.length === 0 && this.#retired.length > 0) {
      synchronizeRcu();
      this.#free.push(...this.#retired);
      this.#retired = [];
    }
    const s = this.#free.pop();
    if (s === undefined) throw new Error('internal: the next-hop slots are exhausted');
    return s;
  }

  /** Make every rule of `assign` point at its range's next hop (or none); rules not listed: none. */
  update(assign: ReadonlyArray<{ rule: number; range: Range }>, resolved: ReadonlyMap<string, Resolution>): CacheSummary {
    const want = new Uint32Array(this.#nRules);
    const fib: Record<string, number> = {};
    const used = new Map<string, number>();
    let cached = 0;
    // Per range, not per rule: 65,536 rules may share a few ranges, or have one each.
    const slotOf = new Map<string, number>();
    for (const { rule, range } of assign) {
      if (rule < 0 || rule >= this.#nRules) continue;
      const key = rangeKey(range);
      const known = slotOf.get(key);
      if (known !== undefined) {
        want[rule] = known;
        cached++;
        continue;
      }
      const res = resolved.get(key);
      if (res === undefined || !res.ok) {
        const reason = res === undefined ? 'not resolved' : res.reason;
        fib[reason] = (fib[reason] ?? 0) + 1;
        continue;
      }
      const tag = res.tag ?? range;
      const id = nhId(tag, res.nh);
      let slot = used.get(id) ?? this.#slots.get(id);
      if (slot === undefined) {
        slot = this.#newSlot(tag, res.nh);
      }
      used.set(id, slot);
      slotOf.set(key, slot);
      want[rule] = slot;
      cached++;
    }
    const written = this.#writeRules(want);
    // Slots no rule points to any more: reusable after a grace period.
    for (const [id, slot] of this.#slots) if (!used.has(id)) this.#retire(slot);
    this.#slots.clear();
    for (const [id, slot] of used) this.#slots.set(id, slot);
    return { cached, fib, ranges: resolved.size, written };
  }

  /** A free slot holding next hop `nh` for destination range `tag` (written to mup_nexthops). */
  #newSlot(tag: Range, nh: NextHop): number {
    const slot = this.#alloc();
    const f: NextHopFields = {
      family: tag.family === 4 ? AF_INET : AF_INET6,
      dst: tag.addr,
      plen: tag.len,
      ifindex: nh.ifindex,
      mtu: nh.mtu,
      dmac: nh.dmac,
      smac: nh.smac,
    };
    mapUpdate(this.#fds.slotsFd, u32(slot), encodeNextHop(f), BPF_ANY, 'mup_nexthops');
    let by = this.#byIf.get(nh.ifindex);
    if (by === undefined || by.ifname !== nh.ifname) this.#byIf.set(nh.ifindex, (by = { ifname: nh.ifname, slots: new Set() }));
    by.slots.add(slot);
    return slot;
  }

  #retire(slot: number): void {
    this.#retired.push(slot);
    for (const [ifindex, by] of this.#byIf) {
      if (by.slots.delete(slot) && by.slots.size === 0) this.#byIf.delete(ifindex);
    }
  }

  /**
   * Rules whose slot names an ifindex that is no longer its interface's
   * (`current(name)`: the ifindex the name has now, null when gone) go back
   * to the FIB lookup at once; those slots are retired. Cost: one `current`
   * per distinct interface; the rules are walked only when one is stale.
   * Returns the interfaces found stale.
   */
  dropStale(current: (ifname: string) => number | null): Array<{ ifname: string; ifindex: number; now: number | null; rules: number }> {
    const stale = new Map<number, { ifname: string; ifindex: number; now: number | null; rules: number }>();
    for (const [ifindex, by] of this.#byIf) {
      const now = current(by.ifname);
      if (now === ifindex) continue;
      const info = { ifname: by.ifname, ifindex, now, rules: 0 };
      for (const slot of by.slots) stale.set(slot, info);
    }
    if (stale.size === 0) return [];
    const want = Uint32Array.from(this.#ruleSlot);
    for (let r = 0; r < this.#nRules; r++) {
      const info = stale.get(want[r]!);
      if (info === undefined) continue;
      want[r] = 0;
      info.rules++;
    }
    this.#writeRules(want);
    for (const [id, slot] of this.#slots) if (stale.has(slot)) this.#slots.delete(id);
    for (const slot of stale.keys()) this.#retire(slot);
    return [...new Set(stale.values())];
  }

  /**
   * Point one rule at its range's next hop (or none), reusing the slot of an
   * equal next hop: what update() would write for this rule. Slots are not
   * retired here; the next update() does that.
   */
  point(rule: number, range: Range, res: Resolution): void {
    if (rule < 0 || rule >= this.#nRules) return;
    let slot = 0;
    if (res.ok) {
      const tag = res.tag ?? range;
      const id = nhId(tag, res.nh);
      const known = this.#slots.get(id);
      if (known !== undefined) slot = known;
      else {
        slot = this.#newSlot(tag, res.nh);
        this.#slots.set(id, slot);
      }
    }
    if (this.#ruleSlot[rule] === slot) return;
    mapUpdate(this.#fds.rulesFd, u32(rule), u32(slot), BPF_ANY, 'mup_nh_rules');
    this.#ruleSlot[rule] = slot;
  }

  /** Let the data plane use the cache for `ms` more milliseconds. */
  renewLease(ms: number): void {
    const v = Buffer.alloc(LAYOUTS.mup_nh_lease.size);
    v.writeBigUInt64LE(process.hrtime.bigint() + BigInt(Math.round(ms * 1e6)), LAYOUTS.mup_nh_lease.members.expires_ns.offset);
    mapUpdate(this.#fds.leaseFd, u32(0), v, BPF_ANY, 'mup_nh_lease');
  }

  /** Stop the data plane from using the cache at once (lease 0). */
  disable(): void {
    mapUpdate(this.#fds.leaseFd, u32(0), Buffer.alloc(LAYOUTS.mup_nh_lease.size), BPF_ANY, 'mup_nh_lease');
  }

  /**
   * End.M.GTP4.E rules (range ANY_IPV4) with a hint from the data plane
   * (their last destination that missed the cache) get a range near it.
   */
  withHints(assign: ReadonlyArray<{ rule: number; range: Range }>): Array<{ rule: number; range: Range }> {
    if (!assign.some((x) => x.range.family === 4 && x.range.len === 0)) return [...assign];
    const hints = mapLookupArrayRange(this.#fds.hintsFd, 0, this.#nRules, 4, 'mup_nh_hints');
    return assign.map((x) => {
      if (x.range.family !== 4 || x.range.len !== 0 || x.rule >= this.#nRules) return x;
      const h = hints.readUInt32LE(4 * x.rule);
      return h === 0 ? x : { rule: x.rule, range: { family: 4, addr: BigInt(h), len: 32, near: true } };
    });
  }

  /** A digest of the hints (changes when a rule's last miss does). */
  hintsDigest(): string {
    return createHash('sha1').update(mapLookupArrayRange(this.#fds.hintsFd, 0, this.#nRules, 4, 'mup_nh_hints')).digest('hex');
  }

  /** The slot rule `rule` points to, as the map holds it (0 = none). */
  ruleSlot(rule: number): number {
    return mapLookup(this.#fds.rulesFd, u32(rule), 4, 'mup_nh_rules')?.readUInt32LE(0) ?? 0;
  }
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n >>> 0);
  return b;
}

/** Resolve every distinct range of `assign` once. */
export function resolveAll(k: KernelState, assign: ReadonlyArray<{ range: Range }>, ingress: readonly string[]): Map<string, Resolution> {
  const out = new Map<string, Resolution>();
  for (const { range } of assign) {
    const key = rangeKey(range);
    if (!out.has(key)) out.set(key, resolveOne(k, range, ingress));
  }
  return out;
}

/** One range's next hop. */
export function resolveOne(k: KernelState, range: Range, ingress: readonly string[]): Resolution {
  return range.near === true
    ? resolveNear4(k, range.addr, ingress)
    : range.family === 4 && range.len === 0
      ? resolveAnyIpv4(k, ingress)
      : resolveRange(k, range, ingress);
}

// --- keeping it current --------------------------------------------------------

export interface WatcherOptions {
  /** The data plane now (it changes when a new object is swapped in). */
  readonly dataplane: () => Dataplane | undefined;
  /** The rules now. */
  readonly config: () => Pick<Config, 'policies' | 'localsids'>;
  /** Interfaces packets arrive on (forwarding must be on there). */
  readonly ingress: () => readonly string[];
  /** Namespace to watch (`ip -n`); default: the daemon's own. */
  readonly netns?: string;
  /** After a change, resolve this many ms later (changes come in bursts). Default 50. */
  readonly debounceMs?: number;
  /** Full resolution at least this often, ms. Default 5000. */
  readonly periodMs?: number;
  /** How long the data plane may use what was written without a renewal, ms. Default 3000 (renewed every 1000). */
  readonly leaseMs?: number;
  /**
   * Watch for changes (an `ip monitor` child, a periodic run). Default true;
   * false: resolveNow() only, for a lab whose routes do not change (child
   * processes exiting interrupt a long BPF_PROG_TEST_RUN with EINTR).
   */
  readonly watch?: boolean;
  readonly onResolved?: (s: CacheSummary & { readonly ms: number }) => void;
  /** Rules sent back to the FIB lookup because their interface was deleted or made again (dropStale). */
  readonly onStale?: (stale: ReadonlyArray<{ ifname: string; ifindex: number; now: number | null; rules: number }>) => void;
  readonly onError?: (e: Error) => void;
}

/** Runs the cache for a daemon: watch, resolve, write, renew the lease. */
export class NextHopWatcher {
  readonly #o: WatcherOptions;
  #child: ChildProcess | undefined;
  #timer: NodeJS.Timeout | undefined;
  #period: NodeJS.Timeout | undefined;
  #lease: NodeJS.Timeout | undefined;
  #cache: NextHopCache | undefined;
  #cacheFor: Dataplane | undefined;
  #running: Promise<void> | undefined;
  /** What the last resolution was made from: skipped when nothing changed (rules part, the rest). */
  #fingerprint = '';
  #fpRules = '';
  /** The kernel's tables of the last resolution: rules put through the API are resolved against them. */
  #k: KernelState | undefined;
  #again = false;
  #stopped = false;
  last: (CacheSummary & { readonly ms: number; readonly at: string }) | undefined;

  constructor(o: WatcherOptions) {
    this.#o = o;
  }

  start(): void {
    const leaseMs = this.#o.leaseMs ?? 3000;
    this.#lease = setInterval(() => this.#renew(), Math.max(100, Math.floor(leaseMs / 3)));
    this.#lease.unref();
    if (this.#o.watch === false) return;
    const args = [...(this.#o.netns === undefined ? [] : ['-n', this.#o.netns]), 'monitor', 'route', 'neigh', 'link', 'rule', 'netconf'];
    // setpriv sets PR_SET_PDEATHSIG before it execs ip: the kernel kills ip
    // when this process dies, however it dies.
    const child = spawn('setpriv', ['--pdeathsig', 'KILL', 'ip', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.#child = child;
    child.stdout.on('data', () => {
      this.linksChanged();
      this.changed();
    });
    child.stderr.on('data', (d: Buffer) => this.#o.onError?.(new Error(`ip monitor: ${d.toString().trim()}`)));
    child.on('error', (e) => this.#o.onError?.(e));
    child.on('exit', (code, signal) => {
      if (!this.#stopped) this.#o.onError?.(new Error(`ip monitor exited (${signal ?? code}); the next hops are resolved every ${this.#o.periodMs ?? 5000} ms only`));
    });
    this.#period = setInterval(() => this.changed(0), this.#o.periodMs ?? 5000);
    this.#period.unref();
    this.changed(0);
  }

  #renew(): void {
    try {
      if (this.#cache !== undefined && this.#cacheFor === this.#o.dataplane()) this.#cache.renewLease(this.#o.leaseMs ?? 3000);
    } catch (e) {
      this.#o.onError?.(e as Error);
    }
  }

  /** Something changed (a route, a neighbour, a rule): resolve soon. */
  changed(delay = this.#o.debounceMs ?? 50): void {
    if (this.#stopped || this.#timer !== undefined) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.resolveNow().catch((e: unknown) => this.#o.onError?.(e as Error));
    }, delay);
  }

  /**
   * An interface may have been deleted or made again: send the rules whose
   * slot names a dead ifindex back to the FIB lookup now (synchronous, no
   * `ip` run), and resolve again at once. Called on every monitor event here
   * and by the daemon on its own link events, whichever comes first.
   */
  linksChanged(): void {
    if (this.#stopped || this.#cache === undefined || this.#cacheFor !== this.#o.dataplane()) return;
    try {
      const stale = this.#cache.dropStale((name) => {
        try {
          return ifIndex(name, this.#o.netns);
        } catch {
          return null;
        }
      });
      if (stale.length === 0) return;
      // The tables of the last resolution name the old device: rules put
      // through the API must not be pointed with them.
      this.#k = undefined;
      this.#fingerprint = '';
      this.#o.onStale?.(stale);
      if (this.#running !== undefined) this.#again = true;
      else this.changed(0);
    } catch (e) {
      this.#o.onError?.(e as Error);
    }
  }

  /** The rules changed (reload): resolve soon, even if the kernel's tables did not change. */
  rulesChanged(): void {
    this.#fingerprint = '';
    this.changed();
  }

  /**
   * Rules put or deleted one at a time (the API): point just the rules put
   * at their next hop, resolved against the kernel's tables of the last
   * resolution, instead of resolving all 65,536 again (half a second of the
   * event loop at that size, for every request). A deleted rule's id keeps its
   * pointer until the next full resolution: no rule uses the id, and a rule
   * that gets it again is pointed here; the data plane checks the slot's range
   * against the rule's anyway. A route or neighbour change still resolves all.
   * Also while a resolution runs (reading the kernel's tables, as every
   * periodic check does): the rules are pointed here against the last
   * tables, and that run skips its full pass if the tables are the same, or
   * resolves every rule (these included) if not. Starting a full pass for
   * every such change kept a client that sends changes one after another
   * behind full passes of every rule (seconds each at 131,072 rules).
   */
  rulesPut(c: { readonly putPolicies?: Config['policies']; readonly putLocalSids?: Config['localsids'] }): void {
    const dp = this.#o.dataplane();
    if (this.#stopped || dp === undefined) return;
    if (this.#k === undefined || this.#cache === undefined || this.#cacheFor !== dp) {
      this.rulesChanged();
      return;
    }
    const ingress = this.#o.ingress();
    for (const p of c.putPolicies ?? []) {
      const rule = dp.rules.policyRule(p.match, p.teid);
      if (rule === undefined) continue;
      const range = policyRange(p);
      this.#cache.point(rule, range, resolveOne(this.#k, range, ingress));
    }
    for (const l of c.putLocalSids ?? []) {
      const rule = dp.rules.localsidRule(l.sid);
      const range = localSidRange(l);
      if (rule === undefined) continue;
      if (range === undefined) this.#cache.point(rule, ANY_IPV4, { ok: false, reason: 'no range' });
      else this.#cache.point(rule, range, resolveOne(this.#k, range, ingress));
    }
    // The next check sees these rules as resolved, not as a reason to resolve all again.
    this.#fpRules = this.#rulesPrint(dp);
  }

  /** Every table change moves the generation; a reload also clears the fingerprint (rulesChanged). */
  #rulesPrint(dp: Dataplane): string {
    return String(dp.rules.generation);
  }

  /** Read the kernel's tables, resolve, write; one at a time (a change during a run runs it again). */
  async resolveNow(): Promise<void> {
    if (this.#running !== undefined) {
      this.#again = true;
      return this.#running;
    }
    this.#running = (async () => {
      try {
        do {
          this.#again = false;
          await this.#once();
        } while (this.#again && !this.#stopped);
      } finally {
        this.#running = undefined;
      }
    })();
    return this.#running;
  }

  async #once(): Promise<void> {
    const t0 = performance.now();
    const k = await readKernelState(this.#o.netns);
    if (this.#stopped) return;
    // Synchronous from here: the data plane cannot change under the writes.
    const dp = this.#o.dataplane();
    if (dp === undefined) return;
    if (this.#cacheFor !== dp) {
      this.#fingerprint = '';
      const s = dp.config.settings;
      this.#cache = new NextHopCache(dp.nexthop, s.maxPolicies + s.maxLocalSids);
      this.#cacheFor = dp;
    }
    const config = this.#o.config();
    const hints = this.#cache!.hintsDigest();
    const fpRules = this.#rulesPrint(dp);
    const fingerprint = `${hints} ${this.#o.ingress().join()}\n${k.text ?? Math.random()}`;
    if (fingerprint === this.#fingerprint && fpRules === this.#fpRules && this.last !== undefined) {
      // The same tables, rules and hints: the same answer (65,536 distinct ranges take about a second).
      this.#cache!.renewLease(this.#o.leaseMs ?? 3000);
      return;
    }
    const assign = this.#cache!.withHints(ruleRanges(config, dp));
    const resolved = resolveAll(k, assign, this.#o.ingress());
    const summary = this.#cache!.update(assign, resolved);
    this.#fingerprint = fingerprint;
    this.#fpRules = fpRules;
    this.#k = k;
    // The tables were read before an interface was deleted or made again:
    // what was just written may name its old ifindex.
    this.linksChanged();
    this.#cache!.renewLease(this.#o.leaseMs ?? 3000);
    const ms = Math.round(performance.now() - t0);
    this.last = { ...summary, ms, at: new Date().toISOString() };
    this.#o.onResolved?.({ ...summary, ms });
  }

  /** Stop watching; the data plane goes back to the FIB lookup (lease 0). */
  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    for (const t of [this.#timer, this.#period, this.#lease]) if (t !== undefined) clearTimeout(t);
    this.#child?.kill('SIGKILL');
    try {
      if (this.#cache !== undefined && this.#cacheFor === this.#o.dataplane()) this.#cache.disable();
    } catch {
      // The data plane is already closed.
    }
  }
}
