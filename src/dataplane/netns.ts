/**
 * Network namespaces for the loader: run a synchronous function inside a
 * named namespace (`ip netns` convention, /var/run/netns/NAME) on the calling
 * thread, and come back.
 *
 * setns(2) with CLONE_NEWNET changes the namespace of the calling thread
 * only; libuv's worker threads stay where they are. Netlink sockets
 * (bpf_xdp_attach) and interface lookups (if_nametoindex) made on this thread
 * meanwhile belong to the target namespace. BPF objects (programs, maps) are
 * not namespaced: load them anywhere, attach them here. Loading from the root
 * namespace also keeps /sys/fs/bpf pins visible, which `ip netns exec` hides
 * (it remounts /sys).
 */
import { closeSync, openSync } from 'node:fs';
import { join } from 'node:path';
import koffi from 'koffi';

/** Where `ip netns add NAME` binds the namespace. */
export const NETNS_DIR = '/var/run/netns';

const CLONE_NEWNET = 0x40000000;

const libc = koffi.load('libc.so.6');
const setnsFn = libc.func('int setns(int fd, int nstype)') as unknown as (fd: number, nstype: number) => number;
const ifNameToIndexFn = libc.func('unsigned int if_nametoindex(const char *ifname)') as unknown as (
  name: string,
) => number;
const strerror = libc.func('const char *strerror(int errnum)') as unknown as (e: number) => string;

/** Entering, leaving or looking inside a network namespace failed. */
export class NetnsError extends Error {
  override readonly name = 'NetnsError';
  constructor(
    message: string,
    /** errno name (ENOENT, EPERM, ...) when a system call failed. */
    readonly code?: string,
  ) {
    super(message);
  }
}

function errnoText(): { text: string; code: string } {
  const e = koffi.errno();
  const code = Object.entries(koffi.os.errno).find(([, v]) => v === e)?.[0] ?? `errno ${e}`;
  return { text: `${strerror(e)} (${code})`, code };
}

/** A namespace name as `ip netns` accepts it: no path separators, not "." or "..". */
export function checkNetnsName(name: string): void {
  if (name === '' || name === '.' || name === '..' || name.includes('/') || name.includes('\0')) {
    throw new NetnsError(`"${name}" is not a network namespace name (see \`ip netns list\`)`);
  }
}

function openNs(path: string, what: string): number {
  try {
    return openSync(path, 'r');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const hint = code === 'ENOENT' ? ': no such namespace (create it with `ip netns add`, list them with `ip netns list`)' : '';
    throw new NetnsError(`cannot open ${what} ${path}${hint}: ${(e as Error).message}`, code);
  }
}

function enter(fd: number, what: string): void {
  if (setnsFn(fd, CLONE_NEWNET) !== 0) {
    const { text, code } = errnoText();
    throw new NetnsError(`setns() into ${what} failed: ${text}`, code);
  }
}

/**
 * Run `fn` with the calling thread in network namespace `name` (undefined:
 * where the thread already is), then return to the thread's namespace, also
 * when `fn` throws. `fn` must be synchronous: code that awaits would resume
 * in whichever namespace the thread is in by then.
 */
export function inNetns<T>(name: string | undefined, fn: () => T): T {
  if (name === undefined) return fn();
  checkNetnsName(name);
  const home = openNs('/proc/thread-self/ns/net', 'the current network namespace');
  try {
    const target = openNs(join(NETNS_DIR, name), `network namespace ${name}`);
    try {
      enter(target, `network namespace ${name}`);
    } finally {
      closeSync(target);
    }
    let result: T;
    try {
      result = fn();
    } finally {
      // Failing to come back would leave every later socket of this thread in
      // the wrong namespace: not recoverable, so it is loud.
      enter(home, 'the original network namespace');
    }
    if (result instanceof Promise) {
      throw new NetnsError('inNetns() needs a synchronous function: a Promise cannot be kept inside the namespace');
    }
    return result;
  } finally {
    closeSync(home);
  }
}

/** Index of interface `ifname` in namespace `netns` (default: the current one). */
export function ifIndex(ifname: string, netns?: string): number {
  return inNetns(netns, () => {
    const index = ifNameToIndexFn(ifname);
    if (index === 0) {
      const where = netns === undefined ? '' : ` in network namespace ${netns}`;
      throw new NetnsError(`no interface ${ifname}${where} (see \`ip${netns === undefined ? '' : ` -n ${netns}`} link\`)`, 'ENODEV');
    }
    return index;
  });
}

/**
 * Move the calling thread into network namespace `name` for good (the
 * daemon's --netns: its sockets, interfaces and XDP links are then those of
 * that namespace). Node's own worker threads stay where they were; the
 * daemon makes every network and BPF call on the main thread.
 */
export function enterNetns(name: string): void {
  checkNetnsName(name);
  const target = openNs(join(NETNS_DIR, name), `network namespace ${name}`);
  try {
    enter(target, `network namespace ${name}`);
  } finally {
    closeSync(target);
  }
}
