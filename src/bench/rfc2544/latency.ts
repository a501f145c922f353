/**
 * Latency at load (RFC 2544 section 26.2, with the probe for the timestamps):
 * after a case's throughput search, for each load step (a percentage of the
 * zero-loss rate just found) the live-frame generator sends the case's own
 * frames at that rate as background load, in a child process (a
 * BPF_PROG_TEST_RUN blocks its thread; `mup probe-loadgen`, as `mup probe
 * --sweep` starts it), while the probe (src/probe/probe.ts) sends its frames
 * through the same device under test in the same namespaces and captures
 * them behind the sink, which hands them to the stack (Sink.expect's pass).
 * With the translator, its in-band stamps give the residence time too.
 *
 * Per step: wire latency and residence (summaries: p50, p99, p99.9, max,
 * jitter), probes sent / received, and what the background lost.
 */
import { fileURLToPath } from 'node:url';
import type { Dataplane } from '../../dataplane/index.js';
import type { Summary } from '../../probe/stats.js';
import type { HdrBucket } from '../../probe/hdr.js';
import type { DirectionSetup } from '../../probe/probe.js';
import type { LoadSpec } from '../../probe/sweep.js';
import type { StampSession } from '../../probe/session.js';
import type { CaseSetup, ProbePlan, Stream } from './cases.js';
import { untilSteady, type Sink } from '../../packet/generator.js';
import { MAC, type BenchLab } from './lab.js';
import { AbortedError } from './search.js';

/** The probes' inner UDP destination port (`mup probe`'s default); the background uses 9000. */
export const PROBE_UDP_PORT = 47000;
/** The background runs this long before the first probe, and past the last one by the grace period and this. */
const LEAD_MS = 300;
const GRACE_MS = 300;
const TAIL_MS = 200;

export type { LatencyOptions } from './defaults.js';
import type { LatencyOptions } from './defaults.js';

/** One load step of one case and frame size. */
export interface LatencyStep {
  percent: number;
  /** Background load asked for, frames per second. */
  offeredPps: number;
  /** What the background generator sent, how long it ran, and what the sink counted of it. */
  background: { sent: number; seconds: number; achievedPps: number; received: number; lost: number; lossRatio: number };
  probes: { sent: number; received: number; lost: number; duplicates: number; reordered: number; passedAtSink: number };
  /** One-way, probe TX stamp to RX stamp (software stamps on veths). */
  wire: Summary | null;
  /** In-program residence from the translator's ring records; null for a baseline. */
  residence: Summary | null;
  /** The HDR histograms (3 digits) behind wire and residence, for the distribution plots; absent in results from before they were kept. */
  histograms?: { wire: HdrBucket[] | null; residence: HdrBucket[] | null };
  notes: string[];
}

export interface CaseLatency {
  probeRate: number;
  probeSeconds: number;
  /** Probe frame length (the case's own frame). */
  probeFrameLen: number;
  steps: LatencyStep[];
}

/** The step rates: each percentage of the zero-loss rate, rounded to a frame per second. */
export function stepRates(fps: number, percents: readonly number[]): { percent: number; rate: number }[] {
  if (!(fps >= 0) || !Number.isFinite(fps)) throw new RangeError(`zero-loss rate ${fps}: a finite number of frames per second >= 0`);
  return percents.map((percent) => {
    if (!(percent >= 0 && percent <= 100)) throw new RangeError(`load step ${percent} %: 0 to 100`);
    return { percent, rate: Math.round((fps * percent) / 100) };
  });
}

/** Why a case and its result get no latency, or undefined when they do. */
export function latencySkip(setup: Pick<CaseSetup, 'probe'>, fps: number, o: Pick<LatencyOptions, 'latencyLoads'>): string | undefined {
  if (o.latencyLoads.length === 0) return 'latency off (--no-latency)';
  if ('reason' in setup.probe) return setup.probe.reason;
  if (!(fps > 0)) return 'no zero-loss rate was found';
  return undefined;
}

/** `node bin/mup.js`: the compiled CLI (make ts), which has the hidden probe-loadgen command. */
export function defaultLoadCommand(): string[] {
  return [process.execPath, fileURLToPath(new URL('../../../bin/mup.js', import.meta.url))];
}

/** The background: the stream's own frames (the throughput search's), from its generator's side. */
export function loadSpec(lab: BenchLab, s: Stream, rate: number, seconds: number): LoadSpec {
  return {
    netns: s.from === 'a' ? lab.a : lab.b,
    dev: s.from === 'a' ? 'ea' : 'eb',
    frameHex: s.gen.frame.toString('hex'),
    sportOff: s.gen.sportOff,
    flows: s.gen.flows,
    rate,
    seconds,
  };
}

/** The probe's direction: sent where the stream is generated, captured where the sink counts it. */
export function probeDirection(lab: BenchLab, s: Stream, plan: ProbePlan): DirectionSetup {
  const [txNs, txIf, rxNs, rxIf, dst] = s.from === 'a' ? [lab.a, 'ea', lab.b, 'eb', MAC.da] : [lab.b, 'eb', lab.a, 'ea', MAC.db];
  return {
    dir: plan.dir,
    tx: { netns: txNs, dev: txIf },
    rx: { netns: rxNs, dev: rxIf },
    dstMac: Buffer.from(dst.replaceAll(':', ''), 'hex'),
    ...(plan.uplink === undefined ? {} : { uplink: plan.uplink }),
    ...(plan.downlink === undefined ? {} : { downlink: plan.downlink }),
  };
}

export interface LatencyContext {
  lab: BenchLab;
  setup: CaseSetup;
  /** RFC 2544 frame size, for messages. */
  size: number;
  /** The sink on the side where the case's stream arrives. */
  sink: Sink;
  /** The translator, when it is the device under test: its in-band stamps. */
  dp?: Dataplane;
  fps: number;
  o: LatencyOptions & { signal?: AbortSignal };
  log: (line: string) => void;
  progress?: (what: string, fraction: number) => void;
}

/** Every load step of one case and size. The sink must already expect the stream with the probe's pass word. */
export async function measureLatency(x: LatencyContext): Promise<CaseLatency> {
  const { runProbe } = await import('../../probe/probe.js');
  const { startLoad } = await import('../../probe/sweep.js');
  const { dataplaneSession } = await import('../../probe/session.js');
  const stream = x.setup.streams[0]!;
  const plan = x.setup.probe as ProbePlan;
  const dir = probeDirection(x.lab, stream, plan);
  const what = `${x.setup.name} ${x.size}B`;
  const out: CaseLatency = { probeRate: x.o.probeRate, probeSeconds: x.o.probeSeconds, probeFrameLen: stream.gen.frame.length, steps: [] };
  const session: StampSession | undefined = x.dp === undefined ? undefined : dataplaneSession(x.dp, { udpPort: PROBE_UDP_PORT }, 'the benchmark\'s translator');
  try {
    for (const { percent, rate } of stepRates(x.fps, x.o.latencyLoads)) {
      if (x.o.signal?.aborted) throw new AbortedError();
      x.sink.reset();
      const seconds = (LEAD_MS + x.o.probeSeconds * 1000 + GRACE_MS + TAIL_MS) / 1000;
      const load = rate > 0 ? await startLoad(loadSpec(x.lab, stream, rate, seconds), x.o.loadCommand ?? defaultLoadCommand()) : undefined;
      let bg = { sent: 0, seconds: 0 };
      let result;
      try {
        await new Promise((r) => setTimeout(r, LEAD_MS));
        result = await runProbe({
          directions: [dir], rate: x.o.probeRate, durationS: x.o.probeSeconds, size: stream.gen.frame.length, udpPort: PROBE_UDP_PORT,
          timestamping: 'software', graceMs: GRACE_MS,
          ...(x.o.signal === undefined ? {} : { signal: x.o.signal }),
          ...(session === undefined ? {} : { ring: session.ring, counters: () => session.counters() }),
          ...(x.progress === undefined ? {} : { onProgress: (p) => x.progress!(`${what} latency @ ${percent} %`, p.elapsedS / p.durationS) }),
        });
        if (x.o.signal?.aborted) throw new AbortedError();
        // The load ends by itself, after the probes: its count is then exact (a signal could cut a send short).
        if (load !== undefined) bg = await load.done;
      } finally {
        if (load !== undefined) {
          // Interrupted or failed: stop the child, and wait for it to be gone.
          load.stop();
          await load.done.catch(() => undefined);
        }
      }
      if (x.o.signal?.aborted) throw new AbortedError();
      const received = await untilSteady(() => x.sink.read(0).frames);
      const c = x.sink.read(0);
      const d = result.directions[0]!;
      const lost = bg.sent - received;
      const step: LatencyStep = {
        percent,
        offeredPps: rate,
        background: {
          sent: bg.sent, seconds: bg.seconds, achievedPps: bg.seconds > 0 ? Math.round(bg.sent / bg.seconds) : 0,
          received, lost, lossRatio: bg.sent > 0 ? lost / bg.sent : 0,
        },
        probes: {
          sent: d.sequence.sent, received: d.sequence.received, lost: d.sequence.lost, duplicates: d.sequence.duplicates,
          reordered: d.sequence.reordered, passedAtSink: c.passed,
        },
        wire: d.wire,
        residence: session === undefined ? null : d.residence,
        histograms: {
          wire: d.wireHistogram.count > 0 ? d.wireHistogram.buckets() : null,
          residence: session === undefined || d.residenceHistogram.count === 0 ? null : d.residenceHistogram.buckets(),
        },
        notes: [...result.notes, ...(lost < 0 ? [`the sink counted ${-lost} background frames more than were sent: stray traffic`] : [])],
      };
      if (rate > 0 && step.background.achievedPps < 0.95 * rate) {
        step.notes.push(
          `the background reached ${(step.background.achievedPps / 1e6).toFixed(3)} of ${(rate / 1e6).toFixed(3)} Mpps offered: ` +
            'the load was lighter than its percentage says',
        );
      }
      out.steps.push(step);
      x.log(
        `${what}: latency @ ${percent} % (${(rate / 1e6).toFixed(3)} Mpps background, lost ${lost}): probes ${d.sequence.received}/${d.sequence.sent}, ` +
          `wire p50 ${fmtNs(d.wire?.percentiles.p50)} p99 ${fmtNs(d.wire?.percentiles.p99)}` +
          (step.residence === null ? '' : `, residence p50 ${fmtNs(step.residence.percentiles.p50)} p99 ${fmtNs(step.residence.percentiles.p99)}`),
      );
    }
  } finally {
    await session?.close();
  }
  return out;
}

/** ns as ns below 10 µs, µs above, '-' for none. */
export function fmtNs(v: number | null | undefined): string {
  if (v === null || v === undefined) return '-';
  return v < 10_000 ? `${Math.round(v)} ns` : `${(v / 1000).toFixed(1)} µs`;
}

