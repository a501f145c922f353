/**
 * `mup probe --sweep`: the probe at increasing offered load. For each step
 * (a percentage of a full rate), a background load of translated frames
 * (GTP-U uplink and/or SRv6 downlink, the probes' own flow with another inner
 * port, so the data plane does not stamp them) is generated with the
 * live-frame traffic generator (bpf/bench/trafficgen.bpf.c through
 * src/packet/generator.ts) on the probe's sending interface, in a
 * child process (a BPF_PROG_TEST_RUN blocks its thread); the probe runs
 * meanwhile. The result: wire latency and residence p50/p99/jitter per step,
 * plotted against the load the background reached (docs/probe.md), and the
 * distribution figures of each step.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { PROBE_SPORT, setSeq, templateFrame } from '../packet/probe-frames.js';
import { runProbe, type DirectionSetup, type ProbeRunOptions, type ProbeRunResult } from './probe.js';
import type { Summary } from './stats.js';
import { decadeRange, figureSvg, niceTicks, timeUnit, UNIT_NS, type Panel, type Series } from '../plot/svg.js';
import { distOf, latencyFigures, type LatencyFigures } from './plots.js';
import { unitColumns } from './present.js';


/** The background frames' inner UDP destination port (the probes use another). */
export const BACKGROUND_PORT = 9000;

export interface LoadSpec {
  readonly netns?: string;
  readonly dev: string;
  readonly frameHex: string;
  /** Inner UDP source port offset (varied over `flows`, as the RFC 2544 generator does). */
  readonly sportOff: number;
  readonly flows: number;
  readonly rate: number;
  readonly seconds: number;
}

/** The background frame of a direction: the probe frame's flow, inner port BACKGROUND_PORT. */
export function backgroundSpec(d: DirectionSetup, size: number, rate: number, seconds: number): LoadSpec {
  const { frame, payloadOffset } = templateFrame({
    dir: d.dir, run: 0, size, udpPort: BACKGROUND_PORT, srcMac: Buffer.alloc(6), dstMac: d.dstMac,
    ...(d.uplink === undefined ? {} : { uplink: d.uplink }), ...(d.downlink === undefined ? {} : { downlink: d.downlink }),
  });
  setSeq(frame, payloadOffset, 0);
  // Not a probe: no magic, so no capture filter lets it through.
  frame.fill(0, payloadOffset, payloadOffset + 4);
  return {
    ...(d.tx.netns === undefined ? {} : { netns: d.tx.netns }),
    dev: d.tx.dev,
    frameHex: frame.toString('hex'),
    sportOff: payloadOffset - 8,
    flows: 256,
    rate,
    seconds,
  };
}

export interface LoadHandle {
  /** Resolves with what the generator sent once it is done (or killed). */
  readonly done: Promise<{ sent: number; seconds: number }>;
  stop(): void;
}

/**
 * Run the generator in a child process: `argv0 argv... probe-loadgen` with
 * the spec as JSON; resolves once it says it started sending.
 */
export function startLoad(spec: LoadSpec, command: readonly string[]): Promise<LoadHandle> {
  return new Promise((resolve, reject) => {
    const child: ChildProcess = spawn(command[0]!, [...command.slice(1), 'probe-loadgen', JSON.stringify(spec)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    let result: { sent: number; seconds: number } | undefined;
    let started = false;
    const done = new Promise<{ sent: number; seconds: number }>((res, rej) => {
      child.on('exit', (code, sig) => {
        if (result !== undefined) res(result);
        else if (sig !== null) res({ sent: 0, seconds: 0 });
        else rej(new Error(`the load generator exited with ${code}: ${stderr.trim().split('\n').pop() ?? ''}`));
      });
    });
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if (line === 'ready' && !started) {
        started = true;
        resolve({ done, stop: () => child.kill('SIGTERM') });
      } else if (line.startsWith('{')) {
        result = JSON.parse(line) as { sent: number; seconds: number };
      }
    });
    done.catch((e: unknown) => {
      if (!started) reject(e as Error);
    });
  });
}

/** The child's side: configure the generator, send at the rate for the time, print the count. */
export async function loadgenMain(specJson: string, out: (s: string) => void): Promise<void> {
  const spec = JSON.parse(specJson) as LoadSpec;
  const { Generator } = await import('../packet/generator.js');
  const g = new Generator();
  let stop = false;
  process.on('SIGTERM', () => (stop = true));
  try {
    g.configure({ frame: Buffer.from(spec.frameHex, 'hex'), sportOff: spec.sportOff, sportBase: PROBE_SPORT + 1, flows: spec.flows }, spec.dev, spec.netns ?? '');
    out('ready\n');
    const t0 = performance.now();
    let sent = 0;
    // Sends of >= 10 ms worth of frames (each run costs some set-up), paced to the rate.
    const chunk = Math.max(64, Math.round(spec.rate / 100));
    while (!stop) {
      const elapsed = (performance.now() - t0) / 1000;
      if (elapsed >= spec.seconds) break;
      const due = Math.floor(elapsed * spec.rate);
      if (due - sent >= chunk || (due > sent && spec.rate < 6400)) {
        try {
          sent += g.send(Math.min(due - sent, 8 * chunk));
        } catch (e) {
          // SIGTERM (the step is over) interrupts a run in the kernel: EINTR.
          if ((e as { code?: string }).code === 'EINTR') break;
          throw e;
        }
      } else {
        await new Promise((r) => setTimeout(r, 2));
      }
    }
    out(`${JSON.stringify({ sent, seconds: (performance.now() - t0) / 1000 })}\n`);
  } finally {
    g.close();
  }
}

export interface SweepStep {
  readonly percent: number;
  /** Offered background load per direction, frames/s. */
  readonly offeredPps: number;
  /** What the generator managed (the host may not keep up). */
  readonly achievedPps: Readonly<Record<string, number>>;
  readonly result: ProbeRunResult;
}

export interface SweepOptions {
  readonly probe: Omit<ProbeRunOptions, 'durationS' | 'onProgress'>;
  readonly stepSeconds: number;
  readonly percents: readonly number[];
  readonly fullRate: number;
  /** How to start `mup` again as the load child: [node, bin/mup.js]. */
  readonly command: readonly string[];
  readonly onStep?: (s: SweepStep) => void;
  readonly onProgress?: ProbeRunOptions['onProgress'];
}

export async function runSweep(o: SweepOptions): Promise<SweepStep[]> {
  if (o.percents.length === 0 || o.percents.some((p) => !(p >= 0 && p <= 1000))) throw new RangeError('sweep steps are percentages 0..1000');
  if (!(o.fullRate > 0)) throw new RangeError('--sweep-rate must be more than 0 frames/s');
  const steps: SweepStep[] = [];
  for (const pct of o.percents) {
    const rate = Math.round((o.fullRate * pct) / 100);
    const loads: LoadHandle[] = [];
    try {
      if (rate > 0) {
        for (const d of o.probe.directions) loads.push(await startLoad(backgroundSpec(d, o.probe.size, rate, o.stepSeconds + 2), o.command));
        await new Promise((r) => setTimeout(r, 300)); // the load settles before the probes
      }
      const result = await runProbe({ ...o.probe, durationS: o.stepSeconds, ...(o.onProgress === undefined ? {} : { onProgress: o.onProgress }) });
      for (const l of loads) l.stop();
      const got = await Promise.all(loads.map((l) => l.done));
      const achievedPps = Object.fromEntries(
        o.probe.directions.map((d, i) => [d.dir, got[i] === undefined || got[i]!.seconds === 0 ? 0 : Math.round(got[i]!.sent / got[i]!.seconds)]),
      );
      const step: SweepStep = { percent: pct, offeredPps: rate, achievedPps, result };
      steps.push(step);
      o.onStep?.(step);
    } finally {
      for (const l of loads) l.stop();
    }
  }
  return steps;
}

// ---------------------------------------------------------------------------
// Output

const pick = (s: Summary | null, k: 'p50' | 'p99' | 'jitter'): number | null =>
  s === null ? null : k === 'jitter' ? s.jitter : s.percentiles[k];

export interface SweepRow {
  percent: number;
  offeredPps: number;
  dir: string;
  achievedPps: number;
  lost: number;
  wireP50: number | null;
  wireP99: number | null;
  wireJitter: number | null;
  residenceP50: number | null;
  residenceP99: number | null;
  residenceJitter: number | null;
}

export function sweepRows(steps: readonly SweepStep[]): SweepRow[] {
  return steps.flatMap((s) =>
    s.result.directions.map((d) => ({
      percent: s.percent, offeredPps: s.offeredPps, dir: d.dir, achievedPps: s.achievedPps[d.dir] ?? 0, lost: d.sequence.lost,
      wireP50: pick(d.wire, 'p50'), wireP99: pick(d.wire, 'p99'), wireJitter: pick(d.wire, 'jitter'),
      residenceP50: pick(d.residence, 'p50'), residenceP99: pick(d.residence, 'p99'), residenceJitter: pick(d.residence, 'jitter'),
    })),
  );
}

/** The unit of a frames-per-second axis: frames/s, kframes/s or Mframes/s (numbers below 10,000). */
function rateUnit(max: number): [string, number] {
  return max >= 1e7 ? ['Mframes/s', 1e6] : max >= 1e4 ? ['kframes/s', 1e3] : ['frames/s', 1];
}

/**
 * p50, p99 and jitter against the background load the generator actually
 * reached (not the load asked for: a busy host falls short), one panel per
 * direction (or case), latency on a log axis in one unit.
 */
export function sweepSvg(rows: readonly SweepRow[], what: 'wire' | 'residence', title: string): string {
  const keys = what === 'wire' ? (['wireP50', 'wireP99', 'wireJitter'] as const) : (['residenceP50', 'residenceP99', 'residenceJitter'] as const);
  const names = ['p50', 'p99', 'jitter (p95 - p5)'];
  const values = rows.flatMap((r) => keys.map((k) => r[k])).filter((v): v is number => v !== null && v > 0);
  const hiNs = Math.max(1000, ...values);
  const unit = timeUnit(hiNs);
  const div = UNIT_NS[unit];
  const [y0, y1] = decadeRange(Math.min(100, ...values) / div, hiNs / div);
  const [ru, rdiv] = rateUnit(Math.max(1, ...rows.map((r) => r.achievedPps)));
  const xTicks = niceTicks(0, Math.max(1, ...rows.map((r) => r.achievedPps)) / rdiv);
  const x = { label: `background load reached (${ru})`, scale: 'linear' as const, min: 0, max: xTicks[xTicks.length - 1]! };
  const y = { label: `${what === 'wire' ? 'one-way wire latency' : 'residence time'} (${unit}, log scale)`, scale: 'log' as const, min: y0, max: y1 };
  const panels: Panel[] = [...new Set(rows.map((r) => r.dir))].map((dir) => {
    const mine = rows.filter((r) => r.dir === dir);
    const series: Series[] = keys
      .map((k, ki) => ({
        name: `${dir} ${names[ki]}`,
        points: mine.filter((r) => r[k] !== null && r[k]! > 0).map((r) => [r.achievedPps / rdiv, r[k]! / div] as [number, number]),
        dots: true,
        dashed: ki === 2,
      }))
      .filter((sr) => sr.points.length > 0);
    return {
      title: dir, x, y, series,
      notes: mine.map((r) => `${r.percent} %: asked ${r.offeredPps}, reached ${r.achievedPps} /s`),
    };
  });
  return figureSvg({ title, panels, width: 900, legendWidth: 250, panelHeight: 220 });
}

/** Per load step, the distribution figures (src/probe/plots.ts): one panel per direction, one series per step. */
export function sweepLatencyFigures(steps: readonly SweepStep[], what: 'wire' | 'residence', title: string): LatencyFigures | null {
  const dirs = [...new Set(steps.flatMap((s) => s.result.directions.map((d) => d.dir)))];
  const panels = dirs.map((dir) => ({
    title: dir,
    series: steps
      .map((s) =>
        distOf(
          `${s.percent} %, reached ${s.achievedPps[dir] ?? 0}/s`,
          s.result.samples.filter((x) => x.dir === dir).map((x) => (what === 'wire' ? x.wireNs : x.residenceNs)).filter((v): v is number => v !== null),
        ),
      )
      .filter((d) => d.total > 0),
  })).filter((p) => p.series.length > 0);
  if (panels.length === 0) return null;
  return latencyFigures(panels, { title, quantity: what === 'wire' ? 'one-way wire latency' : 'residence time' });
}

/** The sweep table: the load reached next to the load asked, latency columns with one unit each. */
export function formatSweep(rows: readonly SweepRow[]): string {
  const lat = unitColumns(
    ['wire p50', 'wire p99', 'wire jitter', 'res p50', 'res p99', 'res jitter'],
    rows.map((r) => [r.wireP50, r.wireP99, r.wireJitter, r.residenceP50, r.residenceP99, r.residenceJitter]),
  );
  const head = ['load %', 'asked/s', 'reached/s', 'dir', 'lost', ...lat.head];
  const body = rows.map((r, i) => [String(r.percent), String(r.offeredPps), String(r.achievedPps), r.dir, String(r.lost), ...lat.cells[i]!]);
  const all = [head, ...body];
  const w = head.map((_, i) => Math.max(...all.map((r) => r[i]!.length)));
  return all.map((r) => r.map((c, i) => c.padStart(w[i]!)).join('  ')).join('\n') + '\n';
}
