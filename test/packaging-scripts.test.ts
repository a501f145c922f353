/**
 * The packaging's scripts, each run as it is, on scratch copies and in
 * scratch directories (nothing of this machine's /var/lib, git config or
 * checkout is touched). The .deb itself: test/package.test.ts.
 */
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
    // The user's git config is left as it was: nothing written into HOME.
    expect(() => readFileSync(join(dir, 'home/.gitconfig'))).toThrow();
  });
});
