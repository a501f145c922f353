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
 * a re-resolution 50 ms after a change, of what the change can touch. No
 * full one runs on a timer while the monitor lives: one runs when it says
 * the kernel dropped events (ENOBUFS), after a pass that failed part way,
 * and every few seconds only if the monitor died; a failed pass is tried
 * again, backing off. Resolution reads the kernel's tables (`ip -json`)
 * and resolves each distinct range once, not each rule.
 *
 * An interface deleted or made again (a new ifindex under a name a slot was
 * resolved through) is not left to that re-resolution, which reads the
 * kernel's tables and may take hundreds of ms on a loaded host: on every
 * event (and after every resolution, which may have read the tables before
 * the change) each slot's interface name is looked up again
 * (if_nametoindex, one per distinct interface), and the rules of slots
 * whose ifindex is no longer that name's go back to the FIB lookup at once
 * (which finds the new device), until the re-resolution gives them a slot on
 * the new ifindex. Before that, frames kept being redirected to the dead
 * ifindex and dropped (issue 16, soak fault iface).
 */
import { ShardedMap } from '../host/sharded-map.js';
import { execFile, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import { promisify } from 'node:util';
import type { Config } from '../config/types.js';
import { AF_INET, AF_INET6, LAYOUTS, encodeNextHop, type NextHopFields } from './codec.js';
import type { Dataplane, NextHopFds } from './dataplane.js';
import { BPF_ANY, BatchWriteError, mapLookup, mapLookupArrayRange, mapUpdate, mapUpdateBatch, synchronizeRcu } from './libbpf.js';
import { takeNewNextHopMaps } from './nexthop-fresh.js';
import { ifIndex } from './netns.js';
import { nextTurn } from '../host/slice-clock.js';
import { spawnChild, spawnEarly, type ChildStdio } from '../host/spawn-early.js';

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
    const rule = dp.rules.policyRuleOf(p);
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

const IP_BATCH_FAMILIES = ['4', '6', 'any'] as const;
const IP_BATCH_STDIO: ChildStdio = ['pipe', 'pipe', 'pipe'];
const MONITOR_STDIO: ChildStdio = ['ignore', 'pipe', 'pipe'];

function ipBatchArgs(netns: string | undefined, family: '4' | '6' | 'any'): string[] {
  return [...(netns === undefined ? [] : ['-n', netns]), ...(family === 'any' ? [] : [`-${family}`]), '-json', '-batch', '-'];
}

function monitorArgs(netns: string | undefined): string[] {
  return [...(netns === undefined ? [] : ['-n', netns]), 'monitor', 'label', 'route', 'neigh', 'link', 'rule', 'netconf'];
}

/**
 * setpriv's arguments to run `ip ARGS` killed with the daemon
 * (PR_SET_PDEATHSIG). One place for the early spawn and the spawn that
 * takes it: a parked child is taken only when the arguments are the same.
 */
function underSetpriv(ipArgs: readonly string[]): string[] {
  return ['--pdeathsig', 'KILL', 'ip', ...ipArgs];
}

/**
 * Spawn the table readers a NextHopWatcher of `netns` starts (IpBatch's
 * three) now, while the daemon is small: its start takes them
 * (src/host/spawn-early.ts). Not the monitor: spawned early it would hand
 * over the link events of the start's own attach, and a link event makes
 * the next pass a full one (a second full pass of every rule right after
 * the start's first).
 */
export function spawnNextHopReadersEarly(netns: string | undefined, owner: object): void {
  for (const f of IP_BATCH_FAMILIES) spawnEarly('setpriv', underSetpriv(ipBatchArgs(netns, f)), IP_BATCH_STDIO, owner);
}

/**
 * One `ip -batch` child and what it owes: `parts` hold the line begun and
 * not yet ended, decoded chunk by chunk (`decoder` keeps a character whose
 * UTF-8 bytes straddle two chunks), `queue` the commands waiting for their
 * line, in order.
 */
interface BatchProc {
  readonly child: ChildProcess;
  readonly decoder: StringDecoder;
  parts: string[];
  readonly queue: Array<{ resolve: (s: string) => void; reject: (e: Error) => void }>;
}

/**
 * `ip -json -batch -` children kept running (one per address family, one
 * for both), each answering one command with one line of JSON. Spawning a
 * process from the daemon forks it, and the fork copies the page tables of
 * a heap of hundreds of MB on the event loop's thread: 8 `ip` runs every 5 s
 * were the daemon's idle stalls (70-160 ms, issue 19), and one per route
 * change a stall per change. These children are spawned once (again only
 * if one exits), killed with the daemon (PR_SET_PDEATHSIG).
 */
export class IpBatch {
  readonly #netns: string | undefined;
  readonly #procs = new Map<'4' | '6' | 'any', BatchProc>();
  #closed = false;

  constructor(netns?: string) {
    this.#netns = netns;
  }

  /** Its three readers now (those spawned early, if parked: src/host/spawn-early.ts), not at the first read. */
  startAll(): void {
    for (const f of IP_BATCH_FAMILIES) this.#proc(f);
  }

  #proc(family: '4' | '6' | 'any'): BatchProc {
    let p = this.#procs.get(family);
    if (p !== undefined) return p;
    const args = ipBatchArgs(this.#netns, family);
    const child = spawnChild('setpriv', underSetpriv(args), IP_BATCH_STDIO);
    const q: BatchProc['queue'] = [];
    const proc: BatchProc = { child, decoder: new StringDecoder('utf8'), parts: [], queue: q };
    let err = '';
    // A route table's answer is one line of many 64 KiB chunks: only the
    // new chunk is searched for its end, and the line is joined once.
    // Appending to one string and searching all of it per chunk was
    // quadratic: 200,000 routes (19 MB, 297 chunks) took 9.5 s of the
    // event loop; now about 130 ms, most of it the join at the end.
    child.stdout!.on('data', (d: Buffer) => {
      const text = proc.decoder.write(d);
      let from = 0;
      let nl: number;
      while ((nl = text.indexOf('\n', from)) >= 0) {
        proc.parts.push(text.slice(from, nl));
        const line = proc.parts.length === 1 ? proc.parts[0]! : proc.parts.join('');
        proc.parts = [];
        from = nl + 1;
        q.shift()?.resolve(line);
      }
      if (from < text.length) proc.parts.push(from === 0 ? text : text.slice(from));
    });
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const fail = (why: string): void => {
      if (this.#procs.get(family) === proc) this.#procs.delete(family);
      for (const w of q.splice(0)) w.reject(new Error(`ip ${args.join(' ')}: ${why}${err === '' ? '' : `: ${err.trim()}`}`));
    };
    child.on('error', (e) => fail(e.message));
    child.on('exit', (code, signal) => fail(`exited (${signal ?? code})`));
    child.stdin!.on('error', () => undefined);
    this.#procs.set(family, proc);
    return proc;
  }

  /** One command's JSON (`ip -json [-4|-6] ARGS`). */
  run<T>(family: '4' | '6' | 'any', args: readonly string[]): Promise<T> {
    if (this.#closed) return Promise.reject(new Error('ip batch closed'));
    const p = this.#proc(family);
    return new Promise<string>((resolve, reject) => {
      p.queue.push({ resolve, reject });
      p.child.stdin!.write(`${args.join(' ')}\n`);
    }).then((line) => (line.trim() === '' ? [] : JSON.parse(line)) as T);
  }

  close(): void {
    this.#closed = true;
    for (const p of this.#procs.values()) p.child.kill('SIGKILL');
    this.#procs.clear();
  }
}

/** The parts of the kernel's state, each read by its own `ip` run(s). */
export type KernelPart = 'routes4' | 'routes6' | 'rules' | 'neigh' | 'links' | 'netconf';
export const KERNEL_PARTS: readonly KernelPart[] = ['routes4', 'routes6', 'rules', 'neigh', 'links', 'netconf'];

type Netconf = Array<{ interface: string; forwarding: boolean }>;
const forwardingOn = (l: Netconf): Set<string> => new Set(l.filter((x) => x.forwarding).map((x) => x.interface));

/**
 * The routes, rules, neighbours, links and forwarding switches of a
 * namespace (default: this thread's). With `prev`, only `parts` are read
 * again (a route event reads the routes of its family, not the neighbours
 * and links); the rest is taken from `prev`.
 */
export async function readKernelState(netns?: string, parts: ReadonlySet<KernelPart> = new Set(KERNEL_PARTS), prev?: KernelState, batch?: IpBatch): Promise<KernelState> {
  const want = (p: KernelPart): boolean => prev === undefined || parts.has(p);
  const t: string[][] = Array.from({ length: 8 }, () => []);
  // With `batch`, the long-running `ip -batch` children answer (no fork of this process).
  const q = <T>(args: string[], into: string[]): Promise<T> => {
    if (batch === undefined) return ipJson<T>(netns, args, into);
    const fam = args[0] === '-4' ? '4' : args[0] === '-6' ? '6' : 'any';
    return batch.run<T>(fam, fam === 'any' ? args : args.slice(1));
  };
  const [r4, r6, ru4, ru6, neighbours, links, nc4, nc6] = await Promise.all([
    want('routes4') ? q<IpRoute[]>(['-4', 'route', 'show', 'table', 'all'], t[0]!) : undefined,
    want('routes6') ? q<IpRoute[]>(['-6', 'route', 'show', 'table', 'all'], t[1]!) : undefined,
    want('rules') ? q<Array<Record<string, unknown>>>(['-4', 'rule', 'show'], t[2]!) : undefined,
    want('rules') ? q<Array<Record<string, unknown>>>(['-6', 'rule', 'show'], t[3]!) : undefined,
    want('neigh') ? q<IpNeigh[]>(['neigh', 'show'], t[4]!) : undefined,
    want('links') ? q<IpLink[]>(['link', 'show'], t[5]!) : undefined,
    want('netconf') ? q<Netconf>(['-4', 'netconf', 'show'], t[6]!) : undefined,
    want('netconf') ? q<Netconf>(['-6', 'netconf', 'show'], t[7]!) : undefined,
  ]);
  const p = prev;
  return {
    routes: { 4: r4 ?? p!.routes[4], 6: r6 ?? p!.routes[6] },
    defaultRules: {
      4: ru4 === undefined ? p!.defaultRules[4] : defaultRulesOnly(ru4, 4),
      6: ru6 === undefined ? p!.defaultRules[6] : defaultRulesOnly(ru6, 6),
    },
    neighbours: neighbours ?? p!.neighbours,
    links: links ?? p!.links,
    forwarding: { 4: nc4 === undefined ? p!.forwarding[4] : forwardingOn(nc4), 6: nc6 === undefined ? p!.forwarding[6] : forwardingOn(nc6) },
    ...(prev === undefined && batch === undefined ? { text: t.map((x) => x.join('')).join('\n') } : {}),
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
      /** The neighbour entry it depends on (neighKey): a change to that entry re-resolves it. */
      readonly neigh?: string;
    }
  | { readonly ok: false; readonly reason: string; readonly neigh?: string };

/** A neighbour entry as the watcher matches it against `ip monitor neigh` events: device and address. */
export const neighKey = (dev: string, family: 4 | 6, addr: bigint): string => `${dev} ${family} ${addr.toString(16)}`;

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
  const neigh = neighKey(r.dev, f, gw);
  const link = k.links.find((l) => l.ifname === r.dev);
  if (link === undefined) return why(`device ${r.dev} not found`);
  if (!(link.flags ?? []).includes('UP') || !(link.flags ?? []).includes('LOWER_UP')) return why(`${r.dev} is not up`);
  const smac = parseMac(link.address);
  if (smac === undefined) return why(`${r.dev} has no Ethernet address`);
  const n = k.neighbours.find((x) => x.dev === r.dev && parseAddr(x.dst, f) === gw);
  if (n === undefined) return { ok: false, reason: `route ${r.dst}: no neighbour entry for ${gwText} on ${r.dev}`, neigh };
  const state = (n.state ?? []).find((s) => USABLE_NEIGH.has(s));
  const dmac = parseMac(n.lladdr);
  if (state === undefined || dmac === undefined) return { ok: false, reason: `route ${r.dst}: neighbour ${n.dst} on ${r.dev} is ${(n.state ?? []).join(',') || 'without state'}`, neigh };
  const mtu = Math.min(routeMtu(r) ?? link.mtu, link.mtu);
  return { ok: true, route: r.dst, nh: { ifindex: link.ifindex, ifname: link.ifname, gateway: gwText, mtu, dmac, smac }, neigh };
}

/** The range of End.M.GTP4.E rules: every IPv4 address (the gNB comes from the SID). */
export const ANY_IPV4: Range = { family: 4, addr: 0n, len: 0 };

/**
 * End.M.GTP4.E: all of IPv4 never has one next hop (local addresses, a
 * connected subnet), so the slot names one route's prefix instead, and the
 * data plane uses it for destinations inside it. Sound for a route that
 * passes resolveRange() for its own prefix (nothing more specific or local
 * inside, one gateway). Of those, the one that covers the most addresses
 * (of equal lengths, the lowest prefix): the gNBs behind one router
 * (10.10.0.0/16 via R) are the case it serves; a world of /32 routes per
 * gNB serves one gNB per rule, the others use the FIB.
 * Without such a route, one usable neighbour on a connected subnet (a range
 * of one address): the first the kernel lists.
 */
export function resolveAnyIpv4(k: KernelState, ingress: readonly string[]): Resolution {
  return anyIpv4(k, ingress).res;
}

/**
 * What an End.M.GTP4.E resolution read of the kernel's IPv4 tables: an IPv4
 * route event can change its answer only when its prefix overlaps one of
 * `watch` (a prefix it resolved: the winner, and each candidate tried and
 * refused before it), or, with `better`, when the event's prefix would be
 * tried before the winner (shorter, or as long and lower: a new candidate);
 * an IPv4 neighbour event only when it is one of `neighs` (the neighbours
 * of the prefixes tried). Undefined deps: it read everything (no winner,
 * the connected-subnet fallback walks every neighbour).
 */
export interface V4Deps {
  readonly watch: readonly string[];
  readonly better?: { readonly addr: bigint; readonly len: number };
  readonly neighs: ReadonlySet<string>;
}

/** More candidates tried than this: the deps say "everything" (a pass tests each event against each). */
const MAX_WATCH = 64;

/** Main-table IPv4 gateway routes in the order resolveAnyIpv4 tries them (shortest, then lowest). */
const gatewayRoutes4 = new WeakMap<KernelState, Array<{ addr: bigint; len: number }>>();
function candidates4(k: KernelState): Array<{ addr: bigint; len: number }> {
  let v = gatewayRoutes4.get(k);
  if (v === undefined) {
    v = [];
    for (const { r, p } of routesOf(k, 4)) if ((r.table ?? 'main') === 'main' && r.gateway !== undefined && p !== undefined) v.push(p);
    v.sort((a, b) => a.len - b.len || (a.addr < b.addr ? -1 : a.addr > b.addr ? 1 : 0));
    gatewayRoutes4.set(k, v);
  }
  return v;
}

function anyIpv4(k: KernelState, ingress: readonly string[]): { res: Resolution; deps: V4Deps | undefined } {
  let why = 'no route of main has a gateway and nothing more specific or local inside';
  const watch: string[] = [];
  const neighs = new Set<string>();
  let last: { addr: bigint; len: number } | undefined;
  for (const p of candidates4(k)) {
    if (last !== undefined && last.len === p.len && last.addr === p.addr) continue; // the same prefix twice (metrics): refused once
    last = p;
    const tag: Range = { family: 4, addr: p.addr, len: p.len };
    const res = resolveRange(k, tag, ingress);
    watch.push(bitsOf(p.addr, p.len, 32));
    if (res.neigh !== undefined) neighs.add(res.neigh);
    if (res.ok) return { res: { ...res, tag }, deps: watch.length > MAX_WATCH ? undefined : { watch, better: p, neighs } };
    if (!/inside the range|overlaps/.test(res.reason)) why = res.reason;
  }
  // No such route: a gNB on a connected subnet is a range of one address.
  for (const n of k.neighbours) {
    const a = parseAddr(n.dst, 4);
    if (a === undefined) continue;
    const tag: Range = { family: 4, addr: a, len: 32 };
    const res = resolveRange(k, tag, ingress);
    if (res.ok) return { res: { ...res, tag }, deps: undefined };
  }
  return { res: { ok: false, reason: why }, deps: undefined };
}

/**
 * End.M.GTP4.E with a hint: the widest prefix around address `a` that one
 * next hop serves: a gateway route of main containing it that passes
 * resolveRange() for its own prefix, the shortest first; else `a` alone.
 */
export function resolveNear4(k: KernelState, a: bigint, ingress: readonly string[]): Resolution {
  return near4(k, a, ingress).res;
}

/**
 * Every prefix near4 resolves contains `a` and lies inside the widest
 * gateway route around it (else is a/32): a route event that changes its
 * answer overlaps that one prefix (a new route around `a` contains `a`).
 */
function near4(k: KernelState, a: bigint, ingress: readonly string[]): { res: Resolution; deps: V4Deps } {
  const host = { addr: a, len: 32 };
  const around: Array<{ addr: bigint; len: number }> = [];
  for (const p of candidates4(k)) if (p.len < 32 && contains(p, host, 32)) around.push(p);
  const widest = around[0] ?? host;
  const neighs = new Set<string>();
  const deps: V4Deps = { watch: [bitsOf(widest.addr, widest.len, 32)], neighs };
  for (const p of around) {
    const tag: Range = { family: 4, addr: p.addr, len: p.len };
    const res = resolveRange(k, tag, ingress);
    if (res.neigh !== undefined) neighs.add(res.neigh);
    if (res.ok) return { res: { ...res, tag }, deps };
  }
  const tag: Range = { family: 4, addr: a, len: 32 };
  const res = resolveRange(k, tag, ingress);
  if (res.neigh !== undefined) neighs.add(res.neigh);
  return { res: res.ok ? { ...res, tag } : res, deps };
}

/**
 * Can a change to the IPv4 routes of prefix `ev` (undefined: any, e.g. a
 * default route of either family) change an End.M.GTP4.E resolution that
 * read `deps` (V4Deps)? False only when it cannot.
 */
export function v4RouteMayChange(deps: V4Deps | undefined, ev: { readonly addr: bigint; readonly len: number; readonly bits?: string } | undefined): boolean {
  if (deps === undefined || ev === undefined) return true;
  if (deps.better !== undefined && (ev.len < deps.better.len || (ev.len === deps.better.len && ev.addr < deps.better.addr))) return true;
  const bits = ev.bits ?? bitsOf(ev.addr, ev.len, 32);
  return deps.watch.some((w) => overlapBits(bits, w));
}

const overlapBits = (a: string, b: string): boolean => (a.length <= b.length ? b.startsWith(a) : a.startsWith(b));

/** A prefix as the string of its first `len` bits: two prefixes overlap when one string starts with the other. */
export function bitsOf(addr: bigint, len: number, w: number): string {
  return len === 0 ? '' : addr.toString(2).padStart(w, '0').slice(0, len);
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
 * pointed at; a slot no rule points to any more (each slot counts the rules
 * pointing to it) is reused only after an RCU grace period (no packet can
 * still hold it).
 */
export class NextHopCache {
  readonly #fds: NextHopFds;
  readonly #nRules: number;
  readonly #ruleSlot: Uint32Array;
  /** range+next hop -> slot */
  readonly #slots = new Map<string, number>();
  /** slot -> its id in #slots (undefined: free or retired) */
  readonly #slotId: Array<string | undefined>;
  /** slot -> rules pointing to it */
  readonly #refs: Uint32Array;
  /** Slots made since the last write: retired after it if no rule points to them. */
  #fresh: number[] = [];
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
    this.#refs = new Uint32Array(this.#nSlots);
    this.#slotId = new Array<string | undefined>(this.#nSlots);
    // Start from a known state: maps a cache wrote before hold its pointers; maps new with their object are zero.
    this.startWrites = takeNewNextHopMaps(fds) ? 0 : this.#writeRules(new Uint32Array(nRules), true);
  }

  /** Rule entries the constructor wrote to zero (none on maps new with their object). */
  readonly startWrites: number;

  get rules(): number {
    return this.#nRules;
  }

  /** Write the rule entries that differ from `want` (all of them when `force`), in one batch. */
  #writeRules(want: Uint32Array, force = false): number {
    const todo = new Uint32Array(this.#nRules);
    let n = 0;
    for (let r = 0; r < this.#nRules; r++) if (force || this.#ruleSlot[r] !== want[r]) todo[n++] = r;
    return this.#write(todo.subarray(0, n), (r) => want[r]!);
  }

  /**
   * Point `rules` at `slotOf(rule)` (called in order) in one batch; slots
   * left without a rule are retired. Keys and values are __u32 in the
   * host's order, built as Uint32Arrays: with Buffer writes and a closure
   * per rule, the start's write of 131,072 entries held the event loop
   * about 60 ms before the API's first answer.
   *
   * What each rule points to (and each slot's count) is taken as written
   * only for the entries the kernel took: when the batch fails part way,
   * the rules after it still hold their old slot in the map, and so here,
   * so the next write that wants the new slot writes it again. Counted
   * before the write, they looked written: a later pass skipped them and
   * their slot could be retired and reused under them.
   */
  #write(rules: ArrayLike<number>, slotOf: (rule: number) => number): number {
    const n = rules.length;
    const keys = new Uint32Array(n);
    const values = new Uint32Array(n);
    for (let i = 0; i < n; i++) {
      const r = rules[i]!;
      keys[i] = r;
      values[i] = slotOf(r);
    }
    let done = 0;
    try {
      if (n > 0) mapUpdateBatch(this.#fds.rulesFd, Buffer.from(keys.buffer), Buffer.from(values.buffer), n, 'mup_nh_rules');
      done = n;
    } catch (e) {
      if (e instanceof BatchWriteError) done = Math.min(e.written, n);
      throw e;
    } finally {
      const dropped: number[] = [];
      for (let i = 0; i < done; i++) {
        const r = keys[i]!;
        const slot = values[i]!;
        const old = this.#ruleSlot[r]!;
        if (old === slot) continue;
        if (old !== 0 && --this.#refs[old]! === 0) dropped.push(old);
        if (slot !== 0) this.#refs[slot]!++;
        this.#ruleSlot[r] = slot;
      }
      for (const slot of [...dropped, ...this.#fresh]) if (this.#refs[slot] === 0) this.#retire(slot);
      this.#fresh = [];
    }
    return n;
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

  /**
   * The slot for a range's resolution (0: none, the FIB lookup): an equal
   * one already written, else a new one. A new slot no rule points to after
   * the next write is retired then.
   */
  slotFor(range: Range, res: Resolution | undefined): number {
    if (res === undefined || !res.ok) return 0;
    const tag = res.tag ?? range;
    const id = nhId(tag, res.nh);
    const known = this.#slots.get(id);
    if (known !== undefined) return known;
    const slot = this.#newSlot(tag, res.nh);
    this.#slots.set(id, slot);
    this.#slotId[slot] = id;
    this.#fresh.push(slot);
    return slot;
  }

  /** Point each rule of `rules` at `slotOf(rule)`; only those that change are written (one batch). */
  pointMany(rules: Iterable<number>, slotOf: (rule: number) => number): number {
    const todo: number[] = [];
    const want: number[] = [];
    for (const r of rules) {
      if (r < 0 || r >= this.#nRules) continue;
      const slot = slotOf(r);
      if (this.#ruleSlot[r] !== slot) {
        todo.push(r);
        want.push(slot);
      }
    }
    let i = 0;
    return this.#write(todo, () => want[i++]!);
  }

  /** Make every rule of `assign` point at its range's next hop (or none); rules not listed: none. */
  update(assign: ReadonlyArray<{ rule: number; range: Range }>, resolved: ReadonlyMap<string, Resolution>): CacheSummary {
    const want = new Uint32Array(this.#nRules);
    const fib: Record<string, number> = {};
    let cached = 0;
    // Per range, not per rule: 65,536 rules may share a few ranges, or have one each.
    const slotOf = new Map<string, number>();
    for (const { rule, range } of assign) {
      if (rule < 0 || rule >= this.#nRules) continue;
      const key = rangeKey(range);
      let slot = slotOf.get(key);
      const res = resolved.get(key);
      if (slot === undefined) {
        slot = this.slotFor(range, res);
        slotOf.set(key, slot);
      }
      if (slot === 0) {
        const reason = res === undefined ? 'not resolved' : res.ok ? 'no slot' : res.reason;
        fib[reason] = (fib[reason] ?? 0) + 1;
        continue;
      }
      want[rule] = slot;
      cached++;
    }
    const written = this.#writeRules(want);
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

  /** No rule points to `slot` (any more): reusable after a grace period. */
  #retire(slot: number): void {
    const id = this.#slotId[slot];
    if (id === undefined) return;
    this.#slotId[slot] = undefined;
    if (this.#slots.get(id) === slot) this.#slots.delete(id);
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
    // Slots nothing points to now (the write retired those with rules).
    for (const slot of stale.keys()) this.#retire(slot);
    return [...new Set(stale.values())];
  }

  /**
   * Point one rule at its range's next hop (or none), reusing the slot of an
   * equal next hop.
   */
  point(rule: number, range: Range, res: Resolution): void {
    if (rule < 0 || rule >= this.#nRules) return;
    const slot = this.slotFor(range, res);
    this.pointMany([rule], () => slot);
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
    const hints = this.hints();
    return assign.map((x) => {
      if (x.range.family !== 4 || x.range.len !== 0 || x.rule >= this.#nRules) return x;
      const h = hints.readUInt32LE(4 * x.rule);
      return h === 0 ? x : { rule: x.rule, range: nearRange(h) };
    });
  }

  /** The hints of rule ids start .. start+count-1 (u32 LE each): one batch read. */
  readHints(start: number, count: number): Buffer {
    return mapLookupArrayRange(this.#fds.hintsFd, start, count, 4, 'mup_nh_hints');
  }

  /** Every rule's hint (u32 LE each; 0: none): one batch read. */
  hints(): Buffer {
    return mapLookupArrayRange(this.#fds.hintsFd, 0, this.#nRules, 4, 'mup_nh_hints');
  }

  /** A digest of the hints (changes when a rule's last miss does). */
  hintsDigest(): string {
    return createHash('sha1').update(this.hints()).digest('hex');
  }

  /** The slot rule `rule` was last pointed at (0 = none), as this cache wrote it. */
  pointed(rule: number): number {
    return this.#ruleSlot[rule] ?? 0;
  }

  /** The slot rule `rule` points to, as the map holds it (0 = none). */
  ruleSlot(rule: number): number {
    return mapLookup(this.#fds.rulesFd, u32(rule), 4, 'mup_nh_rules')?.readUInt32LE(0) ?? 0;
  }
}

/** The range of an End.M.GTP4.E rule whose last miss went to IPv4 address `h`. */
export const nearRange = (h: number): Range => ({ family: 4, addr: BigInt(h), len: 32, near: true });

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
  return resolveWithDeps(k, range, ingress).res;
}

/** One range's next hop, and for End.M.GTP4.E what it depended on (V4Deps). */
export function resolveWithDeps(k: KernelState, range: Range, ingress: readonly string[]): { res: Resolution; deps: V4Deps | undefined } {
  if (range.near === true) return near4(k, range.addr, ingress);
  if (range.family === 4 && range.len === 0) return anyIpv4(k, ingress);
  return { res: resolveRange(k, range, ingress), deps: undefined };
}

// --- keeping it current --------------------------------------------------------

/**
 * One line of `ip monitor label route neigh link rule netconf`, as far as it
 * narrows what must be resolved again:
 * - route: the ranges overlapping its prefix (family undefined: both; prefix
 *   undefined: every range of the family);
 * - neigh: the ranges whose resolution went through that entry (neighKey);
 * - other (a link, a policy-routing rule, a forwarding switch, or a line not
 *   understood): `part` of the kernel's state read again and every range
 *   resolved again (a link going down takes its IPv4 routes with it without
 *   a route event).
 * Continuation lines (a link's `link/ether ...`) give undefined.
 */
export type MonitorEvent =
  | { readonly kind: 'route'; readonly family: 4 | 6 | undefined; readonly prefix: { addr: bigint; len: number } | undefined }
  | { readonly kind: 'neigh'; readonly family: 4 | 6; readonly key: string }
  | { readonly kind: 'other'; readonly parts: readonly KernelPart[] };

const ROUTE_TYPES = new Set(['unicast', 'local', 'broadcast', 'anycast', 'multicast', 'blackhole', 'unreachable', 'prohibit', 'throw', 'nat']);
const familyOf = (a: string): 4 | 6 | undefined => (a.includes(':') ? 6 : /^\d+\.\d+\.\d+\.\d+(\/\d+)?$/.test(a) ? 4 : undefined);

export function parseMonitorLine(line: string): MonitorEvent | undefined {
  if (line.trim() === '' || /^\s/.test(line)) return undefined;
  const m = /^\[(\w+)\](.*)$/.exec(line);
  const all: MonitorEvent = { kind: 'other', parts: KERNEL_PARTS };
  if (m === null) return all;
  const label = m[1]!;
  const tokens = m[2]!.trim().split(/\s+/);
  if (tokens[0] === 'Deleted') tokens.shift();
  if (label === 'ROUTE') {
    const type = ROUTE_TYPES.has(tokens[0] ?? '') ? tokens.shift() : undefined;
    const dst = tokens[0] ?? '';
    let family = familyOf(dst.split('/')[0]!);
    // An IPv4 address added or removed (its local route): the kernel deletes the routes whose preferred
    // source it was, or that went through its subnet. 6.18 sends their deletions; older kernels did not
    // (only the local route's: FRRouting issue 1446), and a slot left on such a route would stay there.
    // So every IPv4 range is resolved again (addresses change rarely; review, session 43).
    if (type === 'local' && family === 4) return { kind: 'route', family: 4, prefix: undefined };
    if (dst === 'default') {
      const via = tokens.indexOf('via');
      const gw = via < 0 ? undefined : tokens[via + 1];
      family = gw === undefined || gw === 'inet' || gw === 'inet6' ? undefined : familyOf(gw);
    }
    const prefix = family === undefined ? (dst === 'default' ? undefined : null) : parsePrefix(dst, family);
    if (prefix === null) return { kind: 'other', parts: ['routes4', 'routes6'] };
    return { kind: 'route', family, prefix: prefix ?? undefined };
  }
  if (label === 'NEIGH') {
    if (tokens[0] === 'miss') tokens.shift();
    const dst = tokens[0] ?? '';
    const d = tokens.indexOf('dev');
    const family = familyOf(dst);
    const addr = family === undefined ? undefined : parseAddr(dst, family);
    if (family === undefined || addr === undefined || d < 0 || tokens[d + 1] === undefined) return { kind: 'other', parts: ['neigh'] };
    return { kind: 'neigh', family, key: neighKey(tokens[d + 1]!, family, addr) };
  }
  if (label === 'LINK') return { kind: 'other', parts: ['links'] };
  if (label === 'RULE') return { kind: 'other', parts: ['rules'] };
  if (label === 'NETCONF') return { kind: 'other', parts: ['netconf'] };
  return all;
}

/** Ranges overlap: one contains the other (prefixes). */
const overlaps = (a: { addr: bigint; len: number }, b: { addr: bigint; len: number }, w: number): boolean => contains(a, b, w) || contains(b, a, w);

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
  /**
   * How often the End.M.GTP4.E hints are read (one batch read; resolved
   * again only when one changed); if the `ip monitor` child dies, how
   * often everything is resolved again instead; and the longest wait
   * before a failed pass is tried again. Default 5000 ms.
   */
  readonly periodMs?: number;
  /** How long the data plane may use what was written without a renewal, ms. Default 3000 (renewed every 1000). */
  readonly leaseMs?: number;
  /** The longest a resolution runs without giving the event loop back, ms. Default 5. */
  readonly sliceMs?: number;
  /**
   * Watch for changes (an `ip monitor` child, a periodic run). Default true;
   * false: resolveNow() only, for a lab whose routes do not change (child
   * processes exiting interrupt a long BPF_PROG_TEST_RUN with EINTR).
   */
  readonly watch?: boolean;
  readonly onResolved?: (s: PassSummary) => void;
  /** A pass has read the kernel's tables; its work (resolve, write) follows. */
  readonly onRead?: () => void;
  /** Rules sent back to the FIB lookup because their interface was deleted or made again (dropStale). */
  readonly onStale?: (stale: ReadonlyArray<{ ifname: string; ifindex: number; now: number | null; rules: number }>) => void;
  readonly onError?: (e: Error) => void;
}

/** One resolution pass: the cache's state after it, and what it did. */
export interface PassSummary extends CacheSummary {
  /** Rules whose range was resolved again in this pass (a full pass: every rule with a range), and rules a hint moved into an entry not resolved again. */
  readonly rules: number;
  /** Every range resolved again (start, reload, an interface, rule or forwarding change, resolveNow), not only those a change touched. */
  readonly full: boolean;
  readonly ms: number;
  /** Times the pass gave the event loop back after reading the kernel's tables (sliceMs). */
  readonly yields: number;
}

/** A distinct destination range, the rules using it, and its last resolution. */
interface Entry {
  readonly range: Range;
  readonly key: string;
  refs: number;
  res: Resolution | undefined;
  /** End.M.GTP4.E (all of IPv4, or near a hint): what it depends on is in `deps`. */
  readonly v4any: boolean;
  /** The range as bits (bitsOf): a route event's prefix overlaps it when one starts with the other. */
  readonly bits: string;
  /** v4any: what its last resolution read (undefined: everything IPv4, or not resolved). */
  deps: V4Deps | undefined;
  /** The first rule using it (its rules are a list through the watcher's #next / #prev; -1: none). */
  head: number;
}

type RuleChanges = {
  readonly putPolicies?: Config['policies'];
  readonly putLocalSids?: Config['localsids'];
  readonly delPolicies?: ReadonlyArray<Config['policies'][number]['match'] | { readonly match: Config['policies'][number]['match']; readonly teid?: Config['policies'][number]['teid'] }>;
  readonly delLocalSids?: ReadonlyArray<Config['localsids'][number]['sid']>;
};

const keyOf = (r: Range): string => `${r.family}/${r.addr.toString(16)}/${r.len}${r.near === true ? '~' : ''}`;
/** Rules pointed per map write (one BPF_MAP_UPDATE_BATCH) of a pass; the time slice is checked between writes. */
const WRITE_CHUNK = 2048;
/** mup_nh_hints elements per read (one BPF_MAP_LOOKUP_BATCH, ~0.5 µs each here); the time slice is checked between reads. */
const HINTS_CHUNK = 2048;
/** One route event as a pass matches it against the entries. */
interface RouteEv {
  readonly family: 4 | 6 | undefined;
  /** undefined: every range of the family. */
  readonly bits: string | undefined;
  readonly len: number;
  readonly addr: bigint;
}

/** More `ip monitor` lines than this in one pass: every range is resolved again (cheaper than matching each). */
const MAX_EVENTS = 256;

/** An `ip monitor` stderr line saying the kernel dropped notifications (ENOBUFS, errno 105 on Linux; the text may be translated). */
const LOST_EVENTS = /No buffer space available|ENOBUFS|receive error.*\(105\)/;

/**
 * Runs the cache for a daemon: watch, resolve, write, renew the lease.
 *
 * Incremental (docs/daemon.md "Next hops"): the rules are indexed by their
 * destination range (one entry per distinct range, a rule id -> entry
 * array, and per entry the list of its rules); each `ip monitor` event marks
 * the ranges it can change (a route: those overlapping its prefix, for
 * End.M.GTP4.E those whose answer it can move (V4Deps); a neighbour: those
 * resolved through it), and a pass re-reads only the kernel's tables the
 * events name, resolves those ranges again and re-points only their rules,
 * in batches, giving the event loop back every `sliceMs`. A rule put through the API is
 * resolved alone. Every range is resolved again only at start, on reload,
 * on an interface, policy-routing rule or forwarding change, when `ip
 * monitor` says events were lost, after a pass that failed, and on
 * resolveNow(); such a pass gives the event loop back every `sliceMs`, and
 * changes arriving meanwhile make the next pass, an incremental one.
 */
export class NextHopWatcher {
  readonly #o: WatcherOptions;
  #child: ChildProcess | undefined;
  #timer: NodeJS.Timeout | undefined;
  #period: NodeJS.Timeout | undefined;
  #lease: NodeJS.Timeout | undefined;
  #cache: NextHopCache | undefined;
  #cacheFor: Dataplane | undefined;
  #running: Promise<void> | undefined;
  #again = false;
  #stopped = false;
  /** The kernel's tables as last read: rules put through the API are resolved against them. */
  #k: KernelState | undefined;
  /** Work for the next pass. */
  #parts = new Set<KernelPart>(KERNEL_PARTS);
  #events: MonitorEvent[] = [];
  #allRanges = true;
  #rebuild = true;
  /** The index: distinct ranges, and per rule id its entry (-1: none). */
  #entries: Array<Entry | undefined> = [];
  #freeEntries: number[] = [];
  #byKey: Map<string, number> = new ShardedMap<number>();
  #ruleEntry = new Int32Array(0);
  /** Per rule id, the next and previous rule of its entry's list (-1: none). */
  #next = new Int32Array(0);
  #prev = new Int32Array(0);
  /** Hints read by the periodic check that differ from #hints: the next pass applies them. */
  #newHints: Buffer | undefined;
  #readingHints = false;
  /** End.M.GTP4.E rules (their range follows the hint) and the hints last read. */
  #gtp4e = new Uint8Array(0);
  #nGtp4e = 0;
  #hints: Buffer | undefined;
  #building = false;
  #pendingPuts: Array<{ c: RuleChanges; gone: readonly number[] }> = [];
  #lineBuf = '';
  /** The kernel's tables are read through these (spawned at the first read, once). */
  #batch: IpBatch | undefined;
  last: (PassSummary & { readonly at: string }) | undefined;
  /**
   * Since start: rules resolved again (passes, and rules put by API changes
   * and reload edits: apiRules), passes by kind, full passes asked for
   * because `ip monitor` said events were lost (lostEventResyncs), and
   * passes that failed (failedPasses: each is tried again, #retry).
   */
  readonly totals = { rules: 0, fullPasses: 0, incrementalPasses: 0, apiRules: 0, lostEventResyncs: 0, failedPasses: 0 };
  /** Passes failed in a row: the retry waits longer each time (#retry). */
  #failures = 0;

  constructor(o: WatcherOptions) {
    this.#o = o;
  }

  start(): void {
    const leaseMs = this.#o.leaseMs ?? 3000;
    const periodMs = this.#o.periodMs ?? 5000;
    this.#lease = setInterval(() => this.#renew(), Math.max(100, Math.floor(leaseMs / 3)));
    this.#lease.unref();
    this.#batch = new IpBatch(this.#o.netns);
    this.#batch.startAll();
    if (this.#o.watch === false) return;
    // setpriv sets PR_SET_PDEATHSIG before it execs ip: the kernel kills ip
    // when this process dies, however it dies.
    const child = spawnChild('setpriv', underSetpriv(monitorArgs(this.#o.netns)), MONITOR_STDIO);
    this.#child = child;
    child.stdout.on('data', (d: Buffer) => this.#onMonitor(d.toString()));
    let errLine = '';
    child.stderr.on('data', (d: Buffer) => {
      const lines = (errLine + d.toString()).split('\n');
      errLine = lines.pop()!;
      for (const line of lines) this.#onMonitorError(line);
    });
    child.on('error', (e) => this.#o.onError?.(e));
    child.on('exit', (code, signal) => {
      if (this.#stopped) return;
      this.#onMonitorError(errLine);
      this.#o.onError?.(new Error(`ip monitor exited (${signal ?? code}); every next hop is resolved again every ${periodMs} ms instead`));
      clearInterval(this.#period);
      this.#period = setInterval(() => this.#full(), periodMs);
      this.#period.unref();
      this.#full();
    });
    // The hints of End.M.GTP4.E rules: one batch read, compared with the last.
    this.#period = setInterval(() => this.#hintsTick(), periodMs);
    this.#period.unref();
    this.changed(0);
  }

  /**
   * A line `ip monitor` wrote on stderr: logged; and when it says the
   * kernel dropped notifications (its netlink socket overflowed: iproute2
   * prints `netlink receive error No buffer space available (105)` and
   * reads on), the changes they told of are unknown, so the next pass is a
   * full one. Nothing else would ever apply them: no pass runs on a timer
   * while the monitor lives.
   */
  #onMonitorError(line: string): void {
    const text = line.trim();
    if (text === '') return;
    const lost = LOST_EVENTS.test(text);
    this.#o.onError?.(new Error(`ip monitor: ${text}${lost ? ' (events were lost: every next hop is resolved again)' : ''}`));
    if (!lost || this.#stopped) return;
    this.totals.lostEventResyncs++;
    this.#full(this.#o.debounceMs ?? 50);
  }

  #onMonitor(text: string): void {
    const lines = (this.#lineBuf + text).split('\n');
    this.#lineBuf = lines.pop()!;
    let links = false;
    for (const line of lines) {
      const ev = parseMonitorLine(line);
      if (ev === undefined) continue;
      if (ev.kind === 'other') {
        for (const p of ev.parts) this.#parts.add(p);
        this.#allRanges = true;
        if (ev.parts.includes('links')) links = true;
      } else {
        if (ev.kind === 'route') this.#parts.add(ev.family === 6 ? 'routes6' : 'routes4').add(ev.family === 4 ? 'routes4' : 'routes6');
        else this.#parts.add('neigh');
        if (this.#events.length < MAX_EVENTS) this.#events.push(ev);
        else this.#allRanges = true;
      }
    }
    if (links) this.linksChanged();
    this.changed();
  }

  /**
   * Every periodMs: read the End.M.GTP4.E hints (in slices, giving the loop
   * back: one read of 131,072 took 58 ms here, the idle daemon's 75 ms
   * stall every 5 s) and start a pass when one moved.
   */
  #hintsTick(): void {
    const cache = this.#cache;
    const dp = this.#o.dataplane();
    if (this.#nGtp4e === 0 || cache === undefined || this.#cacheFor !== dp || this.#running !== undefined || this.#readingHints) return;
    this.#readingHints = true;
    void this.#readHints(cache)
      .then((h) => {
        if (h === undefined || this.#stopped || this.#cache !== cache || this.#cacheFor !== this.#o.dataplane()) return;
        if (this.#hints === undefined || !h.equals(this.#hints)) {
          this.#newHints = h;
          this.changed(0);
        }
      })
      .catch((e: unknown) => this.#o.onError?.(e as Error))
      .finally(() => (this.#readingHints = false));
  }

  /**
   * mup_nh_hints as one buffer (u32 LE per rule id), read HINTS_CHUNK
   * elements at a time over the rule ids of End.M.GTP4.E rules (the rest
   * left 0), the loop given back every sliceMs. Undefined: stopped.
   */
  async #readHints(cache: NextHopCache): Promise<Buffer | undefined> {
    const n = cache.rules;
    const out = Buffer.alloc(4 * n);
    const g = this.#gtp4e;
    let lo = g.indexOf(1);
    if (lo < 0) return out;
    const hi = g.lastIndexOf(1) + 1;
    const slice = this.#o.sliceMs ?? 5;
    let t = performance.now();
    for (; lo < hi; lo += HINTS_CHUNK) {
      if (performance.now() - t >= slice) {
        await nextTurn();
        t = performance.now();
        if (this.#stopped || this.#cache !== cache) return undefined;
      }
      const count = Math.min(HINTS_CHUNK, hi - lo);
      cache.readHints(lo, count).copy(out, 4 * lo);
    }
    return out;
  }

  /** Everything again: every table read, every range resolved (the index is kept). */
  #full(delay = 0): void {
    for (const p of KERNEL_PARTS) this.#parts.add(p);
    this.#allRanges = true;
    this.changed(delay);
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
      void this.#kick().catch((e: unknown) => this.#o.onError?.(e as Error));
    }, delay);
  }

  /**
   * An interface may have been deleted or made again: send the rules whose
   * slot names a dead ifindex back to the FIB lookup now (synchronous, no
   * `ip` run), and resolve again at once. Called on every link event here
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
      // The tables of the last read name the old device: nothing is
      // resolved against them any more (rules put through the API wait for
      // the next pass, which reads them all again).
      this.#k = undefined;
      for (const e of this.#entries) if (e !== undefined) e.res = undefined;
      this.#o.onStale?.(stale);
      this.#full();
    } catch (e) {
      this.#o.onError?.(e as Error);
    }
  }

  /** The rules changed wholesale (a reload that swapped the program or the interfaces, or wrote the tables whole): index them again and resolve every range. */
  rulesChanged(): void {
    this.#rebuild = true;
    this.#allRanges = true;
    this.changed();
  }

  /** Rule ids of the rules `c` deletes, as the tables hold them now (ask before applying `c`; give them to rulesPut after). */
  deletedRules(c: RuleChanges): number[] {
    const dp = this.#o.dataplane();
    if (this.#stopped || dp === undefined) return [];
    const ids: number[] = [];
    for (const k of c.delPolicies ?? []) {
      const r = 'match' in k ? dp.rules.policyRule(k.match, k.teid) : dp.rules.policyRule(k);
      if (r !== undefined) ids.push(r);
    }
    for (const sid of c.delLocalSids ?? []) {
      const r = dp.rules.localsidRule(sid);
      if (r !== undefined) ids.push(r);
    }
    // A local SID put with another behaviour takes a new id: its old one goes as a delete's.
    for (const l of c.putLocalSids ?? []) {
      const r = dp.rules.localsidRenumbered(l.sid, l.behavior);
      if (r !== undefined) ids.push(r);
    }
    return ids;
  }

  /**
   * Rules put or deleted one at a time (the API), after the tables took
   * them: the rules put are resolved alone, against the kernel's tables as
   * last read, and pointed at their next hop; the deleted ones (`gone`,
   * from deletedRules) point nowhere. No other rule is looked at. During a
   * pass that indexes the rules (start, reload) they wait for its end.
   */
  rulesPut(c: RuleChanges, gone: readonly number[] = []): void {
    const dp = this.#o.dataplane();
    if (this.#stopped || dp === undefined) return;
    if (this.#building || this.#k === undefined || this.#cache === undefined || this.#cacheFor !== dp || this.#ruleEntry.length === 0) {
      this.#pendingPuts.push({ c, gone });
      this.changed();
      return;
    }
    const touched = this.#applyPuts(dp, c, gone);
    const ingress = this.#o.ingress();
    const cache = this.#cache;
    const slots = new Map<number, number>();
    for (const r of touched) {
      const idx = this.#ruleEntry[r]!;
      const e = idx < 0 ? undefined : this.#entries[idx];
      if (e === undefined) continue;
      if (e.res === undefined) this.#resolveEntry(e, this.#k, ingress);
      if (!slots.has(idx)) slots.set(idx, cache.slotFor(e.range, e.res));
    }
    cache.pointMany(touched, (r) => slots.get(this.#ruleEntry[r]!) ?? 0);
    const n = touched.filter((r) => this.#ruleEntry[r]! >= 0).length;
    this.totals.rules += n;
    this.totals.apiRules += n;
  }

  /** Index the rules of `c` (and forget `gone`); the rule ids touched. */
  #applyPuts(dp: Dataplane, c: RuleChanges, gone: readonly number[]): number[] {
    const touched: number[] = [...gone];
    for (const r of gone) this.#forget(r);
    // Policies that follow each other mostly share a range (a batch's policies of one profile): its key text,
    // made with a bigint's hex digits, is made again only when the range is another.
    let lastAddr: bigint | undefined;
    let lastLen = -1;
    let lastKey = '';
    for (const p of c.putPolicies ?? []) {
      const rule = dp.rules.policyRuleOf(p);
      if (rule === undefined) continue;
      this.#setGtp4e(rule, false);
      const range = policyRange(p);
      if (range.addr !== lastAddr || range.len !== lastLen) {
        lastKey = keyOf(range);
        lastAddr = range.addr;
        lastLen = range.len;
      }
      this.#assign(rule, range, lastKey);
      touched.push(rule);
    }
    for (const l of c.putLocalSids ?? []) {
      const rule = dp.rules.localsidRule(l.sid);
      if (rule === undefined) continue;
      this.#indexLocalSid(rule, l);
      touched.push(rule);
    }
    return touched;
  }

  #indexLocalSid(rule: number, l: Config['localsids'][number]): void {
    const range = localSidRange(l);
    const any = range !== undefined && range.family === 4 && range.len === 0;
    this.#setGtp4e(rule, any);
    if (range === undefined) this.#forget(rule);
    else if (any) {
      const h = this.#hints !== undefined && 4 * rule + 4 <= this.#hints.length ? this.#hints.readUInt32LE(4 * rule) : 0;
      this.#assign(rule, h === 0 ? ANY_IPV4 : nearRange(h));
    } else this.#assign(rule, range);
  }

  #setGtp4e(rule: number, on: boolean): void {
    if (rule >= this.#gtp4e.length || (this.#gtp4e[rule] === 1) === on) return;
    this.#gtp4e[rule] = on ? 1 : 0;
    this.#nGtp4e += on ? 1 : -1;
  }

  /** Rule `rule` uses `range` now: its entry (made if new, unresolved). `key`: keyOf(range), when the caller has it. */
  #assign(rule: number, range: Range, key = keyOf(range)): number {
    if (rule < 0 || rule >= this.#ruleEntry.length) return -1;
    let idx = this.#byKey.get(key);
    if (idx === undefined) {
      idx = this.#freeEntries.pop() ?? this.#entries.length;
      const v4any = range.family === 4 && (range.len === 0 || range.near === true);
      this.#entries[idx] = { range, key, refs: 0, res: undefined, v4any, bits: v4any ? '' : bitsOf(range.addr, range.len, WIDTH[range.family]), deps: undefined, head: -1 };
      this.#byKey.set(key, idx);
    }
    const old = this.#ruleEntry[rule]!;
    if (old === idx) return idx;
    if (old >= 0) this.#unlink(rule, old);
    const e = this.#entries[idx]!;
    e.refs++;
    this.#ruleEntry[rule] = idx;
    // Linked at the head of its entry's list.
    this.#prev[rule] = -1;
    this.#next[rule] = e.head;
    if (e.head >= 0) this.#prev[e.head] = rule;
    e.head = rule;
    return idx;
  }

  #forget(rule: number): void {
    if (rule < 0 || rule >= this.#ruleEntry.length) return;
    const old = this.#ruleEntry[rule]!;
    if (old >= 0) this.#unlink(rule, old);
    this.#ruleEntry[rule] = -1;
    this.#setGtp4e(rule, false);
  }

  /** Take `rule` off entry `idx`'s list (and drop the entry when it was the last). */
  #unlink(rule: number, idx: number): void {
    const e = this.#entries[idx]!;
    const p = this.#prev[rule]!;
    const n = this.#next[rule]!;
    if (p >= 0) this.#next[p] = n;
    else e.head = n;
    if (n >= 0) this.#prev[n] = p;
    this.#prev[rule] = -1;
    this.#next[rule] = -1;
    this.#unref(idx);
  }

  #resolveEntry(e: Entry, k: KernelState, ingress: readonly string[]): void {
    const r = resolveWithDeps(k, e.range, ingress);
    e.res = r.res;
    e.deps = r.deps;
  }

  #unref(idx: number): void {
    const e = this.#entries[idx]!;
    if (--e.refs > 0) return;
    this.#byKey.delete(e.key);
    this.#entries[idx] = undefined;
    this.#freeEntries.push(idx);
  }

  /** Read the kernel's tables the changes name, resolve what they touch, write; one at a time (a change during a run runs it again). */
  async resolveNow(): Promise<void> {
    for (const p of KERNEL_PARTS) this.#parts.add(p);
    this.#allRanges = true;
    return this.#kick();
  }

  #kick(): Promise<void> {
    if (this.#running !== undefined) {
      this.#again = true;
      return this.#running;
    }
    this.#running = (async () => {
      try {
        do {
          this.#again = false;
          await this.#pass();
        } while (this.#again && !this.#stopped);
        this.#failures = 0;
      } catch (e) {
        this.#retry();
        throw e;
      } finally {
        this.#running = undefined;
      }
    })();
    return this.#running;
  }

  /**
   * A pass failed (a table reader killed, a map write refused): it left
   * its work for the next pass (#pass), and that pass must come even if no
   * change wakes one (a change that came during the failed pass, #again,
   * was waiting for its end). Tried again after twice the debounce,
   * doubling while passes keep failing, at most periodMs apart.
   */
  #retry(): void {
    this.totals.failedPasses++;
    if (this.#stopped) return;
    this.#failures++;
    const base = Math.max(1, this.#o.debounceMs ?? 50);
    const delay = Math.min(this.#o.periodMs ?? 5000, base * 2 ** Math.min(this.#failures, 20));
    // The retry's wait, not a change's debounce: a change during it waits too.
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.changed(delay);
  }

  /** A pass was cut short (the data plane changed under it): do it all again. */
  #redo(): void {
    this.#rebuild = true;
    this.#allRanges = true;
    this.#again = true;
  }

  /** Index every rule (start, rulesChanged, a new data plane), giving the loop back every sliceMs. False: cut short. */
  async #index(dp: Dataplane, cache: NextHopCache): Promise<boolean> {
    this.#building = true;
    let made = false;
    try {
      const n = cache.rules;
      this.#entries = [];
      this.#freeEntries = [];
      this.#byKey = new ShardedMap();
      this.#ruleEntry = new Int32Array(n).fill(-1);
      this.#next = new Int32Array(n).fill(-1);
      this.#prev = new Int32Array(n).fill(-1);
      this.#gtp4e = new Uint8Array(n);
      this.#nGtp4e = 0;
      this.#newHints = undefined;
      // Every hint (no End.M.GTP4.E rule is known yet to narrow the read), in slices.
      this.#gtp4e.fill(1);
      const hints = await this.#readHints(cache);
      this.#gtp4e.fill(0);
      if (hints === undefined || this.#stopped || this.#o.dataplane() !== dp) return false;
      this.#hints = hints;
      const config = this.#o.config();
      const slice = this.#o.sliceMs ?? 5;
      let t = performance.now();
      let i = 0;
      const pause = async (): Promise<boolean> => {
        if ((++i & 63) !== 0 || performance.now() - t < slice) return true;
        await nextTurn();
        t = performance.now();
        return !this.#stopped && this.#o.dataplane() === dp;
      };
      for (const p of config.policies) {
        if (!(await pause())) return false;
        const rule = dp.rules.policyRuleOf(p);
        if (rule !== undefined) this.#assign(rule, policyRange(p));
      }
      for (const l of config.localsids) {
        if (!(await pause())) return false;
        const rule = dp.rules.localsidRule(l.sid);
        if (rule !== undefined) this.#indexLocalSid(rule, l);
      }
      // API changes made while this ran, in their order.
      for (const { c, gone } of this.#pendingPuts.splice(0)) this.#applyPuts(dp, c, gone);
      made = true;
      return true;
    } finally {
      this.#building = false;
      // Cut short or failed: the index is half made, and the next pass makes it again.
      if (!made) this.#rebuild = true;
    }
  }

  /**
   * End.M.GTP4.E rules whose hint changed (as the periodic check read
   * them) move to a range near it (unresolved: the pass resolves it), and
   * go into `moved`: the pass writes them whether their new entry is one it
   * resolves or one that exists already (another rule's hint, resolved and
   * current, so not resolved again).
   */
  #applyHints(moved: Set<number>): void {
    const h = this.#newHints;
    this.#newHints = undefined;
    if (h === undefined || this.#nGtp4e === 0) return;
    const old = this.#hints;
    this.#hints = h;
    if (old !== undefined && h.equals(old)) return;
    const g = this.#gtp4e;
    for (let r = 0; r < g.length && 4 * r + 4 <= h.length; r++) {
      if (g[r] !== 1) continue;
      const v = h.readUInt32LE(4 * r);
      if (old !== undefined && old.readUInt32LE(4 * r) === v) continue;
      this.#assign(r, v === 0 ? ANY_IPV4 : nearRange(v));
      moved.add(r);
    }
  }

  async #pass(): Promise<void> {
    const t0 = performance.now();
    const parts = this.#parts;
    const events = this.#events;
    let all = this.#allRanges;
    let rebuild = this.#rebuild;
    this.#parts = new Set();
    this.#events = [];
    this.#allRanges = false;
    this.#rebuild = false;
    let k: KernelState;
    try {
      k = await readKernelState(this.#o.netns, parts, this.#k, this.#batch);
    } catch (e) {
      for (const p of parts) this.#parts.add(p);
      this.#events.push(...events);
      this.#allRanges ||= all;
      this.#rebuild ||= rebuild;
      throw e;
    }
    if (this.#stopped) return;
    const dp = this.#o.dataplane();
    if (dp === undefined) {
      this.#redo();
      this.#again = false;
      return;
    }
    this.#k = k;
    try {
      await this.#work(dp, k, events, all, rebuild, t0);
    } catch (e) {
      // Part of the work may be done (entries resolved again, some rules
      // written) and the events are spent: the next pass resolves every
      // range against the tables just read, and writes each rule whose
      // entry in the map is not its answer (#write counts only what the
      // kernel took). An index left half made is made again (#index).
      this.#allRanges = true;
      throw e;
    }
  }

  /** A pass's work after its read of the kernel's tables `k`: index if asked, resolve what the events touch, write. */
  async #work(dp: Dataplane, k: KernelState, events: readonly MonitorEvent[], all: boolean, rebuild: boolean, t0: number): Promise<void> {
    this.#o.onRead?.();
    if (this.#cacheFor !== dp || this.#cache === undefined) {
      const s = dp.config.settings;
      this.#cache = new NextHopCache(dp.nexthop, s.maxPolicies + s.maxLocalSids);
      this.#cacheFor = dp;
      rebuild = true;
    }
    const cache = this.#cache;
    const slice = this.#o.sliceMs ?? 5;
    let t = performance.now();
    let yields = 0;
    /** Give the loop back when this turn has run sliceMs; false: the pass must stop (stopped, or redo set). */
    /** Still the pass it was (not stopped; same data plane; no interface change dropped the tables read); else redo set. */
    const current = (): boolean => {
      if (this.#stopped) return false;
      if (this.#o.dataplane() !== dp || this.#cache !== cache || this.#k !== k) {
        this.#redo();
        return false;
      }
      return true;
    };
    const pause = async (): Promise<boolean> => {
      if (performance.now() - t < slice) return true;
      await nextTurn();
      yields++;
      t = performance.now();
      return current();
    };
    /** Rules that changed entry before anything was resolved (a hint, a put that waited): written by this pass. */
    const moved = new Set<number>();
    if (rebuild || this.#ruleEntry.length === 0) {
      all = true;
      if (!(await this.#index(dp, cache))) return this.#redo();
      if (!current()) return;
      t = performance.now();
    } else {
      // Put while the tables were unread (after an interface change): written by this pass, whatever entry they joined.
      if (this.#pendingPuts.length > 0) for (const { c, gone } of this.#pendingPuts.splice(0)) for (const r of this.#applyPuts(dp, c, gone)) moved.add(r);
      // A full pass (and resolveNow) reads the End.M.GTP4.E hints too; otherwise the periodic check does.
      if (all && this.#nGtp4e > 0) {
        const h = await this.#readHints(cache);
        if (h === undefined || !current()) return;
        this.#newHints = h;
        t = performance.now();
      }
    }
    this.#applyHints(moved);

    // The entries to resolve again: those a change can affect (docs/daemon.md "Next hops").
    const routes: RouteEv[] = [];
    const neighs = new Set<string>();
    let neigh4 = false;
    for (const ev of events) {
      if (ev.kind === 'route') {
        const w = ev.family === undefined ? 0 : WIDTH[ev.family];
        routes.push(ev.prefix === undefined || ev.family === undefined ? { family: ev.family, bits: undefined, len: 0, addr: 0n } : { family: ev.family, bits: bitsOf(ev.prefix.addr, ev.prefix.len, w), len: ev.prefix.len, addr: ev.prefix.addr });
      } else if (ev.kind === 'neigh') {
        neighs.add(ev.key);
        if (ev.family === 4) neigh4 = true;
      }
    }
    const routes4 = routes.filter((ev) => ev.family !== 6);
    const affects = (e: Entry): boolean => {
      if (all || e.res === undefined) return true;
      if (e.v4any) {
        const d = e.deps;
        if (d === undefined) return neigh4 || routes4.length > 0;
        for (const key of d.neighs) if (neighs.has(key)) return true;
        for (const ev of routes4) if (v4RouteMayChange(d, ev.bits === undefined ? undefined : ev)) return true;
        return false;
      }
      if (e.res.neigh !== undefined && neighs.has(e.res.neigh)) return true;
      const f = e.range.family;
      for (const ev of routes) if ((ev.family === undefined || ev.family === f) && (ev.bits === undefined || overlapBits(ev.bits, e.bits))) return true;
      return false;
    };
    const dirty: Entry[] = [];
    const entries = this.#entries;
    for (let i = 0; i < entries.length; i++) {
      if ((i & 255) === 255 && !(await pause())) return;
      const e = entries[i];
      if (e !== undefined && affects(e)) dirty.push(e);
    }
    const ingress = this.#o.ingress();
    for (let i = 0; i < dirty.length; i++) {
      if ((i & 15) === 15 && !(await pause())) return;
      const e = dirty[i]!;
      // Dropped meanwhile (its last rule deleted through the API): nothing points to it.
      if (this.#entries[this.#byKey.get(e.key) ?? -1] !== e) continue;
      this.#resolveEntry(e, k, ingress);
    }

    // Point the rules of the entries resolved at their next hop, WRITE_CHUNK
    // rules per batch write, the loop given back between writes. Each rule
    // is pointed at its entry's answer as it stands at that write: a rule
    // put through the API meanwhile was pointed at the same (newest) answer
    // already, so nothing older is written over it.
    let rules: Int32Array;
    let n = 0;
    if (all) {
      rules = new Int32Array(this.#ruleEntry.length);
      for (let r = 0; r < rules.length; r++) rules[r] = r;
      for (const e of dirty) n += e.refs;
    } else {
      for (const e of dirty) n += e.refs;
      rules = new Int32Array(n + moved.size);
      let i = 0;
      for (const e of dirty) for (let r = e.head; r >= 0 && i < n; r = this.#next[r]!) rules[i++] = r;
      // A moved rule in an entry not resolved again (it joined one that
      // exists, or left for none) is written too; the others are in their
      // entry's list already. Without this it kept its old slot in the map
      // while no entry listed it there: no later change of the old range
      // re-pointed it, only a full pass.
      if (moved.size > 0) {
        const resolved = new Set(dirty);
        for (const r of moved) {
          const idx = this.#ruleEntry[r]!;
          const e = idx < 0 ? undefined : this.#entries[idx];
          if (e !== undefined && resolved.has(e)) continue;
          rules[i++] = r;
          n++;
        }
      }
      rules = rules.subarray(0, i);
    }
    let written = 0;
    for (let at = 0; at < rules.length; at += WRITE_CHUNK) {
      if (at > 0 && !(await pause())) return;
      const chunk = rules.subarray(at, Math.min(rules.length, at + WRITE_CHUNK));
      const slots = new Map<number, number>();
      written += cache.pointMany(chunk, (r) => {
        const idx = this.#ruleEntry[r]!;
        const e = idx < 0 ? undefined : this.#entries[idx];
        if (e === undefined) return 0;
        // Not resolved (put while the pass read the tables anew, waiting for the next pass): left as it is.
        if (e.res === undefined) return cache.pointed(r);
        let slot = slots.get(idx);
        if (slot === undefined) slots.set(idx, (slot = cache.slotFor(e.range, e.res)));
        return slot;
      });
    }
    // The tables were read before an interface was deleted or made again:
    // what was just written may name its old ifindex.
    this.linksChanged();
    cache.renewLease(this.#o.leaseMs ?? 3000);
    const fib: Record<string, number> = {};
    let cached = 0;
    for (const e of this.#entries) {
      if (e === undefined) continue;
      if (e.res?.ok === true) cached += e.refs;
      else {
        const reason = e.res === undefined ? 'not resolved' : e.res.reason;
        fib[reason] = (fib[reason] ?? 0) + e.refs;
      }
    }
    this.totals.rules += n;
    if (all) this.totals.fullPasses++;
    else this.totals.incrementalPasses++;
    const summary: PassSummary = { cached, fib, ranges: dirty.length, written, rules: n, full: all, ms: Math.round(performance.now() - t0), yields };
    this.last = { ...summary, at: new Date().toISOString() };
    this.#o.onResolved?.(summary);
  }

  /** Stop watching; the data plane goes back to the FIB lookup (lease 0). */
  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    for (const t of [this.#timer, this.#period, this.#lease]) if (t !== undefined) clearTimeout(t);
    this.#child?.kill('SIGKILL');
    this.#batch?.close();
    try {
      if (this.#cache !== undefined && this.#cacheFor === this.#o.dataplane()) this.#cache.disable();
    } catch {
      // The data plane is already closed.
    }
  }
}
