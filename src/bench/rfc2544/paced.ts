/**
 * Trials with the paced generator (pacedgen.ts) on a device under test in
 * its own pinned NAPI thread (cpus.ts): RFC 2544 §26.1 throughput trials,
 * §26.3 frame loss rate steps and §26.4 back-to-back bursts.
 *
 * A trial at a finite rate sends slices of about 100 ms of frames, one
 * BPF_PROG_TEST_RUN each, the program pacing every frame; at `Infinity` the
 * generator runs flat out (its top rate: RFC 2544's "maximum frame rate"
 * of the medium here, since a veth has none). Loss = frames sent − frames
 * the sink counted correct; where they went (the DUT's veth ring, the
 * translator's drop reasons) comes from the drop counters around it.
 */
import { AbortedError, accountLoss, type TrialResult } from './search.js';
import type { PacedGenerator } from './pacedgen.js';
import type { DutCheck, DutWatch } from './cpus.js';

export interface PacedStream {
  gen: PacedGenerator;
}

export interface PacedIo {
  streams: PacedStream[];
  /** Reset the sinks. */
  begin(): void;
  /** Frames counted correct at the sinks since begin(). */
  received(): number;
  /** Wait until the sink's count stops moving. */
  settle(): Promise<void>;
}

/** Frames per call: about 100 ms at the rate (full speed: 400,000), whole batches (the pace waits at batch starts). */
export function sliceFor(rate: number, batch: number): number {
  return Number.isFinite(rate) ? Math.max(1, Math.round((rate * 0.1) / batch)) * batch : 400_000;
}

export interface PacedTrialOptions {
  rate: number;
  durationMs: number;
  watch?: DutWatch;
  signal?: AbortSignal;
  progress?: (fraction: number) => void;
}

/** One trial: `rate` frames per second (split evenly over the streams) for `durationMs`. */
export async function pacedTrial(io: PacedIo, o: PacedTrialOptions): Promise<TrialResult & { dut?: DutCheck }> {
  const n = io.streams.length;
  for (const s of io.streams) s.gen.setRate(o.rate / n);
  io.begin();
  const slice = sliceFor(o.rate / n, io.streams[0]!.gen.batch);
  const t0 = process.hrtime.bigint();
  const durNs = o.durationMs * 1e6;
  let sent = 0;
  for (;;) {
    if (o.signal?.aborted) throw new AbortedError();
    const el = Number(process.hrtime.bigint() - t0);
    if (el >= durNs) break;
    // The last slice only as long as the trial has left.
    const b = io.streams[0]!.gen.batch;
    const left = Number.isFinite(o.rate) ? Math.max(1, Math.round(((durNs - el) / 1e9) * (o.rate / n) / b)) * b : slice;
    for (const s of io.streams) sent += s.gen.send(Math.min(slice, left));
    o.watch?.sample();
    o.progress?.(el / durNs);
    await new Promise<void>((r) => setImmediate(r));
  }
  const elapsedMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const dut = o.watch?.end();
  await io.settle();
  const received = io.received();
  const { lost, lossRatio } = accountLoss(sent, received);
  return {
    offeredRate: o.rate, achievedRate: elapsedMs > 0 ? sent / (elapsedMs / 1000) : 0, sent, received, lost, lossRatio, elapsedMs,
    ...(dut === undefined ? {} : { dut }),
  };
}

export interface LossStep {
  /** Percent of the maximum rate (100: the generator flat out). */
  percent: number;
  offeredRate: number;
  achievedRate: number;
  sent: number;
  lost: number;
  lossRatio: number;
}

/**
 * RFC 2544 §26.3: loss at 100 % of the maximum rate, then 90 %, 80 %, … in
 * steps of `step` percent, until two steps in a row lose nothing (or 10 %).
 */
export async function frameLossRate(
  maxRate: number,
  trial: (rate: number) => Promise<TrialResult>,
  step = 10,
): Promise<LossStep[]> {
  const out: LossStep[] = [];
  let clean = 0;
  for (let p = 100; p >= step && clean < 2; p -= step) {
    const r = await trial(p === 100 ? Infinity : (maxRate * p) / 100);
    out.push({ percent: p, offeredRate: p === 100 ? maxRate : r.offeredRate, achievedRate: r.achievedRate, sent: r.sent, lost: r.lost, lossRatio: r.lossRatio });
    clean = r.lost === 0 ? clean + 1 : 0;
  }
  return out;
}

export interface Back2Back {
  /** Longest burst without loss, per trial (frames). */
  bursts: number[];
  /** Their mean (RFC 2544 §26.4 reports the average). */
  mean: number;
  /** The longest burst tried; a trial that passed it is capped there. */
  maxBurst: number;
  /** Rate of the bursts (the generator flat out), frames per second. */
  rate: number;
}

/**
 * RFC 2544 §26.4: bursts at the maximum rate (the generator flat out, no
 * pause); per trial, a binary search on the burst length for the longest
 * that arrives whole; `trials` trials, reported with their mean (as
 * VSPerf's rfc2544_back2back).
 */
export async function backToBack(
  burst: (frames: number) => Promise<{ sent: number; received: number; elapsedMs: number }>,
  o: { trials: number; maxBurst: number; minBurst?: number; signal?: AbortSignal },
): Promise<Back2Back> {
  const bursts: number[] = [];
  let sentAll = 0;
  let msAll = 0;
  for (let t = 0; t < o.trials; t++) {
    let lo = 0; // longest burst that passed
    let hi = o.maxBurst + 1; // shortest that lost
    let len = o.maxBurst;
    while (hi - lo > Math.max(1, Math.floor(lo / 50))) {
      if (o.signal?.aborted) throw new AbortedError();
      const r = await burst(len);
      sentAll += r.sent;
      msAll += r.elapsedMs;
      if (r.received >= r.sent) lo = len;
      else hi = len;
      len = Math.floor((lo + hi) / 2);
      if (len <= (o.minBurst ?? 1) - 1) break;
    }
    bursts.push(lo);
  }
  return { bursts, mean: bursts.reduce((a, b) => a + b, 0) / Math.max(1, bursts.length), maxBurst: o.maxBurst, rate: msAll > 0 ? sentAll / (msAll / 1000) : 0 };
}
