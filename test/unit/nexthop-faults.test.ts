/**
 * The next-hop watcher's bookkeeping when things go wrong, with the kernel
 * faked: the BPF maps are in-process Maps (libbpf.js), `ip -json -batch -`
 * answers from a table held here and `ip monitor` is a stream the test
 * writes (spawn-early.js), interfaces come from the same table (netns.js).
 *
 * - An End.M.GTP4.E rule whose hint moves it into an entry another rule's
 *   hint made (resolved, current) must be written: it kept its old slot.
 * - `ip monitor` saying the kernel dropped events (ENOBUFS) must make a
 *   full pass: the dropped change was never applied.
 * - A pass that fails (a reader killed, a map write refused) must be tried
 *   again without a new change; a write that fails part way must not count
 *   the rules it did not write as written.
 */
import { EventEmitter } from 'node:events';
import { PassThrough, Writable } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Config } from '../../src/config/types.js';
import { LAYOUTS } from '../../src/dataplane/codec.js';
import type { Dataplane, NextHopFds } from '../../src/dataplane/dataplane.js';
import { NextHopCache, NextHopWatcher, type IpLink, type IpNeigh, type IpRoute, type PassSummary, type Resolution } from '../../src/dataplane/nexthop.js';

interface FakeKernel {
  links: IpLink[];
  routes4: IpRoute[];
  routes6: IpRoute[];
  neigh: IpNeigh[];
}

const fake = vi.hoisted(() => {
  class BatchWriteError extends Error {
    constructor(
      msg: string,
      readonly errno: number,
      readonly log: readonly string[],
      readonly written: number,
    ) {
      super(msg);
    }
  }
  return {
    BatchWriteError,
    /** fd -> key -> value */
    maps: new Map<number, Map<number, Buffer>>(),
    /** mup_nh_hints by rule id. */
    hints: new Uint32Array(0),
    /** The next batch writes of mup_nh_rules fail after `written` elements (`times` of them). */
    failBatch: undefined as { written: number; times: number } | undefined,
    kernel: undefined as unknown,
    /** The `ip -batch` reader whose next command containing this dies instead of answering. */
    dieOn: undefined as string | undefined,
    /** ms before a reader answers. */
    readDelayMs: 0,
    monitor: undefined as { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream } | undefined,
  };
});

const RULES_FD = 1;
const FDS = { rulesFd: RULES_FD, slotsFd: 2, leaseFd: 3, hintsFd: 4 } as unknown as NextHopFds;

vi.mock('../../src/dataplane/libbpf.js', () => {
  const map = (fd: number): Map<number, Buffer> => {
    let m = fake.maps.get(fd);
    if (m === undefined) fake.maps.set(fd, (m = new Map()));
    return m;
  };
  return {
    BPF_ANY: 0,
    BatchWriteError: fake.BatchWriteError,
    mapUpdate: (fd: number, key: Buffer, value: Buffer): void => void map(fd).set(key.readUInt32LE(0), Buffer.from(value)),
    mapLookup: (fd: number, key: Buffer): Buffer | undefined => map(fd).get(key.readUInt32LE(0)),
    mapUpdateBatch: (fd: number, keys: Buffer, values: Buffer, n: number): void => {
      const f = fd === RULES_FD ? fake.failBatch : undefined;
      const upTo = f === undefined ? n : Math.min(f.written, n);
      const size = values.length / n;
      for (let i = 0; i < upTo; i++) map(fd).set(keys.readUInt32LE(4 * i), Buffer.from(values.subarray(i * size, (i + 1) * size)));
      if (f === undefined) return;
      if (--f.times === 0) fake.failBatch = undefined;
      throw new fake.BatchWriteError(`writing ${n} elements (${upTo} written)`, 12, [], upTo);
    },
    mapLookupArrayRange: (_fd: number, start: number, count: number, size: number): Buffer => {
      const out = Buffer.alloc(count * size);
      for (let i = 0; i < count; i++) out.writeUInt32LE(fake.hints[start + i] ?? 0, 4 * i);
      return out;
    },
    synchronizeRcu: (): void => undefined,
  };
});

vi.mock('../../src/dataplane/netns.js', () => ({
  ifIndex: (name: string): number => {
    const l = (fake.kernel as FakeKernel).links.find((x) => x.ifname === name);
    if (l === undefined) throw new Error(`no interface ${name}`);
    return l.ifindex;
  },
}));

vi.mock('../../src/host/spawn-early.js', () => {
  const rulesOf = (fam: string): unknown =>
    fam === '4'
      ? [{ priority: 0, src: 'all', table: 'local' }, { priority: 32766, src: 'all', table: 'main' }, { priority: 32767, src: 'all', table: 'default' }]
      : [{ priority: 0, src: 'all', table: 'local' }, { priority: 32766, src: 'all', table: 'main' }];
  const answer = (fam: string, line: string): unknown => {
    const k = fake.kernel as FakeKernel;
    if (line.startsWith('route')) return fam === '4' ? k.routes4 : k.routes6;
    if (line.startsWith('rule')) return rulesOf(fam);
    if (line.startsWith('neigh')) return k.neigh;
    if (line.startsWith('link')) return k.links;
    if (line.startsWith('netconf')) return k.links.map((l) => ({ interface: l.ifname, forwarding: true }));
    return [];
  };
  return {
    spawnEarly: (): undefined => undefined,
    spawnChild: (_cmd: string, args: readonly string[]): unknown => {
      const c = Object.assign(new EventEmitter(), {
        stdout: new PassThrough(),
        stderr: new PassThrough(),
        stdin: undefined as Writable | undefined,
        dead: false,
        kill(): boolean {
          if (!c.dead) {
            c.dead = true;
            setImmediate(() => c.emit('exit', null, 'SIGKILL'));
          }
          return true;
        },
      });
      if (args.includes('monitor')) {
        fake.monitor = c;
        return c;
      }
      const fam = args.includes('-4') ? '4' : args.includes('-6') ? '6' : 'any';
      c.stdin = new Writable({
        write(chunk: Buffer, _enc, cb): void {
          for (const line of chunk.toString().split('\n').filter((x) => x !== '')) {
            setTimeout(() => {
              if (c.dead) return;
              if (fake.dieOn !== undefined && line.includes(fake.dieOn)) {
                fake.dieOn = undefined;
                c.kill();
                return;
              }
              c.stdout.write(`${JSON.stringify(answer(fam, line))}\n`);
            }, fake.readDelayMs);
          }
          cb();
        },
      });
      return c;
    },
  };
});

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
async function until(what: string, cond: () => boolean, ms = 2000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for: ${what}`);
    await sleep(5);
  }
}

const link = (ifindex: number, ifname: string, address: string): IpLink => ({ ifindex, ifname, flags: ['BROADCAST', 'UP', 'LOWER_UP'], mtu: 1500, address });
const v6 = (s: string): bigint => {
  const [h, t] = s.split('::') as [string, string | undefined];
  const hs = h === '' ? [] : h.split(':');
  const ts = t === undefined || t === '' ? [] : t.split(':');
  return [...hs, ...Array<string>(8 - hs.length - ts.length).fill('0'), ...ts].reduce((a, x) => (a << 16n) | BigInt(parseInt(x, 16)), 0n);
};
const ip4 = (s: string): number => s.split('.').reduce((x, y) => x * 256 + Number(y), 0);

/** Where rule `r` points in the fake maps: 'FIB', or its slot's next-hop MAC and prefix. */
function where(r: number): string {
  const slot = fake.maps.get(RULES_FD)?.get(r)?.readUInt32LE(0) ?? 0;
  if (slot === 0) return 'FIB';
  const b = fake.maps.get(2)!.get(slot)!;
  const M = LAYOUTS.mup_nexthop.members;
  const mac = [...b.subarray(M.dmac.offset, M.dmac.offset + 6)].map((x) => x.toString(16).padStart(2, '0')).join(':');
  return `${mac} /${b.readUInt8(M.plen.offset)}`;
}

type Policy = Config['policies'][number];
type LocalSid = Config['localsids'][number];

/** A watcher over the fake kernel, its rules numbered in order (policies from 0, local SIDs from maxPolicies). */
function setup(kernel: FakeKernel, policies: Policy[], localsids: LocalSid[]): {
  w: NextHopWatcher;
  rule: (x: Policy | LocalSid) => number;
  passes: PassSummary[];
  errors: string[];
} {
  const maxPolicies = 8;
  const maxLocalSids = 8;
  fake.kernel = kernel;
  fake.maps.clear();
  fake.hints = new Uint32Array(maxPolicies + maxLocalSids);
  fake.failBatch = undefined;
  fake.dieOn = undefined;
  fake.readDelayMs = 0;
  const ids = new Map<unknown, number>();
  policies.forEach((p, i) => ids.set(p.match, i));
  localsids.forEach((l, i) => ids.set(l.sid, maxPolicies + i));
  const dp = {
    config: { settings: { maxPolicies, maxLocalSids } },
    nexthop: FDS,
    rules: { policyRule: (m: unknown) => ids.get(m), policyRuleOf: (p: { match: unknown }) => ids.get(p.match), localsidRule: (sid: unknown) => ids.get(sid), localsidRenumbered: () => undefined },
  } as unknown as Dataplane;
  const passes: PassSummary[] = [];
  const errors: string[] = [];
  const w = new NextHopWatcher({
    dataplane: () => dp,
    config: () => ({ policies, localsids }),
    ingress: () => ['in0'],
    debounceMs: 10,
    periodMs: 50,
    onResolved: (s) => passes.push(s),
    onError: (e) => errors.push(e.message),
  });
  watchers.push(w);
  return { w, rule: (x) => ids.get('match' in x ? x.match : x.sid)!, passes, errors };
}
const watchers: NextHopWatcher[] = [];
afterEach(() => {
  for (const w of watchers.splice(0)) w.stop();
});

const monitor = (line: string): void => void fake.monitor!.stdout.write(`${line}\n`);

const MAC_A = 'aa:aa:aa:aa:aa:0a';
const MAC_B = 'bb:bb:bb:bb:bb:0b';

/** Two IPv6 routes via fd00::a (MAC_A) on eth1; fd00::b (MAC_B) is there too. */
function kernel6(): FakeKernel {
  return {
    links: [link(1, 'in0', '02:00:00:00:00:01'), link(2, 'eth1', '02:00:00:00:01:01')],
    routes4: [],
    routes6: [
      { dst: '2001:db8:1::/48', gateway: 'fd00::a', dev: 'eth1' },
      { dst: '2001:db8:2::/48', gateway: 'fd00::a', dev: 'eth1' },
      { dst: 'fd00::/64', dev: 'eth1' },
    ],
    neigh: [
      { dst: 'fd00::a', dev: 'eth1', lladdr: MAC_A, state: ['REACHABLE'] },
      { dst: 'fd00::b', dev: 'eth1', lladdr: MAC_B, state: ['REACHABLE'] },
    ],
  };
}
const P1 = { match: { addr: 0x0a010000n, len: 24 }, segments: [], srPrefix: { addr: v6('2001:db8:1::'), len: 56 } } as unknown as Policy;
const P2 = { match: { addr: 0x0a020000n, len: 24 }, segments: [], srPrefix: { addr: v6('2001:db8:2::'), len: 56 } } as unknown as Policy;
/** The kernel's route for `dst` now goes via fd00::b (MAC_B). */
const moveRoute = (k: FakeKernel, dst: string): void => {
  k.routes6 = k.routes6.map((r) => (r.dst === dst ? { ...r, gateway: 'fd00::b' } : r));
};

describe('End.M.GTP4.E hints', () => {
  it('a rule whose hint moves it into an entry that exists (another rule hinted the same gNB) is re-pointed there, and follows it', async () => {
    const k: FakeKernel = {
      links: [link(1, 'in0', '02:00:00:00:00:01'), link(2, 'eth1', '02:00:00:00:01:01'), link(3, 'eth2', '02:00:00:00:02:01')],
      routes4: [
        { dst: '10.1.0.0/16', gateway: '192.0.2.1', dev: 'eth1' },
        { dst: '10.2.0.0/16', gateway: '198.51.100.1', dev: 'eth2' },
        { dst: '192.0.2.0/24', dev: 'eth1' },
        { dst: '198.51.100.0/24', dev: 'eth2' },
        { type: 'local', dst: '192.0.2.2', dev: 'eth1', table: 'local' },
      ],
      routes6: [],
      neigh: [
        { dst: '192.0.2.1', dev: 'eth1', lladdr: 'aa:aa:aa:aa:aa:01', state: ['REACHABLE'] },
        { dst: '192.0.2.9', dev: 'eth1', lladdr: 'cc:cc:cc:cc:cc:09', state: ['REACHABLE'] },
        { dst: '198.51.100.1', dev: 'eth2', lladdr: 'bb:bb:bb:bb:bb:01', state: ['REACHABLE'] },
      ],
    };
    const A = { sid: { addr: v6('2001:db8:f0::'), len: 48 } } as unknown as LocalSid;
    const B = { sid: { addr: v6('2001:db8:f1::'), len: 48 } } as unknown as LocalSid;
    const { w, rule, passes } = setup(k, [], [A, B]);
    const a = rule(A);
    const b = rule(B);
    w.start();
    await until('the first pass', () => passes.length >= 1);
    // Before any traffic both serve the widest gateway route, 10.1.0.0/16.
    expect([where(a), where(b)]).toEqual(['aa:aa:aa:aa:aa:01 /16', 'aa:aa:aa:aa:aa:01 /16']);

    // A's packet to gNB 10.2.0.5 missed the cache: A moves to a new entry, 10.2.0.0/16.
    fake.hints[a] = ip4('10.2.0.5');
    await until('A on 10.2.0.0/16', () => where(a) === 'bb:bb:bb:bb:bb:01 /16');
    expect(where(b)).toBe('aa:aa:aa:aa:aa:01 /16');

    // Later B's packet to the same gNB missed: B joins A's entry, which exists and is current.
    const before = passes.length;
    fake.hints[b] = ip4('10.2.0.5');
    await until('a pass after B\'s hint', () => passes.length > before);
    await sleep(30);
    expect(where(b), 'B is written into the entry it joined').toBe('bb:bb:bb:bb:bb:01 /16');
    expect(passes.at(-1)!.cached).toBe(2);

    // The route B used to be on changes: nothing of B's may still depend on it.
    k.routes4 = k.routes4.map((r) => (r.dst === '10.1.0.0/16' ? { ...r, gateway: '192.0.2.9' } : r));
    const n = passes.length;
    monitor('[ROUTE]10.1.0.0/16 via 192.0.2.9 dev eth1');
    await until('the route event\'s pass', () => passes.length > n);
    expect([where(a), where(b)]).toEqual(['bb:bb:bb:bb:bb:01 /16', 'bb:bb:bb:bb:bb:01 /16']);
  });
});

describe('events lost by ip monitor', () => {
  it('a "No buffer space available" line makes a full pass, which applies the change whose event was dropped', async () => {
    const k = kernel6();
    const { w, rule, passes, errors } = setup(k, [P1, P2], []);
    w.start();
    await until('the first pass', () => passes.length >= 1);
    expect(where(rule(P1))).toBe(`${MAC_A} /56`);
    // P1's route moves; its notification is among those the kernel dropped.
    moveRoute(k, '2001:db8:1::/48');
    const n = passes.length;
    fake.monitor!.stderr.write('netlink receive error No buffer space available (105)\n');
    await until('a pass after the lost events', () => passes.length > n);
    expect(passes.at(-1)!.full).toBe(true);
    expect(where(rule(P1))).toBe(`${MAC_B} /56`);
    expect(w.totals.lostEventResyncs).toBe(1);
    expect(errors.some((e) => e.includes('No buffer space available') && e.includes('resolved again'))).toBe(true);
  });

  it('the line may come in two pieces; other stderr lines are only logged', async () => {
    const k = kernel6();
    const { w, rule, passes, errors } = setup(k, [P1, P2], []);
    w.start();
    await until('the first pass', () => passes.length >= 1);
    const n = passes.length;
    fake.monitor!.stderr.write('Warning: something harmless\n');
    await sleep(100);
    expect(passes.length).toBe(n);
    expect(errors).toEqual(['ip monitor: Warning: something harmless']);
    moveRoute(k, '2001:db8:2::/48');
    fake.monitor!.stderr.write('netlink receive error No buf');
    fake.monitor!.stderr.write('fer space available (105)\n');
    await until('a pass after the lost events', () => passes.length > n);
    expect(where(rule(P2))).toBe(`${MAC_B} /56`);
    expect(w.totals.lostEventResyncs).toBe(1);
  });
});

describe('a pass that fails', () => {
  it('is tried again when its read fails (an ip -batch reader killed), without a new change', async () => {
    const k = kernel6();
    const { w, rule, passes, errors } = setup(k, [P1, P2], []);
    w.start();
    await until('the first pass', () => passes.length >= 1);
    moveRoute(k, '2001:db8:2::/48');
    fake.dieOn = 'route';
    monitor('[ROUTE]2001:db8:2::/48 via fd00::b dev eth1 proto static metric 1024 pref medium');
    await until('P2 on its new next hop', () => where(rule(P2)) === `${MAC_B} /56`);
    expect(errors.some((e) => e.includes('exited (SIGKILL)'))).toBe(true);
    expect(w.totals.failedPasses).toBe(1);
    expect(where(rule(P1))).toBe(`${MAC_A} /56`);
  });

  it('a change that arrived during the failed pass is applied by the retry', async () => {
    const k = kernel6();
    const { w, rule, passes } = setup(k, [P1, P2], []);
    w.start();
    await until('the first pass', () => passes.length >= 1);
    fake.readDelayMs = 40;
    moveRoute(k, '2001:db8:1::/48');
    fake.dieOn = 'route';
    monitor('[ROUTE]2001:db8:1::/48 via fd00::b dev eth1');
    // While that pass waits for its read (40 ms), P2's route moves too (its pass is asked for: #again).
    await sleep(20);
    moveRoute(k, '2001:db8:2::/48');
    monitor('[ROUTE]2001:db8:2::/48 via fd00::b dev eth1');
    await until('both on their new next hop', () => where(rule(P1)) === `${MAC_B} /56` && where(rule(P2)) === `${MAC_B} /56`);
    expect(w.totals.failedPasses).toBe(1);
  });

  it('is tried again when its map write fails, and the retry writes the rules the failed write left', async () => {
    const k = kernel6();
    const { w, rule, passes, errors } = setup(k, [P1, P2], []);
    w.start();
    await until('the first pass', () => passes.length >= 1);
    moveRoute(k, '2001:db8:1::/48');
    moveRoute(k, '2001:db8:2::/48');
    fake.failBatch = { written: 0, times: 1 };
    monitor('[ROUTE]2001:db8:1::/48 via fd00::b dev eth1');
    monitor('[ROUTE]2001:db8:2::/48 via fd00::b dev eth1');
    await until('both on their new next hop', () => where(rule(P1)) === `${MAC_B} /56` && where(rule(P2)) === `${MAC_B} /56`);
    expect(errors.some((e) => e.includes('written'))).toBe(true);
    expect(w.totals.failedPasses).toBe(1);
  });
});

describe('NextHopCache, a batch write that fails part way', () => {
  const res = (mac: number): Resolution => ({
    ok: true,
    route: '2001:db8::/32',
    nh: { ifindex: 2, ifname: 'eth1', gateway: 'fd00::a', mtu: 1500, dmac: Buffer.alloc(6, mac), smac: Buffer.alloc(6, 2) },
  });
  it('counts as written only what the kernel took: the rest is written by the next write that wants it', () => {
    fake.maps.clear();
    fake.failBatch = undefined;
    const cache = new NextHopCache(FDS, 4);
    const slot = cache.slotFor({ family: 6, addr: v6('2001:db8::'), len: 32 }, res(0xaa));
    fake.failBatch = { written: 1, times: 1 };
    expect(() => cache.pointMany([0, 1, 2], () => slot)).toThrow(/1 written/);
    const inMap = (r: number): number => fake.maps.get(RULES_FD)!.get(r)!.readUInt32LE(0);
    expect([0, 1, 2].map(inMap)).toEqual([slot, 0, 0]);
    expect([0, 1, 2].map((r) => cache.pointed(r))).toEqual([slot, 0, 0]);
    // The slot stays: rule 0 points to it in the map.
    expect(cache.slotFor({ family: 6, addr: v6('2001:db8::'), len: 32 }, res(0xaa))).toBe(slot);
    expect(cache.pointMany([0, 1, 2], () => slot)).toBe(2);
    expect([0, 1, 2].map(inMap)).toEqual([slot, slot, slot]);
  });

  it('a write refused whole counts nothing, and a new slot nothing points to is not kept', () => {
    fake.maps.clear();
    fake.failBatch = undefined;
    const cache = new NextHopCache(FDS, 4);
    const range = { family: 6 as const, addr: v6('2001:db8::'), len: 32 };
    const slot = cache.slotFor(range, res(0xaa));
    fake.failBatch = { written: 0, times: 1 };
    expect(() => cache.pointMany([0], () => slot)).toThrow();
    expect(cache.pointed(0)).toBe(0);
    expect(cache.pointMany([0], () => cache.slotFor(range, res(0xaa)))).toBe(1);
    expect(fake.maps.get(RULES_FD)!.get(0)!.readUInt32LE(0)).not.toBe(0);
  });
});
