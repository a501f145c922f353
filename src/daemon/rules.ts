/**
 * The rules a daemon wants in its tables: the config file's, with the changes
 * made through the API on top (the overlay, saved in the state file).
 *
 * Which wins: the state file applies only on top of the very config file it
 * was made against (same SHA-256). An edited config file is the operator's
 * newer word, so a reload or restart with a changed file drops the overlay
 * (kept aside as <state>.discarded, and logged). To keep an API change for
 * good, write it into the config file.
 */
import { createHash } from 'node:crypto';
import { closeSync, fdatasyncSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, writeFileSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { checkRuleSet, parseLocalSidEntry, parsePolicyEntry } from '../config/load.js';
import { canonicalPolicyKey, formatTeidPrefix, localSidKey, policyKey } from '../config/keys.js';
import type { Config, LocalSid, Policy } from '../config/types.js';
import type { Changes, Tables } from '../dataplane/tables.js';
import { formatIpv4Prefix, formatIpv6, formatIpv6Prefix, parseIpv6Prefix } from '../sid/addr.js';

export type RuleKind = 'policy' | 'localsid';

/** A rule as the config file and the API spell it (snake_case keys). */
export type RuleJson = Record<string, unknown>;

/** A rule of any kind. */
export type Rule = Policy | LocalSid;

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
  readonly section: 'policies' | 'localsids';
  /** The API's collection. */
  readonly apiPath: string;
  /** `mup <verb> list|add|replace|del`. */
  readonly cliVerb: string;
  /** The key's name: in the config and API body, the DELETE query, messages. */
  readonly keyName: string;
  /** The overlay's maps of this kind: added or replaced rules, deleted config keys. */
  readonly overlay: { readonly put: 'policies' | 'localsids'; readonly del: 'delPolicies' | 'delLocalSids' };
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
    ruleId: (t, r) => t.policyRule((r as Policy).match, (r as Policy).teid),
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
};

/** Every kind, in the order the tables, listings and state file use. */
export const RULE_KIND_LIST: readonly RuleKindSpec[] = Object.values(RULE_KINDS);

/** The entry of a kind named in input (a state file line), or undefined. */
export function ruleKind(name: unknown): RuleKindSpec | undefined {
  return typeof name === 'string' && Object.hasOwn(RULE_KINDS, name) ? RULE_KINDS[name as RuleKind] : undefined;
}

export function policyJson(p: Policy): RuleJson {
  return {
    ...(p.name === undefined ? {} : { name: p.name }),
    match: formatIpv4Prefix(p.match),
    ...(p.teid === undefined ? {} : { teid: formatTeidPrefix(p.teid) }),
    ...(p.sid === undefined ? { sr_prefix: formatIpv6Prefix(p.srPrefix) } : { sid: formatIpv6(p.sid) }),
    src_prefix: formatIpv6Prefix(p.srcPrefix),
    ...(p.segments.length === 0 ? {} : { segments: p.segments.map((s) => formatIpv6(s)) }),
    srh: p.srh,
    hop_limit: p.hopLimit,
    ...(p.mtu === undefined ? {} : { mtu: p.mtu }),
  };
}

/** A local SID with the keys its behaviour takes in the config file (load.ts LOCALSID_KEYS_OF). */
export function localSidJson(l: LocalSid): RuleJson {
  const behavior = l.behavior ?? 'end.m.gtp4.e';
  const head = {
    ...(l.name === undefined ? {} : { name: l.name }),
    ...(l.behavior === undefined ? {} : { behavior }),
    sid: localSidKey(l),
  };
  const mtu = l.mtu === undefined ? {} : { mtu: l.mtu };
  const source = l.source === undefined ? {} : { source: formatIpv6(l.source) };
  switch (behavior) {
    case 'end.m.gtp4.e':
      return { ...head, src_prefix_len: l.srcPrefixLen, container: l.container, ttl: l.ttl, ...mtu };
    case 'end.m.gtp6.e':
      return { ...head, ...source, container: l.container, hop_limit: l.ttl, ...mtu };
    case 'end.m.gtp6.d':
    case 'end.m.gtp6.d.di':
      return {
        ...head,
        ...source,
        ...(l.srPrefix === undefined ? {} : { sr_prefix: formatIpv6Prefix(l.srPrefix) }),
        ...((l.segments ?? []).length === 0 ? {} : { segments: (l.segments ?? []).map((x) => formatIpv6(x)) }),
        srh: l.srh ?? 'auto',
        hop_limit: l.ttl,
        ...mtu,
      };
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
}

export function emptyOverlay(): Overlay {
  return { policies: new Map(), delPolicies: new Set(), localsids: new Map(), delLocalSids: new Set() };
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
    readonly status: 400 | 404 | 409,
  ) {
    super(message);
  }
}

/** Key text of a rule: its prefix, masked, as formatted (computed once per rule). */
export { localSidKey, policyKey };

/** Canonical key text from user text ("10.0.0.7/24" -> "10.0.0.0/24"). */
export function canonicalKey(kind: RuleKind, text: string): string {
  return RULE_KINDS[kind].canonicalKey(text);
}

/**
 * The effective rule set: config rules with the overlay applied, indexed by
 * key and by name, in a stable order (config order, then API additions).
 */
export class RuleSet {
  /** Rules by kind, by key, in order; names to keys. */
  readonly #rules = perKind(() => new Map<string, Rule>());
  readonly #names = perKind(() => new Map<string, string>());
  /** Keys that come from the config file, "<kind> <key>" (for `source` in listings). */
  readonly #fromConfig = new Set<string>();

  constructor(
    readonly config: Config,
    readonly overlay: Overlay,
  ) {
    for (const k of RULE_KIND_LIST) for (const r of config[k.section]) this.#fromConfig.add(`${k.kind} ${k.key(r)}`);
    for (const k of RULE_KIND_LIST) {
      const put = overlay[k.overlay.put] as Map<string, Rule>;
      const del = overlay[k.overlay.del];
      for (const r of config[k.section]) {
        const key = k.key(r);
        if (!del.has(key)) this.#set(k, put.get(key) ?? r);
      }
      for (const [key, r] of put) if (!this.#rules[k.kind].has(key)) this.#set(k, r);
    }
    // The overlay was checked rule by rule when it was made; the whole must
    // still hold together (names unique across file and API, lengths). The
    // file alone was checked when it was read.
    if (overlaySize(overlay) > 0) {
      checkRuleSet('the config with the state file applied', [...this.policies.values()], [...this.localsids.values()]);
    }
  }

  /** The policies, by key, in order. */
  get policies(): ReadonlyMap<string, Policy> {
    return this.#rules.policy as Map<string, Policy>;
  }

  /** The local SIDs, by key, in order. */
  get localsids(): ReadonlyMap<string, LocalSid> {
    return this.#rules.localsid as Map<string, LocalSid>;
  }

  /** The rules of a kind, by key, in order. */
  rules(kind: RuleKind): ReadonlyMap<string, Rule> {
    return this.#rules[kind];
  }

  source(kind: RuleKind, key: string): 'config' | 'api' {
    const overlaid = this.overlay[RULE_KINDS[kind].overlay.put].has(key);
    return this.#fromConfig.has(`${kind} ${key}`) && !overlaid ? 'config' : 'api';
  }

  #set(k: RuleKindSpec, r: Rule): void {
    const key = k.key(r);
    const names = this.#names[k.kind];
    const old = this.#rules[k.kind].get(key);
    if (old?.name !== undefined) names.delete(old.name);
    this.#rules[k.kind].set(key, r);
    if (r.name !== undefined) names.set(r.name, key);
  }

  /** Key of the rule called `name`, or of the rule with key `key`. */
  find(kind: RuleKind, by: { key?: string; name?: string }): string | undefined {
    if (by.name !== undefined) return this.#names[kind].get(by.name);
    if (by.key === undefined) return undefined;
    const k = canonicalKey(kind, by.key);
    return this.#rules[kind].has(k) ? k : undefined;
  }

  /** Validate an API rule (as the file's entries are) and check it against the set for add or replace. */
  check(kind: RuleKind, body: unknown, op: 'add' | 'replace'): Rule {
    const where = 'request body';
    const k = RULE_KINDS[kind];
    const rule = k.parse(body, where);
    const key = k.key(rule);
    const what = k.label;
    const keyName = k.keyName;
    const existing = this.#rules[kind].get(key);
    if (op === 'add' && existing !== undefined) {
      throw new RuleError(`a ${what} with ${keyName} ${key} exists already${existing.name === undefined ? '' : ` (${JSON.stringify(existing.name)})`}; replace it with PUT (mup ${k.cliVerb} replace)`, 409);
    }
    if (op === 'replace' && existing === undefined) {
      throw new RuleError(`no ${what} with ${keyName} ${key} to replace; add it with POST (mup ${k.cliVerb} add)`, 404);
    }
    if (rule.name !== undefined) {
      const owner = this.#names[kind].get(rule.name);
      if (owner !== undefined && owner !== key) {
        throw new RuleError(`name ${JSON.stringify(rule.name)} is already used by the ${what} with ${keyName} ${owner}; names must be unique`, 409);
      }
    }
    return rule;
  }

  /** Record an add or replace in the set and the overlay. */
  put(kind: RuleKind, rule: Rule): void {
    const k = RULE_KINDS[kind];
    const key = k.key(rule);
    this.#set(k, rule);
    (this.overlay[k.overlay.put] as Map<string, Rule>).set(key, rule);
    this.overlay[k.overlay.del].delete(key);
  }

  /** Record a delete (by key) in the set and the overlay. */
  delete(kind: RuleKind, key: string): void {
    const k = RULE_KINDS[kind];
    const old = this.#rules[kind].get(key);
    if (old?.name !== undefined) this.#names[kind].delete(old.name);
    this.#rules[kind].delete(key);
    this.overlay[k.overlay.put].delete(key);
    if (this.#fromConfig.has(`${kind} ${key}`)) this.overlay[k.overlay.del].add(key);
  }

  /** The effective config (settings and interfaces from the file). */
  effective(): Config {
    return { ...this.config, policies: [...this.policies.values()], localsids: [...this.localsids.values()] };
  }
}

// ---------------------------------------------------------------------------
// State file
//
// JSON lines. The first names the config the changes were made against;
// each further line is one change, appended and fdatasync'ed before the API
// answers (about 0.4 ms here, whatever the number of changes so far):
//
//   {"mup_state":2,"instance":"default","config":{"file":"/etc/mup/mup.yaml","sha256":"..."},"savedAt":"..."}
//   {"put":"policy","rule":{"match":"10.45.0.0/16","sr_prefix":"2001:db8:b::/48",...}}
//   {"del":"localsid","key":"2001:db8:2::/48"}
//
// A crash in the middle of an append leaves a last line without its
// newline: it is ignored (that change was never acknowledged). The file is
// rewritten atomically (temp file, fsync, rename, fsync of the directory)
// with just the net changes when the daemon starts or reloads, and when the
// appended lines outnumber twice the net changes (and 1,024).

export const STATE_VERSION = 2;

export interface StateHeader {
  readonly mup_state: typeof STATE_VERSION;
  readonly instance: string;
  readonly config: { readonly file: string; readonly sha256: string };
  readonly savedAt: string;
}

type StateLine = { put: RuleKind; rule: RuleJson } | { del: RuleKind; key: string };

export function sha256(text: string | Buffer): string {
  return createHash('sha256').update(text).digest('hex');
}

/** Write a file so that a crash leaves the old content or the new, never a mix: temp, fsync, rename, fsync dir. */
export function writeFileAtomic(path: string, data: string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, data, { mode: 0o600 });
  const fd = openSync(tmp, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  const dir = openSync(dirname(path), 'r');
  try {
    fsyncSync(dir);
  } finally {
    closeSync(dir);
  }
}

function overlayLines(o: Overlay): StateLine[] {
  return RULE_KIND_LIST.flatMap((k) => [
    ...[...(o[k.overlay.put] as Map<string, Rule>).values()].map((r): StateLine => ({ put: k.kind, rule: k.json(r) })),
    ...[...o[k.overlay.del]].map((key): StateLine => ({ del: k.kind, key })),
  ]);
}

/** Apply one change line to an overlay (as RuleSet.put / delete do; deletes of non-config keys are ignored later). */
function applyLine(o: Overlay, line: StateLine, where: string): void {
  if ('put' in line) {
    const k = ruleKind(line.put);
    if (k === undefined) throw new Error(`${where}: unknown table ${JSON.stringify(line.put)}`);
    const r = k.parse(line.rule, where);
    const key = k.key(r);
    (o[k.overlay.put] as Map<string, Rule>).set(key, r);
    o[k.overlay.del].delete(key);
  } else if ('del' in line && typeof line.key === 'string') {
    // An unknown kind's key is read as a local SID's, as it always was: the same message for the same bad line.
    const key = (ruleKind(line.del) ?? RULE_KINDS.localsid).canonicalKey(line.key);
    const k = ruleKind(line.del);
    if (k === undefined) throw new Error(`${where}: unknown table ${JSON.stringify(line.del)}`);
    o[k.overlay.put].delete(key);
    o[k.overlay.del].add(key);
  } else {
    throw new Error(`${where}: neither a put nor a del`);
  }
}

export class StateStore {
  #fd: number | undefined;
  /** Change lines in the file. */
  #lines = 0;

  constructor(readonly path: string) {}

  /**
   * Read the file into an overlay. Undefined when there is none; throws with
   * the file and line named when a line is invalid (the daemon then refuses
   * to start rather than guess). `torn`: a last line cut short was ignored.
   */
  read(): { header: StateHeader; overlay: Overlay; torn: boolean } | undefined {
    let text: string;
    try {
      text = readFileSync(this.path, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new Error(`cannot read the state file ${this.path}: ${(e as Error).message}`);
    }
    const aside = 'move it aside to start from the config file alone';
    const lines = text.split('\n');
    const torn = lines[lines.length - 1] !== '';
    lines.pop(); // the empty string after the last newline, or the torn line
    if (lines.length === 0) throw new Error(`state file ${this.path} is empty or cut short; ${aside}`);
    let header: StateHeader;
    try {
      header = JSON.parse(lines[0]!) as StateHeader;
    } catch (e) {
      throw new Error(`state file ${this.path}:1 is not JSON (${(e as Error).message}); ${aside}`);
    }
    if (header?.mup_state !== STATE_VERSION || typeof header.config?.sha256 !== 'string') {
      throw new Error(`state file ${this.path}: not a version ${STATE_VERSION} state file; ${aside}`);
    }
    const overlay = emptyOverlay();
    lines.slice(1).forEach((l, i) => {
      const where = `${this.path}:${i + 2}`;
      try {
        applyLine(overlay, JSON.parse(l) as StateLine, where);
      } catch (e) {
        throw new Error(`state file ${where}: ${(e as Error).message}; ${aside}`);
      }
    });
    this.#lines = lines.length - 1;
    return { header, overlay, torn };
  }

  /** Replace the file with a header and the net changes of `o` (atomic). */
  rewrite(instance: string, configFile: string, configSha: string, o: Overlay): void {
    const header: StateHeader = { mup_state: STATE_VERSION, instance, config: { file: configFile, sha256: configSha }, savedAt: new Date().toISOString() };
    const body = overlayLines(o);
    mkdirSync(dirname(this.path), { recursive: true, mode: 0o700 });
    this.close();
    writeFileAtomic(this.path, [header, ...body].map((x) => `${JSON.stringify(x)}\n`).join(''));
    this.#lines = body.length;
  }

  /** Append one change and make it durable. */
  append(line: StateLine): void {
    this.#fd ??= openSync(this.path, 'a', 0o600);
    writeSync(this.#fd, `${JSON.stringify(line)}\n`);
    fdatasyncSync(this.#fd);
    this.#lines++;
  }

  /** Appended lines beyond what the net changes need: time to rewrite. */
  wantsCompaction(o: Overlay): boolean {
    return this.#lines > 1024 && this.#lines > 2 * overlaySize(o);
  }

  close(): void {
    if (this.#fd !== undefined) closeSync(this.#fd);
    this.#fd = undefined;
  }
}
