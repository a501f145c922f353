/**
 * The running config as a YAML file (`mup config show`, `mup config save`):
 * the config file as it was loaded, with each rule section replaced by the
 * rules that run (file and API changes, in the daemon's order). Built on the
 * file's own document (the `yaml` package keeps comments): an entry the API
 * left alone is the file's own node, comments and all; an entry the API
 * replaced keeps the comments of the one it replaces; a deleted entry goes
 * with its comments; everything outside the rule sections is untouched.
 * For a file whose entries' places are known (block YAML) the thread
 * splices the text instead (src/config/running-splice.ts: 13-15 s -> about
 * 1 s at 131,072 rules); this is the way for the others (JSON, flow style).
 * Docs: docs/config.md, "Running, saved and API config".
 */
import jsyaml from 'js-yaml';
import type { Document as YamlDocument, Node, YAMLSeq } from 'yaml';
import { keepReaderStrings, quoteNonStringLookalikes } from './quote-scalars.js';
import { yamlDoc } from './yaml-doc.js';

export interface RunningRule {
  readonly key: string;
  /** As the config file spells it. */
  readonly json: Record<string, unknown>;
  readonly origin: 'config' | 'api';
  /** Its position in the file's section, when it is the file's entry unchanged. */
  readonly fileIndex?: number | undefined;
  /** The position of the file's entry it replaces (an API change of a file rule). */
  readonly replacesIndex?: number | undefined;
}

export interface RunningSection {
  readonly section: string;
  readonly rules: readonly RunningRule[];
}

const ORIGIN = /^ ?origin: (api|config)$/;

/** A comment without its origin lines (a file saved from `config show` output has them). */
function withoutOrigin(comment: string | null | undefined): string | undefined {
  const lines = (comment ?? '').split('\n').filter((l) => !ORIGIN.test(l));
  return lines.join('\n').trim() === '' ? undefined : lines.join('\n');
}

function stripOrigin(node: Node): void {
  const c = withoutOrigin(node.commentBefore);
  if (c === undefined) delete node.commentBefore;
  else node.commentBefore = c;
}

/** `# origin: ...` as the last line of a node's comment before it (an earlier one replaced). */
function setOrigin(node: Node, origin: string): void {
  const before = withoutOrigin(node.commentBefore);
  node.commentBefore = `${before === undefined ? '' : `${before}\n`} origin: ${origin}`;
}

/**
 * Every alias replaced by a copy of what it names, and the anchors dropped:
 * an entry the API deleted or replaced may hold an anchor a later entry's
 * alias names, and an entry deleted and added back goes after them; either
 * way the alias came before its anchor, or had none ("Unresolved alias"),
 * and show and save failed for a file that loads (found in review, session
 * 43). The values are the same; the saved file writes them out.
 */
function resolveAliases(doc: YamlDocument.Parsed): void {
  const { visit } = yamlDoc();
  let aliases = false;
  visit(doc, {
    Alias(_k, node) {
      aliases = true;
      const target = node.resolve(doc);
      return target === undefined ? undefined : (target.clone() as Node);
    },
  });
  if (!aliases) return;
  visit(doc, {
    Node(_k, node) {
      if ((node as { anchor?: string }).anchor !== undefined) (node as { anchor?: string }).anchor = undefined;
    },
  });
}

export function runningConfigYaml(fileText: string, sections: readonly RunningSection[], o: { origins: boolean }): string {
  const { Document, isMap, isScalar, isSeq, parseDocument } = yamlDoc();
  let doc = parseDocument(fileText);
  if (doc.errors.length > 0) {
    // A file the reader (js-yaml) loads and the `yaml` package's document refuses (a flow sequence whose items
    // start at column 0, a comment right after a ",": found in review, session 43) could never be shown or
    // saved. Its values as the reader read them, in a document of their own: the file's comments and layout
    // are lost, its rules are not (a save reads what it writes back, as always).
    let values: unknown;
    try {
      values = jsyaml.load(fileText, { schema: jsyaml.CORE_SCHEMA });
    } catch {
      throw new Error(`the loaded config no longer parses as a document: ${doc.errors[0]!.message}`);
    }
    doc = new Document(values ?? {}) as typeof doc;
    if (doc.contents !== null) quoteNonStringLookalikes(doc.contents);
  }
  // An empty document: no contents, or a null scalar ("---", "~", "null", "..." alone, as templates write an
  // empty file). The reader loads it as no rules; a section could not be added to the scalar (found in review,
  // session 43: "Expected a YAML collection as document contents" for any API add).
  if (doc.contents === null || (isScalar(doc.contents) && doc.contents.value === null)) doc.contents = doc.createNode({}) as never;
  else {
    resolveAliases(doc);
    // The file's scalars as the reader read them, not as the `yaml` package would print its own reading.
    keepReaderStrings(doc.contents, fileText);
  }
  for (const s of sections) {
    const old = doc.get(s.section, true);
    const oldItems = isSeq(old) ? (old.items as Node[]) : [];
    if (s.rules.length === 0 && !isSeq(old)) continue;
    const seq = (isSeq(old) ? old : doc.createNode([])) as YAMLSeq;
    // The parser may hang the first entry's comment on the sequence: origins are per entry, never there.
    stripOrigin(seq);
    if (!o.origins) for (const n of oldItems) stripOrigin(n);
    // Comments read best above block entries: a flow sequence becomes a block one when annotated.
    if (o.origins) seq.flow = false;
    // An API rule is written as the file writes its entries: block mappings among block mappings (what a
    // generator writes, and what the daemon's fast reader reads, so a reload of a saved file stays fast),
    // else one flow mapping a line.
    // A section with no entry yet: block (YAML's default, and the fast reader's) unless the file writes its
    // sequences in flow style.
    const block = oldItems.length > 0 ? !seq.flow && oldItems.every((n) => isMap(n) && n.flow !== true) : !seq.flow;
    seq.items = s.rules.map((r) => {
      const mine = r.fileIndex === undefined ? undefined : oldItems[r.fileIndex];
      // A file entry the thread was given as its index only (src/config/running-async.ts) must be there.
      if (r.fileIndex !== undefined && mine === undefined) throw new Error(`the loaded config file has no entry ${s.section}[${r.fileIndex}], which the running rules name: its text and the rules disagree`);
      let node: Node;
      if (mine !== undefined) {
        node = mine;
      } else {
        node = doc.createNode(r.json, { flow: !block }) as Node;
        // The `yaml` package writes 0b1 or +0x1F plain (strings in YAML 1.2), which the reader takes for numbers.
        quoteNonStringLookalikes(node);
        const was = r.replacesIndex === undefined ? undefined : oldItems[r.replacesIndex];
        if (was?.commentBefore != null) node.commentBefore = was.commentBefore;
        if (was?.comment != null) node.comment = was.comment;
      }
      if (o.origins) setOrigin(node, r.origin);
      return node;
    });
    if (!isSeq(old)) doc.set(s.section, seq);
  }
  return doc.toString({ lineWidth: 0 });
}
