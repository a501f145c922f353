/**
 * Reading packets as a peer received them, for the tests on veths: address
 * text, Internet checksums, the downlink G-PDU End.M.GTP4.E writes. Written
 * from the RFCs (791, 768, 8200, 5952; TS 29.281 and 38.415 for GTP-U and
 * its PDU Session Container), not from our code.
 */
import { expect } from 'vitest';

/** A 16-byte GTP-U header with a DL PDU Session Container, as End.M.GTP4.E writes it (docs/datapath.md). */
export function gtpuDlHeader(teid: number, qfi: number, innerLength: number): Buffer {
  const h = Buffer.from('34ff0000000000000000008501000000', 'hex');
  h.writeUInt16BE(8 + innerLength, 2);
  h.writeUInt32BE(teid, 4);
  h[14] = qfi; // R = 0
  return h;
}

export function ipv4Text(b: Buffer, at: number): string {
  return [...b.subarray(at, at + 4)].join('.');
}

export function ipv6Text(b: Buffer, at: number): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(b.readUInt16BE(at + i).toString(16));
  // The URL parser writes IPv6 hosts in the RFC 5952 form, as the tests' constants are.
  return new URL(`http://[${groups.join(':')}]`).hostname.slice(1, -1);
}

export function csum16(b: Buffer, init = 0): number {
  let s = init;
  for (let i = 0; i < b.length; i += 2) s += (b[i]! << 8) | (b[i + 1] ?? 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

/** The UDP checksum of an IPv4/UDP packet verifies (or is 0, "none"). */
export function udpChecksumOk(ip: Buffer): boolean {
  const ihl = (ip[0]! & 0x0f) * 4;
  const udp = ip.subarray(ihl, ip.readUInt16BE(2));
  if (udp.readUInt16BE(6) === 0) return true;
  const pseudo = Buffer.concat([ip.subarray(12, 20), Buffer.from([0, 17]), Buffer.from([udp.length >> 8, udp.length & 0xff])]);
  return csum16(udp, csum16(pseudo)) === 0xffff;
}

export interface DownlinkExpect {
  readonly teid: number;
  readonly qfi: number;
  /** The inner IPv4/UDP packet: addresses, ports, TTL as it must arrive. */
  readonly src: string;
  readonly dst: string;
  readonly sport: number;
  readonly dport: number;
  readonly ttl: number;
}

/** Check a downlink G-PDU (the UDP payload the gNB received): header, container, the inner packet and its checksums. */
export function checkDownlinkGpdu(data: Buffer, body: Buffer, e: DownlinkExpect): void {
  const innerLength = data.length - 16;
  expect(data.subarray(0, 16).toString('hex'), 'GTP-U header + PDU Session Container').toBe(gtpuDlHeader(e.teid, e.qfi, innerLength).toString('hex'));
  const inner = data.subarray(16);
  expect(inner[0], 'inner IPv4, IHL 5').toBe(0x45);
  expect(inner.readUInt16BE(2), 'inner total length').toBe(innerLength);
  expect(inner[8], 'inner TTL').toBe(e.ttl);
  expect(inner[9]).toBe(17);
  expect(ipv4Text(inner, 12)).toBe(e.src);
  expect(ipv4Text(inner, 16)).toBe(e.dst);
  expect(csum16(inner.subarray(0, 20)), 'inner IPv4 header checksum').toBe(0xffff);
  expect(inner.readUInt16BE(20)).toBe(e.sport);
  expect(inner.readUInt16BE(22)).toBe(e.dport);
  expect(inner.subarray(28).toString(), 'inner payload').toBe(body.toString());
  expect(udpChecksumOk(inner), 'inner UDP checksum').toBe(true);
}
