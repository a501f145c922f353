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
 * so what comes out is what js-yaml.load(text, CORE_SCHEMA) gives. A rule
 * list's plain items can be read from the bytes by its flat reader instead
 * (BlockFlat below): the block reader's 131,072 mappings of the bench's
 * file were most of its time.
 */
import jsyaml from 'js-yaml';
import { FLAT_KEYS, FlatMemberColumns, TakenRule, type FlatRuleReader } from './flat-rules.js';

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

/**
 * Rule lists whose plain items are read from the text's bytes by their
 * list's flat reader (src/config/flat-rules.ts), as a JSON file's are: an
 * item of `key: value` lines only, at its mapping's column, each value a
 * plain scalar of the characters a flat reader can take (no quote, no
 * comment, no space); its rule is given to the list's ItemRead as a
 * TakenRule. Any other item, or one the reader declines, is read as before.
 */
export interface BlockFlat {
  /** The text's bytes, one a character (an ASCII text): an index is the same in both. */
  readonly bytes: Uint8Array;
  /** The flat reader of a top-level rule list, if it has one. */
  reader(key: string): FlatRuleReader | undefined;
}

export function parseBlockYaml(text: string, items?: ItemHook, flat?: BlockFlat): unknown {
  if (UNUSUAL.test(text)) return NOT_BLOCK;
  const r = new Reader(text, items, flat);
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
    readonly flat?: BlockFlat,
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

  node(indent: number, each?: ItemRead, flat?: FlatRuleReader): unknown {
    if (this.indent !== indent) throw new NotBlock();
    return this.item() ? this.seq(indent, each, flat) : this.map(indent);
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
      const flat = each === undefined ? undefined : this.flat?.reader(key);
      if (!this.eof && this.indent > indent) out[key] = this.node(this.indent, each, flat);
      else if (!this.eof && this.indent === indent && this.item()) out[key] = this.seq(indent, each, flat);
      else out[key] = null;
    }
    this.depth--;
    return out;
  }

  seq(indent: number, each?: ItemRead, flat?: FlatRuleReader): unknown[] {
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
      const taken = flat === undefined || this.key(j) < 0 ? undefined : this.flatItem(j, indent, flat);
      if (taken !== undefined) v = taken;
      else if (this.key(j) >= 0) {
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

  readonly #members = new YamlMembers();
  readonly #taken = new YamlTaken(this.#members);

  /**
   * The item whose first key is at `j` ("- " at column `seqIndent`) read by
   * `reader` from the bytes, the cursor moved past it: its TakenRule. Or
   * undefined, the cursor where it was: the item is to be read as before
   * (not plain, declined, or an error the reader words).
   */
  flatItem(j: number, seqIndent: number, reader: FlatRuleReader): TakenRule | undefined {
    const b = this.flat!.bytes;
    const { start, end, indent } = this;
    const col = indent + (j - start);
    const m = this.#members;
    m.count = 0;
    let ok = true;
    for (let at = j; ; at = this.start) {
      if (!m.add(this, b, at)) {
        ok = false;
        break;
      }
      this.next();
      // The mapping ends at a line less indented; one between the list's column and the
      // mapping's, or more indented, or a "- " at the mapping's column, is not plain.
      if (this.eof || this.indent <= seqIndent) break;
      if (this.indent !== col || this.item()) {
        ok = false;
        break;
      }
    }
    if (ok && reader.read(b, m, 0)) return this.#taken.set(reader, this.text);
    this.start = start;
    this.end = end;
    this.indent = indent;
    this.eof = false;
    return undefined;
  }
}

/** A block item's `key: value` members, found over the bytes (FlatMembers: offsets into the text). */
class YamlMembers extends FlatMemberColumns {
  /**
   * The line's `key: value` at `at` (to r.end) as the next member: false
   * when it is not one (no key, a key given before, no value, a character
   * a plain value of a flat item does not have, a trailing colon).
   */
  add(r: Reader, b: Uint8Array, at: number): boolean {
    const colon = r.key(at);
    if (colon < 0 || this.count === FLAT_KEYS) return false;
    const keyEnd = colon - 1;
    const len = keyEnd - at;
    let h = 0;
    for (let i = at; i < keyEnd; i++) h = (Math.imul(h, 31) + b[i]!) | 0;
    for (let k = 0; k < this.count; k++) {
      if (this.keyHash[k] !== h || this.keyLen[k] !== len) continue;
      const other = this.keyAt[k]!;
      let x = 0;
      while (x < len && b[other + x] === b[at + x]) x++;
      if (x === len) return false;
    }
    let v = colon;
    while (v < r.end && b[v] === 0x20) v++;
    const end = r.end;
    if (v === end || VALUE_FIRST[b[v]!] !== 1 || b[end - 1] === 0x3a /* : */) return false;
    // What the value resolves to: a string, or something else (a number, a bool, null).
    let digits = true;
    let other = false;
    let points = 0;
    for (let i = v; i < end; i++) {
      const c = b[i]!;
      if (VALUE_BYTE[c] !== 1) return false;
      if (c < 0x30 || c > 0x39) digits = false;
      if (NOT_STRING_BYTE[c] !== 1) other = true;
      if (c === 0x2e /* . */) points++;
    }
    const c0 = b[v]!;
    let str: boolean;
    if (digits) str = false;
    // No null, bool, int or float has a character outside NOT_STRING's, or two points (an IPv4 address).
    else if (other || points > 1 || (isAlpha(c0) && !NULL_BOOL_FIRST.includes(c0))) str = true;
    else str = typeof scalar(r.text.slice(v, end)) === 'string';
    const k = this.count++;
    this.keyHash[k] = h;
    this.keyAt[k] = at;
    this.keyLen[k] = len;
    this.valAt[k] = v;
    this.valEnd[k] = end;
    this.valString[k] = str ? 1 : 0;
    return true;
  }
}

/** The item a flat reader took (one object reused for each). */
class YamlTaken extends TakenRule {
  #reader: FlatRuleReader | undefined;
  #text = '';

  constructor(readonly members: YamlMembers) {
    super();
  }

  set(reader: FlatRuleReader, text: string): this {
    this.#reader = reader;
    this.#text = text;
    return this;
  }

  get next(): number {
    return this.#reader!.next;
  }

  add(): unknown {
    return this.#reader!.add(0);
  }

  /** The mapping the block reader makes of the item (its members are plain scalars): read at once, before the next item. */
  raw(): unknown {
    const m = this.members;
    const t = this.#text;
    const out: Record<string, unknown> = {};
    for (let k = 0; k < m.count; k++) out[t.slice(m.keyAt[k]!, m.keyAt[k]! + m.keyLen[k]!)] = scalar(t.slice(m.valAt[k]!, m.valEnd[k]!));
    return out;
  }
}

const byteSet = (chars: string): Uint8Array => {
  const s = new Uint8Array(256);
  for (const c of chars) s[c.charCodeAt(0)] = 1;
  return s;
};
const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
/** A flat value's first character (no indicator, sign or point), and its others (no space, quote or #). */
const VALUE_FIRST = byteSet(ALNUM);
const VALUE_BYTE = byteSet(`${ALNUM}._:/@+-`);
/** NOT_STRING's characters. */
const NOT_STRING_BYTE = byteSet(`${ALNUM}.+~_-`);
/** First letters of the core schema's nulls and bools. */
const NULL_BOOL_FIRST = [...'nNtTfF'].map((c) => c.charCodeAt(0));

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
