/**
 * Where things are by default. Kept apart from the modules that use them so
 * that the CLI can name them (option defaults, `--help`) without loading
 * libbpf, the daemon or the metrics library: `mup status` starts in a
 * fraction of the time.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** <repo>/build/mup.bpf.o, from src/host/ or dist/host/ alike. */
export const DEFAULT_OBJECT = fileURLToPath(new URL('../../build/mup.bpf.o', import.meta.url));

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
