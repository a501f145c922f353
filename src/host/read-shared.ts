/**
 * A file read into memory that a worker thread can be given without a copy
 * (a SharedArrayBuffer). A reload hands the config's bytes to the parser's
 * thread (src/config/parse-async.ts): given as an ordinary Buffer they were
 * copied on the event loop, 11.6 MB in 50-60 ms on this host, most of it
 * page faults on the fresh copy. Read here, the pages are touched by the
 * threadpool's read(2), and the thread shares them.
 */
import { open } from 'node:fs/promises';

/** The file's bytes, over a SharedArrayBuffer; a file that grows while read is read again whole. */
export async function readFileShared(path: string): Promise<Buffer> {
  const fh = await open(path, 'r');
  try {
    for (;;) {
      const { size } = await fh.stat();
      // One byte more than the size: a read that fills it means the file grew meanwhile.
      const bytes = Buffer.from(new SharedArrayBuffer(size + 1));
      let n = 0;
      while (n < bytes.length) {
        const { bytesRead } = await fh.read(bytes, n, bytes.length - n, n);
        if (bytesRead === 0) break;
        n += bytesRead;
      }
      if (n <= size) return bytes.subarray(0, n);
    }
  } finally {
    await fh.close();
  }
}
