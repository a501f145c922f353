/**
 * The config parser's thread (parseConfigOffLoop, src/config/parse-async.ts):
 * parses and checks the text it is given, exactly as parseConfig does on the
 * main thread, and posts the result in pieces (the file's other sections
 * first, then RULES_PER_MESSAGE rules a message with their keys, one each
 * time the main thread asks), so that the daemon's event loop takes each
 * piece in a turn of its own instead of one 131,072-rule object graph at
 * once. A refused file is one message with
 * the ConfigError's fields.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { ConfigError } from './errors.js';
import { SECTION_KEY } from './keys.js';
import { parseConfig } from './load.js';
import type { Config, RuleSection } from './types.js';

/**
 * Rules per message. The main thread takes a message in one turn (its
 * deserialisation and the index entries): 4,096 rules held it 25-70 ms,
 * 128 a few ms (11.6 MB of YAML, 131,072 rules), for the same total.
 */
export const RULES_PER_MESSAGE = 128;

export type FromParser =
  | { readonly t: 'head'; readonly config: Omit<Config, 'policies' | 'localsids' | 'sessions'> }
  | { readonly t: 'rules'; readonly section: Section; readonly rules: unknown[]; readonly keys: string[] }
  | { readonly t: 'done' }
  | { readonly t: 'refused'; readonly file: string; readonly path: string; readonly reason: string; readonly line?: number }
  | { readonly t: 'failed'; readonly message: string };

export type Section = RuleSection;

const port = parentPort;
if (port !== null) {
  const { bytes, file } = workerData as { bytes: Uint8Array; file: string };
  try {
    const config = parseConfig(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8'), file);
    const { policies, localsids, sessions, ...head } = config;
    const lists: [Section, readonly unknown[]][] = [
      ['policies', policies],
      ['localsids', localsids],
      ['sessions', sessions ?? []],
    ];
    // One piece per {t: 'next'}: the main thread asks for the next when it has taken one in (posted all at
    // once, they would be taken in one turn of its event loop, as one object graph would).
    const pieces = (function* (): Generator<FromParser> {
      for (const [section, list] of lists) {
        const key = SECTION_KEY[section];
        for (let at = 0; at < list.length; at += RULES_PER_MESSAGE) {
          const rules = list.slice(at, at + RULES_PER_MESSAGE);
          yield { t: 'rules', section, rules, keys: rules.map((r) => key(r as never)) };
        }
      }
      yield { t: 'done' };
    })();
    port.on('message', () => {
      const r = pieces.next();
      if (r.done !== true) port.postMessage(r.value);
      if (r.done === true || r.value.t === 'done') port.close();
    });
    port.postMessage({ t: 'head', config: head } satisfies FromParser);
  } catch (e) {
    if (e instanceof ConfigError) {
      port.postMessage({ t: 'refused', file: e.file, path: e.path, reason: e.reason, ...(e.line === undefined ? {} : { line: e.line }) } satisfies FromParser);
    } else {
      port.postMessage({ t: 'failed', message: (e as Error).stack ?? String(e) } satisfies FromParser);
    }
  }
}
