/**
 * The packaging's scripts, each run as it is, on scratch copies and in
 * scratch directories (nothing of this machine's /var/lib, git config or
 * checkout is touched). The .deb itself: test/package.test.ts.
 */
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = new URL('..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'mup-pkgscripts-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The environment of a clean shell: no git config but the repository's own (HOME is a scratch dir). */
function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const home = join(dir, 'home');
  mkdirSync(home, { recursive: true });
  return { PATH: process.env['PATH']!, HOME: home, GIT_CONFIG_NOSYSTEM: '1', GIT_CEILING_DIRECTORIES: dir, ...extra };
}

/** A git repository in the scratch dir holding scripts/build-info.sh and a package.json of version 0.1.0. */
async function repoWithBuildInfo(name: string): Promise<{ repo: string; git: (args: string[], date?: string) => Promise<string> }> {
  const repo = join(dir, name);
  mkdirSync(join(repo, 'scripts'), { recursive: true });
  cpSync(join(ROOT, 'scripts/build-info.sh'), join(repo, 'scripts/build-info.sh'));
  writeFileSync(join(repo, 'package.json'), '{"name": "srv6-mup", "version": "0.1.0"}\n');
  writeFileSync(join(repo, 'file'), 'a\n');
  const git = async (args: string[], date = '2026-01-02T03:04:05Z'): Promise<string> =>
    (
      await execa('git', args, {
        cwd: repo,
        extendEnv: false,
        env: cleanEnv({ GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@example.invalid', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@example.invalid', GIT_AUTHOR_DATE: date, GIT_COMMITTER_DATE: date }),
      })
    ).stdout.trim();
  await git(['init', '-q']);
  await git(['add', '.']);
  await git(['commit', '-q', '-m', 'first']);
  return { repo, git };
}

async function debVersion(repo: string): Promise<string> {
  const r = await execa('bash', [join(repo, 'scripts/build-info.sh'), '--deb-version'], { extendEnv: false, env: cleanEnv(), reject: false });
  expect(r.stderr).toBe('');
  expect(r.exitCode).toBe(0);
  return r.stdout;
}

async function dpkgLess(a: string, b: string): Promise<boolean> {
  return (await execa('dpkg', ['--compare-versions', a, 'lt', b], { reject: false })).exitCode === 0;
}

describe('scripts/build-info.sh', () => {
  it('names the commit in a checkout owned by another user (git\'s "dubious ownership"), as `sudo make deb` meets it', async () => {
    const { repo, git } = await repoWithBuildInfo('foreign');
    const head = await git(['rev-parse', 'HEAD']);
    // Owned by nobody: git run by root refuses the repository unless safe.directory says otherwise,
    // and no global or system git config of this machine does (HOME is a scratch dir, GIT_CONFIG_NOSYSTEM).
    await execa('chown', ['-R', '65534:65534', repo]);
    const plain = await execa('git', ['rev-parse', 'HEAD'], { cwd: repo, extendEnv: false, env: cleanEnv(), reject: false });
    expect(plain.stderr).toContain('dubious ownership');
    const r = await execa('bash', [join(repo, 'scripts/build-info.sh')], { extendEnv: false, env: cleanEnv(), reject: false });
    expect(r.stderr).toBe('');
    expect(r.exitCode).toBe(0);
    expect(JSON.parse(readFileSync(join(repo, 'build/build-info.json'), 'utf8'))).toEqual({ commit: head });
    expect(await debVersion(repo)).toMatch(new RegExp(`^0\\.1\\.0\\+git20260102030405\\.${head.slice(0, 12)}$`));
    // The user's git config is left as it was: nothing written into HOME.
    expect(() => readFileSync(join(dir, 'home/.gitconfig'))).toThrow();
  });

  it('--deb-version: package.json\'s version + the UTC commit date and commit; later commits and dirty trees sort upward (dpkg)', async () => {
    const { repo, git } = await repoWithBuildInfo('order');
    const a = await git(['rev-parse', 'HEAD']);
    const va = await debVersion(repo);
    // The same commit gives the same version (commit date, not build time).
    expect(await debVersion(repo)).toBe(va);
    expect(va).toBe(`0.1.0+git20260102030405.${a.slice(0, 12)}`);
    // One second later, written in another time zone: the version is in UTC.
    writeFileSync(join(repo, 'file'), 'b\n');
    await git(['commit', '-q', '-am', 'second'], '2026-01-02T12:04:06+09:00');
    const b = await git(['rev-parse', 'HEAD']);
    const vb = await debVersion(repo);
    expect(vb).toBe(`0.1.0+git20260102030406.${b.slice(0, 12)}`);
    expect(await dpkgLess(va, vb)).toBe(true);
    expect(await dpkgLess(vb, va)).toBe(false);
    // A tracked file changed: above its commit's clean build, below the next commit.
    writeFileSync(join(repo, 'file'), 'c\n');
    const vd = await debVersion(repo);
    expect(vd).toMatch(new RegExp(`^0\\.1\\.0\\+git20260102030406\\.${b.slice(0, 12)}\\.dirty\\d{14}$`));
    expect(await dpkgLess(vb, vd)).toBe(true);
    await git(['commit', '-q', '-am', 'third'], '2026-01-03T00:00:00Z');
    const vc = await debVersion(repo);
    expect(await dpkgLess(vd, vc)).toBe(true);
    // The build-info.json of the same tree carries the same commit.
    await execa('bash', [join(repo, 'scripts/build-info.sh')], { extendEnv: false, env: cleanEnv() });
    expect(JSON.parse(readFileSync(join(repo, 'build/build-info.json'), 'utf8'))).toEqual({ commit: await git(['rev-parse', 'HEAD']) });
  });

  it('--deb-version outside git: refuses, saying why (a version without the commit would not sort)', async () => {
    const src = join(dir, 'no-git');
    mkdirSync(join(src, 'scripts'), { recursive: true });
    cpSync(join(ROOT, 'scripts/build-info.sh'), join(src, 'scripts/build-info.sh'));
    writeFileSync(join(src, 'package.json'), '{"version": "0.1.0"}\n');
    const r = await execa('bash', [join(src, 'scripts/build-info.sh'), '--deb-version'], { extendEnv: false, env: cleanEnv(), reject: false });
    expect(r.exitCode).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('git');
  });
});

describe('packaging/debian/postrm', () => {
  /**
   * postrm with `args`, in a private mount namespace whose /var/lib is `varlib` (and /run a
   * tmpfs: no systemd there, whatever this machine runs), as dpkg runs it: sh, set -e inside.
   */
  function postrm(varlib: string, ...args: string[]) {
    const script = join(ROOT, 'packaging/debian/postrm');
    return execa('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', `mount --bind ${varlib} /var/lib && mount -t tmpfs tmpfs /run && exec sh ${script} "$@"`, 'postrm', ...args], { reject: false });
  }

  it('purge removes /var/lib/mup (the API changes a reinstall would bring back), also when it is already gone; remove keeps it', async () => {
    const varlib = join(dir, 'varlib');
    mkdirSync(join(varlib, 'mup'), { recursive: true });
    mkdirSync(join(varlib, 'other'));
    writeFileSync(join(varlib, 'mup/default.state.json'), '{}\n');
    const removed = await postrm(varlib, 'remove');
    expect(removed.exitCode, removed.stderr).toBe(0);
    expect(readFileSync(join(varlib, 'mup/default.state.json'), 'utf8')).toBe('{}\n');
    const purged = await postrm(varlib, 'purge');
    expect(purged.exitCode, purged.stderr).toBe(0);
    expect(purged.stderr).toBe('');
    expect(() => readFileSync(join(varlib, 'mup/default.state.json'))).toThrow();
    expect(existsSync(join(varlib, 'mup'))).toBe(false);
    expect(existsSync(join(varlib, 'other'))).toBe(true);
    const again = await postrm(varlib, 'purge');
    expect(again.exitCode, again.stderr).toBe(0);
  });
});

describe('packaging/install.sh', () => {
  it('says what failed when `npm ls` does (a runtime dependency missing from node_modules)', async () => {
    const src = join(dir, 'install-src');
    for (const d of ['packaging', 'bin', 'bpf', 'dist/cli', 'build', 'native/build/Release']) mkdirSync(join(src, d), { recursive: true });
    cpSync(join(ROOT, 'packaging/install.sh'), join(src, 'packaging/install.sh'));
    for (const f of ['bin/mup.js', 'bpf/cflags', 'dist/cli/main.js', 'build/mup.bpf.o', 'build/build-info.json', 'native/build/Release/mup_tstamp.node']) writeFileSync(join(src, f), '');
    writeFileSync(join(src, 'package.json'), '{"name": "srv6-mup", "version": "0.1.0", "dependencies": {"js-yaml": "^4.3.2"}}\n');
    // npm's cache (and the debug log it writes on an error) in the scratch dir.
    const r = await execa('bash', [join(src, 'packaging/install.sh'), '--destdir', join(dir, 'install-dest')], { reject: false, cwd: dir, env: { npm_config_cache: join(dir, 'npm-cache') } });
    expect(r.exitCode).not.toBe(0);
    expect(r.stderr).toContain('install.sh: npm ls --omit=dev failed');
    expect(r.stderr).toContain('js-yaml');
  });
});

describe('scripts/deps.sh', () => {
  /** deps.sh with no Debian packages to check, in a scratch dir, with `bin` as the whole PATH. */
  function deps(cwd: string, bin: string) {
    return execa('/bin/bash', [join(ROOT, 'scripts/deps.sh')], { reject: false, cwd, extendEnv: false, env: { PATH: bin, HOME: join(dir, 'home') } });
  }

  it('without Node >= 20: says so and how to get it (NodeSource, as the README), before anything else', async () => {
    const cwd = join(dir, 'deps-cwd');
    const none = join(dir, 'deps-none');
    const old = join(dir, 'deps-old');
    for (const d of [cwd, none, old]) mkdirSync(d, { recursive: true });
    // Debian 12's own nodejs.
    writeFileSync(join(old, 'node'), '#!/bin/sh\necho v18.19.0\n');
    writeFileSync(join(old, 'npm'), '#!/bin/sh\necho "npm must not run" >&2; exit 1\n');
    chmodSync(join(old, 'node'), 0o755);
    chmodSync(join(old, 'npm'), 0o755);
    for (const [bin, found] of [[none, 'no node'], [old, 'v18.19.0']] as const) {
      const r = await deps(cwd, bin);
      expect(r.exitCode, r.stderr).not.toBe(0);
      expect(r.stdout).toBe('');
      expect(r.stderr).toContain(found);
      expect(r.stderr).toContain('curl -fsSL https://deb.nodesource.com/setup_20.x | bash -');
      expect(r.stderr).not.toContain('npm must not run');
    }
    expect(readFileSync(join(ROOT, 'README.md'), 'utf8')).toContain('curl -fsSL https://deb.nodesource.com/setup_20.x | bash -');
  });

  it('with this machine\'s Node (>= 20) and node_modules in place: nothing to do', async () => {
    const cwd = join(dir, 'deps-ok');
    mkdirSync(join(cwd, 'node_modules'), { recursive: true });
    const node = (await execa('sh', ['-c', 'command -v node'])).stdout.trim();
    const r = await deps(cwd, node.slice(0, node.lastIndexOf('/')));
    expect(r.stderr).toBe('');
    expect(r.exitCode).toBe(0);
  });
});
