/**
 * daemon.metrics.per_rule top:N: the N rules with the most packets, busiest
 * first, ties in config order, rules without packets never. The selection
 * was an insertion into a sorted array per rule (up to N entries moved
 * each time, in one turn of the event loop: top:100000 over a million rules
 * held the loop 34-103 s a scrape); it is a bounded heap now, made in
 * slices that yield to the event loop.
 */
import { describe, expect, it } from 'vitest';
import type { RuleCounter } from '../../src/dataplane/dataplane.js';
import { topRules, topRulesSlices } from '../../src/daemon/metrics.js';
import { runNow, SliceClock } from '../../src/host/slice-clock.js';

function rules(packets: readonly number[]): RuleCounter[] {
  return packets.map((p, i) => ({ rule: i, kind: 'policy', where: `policies[${i}]`, key: `10.${i >> 8}.${i & 255}.0/24`, packets: BigInt(p), bytes: BigInt(p * 100) }));
}

/** What top:N means, written the plain way: a stable sort of every rule with packets. */
function reference(rs: readonly RuleCounter[], n: number): RuleCounter[] {
  return rs
    .filter((r) => r.packets > 0n)
    .sort((a, b) => (a.packets === b.packets ? 0 : a.packets > b.packets ? -1 : 1))
    .slice(0, n);
}

/** A small deterministic generator (the same rules on every run). */
function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe('topRules', () => {
  const cases: { name: string; packets: number[] }[] = [
    { name: 'random counts with many ties', packets: ((r) => Array.from({ length: 5000 }, () => Math.floor(r() * 20)))(lcg(1)) },
    { name: 'ascending (each rule beats the ones before)', packets: Array.from({ length: 3000 }, (_, i) => i) },
    { name: 'descending', packets: Array.from({ length: 3000 }, (_, i) => 3000 - i) },
    { name: 'all equal', packets: Array.from({ length: 1000 }, () => 7) },
    { name: 'none with packets', packets: Array.from({ length: 100 }, () => 0) },
  ];
  for (const c of cases) {
    for (const n of [1, 2, 10, 999, 1000, 4999, 10_000]) {
      it(`${c.name}, top ${n}: the same rules in the same order as a stable sort`, () => {
        const rs = rules(c.packets);
        const got = topRules(rs, n).map((r) => r.rule);
        expect(got).toEqual(reference(rs, n).map((r) => r.rule));
      });
    }
  }

  it('counts past 2^53 are compared exactly (BigInt), ties of them in config order', () => {
    const big = 2n ** 60n;
    const rs: RuleCounter[] = [big + 1n, big, big + 1n, big + 2n, 0n, big].map((p, i) => ({ rule: i, kind: 'localsid', where: `localsids[${i}]`, key: `k${i}`, packets: p, bytes: p }));
    expect(topRules(rs, 4).map((r) => r.rule)).toEqual([3, 0, 2, 1]);
    expect(topRules(rs, 10).map((r) => r.rule)).toEqual([3, 0, 2, 1, 5]);
  });

  it('top 0 or an empty list: nothing', () => {
    expect(topRules(rules([1, 2, 3]), 0)).toEqual([]);
    expect(topRules([], 5)).toEqual([]);
  });

  it('takes any iterable of rules once (the scrape hands it rows made as they are read)', () => {
    const rs = rules([5, 0, 9, 9, 1]);
    let reads = 0;
    const once: Iterable<RuleCounter> = {
      *[Symbol.iterator]() {
        reads++;
        yield* rs;
      },
    };
    expect(topRules(once, 3).map((r) => r.rule)).toEqual([2, 3, 0]);
    expect(reads).toBe(1);
  });

  it('yields between slices, and what it selects does not depend on where it yielded', () => {
    const rs = rules(((r) => Array.from({ length: 20_000 }, () => Math.floor(r() * 1000)))(lcg(7)));
    // A clock whose slices are over at every look (every 64 rules): the generator yields throughout.
    const g = topRulesSlices(rs, 500, new SliceClock(0));
    let yields = 0;
    let r = g.next();
    for (; r.done !== true; r = g.next()) yields++;
    expect(yields).toBeGreaterThanOrEqual(Math.floor(20_000 / 64) - 1);
    expect(r.value.map((x) => x.rule)).toEqual(reference(rs, 500).map((x) => x.rule));
    // A clock that never ends a slice: no yield, the same rules.
    const once = runNow(topRulesSlices(rs, 500, new SliceClock(Infinity)));
    expect(once.map((x) => x.rule)).toEqual(r.value.map((x) => x.rule));
  });
});

describe('topRules over counter rows (RuleCounterRows)', () => {
  it('makes a row, and its rule\'s key text, only for the rules that get in', async () => {
    const { RuleCounterRows } = await import('../../src/dataplane/dataplane.js');
    const n = 2000;
    // Descending counts: the first 10 get in; a rule after them whose key text were made would throw.
    const rulesOf = Array.from({ length: n }, (_, i) =>
      i < 10
        ? { where: i, match: { addr: (0x0a000000 + i * 256) >>> 0, len: 24 }, segments: [] }
        : {
            where: i,
            get match(): never {
              throw new Error(`the key text of rule ${i} was made`);
            },
          },
    );
    const rows = new RuleCounterRows(
      Uint32Array.from({ length: n }, (_, i) => i),
      new Uint8Array(n),
      rulesOf as never,
      BigUint64Array.from({ length: n }, (_, i) => BigInt(n - i)),
      BigUint64Array.from({ length: n }, (_, i) => BigInt(100 * (n - i))),
      n,
    );
    // Before: every row was made as the rows were walked (0.7 s a pass at a million TEID policies kept as rows).
    const top = topRules(rows, 10);
    expect(top.map((r) => r.rule)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(top[0]).toMatchObject({ kind: 'policy', where: 'policies[0]', key: '10.0.0.0/24', packets: 2000n });
  });
});
