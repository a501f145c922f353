/**
 * The key text of a rule (its prefix, as formatted), computed once per rule
 * object: a table of 131,072 rules asks for it in validation, in the
 * daemon's rule set, in every counter read; formatting an IPv6 prefix each
 * time was a second of CPU per pass.
 */
import { formatIpv4Prefix, formatIpv6Prefix } from '../sid/addr.js';
import type { LocalSid, Policy, Session } from './types.js';

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

const sessionKeys = new WeakMap<Session, string>();

/** "10.60.0.1/32" or "2001:db8:60::/64": the session's UE prefix (masked, so two spellings of one prefix are one key). */
export function sessionKey(s: Session): string {
  let k = sessionKeys.get(s);
  if (k === undefined) {
    k = s.ue.family === 4 ? formatIpv4Prefix(s.ue.prefix) : formatIpv6Prefix(s.ue.prefix);
    sessionKeys.set(s, k);
  }
  return k;
}
