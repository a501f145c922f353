/** The RFC 2544 report from a made-up result: ratios, targets, table, Markdown, SVG; latency at load. */
import { XMLValidator } from 'fast-xml-parser';
import { describe, expect, it } from 'vitest';
import type { CaseName } from '../../src/bench/rfc2544/cases.js';
import type { LatencyStep } from '../../src/bench/rfc2544/latency.js';
import { latencyLogs, latencyRows, latencySvgs, markdown, ratios, svgPlot, targets, terminalTable, type Report } from '../../src/bench/rfc2544/report.js';
import type { Summary } from '../../src/probe/stats.js';
import { HdrHistogram, type HdrBucket } from '../../src/probe/hdr.js';
import { canRender, inspectSvg, render } from '../helpers/svgcheck.js';
import { readIntervalLog } from '../../src/probe/hdrlog.js';
import type { CaseResult, Rfc2544Result } from '../../src/bench/rfc2544/rfc2544.js';
import { DEFAULTS } from '../../src/bench/rfc2544/rfc2544.js';

function row(c: CaseName, size: number, mpps: number): CaseResult {
  return {
    case: c, rep: 1, title: c, size, inner: size - 18, inLens: [size + 40], fps: mpps * 1e6, gbps: (mpps * 1e6 * (size + 40) * 8) / 1e9,
    generatorLimited: false, nsPerFrame: 1000 / mpps, warmup: { sent: 10, received: 10, bad: 0 },
    trials: [{ offeredRate: Infinity, achievedRate: mpps * 1e6, sent: 100, received: 100, lost: 0, lossRatio: 0, elapsedMs: 1, pass: true, bad: 0, nsPerFrame: 1000 / mpps, drops: {} }],
  };
}

const result: Rfc2544Result = {
  startedAt: '2026-11-30T13:00:00Z', finishedAt: '2026-11-30T13:10:00Z',
  options: { ...DEFAULTS, napi: 'softirq', sizes: [64, 1518], cases: ['uplink', 'downlink', 'kernel-ipv4', 'xdp-l3fwd'] },
  seg6Mode: 'encap.red',
  results: [
    row('uplink', 64, 2.85), row('downlink', 64, 3.0), row('kernel-ipv4', 64, 1.25), row('xdp-l3fwd', 64, 3.0),
    row('uplink', 1518, 1.0), row('downlink', 1518, 1.1), row('kernel-ipv4', 1518, 0.8), { ...row('xdp-l3fwd', 1518, 0), error: 'check failed' },
  ],
  genOnly: [{ rep: 1, size: 64, frameLen: 104, fps: 7e6, nsPerFrame: 50 }],
  interrupted: false,
};
const report: Report = {
  machine: { hostname: 'h', kernel: '6.18', cpu: 'EPYC', cpus: 2, affinity: '1', node: 'v20', loadStart: [1, 1, 1] },
  result,
};

describe('RFC 2544 report', () => {
  it('ratios translator / baseline per size, none against a failed case', () => {
    const r = ratios(result);
    expect(r.find((x) => x.size === 64 && x.name === 'uplink / xdp-l3fwd')?.value).toBeCloseTo(0.95, 6);
    expect(r.find((x) => x.size === 64 && x.name === 'downlink / kernel-ipv4')?.value).toBeCloseTo(2.4, 6);
    expect(r.find((x) => x.size === 1518 && x.name === 'uplink / xdp-l3fwd')).toBeUndefined();
  });

  it('targets for 64-byte frames: >= 90 % of L3FWD, >= 2x kernel', () => {
    const t = targets(result);
    expect(t.map((x) => [x.what, x.met])).toEqual([
      ['uplink >= 90 % of XDP L3FWD', true],
      ['downlink >= 90 % of XDP L3FWD', true],
      ['uplink >= 2x kernel IPv4 forwarding', true],
      ['downlink >= 2x kernel IPv4 forwarding', true],
    ]);
  });

  it('with repetitions: the median, a repetition in error left out and listed', () => {
    const rep = (x: CaseResult, n: number): CaseResult => ({ ...x, rep: n });
    const r3: Rfc2544Result = {
      ...result,
      options: { ...result.options, repeat: 3 },
      results: [
        rep(row('uplink', 64, 2.0), 1), rep(row('uplink', 64, 3.0), 2), rep({ ...row('uplink', 64, 0), error: 'check failed' }, 3),
        rep(row('xdp-l3fwd', 64, 4.0), 1), rep(row('xdp-l3fwd', 64, 5.0), 2), rep(row('xdp-l3fwd', 64, 6.0), 3),
      ],
    };
    // uplink: lower median of 2.0 and 3.0; L3FWD: 5.0.
    expect(ratios(r3).find((x) => x.name === 'uplink / xdp-l3fwd')?.value).toBeCloseTo(0.4, 6);
    const md = markdown({ ...report, result: r3 });
    expect(md).toContain('| 64 | 2.000, 3.000 | 4.000, 5.000, 6.000 |');
    expect(md).toContain('uplink 64 (repetition 3): check failed');
  });

  it('table, Markdown and SVG carry the figures, the machine and the caveats', () => {
    const table = terminalTable(report);
    expect(table).toMatch(/64\s+2\.850 \/ /);
    expect(table).toMatch(/error/);
    const md = markdown(report);
    expect(md).toContain('EPYC');
    expect(md).toContain('Linux 6.18');
    expect(md).toMatch(/Generator and device under test share the machine's 2 cores/);
    expect(md).toMatch(/Latency: after each search, at 10, 50, 90 % of the zero-loss rate/);
    expect(markdown({ ...report, result: { ...result, options: { ...result.options, latencyLoads: [] } } })).toMatch(/Latency: \*\*not measured\*\* in this run \(--no-latency\)/);
    expect(md).toContain('| 64 | 46 | 104 | 100 | 60 |');
    expect(md).toContain('xdp-l3fwd 1518: check failed');
    const svg = svgPlot(result, 'mpps');
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg.match(/<polyline/g)).toHaveLength(4);
    expect(svg).toContain('kernel-ipv4');
  });
});

// resvg ships a prebuilt binary per platform inside npm packages; without one for this machine the render check is skipped.
const resvg = await import('@resvg/resvg-js').catch(() => null);

/** A summary whose p50, p99, p99.9, max and jitter are the given ns (the rest made up to fit). */
function summary(p50: number, p99: number, p999: number, max: number, jitter: number): Summary {
  return {
    count: 1000, min: p50 / 2, mean: p50, max, stddev: 1,
    percentiles: { p5: p50 / 2, p50, p95: p50 / 2 + jitter, p99, 'p99.9': p999, 'p99.99': max }, jitter,
  };
}

function step(percent: number, fps: number, wireP50: number, residence: Summary | null, lost = 0): LatencyStep {
  const rate = Math.round((fps * percent) / 100);
  return {
    percent, offeredPps: rate,
    background: { sent: rate, seconds: 1, achievedPps: rate, received: rate - lost, lost, lossRatio: lost / rate },
    probes: { sent: 2000, received: 1999, lost: 1, duplicates: 0, reordered: 0, passedAtSink: 1999 },
    wire: summary(wireP50, wireP50 * 10, wireP50 * 20, wireP50 * 30, wireP50 * 5), residence, notes: [],
  };
}

describe('RFC 2544 report: latency at load', () => {
  const withLatency = (x: CaseResult, steps: LatencyStep[]): CaseResult => ({ ...x, latency: { probeRate: 2000, probeSeconds: 3, probeFrameLen: 104, steps } });
  const res = summary(180, 2500, 30_000, 66_000, 1000);
  const lr: Rfc2544Result = {
    ...result,
    results: [
      withLatency(row('uplink', 64, 2.0), [step(10, 2e6, 2900, res), step(50, 2e6, 2300, res), step(90, 2e6, 2200, res, 7)]),
      withLatency(row('kernel-ipv4', 64, 1.0), [step(10, 1e6, 2500, null), step(50, 1e6, 2000, null), step(90, 1e6, 1800, null)]),
      { ...row('bidir', 64, 3.0), latencySkipped: 'two streams from one generator thread' },
    ],
  };
  const lrep: Report = { ...report, result: lr };

  it('rows: one per case and step, wire and residence figures, the background loss', () => {
    const rows = latencyRows(lr);
    expect(rows.map((x) => [x.case, x.percent, x.offeredPps])).toEqual([
      ['uplink', 10, 200_000], ['uplink', 50, 1_000_000], ['uplink', 90, 1_800_000],
      ['kernel-ipv4', 10, 100_000], ['kernel-ipv4', 50, 500_000], ['kernel-ipv4', 90, 900_000],
    ]);
    expect(rows[2]).toMatchObject({ bgLost: 7, probesSent: 2000, probesLost: 1, wire: { p50: 2200, p99: 22_000, p999: 44_000, max: 66_000, jitter: 11_000 } });
    expect(rows[2]!.residence).toEqual({ p50: 180, p99: 2500, p999: 30_000, max: 66_000, jitter: 1000 });
    expect(rows[3]!.residence).toBeNull();
  });

  it('table and Markdown: a line per step, the baseline next to the translator, what was not measured and why', () => {
    const table = terminalTable(lrep);
    // One unit per time column, the unit of its largest value, in the header; cells are bare numbers.
    expect(table).toMatch(/wire p50 \(ns\)\s+p99 \(µs\)\s+p99\.9 \(µs\)\s+max \(µs\)\s+jitter \(µs\)\s+residence p50 \(ns\)\s+p99 \(ns\)\s+p99\.9 \(µs\)\s+max \(µs\)\s+jitter \(ns\)/);
    expect(table).toMatch(/uplink\s+64\s+90 %\s+1\.800 \/ 1\.800\s+7 \(0\.000 %\)\s+1 of 2000\s+2200\s+22\.000\s+44\.000\s+66\.000\s+11\.000\s+180\s+2500\s+30\.000\s+66\.000\s+1000$/m);
    expect(table).toMatch(/kernel-ipv4\s+64\s+10 %.*\s2500\s.*-\s+-\s+-\s+-\s+-$/m);
    expect(table).not.toMatch(/\d (ns|µs)\b/);
    expect(table).toContain('no latency: bidir: two streams from one generator thread (64 B)');
    const md = markdown(lrep);
    expect(md).toContain('## Latency at load');
    expect(md).toContain('| uplink | 64 | 50 % | 1.000 / 1.000 | 0 (0.000 %) | 1 of 2000 | 2300 | 23.000 |');
    expect(md).toContain('![latency-wire-64.svg](latency-wire-64.svg)');
    expect(md).toContain('- bidir: two streams from one generator thread (64 B)');
    expect(md).not.toMatch(/not measured\*\*/);
  });

  it('SVGs per frame size: wire with every case, residence with the translator only; they parse and render', () => {
    const svgs = latencySvgs(lr);
    expect(svgs.map(([n]) => n)).toEqual(['latency-wire-64.svg', 'latency-residence-64.svg']);
    const [wire, residence] = svgs.map(([, t]) => t) as [string, string];
    for (const svg of [wire, residence]) {
      expect(XMLValidator.validate(svg)).toBe(true);
      if (resvg !== null) expect(new resvg.Resvg(svg).render().asPng().subarray(1, 4).toString()).toBe('PNG');
    }
    expect(wire).toContain('uplink p99');
    expect(wire).toContain('kernel-ipv4 p50');
    // p50, p99 and jitter per case, three points each.
    expect(wire.match(/<polyline/g)).toHaveLength(6);
    expect(residence).toContain('uplink p50');
    expect(residence).not.toContain('kernel-ipv4');
    expect(latencySvgs(result)).toEqual([]);
  });

  it('--no-latency: no latency section, no per-case "no latency" lines', () => {
    const off: Report = { ...report, result: { ...result, options: { ...result.options, latencyLoads: [] }, results: result.results.map((x) => ({ ...x, latencySkipped: 'latency off (--no-latency)' })) } };
    expect(terminalTable(off)).not.toMatch(/latency/i);
    expect(markdown(off)).not.toContain('## Latency at load');
  });
});

describe('RFC 2544 latency steps: the probe\'s distribution figures, from the steps\' HDR histograms', () => {
  // Wire latencies of a step: a bulk near `p50` and a 1 % tail at 30 times it, as HDR buckets (the histograms the run keeps).
  const hist = (p50: number): HdrBucket[] => {
    const h = new HdrHistogram(3);
    for (let i = 0; i < 2000; i++) h.record(i % 100 === 99 ? p50 * 30 : p50 + (i % 50) * 10);
    return h.buckets();
  };
  const withHist = (s: LatencyStep, p50: number): LatencyStep => ({ ...s, histograms: { wire: hist(p50), residence: s.residence === null ? null : hist(180) } });
  const res = summary(180, 2500, 30_000, 66_000, 1000);
  const r: Rfc2544Result = {
    ...result,
    results: [
      { ...row('uplink', 64, 2.0), latency: { probeRate: 2000, probeSeconds: 3, probeFrameLen: 104, steps: [withHist(step(10, 2e6, 2900, res), 2900), withHist(step(90, 2e6, 2200, res), 2200)] } },
      { ...row('kernel-ipv4', 64, 1.0), latency: { probeRate: 2000, probeSeconds: 3, probeFrameLen: 104, steps: [withHist(step(10, 1e6, 2500, null), 2500)] } },
    ],
  };

  it('CDF, CCDF and percentile plot per frame size: a panel per case, a series per load step, log latency axes', () => {
    const svgs = new Map(latencySvgs(r));
    expect([...svgs.keys()]).toEqual([
      'latency-wire-64.svg', 'latency-residence-64.svg',
      'latency-cdf-wire-64.svg', 'latency-ccdf-wire-64.svg', 'latency-percentiles-wire-64.svg',
      'latency-cdf-residence-64.svg', 'latency-ccdf-residence-64.svg', 'latency-percentiles-residence-64.svg',
    ]);
    const cdf = inspectSvg(svgs.get('latency-cdf-wire-64.svg')!);
    expect(cdf.panels.map((p) => [p.title, p.series.length])).toEqual([['uplink', 2], ['kernel-ipv4', 1]]);
    expect(cdf.panels[0]!.series[1]!.name).toBe('90 %, reached 1800000/s');
    expect(svgs.get('latency-cdf-wire-64.svg')).toMatch(/class="detail"[^>]*>n = 2000, max /);
    for (const p of cdf.panels) {
      expect(p.x.scale).toBe('log');
      // 2200 ns .. 87 µs (2900 * 30): µs, 1 .. 100.
      expect(p.x.label).toBe('one-way wire latency (µs, log scale)');
      expect([p.x.min, p.x.max]).toEqual([1, 100]);
    }
    expect(inspectSvg(svgs.get('latency-percentiles-residence-64.svg')!).panels.map((p) => p.title)).toEqual(['uplink']);
    if (canRender) for (const [n, svg] of svgs) expect(render(svg).inked(), n).toBeGreaterThan(3000);
  });

  it('an HdrHistogram interval log per frame size, a tag per case, step and quantity, read back by the library', () => {
    const logs = latencyLogs(r, Date.UTC(2026, 11, 2));
    expect(logs.map(([n]) => n)).toEqual(['latency-64.hlog']);
    const back = readIntervalLog(logs[0]![1]);
    expect([...back.keys()].sort()).toEqual([
      'kernel-ipv4-10pct-wire', 'uplink-10pct-residence', 'uplink-10pct-wire', 'uplink-90pct-residence', 'uplink-90pct-wire',
    ]);
    // The step's own histogram and the log's agree on every percentile, to the bucket.
    const own = new HdrHistogram(3);
    for (let i = 0; i < 2000; i++) own.record(i % 100 === 99 ? 2200 * 30 : 2200 + (i % 50) * 10);
    const h = back.get('uplink-90pct-wire')!;
    expect(h.totalCount).toBe(2000);
    for (const p of [50, 95, 99, 99.9]) {
      const want = own.valueAtPercentile(p);
      const b = own.bucketRange(own.indexOf(want));
      expect(h.getValueAtPercentile(p), `p${p}`).toBeGreaterThanOrEqual(b.from);
      expect(h.getValueAtPercentile(p), `p${p}`).toBeLessThanOrEqual(b.to);
    }
  });

  it('the load-step plot: x = the background load reached', () => {
    const info = inspectSvg(latencySvgs(r)[0]![1]);
    expect(info.panels.map((p) => p.title)).toEqual(['uplink', 'kernel-ipv4']);
    expect(info.panels[0]!.x.label).toBe('background load reached (kframes/s)');
    expect(info.panels[0]!.x.max).toBeGreaterThanOrEqual(1800);
  });
});
