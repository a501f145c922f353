/**
 * The namespace topology of the end-to-end tests, with the Linux kernel as
 * the SRv6 peer:
 *
 *   gnb 198.51.100.1 ── to-mup│to-gnb ── mup ── to-core│to-mup ── core ── to-dn│to-core ── dn 203.0.113.5
 *        (gNB, python)        XDP mup_xdp        XDP mup_xdp     End.DX4 uplink       (data network,
 *                             198.51.100.254/24  2001:db8:99::1   seg6 encap downlink   UE's peer)
 *                             N3 192.0.2.10/32                    2001:db8:99::2
 *
 * Uplink:   gNB GTP-U to 192.0.2.10 -> H.M.GTP4.D -> SRv6 to 2001:db8:1::/48 -> core End.DX4 -> dn.
 * Downlink: dn UDP to the UE 10.45.0.2 -> core seg6 encap to DL_SID (2001:db8:2::/48) -> End.M.GTP4.E
 *           -> GTP-U to 198.51.100.1 -> gNB.
 *
 * The program is not attached here (the test does it, or its daemon); the
 * gNB's and the core's veths get an XDP_PASS program, without which frames
 * redirected (or XDP_TXed) into a veth are dropped (docs/platform.md).
 */
import { seg6Enabled } from '../../src/host/kernel-srv6.js';
import { Lab, TESTPEER_OBJECT } from './netns.js';

export const GNB = '198.51.100.1';
export const MUP_N3_LINK = '198.51.100.254';
/** The translator's GTP-U address (the uplink policy's match). */
export const N3 = '192.0.2.10';
export const UE = '10.45.0.2';
export const UE_POOL = '10.45.0.0/16';
export const DN = '203.0.113.5';
export const CORE_DN_LINK = '203.0.113.1';
export const MUP_V6 = '2001:db8:99::1';
export const CORE_V6 = '2001:db8:99::2';
/** Downlink SID = 2001:db8:2::/48 | 198.51.100.1 (c633:6401) | QFI 5 << 2 = 0x14, TEID 11223344 | 00. */
export const DL_SID = '2001:db8:2:c633:6401:1411:2233:4400';
/** The core's H.Encaps source: 2001:db8:ff::/64 (P = 64) | 192.0.2.10, so the GTP-U comes from N3. */
export const DL_TUNSRC = '2001:db8:ff:0:c000:20a::';

/**
 * How core is the SRv6 peer.
 * - 'routes': the kernel's SRv6 routes, seg6local End.DX4 for the uplink and
 *   seg6 encap for the downlink (CONFIG_IPV6_SEG6_LWTUNNEL).
 * - 'srh': the kernel's SRH code, in every IPv6 kernel: the SID prefixes are
 *   local routes and seg6_enabled is on, so an uplink with an SRH is taken
 *   to its last segment and decapsulated to dn (the translator must write
 *   one: srh: always); the downlink is written by a raw socket's SRH
 *   option in core (sendDownlink).
 * - 'none': core only forwards (a test whose SRv6 is all the translator's).
 */
export type CorePeer = 'routes' | 'srh' | 'none';

/** core's `ip -batch` line for a SID prefix whose uplink ends in the data network. */
export function sidToDn(prefix: string, core: CorePeer): string {
  if (core === 'routes') return `route add ${prefix} encap seg6local action End.DX4 nh4 ${DN} dev to-dn`;
  if (core === 'srh') return `route add local ${prefix} dev lo`;
  throw new Error(`core '${core}' ends no SID`);
}

/**
 * The data network's downlink to the UE through core: with 'routes' dn sends
 * it and core's seg6 encap takes it to DL_SID; with 'srh' core's kernel writes
 * the same SRv6 packet (IPv6 from DL_TUNSRC to DL_SID, SRH [DL_SID] with
 * Segments Left 0, inner IPv4/UDP from DN to the UE) from a raw socket.
 */
export async function sendDownlink(lab: Lab, core: CorePeer, o: { sport: number; dport: number; hex: string; count: number; interval?: number }): Promise<void> {
  const every = ['--count', String(o.count), '--interval', String(o.interval ?? 0.02)];
  if (core === 'srh') {
    await lab.peer('core', [
      'srh-send', '--bind', DL_TUNSRC, '--segments', DL_SID, '--inner-src', DN, '--inner-dst', UE,
      '--sport', String(o.sport), '--dport', String(o.dport), '--hex', o.hex, ...every,
    ]);
  } else {
    await lab.peer('dn', ['udp-send', '--bind', DN, '--sport', String(o.sport), '--to', UE, '--port', String(o.dport), '--hex', o.hex, ...every]);
  }
}

export interface LabExtras {
  /** More `ip -batch` lines for mup (routes) and core (routes, seg6local). */
  readonly mupBatch?: readonly string[];
  readonly coreBatch?: readonly string[];
  /** How core is the SRv6 peer (CorePeer); 'routes' by default. */
  readonly core?: CorePeer;
}

/** core's SRv6 peer lines for the uplink SIDs under 2001:db8:1::/48 and the downlink to the UEs. */
function coreLines(core: CorePeer): string[] {
  if (core === 'routes') {
    return [
      // Uplink: End.DX4 for every SID under the translator's sr_prefix.
      sidToDn('2001:db8:1::/48', core),
      // Downlink: H.Encaps of the UE's traffic to the SID that names gNB, QFI, TEID.
      `sr tunsrc set ${DL_TUNSRC}`,
      `route add ${UE_POOL} encap seg6 mode encap segs ${DL_SID} dev to-mup`,
    ];
  }
  if (core === 'srh') {
    return [
      'link set lo up',
      // The SIDs are core's own addresses, as a router's locator is.
      sidToDn('2001:db8:1::/48', core),
      // The downlink's IPv6 source (its low bits carry N3 for End.M.GTP4.E), bound by sendDownlink.
      `addr add ${DL_TUNSRC}/128 dev lo`,
    ];
  }
  return [];
}

/** Build the four-namespace topology above in `lab` (namespaces gnb, mup, core, dn). */
export async function buildLab(lab: Lab, extras: LabExtras = {}): Promise<void> {
  // Before any interface exists, so that the new ones inherit the defaults:
  // no reverse-path filter, no DAD (a link-local address stays tentative for
  // a second, and the first neighbour solicitation waits for it).
  const quiet = [
    'net.ipv4.conf.all.rp_filter=0',
    'net.ipv4.conf.default.rp_filter=0',
    'net.ipv6.conf.all.accept_dad=0',
    'net.ipv6.conf.default.accept_dad=0',
  ];
  const router = ['net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1'];
  await lab.sysctl('gnb', quiet);
  await lab.sysctl('dn', quiet);
  await lab.sysctl('core', [...quiet, ...router]);
  await lab.sysctl('mup', [...quiet, ...router]);

  // veth pairs, each end created directly in its namespace.
  await lab.ip('gnb', 'link', 'add', 'to-mup', 'type', 'veth', 'peer', 'name', 'to-gnb', 'netns', lab.ns('mup'));
  await lab.ip('mup', 'link', 'add', 'to-core', 'type', 'veth', 'peer', 'name', 'to-mup', 'netns', lab.ns('core'));
  await lab.ip('core', 'link', 'add', 'to-dn', 'type', 'veth', 'peer', 'name', 'to-core', 'netns', lab.ns('dn'));

  // End.M.GTP4.E's output comes from 192.0.2.10, a local address of mup.
  // When the kernel forwards it (forwarding kernel, or a fib miss), it
  // arrives on to-core with a local source: a martian, dropped unless
  // accept_local is on for that interface.
  await lab.sysctl('mup', ['net.ipv4.conf.to-core.accept_local=1']);

  await lab.batch('gnb', [
    `addr add ${GNB}/24 dev to-mup`,
    'link set to-mup up',
    `route add 192.0.2.0/24 via ${MUP_N3_LINK} dev to-mup`,
  ]);
  await lab.batch('mup', [
    `addr add ${MUP_N3_LINK}/24 dev to-gnb`,
    `addr add ${N3}/32 dev to-gnb`,
    `addr add ${MUP_V6}/64 dev to-core`,
    'link set to-gnb up',
    'link set to-core up',
    `route add 2001:db8:1::/48 via ${CORE_V6} dev to-core`,
    ...(extras.mupBatch ?? []),
  ]);
  await lab.batch('core', [
    `addr add ${CORE_V6}/64 dev to-mup`,
    `addr add ${CORE_DN_LINK}/24 dev to-dn`,
    'link set to-mup up',
    'link set to-dn up',
    ...coreLines(extras.core ?? 'routes'),
    `route add 2001:db8:2::/48 via ${MUP_V6} dev to-mup`,
    ...(extras.coreBatch ?? []),
  ]);
  if ((extras.core ?? 'routes') === 'srh') await lab.sysctl('core', seg6Enabled('to-mup'));
  await lab.batch('dn', [`addr add ${DN}/24 dev to-core`, 'link set to-core up', `route add default via ${CORE_DN_LINK}`]);
  // The data network's UDP must leave with a complete checksum, as from a
  // real host. With the veth's checksum offload on, the packet carries only
  // the pseudo-header sum (CHECKSUM_PARTIAL); the kernels on the way trust
  // the skb flag, but XDP reads bytes, and End.M.GTP4.E would hand the gNB
  // an inner UDP packet whose checksum never gets finished.
  await lab.peer('dn', ['tx-csum-off', '--iface', 'to-core']);

  // Receivers of XDP redirects / XDP_TX need an XDP program on their veth.
  for (const [ns, dev] of [
    ['gnb', 'to-mup'],
    ['core', 'to-mup'],
  ] as const) {
    await lab.ip(ns, 'link', 'set', 'dev', dev, 'xdpdrv', 'obj', TESTPEER_OBJECT, 'sec', 'xdp');
  }
}
