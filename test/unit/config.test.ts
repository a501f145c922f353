import { API_WHERE, canonicalPolicyKey, policyKey, whereText } from '../../src/config/keys.js';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { ConfigError, type ConfigWarning } from '../../src/config/errors.js';
import { checkRuleSetLengths, DEFAULT_SETTINGS, loadConfigFile, nestedDeeperThan, parseConfig, parseConfigReadWhole, parseLocalSidEntry, parsePolicyEntry, parseSessionEntry, placed, repeatedJsonKey, SHARED_TEXTS } from '../../src/config/load.js';
import { isRow } from '../../src/config/rows.js';
import type { Config } from '../../src/config/types.js';
import { formatIpv4Prefix, formatIpv6, formatIpv6Prefix } from '../../src/sid/addr.js';

const FILE = 'test.yaml';
const EXAMPLE = fileURLToPath(new URL('../../config/example.yaml', import.meta.url));

type Obj = Record<string, unknown>;
const policy = (o: Obj = {}): Obj => ({
  match: '10.0.0.0/24',
  sr_prefix: '2001:db8:1::/48',
  src_prefix: '2001:db8:ffff::/64',
  ...o,
});
const localsid = (o: Obj = {}): Obj => ({ sid: '2001:db8:2::/48', src_prefix_len: 64, ...o });
const doc = (o: Obj): string => stringify(o);
const gtp6e = (o: Obj = {}): Obj => ({ sid: '2001:db8:7::/64', behavior: 'end.m.gtp6.e', source: '2001:db8:ff::2', ...o });
const gtp6d = (o: Obj = {}): Obj => ({
  sid: '2001:db8:6::/64',
  behavior: 'end.m.gtp6.d',
  source: '2001:db8:ff::1',
  sr_prefix: '2001:db8:1::/64',
  ...o,
});
const session = (o: Obj = {}): Obj => ({ ue: '10.60.0.1/32', teid: 1, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64', ...o });
const withPolicy = (o: Obj): string => doc({ policies: [policy(o)] });
const withLocalSid = (o: Obj): string => doc({ localsids: [localsid(o)] });
/** Drop a key from a generated entry (stringify omits undefined). */
const MISSING = undefined;

function errorOf(text: string): ConfigError {
  try {
    parseConfig(text, FILE);
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
  throw new Error('expected a ConfigError, the config was accepted');
}

// ---------------------------------------------------------------------------

describe('valid configs', () => {
  it('fills every default', () => {
    const c = parseConfig(doc({ policies: [policy()], localsids: [localsid()] }), FILE);
    expect(c.file).toBe(FILE);
    expect(c.settings).toEqual(DEFAULT_SETTINGS);
    expect(c.settings).toEqual({
      forwarding: 'fib',
      sourcePortMin: 49152,
      sourcePortMax: 65535,
      maxPolicies: 65536,
      maxLocalSids: 65536,
      hashSeed: 0,
    });
    const [p] = c.policies;
    expect(p).toBeDefined();
    // A file rule keeps its index (no string per rule); messages spell it.
    expect(p?.where).toBe(0);
    expect(whereText('policies', p!)).toBe('policies[0]');
    expect(p?.name).toBeUndefined();
    expect(formatIpv4Prefix(p!.match)).toBe('10.0.0.0/24');
    expect(formatIpv6Prefix(p!.srPrefix)).toBe('2001:db8:1::/48');
    expect(formatIpv6Prefix(p!.srcPrefix)).toBe('2001:db8:ffff::/64');
    expect(p).toMatchObject({ segments: [], srh: 'auto', hopLimit: 64 });
    const [l] = c.localsids;
    expect(whereText('localsids', l!)).toBe('localsids[0]');
    expect(formatIpv6Prefix(l!.sid)).toBe('2001:db8:2::/48');
    expect(l).toMatchObject({ srcPrefixLen: 64, container: 'always', ttl: 64 });
    expect(c.warnings).toEqual([]);
  });

  it.each([
    { name: 'empty_file', text: '' },
    { name: 'comment_only', text: '# nothing yet\n' },
    { name: 'null_sections', text: 'settings:\npolicies:\nlocalsids:\n' },
    { name: 'empty_sections', text: 'settings: {}\npolicies: []\nlocalsids: []\n' },
  ])('$name gives defaults and empty tables', ({ text }) => {
    const c = parseConfig(text, FILE);
    expect(c.settings).toEqual(DEFAULT_SETTINGS);
    expect(c.policies).toEqual([]);
    expect(c.localsids).toEqual([]);
  });

  it('reads every key', () => {
    const c = parseConfig(
      doc({
        settings: { forwarding: 'tx', udp_source_ports: '1000-2000', max_policies: 8, max_localsids: 1, hash_seed: 0xdeadbeef },
        policies: [policy({ name: 'p', segments: ['2001:db8::1', '2001:DB8:0::2'], srh: 'reduced', hop_limit: 255 })],
        localsids: [localsid({ name: 'l', src_prefix_len: 0, container: 'never', ttl: 1 })],
      }),
      FILE,
    );
    expect(c.settings).toEqual({ forwarding: 'tx', sourcePortMin: 1000, sourcePortMax: 2000, maxPolicies: 8, maxLocalSids: 1, hashSeed: 0xdeadbeef });
    expect(c.policies[0]?.segments.map(formatIpv6)).toEqual(['2001:db8::1', '2001:db8::2']);
    expect(c.policies[0]).toMatchObject({ name: 'p', srh: 'reduced', hopLimit: 255 });
    expect(c.localsids[0]).toMatchObject({ name: 'l', srcPrefixLen: 0, container: 'never', ttl: 1 });
  });

  it('reads teid and sid (issue 13): a TEID prefix, a plain last SID as a /128, teid 0/0 as none', () => {
    const c = parseConfig(
      doc({
        policies: [
          policy({ match: '10.0.0.1/32', teid: '0x12340000/16', sr_prefix: MISSING, sid: '2001:db8:e::d4' }),
          policy({ match: '10.0.0.1/32', teid: '4294967295/32' }),
          policy({ match: '10.0.0.2/32', teid: '0/0' }),
          // 0/0 is no TEID prefix at all, so it asks for no /32 either (as canonicalPolicyKey reads it).
          policy({ match: '10.0.1.0/24', teid: '0/0' }),
        ],
      }),
      FILE,
    );
    expect(c.policies[0]).toMatchObject({ teid: { value: 0x12340000, len: 16 }, srPrefix: { len: 128 } });
    expect(formatIpv6(c.policies[0]!.sid!)).toBe('2001:db8:e::d4');
    expect(c.policies[1]).toMatchObject({ teid: { value: 0xffffffff, len: 32 } });
    expect(c.policies[1]!.sid).toBeUndefined();
    expect(c.policies[2]!.teid).toBeUndefined();
    expect(c.policies[3]!.teid).toBeUndefined();
    expect(c.policies.map(policyKey)).toEqual(['10.0.0.1/32 teid 0x12340000/16', '10.0.0.1/32 teid 0xffffffff/32', '10.0.0.2/32', '10.0.1.0/24']);
    expect(canonicalPolicyKey('10.0.1.0/24 teid 0/0')).toBe('10.0.1.0/24');
  });

  it('canonical policy key text (API DELETE, state file): with and without teid', () => {
    expect(canonicalPolicyKey('10.0.0.7/24')).toBe('10.0.0.0/24');
    expect(canonicalPolicyKey('192.0.2.10/32 teid 305397760/16')).toBe('192.0.2.10/32 teid 0x12340000/16');
    expect(canonicalPolicyKey(' 192.0.2.10/32  teid 0XFFFFFFFF/32 ')).toBe('192.0.2.10/32 teid 0xffffffff/32');
    expect(canonicalPolicyKey('192.0.2.10/32 teid 0/0')).toBe('192.0.2.10/32');
    expect(() => canonicalPolicyKey('192.0.2.0/24 teid 0x1/32')).toThrow(/single-address match \(\/32\), got \/24/);
    expect(() => canonicalPolicyKey('192.0.2.10/32 teid 0x12345678/16')).toThrow(/bits set past the first 16/);
    expect(() => canonicalPolicyKey('192.0.2.10/32 tied 1/32')).toThrow(/not a policy key/);
  });

  it('accepts the limits: L=56, P=96, 4 segments, 16 prefix lengths, a one-port range', () => {
    const policies = Array.from({ length: 16 }, (_, i) => policy({ match: `10.0.0.0/${i + 8}` }));
    policies[0] = policy({
      match: '10.0.0.0/8',
      sr_prefix: '2001:db8:1:200::/56',
      src_prefix: '2001:db8:ffff::/96',
      segments: ['::1', '::2', '::3', '::4'],
    });
    const c = parseConfig(doc({ settings: { udp_source_ports: '2152-2152', hash_seed: 0xffffffff }, policies }), FILE);
    expect(c.policies).toHaveLength(16);
    expect(c.settings.sourcePortMin).toBe(2152);
  });

  it('reads GTP6 local SIDs, leaving GTP4 entries without a behavior as they were', () => {
    const c = parseConfig(
      doc({
        localsids: [
          localsid(),
          gtp6e({ container: 'auto', hop_limit: 9 }),
          gtp6d({ segments: ['2001:db8::1'], srh: 'reduced', hop_limit: 200 }),
          gtp6d({ sid: '2001:db8:6:1::/64', behavior: 'end.m.gtp6.d.di', sr_prefix: 'fc00::/88' }),
        ],
      }),
      FILE,
    );
    expect(c.localsids[0]).not.toHaveProperty('behavior');
    expect(c.localsids[1]).toMatchObject({ behavior: 'end.m.gtp6.e', container: 'auto', ttl: 9 });
    expect(formatIpv6(c.localsids[1]!.source!)).toBe('2001:db8:ff::2');
    expect(c.localsids[2]).toMatchObject({ behavior: 'end.m.gtp6.d', srh: 'reduced', ttl: 200 });
    expect(c.localsids[2]!.segments!.map(formatIpv6)).toEqual(['2001:db8::1']);
    expect(formatIpv6Prefix(c.localsids[3]!.srPrefix!)).toBe('fc00::/88');
    expect(c.localsids[3]).toMatchObject({ behavior: 'end.m.gtp6.d.di', srh: 'auto', ttl: 64 });
  });

  it('hex and YAML anchors work', () => {
    const text = 'settings:\n  hash_seed: 0x10\npolicies:\n  - &p {match: 10.0.0.0/8, sr_prefix: "2001:db8::/32", src_prefix: "2001:db8::/64"}\n';
    expect(parseConfig(text, FILE).settings.hashSeed).toBe(16);
  });

  it('masks host bits and warns with file, line and key path', () => {
    const text = [
      'policies:',
      '  - match: 10.0.0.7/24',
      '    sr_prefix: 2001:db8:1::1/48',
      '    src_prefix: 2001:db8:ffff::/64',
      'localsids:',
      '  - sid: 2001:db8:2:ff::/48',
      '    src_prefix_len: 64',
    ].join('\n');
    const c = parseConfig(text, FILE);
    expect(formatIpv4Prefix(c.policies[0]!.match)).toBe('10.0.0.0/24');
    expect(formatIpv6Prefix(c.policies[0]!.srPrefix)).toBe('2001:db8:1::/48');
    expect(formatIpv6Prefix(c.localsids[0]!.sid)).toBe('2001:db8:2::/48');
    expect(c.warnings?.map((w) => w.message)).toEqual([
      'test.yaml:2: policies[0].match: 10.0.0.7/24 has host bits set past /24; using 10.0.0.0/24',
      'test.yaml:3: policies[0].sr_prefix: 2001:db8:1::1/48 has host bits set past /48; using 2001:db8:1::/48',
      'test.yaml:6: localsids[0].sid: 2001:db8:2:ff::/48 has host bits set past /48; using 2001:db8:2::/48',
    ]);
  });

  it('warns about a local SID of ::/0', () => {
    const c = parseConfig(withLocalSid({ sid: '::/0' }), FILE);
    expect(c.warnings?.[0]?.path).toBe('localsids[0].sid');
  });

  it('loads config/example.yaml without warnings', async () => {
    const c = await loadConfigFile(EXAMPLE);
    expect(c.warnings).toEqual([]);
    expect(c.policies.length).toBeGreaterThan(0);
    expect(c.localsids.length).toBeGreaterThan(0);
    // the example shows every key
    const text = (await import('node:fs')).readFileSync(EXAMPLE, 'utf8');
    for (const key of ['forwarding', 'udp_source_ports', 'max_policies', 'max_localsids', 'hash_seed', 'name', 'match', 'sr_prefix', 'src_prefix', 'segments', 'srh', 'hop_limit', 'sid', 'src_prefix_len', 'container', 'ttl']) {
      expect(text).toMatch(new RegExp(`^\\s*-?\\s*${key}:`, 'm'));
    }
  });

  it('loadConfigFile reports a missing file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mup-config-'));
    try {
      const path = join(dir, 'nope.yaml');
      await expect(loadConfigFile(path)).rejects.toThrow(ConfigError);
      await expect(loadConfigFile(path)).rejects.toThrow(/cannot read/);
      writeFileSync(join(dir, 'bad.yaml'), 'policies:\n  - match: 10.0.0.0/33\n');
      await expect(loadConfigFile(join(dir, 'bad.yaml'))).rejects.toThrow(`${join(dir, 'bad.yaml')}:2: policies[0].match:`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

// ---------------------------------------------------------------------------
// One row per error: the key path must be in the message, and the reason
// must say what would be accepted.

const many = (n: number, f: (i: number) => Obj): Obj[] => Array.from({ length: n }, (_, i) => f(i));

const errors: { name: string; text: string; path: string; msg: RegExp }[] = [
  // top level
  { name: 'top_is_list', text: '- a\n', path: '', msg: /mapping with keys settings, interfaces, daemon, policies, localsids/ },
  { name: 'top_is_scalar', text: 'hello\n', path: '', msg: /mapping/ },
  { name: 'unknown_top_key', text: doc({ polices: [] }), path: 'polices', msg: /did you mean policies\?.*allowed keys.*settings, interfaces, daemon, policies, localsids/ },
  { name: 'unknown_top_key_far', text: doc({ zzz: 1 }), path: 'zzz', msg: /unknown key; allowed keys at the top level/ },
  { name: 'weird_key_quoted', text: doc({ 'a b': 1 }), path: '["a b"]', msg: /unknown key/ },
  // settings
  { name: 'settings_list', text: doc({ settings: [] }), path: 'settings', msg: /mapping/ },
  { name: 'settings_unknown', text: doc({ settings: { forwrding: 'fib' } }), path: 'settings.forwrding', msg: /did you mean forwarding/ },
  { name: 'forwarding_bad', text: doc({ settings: { forwarding: 'xdp' } }), path: 'settings.forwarding', msg: /one of fib, tx, kernel/ },
  { name: 'ports_number', text: doc({ settings: { udp_source_ports: 5000 } }), path: 'settings.udp_source_ports', msg: /"MIN-MAX"/ },
  { name: 'ports_reversed', text: doc({ settings: { udp_source_ports: '6000-5000' } }), path: 'settings.udp_source_ports', msg: /MIN <= MAX/ },
  { name: 'ports_zero', text: doc({ settings: { udp_source_ports: '0-100' } }), path: 'settings.udp_source_ports', msg: /1 <= MIN/ },
  { name: 'ports_too_high', text: doc({ settings: { udp_source_ports: '1-70000' } }), path: 'settings.udp_source_ports', msg: /65535/ },
  { name: 'ports_spaces', text: doc({ settings: { udp_source_ports: '1 - 2' } }), path: 'settings.udp_source_ports', msg: /49152-65535/ },
  { name: 'max_policies_zero', text: doc({ settings: { max_policies: 0 } }), path: 'settings.max_policies', msg: /integer from 1 to 2097152/ },
  { name: 'max_policies_big', text: doc({ settings: { max_policies: 2097153 } }), path: 'settings.max_policies', msg: /1 to 2097152/ },
  { name: 'max_localsids_float', text: doc({ settings: { max_localsids: 1.5 } }), path: 'settings.max_localsids', msg: /integer.*1\.5/ },
  { name: 'max_localsids_string', text: doc({ settings: { max_localsids: '10' } }), path: 'settings.max_localsids', msg: /integer.*string "10"/ },
  { name: 'hash_seed_negative', text: doc({ settings: { hash_seed: -1 } }), path: 'settings.hash_seed', msg: /0 to 4294967295/ },
  { name: 'hash_seed_big', text: doc({ settings: { hash_seed: 2 ** 32 } }), path: 'settings.hash_seed', msg: /0 to 4294967295/ },
  // policies: shape
  { name: 'policies_mapping', text: doc({ policies: policy() }), path: 'policies', msg: /list of policies/ },
  { name: 'policy_scalar', text: doc({ policies: ['x'] }), path: 'policies[0]', msg: /mapping with keys name, match/ },
  { name: 'policy_unknown_key', text: withPolicy({ sr_prefx: '2001:db8::/32' }), path: 'policies[0].sr_prefx', msg: /did you mean sr_prefix\?/ },
  { name: 'policy_missing_match', text: withPolicy({ match: MISSING }), path: 'policies[0].match', msg: /required.*192\.0\.2\.0\/24/ },
  { name: 'policy_null_match', text: 'policies:\n  - match:\n    sr_prefix: 2001:db8::/32\n    src_prefix: 2001:db8::/64\n', path: 'policies[0].match', msg: /required/ },
  { name: 'policy_missing_sr_prefix', text: withPolicy({ sr_prefix: MISSING }), path: 'policies[0].sr_prefix', msg: /required.*<= 56/ },
  { name: 'policy_missing_src_prefix', text: withPolicy({ src_prefix: MISSING }), path: 'policies[0].src_prefix', msg: /required.*<= 96/ },
  // policies: values
  { name: 'match_ipv6', text: withPolicy({ match: '2001:db8::/32' }), path: 'policies[0].match', msg: /IPv4 prefix/ },
  { name: 'match_no_len', text: withPolicy({ match: '10.0.0.1' }), path: 'policies[0].match', msg: /ADDRESS\/LENGTH/ },
  { name: 'match_len_33', text: withPolicy({ match: '10.0.0.0/33' }), path: 'policies[0].match', msg: /0 to 32/ },
  { name: 'match_number', text: withPolicy({ match: 10 }), path: 'policies[0].match', msg: /IPv4 prefix.*number 10/ },
  { name: 'sr_prefix_len_57', text: withPolicy({ sr_prefix: '2001:db8::/57' }), path: 'policies[0].sr_prefix', msg: /L \+ 32 \+ 40 must fit in 128 bits/ },
  { name: 'sr_prefix_len_64', text: withPolicy({ sr_prefix: '2001:db8::/64' }), path: 'policies[0].sr_prefix', msg: /at most 56/ },
  { name: 'sr_prefix_ipv4', text: withPolicy({ sr_prefix: '10.0.0.0/8' }), path: 'policies[0].sr_prefix', msg: /IPv6 prefix/ },
  { name: 'src_prefix_len_97', text: withPolicy({ src_prefix: '2001:db8::/97' }), path: 'policies[0].src_prefix', msg: /P \+ 32 must fit in 128 bits/ },
  { name: 'src_prefix_list', text: withPolicy({ src_prefix: ['2001:db8::/64'] }), path: 'policies[0].src_prefix', msg: /IPv6 prefix.*a list/ },
  { name: 'segments_scalar', text: withPolicy({ segments: '2001:db8::1' }), path: 'policies[0].segments', msg: /list of at most 4 IPv6 addresses/ },
  { name: 'segments_five', text: withPolicy({ segments: ['::1', '::2', '::3', '::4', '::5'] }), path: 'policies[0].segments', msg: /at most 4/ },
  { name: 'segment_prefix', text: withPolicy({ segments: ['2001:db8::1', '2001:db8::/64'] }), path: 'policies[0].segments[1]', msg: /without \/LENGTH/ },
  { name: 'segment_ipv4', text: withPolicy({ segments: ['10.0.0.1'] }), path: 'policies[0].segments[0]', msg: /IPv6 address/ },
  { name: 'segment_number', text: withPolicy({ segments: [1] }), path: 'policies[0].segments[0]', msg: /IPv6 address/ },
  { name: 'srh_bad', text: withPolicy({ srh: 'never' }), path: 'policies[0].srh', msg: /one of auto, always, reduced/ },
  { name: 'srh_bool', text: withPolicy({ srh: true }), path: 'policies[0].srh', msg: /one of auto, always, reduced, got true/ },
  { name: 'hop_limit_0', text: withPolicy({ hop_limit: 0 }), path: 'policies[0].hop_limit', msg: /1 to 255/ },
  { name: 'hop_limit_256', text: withPolicy({ hop_limit: 256 }), path: 'policies[0].hop_limit', msg: /1 to 255/ },
  { name: 'hop_limit_string', text: withPolicy({ hop_limit: '64' }), path: 'policies[0].hop_limit', msg: /1 to 255/ },
  { name: 'name_number', text: withPolicy({ name: 12 }), path: 'policies[0].name', msg: /quote it/ },
  { name: 'name_empty', text: withPolicy({ name: ' ' }), path: 'policies[0].name', msg: /must not be empty/ },
  // policies: cross checks
  {
    name: 'policy_duplicate_match',
    text: doc({ policies: [policy(), policy({ match: '10.0.0.0/8' }), policy({ match: '10.0.0.9/24' })] }),
    path: 'policies[2].match',
    msg: /10\.0\.0\.0\/24 is already used by policies\[0\]/,
  },
  {
    name: 'policy_duplicate_name',
    text: doc({ policies: [policy({ name: 'a' }), policy({ name: 'a', match: '10.0.1.0/24' })] }),
    path: 'policies[1].name',
    msg: /already used by policies\[0\].*unique/,
  },
  {
    // A repeated name is the error before a repeated key met earlier in the file (checkRules reads both in one pass).
    name: 'policy_duplicate_key_then_name',
    text: doc({ policies: [policy({ name: 'a' }), policy({ name: 'b' }), policy({ name: 'a', match: '10.0.1.0/24' })] }),
    path: 'policies[2].name',
    msg: /already used by policies\[0\].*unique/,
  },
  {
    // Of two repeated keys, the first one met is the error.
    name: 'policy_duplicate_keys_first',
    text: doc({ policies: [policy({ match: '10.0.1.0/24' }), policy(), policy({ match: '10.0.1.7/24' }), policy({ match: '10.0.0.9/24' })] }),
    path: 'policies[2].match',
    msg: /10\.0\.1\.0\/24 is already used by policies\[0\]/,
  },
  {
    name: 'policy_count',
    text: doc({ settings: { max_policies: 2 }, policies: many(3, (i) => policy({ match: `10.0.${i}.0/24` })) }),
    path: 'policies',
    msg: /3 policies but settings\.max_policies is 2; raise settings\.max_policies/,
  },
  {
    name: 'policy_17_lengths',
    text: doc({ policies: many(17, (i) => policy({ match: `10.0.0.0/${i + 8}` })) }),
    path: 'policies[16].match',
    msg: /17th distinct prefix length.*at most 16/,
  },
  {
    // Each UE family is a table of its own: 16 IPv4 lengths and 16 IPv6 ones are 16 each; a 17th IPv4 one is refused at
    // the rule that brings it, after IPv6 rules between them.
    name: 'session_17_v4_lengths_among_v6',
    text: doc({ sessions: many(33, (i) => session({ ue: i % 2 === 0 ? `10.0.0.0/${i / 2 + 8}` : `2001:db8:${i}::/${(i + 1) / 2 + 40}` })) }),
    path: 'sessions[32].ue',
    msg: /17th distinct prefix length among the ue prefixes \(\/24 .* \/8\).*at most 16/,
  },
  {
    // The IPv4 family is checked first: its 17th length is the error even where an IPv6 17th comes earlier in the list.
    name: 'session_17_v6_lengths_before_17_v4',
    text: doc({ sessions: [...many(17, (i) => session({ ue: `2001:db8:${i}::/${i + 40}` })), ...many(17, (i) => session({ ue: `10.0.0.0/${i + 8}` }))] }),
    path: 'sessions[33].ue',
    msg: /17th distinct prefix length among the ue prefixes \(\/24 .* \/8\)/,
  },
  {
    name: 'session_17_v6_lengths',
    text: doc({ sessions: [session({ ue: '10.0.0.0/8' }), ...many(17, (i) => session({ ue: `2001:db8:${i}::/${i + 40}` }))] }),
    path: 'sessions[17].ue',
    msg: /17th distinct prefix length among the ue prefixes \(\/56 .* \/40\)/,
  },
  // localsids
  { name: 'localsids_scalar', text: doc({ localsids: 'x' }), path: 'localsids', msg: /list of local SIDs/ },
  { name: 'localsid_list', text: doc({ localsids: [[]] }), path: 'localsids[0]', msg: /mapping with keys name, sid/ },
  { name: 'localsid_unknown_key', text: withLocalSid({ src_prefix: '2001:db8::/64' }), path: 'localsids[0].src_prefix', msg: /did you mean src_prefix_len\?.*allowed keys in a local SID: name, sid, src_prefix_len, container, ttl/ },
  { name: 'localsid_missing_sid', text: withLocalSid({ sid: MISSING }), path: 'localsids[0].sid', msg: /required.*<= 56/ },
  { name: 'localsid_missing_p', text: withLocalSid({ src_prefix_len: MISSING }), path: 'localsids[0].src_prefix_len', msg: /required.*0 to 96/ },
  { name: 'sid_len_57', text: withLocalSid({ sid: '2001:db8::/57' }), path: 'localsids[0].sid', msg: /L \+ 32 \+ 40 must fit in 128 bits/ },
  { name: 'sid_no_len', text: withLocalSid({ sid: '2001:db8::' }), path: 'localsids[0].sid', msg: /ADDRESS\/LENGTH/ },
  { name: 'src_prefix_len_97', text: withLocalSid({ src_prefix_len: 97 }), path: 'localsids[0].src_prefix_len', msg: /0 to 96 \(P plus the 32-bit IPv4 source must fit in 128 bits\)/ },
  { name: 'src_prefix_len_negative', text: withLocalSid({ src_prefix_len: -1 }), path: 'localsids[0].src_prefix_len', msg: /0 to 96/ },
  { name: 'src_prefix_len_prefix', text: withLocalSid({ src_prefix_len: '/64' }), path: 'localsids[0].src_prefix_len', msg: /integer from 0 to 96/ },
  { name: 'container_bad', text: withLocalSid({ container: 'yes' }), path: 'localsids[0].container', msg: /one of always, auto, never/ },
  { name: 'ttl_0', text: withLocalSid({ ttl: 0 }), path: 'localsids[0].ttl', msg: /1 to 255/ },
  { name: 'ttl_256', text: withLocalSid({ ttl: 256 }), path: 'localsids[0].ttl', msg: /1 to 255/ },
  {
    name: 'localsid_duplicate_sid',
    text: doc({ localsids: [localsid(), localsid({ sid: '2001:db8:2::1/48' })] }),
    path: 'localsids[1].sid',
    msg: /2001:db8:2::\/48 is already used by localsids\[0\]/,
  },
  {
    name: 'localsid_duplicate_name',
    text: doc({ localsids: [localsid({ name: 'x' }), localsid({ name: 'x', sid: '2001:db8:3::/48' })] }),
    path: 'localsids[1].name',
    msg: /already used/,
  },
  {
    name: 'localsid_count',
    text: doc({ settings: { max_localsids: 1 }, localsids: [localsid(), localsid({ sid: '2001:db8:3::/48' })] }),
    path: 'localsids',
    msg: /2 local SIDs but settings\.max_localsids is 1/,
  },
  {
    name: 'localsid_17_lengths',
    text: doc({ localsids: many(17, (i) => localsid({ sid: `2001:db8::/${i + 32}` })) }),
    path: 'localsids[16].sid',
    msg: /17th distinct prefix length.*at most 16/,
  },
  // GTP-U over IPv6 local SIDs
  { name: 'behavior_bad', text: withLocalSid({ behavior: 'end.m.gtp6' }), path: 'localsids[0].behavior', msg: /one of end\.m\.gtp4\.e, end\.m\.gtp6\.e, end\.m\.gtp6\.d, end\.m\.gtp6\.d\.di/ },
  { name: 'gtp6e_src_prefix_len', text: doc({ localsids: [gtp6e({ src_prefix_len: 64 })] }), path: 'localsids[0].src_prefix_len', msg: /not a key of behavior end\.m\.gtp6\.e; it takes sid, source, container, hop_limit/ },
  { name: 'gtp6e_missing_source', text: doc({ localsids: [gtp6e({ source: MISSING })] }), path: 'localsids[0].source', msg: /required.*outer IPv6 source/ },
  { name: 'gtp6e_source_prefix', text: doc({ localsids: [gtp6e({ source: '2001:db8::/64' })] }), path: 'localsids[0].source', msg: /./ },
  { name: 'gtp6e_sid_len_89', text: doc({ localsids: [gtp6e({ sid: '2001:db8::/89' })] }), path: 'localsids[0].sid', msg: /L \+ 40 must fit in 128 bits: L at most 88/ },
  { name: 'gtp6d_missing_sr_prefix', text: doc({ localsids: [gtp6d({ sr_prefix: MISSING })] }), path: 'localsids[0].sr_prefix', msg: /required.*<= 88/ },
  { name: 'gtp6d_sr_prefix_len_89', text: doc({ localsids: [gtp6d({ sr_prefix: '2001:db8::/89' })] }), path: 'localsids[0].sr_prefix', msg: /at most 88/ },
  { name: 'gtp6d_container', text: doc({ localsids: [gtp6d({ container: 'never' })] }), path: 'localsids[0].container', msg: /not a key of behavior end\.m\.gtp6\.d/ },
  { name: 'gtp6d_5_segments', text: doc({ localsids: [gtp6d({ segments: ['::1', '::2', '::3', '::4', '::5'] })] }), path: 'localsids[0].segments', msg: /at most 4/ },
  { name: 'gtp6d_srh_bad', text: doc({ localsids: [gtp6d({ behavior: 'end.m.gtp6.d.di', srh: 'none' })] }), path: 'localsids[0].srh', msg: /one of auto, always, reduced/ },
  { name: 'gtp6_duplicate_sid', text: doc({ localsids: [localsid({ sid: '2001:db8:6::/48' }), gtp6d({ sid: '2001:db8:6::/48' })] }), path: 'localsids[1].sid', msg: /already used by localsids\[0\]/ },
  { name: 'policy_mtu_1279', text: withPolicy({ mtu: 1279 }), path: 'policies[0].mtu', msg: /1280 to 65535 \(the translated packet is IPv6\)/ },
  { name: 'gtp4e_mtu_67', text: withLocalSid({ mtu: 67 }), path: 'localsids[0].mtu', msg: /68 to 65535 \(the translated packet is IPv4\)/ },
  { name: 'gtp6e_mtu_1279', text: doc({ localsids: [gtp6e({ mtu: 1279 })] }), path: 'localsids[0].mtu', msg: /1280 to 65535/ },
  // (N3, TEID) policies and plain SIDs (issue 13)
  { name: 'teid_len_33', text: withPolicy({ match: '10.0.0.1/32', teid: '0x1/33' }), path: 'policies[0].teid', msg: /\/33: a TEID prefix is at most 32 bits long/ },
  { name: 'teid_bits_past_len', text: withPolicy({ match: '10.0.0.1/32', teid: '0x12345678/16' }), path: 'policies[0].teid', msg: /bits set past the first 16; write 0x12340000\/16 or a longer prefix/ },
  { name: 'teid_on_slash24', text: withPolicy({ match: '10.0.0.0/24', teid: '0x12340000/16' }), path: 'policies[0].teid', msg: /teid needs a single-address match \(\/32\), but match is \/24/ },
  { name: 'teid_on_slash31', text: withPolicy({ match: '10.0.0.0/31', teid: '0x80000000/1' }), path: 'policies[0].teid', msg: /single-address match/ },
  { name: 'teid_number', text: withPolicy({ match: '10.0.0.1/32', teid: 5 }), path: 'policies[0].teid', msg: /TEID prefix VALUE\/BITS such as 0x12340000\/16, got the number 5/ },
  { name: 'teid_value_33_bits', text: withPolicy({ match: '10.0.0.1/32', teid: '0x100000000/32' }), path: 'policies[0].teid', msg: /out of range; a TEID is 32 bits/ },
  { name: 'teid_no_bits', text: withPolicy({ match: '10.0.0.1/32', teid: '0x1234' }), path: 'policies[0].teid', msg: /not a TEID prefix; expected VALUE\/BITS/ },
  {
    name: 'teid_duplicate_hex_and_decimal',
    text: doc({ policies: [policy({ match: '10.0.0.1/32', teid: '0x12340000/16' }), policy({ match: '10.0.0.1/32', teid: '305397760/16' })] }),
    path: 'policies[1].match',
    msg: /10\.0\.0\.1\/32 teid 0x12340000\/16 is already used by policies\[0\]/,
  },
  {
    name: 'teid_0_0_is_no_teid',
    text: doc({ policies: [policy({ match: '10.0.0.1/32' }), policy({ match: '10.0.0.1/32', teid: '0/0' })] }),
    path: 'policies[1].match',
    msg: /10\.0\.0\.1\/32 is already used by policies\[0\].*teid 0\/0 is the same as none/,
  },
  { name: 'sid_and_sr_prefix', text: withPolicy({ sid: '2001:db8:e::d4' }), path: 'policies[0].sid', msg: /give sr_prefix .* or sid .*, not both/ },
  { name: 'sid_with_len', text: withPolicy({ sr_prefix: MISSING, sid: '2001:db8:e::/64' }), path: 'policies[0].sid', msg: /a policy's sid is an address .*not a prefix; drop the \/length/ },
  { name: 'sid_ipv4', text: withPolicy({ sr_prefix: MISSING, sid: '10.0.0.1' }), path: 'policies[0].sid', msg: /IPv6 address/ },
  { name: 'sid_number', text: withPolicy({ sr_prefix: MISSING, sid: 7 }), path: 'policies[0].sid', msg: /IPv6 address such as 2001:db8:e::d4, got the number 7/ },
  { name: 'neither_sid_nor_sr_prefix', text: withPolicy({ sr_prefix: MISSING }), path: 'policies[0].sr_prefix', msg: /required key missing.*or instead sid/ },
  {
    name: 'teid_lengths_need_slash32_too',
    text: doc({ policies: [...many(15, (i) => policy({ match: `10.0.0.0/${i + 8}` })), policy({ match: '10.9.9.9/32', teid: '0x80000000/1' })] }),
    path: 'policies[15].teid',
    msg: /needs the \/32 one too \(17\); the data path supports at most 16/,
  },
  { name: 'policy_behavior_bad', text: withPolicy({ behavior: 'end.m.gtp6.d' }), path: 'policies[0].behavior', msg: /one of h\.m\.gtp4\.d/ },
];

describe('config errors', () => {
  it.each(errors)('$name', ({ text, path, msg }) => {
    const e = errorOf(text);
    expect(e.file).toBe(FILE);
    expect(e.path).toBe(path);
    expect(e.message).toMatch(new RegExp(`^test\\.yaml(:\\d+)?: `));
    if (path !== '') expect(e.message).toContain(`: ${path}: `);
    expect(e.message).toMatch(msg);
  });

  // The prefix-length checks read a row's lengths from its columns and an object's from its fields: the same
  // refusals from a JSON file (flat rows) and from the API's rules (objects: checkRuleSetLengths).
  it.each(errors.filter((x) => /_lengths|lengths_/.test(x.name)))('$name: read from JSON, and as the API\'s rule objects', ({ text, path, msg }) => {
    const tree = parse(text) as { policies?: Obj[]; localsids?: Obj[]; sessions?: Obj[] };
    const e = errorOf(JSON.stringify(tree));
    expect(e.path).toBe(path);
    expect(e.message).toMatch(msg);
    const objects = {
      policies: (tree.policies ?? []).map((v, i) => parsePolicyEntry(v, `policies[${i}]`)),
      localsids: (tree.localsids ?? []).map((v, i) => parseLocalSidEntry(v, `localsids[${i}]`)),
      sessions: (tree.sessions ?? []).map((v, i) => parseSessionEntry(v, `sessions[${i}]`)),
    };
    expect(objects.policies.some(isRow) || objects.sessions.some(isRow)).toBe(false);
    expect(() => checkRuleSetLengths('api', objects)).toThrow(msg);
  });

  it('points at the line of the offending key', () => {
    const text = ['settings:', '  forwarding: fib', 'policies:', '  - match: 10.0.0.0/24', '    sr_prefix: 2001:db8::/64', '    src_prefix: 2001:db8::/64'].join('\n');
    const e = errorOf(text);
    expect(e.line).toBe(5);
    expect(e.message).toMatch(/^test\.yaml:5: policies\[0\]\.sr_prefix: /);
  });

  it.each([
    { name: 'bad_indent', text: 'policies:\n  - match: 10.0.0.0/24\n   sr_prefix: x\n', line: 3 },
    { name: 'unclosed_flow', text: 'settings: {forwarding: fib\n', line: 2 },
    { name: 'duplicate_key', text: 'settings:\n  forwarding: fib\n  forwarding: tx\n', line: 3 },
    { name: 'tab_indent', text: 'settings:\n\tforwarding: fib\n', line: 2 },
  ])('YAML syntax error $name gives file:line', ({ text, line }) => {
    const e = errorOf(text);
    expect(e.line).toBe(line);
    expect(e.message).toMatch(new RegExp(`^test\\.yaml:${line}: YAML syntax error`));
  });
});

describe('JSON configs (JSON is YAML; read with JSON.parse, rule by rule)', () => {
  const FILE = 'test.json';
  const policy = { match: '10.0.0.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' };

  it('reads a JSON config exactly as the same config in YAML', () => {
    const asJson = parseConfig(JSON.stringify({ settings: { forwarding: 'tx' }, policies: [policy] }, null, 2), FILE);
    const asYaml = parseConfig(`settings: { forwarding: tx }\npolicies:\n  - { match: 10.0.0.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n`, FILE);
    expect({ ...asJson, warnings: [] }).toEqual({ ...asYaml, warnings: [] });
  });

  it.each([
    ['top level', '{"settings": {}, "settings": {}}', 'settings', 1],
    ['nested, escaped', '{"policies": [\n {"match": "10.0.0.0/24", "m\\u0061tch": "10.1.0.0/24"}]}', 'match', 2],
  ])('refuses a key given twice (%s), as YAML does, with the line', (_n, text, key, line) => {
    let err: unknown;
    try {
      parseConfig(text, FILE);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).line).toBe(line);
    expect((err as ConfigError).message).toMatch(new RegExp(`${key}|duplicate|once`, 'i'));
  });

  it('keeps a key repeated in different objects', () => {
    const c = parseConfig(JSON.stringify({ policies: [policy, { ...policy, match: '10.1.0.0/24' }] }), FILE);
    expect(c.policies).toHaveLength(2);
  });

  it('gives invalid JSON to the YAML parser, which words the error', () => {
    expect(() => parseConfig('{"policies": [}', FILE)).toThrow(/YAML syntax error/);
  });

  it('repeatedJsonKey finds the first repeat and its offset', () => {
    const text = '{"a": {"b": 1, "c": [ {"b": 2} ], "b": 3}}';
    expect(repeatedJsonKey(text)).toEqual({ key: 'b', offset: text.indexOf('"b": 3') });
    expect(repeatedJsonKey('{"a": "{\\"a\\": 1}", "b": ["a", "a"]}')).toBeUndefined();
  });
});

describe('rule names (issue 16: no terminal escapes or 60 KB strings in policy list and /metrics)', () => {
  const bad: [string, string, RegExp][] = [
    ['an escape sequence', 'evil\u001b[2J\u001b[31mred', /policies\[0\]\.name: .*"\\u001b" at character 5; a rule name may only use/],
    ['a newline', 'two\nlines', /policies\[0\]\.name: .*"\\n" at character 4/],
    ['a space', 'ul policy', /policies\[0\]\.name: .*" " at character 3/],
    ['a quote', 'say"hi', /policies\[0\]\.name: .*"\\"" at character 4/],
    ['a non-ASCII letter', 'straße', /policies\[0\]\.name: .*"ß" at character 5/],
    ['65 characters', 'a'.repeat(65), /policies\[0\]\.name: .* is 65 characters long; a rule name has at most 64/],
    ['60 KB', 'x'.repeat(60_000), /policies\[0\]\.name: "x{40}" \(and 59960 more characters\) is 60000 characters long/],
  ];
  for (const [what, name, msg] of bad) {
    it(`a policy name with ${what} is refused, naming the key`, () => {
      expect(() => parseConfig(doc({ policies: [policy({ name })] }), FILE)).toThrow(msg);
    });
  }
  it('a local SID name is checked the same way', () => {
    expect(() => parseConfig(doc({ localsids: [localsid({ name: 'dl\u0007' })] }), FILE)).toThrow(
      /localsids\[0\]\.name: .*"\\u0007" at character 3/,
    );
  });
  it('the API reads names through the same check (parsePolicyEntry, parseLocalSidEntry)', () => {
    expect(() => parsePolicyEntry(policy({ name: 'a\u001b]0;title\u0007' }), 'request body')).toThrow(/name: .*"\\u001b" at character 2/);
    expect(() => parseLocalSidEntry(localsid({ name: 'y'.repeat(100) }), 'request body')).toThrow(/100 characters long/);
  });
  it('64 characters of the allowed set are accepted', () => {
    const name = 'Aa0._:/@+-' + 'z'.repeat(54);
    expect(name).toHaveLength(64);
    const c = parseConfig(doc({ policies: [policy({ name })], localsids: [localsid({ name: 'dl_site-1@edge:2/b+c' })] }), FILE);
    expect(c.policies[0]!.name).toBe(name);
    expect(c.localsids[0]!.name).toBe('dl_site-1@edge:2/b+c');
  });
});

describe('rules read during the block reader\'s parse (their parsed mappings die young)', () => {
  /**
   * The same config read as block YAML (the block reader, which reads each
   * rule as it reaches it) and as JSON read whole (JSON.parse: the whole
   * tree first, the rules after: parseConfigReadWhole): the same rules,
   * warnings and errors (lines aside: the two texts have their own).
   */
  function both(o: Obj): { streamed: unknown; whole: unknown } {
    const outcome = (text: string, read = parseConfig): unknown => {
      try {
        const c = read(text, FILE);
        return { ...c, warnings: c.warnings?.map((w) => `${w.path}: ${w.reason}`) };
      } catch (e) {
        if (!(e instanceof ConfigError)) throw e;
        return `${e.path}: ${e.reason}`;
      }
    };
    return { streamed: outcome(doc(o)), whole: outcome(JSON.stringify(o), parseConfigReadWhole) };
  }

  const hostBits = (i: number): Obj => policy({ match: `10.0.${i}.1/24` });
  const sidHostBits = (i: number): Obj => localsid({ sid: `2001:db8:${i}::1/48` });

  it.each([
    ['warnings in file order within a section, policies before local SIDs whatever the file order', { localsids: [sidHostBits(1), sidHostBits(2)], policies: [hostBits(1), hostBits(2)] }],
    ['a settings error after a bad policy: the settings error', { policies: [policy({ match: 'x' })], settings: { max_policies: 0 } }],
    ['a bad local SID before a bad policy in the file: the policy error', { localsids: [localsid({ sid: 'y' })], policies: [policy(), policy({ match: 'x' })] }],
    ['an unknown top-level key after a bad policy: the top-level error', { policies: [policy({ match: 'x' })], polices: [] }],
    ['more policies than max_policies, one bad: the count error', { settings: { max_policies: 1 }, policies: [policy({ match: 'x' }), policy()] }],
    ['a bad session and a duplicate policy: the duplicate', { policies: [policy(), policy()], sessions: [{ ue: 'z' }] }],
    ['a refused policy after policies with warnings', { policies: [hostBits(1), hostBits(2), policy({ sr_prefix: 'q' })] }],
    ['an item that is not a mapping', { policies: [hostBits(1), 'p'] }],
    ['a valid config with a session', { policies: [hostBits(3)], sessions: [{ ue: '10.60.0.1/32', teid: 1, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64' }] }],
  ])('%s', (_what, o) => {
    const { streamed, whole } = both(o);
    expect(streamed).toEqual(whole);
  });

  it('a file the block reader gives up on after some rules: each warning once', () => {
    // The flow-style list at the end sends the file to js-yaml after the policies were read.
    const text = `${doc({ policies: [hostBits(1), hostBits(2)] })}interfaces: [{name: eth0}]\n`;
    const c = parseConfig(text, FILE);
    expect(c.warnings?.map((w) => w.path)).toEqual(['policies[0].match', 'policies[1].match']);
    expect(c.interfaces?.map((i) => i.name)).toEqual(['eth0']);
  });
});

describe('prefixes shared by the rules read one at a time (the API, a batch)', () => {
  // Each API rule is read with a Source of its own: before, a million policies added through /v1/batch had a
  // million sr_prefix and src_prefix objects (an object and a BigInt each) where a file's had one.
  const body = (i: number, sr = '2001:db8:1::/48'): Record<string, unknown> => ({ match: `10.9.${i}.0/24`, sr_prefix: sr, src_prefix: '2001:db8:ff::/64' });

  it('two policies read apart hold one sr_prefix object and one src_prefix object', () => {
    // A first read fills the map (were it full, the second text's entry would start it again).
    parsePolicyEntry(body(0), 'operations[0].policy');
    const a = parsePolicyEntry(body(1), 'operations[1].policy');
    const b = parsePolicyEntry(body(2), 'operations[2].policy');
    expect(b.srPrefix).toBe(a.srPrefix);
    expect(b.srcPrefix).toBe(a.srcPrefix);
    expect(formatIpv6Prefix(b.srPrefix)).toBe('2001:db8:1::/48');
  });

  it('two sessions read apart hold one isd object and one src_prefix object', () => {
    const s = (i: number): Record<string, unknown> => ({
      ue: `10.60.0.${i}/32`, teid: i, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64',
    });
    parseSessionEntry(s(0), 'operations[0].session');
    const a = parseSessionEntry(s(1), 'operations[1].session');
    const b = parseSessionEntry(s(2), 'operations[2].session');
    expect(b.isd).toBe(a.isd);
    expect(b.srcPrefix).toBe(a.srcPrefix);
  });

  it('a prefix with host bits set is read again each time: each rule gets its warning', () => {
    for (let i = 0; i < 2; i++) {
      const warnings: ConfigWarning[] = [];
      const p = parsePolicyEntry(body(3 + i, '2001:db8:1::1/48'), `operations[${i}].policy`, warnings);
      expect(formatIpv6Prefix(p.srPrefix)).toBe('2001:db8:1::/48');
      expect(warnings.map((w) => w.message).join('\n')).toMatch(/host bits set/);
    }
  });

  it('distinct texts are distinct objects, whatever the number of texts read before', () => {
    const seen = new Set<unknown>();
    for (let i = 0; i < SHARED_TEXTS + 10; i++) seen.add(parsePolicyEntry(body(0, `2001:db8:${(i + 16).toString(16)}::/48`), 'x').srPrefix);
    expect(seen.size).toBe(SHARED_TEXTS + 10);
    expect(formatIpv6Prefix(parsePolicyEntry(body(0, '2001:db8:20::/48'), 'x').srPrefix)).toBe('2001:db8:20::/48');
  });
});

describe('what a config read keeps of the text', () => {
  // V8 makes a substring of 13 characters or more a slice that keeps its
  // whole parent alive: a prefix map key, a name or a warning sliced from a
  // YAML file kept each config's text (11.6 MB for bench:daemon's) for the
  // daemon's life. Each case keeps its Config; the 16 MB text must go.
  // Every text that could be a slice here is 13 characters or more.
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const pad = `#${'x'.repeat(79)}\n`.repeat(200_000);
  const sr = `2001:db8:${(0x1000 + (process.pid & 0xfff)).toString(16)}:ab00::/56`;
  const policy = (extra = '', match = '10.9.0.0/24'): string => `policies:\n  - match: ${match}\n    sr_prefix: 2001:db8:1::/48\n    src_prefix: 2001:db8:ff::/64\n${extra}`;
  /**
   * Heap bytes still held after `read` has run in a frame of its own (one
   * still running would hold the text) and returned, and the event loop has
   * turned: V8's work posted meanwhile (an optimised compile finishing on
   * the main thread, whose job holds what it saw) has run. A clean clone's
   * run once found the whole text held right after the read, a hold no
   * rerun showed; a slice the config keeps holds it after any turn.
   */
  const keptBy = async (read: () => void): Promise<number> => {
    gc();
    const before = process.memoryUsage().heapUsed;
    read();
    await new Promise((r) => setImmediate(r));
    gc();
    return process.memoryUsage().heapUsed - before;
  };
  const kept: Config[] = [];
  it.each([
    ['a shared prefix (its map key)', `policies:\n  - match: 10.9.0.0/24\n    sr_prefix: ${sr}\n    src_prefix: 2001:db8:ff::/64\n`],
    ['a long rule name', policy('    name: a-long-policy-name-of-gnb-1\n')],
    ['an interface name of 13 characters or more', `interfaces:\n  - name: enp129s0f1np10\n${policy()}`],
    ['a warning that quotes the text', policy('', '192.168.100.1/24')],
    ['a local SID\'s name', 'localsids:\n  - name: a-long-localsid-name-1\n    sid: 2001:db8:abcd::/48\n    src_prefix_len: 64\n'],
    ['a session\'s name', 'sessions:\n  - name: a-long-session-name-1\n    ue: 10.60.0.1/32\n    teid: 1\n    qfi: 9\n    endpoint: 192.0.2.1\n    source: 198.51.100.1\n    isd: 2001:db8:2::/48\n    src_prefix: 2001:db8:ffff::/64\n'],
  ])('not through %s', async (_what, body) => {
    expect(await keptBy(() => void kept.push(parseConfig(`${body}${pad}`, FILE)))).toBeLessThan(4e6);
  });

  it('the warning case warns, quoting the text', () => {
    expect(kept.find((c) => (c.warnings ?? []).length > 0)?.warnings?.[0]?.reason).toMatch(/^192\.168\.100\.1\/24 has host bits set/);
  });

  it('the refusal of a file: its reason keeps nothing of the text', async () => {
    let error: ConfigError | undefined;
    const held = await keptBy(() => {
      try {
        parseConfig(`${policy().replace('2001:db8:1::/48', '2001:db8:1234:5678::/64')}${pad}`, FILE);
      } catch (e) {
        error = e as ConfigError;
      }
      // Until its stack is formatted an Error keeps its frames' receivers (the
      // reader's Source, with the text); the daemon keeps messages, not errors.
      void error?.stack;
    });
    // Measured before the reason is read: a read flattens it (and drops what it held).
    expect(held).toBeLessThan(4e6);
    expect(error?.reason).toMatch(/^2001:db8:1234:5678::\/64: prefix length \/64 is too long/);
  });
});

describe('key texts kept per rule are flat strings', () => {
  // V8 makes a concatenation of 13 characters or more a pair of its parts:
  // a TEID policy's key text ("100.64.0.1/32 teid 0x00000005/32") was three
  // pairs and their parts, about 160 bytes, kept on the rule and in the rule
  // set; flat, it is 48. An API rule's `where` ("sessions[10.0.0.1/32]")
  // was two pairs (64 bytes) where the flat text is 40.
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const N = 100_000;
  /** Heap bytes a kept text of `make` costs, on average over N (the array's slot included). */
  const bytesEach = (make: (i: number) => string): number => {
    const out: string[] = new Array<string>(N);
    gc();
    const before = process.memoryUsage().heapUsed;
    for (let i = 0; i < N; i++) out[i] = make(i);
    gc();
    const each = (process.memoryUsage().heapUsed - before) / N;
    expect(out[N - 1]!.length).toBeGreaterThan(12);
    return each;
  };
  const n3 = (i: number): number => (0x64400000 + (i >> 10)) >>> 0;

  it('a TEID policy key, kept on its rule', () => {
    const each = bytesEach((i) => policyKey({ match: { addr: n3(i), len: 32 }, teid: { value: i & 1023, len: 32 } } as never));
    expect(each).toBeLessThan(80);
  });

  it('a TEID policy key made from API text', () => {
    expect(canonicalPolicyKey('100.64.0.1/32 teid 5/32')).toBe('100.64.0.1/32 teid 0x00000005/32');
    expect(bytesEach((i) => canonicalPolicyKey(`100.${64 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}/32 teid ${i}/32`))).toBeLessThan(80);
  });

  it("an API rule's where: one string for all, spelled from its key", () => {
    const rules = Array.from({ length: 3 }, (_, i) => placed(parseSessionEntry({ ue: `10.0.0.${i}/32`, teid: i, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64' }, 'request body'), API_WHERE));
    expect(rules.map((r) => whereText('sessions', r))).toEqual(['sessions[10.0.0.0/32]', 'sessions[10.0.0.1/32]', 'sessions[10.0.0.2/32]']);
    // Nothing kept per rule for it (a text of its own was 40-64 bytes a rule).
    expect(new Set(rules.map((r) => r.where)).size).toBe(1);
  });
});

describe('texts nested deep (found in review, session 42)', () => {
  it("are refused with the reader's words, and the next parse in the thread still runs", () => {
    // The `yaml` parser, asked for the line, overflowed its stack; the next parse of a deep JSON text in the
    // same thread aborted the process in V8's regexp compiler.
    const yamlDeep = `settings: ${'['.repeat(1000)}${']'.repeat(1000)}\n`;
    expect(() => parseConfig(yamlDeep, 'deep.yaml')).toThrow(ConfigError);
    try {
      parseConfig(yamlDeep, 'deep.yaml');
    } catch (e) {
      expect((e as ConfigError).reason).toMatch(/maxDepth/);
      expect((e as ConfigError).reason).not.toMatch(/call stack/);
    }
    const jsonDeep = `{"settings": ${'['.repeat(20_000)}${']'.repeat(20_000)}}`;
    expect(() => parseConfig(jsonDeep, 'deep.json')).toThrow(/settings: expected a mapping/);
  });

  it('nestedDeeperThan counts brackets outside quoted scalars', () => {
    expect(nestedDeeperThan('a: [[[1]]]', 3)).toBe(false);
    expect(nestedDeeperThan('a: [[[[1]]]]', 3)).toBe(true);
    expect(nestedDeeperThan('a: "[[[[[["', 3)).toBe(false);
    expect(nestedDeeperThan("a: '[[[[[['", 3)).toBe(false);
    expect(nestedDeeperThan('a: "\\"[[[[["', 3)).toBe(false);
    // An apostrophe inside a word opens no quote: the brackets after it count.
    expect(nestedDeeperThan("# don't\nb: [[[[1]]]]", 3)).toBe(true);
  });
});
