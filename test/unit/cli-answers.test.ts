/**
 * The CLI against answers that are not whole, not the daemon's, or not
 * where the operator meant, through the real command line and servers on a
 * unix socket and on 127.0.0.1 (found in review, session 43):
 * - an answer cut off after its headers (the daemon breaks an answer that
 *   fails part way) printed nothing and exited 0: `mup status` said healthy;
 * - a 200 answer that is not JSON (--url at another server) listed no
 *   policies, exit 0, or failed `status` with "Cannot read properties";
 * - --url https://... sent the bearer token in clear text to port 80, and
 *   host:port (no scheme) went to localhost:80;
 * - MUP_SOCKET / MUP_URL in the environment beat --instance / --socket;
 * - --watch Infinity (or 1e-9, 3000000) polled every millisecond; --timeout
 *   0 never timed out; --link-check-ms 0 was taken;
 * - --json-body dropped --name and the other field flags given beside it;
 * - an answer past V8's longest string threw in an event handler (exit 1);
 * - `mup probe --teid 0x1000zz` was 4096.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { call, ConnectError, httpTarget } from '../../src/cli/client.js';
import { main } from '../../src/cli/main.js';
import { num } from '../../src/cli/probe.js';

let dir: string;
let socket: string;
let server: Server;
let tcp: Server;
let tcpPort: number;
let answer: (req: IncomingMessage, res: ServerResponse) => void = (_req, res) => res.end('{}');
const asked: string[] = [];
const tcpAsked: string[] = [];

const STATUS = { instance: 'x', tables: { policies: { entries: 0, capacity: 8 }, localsids: { entries: 0, capacity: 8 } } };
const COUNTERS = { at: '2026-12-06T00:00:00.000Z', events: {}, functions: {}, rules: [] };

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'mup-cli-answers-'));
  socket = join(dir, 'api.sock');
  server = createServer((req, res) => {
    asked.push(`${req.method} ${req.url}`);
    answer(req, res);
  });
  await new Promise<void>((r) => server.listen(socket, r));
  tcp = createServer((req, res) => {
    tcpAsked.push(`${req.method} ${req.url} ${req.headers.authorization ?? ''}`);
    res.end('{}');
  });
  await new Promise<void>((r) => tcp.listen(0, '127.0.0.1', r));
  tcpPort = (tcp.address() as AddressInfo).port;
});

afterAll(async () => {
  await new Promise<void>((r) => server.close(() => r()));
  await new Promise<void>((r) => tcp.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

afterEach(() => {
  answer = (_req, res) => res.end('{}');
  delete process.env['MUP_SOCKET'];
  delete process.env['MUP_URL'];
});

async function mup(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  asked.length = 0;
  tcpAsked.length = 0;
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['node', 'mup', ...args], { out: (s) => out.push(s), err: (s) => err.push(s) });
  return { code, out: out.join(''), err: err.join('') };
}

/** Headers and part of a JSON body, then the connection broken. */
function cutOff(_req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': '1000' });
  res.write('{"policies":[{"match":"10.0.0.0/24"},');
  setTimeout(() => res.socket?.destroy(), 20);
}

describe('answers that are not whole or not the daemon\'s', () => {
  it('an answer cut off after its headers is an error, not an empty success', async () => {
    answer = cutOff;
    const l = await mup('policy', 'list', '--json', '--socket', socket);
    expect(l.code).toBe(2);
    expect(l.out).toBe('');
    expect(l.err).toMatch(/broke off its answer/);
    // mup status: "cannot tell" (4), not 0 (healthy).
    const s = await mup('status', '--socket', socket);
    expect(s.code).toBe(4);
    expect(s.err).toMatch(/cannot tell: .*broke off its answer/);
  });

  it('a 200 answer that is not JSON is not taken as an empty list or a status', async () => {
    answer = (_req, res) => res.end('<html>hello</html>');
    const l = await mup('policy', 'list', '--json', '--socket', socket);
    expect(l.code).toBe(2);
    expect(l.out).toBe('');
    expect(l.err).toMatch(/is not the daemon's: not JSON/);
    const s = await mup('status', '--socket', socket);
    expect(s.code).toBe(4);
    expect(s.err).not.toMatch(/Cannot read properties/);
  });

  it('an answer longer than the bound is refused with a clear error', async () => {
    answer = (_req, res) => res.end(JSON.stringify({ policies: Array.from({ length: 200 }, (_, i) => ({ match: `10.0.${i}.0/24` })) }));
    const e = await call({ socket, maxAnswerBytes: 1000 }, 'GET', '/v1/policies').catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ConnectError);
    expect((e as ConnectError).code).toBe('E2BIG');
    expect((e as Error).message).toMatch(/longer than 1000 bytes.*--limit/);
  });
});

describe('--url and the environment name the daemon meant', () => {
  it('refuses https:// and other schemes, and host:port without one, before connecting', async () => {
    const tok = join(dir, 'token');
    writeFileSync(tok, 's3cret\n');
    for (const url of [`https://127.0.0.1:${tcpPort}`, `127.0.0.1:${tcpPort}`, `ftp://127.0.0.1:${tcpPort}`, `http://127.0.0.1:${tcpPort}/v2`, 'not a url']) {
      const r = await mup('status', '--url', url, '--token-file', tok);
      expect(r.code, url).toBe(4);
      expect(r.err, url).toMatch(/--url/);
      expect(tcpAsked, url).toEqual([]);
    }
    expect((await mup('status', '--url', `https://127.0.0.1:${tcpPort}`)).err).toMatch(/will not send the token in clear text/);
    // The plain one still goes through.
    expect(httpTarget(`http://127.0.0.1:${tcpPort}`)).toEqual({ host: '127.0.0.1', port: tcpPort });
    expect(httpTarget('http://[::1]:9180')).toEqual({ host: '::1', port: 9180 });
  });

  it('a daemon named on the command line wins over MUP_SOCKET and MUP_URL', async () => {
    answer = (_req, res) => res.end(JSON.stringify({ policies: [] }));
    process.env['MUP_URL'] = `http://127.0.0.1:${tcpPort}`;
    const r = await mup('policy', 'list', '--json', '--socket', socket);
    expect(r.code).toBe(0);
    expect(asked).toEqual(['GET /v1/policies']);
    expect(tcpAsked).toEqual([]);
    delete process.env['MUP_URL'];
    process.env['MUP_SOCKET'] = socket;
    const s = await mup('policy', 'list', '--json', '--instance', `nosuch${process.pid}`);
    expect(s.code).toBe(2);
    expect(s.err).toMatch(new RegExp(`nosuch${process.pid}\\.sock`));
    expect(asked).toEqual([]);
    // Without a flag the environment still names it.
    expect((await mup('policy', 'list', '--json')).code).toBe(0);
    expect(asked).toEqual(['GET /v1/policies']);
  });

  it('--socket and --url together are refused', async () => {
    const r = await mup('policy', 'list', '--socket', socket, '--url', `http://127.0.0.1:${tcpPort}`);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--socket or --url, not both/);
    expect(asked).toEqual([]);
    expect(tcpAsked).toEqual([]);
  });
});

describe('flags whose values Node would take as another', () => {
  it('--watch takes 0.1 to 3600 seconds; Infinity, 1e-9 and 3000000 polled every millisecond', async () => {
    answer = (req, res) => res.end(JSON.stringify(req.url === '/v1/status' ? STATUS : COUNTERS));
    for (const v of ['Infinity', '1e-9', '3000000', '0', 'x']) {
      const r = await mup('stats', '--socket', socket, '--watch', v);
      expect(r.code, v).toBe(2);
      expect(r.err, v).toMatch(/--watch: expected 0\.1 to 3600 seconds/);
      expect(asked.filter((a) => a.startsWith('GET /v1/counters')), v).toEqual([]);
    }
  });

  it('Ctrl-C ends --watch at once, not after the interval', async () => {
    answer = (req, res) => res.end(JSON.stringify(req.url === '/v1/status' ? STATUS : COUNTERS));
    const before = new Set(process.listeners('SIGINT'));
    const t0 = performance.now();
    const run = mup('stats', '--socket', socket, '--watch', '30');
    let handler: ((s: NodeJS.Signals) => void) | undefined;
    for (let i = 0; i < 500 && handler === undefined; i++) {
      await new Promise((r) => setTimeout(r, 10));
      handler = process.listeners('SIGINT').find((l) => !before.has(l)) as ((s: NodeJS.Signals) => void) | undefined;
    }
    expect(handler, 'the watch listens for SIGINT').toBeDefined();
    // Only the CLI's own listener: the test runner's are not called.
    process.removeListener('SIGINT', handler!);
    handler!('SIGINT');
    const r = await run;
    expect(r.code).toBe(0);
    expect(performance.now() - t0).toBeLessThan(20_000);
    expect(process.listeners('SIGINT').filter((l) => !before.has(l))).toEqual([]);
  });

  it('--timeout 0 is refused (a request timeout of 0 is none)', async () => {
    const r = await mup('status', '--socket', socket, '--timeout', '0');
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--timeout: expected 1 to 86400 seconds/);
    expect(asked).toEqual([]);
  });

  it('mup daemon --link-check-ms 0 is refused before anything starts', async () => {
    const r = await mup('daemon', '--config', join(dir, 'none.yaml'), '--link-check-ms', '0');
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--link-check-ms: expected 10 to 3600000 ms/);
  });

  it('--json-body with field flags beside it is refused, not sent without them', async () => {
    const body = JSON.stringify({ match: '10.0.0.0/8', sr_prefix: '2001:db8::/48', src_prefix: '2001:db8:f::/64' });
    const r = await mup('policy', 'add', '--socket', socket, '--json-body', body, '--name', 'ue-pool', '--mtu', '1400');
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--json-body is the whole entry: put --name, --mtu in it/);
    expect(asked).toEqual([]);
    answer = (_req, res) => res.end(JSON.stringify({ policy: { match: '10.0.0.0/8' } }));
    expect((await mup('policy', 'add', '--socket', socket, '--json-body', body)).code).toBe(0);
    expect(asked).toEqual(['POST /v1/policies']);
  });

  it("mup probe's numbers are read whole: 0x1000zz is no TEID", () => {
    expect(num('0x1000', 'teid', 0, 0xffffffff, true)).toBe(0x1000);
    expect(num('4096', 'teid', 0, 0xffffffff, true)).toBe(4096);
    for (const bad of ['0x1000zz', '0x12345678_9', '0x', '', ' ']) expect(() => num(bad, 'teid', 0, 0xffffffff, true), bad).toThrow(/--teid/);
  });
});

describe('mup config save --to', () => {
  it('writes nothing when the running config the daemon printed does not load (found in review, session 43)', async () => {
    const to = join(dir, 'copy.yaml');
    answer = (_req, res) => res.end(JSON.stringify({ file: '/etc/mup/none.yaml', yaml: 'policies:\n  - { match: nonsense }\n', apiChanges: 0 }));
    const r = await mup('config', 'save', '--socket', socket, '--to', to);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/the running config the daemon printed does not load .*nothing was written to/);
    expect(existsSync(to)).toBe(false);
    const good = 'policies:\n  - { match: 10.0.0.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n';
    answer = (_req, res) => res.end(JSON.stringify({ file: '/etc/mup/none.yaml', yaml: good, apiChanges: 1 }));
    expect((await mup('config', 'save', '--socket', socket, '--to', to)).code).toBe(0);
    expect(readFileSync(to, 'utf8')).toBe(good);
  });
});
