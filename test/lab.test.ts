/**
 * The lab end to end (src/lab/, `mup lab`), with a prefix of its own
 * (mlt<pid>) so it runs beside `make demo` and other test files:
 * - ping and a short iperf3 TCP through the translated path;
 * - interop: every uplink packet we emit is accepted by the kernel's
 *   End.DX4 (its own counters) and reaches the data network; the kernel's
 *   seg6 encap output is translated into GTP-U that the gNB emulator accepts
 *   (its counters) and reaches the UE; tshark decodes both wires without a
 *   malformed frame;
 * - MEC relocation through the API under a stream: nothing lost;
 * - lab down leaves nothing: namespaces, daemon, bpffs, directory.
 * afterAll removes the lab also when a test failed; beforeAll removes labs
 * of test processes that died before their cleanup.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gnbCounters } from '../src/lab/gnb.js';
import { labApi, labDown, labPaths, labUp, type LabPaths } from '../src/lab/lab.js';
import { captureWires, ping, tcp, iperfServer } from '../src/lab/measure.js';
import { relocateOnLab } from '../src/lab/relocate.js';
import { labTopology, type LabTopology } from '../src/lab/topology.js';
import { listNamespaces } from '../src/host/netns-sweep.js';
import { pidAlive } from '../src/host/process.js';

const isRoot = process.getuid?.() === 0;
const PREFIX = `mlt${process.pid}`;
const STREAM_PY = fileURLToPath(new URL('../src/lab/stream.py', import.meta.url));
const MUP_BIN = fileURLToPath(new URL('../bin/mup.js', import.meta.url));

interface Fn {
  packets: number;
}
interface RecvOut {
  seqs: number[];
  malformed: number;
}

describe.skipIf(!isRoot)('mup lab: the whole user plane in namespaces', () => {
  let t: LabTopology;
  let p: LabPaths;
  let out: string;

  const functions = async (): Promise<Record<string, Fn>> =>
    (await labApi<{ functions: Record<string, Fn> }>(p, 'GET', '/v1/counters?rules=none')).body.functions;
  const dx4 = async (prefix: string): Promise<{ packets: number; errors: number }> => {
    const r = await execa('ip', ['-n', t.ns.core, '-6', '-j', '-s', 'route', 'show', prefix]);
    return (JSON.parse(r.stdout) as { stats64: { packets: number; errors: number } }[])[0]!.stats64;
  };
  /** `count` numbered UDP datagrams from (ns, src) to dst:port, received in (rns, dst). */
  const stream = async (ns: string, src: string, rns: string, dst: string, count: number): Promise<RecvOut> => {
    const recv = execa('ip', ['netns', 'exec', rns, '/usr/bin/python3', STREAM_PY, 'recv', '--bind', dst, '--port', '7100', '--seconds', '8', '--idle', '1'], {
      reject: false,
      timeout: 15_000,
    });
    await new Promise<void>((res, rej) => {
      let o = '';
      recv.stdout?.on('data', (c: Buffer) => {
        o += c.toString();
        if (o.startsWith('ready')) res();
      });
      recv.then((r) => rej(new Error(`receiver exited: ${String(r.stderr)}`)), rej);
    });
    const s = await execa('ip', ['netns', 'exec', ns, '/usr/bin/python3', STREAM_PY, 'send', '--src', src, '--dst', dst, '--port', '7100', '--rate', String(count * 10), '--seconds', '0.1'], {
      timeout: 10_000,
    });
    expect(JSON.parse(s.stdout).sent).toBe(count);
    const r = await recv;
    return JSON.parse(String(r.stdout).split('\n')[1]!) as RecvOut;
  };

  beforeAll(async () => {
    // Labs of test runs killed before their cleanup (mlt<dead pid>-*).
    const stale = new Set<number>();
    for (const n of await listNamespaces()) {
      const pid = Number(/^mlt(\d+)-/.exec(n)?.[1]);
      if (Number.isInteger(pid) && pid !== process.pid && !pidAlive(pid)) stale.add(pid);
    }
    for (const pid of stale) await labDown(`mlt${pid}`);
    out = mkdtempSync(join(tmpdir(), 'mup-lab-test-'));
    ({ topology: t, paths: p } = await labUp(PREFIX));
  }, 60_000);

  afterAll(async () => {
    rmSync(out, { recursive: true, force: true });
    const pid = Number((existsSync(labPaths(labTopology(PREFIX)).pidFile) && (await execa('cat', [labPaths(labTopology(PREFIX)).pidFile])).stdout) || 0);
    const removed = await labDown(PREFIX);
    expect(removed.some((r) => r.startsWith('daemon process'))).toBe(true);
    expect((await listNamespaces()).filter((n) => n.startsWith(`${PREFIX}-`))).toEqual([]);
    expect(existsSync(labPaths(labTopology(PREFIX)).dir)).toBe(false);
    if (pid > 0) expect(pidAlive(pid), 'the lab daemon is stopped').toBe(false);
    expect(await labDown(PREFIX), 'a second down finds nothing').toEqual([]);
  }, 30_000);

  it('ping and iperf3 TCP cross the translated path (GTP-U, H.M.GTP4.D, End.DX4 and back)', async () => {
    const f0 = await functions();
    const g0 = await gnbCounters(p.bpffs);
    const pr = await ping(t, 'translated', 5);
    expect(pr.received).toBe(5);
    const server = await iperfServer(t, 5301);
    try {
      const r = await tcp(t, 'translated', 2, 5301);
      expect(r.gbps).toBeGreaterThan(0);
    } finally {
      await server.stop();
    }
    // Both counter sets once traffic has stopped (two reads 200 ms apart agree):
    // the last packets of the connection may still be on their way.
    let f1 = await functions();
    let g1 = await gnbCounters(p.bpffs);
    for (let i = 0; i < 20; i++) {
      await new Promise((r) => setTimeout(r, 200));
      const [f2, g2] = [await functions(), await gnbCounters(p.bpffs)];
      const same = f2['h_m_gtp4_d']!.packets === f1['h_m_gtp4_d']!.packets && g2.ul_encap === g1.ul_encap && g2.dl_decap === g1.dl_decap;
      [f1, g1] = [f2, g2];
      if (same) break;
    }
    // Every encapsulated uplink packet was translated; downlink (replies, ACKs) came back through End.M.GTP4.E.
    expect(f1['h_m_gtp4_d']!.packets - f0['h_m_gtp4_d']!.packets).toBe(g1.ul_encap - g0.ul_encap);
    expect(g1.ul_encap - g0.ul_encap).toBeGreaterThan(1000);
    expect(f1['end_m_gtp4_e']!.packets - f0['end_m_gtp4_e']!.packets).toBe(g1.dl_decap - g0.dl_decap);
    expect(g1.dl_drop_malformed + g1.dl_drop_teid + g1.dl_drop_not_gpdu + g1.ul_drop_gso + g1.ul_drop_room).toBe(0);
  }, 30_000);

  it.each([
    { form: 'no SRH (DA = B)', policy: {} },
    { form: 'SRH [B], Segments Left 0 (srh: always)', policy: { srh: 'always' } },
    { form: 'SRH [B, S1], Segments Left 1, S1 a kernel End', policy: { segments: ['2001:db8:e::1'] } },
  ])('interop uplink, $form: the kernel End.DX4 accepts every packet we emit, the data network receives each', async ({ policy }) => {
    const N = 200;
    const base = { name: 'n3-uplink', match: `${t.mup.n3Addr}/32`, sr_prefix: t.sids.dnPrefix, src_prefix: t.sids.srcPrefix };
    expect((await labApi(p, 'PUT', '/v1/policies', { ...base, ...policy })).status).toBe(200);
    try {
      const [f0, k0, e0] = [await functions(), await dx4(t.sids.dnPrefix), await dx4(`${t.sids.coreEnd}/128`)];
      const r = await stream(t.ns.ue, t.ue.addr, t.ns.dn, t.dn.addr, N);
      const [f1, k1, e1] = [await functions(), await dx4(t.sids.dnPrefix), await dx4(`${t.sids.coreEnd}/128`)];
      expect(f1['h_m_gtp4_d']!.packets - f0['h_m_gtp4_d']!.packets).toBe(N);
      expect(k1.packets - k0.packets, 'End.DX4 counted every translated packet').toBe(N);
      expect(k1.errors - k0.errors).toBe(0);
      expect(e1.packets - e0.packets, 'the kernel End saw the packets with a segment').toBe('segments' in policy ? N : 0);
      expect(e1.errors - e0.errors).toBe(0);
      expect(new Set(r.seqs).size).toBe(N);
      expect(r.malformed).toBe(0);
    } finally {
      await labApi(p, 'PUT', '/v1/policies', base);
    }
  }, 30_000);

  it('interop downlink: kernel seg6 encap -> End.M.GTP4.E -> GTP-U the gNB emulator accepts, the UE receives each', async () => {
    const N = 200;
    const [f0, g0] = [await functions(), await gnbCounters(p.bpffs)];
    const r = await stream(t.ns.dn, t.dn.addr, t.ns.ue, t.ue.addr, N);
    const [f1, g1] = [await functions(), await gnbCounters(p.bpffs)];
    expect(f1['end_m_gtp4_e']!.packets - f0['end_m_gtp4_e']!.packets).toBe(N);
    expect(g1.dl_decap - g0.dl_decap, 'the gNB emulator accepted every G-PDU').toBe(N);
    expect(g1.dl_qfi_mismatch - g0.dl_qfi_mismatch, 'QFI 9 came back in the container').toBe(0);
    expect(g1.dl_no_container - g0.dl_no_container).toBe(0);
    expect(g1.dl_drop_teid + g1.dl_drop_malformed + g1.dl_drop_not_gpdu + g1.dl_drop_inner - (g0.dl_drop_teid + g0.dl_drop_malformed + g0.dl_drop_not_gpdu + g0.dl_drop_inner)).toBe(0);
    expect(new Set(r.seqs).size).toBe(N);
  }, 30_000);

  it('tshark decodes the N3 and the SRv6 wire without a malformed frame', async () => {
    const wires = await captureWires(t, out, 4, () => ping(t, 'translated', 4));
    const n3 = wires.find((w) => w.wire === 'N3')!;
    const srv6 = wires.find((w) => w.wire === 'SRv6')!;
    for (const w of wires) {
      expect(w.frames, `${w.wire}: request and reply, twice`).toBe(4);
      expect(w.malformed, `${w.wire}:\n${w.summary.join('\n')}`).toBe(0);
    }
    expect(n3.decoded).toMatch(/TEID: 0x00001001/);
    expect(n3.decoded).toMatch(/PDU Type: UL PDU SESSION INFORMATION \(1\)/);
    expect(n3.decoded).toMatch(/QoS Flow Identifier \(QFI\): 9/);
    expect(srv6.decoded).toContain(`Destination Address: ${t.sids.ulSid}`);
    expect(srv6.decoded).toContain(`Source Address: ${t.sids.ulSrc}`);
    // The downlink frames: End.M.GTP4.E's G-PDU with the downlink TEID, and the kernel's encap to our SID.
    const [dl, dls] = await Promise.all([
      execa('tshark', ['-n', '-r', n3.file, '-Y', 'gtp.teid == 0x2002', '-T', 'fields', '-e', 'gtp.ext_hdr.pdu_ses_con.pdu_type', '-e', 'gtp.ext_hdr.pdu_ses_con.qos_flow_id']),
      execa('tshark', ['-n', '-r', srv6.file, '-Y', `ipv6.dst == ${t.sids.dlSid}`, '-T', 'fields', '-e', 'ipv6.dst']),
    ]);
    expect(dl.stdout.trim().split('\n')).toEqual(['0\t9', '0\t9']);
    expect(dls.stdout.trim().split('\n')).toHaveLength(2);
  }, 30_000);

  it('MEC relocation through PUT /v1/policies under a 10,000 frames/s stream: nothing lost, duplicated or malformed', async () => {
    const r = await relocateOnLab(t, p, { prefix: PREFIX, out, keep: true, rate: 10_000, seconds: 2, switchAfter: 1, size: 100, progress: () => undefined });
    expect(r.sent).toBe(20_000);
    expect(r.siteA.received).toBeGreaterThan(0);
    expect(r.siteB.received).toBeGreaterThan(0);
    expect({ lost: r.lost, duplicated: r.duplicated, malformed: r.malformed, lostSeqs: r.lostSeqs }).toEqual({ lost: 0, duplicated: 0, malformed: 0, lostSeqs: [] });
    // Site A has the head of the stream, site B the tail.
    expect(r.siteB.firstSeq).toBe((r.siteA.lastSeq ?? -1) + 1);
    expect(r.downlinkAfter.received).toBe(5);
  }, 40_000);

  it('mup probe --lab: probes both ways through the lab, in-band stamps from the lab daemon, nothing lost', async () => {
    // A packet socket bound to one EtherType is served after TC ingress, where the gNB
    // emulator takes the downlink GTP-U away: the probe must capture before it.
    const r = await execa('node', [MUP_BIN, 'probe', '--lab', PREFIX, '--rate', '2000', '--duration', '1', '--grace', '300', '--json', '--no-progress'], {
      reject: false,
      timeout: 60_000,
    });
    expect(r.exitCode, String(r.stderr)).toBe(0);
    const rep = JSON.parse(r.stdout) as {
      directions: { dir: string; sequence: { sent: number; received: number; lost: number }; records: number; macStamped: number; agreement: { compared: number; within100ns: number } }[];
    };
    expect(rep.directions.map((d) => d.dir)).toEqual(['uplink', 'downlink']);
    for (const d of rep.directions) {
      expect({ dir: d.dir, sent: d.sequence.sent, received: d.sequence.received, lost: d.sequence.lost }).toEqual({ dir: d.dir, sent: 2000, received: 2000, lost: 0 });
      expect(d.records).toBe(2000);
      expect(d.macStamped).toBe(2000);
      expect(d.agreement).toMatchObject({ compared: 2000, within100ns: 2000 });
    }
    // Probing is switched off again in the lab daemon at the end.
    expect((await labApi<{ probe: { enabled: boolean } }>(p, 'GET', '/v1/probe')).body.probe.enabled).toBe(false);
  }, 60_000);

  it('mup lab --help teaches with examples; a bad prefix is refused before anything is made', async () => {
    const h = await execa('node', [MUP_BIN, 'lab', '--help'], { reject: false });
    expect(h.exitCode).toBe(0);
    expect(h.stdout).toMatch(/Examples:[\s\S]*mup lab run/);
    const bad = await execa('node', [MUP_BIN, 'lab', 'up', '--prefix', 'Bad_Prefix!'], { reject: false });
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr).toMatch(/lab prefix "Bad_Prefix!": use 1-20 lowercase/);
  });
});
