/**
 * src/host/spawn-early.ts: children spawned before the daemon grows, taken
 * later by the command that would have spawned them. A taken child is the
 * parked one (same pid, output written meanwhile still there); another
 * command, a child that exited or failed, or one parked in another network
 * namespace is never given; what nobody takes is killed.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { dropEarly, parkedCount, spawnChild, spawnEarly, type ChildStdio } from '../../src/host/spawn-early.js';

const STDIO: ChildStdio = ['pipe', 'pipe', 'pipe'];
const exited = (c: { exitCode: number | null; signalCode: string | null; once: (e: 'exit', f: () => void) => unknown }): Promise<void> =>
  new Promise((r) => (c.exitCode !== null || c.signalCode !== null ? r() : c.once('exit', () => r())));
const output = (c: { stdout: NodeJS.ReadableStream }): Promise<string> =>
  new Promise((r) => {
    let s = '';
    c.stdout.on('data', (d: Buffer) => (s += d.toString()));
    c.stdout.on('end', () => r(s));
  });

afterEach(() => {
  dropEarly();
});

describe('spawnEarly / spawnChild', () => {
  it('gives the parked child to the same command, with what it wrote while parked', async () => {
    const runs = join(mkdtempSync(join(tmpdir(), 'mup-spawn-early-')), 'runs');
    const cmd = ['-c', `echo run >> ${runs}; echo early; read x; echo "got $x"`];
    spawnEarly('sh', cmd, STDIO);
    expect(parkedCount()).toBe(1);
    await new Promise((r) => setTimeout(r, 200)); // it writes its first line while nobody reads
    const c = spawnChild('sh', cmd, STDIO);
    expect(parkedCount()).toBe(0);
    const out = output(c);
    c.stdin!.end('this\n');
    expect(await out).toBe('early\ngot this\n');
    expect(readFileSync(runs, 'utf8')).toBe('run\n'); // the parked one: nothing spawned again
    rmSync(dirname(runs), { recursive: true });
  });

  it('spawns anew for other arguments or other stdio, and leaves the parked one parked', async () => {
    spawnEarly('sleep', ['30'], STDIO);
    const other = spawnChild('sleep', ['31'], STDIO);
    const otherStdio = spawnChild('sleep', ['30'], ['ignore', 'pipe', 'pipe']);
    expect(parkedCount()).toBe(1);
    for (const c of [other, otherStdio]) {
      c.kill('SIGKILL');
      await exited(c);
    }
    expect(dropEarly()).toBe(1);
    expect(parkedCount()).toBe(0);
  });

  it('never gives a child that exited: a new one is spawned', async () => {
    const runs = join(mkdtempSync(join(tmpdir(), 'mup-spawn-early-')), 'runs');
    const cmd = ['-c', `echo run >> ${runs}; exit 3`];
    spawnEarly('sh', cmd, STDIO);
    await new Promise((r) => setTimeout(r, 300)); // it has run and exited
    expect(readFileSync(runs, 'utf8')).toBe('run\n');
    const c = spawnChild('sh', cmd, STDIO);
    await exited(c);
    expect(c.exitCode).toBe(3);
    expect(readFileSync(runs, 'utf8')).toBe('run\nrun\n');
    rmSync(dirname(runs), { recursive: true });
  });

  it('a command that cannot start: no crash while parked; its user gets the error from a new spawn', async () => {
    spawnEarly('/nonexistent/mup-no-such-command', [], STDIO);
    await new Promise((r) => setTimeout(r, 100));
    const c = spawnChild('/nonexistent/mup-no-such-command', [], STDIO);
    const err = await new Promise<NodeJS.ErrnoException>((r) => c.once('error', r));
    expect(err.code).toBe('ENOENT');
  });

  it('dropEarly kills what nobody took and says how many', async () => {
    spawnEarly('sleep', ['30'], STDIO);
    spawnEarly('sleep', ['30'], STDIO);
    expect(parkedCount()).toBe(2);
    expect(dropEarly()).toBe(2);
    expect(parkedCount()).toBe(0);
    const c = spawnChild('sleep', ['30'], STDIO); // none parked: a new one
    c.kill('SIGKILL');
    await exited(c);
    expect(c.signalCode).toBe('SIGKILL');
  });
});
