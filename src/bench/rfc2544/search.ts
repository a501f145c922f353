/**
 * RFC 2544 throughput (section 26.1) as pure logic, independent of BPF and
 * namespaces so it can be unit-tested against a simulated device:
 * - RateController: how many frames to send now so that a trial offers
 *   `rate` frames per second, in batches;
 * - runTrial: one trial of a given length at a given rate, with the loss
 *   accounting (sent at the generator vs counted at the sink);
 * - findThroughput: the binary search for the highest rate whose loss is
 *   within the tolerance (default 0: zero loss).
 */

/** Monotonic clock in nanoseconds and a sleep, injectable for tests. */
export interface Clock {
  now(): bigint;
  sleep(ms: number): Promise<void>;
}

export const realClock: Clock = {
  now: () => process.hrtime.bigint(),
  sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
};

/**
 * Paces a trial: frames due at time t = floor(rate × t) − sent, handed out
 * in batches of `batch` when on time. A sender that fell behind (a send has
 * a fixed cost per call) gets what it owes in one larger call, up to
 * `maxBurst`, so fewer calls pay that cost; a trial whose sender still
 * cannot keep up shows it in the achieved rate (sent / duration).
 */
export class RateController {
  readonly rate: number;
  readonly batch: number;
  readonly maxBurst: number;
  #start: bigint | undefined;
  #sent = 0;

  /** `rate` frames per second (Infinity: as fast as the sender goes); batch >= 1; maxBurst >= batch (default 4 × batch). */
  constructor(rate: number, batch: number, maxBurst = 4 * batch) {
    if (!(rate > 0)) throw new RangeError(`rate ${rate}: must be > 0 frames per second`);
    if (!Number.isInteger(batch) || batch < 1) throw new RangeError(`batch ${batch}: must be an integer >= 1`);
    if (!Number.isInteger(maxBurst) || maxBurst < batch) throw new RangeError(`maxBurst ${maxBurst}: must be an integer >= batch`);
    this.rate = rate;
    this.batch = batch;
    this.maxBurst = maxBurst;
  }

  get sent(): number {
    return this.#sent;
  }

  start(now: bigint): void {
    this.#start = now;
    this.#sent = 0;
  }

  /**
   * Frames to send now: 0 until a whole batch is owed (a send has a fixed
   * cost per call, so no small calls), then everything owed, at most
   * maxBurst. With `tail` (the trial ends before another batch is owed),
   * whatever is owed. Call, send them, then record().
   */
  due(now: bigint, tail = false): number {
    if (this.#start === undefined) throw new Error('RateController.due() before start()');
    if (!Number.isFinite(this.rate)) return this.batch;
    const elapsedS = Number(now - this.#start) / 1e9;
    const owed = Math.floor(this.rate * elapsedS) - this.#sent;
    if (owed < (tail ? 1 : this.batch)) return 0;
    return Math.min(this.maxBurst, owed);
  }

  /** Milliseconds until the next full batch is due (0 when one is due now). */
  waitMs(now: bigint): number {
    if (this.#start === undefined || !Number.isFinite(this.rate)) return 0;
    const target = (this.#sent + this.batch) / this.rate; // seconds since start
    const elapsedS = Number(now - this.#start) / 1e9;
    return Math.max(0, (target - elapsedS) * 1000);
  }

  record(n: number): void {
    this.#sent += n;
  }
}

/**
 * A batch size that sends about every `periodMs` at `rate`, within [min,
 * max]. The live-frame generator pays milliseconds of set-up per call, so
 * the defaults are large: batches go out at the generator's full speed,
 * spaced to give the offered rate on average.
 */
export function batchFor(rate: number, periodMs = 20, min = 1024, max = 131_072): number {
  if (!Number.isFinite(rate)) return max;
  return Math.max(min, Math.min(max, Math.round((rate * periodMs) / 1000)));
}

/** What a trial needs from the generator and the sink. */
export interface TrialIo {
  /** Send `n` frames now (synchronously or not); returns how many left the generator. */
  send(n: number): number | Promise<number>;
  /** Frames counted at the sink since the trial began (cumulative). */
  received(): number | Promise<number>;
  /** Called before the trial (reset counters); optional. */
  begin?(): void | Promise<void>;
  /** Wait for frames in flight after the last batch; optional. */
  settle?(): void | Promise<void>;
}

export interface TrialOptions {
  /** Offered rate, frames per second (Infinity: as fast as possible). */
  rate: number;
  durationMs: number;
  batch?: number;
  clock?: Clock;
  /** Stop early (Ctrl-C): checked between batches. */
  signal?: AbortSignal;
  /** Called about every 100 ms with the fraction of the trial done. */
  progress?: (fraction: number) => void;
}

export interface TrialResult {
  /** Rate asked for. */
  offeredRate: number;
  /** Rate the generator reached: sent / elapsed. */
  achievedRate: number;
  sent: number;
  received: number;
  /** sent − received (negative: the sink saw more than was sent: an error). */
  lost: number;
  /** lost / sent, 0 when nothing was sent. */
  lossRatio: number;
  elapsedMs: number;
}

/** Loss of a trial: frames sent by the generator that the sink did not count. */
export function accountLoss(sent: number, received: number): { lost: number; lossRatio: number } {
  if (received > sent) {
    throw new Error(
      `the sink counted ${received} frames but the generator sent ${sent}: stray traffic in the lab or a counter not reset`,
    );
  }
  const lost = sent - received;
  return { lost, lossRatio: sent === 0 ? 0 : lost / sent };
}

/** A trial passes when its loss ratio is within the tolerance (0: zero loss). */
export function trialPasses(r: Pick<TrialResult, 'lossRatio' | 'sent'>, lossTolerance: number): boolean {
  return r.sent > 0 && r.lossRatio <= lossTolerance;
}

export class AbortedError extends Error {
  override readonly name = 'AbortedError';
  constructor() {
    super('interrupted');
  }
}

/** One trial: paced batches for `durationMs`, then settle and count. */
export async function runTrial(io: TrialIo, o: TrialOptions): Promise<TrialResult> {
  const clock = o.clock ?? realClock;
  const batch = o.batch ?? batchFor(o.rate);
  const rc = new RateController(o.rate, batch);
  await io.begin?.();
  const durationNs = BigInt(Math.round(o.durationMs * 1e6));
  const t0 = clock.now();
  rc.start(t0);
  let lastProgress = t0;
  let yieldAt = t0;
  for (;;) {
    if (o.signal?.aborted) throw new AbortedError();
    const now = clock.now();
    if (now - t0 >= durationNs) break;
    if (o.progress && now - lastProgress >= 100_000_000n) {
      lastProgress = now;
      o.progress(Number(now - t0) / Number(durationNs));
    }
    // In the trial's last stretch, shorter than a batch takes to accrue, send what is owed.
    const tail = Number(durationNs - (now - t0)) / 1e9 < batch / o.rate;
    const n = rc.due(now, tail);
    if (n > 0) {
      rc.record(await io.send(n));
      // Let signals and timers run now and then even at full speed.
      if (now - yieldAt > 20_000_000n) {
        yieldAt = now;
        await clock.sleep(0);
      }
      continue;
    }
    const left = Number(durationNs - (now - t0)) / 1e6;
    await clock.sleep(Math.min(tail ? 1 : rc.waitMs(now), left, 10));
  }
  const elapsedNs = clock.now() - t0;
  await io.settle?.();
  const sent = rc.sent;
  const received = await io.received();
  const { lost, lossRatio } = accountLoss(sent, received);
  const elapsedMs = Number(elapsedNs) / 1e6;
  return {
    offeredRate: o.rate,
    achievedRate: elapsedMs > 0 ? sent / (elapsedMs / 1000) : 0,
    sent,
    received,
    lost,
    lossRatio,
    elapsedMs,
  };
}

export interface SearchOptions {
  /** Rate of the first trial, frames per second; Infinity: as fast as the generator goes. */
  maxRate: number;
  /** Below this rate the search gives up (throughput 0); default 1000 fps. */
  minRate?: number;
  /** Stop when (hi − lo) / hi is at most this; default 0.01. */
  resolution?: number;
  /** Loss ratio still counted as a pass; default 0 (zero loss). */
  lossTolerance?: number;
  /** At most this many trials in the bisection; default 20. */
  maxTrials?: number;
  /**
   * Trials that repeat the rate found, after the bisection: the rate is
   * reported only if these pass too. Default 2 (one pass is one sample: a
   * device that loses in some trials at every rate would otherwise report
   * its luckiest one). 0: no confirmation.
   */
  confirm?: number;
  /**
   * At most this many trials for the confirmation and its step-downs
   * (a confirmation that loses: the next lower rate that passed, or a
   * fresh rate 2 × resolution below the one that lost); default 2 × confirm.
   */
  maxConfirmTrials?: number;
  /** Trial at `rate`; returns its result. */
  trial: (rate: number) => Promise<TrialResult>;
  onTrial?: (r: TrialResult, pass: boolean, lo: number, hi: number, phase: TrialPhase) => void;
  /**
   * Bisect on the rates asked for, not on those reached (the paced
   * generator: a trial whose generator fell short of its rate must not
   * stall the search at the rate it reached). The first trial, flat out,
   * still bounds the search by what it reached. Default false.
   */
  onOffered?: boolean;
}

/** A trial of the bisection, or one that repeats a rate found (confirmation, step-down). */
export type TrialPhase = 'search' | 'confirm';

export interface SearchResult {
  /**
   * Zero-loss throughput, frames per second: the lowest rate reached by the
   * trials at the confirmed rate (all passed), with no trial of the search
   * at or below it losing; 0 if no rate held.
   */
  throughput: number;
  /** The trial the throughput comes from (the confirmed rate's slowest). */
  best?: TrialResult;
  trials: { result: TrialResult; pass: boolean; phase: TrialPhase }[];
  /** The first trial, at maxRate, passed: the generator, not the device, is the limit. */
  generatorLimited: boolean;
  /** The rate asked for in the trials the throughput comes from (undefined: none held, or generator-limited). */
  offered?: number;
  /** The throughput passed its confirmation trials (false: none held; generator-limited searches are not confirmed). */
  confirmed: boolean;
}

/**
 * The rate `offered` as a zero-loss rate after `trials`: every trial asked
 * for it passed, and no trial that lost reached a rate at or below the
 * lowest those reached. Returns that lowest rate, or undefined.
 */
export function heldRate(trials: readonly { result: TrialResult; pass: boolean }[], offered: number): number | undefined {
  const at = trials.filter((t) => t.result.offeredRate === offered);
  if (at.length === 0 || at.some((t) => !t.pass)) return undefined;
  const r = Math.min(...at.map((t) => t.result.achievedRate));
  return trials.some((t) => !t.pass && t.result.achievedRate <= r) ? undefined : r;
}

/**
 * RFC 2544 §26.1 binary search on the rates the generator really reached
 * (achieved, not asked): a trial passes when its loss ratio is within the
 * tolerance. The first trial runs at maxRate; if it passes, the device took
 * all the generator could offer (generatorLimited). Otherwise bisect between
 * lo (highest pass, initially 0) and hi (lowest fail) until they are within
 * `resolution` of each other.
 *
 * Then confirm: the highest rate that held (heldRate: no trial at or below
 * it lost) is tried `confirm` more times; all must pass. A confirmation
 * that loses steps down (the next lower rate that held, or a fresh rate
 * 2 × resolution below the one that lost, needing 1 + confirm passes),
 * within maxConfirmTrials. No rate confirmed: throughput 0.
 */
export async function findThroughput(o: SearchOptions): Promise<SearchResult> {
  const resolution = o.resolution ?? 0.01;
  const tol = o.lossTolerance ?? 0;
  const maxTrials = o.maxTrials ?? 20;
  const minRate = o.minRate ?? 1000;
  const confirm = o.confirm ?? 2;
  let budget = o.maxConfirmTrials ?? 2 * confirm;
  if (!(o.maxRate > 0)) throw new RangeError(`maxRate ${o.maxRate}: must be > 0`);
  const trials: SearchResult['trials'] = [];
  let lo = 0;
  let hi = Infinity;
  let rate = o.maxRate;
  const run = async (at: number, phase: TrialPhase): Promise<{ r: TrialResult; pass: boolean }> => {
    const r = await o.trial(at);
    const pass = trialPasses(r, tol);
    trials.push({ result: r, pass, phase });
    return { r, pass };
  };
  while (trials.length < maxTrials) {
    const { r, pass } = await run(rate, 'search');
    const at = o.onOffered === true && Number.isFinite(rate) ? rate : r.achievedRate;
    if (pass) lo = Math.max(lo, at);
    else hi = Math.max(lo, Math.min(hi, at, rate));
    o.onTrial?.(r, pass, lo, hi, 'search');
    if (pass && trials.length === 1) {
      return { throughput: r.achievedRate, best: r, trials, generatorLimited: true, confirmed: false };
    }
    if (hi <= minRate) break;
    if (lo > 0 && (hi - lo) / hi <= resolution) break;
    rate = (lo + hi) / 2;
  }
  let lostAt: number | undefined;
  for (;;) {
    const held = [...new Set(trials.filter((t) => t.pass && Number.isFinite(t.result.offeredRate)).map((t) => t.result.offeredRate))]
      .filter((q) => heldRate(trials, q) !== undefined)
      .sort((a, b) => b - a);
    let q = held[0];
    const fresh = lostAt === undefined ? undefined : lostAt * (1 - 2 * resolution);
    const untried = fresh !== undefined && fresh >= minRate && !trials.some((t) => t.result.offeredRate === fresh);
    if (untried && (q === undefined || fresh > q)) q = fresh;
    if (q === undefined) break;
    const need = 1 + confirm - trials.filter((t) => t.result.offeredRate === q).length;
    if (need <= 0) {
      const best = trials.filter((t) => t.result.offeredRate === q).reduce((a, t) => (t.result.achievedRate < a.result.achievedRate ? t : a));
      return { throughput: best.result.achievedRate, best: best.result, trials, generatorLimited: false, offered: q, confirmed: true };
    }
    if (need > budget) break;
    budget--;
    const { r, pass } = await run(q, 'confirm');
    o.onTrial?.(r, pass, lo, hi, 'confirm');
    if (!pass) lostAt = q;
  }
  return { throughput: 0, trials, generatorLimited: false, confirmed: false };
}
