/**
 * The control API: JSON over HTTP, on a unix socket (access by file mode and
 * group) and optionally on TCP (bearer token). Routes:
 *
 *   GET    /v1/status
 *   GET    /v1/policies                    POST /v1/policies    (add)
 *   PUT    /v1/policies  (replace, by match)  DELETE /v1/policies?match=P | ?name=N
 *   GET    /v1/localsids                   POST /v1/localsids   (add)
 *   PUT    /v1/localsids (replace, by sid)    DELETE /v1/localsids?sid=P | ?name=N
 *   GET    /v1/counters[?rules=all|active|none|N]   POST /v1/counters/reset
 *   POST   /v1/reload
 *   GET    /v1/probe                       POST /v1/probe       (latency probe on/off: src/dataplane/probe-control.ts)
 *   GET    /metrics                        (Prometheus text format)
 *
 * Errors: {"error": "...", "path": "key.path"?} with 400 (invalid input),
 * 401 (token), 404, 405, 409 (conflict: exists, full, name taken), 413
 * (body over 64 KiB), 415 (not JSON), 500.
 */
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, unlinkSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, isIP } from 'node:net';
import { dirname } from 'node:path';
import { timingSafeEqual } from 'node:crypto';
import type { Registry } from 'prom-client';
import { ConfigError } from '../config/errors.js';
import { AddressError } from '../sid/addr.js';
import type { Daemon } from './daemon.js';
import type { Logger } from './log.js';
import { RULE_KIND_LIST, RuleError, type RuleKindSpec } from './rules.js';
import { probeStatus, ProbeRequestError, setProbe } from '../dataplane/probe-control.js';

export const MAX_BODY = 64 * 1024;

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly path?: string,
  ) {
    super(message);
  }
}

/** JSON with bigints as numbers (exact below 2^53, strings above). */
export function toJson(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? (x <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(x) : x.toString()) : x));
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = `${toJson(body)}\n`;
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

async function readBody(req: IncomingMessage): Promise<unknown> {
  const type = req.headers['content-type'] ?? '';
  if (!/^application\/json\b/i.test(type)) {
    throw new HttpError(415, `send the body as JSON with Content-Type: application/json (got ${JSON.stringify(type || 'none')})`);
  }
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (declared > MAX_BODY) throw new HttpError(413, `body of ${declared} bytes is over the ${MAX_BODY}-byte limit; send one rule per request`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > MAX_BODY) throw new HttpError(413, `body is over the ${MAX_BODY}-byte limit; send one rule per request`);
    chunks.push(c as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  let body: unknown;
  try {
    body = JSON.parse(text) as unknown;
  } catch (e) {
    throw new HttpError(400, `body is not valid JSON: ${(e as Error).message}`);
  }
  // JSON.parse keeps the last of a repeated key without a word; the config
  // file refuses repeated keys, and so does the API (one rule, one meaning).
  const twice = repeatedKey(text);
  if (twice !== undefined) throw new HttpError(400, `request body: ${twice}: key given twice; give each key once`, twice);
  return body;
}

/** Key path of the first member name given twice in one object of `text` (valid JSON), if any. */
export function repeatedKey(text: string): string | undefined {
  interface Frame {
    readonly keys: Set<string> | undefined; // undefined: an array
    readonly path: string;
    index: number;
    key: string;
    expectKey: boolean;
  }
  const stack: Frame[] = [];
  const member = (path: string, key: string): string =>
    /^[A-Za-z_][A-Za-z0-9_-]*$/.test(key) ? (path === '' ? key : `${path}.${key}`) : `${path}[${JSON.stringify(key)}]`;
  const here = (): string => {
    const f = stack.at(-1);
    if (f === undefined) return '';
    return f.keys === undefined ? `${f.path}[${f.index}]` : member(f.path, f.key);
  };
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    const top = stack.at(-1);
    if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      if (top?.keys !== undefined && top.expectKey) {
        const key = JSON.parse(text.slice(i, j + 1)) as string;
        top.key = key;
        if (top.keys.has(key)) return here();
        top.keys.add(key);
        top.expectKey = false;
      }
      i = j;
    } else if (c === '{' || c === '[') {
      stack.push({ keys: c === '{' ? new Set() : undefined, path: here(), index: 0, key: '', expectKey: c === '{' });
    } else if (c === '}' || c === ']') {
      stack.pop();
    } else if (c === ',' && top !== undefined) {
      if (top.keys === undefined) top.index++;
      else top.expectKey = true;
    }
  }
  return undefined;
}

export interface ApiOptions {
  readonly daemon: Daemon;
  readonly metrics: Registry;
  readonly log: Logger;
  /** Required on every request when set (TCP listener). */
  readonly token?: string;
}

export function apiHandler(o: ApiOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const { daemon: d } = o;
  const kinds = new Map<string, RuleKindSpec>(RULE_KIND_LIST.map((k) => [k.apiPath, k]));
  const route = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (o.token !== undefined) {
      const got = /^Bearer (.+)$/i.exec(req.headers.authorization ?? '')?.[1] ?? ''; // the scheme is case-insensitive (RFC 9110 11.1)
      const a = Buffer.from(got);
      const b = Buffer.from(o.token);
      if (a.length !== b.length || !timingSafeEqual(a, b)) {
        res.setHeader('www-authenticate', 'Bearer');
        throw new HttpError(401, 'missing or wrong bearer token: send Authorization: Bearer <token from daemon.http.token_file>');
      }
    }
    const url = new URL(req.url ?? '/', 'http://mup');
    const method = req.method ?? 'GET';
    const path = url.pathname.replace(/\/+$/, '') || '/';
    const allow = (methods: string[]): never => {
      res.setHeader('allow', methods.join(', '));
      throw new HttpError(405, `${method} is not allowed on ${path}; use ${methods.join(' or ')}`);
    };

    if (path === '/metrics') {
      if (method !== 'GET') allow(['GET']);
      const text = await o.metrics.metrics();
      res.writeHead(200, { 'content-type': o.metrics.contentType });
      res.end(text);
      return;
    }
    if (path === '/v1/status') {
      if (method !== 'GET') allow(['GET']);
      return send(res, 200, d.status());
    }
    if (path === '/v1/counters') {
      if (method !== 'GET') allow(['GET']);
      const extra = [...url.searchParams.keys()].filter((x) => x !== 'rules');
      if (extra.length > 0) throw new HttpError(400, `unknown query parameter ${extra[0]}; use ?rules=all|active|none|N`);
      const r = url.searchParams.get('rules') ?? 'all';
      if (!['all', 'active', 'none'].includes(r) && !/^[0-9]{1,7}$/.test(r)) {
        throw new HttpError(400, `rules=${JSON.stringify(r)}: use all (every rule), active (rules with packets), none, or a number N (the first N rules)`, 'rules');
      }
      return send(res, 200, d.counters(/^[0-9]+$/.test(r) ? Number(r) : (r as 'all' | 'active' | 'none')));
    }
    if (path === '/v1/counters/reset') {
      if (method !== 'POST') allow(['POST']);
      await d.resetCounters();
      return send(res, 200, { reset: true });
    }
    if (path === '/v1/reload') {
      if (method !== 'POST') allow(['POST']);
      const force = url.searchParams.get('force'); // past the deletion guard (daemon.reload_max_delete_share)
      if (force !== null && force !== 'true' && force !== 'false') throw new HttpError(400, `force=${JSON.stringify(force)}: use force=true or leave it out`, 'force');
      return send(res, 200, await d.reload({ force: force === 'true' }));
    }
    if (path === '/v1/probe') {
      if (method === 'GET') return send(res, 200, { probe: probeStatus(d.dataplane) });
      if (method !== 'POST') allow(['GET', 'POST']);
      const body = await readBody(req);
      try {
        return send(res, 200, { probe: setProbe(d.dataplane, body) });
      } catch (e) {
        if (e instanceof ProbeRequestError) throw new HttpError(400, e.message, e.path);
        throw e;
      }
    }
    const k = kinds.get(path);
    if (k !== undefined) {
      if (method === 'GET') {
        return send(res, 200, { [k.section]: d.listRules(k.kind) });
      }
      if (method === 'POST' || method === 'PUT') {
        const body = await readBody(req);
        const rule = await d.putRule(k.kind, body, method === 'POST' ? 'add' : 'replace');
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
            if (e instanceof AddressError) throw new HttpError(400, e.message, k.keyName);
            throw e;
          }
        }
        const rule = await d.deleteRule(k.kind, key !== undefined ? { key } : { name: name! });
        return send(res, 200, { deleted: rule });
      }
      allow(['GET', 'POST', 'PUT', 'DELETE']);
    }
    throw new HttpError(404, `no such endpoint ${path}; see the README (Control API) for the list`);
  };

  return (req, res) => {
    const started = process.hrtime.bigint();
    route(req, res)
      .catch((e: unknown) => {
        let status = 500;
        let body: { error: string; path?: string; line?: number; file?: string } = { error: e instanceof Error ? e.message : String(e) };
        if (e instanceof HttpError) {
          status = e.status;
          if (e.path !== undefined) body.path = e.path;
        } else if (e instanceof RuleError) {
          status = e.status;
        } else if (e instanceof ConfigError) {
          status = 400;
          body = { error: e.message, ...(e.path === '' ? {} : { path: e.path }), file: e.file, ...(e.line === undefined ? {} : { line: e.line }) };
        } else if (e instanceof AddressError) {
          status = 400;
        }
        if (status === 500) o.log.error({ err: e, method: req.method, url: req.url }, 'API request failed');
        if (!res.headersSent) send(res, status, body);
        else res.end();
      })
      .finally(() => {
        o.log.debug({ method: req.method, url: req.url, status: res.statusCode, us: Number((process.hrtime.bigint() - started) / 1000n) }, 'api');
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

function groupId(name: string): number {
  if (/^[0-9]+$/.test(name)) return Number(name);
  for (const line of readFileSync('/etc/group', 'utf8').split('\n')) {
    const [g, , gid] = line.split(':');
    if (g === name && gid !== undefined) return Number(gid);
  }
  throw new Error(`daemon.socket_group: no group ${JSON.stringify(name)} in /etc/group; create it (groupadd ${name}) or leave the key out`);
}

export async function listenUnix(server: Server, path: string, group: string | undefined): Promise<void> {
  mkdirSync(dirname(path), { recursive: true, mode: 0o755 });
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
  chmodSync(path, 0o660);
  if (group !== undefined) chownSync(path, 0, groupId(group));
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

export function makeServer(handler: (req: IncomingMessage, res: ServerResponse) => void): Server {
  const s = createServer(handler);
  s.headersTimeout = 10_000;
  s.requestTimeout = 30_000;
  return s;
}
