/**
 * A counter read (GET /v1/counters, /metrics) made in slices meets a reload
 * that swaps in a new build of the program: the data plane it began on is
 * closed under it, and the read is made again on the new one
 * (Daemon.countersRowsAsync) rather than failing. Real daemon in this
 * process on a copy of the object; the second build differs by its
 * MUP_BUILD_ID. The old data plane's read is held until the swap is done,
 * so that the swap always lands inside it. And the swap settles the old
 * tables' pending deletes first (test/function-totals.test.ts shows what
 * that keeps).
 */
import { copyFileSync, existsSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bpfCflags } from '../src/dataplane/cflags.js';
import { DEFAULT_OBJECT } from '../src/dataplane/index.js';
import { COUNTER_STRIDE, decodePercpuCounter, LAYOUTS, MUP_EVENT_SLOTS } from '../src/dataplane/codec.js';
import { graceClock } from '../src/dataplane/grace.js';
import { numPossibleCpus } from '../src/dataplane/libbpf.js';
import { counterLookup, counterUpdate } from '../src/dataplane/counter-map.js';
import { parseIpv6Prefix } from '../src/sid/addr.js';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';

const REPO = fileURLToPath(new URL('..', import.meta.url));
const isRoot = process.getuid?.() === 0;

describe.skipIf(!isRoot || !existsSync(DEFAULT_OBJECT))('a counter read across a program swap', () => {
  let run: InProcDaemon | undefined;
  let object = '';
  beforeAll(async () => {
    const policies = Array.from({ length: 20 }, (_, i) => `  - { name: p${i}, match: 10.0.${i}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`);
    const config = `settings: { max_policies: 64, max_localsids: 16 }\npolicies:\n${policies.join('\n')}\n`;
    // The daemon runs a copy of the object, which the test replaces with another build.
    object = join(mkdtempSync(join(tmpdir(), 'mup-cswap-obj-')), 'mup.bpf.o');
    copyFileSync(DEFAULT_OBJECT, object);
    run = await startInProcDaemon('cswap', config, { object });
  }, 120_000);
  afterAll(() => {
    try {
      run?.stop();
    } finally {
      if (object !== '') rmSync(dirname(object), { recursive: true, force: true });
    }
  });

  it('is made again on the new data plane, with the same rows', async () => {
    const d = run!.daemon;
    const next = join(dirname(object), 'next.bpf.o');
    await execa('clang', [...bpfCflags(), '-DMUP_BUILD_ID=7', '-c', join(REPO, 'bpf/mup.bpf.c'), '-o', next], { cwd: REPO });
    const old = d.dataplane;
    const read = old.countersRowsAsync.bind(old);
    let release = (): void => {};
    const swapped = new Promise<void>((r) => (release = r));
    Object.assign(old, { countersRowsAsync: async (...a: Parameters<typeof read>) => (await swapped, read(...a)) });
    const counting = d.countersRowsAsync('all');
    renameSync(next, object);
    const r = await d.reload({ reason: 'test' });
    expect(r).toMatchObject({ programReplaced: true });
    expect(d.dataplane).not.toBe(old);
    release();
    // Before the retry: "closed" (the old data plane's read refused).
    const rows = await counting;
    expect([...rows.rules]).toEqual(d.counters('all').rules);
    expect([...rows.rules]).toHaveLength(20);
  }, 120_000);

  it('settles the old tables before the new ones take the maps over: a deleted local SID keeps its packets in its total', async () => {
    const d = run!.daemon;
    const next = join(dirname(object), 'next8.bpf.o');
    await execa('clang', [...bpfCflags(), '-DMUP_BUILD_ID=8', '-c', join(REPO, 'bpf/mup.bpf.c'), '-o', next], { cwd: REPO });
    await d.putRule('localsid', { name: 'ls1', sid: '2001:db8:9::/48', src_prefix_len: 64 }, 'add');
    const dp = d.dataplane;
    const key = Buffer.alloc(4);
    key.writeUInt32LE(MUP_EVENT_SLOTS + dp.rules.localsidRule(parseIpv6Prefix('2001:db8:9::/48', 't'))!);
    // Its packets, as the program counts them (CPU 0's copy).
    const v = Buffer.alloc(COUNTER_STRIDE * numPossibleCpus());
    v.writeBigUInt64LE(5n, LAYOUTS.mup_counter.members.packets.offset);
    v.writeBigUInt64LE(500n, LAYOUTS.mup_counter.members.bytes.offset);
    counterUpdate(dp.maps.counters, key, v, 1, numPossibleCpus());
    const before = d.counters('none').functions.end_m_gtp4_e;
    expect(before.packets).toBeGreaterThanOrEqual(5n);
    // Its delete's reclaim held back, as when a reload comes within the delete's grace period.
    Object.assign(graceClock, { done: () => false });
    try {
      await d.deleteRule('localsid', { name: 'ls1' });
      await new Promise((r) => setTimeout(r, 100)); // the reclaim's wake-up has come and gone
    } finally {
      delete (graceClock as unknown as Record<string, unknown>)['done'];
    }
    const slot = (): bigint => decodePercpuCounter(counterLookup(dp.maps.counters, key.readUInt32LE(0), numPossibleCpus()), numPossibleCpus()).packets;
    expect(slot()).toBe(5n);
    renameSync(next, object);
    const r = await d.reload({ reason: 'test' });
    expect(r).toMatchObject({ programReplaced: true });
    expect(d.dataplane).not.toBe(dp);
    // Before the fix: 5 packets fewer (the new tables zeroed the slot, not knowing the local SID's function).
    expect(d.counters('none').functions.end_m_gtp4_e).toEqual(before);
  }, 120_000);
});
