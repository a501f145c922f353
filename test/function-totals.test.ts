/**
 * A function's total (mup_packets_total{function=...}, the totals of GET
 * /v1/counters and `mup stats`) never goes down while the counter map
 * lives: not when one of its rules is deleted (the rule's slot is zeroed
 * once no packet can count into it), not when a local SID changes
 * behaviour, not across a restart that takes the tables over. Prometheus
 * reads a counter that goes down as a reset, and rate() then counts the
 * whole total again: one deleted session with traffic made a spike of
 * every packet the function had ever translated. Only `mup stats --reset`
 * lowers them.
 *
 * A local SID that changes behaviour takes a new rule id (a new slot):
 * an id counts for one function, and its old slot is retired under the old
 * one when freed.
 *
 * Before (session 31) a total was the sum of its rules' slots alone: it
 * fell by a deleted rule's packets when the slot was zeroed (a local SID's
 * at once: its function was looked up in the config, which no longer had
 * it), and a local SID's packets moved to its new function with a change
 * of behaviour. Real packets through BPF_PROG_TEST_RUN of the compiled
 * object.
 */
import { existsSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import type { Config } from '../src/config/types.js';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { COUNTER_STRIDE, decodePercpuCounter, encodePolicyKey, MUP_EVENT_SLOTS } from '../src/dataplane/codec.js';
import { graceClock } from '../src/dataplane/grace.js';
import { mapDelete, numPossibleCpus } from '../src/dataplane/libbpf.js';
import { counterLookup } from '../src/dataplane/counter-map.js';
import { NextHopWatcher } from '../src/dataplane/nexthop.js';
import { innerUdp4, srv6Frame, srv6ReducedFrame } from '../src/packet/frames.js';
import { ipv6Prefix, parseIpv4, parseIpv4Prefix, parseIpv6, parseIpv6Prefix } from '../src/sid/addr.js';
import { encodeGtp4Sid, encodeGtp4Src, qfi, teid } from '../src/sid/mobile.js';
import { uplinkFrame } from './helpers/packets.js';

const OBJECT = process.env['MUP_BPF_OBJECT'] ?? DEFAULT_OBJECT;
const isRoot = process.getuid?.() === 0;

const config = (policies: string[], localsids: string[]): Config =>
  parseConfig(
    [
      'settings: { forwarding: tx, max_policies: 8, max_localsids: 4 }',
      'policies:',
      ...policies.map((p) => `  - ${p}`),
      ...(localsids.length > 0 ? ['localsids:', ...localsids.map((l) => `  - ${l}`)] : []),
      '',
    ].join('\n'),
    'function-totals.yaml',
  );

const P1 = '{ name: p1, match: 10.0.1.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64" }';
const P2 = '{ name: p2, match: 10.0.2.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64" }';
const P3 = '{ name: p3, match: 10.0.3.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64" }';
const L1 = '{ name: l1, sid: "2001:db8:2::/48", src_prefix_len: 64 }';
const L2 = '{ name: l2, sid: "2001:db8:3::/48", src_prefix_len: 64 }';
const L2_GTP6E = '{ name: l2, sid: "2001:db8:3::/48", behavior: end.m.gtp6.e, source: "2001:db8:ff::6e" }';

/** An End.M.GTP4.E frame to the local SID of locator `sid48` (a /48), for the gNB 198.51.100.1. */
function downlinkFrame(sid48: string): Buffer {
  return srv6Frame({
    src: encodeGtp4Src(ipv6Prefix(parseIpv6('2001:db8:ffff::', 't'), 64), parseIpv4('203.0.113.5', 't')),
    dst: encodeGtp4Sid(ipv6Prefix(parseIpv6(sid48, 't'), 48), parseIpv4('198.51.100.1', 't'), { qfi: qfi(9), r: false, u: false, teid: teid(0x1000) }),
    inner: innerUdp4({ src: parseIpv4('203.0.113.5', 't'), dst: parseIpv4('10.45.0.2', 't'), sport: 9000, dport: 40000, len: 46 }),
  });
}

function send(dp: Dataplane, frame: Buffer, n: number): void {
  for (let i = 0; i < n; i++) expect(dp.run(frame).verdict).toBe('tx');
}

/** Packets of rule id `rule`'s slot, over every CPU. */
function slotPackets(dp: Dataplane, rule: number): bigint {
  const key = Buffer.alloc(4);
  key.writeUInt32LE(MUP_EVENT_SLOTS + rule);
  return decodePercpuCounter(counterLookup(dp.tables.countersFd, key.readUInt32LE(0), numPossibleCpus()), numPossibleCpus()).packets;
}

/** Until these rules' slots are zero (their deletes' grace period over, the tables' reclaim run). */
async function zeroed(dp: Dataplane, rules: number[]): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (rules.some((r) => slotPackets(dp, r) !== 0n) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  expect(rules.map((r) => slotPackets(dp, r))).toEqual(rules.map(() => 0n));
}

const packets = (dp: Dataplane): Record<string, bigint> => Object.fromEntries(Object.entries(dp.counters(undefined, { rules: 'none' }).functions).map(([f, v]) => [f, v.packets]));
const asyncPackets = async (dp: Dataplane): Promise<Record<string, bigint>> =>
  Object.fromEntries(Object.entries((await dp.countersRowsAsync(undefined, { rules: 'none', sliceMs: 0 })).functions).map(([f, v]) => [f, v.packets]));

describe.skipIf(!isRoot || !existsSync(OBJECT))('per-function totals when rules go', () => {
  const open: Dataplane[] = [];
  afterEach(() => {
    for (const dp of open.splice(0)) dp.close();
  });
  const load = (c: Config, reuse?: Dataplane): Dataplane => {
    const dp = openDataplane({
      object: OBJECT,
      config: c,
      ...(reuse === undefined ? {} : { reuse: { policies: reuse.tables.policiesFd, localsids: reuse.tables.localsidsFd, counters: reuse.tables.countersFd } }),
    });
    open.push(dp);
    return dp;
  };

  it('a deleted policy or local SID leaves its packets in its function total, before and after its slot is zeroed', async () => {
    const dp = load(config([P1, P2], [L1, L2]));
    const p1 = dp.rules.policyRule(parseIpv4Prefix('10.0.1.0/24', 't'))!;
    const l1 = dp.rules.localsidRule(parseIpv6Prefix('2001:db8:2::/48', 't'))!;
    send(dp, uplinkFrame('10.0.1.5'), 3);
    send(dp, uplinkFrame('10.0.2.5'), 1);
    send(dp, downlinkFrame('2001:db8:2::'), 2);
    send(dp, downlinkFrame('2001:db8:3::'), 1);
    const before = dp.counters(undefined, { rules: 'none' }).functions;
    expect([before.h_m_gtp4_d.packets, before.end_m_gtp4_e.packets]).toEqual([4n, 3n]);

    dp.sync(config([P2], [L2]));
    // At once (the slots still hold the packets; the local SID's function is the one the tables wrote for it).
    expect(packets(dp)).toMatchObject({ h_m_gtp4_d: 4n, end_m_gtp4_e: 3n });
    await zeroed(dp, [p1, l1]);
    // Zeroed: the counts are in the retired slots. Bytes too, and the one-go and the sliced read agree.
    expect(dp.counters(undefined, { rules: 'none' }).functions).toEqual(before);
    expect((await dp.countersRowsAsync(undefined, { rules: 'none', sliceMs: 0 })).functions).toEqual(before);
    // Not events: the retired slots after the event slots are not listed as unnamed events.
    expect(Object.keys(dp.counters(undefined, { rules: 'none' }).events).filter((e) => /^slot|^event/.test(e))).toEqual([]);

    // A new rule that takes a freed id starts at zero and adds to the total.
    dp.sync(config([P2, P3], [L2]));
    send(dp, uplinkFrame('10.0.3.5'), 2);
    const p3 = dp.rules.policyRule(parseIpv4Prefix('10.0.3.0/24', 't'))!;
    expect(p3).toBe(p1);
    expect(slotPackets(dp, p3)).toBe(2n);
    expect(packets(dp)).toMatchObject({ h_m_gtp4_d: 6n, end_m_gtp4_e: 3n });
    expect(await asyncPackets(dp)).toMatchObject({ h_m_gtp4_d: 6n, end_m_gtp4_e: 3n });

    // A reset zeroes everything, the retired slots included.
    dp.resetCounters();
    expect(Object.values(packets(dp))).toEqual(Object.values(packets(dp)).map(() => 0n));
  });

  it("one rule's counters (mup stats --rule) are its row of the whole read, from its slot alone", () => {
    const c = config([P1, P2], [L1, L2]);
    const dp = load(c);
    send(dp, uplinkFrame('10.0.1.5'), 3);
    send(dp, uplinkFrame('10.0.2.5'), 1);
    send(dp, downlinkFrame('2001:db8:3::'), 2);
    const rows = dp.counters().rules;
    const one = [...c.policies.map((r) => dp.ruleCounter('policy', r)), ...c.localsids.map((r) => dp.ruleCounter('localsid', r))];
    expect(one).toEqual(rows);
    expect(one.map((r) => r?.packets)).toEqual([3n, 1n, 0n, 2n]);
    // A rule the tables do not hold has no counter.
    expect(dp.ruleCounter('policy', config([P3], []).policies[0]!)).toBeUndefined();
  });

  it('a local SID that changes behaviour takes a new slot: its packets so far stay under the function that counted them', async () => {
    const dp = load(config([P2], [L1, L2]));
    const sid = parseIpv6Prefix('2001:db8:3::/48', 't');
    const asGtp4e = dp.rules.localsidRule(sid)!;
    send(dp, downlinkFrame('2001:db8:3::'), 2);
    send(dp, downlinkFrame('2001:db8:2::'), 1);
    expect(packets(dp)).toMatchObject({ end_m_gtp4_e: 3n, end_m_gtp6_e: 0n });

    dp.sync(config([P2], [L1, L2_GTP6E]));
    const asGtp6e = dp.rules.localsidRule(sid)!;
    expect(asGtp6e).not.toBe(asGtp4e);
    expect(slotPackets(dp, asGtp6e)).toBe(0n);
    // Before: end_m_gtp4_e 1, end_m_gtp6_e 2 (the slot's packets went with the new behaviour).
    expect(packets(dp)).toMatchObject({ end_m_gtp4_e: 3n, end_m_gtp6_e: 0n });
    await zeroed(dp, [asGtp4e]);
    expect(packets(dp)).toMatchObject({ end_m_gtp4_e: 3n, end_m_gtp6_e: 0n });
    // Its traffic now: End.M.GTP6.E (SRH with the gNB, Segments Left 1), counted in its new slot and function.
    const gtp6e = srv6ReducedFrame({
      src: parseIpv6('2001:db8:ffff::5', 't'),
      dst: parseIpv6('2001:db8:3:0:1234::', 't'),
      gnb: parseIpv6('2001:db8:99::1', 't'),
      inner: innerUdp4({ src: parseIpv4('203.0.113.5', 't'), dst: parseIpv4('10.45.0.2', 't'), sport: 9000, dport: 40000, len: 46 }),
    });
    send(dp, gtp6e, 2);
    expect(slotPackets(dp, asGtp6e)).toBe(2n);
    expect(packets(dp)).toMatchObject({ end_m_gtp4_e: 3n, end_m_gtp6_e: 2n });

    // The next-hop cache is told the old id goes, as a delete's (it would keep indexing it until reused).
    const watcher = new NextHopWatcher({ dataplane: () => dp } as unknown as ConstructorParameters<typeof NextHopWatcher>[0]);
    const back = config([P2], [L1, L2]).localsids;
    expect(watcher.deletedRules({ putLocalSids: back })).toEqual([asGtp6e]); // l1 keeps its behaviour, so its id
    expect(watcher.deletedRules({ putLocalSids: config([P2], [L1, L2_GTP6E]).localsids })).toEqual([]);

    // And back: each function keeps what it counted.
    dp.sync(config([P2], [L1, L2]));
    expect(dp.rules.localsidRule(sid)).not.toBe(asGtp6e);
    await zeroed(dp, [asGtp6e]);
    send(dp, downlinkFrame('2001:db8:3::'), 1);
    expect(packets(dp)).toMatchObject({ end_m_gtp4_e: 4n, end_m_gtp6_e: 2n });
    expect(await asyncPackets(dp)).toMatchObject({ end_m_gtp4_e: 4n, end_m_gtp6_e: 2n });
  });

  it('with no free id for a new one, a local SID changes behaviour in place (counted, and told), and a change that fits is never refused', () => {
    // 3 of 4 local SIDs, 2 of them changing behaviour in one change: one free id (the old ones are freed
    // only a grace period after their write). Before: refused (the table is full), a restart on such a
    // config too.
    const L3 = '{ name: l3, sid: "2001:db8:4::/48", src_prefix_len: 64 }';
    const L3_GTP6E = '{ name: l3, sid: "2001:db8:4::/48", behavior: end.m.gtp6.e, source: "2001:db8:ff::6e" }';
    const c = (ls: string[]): Config => parseConfig(`settings: { forwarding: tx, max_policies: 8, max_localsids: 4 }\npolicies: []\nlocalsids:\n${ls.map((l) => `  - ${l}`).join('\n')}\n`, 'f.yaml');
    const dp = load(c([L1, L2, L3]));
    const told: number[] = [];
    dp.rules.onBehaviorsChangedInPlace = (n) => told.push(n);
    const ids = ['2001:db8:3::/48', '2001:db8:4::/48'].map((x) => dp.rules.localsidRule(parseIpv6Prefix(x, 't'))!);
    send(dp, downlinkFrame('2001:db8:3::'), 2);
    send(dp, downlinkFrame('2001:db8:4::'), 3);
    expect(dp.sync(c([L1, L2_GTP6E, L3_GTP6E]))).toMatchObject({ replaced: 2 });
    const after = ['2001:db8:3::/48', '2001:db8:4::/48'].map((x) => dp.rules.localsidRule(parseIpv6Prefix(x, 't'))!);
    // The first took the free id, the second kept its own (and its slot's packets went to End.M.GTP6.E).
    expect(after[0]).not.toBe(ids[0]);
    expect(after[1]).toBe(ids[1]);
    expect([dp.rules.behaviorsChangedInPlace, told]).toEqual([1, [1]]);
    expect(packets(dp)).toMatchObject({ end_m_gtp4_e: 2n, end_m_gtp6_e: 3n });
    // A restart that takes these tables over on the config before (both change back): not refused either.
    const again = load(c([L1, L2, L3]), dp);
    expect(again.rules.localsidCount).toBe(3);
  });

  it('a new local SID takes the last free id before a local SID that changes behaviour in the same change', () => {
    // 3 of 4, then l2 changes behaviour and l4 is new: 4 of 4 fit. Before: l2 took the free id first, and
    // l4 was refused (the table is full).
    const L4 = '{ name: l4, sid: "2001:db8:5::/48", src_prefix_len: 64 }';
    const c = (ls: string[]): Config => parseConfig(`settings: { forwarding: tx, max_policies: 8, max_localsids: 4 }\npolicies: []\nlocalsids:\n${ls.map((l) => `  - ${l}`).join('\n')}\n`, 'f.yaml');
    const dp = load(c([L1, L2]));
    dp.sync(c([L1, L2, '{ name: l3, sid: "2001:db8:4::/48", src_prefix_len: 64 }']));
    const l2 = dp.rules.localsidRule(parseIpv6Prefix('2001:db8:3::/48', 't'));
    expect(dp.sync(c([L1, L2_GTP6E, '{ name: l3, sid: "2001:db8:4::/48", src_prefix_len: 64 }', L4]))).toMatchObject({ added: 1, replaced: 1 });
    expect(dp.rules.localsidCount).toBe(4);
    expect(dp.rules.localsidRule(parseIpv6Prefix('2001:db8:3::/48', 't'))).toBe(l2); // in place: no id left
    expect(dp.rules.behaviorsChangedInPlace).toBe(1);
  });

  it('tables settled before a takeover keep a deleted local SID in its total (a daemon stopping, a program swap)', () => {
    const first = load(config([P2], [L1, L2]));
    const l1 = first.rules.localsidRule(parseIpv6Prefix('2001:db8:2::/48', 't'))!;
    send(first, downlinkFrame('2001:db8:2::'), 2);
    send(first, downlinkFrame('2001:db8:3::'), 1);
    // The delete's reclaim not run within the change (as in the daemon, where it waits for its grace period on the loop).
    Object.assign(graceClock, { done: () => false });
    try {
      first.sync(config([P2], [L2]));
    } finally {
      delete (graceClock as unknown as Record<string, unknown>)['done'];
    }
    expect(slotPackets(first, l1)).toBe(2n);
    // What the daemon does before other tables take the maps over: the delete's grace period, then the reclaim.
    // Without it the new tables find the slot non-zero and zero it, not knowing the local SID's function.
    first.rules.settle();
    const second = load(config([P2], [L2]), first);
    expect(packets(second)).toMatchObject({ end_m_gtp4_e: 3n });
  });

  it('a restart that takes the tables over keeps the totals: the retired slots, and a slot its deleter left unzeroed', async () => {
    const first = load(config([P1, P2, P3], [L1]));
    send(first, uplinkFrame('10.0.1.5'), 3);
    send(first, uplinkFrame('10.0.2.5'), 1);
    send(first, uplinkFrame('10.0.3.5'), 5);
    send(first, downlinkFrame('2001:db8:2::'), 2);
    const p3 = first.rules.policyRule(parseIpv4Prefix('10.0.3.0/24', 't'))!;
    // p3 deleted and its slot zeroed by this daemon (its packets retired)...
    first.sync(config([P1, P2], [L1]));
    await zeroed(first, [p3]);
    // ...and p1 deleted by a daemon killed before it zeroed the slot: the entry gone, the slot still counting 3.
    const p1 = first.rules.policyRule(parseIpv4Prefix('10.0.1.0/24', 't'))!;
    expect(mapDelete(first.tables.policiesFd, encodePolicyKey(parseIpv4Prefix('10.0.1.0/24', 't')), 'mup_policies')).toBe(true);
    expect(slotPackets(first, p1)).toBe(3n);
    expect(packets(first)).toMatchObject({ h_m_gtp4_d: 9n, end_m_gtp4_e: 2n });

    const second = load(config([P2], [L1]), first);
    expect(slotPackets(second, p1)).toBe(0n); // a free id's slot is zeroed at the takeover...
    expect(packets(second)).toMatchObject({ h_m_gtp4_d: 9n, end_m_gtp4_e: 2n }); // ...its count retired first
    send(second, uplinkFrame('10.0.2.5'), 1);
    expect(packets(second)).toMatchObject({ h_m_gtp4_d: 10n, end_m_gtp4_e: 2n });
  });
});
