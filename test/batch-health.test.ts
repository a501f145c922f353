/**
 * Health while a large batch is written, a batch refused at a full table,
 * an empty batch (found in review, session 33).
 *
 * A batch writes the tables in slices, then updates the rule set in slices,
 * giving the event loop turns in both. Health skipped its comparison of the
 * two only during the table write: during the rule set's slices the tables
 * held the whole batch and the rule set part of it, and GET /v1/health
 * answered 503 tables_mismatch ("the policies table holds 10002 rules, the
 * running rules are 1153") during every large batch.
 *
 * The real Daemon in this process (startInProcDaemon): a 1 ms timer of the
 * test runs on its event loop and calls health() while the batch is under
 * way.
 */
import { existsSync, statSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { health, type Health } from '../src/daemon/health.js';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';

const isRoot = process.getuid?.() === 0;
const N = 10_000;
const policy = (name: string, i: number): Record<string, string> => ({
  name,
  match: `10.${100 + (i >> 8)}.${i & 255}.0/24`,
  sr_prefix: '2001:db8:1::/48',
  src_prefix: '2001:db8:ff::/64',
});

describe.skipIf(!isRoot)('health while a large batch is written', () => {
  let run: InProcDaemon | undefined;
  beforeAll(async () => {
    run = await startInProcDaemon('batchhealth', 'settings: { max_policies: 16384, max_localsids: 16 }\npolicies: []\nlocalsids: []\n');
  }, 60_000);
  afterAll(() => run?.stop());

  /** health() every millisecond while `batch` runs: what it said when degraded, and how many times it did not compare. */
  async function sampled(batch: () => Promise<unknown>): Promise<{ degraded: string[]; notCompared: number }> {
    const d = run!.daemon;
    const degraded: string[] = [];
    let notCompared = 0;
    const timer = setInterval(() => {
      const h: Health = health(d);
      if (h.status !== 'ok') degraded.push(h.problems.map((p) => `${p.code}: ${p.message}`).join('; '));
      if (h.checked.tables !== undefined) notCompared++;
    }, 1);
    try {
      await batch();
    } finally {
      clearInterval(timer);
    }
    return { degraded, notCompared };
  }

  it(`${N} adds, then ${N} deletes: never degraded while written, compared again after`, async () => {
    const d = run!.daemon;
    const adds = await sampled(() => d.applyBatch(Array.from({ length: N }, (_, i) => ({ op: 'add', policy: policy(`h${i}`, i) }))));
    expect(adds.degraded.slice(0, 3), `${adds.degraded.length} degraded samples`).toEqual([]);
    // The samples did fall inside the batch (else the first check proves nothing).
    expect(adds.notCompared).toBeGreaterThan(0);
    expect(health(d)).toMatchObject({ status: 'ok', checked: { rules: { policies: { wanted: N, inTables: N } } } });
    expect(health(d).checked.tables).toBeUndefined();

    const dels = await sampled(() => d.applyBatch(Array.from({ length: N }, (_, i) => ({ op: 'delete', policy: { name: `h${i}` } }))));
    expect(dels.degraded.slice(0, 3), `${dels.degraded.length} degraded samples`).toEqual([]);
    expect(dels.notCompared).toBeGreaterThan(0);
    expect(health(d)).toMatchObject({ status: 'ok', checked: { rules: { policies: { wanted: 0, inTables: 0 } } } });
  });
});

describe.skipIf(!isRoot)('an empty batch', () => {
  let run: InProcDaemon | undefined;
  beforeAll(async () => {
    run = await startInProcDaemon('batchempty', 'settings: { max_policies: 4, max_localsids: 4 }\npolicies: []\nlocalsids: []\n');
  }, 60_000);
  afterAll(() => run?.stop());

  it('answers that nothing changed, and writes no record (before: a {"batch":[]} record and its fdatasync)', async () => {
    const d = run!.daemon;
    const records = d.status().state.records;
    const size = existsSync(d.stateFile) ? statSync(d.stateFile).size : 0;
    await expect(d.applyBatch([])).resolves.toEqual({ results: [], added: 0, replaced: 0, deleted: 0 });
    expect(d.status().state.records).toBe(records);
    expect(existsSync(d.stateFile) ? statSync(d.stateFile).size : 0).toBe(size);
  });
});

describe.skipIf(!isRoot)('a batch at a full table', () => {
  let run: InProcDaemon | undefined;
  beforeAll(async () => {
    const file = [0, 1].map((i) => `  - ${JSON.stringify(policy(`f${i}`, i))}`).join('\n');
    run = await startInProcDaemon('batchfull', `settings: { max_policies: 2, max_localsids: 4 }\npolicies:\n${file}\nlocalsids: []\n`);
  }, 60_000);
  afterAll(() => run?.stop());

  it('deleting one rule and adding another in one batch is refused with what to do; the two batches apart are not', async () => {
    const d = run!.daemon;
    // The adds are written before the deletes (a key's new entry in before its old one goes): the table has no room yet.
    const both = d.applyBatch([
      { op: 'delete', policy: { name: 'f1' } },
      { op: 'add', policy: policy('n', 9) },
    ]);
    await expect(both).rejects.toMatchObject({ status: 409 });
    await expect(both).rejects.toThrow(/the policies table is full .*; a batch's deletes free their entries only after its adds are written, so at a full table send the deletes first \(a batch of their own\), then the adds/);
    expect(d.status().tables.policies.entries).toBe(2);
    await d.applyBatch([{ op: 'delete', policy: { name: 'f1' } }]);
    await d.applyBatch([{ op: 'add', policy: policy('n', 9) }]);
    expect(d.status().tables.policies.entries).toBe(2);
    expect(health(d).status).toBe('ok');
  });

  it('an add alone into the full table keeps the plain advice', async () => {
    const d = run!.daemon;
    const one = d.applyBatch([{ op: 'add', policy: policy('m', 10) }]);
    await expect(one).rejects.toThrow(/the policies table is full \(settings.max_policies = 2\); delete entries, or raise settings.max_policies/);
    await expect(one).rejects.not.toThrow(/send the deletes first/);
  });
});
