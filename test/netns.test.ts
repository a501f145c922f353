/**
 * The program on real interfaces, with the Linux kernel as the SRv6 peer.
 *
 *   gnb 198.51.100.1 ── to-mup│to-gnb ── mup ── to-core│to-mup ── core ── to-dn│to-core ── dn 203.0.113.5
 *        (gNB, python)        XDP mup_xdp        XDP mup_xdp     End.DX4 uplink       (data network,
 *                             198.51.100.254/24  2001:db8:99::1   seg6 encap downlink   UE's peer)
 *                             N3 192.0.2.10/32                    2001:db8:99::2
 *
 * Uplink:   gNB GTP-U to 192.0.2.10 -> H.M.GTP4.D -> SRv6 to 2001:db8:1::/48 -> core End.DX4 -> dn.
 * Downlink: dn UDP to the UE 10.45.0.2 -> core seg6 encap to 2001:db8:2::/48 -> End.M.GTP4.E
 *           -> GTP-U to 198.51.100.1 -> gNB.
 *
 * On a kernel without seg6 routes core is the kernel's SRH code instead
 * (test/helpers/topology.ts CorePeer 'srh'): the uplink policy writes an SRH
 * [B] (srh: always), which core's SRH endpoint decapsulates, and core's kernel
 * writes the downlink SRv6 from a socket's SRH. The rows that test
 * seg6local itself (End.DT6, End.DT4) need the routes and are skipped there.
 *
 * mup_xdp is loaded from the root namespace (openDataplane) and attached in
 * mup's namespace with setns(); the gNB's and the core's veths get an
 * XDP_PASS program, without which frames redirected (or XDP_TXed) into a
 * veth are dropped (docs/platform.md). Every namespace is named
 * mupt-<pid>-* and deleted in afterAll; no route or interface is created in
 * the root namespace and no packet leaves the lab.
 *
 * Expected SIDs and addresses are written out below from the RFC 9433
 * encoding (docs/spec.md §1), not computed by our code.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import type { Config, ForwardingMode } from '../src/config/types.js';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { Lab, listNamespaces, sweepStaleNamespaces, TESTPEER_OBJECT, waitFor, type Listener } from './helpers/netns.js';
import { buildLab, CORE_V6, DL_SID, DL_TUNSRC, DN, GNB, MUP_V6, N3, sendDownlink as sendToUe, UE } from './helpers/topology.js';
import { decodeWithScapy } from './helpers/scapy.js';
import { checkDownlinkGpdu, ipv4Text, ipv6Text } from './helpers/wire.js';
import { corePeer, needsKernelSrv6, peerTitle } from './helpers/kernel-srv6.js';

const haveObjects = existsSync(DEFAULT_OBJECT) && existsSync(TESTPEER_OBJECT);
const isRoot = process.getuid?.() === 0;
if (!haveObjects || !isRoot) {
  console.warn(
    `\n${'*'.repeat(78)}\n*** SKIPPING test/netns.test.ts: ` +
      `${!isRoot ? 'needs root (namespaces, XDP)' : `build ${DEFAULT_OBJECT} and ${TESTPEER_OBJECT} with \`make bpf\``}.\n` +
      `${'*'.repeat(78)}\n`,
  );
}

// ---------------------------------------------------------------------------
// Addresses: test/helpers/topology.ts

const UL = { teid: 0x0a0b0c0d, qfi: 9, sport: 40000, dport: 5000 };
const DL = { teid: 0x11223344, qfi: 5, sport: 5001, dport: 6000 };

/**
 * Uplink last SID B = 2001:db8:1::/48 | 192.0.2.10 (c000:020a) | QFI 9 << 2 = 0x24, TEID 0a0b0c0d:
 * bytes 2001 0db8 0001 | c000 020a | 24 0a0b0c0d | 00.
 */
const UL_SID = '2001:db8:1:c000:20a:240a:b0c:d00';
/** Uplink SA B' = 2001:db8:ff::/64 | 198.51.100.1 (c633:6401). */
const UL_SA = '2001:db8:ff:0:c633:6401::';

/** SIDs of the fib_fail rows: no route to them in mup's namespace, or a route that rejects. */
const FIB_FAIL_ROWS = [
  { name: 'no route', match: '192.0.2.20', prefix: '2001:db8:77::/48', route: null },
  { name: 'unreachable route', match: '192.0.2.21', prefix: '2001:db8:78::/48', route: 'unreachable' },
  { name: 'blackhole route', match: '192.0.2.22', prefix: '2001:db8:79::/48', route: 'blackhole' },
  { name: 'prohibit route', match: '192.0.2.23', prefix: '2001:db8:7a::/48', route: 'prohibit' },
] as const;

function configText(forwarding: ForwardingMode): string {
  const failPolicies = FIB_FAIL_ROWS.map(
    // A rule name has no spaces (config.md): the row's title with dashes.
    (r) => `  - { name: "${r.name.replaceAll(' ', '-')}", match: ${r.match}/32, sr_prefix: "${r.prefix}", src_prefix: "2001:db8:ff::/64" }`,
  );
  return `
settings: { forwarding: ${forwarding}, max_policies: 8, max_localsids: 4 }
policies:
  - { name: n3-uplink, match: ${N3}/32, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64"${SRH ? ', srh: always' : ''} }
${failPolicies.join('\n')}
localsids:
  - { name: n3-downlink, sid: "2001:db8:2::/48", src_prefix_len: 64 }
`;
}
/** Core is the kernel's SRH endpoint (no seg6 routes here): the uplink carries an SRH [B], 24 bytes before the inner packet. */
const SRH = corePeer === 'srh';
/** Where the inner packet of an uplink frame starts, and the IPv6 next header before it (Routing, or IPv4). */
const UL_INNER = 14 + 40 + (SRH ? 24 : 0);
const UL_NH = SRH ? '2b' : '04';

const config = (forwarding: ForwardingMode): Config => parseConfig(configText(forwarding), `netns-${forwarding}.yaml`);

// ---------------------------------------------------------------------------
// Packets

interface GpduSpec {
  teid: number;
  qfi: number;
  inner_src: string;
  inner_dst: string;
  sport: number;
  dport: number;
  payload: string;
}

interface Datagram {
  src: string;
  sport: number;
  /** IP TTL of the datagram as received (IP_RECVTTL). */
  ttl: number;
  data: string;
}

interface Frame {
  frame: string;
}

function payload(tag: string): Buffer {
  return Buffer.from(`srv6-mup netns ${tag} ${'x'.repeat(24)}`);
}

/** Check a downlink GTP-U datagram (UDP payload) as the gNB received it. */
function checkDownlinkGtpu(data: Buffer, body: Buffer): void {
  // The core's seg6 encap of a forwarded IPv4 packet runs as the route's
  // input handler (lwtunnel input redirect), before ip_forward(): the inner
  // TTL the data network sent (64) is not decremented, and we leave it alone.
  checkDownlinkGpdu(data, body, { teid: DL.teid, qfi: DL.qfi, src: DN, dst: UE, sport: DL.sport, dport: DL.dport, ttl: 64 });
}

// ---------------------------------------------------------------------------

describe.skipIf(!haveObjects || !isRoot)(peerTitle('srv6-mup on veths between namespaces, Linux SRv6 as the peer'), () => {
  let lab: Lab | undefined;
  let dp: Dataplane | undefined;
  const gpdu = new Map<string, Buffer>();

  /** Packets counted per event and per rule (by key path) since `before`. */
  type Snapshot = Map<string, bigint>;
  const snapshot = (): Snapshot => {
    const c = dp!.counters();
    const m: Snapshot = new Map();
    for (const [name, v] of Object.entries(c.events)) m.set(name, v.packets);
    for (const r of c.rules) m.set(r.where, r.packets);
    return m;
  };
  const delta = (before: Snapshot): Record<string, number> => {
    const out: Record<string, number> = {};
    for (const [k, v] of snapshot()) {
      const d = v - (before.get(k) ?? 0n);
      if (d !== 0n) out[k] = Number(d);
    }
    return out;
  };
  /** Wait until the counters moved by at least `want` (other keys may move too: ARP, ND). */
  const waitCounters = (before: Snapshot, want: Record<string, number>, ms = 3_000): Promise<Record<string, number>> =>
    waitFor(`counters ${JSON.stringify(want)}`, ms, () => {
      const d = delta(before);
      return Object.entries(want).every(([k, n]) => (d[k] ?? 0) >= n) ? d : undefined;
    }).catch((e: Error) => {
      throw new Error(`${e.message}; moved: ${JSON.stringify(delta(before))}`);
    });

  /** The gNB sends G-PDU `name` (count times) to `to`:2152 from a plain UDP socket. */
  const sendUplink = (name: string, count = 1, to = N3): Promise<string> =>
    lab!.peer('gnb', ['udp-send', '--bind', GNB, '--to', to, '--port', '2152', '--hex', gpdu.get(name)!.toString('hex'), '--count', String(count)]);
  /** The data network sends `body` (count times) to the UE, through core's kernel SRv6. */
  const sendDownlink = (body: Buffer, count = 1): Promise<void> =>
    sendToUe(lab!, corePeer, { sport: DL.sport, dport: DL.dport, hex: body.toString('hex'), count });
  const receiveInDn = (count: number): Promise<Listener<Datagram>> =>
    lab!.listen<Datagram>('dn', ['udp-recv', '--bind', DN, '--port', String(UL.dport), '--count', String(count), '--timeout', '5']);
  const receiveInGnb = (count: number): Promise<Listener<Datagram>> =>
    lab!.listen<Datagram>('gnb', ['udp-recv', '--bind', GNB, '--port', '2152', '--count', String(count), '--timeout', '5']);

  /** MAC address of an interface, as hex without colons. */
  const mac = async (ns: string, dev: string): Promise<string | undefined> =>
    (await lab!.ip(ns, 'link', 'show', dev)).match(/link\/ether ([0-9a-f:]+)/)?.[1]?.replace(/:/g, '');

  const ulBodies = ['ul-1', 'ul-2', 'ul-miss', 'ul-fail', 'ul-kernel', 'ul-tx'];

  beforeAll(async () => {
    const swept = await sweepStaleNamespaces();
    if (swept.length > 0) console.warn(`removed stale namespaces of earlier runs: ${swept.join(', ')}`);
    lab = await Lab.create(['gnb', 'mup', 'core', 'dn']);
    await buildLab(lab, {
      core: corePeer,
      mupBatch: FIB_FAIL_ROWS.filter((r) => r.route !== null).map((r) => `route add ${r.route} ${r.prefix}`),
    });

    const specs: GpduSpec[] = ulBodies.map((b) => ({
      teid: UL.teid, qfi: UL.qfi, inner_src: UE, inner_dst: DN, sport: UL.sport, dport: UL.dport,
      payload: payload(b).toString('hex'),
    }));
    const built = JSON.parse(await lab.peer('gnb', ['gpdu', JSON.stringify(specs)])) as string[];
    ulBodies.forEach((b, i) => gpdu.set(b, Buffer.from(built[i]!, 'hex')));

    dp = openDataplane({ config: config('fib') });
    dp.attach('to-gnb', { netns: lab.ns('mup'), mode: 'native' });
    dp.attach('to-core', { netns: lab.ns('mup'), mode: 'native' });
  });

  afterAll(async () => {
    const problems: string[] = [];
    try {
      if (dp !== undefined && lab !== undefined) {
        for (const a of dp.attachments) dp.detach(a.ifname, a.netns === undefined ? {} : { netns: a.netns });
        const links = await lab.ip('mup', '-d', 'link', 'show');
        if (/prog\/xdp/.test(links)) problems.push(`XDP still attached in mup after detach:\n${links}`);
      }
    } catch (e) {
      problems.push((e as Error).message);
    } finally {
      try {
        dp?.close();
      } catch (e) {
        problems.push((e as Error).message);
      }
      try {
        await lab?.destroy();
      } catch (e) {
        problems.push((e as Error).message);
      }
    }
    const left = (await listNamespaces()).filter((n) => lab !== undefined && n.startsWith(lab.prefix));
    if (left.length > 0) problems.push(`namespaces left: ${left.join(', ')}`);
    if (problems.length > 0) throw new Error(problems.join('\n'));
  });

  it('uplink: G-PDU -> H.M.GTP4.D -> FIB redirect -> kernel End.DX4 -> data network', async () => {
    const rounds = [
      // First round: the neighbour 2001:db8:99::2 may be unresolved: those
      // packets are fwd_fib_miss and the kernel forwards them (resolving it).
      { body: 'ul-1', count: 3, missAllowed: true, sniff: false },
      // Neighbour resolved: every packet is redirected by XDP. The core also
      // captures them: End.DX4 takes any SID under its /48, so the exact SID
      // (IPv4 DA, QFI, TEID) and the FIB's MACs are checked on the wire.
      { body: 'ul-2', count: 3, missAllowed: false, sniff: true },
    ];
    for (const r of rounds) {
      const before = snapshot();
      const rx = await receiveInDn(r.count);
      const sniff = r.sniff
        ? await lab!.listen<Frame>('core', [
            'sniff', '--iface', 'to-mup', '--ethertype', '0x86dd', '--count', String(r.count), '--timeout', '5',
            '--filter', `20=${UL_NH}`, // IPv6 next header IPv4 (or SRH): not neighbour discovery
          ])
        : undefined;
      await sendUplink(r.body, r.count);
      const got = await rx.done;
      if (sniff !== undefined) {
        const frames = (await sniff.done).map((f) => Buffer.from(f.frame, 'hex'));
        expect(frames.length, 'SRv6 frames seen by the core').toBe(r.count);
        const coreMac = await mac('core', 'to-mup');
        const mupMac = await mac('mup', 'to-core');
        for (const f of frames) {
          expect(f.subarray(0, 6).toString('hex'), 'destination MAC: the core, from the FIB').toBe(coreMac);
          expect(f.subarray(6, 12).toString('hex'), 'source MAC: mup to-core, from the FIB').toBe(mupMac);
          expect(ipv6Text(f, 14 + 8), 'IPv6 SA').toBe(UL_SA);
          expect(ipv6Text(f, 14 + 24), 'IPv6 DA = last SID').toBe(UL_SID);
          expect(f[14 + 7], 'hop limit').toBe(64);
          expect(f.subarray(UL_INNER).toString('hex'), 'inner packet').toBe(gpdu.get(r.body)!.subarray(16).toString('hex'));
        }
      }
      expect(got.length, `${r.body}: datagrams delivered to ${DN}:${UL.dport}`).toBe(r.count);
      for (const d of got) {
        expect(d.src).toBe(UE);
        expect(d.sport).toBe(UL.sport);
        expect(d.ttl, 'inner TTL: 64 from the UE, minus one for End.DX4 forwarding it').toBe(63);
        expect(Buffer.from(d.data, 'hex').toString()).toBe(payload(r.body).toString());
      }
      const d = await waitCounters(before, { 'policies[0]': r.count });
      expect(d['policies[0]'], 'rule n3-uplink').toBe(r.count);
      expect(d['fwd_fib_fail'] ?? 0).toBe(0);
      const miss = d['fwd_fib_miss'] ?? 0;
      expect((d['fwd_redirect'] ?? 0) + miss, `${r.body}: redirected or missed`).toBe(r.count);
      if (!r.missAllowed) expect(miss, `${r.body}: fib misses after the neighbour was resolved`).toBe(0);
    }
  });

  // A plain last SID (a PE's End.DT4/DT6, used as is) from an (N3, TEID)
  // policy: the kernel's seg6local decapsulates it and looks the inner
  // destination up (issue 13 items 1 and 2). End.DT6 in its table mode
  // needs no VRF; End.DT4 needs one (net.vrf.strict_mode), which a kernel
  // without CONFIG_NET_VRF (this one) cannot create: that row says so and
  // stops there.
  const DT_ROWS = [
    { name: 'End.DT6 (table mode)', body: 'ul-dt6', sid: '2001:db8:1:d6::6', teid: '0x0a0b0000/16', v6: true },
    { name: 'End.DT4 (VRF table)', body: 'ul-dt4', sid: '2001:db8:1:d4::4', teid: '0x0a0b0c00/24', v6: false },
  ] as const;
  const DN6 = '2001:db8:dd::5';
  const UE6 = '2001:db8:ee::2';

  it.skipIf(SRH).each(DT_ROWS)(needsKernelSrv6('uplink to a plain SID: (N3, TEID) policy -> H.M.GTP4.D -> kernel $name -> data network'), async (row) => {
    // SIDs under mup's route to the core, more specific than the core's End.DX4 /48.
    const core: string[] = [];
    if (row.v6) {
      await lab!.batch('core', ['addr add 2001:db8:dd::1/64 dev to-dn']);
      await lab!.batch('dn', [`addr add ${DN6}/64 dev to-core nodad`]);
      core.push(`route add ${row.sid}/128 encap seg6local action End.DT6 table 254 dev to-dn`);
    } else {
      try {
        await lab!.batch('core', ['link add vrf-dt4 type vrf table 104', 'link set vrf-dt4 up']);
      } catch (e) {
        if (!/Unknown device type/.test((e as Error).message)) throw e;
        console.warn(`End.DT4 not tested: this kernel has no VRF devices (CONFIG_NET_VRF), which End.DT4 needs`);
        return;
      }
      await lab!.sysctl('core', ['net.vrf.strict_mode=1']);
      core.push(`route add ${DN}/32 dev to-dn table 104`, `route add ${row.sid}/128 encap seg6local action End.DT4 vrftable 104 dev vrf-dt4`);
    }
    await lab!.batch('core', core);
    const text = configText('fib').replace(
      '\nlocalsids:',
      // TEID 0x0a0b0c0d (UL.teid) is in the row's prefix.
      `  - { name: n3-teid-dt, match: ${N3}/32, teid: "${row.teid}", sid: "${row.sid}", src_prefix: "2001:db8:ff::/64" }\nlocalsids:`.replace(/^/, '\n'),
    );
    const withDt = parseConfig(text, 'netns-dt.yaml');
    const rule = `policies[${withDt.policies.length - 1}]`;
    const [spec] = JSON.parse(
      await lab!.peer('gnb', ['gpdu', JSON.stringify([{
        teid: UL.teid, qfi: UL.qfi, inner_src: row.v6 ? UE6 : UE, inner_dst: row.v6 ? DN6 : DN, sport: UL.sport, dport: UL.dport,
        payload: payload(row.body).toString('hex'),
      }])]),
    ) as string[];
    gpdu.set(row.body, Buffer.from(spec!, 'hex'));
    try {
      dp!.sync(withDt);
      const count = 3;
      const before = snapshot();
      const rx = await lab!.listen<Datagram>('dn', ['udp-recv', '--bind', row.v6 ? DN6 : DN, '--port', String(UL.dport), '--count', String(count), '--timeout', '5']);
      const sniff = await lab!.listen<Frame>('core', [
        'sniff', '--iface', 'to-mup', '--ethertype', '0x86dd', '--count', String(count), '--timeout', '5', '--filter', row.v6 ? '20=29' : '20=04',
      ]);
      await sendUplink(row.body, count);
      const frames = (await sniff.done).map((f) => Buffer.from(f.frame, 'hex'));
      expect(frames.length, 'SRv6 frames seen by the core').toBe(count);
      for (const f of frames) {
        expect(ipv6Text(f, 14 + 24), 'IPv6 DA = the plain SID, no DA or Args in it').toBe(row.sid);
        expect(ipv6Text(f, 14 + 8), 'IPv6 SA').toBe(UL_SA);
        expect(f[14 + 6], 'next header: the inner IP version, no SRH').toBe(row.v6 ? 41 : 4);
        expect(f.subarray(14 + 40).toString('hex'), 'inner packet').toBe(gpdu.get(row.body)!.subarray(16).toString('hex'));
      }
      const got = await rx.done;
      expect(got.length, `datagrams ${row.name} delivered to the data network`).toBe(count);
      for (const d of got) {
        expect(d.src).toBe(row.v6 ? UE6 : UE);
        expect(d.ttl, 'inner TTL / hop limit: 64 from the UE, minus one for the PE forwarding it').toBe(63);
        expect(Buffer.from(d.data, 'hex').toString()).toBe(payload(row.body).toString());
      }
      const d = await waitCounters(before, { [rule]: count });
      expect(d['policies[0]'] ?? 0, 'the /32 policy without TEID: not used').toBe(0);
    } finally {
      dp!.sync(config('fib'));
      await lab!.batch('core', [`route del ${row.sid}/128`]).catch(() => undefined);
      if (!row.v6) await lab!.batch('core', ['link del vrf-dt4']).catch(() => undefined);
    }
  });

  it('uplink fib miss: neighbour flushed -> fwd_fib_miss, XDP_PASS, the kernel forwards it and resolves', async () => {
    await lab!.ip('mup', 'neigh', 'flush', 'dev', 'to-core');
    const before = snapshot();
    const rx = await receiveInDn(1);
    await sendUplink('ul-miss');
    const got = await rx.done;
    expect(got.map((d) => Buffer.from(d.data, 'hex').toString())).toEqual([payload('ul-miss').toString()]);
    const d = await waitCounters(before, { fwd_fib_miss: 1, 'policies[0]': 1 });
    expect(d['fwd_redirect'] ?? 0).toBe(0);
    const neigh = await lab!.ip('mup', '-6', 'neigh', 'show', CORE_V6, 'dev', 'to-core');
    expect(neigh, 'the kernel resolved the neighbour').toMatch(/lladdr/);
  });

  it('downlink: UDP to the UE -> kernel H.Encaps -> End.M.GTP4.E -> FIB redirect -> gNB', async () => {
    for (const [i, missAllowed] of [true, false].entries()) {
      const body = payload(`dl-${i + 1}`);
      const count = 3;
      const before = snapshot();
      const rx = await receiveInGnb(count);
      await sendDownlink(body, count);
      const got = await rx.done;
      expect(got.length, `round ${i + 1}: GTP-U datagrams delivered to ${GNB}:2152`).toBe(count);
      const ports = new Set<number>();
      for (const g of got) {
        expect(g.src, 'GTP-U source: IPv4 SA decoded from the IPv6 SA (P = 64)').toBe(N3);
        expect(g.sport).toBeGreaterThanOrEqual(49152);
        ports.add(g.sport);
        const data = Buffer.from(g.data, 'hex');
        try {
          checkDownlinkGtpu(data, body);
        } catch (e) {
          const ipUdp = Buffer.alloc(28); // decode the datagram with a stand-in outer IPv4/UDP header
          ipUdp[0] = 0x45;
          ipUdp.writeUInt16BE(28 + data.length, 2);
          ipUdp[9] = 17;
          ipUdp.writeUInt16BE(2152, 22);
          ipUdp.writeUInt16BE(8 + data.length, 24);
          const frame = Buffer.concat([Buffer.from('0000000000000000000000000800', 'hex'), ipUdp, data]);
          throw new Error(`${(e as Error).message}\n${await decodeWithScapy(frame)}`);
        }
      }
      expect(ports.size, 'one flow, one UDP source port').toBe(1);
      const d = await waitCounters(before, { 'localsids[0]': count });
      expect(d['localsids[0]'], 'rule n3-downlink').toBe(count);
      const miss = d['fwd_fib_miss'] ?? 0;
      expect((d['fwd_redirect'] ?? 0) + miss).toBe(count);
      if (!missAllowed) expect(miss).toBe(0);
    }
  });

  it('downlink fib miss: neighbour flushed -> fwd_fib_miss, XDP_PASS, the kernel forwards it and resolves', async () => {
    // Needs accept_local on to-core (buildLab): without it the kernel drops
    // the translated packet as a martian (source 192.0.2.10 is local), never
    // resolves the gNB, and every later packet misses again.
    await lab!.ip('mup', 'neigh', 'flush', 'dev', 'to-gnb');
    const body = payload('dl-miss');
    for (const want of ['fwd_fib_miss', 'fwd_redirect']) {
      const before = snapshot();
      const rx = await receiveInGnb(1);
      await sendDownlink(body);
      const got = await rx.done;
      expect(got.length, `${want}: GTP-U datagrams delivered to ${GNB}:2152`).toBe(1);
      checkDownlinkGtpu(Buffer.from(got[0]!.data, 'hex'), body);
      const d = await waitCounters(before, { [want]: 1, 'localsids[0]': 1 });
      expect(d['localsids[0]']).toBe(1);
      expect((d['fwd_fib_miss'] ?? 0) + (d['fwd_redirect'] ?? 0)).toBe(1);
    }
  });

  it.each(FIB_FAIL_ROWS.map((r, i) => [r.name, r, i] as const))(
    'uplink to a SID with %s: fwd_fib_fail, XDP_PASS, the kernel drops it',
    async (_name, row, i) => {
      const rule = `policies[${i + 1}]`;
      const snmp = async (): Promise<Map<string, number>> =>
        new Map(
          (await lab!.exec('mup', 'cat', ['/proc/net/snmp6']))
            .split('\n')
            .map((l) => l.trim().split(/\s+/))
            .map(([k, v]) => [k ?? '', Number(v)] as const),
        );
      const kernelBefore = await snmp();
      const before = snapshot();
      await sendUplink('ul-fail', 1, row.match);
      const d = await waitCounters(before, { fwd_fib_fail: 1, [rule]: 1 });
      expect(d[rule]).toBe(1);
      expect(d['fwd_redirect'] ?? 0).toBe(0);
      expect(d['fwd_fib_miss'] ?? 0).toBe(0);
      // The kernel saw the translated IPv6 packet and found no way to forward it.
      const kernelAfter = await snmp();
      const moved = (k: string): number => (kernelAfter.get(k) ?? 0) - (kernelBefore.get(k) ?? 0);
      expect(moved('Ip6InReceives'), 'the kernel received the translated packet').toBeGreaterThanOrEqual(1);
      expect(moved('Ip6OutForwDatagrams'), 'and did not forward it').toBe(0);
      if (row.route === null || row.route === 'unreachable' || row.route === 'prohibit') {
        expect(moved('Ip6InNoRoutes'), 'counted as no route').toBeGreaterThanOrEqual(1);
      }
    },
  );

  describe.each(['kernel', 'tx'] as const)('forwarding %s', (mode) => {
    beforeAll(() => dp!.sync(config(mode)));
    afterAll(() => dp!.sync(config('fib')));
    const event = mode === 'kernel' ? 'fwd_kernel' : 'fwd_tx';

    it('uplink', async () => {
      const body = mode === 'kernel' ? 'ul-kernel' : 'ul-tx';
      const before = snapshot();
      if (mode === 'kernel') {
        // The translated frame is a plain IPv6 packet: the kernel forwards it to core.
        const rx = await receiveInDn(1);
        await sendUplink(body);
        const got = await rx.done;
        expect(got.map((g) => Buffer.from(g.data, 'hex').toString())).toEqual([payload(body).toString()]);
      } else {
        // XDP_TX: back out of to-gnb, MACs swapped, to the gNB.
        const sniff = await lab!.listen<Frame>('gnb', [
          'sniff', '--iface', 'to-mup', '--ethertype', '0x86dd', '--count', '1', '--timeout', '5',
          '--filter', `20=${UL_NH}`, // IPv6 next header IPv4 (or SRH): not neighbour discovery
        ]);
        await sendUplink(body);
        const frames = (await sniff.done).map((f) => Buffer.from(f.frame, 'hex'));
        expect(frames.length, 'IPv6 frames sent back to the gNB').toBe(1);
        const f = frames[0]!;
        expect(f.subarray(0, 6).toString('hex'), 'destination MAC: the sender (swapped)').toBe(await mac('gnb', 'to-mup'));
        expect(f.subarray(6, 12).toString('hex'), 'source MAC: the receiver (swapped)').toBe(await mac('mup', 'to-gnb'));
        expect(ipv6Text(f, 14 + 8), 'IPv6 SA').toBe(UL_SA);
        expect(ipv6Text(f, 14 + 24), 'IPv6 DA = last SID').toBe(UL_SID);
        expect(f[14 + 6], 'next header: IPv4, no SRH (or the SRH)').toBe(SRH ? 43 : 4);
        // The inner packet is the G-PDU's, after the 16 bytes of GTP-U header and container.
        expect(f.subarray(UL_INNER).toString('hex')).toBe(gpdu.get(body)!.subarray(16).toString('hex'));
      }
      const d = await waitCounters(before, { [event]: 1, 'policies[0]': 1 });
      expect(d['fwd_redirect'] ?? 0).toBe(0);
    });

    it('downlink', async () => {
      const body = payload(`dl-${mode}`);
      const before = snapshot();
      if (mode === 'kernel') {
        const rx = await receiveInGnb(1);
        await sendDownlink(body);
        const got = await rx.done;
        expect(got.length, `GTP-U datagrams delivered to ${GNB}:2152`).toBe(1);
        expect(got[0]!.src).toBe(N3);
        checkDownlinkGtpu(Buffer.from(got[0]!.data, 'hex'), body);
      } else {
        // XDP_TX: the GTP-U goes back to the core, which has no use for it.
        const sniff = await lab!.listen<Frame>('core', [
          'sniff', '--iface', 'to-mup', '--ethertype', '0x0800', '--count', '1', '--timeout', '5',
          '--filter', '36=0868', // UDP destination port 2152
        ]);
        await sendDownlink(body);
        const frames = (await sniff.done).map((f) => Buffer.from(f.frame, 'hex'));
        expect(frames.length, 'IPv4 frames sent back to the core').toBe(1);
        const f = frames[0]!;
        expect(ipv4Text(f, 14 + 12)).toBe(N3);
        expect(ipv4Text(f, 14 + 16)).toBe(GNB);
        expect(f.readUInt16BE(14 + 20 + 2), 'UDP destination port').toBe(2152);
        checkDownlinkGtpu(f.subarray(14 + 28), body);
      }
      const d = await waitCounters(before, { [event]: 1, 'localsids[0]': 1 });
      expect(d['fwd_redirect'] ?? 0).toBe(0);
    });
  });
});
