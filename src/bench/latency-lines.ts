/**
 * bench:daemon's latency figures and its loop and status PASS/FAIL lines,
 * as pure functions (unit-tested apart from the bench, which runs a daemon).
 */

/** Nearest-rank quantile of sorted values (NaN when none). */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}

export interface Latency {
  n: number;
  median: number;
  p99: number;
  min: number;
  max: number;
}

export function summarize(ms: readonly number[]): Latency {
  const s = [...ms].sort((a, b) => a - b);
  return { n: s.length, median: quantile(s, 0.5), p99: quantile(s, 0.99), min: s[0] ?? NaN, max: s[s.length - 1] ?? NaN };
}

/** A figure with two decimals ('-' when not measured) and a target's verdict, as every PASS/FAIL line prints them. */
export const f2 = (x: number | undefined): string => (x === undefined || Number.isNaN(x) ? '-' : x.toFixed(2));
export const pf = (ok: boolean): string => (ok ? 'PASS' : 'FAIL');

/** The sample count beside a p99: nearest-rank p99 of fewer than 100 samples is their max. */
export function nText(n: number): string {
  return `n=${n}${n < 100 ? '; n < 100: p99 is the max' : ''}`;
}

/** `p99 X (n=N[; n < 100: p99 is the max])`. */
export function p99Text(l: Pick<Latency, 'n' | 'p99'>): string {
  return `p99 ${f2(l.p99)} (${nText(l.n)})`;
}

export const LOOP_TARGETS = { loopMaxMs: 50, loopP99Ms: 10, statusP99Ms: 5, statusMaxMs: 50, convergenceP99Ms: 200 } as const;

export interface LoopWindow {
  p50: number;
  p99: number;
  max: number;
}

/** The loop and status targets of one window (LOOP_TARGETS): an error or a reset fails the status target. */
export function loopVerdict(loop: LoopWindow, status: Pick<Latency, 'p99' | 'max'>, resets: number, errors: number): { loopOk: boolean; statusOk: boolean } {
  const t = LOOP_TARGETS;
  return {
    loopOk: loop.max < t.loopMaxMs && loop.p99 < t.loopP99Ms,
    statusOk: status.p99 < t.statusP99Ms && status.max < t.statusMaxMs && resets === 0 && errors === 0,
  };
}

/** The status target's PASS/FAIL line of a window: p99 and max from the schedule, resets, errors, n. */
export function statusTargetLine(phase: string, status: Latency, resets: number, errors: number): string {
  const t = LOOP_TARGETS;
  const ok = status.p99 < t.statusP99Ms && status.max < t.statusMaxMs && resets === 0 && errors === 0;
  return `${`${phase}: status p99 < ${t.statusP99Ms} ms, max < ${t.statusMaxMs} ms, no reset, no error`.padEnd(55)}${f2(status.p99).padStart(9)} / ${f2(status.max)} ms, ` +
    `${resets} resets, ${errors} errors (${nText(status.n)})  ${pf(ok)}`;
}

/** The poller's method, for the bench's output and next to its figures. */
export function pollerMethod(periodMs: number): string {
  return `GET /v1/status on one kept-alive connection, one request every ${periodMs} ms: latency from its send, and an answer ` +
    `slower than ${periodMs} ms also counts L - ${periodMs}, L - ${2 * periodMs}, ... ms for the requests due while it was out ` +
    "(HdrHistogram's expected-interval correction), so a stall counts for every request due during it; " +
    'an answer other than 200 or a failed poll is an error';
}
