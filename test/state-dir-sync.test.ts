/**
 * A change whose state record is written by a whole rewrite of the state
 * file (the file was removed under the daemon, or is for another config)
 * and whose rewrite renamed the new file into place before the fsync of
 * its directory failed (EIO): the change is refused (503) and undone, as
 * any change that could not be made durable. Until session 36 the file at
 * the path kept it all the same, and the next records were appended to
 * that file: a restart replayed the refused change (found in review,
 * session 32). Now the file is written again from the rules as they are.
 *
 * The real Daemon in this process (startInProcDaemon); the directory's
 * fsync refused by StateStore.testFailDirSyncs.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';

const isRoot = process.getuid?.() === 0;
const policy = (i: number): Record<string, string> => ({ name: `d${i}`, match: `10.9.${i}.0/24`, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' });

/** The keys the state file's records put, replayed in order (a delete takes one out). */
function keysInFile(file: string): string[] {
  const keys = new Set<string>();
  for (const line of readFileSync(file, 'utf8').split('\n').slice(1)) {
    if (line === '') continue;
    const r = JSON.parse(line) as { put?: string; del?: string; key?: string; rule?: { match?: string } };
    const key = r.key ?? r.rule?.match;
    if (key === undefined) continue;
    if (r.del !== undefined) keys.delete(key);
    else keys.add(key);
  }
  return [...keys].sort();
}

describe.skipIf(!isRoot)('a rewrite of the state file whose directory cannot be synced', () => {
  let run: InProcDaemon | undefined;
  beforeAll(async () => {
    run = await startInProcDaemon('statedir', 'settings: { max_policies: 16, max_localsids: 2 }\npolicies: []\nlocalsids: []\n');
  }, 60_000);
  afterAll(() => run?.stop());

  it('refuses the change, and the file does not keep it (a restart would have replayed it)', async () => {
    const d = run!.daemon;
    await d.putRule('policy', policy(1), 'add');
    expect(keysInFile(d.stateFile)).toEqual(['10.9.1.0/24']);
    // Removed under the daemon: the next change writes the file whole.
    rmSync(d.stateFile);
    d.testFailDirSyncs = 'EIO';
    try {
      const r = d.putRule('policy', policy(2), 'add');
      await expect(r).rejects.toMatchObject({ status: 503 });
      await expect(r).rejects.toThrow(/cannot sync the directory of the state file/);
    } finally {
      d.testFailDirSyncs = undefined;
    }
    expect(d.ruleMap('policy').has('10.9.2.0/24')).toBe(false);
    expect(existsSync(d.stateFile)).toBe(true);
    expect(keysInFile(d.stateFile), 'the file as the rules are: the refused change not in it').toEqual(['10.9.1.0/24']);
    // The next change goes on from there.
    await d.putRule('policy', policy(3), 'add');
    expect(keysInFile(d.stateFile)).toEqual(['10.9.1.0/24', '10.9.3.0/24']);
  });
});
