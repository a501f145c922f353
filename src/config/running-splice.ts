/**
 * The running config as YAML, spliced from the file's own text (`mup config
 * show`, `mup config save`): for a file the block reader read (it knows
 * where each rule's entry is: ItemSpans), each rule section's entries are
 * the file's own lines where the API left them alone, a rule the API added
 * or replaced is written as a block mapping at the entries' indentation,
 * and everything else is the file's text as it is. With 131,072 rules the
 * `yaml` package's document (runningConfigYaml, src/config/running.ts)
 * took 13-18 s to parse and print the file; this takes well under a
 * second. undefined when it cannot be used (a text the block reader did
 * not read, a section the file lists without entries): the caller builds
 * the document then.
 *
 * Comments, as the document does: an entry kept is its own lines; the
 * comment lines between two entries go with the entry after them (a
 * deleted entry takes them along, one the API replaced keeps them); those
 * before the first entry and after the last stay where they are. Origin
 * comments (`# origin: config|api`) are never taken from the file (a file
 * saved from `config show` output has them); with `origins`, each entry
 * gets its own.
 */
import { itemSpansOf, readByBlockReader, type ItemSpans } from './load.js';
import type { Config } from './types.js';
import type { CompactSection } from './running-async.js';
import { stringifyForReader } from './quote-scalars.js';

const ORIGIN_LINE = /^[ \t]*# ?origin: (?:api|config)[ \t]*\r?$/;

/** A line with something but a comment on it. */
function isContent(line: string): boolean {
  const t = line.trim();
  return t !== '' && !t.startsWith('#');
}

/** The text's lines, each with its line break. */
function lines(text: string): string[] {
  return text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
}

function withoutOrigins(text: string): string {
  return lines(text)
    .filter((l) => !ORIGIN_LINE.test(l.replace(/\n$/, '')))
    .join('');
}

/** An entry's text cut in two: its lines up to its last content line, and the comment and blank lines after. */
function cut(entry: string): { body: string; trail: string } {
  const ls = lines(entry);
  let last = ls.length - 1;
  while (last > 0 && !isContent(ls[last]!)) last--;
  const body = ls.slice(0, last + 1).join('');
  // The file's last entry may end without a line break: another entry may follow it now.
  return { body: body.endsWith('\n') ? body : `${body}\n`, trail: ls.slice(last + 1).join('') };
}

/**
 * `json` as a block sequence entry at `indent`. Its strings that the config
 * reader would take for a number, bool or null (a name 0b1) quoted, or the
 * output would not load back (src/config/quote-scalars.ts).
 */
function entryText(json: Record<string, unknown>, indent: string): string {
  const text = stringifyForReader(json, { lineWidth: 0 });
  return lines(text)
    .map((l, i) => `${indent}${i === 0 ? '- ' : '  '}${l}`)
    .join('');
}

function originLine(indent: string, origin: string): string {
  return `${indent}# origin: ${origin}\n`;
}

/**
 * What splicedRunningYaml needs of the config read from the text: its item
 * spans if the block YAML reader read it ({} when it has no rules), else
 * undefined (the document is built then).
 */
export function spansForSplice(config: Config): ItemSpans | undefined {
  if (!readByBlockReader(config)) return undefined;
  const spans = itemSpansOf(config);
  if (spans !== undefined) return spans;
  // None kept for a config with rules (lost on the way from the parser's thread): the document.
  return config.policies.length + config.localsids.length + (config.sessions?.length ?? 0) === 0 ? {} : undefined;
}

/**
 * `spans`: the item spans of the config the block YAML reader read from
 * `text` ({} when it has no rules); undefined for any other text (JSON,
 * flow style, a file js-yaml read, whose sections it cannot find by their
 * keys): the caller builds the document.
 */
export function splicedRunningYaml(text: string, spans: ItemSpans | undefined, sections: readonly CompactSection[], o: { origins: boolean }): string | undefined {
  if (spans === undefined) return undefined;
  // The sections' regions in the text, replaced from the last so the offsets before stay good.
  const edits: { from: number; to: number; text: string }[] = [];
  const appended: string[] = [];
  for (const s of sections) {
    const sp = spans[s.section as keyof ItemSpans];
    if (sp === undefined) {
      // A section the file lists without entries (the block reader's keys are unquoted, at the first column): the document's way.
      if (new RegExp(`^${s.section}[ \\t]*:`, 'm').test(text)) return undefined;
      if (s.order.length === 0) continue;
      const indent = '  ';
      appended.push(`${s.section}:\n`);
      for (let i = 0; i < s.order.length; i++) {
        const v = s.order[i]!;
        if (v >= 0) return undefined; // a file entry in a section the file does not have: the texts disagree
        const r = s.rules[-1 - v]!;
        appended.push(`${o.origins ? originLine(indent, r.origin) : ''}${entryText(r.json, indent)}`);
      }
      continue;
    }
    const n = sp.length - 1;
    const entries = Array.from({ length: n }, (_, k) => cut(text.slice(sp[k]!, sp[k + 1]!)));
    const indentOf = (k: number): string => /^[ \t]*/.exec(entries[k]!.body)![0];
    const sectionIndent = n > 0 ? indentOf(0) : '  ';
    /** The comment lines before entry k (after the entry before it); those before the first stay where they are. */
    const lead = (k: number): string => (k === 0 ? '' : withoutOrigins(entries[k - 1]!.trail));
    const out: string[] = [];
    for (let i = 0; i < s.order.length; i++) {
      const v = s.order[i]!;
      if (v >= 0) {
        if (v >= n) throw new Error(`the loaded config file has no entry ${s.section}[${v}], which the running rules name: its text and the rules disagree`);
        out.push(lead(v), o.origins ? originLine(indentOf(v), 'config') : '', entries[v]!.body);
        continue;
      }
      const r = s.rules[-1 - v]!;
      const was = r.replacesIndex !== undefined && r.replacesIndex < n ? r.replacesIndex : undefined;
      out.push(was === undefined ? '' : lead(was), o.origins ? originLine(sectionIndent, r.origin) : '', entryText(r.json, sectionIndent));
    }
    // The comment lines after the last entry stay at the section's end; those before the first, origins aside, before it.
    out.push(n > 0 ? withoutOrigins(entries[n - 1]!.trail) : '');
    edits.push({ from: sp[0]!, to: sp[n]!, text: out.join('') });
    const before = leadingComments(text, sp[0]!);
    if (before.to > before.from) edits.push({ ...before, text: withoutOrigins(text.slice(before.from, before.to)) });
  }
  edits.sort((a, b) => b.from - a.from);
  let result = text;
  for (const e of edits) result = result.slice(0, e.from) + e.text + result.slice(e.to);
  if (appended.length > 0) result = `${result}${result === '' || result.endsWith('\n') ? '' : '\n'}${appended.join('')}`;
  return result;
}

/** The comment and blank lines right before `at` (a line's start), back to the last content line. */
function leadingComments(text: string, at: number): { from: number; to: number } {
  let from = at;
  while (from > 0) {
    const start = from >= 2 ? text.lastIndexOf('\n', from - 2) + 1 : 0;
    if (start >= from || isContent(text.slice(start, from))) break;
    from = start;
  }
  return { from, to: at };
}
