/**
 * A table entry the program cannot use (written behind the loader's back,
 * e.g. by a buggy or newer control plane) is dropped and counted as
 * drop_bad_rule, never translated with garbage. The loader never writes
 * such an entry, so this test writes one directly into the map.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { LAYOUTS, encodePolicyKey } from '../src/dataplane/codec.js';
import { mapLookup, mapUpdate } from '../src/dataplane/libbpf.js';
import { gtpuFrame, innerUdp4 } from '../src/packet/frames.js';
import { parseIpv4 } from '../src/sid/addr.js';

const CONFIG = `
settings: { forwarding: tx }
policies:
  - match: 192.0.2.0/24
    sr_prefix: 2001:db8:1::/48
    src_prefix: 2001:db8:ff::/64
`;

let dp: Dataplane | undefined;
afterEach(() => dp?.close());

describe('a policy entry out of range', () => {
  const frame = gtpuFrame({
    src: parseIpv4('198.51.100.1', 't'),
    dst: parseIpv4('192.0.2.10', 't'),
    teid: 0x1000,
    qfi: 9,
    inner: innerUdp4({ src: parseIpv4('10.45.0.2', 't'), dst: parseIpv4('203.0.113.5', 't'), sport: 1, dport: 2, len: 46 }),
  });

  it.each([
    ['5 segments (the program has room for 4)', 5, 'drop', 'drop_bad_rule'],
    ['4 segments, the most it has room for', 4, 'tx', 'fwd_tx'],
  ])('%s', (_name, nsegs, verdict, event) => {
    const config = parseConfig(CONFIG, 'badrule');
    dp = openDataplane({ config });
    const key = encodePolicyKey(config.policies[0]!.match);
    const size = LAYOUTS.mup_policy.size;
    const value = mapLookup(dp.tables.policiesFd, key, size)!;
    expect(dp.run(frame)).toMatchObject({ verdict: 'tx', event: 'fwd_tx' });

    value[LAYOUTS.mup_policy.members.nsegs.offset] = nsegs;
    mapUpdate(dp.tables.policiesFd, key, value);
    dp.rules.refreshCopies(); // written behind the tables' back: the CPUs' copies of the old entry go
    const r = dp.run(frame);
    expect(r.verdict).toBe(verdict);
    expect(r.event).toBe(event);
    expect(dp.counters().events[event]!.packets).toBeGreaterThanOrEqual(1n);
  });
});
