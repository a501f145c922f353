/**
 * Issue 19 items 2 and 4, issue 15's batch target: the control path at
 * scale, checked by counting work done, never by timing.
 *
 * - A single rule change that arrives while the next-hop watcher is in the
 *   middle of a resolution (reading the kernel's tables: every periodic
 *   check does that) is pointed at its next hop against the last resolution
 *   and starts no full resolution of every rule. It used to start one, and a
 *   client sending changes one after the other kept the watcher resolving
 *   all rules again and again (the single requests after a 10,000-operation
 *   batch in `npm run bench:daemon` did not finish in 12 minutes).
 *
 * Real program (build/mup.bpf.o) loaded with its maps, real `ip` reads of a
 * namespace this test makes.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import type { Policy } from '../src/config/types.js';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { NextHopWatcher } from '../src/dataplane/nexthop.js';
import { parsePolicyEntry } from '../src/config/load.js';
import { Lab, sweepStaleNamespaces } from './helpers/netns.js';

const isRoot = process.getuid?.() === 0;

const BATCH = 10_000;
const CONFIG = `
settings: { forwarding: fib, max_policies: 16384, max_localsids: 16 }
policies:
  - { match: 192.0.2.0/24, sr_prefix: "2001:db8:100::/48", src_prefix: "2001:db8:ff::/64" }
`;

const policyAt = (i: number): Policy =>
  parsePolicyEntry({ match: `10.${100 + (i >> 8)}.${i & 255}.0/24`, sr_prefix: '2001:db8:b::/48', src_prefix: '2001:db8:ff::/64' }, `policies[${i}]`);

describe.skipIf(!isRoot || !existsSync(DEFAULT_OBJECT))('next hops: a change during a resolution resolves that rule only', () => {
  let lab: Lab | undefined;
  let dp: Dataplane | undefined;
  let watcher: NextHopWatcher | undefined;
  const base = parseConfig(CONFIG, 'load-scale');
  let policies: Policy[] = [...(base.policies ?? [])];

  beforeAll(async () => {
    await sweepStaleNamespaces();
    lab = await Lab.create(['dut']);
    await lab.sysctl('dut', ['net.ipv6.conf.all.forwarding=1', 'net.ipv6.conf.all.accept_dad=0']);
    await lab.batch('dut', [
      'link add x0 type veth peer name y0', 'link set x0 up', 'link set y0 up', 'addr add fd00:a::1/64 dev x0 nodad', 'neigh replace fd00:a::2 lladdr 02:00:00:00:0a:02 dev x0 nud permanent',
      'route add 2001:db8:b::/48 via fd00:a::2 dev x0',
    ]);
    dp = openDataplane({ config: base });
    watcher = new NextHopWatcher({
      dataplane: () => dp,
      config: () => ({ ...base, policies }),
      ingress: () => ['lo'],
      netns: lab.ns('dut'),
      watch: false,
    });
    watcher.start();
  }, 60_000);

  afterAll(async () => {
    watcher?.stop();
    dp?.close();
    await lab?.destroy();
  });

  /** What the daemon does for an API change (Daemon#tables): the tables, then the watcher. */
  const put = (list: Policy[]): void => {
    dp!.rules.apply({ putPolicies: list });
    policies = [...policies, ...list];
    watcher!.rulesPut({ putPolicies: list });
  };

  it(`after a batch of ${BATCH}, a single change during a resolution starts no full resolution`, async () => {
    const w = watcher!;
    await w.resolveNow();
    const first = w.last;
    expect(first, 'a first full resolution').toBeDefined();
    // The batch (as POST /v1/batch: one table write, one rulesPut).
    put(Array.from({ length: BATCH }, (_, i) => policyAt(i)));
    expect(dp!.rules.policyCount).toBe(BATCH + 1);
    // A check of the kernel's tables starts (as every periodic check does)...
    const running = w.resolveNow();
    // ...and a single change arrives while it reads them.
    put([policyAt(BATCH)]);
    await running;
    // Anything it scheduled (a debounced re-run) has had its chance.
    await new Promise((r) => setTimeout(r, 300));
    await w.resolveNow();
    // `last` is replaced by every full resolution, and only by one: none ran
    // (the kernel's tables did not change; every rule was pointed when put).
    expect(w.last, 'full resolutions after the batch and the single change').toBe(first);
  }, 120_000);
});
