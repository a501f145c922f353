/**
 * Latency histograms in HdrHistogram's interval log format (the `.hlog`
 * files that HdrHistogram's own tools read: HistogramLogProcessor,
 * HdrHistogramVisualizer, hdr-plot), written with the npm implementation
 * hdr-histogram-js. One tagged series per direction and quantity
 * (`uplink-wire`, `uplink-residence`, ...), one interval per second of
 * sending; values in ns, 3 significant digits (the same bucket layout as
 * src/probe/hdr.ts). docs/probe.md, "Standard formats".
 */
import hdr from 'hdr-histogram-js';

/** One value of a series and when it was sent (ns since the run's first send). */
export interface TimedValue {
  readonly atNs: number;
  readonly valueNs: number;
}

export interface LogSeries {
  /** The log's Tag=: letters, digits, '-', '_', '.' (no comma, no space). */
  readonly tag: string;
  readonly values: readonly TimedValue[];
  /**
   * Already counted values ([value ns, count], e.g. HDR buckets), logged as
   * one interval from 0 to `seconds` (the run's length) besides `values`.
   */
  readonly counted?: { readonly counts: readonly (readonly [number, number])[]; readonly seconds: number };
}

export interface LogOptions {
  /** Wall-clock start of the run, ms since the epoch (the log's StartTime). */
  readonly startMs: number;
  /** Interval length, s (default 1). */
  readonly intervalS?: number;
  /** A line for the log's header comments (what was measured). */
  readonly comment?: string;
}

const TAG_OK = /^[A-Za-z0-9_.-]+$/;

/** The interval log text: header, then each series' intervals in time order. */
export function hdrIntervalLog(series: readonly LogSeries[], o: LogOptions): string {
  const intervalS = o.intervalS ?? 1;
  if (!(intervalS > 0)) throw new RangeError(`interval ${intervalS} s: more than 0`);
  let text = '';
  const writer = new hdr.HistogramLogWriter((s) => (text += s));
  if (o.comment !== undefined) for (const l of o.comment.split('\n')) writer.outputComment(l);
  writer.outputComment('values in ns; Interval_Max in µs (the writer divides by 1000); tags: <direction>-<quantity>');
  writer.outputLogFormatVersion();
  writer.outputStartTime(o.startMs);
  writer.baseTime = o.startMs;
  writer.outputLegend();
  const lines: { start: number; tag: string; text: string }[] = [];
  for (const s of series) {
    if (!TAG_OK.test(s.tag)) throw new RangeError(`HdrHistogram log tag "${s.tag}": letters, digits, '-', '_' and '.' only`);
    const byInterval = new Map<number, hdr.Histogram>();
    for (const v of s.values) {
      if (!(Number.isFinite(v.valueNs) && v.valueNs >= 0)) throw new RangeError(`series ${s.tag}: value ${v.valueNs} ns is not a latency`);
      const k = Math.max(0, Math.floor(v.atNs / 1e9 / intervalS));
      let h = byInterval.get(k);
      if (h === undefined) {
        h = hdr.build({ numberOfSignificantValueDigits: 3, bitBucketSize: 'packed', useWebAssembly: false });
        byInterval.set(k, h);
      }
      h.recordValue(Math.round(v.valueNs));
    }
    const put = (h: hdr.Histogram, from: number, to: number): void => {
      h.tag = s.tag;
      let line = '';
      const w = new hdr.HistogramLogWriter((x) => (line += x));
      w.outputIntervalHistogram(h, from, to, 1000);
      lines.push({ start: from, tag: s.tag, text: line });
      h.destroy();
    };
    for (const [k, h] of [...byInterval].sort((a, b) => a[0] - b[0])) put(h, k * intervalS, (k + 1) * intervalS);
    if (s.counted !== undefined && s.counted.counts.length > 0) {
      const h = hdr.build({ numberOfSignificantValueDigits: 3, bitBucketSize: 'packed', useWebAssembly: false });
      for (const [v, c] of s.counted.counts) {
        if (!(Number.isFinite(v) && v >= 0 && Number.isInteger(c) && c > 0)) throw new RangeError(`series ${s.tag}: ${c} x ${v} ns is not a count of latencies`);
        h.recordValueWithCount(Math.round(v), c);
      }
      put(h, 0, s.counted.seconds);
    }
  }
  lines.sort((a, b) => a.start - b.start || (a.tag < b.tag ? -1 : a.tag > b.tag ? 1 : 0));
  return text + lines.map((l) => l.text).join('');
}

/** Read a log back: every interval of each tag added into one histogram per tag (hdr-histogram-js's reader). */
export function readIntervalLog(text: string): Map<string, hdr.Histogram> {
  const out = new Map<string, hdr.Histogram>();
  const reader = new hdr.HistogramLogReader(text, 'packed', false);
  for (let h = reader.nextIntervalHistogram(); h !== null; h = reader.nextIntervalHistogram()) {
    const tag = h.tag;
    let acc = out.get(tag);
    if (acc === undefined) {
      acc = hdr.build({ numberOfSignificantValueDigits: 3, bitBucketSize: 'packed', autoResize: true, useWebAssembly: false });
      acc.tag = tag;
      out.set(tag, acc);
    }
    acc.add(h);
    h.destroy();
  }
  return out;
}
