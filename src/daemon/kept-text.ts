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
 */
import { deflateRawSync, inflateRawSync } from 'node:zlib';

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

  /** Bytes held now: the string's characters, or the deflated bytes. */
  get held(): number {
    return this.#deflated?.length ?? this.#text.length;
  }

  get(): string {
    return this.#deflated === undefined ? this.#text : inflateRawSync(this.#deflated).toString('utf8');
  }
}
