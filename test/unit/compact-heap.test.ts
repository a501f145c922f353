/**
 * The native addon's compactHeap (V8's LowMemoryNotification), which the
 * daemon's collections after reloads and large batches run
 * (src/daemon/memory.ts): unlike a plain full collection it gives back the
 * pages of a heap whose survivors are spread thin. Counted in bytes of
 * V8's heap, never timed.
 */
import { constants, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { collectBeforeAnswer, compactorFrom, releaseCounts, startCollection } from '../../src/daemon/memory.js';
import { loadAddon } from '../../src/probe/native.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const MB = 1e6;

/** No marking under way and no gc entry still to come from an earlier test: a full collection, then two turns. */
async function quietHeap(): Promise<void> {
  gc();
  for (let i = 0; i < 2; i++) await new Promise((resolve) => setImmediate(resolve));
}

describe('compactHeap', () => {
  it('gives back the heap pages a plain full collection keeps', () => {
    const addon = loadAddon();
    // About 70 MB of small objects, one in 16 kept: every page keeps a few survivors.
    let objects: { i: number; s: string }[] | undefined = Array.from({ length: 1_000_000 }, (_, i) => ({ i, s: `x${i}` }));
    const kept = objects.filter((_, i) => i % 16 === 0);
    objects = undefined;
    gc();
    const plain = process.memoryUsage();
    addon.compactHeap();
    const compacted = process.memoryUsage();
    // Measured: committed 100.4 MB for 12.8 used after the plain collection, 14.2 after compactHeap.
    expect(kept.length).toBe(62_500);
    expect(plain.heapTotal - plain.heapUsed, 'committed and unused after a plain collection').toBeGreaterThan(30 * MB);
    expect(compacted.heapTotal, 'committed after compactHeap').toBeLessThan(plain.heapTotal - 25 * MB);
    expect(compacted.heapUsed).toBeLessThanOrEqual(plain.heapUsed + 1 * MB);
  });

  it('startHeapCollection returns at once and V8 frees the garbage after it, its pause outside the call; again at the next call', async () => {
    const addon = loadAddon();
    gc();
    // Twice: V8 must not be left unable to start marking again (the pressure level set back).
    for (const round of [1, 2]) {
      let objects: { i: number; s: string }[] | undefined = Array.from({ length: 1_000_000 }, (_, i) => ({ i, s: `x${i}` }));
      const withGarbage = process.memoryUsage().heapUsed;
      expect(objects.length).toBe(1_000_000);
      objects = undefined;
      const majors: PerformanceEntry[] = [];
      const observer = new PerformanceObserver((list) => {
        for (const e of list.getEntries()) if ((e.detail as { kind?: number } | undefined)?.kind === constants.NODE_PERFORMANCE_GC_MAJOR) majors.push(e);
      });
      observer.observe({ entryTypes: ['gc'] });
      try {
        addon.startHeapCollection();
        const returned = performance.now();
        // V8 marks in tasks of the event loop and on its helper threads: turns of the loop until the collection ends
        // (bounded by a count of turns; measured: it ends within a few).
        for (let turn = 0; turn < 2000 && majors.length === 0; turn++) await new Promise((r) => setTimeout(r, 5));
        expect(majors.length, `round ${round}: a full collection ran after the call`).toBeGreaterThan(0);
        // A full collection inside the call (a plain gc(), what the daemon ran before) would have begun before it returned.
        expect(majors[0]!.startTime, `round ${round}: its pause began after the call returned`).toBeGreaterThanOrEqual(returned);
      } finally {
        observer.disconnect();
      }
      expect(process.memoryUsage().heapUsed, `round ${round}: the garbage is freed`).toBeLessThan(withGarbage - 40 * MB);
    }
  });

  it("the daemon's forced collection: V8's marking started, and malloc_trim once the full collection has ended", async () => {
    const before = releaseCounts();
    let garbage: { i: number }[] | undefined = Array.from({ length: 200_000 }, (_, i) => ({ i }));
    expect(garbage.length).toBe(200_000);
    garbage = undefined;
    startCollection();
    expect(releaseCounts()).toMatchObject({ incremental: before.incremental + 1, trimmedAfterIncremental: before.trimmedAfterIncremental });
    // Turns of the loop (bounded by count: 1,000 of at least 5 ms, so under the 10-s fallback's time) until the
    // collection's end is seen.
    for (let turn = 0; turn < 1000 && releaseCounts().trimmedAfterIncremental === before.trimmedAfterIncremental; turn++) {
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(releaseCounts().trimmedAfterIncremental).toBe(before.trimmedAfterIncremental + 1);
  });

  it("collectBeforeAnswer: once what it watches is gone, after as many markings as that takes (one begun while it was held keeps it)", async () => {
    const isMajor = (e: PerformanceEntry): boolean => (e as { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR;
    // Held until the first full collection has ended: that marking, begun while it was held, keeps it, as
    // V8's own marking under way during a reload keeps the rule set it replaces.
    await quietHeap();
    let held: object | undefined = { rules: Array.from({ length: 10_000 }, (_, i) => ({ i })) };
    const weak = ((o: object): WeakRef<object> => new WeakRef(o))(held);
    let majors = 0;
    const drop = new PerformanceObserver((list) => {
      if (!list.getEntries().some(isMajor)) return;
      majors++;
      held = undefined;
    });
    drop.observe({ entryTypes: ['gc'] });
    // A later job than the WeakRef's (it keeps its target for the rest of the job that made it).
    await new Promise((resolve) => setImmediate(resolve));
    const before = releaseCounts();
    try {
      expect(await collectBeforeAnswer(weak, 10_000)).toBe(true);
    } finally {
      drop.disconnect();
    }
    expect(held).toBeUndefined();
    expect(majors, 'full collections seen').toBeGreaterThanOrEqual(2);
    expect(releaseCounts().incremental - before.incremental, 'markings started').toBeGreaterThanOrEqual(2);
    expect(releaseCounts().beforeAnswer).toBe(before.beforeAnswer + 1);
    await new Promise((resolve) => setImmediate(resolve));
    expect(weak.deref()).toBeUndefined();
  });

  it('collectBeforeAnswer without anything to watch: one full collection', async () => {
    await quietHeap();
    const before = releaseCounts();
    expect(await collectBeforeAnswer(undefined, 10_000)).toBe(true);
    expect(releaseCounts().incremental).toBe(before.incremental + 1);
  });

  it('an addon without it (built before it was) or that cannot load is a reason the daemon states, never a crash later', () => {
    expect(compactorFrom(() => ({}))).toEqual({ why: expect.stringMatching(/built before it had compactHeap: rebuild it \(make native\)/) });
    expect(compactorFrom(() => ({ compactHeap: () => 0 }))).toEqual({ why: expect.stringMatching(/built before it had startHeapCollection: rebuild it \(make native\)/) });
    expect(
      compactorFrom(() => {
        throw new Error('the timestamping addon is not built');
      }),
    ).toEqual({ why: 'the timestamping addon is not built' });
    let ran = 0;
    let started = 0;
    const c = compactorFrom(() => ({ compactHeap: () => ran++, startHeapCollection: () => started++ }));
    expect('run' in c).toBe(true);
    if ('run' in c) {
      c.run();
      c.start();
    }
    expect([ran, started]).toEqual([1, 1]);
  });
});
