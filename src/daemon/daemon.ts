/**
 * `mup daemon`: owns the XDP program on the configured interfaces for as
 * long as the router runs, keeps the tables in step with the config file and
 * the API, and survives its own restarts without touching traffic.
 *
 * Start (the same whether bpffs is empty or an earlier daemon left pins):
 *   1. read the config and the state file (API changes, moved onto the file
 *      if it was edited since: rules.ts rebaseOverlay; refused on a conflict);
 *   1b. lock the instance (its pin directory) and the state file (lock(); a
 *      second daemon is refused here, naming the first's pid);
 *   2. load the object, reusing the pinned tables and counters if there are any;
 *   3. bring the tables to the wanted rules (only the difference is written);
 *   4. per interface: swap the program of the pinned link (bpf_link_update,
 *      atomic), or create and pin a link;
 *   5. serve the API; hold the links and repair them (links.ts) every
 *      LINK_CHECK_MS: pins removed, an interface recreated.
 * Stop: by default nothing is detached (the pins keep it all running);
 * --detach-on-exit removes the links and pins.
 */
import { fileURLToPath } from 'node:url';
import type { ChildProcess } from 'node:child_process';
import { readFileSync, rmdirSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Config, Settings } from '../config/types.js';
import { DEFAULT_MAX_SESSIONS, parseConfig, peekSettings, placed, type ItemSpans } from '../config/load.js';
import { asciiJson, type AsciiText } from '../config/ascii-text.js';
import { spansForSplice } from '../config/running-splice.js';
import { API_WHERE } from '../config/keys.js';
import { deflatedFile, parseConfigOffLoop, parseWorkerUrl, rulesCrossed, rulesKept } from '../config/parse-async.js';
import type { HeldText } from '../config/parse-pieces.js';
import { RunningConfigAbandoned, runningConfigOffLoop, runningWorkerUrl, type CompactSection } from '../config/running-async.js';
import { CodeOnDisk } from '../host/code-on-disk.js';
import type { RunningRule } from '../config/running.js';
import { ConfigError } from '../config/errors.js';
import { type CounterValue, LAYOUTS } from '../dataplane/codec.js';
import {
  DEFAULT_OBJECT,
  loadProgram,
  loadProgramAsync,
  openDataplane,
  type Dataplane,
  type LoadedProgram,
  type RuleCounter,
  type RuleCounterRows,
  type RuleSelection,
  type TranslationFunction,
} from '../dataplane/dataplane.js';
import { closeFd, LibbpfError, mapInfo, progInfo } from '../dataplane/libbpf.js';
import { isPercpuCounters } from '../dataplane/counter-map.js';
import { graceClock, rcuExpedited } from '../dataplane/grace.js';
import { enterNetns, ifIndex } from '../dataplane/netns.js';
import { NextHopWatcher, spawnNextHopReadersEarly } from '../dataplane/nexthop.js';
import { dropEarly, spawnChild, spawnEarly, type ChildStdio } from '../host/spawn-early.js';
import { fillWriteThread, TablesRefusedError, type ApplyResult, type Changes, type Tables } from '../dataplane/tables.js';
import type { WriteThread } from '../dataplane/write-thread.js';
import type { Logger } from './log.js';
import { batchEnded, batchStarted, collectAfterBatches, collectBeforeAnswer, COLLECT_WAIT_MS, forcedReleaseNote, heapCompactionUnavailable, releaseMemory, releaseMemorySoon, releaseMemoryWhenQuiet } from './memory.js';
import { deflateSoon, KeptText } from './kept-text.js';
import { LoopMonitor } from './loop.js';
import { requestHistogram } from './request-time.js';
import { ensureBpffs, Pins, type PinnedMaps } from './pins.js';
import { LINK_CHECK_MS, LinkKeeper } from './links.js';
import { type HeldLock, LockedError, stateLockPath, takeLock } from '../host/lock.js';
import { DEFAULT_BPFFS, defaultStateFile } from '../host/paths.js';
import { readFileShared, readFileSharedSync, readHead } from '../host/read-shared.js';
import { LIST_AHEAD_FROM, ListAheadThread, type ListAheadOutcome } from '../config/list-ahead.js';
import { sha256Soon } from '../host/sha-thread.js';
import { runningVersion } from '../host/version.js';
import {
  emptyOverlay,
  overlaySize,
  rebaseOverlay,
  rebaseOverlayAsync,
  ruleSetChanges,
  ruleSetChangesAsync,
  type RuleSetChanges,
  ruleSetDiffAsync,
  RULE_KIND_LIST,
  RULE_KINDS,
  RuleError,
  RuleSet,
  foundRule,
  learnedDeleteText,
  sha256,
  sha256Async,
  sha256OfFile,
  StateStore,
  StateWriteError,
  saveTarget,
  writeFileAtomicSoon,
  type JsonLine,
  type StateLine,
  type Overlay,
  type Rule,
  type RuleJson,
  type RuleKind,
} from './rules.js';
import { canonicalKey as canonicalKeyOf } from './rules.js';
import { planBatchYielding, type BatchResult } from './batch.js';
import { makeDirs } from '../host/mkdirs.js';
import { nextTurn } from './slices.js';
import { SliceClock } from '../host/slice-clock.js';
import { BgpService, type LearnedApplied } from './bgp.js';
import type { LearnedDelta } from '../bgp/incremental.js';

/** `ip monitor link` under setpriv: PR_SET_PDEATHSIG before the exec, so the kernel kills it with the daemon. */
const LINK_MONITOR_ARGS = ['--pdeathsig', 'KILL', 'ip', 'monitor', 'link'];
const LINK_MONITOR_STDIO: ChildStdio = ['ignore', 'pipe', 'pipe'];

/**
 * A config file of at least this many bytes (about 250,000 rules) has its
 * start's fill written by two threads (src/dataplane/write-thread.ts).
 * Below, the thread's start (35-40 ms of CPU, while the other CPU verifies
 * the program: the critical path of bench:daemon's 131,072 rules) costs
 * about what it saves.
 */
const WRITE_THREAD_FROM_BYTES = 32 << 20;

/** A config file larger than this has its settings read from its first lines, before the rest is read. */
const CONFIG_HEAD_BYTES = 1 << 20;

export interface DaemonOptions {
  readonly configPath: string;
  readonly instance: string;
  readonly bpffs?: string;
  readonly object?: string;
  readonly stateFile?: string;
  /** Remove links and pins on SIGTERM/SIGINT instead of leaving the data plane running. */
  readonly detachOnExit?: boolean;
  /** Do not carry the pinned tables over: start with fresh maps (counters reset). */
  readonly replaceTables?: boolean;
  /** Network namespace to run in (`ip netns` name): interfaces, links and sockets are there. */
  readonly netns?: string;
  /** How often links and interfaces are checked and repaired (ms; default LINK_CHECK_MS). */
  readonly linkCheckMs?: number;
  /**
   * Load (verify) the program on a worker thread while prepare() reads the
   * rules (default true); false: in takeOver(), after the lock, as before.
   */
  readonly earlyLoad?: boolean;
  /** Spawn `ip` children (the link monitor, the next-hop readers) in prepare(), before the config makes the daemon big (default true; src/host/spawn-early.ts). */
  readonly spawnEarly?: boolean;
  /** A config file of at least this many bytes has its start's first fill written by two threads, with earlyLoad (default WRITE_THREAD_FROM_BYTES; tests set less). */
  readonly writeThreadFrom?: number;
  /** A JSON config file of at least this many bytes (and over CONFIG_HEAD_BYTES) has its sessions read on a second thread at a start (default LIST_AHEAD_FROM; tests set less). */
  readonly listAheadFrom?: number;
  /** The thread scripts watched for an upgrade under the daemon (default: the config parser's and printer's; tests give their own). */
  readonly workerScripts?: readonly string[];
  readonly log: Logger;
}

export interface InterfaceStatus {
  readonly name: string;
  readonly mode: 'native' | 'generic';
  readonly ifindex: number | null;
  /** Our program is what the interface's link runs now (on its current device). */
  readonly attached: boolean;
  /** Program the interface's live link runs; null when there is none. */
  readonly progId: number | null;
  /** The link's pin exists. */
  readonly pinned: boolean;
}

export interface DaemonStatus {
  readonly instance: string;
  readonly version: string;
  readonly pid: number;
  readonly startedAt: string;
  readonly uptimeSeconds: number;
  /** Tables and counters came from an earlier run's pins. */
  readonly adopted: boolean;
  readonly object: { readonly path: string; readonly sha256: string };
  readonly program: { readonly id: number; readonly tag: string } | null;
  readonly pins: string;
  readonly config: { readonly file: string; readonly sha256: string; readonly loadedAt: string };
  /** changes: net API changes on top of the config; syncs: fdatasyncs that made change records durable since start, records: those records (group commit: records / syncs changes per sync). */
  readonly state: { readonly file: string; readonly changes: number; readonly syncs: number; readonly records: number };
  readonly interfaces: readonly InterfaceStatus[];
  readonly tables: {
    readonly policies: { readonly entries: number; readonly capacity: number };
    readonly localsids: { readonly entries: number; readonly capacity: number };
    readonly sessions: { readonly entries: number; readonly capacity: number };
  };
  readonly forwarding: string;
  /** The event loop's delay (src/daemon/loop.ts), seconds. */
  readonly eventLoop: ReturnType<LoopMonitor['status']>;
  /** The next-hop cache (forwarding fib): rules resolved again since start, passes by kind; null when not running. */
  readonly nexthops: { readonly rulesResolved: number; readonly fullPasses: number; readonly incrementalPasses: number; readonly apiRules: number;
    /** Full passes because ip monitor said it lost events (netlink ENOBUFS); passes that failed (each tried again). */
    readonly lostEventResyncs: number;
    readonly failedPasses: number;
    readonly cached: number | null;
    /** The last pass: when its writes were done, rules resolved again, full or incremental, ms from its start (after the 50 ms debounce). */
    readonly last: { readonly at: string; readonly rules: number; readonly full: boolean; readonly ms: number } | null;
  } | null;
  /**
   * RCU grace periods since start (docs/daemon.md "Grace periods and rcu_expedited"): the host's
   * /sys/kernel/rcu_expedited (null: unreadable), grace periods run, their time and the time table
   * writes waited for them, in seconds.
   */
  readonly grace: { readonly rcuExpedited: 0 | 1 | null; readonly periods: number; readonly seconds: number; readonly waitSeconds: number };
  /** process.memoryUsage() now, MB (docs/bench.md "Daemon memory"): rss, heapUsed, heapTotal, external, arrayBuffers. */
  readonly memory: Record<string, number>;
}

export interface ReloadResult {
  readonly added: number;
  readonly replaced: number;
  readonly deleted: number;
  readonly unchanged: number;
  readonly configChanged: boolean;
  readonly programReplaced: boolean;
  /** API changes kept on top of the file (the file's edit left their rules alone). */
  readonly apiChanges: number;
  /** API changes the file now says itself ("<kind> <key>"): they became config. */
  readonly absorbed: string[];
  /** ?check=true: nothing was applied; `diff` is what would be. */
  readonly checked?: boolean;
  /** One line per rule (and interface, setting) that changes: `+ policy NAME {...}`, `- policy NAME`, `~ policy NAME: key old -> new`. */
  readonly diff?: string[];
  /** A table was full and the edit's own deletes made the room: its deletes were written before its puts. */
  readonly deletesFirst?: true;
  /** `missing`: configured interfaces that do not exist now (not attached; attached when they appear). */
  readonly interfaces: { readonly attached: string[]; readonly detached: string[]; readonly missing: string[] };
}

export interface CountersSnapshot {
  readonly at: string;
  readonly events: Record<string, CounterValue>;
  readonly functions: Record<TranslationFunction, CounterValue>;
  readonly rules: RuleCounter[];
}

export { defaultSocket, defaultStateFile } from '../host/paths.js';

/** Each figure rounded to 0.1 (ms in log lines). */
function roundAll(o: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, Math.round(v * 10) / 10]));
}

/** daemon.reload_max_delete_share when the config leaves it out: a reload may delete up to half the rules without --force. */
export const DEFAULT_RELOAD_MAX_DELETE_SHARE = 0.5;

/** A mutex for operations that change tables and state (one at a time). */
class Serial {
  #tail: Promise<unknown> = Promise.resolve();
  run<T>(fn: () => Promise<T> | T): Promise<T> {
    const next = this.#tail.then(fn, fn);
    this.#tail = next.catch(() => undefined);
    return next;
  }
}

/** A batch of at least this many operations asks for a collection after it (collectAfterBatches) and a compacting one in the next quiet second (releaseMemoryWhenQuiet). */
export const RELEASE_AFTER_BATCH_OPS = 1000;

/** A LibbpfError, or an error caused by one (through its `cause` chain). */
function fromKernel(e: unknown, depth = 0): boolean {
  return e instanceof LibbpfError || (e instanceof Error && depth < 8 && e.cause !== undefined && fromKernel(e.cause, depth + 1));
}

/** A file's identity and size as one text ("" when it does not exist): any write or rename shows as another. */
function fileStamp(path: string): string {
  try {
    const st = statSync(path, { bigint: true });
    return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return '';
    throw e;
  }
}

/** A reload's new object file: its program loaded on the running tables, not filled yet (Daemon.#loadNewObject). */
interface NewObject {
  readonly program: LoadedProgram;
  /** sha256 of the object file it was loaded from. */
  readonly sha: string;
}

/** The program loading while prepare() reads the rules (Daemon.#loadEarly). */
interface EarlyLoad {
  /** sha256 of the object file it was loaded from. */
  readonly sha: string;
  /** The settings it was loaded for, and where they came from. */
  readonly settings: Settings;
  readonly from: 'read ahead' | 'parsed';
  /** Resolves (never rejects) once the load has ended: `program` or `error` is set. */
  readonly settled: Promise<void>;
  program?: LoadedProgram;
  error?: Error;
}

/**
 * A reload the daemon's stop interrupted after its tables and rule set took
 * the new file, while its state file was being written: that file still
 * names the old config, and the next start rebases its records onto the
 * new file (what the reload did). 503.
 */
export class ReloadStoppedAfterApply extends RuleError {
  constructor() {
    super(
      'the daemon stopped while the reload wrote its state file: the tables and rules hold the new file; the state file still names the old one, and the next start rebases its changes onto the new file',
      503,
    );
  }
}

/** A stop while `mup config save` wrote its file (Daemon.saveConfig): nothing was renamed, the file and the state file are as they were. */
export class SaveStopped extends RuleError {
  constructor(file: string) {
    super(`the daemon stopped while the config was being saved; nothing was saved (${file} and the state file are as they were)`, 503);
  }
}

export class Daemon {
  readonly #o: DaemonOptions;
  readonly #log: Logger;
  readonly pins: Pins;
  #stateFile: string;
  #store: StateStore;
  readonly objectPath: string;
  readonly startedAt = new Date();
  readonly #serial = new Serial();
  #dp: Dataplane | undefined;
  /** The next-hop cache, in forwarding mode fib (src/dataplane/nexthop.ts). */
  #nh: NextHopWatcher | undefined;
  #nhReasons = '';
  #rules!: RuleSet;
  #configSha = '';
  /**
   * daemon.reload_max_delete_share as the daemon started with it: like the
   * rest of the daemon section, a new value in the file takes effect at the
   * next start, not at the reload that reads it (else one reload could turn
   * the guard off for the next one, without --force).
   */
  #reloadMaxDeleteShare = DEFAULT_RELOAD_MAX_DELETE_SHARE;
  #configLoadedAt = new Date();
  #objectSha = '';
  #adopted = false;
  #stopped = false;
  readonly #links: LinkKeeper;
  #linkTimer: NodeJS.Timeout | undefined;
  /** `ip monitor link`: a link event runs the link check at once, not at the next tick. */
  #linkMonitor: ChildProcess | undefined;
  /** The instance lock (pin directory) and the state file's lock. */
  #instanceLock: HeldLock | undefined;
  #stateLock: HeldLock | undefined;
  #prog: { fd: number; info: { id: number; tag: string; name: string } } | undefined;
  /** Reloads by result, for metrics. */
  readonly reloads = { ok: 0, failed: 0 };
  /** The event loop's delay, for status and metrics. */
  readonly loop = new LoopMonitor();
  /** The control API's answer times by class (GET /metrics: mup_api_request_duration_seconds; src/daemon/request-time.ts). */
  readonly requests = requestHistogram();
  /** BGP MUP (config bgp:), src/daemon/bgp.ts. */
  #bgp: BgpService | undefined;

  /** What this process runs, read as it starts: a package upgraded under it changes nothing it says. */
  readonly #version = runningVersion();
  /** The thread scripts a reload and config show/save run, as at the start: replaced, those are refused (src/host/code-on-disk.ts). */
  readonly #code: CodeOnDisk;

  constructor(o: DaemonOptions) {
    this.#o = o;
    this.#code = new CodeOnDisk(o.workerScripts ?? [fileURLToPath(parseWorkerUrl()), fileURLToPath(runningWorkerUrl())]);
    this.#log = o.log;
    this.pins = new Pins(o.bpffs ?? DEFAULT_BPFFS, o.instance);
    this.#stateFile = o.stateFile ?? defaultStateFile(o.instance);
    this.#store = new StateStore(this.#stateFile);
    this.objectPath = o.object ?? DEFAULT_OBJECT;
    this.#links = new LinkKeeper({
      pins: this.pins,
      log: this.#log,
      progFd: () => this.dataplane.progFd,
      progId: () => this.#program().id,
      maps: () => {
        const m = this.dataplane.maps;
        return { policies: m.policies, localsids: m.localsids, counters: m.counters, sessions: m.sessions };
      },
      dirRecreated: () => this.#relock(),
    });
  }

  /** Id, tag and name of the program this daemon runs. */
  #program(): { id: number; tag: string; name: string } {
    const fd = this.dataplane.progFd;
    if (this.#prog?.fd !== fd) this.#prog = { fd, info: progInfo(fd) };
    return this.#prog.info;
  }

  /** --state-file, else daemon.state_file of the config, else /var/lib/mup/<instance>.state.json. */
  get stateFile(): string {
    return this.#stateFile;
  }

  get dataplane(): Dataplane {
    if (this.#dp === undefined) throw new Error('the data plane is not loaded');
    return this.#dp;
  }

  get rules(): RuleSet {
    return this.#rules;
  }

  get config(): Config {
    return this.#rules.config;
  }

  /** prepare(), lock(), takeOver(). */
  async start(): Promise<void> {
    await this.prepare();
    try {
      this.lock();
    } catch (e) {
      this.dropPrepared();
      throw e;
    }
    try {
      this.takeOver();
    } catch (e) {
      this.unlock();
      // Whatever prepare() made that the takeover did not take: the children, the early program, the write thread.
      this.dropPrepared();
      throw e;
    }
  }

  /**
   * Make the instance ours before anything of it is touched: an exclusive
   * flock on its pin directory (one daemon per instance) and on the state
   * file's .lock (one daemon per state file), held until stop() or the
   * process ends (the kernel drops them on any exit). Refused with the
   * holder's pid. Only mounts the bpffs and makes the empty directory.
   */
  lock(): void {
    const bpffs = this.#o.bpffs ?? DEFAULT_BPFFS;
    if (ensureBpffs(bpffs)) this.#log.info({ path: bpffs }, 'mounted a bpf filesystem');
    const made = !this.pins.exists();
    this.pins.prepare();
    const instance = this.#o.instance;
    try {
      this.#instanceLock = takeLock(this.pins.dir, `instance ${instance}`);
    } catch (e) {
      if (!(e instanceof LockedError)) throw e;
      throw new LockedError(
        `instance ${instance} is served by ${e.pid === undefined ? 'another daemon' : `the daemon with pid ${e.pid}`} (it holds the lock on ${this.pins.dir}); ` +
          `stop it first${e.pid === undefined ? '' : ` (kill ${e.pid})`}, or start this one with another --instance`,
        e.pid,
      );
    }
    try {
      makeDirs(dirname(this.stateFile), 0o755);
      this.#stateLock = takeLock(stateLockPath(this.stateFile), `state file ${this.stateFile}`, `instance ${instance}`);
    } catch (e) {
      this.unlock();
      if (made) {
        try {
          rmdirSync(this.pins.dir);
        } catch {
          // not empty after all
        }
      }
      if (!(e instanceof LockedError)) throw e;
      throw new LockedError(
        `state file ${this.stateFile} is used by ${e.owner === undefined ? '' : `${e.owner}, `}${e.pid === undefined ? 'another daemon' : `the daemon with pid ${e.pid}`} (it holds ${stateLockPath(this.stateFile)}); ` +
          'give each instance its own state file (--state-file or daemon.state_file)',
        e.pid,
        e.owner,
      );
    }
  }

  /** Let go of the locks (stop(), or a start that failed after lock()). */
  unlock(): void {
    this.#instanceLock?.release();
    this.#instanceLock = undefined;
    this.#stateLock?.release();
    this.#stateLock = undefined;
  }

  /** The pin directory was removed and made again: the lock on the old one means nothing now. */
  #relock(): void {
    if (this.#instanceLock === undefined || this.#instanceLock.stillHere()) return;
    this.#instanceLock.release();
    this.#instanceLock = undefined;
    try {
      this.#instanceLock = takeLock(this.pins.dir, `instance ${this.#o.instance}`);
    } catch (e) {
      this.#log.error({ pins: this.pins.dir, error: (e as Error).message }, 'could not lock the pin directory made again');
    }
  }

  /**
   * Everything that can fail without touching the running data plane: enter
   * the namespace, read and check the config and the state file, check that
   * the interfaces exist. A daemon refused here (bad config, a second
   * daemon for the instance) has changed nothing.
   */
  async prepare(): Promise<void> {
    try {
      await this.#prepare();
    } catch (e) {
      // Refused: the program loaded meanwhile (never pinned nor attached) goes too.
      await Promise.all([this.#early?.settled, ...this.#dropping]);
      this.dropPrepared();
      throw e;
    }
  }

  async #prepare(): Promise<void> {
    const o = this.#o;
    if (o.netns !== undefined) enterNetns(o.netns);
    // While the daemon is small: the start takes them after the load (src/host/spawn-early.ts). Once
    // the program load has started (its verifier ended the critical path of bench:daemon's start), before the parse.
    let spawned = false;
    const spawn = (): void => {
      if (o.spawnEarly === false || spawned) return;
      spawned = true;
      spawnEarly('setpriv', LINK_MONITOR_ARGS, LINK_MONITOR_STDIO, this);
      spawnNextHopReadersEarly(undefined, this);
    };
    let peeked = false;
    const t0 = performance.now();
    const { config, sha, bytes, deflated } = await this.#readConfig(
      o.earlyLoad === false
        ? { text: spawn }
        : {
            // The settings block read ahead of the parse, then the file's own settings (the same: nothing to do).
            text: (t, whole, size) => {
              const s = peeked ? undefined : peekSettings(t, whole);
              if (s !== undefined) {
                peeked = true;
                this.#loadEarly(s, 'read ahead');
              }
              // A large file's first fill writes two tables at once: the thread loads meanwhile. Not for a
              // restart onto pinned tables (their entries are written by the change path, one thread).
              if (size >= (o.writeThreadFrom ?? WRITE_THREAD_FROM_BYTES) && (o.replaceTables === true || !this.pins.hasMaps())) this.#writer ??= fillWriteThread().start();
              spawn();
            },
            settings: (s) => this.#loadEarly(s, 'parsed'),
          },
    );
    this.#timings.config = Math.round(performance.now() - t0);
    this.#reloadMaxDeleteShare = config.daemon?.reloadMaxDeleteShare ?? DEFAULT_RELOAD_MAX_DELETE_SHARE;
    if (o.stateFile === undefined && config.daemon?.stateFile !== undefined) {
      this.#stateFile = config.daemon.stateFile;
      this.#store = new StateStore(this.#stateFile);
    }
    // Read before the instance lock (the rule set is built while the program loads): a daemon still
    // stopping may acknowledge changes after this read; takeOver() looks again once the lock is ours.
    this.#stateRead = fileStamp(this.stateFile);
    const overlay = this.#loadOverlay(sha, config);
    const t1 = performance.now();
    this.#rules = this.#ruleSetWithState(config, overlay);
    this.#timings.rules = Math.round(performance.now() - t1);
    this.#configSha = sha;
    if (deflated !== undefined) this.#configText.setDeflated(deflated, config);
    else this.#configText.set(bytes, config);
    for (const i of config.interfaces ?? []) {
      try {
        ifIndex(i.name);
      } catch (e) {
        throw new ConfigError(config.file, i.where, `${(e as Error).message}; create it or remove it from the config`);
      }
    }
    if (this.#early !== undefined) {
      const t = performance.now();
      await Promise.all([this.#early.settled, ...this.#dropping.splice(0)]);
      this.#timings.wait = Math.round(performance.now() - t);
    }
  }

  /**
   * The program loading on a worker thread since the settings were read
   * (prepare), with what it was loaded for: takeOver() uses it if the object
   * file and the pinned tables are still those, else loads again.
   */
  #early: EarlyLoad | undefined;
  /** The second writer of the start's fill (a large config file), stopped once the tables are filled. */
  #writer: WriteThread | undefined;
  /** What it did, for the start line: the chunks it wrote (0: the fill did not need it), not ready in time, or failed (koffi did not load in it). */
  #fillThread: { chunks: number } | 'not ready' | 'failed' | undefined;
  /** Early loads replaced (settings read ahead wrongly), unloaded once they end. */
  readonly #dropping: Promise<void>[] = [];
  /** How the program was loaded, for the start line: 'early' (while the rules were read) or 'plain' (after the lock), and why. */
  #loadOrder: { order: 'early' | 'plain'; why?: string } = { order: 'plain', why: 'not tried' };

  /**
   * Start loading the program for these settings (parseConfig's hook): the
   * kernel's verifier works on another thread while the rules are read.
   * With the tables pinned now (a restart), on those: takeOver() checks
   * they are still the pinned ones once the instance is ours.
   */
  #loadEarly(settings: Settings, from: 'read ahead' | 'parsed'): void {
    const had = this.#early;
    if (had !== undefined) {
      if (JSON.stringify(had.settings) === JSON.stringify(settings)) return;
      // Read ahead wrongly: that program goes once its load has ended, a new one starts.
      this.#early = undefined;
      this.#dropping.push(had.settled.then(() => had.program?.close()));
      this.#log.info({ readAhead: had.settings, parsed: settings }, 'the settings read ahead were not the file\'s: loading the program again');
    }
    let reuse: PinnedMaps | undefined;
    let sha: string;
    try {
      sha = sha256(readFileSync(this.objectPath));
      if (this.#o.replaceTables !== true) reuse = this.pins.openMaps();
    } catch (e) {
      this.#loadOrder = { order: 'plain', why: `the early load did not start: ${(e as Error).message}` };
      this.#log.warn({ why: this.#loadOrder.why }, 'the program is loaded after the lock (not while the config is read)');
      return;
    }
    this.#log.debug({ object: this.objectPath, reuse: reuse !== undefined, settings: from }, 'loading the program while the rules are read');
    const early: EarlyLoad = {
      sha,
      settings,
      from,
      settled: loadProgramAsync({ object: this.objectPath, settings, ...(reuse === undefined ? {} : { reuse }) }).then(
        (p) => {
          early.program = p;
        },
        (e: unknown) => {
          early.error = e instanceof Error ? e : new Error(String(e));
        },
      ),
    };
    // The object holds its own duplicates of the reused maps' fds.
    for (const fd of Object.values(reuse ?? {})) closeFd(fd);
    this.#early = early;
  }

  /** Unload the program prepare() loaded, if takeOver() has not taken it (a start refused after prepare()). */
  dropPrepared(): void {
    this.#writer?.stop();
    this.#writer = undefined;
    dropEarly(this);
    this.#early?.program?.close();
    this.#early = undefined;
  }

  /**
   * The early program if it was loaded from the object file as it is now
   * and on these tables (`reuse`: the pins now; undefined: fresh ones); else
   * undefined, it is unloaded and #loadOrder says why.
   */
  #takeEarly(reuse: PinnedMaps | undefined): LoadedProgram | undefined {
    const early = this.#early;
    this.#early = undefined;
    if (early === undefined) {
      if (this.#o.earlyLoad === false) this.#loadOrder = { order: 'plain', why: 'early load off' };
      return undefined;
    }
    const plain = (why: string): undefined => {
      early.program?.close();
      this.#loadOrder = { order: 'plain', why };
      this.#log.warn({ why }, 'the program loaded while the config was read is not used: loading it again now');
      return undefined;
    };
    if (early.program === undefined) return plain(`the early load failed (${early.error?.message ?? 'not settled'})`);
    if (early.sha !== this.#objectSha) return plain(`${this.objectPath} changed while the config was read`);
    const now: Record<string, number> = {};
    for (const [pin, fd] of Object.entries(reuse ?? {})) now[pin] = mapInfo(fd, pin).id;
    const had = early.program.reusedIds;
    const same = (a: Readonly<Record<string, number>> | undefined, b: Readonly<Record<string, number>>): boolean =>
      a !== undefined && Object.keys(a).length === Object.keys(b).length && Object.entries(b).every(([k, v]) => a[k] === v);
    if (reuse === undefined ? had !== undefined : !same(had, now)) {
      return plain('the pinned tables changed between the config read and the lock');
    }
    this.#loadOrder = { order: 'early', why: `settings ${early.from}` };
    return early.program;
  }

  /** The config file's text as last loaded (or saved): what `config show` and `config save` build on. */
  readonly #configText = new KeptText();
  /** takeOver() found no pins: nothing ran before this daemon (a start refused after it leaves nothing). */
  #firstStart = false;
  /** The state file read at start ended with a torn line (cut off at takeover). */
  #tornState = false;
  /** The state file as prepare() read it (before the lock): takeOver() reads it again if it changed since. */
  #stateRead: string | undefined;
  /** ms per start phase, logged with the start line. */
  readonly #timings: Record<string, number> = {};
  /** How the start's read of the sessions on a second thread ended (src/config/list-ahead.ts), if one was started. */
  #listAhead: { readonly outcome: ListAheadOutcome; readonly waitedMs: number; readonly indexTaken: boolean; readonly indexWaitedMs: number } | undefined;
  /** New counters made in place of pinned ones of an older layout (#load), and the slots whose counts they took: pinned once the program is attached. */
  #countersToPin: { readonly fd: number; readonly carried: number } | undefined;

  /** Load (or take over) the data plane and attach it: after prepare(), and after the instance is known to be ours. */
  takeOver(): void {
    const o = this.#o;
    this.#readStateAgain();
    const overlay = this.#rules.overlay;
    const config = this.#rules.config;
    const bpffs = o.bpffs ?? DEFAULT_BPFFS;
    if (ensureBpffs(bpffs)) this.#log.info({ path: bpffs }, 'mounted a bpf filesystem');
    this.pins.prepare();

    this.#objectSha = sha256(readFileSync(this.objectPath));
    const hadPins = this.pins.links().length > 0 || this.pins.hasMaps();
    this.#firstStart = !hadPins;
    const t2 = performance.now();
    const dp = this.#load(this.#rules.effective(), o.replaceTables === true, config.bgp !== undefined);
    this.#dp = dp;
    this.#watchTables(dp);
    this.#timings.load = Math.round(performance.now() - t2);
    const t3 = performance.now();
    try {
      this.#attachAll(config);
    } catch (e) {
      // A first start that cannot attach leaves nothing behind; a takeover
      // keeps what runs (links that could not be swapped still run the old
      // program on the same tables).
      if (!hadPins) {
        this.pins.removeAll();
        dp.close();
        this.#dp = undefined;
      }
      throw e;
    }
    this.pins.pinProg(dp.progFd);
    if (this.#countersToPin !== undefined) {
      this.pins.pinMaps({ counters: this.#countersToPin.fd });
      this.#log.warn(
        { pin: this.pins.mapPath('counters'), carried: this.#countersToPin.carried },
        'the pinned counters were of an older layout (a per-CPU element a slot): new counters are pinned, with the counts the old ones had at the start (those of the moments before the program swap are not carried; an older daemon cannot take these over: it needs --replace-tables)',
      );
      this.#countersToPin = undefined;
    }
    this.#links.hold(config.interfaces ?? []);
    this.#timings.attach = Math.round(performance.now() - t3);
    const t = dp.rules;
    this.#log.info(
      {
        ms: this.#timings,
        programLoad: `${this.#loadOrder.order} (${this.#loadOrder.why ?? ''})`,
        ...(this.#fillThread === undefined ? {} : { fillThread: this.#fillThread }),
        ...(this.#listAhead === undefined ? {} : { listAhead: this.#listAhead }),
        adopted: this.#adopted,
        policies: t.policyCount,
        localsids: t.localsidCount,
        apiChanges: overlaySize(overlay),
        pins: this.pins.dir,
        object: this.objectPath,
        // Where the bytes are right after the load (bench:daemon prints it): MB.
        memory: memoryMB(),
      },
      this.#adopted ? 'took over the running data plane' : 'data plane loaded',
    );
    this.#tidyState('start');
    releaseMemory();
    const noCompaction = heapCompactionUnavailable();
    if (noCompaction !== undefined) {
      this.#log.warn(
        { why: noCompaction },
        'the collections after reloads and large batches cannot compact the heap: V8 keeps the pages they free (tens of MB of resident memory), and one that cannot wait for a second without requests is a full pause (51-84 ms with 131,072 rules); build the native addon (make native)',
      );
    }
    if (rcuExpedited() === 0) {
      this.#log.info(
        { rcuExpedited: 0, doc: 'docs/daemon.md "Grace periods and rcu_expedited"' },
        "grace periods are not expedited (/sys/kernel/rcu_expedited 0, the kernel's default): an add or replace right after a delete or replace waits for one, milliseconds each (mup_grace_wait_seconds_total); `echo 1 > /sys/kernel/rcu_expedited` makes them microseconds, for the whole host",
      );
    }
    this.loop.start();
    this.#nexthops();
    this.#watchLinks();
    this.#startBgp();
    // The next-hop readers when forwarding is not fib: nobody takes them.
    const dropped = dropEarly(this);
    if (dropped > 0) this.#log.debug({ children: dropped }, 'children spawned early and not used: killed');
  }

  /** The BGP service, when the config has a bgp section. */
  get bgp(): BgpService | undefined {
    return this.#bgp;
  }

  #startBgp(): void {
    const bgp = this.config.bgp;
    if (bgp === undefined) return;
    this.#bgp = new BgpService(bgp, {
      log: this.#log,
      applyLearned: (d) => this.applyLearned(d),
      sweep: () => this.#sweepUnlisted(),
      localsids: () => this.#rules.localsids.values(),
    });
    this.#bgp.start();
    this.#log.info({ api: `${bgp.api.host}:${bgp.api.port}`, roles: bgp.roles, holdDown: bgp.holdDown }, 'BGP: learning from the sidecar gobgpd');
  }

  /**
   * Learned rules (origin "bgp") refused so far, by "<kind> <key>": a
   * config/API rule holds the key or name, or the table was full. Tried again
   * at every apply (the rule set changes under them), dropped when their
   * route goes.
   */
  #learnedRefused = new Map<string, RefusedLearned>();

  /**
   * Change the learned rules (origin "bgp") by this delta from the
   * incremental resolution: one table write for all changes; if the tables
   * refuse it (full), rule by rule, each whole or not at all. A learned rule
   * whose key or name a config/API rule holds is not installed (docs/bgp.md
   * "Precedence"); it is tried again at every apply.
   */
  applyLearned(delta: LearnedDelta): Promise<LearnedApplied> {
    return this.#serial.run(async () => {
      // Group commit: an API change whose fdatasync fails is undone (its key taken again) after its section;
      // a learned rule must not take that key in between (it would then be both a learned and an API rule).
      // idle() after the grace wait: an undo's writes may owe a grace period of their own.
      do {
        await this.#store.idle();
        await this.#dp?.rules.writable('put');
      } while (!this.#store.isIdle);
      const t0 = performance.now();
      const t = this.dataplane.rules;
      const plan: { kind: RuleKind; puts: Rule[]; dels: Rule[] }[] = [];
      const retry = [...this.#learnedRefused.values()];
      // Kept as it was if this apply throws (tried again at the next one).
      const refusedNext = new Map<string, RefusedLearned>();
      for (const [kind, d] of [['policy', delta.policies], ['session', delta.sessions]] as const) {
        const k = RULE_KINDS[kind];
        const have = this.#rules.learned(kind);
        const gone = new Set<string>();
        const dels: Rule[] = [];
        for (const r of d.del as readonly Rule[]) {
          const key = k.key(r);
          gone.add(key);
          const old = have.get(key);
          if (old !== undefined) dels.push(old);
        }
        // The delta's puts win over an older refused rule of the same key.
        const want = new Map<string, Rule>();
        for (const x of retry) if (x.kind === kind && !gone.has(k.key(x.rule))) want.set(k.key(x.rule), x.rule);
        for (const r of d.put as readonly Rule[]) want.set(k.key(r), r);
        const puts: Rule[] = [];
        for (const [key, r] of want) {
          const why = this.#rules.learnedConflict(kind, r);
          if (why !== undefined) {
            refusedNext.set(`${kind} ${key}`, { kind, rule: r, reason: 'conflict', why });
            continue;
          }
          const old = have.get(key);
          // The same object: unchanged (the resolver keeps a rule's object); else compare what the tables get.
          if (old !== r && (old === undefined || JSON.stringify(k.json(old)) !== JSON.stringify(k.json(r)))) puts.push(r);
        }
        plan.push({ kind, puts, dels });
      }
      const merged: Changes = Object.assign({}, ...plan.flatMap((x) => [RULE_KINDS[x.kind].put(x.puts), RULE_KINDS[x.kind].del(x.dels)]));
      let changed = 0;
      const writes = t.writes;
      const done = (kind: RuleKind, r: Rule, put: boolean): void => {
        const key = RULE_KINDS[kind].key(r);
        this.#rules.setLearned(kind, key, put ? r : undefined);
        changed++;
      };
      try {
        // In slices, its grace periods waited for with the loop running: at once, a change of N learned
        // rules held the loop one grace period per replaced entry (found in review, session 42: 300 rules, 4.1 s).
        await this.#tablesYielding(t, merged);
        for (const x of plan) {
          for (const r of x.dels) done(x.kind, r, false);
          for (const r of x.puts) done(x.kind, r, true);
        }
      } catch (e) {
        // A write that failed part way (not a refusal before writing: full) deleted entries whose ids the
        // next-hop cache still holds (#writeFailed): it indexes every rule again, whatever happens below.
        if (t.writes !== writes) this.#resolveAllNextHops('BGP learned rules');
        // One by one: what fits goes in, what does not is refused whole.
        for (const x of plan) {
          const k = RULE_KINDS[x.kind];
          for (const r of x.dels) {
            await this.#tablesYielding(t, k.del([r]));
            done(x.kind, r, false);
          }
          for (const r of x.puts) {
            try {
              await this.#tablesYielding(t, k.put([r]));
              done(x.kind, r, true);
            } catch (e2) {
              refusedNext.set(`${x.kind} ${k.key(r)}`, { kind: x.kind as 'policy' | 'session', rule: r, reason: 'table', why: (e2 as Error).message });
            }
          }
        }
        this.#log.warn({ error: (e as Error).message }, 'BGP: the learned rules did not fit in one write; applied one by one');
      }
      this.#learnedRefused = refusedNext;
      const refused = [...refusedNext.entries()].map(([rule, x]) => ({ rule, reason: x.reason, why: x.why }));
      if (changed > 0) {
        const ms = Math.round((performance.now() - t0) * 100) / 100;
        this.#log.info({ changed, policies: this.#rules.learned('policy').size, sessions: this.#rules.learned('session').size, ms }, 'BGP: learned rules applied');
      }
      // Built when status or metrics ask, not on every apply (20,000 learned rules; one change).
      let installed: Set<string> | undefined;
      const rules = this.#rules;
      return {
        get installed(): ReadonlySet<string> {
          if (installed === undefined) {
            installed = new Set<string>();
            for (const kind of ['policy', 'session'] as const) for (const key of rules.learned(kind).keys()) installed.add(`${kind} ${key}`);
          }
          return installed;
        },
        refused,
        changed,
      };
    });
  }

  /** Delete the table entries no rule lists (left by an earlier run, not learned again). */
  #sweepUnlisted(): Promise<number | undefined> {
    // Tables this daemon made (no earlier run's pins taken over) hold only what its rules wrote: nothing to sweep.
    // Else the earlier run's entries that no rule lists now go, in slices (Tables.sweepYielding): as one
    // dataplane.sync it held the event loop 247 ms at 20,000 learned rules.
    if (!this.#adopted) return Promise.resolve(undefined);
    return this.#serial.run(async () => {
      // Not between two slices of a failed sync's undo (its write would be refused, and it must not land under it).
      await this.#store.idle();
      const e = this.#rules.effective();
      if (this.#tablesDirty) {
        // A put-back failed since the start: the tables are out of step with the rules; written whole (as the
        // next reload would), in slices. Rules written again may have new ids: every rule's next hop is
        // resolved again, as after the reload's whole write.
        const r = await this.dataplane.syncYielding(e);
        this.#tablesDirty = false;
        this.#resolveAllNextHops('the sweep of an earlier run\'s entries');
        return r.deleted;
      }
      return (await this.dataplane.rules.sweepYielding(e.policies, e.localsids, e.sessions ?? [])).deleted;
    });
  }

  /**
   * Check (and repair) links and interfaces on every link event of the
   * kernel (`ip monitor link`) and every linkCheckMs besides (pins removed
   * make no netlink event). On an event the check runs at once, in the same
   * turn of the event loop, not queued behind API changes: an interface
   * made again gets our program as soon as it exists (RTM_NEWLINK, before
   * it is up: XDP attaches to a down device), so frames that arrive once it
   * is up are translated, not routed by the kernel untouched; and the
   * next-hop cache lets go of the old device's ifindex (linksChanged).
   * Safe outside the queue: it touches links and the next-hop cache, never
   * the tables or the rule set; a queued operation that touches links is
   * synchronous from then on, and a batch, which gives the loop turns
   * while it writes, touches only tables, rules and the next-hop cache's
   * rule index (rulesPut, which a pass takes as pending).
   */
  #watchLinks(): void {
    if (this.#linkTimer !== undefined) return;
    const checkNow = (): void => {
      if (this.#stopped || this.#dp === undefined) return;
      this.#links.check(this.config.interfaces ?? []);
      this.#nh?.linksChanged();
    };
    const check = (): void => {
      void this.#serial.run(checkNow);
    };
    this.#linkTimer = setInterval(check, this.#o.linkCheckMs ?? LINK_CHECK_MS);
    this.#linkTimer.unref();
    // setpriv sets PR_SET_PDEATHSIG before it execs ip: the kernel kills ip
    // when the daemon dies, however it dies. The child inherits the daemon's
    // network namespace.
    const child = spawnChild('setpriv', LINK_MONITOR_ARGS, LINK_MONITOR_STDIO);
    this.#linkMonitor = child;
    child.stdout.on('data', () => {
      // At once (no debounce: a 20 ms wait let the soak bring the new
      // interface up before our program was on it). Several lines read in
      // one chunk are one check; a check costs microseconds per interface.
      try {
        checkNow();
      } catch (e) {
        this.#log.error({ error: (e as Error).message }, 'link check on a link event failed; the periodic check retries');
      }
    });
    child.on('error', (e) => this.#log.warn({ error: e.message }, `ip monitor link failed: links are checked every ${this.#o.linkCheckMs ?? LINK_CHECK_MS} ms only`));
    child.on('exit', (code, signal) => {
      if (!this.#stopped) this.#log.warn({ exit: signal ?? code }, `ip monitor link exited: links are checked every ${this.#o.linkCheckMs ?? LINK_CHECK_MS} ms only`);
    });
  }

  /**
   * A reload that writes only its edit (same program, same tables) can
   * re-point only the edit's rules in the next-hop cache, as an API change
   * does: the cache runs (forwarding fib before and after) and the ingress
   * interfaces, which every resolution checks, are the same. Otherwise the
   * cache indexes every rule again (#nexthops). A full index of 131,072
   * rules kept the event loop busy for 0.3 s after each reload, in 5 ms
   * slices: the status requests of bench:daemon's reload phase waited up to
   * a slice each.
   */
  #nhIncremental(config: Config): boolean {
    const names = (c: Config): string => JSON.stringify((c.interfaces ?? []).map((i) => i.name));
    return this.#nh !== undefined && config.settings.forwarding === 'fib' && this.config.settings.forwarding === 'fib' && names(config) === names(this.config);
  }

  /** Run the next-hop cache in forwarding mode fib, stop it otherwise; re-resolve after a rule change. */
  #nexthops(): void {
    const fib = this.#dp !== undefined && this.#dp.config.settings.forwarding === 'fib';
    if (!fib) {
      this.#nh?.stop();
      this.#nh = undefined;
      return;
    }
    if (this.#nh !== undefined) {
      this.#nh.rulesChanged();
      return;
    }
    this.#nh = new NextHopWatcher({
      dataplane: () => this.#dp,
      config: () => this.#rules.effective(),
      ingress: () => (this.config.interfaces ?? []).map((i) => i.name),
      onResolved: (r) => {
        // Logged when the outcome changes, not every few seconds.
        const reasons = JSON.stringify([r.cached, r.fib]);
        if (reasons === this.#nhReasons) return;
        this.#nhReasons = reasons;
        this.#log.info(
          { cached: r.cached, fib: r.fib, ranges: r.ranges, rules: r.rules, full: r.full, ms: r.ms },
          'next hops resolved (rules on the FIB lookup, by reason; rules: resolved again in this pass)',
        );
      },
      onStale: (stale) =>
        this.#log.warn(
          { interfaces: stale.map((x) => ({ interface: x.ifname, ifindex: x.ifindex, now: x.now, rules: x.rules })) },
          'an interface of cached next hops was deleted or made again: those rules use the FIB lookup until resolved again',
        ),
      onError: (e) => this.#log.warn({ error: e.message }, 'next-hop cache'),
    });
    this.#nh.start();
  }

  /**
   * The start's read of the config, checked. `bytes`, the file as read, is
   * what #configText keeps: deflated from the bytes, not the string (~3 x
   * faster), on the threadpool while this thread parses them, as their
   * digest is made (on a thread of its own from 32 MB): a million sessions
   * and a million policies (277 MB) took 158 and 243 ms more after the
   * parse. `deflated` is undefined for bytes kept as they are (KeptText.set).
   */
  async #readConfig(hooks?: {
    /** The file's text: its head first (`whole` false) if it is large, then all of it; `size` its bytes. */
    readonly text: (t: string | AsciiText, whole: boolean, size: number) => void;
    readonly settings?: (s: Settings) => void;
  }): Promise<{ config: Config; sha: string; bytes: Buffer; deflated: Buffer | undefined }> {
    // A large file's head first: the program's load and the children start while the process is small
    // (a fork then copied the page tables of the whole file's bytes and text: 132 ms for 277 MB, not 15).
    const head = hooks === undefined ? undefined : readHead(this.#o.configPath, CONFIG_HEAD_BYTES);
    if (head !== undefined) hooks?.text(head.text, false, head.size);
    // A large JSON file's sessions are read on a second thread while this one reads the rest (list-ahead.ts):
    // the thread starts before the file is read, so its modules load meanwhile.
    const ahead = head !== undefined && head.size >= (this.#o.listAheadFrom ?? LIST_AHEAD_FROM) && /^\s*\{/.test(head.text) ? new ListAheadThread() : undefined;
    let config: Config;
    let bytes: Buffer;
    let sha: Promise<string>;
    let deflated: Promise<Buffer | undefined>;
    try {
      bytes = this.#readConfigBytes();
      ahead?.give(bytes);
      sha = sha256Soon(bytes);
      deflated = deflateSoon(bytes);
      // An ASCII JSON file is read from its bytes: its string (277 MB: 200-300 ms) is made only if something needs it.
      const text = asciiJson(bytes) ?? bytes.toString('utf8');
      hooks?.text(text, true, bytes.length);
      config = parseConfig(text, this.#o.configPath, hooks?.settings, bytes, ahead);
    } finally {
      ahead?.stop();
    }
    if (ahead !== undefined) this.#listAhead = { outcome: ahead.outcome, waitedMs: ahead.waitedMs, indexTaken: ahead.indexTaken, indexWaitedMs: ahead.indexWaitedMs };
    this.#logConfigWarnings(config);
    return { config, sha: await sha, bytes, deflated: await deflated };
  }

  /** The config file's bytes, read on the threadpool (a reload: the daemon is serving), shared with the parser's thread. */
  #readConfigBytesAsync(): Promise<Buffer> {
    return readFileShared(this.#o.configPath).catch((e: unknown) => {
      throw this.#unreadable(e);
    });
  }

  #configFileSha(): Promise<string> {
    return sha256OfFile(this.#o.configPath).catch((e: unknown) => {
      throw this.#unreadable(e);
    });
  }

  #readConfigBytes(): Buffer {
    try {
      return readFileSharedSync(this.#o.configPath);
    } catch (e) {
      throw this.#unreadable(e);
    }
  }

  #unreadable(e: unknown): ConfigError {
    return new ConfigError(this.#o.configPath, '', `cannot read the config file: ${(e as Error).message}`);
  }

  /** What a parse of the file says besides errors (logged at every read, so a reload of the same file says it again). */
  #logConfigWarnings(config: Config): void {
    for (const w of config.warnings ?? []) this.#log.warn({ file: w.file, path: w.path, line: w.line }, w.reason);
    if ((config.interfaces ?? []).length === 0) {
      this.#log.warn({ file: config.file }, 'no interfaces in the config: the program is loaded and the tables filled, but it sees no traffic');
    }
  }

  /**
   * With the state file's lock held (lock()): what a compaction killed part
   * way left is removed, and the file is read again if it changed since
   * prepare() read it. `kill PID; mup daemon ...` starts this daemon while
   * the one before still answers the changes it had in hand, each
   * acknowledged once its record was durable; read before them, this
   * daemon took them out of the tables and its start rewrote the file
   * without them.
   */
  #readStateAgain(): void {
    this.#store.removeStaleCompactions();
    if (fileStamp(this.stateFile) === this.#stateRead) return;
    const config = this.#rules.config;
    this.#log.info({ stateFile: this.stateFile }, 'the state file changed after it was read (the daemon before this one answered changes as it stopped): read again');
    this.#tornState = false;
    this.#rules = this.#ruleSetWithState(config, this.#loadOverlay(this.#configSha, config));
  }

  /**
   * The file's rules with the state file's API changes on top. A file
   * edited while the daemon was down can clash with them as a whole (an API
   * rule and a file rule of another key given one name): the checks then
   * word it as a file's error ("the config with the state file applied:
   * name ... is already used by policies[1]"), which named neither the
   * state file nor a way out. Said here, with both.
   */
  #ruleSetWithState(config: Config, overlay: Overlay): RuleSet {
    try {
      return new RuleSet(config, overlay);
    } catch (e) {
      if (!(e instanceof ConfigError) || overlaySize(overlay) === 0) throw e;
      throw new RuleError(
        `${this.#o.configPath} and the API changes in ${this.stateFile} do not hold together: ${e.message}. ` +
          'Nothing was changed (a pinned data plane keeps running). Make the file say what you want (rename or remove one of the two; ' +
          'the API changes are the JSON lines of the state file, one a change), or move the state file aside to let the file win',
        409,
      );
    }
  }

  /**
   * The state file's changes, on top of this config: as they are when the
   * file is the one they were made on; else moved onto it (rebaseOverlay),
   * and a start refused, naming the rules, where the file's edit and an API
   * change touch the same rule.
   */
  #loadOverlay(configSha: string, config: Config): Overlay {
    const got = this.#store.read();
    if (got === undefined) return emptyOverlay();
    if (got.torn) {
      this.#log.warn(
        { stateFile: this.stateFile, line: got.tornAt?.line, bytes: got.tornAt?.bytes },
        'the last change in the state file was cut short (a crash or a full disk while writing it); it was never acknowledged: it is dropped and cut off the file',
      );
      this.#tornState = true;
    }
    if (got.header.config.sha256 === configSha) return got.overlay;
    const r = rebaseOverlay(got.overlay, (kind, key) => got.bases.get(`${kind} ${key}`), config);
    if (r.conflicts.length > 0) {
      throw new RuleError(
        `${this.#o.configPath} was edited since the API changes in ${this.stateFile} were made, and both change the same rules: ${r.conflicts.join(', ')}. ` +
          'Nothing was changed (the pinned data plane keeps running). Make the file say what you want for these rules (the API\'s version is in the ' +
          'state file\'s JSON lines, one a change), or move the state file aside to let the file win',
        409,
      );
    }
    if (overlaySize(got.overlay) > 0) {
      this.#log.info(
        { stateFile: this.stateFile, kept: overlaySize(r.overlay), absorbed: r.absorbed.length },
        'the config file was edited since the API changes were made: they apply on top of it (those the file now says itself became config)',
      );
    }
    return r.overlay;
  }

  /** Load the object with the pinned tables (unless fresh), pin what is new. */
  #load(config: Config, fresh: boolean, keepUnlisted = false): Dataplane {
    let reuse: PinnedMaps | undefined;
    if (!fresh) reuse = this.pins.openMaps();
    try {
      const early = this.#takeEarly(reuse);
      const writer = this.#writer === undefined ? {} : { writer: this.#writer };
      // Counters an older daemon pinned per CPU: new ones are made (openObject), with their counts added in.
      let carried: number | undefined;
      const older =
        reuse !== undefined && isPercpuCounters(reuse.counters) ? { olderCounters: { pin: this.pins.mapPath('counters'), onCarried: (n: number) => (carried = n) } } : {};
      const dp =
        early?.fill(config, { keepUnlisted: reuse !== undefined && keepUnlisted, ...writer, ...older }) ??
        openDataplane({
          object: this.objectPath,
          config,
          ...(reuse === undefined ? {} : { reuse, keepUnlisted }),
          ...writer,
          ...older,
        });
      // Pin what is new: every table, or what the pins of an older daemon lack or hold in an older form
      // (no sessions table; counters of one per-CPU element a slot, replaced by a new map).
      const m = dp.maps;
      if (reuse === undefined) this.pins.pinMaps({ policies: m.policies, localsids: m.localsids, counters: m.counters, sessions: m.sessions });
      else {
        if (reuse.sessions === undefined) this.pins.pinMaps({ sessions: m.sessions });
        // New counters in place of an older layout's are pinned once the program runs on every link
        // (takeOver): until then the old program counts into the old map, which stays pinned.
        if (mapInfo(m.counters, 'counters').id !== mapInfo(reuse.counters, 'counters').id) this.#countersToPin = { fd: m.counters, carried: carried ?? 0 };
      }
      this.#adopted = reuse !== undefined;
      return dp;
    } finally {
      for (const fd of Object.values(reuse ?? {})) closeFd(fd);
      // Its one fill is done: the thread's isolate goes.
      if (this.#writer !== undefined) this.#fillThread = this.#writer.ready ? { chunks: this.#writer.written } : this.#writer.load === 'failed' ? 'failed' : 'not ready';
      this.#writer?.stop();
      this.#writer = undefined;
    }
  }

  /**
   * Attach `progFd` (default: the running program) to every configured
   * interface that exists (the missing ones are returned, and attached by
   * the link check when they appear); detach from pinned interfaces no
   * longer configured. An interface that refuses the program throws, unless
   * `failed` is given (links being put back): then it is told, and the
   * other interfaces are done.
   */
  #attachAll(
    config: Config,
    progFd: number = this.dataplane.progFd,
    failed?: (i: { readonly name: string; readonly xdp: string }, e: Error) => void,
  ): { attached: string[]; detached: string[]; missing: string[] } {
    const attached: string[] = [];
    const detached: string[] = [];
    const missing: string[] = [];
    const wanted = config.interfaces ?? [];
    // Links we hold keep running: let go of those about to be detached or
    // remade in another mode, and put back pins removed under us, so that
    // the pins say what runs.
    this.#links.releaseExcept(wanted);
    if (this.pins.exists()) this.#links.repinLinks();
    else this.#links.repin(); // the directory went under us: everything
    for (const i of wanted) {
      if (!this.#ifExists(i.name)) {
        missing.push(i.name);
        this.#log.warn({ interface: i.name, mode: i.xdp }, 'the interface does not exist: not attached; it is attached when it appears');
        continue;
      }
      let how: 'updated' | 'attached';
      try {
        how = this.pins.attach(i.name, i.xdp, progFd);
      } catch (e) {
        // Putting links back (failed given): the other interfaces are still put back.
        if (failed === undefined) throw e;
        failed(i, e as Error);
        continue;
      }
      if (how === 'attached') attached.push(i.name);
      this.#log.info({ interface: i.name, mode: i.xdp }, how === 'updated' ? 'program swapped on the running link' : 'attached');
    }
    for (const l of this.pins.links()) {
      if (!wanted.some((i) => i.name === l.ifname && i.xdp === l.mode)) {
        this.#links.release(l.ifname);
        this.pins.detach(l);
        detached.push(l.ifname);
        this.#log.info({ interface: l.ifname, mode: l.mode }, 'detached (no longer in the config)');
      }
    }
    this.#links.hold(wanted.filter((i) => !missing.includes(i.name)));
    return { attached, detached, missing };
  }

  #ifExists(name: string): boolean {
    try {
      ifIndex(name);
      return true;
    } catch {
      return false;
    }
  }

  /**
   * SIGHUP / API reload: re-read the file and apply its changes since the
   * last load on top of the running rules (file + API changes; the API
   * changes the edit leaves alone are kept, docs/config.md "Reload"). A bad
   * file, or an edit that touches a rule an API change touched too, changes
   * nothing. A file that would delete more than
   * daemon.reload_max_delete_share of the rules is refused unless `force`
   * (the API's ?force=true, `mup reload --force`; SIGHUP never forces).
   * `check`: do all of that, apply nothing, answer the diff. Every reload
   * is one log line, applied or refused, with who asked (`reason`).
   */
  async reload(o: { force?: boolean; check?: boolean; reason?: string } = {}): Promise<ReloadResult> {
    const check = o.check === true;
    /** The rule set this reload replaces, if it applies an edit (made in a job before the collection: a WeakRef keeps its target for the rest of the job that made it). */
    let replaced: WeakRef<RuleSet> | undefined;
    const r = await this.#serial.run(async () => {
      this.#code.check(check ? 'a reload check' : 'a reload', (m) => new RuleError(m, 409));
      await this.#store.idle(); // group commit: every change before the reload acknowledged or refused first
      const t0 = performance.now();
      const reason = o.reason ?? 'api';
      replaced = new WeakRef(this.#rules);
      try {
        const r = await this.#reload(o.force === true, check);
        if (!check) this.reloads.ok++;
        const { diff, ...rest } = r;
        this.#log.info(
          {
            reason,
            force: o.force === true,
            ms: Math.round(performance.now() - t0),
            phases: this.#reloadMs,
            rulesKept: this.#reloadKept,
            rulesCrossed: this.#reloadCrossed,
            ...rest,
            ...(diff === undefined ? {} : { changes: diff.length }),
            ...(r.interfaces.missing.length > 0 ? { missingInterfaces: r.interfaces.missing } : {}),
          },
          check ? 'reload checked (nothing applied)' : 'reloaded',
        );
        return r;
      } catch (e) {
        if (!check) this.reloads.failed++;
        this.#log.warn(
          { reason, force: o.force === true, ms: Math.round(performance.now() - t0), error: (e as Error).message },
          check ? 'reload check failed (nothing applied)' : e instanceof ReloadStoppedAfterApply ? 'reload stopped after its tables were written' : 'reload failed; the tables are unchanged',
        );
        throw e;
      }
    });
    // The rule set and config it replaced, garbage now, collected before the answer (V8's incremental
    // marking, 35-76 ms with 131,072 rules): they were held until a quiet second (+27-30 MB resident).
    // Outside the serial section: changes sent meanwhile do not wait for it.
    // Without the addon (said at start) nothing is started and nothing is waited for.
    if (!check && r.configChanged) {
      let freed = false;
      if (replaced !== undefined && heapCompactionUnavailable() === undefined) {
        const t = performance.now();
        freed = await collectBeforeAnswer(replaced);
        const ms = Math.round(performance.now() - t);
        const why = heapCompactionUnavailable();
        if (freed) this.#log.debug({ ms }, 'the rules the reload replaced were collected before its answer');
        else if (why !== undefined) this.#log.warn({ ms, error: why }, 'the collection after the reload could not be started; the quiet collection gives its memory back later');
        else this.#log.warn({ ms }, `the rules the reload replaced were still on the heap after ${COLLECT_WAIT_MS / 1000} s of collections; answered without waiting longer`);
      }
      // Collected: what is left is V8's free pages, which the compacting collection (a pause) gives back in a
      // second without requests only; another marking 5 s later under steady requests would free nothing.
      // Not collected: that collection, forced at 5 s if no quiet second comes.
      if (freed) releaseMemoryWhenQuiet();
      else releaseMemorySoon(this.#reloadReleaseNote);
    }
    return r;
  }

  /** A failed reload or API change could not put the tables back as they were: the next reload writes them whole (sync). */
  #tablesDirty = false;
  #batchUnderWay = false;

  /** Tests: the fsync of the state file's directory after a rewrite fails with this errno (StateStore.testFailDirSyncs). */
  set testFailDirSyncs(code: string | undefined) {
    this.#store.testFailDirSyncs = code;
  }

  /** Tests: only this many of the directory fsyncs fail (StateStore.testFailDirSyncsLeft). */
  set testFailDirSyncsLeft(n: number | undefined) {
    this.#store.testFailDirSyncsLeft = n;
  }

  /** Tests: run while a save's diff of the rule sets is under way (an edit of the file there must refuse the save). */
  testDuringSaveDiff: (() => Promise<void>) | undefined;

  /** Tests: run while a save writes the config file (a stop there must leave the file and the state file as they were). */
  testDuringSaveWrite: (() => Promise<void> | void) | undefined;

  /** Tests: the group commit's fdatasyncs answer only once this resolves (StateStore.testSyncGate). */
  set testSyncGate(gate: Promise<void> | undefined) {
    this.#store.testSyncGate = gate;
  }

  /** Tests: the state file's group-commit fdatasyncs fail with this errno (StateStore.testFailSyncs). */
  set testFailSyncs(code: string | undefined) {
    this.#store.testFailSyncs = code;
  }

  /** The tables may not hold the running rules (a failed write not put back) until the next reload: health says so. */
  get tablesOutOfStep(): boolean {
    return this.#tablesDirty;
  }

  /**
   * A batch is between its table write and the last slice of its rule set's
   * update: the tables hold the batch, the rule set only part of it, and
   * health does not compare them (it reported tables_mismatch, 503, during
   * every large batch).
   */
  get batchUnderWay(): boolean {
    return this.#batchUnderWay;
  }

  /**
   * A reload failed after (part of) its table write (`from`'s rules): the
   * tables back to the running rules by the reverse of its diff; if even
   * that fails, the next reload writes them whole.
   */
  async #restoreTables(from: RuleSet): Promise<void> {
    try {
      await this.dataplane.update(this.#rules.effective(), ruleSetChanges(from, this.#rules).changes);
    } catch (e) {
      this.#tablesDirty = true;
      this.#log.error({ error: (e as Error).message }, 'a failed reload could not put the tables back as they were; the next reload writes them whole');
    }
    // Entries deleted and written back have other ids now, and freed ids may be taken: every rule indexed again.
    this.#resolveAllNextHops('reload');
  }

  /**
   * The log line of the collection after a reload (one whose rules could not be collected before its
   * answer) run without a quiet second. Made here, where it holds `this` only: an arrow made in
   * #reloadWrite held that function's scope, with the rule set the reload made, until the collection ran
   * (a second and more later), past the next reload that replaced it.
   */
  readonly #reloadReleaseNote = (): void => this.#log.info({}, forcedReleaseNote('the reload'));

  /** ms per phase of the last reload (its log line). */
  #reloadMs: Record<string, number> = {};
  /** Rules of the last reload's parse that are the running rule objects (the file says the same there). */
  #reloadKept = 0;
  /** The last reload's rules: how many are the running objects (kept), how many crossed from the parser's thread. */
  get lastReloadRules(): { readonly kept: number; readonly crossed: number } {
    return { kept: this.#reloadKept, crossed: this.#reloadCrossed };
  }
  /** Of the last reload's rules, how many crossed from the parser's thread (the rest were the running rules, their text unchanged). */
  #reloadCrossed = 0;

  async #reload(force: boolean, check: boolean): Promise<ReloadResult> {
    let t = performance.now();
    const ms: Record<string, number> = {};
    this.#reloadMs = ms;
    this.#reloadKept = 0;
    this.#reloadCrossed = 0;
    const lap = (phase: string): void => {
      const now = performance.now();
      ms[phase] = Math.round(now - t);
      t = now;
    };
    // Whether the file changed, read a piece at a time: an unchanged file is not held whole (18 MB more
    // resident after the reload, until V8's next full collection).
    if (!this.#tablesDirty && (await this.#configFileSha()) === this.#configSha) {
      lap('read');
      return this.#reloadSame(check);
    }
    const bytes = await this.#readConfigBytesAsync();
    const sha = await sha256Async(bytes);
    lap('read');
    // Changed back between the two reads.
    if (sha === this.#configSha && !this.#tablesDirty) return this.#reloadSame(check);
    // Read and checked on a thread of its own: the daemon answers meanwhile (the serial section holds other changes).
    const config = await parseConfigOffLoop(bytes, this.#o.configPath, this.config, this.#configText.source(this.config));
    this.#logConfigWarnings(config);
    lap('parse');
    this.#reloadKept = rulesKept(config);
    this.#reloadCrossed = rulesCrossed(config);
    // The file's own changes since the last load, on top of the API's.
    const current = this.#rules;
    const rebased = await rebaseOverlayAsync(current.overlay, (kind, key) => current.base(kind, key), config);
    if (rebased.conflicts.length > 0) {
      throw new RuleError(
        `reload refused: the config file's edit and API changes touch the same rules: ${rebased.conflicts.join(', ')}. Nothing was changed. ` +
          'Make the file say what you want for these rules (mup config show prints the running version, mup config save writes it into the file), then reload',
        409,
      );
    }
    const { overlay, absorbed } = rebased;
    let rules: RuleSet;
    try {
      // In slices (the daemon answers meanwhile): with a million API rules on top, one turn of seconds.
      rules = await RuleSet.yielding(config, overlay);
    } catch (e) {
      throw new RuleError(`reload refused: the config file with the API changes on top does not hold together: ${(e as Error).message}. Nothing was changed`, 409);
    }
    rules.adoptLearned(this.#rules);
    lap('rules');
    const old = this.dataplane;
    const s = old.config.settings;
    const sessions = (x: { maxSessions?: number }): number => x.maxSessions ?? DEFAULT_MAX_SESSIONS;
    if (config.settings.maxPolicies !== s.maxPolicies || config.settings.maxLocalSids !== s.maxLocalSids || sessions(config.settings) !== sessions(s)) {
      throw new ConfigError(
        config.file,
        'settings',
        `table sizes changed (max_policies ${s.maxPolicies} -> ${config.settings.maxPolicies}, max_localsids ${s.maxLocalSids} -> ${config.settings.maxLocalSids}, ` +
          `max_sessions ${sessions(s)} -> ${sessions(config.settings)}); ` +
          'a loaded table cannot be resized: restart the daemon with --replace-tables (the new tables are filled before the program is swapped in; counters start from zero)',
      );
    }
    // What differs, rule by rule (sameRule), in slices: the deletions' guard counts from it, the tables write only it.
    const diffed = await ruleSetChangesAsync(this.#rules, rules);
    lap('diff');
    // A configured interface that does not exist now is no reason to refuse:
    // the reload applies, the result names it, the link check attaches it when it appears.
    this.#deletionGuard(diffed, force);
    if (check) {
      const diff = await ruleSetDiffAsync(this.#rules, rules);
      const count = (c: string): number => diff.filter((l) => l.startsWith(c) && !/^. (interface|settings)/.test(l)).length;
      return {
        added: count('+'),
        replaced: count('~'),
        deleted: count('-'),
        unchanged: RULE_KIND_LIST.reduce((n, k) => n + rules.rules(k.kind).size, 0) - count('+') - count('~'),
        configChanged: true,
        programReplaced: false,
        apiChanges: overlaySize(overlay),
        absorbed,
        checked: true,
        diff,
        interfaces: { attached: [], detached: [], missing: (config.interfaces ?? []).filter((i) => !this.#ifExists(i.name)).map((i) => i.name) },
      };
    }
    if (JSON.stringify(config.daemon ?? {}) !== JSON.stringify(this.config.daemon ?? {})) {
      this.#log.warn({ file: config.file }, 'the daemon section changed (socket, group, state file, http, reload_max_delete_share): that takes effect at the next restart');
    }
    // A new object file (an upgrade): its program loaded and verified before anything is written, so that
    // one the kernel refuses changes nothing. Unloaded below unless it is swapped in.
    const next = await this.#loadNewObject(config.settings);
    try {
      return await this.#reloadWrite(rules, config, diffed, next, { sha, bytes, overlay, absorbed, lap });
    } finally {
      next?.program.close(); // a no-op once filled (#swapProgram)
    }
  }

  /** #reload from the table write on: the tables, the links (and a new program), then the rule set and the state file. */
  async #reloadWrite(
    rules: RuleSet,
    config: Config,
    diffed: RuleSetChanges,
    next: NewObject | undefined,
    o: { sha: string; bytes: Buffer; overlay: Overlay; absorbed: string[]; lap: (phase: string) => void },
  ): Promise<ReloadResult> {
    const { sha, bytes, overlay, absorbed, lap } = o;
    // The object file was read (and a new one loaded) in turns of the loop: a stop meanwhile closed the data plane.
    this.#stillRunning();
    const old = this.dataplane;
    let result: { added: number; replaced: number; deleted: number; unchanged: number; split?: boolean };
    /** The next-hop cache's ids of the rules the edit deletes (set when only the edit is written: the cache then re-points only its rules). */
    let nhGone: number[] | undefined;
    // The tables are written by the running data plane, also when a new program is swapped in below: the
    // new program then finds them as they should be, and if an interface refuses it, the running data
    // plane, whose view of the tables this write kept true, puts them back (#restoreTables).
    if (this.#tablesDirty) {
      // A failed reload could not put the tables back: written whole (keeping entries no rule lists while BGP may learn them again).
      const effective = await rules.effectiveYielding();
      // Made in turns of the loop: a stop meanwhile closed the data plane.
      this.#stillRunning();
      try {
        // In slices: written at once it waited for every replace's grace period on the loop (found in review, session 43).
        result = await old.syncYielding(effective, { keep: this.config.bgp !== undefined });
      } catch (e) {
        // The tables stay out of step (the next reload tries again); a full table is the file's, 409.
        throw tablesError(e);
      }
      this.#tablesDirty = false;
      this.#stillRunning();
    } else {
      // Only what the edit changed is written; the rest of the tables already hold this set's rules.
      const { changes, same } = diffed;
      const learned = RULE_KIND_LIST.reduce((n, k) => n + rules.learned(k.kind).size, 0);
      let r: { added: number; replaced: number; deleted: number; unchanged: number; split: boolean };
      // Before the deletes free their ids (a read only: nothing to undo if the write fails).
      if (this.#nhIncremental(config)) {
        nhGone = await this.#nhDeleted(changes);
        // It gave the loop turns: a stop meanwhile closed the data plane.
        this.#stillRunning();
      }
      const effective = await rules.effectiveYielding();
      // Made in turns of the loop: a stop meanwhile closed the data plane.
      this.#stillRunning();
      try {
        r = await old.update(effective, changes);
      } catch (e) {
        if (!old.rules.closed) await this.#restoreTables(rules); // part of it may be in
        // A full table, too many prefix lengths: the file's, 409 (before: 500, "internal").
        throw tablesError(e);
      }
      result = { ...r, unchanged: r.unchanged + same + learned };
      // Written in turns of the loop: a stop meanwhile closed the data plane.
      this.#stillRunning();
    }
    lap('tables');
    if (JSON.stringify(config.bgp ?? null, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)) !== JSON.stringify(this.config.bgp ?? null, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))) {
      this.#log.warn({ file: config.file }, 'the bgp section changed: that takes effect at the next restart (advertised local SIDs are updated now)');
    }
    let ifaces: ReloadResult['interfaces'];
    let programReplaced: boolean;
    try {
      // A new object file (an upgrade) is loaded on these tables and swapped in on every link; else the same
      // program goes on the interfaces the edit adds. Refused on an interface (it does not take native XDP,
      // another program is on it): the links, the program and (below) the tables are put back as they were.
      programReplaced = next !== undefined;
      ifaces = next === undefined ? this.#attachOrPutBack(config, old.progFd) : this.#swapProgram(next, rules, config);
    } catch (e) {
      await this.#restoreTables(rules);
      throw e;
    }
    // The new program's next-hop cache maps are new: every rule is indexed again (#nexthops below).
    if (programReplaced) nhGone = undefined;
    this.#rules = rules;
    this.#configLoadedAt = new Date();
    this.#configSha = sha;
    const deflated = deflatedFile(config);
    if (deflated !== undefined) this.#configText.setDeflated(deflated, config);
    else void this.#configText.setSoon(bytes, config);
    // The state file now names this file (and the records' bases are its rules).
    await this.#tidyStateInSlices('reload');
    this.#stoppedAfterApply();
    lap('state');
    // The replaced rules are collected before the answer, and the compacting collection asked for after it
    // (reload()). The parse's garbage went with its thread.
    if (nhGone !== undefined) {
      // As for an API change: the edit's rules re-pointed, in pieces; the other rules keep their next hops.
      // The reload is done (rule set, tables, state file): a cache that cannot take the edit (its slots
      // exhausted, a map write refused) indexes every rule again instead of failing it.
      try {
        await this.#nhPut(diffed.changes, nhGone);
      } catch (e) {
        this.#log.warn({ error: (e as Error).message }, 'next-hop cache: the reload\'s rules could not be re-pointed alone; resolving every rule again');
        this.#nexthops();
      }
    } else this.#nexthops();
    this.#bgp?.readvertise();
    this.#bgp?.rulesChanged();
    lap('rest');
    const { split, ...counts } = result;
    return {
      ...counts,
      configChanged: true,
      programReplaced,
      apiChanges: overlaySize(overlay),
      absorbed,
      interfaces: ifaces,
      ...(split === true ? { deletesFirst: true as const } : {}),
    };
  }

  /**
   * A reload of the file as last loaded (the same sha256): it says what it
   * said, so nothing is parsed, checked or diffed again (with 131,072 rules
   * that held the daemon for 2.3 s). The rule set stays the running one; a
   * new object file is still swapped in, configured interfaces that have
   * appeared are attached, the state file is tidied.
   */
  async #reloadSame(check: boolean): Promise<ReloadResult> {
    const rules = this.#rules;
    const config = rules.config;
    this.#logConfigWarnings(config);
    const apiChanges = overlaySize(rules.overlay);
    const total = RULE_KIND_LIST.reduce((n, k) => n + rules.rules(k.kind).size + rules.learned(k.kind).size, 0);
    const same = { added: 0, replaced: 0, deleted: 0, unchanged: total, configChanged: false, apiChanges, absorbed: [] };
    if (check) {
      const missing = (config.interfaces ?? []).filter((i) => !this.#ifExists(i.name)).map((i) => i.name);
      return { ...same, unchanged: RULE_KIND_LIST.reduce((n, k) => n + rules.rules(k.kind).size, 0), programReplaced: false, checked: true, diff: [], interfaces: { attached: [], detached: [], missing } };
    }
    const next = await this.#loadNewObject(config.settings);
    let swapped: ReloadResult['interfaces'] | undefined;
    try {
      this.#stillRunning(); // read (and loaded) in turns of the loop
      swapped = next === undefined ? undefined : this.#swapProgram(next, rules, config);
    } finally {
      next?.program.close(); // a no-op once filled
    }
    const ifaces = swapped ?? this.#attachOrPutBack(config, this.dataplane.progFd);
    this.#configLoadedAt = new Date();
    await this.#tidyStateInSlices('reload');
    this.#stoppedAfterApply();
    if (swapped !== undefined) {
      this.#nexthops();
      this.#bgp?.readvertise();
    }
    return { ...same, programReplaced: swapped !== undefined, interfaces: ifaces };
  }

  /**
   * The object file's program if the file is not the running program's (its
   * sha256): loaded (the kernel's verifier) on a thread of its own, on the
   * running tables, not filled yet. Undefined when the object is the running
   * one. A load the kernel refuses throws, with the verifier's words.
   */
  async #loadNewObject(settings: Settings): Promise<NewObject | undefined> {
    const sha = sha256(await readFileShared(this.objectPath));
    if (sha === this.#objectSha) return undefined;
    this.#stillRunning(); // read in turns of the loop: a stop meanwhile closed the tables
    const old = this.dataplane;
    const reuse = { policies: old.maps.policies, localsids: old.maps.localsids, counters: old.maps.counters, sessions: old.maps.sessions };
    let program: LoadedProgram;
    try {
      program = await loadProgramAsync({ object: this.objectPath, settings, reuse });
    } catch (e) {
      this.#stillRunning();
      // The worker's load has no libbpf log: loaded again here for the verifier's words (loaded only: no
      // table is filled, so no counter slot of the running tables is touched).
      loadProgram({ object: this.objectPath, settings, reuse }).close();
      throw e;
    }
    if (this.#stopped) {
      program.close();
      this.#stillRunning();
    }
    return { program, sha };
  }

  /**
   * A reload's new object file (#loadNewObject), filled on the running
   * tables, which hold `rules` already (the running data plane wrote them),
   * and swapped in on every link. Refused on an interface: every link runs
   * the running program again, as the running config has them, the new
   * program is unloaded, and the running data plane stays (the error is
   * thrown).
   */
  #swapProgram(next: NewObject, rules: RuleSet, config: Config): ReloadResult['interfaces'] {
    const old = this.dataplane;
    // Deletes still in their grace period: their slots retired under their functions now. The new tables
    // would find them non-zero and zero them, a local SID's without knowing its function (its packets
    // gone from the totals).
    this.#settleTables(old);
    // The fill finds every entry as the running data plane wrote it and writes none (keepUnlisted: also
    // not a delete of an entry no rule lists, which BGP may learn again; the sweep sees to those). So
    // the running data plane's view of the tables stays true if the new program is refused below.
    const dp = next.program.fill(rules.effective(), { keepUnlisted: true });
    const objectSha = next.sha;
    let ifaces: ReloadResult['interfaces'];
    try {
      ifaces = this.#attachOrPutBack(config, dp.progFd, old.progFd);
    } catch (e) {
      // Nothing runs it now: unloaded; the running data plane keeps the tables.
      dp.close();
      throw e;
    }
    this.#dp = dp;
    this.#watchTables(dp);
    this.#objectSha = objectSha;
    old.close();
    // Every link runs it now: a pin that cannot be replaced does not undo the swap (a restart finds the program through the links).
    try {
      this.pins.pinProg(dp.progFd);
    } catch (e) {
      this.#log.error({ error: (e as Error).message, pin: this.pins.progPath }, 'the new program runs on every interface, but its pin could not be replaced');
    }
    this.#log.info({ object: this.objectPath, sha256: objectSha }, 'new program swapped in on every interface');
    return ifaces;
  }

  /**
   * #attachAll(config) with program `progFd`. If an interface refuses it
   * (no native XDP in its driver, another program on it, an MTU too large),
   * the links are put back as the running config has them, running
   * `runningFd` (the running data plane's program), and the error thrown:
   * the interfaces attached before it are detached again, the links swapped
   * to the new program get the running one back, a link remade in another
   * mode is made again in its own. What cannot be put back is logged; the
   * link check tries it again every second.
   */
  #attachOrPutBack(config: Config, progFd: number, runningFd: number = progFd): ReloadResult['interfaces'] {
    try {
      return this.#attachAll(config, progFd);
    } catch (e) {
      this.#log.warn({ error: (e as Error).message }, 'an interface refused the program: putting the links back as the running config has them');
      let putBack = true;
      try {
        this.#attachAll(this.config, runningFd, (i, e2) => {
          putBack = false;
          this.#log.error({ interface: i.name, mode: i.xdp, error: e2.message }, 'could not put this link back as it was; the link check tries again');
        });
      } catch (e2) {
        putBack = false;
        this.#log.error({ error: (e2 as Error).message }, 'could not put the links back as they were; the link check tries again');
      }
      // The kernel refusing what the edit asks (EBUSY, no native XDP: a LibbpfError, or Pins' error that
      // carries one when it put the old mode back) is the request's to fix: a 409. Anything else stays a 500.
      if (!fromKernel(e)) throw e;
      throw new RuleError(
        `an interface refused the program, so the reload was not applied${putBack ? '' : ' (some links could not be put back as they were: see the log; the link check tries again)'}: ${(e as Error).message}`,
        409,
      );
    }
  }

  // -------------------------------------------------------------------------
  // Running config: show and save

  /**
   * The running config (the file as last loaded, with the API changes in
   * it) as YAML `mup daemon --config` loads as it is; the file's comments
   * kept where its entries still are; with `origins`, each rule's origin as
   * a comment (src/config/running.ts).
   */
  /**
   * The running config as YAML (`mup config show`: GET /v1/config), the
   * YAML given as the bytes of its JSON string (the answer's `yaml`). The
   * rules are gathered in slices in the serial section (a change waits for
   * them, a read does not), the document built on a thread of its own
   * (src/config/running-async.ts: 8 s of the `yaml` package for 131,072
   * rules, which held the event loop in one turn). `signal`: the caller
   * went away; the thread is stopped (RunningConfigAbandoned).
   */
  async runningConfig(o: { origins?: boolean; signal?: AbortSignal } = {}): Promise<{ file: string; sha256: string; apiChanges: number; yamlJson: Buffer }> {
    const { running, file, sha256, apiChanges } = await this.#serial.run(async () => {
      // Gone while waiting for the changes before it: nothing to gather.
      if (o.signal?.aborted === true) throw new RunningConfigAbandoned();
      this.#code.check('config show', (m) => new RuleError(m, 409));
      return { running: await this.#running(), file: this.config.file, sha256: this.#configSha, apiChanges: overlaySize(this.#rules.overlay) };
    });
    const yamlJson = await runningConfigOffLoop(running.held, running.sections, { origins: o.origins === true, asJsonString: true, spans: running.spans, ...(o.signal === undefined ? {} : { signal: o.signal }) });
    return { file, sha256, apiChanges, yamlJson };
  }

  /**
   * What the running config's thread builds from (the caller holds the
   * serial section): the config text held, the running rules
   * (#runningSections), and where each entry of that text is when the
   * block YAML reader read it (the config read from it: its owner; {} for
   * such a file without rules). No spans for any other text (JSON, flow
   * style, a file js-yaml read): the running config is then the
   * document's (src/config/running.ts), not spliced.
   */
  async #running(): Promise<{ held: HeldText; spans: ItemSpans | undefined; sections: CompactSection[] }> {
    const owner = this.#configText.owner as Config | undefined;
    return { held: this.#configText.heldText(), spans: owner === undefined ? undefined : spansForSplice(owner), sections: await this.#runningSections() };
  }

  /**
   * The running rules for the running config's thread, in slices of about
   * SLICE_MS (the caller holds the rule set still: the serial section): a
   * rule that is the file's entry unchanged is its index in the file's
   * section (its `where`), any other its JSON.
   */
  async #runningSections(): Promise<CompactSection[]> {
    const clock = new SliceClock();
    const out: CompactSection[] = [];
    for (const k of RULE_KIND_LIST) {
      const set = this.#rules.rules(k.kind);
      const order = new Int32Array(set.size);
      const rules: RunningRule[] = [];
      const indexOf = (r: Rule | undefined): number | undefined => (typeof r?.where === 'number' ? r.where : undefined);
      let i = 0;
      for (const [key, r] of set) {
        if (clock.tick()) await nextTurn();
        const origin = this.#rules.source(k.kind, key) as 'config' | 'api';
        // The file's own entry, when the running rule is it unchanged.
        const fileIndex = origin === 'config' ? indexOf(this.#rules.fileRule(k.kind, key)) : undefined;
        if (fileIndex !== undefined) {
          order[i++] = fileIndex;
          continue;
        }
        order[i++] = -1 - rules.length;
        rules.push({ key, json: k.json(r), origin, fileIndex: undefined, replacesIndex: origin === 'api' ? indexOf(this.#rules.fileRule(k.kind, key)) : undefined });
      }
      out.push({ section: k.section, order, rules });
    }
    return out;
  }

  /**
   * Write the running config into the daemon's own config file (`mup config
   * save`): the API changes become config. Order (docs/config.md "Save"):
   * 1. the file, atomically (temp, fsync, rename, fsync of the directory);
   * 2. the state file, rewritten for the new file with no changes.
   * A crash between 1 and 2 leaves the old state file on the new config
   * file: at the next start every change in it is one the file now says
   * itself (rebaseOverlay: absorbed), so nothing is lost and nothing applied
   * twice. Refused when the file was edited since it was loaded (saving
   * would undo that edit): reload first.
   */
  saveConfig(): Promise<{ file: string; sha256: string; saved: number }> {
    return this.#serial.run(async () => {
      this.#code.check('config save', (m) => new RuleError(m, 409));
      await this.#store.idle(); // group commit: the changes being synced settle first
      const file = this.#o.configPath;
      /** Refused (409) unless the file is still the one loaded: saving would undo an edit of it. Read a piece at a time, hashed as read. */
      const unedited = async (when: string): Promise<void> => {
        let onDisk: string;
        try {
          onDisk = await sha256OfFile(file);
        } catch (e) {
          throw new RuleError(`cannot read ${file} (${(e as Error).message}); nothing was saved`, 409);
        }
        if (onDisk !== this.#configSha) {
          throw new RuleError(
            `${file} was edited ${when}; saving would undo that edit. Nothing was saved: reload it first (mup reload), or save elsewhere (mup config save --to FILE)`,
            409,
          );
        }
      };
      await unedited('since the daemon loaded it');
      const saved = overlaySize(this.#rules.overlay);
      // Built and read again on threads of their own (the event loop serves meanwhile; changes wait for the save).
      const running = await this.#running();
      const yaml = await runningConfigOffLoop(running.held, running.sections, { origins: false, asJsonString: false, spans: running.spans });
      const config = await parseConfigOffLoop(yaml, file);
      // Made in slices (its constructor was one turn of about 570 ms with 524,288 API rules to save).
      const next = await RuleSet.yielding(config, emptyOverlay());
      next.adoptLearned(this.#rules);
      // What the file says now must be what runs: else nothing is written.
      const diffing = ruleSetDiffAsync(this.#rules, next);
      await this.testDuringSaveDiff?.();
      const differs = await diffing;
      if (differs.length > 0) {
        throw new Error(`the saved config would not give the running rules (${differs.slice(0, 3).join('; ')}); nothing was saved`);
      }
      // Seconds may have passed (the diff gives the loop turns too): the file edited meanwhile, the same refusal;
      // stopped meanwhile (the state file's lock let go), nothing is written. Checked last, with no turn of the
      // loop between the stop check and the write's start (found in review: both came before the diff); a stop
      // while the write runs is SaveStopped below.
      await unedited('while the running config was being made');
      this.#stillRunning();
      // Through a symlink to the file it names, keeping that file's mode and owner. Written and synced on the
      // threadpool and hashed on a thread of its own (the file of 262,144 + 262,144 API rules is 83 MB): the loop
      // serves meanwhile, changes wait in the serial section. An edit of the file during the write is lost to the
      // rename, as it would have been in the one turn this was.
      const target = saveTarget(file);
      const hashing = sha256Soon(yaml);
      try {
        // Stopped while the file was written or hashed (the state file's lock let go): nothing renamed, the check
        // and the rename in one synchronous run. The test hook's promise and the write's are awaited together (a
        // write that fails while the hook waits is not left unhandled).
        const stop = (): Error | undefined => (this.#stopped ? new SaveStopped(file) : undefined);
        await Promise.all([writeFileAtomicSoon(target.path, yaml, target.mode, target.owner, { wait: hashing, stop }), this.testDuringSaveWrite?.()]);
      } catch (e) {
        if (e instanceof SaveStopped) throw e;
        throw new StateWriteError(file, (e as NodeJS.ErrnoException).code ?? 'EIO', `cannot write ${file} (${(e as Error).message}); nothing was saved (the file is as it was)`);
      }
      const sha = await hashing;
      this.#rules = next;
      this.#configSha = sha;
      // Kept as the parser's thread deflated it (a deflate here was a turn of its own), else deflated here.
      const deflated = deflatedFile(config);
      if (deflated !== undefined) this.#configText.setDeflated(deflated, config);
      else this.#configText.set(yaml, config);
      this.#configLoadedAt = new Date();
      // Step 2; if it fails the old state file stays, and is absorbed at the next start or rewritten with the next change.
      this.#tidyState('save');
      this.#log.info({ file, sha256: sha, saved }, 'running config saved into the config file: the API changes are config now');
      return { file, sha256: sha, saved };
    });
  }

  /**
   * Refuse a reload that would take more than daemon.reload_max_delete_share
   * (the value the daemon started with: like the rest of the daemon section,
   * a new value applies from the next start) of the rules out of the
   * tables: a half-written file is valid YAML more often than not.
   */
  #deletionGuard(d: RuleSetChanges, force: boolean): void {
    // Not this.config: that is the file of the last reload, and a reload that set 1 would have turned the guard off for the next.
    const share = this.#reloadMaxDeleteShare;
    const { gone, of: total } = d;
    if (total === 0 || gone <= share * total) return;
    const more = gone > d.goneShown.length ? ` and ${gone - d.goneShown.length} more` : '';
    const msg =
      `reload refused: the config file would delete ${gone} of the ${total} rules (${Math.round((gone / total) * 100)}%, ` +
      `more than daemon.reload_max_delete_share ${share}): ${d.goneShown.join(', ')}${more}. Nothing was changed. A file cut short or half-written? ` +
      'Check it; if the deletions are meant, run mup reload --force (POST /v1/reload?force=true)';
    if (force) {
      this.#log.warn({ deleted: gone, of: total, share }, 'reload deletes more than daemon.reload_max_delete_share of the rules (forced)');
      return;
    }
    throw new RuleError(msg, 409);
  }

  /**
   * Rewrite the state file with the net changes (compaction; atomic). Not a
   * change of its own: when it fails (a full disk) the file stays as it was,
   * with every acknowledged change, and it is tried again later; a file not
   * (yet) for the running config is written with the next change instead.
   */
  #tidyState(when: 'start' | 'reload' | 'compaction' | 'save'): void {
    this.#dropTornTail();
    try {
      this.#rewriteState(this.#dirSyncFailed);
    } catch (e) {
      this.#tidyFailed(when, e);
    }
  }

  /**
   * #tidyState for a reload, without holding the event loop
   * (StateStore.rewriteInSlices: with 262,144 API sessions and as many
   * policies the whole rewrite held it 3.4 s). In the reload's serial
   * section: the overlay does not change until it ends.
   */
  async #tidyStateInSlices(when: 'reload'): Promise<void> {
    this.#dropTornTail();
    try {
      await this.#store.rewriteInSlices(this.#o.instance, this.config.file, this.#configSha, this.#rules.overlay, (kind, key) => this.#rules.base(kind, key), this.#dirSyncFailed);
    } catch (e) {
      this.#tidyFailed(when, e);
    }
  }

  /** A tidy's rewrite stood, but the fsync of its directory failed (logged only: the new file is in place, whole and synced). */
  readonly #dirSyncFailed = (e: Error): void => this.#log.warn({ stateFile: this.stateFile, error: e.message }, 'state file rewritten, but the fsync of its directory failed');

  #dropTornTail(): void {
    if (!this.#tornState) return;
    this.#tornState = false;
    try {
      this.#store.dropTornTail();
    } catch (e) {
      this.#log.warn({ stateFile: this.stateFile, error: (e as Error).message }, 'could not cut the torn line off the state file now; retried before the next change is written');
    }
  }

  #tidyFailed(when: 'start' | 'reload' | 'compaction' | 'save', e: unknown): void {
    const current = this.#store.isFor(this.#configSha);
    this.#log.warn(
      { stateFile: this.stateFile, when, errno: (e as StateWriteError).errno, error: (e as Error).message },
      current
        ? 'could not rewrite (compact) the state file; it is whole and holds every acknowledged change as it is; tried again later'
        : 'could not write the state file for this config; the next API change writes it (and fails until it can)',
    );
  }

  /** Compaction in the background (StateStore.compactSoon): logged when it fails, retried at a later change. */
  #compactState(): void {
    const t0 = performance.now();
    const lines = this.#store.lines;
    this.#store.compactSoon(this.#o.instance, this.config.file, this.#configSha, this.#rules.overlay, (kind, key) => this.#rules.base(kind, key), (e, dirError) => {
      if (dirError !== undefined) this.#log.warn({ stateFile: this.stateFile, error: dirError.message }, 'state file rewritten, but the fsync of its directory failed');
      if (e === 'compacted' || e === 'dropped') {
        this.#log.debug({ stateFile: this.stateFile, ms: Math.round(performance.now() - t0), linesBefore: lines, lines: this.#store.lines }, `state file compaction ${e}`);
        return;
      }
      const errno = e.errno;
      this.#log.warn(
        { stateFile: this.stateFile, when: 'compaction', errno, error: e.message },
        this.#store.isFor(this.#configSha)
          ? 'could not rewrite (compact) the state file; it is whole and holds every acknowledged change as it is; tried again later'
          : 'could not write the state file for this config; the next API change writes it (and fails until it can)',
      );
    });
  }

  /**
   * Group commit (docs/daemon.md): write one change's record now, in the
   * serial section; the promise resolves once an fdatasync shared with the
   * changes written meanwhile has made it durable (the API answers then), or
   * rejects after `undo` ran (newest change first) when that sync failed.
   * Throws StateWriteError when the record cannot be written at all (the
   * caller undoes the change).
   */
  #recordGrouped(line: StateLine | JsonLine, undo: () => void | Promise<void>): Promise<void> {
    const durable = this.#store.commitGrouped(line, undo, this.#o.instance, this.config.file, this.#configSha, this.#rules.overlay, (kind, key) => this.#rules.base(kind, key));
    if (this.#store.wantsCompaction(this.#rules.overlay)) this.#compactState();
    return durable;
  }

  /** The state file written whole from the rules as they are (a failed fsync of its directory to `onDirSync`). */
  #rewriteState(onDirSync: (e: Error) => void): void {
    this.#store.rewrite(this.#o.instance, this.config.file, this.#configSha, this.#rules.overlay, (kind, key) => this.#rules.base(kind, key), onDirSync);
  }

  /**
   * A refused change's rewrite renamed the state file into place before the
   * fsync of its directory failed: the file holds the change the API refuses
   * and undid, and a restart would replay it. Written again from the rules as
   * they are (the change undone), once for all the refusals of this turn (a
   * microtask later: the records that waited for their fdatasync are refused
   * with it, after their undos); if that cannot be done either, the next
   * change writes the file whole (and fails until it can).
   */
  #rewriteRefused(what: string): void {
    // Once for every refusal of this turn: the records waiting for their group's fdatasync when a rewrite
    // failed are refused together, each with inFile, after their undos (a rewrite each was N whole files).
    if (this.#refusedInFile !== undefined) {
      this.#refusedInFile.push(what);
      return;
    }
    this.#refusedInFile = [what];
    const all = this.#refusedInFile;
    queueMicrotask(() => {
      this.#refusedInFile = undefined;
      this.#rewriteRefusedNow(all.join('; '));
    });
  }

  /** The refusals #rewriteRefused writes the file again for, once this turn's microtasks have run. */
  #refusedInFile: string[] | undefined;

  #rewriteRefusedNow(what: string): void {
    try {
      this.#rewriteState((e) =>
        this.#log.error({ stateFile: this.stateFile, change: what, error: e.message }, 'state file written again without the refused change, but the fsync of its directory failed again'),
      );
    } catch (e) {
      this.#store.forgetFile();
      this.#log.error(
        { stateFile: this.stateFile, change: what, error: (e as Error).message },
        'the state file holds a change that was refused (its directory could not be synced), and could not be written again without it; the next API change writes it whole',
      );
    }
  }

  /** The error for a change that could not be recorded (undone already): 507 / 503, the file and errno named. */
  #notSaved(e: unknown, what: string): Error {
    // Its undo wrote the tables back (rules on other ids, ids freed) without the next-hop cache: every rule indexed again.
    this.#resolveAllNextHops(what);
    if (e instanceof StateWriteError && e.inFile) this.#rewriteRefused(what);
    if (!(e instanceof StateWriteError)) return new Error(`could not save the state file ${this.stateFile} (${(e as Error).message}); the change was undone`);
    this.#log.warn({ stateFile: e.file, errno: e.errno, change: what, error: e.message }, 'API change refused: the state file could not be written; undone');
    const hint = e.status === 507 ? 'free space on its filesystem and try again' : 'check the file and its filesystem, then try again';
    return new StateWriteError(e.file, e.errno, `${e.message} [${e.errno}]: the change was not saved, so it was undone (tables and rules as before); ${hint}`);
  }

  // -------------------------------------------------------------------------
  // Rules through the API

  listRules(kind: RuleKind): ListedRule[] {
    return [...this.ruleMap(kind).values()].map((r) => this.listedRule(kind, r));
  }

  /** The rules of one kind, by key, as they are now, the learned ones (BGP) after the others (a live view: the API pages and streams from it). */
  ruleMap(kind: RuleKind): ReadonlyMap<string, Rule> {
    const learned = this.#rules.learned(kind);
    return learned.size === 0 ? this.#rules.rules(kind) : new UnionMap(this.#rules.rules(kind), learned);
  }

  /** One rule as GET /v1/policies (...) lists it: its config keys, where it came from, its counter slot. */
  listedRule(kind: RuleKind, r: Rule): ListedRule {
    const k = RULE_KINDS[kind];
    // k.json makes a fresh object: the two fields go on it (a spread into another object doubled what a listing allocates).
    const j = k.json(r) as ListedRule;
    j.origin = this.#rules.source(kind, k.key(r));
    j.rule = k.ruleId(this.dataplane.rules, r) ?? null;
    return j;
  }

  /**
   * The counters of one rule (GET /v1/counters?rule=, mup stats --rule), by
   * name or key, from one read of the counter map; undefined when no rule
   * of that kind has it. The rule's own slot only (one lookup).
   */
  ruleCounters(kind: RuleKind, by: { key?: string; name?: string }): { at: string; key: string; rule: RuleCounter | null } | undefined {
    // Config and API rules first, then the learned ones (BGP): their counters are read the same way.
    const key = this.#rules.find(kind, by) ?? this.#rules.findLearned(kind, by);
    if (key === undefined) return undefined;
    const r = this.ruleMap(kind).get(key)!;
    return { at: new Date().toISOString(), key, rule: this.dataplane.ruleCounter(kind, r) ?? null };
  }

  /**
   * A single change may write now: no failed sync's undo runs (a batch's
   * writes back in slices: a write between two would land under its plan
   * and be put back by it), and the grace period its write needs is over.
   * The undo may start during the grace wait: looked at again after it.
   */
  async #writable(op: 'put' | 'delete', c?: Changes): Promise<void> {
    do {
      await this.#store.undone();
      await this.#dp?.rules.writable(op, c);
    } while (this.#store.undoing);
  }

  /** A failed sync's records are being undone (StateStore.undoing): health does not compare tables and rules meanwhile. */
  get undoing(): boolean {
    return this.#store.undoing;
  }

  /** Resolves once no undo runs, or after `ms` (a stop waits for it: serve.ts). */
  async undone(ms: number): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      await Promise.race([this.#store.undone(), new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Add (op add) or replace (op replace) one rule: tables, then state file;
   * undone if the state cannot be saved. Answered once its record is durable
   * (group commit: the fdatasync is shared with the changes written meanwhile).
   */
  async putRule(kind: RuleKind, body: unknown, op: 'add' | 'replace', by?: string): Promise<RuleJson> {
    const { durable, rule, key, json } = await this.#serial.run(async () => {
      // The grace period the write needs, awaited here rather than inside the tables (src/dataplane/grace.ts).
      await this.#writable('put');
      const k = RULE_KINDS[kind];
      const rule = this.#rules.check(kind, body, op);
      const key = k.key(rule);
      const tagged: Rule = placed(rule, API_WHERE);
      const previous = this.#rules.rules(kind).get(key);
      const t = this.dataplane.rules;
      this.#tables(t, k.put([tagged]), previous === undefined ? k.del([rule]) : k.put([previous]), `${op} ${kind} ${key}`);
      const before = this.#snapshotOverlay(kind, key);
      this.#rules.put(kind, tagged);
      // Put the tables and the set back as they were (the set whatever the tables do).
      const undo = (): void => {
        this.#undoTables(t, previous === undefined ? k.del([rule]) : k.put([previous]), `${op} ${kind} ${key}`);
        if (previous === undefined) this.#rules.delete(kind, key);
        else this.#rules.put(kind, previous);
        before();
      };
      try {
        return { durable: this.#recordGrouped({ put: kind, rule: k.json(tagged), base: this.#rules.base(kind, key) }, undo), rule, key, json: k.json(tagged) };
      } catch (e) {
        undo();
        throw this.#notSaved(e, `${op} ${kind} ${key}`);
      }
    });
    try {
      await durable;
    } catch (e) {
      throw this.#notSaved(e, `${op} ${kind} ${key}`);
    }
    this.#log.info({ kind, key, op, name: rule.name, by }, op === 'add' ? 'rule added' : 'rule replaced');
    this.#bgp?.rulesChanged(); // a replace may free a name a refused learned rule wants
    return json;
  }

  async deleteRule(kind: RuleKind, by: { key?: string; name?: string }, who?: string): Promise<RuleJson> {
    const { durable, key, previous } = await this.#serial.run(async () => {
      await this.#writable('delete');
      const k = RULE_KINDS[kind];
      let key: string | undefined;
      try {
        key = this.#rules.find(kind, by);
      } catch (e) {
        throw new RuleError((e as Error).message, 400);
      }
      if (key === undefined) {
        const learned = by.key === undefined ? undefined : this.#rules.learned(kind).has(canonicalKeyOf(kind, by.key)) ? by.key : undefined;
        if (learned !== undefined || (by.name !== undefined && [...this.#rules.learned(kind).values()].some((r) => r.name === by.name))) {
          throw new RuleError(learnedDeleteText(kind), 409, 'learned');
        }
        const by2 = by.name !== undefined ? `named ${JSON.stringify(by.name)}` : `with ${k.keyName} ${by.key ?? ''}`;
        throw new RuleError(`no ${k.label} ${by2}; list them with mup ${k.cliVerb} list`, 404);
      }
      const found = key;
      const previous = this.#rules.rules(kind).get(key)!;
      // The grace period this very delete needs (a /32 policy's may be a replace: Tables.graceNeeded), awaited
      // here with the loop running, not in the write.
      const del = k.del([previous]);
      await this.#writable('delete', del);
      const t = this.dataplane.rules;
      this.#tables(t, del, k.put([previous]), `delete ${kind} ${key}`);
      const before = this.#snapshotOverlay(kind, key);
      this.#rules.delete(kind, key);
      const undo = (): void => {
        this.#undoTables(t, k.put([previous]), `delete ${kind} ${key}`);
        this.#rules.put(kind, previous);
        before();
      };
      try {
        return { durable: this.#recordGrouped({ del: kind, key, base: this.#rules.base(kind, key) }, undo), key: found, previous };
      } catch (e) {
        undo();
        throw this.#notSaved(e, `delete ${kind} ${key}`);
      }
    });
    try {
      await durable;
    } catch (e) {
      throw this.#notSaved(e, `delete ${kind} ${key}`);
    }
    this.#log.info({ kind, key, name: previous.name, by: who }, 'rule deleted');
    this.#bgp?.rulesChanged(); // its key and name are free for a refused learned rule
    return RULE_KINDS[kind].json(previous);
  }

  /**
   * POST /v1/batch: validate every operation against the rule set (nothing
   * touched), then one table write (Tables.applyYielding: in slices, each
   * replace's grace period awaited), the rule set's update and the next-hop
   * cache's, then one state-file record; a record that cannot be written
   * undoes the tables and the set (src/daemon/batch.ts). Between slices
   * the daemon answers reads, which see the batch part done.
   */
  async applyBatch(ops: readonly unknown[], by?: string): Promise<BatchAnswer> {
    // Nothing to do: no record and no fdatasync (an empty {"batch":[]} record was written and synced before);
    // a daemon that is stopping says so, as for any batch.
    if (ops.length === 0) {
      this.#stillRunning();
      return { results: [], added: 0, replaced: 0, deleted: 0 };
    }
    batchStarted();
    try {
      return await this.#applyBatch(ops, by);
    } finally {
      batchEnded();
      // Its garbage (the body, the plan, the record; a refused batch's too): marked and freed once no batch
      // follows closely, compacted in the next quiet second.
      if (ops.length >= RELEASE_AFTER_BATCH_OPS) {
        collectAfterBatches();
        releaseMemoryWhenQuiet();
      }
    }
  }

  async #applyBatch(ops: readonly unknown[], by?: string): Promise<BatchAnswer> {
    const ms = { wait: 0, plan: 0, tables: 0, rules: 0, record: 0, durable: 0 };
    let deletesFirst = false;
    const tIn = performance.now();
    // A background compaction walking the overlay waits while the batch holds the serial section: the batch changes
    // the overlay over many turns before its one record (or its undo), which the walk must not meet without it.
    const { durable, plan } = await this.#serial.run(() =>
      this.#store.holdingCompaction(async () => {
        await this.#dp?.rules.writable('put');
        // Group commit: no earlier change's fdatasync may fail (and run its undo, a table write) in the middle of this write.
        await this.#store.idle();
        const t0 = performance.now();
        ms.wait = t0 - tIn;
        const plan = await planBatchYielding(this.#rules, ops);
        this.#stillRunning();
        const t = this.dataplane.rules;
        const t1 = performance.now();
        // The next-hop cache's ids of the rules deleted, before the deletes free them; its new rules after the rule set has them.
        const gone = await this.#nhDeleted(plan.changes);
        const writes = t.writes;
        // Each key's overlay entries as they were, to put back if the record cannot be written (the set's rule
        // there is the plan's `before`): per kind, in the plan's order, with no object per key.
        const was: { kind: RuleKind; keys: readonly string[]; befores: readonly (Rule | undefined)[]; puts: (Rule | undefined)[]; dels: Uint8Array; n: number }[] = [];
        const overlay = this.#rules.overlay;
        let t2: number;
        this.#batchUnderWay = true;
        try {
          try {
            // At a full table whose room the batch's own deletes make: its deletes first, then its puts.
            deletesFirst = (await t.applyYieldingRoomFirst(plan.changes)).split;
          } catch (e) {
            await this.#writeFailedSliced(e, t, writes, plan.undo, gone, `batch of ${ops.length} operations`);
            throw tablesError(e);
          }
          t2 = performance.now();
          const slice = new SliceClock();
          for (const [kind, d] of plan.touched) {
            // The set's rule at each key as the plan found it (the set has not changed since: this serial section).
            const { keys, rules, befores } = d;
            const puts = overlay[RULE_KINDS[kind].overlay.put] as Map<string, Rule>;
            const dels = overlay[RULE_KINDS[kind].overlay.del];
            const w = { kind, keys, befores, puts: new Array<Rule | undefined>(keys.length), dels: new Uint8Array(keys.length), n: 0 };
            was.push(w);
            for (let at = 0; at < keys.length; at++) {
              const key = keys[at]!;
              const r = rules[at]!;
              if (slice.tick()) await nextTurn();
              const rule = befores[at];
              // The overlay's put entries are API rules the set holds: none at a key where the set held no rule.
              w.puts[at] = rule === undefined ? undefined : puts.get(key);
              w.dels[at] = dels.size !== 0 && dels.has(key) ? 1 : 0;
              w.n = at + 1;
              if (r === null) this.#rules.delete(kind, key, foundRule(rule));
              else this.#rules.put(kind, r, foundRule(rule), key);
            }
          }
        } finally {
          this.#batchUnderWay = false;
        }
        // The batch is in (tables and rule set): a cache that cannot take it indexes every rule again, as after a reload.
        try {
          await this.#nhPut(plan.changes, gone);
        } catch (e) {
          this.#log.warn({ error: (e as Error).message }, "next-hop cache: the batch's rules could not be re-pointed alone; resolving every rule again");
          this.#resolveAllNextHops(`batch of ${ops.length} operations`);
        }
        // In slices, its grace periods waited for with the loop running (StateStore: no other write meanwhile).
        const undo = async (): Promise<void> => {
          try {
            await t.applyYieldingRoomFirst(plan.undo);
          } catch (e) {
            // The rule set is put back all the same (below: it is what the state file says); tables that refused
            // their write back are out of step with it until the next reload writes them whole.
            if (!t.closed) {
              this.#tablesDirty = true;
              this.#log.error(
                { change: `batch of ${ops.length} operations`, error: (e as Error).message },
                'API change refused (its record could not be made durable), and writing the tables back failed; the next reload writes them whole',
              );
            }
          }
          // The set first, then the overlay entries as they were (the set's put/delete touch them).
          for (let i = was.length - 1; i >= 0; i--) {
            const w = was[i]!;
            for (let at = w.n - 1; at >= 0; at--) {
              const rule = w.befores[at];
              if (rule === undefined) this.#rules.delete(w.kind, w.keys[at]!);
              else this.#rules.put(w.kind, rule);
            }
          }
          for (let i = was.length - 1; i >= 0; i--) {
            const w = was[i]!;
            const puts = overlay[RULE_KINDS[w.kind].overlay.put] as Map<string, Rule>;
            const dels = overlay[RULE_KINDS[w.kind].overlay.del];
            for (let at = w.n - 1; at >= 0; at--) {
              const key = w.keys[at]!;
              const put = w.puts[at];
              if (put === undefined) puts.delete(key);
              else puts.set(key, put);
              if (w.dels[at] === 1) dels.add(key);
              else dels.delete(key);
            }
          }
        };
        const t3 = performance.now();
        // Stopped during the write (the state file closed, its lock let go): not recorded, so not acknowledged; the next start writes the tables from the state file.
        this.#stillRunning();
        try {
          return { durable: this.#recordGrouped(plan.line, undo), plan };
        } catch (e) {
          await undo();
          throw this.#notSaved(e, `batch of ${ops.length} operations`);
        } finally {
          Object.assign(ms, { plan: t1 - t0, tables: t2 - t1, rules: t3 - t2, record: performance.now() - t3 });
        }
      }),
    );
    const tRecorded = performance.now();
    try {
      await durable;
    } catch (e) {
      throw this.#notSaved(e, `batch of ${ops.length} operations`);
    }
    ms.durable = performance.now() - tRecorded;
    this.#log.info({ operations: ops.length, ...plan.counts, by, ...(deletesFirst ? { deletesFirst } : {}), ms: roundAll(ms) }, 'batch applied');
    this.#bgp?.rulesChanged();
    return { results: plan.results, ...plan.counts, ...(deletesFirst ? { deletesFirst } : {}) };
  }

  /**
   * Table errors that are the caller's (full, too many lengths) become 409s.
   * `reverse` (an API change): what puts the tables back as they were if the
   * write fails part way (#writeFailed).
   */
  /**
   * A single change's undo, its table part (its record could not be made
   * durable). A write back the kernel refuses leaves the tables out of step
   * (the next reload writes them whole, health says so), and the caller puts
   * the rule set back all the same: before, the throw skipped that, and the
   * refused change stayed in the rule set, to be written to the state file
   * by the next rewrite (found in review, session 42).
   */
  #undoTables(t: Tables, c: Changes, what: string): void {
    try {
      t.apply(c);
    } catch (e) {
      if (t.closed) return;
      this.#tablesDirty = true;
      this.#log.error({ change: what, error: (e as Error).message }, 'API change refused (its record could not be made durable), and writing the tables back failed; the next reload writes them whole');
    }
  }

  /** #tables without a put-back, written in slices (Tables.applyYielding): grace periods waited for with the loop running. */
  async #tablesYielding(t: Tables, c: Changes, what = 'BGP learned rules'): Promise<ApplyResult> {
    const gone = this.#nh?.deletedRules(c) ?? [];
    let r: ApplyResult;
    try {
      r = await t.applyYielding(c);
    } catch (e) {
      throw tablesError(e);
    }
    this.#nhRulesPut(c, gone, what);
    return r;
  }

  /** A change is in the tables: the next-hop cache re-points its rules; one that cannot take it indexes every rule again instead of failing it. */
  #nhRulesPut(c: Changes, gone: readonly number[], what: string): void {
    try {
      this.#nh?.rulesPut(c, gone);
    } catch (e) {
      this.#log.warn({ change: what, error: (e as Error).message }, 'next-hop cache: the rules of a change could not be re-pointed alone; resolving every rule again');
      this.#resolveAllNextHops(what);
    }
  }

  #tables(t: Tables, c: Changes, reverse?: Changes, what = 'change'): ApplyResult {
    // The next-hop cache re-points only these rules (their ids before the deletes free them).
    const gone = this.#nh?.deletedRules(c) ?? [];
    const writes = t.writes;
    let r: ApplyResult;
    try {
      r = t.apply(c);
    } catch (e) {
      if (reverse !== undefined) this.#writeFailed(e, t, writes, reverse, gone, what);
      throw tablesError(e);
    }
    this.#nhRulesPut(c, gone, what);
    return r;
  }

  /**
   * An API change's table write failed (`e`). One that wrote nothing (the
   * tables' write count is still `writesBefore`: a full table, too many
   * prefix lengths, a key given twice, tables closed) has nothing to put
   * back, nor one whose tables were closed meanwhile (the daemon stopping:
   * the next start writes them from the state file). Any other failure (the
   * kernel refusing a write) may come after part of the change is in: the
   * entries deleted before it (a batch's earlier delete chunks) and the
   * entries added. The rule set does not take the change, so `reverse` puts
   * the tables back to it, written as a change (a key the failed write
   * never reached is unchanged and is not written again). Entries written
   * back get other rule ids (their counters start at zero), and the ids of
   * the rules the change was to delete may be among them: those ids point
   * at no next hop first (the kernel's FIB lookup, also for such a rule the
   * write never reached; the data path would not use a deleted rule's next
   * hop for another rule anyway, it checks the slot's range against the
   * packet's: bpf/fwd.h), then the next-hop cache indexes every rule again
   * (forwarding fib). If the reverse fails too, the next reload writes the
   * tables whole. Never throws: the change's own error is the one to answer.
   *
   * This one for a single change (a rule or two), at once, before its
   * error is thrown; #writeFailedSliced for a batch.
   */
  #writeFailed(e: unknown, t: Tables, writesBefore: number, reverse: Changes, gone: readonly number[], what: string): void {
    if (t.writes === writesBefore || t.closed) return;
    try {
      this.#nh?.rulesPut({}, gone);
    } catch {
      // The full pass after the put-back points every rule anew.
    }
    let r: ApplyResult | undefined;
    let e2: unknown;
    try {
      r = t.apply(reverse);
    } catch (x) {
      e2 = x;
    }
    this.#putBackDone(e, t, r, e2, what);
  }

  /** #writeFailed for a batch: the next-hop pointers and the reverse written in slices, the event loop running (its grace periods awaited). Never rejects. */
  async #writeFailedSliced(e: unknown, t: Tables, writesBefore: number, reverse: Changes, gone: readonly number[], what: string): Promise<void> {
    if (t.writes === writesBefore || t.closed) return;
    try {
      await this.#nhPut({}, gone);
    } catch {
      // The full pass after the put-back points every rule anew.
    }
    let r: ApplyResult | undefined;
    let e2: unknown;
    try {
      r = await t.applyYieldingRoomFirst(reverse);
    } catch (x) {
      e2 = x;
    }
    this.#putBackDone(e, t, r, e2, what);
  }

  /** The put-back's end: logged, the tables marked for a whole write if it failed, every rule's next hop resolved again. Never throws. */
  #putBackDone(e: unknown, t: Tables, r: ApplyResult | undefined, e2: unknown, what: string): void {
    const text = (x: unknown): string => (x instanceof Error ? x.message : String(x));
    try {
      if (r !== undefined) {
        this.#log.warn({ change: what, error: text(e), putBack: { added: r.added, replaced: r.replaced, deleted: r.deleted } }, 'API change refused: its table write failed part way; the tables are back as they were');
      } else if (!t.closed) {
        this.#tablesDirty = true;
        this.#log.error(
          { change: what, error: text(e), putBack: text(e2) },
          'API change refused: its table write failed part way, and putting the tables back failed too; the next reload writes them whole',
        );
      }
    } catch {
      // A log that cannot be written: the change's error is still answered.
    }
    this.#resolveAllNextHops(what);
  }

  /** #nexthops() on a failure path: its own failure logged, never thrown over the error being handled. */
  #resolveAllNextHops(what: string): void {
    try {
      this.#nexthops();
    } catch (x) {
      try {
        this.#log.error({ change: what, error: x instanceof Error ? x.message : String(x) }, 'next-hop cache: could not start resolving every rule again');
      } catch {
        // nothing more to do
      }
    }
  }

  /** A batch's half of #tables before the write: the next-hop cache's ids of the rules it deletes, NH_CHUNK rules between two checks of the slice. */
  async #nhDeleted(c: Changes): Promise<number[]> {
    const gone: number[] = [];
    const nh = this.#nh;
    if (nh === undefined) return gone;
    const clock = new SliceClock();
    for (const piece of changePieces(c, NH_CHUNK)) {
      if (clock.due()) await nextTurn();
      for (const id of nh.deletedRules(piece)) gone.push(id);
    }
    return gone;
  }

  /**
   * A batch's half of #tables after the write and the rule set's update: its
   * rules pointed at their next hops (`gone` at none), in pieces. After the
   * rule set, so that a full pass starting meanwhile indexes the batch's
   * rules from the set (or takes these as pending); until then a new rule
   * points nowhere: the kernel's FIB lookup forwards its packets.
   */
  async #nhPut(c: Changes, gone: readonly number[]): Promise<void> {
    const nh = this.#nh;
    if (nh === undefined) return;
    const clock = new SliceClock();
    for (const [piece, goneNow] of nhPutPieces(c, gone, NH_CHUNK)) {
      if (clock.due()) await nextTurn();
      nh.rulesPut(piece, goneNow);
    }
  }

  /** Throws if the daemon was stopped (during a turn a batch gave the event loop). */
  #stillRunning(): void {
    if (this.#stopped) throw new Error('the daemon stopped during the change; it was not saved');
  }

  /**
   * A stop while a reload wrote its state file in slices (the stop's close
   * of the store dropped the rewrite): the tables and the rule set hold the
   * new file already, the state file still names the old one. Nothing more
   * is started (next hops, BGP), and the reload is not counted or logged as
   * done, nor as one that left the tables unchanged (ReloadStoppedAfterApply).
   */
  #stoppedAfterApply(): void {
    if (this.#stopped) throw new ReloadStoppedAfterApply();
  }

  /** A function that restores the overlay entries of one key as they are now. */
  #snapshotOverlay(kind: RuleKind, key: string): () => void {
    const o = this.#rules.overlay;
    const put = o[RULE_KINDS[kind].overlay.put] as Map<string, Rule>;
    const del = o[RULE_KINDS[kind].overlay.del];
    const hadPut = put.get(key);
    const hadDel = del.has(key);
    return () => {
      if (hadPut === undefined) put.delete(key);
      else put.set(key, hadPut);
      if (hadDel) del.add(key);
      else del.delete(key);
    };
  }

  // -------------------------------------------------------------------------
  // Counters and status

  /**
   * Counters now, from one read of the counter map (Dataplane.counters).
   * `rules`: 'all' (default), 'active' (rules that have translated packets),
   * 'none', or at most N rules in config order.
   */
  counters(rules: RuleSelection = 'all'): CountersSnapshot {
    const c = this.countersRows(rules);
    return { at: c.at, events: c.events, rules: [...c.rules], functions: c.functions };
  }

  /**
   * counters() for an answer streamed row by row (GET /v1/counters): the
   * rules' figures are read now, each rule's object made as the answer
   * reaches it (src/host/rows.ts).
   */
  countersRows(rules: RuleSelection = 'all'): Omit<CountersSnapshot, 'rules'> & { readonly rules: RuleCounterRows } {
    // A thunk: the rule lists are built only when rules are listed (a default /metrics scrape lists none).
    const c = this.dataplane.countersRows(() => this.#rules.effective(), { rules });
    return { at: new Date().toISOString(), events: c.events, rules: c.rules, functions: c.functions };
  }

  /**
   * countersRows() built in slices, the event loop answering between them
   * (GET /v1/counters: 131,072 rules listed in one turn held it 100-440 ms);
   * changes run between the slices (Dataplane.countersRowsAsync).
   */
  async countersRowsAsync(rules: RuleSelection = 'all'): Promise<Omit<CountersSnapshot, 'rules'> & { readonly rules: RuleCounterRows }> {
    const dp = this.dataplane;
    let c: Awaited<ReturnType<Dataplane['countersRowsAsync']>>;
    try {
      c = await dp.countersRowsAsync(() => this.#rules.effective(), { rules });
    } catch (e) {
      // A reload that loaded a new program closed the data plane the read began on: read the new one.
      if (this.#stopped || this.#dp === undefined || this.#dp === dp) throw e;
      c = await this.#dp.countersRowsAsync(() => this.#rules.effective(), { rules });
    }
    return { at: new Date().toISOString(), events: c.events, rules: c.rules, functions: c.functions };
  }

  /** Zero every counter slot (events and rules). */
  resetCounters(): Promise<void> {
    return this.#serial.run(() => {
      this.dataplane.resetCounters();
      this.#log.info({}, 'counters reset');
    });
  }

  status(): DaemonStatus {
    const dp = this.dataplane;
    // What runs, from the kernel (the program this daemon holds, the links
    // it holds on the current devices), not from the pins.
    const prog = this.#program();
    const interfaces = (this.config.interfaces ?? []).map((i): InterfaceStatus => ({ name: i.name, mode: i.xdp, ...this.#links.state(i) }));
    const s = dp.config.settings;
    return {
      instance: this.#o.instance,
      version: this.#version,
      pid: process.pid,
      startedAt: this.startedAt.toISOString(),
      uptimeSeconds: Math.round((Date.now() - this.startedAt.getTime()) / 1000),
      adopted: this.#adopted,
      object: { path: this.objectPath, sha256: this.#objectSha },
      program: prog,
      pins: this.pins.dir,
      config: { file: this.config.file, sha256: this.#configSha, loadedAt: this.#configLoadedAt.toISOString() },
      state: { file: this.stateFile, changes: overlaySize(this.#rules.overlay), syncs: this.#store.syncs, records: this.#store.records },
      interfaces,
      tables: {
        policies: { entries: dp.rules.policyCount, capacity: s.maxPolicies },
        localsids: { entries: dp.rules.localsidCount, capacity: s.maxLocalSids },
        sessions: { entries: dp.rules.sessionCount, capacity: s.maxSessions ?? DEFAULT_MAX_SESSIONS },
      },
      forwarding: s.forwarding,
      eventLoop: this.loop.status(),
      nexthops: this.nexthopTotals(),
      grace: { rcuExpedited: rcuExpedited() ?? null, periods: graceClock.runs, seconds: graceClock.seconds, waitSeconds: graceClock.waitedMs / 1000 },
      memory: memoryMB(),
    };
  }

  /** What the next-hop cache did since start (null: forwarding mode is not fib). */
  nexthopTotals(): DaemonStatus['nexthops'] {
    const nh = this.#nh;
    if (nh === undefined) return null;
    const t = nh.totals;
    const l = nh.last;
    return {
      rulesResolved: t.rules,
      fullPasses: t.fullPasses,
      incrementalPasses: t.incrementalPasses,
      apiRules: t.apiRules,
      lostEventResyncs: t.lostEventResyncs,
      failedPasses: t.failedPasses,
      cached: l?.cached ?? null,
      last: l === undefined ? null : { at: l.at, rules: l.rules, full: l.full, ms: l.ms },
    };
  }

  /**
   * Stop after a start refused once takeOver() had run (the HTTP address
   * cannot be bound, the API socket's group): a first start leaves nothing
   * behind (no XDP attached, no pin), as one refused at attach does; a
   * takeover leaves the pinned data plane running (with the program the
   * takeover swapped in), as a stop does. Before, a first start refused there
   * left the program attached and pinned with no daemon to answer for it.
   */
  stopRefusedStart(): void {
    try {
      if (!this.#stopped && this.#firstStart && this.#dp !== undefined) {
        const dp = this.#dp;
        this.#dp = undefined;
        try {
          const removed = this.pins.removeAll();
          this.#log.info({ removed }, 'the start was refused after the data plane was loaded: detached from every interface and removed the pins (nothing ran before it)');
        } finally {
          dp.close();
        }
      }
    } catch (e) {
      this.#log.error({ error: (e as Error).message, pins: this.pins.dir }, 'the start was refused after the data plane was loaded, and its pins could not all be removed');
    } finally {
      this.stop();
    }
  }

  /** Stop: leave the data plane running (default) or take it down (--detach-on-exit). */
  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    // The cache's lease ends now: the running program goes back to the FIB lookup.
    this.#nh?.stop();
    this.loop.stop();
    this.#bgp?.stop();
    clearInterval(this.#linkTimer);
    this.#linkMonitor?.kill('SIGKILL');
    dropEarly(this);
    if (this.#o.detachOnExit === true) {
      const removed = this.pins.removeAll();
      this.#log.info({ removed }, 'detached from every interface and removed the pins');
    } else {
      this.#log.info({ pins: this.pins.dir }, 'stopping; the data plane keeps forwarding (pinned)');
    }
    // Without pins (detach-on-exit) the links go with our descriptors.
    this.#links.releaseAll();
    this.#store.close();
    this.dropPrepared();
    // The tables stay for the next daemon: deletes still in their grace period are settled now, as before a swap.
    if (this.#o.detachOnExit !== true && this.#dp !== undefined) this.#settleTables(this.#dp);
    this.#dp?.close();
    this.unlock();
  }

  /**
   * Warn of local SIDs that changed behaviour in place (no free rule id for
   * a new one): so far (a start's or a swap's fill), and from now on.
   */
  #watchTables(dp: Dataplane): void {
    const warn = (n: number): void =>
      this.#log.warn(
        { localsids: n },
        'local SIDs changed behaviour in place, keeping their rule id (the local SID table had no free id for a new one): ' +
          "the packets they counted before now count under their new function's total; raise settings.max_localsids to keep them apart",
      );
    if (dp.rules.behaviorsChangedInPlace > 0) warn(dp.rules.behaviorsChangedInPlace);
    dp.rules.onBehaviorsChangedInPlace = warn;
  }

  /**
   * Wait for the grace periods the tables owe, and zero the deleted rules'
   * slots (their counts retired under their functions, docs/metrics.md)
   * before other tables take the maps over. A failure is logged: the next
   * tables zero what is left, and a local SID's packets leave its total.
   */
  #settleTables(dp: Dataplane): void {
    try {
      dp.rules.settle();
    } catch (e) {
      this.#log.warn({ err: e }, "deleted rules' counter slots not settled before the tables were handed over: a deleted local SID's packets may leave its function's total");
    }
  }
}

/** Rules of a change the next-hop cache takes between two checks of the time slice (about 1 ms of work here). */
const NH_CHUNK = 512;

/**
 * What #nhPut hands the next-hop cache, a call each: the deleted ids
 * first, then the changes, `n` rules a piece at most (a batch's 10,000
 * deleted ids in one piece held the loop 22 ms).
 */
export function* nhPutPieces(c: Changes, gone: readonly number[], n: number): Generator<[Changes, readonly number[]]> {
  for (let at = 0; at < gone.length; at += n) yield [{}, gone.slice(at, at + n)];
  for (const piece of changePieces(c, n)) yield [piece, []];
}

/** A change's lists in pieces of at most n entries each (every piece a Changes of its own; at least one piece). */
function* changePieces(c: Changes, n: number): Generator<Changes> {
  const lists = ['putPolicies', 'delPolicies', 'putLocalSids', 'delLocalSids', 'putSessions', 'delSessions'] as const;
  let any = false;
  for (const name of lists) {
    const list = c[name] as readonly unknown[] | undefined;
    if (list === undefined) continue;
    for (let at = 0; at < list.length; at += n) {
      any = true;
      yield { [name]: list.slice(at, at + n) } as Changes;
    }
  }
  if (!any) yield {};
}

/**
 * POST /v1/batch's answer. `deletesFirst`: a table was full and the
 * batch's own deletes made the room its new rules needed, so its deletes
 * were written before its puts (Tables.applyYieldingRoomFirst).
 */
export interface BatchAnswer {
  readonly results: BatchResult[];
  readonly added: number;
  readonly replaced: number;
  readonly deleted: number;
  readonly deletesFirst?: true;
}

/** A table error that is the caller's (full, too many lengths) as a 409; others as they are. */
function tablesError(e: unknown): unknown {
  return e instanceof TablesRefusedError ? new RuleError(e.message, 409) : e;
}

/** A rule as the API lists it. */
/** A learned rule not installed (Daemon.applyLearned). */
interface RefusedLearned {
  readonly kind: 'policy' | 'session';
  readonly rule: Rule;
  readonly reason: 'conflict' | 'table';
  readonly why: string;
}

export type ListedRule = RuleJson & { origin: 'config' | 'api' | 'bgp'; rule: number | null };

/** Two maps with no key in common, read as one (the first's entries, then the second's). */
class UnionMap<K, V> implements ReadonlyMap<K, V> {
  constructor(
    readonly a: ReadonlyMap<K, V>,
    readonly b: ReadonlyMap<K, V>,
  ) {}
  get size(): number {
    return this.a.size + this.b.size;
  }
  get(k: K): V | undefined {
    return this.a.get(k) ?? this.b.get(k);
  }
  has(k: K): boolean {
    return this.a.has(k) || this.b.has(k);
  }
  *entries(): MapIterator<[K, V]> {
    yield* this.a.entries();
    yield* this.b.entries();
  }
  *keys(): MapIterator<K> {
    yield* this.a.keys();
    yield* this.b.keys();
  }
  *values(): MapIterator<V> {
    yield* this.a.values();
    yield* this.b.values();
  }
  [Symbol.iterator](): MapIterator<[K, V]> {
    return this.entries();
  }
  forEach(f: (v: V, k: K, m: ReadonlyMap<K, V>) => void): void {
    for (const [k, v] of this.entries()) f(v, k, this);
  }
}

/** Bytes of per-rule counter state, for sizing notes. */
export const RULE_COUNTER_BYTES = LAYOUTS.mup_counter.size;

/** process.memoryUsage() in MB, one decimal: the JS heap, buffers and typed arrays outside it, and the whole. */
function memoryMB(): Record<string, number> {
  const m = process.memoryUsage();
  const mb = (x: number): number => Math.round(x / 1e5) / 10;
  return { rss: mb(m.rss), heapUsed: mb(m.heapUsed), heapTotal: mb(m.heapTotal), external: mb(m.external), arrayBuffers: mb(m.arrayBuffers) };
}
