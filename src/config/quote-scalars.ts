/**
 * Which strings the running config's writers (`mup config show`, `mup
 * config save`: src/config/running.ts, src/config/running-splice.ts) must
 * quote. They write with the `yaml` package, which resolves plain scalars
 * by YAML 1.2's core schema; the config reader (src/config/block-yaml.ts,
 * and js-yaml behind it) resolves them by js-yaml's core schema, whose int
 * type also takes 0b101, 0o17, +0x1F, -0o7 and the like. So a rule named
 * 0b1 was written plain, read back as the number 1, and the output did not
 * load; a save, which reads back what it is about to write, was refused
 * with a 400 naming a line of a file it never wrote. The test is asked of
 * js-yaml's own implicit types (as block-yaml.ts resolves with them) rather
 * than copied as patterns, so the writer and the reader cannot drift apart.
 */
import jsyaml from 'js-yaml';
import type { Node, ToStringOptions } from 'yaml';
import { yamlDoc } from './yaml-doc.js';

/** The core schema's implicit types, in js-yaml's order (as src/config/block-yaml.ts takes them). */
const types = (jsyaml as unknown as { types: Record<'null' | 'bool' | 'int' | 'float', jsyaml.Type> }).types;
const IMPLICIT = [types.null, types.bool, types.int, types.float];

/**
 * Whether the config reader would read `s`, written as a plain scalar, as
 * something other than the string `s` (a null, a bool, a number). What
 * YAML's syntax makes of it (a leading `#`, a `: `, spaces at the ends) is
 * the same for both sides, and the `yaml` package quotes for that itself.
 */
export function readsAsNonString(s: string): boolean {
  // An empty plain scalar is null, which no implicit type is asked about.
  return s === '' || IMPLICIT.some((t) => t.resolve(s));
}

/** Whether any string in `v`, a key or a value at any depth, needs quoting. */
function hasNonStringLookalike(v: unknown): boolean {
  if (typeof v === 'string') return readsAsNonString(v);
  if (Array.isArray(v)) return v.some(hasNonStringLookalike);
  if (v !== null && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) if (readsAsNonString(k) || hasNonStringLookalike(x)) return true;
  }
  return false;
}

/**
 * Double-quotes each string scalar in `node` (keys included) that the
 * reader would read as something else. Only for nodes made from the rules'
 * JSON: a file's own node keeps its text, since the file loaded as it is
 * (its plain 0b101 is the number the reader made of it, not a string).
 */
export function quoteNonStringLookalikes(node: Node): void {
  yamlDoc().visit(node, {
    Scalar(_, n) {
      if (typeof n.value === 'string' && readsAsNonString(n.value)) n.type = 'QUOTE_DOUBLE';
    },
  });
}

/**
 * `json` as the `yaml` package's stringify writes it, but with the strings
 * the reader would not read back as themselves quoted. The plain stringify
 * unless some string needs it: an API rule's JSON almost never has one, and
 * a splice writes up to 131,072 of them.
 */
export function stringifyForReader(json: unknown, options: ToStringOptions): string {
  const y = yamlDoc();
  if (!hasNonStringLookalike(json)) return y.stringify(json, options);
  const doc = new y.Document(json);
  if (doc.contents !== null) quoteNonStringLookalikes(doc.contents);
  return doc.toString(options);
}

/**
 * A file's own plain scalars that the `yaml` package resolved as numbers and
 * the reader reads as strings (`-.5`, `+.5`, `1e400`: YAML 1.2 floats, no
 * number to js-yaml's core schema), turned back into those strings, quoted.
 * The document path of `config show` / `save` wrote them as the `yaml`
 * package renders the number (`-0.5`, `.inf`), and the output no longer
 * loaded (found in review, session 42). `text` is the text the document was
 * parsed from (a scalar's range is its source there).
 */
export function keepReaderStrings(node: Node, text: string): void {
  yamlDoc().visit(node, {
    Scalar(_, n) {
      if (n.type !== 'PLAIN' || typeof n.value !== 'number' || n.range === undefined || n.range === null) return;
      const source = text.slice(n.range[0], n.range[1]).trim();
      if (source !== '' && !readsAsNonString(source)) {
        n.value = source;
        n.type = 'QUOTE_DOUBLE';
      }
    },
  });
}
