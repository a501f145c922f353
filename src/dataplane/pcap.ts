/**
 * Capture files of LINKTYPE_ETHERNET frames. Reads classic pcap (both byte
 * orders, microsecond 0xa1b2c3d4 and nanosecond 0xa1b23c4d magics) and
 * pcapng (tshark's and dumpcap's default: sections of either byte order,
 * Enhanced, Simple and obsolete Packet Blocks, per-interface if_tsresol;
 * other blocks skipped); writes little-endian microsecond classic pcap.
 */
import { open, readFile, realpath, rename, stat, unlink, writeFile, type FileHandle } from 'node:fs/promises';

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

/** Throws unless the first 4 bytes are a pcap magic (either byte order, µs or ns) or pcapng's. */
function checkMagic(head: Buffer, file: string): void {
  const le = head.readUInt32LE(0);
  const be = head.readUInt32BE(0);
  if (le === MAGIC_USEC || le === MAGIC_NSEC || le === MAGIC_PCAPNG || be === MAGIC_USEC || be === MAGIC_NSEC) return;
  throw new PcapError(file, `not a pcap file: magic 0x${be.toString(16).padStart(8, '0')}`);
}

/** Parse a whole pcap file held in memory. `file` names it in errors. */
export function parsePcap(buf: Buffer, file = '<pcap>'): PcapFile {
  if (buf.length < FILE_HEADER) {
    throw new PcapError(file, `not a pcap file: ${buf.length} bytes, shorter than the 24-byte pcap header`);
  }
  checkMagic(buf, file);
  const magicLE = buf.readUInt32LE(0);
  if (magicLE === MAGIC_PCAPNG) return parsePcapng(buf, file);
  const le = magicLE === MAGIC_USEC || magicLE === MAGIC_NSEC;
  const nanosecond = (le ? magicLE : buf.readUInt32BE(0)) === MAGIC_NSEC;
  const u16 = (o: number): number => (le ? buf.readUInt16LE(o) : buf.readUInt16BE(o));
  const u32 = (o: number): number => (le ? buf.readUInt32LE(o) : buf.readUInt32BE(o));

  const major = u16(4);
  if (major !== 2) throw new PcapError(file, `unsupported pcap version ${major}.${u16(6)} (expected 2.4)`);
  const snaplen = u32(16);
  // The link type is the field's low 16 bits; its top bits may say the frames end in a frame check
  // sequence (f, 0x08000000; its length in 16-bit words in bits 28-31). Masked with 0x0fffffff, such a file
  // was "link type 134217729 is not Ethernet" (found in review, session 43).
  const field = u32(20);
  const linktype = field & 0xffff;
  if (linktype === LINKTYPE_ETHERNET && (field & 0x08000000) !== 0 && (field >>> 28) !== 0) {
    const fcs = (field >>> 28) * 2;
    throw new PcapError(file, `its Ethernet frames end in a ${fcs}-byte frame check sequence, which a translator never sees: cut it off first (editcap -C -${fcs} IN OUT)`);
  }
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

// pcapng (draft-ietf-opsawg-pcapng): blocks of type, total length, body,
// total length again; a Section Header Block (its byte-order magic
// 0x1a2b3c4d says the section's byte order) starts each section, whose
// Interface Description Blocks are numbered from 0.
const BT_SHB = 0x0a0d0d0a;
const BT_IDB = 0x00000001;
const BT_PB = 0x00000002; // obsolete Packet Block
const BT_SPB = 0x00000003;
const BT_EPB = 0x00000006;
const BYTE_ORDER_MAGIC = 0x1a2b3c4d;
const OPT_IF_TSRESOL = 9;
const OPT_IF_TSOFFSET = 14;

interface PcapngInterface {
  readonly linktype: number;
  readonly snaplen: number;
  /** Timestamp units per second. */
  readonly unitsPerSec: bigint;
  readonly offsetSec: bigint;
}

/** A pcapng file held in memory (the magic has been checked). Only Ethernet interfaces are accepted. */
function parsePcapng(buf: Buffer, file: string): PcapFile {
  let le = true;
  let ifaces: PcapngInterface[] = [];
  let sawSection = false;
  const packets: PcapPacket[] = [];
  const u16 = (o: number): number => (le ? buf.readUInt16LE(o) : buf.readUInt16BE(o));
  const u32 = (o: number): number => (le ? buf.readUInt32LE(o) : buf.readUInt32BE(o));
  let off = 0;
  while (off < buf.length) {
    const where = `block at byte ${off}`;
    if (off + 12 > buf.length) throw new PcapError(file, `${where}: block header cut short (file truncated)`);
    if (buf.readUInt32LE(off) === BT_SHB) {
      // The byte order of a section comes from its own header.
      const bom = buf.readUInt32LE(off + 8);
      if (bom === BYTE_ORDER_MAGIC) le = true;
      else if (buf.readUInt32BE(off + 8) === BYTE_ORDER_MAGIC) le = false;
      else throw new PcapError(file, `${where}: section header without the byte-order magic 0x1a2b3c4d (corrupt file)`);
      ifaces = [];
      sawSection = true;
    } else if (!sawSection) {
      throw new PcapError(file, `${where}: pcapng data before any section header (corrupt file)`);
    }
    const type = u32(off);
    const total = u32(off + 4);
    // Only a packet's block is bounded by the largest frame: a name resolution, decryption secrets or comment
    // block of any size that fits the file is skipped (300-700 KB ones were refused: review, session 43).
    const packetBlock = type === BT_EPB || type === BT_SPB || type === BT_PB;
    if (total < 12 || total % 4 !== 0 || (packetBlock && total > MAX_RECORD + 64)) {
      throw new PcapError(file, `${where}: block length ${total} is implausible (corrupt file)`);
    }
    if (off + total > buf.length) {
      throw new PcapError(file, `${where}: ${total} bytes announced, ${buf.length - off} left (file truncated)`);
    }
    if (u32(off + total - 4) !== total) {
      throw new PcapError(file, `${where}: trailing block length differs from the leading one (corrupt file)`);
    }
    const body = off + 8;
    const end = off + total - 4;
    if (type === BT_SHB) {
      const major = u16(body + 4);
      if (major !== 1) throw new PcapError(file, `${where}: unsupported pcapng version ${major}.${u16(body + 6)} (expected 1.0)`);
    } else if (type === BT_IDB) {
      if (body + 8 > end) throw new PcapError(file, `${where}: interface description cut short (corrupt file)`);
      // 16 bits, all of them the link type: masked with 0x0fff, 0x1001 was taken for Ethernet (found in review, session 43).
      const linktype = u16(body);
      if (linktype !== LINKTYPE_ETHERNET) {
        throw new PcapError(file, `interface ${ifaces.length} (${where}): link type ${linktype} is not Ethernet (1); capture on an Ethernet interface`);
      }
      let unitsPerSec = 1_000_000n;
      let offsetSec = 0n;
      forEachOption(buf, body + 8, end, u16, (code, o, len) => {
        if (code === OPT_IF_TSRESOL && len >= 1) {
          const r = buf[o]!;
          const exp = BigInt(r & 0x7f);
          unitsPerSec = r & 0x80 ? 2n ** exp : 10n ** exp;
        } else if (code === OPT_IF_TSOFFSET && len >= 8) {
          offsetSec = le ? buf.readBigInt64LE(o) : buf.readBigInt64BE(o);
        }
      });
      if (unitsPerSec === 0n || unitsPerSec > 10n ** 18n) throw new PcapError(file, `${where}: if_tsresol out of range (corrupt file)`);
      ifaces.push({ linktype, snaplen: u32(body + 4), unitsPerSec, offsetSec });
    } else if (type === BT_EPB || type === BT_PB || type === BT_SPB) {
      const n = packets.length;
      const head = type === BT_SPB ? 4 : 20;
      if (body + head > end) throw new PcapError(file, `packet ${n} (${where}): packet block cut short (corrupt file)`);
      const ifIndex = type === BT_SPB ? 0 : type === BT_PB ? u16(body) : u32(body);
      const iface = ifaces[ifIndex];
      if (iface === undefined) {
        throw new PcapError(file, `packet ${n} (${where}): interface ${ifIndex} was not described before (corrupt file)`);
      }
      let inclLen: number;
      let origLen: number;
      let ts = 0n;
      if (type === BT_SPB) {
        origLen = u32(body);
        inclLen = Math.min(origLen, iface.snaplen === 0 ? origLen : iface.snaplen, end - body - 4);
      } else {
        ts = (BigInt(u32(body + 4)) << 32n) | BigInt(u32(body + 8));
        inclLen = u32(body + 12);
        origLen = u32(body + 16);
      }
      const start = body + head;
      if (inclLen > MAX_RECORD || start + inclLen > end) {
        throw new PcapError(file, `packet ${n} (${where}): captured length ${inclLen} does not fit its ${total}-byte block (corrupt file)`);
      }
      const sec = ts / iface.unitsPerSec + iface.offsetSec;
      const nsec = ((ts % iface.unitsPerSec) * 1_000_000_000n) / iface.unitsPerSec;
      packets.push({
        tsSec: Number(sec),
        tsNsec: Number(nsec),
        origLen: Math.max(origLen, inclLen),
        data: Buffer.from(buf.subarray(start, start + inclLen)),
      });
    }
    // Name resolution, statistics, journal and custom blocks carry no frames.
    off += total;
  }
  const first = ifaces[0];
  return { linktype: LINKTYPE_ETHERNET, snaplen: first?.snaplen || DEFAULT_SNAPLEN, nanosecond: true, packets };
}

/** Call `f(code, offset, length)` for each option in [off, end) up to opt_endofopt. */
function forEachOption(buf: Buffer, off: number, end: number, u16: (o: number) => number, f: (code: number, o: number, len: number) => void): void {
  while (off + 4 <= end) {
    const code = u16(off);
    const len = u16(off + 2);
    if (code === 0) return;
    if (off + 4 + len > end) return; // a cut option: ignore the rest, the frames do not depend on it
    f(code, off + 4, len);
    off += 4 + ((len + 3) & ~3);
  }
}

/** Read a pcap or pcapng file. Unreadable or malformed files throw a PcapError. */
export async function readPcap(path: string): Promise<PcapFile> {
  let buf: Buffer;
  try {
    const st = await stat(path);
    buf = st.isFile() ? await readFile(path) : await readStream(path);
  } catch (e) {
    if (e instanceof PcapError) throw e;
    throw new PcapError(path, `cannot read: ${ioReason(e)}`);
  }
  return parsePcap(buf, path);
}

/** The most read from a pipe or device: a regular file's limit (Node refuses larger files at once). */
export const MAX_STREAM_INPUT = 2 ** 31 - 1;

/**
 * A pipe or device read whole, its magic checked on its first bytes and
 * its length bounded: `--in /dev/zero` grew the process to the machine's
 * memory before the magic was looked at (found in review, session 43).
 */
async function readStream(path: string, max = MAX_STREAM_INPUT): Promise<Buffer> {
  const fh = await open(path, 'r');
  try {
    const chunks: Buffer[] = [];
    let total = 0;
    for (;;) {
      const b = Buffer.allocUnsafe(1 << 20);
      const { bytesRead } = await fh.read(b, 0, b.length, null);
      if (bytesRead === 0) break;
      chunks.push(b.subarray(0, bytesRead));
      const before = total;
      total += bytesRead;
      if (before < 4 && total >= 4) checkMagic(Buffer.concat(chunks), path);
      if (total > max) throw new PcapError(path, `more than ${max} bytes read from this pipe or device: give a capture file under 2 GiB (editcap -c splits one)`);
    }
    return Buffer.concat(chunks);
  } finally {
    await fh.close();
  }
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
  for (const [i, p] of packets.entries()) {
    // A classic pcap's seconds are 32 bits unsigned: a pcapng time outside them was wrapped (found in review, session 43).
    if (!(p.tsSec >= 0 && p.tsSec <= 0xffffffff)) {
      throw new PcapError('<output>', `written frame ${i}: time ${p.tsSec} s is outside what a classic pcap holds (0 to 2^32 - 1 s since 1970)`);
    }
    const rec = Buffer.alloc(RECORD_HEADER);
    rec.writeUInt32LE(p.tsSec, 0);
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

/** An output capture opened before the work that fills it: `commit` writes it whole, `abandon` leaves the path as it was. */
export interface PcapOutput {
  commit(packets: readonly PcapPacket[], snaplen?: number): Promise<void>;
  abandon(): Promise<void>;
}

/**
 * Open `path` for a capture, before anything is read or run (found in
 * review, session 43): the input capture named as the output is refused
 * (it was replaced by the output), a directory or an unwritable place is
 * an error at once (not after every frame ran), and a regular file is
 * written beside the path and renamed over it, so a failure part way (a
 * full disk) leaves the old file. A device or pipe (/dev/stdout) is written
 * in place.
 */
export async function openPcapOutput(path: string, inPath?: string): Promise<PcapOutput> {
  const was = await stat(path).catch(() => undefined);
  if (was?.isDirectory() === true) throw new PcapError(path, 'cannot write: it is a directory; give a file name for the output capture');
  if (inPath !== undefined && was !== undefined) {
    const input = await stat(inPath).catch(() => undefined);
    if (input !== undefined && input.dev === was.dev && input.ino === was.ino) {
      throw new PcapError(path, `is the input capture (${inPath}): the output would replace it; give --out another file`);
    }
  }
  let inPlace = was !== undefined && !was.isFile();
  // A symlink: the file it names is the one written (as a plain write did).
  const real = was === undefined ? path : await realpath(path).catch(() => path);
  let target = inPlace ? path : `${real}.tmp-${process.pid}`;
  /** Written in place after all (a file this process may write in a directory it may not): emptied at the commit. */
  let truncate = false;
  let fh: FileHandle | undefined;
  try {
    fh = await open(target, inPlace ? 'w' : 'wx', 0o644);
    // An existing file keeps its mode and, where this process may give it, its owner (as a write in place did).
    if (!inPlace && was !== undefined) {
      await fh.chmod(was.mode & 0o7777);
      await fh.chown(was.uid, was.gid).catch((e: NodeJS.ErrnoException) => {
        if (e.code !== 'EPERM') throw e;
      });
    }
  } catch (e) {
    await fh?.close().catch(() => undefined);
    if (fh !== undefined && !inPlace) await unlink(target).catch(() => undefined);
    fh = undefined;
    const code = (e as NodeJS.ErrnoException).code;
    if (inPlace || was === undefined || (code !== 'EACCES' && code !== 'EPERM' && code !== 'EROFS')) throw new PcapError(path, `cannot write: ${ioReason(e)}`);
    inPlace = true;
    truncate = true;
    target = path;
    try {
      fh = await open(path, 'r+');
    } catch (e2) {
      throw new PcapError(path, `cannot write: ${ioReason(e2)}`);
    }
  }
  const file = fh;
  let closed = false;
  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    await file.close().catch(() => undefined);
  };
  const abandon = async (): Promise<void> => {
    await close();
    if (!inPlace) await unlink(target).catch(() => undefined);
  };
  return {
    abandon,
    commit: async (packets, snaplen = DEFAULT_SNAPLEN) => {
      try {
        if (truncate) await file.truncate(0);
        await file.writeFile(formatPcap(packets, snaplen));
        if (!inPlace) await file.sync();
        await close();
        if (!inPlace) await rename(target, real);
      } catch (e) {
        await abandon();
        throw new PcapError(path, `cannot write: ${ioReason(e)}`);
      }
    },
  };
}

/** "ENOENT: no such file or directory" without the path Node appends. */
function ioReason(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).replace(/, \w+ '.*'$/, '');
}
