/**
 * End.M.GTP4.E resolutions and the IPv4 route events that can change them
 * (src/dataplane/nexthop.ts V4Deps, docs/daemon.md "Next hops"): the watcher
 * skips an End.M.GTP4.E entry for a route event when v4RouteMayChange says
 * the event cannot change its answer. Sound means: whenever it says so, the
 * resolution against the tables after the change (that route added or
 * deleted) is the same as before. Checked over random IPv4 tables (gateway,
 * connected, local, blackhole and duplicate routes, usable and failed
 * gateways), for "all of IPv4" and for ranges near a hint.
 */
import { describe, expect, it } from 'vitest';
import { ANY_IPV4, nearRange, resolveOne, resolveWithDeps, v4RouteMayChange, type IpRoute, type KernelState, type Range } from '../../src/dataplane/nexthop.js';
import { xorshift32 } from '../helpers/rng.js';

/** xorshift32: the same tables on every run. */
/** Fractions in [0, 1) from a seeded xorshift32. */
function rng(seed: number): () => number {
  const next = xorshift32(seed);
  return () => next() / 2 ** 32;
}

const BASES = [0x0a000000, 0xac100000, 0xc0000200, 0xc6120000];
const LENS = [0, 8, 12, 16, 20, 24, 24, 28, 32];
const ip = (a: number): string => [24, 16, 8, 0].map((s) => (a >>> s) & 255).join('.');

function state(routes: IpRoute[]): KernelState {
  return {
    routes: { 4: routes, 6: [] },
    defaultRules: { 4: true, 6: true },
    neighbours: [
      { dst: '10.255.0.1', dev: 'e0', lladdr: '02:00:00:00:00:01', state: ['REACHABLE'] },
      { dst: '10.255.0.2', dev: 'e0', lladdr: '02:00:00:00:00:02', state: ['STALE'] },
      { dst: '10.255.0.3', dev: 'e0', state: ['FAILED'] },
    ],
    links: [{ ifindex: 7, ifname: 'e0', flags: ['BROADCAST', 'UP', 'LOWER_UP'], mtu: 1500, address: '02:00:00:00:00:aa' }],
    forwarding: { 4: new Set(['in0']), 6: new Set(['in0']) },
  };
}

function randomPrefix(r: () => number): { addr: number; len: number } {
  const len = LENS[Math.floor(r() * LENS.length)]!;
  const raw = (BASES[Math.floor(r() * BASES.length)]! | Math.floor(r() * 0x10000) | (r() < 0.3 ? Math.floor(r() * 0x100000) : 0)) >>> 0;
  const addr = len === 0 ? 0 : (raw & (~0 << (32 - len))) >>> 0;
  return { addr, len };
}

function randomRoute(r: () => number): IpRoute {
  const p = randomPrefix(r);
  const dst = p.len === 0 ? 'default' : `${ip(p.addr)}/${p.len}`;
  const k = r();
  if (k < 0.6) return { dst, gateway: `10.255.0.${1 + Math.floor(r() * 3)}`, dev: 'e0', flags: [] };
  if (k < 0.75) return { dst, dev: 'e0', flags: [] };
  if (k < 0.85) return { type: 'local', dst: ip(p.addr), dev: 'e0', table: 'local', flags: [] };
  if (k < 0.92) return { type: 'blackhole', dst, flags: [] };
  return { dst, gateway: '10.255.0.1', dev: 'e0', flags: [], metrics: [{ mtu: 1400 }] };
}

const json = (x: unknown): string => JSON.stringify(x, (_, v: unknown) => (typeof v === 'bigint' ? v.toString(16) : v));
const prefixOf = (rt: IpRoute): { addr: bigint; len: number } => {
  if (rt.dst === 'default') return { addr: 0n, len: 0 };
  const [a, l] = rt.dst.split('/') as [string, string | undefined];
  const addr = a.split('.').reduce((x, o) => (x << 8n) | BigInt(Number(o)), 0n);
  return { addr, len: l === undefined ? 32 : Number(l) };
};

describe('End.M.GTP4.E: an IPv4 route event the watcher skips cannot change the answer', () => {
  it('holds over 4000 random tables and changes (all of IPv4, and near a hint)', () => {
    const r = rng(19);
    let skipped = 0;
    let changedAnswers = 0;
    for (let i = 0; i < 4000; i++) {
      const routes: IpRoute[] = [{ dst: '10.255.0.0/24', dev: 'e0', flags: [] }];
      const n = 1 + Math.floor(r() * 12);
      for (let j = 0; j < n; j++) routes.push(randomRoute(r));
      const before = state(routes);
      // One route added, or one deleted (a duplicate of an existing prefix now and then).
      let after: KernelState;
      let changed: IpRoute;
      if (r() < 0.5 && routes.length > 1) {
        const at = 1 + Math.floor(r() * (routes.length - 1));
        changed = routes[at]!;
        after = state(routes.filter((_, j) => j !== at));
      } else {
        changed = r() < 0.1 ? { ...routes[Math.floor(r() * routes.length)]!, metrics: [{ mtu: 1300 }] } : randomRoute(r);
        after = state([...routes, changed]);
      }
      const hint = randomPrefix(r);
      const ranges: Range[] = [ANY_IPV4, nearRange((hint.addr | Math.floor(r() * 256)) >>> 0)];
      for (const range of ranges) {
        const was = resolveWithDeps(before, range, ['in0']);
        if (v4RouteMayChange(was.deps, prefixOf(changed))) continue;
        skipped++;
        const now = resolveOne(after, range, ['in0']);
        if (json(now) !== json(was.res)) changedAnswers++;
        expect(now, `${json(range)}: ${json(routes)} then ${json(changed)}`).toEqual(was.res);
      }
    }
    expect(changedAnswers).toBe(0);
    // Not a vacuous check: a good share of the events is skipped.
    expect(skipped).toBeGreaterThan(1000);
  });

  it('a resolution that read everything (no gateway route passes) depends on every IPv4 event', () => {
    const k = state([{ dst: '10.255.0.0/24', dev: 'e0', flags: [] }]);
    const was = resolveWithDeps(k, ANY_IPV4, ['in0']);
    expect(was.deps).toBeUndefined();
    expect(v4RouteMayChange(was.deps, { addr: 0xc6120000n, len: 24 })).toBe(true);
  });
});
