/**
 * The next-hop cache's first state (src/dataplane/nexthop.ts, NextHopCache):
 * every rule points at no next hop. Maps made with their object are zero
 * already, so the first cache on them writes nothing (131,072 rule entries
 * written to zero took about 40 ms of the turn right after the daemon's
 * API started answering); a cache made again on the same maps (the resolver
 * stopped and started) clears the pointers the one before left. Real
 * program (build/mup.bpf.o), its maps read back; nothing attached, no
 * namespace, the program closed in afterAll.
 */
import { existsSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { mapLookup, mapUpdate } from '../src/dataplane/libbpf.js';
import { NextHopCache } from '../src/dataplane/nexthop.js';

const isRoot = process.getuid?.() === 0;

const CONFIG = 'settings:\n  forwarding: fib\n  max_policies: 16\n  max_localsids: 16\npolicies:\n  - match: 10.0.0.0/24\n    sr_prefix: 2001:db8:1::/48\n    src_prefix: 2001:db8:ff::/64\n';

const u32 = (n: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
};

describe.skipIf(!isRoot || !existsSync(DEFAULT_OBJECT))('next-hop cache: the rule entries it starts from', () => {
  const opened: Dataplane[] = [];
  const open = (): Dataplane => {
    const dp = openDataplane({ config: parseConfig(CONFIG, 'nh-start') });
    opened.push(dp);
    return dp;
  };
  const entries = (dp: Dataplane, n: number): number[] =>
    Array.from({ length: n }, (_, r) => mapLookup(dp.nexthop.rulesFd, u32(r), 4, 'mup_nh_rules')!.readUInt32LE(0));

  afterAll(() => {
    for (const dp of opened) dp.close();
  });

  it('writes nothing on maps made with their object, and clears what an earlier cache on the same maps left', () => {
    const dp = open();
    const n = 32;
    const first = new NextHopCache(dp.nexthop, n);
    expect(first.startWrites).toBe(0);
    expect(entries(dp, n)).toEqual(Array<number>(n).fill(0));
    // What a cache leaves behind: rules pointing at slots.
    mapUpdate(dp.nexthop.rulesFd, u32(3), u32(5), 0, 'mup_nh_rules');
    mapUpdate(dp.nexthop.rulesFd, u32(31), u32(7), 0, 'mup_nh_rules');
    const again = new NextHopCache(dp.nexthop, n);
    expect(again.startWrites).toBe(n);
    expect(entries(dp, n)).toEqual(Array<number>(n).fill(0));
    // And every later one on these maps.
    mapUpdate(dp.nexthop.rulesFd, u32(0), u32(9), 0, 'mup_nh_rules');
    expect(new NextHopCache(dp.nexthop, n).startWrites).toBe(n);
    expect(entries(dp, n)[0]).toBe(0);
  });

  it('another program object has maps of its own, zero again', () => {
    const a = open();
    new NextHopCache(a.nexthop, 32);
    mapUpdate(a.nexthop.rulesFd, u32(1), u32(2), 0, 'mup_nh_rules');
    const b = open();
    expect(new NextHopCache(b.nexthop, 32).startWrites).toBe(0);
    expect(entries(b, 32)).toEqual(Array<number>(32).fill(0));
    expect(entries(a, 32)[1]).toBe(2);
  });
});
