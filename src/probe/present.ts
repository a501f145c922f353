/**
 * A probe run for people and programs: the terminal table, JSON, the CSV of
 * raw samples, the latency plots, the HdrHistogram log, and the progress line while it runs.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hdrIntervalLog, type LogSeries } from './hdrlog.js';
import { toCsv } from './output.js';
import { timeUnit, UNIT_NS, type TimeUnit } from '../plot/svg.js';
import { distOf, latencyFigures, type Dist } from './plots.js';
import type { Summary } from './stats.js';
import type { DirectionResult, Progress, ProbeRunResult, Sample } from './probe.js';
import { makeDirs } from '../host/mkdirs.js';

/** ns with a unit people read: 812 ns, 3.41 µs, 1.20 ms. */
export function fmtNs(ns: number | null | undefined): string {
  if (ns === null || ns === undefined || !Number.isFinite(ns)) return '-';
  const a = Math.abs(ns);
  if (a < 10_000) return `${Math.round(ns)} ns`;
  if (a < 10_000_000) return `${(ns / 1e3).toFixed(2)} µs`;
  return `${(ns / 1e6).toFixed(2)} ms`;
}

const STAT_COLS = ['min', 'mean', 'max', 'stddev', 'p5', 'p50', 'p95', 'p99', 'p99.9', 'p99.99', 'jitter'] as const;

function statValues(s: Summary | null): (number | null)[] {
  if (s === null) return STAT_COLS.map(() => null);
  const p = s.percentiles;
  return [s.min, s.mean, s.max, s.stddev, p.p5, p.p50, p.p95, p.p99, p['p99.9'], p['p99.99'], s.jitter];
}

/** A value in a column's unit: whole ns, or 3 decimals in a larger unit. */
export function fmtIn(ns: number | null | undefined, unit: TimeUnit): string {
  if (ns === null || ns === undefined || !Number.isFinite(ns)) return '-';
  return unit === 'ns' ? String(Math.round(ns)) : (ns / UNIT_NS[unit]).toFixed(3);
}

/**
 * Columns of ns values with one unit each (the unit of the column's
 * largest value, in the header): a column never mixes ns and µs.
 */
export function unitColumns(names: readonly string[], rows: readonly (readonly (number | null)[])[]): { head: string[]; cells: string[][] } {
  const units = names.map((_, i) => timeUnit(Math.max(0, ...rows.map((r) => Math.abs(r[i] ?? 0)))));
  return {
    head: names.map((n, i) => `${n} (${units[i]})`),
    cells: rows.map((r) => r.map((v, i) => fmtIn(v, units[i]!))),
  };
}

function grid(rows: readonly (readonly string[])[]): string {
  const w = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => r.map((c, i) => (i === 0 ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join('  ').trimEnd()).join('\n');
}

function directionBlock(d: DirectionResult, inBand: boolean): string {
  const s = d.sequence;
  const head =
    `${d.dir}: ${d.tx.netns ?? ''}${d.tx.netns === undefined ? '' : '/'}${d.tx.dev} -> ${d.rx.netns ?? ''}${d.rx.netns === undefined ? '' : '/'}${d.rx.dev}` +
    `   sent ${s.sent}, received ${s.received}, lost ${s.lost} (${(s.lossRatio * 100).toFixed(3)} %), duplicated ${s.duplicates}, ` +
    `reordered ${s.reordered}${s.stray > 0 ? `, stray ${s.stray}` : ''}`;
  const named: [string, number, Summary | null][] = [[`wire latency (${d.wireClock} stamps)`, d.wire?.count ?? 0, d.wire]];
  if (inBand) {
    named.push(['residence, ring (exit - entry)', d.residence?.count ?? 0, d.residence]);
    named.push(['residence, MAC (exit - MAC stamp)', d.residenceMac?.count ?? 0, d.residenceMac]);
    named.push(['MAC stamp -> far-side RX', d.entryToRx?.count ?? 0, d.entryToRx]);
  }
  named.push(['|IPDV| (RFC 3393, wire)', d.ipdv.pairs, d.ipdv.abs]);
  const cols = unitColumns(STAT_COLS, named.map((x) => statValues(x[2])));
  const rows: string[][] = [['', 'n', ...cols.head], ...named.map((x, i) => [x[0], String(x[1]), ...cols.cells[i]!])];
  const lines = [head, grid(rows)];
  const extra: string[] = [`TX stamps ${d.txStamped}/${s.sent}`];
  if (inBand) {
    extra.push(
      `ring records ${d.records}${d.recordDuplicates > 0 ? ` (+${d.recordDuplicates} repeated)` : ''}, MAC-stamped frames ${d.macStamped}`,
      `ring vs MAC: ${d.agreement.within100ns}/${d.agreement.compared} within 100 ns (max |diff| ${fmtNs(d.agreement.maxAbsDiffNs)})`,
      `CPUs ${d.cpus.join(',') || '-'}`,
    );
  }
  lines.push(`  ${extra.join('; ')}`);
  return lines.join('\n');
}

export function formatReport(r: ProbeRunResult): string {
  const head = [
    `mup probe run ${r.run} at ${r.startedAt}: ${r.rate} probes/s per direction for ${r.durationS} s (sent in ${r.sendSeconds.toFixed(2)} s), ` +
      `${r.size}-byte frames, inner UDP port ${r.udpPort}`,
    r.inBand ? 'in-band stamps: on (ring buffer and source MAC)' : 'in-band stamps: off (wire latency only)',
  ];
  const blocks = r.directions.map((d) => directionBlock(d, r.inBand));
  const notes = r.notes.map((n) => `note: ${n}`);
  return [...head, '', ...blocks.flatMap((b) => [b, '']), ...notes, ...(notes.length > 0 ? [''] : [])].join('\n');
}

/** JSON: everything but the raw samples and IPDV values (those go to the CSV); histograms as HDR buckets. */
export function reportJson(r: ProbeRunResult): string {
  const { samples, ...rest } = r;
  void samples;
  // The IPDV values one by one are in the CSV (consecutive wire_ns): here the summary.
  const directions = rest.directions.map((d) => ({ ...d, ipdv: { ...d.ipdv, values: undefined } }));
  return JSON.stringify({ ...rest, directions }, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2) + '\n';
}

export const SAMPLE_HEADER = [
  'dir', 'seq', 'tx_ns', 'rx_ns', 'wire_ns', 'entry_ns', 'exit_ns', 'residence_ns', 'mac_entry_ns', 'residence_mac_ns',
  'entry_to_rx_ns', 'cpu', 'gap_ns', 'duplicates',
] as const;

export function samplesCsv(samples: readonly Sample[]): string {
  return toCsv(
    SAMPLE_HEADER,
    samples.map((s) => [
      s.dir, s.seq, s.txNs, s.rxNs, s.wireNs, s.entryNs, s.exitNs, s.residenceNs, s.macEntryNs, s.residenceMacNs, s.entryToRxNs, s.cpu,
      s.gapNs, s.duplicates,
    ]),
  );
}

/** The distribution of one quantity of each direction of a run, from the raw samples. */
function dists(r: ProbeRunResult, pick: (s: Sample) => number | null, label: (d: DirectionResult) => string): Dist[] {
  return r.directions
    .map((d) => distOf(label(d), r.samples.filter((s) => s.dir === d.dir && pick(s) !== null).map((s) => pick(s)!)))
    .filter((x) => x.total > 0);
}

/**
 * The latency figures of a run (src/probe/plots.ts): CDF, CCDF and
 * percentile plot of the wire latency and, with in-band stamps, of the
 * residence; one panel per direction. [file name, SVG] pairs.
 */
export function latencyPlots(r: ProbeRunResult): [string, string][] {
  const out: [string, string][] = [];
  const add = (what: string, ds: Dist[], title: string, quantity: string): void => {
    if (ds.length === 0) return;
    const f = latencyFigures(ds.map((d) => ({ title: d.name, series: [d] })), { title, quantity });
    out.push([`cdf-${what}.svg`, f.cdf], [`ccdf-${what}.svg`, f.ccdf], [`percentiles-${what}.svg`, f.percentiles]);
  };
  add('wire', dists(r, (s) => s.wireNs, (d) => `${d.dir} (${d.wireClock})`), `mup probe: one-way wire latency, ${r.rate} probes/s, ${r.size} B`, 'one-way wire latency');
  add('residence', dists(r, (s) => s.residenceNs, (d) => `${d.dir} residence`), 'mup probe: translator residence (XDP entry to exit)', 'residence time');
  return out;
}

/** The run's histograms as an HdrHistogram interval log (src/probe/hdrlog.ts): tags <dir>-wire, <dir>-residence. */
export function latencyLog(r: ProbeRunResult): string {
  const t0 = r.samples.reduce<bigint | null>((m, s) => (s.txNs !== null && (m === null || s.txNs < m) ? s.txNs : m), null);
  // When a probe was sent: its TX stamp, or (no stamp) its place in the schedule.
  const at = (s: Sample): number => (s.txNs !== null && t0 !== null ? Number(s.txNs - t0) : (s.seq / r.rate) * 1e9);
  const series: LogSeries[] = [];
  for (const d of r.directions) {
    const mine = r.samples.filter((s) => s.dir === d.dir);
    for (const [q, pick] of [['wire', (s: Sample) => s.wireNs], ['residence', (s: Sample) => s.residenceNs]] as const) {
      const values = mine.filter((s) => pick(s) !== null).map((s) => ({ atNs: at(s), valueNs: Math.max(0, pick(s)!) }));
      if (values.length > 0) series.push({ tag: `${d.dir}-${q}`, values });
    }
  }
  return hdrIntervalLog(series, {
    startMs: Date.parse(r.startedAt),
    comment: `mup probe run ${r.run}: ${r.rate} probes/s per direction, ${r.size} B, ${r.durationS} s`,
  });
}

/** report.json, report.txt, samples.csv, latency.hlog and the plots of latencyPlots in `dir`; returns the paths. */
export function writeOutputs(r: ProbeRunResult, dir: string): string[] {
  makeDirs(dir);
  const out: string[] = [];
  const put = (name: string, text: string): void => {
    const p = join(dir, name);
    writeFileSync(p, text);
    out.push(p);
  };
  put('report.json', reportJson(r));
  put('samples.csv', samplesCsv(r.samples));
  put('latency.hlog', latencyLog(r));
  for (const [name, svg] of latencyPlots(r)) put(name, svg);
  put('report.txt', formatReport(r));
  return out;
}

/** One progress line: a bar over the duration and the counts per direction. */
export function progressLine(p: Progress, width = 30): string {
  const f = Math.max(0, Math.min(1, p.elapsedS / p.durationS));
  const n = Math.round(f * width);
  const dirs = Object.entries(p.perDirection)
    .map(([d, c]) => `${d} ${c.sent} sent ${c.received} rcvd${c.recorded > 0 ? ` ${c.recorded} rec` : ''}`)
    .join(' | ');
  return `[${'#'.repeat(n)}${'.'.repeat(width - n)}] ${Math.min(p.elapsedS, p.durationS).toFixed(1)}/${p.durationS} s  ${dirs}`;
}
