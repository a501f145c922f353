/**
 * A rule kept as a row (src/config/rows.ts) equals, in toEqual, the plain
 * rule object it stands for: its fields are getters, not own properties,
 * so without this a config read from a file (rows) never equals the same
 * config read otherwise (objects). sameData compares them the same way.
 */
import { expect } from 'vitest';
import { isRow, plainRule } from '../../src/config/rows.js';

expect.addEqualityTesters([
  function rowsAsPlain(a: unknown, b: unknown, customTesters) {
    if (!isRow(a) && !isRow(b)) return undefined;
    return this.equals(plainRule(a), plainRule(b), customTesters);
  },
]);

// And prints as it in snapshots. A failed toEqual still says "no visual difference" for rows (vitest
// copies the compared values by their own keys before the diff): compare plainRule(x) to see the fields.
expect.addSnapshotSerializer({
  test: (v: unknown) => isRow(v),
  serialize: (v, config, indentation, depth, refs, printer) => `${(v as object).constructor.name} ${printer(plainRule(v), config, indentation, depth, refs)}`,
});
