/**
 * What the daemon's start loads: the compiled CLI (dist/cli/main.js, what
 * bin/mup.js runs) must not load the `yaml` package up front. It is needed
 * only for a config error's line number and for config show/save
 * (src/config/yaml-doc.ts); loading it at the top cost every start 50-90 ms
 * (docs/bench.md, issue 19, session 11). Nor execa: only `gobgp` commands
 * (src/bgp/gobgpd.ts) run through it, and loading it (cross-spawn, which,
 * human-signals and more) cost every command and start 70-130 ms (session
 * 21). Checked in a fresh node, on dist/.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '../..');

/** Modules of a package under node_modules that `script` (run as an ES module in a fresh node) leaves loaded. */
function loaded(script: string, pkg: string): number {
  const probe = `${script}
const { createRequire } = await import('node:module');
const cache = createRequire(import.meta.url).cache;
process.stdout.write(String(Object.keys(cache).filter((k) => k.includes('/node_modules/${pkg}/')).length));`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', probe], { cwd: ROOT, encoding: 'utf8' });
  expect(r.stderr).toBe('');
  return Number(r.stdout);
}

describe('modules loaded at start', () => {
  it('the CLI and daemon load no module of the yaml package until a line number or config show/save needs it', () => {
    if (!existsSync(join(ROOT, 'dist/cli/main.js'))) throw new Error('dist/ is missing: run `make` (make test builds it)');
    expect(loaded(`await import('./dist/cli/main.js');`, 'yaml')).toBe(0);
    // The same probe sees it once something asks for it (so the 0 above is not a probe that cannot see).
    expect(loaded(`const { yamlDoc } = await import('./dist/config/yaml-doc.js'); yamlDoc();`, 'yaml')).toBeGreaterThan(0);
  });

  it('the CLI and the daemon load execa only when a gobgp command runs', () => {
    if (!existsSync(join(ROOT, 'dist/cli/main.js'))) throw new Error('dist/ is missing: run `make` (make test builds it)');
    // execa is an ES module; cross-spawn, which it loads, is CommonJS and shows in require's cache.
    expect(loaded(`await import('./dist/cli/main.js'); await import('./dist/daemon/serve.js');`, 'cross-spawn')).toBe(0);
    expect(loaded(`await import('execa');`, 'cross-spawn')).toBeGreaterThan(0);
  });
});
