/**
 * The rules a daemon wants in its tables: the config file's, with the changes
 * made through the API on top (the overlay, saved in the state file).
 *
 * One model (docs/config.md, "Running, saved and API config"): the running
 * config is the file as last loaded plus the overlay. A reload (or a start
 * with a file edited since) applies the file's own changes since the last
 * load on top of it: an API change survives every edit of the file that
 * leaves its rule alone (a comment, other rules). Where the file's edit and
 * an API change touch the same rule (same kind and key) differently, the
 * reload is refused naming the rules (rebaseOverlay); where they agree (the
 * file now says what the API said, e.g. after `mup config save`), the API
 * change has become config and leaves the overlay. To know what the file
 * said when an API change was made, each state record carries `base`: a
 * digest of the file's rule at that key then (null: none).
 */
import { ConfigError } from '../config/errors.js';
import { sameData } from '../config/same.js';
import { ShardedMap } from '../host/sharded-map.js';
import { createHash } from 'node:crypto';
import {
  closeSync,
  constants,
  existsSync,
  fdatasync,
  fchmodSync,
  fchownSync,
  fdatasyncSync,
  fstatSync,
  fsyncSync,
  ftruncateSync,
  linkSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
  type Stats,
} from 'node:fs';
import { open as openFile, statfs, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { checkAdvertiseHasBgp, checkRuleSet, checkRuleSetLengths, parseLocalSidEntry, parsePolicyEntry, parseSessionEntry, peekRuleIndex, ruleKeyMap, takeRuleIndex } from '../config/load.js';
import { asciiBytes, plainText, putAscii, putHex8, putIpv4, putUint } from '../config/ascii-text.js';
import { RepeatedRowKey, RowKeyedMap } from '../config/row-map.js';
import { BATCH_ROWS_FROM, PolicyRule, RuleRows, sharedProfile } from '../config/rows.js';
import { nextTurn, runNow, runYielding } from './slices.js';
import { SliceClock } from '../host/slice-clock.js';
import { canonicalPolicyKey, formatTeidPrefix, fromFile, localSidKey, policyKey, sessionKey } from '../config/keys.js';
import type { Config, LocalSid, Policy, RuleSection, Session } from '../config/types.js';
import type { Ipv6Addr, Ipv6Prefix } from '../sid/types.js';
import type { Changes, Tables } from '../dataplane/tables.js';
import { formatIpv4, formatIpv4Prefix, formatIpv6, formatIpv6Prefix, parseIpv4Prefix, parseIpv6Prefix } from '../sid/addr.js';
import { makeDirs } from '../host/mkdirs.js';

export type RuleKind = 'policy' | 'localsid' | 'session';

/** A rule as the config file and the API spell it (snake_case keys). */
export type RuleJson = Record<string, unknown>;

/** A rule of any kind. */
export type Rule = Policy | LocalSid | Session;

/**
 * What differs between the kinds of rule, for the rule set, the state file,
 * the API and the daemon: one entry per kind. A new kind is a new entry
 * here (and its table in dataplane/, its entry in the CLI's RULE_COMMANDS).
 */
export interface RuleKindSpec {
  readonly kind: RuleKind;
  /** In messages: "a policy", "no local SID named ...". */
  readonly label: string;
  /**
   * The config file's section, the API's list key (GET /v1/policies ->
   * {"policies": [...]}) and the head of a rule's key path ("policies[10.45.0.0/16]").
   */
  readonly section: RuleSection;
  /** The API's collection. */
  readonly apiPath: string;
  /** `mup <verb> list|add|replace|del`. */
  readonly cliVerb: string;
  /** The key's name: in the config and API body, the DELETE query, messages. */
  readonly keyName: string;
  /** The overlay's maps of this kind: added or replaced rules, deleted config keys. */
  readonly overlay: { readonly put: 'policies' | 'localsids' | 'sessions'; readonly del: 'delPolicies' | 'delLocalSids' | 'delSessions' };
  /** Validate one entry as the config file's (and the API's, the state file's) rules are. */
  parse(v: unknown, where: string): Rule;
  /** The key text (the prefix, canonical). */
  key(r: Rule): string;
  /** Canonical key text from user text ("10.0.0.7/24" -> "10.0.0.0/24"). */
  canonicalKey(text: string): string;
  /** As the config file and the API spell it. */
  json(r: Rule): RuleJson;
  /** The table changes that write these rules / delete them. */
  put(rules: readonly Rule[]): Changes;
  del(rules: readonly Rule[]): Changes;
  /** The rule's id (counter slot) in the tables, if it is there. */
  ruleId(t: Tables, r: Rule): number | undefined;
}

export const RULE_KINDS: Readonly<Record<RuleKind, RuleKindSpec>> = {
  policy: {
    kind: 'policy',
    label: 'policy',
    section: 'policies',
    apiPath: '/v1/policies',
    cliVerb: 'policy',
    keyName: 'match',
    overlay: { put: 'policies', del: 'delPolicies' },
    parse: (v, where) => parsePolicyEntry(v, where),
    key: (r) => policyKey(r as Policy),
    canonicalKey: (text) => canonicalPolicyKey(text, 'match'),
    json: (r) => policyJson(r as Policy),
    put: (rules) => ({ putPolicies: rules as Policy[] }),
    del: (rules) => ({ delPolicies: (rules as Policy[]).map((p) => ({ match: p.match, ...(p.teid === undefined ? {} : { teid: p.teid }) })) }),
    ruleId: (t, r) => t.policyRuleOf(r as Policy),
  },
  localsid: {
    kind: 'localsid',
    label: 'local SID',
    section: 'localsids',
    apiPath: '/v1/localsids',
    cliVerb: 'sid',
    keyName: 'sid',
    overlay: { put: 'localsids', del: 'delLocalSids' },
    parse: (v, where) => parseLocalSidEntry(v, where),
    key: (r) => localSidKey(r as LocalSid),
    canonicalKey: (text) => formatIpv6Prefix(parseIpv6Prefix(text, 'sid')),
    json: (r) => localSidJson(r as LocalSid),
    put: (rules) => ({ putLocalSids: rules as LocalSid[] }),
    del: (rules) => ({ delLocalSids: (rules as LocalSid[]).map((l) => l.sid) }),
    ruleId: (t, r) => t.localsidRule((r as LocalSid).sid),
  },
  session: {
    kind: 'session',
    label: 'session',
    section: 'sessions',
    apiPath: '/v1/sessions',
    cliVerb: 'session',
    keyName: 'ue',
    overlay: { put: 'sessions', del: 'delSessions' },
    parse: (v, where) => parseSessionEntry(v, where),
    key: (r) => sessionKey(r as Session),
    canonicalKey: (text) => (text.includes(':') ? formatIpv6Prefix(parseIpv6Prefix(text, 'ue')) : formatIpv4Prefix(parseIpv4Prefix(text, 'ue'))),
    json: (r) => sessionJson(r as Session),
    put: (rules) => ({ putSessions: rules as Session[] }),
    del: (rules) => ({ delSessions: (rules as Session[]).map((x) => x.ue) }),
    ruleId: (t, r) => t.sessionRule((r as Session).ue),
  },
};

/** Every kind, in the order the tables, listings and state file use. */
export const RULE_KIND_LIST: readonly RuleKindSpec[] = Object.values(RULE_KINDS);

/** The entry of a kind named in input (a state file line), or undefined. */
export function ruleKind(name: unknown): RuleKindSpec | undefined {
  return typeof name === 'string' && Object.hasOwn(RULE_KINDS, name) ? RULE_KINDS[name as RuleKind] : undefined;
}

// The API's and the state file's JSON of a rule is built for every listed
// rule and every change: fields are assigned one by one (in the order the
// file spells them) rather than spread from temporary objects, and the IPv6
// prefixes a rule shares with thousands of others (src_prefix, sr_prefix:
// one object each in a config file, load.ts readIpv6Prefix) are formatted
// once. The memo holds its prefixes weakly: an entry goes with its prefix (a
// Map bounded to 4,096 entries kept the prefixes of deleted API rules alive:
// ~100 B per change, test/change-memory.test.ts). API rules share their
// prefixes by text too now (load.ts, sharedPrefixes: at most 4,096 texts
// kept, whatever the number of changes).
const prefixText = new WeakMap<Ipv6Prefix, string>();

function fmt6(p: Ipv6Prefix): string {
  let s = prefixText.get(p);
  if (s === undefined) {
    s = formatIpv6Prefix(p);
    prefixText.set(p, s);
  }
  return s;
}

export function policyJson(p: Policy): RuleJson {
  const out: RuleJson = {};
  if (p.name !== undefined) out['name'] = p.name;
  out['match'] = formatIpv4Prefix(p.match);
  if (p.teid !== undefined) out['teid'] = formatTeidPrefix(p.teid);
  if (p.sid === undefined) out['sr_prefix'] = fmt6(p.srPrefix);
  else out['sid'] = formatIpv6(p.sid);
  out['src_prefix'] = fmt6(p.srcPrefix);
  if (p.segments.length !== 0) out['segments'] = p.segments.map((s) => formatIpv6(s));
  out['srh'] = p.srh;
  out['hop_limit'] = p.hopLimit;
  if (p.mtu !== undefined) out['mtu'] = p.mtu;
  return out;
}

export function sessionJson(x: Session): RuleJson {
  const out: RuleJson = {};
  if (x.name !== undefined) out['name'] = x.name;
  out['ue'] = sessionKey(x);
  out['teid'] = x.teid;
  out['qfi'] = x.qfi;
  out['rqi'] = x.rqi;
  out['endpoint'] = formatIpv4(x.endpoint);
  out['source'] = formatIpv4(x.source);
  out['isd'] = fmt6(x.isd);
  out['src_prefix'] = fmt6(x.srcPrefix);
  if (x.segments.length !== 0) out['segments'] = x.segments.map((s) => formatIpv6(s));
  out['srh'] = x.srh;
  out['hop_limit'] = x.hopLimit;
  if (x.mtu !== undefined) out['mtu'] = x.mtu;
  return out;
}

/**
 * Where a state line's bytes are written (batch.ts RecordBytes): room for a
 * line's bytes made once (`room`), then written from `end` and `end` set
 * past them; `text` for a line made by JSON.stringify.
 */
export interface JsonBytes {
  room(n: number): Buffer;
  end: number;
  text(s: string): void;
}

const isUint = (v: unknown, max: number): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= max;


/** An optional name, plain or absent. */
const plainName = (n: unknown): boolean => n === undefined || (typeof n === 'string' && plainText(n));

/**
 * Whether the writers below give policyJson's or sessionJson's text
 * exactly: every field they write is of the type, and every text of the
 * kind, they write as JSON.stringify would (anything else goes through
 * JSON.stringify).
 */
function plainPolicy(p: Policy): boolean {
  return (
    // A row's match and TEID are columns of integers its reader checked (its getters would make an object each).
    (p instanceof PolicyRule || (isUint(p.match?.addr, 0xffff_ffff) && isUint(p.match.len, 32) && (p.teid === undefined || (isUint(p.teid.value, 0xffff_ffff) && isUint(p.teid.len, 32))))) &&
    (p.sid !== undefined || p.srPrefix !== undefined) && p.srcPrefix !== undefined && Array.isArray(p.segments) && typeof p.srh === 'string' && plainText(p.srh) &&
    isUint(p.hopLimit, 255) && (p.mtu === undefined || isUint(p.mtu, 0xffff_ffff)) && plainName(p.name)
  );
}

function plainSession(x: Session): boolean {
  return (
    isUint(x.teid, 0xffff_ffff) && isUint(x.qfi, 63) && typeof x.rqi === 'boolean' && isUint(x.endpoint, 0xffff_ffff) && isUint(x.source, 0xffff_ffff) &&
    x.isd !== undefined && x.srcPrefix !== undefined && Array.isArray(x.segments) && typeof x.srh === 'string' && plainText(x.srh) && isUint(x.hopLimit, 255) &&
    (x.mtu === undefined || isUint(x.mtu, 0xffff_ffff)) && plainName(x.name)
  );
}

const ascii = asciiBytes;
const PUT_POLICY = ascii('{"put":"policy","rule":{');
const PUT_SESSION = ascii('{"put":"session","rule":{');
const NAME = ascii('"name":"');
const MATCH = ascii('"match":"');
const TEID_HEX = ascii('","teid":"0x');
const SR_PREFIX = ascii('","sr_prefix":');
const SID = ascii('","sid":');
const SRC_PREFIX = ascii(',"src_prefix":');
const UE = ascii('"ue":"');
const TEID_N = ascii('","teid":');
const QFI = ascii(',"qfi":');
const RQI_TRUE = ascii(',"rqi":true,"endpoint":"');
const RQI_FALSE = ascii(',"rqi":false,"endpoint":"');
const SOURCE = ascii('","source":"');
const ISD = ascii('","isd":');
const SEGMENTS = ascii(',"segments":[');
const SRH = ascii(',"srh":"');
const HOP_LIMIT = ascii('","hop_limit":');
const MTU = ascii(',"mtu":');
const BASE_NULL = ascii('},"base":null}');
const BASE = ascii('},"base":"');
const DEL = ascii('{"del":"');
const KEY = ascii('","key":"');
const BASE_AFTER_KEY_NULL = ascii('","base":null}');
const BASE_AFTER_KEY = ascii('","base":"');

function put(b: Buffer, at: number, f: Uint8Array): number {
  for (let i = 0; i < f.length; i++) b[at + i] = f[i]!;
  return at + f.length;
}

/** A prefix most rules share (sr_prefix, src_prefix, isd: one object for thousands) as its JSON string's bytes, quotes included: made once. */
const prefixJson = new WeakMap<Ipv6Prefix, Uint8Array>();

function putPrefix(b: Buffer, at: number, p: Ipv6Prefix): number {
  let j = prefixJson.get(p);
  if (j === undefined) {
    j = Buffer.from(JSON.stringify(fmt6(p)), 'utf8');
    prefixJson.set(p, j);
  }
  return put(b, at, j);
}

/** An IPv6 address's JSON string (formatIpv6: hex digits and colons). */
function putIpv6(b: Buffer, at: number, a: Ipv6Addr): number {
  b[at++] = 0x22;
  at = putAscii(b, at, formatIpv6(a));
  b[at++] = 0x22;
  return at;
}

/** The tail policies and sessions share, from after hop_limit's key: segments come before srh. */
function putPathTail(b: Buffer, at: number, r: Policy | Session): number {
  if (r.segments.length !== 0) {
    at = put(b, at, SEGMENTS);
    for (let i = 0; i < r.segments.length; i++) {
      if (i > 0) b[at++] = 0x2c;
      at = putIpv6(b, at, r.segments[i]!);
    }
    b[at++] = 0x5d;
  }
  at = put(b, at, SRH);
  at = putAscii(b, at, r.srh);
  at = put(b, at, HOP_LIMIT);
  at = putUint(b, at, r.hopLimit);
  if (r.mtu !== undefined) {
    at = put(b, at, MTU);
    at = putUint(b, at, r.mtu);
  }
  return at;
}

/** `"name":"NAME",` (a name plainText holds), the first member of a rule that has one. */
function putName(b: Buffer, at: number, name: string): number {
  at = put(b, at, NAME);
  at = putAscii(b, at, name);
  b[at++] = 0x22;
  b[at++] = 0x2c;
  return at;
}

/** The bytes of `{"put":"policy","rule":` JSON.stringify(policyJson(p)) (plainPolicy holds), up to the rule's closing brace (not written). */
function putPolicy(b: Buffer, at: number, p: Policy): number {
  at = put(b, at, PUT_POLICY);
  if (p.name !== undefined) at = putName(b, at, p.name);
  at = put(b, at, MATCH);
  if (p instanceof PolicyRule) {
    // From the row's columns: its getters made a match and a TEID object a line (100 MB of garbage over 262,144 + 262,144
    // through /v1/batch). A TEID length of 0 is no TEID prefix in a row.
    PolicyRule.keyFieldsOf(p, KEY_FIELDS);
    return putTail(b, putMatchTeid(b, at, KEY_FIELDS[0]!, KEY_FIELDS[1]!, KEY_FIELDS[3] === 0 ? undefined : KEY_FIELDS[2]!, KEY_FIELDS[3]!), p, putPolicyTail);
  }
  return putTail(b, putMatchTeid(b, at, p.match.addr, p.match.len, p.teid?.value, p.teid?.len ?? 0), p, putPolicyTail);
}

const KEY_FIELDS = new Uint32Array(4);

/** A policy's match text, and its TEID's (`teid` undefined: none), from after `"match":"`. */
function putMatchTeid(b: Buffer, at: number, addr: number, len: number, teid: number | undefined, teidLen: number): number {
  at = putIpv4(b, at, addr);
  b[at++] = 0x2f;
  at = putUint(b, at, len);
  if (teid !== undefined) {
    at = put(b, at, TEID_HEX);
    at = putHex8(b, at, teid);
    b[at++] = 0x2f;
    at = putUint(b, at, teidLen);
  }
  return at;
}

/** A policy's line from its SR prefix or SID on (what its profile holds). */
function putPolicyTail(b: Buffer, at: number, p: Policy): number {
  if (p.sid === undefined) {
    at = put(b, at, SR_PREFIX);
    at = putPrefix(b, at, p.srPrefix);
  } else {
    at = put(b, at, SID);
    at = putIpv6(b, at, p.sid);
  }
  at = put(b, at, SRC_PREFIX);
  at = putPrefix(b, at, p.srcPrefix);
  return putPathTail(b, at, p);
}

/** A session's line from its ISD on (what its profile holds). */
function putSessionTail(b: Buffer, at: number, x: Session): number {
  at = put(b, at, ISD);
  at = putPrefix(b, at, x.isd);
  at = put(b, at, SRC_PREFIX);
  at = putPrefix(b, at, x.srcPrefix);
  return putPathTail(b, at, x);
}

/**
 * A row's profile -> the bytes its tail writer gives for it: the same for
 * every row of the profile (a batch's rules mostly share one), so written
 * once and copied after; the line's fixed texts and shared prefixes were
 * a dozen small copies a line (0.6 s of a profile of 262,144 + 262,144
 * through /v1/batch was the record's lines).
 */
const profileTails = new WeakMap<object, Uint8Array>();

function putTail<R extends Policy | Session>(b: Buffer, at: number, r: R, write: (b: Buffer, at: number, r: R) => number): number {
  const profile = sharedProfile(r);
  if (profile === undefined) return write(b, at, r);
  let tail = profileTails.get(profile);
  if (tail === undefined) {
    const scratch = Buffer.alloc(lineRoom(undefined, null, r.segments.length) + r.srh.length);
    tail = Uint8Array.prototype.slice.call(scratch, 0, write(scratch, 0, r));
    profileTails.set(profile, tail);
  }
  b.set(tail, at);
  return at + tail.length;
}

/** Likewise for `{"put":"session","rule":` JSON.stringify(sessionJson(x)) (plainSession holds; `ue` is its key text). */
function putSession(b: Buffer, at: number, x: Session, ue: string): number {
  at = put(b, at, PUT_SESSION);
  if (x.name !== undefined) at = putName(b, at, x.name);
  at = put(b, at, UE);
  at = putAscii(b, at, ue);
  at = put(b, at, TEID_N);
  at = putUint(b, at, x.teid);
  at = put(b, at, QFI);
  at = putUint(b, at, x.qfi);
  at = put(b, at, x.rqi ? RQI_TRUE : RQI_FALSE);
  at = putIpv4(b, at, x.endpoint);
  at = put(b, at, SOURCE);
  at = putIpv4(b, at, x.source);
  return putTail(b, at, x, putSessionTail);
}

/**
 * Bytes a line takes at most before its name, base and segments: the
 * longest fixed text (a session's) with every number at its widest and
 * both shared prefixes at an IPv6 prefix text's longest (43 characters).
 */
const LINE_ROOM = 512;

/** The room a line needs: LINE_ROOM, and its name, base and segments (an IPv6 text is 39 characters at most, with quotes and comma 42). */
function lineRoom(name: string | undefined, base: string | null, segments: number): number {
  return LINE_ROOM + (name?.length ?? 0) + (base?.length ?? 0) + 42 * segments;
}

/** A line's end: `none` when there is no base, else `before`, the base (plainText holds) and its closing `"}`. */
function putBase(b: Buffer, at: number, base: string | null, none: Uint8Array, before: Uint8Array): number {
  if (base === null) return put(b, at, none);
  at = put(b, at, before);
  at = putAscii(b, at, base);
  b[at++] = 0x22;
  b[at++] = 0x7d;
  return at;
}

/** A put line through JSON.stringify: local SIDs, and a rule or base of a kind the byte writers do not take. */
function putLineSlowly(o: JsonBytes, kind: RuleKind, r: Rule, base: string | null): void {
  o.text(JSON.stringify({ put: kind, rule: RULE_KINDS[kind].json(r), base }));
}

/**
 * A batch record's line for a put: the bytes of
 * JSON.stringify({ put: kind, rule: RULE_KINDS[kind].json(r), base }),
 * written without that object, its rule's object or their strings for
 * policies and sessions (at 262,144 + 262,144 operations the record's
 * lines made 0.8 GB of garbage, 1.5 KB an operation, most of what the
 * young generation's collections copied; test/unit/record-line.test.ts
 * holds the two to the same bytes). Room for the line is made once and
 * it is written with no call per piece.
 */
export function writePutLine(o: JsonBytes, kind: RuleKind, r: Rule, base: string | null, key?: string): void {
  if (base !== null && !plainText(base)) return putLineSlowly(o, kind, r, base);
  let b: Buffer;
  let at: number;
  if (kind === 'policy' && plainPolicy(r as Policy)) {
    const p = r as Policy;
    b = o.room(lineRoom(p.name, base, p.segments.length) + p.srh.length);
    at = putPolicy(b, o.end, p);
  } else if (kind === 'session' && plainSession(r as Session)) {
    const x = r as Session;
    const ue = key ?? sessionKey(x);
    if (!plainText(ue)) return putLineSlowly(o, kind, r, base);
    b = o.room(lineRoom(x.name, base, x.segments.length) + ue.length + x.srh.length);
    at = putSession(b, o.end, x, ue);
  } else {
    return putLineSlowly(o, kind, r, base);
  }
  o.end = putBase(b, at, base, BASE_NULL, BASE);
}

/** A batch record's line for a delete: JSON.stringify({ del: kind, key, base })'s bytes. */
export function writeDeleteLine(o: JsonBytes, kind: RuleKind, key: string, base: string | null): void {
  if (!plainText(key) || (base !== null && !plainText(base))) return o.text(JSON.stringify({ del: kind, key, base }));
  const b = o.room(LINE_ROOM + kind.length + key.length + (base?.length ?? 0));
  let at = put(b, o.end, DEL);
  at = putAscii(b, at, kind);
  at = put(b, at, KEY);
  at = putAscii(b, at, key);
  o.end = putBase(b, at, base, BASE_AFTER_KEY_NULL, BASE_AFTER_KEY);
}

/** A local SID with the keys its behaviour takes in the config file (load.ts LOCALSID_KEYS_OF). */
export function localSidJson(l: LocalSid): RuleJson {
  // Fields set on one object in the order the spreads of the first version
  // gave (answers and the state file keep their key order): objects spread
  // into others were promoted in a listing (see listedRule in daemon.ts).
  const behavior = l.behavior ?? 'end.m.gtp4.e';
  const out: RuleJson = {};
  if (l.name !== undefined) out['name'] = l.name;
  if (l.behavior !== undefined) out['behavior'] = behavior;
  out['sid'] = localSidKey(l);
  const tail = (advertise: boolean): RuleJson => {
    if (l.mtu !== undefined) out['mtu'] = l.mtu;
    if (advertise && l.advertise !== undefined) out['advertise'] = { prefixes: [...l.advertise.prefixes], lb: l.advertise.lb, ln: l.advertise.ln, fn: l.advertise.fn };
    return out;
  };
  switch (behavior) {
    case 'end.m.gtp4.e':
      out['src_prefix_len'] = l.srcPrefixLen;
      out['container'] = l.container;
      out['ttl'] = l.ttl;
      return tail(true);
    case 'end.m.gtp6.e':
      if (l.source !== undefined) out['source'] = formatIpv6(l.source);
      out['container'] = l.container;
      out['hop_limit'] = l.ttl;
      return tail(true);
    case 'end.m.gtp6.d':
    case 'end.m.gtp6.d.di':
      if (l.source !== undefined) out['source'] = formatIpv6(l.source);
      if (l.srPrefix !== undefined) out['sr_prefix'] = formatIpv6Prefix(l.srPrefix);
      if ((l.segments ?? []).length !== 0) out['segments'] = (l.segments ?? []).map((x) => formatIpv6(x));
      out['srh'] = l.srh ?? 'auto';
      out['hop_limit'] = l.ttl;
      return tail(false);
  }
}

/** The API's and the state file's changes on top of the config. */
export interface Overlay {
  /** Added or replaced, by key (match / sid prefix text). */
  readonly policies: Map<string, Policy>;
  /** Deleted keys of config rules. */
  readonly delPolicies: Set<string>;
  readonly localsids: Map<string, LocalSid>;
  readonly delLocalSids: Set<string>;
  readonly sessions: Map<string, Session>;
  readonly delSessions: Set<string>;
}

export function emptyOverlay(): Overlay {
  // Sessions and policies by their key bytes (ruleKeyMap of no rows: each put is an added row, with no key text or
  // Map entry kept; src/config/row-map.ts), as the rule set indexes them.
  return { policies: ruleKeyMap<Policy>('policies', []), delPolicies: new Set(), localsids: new Map(), delLocalSids: new Set(), sessions: ruleKeyMap<Session>('sessions', []), delSessions: new Set() };
}

export function overlaySize(o: Overlay): number {
  return RULE_KIND_LIST.reduce((n, k) => n + o[k.overlay.put].size + o[k.overlay.del].size, 0);
}

/** One fresh value per kind. */
function perKind<T>(make: () => T): Record<RuleKind, T> {
  return Object.fromEntries(RULE_KIND_LIST.map((k) => [k.kind, make()])) as Record<RuleKind, T>;
}

export class RuleError extends Error {
  override readonly name = 'RuleError';
  constructor(
    message: string,
    /** HTTP status the API answers with. */
    readonly status: 400 | 404 | 409 | 422 | 503 | 507,
    /** The API's machine-readable error code (src/daemon/api.ts ERROR_CODES), when more precise than the status's. */
    readonly code?: string,
  ) {
    super(message);
  }
}

/** Key text of a rule: its prefix, masked, as formatted (computed once per rule). */
export { localSidKey, policyKey, sessionKey };

/** Canonical key text from user text ("10.0.0.7/24" -> "10.0.0.0/24"). */
export function canonicalKey(kind: RuleKind, text: string): string {
  return RULE_KINDS[kind].canonicalKey(text);
}

/**
 * The effective rule set: config rules with the overlay applied, indexed by
 * key and by name, in a stable order (config order, then API additions).
 */
/** The API's refusals around rules learned from BGP (docs/bgp.md "Precedence"), one wording for single changes and batches. */
export function learnedKeyText(kind: RuleKind, key: string, learned: Rule): string {
  const k = RULE_KINDS[kind];
  return (
    `a ${k.label} with ${k.keyName} ${key} was learned from BGP${learned.name === undefined ? '' : ` (${JSON.stringify(learned.name)})`}; ` +
    'the config and the API cannot overwrite a learned rule: withdraw its route, or use another key (docs/bgp.md "Precedence")'
  );
}

export function learnedNameText(kind: RuleKind, name: string): string {
  return `name ${JSON.stringify(name)} is used by a ${RULE_KINDS[kind].label} learned from BGP; names must be unique`;
}

export function learnedDeleteText(kind: RuleKind): string {
  return `that ${RULE_KINDS[kind].label} was learned from BGP; the API cannot delete it: withdraw its route (docs/bgp.md "Precedence")`;
}

/**
 * A list of sessions or policies indexed by its key bytes (ruleKeyMap), as
 * the file's checks index it, for a set built on a config whose index was
 * taken already: no key text and Map entry per rule (a second set on a
 * million sessions held a million new key texts). Undefined for local SIDs,
 * or a list with a key twice (the Map built then keeps the last, as before).
 */
function keyBytesIndex(k: RuleKindSpec, rules: readonly Rule[]): { byKey: Map<string, Rule>; names: Map<string, string> } | undefined {
  if (k.section === 'localsids') return undefined;
  let byKey: Map<string, Rule>;
  try {
    byKey = ruleKeyMap(k.section, rules);
  } catch (e) {
    if (e instanceof RepeatedRowKey) return undefined;
    throw e;
  }
  const names: Map<string, string> = new ShardedMap<string>();
  for (const r of rules) if (r.name !== undefined) names.set(r.name, k.key(r));
  return { byKey, names };
}

/**
 * map.set(key, r), `key` being r's own key: by the rule's key bytes where
 * the map is indexed by them (RowKeyedMap.setOwn: the key text was made
 * from the same columns, and reading it back into bytes cost more than the
 * Map of texts did).
 */
export function setOwn<R extends Rule>(map: Map<string, R>, key: string, r: R): void {
  if (map instanceof RowKeyedMap) map.setOwn(r);
  else map.set(key, r);
}

/** map.get(key), `key` being r's own key: by the rule's key bytes where the map is indexed by them (RowKeyedMap.getOwn). */
export function getOwn<R extends Rule>(map: ReadonlyMap<string, R>, key: string, r: R): R | undefined {
  return map instanceof RowKeyedMap ? (map as RowKeyedMap<R>).getOwn(r) : map.get(key);
}

/** A RuleSet method's `current` not given: the method looks the set's rule at the key up itself. */
export const NO_RULE: unique symbol = Symbol('no rule');
/**
 * The set's rule at a key as the caller found it: the rule, or NO_RULE
 * (the set has none there). Undefined: not looked up (the method looks).
 * Not undefined for "none": an argument given as undefined is one left
 * out, and a default parameter took it for "not looked up" (found in
 * review of the first version: every new key of a batch was looked up
 * again all the same).
 */
export type Current = Rule | typeof NO_RULE | undefined;

/** A batch plan's `before` value (undefined: the set had no rule there) as a Current. */
export function foundRule(r: Rule | undefined): Rule | typeof NO_RULE {
  return r ?? NO_RULE;
}

/** RuleSet's constructor leaves the building to RuleSet.yielding. */
const BUILT_LATER: unique symbol = Symbol('built later');

export class RuleSet {
  /** Rules by kind, by key, in order; names to keys. */
  readonly #rules = perKind(() => new Map<string, Rule>());
  readonly #names = perKind((): Map<string, string> => new ShardedMap<string>());
  /**
   * The config file's rule at each key whose file rule the overlay holds
   * the place of (an API rule, or a delete): `source` in listings, and the
   * base a change's state record names. Elsewhere #rules
   * holds the file's rule, or no rule of the file (an API rule, whose
   * `where` is a text, or none): no map of every file rule (one was 2 x 1.8
   * MB with 65,536 + 65,536 rules, 2 x 3.7 after the first change), and no
   * entry per key the API added (a million sessions through /v1/batch made
   * a million entries of null). An entry goes when the set holds the
   * file's rule at its key again (put back through the API as the file
   * has it): #rules has it then. Kept, each key the API ever touched had
   * one (an entry and its key text, about 70 B) for the daemon's life:
   * 1.5 MB of live heap after two batches of 10,000 and 6 s of 4 writers
   * on bench:daemon's config. A put or delete that takes the key again
   * keeps the file's rule first (#keepFileRule), so an undo finds it.
   */
  readonly #fileRules = perKind((): Map<string, Rule> => new ShardedMap<Rule>());
  /**
   * Rules learned from BGP (origin "bgp"; docs/bgp.md "Precedence"): in the
   * tables, never in the overlay or the state file. Their keys and names are
   * not the config's or the API's: whichever rule holds a key first keeps it.
   */
  #learned = perKind(() => new Map<string, Rule>());
  #learnedNames = perKind((): Map<string, string> => new ShardedMap<string>());

  constructor(
    readonly config: Config,
    readonly overlay: Overlay,
    /** RuleSet.yielding's: the set is built by the caller, in slices. */
    later?: typeof BUILT_LATER,
  ) {
    if (later !== BUILT_LATER) runNow(this.#building(new SliceClock()));
  }

  /**
   * The set built in slices, the event loop running between them (a
   * reload's: with 524,288 API rules on top of the file, the constructor's
   * one turn held the loop about 650 ms). The caller holds the config and
   * the overlay still (the serial section).
   */
  static async yielding(config: Config, overlay: Overlay): Promise<RuleSet> {
    const set = new RuleSet(config, overlay, BUILT_LATER);
    await runYielding(set.#building(new SliceClock()));
    return set;
  }

  *#building(clock: SliceClock): Generator<void, void> {
    const { config, overlay } = this;
    // Whether the whole must be checked again (names unique across file and API, lengths): see #applyingOverlay.
    let recheck = false;
    const lengths: { policies?: Policy[]; localsids?: LocalSid[]; sessions?: Session[] } = {};
    for (const k of RULE_KIND_LIST) {
      const put = overlay[k.overlay.put] as Map<string, Rule>;
      const del = overlay[k.overlay.del];
      // The file's checks built these maps (config/load.ts): taken, not built again.
      const checked = takeRuleIndex<Rule>(config[k.section] ?? []) ?? keyBytesIndex(k, config[k.section] ?? []);
      if (checked !== undefined) {
        this.#rules[k.kind] = checked.byKey;
        this.#names[k.kind] = checked.names;
        if (put.size === 0 && del.size === 0) continue;
        if (yield* this.#applyingOverlay(k, put, del, clock)) recheck = true;
        if (put.size > 0) (lengths as Record<string, Rule[]>)[k.section] = [...this.#rules[k.kind].values()];
        continue;
      }
      const fileRules = this.#fileRules[k.kind];
      for (const r of config[k.section] ?? []) {
        // The key's own string, shared with the maps: no "<kind> <key>" string per rule.
        const key = k.key(r);
        let over = put.get(key);
        if (over !== undefined || del.has(key)) fileRules.set(key, r);
        if (over !== undefined && this.#sameAsFile(k, key, over, put, del) !== undefined) over = undefined;
        if (!del.has(key)) this.#set(k, over ?? r);
        if (clock.tick()) yield;
      }
      for (const [key, r] of put) {
        if (!this.#rules[k.kind].has(key)) this.#set(k, r);
        if (clock.tick()) yield;
      }
      for (const key of del) if (!fileRules.has(key)) del.delete(key); // as #applyingOverlay: the file has no rule there
      if (put.size > 0 || del.size > 0) recheck = true;
    }
    // The overlay was checked rule by rule when it was made, the file when it
    // was read; the whole must still hold together. Worded as the file's checks word it.
    const file = 'the config with the state file applied';
    if (recheck) checkRuleSet(file, [...this.policies.values()], [...this.localsids.values()], [...this.sessions.values()]);
    else if (Object.keys(lengths).length > 0) checkRuleSetLengths(file, lengths);
  }

  /**
   * The overlay applied in place to the file's maps (the rules' order as a
   * rebuild gives it: file rules where they were, the API's new keys after
   * them in the overlay's order; a key in both lists, never made so, is
   * deleted first and put after the file's rules). True when a name may be held twice now
   * (an API rule took a name another rule still has): the caller checks the
   * whole set then, for the error's words.
   */
  *#applyingOverlay(k: RuleKindSpec, put: Map<string, Rule>, del: Set<string>, clock: SliceClock): Generator<void, boolean> {
    const rules = this.#rules[k.kind];
    const names = this.#names[k.kind];
    const fileRules = this.#fileRules[k.kind];
    for (const key of del) {
      const r = rules.get(key);
      if (r === undefined) {
        // A delete of a key the file has not (an older state file's, without a base): nothing to take away.
        del.delete(key);
        continue;
      }
      fileRules.set(key, r);
      if (r.name !== undefined && names.get(r.name) === key) names.delete(r.name);
      rules.delete(key);
      if (clock.tick()) yield;
    }
    const displaced: string[] = [];
    for (const [key, r] of put) {
      if (!fileRules.has(key)) {
        const file = rules.get(key);
        if (file !== undefined) fileRules.set(key, file);
      }
      if (clock.tick()) yield;
      if (this.#sameAsFile(k, key, r, put, del) !== undefined) continue;
      if (r.name !== undefined) {
        const owner = names.get(r.name);
        if (owner !== undefined && owner !== key) displaced.push(owner);
      }
      this.#set(k, r);
    }
    // A rule whose name a put took, still called so: two rules, one name.
    return displaced.some((owner) => {
      const name = rules.get(owner)?.name;
      return name !== undefined && names.get(name) !== owner;
    });
  }

  /**
   * An API rule the same as the file's at its key (put back through the
   * API, or a state file's records of a delete and an add back): not an API
   * change. Its overlay entry goes (the set owns its overlay), and so does
   * its #fileRules entry: the caller keeps the file's rule, returned, in the
   * set, where #fileRule finds it. Undefined when `r` is not the file's.
   */
  #sameAsFile(k: RuleKindSpec, key: string, r: Rule, put: Map<string, Rule>, del: Set<string>): Rule | undefined {
    const fileRules = this.#fileRules[k.kind];
    const file = fileRules.get(key);
    if (file == null || del.has(key) || !sameRule(file, r)) return undefined;
    put.delete(key);
    fileRules.delete(key);
    return file;
  }

  /** The policies, by key, in order. */
  get policies(): ReadonlyMap<string, Policy> {
    return this.#rules.policy as Map<string, Policy>;
  }

  /** The local SIDs, by key, in order. */
  get localsids(): ReadonlyMap<string, LocalSid> {
    return this.#rules.localsid as Map<string, LocalSid>;
  }

  /** The sessions, by key, in order. */
  get sessions(): ReadonlyMap<string, Session> {
    return this.#rules.session as Map<string, Session>;
  }

  /** The rules of a kind, by key, in order. */
  rules(kind: RuleKind): ReadonlyMap<string, Rule> {
    return this.#rules[kind];
  }

  /** The learned rules of a kind, by key. */
  learned(kind: RuleKind): ReadonlyMap<string, Rule> {
    return this.#learned[kind];
  }

  /** Why a learned rule cannot take its key or name (a config/API rule has it), or undefined. */
  learnedConflict(kind: RuleKind, r: Rule): string | undefined {
    const k = RULE_KINDS[kind];
    const key = k.key(r);
    if (this.#rules[kind].has(key)) return `the ${this.source(kind, key)} ${k.label} with ${k.keyName} ${key} holds this key`;
    if (r.name !== undefined) {
      const owner = this.#names[kind].get(r.name);
      if (owner !== undefined) return `the ${this.source(kind, owner)} ${k.label} with ${k.keyName} ${owner} is named ${JSON.stringify(r.name)}`;
      const other = this.#learnedNames[kind].get(r.name);
      if (other !== undefined && other !== key) return `the learned ${k.label} with ${k.keyName} ${other} is named ${JSON.stringify(r.name)}`;
    }
    return undefined;
  }

  /** Put (rule) or remove (undefined) a learned rule; the caller checked learnedConflict. */
  setLearned(kind: RuleKind, key: string, r: Rule | undefined): void {
    const old = this.#learned[kind].get(key);
    if (old?.name !== undefined && this.#learnedNames[kind].get(old.name) === key) this.#learnedNames[kind].delete(old.name);
    if (r === undefined) {
      this.#learned[kind].delete(key);
      return;
    }
    this.#learned[kind].set(key, r);
    if (r.name !== undefined) this.#learnedNames[kind].set(r.name, key);
  }

  /**
   * Take the learned rules of the set this one replaces (a reload, a save).
   * Throws (409) naming the learned rules whose key or name the new set's
   * config/API rules take: a reload cannot silently overwrite them.
   */
  adoptLearned(from: RuleSet): void {
    const taken: string[] = [];
    for (const k of RULE_KIND_LIST) {
      for (const [key, r] of from.#learned[k.kind]) {
        const why = this.learnedConflict(k.kind, r);
        if (why !== undefined) taken.push(`${k.label} ${r.name ?? key} (${why})`);
      }
    }
    if (taken.length > 0) {
      throw new RuleError(
        `the config would take the place of rules learned from BGP: ${taken.slice(0, 5).join('; ')}${taken.length > 5 ? ` and ${taken.length - 5} more` : ''}. ` +
          'Nothing was changed. Withdraw the routes first, or give the rules other keys/names (docs/bgp.md "Precedence")',
        409,
        'learned',
      );
    }
    this.#learned = from.#learned;
    this.#learnedNames = from.#learnedNames;
  }

  source(kind: RuleKind, key: string): 'config' | 'api' | 'bgp' {
    if (!this.#rules[kind].has(key) && this.#learned[kind].has(key)) return 'bgp';
    const overlaid = this.overlay[RULE_KINDS[kind].overlay.put].has(key);
    return !overlaid && this.#fileRule(kind, key) !== undefined ? 'config' : 'api';
  }

  /** The config file's rule at this key, if it has one (its `where` is its index in the file's section). */
  fileRule(kind: RuleKind, key: string): Rule | undefined {
    return this.#fileRule(kind, key);
  }

  /** The set's rule at `key`: `current` when the caller found it, else looked up. */
  #current(kind: RuleKind, key: string, current: Current): Rule | undefined {
    if (current === undefined) return this.#rules[kind].get(key);
    return current === NO_RULE ? undefined : current;
  }

  /** `current`: the set's rule at `key` when the caller has it (Current). */
  #fileRule(kind: RuleKind, key: string, current?: Current): Rule | undefined {
    const known = this.#fileRules[kind].get(key);
    if (known !== undefined) return known;
    // Never taken by the overlay: the set holds the file's rule, or an API rule, or none.
    const r = this.#current(kind, key, current);
    return r !== undefined && fromFile(r) ? r : undefined;
  }

  /** Note the file's rule at a key before the overlay takes it (nothing to note where the set holds none of the file's). */
  #keepFileRule(kind: RuleKind, key: string, current: Current): void {
    const fileRules = this.#fileRules[kind];
    if (fileRules.has(key)) return;
    const r = this.#current(kind, key, current);
    if (r !== undefined && fromFile(r)) fileRules.set(key, r);
  }

  #set(k: RuleKindSpec, r: Rule, current?: Current, known?: string): void {
    const key = known ?? k.key(r);
    const names = this.#names[k.kind];
    const old = this.#current(k.kind, key, current);
    // Its old name, unless another rule has it now (taken in the same batch, put before this one).
    if (old?.name !== undefined && names.get(old.name) === key) names.delete(old.name);
    setOwn(this.#rules[k.kind], key, r);
    if (r.name !== undefined) names.set(r.name, key);
  }

  /** Key of the rule called `name`, or of the rule with key `key`. */
  find(kind: RuleKind, by: { key?: string; name?: string }): string | undefined {
    if (by.name !== undefined) return this.#names[kind].get(by.name);
    if (by.key === undefined) return undefined;
    const k = canonicalKey(kind, by.key);
    return this.#rules[kind].has(k) ? k : undefined;
  }

  /** A learned (BGP) rule's key, by name or key; undefined when no learned rule of that kind has it. */
  findLearned(kind: RuleKind, by: { key?: string; name?: string }): string | undefined {
    if (by.name !== undefined) return this.#learnedNames[kind].get(by.name);
    if (by.key === undefined) return undefined;
    const k = canonicalKey(kind, by.key);
    return this.#learned[kind].has(k) ? k : undefined;
  }

  /** Validate an API rule (as the file's entries are) and check it against the set for add or replace. */
  check(kind: RuleKind, body: unknown, op: 'add' | 'replace'): Rule {
    const where = 'request body';
    const k = RULE_KINDS[kind];
    const rule = k.parse(body, where);
    if (kind === 'localsid') checkAdvertiseHasBgp(rule as LocalSid, this.config.bgp, where);
    const key = k.key(rule);
    const what = k.label;
    const keyName = k.keyName;
    const existing = this.#rules[kind].get(key);
    const learned = this.#learned[kind].get(key);
    if (learned !== undefined) throw new RuleError(learnedKeyText(kind, key, learned), 409, 'learned');
    if (rule.name !== undefined && this.#learnedNames[kind].has(rule.name)) {
      throw new RuleError(learnedNameText(kind, rule.name), 409, 'name_taken');
    }
    if (op === 'add' && existing !== undefined) {
      throw new RuleError(`a ${what} with ${keyName} ${key} exists already${existing.name === undefined ? '' : ` (${JSON.stringify(existing.name)})`}; replace it with PUT (mup ${k.cliVerb} replace)`, 409, 'exists');
    }
    if (op === 'replace' && existing === undefined) {
      throw new RuleError(`no ${what} with ${keyName} ${key} to replace; add it with POST (mup ${k.cliVerb} add)`, 404);
    }
    if (rule.name !== undefined) {
      const owner = this.#names[kind].get(rule.name);
      if (owner !== undefined && owner !== key) {
        throw new RuleError(`name ${JSON.stringify(rule.name)} is already used by the ${what} with ${keyName} ${owner}; names must be unique`, 409, 'name_taken');
      }
    }
    return rule;
  }

  /**
   * Record an add or replace in the set and the overlay. `current`: the
   * set's rule at the rule's key (undefined: none) when the caller has
   * looked it up already (a batch's plan has: BatchPlan.before); `known`:
   * the rule's key text, when the caller has it (a row's is made anew each
   * time it is asked for).
   */
  put(kind: RuleKind, rule: Rule, current?: Current, known?: string): void {
    const k = RULE_KINDS[kind];
    const key = known ?? k.key(rule);
    this.#keepFileRule(kind, key, current);
    const put = this.overlay[k.overlay.put] as Map<string, Rule>;
    const del = this.overlay[k.overlay.del];
    del.delete(key);
    const file = this.#sameAsFile(k, key, rule, put, del);
    if (file !== undefined) {
      // The file's own rule again (deleted and added back, or replaced back): its object is kept, not a
      // second one (docs/config.md "Running, saved and API config").
      this.#set(k, file, current, key);
      return;
    }
    this.#set(k, rule, current, key);
    setOwn(put, key, rule);
  }

  /** Record a delete (by key) in the set and the overlay. `current`: as put's. */
  delete(kind: RuleKind, key: string, current?: Current): void {
    const k = RULE_KINDS[kind];
    this.#keepFileRule(kind, key, current);
    const old = this.#current(kind, key, current);
    if (old?.name !== undefined && this.#names[kind].get(old.name) === key) this.#names[kind].delete(old.name);
    this.#rules[kind].delete(key);
    this.overlay[k.overlay.put].delete(key);
    // The set holds no rule at the key now: the file's, if it has one, is in #fileRules (#keepFileRule noted it).
    if (this.#fileRule(kind, key, NO_RULE) !== undefined) this.overlay[k.overlay.del].add(key);
  }

  /** Digest of the file's rule at this key (null: the file has none): a state record's `base`. `current`: as put's. */
  base(kind: RuleKind, key: string, current?: Current): string | null {
    const r = this.#fileRule(kind, key, current);
    return r === undefined ? null : ruleDigest(kind, r);
  }

  /**
   * Entries of every structure the set keeps (rules and names per kind, the
   * file's keys, the overlay): the same rules must keep them the same
   * however many changes led to them (test/load-scale.test.ts).
   */
  footprint(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const k of RULE_KIND_LIST) {
      out[`${k.kind}.fileRules`] = this.#fileRules[k.kind].size;
      out[`${k.kind}.rules`] = this.#rules[k.kind].size;
      out[`${k.kind}.names`] = this.#names[k.kind].size;
      out[`overlay.${k.overlay.put}`] = this.overlay[k.overlay.put].size;
      out[`overlay.${k.overlay.del}`] = this.overlay[k.overlay.del].size;
    }
    return out;
  }

  /** The effective config (settings and interfaces from the file). */
  effective(): Config {
    const all = <R extends Rule>(kind: RuleKind, mine: ReadonlyMap<string, R>): R[] => {
      const learned = this.#learned[kind] as ReadonlyMap<string, Rule> as ReadonlyMap<string, R>;
      // Made at its size and written in place: a spread of values() made an iterator result per rule and grew the list as it went.
      const out = new Array<R>(mine.size + learned.size);
      let at = 0;
      if (mine instanceof RowKeyedMap) at = (mine as RowKeyedMap<R>).valuesInto(out, 0);
      else for (const r of mine.values()) out[at++] = r;
      for (const r of learned.values()) out[at++] = r;
      // The sizes were the counts (a mismatch would be a fault of the maps): never a hole at the end.
      out.length = at;
      return out;
    };
    return {
      ...this.config,
      policies: all('policy', this.policies),
      localsids: all('localsid', this.localsids),
      sessions: all('session', this.sessions),
    };
  }

  /**
   * effective() in slices of about SLICE_MS, the event loop running between
   * them: the lists of 131,072 rules were made in one turn of 11-17 ms of
   * an edited reload's. The caller holds the set still: a reload's new set,
   * in the serial section, where the only other writer of the rule sets
   * (applyLearned, whose learned maps the new set shares) also runs.
   */
  effectiveYielding(): Promise<Config> {
    return runYielding(this.#effectiveSliced());
  }

  *#effectiveSliced(): Generator<void, Config> {
    const clock = new SliceClock();
    const learned = this.#learned;
    function* all<R extends Rule>(kind: RuleKind, mine: ReadonlyMap<string, R>): Generator<void, R[]> {
      const out: R[] = [];
      for (const r of mine.values()) {
        out.push(r);
        if (clock.tick()) yield;
      }
      for (const r of learned[kind].values() as Iterable<R>) {
        out.push(r);
        if (clock.tick()) yield;
      }
      return out;
    }
    const policies = yield* all('policy', this.policies);
    const localsids = yield* all('localsid', this.localsids);
    const sessions = yield* all('session', this.sessions);
    return { ...this.config, policies, localsids, sessions };
  }
}

/** A short digest of a rule as the config spells it (what `base` in a state record holds). */
const digests = new WeakMap<Rule, string>();
export function ruleDigest(kind: RuleKind, r: Rule): string {
  // A rule object never changes: its digest is kept with it (a batch that deletes config rules and one
  // that adds them back both name the same rules' digests as their records' base).
  let d = digests.get(r);
  if (d === undefined) {
    // The first 8 bytes as 16 hex digits, a string of their own: a slice of the 64-digit text kept it alive
    // beside it (112 bytes a kept digest instead of 32; 10,000 after a batch that touched 10,000 file rules).
    d = createHash('sha256').update(JSON.stringify(RULE_KINDS[kind].json(r))).digest().toString('hex', 0, 8);
    digests.set(r, d);
  }
  return d;
}

export interface Rebased {
  /** The overlay to run on top of the new file: the API changes the file left alone. */
  readonly overlay: Overlay;
  /** API changes the new file now says itself (they became config): "<kind> <key>". */
  readonly absorbed: string[];
  /** Rules both the file's edit and an API change touch, differently: "policy p3 (10.0.3.0/24)". Empty: none. */
  readonly conflicts: string[];
}

/** What the file said at a changed key when the change was made: its rule's digest, null (no rule), undefined (not recorded). */
export type RecordedBase = (kind: RuleKind, key: string) => string | null | undefined;

/** Overlay entries rebaseOverlayAsync checks between two turns of the event loop. */
export const REBASE_SLICE = 250;

/**
 * Move the API changes (`overlay`, made on top of an older file whose rule
 * digests `base` gives; undefined: not known) onto the file `next`. Per
 * rule the overlay touches: the new file says what the API change says ->
 * absorbed; the new file says what the old one said -> kept; else a
 * conflict. Pure: the overlay given is not changed.
 */
export function rebaseOverlay(overlay: Overlay, base: RecordedBase, next: Config): Rebased {
  return runNow(rebasing(overlay, base, next));
}

/** rebaseOverlay in slices of REBASE_SLICE entries, the event loop running between them (a reload). */
export function rebaseOverlayAsync(overlay: Overlay, base: RecordedBase, next: Config): Promise<Rebased> {
  return runYielding(rebasing(overlay, base, next));
}

function* rebasing(overlay: Overlay, base: RecordedBase, next: Config): Generator<void, Rebased> {
  const out = emptyOverlay();
  const absorbed: string[] = [];
  const conflicts: string[] = [];
  let n = 0;
  for (const k of RULE_KIND_LIST) {
    const put = overlay[k.overlay.put] as Map<string, Rule>;
    const del = overlay[k.overlay.del];
    if (put.size === 0 && del.size === 0) continue;
    // The file's rules by key: the map its checks built (not taken: the rule set takes it), else made here.
    const rules = next[k.section] ?? [];
    const byKey: ReadonlyMap<string, Rule> = peekRuleIndex<Rule>(rules)?.byKey ?? keyBytesIndex(k, rules)?.byKey ?? new Map(rules.map((r: Rule) => [k.key(r), r]));
    const check = (key: string, wanted: Rule | undefined): boolean => {
      const fileRule = byKey.get(key);
      // The same rule as data needs no digest (the digest of a file rule is a sha256 of its JSON).
      if (fileRule === undefined ? wanted === undefined : wanted !== undefined && sameRule(fileRule, wanted)) {
        absorbed.push(`${k.kind} ${key}`);
        return false;
      }
      const file = fileRule === undefined ? null : ruleDigest(k.kind, fileRule);
      const want = wanted === undefined ? null : ruleDigest(k.kind, wanted);
      if (file === want) {
        absorbed.push(`${k.kind} ${key}`);
        return false;
      }
      // No recorded base (a state file of an older version): a rule the file does not have is taken as one it never had.
      const was = base(k.kind, key) ?? (file === null ? null : undefined);
      if (was !== undefined && file === was) return true;
      // The API put back what the file said then (records of a delete and an add back, not yet compacted):
      // no change of its own, as a running daemon's rule set has it (RuleSet.put); the file's edit applies.
      if (was !== undefined && want === was) {
        absorbed.push(`${k.kind} ${key}`);
        return false;
      }
      const names = [...new Set([wanted?.name, fileRule?.name].filter((x): x is string => x !== undefined))];
      conflicts.push(`${k.label} ${names.length === 0 ? key : `${names.join(' / ')} (${key})`}`);
      return false;
    };
    for (const [key, r] of put) {
      if (++n % REBASE_SLICE === 0) yield;
      if (check(key, r)) (out[k.overlay.put] as Map<string, Rule>).set(key, r);
    }
    for (const key of del) {
      if (++n % REBASE_SLICE === 0) yield;
      if (check(key, undefined)) out[k.overlay.del].add(key);
    }
  }
  return { overlay: out, absorbed, conflicts };
}

/** `key old -> new` for each top-level key whose value differs (JSON), joined by ", ". */
function fieldChanges(a: Record<string, unknown>, b: Record<string, unknown>): string {
  const show = (v: unknown): string => (v === undefined ? '(none)' : typeof v === 'string' ? v : JSON.stringify(v));
  return [...new Set([...Object.keys(a), ...Object.keys(b)])]
    .filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]))
    .map((k) => `${k} ${show(a[k])} -> ${show(b[k])}`)
    .join(', ');
}

/**
 * What going from `a` to `b` changes, one line per rule, interface or
 * setting: `+ policy NAME {...}`, `- policy NAME`, `~ policy NAME: key old
 * -> new, ...` (NAME: the rule's name, else its key). `mup reload --check`.
 */
/**
 * The same rule, `where` aside (a file rule at another index is the same
 * rule): every other own field equal, compared as data (numbers, strings,
 * bigints, booleans, arrays, typed arrays, plain objects) whatever fields a
 * kind has, so a field added to a rule is compared without a word here.
 */
export function sameRule(a: Rule, b: Rule): boolean {
  return sameData(a, b, 'where');
}


/**
 * The table changes that take the tables from rule set `a` to `b` (a
 * reload): the rules of `b` that `a` has not, or has otherwise (sameRule),
 * and the keys of `a` that `b` has not; and how many rules are the same.
 * Learned rules are neither (both sets hold the same ones: adoptLearned).
 */
export function ruleSetChanges(a: RuleSet, b: RuleSet): RuleSetChanges {
  return runNow(ruleSetChanging(a, b));
}

/** Rules ruleSetChangesAsync compares between two turns of the event loop, at most (fewer when SLICE_MS is up first). */
export const DIFF_SLICE = 1024;

/** ruleSetChanges in slices of DIFF_SLICE rules, the event loop running between them (the caller holds the sets still). */
export function ruleSetChangesAsync(a: RuleSet, b: RuleSet): Promise<RuleSetChanges> {
  return runYielding(ruleSetChanging(a, b));
}

/** What ruleSetChanges finds between two rule sets. */
export interface RuleSetChanges {
  /** The table changes from the first set to the second. */
  readonly changes: Changes;
  /** Rules of the second set the first has the same (sameRule). */
  readonly same: number;
  /** The first set's rules (learned ones aside) the second has no rule for: how many, of how many. */
  readonly gone: number;
  readonly of: number;
  /** The first ten of them, "policy KEY (NAME)", for a message. */
  readonly goneShown: readonly string[];
}

function* ruleSetChanging(a: RuleSet, b: RuleSet): Generator<void, RuleSetChanges> {
  const changes: Record<string, unknown> = {};
  const goneShown: string[] = [];
  let same = 0;
  let n = 0;
  // By time as well: 1,024 comparisons of a reload's rules with the running ones took 29-38 ms a turn on a busy host.
  const clock = new SliceClock();
  const due = (): boolean => ++n % DIFF_SLICE === 0 || clock.tick();
  let gone = 0;
  let of = 0;
  for (const k of RULE_KIND_LIST) {
    const ra = a.rules(k.kind);
    const rb = b.rules(k.kind);
    const puts: Rule[] = [];
    const dels: Rule[] = [];
    for (const [key, r] of rb) {
      if (due()) yield;
      const was = ra.get(key);
      if (was !== undefined && sameRule(was, r)) same++;
      else puts.push(r);
    }
    for (const [key, r] of ra) {
      if (due()) yield;
      if (rb.has(key)) continue;
      dels.push(r);
      if (goneShown.length < 10) goneShown.push(`${k.label} ${key}${r.name === undefined ? '' : ` (${r.name})`}`);
    }
    gone += dels.length;
    of += ra.size;
    if (puts.length > 0) Object.assign(changes, k.put(puts));
    if (dels.length > 0) Object.assign(changes, k.del(dels));
  }
  return { changes: changes as Changes, same, gone, of, goneShown };
}

export function ruleSetDiff(a: RuleSet, b: RuleSet): string[] {
  return runNow(ruleSetDiffing(a, b));
}

/** ruleSetDiff in slices of about SLICE_MS, the event loop running between them (the caller holds the sets still). */
export function ruleSetDiffAsync(a: RuleSet, b: RuleSet): Promise<string[]> {
  return runYielding(ruleSetDiffing(a, b));
}

function* ruleSetDiffing(a: RuleSet, b: RuleSet): Generator<void, string[]> {
  const clock = new SliceClock();
  const out: string[] = [];
  const ia = new Map((a.config.interfaces ?? []).map((i) => [i.name, i.xdp]));
  const ib = new Map((b.config.interfaces ?? []).map((i) => [i.name, i.xdp]));
  for (const [n, x] of ib) {
    if (!ia.has(n)) out.push(`+ interface ${n} {"xdp":"${x}"}`);
    else if (ia.get(n) !== x) out.push(`~ interface ${n}: xdp ${ia.get(n)} -> ${x}`);
  }
  for (const n of ia.keys()) if (!ib.has(n)) out.push(`- interface ${n}`);
  const settings = fieldChanges(a.config.settings as unknown as Record<string, unknown>, b.config.settings as unknown as Record<string, unknown>);
  if (settings !== '') out.push(`~ settings: ${settings}`);
  for (const k of RULE_KIND_LIST) {
    const ra = a.rules(k.kind);
    const rb = b.rules(k.kind);
    const id = (key: string, r: Rule): string => r.name ?? key;
    for (const [key, r] of rb) {
      if (clock.tick()) yield;
      const was = ra.get(key);
      const now = k.json(r);
      if (was === undefined) out.push(`+ ${k.kind} ${id(key, r)} ${JSON.stringify(now)}`);
      else {
        const d = fieldChanges(k.json(was), now);
        if (d !== '') out.push(`~ ${k.kind} ${id(key, was)}: ${d}`);
      }
    }
    for (const [key, r] of ra) {
      if (clock.tick()) yield;
      if (!rb.has(key)) out.push(`- ${k.kind} ${id(key, r)}`);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// State file
//
// JSON lines. The first names the config the changes were made against;
// each further line is one change (a record), appended and fdatasync'ed
// before the API answers (about 0.4 ms here, whatever the number of changes
// so far):
//
//   {"mup_state":2,"instance":"default","config":{"file":"/etc/mup/mup.yaml","sha256":"..."},"savedAt":"..."}
//   {"put":"policy","rule":{"match":"10.45.0.0/16","sr_prefix":"2001:db8:b::/48",...},"base":null}
//   {"del":"localsid","key":"2001:db8:2::/48","base":"9f86d081884c7d65"}
//   {"batch":[{"put":...},{"del":...}]}      (several changes, one record: all or none)
//
// `base` is the digest (ruleDigest) of the config file's rule at that key
// when the change was made (null: the file had none); records without it
// (older daemons) count as made on an unknown rule. With it a start on a
// file edited since the header's can move the changes onto the new file
// (rebaseOverlay) instead of dropping them.
//
// Durability (docs/daemon.md, "Durability of API changes"):
// - a change is acknowledged only once its whole record is written and
//   fdatasync'ed; a write or sync that fails (a full disk: a short write,
//   then ENOSPC) is cut back off the file (ftruncate to the last whole
//   record), so the next record never lands on a partial line, and the
//   caller undoes the change (StateWriteError: 507 for a full disk, else 503);
// - a last line without its newline (a crash while appending) was never
//   acknowledged: it is dropped with a warning and cut off the file before
//   the next append; a bad line anywhere else is an error naming the line;
// - the file is rewritten with just the net changes (compaction: temp file,
//   fsync, rename, fsync of the directory) at start, at reload and when the
//   appended lines outnumber twice the net changes (and 1,024): that last one
//   in the background (compactSoon: the net changes as they were, written in
//   slices and synced off the event loop, then the records appended since
//   copied after them, synced, and the rename, in one turn). A rewrite is
//   housekeeping: when it fails the old file stays as it was (whole, every
//   acknowledged change in it), the temp file is removed and it is retried
//   later. Only when the file on disk is not one for the running config (none
//   yet, or set aside) is the next change recorded by a rewrite, and then
//   that rewrite is the change's record (it fails, the change is undone).

export const STATE_VERSION = 2;

export interface StateHeader {
  readonly mup_state: typeof STATE_VERSION;
  readonly instance: string;
  readonly config: { readonly file: string; readonly sha256: string };
  readonly savedAt: string;
}

/** One change; `base`: see above. */
export type StateChange = { put: RuleKind; rule: RuleJson; base?: string | null } | { del: RuleKind; key: string; base?: string | null };

/** One record: a change, or several applied together (all or none: one line, one fdatasync). */
export type StateLine = StateChange | { batch: StateChange[] };

/** A state line serialised already (JSON.stringify of a StateLine and its newline, as UTF-8): a batch's record, made in slices (src/daemon/batch.ts). */
export class JsonLine {
  constructor(readonly bytes: Buffer) {}
  /** The JSON text (without the newline). */
  get json(): string {
    return this.bytes.toString('utf8', 0, this.bytes.length - 1);
  }
}

export { sha256 } from '../host/sha-thread.js';

/** Bytes sha256Async hashes in one turn of the event loop (about 2 ms). */
const HASH_SLICE = 1 << 20;

/** sha256 of a large file's bytes, the event loop running between slices (11.6 MB hashed at once held it ~25 ms). */
export async function sha256Async(bytes: Buffer): Promise<string> {
  const h = createHash('sha256');
  for (let at = 0; at < bytes.length; at += HASH_SLICE) {
    if (at > 0) await nextTurn();
    h.update(bytes.subarray(at, at + HASH_SLICE));
  }
  return h.digest('hex');
}

/** Bytes of the file read at a time by sha256OfFile. */
export const FILE_HASH_CHUNK = 256 * 1024;

/**
 * The SHA-256 of a file's bytes, read FILE_HASH_CHUNK at a time (each read
 * on the threadpool, a turn of the loop between two): whether a reload's
 * file changed, without a buffer of the whole file. Reading the 11.6 MB
 * of bench:daemon's config whole left the daemon 18 MB larger after a
 * reload of the unchanged file (a SharedArrayBuffer that lives until V8's
 * next full collection, which an idle daemon does not run).
 */
export async function sha256OfFile(path: string): Promise<string> {
  const h = createHash('sha256');
  const fh = await openFile(path, 'r');
  try {
    const chunk = Buffer.allocUnsafe(FILE_HASH_CHUNK);
    for (;;) {
      const { bytesRead } = await fh.read(chunk, 0, chunk.length, null);
      if (bytesRead === 0) break;
      h.update(chunk.subarray(0, bytesRead));
    }
  } finally {
    await fh.close();
  }
  return h.digest('hex');
}

/** A change that could not be made durable; the API answers 507 (disk full) or 503, naming the file and the errno. */
export class StateWriteError extends RuleError {
  constructor(
    readonly file: string,
    /** errno name (ENOSPC, EIO, ...). */
    readonly errno: string,
    message: string,
    /**
     * The file at the path holds the change all the same: a rewrite renamed
     * into place whose directory could not be synced. The caller, having
     * undone the change, writes the file again without it (Daemon.#notSaved).
     */
    readonly inFile = false,
  ) {
    super(message, errno === 'ENOSPC' || errno === 'EDQUOT' ? 507 : 503);
  }
}

function errnoOf(e: unknown): string {
  return (e as NodeJS.ErrnoException).code ?? 'EIO';
}

/** Write all of `data` at the fd's position (a short write, e.g. on a full disk, continues; the next call then throws). */
function writeAll(fd: number, data: Buffer): void {
  let off = 0;
  while (off < data.length) {
    const n = writeSync(fd, data, off, data.length - off);
    if (n <= 0) throw Object.assign(new Error(`write returned ${n}`), { code: 'EIO' });
    off += n;
  }
}

/**
 * Write a file so that a crash leaves the old content or the new, never a
 * mix: temp, fsync, rename, fsync dir. A failure before the rename leaves
 * the old file untouched and removes the temp file (it would hold the space
 * a full disk needs back). `onDirSync` gets a failed fsync of the directory
 * (after the rename: the new file is in place, whole and synced).
 */
export function writeFileAtomic(path: string, data: string | Buffer, onDirSync?: (e: Error) => void, mode = 0o600, owner?: FileOwner): void {
  const tmp = `${path}.tmp-${process.pid}`;
  try {
    const fd = openSync(tmp, 'w', mode);
    try {
      ownTemp(fd, mode, owner);
      writeAll(fd, typeof data === 'string' ? Buffer.from(data) : data);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  } catch (e) {
    try {
      unlinkSync(tmp);
    } catch {
      // not created
    }
    throw e;
  }
  try {
    syncDir(dirname(path));
  } catch (e) {
    if (onDirSync === undefined) throw e;
    onDirSync(e as Error);
  }
}

export interface FileOwner {
  readonly uid: number;
  readonly gid: number;
}

/** The mode as given, not as the umask leaves it (a 0664 file saved over came back 0644), and the owner kept. */
function ownTemp(fd: number, mode: number, owner: FileOwner | undefined): void {
  fchmodSync(fd, mode);
  if (owner === undefined) return;
  try {
    fchownSync(fd, owner.uid, owner.gid);
  } catch (e) {
    // Not root (`mup config save --to` run by an operator): the file becomes the writer's, as a write always made it.
    if ((e as NodeJS.ErrnoException).code !== 'EPERM') throw e;
  }
}

/**
 * writeFileAtomic without holding the event loop (a daemon's `mup config
 * save`: its file is about 83 MB at 262,144 + 262,144 API rules): the
 * bytes written and the file fsync'ed on the threadpool, then the rename
 * and the directory's fsync. As writeFileAtomic: a failure before the
 * rename leaves the old file and no temp file; a failed fsync of the
 * directory after it rejects (the new file is in place). `data` must not
 * change until it settles. Once the temp file is synced, `o.wait` is
 * awaited, then `o.stop` asked, in the same synchronous run as the rename:
 * an error it gives is thrown, the temp file removed and nothing renamed.
 */
export async function writeFileAtomicSoon(path: string, data: Buffer, mode = 0o600, owner?: FileOwner, o: { wait?: Promise<unknown>; stop?: () => Error | undefined } = {}): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  try {
    const fh = await openFile(tmp, 'w', mode);
    try {
      ownTemp(fh.fd, mode, owner);
      await writeWhole(fh, data);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await o.wait;
    const stop = o.stop?.();
    if (stop !== undefined) throw stop;
    renameSync(tmp, path);
  } catch (e) {
    unlinkQuiet(tmp);
    throw e;
  }
  syncDir(dirname(path));
}

/**
 * Where a save of `path` writes, and what it keeps: the file a symlink
 * names (the rename would replace the link itself: a config kept in a
 * repository and linked into /etc/mup never got the save), with its mode
 * and owner (the temporary file's were the umask's and the daemon's: a
 * 0664 file of an operators' group came back 0644 root:root). Found in
 * review, session 43. A path that does not exist yet: itself, `mode`.
 */
export function saveTarget(path: string, mode = 0o644): { path: string; mode: number; owner?: { uid: number; gid: number } } {
  let real: string;
  try {
    real = realpathSync(path);
  } catch {
    return { path, mode };
  }
  try {
    const st = statSync(real);
    return { path: real, mode: st.mode & 0o7777, owner: { uid: st.uid, gid: st.gid } };
  } catch {
    return { path: real, mode };
  }
}

/** fsync a directory (a rename in it made durable). */
function syncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Remove a file if it is there. */
function unlinkQuiet(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // not there
  }
}

/** Digest of the config's rule at a key (RuleSet.base), for the records' `base`. */
export type BaseOf = (kind: RuleKind, key: string) => string | null;

/** Entries of the overlay whose state lines compactSoon and rewriteInSlices make in one turn of the event loop. */
export const COMPACT_SLICE = 500;

/** The temp files of background compactions and sliced rewrites: `<state file>.compacting-<pid>-<n>` (one name each: a dropped one's removal never takes a later one's file). */
const COMPACTING = '.compacting-';
let compactions = 0;

/** What a slice already written is replaced by in a compaction's list: its bytes let go as the file is written. */
const EMPTY = Buffer.alloc(0);

/** Free bytes a background compaction leaves besides twice its file, at least. */
const COMPACT_SPARE = 1 << 20;

/** After a background compaction failed, the next starts no sooner than this (ms): a full disk is not retried at every change. */
const COMPACT_RETRY_MS = 5000;

/** A background compaction under way (StateStore.compactSoon). */
interface Compaction {
  readonly tmp: string;
  readonly configSha: string;
  /** Records appended to the file since the compaction began: copied after its lines before the rename. */
  readonly tail: Buffer[];
  /** Superseded (a rewrite, a failed sync, close()): its temp file is removed, nothing renamed. */
  dropped: boolean;
}

/** The net changes of an overlay, per kind: the rules put (their keys made later, from each rule) and the keys deleted. */
type OverlaySnapshot = { readonly k: (typeof RULE_KIND_LIST)[number]; readonly puts: Iterable<Rule>; readonly dels: Iterable<string> }[];

/**
 * The overlay's own maps, walked as the lines are made. A reload's rewrite
 * holds the overlay unchanged meanwhile (its serial section). A background
 * compaction does not: a key changed while the walk is under way is met at
 * its value of some moment since the walk began, or not at all, or twice
 * (deleted and set again), as a Map's iterator meets it, and its record is
 * in the tail copied after the lines. Records put or delete a key whole, so
 * the file replays each key to its last record, or, for a key with no
 * record since the start, to the one value it had all along. That holds
 * for changes made and recorded in one turn; a caller that changes the
 * overlay over several turns before its record (a batch) holds the walk
 * meanwhile (StateStore.holdingCompaction). (A copy of every rule first took
 * up to 268 ms in one turn at a million + a million.)
 */
function overlayLive(o: Overlay): OverlaySnapshot {
  return RULE_KIND_LIST.map((k) => ({ k, puts: (o[k.overlay.put] as Map<string, Rule>).values(), dels: o[k.overlay.del] }));
}

/**
 * A state file of `header` and the snapshot's lines, made COMPACT_SLICE
 * lines a turn, each slice's bytes handed to `sink` (awaited) as one
 * Buffer; its number of lines, or 'dropped' as soon as `c.dropped` is seen
 * (checked each turn).
 */
async function snapshotLines(
  header: StateHeader,
  parts: OverlaySnapshot,
  base: BaseOf | undefined,
  c: { readonly dropped: boolean },
  sink: (block: Buffer) => void | Promise<void>,
  held?: () => Promise<void> | undefined,
): Promise<number | 'dropped'> {
  await sink(Buffer.from(`${JSON.stringify(header)}\n`));
  let text: string[] = [];
  let made = 0;
  // Before each line: a slice's bytes to the sink and a turn of the loop every COMPACT_SLICE lines.
  const slice = async (): Promise<boolean> => {
    if (made % COMPACT_SLICE === 0) {
      if (made > 0) {
        await sink(Buffer.from(text.join('')));
        text = [];
        await nextTurn();
      }
      // Not a turn between this and the slice's lines: the overlay met is one with a record for every change.
      for (let h = held?.(); h !== undefined; h = held?.()) await h;
      if (c.dropped) return false;
    }
    made++;
    return true;
  };
  for (const { k, puts, dels } of parts) {
    for (const r of puts) {
      if (!(await slice())) return 'dropped';
      const key = k.key(r);
      const line: StateLine = { put: k.kind, rule: k.json(r), ...(base === undefined ? {} : { base: base(k.kind, key) }) };
      text.push(`${JSON.stringify(line)}\n`);
    }
    for (const key of dels) {
      if (!(await slice())) return 'dropped';
      const line: StateLine = { del: k.kind, key, ...(base === undefined ? {} : { base: base(k.kind, key) }) };
      text.push(`${JSON.stringify(line)}\n`);
    }
  }
  if (text.length > 0) await sink(Buffer.from(text.join('')));
  return made;
}

/**
 * snapshotLines into a Buffer a slice, kept as they are: one Buffer of the
 * whole file was a copy of it in one turn (1.7 s for 427 MB at a million +
 * a million API rules), and one string of it stops at V8's longest, 512 MiB.
 */
async function snapshotBlocks(
  header: StateHeader,
  parts: OverlaySnapshot,
  base: BaseOf | undefined,
  c: { readonly dropped: boolean },
  held: () => Promise<void> | undefined,
): Promise<{ blocks: Buffer[]; bytes: number; lines: number } | 'dropped'> {
  const blocks: Buffer[] = [];
  let bytes = 0;
  const lines = await snapshotLines(
    header,
    parts,
    base,
    c,
    (b) => {
      blocks.push(b);
      bytes += b.length;
    },
    held,
  );
  if (lines === 'dropped') return 'dropped';
  return { blocks, bytes, lines };
}

/** All of `b` written at the file's current position (a write may take part of it). */
async function writeWhole(fh: FileHandle, b: Buffer): Promise<void> {
  for (let at = 0; at < b.length; ) at += (await fh.write(b, at, b.length - at)).bytesWritten;
}

/** A state file's first line: the file names the config it holds the changes of. */
function stateHeader(instance: string, configFile: string, configSha: string): StateHeader {
  return { mup_state: STATE_VERSION, instance, config: { file: configFile, sha256: configSha }, savedAt: new Date().toISOString() };
}

/** Newlines in buf[0, end). */
function countNewlines(buf: Buffer, end: number): number {
  let n = 0;
  for (let at = buf.indexOf(0x0a); at >= 0 && at < end; at = buf.indexOf(0x0a, at + 1)) n++;
  return n;
}

/**
 * Lines as the file's bytes: each JSON'd with its newline, joined a block
 * at a time, the blocks as Buffers (one string of them all stops at V8's
 * longest, 512 MiB: about two million sessions' records).
 */
export function jsonLinesBytes(items: Iterable<unknown>, block = 4096): Buffer {
  const blocks: Buffer[] = [];
  let text: string[] = [];
  for (const x of items) {
    text.push(`${JSON.stringify(x)}\n`);
    if (text.length === block) {
      blocks.push(Buffer.from(text.join('')));
      text = [];
    }
  }
  if (text.length > 0) blocks.push(Buffer.from(text.join('')));
  return blocks.length === 1 ? blocks[0]! : Buffer.concat(blocks);
}

function overlayLines(o: Overlay, base?: BaseOf): StateLine[] {
  const b = (kind: RuleKind, key: string): { base?: string | null } => (base === undefined ? {} : { base: base(kind, key) });
  return RULE_KIND_LIST.flatMap((k) => [
    ...[...(o[k.overlay.put] as Map<string, Rule>).entries()].map(([key, r]): StateLine => ({ put: k.kind, rule: k.json(r), ...b(k.kind, key) })),
    ...[...o[k.overlay.del]].map((key): StateLine => ({ del: k.kind, key, ...b(k.kind, key) })),
  ]);
}

/** "<kind> <key>" -> the base digest its last record gave (null: no file rule; absent key: not known). */
export type Bases = Map<string, string | null>;

/** Apply one change line to an overlay (as RuleSet.put / delete do; a delete without a base of a key the file has not is dropped by the RuleSet, or absorbed by the rebase of an edited file). */
function applyLine(o: Overlay, line: StateLine, where: string, bases?: Bases, rows?: { readonly of: RuleRows; readonly left: number }): void {
  const base = (kind: RuleKind, key: string, b: unknown): void => {
    if (bases === undefined) return;
    if (b === null || typeof b === 'string') bases.set(`${kind} ${key}`, b);
    else bases.delete(`${kind} ${key}`);
  };
  // One of batch, put and del: a record with two was read as the first (the other part quietly dropped).
  const parts = ['batch', 'put', 'del'].filter((p) => p in line);
  if (parts.length > 1) throw new Error(`${where}: a record is one of batch, put and del, not ${parts.join(' and ')}`);
  if ('batch' in line && Array.isArray(line.batch)) {
    // All of a batch or none of it: check every change before applying one.
    const trial = emptyOverlay();
    for (const [i, c] of line.batch.entries()) {
      if (typeof c !== 'object' || c === null || 'batch' in c) throw new Error(`${where}: batch[${i}]: not a change`);
      applyLine(trial, c, `${where}: batch[${i}]`);
    }
    // Its sessions and policies kept as rows, as the batch kept them (src/daemon/batch.ts).
    const of = line.batch.length >= BATCH_ROWS_FROM ? new RuleRows(where) : undefined;
    for (let i = 0; i < line.batch.length; i++) applyLine(o, line.batch[i]!, where, bases, of === undefined ? undefined : { of, left: line.batch.length - i });
    of?.trim();
  } else if ('put' in line) {
    const k = ruleKind(line.put);
    if (k === undefined) throw new Error(`${where}: unknown table ${JSON.stringify(line.put)}`);
    const parsed = k.parse(line.rule, where);
    const key = k.key(parsed);
    const r = rows === undefined || k.kind === 'localsid' ? parsed : k.kind === 'session' ? rows.of.session(parsed as Session, rows.left) : rows.of.policy(parsed as Policy, rows.left);
    (o[k.overlay.put] as Map<string, Rule>).set(key, r);
    o[k.overlay.del].delete(key);
    base(k.kind, key, line.base);
  } else if ('del' in line && typeof line.key === 'string') {
    const k = ruleKind(line.del);
    if (k === undefined) throw new Error(`${where}: unknown table ${JSON.stringify(line.del)}`);
    const key = k.canonicalKey(line.key);
    o[k.overlay.put].delete(key);
    // A delete of a rule the file did not have (base null: a rule the API added) leaves no delete
    // entry, as RuleSet.delete keeps none: replayed, it was kept, written by every compaction and counted as
    // a change, one entry per key ever deleted. Without a base (an older file) it is kept, as always.
    if (line.base === null) o[k.overlay.del].delete(key);
    else o[k.overlay.del].add(key);
    base(k.kind, key, line.base);
  } else {
    throw new Error(`${where}: neither a put nor a del`);
  }
}

export interface StateRead {
  readonly header: StateHeader;
  readonly overlay: Overlay;
  /** What the config file said at each changed key when the change was made (rebaseOverlay's `base`). */
  readonly bases: Bases;
  /** A last line cut short (never acknowledged) was ignored; it is cut off the file before the next append. */
  readonly torn: boolean;
  /** Its line number and length, when torn. */
  readonly tornAt?: { readonly line: number; readonly bytes: number };
}

export class StateStore {
  /** Tests: the group commit's fdatasyncs fail with this errno (EIO), as a disk that refuses them would. */
  testFailSyncs: string | undefined;
  /** Tests: the fsync of the directory after a rewrite's or a compaction's rename fails with this errno (EIO). */
  testFailDirSyncs: string | undefined;

  /** Tests: with testFailDirSyncs, only this many fail (then it is cleared). */
  testFailDirSyncsLeft: number | undefined;
  /** Tests: a group's fdatasync answers only once this resolves (its group stays in flight meanwhile). */
  testSyncGate: Promise<void> | undefined;

  /** testFailSyncs's refusal of an fdatasync, or undefined. */
  #injectedSyncError(): NodeJS.ErrnoException | undefined {
    const code = this.testFailSyncs;
    return code === undefined ? undefined : Object.assign(new Error(`${code}: fdatasync refused (injected by a test)`), { code });
  }

  #injectedDirError(): Error | undefined {
    const code = this.testFailDirSyncs;
    if (code === undefined) return undefined;
    if (this.testFailDirSyncsLeft !== undefined && --this.testFailDirSyncsLeft <= 0) {
      this.testFailDirSyncs = undefined;
      this.testFailDirSyncsLeft = undefined;
    }
    return Object.assign(new Error(`${code}: fsync of the directory refused (injected by a test)`), { code });
  }

  /**
   * A rename of the file (a rewrite that stood, a compaction) whose
   * directory's fsync failed: a crash may take the rename back, and with it
   * every record appended to the new file since. The next record's sync
   * syncs the directory too before it is acknowledged (#dirOwed), and is
   * refused if that fails again.
   */
  #dirUnsynced = false;

  /** The directory's fsync a failed one left owed, now: undefined when none is owed or it worked. */
  #dirOwed(): NodeJS.ErrnoException | undefined {
    if (!this.#dirUnsynced) return undefined;
    try {
      const injected = this.#injectedDirError();
      if (injected !== undefined) throw injected;
      syncDir(dirname(this.path));
    } catch (e) {
      return Object.assign(new Error(`the fsync of its directory, owed since a rename, failed again: ${(e as Error).message}`), { code: errnoOf(e) });
    }
    this.#dirUnsynced = false;
    return undefined;
  }
  #fd: number | undefined;
  /** Inode and device of #fd, to tell whether the path still names it. */
  #ino = 0;
  #dev = 0;
  /** Change lines in the file. */
  #lines = 0;
  /** Bytes of the file up to its last whole record (undefined: not read or written by this store yet). */
  #size: number | undefined;
  /** The config hash in the header of the file on disk (undefined: no file of ours, e.g. set aside). */
  #sha: string | undefined;
  /** Group commit: the records being fdatasync'ed now, and those written since that sync started (the next group). */
  #inflight: SyncGroup | undefined;
  #queued: PendingRecord[] = [];
  /** A sync of the queued records is to start after this turn of the event loop. */
  #syncSoon = false;
  /** An fd whose close waits for the fdatasync running on it. */
  #closeAfterSync = false;
  /** fdatasync calls that made records durable, and the records they covered (status: state.syncs, state.records). */
  #syncs = 0;
  #records = 0;
  /** Called once no record waits for an fdatasync (and no refused record's undo runs). */
  #idle: (() => void)[] = [];
  /** The undos of a failed sync's records, while they run (#failFrom): newest first, each awaited. */
  #undoing: Promise<void> | undefined;
  #rewrites = 0;
  /** Set while a caller changes the overlay without a record yet (holdingCompaction): the compaction's walk waits. */
  #walkHeld: Promise<void> | undefined;

  /** The background compaction under way (compactSoon), if one is. */
  #compacting: Compaction | undefined;
  /** A rewriteInSlices under way (dropped, as a compaction is, by a rewrite() or close() meanwhile). */
  #slicedRewrite: { dropped: boolean } | undefined;
  /** No background compaction starts before this (performance.now() ms): one failed. */
  #compactAfter = 0;
  get syncs(): number {
    return this.#syncs;
  }
  get records(): number {
    return this.#records;
  }

  /** Change lines in the file now. */
  get lines(): number {
    return this.#lines;
  }

  /** Whole-file rewrites begun: rewrite()'s (start, save, a file not for this config), on the event loop, and rewriteInSlices' (a reload), dropped ones included; compactSoon's are not counted. */
  get rewrites(): number {
    return this.#rewrites;
  }

  constructor(readonly path: string) {}

  /**
   * Read the file into an overlay. Undefined when there is none; throws with
   * the file and line named when a line is invalid (the daemon then refuses
   * to start rather than guess). A last line cut short is ignored (`torn`).
   */
  read(): StateRead | undefined {
    let buf: Buffer;
    try {
      buf = readFileSync(this.path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new Error(`cannot read the state file ${this.path}: ${(e as Error).message}`);
    }
    const aside = 'move it aside to start from the config file alone';
    // Up to the last newline: whole records. After it: a record cut short.
    const whole = buf.lastIndexOf(0x0a) + 1;
    // Line by line from the bytes: the file as one string stops at V8's longest (512 MiB), which a file of
    // two million sessions' records passes (found in review: the start failed with ERR_STRING_TOO_LONG,
    // naming neither file nor line).
    const lineAt = (from: number, end: number, n: number): string => {
      try {
        return buf.toString('utf8', from, end);
      } catch (e) {
        throw new Error(`state file ${this.path}:${n} cannot be read (${(e as Error).message}); ${aside}`);
      }
    };
    if (whole === 0) throw new Error(`state file ${this.path} is empty or cut short; ${aside}`);
    let header: StateHeader;
    try {
      header = JSON.parse(lineAt(0, buf.indexOf(0x0a), 1)) as StateHeader;
    } catch (e) {
      throw new Error(`state file ${this.path}:1 is not JSON (${(e as Error).message}); ${aside}`);
    }
    if (header?.mup_state !== STATE_VERSION || typeof header.config?.sha256 !== 'string') {
      throw new Error(`state file ${this.path}: not a version ${STATE_VERSION} state file; ${aside}`);
    }
    const overlay = emptyOverlay();
    const bases: Bases = new Map();
    let n = 2;
    for (let at = buf.indexOf(0x0a) + 1; at < whole; n++) {
      const end = buf.indexOf(0x0a, at);
      const where = `${this.path}:${n}`;
      try {
        applyLine(overlay, JSON.parse(lineAt(at, end, n)) as StateLine, where, bases);
      } catch (e) {
        // The records in the file, counted only for this message (one pass over the bytes at a start is enough).
        const changes = countNewlines(buf, whole) - 1;
        // A rule this version's checks refuse (an earlier version took it: the mtu floor of session 43) is not damage.
        const why = e instanceof ConfigError ? "this version refuses the rule this record puts (an earlier version may have taken it)" : 'this record is damaged';
        throw new Error(
          `state file ${where}: ${(e as Error).message}; ${why}: fix or delete line ${n} ` +
            `(the other ${changes - 1} changes are kept), or ${aside} (dropping all ${changes})`,
        );
      }
      at = end + 1;
    }
    this.close();
    this.#ino = this.#dev = 0; // the file read is the one the next #open takes
    // n: the line after the last whole one.
    this.#lines = n - 2;
    this.#size = whole;
    this.#sha = header.config.sha256;
    const torn = whole < buf.length;
    return { header, overlay, bases, torn, ...(torn ? { tornAt: { line: n, bytes: buf.length - whole } } : {}) };
  }

  /** The file on disk is one for the config with this hash (its records replay to what the daemon holds). */
  isFor(configSha: string): boolean {
    return this.#sha === configSha;
  }

  /** The file on disk does not replay to what the daemon holds: the next change writes it whole (rewrite), not an append. */
  forgetFile(): void {
    this.close();
    this.#sha = undefined;
  }

  /**
   * Replace the file with a header and the net changes of `o` (atomic).
   * Throws StateWriteError; the file is then as it was. A failed fsync of
   * the directory after the rename goes to `onDirSync` (the new file is in
   * place; throws without one, a StateWriteError with `inFile`).
   */
  rewrite(instance: string, configFile: string, configSha: string, o: Overlay, base?: BaseOf, onDirSync?: (e: Error) => void): void {
    this.#rewrites++;
    this.#dropCompaction();
    const header = stateHeader(instance, configFile, configSha);
    const body = overlayLines(o, base);
    const data = jsonLinesBytes([header, ...body]);
    let dirError: Error | undefined;
    try {
      makeDirs(dirname(this.path), 0o700);
      writeFileAtomic(this.path, data, (e) => {
        dirError = e;
      });
    } catch (e) {
      throw new StateWriteError(this.path, errnoOf(e), `cannot write the state file ${this.path} (${(e as Error).message})`);
    }
    this.#rewritten(configSha, body.length, data.length, dirError, onDirSync);
  }

  /**
   * rewrite(), without holding the event loop: the lines are made
   * COMPACT_SLICE a turn (as a compaction's), written to a temp file and
   * fsync'ed on the threadpool, then renamed over the file and the
   * directory synced in one turn. For a reload, in its serial section (no
   * change is recorded meanwhile): with 262,144 API sessions and as many
   * policies, rewrite() held the loop 3.4 s. The overlay must not change
   * until it resolves. A rewrite() or close() meanwhile drops it (its temp
   * file removed, nothing renamed; it resolves). Rejects with a
   * StateWriteError as rewrite() throws: the file is then as it was.
   */
  async rewriteInSlices(instance: string, configFile: string, configSha: string, o: Overlay, base?: BaseOf, onDirSync?: (e: Error) => void): Promise<void> {
    this.#rewrites++;
    this.#dropCompaction();
    const job = { dropped: false };
    this.#slicedRewrite = job;
    // Named as a compaction's temp file: one a kill leaves is removed at the next start (removeStaleCompactions).
    const tmp = `${this.path}${COMPACTING}${process.pid}-${++compactions}`;
    const header = stateHeader(instance, configFile, configSha);
    let renamed = false;
    let dirError: Error | undefined;
    let lines: number | 'dropped';
    let size = 0;
    try {
      makeDirs(dirname(this.path), 0o700);
      const fh = await openFile(tmp, 'w', 0o600);
      try {
        await fh.chmod(0o600);
        // Each slice's lines written as they are made: the whole file as one Buffer (427 MB with a million
        // API sessions and a million policies) was a copy of 1.7 s in one turn, and as much memory again.
        lines = await snapshotLines(header, overlayLive(o), base, job, async (b) => {
          await writeWhole(fh, b);
          size += b.length;
        });
        if (lines !== 'dropped') await fh.sync();
      } finally {
        await fh.close().catch(() => undefined);
      }
      // One turn from here to #replaced, no await in it.
      if (lines === 'dropped' || job.dropped) return;
      renameSync(tmp, this.path);
      renamed = true;
      try {
        syncDir(dirname(this.path));
      } catch (e) {
        dirError = e as Error;
      }
    } catch (e) {
      throw new StateWriteError(this.path, errnoOf(e), `cannot write the state file ${this.path} (${(e as Error).message})`);
    } finally {
      if (!renamed) unlinkQuiet(tmp);
      if (this.#slicedRewrite === job) this.#slicedRewrite = undefined;
    }
    this.#rewritten(configSha, lines, size, dirError, onDirSync);
  }

  /**
   * The end of a whole rewrite renamed into place (rewrite(), rewriteInSlices):
   * the records waiting settled (or refused, the directory's fsync having
   * failed), the store on the new file; a failed directory fsync then to
   * `onDirSync`, or thrown without one (a StateWriteError with `inFile`).
   */
  #rewritten(configSha: string, lines: number, size: number, dirError: Error | undefined, onDirSync: ((e: Error) => void) | undefined): void {
    dirError ??= this.#injectedDirError();
    if (dirError === undefined) this.#settleAll();
    else this.#refuseWaiting(dirError);
    this.#replaced(configSha, lines, size, dirError === undefined);
    if (dirError !== undefined) {
      if (onDirSync === undefined) {
        throw new StateWriteError(this.path, errnoOf(dirError), `cannot sync the directory of the state file ${this.path} (${dirError.message})`, true);
      }
      onDirSync(dirError);
    }
  }

  /**
   * The file at the path is a new one (its records settled or refused by the
   * caller): appends go to it. `dirSynced` false: its rename may not survive
   * a crash, and the next record's sync syncs the directory first (#dirOwed).
   */
  #replaced(configSha: string, lines: number, size: number, dirSynced: boolean): void {
    this.#dirUnsynced = !dirSynced;
    this.close(); // the old file's fd: appends go to the new file
    this.#ino = this.#dev = 0; // the old file's: #appendsTo never takes it for the new one
    this.#lines = lines;
    this.#size = size;
    this.#sha = configSha;
  }

  /**
   * Append one change and make it durable. On failure the partial record is
   * cut off again (the file ends with its last whole record) and a
   * StateWriteError is thrown: the caller undoes the change.
   */
  append(line: StateLine): void {
    this.#write(line, (fd) => {
      fdatasyncSync(fd);
      const owed = this.#dirOwed();
      if (owed !== undefined) throw owed;
    });
    this.#syncs++;
    this.#records++;
  }

  /**
   * Write one record at the end of the file (and run `then` on its fd, e.g.
   * fdatasync); on failure the file is cut back to its last whole record
   * and a StateWriteError is thrown. Returns the record's length.
   */
  #write(line: StateLine | JsonLine, then?: (fd: number) => void): number {
    const data = line instanceof JsonLine ? line.bytes : Buffer.from(`${JSON.stringify(line)}\n`);
    // A record appended while a sliced rewrite runs (its caller keeps changes out: this is not expected) is in
    // the file that rewrite would rename over: the rewrite is dropped, not the record.
    this.#dropSlicedRewrite();
    const compacting = this.#compacting;
    let fd: number;
    try {
      fd = this.#open();
    } catch (e) {
      throw new StateWriteError(this.path, errnoOf(e), `cannot open the state file ${this.path} (${(e as Error).message})`);
    }
    const good = this.#size!;
    try {
      writeAll(fd, data);
      then?.(fd);
    } catch (e) {
      this.#cutBack(fd, good);
      throw new StateWriteError(this.path, errnoOf(e), `cannot write the state file ${this.path} (${(e as Error).message})`);
    }
    this.#size = good + data.length;
    this.#lines++;
    compacting?.tail.push(data);
    return data.length;
  }

  /** A background compaction is under way. */
  get compacting(): boolean {
    return this.#compacting !== undefined;
  }

  /**
   * Compaction in the background (what wantsCompaction asks for, without
   * holding the event loop: with 10,000 API changes in the overlay a
   * rewrite() took 200 ms of it). The net changes of `o`: their state
   * lines are made COMPACT_SLICE entries a turn from the overlay's maps as
   * they are then (overlayLive says why that is the file's changes; the
   * rules are never changed in place), written a slice a write to a temp
   * file and fdatasync'ed on the threadpool. Then, in one turn: the records
   * appended since it began are written after them and synced, the temp file renamed over the file, the directory
   * synced; records still waiting for their group's fdatasync are durable
   * with it (as after rewrite()), or, if the directory's fsync failed, once
   * the old file they were appended to is synced (#settleInOldFile). A rewrite() meanwhile (reload, save), a
   * failed group sync, or close() drops it (its temp file removed, nothing
   * renamed). `done` is told how it ended: 'compacted' (with the error of
   * the directory's fsync after the rename, if it failed: logged only),
   * 'dropped', or the error (after which none starts for COMPACT_RETRY_MS).
   * It is not started without free space for twice the new file and
   * COMPACT_SPARE (an error too): records must still find room meanwhile. Does nothing when one is under way or the
   * file is not one for this config (the next record rewrites it whole).
   */
  compactSoon(instance: string, configFile: string, configSha: string, o: Overlay, base: BaseOf | undefined, done: (end: 'compacted' | 'dropped' | StateWriteError, dirError?: Error) => void): void {
    if (this.#compacting !== undefined || this.#slicedRewrite !== undefined || !this.isFor(configSha) || performance.now() < this.#compactAfter) return;
    const c: Compaction = { tmp: `${this.path}${COMPACTING}${process.pid}-${++compactions}`, configSha, tail: [], dropped: false };
    this.#compacting = c;
    const header = stateHeader(instance, configFile, configSha);
    const parts = overlayLive(o);
    const run = async (): Promise<'compacted' | 'dropped'> => {
      const made = await snapshotBlocks(header, parts, base, c, () => this.#walkHeld);
      if (made === 'dropped') return 'dropped';
      const { blocks, bytes, lines } = made;
      // Room for the new file and as much again: records appended meanwhile must not find the disk full
      // because of it (a rewrite on the loop removed its temp file in the same turn; this one holds it a while).
      const fs = await statfs(dirname(this.path));
      const free = fs.bavail * fs.bsize;
      const need = 2 * bytes + COMPACT_SPARE;
      if (free < need) {
        throw new StateWriteError(this.path, 'ENOSPC', `not compacting the state file ${this.path}: ${free} bytes free, ${need} wanted (the new file and as much again)`);
      }
      const fh = await openFile(c.tmp, 'w', 0o600);
      let renamed = false;
      try {
        // A slice a write, each on the threadpool: a turn here is one slice's write call, not a copy of the file.
        for (let i = 0; i < blocks.length; i++) {
          await writeWhole(fh, blocks[i]!);
          blocks[i] = EMPTY;
        }
        await fh.datasync();
        // One turn from here to #replaced, no await in it (a record appended after the rename but before
        // #replaced would find the path naming another file and write the whole file): the records appended
        // meanwhile, then the rename; unless the file at the path is no longer the one appended to (moved
        // aside or replaced under the daemon: the next record writes it whole).
        const at = statSync(this.path, { throwIfNoEntry: false });
        if (at === undefined || this.#fd === undefined || at.ino !== this.#ino || at.dev !== this.#dev) c.dropped = true;
        if (c.dropped) return 'dropped';
        const tail = Buffer.concat(c.tail);
        if (tail.length > 0) {
          writeAll(fh.fd, tail);
          fdatasyncSync(fh.fd);
        }
        renameSync(c.tmp, this.path);
        renamed = true;
        try {
          syncDir(dirname(this.path));
        } catch (e) {
          // Logged only, as rewrite()'s: the new file is in place, whole and synced.
          dirError = e as Error;
        }
        dirError ??= this.#injectedDirError();
        this.#compacting = undefined;
        // The records appended meanwhile are in both files; the old one is what a crash may leave at the path.
        if (dirError === undefined) this.#settleAll();
        else this.#settleInOldFile(dirError);
        this.#replaced(configSha, lines + c.tail.length, bytes + tail.length, dirError === undefined);
      } finally {
        // Its space given back at once (the name first: a failed close must not leave the file).
        if (!renamed) unlinkQuiet(c.tmp);
        await fh.close().catch(() => undefined);
      }
      return 'compacted';
    };
    let dirError: Error | undefined;
    run().then(
      (end) => {
        if (this.#compacting === c) this.#compacting = undefined;
        done(end, dirError);
      },
      (e: unknown) => {
        if (this.#compacting === c) this.#compacting = undefined;
        c.dropped = true;
        this.#compactAfter = performance.now() + COMPACT_RETRY_MS;
        done(e instanceof StateWriteError ? e : new StateWriteError(this.path, errnoOf(e), `cannot compact the state file ${this.path} (${(e as Error).message})`));
      },
    );
  }

  /**
   * Remove what a compaction or a sliced rewrite killed part way left (`<file>.compacting-*`).
   * Only by the daemon that holds the state file's lock: a reader that
   * does not (a daemon that will be refused, `mup daemon --check`) removed
   * the running daemon's compaction under it.
   */
  removeStaleCompactions(): void {
    const dir = dirname(this.path);
    const prefix = `${basename(this.path)}${COMPACTING}`;
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return;
    }
    for (const n of names) if (n.startsWith(prefix)) unlinkQuiet(join(dir, n));
  }

  /** A sliced rewrite is superseded: it renames nothing (it removes its temp file and resolves). */
  #dropSlicedRewrite(): void {
    if (this.#slicedRewrite !== undefined) {
      this.#slicedRewrite.dropped = true;
      this.#slicedRewrite = undefined;
    }
  }

  /**
   * `f`, with a background compaction's walk of the overlay held (before it
   * reads its next entry) until `f` has settled: for a caller that changes
   * the overlay over several turns before its record is appended (a batch),
   * changes the walk must not meet without their record in its tail. One
   * holder at a time (the daemon's serial section).
   */
  async holdingCompaction<T>(f: () => Promise<T>): Promise<T> {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    this.#walkHeld = held;
    try {
      return await f();
    } finally {
      if (this.#walkHeld === held) this.#walkHeld = undefined;
      release();
    }
  }

  /** A background compaction (or a sliced rewrite) is superseded: it renames nothing (its run removes its temp file). */
  #dropCompaction(): void {
    this.#dropSlicedRewrite();
    if (this.#compacting === undefined) return;
    this.#compacting.dropped = true;
    this.#compacting = undefined;
  }

  /**
   * Record one change (or one batch, `{ batch: [...] }`: one record, all or
   * none; POST /v1/batch): appended to the file if the file is one for this
   * config, else by writing the whole file (header and `after`, the overlay
   * with the change). Throws StateWriteError: not recorded.
   */
  commit(line: StateLine, instance: string, configFile: string, configSha: string, after: Overlay, base?: BaseOf): void {
    if (this.isFor(configSha)) {
      try {
        this.append(line);
        return;
      } catch (e) {
        if (this.isFor(configSha)) throw e;
        // The file was removed, replaced or cut short under us: write it whole.
      }
    }
    this.rewrite(instance, configFile, configSha, after, base);
  }

  /**
   * Group commit (docs/daemon.md, "Group commit"): write one change's record
   * now and resolve once an fdatasync that started after the write has
   * returned. Records written while a sync runs wait for the next one, which
   * covers them all: N concurrent changes share about N / (changes per sync
   * time) fsyncs, and none is acknowledged before its record is durable.
   *
   * Throws StateWriteError (nothing written; the caller undoes its change)
   * when the record cannot be written. When the fdatasync fails, the file is
   * cut back to its last durable record and every record past it (this
   * group and the one waiting) is refused: their `undo`s run newest first
   * (each puts back what its change replaced), then their promises reject.
   * As commit(): a file not (or no longer) for this config is written whole
   * instead, which makes every waiting record durable at once.
   */
  commitGrouped(line: StateLine | JsonLine, undo: () => void | Promise<void>, instance: string, configFile: string, configSha: string, after: Overlay, base?: BaseOf): Promise<void> {
    if (this.isFor(configSha)) {
      try {
        return this.#appendGrouped(line, undo);
      } catch (e) {
        if (this.isFor(configSha)) throw e;
        // The file was removed, replaced or cut short under us: write it whole.
      }
    }
    this.rewrite(instance, configFile, configSha, after, base);
    return Promise.resolve();
  }

  #appendGrouped(line: StateLine | JsonLine, undo: () => void | Promise<void>): Promise<void> {
    const bytes = this.#write(line);
    const done = new Promise<void>((resolve, reject) => this.#queued.push({ resolve, reject, undo, bytes }));
    if (this.#inflight === undefined && !this.#syncSoon) {
      // Not at once: after the I/O this turn of the event loop has read, so
      // that the changes it brings share the sync (setImmediate: no timer wait).
      this.#syncSoon = true;
      setImmediate(() => {
        this.#syncSoon = false;
        if (this.#inflight === undefined && this.#queued.length > 0 && this.#fd !== undefined) this.#startSync();
      });
    }
    return done;
  }

  /** fdatasync the records queued so far, on the threadpool (the event loop takes more changes meanwhile). */
  #startSync(): void {
    const fd = this.#fd!;
    const group: SyncGroup = { fd, records: this.#queued, from: this.#size! - this.#queued.reduce((n, r) => n + r.bytes, 0), settled: false };
    this.#queued = [];
    this.#inflight = group;
    const injected = this.#injectedSyncError();
    const gate = this.testSyncGate;
    const sync =
      injected !== undefined
        ? (_fd: number, cb: (e: NodeJS.ErrnoException | null) => void): void => void setImmediate(() => cb(injected))
        : gate !== undefined
          ? (f: number, cb: (e: NodeJS.ErrnoException | null) => void): void => fdatasync(f, (e) => void gate.then(() => cb(e)))
          : fdatasync;
    sync(fd, (synced) => {
      this.#inflight = undefined;
      const closing = this.#closeAfterSync && this.#fd !== fd;
      this.#closeAfterSync = false;
      if (!group.settled) {
        group.settled = true;
        const err = synced ?? this.#dirOwed() ?? null;
        if (err === null) {
          this.#syncs++;
          this.#records += group.records.length;
          for (const r of group.records) r.resolve();
        } else {
          this.#failFrom(group, err);
        }
      }
      if (closing) {
        // close() came while this group was in flight, with records written to this fd after it: no
        // next append would sync them (the fd is gone), and everything awaiting idle() (a batch, a
        // reload, a BGP apply, in the serial section) would wait for ever. Synced here, once.
        if (this.#fd === undefined && this.#queued.length > 0) this.#syncLate(fd);
        closeSync(fd);
      }
      if (this.#queued.length > 0 && this.#fd !== undefined) this.#startSync();
      else this.#wake();
    });
  }

  /** The records queued on `fd`, being closed: one fdatasync on this thread, then acknowledged or refused. */
  #syncLate(fd: number): void {
    // Appended to this file (through `fd`, or an fd opened on it since): the last ones in it.
    const from = this.#size! - this.#queued.reduce((n, r) => n + r.bytes, 0);
    const group: SyncGroup = { fd, records: this.#queued, from, settled: true };
    this.#queued = [];
    try {
      const injected = this.#injectedSyncError();
      if (injected !== undefined) throw injected;
      fdatasyncSync(fd);
      const owed = this.#dirOwed();
      if (owed !== undefined) throw owed;
    } catch (e) {
      this.#failFrom(group, e as NodeJS.ErrnoException);
      return;
    }
    this.#syncs++;
    this.#records += group.records.length;
    for (const r of group.records) r.resolve();
  }

  /**
   * Resolves once no record waits for its fdatasync: a reload or a save
   * (which replace the rule set the records' undos would put back into)
   * waits for it first.
   */
  idle(): Promise<void> {
    if (this.isIdle) return Promise.resolve();
    return new Promise((r) => this.#idle.push(r));
  }

  /**
   * A failed sync's records are being undone (an undo may write in slices,
   * the event loop running): no other change may write the tables or the
   * rule set meanwhile (the undos put back what each record's change
   * found), and health does not compare them.
   */
  get undoing(): boolean {
    return this.#undoing !== undefined;
  }

  /** No record waits for its fdatasync and no undo runs (what idle() waits for). */
  get isIdle(): boolean {
    return this.#inflight === undefined && this.#queued.length === 0 && this.#undoing === undefined;
  }

  /** Resolves once no undo runs (at once when none does). */
  async undone(): Promise<void> {
    while (this.#undoing !== undefined) await this.#undoing;
  }

  #wake(): void {
    if (!this.isIdle) return;
    const w = this.#idle;
    this.#idle = [];
    for (const f of w) f();
  }

  /**
   * A rewrite renamed into place whose directory could not be synced: the
   * records waiting for a group's fdatasync are in the new file, which a
   * crash may take back (the old one, removed under the daemon or for another
   * config, holds them nowhere durable), so none is acknowledged. They are
   * undone and refused as a failed sync's are, with `inFile`: the file holds
   * them, and the daemon writes it again without them once they are undone.
   * Before, they were settled as durable with the rewrite.
   */
  #refuseWaiting(dirError: Error): void {
    const inflight = this.#waitingGroup();
    if (inflight === undefined && this.#queued.length === 0) return;
    if (inflight !== undefined) inflight.settled = true; // its fdatasync's answer no longer decides them
    // fd -1: nothing to cut back (the file at the path is the new one).
    const group: SyncGroup = { fd: -1, records: inflight?.records ?? [], from: 0, settled: true };
    this.#failFrom(
      group,
      Object.assign(new Error(`the file was rewritten with the change, but its directory could not be synced: ${dirError.message}`), { code: errnoOf(dirError) }),
      true,
    );
  }

  /**
   * A compaction renamed into place whose directory could not be synced: a
   * crash may leave the old file at the path, to which the waiting records
   * were appended. They are made durable there (one fdatasync of each fd
   * they were written to, on this thread) before they are acknowledged; if
   * that fails they are refused as in #refuseWaiting (the new file holds
   * them).
   */
  #settleInOldFile(dirError: Error): void {
    const fds = new Set<number>();
    const inflight = this.#waitingGroup();
    if (inflight !== undefined) fds.add(inflight.fd);
    if (this.#fd !== undefined && this.#queued.length > 0) fds.add(this.#fd);
    try {
      const injected = fds.size > 0 ? this.#injectedSyncError() : undefined;
      if (injected !== undefined) throw injected;
      for (const fd of fds) fdatasyncSync(fd);
    } catch (e) {
      this.#refuseWaiting(Object.assign(new Error(`${dirError.message}; the old file's fdatasync failed too: ${(e as Error).message}`), { code: errnoOf(e) }));
      return;
    }
    this.#settleAll();
  }

  /** A failed group sync: cut the file back to before the group, undo and refuse it and every record after it. */
  #failFrom(group: SyncGroup, err: NodeJS.ErrnoException, inFile = false): void {
    // A compaction under way would copy the refused records after its snapshot.
    this.#dropCompaction();
    const refused = [...group.records, ...this.#queued];
    this.#queued = [];
    // Through the group's own fd, also when the store has closed it since (a failed cut-back, close())
    // and appends to the same file through another: every refused record is past `from`.
    if (this.#appendsTo(group.fd)) {
      this.#size = group.from;
      this.#lines -= refused.length;
      this.#cutBack(group.fd, group.from);
    }
    const e = new StateWriteError(this.path, errnoOf(err), `cannot sync the state file ${this.path} (${err.message})`, inFile);
    // Each undo awaited in turn: a batch's writes back in slices, waiting for its grace periods with the loop
    // running (in one turn, with Atomics.wait, 10,000 replaces were some 80 s at 8 ms grace periods). The
    // promises are refused once every undo has run, so an answer finds the tables as they were.
    // After an undo still running (none can be today: every writer waits for it, so no record is refused
    // meanwhile), never beside it.
    const before = this.#undoing ?? Promise.resolve();
    const undos = (async (): Promise<void> => {
      await before;
      for (let i = refused.length - 1; i >= 0; i--) {
        try {
          await refused[i]!.undo();
        } catch {
          // Tables closed (the daemon stopping): nothing to put back; the next start writes them from the file.
          // An undo whose table write failed otherwise says so itself (the daemon's: the tables marked out of
          // step, the rule set put back). The other undos and every refusal still run.
        }
      }
    })();
    const undoing = undos.finally(() => {
      if (this.#undoing === undoing) this.#undoing = undefined;
      for (const r of refused) r.reject(e);
      this.#wake();
    });
    this.#undoing = undoing;
  }

  /**
   * The group whose fdatasync is in flight, unless its records were decided
   * already (acknowledged by a rewrite, or refused and being undone: an undo
   * runs a turn later, and its records must not be acknowledged meanwhile by
   * a rewrite that works, nor refused and undone twice).
   */
  #waitingGroup(): SyncGroup | undefined {
    const g = this.#inflight;
    return g === undefined || g.settled ? undefined : g;
  }

  /** Every waiting record is durable (a whole file was written with them): acknowledge them. */
  #settleAll(): void {
    const inflight = this.#waitingGroup();
    const waiting = [...(inflight?.records ?? []), ...this.#queued];
    if (inflight !== undefined) inflight.settled = true;
    this.#queued = [];
    if (waiting.length > 0) {
      this.#syncs++;
      this.#records += waiting.length;
    }
    for (const r of waiting) r.resolve();
    this.#wake();
  }

  /** The fd to append to; a tail past the last whole record (a torn line, a failed append) is cut off first. */
  #open(): number {
    if (this.#fd !== undefined) {
      // Still the file at the path (not removed or moved aside under us: appends would go nowhere)?
      // One stat of the path per record; the open fd's inode does not change.
      let same = false;
      try {
        const at = statSync(this.path, { throwIfNoEntry: false });
        same = at !== undefined && at.ino === this.#ino && at.dev === this.#dev;
      } catch {
        same = false;
      }
      if (same) return this.#fd;
      this.close();
      this.#sha = undefined;
      throw Object.assign(new Error('it was removed or replaced under the daemon'), { code: 'ESTALE' });
    }
    let fd: number;
    try {
      fd = openSync(this.path, constants.O_WRONLY | constants.O_APPEND); // never creates one: a file starts with its header (rewrite)
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      this.#sha = undefined;
      throw Object.assign(new Error('it was removed under the daemon'), { code: 'ESTALE' });
    }
    let st: Stats;
    try {
      st = fstatSync(fd);
      // Opened again after a close() (a failed cut-back): still the file this store wrote? (0: none known yet.)
      if (this.#ino !== 0 && (st.ino !== this.#ino || st.dev !== this.#dev)) {
        this.#sha = undefined;
        throw Object.assign(new Error('it was replaced under the daemon'), { code: 'ESTALE' });
      }
      const size = st.size;
      if (this.#size === undefined) this.#size = size;
      if (size > this.#size) {
        ftruncateSync(fd, this.#size);
        fdatasyncSync(fd);
      } else if (size < this.#size) {
        this.#sha = undefined;
        throw Object.assign(new Error(`it is ${size} bytes, shorter than the ${this.#size} this daemon wrote (changed by something else?)`), { code: 'ESTALE' });
      }
    } catch (e) {
      closeSync(fd);
      throw e;
    }
    this.#fd = fd;
    this.#ino = st.ino;
    this.#dev = st.dev;
    return fd;
  }

  /**
   * `fd` (the store's, or one it closed with a sync still in flight) is open
   * on the file the store appends to; false for -1 (a group renamed over)
   * and for a file replaced or moved aside since.
   */
  #appendsTo(fd: number): boolean {
    if (fd < 0) return false;
    if (fd === this.#fd) return true;
    try {
      const st = fstatSync(fd);
      return st.ino === this.#ino && st.dev === this.#dev;
    } catch {
      return false;
    }
  }

  /** After a failed append: back to the last whole record; if even that fails, close, and #open cuts it at the next append. */
  #cutBack(fd: number, good: number): void {
    try {
      ftruncateSync(fd, good);
      fdatasyncSync(fd);
    } catch {
      this.close();
    }
  }

  /** Cut a torn last line off the file now (after read(); the next append would do it anyway). */
  dropTornTail(): void {
    if (this.#sha !== undefined) this.#open();
  }

  /** Appended lines beyond what the net changes need: time to rewrite. */
  wantsCompaction(o: Overlay): boolean {
    return this.#lines > 1024 && this.#lines > 2 * overlaySize(o);
  }

  close(): void {
    this.#dropCompaction();
    // An fdatasync running on the fd: closed when it returns (never reused under it).
    if (this.#fd !== undefined) {
      // Records written to it wait for the sync the end of this turn would start (group commit): start it
      // now, on their fd, so that each is made durable or refused, never left waiting for a next change.
      if (this.#inflight === undefined && this.#queued.length > 0) this.#startSync();
      if (this.#inflight?.fd === this.#fd) this.#closeAfterSync = true;
      else {
        // Records queued on this fd behind a group in flight on an older one (the file replaced since, then
        // this close): no sync of this fd would come, and the older fd's is another file's. Synced here.
        if (this.#queued.length > 0) this.#syncLate(this.#fd);
        // (#syncLate's refusal may have closed it already, through a failed cut-back.)
        if (this.#fd !== undefined) closeSync(this.#fd);
      }
    }
    this.#fd = undefined;
  }
}

/** A record written and waiting for the fdatasync that makes it durable. */
interface PendingRecord {
  resolve: () => void;
  reject: (e: Error) => void;
  /** Puts back what the record's change replaced (tables and rule set); a batch's in slices. */
  readonly undo: () => void | Promise<void>;
  readonly bytes: number;
}

interface SyncGroup {
  readonly fd: number;
  readonly records: PendingRecord[];
  /** Size of the file before the group's first record. */
  readonly from: number;
  /** Acknowledged or refused already (a whole-file rewrite can settle it before its sync returns). */
  settled: boolean;
}
