/**
 * A Map (and a Set) of string keys split into SHARDS Maps by a hash of the
 * key, for the daemon's indexes of every rule (131,072 in the bench, two
 * million at issue 19's scale). V8's Map is a hash table that keeps deleted
 * entries until it is full and then rebuilds itself in one step: under a
 * steady delete-and-add churn, a 65,536-entry Map held the event loop 7-18
 * ms at each rebuild, 131,072 entries 10-25 ms, 1,048,576 entries 200 ms
 * (docs/daemon.md "Rule changes at scale"). Here a rebuild is one
 * shard's, a SHARDS-th of that.
 *
 * The same methods as Map and Set, with one difference: iteration goes
 * shard by shard, each in insertion order, so it is deterministic but not
 * the order of insertion overall. Shards are made when first written to.
 */

import { finishHash, SEEDED_BASIS } from './hash-seed.js';

/** Shards per map: at 2,097,152 entries a shard holds about 8,192 (a rebuild well under a millisecond). */
export const SHARDS = 256;

/**
 * The key's shard: FNV-1a of its UTF-16 units from this process's seeded
 * basis, finished (src/host/hash-seed.ts). The keys (rule names, rule keys)
 * come from API clients and BGP peers: unseeded, a million names worked out
 * offline could all go to one shard, a Map of them all, whose one-step
 * rebuilds the shards are here to cut to a 256th.
 */
export function shardOf(key: string): number {
  let h = SEEDED_BASIS;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  return finishHash(h) & (SHARDS - 1);
}

/** The shards' iterators one after another, without a generator's cost per step. */
function chained<S, T>(shards: readonly (S | undefined)[], iter: (s: S) => Iterator<T>): IterableIterator<T> {
  let at = 0;
  let cur: Iterator<T> | undefined;
  const it: IterableIterator<T> = {
    next(): IteratorResult<T> {
      for (;;) {
        if (cur !== undefined) {
          const r = cur.next();
          if (r.done !== true) return r;
          cur = undefined;
        }
        while (at < shards.length && shards[at] === undefined) at++;
        if (at >= shards.length) return { done: true, value: undefined };
        cur = iter(shards[at++]!);
      }
    },
    [Symbol.iterator]() {
      return it;
    },
  };
  return it;
}

/** What ShardedMap and ShardedSet share: the shards, the count, has/delete/clear. */
abstract class Sharded<S extends Map<string, unknown> | Set<string>> {
  protected readonly shards: (S | undefined)[] = new Array<S | undefined>(SHARDS).fill(undefined);
  protected count = 0;

  get size(): number {
    return this.count;
  }

  // An empty one answers without hashing the key (shardOf is a loop over its characters): the rule set asks its
  // file rules and names, mostly empty, at every API change.
  has(key: string): boolean {
    if (this.count === 0) return false;
    return this.shards[shardOf(key)]?.has(key) ?? false;
  }

  delete(key: string): boolean {
    if (this.count === 0) return false;
    const s = this.shards[shardOf(key)];
    if (s === undefined || !s.delete(key)) return false;
    this.count--;
    return true;
  }

  clear(): void {
    this.shards.fill(undefined);
    this.count = 0;
  }

  /** A new, empty shard. */
  protected abstract make(): S;

  /** The key's shard, made if it is not there yet (no closure per call: a set is on every rule's load path). */
  protected shardFor(key: string): S {
    const i = shardOf(key);
    let s = this.shards[i];
    if (s === undefined) this.shards[i] = s = this.make();
    return s;
  }
}

export class ShardedMap<V> extends Sharded<Map<string, V>> implements Map<string, V> {
  constructor(entries?: Iterable<readonly [string, V]>) {
    super();
    if (entries !== undefined) for (const [k, v] of entries) this.set(k, v);
  }

  protected make(): Map<string, V> {
    return new Map();
  }

  get(key: string): V | undefined {
    if (this.count === 0) return undefined;
    return this.shards[shardOf(key)]?.get(key);
  }

  set(key: string, value: V): this {
    const s = this.shardFor(key);
    const n = s.size;
    s.set(key, value);
    this.count += s.size - n;
    return this;
  }

  forEach(f: (value: V, key: string, map: Map<string, V>) => void, thisArg?: unknown): void {
    for (const s of this.shards) s?.forEach((v, k) => f.call(thisArg, v, k, this));
  }

  keys(): MapIterator<string> {
    return chained(this.shards, (s) => s.keys()) as MapIterator<string>;
  }

  values(): MapIterator<V> {
    return chained(this.shards, (s) => s.values()) as MapIterator<V>;
  }

  entries(): MapIterator<[string, V]> {
    return chained(this.shards, (s) => s.entries()) as MapIterator<[string, V]>;
  }

  [Symbol.iterator](): MapIterator<[string, V]> {
    return this.entries();
  }

  get [Symbol.toStringTag](): string {
    return 'ShardedMap';
  }
}

export class ShardedSet extends Sharded<Set<string>> implements Set<string> {
  constructor(values?: Iterable<string>) {
    super();
    if (values !== undefined) for (const v of values) this.add(v);
  }

  protected make(): Set<string> {
    return new Set();
  }

  add(key: string): this {
    const s = this.shardFor(key);
    const n = s.size;
    s.add(key);
    this.count += s.size - n;
    return this;
  }

  forEach(f: (value: string, key: string, set: Set<string>) => void, thisArg?: unknown): void {
    for (const s of this.shards) s?.forEach((v) => f.call(thisArg, v, v, this));
  }

  keys(): SetIterator<string> {
    return this.values();
  }

  values(): SetIterator<string> {
    return chained(this.shards, (s) => s.values()) as SetIterator<string>;
  }

  entries(): SetIterator<[string, string]> {
    return chained(this.shards, (s) => s.entries()) as SetIterator<[string, string]>;
  }

  [Symbol.iterator](): SetIterator<string> {
    return this.values();
  }

  get [Symbol.toStringTag](): string {
    return 'ShardedSet';
  }
}
