/**
 * The daemon awaits the grace period a change needs (src/dataplane/grace.ts,
 * Tables.writable) instead of blocking its event loop in it: with every
 * grace period made 800 ms longer (MUP_TEST_GRACE_EXTRA_MS, read by the
 * daemon's grace thread), a GET /v1/status sent while a put waits for the
 * grace period of the delete before it is answered first, and the put lands.
 * A real daemon process (bin/mup.js: run `make ts` first), no interfaces.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_OBJECT } from '../src/dataplane/index.js';
import { TestDaemon } from './helpers/daemon.js';

const haveObject = existsSync(DEFAULT_OBJECT);
const isRoot = process.getuid?.() === 0;

describe.skipIf(!haveObject || !isRoot)('the daemon while a change waits for its grace period', () => {
  let d: TestDaemon | undefined;
  const saved = process.env['MUP_TEST_GRACE_EXTRA_MS'];
  beforeAll(async () => {
    process.env['MUP_TEST_GRACE_EXTRA_MS'] = '800';
    d = new TestDaemon({
      config:
        'settings: { forwarding: tx, max_policies: 8 }\npolicies:\n' +
        '  - { name: a, match: 10.0.1.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64" }\n',
      instance: `grace${process.pid}`,
    });
    try {
      await d.start();
    } finally {
      if (saved === undefined) delete process.env['MUP_TEST_GRACE_EXTRA_MS'];
      else process.env['MUP_TEST_GRACE_EXTRA_MS'] = saved;
    }
  });
  afterAll(async () => {
    await d?.cleanup();
  });

  it('answers GET /v1/status before a put that waits for the grace period of a delete; the put lands', async () => {
    const t = d!;
    // Whatever the load owed is paid first.
    await new Promise((r) => setTimeout(r, 2000));
    const del = await t.api('DELETE', '/v1/policies?name=a');
    expect(del.status).toBe(200);
    const order: string[] = [];
    const put = t
      .api('POST', '/v1/policies', { body: { name: 'b', match: '10.0.2.0/24', sr_prefix: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64' } })
      .then((r) => {
        order.push('put');
        return r;
      });
    await new Promise((r) => setTimeout(r, 100));
    const status = t.api('GET', '/v1/status').then((r) => {
      order.push('status');
      return r;
    });
    const [p, s] = await Promise.all([put, status]);
    expect(s.status).toBe(200);
    expect(p.status, JSON.stringify(p.body)).toBe(201);
    expect(order, 'status answered while the put waited').toEqual(['status', 'put']);
    const list = JSON.stringify((await t.api('GET', '/v1/policies')).body);
    expect(list).toContain('10.0.2.0/24');
    expect(list).not.toContain('10.0.1.0/24');
    expect(((await t.api('GET', '/v1/status')).body as { tables: { policies: { entries: number } } }).tables.policies.entries).toBe(1);
  });
});
