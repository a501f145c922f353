/**
 * The fast block-YAML reader (src/config/block-yaml.ts) gives exactly what
 * js-yaml gives with the core schema, or declines (NOT_BLOCK) and js-yaml
 * reads the text: compared here on the repo's configs, a generated config
 * like the bench's, every kind of plain scalar, and the constructs it
 * leaves to js-yaml (which then words any error, as before).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import jsyaml from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { NOT_BLOCK, parseBlockYaml } from '../../src/config/block-yaml.js';
import { parseConfig } from '../../src/config/load.js';

const core = (t: string): unknown => jsyaml.load(t, { schema: jsyaml.CORE_SCHEMA });

/** Either declines or equals js-yaml's reading (and js-yaml accepts it). */
function same(t: string): 'read' | 'declined' {
  const got = parseBlockYaml(t);
  if (got === NOT_BLOCK) return 'declined';
  expect(got).toStrictEqual(core(t));
  return 'read';
}

describe('block YAML fast reader', () => {
  it('reads a generated config of block mappings and sequences as js-yaml does', () => {
    const out = ['# generated', 'interfaces:', '  - name: eth1', '    xdp: native', 'settings:', '  max_policies: 1024', '  max_localsids: 1024', '', 'policies:'];
    for (let i = 0; i < 300; i++) out.push(`  - name: p${i}`, `    match: 10.${i >> 8}.${i & 255}.0/24`, `    sr_prefix: 2001:db9:${(i & 0xff).toString(16)}::/48`, '    src_prefix: 2001:db8:ffff::/64   # a comment');
    out.push('localsids:');
    for (let i = 0; i < 300; i++) out.push(`- name: l${i}`, `  sid: 2001:db8:${i.toString(16)}::/48`, '  src_prefix_len: 64');
    const text = `${out.join('\n')}\n`;
    expect(same(text)).toBe('read');
    // And the config it makes is the one js-yaml's reading made.
    const c = parseConfig(text, 'x.yaml');
    expect(c.policies).toHaveLength(300);
    expect(c.localsids[299]!.name).toBe('l299');
  });

  it('every config file of the repo: read equal or declined', () => {
    const dir = join(import.meta.dirname, '../../config');
    const files = readdirSync(dir).filter((f) => f.endsWith('.yaml'));
    expect(files.length).toBeGreaterThan(0);
    const how = files.map((f) => same(readFileSync(join(dir, f), 'utf8')));
    expect(how).toContain('read');
  });

  it('resolves plain scalars with the core schema', () => {
    const scalars = [
      '~', 'null', 'Null', 'NULL', 'nul', 'true', 'True', 'TRUE', 'tRUE', 'false', 'no', 'yes', 'on', 'off', 'y', 'n',
      '0', '-0', '+5', '-5', '007', '0x1F', '0X1f', '0o17', '0b101', '1_000', '0x_1', '123456789012345678901',
      '1.5', '-1.5', '.5', '1e3', '1.2e-3', '.inf', '-.Inf', '+.INF', '.nan', '.NaN', '1.', '1.2.3',
      '10.0.0.0/24', '2001:db8::/48', '2001:db8:ffff::/64', '::1', 'fe80::1%eth0', 'p0', 'eth1', 'native',
      'a#b', 'a # b', 'a-b', '-a', '-', 'a:b', 'a: b', 'a:', ':a', '@x', '`x', '%x', '&a x', '*a', '!t x', '|', '>', "'q'", '"q"',
      '[1, 2]', '{a: 1}', 'a, b', 'x]', 'x}', '0x', '0o', '0b', '+', '.', '1:30', '190:20:30', '12:30:00.5',
    ];
    let read = 0;
    for (const s of scalars) {
      for (const t of [`k: ${s}\n`, `list:\n  - ${s}\n`, `m:\n  k: ${s}   \n`]) {
        if (same(t) === 'read') read++;
      }
    }
    expect(read).toBeGreaterThan(100);
  });

  it('keys repeated from item to item, of equal lengths, and more distinct keys than it keeps to reuse', () => {
    expect(same('- ab: 1\n  cd: 2\n  ac: 3\n- cd: 4\n  ab: 5\n  ca: 6\n- abc: 7\n  a: 8\n')).toBe('read');
    const many = Array.from({ length: 150 }, (_, i) => `  k${i}: ${i}\n  x${i}y: v${i}\n`).join('');
    expect(same(`a:\n${many}b:\n${many}c:\n  - ${many.slice(2).replaceAll('\n  ', '\n    ')}`)).toBe('read');
  });

  it('structures: nesting, null values, compact sequences, comments and blank lines', () => {
    expect(same('a:\nb: 1\n')).toBe('read');
    expect(parseBlockYaml('a:\nb: 1\n')).toStrictEqual({ a: null, b: 1 });
    expect(same('a:\n  b:\n    c: x\n  d:\n  - 1\n  - 2\ne: # comment\n\n  # indented comment\nf: z\n')).toBe('read');
    expect(same('s:\n  -   a: 1\n      b: 2\n  - c: 3\n')).toBe('read');
    expect(same('s:\n- a: 1\n  b:\n    - x\n- 2\n')).toBe('read');
    expect(same('a: 1')).toBe('read'); // no final newline
  });

  it('declines what it does not read, and js-yaml takes it (errors worded as before)', () => {
    const declined = [
      '', '# only a comment\n', '---\na: 1\n', 'a: 1\n...\n', '%YAML 1.2\n---\na: 1\n', 'a:\n\tb: 1\n', 'a: 1\r\nb: 2\r\n',
      'a: &x 1\nb: *x\n', 'a: !!str 1\n', 'a: |\n  text\n', 'a: >\n  text\n', 'a: "q"\n', "a: 'q'\n", 'a: {b: 1}\n', 'a: [1]\n',
      'a: x\n  continued\n', 'a: 1\na: 2\n', '__proto__: 1\n', 'a-b: 1\n', '"a": 1\n', '? a\n: 1\n', '- 1\n- - 2\n', '-\n', 'a:\n  -\n',
      'a:b\n', ' a: 1\n', 'a:\n    b: 1\n  c: 2\n', '- a\nb: 1\n', 'a: x\u0001y\n', 'a: x\u2028y\n', 'a: \ud83d\ude00\n', '\ufeffa: 1\n',
    ];
    for (const t of declined) expect(parseBlockYaml(t), JSON.stringify(t)).toBe(NOT_BLOCK);
    // A key given twice is still refused, by js-yaml's words.
    expect(() => parseConfig('settings:\n  max_policies: 1\n  max_policies: 2\n', 'x.yaml')).toThrow(/YAML syntax error.*keys must be unique/);
  });
});
