/**
 * A stop while an edited reload makes its rule lists in turns of the event
 * loop (RuleSet.effectiveYielding): the reload is refused as any change a
 * stop interrupts ("the daemon stopped during the change; it was not
 * saved"), not with the closed data plane's error from the table write
 * that followed (found in review, session 47). A stop while it writes its
 * state file in slices (StateStore.rewriteInSlices, after the tables took
 * the edit): refused as stopped after its tables were written, not counted
 * as done and nothing started after it (found in review, session 54: it
 * answered as a reload done).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { RuleSet, StateStore } from '../src/daemon/rules.js';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';

const isRoot = process.getuid?.() === 0;

function configText(srPrefixOfP1: string): string {
  const lines = ['settings: { max_policies: 4096, max_localsids: 16 }', 'policies:'];
  for (let i = 0; i < 2000; i++) {
    lines.push(`  - name: p${i}`, `    match: 10.${i >> 8}.${i & 255}.0/24`, `    sr_prefix: ${i === 1 ? srPrefixOfP1 : '2001:db8:1::/48'}`, '    src_prefix: 2001:db8:ff::/64');
  }
  lines.push('localsids: []', '');
  return lines.join('\n');
}

describe.skipIf(!isRoot)('a stop during an edited reload', () => {
  let run: InProcDaemon | undefined;
  afterEach(() => {
    vi.restoreAllMocks();
    run?.stop();
    run = undefined;
  });

  it('refuses the reload as stopped, once its rule lists are made', async () => {
    run = await startInProcDaemon('reloadstop', configText('2001:db8:1::/48'));
    const d = run.daemon;
    writeFileSync(join(run.dir, 'mup.yaml'), configText('2001:db8:2::/48'));
    const made = RuleSet.prototype.effectiveYielding;
    let stopped = false;
    vi.spyOn(RuleSet.prototype, 'effectiveYielding').mockImplementation(function (this: RuleSet) {
      const lists = made.call(this);
      // The stop comes while the lists are made, between two turns.
      const stopping = run!;
      run = undefined;
      stopping.stop();
      stopped = true;
      return lists;
    });
    await expect(d.reload()).rejects.toThrow(/the daemon stopped during the change/);
    expect(stopped).toBe(true);
  }, 60_000);

  it('refuses the reload as stopped after its tables were written, when the stop comes as it writes its state file', async () => {
    run = await startInProcDaemon('reloadstop2', configText('2001:db8:1::/48'));
    const d = run.daemon;
    writeFileSync(join(run.dir, 'mup.yaml'), configText('2001:db8:2::/48'));
    const write = StateStore.prototype.rewriteInSlices;
    let stopped = false;
    vi.spyOn(StateStore.prototype, 'rewriteInSlices').mockImplementation(function (this: StateStore, ...args: Parameters<StateStore['rewriteInSlices']>) {
      const written = write.apply(this, args);
      // The stop comes while its lines are made, between two turns (its close of the store drops the rewrite).
      const stopping = run!;
      run = undefined;
      stopping.stop();
      stopped = true;
      return written;
    });
    await expect(d.reload()).rejects.toThrow(/the daemon stopped while the reload wrote its state file: the tables and rules hold the new file/);
    expect(stopped).toBe(true);
    expect(d.reloads).toEqual({ ok: 0, failed: 1 });
  }, 60_000);
});
