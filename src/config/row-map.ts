/**
 * The rule set's index of a list of sessions or policies by key text,
 * without a key text or a Map entry per rule: a typed hash of the rules'
 * key bytes to their place in the list (RowIndex). The key texts of a
 * million sessions and a million (N3, TEID) policies and their Map entries
 * were about 150 MB of heap. "Row" below is a place in the list; its rule
 * is a row of src/config/rows.ts (a file's rule) or an object (a reload's
 * changed rule).
 *
 * It is a Map<string, R> to its users, with a Map's insertion order: the
 * rows first, in list order, each while its key is held by its row or by
 * the rule set()'s gave it since; then the keys set() added, in order. A
 * key deleted and set again goes to the end, as in a Map. Key texts are
 * made when asked (iteration, keys()), and a key given to get() is taken
 * only in the canonical text the rows' key function makes.
 * test/unit/row-map.test.ts holds it to a Map under random changes.
 */

/**
 * The rows by key: open addressing over one Int32Array, each slot a row's
 * key hash and the row side by side (one cache line for both: as two
 * arrays, a probe of a million rows missed the cache twice), no key bytes
 * kept: a probe that meets the same hash compares the row's key bytes,
 * made from its columns. 8 bytes a slot with three slots in four used,
 * about 11 MB for a million rows, where a table keeping the keys' bytes
 * (src/host/key-index.ts) took 54 MB for a million sessions. Rows are only
 * added (the map marks a deleted row gone).
 */
class RowIndex {
  readonly #slots: number;
  /** Slot s: its hash at 2s (0: empty), its row at 2s + 1. */
  readonly #table: Int32Array;
  readonly #probe: Uint8Array;

  constructor(
    readonly rows: { keyBytes(i: number, into: Uint8Array): void },
    count: number,
    keyLength: number,
    /** The table another thread filled for the same rows (RowKeyedMap's `filled`). */
    table?: Int32Array,
  ) {
    // Any number of slots, not a power of two: a million rows take 1.33 million, not 2 (16 MB).
    const slots = Math.max(16, Math.ceil((count * 4) / 3) + 1);
    this.#slots = slots;
    if (table !== undefined && table.length !== 2 * slots) throw new Error(`internal: an index of ${table.length / 2} slots was sent for ${count} rows (${slots} slots)`);
    this.#table = table ?? new Int32Array(2 * slots);
    this.#probe = new Uint8Array(keyLength);
  }

  /** The slots (sent to another thread: RowKeyedMap.filledIndex). */
  get table(): Int32Array {
    return this.#table;
  }

  /** FNV-1a of the key bytes, never 0. */
  static hash(b: Uint8Array): number {
    let f = 0x811c9dc5;
    for (let i = 0; i < b.length; i++) {
      f ^= b[i]!;
      f = Math.imul(f, 0x01000193);
    }
    f ^= f >>> 15;
    return f === 0 ? 1 : f;
  }

  #same(row: number, key: Uint8Array): boolean {
    this.rows.keyBytes(row, this.#probe);
    for (let i = 0; i < key.length; i++) if (this.#probe[i] !== key[i]) return false;
    return true;
  }

  /** The row whose key is `key`, or -1. */
  get(key: Uint8Array): number {
    const h = RowIndex.hash(key);
    const t = this.#table;
    for (let s = (h >>> 0) % this.#slots; ; s = s + 1 === this.#slots ? 0 : s + 1) {
      const at = t[2 * s]!;
      if (at === 0) return -1;
      if (at === h && this.#same(t[2 * s + 1]!, key)) return t[2 * s + 1]!;
    }
  }

  /** Add row `row` with key `key`; the row that has the key already, or -1 when added. */
  add(key: Uint8Array, row: number): number {
    const h = RowIndex.hash(key);
    const t = this.#table;
    for (let s = (h >>> 0) % this.#slots; ; s = s + 1 === this.#slots ? 0 : s + 1) {
      const at = t[2 * s]!;
      if (at === 0) {
        t[2 * s] = h;
        t[2 * s + 1] = row;
        return -1;
      }
      if (at === h && this.#same(t[2 * s + 1]!, key)) return t[2 * s + 1]!;
    }
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
  /**
   * Two numbers in the order of the key texts (text a < text b exactly when
   * (a[0], a[1]) < (b[0], b[1])) from key bytes, into `out`; false when this
   * key has none (then pages go by the texts). See keyTextOrder in rows.ts.
   */
  order?(key: Uint8Array, out: Float64Array): boolean;
}

export class RowKeyedMap<R> extends Map<string, R> {
  readonly #rows: KeyedRows<R>;
  readonly #index: RowIndex;
  readonly #scratch: Uint8Array;
  /** 1: the row's key is not held by the row (deleted, or set again after a delete: then in #extra). */
  readonly #gone: Uint8Array;
  #live: number;
  /** A row's key set to another rule (its place kept). */
  readonly #replaced = new Map<number, R>();
  /** Keys no row holds, in the order they were set. */
  readonly #extra = new Map<string, R>();

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
    this.#index = new RowIndex(rows, rows.count, rows.keyLength, filled?.table);
    this.#scratch = new Uint8Array(rows.keyLength);
    this.#gone = new Uint8Array(rows.count);
    this.#live = rows.count;
    this.#orderable = rows.order !== undefined && (filled?.orderable ?? true);
    if (filled !== undefined) this.#filled = rows.count;
    else if (fill) this.fill(rows.count);
  }

  /**
   * The index of every row, as another thread sends it for a map of the
   * same rows there (a start's sessions read ahead: src/config/list-ahead.ts);
   * undefined until every row is indexed.
   */
  filledIndex(): FilledIndex | undefined {
    return this.#filled === this.#rows.count ? { table: this.#index.table, orderable: this.#orderable } : undefined;
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

  /** The row holding `key`, or -1. */
  #row(key: string): number {
    if (typeof key !== 'string') return -1;
    const exact = this.#rows.textBytes(key, this.#scratch);
    if (exact === false) return -1;
    const i = this.#index.get(this.#scratch);
    if (i < 0 || this.#gone[i] === 1) return -1;
    // A text read loosely (IPv6) is the row's key only in its canonical spelling, as in a Map of key texts.
    return exact === true || this.#rows.keyText(i) === key ? i : -1;
  }

  #value(i: number): R {
    return this.#replaced.has(i) ? this.#replaced.get(i)! : this.#rows.rule(i);
  }

  override get size(): number {
    return this.#live + this.#extra.size;
  }

  override get(key: string): R | undefined {
    const i = this.#row(key);
    if (i < 0) return this.#extra.get(key);
    return this.#value(i);
  }

  override has(key: string): boolean {
    return this.#row(key) >= 0 || this.#extra.has(key);
  }

  override set(key: string, value: R): this {
    const i = this.#row(key);
    if (i < 0) this.#extra.set(key, value);
    else if (value === this.#rows.rule(i)) this.#replaced.delete(i);
    else this.#replaced.set(i, value);
    return this;
  }

  override delete(key: string): boolean {
    const i = this.#row(key);
    if (i < 0) return this.#extra.delete(key);
    this.#gone[i] = 1;
    this.#replaced.delete(i);
    this.#live--;
    return true;
  }

  override clear(): void {
    this.#gone.fill(1);
    this.#live = 0;
    this.#replaced.clear();
    this.#extra.clear();
  }

  override *entries(): MapIterator<[string, R]> {
    const rows = this.#rows;
    const n = this.#gone.length;
    for (let i = 0; i < n; i++) if (this.#gone[i] === 0) yield [rows.keyText(i), this.#value(i)];
    yield* this.#extra.entries();
  }

  override *keys(): MapIterator<string> {
    const n = this.#gone.length;
    for (let i = 0; i < n; i++) if (this.#gone[i] === 0) yield this.#rows.keyText(i);
    yield* this.#extra.keys();
  }

  override *values(): MapIterator<R> {
    const rows = this.#rows;
    const n = this.#gone.length;
    for (let i = 0; i < n; i++) if (this.#gone[i] === 0) yield this.#value(i);
    yield* this.#extra.values();
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
    for (const v of this.#extra.values()) out[at++] = v;
    return at;
  }

  /**
   * A page of keys (src/daemon/api.ts pageKeysSlices: the `limit` smallest
   * key texts after `after`, in order, and whether more follow) with a key
   * text made only for the keys of the page: a page walks every key, and
   * made for each, the texts of a million TEID policies took 0.8-1.0 s a
   * page (0.1 s from a Map's texts). The order comes from the key bytes
   * (KeyedRows.order). Undefined when some key has none (IPv6 sessions) or
   * `after` or a key set() added is not a canonical key text: the caller
   * pages by the texts then. `tick` says when to yield (a slice is over).
   */
  pageSlices(after: string | undefined, limit: number, tick: () => boolean): Generator<void, { keys: string[]; more: boolean }> | undefined {
    const order = this.#rows.order;
    if (!this.#orderable || order === undefined) return undefined;
    const ordOf = (text: string, out: Float64Array): boolean => this.#rows.textBytes(text, this.#scratch) === true && order(this.#scratch, out);
    const a = new Float64Array(2);
    if (after !== undefined && !ordOf(after, a)) return undefined;
    // Checked before the first slice: a key set() adds later is paged by its text's order, or left out when it has none.
    for (const k of this.#extra.keys()) if (!ordOf(k, this.#ord)) return undefined;
    return this.#pageSlices(after === undefined ? undefined : [a[0]!, a[1]!], limit, tick, ordOf);
  }

  *#pageSlices(after: [number, number] | undefined, limit: number, tick: () => boolean, ordOf: (text: string, out: Float64Array) => boolean): Generator<void, { keys: string[]; more: boolean }> {
    // A max-heap of the `limit` smallest: each entry's two order numbers and its key (a row, or ~index of #extra's key in `texts`).
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
    const take = (key: number): void => {
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
    for (let i = 0; i < this.#gone.length; i++) {
      if (tick()) yield;
      if (this.#gone[i] === 1) continue;
      this.#rows.keyBytes(i, probe);
      order(probe, ord);
      take(i);
    }
    for (const k of this.#extra.keys()) {
      if (tick()) yield;
      // A key set() added while this page was made, with no order: left out (as a key added after the walk).
      if (!ordOf(k, ord)) continue;
      texts.push(k);
      take(~(texts.length - 1));
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
