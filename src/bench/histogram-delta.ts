/**
 * A Prometheus histogram between two scrapes of GET /metrics: the
 * observations made in between, and a quantile of them as PromQL's
 * histogram_quantile computes it (linear inside the bucket that holds it,
 * the first bucket from 0, nothing above the highest finite bound). For
 * bench:daemon, which reads the daemon's own answer times around a phase
 * (mup_api_request_duration_seconds) beside the times its client measured.
 */

export interface QuantileBetween {
  /** Observations between the two scrapes. */
  readonly count: number;
  /** The quantile, in the histogram's unit; NaN without observations. */
  readonly value: number;
  /** The bucket it fell in: [lower, upper] bounds (upper Infinity: above the highest finite bound, value is that bound). */
  readonly bucket: readonly [number, number];
}

/** Cumulative counts by upper bound (le) of the series `name` with these labels (besides le), from a scrape's text. */
export function bucketsOf(text: string, name: string, labels: Readonly<Record<string, string>>): Map<number, number> {
  const out = new Map<number, number>();
  const prefix = `${name}_bucket{`;
  for (const line of text.split('\n')) {
    if (!line.startsWith(prefix)) continue;
    const close = line.indexOf('}');
    if (close < 0) continue;
    const got = new Map<string, string>();
    for (const m of line.slice(prefix.length, close).matchAll(/([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) got.set(m[1]!, m[2]!);
    if (Object.entries(labels).some(([k, v]) => got.get(k) !== v)) continue;
    const le = got.get('le');
    if (le === undefined) continue;
    out.set(le === '+Inf' ? Infinity : Number(le), Number(line.slice(close + 1).trim()));
  }
  return out;
}

/** Quantile `q` (0..1) of the observations between scrape `before` and scrape `after`. */
export function quantileBetween(before: string, after: string, name: string, labels: Readonly<Record<string, string>>, q: number): QuantileBetween {
  const b = bucketsOf(after, name, labels);
  let a = bucketsOf(before, name, labels);
  // A count that went down: the histogram started again in between (a restarted daemon): all of `after` is the window.
  if ([...b].some(([le, n]) => n < (a.get(le) ?? 0))) a = new Map();
  const bounds = [...b.keys()].sort((x, y) => x - y);
  const delta = bounds.map((le) => (b.get(le) ?? 0) - (a.get(le) ?? 0));
  const count = delta.length === 0 ? 0 : delta[delta.length - 1]!;
  if (count <= 0) return { count: 0, value: NaN, bucket: [NaN, NaN] };
  const rank = q * count;
  for (let i = 0; i < bounds.length; i++) {
    if (delta[i]! < rank) continue;
    const upper = bounds[i]!;
    const lower = i === 0 ? 0 : bounds[i - 1]!;
    if (upper === Infinity) return { count, value: lower, bucket: [lower, Infinity] };
    const below = i === 0 ? 0 : delta[i - 1]!;
    const inBucket = delta[i]! - below;
    const value = inBucket === 0 ? upper : lower + (upper - lower) * ((rank - below) / inBucket);
    return { count, value, bucket: [lower, upper] };
  }
  return { count, value: bounds[bounds.length - 1] ?? NaN, bucket: [NaN, NaN] };
}
