/**
 * What the main thread and the thread of src/config/list-ahead.ts share:
 * slots of an Int32Array over a SharedArrayBuffer, and how the thread
 * finds the list it reads.
 */

/** The thread's state (slot STATE). */
export const STATE = 0;
/** Where the list it reads begins (its `[`), once READING. */
export const AT = 1;
/** How many items of it the thread has read (a lower bound: updated every few thousand). */
export const COUNT = 2;
/** Counted up as the thread works (its read, its index): one that stops moving is a thread gone. */
export const BEAT = 3;
export const SLOTS = 4;

/** Loading, or looking for the list: the main thread may still take it back (CANCELLED) and read the list itself. */
export const LOCATING = 0;
/** Reading the list at AT: the main thread waits for it there. */
export const READING = 1;
/** The list is on the port; its index follows (INDEXED, NO_INDEX). */
export const ANSWERED = 2;
/** No answer: not found, given up, or failed. */
export const NONE = 3;
/** The main thread reached the list before the thread began it. */
export const CANCELLED = 4;
/** After ANSWERED: the list's index is on the port too. */
export const INDEXED = 5;
/** After ANSWERED: no index will come. */
export const NO_INDEX = 6;

function space(c: number | undefined): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/**
 * The `[` after the first `"key"` that is followed by a colon and a list,
 * or -1. A guess, not a parse: the main thread takes the answer only for
 * the list its own parse finds at the same index.
 */
export function locateList(b: Uint8Array, key: string): number {
  const buf = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  const needle = Buffer.from(JSON.stringify(key), 'latin1');
  for (let at = buf.indexOf(needle); at >= 0; at = buf.indexOf(needle, at + 1)) {
    let i = at + needle.length;
    while (space(buf[i])) i++;
    if (buf[i] !== 0x3a /* : */) continue;
    i++;
    while (space(buf[i])) i++;
    if (buf[i] === 0x5b /* [ */) return i;
  }
  return -1;
}
