/**
 * Where each rule of a list was in its text (ItemHook in
 * src/config/block-yaml.ts, itemSpansOf in src/config/load.ts): a reload
 * takes the running rule wherever its item's text is the same at the same
 * place (src/config/parse-pieces.ts), so a span must hold everything its
 * item was read from and nothing of another item. Checked on the repo's
 * configs and on generated lists with comments, blank lines, nested
 * mappings and lists: every item's text read alone is that item, the spans
 * meet end to start, and a list the block reader does not read has none.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import jsyaml from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { NOT_BLOCK, parseBlockYaml } from '../../src/config/block-yaml.js';
import { itemSpansOf, parseConfig, parseConfigReadWhole } from '../../src/config/load.js';
import { sameText } from '../../src/config/parse-pieces.js';
import { xorshift32 } from '../helpers/rng.js';

type Spans = Record<string, Array<[number, number]>>;

/** The block reader's items of each top-level list, with their spans. */
function read(text: string): { top: unknown; spans: Spans } {
  const spans: Spans = {};
  const top = parseBlockYaml(text, (key) => (item, _i, start, end) => {
    (spans[key] ??= []).push([start, end]);
    return item;
  });
  return { top, spans };
}

/** Each item's text, read alone under its key, is that item; the spans meet end to start and cover the list. */
function checkSpans(text: string): number {
  const { top, spans } = read(text);
  if (top === NOT_BLOCK) return 0;
  let n = 0;
  for (const [key, list] of Object.entries(spans)) {
    const items = (top as Record<string, unknown[]>)[key]!;
    expect(list).toHaveLength(items.length);
    list.forEach(([start, end], i) => {
      if (i > 0) expect(start, `${key}[${i}] starts where ${key}[${i - 1}] ends`).toBe(list[i - 1]![1]);
      const alone = text.slice(start, end);
      expect(alone, `${key}[${i}] starts with its "- " line`).toMatch(/^ *- /);
      expect((jsyaml.load(`${key}:\n${alone}`, { schema: jsyaml.CORE_SCHEMA }) as Record<string, unknown[]>)[key], `${key}[${i}] read alone`).toEqual([items[i]]);
      n++;
    });
  }
  return n;
}

const SCALARS = ['10.0.0.0/24', '2001:db8::/48', '7', '0x1f', 'true', 'name with spaces', '~', '-1'];

/** A generated config-like document: top-level lists of mappings (some nested) or scalars, with comments and blank lines. */
function generated(seed: number): string {
  const r = xorshift32(seed);
  const pick = <T,>(xs: readonly T[]): T => xs[r() % xs.length]!;
  const out: string[] = [];
  const lists = 1 + (r() % 3);
  for (let l = 0; l < lists; l++) {
    const ind = ' '.repeat(r() % 3);
    out.push(pick(['policies:', 'localsids:', 'sessions:', 'other:']).replace(':', `${l}:`));
    if (r() % 3 === 0) out.push('# a comment before the list');
    const items = r() % 6;
    for (let i = 0; i < items; i++) {
      if (r() % 5 === 0) out.push(`${ind}- ${pick(SCALARS)}`);
      else {
        const keys = 1 + (r() % 4);
        for (let k = 0; k < keys; k++) {
          const lead = k === 0 ? `${ind}- ` : `${ind}  `;
          if (r() % 6 === 0) {
            out.push(`${lead}k${k}:`);
            const sub = 1 + (r() % 3);
            const asList = r() % 2 === 0;
            for (let s = 0; s < sub; s++) out.push(asList ? `${ind}    - ${pick(SCALARS)}` : `${ind}    s${s}: ${pick(SCALARS)}`);
          } else out.push(`${lead}k${k}: ${pick(SCALARS)}${r() % 7 === 0 ? ' # why' : ''}`);
          if (r() % 8 === 0) out.push('');
          if (r() % 9 === 0) out.push(`${' '.repeat(r() % 6)}# a comment inside`);
        }
      }
    }
  }
  return `${out.join('\n')}${r() % 2 === 0 ? '\n' : ''}`;
}

describe('item spans', () => {
  it("the repo's configs and one like the bench's: every rule's text read alone is that rule", () => {
    let n = 0;
    // Most of the repo's configs are in flow style (one rule a line, js-yaml's): those have no spans.
    for (const f of readdirSync('config').filter((x) => x.endsWith('.yaml'))) n += checkSpans(readFileSync(join('config', f), 'utf8'));
    const bench = ['settings:', '  max_policies: 65536', 'policies:'];
    for (let i = 0; i < 300; i++) bench.push(`  - name: p${i}`, `    match: 10.${i >> 8}.${i & 255}.0/24`, '    sr_prefix: 2001:db9:1::/48', '    src_prefix: 2001:db8:ffff::/64');
    n += checkSpans(`${bench.join('\n')}\n`);
    expect(n, 'items checked').toBeGreaterThan(300);
  });

  it('generated lists with comments, blank lines, nested mappings and lists, scalars', () => {
    let n = 0;
    let docs = 0;
    for (let seed = 1; seed <= 1500; seed++) {
      const t = generated(seed);
      const items = checkSpans(t);
      n += items;
      if (items > 0) docs++;
    }
    // Not a test of nothing: most documents are read by the block reader, with items.
    expect(docs).toBeGreaterThan(800);
    expect(n).toBeGreaterThan(3000);
  });

  it('a config keeps its rules\' spans (n + 1 offsets a list), not for a file js-yaml reads (nor JSON read whole)', () => {
    const text = 'policies:\n  - { match: 10.0.0.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n';
    expect(itemSpansOf(parseConfig(text))).toBeUndefined(); // flow style: js-yaml's
    const block = ['policies:', '  - match: 10.0.0.0/24', '    sr_prefix: 2001:db8:1::/48', '    src_prefix: 2001:db8:ff::/64', '  # between', '  - match: 10.0.1.0/24', '    sr_prefix: 2001:db8:1::/48', '    src_prefix: 2001:db8:ff::/64', 'localsids:', '  - sid: 2001:db8:e::/48', '    src_prefix_len: 64', ''].join('\n');
    const spans = itemSpansOf(parseConfig(block))!;
    expect([...spans.policies!]).toEqual([block.indexOf('  - match: 10.0.0'), block.indexOf('  - match: 10.0.1'), block.indexOf('localsids:')]);
    expect([...spans.localsids!]).toEqual([block.indexOf('  - sid'), block.length]);
    expect(spans.sessions).toBeUndefined();
    // JSON is read streamed, item by item, with the items' places (test/unit/config-json-stream.test.ts).
    const json = JSON.stringify(jsyaml.load(block));
    expect(itemSpansOf(parseConfig(json))?.policies).toHaveLength(3);
    expect(itemSpansOf(parseConfigReadWhole(json))).toBeUndefined();
  });

  it('sameText: the same text at the same place, and nothing else', () => {
    const a = ['policies:', '  - match: 10.0.0.0/24', '  - match: 10.0.1.0/24', '  - match: 10.0.2.0/24', ''].join('\n');
    const spansOf = (t: string): Uint32Array => {
      const s = read(t).spans['policies']!;
      return Uint32Array.from([...s.map((x) => x[0]), s.at(-1)![1]]);
    };
    const same = (b: string): number[] => [...sameText(b, spansOf(b), a, spansOf(a))];
    expect(same(a)).toEqual([1, 1, 1]);
    expect(same(a.replace('10.0.1.0', '10.0.9.0'))).toEqual([1, 0, 1]);
    // A comment after an item is part of its text; a line moved shifts every place after it.
    expect(same(a.replace('10.0.1.0/24\n', '10.0.1.0/24\n  # note\n'))).toEqual([1, 0, 1]);
    expect(same(a.replace('  - match: 10.0.0.0/24\n', ''))).toEqual([0, 0]);
    // The last item's end moves with what follows the list (here: nothing, then a key).
    expect(same(`${a}settings:\n  max_policies: 1\n`)).toEqual([1, 1, 1]);
    expect(same(a.replace(/\n$/, ''))).toEqual([1, 1, 0]);
    expect([...sameText(a, undefined, a, spansOf(a))]).toEqual([]);
  });
});
