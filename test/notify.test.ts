/**
 * sd_notify (src/host/notify.ts) against a datagram socket that python3
 * binds as systemd would: a path, and an abstract name (@...).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { sdNotify } from '../src/host/notify.js';
import { waitFor } from './helpers/netns.js';

const dir = mkdtempSync(join(tmpdir(), 'mup-notify-'));
const procs: ChildProcess[] = [];
afterAll(() => {
  for (const p of procs) p.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** A python3 listener on `addr` ("@name" = abstract); the messages it received, one per line. */
async function listen(addr: string): Promise<() => string[]> {
  const py =
    'import socket,sys\na=sys.argv[1]\na="\\0"+a[1:] if a.startswith("@") else a\n' +
    's=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM)\ns.bind(a)\nprint("listening",flush=True)\n' +
    'while True:\n  print(s.recv(4096).decode().replace("\\n","|"),flush=True)\n';
  const p = spawn('/usr/bin/python3', ['-u', '-c', py, addr], { stdio: ['ignore', 'pipe', 'inherit'] });
  procs.push(p);
  let out = '';
  p.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  await waitFor(`python3 listening on ${addr}`, 30_000, () => (out.includes('listening\n') ? true : undefined));
  return () => out.split('\n').slice(1).filter((l) => l !== '');
}

describe('sdNotify', () => {
  it('sends the state to a socket path and to an abstract name', async () => {
    const path = join(dir, 'notify.sock');
    const abstract = `@mupt-notify-${process.pid}`;
    for (const addr of [path, abstract]) {
      const got = await listen(addr);
      expect(sdNotify('READY=1\nSTATUS=up', { NOTIFY_SOCKET: addr })).toBe(true);
      expect(await waitFor(`the datagram at ${addr}`, 10_000, () => got()[0])).toBe('READY=1|STATUS=up');
    }
  });

  it('does nothing without NOTIFY_SOCKET, and names the errno when the socket is not there', () => {
    expect(sdNotify('READY=1', {})).toBe(false);
    expect(sdNotify('READY=1', { NOTIFY_SOCKET: '' })).toBe(false);
    expect(() => sdNotify('READY=1', { NOTIFY_SOCKET: join(dir, 'nobody-listens.sock') })).toThrow(/sending "READY=1" to NOTIFY_SOCKET=.*nobody-listens\.sock failed: No such file or directory \(errno 2\)/);
    expect(() => sdNotify('READY=1', { NOTIFY_SOCKET: 'relative.sock' })).toThrow(/neither an absolute path nor an abstract name/);
  });
});
