/**
 * A time budget for work done in slices on the event loop: `due()` says
 * when SLICE_MS have passed since the slice began (and begins the next),
 * so a caller yields a turn (setImmediate) there and a request waits
 * behind a slice for about that long at most. Checked every few hundred
 * items, not per item (performance.now costs about 50 ns).
 */
export const SLICE_MS = 4;

export class SliceClock {
  #from = performance.now();
  constructor(readonly ms = SLICE_MS) {}
  due(): boolean {
    const now = performance.now();
    if (now - this.#from < this.ms) return false;
    this.#from = now;
    return true;
  }
}
