/**
 * The README's examples, run: every ```sh block right after an HTML comment
 * `<!-- readme-test -->` is a script of commands (`$ ` lines) and the output
 * each one prints (the lines after it). They run in README order against one
 * real daemon (TestDaemon, instance "default") on config/daemon.example.yaml,
 * in a namespace this file creates, attached to the veth pair eth1/eth2 that
 * the example config names.
 *
 * Each command runs with bash inside that namespace (so the example's HTTP
 * listener on 127.0.0.1:9180 answers), `mup` replaced by `node bin/mup.js`
 * with MUP_SOCKET set to the test daemon's socket, and the README's socket
 * path /run/mup/default.sock replaced by it. It must exit 0. Where the README
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
 * `mup stats --watch` runs until its output shows what the README shows,
 * then gets SIGINT (as Ctrl-C) and must exit 0.
 *
 * Also, without root: config/daemon.example.yaml and every ```yaml block of
 * the README are valid configs.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { MUP_BIN, TestDaemon } from './helpers/daemon.js';
import { Lab } from './helpers/netns.js';

const isRoot = process.getuid?.() === 0;
const README = fileURLToPath(new URL('../README.md', import.meta.url));
const EXAMPLE = fileURLToPath(new URL('../config/daemon.example.yaml', import.meta.url));
const MARK = '<!-- readme-test -->';
const README_SOCKET = '/run/mup/default.sock';

interface Step {
  readonly command: string;
  /** Documented output lines (blank lines left out). */
  readonly output: readonly string[];
}

interface Block {
  /** 1-based line of the opening fence in README.md. */
  readonly line: number;
  readonly steps: readonly Step[];
}

/** The marked ```sh blocks of a markdown text. */
export function extractBlocks(md: string): Block[] {
  const lines = md.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.trim() !== MARK) continue;
    let j = i + 1;
    while (j < lines.length && lines[j]!.trim() === '') j++;
    if (!/^```(sh|bash|shell)\s*$/.test(lines[j] ?? '')) throw new Error(`README.md:${i + 1}: ${MARK} must be followed by a \`\`\`sh block`);
    const start = j;
    const steps: { command: string; output: string[] }[] = [];
    for (j = start + 1; j < lines.length && !lines[j]!.startsWith('```'); j++) {
      const l = lines[j]!;
      if (l.startsWith('$ ')) steps.push({ command: l.slice(2), output: [] });
      else if (l.trim() === '') continue;
      else if (steps.length === 0) throw new Error(`README.md:${j + 1}: output before the first "$ " command`);
      else steps.at(-1)!.output.push(l);
    }
    if (j >= lines.length) throw new Error(`README.md:${start + 1}: block not closed`);
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

const readme = readFileSync(README, 'utf8');

describe('README examples (static)', () => {
  it('config/daemon.example.yaml is a valid config with interfaces and daemon sections', () => {
    const c = parseConfig(readFileSync(EXAMPLE, 'utf8'), EXAMPLE);
    expect(c.warnings ?? []).toEqual([]);
    expect(c.interfaces?.map((i) => [i.name, i.xdp])).toEqual([
      ['eth1', 'native'],
      ['eth2', 'native'],
    ]);
    expect(c.daemon?.socket).toBe(README_SOCKET);
    expect(c.daemon?.http).toEqual({ host: '127.0.0.1', port: 9180 });
    expect(c.policies.length).toBeGreaterThan(0);
    expect(c.localsids.length).toBeGreaterThan(0);
  });

  it('every yaml block of the README is a valid config', () => {
    const blocks = yamlBlocks(readme);
    expect(blocks.length).toBeGreaterThanOrEqual(2);
    for (const b of blocks) {
      expect(() => parseConfig(b.text, `README.md:${b.line}`), `README.md:${b.line}`).not.toThrow();
    }
  });

  it('finds the marked blocks, each with commands', () => {
    const blocks = extractBlocks(readme);
    expect(blocks.length).toBeGreaterThanOrEqual(5);
    for (const b of blocks) expect(b.steps.length, `README.md:${b.line}`).toBeGreaterThan(0);
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

describe.skipIf(!isRoot)('README examples, run against a daemon', () => {
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

  for (const block of extractBlocks(readme)) {
    it(`README.md:${block.line}: ${block.steps.map((s) => s.command.split(' ').slice(0, 3).join(' ')).join('; ').slice(0, 100)}`, async () => {
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
        const context = `README.md:${block.line}: $ ${s.command}\n--- output ---\n${all}`;
        expect(exitCode, context).toBe(0);
        expect(outputMismatch(s.output, out), context).toBeUndefined();
      }
    });
  }
});
