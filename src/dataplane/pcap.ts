/**
 * Classic pcap files (not pcapng), LINKTYPE_ETHERNET. Reads both byte orders
 * and both microsecond (0xa1b2c3d4) and nanosecond (0xa1b23c4d) magics;
 * writes little-endian microsecond files.
 */
import { readFile, writeFile } from 'node:fs/promises';

export const LINKTYPE_ETHERNET = 1;
const MAGIC_USEC = 0xa1b2c3d4;
const MAGIC_NSEC = 0xa1b23c4d;
const MAGIC_PCAPNG = 0x0a0d0d0a;
const FILE_HEADER = 24;
const RECORD_HEADER = 16;
/** Larger than any sane snap length (libpcap's own maximum is 262144). */
const MAX_RECORD = 262_144;
const DEFAULT_SNAPLEN = 262_144;

export interface PcapPacket {
  /** Capture time: seconds and nanoseconds within the second. */
  readonly tsSec: number;
  readonly tsNsec: number;
  /** Length on the wire (>= data.length when the capture was cut at snaplen). */
  readonly origLen: number;
  readonly data: Buffer;
}

export interface PcapFile {
  readonly linktype: number;
  readonly snaplen: number;
  readonly nanosecond: boolean;
  readonly packets: PcapPacket[];
}

/** A file that is not a usable pcap. The message is one line naming the file. */
export class PcapError extends Error {
  override readonly name = 'PcapError';
  constructor(
    readonly file: string,
    readonly reason: string,
  ) {
    super(`${file}: ${reason}`);
  }
}

/** Parse a whole pcap file held in memory. `file` names it in errors. */
export function parsePcap(buf: Buffer, file = '<pcap>'): PcapFile {
  if (buf.length < FILE_HEADER) {
    throw new PcapError(file, `not a pcap file: ${buf.length} bytes, shorter than the 24-byte pcap header`);
  }
  const magicLE = buf.readUInt32LE(0);
  let le: boolean;
  let nanosecond: boolean;
  if (magicLE === MAGIC_USEC || magicLE === MAGIC_NSEC) {
    le = true;
    nanosecond = magicLE === MAGIC_NSEC;
  } else {
    const magicBE = buf.readUInt32BE(0);
    if (magicBE !== MAGIC_USEC && magicBE !== MAGIC_NSEC) {
      if (magicLE === MAGIC_PCAPNG) {
        throw new PcapError(file, 'pcapng is not supported; convert it with `editcap -F pcap IN OUT` or `tshark -F pcap`');
      }
      throw new PcapError(file, `not a pcap file: magic 0x${magicBE.toString(16).padStart(8, '0')}`);
    }
    le = false;
    nanosecond = magicBE === MAGIC_NSEC;
  }
  const u16 = (o: number): number => (le ? buf.readUInt16LE(o) : buf.readUInt16BE(o));
  const u32 = (o: number): number => (le ? buf.readUInt32LE(o) : buf.readUInt32BE(o));

  const major = u16(4);
  if (major !== 2) throw new PcapError(file, `unsupported pcap version ${major}.${u16(6)} (expected 2.4)`);
  const snaplen = u32(16);
  // The upper bits of the link-type field carry FCS information (pcap-linktype(7)).
  const linktype = u32(20) & 0x0fffffff;
  if (linktype !== LINKTYPE_ETHERNET) {
    throw new PcapError(file, `link type ${linktype} is not Ethernet (1); capture on an Ethernet interface`);
  }

  const packets: PcapPacket[] = [];
  let off = FILE_HEADER;
  while (off < buf.length) {
    const n = packets.length;
    if (off + RECORD_HEADER > buf.length) {
      throw new PcapError(file, `packet ${n} at byte ${off}: record header cut short (file truncated)`);
    }
    const tsSec = u32(off);
    const frac = u32(off + 4);
    const inclLen = u32(off + 8);
    const origLen = u32(off + 12);
    if (inclLen > MAX_RECORD) {
      throw new PcapError(file, `packet ${n} at byte ${off}: captured length ${inclLen} is implausible (corrupt file)`);
    }
    if ((nanosecond && frac >= 1e9) || (!nanosecond && frac >= 1e6)) {
      throw new PcapError(file, `packet ${n} at byte ${off}: timestamp fraction ${frac} out of range (corrupt file)`);
    }
    const start = off + RECORD_HEADER;
    if (start + inclLen > buf.length) {
      throw new PcapError(
        file,
        `packet ${n} at byte ${off}: ${inclLen} bytes announced, ${buf.length - start} left (file truncated)`,
      );
    }
    packets.push({
      tsSec,
      tsNsec: nanosecond ? frac : frac * 1000,
      origLen: Math.max(origLen, inclLen),
      data: Buffer.from(buf.subarray(start, start + inclLen)),
    });
    off = start + inclLen;
  }
  return { linktype, snaplen, nanosecond, packets };
}

/** Read a pcap file. Unreadable or malformed files throw a PcapError. */
export async function readPcap(path: string): Promise<PcapFile> {
  let buf: Buffer;
  try {
    buf = await readFile(path);
  } catch (e) {
    throw new PcapError(path, `cannot read: ${ioReason(e)}`);
  }
  return parsePcap(buf, path);
}

/** A little-endian microsecond pcap (LINKTYPE_ETHERNET) of these packets. */
export function formatPcap(packets: readonly PcapPacket[], snaplen = DEFAULT_SNAPLEN): Buffer {
  const parts: Buffer[] = [];
  const head = Buffer.alloc(FILE_HEADER);
  head.writeUInt32LE(MAGIC_USEC, 0);
  head.writeUInt16LE(2, 4);
  head.writeUInt16LE(4, 6);
  head.writeInt32LE(0, 8); // thiszone
  head.writeUInt32LE(0, 12); // sigfigs
  head.writeUInt32LE(snaplen, 16);
  head.writeUInt32LE(LINKTYPE_ETHERNET, 20);
  parts.push(head);
  for (const p of packets) {
    const rec = Buffer.alloc(RECORD_HEADER);
    rec.writeUInt32LE(p.tsSec >>> 0, 0);
    rec.writeUInt32LE(Math.floor(p.tsNsec / 1000), 4);
    rec.writeUInt32LE(p.data.length, 8);
    rec.writeUInt32LE(Math.max(p.origLen, p.data.length), 12);
    parts.push(rec, p.data);
  }
  return Buffer.concat(parts);
}

export async function writePcap(path: string, packets: readonly PcapPacket[], snaplen = DEFAULT_SNAPLEN): Promise<void> {
  try {
    await writeFile(path, formatPcap(packets, snaplen));
  } catch (e) {
    throw new PcapError(path, `cannot write: ${ioReason(e)}`);
  }
}

/** "ENOENT: no such file or directory" without the path Node appends. */
function ioReason(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).replace(/, \w+ '.*'$/, '');
}
