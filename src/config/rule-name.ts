/**
 * What a rule's name may be (docs/config.md, "Rule names"): read by the
 * rule readers (readRuleName in src/config/load.ts) and by the flat readers
 * (src/config/flat-rules.ts), from this one definition.
 */

/** The longest rule name. */
export const RULE_NAME_MAX = 64;

/** One character of a rule name: letters, digits and . _ : / @ + - (it goes as it is into listings, logs and /metrics labels). */
export const RULE_NAME_CHAR = /[A-Za-z0-9._:/@+-]/u;
