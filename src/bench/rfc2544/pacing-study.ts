/**
 * What limits the paced generator (issue 20, item 2): the generator of
 * pacedgen.ts in the benchmark's own topology and CPU plan, at a set of
 * offered rates and batch sizes, into a DUT that drops every frame (the
 * burst meter on da: no sink work on the generator's CPU) and into XDP
 * L3FWD forwarding to the sink on eb (the sink's NAPI thread shares the
 * generator's CPU, as in every real trial). Per point: the rate achieved,
 * frames that found the pace behind (`late`), the share of the time the
 * program spent waiting for its pace, the share spent outside the
 * BPF_PROG_TEST_RUN calls, the context switches of the generator's thread
 * and of the sink's, and the bursts the DUT saw (drop mode).
 *
 *   tsx src/bench/rfc2544/pacing-study.ts [--ms 1000] [--rates 0.25,0.5,1,2] [--batches 16,64] [--pace-at batch,frame] [--fifo 40,0] [--modes drop,fwd]
 *
 * Prints one line per point; a study, not a test (its figures depend on
 * the host's load, printed with them).
 */
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { attachXdp, L3fwd, Sink } from '../../packet/generator.js';
import { BenchLab, sweepStale } from './lab.js';
import { caseSetup } from './cases.js';
import { pinLab, saveAffinity } from './cpus.js';
import { DutAux, PacedGenerator, type PaceAt } from './pacedgen.js';
import { sliceFor } from './paced.js';

function ctxSwitches(path: string): number {
  try {
    const s = readFileSync(path, 'utf8');
    const v = Number(/voluntary_ctxt_switches:\s*(\d+)/.exec(s)?.[1] ?? 0);
    const n = Number(/nonvoluntary_ctxt_switches:\s*(\d+)/.exec(s)?.[1] ?? 0);
    return v + n;
  } catch {
    return 0;
  }
}

export interface PacingPoint {
  mode: 'drop' | 'fwd';
  paceAt: PaceAt;
  fifo: number;
  batch: number;
  offered: number;
  achieved: number;
  late: number;
  spunShare: number;
  outsideShare: number;
  genSwitches: number;
  sinkSwitches: number;
  received: number;
  hist?: number[];
}

export interface StudyOptions {
  ms: number;
  rates: number[];
  batches: number[];
  paceAt: PaceAt[];
  fifo: number[];
  modes: Array<'drop' | 'fwd'>;
}

export async function pacingStudy(o: StudyOptions, log: (s: string) => void): Promise<PacingPoint[]> {
  await sweepStale();
  const aff = saveAffinity();
  const lab = await BenchLab.create('ps');
  const closers: Array<{ close(): void }> = [];
  const out: PacingPoint[] = [];
  try {
    const l3 = new L3fwd();
    closers.push(l3);
    const aux = new DutAux();
    closers.push(aux);
    const sink = new Sink();
    closers.push(sink);
    const setup = caseSetup('xdp-l3fwd', 64);
    const s = setup.streams[0]!;
    sink.attach('ea', lab.a);
    sink.attach('eb', lab.b);
    attachXdp(l3.passFd, 'da', lab.dut);
    attachXdp(l3.passFd, 'db', lab.dut);
    const plan = await pinLab(lab, 0, undefined, 0);
    const sinkTid = plan.threads.find((t) => t.dev === 'eb')!.tid;
    const { rxIf, rxNs } = { rxIf: 'eb', rxNs: lab.b };
    sink.expect(rxIf, rxNs, 0, s.checks, s.minLen, 0);
    for (const fifo of o.fifo) for (const paceAt of o.paceAt) for (const batch of o.batches) {
      await execa('chrt', fifo > 0 ? ['-f', '-R', '-p', String(fifo), String(process.pid)] : ['-o', '-p', '0', String(process.pid)], { timeout: 10_000 });
      const gen = new PacedGenerator(batch, { paceAt });
      closers.push(gen);
      gen.configure(s.gen, 'ea', lab.a);
      for (const mode of o.modes) {
        attachXdp(mode === 'drop' ? aux.meterFd : l3.fwdFd, 'da', lab.dut);
        for (const mpps of [...o.rates, Infinity]) {
          const rate = mpps * 1e6;
          gen.setRate(rate);
          if (mode === 'drop' && Number.isFinite(rate)) aux.resetMeter(1e9 / rate / 4);
          sink.reset();
          const st0 = gen.state();
          const g0 = ctxSwitches(`/proc/self/task/${process.pid}/status`);
          const k0 = ctxSwitches(`/proc/${sinkTid}/status`);
          const slice = sliceFor(rate, batch);
          const t0 = process.hrtime.bigint();
          let inCalls = 0n;
          let sent = 0;
          while (Number(process.hrtime.bigint() - t0) < o.ms * 1e6) {
            const c0 = process.hrtime.bigint();
            sent += gen.send(slice);
            inCalls += process.hrtime.bigint() - c0;
          }
          const el = Number(process.hrtime.bigint() - t0);
          const st1 = gen.state();
          await new Promise((r) => setTimeout(r, 100));
          const p: PacingPoint = {
            mode, paceAt, fifo, batch, offered: rate, achieved: sent / (el / 1e9), late: st1.late - st0.late,
            spunShare: (st1.spunNs - st0.spunNs) / el, outsideShare: 1 - Number(inCalls) / el,
            genSwitches: ctxSwitches(`/proc/self/task/${process.pid}/status`) - g0, sinkSwitches: ctxSwitches(`/proc/${sinkTid}/status`) - k0,
            received: sink.read(0).frames,
          };
          if (mode === 'drop' && Number.isFinite(rate)) p.hist = aux.bursts().hist;
          out.push(p);
          const h = p.hist === undefined ? '' : ` bursts ${p.hist.map((n, i) => (n > 0 ? `${2 ** i}-${2 ** (i + 1) - 1}:${n}` : '')).filter((x) => x).join(' ')}`;
          log(
            `${mode.padEnd(4)} fifo ${String(fifo).padStart(2)} pace/${paceAt.padEnd(5)} batch ${String(batch).padStart(3)} offered ${Number.isFinite(rate) ? (rate / 1e6).toFixed(2) : ' max'} Mpps: ` +
              `sent ${(p.achieved / 1e6).toFixed(3)} Mpps, late ${p.late}, waiting ${(100 * p.spunShare).toFixed(0)} %, outside calls ${(100 * p.outsideShare).toFixed(0)} %, ` +
              `switches gen ${p.genSwitches} sink ${p.sinkSwitches}, sink got ${p.received}${h}`,
          );
        }
      }
    }
  } finally {
    await lab.destroy().catch((e: Error) => log(`cleanup: ${e.message}`));
    for (const c of closers.reverse()) {
      try {
        c.close();
      } catch (e) {
        log(`cleanup: ${(e as Error).message}`);
      }
    }
    await aff.restore();
  }
  return out;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const args = process.argv.slice(2);
  const opt = (f: string, d: string): string => {
    const i = args.indexOf(f);
    return i >= 0 ? args[i + 1]! : d;
  };
  const list = (s: string): number[] => s.split(',').map(Number);
  process.stdout.write(`pacing study ${new Date().toISOString()}, load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}\n`);
  pacingStudy({
    ms: Number(opt('--ms', '1000')), rates: list(opt('--rates', '0.25,0.5,1,2')), batches: list(opt('--batches', '16,64')),
    paceAt: opt('--pace-at', 'batch,frame').split(',') as PaceAt[], fifo: list(opt('--fifo', '40,0')),
    modes: opt('--modes', 'drop,fwd').split(',') as Array<'drop' | 'fwd'>,
  }, (l) =>
    process.stdout.write(`${l}\n`),
  )
    .then(() => process.stdout.write(`load average at the end ${loadavg().map((x) => x.toFixed(2)).join(' ')}\n`))
    .catch((e: unknown) => {
      process.stderr.write(`pacing study: ${e instanceof Error ? e.stack : String(e)}\n`);
      process.exitCode = 1;
    });
}
