/**
 * A reload's rewrite of the state file in slices (StateStore.rewriteInSlices;
 * issue 19: nothing holds the event loop for long). With 262,144 API
 * sessions and as many policies, the whole rewrite after a reload held the
 * loop 3.4 s in one turn (bench:daemon --sessions 262144, with an edited
 * reload after the batches). The lines are now made in slices, written and
 * synced off the loop, and renamed in one turn.
 *
 * What must hold: the loop turns while it is under way; the new file names
 * the new config and replays to the overlay, appends go to it after; a
 * rewrite() or close() meanwhile drops it (the rewrite's file stands, no
 * temp file); one that cannot write rejects with the file as it was. (The
 * daemon's reload uses it: test/reload-stop.test.ts stops a daemon during
 * it; bench:daemon --sessions measures it.)
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { execa } from 'execa';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { COMPACT_SLICE, emptyOverlay, overlaySize, RULE_KINDS, StateStore, StateWriteError, type Overlay } from '../src/daemon/rules.js';
import type { Policy } from '../src/config/types.js';
import { linesOnDisk, net, policyJson, putPolicy, watchTempSizes } from './helpers/state-overlay.js';

const OLD = 'ab'.repeat(32);
const NEW = 'cd'.repeat(32);

const put = (s: StateStore, o: Overlay, i: number, sha = OLD, sid = 1): Promise<void> => putPolicy(s, o, i, sha, sid);

describe('state file rewritten in slices (a reload)', () => {
  let dir: string;
  let path: string;
  let s: StateStore;
  const temps = (): string[] => readdirSync(dir).filter((n) => n.includes('.compacting-') || n.includes('.tmp-'));
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'mup-rewrite-'));
    path = join(dir, 'state.json');
    s = new StateStore(path);
    s.rewrite('t', 'c.yaml', OLD, emptyOverlay());
  });
  afterEach(() => {
    s.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('runs while the loop turns; the file then names the new config, replays to the overlay and takes the next appends', async () => {
    const o = emptyOverlay();
    const N = 6 * COMPACT_SLICE;
    for (let i = 0; i < N; i++) await put(s, o, i);
    // A delete entry too (a file rule the API deleted).
    o.delPolicies.add('10.200.0.0/24');
    // Each turn while it runs: the size of its temp file (written a slice at a time: seen at several sizes).
    const watch = watchTempSizes(dir);
    const rewrites = s.rewrites;
    const p = s.rewriteInSlices('t', 'new.yaml', NEW, o);
    // Not in this turn: the caller's turn ends with the old file in place.
    expect(s.isFor(OLD)).toBe(true);
    await p;
    const sizes = watch.stop();
    const final = statSync(path).size;
    const partial = sizes.filter((n) => n > 200 && n < final);
    expect(partial.length, `sizes of the temp file seen between turns: ${sizes.join(', ')} (the file: ${final})`).toBeGreaterThanOrEqual(3);
    expect(s.rewrites).toBe(rewrites + 1);
    expect(s.isFor(NEW)).toBe(true);
    expect(temps(), 'no temp file left').toEqual([]);
    const got = new StateStore(path).read()!;
    expect(got.header.config).toEqual({ file: 'new.yaml', sha256: NEW });
    expect(got.torn).toBe(false);
    expect(net(got.overlay)).toEqual(net(o));
    expect(overlaySize(got.overlay)).toBe(N + 1);
    expect(s.lines).toBe(linesOnDisk(path));
    // The next change is appended to it (not the whole file written again).
    await put(s, o, N, NEW);
    expect(s.rewrites).toBe(rewrites + 1);
    expect(net(new StateStore(path).read()!.overlay)).toEqual(net(o));
    expect(s.lines).toBe(linesOnDisk(path));
  });

  it('a rewrite() meanwhile drops it: the rewrite stands, no temp file left', async () => {
    const o = emptyOverlay();
    for (let i = 0; i < 3 * COMPACT_SLICE; i++) await put(s, o, i);
    const p = s.rewriteInSlices('t', 'new.yaml', NEW, o);
    await new Promise<void>((r) => setImmediate(r));
    s.rewrite('t', 'other.yaml', NEW, emptyOverlay());
    await p;
    expect(temps()).toEqual([]);
    const got = new StateStore(path).read()!;
    expect(got.header.config.file).toBe('other.yaml');
    expect(overlaySize(got.overlay)).toBe(0);
  });

  it('close() meanwhile drops it: the old file stays as it was', async () => {
    const o = emptyOverlay();
    for (let i = 0; i < 3 * COMPACT_SLICE; i++) await put(s, o, i);
    const before = readFileSync(path);
    const p = s.rewriteInSlices('t', 'new.yaml', NEW, o);
    s.close();
    await p;
    expect(temps()).toEqual([]);
    expect(readFileSync(path).equals(before)).toBe(true);
  });

  it('one that cannot write its file rejects (StateWriteError), the file as it was and no temp file left', async () => {
    if (process.getuid?.() !== 0) return; // a tmpfs of its own needs root
    const mnt = mkdtempSync(join(tmpdir(), 'mup-rewrite-full-'));
    await execa('mount', ['-t', 'tmpfs', '-o', 'size=256k,mode=0700', 'tmpfs', mnt]);
    const small = new StateStore(join(mnt, 'state.json'));
    try {
      small.rewrite('t', 'c.yaml', OLD, emptyOverlay());
      const o = emptyOverlay();
      for (let i = 0; i < 100; i++) await put(small, o, i);
      const before = readFileSync(join(mnt, 'state.json'));
      // A rewrite of 2,000 policies (about 200 KB) into the room left: none.
      for (let i = 100; i < 2000; i++) o.policies.set(`10.${(i >> 8) & 255}.${i & 255}.0/24`, RULE_KINDS.policy.parse(policyJson(i), 'test') as Policy);
      writeFileSync(join(mnt, 'filler'), Buffer.alloc(200 * 1024, 0x2e));
      const e = await small.rewriteInSlices('t', 'new.yaml', NEW, o).then(
        () => undefined,
        (x: unknown) => x,
      );
      expect(e).toBeInstanceOf(StateWriteError);
      expect((e as StateWriteError).errno).toBe('ENOSPC');
      expect((e as Error).message).toContain(join(mnt, 'state.json'));
      expect(readFileSync(join(mnt, 'state.json')).equals(before)).toBe(true);
      expect(small.isFor(OLD)).toBe(true);
      expect(readdirSync(mnt).filter((n) => n !== 'state.json' && n !== 'filler'), 'its temp file removed').toEqual([]);
    } finally {
      small.close();
      await execa('umount', [mnt], { reject: false });
      rmSync(mnt, { recursive: true, force: true });
    }
  });
});
