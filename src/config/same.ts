/**
 * Two parsed rules (or any parsed config values) equal as data: what a
 * reload compares rule by rule (src/daemon/rules.ts sameRule), and what
 * its parse compares to keep the running rule object where the file did
 * not change it (src/config/parse-async.ts).
 */
import { plainRule } from './rows.js';

/** a and b equal as data; `skip`: a key of theirs (not of nested objects) left out. */
export function sameData(x: unknown, y: unknown, skip?: string): boolean {
  if (x === y) return true;
  if (typeof x !== 'object' || typeof y !== 'object' || x === null || y === null) return false;
  // A rule kept as a row (src/config/rows.ts) has no own fields: compared as the object it stands for.
  const a = plainRule(x);
  const b = plainRule(y);
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameData(a[i], b[i])) return false;
    return true;
  }
  if (ArrayBuffer.isView(a)) {
    if (!ArrayBuffer.isView(b) || a.byteLength !== b.byteLength) return false;
    return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
  }
  if (Array.isArray(b) || ArrayBuffer.isView(b)) return false;
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  for (const k of ka) {
    if (k === skip) continue;
    if (!Object.hasOwn(b, k) || !sameData((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return false;
  }
  return true;
}
