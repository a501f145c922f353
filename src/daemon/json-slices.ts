/**
 * JSON.parse of a large request body in slices. A 10,000-operation batch
 * ({"operations": [...]}, 1.3-2 MB) took 8-23 ms of the event loop in one
 * JSON.parse; here a top-level object's members are read one at a time and
 * an array member element by element (a single member that is not an array
 * is one JSON.parse), each element by JSON.parse of its own
 * text, yielding between slices (SliceClock), so reads are answered while a
 * batch's body is read.
 *
 * The result is JSON.parse(text)'s, and so is a refusal: any text this
 * reader does not take as plainly well-formed (a syntax error, a top level
 * that is not an object, a "__proto__" member) goes to JSON.parse whole,
 * which gives its own value or its own SyntaxError
 * (test/unit/json-slices.test.ts compares the two).
 */
import { BACKSLASH, CLOSE_ARRAY, CLOSE_OBJECT, COLON, COMMA, isSpace, OPEN_ARRAY, OPEN_OBJECT, QUOTE } from '../host/json-chars.js';
import { SliceClock } from '../host/slice-clock.js';

class NotPlain extends Error {}

/** JSON.parse(text), yielding between slices of the work (runYielding runs it). */
export function* parseJsonSliced(text: string, sliceMs?: number): Generator<void, unknown> {
  try {
    return yield* sliced(text, sliceMs);
  } catch (e) {
    if (!(e instanceof NotPlain) && !(e instanceof SyntaxError)) throw e;
    // Not plainly well-formed: JSON.parse says what it says (its error, with its position).
    return JSON.parse(text) as unknown;
  }
}

function* sliced(text: string, sliceMs?: number): Generator<void, unknown> {
  const n = text.length;
  const clock = new SliceClock(sliceMs);
  let i = 0;
  const skipSpace = (): void => {
    while (i < n && isSpace(text.charCodeAt(i))) i++;
  };
  const expect = (c: number): void => {
    if (text.charCodeAt(i) !== c) throw new NotPlain();
    i++;
  };
  /** From the opening quote at i to just past the closing one. */
  const skipString = (): void => {
    let j = i + 1;
    for (;;) {
      const q = text.indexOf('"', j);
      if (q < 0) throw new NotPlain();
      let bs = 0;
      while (text.charCodeAt(q - 1 - bs) === BACKSLASH) bs++;
      if (bs % 2 === 0) {
        i = q + 1;
        return;
      }
      j = q + 1;
    }
  };
  /** One value starting at i (after spaces): to the comma or closing bracket that ends it at depth 0. */
  const valueText = (): string => {
    const from = i;
    let depth = 0;
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c === QUOTE) {
        skipString();
        continue;
      }
      if (c === OPEN_ARRAY || c === OPEN_OBJECT) depth++;
      else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
        if (depth === 0) break;
        depth--;
      } else if (c === COMMA && depth === 0) break;
      i++;
    }
    if (depth !== 0) throw new NotPlain();
    return text.slice(from, i);
  };

  skipSpace();
  expect(OPEN_OBJECT);
  const out: Record<string, unknown> = {};
  skipSpace();
  if (text.charCodeAt(i) === CLOSE_OBJECT) {
    i++;
  } else {
    for (;;) {
      // Between members too: a body of a million small members was one turn of 1.5 s (found in review).
      if (clock.tick()) yield;
      skipSpace();
      if (text.charCodeAt(i) !== QUOTE) throw new NotPlain();
      const k0 = i;
      skipString();
      const key = JSON.parse(text.slice(k0, i)) as string;
      if (key === '__proto__') throw new NotPlain();
      skipSpace();
      expect(COLON);
      skipSpace();
      if (text.charCodeAt(i) === OPEN_ARRAY) {
        i++;
        const list: unknown[] = [];
        skipSpace();
        if (text.charCodeAt(i) === CLOSE_ARRAY) {
          i++;
        } else {
          for (;;) {
            if (clock.tick()) yield;
            list.push(JSON.parse(valueText()) as unknown);
            const c = text.charCodeAt(i++);
            if (c === CLOSE_ARRAY) break;
            if (c !== COMMA) throw new NotPlain();
          }
        }
        out[key] = list;
      } else {
        out[key] = JSON.parse(valueText()) as unknown;
      }
      skipSpace();
      const c = text.charCodeAt(i++);
      if (c === CLOSE_OBJECT) break;
      if (c !== COMMA) throw new NotPlain();
    }
  }
  skipSpace();
  if (i !== n) throw new NotPlain();
  return out;
}
