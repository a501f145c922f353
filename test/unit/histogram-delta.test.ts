/**
 * bench:daemon's reading of the daemon's own answer times between two
 * scrapes (src/bench/histogram-delta.ts): a real prom-client histogram with
 * the daemon's buckets is observed, scraped, observed again and scraped;
 * the quantile of the second lot must fall in the bucket that holds the
 * exact quantile of those observations (and nothing of the first lot may
 * count), another label's series must not mix in, and an empty window
 * says so.
 */
import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { bucketsOf, quantileBetween } from '../../src/bench/histogram-delta.js';
import { REQUEST_BUCKETS } from '../../src/daemon/request-time.js';
import { xorshift32 } from '../helpers/rng.js';

const NAME = 'mup_api_request_duration_seconds';

function histogram(): { reg: Registry; h: Histogram<'class'> } {
  const reg = new Registry();
  const h = new Histogram({ name: NAME, help: 'x', labelNames: ['class'], buckets: REQUEST_BUCKETS, registers: [reg] });
  return { reg, h };
}

/** The bucket [lower, upper] of REQUEST_BUCKETS that holds x. */
function bucketOf(x: number): [number, number] {
  const i = REQUEST_BUCKETS.findIndex((le) => x <= le);
  return i < 0 ? [REQUEST_BUCKETS.at(-1)!, Infinity] : [i === 0 ? 0 : REQUEST_BUCKETS[i - 1]!, REQUEST_BUCKETS[i]!];
}

describe('histogram quantile between two scrapes', () => {
  const next = xorshift32(0x9a7);
  /** Log-uniform between 0.2 ms and 2 s: every bucket gets some. */
  const sample = (): number => 0.0002 * 10 ** ((4 * next()) / 2 ** 32);

  it.each([0.5, 0.9, 0.99])('quantile %s of the second lot falls in the bucket of the exact one', async (q) => {
    const { reg, h } = histogram();
    for (let i = 0; i < 3000; i++) h.observe({ class: 'change' }, 5 * sample()); // the first lot: slower, must not count
    for (let i = 0; i < 500; i++) h.observe({ class: 'read' }, sample());
    const before = await reg.metrics();
    const lot = Array.from({ length: 2000 }, () => sample());
    for (const x of lot) h.observe({ class: 'change' }, x);
    for (let i = 0; i < 700; i++) h.observe({ class: 'read' }, 9); // another class, in the window: must not mix in
    const after = await reg.metrics();
    const r = quantileBetween(before, after, NAME, { class: 'change' }, q);
    expect(r.count).toBe(lot.length);
    const sorted = [...lot].sort((a, b) => a - b);
    const exact = sorted[Math.ceil(q * sorted.length) - 1]!;
    expect(r.bucket).toEqual(bucketOf(exact));
    expect(r.value).toBeGreaterThanOrEqual(r.bucket[0]);
    expect(r.value).toBeLessThanOrEqual(r.bucket[1]);
  });

  it('all in one bucket: interpolated inside it; above the highest bound: that bound', async () => {
    const { reg, h } = histogram();
    const before = await reg.metrics();
    for (let i = 0; i < 100; i++) h.observe({ class: 'change' }, 0.004); // the (0.003, 0.005] bucket
    const mid = await reg.metrics();
    expect(quantileBetween(before, mid, NAME, { class: 'change' }, 0.5)).toEqual({ count: 100, value: 0.004, bucket: [0.003, 0.005] });
    h.observe({ class: 'change' }, 60);
    const after = await reg.metrics();
    expect(quantileBetween(mid, after, NAME, { class: 'change' }, 0.99)).toEqual({ count: 1, value: 10, bucket: [10, Infinity] });
  });

  it('a histogram started again between the scrapes (a restarted daemon): the window is all of the second scrape', async () => {
    const first = histogram();
    for (let i = 0; i < 50; i++) first.h.observe({ class: 'change' }, 0.004);
    const before = await first.reg.metrics();
    const second = histogram();
    for (let i = 0; i < 10; i++) second.h.observe({ class: 'change' }, 0.0008);
    const after = await second.reg.metrics();
    expect(quantileBetween(before, after, NAME, { class: 'change' }, 0.5)).toMatchObject({ count: 10, bucket: [0.0005, 0.001] });
  });

  it('no observation between the scrapes, or no such series: count 0, NaN', async () => {
    const { reg, h } = histogram();
    h.observe({ class: 'change' }, 0.001);
    const t = await reg.metrics();
    expect(quantileBetween(t, t, NAME, { class: 'change' }, 0.99).count).toBe(0);
    expect(Number.isNaN(quantileBetween(t, t, NAME, { class: 'batch' }, 0.99).value)).toBe(true);
    expect(bucketsOf(t, NAME, { class: 'change' }).get(Infinity)).toBe(1);
  });
});
