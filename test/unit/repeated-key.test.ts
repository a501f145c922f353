/**
 * repeatedKey: the API refuses a body that gives a key twice (JSON.parse
 * keeps the last without a word). The scanner's answers, on their own: the
 * key path of the first repeated key, or undefined. The daemon's answer to
 * such a body: test/daemon-api.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { repeatedKey } from '../../src/daemon/api.js';

describe('repeatedKey', () => {
  it.each([
    ['no repeat', '{"a":1,"b":{"a":2},"c":[{"a":1},{"a":2}]}', undefined],
    ['at the top', '{"match":"10.0.0.0/24","name":"p","match":"10.0.1.0/24"}', 'match'],
    ['in a nested object', '{"policy":{"name":"p","sr_prefix":"x","name":"q"}}', 'policy.name'],
    ['in a list element', '{"operations":[{"op":"add"},{"op":"add","op":"delete"}]}', 'operations[1].op'],
    ['in a list of lists', '[[1,2],[3,{"k":1,"k":2}]]', '[1][1].k'],
    ['keys that are not names', '{"a b":{"x\\"y":1,"x\\"y":2}}', '["a b"]["x\\"y"]'],
    ['escaped and plain spelling of one key', '{"\\u0061":1,"a":2}', 'a'],
    ['a backslash at the end of a key', '{"k\\\\":1,"k\\\\":2}', '["k\\\\"]'],
    ['strings with braces, commas and quotes are values', '{"a":"{\\"a\\":1,\\"a\\":2}","b":"[,,]","c":"\\\\"}', undefined],
    ['a string value that looks like the key', '{"a":"a","b":"a"}', undefined],
    ['the same key in sibling objects', '[{"a":1},{"a":1}]', undefined],
    ['whitespace between tokens', '{ "a" : 1 ,\n "b" : [ 1 , { "c" : 1 , "c" : 2 } ] }', 'b[1].c'],
    ['many keys in one object, repeated late', `{${Array.from({ length: 40 }, (_, i) => `"k${i}":${i}`).join(',')},"k3":0}`, 'k3'],
    ['many keys in one object, none repeated', `{${Array.from({ length: 40 }, (_, i) => `"k${i}":${i}`).join(',')}}`, undefined],
    ['many keys in one object, the repeat spelled with an escape', `{${Array.from({ length: 40 }, (_, i) => `"k${i}":${i}`).join(',')},"\\u006b7":0}`, 'k7'],
    ['an object of 20,000 keys, repeated last', `{${Array.from({ length: 20_000 }, (_, i) => `"key${i}":${i}`).join(',')},"key19999":0}`, 'key19999'],
    ['nested objects deeper than the one before, the frames reused', '[{"a":{"b":{"c":1}}},{"a":{"b":1,"c":{"d":1,"d":2}}}]', '[1].a.c.d'],
    ['a frame reused keeps no key of the object before it', '[{"a":1,"b":2},{"b":1,"a":2}]', undefined],
    // Two keys of one length and one FNV-1a hash (the scan's own): told apart by their characters, in a small object and past 16 keys.
    ['two different keys with the same hash', '{"declinate":1,"macallums":2}', undefined],
    ['two different keys with the same hash, past 16 keys', `{${Array.from({ length: 20 }, (_, i) => `"k${i}":${i}`).join(',')},"declinate":1,"macallums":2}`, undefined],
    ['a key repeated beside another of its hash', '{"declinate":1,"macallums":2,"declinate":3}', 'declinate'],
    ['a key repeated beside another of its hash, past 16 keys', `{${Array.from({ length: 20 }, (_, i) => `"k${i}":${i}`).join(',')},"macallums":1,"declinate":2,"macallums":3}`, 'macallums'],
    ['scalars', '"text"', undefined],
  ])('%s', (_name, text, want) => {
    JSON.parse(text); // valid JSON, as readBody gives it
    expect(repeatedKey(text)).toBe(want);
  });

  it('a 10,000-operation batch with one repeated key deep inside', () => {
    const ops = Array.from({ length: 10_000 }, (_, i) => `{"op":"add","policy":{"name":"p${i}","match":"10.${i >> 8}.${i & 255}.0/24"${i === 9_876 ? ',"name":"again"' : ''}}}`);
    expect(repeatedKey(`{"operations":[${ops.join(',')}]}`)).toBe('operations[9876].policy.name');
  });
});
