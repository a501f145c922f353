/**
 * Issue 19: "memory must not grow with the number of changes". What single
 * changes leave in V8's heap, counted in bytes, never timed:
 *
 * - old generation per change: the daemon's tables (Tables.apply, as the
 *   serial section applies a change: one at a time, synchronously) take
 *   delete + put of a policy and of a local SID, 40 changes an interval;
 *   each interval ends with two young collections, so what the changes left
 *   young is promoted or gone; the growth of every space but the young one
 *   is what the changes put into the old generation. The heap and the
 *   daemon's RSS grow by it until V8's next full collection (with 65,536 +
 *   65,536 rules that came only after ~200 MB: docs/bench.md "Daemon
 *   memory"). Object spreads in Tables.apply left ~3.6 KB a change there;
 *   this test failed with them.
 * - heap kept per change: heap after a full collection (compiled code left
 *   out), once the same rules have been deleted and added back through the
 *   daemon (their API copies are then in the overlay), must not grow when
 *   they are deleted and added back again and again. It failed with the
 *   prefix-text memo of rules.ts a Map (before API rules shared their
 *   prefixes by text, load.ts); it fails with an object of five fields
 *   kept per change on purpose (~80 B, MAX_KEPT_PER_CHANGE).
 *
 * The daemon runs in this process (the real Daemon, data plane and state
 * file of src/daemon/ on the compiled build/mup.bpf.o, pins in a bpffs the
 * test mounts in a temporary directory on a tmpfs; no interfaces, nothing
 * attached). Pins, mounts and directory are removed in afterAll.
 */
import { loadavg } from 'node:os';
import { getHeapSpaceStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../src/daemon/daemon.js';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';
import { parseLocalSidEntry, parsePolicyEntry } from '../src/config/load.js';
import { RULE_KINDS } from '../src/daemon/rules.js';
import type { LocalSid, Policy } from '../src/config/types.js';

const isRoot = process.getuid?.() === 0;
const RULES = 4096;
/**
 * Rules of each kind changed in a round: each is deleted and added back (4 changes a
 * rule index). V8's own jumps (a hash table rebuilt, code optimised late) are a few
 * hundred KB, whatever the round's size: rounds of 1,000 changes saw them as up to
 * 200 B a change, and once all four at 56 B (CI, issue 19); rounds of 4,000 see
 * them as tens of bytes (-41 to 30 B).
 */
const ROUND = 1000;
/** Intervals of 10 rules changed (policy and local SID deleted and put back: 40 changes) measured. */
const INTERVALS = 50;
/**
 * Ceiling on bytes a single change leaves in the old generation. Measured
 * (load average 2-4): 3,623 B with the object spreads in Tables.apply, 462-616 B
 * without (the median of 50 intervals; one with a full collection of V8's own
 * shows a drop, one with a rebuilt hash table a jump).
 */
const MAX_PROMOTED_PER_CHANGE = 1500;
/**
 * Ceiling on heap kept per change once the overlay holds the changed rules.
 * Measured before session 41 (changes alternating delete and add; the least
 * of 4 rounds): 80 B with the IPv6 prefix-text memo a Map (it kept each new
 * prefix of an API rule alive, up to 4,096), 20 B with it a WeakMap; -41 to
 * 19 B for single rounds of 4,000. Session 41 (deletes, then adds; the median
 * of 5 rounds of 4,000): 6.5, 11.6 and 11.7 B (single rounds -26 to 20 B);
 * with an object of five fields kept per change on purpose (pushed to an
 * array from this test's round), 80.7, 82.2 and 84.7 B (single rounds 74
 * to 95 B). The least of 4 had let that through once (39.6 B).
 */
const MAX_KEPT_PER_CHANGE = 50;

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const policy = (i: number): Record<string, unknown> => ({ name: `p${i}`, match: `10.${i >> 8}.${i & 255}.0/24`, sr_prefix: `2001:db9:${(i & 0xff).toString(16)}::/48`, src_prefix: '2001:db8:ffff::/64' });
const localsid = (i: number): Record<string, unknown> => ({ name: `l${i}`, sid: `2001:db8:${i.toString(16)}::/48`, src_prefix_len: 64 });

function configText(): string {
  const out = ['settings:', `  max_policies: ${RULES}`, `  max_localsids: ${RULES}`, '  max_sessions: 16', 'policies:'];
  for (let i = 0; i < RULES; i++) {
    const p = policy(i);
    out.push(`  - name: ${String(p['name'])}`, `    match: ${String(p['match'])}`, `    sr_prefix: "${String(p['sr_prefix'])}"`, `    src_prefix: "${String(p['src_prefix'])}"`);
  }
  out.push('localsids:');
  for (let i = 0; i < RULES; i++) out.push(`  - name: l${i}`, `    sid: "${String(localsid(i)['sid'])}"`, '    src_prefix_len: 64');
  return `${out.join('\n')}\n`;
}

/** A young collection (scavenge) only. */
function gcYoung(): void {
  (gc as unknown as (o: { type: 'minor' }) => void)({ type: 'minor' });
  (gc as unknown as (o: { type: 'minor' }) => void)({ type: 'minor' });
}

/** Bytes in use in every space of V8's heap but the young generation's. */
function oldGeneration(): number {
  return getHeapSpaceStatistics()
    .filter((x) => x.space_name !== 'new_space' && x.space_name !== 'new_large_object_space')
    .reduce((n, x) => n + x.space_used_size, 0);
}

/** Bytes of V8's heap in use after a full collection, compiled code left out (the JIT's, not the changes'). */
function heapAfterGc(): number {
  gc();
  gc();
  return getHeapSpaceStatistics()
    .filter((x) => x.space_name !== 'code_space' && x.space_name !== 'code_large_object_space')
    .reduce((n, x) => n + x.space_used_size, 0);
}

describe.skipIf(!isRoot)(`memory per single change, ${RULES} + ${RULES} rules`, () => {
  let run: InProcDaemon | undefined;
  let d: Daemon | undefined;

  beforeAll(async () => {
    // The state file on a tmpfs: 28,000 changes, each with its fdatasync, measured in heap bytes.
    run = await startInProcDaemon('chmem', configText(), { tmpfs: true });
    d = run.daemon;
  }, 120_000);

  afterAll(() => {
    run?.stop();
  });

  /**
   * One round: ROUND policies and ROUND local SIDs (from `from`), each deleted and added back, one change at a
   * time: first the deletes, then the adds. An add that follows a delete waits for a grace period (src/dataplane/
   * tables.ts), 8-24 ms with the kernel's default rcu_expedited; alternating them made 14,000 such waits of this
   * test (208 s here, past its 300 s timeout in CI). In this order the round's first add waits for one and the
   * others for none. What a change keeps in the heap is the same either way.
   */
  async function round(from: number, signal: AbortSignal): Promise<number> {
    const index = Array.from({ length: ROUND }, (_, k) => (from + k) % RULES);
    for (const i of index) {
      signal.throwIfAborted(); // a test past its timeout stops changing the tables (the next test checks them first)
      await d!.deleteRule('policy', { key: String(policy(i)['match']) });
      await d!.deleteRule('localsid', { key: String(localsid(i)['sid']) });
    }
    for (const i of index) {
      signal.throwIfAborted();
      // Added back other than the file has them (a hop limit, a source length): API rules in the overlay.
      // (Added back the same, a rule is the file's again and leaves no API copy: rule-set-overlay.test.ts.)
      await d!.putRule('policy', { ...policy(i), hop_limit: 63 }, 'add');
      await d!.putRule('localsid', { ...localsid(i), src_prefix_len: 56 }, 'add');
    }
    return 4 * ROUND;
  }

  it(`changing the same rules again keeps at most ${MAX_KEPT_PER_CHANGE} B of heap per change`, async ({ signal }) => {
    await round(0, signal); // these rules' API copies are in the overlay now
    await round(0, signal); // and the code of every path is compiled
    await round(0, signal); // and optimised (the first rounds after two of 4,000 changes kept 15-30 B a change)
    // Round by round: the median of 5. What each change keeps shows in every round; V8's own in some, up
    // or down (code optimised meanwhile, a hash table rebuilt; a collection of something else): the least
    // of 4 let a kept object per change through when one round dropped (39.6 B against 74-96 B).
    const perRound: number[] = [];
    for (let r = 0; r < 5; r++) {
      const before = heapAfterGc();
      const changes = await round(0, signal);
      perRound.push((heapAfterGc() - before) / changes);
    }
    const perChange = [...perRound].sort((a, b) => a - b)[2]!;
    console.log(`heap kept per single change of the same rules: median ${perChange.toFixed(1)} B of 5 rounds of ${4 * ROUND} changes (${perRound.map((x) => x.toFixed(1)).join(', ')})`);
    expect(d!.status().state.changes).toBeGreaterThan(0);
    expect(perChange).toBeLessThan(MAX_KEPT_PER_CHANGE);
  }, 300_000);

  it(`a single change leaves at most ${MAX_PROMOTED_PER_CHANGE} B in the old generation (Tables.apply, the daemon's tables)`, async () => {
    // One change at a time, synchronously, as the daemon's serial section applies them: nothing of a change is
    // alive when the next one starts, so whatever the young collections promote is what the change kept or
    // allocated old (whatever the load and the timing of those collections).
    const t = d!.dataplane.rules;
    // The test before may have stopped part way (past its timeout, its deletes done and its adds not).
    expect([t.policyCount, t.localsidCount], 'the tables as loaded, before this test changes them').toEqual([RULES, RULES]);
    // Ten rules of each kind: deleted, then put back (an add after a delete waits for a grace period, so the
    // deletes first: one wait for the ten, not one for each; round() says why).
    const change10 = (from: number): number => {
      const pe = (i: number): Policy => parsePolicyEntry(policy(i % RULES), `policies[${i % RULES}]`);
      const le = (i: number): LocalSid => parseLocalSidEntry(localsid(i % RULES), `localsids[${i % RULES}]`);
      // Each entry parsed for its own apply: nothing lives from one change into the next.
      for (let i = from; i < from + 10; i++) t.apply(RULE_KINDS.policy.del([pe(i)]));
      for (let i = from; i < from + 10; i++) t.apply(RULE_KINDS.localsid.del([le(i)]));
      for (let i = from; i < from + 10; i++) t.apply(RULE_KINDS.policy.put([pe(i)]));
      for (let i = from; i < from + 10; i++) t.apply(RULE_KINDS.localsid.put([le(i)]));
      return 40;
    };
    for (let i = 0; i < 100; i += 10) change10(i); // first-use costs (compiled code)
    // Intervals of 40 changes, each ended by two young collections (what the changes left in the young
    // generation is then promoted or gone): the growth of the old generation over each. The median: an
    // interval in which V8 ran a full collection of its own shows a drop, not the changes' share.
    const perChange: number[] = [];
    let i = 0;
    for (let k = 0; k < INTERVALS; k++) {
      gcYoung();
      const before = oldGeneration();
      const changes = change10(i);
      i += 10;
      gcYoung();
      perChange.push((oldGeneration() - before) / changes);
    }
    perChange.sort((a, b) => a - b);
    const median = perChange[perChange.length >> 1]!;
    console.log(
      `old generation per single change (Tables.apply): median ${median.toFixed(0)} B over ${INTERVALS} intervals of 40 changes ` +
        `(min ${perChange[0]!.toFixed(0)}, max ${perChange[perChange.length - 1]!.toFixed(0)}; load average ${loadavg()[0]!.toFixed(2)})`,
    );
    expect([t.policyCount, t.localsidCount]).toEqual([RULES, RULES]);
    expect(median).toBeLessThan(MAX_PROMOTED_PER_CHANGE);
  }, 300_000);
});
