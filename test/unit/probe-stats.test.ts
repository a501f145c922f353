/**
 * Probe statistics against sample sets whose answers are worked out by hand
 * in the comments (nearest rank: the P-th percentile of n sorted values is
 * the value at 1-based rank ceil(P/100 * n)).
 */
import { describe, expect, it } from 'vitest';
import { analyze } from '../../src/probe/report.js';
import { accountSequences, ipdv, nearestRank, percentileSorted, summarize } from '../../src/probe/stats.js';

describe('summarize: min/mean/max/stddev, nearest-rank percentiles, jitter = p95 - p5', () => {
  const cases = [
    {
      name: '1..20',
      values: Array.from({ length: 20 }, (_, i) => i + 1),
      // mean 10.5; sample variance n(n+1)/12 = 35; p5 rank ceil(1) = 1, p50 rank 10,
      // p95 rank 19, p99 rank ceil(19.8) = 20, p99.9 ceil(19.98) = 20, p99.99 20.
      expect: { count: 20, min: 1, mean: 10.5, max: 20, stddev: Math.sqrt(35), p: [1, 10, 19, 20, 20, 20], jitter: 18 },
    },
    {
      name: 'five unsorted values 7 3 9 1 5',
      values: [7, 3, 9, 1, 5],
      // sorted 1 3 5 7 9; mean 5; variance (16+4+0+4+16)/4 = 10; ranks: p5 ceil(0.25) = 1,
      // p50 ceil(2.5) = 3, p95 ceil(4.75) = 5, p99.. = 5.
      expect: { count: 5, min: 1, mean: 5, max: 9, stddev: Math.sqrt(10), p: [1, 5, 9, 9, 9, 9], jitter: 8 },
    },
    {
      name: '1..1000 (float trap: 99.9/100*1000 is 999.0000000000001)',
      values: Array.from({ length: 1000 }, (_, i) => i + 1),
      // ranks: p5 50, p50 500, p95 950, p99 990, p99.9 999 (not 1000), p99.99 ceil(999.9) = 1000.
      expect: { count: 1000, min: 1, mean: 500.5, max: 1000, stddev: Math.sqrt((1000 * 1001) / 12), p: [50, 500, 950, 990, 999, 1000], jitter: 900 },
    },
    {
      name: 'a tail: 999 x 100 ns and one 5000 ns',
      values: [...Array.from({ length: 999 }, () => 100), 5000],
      // mean (99,900 + 5,000)/1000 = 104.9; squared deviations 999 * 4.9^2 + 4895.1^2
      // = 23,985.99 + 23,962,004.01 = 23,985,990; / 999 = 24,010. Only p99.99 (rank 1000) sees the tail.
      expect: { count: 1000, min: 100, mean: 104.9, max: 5000, stddev: Math.sqrt(24010), p: [100, 100, 100, 100, 100, 5000], jitter: 0 },
    },
    {
      name: 'one value',
      values: [42],
      expect: { count: 1, min: 42, mean: 42, max: 42, stddev: 0, p: [42, 42, 42, 42, 42, 42], jitter: 0 },
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const s = summarize(c.values)!;
      expect(s.count).toBe(c.expect.count);
      expect(s.min).toBe(c.expect.min);
      expect(s.max).toBe(c.expect.max);
      expect(s.mean).toBeCloseTo(c.expect.mean, 9);
      expect(s.stddev).toBeCloseTo(c.expect.stddev, 9);
      expect([s.percentiles.p5, s.percentiles.p50, s.percentiles.p95, s.percentiles.p99, s.percentiles['p99.9'], s.percentiles['p99.99']]).toEqual(
        c.expect.p,
      );
      expect(s.jitter).toBe(c.expect.jitter);
    });
  }

  it('no values: null; a NaN: RangeError naming the index', () => {
    expect(summarize([])).toBeNull();
    expect(() => summarize([1, NaN])).toThrow(/values\[1\] is NaN/);
  });

  it('nearest rank: p0 is the minimum, p100 the maximum, ranks in integers', () => {
    expect(nearestRank(0, 10)).toBe(0);
    expect(nearestRank(100, 10)).toBe(10);
    expect(nearestRank(95, 20)).toBe(19);
    expect(nearestRank(99.9, 1000)).toBe(999); // 99.9 / 100 * 1000 = 999.0000000000001 in floating point
    expect(nearestRank(99.99, 20)).toBe(20);
    expect(percentileSorted([4, 8], 0)).toBe(4);
    expect(() => nearestRank(101, 10)).toThrow(RangeError);
  });
});

describe('IPDV (RFC 3393): consecutive sequence numbers, signed, lost pairs skipped', () => {
  // delays by sequence number: 0:10 1:12 2:11 3:lost 4:15 5:15; a late duplicate of 1 (99) is ignored.
  // pairs (0,1) +2, (1,2) -1, (4,5) 0; (2,3) and (3,4) have a lost packet. Signed mean 1/3;
  // |IPDV| = 2 1 0: mean 1, p50 rank ceil(1.5) = 2 of sorted 0 1 2 = 1, max 2.
  const arrivals = [
    { seq: 0, delayNs: 10 },
    { seq: 2, delayNs: 11 },
    { seq: 1, delayNs: 12 },
    { seq: 4, delayNs: 15 },
    { seq: 1, delayNs: 99 },
    { seq: 5, delayNs: 15 },
  ];
  it('values, signed min/mean/max, |IPDV| distribution', () => {
    const r = ipdv(arrivals);
    expect(r.pairs).toBe(3);
    expect(r.values).toEqual([2, -1, 0]);
    expect(r.min).toBe(-1);
    expect(r.max).toBe(2);
    expect(r.mean).toBeCloseTo(1 / 3, 12);
    expect(r.abs?.mean).toBe(1);
    expect(r.abs?.percentiles.p50).toBe(1);
    expect(r.abs?.max).toBe(2);
  });
  it('no consecutive pair: nothing to report', () => {
    expect(ipdv([{ seq: 0, delayNs: 1 }, { seq: 2, delayNs: 5 }])).toMatchObject({ pairs: 0, values: [], mean: null, abs: null });
  });
});

describe('loss, duplicates, reordering (RFC 4737 NextExp)', () => {
  it('a mixed run, counted by hand', () => {
    // sent 0..9. Arrivals 0 1 3 2 2 5 4 4 9 11: NextExp 1, 2, 4; 2 < 4 reordered; second 2 duplicate;
    // 5 -> NextExp 6; 4 < 6 reordered; second 4 duplicate; 9 -> 10; 11 is outside 0..9: stray.
    // distinct received 0 1 2 3 4 5 9 = 7, lost 6 7 8.
    expect(accountSequences(10, [0, 1, 3, 2, 2, 5, 4, 4, 9, 11])).toEqual({
      sent: 10,
      arrivals: 10,
      received: 7,
      lost: 3,
      lossRatio: 0.3,
      duplicates: 2,
      reordered: 2,
      stray: 1,
      lostSequences: [6, 7, 8],
    });
  });
  it('one packet early: the three it overtook are the reordered ones, not it', () => {
    // 0 1 2 3 7 -> NextExp 8; 4 5 6 are each < 8.
    expect(accountSequences(10, [0, 1, 2, 3, 7, 4, 5, 6, 8, 9])).toMatchObject({ received: 10, lost: 0, reordered: 3, duplicates: 0 });
  });
  it('nothing arrived', () => {
    expect(accountSequences(3, [])).toMatchObject({ received: 0, lost: 3, lossRatio: 1, lostSequences: [0, 1, 2] });
  });
});

describe('analyze: one direction of a run', () => {
  it('latency over first copies in range; IPDV and histogram agree with it', () => {
    const r = analyze(6, [
      { seq: 0, delayNs: 10 },
      { seq: 2, delayNs: 11 },
      { seq: 1, delayNs: 12 },
      { seq: 4, delayNs: 15 },
      { seq: 1, delayNs: 99 },
      { seq: 5, delayNs: 15 },
      { seq: 7, delayNs: 1 },
    ]);
    expect(r.sequence).toMatchObject({ sent: 6, received: 5, lost: 1, duplicates: 1, reordered: 1, stray: 1, lostSequences: [3] });
    // first copies: 10 11 12 15 15 -> mean 12.6, p50 rank 3 = 12, p95 rank 5 = 15, p5 rank 1 = 10.
    expect(r.latency).toMatchObject({ count: 5, min: 10, max: 15, jitter: 5 });
    expect(r.latency?.mean).toBeCloseTo(12.6, 12);
    expect(r.latency?.percentiles.p50).toBe(12);
    expect(r.ipdv.values).toEqual([2, -1, 0]);
    expect(r.histogram.count).toBe(5);
    expect(r.histogram.valueAtPercentile(50)).toBe(12);
  });
});

describe('negative latencies are said, not hidden (found in review, session 43)', () => {
  // The histograms and latency.hlog clamp them to 0 (an HDR histogram holds values >= 0) while the table shows them.
  it('a note counts them, with the least, per kind; none when there are none', async () => {
    const { negativeNote } = await import('../../src/probe/probe.js');
    expect(negativeNote('up', [100, 200, 300], [5, 6])).toBeUndefined();
    expect(negativeNote('up', [100, -40, -7, 300], [5, -2])).toBe(
      'up: 2 of 4 wire latencies (down to -40 ns) and 1 of 2 residence times (down to -2 ns) were negative: the clocks of the two stamps disagree; the table shows them as measured, the histograms and latency.hlog count them at 0',
    );
    expect(negativeNote('down', [], [-1])).toMatch(/^down: 1 of 1 residence times \(down to -1 ns\) were negative/);
  });
});
