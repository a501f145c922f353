/**
 * ShardedMap / ShardedSet (src/host/sharded-map.ts): the daemon's indexes
 * of every rule, split so that a Map's one-step rebuild under churn is a
 * shard's. They must answer as Map and Set do (model-based, seeded), and
 * the hash must spread the keys the daemon uses (text prefixes, the tables'
 * latin1 key bytes): a shard holding most keys would rebuild as slowly as
 * one Map.
 */
import { describe, expect, it } from 'vitest';
import { SHARDS, ShardedMap, ShardedSet, shardOf } from '../../src/host/sharded-map.js';
import { encodePolicyKey, encodeSessionKey } from '../../src/dataplane/codec.js';
import { runMapModel } from '../helpers/map-model.js';
import { seededBelow } from '../helpers/rng.js';


describe('ShardedMap answers as Map', () => {
  it('random sets, deletes, gets and clears', () => {
    const rnd = seededBelow(11);
    runMapModel(new ShardedMap<number>(), {
      steps: 20_000,
      rnd,
      key: () => `k${rnd(3_000)}`,
      deletesBelow: 80,
      every: 1000,
      check: (got, want) => {
        expect(new Map(got)).toStrictEqual(want);
        expect([...got.keys()].sort()).toStrictEqual([...want.keys()].sort());
        expect([...got.values()].sort()).toStrictEqual([...want.values()].sort());
        const seen: [string, number][] = [];
        got.forEach((v, k, m) => {
          expect(m).toBe(got);
          seen.push([k, v]);
        });
        expect(new Map(seen)).toStrictEqual(want);
      },
    });
  });

  it('iterates each key once, shard by shard, each shard in insertion order', () => {
    const m = new ShardedMap<number>([...Array(1000).keys()].map((i) => [`p${i}`, i] as const));
    const order = [...m.keys()];
    expect(new Set(order).size).toBe(1000);
    const shards = order.map(shardOf);
    expect([...shards].sort((a, b) => a - b)).toStrictEqual(shards);
    for (let s = 0; s < SHARDS; s++) {
      const inShard = order.filter((k) => shardOf(k) === s).map((k) => m.get(k)!);
      expect([...inShard].sort((a, b) => a - b)).toStrictEqual(inShard);
    }
    expect(Object.prototype.toString.call(m)).toBe('[object ShardedMap]');
  });
});

describe('ShardedSet answers as Set', () => {
  it('random adds, deletes and looks', () => {
    const rnd = seededBelow(5);
    const want = new Set<string>();
    const got = new ShardedSet();
    for (let step = 0; step < 20_000; step++) {
      const key = `s${rnd(2_000)}`;
      const op = rnd(3);
      if (op === 0) {
        got.add(key);
        want.add(key);
      } else if (op === 1) expect(got.delete(key)).toBe(want.delete(key));
      else expect(got.has(key)).toBe(want.has(key));
      expect(got.size).toBe(want.size);
    }
    expect(new Set(got)).toStrictEqual(want);
    expect([...got.entries()].every(([a, b]) => a === b && want.has(a))).toBe(true);
  });
});

describe('the hash spreads the keys the daemon keeps', () => {
  /** Largest shard over the mean: a uniform spread of 131,072 keys over 256 shards stays near 1. */
  function worst(keys: readonly string[]): number {
    const per = new Array<number>(SHARDS).fill(0);
    for (const k of keys) per[shardOf(k)]!++;
    return Math.max(...per) / (keys.length / SHARDS);
  }
  const N = 131_072;

  it.each([
    ['IPv4 /24 prefixes as text', Array.from({ length: N }, (_, i) => `${10 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}.0/24`)],
    ['/32 addresses as text', Array.from({ length: N }, (_, i) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}/32`)],
    ['IPv6 SIDs as text', Array.from({ length: N }, (_, i) => `fc00:0:${(i >> 16).toString(16)}:${(i & 0xffff).toString(16)}::/64`)],
    ['policy table keys (latin1 bytes)', Array.from({ length: N }, (_, i) => encodePolicyKey({ addr: (10 << 24) + i * 256, len: 24 } as never).toString('latin1'))],
    ['session table keys (latin1 bytes)', Array.from({ length: N }, (_, i) => encodeSessionKey({ family: 4, prefix: { addr: ((10 << 24) | i) >>> 0, len: 32 } } as never).toString('latin1'))],
  ])('%s', (_name, keys) => {
    expect(new Set(keys).size).toBe(N);
    expect(worst(keys)).toBeLessThan(1.5);
  });
});
