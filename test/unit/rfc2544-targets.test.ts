/** The pinned mode's PASS/FAIL lines from made-up results: each must be able to fail. */
import { describe, expect, it } from 'vitest';
import type { CaseName } from '../../src/bench/rfc2544/cases.js';
import { pinnedTargets } from '../../src/bench/rfc2544/report.js';
import { DEFAULTS, type CaseResult, type Rfc2544Result, type TrialRecord } from '../../src/bench/rfc2544/rfc2544.js';

const trial = (offered: number, sent: number, pass: boolean, confirm = false): TrialRecord => ({
  offeredRate: offered, achievedRate: sent, sent: Math.round(sent), received: pass ? Math.round(sent) : Math.round(sent) - 5, lost: pass ? 0 : 5,
  lossRatio: pass ? 0 : 5 / sent, elapsedMs: 1000, pass, bad: 0, nsPerFrame: 0, drops: {}, ...(confirm ? { confirm: true } : {}),
});

/** A pinned case whose throughput is `fps`, from the trials given (the first flat out). */
function pinned(c: CaseName, fps: number, trials: TrialRecord[], o: { offered?: number; confirmed?: boolean } = {}): CaseResult {
  return {
    case: c, rep: 1, title: c, size: 64, inner: 46, inLens: [104], fps, gbps: 0, generatorLimited: false, nsPerFrame: 0,
    warmup: { sent: 10, received: 10, bad: 0 }, trials, topRate: trials[0]!.achievedRate,
    ...(o.offered === undefined ? {} : { fpsOffered: o.offered }), ...(o.confirmed === undefined ? {} : { confirmed: o.confirmed }),
  };
}

const result = (results: CaseResult[]): Rfc2544Result => ({
  startedAt: '', finishedAt: '', options: { ...DEFAULTS, sizes: [64], cases: results.map((x) => x.case) }, seg6Mode: 'encap.red', results, genOnly: [], interrupted: false,
});

const verdict = (r: Rfc2544Result, what: RegExp): boolean | undefined => {
  const t = pinnedTargets(r).find((x) => what.test(x.what));
  expect(t, String(what)).toBeDefined();
  return t!.pass;
};

describe('pinned targets: a throughput must have held', () => {
  it('FAIL when a trial lost at or below the rate reported (the committed quiet-quick uplink: reported 0.492, trial 6 lost at 0.491)', () => {
    const x = pinned('uplink', 0.492e6, [trial(Infinity, 2.7e6, false), trial(0.6e6, 0.55e6, false), trial(0.5e6, 0.491e6, false), trial(0.49e6, 0.492e6, true)], { offered: 0.49e6, confirmed: true });
    expect(verdict(result([x]), /^uplink 64 B: the rate found held/)).toBe(false);
    expect(pinnedTargets(result([x])).find((t) => t.what.startsWith('uplink 64 B'))!.detail).toMatch(/1 trial\(s\) lost at or below 0\.492 Mpps \(sent 0\.491\)/);
  });

  it('FAIL when the rate was never repeated; PASS when its confirmations passed and every loss was above it', () => {
    const ts = [trial(Infinity, 2.7e6, false), trial(1.35e6, 1.35e6, false), trial(0.675e6, 0.675e6, true)];
    expect(verdict(result([pinned('uplink', 0.675e6, ts)]), /^uplink 64 B: the rate found held/)).toBe(false);
    const held = pinned('uplink', 0.674e6, [...ts, trial(0.675e6, 0.674e6, true, true), trial(0.675e6, 0.675e6, true, true)], { offered: 0.675e6, confirmed: true });
    expect(verdict(result([held]), /^uplink 64 B: the rate found held/)).toBe(true);
  });

  it('FAIL when no rate held, and when the generator bound the search', () => {
    const none = pinned('uplink', 0, [trial(Infinity, 2.7e6, false), trial(1.35e6, 1.35e6, true), trial(1.35e6, 1.35e6, false, true)], { confirmed: false });
    expect(verdict(result([none]), /^uplink 64 B: the rate found held/)).toBe(false);
    expect(verdict(result([{ ...pinned('uplink', 0, [trial(Infinity, 2.7e6, true)]), generatorLimited: true }]), /^uplink 64 B: the rate found held/)).toBe(false);
  });
});

describe('pinned targets: ratios against XDP L3FWD when the generator fell short', () => {
  // Translator good for 0.7 Mpps, L3FWD for 2.1: both searches end near the paced generator's 0.55 Mpps.
  const capped = (c: CaseName, sent: number): CaseResult =>
    pinned(c, sent, [trial(Infinity, 2.7e6, false), trial(1.35e6, 0.55e6, false), trial(0.6e6, sent, true), trial(0.6e6, sent, true, true), trial(0.6e6, sent, true, true)], { offered: 0.6e6, confirmed: true });
  const clean = (c: CaseName, fps: number): CaseResult =>
    pinned(c, fps, [trial(Infinity, 2.7e6, false), trial(fps * 1.01, fps * 1.01, false), trial(fps, fps, true), trial(fps, fps, true, true), trial(fps, fps, true, true)], { offered: fps, confirmed: true });
  const ratioLine = /^64 B uplink zero-loss throughput >= 0\.9x XDP L3FWD/;

  it('both capped (sent under 95 % of the offered rate): NOT MEASURED, never PASS', () => {
    const r = result([capped('uplink', 0.549e6), capped('xdp-l3fwd', 0.548e6)]);
    expect(verdict(r, ratioLine)).toBeUndefined();
    expect(pinnedTargets(r).find((t) => ratioLine.test(t.what))!.detail).toMatch(/not measured: both capped by the generator/);
  });

  it('one side capped: only the verdict the bound supports stands', () => {
    // L3FWD capped (a lower bound): the ratio is an upper bound, so a PASS is not measured, a FAIL stands.
    expect(verdict(result([clean('uplink', 0.5e6), capped('xdp-l3fwd', 0.548e6)]), ratioLine)).toBeUndefined();
    expect(verdict(result([clean('uplink', 0.3e6), capped('xdp-l3fwd', 0.548e6)]), ratioLine)).toBe(false);
    // The translator capped (a lower bound): a PASS stands, a FAIL is not measured.
    expect(verdict(result([capped('uplink', 0.549e6), clean('xdp-l3fwd', 0.58e6)]), ratioLine)).toBe(true);
    expect(verdict(result([capped('uplink', 0.549e6), clean('xdp-l3fwd', 0.9e6)]), ratioLine)).toBeUndefined();
  });

  it('neither capped: PASS or FAIL by the ratio', () => {
    expect(verdict(result([clean('uplink', 0.5e6), clean('xdp-l3fwd', 0.52e6)]), ratioLine)).toBe(true);
    expect(verdict(result([clean('uplink', 0.4e6), clean('xdp-l3fwd', 0.52e6)]), ratioLine)).toBe(false);
  });
});
