/**
 * Differential fuzz of the fast block-YAML reader (src/config/block-yaml.ts)
 * against js-yaml with the core schema, as parseConfig calls it: for every
 * document the reader either declines (NOT_BLOCK) or gives exactly js-yaml's
 * value, and only for a text js-yaml reads without an error or a warning.
 * The documents come from a seeded generator of config-like block YAML and
 * its near-misses, and from random line edits of the repo's configs and of a
 * generated config of the bench's shape. Divergences found so far are kept
 * as fixed regression rows.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import jsyaml from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { NOT_BLOCK, parseBlockYaml } from '../../src/config/block-yaml.js';
import { xorshift32 } from '../helpers/rng.js';

/**
 * BLOCK_YAML_FUZZ_SCALE multiplies the document counts and BLOCK_YAML_FUZZ_SEED
 * moves the seeds, for a longer hunt by hand; the defaults are what CI runs.
 */
const SCALE = Number(process.env.BLOCK_YAML_FUZZ_SCALE ?? 1);
const SEED = Number(process.env.BLOCK_YAML_FUZZ_SEED ?? 0);

type Outcome = { kind: 'value'; value: unknown; warnings: number } | { kind: 'error' };

/** js-yaml as parseConfig calls it (core schema, warnings collected). */
function reference(t: string): Outcome {
  let warnings = 0;
  try {
    const value = jsyaml.load(t, { schema: jsyaml.CORE_SCHEMA, onWarning: () => warnings++ });
    return { kind: 'value', value, warnings };
  } catch {
    return { kind: 'error' };
  }
}

/** Why the fast reader's answer for `t` is wrong, or undefined if it declined or agrees. */
function divergence(t: string): string | undefined {
  let got: unknown;
  try {
    got = parseBlockYaml(t);
  } catch (e) {
    // Never: parseConfig would pass the exception on, not word a ConfigError.
    return `reader threw ${String(e)}`;
  }
  if (got === NOT_BLOCK) return undefined;
  const ref = reference(t);
  if (ref.kind === 'error') return 'reader gave a value where js-yaml throws';
  if (ref.warnings > 0) return 'reader gave a value where js-yaml warns';
  if (!isDeepStrictEqual(got, ref.value)) return `reader ${show(got)} != js-yaml ${show(ref.value)}`;
  return undefined;
}

/** The smallest text (by dropping lines, then characters) that still diverges. */
function shrink(t: string): string {
  let cur = t;
  for (let changed = true; changed; ) {
    changed = false;
    const lines = cur.split('\n');
    for (let i = 0; i < lines.length; i++) {
      const cand = [...lines.slice(0, i), ...lines.slice(i + 1)].join('\n');
      if (divergence(cand) !== undefined) {
        cur = cand;
        changed = true;
        break;
      }
    }
    if (changed) continue;
    for (let i = 0; i < cur.length; i++) {
      const cand = cur.slice(0, i) + cur.slice(i + 1);
      if (divergence(cand) !== undefined) {
        cur = cand;
        changed = true;
        break;
      }
    }
  }
  return cur;
}

class Gen {
  readonly next: () => number;
  /** A document without the near-misses (the reader should read most of them). */
  mild = false;
  constructor(seed: number) {
    this.next = xorshift32(seed);
  }
  int(n: number): number {
    return this.next() % n;
  }
  chance(p: number): boolean {
    return this.next() / 0x1_0000_0000 < p;
  }
  pick<T>(a: readonly T[]): T {
    return a[this.int(a.length)]!;
  }
}

const KEYS = ['name', 'match', 'sr_prefix', 'src_prefix', 'sid', 'settings', 'policies', 'localsids', 'interfaces', 'xdp', 'max_policies', 'a', 'b', 'K', '_x', 'k9'];
const NASTY_KEYS = [
  'null', 'Null', 'NULL', 'true', 'True', 'TRUE', 'false', 'False', 'FALSE', 'yes', 'on', 'y', 'n', 'nan', 'inf', '_1', 'e1',
  'a b', 'a-b', '1', '0x1F', '.5', '-a', '~', '__proto__', 'constructor', 'toString', 'hasOwnProperty', 'é', 'a\u00a0', 'ключ', 'a.b',
];
const SCALARS = [
  '0x1F', '0X1f', '0o17', '0O17', '0b101', '1_000', '0x_1', '.5', '-.5', '+.5', '1e3', '1E3', '1.2e-3', '-1e+3', '1.', '1.2.3',
  '.inf', '.Inf', '.INF', '-.Inf', '+.inf', '.NaN', '.nan', '.NAN', 'NaN', 'inf', '~', 'null', 'Null', 'NULL', 'nULL', 'nul',
  'true', 'True', 'TRUE', 'tRue', 'false', 'False', 'FALSE', 'yes', 'Yes', 'no', 'on', 'off', 'y', 'n', '010', '0', '-0', '+0',
  '007', '08', '09', '0.0', '-0.0', '123456789012345678901', '9007199254740993', '1_0.5', '_1', '1_', '+', '-', '.', '..', '...',
  '---', '--', '-1', '--1', '+-1', '-a', '.a', '.', '10.0.0.0/24', '192.0.2.0/24', '2001:db8::/48', '2001:db8:ffff::/64', '::1', '::',
  '::/0', 'fe80::1%eth0', '1:30', '190:20:30', '12:30:00.5', '2001-12-14', 'eth1', 'native', 'generic', 'p0', 'a#b', 'a # b',
  'a:b', 'a: b', 'a:', ':a', 'a - b', 'a -b', 'x- y', '@x', '`x', '%x', '&a x', '*a', '!t x', '!!str 1', '|', '>', "'q'", '"q"',
  '[1, 2]', '{a: 1}', 'a, b', 'x]', 'x}', 'x[', 'x{', 'x,y', '?x', '? x', 'é', 'ünï', '日本', 'a\u00a0', '\u00a0a', 'a\u3000',
  'a\u2003b', 'x\ufeff', '\ufeffx', 'a\u0085b', 'a\u2028b', '😀', 'a\\b', 'a"b', "a'b", '#', ' #x', '<<', '=', 'a  b', 'a\tb',
];
/** Characters spliced into lines by the mutators. */
const SPLICE = [':', ': ', ' #', '#', '- ', '-', ' ', '  ', '\t', '\r', '.', "'", '"', '[', '{', '&', '*', '!', '|', '>', '?', ',',
  '\u00a0', '\u3000', '\ufeff', '\u0085', '\u2028', 'é', '😀', '\u0000', '\u001b', '0x', '~', '---', '...', '%'];

/** The scalars the reader takes after "k: " (chosen by the reader itself: only a generator's input). */
const MILD_SCALARS = SCALARS.filter((s) => parseBlockYaml(`k: ${s}\n`) !== NOT_BLOCK);

function randomKey(g: Gen): string {
  if (g.mild) return g.pick(KEYS);
  if (g.chance(0.08)) return g.pick(NASTY_KEYS);
  if (g.chance(0.01)) return 'k'.repeat(900 + g.int(300));
  return g.pick(KEYS);
}

function randomScalar(g: Gen): string {
  const r = g.int(10);
  if (g.mild && r < 6) return g.pick(MILD_SCALARS);
  if (r < 5) return g.pick(SCALARS);
  if (r < 6) return `${g.pick(SCALARS)}${g.pick(SPLICE)}${g.pick(SCALARS)}`;
  if (r < 7) return `${g.int(256)}.${g.int(256)}.${g.int(256)}.0/${g.int(33)}`;
  if (r < 8) return `2001:db8:${g.int(0x10000).toString(16)}::${g.chance(0.5) ? `/${g.int(129)}` : ''}`;
  if (r < 9) return `${g.chance(0.5) ? '-' : ''}${g.int(1_000_000)}${g.chance(0.3) ? `.${g.int(100)}` : ''}`;
  if (g.chance(0.05)) return 'v'.repeat(2000 + g.int(4000));
  return g.pick(KEYS) + g.int(100);
}

/** A comment, blank or whitespace-only line at a random indent, or nothing. */
function noise(g: Gen, out: string[]): void {
  if (!g.chance(0.15)) return;
  const r = g.int(g.mild ? 4 : 6);
  if (r === 0) out.push('');
  else if (r === 1) out.push(' '.repeat(g.int(7)));
  else if (r === 2) out.push(`${' '.repeat(g.int(7))}# ${g.pick(SCALARS)}`);
  else if (r === 3) out.push(`${' '.repeat(g.int(7))}#`);
  else if (r === 4) out.push(g.pick(['---', '...', '--- # doc', '... ', '---a', '....']));
  else out.push(`${' '.repeat(g.int(7))}${g.pick(['- ', '-', ''])}${g.pick(SCALARS)}`);
}

/** ' # comment' or trailing spaces, sometimes. */
function tail(g: Gen): string {
  const r = g.int(10);
  if (r === 0) return ` # ${g.pick(SCALARS)}`;
  if (r === 1) return ' '.repeat(1 + g.int(3));
  if (r === 2) return `${' '.repeat(1 + g.int(3))}#`;
  if (r === 3) return g.pick(g.mild ? ['#c', ' #', ' ## c'] : ['#c', ' #', '\t# c', ' ## c']);
  return '';
}

function emitMap(g: Gen, out: string[], indent: number, depth: number, first?: string): void {
  const n = 1 + g.int(4);
  const seen = new Set<string>();
  for (let i = 0; i < n; i++) {
    noise(g, out);
    const pad = i === 0 && first !== undefined ? first : ' '.repeat(indent);
    let key = randomKey(g);
    if (g.mild) {
      while (seen.has(key)) key = randomKey(g);
      seen.add(key);
    }
    const r = depth > 3 ? 0 : g.int(6);
    if (r <= 2) {
      out.push(`${pad}${key}:${!g.mild && g.chance(0.03) ? '' : ' '.repeat(1 + (g.chance(0.1) ? g.int(3) : 0))}${randomScalar(g)}${tail(g)}`);
    } else if (r === 3) {
      out.push(`${pad}${key}:${tail(g)}`); // null, or a nested node
      if (g.chance(0.5)) emitNode(g, out, indent + 1 + g.int(4), depth + 1);
    } else if (r === 4) {
      out.push(`${pad}${key}:${tail(g)}`);
      emitMap(g, out, indent + 1 + g.int(4), depth + 1);
    } else {
      out.push(`${pad}${key}:${tail(g)}`);
      // A sequence at the key's own indent, or deeper.
      emitSeq(g, out, g.chance(0.5) ? indent : indent + 1 + g.int(4), depth + 1);
    }
  }
}

function emitSeq(g: Gen, out: string[], indent: number, depth: number): void {
  const n = 1 + g.int(4);
  for (let i = 0; i < n; i++) {
    noise(g, out);
    const gap = g.chance(0.8) ? 1 : g.chance(0.8) || g.mild ? 2 + g.int(3) : 0;
    const head = `${' '.repeat(indent)}-${' '.repeat(gap)}`;
    const r = depth > 3 ? 0 : g.int(g.mild ? 4 : 5);
    if (r <= 1) out.push(`${head}${randomScalar(g)}${tail(g)}`);
    else if (r <= 3) emitMap(g, out, indent + 1 + gap, depth + 1, head); // "- key: v" then its following keys
    else {
      out.push(`${' '.repeat(indent)}-${tail(g)}`);
      emitNode(g, out, indent + 1 + g.int(3), depth + 1);
    }
  }
}

function emitNode(g: Gen, out: string[], indent: number, depth: number): void {
  if (g.chance(0.5)) emitMap(g, out, indent, depth);
  else emitSeq(g, out, indent, depth);
}

/** Random line edits: delete, duplicate, swap, re-indent, splice in a nasty string, join. */
function mutate(g: Gen, text: string): string {
  const lines = text.split('\n');
  const edits = 1 + g.int(3);
  for (let e = 0; e < edits && lines.length > 0; e++) {
    const i = g.int(lines.length);
    const line = lines[i]!;
    switch (g.int(8)) {
      case 0:
        lines.splice(i, 1);
        break;
      case 1:
        lines.splice(i, 0, line);
        break;
      case 2: {
        const j = g.int(lines.length);
        [lines[i], lines[j]] = [lines[j]!, line];
        break;
      }
      case 3:
        lines[i] = g.chance(0.5) ? ' '.repeat(1 + g.int(3)) + line : line.replace(/^ {1,3}/, '');
        break;
      case 4:
      case 5: {
        const at = g.int(line.length + 1);
        lines[i] = line.slice(0, at) + g.pick(SPLICE) + line.slice(at + (g.chance(0.3) ? 1 : 0));
        break;
      }
      case 6:
        lines[i] = `${line}${g.pick([' ', '  ', ' # c', '\r', ':', ' -'])}`;
        break;
      default:
        if (i + 1 < lines.length) lines.splice(i, 2, `${line} ${lines[i + 1]!.trimStart()}`);
    }
  }
  return lines.join('\n');
}

function generated(g: Gen): string {
  const out: string[] = [];
  g.mild = g.chance(0.5);
  if (!g.mild && g.chance(0.05)) out.push(g.pick(['---', '--- ', '# head', '%YAML 1.2\n---']));
  if (g.chance(0.15)) emitSeq(g, out, 0, 0);
  else emitMap(g, out, 0, 0);
  if (!g.mild && g.chance(0.05)) out.push(g.pick(['...', '---', '--- ', '... # end']));
  let text = out.join('\n') + (g.chance(0.8) ? '\n' : '');
  if (g.mild) return text;
  if (g.chance(0.3)) text = mutate(g, text);
  if (g.chance(0.02)) text = text.replace(/\n/g, '\r\n');
  return text;
}

/** Strings js-yaml's dump writes plain (unquoted), which the reader takes. */
const DUMP_PLAIN = MILD_SCALARS.filter((s) => !/['"]/.test(jsyaml.dump(s, { schema: jsyaml.CORE_SCHEMA })));

/** A random value of mappings, sequences and scalars, to be written by js-yaml's dump. */
function randomValue(g: Gen, depth: number, inSeq = false): unknown {
  const r = depth > 5 ? 0 : g.int(4);
  if (r === 0 || (r === 1 && inSeq && g.mild)) {
    const v = g.int(8);
    if (v === 0) return null;
    if (v === 1) return g.chance(0.5);
    if (v === 2) return g.chance(0.5) ? g.int(100_000) - 50_000 : (g.int(2_000_001) - 1_000_000) / 1000;
    if (v === 3) return `2001:db8:${g.int(0x10000).toString(16)}::/${g.int(129)}`;
    return g.mild ? g.pick(DUMP_PLAIN) : randomScalar(g);
  }
  // Empty ones (dumped as [] and {}) and sequences in sequences ("- - ") only in the
  // other half: the reader declines flow style and "- - ".
  if (r === 1) return Array.from({ length: g.int(g.mild ? 4 : 5) + (g.mild ? 1 : 0) }, () => randomValue(g, depth + 1, true));
  const o: Record<string, unknown> = {};
  for (let i = g.int(5) + (g.mild ? 1 : 0); i > 0; i--) o[g.mild || g.chance(0.9) ? g.pick(KEYS) : g.pick(NASTY_KEYS)] = randomValue(g, depth + 1);
  return o;
}

/** js-yaml's own block output of a random value: indents 1 to 4, sequences at the key's indent or deeper. */
function dumped(g: Gen): string {
  g.mild = g.chance(0.7);
  const v = randomValue(g, 0);
  const top = typeof v === 'object' && v !== null ? v : { k: v };
  return jsyaml.dump(top, { schema: jsyaml.CORE_SCHEMA, indent: 1 + g.int(4), noArrayIndent: g.chance(0.5), lineWidth: -1 });
}

/** A config of the bench's shape (block mappings and sequences, comments, IPv6 prefixes). */
function benchShaped(n: number): string {
  const out = ['# generated', 'interfaces:', '  - name: eth1', '    xdp: native', 'settings:', '  max_policies: 1024', '  max_localsids: 1024', '', 'policies:'];
  for (let i = 0; i < n; i++) out.push(`  - name: p${i}`, `    match: 10.${i >> 8}.${i & 255}.0/24`, `    sr_prefix: 2001:db9:${(i & 0xff).toString(16)}::/48`, '    src_prefix: 2001:db8:ffff::/64   # a comment');
  out.push('localsids:');
  for (let i = 0; i < n; i++) out.push(`- name: l${i}`, `  sid: 2001:db8:${i.toString(16)}::/48`, '  src_prefix_len: 64');
  return `${out.join('\n')}\n`;
}

/**
 * A config made something the reader reads (as a base for edits): flow
 * sequences ([a, b]) written out as block ones, quotes taken off.
 */
function block(t: string): string {
  return t
    .replace(/^( *)(\w+): \[([^\]\n]*)\](.*)$/gm, (_m, pad: string, k: string, items: string, rest: string) =>
      [`${pad}${k}:${rest}`, ...items.split(',').filter((s) => s.trim() !== '').map((s) => `${pad}  - ${s.trim()}`)].join('\n'),
    )
    .replace(/"([^"\n]*)"|'([^'\n]*)'/g, '$1$2');
}

/** Runs `count` documents from `make`, returns how many the reader read, and fails with the shrunk divergences. */
function campaign(count: number, make: (g: Gen) => string, seed: number): { read: number; declined: number } {
  const g = new Gen(seed);
  const found = new Map<string, string>();
  let read = 0;
  for (let i = 0; i < count; i++) {
    const t = make(g);
    const why = divergence(t);
    if (why !== undefined) {
      const small = shrink(t);
      found.set(small, divergence(small)!);
      if (found.size >= 5) break;
    } else if (parseBlockYaml(t) !== NOT_BLOCK) read++;
  }
  expect([...found].map(([t, why]) => `${show(t)}: ${why}`)).toEqual([]);
  return { read, declined: count - read };
}

/** JSON with every non-ASCII character escaped, for messages. */
function show(v: unknown): string {
  return (JSON.stringify(v) ?? String(v)).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * Containers nested `depth` deep with `leaf` at the bottom: mappings
 * ("a:" one column further in each line), or mappings and compact
 * sequences taking turns ("- a:" two columns in each line).
 */
function nested(shape: 'map' | 'alternate', depth: number, leaf: string): string {
  const out: string[] = [];
  if (shape === 'map') for (let i = 0; i < depth; i++) out.push(`${' '.repeat(i)}a:${i === depth - 1 ? ` ${leaf}` : ''}`);
  else {
    out.push('a:');
    for (let i = 1; i < depth; i += 2) out.push(`${' '.repeat(i - 1)}- a:${i + 2 >= depth ? ` ${leaf}` : ''}`);
  }
  return `${out.join('\n')}\n`;
}

/** Shrunk divergences the fuzz found, each fixed in the reader: it must now agree or decline. */
const REGRESSIONS: readonly string[] = [
  // String#trim cut non-ASCII white space that js-yaml keeps as the scalar (or part of it).
  's: \u00a0\n', 'k: \ufeff\n', '- \u3000\n', 'a: x\u2003\n', 'a: \u00a0x # c\n',
  // A key that resolves to null or a bool js-yaml stores as String(value): "Null" -> "null", "TRUE" -> "true".
  'True:\n', 'Null: 1\n', 'a:\n  FALSE: x\n', '- NULL: 1\n  b: 2\n', 'null: 1\nNull: 2\n',
  // An item of only a comment: js-yaml takes the next, less indented "- " into the inner sequence.
  'k:\n - e:\n   - #\n - #', 'k:\n - e:\n   - # c\n - 2\n', '- #\n- 1\n',
  // Nesting past js-yaml's maxDepth (100): read where js-yaml throws, and some thousands deep (8,000 in vitest's
  // worker) a RangeError from the reader's recursion (stack overflow), which parseConfig would not have worded.
  nested('map', 101, 'x'), nested('alternate', 12_000, '1'),
];

/** Line shapes for the small exhaustive grammar: every indent of each, every order, up to a few lines. */
const SHAPES = ['a:', 'b: 1', 'a: x', '- 1', '-', '- a:', '- b: 2', '- #', 'a: #', '#', '', '- - 1', 'a', '---', '...', '-  c: 3', 'True: 1', 'a: b: c'];

/** All `lines`-line documents over SHAPES at indents 0..3 (the first line at 0), or a sample of them (all three-line ones with BLOCK_YAML_FUZZ_SCALE set). */
function small(lines: number, g?: Gen, count = 0): string[] {
  const variants = SHAPES.flatMap((s) => [0, 1, 2, 3].map((i) => ' '.repeat(i) + s));
  const out: string[] = [];
  if (g !== undefined) {
    // Sampled: mostly the indents a config uses, so that enough of them are read.
    const line = (): string => ' '.repeat(g.pick([0, 0, 0, 1, 2, 2, 2, 3, 4])) + g.pick(SHAPES);
    for (let k = 0; k < count; k++) out.push(Array.from({ length: lines }, (_, i) => (i === 0 ? g.pick(SHAPES) : line())).join('\n') + '\n');
    return out;
  }
  const rec = (acc: string[]): void => {
    if (acc.length === lines) {
      out.push(acc.join('\n') + '\n');
      return;
    }
    for (const v of acc.length === 0 ? SHAPES : variants) rec([...acc, v]);
  };
  rec([]);
  return out;
}

describe('block YAML fast reader, differential fuzz against js-yaml (core schema)', () => {
  it("nesting from 1 to 130 deep, across js-yaml's maxDepth", () => {
    let read = 0;
    for (let d = 1; d <= 130; d++) {
      for (const t of [nested('map', d, 'x'), nested('map', d, ''), nested('alternate', d, '1'), `${nested('alternate', d, '')}b: 2\n`]) {
        expect(divergence(t), `${d} deep`).toBeUndefined();
        if (parseBlockYaml(t) !== NOT_BLOCK) read++;
      }
    }
    expect(read).toBeGreaterThan(100);
  });

  it('every document of up to two lines, and a sample of three to five, over a small grammar of line shapes', () => {
    const g = new Gen(0x3_11e5 + SEED);
    const docs = [small(1), small(2), process.env.BLOCK_YAML_FUZZ_SCALE === undefined ? [] : small(3), ...[3, 4, 5].map((n) => small(n, g, 4000 * SCALE))].flat();
    let k = 0;
    const { read } = campaign(docs.length, () => docs[k++]!, 0);
    expect(read).toBeGreaterThan(250);
  });

  it('found divergences, fixed', () => {
    for (const t of REGRESSIONS) expect(divergence(t), show(t.length > 100 ? `${t.slice(0, 100)}...` : t)).toBeUndefined();
  });

  it('generated config-like documents and near-misses', () => {
    const { read, declined } = campaign(20000 * SCALE, generated, 0x19_b10c + SEED);
    // The generator is not so nasty that the reader never reads.
    expect(read).toBeGreaterThan(5000 * SCALE);
    expect(declined).toBeGreaterThan(5000 * SCALE);
  });

  it("js-yaml's own dump of random values, as written and with line edits", () => {
    const { read } = campaign(10000 * SCALE, (g) => (g.chance(0.7) ? dumped(g) : mutate(g, dumped(g))), 0xd0_19 + SEED);
    expect(read).toBeGreaterThan(2500 * SCALE);
  });

  it("random line edits of the repo's configs and of a bench-shaped config", () => {
    const dir = join(import.meta.dirname, '../../config');
    const bases = readdirSync(dir)
      .filter((f) => f.endsWith('.yaml'))
      .flatMap((f) => {
        const t = readFileSync(join(dir, f), 'utf8');
        return [t, block(t)];
      });
    for (const b of bases.filter((_, i) => i % 2 === 1)) expect(parseBlockYaml(b), show(b)).not.toBe(NOT_BLOCK);
    bases.push(benchShaped(40));
    for (const b of bases) expect(divergence(b)).toBeUndefined();
    const { read } = campaign(10000 * SCALE, (g) => mutate(g, g.pick(bases)), 0x5eed_19 + SEED);
    expect(read).toBeGreaterThan(1500 * SCALE);
  });
});
