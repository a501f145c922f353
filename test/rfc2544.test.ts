/**
 * The RFC 2544 benchmark end to end, tiny: its namespaces, the live-frame
 * generator, the translator (and the XDP L3FWD baseline) on the device
 * under test and the counting sink. At a low rate every frame sent must be
 * counted at the sink, translated as expected (the sink checks every frame).
 * No timed assertions. Everything is removed in afterAll, also on failure;
 * and a benchmark interrupted with SIGINT removes its namespaces. A short
 * real run measures latency at one load step of the uplink: the probes get
 * through the DUT beside the background load, past the sink, with the
 * translator's residence stamps.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_OBJECT } from '../src/dataplane/index.js';
import type { CaseName } from '../src/bench/rfc2544/cases.js';
import { attachXdp, L3FWD_OBJECT, SINK_OBJECT, TRAFFICGEN_OBJECT } from '../src/packet/generator.js';
import { BENCH_NETNS_PREFIX } from '../src/bench/rfc2544/lab.js';
import { runTrial } from '../src/bench/rfc2544/search.js';
import { benchRfc2544 } from '../src/bench/rfc2544/index.js';
import { DUTAUX_OBJECT, PACEDGEN_OBJECT } from '../src/bench/rfc2544/pacedgen.js';
import { closeBenchRig, openBenchRig, streamIo, type BenchRig } from './helpers/bench-rig.js';
import { needsLiveFrames, noLiveFrames } from './helpers/live-frames.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const objects = [DEFAULT_OBJECT, TRAFFICGEN_OBJECT, SINK_OBJECT, L3FWD_OBJECT, PACEDGEN_OBJECT, DUTAUX_OBJECT];
const ready = process.getuid?.() === 0 && objects.every((o) => existsSync(o));
if (!ready) console.warn(`*** SKIPPING test/rfc2544.test.ts: needs root and ${objects.join(', ')} (make bpf)`);

/** Whether `pid`'s chain of parents (/proc/PID/stat) reaches `ancestor`. */
function descends(pid: number, ancestor: number): boolean {
  for (let p = pid, hops = 0; p > 1 && hops < 32; hops++) {
    if (p === ancestor) return true;
    try {
      // "PID (comm) STATE PPID ...": comm may hold spaces, so read after the last ')'.
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      p = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    } catch {
      return false;
    }
  }
  return false;
}

async function benchNamespaces(pid: number): Promise<string[]> {
  const r = await execa('ip', ['netns', 'list']);
  return r.stdout.split('\n').map((l) => l.split(' ')[0] ?? '').filter((n) => n.startsWith(`${BENCH_NETNS_PREFIX}${pid}-`));
}

describe.skipIf(!ready || noLiveFrames !== undefined)(needsLiveFrames('RFC 2544 benchmark in namespaces'), () => {
  let rig: BenchRig | undefined;

  beforeAll(async () => {
    rig = await openBenchRig('t', { withL3fwd: true });
  });

  afterAll(async () => {
    try {
      await closeBenchRig(rig);
    } finally {
      expect(await benchNamespaces(process.pid)).toEqual([]);
    }
  });

  it.each<[CaseName, 'translator' | 'l3fwd']>([
    ['uplink', 'translator'],
    ['downlink', 'translator'],
    ['xdp-l3fwd', 'l3fwd'],
  ])('%s: every frame sent at a low rate is counted at the sink, as expected', async (name, prog) => {
    const R = rig!;
    const fd = prog === 'translator' ? R.dp.progFd : R.l3!.fwdFd;
    attachXdp(fd, 'da', R.lab.dut);
    attachXdp(fd, 'db', R.lab.dut);
    const io = streamIo(R, name);
    io.sink.reset();
    const r = await runTrial(io, { rate: 20_000, durationMs: 300, batch: 256 });
    expect(r.sent).toBeGreaterThan(0);
    expect(r.received).toBe(r.sent);
    expect(r.lost).toBe(0);
    expect(io.gen.programCount()).toBeGreaterThanOrEqual(r.sent);
  });

  it('a short run measures latency at a load step of the uplink: probes received, residence stamped, background counted', async () => {
    const out = mkdtempSync(join(tmpdir(), 'mup-rfc2544-lat-'));
    try {
      const r = await benchRfc2544({
        outDir: out, sizes: [64], cases: ['uplink'], trialMs: 300, maxTrials: 2, warmupFrames: 500, napi: 'softirq',
        latencyLoads: [50], probeRate: 1000, probeSeconds: 0.5,
        // The background load's child runs from the sources, as `npm run bench` does.
        loadCommand: [join(ROOT, 'node_modules/.bin/tsx'), join(ROOT, 'src/cli/main.ts')],
      });
      const up = r.report.result.results[0]!;
      expect(up.error).toBeUndefined();
      expect(up.latencySkipped).toBeUndefined();
      const steps = up.latency?.steps ?? [];
      expect(steps.map((s) => [s.percent, s.offeredPps])).toEqual([[50, Math.round(up.fps / 2)]]);
      const s = steps[0]!;
      // 1000/s for 0.5 s: the sender paces by the clock and stops at the end,
      // so a busy machine sends fewer (the report shows how many).
      expect(s.probes.sent).toBeGreaterThan(0);
      expect(s.probes.sent).toBeLessThanOrEqual(500);
      expect(s.probes.received).toBeGreaterThan(0);
      expect(s.probes.received).toBeLessThanOrEqual(s.probes.sent);
      // Every probe that reached the socket went past the sink as a probe, not counted as background.
      expect(s.probes.passedAtSink).toBeGreaterThanOrEqual(s.probes.received);
      expect(s.wire?.percentiles.p50).toBeGreaterThan(0);
      expect(s.residence?.count).toBeGreaterThan(0);
      expect(s.residence!.min).toBeGreaterThan(0);
      expect(s.background.sent).toBeGreaterThan(0);
      expect(s.background.received).toBeGreaterThan(0);
      expect(r.table).toMatch(/uplink\s+64\s+50 %/);
      expect(existsSync(join(out, 'latency-wire-64.svg'))).toBe(true);
      // The step keeps its histograms: the same distribution figures as `mup probe` (src/probe/plots.ts).
      expect(s.histograms?.wire?.reduce((a, b) => a + b.count, 0)).toBe(s.wire?.count);
      expect(s.histograms?.residence?.reduce((a, b) => a + b.count, 0)).toBe(s.residence?.count);
      for (const f of ['latency-cdf-wire-64.svg', 'latency-ccdf-wire-64.svg', 'latency-percentiles-wire-64.svg', 'latency-cdf-residence-64.svg', 'latency-64.hlog']) {
        expect(existsSync(join(out, f)), f).toBe(true);
      }
      expect(readFileSync(join(out, 'report.md'), 'utf8')).toContain('## Latency at load');
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }, 180_000); // 6-10 s on a quiet host, 25 s in a loaded fresh-clone run: the 60 s default was too near

  it('the bench can lose: a deliberately slow DUT on its own CPU loses frames at the top rate, at its veth ring, and the search converges below it', async () => {
    const out = mkdtempSync(join(tmpdir(), 'mup-rfc2544-slow-'));
    const statsBefore = readFileSync('/proc/sys/kernel/bpf_stats_enabled', 'utf8');
    const cpusBefore = /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
    try {
      // slow_l3fwd spins 20 µs a frame: at most 50,000 frames/s, far below any generator here.
      // The tolerance (1 %) keeps a busy machine's stray losses at low rates from failing the search.
      const spin = 20_000;
      const r = await benchRfc2544({
        outDir: out, sizes: [64], cases: ['slow-dut'], tests: ['throughput'], napi: 'pinned', slowSpinNs: spin,
        trialMs: 300, maxTrials: 12, resolution: 0.25, lossTolerance: 0.01, warmupFrames: 200, latencyLoads: [],
      });
      const res = r.report.result;
      const x = res.results[0]!;
      expect(x.error).toBeUndefined();
      // Where things ran: the DUT's NAPI threads pinned to their own CPU, and seen there only.
      const plan = res.cpuPlan!;
      expect(plan.dut).not.toBe(plan.gen);
      expect(plan.threads.filter((t) => t.role === 'dut').map((t) => t.dev).sort()).toEqual(['da', 'db']);
      const first = x.trials[0]!;
      expect(first.offeredRate).toBe(Infinity);
      expect(first.pass).toBe(false);
      expect(first.lost).toBeGreaterThan(0);
      // Lost where they should be: the DUT's receive ring overflowed.
      expect(first.drops['dut:da:rx_dropped'] ?? 0).toBeGreaterThan(0);
      expect(first.dut?.cpus).toEqual([plan.dut]);
      // The program's own cost, from bpf_stats: at least its spin.
      expect(first.progNs).toBeGreaterThanOrEqual(spin);
      expect(x.generatorLimited).toBe(false);
      expect(x.trials.some((t) => t.pass)).toBe(true);
      expect(x.fps).toBeGreaterThan(0);
      expect(x.fps).toBeLessThan(first.achievedRate);
      expect(x.confirmed).toBe(true);
      expect(r.table).toMatch(/PASS slow-dut 64 B: the rate found held/);
      expect(readFileSync(join(out, 'report.md'), 'utf8')).toContain('## Where things run (napi pinned)');
    } finally {
      rmSync(out, { recursive: true, force: true });
      // Put back what the bench changed for its run, and check that it did.
      expect(readFileSync('/proc/sys/kernel/bpf_stats_enabled', 'utf8')).toBe(statsBefore);
      expect(/Cpus_allowed_list:\s*(\S+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]).toBe(cpusBefore);
    }
  }, 180_000); // 6-10 s on a quiet host, 25 s in a loaded fresh-clone run: the 60 s default was too near

  it.each<[string, string[], RegExp, boolean]>([
    ['during a trial', ['--trial', '30'], /check \d+\/\d+ ok/, false],
    // The search over, the first latency step runs: its background child must go too.
    ['during a latency step', ['--napi', 'softirq', '--trial', '0.3', '--max-trials', '1', '--latency-loads', '50', '--probe-seconds', '30'], /uplink 64B: throughput/, true],
  ])('a benchmark interrupted with SIGINT %s removes its namespaces and processes, and says so', async (_when, args, started, child) => {
    const out = mkdtempSync(join(tmpdir(), 'mup-rfc2544-'));
    try {
      await interrupted(out, args, started, child);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }, 180_000);

  /** Processes whose command line names namespaces of the benchmark `owner` (its background load children). */
  function loadChildren(owner: string): string[] {
    return readdirSync('/proc').filter((p) => /^\d+$/.test(p)).filter((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(`${BENCH_NETNS_PREFIX}${owner}-`);
      } catch {
        return false;
      }
    });
  }

  async function interrupted(out: string, args: string[], started: RegExp, child: boolean): Promise<void> {
    const proc = execa(join(ROOT, 'node_modules/.bin/tsx'), ['src/cli/main.ts', 'bench', 'rfc2544', '--sizes', '64', '--cases', 'uplink', ...args, '--out', out], {
      cwd: ROOT,
      reject: false,
      timeout: 150_000, // 18-25 s in a loaded fresh-clone run, where 50 s was too near
    });
    let err = '';
    await new Promise<void>((resolve, reject) => {
      proc.stderr?.on('data', (c: Buffer) => {
        err += c.toString();
        if (started.test(err)) resolve();
      });
      proc.then(() => reject(new Error(`benchmark exited before it was to be interrupted: ${err}`)), reject);
    });
    // tsx -> node: signal the node process that runs the benchmark (the one that owns the namespaces).
    const names = (await execa('ip', ['netns', 'list'])).stdout.split('\n').map((l) => l.split(' ')[0] ?? '');
    // Only a descendant of the process this test started: other benchmarks may run on the machine.
    const owner = names
      .map((n) => new RegExp(`^${BENCH_NETNS_PREFIX}(\\d+)-`).exec(n)?.[1])
      .find((p) => p !== undefined && proc.pid !== undefined && descends(Number(p), proc.pid));
    expect(owner).toBeDefined();
    if (child) {
      // Up to 60 s (a tsx child starts in seconds on a loaded host), not 200 polls of 50 ms.
      const deadline = Date.now() + 60_000;
      while (loadChildren(owner!).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      // On failure, what the benchmark printed: a clean-clone run in session 31 saw no child within 60 s, on a
      // loaded host, and told nothing more (the cause was not found: the same run alone passed in 4 s).
      expect(loadChildren(owner!), `no load child within 60 s; the benchmark's stderr so far:\n${err}`).not.toEqual([]);
    }
    process.kill(Number(owner), 'SIGINT');
    const r = await proc;
    expect(r.exitCode).toBe(2);
    expect(String(r.stderr)).toMatch(/interrupted/);
    expect(await benchNamespaces(Number(owner))).toEqual([]);
    // No background load child (`probe-loadgen` with this run's namespace in its spec) outlives it.
    const children = loadChildren(owner!);
    expect(children).toEqual([]);
  }
});
