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
  /** No answer within this: a ConnectError ETIMEDOUT (default 60 s). */
  readonly timeoutMs?: number;
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

/** No answer: nobody listens (`code` ENOENT, ECONNREFUSED), no permission (EACCES), a timeout (ETIMEDOUT), or another errno. */
export class ConnectError extends Error {
  override readonly name = 'ConnectError';
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
}

/** An error that ends the CLI with this exit status (instead of 2). */
export class ExitStatus extends Error {
  override readonly name = 'ExitStatus';
  constructor(
    message: string,
    readonly exitStatus: number,
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
        timeout: t.timeoutMs ?? 60_000,
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
    req.on('timeout', () => req.destroy(new ConnectError(`no answer from the daemon at ${describeTarget(t)} within ${(t.timeoutMs ?? 60_000) / 1000} s`, 'ETIMEDOUT')));
    req.on('error', (e: NodeJS.ErrnoException) => {
      const where = describeTarget(t);
      if (e instanceof ConnectError) {
        reject(e);
      } else if (e.code === 'ENOENT' || e.code === 'ECONNREFUSED') {
        reject(new ConnectError(`no daemon answers at ${where}: start one with \`mup daemon --config FILE\`, or name it with --instance / --socket`, e.code));
      } else if (e.code === 'EACCES') {
        reject(new ConnectError(`permission denied on ${where}: run as root or as a member of the socket's group (daemon.socket_group)`, e.code));
      } else {
        reject(new ConnectError(`${where}: ${e.message}`, e.code ?? 'EIO'));
      }
    });
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}
