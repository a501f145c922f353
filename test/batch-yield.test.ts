/**
 * A large POST /v1/batch lets the event loop run while it is planned (issue
 * 19: nothing blocks the loop for long). The plan of 10,000 operations
 * (validation of each, against the rule set) took 50-300 ms in one piece;
 * it now runs in slices of PLAN_SLICE operations, with the daemon's serial
 * section held so that no other change moves the rule set under it.
 *
 * The daemon runs in this process (startInProcDaemon: the real Daemon on
 * the compiled build/mup.bpf.o, its pins on a bpffs the test mounts in a
 * temporary directory and removes in afterAll), so a timer of the test runs
 * on the daemon's own event loop: it samples the policy table while the
 * batch is under way.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { FINISH_SLICE, PLAN_SLICE } from '../src/daemon/batch.js';
import { StateStore } from '../src/daemon/rules.js';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';

const isRoot = process.getuid?.() === 0;
const N = 10_000;
const CONFIG = `
settings: { max_policies: 16384, max_localsids: 16 }
policies: []
localsids: []
`;
const policy = (i: number): Record<string, string> => ({ name: `p${i}`, match: `10.${i >> 8}.${i & 255}.0/24`, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' });

describe.skipIf(!isRoot)('a large batch and the event loop', () => {
  let run: InProcDaemon | undefined;
  beforeAll(async () => {
    run = await startInProcDaemon('batchyield', CONFIG);
  }, 60_000);
  afterAll(() => run?.stop());

  it(`${N} adds in one batch: timers run while it is planned and its record made (before its table write), and it applies whole`, async () => {
    const d = run!.daemon;
    expect(N / PLAN_SLICE).toBeGreaterThanOrEqual(4);
    expect(N / FINISH_SLICE).toBeGreaterThanOrEqual(4);
    const seen: number[] = [];
    const timer = setInterval(() => seen.push(d.status().tables.policies.entries), 1);
    try {
      const r = await d.applyBatch(Array.from({ length: N }, (_, i) => ({ op: 'add', policy: policy(i) })));
      expect(r.added).toBe(N);
    } finally {
      clearInterval(timer);
    }
    expect(d.status().tables.policies.entries).toBe(N);
    // One record for the batch (its lines serialised in slices too), which replays to the N rules.
    const lines = readFileSync(d.stateFile, 'utf8').trimEnd().split('\n');
    const record = JSON.parse(lines.at(-1)!) as { batch: { put: string; rule: { name: string } }[] };
    expect(record.batch).toHaveLength(N);
    expect(record.batch[N - 1]).toMatchObject({ put: 'policy', rule: { name: `p${N - 1}` }, base: null });
    expect(new StateStore(d.stateFile).read()!.overlay.policies.size).toBe(N);
    // Samples taken while the plan ran see the table as it was (empty); a plan in one piece gives none.
    const during = seen.filter((n) => n === 0).length;
    expect(during, `policy table sizes seen by a 1 ms timer during the batch: ${JSON.stringify(seen.slice(0, 20))}`).toBeGreaterThanOrEqual(2);
    // All or nothing: never part of the batch.
    expect(seen.every((n) => n === 0 || n === N)).toBe(true);
  });

  it('an invalid operation late in the batch is refused after the loop ran, and nothing of the batch is applied', async () => {
    const d = run!.daemon;
    const before = d.status().tables.policies.entries;
    const ops: unknown[] = Array.from({ length: N }, (_, i) => ({ op: 'delete', policy: { name: `p${i}` } }));
    ops[N - 1] = { op: 'delete', policy: { name: 'nope' } };
    await expect(d.applyBatch(ops)).rejects.toThrow(/operations\[9999\].*no policy named "nope"/);
    expect(d.status().tables.policies.entries).toBe(before);
  });
});
