/**
 * The benchmark's names and defaults, without the generator, the lab or
 * libbpf: `mup --help` and every other command name them at start-up.
 */
import type { Rfc2544Options } from './run.js';

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
