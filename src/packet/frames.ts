/**
 * Frames for benchmarks and the fuzzer, built in TypeScript so a benchmark
 * needs no Python: GTP-U/IPv4 uplink frames and SRv6 downlink frames around
 * an inner IPv4/UDP packet of a chosen size. Tests build their frames with
 * scapy instead, independently of this code.
 */
import { ipv4ToBytes, ipv6ToBytes } from '../sid/addr.js';
import type { Ipv4Addr, Ipv6Addr } from '../sid/types.js';

const MAC_A = Buffer.from('020000000001', 'hex');
const MAC_B = Buffer.from('020000000002', 'hex');

/**
 * The Internet checksum (RFC 1071) of `b[start, end)`: written into an IPv4
 * header whose checksum field is 0, or 0 over a header whose checksum is right.
 */
export function ipv4Checksum(b: Buffer, start = 0, end = b.length): number {
  let s = 0;
  for (let i = start; i < end; i += 2) s += (b[i]! << 8) | (i + 1 < end ? b[i + 1]! : 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return ~s & 0xffff;
}

export interface Ipv4HeaderOptions {
  src: Ipv4Addr;
  dst: Ipv4Addr;
  proto: number;
  payloadLen: number;
  tos?: number;
  ttl?: number;
  id?: number;
  /** Flags and fragment offset; default DF (0x4000). */
  frag?: number;
  /** IPv4 options, a multiple of 4 bytes. */
  options?: Buffer;
}

/** An IPv4 header with its checksum, IHL from the options. */
export function ipv4Header(o: Ipv4HeaderOptions): Buffer {
  const opts = o.options ?? Buffer.alloc(0);
  const h = Buffer.alloc(20 + opts.length);
  h[0] = 0x40 | (h.length / 4);
  h[1] = o.tos ?? 0;
  h.writeUInt16BE(h.length + o.payloadLen, 2);
  h.writeUInt16BE(o.id ?? 0, 4);
  h.writeUInt16BE(o.frag ?? 0x4000, 6);
  h[8] = o.ttl ?? 64;
  h[9] = o.proto;
  ipv4ToBytes(o.src).copy(h, 12);
  ipv4ToBytes(o.dst).copy(h, 16);
  opts.copy(h, 20);
  h.writeUInt16BE(ipv4Checksum(h), 10);
  return h;
}

/**
 * Inner IPv4/UDP packet of exactly `len` bytes (>= 28), with its UDP
 * checksum, as a Linux sender sends it (End.M.GTP6.E derives the outer UDP
 * checksum from it; docs/datapath.md).
 */
export function innerUdp4(o: { src: Ipv4Addr; dst: Ipv4Addr; sport: number; dport: number; len: number }): Buffer {
  if (o.len < 28) throw new RangeError(`inner packet of ${o.len} bytes: at least 28 (IPv4 + UDP)`);
  const udp = Buffer.alloc(o.len - 20);
  udp.writeUInt16BE(o.sport, 0);
  udp.writeUInt16BE(o.dport, 2);
  udp.writeUInt16BE(udp.length, 4);
  const pseudo = Buffer.alloc(12);
  ipv4ToBytes(o.src).copy(pseudo, 0);
  ipv4ToBytes(o.dst).copy(pseudo, 4);
  pseudo[9] = 17;
  pseudo.writeUInt16BE(udp.length, 10);
  const c = ipv4Checksum(Buffer.concat([pseudo, udp]));
  udp.writeUInt16BE(c === 0 ? 0xffff : c, 6);
  return Buffer.concat([ipv4Header({ src: o.src, dst: o.dst, proto: 17, payloadLen: udp.length }), udp]);
}

function eth(type: number): Buffer {
  const e = Buffer.alloc(14);
  MAC_B.copy(e, 0);
  MAC_A.copy(e, 6);
  e.writeUInt16BE(type, 12);
  return e;
}

/** Ethernet / IPv4 / UDP 2152 / GTP-U G-PDU with an UL PDU Session Container. */
export function gtpuFrame(o: { src: Ipv4Addr; dst: Ipv4Addr; teid: number; qfi: number; sport?: number; inner: Buffer }): Buffer {
  const gtp = Buffer.alloc(16);
  gtp[0] = 0x34;
  gtp[1] = 0xff;
  gtp.writeUInt16BE(8 + o.inner.length, 2);
  gtp.writeUInt32BE(o.teid >>> 0, 4);
  gtp[11] = 0x85;
  gtp[12] = 1;
  gtp[13] = 0x10; // PDU type UL
  gtp[14] = o.qfi & 0x3f;
  const udp = Buffer.alloc(8);
  udp.writeUInt16BE(o.sport ?? 2152, 0);
  udp.writeUInt16BE(2152, 2);
  udp.writeUInt16BE(8 + gtp.length + o.inner.length, 4);
  const ip = ipv4Header({ src: o.src, dst: o.dst, proto: 17, payloadLen: udp.readUInt16BE(4) });
  return Buffer.concat([eth(0x0800), ip, udp, gtp, o.inner]);
}

/** Ethernet / IPv6 (no SRH) / inner IPv4. */
export function srv6Frame(o: { src: Ipv6Addr; dst: Ipv6Addr; inner: Buffer; hopLimit?: number }): Buffer {
  const ip6 = Buffer.alloc(40);
  ip6.writeUInt32BE(0x60000000, 0);
  ip6.writeUInt16BE(o.inner.length, 4);
  ip6[6] = 4;
  ip6[7] = o.hopLimit ?? 64;
  ipv6ToBytes(o.src).copy(ip6, 8);
  ipv6ToBytes(o.dst).copy(ip6, 24);
  return Buffer.concat([eth(0x86dd), ip6, o.inner]);
}

/** Headers before the inner packet, for sizing an inner packet to a frame size. */
export const GTPU_OVERHEAD = 14 + 20 + 8 + 16;
export const SRV6_OVERHEAD = 14 + 40;

/**
 * The UDP checksum of the datagram at byte `u` of the IPv6 packet `ip`
 * (its pseudo header from the packet's addresses), written in place; 0
 * is written 0xffff (RFC 8200 §8.1: over IPv6 a zero one means none, and
 * the translator drops it).
 */
export function writeUdp6Checksum(ip: Buffer, u: number): void {
  const pseudo = Buffer.alloc(40);
  ip.copy(pseudo, 0, 8, 40);
  pseudo.writeUInt32BE(ip.length - u, 32);
  pseudo[39] = 17;
  ip.writeUInt16BE(0, u + 6);
  const sum = ipv4Checksum(Buffer.concat([pseudo, ip.subarray(u)]));
  ip.writeUInt16BE(sum === 0 ? 0xffff : sum, u + 6);
}

/** Ethernet / IPv6 / UDP 2152 / GTP-U G-PDU with an UL PDU Session Container (End.M.GTP6.D input). */
export function gtpu6Frame(o: { src: Ipv6Addr; dst: Ipv6Addr; teid: number; qfi: number; inner: Buffer }): Buffer {
  const v4 = gtpuFrame({ src: 0 as Ipv4Addr, dst: 0 as Ipv4Addr, teid: o.teid, qfi: o.qfi, inner: o.inner });
  const udpGtp = v4.subarray(14 + 20); // UDP + GTP-U + inner
  const ip6 = Buffer.alloc(40);
  ip6.writeUInt32BE(0x60000000, 0);
  ip6.writeUInt16BE(udpGtp.length, 4);
  ip6[6] = 17;
  ip6[7] = 64;
  ipv6ToBytes(o.src).copy(ip6, 8);
  ipv6ToBytes(o.dst).copy(ip6, 24);
  const ip = Buffer.concat([ip6, udpGtp]);
  // Over IPv6 the checksum is mandatory: a zero one is drop_udp_zero_checksum (it was left 0 until session 42).
  writeUdp6Checksum(ip, 40);
  return Buffer.concat([eth(0x86dd), ip]);
}

/** Ethernet / IPv6 / SRH [gNB] with Segments Left 1 (reduced) / inner IPv4 (End.M.GTP6.E input). */
export function srv6ReducedFrame(o: { src: Ipv6Addr; dst: Ipv6Addr; gnb: Ipv6Addr; inner: Buffer }): Buffer {
  const srh = Buffer.alloc(24);
  srh[0] = 4;
  srh[1] = 2;
  srh[2] = 4;
  srh[3] = 1;
  ipv6ToBytes(o.gnb).copy(srh, 8);
  const f = srv6Frame({ src: o.src, dst: o.dst, inner: Buffer.concat([srh, o.inner]) });
  f[14 + 6] = 43;
  return f;
}

export const GTPU6_OVERHEAD = 14 + 40 + 8 + 16;
export const SRV6_SRH1_OVERHEAD = 14 + 40 + 24;
