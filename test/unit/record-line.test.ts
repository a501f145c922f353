/**
 * A batch record's lines written straight into its bytes (writePutLine,
 * writeDeleteLine in src/daemon/rules.ts) are the bytes JSON.stringify
 * gives for the same line ({put, rule: RULE_KINDS[kind].json(r), base} or
 * {del, key, base}): the state file reads them back, so they must be the
 * same text. Rules of every shape: read from API entries (objects) and
 * from a JSON config (rows), with and without the optional fields, names
 * of every character a name may have, a base that must be escaped, IPv6 UE prefixes, TEIDs at both ends of their
 * range; local SIDs go through JSON.stringify and must still match.
 */
import { describe, expect, it } from 'vitest';
import { RecordBytes } from '../../src/daemon/batch.js';
import { RULE_KINDS, writeDeleteLine, writePutLine, type Rule, type RuleKind } from '../../src/daemon/rules.js';
import { parseConfig, parseLocalSidEntry, parsePolicyEntry, parseSessionEntry } from '../../src/config/load.js';

const POLICIES: Record<string, unknown>[] = [
  { match: '0.0.0.0/0', sr_prefix: '2001:db9:20::/48', src_prefix: '2001:db8:ffff::/64' },
  { name: 'p1', match: '100.64.0.1/32', teid: '0/32', sr_prefix: '2001:db9:1::/48', src_prefix: '2001:db8:ffff::/64' },
  { name: 'q.1:a/b@c+d-e_f', match: '255.255.255.255/32', teid: '0xffffffff/32', sr_prefix: '2001:db9:1::/48', src_prefix: '2001:db8:ffff::/64', mtu: 1400 },
  { name: 'Zz09', match: '203.0.113.7/32', teid: '0x12340000/16', sid: '2001:db9:1::1', src_prefix: '2001:db8::/64', segments: ['2001:db8:a::1', '2001:db8:b::'], srh: 'always', hop_limit: 1 },
  // The widest line: a long name, IPv6 texts of 39 characters, the widest numbers (the room a line is written into is a bound).
  { name: 'n'.repeat(64), match: '255.255.255.255/32', teid: '0xfffffff0/28', sid: 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe', src_prefix: 'ffff:ffff:ffff:ffff:ffff:ffff::/96', segments: Array.from({ length: 4 }, (_, i) => `ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff${i}`), hop_limit: 255, mtu: 65535 },
  { name: 'x', match: '192.0.2.128/25', sr_prefix: '2001:db9:20::/48', src_prefix: '2001:db8:ffff::/64', srh: 'reduced', hop_limit: 255, mtu: 9000 },
];

const SESSIONS: Record<string, unknown>[] = [
  { ue: '10.0.0.1/32', teid: '0x1', qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64' },
  { name: 's-1', ue: '10.0.0.0/8', teid: '0xffffffff', qfi: 63, rqi: true, endpoint: '255.255.255.255', source: '0.0.0.0', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64', mtu: 1280 },
  { ue: '2001:db8:77::/64', teid: 0, qfi: 0, endpoint: '192.0.2.9', source: '198.51.100.9', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64', segments: ['2001:db8:c::2'], srh: 'always', hop_limit: 64 },
];

const LOCALSIDS: Record<string, unknown>[] = [
  { name: 'e', sid: '2001:db8:e::/48', src_prefix_len: 64 },
  { behavior: 'end.m.gtp6.d', sid: '2001:db8:d::/48', source: '2001:db8:ff::1', sr_prefix: '2001:db9:3::/48', segments: ['2001:db8:1::1'] },
];

function line(write: (r: RecordBytes) => void): string {
  const r = new RecordBytes('', 0);
  write(r);
  return r.done().toString('utf8');
}

function expectSameLines(kind: RuleKind, rules: readonly Rule[]): void {
  const k = RULE_KINDS[kind];
  for (const r of rules) {
    for (const base of [null, 'a'.repeat(64), 'q"\\']) {
      expect(line((o) => writePutLine(o, kind, r, base)), `${kind} ${k.key(r)}`).toBe(JSON.stringify({ put: kind, rule: k.json(r), base }));
      expect(line((o) => writeDeleteLine(o, kind, k.key(r), base))).toBe(JSON.stringify({ del: kind, key: k.key(r), base }));
    }
  }
}

describe('a batch record line written as bytes', () => {
  it('API rules (objects): the same bytes as JSON.stringify of the line', () => {
    expectSameLines('policy', POLICIES.map((e) => parsePolicyEntry(e, 'test')));
    expectSameLines('session', SESSIONS.map((e) => parseSessionEntry(e, 'test')));
    expectSameLines('localsid', LOCALSIDS.map((e) => parseLocalSidEntry(e, 'test')));
  });

  it("a config file's rules (rows of typed columns): the same bytes", () => {
    const many = (n: number, f: (i: number) => Record<string, unknown>): Record<string, unknown>[] => Array.from({ length: n }, (_, i) => f(i));
    const text = JSON.stringify({
      interfaces: [{ name: 'mup0' }],
      policies: [...POLICIES, ...many(40, (i) => ({ match: `100.65.${i}.1/32`, teid: `${i}/32`, sr_prefix: '2001:db9:1::/48', src_prefix: '2001:db8:ffff::/64' }))],
      sessions: [...SESSIONS, ...many(40, (i) => ({ ue: `10.200.${i}.0/24`, teid: `0x${(i + 7).toString(16)}`, qfi: i % 64, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64' }))],
    });
    const c = parseConfig(text, 'test.json');
    expect(c.policies?.length).toBe(POLICIES.length + 40);
    expectSameLines('policy', c.policies!);
    expectSameLines('session', c.sessions!);
  });

  it('the room a line is written into holds the widest line, wherever the buffer ends', () => {
    const widest = parsePolicyEntry(POLICIES.find((e) => e['name'] === 'n'.repeat(64))!, 'test');
    const want = JSON.stringify({ put: 'policy', rule: RULE_KINDS.policy.json(widest), base: 'b'.repeat(64) });
    const full = new RecordBytes('', 0).capacity;
    // The line written when the buffer has only k bytes left: room() must make room for all of it.
    for (let k = 0; k <= want.length + 64; k++) {
      const r = new RecordBytes('', 0);
      const b = r.room(full - k);
      b.fill(0x78, 0, full - k);
      r.end = full - k;
      writePutLine(r, 'policy', widest, 'b'.repeat(64));
      expect(r.done().subarray(full - k).toString('utf8')).toBe(want);
    }
  });

  it('a field of a type the writer does not expect goes through JSON.stringify, as before', () => {
    const p = parsePolicyEntry(POLICIES[1]!, 'test');
    const odd = { ...p, hopLimit: undefined } as unknown as Rule;
    expect(line((o) => writePutLine(o, 'policy', odd, null))).toBe(JSON.stringify({ put: 'policy', rule: RULE_KINDS.policy.json(odd), base: null }));
    const s = parseSessionEntry(SESSIONS[0]!, 'test');
    const odd2 = { ...s, rqi: undefined, ue: s.ue } as unknown as Rule;
    expect(line((o) => writePutLine(o, 'session', odd2, null))).toBe(JSON.stringify({ put: 'session', rule: RULE_KINDS.session.json(odd2), base: null }));
  });
});
