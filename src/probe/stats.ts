/**
 * Latency statistics of a probe run: pure functions over numbers (ns).
 *
 * Definitions, fixed here so every report means the same thing:
 * - **Percentile**: nearest rank. The P-th percentile (0 < P <= 100) of n
 *   values sorted ascending is the value of 1-based rank ceil(P/100 * n);
 *   P = 0 is the minimum. The result is always one of the samples (no
 *   interpolation), so p100 is the maximum and, with 20 samples, p95 is the
 *   19th. The rank is computed in integers (P to 1e-4 %): in floating point
 *   99.9 / 100 * 1000 is 999.0000000000001, whose ceiling would be rank 1000.
 * - **Mean** and **stddev**: arithmetic mean; standard deviation with the
 *   n - 1 (sample) denominator, 0 for a single value (Welford's update, stable
 *   for large ns values).
 * - **Jitter** = p95 - p5 (the P4-timestamp latency studies' definition).
 * - **IPDV** (RFC 3393): for each pair of consecutive sequence numbers
 *   (s - 1, s) that both arrived, D(s) - D(s-1), signed. Pairs with a lost
 *   packet are skipped (RFC 3393 leaves them undefined), duplicates use the
 *   first copy. Reported as the signed min/mean/max and the distribution of
 *   |IPDV| (mean, percentiles): the signed mean tends to 0 by construction,
 *   the magnitude is what a listener feels.
 * - **Loss, duplicates, reordering** from sequence numbers 0..sent-1 in
 *   arrival order: a repeat of a number already seen is a duplicate (and is
 *   otherwise ignored); a number outside 0..sent-1 is stray; a number below
 *   NextExp (one more than the highest seen so far) is reordered, RFC 4737
 *   section 4.1.1; lost = sent - distinct numbers received.
 */

/** The percentiles every report carries, in percent. */
export const REPORT_PERCENTILES = [5, 50, 95, 99, 99.9, 99.99] as const;
export type ReportPercentile = (typeof REPORT_PERCENTILES)[number];

const RANK_SCALE = 1_000_000; // P in units of 1e-4 %

/** 1-based nearest rank of percentile `p` (0..100) among `n` values; 0 for p = 0. */
export function nearestRank(p: number, n: number): number {
  if (!(p >= 0 && p <= 100)) throw new RangeError(`percentile must be within 0..100, got ${p}`);
  if (!Number.isInteger(n) || n < 0) throw new RangeError(`count must be a non-negative integer, got ${n}`);
  const q = Math.round(p * 10_000); // P * 1e4, exact for up to 4 decimals
  const prod = q * n;
  if (!Number.isSafeInteger(prod)) throw new RangeError(`too many values (${n}) for an exact rank`);
  return Math.floor((prod + RANK_SCALE - 1) / RANK_SCALE);
}

/** Nearest-rank percentile of values already sorted ascending. */
export function percentileSorted(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) throw new RangeError('percentile of no values');
  const rank = nearestRank(p, sorted.length);
  return sorted[Math.max(rank, 1) - 1]!;
}

export interface Summary {
  readonly count: number;
  readonly min: number;
  readonly mean: number;
  readonly max: number;
  /** Sample standard deviation (n - 1). */
  readonly stddev: number;
  /** Nearest-rank percentiles, keyed 'p5', 'p50', 'p95', 'p99', 'p99.9', 'p99.99'. */
  readonly percentiles: Readonly<Record<`p${ReportPercentile}`, number>>;
  /** p95 - p5. */
  readonly jitter: number;
}

function checkFinite(values: readonly number[], what: string): void {
  for (let i = 0; i < values.length; i++) {
    if (!Number.isFinite(values[i])) throw new RangeError(`${what}[${i}] is ${values[i]}, not a finite number`);
  }
}

/** min, mean, max, stddev, the report percentiles and jitter. Null for no values. */
export function summarize(values: readonly number[]): Summary | null {
  if (values.length === 0) return null;
  checkFinite(values, 'values');
  const sorted = [...values].sort((a, b) => a - b);
  let mean = 0;
  let m2 = 0;
  for (let i = 0; i < values.length; i++) {
    const x = values[i]!;
    const d = x - mean;
    mean += d / (i + 1);
    m2 += d * (x - mean);
  }
  const n = values.length;
  const percentiles = Object.fromEntries(REPORT_PERCENTILES.map((p) => [`p${p}`, percentileSorted(sorted, p)])) as Record<
    `p${ReportPercentile}`,
    number
  >;
  return {
    count: n,
    min: sorted[0]!,
    mean,
    max: sorted[n - 1]!,
    stddev: n > 1 ? Math.sqrt(m2 / (n - 1)) : 0,
    percentiles,
    jitter: percentiles.p95 - percentiles.p5,
  };
}

/** One received probe: its sequence number and its one-way delay (ns). */
export interface Arrival {
  readonly seq: number;
  readonly delayNs: number;
}

export interface Ipdv {
  /** Pairs of consecutive sequence numbers that both arrived. */
  readonly pairs: number;
  /** Signed D(s) - D(s-1), in sequence order. */
  readonly values: readonly number[];
  readonly min: number | null;
  readonly mean: number | null;
  readonly max: number | null;
  /** Distribution of |IPDV|: mean, percentiles, jitter of the magnitude. */
  readonly abs: Summary | null;
}

/** RFC 3393 IPDV over consecutive sequence numbers (see the module comment). */
export function ipdv(arrivals: readonly Arrival[]): Ipdv {
  const delay = new Map<number, number>();
  for (const a of arrivals) if (!delay.has(a.seq)) delay.set(a.seq, a.delayNs);
  const seqs = [...delay.keys()].sort((a, b) => a - b);
  const values: number[] = [];
  for (const s of seqs) {
    const prev = delay.get(s - 1);
    if (prev !== undefined) values.push(delay.get(s)! - prev);
  }
  checkFinite(values, 'ipdv');
  if (values.length === 0) return { pairs: 0, values, min: null, mean: null, max: null, abs: null };
  let sum = 0;
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) {
    sum += v;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return { pairs: values.length, values, min, mean: sum / values.length, max, abs: summarize(values.map(Math.abs)) };
}

export interface SequenceAccounting {
  readonly sent: number;
  /** Every arrival, duplicates and strays included. */
  readonly arrivals: number;
  /** Distinct sequence numbers within 0..sent-1 that arrived. */
  readonly received: number;
  readonly lost: number;
  readonly lossRatio: number;
  /** Arrivals repeating a number already seen. */
  readonly duplicates: number;
  /** Arrivals below NextExp (RFC 4737 4.1.1), duplicates not counted. */
  readonly reordered: number;
  /** Arrivals numbered outside 0..sent-1 (not ours, or corrupt). */
  readonly stray: number;
  /** The lost numbers, at most the first 1,000. */
  readonly lostSequences: readonly number[];
}

/** Loss, duplicate and reorder counts from sequence numbers in arrival order (0..sent-1 were sent). */
export function accountSequences(sent: number, arrivalOrder: readonly number[]): SequenceAccounting {
  if (!Number.isInteger(sent) || sent < 0) throw new RangeError(`sent must be a non-negative integer, got ${sent}`);
  const seen = new Uint8Array(sent);
  let received = 0;
  let duplicates = 0;
  let reordered = 0;
  let stray = 0;
  let nextExp = 0;
  for (const s of arrivalOrder) {
    if (!Number.isInteger(s) || s < 0 || s >= sent) {
      stray++;
      continue;
    }
    if (seen[s] === 1) {
      duplicates++;
      continue;
    }
    seen[s] = 1;
    received++;
    if (s < nextExp) reordered++;
    else nextExp = s + 1;
  }
  const lostSequences: number[] = [];
  for (let s = 0; s < sent && lostSequences.length < 1000; s++) if (seen[s] === 0) lostSequences.push(s);
  const lost = sent - received;
  return {
    sent,
    arrivals: arrivalOrder.length,
    received,
    lost,
    lossRatio: sent === 0 ? 0 : lost / sent,
    duplicates,
    reordered,
    stray,
    lostSequences,
  };
}
