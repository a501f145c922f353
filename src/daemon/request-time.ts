/**
 * How long the control API takes to answer, seen from the daemon: a
 * histogram by class of request (GET /metrics:
 * `mup_api_request_duration_seconds{class}`), from the moment the daemon
 * has a request's headers to the moment its answer is handed to the socket
 * (an answer cut off, its client gone, is not counted).
 * A change is answered once its state record is durable (group commit), so
 * its time includes that fdatasync; a pipelined request's includes the wait
 * for the answer before it. Not in it: the time a request waits for a busy
 * event loop before its headers are read (mup_event_loop_delay_seconds),
 * and the client's side (its own process, the socket).
 *
 * With the client's own figure (bench:daemon's), it tells the daemon's share
 * of a slow answer from the host's: on a 2-core host that runs the daemon,
 * its clients and the kernel's writes, the client sees more.
 */
import { Histogram } from 'prom-client';
import { RULE_KIND_LIST } from './rules.js';

/** What a request is, for the histogram: reads, single-rule changes, batches, reloads, the rest (config save, counter reset, probe). */
export type RequestClass = 'read' | 'change' | 'batch' | 'reload' | 'other';

export const REQUEST_CLASSES: readonly RequestClass[] = ['read', 'change', 'batch', 'reload', 'other'];

/**
 * Buckets, seconds: fine where the targets are (status and single changes
 * under 5 ms), then up to the 10 s a reload of a million rules takes.
 */
export const REQUEST_BUCKETS = [0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

const RULE_PATHS = new Set(RULE_KIND_LIST.map((k) => k.apiPath));

/** The class of a request by its method and URL (its path as the API routes it: resolved as a URL, trailing slashes left out). */
export function requestClass(method: string | undefined, url: string | undefined): RequestClass {
  const m = method ?? 'GET';
  if (m === 'GET' || m === 'HEAD') return 'read';
  let path: string;
  try {
    path = new URL(url ?? '/', 'http://mup').pathname.replace(/\/+$/, '') || '/';
  } catch {
    return 'other';
  }
  if (path === '/v1/batch') return 'batch';
  if (path === '/v1/reload') return 'reload';
  if (RULE_PATHS.has(path) && (m === 'POST' || m === 'PUT' || m === 'DELETE')) return 'change';
  return 'other';
}

/** The daemon's histogram (one for all its listeners; GET /metrics registers it). */
export function requestHistogram(): Histogram<'class'> {
  const h = new Histogram({
    name: 'mup_api_request_duration_seconds',
    help: "Control API requests, from their headers read to their answer handed to the socket (a change's includes its fdatasync), by class: read, change (one rule), batch, reload, other",
    labelNames: ['class'],
    buckets: REQUEST_BUCKETS,
    registers: [],
  });
  // Every class from the start, at zero: a rate() over a class that has had no request yet is 0, not absent.
  for (const c of REQUEST_CLASSES) h.zero({ class: c });
  return h;
}
