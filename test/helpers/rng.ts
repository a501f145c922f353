/** A seeded xorshift32: the same uint32 sequence on every run, for randomised tests that must be repeatable. */
export function xorshift32(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x;
  };
}

/** A seeded linear congruential generator: `below(n)` gives 0..n-1, the same sequence on every run. */
export function lcgBelow(seed: number): (n: number) => number {
  let x = seed;
  return (n) => {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    return x % n;
  };
}
