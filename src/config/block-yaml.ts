/**
 * A fast reader for the plainest YAML: block mappings and block sequences
 * of plain scalars, one entry a line, as a generator writes a config of
 * 131,072 rules (the bench's: js-yaml takes about 0.35 s over its 11.6 MB,
 * this about a third of that). Anything else (flow style, quotes, anchors,
 * tags, block scalars, multi-line scalars, a key given twice, a key that is
 * not [A-Za-z_][A-Za-z0-9_]* or resolves to null or a bool, an item of only
 * a comment, tabs, CR, control characters, directives, document markers) is
 * left to js-yaml: NOT_BLOCK. test/unit/block-yaml-fuzz.test.ts compares the
 * two on generated documents and near-misses. A plain scalar is resolved by
 * js-yaml's own core-schema types (null, bool, int, float, else a string),
 * so what comes out is what js-yaml.load(text, CORE_SCHEMA) gives.
 */
import jsyaml from 'js-yaml';

export const NOT_BLOCK = Symbol('not plain block YAML');

/** The core schema's implicit types, in js-yaml's order. */
const types = (jsyaml as unknown as { types: Record<'null' | 'bool' | 'int' | 'float', jsyaml.Type> }).types;
const IMPLICIT = [types.null, types.bool, types.int, types.float];

class NotBlock extends Error {}

/** How many distinct keys Reader.keyText keeps to give back (a config has about 40 in all). */
const KEYS_KEPT = 64;

/** Containers nested deeper than this are left to js-yaml (its limit is 100 nodes, scalars included). */
const MAX_DEPTH = 50;

/** First characters that make a scalar something other than a plain one. */
const INDICATORS = new Set(['?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', "'", '"', '%', '@', '`']);

/**
 * Tabs, CR, and what js-yaml refuses or warns about (non-printable
 * characters, lone surrogates, non-ASCII line breaks): surrogates of any
 * kind are left to it too.
 */
const UNUSUAL = /[\x00-\x09\x0B-\x1F\x7F-\x9F\uD800-\uDFFF\u2028\u2029\uFFFE\uFFFF]/;

/**
 * What becomes of each item of a top-level list, by the list's key: the
 * function's result is stored in the item's place (a caller reading rules
 * as they are reached, so their parsed mappings die young instead of living
 * in a tree until the whole file is read). Undefined: the item as read.
 * `start` and `end` are the item's text: from the start of its "- " line
 * to the start of the line that holds the next thing read (the next item,
 * or what follows the list), blank and comment lines between included, so
 * one item's end is the next one's start. The same text at the same place
 * in a list reads as the same item.
 */
export type ItemHook = (key: string) => ItemRead | undefined;
export type ItemRead = (item: unknown, index: number, start: number, end: number) => unknown;

export function parseBlockYaml(text: string, items?: ItemHook): unknown {
  if (UNUSUAL.test(text)) return NOT_BLOCK;
  const r = new Reader(text, items);
  if (r.eof || r.indent !== 0) return NOT_BLOCK;
  try {
    const top = r.node(0);
    return r.eof ? top : NOT_BLOCK;
  } catch (e) {
    if (e instanceof NotBlock) return NOT_BLOCK;
    throw e;
  }
}

/**
 * A cursor over the lines that hold something (blank and comment lines
 * skipped): the current one starts at `start` (its first non-space),
 * `indent` columns in, and ends at `end`. No object per line: the lines of
 * a big config are most of its garbage otherwise.
 */
class Reader {
  start = 0;
  end = -1;
  indent = 0;
  eof = false;
  /** Mappings and sequences open around the current line. */
  depth = 0;
  /**
   * The keys read so far, up to KEYS_KEPT: a config repeats a handful on
   * every rule, and giving back the same string (internalized by its first
   * use as a property name) spares a new string per key line and V8's
   * lookup of it in its string table at each property store.
   */
  readonly #keys: string[] = [];
  constructor(
    readonly text: string,
    readonly items?: ItemHook,
  ) {
    this.next();
  }

  /** The key text from `start` to `end`: a string read before if it is one. */
  keyText(start: number, end: number): string {
    const n = end - start;
    for (const k of this.#keys) if (k.length === n && this.text.startsWith(k, start)) return k;
    const k = this.text.slice(start, end);
    if (this.#keys.length < KEYS_KEPT) this.#keys.push(k);
    return k;
  }

  next(): void {
    const t = this.text;
    for (;;) {
      const at = this.end + 1;
      if (at > t.length) {
        this.eof = true;
        return;
      }
      let end = t.indexOf('\n', at);
      if (end < 0) end = t.length;
      let i = at;
      while (i < end && t.charCodeAt(i) === 0x20) i++;
      this.end = end;
      if (i < end && t.charCodeAt(i) !== 0x23 /* # */) {
        this.start = i;
        this.indent = i - at;
        return;
      }
    }
  }

  /** "- " (or a lone "-") at `at`. */
  item(at = this.start): boolean {
    return this.text.charCodeAt(at) === 0x2d /* - */ && (at + 1 === this.end || this.text.charCodeAt(at + 1) === 0x20);
  }

  /** The end of a "key:" at `at` (the index after the colon) if the line is one, else -1. */
  key(at = this.start): number {
    const t = this.text;
    let i = at;
    const c0 = t.charCodeAt(i);
    if (!(isAlpha(c0) || c0 === 0x5f)) return -1;
    i++;
    for (; i < this.end; i++) {
      const c = t.charCodeAt(i);
      if (!(isAlpha(c) || (c >= 0x30 && c <= 0x39) || c === 0x5f)) break;
    }
    if (t.charCodeAt(i) !== 0x3a /* : */) return -1;
    i++;
    return i === this.end || t.charCodeAt(i) === 0x20 ? i : -1;
  }

  node(indent: number, each?: ItemRead): unknown {
    if (this.indent !== indent) throw new NotBlock();
    return this.item() ? this.seq(indent, each) : this.map(indent);
  }

  /**
   * js-yaml refuses nesting deeper than its maxDepth (100 nodes), and this
   * reader's recursion would overflow the stack some thousands deep: past
   * MAX_DEPTH containers it declines, and js-yaml words the error.
   */
  enter(): void {
    if (++this.depth > MAX_DEPTH) throw new NotBlock();
  }

  map(indent: number): Record<string, unknown> {
    this.enter();
    const out: Record<string, unknown> = {};
    const t = this.text;
    while (!this.eof) {
      if (this.indent < indent) break;
      if (this.indent > indent || this.item()) throw new NotBlock();
      const colon = this.key();
      if (colon < 0) throw new NotBlock();
      const key = this.keyText(this.start, colon - 1);
      // A key given twice is an error js-yaml words; __proto__ it stores its own way.
      if (key === '__proto__' || Object.prototype.hasOwnProperty.call(out, key)) throw new NotBlock();
      // A key that resolves to null or a bool (Null, TRUE, ...) js-yaml stores as
      // String(value) ("null", "true"): left to it, duplicates of that form too.
      if ((key.length === 4 || key.length === 5) && (types.null.resolve(key) || types.bool.resolve(key))) throw new NotBlock();
      let v = colon;
      while (v < this.end && t.charCodeAt(v) === 0x20) v++;
      const rest = stripComment(t.slice(v, this.end));
      this.next();
      if (rest !== '') {
        out[key] = scalar(rest);
        continue;
      }
      const each = this.depth === 1 ? this.items?.(key) : undefined;
      if (!this.eof && this.indent > indent) out[key] = this.node(this.indent, each);
      else if (!this.eof && this.indent === indent && this.item()) out[key] = this.seq(indent, each);
      else out[key] = null;
    }
    this.depth--;
    return out;
  }

  seq(indent: number, each?: ItemRead): unknown[] {
    this.enter();
    const out: unknown[] = [];
    const t = this.text;
    while (!this.eof) {
      if (this.indent < indent || (this.indent === indent && !this.item())) break;
      if (this.indent > indent) throw new NotBlock();
      // "- " then the item: a mapping whose first key is on this line, or a scalar.
      let j = this.start + 1;
      while (j < this.end && t.charCodeAt(j) === 0x20) j++;
      // An item of only a comment ("- # c") js-yaml reads on into the next lines,
      // where a less indented "- " can become this sequence's next item: left to it.
      if (j === this.end || this.item(j) || t.charCodeAt(j) === 0x23 /* # */) throw new NotBlock();
      const from = this.start - this.indent;
      let v: unknown;
      if (this.key(j) >= 0) {
        // The item's mapping: this line read as if it began at the key's column.
        this.indent += j - this.start;
        this.start = j;
        v = this.map(this.indent);
      } else {
        const rest = stripComment(t.slice(j, this.end));
        this.next();
        v = scalar(rest);
      }
      out.push(each === undefined ? v : each(v, out.length, from, this.eof ? t.length : this.start - this.indent));
    }
    this.depth--;
    return out;
  }
}

function isAlpha(c: number): boolean {
  return (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a);
}

/**
 * The scalar before a " #" comment, trailing spaces cut. Only spaces: YAML's
 * white space is space and tab (tabs are declined), and String#trim would
 * also cut U+00A0, U+3000, U+FEFF and the like, which js-yaml keeps.
 */
function stripComment(s: string): string {
  if (s.startsWith('#')) return '';
  const c = s.indexOf(' #');
  let end = c < 0 ? s.length : c;
  while (end > 0 && s.charCodeAt(end - 1) === 0x20) end--;
  return end === s.length ? s : s.slice(0, end);
}

/**
 * Every character js-yaml 4's core-schema null, bool, int and float
 * resolvers accept (~, the words, 0b / 0o / 0x digits, signs, points,
 * exponents, .inf, .nan): a scalar with any other is a string.
 */
const NOT_STRING = /^[0-9A-Za-z.+~_-]*$/;

function scalar(s: string): unknown {
  if (s === '') return null;
  if (INDICATORS.has(s[0]!) || (s[0] === '-' && (s.length === 1 || s[1] === ' '))) throw new NotBlock();
  // A ": " or a trailing ":" would make it a mapping; leave those to js-yaml.
  if (s.includes(': ') || s.endsWith(':')) throw new NotBlock();
  // Core-schema nulls, bools, ints and floats begin with one of ~ n N t T f F, a digit, + - or .: any other letter begins a string.
  const c = s.charCodeAt(0);
  if (isAlpha(c) && !'nNtTfF'.includes(s[0]!)) return s;
  // Nor does any of them take a character outside NOT_STRING's (a prefix's / or :).
  if (!NOT_STRING.test(s)) return s;
  for (const t of IMPLICIT) {
    if (t.resolve(s)) return t.construct(s);
  }
  return s;
}
