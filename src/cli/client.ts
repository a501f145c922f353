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
  /** A longer answer is refused (default MAX_ANSWER_BYTES: the longest string V8 makes). */
  readonly maxAnswerBytes?: number;
}

/**
 * The longest answer read: V8's longest string (2^29 - 24 characters).
 * Past it the text could not be made, and the error was thrown in the
 * socket's event handler, outside the command: a stack trace, exit 1.
 */
export const MAX_ANSWER_BYTES = 0x1fffffe8;

/**
 * Where --url sends the request: plain HTTP only. `https://` was sent in
 * clear text to port 80, bearer token included, and `host:port` (no
 * scheme) went to localhost:80 (found in review, session 43).
 */
export function httpTarget(url: string): { host: string; port: number } {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error(`--url ${JSON.stringify(url)} is not a URL; give http://HOST:PORT, e.g. http://127.0.0.1:9180`);
  }
  if (u.protocol !== 'http:') {
    throw new Error(
      `--url ${JSON.stringify(url)}: the daemon's API is plain HTTP (http://HOST:PORT, e.g. http://127.0.0.1:9180)` +
        (u.protocol === 'https:' ? '; mup does not speak TLS, and will not send the token in clear text to an https:// address' : ''),
    );
  }
  if (u.hostname === '') throw new Error(`--url ${JSON.stringify(url)} names no host; give http://HOST:PORT, e.g. http://127.0.0.1:9180`);
  if (u.pathname !== '/' || u.search !== '' || u.hash !== '' || u.username !== '' || u.password !== '') {
    throw new Error(`--url ${JSON.stringify(url)}: give only http://HOST:PORT (the API's paths are mup's own; the token goes in --token-file)`);
  }
  // [::1] is a host of brackets to URL; the socket wants the address.
  const host = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
  return { host, port: u.port === '' ? 80 : Number(u.port) };
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
  const http = t.url === undefined ? undefined : httpTarget(t.url);
  const max = t.maxAnswerBytes ?? MAX_ANSWER_BYTES;
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
        ...(socketPath !== undefined ? { socketPath } : http!),
        timeout: t.timeoutMs ?? 60_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let bytes = 0;
        let over = false;
        res.on('data', (c: Buffer) => {
          bytes += c.length;
          if (bytes > max) {
            if (!over) {
              over = true;
              chunks.length = 0;
              reject(
                new ConnectError(
                  `the answer from ${describeTarget(t)} is longer than ${max} bytes, more than mup can hold as text; ask for less (a list: --limit N and --after, page by page)`,
                  'E2BIG',
                ),
              );
            }
            res.destroy();
            return;
          }
          chunks.push(c);
        });
        // An answer cut off (the daemon stopped, or its answer failed part way: it breaks the connection
        // rather than end an answer that looks whole) ends with 'close', not 'end'. It was taken as
        // nothing to settle: the command printed nothing and exited 0 (found in review, session 43).
        res.on('error', () => undefined);
        res.on('close', () => {
          if (!res.complete) {
            reject(new ConnectError(`the daemon at ${describeTarget(t)} broke off its answer (it stopped, or the answer failed part way); nothing was printed: try again`, 'ECONNRESET'));
          }
        });
        res.on('end', () => {
          let text: string;
          try {
            text = Buffer.concat(chunks).toString('utf8');
          } catch (e) {
            // Thrown here it would end the process outside the command (a stack trace, exit 1).
            reject(new ConnectError(`the answer from ${describeTarget(t)} could not be read as text (${(e as Error).message})`, 'E2BIG'));
            return;
          }
          let parsed: unknown;
          let json = true;
          try {
            parsed = JSON.parse(text);
          } catch {
            json = false;
            parsed = text;
          }
          const status = res.statusCode ?? 0;
          if (status >= 400) {
            const msg = (parsed as { error?: string } | undefined)?.error ?? text.trim();
            reject(new ApiError(msg, status, parsed));
          } else if (!json) {
            // Every answer of the API a command reads is JSON: another server's page was taken as an empty
            // list (exit 0), or read as a status ("Cannot read properties of undefined").
            reject(new ApiError(`the answer from ${describeTarget(t)} (status ${status}) is not the daemon's: not JSON (${JSON.stringify(text.slice(0, 80))}); is --url the daemon's HTTP API?`, 502, text));
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
