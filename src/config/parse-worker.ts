/**
 * The config parser's thread (parseConfigOffLoop, src/config/parse-async.ts):
 * parses and checks the text it is given, exactly as parseConfig does on the
 * main thread, and posts the result in pieces (the file's other sections
 * first, then RULES_PER_MESSAGE rules a message with their keys, one each
 * time the main thread asks), so that the daemon's event loop takes each
 * piece in a turn of its own instead of one 131,072-rule object graph at
 * once. A refused file is one message with
 * the ConfigError's fields. With the running config's file (`previous`),
 * a rule whose text is the same at the same place crosses as KEPT: the
 * main thread takes the running rule (a reload of one edit in 131,072
 * rules sends one).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { deflateRaw } from 'node:zlib';
import { asciiJson } from './ascii-text.js';
import { ConfigError } from './errors.js';
import { itemSpansOf, parseConfig, readByBlockReader, type ItemSpans } from './load.js';
import { pieces, sameAsBefore, type FromParser, type PreviousText } from './parse-pieces.js';

const port = parentPort;
if (port !== null) {
  const { bytes, file, previous } = workerData as { bytes: Uint8Array; file: string; previous?: PreviousText };
  try {
    const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    // An ASCII JSON file read from its bytes, as a start reads it: no string of the whole file on this thread.
    const text = asciiJson(buf) ?? buf.toString('utf8');
    const config = parseConfig(text, file, undefined, buf);
    const { policies: _policies, localsids: _localsids, sessions: _sessions, ...head } = config;
    // Deflated here, meanwhile, as the daemon keeps it: on the main thread its end alone was a 10 ms turn.
    // Without it (zlib out of memory) the daemon deflates the file itself.
    const deflated = new Promise<Buffer | undefined>((resolve) => {
      try {
        deflateRaw(buf, { level: 1 }, (e, out) => resolve(e === null ? out : undefined));
      } catch {
        resolve(undefined);
      }
    });
    // One piece per {t: 'next'}: the main thread asks for the next when it has taken one in (posted all at
    // once, they would be taken in one turn of its event loop, as one object graph would).
    // Which rules are unchanged, before the first piece is asked for.
    const same = previous === undefined ? Promise.resolve({}) : sameAsBefore(config, text, bytes, previous).catch(() => ({}));
    let it: ReturnType<typeof pieces> | undefined;
    port.on('message', async () => {
      it ??= pieces(config, await same);
      const r = it.next();
      if (r.done !== true) {
        port.postMessage(r.value);
        return;
      }
      const finish = (d: Buffer | undefined, spans: ItemSpans | undefined): void => {
        const done: FromParser = { t: 'done', ...(d === undefined ? {} : { deflated: d }), ...(spans === undefined ? {} : { spans }), ...(readByBlockReader(config) ? { block: true as const } : {}) };
        // Moved, not copied: a Buffer of its own (not a slice of the pool) can give its memory away.
        const moved = [...(d !== undefined && d.byteOffset === 0 && d.byteLength === d.buffer.byteLength ? [d.buffer] : []), ...Object.values(spans ?? {}).map((s) => s.buffer)];
        port.postMessage(done, moved as ArrayBuffer[]);
      };
      void deflated.then((d) => {
        try {
          finish(d, itemSpansOf(config));
        } catch {
          // What could not be posted the daemon does without: it deflates the file itself, the next reload sends every rule.
          finish(undefined, undefined);
        }
        port.close();
      });
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
