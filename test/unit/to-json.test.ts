/**
 * toJson (src/daemon/api.ts): the API's JSON, bigints (counters) as numbers
 * up to 2^53 and as strings above. It writes without the replacer first and
 * again with it only when a bigint is there: both ways give the text the
 * replacer gives.
 */
import { describe, expect, it } from 'vitest';
import { toJson } from '../../src/daemon/api.js';

const withReplacer = (v: unknown): string =>
  JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? (x <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(x) : x.toString()) : x));

describe('toJson', () => {
  it.each([
    ['no bigint', { results: Array.from({ length: 50 }, (_, i) => ({ op: 'add', kind: 'session', key: `10.0.0.${i}/32` })), n: 3, s: 'x', z: null }],
    ['a bigint below 2^53', { packets: 12n, bytes: [1n, 2n] }],
    ['a bigint above 2^53 (a string)', { bytes: 2n ** 60n, nested: { deep: [{ v: 2n ** 53n + 1n }] } }],
    ['a bigint at the top', 5n],
    ['a bigint after many values', { list: [...Array.from({ length: 1000 }, (_, i) => i), 7n] }],
    ['a toJSON method', { when: new Date(0), rule: { toJSON: () => ({ k: 1n }) } }],
  ])('%s: the replacer\'s text', (_what, v) => {
    expect(toJson(v)).toBe(withReplacer(v));
  });

  it('a value that cannot be written still throws', () => {
    const loop: Record<string, unknown> = {};
    loop['self'] = loop;
    expect(() => toJson(loop)).toThrow(TypeError);
  });
});
