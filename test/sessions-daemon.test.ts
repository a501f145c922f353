/**
 * Sessions through a running daemon: the control API's /v1/sessions and the
 * CLI's `mup session`, in a namespace this test creates.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestDaemon } from './helpers/daemon.js';
import { Lab } from './helpers/netns.js';

const isRoot = process.getuid?.() === 0;
const IFACE = 'mup0';
const SESSION = { name: 'ue1', ue: '10.60.0.1/32', teid: '0x12345678', qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' };

describe.skipIf(!isRoot)('mup daemon: sessions through the API and the CLI', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;

  beforeAll(async () => {
    lab = await Lab.create(['mup']);
    await lab.ip('mup', 'link', 'add', IFACE, 'type', 'veth', 'peer', 'name', 'mup1');
    await lab.ip('mup', 'link', 'set', IFACE, 'up');
    d = new TestDaemon({
      config: `settings:\n  max_sessions: 8\ninterfaces:\n  - name: ${IFACE}\n    xdp: native\nsessions:\n  - ue: "2001:db8:60::/64"\n    teid: 7\n    qfi: 1\n    endpoint: 192.0.2.2\n    source: 198.51.100.1\n    isd: "2001:db8:2::/48"\n    src_prefix: "2001:db8:ff::/64"\n`,
      netns: lab.ns('mup'),
      instance: `sess${process.pid}`,
    });
    await d.start();
  });

  afterAll(async () => {
    try {
      await d?.cleanup();
    } finally {
      await lab?.destroy();
    }
  });

  it('refuses a bad session with the key path, adds, lists, replaces and deletes a good one', async () => {
    const bad = await d!.api('POST', '/v1/sessions', { body: { ...SESSION, qfi: 64 } });
    expect(bad.status).toBe(400);
    expect(bad.text).toMatch(/qfi: expected an integer from 0 to 63/);
    const add = await d!.api('POST', '/v1/sessions', { body: SESSION });
    expect(add.status).toBe(201);
    const dup = await d!.api('POST', '/v1/sessions', { body: { ...SESSION, name: 'other', ue: '10.60.0.1/32' } });
    expect(dup.status).toBe(409);
    const list = (await d!.api('GET', '/v1/sessions')).body as { sessions: { ue: string; teid: number; origin: string; rule: number | null }[] };
    expect(list.sessions.map((s) => [s.ue, s.teid, s.origin, typeof s.rule])).toEqual([
      ['2001:db8:60::/64', 7, 'config', 'number'],
      ['10.60.0.1/32', 0x12345678, 'api', 'number'],
    ]);
    const cli = await d!.cli(['session', 'replace', '--ue', '10.60.0.1/32', '--teid', '99', '--qfi', '2', '--rqi', '--endpoint', '192.0.2.3', '--source', '198.51.100.1', '--isd', '2001:db8:2::/48', '--src-prefix', '2001:db8:ff::/64']);
    expect(cli.exitCode, cli.stderr).toBe(0);
    const after = (await d!.api('GET', '/v1/sessions')).body as { sessions: { ue: string; teid: number; rqi: boolean }[] };
    expect(after.sessions.find((s) => s.ue === '10.60.0.1/32')).toMatchObject({ teid: 99, rqi: true });
    const del = await d!.cli(['session', 'del', '10.60.0.1/32']);
    expect(del.exitCode, del.stderr).toBe(0);
    const last = (await d!.api('GET', '/v1/sessions')).body as { sessions: unknown[] };
    expect(last.sessions).toHaveLength(1);
  });
});
