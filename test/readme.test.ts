/**
 * The examples of the docs, run: README.md and every docs/*.md (DOCS below).
 * Every ```sh block right after an HTML comment `<!-- readme-test -->` is a
 * script of commands (`$ ` lines) and the output each one prints (the lines
 * after it). They run in order (README.md, then docs/*.md by name, each in
 * its own order) against one real daemon (TestDaemon, instance "default") on
 * config/daemon.example.yaml, in a namespace this file creates, attached to
 * the veth pair eth1/eth2 that the example config names. So an example
 * leaves the daemon's rules as it found them (what it adds, it deletes).
 *
 * Each command runs with bash inside that namespace (so the example's HTTP
 * listener on 127.0.0.1:9180 answers), `mup` replaced by `node bin/mup.js`
 * with MUP_SOCKET set to the test daemon's socket, and the docs' socket
 * path /run/mup/default.sock replaced by it. It must exit 0. Where the doc
 * shows output, the real output must contain it, in order:
 * - JSON (one line, or indented over several): the real output has a JSON
 *   value with at least the documented keys, recursively (arrays element by
 *   element), the same JSON types, and the same booleans;
 * - a text line: a real line with as many words, each equal, except words
 *   that vary from run to run: numbers, times and prefixes (a word starting
 *   with a digit, or with "(" and a digit), paths (starting with "/"),
 *   hashes and tags (8 or more hex digits), and JSON objects (compared as
 *   above);
 * - a line that is only an HTTP status code (curl -w '%{http_code}') must
 *   be that code exactly; a line `...` stands for lines left out.
 * `mup stats --watch` runs until its output shows what the doc shows,
 * then gets SIGINT (as Ctrl-C) and must exit 0.
 *
 * Also, without root: config/daemon.example.yaml and every ```yaml block of
 * the docs are valid configs; every relative link of the docs names an
 * existing file, and a `#heading` in it an existing heading; the README
 * links every docs/*.md; every cell of the README's figure table is a link,
 * and each figure links to the report in docs/bench/ it comes from (so a
 * figure is refreshed in its report, not in the README).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { MUP_BIN, TestDaemon } from './helpers/daemon.js';
import { Lab } from './helpers/netns.js';

const isRoot = process.getuid?.() === 0;
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const README = join(ROOT, 'README.md');
const DOCS_DIR = join(ROOT, 'docs');
/** The docs whose examples run and whose links are checked, in run order. */
const DOCS: readonly string[] = [
  README,
  ...readdirSync(DOCS_DIR)
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => join(DOCS_DIR, f)),
];
/** A doc's path as the messages name it (README.md, docs/api.md). */
const rel = (file: string): string => relative(ROOT, file);
const EXAMPLE = fileURLToPath(new URL('../config/daemon.example.yaml', import.meta.url));
const MARK = '<!-- readme-test -->';
const README_SOCKET = '/run/mup/default.sock';

interface Step {
  readonly command: string;
  /** Documented output lines (blank lines left out). */
  readonly output: readonly string[];
}

interface Block {
  /** 1-based line of the opening fence in its file. */
  readonly line: number;
  readonly steps: readonly Step[];
}

/** The marked ```sh blocks of a markdown text (`name` for the messages). */
export function extractBlocks(md: string, name = 'README.md'): Block[] {
  const lines = md.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.trim() !== MARK) continue;
    let j = i + 1;
    while (j < lines.length && lines[j]!.trim() === '') j++;
    if (!/^```(sh|bash|shell)\s*$/.test(lines[j] ?? '')) throw new Error(`${name}:${i + 1}: ${MARK} must be followed by a \`\`\`sh block`);
    const start = j;
    const steps: { command: string; output: string[] }[] = [];
    for (j = start + 1; j < lines.length && !lines[j]!.startsWith('```'); j++) {
      const l = lines[j]!;
      if (l.startsWith('$ ')) steps.push({ command: l.slice(2), output: [] });
      else if (l.trim() === '') continue;
      else if (steps.length === 0) throw new Error(`${name}:${j + 1}: output before the first "$ " command`);
      else steps.at(-1)!.output.push(l);
    }
    if (j >= lines.length) throw new Error(`${name}:${start + 1}: block not closed`);
    blocks.push({ line: start + 1, steps });
    i = j;
  }
  return blocks;
}

/** The ```yaml blocks of a markdown text, with their lines. */
function yamlBlocks(md: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = [];
  const re = /^```ya?ml\n([\s\S]*?)^```/gm;
  for (let m = re.exec(md); m !== null; m = re.exec(md)) {
    out.push({ line: md.slice(0, m.index).split('\n').length, text: m[1]! });
  }
  return out;
}

// ---------------------------------------------------------------------------
// Matching documented output against real output

function tryJson(text: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch {
    return { ok: false };
  }
}

function jsonType(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v;
}

/** Why `real` does not have the documented shape, or undefined when it does. */
function shapeMismatch(doc: unknown, real: unknown, at = '$'): string | undefined {
  if (jsonType(doc) !== jsonType(real)) return `${at}: documented ${jsonType(doc)}, got ${jsonType(real)}`;
  if (typeof doc === 'boolean' && doc !== real) return `${at}: documented ${String(doc)}, got ${String(real)}`;
  if (Array.isArray(doc)) {
    const r = real as unknown[];
    if (r.length < doc.length) return `${at}: documented ${doc.length} elements, got ${r.length}`;
    for (let i = 0; i < doc.length; i++) {
      const m = shapeMismatch(doc[i], r[i], `${at}[${i}]`);
      if (m !== undefined) return m;
    }
  } else if (typeof doc === 'object' && doc !== null) {
    const r = real as Record<string, unknown>;
    for (const [k, v] of Object.entries(doc)) {
      if (!(k in r)) return `${at}.${k}: documented, missing`;
      const m = shapeMismatch(v, r[k], `${at}.${k}`);
      if (m !== undefined) return m;
    }
  }
  return undefined;
}

function variableWord(w: string): boolean {
  return w.startsWith('/') || /^\(?[0-9]/.test(w) || /^[0-9a-f]{8,}$/.test(w);
}

function wordsMatch(doc: string, real: string): boolean {
  const a = doc.trim().split(/\s+/);
  const b = real.trim().split(/\s+/);
  if (a.length !== b.length) return false;
  return a.every((w, i) => {
    const r = b[i]!;
    if (w === r) return true;
    if (w.startsWith('{')) {
      const dj = tryJson(w);
      const rj = tryJson(r);
      return dj.ok && rj.ok && shapeMismatch(dj.value, rj.value) === undefined;
    }
    return variableWord(w) && variableWord(r);
  });
}

/** Documented output as items: a JSON value (possibly over several lines), a status code, a text line, or a gap. */
type Item = { kind: 'json'; value: unknown; text: string } | { kind: 'status'; text: string } | { kind: 'text'; text: string } | { kind: 'gap' };

function items(doc: readonly string[]): Item[] {
  const out: Item[] = [];
  for (let i = 0; i < doc.length; i++) {
    const l = doc[i]!;
    if (l.trim() === '...') {
      out.push({ kind: 'gap' });
      continue;
    }
    if (/^[1-5][0-9][0-9]$/.test(l.trim())) {
      out.push({ kind: 'status', text: l.trim() });
      continue;
    }
    if (/^[{[]/.test(l)) {
      let found = false;
      for (let j = i; j < doc.length; j++) {
        const text = doc.slice(i, j + 1).join('\n');
        const j2 = tryJson(text);
        if (j2.ok) {
          out.push({ kind: 'json', value: j2.value, text });
          i = j;
          found = true;
          break;
        }
      }
      if (found) continue;
    }
    out.push({ kind: 'text', text: l });
  }
  return out;
}

/** Undefined when `out` shows everything `doc` documents (in order); else what is missing. */
export function outputMismatch(doc: readonly string[], out: string): string | undefined {
  const real = out.split('\n').filter((l) => l.trim() !== '');
  let pos = 0;
  for (const it of items(doc)) {
    if (it.kind === 'gap') continue;
    let found = -1;
    let why = '';
    for (let k = pos; k < real.length && found < 0; k++) {
      const r = real[k]!;
      if (it.kind === 'status') {
        if (r.trim() === it.text) found = k;
      } else if (it.kind === 'text') {
        if (wordsMatch(it.text, r)) found = k;
      } else {
        const rj = tryJson(r);
        if (rj.ok) {
          const m = shapeMismatch(it.value, rj.value);
          if (m === undefined) found = k;
          else why ||= m;
        }
      }
    }
    if (found < 0) {
      const what = it.kind === 'json' ? `JSON ${it.text.replace(/\s+/g, ' ').slice(0, 200)}${why === '' ? '' : ` (${why})`}` : `line ${JSON.stringify(it.text)}`;
      return `documented ${what} not found in order in the output`;
    }
    pos = found + 1;
  }
  return undefined;
}

// ---------------------------------------------------------------------------
// Links

/** A markdown text without its fenced code blocks and inline code spans (blanked, so lines keep their numbers). */
function prose(md: string): string {
  return md.replace(/^```[\s\S]*?^```/gm, (m) => m.replace(/[^\n]/g, ' ')).replace(/`[^`\n]*`/g, (m) => ' '.repeat(m.length));
}

/** GitHub's anchor of a heading: lower case, punctuation and symbols left out, spaces as hyphens. */
export function headingSlug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M}\p{Pc}\s-]/gu, '')
    .replace(/\s/g, '-');
}

/** The anchors of a markdown text's headings (a repeated one gets -1, -2, ... as on GitHub). */
export function anchors(md: string): Set<string> {
  const out = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of md.replace(/^```[\s\S]*?^```/gm, '').split('\n')) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (m === null) continue;
    const base = headingSlug(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The inline links `[text](target)` of a markdown text, outside code, with their lines. */
function links(md: string): { line: number; target: string }[] {
  const out: { line: number; target: string }[] = [];
  const re = /\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g;
  const text = prose(md);
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    out.push({ line: text.slice(0, m.index).split('\n').length, target: m[1]! });
  }
  return out;
}

/** Why a relative link of `file` does not resolve, or undefined when it does (or is not relative). */
export function brokenLink(file: string, target: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined; // https:, mailto:
  const hash = target.indexOf('#');
  const path = decodeURIComponent(hash < 0 ? target : target.slice(0, hash));
  const anchor = hash < 0 ? undefined : target.slice(hash + 1);
  const dest = path === '' ? file : join(dirname(file), path);
  if (!existsSync(dest)) return `${target}: no file ${rel(dest)}`;
  if (anchor !== undefined && dest.endsWith('.md') && !anchors(readFileSync(dest, 'utf8')).has(anchor)) {
    return `${target}: no heading #${anchor} in ${rel(dest)}`;
  }
  return undefined;
}

/** The rows of the table under the README's `## Figures`, as cells (header and rule left out). */
function figureRows(md: string): string[][] {
  const lines = md.split('\n');
  const start = lines.findIndex((l) => /^## Figures\s*$/.test(l));
  if (start < 0) return [];
  const rows: string[][] = [];
  for (let i = start + 1; i < lines.length && !lines[i]!.startsWith('## '); i++) {
    if (lines[i]!.startsWith('|')) rows.push(lines[i]!.split('|').slice(1, -1).map((c) => c.trim()));
  }
  return rows.slice(2);
}

// ---------------------------------------------------------------------------

const readme = readFileSync(README, 'utf8');
const docs = DOCS.map((file) => ({ file, name: rel(file), text: readFileSync(file, 'utf8') }));

describe('doc examples and links (static)', () => {
  it('config/daemon.example.yaml is a valid config with interfaces and daemon sections', () => {
    const c = parseConfig(readFileSync(EXAMPLE, 'utf8'), EXAMPLE);
    expect(c.warnings ?? []).toEqual([]);
    expect(c.interfaces?.map((i) => [i.name, i.xdp])).toEqual([
      ['eth1', 'native'],
      ['eth2', 'native'],
    ]);
    expect(c.daemon?.socket).toBe(README_SOCKET);
    expect(c.daemon?.http).toEqual({ host: '127.0.0.1', port: 9180, openReads: true });
    expect(c.policies.length).toBeGreaterThan(0);
    expect(c.localsids.length).toBeGreaterThan(0);
  });

  it('every yaml block of the docs is a valid config', () => {
    let n = 0;
    for (const doc of docs) {
      for (const b of yamlBlocks(doc.text)) {
        n++;
        expect(() => parseConfig(b.text, `${doc.name}:${b.line}`), `${doc.name}:${b.line}`).not.toThrow();
      }
    }
    expect(n).toBeGreaterThanOrEqual(2);
  });

  it('finds the marked blocks, each with commands', () => {
    let n = 0;
    for (const doc of docs) {
      for (const b of extractBlocks(doc.text, doc.name)) {
        n++;
        expect(b.steps.length, `${doc.name}:${b.line}`).toBeGreaterThan(0);
      }
    }
    expect(n).toBeGreaterThanOrEqual(9);
  });

  it('every relative link of README.md and docs/*.md names an existing file and heading', () => {
    const broken: string[] = [];
    let n = 0;
    for (const doc of docs) {
      for (const l of links(doc.text)) {
        n++;
        const why = brokenLink(doc.file, l.target);
        if (why !== undefined) broken.push(`${doc.name}:${l.line}: ${why}`);
      }
    }
    expect(broken).toEqual([]);
    expect(n).toBeGreaterThan(100);
  });

  it('the link check catches a missing file and a missing heading', () => {
    expect(brokenLink(README, 'docs/lab.md#figures')).toBeUndefined();
    expect(brokenLink(README, 'docs/nope.md')).toMatch(/no file docs\/nope\.md/);
    expect(brokenLink(README, 'docs/lab.md#nope')).toMatch(/no heading #nope in docs\/lab\.md/);
    expect(brokenLink(README, '#nope')).toMatch(/no heading/);
    expect(headingSlug('GTP-U over IPv6 (RFC 9433 §6.3-6.5)')).toBe('gtp-u-over-ipv6-rfc-9433-63-65');
    expect(headingSlug('`mup lab run` (`make demo`)')).toBe('mup-lab-run-make-demo');
    expect(headingSlug('BPF_PROG_TEST_RUN: the repeat trap')).toBe('bpf_prog_test_run-the-repeat-trap');
  });

  it('the README links every docs/*.md', () => {
    const linked = new Set(links(readme).map((l) => l.target.split('#')[0]));
    const missing = docs.filter((d) => d.file !== README && !linked.has(d.name));
    expect(missing.map((d) => d.name)).toEqual([]);
  });

  it("every cell of the README's figure table is a link, each figure to its report in docs/bench/", () => {
    const rows = figureRows(readme);
    expect(rows.length).toBeGreaterThan(0);
    for (const [i, cells] of rows.entries()) {
      expect(cells.length, `figure row ${i + 1}`).toBeGreaterThanOrEqual(2);
      for (const [j, cell] of cells.entries()) {
        const targets = links(cell).map((l) => l.target);
        expect(targets.length, `figure row ${i + 1}, cell ${j + 1}: ${cell}`).toBeGreaterThan(0);
        if (j > 0) for (const tg of targets) expect(tg, `figure row ${i + 1}, cell ${j + 1}`).toMatch(/^docs\/bench\/[^#]+$/);
      }
    }
  });

  it('the output matcher accepts real output and rejects a wrong one', () => {
    expect(outputMismatch(['instance   default (pid 1, up 4 s)', '...', 'eth1  native  3  attached  77'], 'instance   default (pid 99, up 0 s)\nx\neth1  native  5  attached  80\n')).toBeUndefined();
    expect(outputMismatch(['eth1  native  3  attached  77'], 'eth1  native  5  NOT ATTACHED  80\n')).toBeDefined();
    expect(outputMismatch(['{"a": 1,', ' "b": {"c": true}}', '201'], '{"a":5,"b":{"c":true,"d":1}}\n201\n')).toBeUndefined();
    expect(outputMismatch(['{"a": 1}', '201'], '{"a":5}\n400\n')).toBeDefined();
    expect(outputMismatch(['{"b": {"c": true}}'], '{"b":{"c":false}}\n')).toBeDefined();
    expect(outputMismatch(['added: {"name":"x","ttl":64}'], 'added: {"name":"y","ttl":32,"sid":"z"}\n')).toBeUndefined();
  });
});

describe.skipIf(!isRoot)('doc examples, run against a daemon', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;
  let ns = '';

  beforeAll(async () => {
    lab = await Lab.create(['readme']);
    ns = lab.ns('readme');
    await lab.batch('readme', ['link add eth1 type veth peer name eth2', 'link set eth1 up', 'link set eth2 up']);
    d = new TestDaemon({ config: readFileSync(EXAMPLE, 'utf8'), netns: ns, instance: 'default' });
    await d.start();
  });

  afterAll(async () => {
    try {
      await d?.cleanup();
    } finally {
      await lab?.destroy();
    }
  });

  const shell = (command: string): string =>
    command.replaceAll(README_SOCKET, d!.socket).replace(/(^|[|;&(]\s*)mup /g, `$1node ${MUP_BIN} `);

  const run = (command: string): ReturnType<typeof execa> =>
    execa('ip', ['netns', 'exec', ns, 'bash', '-o', 'pipefail', '-c', `exec ${shell(command)}`], {
      reject: false,
      all: true,
      env: { MUP_SOCKET: d!.socket },
      timeout: 60_000,
    });

  /** Run until the output shows what is documented (or it exits), then Ctrl-C. */
  const runWatch = async (s: Step): Promise<{ exitCode: number | undefined; out: string; all: string }> => {
    const p = run(s.command);
    let out = '';
    p.stdout?.on('data', (c: Buffer) => (out += c.toString()));
    const exited = p.then(() => undefined);
    for (let i = 0; i < 300 && outputMismatch(s.output, out) !== undefined; i++) {
      const done = await Promise.race([exited.then(() => true), new Promise<false>((r) => setTimeout(() => r(false), 100))]);
      if (done) break;
    }
    p.kill('SIGINT');
    const r = await p;
    return { exitCode: r.exitCode, out: String(r.stdout), all: String(r.all) };
  };

  for (const { name, block } of docs.flatMap((doc) => extractBlocks(doc.text, doc.name).map((block) => ({ name: doc.name, block })))) {
    it(`${name}:${block.line}: ${block.steps.map((s) => s.command.split(' ').slice(0, 3).join(' ')).join('; ').slice(0, 100)}`, async () => {
      for (const s of block.steps) {
        let exitCode: number | undefined;
        let out: string;
        let all: string;
        if (/\bmup stats\b.*--watch/.test(s.command)) {
          ({ exitCode, out, all } = await runWatch(s));
        } else {
          const r = await run(s.command);
          exitCode = r.exitCode;
          out = String(r.stdout);
          all = String(r.all);
        }
        const context = `${name}:${block.line}: $ ${s.command}\n--- output ---\n${all}`;
        expect(exitCode, context).toBe(0);
        expect(outputMismatch(s.output, out), context).toBeUndefined();
      }
    });
  }
});
