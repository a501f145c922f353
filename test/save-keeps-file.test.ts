/**
 * `mup config save` writes the file the config path names, as it was: a
 * symlink's target (the rename replaced the link itself, so a config kept
 * in a repository and linked into /etc/mup never got the save, while the
 * state file was emptied), with its mode and owner (a 0664 file of an
 * operators' group came back 0644 root:root). Found in review, session 43.
 *
 * The real Daemon in this process on the compiled object, its pins in a
 * bpffs mounted in a temporary directory; no interface.
 */
import { chmodSync, chownSync, lstatSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { saveTarget, writeFileAtomic } from '../src/daemon/rules.js';
import { inProcDaemonPerTest } from './helpers/inproc-daemon.js';

const isRoot = process.getuid?.() === 0;
const CONFIG = 'settings: { forwarding: tx, max_policies: 8, max_localsids: 8 }\npolicies:\n  - { name: p1, match: 10.1.0.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n';

describe.skipIf(!isRoot)('config save keeps the file it saves into', () => {
  const start = inProcDaemonPerTest();

  it('through a symlink into the file it names, that file keeping its mode 0664 and owner', async () => {
    const run = await start('savefile', CONFIG);
    const d = run.daemon;
    // The config path becomes a link to a file of another owner, group-writable (the same bytes as loaded).
    const repo = join(run.dir, 'repo');
    mkdirSync(repo);
    const real = join(repo, 'mup.yaml');
    renameSync(join(run.dir, 'mup.yaml'), real);
    symlinkSync(real, join(run.dir, 'mup.yaml'));
    chownSync(real, 65534, 65534);
    chmodSync(real, 0o664);
    await d.putRule('policy', { name: 'api1', match: '198.51.100.0/24', sr_prefix: '2001:db8:9::/48', src_prefix: '2001:db8:ff::/64' }, 'add');
    const r = await d.saveConfig();
    expect(r.saved).toBe(1);
    expect(lstatSync(join(run.dir, 'mup.yaml')).isSymbolicLink(), 'the link is still a link').toBe(true);
    expect(readFileSync(real, 'utf8')).toContain('api1');
    const st = statSync(real);
    expect([st.mode & 0o7777, st.uid, st.gid]).toEqual([0o664, 65534, 65534]);
    // A reload of the file through the link finds what runs: nothing to do.
    expect((await d.reload()).configChanged).toBe(false);
  });

  it('not root (config save --to by an operator): a file of another owner is still written, as the writer\'s (review of the day\'s changes)', () => {
    // fchown to keep the owner failed with EPERM where a plain write had worked.
    const dir = join(process.env['TMPDIR'] ?? '/tmp', `mup-saveto-${process.pid}`);
    mkdirSync(dir, { recursive: true, mode: 0o777 });
    try {
      chmodSync(dir, 0o777);
      const f = join(dir, 'shared.yaml');
      writeFileSync(f, 'old\n');
      chownSync(f, 1000, 2000);
      chmodSync(f, 0o666);
      const rules = new URL('../dist/daemon/rules.js', import.meta.url).href;
      const script = `import { saveTarget, writeFileAtomic } from ${JSON.stringify(rules)}; const t = saveTarget(${JSON.stringify(f)}); writeFileAtomic(t.path, 'new\\n', undefined, t.mode, t.owner);`;
      const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { uid: 65534, gid: 65534, encoding: 'utf8' });
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      expect(readFileSync(f, 'utf8')).toBe('new\n');
      expect(statSync(f).mode & 0o777).toBe(0o666);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('writeFileAtomic gives the mode asked whatever the umask; saveTarget of a new path is itself', () => {
    const dir = join(process.env['TMPDIR'] ?? '/tmp', `mup-savetarget-${process.pid}`);
    mkdirSync(dir, { recursive: true });
    const was = process.umask(0o077);
    try {
      const f = join(dir, 'x.yaml');
      writeFileAtomic(f, 'a: 1\n', undefined, 0o664);
      expect(statSync(f).mode & 0o777).toBe(0o664);
      expect(saveTarget(join(dir, 'new.yaml'))).toEqual({ path: join(dir, 'new.yaml'), mode: 0o644 });
    } finally {
      process.umask(was);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

