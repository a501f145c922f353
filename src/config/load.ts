/**
 * YAML -> validated Config. All checking happens here, once: every error is a
 * ConfigError naming the file, line and key path (`policies[2].sr_prefix`),
 * what is wrong, and what would be accepted. See config/example.yaml.
 *
 * Two YAML parsers, one schema (YAML 1.2 core): js-yaml reads the file (about
 * 10x faster: a config of 65,536 policies and 65,536 local SIDs parses in
 * 0.6 s, where `yaml` takes 6 s), and `yaml`, which keeps source positions,
 * is loaded and run only when a message needs a line number (yaml-doc.ts).
 */
import { ownCopy } from '../host/own-copy.js';
import { ShardedMap } from '../host/sharded-map.js';
import { isAscii } from 'node:buffer';
import { readFile } from 'node:fs/promises';
import jsyaml from 'js-yaml';
import { NOT_BLOCK, parseBlockYaml, type ItemHook, type ItemRead } from './block-yaml.js';
import type { Document, LineCounter } from 'yaml';
import { yamlDoc } from './yaml-doc.js';
import { AsciiText, textOf, type Chars } from './ascii-text.js';
import { AddressError, formatIpv4, formatIpv4Prefix, formatIpv6, formatIpv6Prefix, parseIpv4, parseIpv4Prefix, parseIpv6, parseIpv6Prefix, type WarnFn } from '../sid/addr.js';
import { MAX_GTP6_SID_PREFIX_LEN, MAX_SID_PREFIX_LEN, MAX_SRC_PREFIX_LEN } from '../sid/mobile.js';
import type { Ipv4Addr, Ipv4Prefix, Ipv6Addr, Ipv6Prefix } from '../sid/types.js';
import { ipv6Prefix } from '../sid/addr.js';
import { ConfigError, configWarning, type ConfigWarning } from './errors.js';
import { localSidKey, parseTeidPrefix, policyKey, SECTION_KEY, sessionKey, whereText } from './keys.js';
import { MUP_MAX_PLENS, MUP_MAX_SEGS } from './limits.js';
import { RULE_NAME_CHAR, RULE_NAME_MAX } from './rule-name.js';
import { RepeatedRowKey, RowKeyedMap, type FilledIndex } from './row-map.js';
import { isRowAt, keyTextOrder, POLICY_KEY_BYTES, PolicyRows, PolicyRule, policyTextBytes, SESSION_KEY_BYTES, sessionTextBytes, SessionRows, SessionRule, type SessionProfile, type SessionRowsData } from './rows.js';
import { FLAT_SLOTS, flatObjectEnd, FlatLocalSids, FlatMemberColumns, FlatPolicies, FlatSessions, byteSpace, TakenRule, type FlatRuleDefaults, type FlatRuleReader } from './flat-rules.js';
import { localSidGrowth, mtuTooSmall, sessionGrowth, type Growth } from './mtu-floor.js';
import { MAX_PER_RULE_TOP, parsePerRule } from './per-rule.js';
import type {
  BgpConfig,
  BgpDsd,
  BgpRuleDefaults,
  Config,
  ContainerMode,
  LocalSidAdvertise,
  DaemonSettings,
  ForwardingMode,
  InterfaceConfig,
  LocalSid,
  LocalSidBehavior,
  Policy,
  Session,
  Where,
  RuleSection,
  Settings,
  SrhMode,
  TeidPrefix,
  XdpMode,
} from './types.js';

export const DEFAULT_SETTINGS: Settings = {
  forwarding: 'fib',
  sourcePortMin: 49152,
  sourcePortMax: 65535,
  maxPolicies: 65536,
  maxLocalSids: 65536,
  hashSeed: 0,
};
export const DEFAULT_HOP_LIMIT = 64;
export const DEFAULT_TTL = 64;
/** settings.max_sessions when absent. */
export const DEFAULT_MAX_SESSIONS = 65536;
/**
 * Upper bound of settings.max_policies / max_localsids / max_sessions: 2^21,
 * so that 1,048,576 (N3, TEID) policies fit with the address-only entries of
 * their N3 addresses (each takes a place of max_policies).
 */
export const MAX_TABLE_ENTRIES = 2_097_152;

const FORWARDING_MODES: readonly ForwardingMode[] = ['fib', 'tx', 'kernel'];
const SRH_MODES: readonly SrhMode[] = ['auto', 'always', 'reduced'];
const CONTAINER_MODES: readonly ContainerMode[] = ['always', 'auto', 'never'];
const LOCALSID_BEHAVIORS: readonly LocalSidBehavior[] = ['end.m.gtp4.e', 'end.m.gtp6.e', 'end.m.gtp6.d', 'end.m.gtp6.d.di'];
const POLICY_BEHAVIORS = ['h.m.gtp4.d'] as const;

const XDP_MODES: readonly XdpMode[] = ['native', 'generic'];

const TOP_KEYS = ['settings', 'interfaces', 'daemon', 'policies', 'localsids', 'sessions', 'bgp'] as const;
const INTERFACE_KEYS = ['name', 'xdp'] as const;
const DAEMON_KEYS = ['socket', 'socket_group', 'state_file', 'http', 'reload_max_delete_share', 'max_connections', 'stall_timeout', 'metrics'] as const;
const METRICS_KEYS = ['per_rule'] as const;
const HTTP_KEYS = ['listen', 'token_file', 'open_reads', 'read_token_file'] as const;
/** Defaults of daemon.max_connections (per listener) and daemon.stall_timeout (seconds). */
export const DEFAULT_MAX_CONNECTIONS = 64;
export const DEFAULT_STALL_TIMEOUT_S = 10;
const SETTINGS_KEYS = ['forwarding', 'udp_source_ports', 'max_policies', 'max_localsids', 'hash_seed', 'max_sessions'] as const;
const POLICY_KEYS = ['name', 'match', 'sr_prefix', 'src_prefix', 'segments', 'srh', 'hop_limit', 'behavior', 'mtu', 'teid', 'sid'] as const;
const SESSION_KEYS = [
  'name', 'ue', 'teid', 'qfi', 'rqi', 'endpoint', 'source', 'isd', 'src_prefix', 'segments', 'srh', 'hop_limit', 'mtu',
] as const;
const LOCALSID_KEYS = [
  'name', 'sid', 'src_prefix_len', 'container', 'ttl', 'behavior', 'source', 'sr_prefix', 'segments', 'srh', 'hop_limit', 'mtu', 'advertise',
] as const;
/** The keys each local SID behaviour takes (besides name and behavior). */
const LOCALSID_KEYS_OF: Readonly<Record<LocalSidBehavior, readonly string[]>> = {
  'end.m.gtp4.e': ['sid', 'src_prefix_len', 'container', 'ttl', 'mtu', 'advertise'],
  'end.m.gtp6.e': ['sid', 'source', 'container', 'hop_limit', 'mtu', 'advertise'],
  'end.m.gtp6.d': ['sid', 'source', 'sr_prefix', 'segments', 'srh', 'hop_limit', 'mtu'],
  'end.m.gtp6.d.di': ['sid', 'source', 'sr_prefix', 'segments', 'srh', 'hop_limit', 'mtu'],
};

/** Every key an entry of each kind takes (and, per local SID behaviour, which): the CLI's options are checked against these. */
export const RULE_ENTRY_KEYS = { policy: POLICY_KEYS, localsid: LOCALSID_KEYS, session: SESSION_KEYS, localsidOf: LOCALSID_KEYS_OF } as const;

const SID_LEN_WHY =
  'the SID is this prefix (L bits) followed by the IPv4 address (32 bits) and Args.Mob.Session (40 bits), ' +
  `so L + 32 + 40 must fit in 128 bits: L at most ${MAX_SID_PREFIX_LEN}, e.g. 2001:db8:1::/48`;
const SID6_LEN_WHY =
  'the SID is this prefix (L bits) followed by Args.Mob.Session (40 bits), ' +
  `so L + 40 must fit in 128 bits: L at most ${MAX_GTP6_SID_PREFIX_LEN}, e.g. 2001:db8:6::/64`;
const SRC_LEN_WHY =
  'the IPv6 source address is this prefix (P bits) followed by the IPv4 source (32 bits), ' +
  `so P + 32 must fit in 128 bits: P at most ${MAX_SRC_PREFIX_LEN}, e.g. 2001:db8:ffff::/64`;

/** Read and validate a YAML config file. */
export async function loadConfigFile(path: string): Promise<Config> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    throw new ConfigError(path, '', `cannot read the config file: ${why}`);
  }
  return parseConfig(text, path);
}

/**
 * Validate YAML text (or JSON, which is YAML: read streamed, rule by rule,
 * jsonRulesAsRead); `file` is used in messages only. `onSettings` is
 * called once the settings are read and the rule counts checked against
 * them, before the rules are (the daemon starts loading the program then).
 * `bytes`, the text's UTF-8 bytes when at hand (the parser's thread has
 * the file's), spares a copy of a JSON text that is ASCII (FlatRuns). An
 * AsciiText (src/config/ascii-text.ts) is its own bytes: no string of the
 * whole text is made unless something needs it.
 */
export function parseConfig(text: string | AsciiText, file = '<inline>', onSettings?: (s: Settings) => void, bytes?: Uint8Array, ahead?: ListAhead): Config {
  return parseConfigText(text, file, onSettings, true, typeof text === 'string' ? bytes : text.bytes, ahead);
}

/**
 * parseConfig with a JSON text read whole (JSON.parse's tree, then the
 * rules), as before the streamed read: the reference that read is held to
 * (tests).
 */
export function parseConfigReadWhole(text: string, file = '<inline>'): Config {
  return parseConfigText(text, file, undefined, false);
}

function parseConfigText(input: string | AsciiText, file: string, onSettings: ((s: Settings) => void) | undefined, streamJson: boolean, bytes?: Uint8Array, ahead?: ListAhead): Config {
  const src = new Source(file, input);
  let asRead = new RulesAsRead(src);
  const adopt = ahead === undefined ? undefined : (key: string, at: number, top: Record<string, unknown>) => asRead.adopt(key, at, ahead, top);
  let top: unknown = streamJson ? jsonRulesAsRead(src, input, (key) => asRead.hook(key), bytes, (key) => asRead.flatReader(key), adopt) : NOT_STREAMED;
  // Whatever reads it from here on reads the string: an ASCII file's is made now, if the streamed read gave it up.
  let text = '';
  // Anything the streamed read does not take (or refuses) is read whole, as before: errors worded there.
  if (top === NOT_STREAMED) {
    text = textOf(input);
    asRead = new RulesAsRead(src);
    // A list taken from the thread goes with the streamed read (its start line says so).
    ahead?.readWhole();
    top = fastJson(src, text);
  }
  const tryBlock = top === NOT_JSON;
  if (tryBlock) {
    // Plain items of an ASCII file read from its bytes, as a JSON file's are (not for the whole read, the tests' reference).
    const ascii = streamJson ? asciiBytes(text, bytes) : undefined;
    top = parseBlockYaml(text, (key) => asRead.hook(key), ascii === undefined ? undefined : { bytes: ascii, reader: (key) => asRead.flatReader(key) });
  }
  const readByBlock = tryBlock && top !== NOT_BLOCK;
  // js-yaml reads it all again: nothing read during the block reader's try counts.
  if (top === NOT_BLOCK) asRead = new RulesAsRead(src);
  if (top === NOT_BLOCK) try {
    top = jsyaml.load(text, {
      schema: jsyaml.CORE_SCHEMA,
      filename: file,
      onWarning: (w) => src.warnings.push(configWarning(file, '', `YAML: ${firstLine(w.reason ?? w.message)}`, (w.mark?.line ?? -1) + 1 || undefined)),
    });
  } catch (e) {
    if (!(e instanceof jsyaml.YAMLException)) throw e;
    // The position-keeping parser words syntax errors as before; if it
    // finds none, js-yaml's own message stands.
    src.syntaxError();
    const line = e.mark === undefined ? undefined : e.mark.line + 1;
    throw new ConfigError(file, '', `YAML syntax error: ${firstLine(e.reason ?? e.message)}; fix the YAML (indentation, quotes, brackets)`, line);
  }

  const root = top === null || top === undefined ? {} : readMapping(src, [], top, TOP_KEYS, 'at the top level');

  const settings = readSettings(src, ['settings'], root['settings']);
  const interfaces = readInterfaces(src, ['interfaces'], root['interfaces']);
  const daemon = readDaemon(src, ['daemon'], root['daemon']);
  const rawPolicies = readList(src, ['policies'], root['policies'], 'a list of policies (each with match, sr_prefix, src_prefix)');
  const rawLocalSids = readList(src, ['localsids'], root['localsids'], 'a list of local SIDs (each with sid, src_prefix_len)');
  checkCount(src, ['policies'], rawPolicies.length, settings.maxPolicies, 'policies', 'max_policies');
  checkCount(src, ['localsids'], rawLocalSids.length, settings.maxLocalSids, 'local SIDs', 'max_localsids');
  const rawSessions = readList(src, ['sessions'], root['sessions'], 'a list of sessions (each with ue, teid, qfi, endpoint, source, isd, src_prefix)');
  checkCount(src, ['sessions'], rawSessions.length, settings.maxSessions ?? DEFAULT_MAX_SESSIONS, 'sessions', 'max_sessions');
  onSettings?.(settings);

  const policies = asRead.policies.finish(src, rawPolicies);
  const localsids = asRead.localsids.finish(src, rawLocalSids);
  checkPolicies(src, policies);
  checkLocalSids(src, localsids);
  const sessions = asRead.sessions.finish(src, rawSessions);
  checkSessions(src, sessions);
  const bgp = root['bgp'] === null || root['bgp'] === undefined ? undefined : readBgp(src, ['bgp'], root['bgp']);
  const advertised = localsids.findIndex((l) => l.advertise !== undefined);
  if (advertised >= 0 && bgp?.nexthop === undefined) {
    src.fail(
      bgp === undefined ? ['localsids', advertised, 'advertise'] : ['bgp', 'nexthop'],
      bgp === undefined
        ? 'advertise needs a bgp section (the sidecar that advertises the ISD routes); add one or remove advertise'
        : 'required when a local SID has advertise: the IPv6 next hop of our ISD routes (gobgp 3.10 takes only IPv6 there), e.g. 2001:db8:ff::2',
    );
  }

  const config: Config = { file, settings, interfaces, daemon, policies, localsids, sessions, ...(bgp === undefined ? {} : { bgp }), warnings: src.warnings };
  const spans: ItemSpans = {};
  for (const [k, list] of [['policies', policies], ['localsids', localsids], ['sessions', sessions]] as const) {
    const s = asRead[k].spans(list.length);
    if (s !== undefined) spans[k] = s;
  }
  if (Object.keys(spans).length > 0) keepItemSpans(config, spans);
  if (readByBlock) blockRead.add(config);
  return config;
}

const blockRead = new WeakSet<Config>();

/**
 * Whether the config was read from its text by the block YAML reader (the
 * whole file: its top-level keys unquoted at the first column, each rule
 * section's entries located by its item spans, none if the section is
 * empty): what the running config's splice needs of the text
 * (src/config/running-splice.ts).
 */
export function readByBlockReader(config: Config): boolean {
  return blockRead.has(config);
}

/** The same mark, for a config the parser's thread read (src/config/parse-async.ts only: the thread read the text). */
export function markReadByBlockReader(config: Config): void {
  blockRead.add(config);
}

/**
 * Where each rule of a list was in the text the config was read from: rule
 * i of `policies` is text[policies[i], policies[i + 1]) (ItemHook in
 * src/config/block-yaml.ts; and jsonRulesAsRead's for JSON). A list read
 * otherwise (JSON read whole, js-yaml) or empty has none. A reload reads a
 * rule as the running one when its text is the same at the same place
 * (src/config/parse-async.ts).
 */
export type ItemSpans = Partial<Record<RuleSection, Uint32Array>>;

const itemSpans = new WeakMap<Config, ItemSpans>();

export function keepItemSpans(config: Config, spans: ItemSpans): void {
  itemSpans.set(config, spans);
}

export function itemSpansOf(config: Config): ItemSpans | undefined {
  return itemSpans.get(config);
}

/**
 * One section's rules read as the block reader reaches them: each item's
 * mapping is garbage at once (a young object) instead of part of a tree of
 * 131,072 that the collector copies and promotes before any is read. Errors
 * keep the file's order (settings and the other top-level checks first,
 * then policies, local SIDs, sessions): the first item refused here and
 * all after it are kept as read and read again, in parseConfig's order, by
 * finish(), which throws the same error there. Warnings are kept apart
 * (fork) and added at that point too.
 */
class Section<R> {
  /** Items read into rules: the first `done` of the list. */
  done = 0;
  #refused = false;
  readonly #src: Source;

  constructor(
    src: Source,
    readonly name: RuleSection,
    readonly read: (src: Source, path: Path, v: unknown) => R,
    /** Keeps each rule read as a row (src/config/rows.ts), the row's rule in the list. */
    readonly rows?: { add(r: R): R | undefined },
  ) {
    this.#src = src.fork();
  }

  /** Where the items read so far begin in the text, and where the last one ends (ItemHook): see spans(). */
  #starts = new Uint32Array(1024);
  #count = 0;
  #end = 0;
  #spansOk = true;

  item(v: unknown, i: number, start: number, end: number): unknown {
    if (i !== this.#count || (i > 0 && start !== this.#end)) this.#spansOk = false;
    else {
      if (i === this.#starts.length) {
        const grown = new Uint32Array(i * 2);
        grown.set(this.#starts);
        this.#starts = grown;
      }
      this.#starts[i] = start;
      this.#count++;
      this.#end = end;
    }
    if (v instanceof TakenRule) {
      if (!this.#refused && i === this.done && v.next === i) {
        // Added before the count moves on: a reader without rows (local SIDs) reads the item's index there.
        const r = v.add();
        this.done++;
        return r;
      }
      v = v.raw();
    }
    if (this.#refused || i !== this.done) return v;
    const warned = this.#src.warnings.length;
    try {
      const r = this.read(this.#src, [this.name, i], v);
      this.done++;
      return this.rows?.add(r) ?? r;
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      this.#refused = true;
      this.#src.warnings.length = warned;
      return v;
    }
  }

  /** Whether reading the items drew a warning (kept apart until finish()). */
  get warned(): boolean {
    return this.#src.warnings.length > 0;
  }

  /**
   * The whole list read on another thread (RulesAsRead.adopt): every item a
   * rule, item i's text at text[spans[i], spans[i + 1]).
   */
  adopt(list: readonly R[], spans: Uint32Array<ArrayBuffer>): void {
    if (this.done !== 0 || this.#count !== 0 || spans.length !== list.length + 1) throw new Error(`internal: the ${this.name} read ahead cannot be taken here`);
    this.done = list.length;
    this.#starts = spans.subarray(0, list.length);
    this.#count = list.length;
    this.#end = spans[list.length]!;
  }

  /**
   * Item i's text is text[spans[i], spans[i + 1]): `count` + 1 offsets, if
   * the block reader (or the streamed JSON read) read every one of the
   * `count` items (not for js-yaml or JSON read whole, nor for an empty list).
   */
  spans(count: number): Uint32Array<ArrayBuffer> | undefined {
    if (!this.#spansOk || count === 0 || this.#count !== count) return undefined;
    const out = new Uint32Array(count + 1);
    out.set(this.#starts.subarray(0, count));
    out[count] = this.#end;
    return out;
  }

  /** The section's rules: those read already, then the rest read now. */
  finish(src: Source, list: readonly unknown[]): R[] {
    // One by one: a spread of 200,000 warnings (a host-bits sr_prefix in every policy) overflowed the stack.
    for (const w of this.#src.warnings) src.warnings.push(w);
    return list.map((v, i) => (i < this.done ? (v as R) : this.read(src, [this.name, i], v)));
  }
}

/** The rule sections read during the block reader's or the streamed JSON read's parse (for js-yaml and JSON read whole, finish() reads them all). */
class RulesAsRead {
  readonly policies: Section<Policy>;
  readonly localsids: Section<LocalSid>;
  readonly sessions: Section<Session>;
  readonly #flat: { readonly policies: FlatPolicies; readonly sessions: FlatSessions; readonly localsids: FlatLocalSids };
  /** The sessions' rows (readListAhead sends them), and the policies'. */
  readonly sessionRows: SessionRows;
  readonly policyRows: PolicyRows;

  /** `sessionObjects` false: the sessions are kept as rows only, with no rule object each (SessionRows.objects). */
  constructor(src: Source, sessionObjects = true) {
    const policies = new PolicyRows();
    const sessions = new SessionRows(sessionObjects);
    this.sessionRows = sessions;
    this.policyRows = policies;
    this.policies = new Section(src, 'policies', readPolicy, policies);
    this.localsids = new Section(src, 'localsids', readLocalSid);
    this.sessions = new Section(src, 'sessions', readSession, sessions);
    // The flat items they take become rows of the same stores (local SIDs: the rule reader's objects), in list order (Section.item).
    const defaults = flatDefaults(src);
    this.#flat = {
      policies: new FlatPolicies(policies, defaults),
      sessions: new FlatSessions(sessions, defaults),
      localsids: new FlatLocalSids(defaults, () => this.localsids.done),
    };
  }

  /** The reader of a rule list's flat items from the bytes (JSON, plain block YAML), if the list has one. */
  flatReader(key: string): FlatRuleReader | undefined {
    return key === 'policies' || key === 'sessions' || key === 'localsids' ? this.#flat[key] : undefined;
  }

  hook(key: string): ItemRead | undefined {
    if (key !== 'policies' && key !== 'localsids' && key !== 'sessions') return undefined;
    const s = this[key];
    return (v, i, start, end) => s.item(v, i, start, end);
  }

  /**
   * The list of `key` at `at` (its `[`) as `ahead` read it on its thread
   * (readListAhead there): its rules, now this section's, and the index
   * past its `]`. Undefined when it has none for this list (read it here).
   */
  adopt(key: string, at: number, ahead: ListAhead, top: Record<string, unknown>): { list: unknown[]; end: number } | undefined {
    if (key !== 'sessions' || this.sessions.done !== 0) return undefined;
    // While the thread reads: its rules (an object per row: 0.1-0.3 s for a million), as far as it has read, then
    // the policies' index (0.25-0.3 s), if they came first.
    const rows = new SessionRows();
    const list: SessionRule[] = [];
    const policiesIndex = this.#policiesIndexAhead(top['policies']);
    const read = ahead.take(key, at, (n) => rows.rulesTo(list, Math.min(n, list.length + RULES_A_STEP)) || policiesIndex());
    if (read === undefined) return undefined;
    if (read.at !== at) throw new Error(`internal: the sessions read ahead from ${read.at} were given for the list at ${at}`);
    rows.take(read.rows, sentSessionProfile);
    rows.rulesTo(list, rows.count);
    list.length = rows.count;
    // The thread's index of their keys, made after it sent them: the sessions' check (checkByKeyBytes) takes it
    // instead of making it again.
    filledIndexes.set(rows, () => ahead.index());
    this.sessions.adopt(list, read.spans);
    return { list, end: read.end };
  }

  /**
   * A step of the policies' index by key (what checkPolicies makes after
   * the parse), for a list read whole into rows; false when there is none
   * to do. The check takes it (filledIndexes), made whole then if the
   * wait ended first: none of it is made twice. A key given twice ends it,
   * and the check finds and words that in its turn.
   */
  #policiesIndexAhead(policies: unknown): () => boolean {
    const rows = this.policyRows;
    if (!Array.isArray(policies) || policies.length === 0 || this.policies.done !== policies.length || rows.count !== policies.length) return () => false;
    const map = ruleKeyMap('policies', policies, false);
    let done = false;
    let repeated = false;
    const step = (n: number): void => {
      try {
        done = map.fill(n);
      } catch (e) {
        if (!(e instanceof RepeatedRowKey)) throw e;
        done = repeated = true;
      }
    };
    filledIndexes.set(rows, () => {
      while (!done) step(65536);
      return repeated ? undefined : map.filledIndex();
    });
    return () => {
      if (done) return false;
      step(INDEX_A_STEP);
      return true;
    };
  }
}

/** readListAhead's end at the first item it cannot take. */
const GIVE_UP = new Error('the list is read by the parse');

/** Keys indexed a step while the thread reads (1-2 ms). */
const INDEX_A_STEP = 4096;

/**
 * A rule list read on another thread while this one reads the rest of the
 * file (src/config/list-ahead.ts): the sessions of a large JSON config.
 */
export interface ListAhead {
  /**
   * The list of `key` whose `[` is at `at`, waited for if it is being read;
   * undefined when the thread has none for it (another list or place, it
   * gave up, or it had not begun): this thread reads it. While it waits it
   * calls `meanwhile` with the number of items the thread has read so far
   * (a step of work; false when there is none to do yet).
   */
  take(key: string, at: number, meanwhile?: (read: number) => boolean): ListReadAhead | undefined;
  /**
   * The index by key of the list take() gave, made by the thread after it
   * (while this one checks the policies), waited for; undefined when it
   * made none (a key given twice, among others): this thread makes it.
   */
  index(): FilledIndex | undefined;
  /** The streamed read was given up and the file is read whole: a list taken is not used. */
  readWhole(): void;
}

/** Rules made a step while the thread reads (about 2-4 ms). */
const RULES_A_STEP = 16384;

/** A sessions list read from the file's bytes on another thread (readListAhead). */
export interface ListReadAhead {
  /** Where its `[` is, and the index past its `]`. */
  readonly at: number;
  readonly end: number;
  /** Item i's text is [spans[i], spans[i + 1]) (Section.spans). */
  readonly spans: Uint32Array<ArrayBuffer>;
  readonly rows: SessionRowsData;
}

/**
 * The sessions list at `at` (its `[`) of an ASCII JSON file's bytes, read
 * as parseConfig reads it (for a thread: src/config/list-ahead-worker.ts).
 * Undefined unless every item became a row with no warning: the list is
 * then read by parseConfig itself, which words any error.
 */
export function readListAhead(
  bytes: Uint8Array,
  at: number,
  progress?: (read: number) => void,
): { read: ListReadAhead; index: (beat?: () => void) => FilledIndex | undefined } | undefined {
  if (bytes[at] !== 0x5b /* [ */) return undefined;
  const text = new AsciiText(bytes);
  // No text: a warning or refusal here would look its line up in the whole file (a parse of all of it), and
  // either ends this read anyway.
  const src = new Source('<read ahead>', undefined);
  // Rows only: the other side makes the rule objects (while it waits).
  const asRead = new RulesAsRead(src, false);
  const runs = new FlatRuns(text, bytes);
  runs.reader = asRead.flatReader('sessions');
  let list: unknown[] | undefined;
  const each = asRead.hook('sessions')!;
  const s = asRead.sessions;
  const hook: ItemRead = (v, i, start, end) => {
    if ((i & 4095) === 0) progress?.(i);
    const r = each(v, i, start, end);
    // An item not read into a rule (refused) or one that warned: no need to read on (the parse reads the list).
    if (s.done !== i + 1 || s.warned) throw GIVE_UP;
    return r;
  };
  let end: number;
  try {
    end = jsonItems(text, at, hook, (l) => (list = l), runs);
  } catch (e) {
    if (e === GIVE_UP) return undefined;
    throw e;
  }
  if (end < 0 || list === undefined || list.length === 0 || s.done !== list.length || s.warned || src.warnings.length > 0) return undefined;
  // Every item a row (one the rule reader read that could not be one is in the list, not in the rows).
  const rows = asRead.sessionRows;
  if (rows.count !== list.length) return undefined;
  const spans = s.spans(list.length);
  if (spans === undefined) return undefined;
  // Made after the rows are sent, `beat` called between its steps; undefined for a key given twice (the other
  // side words the error). Over the rows' keys: the same index as ruleKeyMap's over their rules.
  const index = (beat?: () => void): FilledIndex | undefined => {
    try {
      const map = sessionRowsKeyMap(rows);
      while (!map.fill(65536)) beat?.();
      return map.filledIndex();
    } catch (e) {
      if (e instanceof RepeatedRowKey) return undefined;
      throw e;
    }
  };
  return { read: { at, end, spans, rows: rows.data() }, index };
}

/**
 * A session profile from another thread as it came (its prefix objects
 * shared among the sessions there, as one message keeps them: not with
 * the policies'), and no segments the shared none.
 */
function sentSessionProfile(p: SessionProfile): SessionProfile {
  return p.segments.length === 0 ? { ...p, segments: NO_SEGMENTS } : p;
}

/**
 * Validate one policy given as an object with the config file's keys (the
 * control API's input), exactly as a `policies` entry of the file is.
 * `where` names it in messages (e.g. "request body").
 */
export function parsePolicyEntry(v: unknown, where: string, warnings: ConfigWarning[] = []): Policy {
  const src = new Source(where, undefined);
  const p = readPolicy(src, [], v);
  warnings.push(...src.warnings);
  return placed(p, where);
}

/** Validate one local SID given as an object with the config file's keys. */
export function parseLocalSidEntry(v: unknown, where: string, warnings: ConfigWarning[] = []): LocalSid {
  const src = new Source(where, undefined);
  const l = readLocalSid(src, [], v);
  warnings.push(...src.warnings);
  return placed(l, where);
}

/** Validate one session given as an object with the config file's keys. */
export function parseSessionEntry(v: unknown, where: string, warnings: ConfigWarning[] = []): Session {
  const src = new Source(where, undefined);
  const s = readSession(src, [], v);
  warnings.push(...src.warnings);
  return placed(s, where);
}

/**
 * A rule just read, named `where`: set in place, not copied (a copy is a
 * second object per rule, and loses the key kept for the first). Only for
 * an object no one else holds yet.
 */
export function placed<R extends { readonly where: Where }>(r: R, where: string): R {
  (r as { where: Where }).where = where;
  return r;
}

/** Check a whole rule set as the file's cross checks do (unique keys and names, prefix lengths). */
/**
 * A local SID with `advertise` needs the sidecar that advertises its ISD
 * routes (`bgp`, with `nexthop`), as the file's check says. Taken through
 * the API before, the rule made every `config save` refused (the saved file
 * did not load); found in review, session 43.
 */
export function checkAdvertiseHasBgp(l: LocalSid, bgp: BgpConfig | undefined, where: string): void {
  if (l.advertise === undefined || bgp?.nexthop !== undefined) return;
  throw new ConfigError(
    where,
    'advertise',
    bgp === undefined
      ? 'advertise needs a bgp section (the sidecar that advertises the ISD routes); add one to the config file or remove advertise'
      : "advertise needs bgp.nexthop (the IPv6 next hop of our ISD routes; gobgp 3.10 takes only IPv6 there): add it to the config file's bgp section or remove advertise",
  );
}

export function checkRuleSet(file: string, policies: readonly Policy[], localsids: readonly LocalSid[], sessions: readonly Session[] = []): void {
  const src = new Source(file, undefined);
  checkPolicies(src, policies);
  checkLocalSids(src, localsids);
  checkSessions(src, sessions);
}

/** The prefix-length part of checkRuleSet alone, for the kinds given (keys and names known unique). */
export function checkRuleSetLengths(file: string, rules: { policies?: readonly Policy[]; localsids?: readonly LocalSid[]; sessions?: readonly Session[] }): void {
  const src = new Source(file, undefined);
  if (rules.policies !== undefined) checkPolicyLengths(src, rules.policies);
  if (rules.localsids !== undefined) checkLocalSidLengths(src, rules.localsids);
  if (rules.sessions !== undefined) checkSessionLengths(src, rules.sessions);
}

/**
 * The settings read ahead of the whole file, to start loading the program
 * before the (long) parse: the top-level `settings:` block (block style, or
 * flow style on its line) cut out of the text and read alone. A guess, not
 * a check: undefined when nothing can be cut out cheaply (JSON, anchors,
 * errors); parseConfig's settings decide, and the caller compares them.
 * `whole` false: `text` is the file's first lines only (a large file's
 * head, read before the rest): a YAML block that runs to its end may go on
 * past it, and is not read (JSON's scan already refuses a value cut short).
 */
export function peekSettings(input: string | AsciiText, whole = true): Settings | undefined {
  const first = jsonSpace(input, 0);
  if (input.charCodeAt(first) === 0x7b /* { */) return peekJsonSettings(input, first);
  const text = textOf(input);
  const m = /^settings:/m.exec(text);
  if (m === null) return undefined;
  // The block: its first line and the following indented, blank or comment lines.
  const block = /\n(?:[ \t][^\n]*|#[^\n]*)?(?=\n|$)/y;
  let end = text.indexOf('\n', m.index);
  if (end < 0) end = text.length;
  for (block.lastIndex = end; block.exec(text) !== null; ) end = block.lastIndex;
  if (!whole && end >= text.length) return undefined;
  try {
    const top = jsyaml.load(text.slice(m.index, end), { schema: jsyaml.CORE_SCHEMA });
    if (top === null || typeof top !== 'object' || !('settings' in top)) return undefined;
    return readSettings(new Source('<settings read ahead>', undefined), ['settings'], (top as { settings: unknown }).settings);
  } catch {
    return undefined;
  }
}

/** Characters of a JSON config's members before its settings that peekJsonSettings reads past, at most. */
const PEEK_JSON_MAX = 1024 * 1024;

/**
 * peekSettings of a JSON text: its top-level `settings` member, if it comes
 * before the rule lists (as generated files put it). Before, a JSON config
 * read nothing ahead: the program began loading once every rule was read
 * (a million sessions and policies: 5.5 s into the start). The members
 * before it are skipped, within the first PEEK_JSON_MAX characters; a rule
 * list ends the look.
 */
function peekJsonSettings(whole: Chars, i: number): Settings | undefined {
  // Within the first PEEK_JSON_MAX characters: a value that runs past them is not scanned to its end (found in
  // review: a 93 MB member before the settings took 0.6 s of the start to give up on).
  const text = whole.length > PEEK_JSON_MAX ? whole.slice(0, PEEK_JSON_MAX) : whole;
  i = jsonSpace(text, i + 1);
  while (text.charCodeAt(i) === 0x22 /* " */) {
    const keyEnd = jsonStringEnd(text, i);
    if (keyEnd < 0) return undefined;
    const key = jsonKey(text, i, keyEnd);
    if (key === undefined || key === 'policies' || key === 'localsids' || key === 'sessions') return undefined;
    i = jsonSpace(text, keyEnd);
    if (text.charCodeAt(i) !== 0x3a /* : */) return undefined;
    i = jsonSpace(text, i + 1);
    const end = jsonValueScan(text, i);
    if (end < 0) return undefined;
    if (key === 'settings') {
      try {
        return readSettings(new Source('<settings read ahead>', undefined), ['settings'], JSON.parse(text.slice(i, end)));
      } catch {
        return undefined;
      }
    }
    i = jsonSpace(text, end);
    if (text.charCodeAt(i) !== 0x2c /* , */) return undefined;
    i = jsonSpace(text, i + 1);
  }
  return undefined;
}

const NOT_JSON = Symbol('not JSON');

/**
 * JSON is YAML (1.2), and a config of 131,072 generated rules is often
 * written as JSON: JSON.parse reads it ten times faster than js-yaml. YAML
 * refuses a key given twice in a mapping, JSON.parse keeps the last: a scan
 * for repeated keys keeps the two the same. Text that is not JSON (or that
 * JSON.parse refuses) goes to js-yaml, which words the error.
 */
function fastJson(src: Source, text: string): unknown {
  const start = text.search(/\S/);
  if (start < 0 || text[start] !== '{') return NOT_JSON;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return NOT_JSON;
  }
  const dup = repeatedJsonKey(text);
  if (dup !== undefined) {
    const line = text.slice(0, dup.offset).split('\n').length;
    src.syntaxError();
    throw new ConfigError(src.file, '', `YAML syntax error: key ${JSON.stringify(dup.key)} is given twice in one mapping; give each key once`, line);
  }
  src.freshStrings();
  return v;
}

const NOT_STREAMED = Symbol('not read streamed');

/**
 * A JSON config read without its whole tree: the top-level object member
 * by member, and the rule lists (policies, localsids, sessions) item by
 * item, each item JSON.parse'd from its own text and read into its rule at
 * once (`hook`, as the block YAML reader does), so that its objects are
 * young garbage instead of part of a tree of every rule that the collector
 * copies and promotes before any is read (at 262,144 + 262,144 sessions the
 * collector took 28 % of the read). Each item's place in the text is
 * recorded as the block reader's are (from the end of the item before), so
 * a reload of a JSON file keeps the rules whose text did not change.
 *
 * Items that are flat (FlatRuns) are JSON.parse'd a run of them at a
 * time: the read's largest cost at a million sessions and a million
 * policies was each item's scan and JSON.parse.
 *
 * The text is valid JSON if every piece given to JSON.parse is and the
 * skeleton around them (checked here) is. A key given twice in any object
 * is looked for as the pieces are delimited. NOT_STREAMED for anything else
 * (not an object, a syntax error, a repeated key, a `__proto__` member):
 * the caller then reads it whole with JSON.parse, which words the errors.
 */
function jsonRulesAsRead(
  src: Source,
  text: string | AsciiText,
  hook: ItemHook,
  bytes: Uint8Array | undefined,
  flatReader?: (key: string) => FlatRuleReader | undefined,
  adopt?: (key: string, at: number, top: Record<string, unknown>) => { list: unknown[]; end: number } | undefined,
): unknown {
  let i = jsonSpace(text, 0);
  if (text.charCodeAt(i) !== 0x7b /* { */) return NOT_STREAMED;
  src.freshStrings();
  const top: Record<string, unknown> = {};
  const ascii = asciiBytes(text, bytes);
  const got = jsonMembers(text, i, top, hook, ascii === undefined ? undefined : new FlatRuns(text, ascii), flatReader, adopt);
  if (got < 0 || jsonSpace(text, got) !== text.length) {
    src.freshStrings(false);
    return NOT_STREAMED;
  }
  return top;
}

const CONTROL = /[\u0000-\u001f]/;

/** JSON's whitespace from `i` on: the first index past it. */
function jsonSpace(text: Chars, i: number): number {
  for (; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
  }
  return i;
}

/** The top-level object at `i` (its `{`) read into `top`; the index past its `}`, or -1. */
function jsonMembers(
  text: Chars,
  i: number,
  top: Record<string, unknown>,
  hook: ItemHook,
  runs: FlatRuns | undefined,
  flatReader: ((key: string) => FlatRuleReader | undefined) | undefined,
  adopt: ((key: string, at: number, top: Record<string, unknown>) => { list: unknown[]; end: number } | undefined) | undefined,
): number {
  i = jsonSpace(text, i + 1);
  if (text.charCodeAt(i) === 0x7d /* } */) return i + 1;
  for (;;) {
    if (text.charCodeAt(i) !== 0x22 /* " */) return -1;
    const keyEnd = jsonStringEnd(text, i);
    if (keyEnd < 0) return -1;
    // A key with a control character is not JSON (a value's keys are checked by JSON.parse of the value).
    const key = jsonKey(text, i, keyEnd);
    if (key === undefined || CONTROL.test(key) || key === '__proto__' || Object.hasOwn(top, key)) return -1;
    i = jsonSpace(text, keyEnd);
    if (text.charCodeAt(i) !== 0x3a /* : */) return -1;
    i = jsonSpace(text, i + 1);
    const each = hook(key);
    if (runs !== undefined) runs.reader = each === undefined ? undefined : flatReader?.(key);
    const list = each !== undefined && text.charCodeAt(i) === 0x5b; /* [ */
    // A rule list read on another thread from its bytes (an ASCII text's, as the flat runs read), if it was.
    const taken = list && runs !== undefined ? adopt?.(key, i, top) : undefined;
    if (taken !== undefined) top[key] = taken.list;
    const end = taken !== undefined ? taken.end : list ? jsonItems(text, i, each!, (l) => (top[key] = l), runs) : jsonPiece(text, i, (v) => (top[key] = v));
    if (end < 0) return -1;
    i = jsonSpace(text, end);
    const c = text.charCodeAt(i);
    if (c === 0x7d /* } */) return i + 1;
    if (c !== 0x2c /* , */) return -1;
    i = jsonSpace(text, i + 1);
  }
}

/**
 * A rule list at `i` (its `[`), each item read alone and given to `each`;
 * the index past its `]`, or -1. Items come from flat runs (FlatRuns) where
 * they are flat, else each is JSON.parse'd from its own text (jsonPiece).
 */
function jsonItems(text: Chars, i: number, each: ItemRead, done: (list: unknown[]) => void, runs: FlatRuns | undefined): number {
  const list: unknown[] = [];
  i = jsonSpace(text, i + 1);
  if (text.charCodeAt(i) === 0x5d /* ] */) {
    done(list);
    return i + 1;
  }
  let before = i;
  for (;;) {
    let item: unknown;
    let end = runs === undefined ? -1 : runs.take(i);
    if (end >= 0) item = runs!.item;
    else end = jsonPiece(text, i, (v) => (item = v));
    if (end < 0) return -1;
    list.push(each(item, list.length, before, end));
    before = end;
    i = jsonSpace(text, end);
    const c = text.charCodeAt(i);
    if (c === 0x5d /* ] */) {
      done(list);
      return i + 1;
    }
    if (c !== 0x2c /* , */) return -1;
    i = jsonSpace(text, i + 1);
  }
}

/**
 * The text's bytes, one a character (so that an index is the same in
 * both), when the text is ASCII: the given UTF-8 bytes of the file when
 * they are, else made from the text (a config that is ASCII: any byte past
 * 0x7f makes its UTF-8 longer than its UTF-16 units). Undefined otherwise:
 * its items are read one by one.
 */
function asciiBytes(text: string | AsciiText, bytes: Uint8Array | undefined): Uint8Array | undefined {
  // Bytes the caller found ASCII, read without their string.
  if (text instanceof AsciiText) return text.bytes;
  if (bytes !== undefined && asciiText(text, bytes)) return bytes;
  if (Buffer.byteLength(text, 'utf8') !== text.length) return undefined;
  return Buffer.from(text, 'latin1');
}

/** Whether `bytes`, the UTF-8 of `text`, are ASCII: one byte a character, so an index is the same in both. */
export function asciiText(text: string, bytes: Uint8Array): boolean {
  return bytes.length === text.length && isAscii(bytes);
}

/** Items a run holds at most (one JSON.parse of their text, about 130 KB for sessions): the flat readers' slots, one an item. */
const FLAT_RUN = FLAT_SLOTS;

/**
 * Runs of flat items read ahead in a rule list: items that are objects of
 * plain keys (no escape) given once, whose values are strings without an
 * escape or bare tokens (numbers, true, false, null: no nested object or
 * list). Their ends are found over the bytes, their keys compared there
 * (a key given twice makes the item not flat: jsonPiece then refuses it).
 * The list's flat reader (src/config/flat-rules.ts) takes what it can
 * into rows from there; the rest of a run is JSON.parse'd at once, as a
 * list. Each item's own scan and JSON.parse took 2.1 µs; a run's, 0.9
 * (a million sessions and a million policies: 4.4 -> 1.9 s, before the
 * flat readers took most of them).
 *
 * The list's reader asks for the item at `i` (take): the run's next item
 * when it starts there, else a new run is read from `i`. A run that
 * JSON.parse refuses (a flat-looking item that is not JSON) is given up:
 * its items are read one by one, where each error is found as before.
 */
class FlatRuns extends FlatMemberColumns {
  /** The item `take` returned: a parsed object, or the TakenItem of one a rule reader took. */
  item: unknown;
  /** The list's reader of flat rules (src/config/flat-rules.ts), if it has one: set at each list. */
  reader: FlatRuleReader | undefined;
  readonly text: Chars;
  readonly #b: Uint8Array;
  readonly #starts = new Int32Array(FLAT_RUN);
  readonly #ends = new Int32Array(FLAT_RUN);
  /** Per item of the run: its slot in the reader, or -1 (parsed: the next of #items). */
  readonly #slots = new Int32Array(FLAT_RUN);
  #n = 0;
  #items: unknown[] = [];
  #nextItem = 0;
  #next = 0;
  readonly #taken = new TakenItem(this);
  /** No run is read before this index (a refused run's end). */
  #refusedTo = -1;
  // The members of the item #itemEnd read last: FlatMemberColumns'.

  constructor(text: Chars, bytes: Uint8Array) {
    super();
    this.text = text;
    this.#b = bytes;
  }

  /** The end of the flat item at `i` (its object, or its TakenItem, in `item`), or -1: read it alone. */
  take(i: number): number {
    if (this.#next < this.#n && this.#starts[this.#next] === i) {
      const k = this.#next++;
      const slot = this.#slots[k]!;
      if (slot < 0) this.item = this.#items[this.#nextItem++];
      else {
        this.#taken.set(slot, i, this.#ends[k]!);
        this.item = this.#taken;
      }
      return this.#ends[k]!;
    }
    this.#n = 0;
    this.#next = 0;
    this.#items = [];
    this.#nextItem = 0;
    if (i < this.#refusedTo || !this.#read(i)) return -1;
    return this.take(i);
  }

  /**
   * Read the run of flat items from `i`, separated as the list separates
   * them: those the reader takes into its slots, the others JSON.parse'd
   * together; false when there is none, or JSON refuses one of them.
   */
  #read(i: number): boolean {
    const b = this.#b;
    const reader = this.reader;
    let n = 0;
    let at = i;
    let parsed = '';
    let parsedCount = 0;
    while (n < FLAT_RUN) {
      const end = this.#itemEnd(at);
      if (end < 0) break;
      this.#starts[n] = at;
      this.#ends[n] = end;
      if (reader !== undefined && reader.read(b, this, n)) this.#slots[n] = n;
      else {
        this.#slots[n] = -1;
        parsed = parsedCount === 0 ? this.text.slice(at, end) : `${parsed},${this.text.slice(at, end)}`;
        parsedCount++;
      }
      n++;
      const k = this.#space(end);
      if (b[k] !== 0x2c /* , */) break;
      at = this.#space(k + 1);
    }
    if (n === 0) return false;
    let items: unknown = [];
    if (parsedCount > 0) {
      try {
        items = JSON.parse(`[${parsed}]`);
      } catch {
        items = undefined;
      }
    }
    if (!Array.isArray(items) || items.length !== parsedCount) {
      this.#refusedTo = this.#ends[n - 1]!;
      return false;
    }
    this.#items = items;
    this.#n = n;
    return true;
  }

  #space(i: number): number {
    return byteSpace(this.#b, i);
  }

  /** The index past the flat item at `i` (its `{`), or -1 when there is none there. */
  #itemEnd(i: number): number {
    return flatObjectEnd(this.#b, i, this);
  }
}

/**
 * A flat item a rule reader took (FlatRuns.take's item, one object reused
 * for each): the list's reader adds its row when it reaches it, or, when
 * the item is to be read as an object after all (the list was refused
 * before it), parses its text, which the rule reader took as valid JSON.
 */
class TakenItem extends TakenRule {
  #slot = 0;
  #at = 0;
  #end = 0;

  constructor(readonly runs: FlatRuns) {
    super();
  }

  set(slot: number, at: number, end: number): void {
    this.#slot = slot;
    this.#at = at;
    this.#end = end;
  }

  /** The list index the reader's next row gets. */
  get next(): number {
    return this.runs.reader!.next;
  }

  add(): unknown {
    return this.runs.reader!.add(this.#slot);
  }

  raw(): unknown {
    return JSON.parse(this.runs.text.slice(this.#at, this.#end));
  }
}

/** The JSON value at `i`, JSON.parse'd alone and given to `take`; the index past it, or -1 (invalid, or a key repeated in one of its objects). */
function jsonPiece(text: Chars, i: number, take: (v: unknown) => void): number {
  const end = jsonValueScan(text, i);
  if (end < 0) return -1;
  try {
    take(JSON.parse(text.slice(i, end)));
  } catch {
    return -1;
  }
  return end;
}

/** The index past the string whose `"` is at `i`, or -1. */
function jsonStringEnd(text: Chars, i: number): number {
  for (let j = i + 1; j < text.length; j++) {
    const d = text.charCodeAt(j);
    if (d === 0x5c /* \ */) j++;
    else if (d === 0x22) return j + 1;
  }
  return -1;
}

/** The key text[i, end) (a JSON string) as a string; undefined if it does not parse. */
function jsonKey(text: Chars, i: number, end: number): string | undefined {
  const raw = text.slice(i + 1, end - 1);
  if (!raw.includes('\\')) return raw;
  try {
    return JSON.parse(text.slice(i, end)) as string;
  } catch {
    return undefined;
  }
}

/**
 * Where the JSON value at `i` ends (the index past it), matching brackets
 * outside strings; -1 when it does not end, or when one of its objects
 * gives a key twice (YAML refuses that, JSON.parse would keep the last):
 * that key and where, in `repeated` if given. Not a validator: JSON.parse
 * of the piece is.
 */
function jsonValueScan(text: Chars, i: number, repeated?: { key?: string; offset?: number }): number {
  const first = text.charCodeAt(i);
  if (first === 0x22) return jsonStringEnd(text, i);
  if (first !== 0x7b && first !== 0x5b) {
    // A number, true, false or null: up to the next delimiter.
    let j = i;
    for (; j < text.length; j++) {
      const c = text.charCodeAt(j);
      if (c === 0x2c || c === 0x5d || c === 0x7d || c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) break;
    }
    return j > i ? j : -1;
  }
  // Objects hold the keys seen so far, arrays null.
  const stack: (Set<string> | null)[] = [];
  let keyNext = false;
  for (let j = i; j < text.length; j++) {
    const c = text.charCodeAt(j);
    if (c === 0x22) {
      const end = jsonStringEnd(text, j);
      if (end < 0) return -1;
      const top = stack[stack.length - 1];
      if (keyNext && top) {
        const key = jsonKey(text, j, end);
        if (key === undefined) return -1;
        if (top.has(key)) {
          if (repeated !== undefined) Object.assign(repeated, { key, offset: j });
          return -1;
        }
        top.add(key);
        keyNext = false;
      }
      j = end - 1;
    } else if (c === 0x7b) {
      stack.push(new Set());
      keyNext = true;
    } else if (c === 0x5b) {
      stack.push(null);
      keyNext = false;
    } else if (c === 0x7d || c === 0x5d) {
      stack.pop();
      if (stack.length === 0) return j + 1;
    } else if (c === 0x2c) {
      keyNext = stack[stack.length - 1] !== null;
    }
  }
  return -1;
}

/** The first key repeated within one object of valid JSON text, and where. */
export function repeatedJsonKey(text: string): { key: string; offset: number } | undefined {
  const repeated: { key?: string; offset?: number } = {};
  jsonValueScan(text, jsonSpace(text, 0), repeated);
  return repeated.key === undefined ? undefined : { key: repeated.key, offset: repeated.offset! };
}

// ---------------------------------------------------------------------------
// Sections

function readSettings(src: Source, path: Path, v: unknown): Settings {
  if (v === null || v === undefined) return DEFAULT_SETTINGS;
  const m = readMapping(src, path, v, SETTINGS_KEYS, 'in settings');
  const d = DEFAULT_SETTINGS;
  const ports = optional(m, 'udp_source_ports', (x) => readPortRange(src, child(path, 'udp_source_ports'), x));
  return {
    forwarding: optional(m, 'forwarding', (x) => readEnum(src, child(path, 'forwarding'), x, FORWARDING_MODES)) ?? d.forwarding,
    sourcePortMin: ports?.[0] ?? d.sourcePortMin,
    sourcePortMax: ports?.[1] ?? d.sourcePortMax,
    maxPolicies: optional(m, 'max_policies', (x) => readInt(src, child(path, 'max_policies'), x, 1, MAX_TABLE_ENTRIES)) ?? d.maxPolicies,
    maxLocalSids:
      optional(m, 'max_localsids', (x) => readInt(src, child(path, 'max_localsids'), x, 1, MAX_TABLE_ENTRIES)) ?? d.maxLocalSids,
    hashSeed: optional(m, 'hash_seed', (x) => readInt(src, child(path, 'hash_seed'), x, 0, 0xffff_ffff)) ?? d.hashSeed,
    ...optionalField('maxSessions', optional(m, 'max_sessions', (x) => readInt(src, child(path, 'max_sessions'), x, 1, MAX_TABLE_ENTRIES))),
  };
}

function readInterfaces(src: Source, path: Path, v: unknown): readonly InterfaceConfig[] {
  const list = readList(src, path, v, 'a list of interfaces, each {name: IFNAME, xdp: native|generic}');
  const seen = new Map<string, number>();
  return list.map((x, i) => {
    const p = child(path, i);
    const m = readMapping(src, p, x, INTERFACE_KEYS, 'in an interface');
    const name = required(src, m, p, 'name', 'the interface name, e.g. eth1', (y) => readString(src, child(p, 'name'), y, 'an interface name such as eth1'));
    if (!/^[^\s/:]{1,15}$/.test(name)) {
      src.fail(child(p, 'name'), `${JSON.stringify(name)} is not a Linux interface name (1 to 15 characters, no spaces, '/' or ':')`);
    }
    const prev = seen.get(name);
    if (prev !== undefined) src.fail(child(p, 'name'), `${name} is already listed as interfaces[${prev}]; list each interface once`);
    seen.set(name, i);
    const xdp = optional(m, 'xdp', (y) => readEnum(src, child(p, 'xdp'), y, XDP_MODES)) ?? 'native';
    return { where: formatPath(p), name, xdp };
  });
}

function readDaemon(src: Source, path: Path, v: unknown): DaemonSettings {
  if (v === null || v === undefined) return {};
  const m = readMapping(src, path, v, DAEMON_KEYS, 'in daemon');
  const at = (key: string): Path => child(path, key);
  const absPath = (key: string) => (x: unknown): string => {
    const s = readString(src, at(key), x, 'an absolute path');
    if (!s.startsWith('/')) src.fail(at(key), `${JSON.stringify(s)} is not an absolute path; give one starting with /`);
    return s;
  };
  const socket = optional(m, 'socket', absPath('socket'));
  const socketGroup = optional(m, 'socket_group', (x) => readName(src, at('socket_group'), x));
  const stateFile = optional(m, 'state_file', absPath('state_file'));
  const http = optional(m, 'http', (x) => {
    const hp = at('http');
    const h = readMapping(src, hp, x, HTTP_KEYS, 'in daemon.http');
    const listen = required(src, h, hp, 'listen', 'HOST:PORT to serve the API and /metrics on, e.g. 127.0.0.1:9180', (y) =>
      readListen(src, child(hp, 'listen'), y),
    );
    const tokenFile = optional(h, 'token_file', (y) => {
      const s = readString(src, child(hp, 'token_file'), y, 'an absolute path');
      if (!s.startsWith('/')) src.fail(child(hp, 'token_file'), `${JSON.stringify(s)} is not an absolute path; give one starting with /`);
      return s;
    });
    const readTokenFile = optional(h, 'read_token_file', (y) => {
      const s = readString(src, child(hp, 'read_token_file'), y, 'an absolute path');
      if (!s.startsWith('/')) src.fail(child(hp, 'read_token_file'), `${JSON.stringify(s)} is not an absolute path; give one starting with /`);
      if (s === tokenFile) src.fail(child(hp, 'read_token_file'), 'is the same file as token_file: the read-only token must differ from the write token; give another file');
      return s;
    });
    const openReads = optional(h, 'open_reads', (y) => {
      if (typeof y !== 'boolean') src.fail(child(hp, 'open_reads'), `expected true or false, got ${describe(y)}`);
      return y;
    });
    // Checked here rather than when the listener opens, so that `mup reload`
    // rejects it like any other bad config and `mup daemon` refuses it before
    // it touches the data plane. Writes over TCP always need the token, on
    // loopback too: every local user can connect there (docs/api.md).
    const loopback = isLoopbackHost(listen.host);
    if (tokenFile === undefined && readTokenFile === undefined && !loopback) {
      src.fail(
        child(hp, 'token_file'),
        `required when listen (${formatListen(listen)}) is not a loopback address: the API changes the tables, so it is not served ` +
          'unauthenticated beyond this host; give a file with the bearer token (e.g. openssl rand -hex 16 > /etc/mup/token) or listen on 127.0.0.1',
      );
    }
    if (openReads === true && !loopback) {
      src.fail(
        child(hp, 'open_reads'),
        `serves reads without a token, so it is only allowed on a loopback address, not on ${formatListen(listen)}; remove it (clients send the token) or listen on 127.0.0.1`,
      );
    }
    if (tokenFile === undefined && readTokenFile === undefined && openReads !== true) {
      src.fail(
        child(hp, 'token_file'),
        `required: changes over TCP need a bearer token, on loopback (${formatListen(listen)}) too, since every local user can connect there; ` +
          'give a file with the token (install -m 600 /dev/null /etc/mup/token && openssl rand -hex 16 > /etc/mup/token), ' +
          'or set daemon.http.open_reads: true for a read-only listener (changes answered 403; use the unix socket for them)',
      );
    }
    return {
      ...listen,
      ...(tokenFile === undefined ? {} : { tokenFile }),
      ...(readTokenFile === undefined ? {} : { readTokenFile }),
      ...(openReads === true ? { openReads } : {}),
    };
  });
  const maxConnections = optional(m, 'max_connections', (x) => readInt(src, at('max_connections'), x, 1, 65536, 'open connections per listener'));
  const stallTimeout = optional(m, 'stall_timeout', (x) => {
    if (typeof x !== 'number' || !Number.isFinite(x) || x < 0.1 || x > 3600) {
      src.fail(at('stall_timeout'), `expected seconds from 0.1 to 3600, got ${describe(x)}`);
    }
    return x;
  });
  const reloadMaxDeleteShare = optional(m, 'reload_max_delete_share', (x) => {
    if (typeof x !== 'number' || !Number.isFinite(x) || x < 0 || x > 1) {
      src.fail(at('reload_max_delete_share'), `expected a share from 0 to 1 (0.5: a reload may delete up to half the rules without --force), got ${describe(x)}`);
    }
    return x;
  });
  const metrics = optional(m, 'metrics', (x) => readMetrics(src, at('metrics'), x));
  return {
    ...(socket === undefined ? {} : { socket }),
    ...(socketGroup === undefined ? {} : { socketGroup }),
    ...(stateFile === undefined ? {} : { stateFile }),
    ...(http === undefined ? {} : { http }),
    ...(reloadMaxDeleteShare === undefined ? {} : { reloadMaxDeleteShare }),
    ...(maxConnections === undefined ? {} : { maxConnections }),
    ...(stallTimeout === undefined ? {} : { stallTimeout }),
    ...(metrics === undefined ? {} : { metrics }),
  };
}

/** daemon.metrics: per_rule off | all | top:N (docs/metrics.md). */
function readMetrics(src: Source, path: Path, v: unknown): NonNullable<DaemonSettings['metrics']> {
  const m = readMapping(src, path, v, METRICS_KEYS, 'in daemon.metrics');
  const perRule = optional(m, 'per_rule', (x) => {
    const r = parsePerRule(x);
    if (r === undefined) src.fail(child(path, 'per_rule'), `expected off, all or top:N (N from 1 to ${MAX_PER_RULE_TOP}), got ${describe(x)}`);
    return r;
  });
  return perRule === undefined ? {} : { perRule };
}


function readListen(src: Source, path: Path, v: unknown): { host: string; port: number } {
  const expected = 'HOST:PORT, e.g. 127.0.0.1:9180 or [::1]:9180';
  const s = readString(src, path, v, expected);
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\[\]]+)):([0-9]{1,5})$/.exec(s);
  const port = Number(m?.[3]);
  if (m === null || port < 1 || port > 65535) src.fail(path, `${JSON.stringify(s)} is not a listen address; expected ${expected}`);
  return { host: m[1] ?? m[2] ?? '', port };
}

/** 127.0.0.0/8, ::1 and localhost: where daemon.http may serve reads without a token (open_reads). */
export function isLoopbackHost(host: string): boolean {
  if (host === 'localhost' || host === '::1') return true;
  return /^127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$/.test(host);
}

function formatListen(l: { host: string; port: number }): string {
  return l.host.includes(':') ? `[${l.host}]:${l.port}` : `${l.host}:${l.port}`;
}

/**
 * The rule readers below read each key in turn (the order decides which
 * error a rule with several gets) without a closure per key: a closure, a
 * key path per key were most of what a 131,072-rule parse allocated. The
 * rule itself is still made with spreads: V8 gives such an object room for
 * the key kept on it later (src/config/keys.ts), where a plain literal's
 * key costs 16 bytes more a rule.
 */
const MATCH_WHAT = 'the IPv4 destination prefix of the GTP-U packets, e.g. 192.0.2.0/24';
const SR_PREFIX_WHAT = `the IPv6 prefix of the last SID, length <= ${MAX_SID_PREFIX_LEN}, e.g. 2001:db8:1::/48`;
const SRC_PREFIX_WHAT = `the IPv6 source prefix, length <= ${MAX_SRC_PREFIX_LEN}, e.g. 2001:db8:ffff::/64`;

function readPolicy(src: Source, path: Path, v: unknown): Policy {
  const m = readMapping(src, path, v, POLICY_KEYS, 'in a policy');
  let x = present(m, 'name');
  const name = x === undefined ? undefined : readRuleName(src, child(path, 'name'), x);
  x = present(m, 'behavior');
  if (x !== undefined) readEnum(src, child(path, 'behavior'), x, POLICY_BEHAVIORS);
  const match = readIpv4Prefix(src, child(path, 'match'), need(src, m, path, 'match', MATCH_WHAT));
  x = present(m, 'teid');
  let teid: TeidPrefix | undefined;
  if (x !== undefined) {
    const at = child(path, 'teid');
    const s = readText(src, at, x, 'a TEID prefix VALUE/BITS such as 0x12340000/16');
    teid = src.guard(at, () => parseTeidPrefix(s, IN_GUARD));
    if (teid !== undefined && match.len !== 32) {
      src.fail(at, `teid needs a single-address match (/32), but match is /${match.len}: the key is the N3 address and the TEID prefix; give the GTP-U endpoint address as a /32`);
    }
  }
  // Either sr_prefix (RFC 9433 embedding) or sid (a last SID used as is).
  const hasSr = present(m, 'sr_prefix') !== undefined;
  const sidV = present(m, 'sid');
  if (hasSr && sidV !== undefined) {
    src.fail(child(path, 'sid'), 'give sr_prefix (the last SID embeds the IPv4 DA and Args.Mob.Session, RFC 9433) or sid (a last SID used as is, e.g. a PE\'s End.DT4), not both');
  }
  if (!hasSr && sidV === undefined) {
    src.fail(child(path, 'sr_prefix'), `required key missing; give the IPv6 prefix of the last SID, length <= ${MAX_SID_PREFIX_LEN}, e.g. 2001:db8:1::/48 (or instead sid: a last SID used as is, e.g. 2001:db8:e::d4)`);
  }
  let srPrefix: Ipv6Prefix;
  let sid: Ipv6Addr | undefined;
  if (sidV !== undefined) {
    const at = child(path, 'sid');
    const text = readText(src, at, sidV, 'an IPv6 address such as 2001:db8:e::d4');
    if (text.includes('/')) {
      src.fail(at, `${text}: a policy's sid is an address (the last SID, used as is), not a prefix; drop the /length (a local SID's sid is a prefix)`);
    }
    sid = readIpv6Address(src, at, text);
    srPrefix = ipv6Prefix(sid, 128);
  } else {
    srPrefix = readIpv6Prefix(src, child(path, 'sr_prefix'), need(src, m, path, 'sr_prefix', SR_PREFIX_WHAT), MAX_SID_PREFIX_LEN, SID_LEN_WHY, true);
  }
  const srcPrefix = readIpv6Prefix(src, child(path, 'src_prefix'), need(src, m, path, 'src_prefix', SRC_PREFIX_WHAT), MAX_SRC_PREFIX_LEN, SRC_LEN_WHY, true);
  const { segments, srh, hopLimit, mtu } = readPath6(src, path, m, 'the translated packet is IPv6');
  const where = ruleWhere(path);
  return {
    where,
    ...(name === undefined ? {} : { name }),
    match,
    ...(teid === undefined ? {} : { teid }),
    srPrefix,
    ...(sid === undefined ? {} : { sid }),
    srcPrefix,
    segments,
    srh,
    hopLimit,
    ...(mtu === undefined ? {} : { mtu }),
  };
}

/** The keys a policy, a session and the BGP rule defaults share, after their source prefix, in this order: segments, srh, hop_limit, mtu. */
function readPath6(src: Source, path: Path, m: Readonly<Record<string, unknown>>, mtuWhy: string): { segments: Policy['segments']; srh: SrhMode; hopLimit: number; mtu: number | undefined } {
  let x = present(m, 'segments');
  const segments = x === undefined ? NO_SEGMENTS : readSegments(src, child(path, 'segments'), x);
  x = present(m, 'srh');
  const srh = x === undefined ? 'auto' : readEnum(src, child(path, 'srh'), x, SRH_MODES);
  x = present(m, 'hop_limit');
  const hopLimit = x === undefined ? DEFAULT_HOP_LIMIT : readInt(src, child(path, 'hop_limit'), x, 1, 255);
  x = present(m, 'mtu');
  const mtu = x === undefined ? undefined : readInt(src, child(path, 'mtu'), x, 1280, 65535, mtuWhy);
  return { segments, srh, hopLimit, mtu };
}

function optionalField<K extends string, T>(key: K, v: T | undefined): { [k in K]?: T } {
  return (v === undefined ? {} : { [key]: v }) as { [k in K]?: T };
}

const UE_WHAT = 'the UE prefix, IPv4 or IPv6, e.g. 10.60.0.1/32';
const TEID_WHAT = 'the TEID of the gNB, an integer from 0 to 4294967295 (decimal or 0x hex), e.g. 0x12345678';
const QFI_WHAT = 'the QoS Flow Identifier, an integer from 0 to 63';
const ENDPOINT_WHAT = "the gNB's N3 IPv4 address, e.g. 192.0.2.1";
const SOURCE_WHAT = "the UPF's N3 IPv4 address (the GTP-U source), e.g. 198.51.100.1";
const ISD_WHAT = `the gateway's End.M.GTP4.E SID prefix, length <= ${MAX_SID_PREFIX_LEN}, e.g. 2001:db8:2::/48`;

function readSession(src: Source, path: Path, v: unknown): Session {
  const m = readMapping(src, path, v, SESSION_KEYS, 'in a session');
  let x = present(m, 'name');
  const name = x === undefined ? undefined : readRuleName(src, child(path, 'name'), x);
  const ue = readUePrefix(src, child(path, 'ue'), need(src, m, path, 'ue', UE_WHAT));
  const teid = readTeid(src, child(path, 'teid'), need(src, m, path, 'teid', TEID_WHAT));
  const qfi = readInt(src, child(path, 'qfi'), need(src, m, path, 'qfi', QFI_WHAT), 0, 63, 'QFI is a 6-bit field of Args.Mob.Session');
  x = present(m, 'rqi');
  const rqi = x === undefined ? false : readBool(src, child(path, 'rqi'), x);
  const endpoint = readIpv4Address(src, child(path, 'endpoint'), need(src, m, path, 'endpoint', ENDPOINT_WHAT));
  const source = readIpv4Address(src, child(path, 'source'), need(src, m, path, 'source', SOURCE_WHAT));
  const isd = readIpv6Prefix(src, child(path, 'isd'), need(src, m, path, 'isd', ISD_WHAT), MAX_SID_PREFIX_LEN, SID_LEN_WHY, true);
  const srcPrefix = readIpv6Prefix(src, child(path, 'src_prefix'), need(src, m, path, 'src_prefix', SRC_PREFIX_WHAT), MAX_SRC_PREFIX_LEN, SRC_LEN_WHY, true);
  const { segments, srh, hopLimit, mtu } = readPath6(src, path, m, 'the encapsulated packet is IPv6');
  // An IPv4 UE's packet too big gets ICMP Fragmentation Needed (IPv4 has no such floor).
  if (ue.family === 6 && mtu !== undefined) checkMtuFloor(src, child(path, 'mtu'), mtu, sessionGrowth(segments.length, srh), 'the encapsulation of an IPv6 UE\'s packet');
  const where = ruleWhere(path);
  return {
    where,
    ...(name === undefined ? {} : { name }),
    ue,
    teid,
    qfi,
    rqi,
    endpoint,
    source,
    isd,
    srcPrefix,
    segments,
    srh,
    hopLimit,
    ...(mtu === undefined ? {} : { mtu }),
  };
}

function readUePrefix(src: Source, path: Path, v: unknown): Session['ue'] {
  const s = readText(src, path, v, 'an IPv4 or IPv6 prefix such as 10.60.0.1/32 or 2001:db8:60::/64');
  if (s.includes(':')) return { family: 6, prefix: src.guard(path, (warn) => parseIpv6Prefix(s, IN_GUARD, warn)) };
  return { family: 4, prefix: src.guard(path, (warn) => parseIpv4Prefix(s, IN_GUARD, warn)) };
}

function readTeid(src: Source, path: Path, v: unknown): number {
  const expected = 'an integer from 0 to 4294967295 (0xffffffff), decimal or 0x hex';
  let n: number | undefined;
  if (typeof v === 'number') n = v;
  else if (typeof v === 'string' && /^(0[xX][0-9a-fA-F]+|[0-9]+)$/.test(v)) n = Number(v);
  if (n === undefined || !Number.isSafeInteger(n) || n < 0 || n > 0xffff_ffff) {
    src.fail(path, `expected ${expected} (a TEID is 32 bits), got ${describe(v)}`);
  }
  return n;
}

function readBool(src: Source, path: Path, v: unknown): boolean {
  if (typeof v !== 'boolean') src.fail(path, `expected true or false, got ${describe(v)}`);
  return v;
}

function readIpv4Address(src: Source, path: Path, v: unknown): Ipv4Addr {
  const s = readText(src, path, v, 'an IPv4 address such as 192.0.2.1');
  return src.guard(path, () => parseIpv4(s, IN_GUARD));
}

const LOCALSID_WHAT = `the IPv6 prefix of the local SID, length <= ${MAX_SID_PREFIX_LEN}, e.g. 2001:db8:2::/48`;
const SRC_PREFIX_LEN_WHAT = `P, the length of the sender's IPv6 source prefix (the IPv4 source follows it), an integer from 0 to ${MAX_SRC_PREFIX_LEN}, e.g. 64`;

function readLocalSid(src: Source, path: Path, v: unknown): LocalSid {
  const m = readMapping(src, path, v, LOCALSID_KEYS, 'in a local SID');
  let x = present(m, 'name');
  const name = x === undefined ? undefined : readRuleName(src, child(path, 'name'), x);
  x = present(m, 'behavior');
  const given = x === undefined ? undefined : readEnum(src, child(path, 'behavior'), x, LOCALSID_BEHAVIORS);
  const behavior = given ?? 'end.m.gtp4.e';
  const allowed = LOCALSID_KEYS_OF[behavior];
  for (const key of Object.keys(m)) {
    if (key !== 'name' && key !== 'behavior' && !allowed.includes(key)) {
      src.fail(child(path, key), `not a key of behavior ${behavior}; it takes ${allowed.join(', ')}`);
    }
  }
  if (behavior !== 'end.m.gtp4.e') return readLocalSid6(src, path, m, behavior, name);
  const sidAt = child(path, 'sid');
  const sid = readIpv6Prefix(src, sidAt, need(src, m, path, 'sid', LOCALSID_WHAT), MAX_SID_PREFIX_LEN, SID_LEN_WHY);
  if (sid.len === 0) {
    src.warn(sidAt, '::/0 matches every IPv6 destination: all IPv6 traffic on the interface is treated as addressed to this SID');
  }
  const srcPrefixLen = readInt(
    src,
    child(path, 'src_prefix_len'),
    need(src, m, path, 'src_prefix_len', SRC_PREFIX_LEN_WHAT),
    0,
    MAX_SRC_PREFIX_LEN,
    'P plus the 32-bit IPv4 source must fit in 128 bits',
  );
  x = present(m, 'container');
  const container = x === undefined ? 'always' : readEnum(src, child(path, 'container'), x, CONTAINER_MODES);
  x = present(m, 'ttl');
  const ttl = x === undefined ? DEFAULT_TTL : readInt(src, child(path, 'ttl'), x, 1, 255);
  x = present(m, 'mtu');
  const mtu = x === undefined ? undefined : readInt(src, child(path, 'mtu'), x, 68, 65535, 'the translated packet is IPv4');
  // The translated packet is IPv4, but its Packet Too Big goes to the SRv6 packet's IPv6 source.
  if (mtu !== undefined) checkMtuFloor(src, child(path, 'mtu'), mtu, localSidGrowth(behavior, container, 0, 'auto'), 'End.M.GTP4.E');
  x = present(m, 'advertise');
  const advertise = x === undefined ? undefined : readAdvertise(src, child(path, 'advertise'), x, 4, sid.len);
  const where = ruleWhere(path);
  return {
    ...(mtu === undefined ? {} : { mtu }),
    where,
    ...(name === undefined ? {} : { name }),
    ...(given === undefined ? {} : { behavior: given }),
    sid,
    srcPrefixLen,
    container,
    ttl,
    ...(advertise === undefined ? {} : { advertise }),
  };
}

/** End.M.GTP6.E, End.M.GTP6.D and End.M.GTP6.D.Di (RFC 9433 §6.3-6.5). */
function readLocalSid6(
  src: Source,
  path: Path,
  m: Readonly<Record<string, unknown>>,
  behavior: Exclude<LocalSidBehavior, 'end.m.gtp4.e'>,
  name: string | undefined,
): LocalSid {
  const at = (key: string): Path => child(path, key);
  const isE = behavior === 'end.m.gtp6.e';
  const sid = isE
    ? required(src, m, path, 'sid', `the IPv6 prefix of the local SID, length <= ${MAX_GTP6_SID_PREFIX_LEN}, e.g. 2001:db8:6::/64`, (x) =>
        readIpv6Prefix(src, at('sid'), x, MAX_GTP6_SID_PREFIX_LEN, SID6_LEN_WHY),
      )
    : required(src, m, path, 'sid', 'the IPv6 prefix the GTP-U/IPv6 packets are addressed to, e.g. 2001:db8:6::/64', (x) =>
        readIpv6Prefix(src, at('sid'), x, 128, ''),
      );
  if (sid.len === 0) {
    src.warn(at('sid'), '::/0 matches every IPv6 destination: all IPv6 traffic on the interface is treated as addressed to this SID');
  }
  const source = required(src, m, path, 'source', 'the outer IPv6 source address of the packets this SID sends (A), e.g. 2001:db8:ff::1', (x) =>
    readIpv6Address(src, at('source'), x),
  );
  const hopLimit = optional(m, 'hop_limit', (x) => readInt(src, at('hop_limit'), x, 1, 255)) ?? DEFAULT_HOP_LIMIT;
  const mtu = optional(m, 'mtu', (x) => readInt(src, at('mtu'), x, 1280, 65535, 'the translated packet is IPv6'));
  const base = {
    ...(mtu === undefined ? {} : { mtu }),
    where: ruleWhere(path),
    ...(name === undefined ? {} : { name }),
    behavior,
    sid,
    srcPrefixLen: 0,
    ttl: hopLimit,
    source,
  };
  if (isE) {
    const container = optional(m, 'container', (x) => readEnum(src, at('container'), x, CONTAINER_MODES)) ?? 'always';
    if (mtu !== undefined) checkMtuFloor(src, at('mtu'), mtu, localSidGrowth(behavior, container, 0, 'auto'), 'End.M.GTP6.E');
    const advertise = optional(m, 'advertise', (x) => readAdvertise(src, at('advertise'), x, 6, sid.len));
    return { ...base, container, ...(advertise === undefined ? {} : { advertise }) };
  }
  const srPrefix = required(src, m, path, 'sr_prefix', `the IPv6 prefix of the last SID, length <= ${MAX_GTP6_SID_PREFIX_LEN}, e.g. 2001:db8:1::/64`, (x) =>
    readIpv6Prefix(src, at('sr_prefix'), x, MAX_GTP6_SID_PREFIX_LEN, SID6_LEN_WHY),
  );
  const segments = optional(m, 'segments', (x) => readSegments(src, at('segments'), x)) ?? [];
  const srh = optional(m, 'srh', (x) => readEnum(src, at('srh'), x, SRH_MODES)) ?? 'auto';
  if (mtu !== undefined) checkMtuFloor(src, at('mtu'), mtu, localSidGrowth(behavior, 'always', segments.length, srh), behavior === 'end.m.gtp6.d' ? 'End.M.GTP6.D' : 'End.M.GTP6.D.Di');
  return { ...base, container: 'always', srPrefix, segments, srh };
}

// ---------------------------------------------------------------------------
// Cross checks

function checkCount(src: Source, path: Path, n: number, max: number, what: string, setting: string): void {
  if (n > max) {
    src.fail(
      path,
      `${n} ${what} but settings.${setting} is ${max}; raise settings.${setting} (at most ${MAX_TABLE_ENTRIES}) or remove ${what}`,
    );
  }
}

interface Rule {
  readonly where: Where;
  readonly name?: string;
}

function label(r: Rule, section: RuleSection): string {
  const w = whereText(section, r);
  return r.name === undefined ? w : `${w} (${JSON.stringify(r.name)})`;
}

function pathOf(r: Rule, section: RuleSection, key: string): Path {
  if (typeof r.where === 'number') return [section, r.where, key];
  const m = /^(\w+)\[(\d+)\]$/.exec(r.where);
  return m?.[1] !== undefined && m[2] !== undefined ? [m[1], Number(m[2]), key] : [key];
}

/**
 * The file's rules by key and their names' keys, as the uniqueness checks
 * built them: the daemon's rule set takes these maps (src/daemon/rules.ts)
 * instead of building the same again (3 x 65,536 entries a kind). Held
 * weakly by the rule list, and given out once.
 */
export interface RuleIndex<R> {
  readonly byKey: Map<string, R>;
  readonly names: Map<string, string>;
}

const ruleIndexes = new WeakMap<readonly Rule[], RuleIndex<Rule>>();

/** Give a list of rules the maps checkRules would have built (parseConfigOffLoop builds them from its thread's keys). */
export function keepRuleIndex<R extends Rule>(rules: readonly R[], index: RuleIndex<R>): void {
  ruleIndexes.set(rules, index as unknown as RuleIndex<Rule>);
}

/** The maps checkRules built for this list of rules, left for the taker (a reload's rebase reads them first). */
export function peekRuleIndex<R extends Rule>(rules: readonly R[]): RuleIndex<R> | undefined {
  return ruleIndexes.get(rules) as RuleIndex<R> | undefined;
}

/** The maps checkRules built for this list of rules (once: the taker owns them), if it did. */
export function takeRuleIndex<R extends Rule>(rules: readonly R[]): RuleIndex<R> | undefined {
  const index = ruleIndexes.get(rules);
  ruleIndexes.delete(rules);
  return index as RuleIndex<R> | undefined;
}

/** Names unique (the first repeated one is the error), then keys unique. */
function checkRules<R extends Rule>(src: Source, section: RuleSection, rules: readonly R[], keyName: string, key: (r: R) => string, nameWhy: string, keyWhy: string): void {
  // One pass for both maps; a repeated name is the error before any repeated key, as two passes would have it.
  // A repeat is seen by the size not growing: one hash and one lookup a rule and map, not two (has, then set).
  // The maps are garbage once a repeat is found, so the repeat's overwrite does not matter.
  const names: Map<string, string> = new ShardedMap<string>();
  // An empty list too: the keys the API adds become the index's added rows, found by their bytes, with no key
  // text or Map entry kept (src/config/row-map.ts).
  if (section !== 'localsids') {
    checkByKeyBytes(src, section, rules, names, keyName, key, nameWhy, keyWhy);
    return;
  }
  const byKey = new Map<string, R>();
  let keyTwice: { r: R; k: string } | undefined;
  for (const r of rules) {
    const k = key(r);
    if (r.name !== undefined) {
      const n = names.size;
      names.set(r.name, k);
      if (names.size === n) {
        const first = rules.find((x) => x.name === r.name) ?? r;
        src.fail(pathOf(r, section, 'name'), `${JSON.stringify(r.name)} is already used by ${label(first, section)}; ${nameWhy}`);
      }
    }
    const n = byKey.size;
    byKey.set(k, r);
    if (byKey.size === n) keyTwice ??= { r, k };
  }
  if (keyTwice !== undefined) {
    const { r, k } = keyTwice;
    const prev = rules.find((x) => key(x) === k) ?? r;
    src.fail(pathOf(r, section, keyName), `${k} is already used by ${label(prev, section)}; ${keyWhy}`);
  }
  ruleIndexes.set(rules, { byKey, names } as RuleIndex<Rule>);
}

/**
 * checkRules for sessions and policies: names first, then keys, as the one
 * pass words a file with both repeated; the keys indexed by their bytes
 * (ruleKeyMap), no key text made for a row.
 */
function checkByKeyBytes<R extends Rule>(src: Source, section: 'policies' | 'sessions', rules: readonly R[], names: Map<string, string>, keyName: string, key: (r: R) => string, nameWhy: string, keyWhy: string): void {
  // Indexed, not for-of: the array iterator's result objects were not optimised away here (42 MB at a million).
  for (let i = 0; i < rules.length; i++) {
    const r = rules[i]!;
    if (r.name === undefined) continue;
    const n = names.size;
    const k = key(r);
    names.set(r.name, k);
    if (names.size === n) {
      const first = rules.find((x) => x.name === r.name) ?? r;
      src.fail(pathOf(r, section, 'name'), `${JSON.stringify(r.name)} is already used by ${label(first, section)}; ${nameWhy}`);
    }
  }
  let byKey: Map<string, R>;
  try {
    byKey = ruleKeyMap(section, rules);
  } catch (e) {
    if (!(e instanceof RepeatedRowKey)) throw e;
    const r = rules[e.row]!;
    src.fail(pathOf(r, section, keyName), `${key(r)} is already used by ${label(rules[e.first]!, section)}; ${keyWhy}`);
  }
  ruleIndexes.set(rules, { byKey, names } as RuleIndex<Rule>);
}

/**
 * The index by key text of a list of sessions or policies (rows or
 * objects): a RowKeyedMap over the rules' key bytes, no key text or Map
 * entry per rule (src/config/row-map.ts). RepeatedRowKey for a key given
 * twice. `fill`: the caller adds the rules in pieces (RowKeyedMap.fill).
 */
export function ruleKeyMap<R>(section: 'policies' | 'sessions', rules: readonly R[], fill = true): RowKeyedMap<R> {
  const sessions = section === 'sessions';
  const key = SECTION_KEY[section] as (r: R) => string;
  const filled = filledIndexFor(section, rules as readonly Rule[]);
  return new RowKeyedMap<R>(
    {
      count: rules.length,
      keyLength: sessions ? SESSION_KEY_BYTES : POLICY_KEY_BYTES,
      keyBytes: sessions ? (i, into) => SessionRule.keyBytesOf(rules[i] as Session, into) : (i, into) => PolicyRule.keyBytesOf(rules[i] as Policy, into),
      textBytes: sessions ? (k, into) => sessionTextBytes(k, into, readV6Prefix) : (k, into) => policyTextBytes(k, into),
      keyText: (i) => key(rules[i]!),
      rule: (i) => rules[i]!,
      keyBytesOf: sessions ? (r, into) => SessionRule.keyBytesOf(r as Session, into) : (r, into) => PolicyRule.keyBytesOf(r as Policy, into),
      keyOf: key,
      order: (b, out) => keyTextOrder(b, out, sessions),
    },
    fill,
    filled,
  );
}

/** ruleKeyMap of the sessions of `rows`, from the rows (for an index to send: its rules are made on the other side). */
function sessionRowsKeyMap(rows: SessionRows): RowKeyedMap<Session> {
  return new RowKeyedMap<Session>(
    {
      count: rows.count,
      keyLength: SESSION_KEY_BYTES,
      keyBytes: (i, into) => rows.keyBytes(i, into),
      textBytes: (k, into) => sessionTextBytes(k, into, readV6Prefix),
      keyText: (i) => sessionKey(new SessionRule(rows, i)),
      rule: (i) => new SessionRule(rows, i),
      keyBytesOf: (r, into) => SessionRule.keyBytesOf(r, into),
      keyOf: (r) => sessionKey(r),
      order: (b, out) => keyTextOrder(b, out, true),
    },
    false,
  );
}

/**
 * An index by key made before the checks ask for it, by the rows it was
 * made for: the sessions' by the thread that read them (readListAhead),
 * the policies' while this thread waited for that (RulesAsRead.adopt).
 * Taken once.
 */
const filledIndexes = new WeakMap<SessionRows | PolicyRows, () => FilledIndex | undefined>();

/** Indexes ruleKeyMap took from filledIndexes (tests: one made ahead is used). */
let filledIndexesTaken = 0;
export function filledIndexesTakenCount(): number {
  return filledIndexesTaken;
}

/** The index made for `rules`, if they are the rows it was made for, each at its place. */
function filledIndexFor(section: 'policies' | 'sessions', rules: readonly Rule[]): FilledIndex | undefined {
  if (rules.length === 0) return undefined;
  const rows = section === 'sessions' ? SessionRule.rowsOf(rules[0] as Session) : PolicyRule.rowsOf(rules[0] as Policy);
  const filled = rows === undefined ? undefined : filledIndexes.get(rows);
  if (rows === undefined || filled === undefined) return undefined;
  filledIndexes.delete(rows);
  if (rows.count !== rules.length) return undefined;
  for (let i = 0; i < rules.length; i++) if (!isRowAt(rules[i], rows, i)) return undefined;
  const index = filled();
  if (index !== undefined) filledIndexesTaken++;
  return index;
}

/** An IPv6 prefix from its text (host bits cleared, as any key is), else undefined: the caller compares the key texts. */
function readV6Prefix(text: string): Ipv6Prefix | undefined {
  try {
    return parseIpv6Prefix(text, 'key', () => undefined);
  } catch {
    return undefined;
  }
}

/**
 * The distinct lengths `len` gives the rules (a rule it gives -1 is not
 * this check's: a session of the other family); refused past MUP_MAX_PLENS,
 * at the rule that brings one too many.
 */
function checkPrefixLengths<R extends Rule>(src: Source, section: RuleSection, rules: readonly R[], key: string, len: (r: R) => number): Set<number> {
  const lens = new Set<number>();
  // Indexed, not for-of: the array iterator's result objects were not optimised away here (40 MB a pass at a million).
  for (let i = 0; i < rules.length; i++) {
    const r = rules[i]!;
    const l = len(r);
    if (l < 0) continue;
    lens.add(l);
    if (lens.size > MUP_MAX_PLENS) {
      const list = [...lens].sort((a, b) => b - a).map((l) => `/${l}`).join(' ');
      src.fail(
        pathOf(r, section, key),
        `this is the ${lens.size}th distinct prefix length among the ${key} prefixes (${list}); the data path does one lookup per length and supports at most ${MUP_MAX_PLENS}: use fewer distinct lengths`,
      );
    }
  }
  return lens;
}

function checkPolicies(src: Source, policies: readonly Policy[]): void {
  checkRules(src, 'policies', policies, 'match', policyKey, 'policy names must be unique', 'each match prefix (with its teid, if any) may appear in one policy only (after masking host bits; teid 0/0 is the same as none)');
  checkPolicyLengths(src, policies);
}

function checkPolicyLengths(src: Source, policies: readonly Policy[]): void {
  // A TEID prefix is a key of 32 + its length bits; an N3 address with TEID
  // policies also has a /32 entry (its own policy or an address-only one).
  // Read without the `match` and `teid` objects a row makes (PolicyRule.keyLenOf).
  const all = checkPrefixLengths(src, 'policies', policies, 'match', PolicyRule.keyLenOf);
  const teidFirst = policies.find((p) => p.teid !== undefined);
  if (teidFirst !== undefined) {
    if (!all.has(32) && all.size + 1 > MUP_MAX_PLENS) {
      src.fail(
        pathOf(teidFirst, 'policies', 'teid'),
        `the policies use ${all.size} distinct key lengths, and an N3 address with teid policies needs the /32 one too (${all.size + 1}); the data path supports at most ${MUP_MAX_PLENS}: use fewer distinct lengths`,
      );
    }
  }
}

function checkLocalSids(src: Source, sids: readonly LocalSid[]): void {
  checkRules(src, 'localsids', sids, 'sid', localSidKey, 'local SID names must be unique', 'each SID prefix may appear in one local SID only (after masking host bits)');
  checkLocalSidLengths(src, sids);
}

function checkLocalSidLengths(src: Source, sids: readonly LocalSid[]): void {
  checkPrefixLengths(src, 'localsids', sids, 'sid', (s) => s.sid.len);
}

function checkSessions(src: Source, sessions: readonly Session[]): void {
  checkRules(src, 'sessions', sessions, 'ue', sessionKey, 'session names must be unique', 'each UE prefix may appear in one session only (after masking host bits)');
  checkSessionLengths(src, sessions);
}

function checkSessionLengths(src: Source, sessions: readonly Session[]): void {
  // The IPv4 UEs first, then the IPv6 ones (each family is a table of its own), a row's IPv4 UE read
  // without the objects its `ue` makes (SessionRule.ue4Of), and no list of either family made.
  const ue4 = new Uint32Array(2);
  checkPrefixLengths(src, 'sessions', sessions, 'ue', (s) => (SessionRule.ue4Of(s, ue4) ? ue4[1]! : -1));
  checkPrefixLengths(src, 'sessions', sessions, 'ue', (s) => (SessionRule.ue4Of(s, ue4) ? -1 : s.ue.prefix.len));
}

// ---------------------------------------------------------------------------
// Values

function readIpv4Prefix(src: Source, path: Path, v: unknown): Ipv4Prefix {
  const s = readText(src, path, v, 'an IPv4 prefix such as 192.0.2.0/24');
  return src.guard(path, (warn) => parseIpv4Prefix(s, IN_GUARD, warn));
}

/** Policies share one empty segment list. */
const NO_SEGMENTS: Policy['segments'] = Object.freeze([]);

/**
 * Shared prefixes of the rules read one at a time (the API, a batch's
 * operations: each has a Source of its own), by text: a million policies
 * added through /v1/batch had a million sr_prefix and src_prefix objects of
 * their own (an object and a BigInt each, about 128 bytes a rule) where a
 * file's had one. Prefix objects are never changed, so any rule may hold
 * one. Bounded: past SHARED_TEXTS texts it starts again (rules keep the
 * objects they have).
 */
const sharedPrefixes = new Map<string, Ipv6Prefix>();
export const SHARED_TEXTS = 4096;

function readIpv6Prefix(src: Source, path: Path, v: unknown, maxLen: number, why: string, shared = false): Ipv6Prefix {
  const s = readText(src, path, v, 'an IPv6 prefix such as 2001:db8:1::/48');
  // `shared`: the same text (a source prefix common to thousands of
  // policies) is parsed once and its prefix object shared; text that drew a
  // warning is parsed again each time, so each occurrence is reported. Keys
  // (local SIDs) are unique: nothing to share.
  const cached = shared ? (src.v6PrefixesIfAny?.get(s) ?? sharedPrefixes.get(s)) : undefined;
  let p: Ipv6Prefix;
  if (cached !== undefined) {
    p = cached;
  } else {
    let warned = false;
    p = src.guard(path, (warn) =>
      parseIpv6Prefix(s, IN_GUARD, (w, r) => {
        warned = true;
        warn(w, r);
      }),
    );
    if (!warned && shared) keepShared(src, s, p);
  }
  if (p.len > maxLen) src.fail(path, `${s}: prefix length /${p.len} is too long; ${why}`);
  return p;
}

/** Text `s` shares prefix object `p` from now on (it parsed without a warning). */
function keepShared(src: Source, s: string, p: Ipv6Prefix): void {
  src.v6Prefixes.set(s, p);
  if (sharedPrefixes.size >= SHARED_TEXTS) sharedPrefixes.clear();
  sharedPrefixes.set(src.kept(s), p);
}

/**
 * The prefix object readIpv6Prefix (shared) gives text `s`, for the flat
 * readers (src/config/flat-rules.ts): the shared one, else `s` parsed and
 * shared from now on, as readIpv6Prefix does; undefined when `s` does not
 * parse or draws a warning (the rule reader then words it). Its length is
 * the caller's to check, per field.
 */
function sharedV6Prefix(src: Source, s: string): Ipv6Prefix | undefined {
  const cached = src.v6PrefixesIfAny?.get(s) ?? sharedPrefixes.get(s);
  if (cached !== undefined) return cached;
  const p = ownV6Prefix(s);
  if (p !== undefined) keepShared(src, s, p);
  return p;
}

/** What the flat readers (src/config/flat-rules.ts) take from the rule reader, with `src`'s shared prefixes. */
function flatDefaults(src: Source): FlatRuleDefaults {
  return {
    v6: (text) => sharedV6Prefix(src, text),
    noSegments: NO_SEGMENTS,
    srh: 'auto',
    hopLimit: DEFAULT_HOP_LIMIT,
    maxSidPrefixLen: MAX_SID_PREFIX_LEN,
    maxSrcPrefixLen: MAX_SRC_PREFIX_LEN,
    ttl: DEFAULT_TTL,
    v6Own: ownV6Prefix,
  };
}

/**
 * The flat readers' defaults for rules put through the API (a batch read
 * from its bytes, src/daemon/batch-bytes.ts): the rule reader's, as
 * parseSessionEntry and parsePolicyEntry read them (`where` their Source's).
 */
export function apiFlatDefaults(where: string): FlatRuleDefaults {
  return flatDefaults(new Source(where, undefined));
}

/** The prefix object readIpv6Prefix (not shared) makes of `s`, for the flat readers; undefined when `s` does not parse or draws a warning. */
function ownV6Prefix(s: string): Ipv6Prefix | undefined {
  let warned = false;
  let p: Ipv6Prefix;
  try {
    p = parseIpv6Prefix(s, IN_GUARD, () => (warned = true));
  } catch {
    return undefined;
  }
  return warned ? undefined : p;
}

function readIpv6Address(src: Source, path: Path, v: unknown): Ipv6Addr {
  const s = readText(src, path, v, 'an IPv6 address such as 2001:db8::1');
  return src.guard(path, () => parseIpv6(s, IN_GUARD));
}

function readSegments(src: Source, path: Path, v: unknown): Policy['segments'] {
  const list = readList(src, path, v, `a list of at most ${MUP_MAX_SEGS} IPv6 addresses (S1 first)`);
  if (list.length > MUP_MAX_SEGS) {
    src.fail(path, `${list.length} segments given; at most ${MUP_MAX_SEGS} are supported (S1..S${MUP_MAX_SEGS}, the last SID is added from sr_prefix)`);
  }
  return list.map((x, i) => {
    const p = child(path, i);
    const s = readText(src, p, x, 'an IPv6 address such as 2001:db8::1');
    return src.guard(p, () => parseIpv6(s, IN_GUARD));
  });
}

function readPortRange(src: Source, path: Path, v: unknown): [number, number] {
  const expected = 'a string "MIN-MAX" with 1 <= MIN <= MAX <= 65535, e.g. "49152-65535"';
  const s = readText(src, path, v, expected);
  const m = /^([0-9]{1,5})-([0-9]{1,5})$/.exec(s);
  const min = Number(m?.[1]);
  const max = Number(m?.[2]);
  if (m === null || min < 1 || max > 65535 || min > max) {
    src.fail(path, `${JSON.stringify(s)} is not a port range; expected ${expected}`);
  }
  return [min, max];
}

function readName(src: Source, path: Path, v: unknown): string {
  const s = readString(src, path, v, 'a name (quote it if it looks like a number)');
  if (s.trim() === '') src.fail(path, 'must not be empty; give a name or leave the key out');
  return s;
}

/** A name of RULE_NAME_CHAR's characters only: one test per name, the per-character walk only for a name it refuses. */
const RULE_NAME_OK = new RegExp(`^${RULE_NAME_CHAR.source}*$`, RULE_NAME_CHAR.flags);

/**
 * A rule's name (policy, local SID, session): it goes as it is into `policy
 * list`, logs and /metrics labels, so only a printable set (letters, digits
 * and `. _ : / @ + -`) and at most RULE_NAME_MAX characters. The config file
 * and the API (parsePolicyEntry, parseLocalSidEntry, parseSessionEntry) both
 * read names here.
 */
function readRuleName(src: Source, path: Path, v: unknown): string {
  const s = readName(src, path, v);
  if (s.length <= RULE_NAME_MAX && RULE_NAME_OK.test(s)) return s;
  const shown = s.length > 40 ? `${JSON.stringify(s.slice(0, 40))} (and ${s.length - 40} more characters)` : JSON.stringify(s);
  if (s.length > RULE_NAME_MAX) {
    src.fail(path, `${shown} is ${s.length} characters long; a rule name has at most ${RULE_NAME_MAX}`);
  }
  const chars = [...s];
  const bad = chars.findIndex((c) => !RULE_NAME_CHAR.test(c));
  if (bad >= 0) {
    src.fail(
      path,
      `${shown} has ${JSON.stringify(chars[bad])} at character ${bad + 1}; a rule name may only use letters A-Z a-z, digits and . _ : / @ + -`,
    );
  }
  return s;
}

/** Flow nesting past which no line is looked up with the `yaml` parser (js-yaml refuses past 100 levels). */
const MAX_LINE_DEPTH = 100;

/**
 * The text's brackets ([ {) nest deeper than `limit` outside quoted
 * scalars (an estimate: block nesting is not counted; a quote opens a
 * scalar only where one can begin, so the apostrophe of "don't" does not).
 */
export function nestedDeeperThan(text: string, limit: number): boolean {
  let depth = 0;
  let quote = 0;
  let prev = 0x0a;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (quote !== 0) {
      if (c === 0x5c && quote === 0x22) i++; // a backslash escape in a double-quoted scalar
      else if (c === quote) {
        quote = 0;
        prev = c;
      }
      continue;
    }
    if ((c === 0x22 || c === 0x27) && (prev === 0x0a || prev === 0x20 || prev === 0x09 || prev === 0x5b || prev === 0x7b || prev === 0x2c || prev === 0x3a || prev === 0x2d)) {
      quote = c;
      continue;
    }
    if (c === 0x5b || c === 0x7b) {
      if (++depth > limit) return true;
    } else if ((c === 0x5d || c === 0x7d) && depth > 0) depth--;
    prev = c;
  }
  return false;
}

/** A string the config keeps (a name, a path): not a slice of the file's text (src/host/own-copy.ts). */
function readString(src: Source, path: Path, v: unknown, expected: string): string {
  return src.kept(readText(src, path, v, expected));
}

/** A string only parsed into something else (an address, a prefix), as the file gave it. */
function readText(src: Source, path: Path, v: unknown, expected: string): string {
  if (typeof v !== 'string') src.fail(path, `expected ${expected}, got ${describe(v)}`);
  return v;
}

/** An mtu whose Packet Too Big would go to an IPv6 sender under 1280 is refused (src/config/mtu-floor.ts). */
function checkMtuFloor(src: Source, path: Path, mtu: number, g: Growth, fn: string): void {
  const why = mtuTooSmall(mtu, g, fn);
  if (why !== undefined) src.fail(path, why);
}

function readInt(src: Source, path: Path, v: unknown, min: number, max: number, why?: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) {
    const because = why === undefined ? '' : ` (${why})`;
    src.fail(path, `expected an integer from ${min} to ${max}${because}, got ${describe(v)}`);
  }
  return v;
}

function readEnum<T extends string>(src: Source, path: Path, v: unknown, allowed: readonly T[]): T {
  if (typeof v !== 'string' || !(allowed as readonly string[]).includes(v)) {
    src.fail(path, `expected one of ${allowed.join(', ')}, got ${describe(v)}`);
  }
  return v as T;
}

function readList(src: Source, path: Path, v: unknown, expected: string): readonly unknown[] {
  if (v === null || v === undefined) return [];
  if (!Array.isArray(v)) src.fail(path, `expected ${expected}, got ${describe(v)}`);
  return v as readonly unknown[];
}

function readMapping(
  src: Source,
  path: Path,
  v: unknown,
  allowed: readonly string[],
  where: string,
): Readonly<Record<string, unknown>> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    src.fail(path, `expected a mapping with keys ${allowed.join(', ')}, got ${describe(v)}`);
  }
  const m = v as Record<string, unknown>;
  for (const key of Object.keys(m)) {
    if (!allowed.includes(key)) {
      const near = closest(key, allowed);
      const hint = near === undefined ? '' : ` (did you mean ${near}?)`;
      src.fail(child(path, key), `unknown key${hint}; allowed keys ${where}: ${allowed.join(', ')}`);
    }
  }
  return m;
}

/** The value of a key; null counts as absent (undefined). */
function present(m: Readonly<Record<string, unknown>>, key: string): unknown {
  const v = Object.hasOwn(m, key) ? m[key] : undefined;
  return v === null ? undefined : v;
}

/** The value of a required key; its absence is an error that says `what` to give. */
function need(src: Source, m: Readonly<Record<string, unknown>>, path: Path, key: string, what: string): unknown {
  const v = present(m, key);
  if (v === undefined) src.fail(child(path, key), `required key missing; give ${what}`);
  return v;
}

/** The value of an optional key; null counts as absent. */
function optional<T>(m: Readonly<Record<string, unknown>>, key: string, read: (v: unknown) => T): T | undefined {
  const v = Object.hasOwn(m, key) ? m[key] : undefined;
  return v === null || v === undefined ? undefined : read(v);
}

function required<T>(
  src: Source,
  m: Readonly<Record<string, unknown>>,
  path: Path,
  key: string,
  what: string,
  read: (v: unknown) => T,
): T {
  const got = optional(m, key, read);
  if (got === undefined) src.fail(child(path, key), `required key missing; give ${what}`);
  return got;
}

/** `s` as a message quotes it: at most `max` characters, "..." ending one cut short. */
export function clipped(s: string, max: number): string {
  return s.length > max ? `${s.slice(0, max - 3)}...` : s;
}

/** A value as messages name it ("the string \"...\"", "a mapping"): never the whole of it (a body may hold 16 MB, or JSON nested thousands deep). */
export function describe(v: unknown): string {
  if (v === null || v === undefined) return 'nothing';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a mapping';
  if (typeof v === 'string') return `the string ${JSON.stringify(clipped(v, 60))}`;
  if (typeof v === 'number') return `the number ${v}`;
  return String(v);
}

/** Nearest allowed key (edit distance <= 2, or one is a prefix of the other), for "did you mean". */
function closest(key: string, allowed: readonly string[]): string | undefined {
  const lower = key.toLowerCase();
  const stem = allowed.find((a) => lower.length >= 3 && (a.startsWith(lower) || lower.startsWith(a)));
  if (stem !== undefined) return stem;
  let best: string | undefined;
  let bestD = 3;
  for (const a of allowed) {
    const d = editDistance(key.toLowerCase(), a);
    if (d < bestD) {
      best = a;
      bestD = d;
    }
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      const sub = (prev[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      cur.push(Math.min(sub, (prev[j] ?? 0) + 1, (cur[j - 1] ?? 0) + 1));
    }
    prev = cur;
  }
  return prev[b.length] ?? 0;
}

// ---------------------------------------------------------------------------
// Key paths and source positions

/**
 * A key path one deeper: ['policies', 2] + 'match'. Spelled out only when a
 * reader reports it (an error or a warning): a path array for every field
 * read was ~110 MB of the 500 MB a 131,072-rule parse allocated.
 */
class Under {
  constructor(
    readonly parent: Path,
    readonly seg: string | number,
  ) {}
}

function child(path: Path, seg: string | number): Path {
  return new Under(path, seg);
}

/** The `where` given to a parser run by Source.guard, which locates its errors and warnings itself. */
const IN_GUARD = '';

/** Where a value is in the config: its keys and indexes from the top. */
type Path = readonly (string | number)[] | Under;

/** The path's keys and indexes, from the top. */
function segmentsOf(path: Path): readonly (string | number)[] {
  if (!(path instanceof Under)) return path;
  const out: (string | number)[] = [];
  let p: Path = path;
  for (; p instanceof Under; p = p.parent) out.push(p.seg);
  for (let i = p.length - 1; i >= 0; i--) out.push(p[i]!);
  return out.reverse();
}

/** A rule's `where`: its index when it is an item of a top-level list (['policies', 3] -> 3), else its path spelled out. */
function ruleWhere(path: Path): Where {
  return !(path instanceof Under) && path.length === 2 && typeof path[1] === 'number' ? path[1] : formatPath(path);
}

/** ['policies', 2, 'sr_prefix'] -> "policies[2].sr_prefix". */
function formatPath(path: Path): string {
  const parts: string[] = [];
  for (const seg of segmentsOf(path)) {
    if (typeof seg === 'number') parts.push(`[${seg}]`);
    else if (/^[A-Za-z_][A-Za-z0-9_-]*$/.test(seg)) parts.push(parts.length === 0 ? seg : `.${seg}`);
    else parts.push(`[${JSON.stringify(seg)}]`);
  }
  // Joined, not added up: a rule keeps its `where`, and "policies" + "[12345]" is a tree of two strings (56 B) where the joined one is 32.
  return parts.join('');
}

function firstLine(s: string): string {
  return (s.split('\n')[0] ?? s).replace(/\.$/, '');
}

/**
 * The text being validated, for errors and warnings that point at a line.
 * Positions come from the `yaml` parser, run on the first message that needs
 * one (text is undefined for API input: no lines).
 */
class Source {
  readonly warnings: ConfigWarning[] = [];

  constructor(
    readonly file: string,
    private readonly input: string | AsciiText | undefined,
    /**
     * Parsed IPv6 prefixes by text (readIpv6Prefix), the positions' parse,
     * and whether the tree's strings are slices of the text: shared with fork()s.
     */
    private readonly shared: { v6Prefixes?: Map<string, Ipv6Prefix>; doc?: { doc: Document; lines: LineCounter }; fresh?: boolean } = {},
  ) {}

  /** The tree came from JSON.parse (the file was JSON): its strings are its own, not slices of the text. */
  freshStrings(fresh = true): void {
    this.shared.fresh = fresh;
  }

  /**
   * A string read from the tree, to be kept (a name, a map key, a warning):
   * a copy of its own when it may be a slice of a YAML text, which it would
   * keep whole (src/host/own-copy.ts). API input (no text) and JSON come
   * from JSON.parse, whose strings are their own.
   */
  kept(s: string): string {
    return this.input === undefined || this.shared.fresh === true ? s : ownCopy(s);
  }

  /** The text, made now if it was an ASCII file's bytes (an error's line is looked for in it). */
  private get text(): string | undefined {
    return this.input === undefined ? undefined : textOf(this.input);
  }

  /** Made when first set (keepShared): an API rule's Source (one a rule of a batch) needs one only for a prefix text not in sharedPrefixes yet. */
  get v6Prefixes(): Map<string, Ipv6Prefix> {
    return (this.shared.v6Prefixes ??= new Map());
  }

  get v6PrefixesIfAny(): Map<string, Ipv6Prefix> | undefined {
    return this.shared.v6Prefixes;
  }

  /** The same text with warnings of its own (the rules read during the parse: see RulesAsRead). */
  fork(): Source {
    return new Source(this.file, this.input, this.shared);
  }

  #parsed(): { doc: Document; lines: LineCounter } | undefined {
    if (this.text === undefined) return undefined;
    // The `yaml` parser recurses per level: a text nested deeper than js-yaml reads (a refused one, or JSON,
    // which has no limit) overflowed its stack, and the next parse in the same thread could abort the
    // process in V8's regexp compiler (found in review, session 42). Such a text's errors go without lines.
    if (this.shared.doc === undefined && nestedDeeperThan(this.text, MAX_LINE_DEPTH)) return undefined;
    if (this.shared.doc === undefined) {
      const { LineCounter, parseDocument } = yamlDoc();
      const lines = new LineCounter();
      const doc = parseDocument(this.text, { lineCounter: lines, prettyErrors: false });
      this.shared.doc = { doc, lines };
    }
    return this.shared.doc;
  }

  /** Throw the `yaml` parser's first error, worded with its line and column, if it finds one. */
  syntaxError(): void {
    const p = this.#parsed();
    const first = p?.doc.errors[0];
    if (p === undefined || first === undefined) return;
    const pos = p.lines.linePos(first.pos[0]);
    const fix = first.code === 'DUPLICATE_KEY' ? 'give each key once' : 'fix the YAML (indentation, quotes, brackets)';
    throw new ConfigError(this.file, '', `YAML syntax error at column ${pos.col}: ${firstLine(first.message)}; ${fix}`, pos.line);
  }

  fail(path: Path, reason: string): never {
    throw new ConfigError(this.file, formatPath(path), this.kept(reason), this.lineOf(path));
  }

  warn(path: Path, reason: string): void {
    this.warnings.push(configWarning(this.file, formatPath(path), this.kept(reason), this.lineOf(path)));
  }

  /**
   * Run an addr.ts parser: its AddressError becomes a ConfigError, it and its
   * warnings located at `path` (so the parser is given IN_GUARD as its
   * `where`, not a key path built for every value checked).
   */
  guard<T>(path: Path, parse: (warn: WarnFn) => T): T {
    try {
      return parse((_where, reason) => this.warn(path, reason));
    } catch (e) {
      if (e instanceof AddressError) this.fail(path, e.reason);
      throw e;
    }
  }

  /** Line of the deepest node on `path` that exists (a key's own line for mapping entries). */
  lineOf(path: Path): number | undefined {
    const p = this.#parsed();
    if (p === undefined) return undefined;
    const { isMap, isScalar, isSeq } = yamlDoc();
    let node: unknown = p.doc.contents;
    let offset = start(node);
    for (const seg of segmentsOf(path)) {
      if (isMap(node)) {
        const pair = node.items.find((q) => isScalar(q.key) && String(q.key.value) === String(seg));
        if (pair === undefined) break;
        offset = start(pair.key) ?? offset;
        node = pair.value;
      } else if (isSeq(node) && typeof seg === 'number') {
        node = node.items[seg];
        offset = start(node) ?? offset;
      } else {
        break;
      }
    }
    return offset === undefined ? undefined : p.lines.linePos(offset).line;
  }
}

function start(node: unknown): number | undefined {
  return yamlDoc().isNode(node) ? node.range?.[0] : undefined;
}

// ---------------------------------------------------------------------------
// bgp: the BGP MUP control plane (docs/bgp.md)

const BGP_KEYS = [
  'asn', 'router_id', 'listen', 'api', 'neighbors', 'rd', 'rt', 'import_rt', 'hold_down', 'graceful_restart', 'roles',
  'nexthop', 'policy_defaults', 'session_defaults', 'dsd',
] as const;
const BGP_NEIGHBOR_KEYS = ['address', 'port', 'asn'] as const;
const BGP_DEFAULTS_KEYS = ['src_prefix', 'segments', 'srh', 'hop_limit', 'mtu'] as const;
const BGP_DSD_KEYS = ['address', 'sid', 'behavior', 'segment_id', 'lb', 'ln', 'fn'] as const;
const ADVERTISE_KEYS = ['prefixes', 'lb', 'ln', 'fn'] as const;
/** Default bgp.hold_down (seconds) and bgp.graceful_restart (restart time, seconds). */
export const DEFAULT_BGP_HOLD_DOWN = 5;
export const DEFAULT_BGP_GRACEFUL_RESTART = 120;
/** An advertised prefix is split into at most 2^8 ISDs of /25 (/121). */
const MAX_ISD_SPLIT_BITS = 8;

/**
 * A route distinguisher or target as gobgpd 3.10 takes it: ASN:N with a
 * 2-byte ASN (a 4-byte one is silently clamped to 65535 by 3.10), or
 * IPv4:N with N < 65536.
 */
function readRdRt(src: Source, path: Path, v: unknown, what: string): string {
  const s = readString(src, path, typeof v === 'number' ? String(v) : v, `a ${what} such as 65000:100 or 10.255.0.2:7`);
  const m = /^(?:(\d+)|(\d+\.\d+\.\d+\.\d+)):(\d+)$/.exec(s);
  const ok = m !== null && (m[1] !== undefined ? Number(m[1]) <= 65535 && Number(m[3]) <= 0xffffffff : Number(m[3]) <= 65535 && isIpv4(m[2]!));
  if (!ok) {
    src.fail(path, `${JSON.stringify(s)} is not a ${what} gobgpd 3.10 keeps; give ASN:N with a 2-byte ASN (0..65535, N < 2^32) or IPv4:N (N < 65536), e.g. 65000:100 (3.10 silently clamps 4-byte ASNs)`);
  }
  // As gobgpd prints it back: "65000:02" kept as typed made our routes' keys differ from the sidecar's
  // ("65000:2"), so every reconcile withdrew and re-added them, and an RT of "65000:0100" filtered every
  // learned route (found in review, session 43).
  return `${m![1] !== undefined ? Number(m![1]) : m![2]!}:${Number(m![3])}`;
}

/** `s` is what `parse` (an addr.ts parser) takes. */
function parses(parse: (s: string, where: string) => unknown, s: string): boolean {
  try {
    parse(s, '');
    return true;
  } catch {
    return false;
  }
}

function isIpv4(s: string): boolean {
  return parses(parseIpv4, s);
}

/**
 * An IPv4 or IPv6 address, as gobgpd is given it. Any text with a colon
 * passed before ("not:an:ip", "1.2.3.4:5"), and failed later in gobgpd
 * (found in review, session 42).
 */
function isIpAddress(s: string): boolean {
  return isIpv4(s) || parses(parseIpv6, s);
}

function readHostPort(src: Source, path: Path, v: unknown, example: string): { host: string; port: number } {
  const l = readListen(src, path, v);
  if (!isIpAddress(l.host)) src.fail(path, `${JSON.stringify(l.host)} is not an IP address; give e.g. ${example}`);
  return l;
}

function readSegmentId(src: Source, path: Path, v: unknown): string {
  const s = readString(src, path, v, 'a MUP segment id A:B, e.g. "10:10"');
  const m = /^(\d+):(\d+)$/.exec(s);
  if (m === null || Number(m[1]) > 65535 || Number(m[2]) > 0xffffffff) src.fail(path, `${JSON.stringify(s)} is not a segment id A:B (A < 65536, B < 2^32), e.g. "10:10"`);
  // As gobgpd prints it ("010:10" is "10:10"), or our DSD's key differs from the sidecar's copy.
  return `${Number(m![1])}:${Number(m![2])}`;
}

/** A local SID's `advertise:` (ISD routes): prefixes of its family, lb + ln + fn = the SID's length. */
function readAdvertise(src: Source, path: Path, v: unknown, family: 4 | 6, sidLen: number): LocalSidAdvertise {
  const m = readMapping(src, path, v, ADVERTISE_KEYS, 'in advertise');
  const at = (key: string): Path => child(path, key);
  const list = readList(src, at('prefixes'), m['prefixes'], `a list of ${family === 4 ? 'IPv4' : 'IPv6'} access (gNB) prefixes`);
  if (list.length === 0) src.fail(at('prefixes'), `required: the ${family === 4 ? 'IPv4' : 'IPv6'} access (gNB) prefixes this SID serves, e.g. [192.0.2.0/25]`);
  const prefixes = list.map((x, i) => {
    const p = child(at('prefixes'), i);
    const min = family === 4 ? 25 : 121;
    const pf = family === 4 ? readIpv4Prefix(src, p, x) : readIpv6Prefix(src, p, x, 128, '');
    if (min - pf.len > MAX_ISD_SPLIT_BITS) {
      src.fail(p, `/${pf.len} would be advertised as ${2 ** (min - pf.len)} ISDs of /${min} (gobgpd 3.10 drops received ISDs shorter than /${min}); give /${min - MAX_ISD_SPLIT_BITS} or longer prefixes`);
    }
    return family === 4 ? formatIpv4Prefix(pf as Ipv4Prefix) : formatIpv6Prefix(pf as Ipv6Prefix);
  });
  const lb = required(src, m, path, 'lb', 'the locator block length (bits)', (x) => readInt(src, at('lb'), x, 0, 128));
  const ln = required(src, m, path, 'ln', 'the locator node length (bits)', (x) => readInt(src, at('ln'), x, 0, 128));
  const fn = required(src, m, path, 'fn', 'the function length (bits)', (x) => readInt(src, at('fn'), x, 0, 128));
  if (lb + ln + fn !== sidLen) {
    src.fail(path, `lb ${lb} + ln ${ln} + fn ${fn} = ${lb + ln + fn}, but the SID is /${sidLen}: the structure tells the PEs where the Args start, so lb + ln + fn must equal ${sidLen}`);
  }
  return { prefixes, lb, ln, fn };
}

function readBgpDefaults(src: Source, path: Path, v: unknown, extra: readonly string[]): { d: BgpRuleDefaults; m: Readonly<Record<string, unknown>> } {
  const m = readMapping(src, path, v, [...BGP_DEFAULTS_KEYS, ...extra], `in ${formatPath(path)}`);
  const srcPrefix = required(src, m, path, 'src_prefix', `the IPv6 source prefix (P <= ${MAX_SRC_PREFIX_LEN}), e.g. 2001:db8:ff:2::/64`, (x) =>
    readIpv6Prefix(src, child(path, 'src_prefix'), x, MAX_SRC_PREFIX_LEN, SRC_LEN_WHY),
  );
  const { segments, srh, hopLimit, mtu } = readPath6(src, path, m, 'the packet is IPv6');
  return { d: { srcPrefix, segments, srh, hopLimit, ...(mtu === undefined ? {} : { mtu }) }, m };
}

function readBgp(src: Source, path: Path, v: unknown): BgpConfig {
  const m = readMapping(src, path, v, BGP_KEYS, 'in bgp');
  const at = (key: string): Path => child(path, key);
  const asn = required(src, m, path, 'asn', 'our AS number, e.g. 65000', (x) => readInt(src, at('asn'), x, 1, 4294967295));
  const routerId = required(src, m, path, 'router_id', "the sidecar's BGP router id (an IPv4 address), e.g. 10.255.0.2", (x) =>
    formatIpv4(readIpv4Address(src, at('router_id'), x)),
  );
  const listen = optional(m, 'listen', (x) => readHostPort(src, at('listen'), x, '0.0.0.0:179')) ?? { host: '0.0.0.0', port: 179 };
  const api = required(src, m, path, 'api', "the sidecar gobgpd's gRPC API on loopback, e.g. 127.0.0.1:50051", (x) => readHostPort(src, at('api'), x, '127.0.0.1:50051'));
  if (!isLoopbackHost(api.host)) src.fail(at('api'), `${formatListen(api)} is not a loopback address: the sidecar's API changes its routes and has no authentication; give 127.0.0.1:PORT`);
  const neighbors = readList(src, at('neighbors'), m['neighbors'], 'a list of neighbors ({address, port, asn})').map((x, i) => {
    const p: Path = child(at('neighbors'), i);
    const n = readMapping(src, p, x, BGP_NEIGHBOR_KEYS, 'in a neighbor');
    const address = required(src, n, p, 'address', 'the neighbor (route reflector) address', (y) => {
      const s = readString(src, child(p, 'address'), y, 'an IP address');
      if (!isIpAddress(s)) src.fail(child(p, 'address'), `${JSON.stringify(s)} is not an IP address`);
      return s;
    });
    const port = optional(n, 'port', (y) => readInt(src, child(p, 'port'), y, 1, 65535)) ?? 179;
    const nasn = optional(n, 'asn', (y) => readInt(src, child(p, 'asn'), y, 1, 4294967295)) ?? asn;
    return { address, port, asn: nasn };
  });
  const rd = required(src, m, path, 'rd', 'the route distinguisher of the routes we advertise, e.g. "65000:2"', (x) => readRdRt(src, at('rd'), x, 'route distinguisher'));
  const rt = required(src, m, path, 'rt', 'the route target, e.g. "65000:100"', (x) => readRdRt(src, at('rt'), x, 'route target'));
  const importRts = optional(m, 'import_rt', (x) => readList(src, at('import_rt'), x, 'a list of route targets').map((y, i) => readRdRt(src, child(at('import_rt'), i), y, 'route target'))) ?? [rt];
  const seconds = (key: string, min: number, max: number) => (x: unknown): number => {
    if (typeof x !== 'number' || !Number.isFinite(x) || x < min || x > max) src.fail(at(key), `expected seconds from ${min} to ${max}, got ${describe(x)}`);
    return x;
  };
  const holdDown = optional(m, 'hold_down', seconds('hold_down', 0, 3600)) ?? DEFAULT_BGP_HOLD_DOWN;
  const gracefulRestart = optional(m, 'graceful_restart', (x) => readInt(src, at('graceful_restart'), x, 1, 4095, 'the restart time field is 12 bits')) ?? DEFAULT_BGP_GRACEFUL_RESTART;
  const roles = optional(m, 'roles', (x) => readList(src, at('roles'), x, 'a list of roles: gw, pe').map((y, i) => readEnum(src, child(at('roles'), i), y, ['gw', 'pe'] as const))) ?? ['gw'];
  if (roles.length === 0) src.fail(at('roles'), 'give gw and/or pe');
  const nexthop = optional(m, 'nexthop', (x) => readIpv6Address(src, at('nexthop'), x));
  const policyDefaults = optional(m, 'policy_defaults', (x) => readBgpDefaults(src, at('policy_defaults'), x, []).d);
  const sessionDefaults = optional(m, 'session_defaults', (x) => {
    const { d, m: sm } = readBgpDefaults(src, at('session_defaults'), x, ['source']);
    // A learned session's UE may be IPv6 (T1ST routes of either family).
    if (d.mtu !== undefined) checkMtuFloor(src, child(at('session_defaults'), 'mtu'), d.mtu, sessionGrowth(d.segments.length, d.srh), "the encapsulation of an IPv6 UE's packet");
    const source = required(src, sm, at('session_defaults'), 'source', "the UPF's N3 IPv4 address End.M.GTP4.E restores as the GTP-U source (3.10's T1ST carries none)", (y) =>
      readIpv4Address(src, child(at('session_defaults'), 'source'), y),
    );
    return { ...d, source };
  });
  if (roles.includes('gw') && policyDefaults === undefined) {
    src.fail(at('policy_defaults'), 'required with role gw: the src_prefix (and segments, srh) of the policies learned from T2ST+DSD routes, e.g. {src_prefix: 2001:db8:ff:2::/64}');
  }
  if (roles.includes('pe') && sessionDefaults === undefined) {
    src.fail(at('session_defaults'), 'required with role pe: the src_prefix and source of the sessions learned from T1ST+ISD routes, e.g. {src_prefix: 2001:db8:ff:9::/64, source: 198.51.100.1}');
  }
  const dsd = readList(src, at('dsd'), m['dsd'], 'a list of DSD routes to advertise ({sid, behavior, segment_id, lb, ln, fn})').map((x, i): BgpDsd => {
    const p: Path = child(at('dsd'), i);
    const d = readMapping(src, p, x, BGP_DSD_KEYS, 'in a dsd entry');
    const a = (key: string): Path => child(p, key);
    const address = optional(d, 'address', (y) => {
      const s = readString(src, a('address'), y, 'an IP address');
      if (!isIpAddress(s)) src.fail(a('address'), `${JSON.stringify(s)} is not an IP address`);
      // In the form gobgpd prints (RFC 5952 for IPv6): the DSD's key is compared with the sidecar's.
      return isIpv4(s) ? formatIpv4(parseIpv4(s, '')) : formatIpv6(parseIpv6(s, ''));
    }) ?? routerId;
    const sid = required(src, d, p, 'sid', "the PE's End.DT4/DT6/DT46 SID, e.g. 2001:db8:d9:1::", (y) => readIpv6Address(src, a('sid'), y));
    const behavior = required(src, d, p, 'behavior', 'end.dt4, end.dt6 or end.dt46', (y) => readEnum(src, a('behavior'), y, ['end.dt4', 'end.dt6', 'end.dt46'] as const));
    const segmentId = required(src, d, p, 'segment_id', 'the MUP segment id (extended community) the T2STs name, e.g. "10:10"', (y) => readSegmentId(src, a('segment_id'), y));
    const lb = required(src, d, p, 'lb', 'the locator block length (bits)', (y) => readInt(src, a('lb'), y, 1, 128));
    const ln = optional(d, 'ln', (y) => readInt(src, a('ln'), y, 0, 128)) ?? 0;
    const fn = optional(d, 'fn', (y) => readInt(src, a('fn'), y, 0, 128)) ?? 0;
    if (lb + ln + fn > 128) src.fail(p, `lb ${lb} + ln ${ln} + fn ${fn} > 128`);
    return { where: formatPath(p), address, sid, behavior, segmentId, lb, ln, fn };
  });
  if (dsd.length > 0 && nexthop === undefined) src.fail(at('nexthop'), 'required with dsd: the IPv6 next hop of the routes we advertise (gobgp 3.10 takes only IPv6 for ISD/DSD), e.g. 2001:db8:ff::2');
  return {
    asn,
    routerId,
    listen,
    api,
    neighbors,
    rd,
    rt,
    importRts,
    holdDown,
    gracefulRestart,
    roles,
    ...(nexthop === undefined ? {} : { nexthop }),
    ...(policyDefaults === undefined ? {} : { policyDefaults }),
    ...(sessionDefaults === undefined ? {} : { sessionDefaults }),
    dsd,
  };
}
