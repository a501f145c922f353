/**
 * The version of the code this process runs: package.json's `version`, read
 * once, the first time it is asked for (the daemon asks as it starts). A
 * package upgraded on disk under a running daemon does not change what the
 * daemon says it runs (GET /v1/status `version`, `mup_build_info`): the
 * code in memory is still the old one until a restart. Also no file read
 * per status request.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PACKAGE_ROOT } from './paths.js';

let running: string | undefined;

/**
 * package.json's version; 'unknown' when it has none, or cannot be read or
 * parsed (a version is never a reason to refuse to run). Read once per process.
 */
export function runningVersion(): string {
  if (running === undefined) {
    try {
      const pkg = JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8')) as { version?: unknown } | null;
      running = typeof pkg?.version === 'string' ? pkg.version : 'unknown';
    } catch {
      running = 'unknown';
    }
  }
  return running;
}
