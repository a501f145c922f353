/**
 * A reload that applies an edit answers once what it replaced is collected.
 * The running config (its rule lists, its indexes by key and by name) is
 * garbage once the reload is applied; it was held until the next second
 * without API requests (up to 5 s under steady requests), so a daemon that
 * had just answered an edited reload of bench:daemon's 131,072 rules was
 * 27-30 MB larger than before it. The answer now waits for V8's incremental
 * marking, started when the reload is applied, to free it (35-76 ms there).
 *
 * The daemon runs in this process (startInProcDaemon), so the test holds a
 * WeakRef to the config the reload replaces and looks at it as soon as the
 * reload has resolved (a later turn: a WeakRef keeps its target for the
 * rest of the job that made or read it).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { heapCompactionUnavailable, releaseCounts, requestEnded, requestStarted } from '../src/daemon/memory.js';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';

const isRoot = process.getuid?.() === 0;
const RULES = 2000;

function configText(srPrefixOfP1: string): string {
  const lines = ['settings: { max_policies: 4096, max_localsids: 16 }', 'policies:'];
  for (let i = 0; i < RULES; i++) {
    lines.push(`  - name: p${i}`, `    match: 10.${i >> 8}.${i & 255}.0/24`, `    sr_prefix: ${i === 1 ? srPrefixOfP1 : '2001:db8:1::/48'}`, '    src_prefix: 2001:db8:ff::/64');
  }
  lines.push('localsids: []', '');
  return lines.join('\n');
}

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe.skipIf(!isRoot)('the collection before a reload answers', () => {
  let run: InProcDaemon | undefined;
  beforeAll(async () => {
    run = await startInProcDaemon('reloadcollect', configText('2001:db8:1::/48'));
  }, 60_000);
  afterAll(() => run?.stop());

  /** The running config, held weakly: made in a function of its own so that no frame of the test keeps it. */
  const weakConfig = (): WeakRef<object> => new WeakRef(run!.daemon.config);

  // First: no collection asked yet, so none is pending but the first reload's own. A request counted as
  // under way holds that one off (no quiet second) for MAX_WAIT_MS, 5 s, however slow the host.
  it('two edited reloads in a row: the second frees the rule set the first made, before the first\'s quiet collection runs', async () => {
    expect(heapCompactionUnavailable(), 'the native addon (make native) starts the incremental marking').toBeUndefined();
    const d = run!.daemon;
    const file = join(run!.dir, 'mup.yaml');
    const before = releaseCounts();
    requestStarted();
    let replaced: WeakRef<object>;
    try {
      writeFileSync(file, configText('2001:db8:3::/48'));
      expect((await d.reload()).replaced).toBe(1);
      await nextTurn();
      replaced = weakConfig();
      writeFileSync(file, configText('2001:db8:4::/48'));
      expect((await d.reload()).replaced).toBe(1);
    } finally {
      requestEnded();
    }
    await nextTurn();
    // Found with this test: the first reload's log note for its forced collection (pending until that ran)
    // held the rule set it made, and the second reload's collection waited for it. The note holds only the
    // daemon now, and a reload whose rules were collected asks for no forced collection (the last test).
    expect(replaced.deref(), 'the rule set of the first reload, still on the heap').toBeUndefined();
    const after = releaseCounts();
    expect([after.quiet, after.forced], 'the quiet (or forced) collection asked by the first reload').toEqual([before.quiet, before.forced]);
    expect(after.beforeAnswer).toBe(before.beforeAnswer + 2);
  });

  it('the config an edited reload replaced is gone when the reload resolves; the file unchanged collects nothing', async () => {
    expect(heapCompactionUnavailable(), 'the native addon (make native) starts the incremental marking').toBeUndefined();
    const d = run!.daemon;
    const file = join(run!.dir, 'mup.yaml');
    const before = releaseCounts();
    const replaced = weakConfig();
    writeFileSync(file, configText('2001:db8:2::/48'));
    const r = await d.reload();
    expect(r.replaced).toBe(1);
    await nextTurn();
    expect(replaced.deref(), 'the replaced config still on the heap as the reload answered').toBeUndefined();
    expect(releaseCounts().beforeAnswer).toBe(before.beforeAnswer + 1);
    expect(d.config.policies).toHaveLength(RULES);
    expect(readFileSync(file, 'utf8')).toContain('2001:db8:2::/48');
    // glibc's free pages go back on libuv's pool, not in the answer's turn (malloc_trim held the loop 20-29 ms there).
    for (let i = 0; i < 200 && releaseCounts().trimmedOffLoop === before.trimmedOffLoop; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(releaseCounts().trimmedOffLoop).toBeGreaterThan(before.trimmedOffLoop);

    // Nothing replaced, nothing to wait for: the running config stays.
    const kept = weakConfig();
    const same = await d.reload();
    expect(same.configChanged).toBe(false);
    await nextTurn();
    expect(kept.deref()).toBe(d.config);
    expect(releaseCounts().beforeAnswer).toBe(before.beforeAnswer + 1);
  });

  it('after a collected reload only the compacting collection of a quiet second is asked for: no second marking at 5 s under steady requests', async () => {
    expect(heapCompactionUnavailable(), 'the native addon (make native) starts the incremental marking').toBeUndefined();
    const d = run!.daemon;
    const file = join(run!.dir, 'mup.yaml');
    const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
    // Past the collections the tests before may have asked for (at most one every 2 s).
    await sleep(2500);
    writeFileSync(file, configText('2001:db8:5::/48'));
    // A request under way throughout: no quiet second, as under steady requests.
    requestStarted();
    let before: ReturnType<typeof releaseCounts>;
    try {
      const asked = releaseCounts();
      expect((await d.reload()).replaced).toBe(1);
      before = releaseCounts();
      // Collected before the answer (else the forced collection is asked for, rightly: not what this checks).
      expect(before.beforeAnswer, 'the reload collected what it replaced before answering').toBe(asked.beforeAnswer + 1);
      // MAX_WAIT_MS (5 s) and a margin: a forced collection (V8's marking again) would have run by now.
      await sleep(6500);
      expect(releaseCounts().forced, 'a forced collection after a reload whose rules were collected').toBe(before.forced);
      expect(releaseCounts().incremental).toBe(before.incremental);
    } finally {
      requestEnded();
    }
    // The compacting one, in the next quiet second.
    for (let t = 0; t < 40 && releaseCounts().quiet === before.quiet; t++) await sleep(100);
    expect(releaseCounts().quiet).toBe(before.quiet + 1);
    expect(releaseCounts().forced).toBe(before.forced);
  }, 30_000);
});
