/**
 * A file's text as the JSON reader reads it (src/config/load.ts): a string,
 * or an ASCII file's bytes (AsciiText), one byte a character, read without
 * making the string. A start read 277 MB of JSON (a million sessions and a
 * million policies), and the string of it took 200-300 ms to make, though
 * the rule lists are read from the bytes (the flat readers) and the rest
 * of the reader looks only between the items.
 */

import { isAscii } from 'node:buffer';

/** What the JSON reader asks of a text: a string has it, and so has AsciiText. */
export interface Chars {
  readonly length: number;
  /** The character at i (NaN past the end, as a string's). */
  charCodeAt(i: number): number;
  /** Characters [from, to) as a string of their own. */
  slice(from: number, to?: number): string;
}

const LATIN1_SLICE = (Buffer.prototype as unknown as { latin1Slice(this: Uint8Array, start: number, end: number): string }).latin1Slice;

/** An ASCII text's bytes (a literal a byte reader compares or writes). */
export function asciiBytes(s: string): Uint8Array {
  return Uint8Array.from(s, (c) => c.charCodeAt(0));
}

/** b[at, end) as a string of its own (the bytes ASCII: one character each), without a view of them made first. */
export function latin1(b: Uint8Array, at: number, end: number): string {
  return LATIN1_SLICE.call(b, at, end);
}

// Text written as bytes (a batch's record lines and answer, a row's key text): each writer puts its text into
// `b` from `at` and returns the index past it; the caller has made the room.

/** Printable ASCII without a quote or a backslash: JSON.stringify(s) is s between quotes. */
export function plainText(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return false;
  }
  return true;
}

/** A text of one byte a character (ASCII: one plainText holds), as it is. */
export function putAscii(b: Uint8Array, at: number, s: string): number {
  for (let i = 0; i < s.length; i++) b[at + i] = s.charCodeAt(i);
  return at + s.length;
}

/** A non-negative safe integer's digits, as JSON.stringify and String() write it. */
export function putUint(b: Uint8Array, at: number, v: number): number {
  if (v < 10) {
    b[at] = 0x30 + v;
    return at + 1;
  }
  let digits = 0;
  for (let x = v; x > 0; x = Math.floor(x / 10)) digits++;
  let i = at + digits;
  for (let x = v; x > 0; x = Math.floor(x / 10)) b[--i] = 0x30 + (x % 10);
  return at + digits;
}

/** formatIpv4's dotted quad. */
export function putIpv4(b: Uint8Array, at: number, addr: number): number {
  at = putUint(b, at, addr >>> 24);
  b[at++] = 0x2e;
  at = putUint(b, at, (addr >>> 16) & 0xff);
  b[at++] = 0x2e;
  at = putUint(b, at, (addr >>> 8) & 0xff);
  b[at++] = 0x2e;
  return putUint(b, at, addr & 0xff);
}

/** `v` (32 bits) as formatTeidPrefix's 8 lowercase hex digits. */
export function putHex8(b: Uint8Array, at: number, v: number): number {
  for (let i = 7; i >= 0; i--) {
    const d = (v >>> (4 * (7 - i))) & 0xf;
    b[at + i] = d < 10 ? 0x30 + d : 0x57 + d;
  }
  return at + 8;
}

/**
 * The text of bytes that are all ASCII (the caller checks: isAscii), over
 * the bytes. `text` makes the string, once, for what needs it whole (the
 * YAML readers, a JSON text the streamed read gives up on, an error's
 * line).
 */
export class AsciiText implements Chars {
  readonly length: number;
  #text: string | undefined;

  constructor(readonly bytes: Uint8Array) {
    this.length = bytes.length;
  }

  charCodeAt(i: number): number {
    return i >= 0 && i < this.length ? this.bytes[i]! : NaN;
  }

  slice(from: number, to: number = this.length): string {
    const a = Math.max(0, Math.min(from, this.length));
    return latin1(this.bytes, a, Math.max(a, Math.min(to, this.length)));
  }

  get text(): string {
    return (this.#text ??= latin1(this.bytes, 0, this.length));
  }
}

/** The string of a text. */
export function textOf(t: string | AsciiText): string {
  return typeof t === 'string' ? t : t.text;
}

/** The text of a file's bytes to read as JSON without its string: an AsciiText when they are ASCII and open an object, else undefined (decode them). */
export function asciiJson(bytes: Uint8Array): AsciiText | undefined {
  let i = 0;
  while (i < bytes.length && (bytes[i] === 0x20 || bytes[i] === 0x0a || bytes[i] === 0x0d || bytes[i] === 0x09)) i++;
  return bytes[i] === 0x7b /* { */ && isAscii(bytes) ? new AsciiText(bytes) : undefined;
}
