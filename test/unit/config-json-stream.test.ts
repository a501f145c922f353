/**
 * A JSON config read streamed (jsonRulesAsRead in src/config/load.ts): the
 * top-level object member by member, each rule list item by item, each item
 * JSON.parse'd from its own text and read into its rule at once. Held to
 * the whole read (JSON.parse's tree, then the rules: parseConfigReadWhole)
 * on hand-written and generated texts: the same config, warnings and
 * errors. And the items' places are recorded, as the block YAML reader's
 * are, so that a reload keeps the rules whose text did not change.
 */
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors.js';
import { itemSpansOf, parseConfig, parseConfigReadWhole } from '../../src/config/load.js';
import { sameText } from '../../src/config/parse-pieces.js';
import { xorshift32 } from '../helpers/rng.js';

const FILE = 'test.json';
type Obj = Record<string, unknown>;

const policy = (i: number, o: Obj = {}): Obj => ({ match: `10.${i >> 8}.${i & 255}.0/24`, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64', ...o });
const localsid = (i: number, o: Obj = {}): Obj => ({ sid: `2001:db8:${(i + 16).toString(16)}::/48`, src_prefix_len: 64, ...o });
const session = (i: number, o: Obj = {}): Obj => ({ ue: `10.60.${i >> 8}.${i & 255}/32`, teid: i + 1, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64', ...o });

/** A config or the error it gets: the fields a reader decides, warnings as text. */
function outcome(read: () => ReturnType<typeof parseConfig>): unknown {
  try {
    const c = read();
    return { ...c, warnings: c.warnings?.map((w) => `${w.path}: ${w.reason} (line ${w.line ?? '-'})`) };
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    return `${e.path}: ${e.reason} (line ${e.line ?? '-'})`;
  }
}

function same(text: string): unknown {
  const streamed = outcome(() => parseConfig(text, FILE));
  expect(streamed).toEqual(outcome(() => parseConfigReadWhole(text, FILE)));
  return streamed;
}

describe('a JSON config read streamed, held to the whole read', () => {
  const full = { settings: { forwarding: 'tx', max_sessions: 100 }, interfaces: [{ name: 'mup0' }], policies: [policy(1), policy(2, { name: 'p2' })], localsids: [localsid(1)], sessions: [session(1), session(2)] };

  it.each([
    ['compact', JSON.stringify(full)],
    ['indented', JSON.stringify(full, null, 2)],
    ['tabs and CRLF', JSON.stringify(full, null, '\t').replace(/\n/g, '\r\n')],
    ['lists empty', JSON.stringify({ policies: [], localsids: [], sessions: [] })],
    ['an empty object', '{}'],
    ['an empty object, spaced', ' \n{ \n}\n '],
    ['sections in another order', JSON.stringify({ sessions: full.sessions, localsids: full.localsids, policies: full.policies, settings: full.settings })],
    ['escaped keys and values', '{"p\\u006flicies": [{"match": "10.0.0.0\\/24", "sr_prefix": "2001:db8:1::\\u002f48", "src_prefix": "2001:db8:ff::/64", "name": "p\\u0031"}]}'],
    ['nested lists and objects in an item (segments)', JSON.stringify({ policies: [policy(1, { segments: ['2001:db8:5::1', '2001:db8:6::1'] })] })],
    ['numbers in exponent form', '{"settings": {"max_policies": 1e3}, "policies": [' + JSON.stringify(policy(1)) + ']}'],
  ])('%s: the same config', (_what, text) => {
    const c = same(text);
    expect(typeof c).not.toBe('string');
  });

  it.each([
    ['a name with a quote (refused)', '{"policies": [{"match": "10.0.0.0/24", "sr_prefix": "2001:db8:1::/48", "src_prefix": "2001:db8:ff::/64", "name": "a\\"b"}]}'],
    ['a name with braces and brackets (refused)', JSON.stringify({ policies: [policy(1, { name: 'a}b]c{' }), policy(2)] })],
    ['a key twice at the top', '{"policies": [], "policies": []}'],
    ['a key twice in an item', '{"policies": [{"match": "10.0.0.0/24", "match": "10.1.0.0/24"}]}'],
    ['a key twice in an item, one escaped', '{"policies": [\n {"match": "10.0.0.0/24", "m\\u0061tch": "10.1.0.0/24"}]}'],
    ['a key twice in settings', '{"settings": {"forwarding": "tx", "forwarding": "fib"}}'],
    ['a trailing comma in a list', `{"policies": [${JSON.stringify(policy(1))},]}`],
    ['a trailing comma at the top', '{"policies": [],}'],
    ['a missing comma between items', `{"policies": [${JSON.stringify(policy(1))} ${JSON.stringify(policy(2))}]}`],
    ['an item cut short', '{"policies": [{"match": "10.0.0.0/24"'],
    ['text after the object', '{"policies": []} {}'],
    ['an unclosed string', '{"policies": [{"match": "10.0.0.0/24}]}'],
    ['an item that is not a mapping', `{"policies": [${JSON.stringify(policy(1))}, "p", 3, null, [1]]}`],
    ['a list that is not a list', '{"policies": {"match": "10.0.0.0/24"}}'],
    ['a list that is null', '{"policies": null, "sessions": 7}'],
    ['a refused policy after good ones', JSON.stringify({ policies: [policy(1), policy(2), policy(3, { sr_prefix: 'q' })] })],
    ['warnings (host bits) then a refused session', JSON.stringify({ policies: [policy(1, { match: '10.0.1.1/24' })], sessions: [session(1, { ue: 'z' })] })],
    ['a duplicate policy', JSON.stringify({ policies: [policy(1), policy(1)] })],
    ['an unknown top-level key', JSON.stringify({ policies: [policy(1)], polices: [] })],
    ['a raw tab in a top-level key (not JSON)', '{"poli\tcies": []}'],
    ['a raw tab in an item\'s key (not JSON)', '{"policies": [{"ma\tch": "10.0.0.0/24"}]}'],
    ['a __proto__ key at the top', '{"__proto__": {"policies": []}, "policies": []}'],
    ['more sessions than max_sessions', JSON.stringify({ settings: { max_sessions: 1 }, sessions: [session(1), session(2)] })],
  ])('%s: the same outcome', (_what, text) => {
    same(text);
  });

  // Flat items (plain keys, string or bare values) are read in runs, each run JSON.parse'd at once (FlatRuns).
  const many = (n: number, at: (i: number) => string | undefined = () => undefined): string =>
    `{"settings": {"max_sessions": ${n + 10}}, "sessions": [${Array.from({ length: n }, (_, i) => at(i) ?? JSON.stringify(session(i))).join(',\n')}]}`;
  it.each([
    ['2,500 flat items (three runs)', many(2500)],
    ['non-flat items between flat ones (a list value, an escape)', many(2500, (i) => (i % 700 === 5 ? JSON.stringify(session(i, { name: `s\u00e9${i}` })).replace('é', '\\u00e9') : i % 900 === 7 ? JSON.stringify({ ...session(i), src_prefix: undefined, qfi: [9] }) : undefined))],
    ['a bare token that is not JSON in a run (the run is read item by item)', many(2500, (i) => (i === 1500 ? JSON.stringify(session(i)).replace('"qfi":9', '"qfi":tru') : undefined))],
    ['a number JSON refuses (leading zero) in a run', many(1100, (i) => (i === 1030 ? JSON.stringify(session(i)).replace('"qfi":9', '"qfi":09') : undefined))],
    ['numbers in other forms in a run', many(40, (i) => (i % 3 === 0 ? JSON.stringify(session(i)).replace('"qfi":9', ['"qfi":9.0', '"qfi":0.9e1', '"qfi":9E0'][i % 3 === 0 ? (i / 3) % 3 : 0]!) : undefined))],
    ['a key twice in the 2,000th item', many(2500, (i) => (i === 1999 ? JSON.stringify(session(i)).replace('"qfi":9', '"qfi":9,"qfi":8') : undefined))],
    ['a refused session in the second run', many(2500, (i) => (i === 1300 ? JSON.stringify(session(i, { ue: '10.60.0.1/33' })) : undefined))],
    ['not ASCII (read item by item)', many(30, (i) => (i === 20 ? JSON.stringify(session(i, { name: 'séance' })) : undefined))],
    ['an item of 70 keys (past what a flat item holds)', `{"policies": [${JSON.stringify(Object.fromEntries(Array.from({ length: 70 }, (_, i) => [`k${i}`, i])))}]}`],
    ['true, false and null as values in a run', many(30, (i) => (i === 3 ? JSON.stringify(session(i, { rqi: true })) : i === 4 ? JSON.stringify(session(i, { rqi: false })) : i === 5 ? JSON.stringify(session(i, { name: null })) : undefined))],
  ])('%s: the same outcome', (_what, text) => {
    same(text);
  });

  it('generated texts (random spacing, members and item kinds): the same outcome each time', () => {
    const r = xorshift32(19);
    const space = (): string => [' ', '', '\n', '\t', '\r\n  '][r() % 5]!;
    const value = (v: unknown): string => {
      if (Array.isArray(v)) return `[${space()}${v.map((x) => `${value(x)}${space()}`).join(`,${space()}`)}]`;
      if (v !== null && typeof v === 'object') return `{${space()}${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}${space()}:${space()}${value(x)}`).join(`,${space()}`)}${space()}}`;
      return JSON.stringify(v);
    };
    for (let n = 0; n < 200; n++) {
      const o: Obj = {};
      const members: [string, () => unknown][] = [
        ['settings', () => ({ max_policies: 1 + (r() % 8), max_sessions: 1 + (r() % 8) })],
        ['policies', () => Array.from({ length: r() % 6 }, (_, i) => (r() % 9 === 0 ? 'x' : policy(r() % 3 === 0 ? 7 : i, r() % 7 === 0 ? { match: '10.0.0.1/24' } : {})))],
        ['localsids', () => Array.from({ length: r() % 3 }, (_, i) => localsid(i))],
        ['sessions', () => Array.from({ length: r() % 4 }, (_, i) => session(i, r() % 11 === 0 ? { teid: 'q' } : {}))],
        ['interfaces', () => [{ name: 'mup0' }]],
      ];
      for (const [k, make] of members) if (r() % 3 !== 0) o[k] = make();
      let text = `${space()}${value(o)}${space()}`;
      // Now and then a defect: a key given twice in an item, a comma too many.
      if (r() % 10 === 0) text = text.replace('"sr_prefix"', '"match": "10.9.9.0/24", "sr_prefix"');
      if (r() % 10 === 0) text = text.replace(/\]/, ',]');
      same(text);
    }
  });
});

describe('where each rule of a JSON list was (item spans)', () => {
  const o = { settings: { max_sessions: 10 }, policies: [policy(1), policy(2), policy(3)], sessions: [session(1), session(2)] };

  it.each([
    ['compact', JSON.stringify(o)],
    ['indented', JSON.stringify(o, null, 2)],
  ])('%s: each item text read alone is that item, and the spans meet end to start', (_what, text) => {
    const spans = itemSpansOf(parseConfig(text, FILE));
    // Before: a JSON file had none (JSON.parse gives no places), so a reload sent every rule across again.
    expect(spans?.policies).toHaveLength(o.policies.length + 1);
    expect(spans?.sessions).toHaveLength(o.sessions.length + 1);
    for (const [k, list] of [['policies', o.policies], ['sessions', o.sessions]] as const) {
      const s = spans![k]!;
      list.forEach((item, i) => {
        // From the end of the item before (its comma and spacing), to the end of its own text.
        const alone = text.slice(s[i]!, s[i + 1]!).replace(/^\s*,/, '');
        expect(JSON.parse(alone)).toEqual(item);
      });
    }
    expect(itemSpansOf(parseConfigReadWhole(text, FILE))).toBeUndefined();
  });

  it('a reload of an edited JSON file finds every other rule the same at the same place', () => {
    const before = JSON.stringify({ policies: Array.from({ length: 50 }, (_, i) => policy(i)) }, null, 2);
    const after = before.replace('"10.0.20.0/24"', '"10.0.200.0/24"');
    expect(after).not.toBe(before);
    const same = sameText(after, itemSpansOf(parseConfig(after, FILE))?.policies, before, itemSpansOf(parseConfig(before, FILE))?.policies);
    expect(same).toHaveLength(50);
    expect([...same].map((v, i) => (v === 1 ? -1 : i)).filter((i) => i >= 0)).toEqual([20]);
  });
});
