/**
 * putIpv6 (src/dataplane/codec.ts) writes a 128-bit address through a
 * DataView over the Buffer's whole ArrayBuffer (Node's pool for small
 * Buffers): the bytes must be the address in network order, at the offset
 * asked, and nothing outside the 16 bytes may change, also next to other
 * Buffers of the same pool; a write that would not fit the Buffer, or a
 * value that is not a 128-bit address, is refused before anything is
 * written.
 */
import { describe, expect, it } from 'vitest';
import { putIpv6 } from '../../src/dataplane/codec.js';
import { xorshift32 } from '../helpers/rng.js';

/** The address in network order, byte by byte. */
const bytesOf = (a: bigint): number[] => Array.from({ length: 16 }, (_, i) => Number((a >> BigInt(8 * (15 - i))) & 0xffn));

describe('putIpv6', () => {
  const next = xorshift32(0x1f6);
  const random = (): bigint => Array.from({ length: 4 }, () => BigInt(next())).reduce((a, w) => (a << 32n) | w, 0n);
  const cases: [string, bigint][] = [
    ['zero', 0n],
    ['one', 1n],
    ['all ones', (1n << 128n) - 1n],
    ['2001:db8::1', 0x20010db8000000000000000000000001n],
    ['high half only', 0xffff_ffff_ffff_ffffn << 64n],
    ['low half only', 0xffff_ffff_ffff_ffffn],
    ...Array.from({ length: 20 }, (_, i): [string, bigint] => [`random ${i}`, random()]),
  ];

  it.each(cases)('%s: the 16 bytes at the offset, in network order, nothing else touched', (_name, a) => {
    for (const at of [0, 1, 7, 16, 24]) {
      const b = Buffer.alloc(48, 0xa5);
      putIpv6(b, at, a);
      expect([...b.subarray(at, at + 16)]).toEqual(bytesOf(a));
      expect([...b.subarray(0, at), ...b.subarray(at + 16)].every((x) => x === 0xa5)).toBe(true);
    }
  });

  it('Buffers of the same pool: only the one written changes', () => {
    const a = Buffer.allocUnsafe(20).fill(1);
    const b = Buffer.allocUnsafe(20).fill(2);
    const c = Buffer.allocUnsafe(20).fill(3);
    expect(a.buffer === b.buffer || b.buffer === c.buffer, 'small Buffers share a pool (else this case tests nothing)').toBe(true);
    putIpv6(b, 4, (1n << 128n) - 1n);
    expect([...a].every((x) => x === 1)).toBe(true);
    expect([...c].every((x) => x === 3)).toBe(true);
    expect([...b.subarray(0, 4)]).toEqual([2, 2, 2, 2]);
    expect([...b.subarray(4)].every((x) => x === 0xff)).toBe(true);
    // Writes to other buffers in between: the view follows the buffer written.
    const d = Buffer.alloc(16);
    putIpv6(d, 0, 1n);
    putIpv6(a, 0, 2n);
    expect(d[15]).toBe(1);
    expect(a[15]).toBe(2);
    expect(a.subarray(16).every((x) => x === 1)).toBe(true);
  });

  it.each([
    ['past the end', 5, 1n],
    ['at the end', 20, 1n],
    ['negative offset', -1, 1n],
    ['2^128', 0, 1n << 128n],
    ['negative', 0, -1n],
  ])('%s: refused, nothing written', (_name, at, a) => {
    const b = Buffer.alloc(20, 7);
    expect(() => putIpv6(b, at as number, a as bigint)).toThrow(RangeError);
    expect(b.every((x) => x === 7)).toBe(true);
  });
});
