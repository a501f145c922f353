import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { execa } from 'execa';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { formatPcap, parsePcap, PcapError, readPcap, writePcap, type PcapPacket } from '../src/dataplane/pcap.js';

const dir = mkdtempSync(join(tmpdir(), 'mup-pcap-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const packets: PcapPacket[] = [
  { tsSec: 1_700_000_000, tsNsec: 123_456_000, origLen: 60, data: Buffer.alloc(60, 0xab) },
  { tsSec: 1_700_000_001, tsNsec: 0, origLen: 1514, data: Buffer.alloc(100, 0x01) }, // cut at a snaplen
  { tsSec: 0, tsNsec: 999_999_000, origLen: 14, data: Buffer.from('ffffffffffff0200000000010806', 'hex') },
];

/** A pcap written by hand from the format description (pcap(5)). */
function handMade(opts: { le: boolean; nano: boolean; linktype?: number; records: [number, number, Buffer][] }): Buffer {
  const u32 = (v: number): Buffer => {
    const b = Buffer.alloc(4);
    if (opts.le) b.writeUInt32LE(v);
    else b.writeUInt32BE(v);
    return b;
  };
  const u16 = (v: number): Buffer => {
    const b = Buffer.alloc(2);
    if (opts.le) b.writeUInt16LE(v);
    else b.writeUInt16BE(v);
    return b;
  };
  const parts = [
    u32(opts.nano ? 0xa1b23c4d : 0xa1b2c3d4),
    u16(2),
    u16(4),
    u32(0),
    u32(0),
    u32(65535),
    u32(opts.linktype ?? 1),
  ];
  for (const [sec, frac, data] of opts.records) parts.push(u32(sec), u32(frac), u32(data.length), u32(data.length), data);
  return Buffer.concat(parts);
}

describe('pcap', () => {
  it('round-trips packets through a file (microsecond, little-endian)', async () => {
    const path = join(dir, 'rt.pcap');
    await writePcap(path, packets);
    const back = await readPcap(path);
    expect(back.linktype).toBe(1);
    expect(back.nanosecond).toBe(false);
    expect(back.packets).toEqual(packets);
  });

  it('writes the classic header: magic a1b2c3d4 LE, version 2.4, Ethernet', () => {
    const b = formatPcap([]);
    expect(b.toString('hex')).toBe('d4c3b2a1' + '0200' + '0400' + '00000000' + '00000000' + '00000400' + '01000000');
  });

  it.each([
    ['little-endian microsecond', true, false],
    ['big-endian microsecond', false, false],
    ['little-endian nanosecond', true, true],
    ['big-endian nanosecond', false, true],
  ])('reads %s files', (_name, le, nano) => {
    const data = Buffer.from('0200000000020200000000010800450000', 'hex');
    const frac = nano ? 123_456_789 : 123_456;
    const f = parsePcap(handMade({ le, nano, records: [[42, frac, data], [43, 0, Buffer.alloc(0)]] }), 'x.pcap');
    expect(f.nanosecond).toBe(nano);
    expect(f.snaplen).toBe(65535);
    expect(f.packets).toEqual([
      { tsSec: 42, tsNsec: nano ? 123_456_789 : 123_456_000, origLen: data.length, data },
      { tsSec: 43, tsNsec: 0, origLen: 0, data: Buffer.alloc(0) },
    ]);
  });

  const good = handMade({ le: true, nano: false, records: [[1, 2, Buffer.alloc(20, 7)]] });
  const shb = '0a0d0d0a1c0000004d3c2b1a01000000ffffffffffffffff1c000000';
  it.each([
    ['an empty file', Buffer.alloc(0), /shorter than the 24-byte pcap header/],
    ['a text file', Buffer.from('this is not a capture file at all\n'), /not a pcap file: magic 0x74686973/],
    ['pcapng of a non-Ethernet interface', Buffer.from(shb + '0100000014000000' + '65000000' + '00000000' + '14000000', 'hex'), /interface 0 \(block at byte 28\): link type 101 is not Ethernet/],
    ['pcapng with a packet of an undescribed interface', Buffer.from(shb + '0600000020000000' + '00000000'.repeat(5) + '20000000', 'hex'), /packet 0 \(block at byte 28\): interface 0 was not described/],
    ['pcapng with a block cut short', Buffer.from(shb + '0100000014000000' + '010000000000', 'hex'), /block at byte 28: 20 bytes announced, 14 left/],
    ['a non-Ethernet link type', handMade({ le: true, nano: false, linktype: 101, records: [] }), /link type 101 is not Ethernet/],
    // Session 43's review: 0x1001 was masked to 1 (Ethernet); the FCS bits made the link type 134217729.
    ['pcapng of link type 0x1001', Buffer.from(shb + '0100000014000000' + '01100000' + '00000000' + '14000000', 'hex'), /link type 4097 is not Ethernet/],
    ['Ethernet frames with a 4-byte FCS', handMade({ le: true, nano: false, linktype: 0x28000001, records: [] }), /end in a 4-byte frame check sequence.*editcap -C -4/],
    ['a cut record header', good.subarray(0, 30), /packet 0 at byte 24: record header cut short/],
    ['cut packet data', good.subarray(0, good.length - 1), /packet 0 at byte 24: 20 bytes announced, 19 left/],
    [
      'an absurd record length',
      Buffer.concat([good.subarray(0, 32), Buffer.from('ffffff7f', 'hex'), good.subarray(36)]),
      /captured length 2147483647 is implausible/,
    ],
  ])('rejects %s with a one-line reason', (_name, buf, re) => {
    let err: unknown;
    try {
      parsePcap(buf, 'bad.pcap');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(PcapError);
    const msg = (err as Error).message;
    expect(msg).toMatch(/^bad\.pcap: /);
    expect(msg).toMatch(re);
    expect(msg).not.toContain('\n');
  });

  it('reads pcapng as editcap writes it: the same frames, lengths and times as the classic file', async () => {
    const classic = join(dir, 'ng-src.pcap');
    const ng = join(dir, 'ng.pcapng');
    await writePcap(classic, packets);
    await execa('editcap', ['-F', 'pcapng', classic, ng]);
    const buf = readFileSync(ng);
    expect(buf.readUInt32LE(0)).toBe(0x0a0d0d0a); // really pcapng
    const back = await readPcap(ng);
    expect(back.linktype).toBe(1);
    expect(back.packets).toEqual(packets);
  });

  it('reads big-endian pcapng, if_tsresol in powers of 2 and 10, Simple and Enhanced Packet Blocks', () => {
    // Written by hand from the pcapng draft: SHB, IDB (if_tsresol 2^-10, snaplen 8), SPB, IDB (1e-9), EPB on interface 1.
    const frame = 'aabbccddeeff0011';
    const hex = [
      '0a0d0d0a' + '0000001c' + '1a2b3c4d' + '0001' + '0000' + 'ffffffffffffffff' + '0000001c',
      '00000001' + '00000020' + '0001' + '0000' + '00000008' + '0009' + '0001' + '8a000000' + '00000000' + '00000020',
      '00000003' + '00000018' + '0000000c' + frame + '00000018',
      '00000001' + '00000020' + '0001' + '0000' + '00000000' + '0009' + '0001' + '09000000' + '00000000' + '00000020',
    ];
    const ts = 42_123_456_789n;
    const epb =
      '00000006' + '00000028' + '00000001' + (ts >> 32n).toString(16).padStart(8, '0') + (ts & 0xffffffffn).toString(16).padStart(8, '0') +
      '00000006' + '0000003c' + 'a1a2a3a4a5a60000' + '00000028' +
      // On interface 0: 5 * 1024 + 512 units of 2^-10 s = 5.5 s.
      '00000006' + '00000024' + '00000000' + '00000000' + '00001600' + '00000002' + '00000002' + 'b1b20000' + '00000024';
    const f = parsePcap(Buffer.from(hex.join('') + epb, 'hex'), 'be.pcapng');
    expect(f.packets).toEqual([
      { tsSec: 0, tsNsec: 0, origLen: 12, data: Buffer.from(frame, 'hex') }, // SPB: cut at the snaplen, 8 of 12 bytes
      { tsSec: 42, tsNsec: 123_456_789, origLen: 60, data: Buffer.from('a1a2a3a4a5a6', 'hex') },
      { tsSec: 5, tsNsec: 500_000_000, origLen: 2, data: Buffer.from('b1b2', 'hex') },
    ]);
  });

  it('names the file it cannot read', async () => {
    await expect(readPcap(join(dir, 'missing.pcap'))).rejects.toThrow(/missing\.pcap: cannot read: ENOENT/);
    const bad = join(dir, 'bad.pcap');
    writeFileSync(bad, 'garbage');
    await expect(readPcap(bad)).rejects.toThrow(PcapError);
  });
});

describe('pcap output times (found in review, session 43)', () => {
  it('a time a classic pcap cannot hold is refused, not wrapped', () => {
    const data = Buffer.alloc(20, 1);
    expect(() => formatPcap([{ tsSec: 2 ** 32 + 5, tsNsec: 0, origLen: 20, data }])).toThrow(/written frame 0: time 4294967301 s is outside what a classic pcap holds/);
    expect(() => formatPcap([{ tsSec: -300000000, tsNsec: 0, origLen: 20, data }])).toThrow(/outside what a classic pcap holds/);
    expect(formatPcap([{ tsSec: 0xffffffff, tsNsec: 0, origLen: 20, data }]).readUInt32LE(24)).toBe(0xffffffff);
  });
});

describe('pcapng blocks that carry no frame (found in review, session 43)', () => {
  it('a 300 KB name resolution block is skipped, not refused as corrupt; a packet block that long still is', () => {
    const block = (type: number, body: Buffer): Buffer => {
      const len = 12 + body.length;
      const b = Buffer.alloc(len);
      b.writeUInt32LE(type, 0);
      b.writeUInt32LE(len, 4);
      body.copy(b, 8);
      b.writeUInt32LE(len, len - 4);
      return b;
    };
    const shb = Buffer.from('0a0d0d0a1c0000004d3c2b1a01000000ffffffffffffffff1c000000', 'hex');
    const idb = block(1, Buffer.from('0100000000000400', 'hex')); // Ethernet, snaplen 262144
    const frame = Buffer.alloc(60, 0xab);
    const epbBody = Buffer.alloc(20 + frame.length);
    epbBody.writeUInt32LE(0, 0); // interface 0
    epbBody.writeUInt32LE(frame.length, 12);
    epbBody.writeUInt32LE(frame.length, 16);
    frame.copy(epbBody, 20);
    const nrb = block(4, Buffer.alloc(300_000));
    const f = parsePcap(Buffer.concat([shb, idb, nrb, block(6, epbBody)]), 'big-nrb.pcapng');
    expect(f.packets).toHaveLength(1);
    expect(f.packets[0]!.data.equals(frame)).toBe(true);
    const hugeEpb = Buffer.alloc(20 + 300_000);
    hugeEpb.writeUInt32LE(300_000, 12);
    hugeEpb.writeUInt32LE(300_000, 16);
    expect(() => parsePcap(Buffer.concat([shb, idb, block(6, hugeEpb)]), 'x.pcapng')).toThrow(/block length 300032 is implausible/);
  });
});
