/**
 * The pinned mode's test logic against simulated devices: RFC 2544 §26.3
 * frame loss rate steps and §26.4 back-to-back search, and the pinned
 * report's verdicts (a search without loss is generator-bound, never a
 * throughput).
 */
import { describe, expect, it } from 'vitest';
import { backToBack, frameLossRate, sliceFor } from '../../src/bench/rfc2544/paced.js';
import { pinnedTargets, markdown, terminalTable, type Report } from '../../src/bench/rfc2544/report.js';
import { DEFAULTS, type CaseResult, type TrialRecord } from '../../src/bench/rfc2544/rfc2544.js';
import type { TrialResult } from '../../src/bench/rfc2544/search.js';

/** A device that forwards up to `cap` frames per second and drops the rest, for 1 s trials. */
function device(cap: number, top: number): (rate: number) => Promise<TrialResult> {
  return async (rate) => {
    const r = Number.isFinite(rate) ? rate : top;
    const sent = Math.round(r);
    const received = Math.min(sent, cap);
    return { offeredRate: rate, achievedRate: r, sent, received, lost: sent - received, lossRatio: (sent - received) / sent, elapsedMs: 1000 };
  };
}

describe('frame loss rate (RFC 2544 §26.3)', () => {
  it('steps down by 10 % from the maximum until two steps in a row lose nothing', async () => {
    const steps = await frameLossRate(1_000_000, device(650_000, 1_000_000));
    expect(steps.map((s) => s.percent)).toEqual([100, 90, 80, 70, 60, 50]);
    expect(steps.map((s) => s.lost > 0)).toEqual([true, true, true, true, false, false]);
    expect(steps[1]!.lossRatio).toBeCloseTo(250 / 900, 6);
  });

  it('a device that never loses: two steps, 100 and 90 %', async () => {
    const steps = await frameLossRate(1_000_000, device(Infinity, 1_000_000));
    expect(steps.map((s) => s.percent)).toEqual([100, 90]);
  });
});

describe('back-to-back (RFC 2544 §26.4)', () => {
  it('finds the longest burst a device with a ring of N frames takes whole, per trial, and their mean', async () => {
    const ring = 300;
    const r = await backToBack(async (frames) => ({ sent: frames, received: Math.min(frames, ring), elapsedMs: frames / 1000 }), { trials: 3, maxBurst: 100_000 });
    expect(r.bursts).toHaveLength(3);
    for (const b of r.bursts) {
      expect(b).toBeLessThanOrEqual(ring);
      expect(b).toBeGreaterThanOrEqual(ring - ring / 50);
    }
    expect(r.mean).toBeCloseTo(r.bursts.reduce((a, b) => a + b, 0) / 3, 6);
  });

  it('a device that takes the longest burst tried: capped there', async () => {
    const r = await backToBack(async (frames) => ({ sent: frames, received: frames, elapsedMs: 1 }), { trials: 1, maxBurst: 5000 });
    expect(r.bursts).toEqual([5000]);
  });
});

it('slices: about 100 ms of frames per call, at least a batch', () => {
  expect(sliceFor(1_000_000, 16)).toBe(100_000);
  expect(sliceFor(10, 16)).toBe(16);
  expect(sliceFor(Infinity, 16)).toBeGreaterThan(0);
});

describe('pinned report', () => {
  const trial = (offered: number, achieved: number, lost: number, progNs: number): TrialRecord => ({
    offeredRate: offered, achievedRate: achieved, sent: 1000, received: 1000 - lost, lost, lossRatio: lost / 1000, elapsedMs: 1000,
    pass: lost === 0, bad: 0, nsPerFrame: 0, drops: lost > 0 ? { 'dut:da:rx_dropped': lost } : {}, dut: { cpus: [1], busy: 0.9 }, progNs,
  });
  const cr = (c: CaseResult['case'], fps: number, progNs: number, genBound = false): CaseResult => ({
    case: c, rep: 1, title: c, size: 64, inner: 46, inLens: [104], fps: genBound ? 0 : fps, gbps: 0, generatorLimited: genBound, nsPerFrame: 0,
    warmup: { sent: 10, received: 10, bad: 0 }, topRate: 8e6, progNs,
    // A search: flat out (lost), the rate found, and its two confirmations.
    trials: genBound ? [trial(Infinity, 8e6, 0, progNs)] : [trial(Infinity, 8e6, 500, progNs), trial(fps, fps, 0, progNs), { ...trial(fps, fps, 0, progNs), confirm: true }, { ...trial(fps, fps, 0, progNs), confirm: true }],
    ...(genBound ? {} : { fpsOffered: fps, confirmed: true }),
    lossRate: [{ percent: 100, offeredRate: 8e6, achievedRate: 8e6, sent: 1000, lost: 500, lossRatio: 0.5 }],
    back2back: { bursts: [280, 300], mean: 290, maxBurst: 16e6, rate: 8e6 },
  });
  const rep: Report = {
    machine: { hostname: 'h', kernel: '6.18', cpu: 'EPYC', cpus: 2, affinity: '0-1', node: 'v20', loadStart: [1, 1, 1] },
    result: {
      startedAt: 'a', finishedAt: 'b', options: { ...DEFAULTS, sizes: [64], cases: ['uplink', 'downlink', 'xdp-l3fwd', 'kernel-ipv4'] }, seg6Mode: 'encap.red',
      results: [cr('uplink', 4.6e6, 48), cr('downlink', 4.8e6, 50), cr('xdp-l3fwd', 5e6, 42), cr('kernel-ipv4', 0, 0, true)],
      genOnly: [], interrupted: false,
      cpuPlan: { gen: 0, dut: 1, threads: [{ dev: 'da', tid: 10, cpu: 1, role: 'dut' }, { dev: 'db', tid: 11, cpu: 1, role: 'dut' }] },
      pacedBatch: 16, bursts: [{ offeredRate: 1e6, achievedRate: 1e6, gapNs: 250, frames: 1000, hist: [0, 0, 0, 0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] }],
    },
  };

  it('PASS/FAIL per target; a generator-bound baseline is not a throughput and its ratios are not measured', () => {
    const t = pinnedTargets(rep.result);
    const v = (w: string): boolean | undefined => t.find((x) => x.what.startsWith(w))?.pass;
    expect(v('64 B uplink zero-loss throughput >= 0.9x XDP L3FWD')).toBe(true); // 0.92
    expect(v('64 B downlink zero-loss throughput >= 0.9x XDP L3FWD')).toBe(true);
    expect(v('64 B uplink zero-loss throughput >= 2x kernel')).toBeUndefined();
    expect(v('64 B uplink program cost')).toBe(true); // 48 / 42 = 1.14
    expect(v('64 B downlink program cost')).toBe(false); // 50 / 42 = 1.19
    expect(v('kernel-ipv4 64 B: the rate found held')).toBe(false); // generator-bound
    expect(v('uplink 64 B: the rate found held')).toBe(true);
  });

  it('table and Markdown: generator-bound, loss rate, back-to-back, where things ran', () => {
    const table = terminalTable(rep);
    expect(table).toMatch(/generator-bound at 8\.000/);
    expect(table).toMatch(/FAIL 64 B downlink program cost/);
    expect(table).toMatch(/shorter than RFC 2544 §26\.1's 60 s/);
    const md = markdown(rep);
    for (const h of ['## Where things run (napi pinned)', '### Bursts the device under test sees', '## Frame loss rate (RFC 2544 §26.3)', '## Back-to-back frames (RFC 2544 §26.4)', '## Program cost next to throughput']) expect(md).toContain(h);
    expect(md).toMatch(/ran on CPU 1 only/);
    expect(md).toMatch(/\| uplink \| 64 \| 8\.000 \| 280, 300 \| 290 \|/);
  });
});

describe('search on offered rates (the paced generator may fall short)', () => {
  it('converges although every paced trial reached only a fifth of its rate; on reached rates it would stall', async () => {
    const { findThroughput } = await import('../../src/bench/rfc2544/search.js');
    // The generator reaches 1 Mpps flat out, a fifth of any finite rate asked; the device loses above 100,000 frames/s offered.
    const trial = async (rate: number): Promise<TrialResult> => {
      const achieved = Number.isFinite(rate) ? rate / 5 : 1e6;
      const lost = (Number.isFinite(rate) ? rate : 1e6) > 100_000 ? 10 : 0;
      return { offeredRate: rate, achievedRate: achieved, sent: 1000, received: 1000 - lost, lost, lossRatio: lost / 1000, elapsedMs: 1000 };
    };
    const offered = await findThroughput({ maxRate: Infinity, resolution: 0.05, maxTrials: 30, onOffered: true, trial });
    expect(offered.trials.length).toBeLessThan(15);
    expect(offered.throughput).toBeGreaterThan(0);
    const reached = await findThroughput({ maxRate: Infinity, resolution: 0.05, maxTrials: 30, trial });
    expect(reached.trials.length).toBe(30);
  });
});
