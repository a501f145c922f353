/**
 * The SVG plotting primitives (src/plot/svg.ts): ticks and ranges, linear
 * and log axes, step series, markers; every figure parsed back and rendered
 * to PNG with resvg (the series' colours drawn, the picture not blank).
 */
import { describe, expect, it } from 'vitest';
import { decadeRange, decadeTicks, figureSvg, niceTicks, scaleOf, timeUnit } from '../../src/plot/svg.js';
import { canRender, inspectSvg, render } from '../helpers/svgcheck.js';

describe('axis helpers', () => {
  it('round linear ticks and enclosing decades', () => {
    expect(niceTicks(0, 1)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(decadeRange(91, 70_000)).toEqual([10, 100_000]);
    expect(decadeRange(100, 100)).toEqual([100, 1000]);
    expect(decadeTicks(10, 100_000).map((t) => t.value)).toEqual([10, 100, 1000, 10_000, 100_000]);
    expect(() => decadeRange(0, 10)).toThrow(/log axis needs values > 0/);
  });
  it('log scale maps decades evenly; off-range values clamp to the edge', () => {
    const s = scaleOf({ label: 'x', scale: 'log', min: 1, max: 10_000 });
    expect([s(1), s(10), s(100), s(10_000), s(0), s(1e9)]).toEqual([0, 0.25, 0.5, 1, 0, 1]);
    expect(() => scaleOf({ label: 'x', scale: 'log', min: 0, max: 1 })).toThrow(/must be > 0/);
  });
  it('one time unit keeps the numbers below 10,000', () => {
    expect([timeUnit(9_999), timeUnit(10_000), timeUnit(9_999_999), timeUnit(5e7), timeUnit(2e10)]).toEqual(['ns', 'µs', 'µs', 'ms', 's']);
  });
});

describe('a two-panel figure (a relocation-style timeline and a log-log plot)', () => {
  const svg = figureSvg({
    title: 'frames per ms at A & B',
    panels: [
      {
        title: 'site A',
        x: { label: 'time since start (ms)', scale: 'linear', min: 0, max: 100 },
        y: { label: 'frames per ms', scale: 'linear', min: 0, max: 25 },
        series: [
          { name: 'A', points: Array.from({ length: 100 }, (_, i) => [i, i < 50 ? 20 : 0] as [number, number]), style: 'step' },
          { name: 'B', points: Array.from({ length: 100 }, (_, i) => [i, i < 50 ? 0 : 20] as [number, number]), style: 'step' },
        ],
        markers: [{ x: 50, label: 'API call' }],
      },
      {
        x: { label: 'latency (ns, log scale)', scale: 'log', min: 10, max: 100_000 },
        y: { label: 'fraction ≥ x (log scale)', scale: 'log', min: 1e-4, max: 1 },
        series: [{ name: 'tail', points: [[91, 1], [631, 0.05], [70_000, 1e-4]], dots: true }],
      },
    ],
  });
  const info = inspectSvg(svg);

  it('declares its panels, axes, ticks, series and markers', () => {
    expect(info.title).toBe('frames per ms at A & B');
    expect(info.panels.length).toBe(2);
    const [a, b] = info.panels as [typeof info.panels[0], typeof info.panels[0]];
    expect(a.title).toBe('site A');
    expect(a.x).toMatchObject({ scale: 'linear', min: 0, max: 100, label: 'time since start (ms)' });
    expect(a.x.ticks.map((t) => t.label)).toEqual(['0', '20', '40', '60', '80', '100']);
    expect(a.series.map((s) => [s.name, s.points])).toEqual([['A', 100], ['B', 100]]);
    // A step line: two vertices a point but the first.
    expect(a.series[0]!.coords.length).toBe(199);
    expect(a.markers).toEqual([50]);
    expect(b.x.scale).toBe('log');
    expect(b.y.scale).toBe('log');
    expect(b.x.ticks.map((t) => t.value)).toEqual([10, 100, 1000, 10_000, 100_000]);
    expect(b.y.ticks.map((t) => t.value)).toEqual([0.0001, 0.001, 0.01, 0.1, 1]);
    // On a log axis each decade is as wide as the next.
    const xs = b.series[0]!.coords.map((c) => c[0]);
    const dec = (xs[1]! - xs[0]!) / Math.log10(631 / 91);
    expect((xs[2]! - xs[1]!) / Math.log10(70_000 / 631)).toBeCloseTo(dec, 1);
  });

  it.skipIf(!canRender)('renders: not blank, each series drawn in its colour', () => {
    const img = render(svg);
    expect([img.width, img.height]).toEqual([info.width, info.height]);
    expect(img.png.subarray(1, 4).toString()).toBe('PNG');
    expect(img.inked()).toBeGreaterThan(2000);
    for (const s of info.panels.flatMap((p) => p.series)) expect(img.count(s.color), s.name).toBeGreaterThan(100);
  });

  it('bad data is an error that names the series', () => {
    expect(() =>
      figureSvg({ title: 't', panels: [{ x: { label: 'x', scale: 'linear', min: 0, max: 1 }, y: { label: 'y', scale: 'linear', min: 0, max: 1 }, series: [{ name: 'bad', points: [[NaN, 1]] }] }] }),
    ).toThrow(/series "bad"/);
  });
});

// ---------------------------------------------------------------------------
// The relocation timeline of `mup lab relocate` (src/lab/relocate-plot.ts), drawn with figureSvg

import { binRate, timelineSvg } from '../../src/lab/relocate-plot.js';

describe('the relocation timeline (mup lab relocate): frames per ms at A and B, the calls shaded and marked', () => {
  // The moved UE: 2 frames per ms at A until 10 ms after the call, then 1 per ms at B from 14 ms.
  const atA = Array.from({ length: 1020 }, (_, i) => -500 + i * 0.5);
  const atB = Array.from({ length: 486 }, (_, i) => 14 + i);
  const spec = {
    title: 'MEC relocation of UE 7',
    subtitle: 'load average 1 2 3',
    from: -500,
    to: 500,
    binMs: 20,
    spans: [
      { from: 2, to: 30, label: 'session add at B (28 ms)', color: '#2ca02c' },
      { from: 0, to: 16, label: 'PUT /v1/policies (16 ms)', color: '#d62728' },
    ],
    panels: [
      { title: 'uplink', series: [{ label: 'at A', color: '#1f77b4', t: atA }, { label: 'at B', color: '#ff7f0e', t: atB }], marks: [{ at: 13.8, label: 'first at B 13.8 ms' }, { at: 900, label: 'off the range' }] },
      { title: 'downlink', series: [{ label: 'from A', color: '#1f77b4', t: atA }, { label: 'from B', color: '#ff7f0e', t: atB }] },
    ],
  };
  const svg = timelineSvg(spec);
  const info = inspectSvg(svg);

  it('a panel a direction; the axes cover the data: x the run, y the busiest bin; a step a bin', () => {
    expect(info.title).toBe('MEC relocation of UE 7');
    expect(svg).toContain('load average 1 2 3');
    expect(info.panels.map((p) => p.title)).toEqual(['uplink', 'downlink']);
    const peak = Math.max(...binRate(atA, -500, 500, 20), ...binRate(atB, -500, 500, 20));
    expect(peak).toBe(2);
    for (const p of info.panels) {
      expect(p.x).toMatchObject({ scale: 'linear', min: -500, max: 500 });
      expect(p.x.label).toMatch(/time from the API call.*ms/);
      expect(p.y.scale).toBe('linear');
      expect(p.y.min).toBe(0);
      expect(p.y.max).toBeGreaterThanOrEqual(peak);
      expect(p.y.label).toBe('frames per ms (20 ms bins)');
      // The ticks lie on the axis; 0 and the run's ends are among the x ticks.
      expect(p.x.ticks.every((t) => t.value >= p.x.min && t.value <= p.x.max)).toBe(true);
      expect(p.x.ticks.map((t) => t.value)).toEqual(expect.arrayContaining([-500, 0, 500]));
      expect(p.y.ticks.every((t) => t.value >= 0 && t.value <= p.y.max)).toBe(true);
      // 50 bins and the end: 51 points, a step of two vertices each but the first.
      expect(p.series.map((q) => [q.name.replace(/^(at|from) /, ''), q.points])).toEqual([['A', 51], ['B', 51]]);
      for (const q of p.series) expect(q.coords.length).toBe(101);
    }
    // Only the call at 0 and the marks in range.
    expect(info.panels[0]!.markers).toEqual([0, 13.8]);
    expect(info.panels[1]!.markers).toEqual([0]);
    expect(svg.match(/<rect class="span" data-from="0" data-to="16"/g)).toHaveLength(2);
    expect(svg.match(/<rect class="span" data-from="2" data-to="30"/g)).toHaveLength(2);
    expect(svg).toContain('PUT /v1/policies (16 ms)');
    expect(svg).toContain('1020 frames');
  });

  it.skipIf(!canRender)('renders: both sites drawn in their colours', () => {
    const img = render(svg);
    expect([img.width, img.height]).toEqual([info.width, info.height]);
    expect(img.width).toBe(900);
    expect(img.count('#1f77b4')).toBeGreaterThan(100);
    expect(img.count('#ff7f0e')).toBeGreaterThan(100);
  });
});

// ---------------------------------------------------------------------------
// Latency figures (src/probe/plots.ts), the sweep plot and table (src/probe/sweep.ts)

import { distOf, distOfBuckets, latencyFigures, percentileCurve, plotRanks } from '../../src/probe/plots.js';
import { HdrHistogram } from '../../src/probe/hdr.js';
import { summarize } from '../../src/probe/stats.js';
import { formatSweep, sweepSvg, type SweepRow } from '../../src/probe/sweep.js';
import { unitColumns } from '../../src/probe/present.js';

/** A residence-like distribution: p50 near 91 ns, p95 near 631 ns, a tail to 70 µs (issue 18). Deterministic. */
function skewed(n: number, seed: number): number[] {
  let x = seed;
  const rnd = (): number => ((x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  return Array.from({ length: n }, (_, i) => {
    if (i % 1000 === 999) return 70_000 - (i % 7) * 100;
    const u = rnd();
    return Math.round(u < 0.5 ? 60 + u * 62 : u < 0.95 ? 91 + (u - 0.5) * 1200 : 631 + (u - 0.95) * 40_000);
  });
}

describe('latency figures: CDF, CCDF and percentile plot on log axes, a panel per series', () => {
  const up = skewed(5000, 1);
  const down = skewed(3000, 7).map((v) => v * 2);
  const figs = latencyFigures(
    [
      { title: 'uplink', series: [distOf('uplink residence', up)] },
      { title: 'downlink', series: [distOf('downlink residence', down)] },
    ],
    { title: 'mup probe: residence', quantity: 'residence time' },
  );
  const sUp = summarize(up)!;
  const sDown = summarize(down)!;
  const lo = Math.min(sUp.min, sDown.min); // at or below p1
  const hi = Math.max(sUp.max, sDown.max);

  it('the x axis of the CDF and CCDF is log, in one unit, and covers p1..max', () => {
    for (const svg of [figs.cdf, figs.ccdf]) {
      const info = inspectSvg(svg);
      expect(info.panels.map((p) => p.title)).toEqual(['uplink', 'downlink']);
      expect(info.panels.map((p) => p.series.length)).toEqual([1, 1]);
      for (const p of info.panels) {
        expect(p.x.scale).toBe('log');
        // 140 µs max: the axis is in µs, decades 0.01 .. 1000.
        expect(p.x.label).toBe('residence time (µs, log scale)');
        expect(p.x.min * 1000).toBeLessThanOrEqual(lo);
        expect(p.x.max * 1000).toBeGreaterThanOrEqual(hi);
        expect(p.x.ticks.map((t) => t.value)).toEqual([0.01, 0.1, 1, 10, 100, 1000]);
        // Drawn points lie on the axis' range.
        const pts = p.series[0]!.coords;
        expect(pts.length).toBeGreaterThan(100);
      }
    }
    const cdf = inspectSvg(figs.cdf).panels[0]!;
    expect(cdf.y).toMatchObject({ scale: 'linear', min: 0, max: 1, label: 'fraction of packets ≤ x' });
    expect(cdf.y.ticks.map((t) => t.label)).toEqual(['0 %', '25 %', '50 %', '75 %', '100 %']);
    const ccdf = inspectSvg(figs.ccdf).panels[0]!;
    expect(ccdf.y.scale).toBe('log');
    expect(ccdf.y.max).toBe(1);
    expect(ccdf.y.min).toBeLessThanOrEqual(1 / 5000);
  });

  it('the percentile plot: x = 1/(1-q) on a log axis to p99.99, latency on a log axis covering p1..max', () => {
    const info = inspectSvg(figs.percentiles);
    expect(info.panels.length).toBe(2);
    const p = info.panels[0]!;
    expect(p.x).toMatchObject({ scale: 'log', min: 1, max: 10_000 });
    expect(p.x.ticks.map((t) => t.label)).toEqual(['0 %', '90 %', '99 %', '99.9 %', '99.99 %']);
    expect(p.y.scale).toBe('log');
    expect(p.y.label).toBe('residence time (µs, log scale)');
    expect(p.y.min * 1000).toBeLessThanOrEqual(lo);
    expect(p.y.max * 1000).toBeGreaterThanOrEqual(hi);
  });

  it('the percentile curve passes through the table\'s percentiles (nearest rank) and ends at p99.99 or 1 - 1/n', () => {
    const c = percentileCurve(distOf('u', up));
    const at = (x: number): number => c.find((p) => Math.abs(p[0] - x) < 1e-6 * x)![1];
    expect(at(1)).toBe(sUp.min);
    expect(at(2)).toBe(sUp.percentiles.p50);
    expect(at(20)).toBe(sUp.percentiles.p95);
    expect(at(100)).toBe(sUp.percentiles.p99);
    expect(at(1000)).toBe(sUp.percentiles['p99.9']);
    expect(c[c.length - 1]![0]).toBeCloseTo(5000, 6); // n = 5000 resolves q up to 1 - 1/5000
    const big = percentileCurve(distOf('b', skewed(20_000, 3)));
    expect(big[big.length - 1]![0]).toBeCloseTo(10_000, 6);
    expect(big[big.length - 1]![1]).toBe(summarize(skewed(20_000, 3))!.percentiles['p99.99']);
    expect(figs.percentiles).toContain(`max ${Number((sUp.max / 1000).toPrecision(4))} µs`);
  });

  it('HDR buckets give the same curve as the raw values, to a bucket', () => {
    const h = new HdrHistogram(3);
    for (const v of up) h.record(v);
    const a = distOfBuckets('b', h.buckets(), h.max);
    expect(a.total).toBe(up.length);
    const f = latencyFigures([{ title: 'b', series: [a] }], { title: 't', quantity: 'q' });
    expect(inspectSvg(f.cdf).panels[0]!.x.max * 1000).toBeGreaterThanOrEqual(sUp.max);
  });

  it('plotRanks keeps every rank of a small series, thins a large one but keeps its tail', () => {
    expect(plotRanks(5)).toEqual([1, 2, 3, 4, 5]);
    const r = plotRanks(1_000_000);
    expect(r.length).toBeLessThan(2200);
    expect(r[r.length - 1]).toBe(1_000_000);
    expect(r).toContain(999_900); // p99.99
    expect(r).toContain(999_990); // p99.999
  });

  it.skipIf(!canRender)('every figure renders: not blank, a curve in each panel', () => {
    for (const [name, svg] of Object.entries(figs)) {
      const info = inspectSvg(svg);
      const img = render(svg);
      expect([img.width, img.height], name).toEqual([info.width, info.height]);
      expect(img.inked(), name).toBeGreaterThan(5000);
      for (const s of info.panels.flatMap((p) => p.series)) expect(img.count(s.color), `${name} ${s.name}`).toBeGreaterThan(50);
    }
  });

  it('an empty series draws "no samples", not an error', () => {
    const f = latencyFigures([{ title: 'none', series: [distOf('none', [])] }], { title: 't', quantity: 'q' });
    expect(f.cdf).toContain('no samples');
    expect(inspectSvg(f.ccdf).panels.length).toBe(1);
  });
});

describe('sweeps: x = the load reached, the load asked in the table', () => {
  const row = (percent: number, offeredPps: number, achievedPps: number, dir: string, p50: number): SweepRow => ({
    percent, offeredPps, dir, achievedPps, lost: 0, wireP50: p50, wireP99: p50 * 10, wireJitter: p50 / 2,
    residenceP50: 90, residenceP99: 600, residenceJitter: 300,
  });
  const rows = [row(0, 0, 0, 'uplink', 20_000), row(50, 10_000, 9_000, 'uplink', 25_000), row(100, 20_000, 15_000, 'uplink', 40_000)];

  it('each point sits at the rate reached, not the percentage asked', () => {
    const info = inspectSvg(sweepSvg(rows, 'wire', 'sweep'));
    const p = info.panels[0]!;
    expect(p.x.scale).toBe('linear');
    expect(p.x.label).toBe('background load reached (kframes/s)');
    expect(p.x.min).toBe(0);
    expect(p.x.max).toBeGreaterThanOrEqual(15);
    expect(p.y.scale).toBe('log');
    expect(p.y.label).toBe('one-way wire latency (µs, log scale)');
    const xs = p.series[0]!.coords.map((c) => c[0]);
    // 0, 9000, 15000 reached: spacing 9 : 6 (asked would give 1 : 1).
    expect((xs[2]! - xs[1]!) / (xs[1]! - xs[0]!)).toBeCloseTo(6 / 9, 2);
    expect(p.series.map((s) => s.name)).toEqual(['uplink p50', 'uplink p99', 'uplink jitter (p95 - p5)']);
  });

  it('the table: asked and reached side by side, one unit per latency column', () => {
    const t = formatSweep(rows).trimEnd().split('\n');
    expect(t[0]).toMatch(/load %\s+asked\/s\s+reached\/s\s+dir\s+lost\s+wire p50 \(µs\)\s+wire p99 \(µs\)\s+wire jitter \(µs\)\s+res p50 \(ns\)/);
    expect(t[1]).toMatch(/^\s*0\s+0\s+0\s+uplink\s+0\s+20\.000\s+200\.000\s+10\.000\s+90\s+600\s+300$/);
    expect(t[3]).toMatch(/100\s+20000\s+15000/);
    for (const line of t.slice(1)) expect(line).not.toMatch(/ns|µs/);
  });

  it('unitColumns: the unit of the largest value, whole ns or 3 decimals', () => {
    expect(unitColumns(['a', 'b'], [[91, 9_999], [70_000, null]])).toEqual({ head: ['a (µs)', 'b (ns)'], cells: [['0.091', '9999'], ['70.000', '-']] });
  });
});
