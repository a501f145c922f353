/** Types of status-poll.mjs (plain JavaScript: a worker thread runs it without a TypeScript loader). */
export interface Polled {
  /** Latency of each answered 200 from its send, ms, and for one slower than the period, L − p, L − 2p, ... down to p: the requests due meanwhile (HdrHistogram's expected-interval correction). */
  ms: number[];
  /** The answers alone, from their send (what a closed loop would have measured), ms. */
  sendMs: number[];
  resets: number;
  /** Answers other than 200, answers cut off, timeouts and other failures. */
  errors: string[];
  periodMs: number;
  /** The most this client delayed a send past max(due, previous answer), ms (its timers, its own thread). */
  clientLateMs: number;
}
export function startStatusPoller(o: {
  socket: string;
  /** One request due every periodMs (default 2). */
  periodMs?: number;
  path?: string;
  timeoutMs?: number;
  onBody?: (body: string, at: number) => void;
}): { stop: () => Promise<Polled> };
