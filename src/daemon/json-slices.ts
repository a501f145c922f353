/**
 * JSON.parse of a large request body in slices. A 10,000-operation batch
 * ({"operations": [...]}, 1.3-2 MB) took 8-23 ms of the event loop in one
 * JSON.parse; here objects are read a member at a time and arrays an
 * element at a time, yielding between slices (SliceClock), so reads are
 * answered while a batch's body is read. A member or element whose text
 * ends within WHOLE_MAX characters is one JSON.parse of that text (a
 * batch's operation); a longer one is read in pieces the same way, to
 * MAX_DEPTH levels.
 *
 * The value is JSON.parse(text)'s, for any JSON text (a list or a scalar
 * at the top, a "__proto__" member, a member that is a large object). A
 * text that is not JSON is refused with a SyntaxError: JSON.parse's own
 * (it reads the text again) when the text is at most EXACT_ERROR_MAX
 * characters, else the reader's, naming the position. Before, every text
 * the reader did not take as plainly well-formed (a list at the top, a
 * "__proto__" member, a member that is an object, a byte of garbage after
 * the body) went to JSON.parse whole: a 16 MiB body held the event loop
 * 0.3-0.8 s (found in review). test/unit/json-slices.test.ts compares the
 * two readers.
 */
import { BACKSLASH, CLOSE_ARRAY, CLOSE_OBJECT, COLON, COMMA, isSpace, OPEN_ARRAY, OPEN_OBJECT, QUOTE } from '../host/json-chars.js';
import { SliceClock } from '../host/slice-clock.js';

/** A member or element that ends within this many characters is one JSON.parse (about 0.1 ms of work). */
export const WHOLE_MAX = 64 * 1024;
/** Nesting read in pieces; a value deeper than this is one JSON.parse, however long (the reader's own recursion is bounded). */
const MAX_DEPTH = 32;
/** A text that is not JSON and at most this long gets JSON.parse's own error (a few ms to read it again); a longer one the reader's. */
export const EXACT_ERROR_MAX = 1024 * 1024;

class NotJson extends Error {}

/** JSON.parse(text), yielding between slices of the work (runYielding runs it). */
export function* parseJsonSliced(text: string, sliceMs?: number): Generator<void, unknown> {
  try {
    return yield* sliced(text, sliceMs);
  } catch (e) {
    if (!(e instanceof NotJson)) throw e;
    // JSON.parse's own words (its error, with its position) where reading the text again is cheap.
    if (text.length <= EXACT_ERROR_MAX) return JSON.parse(text) as unknown;
    throw new SyntaxError(e.message);
  }
}

function* sliced(text: string, sliceMs?: number): Generator<void, unknown> {
  const n = text.length;
  const clock = new SliceClock(sliceMs);
  let i = 0;
  const skipSpace = (): void => {
    while (i < n && isSpace(text.charCodeAt(i))) i++;
  };
  const refuse = (): never => {
    throw new NotJson(i >= n ? 'Unexpected end of JSON input' : `Unexpected character ${JSON.stringify(text[i])} at position ${i} of the JSON text`);
  };
  const expect = (c: number): void => {
    if (text.charCodeAt(i) !== c) refuse();
    i++;
  };
  /** The end of the string whose opening quote is at `from` (just past its closing quote), or -1. */
  const stringEnd = (from: number): number => {
    let j = from + 1;
    for (;;) {
      const q = text.indexOf('"', j);
      if (q < 0) return -1;
      let bs = 0;
      while (text.charCodeAt(q - 1 - bs) === BACKSLASH) bs++;
      if (bs % 2 === 0) return q + 1;
      j = q + 1;
    }
  };
  /**
   * Where the value at i ends (the comma or closing bracket after it, at its
   * depth), if that is within `max` characters of i; else -1. i is not moved.
   */
  const valueEnd = (max: number): number => {
    const stop = Math.min(n, i + max);
    let depth = 0;
    let j = i;
    while (j < stop) {
      const c = text.charCodeAt(j);
      if (c === QUOTE) {
        j = stringEnd(j);
        if (j < 0) return -1;
        continue;
      }
      if (c === OPEN_ARRAY || c === OPEN_OBJECT) depth++;
      else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
        if (depth === 0) return j;
        depth--;
      } else if (c === COMMA && depth === 0) return j;
      j++;
    }
    // The end of the text ends a value at depth 0 (the top level's scalar); else not within `max`.
    return j === n && depth === 0 ? n : -1;
  };
  /** JSON.parse of text[from, to); its error named with the piece's place in the whole. */
  const piece = (from: number, to: number): unknown => {
    try {
      return JSON.parse(text.slice(from, to)) as unknown;
    } catch (e) {
      throw new NotJson(`${(e as Error).message} (in the value at position ${from} of the JSON text)`);
    }
  };
  /** The value at i (after spaces), whole if short, else in pieces; i past it. */
  function* value(depth: number): Generator<void, unknown> {
    skipSpace();
    const c = text.charCodeAt(i);
    const structured = c === OPEN_ARRAY || c === OPEN_OBJECT;
    const end = valueEnd(structured && depth < MAX_DEPTH ? WHOLE_MAX : Infinity);
    if (end >= 0) {
      const v = piece(i, end);
      i = end;
      return v;
    }
    if (!structured) refuse();
    return c === OPEN_OBJECT ? yield* object(depth) : yield* array(depth);
  }
  function* object(depth: number): Generator<void, Record<string, unknown>> {
    i++;
    const out: Record<string, unknown> = {};
    skipSpace();
    if (text.charCodeAt(i) === CLOSE_OBJECT) {
      i++;
      return out;
    }
    for (;;) {
      // Between members too: a body of a million small members was one turn of 1.5 s (found in review).
      if (clock.tick()) yield;
      skipSpace();
      if (text.charCodeAt(i) !== QUOTE) refuse();
      const k0 = i;
      const k1 = stringEnd(i);
      if (k1 < 0) refuse();
      const key = piece(k0, k1) as string;
      i = k1;
      skipSpace();
      expect(COLON);
      const v = yield* value(depth + 1);
      // As JSON.parse makes it: an own member, not the object's prototype.
      if (key === '__proto__') Object.defineProperty(out, key, { value: v, writable: true, enumerable: true, configurable: true });
      else out[key] = v;
      skipSpace();
      const c = text.charCodeAt(i);
      if (c === CLOSE_OBJECT) {
        i++;
        return out;
      }
      if (c !== COMMA) refuse();
      i++;
    }
  }
  function* array(depth: number): Generator<void, unknown[]> {
    i++;
    const list: unknown[] = [];
    skipSpace();
    if (text.charCodeAt(i) === CLOSE_ARRAY) {
      i++;
      return list;
    }
    for (;;) {
      if (clock.tick()) yield;
      skipSpace();
      // A short element (a batch's operation) without a generator of its own.
      const end = valueEnd(depth + 1 < MAX_DEPTH ? WHOLE_MAX : Infinity);
      if (end >= 0) {
        list.push(piece(i, end));
        i = end;
      } else {
        list.push(yield* value(depth + 1));
      }
      skipSpace();
      const c = text.charCodeAt(i);
      if (c === CLOSE_ARRAY) {
        i++;
        return list;
      }
      if (c !== COMMA) refuse();
      i++;
    }
  }

  skipSpace();
  const c = text.charCodeAt(i);
  // A list or an object at the top is read in pieces whatever its length; a scalar is one JSON.parse.
  const out = c === OPEN_OBJECT ? yield* object(0) : c === OPEN_ARRAY ? yield* array(0) : yield* value(0);
  skipSpace();
  if (i !== n) refuse();
  return out;
}
