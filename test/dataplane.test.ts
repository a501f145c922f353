/**
 * The data plane binding against the real object (build/mup.bpf.o, or
 * $MUP_BPF_OBJECT): layouts, table filling, one frame, counters. Plus a
 * control that checkLayouts() does catch drift, on objects compiled here.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { checkLayouts, counterSlots, DEFAULT_OBJECT, eventNames, LayoutError, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { decodeConfig, decodePolicy, decodePolicyKey, encodePolicyKey, LAYOUTS, MUP_EVENT_SLOTS } from '../src/dataplane/codec.js';
import { closeFd, mapKeys, mapLookup, mapUpdate, numPossibleCpus, objectClose, objectOpen, traceMapReads } from '../src/dataplane/libbpf.js';
import { openProgramMaps } from '../src/dataplane/probe-maps.js';
import { innerUdp4, srv6Frame } from '../src/packet/frames.js';
import { parseIpv4 } from '../src/sid/addr.js';
import { encodeGtp4Sid, encodeGtp4Src, qfi, teid } from '../src/sid/mobile.js';

const OBJECT = process.env['MUP_BPF_OBJECT'] ?? DEFAULT_OBJECT;
const haveObject = existsSync(OBJECT);
if (!haveObject) {
  console.warn(
    `\n${'*'.repeat(78)}\n*** SKIPPING the real-object tests of test/dataplane.test.ts: ${OBJECT} does not exist.\n` +
      `*** Build it with \`make bpf\`.\n${'*'.repeat(78)}\n`,
  );
}

const CONFIG = parseConfig(
  `
settings: { forwarding: tx, max_policies: 8, max_localsids: 4, hash_seed: 7 }
policies:
  - { match: 10.0.1.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64", hop_limit: 33 }
  - { match: 10.0.2.0/25, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64", segments: ["2001:db8:5::1"], srh: always }
localsids:
  - { sid: "2001:db8:2::/48", src_prefix_len: 64 }
`,
  'dataplane.test.yaml',
);

// ---------------------------------------------------------------------------
// Frames, built from the protocol layouts

function csum16(b: Buffer): number {
  let s = 0;
  for (let i = 0; i < b.length; i += 2) s += (b[i]! << 8) | (b[i + 1] ?? 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return ~s & 0xffff;
}

function ipv4(src: number, dst: number, proto: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(20);
  h[0] = 0x45;
  h.writeUInt16BE(20 + payload.length, 2);
  h[8] = 64;
  h[9] = proto;
  h.writeUInt32BE(src, 12);
  h.writeUInt32BE(dst, 16);
  h.writeUInt16BE(csum16(h), 10);
  return Buffer.concat([h, payload]);
}

function udp(sport: number, dport: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt16BE(sport, 0);
  h.writeUInt16BE(dport, 2);
  h.writeUInt16BE(8 + payload.length, 4);
  return Buffer.concat([h, payload]);
}

const MAC_A = Buffer.from('020000000001', 'hex');
const MAC_B = Buffer.from('020000000002', 'hex');

function ether(type: number, payload: Buffer): Buffer {
  const t = Buffer.alloc(2);
  t.writeUInt16BE(type);
  return Buffer.concat([MAC_B, MAC_A, t, payload]);
}

/** GTP-U G-PDU (no optional fields) carrying inner IPv4/UDP, to `dst` port 2152. */
function gtpuFrame(dst: number): Buffer {
  const inner = ipv4(0x0a090001, 0x0a090002, 17, udp(1000, 2000, Buffer.from('ping')));
  const gtp = Buffer.alloc(8);
  gtp[0] = 0x30;
  gtp[1] = 0xff;
  gtp.writeUInt16BE(inner.length, 2);
  gtp.writeUInt32BE(0x1234, 4);
  return ether(0x0800, ipv4(0xc0000201, dst, 17, udp(2152, 2152, Buffer.concat([gtp, inner]))));
}

const arpFrame = ether(0x0806, Buffer.alloc(28));

// ---------------------------------------------------------------------------

describe.skipIf(!haveObject)(`dataplane with ${OBJECT}`, () => {
  let dp: Dataplane | undefined;
  afterEach(() => {
    dp?.close();
    dp = undefined;
  });

  it('has the layouts the codec expects, and named events', () => {
    const obj = objectOpen(OBJECT);
    try {
      checkLayouts(obj, OBJECT); // throws LayoutError on any drift: this test must fail then
      const names = eventNames(obj, OBJECT);
      expect(names.get(0)).toBe('pass_not_ip');
      expect(names.get(8)).toBe('fwd_tx');
      expect(names.get(22)).toBe('drop_gtp_ext_zero');
      expect([...names.values()]).not.toContain('max');
    } finally {
      objectClose(obj);
    }
  });

  it('does not read a counter map it has just created (every slot is zero); a taken-over one is read for slots to zero', () => {
    const t = traceMapReads();
    let counters = -1;
    try {
      dp = openDataplane({ object: OBJECT, config: CONFIG });
      counters = dp.maps.counters;
    } finally {
      t.stop();
    }
    expect(t.reads.filter((r) => r.fd === counters)).toEqual([]);
    // The same map handed to a second load (as a restarted daemon takes over its pins): scanned.
    const t2 = traceMapReads();
    let again: Dataplane | undefined;
    let countersAgain = -1;
    try {
      again = openDataplane({ object: OBJECT, config: CONFIG, reuse: { policies: dp.tables.policiesFd, localsids: dp.tables.localsidsFd, counters } });
      countersAgain = again.maps.counters; // libbpf's own fd of the reused map
    } finally {
      t2.stop();
      again?.close();
    }
    // From a mapping of the map (COUNTER_MMAP_FROM slots and more) or by batch reads: every rule slot, each CPU's copy.
    const scanned = t2.reads.filter((r) => r.fd === countersAgain && (r.op === 'lookup_batch' || r.op === 'mmap'));
    expect(scanned.reduce((n, r) => n + r.elements, 0)).toBe((counterSlots(CONFIG) - MUP_EVENT_SLOTS) * numPossibleCpus());
    expect(scanned.some((r) => r.op === 'mmap')).toBe(true);
  });

  it('fills the tables and mup_cfg from the config', () => {
    dp = openDataplane({ object: OBJECT, config: CONFIG });
    const t = dp.tables;
    const key = encodePolicyKey(CONFIG.policies[1]!.match);
    const value = mapLookup(t.policiesFd, key, LAYOUTS.mup_policy.size);
    expect(value).toBeDefined();
    const p = decodePolicy(value!);
    expect(p.rule).toBe(1);
    expect(p.srPlen).toBe(48);
    expect(p.srcPlen).toBe(64);
    expect(p.srh).toBe('always');
    expect(p.segs.map((s) => s.toString('hex'))).toEqual(['20010db8000500000000000000000001']);
    // plen host order (LE), daddr and teid network order
    expect(key.toString('hex')).toBe('19000000' + '0a000200' + '00000000');
    expect(decodePolicyKey(key)).toEqual({ plen: 25, daddr: 0x0a000200, teid: 0 });

    // The program reads the copy mup_cfg_sel selects.
    const activeConfig = (): ReturnType<typeof decodeConfig> => {
      const v = mapLookup(t.configFd, Buffer.alloc(4), t.configSize)!;
      return decodeConfig(v, t.configOffsets[v.readUInt32LE(t.selOffset) & 1]);
    };
    const cfg = activeConfig();
    expect(cfg).toEqual({
      forwarding: 'tx',
      hashSeed: 7,
      sportBase: 49152,
      sportSpan: 16384,
      policyPlens: [25, 24],
      localsidPlens: [48],
      policyGen: 1, // changed once, by the first batch of policies
      localsidGen: 1, // and of local SIDs
      session4Plens: [], // no sessions
      session6Plens: [],
    });

    // Re-sync with one policy gone: its entry and its prefix length disappear.
    const fewer = { ...CONFIG, policies: CONFIG.policies.slice(0, 1) };
    dp.sync(fewer);
    expect(dp.counters().rules.map((r) => r.where)).toEqual(['policies[0]', 'localsids[0]']);
    expect(() => dp!.sync({ ...fewer, settings: { ...fewer.settings, maxPolicies: 9 } })).toThrow(/fixed once loaded/);
    expect(mapKeys(t.policiesFd, LAYOUTS.mup_policy_key.size).map((k) => decodePolicyKey(k).plen)).toEqual([24]);
    expect(activeConfig().policyPlens).toEqual([24]);
  });

  it('translates a GTP-U frame with XDP_TX and counts it once', () => {
    dp = openDataplane({ object: OBJECT, config: CONFIG });
    const frame = gtpuFrame(0x0a000105);
    const r = dp.run(frame);
    expect(r.verdict).toBe('tx');
    expect(r.event).toBe('fwd_tx');
    expect(r.out.readUInt16BE(12)).toBe(0x86dd);
    expect(r.out.subarray(0, 6)).toEqual(MAC_A); // tx swaps the MACs
    expect(r.out.subarray(6, 12)).toEqual(MAC_B);
    expect(r.out.length).toBe(frame.length - 20 - 8 - 8 + 40); // no SRH for one SID in auto mode

    const pass = dp.run(arpFrame);
    expect(pass.verdict).toBe('pass');
    expect(pass.event).toBe('pass_not_ip');
    expect(pass.out).toEqual(arpFrame);

    const c = dp.counters();
    expect(c.events['fwd_tx']).toEqual({ packets: 1n, bytes: BigInt(frame.length) });
    expect(c.events['pass_not_ip']).toEqual({ packets: 1n, bytes: BigInt(arpFrame.length) });
    expect(c.events['drop_gtp_ext_zero']).toEqual({ packets: 0n, bytes: 0n });
    expect(c.rules).toEqual([
      { rule: 0, kind: 'policy', where: 'policies[0]', key: '10.0.1.0/24', packets: 1n, bytes: BigInt(frame.length) },
      { rule: 1, kind: 'policy', where: 'policies[1]', key: '10.0.2.0/25', packets: 0n, bytes: 0n },
      { rule: 8, kind: 'localsid', where: 'localsids[0]', key: '2001:db8:2::/48', packets: 0n, bytes: 0n },
    ]);

    dp.close();
    dp.close(); // idempotent
    expect(() => dp!.run(frame)).toThrow(/closed/);
  });

  // bpf/lookup.h: each CPU keeps a copy of the policy it found last, good
  // only under the policy_gen it was taken under. The copies are forged
  // here on every CPU (whichever runs the frame): first under the current
  // policy_gen, which the program must use (so this test sees the copy at
  // all), then before each table change, which must make the program look
  // the table up again.
  it('uses its per-CPU copy of the last policy only until a policy is put or deleted', () => {
    dp = openDataplane({ object: OBJECT, config: CONFIG });
    const d = dp;
    const frame = gtpuFrame(0x0a000105); // 10.0.1.5: policies[0], 10.0.1.0/24
    const sidPrefix = (): string => {
      const r = d.run(frame);
      return r.verdict === 'tx' ? r.out.subarray(38, 44).toString('hex') : `${r.verdict} ${r.event}`;
    };
    const memo = openProgramMaps({ fd: d.progFd }, ['mup_policy_memo']).get('mup_policy_memo');
    expect(memo, 'the program has a mup_policy_memo map').toBeDefined();
    const ncpu = numPossibleCpus();
    const stride = 128; // struct mup_policy_memo (124 bytes) rounded to 8, per CPU
    // The copy's key: DA || TEID (host order) masked to the longest configured length.
    const memoKey = (): bigint => {
      const plen = d.rules.readConfig().policyPlens[0] ?? 0;
      const k = (0x0a000105n << 32n) | 0x1234n; // gtpuFrame's TEID
      return plen === 0 ? 0n : k & (((1n << BigInt(plen)) - 1n) << BigInt(64 - plen));
    };
    try {
      expect(sidPrefix()).toBe('20010db80001');
      const seen = mapLookup(memo!.fd, Buffer.alloc(4), stride * ncpu)!;
      const gen = d.rules.readConfig().policyGen;
      const filled = Array.from({ length: ncpu }, (_, i) => seen.subarray(i * stride, (i + 1) * stride)).filter(
        (v) => v.readUInt16LE(14) === 1 && v.readBigUInt64LE(0) === memoKey() && v.readUInt32LE(8) === gen,
      );
      expect(filled.length, 'a CPU copied the policy for 10.0.1.5 under the current policy_gen').toBeGreaterThan(0);

      // A copy naming sr_prefix 2001:db8:77::/48, on every CPU.
      const forge = (): void => {
        const key = encodePolicyKey(CONFIG.policies[0]!.match);
        const pol = mapLookup(d.tables.policiesFd, key, LAYOUTS.mup_policy.size)!;
        pol.writeUInt16BE(0x77, 4);
        const one = Buffer.alloc(stride);
        one.writeBigUInt64LE(memoKey(), 0);
        one.writeUInt32LE(d.rules.readConfig().policyGen, 8);
        one.writeUInt16LE(d.rules.readConfig().policyPlens[0] ?? 0, 12);
        one.writeUInt16LE(1, 14);
        pol.copy(one, 16);
        mapUpdate(memo!.fd, Buffer.alloc(4), Buffer.concat(Array.from({ length: ncpu }, () => one)));
      };
      forge();
      expect(sidPrefix(), 'the copy is used under its policy_gen').toBe('20010db80077');

      const policy = (match: string, sr: string) =>
        parseConfig(`policies: [{ match: "${match}", sr_prefix: "${sr}", src_prefix: "2001:db8:ffff::/64" }]`).policies[0]!;
      const cases: Array<[string, () => void, string]> = [
        ['the /24 replaced', () => d.rules.apply({ putPolicies: [policy('10.0.1.0/24', '2001:db8:9::/48')] }), '20010db80009'],
        ['a /32 added inside it', () => d.rules.apply({ putPolicies: [policy('10.0.1.5/32', '2001:db8:32::/48')] }), '20010db80032'],
        ['the /32 deleted', () => d.rules.apply({ delPolicies: [policy('10.0.1.5/32', '2001:db8:32::/48').match] }), '20010db80009'],
        ['the /24 deleted', () => d.rules.apply({ delPolicies: [policy('10.0.1.0/24', '2001:db8:9::/48').match] }), 'pass pass_no_policy'],
      ];
      for (const [what, change, want] of cases) {
        forge();
        const before = d.rules.readConfig().policyGen;
        change();
        expect(d.rules.readConfig().policyGen, `${what}: policy_gen changes`).not.toBe(before);
        expect(sidPrefix(), what).toBe(want);
      }
      // A local SID change leaves the policy copies alone.
      const genNow = d.rules.readConfig().policyGen;
      d.rules.apply({ delLocalSids: [CONFIG.localsids[0]!.sid] });
      expect(d.rules.readConfig().policyGen).toBe(genNow);
    } finally {
      closeFd(memo!.fd);
    }
  });

  // The same for local SIDs (bpf/lookup.h mup_lsid_memo, a name of at most 15 characters like every map's): one CPU's
  // real copy, read back, changed to TTL 77 and written to every CPU.
  it('uses its per-CPU copy of the last local SID only until a local SID is put or deleted', () => {
    dp = openDataplane({ object: OBJECT, config: CONFIG });
    const d = dp;
    const gnb = parseIpv4('192.0.2.1', 'test');
    const inner = innerUdp4({ src: parseIpv4('8.8.8.8', 'test'), dst: parseIpv4('10.45.0.1', 'test'), sport: 9000, dport: 4000, len: 60 });
    const sid = (teidValue: number) => encodeGtp4Sid(CONFIG.localsids[0]!.sid, gnb, { qfi: qfi(9), r: false, u: false, teid: teid(teidValue) });
    const src = encodeGtp4Src(CONFIG.policies[0]!.srcPrefix, parseIpv4('8.8.8.8', 'test'));
    const frame = (teidValue: number): Buffer => Buffer.concat([MAC_B, MAC_A, Buffer.from([0x86, 0xdd]), srv6Frame({ src, dst: sid(teidValue), inner }).subarray(14)]);
    const ttl = (teidValue = 0x1234): string => {
      const r = d.run(frame(teidValue));
      return r.verdict === 'tx' ? `ttl ${r.out[22]}` : `${r.verdict} ${r.event}`;
    };
    const memo = openProgramMaps({ fd: d.progFd }, ['mup_lsid_memo']).get('mup_lsid_memo');
    expect(memo, 'the program has a mup_lsid_memo map').toBeDefined();
    const ncpu = numPossibleCpus();
    const size = 32 + LAYOUTS.mup_localsid.size;
    const stride = Math.ceil(size / 8) * 8;
    try {
      expect(ttl()).toBe('ttl 64');
      const seen = mapLookup(memo!.fd, Buffer.alloc(4), stride * ncpu)!;
      const copy = Array.from({ length: ncpu }, (_, i) => seen.subarray(i * stride, (i + 1) * stride)).find((v) => v.readUInt32LE(24) === 1);
      expect(copy, 'a CPU copied the local SID').toBeDefined();
      const forged = Buffer.from(copy!);
      forged[32 + LAYOUTS.mup_localsid.members.ttl.offset] = 77;
      const forge = (): void => {
        const cur = d.rules.readConfig();
        forged.writeUInt32LE(cur.localsidGen, 16);
        mapUpdate(memo!.fd, Buffer.alloc(4), Buffer.concat(Array.from({ length: ncpu }, () => forged)));
      };
      forge();
      expect(ttl(), 'the copy is used under its localsid_gen').toBe('ttl 77');
      expect(ttl(0x9999), 'and for any Args.Mob.Session under the same SID').toBe('ttl 77');

      const ls = (sidText: string, t: number) => parseConfig(`localsids: [{ sid: "${sidText}", src_prefix_len: 64, ttl: ${t} }]`).localsids[0]!;
      const cases: Array<[string, () => void, string]> = [
        ['the SID replaced', () => d.rules.apply({ putLocalSids: [ls('2001:db8:2::/48', 99)] }), 'ttl 99'],
        ['a policy changed (not a SID)', () => d.rules.apply({ delPolicies: [CONFIG.policies[1]!.match] }), 'ttl 77'],
        ['the SID deleted', () => d.rules.apply({ delLocalSids: [ls('2001:db8:2::/48', 99).sid] }), 'pass pass_no_localsid'],
      ];
      for (const [what, change, want] of cases) {
        forge();
        change();
        expect(ttl(), what).toBe(want);
      }
    } finally {
      closeFd(memo!.fd);
    }
  });
});

// ---------------------------------------------------------------------------
// checkLayouts() must fail on drift: objects compiled here from mup_shared.h,
// once as is (control) and once altered.

const SHARED_H = new URL('../bpf/mup_shared.h', import.meta.url);
const clang = (() => {
  try {
    execFileSync('clang', ['--version'], { stdio: 'ignore' });
    return existsSync(SHARED_H);
  } catch {
    return false;
  }
})();

const PROBE_C = `
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "mup_shared.h"
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, struct mup_policy_key); __type(value, struct mup_policy); __uint(max_entries, 1); } mup_policies SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, struct mup_localsid_key); __type(value, struct mup_localsid); __uint(max_entries, 1); } mup_localsids SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __type(key, __u32); __type(value, struct mup_counter); __uint(max_entries, 64); } mup_counters SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, struct mup_session_key); __type(value, struct mup_session); __uint(max_entries, 1); } mup_sessions SEC(".maps");
struct mup_config mup_cfg SEC(".data.cfg") = {};
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, struct mup_nexthop); __uint(max_entries, 1); } mup_nexthops SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, struct mup_nh_lease); __uint(max_entries, 1); } mup_nh_lease SEC(".maps");
static const enum mup_event mup_event_btf __attribute__((used)) = MUP_EV_MAX;
static const enum mup_limits mup_limits_btf __attribute__((used)) = MUP_MAX_SEGS;
SEC("xdp") int mup_xdp(struct xdp_md *ctx) { return XDP_PASS; }
char LICENSE[] SEC("license") = "Dual BSD/GPL";
`;

describe.skipIf(!haveObject)('live table changes (Tables.apply)', () => {
  let dp: Dataplane | undefined;
  afterEach(() => dp?.close());

  it('keeps the tables, rule ids, counters and prefix-length lists right through 300 random changes', () => {
    const base = parseConfig('settings: { forwarding: tx, max_policies: 32, max_localsids: 4 }', 'live.yaml');
    dp = openDataplane({ object: OBJECT, config: base });
    // Deterministic xorshift, so a failure replays.
    let seed = 12345;
    const rnd = (n: number): number => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) % n;
    };
    const lens = [8, 16, 20, 24, 32];
    const want = new Map<string, { plen: number; sr: number }>(); // match text -> expected
    const policy = (match: string, sr: number) =>
      parseConfig(`policies: [{ match: "${match}", sr_prefix: "2001:db8:${sr.toString(16)}::/48", src_prefix: "2001:db8:ffff::/64" }]`).policies[0]!;
    for (let step = 0; step < 300; step++) {
      const plen = lens[rnd(lens.length)]!;
      const match = `10.${rnd(4)}.${rnd(2) * 16}.0/${plen}`.replace(/\.\d+\.\d+\.0\/8$/, '.0.0.0/8');
      const p = policy(match, rnd(200));
      const key = `${p.match.addr}/${p.match.len}`;
      if (want.has(key) && rnd(3) === 0) {
        // Now and then the same key twice in one change: deleted once, its prefix length counted out once.
        dp.rules.apply({ delPolicies: rnd(2) === 0 ? [p.match, p.match] : [p.match] });
        want.delete(key);
      } else if (want.size < 32 || want.has(key)) {
        dp.rules.apply({ putPolicies: [p] });
        want.set(key, { plen: p.match.len, sr: Number(p.srPrefix.addr >> 80n) & 0xffff });
      }
      // The tables hold exactly what is wanted, each with its own value...
      const keys = mapKeys(dp.tables.policiesFd, LAYOUTS.mup_policy_key.size).map((k) => {
        const f = decodePolicyKey(k);
        return `${f.daddr}/${f.plen}`;
      });
      expect(keys.sort(), `step ${step}`).toEqual([...want.keys()].sort());
      const rules = new Set<number>();
      for (const [k, w] of want) {
        const [addr, len] = k.split('/').map(Number);
        const v = decodePolicy(mapLookup(dp.tables.policiesFd, encodePolicyKey({ addr: addr!, len: len! } as never), LAYOUTS.mup_policy.size)!);
        expect(v.srPrefix.readUInt16BE(4), `step ${step}: value of ${k}`).toBe(w.sr);
        rules.add(v.rule);
      }
      // ...rule ids are distinct and in range, and the program's length list is exact.
      expect(rules.size).toBe(want.size);
      for (const r of rules) expect(r).toBeLessThan(32);
      const plens = [...new Set([...want.values()].map((w) => w.plen))].sort((a, b) => b - a);
      expect(dp.rules.readConfig().policyPlens, `step ${step}: prefix lengths`).toEqual(plens);
    }
  });
});

describe.skipIf(!haveObject)('unchanged entries: compared with the map, not with a copy', () => {
  let dp: Dataplane | undefined;
  afterEach(() => dp?.close());

  // User space keeps no copy of the values (docs/bench.md, session 11): a
  // put of an existing key is compared with what the map holds now, read
  // back one lookup a key for a few, in one dump of the table for many. An
  // entry written behind the daemon's back (bpftool on the pins) is
  // therefore rewritten by the next put of its rule; a copy would have
  // called it unchanged.
  it.each([
    ['a few puts (one lookup each)', 3],
    ['many puts (one dump of the table)', 300],
  ])('%s: an equal entry is left alone, one changed behind its back is rewritten', (_name, n) => {
    const lines = Array.from({ length: 300 }, (_, i) => `  - { match: 10.${i >> 8}.${i & 255}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64" }`);
    const config = parseConfig(`settings: { forwarding: tx, max_policies: 512, max_localsids: 4 }\npolicies:\n${lines.join('\n')}\n`, 'unchanged.yaml');
    dp = openDataplane({ object: OBJECT, config });
    const fd = dp.tables.policiesFd;
    const keyOf = (i: number): Buffer => encodePolicyKey(config.policies[i]!.match);
    const valueOf = (i: number): Buffer => mapLookup(fd, keyOf(i), LAYOUTS.mup_policy.size)!;
    const puts = config.policies.slice(0, n);
    expect(dp.rules.apply({ putPolicies: puts })).toEqual({ added: 0, replaced: 0, deleted: 0, unchanged: n });
    const was = valueOf(1);
    const other = Buffer.from(was);
    other.writeUInt8(was.readUInt8(LAYOUTS.mup_policy.members.hop_limit.offset) ^ 1, LAYOUTS.mup_policy.members.hop_limit.offset);
    mapUpdate(fd, keyOf(1), other, 0);
    expect(dp.rules.apply({ putPolicies: puts })).toEqual({ added: 0, replaced: 1, deleted: 0, unchanged: n - 1 });
    expect(valueOf(1).equals(was)).toBe(true);
    // A whole sync (a reload) reads the table once, and finds nothing to do.
    const t = traceMapReads();
    let r;
    try {
      r = dp.sync(config);
    } finally {
      t.stop();
    }
    expect(r).toEqual({ added: 0, replaced: 0, deleted: 0, unchanged: 300 });
    expect(t.reads.filter((x) => x.fd === fd).map((x) => x.op)).not.toContain('lookup');
  });
});

describe.skipIf(!clang)('checkLayouts on compiled probes', () => {
  // Made in beforeAll: vitest runs a describe body even when the suite is skipped (a directory left behind).
  let dir = '';
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'mup-btf-'));
  });
  afterAll(() => {
    if (dir !== '') rmSync(dir, { recursive: true, force: true });
  });

  function build(name: string, header: string, source = PROBE_C): string {
    writeFileSync(join(dir, 'mup_shared.h'), header);
    writeFileSync(join(dir, `${name}.c`), source);
    const out = join(dir, `${name}.o`);
    const arch = execFileSync('uname', ['-m']).toString().trim();
    execFileSync('clang', ['-O2', '-g', '-target', 'bpf', `-I/usr/include/${arch}-linux-gnu`, '-I', dir, '-c', join(dir, `${name}.c`), '-o', out]);
    return out;
  }

  function layoutError(path: string): LayoutError | undefined {
    const obj = objectOpen(path);
    try {
      checkLayouts(obj, path);
      return undefined;
    } catch (e) {
      if (e instanceof LayoutError) return e;
      throw e;
    } finally {
      objectClose(obj);
    }
  }

  const original = existsSync(SHARED_H) ? readFileSync(SHARED_H, 'utf8') : '';

  it('accepts bpf/mup_shared.h as it is', () => {
    expect(layoutError(build('same', original))).toBeUndefined();
  });

  it('rejects a changed member and a changed struct size, naming both', () => {
    const altered = original
      .replace(/__u8\s+hop_limit;\s*\n\s*__u8\s+flags;.*\n/, '__u16 hop_limit;\n')
      .replace(/__u64 bytes;/, '__u64 bytes;\n\t__u64 drops;');
    expect(altered).not.toBe(original);
    const err = layoutError(build('altered', altered));
    expect(err).toBeInstanceOf(LayoutError);
    expect(err!.problems).toContain('mup_policy.hop_limit is at offset 104 size 2, codec expects offset 104 size 1');
    expect(err!.problems).toContain('struct mup_counter is 24 bytes, codec expects 16');
    expect(err!.message).toMatch(/altered\.o and src\/dataplane\/codec\.ts disagree/);
  });

  it('rejects a changed limit in enum mup_limits, naming it', () => {
    const altered = original.replace(/MUP_EVENT_SLOTS\s*=\s*64,/, 'MUP_EVENT_SLOTS = 128,');
    expect(altered).not.toBe(original);
    const err = layoutError(build('limits', altered));
    expect(err).toBeInstanceOf(LayoutError);
    expect(err!.problems).toEqual(['MUP_EVENT_SLOTS is 128 in enum mup_limits, src/config/limits.ts has 64']);
  });

  it('rejects an object without enum mup_limits in its BTF', () => {
    const source = PROBE_C.replace(/^.*mup_limits_btf.*\n/m, '');
    expect(source).not.toBe(PROBE_C);
    const err = layoutError(build('nolimits', original, source));
    expect(err).toBeInstanceOf(LayoutError);
    expect(err!.problems).toEqual([expect.stringMatching(/^enum mup_limits is not in the BTF/)]);
  });

  it('reads event names from enum mup_event', () => {
    const obj = objectOpen(build('names', original));
    try {
      const names = eventNames(obj);
      // Read independently from the header's text: every MUP_EV_* but MAX.
      const fromText = new Map(
        [...original.matchAll(/^\s*MUP_EV_(\w+)\s*=\s*(\d+),/gm)]
          .filter((m) => m[1] !== 'MAX')
          .map((m) => [Number(m[2]), m[1]!.toLowerCase()] as const),
      );
      expect(fromText.size).toBeGreaterThan(20);
      expect(new Map([...names].sort((x, y) => x[0] - y[0]))).toEqual(new Map([...fromText].sort((x, y) => x[0] - y[0])));
      expect(names.get(1)).toBe('pass_not_gtpu');
    } finally {
      objectClose(obj);
    }
  });
});
