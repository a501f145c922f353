/**
 * The state file's compaction in the background (issue 19: nothing holds
 * the event loop for long). With 10,000+ API changes in the overlay a
 * rewrite took 200-350 ms of the loop, every few thousand changes under 4
 * writers; StateStore.compactSoon makes the snapshot's lines in slices and
 * writes and syncs it off the loop, then copies the records appended
 * meanwhile after it and renames, in one turn.
 *
 * What must hold: the loop turns while it is under way; every record
 * appended meanwhile is in the compacted file, which replays to the overlay
 * the changes made; a rewrite (reload, save) or close() meanwhile drops it
 * (no temp file left, the rewrite's file stands); a compaction that fails
 * leaves the file whole and appendable, and is not retried at once; a file
 * moved aside meanwhile is not written back.
 */
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { COMPACT_SLICE, emptyOverlay, overlaySize, RULE_KINDS, StateStore, type Overlay, type StateWriteError } from '../src/daemon/rules.js';
import type { Policy } from '../src/config/types.js';

const SHA = 'ab'.repeat(32);
type End = 'compacted' | 'dropped' | StateWriteError;

const policyJson = (i: number, sid = 1): Record<string, unknown> => ({
  name: `p${i}`,
  match: `10.${(i >> 8) & 255}.${i & 255}.0/24`,
  sr_prefix: `2001:db8:${sid}::/48`,
  src_prefix: '2001:db8:ff::/64',
});

/** Put policy i into the overlay and record it (group commit), as the daemon does. */
function put(s: StateStore, o: Overlay, i: number, sid = 1): Promise<void> {
  const k = RULE_KINDS.policy;
  const r = k.parse(policyJson(i, sid), 'test') as Policy;
  const key = k.key(r);
  o.policies.set(key, r);
  o.delPolicies.delete(key);
  return s.commitGrouped({ put: 'policy', rule: k.json(r), base: null }, () => undefined, 't', 'c.yaml', SHA, o);
}

function del(s: StateStore, o: Overlay, i: number): Promise<void> {
  const key = `10.${(i >> 8) & 255}.${i & 255}.0/24`;
  o.policies.delete(key);
  o.delPolicies.add(key); // as a replay of the line does
  return s.commitGrouped({ del: 'policy', key, base: null }, () => undefined, 't', 'c.yaml', SHA, o);
}

/** The overlay as its net changes: what the file must replay to. */
function net(o: Overlay): { puts: [string, unknown][]; dels: string[] } {
  const k = RULE_KINDS.policy;
  return { puts: [...o.policies].map(([key, r]) => [key, k.json(r)] as [string, unknown]).sort(), dels: [...o.delPolicies].sort() };
}

function compacted(s: StateStore, o: Overlay): Promise<End> {
  return new Promise((resolve) => s.compactSoon('t', 'c.yaml', SHA, o, undefined, resolve));
}

describe('state file compaction in the background', () => {
  let dir: string;
  let path: string;
  let s: StateStore;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'mup-compact-'));
    path = join(dir, 'state.json');
    s = new StateStore(path);
    s.rewrite('t', 'c.yaml', SHA, emptyOverlay());
  });
  afterEach(() => {
    s.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('runs while the loop turns; the records appended meanwhile are in the compacted file, which replays to the overlay', async () => {
    const o = emptyOverlay();
    const N = 4 * COMPACT_SLICE;
    // Each policy put twice: 2N lines for N net changes.
    for (let i = 0; i < N; i++) await put(s, o, i);
    for (let i = 0; i < N; i++) await put(s, o, i, 2);
    expect(s.lines).toBe(2 * N);
    let ticks = 0;
    const timer = setInterval(() => {
      if (s.compacting) ticks++;
    }, 0);
    const ended = compacted(s, o);
    expect(s.compacting).toBe(true);
    // Changes while it runs: new keys, replaced ones, deletes.
    const meanwhile: Promise<void>[] = [];
    for (let i = 0; i < 50; i++) meanwhile.push(put(s, o, N + i));
    meanwhile.push(put(s, o, 0, 3), del(s, o, 1));
    await Promise.all(meanwhile);
    const more: Promise<void>[] = [];
    for (let i = 50; i < 60; i++) more.push(put(s, o, N + i));
    await Promise.all(more);
    const end = await ended;
    clearInterval(timer);
    expect(end).toBe('compacted');
    expect(ticks, 'timer turns seen while the compaction was under way').toBeGreaterThanOrEqual(2);
    expect(s.compacting).toBe(false);
    expect(existsSync(`${path}.compacting`), 'no temp file left').toBe(false);
    // The snapshot's N lines and the 62 records appended after it.
    expect(s.lines).toBe(N + 62);
    const got = new StateStore(path).read()!;
    expect(got.torn).toBe(false);
    expect(net(got.overlay)).toEqual(net(o));
    expect(overlaySize(got.overlay)).toBe(N + 60); // N - 1 + 60 puts, 1 delete
    // Appends go on to the new file.
    await put(s, o, 99_999 & 0xffff);
    expect(net(new StateStore(path).read()!.overlay)).toEqual(net(o));
  });

  it('a rewrite meanwhile (reload, save) drops it: the rewrite stands, no temp file left', async () => {
    const o = emptyOverlay();
    for (let i = 0; i < 3 * COMPACT_SLICE; i++) await put(s, o, i);
    const ended = compacted(s, o);
    const other = emptyOverlay();
    s.rewrite('t', 'c.yaml', SHA, other);
    expect(await ended).toBe('dropped');
    expect(existsSync(`${path}.compacting`)).toBe(false);
    expect(overlaySize(new StateStore(path).read()!.overlay)).toBe(0);
  });

  it('close() meanwhile drops it', async () => {
    const o = emptyOverlay();
    for (let i = 0; i < 3 * COMPACT_SLICE; i++) await put(s, o, i);
    const lines = s.lines;
    const ended = compacted(s, o);
    s.close();
    expect(await ended).toBe('dropped');
    expect(existsSync(`${path}.compacting`)).toBe(false);
    const got = new StateStore(path).read()!;
    expect(overlaySize(got.overlay)).toBe(3 * COMPACT_SLICE);
    expect(got.torn).toBe(false);
    expect(lines).toBe(3 * COMPACT_SLICE);
  });

  it('a file moved aside meanwhile is not written back', async () => {
    const o = emptyOverlay();
    for (let i = 0; i < 3 * COMPACT_SLICE; i++) await put(s, o, i);
    const ended = compacted(s, o);
    renameSync(path, `${path}.aside`);
    expect(await ended).toBe('dropped');
    expect(existsSync(path), 'the file stays aside').toBe(false);
    expect(existsSync(`${path}.compacting`)).toBe(false);
  });

  it('a compaction that fails leaves the file whole and appendable, and the next is not started at once', async () => {
    const o = emptyOverlay();
    for (let i = 0; i < 2 * COMPACT_SLICE; i++) await put(s, o, i);
    // The temp file's name taken by a directory: its open fails (EISDIR).
    mkdirSync(`${path}.compacting`);
    const end = await compacted(s, o);
    expect(end).not.toBe('compacted');
    expect(end).not.toBe('dropped');
    expect((end as StateWriteError).message).toContain(path);
    expect(s.compacting).toBe(false);
    await put(s, o, 5000);
    expect(net(new StateStore(path).read()!.overlay)).toEqual(net(o));
    // Retried later, not at the next change.
    let called = false;
    s.compactSoon('t', 'c.yaml', SHA, o, undefined, () => {
      called = true;
    });
    expect(s.compacting).toBe(false);
    await new Promise((r) => setTimeout(r, 20));
    expect(called).toBe(false);
  });
});
