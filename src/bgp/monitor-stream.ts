/**
 * The monitor's stdout as decoded lines: `gobgp monitor global rib -j
 * [--current]` prints one JSON array of paths per line (one path per line for
 * updates, the whole table in the first line with --current). Chunks of the
 * stream go in, whole lines come out decoded (src/bgp/routes.ts); a line split
 * across chunks, or a UTF-8 character split across them, is kept until its
 * end arrives.
 *
 * Used by the monitor's reader thread (src/bgp/monitor-worker.ts), so that
 * reading and decoding go on while the daemon's main thread writes the
 * tables (docs/bgp.md "Where the time goes").
 */
import { StringDecoder } from 'node:string_decoder';
import { decodeMonitorLine, type DecodedLine } from './routes.js';

export class MonitorLines {
  readonly #decoder = new StringDecoder('utf8');
  /** Text of the line not ended yet, in pieces (the --current line can be megabytes). */
  #parts: string[] = [];
  /** Lines decoded so far. */
  lines = 0;

  /** The lines this chunk ends, decoded in order. */
  push(chunk: Buffer): DecodedLine[] {
    return this.#split(this.#decoder.write(chunk));
  }

  /** The stream ended: the last line, if it had no newline. */
  end(): DecodedLine[] {
    const out = this.#split(this.#decoder.end());
    const rest = this.#parts.join('');
    this.#parts = [];
    if (rest.trim() !== '') out.push(this.#decode(rest));
    return out;
  }

  #split(s: string): DecodedLine[] {
    const out: DecodedLine[] = [];
    let start = 0;
    for (let i = s.indexOf('\n'); i >= 0; i = s.indexOf('\n', start)) {
      const piece = s.slice(start, i);
      const line = this.#parts.length === 0 ? piece : this.#parts.join('') + piece;
      this.#parts = [];
      start = i + 1;
      // Empty lines too: with --current the first line is the table, even an empty one.
      out.push(this.#decode(line));
    }
    if (start < s.length) this.#parts.push(s.slice(start));
    return out;
  }

  #decode(line: string): DecodedLine {
    this.lines++;
    return decodeMonitorLine(line.endsWith('\r') ? line.slice(0, -1) : line);
  }
}
