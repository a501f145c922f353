/**
 * The sessions and policies of a POST /v1/batch are kept as rows of the
 * batch's own store (src/config/rows.ts, SessionRows and PolicyRows with
 * `apiWhere`), not as the rule reader's object graph: at a million sessions
 * and a million policies through /v1/batch those objects (the rule, its
 * `ue` or `match` and `teid` objects, a heap number per address) were
 * about 230 B a rule of the 1.2 GB the daemon held (issue 19). A row
 * answers what the object did: every field, its JSON, its key, its state
 * line; its `where` is the API's. So do the rows a restart reads back
 * from the batch's record in the state file.
 */
import { appendFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { API_WHERE } from '../../src/config/keys.js';
import { parseConfig } from '../../src/config/load.js';
import { BATCH_ROWS_FROM, plainRule, PolicyRule, RuleRows, SessionRule, SessionRows, STORE_ROWS } from '../../src/config/rows.js';
import type { Policy, Session } from '../../src/config/types.js';
import { planBatch } from '../../src/daemon/batch.js';
import { emptyOverlay, foundRule, RULE_KINDS, RuleSet, StateStore, type Rule, type RuleKind } from '../../src/daemon/rules.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const config = (n: number): ReturnType<typeof parseConfig> => parseConfig(`settings: { max_policies: ${n}, max_sessions: ${n} }\n`, 'rows.yaml');

/** Sessions and policies in every form a row keeps: names, an IPv6 UE, rqi, segments, srh, hop_limit, mtu, a sid, TEID prefixes. */
const SESSIONS: Record<string, unknown>[] = [
  { ue: '10.0.0.1/32', teid: '0x1', qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64' },
  { name: 's-two', ue: '10.0.1.0/24', teid: 4294967295, qfi: 63, rqi: true, endpoint: '255.255.255.254', source: '203.0.113.9', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64', segments: ['2001:db8:a::1', '2001:db8:b::2'], srh: 'always', hop_limit: 9, mtu: 1400 },
  { name: 'v6', ue: '2001:db8:77::/64', teid: 7, qfi: 1, endpoint: '192.0.2.7', source: '198.51.100.7', isd: '2001:db8:3::/56', src_prefix: '2001:db8:fe::/64' },
];
const POLICIES: Record<string, unknown>[] = [
  { match: '100.64.0.1/32', teid: '5/32', sr_prefix: '2001:db9:1::/48', src_prefix: '2001:db8:ffff::/64' },
  { name: 'p-two', match: '10.9.0.0/16', sr_prefix: '2001:db9:2::/48', src_prefix: '2001:db8:ffff::/64', segments: ['2001:db8:c::3'], hop_limit: 3 },
  { name: 'pe', match: '100.64.0.2/32', teid: '0x12340000/16', sid: '2001:db8:e::d4', src_prefix: '2001:db8:ffff::/64', mtu: 1500 },
];

/** `ops` and after them sessions of other keys (10.200.x.y), up to BATCH_ROWS_FROM operations: a smaller batch keeps objects. */
function padded(ops: readonly unknown[]): unknown[] {
  const pad = Array.from({ length: Math.max(0, BATCH_ROWS_FROM - ops.length) }, (_, i) => ({ op: 'add', session: { ...SESSIONS[0], ue: `10.200.${i >> 8}.${i & 255}/32` } }));
  return [...ops, ...pad];
}

function applied(set: RuleSet, ops: readonly unknown[]): void {
  // As the daemon applies a plan (Daemon.#applyBatch): each key's rule put with the set's rule before it and its key.
  const plan = planBatch(set, ops);
  for (const [kind, d] of plan.delta) {
    const before = plan.before.get(kind)!;
    for (const [key, r] of d) {
      if (r === null) set.delete(kind, key, foundRule(before.get(key)));
      else set.put(kind, r, foundRule(before.get(key)), key);
    }
  }
}

describe("a batch's sessions and policies are rows", () => {
  for (const [kind, items] of [
    ['session', SESSIONS],
    ['policy', POLICIES],
  ] as const) {
    it(`${kind}: a row of the batch's store, answering as the reader's object (fields, JSON, key, where)`, () => {
      const set = new RuleSet(config(1024), emptyOverlay());
      const k = RULE_KINDS[kind as RuleKind];
      const plan = planBatch(set, padded(items.map((x) => ({ op: 'add', [kind]: x }))));
      const rules = [...plan.delta.get(kind)!.entries()].slice(0, items.length);
      const stores = new Set<unknown>();
      for (let i = 0; i < items.length; i++) {
        const [key, r] = rules[i]!;
        const store = kind === 'session' ? SessionRule.rowsOf(r as Session) : PolicyRule.rowsOf(r as Policy);
        expect(store, `${kind} ${i} is a row`).toBeDefined();
        stores.add(store);
        const object = k.parse(items[i], API_WHERE);
        expect(r!.where).toBe(API_WHERE);
        expect(plainRule(r as Rule)).toEqual(object);
        expect(Object.keys(plainRule(r as Rule))).toEqual(Object.keys(object));
        expect(k.json(r as Rule)).toEqual(k.json(object));
        expect(key).toBe(k.key(object));
        expect(k.key(r as Rule)).toBe(key);
      }
      // One store for the batch's first rules of a kind.
      expect(stores.size).toBe(1);
      // The record's line of each is the object's.
      const record = JSON.parse(plan.line.json) as { batch: { rule: unknown }[] };
      expect(record.batch.slice(0, items.length).map((l) => l.rule)).toEqual(items.map((x) => k.json(k.parse(x, API_WHERE))));
    });
  }

  it(`keeps the objects of a batch of fewer than ${BATCH_ROWS_FROM} operations, rows from ${BATCH_ROWS_FROM} on`, () => {
    for (const [n, rows] of [
      [BATCH_ROWS_FROM - 1, false],
      [BATCH_ROWS_FROM, true],
    ] as const) {
      const set = new RuleSet(config(1024), emptyOverlay());
      const plan = planBatch(
        set,
        Array.from({ length: n }, (_, i) => ({ op: 'add', policy: { ...POLICIES[0], match: `100.65.${i >> 8}.${i & 255}/32` } })),
      );
      for (const r of plan.delta.get('policy')!.values()) expect(PolicyRule.rowsOf(r as Policy) !== undefined, `${n} operations`).toBe(rows);
    }
  });

  it(`keeps at most ${STORE_ROWS} rows a store, each row in order, the last store cut to its rows`, () => {
    const set = new RuleSet(config(4096), emptyOverlay());
    const n = 2 * STORE_ROWS + 5;
    const plan = planBatch(
      set,
      Array.from({ length: n }, (_, i) => ({ op: 'add', session: { ...SESSIONS[0], ue: `10.1.${i >> 8}.${i & 255}/32` } })),
    );
    const stores = new Map<unknown, number>();
    for (const r of plan.delta.get('session')!.values()) {
      const store = SessionRule.rowsOf(r as Session)!;
      stores.set(store, (stores.get(store) ?? 0) + 1);
    }
    expect([...stores.values()]).toEqual([STORE_ROWS, STORE_ROWS, 5]);
    expect([...stores.keys()].map((x) => (x as { count: number }).count)).toEqual([STORE_ROWS, STORE_ROWS, 5]);
    // The last store's columns cut to its 5 rows (its data's columns are the store's own).
    expect((([...stores.keys()][2] as SessionRows).data().teid).length).toBe(5);
    expect([...plan.delta.get('session')!.values()].map((r) => r!.ue.prefix.addr - 0x0a010000)).toEqual(Array.from({ length: n }, (_, i) => i));
  });

  it('rows put into the set are what the set, its listing and a replace through the API answer from', () => {
    const set = new RuleSet(config(1024), emptyOverlay());
    applied(set, padded([...SESSIONS.map((session) => ({ op: 'add', session })), ...POLICIES.map((policy) => ({ op: 'add', policy }))]));
    expect(SessionRule.rowsOf(set.sessions.get('10.0.1.0/24')!)).toBeDefined();
    expect(set.sessions.size).toBe(BATCH_ROWS_FROM - POLICIES.length);
    expect(set.policies.size).toBe(POLICIES.length);
    const k = RULE_KINDS.session;
    expect(k.json(set.sessions.get('10.0.1.0/24')!)).toEqual(k.json(k.parse(SESSIONS[1], API_WHERE)));
    expect(set.find('session', { name: 'v6' })).toBe('2001:db8:77::/64');
    expect(set.find('policy', { name: 'pe' })).toBe('100.64.0.2/32 teid 0x12340000/16');
    expect(set.source('policy', '100.64.0.1/32 teid 0x00000005/32')).toBe('api');
    // The same key replaced, then deleted, in a later batch.
    applied(set, [
      { op: 'replace', session: { ...SESSIONS[1], qfi: 5 } },
      { op: 'delete', policy: { name: 'pe' } },
    ]);
    expect(set.sessions.get('10.0.1.0/24')!.qfi).toBe(5);
    expect(set.sessions.get('10.0.1.0/24')!.name).toBe('s-two');
    expect(set.find('policy', { name: 'pe' })).toBeUndefined();
    expect(set.policies.size).toBe(POLICIES.length - 1);
    expect(set.sessions.size).toBe(BATCH_ROWS_FROM - POLICIES.length);
  });
});

describe("a batch's record read back from the state file keeps its sessions and policies as rows", () => {
  it('the same rules (JSON, key, name) as the batch put, each a row whose where is the record\'s place', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mup-batch-rows-'));
    try {
      const path = join(dir, 'state.json');
      const set = new RuleSet(config(1024), emptyOverlay());
      const ops = padded([...SESSIONS.map((session) => ({ op: 'add', session })), ...POLICIES.map((policy) => ({ op: 'add', policy }))]);
      const plan = planBatch(set, ops);
      const s = new StateStore(path);
      s.rewrite('t', 'rows.yaml', 'cd'.repeat(32), emptyOverlay());
      s.close();
      appendFileSync(path, plan.line.bytes);
      const read = new StateStore(path).read()!;
      for (const [kind, items] of [
        ['session', SESSIONS],
        ['policy', POLICIES],
      ] as const) {
        const k = RULE_KINDS[kind];
        const put = new Map([...(read.overlay[k.overlay.put] as Map<string, Rule>)].slice(0, items.length));
        expect([...put.keys()]).toEqual(items.map((x) => k.key(k.parse(x, API_WHERE))));
        for (const [key, r] of put) {
          const store = kind === 'session' ? SessionRule.rowsOf(r as Session) : PolicyRule.rowsOf(r as Policy);
          expect(store, `${kind} ${key} is a row`).toBeDefined();
          expect(typeof r.where).toBe('string');
          expect(r.where).not.toBe(API_WHERE);
          expect(k.key(r)).toBe(key);
        }
        expect([...put.values()].map((r) => k.json(r))).toEqual(items.map((x) => k.json(k.parse(x, API_WHERE))));
      }
      // The rule set made of it answers as the one the batch was put into.
      applied(set, ops);
      const back = new RuleSet(config(1024), read.overlay);
      for (const kind of ['session', 'policy'] as const) {
        const k = RULE_KINDS[kind];
        expect([...back.rules(kind)].map(([key, r]) => [key, k.json(r), back.source(kind, key), r.name])).toEqual([...set.rules(kind)].map(([key, r]) => [key, k.json(r), set.source(kind, key), r.name]));
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** The heap and the buffers outside it (a store's columns) after a full collection. */
function heapAfterGc(): number {
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

/**
 * The ceiling this test holds the code to (heap and buffers per rule put
 * through a batch, the rule set's maps and their key texts included).
 * Measured here: 411 B with the reader's objects kept (session 51), 251-256
 * B as rows. A store made for each one-operation batch: 3.6 KB a rule.
 */
const MAX_BATCH_BYTES_PER_RULE = 300;

/** A session in its common form, UE 10.x.y.z from `i`. */
const session = (i: number): Record<string, unknown> => ({ ue: `10.${i >> 16}.${(i >> 8) & 255}.${i & 255}/32`, teid: `0x${(i + 1).toString(16)}`, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64' });

describe('memory kept per rule put through /v1/batch', () => {
  it(`at most ${MAX_BATCH_BYTES_PER_RULE} B of heap and buffers per rule (20,000 sessions + 20,000 policies in batches of 10,000)`, () => {
    const n = 20000;
    const set = new RuleSet(config(2 * n), emptyOverlay());
    const before = heapAfterGc();
    for (let at = 0; at < n; at += 10000) {
      applied(
        set,
        Array.from({ length: 10000 }, (_, j) => {
          const i = at + j;
          return { op: 'add', session: session(i) };
        }),
      );
      applied(
        set,
        Array.from({ length: 10000 }, (_, j) => {
          const i = at + j;
          return { op: 'add', policy: { match: `100.64.${i >> 10}.${(i >> 2) & 255}/32`, teid: `${i}/32`, sr_prefix: '2001:db9:1::/48', src_prefix: '2001:db8:ffff::/64' } };
        }),
      );
    }
    const after = heapAfterGc();
    expect(set.sessions.size + set.policies.size).toBe(2 * n);
    const perRule = (after - before) / (2 * n);
    process.stdout.write(`heap and buffers kept per rule put through a batch: ${perRule.toFixed(0)} B\n`);
    expect(perRule).toBeGreaterThan(0);
    expect(perRule).toBeLessThan(MAX_BATCH_BYTES_PER_RULE);
  });

  it('a batch of one operation keeps the object, not a store of its own (2,000 of them: under 500 B a rule)', () => {
    const set = new RuleSet(config(4096), emptyOverlay());
    const before = heapAfterGc();
    for (let i = 0; i < 2000; i++) applied(set, [{ op: 'add', session: session(i) }]);
    const perRule = (heapAfterGc() - before) / 2000;
    process.stdout.write(`heap and buffers kept per rule put one a batch: ${perRule.toFixed(0)} B\n`);
    expect(set.sessions.size).toBe(2000);
    expect(perRule).toBeLessThan(500);
  });

  it('a store costs under 2 KB of its own (2,000 stores of one row: one buffer for its columns, its maps made when needed)', () => {
    const s = RULE_KINDS.session.parse(session(1), API_WHERE) as Session;
    const keep: unknown[] = [];
    const before = heapAfterGc();
    for (let k = 0; k < 2000; k++) {
      const r = new RuleRows(API_WHERE);
      keep.push(r.session(s, 1));
      r.trim();
    }
    const perStore = (heapAfterGc() - before) / 2000;
    process.stdout.write(`heap and buffers a store of one row keeps: ${perStore.toFixed(0)} B (${keep.length} stores)\n`);
    // A buffer per column and its maps made at once: 3.2 KB. What a buffer costs outside V8's heap beside its
    // bytes (its backing store's bookkeeping, the allocator's) is not counted here: the columns in one buffer
    // save that too, six times a store.
    expect(perStore).toBeLessThan(2048);
  });
});
