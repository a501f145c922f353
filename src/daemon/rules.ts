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
import { localSidKey, policyKey } from '../config/keys.js';
import type { Config, LocalSid, Policy } from '../config/types.js';
import { formatIpv4Prefix, formatIpv6, formatIpv6Prefix, parseIpv4Prefix, parseIpv6Prefix } from '../sid/addr.js';

export type RuleKind = 'policy' | 'localsid';

/** A rule as the config file and the API spell it (snake_case keys). */
export type RuleJson = Record<string, unknown>;

export function policyJson(p: Policy): RuleJson {
  return {
    ...(p.name === undefined ? {} : { name: p.name }),
    match: policyKey(p),
    sr_prefix: formatIpv6Prefix(p.srPrefix),
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
  return o.policies.size + o.delPolicies.size + o.localsids.size + o.delLocalSids.size;
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
  return kind === 'policy' ? formatIpv4Prefix(parseIpv4Prefix(text, 'match')) : formatIpv6Prefix(parseIpv6Prefix(text, 'sid'));
}

/**
 * The effective rule set: config rules with the overlay applied, indexed by
 * key and by name, in a stable order (config order, then API additions).
 */
export class RuleSet {
  readonly policies = new Map<string, Policy>();
  readonly localsids = new Map<string, LocalSid>();
  readonly #policyNames = new Map<string, string>();
  readonly #localsidNames = new Map<string, string>();
  /** Keys that come from the config file (for `source` in listings). */
  readonly #fromConfig = new Set<string>();

  constructor(
    readonly config: Config,
    readonly overlay: Overlay,
  ) {
    for (const p of config.policies) this.#fromConfig.add(`p ${policyKey(p)}`);
    for (const l of config.localsids) this.#fromConfig.add(`l ${localSidKey(l)}`);
    for (const p of config.policies) {
      const k = policyKey(p);
      if (!overlay.delPolicies.has(k)) this.#setPolicy(overlay.policies.get(k) ?? p);
    }
    for (const [k, p] of overlay.policies) if (!this.policies.has(k)) this.#setPolicy(p);
    for (const l of config.localsids) {
      const k = localSidKey(l);
      if (!overlay.delLocalSids.has(k)) this.#setLocalSid(overlay.localsids.get(k) ?? l);
    }
    for (const [k, l] of overlay.localsids) if (!this.localsids.has(k)) this.#setLocalSid(l);
    // The overlay was checked rule by rule when it was made; the whole must
    // still hold together (names unique across file and API, lengths). The
    // file alone was checked when it was read.
    if (overlaySize(overlay) > 0) {
      checkRuleSet('the config with the state file applied', [...this.policies.values()], [...this.localsids.values()]);
    }
  }

  source(kind: RuleKind, key: string): 'config' | 'api' {
    const overlaid = kind === 'policy' ? this.overlay.policies.has(key) : this.overlay.localsids.has(key);
    return this.#fromConfig.has(`${kind === 'policy' ? 'p' : 'l'} ${key}`) && !overlaid ? 'config' : 'api';
  }

  #setPolicy(p: Policy): void {
    const k = policyKey(p);
    const old = this.policies.get(k);
    if (old?.name !== undefined) this.#policyNames.delete(old.name);
    this.policies.set(k, p);
    if (p.name !== undefined) this.#policyNames.set(p.name, k);
  }

  #setLocalSid(l: LocalSid): void {
    const k = localSidKey(l);
    const old = this.localsids.get(k);
    if (old?.name !== undefined) this.#localsidNames.delete(old.name);
    this.localsids.set(k, l);
    if (l.name !== undefined) this.#localsidNames.set(l.name, k);
  }

  /** Key of the rule called `name`, or of the rule with key `key`. */
  find(kind: RuleKind, by: { key?: string; name?: string }): string | undefined {
    if (by.name !== undefined) return (kind === 'policy' ? this.#policyNames : this.#localsidNames).get(by.name);
    if (by.key === undefined) return undefined;
    const k = canonicalKey(kind, by.key);
    return (kind === 'policy' ? this.policies.has(k) : this.localsids.has(k)) ? k : undefined;
  }

  /** Validate an API rule (as the file's entries are) and check it against the set for add or replace. */
  check(kind: RuleKind, body: unknown, op: 'add' | 'replace'): Policy | LocalSid {
    const where = 'request body';
    const rule = kind === 'policy' ? parsePolicyEntry(body, where) : parseLocalSidEntry(body, where);
    const key = kind === 'policy' ? policyKey(rule as Policy) : localSidKey(rule as LocalSid);
    const table = kind === 'policy' ? this.policies : this.localsids;
    const names = kind === 'policy' ? this.#policyNames : this.#localsidNames;
    const what = kind === 'policy' ? 'policy' : 'local SID';
    const keyName = kind === 'policy' ? 'match' : 'sid';
    const existing = table.get(key);
    if (op === 'add' && existing !== undefined) {
      throw new RuleError(`a ${what} with ${keyName} ${key} exists already${existing.name === undefined ? '' : ` (${JSON.stringify(existing.name)})`}; replace it with PUT (mup ${kind === 'policy' ? 'policy' : 'sid'} replace)`, 409);
    }
    if (op === 'replace' && existing === undefined) {
      throw new RuleError(`no ${what} with ${keyName} ${key} to replace; add it with POST (mup ${kind === 'policy' ? 'policy' : 'sid'} add)`, 404);
    }
    if (rule.name !== undefined) {
      const owner = names.get(rule.name);
      if (owner !== undefined && owner !== key) {
        throw new RuleError(`name ${JSON.stringify(rule.name)} is already used by the ${what} with ${keyName} ${owner}; names must be unique`, 409);
      }
    }
    return rule;
  }

  /** Record an add or replace in the set and the overlay. */
  put(kind: RuleKind, rule: Policy | LocalSid): void {
    if (kind === 'policy') {
      const p = rule as Policy;
      const k = policyKey(p);
      this.#setPolicy(p);
      this.overlay.policies.set(k, p);
      this.overlay.delPolicies.delete(k);
    } else {
      const l = rule as LocalSid;
      const k = localSidKey(l);
      this.#setLocalSid(l);
      this.overlay.localsids.set(k, l);
      this.overlay.delLocalSids.delete(k);
    }
  }

  /** Record a delete (by key) in the set and the overlay. */
  delete(kind: RuleKind, key: string): void {
    if (kind === 'policy') {
      const old = this.policies.get(key);
      if (old?.name !== undefined) this.#policyNames.delete(old.name);
      this.policies.delete(key);
      this.overlay.policies.delete(key);
      if (this.#fromConfig.has(`p ${key}`)) this.overlay.delPolicies.add(key);
    } else {
      const old = this.localsids.get(key);
      if (old?.name !== undefined) this.#localsidNames.delete(old.name);
      this.localsids.delete(key);
      this.overlay.localsids.delete(key);
      if (this.#fromConfig.has(`l ${key}`)) this.overlay.delLocalSids.add(key);
    }
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
  return [
    ...[...o.policies.values()].map((p): StateLine => ({ put: 'policy', rule: policyJson(p) })),
    ...[...o.delPolicies].map((key): StateLine => ({ del: 'policy', key })),
    ...[...o.localsids.values()].map((l): StateLine => ({ put: 'localsid', rule: localSidJson(l) })),
    ...[...o.delLocalSids].map((key): StateLine => ({ del: 'localsid', key })),
  ];
}

/** Apply one change line to an overlay (as RuleSet.put / delete do; deletes of non-config keys are ignored later). */
function applyLine(o: Overlay, line: StateLine, where: string): void {
  if ('put' in line) {
    if (line.put === 'policy') {
      const p = parsePolicyEntry(line.rule, where);
      const k = policyKey(p);
      o.policies.set(k, p);
      o.delPolicies.delete(k);
    } else if (line.put === 'localsid') {
      const l = parseLocalSidEntry(line.rule, where);
      const k = localSidKey(l);
      o.localsids.set(k, l);
      o.delLocalSids.delete(k);
    } else {
      throw new Error(`${where}: unknown table ${JSON.stringify(line.put)}`);
    }
  } else if ('del' in line && typeof line.key === 'string') {
    const k = canonicalKey(line.del, line.key);
    if (line.del === 'policy') {
      o.policies.delete(k);
      o.delPolicies.add(k);
    } else if (line.del === 'localsid') {
      o.localsids.delete(k);
      o.delLocalSids.add(k);
    } else {
      throw new Error(`${where}: unknown table ${JSON.stringify(line.del)}`);
    }
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
