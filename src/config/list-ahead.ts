/**
 * A large JSON config's sessions read on a second thread while the start's
 * parse reads the rest of the file (policies first, as generated files
 * have them). At a million sessions and a million policies the parse was
 * one thread's work for about 2 s, with the host's other CPU idle for most
 * of it (docs/daemon.md, "Start").
 *
 * The thread starts before the file is read (its modules load meanwhile),
 * is given the file's bytes (a SharedArrayBuffer: not copied), finds the
 * first `"sessions": [` and reads that list as parseConfig does
 * (readListAhead in load.ts): rows, the items' places, every item a row
 * with no warning, or no answer. When the main thread's parse reaches a
 * sessions list, it takes the thread's answer only if it is for that list's
 * `[` at the same index (the thread's find is a guess); it waits if the
 * thread is reading there, and reads the list itself if the thread has not
 * begun, read elsewhere or gave up. A taken list is the same rules, rows,
 * places and checks as one read here (test/unit/list-ahead.test.ts).
 */
// Drawn before this module makes a thread, which takes the same seed (src/host/hash-seed.ts).
import '../host/hash-seed.js';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from 'node:worker_threads';
import { ANSWERED, AT, BEAT, CANCELLED, COUNT, INDEXED, LOCATING, NO_INDEX, NONE, READING, SLOTS, STATE } from './list-ahead-state.js';
import type { ListAhead, ListReadAhead } from './load.js';
import type { FilledIndex } from './row-map.js';

/** Files from this size on (the hash's thread starts there too): below it the thread's start costs about what it saves. */
export const LIST_AHEAD_FROM = 32 * 1024 * 1024;

/**
 * The main thread waits for the thread as long as it works (its BEAT
 * moves every 4,096 items read, every 65,536 keys indexed: milliseconds);
 * one whose beat has not moved for this long is taken for gone (a crash
 * writes no state, and its exit event cannot be seen from a wait), and
 * the list is read here.
 */
const STALL_MS = 5000;

/** How a read ahead ended, for the start's log line. */
export type ListAheadOutcome =
  | 'taken'
  | 'taken, then the file was read whole'
  | 'not begun when the parse reached the list'
  | 'another place'
  | 'no answer'
  | 'stalled'
  | 'not asked'
  | 'no thread';

/**
 * The thread's script: the compiled one beside this module; when this
 * module is the TypeScript source (tests run src/ through vitest), the
 * build's (dist/), which `make` makes from the same source.
 */
export function listAheadWorkerUrl(): URL {
  const here = new URL('./list-ahead-worker.js', import.meta.url);
  if (existsSync(fileURLToPath(here))) return here;
  return new URL('../../dist/config/list-ahead-worker.js', import.meta.url);
}

export class ListAheadThread implements ListAhead {
  readonly #state = new Int32Array(new SharedArrayBuffer(SLOTS * 4));
  readonly #port: MessagePort;
  readonly #worker: Worker | undefined;
  #given = false;
  #outcome: ListAheadOutcome = 'not asked';
  #waitedMs = 0;
  #indexAsked = false;
  #indexTaken = false;
  #indexWaitedMs = 0;

  static #live = 0;
  /** Threads started and not yet ended (tests: none is left behind). */
  static get live(): number {
    return ListAheadThread.#live;
  }

  /** The thread, started now (its modules load while the file is read). */
  constructor() {
    const { port1, port2 } = new MessageChannel();
    this.#port = port1;
    let w: Worker | undefined;
    try {
      // execArgv []: not the process's flags (--import tsx, profilers).
      w = new Worker(listAheadWorkerUrl(), { execArgv: [], workerData: { state: this.#state, port: port2 }, transferList: [port2] });
      w.unref();
      ListAheadThread.#live++;
      w.once('exit', () => ListAheadThread.#live--);
      // An error in the thread ends it; its state says NONE or it never began: the list is read here.
      w.on('error', () => undefined);
    } catch {
      w = undefined;
      this.#outcome = 'no thread';
    }
    this.#worker = w;
  }

  /** The file's bytes, to look in (from a SharedArrayBuffer: others would be copied to the thread, and are not given). */
  give(bytes: Uint8Array): void {
    if (this.#worker === undefined || this.#given || !(bytes.buffer instanceof SharedArrayBuffer)) return;
    this.#given = true;
    this.#port.postMessage({ bytes });
  }

  take(key: string, at: number, meanwhile?: (read: number) => boolean): ListReadAhead | undefined {
    if (key !== 'sessions' || this.#worker === undefined || !this.#given || this.#outcome !== 'not asked') return undefined;
    const s = this.#state;
    if (Atomics.compareExchange(s, STATE, LOCATING, CANCELLED) === LOCATING) {
      this.#outcome = 'not begun when the parse reached the list';
      return undefined;
    }
    // READING, ANSWERED or NONE: AT was stored before READING.
    if (Atomics.load(s, STATE) !== NONE && Atomics.load(s, AT) !== at) {
      this.#outcome = 'another place';
      // Its work would not be used: the other CPU is the parse's neighbours' again.
      void this.#worker.terminate();
      return undefined;
    }
    const t0 = performance.now();
    const alive = this.#alive();
    let stalled = false;
    while (Atomics.load(s, STATE) === READING && !(stalled = !alive())) {
      // Work the caller can do with what has been read so far; a wait when there is none (the thread wakes it).
      if (meanwhile?.(Atomics.load(s, COUNT)) !== true) Atomics.wait(s, STATE, READING, 200);
    }
    const st = Atomics.load(s, STATE);
    const answer = st === ANSWERED || st === INDEXED || st === NO_INDEX ? (receiveMessageOnPort(this.#port)?.message as ListReadAhead | undefined) : undefined;
    this.#outcome = answer !== undefined ? 'taken' : stalled ? 'stalled' : 'no answer';
    this.#waitedMs = Math.round(performance.now() - t0);
    return answer;
  }

  index(): FilledIndex | undefined {
    if (this.#outcome !== 'taken' || this.#indexAsked) return undefined;
    this.#indexAsked = true;
    const s = this.#state;
    const t0 = performance.now();
    const alive = this.#alive();
    while (Atomics.load(s, STATE) === ANSWERED && alive()) Atomics.wait(s, STATE, ANSWERED, 200);
    const filled = Atomics.load(s, STATE) === INDEXED ? (receiveMessageOnPort(this.#port)?.message as FilledIndex | undefined) : undefined;
    this.#indexWaitedMs = Math.round(performance.now() - t0);
    this.#indexTaken = filled !== undefined;
    return filled;
  }

  /** Whether the list's index was the thread's, and how long the check waited for it. */
  get indexTaken(): boolean {
    return this.#indexTaken;
  }
  get indexWaitedMs(): number {
    return this.#indexWaitedMs;
  }

  /** How long take() held the parse for the thread's answer (work done meanwhile included). */
  get waitedMs(): number {
    return this.#waitedMs;
  }

  /** Where the thread is (tests wait for it to begin before a parse, which would otherwise reach a small file's list first). */
  get phase(): 'locating' | 'reading' | 'answered' | 'none' | 'cancelled' {
    const st = Atomics.load(this.#state, STATE);
    return st === LOCATING ? 'locating' : st === READING ? 'reading' : st === NONE ? 'none' : st === CANCELLED ? 'cancelled' : 'answered';
  }

  readWhole(): void {
    if (this.#outcome === 'taken') this.#outcome = 'taken, then the file was read whole';
    // Its index would not be used either.
    void this.#worker?.terminate();
  }

  /** Whether the thread still works: false once its beat has not moved for STALL_MS. */
  #alive(): () => boolean {
    let beat = Atomics.load(this.#state, BEAT);
    let at = performance.now();
    return () => {
      const b = Atomics.load(this.#state, BEAT);
      const now = performance.now();
      if (b !== beat) {
        beat = b;
        at = now;
      }
      return now - at < STALL_MS;
    };
  }

  get outcome(): ListAheadOutcome {
    return this.#outcome;
  }

  /** The thread ended, whatever it was doing (after the parse). */
  stop(): void {
    this.#port.close();
    void this.#worker?.terminate();
  }
}
