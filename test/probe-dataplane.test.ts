/**
 * The in-band stamps of bpf/probe.h through BPF_PROG_TEST_RUN, on the
 * compiled object: frames built by scapy (GTP-U uplink, SRv6 downlink, each
 * with a probe payload), the probe switched on and off in the running
 * program's config; the stamp in the source MAC, the ring buffer record and
 * the per-CPU counters checked against each other and against the clock.
 */
import { existsSync } from 'node:fs';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { objectClose, objectOpen, testRun } from '../src/dataplane/libbpf.js';
import { checkProbeLayouts } from '../src/dataplane/btf.js';
import { closeProbeMaps, openProbeMaps, ProbeRing, readProbeCounters, readSelector, writeSelector, type ProbeMaps } from '../src/dataplane/probe-maps.js';
import { macStamp, macStampBytes, PROBE_MAGIC } from '../src/dataplane/probe-layout.js';
import { PYTHON } from './helpers/scapy.js';

const haveObject = existsSync(DEFAULT_OBJECT);
const PORT = 47000;

const CONFIG = `
settings: { forwarding: tx, max_policies: 4, max_localsids: 4 }
policies:
  - { name: ul, match: 192.0.2.10/32, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
localsids:
  - { name: dl, sid: "2001:db8:2::/48", src_prefix_len: 64 }
`;

/** Frames by scapy, one Python run for all: uplink GTP-U and downlink SRv6, inner UDP to dport with a probe payload (run, seq). */
async function buildFrames(specs: readonly (readonly [number, number, number])[]): Promise<Map<string, { up: Buffer; down: Buffer }>> {
  const py = `
import struct, sys, json
from scapy.all import Ether, IP, IPv6, UDP, Raw
from scapy.contrib.gtp import GTP_U_Header, GTPPDUSessionContainer
def pl(run, seq, d): return Raw(struct.pack('!IIIB3x', ${PROBE_MAGIC}, run, seq, d) + bytes(16))
for dport, run, seq in json.loads(sys.argv[1]):
    inner_up = IP(src='10.45.0.2', dst='203.0.113.5')/UDP(sport=40000, dport=dport)/pl(run, seq, 0)
    up = Ether(src='02:00:00:00:00:01', dst='02:00:00:00:00:02')/IP(src='198.51.100.1', dst='192.0.2.10')/UDP(sport=2152, dport=2152)/GTP_U_Header(teid=0x11223344, next_ex=0x85)/GTPPDUSessionContainer(type=1, QFI=5)/inner_up
    inner_dn = IP(src='203.0.113.5', dst='10.45.0.2')/UDP(sport=40000, dport=dport)/pl(run, seq, 1)
    dn = Ether(src='02:00:00:00:00:03', dst='02:00:00:00:00:04')/IPv6(src='2001:db8:ff:0:c000:20a::', dst='2001:db8:2:c633:6401:1411:2233:4400', nh=4)/inner_dn
    print(bytes(up).hex(), bytes(dn).hex())
`;
  const r = await execa(PYTHON, ['-c', py, JSON.stringify(specs)]);
  const out = new Map<string, { up: Buffer; down: Buffer }>();
  r.stdout
    .trim()
    .split('\n')
    .forEach((line, i) => {
      const [up, down] = line.split(' ');
      out.set(specs[i]!.join(','), { up: Buffer.from(up!, 'hex'), down: Buffer.from(down!, 'hex') });
    });
  return out;
}

const SPECS = [
  [PORT, 7, 1],
  [PORT, 7, 11],
  [PORT, 7, 12],
  [PORT + 1, 7, 1],
  [PORT, 8, 0],
  [PORT + 2, 9, 3],
  [PORT, 10, 4],
] as const;
let built: Map<string, { up: Buffer; down: Buffer }>;
async function frames(dport: number, run: number, seq: number): Promise<{ up: Buffer; down: Buffer }> {
  const f = built.get([dport, run, seq].join(','));
  if (f === undefined) throw new Error(`frame ${dport},${run},${seq} not in SPECS`);
  return f;
}

function monotonicNs(): bigint {
  return process.hrtime.bigint(); // CLOCK_MONOTONIC, as bpf_ktime_get_ns
}

describe.skipIf(!haveObject)('probe stamps in the data plane (BPF_PROG_TEST_RUN)', () => {
  let dp: Dataplane;
  let maps: ProbeMaps;
  let ring: ProbeRing;

  beforeAll(async () => {
    built = await buildFrames(SPECS);
    dp = openDataplane({ config: parseConfig(CONFIG, 'probe.yaml') });
    maps = openProbeMaps({ fd: dp.progFd });
    ring = new ProbeRing(maps.ringFd);
  });
  afterAll(() => {
    ring?.close();
    if (maps !== undefined) closeProbeMaps(maps);
    dp?.close();
  });

  it('the object carries every probe struct and enum the TypeScript side reads', () => {
    const obj = objectOpen(DEFAULT_OBJECT);
    try {
      expect(() => checkProbeLayouts(obj, DEFAULT_OBJECT)).not.toThrow();
    } finally {
      objectClose(obj);
    }
  });

  it('off: the translation is untouched and nothing is recorded', async () => {
    writeSelector(dp.tables, { enabled: false });
    const f = await frames(PORT, 7, 1);
    const up = dp.run(f.up);
    expect(up.event).toBe('fwd_tx');
    expect(up.verdict).toBe('tx');
    // Forwarding tx swaps the received MACs.
    expect(up.out.subarray(6, 12).toString('hex')).toBe('020000000002');
    expect(ring.drain()).toEqual([]);
  });

  it('on: the entry time is in the source MAC and in one record per frame, with the sequence number', async () => {
    writeSelector(dp.tables, { enabled: true, udpPort: PORT });
    expect(readSelector(dp.tables)).toMatchObject({ enabled: true, udpPort: PORT, sample: 1 });
    const before = readProbeCounters(maps.stateFd);
    for (const [seq, dir] of [
      [11, 'up'],
      [12, 'down'],
    ] as const) {
      const f = await frames(PORT, 7, seq);
      const t0 = monotonicNs();
      const r = dp.run(dir === 'up' ? f.up : f.down);
      const t1 = monotonicNs();
      expect(r.verdict).toBe('tx');
      const recs = ring.drain();
      expect(recs).toHaveLength(1);
      const rec = recs[0]!;
      expect(rec).toMatchObject({
        seq,
        run: 7,
        fn: dir === 'up' ? 'h_m_gtp4_d' : 'end_m_gtp4_e',
        verdict: 'tx',
        macStamped: true,
        proto: 17,
        dport: PORT,
        sport: 40000,
        src: dir === 'up' ? '10.45.0.2' : '203.0.113.5',
        dst: dir === 'up' ? '203.0.113.5' : '10.45.0.2',
      });
      // Within the run, in order; the MAC holds the entry time exactly.
      expect(rec.entryNs).toBeGreaterThanOrEqual(t0);
      expect(rec.exitNs).toBeGreaterThanOrEqual(rec.entryNs);
      expect(rec.exitNs).toBeLessThanOrEqual(t1);
      expect(macStamp(r.out, rec.exitNs)).toBe(rec.entryNs);
      // The documented layout (docs/probe.md, "The MAC stamp"): a unicast, locally administered address.
      expect(r.out.subarray(6, 12).toString('hex')).toBe(macStampBytes(rec.entryNs).toString('hex'));
    }
    const after = readProbeCounters(maps.stateFd);
    expect(after.recorded - before.recorded).toBe(2n);
    expect(after.ringFull).toBe(before.ringFull);
  });

  it('on: another inner port is neither stamped nor recorded; 1 in N records every Nth', async () => {
    writeSelector(dp.tables, { enabled: true, udpPort: PORT });
    const other = await frames(PORT + 1, 7, 1);
    const r = dp.run(other.up);
    expect(r.verdict).toBe('tx');
    expect(r.out.subarray(6, 12).toString('hex')).toBe('020000000002');
    expect(ring.drain()).toEqual([]);

    writeSelector(dp.tables, { enabled: true, udpPort: PORT, sample: 3 });
    const f = await frames(PORT, 8, 0);
    for (let i = 0; i < 9; i++) dp.run(f.up);
    expect(ring.drain()).toHaveLength(3);
  });

  it('a session\'s frame (H.M.Session.Encaps, IPv4 and IPv6 UE) is recorded as h_m_session_encaps, not as H.M.GTP4.D / End.M.GTP6.D', async () => {
    const cfg = parseConfig(
      `settings: { forwarding: tx, max_policies: 4, max_localsids: 4, max_sessions: 4 }
sessions:
  - { ue: 10.60.0.1/32, teid: 7, qfi: 1, endpoint: 192.0.2.2, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }
  - { ue: "2001:db8:60::1/128", teid: 8, qfi: 1, endpoint: 192.0.2.2, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }
`,
      'probe-sessions.yaml',
    );
    const py = `
from scapy.all import Ether, IP, IPv6, UDP, Raw
e = Ether(src='02:00:00:00:00:01', dst='02:00:00:00:00:02')
print(bytes(e/IP(src='203.0.113.5', dst='10.60.0.1')/UDP(sport=40000, dport=${PORT})/Raw(bytes(32))).hex())
print(bytes(e/IPv6(src='2001:db8:99::1', dst='2001:db8:60::1')/UDP(sport=40000, dport=${PORT})/Raw(bytes(32))).hex())
`;
    const [v4, v6] = (await execa(PYTHON, ['-c', py])).stdout.trim().split('\n').map((h) => Buffer.from(h, 'hex'));
    const pe = openDataplane({ config: cfg });
    const peMaps = openProbeMaps({ fd: pe.progFd });
    const peRing = new ProbeRing(peMaps.ringFd);
    try {
      writeSelector(pe.tables, { enabled: true, udpPort: PORT });
      for (const [f, src] of [
        [v4!, '203.0.113.5'],
        [v6!, '2001:db8:99:0:0:0:0:1'],
      ] as const) {
        const r = pe.run(f);
        expect(r.verdict).toBe('tx');
        const recs = peRing.drain();
        expect(recs).toHaveLength(1);
        expect(recs[0]).toMatchObject({ fn: 'h_m_session_encaps', verdict: 'tx', proto: 17, dport: PORT, src });
      }
    } finally {
      peRing.close();
      closeProbeMaps(peMaps);
      pe.close();
    }
  });

  it('on, MAC left alone: recorded, source MAC as the translation wrote it', async () => {
    writeSelector(dp.tables, { enabled: true, udpPort: 0, noMac: true });
    const f = await frames(PORT + 2, 9, 3);
    const r = dp.run(f.up);
    expect(r.out.subarray(6, 12).toString('hex')).toBe('020000000002');
    const recs = ring.drain();
    expect(recs).toHaveLength(1);
    expect(recs[0]).toMatchObject({ seq: 3, macStamped: false, dport: PORT + 2 });
    writeSelector(dp.tables, { enabled: false });
    expect(readSelector(dp.tables).enabled).toBe(false);
  });

  it('every frame stamped (udp_port 0): each source MAC a valid unicast, locally administered address', async () => {
    // A group (multicast) source MAC makes a Linux bridge drop the frame
    // (test/probe-bridge.test.ts); the stamp keeps the first octet's low bits 1 0.
    writeSelector(dp.tables, { enabled: true, udpPort: 0 });
    try {
      const f = await frames(PORT + 1, 7, 1);
      const bad: string[] = [];
      let n = 0;
      for (let i = 0; i < 400; i++) {
        for (const frame of [f.up, f.down]) {
          const r = testRun(dp.progFd, { dataIn: frame, dataOutSize: frame.length + 256 });
          expect(r.retval).toBe(3); // XDP_TX
          const mac = r.dataOut!.subarray(6, 12);
          n++;
          if ((mac[0]! & 0x03) !== 0x02) bad.push(mac.toString('hex'));
        }
      }
      const recs = ring.drain();
      expect(recs.length).toBe(n);
      expect(recs.every((x) => x.macStamped)).toBe(true);
      expect(bad, `${bad.length} of ${n} stamped source MACs not unicast + locally administered`).toEqual([]);
    } finally {
      writeSelector(dp.tables, { enabled: false });
      ring.drain();
    }
  });

  it('a table change keeps the probe on (both config copies carry it)', async () => {
    writeSelector(dp.tables, { enabled: true, udpPort: PORT });
    dp.sync(parseConfig(CONFIG.replace('192.0.2.10/32', '192.0.2.0/24'), 'probe2.yaml'));
    dp.sync(parseConfig(CONFIG, 'probe.yaml'));
    expect(readSelector(dp.tables)).toMatchObject({ enabled: true, udpPort: PORT });
    const f = await frames(PORT, 10, 4);
    dp.run(f.up);
    expect(ring.drain().map((x) => x.seq)).toEqual([4]);
    writeSelector(dp.tables, { enabled: false });
  });
});
