/**
 * POST /v1/batch (docs/api.md, "Batch"): many rule changes validated as a
 * whole against the running rule set, then applied all together (one table
 * write, in slices with the event loop running between them; one
 * state-file record) or not at all.
 *
 * planBatch() only reads the rule set: it works on a delta (key -> the rule
 * after the batch, or null for deleted) on top of it, so that operation i
 * sees what operations 0..i-1 did (add then replace the same key is fine;
 * add twice is a conflict). Nothing is written until the whole plan holds.
 */
import { ConfigError } from '../config/errors.js';
import { checkAdvertiseHasBgp, clipped, describe, placed } from '../config/load.js';
import type { LocalSid, Policy, Session } from '../config/types.js';
import { BATCH_ROWS_FROM, RuleRows } from '../config/rows.js';
import { API_WHERE } from '../config/keys.js';
import type { Changes } from '../dataplane/tables.js';
import { foundRule, getOwn, JsonLine, learnedDeleteText, writeDeleteLine, writePutLine, learnedKeyText, learnedNameText, RULE_KINDS, RuleError, type Rule, type RuleJson, type RuleKind, type RuleSet } from './rules.js';
import { nextTurn, runNow, runYielding } from './slices.js';
import { SLICE_MS, SliceClock } from '../host/slice-clock.js';

/** Operations per request, at most. */
export const MAX_BATCH_OPERATIONS = 10_000;

export type BatchOpName = 'add' | 'replace' | 'delete';

/**
 * An add or replace read from the body's bytes (src/daemon/batch-bytes.ts):
 * its rule is valid and a row already; Planner.step checks it against the
 * set and the batch as any other.
 */
export class FlatOp {
  constructor(
    readonly op: 'add' | 'replace',
    readonly kind: 'session' | 'policy',
    readonly rule: Session | Policy,
  ) {}
}

/** A batch refused before anything was applied: 422 (invalid) or 409 (conflict), naming the operation and key path. */
export class BatchError extends RuleError {
  constructor(
    message: string,
    status: 409 | 422,
    code: string,
    readonly index: number,
    readonly path: string,
  ) {
    super(message, status, code);
  }
}

export interface BatchResult {
  readonly op: BatchOpName;
  readonly kind: RuleKind;
  readonly key: string;
}

/**
 * One kind's keys a plan touched, in first-touched order, as three lists:
 * each key, the rule there after the batch (null: deleted), and the rule
 * set's rule there before it (undefined: none) as the plan looked it up:
 * handed on (RuleSet.put/delete/base's `current`) instead of looked up
 * again. At a million rules a look-up of a key the set has not is a few
 * cache misses (about 0.6 us), and the plan, its record and the apply
 * looked each new key up six times (profile of a million + a million
 * through /v1/batch: 1.4 s in the record's look-ups alone). One Map finds
 * a key's place: two Maps of key texts (after, before) and the lists made
 * of them were 110 MB of the 650 MB allocated over 262,144 + 262,144.
 */
export class PlanKeys {
  readonly keys: string[] = [];
  readonly rules: (Rule | null)[] = [];
  readonly befores: (Rule | undefined)[] = [];
  readonly #at = new Map<string, number>();

  get size(): number {
    return this.keys.length;
  }

  /** The place of `key`, or -1. */
  at(key: string): number {
    return this.#at.get(key) ?? -1;
  }

  /** `key` holds `rule` now (null: deleted); `before`, the set's rule there, is kept from the first time the key is touched. */
  set(key: string, rule: Rule | null, before: Rule | undefined): void {
    const i = this.#at.get(key);
    if (i !== undefined) {
      this.rules[i] = rule;
      return;
    }
    this.#at.set(key, this.keys.length);
    this.keys.push(key);
    this.rules.push(rule);
    this.befores.push(before);
  }
}

export interface BatchPlan {
  readonly results: BatchResult[];
  /** Per kind: the keys the batch touched (PlanKeys). */
  readonly touched: ReadonlyMap<RuleKind, PlanKeys>;
  /** Per kind: key -> the rule after the batch (null: deleted), in first-touched order (made from `touched` when asked). */
  readonly delta: ReadonlyMap<RuleKind, ReadonlyMap<string, Rule | null>>;
  /** Per kind: key -> the rule set's rule there before the batch (undefined: none), for every key of `delta` (made from `touched` when asked). */
  readonly before: ReadonlyMap<RuleKind, ReadonlyMap<string, Rule | undefined>>;
  /** The table changes that make the batch (one Tables.applyYielding). */
  readonly changes: Changes;
  /** The table changes that undo it. */
  readonly undo: Changes;
  /** The state-file record, serialised (its lines are made in slices too). */
  readonly line: JsonLine;
  readonly counts: { added: number; replaced: number; deleted: number };
}

const KIND_NAMES = Object.keys(RULE_KINDS) as RuleKind[];


/** An operation's path, and its rule's, made only for an error: 10,000 operations a request. */
const atOf = (i: number): string => `operations[${i}]`;
const whereOf = (i: number, kind: string): string => `operations[${i}].${kind}`;

function fail(i: number, path: string, status: 409 | 422, code: string, message: string): never {
  throw new BatchError(`operations[${i}]${message.startsWith(':') ? '' : ': '}${message}`, status, code, i, path);
}

/**
 * The shape of the document ({"operations": [...]}). Throws BatchError
 * (status 400 via `malformed`) for a document that is not one.
 */
export function batchOperations(body: unknown): unknown[] {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new RuleError('the body must be an object {"operations": [...]}', 400, 'malformed');
  }
  const extra = Object.keys(body).filter((k) => k !== 'operations');
  if (extra.length > 0) throw new RuleError(`unknown key ${extra[0]}: the body is {"operations": [...]}`, 400, 'malformed');
  const ops = (body as { operations?: unknown }).operations;
  if (!Array.isArray(ops)) throw new RuleError('operations: expected a list of {"op": "add"|"replace"|"delete", "<kind>": {...}}', 400, 'malformed');
  if (ops.length > MAX_BATCH_OPERATIONS) {
    throw new RuleError(`operations: ${ops.length} operations; at most ${MAX_BATCH_OPERATIONS} per request: split them`, 400, 'malformed');
  }
  return ops;
}

/**
 * Plan a batch against the rule set (throws BatchError at the first
 * operation that does not hold; nothing is written). planBatchYielding is
 * the same, letting the event loop run between slices of operations.
 */
export function planBatch(set: RuleSet, ops: readonly unknown[]): BatchPlan {
  const p = new Planner(set, ops.length);
  ops.forEach((raw, i) => p.step(raw, i));
  return runNow(p.finish());
}

/** Operations planned between two turns of the event loop at most (about 10 ms of validation here); fewer when SLICE_MS is up first. */
export const PLAN_SLICE = 500;

/**
 * planBatch in slices of `slice` operations, the event loop running between
 * them (reads are answered meanwhile). The caller holds the daemon's serial
 * section, so the rule set does not change under the plan.
 */
export async function planBatchYielding(set: RuleSet, ops: readonly unknown[], slice = PLAN_SLICE, sliceMs = SLICE_MS): Promise<BatchPlan> {
  const p = new Planner(set, ops.length);
  const clock = new SliceClock(sliceMs);
  for (let i = 0; i < ops.length; i++) {
    if (i > 0 && (i % slice === 0 || clock.tick())) await nextTurn();
    p.step(ops[i], i);
  }
  // The plan's table changes and its record: FINISH_SLICE changes a turn.
  return runYielding(p.finish());
}

/** Changes (keys of the net effect) finish() turns into state lines between two turns of the event loop, at most (fewer when SLICE_MS is up first). */
export const FINISH_SLICE = 1000;

/** The state of a plan after operations 0..i: see planBatch. */
class Planner {
  readonly #set: RuleSet;
  readonly #touched = new Map<RuleKind, PlanKeys>(KIND_NAMES.map((k) => [k, new PlanKeys()]));
  readonly #names = new Map<RuleKind, Map<string, string | null>>(KIND_NAMES.map((k) => [k, new Map()]));
  readonly #results: BatchResult[] = [];
  readonly #counts = { added: 0, replaced: 0, deleted: 0 };

  readonly #ops: number;

  constructor(set: RuleSet, ops: number) {
    this.#set = set;
    this.#ops = ops;
  }

  /** This batch's sessions and policies, as rows (from BATCH_ROWS_FROM operations on). */
  readonly #rows = new RuleRows(API_WHERE);

  #asRow(kind: RuleKind, rule: Rule, i: number): Rule {
    if (this.#ops < BATCH_ROWS_FROM) return rule;
    if (kind === 'session') return this.#rows.session(rule as Session, this.#ops - i);
    if (kind === 'policy') return this.#rows.policy(rule as Policy, this.#ops - i);
    return rule;
  }

  #cur(kind: RuleKind, key: string): Rule | undefined {
    const d = this.#touched.get(kind)!;
    const i = d.at(key);
    if (i >= 0) return d.rules[i] ?? undefined;
    return this.#set.rules(kind).get(key);
  }

  /** #cur of `rule`'s own key, the set asked by the rule's key bytes (getOwn): no key text read back. */
  #curOf(kind: RuleKind, key: string, rule: Rule): Rule | undefined {
    const d = this.#touched.get(kind)!;
    const i = d.at(key);
    if (i >= 0) return d.rules[i] ?? undefined;
    return getOwn(this.#set.rules(kind), key, rule);
  }

  #ownerOf(kind: RuleKind, name: string): string | undefined {
    const n = this.#names.get(kind)!;
    if (n.has(name)) return n.get(name) ?? undefined;
    return this.#set.find(kind, { name });
  }

  /** Operation's effect: `key` holds `rule` (null: deleted) where it held `old` (#cur's, looked up once by the caller: at a million rules each lookup is a cache miss or two). */
  #change(kind: RuleKind, key: string, old: Rule | undefined, rule: Rule | null): void {
    if (old?.name !== undefined) this.#names.get(kind)!.set(old.name, null);
    if (rule?.name !== undefined) this.#names.get(kind)!.set(rule.name, key);
    // First touched: `old` is the set's (#cur found no earlier operation's), and kept as its `before`.
    this.#touched.get(kind)!.set(key, rule, old);
  }

  step(raw: unknown, i: number): void {
    // Read from the body's bytes (src/daemon/batch-bytes.ts): a valid rule, a row already.
    if (raw instanceof FlatOp) return this.#put(raw.op, raw.kind, raw.rule, RULE_KINDS[raw.kind].key(raw.rule), i);
    const results = this.#results;
    const counts = this.#counts;
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) fail(i, atOf(i), 422, 'invalid', 'expected {"op": "add"|"replace"|"delete", "<kind>": {...}}');
    const o = raw as Record<string, unknown>;
    const op = o['op'];
    if (op !== 'add' && op !== 'replace' && op !== 'delete') fail(i, `${atOf(i)}.op`, 422, 'invalid', `op: expected "add", "replace" or "delete", got ${describe(op)}`);
    // The operation's keys other than op, in Object.keys's order, with no list made of them (an operation is one of
    // 10,000 a request): the first that is not a kind is the error, then a count other than one.
    let kinds = 0;
    let first: string | undefined;
    let unknown: string | undefined;
    for (const key in o) {
      if (key === 'op' || !Object.hasOwn(o, key)) continue;
      kinds++;
      first ??= key;
      if (unknown === undefined && !KIND_NAMES.includes(key as RuleKind)) unknown = key;
    }
    if (unknown !== undefined) {
      const named = clipped(unknown, 40);
      fail(i, `${atOf(i)}.${named}`, 422, 'invalid', `${named}: not a kind of rule; use one of ${KIND_NAMES.join(', ')}`);
    }
    if (kinds !== 1) fail(i, atOf(i), 422, 'invalid', `give exactly one of ${KIND_NAMES.join(', ')} (got ${kinds})`);
    const kind = first as RuleKind;
    const k = RULE_KINDS[kind];
    const entry = o[kind];
    if (op === 'delete') {
      if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) fail(i, whereOf(i, kind), 422, 'invalid', `${kind}: expected {"${k.keyName}": PREFIX} or {"name": NAME}`);
      const e = entry as Record<string, unknown>;
      const allowed = [k.keyName, 'name', ...(kind === 'policy' ? ['teid'] : [])];
      const bad = Object.keys(e).find((x) => !allowed.includes(x));
      if (bad !== undefined) fail(i, `${whereOf(i, kind)}.${bad}`, 422, 'invalid', `${kind}.${bad}: a delete names the rule only: ${allowed.join(', ')}`);
      const keyText = e[k.keyName];
      const name = e['name'];
      if ((keyText === undefined) === (name === undefined)) fail(i, whereOf(i, kind), 422, 'invalid', `${kind}: give ${k.keyName} or name (one of them)`);
      // teid is part of a key (match + teid), never of a name: with a name it was ignored, and the
      // name's rule deleted whatever its TEID prefix.
      if (name !== undefined && e['teid'] !== undefined) fail(i, `${whereOf(i, kind)}.teid`, 422, 'invalid', `${kind}.teid: goes with ${k.keyName} (the key is the match and the TEID prefix); a delete by name names the rule alone`);
      let key: string | undefined;
      let old: Rule | undefined;
      if (keyText !== undefined) {
        if (typeof keyText !== 'string') fail(i, `${whereOf(i, kind)}.${k.keyName}`, 422, 'invalid', `${kind}.${k.keyName}: expected a prefix as a string`);
        const teid = e['teid'];
        if (teid !== undefined && typeof teid !== 'string') fail(i, `${whereOf(i, kind)}.teid`, 422, 'invalid', `${kind}.teid: expected VALUE/BITS as a string`);
        try {
          key = k.canonicalKey(teid === undefined ? keyText : `${keyText} teid ${teid}`);
        } catch (err) {
          fail(i, `${whereOf(i, kind)}.${k.keyName}`, 422, 'invalid', `${kind}.${k.keyName}: ${(err as Error).message}`);
        }
        old = this.#cur(kind, key);
        if (old === undefined) {
          if (this.#set.learned(kind).has(key)) fail(i, `${whereOf(i, kind)}.${k.keyName}`, 409, 'learned', learnedDeleteText(kind));
          fail(i, `${whereOf(i, kind)}.${k.keyName}`, 409, 'no_such_rule', `no ${k.label} with ${k.keyName} ${key} to delete`);
        }
      } else {
        if (typeof name !== 'string') fail(i, `${whereOf(i, kind)}.name`, 422, 'invalid', `${kind}.name: expected a string`);
        key = this.#ownerOf(kind, name);
        if (key === undefined) {
          if (this.#set.findLearned(kind, { name }) !== undefined) fail(i, `${whereOf(i, kind)}.name`, 409, 'learned', learnedDeleteText(kind));
          fail(i, `${whereOf(i, kind)}.name`, 409, 'no_such_rule', `no ${k.label} named ${JSON.stringify(clipped(name, 80))} to delete`);
        }
      }
      this.#change(kind, key, old ?? this.#cur(kind, key), null);
      counts.deleted++;
      results.push({ op, kind, key });
      return;
    }
    let rule: Rule;
    try {
      // Named API_WHERE, as the rule set names it (the error's path is the operation's, made below).
      rule = k.parse(entry, API_WHERE);
      if (kind === 'localsid') checkAdvertiseHasBgp(rule as LocalSid, this.#set.config.bgp, whereOf(i, kind));
    } catch (err) {
      if (err instanceof ConfigError) {
        const path = err.path === '' ? whereOf(i, kind) : `${whereOf(i, kind)}${err.path.startsWith('[') ? '' : '.'}${err.path}`;
        fail(i, path, 422, 'invalid', `${kind}${err.path === '' ? '' : `.${err.path}`}: ${err.reason}`);
      }
      fail(i, whereOf(i, kind), 422, 'invalid', `${kind}: ${(err as Error).message}`);
    }
    // The rule parsed just now, held by no one else: named in place; a session or a policy kept as a row of
    // this batch's store instead (its object is garbage at once).
    const key = k.key(rule);
    this.#put(op, kind, this.#asRow(kind, placed(rule, API_WHERE), i), key, i);
  }

  /** An add or replace of `rule` (a row, or an object named API_WHERE) at `key`, checked against the set and the batch so far. */
  #put(op: 'add' | 'replace', kind: RuleKind, rule: Rule, key: string, i: number): void {
    const k = RULE_KINDS[kind];
    const results = this.#results;
    const counts = this.#counts;
    // Learned (BGP) rules keep their keys and names against the API, as for a single change (RuleSet.check).
    const learned = this.#set.learned(kind).get(key);
    if (learned !== undefined) fail(i, `${whereOf(i, kind)}.${k.keyName}`, 409, 'learned', learnedKeyText(kind, key, learned));
    if (rule.name !== undefined && this.#set.findLearned(kind, { name: rule.name }) !== undefined) {
      fail(i, `${whereOf(i, kind)}.name`, 409, 'name_taken', learnedNameText(kind, rule.name));
    }
    const existing = this.#curOf(kind, key, rule);
    if (op === 'add' && existing !== undefined) {
      fail(i, `${whereOf(i, kind)}.${k.keyName}`, 409, 'exists', `a ${k.label} with ${k.keyName} ${key} exists already${existing.name === undefined ? '' : ` (${JSON.stringify(existing.name)})`}; use op "replace"`);
    }
    if (op === 'replace' && existing === undefined) {
      fail(i, `${whereOf(i, kind)}.${k.keyName}`, 409, 'no_such_rule', `no ${k.label} with ${k.keyName} ${key} to replace; use op "add"`);
    }
    if (rule.name !== undefined) {
      const owner = this.#ownerOf(kind, rule.name);
      if (owner !== undefined && owner !== key) {
        fail(i, `${whereOf(i, kind)}.name`, 409, 'name_taken', `name ${JSON.stringify(rule.name)} is already used by the ${k.label} with ${k.keyName} ${owner}; names must be unique`);
      }
    }
    this.#change(kind, key, existing, rule);
    if (op === 'add') counts.added++;
    else counts.replaced++;
    results.push({ op, kind, key });
  }

  /**
   * The plan of every operation stepped: the net effect per kind, the way
   * back, the record (each change's state line serialised here, the
   * costly part: it yields after every FINISH_SLICE of them).
   */
  *finish(): Generator<void, BatchPlan> {
    const set = this.#set;
    this.#rows.trim();
    const touched = this.#touched;
    // The net effect, per kind: what to write, what to delete; and the way back.
    const changes: Record<string, unknown> = {};
    // The way back's rules, made into table changes only if it is taken (a write or a record that fails): a
    // delete's key objects for every new key of the batch were 50 MB of garbage over 262,144 + 262,144.
    const undoLists: { k: (typeof RULE_KINDS)[RuleKind]; puts: Rule[]; dels: Rule[] }[] = [];
    // The record's bytes, each line encoded into them as it is made (one
    // string of the whole record, encoded at once, held the loop 6-19 ms at
    // 10,000; a slice's lines joined, then encoded, copied each byte twice).
    let hint = 0;
    for (const [, d] of touched) for (const r of d.rules) hint += r === null ? RECORD_DELETE_BYTES : RECORD_PUT_BYTES;
    const record = new RecordBytes('{"batch":[', hint);
    let first = true;
    const next = (): void => {
      if (!first) record.byte(0x2c /* , */);
      first = false;
    };
    let made = 0;
    const clock = new SliceClock();
    for (const [kind, d] of touched) {
      const k = RULE_KINDS[kind];
      const puts: Rule[] = [];
      const dels: Rule[] = [];
      const undoPuts: Rule[] = [];
      const undoDels: Rule[] = [];
      const { keys, rules, befores } = d;
      for (let at = 0; at < keys.length; at++) {
        const key = keys[at]!;
        const r = rules[at]!;
        const before = befores[at];
        if (++made % FINISH_SLICE === 0 || clock.tick()) yield;
        if (r !== null) {
          puts.push(r);
          next();
          writePutLine(record, kind, r, set.base(kind, key, foundRule(before)), key);
          if (before === undefined) undoDels.push(r);
          else undoPuts.push(before);
        } else if (before !== undefined) {
          dels.push(before);
          next();
          writeDeleteLine(record, kind, key, set.base(kind, key, foundRule(before)));
          undoPuts.push(before);
        }
      }
      if (puts.length > 0) Object.assign(changes, k.put(puts));
      if (dels.length > 0) Object.assign(changes, k.del(dels));
      undoLists.push({ k, puts: undoPuts, dels: undoDels });
    }
    let undo: Changes | undefined;
    const undoOf = (): Changes => {
      const u: Record<string, unknown> = {};
      for (const { k, puts, dels } of undoLists) {
        if (puts.length > 0) Object.assign(u, k.put(puts));
        if (dels.length > 0) Object.assign(u, k.del(dels));
      }
      return u as Changes;
    };
    // JSON.stringify({ batch: [...] }) and its newline, from the lines serialised above.
    record.text(']}\n');
    let delta: Map<RuleKind, Map<string, Rule | null>> | undefined;
    let before: Map<RuleKind, Map<string, Rule | undefined>> | undefined;
    return {
      results: this.#results,
      touched,
      get delta(): ReadonlyMap<RuleKind, ReadonlyMap<string, Rule | null>> {
        return (delta ??= new Map([...touched].map(([kind, d]) => [kind, new Map(d.keys.map((key, i) => [key, d.rules[i]!]))])));
      },
      get before(): ReadonlyMap<RuleKind, ReadonlyMap<string, Rule | undefined>> {
        return (before ??= new Map([...touched].map(([kind, d]) => [kind, new Map(d.keys.map((key, i) => [key, d.befores[i]]))])));
      },
      changes: changes as Changes,
      get undo(): Changes {
        return (undo ??= undoOf());
      },
      line: new JsonLine(record.done()),
      counts: this.#counts,
    };
  }
}

/**
 * Bytes a state line of a batch's record takes, about (a put of a policy:
 * 140; a delete 50-80): its buffer is made this large for all of them at
 * once.
 */
const RECORD_PUT_BYTES = 160;
const RECORD_DELETE_BYTES = 80;

/**
 * A record's UTF-8 bytes, written as they come into a buffer made for the
 * record's size (a guess, doubled when short). Its pages are touched as
 * the lines are written, slice by slice: a buffer doubled from 16 KB, and
 * the record copied into one of its own size at the end, touched 2-3 MB
 * of new memory in single turns (10,000 operations: turns of 10-15 ms
 * here, where a page touched for the first time costs about 17 us).
 */
export class RecordBytes {
  #buf: Buffer;
  #at = 0;

  constructor(start: string, sizeHint = 0) {
    this.#buf = Buffer.allocUnsafe(Math.max(16 * 1024, sizeHint));
    this.text(start);
  }

  #room(n: number): void {
    if (this.#at + n <= this.#buf.length) return;
    let size = this.#buf.length * 2;
    while (size < this.#at + n) size *= 2;
    const next = Buffer.allocUnsafe(size);
    this.#buf.copy(next, 0, 0, this.#at);
    this.#buf = next;
  }

  byte(b: number): void {
    this.#room(1);
    this.#buf[this.#at++] = b;
  }

  text(s: string): void {
    // At most three bytes a UTF-16 unit.
    this.#room(s.length * 3);
    this.#at += this.#buf.write(s, this.#at, 'utf8');
  }

  /** Room for `n` more bytes from `end`: the buffer to write them into (rules.ts writePutLine), `end` set past them after. */
  room(n: number): Buffer {
    this.#room(n);
    return this.#buf;
  }

  get end(): number {
    return this.#at;
  }

  set end(at: number) {
    if (at < this.#at || at > this.#buf.length) throw new RangeError(`record end ${at} outside ${this.#at}..${this.#buf.length}`);
    this.#at = at;
  }

  /**
   * The bytes written. The record is kept until its fdatasync: a view of
   * the buffer when the bytes fill half of it or more, else a copy of
   * their own size (the guess was far over).
   */
  done(): Buffer {
    const bytes = this.#buf.subarray(0, this.#at);
    return 2 * this.#at >= this.#buf.length ? bytes : Buffer.from(bytes);
  }

  /** The buffer's size (tests). */
  get capacity(): number {
    return this.#buf.length;
  }
}
