/**
 * HdrHistogram interval logs (src/probe/hdrlog.ts): read back with the
 * library's own reader (hdr-histogram-js), each tag's percentiles equal the
 * table's (stats.ts, nearest rank over the raw values) within one bucket.
 */
import { describe, expect, it } from 'vitest';
import hdr from 'hdr-histogram-js';
import { hdrIntervalLog, readIntervalLog } from '../../src/probe/hdrlog.js';
import { HdrHistogram } from '../../src/probe/hdr.js';
import { summarize } from '../../src/probe/stats.js';

function values(n: number, seed: number): number[] {
  let x = seed;
  const rnd = (): number => ((x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  return Array.from({ length: n }, (_, i) => (i % 997 === 0 ? 70_000 + i : Math.round(60 + rnd() ** 4 * 5000)));
}

describe('HdrHistogram interval log', () => {
  const wire = values(4000, 3).map((v) => v * 20);
  const res = values(4000, 5);
  // 2000 probes/s: 2 s of sending, two intervals a tag.
  const timed = (vs: number[]): { atNs: number; valueNs: number }[] => vs.map((v, i) => ({ atNs: i * 500_000, valueNs: v }));
  const start = Date.UTC(2026, 11, 2, 4, 0, 0);
  const log = hdrIntervalLog([{ tag: 'uplink-wire', values: timed(wire) }, { tag: 'uplink-residence', values: timed(res) }], { startMs: start, comment: 'a test' });

  it('has the format\'s header and one tagged line per interval', () => {
    const lines = log.trimEnd().split('\n');
    expect(lines[0]).toBe('#a test');
    expect(log).toContain('#[Histogram log format version 1.3]');
    expect(log).toContain(`#[StartTime: ${start / 1000}`);
    expect(log).toContain('"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"');
    const data = lines.filter((l) => l.startsWith('Tag='));
    expect(data.map((l) => l.split(',').slice(0, 3).join(','))).toEqual([
      'Tag=uplink-residence,0.000,1.000', 'Tag=uplink-wire,0.000,1.000', 'Tag=uplink-residence,1.000,1.000', 'Tag=uplink-wire,1.000,1.000',
    ]);
    expect(hdr.listTags(log).sort()).toEqual(['uplink-residence', 'uplink-wire']);
  });

  it('read back by the library: counts, max and every table percentile within one bucket', () => {
    const back = readIntervalLog(log);
    for (const [tag, vs] of [['uplink-wire', wire], ['uplink-residence', res]] as const) {
      const h = back.get(tag)!;
      const table = summarize(vs)!;
      const layout = new HdrHistogram(3); // the same bucket layout (3 digits)
      expect(h.totalCount).toBe(vs.length);
      for (const [k, want] of Object.entries(table.percentiles)) {
        const got = h.getValueAtPercentile(Number(k.slice(1)));
        const b = layout.bucketRange(layout.indexOf(want));
        expect(got, `${tag} ${k}: table ${want}, log ${got}, bucket ${b.from}..${b.to}`).toBeGreaterThanOrEqual(b.from);
        expect(got, `${tag} ${k}`).toBeLessThanOrEqual(b.to);
      }
      const bm = layout.bucketRange(layout.indexOf(table.max));
      expect(h.maxValue).toBeGreaterThanOrEqual(bm.from);
      expect(h.maxValue).toBeLessThanOrEqual(bm.to);
    }
  });

  it('bad input is an error that says what', () => {
    expect(() => hdrIntervalLog([{ tag: 'a,b', values: [] }], { startMs: 0 })).toThrow(/tag "a,b"/);
    expect(() => hdrIntervalLog([{ tag: 'x', values: [{ atNs: 0, valueNs: -1 }] }], { startMs: 0 })).toThrow(/series x: value -1 ns/);
  });
});
