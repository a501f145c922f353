/**
 * Who may change the tables over TCP (issue 16, defect 2): a local user who
 * is not root, on the daemon's loopback HTTP listener.
 *
 * The test creates an unprivileged user (mupt-<pid>, removed in afterAll)
 * and runs curl as that user (setpriv --reuid/--regid --clear-groups) inside
 * a namespace it creates, where one daemon runs attached to a veth, with the
 * HTTP listener on 127.0.0.1. For each HTTP setting it restarts that daemon
 * and checks:
 * - no token_file, open_reads: reads answer, every change (add a catch-all
 *   policy, delete a config rule, reset the counters) is 403 and changes
 *   nothing: policy and local SID lists, counters and the state file are
 *   byte-identical before and after;
 * - token_file without open_reads: reads and changes without the token are
 *   401; with the token the same user's changes go through;
 * - token_file with open_reads: reads answer without the token, changes
 *   still want it;
 * - the old shipped example (loopback, no token, no open_reads) no longer
 *   starts, and names the key;
 * - a token file readable by group or others is refused at start.
 */
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestDaemon } from './helpers/daemon.js';
import { Lab } from './helpers/netns.js';

const isRoot = process.getuid?.() === 0;
/** The namespace is this test's own: nothing else listens there. */
const PORT = 9180;
const TOKEN = '5ec2e7'.repeat(6);
const IFACE = 'mup0';
const PEER = 'mup1';
const USER = `mupt-${process.pid}`;

const CATCH_ALL = { name: 'everything', match: '0.0.0.0/0', sr_prefix: '2001:db8:66::/48', src_prefix: '2001:db8:ffff::/64' };
const NEW_SID = { name: 'new-sid', sid: 'fd00:77::/48', src_prefix_len: 64 };

function configText(http: string): string {
  return (
    'settings:\n  max_policies: 8\n  max_localsids: 8\n' +
    `interfaces:\n  - name: ${IFACE}\n    xdp: native\n` +
    `daemon:\n  http:\n    listen: 127.0.0.1:${PORT}\n${http}` +
    'policies:\n  - { name: p1, match: 10.0.1.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64" }\n' +
    'localsids:\n  - { name: l1, sid: "fd00:1::/48", src_prefix_len: 64 }\n'
  );
}

interface Answer {
  status: number;
  body: unknown;
  text: string;
}

describe.skipIf(!isRoot)('the HTTP listener: changes over TCP need the token, on loopback too', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;
  let uid = 0;
  let gid = 0;
  let userMade = false;
  let tokenFile = '';

  /** curl as the unprivileged user, inside the namespace. */
  async function asUser(method: string, path: string, o: { token?: string; body?: unknown } = {}): Promise<Answer> {
    const args = ['netns', 'exec', lab!.ns('auth'), 'setpriv', `--reuid=${uid}`, `--regid=${gid}`, '--clear-groups', '--', 'curl', '-sS', '--max-time', '20'];
    args.push('-X', method, '-w', '\n%{http_code}');
    if (o.token !== undefined) args.push('-H', `Authorization: Bearer ${o.token}`);
    if (o.body !== undefined) args.push('-H', 'Content-Type: application/json', '--data-binary', JSON.stringify(o.body));
    args.push(`http://127.0.0.1:${PORT}${path}`);
    const r = await execa('ip', args, { reject: false, timeout: 25_000 });
    if (r.exitCode !== 0) throw new Error(`curl as ${USER}: ${method} ${path}: exit ${r.exitCode}: ${r.stderr}`);
    const out = r.stdout;
    const cut = out.lastIndexOf('\n');
    const text = out.slice(0, cut);
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // /metrics is text
    }
    return { status: Number(out.slice(cut + 1)), body, text };
  }

  /** The user really is unprivileged: id as seen by the process curl runs in. */
  async function whoami(): Promise<string> {
    const r = await execa('ip', ['netns', 'exec', lab!.ns('auth'), 'setpriv', `--reuid=${uid}`, `--regid=${gid}`, '--clear-groups', '--', 'id', '-u'], { reject: false });
    return r.stdout.trim();
  }

  /** Some packets through the program, so that a counter reset would show. */
  async function traffic(): Promise<void> {
    await lab!.exec('auth', 'ping', ['-6', '-c', '3', '-i', '0.2', '-W', '1', '-I', PEER, 'ff02::1'], 10_000).catch(() => undefined);
  }

  const eventPackets = (counters: unknown): number =>
    Object.values((counters as { events: Record<string, { packets: number }> }).events).reduce((a, e) => a + e.packets, 0);

  /** What a change would alter, as bytes: the rule lists, the counters' events, the state file. */
  async function snapshot(): Promise<{ policies: string; localsids: string; events: number; state: string | null }> {
    const policies = (await d!.api('GET', '/v1/policies')).text;
    const localsids = (await d!.api('GET', '/v1/localsids')).text;
    const events = eventPackets((await d!.api('GET', '/v1/counters?rules=none')).body);
    const state = existsSync(d!.stateFile) ? readFileSync(d!.stateFile, 'utf8') : null;
    return { policies, localsids, events, state };
  }

  async function restart(http: string): Promise<void> {
    await d!.stop();
    d!.writeConfig(configText(http));
    await d!.start();
  }

  /** The three changes of the report; each must be refused with `status`, and nothing may change. */
  async function changesRefused(status: number, token?: string): Promise<Answer[]> {
    await traffic();
    const before = await snapshot();
    expect(before.events, 'the counters have something a reset would zero').toBeGreaterThan(0);
    const t = token === undefined ? {} : { token };
    const answers = [
      await asUser('POST', '/v1/policies', { ...t, body: CATCH_ALL }),
      await asUser('DELETE', '/v1/policies?name=p1', t),
      await asUser('DELETE', '/v1/localsids?name=l1', t),
      await asUser('POST', '/v1/counters/reset', t),
      await asUser('PUT', '/v1/localsids', { ...t, body: { ...NEW_SID, sid: 'fd00:1::/48', name: 'l1' } }),
      await asUser('POST', '/v1/reload', t),
    ];
    for (const a of answers) expect(a.status, a.text).toBe(status);
    const after = await snapshot();
    expect(after.policies).toBe(before.policies);
    expect(after.localsids).toBe(before.localsids);
    expect(after.state).toBe(before.state);
    // Not reset: the counters only grew (the namespace may have sent more since).
    expect(after.events).toBeGreaterThanOrEqual(before.events);
    return answers;
  }

  beforeAll(async () => {
    await execa('useradd', ['--no-create-home', '--no-user-group', '--gid', 'nogroup', '--shell', '/usr/sbin/nologin', USER]);
    userMade = true;
    uid = Number((await execa('id', ['-u', USER])).stdout);
    gid = Number((await execa('id', ['-g', USER])).stdout);
    lab = await Lab.create(['auth']);
    await lab.ip('auth', 'link', 'add', IFACE, 'type', 'veth', 'peer', 'name', PEER);
    await lab.ip('auth', 'link', 'set', IFACE, 'up');
    await lab.ip('auth', 'link', 'set', PEER, 'up');
    d = new TestDaemon({ config: '', netns: lab.ns('auth'), instance: `auth${process.pid}` });
    tokenFile = join(d.dir, 'token');
    writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    chmodSync(tokenFile, 0o600);
    d.writeConfig(configText(`    token_file: ${tokenFile}\n`));
    await d.start();
  });

  afterAll(async () => {
    try {
      await d?.cleanup();
    } finally {
      try {
        await lab?.destroy();
      } finally {
        if (userMade) await execa('userdel', [USER], { reject: false });
      }
    }
  });

  it('the user is not root', async () => {
    expect(uid).toBeGreaterThan(0);
    expect(await whoami()).toBe(String(uid));
  });

  it('no token_file, open_reads: reads answer, changes are 403 and change nothing', async () => {
    await restart('    open_reads: true\n');
    const st = await asUser('GET', '/v1/status');
    expect(st.status, st.text).toBe(200);
    expect((st.body as { pid: number }).pid).toBe(d!.pid);
    expect((await asUser('GET', '/v1/policies')).status).toBe(200);
    expect((await asUser('GET', '/metrics')).status).toBe(200);
    const answers = await changesRefused(403);
    for (const a of answers) expect((a.body as { error: string }).error).toMatch(/read-only: it has no daemon\.http\.token_file, and changes over TCP need a token/);
    // A token does not help when none is configured.
    await changesRefused(403, TOKEN);
  });

  it('token_file, no open_reads: without the token everything is 401; with it the same user changes the tables', async () => {
    await restart(`    token_file: ${tokenFile}\n`);
    for (const path of ['/v1/status', '/v1/policies', '/v1/counters', '/metrics']) {
      const r = await asUser('GET', path);
      expect(r.status, `${path}: ${r.text}`).toBe(401);
    }
    await changesRefused(401);
    await changesRefused(401, TOKEN.replace(/.$/, '0'));
    // With the token: add, delete, reset.
    const add = await asUser('POST', '/v1/localsids', { token: TOKEN, body: NEW_SID });
    expect(add.status, add.text).toBe(201);
    expect((await d!.api('GET', '/v1/localsids')).text).toContain('"name":"new-sid"');
    const del = await asUser('DELETE', '/v1/localsids?name=new-sid', { token: TOKEN });
    expect(del.status, del.text).toBe(200);
    await traffic();
    expect(eventPackets((await d!.api('GET', '/v1/counters?rules=none')).body)).toBeGreaterThan(0);
    const reset = await asUser('POST', '/v1/counters/reset', { token: TOKEN });
    expect(reset.status, reset.text).toBe(200);
    expect((await asUser('GET', '/v1/status', { token: TOKEN })).status).toBe(200);
  });

  it('token_file and open_reads: reads answer without the token, changes still want it', async () => {
    await restart(`    token_file: ${tokenFile}\n    open_reads: true\n`);
    expect((await asUser('GET', '/v1/policies')).status).toBe(200);
    expect((await asUser('GET', '/v1/counters?rules=none')).status).toBe(200);
    await changesRefused(401);
    const add = await asUser('POST', '/v1/localsids', { token: TOKEN, body: NEW_SID });
    expect(add.status, add.text).toBe(201);
    expect((await asUser('DELETE', '/v1/localsids?name=new-sid', { token: TOKEN })).status).toBe(200);
  });

  it('loopback without token_file or open_reads (the old example) does not start, and says why', async () => {
    await d!.stop();
    d!.writeConfig(configText(''));
    const r = await d!.startFailing();
    expect(r.exitCode, r.output).toBe(2);
    expect(r.output).toMatch(/daemon\.http\.token_file: required: changes over TCP need a bearer token, on loopback \(127\.0\.0\.1:9180\) too/);
    expect(r.output).toMatch(/open_reads: true/);
  });

  it('a token file readable by group or others is refused at start', async () => {
    await d!.stop();
    d!.writeConfig(configText(`    token_file: ${tokenFile}\n`));
    for (const mode of [0o640, 0o604]) {
      chmodSync(tokenFile, mode);
      try {
        const r = await d!.startFailing();
        expect(r.exitCode, r.output).toBe(2);
        expect(r.output).toContain(`daemon.http.token_file: ${tokenFile} has mode 0${mode.toString(8)}`);
        expect(r.output).toContain(`chmod 600 ${tokenFile}`);
      } finally {
        chmodSync(tokenFile, 0o600);
      }
    }
    // Private again: it starts.
    await d!.start();
    expect((await asUser('GET', '/v1/status', { token: TOKEN })).status).toBe(200);
  });
});
