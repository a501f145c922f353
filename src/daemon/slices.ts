/**
 * Work done in slices: a generator that yields between slices of a long
 * computation (a batch's plan, a reload's rebase and diff). runNow runs it
 * to its end in one go (a start, a check, a test); runYielding lets the
 * event loop run between slices, so the daemon answers reads meanwhile.
 * The caller holds what the computation reads still (the serial section).
 */

export { nextTurn, runNow, runYielding } from '../host/slice-clock.js';
