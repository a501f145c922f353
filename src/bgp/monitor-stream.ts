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
import { BACKSLASH, CLOSE_ARRAY, CLOSE_OBJECT, COLON, COMMA, isSpace, OPEN_ARRAY, OPEN_OBJECT, QUOTE } from '../host/json-chars.js';
import { decodeMonitorLine, decodePaths, type DecodedLine } from './routes.js';

/** A JSON string's value, or undefined when it is not one. */
function jsonString(text: string): string | undefined {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === 'string' ? v : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The longest monitor line taken, in characters. gobgp's --current table
 * comes in one gRPC message of at most 4 MiB; a line without end from a
 * broken sidecar grew the reader's memory until the join failed past V8's
 * longest string (512 Mi characters) and the thread ended, for ever.
 */
export const MAX_LINE_CHARS = 256 * 1024 * 1024;

export class MonitorLines {
  readonly #decoder = new StringDecoder('utf8');
  /** Text of the line not ended yet, in pieces (the --current line can be megabytes). */
  #parts: string[] = [];
  #partsLength = 0;
  /** The line not ended yet passed maxChars: its text is dropped, and it is reported when it ends. */
  #overlong = false;
  /** Lines decoded so far. */
  lines = 0;

  constructor(readonly maxChars = MAX_LINE_CHARS) {}

  /** The lines this chunk ends, decoded in order. */
  push(chunk: Buffer): DecodedLine[] {
    return this.#split(this.#decoder.write(chunk));
  }

  /** The stream ended: the last line, if it had no newline. */
  end(): DecodedLine[] {
    const out = this.#split(this.#decoder.end());
    if (this.#overlong) out.push(this.#overlongLine());
    const rest = this.#parts.join('');
    this.#parts = [];
    this.#partsLength = 0;
    if (rest.trim() !== '') out.push(this.#decode(rest));
    return out;
  }

  #split(s: string): DecodedLine[] {
    const out: DecodedLine[] = [];
    let start = 0;
    for (let i = s.indexOf('\n'); i >= 0; i = s.indexOf('\n', start)) {
      const piece = s.slice(start, i);
      start = i + 1;
      if (this.#overlong || this.#partsLength + piece.length > this.maxChars) {
        out.push(this.#overlongLine());
        continue;
      }
      const line = this.#parts.length === 0 ? piece : this.#parts.join('') + piece;
      this.#parts = [];
      this.#partsLength = 0;
      // Empty lines too: with --current the first line is the table, even an empty one.
      out.push(this.#decode(line));
    }
    if (start < s.length && !this.#overlong) {
      const rest = s.slice(start);
      this.#partsLength += rest.length;
      if (this.#partsLength > this.maxChars) {
        this.#overlong = true;
        this.#parts = [];
      } else this.#parts.push(rest);
    }
    return out;
  }

  /** A line too long to take: counted as one that is no list of paths (as the first line, no table). */
  #overlongLine(): DecodedLine {
    this.lines++;
    this.#overlong = false;
    this.#parts = [];
    this.#partsLength = 0;
    const reason = `a line longer than ${this.maxChars} characters, dropped`;
    return { routes: [], rejected: [{ reason, path: '' }], skipped: 0, notPaths: reason };
  }

  #decode(line: string): DecodedLine {
    this.lines++;
    return decodeMonitorLine(line.endsWith('\r') ? line.slice(0, -1) : line);
  }
}

/**
 * The stdout of `gobgp global rib -a FAMILY -j` as decoded destinations:
 * one JSON object, `{"<destination>": [paths], ...}` (or `null` for an
 * empty table), printed as one line however large the table (about 700
 * bytes a path: a million routes would be longer than a V8 string). Read
 * as it comes: each destination's array is cut out and decoded alone, and
 * only its best path is kept (the object lists every path of a
 * destination; the monitor's events carry only the best). gobgp's failure
 * (`{"error": "..."}`) comes out as a line with `error`; output that is no
 * such object (a value that is no array of paths, text after it, no object
 * at all), as an error too: taken as an empty table, it would withdraw every
 * learned route.
 */
export class RibDump {
  readonly #decoder = new StringDecoder('utf8');
  /** Nesting depth outside strings: 1 inside the top-level object, 2 inside a destination's array. */
  #depth = 0;
  #inString = false;
  #escaped = false;
  /** At depth 1: the next string is a key (after { or ,), else a value (after :). */
  #expectKey = true;
  /** The text of the array or depth-1 string being read, in pieces. */
  #parts: string[] = [];
  #capturing: 'array' | 'key' | 'value' | undefined;
  #key = '';
  #error: string | undefined;
  /** Something other than an object or null was seen at the top. */
  #head = '';
  #sawObject = false;
  /** The top-level object has ended. */
  #closed = false;
  /** A depth-1 value that is not an array of paths, null, or the error's text; or text after the object. */
  #bad: string | undefined;
  /** A literal value at depth 1 (only null is one). */
  #literal = '';
  /** Destinations decoded so far. */
  destinations = 0;

  push(chunk: Buffer): DecodedLine[] {
    return this.#scan(this.#decoder.write(chunk));
  }

  /** The output ended: an error line if it was gobgp's failure or no table. */
  end(): DecodedLine[] {
    const out = this.#scan(this.#decoder.end());
    const head = this.#head.trim();
    if (this.#error !== undefined) out.push({ routes: [], rejected: [], skipped: 0, error: this.#error });
    else if (this.#bad !== undefined) out.push({ routes: [], rejected: [], skipped: 0, error: `not a table: ${this.#bad}` });
    else if (!this.#sawObject && head !== 'null') out.push({ routes: [], rejected: [], skipped: 0, error: `not a table: ${JSON.stringify(head.slice(0, 200))}` });
    else if (this.#depth !== 0) out.push({ routes: [], rejected: [], skipped: 0, error: 'the table ended before its closing brace' });
    return out;
  }

  #scan(s: string): DecodedLine[] {
    const out: DecodedLine[] = [];
    let from = 0; // start of the piece being captured in s
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (this.#inString) {
        if (this.#escaped) this.#escaped = false;
        else if (c === BACKSLASH) this.#escaped = true;
        else if (c === QUOTE) {
          this.#inString = false;
          if (this.#depth === 1 && this.#capturing !== undefined && this.#capturing !== 'array') {
            const text = this.#take(s, from, i + 1);
            // A string JSON.parse refuses (a bad escape, a control character) is no table: said as one, not thrown
            // (thrown, it ended the reader thread, and the read started again for ever; found in review).
            const value = jsonString(text);
            if (value === undefined) this.#bad ??= `a string that is not JSON: ${text.slice(0, 80)}`;
            else if (this.#capturing === 'key') this.#key = value;
            else if (this.#key === 'error') this.#error = value;
            else this.#bad ??= `${JSON.stringify(this.#key)} is a string, not an array of paths`;
            this.#capturing = undefined;
          }
        }
        continue;
      }
      if (c === QUOTE) {
        this.#inString = true;
        if (this.#depth === 1 && this.#sawObject && this.#capturing === undefined) {
          this.#capturing = this.#expectKey ? 'key' : 'value';
          from = i;
        }
      } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
        if (this.#depth === 0) {
          if (this.#closed) this.#bad ??= 'text after the table';
          else if (c === OPEN_OBJECT) this.#sawObject = true;
          else this.#head += '[';
        } else if (this.#depth === 1 && this.#sawObject) {
          if (c === OPEN_ARRAY) {
            this.#capturing = 'array';
            from = i;
          } else {
            this.#bad ??= `${JSON.stringify(this.#key)} is an object, not an array of paths`;
          }
        }
        this.#depth++;
      } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
        if (this.#depth === 1) this.#endLiteral();
        this.#depth--;
        if (this.#depth === 1 && c === CLOSE_ARRAY && this.#capturing === 'array') {
          this.#capturing = undefined;
          out.push(this.#destination(this.#take(s, from, i + 1)));
        } else if (this.#depth === 0 && this.#sawObject) {
          this.#closed = true;
        }
      } else if (this.#depth === 1) {
        if (c === COLON) {
          this.#expectKey = false;
          this.#literal = '';
        } else if (c === COMMA) {
          this.#endLiteral();
          this.#expectKey = true;
        } else if (!isSpace(c) && this.#literal.length < 16) {
          this.#literal += s[i];
        }
      } else if (this.#depth === 0) {
        if (this.#closed) {
          if (!isSpace(c)) this.#bad ??= 'text after the table';
        } else if (this.#head.length < 256) {
          this.#head += s[i];
        }
      }
    }
    if (this.#capturing !== undefined) this.#parts.push(s.slice(from));
    return out;
  }

  /** A depth-1 value ended: a literal other than null is not a destination. */
  #endLiteral(): void {
    if (this.#literal !== '' && this.#literal !== 'null') this.#bad ??= `${JSON.stringify(this.#key)} is ${JSON.stringify(this.#literal)}, not an array of paths`;
    this.#literal = '';
  }

  /** The captured text from its earlier pieces and s[from, to). */
  #take(s: string, from: number, to: number): string {
    const piece = s.slice(from, to);
    if (this.#parts.length === 0) return piece;
    const text = this.#parts.join('') + piece;
    this.#parts = [];
    return text;
  }

  #destination(text: string): DecodedLine {
    this.destinations++;
    let paths: unknown;
    try {
      paths = JSON.parse(text);
    } catch (e) {
      return { routes: [], rejected: [{ reason: `not JSON (${(e as Error).message})`, path: text.slice(0, 200) }], skipped: 0 };
    }
    return decodePaths(paths as unknown[], true);
  }
}
