/**
 * Sessions and policies read from the config file, kept as rows of typed
 * columns instead of one object graph each (docs/daemon.md, "Sessions and
 * (N3, TEID) policies at a million"). A rule of the list is a small object
 * (its store and its row) whose fields are getters over the columns; what
 * thousands of rules share (prefixes, segments, SRH mode, hop limit, MTU)
 * is one "profile" object they point to.
 *
 * Measured at a million sessions and a million (N3, TEID) policies, a rule
 * read as an object held 285-316 bytes of heap (the object, its `ue` or
 * `match`/`teid` objects, heap numbers for addresses above 2^31); a row
 * holds a 40-byte object and about 22 bytes of columns.
 *
 * A row answers every field the rule object read from the same item would
 * (test/unit/rows.test.ts compares them field by field), with two
 * differences that no caller may rely on: its fields are not own properties
 * (use plainRule() where an object is enumerated, compared or cloned:
 * sameData and the parser thread's messages do), and objects such as `ue`
 * and `match` are made afresh on each read.
 */
import type { Ipv4Addr, Ipv4Prefix, Ipv6Addr, Ipv6Prefix } from '../sid/types.js';
import type { Policy, Session, SrhMode, TeidPrefix, Where } from './types.js';

/** What many rules share, one object for all of them. */
export interface SessionProfile {
  readonly isd: Ipv6Prefix;
  readonly srcPrefix: Ipv6Prefix;
  readonly segments: readonly Ipv6Addr[];
  readonly srh: SrhMode;
  readonly hopLimit: number;
  readonly mtu: number | undefined;
}

export interface PolicyProfile {
  readonly srPrefix: Ipv6Prefix;
  readonly sid: Ipv6Addr | undefined;
  readonly srcPrefix: Ipv6Prefix;
  readonly segments: readonly Ipv6Addr[];
  readonly srh: SrhMode;
  readonly hopLimit: number;
  readonly mtu: number | undefined;
}

function samePrefix(a: Ipv6Prefix, b: Ipv6Prefix): boolean {
  return a === b || (a.addr === b.addr && a.len === b.len);
}

function sameSegments(a: readonly Ipv6Addr[], b: readonly Ipv6Addr[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * The profiles of one store: the last one asked for first (generated
 * files repeat one profile for long runs), then those whose first prefix
 * is the same object (the reader shares a prefix read from the same text),
 * then by a text of its values (made only for a profile not met that way).
 */
class Profiles<P extends object> {
  readonly list: P[] = [];
  /** Made at the second profile (a store of a batch has one, mostly: each map cost about 200 B). */
  #byText: Map<string, number> | undefined;
  #byFirst: Map<object, number[]> | undefined;
  #last = -1;

  constructor(
    readonly same: (a: P, b: P) => boolean,
    readonly text: (p: P) => string,
    readonly first: (p: P) => object,
  ) {}

  id(p: P): number {
    if (this.#last >= 0 && this.same(this.list[this.#last]!, p)) return this.#last;
    if (this.list.length === 0) {
      this.list.push(p);
      return (this.#last = 0);
    }
    if (this.#byText === undefined) {
      // The maps of the first profile (the only one so far).
      this.#byText = new Map([[this.text(this.list[0]!), 0]]);
      this.#byFirst = new Map([[this.first(this.list[0]!), [0]]]);
    }
    const f = this.first(p);
    let ids = this.#byFirst!.get(f);
    if (ids !== undefined) {
      for (const id of ids) {
        if (this.same(this.list[id]!, p)) {
          this.#last = id;
          return id;
        }
      }
    }
    const t = this.text(p);
    let id = this.#byText.get(t);
    if (id === undefined) {
      id = this.list.length;
      this.list.push(p);
      this.#byText.set(t, id);
      // Only for a new profile: a prefix read again for each rule (one with host bits set, which is
      // not shared) kept an entry, and its prefix object, per rule (found in review: 290 B a rule).
      if (ids === undefined) this.#byFirst!.set(f, (ids = []));
      if (ids.length < 16) ids.push(id);
    }
    this.#last = id;
    return id;
  }
}

const p6 = (p: Ipv6Prefix): string => `${p.addr.toString(16)}/${p.len}`;
const segText = (s: readonly Ipv6Addr[]): string => s.map((x) => x.toString(16)).join(',');

// What Profiles compares and indexes, one function each for every store (closures per store cost about 100 B).
const sameSessionProfile = (a: SessionProfile, b: SessionProfile): boolean =>
  samePrefix(a.isd, b.isd) && samePrefix(a.srcPrefix, b.srcPrefix) && sameSegments(a.segments, b.segments) && a.srh === b.srh && a.hopLimit === b.hopLimit && a.mtu === b.mtu;
const sessionProfileText = (p: SessionProfile): string => [p6(p.isd), p6(p.srcPrefix), segText(p.segments), p.srh, p.hopLimit, p.mtu ?? ''].join(' ');
const sessionProfileFirst = (p: SessionProfile): object => p.isd;
const samePolicyProfile = (a: PolicyProfile, b: PolicyProfile): boolean =>
  samePrefix(a.srPrefix, b.srPrefix) && a.sid === b.sid && samePrefix(a.srcPrefix, b.srcPrefix) && sameSegments(a.segments, b.segments) && a.srh === b.srh && a.hopLimit === b.hopLimit && a.mtu === b.mtu;
const policyProfileText = (p: PolicyProfile): string => [p6(p.srPrefix), p.sid?.toString(16) ?? '', p6(p.srcPrefix), segText(p.segments), p.srh, p.hopLimit, p.mtu ?? ''].join(' ');
const policyProfileFirst = (p: PolicyProfile): object => p.srPrefix;

/** A store's next capacity: twice its last, at least `need` and 16. */
function grownTo(capacity: number, need: number): number {
  return Math.max(need, capacity * 2, 16);
}

/**
 * A store's columns as views of one buffer of `capacity` rows: `wide`
 * 32-bit columns, then `narrow` byte columns, the first `n` rows of `old`
 * (the columns before, in that order) copied in. A buffer per column
 * cost about 300 B of its own each (its objects and the allocator's), most
 * of what a store of a batch (RuleRows) cost.
 */
function columnsOf(
  capacity: number,
  wide: number,
  narrow: number,
  old: readonly (Uint32Array | Uint8Array)[] | undefined,
  n: number,
): [Uint32Array<ArrayBuffer>[], Uint8Array<ArrayBuffer>[]] {
  const buf = new ArrayBuffer(capacity * (4 * wide + narrow));
  const u32 = Array.from({ length: wide }, (_, k) => new Uint32Array(buf, 4 * k * capacity, capacity));
  const u8 = Array.from({ length: narrow }, (_, k) => new Uint8Array(buf, 4 * wide * capacity + k * capacity, capacity));
  if (old !== undefined && n > 0) {
    const now = [...u32, ...u8];
    for (let c = 0; c < now.length; c++) now[c]!.set(old[c]!.subarray(0, n));
  }
  return [u32, u8];
}



/** A rule kept as a row: its plain object (the one the reader made), for enumeration, comparison and cloning. */
export const PLAIN = Symbol('plain rule');

interface Row {
  [PLAIN](): object;
}

export function isRow(r: unknown): r is Row {
  return typeof r === 'object' && r !== null && typeof (r as Partial<Row>)[PLAIN] === 'function';
}

/** The rule as a plain object with its fields as own properties (a row's made from its columns; any other rule as it is). */
export function plainRule<R>(r: R): R {
  return isRow(r) ? (r[PLAIN]() as R) : r;
}

/** A SessionRows' contents, sent between threads (SessionRows.data, SessionRows.take). */
export interface SessionRowsData {
  readonly count: number;
  readonly ue4: Uint32Array<ArrayBuffer>;
  readonly ueLen: Uint8Array<ArrayBuffer>;
  readonly teid: Uint32Array<ArrayBuffer>;
  readonly qos: Uint8Array<ArrayBuffer>;
  readonly endpoint: Uint32Array<ArrayBuffer>;
  readonly source: Uint32Array<ArrayBuffer>;
  readonly profile: Uint32Array<ArrayBuffer>;
  readonly ue6: Map<number, Ipv6Prefix>;
  readonly names: Map<number, string>;
  readonly profiles: readonly SessionProfile[];
}

/** Whether `r` is the rule of row `i` of `store` (a SessionRows or a PolicyRows). */
export function isRowAt(r: unknown, store: SessionRows | PolicyRows, i: number): boolean {
  return RowRule.isRowAt(r, store, i);
}

/** The sessions of one list, in order: row i is the list's item i (its `where`). */
export class SessionRows {
  /**
   * `objects` false: the rows only, no rule object made for each (add and
   * addFields return one object for every row, not a rule of it): a thread
   * that sends the rows (readListAhead), where a million rule objects were
   * 20 % of its read.
   */
  constructor(
    readonly objects = true,
    readonly apiWhere?: string,
    capacity = 1024,
  ) {
    this.#columns(capacity);
  }

  /** The columns at `capacity` rows, the rows there copied in (columnsOf). */
  #columns(capacity: number): void {
    const old = this.#ue4 === undefined ? undefined : [this.#ue4, this.#teid, this.#endpoint, this.#source, this.#profile, this.#ueLen, this.#qos];
    const [u32, u8] = columnsOf(capacity, 5, 2, old, this.count);
    this.#ue4 = u32[0]!;
    this.#teid = u32[1]!;
    this.#endpoint = u32[2]!;
    this.#source = u32[3]!;
    this.#profile = u32[4]!;
    this.#ueLen = u8[0]!;
    this.#qos = u8[1]!;
  }

  count = 0;
  #ue4!: Uint32Array<ArrayBuffer>;
  #ueLen!: Uint8Array<ArrayBuffer>;
  /** An IPv6 UE prefix by row (its family is 6). */
  #ue6: Map<number, Ipv6Prefix> | undefined;
  #teid!: Uint32Array<ArrayBuffer>;
  /** qfi (6 bits) | rqi << 6 */
  #qos!: Uint8Array<ArrayBuffer>;
  #endpoint!: Uint32Array<ArrayBuffer>;
  #source!: Uint32Array<ArrayBuffer>;
  #profile!: Uint32Array<ArrayBuffer>;
  /** Made at the first name (each map cost a store of a batch about 200 B). */
  #names: Map<number, string> | undefined;
  readonly profiles = new Profiles<SessionProfile>(sameSessionProfile, sessionProfileText, sessionProfileFirst);

  /**
   * The session the reader made for item `count` (its `where` that index), kept as a row: the row's rule.
   * Undefined when it cannot be a row (its `where` is not its index): the caller keeps the object.
   */
  add(s: Session): SessionRule | undefined {
    if (this.apiWhere === undefined && s.where !== this.count) return undefined;
    const profile = this.profiles.id({ isd: s.isd, srcPrefix: s.srcPrefix, segments: s.segments, srh: s.srh, hopLimit: s.hopLimit, mtu: s.mtu });
    const i = this.#row(s.ue.family === 4 ? s.ue.prefix.addr : 0, s.ue.family === 4 ? s.ue.prefix.len : 255, s.teid, s.qfi | (s.rqi ? 64 : 0), s.endpoint, s.source, profile);
    if (s.ue.family === 6) (this.#ue6 ??= new Map()).set(i, s.ue.prefix);
    if (s.name !== undefined) (this.#names ??= new Map()).set(i, s.name);
    return this.objects ? new SessionRule(this, i) : this.#added();
  }

  /**
   * The next row from its values (src/config/flat-rules.ts, which read them
   * from the file's bytes): an IPv4 UE, `profile` shared as a reader's is
   * (the same object for the same values).
   */
  addFields(ue4: number, ueLen: number, teid: number, qos: number, endpoint: number, source: number, profile: SessionProfile, name?: string): SessionRule | undefined {
    const i = this.#row(ue4, ueLen, teid, qos, endpoint, source, this.profiles.id(profile));
    if (name !== undefined) (this.#names ??= new Map()).set(i, name);
    return this.objects ? new SessionRule(this, i) : this.#added();
  }

  /**
   * Rows only: what add and addFields give for a row added, one object for
   * all (undefined is "not a row": the caller keeps its own object then).
   */
  #addedRow: SessionRule | undefined;
  #added(): SessionRule {
    return (this.#addedRow ??= new SessionRule(this, -1));
  }

  #row(ue4: number, ueLen: number, teid: number, qos: number, endpoint: number, source: number, profile: number): number {
    const i = this.count;
    const n = i + 1;
    if (n > this.#teid.length) this.#columns(grownTo(this.#teid.length, n));
    this.#ue4[i] = ue4;
    this.#ueLen[i] = ueLen;
    this.#teid[i] = teid;
    this.#qos[i] = qos;
    this.#endpoint[i] = endpoint;
    this.#source[i] = source;
    this.#profile[i] = profile;
    this.count = n;
    return i;
  }

  /** The columns cut to the rows there are (a store that takes no more rows: an API batch's). */
  trim(): void {
    if (this.count !== this.#teid.length) this.#columns(this.count);
  }

  /**
   * What the rows hold, to be sent from a thread (a message copies the
   * columns): SessionRows.take makes the rows again on the other side.
   * For a store that takes no more rows (a map made at a later row's
   * name or IPv6 UE is not in the data taken before).
   */
  data(): SessionRowsData {
    return {
      count: this.count,
      ue4: this.#ue4,
      ueLen: this.#ueLen,
      teid: this.#teid,
      qos: this.#qos,
      endpoint: this.#endpoint,
      source: this.#source,
      profile: this.#profile,
      ue6: this.#ue6 ?? new Map(),
      names: this.#names ?? new Map(),
      profiles: this.profiles.list,
    };
  }

  /**
   * An empty store made the rows `data` holds (SessionRows.data of a store
   * on another thread), each profile as `share` gives it. Throws when the
   * store is not empty or the data is not a whole store's (a fault of ours).
   */
  take(d: SessionRowsData, share: (p: SessionProfile) => SessionProfile): void {
    if (this.count !== 0 || this.profiles.list.length !== 0) throw new Error('internal: sessions sent into rows that have some');
    const n = d.count;
    const columns = [d.ue4, d.ueLen, d.teid, d.qos, d.endpoint, d.source, d.profile];
    // Columns of one length (the store grows them all when the first is full).
    if (!Number.isSafeInteger(n) || n < 0 || columns.some((c) => !ArrayBuffer.isView(c) || c.length < n || c.length !== d.teid.length)) throw new Error(`internal: the rows sent hold no ${n} sessions`);
    this.#ue4 = d.ue4;
    this.#ueLen = d.ueLen;
    this.#teid = d.teid;
    this.#qos = d.qos;
    this.#endpoint = d.endpoint;
    this.#source = d.source;
    this.#profile = d.profile;
    this.count = n;
    // The maps as they came (a message's are its own).
    this.#ue6 = d.ue6;
    this.#names = d.names;
    // Distinct there, distinct here: each profile keeps its id (its rows' column is not rewritten).
    for (let id = 0; id < d.profiles.length; id++) {
      if (this.profiles.id(share(d.profiles[id]!)) !== id) throw new Error(`internal: the sessions' profile ${id} sent is the same as another`);
    }
    for (let i = 0; i < n; i++) if (d.profile[i]! >= d.profiles.length) throw new Error(`internal: session row ${i} names a profile not sent`);
  }

  /**
   * The rules of rows out.length .. n - 1 added to `out` (the list the rows
   * are, made ahead: rows may be given later, by take()); false when it
   * has them all.
   */
  rulesTo(out: SessionRule[], n: number): boolean {
    if (out.length >= n) return false;
    for (let i = out.length; i < n; i++) out.push(new SessionRule(this, i));
    return true;
  }

  name(i: number): string | undefined {
    return this.#names?.get(i);
  }
  /** Row i's IPv4 UE prefix into `into` ([address, length]); false for an IPv6 one (ue() has it). */
  ue4(i: number, into: Uint32Array): boolean {
    const len = this.#ueLen[i]!;
    if (len === 255) return false;
    into[0] = this.#ue4[i]!;
    into[1] = len;
    return true;
  }
  ue(i: number): Session['ue'] {
    const len = this.#ueLen[i]!;
    if (len === 255) return { family: 6, prefix: this.#ue6!.get(i)! };
    return { family: 4, prefix: { addr: this.#ue4[i]! as Ipv4Addr, len } };
  }
  teid(i: number): number {
    return this.#teid[i]!;
  }
  qfi(i: number): number {
    return this.#qos[i]! & 63;
  }
  rqi(i: number): boolean {
    return (this.#qos[i]! & 64) !== 0;
  }
  endpoint(i: number): Ipv4Addr {
    return this.#endpoint[i]! as Ipv4Addr;
  }
  source(i: number): Ipv4Addr {
    return this.#source[i]! as Ipv4Addr;
  }
  profile(i: number): SessionProfile {
    return this.profiles.list[this.#profile[i]!]!;
  }
  /** Row i's key bytes (SESSION_KEY_BYTES) into `into`. */
  keyBytes(i: number, into: Uint8Array): void {
    const len = this.#ueLen[i]!;
    if (len === 255) return sessionKeyBytes({ family: 6, prefix: this.#ue6!.get(i)! }, into);
    into.fill(0);
    into[0] = 4;
    into[1] = len;
    put32(into, 2, this.#ue4[i]!);
  }
}

/** What a row's rule reads from its store. */
interface RowStore {
  readonly apiWhere?: string;
  name(i: number): string | undefined;
  profile(i: number): { readonly srcPrefix: Ipv6Prefix; readonly segments: readonly Ipv6Addr[]; readonly srh: SrhMode; readonly hopLimit: number; readonly mtu: number | undefined };
  keyBytes(i: number, into: Uint8Array): void;
}

/** A rule of a store (SessionRule, PolicyRule): the fields every kind has, read from its row. */
abstract class RowRule<S extends RowStore> implements Row {
  // Private: not enumerated, cloned or serialised as the rule's fields (plainRule gives those).
  readonly #store: S;
  readonly #row: number;
  constructor(store: S, row: number) {
    this.#store = store;
    this.#row = row;
  }
  /** Whether `r` is row `i` of `store` (isRowAt). */
  static isRowAt(r: unknown, store: object, i: number): boolean {
    return r instanceof RowRule && r.#store === store && r.#row === i;
  }
  /**
   * The profile a row shares with the other rows of its store that have
   * it (undefined for an object rule): a key for what is the same for all
   * of them (a state line's tail, src/daemon/rules.ts).
   */
  static sharedProfile(r: unknown): object | undefined {
    return r instanceof RowRule ? r.#store.profile(r.#row) : undefined;
  }
  /** The store and row, for the kinds' getters: accessors, not own properties. */
  protected get store(): S {
    return this.#store;
  }
  protected get row(): number {
    return this.#row;
  }
  abstract [PLAIN](): object;
  toJSON(): object {
    return this[PLAIN]();
  }
  get where(): Where {
    return this.#store.apiWhere ?? this.#row;
  }
  get name(): string | undefined {
    return this.#store.name(this.#row);
  }
  get srcPrefix(): Ipv6Prefix {
    return this.#store.profile(this.#row).srcPrefix;
  }
  get segments(): readonly Ipv6Addr[] {
    return this.#store.profile(this.#row).segments;
  }
  get srh(): SrhMode {
    return this.#store.profile(this.#row).srh;
  }
  get hopLimit(): number {
    return this.#store.profile(this.#row).hopLimit;
  }
  get mtu(): number | undefined {
    return this.#store.profile(this.#row).mtu;
  }
  /** The fields every kind's plain object ends with, in readSession's and readPolicy's order. */
  protected pathFields(): Pick<Session, 'srcPrefix' | 'segments' | 'srh' | 'hopLimit' | 'mtu'> {
    const p = this.#store.profile(this.#row);
    return { srcPrefix: p.srcPrefix, segments: p.segments, srh: p.srh, hopLimit: p.hopLimit, ...(p.mtu === undefined ? {} : { mtu: p.mtu }) };
  }
}

/** RowRule.sharedProfile: the profile object a row rule shares (undefined for an object rule). */
export function sharedProfile(r: unknown): object | undefined {
  return RowRule.sharedProfile(r);
}

/** A session of a SessionRows: its fields read from the row. */
export class SessionRule extends RowRule<SessionRows> implements Session {
  /** The store a session is a row of, or undefined (an object rule). */
  static rowsOf(r: Session): SessionRows | undefined {
    return r instanceof SessionRule ? r.store : undefined;
  }
  /** A session's key bytes (SESSION_KEY_BYTES) into `into`: a row's from its columns, another's from its fields. */
  static keyBytesOf(r: Session, into: Uint8Array): void {
    if (r instanceof SessionRule) r.store.keyBytes(r.row, into);
    else sessionKeyBytes(r.ue, into);
  }
  /**
   * A session's IPv4 UE prefix into `into` ([address, length]), a row's read
   * from its columns without the two objects its `ue` makes (a fill of the
   * tables reads it for every session); false for an IPv6 UE.
   */
  static ue4Of(r: Session, into: Uint32Array): boolean {
    if (r instanceof SessionRule) return r.store.ue4(r.row, into);
    const ue = r.ue;
    if (ue.family !== 4) return false;
    into[0] = ue.prefix.addr;
    into[1] = ue.prefix.len;
    return true;
  }
  get ue(): Session['ue'] {
    return this.store.ue(this.row);
  }
  get teid(): number {
    return this.store.teid(this.row);
  }
  get qfi(): number {
    return this.store.qfi(this.row);
  }
  get rqi(): boolean {
    return this.store.rqi(this.row);
  }
  get endpoint(): Ipv4Addr {
    return this.store.endpoint(this.row);
  }
  get source(): Ipv4Addr {
    return this.store.source(this.row);
  }
  get isd(): Ipv6Prefix {
    return this.store.profile(this.row).isd;
  }
  /** The object readSession makes, key for key. */
  [PLAIN](): Session {
    const name = this.name;
    return {
      where: this.where,
      ...(name === undefined ? {} : { name }),
      ue: this.ue,
      teid: this.teid,
      qfi: this.qfi,
      rqi: this.rqi,
      endpoint: this.endpoint,
      source: this.source,
      isd: this.isd,
      ...this.pathFields(),
    };
  }
}

/** The policies of one list, in order: row i is the list's item i (its `where`). */
export class PolicyRows {
  constructor(
    readonly apiWhere?: string,
    capacity = 1024,
  ) {
    this.#columns(capacity);
  }

  /** As SessionRows' #columns. */
  #columns(capacity: number): void {
    const old = this.#match === undefined ? undefined : [this.#match, this.#teid, this.#profile, this.#matchLen, this.#teidLen];
    const [u32, u8] = columnsOf(capacity, 3, 2, old, this.count);
    this.#match = u32[0]!;
    this.#teid = u32[1]!;
    this.#profile = u32[2]!;
    this.#matchLen = u8[0]!;
    this.#teidLen = u8[1]!;
  }

  count = 0;
  #match!: Uint32Array<ArrayBuffer>;
  #matchLen!: Uint8Array<ArrayBuffer>;
  #teid!: Uint32Array<ArrayBuffer>;
  /** 0: no TEID prefix. */
  #teidLen!: Uint8Array<ArrayBuffer>;
  #profile!: Uint32Array<ArrayBuffer>;
  /** As SessionRows'. */
  #names: Map<number, string> | undefined;
  readonly profiles = new Profiles<PolicyProfile>(samePolicyProfile, policyProfileText, policyProfileFirst);

  /** As SessionRows.add. */
  add(p: Policy): PolicyRule | undefined {
    if (this.apiWhere === undefined && p.where !== this.count) return undefined;
    const profile = this.profiles.id({ srPrefix: p.srPrefix, sid: p.sid, srcPrefix: p.srcPrefix, segments: p.segments, srh: p.srh, hopLimit: p.hopLimit, mtu: p.mtu });
    const i = this.#row(p.match.addr, p.match.len, p.teid?.value ?? 0, p.teid?.len ?? 0, profile);
    if (p.name !== undefined) (this.#names ??= new Map()).set(i, p.name);
    return new PolicyRule(this, i);
  }

  /** As SessionRows.addFields; teidLen 0 for none. */
  addFields(match: number, matchLen: number, teid: number, teidLen: number, profile: PolicyProfile, name?: string): PolicyRule {
    const i = this.#row(match, matchLen, teid, teidLen, this.profiles.id(profile));
    if (name !== undefined) (this.#names ??= new Map()).set(i, name);
    return new PolicyRule(this, i);
  }

  #row(match: number, matchLen: number, teid: number, teidLen: number, profile: number): number {
    const i = this.count;
    const n = i + 1;
    if (n > this.#match.length) this.#columns(grownTo(this.#match.length, n));
    this.#match[i] = match;
    this.#matchLen[i] = matchLen;
    this.#teid[i] = teid;
    this.#teidLen[i] = teidLen;
    this.#profile[i] = profile;
    this.count = n;
    return i;
  }

  /** As SessionRows.trim. */
  trim(): void {
    if (this.count !== this.#match.length) this.#columns(this.count);
  }

  name(i: number): string | undefined {
    return this.#names?.get(i);
  }
  match(i: number): Ipv4Prefix {
    return { addr: this.#match[i]! as Ipv4Addr, len: this.#matchLen[i]! };
  }
  teid(i: number): TeidPrefix | undefined {
    const len = this.#teidLen[i]!;
    return len === 0 ? undefined : { value: this.#teid[i]!, len };
  }
  profile(i: number): PolicyProfile {
    return this.profiles.list[this.#profile[i]!]!;
  }
  /** Row i's key length in bits: its match's, or 32 + its TEID prefix's. */
  keyLen(i: number): number {
    const t = this.#teidLen[i]!;
    return t === 0 ? this.#matchLen[i]! : 32 + t;
  }
  /** Row i's key fields into `into`: match address, its length, TEID value, TEID length (0: none). */
  keyFields(i: number, into: Uint32Array): void {
    into[0] = this.#match[i]!;
    into[1] = this.#matchLen[i]!;
    into[2] = this.#teid[i]!;
    into[3] = this.#teidLen[i]!;
  }
  /** Row i's key bytes (POLICY_KEY_BYTES) into `into`. */
  keyBytes(i: number, into: Uint8Array): void {
    put32(into, 0, this.#match[i]!);
    into[4] = this.#matchLen[i]!;
    put32(into, 5, this.#teid[i]!);
    into[9] = this.#teidLen[i]!;
  }
}

/** A policy of a PolicyRows: its fields read from the row. */
export class PolicyRule extends RowRule<PolicyRows> implements Policy {
  /** The store a policy is a row of, or undefined (an object rule). */
  static rowsOf(r: Policy): PolicyRows | undefined {
    return r instanceof PolicyRule ? r.store : undefined;
  }
  /** A policy's key bytes (POLICY_KEY_BYTES) into `into`: a row's from its columns, another's from its fields. */
  static keyBytesOf(r: Policy, into: Uint8Array): void {
    if (r instanceof PolicyRule) r.store.keyBytes(r.row, into);
    else policyKeyBytes(r.match, r.teid, into);
  }
  /** A row's profile (what its value is made of, but for its rule id: src/dataplane/tables.ts); undefined for an object rule. */
  static profileOf(r: Policy): PolicyProfile | undefined {
    return r instanceof PolicyRule ? r.store.profile(r.row) : undefined;
  }
  /**
   * A policy's key length in bits (the data path's lookup length): its
   * match's, or 32 + its TEID prefix's. A row's from its columns: the
   * file's checks read it for every policy, and `match` and `teid` make
   * objects (at a start of a million policies, 170 MB of garbage).
   */
  static keyLenOf(r: Policy): number {
    if (r instanceof PolicyRule) return r.store.keyLen(r.row);
    return r.teid === undefined ? r.match.len : 32 + r.teid.len;
  }
  /**
   * A policy's key fields into `into` (match address, its length, TEID
   * value, TEID length: 0 for none), a row's read from its columns without
   * the objects its `match` and `teid` make (a fill of the tables reads
   * them for every policy).
   */
  static keyFieldsOf(r: Policy, into: Uint32Array): void {
    if (r instanceof PolicyRule) {
      r.store.keyFields(r.row, into);
      return;
    }
    into[0] = r.match.addr;
    into[1] = r.match.len;
    into[2] = r.teid?.value ?? 0;
    into[3] = r.teid?.len ?? 0;
  }
  get match(): Ipv4Prefix {
    return this.store.match(this.row);
  }
  get teid(): TeidPrefix | undefined {
    return this.store.teid(this.row);
  }
  get srPrefix(): Ipv6Prefix {
    return this.store.profile(this.row).srPrefix;
  }
  get sid(): Ipv6Addr | undefined {
    return this.store.profile(this.row).sid;
  }
  /** The object readPolicy makes, key for key. */
  [PLAIN](): Policy {
    const name = this.name;
    const teid = this.teid;
    const sid = this.sid;
    return {
      where: this.where,
      ...(name === undefined ? {} : { name }),
      match: this.match,
      ...(teid === undefined ? {} : { teid }),
      srPrefix: this.srPrefix,
      ...(sid === undefined ? {} : { sid }),
      ...this.pathFields(),
    };
  }
}

/**
 * Rows a store of RuleRows holds at most. A store lives as long as any of
 * its rules: one rule left of it keeps all its rows' columns (22 B a row)
 * and the names of its named rows, about 6 KB and 256 names at most. A
 * store costs about 1.4 KB of its own (its columns in one buffer, its maps
 * made when needed; test/unit/batch-rows.test.ts), 5.5 B a row when full.
 * With a buffer per column and the maps made at once it was 3.2 KB, and
 * stores of 256 rows made a million + a million through /v1/batch 50-60
 * MB larger than stores of 1,024 (docs/bench.md, session 52).
 */
export const STORE_ROWS = 256;

/**
 * A batch keeps its sessions and policies as rows from this many
 * operations on (Planner in src/daemon/batch.ts, a batch record read back
 * from the state file); a smaller one keeps the rule reader's objects, as
 * a single change does: a store of a few rows would cost more than they.
 */
export const BATCH_ROWS_FROM = 256;

/**
 * The sessions and policies of one API batch (POST /v1/batch), or of its
 * record read back from the state file, kept as rows of stores of their
 * own instead of the rule reader's objects: a row is 40 B and 22 B of
 * columns, where the object was about 230 B (the rule, its `ue` or `match`
 * and `teid`, a heap number per address). Every row's `where` is the
 * batch's (`where`: API_WHERE, or the state file's place).
 */
export class RuleRows {
  #sessions: SessionRows | undefined;
  #policies: PolicyRows | undefined;

  constructor(readonly where: string) {}

  /**
   * The store the next session goes into, a new one when there is none or
   * the last is full (STORE_ROWS); `left`: rules of the batch still to
   * come, this one included (a store is made no larger). For a reader that
   * adds its rows itself (FlatSessions.into).
   */
  sessionStore(left: number): SessionRows {
    if (this.#sessions === undefined || this.#sessions.count === STORE_ROWS) {
      this.#sessions?.trim();
      this.#sessions = new SessionRows(true, this.where, Math.min(STORE_ROWS, left));
    }
    return this.#sessions;
  }

  /** As sessionStore(). */
  policyStore(left: number): PolicyRows {
    if (this.#policies === undefined || this.#policies.count === STORE_ROWS) {
      this.#policies?.trim();
      this.#policies = new PolicyRows(this.where, Math.min(STORE_ROWS, left));
    }
    return this.#policies;
  }

  /** `s` (the rule reader's) as the next row; `left` as sessionStore's. */
  session(s: Session, left: number): SessionRule {
    return this.sessionStore(left).add(s)!;
  }

  /** As session(). */
  policy(p: Policy, left: number): PolicyRule {
    return this.policyStore(left).add(p)!;
  }

  /** The last stores cut to their rows: the batch has no more rules. */
  trim(): void {
    this.#sessions?.trim();
    this.#policies?.trim();
  }
}

// Key bytes (src/config/row-map.ts). A session: family (4 or 6), UE prefix length, the address (16 bytes,
// an IPv4 one in the first 4). A policy: match address (4), its length, TEID prefix value (4), its length
// (0: none).
export const SESSION_KEY_BYTES = 18;
export const POLICY_KEY_BYTES = 10;

function put32(into: Uint8Array, at: number, v: number): void {
  into[at] = v >>> 24;
  into[at + 1] = (v >>> 16) & 255;
  into[at + 2] = (v >>> 8) & 255;
  into[at + 3] = v & 255;
}

/**
 * "A.B.C.D/LEN" as formatIpv4Prefix spells it (no leading zero, octets to
 * 255, LEN to 32, no host bit) from `text[at]` to `end`: the address and
 * length, or undefined for any other text.
 */
function canonicalV4Prefix(text: string, at: number, end: number): { addr: number; len: number } | undefined {
  let addr = 0;
  let i = at;
  for (let part = 0; part < 5; part++) {
    const start = i;
    let v = 0;
    while (i < end) {
      const c = text.charCodeAt(i);
      if (c < 48 || c > 57) break;
      v = v * 10 + (c - 48);
      i++;
    }
    const digits = i - start;
    if (digits === 0 || digits > 3 || (digits > 1 && text.charCodeAt(start) === 48)) return undefined;
    if (part < 4) {
      if (v > 255) return undefined;
      addr = addr * 256 + v;
      if (i >= end || text.charCodeAt(i) !== (part < 3 ? 46 /* . */ : 47) /* / */) return undefined;
      i++;
    } else {
      if (i !== end || v > 32) return undefined;
      const host = v === 32 ? 0 : v === 0 ? 0xffff_ffff : 0xffff_ffff >>> v;
      if ((addr & host) !== 0) return undefined;
      return { addr, len: v };
    }
  }
  return undefined;
}

function lowerHex(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  return -1;
}

/**
 * A session's key bytes from its key text: true for sessionKey's canonical
 * IPv4 text, 'loose' for an IPv6 prefix (`v6` reads it; the caller compares
 * the text with the found row's), false for any other text.
 */
export function sessionTextBytes(key: string, into: Uint8Array, v6: (key: string) => Ipv6Prefix | undefined): boolean | 'loose' {
  into.fill(0);
  if (key.includes(':')) {
    const p = v6(key);
    if (p === undefined) return false;
    sessionKeyBytes({ family: 6, prefix: p }, into);
    return 'loose';
  }
  const p = canonicalV4Prefix(key, 0, key.length);
  if (p === undefined) return false;
  into[0] = 4;
  into[1] = p.len;
  put32(into, 2, p.addr);
  return true;
}

/** A policy's key bytes from its canonical key text (policyKey's: "A.B.C.D/L" or "A.B.C.D/32 teid 0x%08x/L"); false for any other text. */
export function policyTextBytes(key: string, into: Uint8Array): boolean {
  const sp = key.indexOf(' ');
  const p = canonicalV4Prefix(key, 0, sp < 0 ? key.length : sp);
  if (p === undefined) return false;
  put32(into, 0, p.addr);
  into[4] = p.len;
  if (sp < 0) {
    put32(into, 5, 0);
    into[9] = 0;
    return true;
  }
  // " teid 0x" + 8 lowercase hex digits + "/" + length 1..32 (no leading zero).
  if (p.len !== 32 || !key.startsWith(' teid 0x', sp) || key.charCodeAt(sp + 16) !== 47) return false;
  let value = 0;
  for (let j = sp + 8; j < sp + 16; j++) {
    const d = lowerHex(key.charCodeAt(j));
    if (d < 0) return false;
    value = value * 16 + d;
  }
  const lenText = key.slice(sp + 17);
  if (!/^(?:[1-9]|[12][0-9]|3[0-2])$/.test(lenText)) return false;
  const len = Number(lenText);
  const mask = len === 32 ? 0xffff_ffff : (0xffff_ffff << (32 - len)) >>> 0;
  if ((value & ~mask) >>> 0 !== 0) return false;
  put32(into, 5, value);
  into[9] = len;
  return true;
}

/** A session's key bytes from its UE prefix. */
function sessionKeyBytes(ue: Session['ue'], into: Uint8Array): void {
  into.fill(0);
  into[0] = ue.family;
  into[1] = ue.prefix.len;
  if (ue.family === 4) {
    put32(into, 2, ue.prefix.addr);
    return;
  }
  const a = ue.prefix.addr;
  for (let w = 0; w < 4; w++) put32(into, 2 + 4 * w, Number((a >> BigInt(32 * (3 - w))) & 0xffff_ffffn));
}

/** A policy's key bytes from its match and TEID prefix. */
function policyKeyBytes(match: Ipv4Prefix, teid: TeidPrefix | undefined, into: Uint8Array): void {
  put32(into, 0, match.addr);
  into[4] = match.len;
  put32(into, 5, teid?.value ?? 0);
  into[9] = teid?.len ?? 0;
}

/** Rank of each number 0..255 written in decimal among all of them in text order ("0" < "1" < "10" < "100" < ...). */
const DECIMAL_RANK = ((): Uint8Array => {
  const texts = Array.from({ length: 256 }, (_, i) => String(i)).sort();
  const rank = new Uint8Array(256);
  texts.forEach((t, r) => (rank[Number(t)] = r));
  return rank;
})();

/**
 * The order of key texts (policyKey's, sessionKey's for an IPv4 UE) from
 * key bytes, as two numbers: text order is the order of the octets'
 * decimal texts ("1" < "10" < "2"; the separator after an octet or a
 * length, "." "/" " " or the end, sorts before any digit, so a shorter
 * number that starts a longer one comes first), then the length's, then
 * (policies) no TEID before a TEID prefix, whose 8 hex digits sort as
 * numbers, then its length's text. False for an IPv6 UE.
 */
export function keyTextOrder(key: Uint8Array, out: Float64Array, session: boolean): boolean {
  const at = session ? 2 : 0;
  if (session && key[0] !== 4) return false;
  const len = session ? key[1]! : key[4]!;
  const r = DECIMAL_RANK;
  out[0] = (((r[key[at]!]! * 256 + r[key[at + 1]!]!) * 256 + r[key[at + 2]!]!) * 256 + r[key[at + 3]!]!) * 256 + r[len]!;
  if (session || key[9] === 0) out[1] = 0;
  else out[1] = 1 + (((key[5]! * 256 + key[6]!) * 256 + key[7]!) * 256 + key[8]!) * 256 + r[key[9]!]!;
  return true;
}
