/**
 * RuleSet.yielding: a reload's rule set (the file with the API's changes on
 * top) built in slices, the event loop running between them. With 524,288
 * API rules the constructor's one turn held the loop about 650 ms. It must
 * build the very set the constructor builds, refuse what it refuses with
 * the same words, and give the loop turns.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import type { Policy } from '../../src/config/types.js';
import { emptyOverlay, RULE_KINDS, RuleSet, type Overlay } from '../../src/daemon/rules.js';

const FILE_POLICIES = 200;
const match = (i: number): string => `10.${(i >> 8) & 255}.${i & 255}.0/24`;
const policy = (i: number, sid = 1, name = `p${i}`): Record<string, unknown> => ({ name, match: match(i), sr_prefix: `2001:db8:${sid}::/48`, src_prefix: '2001:db8:ff::/64' });

function fileText(maxPolicies: number): string {
  const lines = [`settings: { max_policies: ${maxPolicies}, max_localsids: 8 }`, 'policies:'];
  for (let i = 0; i < FILE_POLICIES; i++) {
    const p = policy(i);
    lines.push(`  - { name: ${String(p['name'])}, match: ${String(p['match'])}, sr_prefix: "${String(p['sr_prefix'])}", src_prefix: "${String(p['src_prefix'])}" }`);
  }
  return `${lines.join('\n')}\n`;
}

function put(o: Overlay, p: Record<string, unknown>): void {
  const k = RULE_KINDS.policy;
  const r = k.parse(p, 'test') as Policy;
  o.policies.set(k.key(r), r);
}

/** API changes of every kind: new keys, file rules replaced, one put back as the file has it, deletes. */
function overlay(added: number): Overlay {
  const o = emptyOverlay();
  for (let i = 0; i < added; i++) put(o, policy(1000 + i, 2));
  for (let i = 0; i < 50; i++) put(o, policy(i, 3));
  put(o, policy(60)); // the file's own rule: not an API change (its overlay entry goes)
  for (let i = 100; i < 120; i++) o.delPolicies.add(match(i));
  return o;
}

const json = (set: RuleSet): [string, unknown][] => [...set.policies].map(([key, r]) => [key, RULE_KINDS.policy.json(r)]);

describe('RuleSet.yielding', () => {
  it('builds the set the constructor builds: the rules in order, the overlay left the same', async () => {
    const cfg = (): ReturnType<typeof parseConfig> => parseConfig(fileText(4096), 'c.yaml');
    const a = new RuleSet(cfg(), overlay(3000));
    const b = await RuleSet.yielding(cfg(), overlay(3000));
    expect(json(b)).toEqual(json(a));
    expect(b.policies.size).toBe(FILE_POLICIES - 20 + 3000);
    expect([...b.overlay.policies.keys()]).toEqual([...a.overlay.policies.keys()]);
    expect([...b.overlay.delPolicies]).toEqual([...a.overlay.delPolicies]);
    expect(b.overlay.policies.has(match(60))).toBe(false);
    for (const k of [match(5), match(1005), match(110), match(60)]) expect(b.base('policy', k)).toEqual(a.base('policy', k));
  });

  it('refuses what the constructor refuses, in the same words (an API rule taking a name another rule has)', async () => {
    const o = (): Overlay => {
      const x = emptyOverlay();
      put(x, policy(5000, 2, 'p7'));
      return x;
    };
    const words = (f: () => unknown): string => {
      try {
        f();
      } catch (e) {
        return (e as Error).message;
      }
      return 'no error';
    };
    const sync = words(() => new RuleSet(parseConfig(fileText(4096), 'c.yaml'), o()));
    expect(sync).toMatch(/p7/);
    await expect(RuleSet.yielding(parseConfig(fileText(4096), 'c.yaml'), o())).rejects.toThrow(sync);
  });

  it('gives the event loop turns while it builds a large set', async () => {
    const cfg = parseConfig(fileText(70_000), 'c.yaml');
    const o = overlay(60_000);
    let turns = 0;
    let done = false;
    const spin = (): void => {
      if (done) return;
      turns++;
      setImmediate(spin);
    };
    setImmediate(spin);
    const set = await RuleSet.yielding(cfg, o);
    done = true;
    expect(set.policies.size).toBe(FILE_POLICIES - 20 + 60_000);
    // The constructor builds it in the caller's turn: no turn at all.
    expect(turns).toBeGreaterThanOrEqual(2);
  });
});
