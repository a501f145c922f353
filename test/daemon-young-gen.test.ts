/**
 * The daemon's young generation stays under its cap (issue 16, RSS
 * flat after warm-up). V8 doubles the new space whenever many young
 * objects survive a scavenge and keeps it while allocation goes on: in the
 * soak the daemon's RSS rose 20-30 MB a few minutes into each life with its
 * live heap flat, and the new space had gone 1 -> 8 -> 16 -> 32 MB
 * (docs/daemon.md "Memory"). Batches of thousands of adds and deletes,
 * whose objects live until the batch is written, grow it the same way in
 * seconds; the daemon's own Prometheus series (prom-client's
 * nodejs_heap_space_size_total_bytes{space="new"}) says how big it is.
 * The cap is node's --max-semi-space-size (src/host/node-flags.ts), which
 * every launcher passes: TestDaemon as the lab and the benchmarks do, the
 * installed `mup` through bin/mup.js's #! line.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { MUP_BIN, TestDaemon } from './helpers/daemon.js';
import { DAEMON_NODE_FLAGS } from '../src/host/node-flags.js';

const isRoot = process.getuid?.() === 0;
const N = 10_000;
const CONFIG = `
settings: { max_policies: 16384, max_localsids: 16 }
policies: []
localsids:
  - { name: s1, sid: "2001:db8:2::/48", src_prefix_len: 64 }
`;

const policy = (i: number): Record<string, string> => ({ name: `p${i}`, match: `10.${i >> 8}.${i & 255}.0/24`, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' });

function newSpaceBytes(metrics: string): number {
  const m = /^nodejs_heap_space_size_total_bytes\{space="new"\} (\d+)/m.exec(metrics);
  if (m === null) throw new Error('no nodejs_heap_space_size_total_bytes{space="new"} in /metrics');
  return Number(m[1]);
}

describe.skipIf(!isRoot)('the daemon keeps its young generation under its cap', () => {
  let d: TestDaemon | undefined;
  beforeAll(async () => {
    d = new TestDaemon({ config: CONFIG });
    await d.start();
  }, 60_000);
  afterAll(async () => {
    await d?.cleanup();
  }, 60_000);

  it(`${N} adds and ${N} deletes in batches, 3 rounds: the new space stays within 8 MiB (2 x --max-semi-space-size)`, async () => {
    const first = await d!.api('GET', '/metrics');
    expect(first.status).toBe(200);
    const atStart = newSpaceBytes(first.text);
    for (let round = 0; round < 3; round++) {
      const add = await d!.api('POST', '/v1/batch', { body: { operations: Array.from({ length: N }, (_, i) => ({ op: 'add', policy: policy(i) })) } });
      expect(add.status, add.text.slice(0, 300)).toBe(200);
      const del = await d!.api('POST', '/v1/batch', { body: { operations: Array.from({ length: N }, (_, i) => ({ op: 'delete', policy: { name: `p${i}` } })) } });
      expect(del.status, del.text.slice(0, 300)).toBe(200);
    }
    const after = newSpaceBytes((await d!.api('GET', '/metrics')).text);
    // Without the cap this is 32 MiB after the first round.
    const cap = 2 * Number(/--max-semi-space-size=(\d+)/.exec(DAEMON_NODE_FLAGS.join(' '))![1]) * 2 ** 20;
    expect(after, `new space ${(after / 2 ** 20).toFixed(1)} MiB after the batches, ${(atStart / 2 ** 20).toFixed(1)} MiB at start`).toBeLessThanOrEqual(cap);
    expect(cap).toBeLessThan(32 * 2 ** 20);
    expect(d!.log, 'no warning about missing node flags').not.toContain('node was started without');
  }, 120_000);

  it("the installed mup runs bin/mup.js through its #! line: that line carries the daemon's node flags", () => {
    const shebang = readFileSync(MUP_BIN, 'utf8').split('\n')[0]!;
    expect(shebang).toBe(`#!/usr/bin/env -S node ${DAEMON_NODE_FLAGS.join(' ')}`);
  });
});
