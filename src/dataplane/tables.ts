/**
 * The loaded tables as user space keeps them in step with a config: a mirror
 * of every entry (key -> rule id and encoded value), stable rule ids (a rule
 * keeps its counter slot for as long as its key exists, across reloads and
 * daemon restarts), and the double-buffered configuration.
 *
 * What a packet can see while the tables change:
 * - An entry written with a key that already exists replaces the old one in
 *   one step (the hash map links the new element in, then unlinks the old):
 *   a lookup finds the old entry or the new one, never neither, never a mix.
 * - The kernel may hand a deleted or replaced element's memory to the very
 *   next update, while a packet that looked it up a moment earlier still
 *   reads it. So after a replace or delete, the next write first waits for
 *   an RCU grace period (synchronizeRcu), after which no packet holds it.
 * - mup_cfg has two copies; a packet reads mup_cfg_sel once and uses that
 *   copy. A write fills the other copy, flips the selector, and waits for a
 *   grace period before that copy may be written again.
 * - Prefix lengths: a rule's length is in the config before the rule is
 *   written and leaves the config only after the rule is deleted.
 */
import type { LocalSid, Policy, Settings } from '../config/types.js';
import type { Ipv4Prefix, Ipv6Prefix } from '../sid/types.js';
import {
  COUNTER_STRIDE,
  LAYOUTS,
  MUP_EVENT_SLOTS,
  MUP_MAX_PLENS,
  decodeConfig,
  encodeConfig,
  encodeLocalSid,
  encodeLocalSidKey,
  encodePolicy,
  encodePolicyKey,
  prefixLengths,
  type ConfigFields,
} from './codec.js';
import {
  BPF_ANY,
  mapDelete,
  mapKeys,
  mapLookup,
  mapUpdate,
  numPossibleCpus,
  synchronizeRcu,
} from './libbpf.js';

export const MAP_POLICIES = 'mup_policies';
export const MAP_LOCALSIDS = 'mup_localsids';
export const MAP_COUNTERS = 'mup_counters';
export const MAP_CONFIG = '.data.cfg';

/** File descriptors and offsets of a loaded object's tables. */
export interface TableFds {
  readonly policiesFd: number;
  readonly localsidsFd: number;
  readonly countersFd: number;
  /** The .data.cfg array map (one element, key 0). */
  readonly configFd: number;
  readonly configSize: number;
  /** Offsets of mup_cfgs[0] and mup_cfgs[1] inside the .data.cfg value. */
  readonly configOffsets: readonly [number, number];
  /** Offset of mup_cfg_sel. */
  readonly selOffset: number;
}

/** Table sizes, fixed at load. */
export interface TableSizes {
  readonly maxPolicies: number;
  readonly maxLocalSids: number;
}

export type TableKind = 'policy' | 'localsid';

/** A batch of changes, applied by Tables.apply in a packet-safe order. */
export interface Changes {
  readonly putPolicies?: readonly Policy[];
  readonly delPolicies?: readonly Ipv4Prefix[];
  readonly putLocalSids?: readonly LocalSid[];
  readonly delLocalSids?: readonly Ipv6Prefix[];
  /** New global settings (forwarding, hash seed, ports); table sizes must not change. */
  readonly settings?: Settings;
}

export interface ApplyResult {
  readonly added: number;
  readonly replaced: number;
  readonly deleted: number;
  readonly unchanged: number;
}

interface Entry {
  readonly rule: number;
  /** Encoded value, latin1 (one byte per char: compact in V8). */
  readonly value: string;
  readonly plen: number;
}

/** Free rule ids of one table, lowest first. */
class IdPool {
  readonly #free: number[] = [];
  constructor(first: number, count: number, used: ReadonlySet<number>) {
    for (let id = first + count - 1; id >= first; id--) if (!used.has(id)) this.#free.push(id);
  }
  take(): number | undefined {
    return this.#free.pop();
  }
  give(ids: readonly number[]): void {
    // Keep lowest-first order for the common case of one id.
    for (const id of [...ids].sort((a, b) => b - a)) this.#free.push(id);
  }
  get size(): number {
    return this.#free.length;
  }
}

export class TablesFullError extends RangeError {
  override readonly name = 'TablesFullError';
}

export class Tables {
  readonly #fds: TableFds;
  readonly sizes: TableSizes;
  readonly #ncpus = numPossibleCpus();
  readonly #policies = new Map<string, Entry>();
  readonly #localsids = new Map<string, Entry>();
  readonly #policyIds: IdPool;
  readonly #localsidIds: IdPool;
  /** A replace or delete happened since the last grace period. */
  #dirty = false;
  #settings: Settings;

  /**
   * Take over tables as they are (freshly created and empty, or pinned and
   * filled by an earlier run): reads every entry into the mirror.
   */
  constructor(fds: TableFds, sizes: TableSizes, settings: Settings) {
    this.#fds = fds;
    this.sizes = sizes;
    this.#settings = settings;
    const used = new Set<number>();
    for (const [kind, fd, size, valueSize, mirror] of [
      ['policy', fds.policiesFd, LAYOUTS.mup_policy_key.size, LAYOUTS.mup_policy.size, this.#policies],
      ['localsid', fds.localsidsFd, LAYOUTS.mup_localsid_key.size, LAYOUTS.mup_localsid.size, this.#localsids],
    ] as const) {
      const name = kind === 'policy' ? MAP_POLICIES : MAP_LOCALSIDS;
      for (const k of mapKeys(fd, size, name)) {
        const v = mapLookup(fd, k, valueSize, name);
        if (v === undefined) continue;
        const rule = v.readUInt32LE(kind === 'policy' ? LAYOUTS.mup_policy.members.rule.offset : LAYOUTS.mup_localsid.members.rule.offset);
        const [lo, hi] = kind === 'policy' ? [0, sizes.maxPolicies] : [sizes.maxPolicies, sizes.maxPolicies + sizes.maxLocalSids];
        if (rule < lo || rule >= hi || used.has(rule)) {
          // Not one of ours, or a table from another layout: rewrite it with a fresh id.
          mirror.set(k.toString('latin1'), { rule: -1, value: '', plen: k.readUInt32LE(0) });
          continue;
        }
        used.add(rule);
        mirror.set(k.toString('latin1'), { rule, value: v.toString('latin1'), plen: k.readUInt32LE(0) });
      }
    }
    this.#policyIds = new IdPool(0, sizes.maxPolicies, used);
    this.#localsidIds = new IdPool(sizes.maxPolicies, sizes.maxLocalSids, used);
  }

  get settings(): Settings {
    return this.#settings;
  }

  /** Number of counter slots the tables need: events, then one per rule. */
  static counterSlots(sizes: TableSizes): number {
    return MUP_EVENT_SLOTS + sizes.maxPolicies + sizes.maxLocalSids;
  }

  get policyCount(): number {
    return this.#policies.size;
  }

  get localsidCount(): number {
    return this.#localsids.size;
  }

  /** Rule id of the policy with this match prefix, if present. */
  policyRule(match: Ipv4Prefix): number | undefined {
    return this.#policies.get(encodePolicyKey(match).toString('latin1'))?.rule;
  }

  localsidRule(sid: Ipv6Prefix): number | undefined {
    return this.#localsids.get(encodeLocalSidKey(sid).toString('latin1'))?.rule;
  }

  /**
   * Make the tables hold exactly `policies` and `localsids` (by key), with
   * `settings`: writes only what differs. Throws before writing anything
   * when the result would not fit.
   */
  sync(settings: Settings, policies: readonly Policy[], localsids: readonly LocalSid[]): ApplyResult {
    const keepP = new Set(policies.map((p) => encodePolicyKey(p.match).toString('latin1')));
    const keepL = new Set(localsids.map((l) => encodeLocalSidKey(l.sid).toString('latin1')));
    const delP: Buffer[] = [];
    const delL: Buffer[] = [];
    for (const k of this.#policies.keys()) if (!keepP.has(k)) delP.push(Buffer.from(k, 'latin1'));
    for (const k of this.#localsids.keys()) if (!keepL.has(k)) delL.push(Buffer.from(k, 'latin1'));
    return this.#apply(settings, policies, delP, localsids, delL);
  }

  /** Apply a batch of puts (add or replace, by key) and deletes (by key). */
  apply(c: Changes): ApplyResult {
    return this.#apply(
      c.settings ?? this.#settings,
      c.putPolicies ?? [],
      (c.delPolicies ?? []).map((m) => encodePolicyKey(m)),
      c.putLocalSids ?? [],
      (c.delLocalSids ?? []).map((s) => encodeLocalSidKey(s)),
    );
  }

  #apply(
    settings: Settings,
    putP: readonly Policy[],
    delP: readonly Buffer[],
    putL: readonly LocalSid[],
    delL: readonly Buffer[],
  ): ApplyResult {
    if (settings.maxPolicies !== this.sizes.maxPolicies || settings.maxLocalSids !== this.sizes.maxLocalSids) {
      throw new RangeError(
        `table sizes are fixed once loaded (max_policies ${this.sizes.maxPolicies}, max_localsids ${this.sizes.maxLocalSids}); ` +
          'restart the data plane with --replace-tables to change them',
      );
    }
    // Plan everything first, so that a batch that does not fit writes nothing.
    const planP = this.#plan(putP.map((p) => ({ key: encodePolicyKey(p.match), plen: p.match.len, enc: (r: number) => encodePolicy(p, r) })), delP, this.#policies, this.#policyIds, 'policies', 'max_policies', this.sizes.maxPolicies);
    const planL = this.#plan(putL.map((l) => ({ key: encodeLocalSidKey(l.sid), plen: l.sid.len, enc: (r: number) => encodeLocalSid(l, r) })), delL, this.#localsids, this.#localsidIds, 'local SIDs', 'max_localsids', this.sizes.maxLocalSids);
    const before = this.#fields(this.#settings, this.#plens(this.#policies), this.#plens(this.#localsids));
    const after = this.#fields(settings, planP.plensAfter, planL.plensAfter);
    const widened: ConfigFields = {
      ...after,
      policyPlens: union(before.policyPlens, after.policyPlens),
      localsidPlens: union(before.localsidPlens, after.localsidPlens),
    };

    let added = 0;
    let replaced = 0;
    let unchanged = 0;
    // 1. New and changed entries. A new rule's counter slot starts at zero.
    for (const [plan, fd, mirror, name] of [
      [planP, this.#fds.policiesFd, this.#policies, MAP_POLICIES],
      [planL, this.#fds.localsidsFd, this.#localsids, MAP_LOCALSIDS],
    ] as const) {
      unchanged += plan.unchanged;
      for (const w of plan.writes) {
        this.#settle();
        if (w.fresh) this.#zeroCounter(w.rule);
        mapUpdate(fd, w.key, w.value, BPF_ANY, name);
        mirror.set(w.key.toString('latin1'), { rule: w.rule, value: w.value.toString('latin1'), plen: w.plen });
        if (w.fresh) added++;
        else {
          replaced++;
          this.#dirty = true;
        }
      }
    }
    // 2. The config with old and new prefix lengths.
    if (!sameFields(before, widened)) this.#writeConfig(widened);
    // 3. Stale entries.
    let deleted = 0;
    const freedP: number[] = [];
    const freedL: number[] = [];
    for (const [plan, fd, mirror, name, freed] of [
      [planP, this.#fds.policiesFd, this.#policies, MAP_POLICIES, freedP],
      [planL, this.#fds.localsidsFd, this.#localsids, MAP_LOCALSIDS, freedL],
    ] as const) {
      for (const k of plan.deletes) {
        this.#settle();
        const s = k.toString('latin1');
        const e = mirror.get(s);
        mapDelete(fd, k, name);
        mirror.delete(s);
        this.#dirty = true;
        deleted++;
        if (e !== undefined && e.rule >= 0) freed.push(e.rule);
      }
    }
    // 4. The config with the new lengths only.
    if (!sameFields(widened, after)) this.#writeConfig(after);
    this.#settings = settings;
    // 5. No packet holds a deleted entry any more: its id may be reused.
    this.#settle();
    this.#policyIds.give(freedP);
    this.#localsidIds.give(freedL);
    return { added, replaced, deleted, unchanged };
  }

  #plan(
    puts: readonly { key: Buffer; plen: number; enc: (rule: number) => Buffer }[],
    dels: readonly Buffer[],
    mirror: ReadonlyMap<string, Entry>,
    ids: IdPool,
    what: string,
    setting: string,
    max: number,
  ): {
    writes: { key: Buffer; value: Buffer; rule: number; fresh: boolean; plen: number }[];
    deletes: Buffer[];
    unchanged: number;
    plensAfter: number[];
  } {
    const writes: { key: Buffer; value: Buffer; rule: number; fresh: boolean; plen: number }[] = [];
    const putKeys = new Set<string>();
    const taken: number[] = [];
    let unchanged = 0;
    try {
      for (const p of puts) {
        const k = p.key.toString('latin1');
        if (putKeys.has(k)) throw new RangeError(`the same ${what} key is given twice in one change`);
        putKeys.add(k);
        const old = mirror.get(k);
        let rule = old !== undefined && old.rule >= 0 ? old.rule : undefined;
        const fresh = rule === undefined;
        if (rule === undefined) {
          rule = ids.take();
          if (rule === undefined) {
            throw new TablesFullError(`the ${what} table is full (settings.${setting} = ${max}); delete entries, or raise settings.${setting} and restart with --replace-tables`);
          }
          taken.push(rule);
        }
        const value = p.enc(rule);
        if (!fresh && old?.value === value.toString('latin1')) {
          unchanged++;
          continue;
        }
        writes.push({ key: p.key, value, rule, fresh, plen: p.plen });
      }
    } catch (e) {
      ids.give(taken);
      throw e;
    }
    const deletes = dels.filter((k) => mirror.has(k.toString('latin1')) && !putKeys.has(k.toString('latin1')));
    const delSet = new Set(deletes.map((k) => k.toString('latin1')));
    const lens = new Set<number>();
    for (const [k, e] of mirror) if (!delSet.has(k)) lens.add(e.plen);
    for (const w of writes) lens.add(w.plen);
    const plensAfter = [...lens].sort((a, b) => b - a);
    if (plensAfter.length > MUP_MAX_PLENS) {
      ids.give(taken);
      throw new RangeError(
        `${what} would use ${plensAfter.length} distinct prefix lengths (${plensAfter.map((l) => `/${l}`).join(' ')}); ` +
          `the data path supports at most ${MUP_MAX_PLENS}: use fewer distinct lengths`,
      );
    }
    return { writes, deletes, unchanged, plensAfter };
  }

  #plens(mirror: ReadonlyMap<string, Entry>): number[] {
    const lens = new Set<number>();
    for (const e of mirror.values()) lens.add(e.plen);
    return [...lens].sort((a, b) => b - a);
  }

  #fields(s: Settings, policyPlens: readonly number[], localsidPlens: readonly number[]): ConfigFields {
    return {
      forwarding: s.forwarding,
      hashSeed: s.hashSeed,
      sportBase: s.sourcePortMin,
      sportSpan: s.sourcePortMax - s.sourcePortMin + 1,
      policyPlens: prefixLengths(policyPlens, 'policies'),
      localsidPlens: prefixLengths(localsidPlens, 'localsids'),
    };
  }

  /** Wait for a grace period if a replace or delete happened since the last one. */
  #settle(): void {
    if (!this.#dirty) return;
    synchronizeRcu();
    this.#dirty = false;
  }

  #zeroCounter(rule: number): void {
    const key = Buffer.alloc(4);
    key.writeUInt32LE(MUP_EVENT_SLOTS + rule);
    mapUpdate(this.#fds.countersFd, key, Buffer.alloc(COUNTER_STRIDE * this.#ncpus), BPF_ANY, MAP_COUNTERS);
  }

  /** The configuration the program reads now. */
  readConfig(): ConfigFields {
    const cur = this.#readCfgValue();
    const sel = cur.readUInt32LE(this.#fds.selOffset) & 1;
    return decodeConfig(cur, this.#fds.configOffsets[sel]);
  }

  #readCfgValue(): Buffer {
    return mapLookup(this.#fds.configFd, Buffer.alloc(4), this.#fds.configSize, MAP_CONFIG) ?? Buffer.alloc(this.#fds.configSize);
  }

  /** Write the idle copy, flip the selector, wait until no packet uses the old copy. */
  #writeConfig(f: ConfigFields): void {
    const key0 = Buffer.alloc(4);
    const cur = this.#readCfgValue();
    const sel = cur.readUInt32LE(this.#fds.selOffset) & 1;
    const next = sel ^ 1;
    encodeConfig(f, cur, this.#fds.configOffsets[next]);
    // The active copy and the selector are rewritten with the bytes they hold.
    mapUpdate(this.#fds.configFd, key0, cur, BPF_ANY, MAP_CONFIG);
    cur.writeUInt32LE(next, this.#fds.selOffset);
    mapUpdate(this.#fds.configFd, key0, cur, BPF_ANY, MAP_CONFIG);
    synchronizeRcu();
  }

  /** Write the settings to the config even if nothing else changed (after load). */
  writeSettings(settings: Settings): void {
    this.#settings = settings;
    this.#writeConfig(this.#fields(settings, this.#plens(this.#policies), this.#plens(this.#localsids)));
  }

  /** Rule ids in use, per table. */
  rules(kind: TableKind): { key: Buffer; rule: number }[] {
    const m = kind === 'policy' ? this.#policies : this.#localsids;
    return [...m].map(([k, e]) => ({ key: Buffer.from(k, 'latin1'), rule: e.rule }));
  }
}

function union(a: readonly number[], b: readonly number[]): readonly number[] {
  const all = [...new Set([...a, ...b])].sort((x, y) => y - x);
  // More than the program looks up: a length that goes away may miss for a moment.
  return all.length > MUP_MAX_PLENS ? b : all;
}

function sameFields(a: ConfigFields, b: ConfigFields): boolean {
  return (
    a.forwarding === b.forwarding &&
    a.hashSeed === b.hashSeed &&
    a.sportBase === b.sportBase &&
    a.sportSpan === b.sportSpan &&
    a.policyPlens.join() === b.policyPlens.join() &&
    a.localsidPlens.join() === b.localsidPlens.join()
  );
}
