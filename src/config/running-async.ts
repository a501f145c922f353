/**
 * The running config's YAML (splicedRunningYaml where the file's entries'
 * places are known, else runningConfigYaml) on a thread of its own
 * (src/config/running-worker.ts),
 * for a daemon that is serving: with bench:daemon's 11.6 MB config
 * (131,072 rules) the `yaml` package's document took 8 s to parse and
 * print, and GET /v1/config held the event loop 9-13 s in one turn (no
 * status, change, netlink or BGP event served meanwhile), after which the
 * stalled-connection watchdog closed the client's connection. The thread
 * gets the file as the daemon keeps it (deflated) and the running rules
 * compactly: a file entry the API left alone is its index in the file's
 * section (one number), only the other rules cross as objects. It answers
 * with the YAML's UTF-8 bytes (or, for an API answer, the bytes of its
 * JSON string) over a SharedArrayBuffer: not copied, and shared again with
 * the parser's thread when a save reads them back (parseConfigOffLoop).
 */
// Drawn before this module makes a thread, which takes the same seed (src/host/hash-seed.ts).
import '../host/hash-seed.js';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { inflateRawSync } from 'node:zlib';
import type { ItemSpans } from './load.js';
import type { HeldText } from './parse-pieces.js';
import type { RunningRule, RunningSection } from './running.js';
import { nextTurn, SliceClock } from '../host/slice-clock.js';

/**
 * A section's running rules, in order: `order[i] >= 0` is the file's entry
 * at that index, unchanged (origin config); `order[i] = -1 - j` is
 * `rules[j]` (an API rule, or a rule not found in the file).
 */
export interface CompactSection {
  readonly section: string;
  readonly order: Int32Array;
  readonly rules: readonly RunningRule[];
}

/**
 * A CompactSection as it crosses to the thread: its rules as JSON lines in
 * shared memory. As objects, the Worker's constructor cloned them all in
 * one turn: 640 ms for the 524,288 API rules of a `mup config save` at
 * 262,144 + 262,144 (bench:daemon --sessions, session 55).
 */
export interface WireSection {
  readonly section: string;
  readonly order: Int32Array;
  /** One JSON text of a RunningRule a line. */
  readonly rules: Uint8Array;
}

/** What the thread is given. */
export interface RunningJob {
  readonly held: HeldText;
  /** Where each file entry is in the held text (the config read from it): the YAML is spliced from the text (src/config/running-splice.ts). */
  readonly spans?: ItemSpans | undefined;
  readonly sections: readonly WireSection[];
  readonly origins: boolean;
  /** The YAML as a JSON string's bytes (an API answer's member) rather than as itself. */
  readonly asJsonString: boolean;
}

export type FromRunning = { readonly ok: true; readonly bytes: Uint8Array } | { readonly ok: false; readonly message: string };

/** The sections as runningConfigYaml takes them. */
export function expandSections(sections: readonly CompactSection[]): RunningSection[] {
  return sections.map((s) => ({
    section: s.section,
    rules: Array.from(s.order, (v): RunningRule => (v >= 0 ? { key: '', json: {}, origin: 'config', fileIndex: v } : s.rules[-1 - v]!)),
  }));
}

/**
 * The sections' rules written as JSON lines into shared memory, in slices
 * of about SLICE_MS (a clock's ticks); 'aborted' as soon as `signal` is
 * seen aborted between two slices.
 */
export async function wireSections(sections: readonly CompactSection[], signal?: AbortSignal): Promise<WireSection[] | 'aborted'> {
  const clock = new SliceClock();
  const out: WireSection[] = [];
  for (const s of sections) {
    const pieces: Buffer[] = [];
    let lines: string[] = [];
    let bytes = 0;
    const flush = (): void => {
      if (lines.length === 0) return;
      const b = Buffer.from(lines.join(''));
      pieces.push(b);
      bytes += b.length;
      lines = [];
    };
    for (const r of s.rules) {
      if (clock.tick()) {
        flush();
        await nextTurn();
        if (signal?.aborted === true) return 'aborted';
      }
      // JSON.stringify escapes every newline in a text: one rule a line.
      lines.push(`${JSON.stringify(r)}\n`);
    }
    flush();
    const rules = new Uint8Array(new SharedArrayBuffer(bytes));
    let at = 0;
    for (const b of pieces) {
      if (clock.tick()) await nextTurn();
      rules.set(b, at);
      at += b.length;
    }
    out.push({ section: s.section, order: s.order, rules });
  }
  return out;
}

/** The sections as the thread reads them back (the thread's side of wireSections). */
export function unwireSections(sections: readonly WireSection[]): CompactSection[] {
  return sections.map((w) => {
    const text = Buffer.from(w.rules.buffer, w.rules.byteOffset, w.rules.byteLength).toString('utf8');
    const rules = text === '' ? [] : text.slice(0, -1).split('\n').map((line) => JSON.parse(line) as RunningRule);
    return { section: w.section, order: w.order, rules };
  });
}

/** The text a HeldText holds. */
export function heldText(held: HeldText): string {
  if ('text' in held) return held.text;
  const bytes = 'bytes' in held ? held.bytes : inflateRawSync(held.deflated);
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
}

/** The thread's script: beside this module, or the build's when this is the TypeScript source (tests). */
export function runningWorkerUrl(): URL {
  const here = new URL('./running-worker.js', import.meta.url);
  if (existsSync(fileURLToPath(here))) return here;
  return new URL('../../dist/config/running-worker.js', import.meta.url);
}

/** Threads building a running config now, and builds stopped because their caller went away (tests, the log). */
const threads = { live: 0, abandoned: 0 };

export function runningConfigThreads(): { readonly live: number; readonly abandoned: number } {
  return { ...threads };
}

/** What runningConfigOffLoop rejects with when its signal aborted it: the thread stopped, nothing to answer. */
export class RunningConfigAbandoned extends Error {
  constructor() {
    super('the running config was no longer wanted (the client went away): its thread was stopped');
    this.name = 'RunningConfigAbandoned';
  }
}

/**
 * The running config's YAML (spliced with `o.spans`, the places of the
 * held text's entries, else runningConfigYaml(heldText(held),
 * expandSections(sections), o)) as UTF-8 bytes, made on a thread of its own. `signal`: its abort (the client
 * went away) stops the thread, which would otherwise build for seconds
 * more (13-18 s at 131,072 rules) while the next build waits behind it;
 * the promise then rejects with RunningConfigAbandoned once the thread
 * has exited.
 */
export async function runningConfigOffLoop(held: HeldText, sections: readonly CompactSection[], o: { origins: boolean; asJsonString: boolean; signal?: AbortSignal; spans?: ItemSpans | undefined }): Promise<Buffer> {
  if (o.signal?.aborted === true) throw new RunningConfigAbandoned();
  // The rules are written for the thread first, in slices: a client gone meanwhile starts no thread.
  const wire = await wireSections(sections, o.signal);
  return new Promise((resolve, reject) => {
    if (wire === 'aborted' || o.signal?.aborted === true) {
      threads.abandoned++;
      reject(new RunningConfigAbandoned());
      return;
    }
    const job: RunningJob = { held, sections: wire, origins: o.origins, asJsonString: o.asJsonString, spans: o.spans };
    const worker = new Worker(runningWorkerUrl(), { workerData: job });
    threads.live++;
    let settled = false;
    const abandon = (): void => {
      if (settled) return;
      settled = true;
      threads.abandoned++;
      // Rejected once it is gone (exit), so that no thread outlives the answer.
      worker.once('exit', () => reject(new RunningConfigAbandoned()));
      void worker.terminate();
    };
    o.signal?.addEventListener('abort', abandon, { once: true });
    worker.once('message', (m: FromRunning) => {
      if (settled) return;
      settled = true;
      if (m.ok) resolve(Buffer.from(m.bytes.buffer, m.bytes.byteOffset, m.bytes.byteLength));
      else reject(new Error(m.message));
    });
    worker.once('error', (e) => {
      if (!settled) reject(e);
      settled = true;
    });
    worker.once('exit', (code) => {
      threads.live--;
      o.signal?.removeEventListener('abort', abandon);
      if (!settled) reject(new Error(`the running config's thread exited (${code}) before it answered`));
      settled = true;
    });
  });
}
