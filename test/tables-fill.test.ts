/**
 * A change of new keys only (a fill of empty tables on a first start, an
 * API batch of new rules: src/dataplane/tables.ts #inserting, no Put
 * object or key text per rule) must leave the kernel maps, the
 * configuration and the mirror exactly as the general change path leaves
 * them for the same rules: every entry byte for byte, the rule ids, the
 * address-only entries of N3 addresses with TEID policies, the
 * prefix-length lists. (A change with a delete in it always takes the
 * general path: GENERAL below, a delete of a key no table has, is how the
 * tests take it.) A fill that
 * cannot be done (a key twice, in any of the three tables; a full table;
 * too many prefix lengths) writes nothing and takes no id. A write the
 * kernel refuses part way leaves the mirror holding what it wrote, on
 * either path (the map filled behind the tables' back, so that the kernel
 * runs out of room).
 */
import { closeSync, existsSync, openSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import type { Config, Policy } from '../src/config/types.js';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { encodePolicyKey, LAYOUTS } from '../src/dataplane/codec.js';
import { BatchWriteError, mapDelete, mapDeleteBatch, mapDump, mapInfo, mapUpdate, mapUpdateBatch } from '../src/dataplane/libbpf.js';
import { fillWriteThread, INSERT_CHUNK, TablesFullError } from '../src/dataplane/tables.js';
import type { WriteThread } from '../src/dataplane/write-thread.js';
import { isRow, plainRule } from '../src/config/rows.js';
import yaml from 'js-yaml';

const haveObject = existsSync(DEFAULT_OBJECT);

const SETTINGS = 'settings: { forwarding: tx, max_policies: 1024, max_localsids: 256, max_sessions: 512 }\n';

/** Added to a change, takes it through the general change path (a delete of a key no table has: nothing changes). */
const GENERAL = { delPolicies: [{ addr: 0xfffffff0, len: 28 } as never] };

/**
 * Rules of every kind and shape: prefix policies with and without segments,
 * (N3, TEID) policies on five N3 addresses (one of them with a /32 policy
 * of its own, listed after its TEID policies), local SIDs of each
 * behaviour, IPv4 and IPv6 sessions.
 */
function rulesYaml(): string {
  const out = ['policies:'];
  for (let i = 0; i < 300; i++) {
    const seg = i % 7 === 0 ? `, segments: ["2001:db8:a::${i.toString(16)}", "2001:db8:b::1"]` : '';
    out.push(`  - { match: 10.${i >> 8}.${i & 255}.0/${i % 3 === 0 ? 24 : 23 + (i % 2)}, sr_prefix: "2001:db8:${(i % 50).toString(16)}::/48", src_prefix: "2001:db8:ff::/64", hop_limit: ${32 + (i % 9)}${seg} }`);
  }
  for (let n3 = 1; n3 <= 5; n3++) {
    for (let t = 0; t < 40; t++) {
      const teid = t % 4 === 0 ? `"${t << 8}/24"` : `"${t}/32"`;
      out.push(`  - { match: 100.64.0.${n3}/32, teid: ${teid}, sid: "fc00:${n3}::${t.toString(16)}", src_prefix: "2001:db8:ff::/64" }`);
    }
  }
  out.push('  - { match: 100.64.0.3/32, sr_prefix: "2001:db8:32::/48", src_prefix: "2001:db8:ff::/64" }');
  out.push('localsids:');
  for (let i = 0; i < 60; i++) out.push(`  - { sid: "2001:db8:e${i.toString(16)}::/${i % 2 === 0 ? 48 : 56}", src_prefix_len: 64, ttl: ${10 + i} }`);
  out.push('  - { sid: "2001:db8:6::/64", behavior: end.m.gtp6.d, source: "2001:db8:ff::1", sr_prefix: "2001:db8:1::/64", mtu: 1400 }');
  out.push('  - { sid: "2001:db8:7::/64", behavior: end.m.gtp6.e, source: "2001:db8:ff::2" }');
  out.push('sessions:');
  for (let i = 0; i < 150; i++) {
    out.push(`  - { ue: 10.60.${i >> 8}.${i & 255}/32, teid: ${i + 1}, qfi: ${i % 64}, rqi: ${i % 2 === 0}, endpoint: 192.0.2.${1 + (i % 200)}, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }`);
  }
  for (let i = 0; i < 20; i++) {
    out.push(`  - { ue: "2001:db8:60:${i.toString(16)}::/64", teid: ${0xffff0000 + i}, qfi: 9, endpoint: 192.0.2.9, source: 198.51.100.2, isd: "2001:db8:3::/56", src_prefix: "2001:db8:ff::/96", segments: ["2001:db8:c::1"] }`);
  }
  return `${out.join('\n')}\n`;
}

/** Every entry of a map as "key value" in hex, sorted. */
function entries(fd: number, ks: number, vs: number, name: string): string[] {
  const { keys, values, count } = mapDump(fd, ks, vs, name);
  const rows: string[] = [];
  for (let i = 0; i < count; i++) rows.push(`${keys.subarray(i * ks, (i + 1) * ks).toString('hex')} ${values.subarray(i * vs, (i + 1) * vs).toString('hex')}`);
  return rows.sort();
}

/** The three tables, the configuration's prefix-length lists and the mirror's counts. */
function state(dp: Dataplane): Record<string, unknown> {
  const t = dp.tables;
  const c = dp.rules.readConfig();
  return {
    policies: entries(t.policiesFd, LAYOUTS.mup_policy_key.size, LAYOUTS.mup_policy.size, 'mup_policies'),
    localsids: entries(t.localsidsFd, LAYOUTS.mup_localsid_key.size, LAYOUTS.mup_localsid.size, 'mup_localsids'),
    sessions: entries(t.sessionsFd, LAYOUTS.mup_session_key.size, LAYOUTS.mup_session.size, 'mup_sessions'),
    plens: [c.policyPlens, c.localsidPlens, c.session4Plens, c.session6Plens],
    counts: [dp.rules.policyCount, dp.rules.addrOnlyCount, dp.rules.localsidCount, dp.rules.sessionCount],
    footprint: dp.rules.footprint(),
  };
}

/** Dataplanes a describe block opens (on the compiled object), each closed after the test that opened it. */
function dataplanes(): (config: Config) => Dataplane {
  const open: Dataplane[] = [];
  afterEach(() => {
    for (const d of open.splice(0)) d.close();
  });
  return (config) => {
    const d = openDataplane({ config });
    open.push(d);
    return d;
  };
}

describe.skipIf(!haveObject)('changes of new keys only (a first fill, API batches of new rules)', () => {
  const dataplane = dataplanes();

  it('leaves the maps, the rule ids, the address-only entries and the prefix lengths as the change path does', () => {
    const full = parseConfig(SETTINGS + rulesYaml(), 'fill.yaml');
    // The change path: empty tables, then every rule in one apply.
    const byChange = dataplane(parseConfig(SETTINGS, 'empty.yaml'));
    byChange.rules.apply({ putPolicies: full.policies, putLocalSids: full.localsids, putSessions: full.sessions, ...GENERAL });
    // The fill: openDataplane syncs the config into the new, empty tables.
    const byFill = dataplane(full);
    const want = state(byChange);
    const got = state(byFill);
    expect(got).toEqual(want);
    // What the comparison covers: 501 policies and 4 address-only entries (100.64.0.3 has its own /32).
    expect(got['counts']).toEqual([501, 4, 62, 170]);
    // Rule ids as the change path gave them, each key to the same id.
    for (const p of full.policies) expect(byFill.rules.policyRule(p.match, p.teid)).toBe(byChange.rules.policyRule(p.match, p.teid));
    // The same ids from a policy's own key (a row's read from its columns), and none for an address-only entry (its flags).
    for (const p of full.policies) {
      const id = byChange.rules.policyRule(p.match, p.teid);
      expect(id).toBeDefined();
      expect(byFill.rules.policyRuleOf(p)).toBe(id);
      expect(byChange.rules.policyRuleOf(p)).toBe(id);
    }
    const own = new Set(full.policies.filter((p) => p.teid === undefined && p.match.len === 32).map((p) => p.match.addr));
    const addrOnly = [...new Set(full.policies.filter((p) => p.teid !== undefined && !own.has(p.match.addr)).map((p) => p.match.addr))];
    expect(addrOnly.length).toBe(4);
    for (const addr of addrOnly) for (const d of [byFill, byChange]) expect(d.rules.policyRule({ addr, len: 32 })).toBeUndefined();
    for (const l of full.localsids) expect(byFill.rules.localsidRule(l.sid)).toBe(byChange.rules.localsidRule(l.sid));
    for (const x of full.sessions ?? []) expect(byFill.rules.sessionRule(x.ue)).toBe(byChange.rules.sessionRule(x.ue));
    // And the filled tables take changes as the others do.
    const drop = full.policies.filter((p) => p.teid !== undefined && p.match.addr === ((100 << 24) | (64 << 16) | 1) >>> 0);
    for (const d of [byChange, byFill]) d.rules.apply({ delPolicies: drop.map((p) => ({ match: p.match, teid: p.teid })) });
    expect(state(byFill)).toEqual(state(byChange));
    expect(byFill.rules.addrOnlyCount).toBe(3);
  });

  it('more rules than one chunk: each written chunk holds its own values, none of the chunk before (the fill encodes them a chunk at a time)', () => {
    // Entries of the first chunk carry every optional field (segments, a plain SID, mtu, srh, a hop limit);
    // those at the same places in the next chunks carry none: a chunk's buffer not cleared would leak them.
    const n = 2 * INSERT_CHUNK + 77;
    const out = [`settings: { forwarding: tx, max_policies: ${n}, max_localsids: 8, max_sessions: 8 }`, 'policies:'];
    for (let i = 0; i < n; i++) {
      const full = i < INSERT_CHUNK;
      const last = full
        ? `sid: "fc00::${i.toString(16)}", segments: ["2001:db8:a::1", "2001:db8:b::2", "2001:db8:c::3", "2001:db8:d::4"], srh: always, mtu: ${1280 + i}, hop_limit: 7`
        : `sr_prefix: "2001:db8:${(i % 97).toString(16)}::/48"`;
      out.push(`  - { match: 10.${i >> 8}.${i & 255}.0/24, ${last}, src_prefix: "2001:db8:ff::/64" }`);
    }
    const big = parseConfig(`${out.join('\n')}\n`, 'chunks.yaml');
    const byChange = dataplane(parseConfig(`settings: { forwarding: tx, max_policies: ${n}, max_localsids: 8, max_sessions: 8 }\n`, 'empty.yaml'));
    byChange.rules.apply({ putPolicies: big.policies, ...GENERAL });
    const byFill = dataplane(big);
    const got = state(byFill);
    expect(got['counts']).toEqual([n, 0, 0, 0]);
    expect(got).toEqual(state(byChange));
  });

  it('a JSON file (its policies and sessions kept as rows, read from their columns): the change path\'s maps, ids and lengths', () => {
    const asJson = JSON.stringify(yaml.load(SETTINGS + rulesYaml()));
    const full = parseConfig(asJson, 'fill.json');
    expect(full.policies.every((p) => isRow(p)) && (full.sessions ?? []).every((x) => isRow(x))).toBe(true);
    const byChange = dataplane(parseConfig(SETTINGS, 'empty.yaml'));
    // The change path takes the plain objects (its own encoders, the objects' getters not involved).
    byChange.rules.apply({ putPolicies: full.policies.map((p) => plainRule(p)), putLocalSids: full.localsids, putSessions: (full.sessions ?? []).map((x) => plainRule(x)), ...GENERAL });
    const byFill = dataplane(full);
    const got = state(byFill);
    expect(got['counts']).toEqual([501, 4, 62, 170]);
    expect(got).toEqual(state(byChange));
  });

  it('policies in runs of one profile (each value but its rule id the row before\'s), profiles coming back: the change path\'s values', () => {
    // Runs of 1 to 5 rows with the same prefixes, segments, srh, hop limit and mtu, a run's profile met again
    // later; TEID policies of one profile, as a million sessions' config has them. JSON: the rules are rows.
    const profiles: Record<string, unknown>[] = [
      { sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' },
      { sid: 'fc00::9', segments: ['2001:db8:a::1'], srh: 'always', mtu: 1400, hop_limit: 7, src_prefix: '2001:db8:ff::/64' },
      { sr_prefix: '2001:db8:2::/56', src_prefix: '2001:db8:fe::/60', hop_limit: 9 },
    ];
    const policies: Record<string, unknown>[] = [];
    for (let run = 0; run < 60; run++) {
      for (let k = 0; k <= run % 5; k++) {
        const i = policies.length;
        policies.push({ match: `10.${i >> 8}.${i & 255}.0/24`, ...profiles[(run * 7) % 3] });
      }
    }
    const plain = policies.length;
    for (let t = 0; t < 100; t++) policies.push({ match: `100.64.0.${1 + (t >> 5)}/32`, teid: `${t}/32`, sr_prefix: '2001:db9:1::/48', src_prefix: '2001:db8:ffff::/64' });
    const runs = parseConfig(JSON.stringify({ settings: { forwarding: 'tx', max_policies: 1024 }, policies }), 'runs.json');
    expect(runs.policies.every((p) => isRow(p))).toBe(true);
    const byChange = dataplane(parseConfig('settings: { forwarding: tx, max_policies: 1024 }\n', 'empty.yaml'));
    byChange.rules.apply({ putPolicies: runs.policies.map((p) => plainRule(p)), ...GENERAL });
    const byFill = dataplane(runs);
    const got = state(byFill);
    expect(got['counts']).toEqual([plain + 100, 4, 0, 0]);
    expect(got).toEqual(state(byChange));
  });

  it('a key given twice: nothing written, no id taken, the tables still empty and fillable', () => {
    const one = parseConfig(`${SETTINGS}policies:\n  - { match: 10.0.0.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n  - { match: 100.64.0.1/32, teid: "7/32", sid: "fc00::1", src_prefix: "2001:db8:ff::/64" }\n`, 'one.yaml');
    const d = dataplane(parseConfig(SETTINGS, 'empty.yaml'));
    const empty = state(d);
    const twice: Policy[] = [...one.policies, one.policies[1]!];
    expect(() => d.rules.sync(one.settings, twice, [], [])).toThrow(/the same policies key is given twice in one change/);
    expect(state(d)).toEqual(empty);
    // The same ids as a fresh fill gives: none was kept.
    d.rules.sync(one.settings, one.policies, [], []);
    const fresh = dataplane(one);
    expect(state(d)).toEqual(state(fresh));
    // A local SID twice, after policies that were fine: their entries are taken back too.
    const d2 = dataplane(parseConfig(SETTINGS, 'empty.yaml'));
    const sids = parseConfig(`${SETTINGS}localsids:\n  - { sid: "2001:db8:e::/48", src_prefix_len: 64 }\n`, 's.yaml').localsids;
    expect(() => d2.rules.sync(one.settings, one.policies, [sids[0]!, sids[0]!], [])).toThrow(/the same local SIDs key is given twice/);
    expect(state(d2)).toEqual(empty);
  });

  it('a table too small (with the address-only entries counted) or too many prefix lengths: refused before any write', () => {
    const small = 'settings: { forwarding: tx, max_policies: 8 }\n';
    const d = dataplane(parseConfig(small, 'empty.yaml'));
    const empty = state(d);
    // 8 TEID policies on one N3 address fit max_policies 8, their address-only entry does not.
    const teids = parseConfig(
      `${small}policies:\n${Array.from({ length: 8 }, (_, t) => `  - { match: 100.64.0.1/32, teid: "${t}/32", sid: "fc00::${t}", src_prefix: "2001:db8:ff::/64" }`).join('\n')}\n`,
      't.yaml',
    );
    const e = (() => {
      try {
        d.rules.sync(teids.settings, teids.policies, [], []);
      } catch (x) {
        return x;
      }
      return undefined;
    })();
    expect(e).toBeInstanceOf(TablesFullError);
    expect((e as Error).message).toMatch(/the policies table is full \(settings\.max_policies = 8\)/);
    expect(state(d)).toEqual(empty);
    // Seven of them fit with their address-only entry.
    d.rules.sync(teids.settings, teids.policies.slice(0, 7), [], []);
    expect([d.rules.policyCount, d.rules.addrOnlyCount]).toEqual([7, 1]);

    // 17 distinct prefix lengths: one more than the data path looks up.
    // (The config refuses them too: two configs' policies put together.)
    const lensOf = (from: number, n: number): readonly Policy[] =>
      parseConfig(
        `${SETTINGS}policies:\n${Array.from({ length: n }, (_, i) => `  - { match: 10.${from + i}.0.0/${8 + from + i}, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`).join('\n')}\n`,
        'l.yaml',
      ).policies;
    const d2 = dataplane(parseConfig(SETTINGS, 'empty.yaml'));
    const empty2 = state(d2);
    expect(() => d2.rules.sync(d2.config.settings, [...lensOf(0, 9), ...lensOf(9, 8)], [], [])).toThrow(/policies would use 17 distinct prefix lengths/);
    expect(state(d2)).toEqual(empty2);
  });
  it('a refusal in the last table (a session twice) takes back the policies and local SIDs planned before it', () => {
    const good = parseConfig(
      `${SETTINGS}policies:\n  - { match: 10.0.0.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\nlocalsids:\n  - { sid: "2001:db8:e::/48", src_prefix_len: 64 }\nsessions:\n  - { ue: 10.60.0.1/32, teid: 1, qfi: 9, endpoint: 192.0.2.1, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }\n`,
      'g.yaml',
    );
    const d = dataplane(parseConfig(SETTINGS, 'empty.yaml'));
    const empty = state(d);
    const s = good.sessions ?? [];
    expect(() => d.rules.sync(good.settings, good.policies, good.localsids, [s[0]!, s[0]!])).toThrow(/the same sessions key is given twice/);
    expect(state(d)).toEqual(empty);
    d.rules.sync(good.settings, good.policies, good.localsids, s);
    expect(state(d)).toEqual(state(dataplane(good)));
  });

  it('every id of the table used, by rules and no address-only entry (the N3 address has its own /32): it fits', () => {
    const cfg = parseConfig(
      'settings: { forwarding: tx, max_policies: 3 }\npolicies:\n  - { match: 100.64.0.1/32, teid: "1/32", sid: "fc00::1", src_prefix: "2001:db8:ff::/64" }\n  - { match: 100.64.0.1/32, teid: "2/32", sid: "fc00::2", src_prefix: "2001:db8:ff::/64" }\n  - { match: 100.64.0.1/32, sr_prefix: "2001:db8:32::/48", src_prefix: "2001:db8:ff::/64" }\n',
      'three.yaml',
    );
    const byFill = dataplane(cfg);
    expect([byFill.rules.policyCount, byFill.rules.addrOnlyCount]).toEqual([3, 0]);
    const byChange = dataplane(parseConfig('settings: { forwarding: tx, max_policies: 3 }\n', 'e.yaml'));
    byChange.rules.apply({ putPolicies: cfg.policies, ...GENERAL });
    expect(state(byFill)).toEqual(state(byChange));
  });

  it.each([
    ['the fill (sync into empty tables)', 'sync'],
    ['a change of new keys (apply)', 'insert'],
    ['the change path (apply with a delete)', 'general'],
  ] as const)('a write the kernel refuses part way, through %s: the mirror keeps what was written (their ids stay taken), and only that', (_what, how) => {
    const d = dataplane(parseConfig(SETTINGS, 'empty.yaml'));
    const fd = d.tables.policiesFd;
    const vs = LAYOUTS.mup_policy.size;
    // Entries written behind the daemon's back, after the tables were taken over: all but 5 places of the map.
    const max = mapInfo(fd).maxEntries;
    const foreign = Array.from({ length: max - 5 }, (_, i) => encodePolicyKey({ addr: (0xc0000000 + i * 256) >>> 0, len: 24 } as never));
    for (const k of foreign) mapUpdate(fd, k, Buffer.alloc(vs));
    const eight = parseConfig(
      `${SETTINGS}policies:\n${Array.from({ length: 8 }, (_, i) => `  - { match: 10.1.${i}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`).join('\n')}\n`,
      'eight.yaml',
    );
    let error: unknown;
    try {
      if (how === 'sync') d.rules.sync(eight.settings, eight.policies, [], []);
      else if (how === 'insert') d.rules.apply({ putPolicies: eight.policies });
      else d.rules.apply({ putPolicies: eight.policies, ...GENERAL });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(BatchWriteError);
    expect((error as BatchWriteError).written).toBe(5);
    expect(d.rules.policyCount, 'the five the kernel wrote').toBe(5);
    for (const k of foreign) mapDelete(fd, k);
    // Other rules now: the five written go (the mirror knows them), the three new ones take ids of their own.
    const three = parseConfig(
      `${SETTINGS}policies:\n${Array.from({ length: 3 }, (_, i) => `  - { match: 10.2.${i}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`).join('\n')}\n`,
      'three.yaml',
    );
    d.rules.sync(three.settings, three.policies, [], []);
    const rows = (state(d)['policies'] as string[]).map((r) => r.split(' '));
    expect(rows).toHaveLength(3);
    const ruleAt = LAYOUTS.mup_policy.members.rule.offset;
    const ids = rows.map(([, v]) => Buffer.from(v!, 'hex').readUInt32LE(ruleAt));
    expect(new Set(ids).size).toBe(3);
  });
  it('a batch write the kernel refuses before it starts went through none of its elements (not the count as asked)', () => {
    // A descriptor that is no map: the kernel refuses the call at once and never writes the count back.
    const fd = openSync('/dev/null', 'r');
    try {
      for (const call of [() => mapUpdateBatch(fd, Buffer.alloc(5 * 16), Buffer.alloc(5 * 16), 5, 'not a map'), () => mapDeleteBatch(fd, Buffer.alloc(5 * 16), 16, 5, 'not a map')]) {
        let error: unknown;
        try {
          call();
        } catch (e) {
          error = e;
        }
        expect(error).toBeInstanceOf(BatchWriteError);
        // Before: 5, and the tables took every key of the chunk as written (or as deleted).
        expect((error as BatchWriteError).written).toBe(0);
      }
    } finally {
      closeSync(fd);
    }
  });

  it('new keys into tables that have rules (an API batch): the same as the change path, through apply and applyYielding', async () => {
    const base = parseConfig(SETTINGS + rulesYaml(), 'base.yaml');
    // New: TEID keys on an N3 address with TEID keys already (its address-only entry stays), on one with
    // only its own /32 (100.64.0.3 has both: its TEID keys), on new addresses, one of which gets its /32
    // later in the same batch; a new prefix length; local SIDs and sessions.
    const batch = parseConfig(
      `${SETTINGS}policies:\n` +
        [
          '  - { match: 100.64.0.1/32, teid: "0x70000000/16", sid: "fc00:9::1", src_prefix: "2001:db8:ff::/64" }',
          '  - { match: 100.64.0.3/32, teid: "0x70010000/16", sid: "fc00:9::2", src_prefix: "2001:db8:ff::/64" }',
          '  - { match: 100.64.1.1/32, teid: "1/32", sid: "fc00:9::3", src_prefix: "2001:db8:ff::/64" }',
          '  - { match: 100.64.1.2/32, teid: "1/32", sid: "fc00:9::4", src_prefix: "2001:db8:ff::/64" }',
          '  - { match: 100.64.1.1/32, teid: "2/32", sid: "fc00:9::5", src_prefix: "2001:db8:ff::/64" }',
          '  - { match: 100.64.1.2/32, sr_prefix: "2001:db8:33::/48", src_prefix: "2001:db8:ff::/64" }',
          '  - { match: 10.200.0.0/16, sr_prefix: "2001:db8:34::/48", src_prefix: "2001:db8:ff::/64" }',
        ].join('\n') +
        '\nlocalsids:\n  - { sid: "2001:db8:f0::/48", src_prefix_len: 64 }\n  - { sid: "2001:db8:f1::/40", src_prefix_len: 64 }\n' +
        'sessions:\n  - { ue: 10.61.0.1/32, teid: 1, qfi: 9, endpoint: 192.0.2.1, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }\n' +
        '  - { ue: "2001:db8:61::/48", teid: 2, qfi: 9, endpoint: 192.0.2.1, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }\n',
      'batch.yaml',
    );
    const change = { putPolicies: batch.policies, putLocalSids: batch.localsids, putSessions: batch.sessions };
    const general = dataplane(base);
    general.rules.apply({ ...change, ...GENERAL });
    const inserted = dataplane(base);
    expect(inserted.rules.apply(change)).toEqual({ added: 7 + 1 + 2 + 2, replaced: 0, deleted: 0, unchanged: 0 });
    expect(state(inserted)).toEqual(state(general));
    // 100.64.1.1 got an address-only entry; 100.64.1.2 did not (its /32 came in the same batch).
    expect(inserted.rules.addrOnlyCount).toBe(5);
    const yielding = dataplane(base);
    await yielding.rules.applyYielding(change);
    expect(state(yielding)).toEqual(state(general));
    // A key the tables have among new ones (a replace): the change path does it all, with the same result.
    const replace = [...batch.policies, base.policies[0]!];
    const g2 = dataplane(base);
    g2.rules.apply({ putPolicies: replace, ...GENERAL });
    const i2 = dataplane(base);
    i2.rules.apply({ putPolicies: replace });
    expect(state(i2)).toEqual(state(g2));
    // A key twice among new ones: refused as the change path words it, nothing changed.
    const before = state(i2);
    expect(() => i2.rules.apply({ putSessions: [...(batch.sessions ?? []), { ...batch.sessions![0]!, teid: 99 }].map((x) => ({ ...x, ue: { family: 4, prefix: { addr: 0x0a3e0001, len: 32 } } }) as never) })).toThrow(/given twice/);
    expect(state(i2)).toEqual(before);
  });
  it('a full table: a change that replaces a rule (no id needed) is not refused as full', () => {
    const four = parseConfig(
      `settings: { forwarding: tx, max_policies: 4 }\npolicies:\n${Array.from({ length: 4 }, (_, i) => `  - { match: 10.3.${i}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`).join('\n')}\n`,
      'four.yaml',
    );
    const d = dataplane(four);
    const edited = parseConfig(
      `settings: { forwarding: tx, max_policies: 4 }\npolicies:\n  - { match: 10.3.3.0/24, sr_prefix: "2001:db8:4::/48", src_prefix: "2001:db8:ff::/64" }\n`,
      'edit.yaml',
    );
    expect(d.rules.apply({ putPolicies: edited.policies })).toEqual({ added: 0, replaced: 1, deleted: 0, unchanged: 0 });
    // A new key in a full table is refused as full.
    const more = parseConfig('settings: { forwarding: tx, max_policies: 4 }\npolicies:\n  - { match: 10.3.9.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n', 'more.yaml');
    expect(() => d.rules.apply({ putPolicies: more.policies })).toThrow(TablesFullError);
    expect(d.rules.policyCount).toBe(4);
  });
  it('one id left: a change of a new key and then a replace (the ids run out at the replace, which needs none) is not refused as full', () => {
    const three = parseConfig(
      `settings: { forwarding: tx, max_policies: 4 }\npolicies:\n${Array.from({ length: 3 }, (_, i) => `  - { match: 10.3.${i}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`).join('\n')}\n`,
      'three.yaml',
    );
    const d = dataplane(three);
    // The new key takes the last id; the second key is in the tables: found as such when no id is left for it.
    const change = parseConfig(
      'settings: { forwarding: tx, max_policies: 4 }\npolicies:\n' +
        '  - { match: 10.3.9.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n' +
        '  - { match: 10.3.1.0/24, sr_prefix: "2001:db8:4::/48", src_prefix: "2001:db8:ff::/64" }\n',
      'change.yaml',
    );
    expect(d.rules.apply({ putPolicies: change.policies })).toEqual({ added: 1, replaced: 1, deleted: 0, unchanged: 0 });
    expect(d.rules.policyCount).toBe(4);
  });
  it('an address-only entry a failed write left out is made by the next TEID key of its address, as the change path does', () => {
    const twin = (): Dataplane => dataplane(parseConfig(SETTINGS, 'empty.yaml'));
    const teids = (from: number, n: number): readonly Policy[] =>
      parseConfig(`${SETTINGS}policies:\n${Array.from({ length: n }, (_, t) => `  - { match: 100.64.7.1/32, teid: "${from + t}/32", sid: "fc00::${from + t}", src_prefix: "2001:db8:ff::/64" }`).join('\n')}\n`, 't.yaml').policies;
    const results: Record<string, unknown>[] = [];
    for (const how of ['insert', 'general'] as const) {
      const d = twin();
      const fd = d.tables.policiesFd;
      // Room for the three TEID policies, not for their address-only entry (written last).
      const max = mapInfo(fd).maxEntries;
      const foreign = Array.from({ length: max - 3 }, (_, i) => encodePolicyKey({ addr: (0xc0000000 + i * 256) >>> 0, len: 24 } as never));
      for (const k of foreign) mapUpdate(fd, k, Buffer.alloc(LAYOUTS.mup_policy.size));
      expect(() => d.rules.apply({ putPolicies: teids(1, 3) })).toThrow(BatchWriteError);
      expect([d.rules.policyCount, d.rules.addrOnlyCount]).toEqual([3, 0]);
      for (const k of foreign) mapDelete(fd, k);
      d.rules.apply(how === 'insert' ? { putPolicies: teids(10, 1) } : { putPolicies: teids(10, 1), ...GENERAL });
      expect([d.rules.policyCount, d.rules.addrOnlyCount], how).toEqual([4, 1]);
      results.push(state(d));
    }
    expect(results[0]).toEqual(results[1]);
  });

  it('a change written in slices says so (Tables.changing, which health reads) until it ends', async () => {
    const d = dataplane(parseConfig(SETTINGS.replace('max_sessions: 512', 'max_sessions: 8192'), 'big.yaml'));
    const many = parseConfig(
      `${SETTINGS.replace('max_sessions: 512', 'max_sessions: 8192')}sessions:\n${Array.from({ length: 6000 }, (_, i) => `  - { ue: 10.62.${i >> 8}.${i & 255}/32, teid: ${i + 1}, qfi: 9, endpoint: 192.0.2.1, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }`).join('\n')}\n`,
      'many.yaml',
    );
    expect(d.rules.changing).toBe(false);
    const seen: boolean[] = [];
    let on = true;
    const watch = (): void => {
      seen.push(d.rules.changing);
      if (on) setImmediate(watch);
    };
    setImmediate(watch);
    await d.rules.applyYielding({ putSessions: many.sessions });
    on = false;
    expect(d.rules.changing).toBe(false);
    expect(d.rules.sessionCount).toBe(6000);
    // The loop ran while the change was written (6,000 keys: more than one slice on any host this runs on).
    expect(seen).toContain(true);
  });

  it('a change that goes to the change path after all takes its ids in the same order as the change path alone', () => {
    const cfg = (n: number, from: number): readonly Policy[] =>
      parseConfig(`${SETTINGS}policies:\n${Array.from({ length: n }, (_, i) => `  - { match: 10.5.${from + i}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`).join('\n')}\n`, 'p.yaml').policies;
    const out: string[][] = [];
    for (const how of ['insert', 'general'] as const) {
      const d = dataplane(parseConfig(SETTINGS, 'empty.yaml'));
      d.rules.apply({ putPolicies: cfg(8, 0), ...GENERAL });
      // Free two ids in two changes (the pool's stack is then not lowest first), their grace periods over.
      d.rules.apply({ delPolicies: [cfg(8, 0)[3]!.match] });
      d.rules.apply({ delPolicies: [cfg(8, 0)[6]!.match] });
      d.rules.settle();
      // New keys, then one the tables have: the insert path takes ids, gives them back, the change path takes them.
      const change = [...cfg(3, 20), cfg(8, 0)[0]!];
      d.rules.apply(how === 'insert' ? { putPolicies: change } : { putPolicies: change, ...GENERAL });
      out.push(state(d)['policies'] as string[]);
    }
    expect(out[0]).toEqual(out[1]);
  });
});

describe.skipIf(!haveObject)('the sweep of entries no rule lists (Tables.sweepYielding: a restarted daemon, BGP rules not learned again)', () => {
  const dataplane = dataplanes();
  const n3 = (i: number): number => ((100 << 24) | (64 << 16) | i) >>> 0;

  it('leaves the tables as sync leaves them for the same rules: deletes, address-only entries, prefix lengths', async () => {
    const full = parseConfig(SETTINGS + rulesYaml(), 'full.yaml');
    // Kept: two thirds of the prefix policies; every TEID policy of 100.64.0.1 and .5, half of .4's, none of
    // .2's (its address-only entry goes); .3's TEID policies without its own /32 (which becomes address-only).
    let teid4 = 0;
    const policies = full.policies.filter((p, i) => {
      if (p.match.len < 32) return i % 3 !== 0;
      if (p.match.addr === n3(2)) return false;
      if (p.match.addr === n3(3)) return p.teid !== undefined;
      if (p.match.addr === n3(4)) return teid4++ % 2 === 0;
      return true;
    });
    const localsids = full.localsids.filter((_, i) => i % 4 !== 1);
    const sessions = (full.sessions ?? []).filter((_, i) => i % 5 !== 0);
    const bySync = dataplane(full);
    const bySweep = dataplane(full);
    expect(bySweep.rules.addrOnlyCount).toBe(4);
    const synced = bySync.rules.sync(full.settings, policies, localsids, sessions);
    const swept = await bySweep.rules.sweepYielding(policies, localsids, sessions);
    expect(state(bySweep)).toEqual(state(bySync));
    expect(swept.deleted).toBe(synced.deleted);
    // What the comparison covers: .2's address-only entry gone, .3's /32 now one; the deletes of every kind.
    expect(bySweep.rules.policyRule({ addr: n3(3), len: 32 })).toBeUndefined();
    expect(bySweep.rules.addrOnlyCount).toBe(4);
    expect(state(bySweep)['counts']).toEqual([policies.length, 4, localsids.length, sessions.length]);
    expect(swept.deleted).toBeGreaterThan(100 + 40 + 20 + 15 + 34);
    // A second sweep with the same rules finds nothing.
    expect((await bySweep.rules.sweepYielding(policies, localsids, sessions)).deleted).toBe(0);
    expect(state(bySweep)).toEqual(state(bySync));
  });

  it('an address-only entry a killed write left without its TEID keys goes, as sync deletes it (found in review)', async () => {
    const full = parseConfig(SETTINGS + rulesYaml(), 'full.yaml');
    const teid2 = full.policies.filter((p) => p.teid !== undefined && p.match.addr === n3(2));
    const rest = full.policies.filter((p) => !teid2.includes(p));
    const bySync = dataplane(full);
    const bySweep = dataplane(full);
    for (const d of [bySync, bySweep]) {
      // The delete of .2's TEID keys stops before its last key, the address-only entry (deleted last).
      d.rules.testFailDeletesFrom = 0;
      d.rules.testFailDeletesAfter = teid2.length;
      try {
        expect(() => d.rules.apply({ delPolicies: teid2.map((p) => ({ match: p.match, teid: p.teid })) })).toThrow(/injected by a test/);
      } finally {
        d.rules.testFailDeletesFrom = undefined;
        d.rules.testFailDeletesAfter = undefined;
      }
      expect(d.rules.addrOnlyCount).toBe(4);
    }
    bySync.rules.sync(full.settings, rest, full.localsids, full.sessions ?? []);
    await bySweep.rules.sweepYielding(rest, full.localsids, full.sessions ?? []);
    expect(state(bySweep)).toEqual(state(bySync));
    expect(bySweep.rules.addrOnlyCount).toBe(3);
  });

  it('runs in slices: the event loop turns while it deletes (Tables.changing meanwhile), and no other write lands between them', async () => {
    const big = SETTINGS.replace('max_sessions: 512', 'max_sessions: 8192');
    const many = parseConfig(
      `${big}sessions:\n${Array.from({ length: 6000 }, (_, i) => `  - { ue: 10.62.${i >> 8}.${i & 255}/32, teid: ${i + 1}, qfi: 9, endpoint: 192.0.2.1, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }`).join('\n')}\n`,
      'many.yaml',
    );
    const d = dataplane(many);
    expect(d.rules.sessionCount).toBe(6000);
    const seen: boolean[] = [];
    const refused: string[] = [];
    let on = true;
    const watch = (): void => {
      seen.push(d.rules.changing);
      if (d.rules.changing) {
        try {
          d.rules.apply({ putSessions: many.sessions!.slice(0, 1) });
        } catch (e) {
          refused.push((e as Error).message);
        }
      }
      if (on) setImmediate(watch);
    };
    setImmediate(watch);
    const r = await d.rules.sweepYielding([], [], many.sessions!.slice(3000));
    on = false;
    expect(r.deleted).toBe(3000);
    expect(d.rules.sessionCount).toBe(3000);
    expect(d.rules.changing).toBe(false);
    // 6,000 keys looked up and 3,000 deleted: more than one slice on any host this runs on.
    expect(seen).toContain(true);
    expect(refused.length).toBeGreaterThan(0);
    expect(refused[0]).toMatch(/a batch is being written to the tables/);
    for (const s of many.sessions!.slice(0, 3000)) expect(d.rules.sessionRule(s.ue)).toBeUndefined();
    for (const s of many.sessions!.slice(3000)) expect(d.rules.sessionRule(s.ue)).toBeDefined();
  });
});

describe.skipIf(!haveObject)('a change at a full table whose own deletes make the room (Tables.applyRoomFirst, applyYieldingRoomFirst)', () => {
  const dataplane = dataplanes();
  /** 17 policies in a table of 17: lengths /8 to /22 (15), and two /24s (the first one `first24`). */
  const fullConfig = (first24 = '10.0.1.0/24'): Config => {
    const lines = ['settings: { forwarding: tx, max_policies: 17, max_localsids: 4 }', 'policies:'];
    for (let len = 8; len <= 22; len++) lines.push(`  - { match: ${len + 100}.0.0.0/${len}, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`);
    lines.push(`  - { match: ${first24}, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`);
    lines.push('  - { match: 10.0.2.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }');
    return parseConfig(`${lines.join('\n')}\n`, 'full.yaml');
  };
  const full = (): Dataplane => {
    const d = dataplane(fullConfig());
    expect(d.rules.policyCount).toBe(17);
    return d;
  };
  const one = (match: string): Policy => parseConfig(`${SETTINGS}policies:\n  - { match: ${match}, sr_prefix: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }\n`, 'p.yaml').policies[0]!;
  const del24 = { addr: ((10 << 24) | (1 << 8)) >>> 0, len: 24 };

  it('a /24 replaced by another /24: refused whole (adds first), written deletes first by both', async () => {
    for (const how of ['at once', 'in slices'] as const) {
      const d = full();
      const c = { delPolicies: [del24], putPolicies: [one('10.0.3.0/24')] };
      expect(() => d.rules.apply(c)).toThrow(TablesFullError);
      const r = how === 'at once' ? d.rules.applyRoomFirst(c) : await d.rules.applyYieldingRoomFirst(c);
      expect(r).toMatchObject({ added: 1, deleted: 1, split: true });
      expect(d.rules.policyCount).toBe(17);
      expect(d.rules.policyRule(del24)).toBeUndefined();
      expect(d.rules.policyRule({ addr: ((10 << 24) | (3 << 8)) >>> 0, len: 24 })).toBeDefined();
    }
  });

  it('a /24 replaced by a /23 (a 17th prefix length): refused for the lengths, before any write (found in review)', async () => {
    for (const how of ['at once', 'in slices'] as const) {
      const d = full();
      const writes = d.rules.writes;
      const c = { delPolicies: [del24], putPolicies: [one('10.0.4.0/23')] };
      const r = how === 'at once' ? Promise.resolve().then(() => d.rules.applyRoomFirst(c)) : d.rules.applyYieldingRoomFirst(c);
      await expect(r).rejects.toThrow(/policies would use 17 distinct prefix lengths/);
      expect(d.rules.writes).toBe(writes);
      expect(d.rules.policyCount).toBe(17);
      expect(d.rules.policyRule(del24)).toBeDefined();
      // And the pool as it was: a change that fits takes the ids it would have.
      expect(d.rules.applyRoomFirst({ delPolicies: [del24], putPolicies: [one('10.0.5.0/24')] })).toMatchObject({ split: true, added: 1 });
    }
  });

  it('sync at a full table (a reload that writes the tables whole): the unlisted entries deleted first, then the rules', () => {
    const d = full();
    const want = fullConfig('10.0.3.0/24');
    const r = d.rules.sync(want.settings, want.policies, want.localsids, want.sessions ?? []);
    expect(r).toMatchObject({ added: 1, deleted: 1, split: true });
    expect(d.rules.policyCount).toBe(17);
    expect(d.rules.policyRule(del24)).toBeUndefined();
    for (const p of want.policies) expect(d.rules.policyRule(p.match)).toBeDefined();
    // Not when the whole would still not fit (the local SIDs full, a fifth one asked): refused for that, nothing written.
    const sids = parseConfig(`${SETTINGS}localsids:\n${[1, 2, 3, 4, 5].map((i) => `  - { sid: "2001:db8:${i}::/48", src_prefix_len: 64 }`).join('\n')}\n`, 's.yaml').localsids;
    d.rules.apply({ putLocalSids: sids.slice(0, 4) });
    expect(d.rules.localsidCount).toBe(4);
    const writes = d.rules.writes;
    const back = fullConfig();
    expect(() => d.rules.sync(back.settings, back.policies, sids, [])).toThrow(/the local SIDs table is full/);
    expect(d.rules.writes).toBe(writes);
    expect(d.rules.policyRule({ addr: ((10 << 24) | (3 << 8)) >>> 0, len: 24 })).toBeDefined();
  });
});

/** A fill's write thread (taking tables of any size), once it has loaded koffi; stopped after the test. */
function writeThreads(): () => Promise<WriteThread> {
  const made: WriteThread[] = [];
  afterEach(() => {
    for (const w of made.splice(0)) w.stop();
  });
  return async () => {
    const w = fillWriteThread(1).start();
    made.push(w);
    await vi.waitFor(() => expect(w.ready).toBe(true), { timeout: 20_000, interval: 10 });
    return w;
  };
}

/** `n` policies (each its own /24) and `s` IPv4 sessions, with room for exactly them. */
function twoTables(n: number, s: number): Config {
  const out = [`settings: { forwarding: tx, max_policies: ${n}, max_localsids: 8, max_sessions: ${s} }`, 'policies:'];
  for (let i = 0; i < n; i++) out.push(`  - { match: 10.${i >> 8}.${i & 255}.0/24, sr_prefix: "2001:db8:${(i % 97).toString(16)}::/48", src_prefix: "2001:db8:ff::/64", hop_limit: ${1 + (i % 200)} }`);
  out.push('sessions:');
  for (let i = 0; i < s; i++) out.push(`  - { ue: 10.200.${i >> 8}.${i & 255}/32, teid: ${i + 1}, qfi: ${i % 64}, endpoint: 192.0.2.1, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }`);
  return parseConfig(`${out.join('\n')}\n`, 'two.yaml');
}

/** The error of a sync of `cfg`'s policies and sessions into `d`'s empty tables with the write thread `w` (undefined: none). */
function syncError(d: Dataplane, cfg: Config, w: WriteThread): unknown {
  try {
    d.rules.sync(cfg.settings, cfg.policies, [], cfg.sessions ?? [], { writer: w });
  } catch (e) {
    return e;
  }
  return undefined;
}

/** A /24 policy key no rule of twoTables has (192.0.0.0 + i * 256). */
const theirPolicyKey = (i: number): Buffer => encodePolicyKey({ addr: (0xc0000000 + i * 256) >>> 0, len: 24 } as never);

/** Fill the map behind the tables' back with `count` keys `key(i)` (zero values). */
function foreign(fd: number, count: number, key: (i: number) => Buffer, vs: number): Buffer[] {
  const keys = Array.from({ length: count }, (_, i) => key(i));
  for (const k of keys) mapUpdate(fd, k, Buffer.alloc(vs));
  return keys;
}

describe.skipIf(!haveObject)('a fill written by two threads (the write thread takes the largest table)', () => {
  const dataplane = dataplanes();
  const thread = writeThreads();

  it('leaves the maps, the ids, the address-only entries and the lengths as one thread does', async () => {
    const w = await thread();
    for (const cfg of [parseConfig(SETTINGS + rulesYaml(), 'fill.yaml'), twoTables(2 * INSERT_CHUNK + 77, 600)]) {
      const plain = dataplane(cfg);
      const before = w.written;
      const byTwo = openDataplane({ config: cfg, writer: w });
      try {
        expect(w.written, 'the thread wrote chunks').toBeGreaterThan(before);
        expect(state(byTwo)).toEqual(state(plain));
        for (const p of cfg.policies) expect(byTwo.rules.policyRule(p.match, p.teid)).toBe(plain.rules.policyRule(p.match, p.teid));
        for (const x of cfg.sessions ?? []) expect(byTwo.rules.sessionRule(x.ue)).toBe(plain.rules.sessionRule(x.ue));
      } finally {
        byTwo.close();
      }
    }
  });

  it("a write the kernel refuses part way in the thread's table: its chunks before and the part written stay, the other table is written whole", async () => {
    const w = await thread();
    const cfg = twoTables(2 * INSERT_CHUNK + 300, 100);
    const d = dataplane(parseConfig(`settings: { forwarding: tx, max_policies: ${cfg.settings.maxPolicies}, max_localsids: 8, max_sessions: 100 }\n`, 'empty.yaml'));
    const fd = d.tables.policiesFd;
    const vs = LAYOUTS.mup_policy.size;
    // Room for the first chunk and 52 of the second.
    const room = INSERT_CHUNK + 52;
    const theirs = foreign(fd, cfg.policies.length - room, theirPolicyKey, vs);
    const error = syncError(d, cfg, w);
    expect(error).toBeInstanceOf(BatchWriteError);
    expect((error as BatchWriteError).written).toBe(52);
    expect([d.rules.policyCount, d.rules.sessionCount]).toEqual([room, 100]);
    expect(mapDump(d.tables.sessionsFd, LAYOUTS.mup_session_key.size, LAYOUTS.mup_session.size, 'mup_sessions').count).toBe(100);
    for (const k of theirs) mapDelete(fd, k);
    expect(mapDump(fd, LAYOUTS.mup_policy_key.size, vs, 'mup_policies').count).toBe(room);
    // The mirror is the map: a sync of other rules deletes what was written and gives the new ones ids of their own.
    const other = twoTables(3, 2);
    d.rules.sync(cfg.settings, other.policies, [], other.sessions ?? []);
    expect([d.rules.policyCount, d.rules.sessionCount]).toEqual([3, 2]);
    expect(state(d)['policies']).toHaveLength(3);
  });

  it("a write refused in this thread's table: the thread's chunk in flight is waited for and kept, nothing after it is written", async () => {
    const w = await thread();
    const cfg = twoTables(2 * INSERT_CHUNK + 300, 600);
    const d = dataplane(parseConfig(`settings: { forwarding: tx, max_policies: ${cfg.settings.maxPolicies}, max_localsids: 8, max_sessions: 600 }\n`, 'empty.yaml'));
    const fd = d.tables.sessionsFd;
    const ks = LAYOUTS.mup_session_key.size;
    const vs = LAYOUTS.mup_session.size;
    const key = (i: number): Buffer => {
      const b = Buffer.alloc(ks);
      b[0] = 4;
      b[1] = 32;
      b.writeUInt32BE((0xc0000000 + i) >>> 0, 4);
      return b;
    };
    const theirs = foreign(fd, 590, key, vs);
    const error = syncError(d, cfg, w);
    expect(error).toBeInstanceOf(BatchWriteError);
    expect((error as Error).message).toMatch(/mup_sessions/);
    expect((error as BatchWriteError).written).toBe(10);
    // The thread's first chunk was posted before this thread's first write, and is kept; no other was posted.
    expect([d.rules.policyCount, d.rules.sessionCount]).toEqual([INSERT_CHUNK, 10]);
    expect(mapDump(d.tables.policiesFd, LAYOUTS.mup_policy_key.size, LAYOUTS.mup_policy.size, 'mup_policies').count).toBe(INSERT_CHUNK);
    for (const k of theirs) mapDelete(fd, k);
    expect(mapDump(fd, ks, vs, 'mup_sessions').count).toBe(10);
    expect(w.busy).toBe(false);
  });

  it("a refusal in the thread's first chunk while this thread has chunks of its own to write: the thread's error, the part it wrote kept, each mirror its map", async () => {
    const w = await thread();
    const cfg = twoTables(3 * INSERT_CHUNK, 2 * INSERT_CHUNK + 10);
    const d = dataplane(parseConfig(`settings: { forwarding: tx, max_policies: ${3 * INSERT_CHUNK}, max_localsids: 8, max_sessions: ${2 * INSERT_CHUNK + 10} }\n`, 'empty.yaml'));
    const fd = d.tables.policiesFd;
    const vs = LAYOUTS.mup_policy.size;
    // Room for 100 of the thread's first chunk.
    const theirs = foreign(fd, 3 * INSERT_CHUNK - 100, theirPolicyKey, vs);
    const error = syncError(d, cfg, w);
    expect(error).toBeInstanceOf(BatchWriteError);
    expect((error as Error).message).toMatch(/mup_policies/);
    expect((error as BatchWriteError).written).toBe(100);
    expect(d.rules.policyCount).toBe(100);
    // This thread's table: whole chunks only, as many as it wrote before it saw the refusal (when depends on the
    // thread's timing), and the mirror holds exactly those.
    const sessions = mapDump(d.tables.sessionsFd, LAYOUTS.mup_session_key.size, LAYOUTS.mup_session.size, 'mup_sessions').count;
    expect(d.rules.sessionCount).toBe(sessions);
    expect(sessions % INSERT_CHUNK === 0 || sessions === 2 * INSERT_CHUNK + 10).toBe(true);
    for (const k of theirs) mapDelete(fd, k);
    expect(mapDump(fd, LAYOUTS.mup_policy_key.size, vs, 'mup_policies').count).toBe(100);
    expect(w.busy).toBe(false);
  });

  it('a thread that cannot load koffi is never ready: the fill is written by this thread alone', async () => {
    const was = process.env['MUP_TEST_WRITE_THREAD_KOFFI'];
    process.env['MUP_TEST_WRITE_THREAD_KOFFI'] = '/nonexistent/koffi';
    const w = fillWriteThread(1).start();
    if (was === undefined) delete process.env['MUP_TEST_WRITE_THREAD_KOFFI'];
    else process.env['MUP_TEST_WRITE_THREAD_KOFFI'] = was;
    try {
      // Its load ends (failed) soon; until then it is not ready either.
      await new Promise((r) => setTimeout(r, 500));
      expect(w.ready).toBe(false);
      const cfg = twoTables(300, 50);
      const d = openDataplane({ config: cfg, writer: w });
      try {
        expect(w.written).toBe(0);
        expect([d.rules.policyCount, d.rules.sessionCount]).toEqual([300, 50]);
      } finally {
        d.close();
      }
    } finally {
      w.stop();
    }
  });
});
