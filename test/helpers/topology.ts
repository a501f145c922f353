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

export interface LabExtras {
  /** More `ip -batch` lines for mup (routes) and core (routes, seg6local). */
  readonly mupBatch?: readonly string[];
  readonly coreBatch?: readonly string[];
  /**
   * The core's kernel SRv6 routes (End.DX4 uplink, seg6 encap downlink); on by
   * default. Off for a test whose SRv6 is all the translator's, so that it
   * runs on a kernel without SRv6 routes.
   */
  readonly kernelSrv6?: boolean;
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
    ...(extras.kernelSrv6 === false
      ? []
      : [
          // Uplink: End.DX4 for every SID under the translator's sr_prefix.
          `route add 2001:db8:1::/48 encap seg6local action End.DX4 nh4 ${DN} dev to-dn`,
          // Downlink: H.Encaps of the UE's traffic to the SID that names gNB, QFI, TEID.
          `sr tunsrc set ${DL_TUNSRC}`,
          `route add ${UE_POOL} encap seg6 mode encap segs ${DL_SID} dev to-mup`,
        ]),
    `route add 2001:db8:2::/48 via ${MUP_V6} dev to-mup`,
    ...(extras.coreBatch ?? []),
  ]);
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
