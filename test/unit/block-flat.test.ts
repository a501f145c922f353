/**
 * Rules of a plain block YAML file read from its bytes by the flat readers
 * (src/config/block-yaml.ts BlockFlat, src/config/flat-rules.ts), held to
 * the block reader's objects and the rule readers (parseConfigReadWhole:
 * no flat read) on generated files: items the flat readers take and the
 * YAML forms they leave to the block reader (quotes, comments, nested
 * values, odd indentation, keys given twice, scalars that are not
 * strings) and the values the rule readers word. The same config (rule by
 * rule, as plain objects), warnings, errors and item spans; and the
 * readers did take most of the plain items (counted), so the test shows
 * what it claims.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { FlatLocalSids, FlatPolicies, FlatSessions } from '../../src/config/flat-rules.js';
import { parseConfig, parseConfigReadWhole } from '../../src/config/load.js';
import { configOutcome } from '../helpers/config-outcome.js';
import { xorshift32 } from '../helpers/rng.js';

const FILE = 'flat.yaml';

const outcome = (read: () => ReturnType<typeof parseConfig>): unknown => configOutcome(read, { spans: true });

const r = xorshift32(47);
const pick = <T>(xs: readonly T[]): T => xs[r() % xs.length]!;
const chance = (n: number): boolean => r() % n === 0;

/** Members an item may have instead of its plain one: taken, left to the block reader, or refused by a rule reader. */
const nameOdd = (i: number): string[] => [
  `n${i}`,
  `t${i}`,
  `N${i}.x`,
  `x_${i}@a+b:c/d-e`,
  `"q${i}"`,
  `'s${i}'`,
  `${i}`,
  `0x${i}`,
  'null',
  'true',
  'False',
  `a${i} # a comment`,
  `a${i}#b`,
  `bad${i}!`,
  `${'n'.repeat(64)}`,
  `${'n'.repeat(65)}`,
  `x${i}:`,
  '',
];
const policyOdd = (i: number): [string, string][] => [
  ['teid', `${i & 0xffff} / 32`],
  ['teid', `${i & 0xffff}/032`],
  ['teid', `0x${(i & 0xffff).toString(16)}/32`],
  ['teid', '0/0'],
  ['teid', '5'],
  ['sr_prefix', '2001:db9:1::1/48'],
  ['sr_prefix', '"2001:db9:1::/48"'],
  ['sr_prefix', '2001:db9:1::/64'],
  ['src_prefix', '2001:db8:ffff::/64   '],
  ['src_prefix', 'null'],
  ['match', '100.64.0.1'],
  ['match', '10.77.0.0/24'],
  ['match', '100.64.0.1/33'],
  ['segments', '[2001:db8:5::1]'],
  ['mtu', '1500'],
  ['hop_limit', '030'],
  ['sid', '2001:db8:e::d4'],
  ['bogus', '1'],
];
const localSidOdd = (i: number): [string, string][] => [
  ['sid', `2001:db8:${(i & 0xffff).toString(16)}::1/48`],
  ['sid', '::/0'],
  ['sid', '0::/0'],
  ['sid', `2001:db8:${(i & 0xffff).toString(16)}::/97`],
  ['sid', `"2001:db8:${(i & 0xffff).toString(16)}::/48"`],
  ['sid', `2001:DB8:${(i & 0xffff).toString(16).toUpperCase()}::/48`],
  ['src_prefix_len', '064'],
  ['src_prefix_len', '64.0'],
  ['src_prefix_len', '"64"'],
  ['src_prefix_len', '97'],
  ['src_prefix_len', '0x40'],
  ['behavior', 'end.m.gtp4.e'],
  ['ttl', '9'],
  ['container', 'never'],
  ['mtu', '1400'],
];
const sessionOdd = (i: number): [string, string][] => [
  ['teid', `0x${(i + 1).toString(16)}`],
  ['teid', `"${i + 1}"`],
  ['teid', '4294967296'],
  ['qfi', '09'],
  ['qfi', '64'],
  ['rqi', 'True'],
  ['rqi', 'yes'],
  ['endpoint', '192.0.2.01'],
  ['isd', '2001:db8:2::/64'],
  ['ue', `2001:db8:60:${i.toString(16)}::/64`],
];

/**
 * An item's lines from its members: "- " then the first, the rest at its
 * column; now and then more spaces after "-" or a colon, a blank or
 * comment line between members; and in an odd file, now and then a member
 * indented wrongly, a key given twice, or a nested value.
 */
function item(m: [string, string][], odd: boolean): string {
  const pad = chance(8) ? '   ' : ' ';
  const col = ' '.repeat(2 + 1 + pad.length);
  const lines = m.map(([k, v], n) => `${n === 0 ? `  -${pad}` : col}${k}:${chance(10) ? '   ' : ' '}${v}`);
  if (chance(15)) lines.splice(1 + (r() % lines.length), 0, pick(['', `${col}# a comment`, '#', '   ']));
  if (odd && chance(200)) lines.push(`${col.slice(1)}${pick(['extra: 1', '- x: 1'])}`);
  if (odd && chance(200)) lines.push(`${col}${m[0]![0]}: ${m[0]![1]}`);
  if (odd && chance(200)) lines.push(`${col}segments:`, `${col}  - 2001:db8:5::1`);
  // A member one column off the mapping's.
  if (odd && lines.length > 1 && chance(200)) lines[lines.length - 1] = `${pick(['  ', ''])}${lines[lines.length - 1]!.slice(1)}`;
  return lines.join('\n');
}

function withOdd(m: [string, string][], odd: [string, string][]): [string, string][] {
  const [k, v] = pick(odd);
  const at = m.findIndex(([x]) => x === k);
  if (at >= 0) m[at] = [k, v];
  else m.push([k, v]);
  return m;
}

function named(m: [string, string][], i: number, prefix: string, odd: boolean): [string, string][] {
  if (chance(2)) m.unshift(['name', odd && chance(12) ? pick(nameOdd(i)) : `${prefix}${i}`]);
  return m;
}

function policyItem(i: number, odd: boolean): string {
  const n3 = `100.64.${(i >> 8) & 255}.${i & 255}`;
  const m: [string, string][] = [
    ['match', chance(3) ? `10.${(i >> 8) & 255}.${i & 255}.0/24` : `${n3}/32`],
    ['sr_prefix', pick(['2001:db9:1::/48', '2001:db9:1::/48', '2001:db9:2::/40'])],
    ['src_prefix', '2001:db8:ffff::/64'],
  ];
  if (m[0]![1].endsWith('/32') && !chance(4)) m.push(['teid', pick([`${i & 0xffff}/32`, '0/0', `0x${(i & 0xffff).toString(16).padStart(8, '0')}/32`])]);
  if (chance(4)) m.reverse();
  return item(odd && chance(6) ? withOdd(named(m, i, 'p', odd), policyOdd(i)) : named(m, i, 'p', odd), odd);
}

function localSidItem(i: number, odd: boolean): string {
  const m: [string, string][] = [
    ['sid', `2001:db8:${(i & 0xffff).toString(16)}::/48`],
    ['src_prefix_len', pick(['64', '64', '0', '96'])],
  ];
  if (chance(4)) m.reverse();
  return item(odd && chance(6) ? withOdd(named(m, i, 'l', odd), localSidOdd(i)) : named(m, i, 'l', odd), odd);
}

function sessionItem(i: number, odd: boolean): string {
  const m: [string, string][] = [
    ['ue', `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}/32`],
    ['teid', String(i + 1)],
    ['qfi', String(i % 64)],
    ['endpoint', '192.0.2.1'],
    ['source', '198.51.100.1'],
    ['isd', pick(['2001:db8:2::/48', '2001:db8:3::/56'])],
    ['src_prefix', '2001:db8:ffff::/64'],
  ];
  if (chance(5)) m.push(['rqi', pick(['true', 'false'])]);
  return item(odd && chance(6) ? withOdd(named(m, i, 's', odd), sessionOdd(i)) : named(m, i, 's', odd), odd);
}

function file(policies: string[], localsids: string[], sessions: string[]): string {
  const list = (key: string, items: string[]): string => (items.length === 0 ? '' : `${key}:\n${items.join('\n')}\n`);
  return `settings:\n  max_policies: 4000\n  max_localsids: 4000\n  max_sessions: 4000\n${list('policies', policies)}${list('localsids', localsids)}${list('sessions', sessions)}`;
}

describe('block YAML rules read from the bytes (flat items), held to the block reader', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('generated files: the same outcome each time, and most plain items taken', () => {
    const taken = [vi.spyOn(FlatPolicies.prototype, 'add'), vi.spyOn(FlatLocalSids.prototype, 'add'), vi.spyOn(FlatSessions.prototype, 'add')];
    let refused = 0;
    const files = 80;
    for (let f = 0; f < files; f++) {
      const odd = f % 2 === 0;
      const n = (big: number): number => (f % 10 === 1 ? big : r() % 25);
      const policies = Array.from({ length: n(1500) }, (_, i) => policyItem(i + f * 3000, odd));
      const localsids = Array.from({ length: n(1500) }, (_, i) => localSidItem(i + f * 3000, odd));
      const sessions = Array.from({ length: n(1500) }, (_, i) => sessionItem(i + f * 3000, odd));
      const text = file(policies, localsids, sessions);
      const got = outcome(() => parseConfig(text, FILE));
      expect(got, `file ${f}`).toEqual(outcome(() => parseConfigReadWhole(text, FILE)));
      if (typeof got === 'string') refused++;
    }
    // Both kinds of outcome, and the readers took thousands of rules (not every item left to the block reader).
    expect(files - refused).toBeGreaterThan(10);
    expect(refused).toBeGreaterThan(10);
    for (const t of taken) expect(t.mock.calls.length).toBeGreaterThan(3000);
  });

  // Each odd member alone, in an item after plain ones.
  const plain = (kind: 'p' | 'l' | 's', i: number): [string, string][] =>
    kind === 'p'
      ? [
          ['match', `100.65.0.${i}/32`],
          ['teid', `${i}/32`],
          ['sr_prefix', '2001:db9:1::/48'],
          ['src_prefix', '2001:db8:ffff::/64'],
        ]
      : kind === 'l'
        ? [
            ['sid', `2001:db8:${i}::/48`],
            ['src_prefix_len', '64'],
          ]
        : [
            ['ue', `10.5.0.${i}/32`],
            ['teid', String(i + 1)],
            ['qfi', '9'],
            ['endpoint', '192.0.2.1'],
            ['source', '198.51.100.1'],
            ['isd', '2001:db8:2::/48'],
            ['src_prefix', '2001:db8:ffff::/64'],
          ];
  const alone = (kind: 'p' | 'l' | 's', k: string, v: string): string => {
    const items = [0, 1, 2, 3, 4].map((i) => {
      const m = plain(kind, i);
      if (i !== 3) return `  - ${m.map(([a, b]) => `${a}: ${b}`).join('\n    ')}`;
      const at = m.findIndex(([a]) => a === k);
      if (at >= 0) m[at] = [k, v];
      else m.push([k, v]);
      return `  - ${m.map(([a, b]) => `${a}: ${b}`).join('\n    ')}`;
    });
    const key = kind === 'p' ? 'policies' : kind === 'l' ? 'localsids' : 'sessions';
    return `${key}:\n${items.join('\n')}\n`;
  };
  it.each(nameOdd(77))('name %s, as the block reader', (v) => {
    for (const kind of ['p', 'l', 's'] as const) {
      const text = alone(kind, 'name', v);
      expect(outcome(() => parseConfig(text, FILE)), `${kind}`).toEqual(outcome(() => parseConfigReadWhole(text, FILE)));
    }
  });
  it.each(policyOdd(77))('policy %s: %s, as the block reader', (k, v) => {
    const text = alone('p', k, v);
    expect(outcome(() => parseConfig(text, FILE))).toEqual(outcome(() => parseConfigReadWhole(text, FILE)));
  });
  it.each(localSidOdd(77))('local SID %s: %s, as the block reader', (k, v) => {
    const text = alone('l', k, v);
    expect(outcome(() => parseConfig(text, FILE))).toEqual(outcome(() => parseConfigReadWhole(text, FILE)));
  });
  it.each(sessionOdd(77))('session %s: %s, as the block reader', (k, v) => {
    const text = alone('s', k, v);
    expect(outcome(() => parseConfig(text, FILE))).toEqual(outcome(() => parseConfigReadWhole(text, FILE)));
  });

  it("the bench's file (names on every rule): every item taken, the same rules, local SIDs' members in the rule reader's order", () => {
    const taken = [vi.spyOn(FlatPolicies.prototype, 'add'), vi.spyOn(FlatLocalSids.prototype, 'add')];
    const out = ['# generated', 'interfaces:', '  - name: mup0', 'settings:', '  max_policies: 4096', '  max_localsids: 4096', 'policies:'];
    for (let i = 0; i < 3000; i++) out.push(`  - name: p${i}`, `    match: 10.${i >> 8}.${i & 255}.0/24`, `    sr_prefix: 2001:db9:${(i & 0xff).toString(16)}::/48`, '    src_prefix: 2001:db8:ffff::/64');
    out.push('localsids:');
    for (let i = 0; i < 3000; i++) out.push(`  - name: l${i}`, `    sid: 2001:db8:${i.toString(16)}::/48`, '    src_prefix_len: 64');
    const text = `${out.join('\n')}\n`;
    const got = outcome(() => parseConfig(text, FILE));
    expect(got).toEqual(outcome(() => parseConfigReadWhole(text, FILE)));
    expect(typeof got).toBe('object');
    for (const t of taken) expect(t.mock.calls.length).toBe(3000);
  });

  it('an error before taken items: they are read again as objects, and the error is the first one', () => {
    const items = Array.from({ length: 50 }, (_, i) => `  - match: 100.64.0.${i}/32\n    teid: ${i}/${i === 3 ? 33 : 32}\n    sr_prefix: 2001:db9:1::/48\n    src_prefix: 2001:db8:ffff::/64`);
    const text = `policies:\n${items.join('\n')}\n`;
    const got = outcome(() => parseConfig(text, FILE));
    expect(got).toEqual(outcome(() => parseConfigReadWhole(text, FILE)));
    expect(got).toMatch(/^policies\[3\]\.teid/);
  });

  it.each([
    ['one column in', '     src_prefix_len: 64'],
    ['one column out', '   src_prefix_len: 64'],
    ['under the list', '  src_prefix_len: 64'],
    ['a continuation line', '      64'],
  ])('a member %s: read as the block reader reads it', (_what, line) => {
    const text = `localsids:\n  - sid: 2001:db8:1::/48\n    src_prefix_len: 64\n  - sid: 2001:db8:2::/48\n${line}\n  - sid: 2001:db8:3::/48\n    src_prefix_len: 64\n`;
    expect(outcome(() => parseConfig(text, FILE))).toEqual(outcome(() => parseConfigReadWhole(text, FILE)));
  });

  it('a key given twice in a plain item is refused, as the block reader refuses it', () => {
    const text = 'localsids:\n  - sid: 2001:db8:1::/48\n    src_prefix_len: 64\n  - sid: 2001:db8:2::/48\n    src_prefix_len: 64\n    src_prefix_len: 64\n';
    const got = outcome(() => parseConfig(text, FILE));
    expect(got).toEqual(outcome(() => parseConfigReadWhole(text, FILE)));
    expect(typeof got).toBe('string');
  });
});
