/**
 * The packages as an operator installs them (docs/install.md): the .deb
 * that packaging/deb.sh (`make deb`) builds, unpacked into a scratch root
 * and laid over /usr and /etc in a private mount namespace (overlayfs: the
 * real system never sees it), so that the unit's paths are the real ones:
 * `mup --version`, `systemd-analyze verify` on the installed unit, the
 * daemon started from the unit's ExecStart with the unit's capability set
 * on veths in a namespace of the test, READY=1 on a NOTIFY_SOCKET the test
 * listens on, a reload through ExecReload, `stats --watch --json | head`.
 * Then the `npm pack` tarball installed with `npm i -g` into a scratch
 * prefix, offline, and run. Needs `make all` first (make test does it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiRequest } from './helpers/daemon.js';
import { Lab, waitFor } from './helpers/netns.js';

const ROOT = new URL('..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'mup-pkg-'));
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
const instance = `pkgt${process.pid}`;

let lab: Lab | undefined;
const children: ChildProcess[] = [];

beforeAll(() => {
  if (!existsSync(join(ROOT, 'dist/cli/main.js'))) throw new Error('dist/ is missing: run `make` (make test builds it)');
});
afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null && c.pid !== undefined) process.kill(c.pid, 'SIGKILL');
  await lab?.destroy();
  rmSync(dir, { recursive: true, force: true });
});

/** `key=value` lines of a unit's [Service] section. */
function unitSettings(text: string): Map<string, string> {
  const m = new Map<string, string>();
  for (const line of text.split('\n')) {
    const kv = /^([A-Za-z]+)=(.*)$/.exec(line);
    if (kv !== null) m.set(kv[1]!, kv[2]!);
  }
  return m;
}

/** `key=value` lines of one section (`Unit`, `Service`) of a unit. */
function unitSection(text: string, section: string): Map<string, string> {
  const at = text.split(/^\[/m).find((s) => s.startsWith(`${section}]`)) ?? '';
  return unitSettings(at);
}

/** The paragraphs of a Debian copyright file (copyright-format 1.0): field -> value, continuation lines joined by \n. */
function paragraphs(text: string): Map<string, string>[] {
  return text.split(/\n\s*\n/).filter((p) => p.trim() !== '').map((p) => {
    const m = new Map<string, string>();
    let key = '';
    for (const line of p.split('\n')) {
      const kv = /^([A-Za-z-]+):\s*(.*)$/.exec(line);
      if (kv !== null) m.set((key = kv[1]!), kv[2]!);
      else m.set(key, `${m.get(key)}\n${line}`);
    }
    return m;
  });
}

/** The modules under a node_modules directory (scoped ones and nested node_modules too), relative to it. */
function modules(nodeModules: string, prefix = ''): string[] {
  const out: string[] = [];
  for (const e of readdirSync(nodeModules)) {
    if (e.startsWith('.')) continue;
    const names = e.startsWith('@') ? readdirSync(join(nodeModules, e)).map((n) => `${e}/${n}`) : [e];
    for (const n of names) {
      out.push(`${prefix}${n}`);
      const nested = join(nodeModules, n, 'node_modules');
      if (existsSync(nested)) out.push(...modules(nested, `${prefix}${n}/node_modules/`));
    }
  }
  return out;
}

/**
 * A shell script that lays the unpacked package (`root`) and an /etc of
 * the test (`etc`) over /usr/bin, /usr/lib, /usr/share/man/man1 and /etc
 * with overlayfs, in the mount namespace that `unshare --mount` gives it.
 */
function overlays(root: string, etc: string): string {
  const layers: [string, string][] = [
    ['/usr/bin', `${root}/usr/bin`],
    // Debian 12 is merged-/usr: the package's /lib is /usr/lib.
    ['/usr/lib', `${root}/usr/lib:${root}/lib`],
    ['/usr/share/man/man1', `${root}/usr/share/man/man1`],
    ['/etc', `${etc}:${root}/etc`],
  ];
  return layers.map(([target, lower]) => `mount -t overlay overlay -o lowerdir=${lower}:${target} ${target}`).join(' && ');
}

function inPackageNs(root: string, etc: string, script: string) {
  return execa('unshare', ['--mount', '--propagation', 'private', 'bash', '-o', 'pipefail', '-c', `${overlays(root, etc)} && ${script}`], { reject: false, timeout: 120_000 });
}

describe('the .deb', () => {
  it('installs mup, the unit and the config; the installed daemon runs from the unit, signals READY=1 and reloads', async () => {
    const built = await execa('bash', [join(ROOT, 'packaging/deb.sh'), '--out', dir], { reject: false });
    expect(built.stderr).toBe('');
    expect(built.exitCode).toBe(0);
    const arch = (await execa('dpkg', ['--print-architecture'])).stdout.trim();
    // The version names the commit (its UTC date first, so later commits sort higher:
    // apt upgrades to a new build); a tree with changes adds .dirty<build time>.
    const git = async (...a: string[]): Promise<string> => (await execa('git', a, { cwd: ROOT })).stdout.trim();
    const committed = new Date(Number(await git('show', '-s', '--format=%ct', 'HEAD')) * 1000).toISOString().replace(/[-:T]/g, '').slice(0, 14);
    const clean = `${pkg.version}+git${committed}.${await git('rev-parse', '--short=12', 'HEAD')}`;
    const deb = built.stdout.trim();
    const version = /^.*\/srv6-mup_(.*)_[^_]*\.deb$/.exec(deb)?.[1] ?? '';
    expect(version.startsWith(clean) && /^(\.dirty\d{14})?$/.test(version.slice(clean.length)), `${version} is ${clean}[.dirty<time>]`).toBe(true);
    expect(deb).toBe(join(dir, `srv6-mup_${version}_${arch}.deb`));
    const info = (await execa('dpkg-deb', ['-I', deb])).stdout;
    expect(info).toMatch(new RegExp(`^ Version: ${version.replace(/[.+]/g, '\\$&')}$`, 'm'));
    expect(info).toMatch(/^ Depends: nodejs \(>= 20\), libbpf1/m);
    expect((await execa('dpkg-deb', ['-I', deb, 'conffiles'])).stdout.trim()).toBe('/etc/mup/example.yaml');
    // The maintainer scripts are packaging/debian's (postrm's purge: test/packaging-scripts.test.ts).
    for (const s of ['postinst', 'postrm']) expect((await execa('dpkg-deb', ['-I', deb, s], { stripFinalNewline: false })).stdout, s).toBe(readFileSync(join(ROOT, 'packaging/debian', s), 'utf8'));

    const root = join(dir, 'root');
    await execa('dpkg', ['-x', deb, root]);
    for (const f of ['usr/bin/mup', 'usr/lib/srv6-mup/build/mup.bpf.o', 'usr/lib/srv6-mup/native/build/Release/mup_tstamp.node', 'lib/systemd/system/mup@.service', 'etc/mup/example.yaml', 'usr/share/man/man1/mup.1.gz']) {
      expect(existsSync(join(root, f)), f).toBe(true);
    }
    // The copyright file (copyright-format 1.0): ours (BSD-2-Clause, LICENSE's text), and the
    // license of every module the package ships as its package.json says, each license's text
    // in a paragraph of its own or a pointer to /usr/share/common-licenses.
    const copyright = paragraphs(readFileSync(join(root, 'usr/share/doc/srv6-mup/copyright'), 'utf8'));
    expect(copyright[0]!.get('Format')).toBe('https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/');
    const files = copyright.filter((p) => p.has('Files'));
    const texts = new Map(copyright.filter((p) => !p.has('Files') && p.has('License')).map((p) => [p.get('License')!.split('\n')[0]!, p.get('License')!]));
    expect(files[0]!.get('Files')).toBe('*');
    expect(files[0]!.get('Copyright')).toBe('2026 the srv6-mup authors');
    expect(files[0]!.get('License')).toBe('BSD-2-Clause');
    const license = readFileSync(join(ROOT, 'LICENSE'), 'utf8');
    expect(license).toContain('Copyright (c) 2026, the srv6-mup authors\n');
    const words = (t: string): string => t.replace(/^ \.$/gm, '').replace(/\s+/g, ' ').trim();
    expect(words(license)).toContain(words(texts.get('BSD-2-Clause')!.split('\n').slice(1).join('\n')));
    expect(words(texts.get('BSD-2-Clause')!)).toContain('Redistributions in binary form must reproduce the above copyright notice');
    for (const p of files) {
      expect(p.get('Copyright'), p.get('Files')).toBeTruthy();
      for (const name of p.get('License')!.split('\n')[0]!.split(/ or | and /)) {
        const text = texts.get(name) ?? (p.get('License')!.includes('\n') ? p.get('License') : undefined);
        expect(text, `the text of ${name}`).toBeDefined();
        const common = /\/usr\/share\/common-licenses\/([^\s.]+(?:\.\d+)*)/.exec(text!)?.[1];
        if (common !== undefined) expect(existsSync(`/usr/share/common-licenses/${common}`), common).toBe(true);
        else expect(text!.split('\n').length, `the text of ${name}`).toBeGreaterThan(5);
      }
    }
    // The last paragraph whose Files pattern matches wins (copyright-format 1.0).
    const glob = (g: string): RegExp => new RegExp(`^${g.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.')}$`);
    const licenseOf = (path: string): string | undefined => files.filter((p) => p.get('Files')!.split(/\s+/).some((g) => glob(g).test(path))).at(-1)?.get('License')!.split('\n')[0];
    const shipped = modules(join(root, 'usr/lib/srv6-mup/node_modules'));
    expect(shipped.length).toBeGreaterThan(20);
    for (const m of shipped) {
      const declared = (JSON.parse(readFileSync(join(root, 'usr/lib/srv6-mup/node_modules', m, 'package.json'), 'utf8')) as { license: string }).license;
      const debian = declared.replace(/^\((.*)\)$/, '$1').replace(/ AND /g, ' and ').replace(/ OR /g, ' or ');
      expect(licenseOf(`node_modules/${m}/package.json`), `node_modules/${m} (${declared})`).toBe(debian);
    }
    expect(licenseOf('bpf/mup.bpf.c')).toBe('GPL-2.0 or BSD-2-Clause');

    const unitText = readFileSync(join(root, 'lib/systemd/system/mup@.service'), 'utf8');
    const unit = unitSettings(unitText);
    expect(unit.get('Type')).toBe('notify');
    expect(unit.get('Restart')).toBe('on-failure');
    // A start that keeps failing (a missing or bad config) ends in `failed`, not in a restart
    // every 2.3 s for ever: systemd's default (5 starts in 10 s) is never reached at that pace.
    const bgpText = readFileSync(join(root, 'lib/systemd/system/mup-bgp@.service'), 'utf8');
    for (const [name, text] of [['mup@', unitText], ['mup-bgp@', bgpText]] as const) {
      const u = unitSection(text, 'Unit');
      expect(u.get('StartLimitIntervalSec'), name).toBe('60');
      expect(u.get('StartLimitBurst'), name).toBe('5');
      const s = unitSection(text, 'Service');
      expect(Number.parseFloat(s.get('RestartSec')!) * 5, name).toBeLessThan(60);
    }

    // The instance's config, where the unit looks for it (/etc/mup/<instance>.yaml):
    // a symlink to a file of the test, so that editing it needs no overlay write.
    const lab1 = (lab = await Lab.create(['pkg']));
    const ns = lab1.ns('pkg');
    await lab1.ip('pkg', 'link', 'add', 'v0', 'type', 'veth', 'peer', 'name', 'v1');
    await lab1.ip('pkg', 'link', 'set', 'v0', 'up');
    await lab1.ip('pkg', 'link', 'set', 'v1', 'up');
    const conf = join(dir, 'instance.yaml');
    const policy = (name: string, match: string): string => `  - name: ${name}\n    match: ${match}\n    sr_prefix: 2001:db8:1::/48\n    src_prefix: 2001:db8:ff::/64\n`;
    const config = (policies: string): string =>
      `interfaces:\n  - name: v0\n    xdp: generic\n  - name: v1\n    xdp: generic\n` +
      `daemon:\n  state_file: ${join(dir, 'state.json')}\n` +
      `policies:\n${policies}`;
    writeFileSync(conf, config(policy('first', '192.0.2.0/24')));
    const etc = join(dir, 'etc');
    mkdirSync(join(etc, 'mup'), { recursive: true });
    symlinkSync(conf, join(etc, 'mup', `${instance}.yaml`));

    // The installed program, at the path the unit names.
    const ver = await inPackageNs(root, etc, 'mup --version && man -w mup');
    expect(ver.stderr).toBe('');
    const sha = (await execa('sha256sum', [join(root, 'usr/lib/srv6-mup/build/mup.bpf.o')])).stdout.split(' ')[0];
    expect(ver.stdout).toContain(`mup ${pkg.version}\ncommit `);
    expect(ver.stdout).toContain(`bpf object /usr/lib/srv6-mup/build/mup.bpf.o sha256 ${sha}\n`);
    expect(ver.stdout).toContain('/usr/share/man/man1/mup.1.gz');

    // systemd-analyze verify: no output at all (a warning about the unit would be one).
    const verify = await inPackageNs(root, etc, 'systemd-analyze verify /lib/systemd/system/mup@.service /lib/systemd/system/mup-bgp@.service');
    expect(verify.stdout + verify.stderr).toBe('');
    expect(verify.exitCode).toBe(0);

    // The installed program validates the instance's config without touching anything.
    const check = await inPackageNs(root, etc, `mup daemon --check --config /etc/mup/${instance}.yaml`);
    expect(check.exitCode, check.stdout + check.stderr).toBe(0);

    // READY=1 arrives on a datagram socket of the test (systemd's side, in python3).
    const notify = join(dir, 'notify.sock');
    const listener = spawn('/usr/bin/python3', ['-u', '-c',
      'import socket,sys\ns=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM)\ns.bind(sys.argv[1])\nprint("listening",flush=True)\n' +
      'while True:\n  m=s.recv(4096).decode()\n  print(m.replace("\\n"," "),flush=True)\n', notify], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(listener);
    let notes = '';
    listener.stdout!.on('data', (d: Buffer) => (notes += d.toString()));
    await waitFor('the notify listener', 30_000, () => (notes.includes('listening') ? true : undefined));

    // ExecStart with %i filled in, run with the unit's capabilities only (setpriv),
    // in the test's network namespace and a bpffs of its own (private mount namespace),
    // with a /run of its own (tmpfs), where the unit's RuntimeDirectory=mup is made: the
    // daemon serves /run/mup/<instance>.sock, as under systemd, without touching the real /run.
    const execStart = unit.get('ExecStart')!.replaceAll('%i', instance);
    expect(execStart).toBe(`/usr/bin/mup daemon --config /etc/mup/${instance}.yaml --instance ${instance} --log-format json`);
    const caps = unit.get('CapabilityBoundingSet')!.split(/\s+/).map((c) => `+${c.replace(/^CAP_/, '').toLowerCase()}`).join(',');
    const ambient = unit.get('AmbientCapabilities')!.split(/\s+/).map((c) => `+${c.replace(/^CAP_/, '').toLowerCase()}`).join(',');
    const daemon = spawn('unshare', ['--mount', '--propagation', 'private', 'bash', '-c',
      `${overlays(root, etc)} && mount -t bpf bpf /sys/fs/bpf && exec nsenter --net=/run/netns/${ns} -- bash -c ` +
        `'mount -t tmpfs -o mode=0755 tmpfs /run && mkdir /run/mup && exec setpriv --bounding-set=-all,${caps} --inh-caps=-all,${ambient} --ambient-caps=-all,${ambient} -- ${execStart}'`],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NOTIFY_SOCKET: notify } });
    children.push(daemon);
    let log = '';
    daemon.stdout!.on('data', (d: Buffer) => (log += d.toString()));
    daemon.stderr!.on('data', (d: Buffer) => (log += d.toString()));
    const ready = await waitFor(`READY=1 (daemon log so far: ${log})`, 90_000, () => (daemon.exitCode !== null ? `exited ${daemon.exitCode}: ${log}` : /READY=1 MAINPID=(\d+)/.exec(notes)?.[1]));
    expect(Number(ready), log).toBe(daemon.pid);
    // The instance's socket, reached from outside the daemon's mount namespace.
    const socket = `/proc/${daemon.pid}/root/run/mup/${instance}.sock`;
    // Ready means attached and serving: the API answers at once.
    const st = await apiRequest(socket, 'GET', '/v1/status');
    expect(st.status).toBe(200);
    expect(JSON.stringify(st.body)).toContain('"v0"');
    expect(log).toContain('told systemd READY=1');

    // ExecReload as systemd runs it: in the unit's mount namespace (the daemon's), with
    // the unit's capabilities. It returns once the reload is done, and fails when the
    // daemon refuses it, so that `systemctl reload` does too.
    const execReload = unit.get('ExecReload')!.replaceAll('%i', instance).replaceAll('$MAINPID', String(daemon.pid));
    const reload = () =>
      execa('nsenter', ['--target', String(daemon.pid), '--mount', '--net', '--', 'setpriv', `--bounding-set=-all,${caps}`, `--inh-caps=-all,${ambient}`, `--ambient-caps=-all,${ambient}`, '--', ...execReload.split(' ')], { reject: false, timeout: 60_000 });
    const policies = async (): Promise<string> => JSON.stringify((await apiRequest(socket, 'GET', '/v1/policies')).body);
    writeFileSync(conf, config(policy('first', '192.0.2.0/24') + policy('second', '198.51.100.0/24')));
    const applied = await reload();
    expect(applied.exitCode, applied.stdout + applied.stderr).toBe(0);
    expect(await policies()).toContain('"second"');
    // A file the daemon refuses: the reload fails, saying why; the tables stay.
    writeFileSync(conf, config(policy('first', '192.0.2.0/24') + policy('second', '198.51.100.0/24') + policy('bad', '203.0.113.0/33')));
    const refused = await reload();
    expect(refused.exitCode, refused.stdout + refused.stderr).not.toBe(0);
    expect(refused.stderr).toMatch(/^mup: .*policies\[2\]/);
    expect(await policies()).not.toContain('"bad"');
    // Not /bin/kill (procps, not a dependency): the installed CLI, to the instance's socket.
    expect(execReload).toBe(`/usr/bin/mup reload --instance ${instance}`);
    // SIGHUP still reloads (kill -HUP, as before).
    writeFileSync(conf, config(policy('first', '192.0.2.0/24') + policy('third', '198.51.100.0/24')));
    process.kill(daemon.pid!, 'SIGHUP');
    // The table and the log line: two channels, each polled. The reload's rules are listed before its log line
    // (it writes its state file after them, in slices since session 54: the line read right after the listing
    // was not there yet once in a clean clone's run).
    await waitFor('the SIGHUP reload', 30_000, async () => ((await policies()).includes('"third"') && log.includes('"reason":"SIGHUP"') ? true : undefined));
    expect(log).toContain('"reason":"SIGHUP"');

    // The installed CLI against it: --watch lines carry the time; head ends it quietly.
    const watch = await inPackageNs(root, etc, `mup stats --socket ${socket} --watch 0.2 --json | head -n 2`);
    expect(watch.stderr).toBe('');
    expect(watch.exitCode).toBe(0);
    const lines = watch.stdout.trim().split('\n').map((l) => JSON.parse(l) as { at: string });
    expect(lines).toHaveLength(2);
    for (const l of lines) expect(Number.isNaN(Date.parse(l.at))).toBe(false);

    daemon.kill('SIGTERM');
    await waitFor('the daemon to stop', 20_000, () => (daemon.exitCode !== null ? true : undefined));
    expect(daemon.exitCode, log).toBe(0);
  }, 300_000);
});

describe('the npm tarball', () => {
  it('installs with `npm i -g` into a prefix, offline (dependencies bundled), and runs from there', async () => {
    const packed = await execa('npm', ['pack', '--ignore-scripts', '--pack-destination', dir, '--json'], { cwd: ROOT });
    const tgz = join(dir, (JSON.parse(packed.stdout) as { filename: string }[])[0]!.filename);
    const prefix = join(dir, 'prefix');
    // --offline with an empty cache of its own: any fetch from the registry would fail the install.
    const inst = await execa('npm', ['i', '-g', '--prefix', prefix, '--offline', '--cache', join(dir, 'npm-cache'), '--no-audit', '--no-fund', tgz], { reject: false, cwd: dir });
    expect(inst.exitCode, inst.stderr).toBe(0);
    const bin = join(prefix, 'bin/mup');
    const lib = join(prefix, 'lib/node_modules/srv6-mup');
    const ver = await execa(bin, ['--version'], { cwd: dir });
    expect(ver.stdout).toContain(`mup ${pkg.version}\n`);
    expect(ver.stdout).toContain(`bpf object ${lib}/build/mup.bpf.o sha256 `);
    // Its own BPF object and config, no checkout: a replay of the demo frames.
    const pcap = join(dir, 'demo.pcap');
    await execa('/usr/bin/python3', [join(ROOT, 'test/fixtures/demo.py'), pcap]);
    const r = await execa(bin, ['replay', '--config', join(lib, 'config/demo.yaml'), '--in', pcap, '--out', join(dir, 'demo-out.pcap')], { reject: false, cwd: dir });
    expect(r.stderr).toBe('');
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toMatch(/^9 frames from .*, 8 written to /);
  }, 300_000);
});
