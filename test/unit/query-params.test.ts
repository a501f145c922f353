/**
 * A query parameter given twice: URLSearchParams.get reads the first and
 * the other was ignored unchecked (?limit=2&limit=abc listed 2, the
 * reverse order was a 400; ?rule=p1&rules=bogus read p1 and never looked
 * at rules). Each is a 400 `malformed` now, on every route, before the
 * route reads anything. The real handler, a daemon stand-in that answers
 * the reads these routes make.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { request, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiHandler, encodeCursor, makeServer } from '../../src/daemon/api.js';

let dir: string;
let socket: string;
let server: Server;
const acted: string[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'mup-query-'));
  socket = join(dir, 'api.sock');
  const policies = new Map(Array.from({ length: 5 }, (_, i) => [`10.0.${i}.0/24`, { name: `p${i}`, i }] as const));
  const d = {
    ruleMap: (kind: string) => (kind === 'policy' ? policies : new Map()),
    listedRule: (_kind: string, r: { name: string; i: number }) => ({ name: r.name, origin: 'config', rule: r.i }),
    ruleCounters: (kind: string, by: { name?: string }) => (kind === 'policy' && by.name === 'p1' ? { at: 'now', rule: { name: 'p1' } } : undefined),
    countersRowsAsync: async (rules: unknown) => ({ at: 'now', events: {}, rules: [{ asked: rules }], functions: {} }),
    requests: { observe: (): void => undefined },
    // What the routes below call when they act: recorded, so a refused request is seen to have done nothing.
    applyBatch: async (ops: unknown[]) => (acted.push('applyBatch'), { added: ops.length, replaced: 0, deleted: 0, results: [] }),
    resetCounters: async () => void acted.push('resetCounters'),
    reload: async (o: unknown) => (acted.push(`reload ${JSON.stringify(o)}`), {}),
    saveConfig: async () => (acted.push('saveConfig'), {}),
    putRule: async () => (acted.push('putRule'), {}),
  };
  const log = { debug: (): void => undefined, info: (): void => undefined, warn: (): void => undefined, error: (): void => undefined };
  server = makeServer(apiHandler({ daemon: d, metrics: {}, log } as unknown as Parameters<typeof apiHandler>[0]));
  await new Promise<void>((r) => server.listen(socket, r));
});

afterAll(async () => {
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

function get(path: string, method = 'GET', body?: string): Promise<{ status: number; body: { code?: string; path?: string; error?: string } & Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const headers = body === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) };
    const q = request({ socketPath: socket, path, method, headers }, (r) => {
      let b = '';
      r.on('data', (c: Buffer) => (b += c.toString()));
      r.on('end', () => resolve({ status: r.statusCode ?? 0, body: JSON.parse(b) as never }));
    });
    q.on('error', reject);
    q.end(body);
  });
}

describe('query parameters given twice', () => {
  const cursor = encodeCursor('policy', '10.0.1.0/24');
  for (const [path, param] of [
    ['/v1/policies?limit=2&limit=abc', 'limit'],
    ['/v1/policies?limit=abc&limit=2', 'limit'],
    ['/v1/policies?limit=2&limit=2', 'limit'],
    [`/v1/policies?limit=2&after=${cursor}&after=garbage`, 'after'],
    ['/v1/counters?rules=3&rules=bogus', 'rules'],
    ['/v1/counters?rule=p1&rule=nosuch', 'rule'],
    ['/v1/policies?match=10.0.1.0/24&match=10.0.2.0/24', 'match'],
  ] as const) {
    it(`${path}: 400 malformed naming ${param}`, async () => {
      const r = await get(path, path.includes('match=') ? 'DELETE' : 'GET');
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body).toMatchObject({ code: 'malformed', path: param });
      expect(r.body.error).toContain(`${param} is given twice`);
    });
  }

  it('rule= with rules=: 400, whatever rules says', async () => {
    for (const path of ['/v1/counters?rule=p1&rules=bogus', '/v1/counters?rules=all&rule=p1']) {
      const r = await get(path);
      expect(r.status, path).toBe(400);
      expect(r.body).toMatchObject({ code: 'malformed', path: 'rules' });
    }
  });

  it('each given once still answers', async () => {
    expect((await get(`/v1/policies?limit=2&after=${cursor}`)).body).toMatchObject({ policies: [{ name: 'p2' }, { name: 'p3' }] });
    expect((await get('/v1/counters?rule=p1')).body).toMatchObject({ rule: { name: 'p1' } });
    expect((await get('/v1/counters?rules=3')).body).toMatchObject({ rules: [{ asked: 3 }] });
  });
});

describe('a query parameter the route does not take', () => {
  // Ignored before: POST /v1/batch?check=true applied the batch, POST /v1/counters/reset?rule=p1 reset every counter.
  const batch = JSON.stringify({ operations: [{ op: 'delete', policy: { name: 'p1' } }] });
  const policy = JSON.stringify({ name: 'n', match: '10.9.0.0/16', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:2::/64' });
  for (const [method, path, param, body, hint] of [
    ['POST', '/v1/batch?check=true', 'check', batch, /POST \/v1\/batch takes none; a batch has no dry run/],
    ['POST', '/v1/batch?dry_run=1', 'dry_run', batch, /a batch has no dry run/],
    ['POST', '/v1/counters/reset?rule=p1', 'rule', undefined, /it resets every counter/],
    ['POST', '/v1/reload?dry_run=true', 'dry_run', undefined, /takes only \?force= and \?check=; use check=true/],
    ['POST', '/v1/reload?check=true&verbose=1', 'verbose', undefined, /takes only \?force= and \?check=/],
    ['POST', '/v1/config/save?path=/tmp/x.yaml', 'path', undefined, /mup config save --to FILE/],
    ['POST', '/v1/policies?replace=true', 'replace', policy, /POST \/v1\/policies takes none/],
    ['PUT', '/v1/policies?name=n', 'name', policy, /PUT \/v1\/policies takes none/],
    ['POST', '/v1/probe?enable=1', 'enable', '{}', /takes none/],
    ['GET', '/v1/status?verbose=1', 'verbose', undefined, /GET \/v1\/status takes none/],
    ['GET', '/v1/health?deep=1', 'deep', undefined, /GET \/v1\/health takes none/],
    ['GET', '/v1/bgp?routes=1', 'routes', undefined, /takes none/],
    ['GET', '/v1/config?origin=false', 'origin', undefined, /takes only \?origins=/],
  ] as const) {
    it(`${method} ${path}: 400 malformed naming ${param}, nothing done`, async () => {
      acted.length = 0;
      const r = await get(path, method, body);
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body).toMatchObject({ code: 'malformed', path: param });
      expect(r.body.error).toMatch(hint);
      expect(acted).toEqual([]);
    });
  }

  it('a method a route does not take is 405 before its parameters are looked at (DELETE /v1/probe?x=1)', async () => {
    const r = await get('/v1/probe?x=1', 'DELETE');
    expect(r.status, JSON.stringify(r.body)).toBe(405);
  });

  it('the parameters a route takes still act', async () => {
    acted.length = 0;
    expect((await get('/v1/reload?check=true', 'POST')).status).toBe(200);
    expect((await get('/v1/batch', 'POST', batch)).status).toBe(200);
    expect((await get('/v1/counters/reset', 'POST')).status).toBe(200);
    expect(acted).toEqual(['reload {"force":false,"check":true,"reason":"api"}', 'applyBatch', 'resetCounters']);
  });
});
