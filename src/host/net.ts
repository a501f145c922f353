/** Network helpers of this host. */
import { createServer } from 'node:net';

/** A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed). */
export function freeTcpPort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => res(typeof a === 'object' && a !== null ? a.port : 0));
    });
  });
}
