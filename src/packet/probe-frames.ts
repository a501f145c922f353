/**
 * Probe frames: GTP-U/IPv4 uplink (to the translator's N3 address, H.M.GTP4.D)
 * and SRv6 downlink (IPv6 to an End.M.GTP4.E SID, inner IPv4), each around
 * an inner IPv4/UDP packet whose payload is a probe payload (dataplane/probe-layout.ts).
 */
import { gtpuFrame, innerUdp4, srv6Frame, GTPU_OVERHEAD, SRV6_OVERHEAD } from './frames.js';
import type { Ipv4Addr, Ipv6Addr } from '../sid/types.js';
import { encodePayload, PROBE_LAYOUTS, type Direction } from '../dataplane/probe-layout.js';

export interface UplinkFlow {
  /** Outer IPv4: the gNB and the translator's N3 address (a policy matches it). */
  readonly gnb: Ipv4Addr;
  readonly n3: Ipv4Addr;
  readonly teid: number;
  readonly qfi: number;
  /** Inner IPv4 UDP: UE to data network, to the probe's port. */
  readonly ue: Ipv4Addr;
  readonly dn: Ipv4Addr;
}

export interface DownlinkFlow {
  /** Outer IPv6: source (the core's H.Encaps source) and the End.M.GTP4.E SID with the session's arguments. */
  readonly src: Ipv6Addr;
  readonly sid: Ipv6Addr;
  readonly dn: Ipv4Addr;
  readonly ue: Ipv4Addr;
}

export interface FrameSpec {
  readonly dir: Direction;
  readonly run: number;
  /** Ethernet frame size without FCS (>= the headers + a 16-byte probe payload). */
  readonly size: number;
  readonly udpPort: number;
  readonly srcMac: Buffer;
  readonly dstMac: Buffer;
  readonly uplink?: UplinkFlow;
  readonly downlink?: DownlinkFlow;
}

const UDP_IP = 28;
/** The inner UDP source port: any; fixed so that the flow hashes the same for every probe. */
export const PROBE_SPORT = 40001;

/** The smallest frame of each direction: headers + inner IPv4/UDP + the 16-byte payload. */
export const MIN_FRAME: Record<Direction, number> = {
  uplink: GTPU_OVERHEAD + UDP_IP + PROBE_LAYOUTS.mup_probe_payload.size,
  downlink: SRV6_OVERHEAD + UDP_IP + PROBE_LAYOUTS.mup_probe_payload.size,
};

/**
 * A template frame of the direction; seq goes at payloadOffset + 8 (write it
 * with setSeq). The inner UDP checksum is 0 (allowed for UDP over IPv4), so
 * changing seq needs no checksum update.
 */
export function templateFrame(s: FrameSpec): { frame: Buffer; payloadOffset: number } {
  if (!Number.isInteger(s.size) || s.size < MIN_FRAME[s.dir] || s.size > 9000) {
    throw new RangeError(`${s.dir} probe frames are ${MIN_FRAME[s.dir]} to 9000 bytes, got ${s.size}`);
  }
  let frame: Buffer;
  let innerAt: number;
  if (s.dir === 'uplink') {
    const f = s.uplink;
    if (f === undefined) throw new Error('an uplink probe needs its flow (gNB, N3, TEID, QFI, UE, DN)');
    const inner = innerUdp4({ src: f.ue, dst: f.dn, sport: PROBE_SPORT, dport: s.udpPort, len: s.size - GTPU_OVERHEAD });
    frame = gtpuFrame({ src: f.gnb, dst: f.n3, teid: f.teid, qfi: f.qfi, inner });
    innerAt = GTPU_OVERHEAD;
  } else {
    const f = s.downlink;
    if (f === undefined) throw new Error('a downlink probe needs its flow (source, SID, DN, UE)');
    const inner = innerUdp4({ src: f.dn, dst: f.ue, sport: PROBE_SPORT, dport: s.udpPort, len: s.size - SRV6_OVERHEAD });
    frame = srv6Frame({ src: f.src, dst: f.sid, inner });
    innerAt = SRV6_OVERHEAD;
  }
  const payloadOffset = innerAt + UDP_IP;
  encodePayload(s.run, 0, s.dir).copy(frame, payloadOffset);
  s.dstMac.copy(frame, 0);
  s.srcMac.copy(frame, 6);
  return { frame, payloadOffset };
}

export function setSeq(frame: Buffer, payloadOffset: number, seq: number): void {
  frame.writeUInt32BE(seq >>> 0, payloadOffset + PROBE_LAYOUTS.mup_probe_payload.members.seq.offset);
}

export function parseMac(text: string, what: string): Buffer {
  if (!/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i.test(text)) throw new RangeError(`${what}: ${JSON.stringify(text)} is not a MAC address (aa:bb:cc:dd:ee:ff)`);
  return Buffer.from(text.replace(/:/g, ''), 'hex');
}

export function formatMac(b: Buffer): string {
  return [...b.subarray(0, 6)].map((x) => x.toString(16).padStart(2, '0')).join(':');
}
