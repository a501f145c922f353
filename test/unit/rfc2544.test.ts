/**
 * The RFC 2544 search, rate control and loss accounting against a simulated
 * device under test of known capacity, on a simulated clock (no BPF, no
 * namespaces, no real time).
 */
import { describe, expect, it } from 'vitest';
import {
  accountLoss, batchFor, findThroughput, RateController, runTrial, trialPasses, type Clock, type TrialIo, type TrialResult,
} from '../../src/bench/rfc2544/search.js';

/** A clock that only moves when someone sleeps or spends time. */
class FakeClock implements Clock {
  t = 0n;
  now(): bigint {
    return this.t;
  }
  advanceNs(ns: number): void {
    this.t += BigInt(Math.round(ns));
  }
  sleep(ms: number): Promise<void> {
    // A real timer never fires early, and fires at least a little late.
    this.advanceNs(Math.max(ms, 0.05) * 1e6);
    return Promise.resolve();
  }
}

interface SimOptions {
  /** What the device forwards, frames per second, on average over a trial. */
  capacity: number;
  /** The generator's top speed, frames per second (a send of n frames takes n / peak). */
  peak: number;
  /** Per-call cost of a send, ns (the live-frame set-up). */
  callNs?: number;
  /** Capacity drift per trial, as a fraction (noise of a shared machine). */
  jitter?: (trial: number) => number;
}

/** A generator and a device under test: a trial loses what exceeds capacity × elapsed. */
function simulated(clock: FakeClock, o: SimOptions): TrialIo & { trials: number } {
  let sent = 0;
  let t0 = 0n;
  let n = 0;
  const io = {
    trials: 0,
    begin: () => {
      sent = 0;
      t0 = clock.now();
      io.trials = ++n;
    },
    send: (k: number) => {
      clock.advanceNs((o.callNs ?? 0) + (k / o.peak) * 1e9);
      sent += k;
      return k;
    },
    received: () => {
      const elapsed = Number(clock.now() - t0) / 1e9;
      const cap = o.capacity * (1 + (o.jitter?.(n) ?? 0));
      return Math.min(sent, Math.floor(cap * elapsed));
    },
  };
  return io;
}

function search(clock: FakeClock, io: TrialIo, extra: Partial<Parameters<typeof findThroughput>[0]> = {}) {
  return findThroughput({
    maxRate: Infinity,
    trial: (rate) => runTrial(io, { rate, durationMs: 2000, clock }),
    ...extra,
  });
}

describe('RateController', () => {
  it('hands out whole batches at the rate; when behind, what is owed up to maxBurst; the tail on request', () => {
    const rc = new RateController(1_000_000, 1000);
    expect(rc.maxBurst).toBe(4000);
    rc.start(0n);
    expect(rc.due(0n)).toBe(0);
    expect(rc.due(500_000n)).toBe(0); // 500 owed: less than a batch, no small call
    expect(rc.due(500_000n, true)).toBe(500); // the trial's tail: what is owed
    expect(rc.due(1_000_000n)).toBe(1000); // 1 ms at 1 Mpps
    rc.record(1000);
    expect(rc.due(1_500_000n)).toBe(0);
    expect(rc.due(3_000_000n)).toBe(2000); // behind: everything owed in one call
    expect(rc.due(10_000_000n)).toBe(4000); // far behind: no burst of 9000
    rc.record(4000);
    expect(rc.sent).toBe(5000);
    expect(() => new RateController(100, 10, 5)).toThrow(/maxBurst 5/);
  });

  it('says how long to wait for the next full batch', () => {
    const rc = new RateController(1000, 10);
    rc.start(0n);
    expect(rc.waitMs(0n)).toBeCloseTo(10, 6);
    rc.record(10);
    expect(rc.waitMs(5_000_000n)).toBeCloseTo(15, 6);
  });

  it('at rate Infinity always hands out a full batch', () => {
    const rc = new RateController(Infinity, 4096);
    rc.start(0n);
    expect(rc.due(0n)).toBe(4096);
    expect(rc.waitMs(0n)).toBe(0);
  });

  it('refuses a rate or batch that makes no sense', () => {
    expect(() => new RateController(0, 10)).toThrow(/rate 0/);
    expect(() => new RateController(-5, 10)).toThrow(/rate/);
    expect(() => new RateController(100, 0)).toThrow(/batch 0/);
    expect(() => new RateController(100, 1.5)).toThrow(/batch/);
    expect(() => new RateController(100, 1).due(0n)).toThrow(/before start/);
  });

  it('batchFor: about 20 ms of frames, clamped', () => {
    expect(batchFor(1_000_000)).toBe(20_000);
    expect(batchFor(1000)).toBe(1024);
    expect(batchFor(1e9)).toBe(131_072);
    expect(batchFor(Infinity)).toBe(131_072);
  });
});

describe('runTrial: rate control and loss accounting', () => {
  it.each([1e4, 2.5e5, 1e6, 2.5e6])('offers %d fps within 1 % over the trial (generator peak 3 Mpps, 3 ms per call)', async (rate) => {
    const clock = new FakeClock();
    const io = simulated(clock, { capacity: 1e9, peak: 3e6, callNs: 3e6 });
    const r = await runTrial(io, { rate, durationMs: 2000, clock });
    expect(r.achievedRate / rate).toBeGreaterThan(0.99);
    expect(r.achievedRate / rate).toBeLessThan(1.01);
    expect(r.lost).toBe(0);
    expect(r.received).toBe(r.sent);
  });

  it('sends in whole batches (a call has a fixed cost), partial ones only in the last batch period', async () => {
    const clock = new FakeClock();
    const io = simulated(clock, { capacity: 1e9, peak: 3e6, callNs: 3e6 });
    const sizes: number[] = [];
    const send = io.send.bind(io);
    io.send = (n) => {
      sizes.push(n);
      return send(n);
    };
    const r = await runTrial(io, { rate: 1e6, durationMs: 2000, clock });
    const small = sizes.map((n, i) => ({ n, i })).filter((x) => x.n < batchFor(1e6));
    expect(small.length).toBeLessThanOrEqual(2);
    for (const x of small) expect(x.i).toBeGreaterThanOrEqual(sizes.length - 2);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(r.sent);
  });

  it('at Infinity sends as fast as the generator goes (its per-call cost included)', async () => {
    const clock = new FakeClock();
    const io = simulated(clock, { capacity: 1e9, peak: 3e6, callNs: 3e6 });
    const r = await runTrial(io, { rate: Infinity, durationMs: 2000, clock });
    // 131072 frames per call take 43.7 ms + 3 ms of set-up: 2.81 Mpps.
    expect(r.achievedRate).toBeGreaterThan(2.75e6);
    expect(r.achievedRate).toBeLessThan(2.85e6);
  });

  it('counts what the device did not deliver as lost', async () => {
    const clock = new FakeClock();
    const io = simulated(clock, { capacity: 500_000, peak: 3e6 });
    const r = await runTrial(io, { rate: 1e6, durationMs: 1000, clock });
    expect(r.sent).toBeGreaterThan(990_000);
    expect(r.received).toBeLessThanOrEqual(500_000);
    expect(r.lost).toBe(r.sent - r.received);
    expect(r.lossRatio).toBeCloseTo(r.lost / r.sent, 12);
    expect(trialPasses(r, 0)).toBe(false);
    expect(trialPasses(r, 0.6)).toBe(true);
  });

  it('accountLoss: zero loss, some loss, nothing sent, and more received than sent is an error', () => {
    expect(accountLoss(100, 100)).toEqual({ lost: 0, lossRatio: 0 });
    expect(accountLoss(100, 97)).toEqual({ lost: 3, lossRatio: 0.03 });
    expect(accountLoss(0, 0)).toEqual({ lost: 0, lossRatio: 0 });
    expect(() => accountLoss(100, 101)).toThrow(/counted 101 frames but the generator sent 100/);
    expect(trialPasses({ sent: 0, lossRatio: 0 }, 0)).toBe(false);
  });

  it('stops between batches when aborted, with AbortedError', async () => {
    const clock = new FakeClock();
    const io = simulated(clock, { capacity: 1e9, peak: 3e6 });
    const ac = new AbortController();
    let calls = 0;
    const send = io.send.bind(io);
    io.send = (n) => {
      if (++calls === 3) ac.abort();
      return send(n);
    };
    await expect(runTrial(io, { rate: 1e6, durationMs: 10_000, clock, signal: ac.signal })).rejects.toThrow(/interrupted/);
    expect(calls).toBe(3);
  });
});

describe('findThroughput: binary search for the zero-loss rate', () => {
  it.each([50_000, 400_000, 1_234_567, 2_000_000, 2_600_000])('finds a device of capacity %d fps within 2 %', async (capacity) => {
    const clock = new FakeClock();
    const io = simulated(clock, { capacity, peak: 3e6, callNs: 3e6 });
    const s = await search(clock, io);
    expect(s.generatorLimited).toBe(false);
    expect(s.throughput).toBeLessThanOrEqual(capacity);
    expect(s.throughput / capacity).toBeGreaterThan(0.98);
    expect(s.trials.length).toBeLessThanOrEqual(20);
    // Every trial's verdict agrees with its loss.
    for (const t of s.trials) expect(t.pass).toBe(t.result.lost === 0);
  });

  it('with noise of ±0.5 % per trial still lands within 2 %', async () => {
    const clock = new FakeClock();
    const capacity = 1_500_000;
    const io = simulated(clock, { capacity, peak: 3e6, callNs: 3e6, jitter: (n) => (n % 2 === 0 ? 0.005 : -0.005) });
    const s = await search(clock, io);
    expect(Math.abs(s.throughput / capacity - 1)).toBeLessThan(0.02);
  });

  it('a loss tolerance lets through a rate with that much loss', async () => {
    const clock = new FakeClock();
    const capacity = 1_000_000;
    const io = simulated(clock, { capacity, peak: 3e6, callNs: 3e6 });
    const s = await search(clock, io, { lossTolerance: 0.05 });
    // Loss 5 % at rate r means r = capacity / 0.95.
    expect(s.throughput / (capacity / 0.95)).toBeGreaterThan(0.98);
    expect(s.throughput / (capacity / 0.95)).toBeLessThanOrEqual(1.001);
  });

  it('a device faster than the generator: the first trial passes, marked generator-limited', async () => {
    const clock = new FakeClock();
    const io = simulated(clock, { capacity: 10e6, peak: 3e6, callNs: 3e6 });
    const s = await search(clock, io);
    expect(s.generatorLimited).toBe(true);
    expect(s.trials).toHaveLength(1);
    expect(s.throughput).toBeGreaterThan(2.75e6);
  });

  it('a device that forwards nothing: throughput 0 after a bounded number of trials', async () => {
    const clock = new FakeClock();
    const io = simulated(clock, { capacity: 0, peak: 3e6 });
    const s = await search(clock, io);
    expect(s.throughput).toBe(0);
    expect(s.best).toBeUndefined();
    expect(s.trials.length).toBeLessThanOrEqual(20);
  });

  it('reports every trial with the bounds it leaves', async () => {
    const clock = new FakeClock();
    const io = simulated(clock, { capacity: 800_000, peak: 3e6 });
    const seen: { pass: boolean; lo: number; hi: number; r: TrialResult }[] = [];
    await search(clock, io, { onTrial: (r, pass, lo, hi) => seen.push({ r, pass, lo, hi }) });
    for (const s of seen) {
      expect(s.lo).toBeLessThanOrEqual(s.hi);
      if (s.pass) expect(s.lo).toBeGreaterThanOrEqual(s.r.achievedRate);
      else expect(s.hi).toBeLessThanOrEqual(s.r.achievedRate + 1e-6);
    }
  });
});
