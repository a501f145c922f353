/**
 * RuleSet.effectiveYielding, the rule lists an edited reload hands the
 * tables, made in slices of the event loop: the same lists as effective()
 * (the same rule objects, in the same order: the file's and the API's,
 * then the learned ones), and the loop ran between the slices of a large
 * set.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { emptyOverlay, RULE_KINDS, RuleSet, type Rule } from '../../src/daemon/rules.js';

function configText(n: number): string {
  const lines = [`settings: { max_policies: ${n + 64}, max_localsids: ${n + 64} }`, 'policies:'];
  for (let i = 0; i < n; i++) lines.push(`  - name: p${i}`, `    match: 10.${i >> 8}.${i & 255}.0/24`, '    sr_prefix: 2001:db8:1::/48', '    src_prefix: 2001:db8:ff::/64');
  lines.push('localsids:');
  for (let i = 0; i < n; i++) lines.push(`  - sid: 2001:db8:${i.toString(16)}::/48`, '    src_prefix_len: 64');
  return `${lines.join('\n')}\n`;
}

function setOf(n: number): RuleSet {
  const set = new RuleSet(parseConfig(configText(n), 'effective.yaml'), emptyOverlay());
  set.put('policy', RULE_KINDS.policy.parse({ name: 'api1', match: '192.0.2.0/24', sr_prefix: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' }, 'test') as Rule);
  for (const m of ['198.51.100.0/24', '198.51.101.0/24']) {
    const learned = RULE_KINDS.policy.parse({ match: m, sr_prefix: '2001:db8:3::/48', src_prefix: '2001:db8:ff::/64' }, 'test') as Rule;
    set.setLearned('policy', RULE_KINDS.policy.key(learned), learned);
  }
  return set;
}

describe('the effective rule lists, made in slices', () => {
  it('are effective()\'s: the same rules in the same order, learned ones last', async () => {
    const set = setOf(300);
    const whole = set.effective();
    const sliced = await set.effectiveYielding();
    for (const k of ['policies', 'localsids', 'sessions'] as const) {
      expect(sliced[k]?.length, k).toBe(whole[k]?.length);
      (sliced[k] ?? []).forEach((r, i) => expect(r, `${k}[${i}]`).toBe(whole[k]![i]));
    }
    expect(sliced.policies.at(-1)?.match).toEqual(whole.policies.at(-1)?.match);
    expect(sliced.policies).toHaveLength(300 + 1 + 2);
    expect({ ...sliced, policies: [], localsids: [], sessions: [] }).toEqual({ ...whole, policies: [], localsids: [], sessions: [] });
  });

  it('give the event loop turns on a large set', async () => {
    const set = setOf(60_000);
    let turns = 0;
    let running = true;
    const count = (): void => {
      turns++;
      if (running) setImmediate(count);
    };
    setImmediate(count);
    const sliced = await set.effectiveYielding();
    running = false;
    expect(sliced.policies).toHaveLength(60_000 + 3);
    expect(turns).toBeGreaterThan(1);
  });
});
