/**
 * `mup probe --sweep` and the hidden `mup probe-loadgen` it starts for the
 * background load (src/probe/sweep.ts).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import type { TimestampMode } from '../probe/native.js';
import type { DirectionSetup } from '../probe/probe.js';
import type { StampSession } from '../probe/session.js';
import { makeDirs } from '../host/mkdirs.js';

interface Io {
  out(s: string): void;
  err(s: string): void;
}

/** The options of `mup probe` that a sweep reads (probe.ts's ProbeCliOpts has them all). */
export interface SweepCliOpts {
  rate: string;
  timestamping: TimestampMode;
  out?: string;
  json?: boolean;
  progress: boolean;
  sweepRate?: string;
  sweepSteps?: string;
  sweepSeconds?: string;
}

export async function runSweepCli(
  o: SweepCliOpts,
  io: Io,
  // openSession: probe.ts's stampSession for these options, opened once the sweep's own options are checked.
  x: { setups: DirectionSetup[]; size: number; udpPort: number; graceMs: number; openSession: () => Promise<StampSession | undefined> },
): Promise<void> {
  const { runSweep, sweepRows, sweepSvg, sweepLatencyFigures, formatSweep } = await import('../probe/sweep.js');
  const { latencyLog, progressLine, reportJson } = await import('../probe/present.js');
  const fullRate = Number(o.sweepRate);
  const stepSeconds = Number(o.sweepSeconds);
  const percents = (o.sweepSteps ?? '').split(',').map((s) => Number(s.trim()));
  if (!(fullRate > 0 && fullRate <= 20_000_000)) throw new Error(`--sweep-rate ${o.sweepRate}: frames/s, more than 0`);
  if (!(stepSeconds > 0 && stepSeconds <= 600)) throw new Error(`--sweep-seconds ${o.sweepSeconds}: more than 0, at most 600`);
  if (percents.some((p) => !Number.isFinite(p) || p < 0 || p > 1000)) throw new Error(`--sweep-steps ${o.sweepSteps}: percentages, e.g. 10,20,50,100`);
  const rate = Number(o.rate);
  const session = await x.openSession();
  const tty = o.progress && process.stderr.isTTY === true;
  let steps;
  try {
    steps = await runSweep({
      probe: {
        directions: x.setups, rate, size: x.size, udpPort: x.udpPort, timestamping: o.timestamping, graceMs: x.graceMs,
        ...(session === undefined ? {} : { ring: session.ring, counters: () => session.counters() }),
      },
      stepSeconds, percents, fullRate,
      command: [process.execPath, process.argv[1]!],
      onStep: (s) => io.err(`${tty ? '\n' : ''}mup probe --sweep: ${s.percent} % (${s.offeredPps} frames/s offered) done\n`),
      ...(tty ? { onProgress: (p) => io.err(`\r${progressLine(p)}`) } : {}),
    });
  } finally {
    await session?.close();
  }
  const rows = sweepRows(steps);
  if (o.out !== undefined) {
    makeDirs(o.out);
    writeFileSync(join(o.out, 'sweep.json'), JSON.stringify({ rows, steps: steps.map((s) => ({ ...s, result: JSON.parse(reportJson(s.result)) as unknown })) }, null, 2) + '\n');
    writeFileSync(join(o.out, 'sweep-wire.svg'), sweepSvg(rows, 'wire', `mup probe --sweep: wire latency vs load (${rate} probes/s)`));
    if (session !== undefined) writeFileSync(join(o.out, 'sweep-residence.svg'), sweepSvg(rows, 'residence', 'mup probe --sweep: residence vs load'));
    for (const what of ['wire', 'residence'] as const) {
      const f = sweepLatencyFigures(steps, what, `mup probe --sweep: ${what === 'wire' ? 'wire latency' : 'residence'} per load step`);
      if (f === null) continue;
      writeFileSync(join(o.out, `sweep-cdf-${what}.svg`), f.cdf);
      writeFileSync(join(o.out, `sweep-ccdf-${what}.svg`), f.ccdf);
      writeFileSync(join(o.out, `sweep-percentiles-${what}.svg`), f.percentiles);
    }
    // One HdrHistogram interval log per step (tags <dir>-wire, <dir>-residence), as `mup probe --out` writes.
    for (const s of steps) writeFileSync(join(o.out, `step-${s.percent}.hlog`), latencyLog(s.result));
    writeFileSync(join(o.out, 'sweep.txt'), formatSweep(rows));
    io.err(`mup probe --sweep: wrote sweep.json, sweep.txt, the plots and the step-*.hlog logs in ${o.out}\n`);
  }
  io.out(o.json === true ? JSON.stringify(rows, null, 2) + '\n' : formatSweep(rows));
}

/** The child process of a sweep step: `mup probe-loadgen SPEC_JSON` (not for people). */
export function registerLoadgen(program: Command, io: Io): void {
  program
    .command('probe-loadgen <spec>', { hidden: true })
    .description('background load for mup probe --sweep (started by it)')
    .action(async (spec: string) => {
      const { loadgenMain } = await import('../probe/sweep.js');
      await loadgenMain(spec, (s) => io.out(s));
    });
}
