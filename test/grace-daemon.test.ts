/**
 * The daemon awaits the grace period a change needs (src/dataplane/grace.ts,
 * Tables.writable) instead of blocking its event loop in it: with every
 * grace period made 800 ms longer (MUP_TEST_GRACE_EXTRA_MS, read by the
 * daemon's grace thread), a GET /v1/status sent while a put waits for the
 * grace period of the delete before it is answered first, and the put lands.
 * It counts them in /metrics (mup_grace_*), and says at start when the host
 * leaves them unexpedited (/sys/kernel/rcu_expedited 0).
 * A real daemon process (bin/mup.js: run `make ts` first), no interfaces.
 */
import { existsSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_OBJECT } from '../src/dataplane/index.js';
import { execa } from 'execa';
import { MUP_BIN, TestDaemon } from './helpers/daemon.js';

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

  it("counts the grace periods, their time and the writes' waits in /metrics, and says at start when the host does not expedite them", async () => {
    const t = d!;
    const metric = (text: string, name: string): number => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
    const before = (await t.api('GET', '/metrics')).text;
    // A delete, then an add that must wait for the grace period the delete asked for (800 ms longer here).
    expect((await t.api('DELETE', '/v1/policies?name=b')).status).toBe(200);
    expect((await t.api('POST', '/v1/policies', { body: { name: 'c', match: '10.0.3.0/24', sr_prefix: '2001:db8:3::/48', src_prefix: '2001:db8:ffff::/64' } })).status).toBe(201);
    const after = (await t.api('GET', '/metrics')).text;
    const d0 = (name: string): number => metric(after, name) - metric(before, name);
    expect(d0('mup_grace_periods_total'), 'grace periods run for the delete').toBeGreaterThanOrEqual(1);
    expect(d0('mup_grace_period_seconds_total')).toBeGreaterThan(0);
    // The add waited for most of the 800 ms the test adds to each grace period (the NaN of a missing series fails).
    expect(d0('mup_grace_wait_seconds_total')).toBeGreaterThan(0.4);
    const host = Number.parseInt(readFileSync('/sys/kernel/rcu_expedited', 'utf8').trim(), 10); // any value but 0 expedites
    expect(metric(after, 'mup_rcu_expedited')).toBe(host === 0 ? 0 : 1);
    const told = /grace periods are not expedited/.test(t.log);
    expect(told, `the start's log line with /sys/kernel/rcu_expedited ${host}`).toBe(host === 0);
    // GET /v1/status and `mup status` say the same.
    const g = ((await t.api('GET', '/v1/status')).body as { grace: { rcuExpedited: number; periods: number; seconds: number; waitSeconds: number } }).grace;
    expect(g.rcuExpedited).toBe(host === 0 ? 0 : 1);
    expect(g.periods).toBeGreaterThanOrEqual(metric(after, 'mup_grace_periods_total'));
    expect(g.waitSeconds).toBeGreaterThanOrEqual(metric(after, 'mup_grace_wait_seconds_total'));
    const cli = await execa('node', [MUP_BIN, 'status'], { reject: false, env: { MUP_SOCKET: t.socket }, timeout: 30_000 });
    expect(cli.stdout).toMatch(new RegExp(`^grace {6}rcu_expedited ${host === 0 ? 0 : 1}: \\d+ grace periods, [\\d.]+ ms each; table writes waited [\\d.]+ s`, 'm'));
  });
});
