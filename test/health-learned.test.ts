/**
 * Health counts the rules learned from BGP as running rules. Before, it
 * compared the tables (which hold them) with the config's and API's rules
 * alone: any translator with one learned rule said `degraded`,
 * `tables_mismatch` ("the policies table holds 2 rules, the running config
 * 1") for good, which also hid a real leftover. Real tables (the compiled
 * object's maps), the rule set the daemon keeps.
 */
import { existsSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import type { Daemon } from '../src/daemon/daemon.js';
import { health } from '../src/daemon/health.js';
import { emptyOverlay, RULE_KINDS, RuleSet, type Rule } from '../src/daemon/rules.js';

const OBJECT = process.env['MUP_BPF_OBJECT'] ?? DEFAULT_OBJECT;
const isRoot = process.getuid?.() === 0;

const P1 = '{ name: p1, match: 10.1.0.0/16, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }';
const BGP1 = { name: 'bgp-1', match: '10.9.0.0/16', sr_prefix: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' };
const config = (policies: string[]) => parseConfig(`settings: { forwarding: tx, max_policies: 16, max_localsids: 4 }\npolicies:\n${policies.map((p) => `  - ${p}`).join('\n')}\n`, 'health.yaml');

describe.skipIf(!isRoot || !existsSync(OBJECT))('health with rules learned from BGP', () => {
  const open: Dataplane[] = [];
  afterEach(() => {
    for (const dp of open.splice(0)) dp.close();
  });

  /** health() of a daemon whose rule set is `rules` over these tables (what health reads of a daemon). */
  const check = (dp: Dataplane, rules: RuleSet): ReturnType<typeof health> =>
    health({ status: () => ({ program: { id: 1 }, interfaces: [], instance: 't', pid: 1 }), dataplane: dp, rules, tablesOutOfStep: false } as unknown as Daemon);

  it('a learned rule in the tables is a running rule: ok; one missing from them, or an entry no rule owns: degraded', () => {
    const learned = RULE_KINDS.policy.parse(BGP1, 'bgp') as Rule;
    const rules = new RuleSet(config([P1]), emptyOverlay());
    rules.setLearned('policy', RULE_KINDS.policy.key(learned), learned);
    // The tables as the daemon writes them: the config's rule and the learned one.
    const dp = openDataplane({ object: OBJECT, config: config([P1, JSON.stringify(BGP1)]) });
    open.push(dp);
    const h = check(dp, rules);
    expect(h.problems).toEqual([]);
    expect(h.status).toBe('ok');
    expect(h.checked.rules['policies']).toEqual({ wanted: 2, inTables: 2 });

    // The learned rule not in the tables: said, as learned.
    dp.sync(config([P1]));
    const missing = check(dp, rules);
    expect(missing.status).toBe('degraded');
    expect(missing.problems.map((p) => p.message)).toEqual(['1 of 2 (1 learned from BGP) policies are not in the tables (first: 10.9.0.0/16)']);

    // An entry no rule owns (the learned rule withdrawn, its entry left): still found.
    dp.sync(config([P1, JSON.stringify(BGP1)]));
    rules.setLearned('policy', RULE_KINDS.policy.key(learned), undefined);
    const left = check(dp, rules);
    expect(left.problems.map((p) => p.message)).toEqual(['the policies table holds 2 rules, the running rules are 1']);
  });
});
