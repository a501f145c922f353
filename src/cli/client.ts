/**
 * The CLI's side of the control API: one JSON request over the daemon's unix
 * socket (or HTTP with a bearer token), with errors that say what to do.
 */
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { defaultSocket } from '../host/paths.js';

export interface Target {
  readonly instance?: string;
  readonly socket?: string;
  /** http://HOST:PORT instead of the socket. */
  readonly url?: string;
  readonly tokenFile?: string;
}

export class ApiError extends Error {
  override readonly name = 'ApiError';
  constructor(
    message: string,
    readonly status: number,
    readonly body: unknown,
  ) {
    super(message);
  }
}

export function describeTarget(t: Target): string {
  return t.url ?? t.socket ?? defaultSocket(t.instance ?? 'default');
}

export async function call<T>(t: Target, method: string, path: string, body?: unknown): Promise<T> {
  const socketPath = t.url === undefined ? (t.socket ?? defaultSocket(t.instance ?? 'default')) : undefined;
  const base = new URL(t.url ?? 'http://mup');
  const headers: Record<string, string> = {};
  let payload: string | undefined;
  if (body !== undefined) {
    payload = JSON.stringify(body);
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(Buffer.byteLength(payload));
  }
  if (t.tokenFile !== undefined) headers['authorization'] = `Bearer ${readFileSync(t.tokenFile, 'utf8').trim()}`;
  return new Promise<T>((resolve, reject) => {
    const req = request(
      {
        method,
        path,
        headers,
        ...(socketPath !== undefined ? { socketPath } : { host: base.hostname, port: base.port === '' ? 80 : Number(base.port) }),
        timeout: 60_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {
            // /metrics is text
          }
          const status = res.statusCode ?? 0;
          if (status >= 400) {
            const msg = (parsed as { error?: string })?.error ?? text.trim();
            reject(new ApiError(msg, status, parsed));
          } else {
            resolve(parsed as T);
          }
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer from the daemon at ${describeTarget(t)} within 60 s`)));
    req.on('error', (e: NodeJS.ErrnoException) => {
      const where = describeTarget(t);
      if (e.code === 'ENOENT' || e.code === 'ECONNREFUSED') {
        reject(new Error(`no daemon answers at ${where}: start one with \`mup daemon --config FILE\`, or name it with --instance / --socket`));
      } else if (e.code === 'EACCES') {
        reject(new Error(`permission denied on ${where}: run as root or as a member of the socket's group (daemon.socket_group)`));
      } else {
        reject(new Error(`${where}: ${e.message}`));
      }
    });
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}
