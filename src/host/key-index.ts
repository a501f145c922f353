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
 * three slots in four used (6 MB for the same, off the heap), and a start's
 * 131,072 inserts take 60 ms against 130-160 (docs/daemon.md "Memory").
 *
 * Open addressing with linear probing; a delete shifts the entries after it
 * back (no tombstones), so churn never degrades the probes nor calls for a
 * rebuild. The table doubles when three slots in four would be used: one
 * step over every entry, written at random places of the new arrays, so it
 * is bound by memory, not by the CPU: 13 ms at 49,152 keys, 25 ms at
 * 98,304, 200 ms at 786,432 (20-byte keys, this host). The tables make it
 * for their map's max_entries (`expected`), so it never grows in service;
 * its pages are touched as keys land, so a sparse table of a million slots
 * costs resident memory for the keys it holds, not for its slots.
 * Iteration order is the slots' order, not insertion order.
 */

import { fnv1a } from './sharded-map.js';

/** Slots a table starts with at least (a power of two). */
const MIN_SLOTS = 16;

/** FNV-1a of the key's characters (each a byte), its high bits folded in, never 0: a slot's stored hash 0 means "empty". */
function hashText(key: string): number {
  const f = fnv1a(key);
  const h = (f ^ (f >>> 15)) >>> 0;
  return h === 0 ? 1 : h;
}

function slotsFor(entries: number): number {
  let n = MIN_SLOTS;
  while (n * 3 < entries * 4) n *= 2;
  return n;
}

export class KeyIndex {
  readonly keyLength: number;
  #slots = 0;
  #mask = 0;
  #keys: Buffer = Buffer.alloc(0);
  #values: Int32Array = new Int32Array(0);
  /** Each slot's key hash; 0: the slot is empty. */
  #hashes: Uint32Array = new Uint32Array(0);
  #count = 0;

  /** `expected`: entries it is sized for (grows past them). */
  constructor(keyLength: number, expected = 0) {
    if (!Number.isInteger(keyLength) || keyLength <= 0) throw new RangeError(`key length ${keyLength}: a positive integer`);
    this.keyLength = keyLength;
    this.#make(slotsFor(expected));
  }

  #make(slots: number): void {
    this.#slots = slots;
    this.#mask = slots - 1;
    this.#keys = Buffer.alloc(slots * this.keyLength);
    this.#values = new Int32Array(slots);
    this.#hashes = new Uint32Array(slots);
  }

  get size(): number {
    return this.#count;
  }

  /** Bytes held (the typed arrays), for the footprint. */
  get bytes(): number {
    return this.#keys.length + this.#values.byteLength + this.#hashes.byteLength;
  }

  #same(slot: number, key: string): boolean {
    const b = this.#keys;
    const at = slot * this.keyLength;
    for (let i = 0; i < key.length; i++) if (b[at + i] !== key.charCodeAt(i)) return false;
    return true;
  }

  /** The key's slot, or -1. A text of another length is no key of this table. */
  #find(key: string): number {
    if (key.length !== this.keyLength) return -1;
    const h = hashText(key);
    const hashes = this.#hashes;
    for (let s = h & this.#mask; ; s = (s + 1) & this.#mask) {
      const x = hashes[s]!;
      if (x === 0) return -1;
      if (x === h && this.#same(s, key)) return s;
    }
  }

  get(key: string): number | undefined {
    const s = this.#find(key);
    return s < 0 ? undefined : this.#values[s];
  }

  has(key: string): boolean {
    return this.#find(key) >= 0;
  }

  set(key: string, value: number): this {
    if (key.length !== this.keyLength) throw new RangeError(`a key of ${key.length} bytes in a table of ${this.keyLength}-byte keys`);
    if ((value | 0) !== value) throw new RangeError(`${value} is not a 32-bit integer`);
    const h = hashText(key);
    let s = h & this.#mask;
    for (; ; s = (s + 1) & this.#mask) {
      const x = this.#hashes[s]!;
      if (x === 0) break;
      if (x === h && this.#same(s, key)) {
        this.#values[s] = value;
        return this;
      }
    }
    if ((this.#count + 1) * 4 > this.#slots * 3) {
      this.#grow();
      for (s = h & this.#mask; this.#hashes[s] !== 0; s = (s + 1) & this.#mask);
    }
    const b = this.#keys;
    const at = s * this.keyLength;
    for (let i = 0; i < key.length; i++) b[at + i] = key.charCodeAt(i);
    this.#hashes[s] = h;
    this.#values[s] = value;
    this.#count++;
    return this;
  }

  /** Twice the slots, every entry placed again from its stored hash (no key text made). */
  #grow(): void {
    this.#resize(this.#slots * 2);
  }

  #resize(slots: number): void {
    const keys = this.#keys;
    const values = this.#values;
    const hashes = this.#hashes;
    const n = this.#slots;
    const len = this.keyLength;
    this.#make(slots);
    const to = this.#keys;
    const toHashes = this.#hashes;
    const toValues = this.#values;
    const mask = this.#mask;
    for (let from = 0; from < n; from++) {
      const h = hashes[from]!;
      if (h === 0) continue;
      let s = h & mask;
      while (toHashes[s] !== 0) s = (s + 1) & mask;
      for (let i = 0, a = s * len, b = from * len; i < len; i++) to[a + i] = keys[b + i]!;
      toHashes[s] = h;
      toValues[s] = values[from]!;
    }
  }

  delete(key: string): boolean {
    let hole = this.#find(key);
    if (hole < 0) return false;
    const hashes = this.#hashes;
    const mask = this.#mask;
    const len = this.keyLength;
    // Backward shift: each entry after the hole, up to the next empty slot,
    // moves into the hole unless its home slot lies cyclically in (hole, its slot].
    for (let s = (hole + 1) & mask; hashes[s] !== 0; s = (s + 1) & mask) {
      const home = hashes[s]! & mask;
      const stays = hole <= s ? hole < home && home <= s : hole < home || home <= s;
      if (stays) continue;
      this.#keys.copy(this.#keys, hole * len, s * len, s * len + len);
      hashes[hole] = hashes[s]!;
      this.#values[hole] = this.#values[s]!;
      hole = s;
    }
    hashes[hole] = 0;
    this.#count--;
    return true;
  }

  clear(): void {
    this.#hashes.fill(0);
    this.#count = 0;
  }

  /** The keys, as latin1 texts, in slot order (a text made per key: not for a hot path). The table must not change meanwhile. */
  *keys(): Generator<string> {
    const len = this.keyLength;
    for (let s = 0; s < this.#slots; s++) if (this.#hashes[s] !== 0) yield this.#keys.toString('latin1', s * len, s * len + len);
  }

  [Symbol.iterator](): Generator<[string, number]> {
    return this.entries();
  }

  *entries(): Generator<[string, number]> {
    const len = this.keyLength;
    for (let s = 0; s < this.#slots; s++) if (this.#hashes[s] !== 0) yield [this.#keys.toString('latin1', s * len, s * len + len), this.#values[s]!];
  }
}
