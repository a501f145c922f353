/**
 * Latency distributions as figures a reader can read (docs/probe.md,
 * "Plots"): a latency tail of 70 µs over a median of 91 ns is five decades,
 * so every latency axis is logarithmic.
 *
 * - CDF: x = latency (log), y = fraction of packets <= x (linear, 0..1);
 * - CCDF: x = latency (log), y = fraction of packets >= x (log, 1 down to 1/n):
 *   the tail, one decade per "nine";
 * - percentile plot (HdrHistogram style): x = 1/(1-q) (log, 1 to 10^4:
 *   0 %, 90 %, 99 %, 99.9 %, 99.99 %), y = latency at q (log).
 *
 * One panel per series (a direction, a case, a load step's direction), all
 * panels of a figure on the same axes; one time unit per axis. The same
 * figures serve `mup probe` (raw samples), `mup probe --sweep` (one series
 * per load step in each direction's panel) and the RFC 2544 latency steps
 * (from their HDR histograms, so counted per bucket).
 */
import { decadeRange, decadeTicks, figureSvg, fmtNum, timeUnit, UNIT_NS, type Panel, type Series, type TimeUnit } from '../plot/svg.js';
import type { HdrBucket } from './hdr.js';
import { nearestRank } from './stats.js';

/** A distribution: values with counts, ascending, total > 0 (or empty). */
export interface Dist {
  readonly name: string;
  /** [value ns, count], ascending by value. */
  readonly counts: readonly (readonly [number, number])[];
  readonly total: number;
}

/** From raw values (any order). */
export function distOf(name: string, values: readonly number[]): Dist {
  const sorted = [...values].sort((a, b) => a - b);
  const counts: [number, number][] = [];
  for (const v of sorted) {
    if (!Number.isFinite(v)) throw new RangeError(`series "${name}": ${v} is not a finite number`);
    const last = counts[counts.length - 1];
    if (last !== undefined && last[0] === v) last[1]++;
    else counts.push([v, 1]);
  }
  return { name, counts, total: sorted.length };
}

/**
 * From HDR buckets: each bucket's count at its highest value (capped at
 * the histogram's max), as HdrHistogram.valueAtPercentile answers.
 */
export function distOfBuckets(name: string, buckets: readonly HdrBucket[], max?: number | null): Dist {
  const counts = buckets.map((b) => [max === undefined || max === null ? b.to : Math.min(b.to, max), b.count] as [number, number]);
  return { name, counts, total: counts.reduce((a, c) => a + c[1], 0) };
}

/** The value of rank r (1-based) of a distribution. */
function atRanks(d: Dist, ranks: readonly number[]): number[] {
  const out: number[] = [];
  let i = 0;
  let seen = d.counts[0]?.[1] ?? 0;
  for (const r of ranks) {
    while (seen < r && i < d.counts.length - 1) seen += d.counts[++i]![1];
    out.push(d.counts[i]![0]);
  }
  return out;
}

/**
 * The ranks drawn: every rank for up to `maxPoints` values; above, the
 * nearest ranks of evenly spaced levels j/maxPoints plus levels 1 - 10^-k/20
 * (k = 1, 2, ...) into the tail, so the tail keeps its shape on a log axis.
 */
export function plotRanks(n: number, maxPoints = 2000): number[] {
  if (n <= maxPoints) return Array.from({ length: n }, (_, i) => i + 1);
  const set = new Set<number>([1, n]);
  for (let j = 1; j <= maxPoints; j++) set.add(Math.max(nearestRank((100 * j) / maxPoints, n), 1));
  for (let k = 1; ; k++) {
    const q = 1 - 10 ** (-k / 20);
    const r = Math.ceil(q * n - 1e-9);
    if (r >= n) break;
    set.add(Math.max(r, 1));
  }
  return [...set].sort((a, b) => a - b);
}

export interface LatencyPanel {
  readonly title: string;
  readonly series: readonly Dist[];
}

export interface LatencyFigureOptions {
  /** e.g. "mup probe: one-way wire latency, 1000 probes/s, 128 B". */
  readonly title: string;
  /** The quantity, no unit: "one-way wire latency", "residence time". */
  readonly quantity: string;
}

export interface LatencyFigures {
  readonly cdf: string;
  readonly ccdf: string;
  readonly percentiles: string;
}

/** The x = 1/(1-q) axis: 1 (q = 0) to 10^4 (p99.99). */
export const PERCENTILE_TICKS = [
  { value: 1, label: '0 %' },
  { value: 10, label: '90 %' },
  { value: 100, label: '99 %' },
  { value: 1000, label: '99.9 %' },
  { value: 10_000, label: '99.99 %' },
] as const;

function legendDetail(d: Dist, unit: TimeUnit): string {
  const max = d.counts[d.counts.length - 1]?.[0];
  return `n = ${d.total}${max === undefined ? '' : `, max ${fmtNum(Number((max / UNIT_NS[unit]).toPrecision(4)))} ${unit}`}`;
}

/**
 * The percentile plot's points, [1/(1-q), value ns at q (nearest rank)],
 * 40 levels per decade of 1/(1-q) and the report's levels (p50, p90, p95,
 * p99, p99.9, p99.99), from q = 0 to p99.99 or the last level
 * the count resolves (1 - 1/n), whichever is lower.
 */
export function percentileCurve(d: Dist): [number, number][] {
  const n = d.total;
  if (n === 0) return [];
  const qMax = Math.min(0.9999, 1 - 1 / n);
  // The grid, plus the table's levels (so the curve passes through the report's figures), plus the last level.
  const levels = new Set<number>([0.5, 0.9, 0.95, 0.99, 0.999, 0.9999, qMax]);
  for (let k = 0; 1 - 10 ** (-k / 40) < qMax; k++) levels.add(Number((1 - 10 ** (-k / 40)).toPrecision(12)));
  const qs = [...levels].filter((q) => q <= qMax).sort((a, b) => a - b);
  const ranks = qs.map((q) => Math.max(Math.ceil(Number((q * n).toPrecision(12))), 1));
  const vals = atRanks(d, ranks);
  const pts: [number, number][] = qs.map((q, i) => [Number((1 / (1 - q)).toPrecision(12)), vals[i]!]);
  return pts;
}

/** CDF, CCDF and percentile plot of the panels' distributions. */
export function latencyFigures(panels: readonly LatencyPanel[], o: LatencyFigureOptions): LatencyFigures {
  const all = panels.flatMap((p) => p.series).filter((d) => d.total > 0);
  let lo = Infinity;
  let hi = 0;
  let nMax = 1;
  for (const d of all) {
    for (const [v] of d.counts) if (v > 0 && v < lo) lo = v;
    hi = Math.max(hi, d.counts[d.counts.length - 1]![0]);
    nMax = Math.max(nMax, d.total);
  }
  if (!Number.isFinite(lo) || hi <= 0) [lo, hi] = [1, 1000];
  const unit = timeUnit(hi);
  const div = UNIT_NS[unit];
  const [x0, x1] = decadeRange(lo / div, hi / div);
  const xAxis = { label: `${o.quantity} (${unit}, log scale)`, scale: 'log' as const, min: x0, max: x1, ticks: decadeTicks(x0, x1) };
  const yLatency = { label: `${o.quantity} (${unit}, log scale)`, scale: 'log' as const, min: x0, max: x1, ticks: decadeTicks(x0, x1) };
  const [f0] = decadeRange(1 / nMax, 1);
  const ccdfAxis = { label: 'fraction of packets ≥ x (log scale)', scale: 'log' as const, min: Math.min(f0, 0.1), max: 1 };
  const cdfAxis = {
    label: 'fraction of packets ≤ x', scale: 'linear' as const, min: 0, max: 1,
    ticks: [0, 0.25, 0.5, 0.75, 1].map((v) => ({ value: v, label: `${v * 100} %` })),
  };
  const pAxis = { label: 'percentile (x = 1/(1−q), log scale)', scale: 'log' as const, min: 1, max: 10_000, ticks: [...PERCENTILE_TICKS] };

  const build = (kind: 'cdf' | 'ccdf' | 'percentiles'): string => {
    const ps: Panel[] = panels.map((p) => {
      const series: Series[] = p.series.map((d) => {
        const name = d.name;
        const detail = legendDetail(d, unit);
        if (d.total === 0) return { name, detail, points: [] };
        const n = d.total;
        if (kind === 'percentiles') return { name, points: percentileCurve(d).map(([x, v]) => [x, v / div] as [number, number]), style: 'line', detail };
        const ranks = plotRanks(n);
        const vals = atRanks(d, ranks);
        const pts: [number, number][] = ranks.map((r, i) => [vals[i]! / div, kind === 'cdf' ? r / n : (n - r + 1) / n]);
        return { name, detail, points: pts, style: 'step' };
      });
      const guides =
        kind === 'cdf' ? [{ y: 0.5, label: 'p50' }, { y: 0.99, label: 'p99' }] : kind === 'ccdf' ? [{ y: 0.01, label: 'p99' }, { y: 0.001, label: 'p99.9' }] : [];
      return {
        title: p.title,
        x: kind === 'percentiles' ? pAxis : xAxis,
        y: kind === 'cdf' ? cdfAxis : kind === 'ccdf' ? ccdfAxis : yLatency,
        series,
        guides: guides.filter((g) => kind !== 'ccdf' || g.y >= ccdfAxis.min),
      };
    });
    const what = kind === 'cdf' ? 'CDF' : kind === 'ccdf' ? 'CCDF (tail)' : 'latency by percentile';
    return figureSvg({ title: `${o.title}: ${what}`, panels: ps, width: 900, legendWidth: 240 });
  };
  return { cdf: build('cdf'), ccdf: build('ccdf'), percentiles: build('percentiles') };
}
