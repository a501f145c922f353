/**
 * What a batch or a reload hands the next-hop cache after its write
 * (nhPutPieces, src/daemon/daemon.ts): every deleted id and every change,
 * once, in pieces of at most n rules, the deleted ids first. A batch of
 * 10,000 deletes handed all its ids over in one piece, and the cache
 * re-pointed them in one turn of the event loop (22 ms in a CPU profile
 * of the daemon on bench:daemon's config).
 */
import { describe, expect, it } from 'vitest';
import { nhPutPieces } from '../../src/daemon/daemon.js';
import type { Changes } from '../../src/dataplane/tables.js';

describe('nhPutPieces', () => {
  it('hands over every deleted id and every change once, n at most a piece, the deleted ids first', () => {
    const n = 512;
    const gone = Array.from({ length: 10_000 }, (_, i) => i * 3);
    const puts = Array.from({ length: 1_300 }, (_, i) => ({ match: `p${i}` }));
    const sids = Array.from({ length: 7 }, (_, i) => ({ sid: `l${i}` }));
    const c = { putPolicies: puts, putLocalSids: sids } as unknown as Changes;
    const pieces = [...nhPutPieces(c, gone, n)];
    expect(pieces.flatMap(([, g]) => g)).toEqual(gone);
    expect(pieces.flatMap(([p]) => (p.putPolicies ?? []) as unknown[])).toEqual(puts);
    expect(pieces.flatMap(([p]) => (p.putLocalSids ?? []) as unknown[])).toEqual(sids);
    for (const [p, g] of pieces) {
      const rules = g.length + Object.values(p).reduce((k, l) => k + (l as unknown[]).length, 0);
      expect(rules).toBeLessThanOrEqual(n);
      expect(g.length === 0 || Object.keys(p).length === 0, 'a piece is deleted ids or changes').toBe(true);
    }
    const firstChange = pieces.findIndex(([p]) => Object.keys(p).length > 0);
    expect(pieces.slice(firstChange).every(([, g]) => g.length === 0)).toBe(true);
    expect(pieces).toHaveLength(Math.ceil(10_000 / n) + Math.ceil(1_300 / n) + 1);
  });

  it('no change and nothing deleted: one empty piece (the cache still hears of it)', () => {
    expect([...nhPutPieces({}, [], 512)]).toEqual([[{}, []]]);
  });
});
