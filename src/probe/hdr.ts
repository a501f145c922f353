/**
 * A small HDR (high dynamic range) histogram of non-negative integers, in
 * the log-linear layout of HdrHistogram: values below 2^k are counted
 * exactly; above, each power-of-two range is cut into 2^(k-1) equal buckets,
 * so a bucket is never wider than 1/2^(k-1) of its lower bound. k follows
 * from the significant decimal digits asked for (3 digits: k = 11, buckets
 * at most 1/1024 = 0.098 % wide). Memory grows with the largest value's
 * power of two, not with the count: a probe run of 10^8 samples from 1 ns
 * to 1 s takes about 21,000 buckets.
 *
 * Percentiles use the nearest-rank definition of stats.ts over the bucketed
 * values; the answer is the highest value of the bucket that holds that rank
 * (never above the largest value recorded), so it is at most one bucket
 * width above the exact nearest-rank sample.
 */
import { nearestRank } from './stats.js';

export interface HdrBucket {
  /** Lowest and highest value counted here (inclusive). */
  readonly from: number;
  readonly to: number;
  readonly count: number;
}

export class HdrHistogram {
  /** log2 of the exactly counted range; half of it is the buckets per power of two above. */
  readonly subBucketBits: number;
  readonly significantDigits: number;
  readonly #half: number;
  readonly #full: number;
  #counts: number[] = [];
  #total = 0;
  #min = Infinity;
  #max = -Infinity;
  #sum = 0;

  constructor(significantDigits = 3) {
    if (!Number.isInteger(significantDigits) || significantDigits < 1 || significantDigits > 5) {
      throw new RangeError(`significantDigits must be 1 to 5, got ${significantDigits}`);
    }
    this.significantDigits = significantDigits;
    // Smallest half = 2^(k-1) with 1/half <= 10^-digits.
    let half = 1;
    while (half < 10 ** significantDigits) half *= 2;
    this.#half = half;
    this.#full = half * 2;
    this.subBucketBits = Math.log2(this.#full);
  }

  /** Bucket index of a value. */
  indexOf(v: number): number {
    if (v < this.#full) return v;
    const msb = Math.floor(Math.log2(v));
    // Math.log2 can be off by one just below a power of two: correct it.
    const m = 2 ** msb > v ? msb - 1 : 2 ** (msb + 1) <= v ? msb + 1 : msb;
    const shift = m - (this.subBucketBits - 1);
    const top = Math.floor(v / 2 ** shift);
    return this.#full + (shift - 1) * this.#half + (top - this.#half);
  }

  /** The values bucket `i` counts. */
  bucketRange(i: number): { from: number; to: number } {
    if (i < this.#full) return { from: i, to: i };
    const shift = Math.floor((i - this.#full) / this.#half) + 1;
    const top = ((i - this.#full) % this.#half) + this.#half;
    const from = top * 2 ** shift;
    return { from, to: from + 2 ** shift - 1 };
  }

  /** Count `v` (rounded to an integer ns) `count` times. */
  record(v: number, count = 1): void {
    if (!Number.isFinite(v) || v < 0) {
      throw new RangeError(`an HDR histogram holds values >= 0, got ${v} (a negative latency means the clocks disagree)`);
    }
    if (!Number.isInteger(count) || count < 1) throw new RangeError(`count must be a positive integer, got ${count}`);
    const x = Math.round(v);
    if (!Number.isSafeInteger(x)) throw new RangeError(`value ${v} is too large`);
    const i = this.indexOf(x);
    while (this.#counts.length <= i) this.#counts.push(0);
    this.#counts[i]! += count;
    this.#total += count;
    this.#sum += x * count;
    if (x < this.#min) this.#min = x;
    if (x > this.#max) this.#max = x;
  }

  get count(): number {
    return this.#total;
  }
  /** Exact, not bucketed; null when empty. */
  get min(): number | null {
    return this.#total === 0 ? null : this.#min;
  }
  get max(): number | null {
    return this.#total === 0 ? null : this.#max;
  }
  /** Exact mean of the recorded (rounded) values. */
  get mean(): number | null {
    return this.#total === 0 ? null : this.#sum / this.#total;
  }

  /** Nearest-rank percentile, to the bucket's highest value (capped at max). */
  valueAtPercentile(p: number): number {
    if (this.#total === 0) throw new RangeError('percentile of an empty histogram');
    const rank = Math.max(nearestRank(p, this.#total), 1);
    let seen = 0;
    for (let i = 0; i < this.#counts.length; i++) {
      seen += this.#counts[i]!;
      if (seen >= rank) return Math.min(this.bucketRange(i).to, this.#max);
    }
    return this.#max;
  }

  /** The buckets that hold something, ascending. */
  buckets(): HdrBucket[] {
    const out: HdrBucket[] = [];
    this.#counts.forEach((count, i) => {
      if (count > 0) out.push({ ...this.bucketRange(i), count });
    });
    return out;
  }

  /** Add every count of `other` (same significant digits). */
  add(other: HdrHistogram): void {
    if (other.significantDigits !== this.significantDigits) {
      throw new RangeError(`cannot add a ${other.significantDigits}-digit histogram to a ${this.significantDigits}-digit one`);
    }
    other.#counts.forEach((c, i) => {
      if (c === 0) return;
      while (this.#counts.length <= i) this.#counts.push(0);
      this.#counts[i]! += c;
    });
    this.#total += other.#total;
    this.#sum += other.#sum;
    this.#min = Math.min(this.#min, other.#min);
    this.#max = Math.max(this.#max, other.#max);
  }

  /** Plain data for JSON reports. */
  toJSON(): { significantDigits: number; count: number; min: number | null; max: number | null; mean: number | null; buckets: HdrBucket[] } {
    return {
      significantDigits: this.significantDigits,
      count: this.count,
      min: this.min,
      max: this.max,
      mean: this.mean,
      buckets: this.buckets(),
    };
  }
}
