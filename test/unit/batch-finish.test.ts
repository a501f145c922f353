/**
 * A batch's plan is finished in slices too (issue 19): after every
 * operation is validated, finish() turns the net changes into the table
 * changes and the state record, serialising one line per change; with
 * 10,000 changes that was 25-55 ms in the same turn as the table write. It
 * yields every FINISH_SLICE changes, and the record it makes is what
 * JSON.stringify of the record object gives (one line, replayed as before).
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { FINISH_SLICE, planBatch, planBatchYielding, RecordBytes } from '../../src/daemon/batch.js';
import { emptyOverlay, RULE_KINDS, RuleSet } from '../../src/daemon/rules.js';

const N = 3 * FINISH_SLICE + 7;
const policy = (i: number): Record<string, string> => ({ name: `p${i}`, match: `10.${i >> 8}.${i & 255}.0/24`, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' });
const config = parseConfig(`settings: { max_policies: 8192, max_localsids: 16 }\npolicies:\n  - { name: f1, match: 192.0.2.0/24, sr_prefix: "2001:db8:9::/48", src_prefix: "2001:db8:ff::/64" }\n`, 'finish.yaml');
const ops = [...Array.from({ length: N }, (_, i) => ({ op: 'add', policy: policy(i) })), { op: 'delete', policy: { name: 'f1' } }];

describe('a batch plan finished in slices', () => {
  it('lets the event loop run while the record is made (the operations validated in one slice here)', async () => {
    const set = new RuleSet(config, emptyOverlay());
    let turns = 0;
    const timer = setInterval(() => turns++, 0);
    let plan;
    try {
      // All operations in one validation slice (no count, no time limit): any turn of the loop is finish()'s.
      plan = await planBatchYielding(set, ops, ops.length, Infinity);
    } finally {
      clearInterval(timer);
    }
    expect(plan.counts).toEqual({ added: N, replaced: 0, deleted: 1 });
    expect(turns, 'timer turns while the plan was finished').toBeGreaterThanOrEqual(2);
  });

  it('makes the record JSON.stringify would: one change per line of the batch, in order, with its base', () => {
    const set = new RuleSet(config, emptyOverlay());
    const plan = planBatch(set, ops);
    const record = JSON.parse(plan.line.json) as { batch: Record<string, unknown>[] };
    expect(record.batch).toHaveLength(N + 1);
    const k = RULE_KINDS.policy;
    const expected = [
      ...Array.from({ length: N }, (_, i) => ({ put: 'policy', rule: k.json(k.parse(policy(i), 't')), base: null })),
      { del: 'policy', key: '192.0.2.0/24', base: set.base('policy', '192.0.2.0/24') },
    ];
    expect(record.batch).toEqual(expected);
    expect(plan.line.json).toBe(JSON.stringify({ batch: expected }));
  });
  it('makes the same bytes across the record buffer\'s growth (bytes = Buffer.from of the text)', () => {
    const set = new RuleSet(config, emptyOverlay());
    // 2,000 rules with names of different lengths (rule names are ASCII): the record grows past its first buffer several times.
    const named = Array.from({ length: 2000 }, (_, i) => ({ op: 'add', policy: { ...policy(i), name: `p${i}-${'x.@+'.repeat(i % 14)}` } }));
    const plan = planBatch(set, named);
    const k = RULE_KINDS.policy;
    const text = JSON.stringify({ batch: named.map((o) => ({ put: 'policy', rule: k.json(k.parse(o.policy, 't')), base: null })) });
    expect(plan.line.json).toBe(text);
    expect(plan.line.bytes.equals(Buffer.from(`${text}\n`))).toBe(true);
  });
  it('writes text outside ASCII (3- and 4-byte UTF-8) as UTF-8, across the buffer\'s growth', () => {
    // No rule name takes such characters since session names are checked as the others' (a session named
    // "ue-0-é€𝄞" is refused: test/unit/api-edges.test.ts); the record's writer still writes any text exactly.
    const texts = Array.from({ length: 1500 }, (_, i) => `{"name":${JSON.stringify(`ue-${i}-é€𝄞${'ü'.repeat(i % 20)}`)}}`);
    const r = new RecordBytes('{"batch":[', 64);
    texts.forEach((t, i) => {
      if (i > 0) r.byte(0x2c);
      r.text(t);
    });
    r.text(']}');
    expect(r.capacity).toBeGreaterThan(16 * 1024);
    expect(r.done().equals(Buffer.from(`{"batch":[${texts.join(',')}]}`))).toBe(true);
  });
});
