/**
 * The benchmark's names, options and defaults, without the generator, the
 * lab or libbpf: `mup --help` and every other command name them at
 * start-up. Imports nothing of the benchmark, so that cases, latency and
 * run can all build on it.
 */

export const RFC2544_SIZES = [64, 128, 256, 512, 1024, 1280, 1518] as const;

export type CaseName = 'uplink' | 'downlink' | 'bidir' | 'kernel-ipv4' | 'kernel-seg6' | 'xdp-l3fwd';
export const CASES: readonly CaseName[] = ['uplink', 'downlink', 'bidir', 'kernel-ipv4', 'kernel-seg6', 'xdp-l3fwd'];

export const DEFAULT_FLOWS = 1024;

export const DEFAULTS: Omit<Rfc2544Options, 'sizes' | 'cases'> = {
  trialMs: 10_000,
  lossTolerance: 0,
  resolution: 0.01,
  maxTrials: 14,
  flows: DEFAULT_FLOWS,
  napi: 'softirq',
  warmupFrames: 2000,
  repeat: 1,
  latencyLoads: [10, 50, 90],
  probeRate: 2000,
  probeSeconds: 3,
};

export interface LatencyOptions {
  /** Load steps, percent of the zero-loss rate found; empty: no latency. */
  latencyLoads: readonly number[];
  /** Probes per second during a step. */
  probeRate: number;
  /** Seconds of probing per step. */
  probeSeconds: number;
  /**
   * How to start `mup` as the background load's child process
   * (`command... probe-loadgen SPEC`); default node and bin/mup.js (dist/).
   */
  loadCommand?: readonly string[];
}

export type NapiMode = 'softirq' | 'threaded';

export interface Rfc2544Options extends LatencyOptions {
  sizes: readonly number[];
  cases: readonly CaseName[];
  /** Length of each trial of the search. */
  trialMs: number;
  /** Loss ratio that still passes (0: zero loss). */
  lossTolerance: number;
  /** Search resolution: stop when (hi − lo)/hi <= this. */
  resolution: number;
  maxTrials: number;
  /** Inner flows (source ports) per stream. */
  flows: number;
  /** Where the device under test's veths run their NAPI (XDP and forwarding). */
  napi: NapiMode;
  /** Frames of the check before each search (at a low rate; all must arrive). */
  warmupFrames: number;
  /** Run the whole set this many times, interleaved (sizes × cases, then again); the report takes medians. */
  repeat: number;
  /** The translator's object; default build/mup.bpf.o. */
  object?: string;
  /**
   * The translator forwards by the next-hop cache of src/dataplane/nexthop.ts
   * (as `mup daemon` does), or by a FIB lookup for every packet. Default cache.
   */
  nexthop?: 'cache' | 'fib';
  signal?: AbortSignal;
  /** One line per event (case start, trial). */
  log?: (line: string) => void;
  /** Progress within a trial (0..1) and what runs. */
  progress?: (what: string, fraction: number) => void;
}
