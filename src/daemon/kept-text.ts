/**
 * A large text the daemon must keep but rarely reads: the config file as
 * last loaded (`mup config show` and `mup config save` build on it, its
 * comments included). Kept deflated: 11.6 MB of YAML (65,536 + 65,536
 * rules) is 0.8 MB (docs/bench.md "Daemon memory"). Deflated at once, in
 * the load (~50 ms for that file at level 1): the string is garbage before
 * the full collection that ends a load or reload (memory.ts), whereas a
 * deflate on the threadpool would finish after it and leave the string and
 * a copy of it in the heap until V8's next full collection, minutes later.
 * A read inflates it again (~40-80 ms for that file: a show or a save,
 * never a rule change).
 *
 * A reload keeps its file as its parser's thread deflated it (setDeflated):
 * a deflate on the main thread, even on the threadpool, held the event loop
 * 10-25 ms (the stream's chunks joined at its end). setSoon deflates on the
 * threadpool, the bytes as they are kept until then.
 *
 * Each text is set with its owner (the config read from it): source(owner)
 * gives what is held only to that owner, so a reload compares its file
 * with the text of the config that runs, never with another's.
 */
import { deflateRaw, deflateRawSync, inflateRawSync } from 'node:zlib';
import type { HeldText } from '../config/parse-pieces.js';

/** Below this many characters the text is kept as it is. */
const DEFLATE_FROM = 64 * 1024;

/**
 * A file's bytes deflated as KeptText keeps them, on the threadpool while
 * the caller's thread goes on (a start parses the file meanwhile: 277 MB
 * deflated at once took 243 ms of its critical path). One piece of output
 * large enough for the whole: zlib's stream otherwise comes back to the
 * event loop for every 16 KB, which a loop busy with a synchronous parse
 * does not turn. Undefined for a text kept as it is (below DEFLATE_FROM),
 * or when zlib fails (out of memory for its state): then set() the bytes.
 * The bytes must not change until it resolves.
 */
export function deflateSoon(bytes: Buffer): Promise<Buffer | undefined> {
  if (bytes.length < DEFLATE_FROM) return Promise.resolve(undefined);
  return new Promise((resolve) => {
    try {
      // Room for incompressible bytes too (deflate's bound is about 5 bytes per 16 KB block over the input).
      deflateRaw(bytes, { level: 1, chunkSize: bytes.length + (bytes.length >> 10) + 1024 }, (e, out) =>
        // One piece is a view of the input-sized output buffer: kept as it is only when it fills most of it.
        resolve(e !== null ? undefined : out.buffer.byteLength > 2 * out.length ? Buffer.from(out) : out),
      );
    } catch {
      resolve(undefined);
    }
  });
}

export class KeptText {
  #text = '';
  #deflated: Buffer | undefined;
  #owner: object | undefined;

  /**
   * The text, or its UTF-8 bytes (a file as read): a Buffer is deflated as
   * it is, a string is encoded first (for the 11.6 MB file 15 ms against 56,
   * most of it the encoding).
   */
  set(text: string | Buffer, owner?: object): void {
    this.#deflated = undefined;
    this.#text = '';
    this.#bytes = undefined;
    this.#owner = owner;
    if (text.length < DEFLATE_FROM) {
      this.#text = text.toString();
      return;
    }
    try {
      this.#deflated = deflateRawSync(text, { level: 1 });
    } catch {
      // Out of memory for zlib's state: keep the string (nothing lost but the saving).
      this.#text = text.toString();
    }
  }

  /**
   * A file's bytes, deflated on the threadpool; held as they are until then
   * (get() reads them). A later set or setSoon wins over a deflate still
   * running. Resolves once the bytes are deflated (or kept as they are).
   */
  setSoon(bytes: Buffer, owner?: object): Promise<void> {
    if (bytes.length < DEFLATE_FROM) {
      this.set(bytes, owner);
      return Promise.resolve();
    }
    this.set('', owner);
    this.#bytes = bytes;
    return new Promise((resolve) => {
      deflateRaw(bytes, { level: 1 }, (e, out) => {
        // Out of memory for zlib's state: the bytes stay (nothing lost but the saving).
        if (e === null && this.#bytes === bytes) {
          this.#bytes = undefined;
          this.#deflated = out;
        }
        resolve();
      });
    });
  }

  /** Bytes deflated elsewhere (deflateRaw of the text's UTF-8 bytes). */
  setDeflated(deflated: Buffer, owner?: object): void {
    this.set('', owner);
    this.#deflated = deflated;
  }

  /** The config the held text was read into (set with it). */
  get owner(): object | undefined {
    return this.#owner;
  }

  /** What is held, if it was set with this owner. */
  source(owner: object): HeldText | undefined {
    return owner === this.#owner ? this.heldText() : undefined;
  }

  #bytes: Buffer | undefined;

  /** What is held now, whoever it was set for (the running config's thread reads it: src/config/running-async.ts). */
  heldText(): HeldText {
    if (this.#bytes !== undefined) return { bytes: this.#bytes };
    return this.#deflated === undefined ? { text: this.#text } : { deflated: this.#deflated };
  }

  /** Bytes held now: the string's characters, the bytes not deflated yet, or the deflated bytes. */
  get held(): number {
    return this.#deflated?.length ?? this.#bytes?.length ?? this.#text.length;
  }

  get(): string {
    if (this.#bytes !== undefined) return this.#bytes.toString('utf8');
    return this.#deflated === undefined ? this.#text : inflateRawSync(this.#deflated).toString('utf8');
  }
}
