/**
 * Running vs saved config (issue 15, item 2): one model, no silent loss.
 *
 * - A reload applies the file's own changes since the last load on top of
 *   the running rules: a comment edit keeps every API change; an edit of a
 *   rule an API change touched too is refused, naming the rules, and the
 *   tables (read from the pinned maps, not only the API) stay as they were.
 * - `mup config show` prints the running config with origins; `mup config
 *   save` writes it into the config file, and a restart then gives the same
 *   tables with an empty state file; a crash between the file and the state
 *   file (the old state file left on the saved config) loses and duplicates
 *   nothing.
 * - `mup reload --check` prints the diff and applies nothing; `mup daemon
 *   --check` exits 0 / non-zero without root.
 * - Two daemons (other instances) on one state file: refused, naming the
 *   instance and pid. Every reload, refused or not, is one log line.
 *
 * Daemons in the root namespace with no interfaces, each with its own bpffs,
 * socket and state file (test/helpers/daemon.ts).
 */
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { MUP_BIN, TestDaemon } from './helpers/daemon.js';

const isRoot = process.getuid?.() === 0;

const HEAD = 'settings: { max_policies: 64, max_localsids: 16 }\n';
const pol = (name: string, i: number, hop = 64): string =>
  `  - { name: ${name}, match: 10.0.${i}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64", hop_limit: ${hop} }\n`;
/** c1..c4 from the file, with a comment above c1. */
const FILE = `${HEAD}policies:\n  # the first gNB\n${pol('c1', 1)}${pol('c2', 2)}${pol('c3', 3)}${pol('c4', 4)}`;
const apiPolicy = (name: string, i: number, hop = 64): Record<string, unknown> => ({
  name,
  match: `10.0.${i}.0/24`,
  sr_prefix: '2001:db8:1::/48',
  src_prefix: '2001:db8:ff::/64',
  hop_limit: hop,
});

describe.skipIf(!isRoot)('running vs saved config', () => {
  let d: TestDaemon | undefined;
  const extra: TestDaemon[] = [];
  afterEach(async () => {
    await d?.cleanup();
    d = undefined;
    for (const x of extra.splice(0)) await x.cleanup();
  });

  /** The pinned tables as the kernel has them (bpftool), policies and local SIDs. */
  const maps = async (): Promise<string> => {
    const dump = async (m: string): Promise<string> => (await execa('bpftool', ['-j', 'map', 'dump', 'pinned', `${d!.bpffs}/mup/${d!.instance}/${m}`])).stdout;
    return `${await dump('policies')}\n${await dump('localsids')}`;
  };
  const entries = async (): Promise<number> => (JSON.parse((await maps()).split('\n')[0]!) as unknown[]).length;
  const policies = async (): Promise<{ name: string; origin: string; hop_limit: number }[]> => {
    const r = await d!.api('GET', '/v1/policies');
    expect(r.status).toBe(200);
    return (r.body as { policies: { name: string; origin: string; hop_limit: number }[] }).policies;
  };
  const names = async (): Promise<string[]> => (await policies()).map((p) => `${p.name}:${p.origin}:${p.hop_limit}`);
  const add = async (name: string, i: number, hop = 64): Promise<void> => {
    const r = await d!.api('POST', '/v1/policies', { body: apiPolicy(name, i, hop) });
    expect(r.status, r.text).toBe(201);
  };
  const replace = async (name: string, i: number, hop: number): Promise<void> => {
    const r = await d!.api('PUT', '/v1/policies', { body: apiPolicy(name, i, hop) });
    expect(r.status, r.text).toBe(200);
  };

  it('a comment edit keeps every API change; an edit of another rule applies on top of them; a restart on an edited file too', async () => {
    d = new TestDaemon({ config: FILE });
    await d.start();
    const n0 = await entries();
    await add('a1', 11);
    await replace('c2', 2, 32);
    const del = await d.api('DELETE', '/v1/policies?name=c3');
    expect(del.status, del.text).toBe(200);
    expect(await entries(), 'the API changes are in the maps').toBe(n0);
    const running = await maps();
    const want = ['c1:config:64', 'c2:api:32', 'c4:config:64', 'a1:api:64'];
    expect(await names()).toEqual(want);

    // A pure comment edit.
    d.writeConfig(`${FILE}# just a comment\n`);
    const r = await d.cli(['reload']);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/3 API changes kept/);
    expect(await names(), 'every API change kept').toEqual(want);
    expect(await maps(), 'the tables as they were').toBe(running);

    // The file changes another rule (c4's hop limit) and adds one: applied, the API changes stay.
    d.writeConfig(`${FILE.replace(pol('c4', 4), pol('c4', 4, 10))}${pol('c5', 5)}# just a comment\n`);
    const r2 = await d.cli(['reload']);
    expect(r2.exitCode, r2.stderr).toBe(0);
    expect(r2.stdout).toMatch(/1 added, 1 replaced, 0 deleted/);
    expect(await names()).toEqual(['c1:config:64', 'c2:api:32', 'c4:config:10', 'c5:config:64', 'a1:api:64']);
    const after = await maps();

    // Stopped, the file edited once more (a comment), started: the API changes are still there.
    expect(await d.stop()).toBe(0);
    d.writeConfig(`# edited while the daemon was down\n${readFileSync(d.configPath, 'utf8')}`);
    await d.start();
    expect(await names()).toEqual(['c1:config:64', 'c2:api:32', 'c4:config:10', 'c5:config:64', 'a1:api:64']);
    expect(await maps()).toBe(after);
    expect(d.log).not.toMatch(/dropped/);
  });

  it('refuses an edit of a rule an API change touched too, naming the rules; nothing changes; a file that agrees absorbs the change', async () => {
    d = new TestDaemon({ config: FILE });
    await d.start();
    await add('a1', 11);
    await replace('c2', 2, 32);
    const before = await maps();
    const want = await names();

    // The file changes c2 (which the API replaced) and adds a policy on a1's match, plus an unrelated change to c4.
    d.writeConfig(`${FILE.replace(pol('c2', 2), pol('c2', 2, 16)).replace(pol('c4', 4), pol('c4', 4, 10))}${pol('f1', 11)}`);
    const r = await d.cli(['reload']);
    expect(r.exitCode).not.toBe(0);
    expect(r.stderr).toMatch(/reload refused/);
    expect(r.stderr).toMatch(/policy c2 \(10\.0\.2\.0\/24\)/);
    expect(r.stderr).toMatch(/policy a1 \/ f1 \(10\.0\.11\.0\/24\)/);
    expect(r.stderr).toMatch(/Nothing was changed/);
    expect(await maps(), 'the tables as they were (c4 not changed either)').toBe(before);
    expect(await names()).toEqual(want);
    // SIGHUP: the same refusal, one log line.
    const lines = (): string[] => d!.log.split('\n').filter((l) => /"msg":"reload/.test(l));
    const n = lines().length;
    process.kill(d.pid!, 'SIGHUP');
    const deadline = Date.now() + 15_000;
    while (lines().length === n && Date.now() < deadline) await new Promise((res) => setTimeout(res, 50));
    expect(lines().slice(n)).toHaveLength(1);
    expect(lines().at(-1)).toMatch(/"reason":"SIGHUP".*reload refused.*policy c2/);
    expect(await maps()).toBe(before);
    // The API's refusals are logged as well (three failed mup reloads left no log line before).
    expect(d.log).toMatch(/"reason":"api".*"error":"reload refused: the config file's edit and API changes touch the same rules/);

    // The file now says what the API said (c2 hop 32, a1 as added): applied; those changes are config now.
    d.writeConfig(`${FILE.replace(pol('c2', 2), pol('c2', 2, 32))}${pol('a1', 11)}`);
    const ok = await d.cli(['reload']);
    expect(ok.exitCode, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/2 API changes are in the file now/);
    expect(await names()).toEqual(['c1:config:64', 'c2:config:32', 'c3:config:64', 'c4:config:64', 'a1:config:64']);
    expect(await maps()).toBe(before);
    const state = readFileSync(d.stateFile, 'utf8').trim().split('\n');
    expect(state, 'the state file holds no change any more').toHaveLength(1);
  });

  it('config show prints the running config with origins; config save writes it (comments kept), a restart gives the same tables', async () => {
    d = new TestDaemon({ config: FILE });
    await d.start();
    await add('a1', 11);
    await replace('c2', 2, 32);
    expect((await d.api('DELETE', '/v1/policies?name=c3')).status).toBe(200);
    const running = await maps();
    const want = await names();

    const show = await d.cli(['config', 'show']);
    expect(show.exitCode, show.stderr).toBe(0);
    expect(show.stdout).toMatch(/# the first gNB\n\s*# origin: config\n\s*- \{ name: c1,/);
    expect(show.stdout).toMatch(/# origin: api\n\s*- \{ name: c2,.*hop_limit: 32/);
    expect(show.stdout).toMatch(/# origin: api\n\s*- \{ name: a1,/);
    expect(show.stdout).not.toMatch(/name: c3/);
    // It loads as it is.
    const copy = join(d.dir, 'shown.yaml');
    writeFileSync(copy, show.stdout);
    const chk = await execa('node', [MUP_BIN, 'daemon', '--check', '--config', copy, '--state-file', join(d.dir, 'none.json')], { reject: false });
    expect(chk.exitCode, chk.stderr).toBe(0);
    expect(chk.stdout).toMatch(/valid \(4 policies/);

    // --to another file: a copy; the daemon's file and state unchanged.
    const fileBefore = readFileSync(d.configPath, 'utf8');
    const to = await d.cli(['config', 'save', '--to', join(d.dir, 'copy.yaml')]);
    expect(to.exitCode, to.stderr).toBe(0);
    expect(readFileSync(join(d.dir, 'copy.yaml'), 'utf8')).toMatch(/name: a1/);
    expect(readFileSync(d.configPath, 'utf8')).toBe(fileBefore);

    const save = await d.cli(['config', 'save']);
    expect(save.exitCode, save.stderr).toBe(0);
    expect(save.stdout).toMatch(/3 API changes are config now/);
    const saved = readFileSync(d.configPath, 'utf8');
    expect(saved).toMatch(/# the first gNB/);
    expect(saved).not.toMatch(/origin:/);
    expect(readFileSync(d.stateFile, 'utf8').trim().split('\n'), 'state file compacted to no change').toHaveLength(1);
    expect(await names()).toEqual(want.map((x) => x.replace(':api:', ':config:')));
    expect(await maps()).toBe(running);

    // Restart: the same tables, all from the file.
    expect(await d.stop()).toBe(0);
    await d.start();
    expect(await names()).toEqual(want.map((x) => x.replace(':api:', ':config:')));
    expect(await maps()).toBe(running);

    // A save over a file edited since it was loaded is refused (it would undo the edit).
    await add('a2', 12);
    d.writeConfig(`${saved}# edited, not reloaded\n`);
    const refused = await d.cli(['config', 'save']);
    expect(refused.exitCode).not.toBe(0);
    expect(refused.stderr).toMatch(/was edited since the daemon loaded it/);
    expect(readFileSync(d.configPath, 'utf8')).toBe(`${saved}# edited, not reloaded\n`);
  });

  it('a crash between writing the config file and emptying the state file loses nothing and duplicates nothing', async () => {
    d = new TestDaemon({ config: FILE });
    await d.start();
    await add('a1', 11);
    await replace('c2', 2, 32);
    expect((await d.api('DELETE', '/v1/policies?name=c3')).status).toBe(200);
    const running = await maps();
    const want = (await names()).map((x) => x.replace(':api:', ':config:'));
    // The state file as it is before the save: what a crash right after step 1 leaves.
    const oldState = join(d.dir, 'state.before-save');
    copyFileSync(d.stateFile, oldState);
    expect((await d.cli(['config', 'save'])).exitCode).toBe(0);
    expect(await d.stop('SIGKILL')).not.toBe(0);
    copyFileSync(oldState, d.stateFile);
    await d.start();
    expect(await names(), 'each rule once, from the file').toEqual(want);
    expect(await maps()).toBe(running);
    expect(readFileSync(d.stateFile, 'utf8').trim().split('\n'), 'the stale changes absorbed and compacted away').toHaveLength(1);
  });

  it('reload --check prints the diff, one line per rule, and applies nothing', async () => {
    d = new TestDaemon({ config: FILE });
    await d.start();
    await add('a1', 11);
    const before = await maps();
    const want = await names();
    const stateBefore = readFileSync(d.stateFile, 'utf8');
    d.writeConfig(`${FILE.replace(pol('c4', 4), pol('c4', 4, 10)).replace(pol('c3', 3), '')}${pol('c5', 5)}`);
    const r = await d.cli(['reload', '--check']);
    expect(r.exitCode, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toContain('~ policy c4: hop_limit 64 -> 10');
    expect(lines).toContain('- policy c3');
    expect(lines.find((l) => l.startsWith('+ policy c5 '))).toMatch(/^\+ policy c5 \{"name":"c5","match":"10\.0\.5\.0\/24",/);
    expect(lines.filter((l) => /^[-+~] /.test(l)), 'one line per changed rule').toHaveLength(3);
    expect(r.stdout).toMatch(/nothing applied/);
    expect(await maps()).toBe(before);
    expect(await names()).toEqual(want);
    expect(readFileSync(d.stateFile, 'utf8')).toBe(stateBefore);
    // Invalid: non-zero, the file and line named, nothing applied.
    d.writeConfig(`${FILE}  - { name: bad, match: 10.0.99.0/33, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n`);
    const bad = await d.cli(['reload', '--check']);
    expect(bad.exitCode).not.toBe(0);
    expect(bad.stderr).toMatch(new RegExp(`${d.configPath}:\\d+: policies\\[4\\]`));
    expect(await maps()).toBe(before);
    // Then applied for real: what --check said.
    d.writeConfig(`${FILE.replace(pol('c4', 4), pol('c4', 4, 10)).replace(pol('c3', 3), '')}${pol('c5', 5)}`);
    expect((await d.cli(['reload'])).exitCode).toBe(0);
    expect(await names()).toEqual(['c1:config:64', 'c2:config:64', 'c4:config:10', 'c5:config:64', 'a1:api:64']);
  });

  it('a restart on a file edited (while down) in a rule an API change touched is refused, naming it, the data plane left running', async () => {
    d = new TestDaemon({ config: FILE });
    await d.start();
    await replace('c2', 2, 32);
    const before = await maps();
    expect(await d.stop()).toBe(0);
    d.writeConfig(FILE.replace(pol('c2', 2), pol('c2', 2, 16)));
    const chk = await execa('node', [MUP_BIN, 'daemon', '--check', '--config', d.configPath, '--state-file', d.stateFile], { reject: false });
    expect(chk.exitCode).not.toBe(0);
    expect(chk.stderr).toMatch(/policy c2 \(10\.0\.2\.0\/24\)/);
    const r = await d.startFailing();
    expect(r.exitCode).not.toBe(0);
    expect(r.output).toMatch(/both change the same rules: policy c2 \(10\.0\.2\.0\/24\)/);
    expect(await maps(), 'the pinned tables as they were').toBe(before);
  });

  it('two daemons of other instances on one state file: the second is refused, naming the first instance and pid', async () => {
    d = new TestDaemon({ config: FILE, instance: `cfga${process.pid}` });
    await d.start();
    await add('a1', 11);
    const state = readFileSync(d.stateFile, 'utf8');
    const other = new TestDaemon({ config: FILE, instance: `cfgb${process.pid}`, args: ['--state-file', d.stateFile] });
    extra.push(other);
    const r = await other.startFailing();
    expect(r.exitCode).not.toBe(0);
    expect(r.output).toMatch(new RegExp(`state file ${d.stateFile} is used by instance ${d.instance}, the daemon with pid ${d.pid}`));
    expect(readFileSync(d.stateFile, 'utf8')).toBe(state);
    expect(await names()).toContain('a1:api:64');
  });
});

describe('mup daemon --check (no daemon, no root)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mup-check-test-'));
  chmodSync(dir, 0o755);
  const run = async (config: string, asNobody: boolean): Promise<{ exitCode: number; stdout: string; stderr: string }> => {
    const file = join(dir, 'mup.yaml');
    writeFileSync(file, config);
    chmodSync(file, 0o644);
    const args = [MUP_BIN, 'daemon', '--check', '--config', file, '--state-file', join(dir, 'none.state.json')];
    const r = asNobody && isRoot ? await execa('setpriv', ['--reuid', 'nobody', '--regid', 'nogroup', '--clear-groups', 'node', ...args], { reject: false }) : await execa('node', args, { reject: false });
    return { exitCode: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
  };
  afterEach(() => undefined);

  it('exits 0 on a valid file (as nobody), non-zero with file:line and key path on a bad one', async () => {
    try {
      const ok = await run(`${FILE}interfaces:\n  - { name: nosuch0, xdp: generic }\n`, true);
      expect(ok.exitCode, ok.stderr).toBe(0);
      expect(ok.stdout).toMatch(/valid \(4 policies, 0 local SIDs, 0 sessions, 1 interfaces\)/);
      const bad = await run(`${FILE}  - { name: bad, match: 10.0.99.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64", hop_limit: 999 }\n`, true);
      expect(bad.exitCode).not.toBe(0);
      expect(bad.stderr).toMatch(/mup\.yaml:\d+: policies\[4\]\.hop_limit/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
