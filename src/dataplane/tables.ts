/**
 * The loaded tables as user space keeps them in step with a config: a mirror
 * of every entry (key -> rule id and prefix length; the values stay in the
 * map, read back when a change puts an existing key again), stable rule ids (a rule
 * keeps its counter slot for as long as its key exists, across reloads and
 * daemon restarts), and the double-buffered configuration.
 *
 * What a packet can see while the tables change:
 * - An entry written with a key that already exists replaces the old one in
 *   one step (the hash map links the new element in, then unlinks the old):
 *   a lookup finds the old entry or the new one, never neither, never a mix.
 * - The kernel may hand a deleted or replaced element's memory to the very
 *   next element-allocating update (an insert or a replace), while a packet
 *   that looked it up a moment earlier still reads it. So such an update
 *   first waits for an RCU grace period that started after the last replace
 *   or delete (the allocation debt); deletes and generation stores do not.
 * - mup_cfg has two copies; a packet reads mup_cfg_sel once and uses that
 *   copy. A flip fills the other copy and flips the selector; the next flip
 *   waits for a grace period that started after it (the flip debt). A
 *   change that leaves prefix lengths and settings as they are only bumps
 *   policy_gen / localsid_gen in the active copy, in place (one aligned
 *   32-bit store through the map's mmap), after the map writes: no flip.
 * - A deleted rule's id is reused, and its counter slot zeroed, only after a
 *   grace period that started after the delete.
 * - Grace periods run on a thread (src/dataplane/grace.ts); a write that
 *   needs one waits for its number (the daemon awaits it before the write).
 * - Prefix lengths: a rule's length is in the config before the rule is
 *   written and leaves the config only after the rule is deleted.
 */
import { KeyIndex } from '../host/key-index.js';
import { ShardedMap, ShardedSet } from '../host/sharded-map.js';
import { DEFAULT_MAX_SESSIONS } from '../config/load.js';
import { PolicyRule, SessionRule } from '../config/rows.js';
import type { LocalSid, Policy, Session, Settings, TeidPrefix } from '../config/types.js';
import type { Ipv4Prefix, Ipv6Prefix } from '../sid/types.js';
import {
  BEHAVIORS,
  COUNTER_STRIDE,
  ENUMS,
  LAYOUTS,
  MUP_EVENT_SLOTS,
  MUP_MAX_PLENS,
  MUP_RETIRED_SLOT,
  decodeConfig,
  decodePercpuCounter,
  encodeConfig,
  encodeLocalSidKey,
  encodePolicyKey,
  encodeSessionKey,
  localSidBehavior,
  POLICY_FLAGS,
  policyFlags,
  prefixLengths,
  writeAddrOnlyPolicy,
  writeLocalSid,
  writeLocalSidKey,
  writePolicy,
  writePolicyKey,
  writePolicyKeyFields,
  policyValueWriter,
  writeSession,
  writeSessionKey,
  writeSessionKey4,
  type ConfigFields,
} from './codec.js';
import {
  BPF_ANY,
  mapDeleteBatch,
  mapDump,
  mapLookup,
  mapUpdate,
  mapUpdateBatch,
  BatchWriteError,
  BPF_F_MMAPABLE,
  mapInfo,
  mapMmap,
  mapMunmap,
  numPossibleCpus,
  updateBatchError,
  type MapMapping,
} from './libbpf.js';
import { WriteThread } from './write-thread.js';
import { counterLookup, counterRange, counterUpdate, slotIsZero } from './counter-map.js';
import { graceClock } from './grace.js';
import { nextTurn, SliceClock } from '../host/slice-clock.js';

export const MAP_POLICIES = 'mup_policies';
export const MAP_LOCALSIDS = 'mup_localsids';
export const MAP_SESSIONS = 'mup_sessions';
export const MAP_COUNTERS = 'mup_counters';
export const MAP_CONFIG = '.data.cfg';

/**
 * Write zero to counter slots (events and the retired slots are slots
 * 0..MUP_EVENT_SLOTS-1, rule r is slot MUP_EVENT_SLOTS + r), every CPU's
 * copy, one update per slot. Two callers with two reasons: Tables zeroes a
 * rule's slot when its id is freed, its counts retired first (so the next
 * rule given that id starts at zero: table bookkeeping), and
 * Dataplane.resetCounters zeroes every slot that is not zero (the
 * operator's `mup stats --reset`).
 */
export function zeroCounterSlots(countersFd: number, slots: Iterable<number>, ncpus: number): number {
  // BPF_MAP_UPDATE_BATCH, ZERO_CHUNK slots a call: 65,536 freed ids were
  // 65,536 syscalls one by one.
  const list = [...slots];
  const per = COUNTER_STRIDE * ncpus;
  const zero = Buffer.alloc(per * Math.min(list.length, ZERO_CHUNK));
  for (let at = 0; at < list.length; at += ZERO_CHUNK) {
    const n = Math.min(ZERO_CHUNK, list.length - at);
    const keys = Buffer.allocUnsafe(4 * n);
    for (let i = 0; i < n; i++) keys.writeUInt32LE(list[at + i]!, 4 * i);
    counterUpdate(countersFd, keys, zero.subarray(0, per * n), n, ncpus);
  }
  return list.length;
}

const FN = ENUMS.mup_function;
const U64_MASK = (1n << 64n) - 1n;

/** Packets and bytes of a counter slot, summed over the CPUs. */
export interface SlotCounts {
  packets: bigint;
  bytes: bigint;
}

/** Slots this close together are read in one range (counterRange: those between them are read too). */
const SLOT_RUN_GAP = 16;

/**
 * The counts of each of `slots` (any order), summed over the CPUs: nearby
 * slots read in one batch lookup, so a delete of 10,000 rules whose ids
 * follow each other reads their slots in a few calls, not 10,000.
 */
export function readSlotCounts(countersFd: number, slots: readonly number[], ncpus: number): SlotCounts[] {
  const stride = COUNTER_STRIDE * ncpus;
  let ascending = true;
  for (let i = 1; i < slots.length && ascending; i++) ascending = slots[i]! > slots[i - 1]!;
  const order = ascending ? slots.map((_, i) => i) : slots.map((_, i) => i).sort((a, b) => slots[a]! - slots[b]!);
  const out: SlotCounts[] = new Array<SlotCounts>(slots.length);
  /** The slot at byte `at` of `raw`: its words looked at before any BigInt is made (a deleted rule often has no packets). */
  const decode = (raw: Buffer, at: number): SlotCounts => (slotIsZero(raw, at, stride) ? { packets: 0n, bytes: 0n } : decodePercpuCounter(raw, ncpus, at));
  for (let k = 0; k < order.length; ) {
    const first = slots[order[k]!]!;
    let end = k + 1;
    while (end < order.length && slots[order[end]!]! - slots[order[end - 1]!]! <= SLOT_RUN_GAP && slots[order[end]!]! - first < ZERO_CHUNK) end++;
    if (end === k + 1) {
      // Alone: a lookup of its copy per CPU (a batch read of one element each).
      out[order[k]!] = decode(counterLookup(countersFd, first, ncpus), 0);
      k = end;
      continue;
    }
    const raw = counterRange(countersFd, first, slots[order[end - 1]!]! - first + 1, ncpus);
    for (let j = k; j < end; j++) out[order[j]!] = decode(raw, (slots[order[j]!]! - first) * stride);
    k = end;
  }
  return out;
}

/**
 * Add `delta` (per enum mup_function) to the retired slots
 * MUP_RETIRED_SLOT + fn, on CPU 0's copy (the program never writes them,
 * so nothing races this read and write). Returns the slots as they were,
 * for a put-back. Only ever added to: a retired slot never goes down
 * (but for `mup stats --reset`).
 */
function addRetired(countersFd: number, ncpus: number, delta: ReadonlyMap<number, SlotCounts>): Buffer {
  const stride = COUNTER_STRIDE * ncpus;
  const n = FN.MUP_FN_COUNT;
  const before = counterRange(countersFd, MUP_RETIRED_SLOT, n, ncpus);
  const after = Buffer.from(before);
  const { packets, bytes } = LAYOUTS.mup_counter.members;
  for (const [fn, d] of delta) {
    const at = fn * stride;
    after.writeBigUInt64LE((after.readBigUInt64LE(at + packets.offset) + d.packets) & U64_MASK, at + packets.offset);
    after.writeBigUInt64LE((after.readBigUInt64LE(at + bytes.offset) + d.bytes) & U64_MASK, at + bytes.offset);
  }
  writeRetired(countersFd, ncpus, after);
  return before;
}

function writeRetired(countersFd: number, ncpus: number, values: Buffer): void {
  const n = FN.MUP_FN_COUNT;
  const keys = Buffer.allocUnsafe(4 * n);
  for (let i = 0; i < n; i++) keys.writeUInt32LE(MUP_RETIRED_SLOT + i, 4 * i);
  counterUpdate(countersFd, keys, values, n, ncpus);
}

/** Counter slots read per BPF_MAP_LOOKUP_BATCH pass when the tables are taken over. */
const COUNTER_READ_CHUNK = 65536;

/** Counter slots zeroed per BPF_MAP_UPDATE_BATCH call. */
const ZERO_CHUNK = 8192;

/**
 * What a change's writes stop at: a grace period's number (the next write
 * needs it completed) or undefined (a slice of work done). Tables.apply
 * runs through them at once, waiting for grace periods with Atomics.wait;
 * applyYielding lets the event loop run at each (a large
 * batch must not hold the loop for its whole write).
 */
type TableStep = number | undefined;

/** A rule's key fields as a fill reads them (PolicyRule.keyFieldsOf, SessionRule.ue4Of): no object per rule. */
const KEY_FIELDS = new Uint32Array(4);

/** New entries one BPF_MAP_UPDATE_BATCH writes at most. */
export const INSERT_CHUNK = 2048;

/** Tables.sync's options. */
export interface SyncOptions {
  /** Entries not listed stay (a restart with BGP: the learned ones stay until the table is read again). */
  readonly keep?: boolean;
  /** A fill of empty tables writes its largest table from this thread too (fillWriteThread). */
  readonly writer?: WriteThread;
}

/** A write thread for a fill of empty tables: room for a chunk of any table's keys and values. */
export function fillWriteThread(minEntries?: number): WriteThread {
  const key = Math.max(LAYOUTS.mup_policy_key.size, LAYOUTS.mup_localsid_key.size, LAYOUTS.mup_session_key.size);
  const value = Math.max(LAYOUTS.mup_policy.size, LAYOUTS.mup_localsid.size, LAYOUTS.mup_session.size);
  return new WriteThread(INSERT_CHUNK * key, INSERT_CHUNK * value, minEntries);
}

/** Keys one BPF_MAP_DELETE_BATCH deletes at most (with the mirror's deletes after it: about 4 ms on this host). */
export const DELETE_CHUNK = 1024;

/** Reclaimed ids kept for reclaimedSince (a counter listing's read of 131,072 rules takes about a second). */
const RECLAIMED_KEPT = 65536;

/** errno of a delete write a test refuses part way (testFailDeletesAfter). */
const EIO = 5;

/**
 * Counter slots of deleted rules retired (read, added to their functions'
 * retired slots, zeroed) between two checks of the time slice: 512 slots
 * far apart are 512 lookups, 2-3 ms (2,048 took 25-37 ms when each was a
 * batch read of its own).
 */
const RECLAIM_CHUNK = 512;

/**
 * Of a plan whose write failed: the ids it took for new entries that the
 * failed write never put in (the mirror holds another id, or none, for
 * their key). Before, they stayed taken: each such failure shrank the pool
 * until a restart.
 */
function unwrittenIds(plan: Plan, mirror: Mirror): number[] {
  if (plan.taken.length === 0) return [];
  const taken = new Set(plan.taken);
  const out: number[] = [];
  for (const list of [plan.fresh, plan.replace]) {
    for (const i of list) {
      const id = plan.rules[i]!;
      if (taken.has(id) && mirror.keys.get(plan.puts[i]!.keyStr) !== id) out.push(id);
    }
  }
  return out;
}

/**
 * Of a change refused at a full table: when its own deletes would make room
 * for its new keys, say so. Its new entries are written before its deletes
 * (a key's new entry is in before an old one goes), so such a change is
 * refused though its result fits (found in review, session 33). `taken`:
 * the ids the plan had taken when the table ran out (all of them free ids).
 */
function deletesFirstHint(puts: readonly Put[], dels: readonly string[], mirror: Mirror, taken: number): string {
  let fresh = 0;
  for (const p of puts) if (!((mirror.keys.get(p.keyStr) ?? -1) >= 0)) fresh++;
  const freed = freedBy(puts, dels, mirror);
  if (freed === 0 || fresh > taken + freed) return '';
  return `; this change's ${freed} deletes would make room, but its new entries are written before its deletes: delete first (through the API, a batch of its own), then add`;
}

/** Stop for grace period `seq` unless it is over; then it is (Atomics.wait when run at once). */
function* graceStep(seq: number): Generator<TableStep, void> {
  if (!graceClock.done(seq)) yield seq;
  graceClock.waitSync(seq);
}

/** list.filter(keep), the slice checked as it goes (10,000 keys looked up in one step: 5-11 ms of a batch's turn). */
function* filtering<T>(list: readonly T[], keep: (x: T) => boolean, clock?: SliceClock): Generator<TableStep, T[]> {
  const out: T[] = [];
  for (const x of list) {
    if (clock?.tick() === true) yield;
    if (keep(x)) out.push(x);
  }
  return out;
}

/** Keys to delete as the mirror's latin1 texts, the slice checked every 256. */
function* keyTexts<K>(list: readonly K[], encode: (k: K) => Buffer, clock: SliceClock): Generator<TableStep, string[]> {
  const out = new Array<string>(list.length);
  for (let i = 0; i < list.length; i++) {
    if (clock.tick()) yield;
    out[i] = encode(list[i]!).toString('latin1');
  }
  return out;
}

/** Each table's puts and deleted key texts, as a change's plans take them: policies, local SIDs, sessions. */
type PutsAndDeletes = readonly [readonly Put[], readonly string[], readonly Put[], readonly string[], readonly Put[], readonly string[]];

/**
 * An id pool that, once the real one is empty, lends `lend` ids more
 * (numbers past any table's): a plan made as if deletes had freed them
 * (Tables.#plansRoomFirst). Lent ids are never given back to the real pool.
 */
class LendingIds {
  static readonly FIRST_LENT = 0x8000_0000;
  #lent = 0;
  constructor(
    readonly real: IdPool,
    readonly lend: number,
  ) {}
  /** How many ids were lent so far. */
  get lent(): number {
    return this.#lent;
  }
  take(): number | undefined {
    const id = this.real.take();
    if (id !== undefined) return id;
    return this.#lent < this.lend ? LendingIds.FIRST_LENT + this.#lent++ : undefined;
  }
  /** #plan's give-back on a refusal: its ids in the order taken, so the real pool is as it was (not re-sorted). */
  give(ids: readonly number[]): void {
    this.untake(ids);
  }
  /** The real ids of a plan, in the order taken: the real pool as it was. */
  untake(ids: readonly number[]): void {
    this.real.untake(ids.filter((id) => id < LendingIds.FIRST_LENT));
  }
}

/** Ids a change's deletes free in one table: its entries (ours: a rule id) deleted and not put again. */
function freedBy(puts: readonly Put[], dels: readonly string[], mirror: Mirror): number {
  const putKeys = new Set<string>();
  for (const p of puts) putKeys.add(p.keyStr);
  let n = 0;
  for (const k of new Set(dels)) if (!putKeys.has(k) && (mirror.keys.get(k) ?? -1) >= 0) n++;
  return n;
}

/** A change refused before any write (a full table) whose own deletes free the room it lacks, and that has puts to write after them. */
function roomAfterDeletes(e: unknown, c: Changes): boolean {
  const puts = (c.putPolicies?.length ?? 0) + (c.putLocalSids?.length ?? 0) + (c.putSessions?.length ?? 0);
  return e instanceof TablesFullError && e.roomAfterDeletes && puts > 0;
}

/** A change as two: its deletes, then its puts (both with its settings). */
function roomFirst(c: Changes): [Changes, Changes] {
  const settings = c.settings === undefined ? {} : { settings: c.settings };
  return [
    { ...settings, delPolicies: c.delPolicies ?? [], delLocalSids: c.delLocalSids ?? [], delSessions: c.delSessions ?? [] },
    { ...settings, putPolicies: c.putPolicies ?? [], putLocalSids: c.putLocalSids ?? [], putSessions: c.putSessions ?? [] },
  ];
}

function splitResult(a: ApplyResult, b: ApplyResult): ApplyResult & { readonly split: true } {
  return { added: a.added + b.added, replaced: a.replaced + b.replaced, deleted: a.deleted + b.deleted, unchanged: a.unchanged + b.unchanged, split: true };
}

/**
 * The mirror's keys that none of `listed` has (`key`: a rule's key bytes,
 * in a scratch buffer), the slice checked as it goes.
 */
function* unlisted<R>(mirror: Mirror, listed: Iterable<R>, key: (r: R) => Buffer, clock: SliceClock): Generator<TableStep, string[]> {
  const out: string[] = [];
  if (mirror.size === 0) return out;
  const keep = new Set<string>();
  for (const r of listed) {
    if (clock.tick()) yield;
    keep.add(key(r).toString('latin1'));
  }
  for (const k of mirror.keys.keys()) {
    if (clock.tick()) yield;
    if (!keep.has(k)) out.push(k);
  }
  return out;
}

const CLOSED = 'the data plane was closed during the change; it was not finished';

/** A change run at once (graceStep blocks). */
function runSteps<T>(g: Generator<TableStep, T>): T {
  for (let r = g.next(); ; r = g.next()) if (r.done === true) return r.value;
}

/**
 * A change with the event loop running at its steps: a turn (setImmediate)
 * after a slice, the grace clock's promise for a grace period. Tables
 * closed meanwhile (the daemon stopping): the change ends with an error at
 * its next step, its own error handling run (nothing more is written).
 */
async function runStepsYielding<T>(g: Generator<TableStep, T>, closed: () => boolean): Promise<T> {
  if (closed()) throw new Error(CLOSED);
  let r = g.next();
  for (;;) {
    if (r.done === true) return r.value;
    try {
      if (r.value === undefined) await nextTurn();
      else await graceClock.wait(r.value);
      if (closed()) throw new Error(CLOSED);
    } catch (e) {
      r = g.throw(e);
      continue;
    }
    r = g.next();
  }
}

/** File descriptors and offsets of a loaded object's tables. */
export interface TableFds {
  readonly policiesFd: number;
  readonly localsidsFd: number;
  readonly sessionsFd: number;
  readonly countersFd: number;
  /** The .data.cfg array map (one element, key 0). */
  readonly configFd: number;
  readonly configSize: number;
  /** Offsets of mup_cfgs[0] and mup_cfgs[1] inside the .data.cfg value. */
  readonly configOffsets: readonly [number, number];
  /** Offset of mup_cfg_sel. */
  readonly selOffset: number;
}

/** Table sizes, fixed at load. */
export interface TableSizes {
  readonly maxPolicies: number;
  readonly maxLocalSids: number;
  /** Absent = DEFAULT_MAX_SESSIONS. */
  readonly maxSessions?: number;
}

export type TableKind = 'policy' | 'localsid' | 'session';

/** The session table's size. */
export function maxSessionsOf(sizes: TableSizes): number {
  return sizes.maxSessions ?? DEFAULT_MAX_SESSIONS;
}

/**
 * A session key's "prefix length" as the mirror counts it: family * 256 +
 * length, so that the IPv4 and IPv6 lengths stay apart (two lists in mup_config).
 */
function sessionPlen(family: number, len: number): number {
  return family * 256 + len;
}

function splitSessionPlens(plens: readonly number[]): { session4Plens: number[]; session6Plens: number[] } {
  return {
    session4Plens: prefixLengths(plens.filter((p) => p >> 8 === 4).map((p) => p & 0xff), 'IPv4 sessions'),
    session6Plens: prefixLengths(plens.filter((p) => p >> 8 === 6).map((p) => p & 0xff), 'IPv6 sessions'),
  };
}

/** A policy's key: its match prefix, or its (match /32, TEID prefix). */
export type PolicyKey = Ipv4Prefix | { readonly match: Ipv4Prefix; readonly teid?: TeidPrefix };

/** A /32 policy key without a TEID prefix: the key an address-only entry takes over when it is deleted (#withAddrOnly). */
function plainHostKey(k: PolicyKey): boolean {
  return 'match' in k ? k.match.len === 32 && k.teid === undefined : k.len === 32;
}

function policyKeyBuf(k: PolicyKey, into?: Buffer, at = 0): Buffer {
  return 'match' in k ? encodePolicyKey(k.match, into, at, k.teid) : encodePolicyKey(k, into, at);
}

/** A batch of changes, applied by Tables.apply in a packet-safe order. */
export interface Changes {
  readonly putPolicies?: readonly Policy[];
  readonly delPolicies?: readonly PolicyKey[];
  readonly putLocalSids?: readonly LocalSid[];
  readonly delLocalSids?: readonly Ipv6Prefix[];
  readonly putSessions?: readonly Session[];
  readonly delSessions?: readonly Session['ue'][];
  /** New global settings (forwarding, hash seed, ports); table sizes must not change. */
  readonly settings?: Settings;
}

export interface ApplyResult {
  readonly added: number;
  readonly replaced: number;
  readonly deleted: number;
  readonly unchanged: number;
}

/**
 * What user space knows of one table, without an object per entry: key
 * (latin1 string) -> rule id, and the prefix length of each rule id in a
 * flat array (rule ids are dense, first..first+count-1). Not the values:
 * the map holds them, and a change reads back the few it replaces (see
 * StoredValues). A copy of every value was 15 MB resident with 65,536
 * policies and 65,536 local SIDs (docs/bench.md, session 11).
 */
class Mirror {
  /**
   * Key -> rule id; -1 for an entry found in the map that is not ours
   * (rewritten or deleted on sync). Typed (src/host/key-index.ts): a Map
   * of the key texts held a string and a Map entry a key (79 bytes of
   * heap), and rebuilt itself in one step under churn.
   */
  readonly keys: KeyIndex;
  readonly #plens: Int16Array;
  /** Policies only: each rule's flags byte (address-only entries). */
  readonly #flags: Uint8Array;
  /**
   * Local SIDs only: each rule's behaviour byte, kept after the entry is
   * deleted until its id is reused (the per-function totals and the
   * retired slots: Tables.functionOf).
   */
  readonly #behaviors: Uint8Array;
  /** Prefix lengths of the -1 entries. */
  readonly #foreign = new Map<string, number>();
  /** How many entries have each prefix length: the length list without a walk of the table. */
  readonly #plenCount = new Map<number, number>();
  /** Policies only: how many keys longer than 32 bits (TEID prefixes) each DA has. */
  readonly teidKeys = new Map<number, number>();

  constructor(
    /** The map and its name (in messages). */
    readonly fd: number,
    readonly name: string,
    keySize: number,
    readonly first: number,
    readonly count: number,
    readonly valueSize: number,
    /** Offset of the rule id in a value. */
    readonly ruleAt: number,
    /** Offset of the flags byte in a value: policies only. */
    readonly flagsAt?: number,
    /** Offset of the behaviour byte in a value: local SIDs only. */
    readonly behaviorAt?: number,
  ) {
    this.keys = new KeyIndex(keySize);
    this.#plens = new Int16Array(count).fill(-1);
    this.#flags = new Uint8Array(flagsAt === undefined ? 0 : count);
    this.#behaviors = new Uint8Array(behaviorAt === undefined ? 0 : count);
  }

  get size(): number {
    return this.keys.size;
  }

  #count(plen: number, by: number, key?: string): void {
    this.#countDa(plen, by, plen > 32 && key !== undefined && this.flagsAt !== undefined ? keyParts(key).daddr : undefined);
  }

  /** #count with the key's DA (policies, keys longer than 32 bits) given as a number. */
  #countDa(plen: number, by: number, da: number | undefined): void {
    const n = (this.#plenCount.get(plen) ?? 0) + by;
    if (n <= 0) this.#plenCount.delete(plen);
    else this.#plenCount.set(plen, n);
    if (plen > 32 && da !== undefined && this.flagsAt !== undefined) {
      const t = (this.teidKeys.get(da) ?? 0) + by;
      if (t <= 0) this.teidKeys.delete(da);
      else this.teidKeys.set(da, t);
    }
  }

  /** The DA of the policy key at `keys[at, ...)` when its length is over 32 bits (TEID keys), else undefined. */
  #daAt(plen: number, keys: Buffer, at: number): number | undefined {
    return plen > 32 && this.flagsAt !== undefined ? keys.readUInt32BE(at + PK_DADDR) : undefined;
  }

  /** Prefix length of the entry with this key, if any. */
  plenOf(key: string): number | undefined {
    const rule = this.keys.get(key);
    if (rule === undefined) return undefined;
    return rule < 0 ? this.#foreign.get(key) : this.#plens[rule - this.first];
  }

  /** `value` (from byte `at`): the value written, for its flags byte (policies). */
  set(key: string, rule: number, value: Buffer | undefined, plen: number, at = 0): void {
    const was = this.plenOf(key);
    if (was !== undefined && was >= 0) this.#count(was, -1, key);
    this.#count(plen, +1, key);
    const oldRule = this.keys.get(key);
    if (oldRule !== undefined && oldRule >= 0 && oldRule !== rule) this.#plens[oldRule - this.first] = -1;
    this.keys.set(key, rule);
    if (rule < 0) {
      this.#foreign.set(key, plen);
      return;
    }
    this.#foreign.delete(key);
    this.#ours(rule, plen, value === undefined ? undefined : this.#keptOf(value, at));
  }

  /** set() of a key the mirror does not have (a plan's fresh put): no look-ups of an old entry. */
  add(key: string, rule: number, value: Buffer, plen: number, at: number): void {
    this.#count(plen, +1, key);
    this.keys.set(key, rule);
    this.#ours(rule, plen, value === undefined ? undefined : this.#keptOf(value, at));
  }

  /**
   * add() of the key whose bytes are `keys[at, at + key size)`, made no
   * text of (a fill of an empty table), with the one byte of its value the
   * mirror keeps given (`kept`: the flags of a policy, the behaviour of a
   * local SID; nothing of a session's), the value itself not encoded yet;
   * false, and nothing changed, when the mirror has that key.
   */
  addBytes(keys: Buffer, at: number, rule: number, plen: number, kept: number): boolean {
    if (!this.keys.addBytes(keys, at, rule)) return false;
    this.#countDa(plen, +1, this.#daAt(plen, keys, at));
    this.#ours(rule, plen, kept);
    return true;
  }

  /** Take back an addBytes of rule `rule` (a fill's entries that were not written). */
  deleteBytes(keys: Buffer, at: number, rule: number): void {
    if (!this.keys.deleteBytes(keys, at)) return;
    const plen = this.#plens[rule - this.first]!;
    this.#countDa(plen, -1, this.#daAt(plen, keys, at));
    this.#plens[rule - this.first] = -1;
  }

  /** The byte of the value at `at` the mirror keeps: a policy's flags, a local SID's behaviour (none of a session's). */
  #keptOf(value: Buffer, at: number): number | undefined {
    const offset = this.flagsAt ?? this.behaviorAt;
    return offset === undefined ? undefined : value[at + offset];
  }

  /** Rule `rule` is ours now: its prefix length and, when given, the byte of its value kept. */
  #ours(rule: number, plen: number, kept: number | undefined): void {
    if (kept !== undefined && this.flagsAt !== undefined) this.#flags[rule - this.first] = kept;
    if (kept !== undefined && this.behaviorAt !== undefined) this.#behaviors[rule - this.first] = kept;
    this.#plens[rule - this.first] = plen;
  }

  delete(key: string): void {
    const rule = this.keys.get(key);
    if (rule === undefined) return;
    const plen = this.plenOf(key);
    if (plen !== undefined && plen >= 0) this.#count(plen, -1, key);
    this.keys.delete(key);
    if (rule < 0) this.#foreign.delete(key);
    else this.#plens[rule - this.first] = -1;
  }

  /** Entries of each of its maps. */
  footprint(): Record<string, number> {
    return { keys: this.keys.size, foreign: this.#foreign.size, plenCounts: this.#plenCount.size, teidAddresses: this.teidKeys.size };
  }

  /** The flags byte of the value last written for `rule` (policies). */
  flagsOf(rule: number): number {
    return this.#flags[rule - this.first] ?? 0;
  }

  /** The behaviour byte of the value last written for `rule` (local SIDs), also once it is deleted. */
  behaviorOf(rule: number): number {
    return this.#behaviors[rule - this.first] ?? 0;
  }

  /** Distinct prefix lengths, longest first. */
  plens(): number[] {
    return [...this.#plenCount.keys()].sort((a, b) => b - a);
  }

  /** The prefix lengths left once the keys `gone` (each once, all in the table) are deleted, the slice checked as it goes. */
  *plensWithout(gone: readonly string[], clock?: SliceClock): Generator<TableStep, number[]> {
    const counts = new Map(this.#plenCount);
    for (const k of gone) {
      if (clock?.tick() === true) yield;
      const p = this.plenOf(k);
      if (p === undefined || p < 0) continue;
      const n = (counts.get(p) ?? 0) - 1;
      if (n <= 0) counts.delete(p);
      else counts.set(p, n);
    }
    return [...counts.keys()].sort((a, b) => b - a);
  }
}

/** Replaced entries a change reads back one lookup each up to this many; more: the whole table in one dump. */
const READ_BACK_ONE_BY_ONE = 256;

/**
 * What the table holds now for the keys a change puts again (`existing` of
 * them): an entry equal to its put is left alone (no write, no grace
 * period). One lookup per key for a few (an API replace), one dump of the
 * table for many (a reload or a restart with most rules as they were): the
 * dump is garbage once the change is planned.
 */
function storedValues(mirror: Mirror, existing: number, oneByOne = READ_BACK_ONE_BY_ONE): (rule: number, key: Buffer) => Buffer | undefined {
  const vs = mirror.valueSize;
  if (existing <= oneByOne) return (_rule, key) => mapLookup(mirror.fd, key, vs, mirror.name);
  let dump: { keys: Buffer; values: Buffer; at: Int32Array; ks: number } | undefined;
  return (rule, key) => {
    const ks = key.length;
    if (dump === undefined) {
      const { keys, values, count } = mapDump(mirror.fd, ks, vs, mirror.name);
      // Where each rule id's entry is in the dump (the id is in the value).
      const at = new Int32Array(mirror.count).fill(-1);
      for (let i = 0; i < count; i++) {
        const r = values.readUInt32LE(i * vs + mirror.ruleAt) - mirror.first;
        if (r >= 0 && r < mirror.count) at[r] = i;
      }
      dump = { keys, values, at, ks };
    }
    const i = dump.at[rule - mirror.first]!;
    if (i < 0 || dump.keys.compare(key, 0, ks, i * ks, (i + 1) * ks) !== 0) return undefined;
    return dump.values.subarray(i * vs, (i + 1) * vs);
  };
}

/** Free rule ids of one table, lowest first: a stack in a typed array (4 bytes an id, whatever the table's size). */
class IdPool {
  readonly #free: Uint32Array;
  #n = 0;
  /** The highest id ever in use (first - 1: none yet): no id above it has been taken, so its counter slot is zero. */
  #high: number;
  constructor(first: number, count: number, used: Uint8Array) {
    this.#free = new Uint32Array(count);
    this.#high = first - 1;
    for (let id = first + count - 1; id >= first; id--) {
      if (used[id] !== 1) this.#free[this.#n++] = id;
      else if (id > this.#high) this.#high = id;
    }
  }
  take(): number | undefined {
    if (this.#n === 0) return undefined;
    const id = this.#free[--this.#n]!;
    if (id > this.#high) this.#high = id;
    return id;
  }
  get high(): number {
    return this.#high;
  }
  /** Give back ids taken last, in the order they were taken: the pool as it was before (a change that goes another way). */
  untake(ids: ArrayLike<number>): void {
    for (let i = ids.length - 1; i >= 0; i--) this.#free[this.#n++] = ids[i]!;
  }
  give(ids: readonly number[]): void {
    // Keep lowest-first order for the common case of one id.
    for (const id of [...ids].sort((a, b) => b - a)) this.#free[this.#n++] = id;
  }
  get size(): number {
    return this.#n;
  }
}

/**
 * The tables refuse a change as it is: a full table, more prefix lengths
 * than the data path looks up, a key given twice, other table sizes. The
 * request's doing (409 at the API); any other error of a write, a plain
 * RangeError of V8's among them (an allocation that failed), is not.
 */
export class TablesRefusedError extends RangeError {
  override readonly name: string = 'TablesRefusedError';
}

export class TablesFullError extends TablesRefusedError {
  override readonly name = 'TablesFullError';
  /**
   * @param roomAfterDeletes the change's own deletes would make the room its
   * new entries lack in the table that ran out (they are written after them).
   */
  constructor(
    message: string,
    readonly roomAfterDeletes = false,
  ) {
    super(message);
  }
}

/**
 * One entry to put: its key (the key's bytes in `keys` from `at`: a batch's
 * keys share one buffer, no view per entry), as text, its prefix length,
 * and its value for a rule id (written into `into` at `at`).
 */
interface Put {
  readonly keys: Buffer;
  readonly at: number;
  readonly keyStr: string;
  readonly plen: number;
  /** The rule it encodes, and how (no closure per entry: one of these per rule of a sync). */
  readonly rule: unknown;
  readonly writeValue: (r: never, rule: number, into: Buffer, at: number) => void;
  /** Its key is in a buffer of its own, not the batch's (an address-only entry). */
  readonly standalone?: boolean;
}

function writePut(p: Put, rule: number, into: Buffer, at: number): void {
  (p.writeValue as (r: unknown, rule: number, into: Buffer, at: number) => void)(p.rule, rule, into, at);
}

/** A put's key as a view (a lookup or a single write: not per entry of a bulk write). */
function putKey(p: Put): Buffer {
  return p.keys.subarray(p.at, p.at + p.keyStr.length);
}

/**
 * What a change writes to one table, without an object per entry (a
 * million-rule load made two objects and two Buffer views per entry, alive
 * until the end of the load: promoted, and collected with the whole heap).
 */
interface Plan {
  readonly puts: readonly Put[];
  /** Every put's value for its rule id, in put order (valueSize bytes each). */
  readonly values: Buffer;
  /** Each put's rule id. */
  readonly rules: Uint32Array;
  /** Puts (indexes) of keys not in the table: inserted in one batch, in put order. */
  readonly fresh: number[];
  /** Puts (indexes) of keys in the table whose value changes: replaced one by one. */
  readonly replace: number[];
  /**
   * Replaces (put index -> the id it had) of local SIDs that change
   * behaviour: they take a new id, so that their slot counts for one
   * function only, and the old id is freed once written (docs/metrics.md).
   */
  readonly renumbered: ReadonlyMap<number, number>;
  /** Local SIDs that change behaviour in place, keeping their id: the table had no free id for them. */
  readonly inPlace: number;
  /** Every put is a fresh write, in put order (keys and values lie back to back). */
  readonly contiguous: boolean;
  readonly deletes: string[];
  readonly unchanged: number;
  readonly plensAfter: number[];
  readonly taken: number[];
}

/** One table's part of a change of new keys only (Tables.#inserting): entries 0..n-1 of its buffers. */
interface Fill {
  n: number;
  readonly ks: number;
  readonly vs: number;
  readonly fd: number;
  readonly name: string;
  keys: Buffer;
  /** Encode entry i's value into `into` at byte `at` (bytes there zero): done chunk by chunk as the entries are written. */
  readonly value: (i: number, into: Buffer, at: number) => void;
  /** Each entry's rule id. */
  rules: Uint32Array;
  plensAfter: number[];
  /** Entries written to the map (0..written-1). */
  written: number;
  /** Key texts of the address-only entries (policies). */
  readonly addrOnly: string[];
  /** Take the entries from `from` on out of the mirror and give their ids back. */
  readonly undo: (from: number) => void;
}

// Keys and values of a batch are encoded into one buffer each: a Buffer of
// its own per entry costs an ArrayBuffer, and 131,072 of them cost the
// garbage collector more than the syscalls; a view per entry (subarray)
// costs an object, which a load keeps alive to its end.

function* putsOf<R>(
  list: readonly R[],
  keySize: number,
  plen: (r: R) => number,
  writeKey: (r: R, into: Buffer, at: number) => void,
  writeValue: (r: R, rule: number, into: Buffer, at: number) => void,
  clock?: SliceClock,
): Generator<TableStep, Put[]> {
  const keys = Buffer.alloc(keySize * list.length);
  const out = new Array<Put>(list.length);
  for (let i = 0; i < list.length; i++) {
    if (clock?.tick() === true) yield;
    const r = list[i]!;
    const at = i * keySize;
    writeKey(r, keys, at);
    out[i] = {
      keys,
      at,
      keyStr: keys.toString('latin1', at, at + keySize),
      plen: plen(r),
      rule: r,
      writeValue: writeValue as Put['writeValue'],
    };
  }
  return out;
}

const policyPuts = (list: readonly Policy[], clock?: SliceClock): Generator<TableStep, Put[]> =>
  putsOf(
    list,
    LAYOUTS.mup_policy_key.size,
    (p) => (p.teid === undefined ? p.match.len : 32 + p.teid.len),
    (p, into, at) => writePolicyKey(p.match, p.teid, into, at),
    writePolicy,
    clock,
  );

// Address-only entries (bpf/lookup.h, MUP_POL_ADDR_ONLY): an N3 address with
// (N3, TEID) policies and no policy of its own without a TEID gets a /32
// entry marked address-only, so that Echo Requests and the like (matched by
// the address alone) find it. Kept in step with the TEID policies by
// #withAddrOnly: added, replaced by a real /32 policy, or deleted in the
// same batch as the policies that need it. It takes a rule id (and so a
// place of settings.max_policies) like a policy.

const PK_PLEN = LAYOUTS.mup_policy_key.members.plen.offset;
const PK_DADDR = LAYOUTS.mup_policy_key.members.daddr.offset;

/** The plen and DA of a policy key given as its latin1 text. */
function keyParts(k: string): { plen: number; daddr: number } {
  // Read from the text itself (one char a byte): a Buffer per call was one
  // ArrayBuffer per policy in every sync and batch.
  const c = (i: number): number => k.charCodeAt(i);
  return {
    plen: (c(PK_PLEN) | (c(PK_PLEN + 1) << 8) | (c(PK_PLEN + 2) << 16) | (c(PK_PLEN + 3) << 24)) >>> 0,
    daddr: ((c(PK_DADDR) << 24) | (c(PK_DADDR + 1) << 16) | (c(PK_DADDR + 2) << 8) | c(PK_DADDR + 3)) >>> 0,
  };
}

function addrKey(daddr: number): { key: Buffer; keyStr: string } {
  const key = encodePolicyKey({ addr: daddr, len: 32 } as Ipv4Prefix);
  return { key, keyStr: key.toString('latin1') };
}

const writeAddrOnly = (_: unknown, rule: number, into: Buffer, at: number): void => writeAddrOnlyPolicy(rule, into, at);

function addrOnlyPut(daddr: number): Put {
  const { key, keyStr } = addrKey(daddr);
  return { keys: key, at: 0, keyStr, plen: 32, standalone: true, rule: undefined, writeValue: writeAddrOnly as Put['writeValue'] };
}

const localSidPuts = (list: readonly LocalSid[], clock?: SliceClock): Generator<TableStep, Put[]> =>
  putsOf(list, LAYOUTS.mup_localsid_key.size, (l) => l.sid.len, (l, into, at) => writeLocalSidKey(l.sid, into, at), writeLocalSid, clock);

const sessionPuts = (list: readonly Session[], clock?: SliceClock): Generator<TableStep, Put[]> =>
  putsOf(
    list,
    LAYOUTS.mup_session_key.size,
    (x) => sessionPlen(x.ue.family, x.ue.prefix.len),
    (x, into, at) => writeSessionKey(x.ue, into, at),
    writeSession,
    clock,
  );

export class Tables {
  readonly #fds: TableFds;
  readonly sizes: TableSizes;
  readonly #ncpus = numPossibleCpus();
  readonly #policies: Mirror;
  readonly #localsids: Mirror;
  readonly #sessions: Mirror;
  readonly #policyIds: IdPool;
  readonly #localsidIds: IdPool;
  readonly #sessionIds: IdPool;
  /** Grace period an element-allocating write waits for (after a replace or delete; 0: none). */
  #allocDebt = 0;
  /** An applyYielding is under way (between its slices). */
  #yielding = false;
  /** Grace period the next flip waits for (after the last flip; 0: none). */
  #flipDebt = 0;
  #closed = false;
  /** Rule ids deleted, reusable (and their counter slots zeroed) once grace period `seq` has completed. */
  readonly #pendingFree: { seq: number; policies: number[]; localsids: number[]; sessions: number[] }[] = [];
  /**
   * A change is being written in slices (applyYielding): until it ends, the
   * mirror, the kernel's maps and the daemon's rule set may each be ahead
   * of the others (health compares them only between changes).
   */
  get changing(): boolean {
    return this.#yielding;
  }

  /**
   * Ids of deleted rules given back to the pools so far (after their grace
   * period, their counter slots zeroed): a mark for reclaimedSince.
   */
  get idsReclaimed(): number {
    return this.#reclaimedBase + this.#reclaimed.length;
  }

  /**
   * The ids given back since `mark` (an idsReclaimed), or undefined when
   * that many are no longer kept: an id taken meanwhile names another rule
   * than it did at the mark (Dataplane.countersRowsAsync).
   */
  reclaimedSince(mark: number): readonly number[] | undefined {
    const from = mark - this.#reclaimedBase;
    return from < 0 ? undefined : this.#reclaimed.slice(from);
  }

  /** The last ids given back (at most RECLAIMED_KEPT), and how many went before them. */
  #reclaimed: number[] = [];
  #reclaimedBase = 0;

  #noteReclaimed(...lists: readonly number[][]): void {
    for (const ids of lists) for (const id of ids) this.#reclaimed.push(id);
    if (this.#reclaimed.length > RECLAIMED_KEPT) {
      const drop = this.#reclaimed.length - RECLAIMED_KEPT / 2;
      this.#reclaimed = this.#reclaimed.slice(drop);
      this.#reclaimedBase += drop;
    }
  }

  /**
   * Map writes tried so far (entries inserted, replaced or deleted, the
   * configuration written), counted before each: a change that failed with
   * this unchanged wrote nothing (the daemon has nothing to put back).
   */
  get writes(): number {
    return this.#writes;
  }
  #writes = 0;

  /**
   * Before a chunked write (the `chunk`-th of a change): counted in
   * `writes`, and refused from chunk `failFrom` on when a test asks
   * (testFailInsertsFrom, testFailDeletesFrom), as the kernel refusing it
   * would be.
   */
  #beforeWrite(failFrom: number | undefined, chunk: number, what: string): void {
    this.#writes++;
    if (failFrom !== undefined && chunk >= failFrom) throw new Error(`${what} write refused (injected by a test)`);
  }

  /** #beforeWrite for a delete chunk; with testFailDeletesAfter, the refused write deletes that many of its keys first. */
  #beforeDelete(chunk: number, fd: number, keys: Buffer, ks: number, n: number, what: string): void {
    const part = this.testFailDeletesAfter;
    if (part === undefined || this.testFailDeletesFrom === undefined || chunk < this.testFailDeletesFrom) {
      this.#beforeWrite(this.testFailDeletesFrom, chunk, 'delete');
      return;
    }
    this.#writes++;
    const k = Math.min(part, n);
    mapDeleteBatch(fd, keys, ks, k, what);
    throw new BatchWriteError(`delete write refused after ${k} of ${n} keys (injected by a test)`, EIO, [], k);
  }

  /** close() was called (the daemon stopping): nothing is written any more. */
  get closed(): boolean {
    return this.#closed;
  }

  /** .data.cfg mapped (BPF_F_MMAPABLE), for generation stores in place; undefined: every change flips. */
  #cfgMap: MapMapping | undefined;
  /**
   * Tests: every table write, flip and generation store, with the grace
   * clock's completed number at the time (or the number a delete owes).
   */
  trace: { op: 'insert' | 'replace' | 'delete' | 'flip' | 'gen'; seq: number }[] | undefined;
  /** Tests: a change's delete writes fail from this one on (0: the first), as a refused BPF_MAP_DELETE_BATCH would. */
  testFailDeletesFrom: number | undefined;
  /** Tests: the next this many writes of the configuration (generations, prefix lengths) a change makes are refused, as a refused map write would be. */
  testFailConfigWrites: number | undefined;
  /** Tests: the first refused delete write (testFailDeletesFrom) deletes this many of its keys before it fails, as a kernel that fails part way. */
  testFailDeletesAfter: number | undefined;
  /** Tests: the insert writes of #applying (every change but a puts-only one of new keys, which #inserting writes) fail from this one on, as a refused BPF_MAP_UPDATE_BATCH would. */
  testFailInsertsFrom: number | undefined;
  /** Keys (latin1) of the address-only entries in the policy table. */
  readonly #addrOnly: Set<string> = new ShardedSet();
  #settings: Settings;
  /** policy_gen and localsid_gen of the active configuration (ConfigFields). */
  #gens: { policyGen: number; localsidGen: number };
  /**
   * An entry of the table was written or deleted since the configuration was
   * last written: the next configuration write carries its generation + 1, so
   * that no CPU keeps using its copy of an older entry (bpf/lookup.h).
   * Changed after the map writes, never before: a packet between the two
   * would copy the old entry under the new value.
   */
  #touched = { policy: false, localsid: false };

  /**
   * Take over tables as they are (freshly created and empty, or pinned and
   * filled by an earlier run): reads every entry into the mirror.
   *
   * `o.fresh`: every map was created with these tables (none is a
   * pinned one taken over). Then every counter slot is zero, so the scan for
   * free slots left non-zero is skipped (it reads every slot: 196,672 here
   * take about 60 ms, two million sessions' ten times that), and no grace
   * period is owed.
   */
  constructor(fds: TableFds, sizes: TableSizes, settings: Settings, o: { readonly fresh?: boolean } = {}) {
    this.#fds = fds;
    this.sizes = sizes;
    this.#settings = settings;
    // Maps taken over from an older daemon may not be mmapable: then every change flips.
    const gensAligned = fds.configOffsets.every((o) => (o + LAYOUTS.mup_config.members.policy_gen.offset) % 4 === 0 && (o + LAYOUTS.mup_config.members.localsid_gen.offset) % 4 === 0);
    if (gensAligned && (mapInfo(fds.configFd, MAP_CONFIG).flags & BPF_F_MMAPABLE) !== 0) {
      this.#cfgMap = mapMmap(fds.configFd, fds.configSize, MAP_CONFIG);
    }
    // Another process (an earlier daemon, a CLI load) may have replaced, deleted or
    // flipped just before exiting, owing a grace period nobody waits for now: owe one here.
    // Maps made with these tables were never seen by a program run: nothing is owed (the
    // first grace period also starts the clock's thread, 100-120 ms of every fresh start).
    this.#allocDebt = this.#flipDebt = o.fresh === true ? 0 : graceClock.request();
    const active = this.readConfig();
    this.#gens = { policyGen: active.policyGen, localsidGen: active.localsidGen };
    const pl = LAYOUTS.mup_policy;
    this.#policies = new Mirror(fds.policiesFd, MAP_POLICIES, LAYOUTS.mup_policy_key.size, 0, sizes.maxPolicies, pl.size, pl.members.rule.offset, pl.members.flags.offset);
    this.#localsids = new Mirror(
      fds.localsidsFd,
      MAP_LOCALSIDS,
      LAYOUTS.mup_localsid_key.size,
      sizes.maxPolicies,
      sizes.maxLocalSids,
      LAYOUTS.mup_localsid.size,
      LAYOUTS.mup_localsid.members.rule.offset,
      undefined,
      LAYOUTS.mup_localsid.members.behavior.offset,
    );
    this.#sessions = new Mirror(
      fds.sessionsFd,
      MAP_SESSIONS,
      LAYOUTS.mup_session_key.size,
      sizes.maxPolicies + sizes.maxLocalSids,
      maxSessionsOf(sizes),
      LAYOUTS.mup_session.size,
      LAYOUTS.mup_session.members.rule.offset,
    );
    // Rule ids in use: one byte per id (a Set of a million numbers is tens of MB).
    const total = sizes.maxPolicies + sizes.maxLocalSids + maxSessionsOf(sizes);
    const used = new Uint8Array(total);
    for (const [fd, keySize, mirror, ruleAt, name] of [
      [fds.policiesFd, LAYOUTS.mup_policy_key.size, this.#policies, LAYOUTS.mup_policy.members.rule.offset, MAP_POLICIES],
      [fds.localsidsFd, LAYOUTS.mup_localsid_key.size, this.#localsids, LAYOUTS.mup_localsid.members.rule.offset, MAP_LOCALSIDS],
      [fds.sessionsFd, LAYOUTS.mup_session_key.size, this.#sessions, LAYOUTS.mup_session.members.rule.offset, MAP_SESSIONS],
    ] as const) {
      const vs = mirror.valueSize;
      const { keys, values, count } = mapDump(fd, keySize, vs, name);
      for (let i = 0; i < count; i++) {
        const k = keys.subarray(i * keySize, (i + 1) * keySize);
        const v = values.subarray(i * vs, (i + 1) * vs);
        const rule = v.readUInt32LE(ruleAt);
        const plen = fd === fds.sessionsFd ? sessionPlen(k[0]!, k[1]!) : k.readUInt32LE(0);
        if (rule < mirror.first || rule >= mirror.first + mirror.count || used[rule] === 1) {
          // Not one of ours, or a table from another layout: rewritten with a fresh id (or deleted) on sync.
          mirror.set(k.toString('latin1'), -1, undefined, plen);
          continue;
        }
        used[rule] = 1;
        mirror.set(k.toString('latin1'), rule, v, plen);
        if (mirror === this.#policies && (v.readUInt8(LAYOUTS.mup_policy.members.flags.offset) & POLICY_FLAGS.addrOnly) !== 0) {
          this.#addrOnly.add(k.toString('latin1'));
        }
      }
    }
    this.#policyIds = new IdPool(0, sizes.maxPolicies, used);
    this.#localsidIds = new IdPool(sizes.maxPolicies, sizes.maxLocalSids, used);
    this.#sessionIds = new IdPool(sizes.maxPolicies + sizes.maxLocalSids, maxSessionsOf(sizes), used);
    // A free id's counter slot is zero (zeroed when its rule went); one that
    // is not (a daemon killed between a delete and the zeroing) is zeroed now.
    const stride = COUNTER_STRIDE * this.#ncpus;
    // Read in chunks: a million rules' counters at once would be 64 MB and more.
    const dirty: number[] = [];
    for (let first = 0; o.fresh !== true && first < total; first += COUNTER_READ_CHUNK) {
      const n = Math.min(COUNTER_READ_CHUNK, total - first);
      const raw = counterRange(fds.countersFd, MUP_EVENT_SLOTS + first, n, this.#ncpus);
      for (let i = 0; i < n; i++) {
        if (used[first + i] !== 1 && !slotIsZero(raw, i * stride, stride)) dirty.push(MUP_EVENT_SLOTS + first + i);
      }
    }
    if (dirty.length > 0) {
      // Their rules may have been deleted just now: no packet may still count into them.
      graceClock.waitSync(this.#allocDebt);
      // A policy's or a session's counts go to its function's retired slot, as at a reclaim. A local
      // SID's function went with the daemon that deleted it (its behaviour byte): zeroed only.
      const localFirst = MUP_EVENT_SLOTS + sizes.maxPolicies;
      const isLocal = (slot: number): boolean => slot >= localFirst && slot < localFirst + sizes.maxLocalSids;
      this.#retire(dirty.filter((slot) => !isLocal(slot)));
      zeroCounterSlots(fds.countersFd, dirty.filter(isLocal), this.#ncpus);
    }
  }

  /**
   * Times counts were moved into the retired slots (a deleted rule's when
   * its slot was zeroed). A counter read made in slices while one happened
   * may have seen a slot before the move and the retired slot after it, or
   * the other way round: Dataplane.countersRowsAsync reads again in one go.
   */
  get countsMoved(): number {
    return this.#countsMoved;
  }

  #countsMoved = 0;

  /**
   * Local SIDs that changed behaviour in place so far (the table had no free
   * id for a new one): their packets before the change count under their new
   * function. onBehaviorsChangedInPlace is told of each such change.
   */
  get behaviorsChangedInPlace(): number {
    return this.#behaviorsChangedInPlace;
  }

  #behaviorsChangedInPlace = 0;
  onBehaviorsChangedInPlace: ((n: number) => void) | undefined;

  /**
   * The rule id a put of local SID `sid` with `behavior` would take from it
   * (it is in the table with another behaviour: it gets a new id), or
   * undefined: the next-hop cache forgets that id as a delete's.
   */
  localsidRenumbered(sid: Ipv6Prefix, behavior: LocalSid['behavior']): number | undefined {
    const rule = this.localsidRule(sid);
    return rule !== undefined && this.#localsids.behaviorOf(rule) !== BEHAVIORS[behavior ?? 'end.m.gtp4.e'] ? rule : undefined;
  }

  /**
   * The translation function (enum mup_function) rule id `rule` counts
   * for: by its table; a local SID by the behaviour written for it (an id
   * keeps one behaviour: a local SID that changes behaviour takes a new id),
   * also after its delete until its id is reused. Undefined for a local SID
   * whose behaviour byte names none (an entry not written by us: the
   * program counts no rule for it).
   */
  functionOf(rule: number): number | undefined {
    if (rule < this.sizes.maxPolicies) return FN.MUP_FN_H_M_GTP4_D;
    if (rule < this.sizes.maxPolicies + this.sizes.maxLocalSids) {
      const b = this.#localsids.behaviorOf(rule);
      return b <= FN.MUP_FN_END_M_GTP6_D_DI - FN.MUP_FN_END_M_GTP4_E ? FN.MUP_FN_END_M_GTP4_E + b : undefined;
    }
    return FN.MUP_FN_H_M_SESSION_ENCAPS;
  }

  /**
   * Zero these rule slots (no packet counts into them any more), their
   * counts first added to their functions' retired slots, so that no
   * function's total goes down when a rule goes. If the zeroing fails (part
   * way, perhaps), the retired slots get the counts of the slots it zeroed
   * only: the others are retired at the next try.
   */
  #retire(slots: readonly number[]): void {
    if (slots.length === 0) return;
    const fd = this.#fds.countersFd;
    const counts = readSlotCounts(fd, slots, this.#ncpus);
    const sums = (which: (i: number) => boolean): Map<number, SlotCounts> => {
      const delta = new Map<number, SlotCounts>();
      for (let i = 0; i < slots.length; i++) {
        const c = counts[i]!;
        if ((c.packets === 0n && c.bytes === 0n) || !which(i)) continue;
        const fn = this.functionOf(slots[i]! - MUP_EVENT_SLOTS);
        if (fn === undefined) continue;
        const d = delta.get(fn);
        if (d === undefined) delta.set(fn, { packets: c.packets, bytes: c.bytes });
        else {
          d.packets += c.packets;
          d.bytes += c.bytes;
        }
      }
      return delta;
    };
    const delta = sums(() => true);
    if (delta.size === 0) {
      zeroCounterSlots(fd, slots, this.#ncpus);
      return;
    }
    const before = addRetired(fd, this.#ncpus, delta);
    this.#countsMoved++;
    try {
      zeroCounterSlots(fd, slots, this.#ncpus);
    } catch (e) {
      try {
        // The retired slots as they were, plus the slots that are zero now (no packet counts into them).
        writeRetired(fd, this.#ncpus, before);
        const now = readSlotCounts(fd, slots, this.#ncpus);
        const zeroed = sums((i) => now[i]!.packets === 0n && now[i]!.bytes === 0n);
        if (zeroed.size > 0) addRetired(fd, this.#ncpus, zeroed);
      } catch {
        // the zeroing's error is the one to report
      }
      throw e;
    }
  }

  get settings(): Settings {
    return this.#settings;
  }

  /** Number of counter slots the tables need: events, then one per rule. */
  static counterSlots(sizes: TableSizes): number {
    return MUP_EVENT_SLOTS + sizes.maxPolicies + sizes.maxLocalSids + maxSessionsOf(sizes);
  }

  get sessionCount(): number {
    return this.#sessions.size;
  }

  /**
   * Counter slots from 0 that can hold a count: the events, and the rule
   * slots up to the highest rule id ever taken. Every slot above is zero (a
   * slot is zeroed before its id goes back to the pool, and free slots are
   * zeroed at takeover), so a counter read stops here: with full policy and
   * local SID tables and no sessions, a third of the range is not read.
   */
  get counterSlotsInUse(): number {
    return MUP_EVENT_SLOTS + 1 + Math.max(this.#policyIds.high, this.#localsidIds.high, this.#sessionIds.high);
  }

  /** Policies in the table (address-only entries not counted). */
  get policyCount(): number {
    return this.#policies.size - this.#addrOnly.size;
  }

  /** Address-only entries (bpf/lookup.h): N3 addresses with TEID policies only. */
  get addrOnlyCount(): number {
    return this.#addrOnly.size;
  }

  get localsidCount(): number {
    return this.#localsids.size;
  }

  /** Rule id of the policy with this match prefix (and TEID prefix), if present. */
  policyRule(match: Ipv4Prefix, teid?: TeidPrefix): number | undefined {
    encodePolicyKey(match, scratch.fill(0, 0, LAYOUTS.mup_policy_key.size), 0, teid);
    return this.#policyAt(scratch);
  }

  /**
   * policyRule of a policy's own key, a row's read from its columns: the
   * next-hop cache asks it of every policy a batch puts, and the objects
   * of `match` and `teid` and the key's text were most of its 1.7 us a
   * policy (profile of 262,144 + 262,144 through /v1/batch).
   */
  policyRuleOf(p: Policy): number | undefined {
    PolicyRule.keyFieldsOf(p, KEY_FIELDS);
    writePolicyKeyFields(KEY_FIELDS[0]!, KEY_FIELDS[1]!, KEY_FIELDS[2]!, KEY_FIELDS[3]!, scratch.fill(0, 0, LAYOUTS.mup_policy_key.size), 0);
    return this.#policyAt(scratch);
  }

  /** The policy whose key bytes are at `key`[0..]: not an address-only entry (its flags say so), nor one not ours. */
  #policyAt(key: Buffer): number | undefined {
    const r = this.#policies.keys.getBytes(key, 0);
    if (r === undefined || r < 0 || (this.#policies.flagsOf(r) & POLICY_FLAGS.addrOnly) !== 0) return undefined;
    return r;
  }

  localsidRule(sid: Ipv6Prefix): number | undefined {
    const ks = LAYOUTS.mup_localsid_key.size;
    const r = this.#localsids.keys.get(encodeLocalSidKey(sid, scratch.fill(0, 0, ks), 0).toString('latin1'));
    return r === undefined || r < 0 ? undefined : r;
  }

  sessionRule(ue: Session['ue']): number | undefined {
    const ks = LAYOUTS.mup_session_key.size;
    const r = this.#sessions.keys.get(encodeSessionKey(ue, scratch.fill(0, 0, ks), 0).toString('latin1'));
    return r === undefined || r < 0 ? undefined : r;
  }

  /**
   * Make the tables hold exactly `policies` and `localsids` (by key), with
   * `settings`: writes only what differs. Throws before writing anything
   * when the result would not fit. At a full table whose room the unlisted
   * entries' deletes make, those are written first (`split`), as
   * applyRoomFirst writes a change.
   */
  sync(settings: Settings, policies: readonly Policy[], localsids: readonly LocalSid[], sessions: readonly Session[] = [], o: SyncOptions = {}): ApplyResult & { readonly split?: boolean } {
    this.#mayWrite();
    const r = runSteps(this.#syncing(settings, policies, localsids, sessions, o, true, new SliceClock(Infinity), READ_BACK_ONE_BY_ONE));
    this.#reclaimDone();
    return r;
  }

  /**
   * sync, the event loop running between slices and while a write waits
   * for a grace period: a serving daemon's write of the tables whole (a
   * reload, or the sweep after a takeover, when a put-back had failed).
   * As one sync it waited for each grace period on the loop: seconds for a
   * few hundred replaced rules at the kernel's default grace periods
   * (found in review, session 43). The caller holds the daemon's serial
   * section, as for applyYielding.
   */
  syncYielding(settings: Settings, policies: readonly Policy[], localsids: readonly LocalSid[], sessions: readonly Session[] = [], o: { readonly keep?: boolean } = {}): Promise<ApplyResult & { readonly split?: boolean }> {
    return this.#writeYielding(() => this.#syncing(settings, policies, localsids, sessions, o, true, new SliceClock(), Infinity));
  }

  /** sync's steps; `roomFirst` false: its second part after a split (it has nothing left to delete). */
  *#syncing(
    settings: Settings,
    policies: readonly Policy[],
    localsids: readonly LocalSid[],
    sessions: readonly Session[],
    o: SyncOptions,
    roomFirst: boolean,
    clock: SliceClock,
    oneByOne: number,
  ): Generator<TableStep, ApplyResult & { readonly split?: boolean }> {
    if (this.#policies.size === 0 && this.#localsids.size === 0 && this.#sessions.size === 0) {
      // Every table empty (no entry of ours or another's): nothing to delete, every key new; no Put per rule.
      // Undefined: a key given twice, which the change path below refuses in its words.
      const r = yield* this.#inserting(settings, policies, localsids, sessions, clock, o.writer);
      if (r !== undefined) return r;
    }
    const putP = yield* policyPuts(policies, clock);
    const putL = yield* localSidPuts(localsids, clock);
    const putS = yield* sessionPuts(sessions, clock);
    const delP: string[] = [];
    const delL: string[] = [];
    const delS: string[] = [];
    // keep: entries not listed stay (a restart with BGP: the learned ones stay until the table is read again).
    // An empty table (a first start) has nothing to delete: no set of the keys to build.
    if (o.keep !== true) {
      for (const [mirror, puts, dels] of [
        [this.#policies, putP, delP],
        [this.#localsids, putL, delL],
        [this.#sessions, putS, delS],
      ] as const) {
        if (mirror.size === 0) continue;
        const keep = new Set<string>();
        for (const p of puts) {
          if (clock.tick()) yield;
          keep.add(p.keyStr);
        }
        for (const k of mirror.keys.keys()) {
          if (clock.tick()) yield;
          if (!keep.has(k)) dels.push(k);
        }
      }
    }
    const [putP2, delP2] = yield* this.#withAddrOnly(putP, delP, clock);
    let r: ApplyResult;
    try {
      r = yield* this.#applying(settings, putP2, delP2, putL, delL, putS, delS, clock, oneByOne);
    } catch (e) {
      // A full table whose room the unlisted entries' deletes make: those first (the sweep's writes), then the
      // rules, as a batch at a full table is written (applyRoomFirst). Only if the whole plans so.
      // Not with `keep` (entries not listed stay: the sweep would delete them).
      if (!roomFirst || o.keep === true || !(e instanceof TablesFullError) || !e.roomAfterDeletes) throw e;
      const refused = yield* this.#plansTables([putP2, delP2, putL, delL, putS, delS], clock);
      if (refused !== undefined) throw refused;
      const a = yield* this.#sweeping(policies, localsids, sessions, clock);
      yield* this.#reclaimingAll(clock);
      const b = yield* this.#syncing(settings, policies, localsids, sessions, o, false, clock, oneByOne);
      return splitResult(a, b);
    } finally {
      this.#noteAddrOnly(putP2, delP2);
    }
    return r;
  }

  /**
   * sync's deletes, the event loop running between slices: every entry
   * whose key none of these rules has goes, and the address-only entries
   * of N3 addresses left with no TEID key. The listed rules' entries are
   * not written (every write since the tables were taken over put them):
   * the daemon's sweep of what an earlier run left in its pinned tables
   * (BGP rules not learned again). sync did the same in one turn: 247 ms
   * at 20,000 learned rules (docs/daemon.md). The caller holds the
   * daemon's serial section, as for applyYielding.
   */
  sweepYielding(policies: Iterable<Policy>, localsids: Iterable<LocalSid>, sessions: Iterable<Session>): Promise<ApplyResult> {
    return this.#writeYielding(() => this.#sweeping(policies, localsids, sessions, new SliceClock()));
  }

  /**
   * A write run in slices, the event loop turning between them: no other
   * write meanwhile (#mayWrite), and the deletes whose grace period is over
   * reclaimed after it, in slices of their own (the change is whole already).
   */
  async #writeYielding<T>(write: () => Generator<TableStep, T>): Promise<T> {
    this.#mayWrite();
    this.#yielding = true;
    try {
      return await runStepsYielding(write(), () => this.#closed);
    } finally {
      this.#yielding = false;
      if (!this.#closed) runStepsYielding(this.#reclaiming(new SliceClock()), () => this.#closed).catch(() => undefined);
    }
  }

  *#sweeping(policies: Iterable<Policy>, localsids: Iterable<LocalSid>, sessions: Iterable<Session>, clock: SliceClock): Generator<TableStep, ApplyResult> {
    const P = LAYOUTS.mup_policy_key.size;
    const L = LAYOUTS.mup_localsid_key.size;
    const S = LAYOUTS.mup_session_key.size;
    // Address-only entries are no rule's, so all are among the unlisted keys, as in sync: #withAddrOnly keeps
    // those whose address still has a TEID key (one a killed write left behind goes).
    const delP = yield* unlisted(this.#policies, policies, (p) => encodePolicyKey(p.match, scratch.fill(0, 0, P), 0, p.teid), clock);
    const delL = yield* unlisted(this.#localsids, localsids, (l) => encodeLocalSidKey(l.sid, scratch.fill(0, 0, L), 0), clock);
    const delS = yield* unlisted(this.#sessions, sessions, (s) => encodeSessionKey(s.ue, scratch.fill(0, 0, S), 0), clock);
    const [putP, delP2] = yield* this.#withAddrOnly([], delP, clock);
    try {
      return yield* this.#applying(this.#settings, putP, delP2, [], delL, [], delS, clock, Infinity);
    } finally {
      this.#noteAddrOnly(putP, delP2);
    }
  }

  /** After a batch (whole or not): which /32 keys it touched are address-only entries now. */
  #noteAddrOnly(puts: readonly Put[], dels: readonly string[]): void {
    const m = this.#policies;
    const note = (k: string, plen: number): void => {
      if (plen !== 32 && !this.#addrOnly.has(k)) return;
      const rule = m.keys.get(k);
      if (rule !== undefined && rule >= 0 && (m.flagsOf(rule) & POLICY_FLAGS.addrOnly) !== 0) this.#addrOnly.add(k);
      else this.#addrOnly.delete(k);
    };
    for (const p of puts) note(p.keyStr, p.plen);
    for (const k of dels) note(k, keyParts(k).plen);
  }

  /**
   * The policy puts and deletes with the address-only entries they make
   * needed or stale (see addrOnlyPut): an address with TEID keys after the
   * change and no /32 policy of its own has one; no other has.
   */
  *#withAddrOnly(puts: readonly Put[], dels: readonly string[], clock?: SliceClock): Generator<TableStep, [Put[], string[]]> {
    const mirror = this.#policies;
    // No /32 or longer key put and nothing deleted (a fill of match prefixes): no address is touched.
    if (dels.length === 0 && !puts.some((p) => p.plen >= 32)) return [[...puts], []];
    const putKeys = new Set<string>();
    for (const p of puts) putKeys.add(p.keyStr);
    if (clock?.due() === true) yield;
    const delSet = new Set(yield* filtering(dels, (k) => !putKeys.has(k), clock));
    const teid = new Map<number, number>();
    const touched = new Set<number>();
    const countOf = (da: number): number => teid.get(da) ?? mirror.teidKeys.get(da) ?? 0;
    for (const k of delSet) {
      if (clock?.tick() === true) yield;
      if (!mirror.keys.has(k)) continue;
      const { plen, daddr } = keyParts(k);
      if (plen > 32) teid.set(daddr, countOf(daddr) - 1);
      if (plen >= 32) touched.add(daddr);
    }
    for (const p of puts) {
      if (clock?.tick() === true) yield;
      if (p.plen < 32) continue;
      const { plen, daddr } = keyParts(p.keyStr);
      if (plen > 32 && !mirror.keys.has(p.keyStr)) teid.set(daddr, countOf(daddr) + 1);
      touched.add(daddr);
    }
    const outPuts = [...puts];
    for (const da of touched) {
      const { keyStr } = addrKey(da);
      const isAddrOnly = this.#addrOnly.has(keyStr);
      const realPut = putKeys.has(keyStr);
      const realAfter = realPut || (mirror.keys.has(keyStr) && !isAddrOnly && !delSet.has(keyStr));
      const need = countOf(da) > 0 && !realAfter;
      if (need) {
        delSet.delete(keyStr);
        // A real /32 deleted becomes the address-only entry in one write.
        if (!isAddrOnly) outPuts.push(addrOnlyPut(da));
      } else if (isAddrOnly && !realPut) {
        delSet.add(keyStr);
      }
    }
    return [outPuts, [...delSet]];
  }

  /** Apply a batch of puts (add or replace, by key) and deletes (by key), at once (grace periods waited for with Atomics.wait). */
  apply(c: Changes): ApplyResult {
    this.#mayWrite();
    const r = runSteps(this.#applyingChanges(c));
    this.#reclaimDone();
    return r;
  }

  /**
   * Throws unless a write may start now: the tables are open, and no
   * applyYielding is under way (a write between two of its slices would
   * move the mirror, the ids and the grace debts under its plan).
   */
  #mayWrite(): void {
    if (this.#closed) throw new Error('the data plane is closed; nothing was written');
    if (this.#yielding) throw new Error("a batch is being written to the tables; a second write must wait for it (the daemon's serial section)");
  }

  /** Deletes whose grace period is over: their slots zeroed and ids given back now. */
  #reclaimDone(): void {
    try {
      runSteps(this.#reclaiming(new SliceClock(Infinity)));
    } catch {
      // The change is written; a delete left in #pendingFree is reclaimed by the next change or its grace callback.
    }
  }

  /**
   * apply, the event loop running between slices of about SLICE_MS
   * (the plan, INSERT_CHUNK new entries a write) and while a write waits
   * for a grace period (a replace after a replace, a flip after a flip):
   * a large API batch (src/daemon/daemon.ts). The caller holds the
   * daemon's serial section, after every earlier change's fdatasync (whose
   * failure would undo it with a table write); any other write meanwhile
   * throws (#mayWrite).
   * Packets see each entry change in one step, as with apply; reads of
   * the tables meanwhile (status, rule ids) see the change part done.
   */
  applyYielding(c: Changes): Promise<ApplyResult> {
    // Replaced values read back one lookup each (sliced), not in one dump of the table (60-90 ms at 65,536).
    return this.#writeYielding(() => this.#applyingChanges(c, Infinity));
  }

  /**
   * applyYielding, with room made first when a table is full: a change
   * refused because a table lacks ids for its new entries, which its own
   * deletes would free (TablesFullError.roomAfterDeletes; refused in the
   * plan, nothing written), is written in two: its deletes, then its puts,
   * each an applyYielding. Between the two, its deleted entries are gone
   * and its new ones not in yet (a packet sees neither). `split` says so.
   * A second part that fails leaves the first written: the caller puts the
   * tables back (its reverse, through this method too: a reverse at a full
   * table is the same shape).
   */
  applyYieldingRoomFirst(c: Changes): Promise<ApplyResult & { readonly split: boolean }> {
    return this.#writeYielding(() => this.#roomFirst(c, new SliceClock(), Infinity));
  }

  /** applyYieldingRoomFirst at once (apply): a reload's table write, and its put-back. */
  applyRoomFirst(c: Changes): ApplyResult & { readonly split: boolean } {
    this.#mayWrite();
    const r = runSteps(this.#roomFirst(c, new SliceClock(Infinity), READ_BACK_ONE_BY_ONE));
    this.#reclaimDone();
    return r;
  }

  *#roomFirst(c: Changes, clock: SliceClock, oneByOne: number): Generator<TableStep, ApplyResult & { readonly split: boolean }> {
    try {
      return { ...(yield* this.#applyingChanges(c, oneByOne)), split: false };
    } catch (e) {
      // Refused in its plan (nothing written). Split only when the whole change plans with the deletes' ids
      // lent (every table, the prefix lengths): a split whose second part is refused would churn for nothing.
      // Refused then, it is for what that plan found (another table full, too many prefix lengths).
      if (!roomAfterDeletes(e, c)) throw e;
      const refused = yield* this.#plansRoomFirst(c, clock);
      if (refused !== undefined) throw refused;
    }
    const [deletes, puts] = roomFirst(c);
    const a = yield* this.#applyingChanges(deletes, oneByOne);
    // The ids the deletes freed are taken again once their grace period is over: waited for with the loop
    // running (sliced), their counter slots zeroed in slices.
    const last = this.#pendingFree.at(-1);
    if (last !== undefined) yield* graceStep(last.seq);
    yield* this.#reclaiming(clock);
    const b = yield* this.#applyingChanges(puts, oneByOne);
    return splitResult(a, b);
  }

  /**
   * Would this change plan if its deletes were written first? Each table's
   * pool lends as many more ids as the change's deletes there free (taken
   * in the plan, never written); the prefix lengths are checked as after
   * the whole change. Nothing is written; every real id taken goes back.
   * Undefined: it plans; else the error of the plan that refused it.
   */
  *#plansRoomFirst(c: Changes, clock: SliceClock): Generator<TableStep, TablesRefusedError | undefined> {
    return yield* this.#plansTables(yield* this.#putsAndDeletes(c, clock), clock);
  }

  /**
   * A change as the tables' plans take it: each table's puts and deleted
   * key texts, the policies' with the address-only entries it makes needed
   * or stale (#withAddrOnly).
   */
  *#putsAndDeletes(c: Changes, clock: SliceClock): Generator<TableStep, PutsAndDeletes> {
    const policies = yield* policyPuts(c.putPolicies ?? [], clock);
    const localsids = yield* localSidPuts(c.putLocalSids ?? [], clock);
    const sessions = yield* sessionPuts(c.putSessions ?? [], clock);
    const delPolicies = yield* keyTexts(c.delPolicies ?? [], (m) => policyKeyBuf(m), clock);
    const delL = yield* keyTexts(c.delLocalSids ?? [], (s) => encodeLocalSidKey(s), clock);
    const delS = yield* keyTexts(c.delSessions ?? [], (u) => encodeSessionKey(u), clock);
    const [putP, delP] = yield* this.#withAddrOnly(policies, yield* filtering(delPolicies, (k) => !this.#addrOnly.has(k), clock), clock);
    return [putP, delP, localsids, delL, sessions, delS];
  }

  /** #plansRoomFirst of a change's puts and deletes as the tables' plans take them (address-only entries in). */
  *#plansTables([putP, delP, localsids, delL, sessions, delS]: PutsAndDeletes, clock: SliceClock): Generator<TableStep, TablesRefusedError | undefined> {
    const tables = [
      [putP, delP, this.#policies, this.#policyIds, 'policies', 'max_policies', this.sizes.maxPolicies],
      [localsids, delL, this.#localsids, this.#localsidIds, 'local SIDs', 'max_localsids', this.sizes.maxLocalSids],
      [sessions, delS, this.#sessions, this.#sessionIds, 'sessions', 'max_sessions', maxSessionsOf(this.sizes)],
    ] as const;
    for (const [puts, dels, mirror, ids, what, setting, max] of tables) {
      const pool = new LendingIds(ids, freedBy(puts, dels, mirror));
      let plan: Plan;
      try {
        plan = yield* this.#plan(puts, dels, mirror, pool, what, setting, max, clock, Infinity);
      } catch (e) {
        if (e instanceof TablesRefusedError) return e;
        throw e;
      }
      pool.untake(plan.taken);
    }
    return undefined;
  }

  *#applyingChanges(c: Changes, oneByOne = READ_BACK_ONE_BY_ONE): Generator<TableStep, ApplyResult> {
    const clock = new SliceClock();
    if ((c.delPolicies ?? []).length + (c.delLocalSids ?? []).length + (c.delSessions ?? []).length === 0) {
      // Only puts: new keys go in without a Put per rule; a key the tables have (a replace) makes it the change path's.
      const r = yield* this.#inserting(c.settings ?? this.#settings, c.putPolicies ?? [], c.putLocalSids ?? [], c.putSessions ?? [], clock);
      if (r !== undefined) return r;
    }
    const [putP, delP, localsids, delLocalSids, sessions, delSessions] = yield* this.#putsAndDeletes(c, clock);
    try {
      return yield* this.#applying(c.settings ?? this.#settings, putP, delP, localsids, delLocalSids, sessions, delSessions, clock, oneByOne);
    } finally {
      this.#noteAddrOnly(putP, delP);
    }
  }

  *#applying(
    settings: Settings,
    putP: readonly Put[],
    delP: readonly string[],
    putL: readonly Put[],
    delL: readonly string[],
    putS: readonly Put[] = [],
    delS: readonly string[] = [],
    clock = new SliceClock(),
    oneByOne = READ_BACK_ONE_BY_ONE,
  ): Generator<TableStep, ApplyResult> {
    this.#checkSizes(settings);
    // Plan everything first, so that a batch that does not fit writes nothing.
    const planP = yield* this.#plan(putP, delP, this.#policies, this.#policyIds, 'policies', 'max_policies', this.sizes.maxPolicies, clock, oneByOne);
    let planL: Plan;
    let planS: Plan;
    try {
      planL = yield* this.#plan(putL, delL, this.#localsids, this.#localsidIds, 'local SIDs', 'max_localsids', this.sizes.maxLocalSids, clock, oneByOne);
    } catch (e) {
      this.#policyIds.give(planP.taken);
      throw e;
    }
    try {
      planS = yield* this.#plan(putS, delS, this.#sessions, this.#sessionIds, 'sessions', 'max_sessions', maxSessionsOf(this.sizes), clock, oneByOne);
    } catch (e) {
      this.#policyIds.give(planP.taken);
      this.#localsidIds.give(planL.taken);
      throw e;
    }
    const before = this.#fieldsWritten();
    const after = this.#fields(settings, planP.plensAfter, planL.plensAfter, planS.plensAfter);
    const widened = widenedFields(before, after);

    let added = 0;
    let replaced = 0;
    let deleted = 0;
    const freedP: number[] = [];
    const freedL: number[] = [];
    const freedS: number[] = [];
    const unchanged = planP.unchanged + planL.unchanged + planS.unchanged;
    try {
      // 1. New and changed entries.
      for (const [plan, fd, mirror, name, freed] of [
        [planP, this.#fds.policiesFd, this.#policies, MAP_POLICIES, freedP],
        [planL, this.#fds.localsidsFd, this.#localsids, MAP_LOCALSIDS, freedL],
        [planS, this.#fds.sessionsFd, this.#sessions, MAP_SESSIONS, freedS],
      ] as const) {
        // New keys in one syscall (nothing replaced, so nothing to wait for);
        // replaced ones one by one, with a grace period between them.
        const { puts, values: planned, rules, fresh } = plan;
        const vs = mirror.valueSize;
        if (fresh.length > 0) {
          yield* graceStep(this.#allocDebt);
          this.trace?.push({ op: 'insert', seq: graceClock.completed });
          const { keys, values } = plan.contiguous ? { keys: puts[0]!.keys.subarray(puts[0]!.at, puts[0]!.at + puts[0]!.keyStr.length * fresh.length), values: planned } : gather(plan, vs);
          const ks = puts[fresh[0]!]!.keyStr.length;
          // The index grown once for all of them (a start's fill from empty, a large batch), not shard by shard as they come.
          mirror.keys.reserve(mirror.size + fresh.length);
          // INSERT_CHUNK a write; inserts free nothing, so none waits for a grace period.
          for (let at = 0; at < fresh.length; at += INSERT_CHUNK) {
            if (at > 0 && clock.due()) yield;
            const n = Math.min(INSERT_CHUNK, fresh.length - at);
            try {
              this.#beforeWrite(this.testFailInsertsFrom, at / INSERT_CHUNK, 'insert');
              mapUpdateBatch(fd, keys.subarray(at * ks, (at + n) * ks), values.subarray(at * vs, (at + n) * vs), n, name);
            } catch (e) {
              // The entries the kernel wrote before it failed are in the mirror too (their ids stay taken).
              const written = e instanceof BatchWriteError ? e.written : 0;
              for (let j = at; j < at + written; j++) mirror.add(puts[fresh[j]!]!.keyStr, rules[fresh[j]!]!, planned, puts[fresh[j]!]!.plen, fresh[j]! * vs);
              if (written > 0) this.#touch(fd);
              throw e;
            }
            this.#touch(fd);
            for (let j = at; j < at + n; j++) {
              const i = fresh[j]!;
              mirror.add(puts[i]!.keyStr, rules[i]!, planned, puts[i]!.plen, i * vs);
            }
            added += n;
          }
        }
        for (const i of plan.replace) {
          const p = puts[i]!;
          if (clock.due()) yield;
          yield* graceStep(this.#allocDebt);
          this.trace?.push({ op: 'replace', seq: graceClock.completed });
          this.#writes++;
          mapUpdate(fd, putKey(p), planned.subarray(i * vs, (i + 1) * vs), BPF_ANY, name);
          this.#touch(fd);
          mirror.set(p.keyStr, rules[i]!, planned, p.plen, i * vs);
          replaced++;
          // A local SID that changed behaviour has a new id: its old one is freed (and its slot retired) as a delete's.
          const was = plan.renumbered.get(i);
          if (was !== undefined) freed.push(was);
          this.#allocDebt = graceClock.request();
        }
      }
      // 2. The config with old and new prefix lengths (and the generation + 1
      // of a table that was written).
      const widenedNow = withFields(widened, this.#nextGens());
      if (!sameFields(before, widenedNow)) yield* this.#writingConfig(widenedNow);
      // 3. Stale entries.
      for (const [plan, fd, mirror, name, freed] of [
        [planP, this.#fds.policiesFd, this.#policies, MAP_POLICIES, freedP],
        [planL, this.#fds.localsidsFd, this.#localsids, MAP_LOCALSIDS, freedL],
        [planS, this.#fds.sessionsFd, this.#sessions, MAP_SESSIONS, freedS],
      ] as const) {
        // A delete takes no element, so deletes need no grace period between
        // them (only the next element-allocating write after them does:
        // #allocDebt): DELETE_CHUNK keys a BPF_MAP_DELETE_BATCH, the mirror
        // following each, a turn of the
        // loop between them (10,000 deletes in one step, the mirror's
        // included, held the loop 45 ms).
        if (plan.deletes.length === 0) continue;
        const ks = plan.deletes[0]!.length;
        const keys = Buffer.allocUnsafe(ks * Math.min(DELETE_CHUNK, plan.deletes.length));
        /** The mirror follows the kernel: these keys left the map. */
        const gone = (left: readonly string[]): void => {
          for (const k of left) {
            const rule = mirror.keys.get(k);
            mirror.delete(k);
            deleted++;
            if (rule !== undefined && rule >= 0) freed.push(rule);
          }
        };
        for (let at = 0; at < plan.deletes.length; at += DELETE_CHUNK) {
          if (at > 0 || clock.due()) yield;
          const chunk = plan.deletes.slice(at, at + DELETE_CHUNK);
          chunk.forEach((k, i) => keys.write(k, i * ks, 'latin1'));
          this.#touch(fd);
          try {
            this.#beforeDelete(at / DELETE_CHUNK, fd, keys, ks, chunk.length, name);
            mapDeleteBatch(fd, keys, ks, chunk.length, name);
          } catch (e) {
            // A write that failed part way went through the chunk's first keys: they are gone from the
            // map, so from the mirror too (a put-back must write them again, address-only entries included).
            if (e instanceof BatchWriteError && e.written > 0) gone(chunk.slice(0, e.written));
            throw e;
          } finally {
            this.#allocDebt = graceClock.request();
            this.trace?.push({ op: 'delete', seq: this.#allocDebt });
          }
          gone(chunk);
        }
      }
      // 4. The config with the new lengths only (and the generation + 1 of a
      // table an entry was deleted from).
      const afterNow = withFields(after, this.#nextGens());
      if (!sameFields(widenedNow, afterNow)) yield* this.#writingConfig(afterNow);
    } catch (e) {
      this.#generationAfterFailure();
      // The ids of entries deleted before the failure (the chunks written) are free all the same.
      this.#freeAfterGrace(freedP, freedL, freedS);
      // And the ids taken for entries never written go back now (no packet ever saw them).
      this.#policyIds.give(unwrittenIds(planP, this.#policies));
      this.#localsidIds.give(unwrittenIds(planL, this.#localsids));
      this.#sessionIds.give(unwrittenIds(planS, this.#sessions));
      throw e;
    }
    this.#settings = settings;
    this.#freeAfterGrace(freedP, freedL, freedS);
    if (planL.inPlace > 0) {
      this.#behaviorsChangedInPlace += planL.inPlace;
      this.onBehaviorsChangedInPlace?.(planL.inPlace);
    }
    return { added, replaced, deleted, unchanged };
  }

  /**
   * 5. Once no packet holds a deleted entry (a grace period after the
   * deletes), its counter slot is zeroed and its id may be reused.
   */
  #freeAfterGrace(policies: number[], localsids: number[], sessions: number[]): void {
    if (policies.length + localsids.length + sessions.length === 0) return;
    // A grace period from now, after the change's generation bump: the program keeps a copy of a local
    // SID or policy entry per CPU until the generation changes, and a packet that read one before it
    // may still count into the rule's slot (the deletes' own grace period can end before the bump).
    const seq = graceClock.request();
    this.#pendingFree.push({ seq, policies, localsids, sessions });
    // Zeroed as soon as that grace period is over, not at the next change:
    // until then the per-function totals still hold the deleted rules' counts.
    // In slices: 10,000 slots zeroed at once held the loop 10-20 ms.
    graceClock.wait(seq, false).then(
      () => (this.#closed ? undefined : runStepsYielding(this.#reclaiming(new SliceClock()), () => this.#closed)),
      () => undefined, // the next change reclaims them (blocking if need be)
    ).catch(() => undefined); // the tables closed meanwhile: nothing to reclaim for
  }

  /**
   * After a change failed part way: an entry written but its generation not
   * yet changed gets it changed now, or CPUs could keep a copy of the entry
   * that was replaced. A failure here leaves the change's own error the one
   * reported.
   */
  #generationAfterFailure(): void {
    if ((this.#touched.policy || this.#touched.localsid) && !this.#closed) {
      try {
        this.#writeConfig(withFields(this.readConfig(), this.#nextGens()));
      } catch {
        // The first error is the one to report.
      }
    }
  }

  #checkSizes(settings: Settings): void {
    if (
      settings.maxPolicies !== this.sizes.maxPolicies ||
      settings.maxLocalSids !== this.sizes.maxLocalSids ||
      maxSessionsOf(settings) !== maxSessionsOf(this.sizes)
    ) {
      throw new TablesRefusedError(
        `table sizes are fixed once loaded (max_policies ${this.sizes.maxPolicies}, max_localsids ${this.sizes.maxLocalSids}); ` +
          'restart the data plane with --replace-tables to change them',
      );
    }
  }

  /**
   * A change that only puts keys the tables do not have (a first start's
   * fill into empty tables, an API batch of new rules, one new rule): what
   * #applying does for it, without a Put object, a key text or a Set
   * entry per rule. Each key is encoded into the batch's buffer and goes
   * into the mirror's index from its bytes; the ids are taken in list
   * order, the address-only entries after the policies, as #withAddrOnly
   * gives them. Undefined, with nothing changed, when a key is in the
   * tables already or given twice, or the ids run out while deletes wait
   * for their grace period: the change path does it then (and words the
   * error). Nothing is written before every rule has its id and the
   * prefix lengths are checked; a failed write leaves the mirror holding
   * what the kernel wrote (BatchWriteError.written), and only that.
   * 524,288 rules into empty tables: the change path's plan took 4.0 s, of
   * which 1.9 s went to Put objects, key texts and Sets (docs/bench.md,
   * session 24).
   */
  *#inserting(
    settings: Settings,
    policies: readonly Policy[],
    localsids: readonly LocalSid[],
    sessions: readonly Session[],
    clock = new SliceClock(),
    writer?: WriteThread,
  ): Generator<TableStep, ApplyResult | undefined> {
    this.#checkSizes(settings);
    const before = this.#fieldsWritten();
    // One table after the other, each kept as soon as it is planned: a refusal in a later one takes them all back.
    const fills: Fill[] = [];
    let after: ConfigFields;
    try {
      const plans = [
        () => this.#insertPlan(policies, this.#policies, this.#policyIds, 'policies', 'max_policies', this.sizes.maxPolicies, this.#fds.policiesFd, MAP_POLICIES,
          (p, b, o) => {
            PolicyRule.keyFieldsOf(p, KEY_FIELDS);
            return writePolicyKeyFields(KEY_FIELDS[0]!, KEY_FIELDS[1]!, KEY_FIELDS[2]!, KEY_FIELDS[3]!, b, o);
          },
          policyValueWriter(), policyFlags, clock),
        () => this.#insertPlan(localsids, this.#localsids, this.#localsidIds, 'local SIDs', 'max_localsids', this.sizes.maxLocalSids, this.#fds.localsidsFd, MAP_LOCALSIDS,
          (l, b, o) => {
            writeLocalSidKey(l.sid, b, o);
            return l.sid.len;
          },
          writeLocalSid, localSidBehavior, clock),
        () => this.#insertPlan(sessions, this.#sessions, this.#sessionIds, 'sessions', 'max_sessions', maxSessionsOf(this.sizes), this.#fds.sessionsFd, MAP_SESSIONS,
          (x, b, o) => {
            if (SessionRule.ue4Of(x, KEY_FIELDS)) {
              writeSessionKey4(KEY_FIELDS[0]!, KEY_FIELDS[1]!, b, o);
              return sessionPlen(4, KEY_FIELDS[1]!);
            }
            const ue = x.ue;
            writeSessionKey(ue, b, o);
            return sessionPlen(ue.family, ue.prefix.len);
          },
          writeSession, () => 0, clock),
      ];
      for (const plan of plans) {
        const f = yield* plan();
        if (f === undefined) {
          for (const g of fills) g.undo(0);
          return undefined;
        }
        fills.push(f);
      }
      after = this.#fields(settings, fills[0]!.plensAfter, fills[1]!.plensAfter, fills[2]!.plensAfter);
    } catch (e) {
      for (const f of fills) f.undo(0);
      throw e;
    }
    const widened = widenedFields(before, after);
    let added = 0;
    // The largest table goes to the write thread, if one is ready and another table is written too: two
    // tables' inserts from two threads (src/dataplane/write-thread.ts). Its chunks are encoded here, in
    // turns with this thread's own, and its answers read in order: what the mirror holds is what was written.
    const others = fills.filter((f) => f.n > 0);
    const largest = others.reduce<Fill | undefined>((a, f) => (a === undefined || f.n > a.n ? f : a), undefined);
    const thread = writer !== undefined && writer.ready && !writer.busy && others.length >= 2 && largest!.n >= writer.minEntries ? writer : undefined;
    const tf = thread === undefined ? undefined : largest!;
    /**
     * The thread's table: the next entry to encode, the entries encoded into the thread's free buffers and
     * not posted yet, the chunk in flight, and how the last answer ended (an error ends the table).
     */
    let tAt = 0;
    let tReady = 0;
    let flightAt = 0;
    let flightN = 0;
    let tError: Error | undefined;
    /** The next chunk encoded into the buffers the thread is not writing (one at a time, until posted). */
    const encode = (): void => {
      const f = tf!;
      if (tReady > 0 || tError !== undefined || tAt >= f.n) return;
      const n = Math.min(INSERT_CHUNK, f.n - tAt);
      const values = thread!.values;
      values.fill(0, 0, n * f.vs);
      for (let j = 0; j < n; j++) f.value(tAt + j, values, j * f.vs);
      f.keys.copy(thread!.keys, 0, tAt * f.ks, (tAt + n) * f.ks);
      tAt += n;
      tReady = n;
    };
    /** The answer to the chunk in flight, read (waited for when `wait`): false while it is not there yet. */
    const settle = (wait: boolean): boolean => {
      if (thread === undefined || !thread.busy) return true;
      if (!wait && !thread.answered) return false;
      const f = tf!;
      let ret: number;
      let count: number;
      try {
        ({ ret, count } = thread.take());
      } catch (e) {
        // The thread ended with the chunk in flight (the process ending): what it wrote of it is not known.
        tError = e as Error;
        return true;
      }
      this.#writes++;
      if (ret < 0) {
        const e = updateBatchError(ret, count, flightN, f.name);
        f.written = flightAt + e.written;
        if (e.written > 0) this.#touch(f.fd);
        tError = e;
      } else {
        this.#touch(f.fd);
        f.written = flightAt + flightN;
        added += flightN;
      }
      return true;
    };
    /** The encoded chunk posted once the one in flight is answered (waited for when `wait`), and the next encoded meanwhile. */
    const feed = (wait: boolean): void => {
      encode();
      if (!settle(wait) || tError !== undefined || tReady === 0) return;
      thread!.post(tf!.fd, tReady);
      flightAt = tAt - tReady;
      flightN = tReady;
      tReady = 0;
      encode();
    };
    try {
      if (others.length > 0) yield* graceStep(this.#allocDebt);
      for (let i = 0; i < others.length; i++) this.trace?.push({ op: 'insert', seq: graceClock.completed });
      for (const f of others) {
        if (f === tf) continue;
        // The values are encoded a chunk at a time into one buffer, not all at once: a fill of 131,072 rules
        // touched 17 MB of new pages for them (a million sessions and a million policies, 240 MB), at about
        // 4 ms a MB on this host (docs/bench.md, session 39).
        const values = Buffer.alloc(Math.min(INSERT_CHUNK, f.n) * f.vs);
        for (let at = 0; at < f.n; at += INSERT_CHUNK) {
          if (at > 0 && clock.due()) yield;
          if (tf !== undefined) {
            feed(false);
            // A refusal in the thread's table ends the fill here too, as it would have with one thread.
            if (tError !== undefined) throw tError;
          }
          const n = Math.min(INSERT_CHUNK, f.n - at);
          if (at > 0) values.fill(0);
          // An entry the writer refuses (an internal error: the config's checks refuse what it would) fails the
          // change here, as a refused write would: the chunks before it stay written and in the mirror.
          for (let j = 0; j < n; j++) f.value(at + j, values, j * f.vs);
          try {
            this.#writes++;
            mapUpdateBatch(f.fd, f.keys.subarray(at * f.ks, (at + n) * f.ks), values.subarray(0, n * f.vs), n, f.name);
          } catch (e) {
            // The kernel wrote the chunk's first `written` entries: they stay in the mirror with their ids
            // (taken back, their ids would be handed out again while the map still has them). Any other
            // error comes before the syscall: nothing of the chunk was written.
            f.written = at + (e instanceof BatchWriteError ? e.written : 0);
            if (f.written > at) this.#touch(f.fd);
            throw e;
          }
          this.#touch(f.fd);
          f.written = at + n;
          added += n;
        }
      }
      // The thread's table to its end, this thread encoding each chunk while the thread writes the one before.
      if (tf !== undefined) {
        while (tError === undefined && (tAt < tf.n || tReady > 0 || thread!.busy)) {
          if (clock.due()) yield;
          feed(true);
        }
        if (tError !== undefined) throw tError;
      }
      // As #applying: the config with old and new prefix lengths, then with the new ones (the same here: nothing was deleted).
      const widenedNow = withFields(widened, this.#nextGens());
      if (!sameFields(before, widenedNow)) yield* this.#writingConfig(widenedNow);
      const afterNow = withFields(after, this.#nextGens());
      if (!sameFields(widenedNow, afterNow)) yield* this.#writingConfig(afterNow);
    } catch (e) {
      // The thread's chunk in flight is answered first: the mirror keeps what the kernel wrote of it.
      settle(true);
      // Both threads refused: this one's error is thrown, the thread's goes with it.
      if (tError !== undefined && tError !== e && e instanceof Error && e.cause === undefined) Object.defineProperty(e, 'cause', { value: tError, configurable: true, writable: true });
      // Each table keeps what was written of it (in order: a table written whole keeps all, one not begun nothing).
      for (const f of fills) f.undo(f.written);
      this.#generationAfterFailure();
      throw e;
    }
    this.#settings = settings;
    return { added, replaced: 0, deleted: 0, unchanged: 0 };
  }

  /**
   * One table's part of #inserting: every rule's key and value encoded,
   * its id taken and its key in the mirror; for policies, then the
   * address-only entries the TEID keys of N3 addresses new to TEID keys
   * call for. Undefined (all taken back) when a key is there already or
   * given twice, or the ids run out while deletes wait for their grace.
   */
  *#insertPlan<R>(
    list: readonly R[],
    mirror: Mirror,
    ids: IdPool,
    what: string,
    setting: string,
    max: number,
    fd: number,
    name: string,
    /** Write the rule's key into `into` at `at` (bytes there zero); returns its prefix length (the mirror's). */
    writeKey: (r: R, into: Buffer, at: number) => number,
    writeValue: (r: R, rule: number, into: Buffer, at: number) => void,
    /** The byte of its value the mirror keeps (Mirror.addBytes). */
    kept: (r: R) => number,
    clock: SliceClock,
  ): Generator<TableStep, Fill | undefined> {
    const ks = mirror.keys.keyLength;
    const vs = mirror.valueSize;
    const policies = mirror === this.#policies;
    const fill: Fill = {
      n: 0,
      ks,
      vs,
      fd,
      name,
      keys: Buffer.alloc(ks * list.length),
      // The list's rules, then the address-only entries (policies).
      value: (i, into, at) => (i < list.length ? writeValue(list[i]!, fill.rules[i]!, into, at) : writeAddrOnlyPolicy(fill.rules[i]!, into, at)),
      rules: new Uint32Array(list.length),
      plensAfter: [],
      written: 0,
      addrOnly: [],
      undo: (from: number): void => {
        for (let i = from; i < fill.n; i++) mirror.deleteBytes(fill.keys, i * ks, fill.rules[i]!);
        for (const k of fill.addrOnly) if (!mirror.keys.has(k)) this.#addrOnly.delete(k);
        ids.untake(fill.rules.subarray(from, fill.n));
        fill.n = from;
      },
    };
    /** An id, or undefined when the change path should do it (ids freed by deletes whose grace period runs); throws when the table is full. */
    const take = (): number | undefined => {
      const id = ids.take();
      if (id !== undefined || this.#pendingFree.length > 0) return id;
      throw new TablesFullError(`the ${what} table is full (settings.${setting} = ${max}); delete entries, or raise settings.${setting} and restart with --replace-tables`);
    };
    try {
      // N3 addresses of the change's TEID keys, in the order their first one comes (as #withAddrOnly orders its
      // address-only puts): each gets an address-only entry unless it has a /32 entry (its own policy, or one
      // already), whether or not it had TEID keys before (an entry a failed write left out is made again).
      const teidAddrs: number[] = [];
      const seen = new Set<number>();
      for (let i = 0; i < list.length; i++) {
        if (clock.tick()) yield;
        const r = list[i]!;
        const plen = writeKey(r, fill.keys, i * ks);
        // Room for all at once (one growth of each shard), once the first key is known to be new.
        if (i === 0) {
          if (mirror.keys.hasBytes(fill.keys, 0)) {
            fill.undo(0);
            return undefined;
          }
          mirror.keys.reserve(mirror.size + list.length);
        }
        let rule: number | undefined;
        try {
          rule = take();
        } catch (e) {
          // A full table: a key in the tables already (or twice) is still the change path's, as it was before the id.
          if (mirror.keys.hasBytes(fill.keys, i * ks)) rule = undefined;
          else throw e;
        }
        if (rule === undefined) {
          fill.undo(0);
          return undefined;
        }
        const da = policies && plen > 32 ? fill.keys.readUInt32BE(i * ks + PK_DADDR) : undefined;
        // In the tables already (a replace, which takes no id), or twice in the list: the change path's. Found by
        // the add itself, one hash and one probe (a look-up first, then the add, made two hashes and three probes).
        // The id taken goes back to the pool (its high mark may stay one higher: a counter slot read, still zero).
        if (!mirror.addBytes(fill.keys, i * ks, rule, plen, kept(r))) {
          ids.untake([rule]);
          fill.undo(0);
          return undefined;
        }
        if (da !== undefined && !seen.has(da)) {
          seen.add(da);
          teidAddrs.push(da);
        }
        fill.rules[i] = rule;
        fill.n = i + 1;
      }
      if (teidAddrs.length > 0) {
        const room = list.length + teidAddrs.length;
        const keys = Buffer.alloc(ks * room);
        const rules = new Uint32Array(room);
        keys.set(fill.keys);
        rules.set(fill.rules);
        Object.assign(fill, { keys, rules });
        for (const da of teidAddrs) {
          const at = fill.n;
          encodePolicyKey({ addr: da, len: 32 } as Ipv4Prefix, fill.keys, at * ks);
          // A real /32 policy of the address (in the tables or put now): no address-only entry, and no id taken for one.
          if (mirror.keys.hasBytes(fill.keys, at * ks)) {
            fill.keys.fill(0, at * ks, (at + 1) * ks);
            continue;
          }
          const rule = take();
          if (rule === undefined) {
            fill.undo(0);
            return undefined;
          }
          mirror.addBytes(fill.keys, at * ks, rule, 32, POLICY_FLAGS.addrOnly);
          const k = fill.keys.toString('latin1', at * ks, (at + 1) * ks);
          this.#addrOnly.add(k);
          fill.addrOnly.push(k);
          fill.rules[at] = rule;
          fill.n = at + 1;
        }
      }
      fill.plensAfter = mirror.plens();
      checkPlens(what, fill.plensAfter, mirror === this.#sessions);
      return fill;
    } catch (e) {
      fill.undo(0);
      throw e;
    }
  }

  *#plan(
    puts: readonly Put[],
    dels: readonly string[],
    mirror: Mirror,
    ids: Pick<IdPool, 'take' | 'give'> & { readonly lent?: number },
    what: string,
    setting: string,
    max: number,
    clock: SliceClock,
    oneByOne: number,
  ): Generator<TableStep, Plan> {
    // A dry run (#plansRoomFirst: ids lent) asks only whether the change fits: no value is read back to find it unchanged.
    const fresh: number[] = [];
    const replace: number[] = [];
    const renumbered = new Map<number, number>();
    const putKeys = new Set<string>();
    const taken: number[] = [];
    const vs = mirror.valueSize;
    const values = Buffer.alloc(vs * puts.length);
    const rules = new Uint32Array(puts.length);
    let unchanged = 0;
    let existing = 0;
    // An empty table (a first start's fill) has no key to look up.
    const empty = mirror.size === 0;
    if (!empty) {
      for (const p of puts) {
        if (clock.tick()) yield;
        if ((mirror.keys.get(p.keyStr) ?? -1) >= 0) existing++;
      }
    }
    const stored = ids.lent === undefined ? storedValues(mirror, existing, oneByOne) : (): undefined => undefined;
    /** A free id, taken (given back if the plan fails); undefined when the table has none. */
    const takeId = (): number | undefined => {
      let rule = ids.take();
      if (rule === undefined && this.#pendingFree.length > 0) {
        // Ids freed by deletes whose grace period is still running.
        this.#reclaimAll();
        rule = ids.take();
      }
      if (rule !== undefined) taken.push(rule);
      return rule;
    };
    let inPlace = 0;
    const behaviorChanges: number[] = [];
    try {
      for (let i = 0; i < puts.length; i++) {
        if (clock.tick()) yield;
        const p = puts[i]!;
        if (putKeys.has(p.keyStr)) throw new TablesRefusedError(`the same ${what} key is given twice in one change`);
        putKeys.add(p.keyStr);
        const old = empty ? undefined : mirror.keys.get(p.keyStr);
        let rule = old !== undefined && old >= 0 ? old : undefined;
        const isNew = rule === undefined;
        rule ??= takeId();
        if (rule === undefined) {
          // Lent ids stand for the deletes already: not counted again as free ones.
          const hint = deletesFirstHint(puts, dels, mirror, taken.length - (ids.lent ?? 0));
          throw new TablesFullError(`the ${what} table is full (settings.${setting} = ${max}); delete entries, or raise settings.${setting} and restart with --replace-tables${hint}`, hint !== '');
        }
        writePut(p, rule, values, i * vs);
        rules[i] = rule;
        if (!isNew && mirror.behaviorAt !== undefined && values[i * vs + mirror.behaviorAt] !== mirror.behaviorOf(rule)) {
          // A local SID that changes behaviour: given a new id after the loop, once the new keys have theirs.
          behaviorChanges.push(i);
          replace.push(i);
          continue;
        }
        if (!isNew && stored(rule, putKey(p))?.equals(values.subarray(i * vs, (i + 1) * vs)) === true) {
          unchanged++;
          continue;
        }
        // A foreign entry (rule -1) with this key is overwritten by the update: not "fresh" for the batch.
        (isNew && old === undefined ? fresh : replace).push(i);
      }
      // A local SID that changes behaviour counts for another function from now on: a slot of its own,
      // from zero; the old one's packets stay with the old function (retired when its id is freed). With
      // no free id left (an old id is freed only a grace period after its write) it changes in place, its
      // slot's packets going with it to the new function: counted, and logged by the daemon. After the
      // new keys: a change that fits the table is never refused for it.
      for (const i of behaviorChanges) {
        if (clock.tick()) yield;
        const id = takeId();
        if (id === undefined) {
          inPlace++;
          continue;
        }
        renumbered.set(i, rules[i]!);
        writePut(puts[i]!, id, values, i * vs);
        rules[i] = id;
      }
      // Each key once: a key given twice would count its prefix length out twice.
      const gone = new Set<string>();
      const deletes = yield* filtering(dels, (k) => mirror.keys.has(k) && !putKeys.has(k) && !gone.has(k) && gone.add(k) !== undefined, clock);
      const lens = new Set<number>(yield* mirror.plensWithout(deletes, clock));
      for (const i of fresh) lens.add(puts[i]!.plen);
      for (const i of replace) lens.add(puts[i]!.plen);
      const plensAfter = [...lens].sort((a, b) => b - a);
      checkPlens(what, plensAfter, mirror === this.#sessions);
      const contiguous = fresh.length === puts.length && !puts.some((p) => p.standalone === true);
      return { puts, values, rules, fresh, replace, renumbered, inPlace, contiguous, deletes, unchanged, plensAfter, taken };
    } catch (e) {
      ids.give(taken);
      throw e;
    }
  }

  /** policy_gen and localsid_gen for the next configuration write. */
  #nextGens(): { policyGen: number; localsidGen: number } {
    const g = this.#gens;
    return {
      policyGen: this.#touched.policy ? (g.policyGen + 1) >>> 0 : g.policyGen,
      localsidGen: this.#touched.localsid ? (g.localsidGen + 1) >>> 0 : g.localsidGen,
    };
  }

  #touch(fd: number): void {
    if (fd === this.#fds.policiesFd) this.#touched.policy = true;
    else if (fd === this.#fds.localsidsFd) this.#touched.localsid = true;
    // Sessions: no per-CPU copy (bpf/session.h), no generation.
  }

  /**
   * The configuration as last written: the tables' settings and lengths, and
   * the generations written last, not the next ones (#fields). With the next
   * ones, after a change whose configuration write and generation write both
   * failed (#touched left set), a change's "before" held the generations it
   * would write, and no later change wrote a generation again.
   */
  #fieldsWritten(): ConfigFields {
    return withFields(this.#fields(this.#settings, this.#policies.plens(), this.#localsids.plens(), this.#sessions.plens()), this.#gens);
  }

  #fields(s: Settings, policyPlens: readonly number[], localsidPlens: readonly number[], sessionPlens: readonly number[]): ConfigFields {
    const sessions = splitSessionPlens(sessionPlens);
    const g = this.#nextGens();
    return withFields(
      {
        forwarding: s.forwarding,
        hashSeed: s.hashSeed,
        sportBase: s.sourcePortMin,
        sportSpan: s.sourcePortMax - s.sourcePortMin + 1,
        policyPlens: prefixLengths(policyPlens, 'policies'),
        localsidPlens: prefixLengths(localsidPlens, 'localsids'),
        policyGen: g.policyGen,
        localsidGen: g.localsidGen,
      },
      sessions,
    );
  }

  /**
   * Zero the counter slots of deleted rules and give their ids back, for
   * every delete whose grace period has completed, the slice checked
   * between pieces of RECLAIM_CHUNK slots. A delete's ids are given back
   * only after all its slots are zeroed; if another reclaim finished that
   * delete while this one waited, this one goes on to the next.
   */
  *#reclaiming(clock: SliceClock): Generator<TableStep, void> {
    while (this.#pendingFree.length > 0) {
      const p = this.#pendingFree[0]!;
      if (!graceClock.done(p.seq)) return;
      // In slot order: nearby slots are read together (#retire). A batch's deletes come in key order,
      // their ids anywhere in the table: 10,000 slots read in 512-slot pieces as they came took 21-24 ms
      // (about 150 reads a piece) against 3-5 sorted.
      const slots = Array.from(Uint32Array.from([...p.policies, ...p.localsids, ...p.sessions], (r) => MUP_EVENT_SLOTS + r).sort());
      let mine = true;
      for (let at = 0; at < slots.length; at += RECLAIM_CHUNK) {
        if (at > 0 && clock.due()) {
          yield;
          if (this.#pendingFree[0] !== p) {
            mine = false;
            break;
          }
        }
        this.#retire(slots.slice(at, at + RECLAIM_CHUNK));
      }
      if (!mine) continue;
      this.#pendingFree.shift();
      this.#policyIds.give(p.policies);
      this.#localsidIds.give(p.localsids);
      this.#sessionIds.give(p.sessions);
      this.#noteReclaimed(p.policies, p.localsids, p.sessions);
    }
  }

  /** Wait for every delete's grace period, then zero their slots and give their ids back. */
  #reclaimAll(): void {
    runSteps(this.#reclaimingAll(new SliceClock(Infinity)));
  }

  *#reclaimingAll(clock: SliceClock): Generator<TableStep, void> {
    const last = this.#pendingFree.at(-1);
    if (last !== undefined) yield* graceStep(last.seq);
    yield* this.#reclaiming(clock);
  }

  /**
   * The grace period a change must see completed before its writes run
   * without blocking: `put` (inserts and replaces allocate elements, and any
   * change may flip), `delete` (only a flip, when lengths change).
   */
  graceNeeded(op: 'put' | 'delete', c?: Changes): number {
    // A plain /32 policy's delete may be a replace: its address keeps an address-only entry while (N3, TEID)
    // policies use it (#withAddrOnly), and a replace waits for what a put does.
    if (op === 'delete' && !(c?.delPolicies ?? []).some(plainHostKey)) return this.#flipDebt;
    // A table with no free id takes one freed by a delete, whose grace period is requested after that
    // change's generation bump (#freeAfterGrace): waited for here, or the put would block on it (#reclaimAll).
    const full = this.#policyIds.size === 0 || this.#localsidIds.size === 0 || this.#sessionIds.size === 0;
    const freeing = full ? (this.#pendingFree.at(-1)?.seq ?? 0) : 0;
    return Math.max(this.#allocDebt, this.#flipDebt, freeing);
  }

  /** Resolve when a change of this kind (`c`, when known) would not wait for a grace period in apply (the event loop runs meanwhile). */
  writable(op: 'put' | 'delete', c?: Changes): Promise<void> {
    return graceClock.wait(this.graceNeeded(op, c));
  }

  /** Wait for every grace period owed so far, and reuse the ids it frees. */
  settle(): void {
    graceClock.waitSync(Math.max(this.#allocDebt, this.#flipDebt));
    this.#reclaimAll();
  }

  /** Unmap the configuration (the data plane is closed). */
  close(): void {
    this.#closed = true;
    if (this.#cfgMap !== undefined) mapMunmap(this.#cfgMap);
    this.#cfgMap = undefined;
  }

  /** The configuration the program reads now. */
  readConfig(): ConfigFields {
    const cur = this.#readCfgValue();
    const sel = cur.readUInt32LE(this.#fds.selOffset) & 1;
    return decodeConfig(cur, this.#fds.configOffsets[sel]);
  }

  #readCfgValue(): Buffer {
    // Mapped: a copy of the value's bytes (the mapping is the map's value itself): no lookup syscall per change.
    if (this.#cfgMap !== undefined) return Buffer.from(new Uint8Array(this.#cfgMap.memory, 0, this.#fds.configSize));
    return mapLookup(this.#fds.configFd, Buffer.alloc(4), this.#fds.configSize, MAP_CONFIG) ?? Buffer.alloc(this.#fds.configSize);
  }

  /**
   * Make the program read `f`: when only the generations differ from the
   * active copy (and the map is mapped), store them in place; otherwise
   * write the idle copy (after the last flip's grace period) and flip.
   */
  #writeConfig(f: ConfigFields): void {
    runSteps(this.#writingConfig(f));
  }

  *#writingConfig(f: ConfigFields): Generator<TableStep, void> {
    if ((this.testFailConfigWrites ?? 0) > 0) {
      this.testFailConfigWrites!--;
      this.#beforeWrite(0, 0, 'configuration');
    }
    const key0 = Buffer.alloc(4);
    const cur = this.#readCfgValue();
    const sel = cur.readUInt32LE(this.#fds.selOffset) & 1;
    if (this.#cfgMap !== undefined) {
      const active = decodeConfig(cur, this.#fds.configOffsets[sel]);
      if (sameFields(active, withFields(f, { policyGen: active.policyGen, localsidGen: active.localsidGen }))) {
        // One aligned 32-bit store each: a packet reads the old generation
        // or the new one; the map writes are already visible to it.
        this.#writes++;
        const words = new Int32Array(this.#cfgMap.memory);
        const at = this.#fds.configOffsets[sel]!;
        Atomics.store(words, (at + LAYOUTS.mup_config.members.policy_gen.offset) >> 2, f.policyGen | 0);
        Atomics.store(words, (at + LAYOUTS.mup_config.members.localsid_gen.offset) >> 2, f.localsidGen | 0);
        this.#gens = { policyGen: f.policyGen, localsidGen: f.localsidGen };
        this.#touched = { policy: false, localsid: false };
        this.trace?.push({ op: 'gen', seq: graceClock.completed });
        return;
      }
    }
    // No packet reads the idle copy any more.
    yield* graceStep(this.#flipDebt);
    this.trace?.push({ op: 'flip', seq: graceClock.completed });
    // Read again after the wait: in a sliced write (applyYielding) the event loop ran meanwhile, and
    // the probe's selector (POST /v1/probe, writeSelector) may have flipped the value; written back
    // as read before, its setting was lost and the copy it made active rewritten with no grace period.
    const now = this.#readCfgValue();
    const next = (now.readUInt32LE(this.#fds.selOffset) & 1) ^ 1;
    encodeConfig(f, now, this.#fds.configOffsets[next]);
    // The active copy and the selector are rewritten with the bytes they hold.
    this.#writes++;
    mapUpdate(this.#fds.configFd, key0, now, BPF_ANY, MAP_CONFIG);
    now.writeUInt32LE(next, this.#fds.selOffset);
    mapUpdate(this.#fds.configFd, key0, now, BPF_ANY, MAP_CONFIG);
    this.#gens = { policyGen: f.policyGen, localsidGen: f.localsidGen };
    this.#touched = { policy: false, localsid: false };
    this.#flipDebt = graceClock.request();
  }

  /**
   * After the tables were written behind this object's back (a test, or
   * bpftool on the pinned maps): change both generations, so that every
   * CPU looks its next packet's entry up again (bpf/lookup.h).
   */
  refreshCopies(): void {
    this.#mayWrite();
    this.#touched = { policy: true, localsid: true };
    this.#writeConfig(withFields(this.readConfig(), this.#nextGens()));
  }

  /** Write the settings to the config even if nothing else changed (after load). */
  writeSettings(settings: Settings): void {
    this.#mayWrite();
    this.#settings = settings;
    this.#writeConfig(this.#fields(settings, this.#policies.plens(), this.#localsids.plens(), this.#sessions.plens()));
  }

  /**
   * Entries of every structure this object keeps between changes (mirrors,
   * their per-length and per-address counts, free ids): a fixed set of
   * rules must keep them the same however many changes led to it
   * (test/load-scale.test.ts).
   */
  footprint(): Record<string, number> {
    this.#reclaimAll();
    const out: Record<string, number> = { addrOnly: this.#addrOnly.size };
    for (const [name, m, ids] of [
      ['policies', this.#policies, this.#policyIds],
      ['localsids', this.#localsids, this.#localsidIds],
      ['sessions', this.#sessions, this.#sessionIds],
    ] as const) {
      for (const [k, v] of Object.entries(m.footprint())) out[`${name}.${k}`] = v;
      out[`${name}.freeIds`] = ids.size;
    }
    return out;
  }

  /** Rule ids in use, per table. */
  rules(kind: TableKind): { key: Buffer; rule: number }[] {
    const m = kind === 'policy' ? this.#policies : kind === 'localsid' ? this.#localsids : this.#sessions;
    return [...m.keys]
      .filter(([k, r]) => r >= 0 && !(kind === 'policy' && this.#addrOnly.has(k)))
      .map(([k, rule]) => ({ key: Buffer.from(k, 'latin1'), rule }));
  }
}

/**
 * The keys and values of a plan's fresh puts back to back, for one batch
 * write: one copy per run of puts whose keys lie back to back in one
 * buffer (a sync's rules and the few address-only entries after them: two
 * runs and a few), not one per entry.
 */
/** Refuses more distinct prefix lengths than the data path looks up (sessions: two lists, IPv4 and IPv6 UE prefixes, each of at most MUP_MAX_PLENS). */
function checkPlens(what: string, plensAfter: readonly number[], sessions: boolean): void {
  const perList = sessions ? Math.max(...[4, 6].map((f) => plensAfter.filter((p) => p >> 8 === f).length)) : plensAfter.length;
  if (perList > MUP_MAX_PLENS) {
    throw new TablesRefusedError(
      `${what} would use ${plensAfter.length} distinct prefix lengths (${plensAfter.map((l) => `/${l}`).join(' ')}); ` +
        `the data path supports at most ${MUP_MAX_PLENS}: use fewer distinct lengths`,
    );
  }
}

/** `after` with the prefix lengths of `before` and `after` together: the config while a change's entries come and go. */
function widenedFields(before: ConfigFields, after: ConfigFields): ConfigFields {
  return withFields(after, {
    policyPlens: union(before.policyPlens, after.policyPlens),
    localsidPlens: union(before.localsidPlens, after.localsidPlens),
    session4Plens: union(before.session4Plens ?? [], after.session4Plens ?? []),
    session6Plens: union(before.session6Plens ?? [], after.session6Plens ?? []),
  });
}

function gather(plan: Plan, vs: number): { keys: Buffer; values: Buffer } {
  const { puts, fresh, values: planned } = plan;
  const ks = puts[fresh[0]!]!.keyStr.length;
  const keys = Buffer.allocUnsafe(ks * fresh.length);
  const values = Buffer.allocUnsafe(vs * fresh.length);
  for (let j = 0; j < fresh.length; ) {
    const first = fresh[j]!;
    const p = puts[first]!;
    let n = 1;
    for (; j + n < fresh.length; n++) {
      const q = puts[fresh[j + n]!]!;
      if (fresh[j + n] !== first + n || q.keys !== p.keys || q.at !== p.at + n * ks) break;
    }
    p.keys.copy(keys, j * ks, p.at, p.at + n * ks);
    planned.copy(values, j * vs, first * vs, (first + n) * vs);
    j += n;
  }
  return { keys, values };
}

/** Where single keys are encoded for a lookup in the mirror (no Buffer per lookup). */
const scratch = Buffer.alloc(64);

function union(a: readonly number[], b: readonly number[]): readonly number[] {
  const all = [...new Set([...a, ...b])].sort((x, y) => y - x);
  // More than the program looks up: a length that goes away may miss for a moment.
  return all.length > MUP_MAX_PLENS ? b : all;
}

/**
 * `f` with the fields of `p` in its place, built as one object literal of a
 * fixed shape. Every change builds several of these; built with object
 * spreads (`{ ...f, ...g }`) they left ~4 KB per change in V8's old
 * generation (promoted, not garbage of the young one), the largest part of
 * what a single API change added to the heap until the next full collection
 * (docs/bench.md "Daemon memory").
 */
function withFields(f: ConfigFields, p: Partial<ConfigFields>): ConfigFields {
  return {
    forwarding: p.forwarding ?? f.forwarding,
    hashSeed: p.hashSeed ?? f.hashSeed,
    sportBase: p.sportBase ?? f.sportBase,
    sportSpan: p.sportSpan ?? f.sportSpan,
    policyPlens: p.policyPlens ?? f.policyPlens,
    localsidPlens: p.localsidPlens ?? f.localsidPlens,
    policyGen: p.policyGen ?? f.policyGen,
    localsidGen: p.localsidGen ?? f.localsidGen,
    session4Plens: p.session4Plens ?? f.session4Plens,
    session6Plens: p.session6Plens ?? f.session6Plens,
  };
}

function sameFields(a: ConfigFields, b: ConfigFields): boolean {
  return (
    a.forwarding === b.forwarding &&
    a.hashSeed === b.hashSeed &&
    a.sportBase === b.sportBase &&
    a.sportSpan === b.sportSpan &&
    a.policyPlens.join() === b.policyPlens.join() &&
    a.localsidPlens.join() === b.localsidPlens.join() &&
    a.policyGen === b.policyGen &&
    a.localsidGen === b.localsidGen &&
    (a.session4Plens ?? []).join() === (b.session4Plens ?? []).join() &&
    (a.session6Plens ?? []).join() === (b.session6Plens ?? []).join()
  );
}
