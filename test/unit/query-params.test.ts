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
  };
  const log = { debug: (): void => undefined, info: (): void => undefined, warn: (): void => undefined, error: (): void => undefined };
  server = makeServer(apiHandler({ daemon: d, metrics: {}, log } as unknown as Parameters<typeof apiHandler>[0]));
  await new Promise<void>((r) => server.listen(socket, r));
});

afterAll(async () => {
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

function get(path: string, method = 'GET'): Promise<{ status: number; body: { code?: string; path?: string; error?: string } & Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const q = request({ socketPath: socket, path, method }, (r) => {
      let b = '';
      r.on('data', (c: Buffer) => (b += c.toString()));
      r.on('end', () => resolve({ status: r.statusCode ?? 0, body: JSON.parse(b) as never }));
    });
    q.on('error', reject);
    q.end();
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
