/**
 * Give back the memory a big load leaves behind. Reading a config of
 * 131,072 rules builds about 150 MB of short-lived objects (the YAML tree);
 * V8 and glibc keep most of that address space until much later. After the
 * start's load the daemon runs a full collection and asks glibc to return
 * free pages (malloc_trim): measured with bench:daemon, about 100 MB less
 * resident memory. A reload parses on a thread of its own, whose heap goes
 * with it; the rules it replaced are collected before it answers (V8's
 * incremental marking: collectBeforeAnswer), and the heap compacted in a
 * second without API requests (releaseMemoryWhenQuiet; when they could not
 * be collected, releaseMemorySoon: forced at 5 s), not in the reload's own
 * time. After a run of large batches, V8's
 * incremental marking once no batch follows closely (collectAfterBatches),
 * and the compacting one in such a second only (releaseMemoryWhenQuiet).
 * The collections in a quiet second also compact V8's heap
 * and give its free pages back (the native addon's compactHeap): a plain
 * one frees the objects of a reload or a batch but keeps the pages. One that
 * cannot wait for a quiet second any longer is V8's incremental marking
 * (the addon's startHeapCollection), not a pause between requests.
 */
import koffi from 'koffi';

/** mallopt(3)'s M_TRIM_THRESHOLD (malloc.h). */
const M_TRIM_THRESHOLD = -1;
/** glibc's own starting value: free memory above this at the top of an arena goes back to the kernel. */
export const MALLOC_TRIM_THRESHOLD = 128 * 1024;

/**
 * Fix glibc's trim threshold at its starting value, first thing in the
 * daemon. Left alone, glibc raises it (with the mmap threshold) each time a
 * block it had mmapped is freed, up to 64 MB: after that no arena gives free
 * memory at its top back. The daemon's threads (V8's compiler and GC, libuv's
 * pool) each have an arena; the soak found them keeping 11-12 MB free in
 * every daemon whose start freed a large block early, 3-6 MB in one that did
 * not, in the same run: its RSS after a full collection 88-94 MB against
 * 79-85 (docs/bench.md, issue 16, session 12). Setting it also stops the
 * raising of the mmap threshold (blocks over 128 KB stay mmapped, and are
 * unmapped when freed). False when glibc refused (the caller warns).
 */
export function holdMallocTrimThreshold(): boolean {
  const mallopt = koffi.load('libc.so.6').func('int mallopt(int param, int value)') as (param: number, value: number) => number;
  return mallopt(M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD) === 1;
}
import { constants, PerformanceObserver, type PerformanceObserverEntryList } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { loadNativeAddon } from '../host/native-addon.js';

let gc: (() => void) | undefined;
type Trim = ((pad: number) => number) & { async(pad: number, done: (err: unknown, res: number) => void): void };
let trim: Trim | undefined;

function trimFn(): Trim {
  trim ??= koffi.load('libc.so.6').func('int malloc_trim(size_t pad)') as Trim;
  return trim;
}

/** glibc's free pages back to the kernel (malloc_trim(0)), on this thread: for a start, or a second without requests. */
function trimMalloc(): void {
  trimFn()(0);
}

/** A trim on libuv's thread pool under way, and whether another was asked meanwhile. */
let trimming = false;
let trimAgain = false;

/**
 * malloc_trim(0) on a thread of libuv's pool: the event loop goes on. On
 * this thread it held the loop 20-29 ms after an edited reload of
 * bench:daemon's 131,072 rules, in the turn of the reload's answer. glibc
 * trims one arena at a time under its lock: a malloc of this thread waits
 * only while its own arena is trimmed. One at a time; one asked meanwhile
 * runs after it. Never throws (exported for tests).
 */
export function trimMallocOffLoop(): void {
  if (trimming) {
    trimAgain = true;
    return;
  }
  trimming = true;
  try {
    trimFn().async(0, (err) => {
      trimming = false;
      if (err === null || err === undefined) released.trimmedOffLoop++;
      if (trimAgain) {
        trimAgain = false;
        trimMallocOffLoop();
      }
    });
  } catch {
    // Not expected (libc or the call could not be had): the pages stay with glibc until the quiet second's
    // trim; the next ask tries again.
    trimming = false;
    trimAgain = false;
  }
}

/** A full collection, then glibc's free pages back: after the start's load (its garbage is the parse's, in whole pages). */
export function releaseMemory(): void {
  if (gc === undefined) {
    // The documented way to reach V8's collector without --expose-gc on the command line.
    setFlagsFromString('--expose-gc');
    gc = runInNewContext('gc') as () => void;
  }
  gc();
  trimMalloc();
}

/**
 * The native addon's compactHeap (V8's LowMemoryNotification) and
 * startHeapCollection (V8's incremental marking, started by moderate memory
 * pressure), or why they cannot be had; looked up once.
 */
type Compactor = { readonly run: () => void; readonly start: () => void } | { readonly why: string };
let compactor: Compactor | undefined;
function compactorOf(): Compactor {
  compactor ??= compactorFrom(() => loadNativeAddon() as { compactHeap?: unknown });
  return compactor;
}

/** The compactor of the addon `load` returns (the daemon's: the built addon; tests pass others). */
export function compactorFrom(load: () => { compactHeap?: unknown; startHeapCollection?: unknown }): Compactor {
  let addon: { compactHeap?: unknown; startHeapCollection?: unknown };
  try {
    addon = load();
  } catch (e) {
    return { why: (e as Error).message };
  }
  const { compactHeap, startHeapCollection } = addon;
  // An addon built before these were (a build of the TypeScript alone): said at start, never a crash later.
  for (const [name, f] of [['compactHeap', compactHeap], ['startHeapCollection', startHeapCollection]] as const) {
    if (typeof f !== 'function') return { why: `the native addon was built before it had ${name}: rebuild it (make native)` };
  }
  return { run: () => void (compactHeap as () => unknown).call(addon), start: () => void (startHeapCollection as () => unknown).call(addon) };
}

/**
 * Undefined when the collections after reloads and large batches can
 * compact V8's heap; else why not (the daemon logs it at start: they are
 * plain full collections then, which keep the pages).
 */
export function heapCompactionUnavailable(): string | undefined {
  const c = compactorOf();
  return 'why' in c ? c.why : undefined;
}

/**
 * The collection after a reload, large batches or stalled connections: a
 * full collection that also compacts V8's heap and unmaps its free pages
 * (releaseMemory's plain one keeps most of them). On bench:daemon's
 * config, after two batches of 10,000, 6 s of 4 writers and two reloads:
 * heap committed 105.8 MB for 59 MB used, VmRSS 180 MB, with a plain one;
 * 61.5 for 58.9, VmRSS 136, with this (the loaded daemon: 140). Its pause
 * is longer (two collections, 81 + 124 ms there, against 24-41 ms for a
 * plain one on a heap of 131,072 rules): only in a quiet second. A forced
 * collection (between requests) is V8's incremental marking
 * (startCollection), and asks for this one in the next quiet second.
 */
function compactMemory(): void {
  const c = compactorOf();
  if (!('run' in c)) {
    releaseMemory();
    return;
  }
  try {
    c.run();
  } catch (e) {
    // Not expected (a V8 API call); a plain collection instead, and none of these tried again.
    compactor = { why: `compactHeap failed: ${(e as Error).message}` };
    releaseMemory();
    return;
  }
  trimMalloc();
  released.compacted++;
}

/**
 * The collection that cannot wait for a quiet second any longer: V8's
 * incremental marking, started at once (the addon's startHeapCollection:
 * moderate memory pressure). It marks in steps between the requests and on
 * V8's helper threads and frees (and compacts) as it ends: after a reload
 * of bench:daemon's config under 4 writers, a pause of 5 ms at its end and
 * marking steps of at most 1.5-8 ms, where the plain full collection it
 * replaces was one pause of 51-84 ms (and changes waited 62-70 ms behind
 * it; docs/daemon.md). glibc's free pages go back when that collection
 * ends (trimAfterNextMajor), as they did after the plain one. Without the
 * addon, that plain collection. Exported for tests.
 */
export function startCollection(): void {
  if (startMarking()) {
    trimAfterNextMajor();
    return;
  }
  releaseMemory();
}

/**
 * V8's incremental marking started (the addon's startHeapCollection),
 * counted; false when the addon cannot (none, or the call failed: then
 * plain collections from here on, said by heapCompactionUnavailable).
 */
function startMarking(): boolean {
  const c = compactorOf();
  if (!('start' in c)) return false;
  try {
    c.start();
    released.incremental++;
    return true;
  } catch (e) {
    // Not expected (a V8 API call).
    compactor = { why: `startHeapCollection failed: ${(e as Error).message}` };
    return false;
  }
}

/** A gc performance entry list holds the end of a full collection. */
function endsMajor(list: PerformanceObserverEntryList): boolean {
  return list.getEntries().some((e) => ((e as { detail?: { kind?: number } }).detail)?.kind === constants.NODE_PERFORMANCE_GC_MAJOR);
}

/** How long collectBeforeAnswer waits for its collection to end at most. */
export const COLLECT_WAIT_MS = 1000;

/**
 * V8's incremental marking started in the next turn (as startCollection),
 * resolved once a full collection has ended (a gc performance entry of the
 * major kind) with `replaced` gone (glibc's free pages then go back off the
 * event loop, trimMallocOffLoop): true; false
 * when that did not happen within `waitMs`, or the addon cannot start a
 * marking (then nothing is started: a plain full collection would be a
 * pause of 24-84 ms between requests, left to a quiet second). A marking
 * already under way as it asks (V8's own during a reload's parse, or one
 * after a run of batches) keeps what was reachable as it began: when
 * `replaced` outlives a collection, another marking is started, until
 * `waitMs`. For a reload's answer: the rule set it replaced was held until
 * the next quiet second (+27-30 MB resident as bench:daemon's edited
 * reload of 131,072 rules answered); collected at once, the answer comes
 * 35-76 ms later.
 */
export function collectBeforeAnswer(replaced?: WeakRef<object>, waitMs = COLLECT_WAIT_MS): Promise<boolean> {
  if (!('start' in compactorOf())) return Promise.resolve(false);
  return new Promise((resolve) => {
    let done = false;
    /** A start queued and not run yet: at most one. */
    let queued = false;
    const end = (freed: boolean): void => {
      if (done) return;
      done = true;
      watch.disconnect();
      clearTimeout(timer);
      if (freed) {
        released.beforeAnswer++;
        trimMallocOffLoop();
      }
      resolve(freed);
    };
    // In a turn of its own: marking keeps what is reachable as it starts, and in the caller's turn its
    // finished async frames (a reload's, holding the rule set it replaced) may still be.
    const start = (): void => {
      queued = false;
      if (!done && !startMarking()) end(false);
    };
    const watch = new PerformanceObserver((list) => {
      if (done || !endsMajor(list)) return;
      // deref() keeps it for the rest of this job only: the next marking starts in a later turn.
      if (replaced?.deref() === undefined) end(true);
      else queueStart();
    });
    const queueStart = (): void => {
      if (queued) return;
      queued = true;
      setImmediate(start);
    };
    watch.observe({ entryTypes: ['gc'] });
    const timer = setTimeout(() => end(false), waitMs);
    queueStart();
  });
}

let trimWatch: PerformanceObserver | undefined;
/**
 * malloc_trim once the next full collection has ended (a gc performance
 * entry of the major kind), or in 10 s if none comes: what the collection
 * freed of malloc's memory (buffers' backing stores) goes back to the
 * kernel, not only at the next quiet second's compacting collection (a
 * daemon under steady requests may never have one).
 */
function trimAfterNextMajor(): void {
  if (trimWatch !== undefined) return;
  const done = (): void => {
    trimWatch?.disconnect();
    trimWatch = undefined;
    clearTimeout(fallback);
    trimMallocOffLoop();
    released.trimmedAfterIncremental++;
  };
  const watch = new PerformanceObserver((list) => {
    if (endsMajor(list)) done();
  });
  watch.observe({ entryTypes: ['gc'] });
  trimWatch = watch;
  const fallback = setTimeout(done, 10_000).unref();
}

let releasePending = false;
/** When the pending collection runs even without a quiet second (asked + MAX_WAIT_MS); undefined while only releaseMemoryWhenQuiet asked. */
let forceAt: number | undefined;
/**
 * The forced ask's note, dropped before the collection: a closure holds its
 * whole scope, and the reload's held the rule set it replaced (41 MB of
 * 131,072 rules kept through the collection meant to give them back).
 */
let forcedNote: (() => void) | undefined;
/**
 * Not before this (a forced ask + 1 s): a forced ask joining a pending
 * quiet-only one must not run the collection at that one's next look, a
 * moment after the ask, while the caller (a reload, in its last steps)
 * still holds what the collection is meant to give back.
 */
let notBefore = 0;
let releasedAt = 0;
let inFlight = 0;
let lastRequestAt = 0;
const released = { quiet: 0, forced: 0, compacted: 0, incremental: 0, trimmedAfterIncremental: 0, trimmedOffLoop: 0, afterBatches: 0, beforeAnswer: 0 };

/** The API's requests (src/daemon/api.ts): releaseMemorySoon and releaseMemoryWhenQuiet wait for a quiet spell between them. */
export function requestStarted(): void {
  inFlight++;
}

export function requestEnded(): void {
  inFlight = Math.max(0, inFlight - 1);
  lastRequestAt = Date.now();
}

/** No request for this long: a collection's pause holds up no one. */
export const QUIET_MS = 1000;
/**
 * Never that quiet for this long after it was asked: the collection runs
 * anyway. Left to V8 under steady requests, the garbage of a reload and of
 * large answers grew the daemon to 790 MB resident in bench:daemon (against
 * 226 MB with the collection a second after the reload).
 */
export const MAX_WAIT_MS = 5000;

/** The log line when the collection after `what` ran without a quiet second (MAX_WAIT_MS passed). */
export function forcedReleaseNote(what: string): string {
  return `no second without API requests in ${MAX_WAIT_MS / 1000} s: the collection after ${what} was started between requests (V8's incremental marking; the compacting one waits for a quiet second)`;
}

/** API requests in flight now (test/unit/release-quiet.test.ts). */
export function requestsInFlight(): number {
  return inFlight;
}

/**
 * Collections run for releaseMemorySoon and releaseMemoryWhenQuiet: in a
 * quiet second, or (a forced ask) at MAX_WAIT_MS without one; `compacted`:
 * those that compacted the heap; `incremental`: V8's incremental marking
 * started (forced ones, and those after batches), not a plain full
 * collection; `trimmedAfterIncremental`: malloc_trim runs after those
 * ended; `afterBatches`: incremental ones started after a run of large
 * batches (collectAfterBatches); `beforeAnswer`: those collectBeforeAnswer
 * saw end. For tests and the log.
 */
export function releaseCounts(): {
  readonly quiet: number;
  readonly forced: number;
  readonly compacted: number;
  readonly incremental: number;
  readonly trimmedAfterIncremental: number;
  /** malloc_trim calls done on libuv's pool (trimMallocOffLoop). */
  readonly trimmedOffLoop: number;
  readonly afterBatches: number;
  readonly beforeAnswer: number;
} {
  return { ...released };
}

/**
 * releaseMemory a second or so from now, at most once every 2 s, in a
 * second without API requests if one comes within MAX_WAIT_MS: after
 * stalled connections are closed (their buffers), and after a reload whose
 * replaced rules could not be collected before its answer. In a quiet second the collection compacts the heap
 * (compactMemory: a pause of about 200 ms with 131,072 rules); without
 * one, at MAX_WAIT_MS, it is V8's incremental marking (startCollection:
 * no long pause) and the compacting one follows in the next quiet second.
 * Run a second after a reload whatever came, the collection was the longest stall a
 * reload left behind (issue 19). `forced` is called when it runs without
 * a quiet second (the caller logs it).
 */
export function releaseMemorySoon(forced?: () => void): void {
  const now = Date.now();
  if (forceAt === undefined) {
    forceAt = now + MAX_WAIT_MS;
    forcedNote = forced;
  }
  notBefore = Math.max(notBefore, now + 1000);
  ask();
}

/**
 * The same collection, but only in a second without API requests, never
 * between them: after a large batch (its requests' bodies, plans and
 * records, about 10 MB of garbage each 10,000 operations, that V8 kept for
 * good: bench:daemon's four batches left the daemon 60 MB larger 27 s
 * later). A client sending batch after batch is not paused by it; V8
 * collects as it goes meanwhile.
 */
export function releaseMemoryWhenQuiet(): void {
  ask();
}

/**
 * After a run of large batches: V8's incremental marking, BATCH_GAP_MS
 * after the last one ended, when no batch is under way (batchStarted: a
 * batch whose body is still being read counts).
 * A batch's body, plan and record live across its slices, so they are
 * promoted and stay until a full collection: bench:daemon's four batches
 * of 10,000 left the daemon 70-80 MB larger (216 MB) until the quiet
 * second's collection, which a client that goes on with single requests
 * does not give. Incremental marking costs no long pause, but running
 * beside a batch it slows that batch (10,000 adds: 566 against 387 ms),
 * so not while batches follow each other closely; the compacting
 * collection still waits for a quiet second (releaseMemoryWhenQuiet).
 */
export const BATCH_GAP_MS = 300;
let afterBatchesTimer: ReturnType<typeof setTimeout> | undefined;
let batches = 0;
/**
 * A batch under way, from its request's first byte (POST /v1/batch: the
 * body's read and parse, the apply, the answer) or Daemon.applyBatch's
 * call to its end: collectAfterBatches does not start while one is.
 */
export function batchStarted(): void {
  batches++;
}

export function batchEnded(): void {
  batches = Math.max(0, batches - 1);
}

export function collectAfterBatches(): void {
  clearTimeout(afterBatchesTimer);
  // Without the addon's incremental marking, only in a quiet second (a plain collection is a 51-84 ms pause).
  if (!('start' in compactorOf())) return;
  const fire = (): void => {
    // A batch under way asks again when it ends (if large); a small one does not, so look again later.
    if (batches > 0) {
      afterBatchesTimer = setTimeout(fire, BATCH_GAP_MS).unref();
      return;
    }
    afterBatchesTimer = undefined;
    released.afterBatches++;
    startCollection();
  };
  afterBatchesTimer = setTimeout(fire, BATCH_GAP_MS).unref();
}

function ask(): void {
  if (releasePending) return;
  releasePending = true;
  setTimeout(attempt, 1000).unref();
}

function attempt(): void {
  const now = Date.now();
  const quietFor = inFlight > 0 ? 0 : now - lastRequestAt;
  const wait = Math.max(releasedAt + 2000 - now, QUIET_MS - quietFor, notBefore - now);
  // Forced: MAX_WAIT_MS after the first forced ask, and never within a second of the latest one.
  const due = forceAt === undefined ? Infinity : Math.max(forceAt, notBefore);
  if (wait > 0 && now < due) {
    setTimeout(attempt, Math.min(Math.max(wait, 50), 1000, due - now)).unref();
    return;
  }
  let note = forcedNote;
  const forced = wait > 0;
  releasePending = false;
  forceAt = undefined;
  forcedNote = undefined;
  releasedAt = now;
  try {
    if (forced) {
      released.forced++;
      note?.();
    } else {
      released.quiet++;
    }
  } finally {
    note = undefined;
    // Between requests no long pause (incremental marking); the pages it keeps go in a quiet second.
    if (forced) startCollection();
    else compactMemory();
  }
  if (forced && 'run' in compactorOf()) ask();
}
