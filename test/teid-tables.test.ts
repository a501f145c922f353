/**
 * (N3 address, TEID prefix) policies in the tables (issue 13 item 1): the
 * address-only /32 entry (bpf/lookup.h, MUP_POL_ADDR_ONLY) that keeps an N3
 * address with only TEID policies ours for Echo Requests comes and goes
 * with those policies, is replaced in one write by a /32 policy of the
 * address and comes back when that policy goes; the per-CPU copy of the
 * last policy tells TEIDs apart. Frames run through BPF_PROG_TEST_RUN.
 */
import { existsSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import type { Policy } from '../src/config/types.js';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { decodePolicy, decodePolicyKey, LAYOUTS } from '../src/dataplane/codec.js';
import { mapDump } from '../src/dataplane/libbpf.js';
import { gtpuFrame, innerUdp4 } from '../src/packet/frames.js';
import { parseIpv4 } from '../src/sid/addr.js';

const haveObject = existsSync(DEFAULT_OBJECT);
const N3 = '203.0.113.30';
const GNB = parseIpv4('198.51.100.1', 't');

const frame = (teid: number, dst = N3): Buffer =>
  gtpuFrame({
    src: GNB,
    dst: parseIpv4(dst, 't'),
    teid,
    qfi: 9,
    inner: innerUdp4({ src: parseIpv4('10.45.0.2', 't'), dst: parseIpv4('8.8.8.8', 't'), sport: 1, dport: 2, len: 40 }),
  });

/** A GTP-U Echo Request (S flag, sequence 7) to N3. */
function echo(dst = N3): Buffer {
  const f = frame(0, dst);
  const udp = 14 + 20;
  const g = udp + 8;
  const msg = Buffer.from('320100040000000000070000', 'hex');
  const out = Buffer.concat([f.subarray(0, g), msg]);
  out.writeUInt16BE(20 + 8 + msg.length, 14 + 2);
  out.writeUInt16BE(0, 14 + 10);
  let sum = 0;
  for (let i = 14; i < 34; i += 2) sum += out.readUInt16BE(i);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  out.writeUInt16BE(~sum & 0xffff, 14 + 10);
  out.writeUInt16BE(8 + msg.length, udp + 4);
  out.writeUInt16BE(0, udp + 6);
  return out;
}

const policies = (yaml: string): Policy[] =>
  parseConfig(`settings: { forwarding: tx, max_policies: 8 }\npolicies:\n${yaml}`, 'teid.yaml').policies as Policy[];
const P = (o: string): string => `  - { src_prefix: "2001:db8:ff::/64", ${o} }\n`;

/** The policy map as "plen daddr teid flags" lines, sorted. */
function table(dp: Dataplane): string[] {
  const ks = LAYOUTS.mup_policy_key.size;
  const vs = LAYOUTS.mup_policy.size;
  const { keys, values, count } = mapDump(dp.tables.policiesFd, ks, vs, 'mup_policies');
  const rows: string[] = [];
  for (let i = 0; i < count; i++) {
    const k = decodePolicyKey(keys.subarray(i * ks, (i + 1) * ks));
    const v = decodePolicy(values.subarray(i * vs, (i + 1) * vs));
    rows.push(`${k.plen} ${k.daddr.toString(16)} ${k.teid.toString(16)} ${v.flags}`);
  }
  return rows.sort();
}

/** The last SID's bytes 0..5 of a translated frame, or verdict and event. */
function outcome(dp: Dataplane, f: Buffer): string {
  const r = dp.run(f);
  return r.verdict === 'tx' && r.event === 'fwd_tx' && r.out.readUInt16BE(12) === 0x86dd
    ? r.out.subarray(38, 54).toString('hex')
    : `${r.verdict} ${r.event}`;
}

describe.skipIf(!haveObject)('(N3, TEID) policies in the tables', () => {
  let dp: Dataplane | undefined;
  afterEach(() => {
    dp?.close();
    dp = undefined;
  });

  it('keeps the address-only entry of an N3 address in step with its TEID policies', () => {
    const teid8 = policies(P(`match: ${N3}/32, teid: "0x90000000/4", sid: "fc00:4::d4"`));
    const plain = policies(P(`match: ${N3}/32, sr_prefix: "2001:db8:32::/48"`));
    const teid1 = policies(P(`match: ${N3}/32, teid: "0x80000000/1", sid: "fc00:1::d4"`));
    dp = openDataplane({ config: parseConfig('settings: { forwarding: tx, max_policies: 8 }', 'teid.yaml') });
    const d = dp;
    const addrOnly = `32 cb00711e 0 2`;
    expect(outcome(d, echo())).toBe('pass pass_no_policy');

    d.rules.apply({ putPolicies: teid8 });
    expect(table(d)).toEqual([addrOnly, `36 cb00711e 90000000 1`]);
    expect(d.rules.policyCount).toBe(1);
    expect(outcome(d, frame(0x9abcdef0))).toBe('fc0000040000000000000000000000d4');
    expect(outcome(d, frame(0x7fffffff))).toBe('drop drop_no_teid_policy');
    expect(outcome(d, echo())).toBe('tx reply_echo');

    // A /32 policy of the address replaces the address-only entry; uncovered TEIDs go to it.
    d.rules.apply({ putPolicies: plain });
    expect(table(d)).toEqual([`32 cb00711e 0 0`, `36 cb00711e 90000000 1`]);
    expect(d.rules.policyCount).toBe(2);
    expect(outcome(d, frame(0x7fffffff)).slice(0, 12)).toBe('20010db80032');
    expect(outcome(d, frame(0x9abcdef0))).toBe('fc0000040000000000000000000000d4');

    // Deleting it brings the address-only entry back (one write, no gap).
    d.rules.apply({ delPolicies: [plain[0]!.match] });
    expect(table(d)).toEqual([addrOnly, `36 cb00711e 90000000 1`]);
    expect(outcome(d, frame(0x7fffffff))).toBe('drop drop_no_teid_policy');
    expect(outcome(d, echo())).toBe('tx reply_echo');

    // A second, overlapping TEID prefix: the longer wins, the copy tells TEIDs apart.
    d.rules.apply({ putPolicies: teid1 });
    expect(table(d)).toEqual([addrOnly, `33 cb00711e 80000000 1`, `36 cb00711e 90000000 1`]);
    for (let i = 0; i < 3; i++) {
      expect(outcome(d, frame(0x9abcdef0))).toBe('fc0000040000000000000000000000d4');
      expect(outcome(d, frame(0xa0000000))).toBe('fc0000010000000000000000000000d4');
    }

    // The TEID policies go: so does the address-only entry.
    d.rules.apply({ delPolicies: [{ match: teid8[0]!.match, teid: teid8[0]!.teid }] });
    expect(table(d)).toEqual([addrOnly, `33 cb00711e 80000000 1`]);
    expect(outcome(d, frame(0x9abcdef0))).toBe('fc0000010000000000000000000000d4');
    d.rules.apply({ delPolicies: [{ match: teid1[0]!.match, teid: teid1[0]!.teid }] });
    expect(table(d)).toEqual([]);
    expect(d.rules.policyCount).toBe(0);
    expect(outcome(d, echo())).toBe('pass pass_no_policy');
    expect(outcome(d, frame(0x9abcdef0))).toBe('pass pass_no_policy');
  });

  it('sync: a config with TEID policies only, then the same with the /32, then none', () => {
    const base = 'settings: { forwarding: tx, max_policies: 8 }\npolicies:\n';
    const teidOnly = parseConfig(base + P(`match: ${N3}/32, teid: "0x90000000/4", sid: "fc00:4::d4"`), 'a.yaml');
    const both = parseConfig(base + P(`match: ${N3}/32, teid: "0x90000000/4", sid: "fc00:4::d4"`) + P(`match: ${N3}/32, sr_prefix: "2001:db8:32::/48"`), 'b.yaml');
    dp = openDataplane({ config: teidOnly });
    const d = dp;
    expect(table(d)).toEqual(['32 cb00711e 0 2', '36 cb00711e 90000000 1']);
    d.sync(teidOnly);
    expect(table(d)).toEqual(['32 cb00711e 0 2', '36 cb00711e 90000000 1']);
    d.sync(both);
    expect(table(d)).toEqual(['32 cb00711e 0 0', '36 cb00711e 90000000 1']);
    d.sync(teidOnly);
    expect(table(d)).toEqual(['32 cb00711e 0 2', '36 cb00711e 90000000 1']);
    expect(outcome(d, echo())).toBe('tx reply_echo');
    d.sync(parseConfig('settings: { forwarding: tx, max_policies: 8 }', 'c.yaml'));
    expect(table(d)).toEqual([]);
  });
});
