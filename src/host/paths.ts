/**
 * Where things are by default. Kept apart from the modules that use them so
 * that the CLI can name them (option defaults, `--help`) without loading
 * libbpf, the daemon or the metrics library: `mup status` starts in a
 * fraction of the time.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The package's root: a checkout, the installed package (/usr/lib/srv6-mup
 * from the .deb or `make install`, <prefix>/lib/node_modules/srv6-mup from
 * `npm i -g`), from src/host/ or dist/host/ alike. Every layout keeps the
 * checkout's: bin/, dist/, build/*.bpf.o, native/build/Release/ (docs/install.md).
 */
export const PACKAGE_ROOT = join(fileURLToPath(new URL('.', import.meta.url)), '..', '..');

/** <root>/build/mup.bpf.o: the installed program finds its own, no checkout needed. */
export const DEFAULT_OBJECT = join(PACKAGE_ROOT, 'build', 'mup.bpf.o');

/** Written by `make` (scripts/build-info.sh): the git commit the build came from. */
export const BUILD_INFO = join(PACKAGE_ROOT, 'build', 'build-info.json');

/** The bpf filesystem the daemon pins under (mup/<instance>/). */
export const DEFAULT_BPFFS = '/sys/fs/bpf';

export function defaultSocket(instance: string): string {
  return `/run/mup/${instance}.sock`;
}

export function defaultStateFile(instance: string): string {
  return `/var/lib/mup/${instance}.state.json`;
}

/** The directory of an instance's pins in a bpf filesystem (src/daemon/pins.ts describes what is in it). */
export function pinDir(bpffs: string, instance: string): string {
  return join(bpffs, 'mup', instance);
}
