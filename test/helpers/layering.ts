/**
 * The import rules of src/, checked from the sources: every relative import
 * (static `import`/`export ... from`, `import type`, dynamic `import('...')`
 * with a literal) is mapped to the module it lands in (the first directory
 * under src/), and each must point down the layering below, never up or
 * sideways; no file-level and no module-level import cycle.
 *
 * The allowed layering of src/ is written here and nowhere else.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, posix, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/**
 * Bottom to top. A module may import any module of a lower layer; within a
 * layer only the pairs of SIDEWAYS. `host` is the small OS helpers (default
 * paths, processes, namespace sweeping), `plot` the SVG plotting primitives
 * (src/plot/svg.ts, used by probe, bench and lab); sid, config and dataplane form the
 * bottom of the product, in that order; `packet` is the frame builders and
 * the live-frame generator that probe, bench and lab share; `bgp` is the
 * BGP MUP side (GoBGP process and routes), which the daemon and the lab use;
 * then the middle layer of features, which stand beside each other; the CLI on top.
 */
export const LAYERS: readonly (readonly string[])[] = [
  ['host', 'plot'],
  ['sid'],
  ['config'],
  ['dataplane'],
  ['packet'],
  ['bgp'],
  ['daemon', 'probe', 'bench', 'lab'],
  ['cli'],
];

/**
 * Sideways imports allowed within a layer: [from, to]. bench builds on probe (the RFC 2544 latency steps are the
 * probe's) and on daemon's pieces where it measures one in a process of its own (bench:compaction: the state
 * file's StateStore); never the other way.
 */
export const SIDEWAYS: readonly (readonly [string, string])[] = [
  ['bench', 'probe'],
  ['bench', 'daemon'],
];

export interface Import {
  /** Importing file, relative to the source root, with '/' separators (e.g. 'probe/probe.ts'). */
  readonly from: string;
  /** 1-based line of the specifier. */
  readonly line: number;
  /** The specifier as written. */
  readonly spec: string;
  /** The imported file, relative to the source root ('dataplane/codec.ts'), or undefined for a package. */
  readonly to: string | undefined;
}

export interface Rules {
  readonly layers: readonly (readonly string[])[];
  readonly sideways: readonly (readonly [string, string])[];
}

/** The module of a file (its first directory), or undefined for a file at the root. */
export function moduleOf(file: string): string | undefined {
  const i = file.indexOf('/');
  return i < 0 ? undefined : file.slice(0, i);
}

/** The relative imports of one source text (`file` relative to the root, '/'-separated). */
export function importsOf(file: string, text: string): Import[] {
  const info = ts.preProcessFile(text, true, true);
  const lineOf = (pos: number): number => text.slice(0, pos).split('\n').length;
  const out: Import[] = [];
  for (const f of info.importedFiles) {
    const spec = f.fileName;
    if (!spec.startsWith('.')) {
      out.push({ from: file, line: lineOf(f.pos), spec, to: undefined });
      continue;
    }
    // The sources import 'x.js' for 'x.ts' (NodeNext).
    const target = posix.normalize(posix.join(posix.dirname(file), spec)).replace(/\.js$/, '.ts');
    out.push({ from: file, line: lineOf(f.pos), spec, to: target });
  }
  return out;
}

/** Every .ts file under `root`, relative to it, '/'-separated. */
export function sourceFiles(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      // Plain JavaScript modules too (a thread's script run without a TypeScript loader: bench/status-poll.mjs).
      else if ((e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) || e.name.endsWith('.mjs')) out.push(relative(root, p).split(sep).join('/'));
    }
  };
  walk(root);
  return out.sort();
}

/** The imports of every .ts file under `root`. */
export function scanTree(root: string): Import[] {
  return sourceFiles(root).flatMap((f) => importsOf(f, readFileSync(join(root, f), 'utf8')));
}

/** Cycles of a directed graph (Tarjan's strongly connected components of more than one node, or a self-loop). */
export function cycles(edges: ReadonlyMap<string, ReadonlySet<string>>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const strong = (v: string): void => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v) ?? []) {
      if (!idx.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, idx.get(w)!));
      }
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || edges.get(v)?.has(v)) out.push(scc.sort());
    }
  };
  for (const v of [...edges.keys()].sort()) if (!idx.has(v)) strong(v);
  return out;
}

/**
 * What is wrong with a set of imports under the rules: one line per
 * offending import (`file:line imports spec: why`) and one per cycle.
 * `files`: every file of the tree (an import of a file not among them is
 * reported, so a stale path cannot pass unseen).
 */
export function violations(imports: readonly Import[], files: readonly string[], rules: Rules = { layers: LAYERS, sideways: SIDEWAYS }): string[] {
  const layerOf = new Map<string, number>();
  rules.layers.forEach((mods, i) => mods.forEach((m) => layerOf.set(m, i)));
  const known = new Set(files);
  const problems: string[] = [];
  for (const f of files) {
    const m = moduleOf(f);
    if (m === undefined) problems.push(`${f}: a file at the root of src/ is in no layer; move it into a module`);
    else if (!layerOf.has(m)) problems.push(`${f}: module ${m} is in no layer; add it to LAYERS (test/helpers/layering.ts)`);
  }
  const fileEdges = new Map<string, Set<string>>();
  const modEdges = new Map<string, Set<string>>();
  const add = (g: Map<string, Set<string>>, a: string, b: string): void => {
    if (!g.has(a)) g.set(a, new Set());
    g.get(a)!.add(b);
  };
  for (const i of imports) {
    if (i.to === undefined) continue;
    const at = `${i.from}:${i.line} imports '${i.spec}'`;
    if (i.to.startsWith('../')) {
      problems.push(`${at}: outside the source tree`);
      continue;
    }
    if (!known.has(i.to)) {
      problems.push(`${at}: no such file ${i.to}`);
      continue;
    }
    add(fileEdges, i.from, i.to);
    const a = moduleOf(i.from);
    const b = moduleOf(i.to);
    if (a === undefined || b === undefined || a === b) continue;
    add(modEdges, a, b);
    const la = layerOf.get(a);
    const lb = layerOf.get(b);
    if (la === undefined || lb === undefined) continue;
    if (lb > la) problems.push(`${at}: upward (${a} is below ${b})`);
    else if (lb === la && !rules.sideways.some(([x, y]) => x === a && y === b)) problems.push(`${at}: sideways (${a} and ${b} stand beside each other; move what both need down)`);
  }
  for (const c of cycles(fileEdges)) problems.push(`import cycle between files: ${c.join(', ')} (each reaches the others)`);
  for (const c of cycles(modEdges)) problems.push(`import cycle between modules: ${c.join(', ')} (each reaches the others)`);
  return problems;
}

/** The source root of this repository. */
export const SRC = fileURLToPath(new URL('../../src', import.meta.url));
