/**
 * The daemon's state file (src/daemon/rules.ts StateStore): changes appended
 * one per line, a torn last line ignored, invalid lines named by file:line,
 * and the atomic rewrite that compacts it.
 */
import { appendFileSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parsePolicyEntry } from '../../src/config/load.js';
import { emptyOverlay, StateStore } from '../../src/daemon/rules.js';

const POLICY = { match: '10.45.0.0/16', sr_prefix: '2001:db8:a::/48', src_prefix: '2001:db8:ff::/64' };

const OUTCOME = (p: Promise<void>): Promise<string> => p.then(() => 'acknowledged', (e: Error) => `refused: ${e.message}`);

/** A store on a new file (config hash `sha`) whose first change (POLICY) has its group's fdatasync in flight, held until open(). */
async function heldGroup(path: string, sha: string): Promise<{ s: StateStore; a: Promise<void>; open: () => void }> {
  const s = new StateStore(path);
  s.rewrite('t', 'c.yaml', sha, emptyOverlay());
  let open: () => void = () => undefined;
  s.testSyncGate = new Promise<void>((r) => (open = r));
  const a = s.commitGrouped({ put: 'policy', rule: POLICY }, () => undefined, 't', 'c.yaml', sha, emptyOverlay());
  a.catch(() => undefined);
  await new Promise((r) => setImmediate(r)); // a's fdatasync is in flight, held
  s.testSyncGate = undefined;
  return { s, a, open };
}

describe('StateStore', () => {
  let dir = '';
  let path = '';
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'mup-state-'));
    path = join(dir, 'state.json');
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('a record whose rule this version refuses says so, not that the record is damaged', () => {
    // End.M.GTP6.D with 4 segments and mtu 1300: taken before the mtu floor (session 43), refused now.
    const gtp6d = { behavior: 'end.m.gtp6.d', sid: '2001:db8:6::/64', source: '2001:db8:ff::1', sr_prefix: '2001:db8:1::/64', segments: ['2001:db8:a::1', '2001:db8:a::2', '2001:db8:a::3', '2001:db8:a::4'], srh: 'always', mtu: 1300 };
    const s = new StateStore(path);
    s.rewrite('t', 'c.yaml', 'ab'.repeat(32), emptyOverlay());
    s.append({ put: 'policy', rule: POLICY });
    s.append({ put: 'localsid', rule: gtp6d });
    s.close();
    expect(() => new StateStore(path).read()).toThrow(/:3: .*mtu: 1300 is too small.*; this version refuses the rule this record puts \(an earlier version may have taken it\): fix or delete line 3/);
    // A record that is not JSON is damaged.
    writeFileSync(path, readFileSync(path, 'utf8').replace(/\n[^\n]*end\.m\.gtp6\.d[^\n]*\n/, '\n{"put":"policy",}\n'));
    expect(() => new StateStore(path).read()).toThrow(/:3: .*; this record is damaged: fix or delete line 3/);
  });

  it('replays appended changes in order: put, replace, delete', () => {
    const s = new StateStore(path);
    s.rewrite('t', '/etc/mup.yaml', 'ab'.repeat(32), emptyOverlay());
    s.append({ put: 'policy', rule: POLICY });
    s.append({ put: 'policy', rule: { ...POLICY, sr_prefix: '2001:db8:b::/48', name: 'ue' } });
    s.append({ put: 'localsid', rule: { sid: '2001:db8:2::/48', src_prefix_len: 64 } });
    s.append({ del: 'localsid', key: '2001:db8:2::/48' });
    s.append({ del: 'policy', key: '10.99.0.0/16' });
    s.close();
    const got = new StateStore(path).read()!;
    expect(got.torn).toBe(false);
    expect(got.header.config).toEqual({ file: '/etc/mup.yaml', sha256: 'ab'.repeat(32) });
    expect([...got.overlay.policies.keys()]).toEqual(['10.45.0.0/16']);
    expect(got.overlay.policies.get('10.45.0.0/16')!.name).toBe('ue');
    expect(got.overlay.localsids.size).toBe(0);
    expect([...got.overlay.delLocalSids]).toEqual(['2001:db8:2::/48']);
    expect([...got.overlay.delPolicies]).toEqual(['10.99.0.0/16']);
  });

  it('a delete of a rule the file never had leaves nothing to replay: no delete entry kept for it, however many such rules came and went', () => {
    // An API rule added and deleted again (base null: the file had no rule at its key). Its delete entry
    // was kept after a restart, written again by every compaction and counted as an API change: churn of
    // API rules grew the state file and the overlay by one entry per key ever deleted.
    const s = new StateStore(path);
    s.rewrite('t', 'c.yaml', '00'.repeat(32), emptyOverlay());
    for (let i = 0; i < 50; i++) {
      s.append({ put: 'policy', rule: { ...POLICY, match: `10.100.${i}.0/24`, name: `api-${i}` }, base: null });
      s.append({ del: 'policy', key: `10.100.${i}.0/24`, base: null });
    }
    s.append({ batch: [{ put: 'session', rule: { ue: '10.60.0.1/32', teid: '0x1', qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' }, base: null }] });
    s.append({ batch: [{ del: 'session', key: '10.60.0.1/32', base: null }] });
    s.append({ del: 'policy', key: '10.99.0.0/16', base: 'ab12' }); // a rule of the file: its delete stays
    s.close();
    const got = new StateStore(path).read()!;
    expect(got.overlay.policies.size).toBe(0);
    expect([...got.overlay.delPolicies]).toEqual(['10.99.0.0/16']);
    expect(got.overlay.sessions.size + got.overlay.delSessions.size).toBe(0);
    expect(got.bases.get('policy 10.100.0.0/24')).toBeNull();
  });

  it('ignores a last line cut short by a crash, and says so', () => {
    const s = new StateStore(path);
    s.rewrite('t', 'c.yaml', '00'.repeat(32), emptyOverlay());
    s.append({ put: 'policy', rule: POLICY });
    s.close();
    appendFileSync(path, '{"put":"policy","rule":{"match":"10.46.0.0/16","sr_pre');
    const got = new StateStore(path).read()!;
    expect(got.torn).toBe(true);
    expect([...got.overlay.policies.keys()]).toEqual(['10.45.0.0/16']);
  });

  it.each([
    ['not JSON', 'nope\n', /:2: .*JSON/],
    ['invalid rule', `${JSON.stringify({ put: 'policy', rule: { ...POLICY, sr_prefix: '2001:db8::/64' } })}\n`, /:2: .*sr_prefix.*too long/],
    ['unknown table', `${JSON.stringify({ put: 'routes', rule: {} })}\n`, /:2: .*unknown table/],
    ['neither put nor del', '{"x":1}\n', /:2: .*neither a put nor a del/],
    // Found in review (session 42): the second part was dropped without a word, the kind named as a SID's key.
    ['put and batch', `${JSON.stringify({ batch: [], put: 'policy', rule: POLICY })}\n`, /:2: a record is one of batch, put and del, not batch and put/],
    ['put and del', `${JSON.stringify({ put: 'policy', rule: POLICY, del: 'policy', key: '10.45.0.0/16' })}\n`, /:2: a record is one of batch, put and del, not put and del/],
    ['del of an unknown table', `${JSON.stringify({ del: 'route', key: '10.0.0.0/8' })}\n`, /:2: unknown table "route"/],
  ])('refuses a %s line, naming file and line', (_name, line, re) => {
    const s = new StateStore(path);
    s.rewrite('t', 'c.yaml', '00'.repeat(32), emptyOverlay());
    appendFileSync(path, line);
    expect(() => new StateStore(path).read()).toThrow(re);
  });

  it('refuses a file of another format', () => {
    writeFileSync(path, '{"version":1}\n');
    expect(() => new StateStore(path).read()).toThrow(/not a version 2 state file.*move it aside/);
  });

  it('compacts: a rewrite keeps the net changes only', () => {
    const s = new StateStore(path);
    s.rewrite('t', 'c.yaml', '00'.repeat(32), emptyOverlay());
    for (let i = 0; i < 1100; i++) s.append({ put: 'policy', rule: { ...POLICY, name: `n${i}` } });
    const o = new StateStore(path).read()!.overlay;
    expect(s.wantsCompaction(o), '1,100 lines for 1 net change').toBe(true);
    s.rewrite('t', 'c.yaml', '00'.repeat(32), o);
    expect(readFileSync(path, 'utf8').trim().split('\n')).toHaveLength(2);
    expect(new StateStore(path).read()!.overlay.policies.get('10.45.0.0/16')!.name).toBe('n1099');
    s.close();
  });

  it('syncs a grouped change written just before the file is closed in the same turn: it settles, and is there after', async () => {
    const s = new StateStore(path);
    const sha = 'cd'.repeat(32);
    s.rewrite('t', 'c.yaml', sha, emptyOverlay());
    let undone = false;
    // commitGrouped defers the fdatasync to the end of this turn; close() comes first (a failed cut-back, a stop).
    const acked = s.commitGrouped({ put: 'policy', rule: POLICY }, () => (undone = true), 't', 'c.yaml', sha, emptyOverlay());
    s.close();
    const settled = await Promise.race([acked.then(() => 'acknowledged', () => 'refused'), new Promise((r) => setTimeout(() => r('still waiting after 5 s'), 5000))]);
    expect(settled).toBe('acknowledged');
    expect(undone).toBe(false);
    expect([...new StateStore(path).read()!.overlay.policies.keys()]).toEqual(['10.45.0.0/16']);
  });

  it('a change queued behind a sync in flight when the file is closed: synced with it gone, not left waiting (idle() resolves)', async () => {
    const s = new StateStore(path);
    const sha = 'cd'.repeat(32);
    s.rewrite('t', 'c.yaml', sha, emptyOverlay());
    const a = s.commitGrouped({ del: 'policy', key: '10.0.0.0/24' }, () => undefined, 't', 'c.yaml', sha, emptyOverlay());
    await new Promise((r) => setImmediate(r)); // a's fdatasync is in flight
    let undone = false;
    const b = s.commitGrouped({ put: 'policy', rule: POLICY }, () => (undone = true), 't', 'c.yaml', sha, emptyOverlay()); // queued behind it
    s.close(); // as a failed cut-back's fallback does
    const idle = s.idle().then(() => 'idle');
    const timeout = (what: string): Promise<string> => new Promise((r) => setTimeout(() => r(`${what} still waiting after 5 s`), 5000).unref());
    await a;
    expect(await Promise.race([b.then(() => 'acknowledged', () => 'refused'), timeout('b')])).toBe('acknowledged');
    expect(await Promise.race([idle, timeout('idle()')])).toBe('idle');
    expect(undone).toBe(false);
    expect([...new StateStore(path).read()!.overlay.policies.keys()]).toEqual(['10.45.0.0/16']);
  });

  it('a group whose fdatasync fails after the file was closed and opened again: its records and the ones after it are cut off the file, not only refused', async () => {
    const s = new StateStore(path);
    const sha = 'cd'.repeat(32);
    s.rewrite('t', 'c.yaml', sha, emptyOverlay());
    const undone: string[] = [];
    s.testFailSyncs = 'EIO'; // a's fdatasync, started at the end of this turn, fails a turn later
    const a = s.commitGrouped({ put: 'policy', rule: POLICY }, () => void undone.push('a'), 't', 'c.yaml', sha, emptyOverlay());
    a.catch(() => undefined);
    await new Promise((r) => setImmediate(r)); // a's group is in flight
    s.close(); // as a failed cut-back's fallback does: the next record opens the file again
    s.testFailSyncs = undefined;
    const other = { ...POLICY, match: '10.46.0.0/16' };
    const b = s.commitGrouped({ put: 'policy', rule: other }, () => void undone.push('b'), 't', 'c.yaml', sha, emptyOverlay());
    b.catch(() => undefined);
    expect(await OUTCOME(a)).toMatch(/^refused: cannot sync the state file .*EIO/);
    expect(await OUTCOME(b)).toMatch(/^refused: /);
    expect(undone).toEqual(['b', 'a']);
    // Before: both stayed in the file (only the group's own fd was cut back, and it was no longer the store's), so a
    // restart replayed two changes the API had refused.
    expect([...new StateStore(path).read()!.overlay.policies.keys()], 'the file after the refusal').toEqual([]);
    const c = s.commitGrouped({ del: 'policy', key: '10.47.0.0/16' }, () => void undone.push('c'), 't', 'c.yaml', sha, emptyOverlay());
    expect(await OUTCOME(c)).toBe('acknowledged');
    const after = new StateStore(path).read()!;
    expect([...after.overlay.policies.keys()]).toEqual([]);
    expect([...after.overlay.delPolicies]).toEqual(['10.47.0.0/16']);
    expect(after.torn).toBe(false);
  });

  it('records synced late on a closed fd whose fdatasync fails: cut off the file after the last acknowledged record, not the whole file', async () => {
    const sha = 'cd'.repeat(32);
    const { s, a, open } = await heldGroup(path, sha);
    let undone = false;
    const b = s.commitGrouped({ put: 'policy', rule: { ...POLICY, match: '10.46.0.0/16' } }, () => void (undone = true), 't', 'c.yaml', sha, emptyOverlay());
    b.catch(() => undefined);
    s.close(); // b waits on the closed fd: a's answer syncs it late, on this thread
    s.testFailSyncs = 'EIO'; // and that late sync fails
    open();
    expect(await OUTCOME(a)).toBe('acknowledged');
    expect(await OUTCOME(b)).toMatch(/^refused: cannot sync the state file .*EIO/);
    expect(undone).toBe(true);
    s.testFailSyncs = undefined;
    // Before: b stayed in the file (the closed fd was not cut back), so a restart replayed a refused change.
    expect([...new StateStore(path).read()!.overlay.policies.keys()]).toEqual(['10.45.0.0/16']);
  });

  it('a change queued on a new file behind a sync in flight on the replaced one, then closed: synced on its own file, not judged by the old file\'s sync', async () => {
    const sha = 'cd'.repeat(32);
    const { s, a, open } = await heldGroup(path, sha); // on the old file
    // The file written whole meanwhile (as after a file moved aside under the daemon): a is in it, acknowledged.
    const withA = emptyOverlay();
    withA.policies.set(POLICY.match, parsePolicyEntry(POLICY, 'a'));
    s.rewrite('t', 'c.yaml', sha, withA);
    let undone = false;
    const other = { ...POLICY, match: '10.46.0.0/16' };
    const r1 = s.commitGrouped({ put: 'policy', rule: other }, () => void (undone = true), 't', 'c.yaml', sha, emptyOverlay()); // on the new file
    r1.catch(() => undefined);
    s.testFailSyncs = 'EIO'; // r1's sync fails, wherever it is made
    s.close(); // as a failed cut-back's fallback does
    open();
    expect(await OUTCOME(a)).toBe('acknowledged');
    expect(await OUTCOME(r1)).toMatch(/^refused: cannot sync the state file .*EIO/);
    expect(undone).toBe(true);
    s.testFailSyncs = undefined;
    // Before: close() closed the new file's fd at once and left r1 to the old file's sync, which judged it (an
    // fdatasync of the other file: acknowledged without being durable; here refused), and could not cut it off
    // the new file, so a restart replayed it.
    expect([...new StateStore(path).read()!.overlay.policies.keys()]).toEqual(['10.45.0.0/16']);
  });

  it('a file put at the path by something else while the store had it closed is not appended to: the next change writes the file whole', async () => {
    const s = new StateStore(path);
    const sha = 'cd'.repeat(32);
    s.rewrite('t', 'c.yaml', sha, emptyOverlay());
    await s.commitGrouped({ del: 'policy', key: '10.1.0.0/16' }, () => undefined, 't', 'c.yaml', sha, emptyOverlay());
    s.close(); // as a failed cut-back's fallback does
    // Another state file for the same config, longer than this store's, renamed into place (a restored copy).
    const foreign = new StateStore(join(dir, 'other.json'));
    foreign.rewrite('t', 'c.yaml', sha, emptyOverlay());
    for (let i = 0; i < 4; i++) foreign.append({ del: 'policy', key: `10.9.${i}.0/24` });
    foreign.close();
    renameSync(join(dir, 'other.json'), path);
    const after = emptyOverlay();
    after.delPolicies.add('10.1.0.0/16');
    after.delPolicies.add('10.2.0.0/16');
    await s.commitGrouped({ del: 'policy', key: '10.2.0.0/16' }, () => undefined, 't', 'c.yaml', sha, after);
    // Before: the foreign file was cut to this store's length and appended to: half its records and ours.
    expect([...new StateStore(path).read()!.overlay.delPolicies].sort()).toEqual(['10.1.0.0/16', '10.2.0.0/16']);
  });
});
