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
