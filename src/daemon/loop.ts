/**
 * The daemon's event-loop delay (perf_hooks.monitorEventLoopDelay): how long
 * a timer due now waits because the loop is busy, which is what every API
 * request and netlink event waits too. Two windows of the same measure:
 * - since the last /metrics scrape (`mup_event_loop_delay_seconds`, reset by
 *   each scrape: the gauges say what happened between two scrapes);
 * - since the daemon started (GET /v1/status `eventLoop.sinceStart`).
 * docs/metrics.md, docs/daemon.md "Event loop".
 */
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';

/** Sampling resolution, ms: a stall shorter than this is not seen. */
export const LOOP_RESOLUTION_MS = 10;

export interface LoopDelay {
  /** Seconds. */
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  readonly mean: number;
  /** Samples in the window (one per resolution tick the loop was free to take). */
  readonly samples: number;
}

function read(h: IntervalHistogram): LoopDelay {
  const s = (ns: number): number => (Number.isFinite(ns) ? ns / 1e9 : 0);
  const n = h.count;
  if (n === 0) return { p50: 0, p99: 0, max: 0, mean: 0, samples: 0 };
  return { p50: s(h.percentile(50)), p99: s(h.percentile(99)), max: s(h.max), mean: s(h.mean), samples: n };
}

export class LoopMonitor {
  readonly #scrape = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
  readonly #total = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
  #since = new Date();
  #running = false;

  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#since = new Date();
    this.#scrape.enable();
    this.#total.enable();
  }

  stop(): void {
    this.#running = false;
    this.#scrape.disable();
    this.#total.disable();
  }

  /** Since the last scrape, and start a new window (the /metrics collector). */
  takeScrapeWindow(): LoopDelay & { readonly seconds: number } {
    const d = read(this.#scrape);
    const seconds = (Date.now() - this.#since.getTime()) / 1000;
    this.#scrape.reset();
    this.#since = new Date();
    return { ...d, seconds };
  }

  /** For GET /v1/status: since start, and since the last scrape (not reset). */
  status(): { readonly resolutionMs: number; readonly sinceStart: LoopDelay; readonly sinceLastScrape: LoopDelay & { readonly since: string } } {
    return { resolutionMs: LOOP_RESOLUTION_MS, sinceStart: read(this.#total), sinceLastScrape: { ...read(this.#scrape), since: this.#since.toISOString() } };
  }
}
