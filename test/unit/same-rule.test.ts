/**
 * sameRule: what a reload compares to write only the rules an edit
 * changed (ruleSetChanges; a reload used to encode all 131,072 rules and
 * read the tables back: 700 ms of the event loop). A rule read twice is the
 * same wherever it sits in the file; a change of any one key of any kind
 * of rule (every key the config takes, from a sample that gives them all)
 * makes it another. If a key is added to a kind and not here, the list of
 * keys checked against the config's own list fails.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig, RULE_ENTRY_KEYS } from '../../src/config/load.js';
import { emptyOverlay, ruleSetChanges, RULE_KINDS, RuleSet, sameRule, type Rule, type RuleKind } from '../../src/daemon/rules.js';

interface Case {
  readonly kind: RuleKind;
  readonly label: string;
  readonly sample: Record<string, unknown>;
  /** Another valid value for each key of the sample. */
  readonly other: Record<string, unknown>;
}

const CASES: Case[] = [
  {
    kind: 'policy',
    label: 'policy (sr_prefix)',
    sample: { name: 'p', match: '192.0.2.10/32', teid: '0x12340000/16', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64', segments: ['2001:db8:10::1'], srh: 'always', hop_limit: 60, mtu: 1400 },
    other: { name: 'q', match: '192.0.2.11/32', teid: '0x12350000/16', sr_prefix: '2001:db8:2::/48', src_prefix: '2001:db8:fe::/64', segments: ['2001:db8:10::2'], srh: 'reduced', hop_limit: 61, mtu: 1401 },
  },
  {
    kind: 'policy',
    label: 'policy (sid)',
    sample: { match: '10.0.0.0/24', sid: '2001:db8:e::d4', src_prefix: '2001:db8:ff::/64' },
    other: { match: '10.0.1.0/24', sid: '2001:db8:e::d5', src_prefix: '2001:db8:fe::/64' },
  },
  {
    kind: 'localsid',
    label: 'End.M.GTP4.E',
    sample: { name: 'l', sid: '2001:db8:2::/48', src_prefix_len: 64, container: 'auto', ttl: 30, mtu: 1400, advertise: { prefixes: ['192.0.2.0/25'], lb: 32, ln: 16, fn: 0 } },
    other: { name: 'm', sid: '2001:db8:3::/48', src_prefix_len: 56, container: 'always', ttl: 31, mtu: 1401, advertise: { prefixes: ['192.0.2.128/25'], lb: 32, ln: 16, fn: 0 } },
  },
  {
    kind: 'localsid',
    label: 'End.M.GTP6.D',
    sample: { behavior: 'end.m.gtp6.d', sid: '2001:db8:700::/64', source: '2001:db8:ffff::6d', sr_prefix: '2001:db8:800::/64', segments: ['2001:db8:10::1'], srh: 'always', hop_limit: 61, mtu: 1400 },
    other: { behavior: 'end.m.gtp6.d.di', sid: '2001:db8:701::/64', source: '2001:db8:ffff::6e', sr_prefix: '2001:db8:801::/64', segments: ['2001:db8:10::2'], srh: 'reduced', hop_limit: 62, mtu: 1401 },
  },
  {
    kind: 'session',
    label: 'session',
    sample: { name: 's', ue: '10.60.0.1/32', teid: '0x12345678', qfi: 9, rqi: true, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64', segments: ['2001:db8:10::1'], srh: 'always', hop_limit: 60, mtu: 1400 },
    other: { name: 't', ue: '10.60.0.2/32', teid: '0x12345679', qfi: 10, rqi: false, endpoint: '192.0.2.2', source: '198.51.100.2', isd: '2001:db8:3::/48', src_prefix: '2001:db8:fe::/64', segments: ['2001:db8:10::2'], srh: 'reduced', hop_limit: 61, mtu: 1401 },
  },
];

const parse = (c: Case, json: Record<string, unknown>, where: string): Rule => RULE_KINDS[c.kind].parse(json, where);

describe('sameRule', () => {
  it.each(CASES)('$label: the same rule read twice (another place in the file) is the same', (c) => {
    expect(sameRule(parse(c, c.sample, 'policies[1]'), parse(c, c.sample, 'policies[7]'))).toBe(true);
  });

  it.each(CASES)('$label: a change of any one key makes another rule', (c) => {
    const a = parse(c, c.sample, 'a');
    for (const key of Object.keys(c.sample)) {
      const b = parse(c, { ...c.sample, [key]: c.other[key] }, 'b');
      expect(sameRule(a, b), key).toBe(false);
      expect(sameRule(b, a), key).toBe(false);
      // A key left out (where it may be) is a change too.
      if (key !== 'match' && key !== 'sid' && key !== 'ue' && key !== 'src_prefix' && key !== 'src_prefix_len' && key !== 'sr_prefix' && key !== 'teid' && key !== 'qfi' && key !== 'endpoint' && key !== 'source' && key !== 'isd' && key !== 'behavior') {
        const { [key]: _dropped, ...without } = c.sample;
        expect(sameRule(a, parse(c, without, 'c')), `${key} left out`).toBe(false);
      }
    }
  });

  it('the samples give every key the config takes, per kind', () => {
    const given = (kind: RuleKind): Set<string> => new Set(CASES.filter((c) => c.kind === kind).flatMap((c) => Object.keys(c.sample)));
    // Every key an entry takes must be varied above; a policy's behavior has one value (h.m.gtp4.d), not kept.
    for (const kind of ['policy', 'localsid', 'session'] as const) {
      const all: readonly string[] = RULE_ENTRY_KEYS[kind];
      expect(all.filter((k) => !given(kind).has(k) && !(kind === 'policy' && k === 'behavior')), `${kind} keys not varied`).toEqual([]);
    }
  });
});

describe('ruleSetChanges', () => {
  const file = (p1: string): string => `settings: { max_policies: 64, max_localsids: 8 }
policies:
  - { name: p0, match: 10.0.0.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
  - { name: p1, match: 10.0.1.0/24, sr_prefix: "${p1}", src_prefix: "2001:db8:ff::/64" }
  - { name: p2, match: 10.0.2.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
localsids:
  - { name: l0, sid: "2001:db8:2::/48", src_prefix_len: 64 }
`;
  it('puts the changed and added rules, deletes the keys gone, counts the rest as the same', () => {
    const a = new RuleSet(parseConfig(file('2001:db8:1::/48'), 'a.yaml'), emptyOverlay());
    // p1 changed, p2 gone (p0 moved down a line: still the same), p3 added.
    const text = file('2001:db8:9::/48')
      .replace(/ {2}- \{ name: p2.*\n/, '')
      .replace('\nlocalsids:', '\n  - { name: p3, match: 10.0.3.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\nlocalsids:');
    const b = new RuleSet(parseConfig(text, 'b.yaml'), emptyOverlay());
    const { changes, same } = ruleSetChanges(a, b);
    expect((changes.putPolicies ?? []).map((p) => p.name).sort()).toEqual(['p1', 'p3']);
    expect((changes.delPolicies ?? []).length).toBe(1);
    expect(changes.putLocalSids).toBeUndefined();
    expect(same).toBe(2); // p0, l0
  });
});
