/**
 * Work done in slices: a generator that yields between slices of a long
 * computation (a batch's plan, a reload's rebase and diff). runNow runs it
 * to its end in one go (a start, a check, a test); runYielding lets the
 * event loop run between slices, so the daemon answers reads meanwhile.
 * The caller holds what the computation reads still (the serial section).
 */

import { nextTurn } from '../host/slice-clock.js';

export { nextTurn };

/** The generator's result, computed at once. */
export function runNow<T>(g: Generator<void, T>): T {
  for (let r = g.next(); ; r = g.next()) if (r.done === true) return r.value;
}

/** The generator's result, the event loop running at each of its yields. */
export async function runYielding<T>(g: Generator<void, T>): Promise<T> {
  for (let r = g.next(); ; r = g.next()) {
    if (r.done === true) return r.value;
    await nextTurn();
  }
}
