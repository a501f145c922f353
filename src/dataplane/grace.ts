/**
 * The grace clock: RCU grace periods (membarrier(MEMBARRIER_CMD_GLOBAL),
 * see synchronizeRcu) run on a thread of their own, so that the event loop
 * never sits in one (9-24 ms each on some hosts).
 *
 * Sequence numbers in a SharedArrayBuffer: `request()` returns n; the
 * thread reads the highest requested number, then runs one grace period,
 * then stores that number as completed. So once `completed >= n`, a grace
 * period has run that started after request() returned n: every BPF program
 * run that could hold what the caller retired before calling request() has
 * ended. One grace period pays every request made before it started.
 *
 * A writer keeps the number of the grace period it depends on (its "debt",
 * src/dataplane/tables.ts) and waits for it only before a write that needs
 * it: `waitSync` (Atomics.wait, the load path and tests) or `wait` (a
 * promise, the daemon's serial section, which keeps serving meanwhile).
 *
 * MUP_TEST_GRACE_EXTRA_MS (tests only) makes the thread sleep that long
 * before each grace period, MUP_TEST_GRACE_LOAD_DELAY_MS before it loads
 * koffi; MUP_TEST_GRACE_KOFFI names a module it loads instead.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { NR_MEMBARRIER, synchronizeRcu } from './libbpf.js';

/**
 * Slots of the sequence numbers, SEQ_*: a BigInt64Array (32-bit ones wrapped after 2^31 requests,
 * a few weeks of deletes at a thousand a second, and every write after that waited for ever).
 */
const SEQ_REQUESTED = 0;
const SEQ_COMPLETED = 1;
const SEQ_RUNS = 2;
/** Slots of the flags, an Int32Array. errno of a failed membarrier in the thread (then callers run it themselves). */
const FAILED = 0;
/** Tests: milliseconds the thread sleeps before each grace period. */
const EXTRA_MS = 1;
/** Where the thread's load of koffi is: 0 (not started), LOAD_OK, LOAD_FAILED, LOADING, or EXITING (the process exiting first). */
const LOADED = 2;
const LOAD_OK = 1;
const LOAD_FAILED = 2;
const LOADING = 3;
const EXITING = 4;
/** How long an exiting process waits for the thread to finish loading koffi. */
const EXIT_WAIT_MS = 5000;

/** Atomics.waitAsync (Node 16+; in TypeScript's lib from es2024). */
interface AtomicsWaitAsync {
  waitAsync(a: BigInt64Array, i: number, v: bigint, timeout: number): { async: false; value: string } | { async: true; value: Promise<string> };
}


// CommonJS, evaluated by the worker: no file of its own to find from dist/ or src/.
const WORKER = `
const { workerData } = require('node:worker_threads');
const s = new Int32Array(workerData.sab);
const q = new BigInt64Array(workerData.seq);
// The process began to exit before this thread started: never load koffi (it would be stopped in it).
if (Atomics.compareExchange(s, ${LOADED}, 0, ${LOADING}) !== 0) for (;;) Atomics.wait(s, ${LOADED}, Atomics.load(s, ${LOADED}));
let koffi;
let syscall;
try {
  if (workerData.loadDelayMs > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, workerData.loadDelayMs);
  koffi = require(workerData.koffi);
  syscall = koffi.load('libc.so.6').func('long syscall(long number, ...)');
} finally {
  Atomics.store(s, ${LOADED}, syscall === undefined ? ${LOAD_FAILED} : ${LOAD_OK});
  Atomics.notify(s, ${LOADED});
  // Waiters for a grace period look again (#failed): they run it themselves now.
  if (syscall === undefined) Atomics.notify(q, ${SEQ_COMPLETED});
}
const nap = new Int32Array(new SharedArrayBuffer(4));
const ns = new BigInt64Array(workerData.nanos);
for (;;) {
  const req = Atomics.load(q, ${SEQ_REQUESTED});
  if (req === Atomics.load(q, ${SEQ_COMPLETED})) {
    Atomics.wait(q, ${SEQ_REQUESTED}, req);
    continue;
  }
  const extra = Atomics.load(s, ${EXTRA_MS});
  if (extra > 0) Atomics.wait(nap, 0, 0, extra);
  const t0 = process.hrtime.bigint();
  const ret = Number(syscall(workerData.nr, 'int', 1, 'unsigned int', 0, 'int', -1));
  if (ret >= 0) Atomics.add(ns, 0, process.hrtime.bigint() - t0);
  if (ret < 0) {
    Atomics.store(s, ${FAILED}, koffi.errno() || 1);
    Atomics.notify(q, ${SEQ_COMPLETED});
    break;
  }
  Atomics.store(q, ${SEQ_COMPLETED}, req);
  Atomics.add(q, ${SEQ_RUNS}, 1n);
  Atomics.notify(q, ${SEQ_COMPLETED});
}
`;

export class GraceClock {
  readonly #s = new Int32Array(new SharedArrayBuffer(12));
  /** Requested, completed, run (SEQ_REQUESTED, SEQ_COMPLETED, SEQ_RUNS). */
  readonly #seq = new BigInt64Array(new SharedArrayBuffer(24));
  /** Nanoseconds the grace periods took (the thread's and the fallback's), in total. */
  readonly #nanos = new BigInt64Array(new SharedArrayBuffer(8));
  #worker: Worker | undefined;
  #dead = false;
  /** Callers that had to wait (synchronously or not) for a grace period: for tests. */
  waits = 0;
  /** Of those, the waits that held the event loop (waitSync): for tests (a table write while serving must not). */
  syncWaits = 0;
  /** Milliseconds the counted waits took (what a change's answer waited for grace periods). */
  waitedMs = 0;

  constructor() {
    const extra = Number(process.env['MUP_TEST_GRACE_EXTRA_MS'] ?? 0);
    if (Number.isInteger(extra) && extra > 0) this.testExtraMs = extra;
  }

  /** Tests: make every grace period at least this much longer (MUP_TEST_GRACE_EXTRA_MS sets it at start). */
  set testExtraMs(ms: number) {
    Atomics.store(this.#s, EXTRA_MS, Math.max(0, Math.trunc(ms)));
  }

  get testExtraMs(): number {
    return Atomics.load(this.#s, EXTRA_MS);
  }

  /**
   * Start the thread now (once), without asking for a grace period: a
   * program load does, so that the thread (a worker loading koffi, ~100 ms)
   * is ready by the time the first change asks for one, which then does not
   * wait for it.
   */
  start(): void {
    if (this.#worker !== undefined || this.#dead) return;
    const nr = NR_MEMBARRIER[process.arch];
    if (nr === undefined) {
      this.#dead = true;
      return;
    }
    // Tests: MUP_TEST_GRACE_KOFFI names another module for the thread to load (one that fails).
    const koffiPath = process.env['MUP_TEST_GRACE_KOFFI'] ?? createRequire(import.meta.url).resolve('koffi');
    // Tests: MUP_TEST_GRACE_LOAD_DELAY_MS holds the thread that long before it loads koffi.
    const loadDelayMs = Number(process.env['MUP_TEST_GRACE_LOAD_DELAY_MS'] ?? 0) || 0;
    // execArgv []: not the process's flags (--input-type=module made the CommonJS above an ES module, which
    // failed at its first require; --import tsx, profilers): the thread needs none.
    const w = new Worker(WORKER, { eval: true, execArgv: [], workerData: { sab: this.#s.buffer, seq: this.#seq.buffer, nanos: this.#nanos.buffer, koffi: koffiPath, nr, loadDelayMs } });
    w.unref();
    w.on('error', () => {
      this.#dead = true;
      Atomics.notify(this.#seq, SEQ_COMPLETED);
    });
    w.on('exit', () => {
      this.#dead = true;
    });
    // A process that exits while the thread is in koffi's module init aborts (node-addon-api's fatal
    // "Error::ThrowAsJavaScriptException napi_throw": the init throws into the terminating thread): 2 in
    // 400 runs that asked for a grace period and ended 0-150 ms later, on this host. The exit waits for
    // the load to end (tens of ms; the thread is stopped after the 'exit' handlers). A thread that has
    // not started by then is told not to load it (then the clock has no thread: #failed).
    process.once('exit', () => {
      if (Atomics.compareExchange(this.#s, LOADED, 0, EXITING) === LOADING) Atomics.wait(this.#s, LOADED, LOADING, EXIT_WAIT_MS);
    });
    this.#worker = w;
  }

  get requested(): number {
    return Number(Atomics.load(this.#seq, SEQ_REQUESTED));
  }

  get completed(): number {
    return Number(Atomics.load(this.#seq, SEQ_COMPLETED));
  }

  /** Tests: number the grace periods from `n` on (before the first request). */
  testNumberFrom(n: number): void {
    Atomics.store(this.#seq, SEQ_REQUESTED, BigInt(n));
    Atomics.store(this.#seq, SEQ_COMPLETED, BigInt(n));
  }

  /** The thread's load of koffi: 0 (not started), 1 (loaded), 2 (failed), 3 (loading), 4 (the process exited before it started). */
  get loaded(): number {
    return Atomics.load(this.#s, LOADED);
  }

  /** Grace periods run: by the thread, or by a caller when the thread cannot (#fallback). */
  get runs(): number {
    return Number(Atomics.load(this.#seq, SEQ_RUNS));
  }

  /** Seconds the grace periods run so far took, in total (membarrier's time, on the thread or in a fallback). */
  get seconds(): number {
    return Number(Atomics.load(this.#nanos, 0)) / 1e9;
  }

  /** Ask for a grace period that starts after now; returns its number. */
  request(): number {
    this.start();
    const n = Number(Atomics.add(this.#seq, SEQ_REQUESTED, 1n)) + 1;
    Atomics.notify(this.#seq, SEQ_REQUESTED);
    return n;
  }

  done(n: number): boolean {
    return this.completed >= n;
  }

  /** The thread cannot run them: the caller runs one here and marks every request made before as paid. */
  #fallback(): void {
    const req = this.requested;
    const t0 = process.hrtime.bigint();
    synchronizeRcu();
    Atomics.add(this.#nanos, 0, process.hrtime.bigint() - t0);
    Atomics.add(this.#seq, SEQ_RUNS, 1n);
    if (this.completed < req) Atomics.store(this.#seq, SEQ_COMPLETED, BigInt(req));
  }

  #failed(): boolean {
    // LOAD_FAILED too: the thread's 'error' (which sets #dead) is not delivered while waitSync blocks the loop.
    const loaded = Atomics.load(this.#s, LOADED);
    return this.#dead || Atomics.load(this.#s, FAILED) !== 0 || loaded === EXITING || loaded === LOAD_FAILED;
  }

  /**
   * Block until grace period n has completed (0: nothing to wait for).
   * The waits compare against the value that was checked, read once: read
   * again for the wait, a completion between the check and the wait would
   * be the value waited on, and only the next grace period (or the 1 s
   * timeout) would end it.
   */
  waitSync(n: number): void {
    if (this.done(n)) return;
    this.waits++;
    this.syncWaits++;
    const t0 = performance.now();
    for (let c = this.completed; c < n; c = this.completed) {
      if (this.#failed()) {
        this.#fallback();
        continue;
      }
      Atomics.wait(this.#seq, SEQ_COMPLETED, BigInt(c), 1000);
    }
    this.waitedMs += performance.now() - t0;
  }

  /**
   * Resolve once grace period n has completed; the event loop runs meanwhile.
   * `counted`: false for housekeeping that nothing waits on (it is not in `waits`).
   */
  async wait(n: number, counted = true): Promise<void> {
    if (this.done(n)) return;
    if (counted) this.waits++;
    const t0 = performance.now();
    for (let c = this.completed; c < n; c = this.completed) {
      if (this.#failed()) {
        this.#fallback();
        continue;
      }
      const r = (Atomics as unknown as AtomicsWaitAsync).waitAsync(this.#seq, SEQ_COMPLETED, BigInt(c), 1000);
      if (r.async) await r.value;
    }
    if (counted) this.waitedMs += performance.now() - t0;
  }
}

/** The last read of rcuExpedited(), and when (performance.now()). */
let rcuRead: { readonly at: number; readonly value: 0 | 1 | undefined } | undefined;

/**
 * The host's /sys/kernel/rcu_expedited: 1 (not 0: every grace period
 * expedited, microseconds), 0 (the kernel's default: milliseconds), or
 * undefined (not readable: no such file, no sysfs). Read again at most once
 * a second: GET /v1/status and each /metrics scrape ask for it.
 */
export function rcuExpedited(): 0 | 1 | undefined {
  const now = performance.now();
  if (rcuRead === undefined || now - rcuRead.at > 1000) rcuRead = { at: now, value: readRcuExpedited() };
  return rcuRead.value;
}

function readRcuExpedited(): 0 | 1 | undefined {
  try {
    // The kernel takes any integer there; any but 0 expedites.
    const v = Number.parseInt(readFileSync('/sys/kernel/rcu_expedited', 'utf8').trim(), 10);
    return Number.isNaN(v) ? undefined : v === 0 ? 0 : 1;
  } catch {
    return undefined;
  }
}

/** The process's clock: one thread, however many table sets. */
export const graceClock = new GraceClock();
