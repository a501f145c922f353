/**
 * A rule's name in the rule set's name index belongs to the rule that has
 * it: a change that takes a name away from a rule must not drop the entry
 * when another rule took that name in the same batch. Found in review
 * (session 14): a batch applied in first-touched key order put B named "x"
 * (taken from A), then A renamed "y", whose put removed "x" (A's old name)
 * from the index though B now has it: the name no longer found its rule,
 * and a later add of another "x" was accepted, which the next start or
 * reload then refuses (two rules named "x").
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { planBatch } from '../../src/daemon/batch.js';
import { emptyOverlay, RuleSet } from '../../src/daemon/rules.js';

const config = parseConfig(
  `settings: { max_policies: 16, max_localsids: 4 }
policies:
  - { name: x, match: 10.0.1.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
  - { match: 10.0.2.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
`,
  'names.yaml',
);
const entry = (match: string, name?: string): Record<string, unknown> => ({ ...(name === undefined ? {} : { name }), match, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' });

/** What Daemon.applyBatch does to the rule set, in the plan's order. */
function apply(set: RuleSet, ops: unknown[]): void {
  const plan = planBatch(set, ops);
  for (const [kind, d] of plan.delta) for (const [key, r] of d) (r === null ? set.delete(kind, key) : set.put(kind, r));
}

describe('the rule set name index', () => {
  it('a name moved from one rule to another in one batch stays with the rule that has it', () => {
    const set = new RuleSet(config, emptyOverlay());
    apply(set, [
      { op: 'replace', policy: entry('10.0.2.0/24') }, // B touched first
      { op: 'replace', policy: entry('10.0.1.0/24', 'y') }, // A: x -> y
      { op: 'replace', policy: entry('10.0.2.0/24', 'x') }, // B takes x
    ]);
    expect(set.find('policy', { name: 'x' })).toBe('10.0.2.0/24');
    expect(set.find('policy', { name: 'y' })).toBe('10.0.1.0/24');
    // So a third rule cannot take "x".
    expect(() => planBatch(set, [{ op: 'add', policy: entry('10.0.3.0/24', 'x') }])).toThrow(/name "x" is already used/);
  });

  it('a delete of a rule whose old name another rule took keeps the other rule\'s entry', () => {
    const set = new RuleSet(config, emptyOverlay());
    apply(set, [
      { op: 'replace', policy: entry('10.0.2.0/24') }, // B touched first
      { op: 'delete', policy: { match: '10.0.1.0/24' } }, // A ("x") deleted
      { op: 'replace', policy: entry('10.0.2.0/24', 'x') }, // B takes x
    ]);
    expect(set.find('policy', { name: 'x' })).toBe('10.0.2.0/24');
  });
});
