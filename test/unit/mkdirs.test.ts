/**
 * makeDirs (src/host/mkdirs.ts), the `mkdir -p` every directory the project
 * makes goes through: it makes what is missing, with the mode asked, and
 * ends with an error naming the directory where Node's recursive mkdirSync
 * loops for ever (mkdir(2) answering ENOENT under a parent that exists, as
 * /proc does on every Linux and /sys/fs/bpf before a bpffs is mounted).
 */
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makeDirs } from '../../src/host/mkdirs.js';

const dir = mkdtempSync(join(tmpdir(), 'mup-mkdirs-'));

function codeOf(f: () => unknown): string | undefined {
  try {
    f();
  } catch (e) {
    return (e as NodeJS.ErrnoException).code;
  }
  return undefined;
}
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('makeDirs', () => {
  it('makes every missing component with the mode given, and says which it made first', () => {
    const old = process.umask(0o022);
    try {
      const deep = join(dir, 'a', 'b', 'c');
      expect(makeDirs(deep, 0o700)).toBe(join(dir, 'a'));
      for (const p of [join(dir, 'a'), join(dir, 'a', 'b'), deep]) {
        expect(statSync(p).isDirectory()).toBe(true);
        expect(statSync(p).mode & 0o777).toBe(0o700);
      }
      expect(makeDirs(deep, 0o700)).toBeUndefined();
      expect(makeDirs(`${deep}/`)).toBeUndefined();
    } finally {
      process.umask(old);
    }
  });

  it('refuses a path through a file, naming it', () => {
    const file = join(dir, 'file');
    writeFileSync(file, '');
    expect(() => makeDirs(join(file, 'x', 'y'))).toThrow(`cannot make directory ${join(file, 'x', 'y')}: ${file} exists and is not a directory`);
    expect(() => makeDirs(file)).toThrow('exists and is not a directory');
    expect(codeOf(() => makeDirs(join(file, 'x')))).toBe('ENOTDIR');
  });

  it('ends with an error where mkdir(2) says ENOENT under an existing parent (Node\'s recursive mkdirSync never returns there)', () => {
    const where = `/proc/mup-mkdirs-${process.pid}`;
    expect(() => makeDirs(join(where, 'bpffs'))).toThrow(`cannot make directory ${where}: the filesystem of /proc does not allow new directories there (mkdir: ENOENT)`);
    // The system's code stays: a caller tells a full disk (ENOSPC) from the rest by it.
    expect(codeOf(() => makeDirs(join(where, 'bpffs')))).toBe('ENOENT');
  });

  it('passes other refusals on with the directory and the system\'s words', () => {
    // sysfs answers EPERM (root or not; EROFS where /sys is mounted read-only): no directory of our own there.
    expect(() => makeDirs('/sys/mup-mkdirs-test/x')).toThrow(/^cannot make directory \/sys\/mup-mkdirs-test: .*(EPERM|EACCES|EROFS)/);
    expect(codeOf(() => makeDirs('/sys/mup-mkdirs-test/x'))).toMatch(/^(EPERM|EACCES|EROFS)$/);
  });
});
