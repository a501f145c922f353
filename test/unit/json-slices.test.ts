/**
 * parseJsonSliced: a large request body (a batch) read member by member and
 * element by element, yielding between slices. Its answer must be
 * JSON.parse's, value or error, for every text: the table below, a batch,
 * and mutations of one (characters dropped, doubled, swapped in). The
 * daemon's answers to bad bodies: test/daemon-api.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { EXACT_ERROR_MAX, parseJsonSliced, WHOLE_MAX } from '../../src/daemon/json-slices.js';
import { runNow } from '../../src/daemon/slices.js';

/** What JSON.parse gives: the value, or the error's message. */
function viaParse(text: string): { value?: unknown; error?: string } {
  try {
    return { value: JSON.parse(text) as unknown };
  } catch (e) {
    return { error: (e as Error).message };
  }
}

function viaSliced(text: string): { value?: unknown; error?: string } {
  try {
    return { value: runNow(parseJsonSliced(text)) };
  } catch (e) {
    return { error: (e as Error).message };
  }
}

function batch(n: number): string {
  const ops = Array.from({ length: n }, (_, i) => ({ op: i % 3 === 0 ? 'delete' : 'add', policy: { name: `p${i}`, match: `10.${i >> 8}.${i & 255}.0/24`, segments: ['fc00::1', 'fc00::2'], hop_limit: 64 } }));
  return JSON.stringify({ operations: ops });
}

describe('parseJsonSliced answers as JSON.parse', () => {
  it.each([
    ['a batch', '{"operations":[{"op":"add","policy":{"match":"10.0.0.0/24"}},{"op":"delete","policy":{"name":"p"}}]}'],
    ['whitespace everywhere', ' \n{ "operations" :\t[ { "op" : "add" } ,\r\n { "op":"delete" } ] , "x" : 1 }\n '],
    ['empty object', '{}'],
    ['empty list', '{"operations":[]}'],
    ['empty list with spaces', '{"operations":[ \n ]}'],
    ['scalars in a list', '{"a":[1,-2.5e3,true,false,null,"s"]}'],
    ['members that are not lists', '{"a":1,"b":"x","c":{"d":[1,{"e":[]}]},"f":null}'],
    ['strings with brackets, commas and quotes', '{"a":["],[{}", "\\"]", "\\\\", "\\\\\\"", "x,y"],"b":"}"}'],
    ['escaped key', '{"\\u0061":[1],"a\\"b":2}'],
    ['a key given twice: the last wins', '{"a":[1],"a":[2]}'],
    ['nested lists', '{"a":[[1,[2,[3]]],[]]}'],
    ['unicode', '{"a":["žluťoučký kůň","🐎"]}'],
    ['integer-like keys keep JSON.parse\'s order', '{"b":1,"2":[2],"1":3}'],
    // Not plainly well-formed: JSON.parse's own error.
    ['trailing comma in a list', '{"operations":[1,2,]}'],
    ['trailing comma in the object', '{"a":[1],}'],
    ['a hole in a list', '{"a":[1,,2]}'],
    ['unterminated list', '{"a":[1,2'],
    ['unterminated string', '{"a":["abc]}'],
    ['unterminated object', '{"a":[1]'],
    ['a bracket too many', '{"a":[1]]}'],
    ['garbage after', '{"a":[1]} x'],
    ['no colon', '{"a" [1]}'],
    ['unquoted key', '{a:[1]}'],
    ['single quotes', "{'a':[1]}"],
    ['a control character in a string', '{"a":["x\ty"]}'],
    ['a bad escape', '{"a":["\\x"]}'],
    ['not JSON', 'op=add'],
    ['empty', ''],
    // Top levels that are not an object.
    ['a list at the top', '[1,2,3]'],
    ['a scalar at the top', '"text"'],
    ['__proto__ as a member', '{"__proto__":[1],"a":2}'],
  ])('%s', (_name, text) => {
    const want = viaParse(text);
    const got = viaSliced(text);
    expect(got).toStrictEqual(want);
    if (want.value !== undefined) expect(Object.keys(got.value as object)).toStrictEqual(Object.keys(want.value as object));
  });

  it('a 10,000-operation batch: the same value, read over many slices', () => {
    const text = batch(10_000);
    const g = parseJsonSliced(text, 0);
    let yields = 0;
    let r = g.next();
    for (; r.done !== true; r = g.next()) yields++;
    expect(r.value).toStrictEqual(JSON.parse(text));
    // With a slice of 0 ms, a yield every 64 elements (the clock's ticks).
    expect(yields).toBeGreaterThanOrEqual(Math.floor(10_000 / 64) - 1);
  });

  it('many top-level members: the same value, read over many slices (found in review: one turn before)', () => {
    const text = `{${Array.from({ length: 10_000 }, (_, i) => `"k${i}":[]`).join(',')}}`;
    const g = parseJsonSliced(text, 0);
    let r = g.next();
    let yields = 0;
    for (; r.done !== true; r = g.next()) yields++;
    expect(r.value).toEqual(JSON.parse(text));
    expect(yields).toBeGreaterThanOrEqual(Math.floor(10_000 / 64) - 1);
  });

  it('mutations of a batch: dropped, doubled and replaced characters', () => {
    const text = batch(20);
    const swaps = ['[', ']', '{', '}', ',', ':', '"', '\\', ' ', 'x', '1'];
    let seed = 7;
    const rnd = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    let errors = 0;
    for (let k = 0; k < 3_000; k++) {
      const at = rnd(text.length);
      const kind = k % 3;
      const t =
        kind === 0 ? text.slice(0, at) + text.slice(at + 1) : kind === 1 ? text.slice(0, at) + text[at]! + text.slice(at) : text.slice(0, at) + swaps[rnd(swaps.length)]! + text.slice(at + 1);
      const want = viaParse(t);
      if (want.error !== undefined) errors++;
      expect(viaSliced(t), t).toStrictEqual(want);
    }
    // The mutations reach both answers.
    expect(errors).toBeGreaterThan(500);
    expect(errors).toBeLessThan(3_000);
  });
});

/** The generator run to its end with a slice of 0 ms: its value (or error) and how many times it gave the loop back. */
function drive(text: string): { value?: unknown; error?: Error; yields: number } {
  const g = parseJsonSliced(text, 0);
  let yields = 0;
  try {
    for (let r = g.next(); ; r = g.next()) {
      if (r.done === true) return { value: r.value, yields };
      yields++;
    }
  } catch (e) {
    return { error: e as Error, yields };
  }
}

describe('large bodies of every shape are read in slices (found in review: JSON.parse whole, 0.3-0.8 s of the loop at 16 MiB)', () => {
  const ops = (n: number): unknown[] => Array.from({ length: n }, (_, i) => ({ op: 'add', policy: { match: `10.${i >> 8}.${i & 255}.0/24`, sr_prefix: '2001:db8:1::/48' } }));
  const N = 20_000;
  it.each([
    ['a list at the top', JSON.stringify(ops(N))],
    ['a "__proto__" member', `{"__proto__":${JSON.stringify(ops(N))},"operations":${JSON.stringify(ops(N))}}`],
    ['operations as an object', JSON.stringify({ operations: Object.fromEntries(ops(N).map((o, i) => [`k${i}`, o])) })],
    ['one element larger than WHOLE_MAX', JSON.stringify({ operations: [{ op: 'add', policy: { segments: ops(N) } }] })],
  ])('%s: the value JSON.parse gives, over many slices', (_name, text) => {
    expect(text.length).toBeGreaterThan(WHOLE_MAX * 4);
    const got = drive(text);
    expect(got.error).toBeUndefined();
    expect(got.value).toStrictEqual(JSON.parse(text));
    expect(Object.getPrototypeOf(got.value)).toBe(Object.getPrototypeOf(JSON.parse(text)));
    expect(got.yields).toBeGreaterThanOrEqual(N / 64 - 1);
  });

  it('nesting past the depth read in pieces: one JSON.parse of that value, no stack overflow', () => {
    const text = `{"a":${'['.repeat(40)}${JSON.stringify(ops(N))}${']'.repeat(40)}}`;
    const got = drive(text);
    expect(got.error).toBeUndefined();
    expect(got.value).toStrictEqual(JSON.parse(text));
    // Deeper than any comparison here recurses: walked down by hand.
    const deep = 100_000;
    const d = drive(`{"a":${'['.repeat(deep)}"end"${']'.repeat(deep)}}`);
    expect(d.error).toBeUndefined();
    let v: unknown = (d.value as { a: unknown }).a;
    let levels = 0;
    while (Array.isArray(v)) {
      expect(v).toHaveLength(1);
      v = v[0];
      levels++;
    }
    expect([levels, v]).toEqual([deep, 'end']);
  });

  it('a large text that is not JSON: refused by the reader with the position, not read again whole', () => {
    const body = JSON.stringify({ operations: ops(N * 2) });
    expect(body.length).toBeGreaterThan(EXACT_ERROR_MAX);
    for (const [bad, where] of [
      [`${body} x`, body.length + 1],
      [`${body.slice(0, -2)},]}`, body.length - 1],
      [body.slice(0, body.length / 2), -1],
    ] as const) {
      const got = drive(bad);
      expect(got.error).toBeInstanceOf(SyntaxError);
      expect(() => JSON.parse(bad)).toThrow(SyntaxError);
      if (where >= 0) expect(got.error!.message).toContain(`at position ${where} of the JSON text`);
      else expect(got.error!.message).toMatch(/end of JSON input|of the JSON text/);
    }
  });

  it('an element that is not JSON: its position in the whole text', () => {
    const body = JSON.stringify({ operations: ops(N * 2) });
    const at = body.indexOf('{"op"', body.length / 2);
    const bad = `${body.slice(0, at)}{"op":tru}${body.slice(body.indexOf('}}', at) + 2)}`;
    const got = drive(bad);
    expect(got.error).toBeInstanceOf(SyntaxError);
    expect(got.error!.message).toContain(`(in the value at position ${at} of the JSON text)`);
  });
});
