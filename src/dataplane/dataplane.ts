/**
 * The loaded data plane: open build/mup.bpf.o, size its maps and write its
 * configuration from a Config, load it, check its layouts against the codec,
 * fill the tables; then run frames through it (BPF_PROG_TEST_RUN) and read
 * its counters; attach it to interfaces (in other network namespaces too).
 */
import { existsSync } from 'node:fs';
import { endianness } from 'node:os';
import type { Config, LocalSid, LocalSidBehavior, Policy, RuleSection, Session, Settings, Where } from '../config/types.js';
import { checkLayouts, eventNames } from './btf.js';
import { localSidKey, policyKey, sessionKey, whereText } from '../config/keys.js';
import { ROWS, type Rows } from '../host/rows.js';
import { runNow, runYielding, SliceClock } from '../host/slice-clock.js';
import {
  COUNTER_STRIDE,
  ENUMS,
  MUP_EVENT_SLOTS,
  MUP_RETIRED_SLOT,
  configFields,
  decodePercpuCounter,
  encodeConfig,
  LAYOUTS,
  type CounterValue,
} from './codec.js';
import {
  btfDatasecVar,
  closeFd,
  findMap,
  findProgram,
  mapFd,
  mapInfo,
  mapReuseFd,
  mapSetInitialValue,
  mapSetMaxEntries,
  mapValueSize,
  numPossibleCpus,
  objGet,
  objectBtf,
  objectClose,
  objectLoad,
  objectLoadAsync,
  objectOpen,
  programFd,
  testRun,
  xdpAttach,
  xdpDetachProgram,
  XDP_FLAGS_DRV_MODE,
  XDP_FLAGS_SKB_MODE,
  XDP_FLAGS_UPDATE_IF_NOEXIST,
  type BpfMap,
  type BpfObject,
} from './libbpf.js';
import { ifIndex, inNetns, NetnsError } from './netns.js';
import { graceClock } from './grace.js';
import type { WriteThread } from './write-thread.js';
import { markNewNextHopMaps } from './nexthop-fresh.js';
import { addOlderCounters, BPF_MAP_TYPE_PERCPU_ARRAY, counterElements, counterRange, slotIsZero } from './counter-map.js';
import { MAP_CONFIG, MAP_COUNTERS, MAP_LOCALSIDS, MAP_POLICIES, MAP_SESSIONS, Tables, TablesRefusedError, maxSessionsOf, readSlotCounts, zeroCounterSlots, type ApplyResult, type Changes, type TableFds } from './tables.js';

export { DEFAULT_OBJECT } from '../host/paths.js';
import { DEFAULT_OBJECT } from '../host/paths.js';

export const PROGRAM_NAME = 'mup_xdp';
export { MAP_CONFIG, MAP_COUNTERS, MAP_LOCALSIDS, MAP_POLICIES, MAP_SESSIONS };

/** The object's section holding mup_counter_slots (bpf/maps.h): the counter map's slots per CPU, set before the load. */
const COUNTER_SLOTS_SECTION = '.rodata.counters';
/** The two configuration copies and the selector (bpf/maps.h). */
export const CONFIG_VAR = 'mup_cfgs';
export const CONFIG_SEL_VAR = 'mup_cfg_sel';
export { ETH_HLEN, TEST_RUN_MAX_FRAME } from './frame-limits.js';
import { ETH_HLEN, TEST_RUN_MAX_FRAME } from './frame-limits.js';

/** The BPF object file is not there. */
export class ObjectNotFoundError extends Error {
  override readonly name = 'ObjectNotFoundError';
  constructor(readonly object: string) {
    super(`${object} not found: build it with \`make\` (or \`make bpf\`), or pass --object PATH`);
  }
}

export type Verdict = 'aborted' | 'drop' | 'pass' | 'tx' | 'redirect';
/** XDP return codes 0..4. */
export const VERDICTS: readonly Verdict[] = ['aborted', 'drop', 'pass', 'tx', 'redirect'];

export interface RunResult {
  readonly verdict: Verdict;
  /** Event counted for this frame (e.g. "fwd_tx", "drop_gtp_ext_zero"); null if none was. */
  readonly event: string | null;
  /** The frame as the program left it (data_out). */
  readonly out: Buffer;
  /** ns, as measured by the kernel for this single run. */
  readonly duration: number;
}

export interface RuleCounter extends CounterValue {
  /** Counter slot of the rule (stable while its key exists). */
  readonly rule: number;
  readonly kind: 'policy' | 'localsid' | 'session';
  /** Key path of the rule in the config, e.g. "policies[3]". */
  readonly where: string;
  /** The rule's key: match prefix (policy) or SID prefix (local SID). */
  readonly key: string;
  readonly name?: string;
}

type CountedRule = { readonly where: Where; readonly name?: string };
const KINDS = ['policy', 'localsid', 'session'] as const;
const SECTIONS: readonly RuleSection[] = ['policies', 'localsids', 'sessions'];

/**
 * The per-rule counters of one read as columns (rule id, kind, the rule
 * object, packets, bytes); a RuleCounter is made for each as the list is
 * iterated, so an answer streamed from it makes young objects only
 * (src/host/rows.ts).
 */
export class RuleCounterRows implements Rows<RuleCounter> {
  readonly [ROWS] = true as const;
  readonly #ids: Uint32Array;
  readonly #kinds: Uint8Array;
  readonly #rules: readonly CountedRule[];
  readonly #packets: BigUint64Array;
  readonly #bytes: BigUint64Array;
  readonly length: number;

  constructor(ids: Uint32Array, kinds: Uint8Array, rules: readonly CountedRule[], packets: BigUint64Array, bytes: BigUint64Array, length: number) {
    this.#ids = ids;
    this.#kinds = kinds;
    this.#rules = rules;
    this.#packets = packets;
    this.#bytes = bytes;
    this.length = length;
  }

  /** Whether a row has one of these rule ids. */
  hasAnyId(ids: ReadonlySet<number>): boolean {
    for (let i = 0; i < this.length; i++) if (ids.has(this.#ids[i]!)) return true;
    return false;
  }

  *[Symbol.iterator](): Iterator<RuleCounter> {
    for (let i = 0; i < this.length; i++) yield this.row(i);
  }

  /** Row i's packets, without its row (a pick by counts, src/daemon/metrics.ts topRulesSlices). */
  packetsAt(i: number): bigint {
    return this.#packets[i]!;
  }

  /** Row i: its rule's `where` and key texts are made here (a row kept as such has none: src/config/rows.ts). */
  row(i: number): RuleCounter {
    const k = this.#kinds[i]!;
    const r = this.#rules[i]!;
    const kind = KINDS[k]!;
    const where = whereText(SECTIONS[k]!, r);
    const key = k === 0 ? policyKey(r as Policy) : k === 1 ? localSidKey(r as LocalSid) : sessionKey(r as Session);
    const rule = this.#ids[i]!;
    const packets = this.#packets[i]!;
    const bytes = this.#bytes[i]!;
    return r.name === undefined ? { rule, kind, where, key, packets, bytes } : { rule, kind, where, key, name: r.name, packets, bytes };
  }

  toJSON(): RuleCounter[] {
    return [...this];
  }
}

/** Counters whose rule list is made row by row when iterated. */
export type CountersRows = Omit<Counters, 'rules'> & { readonly rules: RuleCounterRows };

/** The counters with their rule list made whole (callers that keep, index or filter it). */
function withRuleArray(c: CountersRows): Counters {
  return { events: c.events, rules: [...c.rules], functions: c.functions };
}

/**
 * Which rules a counter read lists: 'all', 'active' (rules that have
 * translated packets), 'none', or at most N (in config order).
 */
export type RuleSelection = 'all' | 'active' | 'none' | number;

export interface Counters {
  /** Every event of enum mup_event, zeros included. */
  readonly events: Record<string, CounterValue>;
  /** Rules in the tables, policies first, each in config order (as selected). */
  readonly rules: RuleCounter[];
  /** Translated packets per function: the sum of its rules. */
  readonly functions: Record<TranslationFunction, CounterValue>;
}

/** H.M.GTP4.D (policies), the local SID behaviours and H.M.Session.Encaps (sessions). */
export type TranslationFunction = 'h_m_gtp4_d' | 'end_m_gtp4_e' | 'end_m_gtp6_e' | 'end_m_gtp6_d' | 'end_m_gtp6_d_di' | 'h_m_session_encaps';

/** The counter name of each local SID behaviour. */
export const FUNCTION_OF: Readonly<Record<LocalSidBehavior, TranslationFunction>> = {
  'end.m.gtp4.e': 'end_m_gtp4_e',
  'end.m.gtp6.e': 'end_m_gtp6_e',
  'end.m.gtp6.d': 'end_m_gtp6_d',
  'end.m.gtp6.d.di': 'end_m_gtp6_d_di',
};

/** Each function's index in enum mup_function (bpf/mup_shared.h): its retired counter slot is MUP_RETIRED_SLOT + this. */
const FUNCTION_SLOT: Readonly<Record<TranslationFunction, number>> = {
  h_m_gtp4_d: ENUMS.mup_function.MUP_FN_H_M_GTP4_D,
  end_m_gtp4_e: ENUMS.mup_function.MUP_FN_END_M_GTP4_E,
  end_m_gtp6_e: ENUMS.mup_function.MUP_FN_END_M_GTP6_E,
  end_m_gtp6_d: ENUMS.mup_function.MUP_FN_END_M_GTP6_D,
  end_m_gtp6_d_di: ENUMS.mup_function.MUP_FN_END_M_GTP6_D_DI,
  h_m_session_encaps: ENUMS.mup_function.MUP_FN_H_M_SESSION_ENCAPS,
};
/** enum mup_function -> function. */
const SLOT_FUNCTION: readonly TranslationFunction[] = (Object.entries(FUNCTION_SLOT) as [TranslationFunction, number][]).sort((a, b) => a[1] - b[1]).map(([f]) => f);

/**
 * XDP attach mode. native: in the driver, the fast path (veth supports it).
 * generic: after the kernel has built an skb, for drivers without XDP
 * support; much slower. Native is the default; generic must be asked for.
 */
export type XdpMode = 'native' | 'generic';

export interface AttachOptions {
  /** Network namespace (`ip netns` name) of the interface; default: the caller's. */
  readonly netns?: string;
  /** Default 'native'. */
  readonly mode?: XdpMode;
}

/** An interface this data plane's program is attached to. */
export interface Attachment {
  readonly ifname: string;
  readonly netns?: string;
  /** Index inside `netns`. */
  readonly ifindex: number;
  readonly mode: XdpMode;
}

export interface DataplaneOptions {
  /** Default: DEFAULT_OBJECT. */
  readonly object?: string;
  readonly config: Config;
  /**
   * Existing maps to use instead of creating new ones (e.g. pinned by an
   * earlier daemon): their entries and counters carry over. Each must match
   * the object's map in type, key and value size and in max_entries (from
   * the config's table sizes); openDataplane refuses one that does not.
   */
  readonly reuse?: { readonly policies: number; readonly localsids: number; readonly counters: number; readonly sessions?: number };
  /** Leave the reused tables' entries that the config does not list (BGP-learned ones, until the table is read again). */
  readonly keepUnlisted?: boolean;
  /** A fill of empty tables writes its largest table from this thread too (fillWriteThread; the caller stops it). */
  readonly writer?: WriteThread;
  /** FillOptions.olderCounters. */
  readonly olderCounters?: FillOptions['olderCounters'];
}

export interface Dataplane {
  readonly object: string;
  readonly config: Config;
  readonly progFd: number;
  /** Map fds, for pinning. */
  readonly maps: { readonly policies: number; readonly localsids: number; readonly counters: number; readonly sessions: number; readonly config: number };
  /** The mirror of the tables: rule ids, incremental changes. */
  readonly rules: Tables;
  /** Counter slot -> event name, from the object's BTF. */
  readonly events: ReadonlyMap<number, string>;
  readonly tables: TableFds;
  /** The next-hop cache's maps (src/dataplane/nexthop.ts writes them). */
  readonly nexthop: NextHopFds;
  /**
   * Make the loaded tables and mup_cfg follow a new config (see syncTables).
   * Table sizes are fixed at load: a config with other max_policies /
   * max_localsids needs a new openDataplane().
   */
  sync(config: Config, o?: { keep?: boolean }): ApplyResult & { readonly split?: boolean };
  /** sync in slices, the event loop running between them and during grace periods. */
  syncYielding(config: Config, o?: { keep?: boolean }): Promise<ApplyResult & { readonly split?: boolean }>;
  /**
   * The tables taken from the loaded config to `config` by `changes`, the
   * caller's diff of the two rule sets (a reload: only what differs is
   * encoded and written, where sync() encodes every rule and reads the
   * tables back); `config` becomes the loaded one once it is written. At a
   * full table whose room the change's own deletes make, written deletes
   * first (`split`). Written in slices with the event loop running, its
   * grace periods waited for between them (Tables.applyYieldingRoomFirst):
   * at once, each replace's grace period held the loop (found in review,
   * session 42: 300 replaced rules, 3.9 s at 13 ms grace periods). The
   * caller holds the daemon's serial section.
   */
  update(config: Config, changes: Changes): Promise<ApplyResult & { readonly split: boolean }>;
  /**
   * One BPF_PROG_TEST_RUN of the frame, repeat 1. Throws RangeError for a
   * frame shorter than ETH_HLEN or longer than TEST_RUN_MAX_FRAME bytes.
   */
  run(frame: Buffer): RunResult;
  /**
   * The counters now, from one read of the whole counter map (the event
   * slots and every rule slot in use: src/dataplane/counter-map.ts): events,
   * the per-function totals and the per-rule counters of the rules of
   * `config` (default: the loaded config) that are in the tables.
   * `rules` picks which rules are listed (default 'all'); the totals always
   * sum every rule, and the rules that are gone (a function's total never
   * goes down when one of its rules is deleted, or when a local SID changes
   * behaviour). `config` may be a function returning it: called (once) only
   * when rules are listed, so a scrape without per-rule series does not
   * build the rule lists.
   */
  counters(config?: ConfigOrThunk, o?: { readonly rules?: RuleSelection }): Counters;
  /** One rule's counters, from its own slot. */
  ruleCounter(kind: 'policy' | 'localsid' | 'session', r: Policy | LocalSid | Session): RuleCounter | undefined;
  /** counters(), the rules as RuleCounterRows: a RuleCounter made for each as they are iterated (an answer streamed from them). */
  countersRows(config?: ConfigOrThunk, o?: { readonly rules?: RuleSelection }): CountersRows;
  /**
   * countersRows, with the counter map read in slices and the listed
   * rules' ids looked up in slices of about SLICE_MS, the event loop let
   * run between them: GET /v1/counters of 131,072 rules held the loop
   * 100-440 ms in one turn. Changes may run between the slices (a listing
   * sees them part done, as the rule listings do); if one gave a deleted
   * rule's id back to its pool meanwhile and a listed rule has that id now
   * (it would be listed with the slot's figures of the rule before), or
   * moved counts into the retired slots, the read is made again in one go.
   */
  countersRowsAsync(config?: ConfigOrThunk, o?: { readonly rules?: RuleSelection; readonly sliceMs?: number }): Promise<CountersRows>;
  /**
   * Zero every counter slot that is not zero (events and rules): the
   * operator's reset. Not atomic: a packet counted during the reset may be
   * lost or kept. Returns the number of slots written.
   */
  resetCounters(): number;
  /**
   * Attach the program to interface `ifname` (in namespace `netns`, entered
   * with setns() on this thread). Refuses (EBUSY) when an XDP program of that
   * mode is already attached: detach it first.
   */
  attach(ifname: string, o?: AttachOptions): Attachment;
  /**
   * Detach from an interface attached with attach(), only if our program is
   * still the one attached there. An interface or namespace that is gone
   * took the attachment with it: not an error.
   */
  detach(ifname: string, o?: { readonly netns?: string }): void;
  /** Current attachments, in attach order. */
  readonly attachments: readonly Attachment[];
  /** Detach everything attached with attach(), then unload (closes every fd). Idempotent. */
  close(): void;
}

/** The rules a counter read lists and sums, or a function returning them (called only if needed). */
export type RuleConfig = Pick<Config, 'policies' | 'localsids'> & Partial<Pick<Config, 'sessions'>>;
export type ConfigOrThunk = RuleConfig | (() => RuleConfig);

/** Counter slots per read of countersRowsAsync (the sliced read of the counter map): about 4 ms of the kernel's copying each here. */
export const COUNTER_SLICE = 16384;

/** Counter slots summed between two looks at the slice clock (a scrape sums every rule slot: 131,072 and more). */
const SUM_SLICE = 8192;

/** Host byte order: which 32-bit word of a u64 counter is its low half. */
const LOW_WORD = endianness() === 'LE' ? 0 : 1;
/** Sums of 32-bit halves flushed to BigInt before they could pass 2^53 (2^32 * 2^20 = 2^52). */
const FLUSH_EVERY = 1 << 20;

/**
 * Sums of per-CPU counter slots (struct mup_counter: packets, bytes, u64
 * each, COUNTER_STRIDE bytes per CPU) of one map read, without a BigInt per
 * value: the u64s are read as two 32-bit words into Numbers.
 */
class SlotSum {
  readonly #w: Uint32Array;
  readonly #ncpus: number;
  /** 32-bit words per slot, and per CPU. */
  readonly #slotWords: number;
  readonly #cpuWords: number;
  readonly #po: number;
  readonly #bo: number;

  constructor(raw: Buffer, ncpus: number) {
    // A Uint32Array view needs 4-byte alignment: copy a buffer that is not aligned.
    const b = raw.byteOffset % 4 === 0 ? raw : Buffer.from(raw);
    this.#w = new Uint32Array(b.buffer, b.byteOffset, Math.floor(b.length / 4));
    this.#ncpus = ncpus;
    this.#cpuWords = COUNTER_STRIDE / 4;
    this.#slotWords = this.#cpuWords * ncpus;
    this.#po = LAYOUTS.mup_counter.members.packets.offset / 4;
    this.#bo = LAYOUTS.mup_counter.members.bytes.offset / 4;
  }

  /** Packets and bytes of the slot are zero on every CPU. */
  isZero(slot: number): boolean {
    const w = this.#w;
    const at = slot * this.#slotWords;
    for (let c = 0, o = at; c < this.#ncpus; c++, o += this.#cpuWords) {
      if ((w[o + this.#po]! | w[o + this.#po + 1]! | w[o + this.#bo]! | w[o + this.#bo + 1]!) !== 0) return false;
    }
    return true;
  }

  /** Add slots first..first+count-1 (every CPU) to `into`. */
  range(first: number, count: number, into: { packets: bigint; bytes: bigint }): void {
    const w = this.#w;
    const lo = LOW_WORD;
    const hi = 1 - LOW_WORD;
    let pl = 0;
    let ph = 0;
    let bl = 0;
    let bh = 0;
    let n = 0;
    const flush = (): void => {
      into.packets += BigInt(pl) + (BigInt(ph) << 32n);
      into.bytes += BigInt(bl) + (BigInt(bh) << 32n);
      pl = ph = bl = bh = n = 0;
    };
    const end = (first + count) * this.#slotWords;
    for (let o = first * this.#slotWords; o < end; o += this.#cpuWords) {
      const p = o + this.#po;
      const b = o + this.#bo;
      if ((w[p]! | w[p + 1]! | w[b]! | w[b + 1]!) === 0) continue;
      pl += w[p + lo]!;
      ph += w[p + hi]!;
      bl += w[b + lo]!;
      bh += w[b + hi]!;
      if (++n === FLUSH_EVERY) flush();
    }
    flush();
  }
}

/** The next-hop cache (bpf/fwd.h): rule -> slot, the slots, the lease, the GTP4.E hints. */
export const NEXTHOP_MAPS = ['mup_nh_rules', 'mup_nexthops', 'mup_nh_lease', 'mup_nh_hints'] as const;
export interface NextHopFds {
  readonly rulesFd: number;
  readonly slotsFd: number;
  readonly leaseFd: number;
  /** End.M.GTP4.E: per rule, the last IPv4 destination that missed the cache (host order). */
  readonly hintsFd: number;
}

/** Where the tables and the configuration of a loaded object live. */
export type { TableFds };

export function counterSlots(config: Config): number {
  return Tables.counterSlots(config.settings);
}

export function openDataplane(o: DataplaneOptions): Dataplane {
  const file = o.object ?? DEFAULT_OBJECT;
  if (!existsSync(file)) throw new ObjectNotFoundError(file);
  checkTableSizes(o.config);
  const opened = openObject(file, o.config.settings, o.reuse);
  try {
    objectLoad(opened.obj, file);
  } catch (e) {
    objectClose(opened.obj);
    throw e;
  }
  return new Program(opened).fill(o.config, {
    keepUnlisted: o.keepUnlisted === true,
    ...(o.writer === undefined ? {} : { writer: o.writer }),
    ...(o.olderCounters === undefined ? {} : { olderCounters: o.olderCounters }),
  });
}

/** LoadedProgram.fill's options. */
export interface FillOptions {
  /** Leave the reused tables' entries that the config does not list. */
  readonly keepUnlisted?: boolean;
  /** A fill of empty tables writes its largest table from this thread too (the caller stops it). */
  readonly writer?: WriteThread;
  /**
   * The pin of counters an older daemon left (a PERCPU_ARRAY: not reused, see openObject): their counts are
   * added into the new counters before the tables are taken over (which zeroes and retires what free slots
   * hold); `onCarried` is told how many slots had a count.
   */
  readonly olderCounters?: { readonly pin: string; readonly onCarried?: (slots: number) => void };
}

/**
 * openDataplane in two steps: the program loaded (verified) with its maps
 * made (or the reused ones), before the rules are known; then fill() with
 * the config. The kernel's verifier needs only the table sizes (settings),
 * so it can run while the rules are still being read and checked. Nothing
 * is pinned or attached: close() gives it all back.
 */
export interface LoadedProgram {
  readonly object: string;
  /** The settings it was sized and configured for. */
  readonly settings: Settings;
  /** Ids of the reused maps (by pin name), or undefined: all made new. */
  readonly reusedIds: Readonly<Record<string, number>> | undefined;
  /** Write the settings and fill the tables with config's rules (its table sizes must be these settings'). Once; closes the program on failure. */
  fill(config: Config, o?: FillOptions): Dataplane;
  /** Unload (closes every fd); idempotent, a no-op after fill(). */
  close(): void;
}

/**
 * Load the program for these settings on a libuv worker thread
 * (objectLoadAsync: without libbpf's log; a caller that needs the
 * verifier's words on failure loads again with openDataplane).
 */
export async function loadProgramAsync(o: {
  readonly object?: string;
  readonly settings: Settings;
  readonly reuse?: DataplaneOptions['reuse'];
}): Promise<LoadedProgram> {
  const file = o.object ?? DEFAULT_OBJECT;
  if (!existsSync(file)) throw new ObjectNotFoundError(file);
  const opened = openObject(file, o.settings, o.reuse);
  try {
    await objectLoadAsync(opened.obj, file);
  } catch (e) {
    objectClose(opened.obj);
    throw e;
  }
  return new Program(opened);
}

/**
 * loadProgramAsync on this thread: libbpf's log printer runs, so a program
 * the verifier refuses throws with the verifier's own words (the worker's
 * load carries none). Nothing is filled: no table is written or read.
 */
export function loadProgram(o: { readonly object?: string; readonly settings: Settings; readonly reuse?: DataplaneOptions['reuse'] }): LoadedProgram {
  const file = o.object ?? DEFAULT_OBJECT;
  if (!existsSync(file)) throw new ObjectNotFoundError(file);
  const opened = openObject(file, o.settings, o.reuse);
  try {
    objectLoad(opened.obj, file);
  } catch (e) {
    objectClose(opened.obj);
    throw e;
  }
  return new Program(opened);
}

/** An object opened, sized and configured, not loaded yet. */
interface Opened {
  readonly file: string;
  readonly obj: BpfObject;
  readonly settings: Settings;
  readonly events: ReadonlyMap<number, string>;
  readonly maps: { readonly policies: BpfMap; readonly localsids: BpfMap; readonly sessions: BpfMap; readonly counters: BpfMap; readonly config: BpfMap; readonly nh: readonly BpfMap[] };
  readonly configSize: number;
  readonly configOffsets: [number, number];
  readonly selOffset: number;
  readonly reusedIds: Readonly<Record<string, number>> | undefined;
}

/** Open `file`, size its maps for `s`, take the reused maps, set mup_cfg's initial value. Closes the object on failure. */
function openObject(file: string, s: Settings, reuse: DataplaneOptions['reuse']): Opened {
  // The grace clock's thread loads while the verifier runs: the fill's first request (a flip) finds it ready.
  graceClock.start();
  const obj = objectOpen(file);
  try {
    checkLayouts(obj, file);
    const events = eventNames(obj, file);

    const policies = findMap(obj, MAP_POLICIES);
    const localsids = findMap(obj, MAP_LOCALSIDS);
    const sessions = findMap(obj, MAP_SESSIONS);
    const counters = findMap(obj, MAP_COUNTERS);
    const slots = Tables.counterSlots(s);
    const ncpus = numPossibleCpus();
    mapSetMaxEntries(policies, s.maxPolicies, MAP_POLICIES);
    mapSetMaxEntries(localsids, s.maxLocalSids, MAP_LOCALSIDS);
    mapSetMaxEntries(sessions, maxSessionsOf(s), MAP_SESSIONS);
    // Every CPU's copy of every slot (bpf/maps.h); the program finds CPU c's at c * slots.
    mapSetMaxEntries(counters, counterElements(slots, ncpus), MAP_COUNTERS);
    const perCpu = Buffer.alloc(4);
    perCpu.writeUInt32LE(slots);
    mapSetInitialValue(findMap(obj, COUNTER_SLOTS_SECTION), perCpu, COUNTER_SLOTS_SECTION);
    let reusedIds: Record<string, number> | undefined;
    if (reuse !== undefined) {
      reusedIds = {};
      const want = { [MAP_POLICIES]: s.maxPolicies, [MAP_LOCALSIDS]: s.maxLocalSids, [MAP_COUNTERS]: slots, [MAP_SESSIONS]: maxSessionsOf(s) };
      for (const [map, fd, name, pin] of [
        [policies, reuse.policies, MAP_POLICIES, 'policies'],
        [localsids, reuse.localsids, MAP_LOCALSIDS, 'localsids'],
        [counters, reuse.counters, MAP_COUNTERS, 'counters'],
        // Optional: a sessions map that is not given is made new (and empty).
        ...(reuse.sessions === undefined ? [] : [[sessions, reuse.sessions, MAP_SESSIONS, 'sessions'] as const]),
      ] as const) {
        const info = mapInfo(fd, name);
        // An older daemon's counters, one per-CPU element a slot: a new map is made (fill() adds their counts
        // in: FillOptions.olderCounters; the daemon pins it), if its size says the same table sizes. Its id
        // stays in reusedIds, as the pins' are now.
        const older = name === MAP_COUNTERS && info.type === BPF_MAP_TYPE_PERCPU_ARRAY;
        // The counters' size in slots (a copy per CPU of each: elements = slots x CPUs).
        const has = name === MAP_COUNTERS && !older ? info.maxEntries / ncpus : info.maxEntries;
        if (has !== want[name]) throw new TableSizeError(name, has, want[name]);
        if (!older) mapReuseFd(map, fd, name);
        reusedIds[pin] = info.id;
      }
    }

    // The next-hop cache (bpf/fwd.h): one entry per rule, twice as many slots.
    const nh = NEXTHOP_MAPS.map((name) => findMap(obj, name));
    mapSetMaxEntries(nh[0]!, s.maxPolicies + s.maxLocalSids, NEXTHOP_MAPS[0]);
    mapSetMaxEntries(nh[1]!, 2 * (s.maxPolicies + s.maxLocalSids) + 1, NEXTHOP_MAPS[1]);
    mapSetMaxEntries(nh[3]!, s.maxPolicies + s.maxLocalSids, NEXTHOP_MAPS[3]);

    const cfgMap = findMap(obj, MAP_CONFIG);
    const configSize = mapValueSize(cfgMap);
    const btf = objectBtf(obj);
    const cfgVar = btfDatasecVar(btf, MAP_CONFIG, CONFIG_VAR);
    const selVar = btfDatasecVar(btf, MAP_CONFIG, CONFIG_SEL_VAR);
    const one = LAYOUTS.mup_config.size;
    if (cfgVar === undefined || selVar === undefined || cfgVar.size !== 2 * one || selVar.offset + 4 > configSize) {
      throw new Error(`${file}: ${MAP_CONFIG} must hold ${CONFIG_VAR}[2] (struct mup_config) and ${CONFIG_SEL_VAR}; rebuild it with \`make bpf\``);
    }
    const configOffsets: [number, number] = [cfgVar.offset, cfgVar.offset + one];
    // Both copies start equal; the tables are empty (or carried over: their
    // prefix lengths are written before the program is attached anywhere).
    const initial = Buffer.alloc(configSize);
    const fields = configFields(s, [], []);
    encodeConfig(fields, initial, configOffsets[0]);
    encodeConfig(fields, initial, configOffsets[1]);
    mapSetInitialValue(cfgMap, initial, MAP_CONFIG);
    return {
      file,
      obj,
      settings: s,
      events,
      maps: { policies, localsids, sessions, counters, config: cfgMap, nh },
      configSize,
      configOffsets,
      selOffset: selVar.offset,
      reusedIds,
    };
  } catch (e) {
    objectClose(obj);
    throw e;
  }
}

/** A loaded object waiting for its rules (LoadedProgram). */
class Program implements LoadedProgram {
  readonly #o: Opened;
  /** Filled (the Dataplane owns the object now) or closed. */
  #done = false;

  constructor(o: Opened) {
    this.#o = o;
  }

  get object(): string {
    return this.#o.file;
  }

  get settings(): Settings {
    return this.#o.settings;
  }

  get reusedIds(): Readonly<Record<string, number>> | undefined {
    return this.#o.reusedIds;
  }

  fill(config: Config, o: FillOptions = {}): Dataplane {
    if (this.#done) throw new Error(`the program of ${this.#o.file} was filled or closed already`);
    this.#done = true;
    const { obj, file, maps: m, settings: loaded } = this.#o;
    try {
      const s = config.settings;
      if (s.maxPolicies !== loaded.maxPolicies || s.maxLocalSids !== loaded.maxLocalSids || maxSessionsOf(s) !== maxSessionsOf(loaded)) {
        throw new RangeError(
          `${config.file}: the program was loaded for max_policies ${loaded.maxPolicies} / max_localsids ${loaded.maxLocalSids} / max_sessions ${maxSessionsOf(loaded)}, ` +
            `the config asks for ${s.maxPolicies} / ${s.maxLocalSids} / ${maxSessionsOf(s)}`,
        );
      }
      checkTableSizes(config);
      const progFd = programFd(findProgram(obj, PROGRAM_NAME), PROGRAM_NAME);
      const fds: TableFds = {
        policiesFd: mapFd(m.policies, MAP_POLICIES),
        localsidsFd: mapFd(m.localsids, MAP_LOCALSIDS),
        sessionsFd: mapFd(m.sessions, MAP_SESSIONS),
        countersFd: mapFd(m.counters, MAP_COUNTERS),
        configFd: mapFd(m.config, MAP_CONFIG),
        configSize: this.#o.configSize,
        configOffsets: this.#o.configOffsets,
        selOffset: this.#o.selOffset,
      };
      const nexthop: NextHopFds = {
        rulesFd: mapFd(m.nh[0]!, NEXTHOP_MAPS[0]),
        slotsFd: mapFd(m.nh[1]!, NEXTHOP_MAPS[1]),
        leaseFd: mapFd(m.nh[2]!, NEXTHOP_MAPS[2]),
        hintsFd: mapFd(m.nh[3]!, NEXTHOP_MAPS[3]),
      };
      // Made with the object just loaded (openObject takes no next-hop map from pins): all zero.
      markNewNextHopMaps(nexthop);
      const reused = this.#o.reusedIds !== undefined;
      if (o.olderCounters !== undefined) {
        const older = objGet(o.olderCounters.pin, 'the older counters');
        try {
          o.olderCounters.onCarried?.(addOlderCounters(fds.countersFd, older, numPossibleCpus()));
        } finally {
          closeFd(older);
        }
      }
      const tables = new Tables(fds, s, s, { fresh: !reused });
      tables.writeSettings(s);
      tables.sync(s, config.policies, config.localsids, config.sessions ?? [], { keep: o.keepUnlisted === true, ...(o.writer === undefined ? {} : { writer: o.writer }) });
      return new LoadedDataplane(file, config, obj, progFd, this.#o.events, fds, tables, nexthop);
    } catch (e) {
      objectClose(obj);
      throw e;
    }
  }

  close(): void {
    if (this.#done) return;
    this.#done = true;
    objectClose(this.#o.obj);
  }
}

/** A reused map was made for other table sizes: it cannot be resized in place. */
export class TableSizeError extends RangeError {
  override readonly name = 'TableSizeError';
  constructor(
    readonly map: string,
    readonly has: number,
    readonly wants: number,
  ) {
    super(
      `the existing ${map} holds ${has} entries, the config asks for ${wants}: a BPF map cannot be resized in place. ` +
        'Keep the old settings.max_policies / max_localsids / max_sessions, or start over with fresh tables (mup daemon --replace-tables), ' +
        'which fills new tables before swapping the program in and starts the counters from zero',
    );
  }
}

/**
 * Config validation refuses this for a file; the running rules (the file's,
 * the API's and the learned ones: `effective()`) can still exceed a table at
 * a reload, and a Config built in code (benchmarks, tests) might. A refusal
 * of the request (409 at the API), as a full table is.
 */
function checkTableSizes(config: Config): void {
  const s = config.settings;
  if ((config.sessions ?? []).length > maxSessionsOf(s)) {
    throw new TablesRefusedError(`${config.file}: ${(config.sessions ?? []).length} sessions do not fit settings.max_sessions = ${maxSessionsOf(s)}: raise the setting`);
  }
  if (config.policies.length > s.maxPolicies || config.localsids.length > s.maxLocalSids) {
    throw new TablesRefusedError(
      `${config.file}: ${config.policies.length} policies / ${config.localsids.length} local SIDs do not fit ` +
        `settings.max_policies = ${s.maxPolicies} / max_localsids = ${s.maxLocalSids}: raise the settings`,
    );
  }
}

const XDP_MODE_FLAGS: Record<XdpMode, number> = { native: XDP_FLAGS_DRV_MODE, generic: XDP_FLAGS_SKB_MODE };

function attachmentKey(ifname: string, netns: string | undefined): string {
  return `${netns ?? ''}\0${ifname}`;
}

function describeIf(ifname: string, netns: string | undefined): string {
  return netns === undefined ? ifname : `${ifname} in network namespace ${netns}`;
}

/** The interface (or its namespace) no longer exists, so neither does the attachment. */
function isGone(e: unknown): boolean {
  return e instanceof NetnsError && (e.code === 'ENOENT' || e.code === 'ENODEV');
}

/** A buffer for counter reads: see LoadedDataplane.#kept. */
interface CounterBuffer {
  readonly raw: Buffer;
  readonly keys: Buffer;
  filled: number;
}

class LoadedDataplane implements Dataplane {
  readonly #obj: BpfObject;
  readonly #ncpus = numPossibleCpus();
  readonly #attached = new Map<string, Attachment>();
  #closed = false;

  #config: Config;

  constructor(
    readonly object: string,
    config: Config,
    obj: BpfObject,
    readonly progFd: number,
    readonly events: ReadonlyMap<number, string>,
    readonly tables: TableFds,
    readonly rules: Tables,
    readonly nexthop: NextHopFds,
  ) {
    this.#obj = obj;
    this.#config = config;
    this.maps = { policies: tables.policiesFd, localsids: tables.localsidsFd, counters: tables.countersFd, sessions: tables.sessionsFd, config: tables.configFd };
  }

  readonly maps: Dataplane['maps'];

  get config(): Config {
    return this.#config;
  }

  sync(config: Config, o: { keep?: boolean } = {}): ApplyResult & { readonly split?: boolean } {
    this.#open();
    checkTableSizes(config);
    const r = this.rules.sync(config.settings, config.policies, config.localsids, config.sessions ?? [], o);
    this.#config = config;
    return r;
  }

  /** sync, written in slices with the event loop running (Tables.syncYielding): a serving daemon's whole write. */
  async syncYielding(config: Config, o: { keep?: boolean } = {}): Promise<ApplyResult & { readonly split?: boolean }> {
    this.#open();
    checkTableSizes(config);
    const r = await this.rules.syncYielding(config.settings, config.policies, config.localsids, config.sessions ?? [], o);
    this.#config = config;
    return r;
  }

  async update(config: Config, changes: Changes): Promise<ApplyResult & { readonly split: boolean }> {
    this.#open();
    checkTableSizes(config);
    // At a full table whose room the change's own deletes make: its deletes first (Tables.applyYieldingRoomFirst).
    const r = await this.rules.applyYieldingRoomFirst({ ...changes, settings: config.settings });
    this.#config = config;
    return r;
  }

  #open(): void {
    if (this.#closed) throw new Error(`the data plane of ${this.object} is closed`);
  }

  #slotName(slot: number): string {
    return this.events.get(slot) ?? `slot_${slot}`;
  }

  /**
   * The counter map's slots (total: events, then policy, local SID and
   * session rule slots) and how many from 0 can hold a count
   * (Tables.counterSlotsInUse: the rest are zero). A default scrape of
   * 131,072 rules read 65,536 empty session slots besides.
   */
  #extent(): { total: number; inUse: number } {
    const total = counterSlots(this.config);
    return { total, inUse: Math.min(total, this.rules.counterSlotsInUse) };
  }

  /**
   * The buffer counter reads fill, kept between them: a default scrape of
   * 131,072 rules reads 6 MB, and a fresh buffer each time costs a page
   * fault per 4 KB once glibc maps every large block afresh (the daemon
   * holds its trim threshold: docs/daemon.md "Memory"). `filled`: bytes
   * from its start that may not be zero. A read while another one holds it
   * (an async read between slices) gets a buffer of its own.
   */
  #kept: CounterBuffer | undefined;
  #keptBusy = false;

  /** A buffer for `total` slots whose bytes past slot `inUse` are zero (reads fill the rest). */
  #acquire(total: number, inUse: number): CounterBuffer {
    const stride = COUNTER_STRIDE * this.#ncpus;
    const fresh = (): CounterBuffer => ({ raw: Buffer.alloc(total * stride), keys: Buffer.alloc(4 * total), filled: 0 });
    if (this.#keptBusy) return fresh();
    if (this.#kept?.raw.length !== total * stride) this.#kept = fresh();
    const b = this.#kept;
    if (b.filled > inUse * stride) b.raw.fill(0, inUse * stride, b.filled);
    b.filled = Math.min(b.filled, inUse * stride);
    this.#keptBusy = true;
    return b;
  }

  #release(b: CounterBuffer): void {
    if (b === this.#kept) this.#keptBusy = false;
  }

  /**
   * Slots 0..total-1 into a buffer from #acquire (release it after use),
   * read in slices of COUNTER_SLICE up to the last one in use (the rest
   * zeros), the event loop running between slices.
   */
  async #rawInUse(): Promise<CounterBuffer> {
    const { total, inUse } = this.#extent();
    const b = this.#acquire(total, inUse);
    try {
      for (let first = 0; first < inUse; first += COUNTER_SLICE) {
        if (first > 0) {
          await new Promise<void>((r) => setImmediate(r));
          this.#open(); // closed meanwhile (a reload that replaced the tables): refused, not read from a closed fd
        }
        this.#readSlots(b, first, Math.min(COUNTER_SLICE, inUse - first));
      }
      return b;
    } catch (e) {
      this.#release(b);
      throw e;
    }
  }

  /** The same synchronously, in one read. */
  #rawInUseSync(): CounterBuffer {
    const { total, inUse } = this.#extent();
    const b = this.#acquire(total, inUse);
    try {
      this.#readSlots(b, 0, inUse);
    } catch (e) {
      this.#release(b);
      throw e;
    }
    return b;
  }

  #readSlots(b: CounterBuffer, first: number, count: number): void {
    if (count === 0) return;
    const stride = COUNTER_STRIDE * this.#ncpus;
    // Counted as filled before the read: one that fails leaves the slice in an unknown state.
    b.filled = Math.max(b.filled, (first + count) * stride);
    counterRange(this.tables.countersFd, first, count, this.#ncpus, { values: b.raw.subarray(first * stride), keys: b.keys });
  }

  /** Raw per-CPU values of counter slots start..start+count-1. */
  #raw(start: number, count: number): Buffer {
    return counterRange(this.tables.countersFd, start, count, this.#ncpus);
  }

  /** Event slots whose packet count changed on some CPU between two #raw(0, 64) reads. */
  #changedEvents(before: Buffer, after: Buffer): number[] {
    const changed: number[] = [];
    const { offset, size } = LAYOUTS.mup_counter.members.packets;
    for (let slot = 0; slot < MUP_EVENT_SLOTS; slot++) {
      for (let cpu = 0; cpu < this.#ncpus; cpu++) {
        const o = (slot * this.#ncpus + cpu) * COUNTER_STRIDE + offset;
        if (before.compare(after, o, o + size, o, o + size) !== 0) {
          changed.push(slot);
          break;
        }
      }
    }
    return changed;
  }

  run(frame: Buffer): RunResult {
    this.#open();
    if (frame.length < ETH_HLEN) {
      throw new RangeError(`a ${frame.length}-byte frame is shorter than an Ethernet header; BPF_PROG_TEST_RUN refuses it`);
    }
    if (frame.length > TEST_RUN_MAX_FRAME) {
      throw new RangeError(
        `a ${frame.length}-byte frame is larger than one XDP buffer (${TEST_RUN_MAX_FRAME} bytes in BPF_PROG_TEST_RUN); ` +
          'multi-buffer XDP is not supported, and the program would see only the first part of it',
      );
    }
    const before = this.#raw(0, MUP_EVENT_SLOTS);
    const r = testRun(
      this.progFd,
      { dataIn: frame, dataOutSize: frame.length + 256, repeat: 1 },
      `${PROGRAM_NAME} on a ${frame.length}-byte frame`,
    );
    const changed = this.#changedEvents(before, this.#raw(0, MUP_EVENT_SLOTS));
    if (changed.length > 1) {
      throw new Error(
        `one frame counted in ${changed.length} event slots (${changed.map((s) => this.#slotName(s)).join(', ')}); ` +
          'the program must count every packet in exactly one event (or the program is also attached and seeing traffic)',
      );
    }
    const verdict = VERDICTS[r.retval];
    if (verdict === undefined) throw new Error(`${PROGRAM_NAME} returned ${r.retval}, not an XDP action`);
    const slot = changed[0];
    return {
      verdict,
      event: slot === undefined ? null : this.#slotName(slot),
      out: r.dataOut ?? Buffer.alloc(0),
      duration: r.duration,
    };
  }

  counters(config: ConfigOrThunk = this.config, o: { readonly rules?: RuleSelection } = {}): Counters {
    return withRuleArray(this.countersRows(config, o));
  }

  /**
   * One rule's counters (GET /v1/counters?rule=, mup stats --rule): its own
   * slot, one lookup. It was a read of every slot in use and of every
   * function's total to list one row: 30-40 ms of the event loop at 131,072
   * rules, about ten times that at a million, per request. Undefined: the
   * rule has no id in the tables.
   */
  ruleCounter(kind: 'policy' | 'localsid' | 'session', r: Policy | LocalSid | Session): RuleCounter | undefined {
    this.#open();
    const k = KINDS.indexOf(kind);
    const rule =
      k === 0 ? this.rules.policyRuleOf(r as Policy) : k === 1 ? this.rules.localsidRule((r as LocalSid).sid) : this.rules.sessionRule((r as Session).ue);
    if (rule === undefined) return undefined;
    const v = readSlotCounts(this.tables.countersFd, [MUP_EVENT_SLOTS + rule], this.#ncpus)[0]!;
    return [...new RuleCounterRows(Uint32Array.of(rule), Uint8Array.of(k), [r], BigUint64Array.of(v.packets), BigUint64Array.of(v.bytes), 1)][0];
  }

  /** counters(), its rule list as RuleCounterRows (made row by row when iterated): an answer streamed from it. */
  countersRows(config: ConfigOrThunk = this.config, o: { readonly rules?: RuleSelection } = {}): CountersRows {
    this.#open();
    // The one read: event slots, then policy rule slots, then local SID rule slots, then session rule slots.
    const b = this.#rawInUseSync();
    try {
      return runNow(this.#countersSteps(b.raw, config, o, new SliceClock(Infinity)));
    } finally {
      this.#release(b);
    }
  }

  async countersRowsAsync(config: ConfigOrThunk = this.config, o: { readonly rules?: RuleSelection; readonly sliceMs?: number } = {}): Promise<CountersRows> {
    this.#open();
    const reclaimed = this.rules.idsReclaimed;
    const moved = this.rules.countsMoved;
    const resets = this.#resets;
    const b = await this.#rawInUse();
    let rows: CountersRows;
    try {
      // Closed meanwhile (the daemon stopping, a reload that replaced the tables): refused.
      rows = await runYielding(this.#countersSteps(b.raw, config, o, new SliceClock(o.sliceMs)), () => this.#open());
    } finally {
      this.#release(b);
    }
    // A deleted rule's id given back to its pool meanwhile may have been taken by a rule looked up after it,
    // which would be listed with the figures the slot had for the rule before: if a listed row has such an
    // id, read again in one go (rare: a new rule took a just-reclaimed id within the read). Counts moved
    // into the retired slots meanwhile (a deleted rule's slot zeroed) may have been read twice or not at
    // all (the retired slots are read first, the rule slots after; a local SID's function is looked up
    // after the read): read again too, whatever is listed. A local SID id given back with a zero slot
    // moves nothing: its new rule's packets are read under its new function.
    const since = this.rules.reclaimedSince(reclaimed);
    // So may a reset (the retired slots read before it, the rule slots after).
    if (since === undefined || this.rules.countsMoved !== moved || this.#resets !== resets || (since.length > 0 && rows.rules.hasAnyId(new Set(since)))) {
      return this.countersRows(config, o);
    }
    return rows;
  }

  /** The counters of one read of the counter map, yielding where a turn of the event loop may run (every SLICE_MS of listed rules: countersRowsAsync). */
  *#countersSteps(raw: Buffer, config: ConfigOrThunk, o: { readonly rules?: RuleSelection }, clock: SliceClock): Generator<void, CountersRows> {
    const which = o.rules ?? 'all';
    // A thunk is called only when rules are listed (the totals take each local SID's function from the tables).
    const none = { policies: [], localsids: [], sessions: [] };
    const events = this.#events(raw);
    const rules = yield* this.#ruleCounters(raw, which === 'none' ? none : typeof config === 'function' ? config() : config, which === 'active' ? { activeOnly: true } : typeof which === 'number' ? { limit: which } : {}, clock);
    const functions = yield* this.#functionTotals(raw, clock);
    return { events, rules, functions };
  }

  /** resetCounters() calls so far: a counter read made in slices across one reads again. */
  #resets = 0;

  resetCounters(): number {
    this.#open();
    this.#resets++;
    const n = this.#extent().inUse;
    const stride = COUNTER_STRIDE * this.#ncpus;
    // Only slots that are not zero already: writing all 131,136 slots of full tables takes ~0.3 s.
    const nonzero: number[] = [];
    const read = this.#rawInUseSync();
    try {
      const raw = read.raw;
      for (let slot = 0; slot < n; slot++) if (!slotIsZero(raw, slot * stride, stride)) nonzero.push(slot);
    } finally {
      this.#release(read);
    }
    return zeroCounterSlots(this.tables.countersFd, nonzero, this.#ncpus);
  }

  /** Every event of enum mup_event from a read of slots 0.., zeros included; unnamed slots only when not zero. */
  #events(raw: Buffer): Record<string, CounterValue> {
    const stride = COUNTER_STRIDE * this.#ncpus;
    const slots: CounterValue[] = [];
    for (let slot = 0; slot < MUP_EVENT_SLOTS; slot++) slots.push(decodePercpuCounter(raw, this.#ncpus, slot * stride));
    const events: Record<string, CounterValue> = {};
    for (const [slot, name] of [...this.events].sort((a, b) => a[0] - b[0])) {
      events[name] = slots[slot] ?? { packets: 0n, bytes: 0n };
    }
    slots.forEach((v, slot) => {
      // The retired slots after the events are not events (Tables: the counts of rules that are gone).
      if (slot >= MUP_RETIRED_SLOT) return;
      if (!this.events.has(slot) && v.packets !== 0n) events[this.#slotName(slot)] = v;
    });
    return events;
  }

  /**
   * Translated packets and bytes per function, from a read of slots 0..:
   * its retired slot (what its rules that are gone counted, so the total
   * never goes down when a rule goes), plus the sum of the policy rule slots
   * (every policy is H.M.GTP4.D), of the local SID rule slots by the
   * behaviour the tables wrote for each, and of the session slots.
   *
   * A scrape sums every rule slot (131,072 and more, times the CPUs): the
   * slots are read as 32-bit halves into Numbers (exact: flushed to BigInt
   * before a sum could pass 2^53), and a slot that is zero on every CPU (a
   * rule without packets, a free slot) costs one look at its words.
   */
  *#functionTotals(raw: Buffer, clock: SliceClock): Generator<void, Record<TranslationFunction, CounterValue>> {
    const s = this.config.settings;
    // Each function starts from its retired slot: what its rules that are gone counted (Tables.#retire).
    const stride = COUNTER_STRIDE * this.#ncpus;
    const retired = (fn: TranslationFunction): { packets: bigint; bytes: bigint } => decodePercpuCounter(raw, this.#ncpus, (MUP_RETIRED_SLOT + FUNCTION_SLOT[fn]) * stride);
    const totals: Record<TranslationFunction, { packets: bigint; bytes: bigint }> = {
      h_m_gtp4_d: retired('h_m_gtp4_d'),
      end_m_gtp4_e: retired('end_m_gtp4_e'),
      end_m_gtp6_e: retired('end_m_gtp6_e'),
      end_m_gtp6_d: retired('end_m_gtp6_d'),
      end_m_gtp6_d_di: retired('end_m_gtp6_d_di'),
      h_m_session_encaps: retired('h_m_session_encaps'),
    };
    const sum = new SlotSum(raw, this.#ncpus);
    /** sum.range, SUM_SLICE slots at a time, a turn of the loop between them when the clock says so. */
    const ranged = function* (first: number, count: number, into: { packets: bigint; bytes: bigint }): Generator<void> {
      for (let at = 0; at < count; at += SUM_SLICE) {
        if (at > 0 && clock.due()) yield;
        sum.range(first + at, Math.min(SUM_SLICE, count - at), into);
      }
    };
    // Every policy is H.M.GTP4.D, and a free slot is zero (Tables zeroes a
    // rule's slot when it goes): the policy range sums up as it is.
    yield* ranged(MUP_EVENT_SLOTS, s.maxPolicies, totals.h_m_gtp4_d);
    // Local SIDs: by the behaviour the tables wrote for each (a deleted one's until its slot is zeroed), for the slots that have packets.
    for (let rule = s.maxPolicies; rule < s.maxPolicies + s.maxLocalSids; rule++) {
      if (clock.tick()) yield;
      if (sum.isZero(MUP_EVENT_SLOTS + rule)) continue;
      const fn = this.rules.functionOf(rule);
      if (fn !== undefined) sum.range(MUP_EVENT_SLOTS + rule, 1, totals[SLOT_FUNCTION[fn]!]);
    }
    // Every session is H.M.Session.Encaps, and a free slot is zero: the range sums up as it is.
    yield* ranged(MUP_EVENT_SLOTS + s.maxPolicies + s.maxLocalSids, maxSessionsOf(s), totals.h_m_session_encaps);
    return totals;
  }

  /**
   * Per-rule counters, from a read of slots 0..: the rules of `config` that
   * are in the tables, in config order (policies, then local SIDs, then
   * sessions); `activeOnly`: rules with packets only; `limit`: at most that
   * many. Columns (RuleCounterRows): the read's figures are taken now, the
   * rows' objects made when the list is iterated.
   */
  *#ruleCounters(raw: Buffer, config: Pick<Config, 'policies' | 'localsids' | 'sessions'>, o: { activeOnly?: boolean; limit?: number }, clock: SliceClock): Generator<void, RuleCounterRows> {
    const stride = COUNTER_STRIDE * this.#ncpus;
    const total = Math.min(o.limit ?? Infinity, config.policies.length + config.localsids.length + (config.sessions?.length ?? 0));
    const ids = new Uint32Array(total);
    const kinds = new Uint8Array(total);
    const rules: CountedRule[] = [];
    const packets = new BigUint64Array(total);
    const bytes = new BigUint64Array(total);
    let n = 0;
    const push = (rule: number, kind: number, r: CountedRule): void => {
      if (n >= total) return;
      const v = decodePercpuCounter(raw, this.#ncpus, (MUP_EVENT_SLOTS + rule) * stride);
      if (o.activeOnly === true && v.packets === 0n) return;
      ids[n] = rule;
      kinds[n] = kind;
      rules.push(r);
      packets[n] = v.packets;
      bytes[n] = v.bytes;
      n++;
    };
    for (const p of config.policies) {
      if (n >= total) break;
      if (clock.tick()) yield;
      const rule = this.rules.policyRuleOf(p);
      if (rule !== undefined) push(rule, 0, p);
    }
    for (const l of config.localsids) {
      if (n >= total) break;
      if (clock.tick()) yield;
      const rule = this.rules.localsidRule(l.sid);
      if (rule !== undefined) push(rule, 1, l);
    }
    for (const x of config.sessions ?? []) {
      if (n >= total) break;
      if (clock.tick()) yield;
      const rule = this.rules.sessionRule(x.ue);
      if (rule !== undefined) push(rule, 2, x);
    }
    return new RuleCounterRows(ids, kinds, rules, packets, bytes, n);
  }


  get attachments(): readonly Attachment[] {
    return [...this.#attached.values()];
  }

  attach(ifname: string, o: AttachOptions = {}): Attachment {
    this.#open();
    const mode = o.mode ?? 'native';
    const key = attachmentKey(ifname, o.netns);
    if (this.#attached.has(key)) throw new Error(`${describeIf(ifname, o.netns)}: already attached by this data plane`);
    const what = `${describeIf(ifname, o.netns)} (${mode})`;
    const ifindex = ifIndex(ifname, o.netns);
    inNetns(o.netns, () => xdpAttach(ifindex, this.progFd, XDP_MODE_FLAGS[mode] | XDP_FLAGS_UPDATE_IF_NOEXIST, what));
    const a: Attachment = { ifname, ifindex, mode, ...(o.netns === undefined ? {} : { netns: o.netns }) };
    this.#attached.set(key, a);
    return a;
  }

  detach(ifname: string, o: { readonly netns?: string } = {}): void {
    this.#open();
    const key = attachmentKey(ifname, o.netns);
    const a = this.#attached.get(key);
    if (a === undefined) throw new Error(`${describeIf(ifname, o.netns)}: not attached by this data plane`);
    this.#detach(a);
    this.#attached.delete(key);
  }

  #detach(a: Attachment): void {
    try {
      // Same name, other index: the interface was deleted and another made.
      if (ifIndex(a.ifname, a.netns) !== a.ifindex) return;
      inNetns(a.netns, () =>
        xdpDetachProgram(a.ifindex, this.progFd, XDP_MODE_FLAGS[a.mode], `${describeIf(a.ifname, a.netns)} (${a.mode})`),
      );
    } catch (e) {
      if (!isGone(e)) throw e;
    }
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const failed: string[] = [];
    for (const a of this.#attached.values()) {
      try {
        this.#detach(a);
      } catch (e) {
        failed.push((e as Error).message);
      }
    }
    this.#attached.clear();
    this.#kept = undefined;
    this.rules.close();
    objectClose(this.#obj);
    if (failed.length > 0) {
      throw new Error(`closed the data plane, but could not detach it from: ${failed.join('; ')}`);
    }
  }
}
