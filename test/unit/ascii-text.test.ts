/**
 * An ASCII JSON file read from its bytes without its string (AsciiText, a
 * start's read: src/daemon/daemon.ts #readConfig): it must read as its
 * string reads. The rules' reads are held to it in
 * test/unit/flat-rules.test.ts; here the text itself, which files get one,
 * and the settings read ahead from it.
 */
import { describe, expect, it } from 'vitest';
import { AsciiText, asciiJson, textOf } from '../../src/config/ascii-text.js';
import { parseConfig, peekSettings } from '../../src/config/load.js';
import { configOutcome } from '../helpers/config-outcome.js';

describe('AsciiText', () => {
  const s = '{"a": [1, 2], "b": "x"}';
  const t = new AsciiText(Buffer.from(s));

  it('reads as its string: its length, each character, and NaN past either end', () => {
    expect(t.length).toBe(s.length);
    for (let i = -2; i < s.length + 2; i++) expect(t.charCodeAt(i)).toEqual(s.charCodeAt(i));
  });

  it('slices as its string within it, and clamps past its ends', () => {
    for (const [a, b] of [[0, 3], [5, 11], [3, 3], [0, s.length], [20, s.length]] as const) expect(t.slice(a, b)).toBe(s.slice(a, b));
    expect(t.slice(7)).toBe(s.slice(7));
    expect(t.slice(10, 100)).toBe(s.slice(10, 100));
  });

  it('makes its string once, when asked', () => {
    expect(t.text).toBe(s);
    expect(t.text).toBe(t.text);
    expect(textOf(t)).toBe(s);
    expect(textOf(s)).toBe(s);
  });
});

describe('asciiJson', () => {
  it.each([
    ['an object', '{"policies": []}', true],
    ['an object after whitespace', ' \n\t\r{"policies": []}', true],
    ['YAML', 'policies: []\n', false],
    ['YAML that flows', '[1]\n', false],
    ['JSON with a byte past ASCII', '{"policies": [{"name": "é"}]}', false],
    ['empty', '', false],
  ])('%s: %s', (_what, text, yes) => {
    const a = asciiJson(Buffer.from(text));
    expect(a !== undefined).toBe(yes);
    if (a !== undefined) expect(a.text).toBe(text);
  });
});

describe('a config read from its bytes', () => {
  it.each([
    ['settings first', '{"settings": {"max_policies": 20}, "policies": []}'],
    ['a syntax error (its line from the string, made for it)', '{"settings": {"max_policies": 20},\n"policies": [\n{"match": "10.0.0.0/24",,}\n]}'],
    ['a key twice at the top', '{"policies": [],\n"policies": []}'],
    ['a refused rule', '{"policies": [\n{"match": "10.0.0.0/33", "sr_prefix": "2001:db8:1::/48", "src_prefix": "2001:db8:ff::/64"}\n]}'],
    ['nested deeper than the flat items', '{"interfaces": [{"name": "mup0", "xdp": "native"}], "policies": [{"match": "10.0.0.0/24", "sr_prefix": "2001:db8:1::/48", "src_prefix": "2001:db8:ff::/64", "segments": ["2001:db8:a::1"]}]}'],
  ])('%s: as its string', (_what, text) => {
    const a = asciiJson(Buffer.from(text))!;
    expect(configOutcome(() => parseConfig(a, 'c.json'), { spans: true })).toEqual(configOutcome(() => parseConfig(text, 'c.json'), { spans: true }));
  });

  it('the settings read ahead from it are its string\'s', () => {
    const text = JSON.stringify({ interfaces: [{ name: 'mup0' }], settings: { max_policies: 2000, max_sessions: 3000 }, policies: [] });
    const s = peekSettings(asciiJson(Buffer.from(text))!);
    expect(s).toBeDefined();
    expect(s).toEqual(peekSettings(text));
  });
});
