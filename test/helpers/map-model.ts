/**
 * Model-based checks of a Map-like index (ShardedMap, KeyIndex) against a
 * Map: random sets, deletes, look-ups and clears, each answer and the size
 * compared at every step, the whole contents every `every` steps.
 */
import { expect } from 'vitest';

export interface MapLike {
  readonly size: number;
  set(key: string, value: number): unknown;
  delete(key: string): boolean;
  get(key: string): number | undefined;
  has(key: string): boolean;
  clear(): void;
}

export interface ModelRun<M> {
  readonly steps: number;
  /** Seeded 0..n-1. */
  readonly rnd: (n: number) => number;
  readonly key: () => string;
  readonly value?: (step: number) => number;
  /** Of 100: sets below 45, deletes below this, look-ups below 99, clears (1 in 20) above. */
  readonly deletesBelow: number;
  readonly every: number;
  readonly check: (got: M, want: Map<string, number>) => void;
}

export function runMapModel<M extends MapLike>(got: M, o: ModelRun<M>): void {
  const want = new Map<string, number>();
  for (let step = 0; step < o.steps; step++) {
    const key = o.key();
    const op = o.rnd(100);
    if (op < 45) {
      const v = o.value?.(step) ?? step;
      expect(got.set(key, v)).toBe(got);
      want.set(key, v);
    } else if (op < o.deletesBelow) expect(got.delete(key)).toBe(want.delete(key));
    else if (op < 99) {
      expect(got.get(key)).toBe(want.get(key));
      expect(got.has(key)).toBe(want.has(key));
    } else if (o.rnd(20) === 0) {
      got.clear();
      want.clear();
    }
    expect(got.size).toBe(want.size);
    if (step % o.every === 0) o.check(got, want);
  }
  o.check(got, want);
}
