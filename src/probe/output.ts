/**
 * Writers for probe results: CSV of raw samples and a CDF plot as a
 * self-contained SVG (hand-written, no browser, no fonts embedded: text
 * uses the generic sans-serif family).
 */
import type { TimestampClock } from './native.js';
import { nearestRank } from './stats.js';
import { niceTicks } from '../plot/svg.js';

type Cell = string | number | bigint | boolean | null | undefined;

function csvField(v: Cell): string {
  if (v === null || v === undefined) return '';
  const s = typeof v === 'string' ? v : String(v);
  return /[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

/**
 * CSV with RFC 4180 quoting (a field with a comma, quote or line break is
 * quoted, quotes doubled), LF line ends, a header line, empty fields for
 * null. Every row must have the header's length.
 */
export function toCsv(header: readonly string[], rows: Iterable<readonly Cell[]>): string {
  const lines = [header.map(csvField).join(',')];
  let i = 0;
  for (const r of rows) {
    if (r.length !== header.length) throw new RangeError(`CSV row ${i} has ${r.length} fields, the header ${header.length}`);
    lines.push(r.map(csvField).join(','));
    i++;
  }
  return lines.join('\n') + '\n';
}

/** One probe packet, as the raw-sample CSV holds it. */
export interface SampleRow {
  readonly seq: number;
  /** TX stamp (ns on `clock`), null if none came back. */
  readonly txNs: bigint | null;
  /** RX stamp (ns on `clock`), null if the packet was lost. */
  readonly rxNs: bigint | null;
  /** One-way latency (ns), null if lost. */
  readonly latencyNs: number | null;
  readonly clock: TimestampClock | null;
}

export const SAMPLE_CSV_HEADER = ['seq', 'tx_ns', 'rx_ns', 'latency_ns', 'clock'] as const;

/** Raw samples as CSV: seq,tx_ns,rx_ns,latency_ns,clock (lost packets with empty rx_ns and latency_ns). */
export function samplesCsv(rows: Iterable<SampleRow>): string {
  const cells = function* (): Generator<Cell[]> {
    for (const r of rows) yield [r.seq, r.txNs, r.rxNs, r.latencyNs, r.clock];
  };
  return toCsv(SAMPLE_CSV_HEADER, cells());
}

export interface CdfSeries {
  readonly name: string;
  /** Latencies in ns (any order). */
  readonly values: readonly number[];
}

export type TimeUnit = 'ns' | 'us' | 'ms' | 's';
const UNIT_NS: Record<TimeUnit, number> = { ns: 1, us: 1e3, ms: 1e6, s: 1e9 };
const UNIT_LABEL: Record<TimeUnit, string> = { ns: 'ns', us: 'µs', ms: 'ms', s: 's' };

export interface CdfOptions {
  readonly title?: string;
  /** X axis label without the unit; default "one-way latency". */
  readonly xLabel?: string;
  /** Display unit of the X axis; default: chosen from the largest value. */
  readonly unit?: TimeUnit;
  readonly width?: number;
  readonly height?: number;
  /**
   * At most this many steps per series (default 2000): a larger series is
   * drawn at the nearest-rank quantiles j/maxPoints, j = 1..maxPoints.
   */
  readonly maxPoints?: number;
}

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b'];

function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c]!);
}

function autoUnit(maxNs: number): TimeUnit {
  if (maxNs < 1e4) return 'ns';
  if (maxNs < 1e7) return 'us';
  if (maxNs < 1e10) return 'ms';
  return 's';
}

export { niceTicks };

function fmt(v: number): string {
  return Number(v.toPrecision(6)).toString();
}

/** Points of the empirical CDF, [value, fraction], one per plotted step (see maxPoints). */
export function cdfPoints(values: readonly number[], maxPoints = 2000): [number, number][] {
  const sorted = [...values].sort((a, b) => a - b);
  const n = sorted.length;
  if (n <= maxPoints) return sorted.map((v, i) => [v, (i + 1) / n]);
  const out: [number, number][] = [];
  for (let j = 1; j <= maxPoints; j++) {
    const rank = Math.max(nearestRank((100 * j) / maxPoints, n), 1);
    out.push([sorted[rank - 1]!, rank / n]);
  }
  return out;
}

/**
 * The empirical CDF of each series as an SVG document: a step line per
 * series (two vertices per step: up at each value), axes with round ticks,
 * axis labels, a legend, and dashed guides at p50, p95 and p99.
 */
export function cdfSvg(series: readonly CdfSeries[], opts: CdfOptions = {}): string {
  const W = opts.width ?? 720;
  const H = opts.height ?? 440;
  const m = { left: 72, right: 24, top: 44, bottom: 58 };
  const pw = W - m.left - m.right;
  const ph = H - m.top - m.bottom;
  const maxPoints = opts.maxPoints ?? 2000;

  let count = 0;
  let lo = Infinity;
  let hi = -Infinity;
  for (const s of series) {
    for (const v of s.values) {
      if (!Number.isFinite(v)) throw new RangeError(`CDF values must be finite numbers, got ${v} in series "${s.name}"`);
      if (v < lo) lo = v;
      if (v > hi) hi = v;
      count++;
    }
  }
  if (count === 0) [lo, hi] = [0, 1];
  const unit = opts.unit ?? autoUnit(hi);
  const div = UNIT_NS[unit];
  const ticks = niceTicks(lo / div, hi / div);
  const x0 = ticks[0]!;
  const x1 = ticks[ticks.length - 1]!;
  const sx = (v: number): number => m.left + ((v / div - x0) / (x1 - x0)) * pw;
  const sy = (f: number): number => m.top + (1 - f) * ph;
  const c = (n: number): string => n.toFixed(2);

  const out: string[] = [];
  out.push(`<?xml version="1.0" encoding="UTF-8"?>`);
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
  );
  const title = opts.title ?? 'Latency CDF';
  out.push(`<title>${esc(title)}</title>`);
  out.push(`<rect x="0" y="0" width="${W}" height="${H}" fill="#ffffff"/>`);
  out.push(`<text x="${W / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">${esc(title)}</text>`);

  // Grid and ticks.
  out.push(`<g class="grid" stroke="#e0e0e0" stroke-width="1">`);
  for (const t of ticks) out.push(`<line x1="${c(sx(t * div))}" y1="${m.top}" x2="${c(sx(t * div))}" y2="${m.top + ph}"/>`);
  for (let k = 0; k <= 4; k++) out.push(`<line x1="${m.left}" y1="${c(sy(k / 4))}" x2="${m.left + pw}" y2="${c(sy(k / 4))}"/>`);
  out.push(`</g>`);
  out.push(`<g class="guides" stroke="#888888" stroke-width="1" stroke-dasharray="4 3">`);
  for (const [p, f] of [['p50', 0.5], ['p95', 0.95], ['p99', 0.99]] as const) {
    out.push(`<line x1="${m.left}" y1="${c(sy(f))}" x2="${m.left + pw}" y2="${c(sy(f))}"/>`);
    out.push(`<text x="${m.left + pw - 4}" y="${c(sy(f) - 3)}" text-anchor="end" stroke="none" fill="#666666" font-size="10">${p}</text>`);
  }
  out.push(`</g>`);

  // Axes.
  out.push(`<g class="axes" stroke="#000000" stroke-width="1">`);
  out.push(`<line x1="${m.left}" y1="${m.top + ph}" x2="${m.left + pw}" y2="${m.top + ph}"/>`);
  out.push(`<line x1="${m.left}" y1="${m.top}" x2="${m.left}" y2="${m.top + ph}"/>`);
  out.push(`</g>`);
  out.push(`<g class="x-ticks" text-anchor="middle">`);
  for (const t of ticks) {
    const x = c(sx(t * div));
    out.push(`<line x1="${x}" y1="${m.top + ph}" x2="${x}" y2="${m.top + ph + 5}" stroke="#000000"/>`);
    out.push(`<text x="${x}" y="${m.top + ph + 18}">${esc(fmt(t))}</text>`);
  }
  out.push(`</g>`);
  out.push(`<g class="y-ticks" text-anchor="end">`);
  for (let k = 0; k <= 4; k++) {
    const y = c(sy(k / 4));
    out.push(`<line x1="${m.left - 5}" y1="${y}" x2="${m.left}" y2="${y}" stroke="#000000"/>`);
    out.push(`<text x="${m.left - 8}" y="${c(sy(k / 4) + 4)}">${k * 25} %</text>`);
  }
  out.push(`</g>`);
  out.push(
    `<text class="x-label" x="${m.left + pw / 2}" y="${H - 14}" text-anchor="middle">${esc(opts.xLabel ?? 'one-way latency')} (${UNIT_LABEL[unit]})</text>`,
  );
  out.push(
    `<text class="y-label" x="16" y="${m.top + ph / 2}" text-anchor="middle" transform="rotate(-90 16 ${m.top + ph / 2})">fraction of packets ≤ x</text>`,
  );

  // One step line per series.
  series.forEach((s, i) => {
    const color = PALETTE[i % PALETTE.length]!;
    const pts = cdfPoints(s.values, maxPoints);
    const vertices: string[] = [];
    let prev = 0;
    for (const [v, f] of pts) {
      vertices.push(`${c(sx(v))},${c(sy(prev))}`, `${c(sx(v))},${c(sy(f))}`);
      prev = f;
    }
    out.push(
      `<polyline class="cdf" data-series="${esc(s.name)}" data-points="${pts.length}" fill="none" stroke="${color}" stroke-width="1.5" points="${vertices.join(' ')}"/>`,
    );
  });
  if (count === 0) {
    out.push(`<text x="${m.left + pw / 2}" y="${m.top + ph / 2}" text-anchor="middle" fill="#666666">no samples</text>`);
  }

  // Legend, bottom right inside the plot: below a CDF that rises to the right, the corner stays empty.
  out.push(`<g class="legend">`);
  const labels = series.map((s) => `${s.name} (n = ${s.values.length})`);
  const legendW = 40 + 7 * Math.max(0, ...labels.map((l) => l.length));
  series.forEach((s, i) => {
    const y = m.top + ph - 12 - (series.length - 1 - i) * 16;
    const x = m.left + pw - legendW;
    const color = PALETTE[i % PALETTE.length]!;
    out.push(`<line x1="${x + 4}" y1="${y - 4}" x2="${x + 24}" y2="${y - 4}" stroke="${color}" stroke-width="2"/>`);
    out.push(`<text x="${x + 30}" y="${y}">${esc(labels[i]!)}</text>`);
  });
  out.push(`</g>`);
  out.push(`</svg>`);
  return out.join('\n') + '\n';
}
