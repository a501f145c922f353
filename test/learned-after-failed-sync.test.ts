/**
 * A BGP-learned rule applied while an API change's record waits for its
 * fdatasync (group commit). An API delete frees its key at once and is
 * undone if its sync fails; a learned rule of that key applied in between
 * was installed, and the undo then put the API rule back over it: the key
 * both an API rule and a learned one (a later withdrawal of the learned
 * route deleted the entry the API rule owns). applyLearned now waits, as a
 * batch does, for the changes being synced to be acknowledged or undone.
 *
 * The real Daemon in this process on the compiled object, its pins in a
 * bpffs mounted in a temporary directory; no interface. The sync fails
 * through StateStore.testFailSyncs.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { Daemon } from '../src/daemon/daemon.js';
import { createLogger } from '../src/daemon/log.js';
import { RULE_KINDS, type Rule } from '../src/daemon/rules.js';
import type { Policy } from '../src/config/types.js';

const isRoot = process.getuid?.() === 0;
const policy = (name: string, match: string, sr: string): Record<string, string> => ({ name, match, sr_prefix: sr, src_prefix: '2001:db8:ff::/64' });

describe.skipIf(!isRoot)('a learned rule applied while an API delete waits for its sync', () => {
  let dir: string | undefined;
  let d: Daemon | undefined;
  afterEach(() => {
    try {
      d?.stop();
    } finally {
      d = undefined;
      if (dir !== undefined) {
        try {
          execFileSync('umount', [join(dir, 'bpffs')], { stdio: 'ignore' });
        } catch {
          // not mounted
        }
        rmSync(dir, { recursive: true, force: true });
        dir = undefined;
      }
    }
  });

  it('the delete whose sync fails is undone first; the learned rule of its key is then refused, not installed under it', async () => {
    dir = mkdtempSync(join(tmpdir(), 'mup-learned-sync-'));
    const configPath = join(dir, 'mup.yaml');
    writeFileSync(configPath, 'settings: { max_policies: 16, max_localsids: 16, max_sessions: 16 }\n');
    const sink = new Writable({ write: (_c, _e, cb) => cb() });
    d = new Daemon({
      configPath,
      instance: `lsync${process.pid}`,
      bpffs: join(dir, 'bpffs'),
      stateFile: join(dir, 'state.json'),
      detachOnExit: true,
      log: createLogger({ instance: 'test', level: 'error', json: true, stream: sink }),
    });
    await d.start();
    await d.putRule('policy', policy('api1', '10.9.0.0/16', '2001:db8:1::/48'), 'add');
    d.testFailSyncs = 'EIO';
    const deleted = d.deleteRule('policy', { name: 'api1' }).then(
      () => 'deleted',
      (e: Error) => e.message,
    );
    const learned = RULE_KINDS.policy.parse(policy('bgp1', '10.9.0.0/16', '2001:db8:2::/48'), 'bgp') as Policy;
    const applied = d.applyLearned({ policies: { put: [learned], del: [] }, sessions: { put: [], del: [] } });
    expect(await deleted).toMatch(/undone/);
    await applied;
    d.testFailSyncs = undefined;
    // The API rule is back, alone on its key; the learned one is not installed (refused: the API rule holds the key).
    expect(d.rules.learned('policy').has('10.9.0.0/16')).toBe(false);
    const r = d.ruleMap('policy').get('10.9.0.0/16') as Rule & { name?: string };
    expect(r.name).toBe('api1');
    expect(d.dataplane.rules.policyCount).toBe(1);
  });
});
