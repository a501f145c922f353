/**
 * releaseMemorySoon's collection must not keep alive what its caller's
 * callback can reach. A closure holds its whole scope: the reload's
 * "collection ran without a quiet second" callback held the reload's scope,
 * and with it the replaced rule set, through the very collection that was
 * to give it back (41 MB of 131,072 rules left on the heap after each
 * reload until V8's next full collection, often never: docs/daemon.md
 * "Memory"). Its own file: the module's "at most once every 2 s" and last
 * request time start fresh, and the timers are real (a WeakRef keeps its
 * target for the rest of the job that made or read it, so the check has to
 * come in a later turn).
 */
import { describe, expect, it } from 'vitest';
import { releaseCounts, releaseMemorySoon } from '../../src/daemon/memory.js';

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** A scope holding `big`, with the callback handed to releaseMemorySoon made in it. */
function askWithScope(): WeakRef<object> {
  const big = { rules: Array.from({ length: 10_000 }, (_, i) => ({ i })) };
  const weak = new WeakRef(big);
  // Another closure of this scope uses big: V8 puts it in the scope's context, which every closure made here holds.
  const keep = (): object => big;
  void keep;
  releaseMemorySoon(() => undefined);
  return weak;
}

describe('releaseMemorySoon', () => {
  it("collects what only its caller's callback scope reaches (a reload's replaced rule set)", async () => {
    const before = releaseCounts();
    const weak = askWithScope();
    const t0 = Date.now();
    while (releaseCounts().quiet === before.quiet && releaseCounts().forced === before.forced) {
      if (Date.now() - t0 > 10_000) throw new Error('the collection did not run in 10 s');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await nextTurn();
    expect(weak.deref(), 'still on the heap after the collection').toBeUndefined();
  });
});
