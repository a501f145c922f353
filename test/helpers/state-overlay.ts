/**
 * Policies put into an overlay and recorded as the daemon records them, and
 * what a state file must replay to: shared by the state file's compaction
 * and sliced-rewrite tests.
 */
import { readFileSync } from 'node:fs';
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
