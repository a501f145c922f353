/**
 * RCU grace periods off the change path (src/dataplane/grace.ts, the
 * header of src/dataplane/tables.ts, docs/datapath.md "Live changes"):
 * - a change that keeps the prefix lengths stores the new generation in the
 *   active config copy in place (no flip), and the very next frame uses the
 *   new rule although the CPU's copy (bpf/lookup.h) held the old one;
 * - an insert after a delete writes only after a grace period that started
 *   after the delete; deletes do not wait;
 * The real object through BPF_PROG_TEST_RUN, and a real daemon process.
 */
import { existsSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import type { Policy } from '../src/config/types.js';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { LAYOUTS } from '../src/dataplane/codec.js';
import { graceClock } from '../src/dataplane/grace.js';
import { DELETE_CHUNK, INSERT_CHUNK, TablesFullError } from '../src/dataplane/tables.js';
import { closeFd, mapLookup, numPossibleCpus } from '../src/dataplane/libbpf.js';
import { openProgramMaps } from '../src/dataplane/probe-maps.js';
import { gtpuFrame, innerUdp4 } from '../src/packet/frames.js';
import { parseIpv4 } from '../src/sid/addr.js';

const haveObject = existsSync(DEFAULT_OBJECT);
const isRoot = process.getuid?.() === 0;

const frame = (dst: string): Buffer =>
  gtpuFrame({
    src: parseIpv4('198.51.100.1', 't'),
    dst: parseIpv4(dst, 't'),
    teid: 0x1234,
    qfi: 9,
    inner: innerUdp4({ src: parseIpv4('10.45.0.2', 't'), dst: parseIpv4('8.8.8.8', 't'), sport: 1, dport: 2, len: 40 }),
  });

const policy = (match: string, sr: string): Policy =>
  parseConfig(`policies: [{ match: "${match}", sr_prefix: "${sr}", src_prefix: "2001:db8:ffff::/64" }]`, 'g.yaml').policies[0]! as Policy;

/** The first 6 bytes of the translated frame's IPv6 destination, or verdict and event. */
function outcome(d: Dataplane, f: Buffer): string {
  const r = d.run(f);
  return r.verdict === 'tx' ? r.out.subarray(38, 44).toString('hex') : `${r.verdict} ${r.event}`;
}

/** mup_cfg_sel and the active copy's policy_gen, read from the map. */
function rawConfig(d: Dataplane): { sel: number; gen: number } {
  const t = d.tables;
  const v = mapLookup(t.configFd, Buffer.alloc(4), t.configSize, '.data.cfg')!;
  const sel = v.readUInt32LE(t.selOffset) & 1;
  return { sel, gen: v.readUInt32LE(t.configOffsets[sel]! + LAYOUTS.mup_config.members.policy_gen.offset) };
}

describe.skipIf(!haveObject || !isRoot)('grace periods off the change path', () => {
  let dp: Dataplane | undefined;
  afterEach(() => {
    graceClock.testExtraMs = 0;
    dp?.close();
    dp = undefined;
  });

  it('a replace or delete that keeps the prefix lengths stores the generation in place; the next frame uses the new table', () => {
    const config = parseConfig(
      'settings: { forwarding: tx, max_policies: 8 }\npolicies:\n' +
        '  - { match: 10.0.1.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64" }\n' +
        '  - { match: 10.0.2.0/24, sr_prefix: "2001:db8:2::/48", src_prefix: "2001:db8:ffff::/64" }\n',
      'g.yaml',
    );
    dp = openDataplane({ config });
    const d = dp;
    d.rules.trace = [];
    const memo = openProgramMaps({ fd: d.progFd }, ['mup_policy_memo']).get('mup_policy_memo')!;
    const ncpu = numPossibleCpus();
    const stride = 128; // struct mup_policy_memo rounded to 8, per CPU
    /** CPUs whose copy is valid under policy_gen `gen`, with the copied policy's sr_prefix word. */
    const copies = (gen: number): number[] => {
      const all = mapLookup(memo.fd, Buffer.alloc(4), stride * ncpu)!;
      const out: number[] = [];
      for (let i = 0; i < ncpu; i++) {
        const v = all.subarray(i * stride, (i + 1) * stride);
        if (v.readUInt16LE(14) === 1 && v.readUInt32LE(8) === gen) out.push(v.readUInt16BE(16 + 4));
      }
      return out;
    };
    try {
      const f = frame('10.0.1.5');
      expect(outcome(d, f)).toBe('20010db80001');
      const before = rawConfig(d);
      expect(copies(before.gen), 'a CPU holds a copy of 10.0.1.0/24 (sr 2001:db8:1::) under the current gen').toContain(1);

      // Replace: same length, so no flip; the gen goes up in the active copy.
      d.rules.apply({ putPolicies: [policy('10.0.1.0/24', '2001:db8:9::/48')] });
      const afterReplace = rawConfig(d);
      expect(afterReplace.sel, 'not flipped').toBe(before.sel);
      expect(afterReplace.gen).toBe((before.gen + 1) >>> 0);
      expect(d.rules.readConfig().policyGen).toBe(afterReplace.gen);
      expect(outcome(d, f), 'the frame after the replace uses the new policy').toBe('20010db80009');
      expect(copies(afterReplace.gen)).toContain(9);

      // Delete: the other /24 keeps the length, so again no flip.
      d.rules.apply({ delPolicies: [policy('10.0.1.0/24', '2001:db8:9::/48').match] });
      const afterDelete = rawConfig(d);
      expect(afterDelete.sel, 'not flipped').toBe(before.sel);
      expect(afterDelete.gen).toBe((afterReplace.gen + 1) >>> 0);
      expect(outcome(d, f), 'the frame after the delete finds no policy').toBe('pass pass_no_policy');
      expect(outcome(d, frame('10.0.2.5'))).toBe('20010db80002');
      expect(d.rules.trace.filter((e) => e.op === 'flip')).toEqual([]);

      // A new length still flips (the other copy, then the selector).
      d.rules.apply({ putPolicies: [policy('10.0.3.5/32', '2001:db8:32::/48')] });
      const afterFlip = rawConfig(d);
      expect(afterFlip.sel, 'a new prefix length flips').toBe(before.sel ^ 1);
      expect(d.rules.readConfig().policyPlens).toEqual([32, 24]);
      expect(outcome(d, frame('10.0.3.5'))).toBe('20010db80032');
      expect(d.rules.trace.map((e) => e.op)).toEqual(['replace', 'gen', 'delete', 'gen', 'insert', 'flip']);
    } finally {
      closeFd(memo.fd);
    }
  });

  it('tables made with their program owe no grace period (no program run has seen them); tables taken over owe one', () => {
    // No rules: a fill with a new prefix length flips, and the flip owes a grace period of its own.
    const config = parseConfig('settings: { forwarding: tx, max_policies: 8 }\n', 'g.yaml');
    dp = openDataplane({ config });
    expect(dp.rules.graceNeeded('put'), 'made new').toBe(0);
    expect(dp.rules.graceNeeded('delete')).toBe(0);
    // As a restarted daemon takes over its pins: an earlier writer may have retired entries just before.
    const again = openDataplane({ config, reuse: { policies: dp.tables.policiesFd, localsids: dp.tables.localsidsFd, counters: dp.maps.counters } });
    try {
      expect(again.rules.graceNeeded('delete')).toBeGreaterThan(0);
      expect(again.rules.graceNeeded('put')).toBeGreaterThan(0);
    } finally {
      again.close();
    }
  });

  it('an insert after a delete waits for a grace period that started after the delete; deletes do not wait', () => {
    const config = parseConfig(
      'settings: { forwarding: tx, max_policies: 8 }\npolicies:\n' +
        ['1', '2', '3'].map((i) => `  - { match: 10.0.${i}.0/24, sr_prefix: "2001:db8:${i}::/48", src_prefix: "2001:db8:ffff::/64" }\n`).join(''),
      'g.yaml',
    );
    dp = openDataplane({ config });
    const d = dp;
    d.rules.settle();
    // Long enough that the deletes below run while their grace period is pending.
    graceClock.testExtraMs = 500;
    d.rules.trace = [];
    const waits = graceClock.waits;
    d.rules.apply({ delPolicies: [policy('10.0.1.0/24', '2001:db8:1::/48').match] });
    d.rules.apply({ delPolicies: [policy('10.0.2.0/24', '2001:db8:2::/48').match] });
    expect(graceClock.waits, 'consecutive deletes do not wait').toBe(waits);
    const dels = d.rules.trace.filter((e) => e.op === 'delete').map((e) => e.seq);
    expect(dels).toHaveLength(2);
    expect(graceClock.done(dels[1]!), 'the second delete ran while a grace period was pending').toBe(false);
    expect(outcome(d, frame('10.0.2.5'))).toBe('pass pass_no_policy');

    d.rules.apply({ putPolicies: [policy('10.0.4.0/24', '2001:db8:4::/48')] });
    expect(graceClock.waits, 'the insert waited').toBe(waits + 1);
    const insert = d.rules.trace.find((e) => e.op === 'insert')!;
    // completed >= n: a grace period that started after request n has ended (src/dataplane/grace.ts).
    expect(insert.seq, 'the insert wrote after the grace period of the last delete').toBeGreaterThanOrEqual(dels[1]!);
    expect(outcome(d, frame('10.0.4.5'))).toBe('20010db80004');
    expect(outcome(d, frame('10.0.3.5'))).toBe('20010db80003');
  });

  it('the ids of entries a change deleted before one of its delete writes failed are freed all the same', () => {
    // Found in review: the chunks written before the failure had left the kernel and the mirror, but their
    // ids never went back to the pool (the failure skipped #pendingFree): a full table stayed full.
    const N = 2 * DELETE_CHUNK + 10;
    const lines = (n: number, b: number): string =>
      Array.from({ length: n }, (_, i) => `  - { match: ${b}.${i >> 8}.${i & 255}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64" }`).join('\n');
    const config = parseConfig(`settings: { forwarding: tx, max_policies: ${N} }\npolicies:\n${lines(N, 10)}\n`, 'g.yaml');
    dp = openDataplane({ config });
    const t = dp.rules;
    t.testFailDeletesFrom = 1;
    try {
      expect(() => t.apply({ delPolicies: config.policies.map((p) => p.match) })).toThrow(/delete write refused/);
    } finally {
      t.testFailDeletesFrom = undefined;
    }
    expect(t.policyCount).toBe(N - DELETE_CHUNK);
    // Room for exactly the entries deleted before the failure: their ids came back after their grace period.
    const more = parseConfig(`policies:\n${lines(DELETE_CHUNK, 11)}\n`, 'g.yaml').policies;
    t.apply({ putPolicies: more });
    expect(t.policyCount).toBe(N);
    expect(outcome(dp, frame('11.0.5.5'))).toBe('20010db80001');
  });

  it('the ids taken for entries an insert write of a change never put in go back to the pool', () => {
    // Found in review: a change with deletes writes its new entries INSERT_CHUNK at a time; when a chunk
    // failed, the ids taken for that chunk and the ones after it stayed taken: each failure shrank the pool.
    const FIRST = INSERT_CHUNK;
    const LATE = 100;
    const lines = (n: number, b: number): string =>
      Array.from({ length: n }, (_, i) => `  - { match: ${b}.${i >> 8}.${i & 255}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64" }`).join('\n');
    const max = 1 + FIRST + LATE;
    const config = parseConfig(`settings: { forwarding: tx, max_policies: ${max} }\npolicies:\n${lines(1, 9)}\n`, 'g.yaml');
    dp = openDataplane({ config });
    const t = dp.rules;
    const fresh = parseConfig(`policies:\n${lines(FIRST + LATE, 10)}\n`, 'g.yaml').policies;
    t.testFailInsertsFrom = 1;
    try {
      // A delete with the puts: the change goes through the general write (inserts, then deletes), not the fill.
      expect(() => t.apply({ putPolicies: fresh, delPolicies: config.policies.map((p) => p.match) })).toThrow(/insert write refused/);
    } finally {
      t.testFailInsertsFrom = undefined;
    }
    // The first chunk is in (the delete never ran): room for exactly the LATE entries never written.
    expect(t.policyCount).toBe(1 + FIRST);
    const more = parseConfig(`policies:\n${lines(LATE, 11)}\n`, 'g.yaml').policies;
    t.apply({ putPolicies: more });
    expect(t.policyCount).toBe(max);
    expect(outcome(dp, frame('11.0.5.5'))).toBe('20010db80001');
    // Exactly those: every entry has an id of its own (an id still held by a written entry given back would be taken twice), and the table is full.
    const ids = [...config.policies, ...fresh.slice(0, FIRST), ...more].map((p) => t.policyRule(p.match));
    expect(ids.every((id) => id !== undefined)).toBe(true);
    expect(new Set(ids).size).toBe(max);
    expect(() => t.apply({ putPolicies: parseConfig(`policies:\n${lines(1, 12)}\n`, 'g.yaml').policies })).toThrow(TablesFullError);
  });

  it('a deleted rule id is reused only after its grace period, with its counter slot zeroed', () => {
    const config = parseConfig(
      'settings: { forwarding: tx, max_policies: 2 }\npolicies:\n' +
        '  - { match: 10.0.1.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64" }\n' +
        '  - { match: 10.0.2.0/24, sr_prefix: "2001:db8:2::/48", src_prefix: "2001:db8:ffff::/64" }\n',
      'g.yaml',
    );
    dp = openDataplane({ config });
    const d = dp;
    expect(outcome(d, frame('10.0.1.5'))).toBe('20010db80001');
    const rule = d.rules.policyRule(policy('10.0.1.0/24', '2001:db8:1::/48').match)!;
    graceClock.testExtraMs = 200;
    d.rules.apply({ delPolicies: [policy('10.0.1.0/24', '2001:db8:1::/48').match] });
    // The table is full but for the deleted id: the add waits for the delete's grace period and takes it.
    d.rules.apply({ putPolicies: [policy('10.0.3.0/24', '2001:db8:3::/48')] });
    expect(d.rules.policyRule(policy('10.0.3.0/24', '2001:db8:3::/48').match)).toBe(rule);
    const c = d.counters({ policies: [policy('10.0.3.0/24', '2001:db8:3::/48')], localsids: [] } as never, { rules: 'all' });
    expect(c.rules[0]?.packets, 'the reused id starts at zero').toBe(0n);
    expect(outcome(d, frame('10.0.3.5'))).toBe('20010db80003');
  });
});
