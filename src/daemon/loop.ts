/**
 * The daemon's event-loop delay: how long a timer due now waits because the
 * loop is busy, which is what every API request and netlink event waits too.
 * Two windows of the same samples:
 * - since the last /metrics scrape (`mup_event_loop_delay_seconds`, reset by
 *   each scrape: the gauges say what happened between two scrapes);
 * - since the daemon started (GET /v1/status `eventLoop.sinceStart`).
 *
 * Measured here rather than with perf_hooks.monitorEventLoopDelay, whose
 * histogram (a) records the whole interval between two ticks of its timer,
 * resolution included (an idle loop read 10.2 ms at a 10 ms resolution), and
 * (b) forgets, on reset(), when it last ticked, so the first interval after
 * a reset (a scrape, and the stall of the scrape's own work) was never
 * recorded. Here a timer ticks every LOOP_RESOLUTION_MS and records how late
 * it is (interval minus resolution) into both histograms; resetting one does
 * not lose a sample. docs/metrics.md, docs/daemon.md "Event loop".
 */
import { createHistogram, type RecordableHistogram } from 'node:perf_hooks';

/** Sampling interval, ms: a stall is seen once it is over (a tick late by it). */
export const LOOP_RESOLUTION_MS = 10;

export interface LoopDelay {
  /** Seconds. */
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  readonly mean: number;
  readonly min: number;
  /** Samples in the window (one per tick the loop was free to take). */
  readonly samples: number;
}

function read(h: RecordableHistogram): LoopDelay {
  // Recorded in ns, at least 1 (the histogram's lowest value): 1 ns reads as 0.
  const s = (ns: number): number => (Number.isFinite(ns) && ns > 1 ? ns / 1e9 : 0);
  const n = h.count;
  if (n === 0) return { p50: 0, p99: 0, max: 0, mean: 0, min: 0, samples: 0 };
  return { p50: s(h.percentile(50)), p99: s(h.percentile(99)), max: s(h.max), mean: s(h.mean), min: s(h.min), samples: n };
}

export class LoopMonitor {
  readonly #scrape = createHistogram();
  readonly #total = createHistogram();
  #since = new Date();
  /**
   * Each histogram as last read, until the next record or reset: GET
   * /v1/status read both on every request (two percentiles each, about
   * 170 µs together on this host, 60 % of the answer's cost), though they
   * change only once a tick. A status poller asking every 2 ms beside 4
   * writers took about 7 % of the daemon's time. The readings are the same
   * numbers, read once per tick at most.
   */
  #scrapeRead: LoopDelay | undefined;
  #totalRead: LoopDelay | undefined;
  #timer: NodeJS.Timeout | undefined;
  /** performance.now() of the last tick. */
  #prev = 0;

  start(): void {
    if (this.#timer !== undefined) return;
    this.#since = new Date();
    this.#prev = performance.now();
    this.#timer = setInterval(() => this.#tick(), LOOP_RESOLUTION_MS);
    // Like monitorEventLoopDelay's timer: it does not keep the process alive.
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #tick(): void {
    const now = performance.now();
    const lateMs = now - this.#prev - LOOP_RESOLUTION_MS;
    this.#prev = now;
    const ns = Math.max(1, Math.round(lateMs * 1e6));
    this.#scrape.record(ns);
    this.#total.record(ns);
    this.#scrapeRead = undefined;
    this.#totalRead = undefined;
  }

  /** Since the last scrape, and start a new window (the /metrics collector). */
  takeScrapeWindow(): LoopDelay & { readonly seconds: number } {
    const d = this.#scrapeRead ?? read(this.#scrape);
    const seconds = (Date.now() - this.#since.getTime()) / 1000;
    this.#scrape.reset();
    this.#scrapeRead = undefined;
    this.#since = new Date();
    return { ...d, seconds };
  }

  /** For GET /v1/status: since start, and since the last scrape (not reset). */
  status(): { readonly resolutionMs: number; readonly sinceStart: LoopDelay; readonly sinceLastScrape: LoopDelay & { readonly since: string } } {
    this.#totalRead ??= read(this.#total);
    this.#scrapeRead ??= read(this.#scrape);
    return { resolutionMs: LOOP_RESOLUTION_MS, sinceStart: this.#totalRead, sinceLastScrape: { ...this.#scrapeRead, since: this.#since.toISOString() } };
  }
}
