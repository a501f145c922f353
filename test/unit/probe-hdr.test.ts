/** The log-linear HDR histogram: bucket layout worked out by hand, and its error bound checked against exact percentiles. */
import { describe, expect, it } from 'vitest';
import { HdrHistogram } from '../../src/probe/hdr.js';
import { percentileSorted, REPORT_PERCENTILES } from '../../src/probe/stats.js';

/** Deterministic 32-bit LCG (Numerical Recipes constants). */
function lcg(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return x / 2 ** 32;
  };
}

describe('HdrHistogram layout (3 significant digits: 2^11 exact values, 1024 buckets per power of two above)', () => {
  const h = new HdrHistogram(3);
  it('sizes', () => {
    expect(h.subBucketBits).toBe(11);
  });
  const rows: [number, number, number, number][] = [
    // value, index, bucket from, bucket to
    [0, 0, 0, 0],
    [2047, 2047, 2047, 2047],
    [2048, 2048, 2048, 2049], // 2^11: shift 1, top 1024 -> first bucket above, width 2
    [4095, 3071, 4094, 4095], // shift 1, top 2047
    [4096, 3072, 4096, 4099], // 2^12: shift 2, width 4
    // 10^6: highest bit 19, shift 9, top floor(10^6 / 512) = 1953, 1953 * 512 = 999,936;
    // index 2048 + 8 * 1024 + (1953 - 1024) = 11,169; width 512 = 0.051 % of 999,936.
    [1_000_000, 11_169, 999_936, 1_000_447],
  ];
  for (const [v, i, from, to] of rows) {
    it(`${v} -> bucket ${i} [${from}, ${to}]`, () => {
      expect(h.indexOf(v)).toBe(i);
      expect(h.bucketRange(i)).toEqual({ from, to });
    });
  }
  it('buckets tile the integers: each starts one after the previous ends, and holds what indexOf puts there', () => {
    const bad: string[] = [];
    for (let i = 0; i < 20_000; i++) {
      const r = h.bucketRange(i);
      if (h.bucketRange(i + 1).from !== r.to + 1) bad.push(`gap after bucket ${i}`);
      if (h.indexOf(r.from) !== i || h.indexOf(r.to) !== i) bad.push(`bucket ${i} [${r.from}, ${r.to}] maps elsewhere`);
    }
    expect(bad).toEqual([]);
  });
  it('powers of two up to 2^52 land at a bucket start', () => {
    for (let e = 11; e <= 52; e++) expect(h.bucketRange(h.indexOf(2 ** e)).from).toBe(2 ** e);
  });
});

describe('HdrHistogram values', () => {
  it('below 2048 it is exact: percentiles equal the nearest-rank ones', () => {
    const h = new HdrHistogram();
    const values = Array.from({ length: 1000 }, (_, i) => i + 1);
    values.forEach((v) => h.record(v));
    for (const p of REPORT_PERCENTILES) expect(h.valueAtPercentile(p)).toBe(percentileSorted(values, p));
    expect(h.count).toBe(1000);
    expect(h.min).toBe(1);
    expect(h.max).toBe(1000);
    expect(h.mean).toBe(500.5);
  });

  it('10^5 values from 1 ns to 1 s: every percentile at most one bucket (<= 1/1024) above the exact one', () => {
    const rnd = lcg(4);
    const values = Array.from({ length: 100_000 }, () => Math.floor(10 ** (rnd() * 9)));
    const h = new HdrHistogram();
    values.forEach((v) => h.record(v));
    const sorted = [...values].sort((a, b) => a - b);
    for (const p of [...REPORT_PERCENTILES, 0, 1, 25, 75, 100]) {
      const exact = percentileSorted(sorted, p);
      const approx = h.valueAtPercentile(p);
      expect(approx).toBeGreaterThanOrEqual(exact);
      expect(approx - exact).toBeLessThanOrEqual(exact / 1024);
    }
    expect(h.valueAtPercentile(100)).toBe(sorted[sorted.length - 1]);
    expect(h.buckets().reduce((s, b) => s + b.count, 0)).toBe(100_000);
  });

  it('adding histograms equals recording everything in one', () => {
    const rnd = lcg(9);
    const a = new HdrHistogram();
    const b = new HdrHistogram();
    const all = new HdrHistogram();
    for (let i = 0; i < 5000; i++) {
      const v = Math.floor(rnd() * 1e7);
      (i % 2 ? a : b).record(v);
      all.record(v);
    }
    a.add(b);
    expect(a.toJSON()).toEqual(all.toJSON());
  });

  it('refuses what it cannot hold, saying why', () => {
    const h = new HdrHistogram();
    expect(() => h.record(-5)).toThrow(/clocks disagree/);
    expect(() => h.record(NaN)).toThrow(RangeError);
    expect(() => h.valueAtPercentile(50)).toThrow(/empty/);
    expect(() => new HdrHistogram(0)).toThrow(RangeError);
    expect(() => h.add(new HdrHistogram(2))).toThrow(/2-digit/);
  });
});
