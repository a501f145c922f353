/**
 * A POST /v1/batch body read from its bytes (docs/api.md, "Batch"): an add
 * or replace of a session or a policy in its common form, e.g.
 *
 *   {"op":"add","session":{"ue":"10.0.0.1/32","teid":"0x1","qfi":9,"endpoint":"192.0.2.1","source":"198.51.100.1","isd":"2001:db8:2::/48","src_prefix":"2001:db8:ffff::/64"}}
 *
 * goes into a row of the batch's store (src/config/rows.ts, RuleRows) by
 * the config file's flat readers (src/config/flat-rules.ts), with no parsed
 * object, string or rule reader's object made for it. Each other operation
 * is JSON.parse'd alone (its text checked for a key given twice) and
 * planned as before. The body as a whole is read this way only when it is
 * exactly {"operations": [...]} (whitespace aside), every operation's text
 * is valid JSON with no key given twice and no longer than WHOLE_MAX (a
 * longer one is read in slices), and there are at most
 * MAX_BATCH_OPERATIONS of them: for anything else the caller reads the
 * body as before (readBody, batchOperations), which words every error. So
 * a body gets the same answer either way (test/unit/batch-bytes.test.ts
 * holds the two to the same plans and errors).
 *
 * Measured before it (CPU profile, 262,144 sessions + 262,144 policies in
 * batches of 10,000): the body's parse in slices, its check for repeated
 * keys and the rule reader took about a quarter of the daemon's CPU, and
 * the parsed operations lived across the plan's slices, so the young
 * generation's collections copied and promoted them.
 */
import { asciiBytes } from '../config/ascii-text.js';
import { API_WHERE } from '../config/keys.js';
import { apiFlatDefaults } from '../config/load.js';
import { byteSpace, FlatMemberColumns, flatObjectEnd, FlatPolicies, FlatSessions } from '../config/flat-rules.js';
import { RuleRows } from '../config/rows.js';
import type { Policy, Session } from '../config/types.js';
import { SliceClock } from '../host/slice-clock.js';
import { FlatOp, MAX_BATCH_OPERATIONS } from './batch.js';
import { WHOLE_MAX } from './json-slices.js';

/** What parseOp answers for an operation's text that is not valid JSON, or gives a key twice. */
export const NOT_READ = Symbol('not read');

const OPERATIONS = asciiBytes('"operations"');
const OP = asciiBytes('"op"');
const ADD = asciiBytes('"add"');
const REPLACE = asciiBytes('"replace"');
const SESSION = asciiBytes('"session"');
const POLICY = asciiBytes('"policy"');

function at(b: Uint8Array, i: number, s: Uint8Array): boolean {
  if (i + s.length > b.length) return false;
  for (let k = 0; k < s.length; k++) if (b[i + k] !== s[k]) return false;
  return true;
}

/**
 * The end (past it) of the JSON value at b[i]: a string to its closing
 * quote, an object or list to its closing bracket (brackets counted outside
 * strings), anything else up to a separator. -1 where the bytes end first.
 * Nothing here checks the value is valid (JSON.parse of its text does).
 */
export function valueEnd(b: Uint8Array, i: number): number {
  const n = b.length;
  let depth = 0;
  for (let j = i; j < n; j++) {
    const c = b[j]!;
    if (c === 0x22 /* " */) {
      for (j++; ; j++) {
        if (j >= n) return -1;
        const x = b[j]!;
        if (x === 0x5c /* \ */) j++;
        else if (x === 0x22) break;
      }
      if (depth === 0) return j + 1;
    } else if (c === 0x7b || c === 0x5b) depth++;
    else if (c === 0x7d || c === 0x5d) {
      if (depth === 0) return j;
      if (--depth === 0) return j + 1;
    } else if (depth === 0 && (c === 0x2c || c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09)) return j;
  }
  return depth === 0 ? n : -1;
}

/** Reads a body's operations one at a time, for batchFromBytes. */
class OpReader {
  readonly rows = new RuleRows(API_WHERE);
  readonly #m = new FlatMemberColumns();
  readonly #d = apiFlatDefaults(API_WHERE);
  /** The flat readers, made at the first operation of their kind; their store is set at each (RuleRows.sessionStore). */
  #sessions: FlatSessions | undefined;
  #policies: FlatPolicies | undefined;

  constructor(
    readonly ops: unknown[],
    readonly count: number,
    readonly parseOp: (text: string) => unknown,
  ) {}

  /** The operation at b[i] added to `ops`: the index past it, or -1 (the body is to be read as before). */
  op(b: Buffer, i: number, index: number): number {
    const end = this.#flat(b, i, index);
    if (end >= 0) return end;
    const e = valueEnd(b, i);
    // A large one is read in slices with the rest of the body (json-slices.ts), not in one JSON.parse here.
    if (e <= i || e - i > WHOLE_MAX) return -1;
    const v = this.parseOp(b.toString('utf8', i, e));
    if (v === NOT_READ) return -1;
    this.ops.push(v);
    return e;
  }

  /** The flat reader of `kind`, adding to its kind's store for the next rule (`left`: rules to come at most). */
  #reader(kind: 'session' | 'policy', left: number): FlatSessions | FlatPolicies {
    if (kind === 'session') {
      const store = this.rows.sessionStore(left);
      if (this.#sessions === undefined) this.#sessions = new FlatSessions(store, this.#d);
      else this.#sessions.into(store);
      return this.#sessions;
    }
    const store = this.rows.policyStore(left);
    if (this.#policies === undefined) this.#policies = new FlatPolicies(store, this.#d);
    else this.#policies.into(store);
    return this.#policies;
  }

  /** An add or replace of a session or policy its flat reader takes, pushed as a FlatOp; -1 for any other. */
  #flat(b: Buffer, i: number, index: number): number {
    if (b[i] !== 0x7b /* { */) return -1;
    let j = byteSpace(b, i + 1);
    let op: 'add' | 'replace' | undefined;
    let kind: 'session' | 'policy' | undefined;
    for (let member = 0; member < 2; member++) {
      // Two members, each once: "op" or the kind given twice leaves the other unset (refused below).
      if (at(b, j, OP)) {
        j = byteSpace(b, j + OP.length);
        if (b[j] !== 0x3a /* : */) return -1;
        j = byteSpace(b, j + 1);
        if (at(b, j, ADD)) {
          op = 'add';
          j += ADD.length;
        } else if (at(b, j, REPLACE)) {
          op = 'replace';
          j += REPLACE.length;
        } else return -1;
      } else {
        const k = at(b, j, SESSION) ? 'session' : at(b, j, POLICY) ? 'policy' : undefined;
        if (k === undefined) return -1;
        kind = k;
        j = byteSpace(b, j + (k === 'session' ? SESSION.length : POLICY.length));
        if (b[j] !== 0x3a) return -1;
        j = byteSpace(b, j + 1);
        const end = flatObjectEnd(b, j, this.#m);
        if (end < 0) return -1;
        if (!this.#reader(k, this.count - index).read(b, this.#m, 0)) return -1;
        j = end;
      }
      j = byteSpace(b, j);
      if (member === 0) {
        if (b[j] !== 0x2c /* , */) return -1;
        j = byteSpace(b, j + 1);
      }
    }
    if (b[j] !== 0x7d /* } */ || op === undefined || kind === undefined) return -1;
    // Read into slot 0 above; its row is added only now, the operation whole.
    const rule = (kind === 'session' ? this.#sessions! : this.#policies!).add(0) as Session | Policy;
    this.ops.push(new FlatOp(op, kind, rule));
    return j + 1;
  }
}

/**
 * The operations of a batch body, read from its bytes in slices (it yields
 * when SLICE_MS is up): FlatOps and JSON.parse'd operations, in order; or
 * undefined when the body is to be read as before (see the top of this
 * file). `parseOp`: an operation's text as a value, or NOT_READ.
 */
export function* batchFromBytes(b: Buffer, parseOp: (text: string) => unknown): Generator<void, unknown[] | undefined> {
  const clock = new SliceClock();
  let i = byteSpace(b, 0);
  if (b[i] !== 0x7b /* { */) return undefined;
  i = byteSpace(b, i + 1);
  if (!at(b, i, OPERATIONS)) return undefined;
  i = byteSpace(b, i + OPERATIONS.length);
  if (b[i] !== 0x3a /* : */) return undefined;
  i = byteSpace(b, i + 1);
  if (b[i] !== 0x5b /* [ */) return undefined;
  i = byteSpace(b, i + 1);
  const ops: unknown[] = [];
  // An upper bound of the operations (each at least a byte and a separator), for the stores' first size.
  const r = new OpReader(ops, Math.min(MAX_BATCH_OPERATIONS, b.length >> 1), parseOp);
  if (b[i] !== 0x5d /* ] */) {
    for (;;) {
      if (ops.length === MAX_BATCH_OPERATIONS) return undefined;
      if (clock.tick()) yield;
      const end = r.op(b, i, ops.length);
      if (end < 0) return undefined;
      i = byteSpace(b, end);
      if (b[i] === 0x5d) break;
      if (b[i] !== 0x2c /* , */) return undefined;
      i = byteSpace(b, i + 1);
    }
  }
  i = byteSpace(b, i + 1);
  if (b[i] !== 0x7d /* } */) return undefined;
  if (byteSpace(b, i + 1) !== b.length) return undefined;
  r.rows.trim();
  return ops;
}
