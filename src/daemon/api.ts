/**
 * The control API: JSON over HTTP, on a unix socket (access by file mode and
 * group) and optionally on TCP (bearer token). Routes:
 *
 *   GET    /v1/status
 *   GET    /v1/policies                    POST /v1/policies    (add)
 *   PUT    /v1/policies  (replace, by match)  DELETE /v1/policies?match=P | ?name=N
 *   GET    /v1/localsids                   POST /v1/localsids   (add)
 *   PUT    /v1/localsids (replace, by sid)    DELETE /v1/localsids?sid=P | ?name=N
 *   GET    /v1/counters[?rules=all|active|none|N | ?rule=NAME-OR-KEY[&kind=K]]   POST /v1/counters/reset
 *   GET    /v1/policies, /v1/localsids, /v1/sessions [?limit=N[&after=CURSOR]]: pages in key order
 *   POST   /v1/reload[?force=true][&check=true]
 *   GET    /v1/config[?origins=false]      POST /v1/config/save (running config: YAML; into the config file)
 *   GET    /v1/probe                       POST /v1/probe       (latency probe on/off: src/dataplane/probe-control.ts)
 *   POST   /v1/batch                       (many changes, all or nothing: src/daemon/batch.ts)
 *   GET    /v1/health                      (200 ok / 503 degraded: src/daemon/health.ts)
 *   GET    /v1/bgp                         (BGP MUP status: src/daemon/bgp.ts; 404 without a bgp section)
 *   GET    /metrics                        (Prometheus text format)
 *
 * Errors, one shape: {"error": "<message>", "code": "<machine-readable>",
 * "path": "key.path"?, "index": N?} with 400 (invalid input), 401 (token),
 * 403 (a change on a read-only listener or with the read-only token), 404,
 * 405, 409 (conflict: exists, full, name taken), 413 (body over the
 * limit), 415 (not JSON), 422 (an invalid batch operation), 500, 503 (too
 * many connections; Retry-After). The codes: ERROR_CODES, docs/api.md.
 *
 * Limits (docs/api.md, "Limits"): one request at a time per connection (a
 * pipelined one waits for the answer before it); large answers (counters,
 * rule lists, /metrics) are streamed in pieces as the client reads them, at
 * most LARGE_ANSWERS_AT_ONCE at a time; an answer that makes no progress for
 * daemon.stall_timeout seconds closes its connection; each listener takes at
 * most daemon.max_connections connections.
 */
import { chmodSync, chownSync, existsSync, fstatSync, readFileSync, unlinkSync, openSync, closeSync } from 'node:fs';
import { Server, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect, isIP, type Socket } from 'node:net';
import { dirname } from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { timingSafeEqual } from 'node:crypto';
import type { MupRegistry } from './metrics.js';
import { ConfigError } from '../config/errors.js';
import { DEFAULT_MAX_CONNECTIONS, DEFAULT_STALL_TIMEOUT_S } from '../config/load.js';
import { RunningConfigAbandoned } from '../config/running-async.js';
import { AddressError } from '../sid/addr.js';
import type { Daemon } from './daemon.js';
import type { Logger } from './log.js';
import { batchEnded, batchStarted, forcedReleaseNote, releaseMemorySoon, requestEnded, requestStarted } from './memory.js';
import { RULE_KIND_LIST, RuleError, type RuleKindSpec } from './rules.js';
import { BatchError, batchOperations } from './batch.js';
import { batchFromBytes, NOT_READ } from './batch-bytes.js';
import { parseJsonSliced } from './json-slices.js';
import { nextTurn, runNow, runYielding } from './slices.js';
import { SLICE_MS, SliceClock } from '../host/slice-clock.js';
import { RowKeyedMap } from '../config/row-map.js';
import { latin1, plainText, putAscii, putUint } from '../config/ascii-text.js';
import { isRows } from '../host/rows.js';
import { health } from './health.js';
import { requestClass } from './request-time.js';
import koffi from 'koffi';
import { probeStatus, ProbeRequestError, setProbe } from '../dataplane/probe-control.js';
import { makeDirs } from '../host/mkdirs.js';

export const MAX_BODY = 64 * 1024;
/** POST /v1/batch: 10,000 operations of a few hundred bytes each. */
export const MAX_BATCH_BODY = 16 * 1024 * 1024;

/**
 * The machine-readable `code` of every error answer, by default per status
 * (a more precise one is given where known). Documented in docs/api.md.
 */
export const ERROR_CODES = {
  malformed: 'the request cannot be read: not JSON, a key given twice, an unknown or bad query parameter, a batch document of the wrong shape (400)',
  invalid: 'an entry fails validation; `path` names the key (400; 422 in a batch, with `index`)',
  unauthorized: 'missing or wrong bearer token (401)',
  forbidden: 'a change on a read-only listener (403)',
  read_only_token: 'a change sent with the read-only token (403)',
  not_found: 'no such endpoint, or no such rule (404)',
  method_not_allowed: 'the method is not served on this path; see the Allow header (405)',
  exists: 'a rule with that key exists already (409)',
  no_such_rule: 'in a batch: replace or delete of a rule that is not there (409)',
  name_taken: 'the name is used by another rule (409)',
  conflict: 'the tables cannot take it: full, too many prefix lengths (409)',
  body_too_large: 'the body is over the limit (413)',
  unsupported_media_type: 'the body is not sent as application/json (415)',
  not_saved: 'the state file could not be written; the change was undone (503, 507 for a full disk)',
  too_many_connections: 'the listener is at daemon.max_connections; retry (503)',
  internal: 'a bug or an unexpected system error; see the daemon log (500)',
  bad_cursor: 'a list page asked with an `after` cursor this daemon did not hand out, or for another list (400)',
  learned: 'the rule (its key) was learned from BGP: the config and the API cannot overwrite or delete it (409; docs/bgp.md)',
} as const;
export type ErrorCode = keyof typeof ERROR_CODES;

function codeOf(status: number): ErrorCode {
  switch (status) {
    case 400:
      return 'malformed';
    case 401:
      return 'unauthorized';
    case 403:
      return 'forbidden';
    case 404:
      return 'not_found';
    case 405:
      return 'method_not_allowed';
    case 409:
      return 'conflict';
    case 413:
      return 'body_too_large';
    case 415:
      return 'unsupported_media_type';
    case 422:
      return 'invalid';
    case 503:
    case 507:
      return 'not_saved';
    default:
      return 'internal';
  }
}

/**
 * The request target as a URL. Node's parser lets through targets `new
 * URL` refuses ("GET http://[/v1/status"): a 400, not the 500 of an
 * exception.
 */
function requestUrl(target: string | undefined): URL {
  try {
    return new URL(target ?? '/', 'http://mup');
  } catch {
    throw new HttpError(400, `the request target ${JSON.stringify((target ?? '').slice(0, 200))} is not a URL path; send a path such as /v1/status`);
  }
}

/**
 * The path without its trailing slashes ("/" for none left). A loop, not
 * /\/+$/: that regex tries each run of slashes to the end, quadratic in
 * their number (a 16 KB target of slashes then one letter held the event
 * loop 170 ms).
 */
export function withoutTrailingSlashes(path: string): string {
  let end = path.length;
  while (end > 0 && path.charCodeAt(end - 1) === 0x2f /* / */) end--;
  return end === 0 ? '/' : end === path.length ? path : path.slice(0, end);
}

/**
 * The client went away before its request was read whole (its body cut
 * short, its socket closed): the body's read failed with the stream's own
 * error. Not a refusal of ours thrown while reading (a 413 ends the read,
 * which destroys the request too: it is still answered).
 */
function clientLeft(req: IncomingMessage, e: unknown): boolean {
  return !(e instanceof HttpError) && req.destroyed && !req.complete && (req.socket === null || req.socket.destroyed || (e as NodeJS.ErrnoException).code === 'ECONNRESET');
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly path?: string,
    readonly code?: ErrorCode,
  ) {
    super(message);
  }
}

/**
 * 400 `malformed` for a query parameter this route does not take. Ignored
 * before: `POST /v1/batch?check=true` applied the batch, and
 * `POST /v1/counters/reset?rule=NAME` reset every counter. `why` says more
 * for one parameter (what to use instead).
 */
function onlyParams(url: URL, route: string, allowed: readonly string[], why: Readonly<Record<string, string>> = {}): void {
  for (const k of url.searchParams.keys()) {
    if (allowed.includes(k)) continue;
    const takes = allowed.length === 0 ? 'takes none' : `takes only ${allowed.map((a) => `?${a}=`).join(' and ')}`;
    throw new HttpError(400, `unknown query parameter ${k}: ${route} ${takes}${why[k] === undefined ? '' : `; ${why[k]}`}`, k, 'malformed');
  }
}

let getsockopt: ((fd: number, level: number, name: number, out: { pid?: number; uid?: number; gid?: number }, len: number[]) => number) | undefined;

/** The peer of a unix socket connection (SO_PEERCRED), or undefined when it cannot be read. */
export function peerCred(socket: Socket): { pid: number; uid: number; gid: number } | undefined {
  const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) return undefined;
  try {
    if (getsockopt === undefined) {
      koffi.struct('mup_ucred', { pid: 'int32', uid: 'uint32', gid: 'uint32' });
      getsockopt = koffi.load('libc.so.6').func('int getsockopt(int fd, int level, int name, _Out_ mup_ucred *val, _Inout_ uint32 *len)') as unknown as typeof getsockopt;
    }
    const out: { pid?: number; uid?: number; gid?: number } = {};
    const SOL_SOCKET = 1;
    const SO_PEERCRED = 17;
    if (getsockopt!(fd, SOL_SOCKET, SO_PEERCRED, out, [12]) !== 0) return undefined;
    return { pid: out.pid ?? 0, uid: out.uid ?? 0, gid: out.gid ?? 0 };
  } catch {
    return undefined;
  }
}

const bigintAsNumber = (_k: string, x: unknown): unknown => (typeof x === 'bigint' ? (x <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(x) : x.toString()) : x);

/**
 * JSON with bigints as numbers (exact below 2^53, strings above). Without
 * the replacer first: JSON.stringify refuses a bigint with a TypeError, and
 * only then is the value written again through the replacer, which costs a
 * call for every value (a batch's answer of 10,000 results: 1.6 of the 94 s
 * of a million rules through /v1/batch).
 */
export function toJson(v: unknown): string {
  try {
    return JSON.stringify(v);
  } catch (e) {
    if (!(e instanceof TypeError)) throw e;
    return JSON.stringify(v, bigintAsNumber);
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = `${toJson(body)}\n`;
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** Bytes written to the socket in one piece by a streamed answer. */
const PIECE = 64 * 1024;
/** Large answers (counters, rule lists, /metrics) being built or sent at once, daemon-wide. */
export const LARGE_ANSWERS_AT_ONCE = 4;
/** Requests queued on one connection (pipelined) before it is closed. */
const MAX_PIPELINED = 32;

/** Array elements per piece where jsonPieces stringifies them whole. */
const ARRAY_RUN = 256;

/**
 * JSON text of `v` in pieces: arrays element by element and objects member
 * by member down to `depth` levels, below that JSON.stringify whole (as
 * toJson). Joined, the pieces are toJson(v).
 */
export function* jsonPieces(v: unknown, depth = 2): Generator<string> {
  if ((depth >= 1 && isRows(v)) || (depth === 1 && Array.isArray(v))) {
    // Elements stringified whole, a run of ARRAY_RUN per JSON.stringify (one call per element cost the
    // answer to a 10,000-operation batch 10 times what one call for all of it does). Rows are made as
    // their run is reached, so each run's objects die young (src/host/rows.ts).
    yield '[';
    let run: unknown[] = [];
    let first = true;
    const text = (): string => {
      const t = `${first ? '' : ','}${toJson(run).slice(1, -1)}`;
      first = false;
      run = [];
      return t;
    };
    for (const x of v as Iterable<unknown>) {
      run.push(x);
      if (run.length === ARRAY_RUN) yield text();
    }
    if (run.length > 0) yield text();
    yield ']';
    return;
  }
  if (depth > 0 && Array.isArray(v)) {
    yield '[';
    for (let i = 0; i < v.length; i++) {
      if (i > 0) yield ',';
      const x: unknown = v[i];
      if (x === undefined || typeof x === 'function' || typeof x === 'symbol') yield 'null';
      else yield* jsonPieces(x, depth - 1);
    }
    yield ']';
    return;
  }
  if (depth > 0 && typeof v === 'object' && v !== null && typeof (v as { toJSON?: unknown }).toJSON !== 'function') {
    yield '{';
    let first = true;
    for (const [k, x] of Object.entries(v)) {
      if (x === undefined || typeof x === 'function' || typeof x === 'symbol') continue;
      yield `${first ? '' : ','}${JSON.stringify(k)}:`;
      first = false;
      yield* jsonPieces(x, depth - 1);
    }
    yield '}';
    return;
  }
  yield toJson(v) ?? 'null';
}

/** Resolves when `res` can take more ('drain') or is gone ('close'). */
function writable(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

/**
 * Send text pieces as one chunked answer, PIECE bytes at a time, waiting for
 * the client to take each (write()'s backpressure) before making the next:
 * what is buffered for a slow client is one piece, not the whole answer.
 * The event loop runs a turn every `sliceMs` of making pieces, whether or
 * not the client kept up. Stops when the connection closes (a stalled one
 * is closed by the watchdog).
 */
export async function stream(res: ServerResponse, status: number, contentType: string, pieces: Iterable<string>, sliceMs = SLICE_MS): Promise<void> {
  res.writeHead(status, { 'content-type': contentType });
  let parts: string[] = [];
  let size = 0;
  // A client that takes everything at once (a local socket) still gets it over several turns of the loop.
  const clock = new SliceClock(sliceMs);
  for (const p of pieces) {
    parts.push(p);
    size += p.length;
    // What is made so far goes out when it is a PIECE, or when the slice is up (making a PIECE of a rule
    // listing took 4-8 ms, and its turn 9-13 with the write).
    const late = clock.due();
    if (size < PIECE && !late) continue;
    if (res.destroyed) return;
    const more = res.write(parts.join(''));
    parts = [];
    size = 0;
    if (!more) await writable(res);
    // Also after a 'drain': a client that reads as fast as it is written drains the socket within the
    // same turn, and the answer went out whole before the loop ran again (GET /v1/counters?rules=all of
    // 131,072 rules: 150-330 ms in one turn).
    if (late || clock.due()) await nextTurn();
  }
  if (!res.destroyed) res.end(parts.join(''));
}

/** UTF-8 bytes as text, PIECE bytes at a time (a character cut between two pieces is joined by the decoder). */
export function* textPieces(bytes: Buffer): Generator<string> {
  const decoder = new StringDecoder('utf8');
  for (let at = 0; at < bytes.length; at += PIECE) yield decoder.write(bytes.subarray(at, at + PIECE));
  const tail = decoder.end();
  if (tail !== '') yield tail;
}

/** A counting semaphore: at most `n` holders; the rest wait in order. */
class Slots {
  #free: number;
  readonly #waiting: (() => void)[] = [];
  constructor(n: number) {
    this.#free = n;
  }
  async run<T>(f: () => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((r) => this.#waiting.push(r));
    try {
      return await f();
    } finally {
      const next = this.#waiting.shift();
      if (next !== undefined) next();
      else this.#free++;
    }
  }
}

/** Shared by every listener of the process: the memory they bound is the process's. */
const largeAnswers = new Slots(LARGE_ANSWERS_AT_ONCE);
/** Running configs (GET /v1/config) being built, daemon-wide. */
const configBuilds = new Slots(1);

/** A large answer: JSON streamed, built only once a slot is free (and only if the client is still there). */
function sendLarge(res: ServerResponse, status: number, build: () => unknown): Promise<void> {
  return largeAnswers.run(async () => {
    if (res.destroyed) return;
    const value: unknown = await build(); // before the status line: an error here is still answered as one
    if (res.destroyed) return;
    await stream(res, status, 'application/json', (function* () {
      yield* jsonPieces(value);
      yield '\n';
    })());
  });
}

/** sendLarge of an answer already in pieces (its text: each piece made when the one before is sent). */
function sendLargePieces(res: ServerResponse, status: number, pieces: () => Iterable<string>): Promise<void> {
  return largeAnswers.run(async () => {
    if (res.destroyed) return;
    await stream(res, status, 'application/json', pieces());
  });
}

const RESULT_INDEX = Buffer.from('{"index":', 'latin1');

/** `,"op":"OP","kind":"KIND","key":"` of each op and kind met, made once. */
const resultMiddles = new Map<string, Map<string, Buffer>>();

function resultMiddle(op: string, kind: string): Buffer {
  let byKind = resultMiddles.get(op);
  if (byKind === undefined) resultMiddles.set(op, (byKind = new Map()));
  let m = byKind.get(kind);
  if (m === undefined) byKind.set(kind, (m = Buffer.from(`,"op":${JSON.stringify(op)},"kind":${JSON.stringify(kind)},"key":"`, 'utf8')));
  return m;
}

/**
 * A batch's answer, the text of JSON.stringify({...head, results: [{index,
 * op, kind, key}, ...]}) and a newline, in pieces of about PIECE bytes
 * written straight into a buffer: an object per result and its
 * JSON.stringify, slice and join were a third of what a batch allocated
 * (220 of 650 MB over 262,144 + 262,144 through /v1/batch, V8's sampling
 * heap profiler). A key that is not plain text goes through JSON.stringify.
 * Exported for tests.
 */
export function* batchAnswerPieces(head: Record<string, unknown>, results: readonly { readonly op: string; readonly kind: string; readonly key: string }[]): Generator<string> {
  const h = JSON.stringify(head);
  let buf = Buffer.allocUnsafe(PIECE + 1024);
  let at = buf.write(`${h.slice(0, -1)}${h.length > 2 ? ',' : ''}"results":[`, 0, 'latin1');
  for (let i = 0; i < results.length; i++) {
    const r = results[i]!;
    const mid = resultMiddle(r.op, r.kind);
    if (at > PIECE || at + r.key.length + mid.length + 32 > buf.length) {
      // The text is a copy: the buffer is written again (larger only for a key that does not fit).
      yield latin1(buf, 0, at);
      if (r.key.length + mid.length + 32 > buf.length) buf = Buffer.allocUnsafe(r.key.length + mid.length + 32);
      at = 0;
    }
    if (i > 0) buf[at++] = 0x2c;
    buf.set(RESULT_INDEX, at);
    at = putUint(buf, at + RESULT_INDEX.length, i);
    if (plainText(r.key)) {
      buf.set(mid, at);
      at = putAscii(buf, at + mid.length, r.key);
      buf[at++] = 0x22;
      buf[at++] = 0x7d;
    } else {
      // Not latin1 text as it is: the pieces so far, then this one's key as JSON (escaped; UTF-8 when written).
      buf.set(mid, at);
      at += mid.length - 1;
      yield latin1(buf, 0, at);
      at = 0;
      yield `${JSON.stringify(r.key)}}`;
    }
  }
  at = putAscii(buf, at, ']}\n');
  yield latin1(buf, 0, at);
}

/** A request's JSON body, checked (type, size, repeated keys). Exported for tests. */
export async function readBody(req: IncomingMessage, limit = MAX_BODY): Promise<unknown> {
  const hint = bodyHeaders(req, limit);
  // Each piece decoded as it comes (a character split between two pieces is joined by the decoder), and the
  // texts joined once: a batch's 1.3-2 MB copied into one Buffer and decoded from it took two turns of 18-24
  // ms (the pages of both copies touched for the first time).
  const decoder = new StringDecoder('utf8');
  const parts: string[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > limit) throw new HttpError(413, `body is over the ${limit}-byte limit; ${hint}`);
    parts.push(decoder.write(c as Buffer));
  }
  const tail = decoder.end();
  if (tail !== '') parts.push(tail);
  // A large body (a batch: up to 16 MiB) is read in a few turns of the event loop, not one.
  const large = size > LARGE_BODY;
  const text = parts.length === 1 ? parts[0]! : parts.join('');
  if (large) await nextTurn();
  return bodyValue(text, large);
}

/** A JSON body's headers checked (type, charset, declared size): the hint for a body over `limit`. */
function bodyHeaders(req: IncomingMessage, limit: number): string {
  const type = req.headers['content-type'] ?? '';
  // application/json, with parameters or none; not application/json-seq and the like (\b let those through).
  if (!/^application\/json\s*(;|$)/i.test(type)) {
    throw new HttpError(415, `send the body as JSON with Content-Type: application/json (got ${JSON.stringify(type || 'none')})`);
  }
  // The body is read as UTF-8 (JSON's encoding, RFC 8259 8.1): another charset would be read wrongly, not refused.
  const charset = /;\s*charset\s*=\s*"?([^";\s]*)"?/i.exec(type)?.[1];
  if (charset !== undefined && !/^utf-?8$/i.test(charset)) {
    throw new HttpError(415, `the body is read as UTF-8 (JSON's encoding); send it as UTF-8 with Content-Type: application/json (got charset ${JSON.stringify(charset)})`);
  }
  const declared = Number(req.headers['content-length'] ?? NaN);
  const hint = limit === MAX_BODY ? 'send one rule per request (many at once: POST /v1/batch)' : 'split the batch';
  if (declared > limit) throw new HttpError(413, `body of ${declared} bytes is over the ${limit}-byte limit; ${hint}`);
  return hint;
}

/** A body's text as JSON (400 when it is not, or gives a key twice); `large`: parsed and checked in slices. */
async function bodyValue(text: string, large: boolean): Promise<unknown> {
  let body: unknown;
  try {
    // A batch's 1.3-2 MB took 8-23 ms of the loop in one JSON.parse: read member by member, element by element.
    body = large ? await runYielding(parseJsonSliced(text)) : (JSON.parse(text) as unknown);
  } catch (e) {
    throw new HttpError(400, `body is not valid JSON: ${(e as Error).message}`);
  }
  // JSON.parse keeps the last of a repeated key without a word; the config
  // file refuses repeated keys, and so does the API (one rule, one meaning).
  const twice = large ? await runYielding(repeatedKeys(text)) : repeatedKey(text);
  if (twice !== undefined) throw new HttpError(400, `request body: ${twice}: key given twice; give each key once`, twice);
  return body;
}

/**
 * POST /v1/batch's operations. The body's bytes are copied into one buffer
 * as they come (its pages touched a piece at a time), then, when it is over
 * `bytesFrom` (LARGE_BODY; tests give 0), read by batchFromBytes
 * (src/daemon/batch-bytes.ts: the common adds and replaces of sessions and
 * policies straight into rows, each other operation JSON.parse'd alone); a
 * body it does not read, or a smaller one, is decoded and read as any other
 * body (readBody, batchOperations), which words every error.
 */
export async function readBatchBody(req: IncomingMessage, limit = MAX_BATCH_BODY, bytesFrom = LARGE_BODY): Promise<unknown[]> {
  const hint = bodyHeaders(req, limit);
  const declared = Number(req.headers['content-length'] ?? NaN);
  // Made at its declared length up to 1 MiB, then doubled as bytes come: a length declared and not sent holds no more.
  let buf = Buffer.allocUnsafe(Number.isSafeInteger(declared) && declared > 0 ? Math.min(declared, 1 << 20) : 64 * 1024);
  let size = 0;
  for await (const c of req) {
    const piece = c as Buffer;
    if (size + piece.length > limit) throw new HttpError(413, `body is over the ${limit}-byte limit; ${hint}`);
    if (size + piece.length > buf.length) {
      const next = Buffer.allocUnsafe(Math.min(limit, Math.max(size + piece.length, 2 * buf.length)));
      buf.copy(next, 0, 0, size);
      buf = next;
    }
    piece.copy(buf, size);
    size += piece.length;
  }
  const bytes = buf.subarray(0, size);
  const large = size > LARGE_BODY;
  if (large) await nextTurn();
  // From its bytes when large (a small body: one JSON.parse, and the rule reader's objects: RuleRows' stores are
  // for many rules).
  const ops = size > bytesFrom ? await runYielding(batchFromBytes(bytes, batchOpValue)) : undefined;
  if (ops !== undefined) return ops;
  return batchOperations(await bodyValue(large ? await runYielding(decodedSliced(bytes)) : bytes.toString('utf8'), large));
}

/** Bytes decoded as UTF-8 a piece at a time (a turn between two), as readBody decodes a body as it comes. */
function* decodedSliced(bytes: Buffer): Generator<void, string> {
  const decoder = new StringDecoder('utf8');
  const parts: string[] = [];
  for (let at = 0; at < bytes.length; at += LARGE_BODY) {
    if (at > 0) yield;
    parts.push(decoder.write(bytes.subarray(at, at + LARGE_BODY)));
  }
  parts.push(decoder.end());
  return parts.join('');
}

/** An operation's text as batchFromBytes needs it: its value, or NOT_READ (not JSON, or a key given twice). */
function batchOpValue(text: string): unknown {
  let v: unknown;
  try {
    v = JSON.parse(text) as unknown;
  } catch {
    return NOT_READ;
  }
  return repeatedKey(text) === undefined ? v : NOT_READ;
}

/**
 * Key path of the first member name given twice in one object of `text`
 * (valid JSON), if any. One pass over the text, jumping from quote to quote
 * inside strings; the path is spelled only for the key found twice (a
 * 10,000-operation batch is 1.3 MB).
 */
export function repeatedKey(text: string): string | undefined {
  return runNow(repeatedKeys(text));
}

/** Bytes of a request body over which it is read in several turns of the event loop. */
export const LARGE_BODY = 128 * 1024;

/**
 * Characters repeatedKeys scans between two looks at the slice clock. A
 * count alone (128 KB, about 2 ms here once compiled) took 11 ms a turn
 * while the scanner's code was still cold.
 */
const SCAN_CHECK = 4096;

/**
 * An object or a list of repeatedKeys' walk, reused for every object or
 * list met at its depth: an object's keys so far are their places in the
 * text (and their hashes), not strings. A batch of 10,000 operations made
 * a frame, a key list and a string for each key of each operation: at
 * 262,144 + 262,144 operations through /v1/batch, 0.35 GB of garbage.
 */
class KeyFrame {
  isObject = false;
  /** A list: the element's index. */
  index = 0;
  /** An object: whether the next string is a key, and the key last read (its place, for the path). */
  expectKey = false;
  key = -1;
  count = 0;
  readonly starts: number[] = [];
  readonly ends: number[] = [];
  readonly hashes: number[] = [];
  /** A key with an escape, decoded (by its place in the lists); sparse. */
  decoded: Map<number, string> | undefined;
  /**
   * Past SMALL keys: the keys as strings, in a Set (V8's string hash is
   * seeded per process). Not a Map by this scan's own hash: FNV-1a has no
   * seed, and keys chained from colliding blocks ("declinate" and
   * "macallums" hash alike) made one bucket of 100,000 keys in a 16 MiB
   * body, a quadratic scan (found in review). An operation has fewer keys.
   */
  names: Set<string> | undefined;

  reset(isObject: boolean): void {
    this.isObject = isObject;
    this.index = 0;
    this.expectKey = isObject;
    this.key = -1;
    this.count = 0;
    this.decoded = undefined;
    this.names = undefined;
  }
}

/** repeatedKey, yielding when SLICE_MS has passed (looked at every SCAN_CHECK characters). */
function* repeatedKeys(text: string): Generator<void, string | undefined> {
  const SMALL = 16;
  const frames: KeyFrame[] = [];
  let depth = 0;
  const keyText = (f: KeyFrame, k: number): string => f.decoded?.get(k) ?? text.slice(f.starts[k]!, f.ends[k]!);
  const keyLength = (f: KeyFrame, k: number): number => f.decoded?.get(k)?.length ?? f.ends[k]! - f.starts[k]!;
  const keyChar = (f: KeyFrame, k: number, x: number): number => {
    const d = f.decoded?.get(k);
    return d === undefined ? text.charCodeAt(f.starts[k]! + x) : d.charCodeAt(x);
  };
  const sameKey = (f: KeyFrame, a: number, b: number): boolean => {
    const len = keyLength(f, a);
    if (len !== keyLength(f, b)) return false;
    for (let x = 0; x < len; x++) if (keyChar(f, a, x) !== keyChar(f, b, x)) return false;
    return true;
  };
  const member = (path: string, key: string): string =>
    /^[A-Za-z_][A-Za-z0-9_-]*$/.test(key) ? (path === '' ? key : `${path}.${key}`) : `${path}[${JSON.stringify(key)}]`;
  const pathHere = (): string => {
    let path = '';
    for (let d = 0; d < depth; d++) {
      const f = frames[d]!;
      // An object before its first key (not JSON, which the caller has refused already) adds nothing.
      if (f.isObject && f.key < 0) continue;
      path = f.isObject ? member(path, keyText(f, f.key)) : `${path}[${f.index}]`;
    }
    return path;
  };
  /** Key `k` of `f` (just added) is given earlier in the same object. */
  const repeated = (f: KeyFrame, k: number): boolean => {
    if (f.names !== undefined) {
      const name = keyText(f, k);
      if (f.names.has(name)) return true;
      f.names.add(name);
      return false;
    }
    const h = f.hashes[k]!;
    for (let o = 0; o < k; o++) if (f.hashes[o] === h && sameKey(f, o, k)) return true;
    if (k + 1 > SMALL) {
      f.names = new Set();
      for (let o = 0; o <= k; o++) f.names.add(keyText(f, o));
    }
    return false;
  };
  const n = text.length;
  const clock = new SliceClock();
  let pause = SCAN_CHECK;
  for (let i = 0; i < n; i++) {
    if (i >= pause) {
      pause = i + SCAN_CHECK;
      if (clock.due()) yield;
    }
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      // The closing quote: the next one not escaped (an odd run of backslashes before it escapes it).
      let j = text.indexOf('"', i + 1);
      for (;;) {
        let b = j - 1;
        while (text.charCodeAt(b) === 0x5c) b--;
        if ((j - 1 - b) % 2 === 0) break;
        j = text.indexOf('"', j + 1);
      }
      const top = depth === 0 ? undefined : frames[depth - 1]!;
      if (top !== undefined && top.isObject && top.expectKey) {
        const k = top.count++;
        top.starts[k] = i + 1;
        top.ends[k] = j;
        let h = 0x811c9dc5;
        let escape = false;
        for (let x = i + 1; x < j; x++) {
          const ch = text.charCodeAt(x);
          if (ch === 0x5c) {
            escape = true;
            break;
          }
          h = Math.imul(h ^ ch, 0x01000193);
        }
        if (escape) {
          // A key with an escape is compared as what it means ("a" and "\u0061" are one key).
          const d = JSON.parse(text.slice(i, j + 1)) as string;
          (top.decoded ??= new Map()).set(k, d);
          h = 0x811c9dc5;
          for (let x = 0; x < d.length; x++) h = Math.imul(h ^ d.charCodeAt(x), 0x01000193);
        }
        top.hashes[k] = h;
        top.key = k;
        if (repeated(top, k)) return pathHere();
        top.expectKey = false;
      }
      i = j;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      const f = frames[depth] ?? (frames[depth] = new KeyFrame());
      f.reset(c === 0x7b);
      depth++;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      if (depth > 0) depth--;
    } else if (c === 0x2c /* , */ && depth > 0) {
      const top = frames[depth - 1]!;
      if (!top.isObject) top.index++;
      else top.expectKey = true;
    }
  }
  return undefined;
}

export interface ApiOptions {
  readonly daemon: Daemon;
  readonly metrics: MupRegistry;
  readonly log: Logger;
  /**
   * The TCP listener's access. Absent: the unix socket, where the socket
   * file's mode and group decide. `token`: required on every request (on
   * changes always; on reads unless `openReads`). No token: read-only,
   * changes answered 403 (the loader allows that only with openReads, on
   * loopback).
   */
  readonly tcp?: { readonly token?: string; readonly openReads: boolean; /** daemon.http.read_token_file: reads and /metrics only. */ readonly readToken?: string };
}

const READ_METHODS = new Set(['GET', 'HEAD']);

/**
 * The bearer token of daemon.http.token_file. Refused (an Error naming the
 * file and what to do): unreadable, shorter than 16 characters, or readable
 * by group or others (mode & 0o077): a token others can read is no secret.
 */
export function readTokenFile(file: string, key = 'daemon.http.token_file'): string {
  let text: string;
  let mode: number;
  try {
    const fd = openSync(file, 'r');
    try {
      mode = fstatSync(fd).mode;
      text = readFileSync(fd, 'utf8');
    } finally {
      closeSync(fd);
    }
  } catch (e) {
    throw new Error(`${key}: cannot read ${file} (${(e as Error).message}); create it (install -m 600 /dev/null ${file} && openssl rand -hex 16 > ${file})`);
  }
  if ((mode & 0o077) !== 0) {
    throw new Error(
      `${key}: ${file} has mode ${(mode & 0o777).toString(8).padStart(4, '0')}, readable or writable by group or others, ` +
        `so any local user could take the token; make it private: chmod 600 ${file}`,
    );
  }
  const token = text.trim();
  if (token.length < 16) throw new Error(`${key}: ${file}: the token is ${token.length} characters; use at least 16 (e.g. openssl rand -hex 16 > ${file})`);
  return token;
}

/** Entries per list page: the default when `after` is given without `limit`, and the most one page holds. */
export const DEFAULT_PAGE = 1000;
export const MAX_PAGE = 10_000;

/**
 * A list cursor: the last key of a page, and the list it is for, as
 * base64url JSON (opaque to clients). Keys are compared as strings, so a
 * cursor keeps its place when rules are added or deleted between pages
 * (its own key included): no entry present throughout is skipped or given
 * twice.
 */
export function encodeCursor(kind: string, key: string): string {
  return Buffer.from(JSON.stringify({ k: kind, a: key })).toString('base64url');
}

export function decodeCursor(kind: string, cursor: string): string {
  const bad = (why: string): never => {
    throw new HttpError(400, `after=${JSON.stringify(cursor.length > 64 ? `${cursor.slice(0, 64)}...` : cursor)}: ${why}; pass the \`next\` of the page before, or leave after out to start at the first page`, 'after', 'bad_cursor');
  };
  if (!/^[A-Za-z0-9_-]{1,1024}$/.test(cursor)) bad('not a cursor');
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    bad('not a cursor');
  }
  const c = v as { k?: unknown; a?: unknown };
  if (typeof c !== 'object' || c === null || typeof c.k !== 'string' || typeof c.a !== 'string') bad('not a cursor');
  if (c.k !== kind) bad(`a cursor of the ${String(c.k)} list, not of this one (${kind})`);
  return c.a as string;
}

/**
 * The page after `after` (exclusive): the `limit` smallest keys greater than
 * it, in one pass over the rules keeping at most `limit` (no sort of every
 * key, nothing as large as the list built). `more`: keys remain after it.
 */
export function pageKeys(keys: Iterable<string>, after: string | undefined, limit: number): { keys: string[]; more: boolean } {
  return runNow(pageKeysSlices(keys, after, limit));
}

/**
 * pageKeys in slices (it yields when `clock` says a slice is over). The
 * `limit` smallest keys so far are a max-heap, the largest at its root: a
 * key that is not smaller than the root costs one comparison, one that is
 * about log2(limit); they are then taken off the root largest first. (A
 * sorted array with an insertion per key moved up to `limit` keys each
 * time, in one turn: a page of 10,000 of a million rules whose keys come in
 * descending order held the loop 3-6 s.)
 */
export function* pageKeysSlices(keys: Iterable<string>, after: string | undefined, limit: number, clock = new SliceClock()): Generator<void, { keys: string[]; more: boolean }> {
  const heap: string[] = [];
  /**
   * The keys in the heap: a live map iterated across turns visits a key
   * deleted and added again meanwhile a second time (at its shard's end),
   * which would list its rule twice on one page.
   */
  const inHeap = new Set<string>();
  let more = false;
  const swap = (i: number, j: number): void => {
    const k = heap[i]!;
    heap[i] = heap[j]!;
    heap[j] = k;
  };
  /** Down from `i` while a child (of the first `len`) is larger. */
  const down = (i: number, len: number): void => {
    for (;;) {
      const l = 2 * i + 1;
      if (l >= len) return;
      const c = l + 1 < len && heap[l + 1]! > heap[l]! ? l + 1 : l;
      if (!(heap[c]! > heap[i]!)) return;
      swap(i, c);
      i = c;
    }
  };
  for (const k of keys) {
    if (clock.tick()) yield;
    if ((after !== undefined && k <= after) || inHeap.has(k)) continue;
    if (heap.length < limit) {
      heap.push(k);
      inHeap.add(k);
      for (let i = heap.length - 1; i > 0; ) {
        const up = (i - 1) >> 1;
        if (!(heap[i]! > heap[up]!)) break;
        swap(i, up);
        i = up;
      }
      continue;
    }
    // Full: this key or the largest kept is after the page.
    more = true;
    if (!(k < heap[0]!)) continue;
    inHeap.delete(heap[0]!);
    heap[0] = k;
    inHeap.add(k);
    down(0, heap.length);
  }
  // Largest first off the root, each put after the heap's end: the array ends in key order.
  for (let end = heap.length - 1; end > 0; end--) {
    if (clock.tick()) yield;
    swap(0, end);
    down(0, end);
  }
  return { keys: heap, more };
}

/**
 * A whole list, {"policies":[...]}, rule by rule from the live map as the
 * answer is written (turns apart). A key deleted and put back meanwhile
 * moves to the map's end, where the iteration meets it again: it is listed
 * once, with the rule it had when it was reached (before, it was listed
 * twice). The keys listed are held until the answer ends (references to
 * the map's own key texts).
 */
export function* unpagedListing<R>(section: string, rules: ReadonlyMap<string, R>, listed: (r: R) => unknown): Generator<string, void, undefined> {
  yield `{${JSON.stringify(section)}:[`;
  const sent = new Set<string>();
  for (const [key, r] of rules) {
    if (sent.has(key)) continue;
    sent.add(key);
    yield `${sent.size === 1 ? '' : ','}${toJson(listed(r))}`;
  }
  yield ']}\n';
}

export function apiHandler(o: ApiOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const { daemon: d } = o;
  const kinds = new Map<string, RuleKindSpec>(RULE_KIND_LIST.map((k) => [k.apiPath, k]));
  /**
   * Who sent a request, for the log of rule changes: the unix peer's uid, or
   * the token's name. Read once per connection (the kernel fixes a unix
   * peer's credentials at connect), not once per change.
   */
  const peers = new WeakMap<Socket, string>();
  const who = (req: IncomingMessage): string => {
    if (o.tcp !== undefined) return `token:write (${req.socket.remoteAddress ?? '?'})`;
    let w = peers.get(req.socket);
    if (w === undefined) {
      const c = peerCred(req.socket);
      w = c === undefined ? 'unix socket (peer unknown)' : `uid ${c.uid} (pid ${c.pid})`;
      peers.set(req.socket, w);
    }
    return w;
  };
  /** GET /v1/counters?rule=: one rule's counters, by name or by key, of any kind unless `kind` says. */
  const oneRuleCounters = (rule: string, kind: string | null): unknown => {
    if (rule === '') throw new HttpError(400, 'rule=: give a rule name or key (prefix)', 'rule');
    const specs = kind === null ? RULE_KIND_LIST : RULE_KIND_LIST.filter((x) => x.kind === kind);
    if (specs.length === 0) throw new HttpError(400, `kind=${JSON.stringify(kind)}: use one of ${RULE_KIND_LIST.map((x) => x.kind).join(', ')}`, 'kind', 'invalid');
    const found: { kind: string; at: string; rule: unknown }[] = [];
    for (const spec of specs) {
      const named = d.ruleCounters(spec.kind, { name: rule });
      let keyed: ReturnType<typeof d.ruleCounters>;
      try {
        keyed = d.ruleCounters(spec.kind, { key: rule });
      } catch {
        // not a key of this kind
      }
      // A name may be spelled as a prefix ("10.0.0.0/8" naming the rule of 192.0.2.0/24): the name was
      // taken and the rule keyed 10.0.0.0/8 could not be reached by its key.
      if (named !== undefined && keyed !== undefined && named.key !== keyed.key) {
        throw new HttpError(
          400,
          `${JSON.stringify(rule)} is ambiguous: it names the ${spec.label} with ${spec.keyName} ${named.key} and is the ${spec.keyName} of another ${spec.label}; ask for that one by its name, or give the first a name that is not a prefix`,
          'rule',
          'invalid',
        );
      }
      const c = named ?? keyed;
      if (c !== undefined) found.push({ kind: spec.kind, at: c.at, rule: c.rule });
    }
    if (found.length === 0) throw new HttpError(404, `no rule named or keyed ${JSON.stringify(rule)}${kind === null ? '' : ` among the ${kind} rules`}; list them with mup policy|sid|session list`, 'rule');
    if (found.length > 1) throw new HttpError(400, `${JSON.stringify(rule)} names rules of several kinds (${found.map((f) => f.kind).join(', ')}); add &kind= (mup stats --rule NAME --kind K)`, 'rule', 'invalid');
    return { at: found[0]!.at, rule: found[0]!.rule };
  };
  const route = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (o.tcp !== undefined) {
      const read = READ_METHODS.has(req.method ?? '');
      const got = /^Bearer (.+)$/i.exec(req.headers.authorization ?? '')?.[1]; // the scheme is case-insensitive (RFC 9110 11.1)
      const is = (token: string | undefined): boolean => {
        if (token === undefined || got === undefined) return false;
        const a = Buffer.from(got);
        const b = Buffer.from(token);
        return a.length === b.length && timingSafeEqual(a, b);
      };
      const unauthorized = (): never => {
        res.setHeader('www-authenticate', 'Bearer');
        throw new HttpError(
          401,
          `missing or wrong bearer token: send Authorization: Bearer <token from daemon.http.token_file${o.tcp!.readToken === undefined ? '' : ' (or, for reads and /metrics, read_token_file)'}>`,
        );
      };
      if (read) {
        if (!o.tcp.openReads && !is(o.tcp.token) && !is(o.tcp.readToken)) unauthorized();
      } else if (o.tcp.token === undefined) {
        // (The loader refuses a listener with no token of any kind and no open_reads; refused here too.)
        if (o.tcp.readToken !== undefined && !o.tcp.openReads && !is(o.tcp.readToken)) unauthorized();
        throw new HttpError(
          403,
          'this HTTP listener is read-only: it has no daemon.http.token_file, and changes over TCP need a token (loopback too); ' +
            'use the unix socket (mup CLI as root or in daemon.socket_group), or configure a token file and send Authorization: Bearer <token>',
        );
      } else if (!is(o.tcp.token)) {
        if (is(o.tcp.readToken)) {
          throw new HttpError(403, 'this is the read-only token (daemon.http.read_token_file): it reads and scrapes, it cannot change anything; send the token of daemon.http.token_file', undefined, 'read_only_token');
        }
        unauthorized();
      }
    }
    const url = requestUrl(req.url);
    // A parameter given twice would be read once (the first) and the other
    // ignored unchecked: ?limit=2&limit=abc was a page of 2, the reverse 400.
    const given = new Set<string>();
    for (const k of url.searchParams.keys()) {
      if (given.has(k)) throw new HttpError(400, `query parameter ${k} is given twice; give it once`, k);
      given.add(k);
    }
    const method = req.method ?? 'GET';
    const path = withoutTrailingSlashes(url.pathname);
    const allow = (methods: string[]): never => {
      res.setHeader('allow', methods.join(', '));
      throw new HttpError(405, `${method} is not allowed on ${path}; use ${methods.join(' or ')}`);
    };

    if (path === '/metrics') {
      if (method !== 'GET') allow(['GET']);
      return largeAnswers.run(async () => {
        if (res.destroyed) return;
        await stream(res, 200, o.metrics.contentType, await o.metrics.metricsPieces());
      });
    }
    if (path === '/v1/status') {
      if (method !== 'GET') allow(['GET']);
      onlyParams(url, 'GET /v1/status', []);
      return send(res, 200, d.status());
    }
    if (path === '/v1/bgp') {
      if (method !== 'GET') allow(['GET']);
      onlyParams(url, 'GET /v1/bgp', []);
      if (d.bgp === undefined) throw new HttpError(404, 'BGP is not configured: the config has no bgp section (docs/bgp.md)', 'not_found');
      return send(res, 200, await d.bgp.status());
    }
    if (path === '/v1/health') {
      if (method !== 'GET') allow(['GET']);
      onlyParams(url, 'GET /v1/health', []);
      const h = health(d);
      return send(res, h.status === 'ok' ? 200 : 503, h);
    }
    if (path === '/v1/batch') {
      if (method !== 'POST') allow(['POST']);
      onlyParams(url, 'POST /v1/batch', [], {
        check: 'a batch has no dry run (it is applied whole or not at all); POST /v1/reload?check=true checks a config file without applying it',
        dry_run: 'a batch has no dry run (it is applied whole or not at all)',
      });
      // Under way from here (its body's read and parse too): no collection starts beside it (collectAfterBatches).
      batchStarted();
      try {
        const ops = await readBatchBody(req);
        const r = await d.applyBatch(ops, who(req));
        const head = { applied: ops.length, added: r.added, replaced: r.replaced, deleted: r.deleted, ...(r.deletesFirst === true ? { deletesFirst: true } : {}) };
        return await sendLargePieces(res, 200, () => batchAnswerPieces(head, r.results));
      } finally {
        batchEnded();
      }
    }
    if (path === '/v1/counters') {
      if (method !== 'GET') allow(['GET']);
      const extra = [...url.searchParams.keys()].filter((x) => x !== 'rules' && x !== 'rule' && x !== 'kind');
      if (extra.length > 0) throw new HttpError(400, `unknown query parameter ${extra[0]}; use ?rules=all|active|none|N, or ?rule=NAME (one rule)`);
      const one = url.searchParams.get('rule');
      if (one !== null && url.searchParams.has('rules')) throw new HttpError(400, 'rule=NAME (one rule) and rules= (which rules of the listing) do not go together; give one', 'rules');
      if (one !== null) return send(res, 200, oneRuleCounters(one, url.searchParams.get('kind')));
      if (url.searchParams.has('kind')) throw new HttpError(400, 'kind= goes with rule=NAME (which kind of rule the name is of)', 'kind');
      const r = url.searchParams.get('rules') ?? 'all';
      if (!['all', 'active', 'none'].includes(r) && !/^[0-9]{1,7}$/.test(r)) {
        throw new HttpError(400, `rules=${JSON.stringify(r)}: use all (every rule), active (rules with packets), none, or a number N (the first N rules)`, 'rules');
      }
      return sendLarge(res, 200, () => d.countersRowsAsync(/^[0-9]+$/.test(r) ? Number(r) : (r as 'all' | 'active' | 'none')));
    }
    if (path === '/v1/counters/reset') {
      if (method !== 'POST') allow(['POST']);
      onlyParams(url, 'POST /v1/counters/reset', [], { rule: 'it resets every counter; one rule cannot be reset alone' });
      await d.resetCounters();
      return send(res, 200, { reset: true });
    }
    if (path === '/v1/reload') {
      if (method !== 'POST') allow(['POST']);
      onlyParams(url, 'POST /v1/reload', ['force', 'check'], { dry_run: 'use check=true (validate and answer the diff; apply nothing)' });
      const force = url.searchParams.get('force'); // past the deletion guard (daemon.reload_max_delete_share)
      if (force !== null && force !== 'true' && force !== 'false') throw new HttpError(400, `force=${JSON.stringify(force)}: use force=true or leave it out`, 'force');
      const check = url.searchParams.get('check'); // validate and answer the diff; apply nothing
      if (check !== null && check !== 'true' && check !== 'false') throw new HttpError(400, `check=${JSON.stringify(check)}: use check=true or leave it out`, 'check');
      return send(res, 200, await d.reload({ force: force === 'true', check: check === 'true', reason: 'api' }));
    }
    if (path === '/v1/config') {
      if (method !== 'GET') allow(['GET']);
      onlyParams(url, 'GET /v1/config', ['origins']);
      const origins = url.searchParams.get('origins');
      if (origins !== null && origins !== 'true' && origins !== 'false') throw new HttpError(400, `origins=${JSON.stringify(origins)}: use origins=false or leave it out`, 'origins');
      // One build at a time, daemon-wide (each is seconds of a thread for a large file), outside the slots of
      // the large answers (a build waiting for changes or another build does not hold one).
      // A client that goes away stops the build (seconds of a thread the next build would wait behind).
      const wanted = new AbortController();
      res.once('close', () => {
        if (!res.writableFinished) wanted.abort();
      });
      return configBuilds.run(async () => {
        if (res.destroyed) return;
        let c: Awaited<ReturnType<typeof d.runningConfig>>;
        try {
          c = await d.runningConfig({ origins: origins !== 'false', signal: wanted.signal });
        } catch (e) {
          if (e instanceof RunningConfigAbandoned) return; // no one to answer
          throw e;
        }
        await largeAnswers.run(async () => {
          if (res.destroyed) return;
          // The YAML comes as its JSON string's bytes; the answer is streamed around them.
          const head = `{"file":${toJson(c.file)},"sha256":${toJson(c.sha256)},"apiChanges":${c.apiChanges},"yaml":`;
          await stream(res, 200, 'application/json', (function* () {
            yield head;
            yield* textPieces(c.yamlJson);
            yield '}\n';
          })());
        });
      });
    }
    if (path === '/v1/config/save') {
      if (method !== 'POST') allow(['POST']);
      onlyParams(url, 'POST /v1/config/save', [], { path: 'it writes the config file the daemon was started with (mup config save --to FILE writes a copy elsewhere)' });
      return send(res, 200, await d.saveConfig());
    }
    if (path === '/v1/probe') {
      if (method !== 'GET' && method !== 'POST') allow(['GET', 'POST']);
      onlyParams(url, `${method} /v1/probe`, []);
      if (method === 'GET') return send(res, 200, { probe: probeStatus(d.dataplane) });
      const body = await readBody(req);
      try {
        return send(res, 200, { probe: setProbe(d.dataplane, body) });
      } catch (e) {
        if (e instanceof ProbeRequestError) throw new HttpError(400, e.message, e.path, 'invalid');
        throw e;
      }
    }
    const k = kinds.get(path);
    if (k !== undefined) {
      if (method === 'GET') {
        const extra = [...url.searchParams.keys()].filter((x) => x !== 'limit' && x !== 'after');
        if (extra.length > 0) throw new HttpError(400, `unknown query parameter ${extra[0]}; use ?limit=N (1 to ${MAX_PAGE}) and ?after=CURSOR (the next of the page before)`);
        const limitText = url.searchParams.get('limit');
        const afterText = url.searchParams.get('after');
        if (limitText === null && afterText === null) {
          // The whole list, streamed rule by rule from the live set: never one array or string of it all.
          const rules = d.ruleMap(k.kind);
          return largeAnswers.run(async () => {
            if (res.destroyed) return;
            await stream(res, 200, 'application/json', unpagedListing(k.section, rules, (r) => d.listedRule(k.kind, r)));
          });
        }
        let limit = DEFAULT_PAGE;
        if (limitText !== null) {
          if (!/^[0-9]{1,6}$/.test(limitText) || Number(limitText) < 1 || Number(limitText) > MAX_PAGE) {
            throw new HttpError(400, `limit=${JSON.stringify(limitText)}: expected a number from 1 to ${MAX_PAGE} (entries per page)`, 'limit', 'invalid');
          }
          limit = Number(limitText);
        }
        const after = afterText === null ? undefined : decodeCursor(k.kind, afterText);
        const rules = d.ruleMap(k.kind);
        // In slices: rules may change between them, as they may between two pages; a key of the page
        // deleted meanwhile is left out of it (the next page still starts after the page's last key).
        // Sessions and policies page by their key bytes, a text made for the page's keys only (RowKeyedMap).
        const byBytes = rules instanceof RowKeyedMap ? rules.pageSlices(after, limit, ((c) => () => c.tick())(new SliceClock())) : undefined;
        const page = await runYielding(byBytes ?? pageKeysSlices(rules.keys(), after, limit));
        const items: unknown[] = [];
        for (const key of page.keys) {
          const r = rules.get(key);
          if (r !== undefined) items.push(d.listedRule(k.kind, r));
        }
        const last = page.keys.at(-1);
        return sendLarge(res, 200, () => ({ [k.section]: items, next: page.more && last !== undefined ? encodeCursor(k.kind, last) : null }));
      }
      if (method === 'POST' || method === 'PUT') {
        onlyParams(url, `${method} ${path}`, []);
        const body = await readBody(req);
        const rule = await d.putRule(k.kind, body, method === 'POST' ? 'add' : 'replace', who(req));
        return send(res, method === 'POST' ? 201 : 200, { [k.kind]: rule });
      }
      if (method === 'DELETE') {
        const extra = [...url.searchParams.keys()].filter((x) => x !== k.keyName && x !== 'name');
        if (extra.length > 0) throw new HttpError(400, `unknown query parameter ${extra[0]}; use ?${k.keyName}=PREFIX or ?name=NAME`);
        const key = url.searchParams.get(k.keyName) ?? undefined;
        const name = url.searchParams.get('name') ?? undefined;
        if ((key === undefined) === (name === undefined)) {
          throw new HttpError(400, `say which one to delete: ?${k.keyName}=PREFIX or ?name=NAME (exactly one)`);
        }
        if (key !== undefined) {
          // Named like a body's bad prefix: message and key path.
          try {
            k.canonicalKey(key);
          } catch (e) {
            if (e instanceof AddressError) throw new HttpError(400, e.message, k.keyName, 'invalid');
            throw e;
          }
        }
        const rule = await d.deleteRule(k.kind, key !== undefined ? { key } : { name: name! }, who(req));
        return send(res, 200, { deleted: rule });
      }
      allow(['GET', 'POST', 'PUT', 'DELETE']);
    }
    throw new HttpError(404, `no such endpoint ${path}; see the README (Control API) for the list`);
  };

  const handle = (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const started = process.hrtime.bigint();
    return route(req, res)
      .catch((e: unknown) => {
        let status = 500;
        let code: ErrorCode | undefined;
        let body: { error: string; code?: string; path?: string; index?: number; line?: number; file?: string } = { error: e instanceof Error ? e.message : String(e) };
        if (e instanceof HttpError) {
          status = e.status;
          code = e.code;
          if (e.path !== undefined) body.path = e.path;
        } else if (e instanceof BatchError) {
          status = e.status;
          code = e.code as ErrorCode;
          body = { error: e.message, path: e.path, index: e.index };
        } else if (e instanceof RuleError) {
          status = e.status;
          code = (e.code as ErrorCode | undefined) ?? (status === 400 ? 'invalid' : undefined);
        } else if (e instanceof ConfigError) {
          status = 400;
          code = 'invalid';
          body = { error: e.message, ...(e.path === '' ? {} : { path: e.path }), file: e.file, ...(e.line === undefined ? {} : { line: e.line }) };
        } else if (e instanceof AddressError) {
          status = 400;
          code = 'invalid';
        }
        body = { error: body.error, code: code ?? codeOf(status), ...Object.fromEntries(Object.entries(body).filter(([k]) => k !== 'error')) };
        if (clientLeft(req, e)) {
          // Nothing to answer, and nothing failed here: the client closed its connection before its request was read whole.
          o.log.debug({ method: req.method, url: req.url, error: body.error }, 'the client closed its connection before its request was read whole');
          return;
        }
        if (status === 500) o.log.error({ err: e, method: req.method, url: req.url }, 'API request failed');
        if (!res.headersSent) send(res, status, body);
        // The answer was under way: cut it off (the client sees a reset, not an answer that looks whole).
        else res.destroy();
      })
      .finally(() => {
        o.log.debug({ method: req.method, url: req.url, status: res.statusCode, us: Number((process.hrtime.bigint() - started) / 1000n) }, 'api');
      });
  };

  // One request at a time per connection: a pipelined request is handled
  // once the answer before it has been handed to the socket ('finish'), so a
  // client that sends many and reads none holds one answer, not all of them.
  const queues = new WeakMap<Socket, { tail: Promise<void>; depth: number }>();
  const answered = (res: ServerResponse): Promise<void> =>
    new Promise((resolve) => {
      if (res.writableFinished || res.destroyed) return resolve();
      res.once('finish', () => resolve());
      res.once('close', () => resolve());
    });
  return (req, res) => {
    const arrived = performance.now();
    const socket = req.socket;
    const q = queues.get(socket) ?? { tail: Promise.resolve(), depth: 0 };
    queues.set(socket, q);
    if (++q.depth > MAX_PIPELINED) {
      o.log.warn({ remote: socket.remoteAddress ?? 'unix socket', queued: q.depth }, `closing a connection with more than ${MAX_PIPELINED} requests waiting for their answers`);
      socket.destroy();
      return;
    }
    q.tail = q.tail.then(async () => {
      try {
        if (socket.destroyed) return;
        await handle(req, res);
        await answered(res);
        // Answers handed to the socket; one cut off (the client gone, a stalled answer closed) is not an answer time.
        if (res.writableFinished) d.requests.observe({ class: requestClass(req.method, req.url) }, (performance.now() - arrived) / 1000);
      } finally {
        q.depth--;
      }
    });
  };
}

/** Is a unix socket answered by a live process? */
export function socketAlive(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(path);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

/** The gid of daemon.socket_group (a name in /etc/group, or a number); throws naming the key. */
export function groupId(name: string): number {
  if (/^[0-9]+$/.test(name)) return Number(name);
  for (const line of readFileSync('/etc/group', 'utf8').split('\n')) {
    const [g, , gid] = line.split(':');
    if (g === name && gid !== undefined) return Number(gid);
  }
  throw new Error(`daemon.socket_group: no group ${JSON.stringify(name)} in /etc/group; create it (groupadd ${name}) or leave the key out`);
}

/** Listen on `path` (mode 660, group `group` = [name, gid] when given; look the gid up with groupId before anything is touched). */
export async function listenUnix(server: Server, path: string, group: readonly [string, number] | undefined): Promise<void> {
  const gid = group?.[1];
  makeDirs(dirname(path), 0o755);
  if (existsSync(path)) {
    if (await socketAlive(path)) {
      throw new Error(`${path} is answered by a running daemon: stop it first, or give this one another --instance or daemon.socket`);
    }
    unlinkSync(path); // left by a daemon that died
  }
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => {
      server.off('error', reject);
      resolve();
    });
  });
  try {
    chmodSync(path, 0o660);
    if (gid !== undefined) chownSync(path, 0, gid);
  } catch (e) {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    if (existsSync(path)) unlinkSync(path);
    throw new Error(`${path}: ${gid === undefined ? 'chmod 660' : `chown to group ${group![0]}`} failed: ${(e as Error).message}`);
  }
}

export function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  if (isIP(host) === 6) return host === '::1';
  return false;
}

export async function listenTcp(server: Server, host: string, port: number): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

export interface ServerLimits {
  /** Open connections; beyond, a connection gets 503 with Retry-After and is closed. */
  readonly maxConnections?: number;
  /** Seconds an answer may make no progress (nothing taken by the client) before the connection is closed. */
  readonly stallTimeout?: number;
  /** Names the listener in the log. */
  readonly name?: string;
  readonly log?: Logger;
}


/**
 * The HTTP server of a listener, with its limits: a connection cap (the
 * extra ones answered 503 before any parsing) and a watchdog that closes a
 * connection whose pending output has not moved for stallTimeout seconds.
 */
class ApiServer extends Server {
  readonly #conns = new Map<Socket, { done: number; since: number }>();
  readonly #max: number;
  readonly #stallMs: number;
  readonly #o: ServerLimits;
  #watchdog: NodeJS.Timeout | undefined;

  constructor(handler: (req: IncomingMessage, res: ServerResponse) => void, o: ServerLimits) {
    super(handler);
    this.#o = o;
    this.#max = o.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
    this.#stallMs = (o.stallTimeout ?? DEFAULT_STALL_TIMEOUT_S) * 1000;
    this.on('listening', () => {
      const tick = Math.min(1000, Math.max(100, this.#stallMs / 4));
      this.#watchdog ??= setInterval(() => this.#check(), tick).unref();
    });
    this.on('close', () => {
      clearInterval(this.#watchdog);
      this.#watchdog = undefined;
    });
  }

  // net.Server announces a new connection with emit('connection'); one over
  // the cap never reaches the HTTP parser.
  override emit(event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'connection') {
      const socket = args[0] as Socket;
      if (this.#conns.size >= this.#max) {
        this.#refuse(socket);
        return true;
      }
      this.#conns.set(socket, { done: 0, since: Date.now() });
      socket.once('close', () => this.#conns.delete(socket));
    } else if (event === 'request') {
      // Counted for releaseMemorySoon, which runs its collection between requests. Ended once: when its
      // answer is done, or when its connection closes first (a pipelined request still queued then never
      // gets its answer's 'close').
      const res = args[1] as ServerResponse;
      const socket = (args[0] as IncomingMessage).socket;
      const end = (): void => {
        res.off('close', end);
        socket.off('close', end);
        requestEnded();
      };
      requestStarted();
      res.once('close', end);
      socket.once('close', end);
    }
    return super.emit(event as string, ...args);
  }

  #refuse(socket: Socket): void {
    const body = `${toJson({ error: `too many connections: this listener takes ${this.#max} at once (daemon.max_connections); retry in a moment`, code: 'too_many_connections' })}\n`;
    socket.on('error', () => undefined);
    socket.on('data', () => undefined); // read what the client sends, so that closing does not reset the answer away
    socket.on('end', () => socket.destroy());
    setTimeout(() => socket.destroy(), 2000).unref();
    socket.end(
      'HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\n' +
        `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  }

  /** Close connections whose pending output has not moved for the stall timeout. */
  #check(): void {
    const now = Date.now();
    for (const [s, w] of this.#conns) {
      const pending = s.writableLength;
      // bytesWritten counts what is queued too; minus what is queued: what the kernel took.
      const done = (s.bytesWritten ?? 0) - pending;
      if (pending === 0 || done !== w.done) {
        w.done = done;
        w.since = now;
      } else if (now - w.since >= this.#stallMs) {
        this.#o.log?.warn(
          { listener: this.#o.name, remote: s.remoteAddress ?? 'unix socket', pending, seconds: this.#stallMs / 1000 },
          'closing a connection whose client has not read its answer (daemon.stall_timeout)',
        );
        s.destroy();
        this.#conns.delete(s);
        releaseMemorySoon(() =>
          this.#o.log?.info({ listener: this.#o.name }, forcedReleaseNote('closing a stalled connection')),
        );
      }
    }
  }
}

export function makeServer(handler: (req: IncomingMessage, res: ServerResponse) => void, limits: ServerLimits = {}): Server {
  const s = new ApiServer(handler, limits);
  s.headersTimeout = 10_000;
  s.requestTimeout = 30_000;
  return s;
}
