/**
 * The key text of a rule (its prefix, as formatted), computed once per rule
 * object: a table of 131,072 rules asks for it in validation, in the
 * daemon's rule set, in every counter read; formatting an IPv6 prefix each
 * time was a second of CPU per pass.
 */
import { AddressError, formatIpv4Prefix, formatIpv6Prefix, parseIpv4Prefix } from '../sid/addr.js';
import type { Ipv4Prefix } from '../sid/types.js';
import { isRow, PolicyRule, SessionRule } from './rows.js';
import { latin1, putAscii, putHex8, putIpv4, putUint } from './ascii-text.js';
import type { LocalSid, Policy, Session, RuleSection, TeidPrefix, Where } from './types.js';

const KEY = Symbol('rule key');

/** A rule read from the config file (its `where` is its index in its list; other rules' are texts). */
export function fromFile(r: { readonly where: Where }): boolean {
  return typeof r.where === 'number';
}

/**
 * The `where` of every rule put through the API: one string for them all.
 * whereText spells it "policies[<key>]" from the rule's key when a message
 * or a listing needs it. A string of its own per rule (40-64 bytes) was
 * about 100 MB at a million sessions and a million (N3, TEID) policies put
 * through /v1/batch, all of it traced by every full collection.
 */
export const API_WHERE = 'api';

/**
 * A rule's `where` as messages and listings spell it: "policies[3]" for a
 * file rule (in `section`), "policies[<key>]" for an API rule, else the
 * text it has.
 */
export function whereText(section: RuleSection, r: { readonly where: Where }): string {
  const where = r.where;
  if (typeof where === 'number') return `${section}[${where}]`;
  return where === API_WHERE ? [section, '[', SECTION_KEY[section](r as never), ']'].join('') : where;
}

/** The key kept on a rule, if any. */
function kept(r: object): string | undefined {
  return (r as { [KEY]?: string })[KEY];
}

function keep(r: object, key: string): string {
  // Not on a row (src/config/rows.ts): its key is made when asked. Kept, the key texts of a million
  // sessions and a million (N3, TEID) policies were about 100 MB of heap; the rule set finds a row's key
  // by its bytes (src/config/row-map.ts).
  if (!isRow(r)) Object.defineProperty(r, KEY, { value: key, configurable: true });
  return key;
}

/**
 * "192.0.2.0/24": the policy's match prefix; with a TEID prefix
 * "192.0.2.10/32 teid 0x12340000/16".
 */
export function policyKey(p: Policy): string {
  if (p instanceof PolicyRule) return rowPolicyKey(p);
  return kept(p) ?? keep(p, p.teid === undefined ? formatIpv4Prefix(p.match) : teidKeyText(p.match, p.teid));
}

// A row's key text written from its columns as bytes and made one string:
// formatIpv4Prefix and formatTeidPrefix made a string per part and the
// getters an object per field (about ten allocations a key, the key texts
// of a batch's plan, listings and records are made this way many times).
const FIELDS = new Uint32Array(4);
const TEXT = Buffer.alloc(64);

/** formatIpv4Prefix's text ("a.b.c.d/len") into TEXT at 0; the index past it. */
function putIpv4Prefix(addr: number, len: number): number {
  const at = putIpv4(TEXT, 0, addr);
  TEXT[at] = 0x2f;
  return putUint(TEXT, at + 1, len);
}

const TEID = ' teid 0x';

function rowPolicyKey(p: PolicyRule): string {
  PolicyRule.keyFieldsOf(p, FIELDS);
  let at = putIpv4Prefix(FIELDS[0]!, FIELDS[1]!);
  // A TEID length of 0 is no TEID prefix (a /0 is none: parseTeidPrefix).
  if (FIELDS[3] !== 0) {
    at = putHex8(TEXT, putAscii(TEXT, at, TEID), FIELDS[2]!);
    TEXT[at++] = 0x2f;
    at = putUint(TEXT, at, FIELDS[3]!);
  }
  return latin1(TEXT, 0, at);
}

// Key texts are joined, not concatenated: V8 makes a concatenation of 13
// characters or more a pair of its parts, and a TEID key text
// ("100.64.0.1/32 teid 0x00000005/32") kept on its rule and in the rule
// set was three such pairs and their parts, about 160 bytes, where one flat
// string is 48 (a million (N3, TEID) policies: about 110 MB; Array.join
// makes a flat string).

/** "192.0.2.10/32 teid 0x12340000/16". */
function teidKeyText(match: Ipv4Prefix, t: TeidPrefix): string {
  return [formatIpv4Prefix(match), 'teid', formatTeidPrefix(t)].join(' ');
}

/** "0x12340000/16" (8 hex digits). */
export function formatTeidPrefix(t: TeidPrefix): string {
  return ['0x', t.value.toString(16).padStart(8, '0'), '/', t.len].join('');
}

/**
 * "VALUE/BITS" (VALUE decimal or 0x hex, 0..2^32-1; BITS 0..32; no bit of
 * VALUE set past BITS). Undefined for a /0 prefix (the same key as none).
 */
export function parseTeidPrefix(text: string, where: string): TeidPrefix | undefined {
  const m = /^\s*(0[xX][0-9a-fA-F]+|[0-9]+)\s*\/\s*([0-9]+)\s*$/.exec(text);
  if (m === null) {
    throw new AddressError(where, `${JSON.stringify(text)} is not a TEID prefix; expected VALUE/BITS, e.g. 0x12340000/16 (VALUE decimal or 0x hex, BITS 0 to 32)`);
  }
  const value = Number(m[1]);
  const len = Number(m[2]);
  if (!Number.isSafeInteger(value) || value > 0xffff_ffff) {
    throw new AddressError(where, `TEID ${m[1]} is out of range; a TEID is 32 bits (0 to 0xffffffff)`);
  }
  if (len > 32) throw new AddressError(where, `/${len}: a TEID prefix is at most 32 bits long (0 to 32)`);
  const mask = len === 0 ? 0 : (0xffff_ffff << (32 - len)) >>> 0;
  if ((value & ~mask) >>> 0 !== 0) {
    const fixed = formatTeidPrefix({ value: (value & mask) >>> 0, len });
    throw new AddressError(where, `${m[1]}/${len} has bits set past the first ${len}; write ${fixed} or a longer prefix`);
  }
  return len === 0 ? undefined : { value, len };
}

/**
 * A policy's key from user text: "192.0.2.0/24", or "192.0.2.10/32 teid
 * 0x12340000/16" (the form policyKey prints). Canonical text out.
 */
export function parsePolicyKeyText(text: string, where: string): { match: Ipv4Prefix; teid?: TeidPrefix } {
  const m = /^\s*(\S+)(?:\s+teid\s+(\S+))?\s*$/.exec(text);
  if (m === null) throw new AddressError(where, `${JSON.stringify(text)} is not a policy key; expected PREFIX or PREFIX teid VALUE/BITS, e.g. 192.0.2.10/32 teid 0x12340000/16`);
  const match = parseIpv4Prefix(m[1]!, where);
  const teid = m[2] === undefined ? undefined : parseTeidPrefix(m[2], `${where} teid`);
  if (teid !== undefined && match.len !== 32) {
    throw new AddressError(where, `teid needs a single-address match (/32), got /${match.len}: the key is the N3 address and the TEID prefix`);
  }
  return teid === undefined ? { match } : { match, teid };
}

/** Canonical policy key text from user text. */
export function canonicalPolicyKey(text: string, where = 'match'): string {
  const k = parsePolicyKeyText(text, where);
  return k.teid === undefined ? formatIpv4Prefix(k.match) : teidKeyText(k.match, k.teid);
}

/** "2001:db8:2::/48": the local SID's prefix. */
export function localSidKey(l: LocalSid): string {
  return kept(l) ?? keep(l, formatIpv6Prefix(l.sid));
}

/** "10.60.0.1/32" or "2001:db8:60::/64": the session's UE prefix (masked, so two spellings of one prefix are one key). */
export function sessionKey(s: Session): string {
  // A row with an IPv4 UE: from its columns (rowPolicyKey).
  if (s instanceof SessionRule && SessionRule.ue4Of(s, FIELDS)) return latin1(TEXT, 0, putIpv4Prefix(FIELDS[0]!, FIELDS[1]!));
  return kept(s) ?? keep(s, s.ue.family === 4 ? formatIpv4Prefix(s.ue.prefix) : formatIpv6Prefix(s.ue.prefix));
}

/** A rule's key as computed elsewhere (parseConfigOffLoop's thread): kept as if computed here. */
export function seedRuleKey(r: Policy | LocalSid | Session, key: string): void {
  keep(r, key);
}

/** Each rule section's key function (the thread that parses a reload and the main thread that takes its rules agree on it). */
export const SECTION_KEY: Readonly<Record<RuleSection, (r: never) => string>> = {
  policies: policyKey as (r: never) => string,
  localsids: localSidKey as (r: never) => string,
  sessions: sessionKey as (r: never) => string,
};
