/**
 * sd_notify(3) for the mup@ service (Type=notify): one datagram "READY=1"
 * to the unix socket systemd names in $NOTIFY_SOCKET, once the program is
 * attached and the API serves. Without $NOTIFY_SOCKET (not under systemd,
 * or Type=simple) nothing is sent.
 *
 * Node has no unix datagram sockets, so socket(AF_UNIX, SOCK_DGRAM) and
 * sendto(2) are called through koffi (already used for libbpf and flock),
 * not through the systemd-notify binary: systemd-notify sends from its own
 * pid, which systemd 252 ignores under the default NotifyAccess=main unless
 * it can attribute it to the service's main process (only systemd 254's
 * --exec does that reliably), and a missing binary would be one more thing
 * to depend on. Both path names and abstract names ("@name": sun_path
 * starting with a NUL byte) are supported, as sd_notify does.
 */
import koffi from 'koffi';

const AF_UNIX = 1;
const SOCK_DGRAM = 2;
const SOCK_CLOEXEC = 0o2000000;
/** sizeof(struct sockaddr_un.sun_path). */
const SUN_PATH = 108;

interface Libc {
  socket(domain: number, type: number, protocol: number): number;
  sendto(fd: number, buf: Buffer, len: number, flags: number, addr: Buffer, addrlen: number): number;
  close(fd: number): number;
  errno(): number;
  strerror(e: number): string;
}
let libc: Libc | undefined;
function sys(): Libc {
  if (libc === undefined) {
    const lib = koffi.load('libc.so.6');
    libc = {
      socket: lib.func('int socket(int domain, int type, int protocol)') as unknown as Libc['socket'],
      sendto: lib.func('long sendto(int fd, const void *buf, size_t len, int flags, const void *addr, uint32_t addrlen)') as unknown as Libc['sendto'],
      close: lib.func('int close(int fd)') as unknown as Libc['close'],
      errno: () => koffi.errno(),
      strerror: lib.func('const char *strerror(int errnum)') as unknown as Libc['strerror'],
    };
  }
  return libc;
}

/** struct sockaddr_un for a $NOTIFY_SOCKET value, and its length as sendto(2) takes it. */
export function notifyAddress(socket: string): { addr: Buffer; len: number } {
  const abstract = socket.startsWith('@');
  const path = Buffer.from(abstract ? socket.slice(1) : socket, 'utf8');
  if (!abstract && !socket.startsWith('/')) throw new Error(`NOTIFY_SOCKET=${socket}: neither an absolute path nor an abstract name (@...)`);
  // A path needs its terminating NUL inside sun_path; an abstract name has the leading one.
  if (path.length + 1 > SUN_PATH) throw new Error(`NOTIFY_SOCKET=${socket}: longer than a unix socket address (${SUN_PATH - 1} bytes)`);
  const addr = Buffer.alloc(2 + SUN_PATH);
  addr.writeUInt16LE(AF_UNIX, 0); // sa_family_t, host order (little-endian on every architecture we build for)
  path.copy(addr, abstract ? 3 : 2);
  // Abstract names are exactly as long as given (no NUL counts); a path's length includes its NUL.
  return { addr, len: 2 + 1 + path.length };
}

/**
 * Send `state` (e.g. "READY=1") to $NOTIFY_SOCKET. Returns false when there
 * is no such socket (not run by systemd's Type=notify). Throws with the
 * errno when the socket is set but the datagram cannot be sent.
 */
export function sdNotify(state: string, env: NodeJS.ProcessEnv = process.env): boolean {
  const socket = env['NOTIFY_SOCKET'];
  if (socket === undefined || socket === '') return false;
  const { addr, len } = notifyAddress(socket);
  const c = sys();
  const fd = c.socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    const e = c.errno();
    throw new Error(`sd_notify: socket(AF_UNIX, SOCK_DGRAM) failed: ${c.strerror(e)} (errno ${e})`);
  }
  try {
    const msg = Buffer.from(state, 'utf8');
    if (c.sendto(fd, msg, msg.length, 0, addr, len) < 0) {
      const e = c.errno();
      throw new Error(`sd_notify: sending "${state}" to NOTIFY_SOCKET=${socket} failed: ${c.strerror(e)} (errno ${e})`);
    }
  } finally {
    c.close(fd);
  }
  return true;
}

/**
 * For the daemon, once attached and serving: READY=1 and the main pid.
 * A failure is logged, not fatal: the translator forwards either way, and
 * systemd reports the start as timed out on its own.
 */
export function notifyReady(log: { info(o: object, msg: string): void; warn(o: object, msg: string): void }): void {
  try {
    if (sdNotify(`READY=1\nMAINPID=${process.pid}`)) log.info({ notifySocket: process.env['NOTIFY_SOCKET'] }, 'told systemd READY=1');
  } catch (e) {
    log.warn({ error: (e as Error).message }, 'could not tell systemd that the daemon is ready');
  }
}
