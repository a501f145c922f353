/**
 * A hash table of fixed-length keys (a BPF map's key bytes, given as their
 * latin1 text: one character a byte) to 32-bit integers, kept in typed
 * arrays: the tables' index of every entry (src/dataplane/tables.ts), 131,072
 * keys in the bench and two million at issue 19's scale.
 *
 * Why not a Map of the key texts: each entry was a string of its own plus
 * the Map's entry, 79 bytes of heap a key (10.3 MB for 65,536 policy keys
 * and 65,536 local-SID keys) that every full collection traced; here it is
 * the key's bytes, the value and the hash, 20-28 bytes a slot with at most
 * three slots in four used (6.3 MB for the same, off the heap). 131,072
 * inserts take 97-101 ms against 157-186 in isolation; a start of that
 * config is no faster (docs/bench.md, session 22): the gain is memory.
 *
 * Open addressing with linear probing; a delete shifts the entries after it
 * back (no tombstones), so churn never degrades the probes nor calls for a
 * rebuild. SHARDS tables, chosen by the hash's top bits, each growing by
 * half on its own when three slots in four would be used (it doubled
 * before session 45: just after a growth a shard held 2.7 slots a key,
 * now 2): a growth is a pass over
 * one shard's keys, written at random places of its new arrays (bound by
 * memory: one table of 786,432 keys took 200 ms to double; the worst step
 * while inserting two million keys here is 14 ms), and memory follows the
 * keys held, not the map's max_entries (a table sized for two million
 * slots would keep most of its pages resident with a few thousand keys
 * spread over them).
 * Iteration order is the slots' order, not insertion order.
 */
import { finishHash, SEEDED_BASIS } from './hash-seed.js';

/** Shards (a power of two), by the hash's top bits. */
const SHARD_BITS = 6;
export const KEY_INDEX_SHARDS = 1 << SHARD_BITS;

/** Slots a shard starts with (a power of two). */
const MIN_SLOTS = 16;

/**
 * The slots (at least MIN_SLOTS) that hold `entries` with at most three
 * slots in four used. Any number, not a power of two: a million keys in
 * 64 shards is 16,384 a shard, which a power of two holds only in 32,768
 * slots (half of them empty: 40 MB of a million policies' 96 MB of index
 * at issue 19's scale).
 */
function slotsFor(entries: number): number {
  return Math.max(MIN_SLOTS, Math.ceil((entries * 4) / 3));
}

/** The slots a shard of `slots` grows to for `entries`: by half at least (a growth is a pass over its keys: geometric, so a fill in steps costs each key a few passes in all). */
function grownSlots(slots: number, entries: number): number {
  return Math.max(slotsFor(entries), Math.ceil(slots * 1.5));
}

/** The hash bits below the shard's (the home slot comes from them). */
const HOME_BITS = 0xffff_ffff >>> SHARD_BITS;

/**
 * The key's hash: FNV-1a of its characters (each a byte) from this
 * process's seeded basis, finished (src/host/hash-seed.ts): unsigned,
 * never 0 (a slot's stored hash 0 means "empty"). Keys come from API
 * clients and BGP peers: unseeded, keys worked out offline to share a
 * shard and a home slot would make every probe pass all of them.
 */
function hashText(key: string): number {
  let f = SEEDED_BASIS;
  for (let i = 0; i < key.length; i++) {
    f ^= key.charCodeAt(i);
    f = Math.imul(f, 0x01000193);
  }
  return finishHash(f);
}

/** hashText of the key whose bytes are `b[at, at + len)` (the same number for the same key). */
function hashBytes(b: Uint8Array, at: number, len: number): number {
  let f = SEEDED_BASIS;
  for (let i = at; i < at + len; i++) {
    f ^= b[i]!;
    f = Math.imul(f, 0x01000193);
  }
  return finishHash(f);
}

/** hashText, for tests (a key's hash in this process). */
export const keyIndexHash: (key: string) => number = hashText;

/** The shard a key goes to (tests build clusters in one shard with it). */
export function keyShard(key: string): number {
  return hashText(key) >>> (32 - SHARD_BITS);
}

/** One shard: open addressing over typed arrays. */
class Shard {
  slots = 0;
  keys: Uint8Array = new Uint8Array(0);
  /**
   * Slot s: its key's hash (as an int32; 0: the slot is empty) at 2s, its
   * value at 2s + 1. Side by side: an insert into a million keys missed the
   * cache once for the hash and again for the value when they were two
   * arrays.
   */
  hv: Int32Array = new Int32Array(0);
  count = 0;
  /** Times the shard was made larger (tests: growth by steps is geometric). */
  growths = 0;

  constructor(readonly len: number) {
    this.make(MIN_SLOTS);
  }

  make(slots: number): void {
    this.slots = slots;
    this.keys = new Uint8Array(slots * this.len);
    this.hv = new Int32Array(2 * slots);
  }

  same(slot: number, key: string): boolean {
    const b = this.keys;
    const at = slot * this.len;
    for (let i = 0; i < key.length; i++) if (b[at + i] !== key.charCodeAt(i)) return false;
    return true;
  }

  /** A hash's home slot. */
  home(h: number): number {
    return (h & HOME_BITS) % this.slots;
  }

  /** The slot after `s`, the first after the last. */
  next(s: number): number {
    return s + 1 === this.slots ? 0 : s + 1;
  }

  sameBytes(slot: number, k: Uint8Array, kat: number): boolean {
    const b = this.keys;
    const at = slot * this.len;
    for (let i = 0; i < this.len; i++) if (b[at + i] !== k[kat + i]) return false;
    return true;
  }

  /** The slot of the key at `k[kat, kat + len)`, or -1. */
  findBytes(h: number, k: Uint8Array, kat: number): number {
    const hv = this.hv;
    const hi = h | 0;
    for (let s = this.home(h); ; s = this.next(s)) {
      const x = hv[2 * s]!;
      if (x === 0) return -1;
      if (x === hi && this.sameBytes(s, k, kat)) return s;
    }
  }

  /** Add the key at `k[kat, kat + len)` with its value; false (nothing changed) when it is there. */
  addBytes(h: number, k: Uint8Array, kat: number, value: number): boolean {
    // One probe: it ends at the key, or at the empty slot the key goes to (found again only after a growth).
    const hv = this.hv;
    const hi = h | 0;
    let s = this.home(h);
    for (let x = hv[2 * s]!; x !== 0; x = hv[2 * s]!) {
      if (x === hi && this.sameBytes(s, k, kat)) return false;
      s = this.next(s);
    }
    if (slotsFor(this.count + 1) > this.slots) {
      this.resize(grownSlots(this.slots, this.count + 1));
      s = this.emptySlot(h);
    }
    // Byte by byte: a view of the key (subarray) would be an object per key.
    for (let i = 0, a = s * this.len; i < this.len; i++) this.keys[a + i] = k[kat + i]!;
    this.hv[2 * s] = hi;
    this.hv[2 * s + 1] = value;
    this.count++;
    return true;
  }

  /** The key's slot, or -1. */
  find(h: number, key: string): number {
    const hv = this.hv;
    const hi = h | 0;
    for (let s = this.home(h); ; s = this.next(s)) {
      const x = hv[2 * s]!;
      if (x === 0) return -1;
      if (x === hi && this.same(s, key)) return s;
    }
  }

  /** The first empty slot from hash `h`'s home (where a key not in the shard goes). */
  emptySlot(h: number): number {
    const hv = this.hv;
    let s = this.home(h);
    while (hv[2 * s] !== 0) s = this.next(s);
    return s;
  }

  /** Set the key's value; true when it was not there. A key character past a byte is refused (RangeError) before the key is stored. */
  put(h: number, key: string, value: number): boolean {
    const found = this.find(h, key);
    if (found >= 0) {
      this.hv[2 * found + 1] = value;
      return false;
    }
    // The key's bytes are checked as they are copied: the slot is taken (its hash set) only after.
    if (slotsFor(this.count + 1) > this.slots) this.resize(grownSlots(this.slots, this.count + 1));
    const s = this.emptySlot(h);
    const b = this.keys;
    const at = s * this.len;
    for (let i = 0; i < key.length; i++) {
      const c = key.charCodeAt(i);
      if (c > 0xff) throw new RangeError(`character ${i} of the key is not a byte (${c}): keys are latin1 text`);
      b[at + i] = c;
    }
    this.hv[2 * s] = h | 0;
    this.hv[2 * s + 1] = value;
    this.count++;
    return true;
  }

  /** `slots` slots (room for every entry), every entry placed again from its stored hash (no key text made). */
  resize(slots: number): void {
    const { keys, hv, slots: n, len } = this;
    this.make(slots);
    this.growths++;
    const to = this.keys;
    const tv = this.hv;
    for (let from = 0; from < n; from++) {
      const h = hv[2 * from]!;
      if (h === 0) continue;
      const s = this.emptySlot(h);
      for (let i = 0, a = s * len, b = from * len; i < len; i++) to[a + i] = keys[b + i]!;
      tv[2 * s] = h;
      tv[2 * s + 1] = hv[2 * from + 1]!;
    }
  }

  /** Empty slot `hole`: each entry after it, up to the next empty slot, moves back into it unless its home lies cyclically in (hole, its slot]. */
  remove(hole: number): void {
    const hv = this.hv;
    const len = this.len;
    for (let s = this.next(hole); hv[2 * s] !== 0; s = this.next(s)) {
      const home = this.home(hv[2 * s]!);
      const stays = hole <= s ? hole < home && home <= s : hole < home || home <= s;
      if (stays) continue;
      this.keys.copyWithin(hole * len, s * len, s * len + len);
      hv[2 * hole] = hv[2 * s]!;
      hv[2 * hole + 1] = hv[2 * s + 1]!;
      hole = s;
    }
    hv[2 * hole] = 0;
    this.count--;
  }

  /** The keys' bytes as a Buffer, for their texts (one view per iteration, not per key). */
  view(): Buffer {
    return Buffer.from(this.keys.buffer, this.keys.byteOffset, this.keys.byteLength);
  }
}

export class KeyIndex {
  readonly keyLength: number;
  readonly #shards: Shard[];
  #count = 0;

  constructor(keyLength: number) {
    if (!Number.isInteger(keyLength) || keyLength <= 0) throw new RangeError(`key length ${keyLength}: a positive integer`);
    this.keyLength = keyLength;
    this.#shards = Array.from({ length: KEY_INDEX_SHARDS }, () => new Shard(keyLength));
  }

  get size(): number {
    return this.#count;
  }

  /** Bytes held (the typed arrays), for the footprint. */
  get bytes(): number {
    let n = 0;
    for (const s of this.#shards) n += s.keys.byteLength + s.hv.byteLength;
    return n;
  }

  /** Slots of the largest shard (tests: a growth is a pass over one shard). */
  get largestShard(): number {
    return Math.max(...this.#shards.map((s) => s.slots));
  }

  /** Times a shard was made larger, over all shards (tests). */
  get growths(): number {
    let n = 0;
    for (const s of this.#shards) n += s.growths;
    return n;
  }

  /**
   * Room for `entries` keys in all, spread as the hash spreads them (a
   * shard gets 1/SHARDS of them, with a margin for the spread): a fill of
   * many keys grows each shard once, to its size, instead of doubling it
   * several times over.
   *
   * A shard holding keys grows only when its own keys and its share of
   * the new ones need it, and then by half its size at least: reserves in
   * steps (each batch request of 10,000 rules reserves its own) otherwise
   * rebuilt every shard at every step, exactly to the step's size, and
   * the steps' cost grew with the keys held (12 of the 94 s of a million
   * sessions and a million policies put through /v1/batch). The margin is
   * on the new keys only: on the total, a step of a few keys after a
   * million grew every shard by half (22.5 -> 33.7 MB; found in review).
   */
  reserve(entries: number): void {
    // The margin covers the spread of the tables' keys (a million policy or session keys: 16,384 a
    // shard, within 20 of it); a shard that gets more (keys that hash unevenly) grows on its own, once.
    const add = Math.max(0, entries - this.#count);
    if (add === 0) return;
    const share = Math.ceil((add / KEY_INDEX_SHARDS) * 1.05);
    for (const t of this.#shards) {
      if (t.count === 0) {
        const slots = slotsFor(share + 64);
        if (t.slots < slots) t.resize(slots);
      } else if (t.slots < slotsFor(t.count + share)) t.resize(grownSlots(t.slots, t.count + share));
    }
  }

  #shard(h: number): Shard {
    return this.#shards[h >>> (32 - SHARD_BITS)]!;
  }

  get(key: string): number | undefined {
    if (key.length !== this.keyLength) return undefined;
    const h = hashText(key);
    const t = this.#shard(h);
    const s = t.find(h, key);
    return s < 0 ? undefined : t.hv[2 * s + 1];
  }

  has(key: string): boolean {
    if (key.length !== this.keyLength) return false;
    const h = hashText(key);
    return this.#shard(h).find(h, key) >= 0;
  }

  set(key: string, value: number): this {
    if (key.length !== this.keyLength) throw new RangeError(`a key of ${key.length} bytes in a table of ${this.keyLength}-byte keys`);
    if ((value | 0) !== value) throw new RangeError(`${value} is not a 32-bit integer`);
    const h = hashText(key);
    if (this.#shard(h).put(h, key, value)) this.#count++;
    return this;
  }

  /** The hash of the key at `keys[at, at + keyLength)`; a RangeError when the buffer has no key there. */
  #hashAt(keys: Uint8Array, at: number): number {
    if (at < 0 || at + this.keyLength > keys.length) throw new RangeError(`no ${this.keyLength}-byte key at byte ${at} of ${keys.length}`);
    return hashBytes(keys, at, this.keyLength);
  }

  /**
   * Add the key whose bytes are `keys[at, at + keyLength)` (no text made:
   * a fill of an empty table, src/dataplane/tables.ts); false, and nothing
   * changed, when the key is there already.
   */
  addBytes(keys: Uint8Array, at: number, value: number): boolean {
    if ((value | 0) !== value) throw new RangeError(`${value} is not a 32-bit integer`);
    const h = this.#hashAt(keys, at);
    if (!this.#shard(h).addBytes(h, keys, at, value)) return false;
    this.#count++;
    return true;
  }

  /** The value of the key whose bytes are `keys[at, at + keyLength)` (get without its text), or undefined. */
  getBytes(keys: Uint8Array, at: number): number | undefined {
    const h = this.#hashAt(keys, at);
    const t = this.#shard(h);
    const s = t.findBytes(h, keys, at);
    return s < 0 ? undefined : t.hv[2 * s + 1];
  }

  /** Whether the key whose bytes are `keys[at, at + keyLength)` is there. */
  hasBytes(keys: Uint8Array, at: number): boolean {
    const h = this.#hashAt(keys, at);
    return this.#shard(h).findBytes(h, keys, at) >= 0;
  }

  /** Remove the key whose bytes are `keys[at, at + keyLength)`; false when it is not there. */
  deleteBytes(keys: Uint8Array, at: number): boolean {
    const h = this.#hashAt(keys, at);
    const t = this.#shard(h);
    const s = t.findBytes(h, keys, at);
    if (s < 0) return false;
    t.remove(s);
    this.#count--;
    return true;
  }

  delete(key: string): boolean {
    if (key.length !== this.keyLength) return false;
    const h = hashText(key);
    const t = this.#shard(h);
    const s = t.find(h, key);
    if (s < 0) return false;
    t.remove(s);
    this.#count--;
    return true;
  }

  clear(): void {
    for (const s of this.#shards) {
      s.make(MIN_SLOTS);
      s.count = 0;
    }
    this.#count = 0;
  }

  /** The keys, as latin1 texts, in slot order (a text made per key: not for a hot path). The table must not change meanwhile. */
  *keys(): Generator<string> {
    const len = this.keyLength;
    for (const t of this.#shards) {
      const b = t.view();
      for (let s = 0; s < t.slots; s++) if (t.hv[2 * s] !== 0) yield b.toString('latin1', s * len, s * len + len);
    }
  }

  [Symbol.iterator](): Generator<[string, number]> {
    return this.entries();
  }

  *entries(): Generator<[string, number]> {
    const len = this.keyLength;
    for (const t of this.#shards) {
      const b = t.view();
      for (let s = 0; s < t.slots; s++) if (t.hv[2 * s] !== 0) yield [b.toString('latin1', s * len, s * len + len), t.hv[2 * s + 1]!];
    }
  }
}
