/**
 * What the config parser's thread (src/config/parse-worker.ts) posts to the
 * main thread (src/config/parse-async.ts), and how it cuts a parsed config
 * into those pieces.
 */
import { isAscii } from 'node:buffer';
import { createInflateRaw, inflateRawSync } from 'node:zlib';
import { AsciiText, textOf } from './ascii-text.js';
import { SECTION_KEY } from './keys.js';
import { asciiText, itemSpansOf, type ItemSpans } from './load.js';
import { plainRule } from './rows.js';
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
  | { readonly t: 'done'; readonly deflated?: Uint8Array; readonly spans?: ItemSpans; /** read by the block YAML reader (readByBlockReader) */ readonly block?: true }
  | { readonly t: 'refused'; readonly file: string; readonly path: string; readonly reason: string; readonly line?: number }
  | { readonly t: 'failed'; readonly message: string };

/** Per list, which rules have the same text at the same place as in the previous file (1), or not (0). */
export type SameRules = Partial<Record<Section, Uint8Array>>;

const SECTIONS: readonly Section[] = ['policies', 'localsids', 'sessions'];

/**
 * Which rules of a list have the same text, at the same place, as in the
 * previous file: their data is the same (a rule is read from its item's
 * text alone), so the running rule stands for them. The texts as strings
 * (spans in characters).
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

/**
 * The previous file's items compared with the new file's bytes as the
 * previous file is inflated, a piece at a time: no copy of it whole (its
 * 11.6 MB inflated at once were still resident right after the reload,
 * +15 MB). Both texts ASCII: a span's character offsets are its byte
 * offsets. Undefined when a piece of the previous file is not ASCII.
 */
class StreamCompare {
  /** The items of every list, in the previous file's order: list, index. */
  readonly #order: { section: Section; i: number }[] = [];
  #at = 0;
  #ok = true;
  readonly same: SameRules = {};
  notAscii = false;

  constructor(
    readonly own: Buffer,
    readonly spans: ItemSpans,
    readonly prev: ItemSpans,
  ) {
    const lists = SECTIONS.filter((s) => spans[s] !== undefined && prev[s] !== undefined).sort((a, b) => prev[a]![0]! - prev[b]![0]!);
    for (const section of lists) {
      const n = Math.min(spans[section]!.length, prev[section]!.length) - 1;
      this.same[section] = new Uint8Array(Math.max(n, 0));
      for (let i = 0; i < n; i++) this.#order.push({ section, i });
    }
  }

  /** The previous file's bytes [pos, pos + c.length). */
  take(c: Buffer, pos: number): void {
    if (this.notAscii) return;
    if (!isAscii(c)) {
      this.notAscii = true;
      return;
    }
    const end = pos + c.length;
    while (this.#at < this.#order.length) {
      const { section, i } = this.#order[this.#at]!;
      const ps = this.prev[section]!;
      const ns = this.spans[section]!;
      const from = ps[i]!;
      const to = ps[i + 1]!;
      if (from >= end) return;
      const len = to - from;
      const a = Math.max(from, pos);
      const b = Math.min(to, end);
      if (this.#ok && (len !== ns[i + 1]! - ns[i]! || this.own.compare(c, a - pos, b - pos, ns[i]! + (a - from), ns[i]! + (b - from)) !== 0)) this.#ok = false;
      if (to > end) return;
      if (this.#ok) this.same[section]![i] = 1;
      this.#ok = true;
      this.#at++;
    }
  }
}

async function streamed(own: Buffer, spans: ItemSpans, prev: ItemSpans, deflated: Uint8Array): Promise<SameRules | undefined> {
  const cmp = new StreamCompare(own, spans, prev);
  let pos = 0;
  await new Promise<void>((resolve, reject) => {
    const inflate = createInflateRaw({ chunkSize: 64 * 1024 });
    inflate.on('data', (c: Buffer) => {
      cmp.take(c, pos);
      pos += c.length;
      if (cmp.notAscii) {
        inflate.destroy();
        resolve();
      }
    });
    inflate.on('end', () => resolve());
    inflate.on('error', reject);
    inflate.end(deflated);
  });
  return cmp.notAscii ? undefined : cmp.same;
}

/**
 * Which rules of the new file (`text`, its bytes `bytes`) have the same
 * text at the same place as in the previous one. ASCII files (generated
 * ones) are compared byte by byte, the previous one inflated a piece at a
 * time; others as strings.
 */
export async function sameAsBefore(config: Config, input: string | AsciiText, bytes: Uint8Array, previous: PreviousText): Promise<SameRules> {
  const spans = itemSpansOf(config);
  if (spans === undefined) return {};
  const own = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const held = previous.held;
  if ('deflated' in held && (input instanceof AsciiText || asciiText(input, own))) {
    const same = await streamed(own, spans, previous.spans, held.deflated);
    if (same !== undefined) return same;
  }
  const text = textOf(input);
  const raw = 'text' in held ? undefined : 'bytes' in held ? held.bytes : inflateRawSync(held.deflated);
  const prevText = raw === undefined ? (held as { text: string }).text : Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('utf8');
  const same: SameRules = {};
  for (const s of SECTIONS) same[s] = sameText(text, spans[s], prevText, previous.spans[s]);
  return same;
}

/** The pieces of a parsed config, in the order the main thread takes them (its head is posted first); `same` from sameAsBefore. */
export function* pieces(config: Config, same: SameRules = {}): Generator<FromParser, void, undefined> {
  const lists: [Section, readonly unknown[]][] = [
    ['policies', config.policies],
    ['localsids', config.localsids],
    ['sessions', config.sessions ?? []],
  ];
  for (const [section, list] of lists) {
    const key = SECTION_KEY[section];
    const kept = same[section] ?? new Uint8Array(0);
    let rules: unknown[] = [];
    let keys: string[] = [];
    let fresh = 0;
    for (let i = 0; i < list.length; i++) {
      if (kept[i] === 1) {
        rules.push(KEPT);
        keys.push('');
      } else {
        // A row (src/config/rows.ts) crosses as its plain object: its fields are not its own properties.
        rules.push(plainRule(list[i]));
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

