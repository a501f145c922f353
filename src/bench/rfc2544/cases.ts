/**
 * What the benchmark measures: RFC 2544 frame sizes adjusted for the
 * tunnel overheads, the translator's configuration, and per case the
 * frames generated, the program on the device under test and what the sink
 * expects to receive.
 *
 * Frame sizes: RFC 2544's 64..1518-byte Ethernet frames carry an IP packet
 * of size − 18 bytes (14 Ethernet + 4 FCS). That packet is the *inner*
 * packet here (the user's traffic), kept the same in every case; each case's
 * frame on the wire is that plus its own headers (no FCS on a veth):
 *   GTP-U/IPv4 uplink frame   = inner + 58 (Ethernet 14, IPv4 20, UDP 8, GTP-U 8 + PDU Session Container 8)
 *   SRv6 downlink frame        = inner + 54 (Ethernet 14, IPv6 40, no SRH)
 *   plain inner IPv4 frame     = inner + 14 (input of the kernel seg6 encap baseline)
 */
import type { Config } from '../../config/types.js';
import { DEFAULT_SETTINGS } from '../../config/load.js';
import { ipv4Prefix, ipv6Prefix, parseIpv4, parseIpv6 } from '../../sid/addr.js';
import { encodeGtp4Sid, encodeGtp4Src, qfi, teid } from '../../sid/mobile.js';
import { GTPU_OVERHEAD, SRV6_OVERHEAD, gtpuFrame, innerUdp4, srv6Frame } from '../../packet/frames.js';
import type { GenFrame, WordCheck } from '../../packet/generator.js';
import { DN, GNB, MAC, N3, UE } from './lab.js';
import type { Ipv6Addr } from '../../sid/types.js';
import type { DownlinkFlow, UplinkFlow } from '../../packet/probe-frames.js';
import type { Direction } from '../../dataplane/probe-layout.js';

export { CASES, DEFAULT_FLOWS, RFC2544_SIZES, type CaseName } from './defaults.js';
import { DEFAULT_FLOWS, type CaseName } from './defaults.js';
export const ETH_FCS_OVERHEAD = 18;
export const PLAIN_OVERHEAD = 14;


export const CASE_TITLES: Record<CaseName, string> = {
  uplink: 'translator uplink H.M.GTP4.D',
  downlink: 'translator downlink End.M.GTP4.E',
  bidir: 'translator bidirectional',
  'kernel-ipv4': 'kernel IPv4 forwarding (same GTP-U frames)',
  'kernel-seg6': 'kernel SRv6 encap (seg6 route, inner IPv4)',
  'xdp-l3fwd': 'XDP L3FWD (bpf_fib_lookup + redirect)',
  'uplink-10k': 'translator uplink H.M.GTP4.D, 10,000 (N3, TEID) policies, every frame the next TEID',
  'pe-downlink': 'translator PE downlink H.M.Session.Encaps (sessions table)',
  'slow-dut': 'XDP L3FWD that spins first (a deliberately slow DUT: proves the bench sees loss)',
};

/** uplink-10k: the N3 address its 10,000 (N3, TEID /32) policies match, and their TEIDs. */
export const N3_10K = '192.0.2.20';
export const TEID_10K_BASE = 0x20000;
export const TEIDS_10K = 10_000;
/** Offset of the GTP-U TEID in the uplink frame (Ethernet 14, IPv4 20, UDP 8, GTP-U flags, type, length). */
const TEID_OFF = 14 + 20 + 8 + 4;
/** pe-downlink: the gateway's End.M.GTP4.E SID prefix the session encapsulates to (routed out of da). */
export const PE_ISD = '2001:db8:2::/48';

/** The device under test's program on da and db. */
export type DutProgram = 'translator' | 'l3fwd' | 'pass' | 'slow';

const TEID = 0x1000;
const QFI = 9;
const SPORT_BASE = 10_000;

/** The translator: one policy (uplink) and one local SID (downlink), forwarding by FIB. */
export function translatorConfig(): Config {
  return {
    file: '<rfc2544>',
    settings: { ...DEFAULT_SETTINGS, forwarding: 'fib', maxPolicies: 16, maxLocalSids: 16 },
    policies: [
      {
        where: 'policies[0]',
        match: ipv4Prefix(parseIpv4('192.0.2.0', 'bench'), 24),
        srPrefix: ipv6Prefix(parseIpv6('2001:db8:1::', 'bench'), 48),
        srcPrefix: ipv6Prefix(parseIpv6('2001:db8:ff::', 'bench'), 64),
        segments: [],
        srh: 'auto',
        hopLimit: 64,
      },
    ],
    localsids: [{ where: 'localsids[0]', sid: ipv6Prefix(parseIpv6('2001:db8:2::', 'bench'), 48), srcPrefixLen: 64, container: 'always', ttl: 64 }],
  };
}

/**
 * The translator with the sessions cases' tables too: 10,000 (N3, TEID /32)
 * policies on N3_10K (uplink-10k) and one PE session for the UE
 * (pe-downlink). Loaded only for those cases, so that uplink and downlink
 * run with the one-policy tables above.
 */
export function sessionsConfig(): Config {
  const base = translatorConfig();
  const p0 = base.policies[0]!;
  const many = Array.from({ length: TEIDS_10K }, (_, i) => ({
    ...p0,
    where: `policies[${i + 1}]`,
    match: ipv4Prefix(parseIpv4(N3_10K, 'bench'), 32),
    teid: { value: TEID_10K_BASE + i, len: 32 },
  }));
  return {
    ...base,
    settings: { ...base.settings, maxPolicies: 16_384 },
    policies: [p0, ...many],
    sessions: [{
      where: 'sessions[0]',
      ue: { family: 4, prefix: ipv4Prefix(parseIpv4(UE, 'bench'), 32) },
      teid: TEID, qfi: QFI, rqi: false,
      endpoint: parseIpv4(GNB, 'bench'), source: parseIpv4(N3, 'bench'),
      isd: ipv6Prefix(parseIpv6('2001:db8:2::', 'bench'), 48),
      srcPrefix: ipv6Prefix(parseIpv6('2001:db8:ff::', 'bench'), 64),
      segments: [], srh: 'auto', hopLimit: 64,
    }],
  };
}

function macs(f: Buffer, dst: string, src: string): Buffer {
  Buffer.from(dst.replaceAll(':', ''), 'hex').copy(f, 0);
  Buffer.from(src.replaceAll(':', ''), 'hex').copy(f, 6);
  return f;
}

const v4 = (s: string): number => parseIpv4(s, 'bench') as unknown as number;

export function innerLen(size: number): number {
  return size - ETH_FCS_OVERHEAD;
}

/** Uplink GTP-U/IPv4 frame from the gNB side (ea -> da). */
export function uplinkFrame(size: number, flows = DEFAULT_FLOWS): GenFrame {
  const inner = innerUdp4({ src: parseIpv4(UE, 'bench'), dst: parseIpv4(DN, 'bench'), sport: SPORT_BASE, dport: 9000, len: innerLen(size) });
  const frame = macs(gtpuFrame({ src: parseIpv4(GNB, 'bench'), dst: parseIpv4(N3, 'bench'), teid: TEID, qfi: QFI, inner }), MAC.da, MAC.ea);
  return { frame, sportOff: GTPU_OVERHEAD + 20, sportBase: SPORT_BASE, flows };
}

/** uplink-10k: GTP-U to N3_10K, the TEID cycled over the 10,000 policies' by the generator. */
export function uplink10kFrame(size: number, flows = DEFAULT_FLOWS): GenFrame & { teid: { off: number; base: number; count: number } } {
  const inner = innerUdp4({ src: parseIpv4(UE, 'bench'), dst: parseIpv4(DN, 'bench'), sport: SPORT_BASE, dport: 9000, len: innerLen(size) });
  const frame = macs(gtpuFrame({ src: parseIpv4(GNB, 'bench'), dst: parseIpv4(N3_10K, 'bench'), teid: TEID_10K_BASE, qfi: QFI, inner }), MAC.da, MAC.ea);
  return { frame, sportOff: GTPU_OVERHEAD + 20, sportBase: SPORT_BASE, flows, teid: { off: TEID_OFF, base: TEID_10K_BASE, count: TEIDS_10K } };
}

/** pe-downlink: the DN's plain IPv4 packet to the UE from the core side (eb -> db). */
export function peFrame(size: number, flows = DEFAULT_FLOWS): GenFrame {
  const inner = innerUdp4({ src: parseIpv4(DN, 'bench'), dst: parseIpv4(UE, 'bench'), sport: SPORT_BASE, dport: 9000, len: innerLen(size) });
  const eth = Buffer.from('0000000000000000000000000800', 'hex');
  const frame = macs(Buffer.concat([eth, inner]), MAC.db, MAC.eb);
  return { frame, sportOff: PLAIN_OVERHEAD + 20, sportBase: SPORT_BASE, flows };
}

/** The downlink's outer IPv6: the local SID naming the gNB, QFI 9, TEID 0x1000, and the source it comes from. */
function downlinkOuter(): { src: Ipv6Addr; dst: Ipv6Addr } {
  const cfg = translatorConfig();
  const dst = encodeGtp4Sid(cfg.localsids[0]!.sid, parseIpv4(GNB, 'bench'), { qfi: qfi(QFI), r: false, u: false, teid: teid(TEID) });
  const src = encodeGtp4Src(cfg.policies[0]!.srcPrefix, parseIpv4(DN, 'bench'));
  return { src, dst };
}

/** Downlink SRv6 frame from the core side (eb -> db) to the local SID naming the gNB, QFI 9, TEID 0x1000. */
export function downlinkFrame(size: number, flows = DEFAULT_FLOWS): GenFrame {
  const inner = innerUdp4({ src: parseIpv4(DN, 'bench'), dst: parseIpv4(UE, 'bench'), sport: SPORT_BASE, dport: 9000, len: innerLen(size) });
  const frame = macs(srv6Frame({ ...downlinkOuter(), inner }), MAC.db, MAC.eb);
  return { frame, sportOff: SRV6_OVERHEAD + 20, sportBase: SPORT_BASE, flows };
}

/** The uplink's inner IPv4 packet alone (ea -> da): input of the kernel seg6 encap baseline. */
export function plainFrame(size: number, flows = DEFAULT_FLOWS): GenFrame {
  const inner = innerUdp4({ src: parseIpv4(UE, 'bench'), dst: parseIpv4(DN, 'bench'), sport: SPORT_BASE, dport: 9000, len: innerLen(size) });
  const eth = Buffer.from('0000000000000000000000000800', 'hex');
  const frame = macs(Buffer.concat([eth, inner]), MAC.da, MAC.ea);
  return { frame, sportOff: PLAIN_OVERHEAD + 20, sportBase: SPORT_BASE, flows };
}

// --- what arrives ------------------------------------------------------------

/** IPv6 to the uplink SID 2001:db8:1:c000:20a:.. (H.M.GTP4.D or kernel seg6 encap of the same packet). */
function srv6Out(what: string): WordCheck[] {
  return [
    { off: 12, mask: 0xfffff000, value: 0x86dd6000, what: `${what}: ethertype IPv6, version 6` },
    { off: 38, mask: 0xffffffff, value: 0x20010db8, what: `${what}: destination 2001:db8:...` },
    { off: 42, mask: 0xffffffff, value: 0x0001c000, what: `${what}: destination ..:1:c000:.. (sr_prefix | N3)` },
  ];
}

function upTranslated(inner: number): WordCheck[] {
  return [
    ...srv6Out('H.M.GTP4.D'),
    { off: 18, mask: 0xffffffff, value: ((inner << 16) | (4 << 8) | 64) >>> 0, what: 'payload length, next header 4, hop limit 64' },
    { off: 46, mask: 0xffffff00, value: 0x020a2400, what: 'SID: ..:20a:24.. (N3, QFI 9)' },
    { off: 54, mask: 0xff000000, value: 0x45000000, what: 'inner IPv4 follows' },
  ];
}

/** H.M.Session.Encaps: IPv6 to isd | gNB | Args (QFI 9, TEID 0x1000), the inner IPv4 unchanged. */
function peEncapsulated(inner: number): WordCheck[] {
  return [
    { off: 12, mask: 0xfffff000, value: 0x86dd6000, what: 'H.M.Session.Encaps: ethertype IPv6, version 6' },
    { off: 18, mask: 0xffffffff, value: ((inner << 16) | (4 << 8) | 64) >>> 0, what: 'payload length, next header 4, hop limit 64' },
    { off: 38, mask: 0xffffffff, value: 0x20010db8, what: 'destination 2001:db8:...' },
    { off: 42, mask: 0xffffffff, value: 0x0002c633, what: 'destination ..:2:c633:.. (isd | gNB)' },
    { off: 46, mask: 0xffffff00, value: 0x64012400, what: 'destination ..:6401:24.. (gNB, QFI 9)' },
    { off: 54, mask: 0xff000000, value: 0x45000000, what: 'inner IPv4 follows' },
  ];
}

function downTranslated(): WordCheck[] {
  return [
    { off: 12, mask: 0xffffff00, value: 0x08004500, what: 'ethertype IPv4, 0x45' },
    { off: 22, mask: 0xffff0000, value: 0x40110000, what: 'TTL 64, UDP' },
    { off: 30, mask: 0xffffffff, value: v4(GNB), what: 'destination the gNB' },
    { off: 34, mask: 0x0000ffff, value: 2152, what: 'UDP destination 2152' },
    { off: 46, mask: 0xffffffff, value: TEID, what: 'TEID' },
    { off: 58, mask: 0xff000000, value: 0x45000000, what: 'inner IPv4 follows' },
  ];
}

function ipv4Forwarded(): WordCheck[] {
  return [
    { off: 12, mask: 0xffffff00, value: 0x08004500, what: 'ethertype IPv4, 0x45' },
    { off: 22, mask: 0xffff0000, value: 0x3f110000, what: 'TTL 63 (decremented), UDP' },
    { off: 30, mask: 0xffffffff, value: v4(N3), what: 'destination N3' },
    { off: 34, mask: 0x0000ffff, value: 2152, what: 'UDP destination 2152' },
    { off: 0, mask: 0xffffffff, value: 0x02000000, what: 'destination MAC eb' },
    { off: 4, mask: 0xffff0000, value: 0x0b010000, what: 'destination MAC eb' },
  ];
}

/** One stream of a case: generated on one side, counted on the other. */
export interface Stream {
  gen: GenFrame;
  /** Generator side: 'a' sends out of ea, 'b' out of eb. */
  from: 'a' | 'b';
  checks: WordCheck[];
  minLen: number;
}

export interface CaseSetup {
  name: CaseName;
  dut: DutProgram;
  streams: Stream[];
  /** Length of the frame the DUT receives (per stream). */
  inLens: number[];
  /** How the latency probe goes through this case, or why it does not. */
  probe: ProbePlan | { reason: string };
}

/**
 * The latency probe in a case: probe frames of the case's own stream (same
 * headers and size, the probe payload inside, src/packet/probe-frames.ts) sent
 * beside the generator, captured behind the sink, which hands them to the
 * stack when it finds the probe's magic at `outOff` of the frame it receives.
 */
export interface ProbePlan {
  dir: Direction;
  /** The flow the probe frames belong to (the stream's). */
  uplink?: UplinkFlow;
  downlink?: DownlinkFlow;
  /** Offset of the probe payload in the frame arriving at the sink. */
  outOff: number;
}

/** Inner IPv4 and UDP headers, between a case's outer headers and the probe payload. */
const INNER_UDP4 = 20 + 8;

function probePlan(name: CaseName): CaseSetup['probe'] {
  const uplink: UplinkFlow = { gnb: parseIpv4(GNB, 'bench'), n3: parseIpv4(N3, 'bench'), teid: TEID, qfi: QFI, ue: parseIpv4(UE, 'bench'), dn: parseIpv4(DN, 'bench') };
  switch (name) {
    case 'uplink':
      // H.M.GTP4.D without an SRH: Ethernet + IPv6, then the inner packet.
      return { dir: 'uplink', uplink, outOff: SRV6_OVERHEAD + INNER_UDP4 };
    case 'downlink': {
      const { src, dst } = downlinkOuter();
      // End.M.GTP4.E: GTP-U/IPv4 with the PDU Session Container (container: always).
      return { dir: 'downlink', downlink: { src, sid: dst, dn: parseIpv4(DN, 'bench'), ue: parseIpv4(UE, 'bench') }, outOff: GTPU_OVERHEAD + INNER_UDP4 };
    }
    case 'kernel-ipv4':
    case 'xdp-l3fwd':
      // The uplink GTP-U frames, forwarded unchanged.
      return { dir: 'uplink', uplink, outOff: GTPU_OVERHEAD + INNER_UDP4 };
    case 'bidir':
      return { reason: 'two streams from one generator thread; the probe measures one direction against one background load (see uplink and downlink)' };
    case 'kernel-seg6':
    case 'pe-downlink':
      return { reason: 'its input is the plain inner IPv4 packet, and the probe builds GTP-U and SRv6 frames only' };
    case 'uplink-10k':
      return { reason: 'the probe\'s flow is one TEID; see uplink' };
    case 'slow-dut':
      return { reason: 'a test of the bench, not a device' };
  }
}

export function caseSetup(name: CaseName, size: number, flows = DEFAULT_FLOWS): CaseSetup {
  const inner = innerLen(size);
  const up: Stream = { gen: uplinkFrame(size, flows), from: 'a', checks: upTranslated(inner), minLen: 14 + 40 + inner };
  const down: Stream = { gen: downlinkFrame(size, flows), from: 'b', checks: downTranslated(), minLen: 14 + 36 + inner };
  const streams: Stream[] = (() => {
    switch (name) {
      case 'uplink':
        return [up];
      case 'downlink':
        return [down];
      case 'bidir':
        return [up, down];
      case 'kernel-ipv4':
      case 'xdp-l3fwd':
        return [{ gen: uplinkFrame(size, flows), from: 'a' as const, checks: ipv4Forwarded(), minLen: 14 + 44 + inner }];
      case 'kernel-seg6':
        return [{ gen: plainFrame(size, flows), from: 'a' as const, checks: srv6Out('seg6 encap'), minLen: 14 + 40 + inner }];
      case 'slow-dut':
        return [{ gen: uplinkFrame(size, flows), from: 'a' as const, checks: ipv4Forwarded(), minLen: 14 + 44 + inner }];
      case 'uplink-10k': {
        const checks = upTranslated(inner).map((c) => (c.off === 46 ? { ...c, value: 0x02142400, what: 'SID: ..:214:24.. (N3 192.0.2.20, QFI 9)' } : c));
        return [{ gen: uplink10kFrame(size, flows), from: 'a' as const, checks, minLen: 14 + 40 + inner }];
      }
      case 'pe-downlink':
        return [{ gen: peFrame(size, flows), from: 'b' as const, checks: peEncapsulated(inner), minLen: 14 + 40 + inner }];
    }
  })();
  const dut: DutProgram = name === 'xdp-l3fwd' ? 'l3fwd' : name === 'slow-dut' ? 'slow' : name.startsWith('kernel') ? 'pass' : 'translator';
  return { name, dut, streams, inLens: streams.map((s) => s.gen.frame.length), probe: probePlan(name) };
}
