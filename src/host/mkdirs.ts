/**
 * `mkdir -p` that always ends. Node's `mkdirSync(dir, { recursive: true })`
 * (and fs.promises.mkdir) never returns when mkdir(2) answers ENOENT under a
 * parent that exists: it makes the parent (EEXIST), tries the child again,
 * and loops at 100 % CPU. Pseudo filesystems answer so: /sys/fs/bpf before
 * a bpf filesystem is mounted on it, /proc. A daemon given
 * `--bpffs /sys/fs/bpf/mine` on such a host hung before its first log line.
 * Here each missing component is made once, in order, and a refusal is an
 * error that names the directory and why.
 */
import { mkdirSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

function code(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException).code;
}

/** The refusal, worded, with the system error's code, errno, syscall and path (callers map ENOSPC and EDQUOT to their own answers). */
function refusal(message: string, from: Pick<NodeJS.ErrnoException, 'code' | 'errno' | 'syscall' | 'path'>, cause?: Error): NodeJS.ErrnoException {
  const e: NodeJS.ErrnoException = new Error(message, cause === undefined ? undefined : { cause });
  const { code: c, errno, syscall, path } = from;
  Object.assign(e, { code: c }, errno === undefined ? {} : { errno }, syscall === undefined ? {} : { syscall }, path === undefined ? {} : { path });
  return e;
}

/** Is `p` a directory (true), something else (false), or missing (undefined)? */
function isDir(p: string): boolean | undefined {
  try {
    return statSync(p).isDirectory();
  } catch (e) {
    if (code(e) === 'ENOENT' || code(e) === 'ENOTDIR') return undefined;
    throw e;
  }
}

/**
 * Make `dir` and every missing parent, each with `mode` (as mkdir(2): less
 * the umask). Returns the first directory it made (absolute), or undefined
 * if `dir` was there already. A refusal is an Error with the system's
 * `code` (ENOTDIR for a component that is a file).
 */
export function makeDirs(dir: string, mode = 0o777): string | undefined {
  const target = resolve(dir);
  const missing: string[] = [];
  for (let p = target; ; p = dirname(p)) {
    const d = isDir(p);
    if (d === true) break;
    if (d === false) throw refusal(`cannot make directory ${target}: ${p} exists and is not a directory`, { code: 'ENOTDIR', path: p });
    missing.push(p);
    if (dirname(p) === p) break;
  }
  for (let i = missing.length - 1; i >= 0; i--) {
    const p = missing[i]!;
    try {
      mkdirSync(p, { mode });
    } catch (e) {
      if (code(e) === 'EEXIST' && isDir(p) === true) continue; // made by someone else meanwhile
      const why =
        code(e) === 'ENOENT'
          ? `the filesystem of ${dirname(p)} does not allow new directories there (mkdir: ENOENT)`
          : (e as Error).message;
      throw refusal(`cannot make directory ${p}: ${why}`, e as NodeJS.ErrnoException, e as Error);
    }
  }
  return missing.at(-1);
}
