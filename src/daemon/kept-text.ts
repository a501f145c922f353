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
 * A reload keeps its file with setSoon: deflated on the threadpool (the
 * 15-25 ms deflate was a long turn of a reload; its collection runs a
 * second after it, when the deflate is long done), the bytes as they are
 * kept until then.
 */
import { deflateRaw, deflateRawSync, inflateRawSync } from 'node:zlib';

/** Below this many characters the text is kept as it is. */
const DEFLATE_FROM = 64 * 1024;

export class KeptText {
  #text = '';
  #deflated: Buffer | undefined;

  /**
   * The text, or its UTF-8 bytes (a file as read): a Buffer is deflated as
   * it is, a string is encoded first (for the 11.6 MB file 15 ms against 56,
   * most of it the encoding).
   */
  set(text: string | Buffer): void {
    this.#deflated = undefined;
    this.#text = '';
    this.#bytes = undefined;
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
  setSoon(bytes: Buffer): Promise<void> {
    if (bytes.length < DEFLATE_FROM) {
      this.set(bytes);
      return Promise.resolve();
    }
    this.set('');
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

  #bytes: Buffer | undefined;

  /** Bytes held now: the string's characters, the bytes not deflated yet, or the deflated bytes. */
  get held(): number {
    return this.#deflated?.length ?? this.#bytes?.length ?? this.#text.length;
  }

  get(): string {
    if (this.#bytes !== undefined) return this.#bytes.toString('utf8');
    return this.#deflated === undefined ? this.#text : inflateRawSync(this.#deflated).toString('utf8');
  }
}
