/**
 * The benchmark's names, options and defaults, without the generator, the
 * lab or libbpf: `mup --help` and every other command name them at
 * start-up. Imports nothing of the benchmark, so that cases, latency and
 * run can all build on it.
 */

export const RFC2544_SIZES = [64, 128, 256, 512, 1024, 1280, 1518] as const;

export type CaseName = 'uplink' | 'downlink' | 'bidir' | 'kernel-ipv4' | 'kernel-seg6' | 'xdp-l3fwd' | 'uplink-10k' | 'pe-downlink' | 'slow-dut';
export const CASES: readonly CaseName[] = ['uplink', 'downlink', 'bidir', 'kernel-ipv4', 'kernel-seg6', 'xdp-l3fwd', 'uplink-10k', 'pe-downlink', 'slow-dut'];
/** What `mup bench rfc2544` runs without --cases: the translator, its sessions cases and the baselines of the targets. */
export const DEFAULT_CASES: readonly CaseName[] = ['uplink', 'downlink', 'uplink-10k', 'pe-downlink', 'xdp-l3fwd', 'kernel-ipv4'];
/** Without --sizes: the 64-byte class of the targets (every RFC 2544 size with --sizes all). */
export const DEFAULT_SIZES: readonly number[] = [64];
/** RFC 2544 §26.1: a trial lasts at least 60 s. */
export const RFC_TRIAL_MS = 60_000;

export type TestName = 'throughput' | 'loss' | 'back2back';
export const TESTS: readonly TestName[] = ['throughput', 'loss', 'back2back'];

export const DEFAULT_FLOWS = 1024;

export const DEFAULTS: Omit<Rfc2544Options, 'sizes' | 'cases'> = {
  trialMs: 5_000,
  lossTolerance: 0,
  resolution: 0.01,
  maxTrials: 14,
  confirm: 2,
  flows: DEFAULT_FLOWS,
  napi: 'pinned',
  tests: TESTS,
  b2bTrials: 3,
  slowSpinNs: 2000,
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

/**
 * pinned (default): the DUT's veths in threaded NAPI pinned to their own
 * CPU, the paced generator and the sinks on the other (cpus.ts); softirq and
 * threaded: the earlier live-frame generator, sharing the DUT's core
 * (softirq) or not pinned (threaded).
 */
export type NapiMode = 'pinned' | 'softirq' | 'threaded';

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
  /** Trials that repeat the rate found; it is reported only if all pass (search.ts findThroughput). */
  confirm: number;
  /** Inner flows (source ports) per stream. */
  flows: number;
  /** Where the device under test's veths run their NAPI (XDP and forwarding). */
  napi: NapiMode;
  /** RFC 2544 tests (pinned mode): throughput (§26.1), loss (frame loss rate, §26.3), back2back (§26.4). */
  tests: readonly TestName[];
  /** Back-to-back trials per case (RFC 2544 asks for 50). */
  b2bTrials: number;
  /** slow-dut case: ns the deliberately slow forwarder spins per frame. */
  slowSpinNs: number;
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
