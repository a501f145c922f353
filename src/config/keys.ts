/**
 * The key text of a rule (its prefix, as formatted), computed once per rule
 * object: a table of 131,072 rules asks for it in validation, in the
 * daemon's rule set, in every counter read; formatting an IPv6 prefix each
 * time was a second of CPU per pass.
 */
import { formatIpv4Prefix, formatIpv6Prefix } from '../sid/addr.js';
import type { LocalSid, Policy } from './types.js';

const policyKeys = new WeakMap<Policy, string>();
const localSidKeys = new WeakMap<LocalSid, string>();

/** "192.0.2.0/24": the policy's match prefix. */
export function policyKey(p: Policy): string {
  let k = policyKeys.get(p);
  if (k === undefined) {
    k = formatIpv4Prefix(p.match);
    policyKeys.set(p, k);
  }
  return k;
}

/** "2001:db8:2::/48": the local SID's prefix. */
export function localSidKey(l: LocalSid): string {
  let k = localSidKeys.get(l);
  if (k === undefined) {
    k = formatIpv6Prefix(l.sid);
    localSidKeys.set(l, k);
  }
  return k;
}
