/**
 * The running config spliced from the file's text (src/config/running-splice.ts)
 * against the `yaml` package's document (src/config/running.ts), on
 * generated block YAML files with API changes on top: the same config read
 * back (every rule, in order, the settings, the warnings); the file's kept
 * entries as their own lines, comments included; deleted entries gone with
 * the comments before them, replaced ones keeping theirs; one origin
 * comment an entry with `origins`, none from the file.
 */
import { describe, expect, it } from 'vitest';
import { itemSpansOf, markReadByBlockReader, parseConfig, readByBlockReader, type ItemSpans } from '../../src/config/load.js';
import { parseConfigOffLoop } from '../../src/config/parse-async.js';
import { expandSections, type CompactSection } from '../../src/config/running-async.js';
import { runningConfigYaml, type RunningRule } from '../../src/config/running.js';
import { splicedRunningYaml, spansForSplice } from '../../src/config/running-splice.js';
import { xorshift32 } from '../helpers/rng.js';

const FILE = 'run.yaml';

/** The config read back, as data (its file name and warnings' lines aside). */
function readBack(yaml: string): unknown {
  const c = parseConfig(yaml, FILE);
  return { ...c, warnings: c.warnings?.map((w) => `${w.path}: ${w.reason}`) };
}

/** Both builds of the same running config. */
function both(text: string, sections: CompactSection[], origins: boolean): { spliced: string; doc: string } {
  const spans = spansForSplice(parseConfig(text, FILE));
  const spliced = splicedRunningYaml(text, spans, sections, { origins });
  expect(spliced, 'spliced (not left to the document)').toBeDefined();
  return { spliced: spliced!, doc: runningConfigYaml(text, expandSections(sections), { origins }) };
}

const api = (i: number, o: Partial<RunningRule> = {}): RunningRule => ({
  key: `k${i}`,
  json: { name: `api${i}`, match: `10.250.${i}.0/24`, sr_prefix: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64', ...(i % 2 === 0 ? { segments: ['2001:db8:5::1', '2001:db8:6::1'] } : {}) },
  origin: 'api',
  ...o,
});

describe('the running config spliced from the file', () => {
  const text = [
    '# my config',
    'settings:',
    '  max_policies: 100',
    'policies:',
    '  # the first one',
    '  - name: p0',
    '    match: 10.0.0.0/24',
    '    sr_prefix: 2001:db8:1::/48',
    '    src_prefix: 2001:db8:ff::/64',
    '  # about p1',
    '',
    '  - name: p1',
    '    match: 10.0.1.0/24',
    '    sr_prefix: 2001:db8:1::/48   # inline',
    '    src_prefix: 2001:db8:ff::/64',
    '  # origin: config',
    '  - name: p2',
    '    match: 10.0.2.0/24',
    '    sr_prefix: 2001:db8:1::/48',
    '    src_prefix: 2001:db8:ff::/64',
    '  # after the last',
    'localsids:',
    '  - sid: 2001:db8:e::/48',
    '    src_prefix_len: 64',
    '',
  ].join('\n');

  it('nothing changed, no origins: the file as it is, but for the origin comments it had', () => {
    const sections: CompactSection[] = [
      { section: 'policies', order: Int32Array.of(0, 1, 2), rules: [] },
      { section: 'localsids', order: Int32Array.of(0), rules: [] },
    ];
    const { spliced, doc } = both(text, sections, false);
    expect(spliced).toBe(text.replace('  # origin: config\n', ''));
    expect(readBack(spliced)).toEqual(readBack(doc));
  });

  it('a deletion, a replacement and an addition, with origins: the same rules as the document, comments where they belong', () => {
    const sections: CompactSection[] = [
      // p1 deleted; p2 replaced by the API (same key); an API rule added.
      { section: 'policies', order: Int32Array.of(0, -1, -2), rules: [{ key: 'p2', json: { name: 'p2', match: '10.0.2.0/24', sr_prefix: '2001:db8:9::/48', src_prefix: '2001:db8:ff::/64' }, origin: 'api', replacesIndex: 2 }, api(1)] },
      { section: 'localsids', order: Int32Array.of(0), rules: [] },
      { section: 'sessions', order: Int32Array.of(), rules: [] },
    ];
    const { spliced, doc } = both(text, sections, true);
    expect(readBack(spliced)).toEqual(readBack(doc));
    expect(spliced).toContain('# my config\nsettings:\n  max_policies: 100\npolicies:\n  # the first one\n  # origin: config\n  - name: p0\n');
    expect(spliced).not.toContain('about p1'); // went with p1
    expect(spliced).not.toContain('# inline');
    expect(spliced).toContain('  # origin: api\n  - name: p2\n    match: 10.0.2.0/24\n    sr_prefix: 2001:db8:9::/48\n');
    expect(spliced).toContain('  # origin: api\n  - name: api1\n');
    expect(spliced).toContain('  # after the last\nlocalsids:\n  # origin: config\n  - sid: 2001:db8:e::/48\n');
    expect(spliced.match(/# origin: /g)).toHaveLength(4);
    expect(spliced).not.toContain('sessions');
  });

  it('a section the file does not have is added at the end; every entry of a section deleted leaves it empty', () => {
    const sections: CompactSection[] = [
      { section: 'policies', order: Int32Array.of(), rules: [] },
      { section: 'localsids', order: Int32Array.of(0), rules: [] },
      { section: 'sessions', order: Int32Array.of(-1), rules: [{ key: 's', json: { ue: '10.60.0.1/32', teid: 1, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64' }, origin: 'api' }] },
    ];
    const { spliced, doc } = both(text, sections, true);
    expect(readBack(spliced)).toEqual(readBack(doc));
    expect(spliced).toMatch(/\nsessions:\n {2}# origin: api\n {2}- ue: 10\.60\.0\.1\/32\n/);
  });

  it('leaves a text the block reader did not read, and a listed section without entries, to the document', () => {
    const entry = '  - match: 10.0.1.0/24\n    sr_prefix: 2001:db8:1::/48\n    src_prefix: 2001:db8:ff::/64\n';
    // Found by review: with the sections found by their keys in any text, a quoted key (or JSON behind a
    // comment, an indented root, an explicit key, a document marker) read as "no such section", so a show
    // listed deleted entries still, or printed YAML that does not load.
    const others = [
      `"policies":\n${entry}`,
      `# generated\n{"policies": [{"match": "10.0.1.0/24", "sr_prefix": "2001:db8:1::/48", "src_prefix": "2001:db8:ff::/64"}]}\n`,
      `  policies:\n  ${entry.replace(/\n {4}/g, '\n      ')}`,
      `? policies\n:\n${entry}`,
      `---\npolicies:\n${entry}...\n`,
      '{"policies": []}',
      'policies: []\n',
    ];
    for (const text of others) {
      const c = parseConfig(text, FILE);
      expect(readByBlockReader(c), text).toBe(false);
      expect(spansForSplice(c), text).toBeUndefined();
      for (const order of [Int32Array.of(), Int32Array.of(-1)]) {
        const sections: CompactSection[] = [{ section: 'policies', order, rules: order.length > 0 ? [api(1, { replacesIndex: 0 })] : [] }];
        expect(splicedRunningYaml(text, spansForSplice(c), sections, { origins: true }), text).toBeUndefined();
        // What the daemon's thread then gives: the document, with exactly the running rules.
        const back = parseConfig(runningConfigYaml(text, expandSections(sections), { origins: true }), FILE);
        expect(back.policies.map((p) => p.name ?? null), text).toEqual(order.length > 0 ? ['api1'] : []);
      }
    }
    // A block file that lists the section without entries: the document too.
    expect(splicedRunningYaml('policies:\n', spansForSplice(parseConfig('policies:\n', FILE)), [{ section: 'policies', order: Int32Array.of(-1), rules: [api(1)] }], { origins: true })).toBeUndefined();
  });

  it('a block file without rules: the sections added at its end', () => {
    const text = 'settings:\n  max_policies: 10\n';
    const c = parseConfig(text, FILE);
    expect(spansForSplice(c)).toEqual({});
    const { spliced, doc } = both(text, [{ section: 'policies', order: Int32Array.of(-1), rules: [api(1)] }], false);
    expect(spliced.startsWith(text)).toBe(true);
    expect(readBack(spliced)).toEqual(readBack(doc));
  });

  it('a marked config with rules but no spans kept (lost on the way): the document', () => {
    const c = parseConfig(text, FILE);
    expect(spansForSplice({ ...c })).toBeUndefined(); // a copy: neither the mark nor the spans
    const marked = { ...c };
    markReadByBlockReader(marked);
    expect(spansForSplice(marked)).toBeUndefined();
  });

  it('the mark crosses from the parser\'s thread (a reload): block YAML marked, JSON not', async () => {
    expect(readByBlockReader(await parseConfigOffLoop(Buffer.from(text), FILE))).toBe(true);
    expect(readByBlockReader(await parseConfigOffLoop(Buffer.from(JSON.stringify({ policies: [] })), FILE))).toBe(false);
  });

  it('refuses an index the file does not have, as the document does', () => {
    const spans: ItemSpans | undefined = itemSpansOf(parseConfig(text, FILE));
    expect(() => splicedRunningYaml(text, spans, [{ section: 'localsids', order: Int32Array.of(3), rules: [] }], { origins: false })).toThrow(/no entry localsids\[3\]/);
  });

  it('generated files and changes: the same config read back as the document gives, each kept entry its own lines', () => {
    const r = xorshift32(30);
    for (let n = 0; n < 120; n++) {
      const indent = ' '.repeat(r() % 3 === 0 ? 0 : 2 + (r() % 2) * 2);
      const count = 1 + (r() % 12);
      const lines: string[] = ['settings:', '  max_policies: 1000', 'policies:'];
      if (r() % 2 === 0) lines.push(`${indent}# before the first`);
      for (let i = 0; i < count; i++) {
        if (i > 0 && r() % 3 === 0) lines.push(`${indent}# before p${i}`);
        if (i > 0 && r() % 4 === 0) lines.push('');
        if (r() % 6 === 0) lines.push(`${indent}# origin: config`);
        lines.push(`${indent}- name: p${i}`, `${indent}  match: 10.1.${i}.0/24`, `${indent}  sr_prefix: 2001:db8:1::/48`, `${indent}  src_prefix: 2001:db8:ff::/64`);
        if (r() % 5 === 0) lines.push(`${indent}  segments:`, `${indent}    - 2001:db8:5::1`);
      }
      if (r() % 2 === 0) lines.push(`${indent}# after the last`);
      if (r() % 2 === 0) lines.push('localsids:', `${indent}- sid: 2001:db8:e::/48`, `${indent}  src_prefix_len: 64`);
      const text = lines.join('\n') + (r() % 4 === 0 ? '' : '\n');
      // Keep, delete, replace (same name and key) and add, in random order of the kept ones.
      const rules: RunningRule[] = [];
      const order: number[] = [];
      for (let i = 0; i < count; i++) {
        const what = r() % 4;
        if (what === 0) continue; // deleted
        if (what === 1) {
          order.push(-1 - rules.length);
          rules.push({ key: `p${i}`, json: { name: `p${i}`, match: `10.1.${i}.0/24`, sr_prefix: '2001:db8:7::/48', src_prefix: '2001:db8:ff::/64' }, origin: 'api', replacesIndex: i });
        } else order.push(i);
      }
      for (let j = 0; j < r() % 3; j++) {
        order.push(-1 - rules.length);
        rules.push(api(100 + j));
      }
      const hasLocalSids = text.includes('localsids:');
      const sections: CompactSection[] = [
        { section: 'policies', order: Int32Array.from(order), rules },
        { section: 'localsids', order: hasLocalSids ? Int32Array.of(0) : Int32Array.of(), rules: [] },
      ];
      for (const origins of [false, true]) {
        const { spliced, doc } = both(text, sections, origins);
        expect(readBack(spliced), `file ${n}, origins ${origins}:\n${text}\n--- spliced:\n${spliced}`).toEqual(readBack(doc));
        expect(spliced.match(/# origin: /g)?.length ?? 0).toBe(origins ? order.length + (hasLocalSids ? 1 : 0) : 0);
        // Each entry kept is its own lines.
        const spans = itemSpansOf(parseConfig(text, FILE))!.policies!;
        for (const k of order.filter((v) => v >= 0)) {
          const own = text.slice(spans[k]!, spans[k + 1]!).split('\n').filter((l) => /^\s*[^\s#]/.test(l)).join('\n');
          expect(spliced).toContain(own);
        }
      }
    }
  });
});
