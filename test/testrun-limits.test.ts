/**
 * What BPF_PROG_TEST_RUN can hand a plain `xdp` program, and that run()
 * refuses the rest instead of misreporting it. The kernel facts are checked
 * too (through testRun directly), so that a kernel with another limit fails
 * here, naming TEST_RUN_MAX_FRAME, rather than silently in replay.
 */
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigFile } from '../src/config/load.js';
import { ETH_HLEN, TEST_RUN_MAX_FRAME, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { testRun } from '../src/dataplane/libbpf.js';
import { PYTHON } from './helpers/scapy.js';

const CONFIG = new URL('../config/demo.yaml', import.meta.url).pathname;

/** A valid G-PDU for config/demo.yaml (policy 192.0.2.0/24) of exactly `size` bytes, built by scapy. */
const MAKE = `
import struct, sys
from scapy.all import Ether, IP, UDP, Raw
def build(n):
    ext = struct.pack(">HBB", 0, 0, 0x85) + bytes([1, 0x10, 9, 0])
    g = ext + bytes(IP(src="10.45.0.2", dst="203.0.113.5") / UDP(sport=40000, dport=9000) / Raw(b"x" * n))
    gtp = struct.pack(">BBHI", 0x34, 0xFF, len(g), 0x1000) + g
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") /
                 IP(src="198.51.100.1", dst="192.0.2.10") / UDP(sport=2152, dport=2152) / Raw(gtp))
for a in sys.argv[1:]:
    f = build(int(a) - len(build(0)))
    assert len(f) == int(a)
    print(f.hex())
`;

let dp: Dataplane;
let atLimit: Buffer;
let overLimit: Buffer;

beforeAll(async () => {
  const config = await loadConfigFile(CONFIG);
  dp = openDataplane({ config: { ...config, settings: { ...config.settings, forwarding: 'tx' } } });
  const r = await execa(PYTHON, ['-c', MAKE, String(TEST_RUN_MAX_FRAME), String(TEST_RUN_MAX_FRAME + 1)]);
  [atLimit, overLimit] = r.stdout.trim().split('\n').map((h) => Buffer.from(h, 'hex')) as [Buffer, Buffer];
});
afterAll(() => dp?.close());

describe(`run() and the ${TEST_RUN_MAX_FRAME}-byte limit of one XDP buffer`, () => {
  it(`translates a valid ${TEST_RUN_MAX_FRAME}-byte G-PDU whole`, () => {
    const r = dp.run(atLimit);
    expect(r).toMatchObject({ verdict: 'tx', event: 'fwd_tx' });
    expect(r.out.length).toBeGreaterThan(atLimit.length);
  });

  it('refuses a frame one byte larger with a clear error', () => {
    expect(() => dp.run(overLimit)).toThrow(
      new RangeError(
        `a ${TEST_RUN_MAX_FRAME + 1}-byte frame is larger than one XDP buffer (${TEST_RUN_MAX_FRAME} bytes in BPF_PROG_TEST_RUN); ` +
          'multi-buffer XDP is not supported, and the program would see only the first part of it',
      ),
    );
  });

  it(`refuses a frame shorter than ${ETH_HLEN} bytes`, () => {
    expect(() => dp.run(Buffer.alloc(ETH_HLEN - 1))).toThrow(/shorter than an Ethernet header/);
    expect(dp.run(Buffer.alloc(ETH_HLEN)).verdict).toBe('pass');
  });

  it('kernel fact: past the limit the program sees only the first buffer (why run() refuses)', () => {
    // If this flips to tx, this kernel hands larger frames whole: raise TEST_RUN_MAX_FRAME.
    const r = testRun(dp.progFd, { dataIn: overLimit, dataOutSize: overLimit.length + 256 });
    expect(r.retval, `TEST_RUN_MAX_FRAME (${TEST_RUN_MAX_FRAME}) no longer matches this kernel`).not.toBe(3); // XDP_TX
    expect(r.dataOut!.readUInt16BE(12)).toBe(0x0800); // not translated
  });
});
