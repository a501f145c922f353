/**
 * Table writes of a serving daemon wait for their RCU grace periods with
 * the event loop running (found in review, session 42):
 * - a reload whose edit replaced N rules wrote them at once, each replace
 *   after a grace period waited for with Atomics.wait: 300 replaced rules
 *   held the loop 3.9 s at 13 ms grace periods (the kernel's default,
 *   rcu_expedited 0); 131,072 would be half an hour without an answer;
 * - BGP-learned updates were written the same way (300 rules, 4.1 s);
 * - a single change whose record could not be made durable was undone
 *   tables first: a write back the kernel refused threw, and the rule set
 *   kept the refused change (the next rewrite made it durable);
 * - the next reload then wrote the tables whole in one sync, each replace
 *   after a grace period waited for on the loop (session 43).
 * What is counted is how many grace periods were waited for on the loop
 * (graceClock.syncWaits), not how long anything took. Grace periods are
 * made at least EXTRA_MS long (graceClock.testExtraMs), so that a write
 * finds each one not over yet, whatever the host's rcu_expedited.
 *
 * The real Daemon in this process on the compiled object, its pins in a
 * bpffs mounted in a temporary directory; no interface.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RULE_KINDS } from '../src/daemon/rules.js';
import type { Policy } from '../src/config/types.js';
import { graceClock } from '../src/dataplane/grace.js';
import { health } from '../src/daemon/health.js';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';

const isRoot = process.getuid?.() === 0;
const N = 40;
const EXTRA_MS = 3;
const policy = (name: string, match: string, sr: string): Record<string, string> => ({ name, match, sr_prefix: sr, src_prefix: '2001:db8:ff::/64' });
const config = (sr: string): string =>
  `settings: { forwarding: tx, max_policies: ${N + 16}, max_localsids: 8 }\npolicies:\n` +
  Array.from({ length: N }, (_, i) => `  - { name: p${i}, match: 10.${i >> 8}.${i & 255}.0/24, sr_prefix: "${sr}", src_prefix: "2001:db8:ff::/64" }\n`).join('');

/** Edit every rule's sr_prefix and reload: the replaces' grace periods waited for with the loop running (none on it). */
async function reloadReplacingAll(run: InProcDaemon): Promise<void> {
  writeFileSync(join(run.dir, 'mup.yaml'), config('2001:db8:2::/48'));
  graceClock.testExtraMs = EXTRA_MS;
  const before = graceClock.syncWaits;
  const r = await run.daemon.reload({ force: true });
  expect(r.replaced).toBe(N);
  expect(graceClock.syncWaits - before).toBe(0);
}

describe.skipIf(!isRoot)('table writes of a serving daemon and their grace periods', () => {
  let run: InProcDaemon | undefined;
  const was = graceClock.testExtraMs;
  afterEach(() => {
    graceClock.testExtraMs = was;
    try {
      run?.stop();
    } finally {
      run = undefined;
    }
  });

  it(`a reload whose edit replaces ${N} rules waits for their grace periods with the loop running`, async () => {
    run = await startInProcDaemon('graceloop', config('2001:db8:1::/48'));
    const d = run.daemon;
    await reloadReplacingAll(run);
    expect(d.dataplane.rules.policyCount).toBe(N);
    expect(health(d).status).toBe('ok');
  });

  it(`BGP-learned rules: ${N} replaced in one apply wait for their grace periods with the loop running`, async () => {
    run = await startInProcDaemon('graceloop', 'settings: { forwarding: tx, max_policies: 64, max_localsids: 8 }\n');
    const d = run.daemon;
    const learned = (sr: string): Policy[] => Array.from({ length: N }, (_, i) => RULE_KINDS.policy.parse(policy(`bgp${i}`, `10.9.${i}.0/24`, sr), 'bgp') as Policy);
    await d.applyLearned({ policies: { put: learned('2001:db8:1::/48'), del: [] }, sessions: { put: [], del: [] } });
    graceClock.testExtraMs = EXTRA_MS;
    const before = graceClock.syncWaits;
    const a = await d.applyLearned({ policies: { put: learned('2001:db8:2::/48'), del: [] }, sessions: { put: [], del: [] } });
    expect(a.changed).toBe(N);
    expect(graceClock.syncWaits - before).toBe(0);
    expect(d.dataplane.rules.policyCount).toBe(N);
  });

  it("a /32 policy's delete that leaves its address's entry for (N3, TEID) policies waits for that replace's grace period with the loop running", async () => {
    run = await startInProcDaemon('graceloop', 'settings: { forwarding: tx, max_policies: 64, max_localsids: 8 }\n');
    const d = run.daemon;
    await d.putRule('policy', policy('n3', '192.0.2.1/32', '2001:db8:1::/48'), 'add');
    await d.putRule('policy', { ...policy('t1', '192.0.2.1/32', '2001:db8:1::/48'), teid: '0x1/32' }, 'add');
    graceClock.testExtraMs = EXTRA_MS;
    // A replace: the next write owes a grace period.
    await d.putRule('policy', policy('n3', '192.0.2.1/32', '2001:db8:2::/48'), 'replace');
    const before = graceClock.syncWaits;
    await d.deleteRule('policy', { name: 'n3' });
    expect(graceClock.syncWaits - before).toBe(0);
    expect([...d.ruleMap('policy').keys()]).toEqual(['192.0.2.1/32 teid 0x00000001/32']);
    expect(health(d).status).toBe('ok');
  });

  it('a single change refused after its write back failed: the rule set is put back, the tables marked out of step', async () => {
    run = await startInProcDaemon('graceloop', config('2001:db8:1::/48'));
    const d = run.daemon;
    const t = d.dataplane.rules;
    d.testFailSyncs = 'EIO';
    const answer = d.putRule('policy', policy('x1', '198.51.100.0/24', '2001:db8:1::/48'), 'add').then(
      () => 'acknowledged',
      (e: Error) => e.message,
    );
    // The record is written (its sync fails later): the undo's delete is refused by the kernel (the tables' hook).
    await new Promise((r) => setImmediate(r));
    t.testFailDeletesFrom = 0;
    try {
      expect(await answer).toMatch(/not saved/);
    } finally {
      t.testFailDeletesFrom = undefined;
      d.testFailSyncs = undefined;
    }
    expect(d.ruleMap('policy').has('198.51.100.0/24')).toBe(false);
    expect(d.status().state.changes).toBe(0);
    expect(d.tablesOutOfStep).toBe(true);
    expect(health(d).status).not.toBe('ok');
    // The next reload writes the tables whole: in step again, and x1 is nowhere.
    await d.reload({ force: true });
    expect(d.tablesOutOfStep).toBe(false);
    expect(t.policyCount).toBe(N);
  });

  it(`the whole write of tables out of step (a reload replacing ${N} rules) waits for its grace periods with the loop running`, async () => {
    run = await startInProcDaemon('graceloop', config('2001:db8:1::/48'));
    const d = run.daemon;
    const t = d.dataplane.rules;
    d.testFailSyncs = 'EIO';
    const answer = d.putRule('policy', policy('x1', '198.51.100.0/24', '2001:db8:1::/48'), 'add').catch(() => undefined);
    await new Promise((r) => setImmediate(r));
    t.testFailDeletesFrom = 0;
    try {
      await answer;
    } finally {
      t.testFailDeletesFrom = undefined;
      d.testFailSyncs = undefined;
    }
    expect(d.tablesOutOfStep).toBe(true);
    // An edit of every rule: the whole write replaces them all (it was one sync, each replace's grace period waited for on the loop).
    await reloadReplacingAll(run);
    expect(d.tablesOutOfStep).toBe(false);
    expect(t.policyCount).toBe(N);
    expect(health(d).status).toBe('ok');
  });
});
