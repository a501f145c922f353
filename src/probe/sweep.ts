/**
 * `mup probe --sweep`: the probe at increasing offered load. For each step
 * (a percentage of a full rate), a background load of translated frames
 * (GTP-U uplink and/or SRv6 downlink, the probes' own flow with another inner
 * port, so the data plane does not stamp them) is generated with the
 * live-frame traffic generator (bpf/bench/trafficgen.bpf.c through
 * src/packet/generator.ts) on the probe's sending interface, in a
 * child process (a BPF_PROG_TEST_RUN blocks its thread); the probe runs
 * meanwhile. The result: wire latency and residence p50/p99/jitter per step,
 * and a plot of them against the load.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { PROBE_SPORT, setSeq, templateFrame } from '../packet/probe-frames.js';
import { runProbe, type DirectionSetup, type ProbeRunOptions, type ProbeRunResult } from './probe.js';
import type { Summary } from './stats.js';


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

const esc = (s: string): string => s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c]!);

/** p50, p99 and jitter against offered load, one line each per direction; ns on a log axis. */
export function sweepSvg(rows: readonly SweepRow[], what: 'wire' | 'residence', title: string): string {
  const W = 760;
  const H = 460;
  const m = { left: 80, right: 180, top: 44, bottom: 58 };
  const pw = W - m.left - m.right;
  const ph = H - m.top - m.bottom;
  const keys = what === 'wire' ? (['wireP50', 'wireP99', 'wireJitter'] as const) : (['residenceP50', 'residenceP99', 'residenceJitter'] as const);
  const names = ['p50', 'p99', 'jitter (p95 - p5)'];
  const values = rows.flatMap((r) => keys.map((k) => r[k])).filter((v): v is number => v !== null && v > 0);
  const maxX = Math.max(100, ...rows.map((r) => r.percent));
  const lo = Math.pow(10, Math.floor(Math.log10(Math.min(...values, 100))));
  const hi = Math.pow(10, Math.ceil(Math.log10(Math.max(...values, 1000))));
  const x = (p: number): number => m.left + (p / maxX) * pw;
  const y = (v: number): number => m.top + ph - ((Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * ph;
  // Three lines a series: twelve colours keep four series apart (the RFC 2544 report's cases).
  const colors = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#17becf', '#e377c2', '#7f7f7f', '#bcbd22', '#393b79', '#637939'];
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="24" text-anchor="middle" font-size="15">${esc(title)}</text>`,
    `<line x1="${m.left}" y1="${m.top + ph}" x2="${m.left + pw}" y2="${m.top + ph}" stroke="black"/>`,
    `<line x1="${m.left}" y1="${m.top}" x2="${m.left}" y2="${m.top + ph}" stroke="black"/>`,
  ];
  for (let p = 0; p <= maxX; p += maxX <= 100 ? 10 : 50) {
    parts.push(`<line x1="${x(p)}" y1="${m.top + ph}" x2="${x(p)}" y2="${m.top + ph + 5}" stroke="black"/>`);
    parts.push(`<text x="${x(p)}" y="${m.top + ph + 18}" text-anchor="middle">${p}</text>`);
  }
  for (let v = lo; v <= hi; v *= 10) {
    const label = v < 1e3 ? `${v} ns` : v < 1e6 ? `${v / 1e3} µs` : `${v / 1e6} ms`;
    parts.push(`<line x1="${m.left - 5}" y1="${y(v)}" x2="${m.left + pw}" y2="${y(v)}" stroke="#ddd"/>`);
    parts.push(`<text x="${m.left - 8}" y="${y(v) + 4}" text-anchor="end">${label}</text>`);
  }
  parts.push(`<text x="${m.left + pw / 2}" y="${H - 14}" text-anchor="middle">offered background load (% of the full rate)</text>`);
  parts.push(`<text transform="translate(18 ${m.top + ph / 2}) rotate(-90)" text-anchor="middle">${what === 'wire' ? 'one-way wire latency' : 'residence time'} (log)</text>`);
  const dirs = [...new Set(rows.map((r) => r.dir))];
  let legend = 0;
  dirs.forEach((dir, di) => {
    keys.forEach((k, ki) => {
      const pts = rows.filter((r) => r.dir === dir && r[k] !== null && r[k]! > 0).map((r) => `${x(r.percent).toFixed(1)},${y(r[k]!).toFixed(1)}`);
      if (pts.length === 0) return;
      const color = colors[(di * 3 + ki) % colors.length]!;
      const dash = ki === 2 ? ' stroke-dasharray="5,3"' : '';
      parts.push(`<polyline fill="none" stroke="${color}" stroke-width="2"${dash} points="${pts.join(' ')}"/>`);
      for (const pt of pts) {
        const [cx, cy] = pt.split(',');
        parts.push(`<circle cx="${cx}" cy="${cy}" r="3" fill="${color}"/>`);
      }
      const ly = m.top + 10 + legend * 18;
      parts.push(`<line x1="${m.left + pw + 14}" y1="${ly}" x2="${m.left + pw + 38}" y2="${ly}" stroke="${color}" stroke-width="2"${dash}/>`);
      parts.push(`<text x="${m.left + pw + 44}" y="${ly + 4}">${esc(`${dir} ${names[ki]}`)}</text>`);
      legend++;
    });
  });
  parts.push('</svg>');
  return parts.join('\n') + '\n';
}

export function formatSweep(rows: readonly SweepRow[]): string {
  const f = (v: number | null): string => (v === null ? '-' : v < 10_000 ? `${Math.round(v)} ns` : `${(v / 1000).toFixed(1)} µs`);
  const head = ['load %', 'offered/s', 'achieved/s', 'dir', 'lost', 'wire p50', 'wire p99', 'wire jitter', 'res p50', 'res p99', 'res jitter'];
  const body = rows.map((r) => [
    String(r.percent), String(r.offeredPps), String(r.achievedPps), r.dir, String(r.lost), f(r.wireP50), f(r.wireP99), f(r.wireJitter),
    f(r.residenceP50), f(r.residenceP99), f(r.residenceJitter),
  ]);
  const all = [head, ...body];
  const w = head.map((_, i) => Math.max(...all.map((r) => r[i]!.length)));
  return all.map((r) => r.map((c, i) => c.padStart(w[i]!)).join('  ')).join('\n') + '\n';
}
