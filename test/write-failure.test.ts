/**
 * An API change whose table write fails part way is refused, and the
 * tables are put back to the running rules. A batch's deletes go to the
 * kernel DELETE_CHUNK keys a write, after its adds: when the second delete
 * write fails (a test hook, Tables.testFailDeletesFrom), the first chunk's
 * entries have left the tables and the adds are in, while the rule set
 * does not take the batch. Before the fix those entries stayed missing
 * (the daemon listed rules the data plane no longer translated) and the
 * adds stayed in (entries no rule lists), until a restart. The same for a
 * delete write the kernel fails part way (Tables.testFailDeletesAfter:
 * the keys it went through are gone) and for a single change whose
 * configuration write fails after its entry is in
 * (Tables.testFailConfigWrites).
 *
 * The daemon runs in this process (startInProcDaemon: the real Daemon on
 * build/mup.bpf.o, its pins on a bpffs the test mounts in a temporary
 * directory and removes in afterAll); frames go through the real program
 * (BPF_PROG_TEST_RUN).
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_OBJECT } from '../src/dataplane/index.js';
import { health } from '../src/daemon/health.js';
import { DELETE_CHUNK } from '../src/dataplane/tables.js';
import { parseIpv4Prefix } from '../src/sid/addr.js';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';
import { uplinkFrame } from './helpers/packets.js';

const isRoot = process.getuid?.() === 0;

/** Policies in the file: two delete chunks and some. */
const N = 2 * DELETE_CHUNK + 10;
/** Policies a batch adds. */
const ADDS = 20;
const match = (b: number, i: number): string => `${b}.${i >> 8}.${i & 255}.0/24`;
const CONFIG =
  `settings: { forwarding: tx, max_policies: ${N + ADDS + 8}, max_localsids: 8 }\npolicies:\n` +
  Array.from({ length: N }, (_, i) => `  - { name: p${i}, match: ${match(10, i)}, sr_prefix: 2001:db8:1::/48, src_prefix: 2001:db8:ff::/64 }\n`).join('');
const added = (i: number): Record<string, string> => ({ name: `a${i}`, match: match(11, i), sr_prefix: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' });

/** A G-PDU to address .5 of a /24 policy's prefix. */
const frame = (prefix: string): Buffer => uplinkFrame(prefix.replace(/0\/24$/, '5'));

describe.skipIf(!isRoot || !existsSync(DEFAULT_OBJECT))('an API change whose table write fails part way', () => {
  let run: InProcDaemon | undefined;
  beforeAll(async () => {
    run = await startInProcDaemon('writefail', CONFIG);
  }, 60_000);
  afterAll(() => run?.stop());

  /** The first 6 bytes of the translated frame's IPv6 destination, or the verdict and event. */
  const outcome = (prefix: string): string => {
    const r = run!.daemon.dataplane.run(frame(prefix));
    return r.verdict === 'tx' ? r.out.subarray(38, 44).toString('hex') : `${r.verdict} ${r.event}`;
  };
  const inTables = (prefix: string): boolean => run!.daemon.dataplane.rules.policyRule(parseIpv4Prefix(prefix, 't')) !== undefined;

  it('a batch whose second delete write fails is refused, and the tables hold the running rules again', async () => {
    const d = run!.daemon;
    const t = d.dataplane.rules;
    expect(t.policyCount).toBe(N);
    const ops = [
      ...Array.from({ length: ADDS }, (_, i) => ({ op: 'add', policy: added(i) })),
      ...Array.from({ length: N }, (_, i) => ({ op: 'delete', policy: { match: match(10, i) } })),
    ];
    t.testFailDeletesFrom = 1;
    try {
      await expect(d.applyBatch(ops)).rejects.toThrow(/delete write refused/);
    } finally {
      t.testFailDeletesFrom = undefined;
    }
    // The rule set did not take the batch, and the tables say the same: every file rule, none of the adds.
    expect(d.listRules('policy')).toHaveLength(N);
    expect(t.policyCount).toBe(N);
    // What an operator sees (GET /v1/health): before, tables_mismatch (1,024 policies not in the tables).
    expect(health(d).problems).toEqual([]);
    for (const i of [0, 1, DELETE_CHUNK - 1, DELETE_CHUNK, N - 1]) {
      expect(inTables(match(10, i)), `policy ${i} in the tables`).toBe(true);
      expect(outcome(match(10, i)), `policy ${i} translates`).toBe('20010db80001');
    }
    for (const i of [0, ADDS - 1]) {
      expect(inTables(match(11, i)), `add ${i} not in the tables`).toBe(false);
      expect(outcome(match(11, i))).toBe('pass pass_no_policy');
    }
    // The next batch writes on tables that agree with the rule set: it applies whole.
    const r = await d.applyBatch(ops);
    expect(r).toMatchObject({ added: ADDS, deleted: N });
    expect(t.policyCount).toBe(ADDS);
    expect(outcome(match(11, ADDS - 1))).toBe('20010db80002');
    expect(outcome(match(10, 0))).toBe('pass pass_no_policy');
  });

  it('a put-back that fails too: health says so, until a reload of the same file writes the tables whole', async () => {
    const d = run!.daemon;
    const t = d.dataplane.rules;
    const before = d.listRules('policy').length;
    expect(health(d).problems).toEqual([]);
    // The batch's first delete write fails after its adds; so does the put-back's (it deletes those adds).
    t.testFailDeletesFrom = 0;
    try {
      const ops = [...[30, 31, 32].map((i) => ({ op: 'add', policy: added(i) })), { op: 'delete', policy: { match: match(11, 0) } }];
      await expect(d.applyBatch(ops)).rejects.toThrow(/delete write refused/);
    } finally {
      t.testFailDeletesFrom = undefined;
    }
    expect(d.listRules('policy')).toHaveLength(before);
    const h = health(d);
    expect(h.status).toBe('degraded');
    expect(h.problems.map((p) => p.message).join('\n')).toMatch(/could not be put back.*mup reload/);
    // The adds are still in the tables, the rule set does not have them.
    expect(inTables(match(11, 30))).toBe(true);
    await d.reload();
    expect(health(d).problems).toEqual([]);
    expect(inTables(match(11, 30))).toBe(false);
    expect(outcome(match(11, 0))).toBe('20010db80002');
  });

  it('a delete write the kernel fails part way: the keys it went through are written back, address-only entries included', async () => {
    const d = run!.daemon;
    const t = d.dataplane.rules;
    // Two N3 addresses with (N3, TEID) policies and no /32 policy of their own: an address-only entry each.
    const teidPolicy = (name: string, n3: string, teid: number): Record<string, string> => ({ name, match: `${n3}/32`, teid: `${teid}/32`, sid: 'fc00::1', src_prefix: '2001:db8:ff::/64' });
    const tp = [teidPolicy('t1', '10.250.0.1', 1), teidPolicy('t2', '10.250.0.1', 2), teidPolicy('t3', '10.250.0.2', 1)];
    for (const p of tp) await d.putRule('policy', p, 'add');
    expect(t.addrOnlyCount).toBe(2);
    const kernelKeys = health(d).checked.kernelKeys.policies;
    const translated = (n3: string, teid: number): string => run!.daemon.dataplane.run(uplinkFrame(n3, teid)).verdict;
    expect(translated('10.250.0.1', 2)).toBe('tx');
    // One delete write: the three policies' keys, then the two address-only entries; the kernel goes
    // through four of the five (the first address-only entry among them) and fails.
    t.testFailDeletesFrom = 0;
    t.testFailDeletesAfter = 4;
    try {
      await expect(d.applyBatch(tp.map((p) => ({ op: 'delete', policy: { name: p.name } })))).rejects.toThrow(/delete write refused after 4 of 5 keys/);
    } finally {
      t.testFailDeletesFrom = undefined;
      t.testFailDeletesAfter = undefined;
    }
    // Put back whole. Before the fix the mirror still held the four keys: the policies were written back
    // one by one, but the address-only entry of 10.250.0.1 stayed out of the kernel's map.
    expect(health(d).problems).toEqual([]);
    expect(health(d).checked.kernelKeys.policies).toBe(kernelKeys);
    expect(t.addrOnlyCount).toBe(2);
    for (const [n3, teid] of [['10.250.0.1', 1], ['10.250.0.1', 2], ['10.250.0.2', 1]] as const) expect(translated(n3, teid), `${n3} teid ${teid}`).toBe('tx');
    // And they go with the next batch, address-only entries too.
    await d.applyBatch(tp.map((p) => ({ op: 'delete', policy: { name: p.name } })));
    expect(t.addrOnlyCount).toBe(0);
    expect(health(d).checked.kernelKeys.policies).toBe(kernelKeys - 5);
    expect(health(d).problems).toEqual([]);
  });

  it('a single add whose configuration write fails after its entry is in is refused, and the entry taken out', async () => {
    const d = run!.daemon;
    const t = d.dataplane.rules;
    const before = t.policyCount;
    // The entry goes in (its insert write), then the write of the table's new generation fails.
    t.testFailConfigWrites = 1;
    try {
      await expect(d.putRule('policy', added(ADDS + 2), 'add')).rejects.toThrow(/configuration write refused/);
    } finally {
      t.testFailConfigWrites = undefined;
    }
    // Without the put-back the entry stays: translated, with no rule listing it, and health says tables_mismatch.
    expect(inTables(match(11, ADDS + 2))).toBe(false);
    expect(outcome(match(11, ADDS + 2))).toBe('pass pass_no_policy');
    expect(t.policyCount).toBe(before);
    expect(d.listRules('policy').some((r) => r.name === `a${ADDS + 2}`)).toBe(false);
    expect(health(d).problems).toEqual([]);
    // The next try goes in.
    await d.putRule('policy', added(ADDS + 2), 'add');
    expect(outcome(match(11, ADDS + 2))).toBe('20010db80002');
    await d.deleteRule('policy', { key: match(11, ADDS + 2) });
  });

  // A guard rather than a proof: a delete refused at its first write has nothing in yet (it passed before the fix too).
  it('a single delete whose write fails is refused, and its rule stays in the rule set and the tables', async () => {
    const d = run!.daemon;
    const t = d.dataplane.rules;
    await d.putRule('policy', added(ADDS + 1), 'add');
    const before = t.policyCount;
    t.testFailDeletesFrom = 0;
    try {
      await expect(d.deleteRule('policy', { key: match(11, ADDS + 1) })).rejects.toThrow(/delete write refused/);
    } finally {
      t.testFailDeletesFrom = undefined;
    }
    expect(t.policyCount).toBe(before);
    expect(d.listRules('policy').some((r) => r.name === `a${ADDS + 1}`)).toBe(true);
    expect(outcome(match(11, ADDS + 1))).toBe('20010db80002');
    // And it goes with the next delete.
    await d.deleteRule('policy', { key: match(11, ADDS + 1) });
    expect(outcome(match(11, ADDS + 1))).toBe('pass pass_no_policy');
  });
});
