/**
 * The full collection after a reload (releaseMemorySoon) is a pause of
 * 70-150 ms with 131,072 rules: it waits for a quiet spell of the API
 * (QUIET_MS without a request), and is given up after GIVE_UP_MS of
 * requests without one (V8's own collections then give the memory back in
 * small steps). Before, it ran a second after the reload whatever came.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { GIVE_UP_MS, QUIET_MS, releaseCounts, releaseMemorySoon, requestEnded, requestStarted } from '../../src/daemon/memory.js';

describe('releaseMemorySoon', () => {
  // Each test's clock well past the one before (its "at most once every 2 s", its last request).
  let clock = Date.now();
  beforeEach(() => {
    vi.useFakeTimers();
    clock += 10 * GIVE_UP_MS;
    vi.setSystemTime(clock);
  });
  afterEach(() => vi.useRealTimers());

  it('waits while a request is in flight, then for a quiet spell after it', () => {
    const before = releaseCounts().done;
    requestStarted();
    releaseMemorySoon();
    vi.advanceTimersByTime(5000);
    expect(releaseCounts().done, 'a request in flight: not yet').toBe(before);
    requestEnded();
    vi.advanceTimersByTime(QUIET_MS / 2);
    expect(releaseCounts().done, 'quiet for half the spell: not yet').toBe(before);
    vi.advanceTimersByTime(QUIET_MS);
    expect(releaseCounts().done).toBe(before + 1);
  });

  it('runs a second after it is asked when nothing comes', () => {
    vi.advanceTimersByTime(5000);
    const before = releaseCounts().done;
    releaseMemorySoon();
    vi.advanceTimersByTime(1100);
    expect(releaseCounts().done).toBe(before + 1);
  });

  it('gives up when requests never leave a quiet spell', () => {
    vi.advanceTimersByTime(5000);
    const { done, gaveUp } = releaseCounts();
    releaseMemorySoon();
    for (let t = 0; t < GIVE_UP_MS + 5000; t += 200) {
      requestStarted();
      vi.advanceTimersByTime(100);
      requestEnded();
      vi.advanceTimersByTime(100);
    }
    expect(releaseCounts()).toEqual({ done, gaveUp: gaveUp + 1 });
    // And a later ask starts again.
    releaseMemorySoon();
    vi.advanceTimersByTime(1100);
    expect(releaseCounts().done).toBe(done + 1);
  });
});
