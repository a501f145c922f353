/**
 * A batch's plan looks each key up in the rule set once and hands the rule
 * it found on (BatchPlan.before) to the record's bases and to the apply
 * (RuleSet.put/delete's `current`), instead of each looking it up again.
 * What the apply leaves (rules, names, overlay, the file's rules kept, each
 * key's base) and the record must be what the same batch gives looked up
 * afresh at each step, for every kind of change: a new key, a file rule
 * replaced, deleted, put back as the file has it, an API rule replaced and
 * deleted, a key added and deleted in one batch, names moved.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { planBatch } from '../../src/daemon/batch.js';
import { emptyOverlay, foundRule, RULE_KIND_LIST, RULE_KINDS, RuleSet, type RuleKind } from '../../src/daemon/rules.js';

const config = parseConfig(
  `settings: { max_policies: 64, max_localsids: 4, max_sessions: 16 }
policies:
  - { name: a, match: 10.0.1.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
  - { match: 10.0.2.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
  - { name: c, match: 10.0.3.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
sessions:
  - { ue: 10.9.0.1/32, teid: 0x10, qfi: 9, endpoint: 192.0.2.1, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }
`,
  'before.yaml',
);
const pol = (match: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({ match, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64', ...extra });
const ses = (ue: string, teid: number): Record<string, unknown> => ({ ue, teid, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' });

/** Daemon.applyBatch's rule-set part: with the plan's `before` handed on, or (`afresh`) each look-up made again. */
function apply(set: RuleSet, ops: unknown[], afresh: boolean): string {
  const plan = planBatch(set, ops);
  // The record as the plan's lines were made before the hand-on: each base looked up afresh, a line per put and per
  // delete of a rule the set has (an add then delete in one batch writes none).
  const lines: string[] = [];
  for (const [kind, d] of plan.delta) {
    for (const [key, r] of d) {
      if (r !== null) lines.push(JSON.stringify({ put: kind, rule: RULE_KINDS[kind].json(r), base: set.base(kind, key) }));
      else if (set.rules(kind).has(key)) lines.push(JSON.stringify({ del: kind, key, base: set.base(kind, key) }));
    }
  }
  expect(plan.line.json).toBe(`{"batch":[${lines.join(',')}]}`);
  for (const [kind, d] of plan.delta) {
    const before = plan.before.get(kind)!;
    for (const [key, r] of d) {
      if (afresh) (r === null ? set.delete(kind, key) : set.put(kind, r));
      else if (r === null) set.delete(kind, key, foundRule(before.get(key)));
      else set.put(kind, r, foundRule(before.get(key)));
    }
  }
  return plan.line.json;
}

/** Everything the set holds that the state file, listings and later changes read. */
function stateOf(set: RuleSet): unknown {
  const out: Record<string, unknown> = { footprint: set.footprint() };
  for (const k of RULE_KIND_LIST) {
    const kind: RuleKind = k.kind;
    const keys = [...set.rules(kind).keys()];
    out[kind] = keys.map((key) => [key, k.json(set.rules(kind).get(key)!), set.source(kind, key), set.base(kind, key), set.fileRule(kind, key) === undefined]);
    out[`${kind} overlay`] = [[...set.overlay[k.overlay.put].keys()], [...set.overlay[k.overlay.del]]];
    out[`${kind} names`] = keys.map((key) => set.rules(kind).get(key)!.name).filter((n) => n !== undefined).map((n) => [n, set.find(kind, { name: n })]);
  }
  return out;
}

const BATCHES: unknown[][] = [
  [
    { op: 'add', policy: pol('10.0.9.0/24', { name: 'n' }) },
    { op: 'replace', policy: pol('10.0.1.0/24', { name: 'a', hop_limit: 7 }) },
    { op: 'delete', policy: { match: '10.0.2.0/24' } },
    { op: 'add', session: ses('10.9.0.2/32', 0x20) },
    { op: 'replace', session: { ...ses('10.9.0.1/32', 0x11) } },
  ],
  [
    // The file's rule put back as the file has it; an API rule replaced, one deleted; a key added and deleted.
    { op: 'replace', policy: pol('10.0.1.0/24', { name: 'a' }) },
    { op: 'replace', policy: pol('10.0.9.0/24', { name: 'm' }) },
    { op: 'delete', session: { ue: '10.9.0.2/32' } },
    { op: 'add', policy: pol('10.0.10.0/24') },
    { op: 'delete', policy: { match: '10.0.10.0/24' } },
    { op: 'add', policy: pol('10.0.2.0/24', { name: 'back' }) },
  ],
  [
    // Names moved between a file rule and an API rule; the file's deleted rule back as it was.
    { op: 'replace', policy: pol('10.0.3.0/24') },
    { op: 'replace', policy: pol('10.0.9.0/24', { name: 'c' }) },
    { op: 'replace', policy: pol('10.0.2.0/24') },
    { op: 'delete', policy: { name: 'a' } },
    { op: 'replace', session: ses('10.9.0.1/32', 0x10) },
  ],
];

describe("a batch's look-ups handed on (BatchPlan.before)", () => {
  it('leaves the rule set and the record as looking each key up again does, batch after batch', () => {
    const handed = new RuleSet(config, emptyOverlay());
    const afresh = new RuleSet(config, emptyOverlay());
    for (const ops of BATCHES) {
      const a = apply(handed, ops, false);
      const b = apply(afresh, ops, true);
      expect(a).toBe(b);
      expect(stateOf(handed)).toEqual(stateOf(afresh));
    }
    // The batches did what they say (not a test of nothing): the file's 10.0.2.0/24 is back as the file has it.
    expect(handed.source('policy', '10.0.2.0/24')).toBe('config');
    expect(handed.find('policy', { name: 'c' })).toBe('10.0.9.0/24');
    expect(handed.rules('policy').has('10.0.1.0/24')).toBe(false);
  });

  it('before holds the set\'s rule at each key as it was before the batch, not an earlier operation\'s', () => {
    const set = new RuleSet(config, emptyOverlay());
    const file = set.rules('policy').get('10.0.1.0/24')!;
    const plan = planBatch(set, [
      { op: 'replace', policy: pol('10.0.1.0/24', { name: 'a', hop_limit: 9 }) },
      { op: 'replace', policy: pol('10.0.1.0/24', { name: 'a', hop_limit: 8 }) },
      { op: 'add', policy: pol('10.0.11.0/24') },
      { op: 'delete', policy: { match: '10.0.11.0/24' } },
    ]);
    const before = plan.before.get('policy')!;
    expect(before.get('10.0.1.0/24')).toBe(file);
    expect(before.has('10.0.11.0/24')).toBe(true);
    expect(before.get('10.0.11.0/24')).toBeUndefined();
    expect([...before.keys()]).toEqual([...plan.delta.get('policy')!.keys()]);
    // The lists the daemon applies: each key once, in first-touched order, its last rule (null: deleted) and its first before.
    const t = plan.touched.get('policy')!;
    expect(t.keys).toEqual(['10.0.1.0/24', '10.0.11.0/24']);
    expect(t.befores).toEqual([file, undefined]);
    expect((t.rules[0] as { hopLimit: number }).hopLimit).toBe(8);
    expect(t.rules[1]).toBeNull();
    expect(t.at('10.0.11.0/24')).toBe(1);
    expect(t.at('10.0.12.0/24')).toBe(-1);
  });
});
