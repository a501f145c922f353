/**
 * A batch's answer written as text pieces (batchAnswerPieces in
 * src/daemon/api.ts) is the text JSON.stringify gives for the answer's
 * object and a newline: the keys of every kind, one that must be escaped
 * (or is not latin1), no results, and enough results to span many pieces.
 */
import { describe, expect, it } from 'vitest';
import { batchAnswerPieces } from '../../src/daemon/api.js';

type Result = { op: string; kind: string; key: string };

function expectSameAnswer(head: Record<string, unknown>, results: Result[]): string[] {
  const pieces = [...batchAnswerPieces(head, results)];
  const want = `${JSON.stringify({ ...head, results: results.map((x, index) => ({ index, op: x.op, kind: x.kind, key: x.key })) })}\n`;
  expect(pieces.join('')).toBe(want);
  // As sent: each piece is encoded as UTF-8 on its own.
  expect(Buffer.concat(pieces.map((p) => Buffer.from(p, 'utf8'))).toString('utf8')).toBe(want);
  return pieces;
}

describe("a batch's answer in pieces", () => {
  it('is JSON.stringify of the answer, for every kind of key and none', () => {
    const head = { applied: 5, added: 3, replaced: 1, deleted: 1 };
    expectSameAnswer(head, []);
    expectSameAnswer({}, [{ op: 'add', kind: 'policy', key: '10.0.0.0/24' }]);
    expectSameAnswer({ ...head, deletesFirst: true }, [
      { op: 'add', kind: 'policy', key: '100.64.0.1/32 teid 0x00000005/32' },
      { op: 'replace', kind: 'session', key: '10.0.0.1/32' },
      { op: 'delete', kind: 'session', key: '2001:db8:60::/64' },
      { op: 'add', kind: 'localsid', key: '2001:db8:e::/48' },
      { op: 'add', kind: 'policy', key: 'a "quoted" \\ key\n' },
      { op: 'add', kind: 'policy', key: 'ключ ✓' },
      { op: 'add', kind: 'policy', key: 'é' },
      { op: 'add', kind: 'policy', key: '' },
      // Longer than a piece's buffer: it grows for it, and the results after it are written after it.
      { op: 'add', kind: 'policy', key: 'k'.repeat(70_000) },
      { op: 'add', kind: 'policy', key: '10.0.0.0/8' },
    ]);
  });

  it('10,000 results: pieces of about 64 KiB, the same text', () => {
    const results: Result[] = Array.from({ length: 10_000 }, (_, i) => ({ op: i % 3 === 0 ? 'delete' : 'add', kind: i % 2 === 0 ? 'session' : 'policy', key: i === 5000 ? 'x\u2028"y' : `10.${i >> 8}.${i & 255}.0/24` }));
    const pieces = expectSameAnswer({ applied: 10_000, added: 6666, replaced: 0, deleted: 3334 }, results);
    expect(pieces.length).toBeGreaterThan(5);
    for (const p of pieces) expect(p.length).toBeLessThan(64 * 1024 + 1024);
  });
});
