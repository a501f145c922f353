/**
 * Work done in slices on the event loop. A SliceClock is a time budget:
 * `due()` says when SLICE_MS have passed since the slice began (and begins
 * the next), `tick()` asks that once every TICKS calls (per item of a
 * loop: performance.now costs about 50 ns), so a caller yields a turn
 * (nextTurn) there and a request waits behind a slice for about that
 * long at most.
 */
export const SLICE_MS = 4;

/** Calls of tick() between two looks at the time. */
const TICKS = 64;

export class SliceClock {
  #from = performance.now();
  #ticks = 0;
  constructor(readonly ms = SLICE_MS) {}
  due(): boolean {
    const now = performance.now();
    if (now - this.#from < this.ms) return false;
    this.#from = now;
    return true;
  }
  /** due(), looked at every TICKS calls: one call per item of a loop. */
  tick(): boolean {
    return ++this.#ticks % TICKS === 0 && this.due();
  }
}

/** One turn of the event loop: I/O callbacks (requests) run, then this resolves. */
export function nextTurn(): Promise<void> {
  return new Promise<void>((resolve) => setImmediate(resolve));
}

/** A generator of slices (it yields between them) run to its end in one go: a start, a check, a test. */
export function runNow<T>(g: Generator<void, T>): T {
  for (let r = g.next(); ; r = g.next()) if (r.done === true) return r.value;
}

/**
 * The same, the event loop running a turn at each of its yields; `between`
 * runs after each turn (it throws to stop: what the slices read is gone).
 * The caller holds what the computation reads still.
 */
export async function runYielding<T>(g: Generator<void, T>, between?: () => void): Promise<T> {
  for (let r = g.next(); ; r = g.next()) {
    if (r.done === true) return r.value;
    await nextTurn();
    between?.();
  }
}
