/** The RFC 2544 report from a made-up result: ratios, targets, table, Markdown, SVG. */
import { describe, expect, it } from 'vitest';
import type { CaseName } from '../../src/bench/rfc2544/cases.js';
import { markdown, ratios, svgPlot, targets, terminalTable, type Report } from '../../src/bench/rfc2544/report.js';
import type { CaseResult, Rfc2544Result } from '../../src/bench/rfc2544/run.js';
import { DEFAULTS } from '../../src/bench/rfc2544/run.js';

function row(c: CaseName, size: number, mpps: number): CaseResult {
  return {
    case: c, rep: 1, title: c, size, inner: size - 18, inLens: [size + 40], fps: mpps * 1e6, gbps: (mpps * 1e6 * (size + 40) * 8) / 1e9,
    generatorLimited: false, nsPerFrame: 1000 / mpps, warmup: { sent: 10, received: 10, bad: 0 },
    trials: [{ offeredRate: Infinity, achievedRate: mpps * 1e6, sent: 100, received: 100, lost: 0, lossRatio: 0, elapsedMs: 1, pass: true, bad: 0, nsPerFrame: 1000 / mpps, drops: {} }],
  };
}

const result: Rfc2544Result = {
  startedAt: '2026-11-30T13:00:00Z', finishedAt: '2026-11-30T13:10:00Z',
  options: { ...DEFAULTS, sizes: [64, 1518], cases: ['uplink', 'downlink', 'kernel-ipv4', 'xdp-l3fwd'] },
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
    expect(md).toMatch(/Latency: \*\*not measured\*\*/);
    expect(md).toContain('| 64 | 46 | 104 | 100 | 60 |');
    expect(md).toContain('xdp-l3fwd 1518: check failed');
    const svg = svgPlot(result, 'mpps');
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg.match(/<polyline/g)).toHaveLength(4);
    expect(svg).toContain('kernel-ipv4');
  });
});
