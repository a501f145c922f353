/**
 * A batch's record bytes (RecordBytes, src/daemon/batch.ts): made for the
 * record's size at once, so the pages are touched as lines are written
 * (slice by slice), not by a doubling's copy or a final copy of the whole
 * record in one turn (10,000 operations: turns of 10-15 ms on a host where
 * a page touched for the first time costs about 17 us); a guess far over
 * is given back as a copy of the record's size; the bytes are the lines.
 */
import { describe, expect, it } from 'vitest';
import { RecordBytes } from '../../src/daemon/batch.js';

const line = (i: number): string => JSON.stringify({ put: 'policy', rule: { name: `p${i}`, match: `10.${i >> 8}.${i & 255}.0/24`, sr_prefix: '2001:db9:20::/48', src_prefix: '2001:db8:ffff::/64' }, base: null });

describe('RecordBytes', () => {
  it('a record of 10,000 lines in the buffer made for it: no copy on the way or at the end, and the bytes are the lines', () => {
    const N = 10_000;
    const r = new RecordBytes('{"batch":[', N * 160);
    const made = r.capacity;
    for (let i = 0; i < N; i++) {
      if (i > 0) r.byte(0x2c);
      r.text(line(i));
    }
    r.text(']}\n');
    expect(r.capacity, 'the buffer was not replaced').toBe(made);
    const bytes = r.done();
    expect(2 * bytes.length).toBeGreaterThanOrEqual(made);
    expect(bytes.toString('utf8')).toBe(`{"batch":[${Array.from({ length: N }, (_, i) => line(i)).join(',')}]}\n`);
  });

  it('a guess far over: the bytes as a copy of their own size; a guess short: the buffer grows and nothing is lost', () => {
    const over = new RecordBytes('{"batch":[', 1 << 20);
    over.text('ü]}\n');
    const small = over.done();
    expect(small.buffer.byteLength).toBeLessThan(1 << 16);
    expect(small.toString('utf8')).toBe('{"batch":[ü]}\n');
    const short = new RecordBytes('{"batch":[', 0);
    const text = Array.from({ length: 2_000 }, (_, i) => line(i)).join(',');
    short.text(text);
    expect(short.done().toString('utf8')).toBe(`{"batch":[${text}`);
  });
});
