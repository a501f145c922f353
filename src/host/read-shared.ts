/**
 * A file read into memory that a worker thread can be given without a copy
 * (a SharedArrayBuffer). A reload hands the config's bytes to the parser's
 * thread (src/config/parse-async.ts): given as an ordinary Buffer they were
 * copied on the event loop, 11.6 MB in 50-60 ms on this host, most of it
 * page faults on the fresh copy. Read here, the pages are touched by the
 * threadpool's read(2), and the thread shares them.
 */
import { closeSync, fstatSync, openSync, readFileSync, readSync } from 'node:fs';
import { open } from 'node:fs/promises';

/** Reads of a regular file whose size changes while it is read, before the plain read is used. */
const TRIES = 3;

/**
 * The file's bytes, over a SharedArrayBuffer. A file that grows while read
 * is read again whole; one that is not a regular file, says it is empty
 * (procfs, sysfs) or keeps changing is read as readFile reads it (an
 * ordinary Buffer, copied to a thread it is given to).
 */
export async function readFileShared(path: string): Promise<Buffer> {
  const fh = await open(path, 'r');
  try {
    for (let attempt = 0; attempt < TRIES; attempt++) {
      const st = await fh.stat();
      if (!st.isFile() || st.size === 0) break;
      // One byte more than the size: a read that fills it means the file grew meanwhile.
      const bytes = Buffer.from(new SharedArrayBuffer(st.size + 1));
      let n = 0;
      while (n < bytes.length) {
        const { bytesRead } = await fh.read(bytes, n, bytes.length - n, n);
        if (bytesRead === 0) break;
        n += bytesRead;
      }
      if (n <= st.size) return bytes.subarray(0, n);
    }
    // Positional reads leave the file position at the start.
    return await fh.readFile();
  } finally {
    await fh.close();
  }
}

/**
 * readFileShared with synchronous reads (a start, before the daemon serves):
 * the bytes over a SharedArrayBuffer, so that a thread can hash them while
 * the event loop's thread parses them. Falls back as readFileShared does.
 */
export function readFileSharedSync(path: string): Buffer {
  const fd = openSync(path, 'r');
  try {
    for (let attempt = 0; attempt < TRIES; attempt++) {
      const st = fstatSync(fd);
      if (!st.isFile() || st.size === 0) break;
      const bytes = Buffer.from(new SharedArrayBuffer(st.size + 1));
      let n = 0;
      while (n < bytes.length) {
        const r = readSync(fd, bytes, n, bytes.length - n, n);
        if (r === 0) break;
        n += r;
      }
      if (n <= st.size) return bytes.subarray(0, n);
    }
    return readFileSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * A large file's first lines: its first `max` bytes cut after the last
 * newline in them (all of them if there is none), as text, and the file's
 * size. Undefined for a file of at most `max` bytes (read it whole), or one
 * that cannot be read (its whole read says why). A start reads its
 * settings from them before it reads the rest (src/daemon/daemon.ts).
 */
export function readHead(path: string, max: number): { readonly text: string; readonly size: number } | undefined {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return undefined;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile() || st.size <= max) return undefined;
    const b = Buffer.allocUnsafe(max);
    let n = 0;
    while (n < max) {
      const r = readSync(fd, b, n, max - n, n);
      if (r === 0) break;
      n += r;
    }
    if (n === 0) return undefined;
    // Only the bytes read (a file cut short since its size was read has fewer). No newline in them (a
    // minified JSON file): the head as it is (a JSON value cut short is not read from it).
    const cut = b.subarray(0, n).lastIndexOf(0x0a);
    return { text: b.toString('utf8', 0, cut < 0 ? n : cut + 1), size: st.size };
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}
