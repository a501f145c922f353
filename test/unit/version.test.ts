/**
 * src/host/version.ts: the version GET /v1/status and `mup --version` give
 * is the running code's, read once. Before, every status request read
 * package.json again, so a package upgraded under a running daemon made it
 * claim the new version while the old code ran. The module is run from a
 * copy of the build beside a package.json of its own, which the test then
 * rewrites.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const DIST_HOST = fileURLToPath(new URL('../../dist/host/', import.meta.url));
let dir: string | undefined;
afterEach(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

/** The build's version module in a temp package whose package.json is `text` (none: undefined). */
function packageCopy(text: string | undefined): string {
  dir = mkdtempSync(join(tmpdir(), 'mup-version-'));
  mkdirSync(join(dir, 'dist', 'host'), { recursive: true });
  for (const f of ['version.js', 'paths.js']) copyFileSync(join(DIST_HOST, f), join(dir, 'dist', 'host', f));
  // What makes the copies ES modules, whatever the package's own file holds.
  writeFileSync(join(dir, 'dist', 'package.json'), '{"type":"module"}');
  if (text !== undefined) writeFileSync(join(dir, 'package.json'), text);
  return dir;
}

/** runningVersion() before and after package.json is rewritten to 9.9.9 in the same process. */
function beforeAndAfterUpgrade(root: string): [string, string] {
  const script = `
    import { writeFileSync } from 'node:fs';
    import { runningVersion } from ${JSON.stringify(join(root, 'dist', 'host', 'version.js'))};
    const before = runningVersion();
    writeFileSync(${JSON.stringify(join(root, 'package.json'))}, JSON.stringify({ version: '9.9.9' }));
    process.stdout.write(JSON.stringify([before, runningVersion()]));`;
  return JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })) as [string, string];
}

describe('runningVersion', () => {
  it('is read once: an upgrade on disk under a running process does not change it', () => {
    expect(beforeAndAfterUpgrade(packageCopy('{"version":"1.2.3"}'))).toEqual(['1.2.3', '1.2.3']);
  });

  it.each([
    ['no version', '{}'],
    ['a version that is not a string', '{"version":7}'],
    ['null', 'null'],
    ['not JSON', '{"version":'],
    ['no package.json', undefined],
  ])("says 'unknown', never throws, for %s", (_what, text) => {
    expect(beforeAndAfterUpgrade(packageCopy(text))).toEqual(['unknown', 'unknown']);
  });
});
