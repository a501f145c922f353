/**
 * A probe run for people and programs: the terminal table, JSON, the CSV of
 * raw samples, the CDF plots, and the progress line while it runs.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cdfSvg, toCsv, type CdfSeries } from './output.js';
import type { Summary } from './stats.js';
import type { DirectionResult, Progress, ProbeRunResult, Sample } from './probe.js';

/** ns with a unit people read: 812 ns, 3.41 µs, 1.20 ms. */
export function fmtNs(ns: number | null | undefined): string {
  if (ns === null || ns === undefined || !Number.isFinite(ns)) return '-';
  const a = Math.abs(ns);
  if (a < 10_000) return `${Math.round(ns)} ns`;
  if (a < 10_000_000) return `${(ns / 1e3).toFixed(2)} µs`;
  return `${(ns / 1e6).toFixed(2)} ms`;
}

const STAT_COLS = ['min', 'mean', 'max', 'stddev', 'p5', 'p50', 'p95', 'p99', 'p99.9', 'p99.99', 'jitter'] as const;

function statCells(s: Summary | null): string[] {
  if (s === null) return STAT_COLS.map(() => '-');
  const p = s.percentiles;
  return [s.min, s.mean, s.max, s.stddev, p.p5, p.p50, p.p95, p.p99, p['p99.9'], p['p99.99'], s.jitter].map((v) => fmtNs(v));
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
  const rows: string[][] = [['', 'n', ...STAT_COLS]];
  rows.push([`wire latency (${d.wireClock} stamps)`, String(d.wire?.count ?? 0), ...statCells(d.wire)]);
  if (inBand) {
    rows.push(['residence, ring (exit - entry)', String(d.residence?.count ?? 0), ...statCells(d.residence)]);
    rows.push(['residence, MAC (exit - MAC stamp)', String(d.residenceMac?.count ?? 0), ...statCells(d.residenceMac)]);
    rows.push(['MAC stamp -> far-side RX', String(d.entryToRx?.count ?? 0), ...statCells(d.entryToRx)]);
  }
  rows.push(['|IPDV| (RFC 3393, wire)', String(d.ipdv.pairs), ...statCells(d.ipdv.abs)]);
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

/** The two CDF plots: wire latency and residence, one series per direction. */
export function cdfPlots(r: ProbeRunResult): { wire: string; residence: string | null } {
  const wire: CdfSeries[] = [];
  const res: CdfSeries[] = [];
  for (const d of r.directions) {
    const ws = r.samples.filter((s) => s.dir === d.dir && s.wireNs !== null).map((s) => s.wireNs!);
    if (ws.length > 0) wire.push({ name: `${d.dir} (${d.wireClock})`, values: ws });
    const rs = r.samples.filter((s) => s.dir === d.dir && s.residenceNs !== null).map((s) => s.residenceNs!);
    if (rs.length > 0) res.push({ name: `${d.dir} residence`, values: rs });
  }
  return {
    wire: cdfSvg(wire, { title: `mup probe: one-way wire latency, ${r.rate} probes/s, ${r.size} B`, xLabel: 'one-way wire latency' }),
    residence: res.length === 0 ? null : cdfSvg(res, { title: 'mup probe: translator residence (XDP entry to exit)', xLabel: 'residence time' }),
  };
}

/** report.json, samples.csv, cdf-wire.svg, cdf-residence.svg in `dir`; returns the paths. */
export function writeOutputs(r: ProbeRunResult, dir: string): string[] {
  mkdirSync(dir, { recursive: true });
  const out: string[] = [];
  const put = (name: string, text: string): void => {
    const p = join(dir, name);
    writeFileSync(p, text);
    out.push(p);
  };
  put('report.json', reportJson(r));
  put('samples.csv', samplesCsv(r.samples));
  const plots = cdfPlots(r);
  put('cdf-wire.svg', plots.wire);
  if (plots.residence !== null) put('cdf-residence.svg', plots.residence);
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
