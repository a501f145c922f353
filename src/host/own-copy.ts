/**
 * A string that keeps no other string alive. V8 makes a substring of 13
 * characters or more a slice of its parent (and a concatenation of 13 or
 * more a pair of its parts), and a slice keeps its whole parent: one rule
 * name or map key read from a config file and kept kept the file's whole
 * text (11.6 MB for bench:daemon's) for the life of the daemon. A config
 * reader gives what it keeps through here (test/unit/config.test.ts
 * measures what a read keeps).
 */

/** Shorter strings are copies already: V8 neither slices nor pairs them. */
const SHORT = 13;

export function ownCopy(s: string): string {
  // The pair (' ' + s) is made flat, into a new string of its own, by the
  // slice: the result is a slice of that small string only.
  return s.length < SHORT ? s : (' ' + s).slice(1);
}
