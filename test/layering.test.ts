/**
 * The imports of src/ point down only (the layering of test/helpers/layering.ts):
 * no upward or sideways import, no cycle. The checker is tested on planted
 * trees too, so that this test can fail.
 */
import { describe, expect, it } from 'vitest';
import { importsOf, scanTree, SRC, sourceFiles, violations, type Import } from './helpers/layering.js';

describe('src/ layering', () => {
  it('every import of src/ points down, and no import cycle', () => {
    const files = sourceFiles(SRC);
    const imports = scanTree(SRC);
    // The scan finds the imports it should (a broken scan must not pass as a clean tree).
    expect(files.length).toBeGreaterThan(50);
    expect(imports.filter((i) => i.to !== undefined).length).toBeGreaterThan(200);
    expect(violations(imports, files)).toEqual([]);
  });
});

describe('the layering checker', () => {
  const tree = (sources: Record<string, string>): { imports: Import[]; files: string[] } => ({
    files: Object.keys(sources).sort(),
    imports: Object.entries(sources).flatMap(([f, t]) => importsOf(f, t)),
  });

  it('passes downward imports, type imports, re-exports and bench -> probe', () => {
    const t = tree({
      'sid/addr.ts': "import { x } from 'node:fs';\n",
      'config/load.ts': "import { a } from '../sid/addr.js';\n",
      'dataplane/codec.ts': "import type { C } from '../config/load.js';\nexport * from '../sid/addr.js';\n",
      'probe/run.ts': "const m = await import('../dataplane/codec.js');\n",
      'bench/run.ts': "import { r } from '../probe/run.js';\n",
      'cli/main.ts': "import { r } from '../bench/run.js';\nimport { p } from '../probe/run.js';\n",
    });
    expect(violations(t.imports, t.files)).toEqual([]);
  });

  it('fails on an upward import, with file:line', () => {
    const t = tree({
      'config/load.ts': '',
      'dataplane/btf.ts': "import { a } from '../config/load.js';\n\nimport { PROBE_LAYOUTS } from '../probe/layout.js';\n",
      'probe/layout.ts': '',
    });
    expect(violations(t.imports, t.files)).toEqual(["dataplane/btf.ts:3 imports '../probe/layout.js': upward (dataplane is below probe)"]);
  });

  it('fails on a sideways import of the middle layer (and on probe -> bench: only bench -> probe is allowed)', () => {
    const t = tree({
      'daemon/api.ts': "import { setProbe } from '../probe/control.js';\n",
      'probe/control.ts': '',
      'probe/sweep.ts': "const { Generator } = await import('../bench/generator.js');\n",
      'bench/generator.ts': '',
    });
    expect(violations(t.imports, t.files)).toEqual([
      "daemon/api.ts:1 imports '../probe/control.js': sideways (daemon and probe stand beside each other; move what both need down)",
      "probe/sweep.ts:1 imports '../bench/generator.js': sideways (probe and bench stand beside each other; move what both need down)",
    ]);
  });

  it('fails on a file import cycle, type-only imports included', () => {
    const t = tree({
      'cli/probe.ts': "import { registerLoadgen } from './probe-sweep.js';\n",
      'cli/probe-sweep.ts': "import type { ProbeCliOpts } from './probe.js';\n",
      'cli/main.ts': "import { registerProbe } from './probe.js';\n",
    });
    expect(violations(t.imports, t.files)).toEqual(['import cycle between files: cli/probe-sweep.ts, cli/probe.ts (each reaches the others)']);
  });

  it('fails on a module cycle (with the upward import that closes it)', () => {
    const t = tree({
      'sid/a.ts': "import { b } from '../config/b.js';\n",
      'config/b.ts': "import { a } from '../sid/a.js';\n",
    });
    expect(violations(t.imports, t.files)).toEqual([
      "sid/a.ts:1 imports '../config/b.js': upward (sid is below config)",
      'import cycle between files: config/b.ts, sid/a.ts (each reaches the others)',
      'import cycle between modules: config, sid (each reaches the others)',
    ]);
  });

  it('fails on an import out of src/ (src/ must not import test/)', () => {
    const t = tree({ 'bench/fuzz.ts': "import { model } from '../../test/model/rfc9433.js';\n" });
    expect(violations(t.imports, t.files)).toEqual(["bench/fuzz.ts:1 imports '../../test/model/rfc9433.js': outside the source tree"]);
  });

  it('fails on a file at the root of src/, an unknown module and an import of a missing file', () => {
    const t = tree({
      'paths.ts': '',
      'misc/x.ts': "import { y } from '../sid/gone.js';\n",
    });
    expect(violations(t.imports, t.files)).toEqual([
      'misc/x.ts: module misc is in no layer; add it to LAYERS (test/helpers/layering.ts)',
      'paths.ts: a file at the root of src/ is in no layer; move it into a module',
      "misc/x.ts:1 imports '../sid/gone.js': no such file sid/gone.ts",
    ]);
  });
});
