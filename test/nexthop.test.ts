/**
 * The next-hop cache (bpf/fwd.h, src/dataplane/nexthop.ts): the real program
 * through BPF_PROG_TEST_RUN inside a namespace whose routes and neighbours
 * the test sets and changes (a test run's FIB lookup and its ingress, lo,
 * are those of the namespace the calling thread is in), with the watcher
 * following the changes through its `ip monitor` child.
 *
 * Timing is measured and printed, never asserted tightly: the wait for a
 * change to reach the cache is polled up to 10 s (the bound is 1 s).
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { DEFAULT_OBJECT, inNetns, openDataplane, type Dataplane, type RunResult } from '../src/dataplane/index.js';
import { NextHopWatcher, resolveRange, type KernelState, type Range } from '../src/dataplane/nexthop.js';
import { gtpuFrame, innerUdp4, srv6Frame } from '../src/packet/frames.js';
import { ipv6Prefix, parseIpv4, parseIpv6 } from '../src/sid/addr.js';
import { encodeGtp4Sid, encodeGtp4Src, qfi, teid } from '../src/sid/mobile.js';
import { Lab, sweepStaleNamespaces } from './helpers/netns.js';
import type { CaseName } from '../src/bench/rfc2544/cases.js';
import { attachXdp, L3FWD_OBJECT, SINK_OBJECT, TRAFFICGEN_OBJECT } from '../src/packet/generator.js';
import { runTrial } from '../src/bench/rfc2544/search.js';
import { closeBenchRig, openBenchRig, streamIo, type BenchRig } from './helpers/bench-rig.js';
import { needsLiveFrames, noLiveFrames } from './helpers/live-frames.js';

const isRoot = process.getuid?.() === 0;

const CONFIG = `
settings:
  forwarding: fib
  max_policies: 16
  max_localsids: 16
policies:
  - match: 192.0.2.0/24
    sr_prefix: 2001:db8:100::/48
    src_prefix: 2001:db8:ff::/64
localsids:
  - sid: 2001:db8:2::/48
    src_prefix_len: 64
`;

const MAC_A = '02:00:00:00:0a:02';
const MAC_B = '02:00:00:00:0b:02';
const MAC_B2 = '02:00:00:00:0b:03';

const macOf = (b: Buffer, at: number): string => [...b.subarray(at, at + 6)].map((x) => x.toString(16).padStart(2, '0')).join(':');

describe.skipIf(!isRoot || !existsSync(DEFAULT_OBJECT))('next-hop cache, real program in a namespace', () => {
  let lab: Lab;
  let dp: Dataplane;
  let watcher: NextHopWatcher;
  let dut: string;
  let macX0 = '';
  let macX1 = '';
  const config = parseConfig(CONFIG, 'nexthop');
  const frame = gtpuFrame({
    src: parseIpv4('198.51.100.1', 't'),
    dst: parseIpv4('192.0.2.10', 't'),
    teid: 0x1000,
    qfi: 9,
    inner: innerUdp4({ src: parseIpv4('10.45.0.2', 't'), dst: parseIpv4('203.0.113.5', 't'), sport: 40000, dport: 9000, len: 46 }),
  });
  /** End.M.GTP4.E to gNB `gnb`: the IPv4 destination comes from the SID. */
  const downlink = (gnb: string): Buffer =>
    srv6Frame({
      src: encodeGtp4Src(ipv6Prefix(parseIpv6('2001:db8:ff::', 't'), 64), parseIpv4('203.0.113.5', 't')),
      dst: encodeGtp4Sid(ipv6Prefix(parseIpv6('2001:db8:2::', 't'), 48), parseIpv4(gnb, 't'), { qfi: qfi(9), r: false, u: false, teid: teid(0x1000) }),
      inner: innerUdp4({ src: parseIpv4('203.0.113.5', 't'), dst: parseIpv4('10.45.0.2', 't'), sport: 9000, dport: 40000, len: 46 }),
    });
  const send = (f = frame): RunResult => inNetns(dut, () => dp.run(f));

  /** Poll until `ok` holds for a frame; the ms it took. Throws with the last result after `limitMs`. */
  async function until(what: string, ok: (r: RunResult) => boolean, limitMs = 10_000): Promise<number> {
    const t0 = performance.now();
    let r = send();
    while (!ok(r)) {
      if (performance.now() - t0 > limitMs) {
        throw new Error(`${what}: not after ${limitMs} ms; last frame: ${r.verdict} ${r.event} dst ${macOf(r.out, 0)}; cache: ${JSON.stringify(watcher.last)}`);
      }
      await new Promise((res) => setTimeout(res, 10));
      r = send();
    }
    return Math.round(performance.now() - t0);
  }

  beforeAll(async () => {
    await sweepStaleNamespaces();
    lab = await Lab.create(['dut', 'a', 'b']);
    dut = lab.ns('dut');
    await lab.ip('dut', 'link', 'add', 'x0', 'type', 'veth', 'peer', 'name', 'y0', 'netns', lab.ns('a'));
    await lab.ip('dut', 'link', 'add', 'x1', 'type', 'veth', 'peer', 'name', 'y1', 'netns', lab.ns('b'));
    await lab.sysctl('dut', ['net.ipv6.conf.all.forwarding=1', 'net.ipv4.conf.all.forwarding=1', 'net.ipv6.conf.all.accept_dad=0', 'net.ipv6.conf.default.accept_dad=0']);
    await lab.batch('dut', [
      'link set x0 up',
      'link set x1 up',
      'addr add fd00:a::1/64 dev x0 nodad',
      'addr add fd00:b::1/64 dev x1 nodad',
      `neigh replace fd00:a::2 lladdr ${MAC_A} dev x0 nud permanent`,
      `neigh replace fd00:b::2 lladdr ${MAC_B} dev x1 nud permanent`,
      'route add 2001:db8:100::/48 via fd00:a::2 dev x0',
      'addr add 10.0.0.1/24 dev x0',
      `neigh replace 10.0.0.2 lladdr ${MAC_A} dev x0 nud permanent`,
      'route add 198.51.100.0/24 via 10.0.0.2 dev x0',
    ]);
    await lab.ip('a', 'link', 'set', 'y0', 'up');
    await lab.ip('b', 'link', 'set', 'y1', 'up');
    const links = JSON.parse(await lab.ip('dut', '-j', 'link', 'show')) as Array<{ ifname: string; address: string }>;
    macX0 = links.find((l) => l.ifname === 'x0')!.address;
    macX1 = links.find((l) => l.ifname === 'x1')!.address;
    dp = openDataplane({ config });
    watcher = new NextHopWatcher({
      dataplane: () => dp,
      config: () => config,
      ingress: () => ['lo'],
      netns: dut,
    });
    watcher.start();
  }, 30_000);

  afterAll(async () => {
    watcher?.stop();
    dp?.close();
    await lab?.destroy();
  });

  it('uses the cached next hop, follows a route change and a neighbour change, falls back when the route becomes ambiguous', async () => {
    // Before the first resolution (or with the lease off) the FIB lookup forwards.
    const first = await until('first resolution', (r) => r.event === 'fwd_cached');
    let r = send();
    expect(r.verdict).toBe('redirect');
    expect(macOf(r.out, 0)).toBe(MAC_A);
    expect(macOf(r.out, 6)).toBe(macX0);
    expect(watcher.last!.cached).toBe(2);

    // A rule put through the API (the daemon calls rulesPut): pointed at its
    // next hop at once, from the kernel's tables of the last resolution,
    // without resolving every rule again (at 65,536 rules that is half a
    // second of the daemon's event loop per request).
    const added = parseConfig('policies:\n  - match: 192.0.3.0/24\n    sr_prefix: 2001:db8:100:100::/56\n    src_prefix: 2001:db8:ff::/64\n', 'added').policies;
    await watcher.resolveNow();
    const full = watcher.last;
    dp.rules.apply({ putPolicies: added });
    watcher.rulesPut({ putPolicies: added });
    const toAdded = gtpuFrame({
      src: parseIpv4('198.51.100.1', 't'),
      dst: parseIpv4('192.0.3.10', 't'),
      teid: 0x1000,
      qfi: 9,
      inner: innerUdp4({ src: parseIpv4('10.45.0.2', 't'), dst: parseIpv4('203.0.113.5', 't'), sport: 40000, dport: 9000, len: 46 }),
    });
    r = send(toAdded);
    expect([r.verdict, r.event, macOf(r.out, 0)]).toEqual(['redirect', 'fwd_cached', MAC_A]);
    expect(watcher.last, 'no full resolution ran for it').toBe(full);
    dp.rules.apply({ delPolicies: added.map((p) => p.match) });
    watcher.rulesChanged();
    // End.M.GTP4.E: the slot names 198.51.100.0/24 (the one gateway route
    // with nothing inside); a gNB in it uses the cache, one outside (on the
    // connected subnet) the FIB lookup.
    r = send(downlink('198.51.100.7'));
    expect([r.verdict, r.event, macOf(r.out, 0), macOf(r.out, 6)]).toEqual(['redirect', 'fwd_cached', MAC_A, macX0]);
    r = send(downlink('10.0.0.2'));
    expect([r.verdict, r.event, macOf(r.out, 0)]).toEqual(['redirect', 'fwd_redirect', MAC_A]);
    // That miss left its destination as the rule's hint: the next resolution
    // moves the slot to it (a connected neighbour: a range of one address).
    await watcher.resolveNow();
    r = send(downlink('10.0.0.2'));
    expect([r.verdict, r.event, macOf(r.out, 0)]).toEqual(['redirect', 'fwd_cached', MAC_A]);
    expect(send(downlink('198.51.100.7')).event).toBe('fwd_redirect');

    // Route change: the prefix moves to the other interface's neighbour.
    await lab.ip('dut', 'route', 'replace', '2001:db8:100::/48', 'via', 'fd00:b::2', 'dev', 'x1');
    const routeMs = await until('route change', (x) => x.event === 'fwd_cached' && macOf(x.out, 0) === MAC_B);
    r = send();
    expect(macOf(r.out, 6)).toBe(macX1);

    // Neighbour change: the gateway's MAC changes.
    await lab.ip('dut', 'neigh', 'replace', 'fd00:b::2', 'lladdr', MAC_B2, 'dev', 'x1', 'nud', 'permanent');
    const neighMs = await until('neighbour change', (x) => x.event === 'fwd_cached' && macOf(x.out, 0) === MAC_B2);

    // Frames keep flowing through the new next hop, every one.
    for (let i = 0; i < 20; i++) {
      const y = send();
      expect([y.verdict, y.event, macOf(y.out, 0)]).toEqual(['redirect', 'fwd_cached', MAC_B2]);
    }

    // A more specific route inside the rule's range: one next hop no longer
    // serves every destination, so the FIB lookup decides again.
    await lab.ip('dut', 'route', 'add', '2001:db8:100:ff00::/56', 'via', 'fd00:a::2', 'dev', 'x0');
    const ambMs = await until('ambiguous route', (x) => x.event === 'fwd_redirect');
    r = send();
    expect(macOf(r.out, 0)).toBe(MAC_B2); // the FIB's answer for this frame's SID: still the /48
    expect(watcher.last!.cached).toBe(1); // the End.M.GTP4.E rule only
    expect(Object.keys(watcher.last!.fib).join()).toMatch(/inside the range/);

    // Unambiguous again, then a neighbour that is not usable: FIB (no neighbour -> kernel).
    await lab.ip('dut', 'route', 'del', '2001:db8:100:ff00::/56');
    await until('route removed', (x) => x.event === 'fwd_cached');
    await lab.ip('dut', 'neigh', 'del', 'fd00:b::2', 'dev', 'x1');
    const delMs = await until('neighbour deleted', (x) => x.event !== 'fwd_cached');
    expect(send().event).toMatch(/^fwd_fib_miss$|^fwd_redirect$/);

    process.stdout.write(
      `nexthop: first resolution ${first} ms; route change -> cache ${routeMs} ms; neighbour change ${neighMs} ms; ` +
        `ambiguous route -> FIB ${ambMs} ms; neighbour deleted -> FIB ${delMs} ms (poll every 10 ms)\n`,
    );

    // The watcher stops: the lease ends at once and packets take the FIB path.
    await lab.ip('dut', 'neigh', 'replace', 'fd00:b::2', 'lladdr', MAC_B, 'dev', 'x1', 'nud', 'permanent');
    await until('neighbour back', (x) => x.event === 'fwd_cached');
    watcher.stop();
    r = send();
    expect([r.event, macOf(r.out, 0)]).toEqual(['fwd_redirect', MAC_B]);
  }, 60_000);
});

// --- real frames over veths, forwarded by the cache --------------------------------

describe.skipIf(!isRoot || ![DEFAULT_OBJECT, TRAFFICGEN_OBJECT, SINK_OBJECT, L3FWD_OBJECT].every((o) => existsSync(o)) || noLiveFrames !== undefined)(
  needsLiveFrames('next-hop cache under real traffic (the RFC 2544 lab)'),
  () => {
    let rig: BenchRig | undefined;
    let nh: NextHopWatcher | undefined;

    beforeAll(async () => {
      rig = await openBenchRig('nh');
      const { lab, dp: translator } = rig;
      attachXdp(translator.progFd, 'da', lab.dut);
      attachXdp(translator.progFd, 'db', lab.dut);
      nh = new NextHopWatcher({ dataplane: () => translator, config: () => translator.config, ingress: () => ['da', 'db'], netns: lab.dut, watch: false });
      nh.start();
    }, 30_000);

    afterAll(async () => {
      nh?.stop();
      await closeBenchRig(rig);
    });

    it.each<CaseName>(['uplink', 'downlink'])('%s: every frame leaves by the cached next hop and arrives translated, right MACs included', async (name) => {
      const dp = rig!.dp;
      const io = streamIo(rig!, name);
      // A few frames first: End.M.GTP4.E learns its gNB from a miss (FIB path), then resolve.
      await runTrial(io, { rate: 20_000, durationMs: 50, batch: 64 });
      await nh!.resolveNow();
      const before = dp.counters().events;
      io.sink.reset();
      const r = await runTrial(io, { rate: 20_000, durationMs: 300, batch: 256 });
      const after = dp.counters().events;
      const cached = Number(after['fwd_cached']!.packets - before['fwd_cached']!.packets);
      const fib = Number(after['fwd_redirect']!.packets - before['fwd_redirect']!.packets);
      expect(r.sent).toBeGreaterThan(0);
      expect([r.received, r.lost]).toEqual([r.sent, 0]);
      expect([cached, fib]).toEqual([r.sent, 0]);
    }, 30_000);
  },
);

// --- resolution rules on made-up tables ---------------------------------------

function state(routes6: KernelState['routes'][6], neigh: KernelState['neighbours'] = [], rules6 = true): KernelState {
  return {
    routes: { 4: [], 6: routes6 },
    defaultRules: { 4: true, 6: rules6 },
    neighbours: [{ dst: 'fe80::1', dev: 'e0', lladdr: '02:00:00:00:00:01', state: ['STALE'] }, ...neigh],
    links: [{ ifindex: 7, ifname: 'e0', flags: ['BROADCAST', 'UP', 'LOWER_UP'], mtu: 1500, address: '02:00:00:00:00:aa' }],
    forwarding: { 4: new Set(['in0']), 6: new Set(['in0']) },
  };
}
const R48: Range = { family: 6, addr: 0x2001_0db8_0100n << 80n, len: 48 };
const via = (dst: string, extra: Record<string, unknown> = {}): KernelState['routes'][6][number] => ({ dst, gateway: 'fe80::1', dev: 'e0', flags: [], ...extra });

describe('resolveRange', () => {
  const cases: Array<[string, KernelState, string | RegExp, Range?, string[]?]> = [
    ['covering_default_route', state([via('default')]), 'ok'],
    ['covering_shorter_prefix', state([via('default'), via('2001:db8::/32')]), 'ok'],
    ['more_specific_inside', state([via('2001:db8:100::/48'), via('2001:db8:100:1::/64')]), /inside the range/],
    ['local_route_inside', state([via('default'), { type: 'local', dst: '2001:db8:100::1', dev: 'lo', table: 'local' }]), /local route/],
    ['no_route', state([]), /no route covers/],
    ['connected_prefix', state([{ dst: '2001:db8:100::/48', dev: 'e0', flags: [] }]), /connected/],
    ['connected_single_address', state([{ dst: '2001:db8:100::/48', dev: 'e0', flags: [] }], [{ dst: '2001:db8:100::5', dev: 'e0', lladdr: '02:00:00:00:00:05', state: ['REACHABLE'] }]), 'ok', { family: 6, addr: (0x2001_0db8_0100n << 80n) | 5n, len: 128 }],
    ['multipath', state([via('2001:db8::/32', { nexthops: [{}, {}] })]), /multipath/],
    ['two_metrics', state([via('2001:db8::/32'), via('2001:db8::/32', { metric: 2048 })]), /2 routes/],
    ['seg6_encap', state([via('2001:db8::/32', { encap: 'seg6' })]), /encapsulation/],
    ['blackhole', state([{ type: 'blackhole', dst: '2001:db8::/32', flags: [] }]), /type blackhole/],
    ['neighbour_failed', { ...state([via('default')]), neighbours: [{ dst: 'fe80::1', dev: 'e0', state: ['FAILED'] }] }, /FAILED/],
    ['neighbour_missing', { ...state([via('default')]), neighbours: [] }, /no neighbour entry/],
    ['policy_rules', state([via('default')], [], false), /policy-routing/],
    ['forwarding_off', state([via('default')]), /forwarding is off on in1/, R48, ['in0', 'in1']],
  ];
  it.each(cases)('%s', (_name, k, want, range = R48, ingress = ['in0']) => {
    const r = resolveRange(k, range, ingress);
    if (want === 'ok') {
      expect(r.ok, r.ok ? '' : r.reason).toBe(true);
      if (r.ok) expect([r.nh.ifindex, r.nh.mtu, r.nh.smac.toString('hex')]).toEqual([7, 1500, '0200000000aa']);
    } else {
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.reason).toMatch(want);
    }
  });
});
