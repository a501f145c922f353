/**
 * One daemon per instance: advisory locks (flock(2)) that the kernel drops
 * when the holder exits, however it exits (SIGKILL included).
 *
 * A daemon holds two, for its whole life (docs/daemon.md, "One daemon per
 * instance"):
 *   - the instance's pin directory, <bpffs>/mup/<instance> (a directory can
 *     be flock'ed; bpffs holds no regular files): whoever holds it owns the
 *     pins and links of the instance;
 *   - <state file>.lock beside the state file, so that two instances never
 *     write the same state file.
 * The holder's pid is read from /proc/locks (and written into the .lock
 * file for people, with the holder's instance name), so a refusal can name
 * it.
 */
import { closeSync, existsSync, fstatSync, openSync, readFileSync, statSync, writeSync, ftruncateSync } from 'node:fs';
import koffi from 'koffi';
import { DEFAULT_BPFFS, pinDir } from './paths.js';

const LOCK_EX = 2;
const LOCK_NB = 4;
const EWOULDBLOCK = 11;

let flockFn: ((fd: number, op: number) => number) | undefined;
function flock(fd: number, op: number): number {
  flockFn ??= koffi.load('libc.so.6').func('int flock(int fd, int operation)') as unknown as (fd: number, op: number) => number;
  return flockFn(fd, op);
}

/** "major:minor:inode" of a path as /proc/locks prints it. */
function lockId(st: { dev: bigint; ino: bigint }): string {
  const dev = st.dev;
  const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
  const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
  return `${major.toString(16).padStart(2, '0')}:${minor.toString(16).padStart(2, '0')}:${st.ino}`;
}

/**
 * The pid holding a flock on `path`, from /proc/locks; undefined if none
 * (or the path does not exist).
 */
export function lockHolder(path: string): number | undefined {
  let id: string;
  try {
    id = lockId(statSync(path, { bigint: true }));
  } catch {
    return undefined;
  }
  let text: string;
  try {
    text = readFileSync('/proc/locks', 'utf8');
  } catch {
    return undefined;
  }
  for (const line of text.split('\n')) {
    // "1: FLOCK  ADVISORY  WRITE 13073 00:29:221213 0 EOF"; waiters have "->" after the number.
    const f = line.trim().split(/\s+/);
    if (f[1] !== 'FLOCK' || f[5] !== id) continue;
    const pid = Number(f[4]);
    if (Number.isInteger(pid) && pid > 0) return pid;
  }
  return undefined;
}

/** A flock this process holds; the kernel releases it when the process ends. */
export class HeldLock {
  #fd: number | undefined;
  readonly #ino: bigint;

  constructor(
    readonly path: string,
    fd: number,
  ) {
    this.#fd = fd;
    this.#ino = fstatSync(fd, { bigint: true }).ino;
  }

  /** Is `path` still the file or directory we locked (not removed, not made again)? */
  stillHere(): boolean {
    try {
      return statSync(this.path, { bigint: true }).ino === this.#ino;
    } catch {
      return false;
    }
  }

  release(): void {
    if (this.#fd === undefined) return;
    closeSync(this.#fd); // closing the only descriptor drops the flock
    this.#fd = undefined;
  }
}

export class LockedError extends Error {
  override readonly name = 'LockedError';
  constructor(
    message: string,
    /** The holder, when /proc/locks or the lock file names it. */
    readonly pid: number | undefined,
    /** The holder's own name for itself (an instance name), when its lock file says. */
    readonly owner?: string,
  ) {
    super(message);
  }
}

/**
 * Take an exclusive flock on `path` without waiting. A directory must
 * exist; a file is created (and our pid written into it). Throws
 * LockedError naming the holder when another process has it.
 */
export function takeLock(path: string, what: string, owner?: string): HeldLock {
  let dir = false;
  try {
    dir = statSync(path).isDirectory();
  } catch {
    // a lock file not made yet
  }
  // libuv opens with O_CLOEXEC: the helpers the daemon spawns do not inherit the lock.
  const fd = openSync(path, dir ? 'r' : 'a+', 0o644);
  if (flock(fd, LOCK_EX | LOCK_NB) !== 0) {
    const errno = koffi.errno();
    closeSync(fd);
    if (errno !== EWOULDBLOCK) throw new Error(`${what}: flock(${path}) failed (errno ${errno})`);
    const pid = lockHolder(path) ?? filePid(path);
    const by = fileOwner(path);
    throw new LockedError(`${what}: ${pid === undefined ? 'another process' : `process ${pid}`}${by === undefined ? '' : ` (${by})`} holds ${path}`, pid, by);
  }
  const held = new HeldLock(path, fd);
  if (!dir) {
    ftruncateSync(fd, 0);
    writeSync(fd, `${process.pid}${owner === undefined ? '' : ` ${owner}`}\n`);
  }
  return held;
}

/** "<pid> [owner]" of a lock file: the owner, if written. */
function fileOwner(path: string): string | undefined {
  try {
    const rest = readFileSync(path, 'utf8').trim().split(/\s+/).slice(1).join(' ');
    return rest === '' ? undefined : rest;
  } catch {
    return undefined;
  }
}

function filePid(path: string): number | undefined {
  try {
    const pid = Number(readFileSync(path, 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** The lock file of a state file. */
export function stateLockPath(stateFile: string): string {
  return `${stateFile}.lock`;
}

/**
 * The pid of the daemon serving `instance` (holding its pin directory under
 * `bpffs`), or undefined when none runs. For commands that must not act
 * under a running daemon (mup teardown).
 */
export function instanceLockHolder(instance: string, bpffs: string = DEFAULT_BPFFS): number | undefined {
  const dir = pinDir(bpffs, instance);
  return existsSync(dir) ? lockHolder(dir) : undefined;
}

/** The pid of the daemon writing `stateFile`, or undefined. */
export function stateLockHolder(stateFile: string): number | undefined {
  return lockHolder(stateLockPath(stateFile));
}
