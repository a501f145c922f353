/**
 * `mup bench rfc2544` as a library: build the lab, then for each frame size
 * and case put the case's program on the device under test, check that a
 * few frames get through translated as expected, and search the zero-loss
 * throughput (search.ts). Everything it creates (namespaces, veths, XDP
 * attachments, BPF objects) is removed in a finally, also when interrupted.
 */
import { execa } from 'execa';
import { openDataplane, type Dataplane } from '../../dataplane/index.js';
import { NextHopWatcher } from '../../dataplane/nexthop.js';
import { attachXdp, Generator, L3fwd, Sink, untilSteady } from '../../packet/generator.js';
import { CASE_TITLES, caseSetup, DEFAULT_FLOWS, innerLen, sessionsConfig, translatorConfig, type CaseName, type CaseSetup } from './cases.js';
import { BenchLab, sweepStale } from './lab.js';
import { AbortedError, findThroughput, runTrial, type TrialIo, type TrialResult } from './search.js';
import { latencySkip, measureLatency, type CaseLatency } from './latency.js';
import { PROBE_MAGIC } from '../../dataplane/probe-layout.js';
import { progInfo } from '../../dataplane/libbpf.js';
import { DutAux, PACED_BATCH, PacedGenerator } from './pacedgen.js';
import { DutWatch, enableBpfStats, pinLab, progStats, saveAffinity, type CpuPlan, type DutCheck } from './cpus.js';
import { backToBack, frameLossRate, pacedTrial, type Back2Back, type LossStep, type PacedIo } from './paced.js';

export type { NapiMode, Rfc2544Options } from './defaults.js';
import type { Rfc2544Options } from './defaults.js';
export { DEFAULTS } from './defaults.js';
import { DEFAULTS } from './defaults.js';

export interface TrialRecord extends TrialResult {
  pass: boolean;
  /** A trial that repeated a rate found (confirmation or step-down), not one of the bisection. */
  confirm?: boolean;
  /**
   * Kernel time per frame sent (BPF_PROG_TEST_RUN's duration, without its
   * per-call set-up): the generator, plus in softirq mode everything the
   * frame caused on the same CPU (the DUT, the sink).
   */
  nsPerFrame: number;
  /** Sampled frames at the sink that failed a check (wrong output, or lab chatter). */
  bad: number;
  /**
   * Where frames went missing, for a trial with loss: drop counters of the
   * veths on the path (rx/tx dropped, from `ip -s link`) and, with the
   * translator, its own events other than forwarding (drop reasons, passes,
   * FIB misses), all as deltas over the trial; zeros left out.
   */
  drops: Record<string, number>;
  /** Pinned mode: the DUT's NAPI threads during the trial (CPUs seen, busy share). */
  dut?: DutCheck;
  /** Pinned mode: the DUT program's run time per run (kernel.bpf_stats_enabled) during the trial, ns. */
  progNs?: number;
}

export interface CaseResult {
  case: CaseName;
  /** Which repetition of the set (1-based). */
  rep: number;
  title: string;
  /** RFC 2544 frame size this row stands for. */
  size: number;
  /** Inner IP packet, bytes (size − 18). */
  inner: number;
  /** Frame lengths the DUT receives (one per stream). */
  inLens: number[];
  /**
   * Zero-loss (within tolerance) throughput, frames per second: the lowest
   * rate reached by the trials at the confirmed rate, all passed, none of the
   * search's losing at or below it; 0 when no rate held.
   */
  fps: number;
  /** The rate asked for in the trials `fps` comes from. */
  fpsOffered?: number;
  /** The throughput held in its confirmation trials (absent in reports before they existed). */
  confirmed?: boolean;
  /** The same in Gbit/s of the frames the DUT receives (Ethernet header, no FCS, preamble or gap). */
  gbps: number;
  generatorLimited: boolean;
  /** nsPerFrame of the trial the throughput comes from. */
  nsPerFrame: number;
  warmup: { sent: number; received: number; bad: number };
  trials: TrialRecord[];
  error?: string;
  /** Latency at load steps of the zero-loss rate (latency.ts). */
  latency?: CaseLatency;
  /** Why there is no latency for this case and size. */
  latencySkipped?: string;
  /** Pinned mode: the generator's top rate in this case (first trial, flat out), frames per second. */
  topRate?: number;
  /** Pinned mode: the DUT program's ns per run in the throughput trial (bpf_stats). */
  progNs?: number;
  /** RFC 2544 §26.3 (tests: loss). */
  lossRate?: LossStep[];
  /** RFC 2544 §26.4 (tests: back2back). */
  back2back?: Back2Back;
}

/** The bursts the DUT's XDP sees from the paced generator (burst meter on da), per offered rate. */
export interface BurstSizes {
  offeredRate: number;
  achievedRate: number;
  /** Gap that ends a burst, ns (a quarter of the offered interval). */
  gapNs: number;
  frames: number;
  /** Bursts by log2 of their length: bucket i holds 2^i .. 2^(i+1) − 1 frames. */
  hist: number[];
}

/** The generator alone (the DUT drops every frame on arrival), per frame size. */
export interface GenOnly {
  rep: number;
  size: number;
  frameLen: number;
  fps: number;
  nsPerFrame: number;
}

export interface Rfc2544Result {
  startedAt: string;
  finishedAt: string;
  options: Omit<Rfc2544Options, 'signal' | 'log' | 'progress'>;
  seg6Mode: string;
  /** How the translator's rules forward: next-hop cache (rules cached, rules on the FIB by reason). */
  nexthops?: {
    mode: 'cache' | 'fib';
    cached: number;
    fib: Record<string, number>;
    /** Frames the translator forwarded by the cache (fwd_cached) and by the FIB lookup (fwd_redirect), whole run. */
    frames?: { cached: number; fib: number };
  };
  results: CaseResult[];
  genOnly: GenOnly[];
  interrupted: boolean;
  /** Pinned mode: which CPU runs what. */
  cpuPlan?: CpuPlan;
  /** Pinned mode: frames per kernel batch of the paced generator. */
  pacedBatch?: number;
  bursts?: BurstSizes[];
}

/** rx/tx dropped of the four veths, keyed `ns:if:rx_dropped`. */
async function vethDrops(lab: BenchLab): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const [ns, side] of [[lab.a, 'a'], [lab.dut, 'dut'], [lab.b, 'b']] as const) {
    const r = await execa('ip', ['-n', ns, '-s', '-j', 'link', 'show'], { timeout: 10_000 });
    const links = JSON.parse(r.stdout) as { ifname: string; stats64?: { rx?: { dropped?: number }; tx?: { dropped?: number } } }[];
    for (const l of links) {
      if (l.ifname === 'lo') continue;
      out[`${side}:${l.ifname}:rx_dropped`] = l.stats64?.rx?.dropped ?? 0;
      out[`${side}:${l.ifname}:tx_dropped`] = l.stats64?.tx?.dropped ?? 0;
    }
  }
  return out;
}

/** The translator's events except the forwarding ones (a frame it handled, not lost). */
function translatorEvents(dp: Dataplane): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(dp.counters().events)) {
    if (k === 'fwd_redirect' || k === 'fwd_tx' || k === 'fwd_cached') continue;
    out[`translator:${k}`] = Number(v.packets);
  }
  return out;
}

function delta(after: Record<string, number>, before: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(after)) {
    const d = v - (before[k] ?? 0);
    if (d !== 0) out[k] = d;
  }
  return out;
}

async function setThreaded(lab: BenchLab, on: boolean): Promise<void> {
  const v = on ? '1' : '0';
  for (const [ns, dev] of [[lab.dut, 'da'], [lab.dut, 'db'], [lab.a, 'ea'], [lab.b, 'eb']] as const) {
    await execa('ip', ['netns', 'exec', ns, 'sh', '-c', `echo ${v} > /sys/class/net/${dev}/threaded`], { timeout: 10_000 });
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Run the benchmark. Resolves with what was measured (partial when interrupted). */
export async function runRfc2544(opts: Rfc2544Options): Promise<Rfc2544Result> {
  const o = { ...DEFAULTS, ...opts };
  if (o.napi === 'pinned') return runPinned(o);
  const pinnedOnly = o.cases.filter((c) => c === 'uplink-10k' || c === 'pe-downlink' || c === 'slow-dut');
  if (pinnedOnly.length > 0) throw new Error(`cases ${pinnedOnly.join(', ')} need the paced generator: run them with --napi pinned (the default)`);
  const log = o.log ?? (() => {});
  const startedAt = new Date().toISOString();
  const results: CaseResult[] = [];
  const genOnly: GenOnly[] = [];
  let interrupted = false;
  await sweepStale();
  const lab = await BenchLab.create('', { seg6: o.cases.includes('kernel-seg6') });
  let sinks: Record<'a' | 'b', Sink> | undefined;
  let gens: Record<'a' | 'b', Generator> | undefined;
  let l3: L3fwd | undefined;
  let dp: Dataplane | undefined;
  let nh: NextHopWatcher | undefined;
  let nexthops: Rfc2544Result['nexthops'];
  try {
    // One sink object per side: ifindexes are per namespace, so ea and eb may share one.
    sinks = { a: new Sink(), b: new Sink() };
    gens = { a: new Generator(), b: new Generator() };
    l3 = new L3fwd();
    dp = openDataplane({ config: translatorConfig(), ...(o.object === undefined ? {} : { object: o.object }) });
    sinks.a.attach('ea', lab.a);
    sinks.b.attach('eb', lab.b);
    // The DUT's veths need an XDP program before a veth delivers XDP_TX'd frames to them.
    attachXdp(l3.passFd, 'da', lab.dut);
    attachXdp(l3.passFd, 'db', lab.dut);
    if ((o.nexthop ?? 'cache') === 'cache') {
      const translator = dp;
      // The lab's routes do not change: resolved between trials only (an
      // XDP attach is a link event, and `ip` children exiting during a
      // trial interrupt the generator's BPF_PROG_TEST_RUN).
      nh = new NextHopWatcher({
        dataplane: () => translator, config: () => translator.config, ingress: () => ['da', 'db'], netns: lab.dut,
        watch: false, leaseMs: 3_600_000,
      });
      nh.start();
      await nh.resolveNow();
      const s = nh.last!;
      nexthops = { mode: 'cache', cached: s.cached, fib: { ...s.fib } };
      log(`translator next hops: ${s.cached} rules cached${Object.keys(s.fib).length > 0 ? `, FIB lookup for ${JSON.stringify(s.fib)}` : ''}`);
    } else {
      nexthops = { mode: 'fib', cached: 0, fib: {} };
    }
    if (o.napi === 'threaded') await setThreaded(lab, true);
    const progFd: Record<CaseSetup['dut'], number> = { translator: dp.progFd, l3fwd: l3.fwdFd, pass: l3.passFd, slow: l3.passFd };
    for (let rep = 1; rep <= o.repeat; rep++) for (const size of o.sizes) {
      if (o.signal?.aborted) throw new AbortedError();
      if (o.repeat > 1) log(`--- repetition ${rep} of ${o.repeat}, ${size}B`);
      genOnly.push({ rep, ...(await measureGenOnly(lab, l3, gens.a, size, o, log)) });
      for (const name of o.cases) {
        if (o.signal?.aborted) throw new AbortedError();
        const setup = caseSetup(name, size, o.flows);
        attachXdp(progFd[setup.dut], 'da', lab.dut);
        attachXdp(progFd[setup.dut], 'db', lab.dut);
        const drops = async (): Promise<Record<string, number>> => ({
          ...(await vethDrops(lab)),
          ...(setup.dut === 'translator' ? translatorEvents(dp!) : {}),
        });
        // The warm-up's frames told the cache where the gNBs are (End.M.GTP4.E): resolve before measuring.
        const resolve = setup.dut === 'translator' && nh !== undefined ? async (): Promise<void> => {
          await nh!.resolveNow();
          const s = nh!.last!;
          nexthops = { mode: 'cache', cached: s.cached, fib: { ...s.fib } };
        } : undefined;
        const r: CaseResult = { ...(await measureCase(lab, sinks, gens, setup, size, o, log, drops, resolve)), rep };
        results.push(r);
        const skip = r.error ?? latencySkip(setup, r.fps, o);
        if (skip !== undefined) r.latencySkipped = skip;
        else {
          r.latency = await measureLatency({
            lab, setup, size, sink: sinks[other(setup.streams[0]!.from)], fps: r.fps, o, log,
            ...(setup.dut === 'translator' ? { dp } : {}),
            ...(o.progress === undefined ? {} : { progress: o.progress }),
          });
        }
      }
    }
  } catch (e) {
    if (e instanceof AbortedError) interrupted = true;
    else throw e;
  } finally {
    // Namespaces first: that detaches everything; then the objects.
    const errors: unknown[] = [];
    nh?.stop();
    if (nexthops !== undefined && dp !== undefined) {
      try {
        const ev = dp.counters().events;
        nexthops.frames = { cached: Number(ev['fwd_cached']?.packets ?? 0n), fib: Number(ev['fwd_redirect']?.packets ?? 0n) };
      } catch (e) {
        errors.push(e);
      }
    }
    await lab.destroy().catch((e: unknown) => errors.push(e));
    closeAll([dp, l3, sinks?.a, sinks?.b, gens?.a, gens?.b], errors, log);
  }
  const { signal: _s, log: _l, progress: _p, ...kept } = o;
  return {
    startedAt, finishedAt: new Date().toISOString(), options: kept, seg6Mode: lab.seg6Mode,
    ...(nexthops === undefined ? {} : { nexthops }), results, genOnly, interrupted,
  };
}

/** Close each (a failure does not stop the others), then log every cleanup error in one line. */
function closeAll(items: readonly ({ close(): void } | undefined)[], errors: unknown[], log: (line: string) => void): void {
  for (const c of items) {
    try {
      c?.close();
    } catch (e) {
      errors.push(e);
    }
  }
  if (errors.length > 0) log(`cleanup: ${errors.map((e) => (e as Error).message).join('; ')}`);
}

/** The side where a stream generated on `from` arrives. */
const other = (from: 'a' | 'b'): 'a' | 'b' => (from === 'a' ? 'b' : 'a');

function trialIo(
  sinks: Record<'a' | 'b', Sink>,
  gens: Record<'a' | 'b', Generator>,
  setup: CaseSetup,
): TrialIo & { bad(): number; nsPerFrame(): number } {
  const streams = setup.streams;
  let turn = 0;
  const read = (): { frames: number; bad: number } => {
    let frames = 0;
    let bad = 0;
    for (const s of streams) {
      const c = sinks[other(s.from)].read(0);
      frames += c.frames;
      bad += c.bad + c.unknown;
    }
    return { frames, bad };
  };
  return {
    begin: () => {
      sinks.a.reset();
      sinks.b.reset();
      gens.a.takeTiming();
      gens.b.takeTiming();
    },
    send: (n) => {
      if (streams.length === 1) return gens[streams[0]!.from].send(n);
      // Two streams from one thread: alternate which one goes first, split evenly.
      const first = Math.ceil(n / 2);
      const order = turn++ % 2 === 0 ? streams : [...streams].reverse();
      return gens[order[0]!.from].send(first) + gens[order[1]!.from].send(n - first);
    },
    settle: async () => void (await untilSteady(() => read().frames)),
    received: () => read().frames,
    bad: () => read().bad,
    nsPerFrame: () => {
      const a = gens.a.takeTiming();
      const b = gens.b.takeTiming();
      return a.frames + b.frames === 0 ? 0 : (a.ns + b.ns) / (a.frames + b.frames);
    },
  };
}

async function measureCase(
  lab: BenchLab,
  sinks: Record<'a' | 'b', Sink>,
  gens: Record<'a' | 'b', Generator>,
  setup: CaseSetup,
  size: number,
  o: Rfc2544Options,
  log: (line: string) => void,
  drops: () => Promise<Record<string, number>>,
  afterWarmup?: () => Promise<void>,
): Promise<CaseResult> {
  const what = `${setup.name} ${size}B`;
  const out: CaseResult = {
    case: setup.name,
    rep: 0,
    title: CASE_TITLES[setup.name],
    size,
    inner: innerLen(size),
    inLens: setup.inLens,
    fps: 0,
    gbps: 0,
    generatorLimited: false,
    nsPerFrame: 0,
    warmup: { sent: 0, received: 0, bad: 0 },
    trials: [],
  };
  for (const s of setup.streams) {
    gens[s.from].configure(s.gen, s.from === 'a' ? 'ea' : 'eb', s.from === 'a' ? lab.a : lab.b);
    const [rxIf, rxNs] = s.from === 'a' ? ['eb', lab.b] : ['ea', lab.a];
    // The latency probe's frames, where the case has them, go up to the probe's socket.
    const pass = 'outOff' in setup.probe ? { off: setup.probe.outOff, value: PROBE_MAGIC } : undefined;
    sinks[other(s.from)].expect(rxIf, rxNs, 0, s.checks, s.minLen, 0, pass);
  }
  const io = trialIo(sinks, gens, setup);
  // Check before measuring: a few frames at a low rate must all arrive, as expected.
  const w = await warmup(io, o.warmupFrames, o.signal);
  out.warmup = { sent: w.sent, received: w.received, bad: io.bad() };
  // Frames that fail the sink's checks are not counted as received, so a
  // wrong translation shows as loss here; `bad` also holds the lab's own
  // chatter (an IPv6 multicast report), which is not an error by itself.
  if (w.received === 0 || w.received !== w.sent) {
    out.error = `check failed: ${w.received} of ${w.sent} frames arrived as expected (${out.warmup.bad} other frames at the sink)`;
    log(`${what}: ${out.error}; skipped`);
    return out;
  }
  await afterWarmup?.();
  const meanLen = setup.inLens.reduce((a, b) => a + b, 0) / setup.inLens.length;
  log(`${what}: ${setup.streams.length} stream(s), DUT input ${setup.inLens.join('+')} B, check ${w.received}/${w.sent} ok`);
  let lastDrops: Record<string, number> = {};
  const search = await findThroughput({
    maxRate: Infinity,
    resolution: o.resolution,
    lossTolerance: o.lossTolerance,
    maxTrials: o.maxTrials,
    confirm: o.confirm,
    trial: async (rate) => {
      const before = await drops();
      const r = await runTrial(io, {
        rate,
        durationMs: o.trialMs,
        signal: o.signal,
        progress: (f) => o.progress?.(`${what} @ ${Number.isFinite(rate) ? (rate / 1e6).toFixed(3) + ' Mpps' : 'max'}`, f),
      });
      lastDrops = delta(await drops(), before);
      return r;
    },
    onTrial: (r, pass, lo, hi, phase) => {
      out.trials.push({ ...r, pass, bad: io.bad(), nsPerFrame: io.nsPerFrame(), drops: lastDrops, ...(phase === 'confirm' ? { confirm: true } : {}) });
      log(
        `${what}: ${phase === 'confirm' ? 'confirmation' : 'trial'} ${out.trials.length} offered ${Number.isFinite(r.offeredRate) ? (r.offeredRate / 1e6).toFixed(3) : 'max'} Mpps, ` +
          `sent ${(r.achievedRate / 1e6).toFixed(3)} Mpps, lost ${r.lost} (${(r.lossRatio * 100).toFixed(3)} %) ${pass ? 'pass' : 'FAIL'}` +
          ` [lo ${(lo / 1e6).toFixed(3)}, hi ${Number.isFinite(hi) ? (hi / 1e6).toFixed(3) : '-'}]` +
          (r.lost > 0 && Object.keys(lastDrops).length > 0 ? ` drops: ${Object.entries(lastDrops).map(([k, v]) => `${k} ${v}`).join(', ')}` : ''),
      );
    },
  });
  out.fps = search.throughput;
  out.nsPerFrame = out.trials.find((t) => t.sent === search.best?.sent && t.pass)?.nsPerFrame ?? 0;
  out.gbps = (search.throughput * meanLen * 8) / 1e9;
  out.generatorLimited = search.generatorLimited;
  out.confirmed = search.confirmed;
  if (search.offered !== undefined) out.fpsOffered = search.offered;
  log(`${what}: throughput ${(out.fps / 1e6).toFixed(3)} Mpps, ${out.gbps.toFixed(2)} Gbit/s${out.generatorLimited ? ' (no loss at full speed)' : search.confirmed ? '' : ' (no rate held in its confirmation trials)'}`);
  return out;
}

/**
 * The check before a search: `frames` frames in kernel-sized batches of 256
 * with a pause after each (a low rate, whatever the timers do), then count.
 */
async function warmup(io: TrialIo, frames: number, signal: AbortSignal | undefined): Promise<{ sent: number; received: number }> {
  await io.begin?.();
  let sent = 0;
  while (sent < frames) {
    if (signal?.aborted) throw new AbortedError();
    sent += await io.send(Math.min(256, frames - sent));
    await sleep(1);
  }
  await io.settle?.();
  return { sent, received: await io.received() };
}

/** The generator alone: one trial at full speed into a DUT that drops every frame (uplink frames). */
async function measureGenOnly(
  lab: BenchLab,
  l3: L3fwd,
  gen: Generator,
  size: number,
  o: Rfc2544Options,
  log: (line: string) => void,
): Promise<Omit<GenOnly, 'rep'>> {
  const g = caseSetup('uplink', size, o.flows).streams[0]!.gen;
  attachXdp(l3.dropFd, 'da', lab.dut);
  gen.configure(g, 'ea', lab.a);
  const r = await runTrial(
    { begin: () => void gen.takeTiming(), send: (n) => gen.send(n), received: () => 0 },
    { rate: Infinity, durationMs: Math.min(o.trialMs, 2000), signal: o.signal, progress: (f) => o.progress?.(`generator alone ${size}B`, f) },
  );
  const t = gen.takeTiming();
  const out = { size, frameLen: g.frame.length, fps: r.achievedRate, nsPerFrame: t.frames === 0 ? 0 : t.ns / t.frames };
  log(`generator alone ${size}B (${out.frameLen} B frames, DUT drops): ${(out.fps / 1e6).toFixed(3)} Mpps, ${out.nsPerFrame.toFixed(0)} ns/frame in the kernel`);
  return out;
}

// --- pinned mode: the DUT on its own CPU, the paced generator --------------------

/** The translator's tables a case needs: the small ones, or with the sessions cases' (10,000 policies, a PE session). */
const needsSessions = (c: CaseName): boolean => c === 'uplink-10k' || c === 'pe-downlink';

async function runPinned(o: Rfc2544Options): Promise<Rfc2544Result> {
  const log = o.log ?? (() => {});
  const startedAt = new Date().toISOString();
  const results: CaseResult[] = [];
  const genOnly: GenOnly[] = [];
  const bursts: BurstSizes[] = [];
  let interrupted = false;
  await sweepStale();
  const lab = await BenchLab.create('', { seg6: o.cases.includes('kernel-seg6') });
  const closers: { close(): void }[] = [];
  const make = <T extends { close(): void }>(x: T): T => (closers.push(x), x);
  let nh: NextHopWatcher | undefined;
  let nexthops: Rfc2544Result['nexthops'];
  let plan: CpuPlan | undefined;
  let restoreStats: (() => Promise<void>) | undefined;
  const big = o.cases.some(needsSessions);
  const affinity = saveAffinity();
  try {
    const sinks = { a: make(new Sink()), b: make(new Sink()) };
    const gens = { a: make(new PacedGenerator()), b: make(new PacedGenerator()) };
    const l3 = make(new L3fwd());
    const aux = make(new DutAux());
    aux.setSpin(o.slowSpinNs);
    // Table sizes are fixed at load: big enough for the sessions cases from the start.
    const small = big ? { ...translatorConfig(), settings: sessionsConfig().settings } : translatorConfig();
    const dp = make(openDataplane({
      config: small,
      ...(o.object === undefined ? {} : { object: o.object }),
    }));
    let tables: 'small' | 'sessions' = 'small';
    sinks.a.attach('ea', lab.a);
    sinks.b.attach('eb', lab.b);
    attachXdp(l3.passFd, 'da', lab.dut);
    attachXdp(l3.passFd, 'db', lab.dut);
    const translator = dp;
    nh = new NextHopWatcher({
      dataplane: () => translator, config: () => translator.config, ingress: () => ['da', 'db'], netns: lab.dut,
      watch: false, leaseMs: 3_600_000,
    });
    nh.start();
    const resolve = async (): Promise<void> => {
      await nh!.resolveNow();
      const st = nh!.last!;
      nexthops = { mode: 'cache', cached: st.cached, fib: { ...st.fib } };
    };
    await resolve();
    plan = await pinLab(lab);
    log(`CPUs: generator and sinks on CPU ${plan.gen}, the DUT's NAPI threads (${plan.threads.filter((t) => t.role === 'dut').map((t) => `napi/${t.dev} ${t.tid}`).join(', ')}) on CPU ${plan.dut}, SCHED_FIFO 50`);
    restoreStats = await enableBpfStats();
    const progFd: Record<CaseSetup['dut'], number> = { translator: dp.progFd, l3fwd: l3.fwdFd, pass: l3.passFd, slow: aux.slowFd };
    const progId = (d: CaseSetup['dut']): number | undefined => (d === 'pass' ? undefined : progInfo(progFd[d]).id);
    for (let rep = 1; rep <= o.repeat; rep++) for (const size of o.sizes) {
      if (o.signal?.aborted) throw new AbortedError();
      const g = await pinnedGenOnly(lab, l3, aux, gens.a, size, o, log, plan, rep === 1 && size === o.sizes[0] ? bursts : undefined);
      genOnly.push({ rep, ...g });
      for (const name of o.cases) {
        if (o.signal?.aborted) throw new AbortedError();
        const want = needsSessions(name) ? 'sessions' : 'small';
        if (want !== tables) {
          dp.sync(want === 'sessions' ? sessionsConfig() : small);
          tables = want;
          await resolve();
        }
        const setup = caseSetup(name, size, o.flows);
        attachXdp(progFd[setup.dut], 'da', lab.dut);
        attachXdp(progFd[setup.dut], 'db', lab.dut);
        const drops = async (): Promise<Record<string, number>> => ({
          ...(await vethDrops(lab)),
          ...(setup.dut === 'translator' ? translatorEvents(dp) : {}),
        });
        const r = await measurePinned(lab, sinks, gens, setup, size, o, log, drops, plan, progId(setup.dut), setup.dut === 'translator' ? resolve : undefined);
        results.push({ ...r, rep, latencySkipped: 'not measured in pinned mode (see docs/bench.md)' });
      }
    }
  } catch (e) {
    if (e instanceof AbortedError) interrupted = true;
    else throw e;
  } finally {
    const errors: unknown[] = [];
    nh?.stop();
    await restoreStats?.().catch((e: unknown) => errors.push(e));
    await affinity.restore().catch((e: unknown) => errors.push(e));
    await lab.destroy().catch((e: unknown) => errors.push(e));
    closeAll(closers, errors, log);
  }
  const { signal: _s, log: _l, progress: _p, ...kept } = o;
  return {
    startedAt, finishedAt: new Date().toISOString(), options: kept, seg6Mode: lab.seg6Mode,
    ...(nexthops === undefined ? {} : { nexthops }), results, genOnly, interrupted,
    ...(plan === undefined ? {} : { cpuPlan: plan }), pacedBatch: PACED_BATCH, bursts,
  };
}

/** The paced generator reached less than 95 % of the rate asked for (it shares its CPU with other work). */
export const generatorShort = (t: Pick<TrialResult, 'offeredRate' | 'achievedRate'>): boolean => Number.isFinite(t.offeredRate) && t.achievedRate < 0.95 * t.offeredRate;

function pacedIo(sinks: Record<'a' | 'b', Sink>, gens: Record<'a' | 'b', PacedGenerator>, setup: CaseSetup): PacedIo & { bad(): number } {
  const read = (): { frames: number; bad: number } => {
    let frames = 0;
    let bad = 0;
    for (const s of setup.streams) {
      const c = sinks[other(s.from)].read(0);
      frames += c.frames;
      bad += c.bad + c.unknown;
    }
    return { frames, bad };
  };
  return {
    streams: setup.streams.map((s) => ({ gen: gens[s.from] })),
    begin: () => {
      sinks.a.reset();
      sinks.b.reset();
    },
    received: () => read().frames,
    bad: () => read().bad,
    settle: async () => void (await untilSteady(() => read().frames)),
  };
}

/** The generator alone at full speed into a DUT that drops (the burst meter), and the bursts it sees at paced rates. */
async function pinnedGenOnly(
  lab: BenchLab, l3: L3fwd, aux: DutAux, gen: PacedGenerator, size: number, o: Rfc2544Options, log: (l: string) => void,
  plan: CpuPlan, bursts: BurstSizes[] | undefined,
): Promise<Omit<GenOnly, 'rep'>> {
  const g = caseSetup('uplink', size, o.flows).streams[0]!.gen;
  attachXdp(aux.meterFd, 'da', lab.dut);
  gen.configure(g, 'ea', lab.a);
  const io: PacedIo = { streams: [{ gen }], begin: () => undefined, received: () => 0, settle: async () => undefined };
  const top = await pacedTrial(io, { rate: Infinity, durationMs: Math.min(o.trialMs, 2000), watch: new DutWatch(plan), ...(o.signal ? { signal: o.signal } : {}) });
  log(`generator alone ${size}B (${g.frame.length} B frames, DUT drops): ${(top.achievedRate / 1e6).toFixed(3)} Mpps flat out`);
  if (bursts !== undefined) {
    // The bursts the DUT sees from the paced generator, at fractions of its top rate.
    for (const f of [0.1, 0.5, 0.9]) {
      const rate = top.achievedRate * f;
      const gapNs = 1e9 / rate / 4;
      aux.resetMeter(gapNs);
      const r = await pacedTrial(io, { rate, durationMs: Math.min(1000, o.trialMs), ...(o.signal ? { signal: o.signal } : {}) });
      const b = aux.bursts();
      bursts.push({ offeredRate: rate, achievedRate: r.achievedRate, gapNs, frames: b.frames, hist: b.hist });
      log(`bursts at ${(rate / 1e6).toFixed(3)} Mpps offered (${(r.achievedRate / 1e6).toFixed(3)} sent): ${b.hist.map((n, i) => (n > 0 ? `${2 ** i}-${2 ** (i + 1) - 1}: ${n}` : '')).filter((x) => x).join(', ')}`);
    }
  }
  attachXdp(l3.dropFd, 'da', lab.dut);
  return { size, frameLen: g.frame.length, fps: top.achievedRate, nsPerFrame: 0 };
}

async function measurePinned(
  lab: BenchLab,
  sinks: Record<'a' | 'b', Sink>,
  gens: Record<'a' | 'b', PacedGenerator>,
  setup: CaseSetup,
  size: number,
  o: Rfc2544Options,
  log: (line: string) => void,
  drops: () => Promise<Record<string, number>>,
  plan: CpuPlan,
  progId: number | undefined,
  afterWarmup?: () => Promise<void>,
): Promise<Omit<CaseResult, 'rep'>> {
  const what = `${setup.name} ${size}B`;
  const out: Omit<CaseResult, 'rep'> = {
    case: setup.name, title: CASE_TITLES[setup.name], size, inner: innerLen(size), inLens: setup.inLens,
    fps: 0, gbps: 0, generatorLimited: false, nsPerFrame: 0, warmup: { sent: 0, received: 0, bad: 0 }, trials: [],
  };
  for (const s of setup.streams) {
    gens[s.from].configure(s.gen, s.from === 'a' ? 'ea' : 'eb', s.from === 'a' ? lab.a : lab.b);
    const [rxIf, rxNs] = s.from === 'a' ? ['eb', lab.b] : ['ea', lab.a];
    sinks[other(s.from)].expect(rxIf, rxNs, 0, s.checks, s.minLen, 0);
  }
  const io = pacedIo(sinks, gens, setup);
  const sig = o.signal ? { signal: o.signal } : {};
  // The check: a few frames at a low rate must all arrive, as expected.
  const w = await pacedTrial(io, { rate: 50_000, durationMs: Math.max(20, (o.warmupFrames / 50_000) * 1000), ...sig });
  out.warmup = { sent: w.sent, received: w.received, bad: io.bad() };
  if (w.received === 0 || w.received !== w.sent) {
    out.error = `check failed: ${w.received} of ${w.sent} frames arrived as expected (${out.warmup.bad} other frames at the sink)`;
    log(`${what}: ${out.error}; skipped`);
    return out;
  }
  await afterWarmup?.();
  const meanLen = setup.inLens.reduce((a, b) => a + b, 0) / setup.inLens.length;
  log(`${what}: DUT input ${setup.inLens.join('+')} B, check ${w.received}/${w.sent} ok`);
  const stats = async (): Promise<{ ns: number; cnt: number } | undefined> => (progId === undefined ? undefined : progStats(progId));
  /** One trial with everything around it: drops, program stats, the DUT's CPU. */
  const trial = async (rate: number, label: string): Promise<TrialRecord> => {
    const before = await drops();
    const s0 = await stats();
    const r = await pacedTrial(io, {
      rate, durationMs: o.trialMs, watch: new DutWatch(plan), ...sig,
      progress: (f) => o.progress?.(`${what} ${label} @ ${Number.isFinite(rate) ? (rate / 1e6).toFixed(3) + ' Mpps' : 'max'}`, f),
    });
    const s1 = await stats();
    const d = delta(await drops(), before);
    const runs = s0 && s1 ? s1.cnt - s0.cnt : 0;
    return {
      ...r, pass: r.sent > 0 && r.lossRatio <= o.lossTolerance, bad: io.bad(), nsPerFrame: 0, drops: d,
      ...(runs > 0 ? { progNs: (s1!.ns - s0!.ns) / runs } : {}),
    };
  };
  const line = (t: TrialRecord, extra = ''): string =>
    `offered ${Number.isFinite(t.offeredRate) ? (t.offeredRate / 1e6).toFixed(3) : 'max'} Mpps, sent ${(t.achievedRate / 1e6).toFixed(3)} Mpps${generatorShort(t) ? ' (generator short)' : ''}, ` +
    `lost ${t.lost} (${(t.lossRatio * 100).toFixed(3)} %)${extra}` +
    (t.dut ? ` DUT CPU ${t.dut.cpus.join(',') || '-'} busy ${(t.dut.busy * 100).toFixed(0)} %` : '') +
    (t.progNs !== undefined ? `, program ${t.progNs.toFixed(1)} ns/frame` : '') +
    (t.lost > 0 && Object.keys(t.drops).length > 0 ? ` drops: ${Object.entries(t.drops).map(([k, v]) => `${k} ${v}`).join(', ')}` : '');
  if (o.tests.includes('throughput')) {
    let last: TrialRecord | undefined;
    const search = await findThroughput({
      maxRate: Infinity, resolution: o.resolution, lossTolerance: o.lossTolerance, maxTrials: o.maxTrials, confirm: o.confirm, onOffered: true,
      trial: async (rate) => (last = await trial(rate, 'throughput')),
      onTrial: (r, pass, lo, hi, phase) => {
        out.trials.push({ ...last!, pass, ...(phase === 'confirm' ? { confirm: true } : {}) });
        log(`${what}: ${phase === 'confirm' ? 'confirmation' : 'trial'} ${out.trials.length} ${line(last!, pass ? ' pass' : ' FAIL')} [lo ${(lo / 1e6).toFixed(3)}, hi ${Number.isFinite(hi) ? (hi / 1e6).toFixed(3) : '-'}]`);
      },
    });
    out.topRate = out.trials[0]?.achievedRate ?? 0;
    out.generatorLimited = search.generatorLimited;
    out.fps = search.generatorLimited ? 0 : search.throughput;
    out.gbps = (out.fps * meanLen * 8) / 1e9;
    out.confirmed = search.confirmed;
    if (search.offered !== undefined) out.fpsOffered = search.offered;
    const best = out.trials.find((t) => t.sent === search.best?.sent && t.pass);
    if (best?.progNs !== undefined) out.progNs = best.progNs;
    log(search.generatorLimited
      ? `${what}: generator-bound at ${(out.topRate / 1e6).toFixed(3)} Mpps: no trial lost a frame, so no throughput is reported`
      : search.confirmed
        ? `${what}: throughput ${(out.fps / 1e6).toFixed(3)} Mpps, ${out.gbps.toFixed(2)} Gbit/s (held in ${o.confirm} confirmation trial(s))`
        : `${what}: no rate held in its confirmation trials: no throughput reported`);
  }
  const maxRate = out.topRate ?? 0;
  if (o.tests.includes('loss')) {
    const top = maxRate > 0 ? maxRate : (await trial(Infinity, 'loss')).achievedRate;
    out.topRate = top;
    out.lossRate = await frameLossRate(top, async (rate) => {
      const t = await trial(rate, 'loss rate');
      log(`${what}: loss rate ${line(t)}`);
      return t;
    });
  }
  if (o.tests.includes('back2back')) {
    // Bursts flat out; the longest tried is 2 s of the generator's top rate (enough to overflow any ring here).
    const maxBurst = Math.max(1024, Math.round((out.topRate ?? 1e6) * 2));
    for (const s of io.streams) s.gen.setRate(Infinity);
    out.back2back = await backToBack(async (frames) => {
      io.begin();
      const t0 = process.hrtime.bigint();
      let sent = 0;
      for (const s of io.streams) sent += s.gen.send(Math.ceil(frames / io.streams.length));
      const elapsedMs = Number(process.hrtime.bigint() - t0) / 1e6;
      await io.settle();
      return { sent, received: io.received(), elapsedMs };
    }, { trials: o.b2bTrials, maxBurst, ...sig });
    log(`${what}: back-to-back ${out.back2back.bursts.join(', ')} frames (mean ${out.back2back.mean.toFixed(0)}) at ${(out.back2back.rate / 1e6).toFixed(3)} Mpps`);
  }
  return out;
}
