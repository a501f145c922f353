/**
 * The CLI's rough edges (issue 15, item 6), as a user meets them through
 * bin/mup.js: `--version`, a reader that goes away (EPIPE), pcapng input
 * to `replay`, a fatal daemon error printed once, and a clear line instead
 * of an errno without root. `stats --watch` against a live daemon (EPIPE
 * and timestamps) is in test/package.test.ts, on the installed package.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync, chmodSync, chownSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = new URL('..', import.meta.url).pathname;
const BIN = join(ROOT, 'bin/mup.js');
const dir = mkdtempSync(join(tmpdir(), 'mup-edges-'));
const IN = join(dir, 'in.pcap');

function mup(...args: string[]) {
  return execa('node', [BIN, ...args], { reject: false, cwd: ROOT });
}

beforeAll(async () => {
  await execa('/usr/bin/python3', [join(ROOT, 'test/fixtures/demo.py'), IN]);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('mup --version', () => {
  it('prints the version, the commit it was built from and the sha256 of the BPF object', async () => {
    const r = await mup('--version');
    expect(r.exitCode).toBe(0);
    expect(r.stderr).toBe('');
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    const head = (await execa('git', ['rev-parse', 'HEAD'], { cwd: ROOT })).stdout.trim();
    const sha = createHash('sha256').update(readFileSync(join(ROOT, 'build/mup.bpf.o'))).digest('hex');
    const lines = r.stdout.split('\n');
    expect(lines[0]).toBe(`mup ${pkg.version}`);
    // `make` bakes the commit in; the tree may have changed since (-dirty).
    expect(lines[1]).toMatch(new RegExp(`^commit ${head}(-dirty)?$`));
    expect(lines[2]).toBe(`bpf object ${join(ROOT, 'build/mup.bpf.o')} sha256 ${sha}`);
    expect((await mup('-V')).stdout).toBe(r.stdout);
  });

  it('names the commit "unknown" when built outside git', async () => {
    const src = join(dir, 'no-git');
    mkdirSync(join(src, 'scripts'), { recursive: true });
    cpSync(join(ROOT, 'scripts/build-info.sh'), join(src, 'scripts/build-info.sh'));
    // GIT_CEILING_DIRECTORIES: git must not find a repository above the temp dir either.
    await execa('bash', [join(src, 'scripts/build-info.sh')], { env: { GIT_CEILING_DIRECTORIES: dir } });
    expect(JSON.parse(readFileSync(join(src, 'build/build-info.json'), 'utf8'))).toEqual({ commit: 'unknown' });
  });
});

describe('a reader that goes away', () => {
  it('ends the command quietly (no EPIPE stack trace)', async () => {
    // The read end is closed before node has even started: the first write gets EPIPE.
    const child = spawn('node', [BIN, '--help'], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((r) => child.on('close', (c) => r(c)));
    expect(stderr).toBe('');
    expect(code).toBe(0);
  });
});

describe('mup replay --in FILE.pcapng', () => {
  it('reads pcapng (editcap\'s conversion of the same frames) and writes what the classic file gives', async () => {
    const ng = join(dir, 'in.pcapng');
    await execa('editcap', ['-F', 'pcapng', IN, ng]);
    expect(readFileSync(ng).readUInt32LE(0)).toBe(0x0a0d0d0a);
    const config = join(ROOT, 'config/demo.yaml');
    const a = await mup('replay', '--config', config, '--in', IN, '--out', join(dir, 'a.pcap'), '--json');
    const b = await mup('replay', '--config', config, '--in', ng, '--out', join(dir, 'b.pcap'), '--json');
    expect(b.stderr).toBe('');
    expect(b.exitCode).toBe(0);
    expect(b.stdout).toBe(a.stdout);
    expect(b.stdout.trim().split('\n')).toHaveLength(9);
    expect(readFileSync(join(dir, 'b.pcap')).equals(readFileSync(join(dir, 'a.pcap')))).toBe(true);
  });
});

describe('mup replay: its output and its input checked first (found in review, session 43)', () => {
  const config = join(ROOT, 'config/demo.yaml');
  it('the input named as the output is refused, the capture left as it was', async () => {
    const same = join(dir, 'same.pcap');
    cpSync(IN, same);
    const before = readFileSync(same);
    const r = await mup('replay', '--config', config, '--in', same, '--out', same);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(/same\.pcap: is the input capture .*give --out another file/);
    expect(readFileSync(same).equals(before)).toBe(true);
  });

  it('a directory as the output is refused before any frame runs; a failed run leaves an existing output as it was', async () => {
    const r = await mup('replay', '--config', config, '--in', IN, '--out', dir);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(/cannot write: it is a directory/);
    const out = join(dir, 'kept.pcap');
    writeFileSync(out, 'old');
    const bad = join(dir, 'bad.pcap');
    writeFileSync(bad, Buffer.alloc(64));
    expect((await mup('replay', '--config', config, '--in', bad, '--out', out)).exitCode).toBe(2);
    expect(readFileSync(out, 'utf8')).toBe('old');
  });

  it('an existing output keeps its mode and owner; a run that cannot open its data plane leaves no temporary file (review of the day\'s changes)', async () => {
    const out = join(dir, 'private.pcap');
    writeFileSync(out, 'old');
    chmodSync(out, 0o600);
    chownSync(out, 65534, 65534);
    const r = await mup('replay', '--config', config, '--in', IN, '--out', out);
    expect(r.exitCode).toBe(0);
    const st = statSync(out);
    expect([st.mode & 0o777, st.uid, st.gid]).toEqual([0o600, 65534, 65534]);
    const sub = join(dir, 'noobj');
    mkdirSync(sub);
    const failed = await mup('replay', '--config', config, '--in', IN, '--out', join(sub, 'x.pcap'), '--object', '/nonexistent/mup.bpf.o');
    expect(failed.exitCode).toBe(2);
    expect(readdirSync(sub)).toEqual([]);
  });

  it('a pipe that is not a capture is refused on its first bytes, not read to its end', async () => {
    // A FIFO whose writer sends 4 zero bytes and keeps it open: read whole, the replay waited for ever.
    const fifo = join(dir, 'in.fifo');
    await execa('mkfifo', [fifo]);
    const writer = spawn('sh', ['-c', `printf '\\000\\000\\000\\000' > ${fifo}.hold; exec 3>${fifo}; cat ${fifo}.hold >&3; exec sleep 30`]);
    try {
      const r = await execa('node', [BIN, 'replay', '--config', config, '--in', fifo, '--out', join(dir, 'fifo-out.pcap')], { reject: false, cwd: ROOT, timeout: 15_000 });
      expect(r.timedOut).toBe(false);
      expect(r.exitCode).toBe(2);
      expect(r.stderr).toMatch(/in\.fifo: not a pcap file: magic 0x00000000/);
    } finally {
      writer.kill('SIGKILL');
    }
  });
});

describe('fatal errors', () => {
  it('print once: the daemon\'s log line, not a second copy on stderr', async () => {
    const config = join(dir, 'bad-iface.yaml');
    writeFileSync(config, 'interfaces:\n  - name: mupt-no-such-if\n');
    const r = await mup('daemon', '--config', config, '--instance', `edges${process.pid}`, '--socket', join(dir, 'd.sock'), '--state-file', join(dir, 'd.state.json'), '--log-format', 'json');
    expect(r.exitCode).toBe(2);
    const all = `${r.stdout}\n${r.stderr}`;
    expect(all.match(/no interface mupt-no-such-if/g)).toHaveLength(1);
    expect(JSON.parse(r.stdout.trim().split('\n').at(-1)!)).toMatchObject({ level: 'fatal', msg: 'daemon failed' });
  });

  it('a --bpffs where no directory can be made: the reason, not a hang', async () => {
    // mkdir(2) under /proc says ENOENT, as /sys/fs/bpf does before a bpffs is
    // mounted there: Node's recursive mkdirSync spun at 100 % CPU for ever on it.
    const config = join(dir, 'no-iface.yaml');
    writeFileSync(config, 'interfaces: []\n');
    const bpffs = `/proc/mup-edges-${process.pid}/bpffs`;
    const r = await execa('node', [BIN, 'daemon', '--config', config, '--instance', `edges${process.pid}`, '--bpffs', bpffs, '--socket', join(dir, 'b.sock'), '--state-file', join(dir, 'b.state.json'), '--log-format', 'json'], { reject: false, cwd: ROOT, timeout: 20_000 });
    expect(r.timedOut).toBe(false);
    expect(r.exitCode).not.toBe(0);
    const all = `${r.stdout}\n${r.stderr}`;
    expect(all).toContain(`cannot make directory /proc/mup-edges-${process.pid}: the filesystem of /proc does not allow new directories there`);
    expect(all).toContain('mount -t bpf bpf DIR');
  });

  it('without root: one line naming the capabilities, no errno, nothing on stdout', async () => {
    chmodSync(dir, 0o755);
    chmodSync(IN, 0o644);
    const config = join(ROOT, 'config/demo.yaml');
    for (const [cmd, args] of [
      ['replay', ['--config', config, '--in', IN, '--out', join(dir, 'nobody.pcap')]],
      ['daemon', ['--config', config, '--instance', `edges${process.pid}`, '--socket', join(dir, 'n.sock'), '--state-file', join(dir, 'n.state.json')]],
      ['teardown', ['--instance', `edges${process.pid}`]],
      ['probe', ['--tx-dev', 'lo', '--rx-dev', 'lo', '--socket', join(dir, 'n.sock'), '--duration', '1']],
    ] as const) {
      const r = await execa('setpriv', ['--reuid=nobody', '--regid=nogroup', '--clear-groups', 'node', BIN, cmd, ...args], { reject: false, cwd: '/' });
      expect(r.stdout, cmd).toBe('');
      expect(r.stderr, cmd).toMatch(new RegExp(`^mup: ${cmd} needs root, or the capabilities CAP_BPF[^\\n]*\\(missing CAP_BPF[^\\n]*\\): run it with sudo[^\\n]*\\n?$`));
      expect(r.stderr, cmd).not.toMatch(/EPERM|EACCES/);
      expect(r.exitCode, cmd).toBe(2);
    }
  });
});
