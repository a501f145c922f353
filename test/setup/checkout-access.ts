/**
 * vitest global setup: several tests run the CLI as an unprivileged user
 * (setpriv to a user they create, or nobody) from this checkout. A checkout
 * under a private directory (`d=$(mktemp -d)` is mode 0700) cannot be
 * reached by that user, and node fails with MODULE_NOT_FOUND instead of the
 * behaviour under test. For the run, each ancestor directory of the
 * checkout that others cannot traverse gets o+x (search only, no listing);
 * the modes are put back at the end.
 */
import { chmodSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

export default function setup(): () => void {
  const changed: { dir: string; mode: number }[] = [];
  for (let dir = ROOT; ; dir = dirname(dir)) {
    const mode = statSync(dir).mode & 0o7777;
    if ((mode & 0o001) === 0) {
      chmodSync(dir, mode | 0o001);
      changed.push({ dir, mode });
    }
    if (dirname(dir) === dir) break;
  }
  return () => {
    for (const { dir, mode } of changed.reverse()) {
      try {
        chmodSync(dir, mode);
      } catch {
        // gone: nothing to restore
      }
    }
  };
}
