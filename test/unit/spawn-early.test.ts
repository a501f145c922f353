/**
 * src/host/spawn-early.ts: children spawned before the daemon grows, taken
 * later by the command that would have spawned them. A taken child is the
 * parked one (output written meanwhile still there, nothing run twice);
 * another command, or a child that exited or failed, is never given; what
 * nobody takes is killed, by owner. (The network namespace in the key is
 * not tested here: that takes a second namespace for this process.)
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
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

const dir = mkdtempSync(join(tmpdir(), 'mup-spawn-early-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(() => {
  dropEarly();
});

async function until(ok: () => boolean): Promise<void> {
  for (let i = 0; !ok(); i++) {
    if (i > 500) throw new Error('not within 10 s');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('spawnEarly / spawnChild', () => {
  it('gives the parked child to the same command, with what it wrote while parked', async () => {
    const runs = join(dir, 'runs1');
    // It writes its first line, then marks that it has: the line is in the pipe before the take.
    const cmd = ['-c', `echo early; echo run >> ${runs}; read x; echo "got $x"`];
    spawnEarly('sh', cmd, STDIO);
    expect(parkedCount()).toBe(1);
    await until(() => existsSync(runs));
    const c = spawnChild('sh', cmd, STDIO);
    expect(parkedCount()).toBe(0);
    const out = output(c);
    c.stdin!.end('this\n');
    expect(await out).toBe('early\ngot this\n');
    expect(readFileSync(runs, 'utf8')).toBe('run\n'); // the parked one: nothing spawned again
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
    const runs = join(dir, 'runs2');
    const cmd = ['-c', `echo run >> ${runs}; exit 3`];
    await exited(spawnEarly('sh', cmd, STDIO)!);
    expect(readFileSync(runs, 'utf8')).toBe('run\n');
    const c = spawnChild('sh', cmd, STDIO);
    await exited(c);
    expect(c.exitCode).toBe(3);
    expect(readFileSync(runs, 'utf8')).toBe('run\nrun\n');
  });

  it('a command that cannot start: no crash while parked; its user gets the error from a new spawn', async () => {
    const p = spawnEarly('/nonexistent/mup-no-such-command', [], STDIO)!;
    await new Promise((r) => p.once('error', r)); // parked: the module's own listener kept it from ending the process
    const c = spawnChild('/nonexistent/mup-no-such-command', [], STDIO);
    expect(c).not.toBe(p);
    const err = await new Promise<NodeJS.ErrnoException>((r) => c.once('error', r));
    expect(err.code).toBe('ENOENT');
  });

  it('dropEarly kills what nobody took and says how many', async () => {
    const a = spawnEarly('sleep', ['30'], STDIO)!;
    const b = spawnEarly('sleep', ['30'], STDIO)!;
    expect(parkedCount()).toBe(2);
    expect(dropEarly()).toBe(2);
    expect(parkedCount()).toBe(0);
    await Promise.all([exited(a), exited(b)]);
    expect([a.signalCode, b.signalCode]).toEqual(['SIGKILL', 'SIGKILL']);
    const c = spawnChild('sleep', ['30'], STDIO); // none parked: a new one
    expect(c.pid).not.toBe(a.pid);
    c.kill('SIGKILL');
    await exited(c);
  });

  it('dropEarly(owner) kills only that owner\'s children (two daemons in one process)', async () => {
    const one = {};
    const two = {};
    const a = spawnEarly('sleep', ['30'], STDIO, one)!;
    spawnEarly('sleep', ['30'], STDIO, two);
    expect(dropEarly(one)).toBe(1);
    await exited(a);
    expect(parkedCount()).toBe(1);
    const c = spawnChild('sleep', ['30'], STDIO); // two's, still running
    expect(parkedCount()).toBe(0);
    expect(c.exitCode).toBeNull();
    c.kill('SIGKILL');
    await exited(c);
  });
});
