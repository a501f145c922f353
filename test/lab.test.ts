/**
 * The lab end to end (src/lab/, `mup lab`), with a prefix of its own
 * (mlt<pid>) so it runs beside `make demo` and other test files:
 * - ping and a short iperf3 TCP through the translated path;
 * - interop: every uplink packet we emit is accepted by the kernel's
 *   End.DX4 (its own counters) and reaches the data network; the kernel's
 *   seg6 encap output is translated into GTP-U that the gNB emulator accepts
 *   (its counters) and reaches the UE; tshark decodes both wires without a
 *   malformed frame;
 * - MEC relocation of one of 100 UEs (its (N3, TEID) policy and its PE
 *   session) under a stream to and from every UE, with the kernel's PEs and
 *   with ours (mup daemons): per UE nothing lost, duplicated, reordered or
 *   malformed; moving the policy without the session loses that UE's
 *   downlink from B, and nothing else;
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
import { labApi, labDown, labPaths, labPe, labSetPe, labUp, peApi, type LabPaths } from '../src/lab/lab.js';
import { captureWires, peDownlinkFrame, peFrameFields, ping, tcp, iperfServer } from '../src/lab/measure.js';
import { relocateOnLab, type RelocateOptions, type RelocateReport } from '../src/lab/relocate.js';
import { labTopology, type LabTopology } from '../src/lab/topology.js';
import { listNamespaces } from '../src/host/netns-sweep.js';
import { pidAlive } from '../src/host/process.js';
import { corePeer, needsKernelSrv6, peerTitle } from './helpers/kernel-srv6.js';

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

/** The lab built as this kernel can (docs/lab.md): --core srh (and --pe mup) without SRv6 routes. */
const SRH = corePeer === 'srh';

describe.skipIf(!isRoot)(peerTitle('mup lab: the whole user plane in namespaces'), () => {
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
    // Named, not left to labUp: MUP_REQUIRE_KERNEL_SRV6=1 makes it the routes, which then fail on a kernel without them.
    ({ topology: t, paths: p } = await labUp(PREFIX, undefined, { core: corePeer }));
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

  // The kernel's seg6local itself (End.DX4 and End, read from their counters): the routes only.
  it.skipIf(SRH).each([
    { form: 'no SRH (DA = B)', policy: {} },
    { form: 'SRH [B], Segments Left 0 (srh: always)', policy: { srh: 'always' } },
    { form: 'SRH [B, S1], Segments Left 1, S1 a kernel End', policy: { segments: ['2001:db8:e::1'] } },
  ])(needsKernelSrv6('interop uplink, $form: the kernel End.DX4 accepts every packet we emit, the data network receives each'), async ({ policy }) => {
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

  it.skipIf(SRH)(needsKernelSrv6('interop downlink: kernel seg6 encap -> End.M.GTP4.E -> GTP-U the gNB emulator accepts, the UE receives each'), async () => {
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
    // Our PEs (--pe mup, with --core srh) send by XDP redirect, which core's capture on to-mup does not see.
    expect(dls.stdout.trim().split('\n').filter((l) => l !== '')).toHaveLength(SRH ? 0 : 2);
  }, 90_000);

  /** Every count of every UE, both ways: all 0 in a sound relocation. */
  const counts = (r: RelocateReport): Record<string, number[]> => {
    const out: Record<string, number[]> = {};
    for (const u of r.ues) {
      const c = [u.uplink.lost, u.uplink.duplicated, u.uplink.reordered, u.uplink.malformed, u.downlink.lost, u.downlink.duplicated, u.downlink.reordered, u.downlink.malformed];
      if (c.some((x) => x !== 0)) out[u.addr] = c;
    }
    return out;
  };
  const relocateOpts = (ue: number, extra: Partial<RelocateOptions> = {}): RelocateOptions => ({
    prefix: PREFIX,
    out,
    keep: true,
    // 6,000 frames, 60 per UE; the switch 1 s in leaves 3 s for the API
    // calls to land while the stream runs (they took up to 1.3 s at load 25).
    rate: 1500,
    seconds: 4,
    switchAfter: 1,
    size: 100,
    ue,
    progress: () => undefined,
    ...extra,
  });
  /** The moved UE's frames split cleanly between the sites, and every UE got every frame and echo. */
  const expectSound = (r: RelocateReport, ue: number): void => {
    expect(r.sent).toBe(6000);
    expect(r.ues).toHaveLength(100);
    expect(counts(r), 'UEs with a non-zero lost/dup/reordered/malformed count (uplink, downlink)').toEqual({});
    expect({ unattributed: r.unattributed, echoErrors: r.echoErrors }).toEqual({ unattributed: 0, echoErrors: 0 });
    const m = r.ues.find((u) => u.moved)!;
    expect(m.index).toBe(ue);
    expect(m.uplink.viaA, 'the moved UE reached A before the switch').toBeGreaterThan(0);
    expect(m.uplink.viaB, 'and B after it').toBeGreaterThan(0);
    expect(m.downlink.viaB, "B's echoes came back through B's PE").toBe(m.uplink.viaB);
    expect(r.moved.firstSeqAtB).toBe((r.moved.lastSeqAtA ?? -1) + 1);
    expect(r.moved.firstAtBMs).not.toBeNull();
    for (const u of r.ues.filter((x) => !x.moved)) expect({ addr: u.addr, viaB: u.uplink.viaB + u.downlink.viaB, received: u.uplink.received }).toEqual({ addr: u.addr, viaB: 0, received: 60 });
  };

  it.skipIf(SRH)(needsKernelSrv6('relocate one of 100 UEs, --pe kernel: its policy and PE session move; 0 lost, duplicated, reordered, malformed for it and every other, both ways'), async () => {
    expect(labPe(p)).toBe('kernel');
    const r = await relocateOnLab(t, p, relocateOpts(5));
    expect(r.pe).toBe('kernel');
    expect(r.notes.join(' ')).toMatch(/ip sr tunsrc.*traffic class 0 for inner IPv4/);
    expectSound(r, 5);
    // Put back: the policy and the session are at A again.
    expect((await execa('ip', ['-n', t.ns.core, 'route', 'show', 'table', '102'])).stdout).not.toContain(t.ues[5]!.addr);
    expect((await execa('ip', ['-n', t.ns.core, 'route', 'show', 'table', '101'])).stdout).toContain(`${t.ues[5]!.addr} `);
  }, 60_000);

  let kernelFrame: ReturnType<typeof peFrameFields> | undefined;
  it.skipIf(SRH)(needsKernelSrv6("the kernel PE's downlink G-PDU at the gNB (compared with ours below)"), async () => {
    expect(labPe(p)).toBe('kernel');
    kernelFrame = peFrameFields(await peDownlinkFrame(t, join(out, 'pe-kernel.pcap'), STREAM_PY));
    expect(kernelFrame).toMatchObject({ src: t.mup.n3Addr, dst: t.gnb.addr, teid: t.ues[0]!.dlTeid, qfi: t.ues[0]!.qfi, innerTos: 0xb8 });
    expect(kernelFrame.outerTos, "the kernel's H.Encaps sets traffic class 0 for inner IPv4").toBe(0);
  }, 30_000);

  it('--pe mup: the PEs are mup daemons; the same relocation is sound, and the downlink from our sessions reaches the gNB emulator', async () => {
    await labSetPe(t, p, 'mup');
    expect(labPe(p)).toBe('mup');
    // Our session and the kernel's encap give the gNB the same G-PDU, modulo
    // the traffic class (ours copies the inner DSCP/ECN to the outer TOS via
    // End.M.GTP4.E) and the inner TTL (masked: RFC-wise the kernel may lower it).
    const ours = peFrameFields(await peDownlinkFrame(t, join(out, 'pe-mup.pcap'), STREAM_PY));
    expect(ours.outerTos, 'DSCP 46 reaches the GTP-U header').toBe(0xb8);
    expect(ours.innerTtl, 'our PE leaves the inner packet unchanged').toBe(64);
    expect(ours).toMatchObject({ src: t.mup.n3Addr, dst: t.gnb.addr, teid: t.ues[0]!.dlTeid, qfi: t.ues[0]!.qfi, innerTos: 0xb8 });
    if (!SRH) {
      // With --core srh there is no kernel PE to compare with (the test above is not run).
      expect(kernelFrame, 'the kernel frame was captured').toBeDefined();
      expect({ ...ours, outerTos: 0, innerTtl: 0 }).toEqual({ ...kernelFrame!, outerTos: 0, innerTtl: 0 });
    }
    const r = await relocateOnLab(t, p, relocateOpts(42));
    expect(r.pe).toBe('mup');
    expectSound(r, 42);
    const sessions = async (site: 'meca' | 'mecb'): Promise<string[]> => (await peApi<{ sessions: { ue: string }[] }>(p, site, 'GET', '/v1/sessions')).body.sessions.map((x) => x.ue);
    expect(await sessions('meca')).toContain(`${t.ues[42]!.addr}/32`);
    expect(await sessions('mecb')).toEqual([]);
    // The data network's PE: H.M.Session.Encaps of UE 0's downlink -> End.M.GTP4.E -> the gNB emulator.
    const N = 200;
    const peFns = async (): Promise<Record<string, Fn>> => (await peApi<{ functions: Record<string, Fn> }>(p, 'dn', 'GET', '/v1/counters?rules=none')).body.functions;
    const [e0, f0, g0] = [await peFns(), await functions(), await gnbCounters(p.bpffs)];
    const rr = await stream(t.ns.dn, t.dn.addr, t.ns.ue, t.ue.addr, N);
    const [e1, f1, g1] = [await peFns(), await functions(), await gnbCounters(p.bpffs)];
    expect(e1['h_m_session_encaps']!.packets - e0['h_m_session_encaps']!.packets).toBe(N);
    expect(f1['end_m_gtp4_e']!.packets - f0['end_m_gtp4_e']!.packets).toBe(N);
    expect(g1.dl_decap - g0.dl_decap).toBe(N);
    expect(g1.dl_qfi_mismatch + g1.dl_drop_ue + g1.dl_drop_teid - (g0.dl_qfi_mismatch + g0.dl_drop_ue + g0.dl_drop_teid)).toBe(0);
    expect(new Set(rr.seqs).size).toBe(N);
  }, 90_000);

  it('a broken relocation (the policy moves, the PE session stays at A) loses the moved UE\'s downlink from B, and only that', async () => {
    expect(labPe(p)).toBe('mup');
    const r = await relocateOnLab(t, p, relocateOpts(9, { movePeSession: false }));
    const m = r.ues.find((u) => u.moved)!;
    expect(m.uplink.viaB).toBeGreaterThan(0);
    expect(m.uplink.lost).toBe(0);
    expect(m.downlink.viaB, 'no echo from B reaches the UE: B has no session for it').toBe(0);
    expect(m.downlink.lost).toBe(m.uplink.viaB);
    expect(Object.keys(counts(r)), 'every other UE is untouched').toEqual([m.addr]);
  }, 60_000);

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
