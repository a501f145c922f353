/**
 * The `mup` command line as a user meets it: bin/mup.js (the compiled CLI,
 * built by `make`) on the demo frames, and the error paths that must print
 * one line and exit 2.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatPcap, parsePcap } from '../src/dataplane/pcap.js';

const ROOT = new URL('..', import.meta.url).pathname;
const BIN = join(ROOT, 'bin/mup.js');
const CONFIG = join(ROOT, 'config/demo.yaml');
const dir = mkdtempSync(join(tmpdir(), 'mup-cli-'));
const IN = join(dir, 'in.pcap');

function mup(...args: string[]) {
  return execa('node', [BIN, ...args], { reject: false, cwd: ROOT });
}

beforeAll(async () => {
  if (!existsSync(join(ROOT, 'dist/cli/main.js'))) throw new Error('dist/ is missing: run `make` (make test builds it)');
  await execa('/usr/bin/python3', [join(ROOT, 'test/fixtures/demo.py'), IN]);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('mup replay', () => {
  it('translates the demo frames and writes what leaves', async () => {
    const out = join(dir, 'out.pcap');
    const r = await mup('replay', '--config', CONFIG, '--in', IN, '--out', out, '--json');
    expect(r.stderr).toBe('');
    expect(r.exitCode).toBe(0);
    const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as { index: number; verdict: string; reason: string | null; event: string; out_len: number });
    // test/fixtures/demo.py: 3 uplink + 2 downlink G-PDUs, Echo (answered), ARP, other UDP, one malformed.
    expect(lines.map((l) => l.verdict)).toEqual(['tx', 'tx', 'tx', 'tx', 'tx', 'tx', 'pass', 'pass', 'drop']);
    expect(lines[8]).toMatchObject({ reason: 'drop_inner_not_ip', out_len: 0 });
    expect(lines[5]).toMatchObject({ event: 'reply_echo', reason: null, out_len: 56 });
    const written = parsePcap(readFileSync(out), out).packets;
    expect(written).toHaveLength(8);
    expect(written.map((p) => p.data.length)).toEqual(lines.slice(0, 8).map((l) => l.out_len));
    expect(written[0]!.data.readUInt16BE(12)).toBe(0x86dd); // uplink became IPv6
    expect(written[3]!.data.readUInt16BE(12)).toBe(0x0800); // downlink became IPv4
  });

  describe('frames BPF_PROG_TEST_RUN cannot run whole', () => {
    // Valid G-PDUs for config/demo.yaml of exact sizes around the one-buffer
    // limit, a jumbo one, and two runts, then a small valid one: replay must
    // skip what it cannot run and carry on.
    const SIZES = ['100', '3520', '3521', '9000', 'x0102030405060708090a0b0c0d', 'x', '100'];
    const MAKE = `
import struct, sys
from scapy.all import Ether, IP, UDP, Raw, wrpcap
M = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
def gpdu(size):
    ext = struct.pack(">HBB", 0, 0, 0x85) + bytes([1, 0x10, 9, 0])
    def build(n):
        inner = IP(src="10.45.0.2", dst="203.0.113.5") / UDP(sport=40000, dport=9000) / Raw(b"x" * n)
        g = ext + bytes(inner)
        gtp = struct.pack(">BBHI", 0x34, 0xFF, len(g), 0x1000) + g
        return Ether(**M) / IP(src="198.51.100.1", dst="192.0.2.10") / UDP(sport=2152, dport=2152) / Raw(gtp)
    f = bytes(build(size - len(build(0))))
    assert len(f) == size, (len(f), size)
    return f
wrpcap(sys.argv[1], [gpdu(int(a)) if a.isdigit() else bytes.fromhex(a[1:]) for a in sys.argv[2:]], linktype=1)
`;
    const LIMITS = join(dir, 'limits.pcap');
    beforeAll(async () => {
      await execa('/usr/bin/python3', ['-c', MAKE, LIMITS, ...SIZES]);
    });

    it('--json: skipped with reason frame_too_large or runt, not written, the rest translated', async () => {
      const out = join(dir, 'limits-out.pcap');
      const r = await mup('replay', '--config', CONFIG, '--in', LIMITS, '--out', out, '--json');
      expect(r.stderr).toBe('');
      expect(r.exitCode).toBe(0);
      const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(lines.map((l) => [l['verdict'], l['reason'], l['in_len']])).toEqual([
        ['tx', null, undefined],
        ['tx', null, undefined], // 3,520 bytes: the largest frame one XDP buffer holds
        ['skipped', 'frame_too_large', 3521],
        ['skipped', 'frame_too_large', 9000],
        ['skipped', 'runt', 13],
        ['skipped', 'runt', 0],
        ['tx', null, undefined],
      ]);
      expect(lines[2]).toMatchObject({ event: null, out_len: 0, detail: expect.stringMatching(/^larger than one XDP buffer \(3520 bytes\); multi-buffer XDP is not supported$/) });
      expect(lines[4]).toMatchObject({ event: null, out_len: 0, detail: expect.stringMatching(/shorter than an Ethernet header/) });
      const written = parsePcap(readFileSync(out), out).packets;
      expect(written.map((p) => p.data.length)).toEqual([lines[0]!['out_len'], lines[1]!['out_len'], lines[6]!['out_len']]);
      expect(written[1]!.data.length).toBeGreaterThan(3520); // translated whole, not cut to one buffer
      expect(written.every((p) => p.data.readUInt16BE(12) === 0x86dd)).toBe(true);
    });

    it('the summary counts skipped frames by reason and keeps them out of the program counters', async () => {
      const r = await mup('replay', '--config', CONFIG, '--in', LIMITS, '--out', join(dir, 'limits-o2.pcap'));
      expect(r.stderr).toBe('');
      expect(r.exitCode).toBe(0);
      expect(r.stdout).toMatch(/^7 frames from .*limits\.pcap, 3 written to .*, 4 skipped \(not run through the program\)$/m);
      expect(r.stdout).toMatch(/^skipped\s+4$/m);
      expect(r.stdout).toMatch(/^frame_too_large\s+2\s+larger than one XDP buffer \(3520 bytes\); multi-buffer XDP is not supported$/m);
      expect(r.stdout).toMatch(/^runt\s+2\s+shorter than an Ethernet header/m);
      expect(r.stdout).toMatch(/^fwd_tx\s+3$/m);
      expect(r.stdout).toMatch(/^h_m_gtp4_d\s+3\s+\d+$/m);
    });
  });

  it('skips a frame the capture cut short (snaplen) instead of judging the cut packet', async () => {
    const demo = parsePcap(readFileSync(IN), IN).packets;
    const whole = demo[0]!;
    const cut = { ...whole, data: whole.data.subarray(0, 60) }; // origLen stays the wire length
    const f = join(dir, 'snaplen.pcap');
    writeFileSync(f, formatPcap([cut, whole], 60));
    const r = await mup('replay', '--config', CONFIG, '--in', f, '--out', join(dir, 'snaplen-out.pcap'), '--json');
    expect(r.exitCode).toBe(0);
    const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.map((l) => [l['verdict'], l['reason']])).toEqual([
      ['skipped', 'cut_by_snaplen'],
      ['tx', null],
    ]);
  });

  it('prints verdicts, events and per-rule counters without --json', async () => {
    const r = await mup('replay', '--config', CONFIG, '--in', IN, '--out', join(dir, 'o2.pcap'));
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toMatch(/^h_m_gtp4_d\s+3\s+\d+$/m);
    expect(r.stdout).toMatch(/^end_m_gtp4_e\s+2\s+\d+$/m);
    expect(r.stdout).toMatch(/^drop_inner_not_ip\s+1$/m);
  });

  const bad = (name: string, text: string | Buffer): string => {
    const f = join(dir, name);
    writeFileSync(f, text);
    return f;
  };

  it.each([
    ['a file that is not a pcap', () => ['--config', CONFIG, '--in', bad('x.pcap', 'hello'), '--out', join(dir, 'o.pcap')], /not a pcap file/],
    ['a missing input', () => ['--config', CONFIG, '--in', join(dir, 'nope.pcap'), '--out', join(dir, 'o.pcap')], /nope\.pcap/],
    [
      'an SID prefix too long for the RFC layout',
      () => ['--config', bad('c.yaml', 'policies:\n  - match: 10.0.1.0/24\n    sr_prefix: 2001:db8:1::/64\n    src_prefix: 2001:db8:ff::/64\n'), '--in', IN, '--out', join(dir, 'o.pcap')],
      /c\.yaml:3: policies\[0\]\.sr_prefix: .*L at most 56/,
    ],
    ['an unknown key', () => ['--config', bad('k.yaml', 'policy: []\n'), '--in', IN, '--out', join(dir, 'o.pcap')], /k\.yaml:1: policy/],
    ['a missing object', () => ['--config', CONFIG, '--in', IN, '--out', join(dir, 'o.pcap'), '--object', join(dir, 'none.o')], /build it with `make`/],
    ['a missing option', () => ['--config', CONFIG], /required option/],
  ])('%s: one line on stderr, exit 2', async (_name, args, message) => {
    const r = await mup('replay', ...args());
    expect(r.exitCode).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^mup: /);
    expect(r.stderr).toMatch(message);
  });

  it('--help teaches with an example', async () => {
    const r = await mup('replay', '--help');
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toMatch(/Examples?:\n\s+mup replay --config/);
  });
});
