/**
 * `mup bench rfc2544`: RFC 2544 zero-loss throughput of the translator
 * against kernel and XDP baselines, in namespaces it creates and removes.
 */
import { Command, Option } from 'commander';
import { DEFAULT_OBJECT } from '../host/paths.js';
import { CASES, DEFAULT_CASES, DEFAULT_SIZES, DEFAULTS, RFC2544_SIZES, RFC_TRIAL_MS, TESTS, type CaseName, type TestName } from '../bench/rfc2544/defaults.js';

interface Io {
  out(s: string): void;
  err(s: string): void;
}

interface Opts {
  sizes?: string;
  cases?: string;
  trial?: string;
  quick?: boolean;
  full?: boolean;
  tests: string;
  b2bTrials: string;
  slowSpin: string;
  lossTolerance: string;
  resolution: string;
  maxTrials: string;
  confirm: string;
  flows: string;
  repeat: string;
  napi: 'pinned' | 'softirq' | 'threaded';
  out: string;
  object?: string;
  latency: boolean;
  latencyLoads: string;
  probeRate: string;
  probeSeconds?: string;
}

function list(s: string | undefined, all: readonly string[], what: string, dflt: readonly string[] = all): string[] {
  if (s === undefined) return [...dflt];
  if (s === 'all') return [...all];
  const v = s.split(',').map((x) => x.trim()).filter((x) => x !== '');
  for (const x of v) if (!all.includes(x)) throw new Error(`--${what}: "${x}" is not one of ${all.join(', ')}`);
  return v;
}

function num(s: string, what: string, min: number, max: number): number {
  const n = Number(s);
  if (!Number.isFinite(n) || n < min || n > max) throw new Error(`--${what} ${s}: a number from ${min} to ${max}`);
  return n;
}

export function registerBench(program: Command, io: Io): void {
  const bench = program.command('bench').summary('benchmarks').description('benchmarks (as root; they create and remove their own namespaces)');
  bench
    .command('rfc2544')
    .summary('zero-loss throughput per frame size and latency at load: translator vs kernel and XDP L3 forwarding')
    .description(
      'RFC 2544 throughput: for each frame size and case (translator uplink, downlink, both; kernel IPv4 forwarding; ' +
        'kernel seg6 encap; XDP L3FWD), a binary search for the highest rate with loss within the tolerance, ' +
        'then latency at --latency-loads of that rate (background load from the generator, `mup probe` frames through it). ' +
        'Traffic is generated with BPF_PROG_TEST_RUN live frames and counted by an XDP sink, all inside namespaces ' +
        'created for the run and deleted at the end (also on Ctrl-C). Writes report.json, report.md and SVG plots.',
    )
    .option('--sizes <list>', `RFC 2544 frame sizes out of ${RFC2544_SIZES.join(',')}, or all (default ${DEFAULT_SIZES.join(',')})`)
    .option('--cases <list>', `cases out of ${CASES.join(',')}, or all (default ${DEFAULT_CASES.join(',')})`)
    .option('--tests <list>', `RFC 2544 tests (--napi pinned): ${TESTS.join(',')} (throughput §26.1, frame loss rate §26.3, back-to-back §26.4)`, TESTS.join(','))
    .option('--trial <seconds>', `trial length (default ${DEFAULTS.trialMs / 1000}, shorter than RFC 2544 §26.1's ${RFC_TRIAL_MS / 1000} s: the report says so)`)
    .option('--quick', 'trials of 1 s (2 s with --napi softirq/threaded), 1 back-to-back trial')
    .option('--full', `RFC 2544 §26.1 trials of ${RFC_TRIAL_MS / 1000} s (a case takes about 15 minutes)`)
    .option('--b2b-trials <n>', 'back-to-back trials per case (RFC 2544 asks for 50)', String(DEFAULTS.b2bTrials))
    .option('--slow-spin <ns>', 'slow-dut case: ns its forwarder spins per frame', String(DEFAULTS.slowSpinNs))
    .option('--loss-tolerance <ratio>', 'loss ratio that still passes, for noisy machines', String(DEFAULTS.lossTolerance))
    .option('--resolution <ratio>', 'stop the search when (hi - lo) / hi is at most this', String(DEFAULTS.resolution))
    .option('--max-trials <n>', 'at most this many trials per search', String(DEFAULTS.maxTrials))
    .option('--confirm <n>', 'trials that repeat the rate found; it is reported only if they all pass (a loss steps down)', String(DEFAULTS.confirm))
    .option('--flows <n>', 'inner flows (UDP source ports) per stream', String(DEFAULTS.flows))
    .option('--repeat <n>', 'run the whole set n times, interleaved; the report takes medians', String(DEFAULTS.repeat))
    .addOption(new Option('--napi <mode>', 'pinned: the DUT\'s veths in threaded NAPI pinned to their own CPU, the paced generator on another (default); softirq: the earlier live-frame generator, the DUT in the softirq after each of its batches on the same core (cannot lose); threaded: the same generator, NAPI threads not pinned').choices(['pinned', 'softirq', 'threaded']).default(DEFAULTS.napi))
    .option('--out <dir>', 'output directory', `build/bench/rfc2544-${new Date().toISOString().replace(/[:.]/g, '-')}`)
    .option('--object <path>', 'translator BPF object', DEFAULT_OBJECT)
    .option('--no-latency', 'throughput only: no latency at load after each search')
    .option('--latency-loads <list>', 'latency at these percentages of each zero-loss rate found (background load from the generator, probes through it)', DEFAULTS.latencyLoads.join(','))
    .option('--probe-rate <pps>', 'latency probes per second during a load step', String(DEFAULTS.probeRate))
    .option('--probe-seconds <s>', `seconds of probing per load step (default ${DEFAULTS.probeSeconds}; --quick 1)`)
    .addHelpText('after', '\nExamples:\n  mup bench rfc2544 --quick\n  mup bench rfc2544 --full --sizes all\n  mup bench rfc2544 --sizes 64,1518 --cases uplink,xdp-l3fwd --trial 5\n  mup bench rfc2544 --quick --sizes 64 --cases uplink,downlink --latency-loads 10,50,90 --probe-rate 5000\n')
    .action(async (opts: Opts) => {
      const latencyLoads = opts.latency ? opts.latencyLoads.split(',').map((x) => num(x.trim(), 'latency-loads', 0, 100)) : [];
      const probeSeconds = opts.probeSeconds !== undefined ? num(opts.probeSeconds, 'probe-seconds', 0.1, 600) : opts.quick === true ? 1 : DEFAULTS.probeSeconds;
      const trialMs = opts.trial !== undefined ? num(opts.trial, 'trial', 0.05, 600) * 1000
        : opts.full === true ? RFC_TRIAL_MS : opts.quick === true ? (opts.napi === 'pinned' ? 1000 : 2000) : DEFAULTS.trialMs;
      const ac = new AbortController();
      let interrupts = 0;
      const onSignal = (): void => {
        interrupts++;
        if (interrupts === 1) {
          io.err('\nmup: interrupted; stopping after this batch and removing the namespaces (Ctrl-C again to quit at once)\n');
          ac.abort();
        } else {
          process.exit(130);
        }
      };
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      const tty = process.stderr.isTTY === true;
      let bar = false;
      const clearBar = (): void => {
        if (bar) io.err('\r\x1b[K');
        bar = false;
      };
      try {
        const { benchRfc2544 } = await import('../bench/rfc2544/index.js');
        const r = await benchRfc2544({
          outDir: opts.out,
          sizes: list(opts.sizes, RFC2544_SIZES.map(String), 'sizes', DEFAULT_SIZES.map(String)).map(Number),
          cases: list(opts.cases, CASES, 'cases', DEFAULT_CASES) as CaseName[],
          tests: list(opts.tests, TESTS, 'tests') as TestName[],
          b2bTrials: opts.quick === true ? 1 : num(opts.b2bTrials, 'b2b-trials', 1, 1000),
          slowSpinNs: num(opts.slowSpin, 'slow-spin', 0, 1_000_000),
          trialMs,
          lossTolerance: num(opts.lossTolerance, 'loss-tolerance', 0, 1),
          resolution: num(opts.resolution, 'resolution', 0.001, 0.5),
          maxTrials: num(opts.maxTrials, 'max-trials', 1, 100),
          confirm: num(opts.confirm, 'confirm', 0, 20),
          flows: num(opts.flows, 'flows', 1, 65535),
          repeat: num(opts.repeat, 'repeat', 1, 100),
          napi: opts.napi,
          latencyLoads,
          probeRate: num(opts.probeRate, 'probe-rate', 1, 1_000_000),
          probeSeconds,
          // The background load's child: this same mup (bin/mup.js, or the .ts entry under tsx) with `probe-loadgen`.
          loadCommand: [process.execPath, ...process.execArgv, process.argv[1]!],
          signal: ac.signal,
          ...(opts.object === undefined ? {} : { object: opts.object }),
          log: (l) => {
            clearBar();
            io.err(`${l}\n`);
          },
          progress: (what, f) => {
            if (!tty) return;
            const n = Math.round(Math.min(1, f) * 20);
            io.err(`\r\x1b[K[${'#'.repeat(n)}${'-'.repeat(20 - n)}] ${what}`);
            bar = true;
          },
        });
        clearBar();
        io.out(r.table);
        io.out(`\n${r.files.join('\n')}\n`);
        if (r.report.result.interrupted) throw new Error(`interrupted: partial results in ${opts.out}; namespaces removed`);
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
    });
}
