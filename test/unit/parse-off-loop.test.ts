/**
 * parseConfigOffLoop: a reload's parse and checks on a thread of their own
 * (issue 19: 11.6 MB of YAML held the daemon's event loop 1.0-1.2 s). What
 * it gives is what parseConfig gives, rule by rule, warnings and all, with
 * the checks' index (takeRuleIndex) and the rules' keys as parseConfig
 * leaves them; a refused file is the same ConfigError (file, key path,
 * line); the loop turns while a large file is parsed.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { inflateRawSync } from 'node:zlib';
import { ConfigError } from '../../src/config/errors.js';
import { localSidKey, policyKey, sessionKey } from '../../src/config/keys.js';
import { itemSpansOf, parseConfig, takeRuleIndex } from '../../src/config/load.js';
import { deflateRawSync } from 'node:zlib';
import { deflatedFile, parseConfigOffLoop, rulesCrossed, rulesKept } from '../../src/config/parse-async.js';
import { ENTRIES_PER_MESSAGE, KEPT, RULES_PER_MESSAGE, pieces, sameAsBefore } from '../../src/config/parse-pieces.js';

const SMALL = `# a config with every section
interfaces:
  - { name: eth0, xdp: generic }
settings: { max_policies: 64, max_localsids: 16, max_sessions: 16 }
policies:
  - { name: p0, match: 10.0.0.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
  - { name: p1, match: 192.0.2.10/32, teid: 0x12340000/16, sr_prefix: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64", segments: ["2001:db8:10::1"], srh: always, mtu: 1400 }
  - { match: 10.0.1.7/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
localsids:
  - { name: l0, sid: "2001:db8:e::/48", src_prefix_len: 64 }
  - { name: g6, behavior: end.m.gtp6.d, sid: "2001:db8:700::/64", source: "2001:db8:ffff::6d", sr_prefix: "2001:db8:800::/64" }
sessions:
  - { name: s0, ue: 10.60.0.1/32, teid: 0x12345678, qfi: 9, endpoint: 192.0.2.1, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }
`;

function big(n: number): string {
  const out = ['settings: { max_policies: 65536, max_localsids: 65536 }', 'policies:'];
  for (let i = 0; i < n; i++) out.push(`  - name: p${i}`, `    match: 10.${i >> 8}.${i & 255}.0/24`, '    sr_prefix: 2001:db9:1::/48', '    src_prefix: 2001:db8:ffff::/64');
  out.push('localsids:');
  for (let i = 0; i < n; i++) out.push(`  - name: l${i}`, `    sid: 2001:db8:${i.toString(16)}::/48`, '    src_prefix_len: 64');
  return `${out.join('\n')}\n`;
}

const inflated = (b: Buffer): string => inflateRawSync(b).toString('utf8');

describe('parseConfigOffLoop', () => {
  it('gives what parseConfig gives: every section, the rules, the warnings (host bits masked)', async () => {
    const want = parseConfig(SMALL, 'small.yaml');
    const got = await parseConfigOffLoop(Buffer.from(SMALL), 'small.yaml');
    expect(got).toEqual(want);
    expect(got.warnings?.length, 'the masked host bits of 10.0.1.7/24').toBe(1);
    // The checks' index and the keys, as parseConfig leaves them.
    const index = takeRuleIndex(got.policies)!;
    expect([...index.byKey.keys()]).toEqual(got.policies.map((p) => policyKey(p)));
    // A ShardedMap: compared as a set of entries (its iteration is shard by shard).
    expect(new Map(index.names)).toEqual(new Map([['p0', '10.0.0.0/24'], ['p1', '192.0.2.10/32 teid 0x12340000/16']]));
    expect(index.byKey.get('10.0.0.0/24')).toBe(got.policies[0]);
    expect(takeRuleIndex(got.localsids)!.byKey.size).toBe(2);
    expect(takeRuleIndex(got.sessions!)!.byKey.get(sessionKey(got.sessions![0]!))).toBe(got.sessions![0]);
    expect(localSidKey(got.localsids[1]!)).toBe('2001:db8:700::/64');
  });

  it('shares the prefix objects many rules have in common, as parseConfig does, across the thread\'s messages', async () => {
    // 600 policies (several messages), 256 sr_prefixes in turn (no two alike within a message) and one
    // src_prefix; 300 sessions with 3 ISDs. Before: one prefix object (and BigInt) per rule and field.
    const lines = ['settings: { max_policies: 1024, max_localsids: 16, max_sessions: 512 }', 'policies:'];
    for (let i = 0; i < 600; i++) lines.push(`  - { name: p${i}, match: 10.${i >> 8}.${i & 255}.0/24, sr_prefix: "2001:db9:${(i & 255).toString(16)}::/48", src_prefix: "2001:db8:ffff::/64" }`);
    lines.push('sessions:');
    for (let i = 0; i < 300; i++) {
      lines.push(`  - { name: s${i}, ue: 10.60.${i >> 8}.${i & 255}/32, teid: ${i + 1}, qfi: 9, endpoint: 192.0.2.1, source: 198.51.100.1, isd: "2001:db8:${i % 3}::/48", src_prefix: "2001:db8:ff::/64" }`);
    }
    const text = `${lines.join('\n')}\n`;
    const want = parseConfig(text, 'shared.yaml');
    const got = await parseConfigOffLoop(Buffer.from(text), 'shared.yaml');
    expect(got).toEqual(want);
    const distinct = <T>(xs: readonly T[]): number => new Set(xs).size;
    expect(distinct(got.policies.map((p) => p.srPrefix)), 'sr_prefix objects').toBe(256);
    expect(distinct(got.policies.map((p) => p.srcPrefix)), 'src_prefix objects').toBe(1);
    expect(distinct(got.sessions!.map((x) => x.isd)), 'isd objects').toBe(3);
    expect(distinct(got.sessions!.map((x) => x.srcPrefix)), 'session src_prefix objects').toBe(1);
    // parseConfig shares them the same way.
    expect(distinct(want.policies.map((p) => p.srPrefix))).toBe(256);
  });

  it('a refused file is the same ConfigError: file, key path, line', async () => {
    const bad = SMALL.replace('sr_prefix: "2001:db8:2::/48"', 'sr_prefix: "2001:db8:zz::/48"');
    let want: ConfigError | undefined;
    try {
      parseConfig(bad, 'bad.yaml');
    } catch (e) {
      want = e as ConfigError;
    }
    expect(want).toBeInstanceOf(ConfigError);
    const got = await parseConfigOffLoop(Buffer.from(bad), 'bad.yaml').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(got).toBeInstanceOf(ConfigError);
    expect({ ...(got as ConfigError), message: (got as ConfigError).message }).toEqual({ ...want!, message: want!.message });
  });

  it('lets the event loop run while a large file is read and checked, and takes its rules in pieces', async () => {
    const text = big(20_000);
    let turns = 0;
    const timer = setInterval(() => turns++, 1);
    try {
      const got = await parseConfigOffLoop(Buffer.from(text), 'big.yaml');
      expect(got.policies).toHaveLength(20_000);
      expect(got.localsids).toHaveLength(20_000);
    } finally {
      clearInterval(timer);
    }
    // parseConfig on this thread: no turn at all until it returns.
    expect(turns, 'timer turns during the parse').toBeGreaterThanOrEqual(10);
  });

  it('keeps the previous config\'s rule objects where the file says the same at the same place, and only there', async () => {
    const before = await parseConfigOffLoop(Buffer.from(big(3_000)), 'big.yaml');
    // Policy 5 edited, policy 7 given a name another rule does not have, one local SID more at the end.
    const edited = big(3_000)
      .replace('    match: 10.0.5.0/24\n    sr_prefix: 2001:db9:1::/48', '    match: 10.0.5.0/24\n    sr_prefix: 2001:db9:2::/48')
      .replace('  - name: p7\n', '  - name: p7b\n')
      .concat('  - name: lx\n    sid: 2001:dbf::/48\n    src_prefix_len: 64\n');
    const after = await parseConfigOffLoop(Buffer.from(edited), 'big.yaml', before);
    // What a parse without the previous config gives, as data.
    expect(after).toEqual(parseConfig(edited, 'big.yaml'));
    expect(rulesKept(after)).toBe(3_000 + 3_000 - 2);
    after.policies.forEach((p, i) => expect(p === before.policies[i], `policies[${i}]`).toBe(i !== 5 && i !== 7));
    after.localsids.forEach((l, i) => expect(l === before.localsids[i], `localsids[${i}]`).toBe(i < 3_000));
    expect(after.policies[5]!.srPrefix).not.toEqual(before.policies[5]!.srPrefix);

    // A rule moved to another place is a new object (its place is in it: where).
    const dropped = big(3_000).replace('  - name: p0\n    match: 10.0.0.0/24\n    sr_prefix: 2001:db9:1::/48\n    src_prefix: 2001:db8:ffff::/64\n', '');
    const shifted = await parseConfigOffLoop(Buffer.from(dropped), 'big.yaml', before);
    expect(shifted).toEqual(parseConfig(dropped, 'big.yaml'));
    expect(shifted.policies.some((p) => before.policies.includes(p))).toBe(false);
    expect(rulesKept(shifted)).toBe(3_000);
  });

  it('lets the previous config go as it answers, before its thread has exited (a reload collects what it replaced at once)', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    // Made and dropped in a function of its own: no frame of the test holds the previous config.
    const reparse = async (): Promise<{ weak: WeakRef<object>; after: object }> => {
      const previous = parseConfig(big(500), 'big.yaml');
      const after = await parseConfigOffLoop(Buffer.from(big(500).replace('2001:db9:1::/48', '2001:db9:2::/48')), 'big.yaml', previous);
      return { weak: new WeakRef(previous), after };
    };
    const { weak, after } = await reparse();
    // A later turn (a WeakRef keeps its target for the rest of the job that made it), long before the
    // thread has exited: its listeners held the previous config until then.
    await new Promise((resolve) => setImmediate(resolve));
    gc();
    expect(weak.deref(), 'the previous config, still reachable after the answer').toBeUndefined();
    expect(after).toEqual(parseConfig(big(500).replace('2001:db9:1::/48', '2001:db9:2::/48'), 'big.yaml'));
  });

  it("with the running file's text, sends only the rules whose text changed: the others are the running objects", async () => {
    // Block style throughout, as a generator writes it (the block reader's: it knows where each rule was).
    const text = big(3_000).replace('settings: { max_policies: 65536, max_localsids: 65536 }', 'settings:\n  max_policies: 65536\n  max_localsids: 65536');
    const before = await parseConfigOffLoop(Buffer.from(text), 'big.yaml');
    // Policy 5 edited; a comment after local SID 9 (its text changed, its data did not); one local SID more.
    const edited = text
      .replace('    match: 10.0.5.0/24\n    sr_prefix: 2001:db9:1::/48', '    match: 10.0.5.0/24\n    sr_prefix: 2001:db9:2::/48')
      .replace('  - name: l10\n', '  # before l10\n  - name: l10\n')
      .concat('  - name: lx\n    sid: 2001:dbf::/48\n    src_prefix_len: 64\n');
    for (const held of [{ text }, { bytes: Buffer.from(text) }, { deflated: deflateRawSync(Buffer.from(text)) }]) {
      const after = await parseConfigOffLoop(Buffer.from(edited), 'big.yaml', before, held);
      expect(after).toEqual(parseConfig(edited, 'big.yaml'));
      expect(rulesCrossed(after), Object.keys(held)[0]).toBe(3);
      expect(rulesKept(after)).toBe(6_000 - 1);
      after.policies.forEach((p, i) => expect(p === before.policies[i], `policies[${i}]`).toBe(i !== 5));
      after.localsids.forEach((l, i) => expect(l === before.localsids[i], `localsids[${i}]`).toBe(i < 3_000));
      expect(takeRuleIndex(after.policies)!.byKey.get(policyKey(before.policies[9]!))).toBe(before.policies[9]);
      expect(takeRuleIndex(after.localsids)!.names.get('l9')).toBe(localSidKey(before.localsids[9]!));
      // Its own file, deflated by the thread, for the daemon to keep.
      expect(inflated(deflatedFile(after)!)).toBe(edited);
    }
    // A text that is not ASCII (compared as strings: a span's offsets are in characters), before or after.
    const accented = (t: string): string => `# café\n${t}`;
    const before2 = await parseConfigOffLoop(Buffer.from(accented(text)), 'big.yaml');
    for (const [prevText, newText] of [[accented(text), accented(edited)], [accented(text), edited], [text, accented(edited)]] as const) {
      const base = prevText === text ? before : before2;
      const after = await parseConfigOffLoop(Buffer.from(newText), 'big.yaml', base, { deflated: deflateRawSync(Buffer.from(prevText)) });
      expect(after).toEqual(parseConfig(newText, 'big.yaml'));
      // The comment moves every offset: the same text at another offset is still the same text at the same place in its list.
      expect(rulesCrossed(after), `${prevText === text ? 'ASCII' : 'accented'} -> ${newText === edited ? 'ASCII' : 'accented'}`).toBe(3);
    }
    // Not ASCII only at its end (a comment after the last local SID, part of its text): the previous file,
    // compared as it is inflated, is compared again as a string from there.
    const tail = await parseConfigOffLoop(Buffer.from(`${text}# café\n`), 'big.yaml');
    const fromTail = await parseConfigOffLoop(Buffer.from(edited), 'big.yaml', tail, { deflated: deflateRawSync(Buffer.from(`${text}# café\n`)) });
    expect(fromTail).toEqual(parseConfig(edited, 'big.yaml'));
    expect(rulesCrossed(fromTail)).toBe(4);
    // Without the text every rule crosses (and is compared there).
    const plain = await parseConfigOffLoop(Buffer.from(edited), 'big.yaml', before);
    expect(rulesCrossed(plain)).toBe(6_001);
    expect(rulesKept(plain)).toBe(6_000 - 1);
    // The first policy gone: every policy after it is at another place and crosses; the local SIDs are where they were.
    const dropped = text.replace('  - name: p0\n    match: 10.0.0.0/24\n    sr_prefix: 2001:db9:1::/48\n    src_prefix: 2001:db8:ffff::/64\n', '');
    const shifted = await parseConfigOffLoop(Buffer.from(dropped), 'big.yaml', before, { text });
    expect(shifted).toEqual(parseConfig(dropped, 'big.yaml'));
    expect(rulesCrossed(shifted)).toBe(2_999);
    expect(shifted.localsids.every((l, i) => l === before.localsids[i])).toBe(true);
    // The next reload compares with the file this one read (its spans came back from the thread).
    const again = await parseConfigOffLoop(Buffer.from(dropped), 'big.yaml', shifted, { text: dropped });
    expect(rulesCrossed(again)).toBe(0);
    expect(again.policies.every((p, i) => p === shifted.policies[i])).toBe(true);
  });

  it('a JSON file too: only the rules whose item text changed cross (each item read alone, its place kept)', async () => {
    const policies = Array.from({ length: 2_000 }, (_, i) => ({ name: `p${i}`, match: `10.${i >> 8}.${i & 255}.0/24`, sr_prefix: '2001:db9:1::/48', src_prefix: '2001:db8:ffff::/64' }));
    const text = `${JSON.stringify({ settings: { max_policies: 65536 }, policies }, null, 2)}\n`;
    const before = await parseConfigOffLoop(Buffer.from(text), 'big.json');
    const edited = text.replace('"10.0.5.0/24",\n      "sr_prefix": "2001:db9:1::/48"', '"10.0.5.0/24",\n      "sr_prefix": "2001:db9:2::/48"');
    expect(edited).not.toBe(text);
    const after = await parseConfigOffLoop(Buffer.from(edited), 'big.json', before, { text });
    expect(after).toEqual(parseConfig(edited, 'big.json'));
    // Before: a JSON file had no item places, and all 2,000 crossed.
    expect(rulesCrossed(after)).toBe(1);
    after.policies.forEach((p, i) => expect(p === before.policies[i], `policies[${i}]`).toBe(i !== 5));
  });

  it('cuts a config into messages of ENTRIES_PER_MESSAGE entries at most, RULES_PER_MESSAGE rules that cross at most, in order', async () => {
    const text = big(3_000).replace('settings: { max_policies: 65536, max_localsids: 65536 }', 'settings:\n  max_policies: 65536\n  max_localsids: 65536');
    const before = parseConfig(text, 'big.yaml');
    // Every 7th policy edited: runs of kept rules between rules that cross.
    const edited = text
      .split('\n  - name: ')
      .map((item) => (/^p(\d+)\n/.exec(item) !== null && Number(/^p(\d+)/.exec(item)![1]) % 7 === 0 ? item.replace('db9:1::', 'db9:2::') : item))
      .join('\n  - name: ');
    const after = parseConfig(edited, 'big.yaml');
    const same = await sameAsBefore(after, edited, Buffer.from(edited), { held: { deflated: deflateRawSync(Buffer.from(text)) }, spans: itemSpansOf(before)! });
    const msgs = [...pieces(after, same)].filter((m) => m.t === 'rules');
    let crossed = 0;
    for (const m of msgs) {
      expect(m.rules.length).toBeLessThanOrEqual(ENTRIES_PER_MESSAGE);
      const fresh = m.rules.filter((r) => r !== KEPT);
      expect(fresh.length).toBeLessThanOrEqual(RULES_PER_MESSAGE);
      m.rules.forEach((r, i) => expect(m.keys[i] === '', 'a kept rule has no key in the message').toBe(r === KEPT));
      crossed += fresh.length;
    }
    expect(msgs.filter((m) => m.section === 'policies').flatMap((m) => m.rules).map((r) => r === KEPT)).toEqual(after.policies.map((_p, i) => i % 7 !== 0));
    expect(crossed).toBe(Math.ceil(3_000 / 7));
    expect(msgs.filter((m) => m.section === 'localsids').flatMap((m) => m.rules).every((r) => r === KEPT)).toBe(true);
  });

  it('indexes a kept rule by the key text the rule holds, not a copy from the thread', async () => {
    // The rule set takes a start's index and holds it; a reload's new index was built with the thread's copy
    // of each key text, so every kept rule's key was held twice after a reload (bench:daemon's config:
    // about 7 MB more resident memory after one, for the daemon's life).
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    // Each parse's thread and its message listener (which holds what it built) gone before a measurement.
    const settled = async (): Promise<number> => {
      for (let i = 0; i < 4; i++) {
        await new Promise((r) => setTimeout(r, 250));
        gc();
      }
      return process.memoryUsage().heapUsed;
    };
    const N = 20_000;
    const text = Buffer.from(big(N));
    const before = await parseConfigOffLoop(text, 'big.yaml');
    // As the rule set does: the start's index held (its keys are the rules' own texts).
    const held = [takeRuleIndex(before.policies), takeRuleIndex(before.localsids)];
    const heap0 = await settled();
    const after = await parseConfigOffLoop(text, 'big.yaml', before);
    const perRule = ((await settled()) - heap0) / (2 * N);
    expect(held.every((x) => x !== undefined)).toBe(true);
    expect(rulesKept(after)).toBe(2 * N);
    const index = takeRuleIndex(after.localsids)!;
    expect(index.byKey.get(localSidKey(before.localsids[7]!))).toBe(before.localsids[7]);
    // The new config's lists and index (two maps a section), measured here: 96-102 bytes a kept rule; with a
    // key text of its own (11-17 characters: 32-40 bytes) 132-138.
    expect(perRule, 'heap bytes a kept rule costs in the new config and its index').toBeLessThan(118);
  });
});
