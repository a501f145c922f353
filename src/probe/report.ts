/**
 * One direction of a probe run, from what was sent and what arrived, to
 * every figure issue 4 asks for: loss, duplicates, reordering, latency
 * summary (nearest-rank percentiles, jitter = p95 - p5), RFC 3393 IPDV and
 * an HDR histogram. Definitions: stats.ts.
 */
import { HdrHistogram } from './hdr.js';
import { accountSequences, ipdv, summarize, type Arrival, type Ipdv, type SequenceAccounting, type Summary } from './stats.js';

export interface LatencyReport {
  readonly sequence: SequenceAccounting;
  /** Over the first copy of each sequence number in 0..sent-1; null if none arrived. */
  readonly latency: Summary | null;
  readonly ipdv: Ipdv;
  readonly histogram: HdrHistogram;
}

/** `arrivals` in arrival order; sequence numbers 0..sent-1 were sent. */
export function analyze(sent: number, arrivals: readonly Arrival[], significantDigits = 3): LatencyReport {
  const sequence = accountSequences(
    sent,
    arrivals.map((a) => a.seq),
  );
  const seen = new Set<number>();
  const first: Arrival[] = [];
  for (const a of arrivals) {
    if (!Number.isInteger(a.seq) || a.seq < 0 || a.seq >= sent || seen.has(a.seq)) continue;
    seen.add(a.seq);
    first.push(a);
  }
  const histogram = new HdrHistogram(significantDigits);
  for (const a of first) histogram.record(a.delayNs);
  return { sequence, latency: summarize(first.map((a) => a.delayNs)), ipdv: ipdv(first), histogram };
}
