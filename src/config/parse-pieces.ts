/**
 * What the config parser's thread (src/config/parse-worker.ts) posts to the
 * main thread (src/config/parse-async.ts), and how it cuts a parsed config
 * into those pieces.
 */
import { inflateRawSync } from 'node:zlib';
import { SECTION_KEY } from './keys.js';
import { itemSpansOf, type ItemSpans } from './load.js';
import type { Config, RuleSection } from './types.js';

export type Section = RuleSection;

/** What the daemon keeps of a config's file (src/daemon/kept-text.ts): a string, bytes not deflated yet, or deflated bytes. */
export type HeldText = { readonly text: string } | { readonly bytes: Uint8Array } | { readonly deflated: Uint8Array };

/**
 * Rules per message. The main thread takes a message in one turn (its
 * deserialisation and the index entries): 4,096 rules held it 25-70 ms,
 * 128 a few ms (11.6 MB of YAML, 131,072 rules), for the same total.
 */
export const RULES_PER_MESSAGE = 128;

/**
 * Entries per message when most are KEPT (the running rule: only its
 * index entries are made, no rule crosses): 1,024 took 1.3 ms as a rule,
 * up to 10 when the index grew or the collector ran in it.
 */
export const ENTRIES_PER_MESSAGE = 256;

/** In a message's rules: the running config's rule at this place (its text in the file is the same). */
export const KEPT = 0;

/** The running config's file, for the thread to tell which rules' text is unchanged. */
export interface PreviousText {
  readonly held: HeldText;
  readonly spans: ItemSpans;
}

export type FromParser =
  | { readonly t: 'head'; readonly config: Omit<Config, 'policies' | 'localsids' | 'sessions'> }
  /** A rule, or KEPT (its key then ''). */
  | { readonly t: 'rules'; readonly section: Section; readonly rules: unknown[]; readonly keys: string[] }
  /** The file deflated (as KeptText keeps it), and where its rules are (for the next reload). */
  | { readonly t: 'done'; readonly deflated?: Uint8Array; readonly spans?: ItemSpans }
  | { readonly t: 'refused'; readonly file: string; readonly path: string; readonly reason: string; readonly line?: number }
  | { readonly t: 'failed'; readonly message: string };

/** The text a KeptText holds, as a string. */
function textOf(held: HeldText): string {
  if ('text' in held) return held.text;
  const b = 'bytes' in held ? held.bytes : inflateRawSync(held.deflated);
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('utf8');
}

/**
 * Which rules of a list have the same text, at the same place, as in the
 * previous file: their data is the same (a rule is read from its item's
 * text alone), so the running rule stands for them.
 */
export function sameText(text: string, spans: Uint32Array | undefined, prevText: string, prevSpans: Uint32Array | undefined): Uint8Array {
  if (spans === undefined || prevSpans === undefined) return new Uint8Array(0);
  const n = Math.min(spans.length, prevSpans.length) - 1;
  const same = new Uint8Array(Math.max(n, 0));
  for (let i = 0; i < n; i++) {
    const a = spans[i]!;
    const b = spans[i + 1]!;
    const pa = prevSpans[i]!;
    if (b - a === prevSpans[i + 1]! - pa && text.slice(a, b) === prevText.slice(pa, pa + b - a)) same[i] = 1;
  }
  return same;
}

/** The pieces of a parsed config, in the order the main thread takes them (its head is posted first). */
export function* pieces(config: Config, text: string, previous: PreviousText | undefined): Generator<FromParser, void, undefined> {
  const spans = itemSpansOf(config);
  const prevText = previous === undefined || spans === undefined ? undefined : textOf(previous.held);
  const lists: [Section, readonly unknown[]][] = [
    ['policies', config.policies],
    ['localsids', config.localsids],
    ['sessions', config.sessions ?? []],
  ];
  for (const [section, list] of lists) {
    const key = SECTION_KEY[section];
    const same = prevText === undefined ? new Uint8Array(0) : sameText(text, spans?.[section], prevText, previous?.spans[section]);
    let rules: unknown[] = [];
    let keys: string[] = [];
    let fresh = 0;
    for (let i = 0; i < list.length; i++) {
      if (same[i] === 1) {
        rules.push(KEPT);
        keys.push('');
      } else {
        rules.push(list[i]);
        keys.push(key(list[i] as never));
        fresh++;
      }
      if (fresh === RULES_PER_MESSAGE || rules.length === ENTRIES_PER_MESSAGE || i === list.length - 1) {
        yield { t: 'rules', section, rules, keys };
        rules = [];
        keys = [];
        fresh = 0;
      }
    }
  }
}

