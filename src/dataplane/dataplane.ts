/**
 * The loaded data plane: open build/mup.bpf.o, size its maps and write its
 * configuration from a Config, load it, check its layouts against the codec,
 * fill the tables; then run frames through it (BPF_PROG_TEST_RUN) and read
 * its counters; attach it to interfaces (in other network namespaces too).
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Config } from '../config/types.js';
import { checkLayouts, eventNames } from './btf.js';
import {
  COUNTER_STRIDE,
  MUP_EVENT_SLOTS,
  configFields,
  decodeConfig,
  decodePercpuCounter,
  encodeConfig,
  encodeLocalSid,
  encodeLocalSidKey,
  encodePolicy,
  encodePolicyKey,
  MUP_MAX_PLENS,
  LAYOUTS,
  type CounterValue,
} from './codec.js';
import {
  BPF_ANY,
  btfDatasecVar,
  findMap,
  findProgram,
  mapDelete,
  mapFd,
  mapKeys,
  mapLookup,
  mapLookupArrayRange,
  mapSetInitialValue,
  mapSetMaxEntries,
  mapUpdate,
  mapValueSize,
  numPossibleCpus,
  objectBtf,
  objectClose,
  objectLoad,
  objectOpen,
  programFd,
  testRun,
  xdpAttach,
  xdpDetachProgram,
  XDP_FLAGS_DRV_MODE,
  XDP_FLAGS_SKB_MODE,
  XDP_FLAGS_UPDATE_IF_NOEXIST,
  type BpfObject,
} from './libbpf.js';
import { ifIndex, inNetns, NetnsError } from './netns.js';

/** <repo>/build/mup.bpf.o, from src/dataplane or dist/dataplane alike. */
export const DEFAULT_OBJECT = fileURLToPath(new URL('../../build/mup.bpf.o', import.meta.url));

export const PROGRAM_NAME = 'mup_xdp';
export const MAP_POLICIES = 'mup_policies';
export const MAP_LOCALSIDS = 'mup_localsids';
export const MAP_COUNTERS = 'mup_counters';
export const MAP_CONFIG = '.data.cfg';
export const CONFIG_VAR = 'mup_cfg';
/** The shortest frame BPF_PROG_TEST_RUN accepts for XDP (an Ethernet header); shorter ones get EINVAL. */
export const ETH_HLEN = 14;
/**
 * The largest frame BPF_PROG_TEST_RUN hands whole to a plain `xdp` (not
 * `xdp.frags`) program: one 4 KiB page minus 256 bytes of XDP headroom minus
 * 320 bytes of skb_shared_info (x86-64, 4 KiB pages). Of a larger frame the
 * program sees only the first 3,520 bytes, and judges it on those (a valid
 * G-PDU comes back as drop_v4_truncated): measured on Linux 6.18 with
 * dp.run, 3,520 bytes translate and 3,521 do not. run() refuses such frames.
 */
export const TEST_RUN_MAX_FRAME = 3520;

/** The BPF object file is not there. */
export class ObjectNotFoundError extends Error {
  override readonly name = 'ObjectNotFoundError';
  constructor(readonly object: string) {
    super(`${object} not found: build it with \`make\` (or \`make bpf\`), or pass --object PATH`);
  }
}

export type Verdict = 'aborted' | 'drop' | 'pass' | 'tx' | 'redirect';
/** XDP return codes 0..4. */
export const VERDICTS: readonly Verdict[] = ['aborted', 'drop', 'pass', 'tx', 'redirect'];

export interface RunResult {
  readonly verdict: Verdict;
  /** Event counted for this frame (e.g. "fwd_tx", "drop_gtp_ext_zero"); null if none was. */
  readonly event: string | null;
  /** The frame as the program left it (data_out). */
  readonly out: Buffer;
  /** ns, as measured by the kernel for this single run. */
  readonly duration: number;
}

export interface RuleCounter extends CounterValue {
  readonly rule: number;
  readonly kind: 'policy' | 'localsid';
  /** Key path of the rule in the config, e.g. "policies[3]". */
  readonly where: string;
}

export interface Counters {
  /** Every event of enum mup_event, zeros included. */
  readonly events: Record<string, CounterValue>;
  /** Configured rules, policies first. */
  readonly rules: RuleCounter[];
  /** Translated packets per function: the sum of its rules. */
  readonly functions: Record<TranslationFunction, CounterValue>;
}

/** H.M.GTP4.D (policies) and the local SID behaviours. */
export type TranslationFunction = 'h_m_gtp4_d' | 'end_m_gtp4_e' | 'end_m_gtp6_e' | 'end_m_gtp6_d' | 'end_m_gtp6_d_di';

/**
 * XDP attach mode. native: in the driver, the fast path (veth supports it).
 * generic: after the kernel has built an skb, for drivers without XDP
 * support; much slower. Native is the default; generic must be asked for.
 */
export type XdpMode = 'native' | 'generic';

export interface AttachOptions {
  /** Network namespace (`ip netns` name) of the interface; default: the caller's. */
  readonly netns?: string;
  /** Default 'native'. */
  readonly mode?: XdpMode;
}

/** An interface this data plane's program is attached to. */
export interface Attachment {
  readonly ifname: string;
  readonly netns?: string;
  /** Index inside `netns`. */
  readonly ifindex: number;
  readonly mode: XdpMode;
}

export interface DataplaneOptions {
  /** Default: DEFAULT_OBJECT. */
  readonly object?: string;
  readonly config: Config;
}

export interface Dataplane {
  readonly object: string;
  readonly config: Config;
  readonly progFd: number;
  /** Counter slot -> event name, from the object's BTF. */
  readonly events: ReadonlyMap<number, string>;
  readonly tables: Tables;
  /**
   * Make the loaded tables and mup_cfg follow a new config (see syncTables).
   * Table sizes are fixed at load: a config with other max_policies /
   * max_localsids needs a new openDataplane().
   */
  sync(config: Config): void;
  /**
   * One BPF_PROG_TEST_RUN of the frame, repeat 1. Throws RangeError for a
   * frame shorter than ETH_HLEN or longer than TEST_RUN_MAX_FRAME bytes.
   */
  run(frame: Buffer): RunResult;
  counters(): Counters;
  /**
   * Attach the program to interface `ifname` (in namespace `netns`, entered
   * with setns() on this thread). Refuses (EBUSY) when an XDP program of that
   * mode is already attached: detach it first.
   */
  attach(ifname: string, o?: AttachOptions): Attachment;
  /**
   * Detach from an interface attached with attach(), only if our program is
   * still the one attached there. An interface or namespace that is gone
   * took the attachment with it: not an error.
   */
  detach(ifname: string, o?: { readonly netns?: string }): void;
  /** Current attachments, in attach order. */
  readonly attachments: readonly Attachment[];
  /** Detach everything attached with attach(), then unload (closes every fd). Idempotent. */
  close(): void;
}

/** Where the tables and the configuration of a loaded object live. */
export interface Tables {
  readonly policiesFd: number;
  readonly localsidsFd: number;
  readonly countersFd: number;
  /** The .data.cfg array map (one element, key 0) and mup_cfg's offset inside it. */
  readonly configFd: number;
  readonly configSize: number;
  readonly configOffset: number;
}

export function counterSlots(config: Config): number {
  return MUP_EVENT_SLOTS + config.settings.maxPolicies + config.settings.maxLocalSids;
}

/** Rule id of policy i and local SID j (docs/datapath.md). */
export function policyRule(i: number): number {
  return i;
}
export function localSidRule(config: Config, j: number): number {
  return config.settings.maxPolicies + j;
}

export function openDataplane(o: DataplaneOptions): Dataplane {
  const file = o.object ?? DEFAULT_OBJECT;
  if (!existsSync(file)) throw new ObjectNotFoundError(file);
  const { config } = o;
  const s = config.settings;
  checkTableSizes(config);

  const obj = objectOpen(file);
  try {
    checkLayouts(obj, file);
    const events = eventNames(obj, file);

    mapSetMaxEntries(findMap(obj, MAP_POLICIES), s.maxPolicies, MAP_POLICIES);
    mapSetMaxEntries(findMap(obj, MAP_LOCALSIDS), s.maxLocalSids, MAP_LOCALSIDS);
    mapSetMaxEntries(findMap(obj, MAP_COUNTERS), counterSlots(config), MAP_COUNTERS);

    const cfgMap = findMap(obj, MAP_CONFIG);
    const configSize = mapValueSize(cfgMap);
    const configOffset = btfDatasecVar(objectBtf(obj), MAP_CONFIG, CONFIG_VAR)?.offset ?? 0;
    if (configOffset + LAYOUTS.mup_config.size > configSize) {
      throw new Error(`${file}: ${MAP_CONFIG} is ${configSize} bytes, too small for ${CONFIG_VAR} at offset ${configOffset}`);
    }
    const initial = Buffer.alloc(configSize);
    encodeConfig(configFields(s, config.policies, config.localsids), initial, configOffset);
    mapSetInitialValue(cfgMap, initial, MAP_CONFIG);

    objectLoad(obj, file);

    const progFd = programFd(findProgram(obj, PROGRAM_NAME), PROGRAM_NAME);
    const tables: Tables = {
      policiesFd: mapFd(findMap(obj, MAP_POLICIES), MAP_POLICIES),
      localsidsFd: mapFd(findMap(obj, MAP_LOCALSIDS), MAP_LOCALSIDS),
      countersFd: mapFd(findMap(obj, MAP_COUNTERS), MAP_COUNTERS),
      configFd: mapFd(cfgMap, MAP_CONFIG),
      configSize,
      configOffset,
    };
    syncTables(tables, config);
    return new LoadedDataplane(file, config, obj, progFd, events, tables);
  } catch (e) {
    objectClose(obj);
    throw e;
  }
}

/** Config validation refuses this; a Config built in code (benchmarks, tests) might not. */
function checkTableSizes(config: Config): void {
  const s = config.settings;
  if (config.policies.length > s.maxPolicies || config.localsids.length > s.maxLocalSids) {
    throw new RangeError(
      `${config.file}: ${config.policies.length} policies / ${config.localsids.length} local SIDs do not fit ` +
        `settings.max_policies = ${s.maxPolicies} / max_localsids = ${s.maxLocalSids}: raise the settings`,
    );
  }
}

interface Entry {
  readonly key: Buffer;
  readonly value: Buffer;
  readonly where: string;
}

function entries(list: readonly { key: Buffer; value: Buffer; where: string }[], what: string): Map<string, Entry> {
  const out = new Map<string, Entry>();
  for (const e of list) {
    const k = e.key.toString('hex');
    const prev = out.get(k);
    if (prev !== undefined) throw new RangeError(`${e.where}: same ${what} as ${prev.where}`);
    out.set(k, e);
  }
  return out;
}

/**
 * Make the tables and mup_cfg equal to `config`, without a window where a
 * rule present before and after is missed: write every entry, widen the
 * prefix-length lists to old ∪ new, delete stale entries, then narrow the
 * lists to the new lengths. Forwarding mode, hash seed and source ports are
 * written with the lists.
 */
export function syncTables(t: Tables, config: Config): void {
  checkTableSizes(config);
  const policies = entries(
    config.policies.map((p, i) => ({ key: encodePolicyKey(p.match), value: encodePolicy(p, policyRule(i)), where: p.where })),
    'match prefix',
  );
  const localsids = entries(
    config.localsids.map((l, j) => ({
      key: encodeLocalSidKey(l.sid),
      value: encodeLocalSid(l, localSidRule(config, j)),
      where: l.where,
    })),
    'SID prefix',
  );
  const wanted = configFields(config.settings, config.policies, config.localsids);

  for (const e of policies.values()) mapUpdate(t.policiesFd, e.key, e.value, BPF_ANY, `${MAP_POLICIES} (${e.where})`);
  for (const e of localsids.values()) mapUpdate(t.localsidsFd, e.key, e.value, BPF_ANY, `${MAP_LOCALSIDS} (${e.where})`);

  const key0 = Buffer.alloc(4);
  const current = mapLookup(t.configFd, key0, t.configSize, MAP_CONFIG) ?? Buffer.alloc(t.configSize);
  const old = decodeConfig(current, t.configOffset);
  // Old and new lengths together, unless that is more than the program
  // looks up: then a rule whose length goes away may miss for a moment.
  const union = (a: readonly number[], b: readonly number[]): readonly number[] => {
    const all = [...new Set([...a, ...b])].sort((x, y) => y - x);
    return all.length > MUP_MAX_PLENS ? b : all;
  };
  const widened = {
    ...wanted,
    policyPlens: union(old.policyPlens, wanted.policyPlens),
    localsidPlens: union(old.localsidPlens, wanted.localsidPlens),
  };
  mapUpdate(t.configFd, key0, encodeConfig(widened, current, t.configOffset), BPF_ANY, MAP_CONFIG);

  for (const [fd, keep, size, name] of [
    [t.policiesFd, policies, LAYOUTS.mup_policy_key.size, MAP_POLICIES],
    [t.localsidsFd, localsids, LAYOUTS.mup_localsid_key.size, MAP_LOCALSIDS],
  ] as const) {
    for (const k of mapKeys(fd, size, name)) if (!keep.has(k.toString('hex'))) mapDelete(fd, k, name);
  }

  mapUpdate(t.configFd, key0, encodeConfig(wanted, current, t.configOffset), BPF_ANY, MAP_CONFIG);
}

const XDP_MODE_FLAGS: Record<XdpMode, number> = { native: XDP_FLAGS_DRV_MODE, generic: XDP_FLAGS_SKB_MODE };

function attachmentKey(ifname: string, netns: string | undefined): string {
  return `${netns ?? ''}\0${ifname}`;
}

function describeIf(ifname: string, netns: string | undefined): string {
  return netns === undefined ? ifname : `${ifname} in network namespace ${netns}`;
}

/** The interface (or its namespace) no longer exists, so neither does the attachment. */
function isGone(e: unknown): boolean {
  return e instanceof NetnsError && (e.code === 'ENOENT' || e.code === 'ENODEV');
}

class LoadedDataplane implements Dataplane {
  readonly #obj: BpfObject;
  readonly #ncpus = numPossibleCpus();
  readonly #attached = new Map<string, Attachment>();
  #closed = false;

  #config: Config;

  constructor(
    readonly object: string,
    config: Config,
    obj: BpfObject,
    readonly progFd: number,
    readonly events: ReadonlyMap<number, string>,
    readonly tables: Tables,
  ) {
    this.#obj = obj;
    this.#config = config;
  }

  get config(): Config {
    return this.#config;
  }

  sync(config: Config): void {
    this.#open();
    const was = this.#config.settings;
    const now = config.settings;
    if (was.maxPolicies !== now.maxPolicies || was.maxLocalSids !== now.maxLocalSids) {
      throw new RangeError(
        `table sizes are fixed once loaded (max_policies ${was.maxPolicies}, max_localsids ${was.maxLocalSids}); ` +
          'reload the data plane to change them',
      );
    }
    syncTables(this.tables, config);
    this.#config = config;
  }

  #open(): void {
    if (this.#closed) throw new Error(`the data plane of ${this.object} is closed`);
  }

  #slotName(slot: number): string {
    return this.events.get(slot) ?? `slot_${slot}`;
  }

  /** Raw per-CPU values of counter slots start..start+count-1. */
  #raw(start: number, count: number): Buffer {
    return mapLookupArrayRange(this.tables.countersFd, start, count, COUNTER_STRIDE * this.#ncpus, MAP_COUNTERS);
  }

  /** Values of counter slots start..start+count-1, summed over CPUs. */
  #read(start: number, count: number): CounterValue[] {
    const b = this.#raw(start, count);
    const out: CounterValue[] = [];
    for (let i = 0; i < count; i++) out.push(decodePercpuCounter(b, this.#ncpus, i * COUNTER_STRIDE * this.#ncpus));
    return out;
  }

  /** Event slots whose packet count changed on some CPU between two #raw(0, 64) reads. */
  #changedEvents(before: Buffer, after: Buffer): number[] {
    const changed: number[] = [];
    const { offset, size } = LAYOUTS.mup_counter.members.packets;
    for (let slot = 0; slot < MUP_EVENT_SLOTS; slot++) {
      for (let cpu = 0; cpu < this.#ncpus; cpu++) {
        const o = (slot * this.#ncpus + cpu) * COUNTER_STRIDE + offset;
        if (before.compare(after, o, o + size, o, o + size) !== 0) {
          changed.push(slot);
          break;
        }
      }
    }
    return changed;
  }

  run(frame: Buffer): RunResult {
    this.#open();
    if (frame.length < ETH_HLEN) {
      throw new RangeError(`a ${frame.length}-byte frame is shorter than an Ethernet header; BPF_PROG_TEST_RUN refuses it`);
    }
    if (frame.length > TEST_RUN_MAX_FRAME) {
      throw new RangeError(
        `a ${frame.length}-byte frame is larger than one XDP buffer (${TEST_RUN_MAX_FRAME} bytes in BPF_PROG_TEST_RUN); ` +
          'multi-buffer XDP is not supported, and the program would see only the first part of it',
      );
    }
    const before = this.#raw(0, MUP_EVENT_SLOTS);
    const r = testRun(
      this.progFd,
      { dataIn: frame, dataOutSize: frame.length + 256, repeat: 1 },
      `${PROGRAM_NAME} on a ${frame.length}-byte frame`,
    );
    const changed = this.#changedEvents(before, this.#raw(0, MUP_EVENT_SLOTS));
    if (changed.length > 1) {
      throw new Error(
        `one frame counted in ${changed.length} event slots (${changed.map((s) => this.#slotName(s)).join(', ')}); ` +
          'the program must count every packet in exactly one event (or the program is also attached and seeing traffic)',
      );
    }
    const verdict = VERDICTS[r.retval];
    if (verdict === undefined) throw new Error(`${PROGRAM_NAME} returned ${r.retval}, not an XDP action`);
    const slot = changed[0];
    return {
      verdict,
      event: slot === undefined ? null : this.#slotName(slot),
      out: r.dataOut ?? Buffer.alloc(0),
      duration: r.duration,
    };
  }

  counters(): Counters {
    this.#open();
    const events: Record<string, CounterValue> = {};
    const slots = this.#read(0, MUP_EVENT_SLOTS);
    for (const [slot, name] of [...this.events].sort((a, b) => a[0] - b[0])) {
      events[name] = slots[slot] ?? { packets: 0n, bytes: 0n };
    }
    slots.forEach((v, slot) => {
      if (!this.events.has(slot) && v.packets !== 0n) events[this.#slotName(slot)] = v;
    });

    const rules: RuleCounter[] = [];
    const { policies, localsids } = this.config;
    this.#read(MUP_EVENT_SLOTS + policyRule(0), policies.length).forEach((v, i) => {
      const p = policies[i];
      if (p !== undefined) rules.push({ rule: policyRule(i), kind: 'policy', where: p.where, ...v });
    });
    this.#read(MUP_EVENT_SLOTS + localSidRule(this.config, 0), localsids.length).forEach((v, j) => {
      const l = localsids[j];
      if (l !== undefined) rules.push({ rule: localSidRule(this.config, j), kind: 'localsid', where: l.where, ...v });
    });
    const behaviorOf = new Map(localsids.map((l) => [l.where, l.behavior ?? 'end.m.gtp4.e']));
    const sum = (kind: RuleCounter['kind'], behavior?: string): CounterValue =>
      rules
        .filter((r) => r.kind === kind && (behavior === undefined || behaviorOf.get(r.where) === behavior))
        .reduce((a, r) => ({ packets: a.packets + r.packets, bytes: a.bytes + r.bytes }), { packets: 0n, bytes: 0n });
    return {
      events,
      rules,
      functions: {
        h_m_gtp4_d: sum('policy'),
        end_m_gtp4_e: sum('localsid', 'end.m.gtp4.e'),
        end_m_gtp6_e: sum('localsid', 'end.m.gtp6.e'),
        end_m_gtp6_d: sum('localsid', 'end.m.gtp6.d'),
        end_m_gtp6_d_di: sum('localsid', 'end.m.gtp6.d.di'),
      },
    };
  }

  get attachments(): readonly Attachment[] {
    return [...this.#attached.values()];
  }

  attach(ifname: string, o: AttachOptions = {}): Attachment {
    this.#open();
    const mode = o.mode ?? 'native';
    const key = attachmentKey(ifname, o.netns);
    if (this.#attached.has(key)) throw new Error(`${describeIf(ifname, o.netns)}: already attached by this data plane`);
    const what = `${describeIf(ifname, o.netns)} (${mode})`;
    const ifindex = ifIndex(ifname, o.netns);
    inNetns(o.netns, () => xdpAttach(ifindex, this.progFd, XDP_MODE_FLAGS[mode] | XDP_FLAGS_UPDATE_IF_NOEXIST, what));
    const a: Attachment = { ifname, ifindex, mode, ...(o.netns === undefined ? {} : { netns: o.netns }) };
    this.#attached.set(key, a);
    return a;
  }

  detach(ifname: string, o: { readonly netns?: string } = {}): void {
    this.#open();
    const key = attachmentKey(ifname, o.netns);
    const a = this.#attached.get(key);
    if (a === undefined) throw new Error(`${describeIf(ifname, o.netns)}: not attached by this data plane`);
    this.#detach(a);
    this.#attached.delete(key);
  }

  #detach(a: Attachment): void {
    try {
      // Same name, other index: the interface was deleted and another made.
      if (ifIndex(a.ifname, a.netns) !== a.ifindex) return;
      inNetns(a.netns, () =>
        xdpDetachProgram(a.ifindex, this.progFd, XDP_MODE_FLAGS[a.mode], `${describeIf(a.ifname, a.netns)} (${a.mode})`),
      );
    } catch (e) {
      if (!isGone(e)) throw e;
    }
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const failed: string[] = [];
    for (const a of this.#attached.values()) {
      try {
        this.#detach(a);
      } catch (e) {
        failed.push((e as Error).message);
      }
    }
    this.#attached.clear();
    objectClose(this.#obj);
    if (failed.length > 0) {
      throw new Error(`closed the data plane, but could not detach it from: ${failed.join('; ')}`);
    }
  }
}
