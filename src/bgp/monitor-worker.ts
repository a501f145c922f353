/**
 * The monitor's reader thread (a worker_threads Worker the learner starts,
 * one per monitor run, and one per table read): runs `gobgp monitor ...`
 * (the argv it is given; format 'lines') or `gobgp global rib -j` (format
 * 'rib': the table as one JSON object, cut into destinations), reads and
 * decodes its stdout as it comes and posts the decoded lines to the
 * learner, one message per chunk read. The daemon's main thread writes
 * the tables synchronously; reading here keeps gobgp streaming meanwhile, and
 * the lines read during one apply come to the next as one batch
 * (docs/bgp.md "Where the time goes").
 *
 * Messages to the learner: {t: 'spawned', pid}, {t: 'lines', ...}, then one
 * {t: 'exit', code, signal, stderr} when gobgp has exited and every line was
 * posted. From the learner: {t: 'kill'}.
 */
import { spawn } from 'node:child_process';
import { parentPort, workerData } from 'node:worker_threads';
import { MonitorLines, RibDump } from './monitor-stream.js';
import type { DecodedLine } from './routes.js';

export type FromMonitor =
  | { readonly t: 'spawned'; readonly pid: number | undefined }
  | {
      readonly t: 'lines';
      readonly lines: DecodedLine[];
      /** performance.timeOrigin + performance.now() when the chunk was read: a time both threads can use. */
      readonly readAt: number;
      readonly bytes: number;
      /** ms this thread spent decoding the chunk. */
      readonly decodeMs: number;
    }
  | { readonly t: 'exit'; readonly code: number | null; readonly signal: string | null; readonly stderr: string };

const port = parentPort;
if (port === null) throw new Error('monitor-worker.ts runs as a worker thread of the learner');
const { argv, format } = workerData as { argv: string[]; format?: 'lines' | 'rib' };
const post = (m: FromMonitor): void => port.postMessage(m);

const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
post({ t: 'spawned', pid: child.pid });
const reader = format === 'rib' ? new RibDump() : new MonitorLines();
let stderr = '';
const now = (): number => performance.timeOrigin + performance.now();
const chunk = (lines: DecodedLine[], readAt: number, bytes: number): void => {
  if (lines.length > 0 || bytes > 0) post({ t: 'lines', lines, readAt, bytes, decodeMs: now() - readAt });
};
child.stdout.on('data', (d: Buffer) => {
  const at = now();
  chunk(reader.push(d), at, d.length);
});
child.stdout.on('end', () => {
  const at = now();
  chunk(reader.end(), at, 0);
});
child.stderr.on('data', (d: Buffer) => {
  stderr = (stderr + d.toString()).slice(-500);
});
child.on('error', (e) => {
  stderr += e.message;
});
child.on('close', (code, signal) => {
  post({ t: 'exit', code, signal, stderr });
  port.close();
});
port.on('message', (m: { t?: string }) => {
  if (m.t === 'kill') child.kill('SIGKILL');
});
