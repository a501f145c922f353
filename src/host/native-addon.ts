/**
 * The native addon (native/, node-addon-api, built by `make native`):
 * where it is and loading it, once. The probe's timestamping sockets
 * (src/probe/native.ts, typed there) and the daemon's heap compaction
 * (src/daemon/memory.ts) both use it.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

/** Where `make native` puts the addon (from src/host or dist/host alike). */
export const ADDON_PATH = fileURLToPath(new URL('../../native/build/Release/mup_tstamp.node', import.meta.url));

let addon: unknown;

/** The addon's exports, loaded once. Throws an Error with code ENOENT and `make native` as the fix when it is not built. */
export function loadNativeAddon(): unknown {
  if (addon !== undefined) return addon;
  if (!existsSync(ADDON_PATH)) {
    throw Object.assign(new Error(`the native addon is not built (${ADDON_PATH} is missing): run \`make native\` (needs python3, make, g++)`), { code: 'ENOENT' });
  }
  addon = createRequire(import.meta.url)(ADDON_PATH) as unknown;
  return addon;
}
