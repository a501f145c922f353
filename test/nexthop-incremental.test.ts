/**
 * Incremental next-hop resolution (issue 19, item 1): N rules over K routes
 * in a real namespace, the real program run through BPF_PROG_TEST_RUN there.
 * Changing one route (or its gateway's neighbour entry) must re-resolve the
 * rules under that route only, counted by the watcher (the daemon exports
 * the same count as mup_nexthop_rules_resolved_total), and the data plane
 * must then send those rules' packets to the new next hop and the others'
 * to the old one. An API change resolves its own rule only. End.M.GTP4.E
 * rules are resolved again for an IPv4 route change only when it can move
 * their prefix. A pass over many rules gives the event loop back.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { DEFAULT_OBJECT, inNetns, openDataplane, type Dataplane, type RunResult } from '../src/dataplane/index.js';
import { IpBatch, NextHopWatcher, parseMonitorLine, readKernelState, type PassSummary } from '../src/dataplane/nexthop.js';
import { gtpuFrame, innerUdp4, srv6Frame } from '../src/packet/frames.js';
import { ipv6Prefix, parseIpv4, parseIpv6 } from '../src/sid/addr.js';
import { encodeGtp4Sid, encodeGtp4Src, qfi, teid } from '../src/sid/mobile.js';
import { Lab, sweepStaleNamespaces } from './helpers/netns.js';
import { isDeepStrictEqual } from 'node:util';

const isRoot = process.getuid?.() === 0;

/** K routes, N / K policies under each (their SR prefixes inside the route's /48). */
const K = 4;
const PER = 16;
const N = K * PER;
const policy = (k: number, j: number): string =>
  `  - match: 10.${k}.${j}.0/24\n    sr_prefix: 2001:db8:${k + 1}:${j.toString(16)}00::/56\n    src_prefix: 2001:db8:ff::/64\n`;
/** End.M.GTP4.E local SIDs (all of IPv4: one prefix for all of them, chosen from the IPv4 routes). */
const G = 4;
const localsid = (i: number): string => `  - sid: 2001:db8:f${i}::/48\n    src_prefix_len: 64\n`;
const CONFIG =
  `settings:\n  forwarding: fib\n  max_policies: ${N + 8}\n  max_localsids: 8\npolicies:\n${Array.from({ length: N }, (_, i) => policy(Math.floor(i / PER), i % PER)).join('')}` +
  `localsids:\n${Array.from({ length: G }, (_, i) => localsid(i)).join('')}`;

const MAC_A = '02:00:00:00:0a:02';
const MAC_B = '02:00:00:00:0b:02';
const MAC_B2 = '02:00:00:00:0b:03';
const macOf = (b: Buffer, at: number): string => [...b.subarray(at, at + 6)].map((x) => x.toString(16).padStart(2, '0')).join(':');

describe.skipIf(!isRoot || !existsSync(DEFAULT_OBJECT))('incremental next-hop resolution, real routes in a namespace', () => {
  let lab: Lab | undefined;
  let dp: Dataplane | undefined;
  let watcher: NextHopWatcher | undefined;
  let dut = '';
  const config = parseConfig(CONFIG, 'incremental');
  /** A packet to policy (k, j): GTP-U to 10.k.j.10. */
  const frame = (k: number, j: number): Buffer =>
    gtpuFrame({
      src: parseIpv4('198.51.100.1', 't'),
      dst: parseIpv4(`10.${k}.${j}.10`, 't'),
      teid: 0x1000,
      qfi: 9,
      inner: innerUdp4({ src: parseIpv4('10.45.0.2', 't'), dst: parseIpv4('203.0.113.5', 't'), sport: 40000, dport: 9000, len: 46 }),
    });
  const send = (k: number, j: number): RunResult => inNetns(dut, () => dp!.run(frame(k, j)));
  /** End.M.GTP4.E through local SID `i` to gNB `gnb`: the event. */
  const down = (i: number, gnb: string): string =>
    inNetns(dut, () =>
      dp!.run(
        srv6Frame({
          src: encodeGtp4Src(ipv6Prefix(parseIpv6('2001:db8:ff::', 't'), 64), parseIpv4('203.0.113.5', 't')),
          dst: encodeGtp4Sid(ipv6Prefix(parseIpv6(`2001:db8:f${i}::`, 't'), 48), parseIpv4(gnb, 't'), { qfi: qfi(9), r: false, u: false, teid: teid(0x1000) }),
          inner: innerUdp4({ src: parseIpv4('203.0.113.5', 't'), dst: parseIpv4('10.45.0.2', 't'), sport: 9000, dport: 40000, len: 46 }),
        }),
      ),
    ).event;
  /** Destination MAC of each route's first and last policy, when cached; "fib" otherwise. */
  const where = (): string[] =>
    Array.from({ length: K }, (_, k) =>
      [0, PER - 1]
        .map((j) => {
          const r = send(k, j);
          return r.event === 'fwd_cached' ? macOf(r.out, 0) : r.event;
        })
        .join(' '),
    );

  async function until(what: string, ok: () => boolean, limitMs = 15_000): Promise<void> {
    const t0 = performance.now();
    while (!ok()) {
      if (performance.now() - t0 > limitMs) throw new Error(`${what}: not after ${limitMs} ms; ${JSON.stringify(watcher?.last)} ${JSON.stringify(watcher?.totals)} ${where().join(', ')}`);
      await new Promise((r) => setTimeout(r, 20));
    }
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
      'addr add 10.99.0.1/24 dev x0',
      `neigh replace 10.99.0.2 lladdr ${MAC_A} dev x0 nud permanent`,
      'route add 192.0.2.0/24 via 10.99.0.2 dev x0',
      ...Array.from({ length: K }, (_, k) => `route add 2001:db8:${k + 1}::/48 via fd00:a::2 dev x0`),
    ]);
    await lab.ip('a', 'link', 'set', 'y0', 'up');
    await lab.ip('b', 'link', 'set', 'y1', 'up');
    dp = openDataplane({ config });
    watcher = new NextHopWatcher({ dataplane: () => dp, config: () => config, ingress: () => ['lo'], netns: dut });
    watcher.start();
  }, 30_000);

  afterAll(async () => {
    watcher?.stop();
    dp?.close();
    await lab?.destroy();
  });

  it('a route change re-resolves the rules under that route only; a neighbour change those through it; an API change its own rule', async () => {
    const w = watcher!;
    await until('first resolution', () => w.last?.cached === N + G);
    expect(where()).toEqual(Array(K).fill(`${MAC_A} ${MAC_A}`));
    const full = w.totals.fullPasses;
    let before = w.totals.rules;

    // One route moves to the other gateway: its 16 rules follow, no other rule is looked at.
    await lab!.ip('dut', 'route', 'replace', '2001:db8:3::/48', 'via', 'fd00:b::2', 'dev', 'x1');
    await until('route change reaches the data plane', () => where()[2] === `${MAC_B} ${MAC_B}`);
    await until('counted', () => w.totals.rules - before >= PER);
    expect(w.totals.rules - before, 'rules re-resolved for one route change').toBe(PER);
    expect(w.totals.fullPasses, 'no full pass').toBe(full);
    expect(w.last).toMatchObject({ full: false, rules: PER, cached: N + G });
    expect(where()).toEqual([`${MAC_A} ${MAC_A}`, `${MAC_A} ${MAC_A}`, `${MAC_B} ${MAC_B}`, `${MAC_A} ${MAC_A}`]);

    // The new gateway's MAC changes: the rules resolved through that neighbour only.
    before = w.totals.rules;
    await lab!.ip('dut', 'neigh', 'replace', 'fd00:b::2', 'lladdr', MAC_B2, 'dev', 'x1', 'nud', 'permanent');
    await until('neighbour change reaches the data plane', () => where()[2] === `${MAC_B2} ${MAC_B2}`);
    await until('counted', () => w.totals.rules - before >= PER);
    expect(w.totals.rules - before, 'rules re-resolved for one neighbour change').toBe(PER);
    expect(where()).toEqual([`${MAC_A} ${MAC_A}`, `${MAC_A} ${MAC_A}`, `${MAC_B2} ${MAC_B2}`, `${MAC_A} ${MAC_A}`]);

    // A more specific route inside one policy's range: that policy goes back to the FIB lookup, alone.
    before = w.totals.rules;
    await lab!.ip('dut', 'route', 'add', '2001:db8:1:580::/57', 'via', 'fd00:b::2', 'dev', 'x1');
    await until('ambiguous range', () => send(0, 5).event !== 'fwd_cached');
    await until('counted', () => w.totals.rules - before >= 1);
    expect(w.totals.rules - before, 'rules re-resolved for a route inside one range').toBe(1);
    expect(w.last!.fib).toEqual({ 'route 2001:db8:1:580::/57 lies inside the range': 1 });
    expect(send(0, 4).event).toBe('fwd_cached');

    // An API change (what the daemon does for POST /v1/policies): that rule only, at once.
    before = w.totals.rules;
    const last = w.last;
    const added = parseConfig('policies:\n  - match: 10.9.0.0/24\n    sr_prefix: 2001:db8:4:9900::/56\n    src_prefix: 2001:db8:ff::/64\n', 'added').policies;
    dp!.rules.apply({ putPolicies: added });
    w.rulesPut({ putPolicies: added });
    const r = send(9, 0);
    expect([r.event, macOf(r.out, 0)]).toEqual(['fwd_cached', MAC_A]);
    expect(w.totals.rules - before).toBe(1);
    expect(w.last, 'no pass ran for it').toBe(last);
    // ... and its delete points its id nowhere.
    const gone = w.deletedRules({ delPolicies: added.map((p) => p.match) });
    expect(gone).toHaveLength(1);
    dp!.rules.apply({ delPolicies: added.map((p) => p.match) });
    w.rulesPut({ delPolicies: added.map((p) => p.match) }, gone);
    const nh = dp!.nexthop;
    expect(nh).toBeDefined();
    expect(w.totals.fullPasses, 'still no full pass').toBe(full);
    process.stdout.write(`nexthop-incremental: ${JSON.stringify(w.totals)}\n`);
  }, 90_000);

  it('an IPv4 route change re-resolves the End.M.GTP4.E rules only when it can move their prefix', async () => {
    const w = watcher!;
    await until('first resolution', () => w.last !== undefined && w.last.cached >= G);
    // The one gateway route with nothing inside: every End.M.GTP4.E rule's slot names 192.0.2.0/24.
    expect(Array.from({ length: G }, (_, i) => down(i, '192.0.2.7'))).toEqual(Array(G).fill('fwd_cached'));
    const passed = async (what: string, passes: number): Promise<void> => until(what, () => w.totals.incrementalPasses + w.totals.fullPasses > passes);
    const full = w.totals.fullPasses;

    // As long as 192.0.2.0/24 and higher, nothing of it inside: it cannot be chosen instead. No rule is looked at.
    let before = w.totals.rules;
    let passes = w.totals.incrementalPasses + w.totals.fullPasses;
    await lab!.ip('dut', 'route', 'add', '198.18.0.0/24', 'via', '10.99.0.2', 'dev', 'x0');
    await passed('a pass for 198.18.0.0/24', passes);
    expect(w.totals.rules - before, 'rules re-resolved for an IPv4 route that cannot move their prefix').toBe(0);
    expect(w.last).toMatchObject({ full: false, rules: 0 });
    expect(down(0, '192.0.2.7')).toBe('fwd_cached');

    // A wider gateway route: every End.M.GTP4.E rule moves to it, and no policy is looked at.
    // (Counted first, then the packets: a packet that misses the cache leaves a hint, which moves its rule again.)
    before = w.totals.rules;
    await lab!.ip('dut', 'route', 'add', '172.16.0.0/12', 'via', '10.99.0.2', 'dev', 'x0');
    await until('counted', () => w.totals.rules - before >= G);
    expect(w.totals.rules - before, 'rules re-resolved for a wider IPv4 gateway route').toBe(G);
    expect(Array.from({ length: G }, (_, i) => down(i, '172.16.5.5'))).toEqual(Array(G).fill('fwd_cached'));

    // A route inside the chosen prefix makes it unsound: of the /24s left the lowest, 172.16.9.0/24; the same G rules.
    before = w.totals.rules;
    await lab!.ip('dut', 'route', 'add', '172.16.9.0/24', 'via', '10.99.0.2', 'dev', 'x0');
    await until('counted', () => w.totals.rules - before >= G);
    expect(w.totals.rules - before, 'rules re-resolved for a route inside their prefix').toBe(G);
    expect(Array.from({ length: G }, (_, i) => down(i, '172.16.9.5'))).toEqual(Array(G).fill('fwd_cached'));

    // An IPv6 route: not theirs either.
    before = w.totals.rules;
    passes = w.totals.incrementalPasses + w.totals.fullPasses;
    await lab!.ip('dut', 'route', 'add', '2001:db8:77::/48', 'via', 'fd00:a::2', 'dev', 'x0');
    await passed('a pass for 2001:db8:77::/48', passes);
    expect(w.totals.rules - before, 'rules re-resolved for an IPv6 route outside every range').toBe(0);
    expect(w.totals.fullPasses, 'no full pass').toBe(full);
    expect(down(0, '172.16.5.5'), 'outside the slot\'s prefix now: the FIB lookup').toBe('fwd_redirect');

    // A route whose preferred source is an address that goes away (a VRRP address moving to the other
    // router): the kernel deletes it. This kernel (6.18) sends the route's deletion; older ones sent only
    // the address's local route's (FRRouting issue 1446), so every IPv4 range is resolved again on a
    // local route's event too (session 43). Either way the slots must leave the deleted route.
    await lab!.ip('dut', 'addr', 'add', '10.98.0.1/32', 'dev', 'x0');
    await lab!.ip('dut', 'route', 'add', '100.64.0.0/10', 'via', '10.99.0.2', 'dev', 'x0', 'src', '10.98.0.1');
    await until('the slots on 100.64.0.0/10', () => down(0, '100.64.5.5') === 'fwd_cached');
    await lab!.ip('dut', 'addr', 'del', '10.98.0.1/32', 'dev', 'x0');
    expect((await lab!.ip('dut', 'route', 'show', '100.64.0.0/10')).trim(), 'the kernel deleted the route with its source').toBe('');
    await until('the slots off the deleted route', () => down(0, '100.64.5.5') !== 'fwd_cached');
    expect(down(0, '172.16.9.5')).toBe('fwd_cached');
  }, 60_000);

  it("reads the kernel's tables through long-running ip -batch children, the same as one ip run per table", async () => {
    const batch = new IpBatch(dut);
    try {
      // The two reads run at the same time: a table the kernel changes between them (an IPv6 link-local
      // route or a neighbour's state settling after the namespace came up) differs; read again until it
      // has settled, then they must agree.
      const both = async () => {
        const [x, y] = await Promise.all([readKernelState(dut, undefined, undefined, batch), readKernelState(dut)]);
        const { text: _t, ...viaRuns } = y;
        return { a: x, viaRuns };
      };
      let { a, viaRuns } = await both();
      for (let i = 0; i < 20 && !isDeepStrictEqual(a, viaRuns); i++) {
        await new Promise((r) => setTimeout(r, 250));
        ({ a, viaRuns } = await both());
      }
      expect(a).toEqual(viaRuns);
      expect(a.routes[6].filter((r) => r.dst.startsWith('2001:db8:')).length).toBeGreaterThanOrEqual(K);
      // Asked again (the children stay): only the parts asked for are read, the rest kept.
      // The neighbours are read again, so they are compared with a fresh read of their own (a
      // link-local neighbour's state may have moved on since `a`, as it did in one CI run).
      const reread = async () => {
        const [x, y] = await Promise.all([readKernelState(dut, new Set(['neigh']), a, batch), readKernelState(dut)]);
        return { again: x, now: y.neighbours };
      };
      let { again, now } = await reread();
      for (let i = 0; i < 20 && !isDeepStrictEqual(again.neighbours, now); i++) {
        await new Promise((r) => setTimeout(r, 250));
        ({ again, now } = await reread());
      }
      expect(again.routes[6]).toBe(a.routes[6]);
      expect(again.links).toBe(a.links);
      expect(again.neighbours).not.toBe(a.neighbours);
      expect(again.neighbours).toEqual(now);
    } finally {
      batch.close();
    }
  });
});

describe('parseMonitorLine', () => {
  it('narrows each ip monitor line to what it can change', () => {
    expect(parseMonitorLine('[ROUTE]2001:db8::/48 via fd00::2 dev x0 metric 1024 pref medium')).toEqual({ kind: 'route', family: 6, prefix: { addr: 0x20010db8n << 96n, len: 48 } });
    expect(parseMonitorLine('[ROUTE]Deleted 10.9.0.0/16 via 10.0.0.2 dev x0 ')).toEqual({ kind: 'route', family: 4, prefix: { addr: 0x0a090000n, len: 16 } });
    // An IPv4 address's local route: every IPv4 range (routes with it as their source go without an event).
    expect(parseMonitorLine('[ROUTE]local 10.0.0.1 dev x0 table local proto kernel scope host src 10.0.0.1 ')).toEqual({ kind: 'route', family: 4, prefix: undefined });
    expect(parseMonitorLine('[ROUTE]Deleted local 10.0.0.1 dev x0 table local proto kernel scope host src 10.0.0.1 ')).toEqual({ kind: 'route', family: 4, prefix: undefined });
    expect(parseMonitorLine('[ROUTE]local 2001:db8::1 dev x0 table local proto kernel metric 0 pref medium')).toEqual({ kind: 'route', family: 6, prefix: { addr: 0x20010db8n << 96n | 1n, len: 128 } });
    expect(parseMonitorLine('[ROUTE]default via fd00::2 dev x0 metric 1024 pref medium')).toEqual({ kind: 'route', family: 6, prefix: { addr: 0n, len: 0 } });
    expect(parseMonitorLine('[ROUTE]Deleted default dev x0')).toEqual({ kind: 'route', family: undefined, prefix: undefined });
    expect(parseMonitorLine('[NEIGH]fd00::2 dev x0 lladdr 02:00:00:00:00:01 PERMANENT ')).toMatchObject({ kind: 'neigh', family: 6, key: 'x0 6 fd000000000000000000000000000002' });
    expect(parseMonitorLine('[LINK]3: x0@y0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500')).toEqual({ kind: 'other', parts: ['links'] });
    expect(parseMonitorLine('    link/ether 8e:89:97:70:95:c0 brd ff:ff:ff:ff:ff:ff')).toBeUndefined();
    expect(parseMonitorLine('[NETCONF]inet x0 forwarding on')).toEqual({ kind: 'other', parts: ['netconf'] });
    expect(parseMonitorLine('something else')).toMatchObject({ kind: 'other' });
  });
});

/**
 * A pass over many rules gives the event loop back (issue 19: a route over
 * 32,768 rules re-pointed them in one synchronous turn): a timer set when
 * the pass has read the kernel's tables fires before the pass ends.
 */
describe.skipIf(!isRoot || !existsSync(DEFAULT_OBJECT))('a large pass yields, real routes in a namespace', () => {
  const M = 32768;
  let lab: Lab | undefined;
  let dp: Dataplane | undefined;
  let watcher: NextHopWatcher | undefined;
  let dut = '';
  const policies = Array.from({ length: M }, (_, i) => `  - match: 10.${i >> 8}.${i & 255}.0/24\n    sr_prefix: 2001:db8:1::/48\n    src_prefix: 2001:db8:ff::/64\n`).join('');
  const config = parseConfig(`settings:\n  forwarding: fib\n  max_policies: ${M + 8}\n  max_localsids: 8\npolicies:\n${policies}`, 'large');
  let onRead: (() => void) | undefined;
  let onPass: ((s: PassSummary) => void) | undefined;
  const send = (i: number): RunResult =>
    inNetns(dut, () =>
      dp!.run(
        gtpuFrame({
          src: parseIpv4('198.51.100.1', 't'),
          dst: parseIpv4(`10.${i >> 8}.${i & 255}.10`, 't'),
          teid: 0x1000,
          qfi: 9,
          inner: innerUdp4({ src: parseIpv4('10.45.0.2', 't'), dst: parseIpv4('203.0.113.5', 't'), sport: 40000, dport: 9000, len: 46 }),
        }),
      ),
    );

  beforeAll(async () => {
    await sweepStaleNamespaces();
    lab = await Lab.create(['dut', 'a']);
    dut = lab.ns('dut');
    await lab.ip('dut', 'link', 'add', 'x0', 'type', 'veth', 'peer', 'name', 'y0', 'netns', lab.ns('a'));
    await lab.sysctl('dut', ['net.ipv6.conf.all.forwarding=1', 'net.ipv6.conf.all.accept_dad=0', 'net.ipv6.conf.default.accept_dad=0']);
    await lab.batch('dut', [
      'link set x0 up',
      'addr add fd00:a::1/64 dev x0 nodad',
      `neigh replace fd00:a::2 lladdr ${MAC_A} dev x0 nud permanent`,
      `neigh replace fd00:a::3 lladdr ${MAC_B} dev x0 nud permanent`,
      'route add 2001:db8:1::/48 via fd00:a::2 dev x0',
    ]);
    await lab.ip('a', 'link', 'set', 'y0', 'up');
    dp = openDataplane({ config });
    watcher = new NextHopWatcher({
      dataplane: () => dp,
      config: () => config,
      ingress: () => ['lo'],
      netns: dut,
      sliceMs: 1,
      onRead: () => onRead?.(),
      onResolved: (s) => onPass?.(s),
    });
    watcher.start();
  }, 60_000);

  afterAll(async () => {
    watcher?.stop();
    dp?.close();
    await lab?.destroy();
  });

  it('a route change over 32,768 rules re-points them in slices; a timer set when the pass starts fires before it ends', async () => {
    const w = watcher!;
    for (let t0 = performance.now(); w.last?.cached !== M; await new Promise((r) => setTimeout(r, 50))) {
      if (performance.now() - t0 > 30_000) throw new Error(`first resolution: ${JSON.stringify(w.last)}`);
    }
    expect(macOf(send(M - 1).out, 0)).toBe(MAC_A);
    const before = w.totals.rules;
    // Each pass, as it starts its work, sets a timer; the pass that re-points the rules must see its own fire.
    let armed = 0;
    let fired = 0;
    let firedBeforeEnd: boolean | undefined;
    const done = new Promise<PassSummary>((resolve) => {
      onPass = (s) => {
        if (s.rules === 0) return; // another pass (nothing of ours changed)
        firedBeforeEnd = fired === armed;
        onPass = undefined;
        onRead = undefined;
        resolve(s);
      };
    });
    onRead = () => {
      const mine = ++armed;
      setTimeout(() => (fired = mine), 0);
    };
    await lab!.ip('dut', 'route', 'replace', '2001:db8:1::/48', 'via', 'fd00:a::3', 'dev', 'x0');
    const s = await done;
    expect(s).toMatchObject({ full: false, rules: M, written: M });
    expect(s.yields, 'times the pass gave the loop back').toBeGreaterThan(0);
    expect(firedBeforeEnd, 'the timer fired before the pass ended').toBe(true);
    expect(w.totals.rules - before).toBe(M);
    expect([0, M >> 1, M - 1].map((i) => macOf(send(i).out, 0))).toEqual([MAC_B, MAC_B, MAC_B]);
  }, 90_000);
});
