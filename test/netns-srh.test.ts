/**
 * The program on real interfaces with the kernel's own SRH code as the SRv6
 * peer, on any kernel: no seg6 or seg6local route (CONFIG_IPV6_SEG6_LWTUNNEL)
 * is needed, so this runs where test/netns.test.ts cannot.
 *
 *   gnb ── to-mup│to-gnb ── mup (XDP mup_xdp) ── to-core│to-mup ── core ── to-dn│to-core ── dn
 *
 * Uplink: the gNB's G-PDU -> H.M.GTP4.D with an SRH -> core, where the SID
 * prefix is a local route and seg6_enabled is on: the kernel's SRH receive
 * path (RFC 8754 endpoint; ipv6_srh_rcv) takes Segments Left 1 to the next
 * segment and, at Segments Left 0 with an IPv4 next header, decapsulates
 * and forwards the inner packet to dn. An uplink without an SRH has nothing
 * to decapsulate it there (no ip6tnl): that form is netns.test.ts's.
 * Downlink: a raw IPv6 socket in core with an SRH as its IPV6_RTHDR option
 * (the kernel writes IPv6 header and SRH: seg6_validate_srh,
 * ipv6_push_rthdr4) -> End.M.GTP4.E -> GTP-U to the gNB.
 *
 * Control rows: with seg6_enabled off in core the same uplink is not
 * delivered (so what arrives was the kernel's SRH processing), and a socket
 * SRH the kernel refuses is refused.
 *
 * Every namespace is mupt-<pid>-*, deleted in afterAll; nothing is created
 * in the root namespace. Expected SIDs are written out from RFC 9433's
 * encoding (docs/spec.md), not computed by our code.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { seg6Enabled } from '../src/host/kernel-srv6.js';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { closeLab, Lab, type Listener, sweepStaleNamespaces, TESTPEER_OBJECT } from './helpers/netns.js';
import { buildLab, CORE_V6, DL_SID, DL_TUNSRC, DN, GNB, N3, sendDownlink, sidToDn, UE } from './helpers/topology.js';
import { checkDownlinkGpdu, ipv6Text } from './helpers/wire.js';

const ready = existsSync(DEFAULT_OBJECT) && existsSync(TESTPEER_OBJECT) && process.getuid?.() === 0;

const UL = { teid: 0x0a0b0c0d, qfi: 9, sport: 40000, dport: 5000 };
const DL = { teid: 0x11223344, qfi: 5, sport: 5001, dport: 6000 };
/** B = 2001:db8:1::/48 | 192.0.2.10 (c000:020a) | QFI 9 << 2 = 0x24, TEID 0a0b0c0d | 00. */
const UL_SID = '2001:db8:1:c000:20a:240a:b0c:d00';
/** B' = 2001:db8:ff::/64 | 198.51.100.1 (c633:6401). */
const UL_SA = '2001:db8:ff:0:c633:6401::';
/** A segment before B: an address of core, where the kernel's SRH code moves on to B. */
const S1 = '2001:db8:e::1';

const ROWS = [
  { form: 'SRH [B], Segments Left 0 (srh: always)', extra: 'srh: always', first: UL_SID, segments: [UL_SID] },
  { form: 'SRH [B, S1], Segments Left 1: S1 first, then B', extra: `segments: ["${S1}"]`, first: S1, segments: [UL_SID, S1] },
] as const;

const configText = (extra: string): string => `
settings: { forwarding: fib, max_policies: 4, max_localsids: 4 }
policies:
  - { name: n3-uplink, match: ${N3}/32, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64", ${extra} }
localsids:
  - { name: n3-downlink, sid: "2001:db8:2::/48", src_prefix_len: 64 }
`;

interface Datagram {
  src: string;
  sport: number;
  ttl: number;
  data: string;
}

const body = (tag: string): Buffer => Buffer.from(`srv6-mup srh ${tag} ${'y'.repeat(20)}`);

describe.skipIf(!ready)("srv6-mup on veths, the kernel's SRH endpoint and SRH sockets as the peer (no seg6 routes)", () => {
  let lab: Lab | undefined;
  let dp: Dataplane | undefined;

  const counted = (where: string): bigint => dp!.counters().rules.find((r) => r.where === where)?.packets ?? 0n;
  const gpdu = async (tag: string): Promise<string> => {
    const spec = { teid: UL.teid, qfi: UL.qfi, inner_src: UE, inner_dst: DN, sport: UL.sport, dport: UL.dport, payload: body(tag).toString('hex') };
    return (JSON.parse(await lab!.peer('gnb', ['gpdu', JSON.stringify([spec])])) as string[])[0]!;
  };
  const receiveInDn = (count: number, timeout = 5): Promise<Listener<Datagram>> =>
    lab!.listen<Datagram>('dn', ['udp-recv', '--bind', DN, '--port', String(UL.dport), '--count', String(count), '--timeout', String(timeout)]);
  const sendUplink = async (tag: string, count: number): Promise<void> => {
    await lab!.peer('gnb', ['udp-send', '--bind', GNB, '--to', N3, '--port', '2152', '--hex', await gpdu(tag), '--count', String(count)]);
  };
  const seg6 = (on: boolean): Promise<void> => lab!.sysctl('core', seg6Enabled('to-mup', on));

  beforeAll(async () => {
    const swept = await sweepStaleNamespaces();
    if (swept.length > 0) console.warn(`removed stale namespaces of earlier runs: ${swept.join(', ')}`);
    lab = await Lab.create(['gnb', 'mup', 'core', 'dn']);
    await buildLab(lab, {
      core: 'srh',
      mupBatch: [`route add 2001:db8:e::/64 via ${CORE_V6} dev to-core`],
      coreBatch: [sidToDn('2001:db8:e::/64', 'srh')],
    });
    dp = openDataplane({ config: parseConfig(configText(ROWS[0].extra), 'srh.yaml') });
    dp.attach('to-gnb', { netns: lab.ns('mup'), mode: 'native' });
    dp.attach('to-core', { netns: lab.ns('mup'), mode: 'native' });
  }, 60_000);

  afterAll(() => closeLab(dp, lab));

  it.each(ROWS)('uplink, $form: the kernel decapsulates every packet and forwards it to the data network', async (row) => {
    dp!.sync(parseConfig(configText(row.extra), 'srh.yaml'));
    const N = 5;
    // The first packets may find core's address unresolved in mup's neighbour table: those the
    // translator leaves to mup's kernel (fwd_fib_miss), which forwards them once it has resolved it.
    const rx = await receiveInDn(N);
    const sniff = await lab!.listen<{ frame: string }>('core', [
      'sniff', '--iface', 'to-mup', '--ethertype', '0x86dd', '--count', String(N), '--timeout', '5',
      '--filter', '20=2b', // IPv6 next header: Routing
    ]);
    const before = counted('policies[0]');
    await sendUplink(row.form, N);
    const got = await rx.done;
    const frames = (await sniff.done).map((f) => Buffer.from(f.frame, 'hex'));
    expect(frames.length, 'SRv6 frames with an SRH seen by core').toBe(N);
    for (const f of frames) {
      const srh = 14 + 40;
      expect(ipv6Text(f, 14 + 8), 'IPv6 SA').toBe(UL_SA);
      expect(ipv6Text(f, 14 + 24), 'IPv6 DA: the first segment').toBe(row.first);
      expect(f[srh], 'SRH next header: IPv4').toBe(4);
      expect(f[srh + 2], 'routing type 4').toBe(4);
      expect(f[srh + 3], 'Segments Left').toBe(row.segments.length - 1);
      expect(f[srh + 4], 'Last Entry').toBe(row.segments.length - 1);
      const list = row.segments.map((_, i) => ipv6Text(f, srh + 8 + 16 * i));
      expect(list, 'Segment List, last segment first').toEqual([...row.segments]);
    }
    expect(got.length, `datagrams delivered to ${DN}:${UL.dport}`).toBe(N);
    for (const d of got) {
      expect(d.src).toBe(UE);
      expect(d.sport).toBe(UL.sport);
      expect(d.ttl, 'inner TTL: 64 from the UE, minus one for core forwarding it').toBe(63);
      expect(Buffer.from(d.data, 'hex').toString()).toBe(body(row.form).toString());
    }
    expect(counted('policies[0]') - before, 'rule n3-uplink').toBe(BigInt(N));
  });

  it('control: with seg6_enabled off in core the same packets are not delivered (what arrived above was the SRH code)', async () => {
    dp!.sync(parseConfig(configText(ROWS[0].extra), 'srh.yaml'));
    await seg6(false);
    try {
      const rx = await receiveInDn(1, 1.5);
      const before = counted('policies[0]');
      await sendUplink('off', 3);
      expect(await rx.done, 'nothing reaches the data network').toEqual([]);
      expect(counted('policies[0]') - before, 'the translator did send them').toBe(3n);
    } finally {
      await seg6(true);
    }
  });

  it('downlink: the kernel-built SRv6 packet (socket SRH [DL SID], Segments Left 0) -> End.M.GTP4.E -> the G-PDU the gNB receives', async () => {
    const N = 3;
    const payload = body('down');
    const rx = await lab!.listen<Datagram>('gnb', ['udp-recv', '--bind', GNB, '--port', '2152', '--count', String(N), '--timeout', '5']);
    const before = counted('localsids[0]');
    await sendDownlink(lab!, 'srh', { sport: DL.sport, dport: DL.dport, hex: payload.toString('hex'), count: N });
    const got = await rx.done;
    expect(got.length, 'G-PDUs at the gNB').toBe(N);
    for (const d of got) {
      // The outer IPv4 source is the N3 address carried in the SRv6 source (src_prefix_len 64).
      expect(d.src).toBe(N3);
      // Core sent the inner packet itself (not forwarded): TTL 64 as written.
      checkDownlinkGpdu(Buffer.from(d.data, 'hex'), payload, { teid: DL.teid, qfi: DL.qfi, src: DN, dst: UE, sport: DL.sport, dport: DL.dport, ttl: 64 });
    }
    expect(counted('localsids[0]') - before, 'local SID n3-downlink').toBe(BigInt(N));
  });

  it("control: an SRH the kernel's validation refuses (Last Entry beyond the list) is refused at the socket, nothing is sent", async () => {
    const r = await lab!
      .peer('core', ['srh-send', '--bind', DL_TUNSRC, '--segments', DL_SID, '--inner-src', DN, '--inner-dst', UE, '--sport', '1', '--dport', '1', '--hex', '00', '--bad-last-entry'])
      .then(() => 'sent', (e: Error) => e.message);
    expect(r).toMatch(/Invalid argument|EINVAL/);
  });
});
