/**
 * A string that keeps no other string alive. V8 makes a substring of 13
 * characters or more a slice of its parent (and a concatenation of 13 or
 * more a pair of its parts), and a slice keeps its whole parent: one rule
 * name, map key or warning read from a YAML config file and kept kept the
 * file's whole text (11.6 MB for bench:daemon's) for the life of the
 * daemon. The config reader gives what it keeps from a YAML text through
 * here (test/unit/config.test.ts measures what a read keeps). JSON.parse
 * makes strings of its own: its input needs none of this.
 */

/** Shorter strings are copies already: V8 neither slices nor pairs them. */
const SHORT = 13;

export function ownCopy(s: string): string {
  // A flat string of its own, any characters (a slice of a small copy,
  // (' ' + s).slice(1), would do too, at 30 bytes more a string).
  return s.length < SHORT ? s : (JSON.parse(JSON.stringify(s)) as string);
}
