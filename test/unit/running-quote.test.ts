/**
 * The running config's writers (src/config/running-splice.ts, spliced;
 * src/config/running.ts, the `yaml` package's document) against the
 * config reader, for API rules whose names the two YAML schemas disagree
 * about. Found by review: the `yaml` package (YAML 1.2 core) wrote names
 * such as 0b1, +0x1F or -0o7 plain, being strings in its schema, and the
 * reader (js-yaml's core schema, and the block reader that resolves as it
 * does) read them back as numbers. `mup config show` printed YAML that
 * `mup daemon --config` refused ("expected a name ..., got the number 1"),
 * and `mup config save`, which reads back what it is about to write, was
 * refused with a 400 naming a line of a file it never wrote.
 */
import jsyaml from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { parseBlockYaml, NOT_BLOCK } from '../../src/config/block-yaml.js';
import { API_WHERE } from '../../src/config/keys.js';
import { parseConfig, placed } from '../../src/config/load.js';
import { parseConfigOffLoop } from '../../src/config/parse-async.js';
import { readsAsNonString } from '../../src/config/quote-scalars.js';
import { expandSections, type CompactSection } from '../../src/config/running-async.js';
import { runningConfigYaml, type RunningRule } from '../../src/config/running.js';
import { splicedRunningYaml, spansForSplice } from '../../src/config/running-splice.js';
import type { Config } from '../../src/config/types.js';
import { emptyOverlay, RULE_KIND_LIST, RULE_KINDS, RuleSet, ruleSetDiff, ruleSetDiffAsync, type RuleKind } from '../../src/daemon/rules.js';

const FILE = 'run.yaml';

/** Where YAML's syntax, not the schema, makes a plain scalar impossible: the `yaml` package quotes those itself. */
const SYNTAX = Symbol('quoted for the syntax');

/** Tricky names, and what the reader makes of each written as a plain scalar. */
const TRICKY: readonly (readonly [string, unknown])[] = [
  // js-yaml's core int takes YAML 1.1's binary and octal, and a sign before 0x / 0b / 0o: strings in YAML 1.2.
  ['0b1', 1],
  ['0b101', 5],
  ['+0x1F', 31],
  ['-0o7', -7],
  ['-0b1', -1],
  ['0o17', 15],
  ['0x1F', 31],
  ['012', 12],
  ['-0', 0],
  // Not numbers for js-yaml 4: no underscores in decimals, no sexagesimal, no signed leading point.
  ['1_000', '1_000'],
  ['0b1_0', '0b1_0'],
  ['12:30', '12:30'],
  ['190:20:30', '190:20:30'],
  ['-.5', '-.5'],
  ['0x', '0x'],
  ['.inf', Infinity],
  ['-.inf', -Infinity],
  ['.NaN', NaN],
  ['1.', 1],
  ['1e3', 1000],
  ['~', null],
  ['null', null],
  ['Null', null],
  ['NULL', null],
  ['true', true],
  ['True', true],
  ['FALSE', false],
  // YAML 1.1's bools are strings to js-yaml's core schema.
  ['yes', 'yes'],
  ['no', 'no'],
  ['on', 'on'],
  ['off', 'off'],
  ['Y', 'Y'],
  ['+', '+'],
  ['.', '.'],
  ['2001:db8::1', '2001:db8::1'],
  ["it's", "it's"],
  ['', null],
  [' leading space', SYNTAX],
  ['trailing space ', SYNTAX],
  ['a: b', SYNTAX],
  ['#x', SYNTAX],
  ['x #y', SYNTAX],
  ['- x', SYNTAX],
  ['"quoted"', SYNTAX],
  ["'quoted'", SYNTAX],
  ['a "b" c', 'a "b" c'],
];

describe('which strings the writers quote', () => {
  it.each(TRICKY.filter(([, taken]) => taken !== SYNTAX))('%j is quoted exactly when the reader would not read it back as itself', (s, taken) => {
    // The table is what the reader does: js-yaml's core schema, and the block reader where it reads the line.
    expect(jsyaml.load(`k: ${s}`, { schema: jsyaml.CORE_SCHEMA })).toEqual({ k: taken });
    const block = parseBlockYaml(`k: ${s}\n`);
    if (block !== NOT_BLOCK) expect(block).toEqual({ k: taken });
    expect(readsAsNonString(s)).toBe(!Object.is(taken, s));
  });
});

/** A file with one rule of each kind: block YAML the block reader reads (spliced), and the same as JSON (the document). */
const CONFIG = {
  settings: { max_policies: 1024, max_localsids: 1024 },
  policies: [{ name: 'c1', match: '10.0.1.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' }],
  localsids: [{ name: 'l1', sid: '2001:db8:2::/48', src_prefix_len: 64 }],
  sessions: [{ name: 's1', ue: '10.60.0.1/32', teid: 1, qfi: 1, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' }],
};
const BLOCK = [
  'settings:',
  '  max_policies: 1024',
  '  max_localsids: 1024',
  'policies:',
  '  - name: c1',
  '    match: 10.0.1.0/24',
  '    sr_prefix: 2001:db8:1::/48',
  '    src_prefix: 2001:db8:ff::/64',
  'localsids:',
  '  - name: l1',
  '    sid: 2001:db8:2::/48',
  '    src_prefix_len: 64',
  'sessions:',
  '  - name: s1',
  '    ue: 10.60.0.1/32',
  '    teid: 1',
  '    qfi: 1',
  '    endpoint: 192.0.2.1',
  '    source: 198.51.100.1',
  '    isd: 2001:db8:2::/48',
  '    src_prefix: 2001:db8:ff::/64',
  '',
].join('\n');
/** Block YAML without rule sections: the spliced API rules go into sections appended at its end. */
const BARE = 'settings:\n  max_policies: 1024\n  max_localsids: 1024\n';
const JSON_FILE = JSON.stringify(CONFIG, null, 2);

/** An API rule of `kind` named `name` (the i-th: its own key), as the API's parser reads it; undefined if the API refuses the name. */
function apiRule(kind: RuleKind, name: string, i: number): Record<string, unknown> | undefined {
  const body: Record<RuleKind, Record<string, unknown>> = {
    policy: { name, match: `10.9.${i}.0/24`, sr_prefix: '2001:db8:9::/48', src_prefix: '2001:db8:ffff::/64' },
    localsid: { name, sid: `2001:db8:${(0x100 + i).toString(16)}::/48`, src_prefix_len: 64 },
    session: { name, ue: `10.61.0.${i}/32`, teid: 2 + i, qfi: 1, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' },
  };
  try {
    RULE_KINDS[kind].parse(body[kind], 'request body');
    return body[kind];
  } catch {
    return undefined;
  }
}

/** The file's rules with these API rules added, as the daemon runs them, and its sections as the running config's thread gets them. */
function running(config: Config, adds: readonly (readonly [RuleKind, Record<string, unknown>])[], change?: (rs: RuleSet) => void): { rs: RuleSet; sections: CompactSection[] } {
  const rs = new RuleSet(config, emptyOverlay());
  for (const [kind, body] of adds) {
    const k = RULE_KINDS[kind];
    const r = k.parse(body, 'request body');
    rs.put(kind, placed(r, API_WHERE));
  }
  change?.(rs);
  // As the daemon's #runningSections gathers them.
  const sections = RULE_KIND_LIST.map((k): CompactSection => {
    const set = rs.rules(k.kind);
    const order = new Int32Array(set.size);
    const rules: RunningRule[] = [];
    let i = 0;
    for (const [key, r] of set) {
      const origin = rs.source(k.kind, key) as 'config' | 'api';
      const where = origin === 'config' ? rs.fileRule(k.kind, key)?.where : undefined;
      if (typeof where === 'number') {
        order[i++] = where;
        continue;
      }
      order[i++] = -1 - rules.length;
      rules.push({ key, json: k.json(r) as Record<string, unknown>, origin });
    }
    return { section: k.section, order, rules };
  });
  return { rs, sections };
}

/** The ways a running config is written: spliced into block YAML (entries kept or a section appended), or the document. */
const WAYS = [
  { way: 'spliced into the block file', text: BLOCK, spliced: true },
  { way: 'spliced, sections appended to a file without them', text: BARE, spliced: true },
  { way: 'the document of the block file', text: BLOCK, spliced: false },
  { way: 'the document of a JSON file (flow mappings)', text: JSON_FILE, spliced: false },
] as const;

function write(w: (typeof WAYS)[number], config: Config, sections: CompactSection[], origins: boolean): string {
  if (!w.spliced) return runningConfigYaml(w.text, expandSections(sections), { origins });
  const yaml = splicedRunningYaml(w.text, spansForSplice(config), sections, { origins });
  expect(yaml, 'spliced (not left to the document)').toBeDefined();
  return yaml!;
}

const KINDS: readonly RuleKind[] = ['policy', 'localsid', 'session'];

describe('config show with tricky API rule names', () => {
  it('the API takes the names the reviewer found (every kind: the same narrow set)', () => {
    for (const name of ['0b1', '0b101', '+0x1F', '-0o7', '1e3', 'true', 'null']) {
      for (const kind of KINDS) expect(apiRule(kind, name, 0), `${kind} ${name}`).toBeDefined();
    }
    // Sessions took any non-blank name before (escape sequences, 60 KB): found in review, session 42.
    for (const [name] of TRICKY) expect(apiRule('session', name, 0) !== undefined, JSON.stringify(name)).toBe(apiRule('policy', name, 0) !== undefined);
  });

  for (const w of WAYS) {
    for (const kind of KINDS) {
      it.each(TRICKY.map(([s], i) => [s, i] as const).filter(([s, i]) => apiRule(kind, s, i) !== undefined))(`${w.way}: a ${kind} named %j loads back with that name`, (name, i) => {
        const config = parseConfig(w.text, FILE);
        const { rs, sections } = running(config, [[kind, apiRule(kind, name, i)!]]);
        const yaml = write(w, config, sections, true);
        const back = parseConfig(yaml, FILE);
        expect(back[RULE_KINDS[kind].section]!.map((r) => r.name)).toContain(name);
        expect(ruleSetDiff(rs, new RuleSet(back, emptyOverlay()))).toEqual([]);
      });
    }
  }
});

describe('config save with tricky API rule names', () => {
  for (const w of WAYS) {
    it(`${w.way}: what it would write reads back (on the parser's thread, as a save does) as exactly the running rules`, async () => {
      const config = parseConfig(w.text, FILE);
      const adds = KINDS.flatMap((kind) => TRICKY.flatMap(([s], i) => (apiRule(kind, s, i) === undefined ? [] : [[kind, apiRule(kind, s, i)!] as const])));
      const { rs, sections } = running(config, adds);
      const yaml = write(w, config, sections, false);
      const saved = await parseConfigOffLoop(Buffer.from(yaml), FILE);
      expect(await ruleSetDiffAsync(rs, new RuleSet(saved, emptyOverlay()))).toEqual([]);
    });
  }
});

describe("the document path keeps a file's own scalars as the reader read them (found in review, session 42)", () => {
  // A flow file (not spliced): the `yaml` package read -.5 and 1e400 as numbers and printed -0.5 and .inf;
  // the reader had read the names "-.5" and "1e400", and the output did not load.
  const text = `policies:
  - {name: -.5, match: 192.0.2.0/24, sr_prefix: 2001:db8:1::/48, src_prefix: 2001:db8:ff::/64}
  - {name: 1e400, match: 192.0.3.0/24, sr_prefix: 2001:db8:1::/48, src_prefix: 2001:db8:ff::/64}
  - {name: +.5, match: 192.0.4.0/24, sr_prefix: 2001:db8:1::/48, src_prefix: 2001:db8:ff::/64, hop_limit: 0x20}
settings: {max_policies: 1e3, max_localsids: 010}
`;
  it('names that are YAML 1.2 floats but strings to the reader, and numbers both read alike', () => {
    const config = parseConfig(text, FILE);
    expect(config.policies.map((p) => p.name)).toEqual(['-.5', '1e400', '+.5']);
    const out = runningConfigYaml(text, [{ section: 'policies', rules: [0, 1, 2].map((i) => ({ key: '', json: {}, origin: 'config' as const, fileIndex: i })) }], { origins: false });
    const back = parseConfig(out, FILE);
    expect(back.policies.map((p) => p.name)).toEqual(['-.5', '1e400', '+.5']);
    expect(back.policies[2]!.hopLimit).toBe(32);
    expect([back.settings.maxPolicies, back.settings.maxLocalSids]).toEqual([config.settings.maxPolicies, config.settings.maxLocalSids]);
  });
});

describe('an empty document as the config file (found in review, session 43)', () => {
  // "---", "~", "null", "..." alone load as no rules; an API add then made show and save fail:
  // "Expected a YAML collection as document contents" (the document's contents a null scalar).
  for (const text of ['---\n', '--- # mup\n', '~\n', 'null\n', '...\n']) {
    it(`${JSON.stringify(text)} and an API policy: the running config holds it and loads back to the running rules`, () => {
      const config = parseConfig(text, FILE);
      const body = apiRule('policy', 'a1', 1)!;
      const { rs, sections } = running(config, [['policy', body]]);
      const yaml = runningConfigYaml(text, expandSections(sections), { origins: false });
      const back = new RuleSet(parseConfig(yaml, FILE), emptyOverlay());
      expect(ruleSetDiff(back, rs)).toEqual([]);
      expect(back.rules('policy').size).toBe(1);
    });
  }
});

describe('anchors and aliases in the file (found in review, session 43)', () => {
  // c1 holds the anchors c2's aliases name: deleting or replacing c1, or deleting it and adding it back
  // (it goes after c2), left an alias before its anchor or with none: "Unresolved alias", show and save failed.
  const TEXT =
    'settings: { max_policies: 8, max_localsids: 8 }\npolicies:\n' +
    '  - name: c1\n    match: 10.0.1.0/24\n    sr_prefix: &sr 2001:db8:1::/48\n    src_prefix: &src 2001:db8:ff::/64\n' +
    '  - name: c2\n    match: 10.0.2.0/24\n    sr_prefix: *sr\n    src_prefix: *src\n';
  const c1 = { name: 'c1', match: '10.0.1.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' };
  const cases: readonly (readonly [string, (rs: RuleSet) => void])[] = [
    ['the anchors\' entry deleted', (rs) => rs.delete('policy', '10.0.1.0/24')],
    ['the anchors\' entry replaced', (rs) => rs.put('policy', placed(RULE_KINDS.policy.parse({ ...c1, hop_limit: 9 }, 'request body'), API_WHERE))],
    [
      'deleted and added back unchanged',
      (rs) => {
        rs.delete('policy', '10.0.1.0/24');
        rs.put('policy', placed(RULE_KINDS.policy.parse(c1, 'request body'), API_WHERE));
      },
    ],
  ];
  for (const [what, change] of cases) {
    it(`${what}: the running config loads back to the running rules, the aliases' values written out`, () => {
      const { rs, sections } = running(parseConfig(TEXT, FILE), [], change);
      const yaml = runningConfigYaml(TEXT, expandSections(sections), { origins: true });
      expect(ruleSetDiff(new RuleSet(parseConfig(yaml, FILE), emptyOverlay()), rs)).toEqual([]);
      expect(yaml).not.toMatch(/[*&]s(r|rc)\b/);
    });
  }
});

describe('files the reader loads and the yaml package refuses (found in review, session 43)', () => {
  // Show and save failed for ever on these ("the loaded config no longer parses as a document").
  const P = 'name: c1, match: 10.0.1.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64"';
  const TEXTS: Record<string, string> = {
    'a flow sequence whose items start at column 0': `policies: [\n{ ${P} }\n]\n`,
    'a flow map closed at column 0': `policies:\n  - { ${P}\n}\n`,
    'a comment right after a comma': `policies: [ { ${P} },# c\n]\n`,
  };
  for (const [what, text] of Object.entries(TEXTS)) {
    it(`${what}: the running config, an API policy added, loads back to the running rules`, () => {
      const { rs, sections } = running(parseConfig(text, FILE), [['policy', apiRule('policy', '0b1', 2)!]]);
      const yaml = runningConfigYaml(text, expandSections(sections), { origins: false });
      const back = new RuleSet(parseConfig(yaml, FILE), emptyOverlay());
      expect(ruleSetDiff(back, rs)).toEqual([]);
      expect([...back.rules('policy').values()].map((r) => r.name)).toEqual(['c1', '0b1']);
    });
  }
});
