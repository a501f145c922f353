/**
 * malloc_trim on libuv's pool (trimMallocOffLoop, src/daemon/memory.ts):
 * one at a time, one asked meanwhile runs after it, and a call that cannot
 * be dispatched (no libc, a koffi error) neither throws into the caller (a
 * gc PerformanceObserver) nor leaves the next asks waiting for a trim that
 * never ends (found in review, session 47: its flag stayed set).
 */
import { describe, expect, it, vi } from 'vitest';

const calls: ((err: unknown, res: number) => void)[] = [];
let failNext = 0;
vi.mock('koffi', () => {
  const trim = Object.assign(() => 1, {
    async(_pad: number, done: (err: unknown, res: number) => void): void {
      if (failNext > 0) {
        failNext--;
        throw new Error('no async call');
      }
      calls.push(done);
    },
  });
  return { default: { load: () => ({ func: () => trim }) } };
});

const { releaseCounts, trimMallocOffLoop } = await import('../../src/daemon/memory.js');

describe('malloc_trim off the event loop', () => {
  it('one at a time; one asked meanwhile after it; a call that cannot be made is not fatal and not stuck', () => {
    const before = releaseCounts().trimmedOffLoop;
    trimMallocOffLoop();
    trimMallocOffLoop(); // under way: asked again
    expect(calls).toHaveLength(1);
    calls.shift()!(null, 1);
    expect(calls).toHaveLength(1); // the one asked meanwhile
    calls.shift()!(null, 1);
    expect(releaseCounts().trimmedOffLoop).toBe(before + 2);

    failNext = 1;
    expect(() => trimMallocOffLoop()).not.toThrow();
    expect(calls).toHaveLength(0);
    trimMallocOffLoop(); // not waiting for the one that failed
    expect(calls).toHaveLength(1);
    calls.shift()!(new Error('trim failed'), 0);
    expect(releaseCounts().trimmedOffLoop).toBe(before + 2); // a failed trim is not counted
  });
});
