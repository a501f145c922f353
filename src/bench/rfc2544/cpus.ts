/**
 * Where the RFC 2544 benchmark runs what (napi mode `pinned`): the device
 * under test's veths (da, db) receive in threaded NAPI (`echo 1 >
 * /sys/class/net/<dev>/threaded`: a kernel thread napi/<dev>-<id> per
 * device), pinned to the DUT's CPU; the generator (this process) and the
 * sinks' NAPI threads (ea, eb) on the other. Frames then queue in the DUT's
 * veth ring and are dropped, and counted, when the DUT is slower than the
 * offered rate. The NAPI threads run SCHED_FIFO (priority 50) so that
 * other work on a shared machine does not decide when the DUT polls.
 *
 * The checks read /proc/<tid>/stat: the CPU each thread last ran on and the
 * CPU time it used (the DUT's busy share during a trial).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { execa } from 'execa';
import type { BenchLab } from './lab.js';

export interface NapiThread {
  dev: string;
  tid: number;
  cpu: number;
  role: 'dut' | 'sink';
}

export interface CpuPlan {
  /** CPU of the generator (this process) and the sinks. */
  gen: number;
  /** CPU of the device under test's NAPI threads. */
  dut: number;
  threads: NapiThread[];
  /** SCHED_FIFO priority of the generator's thread (0: not changed). */
  genPriority?: number;
}

/** Kernel threads named napi/<dev>-<id> (thread ids). */
function napiThreads(dev: string): number[] {
  const out: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      if (readFileSync(`/proc/${p}/comm`, 'utf8').trim().startsWith(`napi/${dev}-`)) out.push(Number(p));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

async function sh(ns: string, cmd: string): Promise<void> {
  await execa('ip', ['netns', 'exec', ns, 'sh', '-c', cmd], { timeout: 10_000 });
}

/**
 * Threaded NAPI on the four veths, each new napi thread pinned (DUT's on
 * `dut`, the sinks' on `gen`) and made SCHED_FIFO 50; this process pinned
 * to `gen`. The veths need their XDP programs attached first (that is what
 * gives a veth its NAPI). Thread names are not per namespace, so a device's
 * threads are those that appear when its threaded switch is turned on.
 *
 * This process's main thread (the generator: its BPF_PROG_TEST_RUN calls
 * run in it) becomes SCHED_FIFO `genPriority` (default 40, below the NAPI
 * threads' 50, so the sinks still preempt it; 0 leaves it as it is), with
 * reset-on-fork so the commands it runs are not real-time: a paced
 * generator that other processes can preempt falls behind its pace (the
 * frames due meanwhile are lost to the trial: "generator short"). The
 * kernel's real-time throttling (sched_rt_runtime_us) still leaves other
 * work 5 % of the CPU. saveAffinity().restore() puts it back.
 */
export const GEN_PRIORITY = 40;

export async function pinLab(lab: BenchLab, gen = 0, dut = cpus().length - 1, genPriority = GEN_PRIORITY): Promise<CpuPlan> {
  if (gen === dut) throw new Error(`generator and device under test on the same CPU ${gen}: the pinned mode needs two CPUs`);
  const threads: NapiThread[] = [];
  for (const [ns, dev, role] of [[lab.dut, 'da', 'dut'], [lab.dut, 'db', 'dut'], [lab.a, 'ea', 'sink'], [lab.b, 'eb', 'sink']] as const) {
    const before = new Set(napiThreads(dev));
    await sh(ns, `echo 1 > /sys/class/net/${dev}/threaded`);
    const mine = napiThreads(dev).filter((t) => !before.has(t));
    if (mine.length === 0) throw new Error(`no napi/${dev}-* thread appeared after enabling threaded NAPI on ${dev} in ${ns}`);
    const cpu = role === 'dut' ? dut : gen;
    for (const tid of mine) {
      await execa('taskset', ['-p', '-c', String(cpu), String(tid)], { timeout: 10_000 });
      await execa('chrt', ['-f', '-p', '50', String(tid)], { timeout: 10_000 });
      threads.push({ dev, tid, cpu, role });
    }
  }
  await execa('taskset', ['-a', '-p', '-c', String(gen), String(process.pid)], { timeout: 10_000 });
  if (genPriority > 0) await execa('chrt', ['-f', '-R', '-p', String(genPriority), String(process.pid)], { timeout: 10_000 });
  return { gen, dut, threads, genPriority };
}

/** This process's CPUs (every thread's), to put back after pinLab: `restore()`. */
export function saveAffinity(): { restore(): Promise<void> } {
  const list = /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
  return {
    restore: async () => {
      await execa('chrt', ['-o', '-p', '0', String(process.pid)], { timeout: 10_000, reject: false });
      if (list !== undefined) await execa('taskset', ['-a', '-p', '-c', list, String(process.pid)], { timeout: 10_000 });
    },
  };
}

export interface ThreadSample {
  tid: number;
  /** CPU it last ran on (/proc/<tid>/stat field 39). */
  cpu: number;
  /** utime + stime, clock ticks. */
  ticks: number;
}

export function sampleThread(tid: number): ThreadSample | undefined {
  try {
    const s = readFileSync(`/proc/${tid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' '); // f[0] is field 3 (state)
    return { tid, cpu: Number(f[36]), ticks: Number(f[11]) + Number(f[12]) };
  } catch {
    return undefined;
  }
}

/** What the DUT's threads did during a trial: CPUs seen, busy share of one CPU. */
export interface DutCheck {
  /** CPUs the DUT's NAPI threads were seen on (sampled during the trial). */
  cpus: number[];
  /** CPU time of the DUT's NAPI threads / trial time (1 = one CPU flat out). */
  busy: number;
}

/** Samples the DUT's threads during a trial (call sample() now and then), then end(). */
export class DutWatch {
  readonly #tids: number[];
  readonly #start: Map<number, number>;
  readonly #cpus = new Set<number>();
  readonly #t0 = process.hrtime.bigint();

  constructor(plan: CpuPlan) {
    this.#tids = plan.threads.filter((t) => t.role === 'dut').map((t) => t.tid);
    this.#start = new Map(this.#tids.map((t) => [t, sampleThread(t)?.ticks ?? 0]));
  }

  sample(): void {
    for (const t of this.#tids) {
      const s = sampleThread(t);
      if (s !== undefined && s.ticks > (this.#start.get(t) ?? 0)) this.#cpus.add(s.cpu);
    }
  }

  end(): DutCheck {
    this.sample();
    const hz = 100;
    let ticks = 0;
    for (const t of this.#tids) ticks += (sampleThread(t)?.ticks ?? 0) - (this.#start.get(t) ?? 0);
    const s = Number(process.hrtime.bigint() - this.#t0) / 1e9;
    return { cpus: [...this.#cpus].sort(), busy: s > 0 ? ticks / hz / s : 0 };
  }
}

/** kernel.bpf_stats_enabled on for the run (restored by the returned function). */
export async function enableBpfStats(): Promise<() => Promise<void>> {
  const path = '/proc/sys/kernel/bpf_stats_enabled';
  const was = readFileSync(path, 'utf8').trim();
  await execa('sh', ['-c', `echo 1 > ${path}`]);
  return async () => void (await execa('sh', ['-c', `echo ${was} > ${path}`]));
}

/** run_time_ns and run_cnt of a program (bpftool), cumulative since kernel.bpf_stats_enabled went on. */
export async function progStats(id: number): Promise<{ ns: number; cnt: number }> {
  const r = await execa('bpftool', ['-j', 'prog', 'show', 'id', String(id)], { timeout: 10_000 });
  const j = JSON.parse(r.stdout) as { run_time_ns?: number; run_cnt?: number };
  return { ns: j.run_time_ns ?? 0, cnt: j.run_cnt ?? 0 };
}
