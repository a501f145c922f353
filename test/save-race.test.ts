/**
 * `mup config save` checks that the config file is still the one loaded
 * (saving would undo an edit of it) before it writes. The second check ran
 * before the save's diff of the rule sets, which gives the event loop turns
 * (seconds at 131,072 rules): a file edited during the diff was overwritten
 * (found in review, session 42). The check now comes after the diff, with no
 * turn of the loop between the daemon's stop check and the write's start; a
 * stop while the write runs (on the threadpool) renames nothing and answers
 * 503.
 *
 * The real Daemon in this process on the compiled object, its pins in a
 * bpffs mounted in a temporary directory; no interface. The edit is made by
 * the test hook that runs during the diff (Daemon.testDuringSaveDiff).
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { inProcDaemonPerTest } from './helpers/inproc-daemon.js';

const isRoot = process.getuid?.() === 0;
const CONFIG = 'settings: { forwarding: tx, max_policies: 16, max_localsids: 8 }\npolicies:\n  - { name: f1, match: 192.0.2.0/24, sr_prefix: "2001:db8:9::/48", src_prefix: "2001:db8:ff::/64" }\n';
const EDIT = `${CONFIG}  - { name: f2, match: 192.0.3.0/24, sr_prefix: "2001:db8:9::/48", src_prefix: "2001:db8:ff::/64" }\n`;

describe.skipIf(!isRoot)('config save and an edit of the file made while it is under way', () => {
  const start = inProcDaemonPerTest();

  it('an edit made during the diff refuses the save (409), and the edit stays', async () => {
    const run = await start('saverace', CONFIG);
    const d = run.daemon;
    const file = join(run.dir, 'mup.yaml');
    await d.putRule('policy', { name: 'api1', match: '198.51.100.0/24', sr_prefix: '2001:db8:9::/48', src_prefix: '2001:db8:ff::/64' }, 'add');
    d.testDuringSaveDiff = async () => writeFileSync(file, EDIT);
    const got = await d.saveConfig().then(
      () => 'saved',
      (e: Error & { status?: number }) => `${e.status ?? ''} ${e.message}`,
    );
    d.testDuringSaveDiff = undefined;
    expect(got).toMatch(/^409 .*was edited while the running config was being made; saving would undo that edit/);
    expect(readFileSync(file, 'utf8')).toBe(EDIT);
  });

  it('without an edit the save goes through', async () => {
    const run = await start('saverace', CONFIG);
    const d = run.daemon;
    await d.putRule('policy', { name: 'api1', match: '198.51.100.0/24', sr_prefix: '2001:db8:9::/48', src_prefix: '2001:db8:ff::/64' }, 'add');
    d.testDuringSaveDiff = async () => undefined;
    const r = await d.saveConfig();
    expect(r.saved).toBe(1);
    expect(readFileSync(join(run.dir, 'mup.yaml'), 'utf8')).toContain('api1');
  });

  it('a stop while the file is written: nothing renamed, the file and the state file as they were, no temp file, 503', async () => {
    // The write is on the threadpool since session 55 (it was one turn of the loop): a stop can come meanwhile,
    // and the state file's lock is let go then. Checked right before the rename (found in review: the rename
    // came after the stop).
    const run = await start('saverace', CONFIG);
    const d = run.daemon;
    const file = join(run.dir, 'mup.yaml');
    await d.putRule('policy', { name: 'api1', match: '198.51.100.0/24', sr_prefix: '2001:db8:9::/48', src_prefix: '2001:db8:ff::/64' }, 'add');
    const state = readFileSync(d.stateFile, 'utf8');
    expect(state).toContain('api1');
    d.testDuringSaveWrite = () => d.stop();
    const got = await d.saveConfig().then(
      () => 'saved',
      (e: Error & { status?: number }) => `${e.status ?? ''} ${e.message}`,
    );
    expect(got).toMatch(/^503 the daemon stopped while the config was being saved; nothing was saved \(.*mup\.yaml and the state file are as they were\)/);
    expect(readFileSync(file, 'utf8')).toBe(CONFIG);
    expect(readFileSync(d.stateFile, 'utf8')).toBe(state);
    expect(readdirSync(run.dir).filter((n) => n.includes('.tmp-'))).toEqual([]);
  });
});
