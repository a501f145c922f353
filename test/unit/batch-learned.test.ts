/**
 * A batch keeps the API's precedence rule for rules learned from BGP
 * (docs/bgp.md "Precedence"): an add or replace of a learned rule's key, an
 * add that takes a learned rule's name, and a delete of a learned rule (by
 * key or by name) are refused with 409 as single requests are, naming the
 * operation. Found in review: the batch planner looked at the config and
 * API rules only, so a batch add of a learned key was accepted and written
 * over the learned rule's entry, while the rule set still listed that rule
 * as installed.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { BatchError, planBatch } from '../../src/daemon/batch.js';
import { emptyOverlay, RULE_KINDS, RuleSet, type Rule } from '../../src/daemon/rules.js';

const config = parseConfig(
  'settings: { max_policies: 64, max_localsids: 16 }\npolicies:\n  - { name: f1, match: 192.0.2.0/24, sr_prefix: "2001:db8:9::/48", src_prefix: "2001:db8:ff::/64" }\n',
  'learned.yaml',
);
const policy = (name: string, match: string): Record<string, string> => ({ name, match, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' });

function setWithLearned(): RuleSet {
  const set = new RuleSet(config, emptyOverlay());
  const learned = RULE_KINDS.policy.parse(policy('bgp1', '198.51.100.0/24'), 'test') as Rule;
  set.setLearned('policy', RULE_KINDS.policy.key(learned), learned);
  return set;
}

function refusal(ops: unknown[]): { status: number; code: string; index: number; path: string } {
  try {
    planBatch(setWithLearned(), ops);
  } catch (e) {
    if (e instanceof BatchError) return { status: e.status, code: e.code!, index: e.index, path: e.path };
    throw e;
  }
  throw new Error('the batch was planned');
}

describe('a batch and the rules learned from BGP', () => {
  it.each([
    ['an add of a learned key', [{ op: 'add', policy: policy('api1', '198.51.100.0/24') }], { status: 409, code: 'learned', index: 0, path: 'operations[0].policy.match' }],
    ['a replace of a learned key', [{ op: 'replace', policy: policy('bgp1', '198.51.100.0/24') }], { status: 409, code: 'learned', index: 0, path: 'operations[0].policy.match' }],
    ['an add with a learned rule\'s name', [{ op: 'add', policy: policy('ok', '10.0.0.0/24') }, { op: 'add', policy: policy('bgp1', '10.0.1.0/24') }], { status: 409, code: 'name_taken', index: 1, path: 'operations[1].policy.name' }],
    ['a delete of a learned key', [{ op: 'delete', policy: { match: '198.51.100.0/24' } }], { status: 409, code: 'learned', index: 0, path: 'operations[0].policy.match' }],
    ['a delete of a learned name', [{ op: 'delete', policy: { name: 'bgp1' } }], { status: 409, code: 'learned', index: 0, path: 'operations[0].policy.name' }],
  ])('%s: refused with 409, naming the operation', (_what, ops, want) => {
    expect(refusal(ops)).toEqual(want);
  });

  it('other keys and names go through beside a learned rule', () => {
    const plan = planBatch(setWithLearned(), [{ op: 'add', policy: policy('api1', '10.0.0.0/24') }, { op: 'delete', policy: { name: 'f1' } }]);
    expect(plan.counts).toEqual({ added: 1, replaced: 0, deleted: 1 });
  });
});
