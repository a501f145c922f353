/**
 * The rule set's index of a list of sessions or policies by key text,
 * without a key text or a Map entry per rule: a typed hash of the rules'
 * key bytes to their place in the list (RowIndex). The key texts of a
 * million sessions and a million (N3, TEID) policies and their Map entries
 * were about 150 MB of heap. "Row" below is a place in the list; its rule
 * is a row of src/config/rows.ts (a file's rule) or an object (a reload's
 * changed rule). The keys set() adds (the API's rules, put on a list that
 * may be empty) are added rows of the same index, found by their rule's
 * key bytes: no key text or Map entry is kept for them either.
 *
 * It is a Map<string, R> to its users, with a Map's insertion order: the
 * rows first, in list order, each while its key is held by its row or by
 * the rule set()'s gave it since; then the keys set() added, in order. A
 * key deleted and set again goes to the end, as in a Map. Key texts are
 * made when asked (iteration, keys()), and a key given to get() is found
 * by its bytes only in the canonical text the rows' key function makes
 * (another spelling, or a key set to a rule not its own, is kept by its
 * text, as a Map would keep it). getOwn and setOwn take the rule instead
 * of its key text.
 * test/unit/row-map.test.ts holds it to a Map under random changes.
 */

import { finishHash, SEEDED_BASIS } from '../host/hash-seed.js';

/**
 * The rows by key: open addressing over one Int32Array, each slot a row's
 * key hash and the row side by side (one cache line for both: as two
 * arrays, a probe of a million rows missed the cache twice), no key bytes
 * kept: a probe that meets the same hash asks the map whether that row
 * holds the key (`match`: its key bytes made from its columns, or from its
 * rule). 8 bytes a slot with at most three slots in four used, about 11 MB
 * for a million rows, where a table keeping the keys' bytes
 * (src/host/key-index.ts) took 54 MB for a million sessions. Slots are
 * only added: a row whose key went (deleted, or its rule changed) keeps
 * its slot, which `match` no longer answers for, until the map has the
 * table made again (rebuild, when three slots in four are used) without
 * it.
 */
class RowIndex {
  #slots: number;
  /** Slot s: its hash at 2s (0: empty), its row at 2s + 1. */
  #table: Int32Array;
  /** Slots used (those of rows gone included). */
  #used = 0;
  /** Slots whose row may have gone since the table was made: none, and a growth asks no row whether it lives. */
  dead = 0;

  constructor(
    readonly match: (row: number, key: Uint8Array) => boolean,
    count: number,
    /** The table another thread filled for the same rows (RowKeyedMap's `filled`). */
    table?: Int32Array,
  ) {
    // Any number of slots, not a power of two: a million rows take 1.33 million, not 2 (16 MB).
    const slots = RowIndex.slotsFor(count);
    this.#slots = slots;
    if (table !== undefined && table.length !== 2 * slots) throw new Error(`internal: an index of ${table.length / 2} slots was sent for ${count} rows (${slots} slots)`);
    this.#table = table ?? new Int32Array(2 * slots);
    if (table !== undefined) this.#used = count;
  }

  static slotsFor(rows: number): number {
    return Math.max(16, Math.ceil((rows * 4) / 3) + 1);
  }

  /** The slots (sent to another thread: RowKeyedMap.filledIndex). */
  get table(): Int32Array {
    return this.#table;
  }

  /**
   * FNV-1a of the key bytes from this process's seeded basis, finished
   * (src/host/hash-seed.ts: the keys come from API clients and BGP peers),
   * as a signed 32-bit integer (what the table holds), never 0.
   */
  static hash(b: Uint8Array): number {
    let f = SEEDED_BASIS;
    for (let i = 0; i < b.length; i++) {
      f ^= b[i]!;
      f = Math.imul(f, 0x01000193);
    }
    return finishHash(f) | 0;
  }

  /** The row whose key is `key` (a row `match` answers for), or -1. */
  get(key: Uint8Array): number {
    const h = RowIndex.hash(key);
    const t = this.#table;
    for (let s = (h >>> 0) % this.#slots; ; s = s + 1 === this.#slots ? 0 : s + 1) {
      const at = t[2 * s]!;
      if (at === 0) return -1;
      if (at === h && this.match(t[2 * s + 1]!, key)) return t[2 * s + 1]!;
    }
  }

  /** Add row `row` with key `key`; the row that has the key already, or -1 when added (a fill: the table is large enough). */
  add(key: Uint8Array, row: number): number {
    const h = RowIndex.hash(key);
    const t = this.#table;
    for (let s = (h >>> 0) % this.#slots; ; s = s + 1 === this.#slots ? 0 : s + 1) {
      const at = t[2 * s]!;
      if (at === 0) {
        t[2 * s] = h;
        t[2 * s + 1] = row;
        this.#used++;
        return -1;
      }
      if (at === h && this.match(t[2 * s + 1]!, key)) return t[2 * s + 1]!;
    }
  }

  /** Whether one more slot would pass three in four used: the map rebuilds the table first. */
  get full(): boolean {
    return 4 * (this.#used + 1) > 3 * this.#slots;
  }

  /** Add row `row` with key `key`, which no row holds (the caller looked), in a table not full. */
  insert(key: Uint8Array, row: number): void {
    if (this.full) throw new Error('internal: a row index was given a row when full');
    this.#put(RowIndex.hash(key), row);
    this.#used++;
  }

  #put(h: number, row: number): void {
    const t = this.#table;
    let s = (h >>> 0) % this.#slots;
    while (t[2 * s] !== 0) s = s + 1 === this.#slots ? 0 : s + 1;
    t[2 * s] = h;
    t[2 * s + 1] = row;
  }

  /**
   * The table made again at twice `live` slots, each slot's row moved to
   * `remap(row)` (-1: gone, its slot dropped). With no slot's row gone
   * since the last (`dead` 0) and no remap, the rows are taken as they are
   * (a callback per slot was most of a growth).
   */
  rebuild(live: number, remap?: (row: number) => number): void {
    const old = this.#table;
    if (remap === undefined && this.dead !== 0) throw new Error('internal: a row index rebuilt with rows gone and no remap');
    const all = remap === undefined;
    this.#slots = Math.max(RowIndex.slotsFor(live), 2 * (live + 1));
    this.#table = new Int32Array(2 * this.#slots);
    let used = 0;
    for (let s = 0; s < old.length; s += 2) {
      if (old[s] === 0) continue;
      const row = all ? old[s + 1]! : remap!(old[s + 1]!);
      if (row < 0) continue;
      this.#put(old[s]!, row);
      used++;
    }
    this.#used = used;
    this.dead = 0;
  }

  /** Every slot dropped. */
  clear(): void {
    this.#slots = 16;
    this.#table = new Int32Array(32);
    this.#used = 0;
    this.dead = 0;
  }
}

/** A RowKeyedMap's index of all its rows, made on another thread for rows with the same keys (RowKeyedMap.filledIndex). */
export interface FilledIndex {
  readonly table: Int32Array;
  /** Whether every row's key has an order (pageSlices). */
  readonly orderable: boolean;
}

/** What the map needs of its rows (a list's rules: rows of src/config/rows.ts, or objects). */
export interface KeyedRows<R> {
  /** Rows 0..count-1, each the rule at that index of the list. */
  readonly count: number;
  readonly keyLength: number;
  /** Row i's key bytes into `into` at 0. */
  keyBytes(i: number, into: Uint8Array): void;
  /**
   * A key text's bytes into `into` at 0: true when the text is the
   * canonical one of those bytes, 'loose' when it may not be (the found
   * row's key text is compared), false when no row could have it.
   */
  textBytes(key: string, into: Uint8Array): boolean | 'loose';
  /** Row i's key text, as the rule's key function makes it. */
  keyText(i: number): string;
  /** Row i's rule (the list's object). */
  rule(i: number): R;
  /** A rule's key bytes into `into` at 0 (a rule set() added: its key is not kept). */
  keyBytesOf(r: R, into: Uint8Array): void;
  /** A rule's key text, as keyText gives a row's. */
  keyOf(r: R): string;
  /**
   * Two numbers in the order of the key texts (text a < text b exactly when
   * (a[0], a[1]) < (b[0], b[1])) from key bytes, into `out`; false when this
   * key has none (then pages go by the texts). See keyTextOrder in rows.ts.
   */
  order?(key: Uint8Array, out: Float64Array): boolean;
}

/** RowIndex's hash of a key's bytes, for tests (the same key hashes alike only within a process). */
export const rowIndexHash = (key: Uint8Array): number => RowIndex.hash(key);

export class RowKeyedMap<R> extends Map<string, R> {
  readonly #rows: KeyedRows<R>;
  #index: RowIndex;
  readonly #scratch: Uint8Array;
  readonly #probe: Uint8Array;
  /** 1: the row's key is not held by the row (deleted, or set again after a delete: then an added row's). */
  readonly #gone: Uint8Array;
  #live: number;
  /** A row's key set to another rule (its place kept). */
  readonly #replaced = new Map<number, R>();
  /**
   * The keys set() added, in the order they were set: each an added row
   * (row #rows.count + j) whose key is its rule's, found by its bytes
   * through the same index, with no key text or Map entry kept (the API's
   * rules: a million sessions through /v1/batch kept a million key texts
   * and two Maps' entries, about 150 B a rule). A key set with a rule that
   * is not its own (or none, or in a spelling not the canonical one) is
   * kept by its text (#oddKeys), in its place in the same order.
   */
  #added: (R | undefined)[] = [];
  /** Added row j: 1 when its key went (deleted, or set again: then a later row's). */
  #addedGone = new Uint8Array(16);
  #addedLive = 0;
  /** Key text -> added row j, for the keys not found by their bytes (above). */
  readonly #oddKeys = new Map<string, number>();
  /** Added row j -> its key text, for those. */
  readonly #oddText = new Map<number, string>();
  /** Iterations under way (entries, keys, values): the added rows are not renumbered under them (#rebuild). */
  #iterating = 0;
  /** Times the map was cleared: a walk under way starts the new added rows from the first. */
  #cleared = 0;
  /** What textBytes said of the key #row looked up last (its bytes are in #scratch unless false). */
  #exact: boolean | 'loose' = false;

  /** Rows indexed so far (fill). */
  #filled = 0;
  /** Whether every row's key has an order (pageSlices). */
  #orderable: boolean;
  readonly #ord = new Float64Array(2);

  /**
   * The rows' index; throws RepeatedRowKey for the first row whose key an
   * earlier row has (the caller words the error). With `fill` false, the
   * caller indexes the rows with fill() before any other use.
   */
  constructor(rows: KeyedRows<R>, fill = true, filled?: FilledIndex) {
    super();
    this.#rows = rows;
    this.#index = new RowIndex((row, key) => this.#holds(row, key), rows.count, filled?.table);
    this.#scratch = new Uint8Array(rows.keyLength);
    this.#probe = new Uint8Array(rows.keyLength);
    this.#gone = new Uint8Array(rows.count);
    this.#live = rows.count;
    this.#orderable = rows.order !== undefined && (filled?.orderable ?? true);
    if (filled !== undefined) this.#filled = rows.count;
    else if (fill) this.fill(rows.count);
  }

  /** Whether row `row` (a list's, or an added one) holds the key whose bytes are `key`. */
  #holds(row: number, key: Uint8Array): boolean {
    const n = this.#rows.count;
    if (row < n) {
      if (this.#gone[row] === 1) return false;
      this.#rows.keyBytes(row, this.#probe);
    } else {
      const j = row - n;
      if (this.#addedGone[j] === 1 || this.#oddText.has(j)) return false;
      this.#rows.keyBytesOf(this.#added[j]!, this.#probe);
    }
    const p = this.#probe;
    for (let i = 0; i < key.length; i++) if (p[i] !== key[i]) return false;
    return true;
  }

  /**
   * The index of every row, as another thread sends it for a map of the
   * same rows there (a start's sessions read ahead: src/config/list-ahead.ts);
   * undefined until every row is indexed.
   */
  filledIndex(): FilledIndex | undefined {
    return this.#filled === this.#rows.count && this.#added.length === 0 ? { table: this.#index.table, orderable: this.#orderable } : undefined;
  }

  /** Index up to `n` more rows (a fill in pieces, between turns); true when every row is. */
  fill(n: number): boolean {
    const end = Math.min(this.#rows.count, this.#filled + n);
    for (let i = this.#filled; i < end; i++) {
      this.#rows.keyBytes(i, this.#scratch);
      const first = this.#index.add(this.#scratch, i);
      if (first >= 0) throw new RepeatedRowKey(i, first);
      if (this.#orderable && !this.#rows.order!(this.#scratch, this.#ord)) this.#orderable = false;
    }
    this.#filled = end;
    return end === this.#rows.count;
  }

  /** The row (a list's, or #rows.count + an added one's j) holding `key`, or -1. */
  #row(key: string): number {
    if (typeof key !== 'string') {
      // Not a key text (a Map takes any key): kept by itself, as an odd key.
      this.#exact = false;
      const j = this.#oddKeys.get(key);
      return j === undefined ? -1 : this.#rows.count + j;
    }
    const exact = this.#rows.textBytes(key, this.#scratch);
    this.#exact = exact;
    if (exact !== false) {
      const i = this.#index.get(this.#scratch);
      // A text read loosely (IPv6) is the row's key only in its canonical spelling, as in a Map of key texts.
      if (i >= 0 && (exact === true || this.#keyText(i) === key)) return i;
    }
    if (this.#oddKeys.size === 0) return -1;
    const j = this.#oddKeys.get(key);
    return j === undefined ? -1 : this.#rows.count + j;
  }

  #keyText(row: number): string {
    const n = this.#rows.count;
    if (row < n) return this.#rows.keyText(row);
    const j = row - n;
    return this.#oddText.get(j) ?? this.#rows.keyOf(this.#added[j]!);
  }

  #value(i: number): R {
    const n = this.#rows.count;
    if (i >= n) return this.#added[i - n]!;
    return this.#replaced.has(i) ? this.#replaced.get(i)! : this.#rows.rule(i);
  }

  /** Whether `r` is a rule whose own key is `key`, #row's last (its bytes in #scratch): kept as an added row by its bytes. */
  #ownKey(key: string, r: R): boolean {
    if (this.#exact === false || typeof r !== 'object' || r === null) return false;
    try {
      this.#rows.keyBytesOf(r, this.#probe);
    } catch {
      // Not a rule (a Map holds any value): kept by its text.
      return false;
    }
    const p = this.#probe;
    const k = this.#scratch;
    for (let i = 0; i < k.length; i++) if (p[i] !== k[i]) return false;
    return this.#exact === true || this.#rows.keyOf(r) === key;
  }

  override get size(): number {
    return this.#live + this.#addedLive;
  }

  /** The added rows' places (gone ones included, until the next rebuild) and the index's slots (tests: what churn leaves). */
  footprint(): { added: number; slots: number } {
    return { added: this.#added.length, slots: this.#index.table.length / 2 };
  }

  override get(key: string): R | undefined {
    const i = this.#row(key);
    return i < 0 ? undefined : this.#value(i);
  }

  override has(key: string): boolean {
    return this.#row(key) >= 0;
  }

  override set(key: string, value: R): this {
    const i = this.#row(key);
    const n = this.#rows.count;
    if (i >= n) {
      const j = i - n;
      // Its place kept; kept by its text from now on if the rule is not the key's own.
      if (!this.#oddText.has(j) && !this.#ownKey(key, value)) {
        this.#odd(key, j);
        this.#index.dead++;
      }
      this.#added[j] = value;
    } else if (i >= 0) {
      if (value === this.#rows.rule(i)) this.#replaced.delete(i);
      else this.#replaced.set(i, value);
    } else this.#append(value, this.#ownKey(key, value), key);
    return this;
  }

  /**
   * The row holding `r`'s own key (keyOf(r)), found by the rule's key bytes
   * (a row's from its columns) with no text made or read: the rule set
   * and a batch's plan ask by the rule they hold, and the text they had
   * was made from the same columns only to be read back into bytes here.
   */
  #rowOf(r: R): number {
    if (this.#oddKeys.size > 0) return this.#row(this.#rows.keyOf(r));
    this.#rows.keyBytesOf(r, this.#scratch);
    this.#exact = true;
    return this.#index.get(this.#scratch);
  }

  /** get(keyOf(r)), by `r`'s key bytes (#rowOf). */
  getOwn(r: R): R | undefined {
    const i = this.#rowOf(r);
    return i < 0 ? undefined : this.#value(i);
  }

  /** set(keyOf(r), r), by `r`'s key bytes (#rowOf). */
  setOwn(r: R): this {
    if (this.#oddKeys.size > 0) return this.set(this.#rows.keyOf(r), r);
    const i = this.#rowOf(r);
    const n = this.#rows.count;
    if (i >= n) this.#added[i - n] = r;
    else if (i >= 0) {
      if (r === this.#rows.rule(i)) this.#replaced.delete(i);
      else this.#replaced.set(i, r);
    } else this.#append(r, true);
    return this;
  }

  /** A key no row holds, set to `value`: an added row, found by its bytes (#scratch) when `own`, else by its text. */
  #append(value: R, own: boolean, key?: string): void {
    // The index made again first when full (it reads no key bytes: #scratch is kept).
    if (own && this.#index.full) this.#rebuild();
    const j = this.#added.length;
    this.#added.push(value);
    if (j === this.#addedGone.length) {
      const grown = new Uint8Array(2 * j);
      grown.set(this.#addedGone);
      this.#addedGone = grown;
    }
    this.#addedLive++;
    if (own) this.#index.insert(this.#scratch, this.#rows.count + j);
    else this.#odd(key!, j);
  }

  #odd(key: string, j: number): void {
    this.#oddKeys.set(key, j);
    this.#oddText.set(j, key);
  }

  override delete(key: string): boolean {
    const i = this.#row(key);
    if (i < 0) return false;
    const n = this.#rows.count;
    if (i < n) {
      this.#gone[i] = 1;
      this.#index.dead++;
      this.#replaced.delete(i);
      this.#live--;
      return true;
    }
    const j = i - n;
    this.#addedGone[j] = 1;
    // Its rule let go at once; its place in the lists goes when the index is next made again (#rebuild).
    this.#added[j] = undefined;
    this.#index.dead++;
    const odd = this.#oddText.get(j);
    if (odd !== undefined) {
      this.#oddKeys.delete(odd);
      this.#oddText.delete(j);
    }
    this.#addedLive--;
    return true;
  }

  /**
   * The index made again for the rows that hold their keys (RowIndex.rebuild:
   * twice their number of slots), and the added rows without those gone,
   * renumbered in order, in the same pass over the slots: no walk of their
   * own, and none at a delete (a compaction at the deletes re-indexed a
   * million file rows from 16 slots up, in one call; found in review). Not
   * renumbered while a walk of the map is under way (#iterating: it goes
   * by the added rows' numbers); its gone rows are then kept until the next.
   */
  #rebuild(): void {
    const n = this.#rows.count;
    const added = this.#added;
    const gone = this.#addedGone;
    const oddText = this.#oddText;
    const own = this.#addedLive - oddText.size;
    const live = this.#live + own;
    if (this.#iterating > 0 || this.#addedLive === added.length) {
      // No renumbering: slots of rows gone or odd dropped (when some may be).
      this.#index.rebuild(live, this.#index.dead === 0 ? undefined : (row) => (row < n ? (this.#gone[row] === 0 ? row : -1) : gone[row - n] === 0 && !oddText.has(row - n) ? row : -1));
      return;
    }
    const to = new Int32Array(added.length);
    const next: (R | undefined)[] = [];
    const nextGone = new Uint8Array(Math.max(16, 2 * this.#addedLive));
    const nextOdd = new Map<number, string>();
    for (let j = 0; j < added.length; j++) {
      if (gone[j] === 1) {
        to[j] = -1;
        continue;
      }
      to[j] = next.length;
      const text = oddText.get(j);
      if (text !== undefined) nextOdd.set(next.length, text);
      next.push(added[j]);
    }
    this.#index.rebuild(live, (row) => (row < n ? (this.#gone[row] === 0 ? row : -1) : gone[row - n] === 0 && !oddText.has(row - n) ? n + to[row - n]! : -1));
    this.#added = next;
    this.#addedGone = nextGone;
    oddText.clear();
    this.#oddKeys.clear();
    for (const [j, text] of nextOdd) this.#odd(text, j);
  }

  override clear(): void {
    this.#cleared++;
    this.#gone.fill(1);
    this.#live = 0;
    this.#replaced.clear();
    this.#added = [];
    this.#addedGone = new Uint8Array(16);
    this.#addedLive = 0;
    this.#oddKeys.clear();
    this.#oddText.clear();
    this.#index.clear();
  }

  // A key deleted while these walk the map is not met after, one set is met at the end, as in a Map: the
  // added rows are not renumbered meanwhile (#iterating), and after a clear() the walk goes on from the first
  // of the rows added since, as a Map's does.
  *#walk(): Generator<number> {
    this.#iterating++;
    try {
      const n = this.#gone.length;
      for (let i = 0; i < n; i++) if (this.#gone[i] === 0) yield i;
      let cleared = this.#cleared;
      for (let j = 0; j < this.#added.length; j++) {
        if (this.#addedGone[j] === 0) yield n + j;
        if (cleared !== this.#cleared) {
          cleared = this.#cleared;
          j = -1;
        }
      }
    } finally {
      this.#iterating--;
    }
  }

  override *entries(): MapIterator<[string, R]> {
    for (const row of this.#walk()) yield [this.#keyText(row), this.#value(row)];
  }

  override *keys(): MapIterator<string> {
    for (const row of this.#walk()) yield this.#keyText(row);
  }

  override *values(): MapIterator<R> {
    for (const row of this.#walk()) yield this.#value(row);
  }

  override [Symbol.iterator](): MapIterator<[string, R]> {
    return this.entries();
  }

  /**
   * The values, in the map's order, written into `out` from index `at`;
   * the index past the last. For a list of every rule (RuleSet.effective):
   * values() gave each through a generator's result object, and a spread
   * of it grew its array step by step (at a start of a million sessions
   * and a million policies, 220 MB of garbage).
   */
  valuesInto(out: R[], at: number): number {
    const gone = this.#gone;
    const rows = this.#rows;
    const n = gone.length;
    if (this.#replaced.size === 0) {
      for (let i = 0; i < n; i++) if (gone[i] === 0) out[at++] = rows.rule(i);
    } else {
      for (let i = 0; i < n; i++) if (gone[i] === 0) out[at++] = this.#value(i);
    }
    const added = this.#added;
    const addedGone = this.#addedGone;
    for (let j = 0; j < added.length; j++) if (addedGone[j] === 0) out[at++] = added[j]!;
    return at;
  }

  /**
   * A page of keys (src/daemon/api.ts pageKeysSlices: the `limit` smallest
   * key texts after `after`, in order, and whether more follow) with a key
   * text made only for the keys of the page: a page walks every key, and
   * made for each, the texts of a million TEID policies took 0.8-1.0 s a
   * page (0.1 s from a Map's texts). The order comes from the key bytes
   * (KeyedRows.order). Undefined when some key has none (IPv6 sessions) or
   * `after` or a key kept by its text is not a canonical key text: the
   * caller pages by the texts then. `tick` says when to yield (a slice is over).
   */
  pageSlices(after: string | undefined, limit: number, tick: () => boolean): Generator<void, { keys: string[]; more: boolean }> | undefined {
    const order = this.#rows.order;
    if (!this.#orderable || order === undefined) return undefined;
    const ordOf = (text: string, out: Float64Array): boolean => this.#rows.textBytes(text, this.#scratch) === true && order(this.#scratch, out);
    const a = new Float64Array(2);
    if (after !== undefined && !ordOf(after, a)) return undefined;
    // Checked before the first slice: a key added later is paged by its order, or left out when it has none.
    for (let j = 0; j < this.#added.length; j++) {
      if (this.#addedGone[j] === 1) continue;
      const text = this.#oddText.get(j);
      if (text !== undefined ? !ordOf(text, this.#ord) : (this.#rows.keyBytesOf(this.#added[j]!, this.#probe), !order(this.#probe, this.#ord))) return undefined;
    }
    return this.#pageSlices(after === undefined ? undefined : [a[0]!, a[1]!], limit, tick, ordOf);
  }

  *#pageSlices(after: [number, number] | undefined, limit: number, tick: () => boolean, ordOf: (text: string, out: Float64Array) => boolean): Generator<void, { keys: string[]; more: boolean }> {
    // A max-heap of the `limit` smallest: each entry's two order numbers and its key (a row, or ~index of a key text in `texts`).
    const h0 = new Float64Array(limit);
    const h1 = new Float64Array(limit);
    const hk = new Int32Array(limit);
    const texts: string[] = [];
    /** The order pairs in the heap (a row visited once; a key set again meanwhile is met twice). */
    const inHeap = new Set<string>();
    let n = 0;
    let more = false;
    const gt = (i: number, j: number): boolean => h0[i]! > h0[j]! || (h0[i] === h0[j] && h1[i]! > h1[j]!);
    const swap = (i: number, j: number): void => {
      const x0 = h0[i]!, x1 = h1[i]!, xk = hk[i]!;
      h0[i] = h0[j]!; h1[i] = h1[j]!; hk[i] = hk[j]!;
      h0[j] = x0; h1[j] = x1; hk[j] = xk;
    };
    const down = (i: number, len: number): void => {
      for (;;) {
        const l = 2 * i + 1;
        if (l >= len) return;
        const c = l + 1 < len && gt(l + 1, l) ? l + 1 : l;
        if (!gt(c, i)) return;
        swap(i, c);
        i = c;
      }
    };
    const ord = new Float64Array(2);
    // The added rows as they are when the walk begins: a rebuild that renumbers them makes new lists (these
    // stay as they were; a key deleted after it may still be listed, and one added after it is not, as a key
    // added after the walk); the gone flags are read as the walk goes.
    const added = this.#added;
    const addedGone = this.#addedGone;
    const oddText = new Map(this.#oddText);
    /**
     * Take the key whose order is in `ord`: a list row (`key` >= 0), or
     * added row `~key` (its text made only if it goes into the page: a text
     * for every added row was a million strings a page; found in review),
     * or a text (`text`).
     */
    const take = (key: number, text?: string): void => {
      const o0 = ord[0]!;
      const o1 = ord[1]!;
      if (after !== undefined && (o0 < after[0] || (o0 === after[0] && o1 <= after[1]))) return;
      // Full, and not before the largest kept: after the page (no text made for the check below).
      if (n === limit && !(o0 < h0[0]! || (o0 === h0[0] && o1 < h1[0]!))) {
        // The largest kept met again (its key set again meanwhile) is not one more.
        if (!(o0 === h0[0] && o1 === h1[0])) more = true;
        return;
      }
      const id = `${o0} ${o1}`;
      if (inHeap.has(id)) return;
      if (key < 0 || text !== undefined) {
        texts.push(text ?? this.#rows.keyOf(added[~key]!));
        key = ~(texts.length - 1);
      }
      if (n < limit) {
        h0[n] = o0; h1[n] = o1; hk[n] = key;
        inHeap.add(id);
        for (let i = n++; i > 0; ) {
          const up = (i - 1) >> 1;
          if (!gt(i, up)) break;
          swap(i, up);
          i = up;
        }
        return;
      }
      more = true;
      inHeap.delete(`${h0[0]} ${h1[0]}`);
      h0[0] = o0; h1[0] = o1; hk[0] = key;
      inHeap.add(id);
      down(0, n);
    };
    const order = this.#rows.order!;
    const probe = new Uint8Array(this.#rows.keyLength);
    const rows = this.#rows.count;
    for (let i = 0; i < rows; i++) {
      if (tick()) yield;
      if (this.#gone[i] === 1) continue;
      this.#rows.keyBytes(i, probe);
      order(probe, ord);
      take(i);
    }
    for (let j = 0; j < added.length; j++) {
      if (tick()) yield;
      if (addedGone[j] === 1) continue;
      const text = oddText.get(j);
      if (text !== undefined) {
        // A key kept by its text with no order, set while this page was made: left out (as a key added after the walk).
        if (!ordOf(text, ord)) continue;
        take(-1, text);
      } else {
        this.#rows.keyBytesOf(added[j]!, probe);
        if (!order(probe, ord)) continue;
        take(~j);
      }
    }
    for (let end = n - 1; end > 0; end--) {
      if (tick()) yield;
      swap(0, end);
      down(0, end);
    }
    const keys: string[] = [];
    for (let i = 0; i < n; i++) {
      const key = hk[i]!;
      keys.push(key >= 0 ? this.#rows.keyText(key) : texts[~key]!);
    }
    return { keys, more };
  }

  override forEach(f: (value: R, key: string, map: Map<string, R>) => void, thisArg?: unknown): void {
    for (const [k, v] of this.entries()) f.call(thisArg, v, k, this);
  }
}

/** Two rows with one key: `row`, and the earlier row `first`. */
export class RepeatedRowKey extends Error {
  constructor(
    readonly row: number,
    readonly first: number,
  ) {
    super(`rows ${first} and ${row} have the same key`);
  }
}
