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
 * the umask). Returns the first directory it made, or undefined if `dir`
 * was there already (as mkdirSync's recursive form).
 */
export function makeDirs(dir: string, mode = 0o777): string | undefined {
  const target = resolve(dir);
  const missing: string[] = [];
  for (let p = target; ; p = dirname(p)) {
    const d = isDir(p);
    if (d === true) break;
    if (d === false) throw new Error(`cannot make directory ${target}: ${p} exists and is not a directory`);
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
      throw new Error(`cannot make directory ${p}: ${why}`);
    }
  }
  return missing.at(-1);
}
