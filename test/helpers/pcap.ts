/** Minimal classic pcap writer (LINKTYPE_ETHERNET), enough for tshark -r. */
import { writeFileSync } from 'node:fs';

export function pcapBytes(frames: readonly Buffer[]): Buffer {
  const header = Buffer.alloc(24);
  header.writeUInt32LE(0xa1b2c3d4, 0); // magic, microsecond timestamps
  header.writeUInt16LE(2, 4);
  header.writeUInt16LE(4, 6);
  header.writeInt32LE(0, 8); // thiszone
  header.writeUInt32LE(0, 12); // sigfigs
  header.writeUInt32LE(65535, 16); // snaplen
  header.writeUInt32LE(1, 20); // LINKTYPE_ETHERNET
  const parts: Buffer[] = [header];
  frames.forEach((f, i) => {
    const rec = Buffer.alloc(16);
    rec.writeUInt32LE(1_700_000_000 + i, 0);
    rec.writeUInt32LE(0, 4);
    rec.writeUInt32LE(f.length, 8);
    rec.writeUInt32LE(f.length, 12);
    parts.push(rec, f);
  });
  return Buffer.concat(parts);
}

export function writePcap(path: string, frames: readonly Buffer[]): void {
  writeFileSync(path, pcapBytes(frames));
}
