/**
 * The lab's topology as one typed object built from a namespace prefix:
 * namespace names, interface names, addresses, SIDs, TEIDs, MTUs. Everything
 * that builds, measures or probes the lab reads it from here (the latency
 * probe too: it injects GTP-U on `gnb.n3` and captures SRv6 on `core.toMup`).
 *
 *  ue ─── gnb ═════ mup ═════ core ─── dn        (203.0.113.5: iperf3, ping)
 *                              ├────── mec-a     (203.0.113.100 anycast)
 *                              └────── mec-b     (203.0.113.100 anycast)
 *
 * Translated path: UE IPv4 from 10.45.0.2 -> gNB emulator (TC BPF) GTP-U
 * TEID/QFI to N3 192.0.2.10 -> mup H.M.GTP4.D -> SRv6 to sr_prefix|N3|args
 * -> core End.DX4 -> dn; back: core seg6 encap to the downlink SID (gNB,
 * TEID, QFI) -> mup End.M.GTP4.E -> GTP-U -> gNB emulator -> UE.
 * Plain path (the baseline): UE IPv4 from 10.99.0.2, routed by the kernels
 * of gnb, mup and core over the same veths (an IPv4 link between mup and
 * core is added for it), no GTP-U, no SRv6.
 */
import { parseIpv4, parseIpv6Prefix, formatIpv6 } from '../sid/addr.js';
import { encodeGtp4Sid, encodeGtp4Src, qfi, teid } from '../sid/mobile.js';

export const DEFAULT_PREFIX = 'mlab';

/** Namespace short names, in creation order. */
export const LAB_NODES = ['ue', 'gnb', 'mup', 'core', 'dn', 'meca', 'mecb'] as const;
export type LabNode = (typeof LAB_NODES)[number];

export interface LabTopology {
  readonly prefix: string;
  /** Full namespace name of each node: `<prefix>-<node>`. */
  readonly ns: Readonly<Record<LabNode, string>>;
  readonly ue: { readonly dev: string; readonly addr: string; readonly plainAddr: string; readonly mtu: number };
  readonly gnb: {
    /** Veth facing the UE: gnb_uplink (TC ingress) encapsulates here. */
    readonly toUe: string;
    /** N3 veth facing the translator: gnb_downlink (TC ingress) decapsulates here. */
    readonly n3: string;
    readonly ueGw: string;
    readonly plainGw: string;
    readonly addr: string;
    readonly ulTeid: number;
    readonly dlTeid: number;
    readonly qfi: number;
    readonly mtu: number;
  };
  readonly mup: {
    /** The translator's N3 interface (XDP) and its SRv6 interface (XDP). */
    readonly n3: string;
    readonly core: string;
    readonly n3Link: string;
    /** The translator's GTP-U address: the uplink policy matches it. */
    readonly n3Addr: string;
    readonly v6: string;
    readonly plainV4: string;
    readonly mtu: number;
  };
  readonly core: {
    /** Interface facing the translator: SRv6 frames on the wire. */
    readonly toMup: string;
    readonly toDn: string;
    readonly toMeca: string;
    readonly toMecb: string;
    readonly v6: string;
    readonly plainV4: string;
    readonly dnLink: string;
    readonly mecaLink: string;
    readonly mecbLink: string;
    /** ip sr tunsrc: src_prefix (P 64) | N3 address, so downlink GTP-U comes from N3. */
    readonly tunsrc: string;
  };
  readonly dn: { readonly dev: string; readonly addr: string; readonly mtu: number };
  readonly mec: { readonly dev: string; readonly anycast: string; readonly aAddr: string; readonly bAddr: string };
  readonly sids: {
    /** Uplink sr_prefix to the data network (End.DX4 in core for the whole /48). */
    readonly dnPrefix: string;
    readonly mecaPrefix: string;
    readonly mecbPrefix: string;
    /** A kernel seg6local End in core: a policy segment before the last SID (interop: SRH with Segments Left 1). */
    readonly coreEnd: string;
    /** H.M.GTP4.D source prefix (P 64). */
    readonly srcPrefix: string;
    /** End.M.GTP4.E local SID prefix. */
    readonly dlPrefix: string;
    /** The uplink SID B the translator writes for our UE's G-PDUs (sr_prefix | N3 | QFI | TEID). */
    readonly ulSid: string;
    /** The downlink SID core's seg6 encap uses: dlPrefix | gNB | QFI | TEID. */
    readonly dlSid: string;
    /** The uplink IPv6 source: srcPrefix | gNB. */
    readonly ulSrc: string;
  };
  readonly uePool: string;
  readonly plainPool: string;
  /**
   * Every UE behind the gNB emulator, each with its own uplink and downlink
   * TEID and QFI. ues[0] is the data network's UE (t.ue.addr, the
   * address-only policy to dn); ues[1..] are MEC users: each has an
   * (N3, TEID/32) policy with the plain SID of its MEC site's PE.
   */
  readonly ues: readonly LabUe[];
  /** Plain PE SIDs (End.DX4 in core: each lies in its site's /48). */
  readonly peSids: { readonly meca: string; readonly mecb: string };
  /** --core srh: the IPv6 link between core and each site, over which core routes the site's SID prefix (src/lab/lab.ts). */
  readonly srhLinks: Readonly<Record<'dn' | 'meca' | 'mecb', { readonly core: string; readonly site: string }>>;
}

export interface LabUe {
  readonly index: number;
  readonly addr: string;
  readonly ulTeid: number;
  readonly dlTeid: number;
  readonly qfi: number;
  /** The SID core's PE composes for this UE's downlink: dlPrefix | gNB | QFI | TEID. */
  readonly dlSid: string;
}

/** UEs behind the gNB emulator: one data-network UE and 100 MEC users. */
export const LAB_UES = 101;

const ULT = 0x0000_1001;
const DLT = 0x0000_2002;
const QFI = 9;
/** UE i: 10.45.0.(2+i) for i < 250, TEIDs ULT+i and DLT+i (0x1001.. and 0x2002..: disjoint for i < 4096). */
const ueAddr = (i: number): string => `10.45.${Math.floor((i + 2) / 256)}.${(i + 2) % 256}`;
/** UE 0 keeps QFI 9; the others spread over 1..63 so that every session composes its own Args. */
const ueQfi = (i: number): number => (i === 0 ? QFI : ((i - 1) % 63) + 1);

/** The lab for namespace prefix `prefix` (letters, digits, '-', at most 20 characters). */
export function labTopology(prefix: string = DEFAULT_PREFIX): LabTopology {
  if (!/^[a-z][a-z0-9-]{0,19}$/.test(prefix)) {
    throw new Error(`lab prefix "${prefix}": use 1-20 lowercase letters, digits or '-', starting with a letter (e.g. mlab, mlab-${process.pid})`);
  }
  const ns = Object.fromEntries(LAB_NODES.map((n) => [n, `${prefix}-${n}`])) as Record<LabNode, string>;
  const n3Addr = '192.0.2.10';
  const gnbAddr = '198.51.100.1';
  const dnPrefix = '2001:db8:1::/48';
  const dlPrefix = '2001:db8:2::/48';
  const srcPrefix = '2001:db8:ff::/64';
  const args = { qfi: qfi(QFI), r: false, u: false, teid: teid(ULT) };
  const ulSid = formatIpv6(encodeGtp4Sid(parseIpv6Prefix(dnPrefix, 'lab'), parseIpv4(n3Addr, 'lab'), args));
  const dlSid = formatIpv6(encodeGtp4Sid(parseIpv6Prefix(dlPrefix, 'lab'), parseIpv4(gnbAddr, 'lab'), { ...args, teid: teid(DLT) }));
  const ulSrc = formatIpv6(encodeGtp4Src(parseIpv6Prefix(srcPrefix, 'lab'), parseIpv4(gnbAddr, 'lab')));
  const tunsrc = formatIpv6(encodeGtp4Src(parseIpv6Prefix(srcPrefix, 'lab'), parseIpv4(n3Addr, 'lab')));
  const dlPrefixP = parseIpv6Prefix(dlPrefix, 'lab');
  const gnbP = parseIpv4(gnbAddr, 'lab');
  const ues: LabUe[] = Array.from({ length: LAB_UES }, (_, i) => ({
    index: i,
    addr: ueAddr(i),
    ulTeid: ULT + i,
    dlTeid: DLT + i,
    qfi: ueQfi(i),
    dlSid: formatIpv6(encodeGtp4Sid(dlPrefixP, gnbP, { qfi: qfi(ueQfi(i)), r: false, u: false, teid: teid(DLT + i) })),
  }));
  return {
    prefix,
    ns,
    ue: { dev: 'to-gnb', addr: '10.45.0.2', plainAddr: '10.99.0.2', mtu: 3400 },
    gnb: { toUe: 'to-ue', n3: 'to-mup', ueGw: '10.45.0.1', plainGw: '10.99.0.1', addr: gnbAddr, ulTeid: ULT, dlTeid: DLT, qfi: QFI, mtu: 3500 },
    mup: { n3: 'to-gnb', core: 'to-core', n3Link: '198.51.100.254', n3Addr, v6: '2001:db8:99::1', plainV4: '172.31.255.1', mtu: 3500 },
    core: {
      toMup: 'to-mup',
      toDn: 'to-dn',
      toMeca: 'to-meca',
      toMecb: 'to-mecb',
      v6: '2001:db8:99::2',
      plainV4: '172.31.255.2',
      dnLink: '203.0.113.1',
      mecaLink: '10.200.1.1',
      mecbLink: '10.200.2.1',
      tunsrc,
    },
    dn: { dev: 'to-core', addr: '203.0.113.5', mtu: 3400 },
    mec: { dev: 'to-core', anycast: '203.0.113.100', aAddr: '10.200.1.2', bAddr: '10.200.2.2' },
    sids: { dnPrefix, mecaPrefix: '2001:db8:a::/48', mecbPrefix: '2001:db8:b::/48', coreEnd: '2001:db8:e::1', srcPrefix, dlPrefix, ulSid, dlSid, ulSrc },
    uePool: '10.45.0.0/16',
    plainPool: '10.99.0.0/24',
    ues,
    peSids: { meca: '2001:db8:a::d4', mecb: '2001:db8:b::d4' },
    srhLinks: {
      dn: { core: 'fd00:5e6:1::1', site: 'fd00:5e6:1::2' },
      meca: { core: 'fd00:5e6:2::1', site: 'fd00:5e6:2::2' },
      mecb: { core: 'fd00:5e6:3::1', site: 'fd00:5e6:3::2' },
    },
  };
}
