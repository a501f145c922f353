/**
 * The summary over repeated relocation runs: the median of each measure and
 * a distribution-free confidence interval for it from order statistics
 * (docs/lab.md, "Repeats"): with n runs sorted, the interval between the
 * k-th smallest and the k-th largest covers the median with probability
 * 1 - 2 P(Bin(n, 1/2) <= k - 1), whatever the distribution. We take the
 * largest k whose coverage is at least the level asked for; below 6 runs no
 * k reaches 95 % (5 runs: min..max covers 93.75 %), and then the interval is
 * min..max with the coverage it has, said in `coverage`.
 */

export interface MedianCi {
  /** Runs with a value (a run where the measure does not exist, e.g. nothing reached B, is left out: `missing`). */
  readonly n: number;
  readonly missing: number;
  readonly median: number | null;
  readonly lo: number | null;
  readonly hi: number | null;
  /** The interval's actual coverage probability (0..1): >= level, or less when n is too small (then lo..hi = min..max). */
  readonly coverage: number | null;
}

/** P(Bin(n, 1/2) <= k), exactly. */
export function binomHalfCdf(n: number, k: number): number {
  if (k < 0) return 0;
  let c = 1; // C(n, 0)
  let sum = 0;
  for (let i = 0; i <= Math.min(k, n); i++) {
    sum += c;
    c = (c * (n - i)) / (i + 1);
  }
  return sum / 2 ** n;
}

/** Median and its order-statistic confidence interval (level 0..1, default 0.95) of the non-null values. */
export function medianCi(values: readonly (number | null)[], level = 0.95): MedianCi {
  const xs = values.filter((x): x is number => x !== null && Number.isFinite(x)).sort((a, b) => a - b);
  const n = xs.length;
  const missing = values.length - n;
  if (n === 0) return { n, missing, median: null, lo: null, hi: null, coverage: null };
  const median = n % 2 === 1 ? xs[(n - 1) / 2]! : (xs[n / 2 - 1]! + xs[n / 2]!) / 2;
  // Largest k (1-based rank from each end) with coverage >= level; k = 1 (min..max) when none reaches it.
  let k = 1;
  for (let j = Math.floor((n + 1) / 2); j >= 1; j--) {
    if (1 - 2 * binomHalfCdf(n, j - 1) >= level) {
      k = j;
      break;
    }
  }
  const coverage = 1 - 2 * binomHalfCdf(n, k - 1);
  return { n, missing, median, lo: xs[k - 1]!, hi: xs[n - k]!, coverage };
}

/** `12.3 ms [10.1, 15.0] (93.8 %, 5 runs)`: a median and its interval, for a table. */
export function fmtCi(c: MedianCi, unit = '', digits = 1): string {
  if (c.median === null) return `- (${c.missing} of ${c.missing} runs without a value)`;
  const f = (x: number): string => x.toFixed(digits);
  const u = unit === '' ? '' : ` ${unit}`;
  return `${f(c.median)}${u} [${f(c.lo!)}, ${f(c.hi!)}] (${(c.coverage! * 100).toFixed(1)} %, ${c.n} run${c.n === 1 ? '' : 's'}${c.missing > 0 ? `, ${c.missing} without` : ''})`;
}
