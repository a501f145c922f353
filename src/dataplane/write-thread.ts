/**
 * A second writer for a fill of empty tables (a first start, or a start
 * with --replace-tables): a thread that makes one table's
 * BPF_MAP_UPDATE_BATCH calls while the event loop's thread makes
 * another's. The kernel's inserts were most of a start's table write: a
 * million sessions and a million policies took 1.42 s of syscalls one
 * table after the other, and two tables written from two threads take
 * about half the time of one after the other on this 2-CPU host
 * (docs/bench.md, session 48).
 *
 * One request at a time, through a SharedArrayBuffer: the caller encodes a
 * chunk's keys and values into the thread's buffers (only while no request
 * is in flight), posts it, and takes its result later: the call's return
 * value and the count the kernel wrote back, as mapUpdateBatch reads them
 * (src/dataplane/libbpf.ts). The thread never touches the tables' mirror,
 * their ids or their order: Tables.#inserting keeps all of that, and
 * reads each result in order, so what it holds is what the kernel wrote.
 *
 * The thread loads koffi (tens of ms on its own thread): start() is called
 * with the program's load, long before the fill. A thread not ready by
 * then is not waited for (the fill is written by one thread, as before).
 * It is stopped after the fill: it holds an isolate's memory.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/** Int32 slots of the control block. */
const LOADED = 0;
const STATE = 1;
const FD = 2;
const COUNT = 3;
const RET = 4;
const WENT = 5;
/** Which of the two buffer pairs the request is in. */
const PAIR = 6;
const SLOTS = 7;

/** LOADED: 0 (not started), then one of these. */
const LOAD_OK = 1;
const LOAD_FAILED = 2;
const LOADING = 3;
/** The process began to exit before the thread loaded koffi: it never will. */
const EXITING = 4;

/** STATE. */
const IDLE = 0;
const REQUEST = 1;
const DONE = 2;
const STOP = 3;
/** The thread's loop ended (stopped, or it could not load koffi): it answers nothing more. */
const ENDED = 4;

/** How long an exiting process waits for the thread to finish loading koffi (as the grace clock's thread). */
const EXIT_WAIT_MS = 5000;

/** errno the thread answers when the call itself threw (koffi refused its arguments): EINVAL. */
const CALL_THREW = 22;

// CommonJS, evaluated by the worker: no file of its own to find from dist/ or src/.
const WORKER = `
const { workerData } = require('node:worker_threads');
const s = new Int32Array(workerData.ctl);
// The process began to exit before this thread started: never load koffi (it would be stopped in it).
if (Atomics.compareExchange(s, ${LOADED}, 0, ${LOADING}) !== 0) for (;;) Atomics.wait(s, ${LOADED}, Atomics.load(s, ${LOADED}));
let update;
try {
  if (workerData.loadDelayMs > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, workerData.loadDelayMs);
  // Stopped before it loaded (a start refused meanwhile): no load for nothing.
  if (Atomics.load(s, ${STATE}) === ${STOP}) throw new Error('stopped');
  update = require(workerData.koffi)
    .load('libbpf.so.1')
    .func('int bpf_map_update_batch(int fd, const void *keys, const void *values, uint32_t *count, const void *opts)');
} catch {
  // LOAD_FAILED below: the caller writes every table itself.
} finally {
  Atomics.store(s, ${LOADED}, update === undefined ? ${LOAD_FAILED} : ${LOAD_OK});
  Atomics.notify(s, ${LOADED});
}
try {
  if (update !== undefined) {
    // Two pairs of buffers: the caller encodes the next request into one while this thread writes the other.
    const half = workerData.keys.byteLength / 2;
    const vhalf = workerData.values.byteLength / 2;
    const keys = [new Uint8Array(workerData.keys, 0, half), new Uint8Array(workerData.keys, half, half)];
    const values = [new Uint8Array(workerData.values, 0, vhalf), new Uint8Array(workerData.values, vhalf, vhalf)];
    const count = new Uint32Array(1);
    for (;;) {
      const st = Atomics.load(s, ${STATE});
      if (st === ${STOP}) break;
      if (st !== ${REQUEST}) {
        Atomics.wait(s, ${STATE}, st);
        continue;
      }
      const asked = s[${COUNT}];
      const pair = s[${PAIR}];
      count[0] = asked;
      let ret;
      try {
        ret = update(s[${FD}], keys[pair], values[pair], count, null);
      } catch {
        ret = -${CALL_THREW};
        count[0] = asked;
      }
      s[${RET}] = ret;
      s[${WENT}] = count[0];
      Atomics.store(s, ${STATE}, ${DONE});
      Atomics.notify(s, ${STATE});
    }
  }
} finally {
  // A caller waiting for an answer (or about to) learns there will be none.
  Atomics.store(s, ${STATE}, ${ENDED});
  Atomics.notify(s, ${STATE});
}
`;

/** A request's outcome: the call's return value (0, or -errno) and the count the kernel wrote back. */
export interface WriteResult {
  readonly ret: number;
  readonly count: number;
}

/** Threads started, and those not ended yet, in this process (tests: a refused start leaves none). */
let started = 0;
let live = 0;

export class WriteThread {
  readonly #s = new Int32Array(new SharedArrayBuffer(SLOTS * 4));
  /** Two pairs of buffers over one SharedArrayBuffer each: [keys of pair 0, of pair 1], [values ...]. */
  readonly #keys: [Buffer, Buffer];
  readonly #values: [Buffer, Buffer];
  #worker: Worker | undefined;
  #stopped = false;
  /** The request posted and not taken yet. */
  #inFlight = false;
  /** The pair the next request is encoded into (the other may be in flight). */
  #next: 0 | 1 = 0;
  /** Requests the thread answered (tests: the thread did write). */
  written = 0;

  /** Threads started and not ended yet, in this process. */
  static get live(): number {
    return live;
  }

  /** Threads started in this process. */
  static get started(): number {
    return started;
  }

  /**
   * `keyBytes` / `valueBytes`: the most a request carries. `minEntries`: a
   * table of fewer entries is not worth the thread (tests set 1).
   */
  constructor(
    keyBytes: number,
    valueBytes: number,
    readonly minEntries = 8192,
  ) {
    const k = new SharedArrayBuffer(2 * keyBytes);
    const v = new SharedArrayBuffer(2 * valueBytes);
    this.#keys = [Buffer.from(k, 0, keyBytes), Buffer.from(k, keyBytes, keyBytes)];
    this.#values = [Buffer.from(v, 0, valueBytes), Buffer.from(v, valueBytes, valueBytes)];
  }

  /** Start the thread (once); it loads koffi and waits for requests. */
  start(): this {
    if (this.#worker !== undefined || this.#stopped) return this;
    // Tests: MUP_TEST_WRITE_THREAD_KOFFI names another module for the thread to load (one that fails);
    // MUP_TEST_WRITE_THREAD_LOAD_DELAY_MS holds the thread that long before it loads it.
    const koffi = process.env['MUP_TEST_WRITE_THREAD_KOFFI'] ?? createRequire(import.meta.url).resolve('koffi');
    const loadDelayMs = Number(process.env['MUP_TEST_WRITE_THREAD_LOAD_DELAY_MS'] ?? 0) || 0;
    let w: Worker;
    try {
      // execArgv []: not the process's flags (--import tsx, profilers): the thread needs none.
      w = new Worker(WORKER, { eval: true, execArgv: [], workerData: { ctl: this.#s.buffer, keys: this.#keys[0].buffer, values: this.#values[0].buffer, koffi, loadDelayMs } });
    } catch {
      this.#stopped = true;
      return this;
    }
    started++;
    live++;
    w.once('exit', () => live--);
    w.unref();
    // A thread that fails to start says so here; ready stays false.
    w.on('error', () => {
      Atomics.compareExchange(this.#s, LOADED, 0, LOAD_FAILED);
      Atomics.compareExchange(this.#s, LOADED, LOADING, LOAD_FAILED);
    });
    // A process that exits while the thread is in koffi's module init aborts (the grace clock's thread
    // found it: src/dataplane/grace.ts): the exit waits for the load to end; a thread not started by
    // then is told not to load it.
    const atExit = (): void => {
      if (Atomics.compareExchange(this.#s, LOADED, 0, EXITING) === LOADING) Atomics.wait(this.#s, LOADED, LOADING, EXIT_WAIT_MS);
    };
    process.once('exit', atExit);
    w.once('exit', () => process.off('exit', atExit));
    this.#worker = w;
    return this;
  }

  /** The thread has loaded koffi and takes requests. */
  get ready(): boolean {
    return !this.#stopped && Atomics.load(this.#s, LOADED) === LOAD_OK && Atomics.load(this.#s, STATE) !== ENDED;
  }

  /** Where the thread's load of koffi is: 'starting' (the thread has not begun it), 'loading', 'ready', or 'failed' (it never will be ready). */
  get load(): 'starting' | 'loading' | 'ready' | 'failed' {
    const l = Atomics.load(this.#s, LOADED);
    return l === LOAD_OK ? 'ready' : l === LOAD_FAILED || l === EXITING ? 'failed' : l === LOADING ? 'loading' : 'starting';
  }

  /**
   * The buffers the next request's keys and values are encoded into: not
   * the pair of the request in flight, so the caller encodes while the
   * thread writes.
   */
  get keys(): Buffer {
    return this.#keys[this.#next];
  }

  get values(): Buffer {
    return this.#values[this.#next];
  }

  /** Write `count` entries of the next buffers (keys, values) into map `fd` (ready, and nothing in flight). */
  post(fd: number, count: number): void {
    if (!this.ready) throw new Error('the write thread is not ready');
    if (this.#inFlight) throw new Error('the write thread has a request in flight');
    this.#s[FD] = fd;
    this.#s[COUNT] = count;
    this.#s[PAIR] = this.#next;
    this.#next = this.#next === 0 ? 1 : 0;
    this.#inFlight = true;
    Atomics.store(this.#s, STATE, REQUEST);
    Atomics.notify(this.#s, STATE);
  }

  /** A request is in flight (posted, not taken). */
  get busy(): boolean {
    return this.#inFlight;
  }

  /** The request in flight has been answered (take() will not wait). */
  get answered(): boolean {
    return this.#inFlight && Atomics.load(this.#s, STATE) === DONE;
  }

  /**
   * The answer to the request in flight, waited for. The thread answers
   * every request it took (a call that throws is answered EINVAL); a
   * thread that ended with one in flight (it cannot, short of the process
   * ending) is an error, not a wait for ever.
   */
  take(): WriteResult {
    if (!this.#inFlight) throw new Error('the write thread has no request in flight');
    for (let st = Atomics.load(this.#s, STATE); st === REQUEST; st = Atomics.load(this.#s, STATE)) Atomics.wait(this.#s, STATE, REQUEST, 1000);
    this.#inFlight = false;
    if (Atomics.load(this.#s, STATE) !== DONE) throw new Error('the write thread ended with a write in flight: what it wrote of it is not known');
    const r = { ret: this.#s[RET]!, count: this.#s[WENT]! >>> 0 };
    this.written++;
    Atomics.store(this.#s, STATE, IDLE);
    return r;
  }

  /** Let the thread end (after the request in flight, which is taken first). Idempotent. */
  stop(): void {
    try {
      if (this.#inFlight) this.take();
    } catch {
      // It ended already: nothing to stop.
    }
    this.#stopped = true;
    Atomics.compareExchange(this.#s, STATE, IDLE, STOP);
    Atomics.notify(this.#s, STATE);
  }
}
