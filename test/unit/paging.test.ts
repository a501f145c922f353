/**
 * List paging (GET /v1/policies?limit=&after=): the page selection and the
 * cursor, on their own. The daemon's answers: test/paging.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { decodeCursor, encodeCursor, pageKeys, pageKeysSlices } from '../../src/daemon/api.js';
import { runNow, SliceClock } from '../../src/host/slice-clock.js';

/** Deterministic pseudo-random keys (no Math.random: the failure must be reproducible). */
function keys(n: number, seed = 7): string[] {
  let x = seed;
  const out = new Set<string>();
  while (out.size < n) {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    out.add(`10.${x % 256}.${(x >> 8) % 256}.0/24`);
  }
  return [...out];
}

/** `n` distinct keys in a scrambled order (a multiplicative step over 0..65535). */
function spread(n: number): string[] {
  return Array.from({ length: n }, (_, i) => {
    const x = (i * 40503) & 0xffff;
    return `10.${x >> 8}.${x & 255}.0/24`;
  });
}

describe('pageKeys', () => {
  for (const limit of [1, 3, 7, 100, 1000]) {
    it(`pages of ${limit} give every key once, in order, and say when there are more`, () => {
      const all = keys(500);
      const got: string[] = [];
      let after: string | undefined;
      for (let i = 0; i < 1000; i++) {
        const p = pageKeys(all, after, limit);
        expect(p.keys.length).toBeLessThanOrEqual(limit);
        got.push(...p.keys);
        if (!p.more) break;
        expect(p.keys).toHaveLength(limit);
        after = p.keys.at(-1);
      }
      expect(got).toEqual([...all].sort());
    });
  }

  it('a cursor keeps its place when its own key and others are deleted or added', () => {
    const all = keys(40).sort();
    const first = pageKeys(all, undefined, 10);
    const cursor = first.keys.at(-1)!;
    // Delete the cursor's key and one before it; add one before and one after.
    const changed = all.filter((k) => k !== cursor && k !== all[3]).concat(['0.0.0.0/24', '9999']);
    const rest: string[] = [];
    let after: string | undefined = cursor;
    for (;;) {
      const p = pageKeys(changed, after, 10);
      rest.push(...p.keys);
      if (!p.more) break;
      after = p.keys.at(-1);
    }
    // Everything after the cursor that is still there, once, and the new key after it; nothing from before it.
    expect(rest).toEqual([...all.slice(10), '9999'].sort());
  });

  for (const [order, sortKeys] of [
    ['ascending', (a: string[]) => a.sort()],
    ['descending', (a: string[]) => a.sort().reverse()],
    ['random', (a: string[]) => a],
  ] as const) {
    it(`keys in ${order} order: the same pages as a sort of every key`, () => {
      const all = sortKeys(spread(3000));
      const sorted = [...all].sort();
      for (const [after, limit] of [[undefined, 1], [undefined, 1000], [sorted[1499], 700], [sorted[2990], 50], [sorted[2999], 5]] as const) {
        const from = after === undefined ? 0 : sorted.indexOf(after) + 1;
        const want = sorted.slice(from, from + limit);
        expect(pageKeys(all, after, limit)).toEqual({ keys: want, more: from + limit < sorted.length });
      }
    });
  }

  it('yields between slices (a page of a million rules is made in many turns), and the page does not depend on where', () => {
    const all = spread(20_000).sort().reverse();
    const g = pageKeysSlices(all, undefined, 5000, new SliceClock(0));
    let yields = 0;
    let r = g.next();
    for (; r.done !== true; r = g.next()) yields++;
    expect(yields).toBeGreaterThanOrEqual(Math.floor(20_000 / 64) - 1);
    expect(r.value).toEqual({ keys: [...all].sort().slice(0, 5000), more: true });
    expect(runNow(pageKeysSlices(all, undefined, 5000, new SliceClock(Infinity)))).toEqual(r.value);
  });

  it('a key visited twice (deleted and added again while a page is made across turns) is listed once', () => {
    const m = new Map(spread(300).map((k) => [k, true] as const));
    const g = pageKeysSlices(m.keys(), undefined, 300, new SliceClock(0));
    let r = g.next();
    let again = false;
    for (; r.done !== true; r = g.next()) {
      if (again) continue;
      // Between two slices: a key visited already (the first) deleted and added again (a DELETE then POST of its rule): the iterator visits it again.
      const k = m.keys().next().value!;
      m.delete(k);
      m.set(k, true);
      again = true;
    }
    expect(r.value).toEqual({ keys: [...m.keys()].sort(), more: false });
  });

  it('an empty list or a cursor past the end: an empty last page', () => {
    expect(pageKeys([], undefined, 5)).toEqual({ keys: [], more: false });
    expect(pageKeys(['a', 'b'], 'b', 5)).toEqual({ keys: [], more: false });
  });
});

describe('cursors', () => {
  it('round-trip, and are refused for another list or when not one of ours', () => {
    expect(decodeCursor('policy', encodeCursor('policy', '10.0.0.0/24'))).toBe('10.0.0.0/24');
    for (const [kind, c] of [
      ['policy', encodeCursor('localsid', '2001:db8::/48')],
      ['policy', 'not-a-cursor!'],
      ['policy', Buffer.from('{"k":"policy"}').toString('base64url')],
      ['policy', Buffer.from('[1,2]').toString('base64url')],
      ['policy', 'x'.repeat(2000)],
    ] as const) {
      expect(() => decodeCursor(kind, c), c).toThrow(expect.objectContaining({ status: 400, code: 'bad_cursor' }));
    }
  });
});
