/** `mup probe --sweep` (filled in below). */
import type { DirectionSetup, Endpoint } from '../probe/run.js';
import type { ProbeCliOpts } from './probe.js';

interface Io {
  out(s: string): void;
  err(s: string): void;
}

export function runSweepCli(
  _o: ProbeCliOpts,
  _io: Io,
  _x: { setups: DirectionSetup[]; attach: Endpoint[]; size: number; udpPort: number; graceMs: number },
): Promise<void> {
  return Promise.reject(new Error('--sweep is not built yet'));
}
