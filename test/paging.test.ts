/**
 * Lists in pages and one rule's counters, through a real daemon (issue 19):
 * GET /v1/policies?limit=&after= (cursor stability across pages while
 * rules come and go, limit bounds, bad cursors answered 400 bad_cursor),
 * the unpaged list streamed whole, and GET /v1/counters?rule= / mup stats
 * --rule NAME. The daemon runs with no interfaces (the tables and the API
 * are what is checked); cleanup() in afterAll removes it all.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestDaemon } from './helpers/daemon.js';

const isRoot = process.getuid?.() === 0;
const N = 57;
const policy = (i: number): string => `  - { name: p${i}, match: 10.${i >> 8}.${i & 255}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`;
const CONFIG = `
settings: { max_policies: 256, max_localsids: 16 }
policies:
${Array.from({ length: N }, (_, i) => policy(i)).join('\n')}
localsids:
  - { name: s1, sid: "2001:db8:2::/48", src_prefix_len: 64 }
`;

interface Page {
  policies: { name?: string; match: string }[];
  next: string | null;
}

describe.skipIf(!isRoot)('list paging and per-rule counters through the API and CLI', () => {
  let d: TestDaemon | undefined;
  beforeAll(async () => {
    d = new TestDaemon({ config: CONFIG });
    await d.start();
  }, 60_000);
  afterAll(async () => {
    await d?.cleanup();
  }, 60_000);

  const page = async (q: string): Promise<Page> => {
    const r = await d!.api('GET', `/v1/policies?${q}`);
    expect(r.status, r.text).toBe(200);
    return r.body as Page;
  };

  it('pages of 10 give every rule once, in key order; the last page has next null', async () => {
    const whole = (await d!.api('GET', '/v1/policies')).body as { policies: { match: string }[]; next?: unknown };
    expect(whole.policies).toHaveLength(N);
    expect(whole.next, 'the unpaged list has no cursor').toBeUndefined();
    const got: string[] = [];
    let q = 'limit=10';
    for (let i = 0; i < 20; i++) {
      const p = await page(q);
      got.push(...p.policies.map((x) => x.match));
      if (p.next === null) break;
      expect(p.policies).toHaveLength(10);
      q = `limit=10&after=${p.next}`;
    }
    expect(got).toEqual(whole.policies.map((x) => x.match).sort());
  });

  it('a cursor keeps its place while rules are added and deleted between pages, its own rule too', async () => {
    const first = await page('limit=5');
    const last = first.policies.at(-1)!;
    const shown = new Set(first.policies.map((x) => x.match));
    // Delete the cursor's own rule; add one before it and one after it (in key order).
    expect((await d!.api('DELETE', `/v1/policies?name=${last.name}`)).status).toBe(200);
    const add = async (name: string, match: string): Promise<void> => {
      const r = await d!.api('POST', '/v1/policies', { body: { name, match, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' } });
      expect(r.status, r.text).toBe(201);
    };
    await add('early', '1.0.0.0/24');
    await add('late', '99.0.0.0/24');
    try {
      const rest: string[] = [];
      let next: string | null = first.next;
      while (next !== null) {
        const p = await page(`limit=5&after=${next}`);
        rest.push(...p.policies.map((x) => x.match));
        next = p.next;
      }
      const now = ((await d!.api('GET', '/v1/policies')).body as Page).policies.map((x) => x.match);
      expect(rest.filter((m) => shown.has(m)), 'nothing of the first page again').toEqual([]);
      expect(rest).not.toContain('1.0.0.0/24');
      expect(rest).toEqual(now.filter((m) => m > last.match).sort());
      expect(rest).toContain('99.0.0.0/24');
    } finally {
      await d!.api('DELETE', '/v1/policies?name=early');
      await d!.api('DELETE', '/v1/policies?name=late');
      await add(last.name!, last.match);
    }
  });

  it('limit bounds: 1 to 10,000; anything else, or an unknown parameter, is a 400 naming it', async () => {
    expect((await page('limit=1')).policies).toHaveLength(1);
    expect((await page('limit=10000')).policies).toHaveLength(N);
    for (const q of ['limit=0', 'limit=10001', 'limit=abc', 'limit=-1', 'limit=']) {
      const r = await d!.api('GET', `/v1/policies?${q}`);
      expect(r.status, q).toBe(400);
      expect(r.body, q).toMatchObject({ code: 'invalid', path: 'limit' });
      expect((r.body as { error: string }).error).toMatch(/from 1 to 10000/);
    }
    const r = await d!.api('GET', '/v1/policies?limit=5&offset=3');
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ code: 'malformed' });
  });

  it('a bad cursor, or one of another list, is a 400 bad_cursor; a page with only after= has the default size', async () => {
    for (const after of ['garbage!', 'eyJrIjoxfQ', Buffer.from('{"k":"localsid","a":"2001:db8:2::/48"}').toString('base64url')]) {
      const r = await d!.api('GET', `/v1/policies?limit=5&after=${encodeURIComponent(after)}`);
      expect(r.status, after).toBe(400);
      expect(r.body, after).toMatchObject({ code: 'bad_cursor', path: 'after' });
    }
    const sids = (await d!.api('GET', '/v1/localsids?limit=1')).body as { localsids: unknown[]; next: string | null };
    expect(sids.localsids).toHaveLength(1);
    expect(sids.next).toBeNull();
    const first = await page('limit=1');
    const rest = await page(`after=${first.next!}`);
    expect(rest.policies).toHaveLength(N - 1);
  });

  it('one rule\'s counters: GET /v1/counters?rule= by name or key, and mup stats --rule NAME', async () => {
    const byName = await d!.api('GET', '/v1/counters?rule=p3');
    expect(byName.status, byName.text).toBe(200);
    expect(byName.body).toMatchObject({ rule: { kind: 'policy', key: '10.0.3.0/24', name: 'p3', rule: 3, packets: 0, bytes: 0 } });
    const byKey = await d!.api('GET', `/v1/counters?rule=${encodeURIComponent('2001:db8:2::/48')}`);
    expect(byKey.body).toMatchObject({ rule: { kind: 'localsid', name: 's1' } });
    const missing = await d!.api('GET', '/v1/counters?rule=nope');
    expect(missing.status).toBe(404);
    expect(missing.body).toMatchObject({ code: 'not_found', path: 'rule' });
    const cli = await d!.cli(['stats', '--rule', 'p3']);
    expect(cli.exitCode, cli.stderr).toBe(0);
    expect(cli.stdout).toMatch(/^10\.0\.3\.0\/24\s+policy\s+p3\s+3\s+0\s+0$/m);
    const page2 = await d!.cli(['policy', 'list', '--limit', '2']);
    expect(page2.exitCode, page2.stderr).toBe(0);
    expect(page2.stdout.trim().split('\n')).toHaveLength(3);
    // The next page's command names the daemon it came from (here MUP_SOCKET's), and run as printed it lists the next page.
    const hint = /^next page: mup (policy list --socket (\S+) --limit 2 --after \S+)$/m.exec(page2.stderr);
    expect(hint, page2.stderr).not.toBeNull();
    expect(hint![2]).toBe(d!.socket);
    const page3 = await d!.cli(hint![1]!.split(' '));
    expect(page3.exitCode, page3.stderr).toBe(0);
    const rows = (out: string): string[] => out.trim().split('\n').slice(1);
    expect(rows(page3.stdout)).toHaveLength(2);
    expect(rows(page3.stdout).some((r) => rows(page2.stdout).includes(r))).toBe(false);
  });
});
