/**
 * Incremental next-hop resolution (issue 19, item 1): N rules over K routes
 * in a real namespace, the real program run through BPF_PROG_TEST_RUN there.
 * Changing one route (or its gateway's neighbour entry) must re-resolve the
 * rules under that route only, counted by the watcher (the daemon exports
 * the same count as mup_nexthop_rules_resolved_total), and the data plane
 * must then send those rules' packets to the new next hop and the others'
 * to the old one. An API change resolves its own rule only.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { DEFAULT_OBJECT, inNetns, openDataplane, type Dataplane, type RunResult } from '../src/dataplane/index.js';
import { IpBatch, NextHopWatcher, parseMonitorLine, readKernelState } from '../src/dataplane/nexthop.js';
import { gtpuFrame, innerUdp4 } from '../src/packet/frames.js';
import { parseIpv4 } from '../src/sid/addr.js';
import { Lab, sweepStaleNamespaces } from './helpers/netns.js';
import { isDeepStrictEqual } from 'node:util';

const isRoot = process.getuid?.() === 0;

/** K routes, N / K policies under each (their SR prefixes inside the route's /48). */
const K = 4;
const PER = 16;
const N = K * PER;
const policy = (k: number, j: number): string =>
  `  - match: 10.${k}.${j}.0/24\n    sr_prefix: 2001:db8:${k + 1}:${j.toString(16)}00::/56\n    src_prefix: 2001:db8:ff::/64\n`;
const CONFIG = `settings:\n  forwarding: fib\n  max_policies: ${N + 8}\n  max_localsids: 8\npolicies:\n${Array.from({ length: N }, (_, i) => policy(Math.floor(i / PER), i % PER)).join('')}`;

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
    await lab.sysctl('dut', ['net.ipv6.conf.all.forwarding=1', 'net.ipv6.conf.all.accept_dad=0', 'net.ipv6.conf.default.accept_dad=0']);
    await lab.batch('dut', [
      'link set x0 up',
      'link set x1 up',
      'addr add fd00:a::1/64 dev x0 nodad',
      'addr add fd00:b::1/64 dev x1 nodad',
      `neigh replace fd00:a::2 lladdr ${MAC_A} dev x0 nud permanent`,
      `neigh replace fd00:b::2 lladdr ${MAC_B} dev x1 nud permanent`,
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
    await until('first resolution', () => w.last?.cached === N);
    expect(where()).toEqual(Array(K).fill(`${MAC_A} ${MAC_A}`));
    const full = w.totals.fullPasses;
    let before = w.totals.rules;

    // One route moves to the other gateway: its 16 rules follow, no other rule is looked at.
    await lab!.ip('dut', 'route', 'replace', '2001:db8:3::/48', 'via', 'fd00:b::2', 'dev', 'x1');
    await until('route change reaches the data plane', () => where()[2] === `${MAC_B} ${MAC_B}`);
    await until('counted', () => w.totals.rules - before >= PER);
    expect(w.totals.rules - before, 'rules re-resolved for one route change').toBe(PER);
    expect(w.totals.fullPasses, 'no full pass').toBe(full);
    expect(w.last).toMatchObject({ full: false, rules: PER, cached: N });
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
    expect(parseMonitorLine('[ROUTE]local 10.0.0.1 dev x0 table local proto kernel scope host src 10.0.0.1 ')).toEqual({ kind: 'route', family: 4, prefix: { addr: 0x0a000001n, len: 32 } });
    expect(parseMonitorLine('[ROUTE]default via fd00::2 dev x0 metric 1024 pref medium')).toEqual({ kind: 'route', family: 6, prefix: { addr: 0n, len: 0 } });
    expect(parseMonitorLine('[ROUTE]Deleted default dev x0')).toEqual({ kind: 'route', family: undefined, prefix: undefined });
    expect(parseMonitorLine('[NEIGH]fd00::2 dev x0 lladdr 02:00:00:00:00:01 PERMANENT ')).toMatchObject({ kind: 'neigh', family: 6, key: 'x0 6 fd000000000000000000000000000002' });
    expect(parseMonitorLine('[LINK]3: x0@y0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500')).toEqual({ kind: 'other', parts: ['links'] });
    expect(parseMonitorLine('    link/ether 8e:89:97:70:95:c0 brd ff:ff:ff:ff:ff:ff')).toBeUndefined();
    expect(parseMonitorLine('[NETCONF]inet x0 forwarding on')).toEqual({ kind: 'other', parts: ['netconf'] });
    expect(parseMonitorLine('something else')).toMatchObject({ kind: 'other' });
  });
});
