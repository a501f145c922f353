/**
 * A config read, or its error, as a value two reads can be compared by
 * (test/unit/flat-rules.test.ts, test/unit/block-flat.test.ts): rules as
 * plain objects (local SIDs as their JSON, so their members' order
 * counts), warnings and errors as text with their lines, and with `spans`
 * the item spans a reload reads.
 */
import { ConfigError } from '../../src/config/errors.js';
import { itemSpansOf, type parseConfig } from '../../src/config/load.js';
import { plainRule } from '../../src/config/rows.js';

export function configOutcome(read: () => ReturnType<typeof parseConfig>, o: { readonly spans?: boolean } = {}): unknown {
  try {
    const c = read();
    const spans = o.spans === true ? itemSpansOf(c) : undefined;
    return {
      settings: c.settings,
      policies: c.policies.map((r) => plainRule(r)),
      localsids: JSON.stringify(c.localsids, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)),
      sessions: (c.sessions ?? []).map((r) => plainRule(r)),
      warnings: (c.warnings ?? []).map((w) => `${w.path}: ${w.reason} (line ${w.line ?? '-'})`),
      ...(o.spans === true ? { spans: spans === undefined ? undefined : Object.fromEntries(Object.entries(spans).map(([k, v]) => [k, [...v]])) } : {}),
    };
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    return `${e.path}: ${e.reason} (line ${e.line ?? '-'})`;
  }
}
