/**
 * IpBatch reads each answer of its `ip -json -batch -` children as one
 * line, however stdout cuts it: a route table of 200,000 routes is one line
 * of about 20 MB, in 64 KiB chunks. Appending each chunk to one string and
 * searching all of it for the newline was quadratic (9.4 s of the event
 * loop for that table, its worst chunk 67 ms), and decoding each chunk on
 * its own broke a character whose UTF-8 bytes straddle two chunks.
 */
import { EventEmitter } from 'node:events';
import { describe, expect, it, vi } from 'vitest';
import { IpBatch } from '../../src/dataplane/nexthop.js';

const children = vi.hoisted(() => [] as Array<{ stdout: EventEmitter; writes: string[] }>);

vi.mock('../../src/host/spawn-early.js', () => ({
  spawnEarly: (): undefined => undefined,
  spawnChild: (): unknown => {
    const writes: string[] = [];
    const c = Object.assign(new EventEmitter(), {
      stdout: new EventEmitter(),
      stderr: new EventEmitter(),
      stdin: Object.assign(new EventEmitter(), { write: (s: string): boolean => writes.push(s) > 0 }),
      kill: (): boolean => true,
    });
    children.push({ stdout: c.stdout, writes });
    return c;
  },
}));

/** Feed `bytes` to the child's stdout in pieces ending at `cuts` (offsets), each 'data' event synchronous. */
function feed(stdout: EventEmitter, bytes: Buffer, cuts: readonly number[]): void {
  let at = 0;
  for (const end of [...cuts, bytes.length]) {
    if (end <= at) continue;
    const chunk = Buffer.from(bytes.subarray(at, end));
    stdout.emit('data', chunk);
    at = end;
  }
}

describe('IpBatch: answers cut into chunks', () => {
  it('reads a 20 MB answer in 64 KiB chunks, whole', async () => {
    children.length = 0;
    const b = new IpBatch();
    const n = 200_000;
    const routes = Array.from({ length: n }, (_, i) => ({ dst: `10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`, gateway: '192.0.2.1', dev: 'eth1', protocol: 'bgp', metric: 20, flags: [] }));
    const answer = b.run<typeof routes>('4', ['route', 'show', 'table', 'all']);
    const c = children[0]!;
    expect(c.writes).toEqual(['route show table all\n']);
    const bytes = Buffer.from(`${JSON.stringify(routes)}\n`);
    const cuts = Array.from({ length: Math.floor(bytes.length / 65536) }, (_, i) => (i + 1) * 65536);
    expect(cuts.length).toBeGreaterThan(250);
    // (Its time is not asserted: 110-130 ms here now, 9.5 s with one growing string searched whole per chunk.)
    feed(c.stdout, bytes, cuts);
    const got = await answer;
    expect(got.length).toBe(n);
    expect(got[n - 1]).toEqual(routes[n - 1]);
    expect(got[77_777]).toEqual(routes[77_777]);
    b.close();
  });

  it('a line cut across chunks, several lines in one chunk, and a character cut between two chunks', async () => {
    children.length = 0;
    const b = new IpBatch();
    const one = b.run<unknown[]>('any', ['link', 'show']);
    const two = b.run<unknown[]>('any', ['neigh', 'show']);
    const three = b.run<unknown[]>('any', ['link', 'show']);
    const four = b.run<unknown[]>('any', ['neigh', 'show']);
    const c = children[0]!;
    expect(c.writes).toHaveLength(4);
    const links = [{ ifindex: 2, ifname: 'eth1', ifalias: 'café uplink', mtu: 1500 }];
    const neighs = [{ dst: '192.0.2.1', dev: 'eth1', lladdr: 'aa:aa:aa:aa:aa:01', state: ['REACHABLE'] }];
    const bytes = Buffer.from(`${JSON.stringify(links)}\n${JSON.stringify(neighs)}\n\n${JSON.stringify(links)}\n`);
    // é is two bytes (c3 a9): cut between them; then the rest of line 1, all of lines 2 and 3, and the start of line 4 in one chunk.
    const e = bytes.indexOf(Buffer.from('é')) + 1;
    const startOf4 = bytes.lastIndexOf(Buffer.from('[{')) + 3;
    feed(c.stdout, bytes, [3, e, startOf4]);
    expect(await one).toEqual(links);
    expect(await two).toEqual(neighs);
    expect(await three).toEqual([]);
    expect(await four).toEqual(links);
    b.close();
  });
});
