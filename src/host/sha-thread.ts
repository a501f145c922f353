/**
 * The SHA-256 of a file's bytes, computed on a thread of its own while the
 * event loop's thread parses them: a start hashes its config (the state
 * file's records name the config they were made on), and 277 MB (a million
 * sessions and a million policies) took 158 ms of the start's critical
 * path on the loop's thread (docs/bench.md, session 48).
 *
 * Only bytes over a SharedArrayBuffer go to the thread (read-shared.ts):
 * any other Buffer would be copied to it, page faults and all. Those, small
 * ones, and any failure of the thread are hashed on the caller's thread.
 */
import { createHash } from 'node:crypto';
import { Worker } from 'node:worker_threads';

/**
 * Below this many bytes the hash is taken at once: 32 MB take about 19 ms
 * here, the thread's start 25-30 ms of CPU, taken from the other CPU while
 * it verifies the program.
 */
export const SHA_THREAD_FROM = 32 << 20;

const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
parentPort.postMessage(require('node:crypto').createHash('sha256').update(workerData.bytes).digest('hex'));
`;

/** The hex SHA-256 of a text's UTF-8 or of bytes, on this thread. */
export function sha256(text: string | Uint8Array): string {
  return createHash('sha256').update(text).digest('hex');
}

/**
 * The hex SHA-256 of `bytes`, which must not change until it resolves.
 * Never rejects: a thread that cannot start or fails hashes them here.
 */
export function sha256Soon(bytes: Buffer): Promise<string> {
  if (bytes.length < SHA_THREAD_FROM || !(bytes.buffer instanceof SharedArrayBuffer)) return Promise.resolve(sha256(bytes));
  return new Promise((resolve) => {
    let done = false;
    const here = (): void => {
      if (done) return;
      done = true;
      resolve(sha256(bytes));
    };
    let w: Worker;
    try {
      // execArgv []: not the process's flags (--import tsx, profilers): the thread needs none.
      w = new Worker(WORKER, { eval: true, execArgv: [], workerData: { bytes } });
    } catch {
      here();
      return;
    }
    w.once('message', (hex: unknown) => {
      if (done) return;
      if (typeof hex !== 'string') return here();
      done = true;
      resolve(hex);
    });
    w.once('error', here);
    // An exit without an answer (the thread stopped under us): hashed here.
    w.once('exit', here);
  });
}
