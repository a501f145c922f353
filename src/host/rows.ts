/**
 * A list whose elements are made when it is iterated, for an answer
 * streamed element by element (src/daemon/api.ts jsonPieces): each
 * element's object dies young. A list built whole before it is streamed
 * lives through the many turns of the stream, the collector promotes it to
 * the old space, and it stays there as garbage until a full collection:
 * ten `GET /v1/counters` of 131,072 rules took the daemon's heap from 67 to
 * 285 MB, given back only by V8's memory reducer some 10 s later.
 */
export const ROWS = Symbol('rows made when iterated');

export interface Rows<T> extends Iterable<T> {
  readonly [ROWS]: true;
  readonly length: number;
  /** The elements made all at once (JSON.stringify, callers that want an array). */
  toJSON(): T[];
}

export function isRows(v: unknown): v is Rows<unknown> {
  return typeof v === 'object' && v !== null && (v as { [ROWS]?: unknown })[ROWS] === true;
}
