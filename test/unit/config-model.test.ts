/**
 * The config model's pure parts (src/daemon/rules.ts, src/config/running.ts):
 * moving API changes onto an edited file (kept / absorbed / conflict), the
 * diff `mup reload --check` prints, batch records in the state file, and the
 * running config as YAML (comments kept, origins, loads as it is).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { itemSpansOf, parseConfig } from '../../src/config/load.js';
import { parseIpv6 } from '../../src/sid/addr.js';
import { runningConfigYaml, type RunningRule } from '../../src/config/running.js';
import { expandSections, type CompactSection } from '../../src/config/running-async.js';
import { checkDaemonConfig } from '../../src/daemon/check.js';
import { emptyOverlay, rebaseOverlay, ruleDigest, RULE_KINDS, RuleSet, ruleSetDiff, ruleSetDiffAsync, sha256, StateStore, type Overlay, type RuleKind } from '../../src/daemon/rules.js';
import type { Config, Policy } from '../../src/config/types.js';

/** The digest of the file's rule at each key (null: none), as a state record's `base` names it. */
const configDigests =
  (c: Config) =>
  (kind: RuleKind, key: string): string | null => {
    const k = RULE_KINDS[kind];
    const r = (c[k.section] ?? []).find((x) => k.key(x) === key);
    return r === undefined ? null : ruleDigest(kind, r);
  };

const pol = (name: string, i: number, hop = 64): string =>
  `  - { name: ${name}, match: 10.0.${i}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64", hop_limit: ${hop} }\n`;
const HEAD = 'settings: { max_policies: 64, max_localsids: 16 }\npolicies:\n';
const file = (...p: string[]): string => `${HEAD}${p.join('')}`;
const policy = (name: string, i: number, hop = 64): Policy => parseConfig(file(pol(name, i, hop))).policies[0]!;

/** API changes on `base`: a1 added, c2 replaced (hop 32), c3 deleted. */
function changes(): Overlay {
  const o = emptyOverlay();
  o.policies.set('10.0.11.0/24', policy('a1', 11));
  o.policies.set('10.0.2.0/24', policy('c2', 2, 32));
  o.delPolicies.add('10.0.3.0/24');
  return o;
}
const BASE = parseConfig(file(pol('c1', 1), pol('c2', 2), pol('c3', 3), pol('c4', 4)));

describe('rebaseOverlay', () => {
  const rebase = (next: string): ReturnType<typeof rebaseOverlay> => rebaseOverlay(changes(), configDigests(BASE), parseConfig(next));

  it('keeps every change across a comment edit and edits of other rules', () => {
    for (const next of [`${file(pol('c1', 1), pol('c2', 2), pol('c3', 3), pol('c4', 4))}# a comment\n`, file(pol('c1', 1, 9), pol('c2', 2), pol('c3', 3), pol('c5', 5))]) {
      const r = rebase(next);
      expect(r.conflicts).toEqual([]);
      expect(r.absorbed).toEqual([]);
      expect([...r.overlay.policies.keys()]).toEqual(['10.0.11.0/24', '10.0.2.0/24']);
      expect([...r.overlay.delPolicies]).toEqual(['10.0.3.0/24']);
    }
  });

  it('absorbs the changes the file now says itself', () => {
    const r = rebase(file(pol('c1', 1), pol('c2', 2, 32), pol('c4', 4), pol('a1', 11)));
    expect(r.conflicts).toEqual([]);
    expect(r.absorbed.sort()).toEqual(['policy 10.0.11.0/24', 'policy 10.0.2.0/24', 'policy 10.0.3.0/24']);
    expect(r.overlay.policies.size + r.overlay.delPolicies.size).toBe(0);
  });

  it('names every rule both touch differently, with both names', () => {
    const r = rebase(file(pol('c1', 1), pol('c2', 2, 16), pol('c3', 3, 10), pol('c4', 4), pol('f1', 11)));
    expect(r.conflicts).toEqual(['policy a1 / f1 (10.0.11.0/24)', 'policy c2 (10.0.2.0/24)', 'policy c3 (10.0.3.0/24)']);
  });

  it('counts a change with no recorded base (an older state file) as a conflict unless the file leaves the rule out or agrees', () => {
    const r = rebaseOverlay(changes(), () => undefined, parseConfig(file(pol('c1', 1), pol('c2', 2), pol('c4', 4))));
    expect(r.conflicts).toEqual(['policy c2 (10.0.2.0/24)']);
    expect([...r.overlay.policies.keys()], 'an addition on a key the file does not have is kept').toEqual(['10.0.11.0/24']);
    expect(r.absorbed).toEqual(['policy 10.0.3.0/24']);
  });

  it('does not change the overlay it is given', () => {
    const o = changes();
    rebaseOverlay(o, configDigests(BASE), parseConfig(file(pol('c2', 2, 32))));
    expect(o.policies.size).toBe(2);
    expect(o.delPolicies.size).toBe(1);
  });
});

describe('ruleSetDiff', () => {
  it('one line per rule: + with the entry, - by name, ~ with key old -> new', () => {
    const a = new RuleSet(BASE, emptyOverlay());
    const b = new RuleSet(parseConfig(`interfaces:\n  - { name: eth1, xdp: generic }\n${file(pol('c1', 1), pol('c2', 2, 10), pol('c4', 4), pol('c5', 5))}`), emptyOverlay());
    expect(ruleSetDiff(a, b)).toEqual([
      '+ interface eth1 {"xdp":"generic"}',
      '~ policy c2: hop_limit 64 -> 10',
      `+ policy c5 ${JSON.stringify(RULE_KINDS.policy.json(policy('c5', 5)))}`,
      '- policy c3',
    ]);
    expect(ruleSetDiff(a, new RuleSet(BASE, emptyOverlay()))).toEqual([]);
  });

  it('in slices (ruleSetDiffAsync: the check of a save, a reload --check), the same lines', async () => {
    // 3,000 policies (10.<i/250>.<i%250>.0/24), every 7th with another hop limit, 10 fewer in the second.
    const line = (i: number, hop: number): string =>
      `  - { name: m${i}, match: 10.${Math.floor(i / 250)}.${i % 250}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64", hop_limit: ${i % 7 === 0 ? hop : 64} }\n`;
    const many = (n: number, hop: number): string => `settings: { max_policies: 4096, max_localsids: 16 }\npolicies:\n${Array.from({ length: n }, (_, i) => line(i, hop)).join('')}`;
    const a = new RuleSet(parseConfig(many(3000, 10)), emptyOverlay());
    const b = new RuleSet(parseConfig(many(2990, 20)), emptyOverlay());
    const lines = ruleSetDiff(a, b);
    expect(lines.length).toBeGreaterThan(400);
    expect(await ruleSetDiffAsync(a, b)).toEqual(lines);
  });
});

describe('state file batch records', () => {
  it('applies a batch record whole, and refuses a damaged one whole', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mup-batch-'));
    try {
      const path = join(dir, 'state.json');
      const s = new StateStore(path);
      const sha = '00'.repeat(32);
      s.rewrite('t', 'c.yaml', sha, emptyOverlay());
      const j = (p: Policy): Record<string, unknown> => RULE_KINDS.policy.json(p);
      s.commit({ batch: [{ put: 'policy', rule: j(policy('b1', 21)), base: null }, { put: 'policy', rule: j(policy('b2', 22)), base: null }, { del: 'policy', key: '10.0.1.0/24', base: 'x' }] }, 't', 'c.yaml', sha, emptyOverlay());
      expect(readFileSync(path, 'utf8').trim().split('\n'), 'one record for the batch').toHaveLength(2);
      const got = new StateStore(path).read()!;
      expect([...got.overlay.policies.keys()]).toEqual(['10.0.21.0/24', '10.0.22.0/24']);
      expect([...got.overlay.delPolicies]).toEqual(['10.0.1.0/24']);
      expect(got.bases.get('policy 10.0.21.0/24')).toBeNull();
      expect(got.bases.get('policy 10.0.1.0/24')).toBe('x');

      s.commit({ batch: [{ put: 'policy', rule: j(policy('b3', 23)) }, { put: 'policy', rule: { match: 'nope' } }] }, 't', 'c.yaml', sha, emptyOverlay());
      expect(() => new StateStore(path).read()).toThrow(/:3: batch\[1\]/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('an API rule put back as the file had it, on an edited file (found in review, session 15)', () => {
  // The running daemon keeps no API change for it (RuleSet.put); the state file still has the records of the
  // delete and the add back until it is compacted. A start (or daemon --check) on an edited file must not
  // call that a conflict: a reload of the running daemon applies the edit.
  const old = parseConfig(file(pol('c1', 1), pol('c2', 2)));
  const edited = parseConfig(file(pol('c1', 1), pol('c2', 2, 9)));
  const putBack = (): Overlay => {
    const o = emptyOverlay();
    o.policies.set('10.0.2.0/24', policy('c2', 2));
    return o;
  };

  it('rebaseOverlay takes it as no change: the edit applies, no conflict', () => {
    const r = rebaseOverlay(putBack(), configDigests(old), edited);
    expect(r.conflicts).toEqual([]);
    expect(r.absorbed).toEqual(['policy 10.0.2.0/24']);
    expect(r.overlay.policies.size).toBe(0);
    // A put that differs from what the file said then is still a conflict with the edit.
    const o = emptyOverlay();
    o.policies.set('10.0.2.0/24', policy('c2', 2, 32));
    expect(rebaseOverlay(o, configDigests(old), edited).conflicts).toEqual(['policy c2 (10.0.2.0/24)']);
  });

  it('daemon --check agrees with the start, and counts no API change for it on the same file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mup-putback-'));
    try {
      const cfg = join(dir, 'c.yaml');
      const state = join(dir, 'state.json');
      const oldText = file(pol('c1', 1), pol('c2', 2));
      writeFileSync(cfg, oldText);
      const s = new StateStore(state);
      s.rewrite('t', cfg, sha256(oldText), emptyOverlay());
      const base = configDigests(old)('policy', '10.0.2.0/24');
      s.commit({ del: 'policy', key: '10.0.2.0/24', base }, 't', cfg, sha256(oldText), emptyOverlay());
      s.commit({ put: 'policy', rule: RULE_KINDS.policy.json(policy('c2', 2)), base }, 't', cfg, sha256(oldText), emptyOverlay());
      const same = checkDaemonConfig({ configPath: cfg, instance: 't', stateFile: state });
      expect(same.lines.join('\n')).toMatch(/: 0 API changes apply on top of the file/);
      writeFileSync(cfg, file(pol('c1', 1), pol('c2', 2, 9)));
      const after = checkDaemonConfig({ configPath: cfg, instance: 't', stateFile: state });
      expect(after.lines.join('\n')).toMatch(/0 API changes apply on top of this one, 1 are in the file already/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('runningConfigYaml', () => {
  const text = `# top\n${HEAD}  # the first gNB\n${pol('c1', 1)}  # c2's comment\n${pol('c2', 2)}  # c3's comment\n${pol('c3', 3)}`;
  const config = parseConfig(text);
  const rules = new RuleSet(config, changes());
  const sections = [
    {
      section: 'policies',
      rules: [...rules.policies.entries()].map(([key, r]) => {
        const i = config.policies.findIndex((p) => RULE_KINDS.policy.key(p) === key);
        const origin = rules.source('policy', key);
        return { key, json: RULE_KINDS.policy.json(r), origin, fileIndex: origin === 'config' && i >= 0 ? i : undefined, replacesIndex: origin === 'api' && i >= 0 ? i : undefined };
      }),
    },
  ];

  it('keeps comments where the entries still are, drops the deleted, marks origins, and loads as the running rules', () => {
    const shown = runningConfigYaml(text, sections, { origins: true });
    expect(shown).toMatch(/^# top\n/);
    expect(shown).toMatch(/# the first gNB\n {2}# origin: config\n {2}- \{ name: c1,/);
    expect(shown).toMatch(/# c2's comment\n {2}# origin: api\n {2}- \{ name: c2,.*hop_limit: 32/);
    expect(shown).not.toMatch(/c3/);
    expect(shown).toMatch(/# origin: api\n {2}- \{ name: a1,/);
    const back = parseConfig(shown);
    expect(ruleSetDiff(rules, new RuleSet(back, emptyOverlay()))).toEqual([]);
    // Shown twice: no second origin line.
    expect(runningConfigYaml(shown, sections, { origins: true }).match(/origin: config/g)).toHaveLength(1);
    const saved = runningConfigYaml(text, sections, { origins: false });
    expect(saved).not.toMatch(/origin/);
    expect(ruleSetDiff(rules, new RuleSet(parseConfig(saved), emptyOverlay()))).toEqual([]);
  });

  it('the thread\'s compact form (a file entry as its index) gives the same YAML, and an index the file lacks is an error, not an empty entry', () => {
    // What the daemon sends the running config's thread: a file entry unchanged as its index only.
    const compact: CompactSection[] = sections.map((s) => {
      const order = new Int32Array(s.rules.length);
      const rest: RunningRule[] = [];
      s.rules.forEach((r, i) => {
        if (r.fileIndex !== undefined) order[i] = r.fileIndex;
        else {
          order[i] = -1 - rest.length;
          rest.push(r);
        }
      });
      return { section: s.section, order, rules: rest };
    });
    expect(runningConfigYaml(text, expandSections(compact), { origins: true })).toBe(runningConfigYaml(text, sections, { origins: true }));
    const beyond: CompactSection[] = [{ section: 'policies', order: Int32Array.of(0, 99), rules: [] }];
    expect(() => runningConfigYaml(text, expandSections(beyond), { origins: true })).toThrow(/no entry policies\[99\]/);
  });

  it('writes an API rule in block style among block entries (the fast reader reads the saved file, and a reload compares by item), in flow style among flow ones', () => {
    const block = ['settings:', '  max_policies: 64', '  max_localsids: 16', 'policies:', '  - name: c1', '    match: 10.0.1.0/24', '    sr_prefix: 2001:db8:1::/48', '    src_prefix: 2001:db8:ff::/64', ''].join('\n');
    const api = { key: 'k', json: RULE_KINDS.policy.json({ ...policy('a1', 11), segments: [parseIpv6('2001:db8:10::1', 's')] }), origin: 'api' as const };
    const kept = { key: '10.0.1.0/24', json: {}, origin: 'config' as const, fileIndex: 0 };
    const saved = runningConfigYaml(block, [{ section: 'policies', rules: [kept, api] }], { origins: false });
    expect(saved).toMatch(/\n {2}- name: a1\n {4}match: 10\.0\.11\.0\/24\n/);
    const back = parseConfig(saved);
    expect(back.policies.map((p) => p.name)).toEqual(['c1', 'a1']);
    expect(back.policies[1]!.segments).toHaveLength(1);
    expect(itemSpansOf(back)?.policies, 'read by the block reader').toHaveLength(3);
    // A section the file does not have yet: block too (a flow list `policies: []` keeps flow mappings).
    const fresh = runningConfigYaml('settings:\n  max_policies: 64\n', [{ section: 'policies', rules: [api] }], { origins: false });
    expect(itemSpansOf(parseConfig(fresh))?.policies, fresh).toHaveLength(2);
    expect(runningConfigYaml('settings:\n  max_policies: 64\npolicies: []\n', [{ section: 'policies', rules: [api] }], { origins: false })).toMatch(/\{ name: a1,/);
    // The flow-style file of the test above: a flow mapping a line, as before.
    expect(runningConfigYaml(text, sections, { origins: false })).toMatch(/\n {2}- \{ name: a1,/);
  });

  it('adds a section the file did not have', () => {
    const yaml = runningConfigYaml('settings: { max_policies: 64, max_localsids: 16 }\n', [{ section: 'policies', rules: [{ key: 'k', json: RULE_KINDS.policy.json(policy('a1', 11)), origin: 'api' }] }], { origins: true });
    expect(parseConfig(yaml).policies.map((p) => p.name)).toEqual(['a1']);
  });
});

describe('the rule set takes the maps the config checks built', () => {
  it('takes them once: a second rule set of the same config has rules and names of its own', () => {
    const config = parseConfig(file(pol('c1', 1), pol('c2', 2), pol('c3', 3)));
    const first = new RuleSet(config, emptyOverlay());
    expect([...first.policies.keys()]).toEqual(['10.0.1.0/24', '10.0.2.0/24', '10.0.3.0/24']);
    expect(first.find('policy', { name: 'c2' })).toBe('10.0.2.0/24');
    first.delete('policy', '10.0.2.0/24');
    first.put('policy', policy('c9', 9));
    const second = new RuleSet(config, emptyOverlay());
    expect([...second.policies.keys()]).toEqual(['10.0.1.0/24', '10.0.2.0/24', '10.0.3.0/24']);
    expect(second.find('policy', { name: 'c2' })).toBe('10.0.2.0/24');
    expect(second.find('policy', { name: 'c9' })).toBeUndefined();
    expect(first.find('policy', { name: 'c2' })).toBeUndefined();
    expect(first.footprint()).toMatchObject({ 'policy.rules': 3, 'policy.names': 3 });
    expect(second.footprint()).toMatchObject({ 'policy.rules': 3, 'policy.names': 3 });
  });

  it('with an overlay of that kind, builds its own (the overlay applied)', () => {
    const first = new RuleSet(BASE, changes());
    expect([...first.policies.keys()]).toEqual(['10.0.1.0/24', '10.0.2.0/24', '10.0.4.0/24', '10.0.11.0/24']);
    expect(first.find('policy', { name: 'c3' })).toBeUndefined();
    expect(first.find('policy', { name: 'a1' })).toBe('10.0.11.0/24');
  });
});
