/**
 * mapCount (health's count of the kernel's policy and local SID maps): the
 * same number as a walk of the keys, across its batch boundaries, for the
 * real maps of the compiled object. The walk it replaces made a system call
 * and a Buffer per key (about 1.5 s of the event loop per million keys for
 * `mup status`); the batches make one call per 4,096 elements.
 */
import { existsSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { LAYOUTS } from '../src/dataplane/codec.js';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { mapCount, mapKeys, traceMapReads } from '../src/dataplane/libbpf.js';

const OBJECT = process.env['MUP_BPF_OBJECT'] ?? DEFAULT_OBJECT;
const isRoot = process.getuid?.() === 0;

function config(policies: number, localsids: number): ReturnType<typeof parseConfig> {
  const lines = ['settings: { forwarding: tx, max_policies: 16384, max_localsids: 16384 }', 'policies:'];
  for (let i = 0; i < policies; i++) lines.push(`  - { match: 10.${i >> 8}.${i & 255}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`);
  lines.push('localsids:');
  for (let i = 0; i < localsids; i++) lines.push(`  - { sid: "2001:db8:${i.toString(16)}::/48", src_prefix_len: 64 }`);
  return parseConfig(`${lines.join('\n')}\n`, 'map-count.yaml');
}

describe.skipIf(!isRoot || !existsSync(OBJECT))('mapCount', () => {
  const open: Dataplane[] = [];
  afterEach(() => {
    for (const dp of open.splice(0)) dp.close();
  });

  for (const [policies, localsids] of [[0, 0], [1, 4095], [4096, 4097], [10_000, 3]] as const) {
    it(`${policies} policies, ${localsids} local SIDs: the key walk's count, in one batch read per 4,096`, () => {
      const dp = openDataplane({ object: OBJECT, config: config(policies, localsids) });
      open.push(dp);
      const m = dp.maps;
      const trace = traceMapReads();
      const p = mapCount(m.policies, LAYOUTS.mup_policy_key.size, LAYOUTS.mup_policy.size, 'mup_policies');
      const l = mapCount(m.localsids, LAYOUTS.mup_localsid_key.size, LAYOUTS.mup_localsid.size, 'mup_localsids');
      const reads = trace.reads.length;
      trace.stop();
      expect(p).toBe(mapKeys(m.policies, LAYOUTS.mup_policy_key.size, 'mup_policies').length);
      expect(l).toBe(mapKeys(m.localsids, LAYOUTS.mup_localsid_key.size, 'mup_localsids').length);
      expect(p).toBe(dp.rules.policyCount + dp.rules.addrOnlyCount);
      expect(l).toBe(localsids);
      // A batch read per 4,096 elements or part (a hash map's batches end at bucket bounds: a few more).
      expect(reads).toBeLessThanOrEqual(Math.ceil(p / 4096) + Math.ceil(l / 4096) + 4);
    });
  }
});
