/**
 * Run a few lines as a file module in a child node, with named exports of
 * the compiled dist/ imported first (make test builds it), as the CLI runs
 * them: for what only a process's exit shows (test/unit/grace-exit.test.ts,
 * test/unit/write-thread-exit.test.ts), or what runs on one CPU
 * (test/counters-cpu.test.ts). Returns the child's stdout.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/**
 * `imports`: export name -> module path under dist/ (e.g. { graceClock: 'dataplane/grace.js' }).
 * `o.cpu`: run the child on that CPU only (taskset).
 */
export function runDistChild(imports: Record<string, string>, source: string, env: Record<string, string> = {}, o: { readonly cpu?: number } = {}): string {
  const lines: string[] = [];
  for (const [name, module] of Object.entries(imports)) {
    const file = join(ROOT, 'dist', module);
    if (!existsSync(file)) throw new Error('dist/ is missing: run `make` (make test builds it)');
    lines.push(`import { ${name} } from ${JSON.stringify(pathToFileURL(file).href)};`);
  }
  const dir = mkdtempSync(join(tmpdir(), 'mup-dist-child-'));
  try {
    const child = join(dir, 'child.mjs');
    writeFileSync(child, `${lines.join('\n')}\n${source}`);
    const [file, args] = o.cpu === undefined ? [process.execPath, [child]] : ['taskset', ['-c', String(o.cpu), process.execPath, child]];
    return execFileSync(file, args, { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 30_000 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
