/**
 * Policies put into an overlay and recorded as the daemon records them, and
 * what a state file must replay to: shared by the state file's compaction
 * and sliced-rewrite tests.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Policy } from '../../src/config/types.js';
import { RULE_KINDS, type Overlay, type StateStore } from '../../src/daemon/rules.js';

/** Policy i's JSON (its SID prefix 2001:db8:<sid>::/48). */
export const policyJson = (i: number, sid = 1): Record<string, unknown> => ({
  name: `p${i}`,
  match: `10.${(i >> 8) & 255}.${i & 255}.0/24`,
  sr_prefix: `2001:db8:${sid}::/48`,
  src_prefix: '2001:db8:ff::/64',
});

/** Put policy i into the overlay and record it (group commit) for config `sha`, as the daemon does. */
export function putPolicy(s: StateStore, o: Overlay, i: number, sha: string, sid = 1): Promise<void> {
  const k = RULE_KINDS.policy;
  const r = k.parse(policyJson(i, sid), 'test') as Policy;
  const key = k.key(r);
  o.policies.set(key, r);
  o.delPolicies.delete(key);
  return s.commitGrouped({ put: 'policy', rule: k.json(r), base: null }, () => undefined, 't', 'c.yaml', sha, o);
}

/** The overlay as its net changes: what the file must replay to. */
export function net(o: Overlay): { puts: [string, unknown][]; dels: string[] } {
  const k = RULE_KINDS.policy;
  return { puts: [...o.policies].map(([key, r]) => [key, k.json(r)] as [string, unknown]).sort(), dels: [...o.delPolicies].sort() };
}

/** The file's change lines as they are on disk (the header left out). */
export function linesOnDisk(path: string): number {
  return readFileSync(path, 'utf8').trimEnd().split('\n').length - 1;
}

/**
 * The sizes a temp file of the state file's (`.compacting-`) is seen at,
 * one look each turn of the loop until `stop()`: a file made and written a
 * slice at a time is seen at several sizes short of its last; one made in
 * one turn and written whole, at none but 0 and the header's.
 */
export function watchTempSizes(dir: string): { stop(): number[] } {
  const sizes = new Set<number>();
  let done = false;
  const look = (): void => {
    if (done) return;
    for (const n of readdirSync(dir)) {
      if (!n.includes('.compacting-')) continue;
      try {
        sizes.add(statSync(join(dir, n)).size);
      } catch {
        // renamed or removed between the listing and the stat
      }
    }
    setImmediate(look);
  };
  setImmediate(look);
  return {
    stop: () => {
      done = true;
      return [...sizes];
    },
  };
}
