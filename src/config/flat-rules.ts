/**
 * Sessions and (N3, TEID) policies read from a JSON or plain block YAML
 * file's bytes straight into their rows (src/config/rows.ts), and
 * End.M.GTP4.E local SIDs into the rule reader's object, with no parsed
 * object, key string or JSON.parse per rule: the common item of a
 * generated file, e.g.
 *
 *   {"ue":"10.0.0.1/32","teid":"0x1","qfi":9,"endpoint":"192.0.2.1","source":"198.51.100.1","isd":"2001:db8:2::/48","src_prefix":"2001:db8:ffff::/64"}
 *   {"match":"100.64.0.0/32","teid":"5/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64"}
 *   - name: l7
 *     sid: 2001:db8:7::/48
 *     src_prefix_len: 64
 *
 * The JSON reader (FlatRuns in src/config/load.ts) or the block YAML one
 * (BlockFlat in src/config/block-yaml.ts) finds a flat item's members; a
 * reader here takes the item only when the rule reader (readSession,
 * readPolicy, readLocalSid) would make the same rule of it with no
 * warning, and only in forms whose text means what it says as it stands
 * (valid JSON; a YAML plain scalar that is a string, or digits: nothing
 * else checks the item's text then). Anything else, it declines, and the
 * item is read as before (JSON.parse or the block reader, then the rule
 * reader, which words every error and warning): segments, srh, hop_limit,
 * mtu, a policy's sid, null; a local SID's behavior, ttl, container,
 * advertise or a /0 sid; an IPv6 UE; a prefix with host bits set or not
 * written canonically; a number with a fraction, an exponent or a leading
 * zero; a name with another character than a rule name's, or too long; an
 * IPv6 prefix text that does not parse or draws a warning. An IPv6 prefix
 * text parsed once gives every rule that has it the same prefix object, as
 * the rule reader does (it shares it with the rule reader:
 * FlatRuleDefaults.v6); a local SID's, a key, is its own (v6Own).
 * test/unit/flat-rules.test.ts (JSON) and test/unit/block-flat.test.ts
 * (YAML) hold the rules to the rule reader's on generated items, taken and
 * declined.
 *
 * Measured on the bench's million sessions and million policies (CPU
 * profiles of the read): an item took 0.85 µs in JSON.parse and 1.2 µs in
 * the rule reader; here about 0.4 µs, after the 0.4 µs of the byte scan
 * that found its members (docs/bench.md, session 45).
 */
import { asciiBytes, latin1 } from './ascii-text.js';
import type { Ipv6Addr, Ipv6Prefix } from '../sid/types.js';
import type { PolicyProfile, PolicyRows, SessionProfile, SessionRows } from './rows.js';
import { RULE_NAME_CHAR, RULE_NAME_MAX } from './rule-name.js';
import type { SrhMode } from './types.js';

/** A flat item's members as the JSON reader found them in the bytes: key i is b[keyAt, keyAt + keyLen), its value b[valAt, valEnd) (a string's without its quotes). */
export interface FlatMembers {
  readonly count: number;
  readonly keyHash: Int32Array;
  readonly keyAt: Int32Array;
  readonly keyLen: Int32Array;
  readonly valAt: Int32Array;
  readonly valEnd: Int32Array;
  /** 1 when the value is a string. */
  readonly valString: Uint8Array;
}

/** Keys a flat item has at most. */
export const FLAT_KEYS = 64;

/** FlatMembers' columns, FLAT_KEYS long: the JSON reader's (FlatRuns) and the block YAML reader's (YamlMembers). */
export class FlatMemberColumns implements FlatMembers {
  count = 0;
  readonly keyHash = new Int32Array(FLAT_KEYS);
  readonly keyAt = new Int32Array(FLAT_KEYS);
  readonly keyLen = new Int32Array(FLAT_KEYS);
  readonly valAt = new Int32Array(FLAT_KEYS);
  readonly valEnd = new Int32Array(FLAT_KEYS);
  readonly valString = new Uint8Array(FLAT_KEYS);
}

/** JSON's whitespace in bytes from `i` on: the first index past it (b.length if none). */
export function byteSpace(b: Uint8Array, i: number): number {
  for (; i < b.length; i++) {
    const c = b[i]!;
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
  }
  return i;
}

/**
 * The end (past its `}`) of the flat JSON object at b[i], its members in
 * `m`: keys without an escape, each given once, at most FLAT_KEYS of them,
 * each value a string without an escape or a bare token (up to a
 * separator; nothing here checks it is one: the rule reader that takes the
 * value does, or JSON.parse). -1 for anything else (read it as JSON).
 */
export function flatObjectEnd(b: Uint8Array, i: number, m: FlatMemberColumns): number {
  const n = b.length;
  if (b[i] !== 0x7b /* { */) return -1;
  let j = byteSpace(b, i + 1);
  m.count = 0;
  if (b[j] === 0x7d /* } */) return j + 1;
  let keys = 0;
  for (;;) {
    if (b[j] !== 0x22 /* " */) return -1;
    const from = ++j;
    let h = 0;
    for (; ; j++) {
      if (j >= n) return -1;
      const c = b[j]!;
      if (c === 0x22) break;
      if (c === 0x5c /* \ */) return -1;
      h = (Math.imul(h, 31) + c) | 0;
    }
    const len = j - from;
    for (let k = 0; k < keys; k++) {
      if (m.keyHash[k] !== h || m.keyLen[k] !== len) continue;
      const other = m.keyAt[k]!;
      let x = 0;
      while (x < len && b[other + x] === b[from + x]) x++;
      if (x === len) return -1;
    }
    if (keys === FLAT_KEYS) return -1;
    const key = keys++;
    m.keyHash[key] = h;
    m.keyAt[key] = from;
    m.keyLen[key] = len;
    j = byteSpace(b, j + 1);
    if (b[j] !== 0x3a /* : */) return -1;
    j = byteSpace(b, j + 1);
    if (b[j] === 0x22) {
      m.valAt[key] = j + 1;
      for (j++; ; j++) {
        if (j >= n) return -1;
        const c = b[j]!;
        if (c === 0x22) break;
        if (c === 0x5c) return -1;
      }
      m.valEnd[key] = j;
      m.valString[key] = 1;
      j++;
    } else {
      // A bare token, up to a separator (JSON.parse, or the rule reader that takes it, checks it is one).
      const from = j;
      for (; j < n; j++) {
        const c = b[j]!;
        if (c === 0x2c || c === 0x7d || c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) break;
        if (c === 0x22 || c === 0x7b || c === 0x5b || c === 0x5d) return -1;
      }
      if (j === from) return -1;
      m.valAt[key] = from;
      m.valEnd[key] = j;
      m.valString[key] = 0;
    }
    m.count = keys;
    j = byteSpace(b, j);
    if (b[j] === 0x7d) return j + 1;
    if (b[j] !== 0x2c) return -1;
    j = byteSpace(b, j + 1);
  }
}

/** The hash FlatRuns gives a key (its bytes, h = h * 31 + byte, 32-bit). */
export function flatKeyHash(key: string): number {
  let h = 0;
  for (let i = 0; i < key.length; i++) h = (Math.imul(h, 31) + key.charCodeAt(i)) | 0;
  return h;
}

/** A reader of one rule list's flat items: read() into a slot of a run, add() the slot's rule as the list's next row. */
export interface FlatRuleReader {
  /** The list index the next add() gives (the rows' count; a reader without rows: its list's count of rules read). */
  readonly next: number;
  /** Item `m` into `slot`; false: the item is to be read as an object. */
  read(b: Uint8Array, m: FlatMembers, slot: number): boolean;
  /** The rule of `slot` (read before), as the next row. */
  add(slot: number): unknown;
}

/** What the rule reader gives a rule that names no path options: its shared values, and where its IPv6 prefixes come from. */
export interface FlatRuleDefaults {
  /** The prefix object the rule reader gives this text (the one it shares), made now if it is the first; undefined for a text that does not parse or draws a warning. */
  readonly v6: (text: string) => Ipv6Prefix | undefined;
  readonly noSegments: readonly Ipv6Addr[];
  readonly srh: SrhMode;
  readonly hopLimit: number;
  readonly maxSidPrefixLen: number;
  readonly maxSrcPrefixLen: number;
  /** A local SID's TTL when it names none. */
  readonly ttl: number;
  /** The prefix object the rule reader makes of this text when it does not share it (a key's: a local SID's sid), undefined as v6's. */
  readonly v6Own: (text: string) => Ipv6Prefix | undefined;
}

/**
 * A flat item a reader took, given to the list's rule hook in the item's
 * place (src/config/load.ts, Section.item): its row is added when the list
 * reaches it in order, else (the list was refused before it) the item is
 * read as an object after all, from its text.
 */
export abstract class TakenRule {
  /** The list index the reader's next row gets. */
  abstract get next(): number;
  /** The item's rule, as the list's next row. */
  abstract add(): unknown;
  /** The item as the parser would have given it (an object of its members). */
  abstract raw(): unknown;
}

/** The slots of a run (FlatRuns reads at most this many items at a time). */
export const FLAT_SLOTS = 1024;

// ---------------------------------------------------------------------------
// Values from bytes. Each takes only what the rule reader takes with the
// same value and no warning, written as valid JSON; -1 or false otherwise.

/** Decimal digits b[at, end) without a leading zero ("0" itself is one), at most `max` of them: the value, or -1. */
function decimal(b: Uint8Array, at: number, end: number, max: number): number {
  const n = end - at;
  if (n === 0 || n > max || (n > 1 && b[at] === 0x30)) return -1;
  let v = 0;
  for (let i = at; i < end; i++) {
    const c = b[i]!;
    if (c < 0x30 || c > 0x39) return -1;
    v = v * 10 + (c - 0x30);
  }
  return v;
}

/** A TEID written as a string ("0x1f", "31", 1-8 hex or 1-10 decimal digits, leading zeros allowed as the reader allows them): the value, or -1. */
function teidText(b: Uint8Array, at: number, end: number): number {
  if (end - at > 2 && b[at] === 0x30 && (b[at + 1] === 0x78 || b[at + 1] === 0x58)) {
    const n = end - at - 2;
    if (n > 8) return -1;
    let v = 0;
    for (let i = at + 2; i < end; i++) {
      const c = b[i]!;
      const d = c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x61 && c <= 0x66 ? c - 0x57 : c >= 0x41 && c <= 0x46 ? c - 0x37 : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }
  if (end === at || end - at > 10) return -1;
  let v = 0;
  for (let i = at; i < end; i++) {
    const c = b[i]!;
    if (c < 0x30 || c > 0x39) return -1;
    v = v * 10 + (c - 0x30);
  }
  return v > 0xffff_ffff ? -1 : v;
}

/** A dotted quad without leading zeros (the address parser's plain form): the address, or -1. */
function v4(b: Uint8Array, at: number, end: number): number {
  let n = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let i = at; i < end; i++) {
    const c = b[i]!;
    if (c === 0x2e /* . */) {
      if (digits === 0 || dots === 3) return -1;
      n = n * 256 + octet;
      octet = 0;
      digits = 0;
      dots++;
    } else if (c >= 0x30 && c <= 0x39) {
      if (digits === 3 || (digits === 1 && octet === 0)) return -1;
      octet = octet * 10 + (c - 0x30);
      if (octet > 255) return -1;
      digits++;
    } else return -1;
  }
  return digits === 0 || dots !== 3 ? -1 : n * 256 + octet;
}

/**
 * A rule name b[at, end) as the rule reader takes it with no word (1 to
 * RULE_NAME_MAX characters of RULE_NAME_CHAR's, the file's bytes ASCII):
 * the string, or undefined.
 */
function ruleName(b: Uint8Array, at: number, end: number): string | undefined {
  const n = end - at;
  if (n === 0 || n > RULE_NAME_MAX) return undefined;
  for (let i = at; i < end; i++) if (NAME_BYTE[b[i]!] !== 1) return undefined;
  return latin1(b, at, end);
}

/** 1 for the ASCII bytes of a rule name's characters (RULE_NAME_CHAR). */
const NAME_BYTE = Uint8Array.from({ length: 256 }, (_, c) => (c < 0x80 && RULE_NAME_CHAR.test(String.fromCharCode(c)) ? 1 : 0));

/** v4Prefix's result. */
let prefixAddr = 0;
let prefixLen = 0;

/** "A.B.C.D/L", L 0-32 without a leading zero, no host bit set (the reader warns of one): into prefixAddr/prefixLen. */
function v4Prefix(b: Uint8Array, at: number, end: number): boolean {
  let slash = at;
  while (slash < end && b[slash] !== 0x2f /* / */) slash++;
  if (slash === end) return false;
  const addr = v4(b, at, slash);
  const len = decimal(b, slash + 1, end, 2);
  if (addr < 0 || len < 0 || len > 32) return false;
  if (addr % 2 ** (32 - len) !== 0) return false;
  prefixAddr = addr;
  prefixLen = len;
  return true;
}

/**
 * The IPv6 prefixes of one field (isd, sr_prefix, src_prefix): the text
 * met last and its prefix object, compared byte by byte (generated files
 * give one text for long runs); another text is looked up as text among
 * those the read has made objects for.
 */
class V6Field {
  /** Slot s: the text's bytes at s * V6_TEXT, its length (-1: none) and its prefix. */
  readonly #text = new Uint8Array(V6_SLOTS * V6_TEXT);
  readonly #len = new Int16Array(V6_SLOTS).fill(-1);
  readonly #prefix = new Array<Ipv6Prefix | undefined>(V6_SLOTS);
  /** The slot of the text met last. */
  #last = 0;

  constructor(
    readonly defaults: FlatRuleDefaults,
    readonly maxLen: number,
  ) {}

  /** The prefix of b[at, end) (a string's text), or undefined: not a prefix the rule reader takes without a word, or too long for the field. */
  get(b: Uint8Array, at: number, end: number): Ipv6Prefix | undefined {
    const n = end - at;
    if (n > V6_TEXT) return undefined;
    const t = this.#text;
    // The text met last first (a generated file gives one for long runs), compared without a hash.
    const last = this.#last;
    if (this.#len[last] === n) {
      const from = last * V6_TEXT;
      let i = 0;
      while (i < n && t[from + i] === b[at + i]) i++;
      if (i === n) return this.#prefix[last];
    }
    let h = n;
    for (let i = at; i < end; i++) h = (Math.imul(h, 31) + b[i]!) | 0;
    const s = (h ^ (h >>> 8) ^ (h >>> 16)) & (V6_SLOTS - 1);
    const from = s * V6_TEXT;
    if (this.#len[s] === n) {
      let i = 0;
      while (i < n && t[from + i] === b[at + i]) i++;
      if (i === n) {
        this.#last = s;
        return this.#prefix[s];
      }
    }
    const p = this.defaults.v6(latin1(b, at, end));
    if (p === undefined || p.len > this.maxLen) return undefined;
    t.set(b.subarray(at, end), from);
    this.#len[s] = n;
    this.#prefix[s] = p;
    this.#last = s;
    return p;
  }
}

/**
 * V6Field's texts met last, one a slot by their hash: a generated file
 * cycles through a few (the bench's policies through 256 sr_prefix texts),
 * each of which was made a string and looked up again at every item.
 */
const V6_SLOTS = 512;
/** The longest IPv6 prefix text a V6Field keeps (45 characters with an embedded IPv4 address, and /128: 49). */
const V6_TEXT = 64;

/** The keys of a member, by their hash and then their bytes. */
class Keys {
  readonly #hash: Int32Array;
  readonly #bytes: Uint8Array[];

  constructor(readonly names: readonly string[]) {
    this.#hash = Int32Array.from(names, flatKeyHash);
    this.#bytes = names.map(asciiBytes);
  }

  /** The index of member k's key among the names, or -1. */
  of(b: Uint8Array, m: FlatMembers, k: number): number {
    const h = m.keyHash[k]!;
    for (let i = 0; i < this.#hash.length; i++) {
      if (this.#hash[i] !== h) continue;
      const want = this.#bytes[i]!;
      const at = m.keyAt[k]!;
      if (m.keyLen[k] !== want.length) continue;
      let j = 0;
      while (j < want.length && b[at + j] === want[j]) j++;
      if (j === want.length) return i;
    }
    return -1;
  }
}

const SESSION = new Keys(['ue', 'teid', 'qfi', 'endpoint', 'source', 'isd', 'src_prefix', 'rqi', 'name']);
const [S_UE, S_TEID, S_QFI, S_ENDPOINT, S_SOURCE, S_ISD, S_SRC, S_RQI, S_NAME] = [0, 1, 2, 3, 4, 5, 6, 7, 8] as const;
/** The members a session needs (all but rqi). */
const SESSION_NEEDS = (1 << S_RQI) - 1;

/** Sessions with an IPv4 UE and no path options. */
export class FlatSessions implements FlatRuleReader {
  #rows: SessionRows;
  readonly #d: FlatRuleDefaults;
  readonly #isd: V6Field;
  readonly #src: V6Field;
  readonly #ue = new Uint32Array(FLAT_SLOTS);
  readonly #ueLen = new Uint8Array(FLAT_SLOTS);
  readonly #teid = new Uint32Array(FLAT_SLOTS);
  readonly #qos = new Uint8Array(FLAT_SLOTS);
  readonly #endpoint = new Uint32Array(FLAT_SLOTS);
  readonly #source = new Uint32Array(FLAT_SLOTS);
  readonly #profile: SessionProfile[] = new Array<SessionProfile>(FLAT_SLOTS);
  readonly #name: (string | undefined)[] = new Array<string | undefined>(FLAT_SLOTS);
  #last: SessionProfile | undefined;

  constructor(rows: SessionRows, d: FlatRuleDefaults) {
    this.#rows = rows;
    this.#d = d;
    this.#isd = new V6Field(d, d.maxSidPrefixLen);
    this.#src = new V6Field(d, d.maxSrcPrefixLen);
  }

  get next(): number {
    return this.#rows.count;
  }

  /** The rows add() adds to from now on (a batch's next store: src/config/rows.ts, RuleRows). */
  into(rows: SessionRows): void {
    this.#rows = rows;
  }

  read(b: Uint8Array, m: FlatMembers, slot: number): boolean {
    let seen = 0;
    let rqi = 0;
    let name: string | undefined;
    let isd: Ipv6Prefix | undefined;
    let src: Ipv6Prefix | undefined;
    for (let k = 0; k < m.count; k++) {
      const key = SESSION.of(b, m, k);
      if (key < 0) return false;
      seen |= 1 << key;
      const at = m.valAt[k]!;
      const end = m.valEnd[k]!;
      const str = m.valString[k] === 1;
      switch (key) {
        case S_UE:
          if (!str || !v4Prefix(b, at, end)) return false;
          this.#ue[slot] = prefixAddr;
          this.#ueLen[slot] = prefixLen;
          break;
        case S_TEID: {
          const v = str ? teidText(b, at, end) : decimal(b, at, end, 10);
          if (v < 0 || v > 0xffff_ffff) return false;
          this.#teid[slot] = v;
          break;
        }
        case S_QFI: {
          const v = str ? -1 : decimal(b, at, end, 2);
          if (v < 0 || v > 63) return false;
          this.#qos[slot] = v;
          break;
        }
        case S_RQI:
          if (str) return false;
          if (end - at === 4 && b[at] === 0x74 && b[at + 1] === 0x72 && b[at + 2] === 0x75 && b[at + 3] === 0x65) rqi = 64;
          else if (!(end - at === 5 && b[at] === 0x66 && b[at + 1] === 0x61 && b[at + 2] === 0x6c && b[at + 3] === 0x73 && b[at + 4] === 0x65)) return false;
          break;
        case S_ENDPOINT:
        case S_SOURCE: {
          const v = str ? v4(b, at, end) : -1;
          if (v < 0) return false;
          if (key === S_ENDPOINT) this.#endpoint[slot] = v;
          else this.#source[slot] = v;
          break;
        }
        case S_ISD:
          isd = str ? this.#isd.get(b, at, end) : undefined;
          if (isd === undefined) return false;
          break;
        case S_SRC:
          src = str ? this.#src.get(b, at, end) : undefined;
          if (src === undefined) return false;
          break;
        case S_NAME:
          name = str ? ruleName(b, at, end) : undefined;
          if (name === undefined) return false;
          break;
      }
    }
    if ((seen & SESSION_NEEDS) !== SESSION_NEEDS) return false;
    this.#name[slot] = name;
    this.#qos[slot] = this.#qos[slot]! | rqi;
    let p = this.#last;
    if (p === undefined || p.isd !== isd || p.srcPrefix !== src) {
      p = { isd: isd!, srcPrefix: src!, segments: this.#d.noSegments, srh: this.#d.srh, hopLimit: this.#d.hopLimit, mtu: undefined };
      this.#last = p;
    }
    this.#profile[slot] = p;
    return true;
  }

  add(slot: number): unknown {
    return this.#rows.addFields(this.#ue[slot]!, this.#ueLen[slot]!, this.#teid[slot]!, this.#qos[slot]!, this.#endpoint[slot]!, this.#source[slot]!, this.#profile[slot]!, this.#name[slot]);
  }
}

const POLICY = new Keys(['match', 'teid', 'sr_prefix', 'src_prefix', 'name']);
const [P_MATCH, P_TEID, P_SR, P_SRC, P_NAME] = [0, 1, 2, 3, 4] as const;
const POLICY_NEEDS = (1 << P_MATCH) | (1 << P_SR) | (1 << P_SRC);

/** Policies (with or without a TEID prefix) with an sr_prefix and no sid or path options. */
export class FlatPolicies implements FlatRuleReader {
  #rows: PolicyRows;
  readonly #d: FlatRuleDefaults;
  readonly #sr: V6Field;
  readonly #src: V6Field;
  readonly #match = new Uint32Array(FLAT_SLOTS);
  readonly #matchLen = new Uint8Array(FLAT_SLOTS);
  readonly #teid = new Uint32Array(FLAT_SLOTS);
  readonly #teidLen = new Uint8Array(FLAT_SLOTS);
  readonly #profile: PolicyProfile[] = new Array<PolicyProfile>(FLAT_SLOTS);
  readonly #name: (string | undefined)[] = new Array<string | undefined>(FLAT_SLOTS);
  #last: PolicyProfile | undefined;

  constructor(rows: PolicyRows, d: FlatRuleDefaults) {
    this.#rows = rows;
    this.#d = d;
    this.#sr = new V6Field(d, d.maxSidPrefixLen);
    this.#src = new V6Field(d, d.maxSrcPrefixLen);
  }

  get next(): number {
    return this.#rows.count;
  }

  /** As FlatSessions.into. */
  into(rows: PolicyRows): void {
    this.#rows = rows;
  }

  read(b: Uint8Array, m: FlatMembers, slot: number): boolean {
    let seen = 0;
    let sr: Ipv6Prefix | undefined;
    let src: Ipv6Prefix | undefined;
    let teidLen = 0;
    let teid = 0;
    let name: string | undefined;
    for (let k = 0; k < m.count; k++) {
      const key = POLICY.of(b, m, k);
      if (key < 0 || m.valString[k] !== 1) return false;
      seen |= 1 << key;
      const at = m.valAt[k]!;
      const end = m.valEnd[k]!;
      switch (key) {
        case P_MATCH:
          if (!v4Prefix(b, at, end)) return false;
          this.#match[slot] = prefixAddr;
          this.#matchLen[slot] = prefixLen;
          break;
        case P_TEID: {
          // VALUE/BITS: VALUE as a session's TEID text, BITS 0-32 without a leading zero, no bit set past BITS.
          let slash = at;
          while (slash < end && b[slash] !== 0x2f /* / */) slash++;
          if (slash === end) return false;
          teid = teidText(b, at, slash);
          teidLen = decimal(b, slash + 1, end, 2);
          if (teid < 0 || teidLen < 0 || teidLen > 32 || teid % 2 ** (32 - teidLen) !== 0) return false;
          break;
        }
        case P_SR:
          sr = this.#sr.get(b, at, end);
          if (sr === undefined) return false;
          break;
        case P_SRC:
          src = this.#src.get(b, at, end);
          if (src === undefined) return false;
          break;
        case P_NAME:
          name = ruleName(b, at, end);
          if (name === undefined) return false;
          break;
      }
    }
    if ((seen & POLICY_NEEDS) !== POLICY_NEEDS) return false;
    // A TEID prefix needs a /32 match (the reader refuses it otherwise); a /0 one is none.
    if (teidLen > 0 && this.#matchLen[slot] !== 32) return false;
    this.#teid[slot] = teidLen === 0 ? 0 : teid;
    this.#teidLen[slot] = teidLen;
    this.#name[slot] = name;
    let p = this.#last;
    if (p === undefined || p.srPrefix !== sr || p.srcPrefix !== src) {
      p = { srPrefix: sr!, sid: undefined, srcPrefix: src!, segments: this.#d.noSegments, srh: this.#d.srh, hopLimit: this.#d.hopLimit, mtu: undefined };
      this.#last = p;
    }
    this.#profile[slot] = p;
    return true;
  }

  add(slot: number): unknown {
    return this.#rows.addFields(this.#match[slot]!, this.#matchLen[slot]!, this.#teid[slot]!, this.#teidLen[slot]!, this.#profile[slot]!, this.#name[slot]);
  }
}

const LOCALSID = new Keys(['sid', 'src_prefix_len', 'name']);
const [L_SID, L_SRC_LEN, L_NAME] = [0, 1, 2] as const;
const LOCALSID_NEEDS = (1 << L_SID) | (1 << L_SRC_LEN);

/**
 * End.M.GTP4.E local SIDs (no behavior given) with a sid, a src_prefix_len
 * and nothing else but a name: the rule reader's object, as it makes it
 * (a local SID is not a row).
 */
export class FlatLocalSids implements FlatRuleReader {
  readonly #d: FlatRuleDefaults;
  readonly #sid: (Ipv6Prefix | undefined)[] = new Array<Ipv6Prefix | undefined>(FLAT_SLOTS);
  readonly #srcLen = new Uint8Array(FLAT_SLOTS);
  readonly #name: (string | undefined)[] = new Array<string | undefined>(FLAT_SLOTS);
  /** The list index of the item read next (the list's count of rules read: taken here or by the rule reader). */
  readonly #position: () => number;

  constructor(d: FlatRuleDefaults, position: () => number) {
    this.#d = d;
    this.#position = position;
  }

  get next(): number {
    return this.#position();
  }

  read(b: Uint8Array, m: FlatMembers, slot: number): boolean {
    let seen = 0;
    let name: string | undefined;
    let sid: Ipv6Prefix | undefined;
    let srcLen = -1;
    for (let k = 0; k < m.count; k++) {
      const key = LOCALSID.of(b, m, k);
      if (key < 0) return false;
      seen |= 1 << key;
      const at = m.valAt[k]!;
      const end = m.valEnd[k]!;
      const str = m.valString[k] === 1;
      switch (key) {
        case L_SID:
          // Keys are unique: no text to share. A /0 draws a warning.
          if (!str || end - at > V6_TEXT) return false;
          sid = this.#d.v6Own(latin1(b, at, end));
          if (sid === undefined || sid.len === 0 || sid.len > this.#d.maxSidPrefixLen) return false;
          break;
        case L_SRC_LEN:
          srcLen = str ? -1 : decimal(b, at, end, 3);
          if (srcLen < 0 || srcLen > this.#d.maxSrcPrefixLen) return false;
          break;
        case L_NAME:
          name = str ? ruleName(b, at, end) : undefined;
          if (name === undefined) return false;
          break;
      }
    }
    if ((seen & LOCALSID_NEEDS) !== LOCALSID_NEEDS) return false;
    this.#sid[slot] = sid;
    this.#srcLen[slot] = srcLen;
    this.#name[slot] = name;
    return true;
  }

  add(slot: number): unknown {
    const where = this.#position();
    const name = this.#name[slot];
    const sid = this.#sid[slot]!;
    const srcPrefixLen = this.#srcLen[slot]!;
    const ttl = this.#d.ttl;
    // readLocalSid's object, its members in its order.
    return name === undefined ? { where, sid, srcPrefixLen, container: 'always', ttl } : { where, name, sid, srcPrefixLen, container: 'always', ttl };
  }
}
