/**
 * Sessions: bad input is refused with file:line and the key path, and the
 * tables stay as they were (byte for byte); the API's rule kind round-trips
 * a session through its JSON form.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../src/config/errors.js';
import { parseConfig, parseSessionEntry } from '../src/config/load.js';
import { LAYOUTS } from '../src/dataplane/codec.js';
import { openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { mapDump } from '../src/dataplane/libbpf.js';
import { RULE_KINDS } from '../src/daemon/rules.js';

const GOOD = `settings: { forwarding: tx }
sessions:
  - name: ue1
    ue: 10.60.0.1/32
    teid: 0x12345678
    qfi: 9
    endpoint: 192.0.2.1
    source: 198.51.100.1
    isd: 2001:db8:2::/48
    src_prefix: 2001:db8:ff::/64
  - ue: 2001:db8:60::/64
    teid: 4294967295
    qfi: 63
    rqi: true
    endpoint: 192.0.2.2
    source: 198.51.100.1
    isd: 2001:db8:2::/56
    src_prefix: 2001:db8:ff::/96
`;

function errorOf(text: string): ConfigError {
  try {
    parseConfig(text, 'bad.yaml');
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
  throw new Error('expected a ConfigError, the config was accepted');
}

/** GOOD with the first line of `key` replaced (or removed: undefined; or added to the first session when there is none). */
function edit(key: string, value: string | undefined): string {
  const lines = GOOD.split('\n');
  const i = lines.findIndex((l) => l.startsWith(`    ${key}:`));
  if (value === undefined) lines.splice(i, 1);
  else if (i < 0) lines.splice(3, 0, `    ${key}: ${value}`);
  else lines[i] = `    ${key}: ${value}`;
  return lines.join('\n');
}

describe('sessions config: bad input', () => {
  it('accepts the good config (TEID in hex and decimal, IPv4 and IPv6 UEs)', () => {
    const c = parseConfig(GOOD, 'good.yaml');
    expect(c.sessions?.map((s) => [s.teid, s.qfi, s.rqi, s.ue.family])).toEqual([
      [0x12345678, 9, false, 4],
      [0xffffffff, 63, true, 6],
    ]);
  });

  it.each([
    ['QFI > 63', edit('qfi', '64'), 'sessions[0].qfi', 6, /from 0 to 63/],
    ['TEID > 2^32-1', edit('teid', '0x100000000'), 'sessions[0].teid', 5, /0 to 4294967295/],
    ['TEID negative', edit('teid', '-1'), 'sessions[0].teid', 5, /0 to 4294967295/],
    ['TEID not a number', edit('teid', 'abc'), 'sessions[0].teid', 5, /0 to 4294967295/],
    ['L > 56', edit('isd', '2001:db8:2::/57'), 'sessions[0].isd', 9, /L at most 56/],
    ['P > 96', edit('src_prefix', '2001:db8:ff::/97'), 'sessions[0].src_prefix', 10, /P at most 96/],
    ['missing teid', edit('teid', undefined), 'sessions[0].teid', 3, /required key missing/],
    ['missing ue', edit('ue', undefined), 'sessions[0].ue', 3, /required key missing/],
    ['missing isd', edit('isd', undefined), 'sessions[0].isd', 3, /required key missing/],
    ['endpoint not IPv4', edit('endpoint', '2001:db8::1'), 'sessions[0].endpoint', 7, /IPv4 address/],
    ['rqi not a boolean', GOOD.replace('rqi: true', 'rqi: 1'), 'sessions[1].rqi', 14, /true or false/],
    ['unknown key', edit('tied', '7'), 'sessions[0].tied', 4, /unknown key \(did you mean teid\?\)/],
    ['ue duplicate, written otherwise', GOOD.replace('ue: 2001:db8:60::/64', 'ue: 10.60.0.1/32'), 'sessions[1].ue', 11, /already used by sessions\[0\]/],
    [
      'ue duplicate with host bits',
      GOOD.replace('ue: 10.60.0.1/32', 'ue: 2001:db8:60:0:0::/64'),
      'sessions[1].ue',
      11,
      /2001:db8:60::\/64 is already used by sessions\[0\]/,
    ],
  ])('%s: refused with file:line and key path', (_what, text, path, line, reason) => {
    const e = errorOf(text);
    expect(e.path).toBe(path);
    expect(e.line).toBe(line);
    expect(e.reason).toMatch(reason);
    expect(e.message).toContain(`bad.yaml:${line}: ${path}: `);
  });

  it('the API entry: the same checks, the key path in the message, and the JSON form parses back to the same session', () => {
    const k = RULE_KINDS.session;
    expect(() => k.parse({ ue: '10.1.1.1/32', teid: 1, qfi: 64, endpoint: '192.0.2.1', source: '192.0.2.2', isd: '2001:db8::/48', src_prefix: '::/0' }, 'request body')).toThrow(
      /request body: qfi: expected an integer from 0 to 63/,
    );
    const s = parseConfig(GOOD).sessions![1]!;
    const again = parseSessionEntry(k.json(s), 'request body');
    expect(k.json(again)).toEqual(k.json(s));
    expect(k.canonicalKey('2001:DB8:60:0::5/64')).toBe('2001:db8:60::/64');
  });
});

describe('sessions config: a refused config leaves the tables as they were', () => {
  let dp: Dataplane;
  const dump = (): string => {
    const ks = LAYOUTS.mup_session_key.size;
    const vs = LAYOUTS.mup_session.size;
    const d = mapDump(dp.tables.sessionsFd, ks, vs, 'mup_sessions');
    const rows: string[] = [];
    for (let i = 0; i < d.count; i++) rows.push(d.keys.subarray(i * ks, (i + 1) * ks).toString('hex') + d.values.subarray(i * vs, (i + 1) * vs).toString('hex'));
    return rows.sort().join('\n');
  };
  beforeAll(() => {
    dp = openDataplane({ config: parseConfig(GOOD, 'good.yaml') });
  });
  afterAll(() => dp?.close());

  it('every bad edit is refused before anything is written; the session table and mup_cfg are byte for byte the same', () => {
    const before = dump();
    const cfgBefore = dp.rules.readConfig();
    expect(before.split('\n')).toHaveLength(2);
    expect(cfgBefore.session4Plens).toEqual([32]);
    expect(cfgBefore.session6Plens).toEqual([64]);
    for (const text of [edit('qfi', '64'), edit('teid', '0x100000000'), edit('isd', '2001:db8:2::/57'), GOOD.replace('ue: 2001:db8:60::/64', 'ue: 10.60.0.1/32')]) {
      expect(() => dp.sync(parseConfig(text, 'bad.yaml'))).toThrow(ConfigError);
    }
    expect(dump()).toBe(before);
    expect(dp.rules.readConfig()).toEqual(cfgBefore);
  });
});
