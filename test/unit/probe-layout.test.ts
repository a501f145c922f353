/**
 * The probe's byte layouts and edge checks, on hand-worked values: the MAC
 * stamp (a unicast, locally administered address) unwrapped across the 46-bit wrap, the probe payload, a ring record
 * decoded from bytes laid out by hand, and the /v1/probe body validation.
 */
import { describe, expect, it } from 'vitest';
import { decodePayload, decodeRecord, encodePayload, macStamp, macStampBytes } from '../../src/dataplane/probe-layout.js';
import { parseProbeRequest, ProbeRequestError } from '../../src/dataplane/probe-control.js';
import { templateFrame, MIN_FRAME } from '../../src/packet/probe-frames.js';
import { parseIpv4 } from '../../src/sid/addr.js';

function frameWithMac(t: bigint): Buffer {
  const f = Buffer.alloc(14);
  macStampBytes(t).copy(f, 6);
  return f;
}

describe('macStamp', () => {
  it('lays 46 bits out as a unicast, locally administered MAC: bits 45..40 above the U/L and I/G bits', () => {
    // 0x0001_2345_6789_abcd: low 46 bits 0x2345_6789_abcd; 0x23 & 0x3f = 0x23 -> first octet 0x23 << 2 | 2 = 0x8e.
    expect(macStampBytes(0x0001_2345_6789_abcdn).toString('hex')).toBe('8e456789abcd');
    expect(macStampBytes(0xffff_ffff_ffff_ffffn).toString('hex')).toBe('feffffffffff');
    expect(macStampBytes(0n).toString('hex')).toBe('020000000000');
    for (const t of [0n, 1n << 40n, 1n << 41n, 3n << 40n, 0xff_0000_0000_00n, 0x1234_5678_9abc_def0n]) {
      const first = macStampBytes(t)[0]!;
      expect(first & 0x01, `I/G bit for ${t}`).toBe(0);
      expect(first & 0x02, `U/L bit for ${t}`).toBe(2);
    }
  });
  it('puts the 46 stamped bits back next to a nearby 64-bit time', () => {
    expect(macStamp(frameWithMac(0x0001_2345_6789_abcdn), 0x0001_2345_6789_ac00n)).toBe(0x0001_2345_6789_abcdn);
    expect(macStamp(frameWithMac(0x0000_2345_6789_abcdn), 0x0000_2345_6789_0000n)).toBe(0x0000_2345_6789_abcdn);
  });
  it('across the wrap: a stamp just below 2^46 taken before an exit just above it', () => {
    // entry = 2^46 - 100, exit = 2^46 + 50: the MAC holds 2^46 - 100.
    const span = 1n << 46n;
    expect(macStamp(frameWithMac(span - 100n), span + 50n)).toBe(span - 100n);
    expect(macStamp(frameWithMac(5n * span + 7n), 5n * span - 3n)).toBe(5n * span + 7n);
  });
  it('refuses a frame too short to hold the source MAC', () => {
    expect(() => macStamp(Buffer.alloc(11), 0n)).toThrow(RangeError);
  });
});

describe('probe payload', () => {
  it('is "MUPR", run, seq, direction, big endian, padded with zeros', () => {
    const p = encodePayload(0x01020304, 0x0a0b0c0d, 'downlink', 20);
    expect(p.toString('hex')).toBe('4d555052' + '01020304' + '0a0b0c0d' + '01000000' + '00000000');
    expect(decodePayload(Buffer.concat([Buffer.alloc(3), p]), 3)).toEqual({ run: 0x01020304, seq: 0x0a0b0c0d, dir: 'downlink' });
  });
  it('is not found where the magic is not, nor past the end', () => {
    const p = encodePayload(1, 2, 'uplink');
    expect(decodePayload(p, 1)).toBeNull();
    p[0] = 0;
    expect(decodePayload(p, 0)).toBeNull();
    expect(() => encodePayload(1, 2, 'uplink', 15)).toThrow(RangeError);
  });
  it('sits right after the inner UDP header of the uplink template (GTP-U/IPv4 + container + IPv4 + UDP = 86 bytes)', () => {
    const { frame, payloadOffset } = templateFrame({
      dir: 'uplink', run: 5, size: 128, udpPort: 47000, srcMac: Buffer.alloc(6), dstMac: Buffer.alloc(6, 0xff),
      uplink: { gnb: parseIpv4('198.51.100.1', 't'), n3: parseIpv4('192.0.2.10', 't'), teid: 1, qfi: 9, ue: parseIpv4('10.45.0.2', 't'), dn: parseIpv4('203.0.113.5', 't') },
    });
    expect(frame.length).toBe(128);
    expect(payloadOffset).toBe(14 + 20 + 8 + 16 + 20 + 8);
    expect(frame.readUInt16BE(payloadOffset - 6)).toBe(47000); // inner UDP destination port
    expect(decodePayload(frame, payloadOffset)).toEqual({ run: 5, seq: 0, dir: 'uplink' });
    expect(MIN_FRAME.uplink).toBe(payloadOffset + 16);
  });
});

describe('decodeRecord', () => {
  it('reads a struct mup_probe_record laid out by hand (little endian, addresses as bytes)', () => {
    const b = Buffer.alloc(88);
    b.writeBigUInt64LE(1000n, 0);
    b.writeBigUInt64LE(1250n, 8);
    b.writeBigUInt64LE(77n, 16);
    b.writeUInt32LE(42, 24);
    b.writeUInt32LE(7, 28);
    b.writeUInt32LE(1, 32);
    b.writeUInt32LE(3, 36);
    b.writeUInt32LE(0, 40);
    b.writeUInt32LE(9, 44);
    b[48] = 2; // End.M.GTP4.E
    b[49] = 4; // XDP_REDIRECT
    b[50] = 1 | 2; // seq, MAC
    b[51] = 17;
    b.writeUInt16LE(40001, 52);
    b.writeUInt16LE(47000, 54);
    Buffer.from([203, 0, 113, 5]).copy(b, 56);
    Buffer.from([10, 45, 0, 2]).copy(b, 72);
    expect(decodeRecord(b)).toEqual({
      entryNs: 1000n, exitNs: 1250n, gapNs: 77n, seq: 42, run: 7, cpu: 1, ifindex: 3, rxQueue: 0, cpuCount: 9,
      fn: 'end_m_gtp4_e', verdict: 'redirect', macStamped: true, proto: 17, sport: 40001, dport: 47000,
      src: '203.0.113.5', dst: '10.45.0.2',
    });
    b[50] = 4; // no seq, inner IPv6
    const r = decodeRecord(b);
    expect(r.seq).toBeNull();
    expect(r.src).toBe('cb00:7105:0:0:0:0:0:0');
    expect(() => decodeRecord(Buffer.alloc(87))).toThrow(RangeError);
  });
});

describe('/v1/probe body', () => {
  it('takes enabled, udp_port, sample, mac', () => {
    expect(parseProbeRequest({ enabled: true, udp_port: 47000, sample: 4, mac: false })).toEqual({ enabled: true, udpPort: 47000, sample: 4, noMac: true });
    expect(parseProbeRequest({ enabled: false })).toEqual({ enabled: false });
  });
  it.each([
    [[], undefined],
    [{}, 'enabled'],
    [{ enabled: 1 }, 'enabled'],
    [{ enabled: true, udp_port: -1 }, 'udp_port'],
    [{ enabled: true, udp_port: 1.5 }, 'udp_port'],
    [{ enabled: true, sample: 0 }, 'sample'],
    [{ enabled: true, mac: 'no' }, 'mac'],
    [{ enabled: true, port: 1 }, 'port'],
  ])('refuses %j naming %s', (body, path) => {
    let err: unknown;
    try {
      parseProbeRequest(body);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ProbeRequestError);
    expect((err as ProbeRequestError).path).toBe(path);
  });
});
