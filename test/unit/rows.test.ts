/**
 * Sessions and policies read from a file are kept as rows
 * (src/config/rows.ts): each answers every field as the object the reader
 * made from the same item, and holds far less heap (issue 19: a million
 * sessions and a million (N3, TEID) policies in 400 MB).
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { parseConfig, parseConfigReadWhole } from '../../src/config/load.js';
import { policyKey, sessionKey } from '../../src/config/keys.js';
import { pieces } from '../../src/config/parse-pieces.js';
import { isRow, plainRule, PolicyRows, PolicyRule, SessionRows, SessionRule, type SessionProfile } from '../../src/config/rows.js';
import { LAYOUTS, writePolicyKey, writePolicyKeyFields, writeSessionKey, writeSessionKey4 } from '../../src/dataplane/codec.js';
import { sameData } from '../../src/config/same.js';
import { policyJson, sessionJson } from '../../src/daemon/rules.js';

const SESSIONS: Record<string, unknown>[] = [
  { ue: '10.60.0.1/32', teid: 1, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' },
  // Addresses above 2^31, the largest TEID, rqi, a name, segments, srh, hop limit, mtu.
  { name: 's-big', ue: '250.1.2.0/24', teid: '0xffffffff', qfi: 63, rqi: true, endpoint: '203.0.113.250', source: '255.255.255.254', isd: '2001:db8:3::/40', src_prefix: '2001:db8:fe::/56', segments: ['2001:db8:a::1', '2001:db8:b::2'], srh: 'always', hop_limit: 9, mtu: 1400 },
  // An IPv6 UE.
  { ue: '2001:db8:60::/64', teid: 0, qfi: 0, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64', mtu: 1500 },
  // The first profile again, after others.
  { ue: '10.60.0.2/32', teid: 2, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' },
];
const POLICIES: Record<string, unknown>[] = [
  { match: '10.0.0.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' },
  { name: 'n3', match: '200.64.0.1/32', teid: '0x80000000/1', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64', segments: ['2001:db8:a::1'], srh: 'reduced', hop_limit: 3, mtu: 1400 },
  { match: '200.64.0.1/32', teid: '0xffffffff/32', sid: '2001:db8:e::d4', src_prefix: '2001:db8:ff::/64' },
  { match: '0.0.0.0/0', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' },
];

function json(): string {
  return JSON.stringify({ settings: { max_policies: 64, max_sessions: 64 }, policies: POLICIES, localsids: [], sessions: SESSIONS });
}

describe('rules kept as rows', () => {
  it('a file read item by item keeps its sessions and policies as rows; each equals, field by field, the object read whole', () => {
    const rows = parseConfig(json(), 'rows.json');
    const whole = parseConfigReadWhole(json(), 'rows.json');
    for (const [got, want] of [
      [rows.sessions!, whole.sessions!],
      [rows.policies, whole.policies],
    ] as const) {
      expect(got.length).toBe(want.length);
      for (let i = 0; i < got.length; i++) {
        const r = got[i]! as unknown as Record<string, unknown>;
        const o = want[i]! as unknown as Record<string, unknown>;
        expect(isRow(r)).toBe(true);
        expect(isRow(o)).toBe(false);
        // Every field through its getter, and nothing the object has not.
        for (const k of Object.keys(o)) expect(r[k], `${i} ${k}`).toStrictEqual(o[k]);
        for (const k of ['name', 'teid', 'sid', 'mtu']) if (!(k in o)) expect(r[k], `${i} ${k}`).toBeUndefined();
        // Its plain object is the reader's, key for key and in the same order.
        const plain = plainRule(r);
        expect(isRow(plain)).toBe(false);
        expect(Object.keys(plain)).toEqual(Object.keys(o));
        expect(plain).toStrictEqual(o);
        expect(sameData(r, o)).toBe(true);
        expect(sameData(o, r)).toBe(true);
      }
    }
    // Keys, answers and the state file's records are the same.
    expect(rows.sessions!.map((s) => sessionKey(s))).toEqual(whole.sessions!.map((s) => sessionKey(s)));
    expect(rows.policies.map((p) => policyKey(p))).toEqual(whole.policies.map((p) => policyKey(p)));
    expect(rows.sessions!.map(sessionJson)).toEqual(whole.sessions!.map(sessionJson));
    expect(rows.policies.map(policyJson)).toEqual(whole.policies.map(policyJson));
    // A row differs from another row where the objects differ.
    expect(sameData(rows.sessions![0], rows.sessions![3])).toBe(false);
    expect(sameData(rows.policies[1], rows.policies[2])).toBe(false);
  });

  it('a row crosses to the daemon from the parser thread as its plain object (a clone of the row would be empty)', () => {
    const rows = parseConfig(json(), 'rows.json');
    expect(structuredClone(rows.sessions![1])).toStrictEqual({});
    const sent = [...pieces(rows)].flatMap((m) => (m.t === 'rules' ? m.rules : []));
    expect(sent).toHaveLength(POLICIES.length + SESSIONS.length);
    for (const r of sent) {
      expect(isRow(r)).toBe(false);
      expect(structuredClone(r)).toStrictEqual(r);
    }
    expect(sent[POLICIES.length + 1]).toStrictEqual(plainRule(rows.sessions![1]));
  });
});

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
/** The heap and the typed arrays' memory (a row's columns are outside the heap). */
function heapAfterGc(): number {
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

/**
 * The ceiling for a session and an (N3, TEID) policy read from a file (the
 * config alone, its lists and checks): 316 and 285 B as objects (session
 * 42's heap profile at a million), 313 B in this test before rows, 127 B with
 * rows and their key index (src/config/row-map.ts). Not a timing.
 */
const MAX_BYTES_PER_ROW_RULE = 150;

describe('memory of rules kept as rows', () => {
  it(`a session and an (N3, TEID) policy from a file keep at most ${MAX_BYTES_PER_ROW_RULE} B of heap each (the config with its rule index, 30,000 of each)`, () => {
    const n = 30000;
    const parts = [`{"settings":{"max_policies":${n},"max_sessions":${n}},"policies":[`];
    for (let i = 0; i < n; i++) parts.push(`${i === 0 ? '' : ','}{"match":"100.64.${i >> 16}.${(i >> 8) & 255}/32","teid":"${i & 255}/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64"}`);
    parts.push('],"localsids":[],"sessions":[');
    for (let i = 0; i < n; i++) parts.push(`${i === 0 ? '' : ','}{"ue":"10.${i >> 16}.${(i >> 8) & 255}.${i & 255}/32","teid":"0x${(i + 1).toString(16)}","qfi":9,"endpoint":"192.0.2.1","source":"198.51.100.1","isd":"2001:db8:2::/48","src_prefix":"2001:db8:ffff::/64"}`);
    parts.push(']}');
    const text = parts.join('');
    const before = heapAfterGc();
    const config = parseConfig(text, 'rows.json');
    const after = heapAfterGc();
    expect(config.sessions).toHaveLength(n);
    expect(isRow(config.sessions![n - 1])).toBe(true);
    const perRule = (after - before) / (2 * n);
    process.stdout.write(`heap and columns kept per rule read as a row: ${perRule.toFixed(0)} B\n`);
    expect(perRule).toBeGreaterThan(0);
    expect(perRule).toBeLessThan(MAX_BYTES_PER_ROW_RULE);
  });
});

describe('profiles of rows whose prefixes are not shared objects', () => {
  it('keep nothing per rule: 40,000 policies alternating two sr_prefixes read as new objects each time', () => {
    // A prefix with host bits set draws a warning and is parsed again for each rule (not shared): such
    // rules kept an entry of the profile index, and its prefix object, each (found in review).
    const rows = new PolicyRows();
    const srcPrefix = { addr: 0x20010db8ffff0000n << 64n, len: 64 } as never;
    const add = (i: number): void => {
      rows.add({ where: i, match: { addr: (0x0a000000 + i) >>> 0, len: 32 }, srPrefix: { addr: (0x20010db8n << 96n) | (BigInt(i & 1) << 80n), len: 48 }, srcPrefix, segments: [], srh: 'auto', hopLimit: 64 } as never);
    };
    add(0);
    add(1);
    const before = heapAfterGc();
    for (let i = 2; i < 40002; i++) add(i);
    const perRule = (heapAfterGc() - before) / 40000;
    process.stdout.write(`heap and columns kept per row with unshared prefixes: ${perRule.toFixed(0)} B\n`);
    expect(rows.profiles.list).toHaveLength(2);
    // The columns (14 B a row, in doubling arrays).
    expect(perRule).toBeLessThan(40);
  });
});

describe('a file with a warning for every rule', () => {
  it('130,000 host-bits warnings are all kept, not a stack overflow', () => {
    const n = 130000;
    // JSON, read item by item (the block YAML reader collects its warnings otherwise).
    const policies = Array.from({ length: n }, (_, i) => ({ match: `10.${i >> 16}.${(i >> 8) & 255}.${i & 255}/32`, sr_prefix: '2001:db8:1::1/48', src_prefix: '2001:db8:ff::/64' }));
    const c = parseConfig(JSON.stringify({ settings: { max_policies: n }, policies }), 'warn.json');
    expect(c.policies).toHaveLength(n);
    expect(c.warnings!.length).toBeGreaterThanOrEqual(n);
  });
});

describe('key fields read without the objects the getters make (the tables\' fill)', () => {
  it('a row\'s and its plain object\'s key fields are the same, and encode the key writePolicyKey / writeSessionKey encode', () => {
    const c = parseConfig(json(), 'k.json');
    const f = new Uint32Array(4);
    const g = new Uint32Array(4);
    for (const p of c.policies) {
      expect(isRow(p)).toBe(true);
      PolicyRule.keyFieldsOf(p, f);
      PolicyRule.keyFieldsOf(plainRule(p), g);
      expect([...f]).toEqual([...g]);
      const a = Buffer.alloc(LAYOUTS.mup_policy_key.size);
      const b = Buffer.alloc(LAYOUTS.mup_policy_key.size);
      writePolicyKey(p.match, p.teid, a, 0);
      const plen = writePolicyKeyFields(f[0]!, f[1]!, f[2]!, f[3]!, b, 0);
      expect(b.toString('hex')).toBe(a.toString('hex'));
      expect(plen).toBe(p.teid === undefined ? p.match.len : 32 + p.teid.len);
    }
    for (const x of c.sessions ?? []) {
      expect(isRow(x)).toBe(true);
      const v4 = SessionRule.ue4Of(x, f);
      expect(SessionRule.ue4Of(plainRule(x), g)).toBe(v4);
      expect(v4).toBe(x.ue.family === 4);
      if (!v4) continue;
      expect([f[0], f[1]]).toEqual([g[0], g[1]]);
      const a = Buffer.alloc(LAYOUTS.mup_session_key.size);
      const b = Buffer.alloc(LAYOUTS.mup_session_key.size);
      writeSessionKey(x.ue, a, 0);
      writeSessionKey4(f[0]!, f[1]!, b, 0);
      expect(b.toString('hex')).toBe(a.toString('hex'));
    }
  });
});

describe("a store's columns in one buffer", () => {
  const profile: SessionProfile = { isd: { addr: 0x20010db8000200000000000000000000n, len: 48 }, srcPrefix: { addr: 0x20010db8ffff00000000000000000000n, len: 64 }, segments: [], srh: 'auto', hopLimit: 64, mtu: undefined };
  const fill = (r: SessionRows, n: number, from = 0): void => {
    for (let i = from; i < from + n; i++) r.addFields(0x0a000000 + i, 32, i + 1, 9 | (i & 1 ? 64 : 0), 0xc0000201, 0xc6336401 + i, profile, i % 5 === 0 ? `s${i}` : undefined);
  };
  const rows = (r: SessionRows, n: number): unknown[] => Array.from({ length: n }, (_, i) => [r.ue(i), r.teid(i), r.qfi(i), r.rqi(i), r.endpoint(i), r.source(i), r.name(i)]);

  it('keeps every row across growth from capacity 0 and 1, and trim; taken by another store, grows on', () => {
    const want = new SessionRows(true, 'api', 100_000);
    fill(want, 1000);
    for (const capacity of [0, 1, 3, 17]) {
      const r = new SessionRows(true, 'api', capacity);
      fill(r, 1000);
      expect(rows(r, 1000), `capacity ${capacity}`).toEqual(rows(want, 1000));
      r.trim();
      expect(r.data().teid.length).toBe(1000);
      expect(rows(r, 1000)).toEqual(rows(want, 1000));
      // All seven columns views of one buffer, 22 B a row.
      const d = r.data();
      const columns = [d.ue4, d.ueLen, d.teid, d.qos, d.endpoint, d.source, d.profile];
      expect(new Set(columns.map((c) => c.buffer)).size).toBe(1);
      expect(d.teid.buffer.byteLength).toBe(22 * 1000);
    }
    // Another store takes the data (as from a thread: a copy, its capacity 100,000), then grows past it.
    const sent = structuredClone(want.data());
    const taken = new SessionRows();
    taken.take(sent, (p) => p);
    fill(taken, 100_000, 1000);
    const all = new SessionRows(true, 'api', 0);
    fill(all, 101_000);
    expect(rows(taken, 101_000)).toEqual(rows(all, 101_000));
  });

  it('refuses data whose columns are not of one length', () => {
    const r = new SessionRows();
    fill(r, 10);
    const d = r.data();
    const bad = { ...d, ue4: new Uint32Array(d.teid.length + 1) };
    expect(() => new SessionRows().take(bad, (p) => p)).toThrow(/rows sent hold no 10 sessions/);
  });
});

describe("a row's key text (policyKey, sessionKey) written from its columns", () => {
  it('is the text the object of the same rule gets: every octet width, prefix lengths 0-32, TEID values and lengths at both ends', () => {
    let seed = 5;
    const rnd = (n: number): number => {
      seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
      return seed % n;
    };
    const octet = (): number => [0, 1, 9, 10, 99, 100, 199, 200, 255][rnd(9)]!;
    const quad = (): number => ((octet() << 24) | (octet() << 16) | (octet() << 8) | octet()) >>> 0;
    const text = (a: number): string => `${a >>> 24}.${(a >>> 16) & 255}.${(a >>> 8) & 255}.${a & 255}`;
    const masked = (a: number, len: number): number => (len === 0 ? 0 : (a & ((0xffff_ffff << (32 - len)) >>> 0)) >>> 0);
    const policies = new Map<string, Record<string, unknown>>();
    const sessions = new Map<string, Record<string, unknown>>();
    for (let i = 0; policies.size < 400; i++) {
      const len = [0, 1, 8, 15, 24, 31, 32][rnd(7)]!;
      const tlen = len === 32 ? [0, 1, 4, 16, 31, 32][rnd(6)]! : 0;
      const tv = [0, 1, 0xf, 0x10, 0x12345678, 0xffff_ffff][rnd(6)]!;
      const teid = tlen === 0 ? undefined : `0x${masked(tv, tlen).toString(16)}/${tlen}`;
      const match = `${text(masked(quad(), len))}/${len}`;
      policies.set(`${match} ${teid}`, { match, ...(teid === undefined ? {} : { teid }), sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' });
      const ue = rnd(10) === 0 ? `2001:db8:${rnd(0xffff).toString(16)}::/64` : match;
      sessions.set(ue, { ue, teid: i, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' });
    }
    const c = parseConfig(JSON.stringify({ settings: { max_policies: 1024, max_sessions: 1024 }, localsids: [], policies: [...policies.values()], sessions: [...sessions.values()] }), 'keys.json');
    expect(c.policies.every(isRow) && c.sessions!.every(isRow)).toBe(true);
    expect(c.policies.some((p) => p.teid !== undefined) && c.sessions!.some((x) => x.ue.family === 6)).toBe(true);
    for (const p of c.policies) expect(policyKey(p)).toBe(policyKey(plainRule(p)));
    for (const x of c.sessions!) expect(sessionKey(x)).toBe(sessionKey(plainRule(x)));
  });
});
