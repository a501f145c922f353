/**
 * The grace clock's numbers past 2^31 (src/dataplane/grace.ts). They were
 * 32-bit: the 2^31st request stored -2^31, the thread completed that, and
 * every wait for a number above it (request() returned 2^31) waited for
 * ever, 1 s at a time: all table writes of the daemon stopped. At a thousand
 * deletes or replaces a second that is 25 days. Here a clock of the test's
 * own numbers its grace periods from just below 2^31 and 2^32, each made
 * 150 ms longer so that a request is not done before it is waited for.
 */
import { describe, expect, it } from 'vitest';
import { GraceClock } from '../../src/dataplane/grace.js';

describe('grace clock numbers past 32 bits', () => {
  it.each([2 ** 31 - 3, 2 ** 32 - 3])('from %i: each request is waited for, then done, in order (wait and waitSync)', async (from) => {
    const clock = new GraceClock();
    clock.waitSync(clock.request()); // the thread started (a worker loading koffi): not part of the waits timed below
    clock.testNumberFrom(from);
    clock.testExtraMs = 150;
    const runs = clock.runs;
    for (let i = 1; i <= 6; i++) {
      const n = clock.request();
      expect(n).toBe(from + i);
      expect(clock.done(n), `request ${n} done before its grace period`).toBe(false);
      // A wait that cannot end (the code before) holds the test until its timeout.
      if (i % 2 === 0) clock.waitSync(n);
      else await clock.wait(n);
      expect(clock.done(n)).toBe(true);
      expect(clock.completed).toBeGreaterThanOrEqual(n);
    }
    expect(clock.runs - runs).toBeGreaterThanOrEqual(6);
    expect(clock.loaded, 'the thread ran them (1: koffi loaded), not a fallback on this one').toBe(1);
    clock.testExtraMs = 0;
  }, 30_000);
});
