/**
 * Issue 15, items 3-5: the API and CLI for controllers and operators.
 *
 * One real daemon (bin/mup.js) in a namespace this test makes, on a veth,
 * with the unix socket and a loopback HTTP listener (write token and
 * read-only token). Checks:
 * - POST /v1/batch: one bad operation among 10,000 changes nothing (the
 *   kernel's policy map read back with bpftool, the state file byte for
 *   byte), 422 naming its index and key path; a conflict is 409; 10,000
 *   good ones land in the map and as ONE state-file record; add, replace
 *   and delete in one batch; `mup apply -f` (YAML, and stdin);
 * - every local SID behaviour is reachable by CLI options (GTP6 without
 *   --json-body);
 * - the read-only token reads and scrapes, never writes (403 read_only_token);
 * - every error answer has one shape: {"error": string, "code": one of the
 *   documented codes, ...};
 * - /v1/health and `mup status` exit codes: 0 healthy, 1 degraded (an
 *   interface of the config not attached), 3 no daemon, 4 cannot tell;
 * - rule changes are logged with who made them (the unix peer's uid);
 * - `mup teardown` refuses while the daemon runs (naming its pid; pins
 *   untouched), refuses an unprivileged user clearly (a user this test
 *   creates and removes), and --force stops the daemon then tears down.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../src/daemon/api.js';
import { LAYOUTS } from '../src/dataplane/codec.js';
import { closeFd, mapNextKey, objGet } from '../src/dataplane/libbpf.js';
import { cleanupAll, MUP_BIN, TestDaemon, type ApiAnswer } from './helpers/daemon.js';
import { Lab } from './helpers/netns.js';

const isRoot = process.getuid?.() === 0;
const IFACE = 'ap0';
const PORT = 9183;
const WRITE_TOKEN = 'c0ffee11'.repeat(4);
const READ_TOKEN = 'reade7ab'.repeat(4);
const USER = `mupa-${process.pid}`;

const SRC = '2001:db8:ffff::/64';
const baseConfig = (extraIface = ''): string => `
settings: { max_policies: 16384, max_localsids: 64 }
interfaces:
  - { name: ${IFACE}, xdp: native }
${extraIface}daemon:
  http: { listen: "127.0.0.1:${PORT}", token_file: TOKENFILE, read_token_file: READTOKENFILE }
policies:
  - { name: p1, match: 10.1.0.0/16, sr_prefix: "2001:db8:1::/48", src_prefix: "${SRC}" }
localsids:
  - { name: l1, sid: "fd00:1::/48", src_prefix_len: 64 }
`;

/** Policy i of a generated batch: 10.100.0.0/24 + i. */
const policyAt = (i: number, name = `b${i}`): Record<string, unknown> => ({
  name,
  match: `10.${100 + (i >> 8)}.${i & 255}.0/24`,
  sr_prefix: '2001:db8:b::/48',
  src_prefix: SRC,
});

describe.skipIf(!isRoot)('API for controllers: batch, health, scoped tokens, error shape, safe teardown', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;
  let userMade = false;
  let uid = 0;
  let gid = 0;
  let config = '';

  const pinDir = (): string => join(d!.bpffs, 'mup', d!.instance);
  /** Entries of the kernel's policy map, counted key by key (BPF_MAP_GET_NEXT_KEY) on the pinned map. */
  const kernelPolicies = async (): Promise<number> => {
    const fd = objGet(join(pinDir(), 'policies'), 'policies pin');
    try {
      let n = 0;
      for (let k = mapNextKey(fd, null, LAYOUTS.mup_policy_key.size); k !== undefined; k = mapNextKey(fd, k, LAYOUTS.mup_policy_key.size)) n++;
      return n;
    } finally {
      closeFd(fd);
    }
  };
  const stateText = (): string => (existsSync(d!.stateFile) ? readFileSync(d!.stateFile, 'utf8') : '');

  /** curl to the HTTP listener inside the namespace. */
  async function http(method: string, path: string, o: { token?: string; body?: unknown } = {}): Promise<ApiAnswer> {
    const args = ['netns', 'exec', lab!.ns('api'), 'curl', '-sS', '--max-time', '20', '-X', method, '-w', '\n%{http_code}'];
    if (o.token !== undefined) args.push('-H', `Authorization: Bearer ${o.token}`);
    if (o.body !== undefined) args.push('-H', 'Content-Type: application/json', '--data-binary', JSON.stringify(o.body));
    args.push(`http://127.0.0.1:${PORT}${path}`);
    const r = await execa('ip', args, { reject: false, timeout: 25_000 });
    if (r.exitCode !== 0) throw new Error(`curl ${method} ${path}: exit ${r.exitCode}: ${r.stderr}`);
    const cut = r.stdout.lastIndexOf('\n');
    const text = r.stdout.slice(0, cut);
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // /metrics
    }
    return { status: Number(r.stdout.slice(cut + 1)), body, text, headers: {} };
  }

  /** The one error shape: a message, a documented code, and path/index only as their types. */
  function errorShape(a: ApiAnswer, status: number, code: keyof typeof ERROR_CODES): Record<string, unknown> {
    expect(a.status, a.text).toBe(status);
    const b = a.body as Record<string, unknown>;
    expect(typeof b.error, a.text).toBe('string');
    expect((b.error as string).length).toBeGreaterThan(0);
    expect(b.code, a.text).toBe(code);
    expect(Object.keys(ERROR_CODES)).toContain(b.code);
    if ('path' in b) expect(typeof b.path).toBe('string');
    if ('index' in b) expect(Number.isInteger(b.index)).toBe(true);
    return b;
  }

  async function asUser(args: readonly string[]): Promise<{ exitCode: number; stdout: string; stderr: string }> {
    const r = await execa('setpriv', [`--reuid=${uid}`, `--regid=${gid}`, '--clear-groups', '--', 'node', MUP_BIN, ...args], { reject: false, timeout: 30_000 });
    return { exitCode: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
  }

  beforeAll(async () => {
    await execa('useradd', ['--no-create-home', '--no-user-group', '--gid', 'nogroup', '--shell', '/usr/sbin/nologin', USER]);
    userMade = true;
    uid = Number((await execa('id', ['-u', USER])).stdout);
    gid = Number((await execa('id', ['-g', USER])).stdout);
    lab = await Lab.create(['api']);
    await lab.ip('api', 'link', 'add', IFACE, 'type', 'veth', 'peer', 'name', `${IFACE}p`);
    await lab.ip('api', 'link', 'set', IFACE, 'up');
    await lab.ip('api', 'link', 'set', `${IFACE}p`, 'up');
    d = new TestDaemon({ config: '', netns: lab.ns('api'), instance: `api${process.pid}` });
    const tokenFile = join(d.dir, 'token');
    const readTokenFile = join(d.dir, 'read-token');
    writeFileSync(tokenFile, `${WRITE_TOKEN}\n`, { mode: 0o600 });
    writeFileSync(readTokenFile, `${READ_TOKEN}\n`, { mode: 0o600 });
    config = baseConfig().replace('TOKENFILE', tokenFile).replace('READTOKENFILE', readTokenFile);
    d.writeConfig(config);
    await d.start();
  });

  afterAll(async () => {
    try {
      await cleanupAll([d], lab);
    } finally {
      if (userMade) await execa('userdel', [USER], { reject: false });
    }
  });

  it('a healthy daemon: /v1/health 200 ok, mup status exits 0', async () => {
    const h = await d!.api('GET', '/v1/health');
    expect(h.status, h.text).toBe(200);
    expect(h.body).toMatchObject({ status: 'ok', problems: [], checked: { interfaces: 1, kernelKeys: { policies: 1, localsids: 1 } } });
    const s = await d!.cli(['status']);
    expect(s.exitCode, s.stderr).toBe(0);
    expect(s.stdout).toMatch(/health {5}ok/);
  });

  it('an interface of the config not attached: /v1/health 503 degraded, mup status exits 1 and says what', async () => {
    d!.writeConfig(config.replace('interfaces:\n', 'interfaces:\n  - { name: ap9gone, xdp: native }\n'));
    const rl = await d!.api('POST', '/v1/reload');
    expect(rl.status, rl.text).toBe(200);
    const h = await d!.api('GET', '/v1/health');
    expect(h.status, h.text).toBe(503);
    expect(h.body).toMatchObject({ status: 'degraded', problems: [{ code: 'interface_missing' }] });
    const s = await d!.cli(['status']);
    expect(s.exitCode, s.stderr).toBe(1);
    expect(s.stderr).toMatch(/runs degraded: interface ap9gone does not exist/);
    expect(s.stdout).toMatch(/health {5}DEGRADED/);
    const j = await d!.cli(['status', '--json']);
    expect(j.exitCode).toBe(1);
    expect((JSON.parse(j.stdout) as { health: { status: string } }).health.status).toBe('degraded');
    d!.writeConfig(config);
    expect((await d!.api('POST', '/v1/reload')).status).toBe(200);
    expect((await d!.cli(['status'])).exitCode).toBe(0);
  });

  it('a batch with one invalid operation among 10,000 changes nothing: 422 with its index and key path', async () => {
    const before = { map: await kernelPolicies(), state: stateText(), list: (await d!.api('GET', '/v1/policies')).text };
    const ops = Array.from({ length: 10_000 }, (_, i) => ({ op: 'add', policy: policyAt(i) }));
    ops[7777] = { op: 'add', policy: { ...policyAt(7777), sr_prefix: '2001:db8:b::/120' } };
    const r = await d!.api('POST', '/v1/batch', { body: { operations: ops } });
    const b = errorShape(r, 422, 'invalid');
    expect(b.index).toBe(7777);
    expect(b.path).toBe('operations[7777].policy.sr_prefix');
    expect(b.error).toMatch(/^operations\[7777\]/);
    expect(await kernelPolicies(), 'the kernel map is as before').toBe(before.map);
    expect(stateText(), 'the state file is byte-identical').toBe(before.state);
    expect((await d!.api('GET', '/v1/policies')).text).toBe(before.list);
  });

  it('a conflict (add of an existing key, late in the batch) is 409, nothing applied', async () => {
    const before = { map: await kernelPolicies(), state: stateText() };
    const ops = Array.from({ length: 5000 }, (_, i) => ({ op: 'add', policy: policyAt(i) }));
    ops.push({ op: 'add', policy: { match: '10.1.0.0/16', sr_prefix: '2001:db8:1::/48', src_prefix: SRC } });
    const b = errorShape(await d!.api('POST', '/v1/batch', { body: { operations: ops } }), 409, 'exists');
    expect(b.index).toBe(5000);
    expect(b.path).toBe('operations[5000].policy.match');
    const dup = errorShape(
      await d!.api('POST', '/v1/batch', { body: { operations: [{ op: 'add', policy: policyAt(1, 'same') }, { op: 'add', policy: policyAt(2, 'same') }] } }),
      409,
      'name_taken',
    );
    expect(dup.index).toBe(1);
    expect(await kernelPolicies()).toBe(before.map);
    expect(stateText()).toBe(before.state);
  });

  it('10,000 good operations land in the kernel map and as one state-file record', async () => {
    const map = await kernelPolicies();
    const lines = stateText().split('\n').filter((l) => l !== '').length;
    const ops = Array.from({ length: 10_000 }, (_, i) => ({ op: 'add', policy: policyAt(i) }));
    const r = await d!.api('POST', '/v1/batch', { body: { operations: ops } });
    expect(r.status, r.text.slice(0, 500)).toBe(200);
    expect(r.body).toMatchObject({ applied: 10_000, added: 10_000, replaced: 0, deleted: 0 });
    expect((r.body as { results: unknown[] }).results[9999]).toEqual({ index: 9999, op: 'add', kind: 'policy', key: '10.139.15.0/24' });
    expect(await kernelPolicies()).toBe(map + 10_000);
    const after = stateText().split('\n').filter((l) => l !== '');
    // A state file written whole (none before) has its header too.
    expect(after.length).toBe(lines === 0 ? 2 : lines + 1);
    const record = JSON.parse(after.at(-1)!) as { batch: unknown[] };
    expect(record.batch).toHaveLength(10_000);
    const h = await d!.api('GET', '/v1/health');
    expect(h.body).toMatchObject({ status: 'ok', checked: { kernelKeys: { policies: map + 10_000 } } });
  });

  it('add, replace and delete in one batch; deletes by key and by name; mup apply -f takes YAML and stdin', async () => {
    const map = await kernelPolicies();
    const r = await d!.api('POST', '/v1/batch', {
      body: {
        operations: [
          { op: 'replace', policy: { ...policyAt(0), sr_prefix: '2001:db8:c::/48' } },
          { op: 'delete', policy: { match: policyAt(1).match } },
          { op: 'delete', policy: { name: 'b2' } },
          { op: 'add', policy: policyAt(20_001, 'late') },
          { op: 'delete', policy: { name: 'late' } },
        ],
      },
    });
    expect(r.status, r.text).toBe(200);
    expect(r.body).toMatchObject({ applied: 5, added: 1, replaced: 1, deleted: 3 });
    expect(await kernelPolicies()).toBe(map - 2);
    const list = ((await d!.api('GET', '/v1/policies')).body as { policies: { name?: string; sr_prefix?: string }[] }).policies;
    expect(list.find((p) => p.name === 'b0')?.sr_prefix).toBe('2001:db8:c::/48');
    expect(list.some((p) => p.name === 'b1' || p.name === 'b2' || p.name === 'late')).toBe(false);

    const yamlFile = join(d!.dir, 'ops.yaml');
    writeFileSync(yamlFile, `operations:\n  - { op: add, policy: { name: y1, match: 10.250.0.0/24, sr_prefix: "2001:db8:9::/48", src_prefix: "${SRC}" } }\n  - { op: delete, policy: { name: b3 } }\n`);
    const a = await d!.cli(['apply', '-f', yamlFile]);
    expect(a.exitCode, a.stderr).toBe(0);
    expect(a.stdout).toBe('applied 2 operations: 1 added, 0 replaced, 1 deleted');
    const stdin = await execa('node', [MUP_BIN, 'apply', '-f', '-'], {
      reject: false,
      env: { MUP_SOCKET: d!.socket },
      input: JSON.stringify({ operations: [{ op: 'delete', policy: { name: 'y1' } }, { op: 'delete', policy: { name: 'nope' } }] }),
    });
    expect(stdin.exitCode).toBe(2);
    expect(stdin.stderr).toMatch(/operations\[1\]: no policy named "nope" to delete/);
    expect(((await d!.api('GET', '/v1/policies')).body as { policies: { name?: string }[] }).policies.some((p) => p.name === 'y1'), 'nothing applied').toBe(true);
  });

  it('every local SID behaviour through CLI options, no --json-body', async () => {
    const cases = [
      ['--behavior', 'end.m.gtp6.e', '--sid', 'fd00:6e::/64', '--source', '2001:db8:ff::1', '--container', 'never', '--hop-limit', '33', '--mtu', '1400', '--name', 'g6e'],
      ['--behavior', 'end.m.gtp6.d', '--sid', 'fd00:6d::/64', '--source', '2001:db8:ff::1', '--sr-prefix', '2001:db8:b::/48', '--segment', '2001:db8:5::1', '--srh', 'always', '--hop-limit', '40', '--name', 'g6d'],
      ['--behavior', 'end.m.gtp6.d.di', '--sid', 'fd00:6f::/64', '--source', '2001:db8:ff::1', '--sr-prefix', '2001:db8:b::/48', '--name', 'g6di'],
    ];
    for (const args of cases) {
      const r = await d!.cli(['sid', 'add', ...args]);
      expect(r.exitCode, r.stderr).toBe(0);
    }
    const list = ((await d!.api('GET', '/v1/localsids')).body as { localsids: Record<string, unknown>[] }).localsids;
    expect(list.find((l) => l.name === 'g6e')).toMatchObject({ behavior: 'end.m.gtp6.e', source: '2001:db8:ff::1', container: 'never', hop_limit: 33, mtu: 1400 });
    expect(list.find((l) => l.name === 'g6d')).toMatchObject({ behavior: 'end.m.gtp6.d', sr_prefix: '2001:db8:b::/48', segments: ['2001:db8:5::1'], srh: 'always', hop_limit: 40 });
    expect(list.find((l) => l.name === 'g6di')).toMatchObject({ behavior: 'end.m.gtp6.d.di' });
  });

  it('the read-only token reads and scrapes but cannot write; the write token can', async () => {
    expect((await http('GET', '/metrics', { token: READ_TOKEN })).status).toBe(200);
    expect((await http('GET', '/metrics', { token: READ_TOKEN })).text).toMatch(/^# HELP /m);
    expect((await http('GET', '/v1/policies', { token: READ_TOKEN })).status).toBe(200);
    expect((await http('GET', '/v1/health', { token: READ_TOKEN })).status).toBe(200);
    const before = { map: await kernelPolicies(), state: stateText() };
    const add = { name: 'ro', match: '10.251.0.0/24', sr_prefix: '2001:db8:9::/48', src_prefix: SRC };
    errorShape(await http('POST', '/v1/policies', { token: READ_TOKEN, body: add }), 403, 'read_only_token');
    errorShape(await http('POST', '/v1/batch', { token: READ_TOKEN, body: { operations: [{ op: 'add', policy: add }] } }), 403, 'read_only_token');
    errorShape(await http('DELETE', '/v1/policies?name=p1', { token: READ_TOKEN }), 403, 'read_only_token');
    errorShape(await http('POST', '/v1/counters/reset', { token: READ_TOKEN }), 403, 'read_only_token');
    errorShape(await http('GET', '/metrics'), 401, 'unauthorized');
    errorShape(await http('GET', '/metrics', { token: 'x'.repeat(32) }), 401, 'unauthorized');
    expect(await kernelPolicies()).toBe(before.map);
    expect(stateText()).toBe(before.state);
    const ok = await http('POST', '/v1/policies', { token: WRITE_TOKEN, body: add });
    expect(ok.status, ok.text).toBe(201);
    expect(await kernelPolicies()).toBe(before.map + 1);
    expect(d!.log).toMatch(/"by":"token:write[^"]*".*"msg":"rule added"|"msg":"rule added".*"by":"token:write/);
  });

  it('every error answer has the one shape with a documented code', async () => {
    errorShape(await d!.api('GET', '/v1/nothing'), 404, 'not_found');
    errorShape(await d!.api('PATCH', '/v1/policies'), 405, 'method_not_allowed');
    errorShape(await d!.api('POST', '/v1/policies', { raw: '{}', headers: { 'content-type': 'text/plain' } }), 415, 'unsupported_media_type');
    errorShape(await d!.api('POST', '/v1/policies', { raw: '{"match": ' }), 400, 'malformed');
    errorShape(await d!.api('POST', '/v1/policies', { raw: '{"match": "10.9.0.0/16", "match": "10.9.0.0/16"}' }), 400, 'malformed');
    const bad = errorShape(await d!.api('POST', '/v1/policies', { body: { match: '10.9.0.0/16', sr_prefix: 'nope', src_prefix: SRC } }), 400, 'invalid');
    expect(bad.path).toBe('sr_prefix');
    errorShape(await d!.api('POST', '/v1/policies', { body: { match: '10.1.0.0/16', sr_prefix: '2001:db8:1::/48', src_prefix: SRC } }), 409, 'exists');
    errorShape(await d!.api('POST', '/v1/policies', { body: { name: 'p1', match: '10.9.0.0/16', sr_prefix: '2001:db8:1::/48', src_prefix: SRC } }), 409, 'name_taken');
    errorShape(await d!.api('DELETE', '/v1/policies?name=nothing'), 404, 'not_found');
    errorShape(await d!.api('GET', '/v1/counters?rules=x'), 400, 'malformed');
    errorShape(await d!.api('POST', '/v1/policies', { raw: 'x'.repeat(70_000) }), 413, 'body_too_large');
    errorShape(await d!.api('POST', '/v1/batch', { body: { operations: 'all' } }), 400, 'malformed');
    errorShape(await d!.api('POST', '/v1/batch', { body: { operations: Array.from({ length: 10_001 }, () => ({})) } }), 400, 'malformed');
    const op = errorShape(await d!.api('POST', '/v1/batch', { body: { operations: [{ op: 'upsert', policy: {} }] } }), 422, 'invalid');
    expect(op.path).toBe('operations[0].op');
    errorShape(await d!.api('POST', '/v1/probe', { body: { nothing: 1 } }), 400, 'invalid');
  });

  it('rule changes are logged with the unix peer uid', async () => {
    const r = await d!.api('DELETE', '/v1/policies?name=ro');
    expect(r.status, r.text).toBe(200);
    const line = d!.log.split('\n').reverse().find((l) => l.includes('"msg":"rule deleted"'));
    expect(line).toBeDefined();
    expect(JSON.parse(line!)).toMatchObject({ key: '10.251.0.0/24', by: expect.stringMatching(/^uid 0 \(pid [0-9]+\)$/) as unknown });
  });

  it('mup status exits 4 when it cannot tell (no permission on the socket)', async () => {
    const r = await asUser(['status', '--socket', d!.socket]);
    expect(r.exitCode, r.stderr).toBe(4);
    expect(r.stderr).toMatch(/cannot tell: permission denied/);
  });

  it('mup teardown refuses an unprivileged user clearly; the pins stay', async () => {
    const pins = readdirSync(pinDir()).sort();
    const r = await asUser(['teardown', '--instance', d!.instance, '--bpffs', d!.bpffs]);
    expect(r.exitCode).not.toBe(0);
    expect(r.stderr).toMatch(/needs root/);
    expect(r.stdout).not.toMatch(/nothing to remove/);
    expect(readdirSync(pinDir()).sort()).toEqual(pins);
  });

  it('mup teardown refuses while the daemon runs, naming its pid; --force stops it, then tears down; then status exits 3', async () => {
    const pins = readdirSync(pinDir()).sort();
    expect(pins.length).toBeGreaterThan(0);
    const args = ['teardown', '--instance', d!.instance, '--bpffs', d!.bpffs, '--netns', lab!.ns('api')];
    const r = await d!.cli(args);
    expect(r.exitCode).not.toBe(0);
    expect(r.stderr).toMatch(new RegExp(`daemon pid ${d!.pid} serves it`));
    expect(readdirSync(pinDir()).sort(), 'nothing removed').toEqual(pins);
    expect((await d!.api('GET', '/v1/health')).status, 'the daemon still serves, healthy').toBe(200);

    const f = await d!.cli([...args, '--force']);
    expect(f.exitCode, f.stderr).toBe(0);
    expect(f.stderr).toMatch(new RegExp(`stopped daemon pid ${d!.pid}`));
    expect(f.stdout).toMatch(/removed/);
    expect(existsSync(pinDir()) ? readdirSync(pinDir()) : []).toEqual([]);
    const link = JSON.parse(await lab!.ip('api', '-j', '-d', 'link', 'show', IFACE)) as { xdp?: unknown }[];
    expect(link[0]?.xdp, 'the interface runs no program').toBeUndefined();
    const s = await d!.cli(['status']);
    expect(s.exitCode, s.stderr).toBe(3);
  });
});
