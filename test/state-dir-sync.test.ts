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

  it('refuses a change still waiting for its fdatasync when such a rewrite takes it along (it was acknowledged, durable nowhere)', async () => {
    const d = run!.daemon;
    const before = keysInFile(d.stateFile);
    // Change 4's record is appended and waits for the group's fdatasync, which starts after this turn
    // (setImmediate): the loop below runs microtasks only, so change 2 comes in before that sync.
    const p4 = d.putRule('policy', policy(4), 'add');
    let appended = false;
    for (let i = 0; i < 10_000 && !appended; i++) {
      await Promise.resolve();
      appended = readFileSync(d.stateFile, 'utf8').includes('10.9.4.0/24');
    }
    expect(appended, "change 4's record appended in this turn").toBe(true);
    // Removed under the daemon (change 4's record with it): change 2 writes the file whole, 4 in it.
    rmSync(d.stateFile);
    d.testFailDirSyncs = 'EIO';
    let r4: unknown;
    let r2: unknown;
    try {
      const p2 = d.putRule('policy', policy(2), 'add');
      [r4, r2] = await Promise.allSettled([p4, p2]);
    } finally {
      d.testFailDirSyncs = undefined;
    }
    expect(r2).toMatchObject({ status: 'rejected', reason: { status: 503 } });
    // Before: change 4 was acknowledged with the rewrite, though the only file holding it might not survive a crash.
    expect(r4).toMatchObject({ status: 'rejected', reason: { status: 503 } });
    expect(String((r4 as PromiseRejectedResult).reason)).toMatch(/rewritten with the change, but its directory could not be synced/);
    expect(d.ruleMap('policy').has('10.9.4.0/24')).toBe(false);
    expect(d.ruleMap('policy').has('10.9.2.0/24')).toBe(false);
    // Written again once change 4 was undone: neither refused change in it.
    expect(keysInFile(d.stateFile)).toEqual(before);
    await d.putRule('policy', policy(5), 'add');
    expect(keysInFile(d.stateFile)).toEqual([...before, '10.9.5.0/24'].sort());
  });

  it('a change whose fdatasync is in flight stays refused when the file is written again without it (not acknowledged, then undone)', async () => {
    const d = run!.daemon;
    const before = keysInFile(d.stateFile);
    let open: () => void = () => {};
    d.testSyncGate = new Promise<void>((r) => (open = r));
    let r6: PromiseSettledResult<unknown> | undefined;
    try {
      const p6 = d.putRule('policy', policy(6), 'add');
      void p6.then(
        (v) => (r6 = { status: 'fulfilled', value: v }),
        (e: unknown) => (r6 = { status: 'rejected', reason: e }),
      );
      // Its group's fdatasync started (a turn later) and is held in flight by the gate.
      for (let i = 0; i < 50 && !readFileSync(d.stateFile, 'utf8').includes('10.9.6.0/24'); i++) await new Promise((r) => setImmediate(r));
      await new Promise((r) => setImmediate(r));
      await new Promise((r) => setImmediate(r));
      rmSync(d.stateFile);
      // One directory fsync fails (change 7's rewrite); the file written again without 7 and 6 syncs its directory.
      d.testFailDirSyncs = 'EIO';
      d.testFailDirSyncsLeft = 1;
      await expect(d.putRule('policy', policy(7), 'add')).rejects.toMatchObject({ status: 503 });
      for (let i = 0; i < 50 && r6 === undefined; i++) await new Promise((r) => setImmediate(r));
    } finally {
      open();
      d.testSyncGate = undefined;
      d.testFailDirSyncs = undefined;
      d.testFailDirSyncsLeft = undefined;
    }
    for (let i = 0; i < 50 && r6 === undefined; i++) await new Promise((r) => setImmediate(r));
    // Before: the rewrite that worked acknowledged change 6 (in flight, already refused), whose undo then took it out.
    expect(r6).toMatchObject({ status: 'rejected', reason: { status: 503 } });
    expect(d.ruleMap('policy').has('10.9.6.0/24')).toBe(false);
    expect(keysInFile(d.stateFile)).toEqual(before);
  });

  it('after a rename whose directory fsync failed, the next record is acknowledged only once the directory is synced', async () => {
    const d = run!.daemon;
    const before = keysInFile(d.stateFile);
    rmSync(d.stateFile);
    d.testFailDirSyncs = 'EIO';
    try {
      // Refused; the file written again without it stands, its directory not synced.
      await expect(d.putRule('policy', policy(8), 'add')).rejects.toMatchObject({ status: 503 });
      expect(keysInFile(d.stateFile)).toEqual(before);
      // Appended to that file and fdatasync'ed, but the rename under it may not survive a crash: refused, cut back.
      // Before: acknowledged after the new file's fdatasync alone.
      const r9 = d.putRule('policy', policy(9), 'add');
      await expect(r9).rejects.toMatchObject({ status: 503 });
      await expect(r9).rejects.toThrow(/owed since a rename, failed again/);
      expect(d.ruleMap('policy').has('10.9.9.0/24')).toBe(false);
      expect(keysInFile(d.stateFile)).toEqual(before);
    } finally {
      d.testFailDirSyncs = undefined;
    }
    await d.putRule('policy', policy(10), 'add');
    expect(keysInFile(d.stateFile)).toEqual([...before, '10.9.10.0/24'].sort());
  });
});
