/**
 * The RFC 2544 report: terminal table, JSON, Markdown (machine, kernel, CPU,
 * settings, tables, ratios, targets, latency at load) and SVG plots of
 * throughput per frame size per case and of latency per load per case.
 * Pure functions of the result, except machineInfo().
 */
import { readFileSync } from 'node:fs';
import { cpus, hostname, loadavg, release } from 'node:os';
import { CASE_TITLES, CASES, ETH_FCS_OVERHEAD, PLAIN_OVERHEAD, type CaseName } from './cases.js';
import { GTPU_OVERHEAD, SRV6_OVERHEAD } from '../../packet/frames.js';
import { LIVE_BATCH } from '../../packet/generator.js';
import type { CaseResult, Rfc2544Result } from './rfc2544.js';
import type { LatencyStep } from './latency.js';
import { sweepSvg, type SweepRow } from '../../probe/sweep.js';
import { distOfBuckets, latencyFigures } from '../../probe/plots.js';
import { hdrIntervalLog, type LogSeries } from '../../probe/hdrlog.js';
import type { Summary } from '../../probe/stats.js';
import { unitColumns } from '../../probe/present.js';

export interface Machine {
  hostname: string;
  kernel: string;
  cpu: string;
  cpus: number;
  /** CPUs this process may run on (taskset). */
  affinity: string;
  node: string;
  loadStart: number[];
  loadEnd?: number[];
}

export function machineInfo(): Machine {
  let affinity = 'unknown';
  try {
    affinity = /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? affinity;
  } catch {
    // not Linux
  }
  const c = cpus();
  return {
    hostname: hostname(),
    kernel: release(),
    cpu: c[0]?.model.trim() ?? 'unknown',
    cpus: c.length,
    affinity,
    node: process.version,
    loadStart: loadavg().map((x) => Math.round(x * 100) / 100),
  };
}

export interface Report {
  machine: Machine;
  result: Rfc2544Result;
}

const mpps = (fps: number): string => (fps / 1e6).toFixed(3);
const pct = (x: number): string => `${(x * 100).toFixed(0)} %`;
const pct1 = (x: number): string => `${(x * 100).toFixed(1)} %`;

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length === 0 ? 0 : s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/**
 * The result of a case and size: with several repetitions, the one whose
 * throughput is the median (lower median for an even count), with `fpsAll`
 * listing every repetition's. Repetitions with an error are left out (and
 * listed under Errors); all of them in error makes it an error.
 */
function find(r: Rfc2544Result, c: CaseName, size: number): (CaseResult & { fpsAll: number[] }) | undefined {
  const xs = r.results.filter((x) => x.case === c && x.size === size);
  if (xs.length === 0) return undefined;
  const ok = xs.filter((x) => x.error === undefined);
  const fpsAll = ok.map((x) => x.fps);
  if (ok.length === 0) return { ...xs[0]!, fpsAll };
  const sorted = [...ok].sort((a, b) => a.fps - b.fps);
  return { ...sorted[Math.floor((sorted.length - 1) / 2)]!, fpsAll };
}

function genOnlyOf(r: Rfc2544Result, size: number): Rfc2544Result['genOnly'][number] | undefined {
  const gs = r.genOnly.filter((g) => g.size === size);
  if (gs.length === 0) return undefined;
  return { ...gs[0]!, fps: median(gs.map((g) => g.fps)), nsPerFrame: median(gs.map((g) => g.nsPerFrame)) };
}

function sizes(r: Rfc2544Result): number[] {
  return [...new Set(r.results.map((x) => x.size))];
}

function cases(r: Rfc2544Result): CaseName[] {
  return CASES.filter((c) => r.results.some((x) => x.case === c));
}

function cell(x: CaseResult | undefined): string {
  if (x === undefined) return '-';
  if (x.error !== undefined) return 'error';
  if (x.generatorLimited && x.topRate !== undefined) return `generator-bound at ${mpps(x.topRate)}`;
  if (x.fps === 0 && x.trials.length === 0) return 'not searched';
  return `${mpps(x.fps)} / ${x.gbps.toFixed(2)}`;
}

export interface Ratio {
  size: number;
  name: string;
  value: number;
}

/** Translator / baseline ratios of zero-loss frame rates, per size. */
export function ratios(r: Rfc2544Result): Ratio[] {
  const out: Ratio[] = [];
  const pairs: [CaseName, CaseName][] = [
    ['uplink', 'xdp-l3fwd'],
    ['downlink', 'xdp-l3fwd'],
    ['uplink', 'kernel-ipv4'],
    ['downlink', 'kernel-ipv4'],
    ['uplink', 'kernel-seg6'],
  ];
  for (const size of sizes(r)) {
    for (const [a, b] of pairs) {
      const x = find(r, a, size);
      const y = find(r, b, size);
      if (x && y && y.fps > 0 && x.fps > 0 && x.error === undefined) out.push({ size, name: `${a} / ${b}`, value: x.fps / y.fps });
    }
  }
  return out;
}

export interface Target {
  what: string;
  value: number | undefined;
  goal: number;
  met: boolean | undefined;
}

/** Issue 5's targets for 64-byte-class frames. */
export function targets(r: Rfc2544Result): Target[] {
  const rs = ratios(r).filter((x) => x.size === 64);
  const get = (n: string): number | undefined => rs.find((x) => x.name === n)?.value;
  const t = (what: string, name: string, goal: number): Target => {
    const value = get(name);
    return { what, value, goal, met: value === undefined ? undefined : value >= goal };
  };
  return [
    t('uplink >= 90 % of XDP L3FWD', 'uplink / xdp-l3fwd', 0.9),
    t('downlink >= 90 % of XDP L3FWD', 'downlink / xdp-l3fwd', 0.9),
    t('uplink >= 2x kernel IPv4 forwarding', 'uplink / kernel-ipv4', 2),
    t('downlink >= 2x kernel IPv4 forwarding', 'downlink / kernel-ipv4', 2),
  ];
}

/** Issue 20's (and issue 13's RFC 2544) targets, pinned mode, 64-byte class: PASS/FAIL lines. */
export interface PinnedTarget {
  what: string;
  /** undefined: not measured (a case missing, generator-bound, or no program figures). */
  pass: boolean | undefined;
  detail: string;
}

export function pinnedTargets(r: Rfc2544Result): PinnedTarget[] {
  const out: PinnedTarget[] = [];
  const at = (c: CaseName): CaseResult | undefined => find(r, c, 64);
  const l3 = at('xdp-l3fwd');
  const kern = at('kernel-ipv4');
  const usable = (x: CaseResult | undefined): x is CaseResult => x !== undefined && x.error === undefined && !x.generatorLimited && x.fps > 0;
  const ratio = (c: CaseName, base: CaseResult | undefined, baseName: string, goal: number): void => {
    const x = at(c);
    if (x === undefined) return;
    const what = `64 B ${c} zero-loss throughput >= ${goal === 2 ? '2x' : `${goal}x`} ${baseName}`;
    if (!usable(x) || !usable(base)) {
      const why = (y: CaseResult | undefined): string => (y === undefined ? 'not run' : y.generatorLimited ? `generator-bound at ${mpps(y.topRate ?? 0)} Mpps` : y.error ?? 'no rate');
      out.push({ what, pass: undefined, detail: `not measured (${!usable(x) ? `${c}: ${why(x)}` : `${baseName}: ${why(base)}`})` });
      return;
    }
    const v = x.fps / base.fps;
    const detail = `${mpps(x.fps)} / ${mpps(base.fps)} Mpps = ${v.toFixed(2)}`;
    // A throughput whose trials' generator fell short is a lower bound of the device's: over a lower bound
    // the ratio is an upper bound, so only FAIL stands; under one (the case's own), only PASS.
    const xs = throughputShort(x);
    const bs = throughputShort(base);
    const shortWhy = `sent under 95 % of the offered rate: a lower bound`;
    if (xs && bs) out.push({ what, pass: undefined, detail: `not measured: both capped by the generator (${c} and ${baseName} ${shortWhy}); ${detail}` });
    else if (xs && v < goal) out.push({ what, pass: undefined, detail: `not measured: ${c} capped by the generator (${shortWhy}); ${detail}` });
    else if (bs && v >= goal) out.push({ what, pass: undefined, detail: `not measured: ${baseName} capped by the generator (${shortWhy}); ${detail}` });
    else out.push({ what, pass: v >= goal, detail: `${detail}${xs ? ` (${c} ${shortWhy})` : bs ? ` (${baseName} ${shortWhy})` : ''}` });
  };
  for (const c of ['uplink', 'downlink', 'uplink-10k', 'pe-downlink'] as CaseName[]) ratio(c, l3, 'XDP L3FWD', 0.9);
  for (const c of ['uplink', 'downlink'] as CaseName[]) ratio(c, kern, 'kernel IPv4 forwarding', 2);
  for (const c of ['uplink', 'downlink'] as CaseName[]) {
    const x = at(c);
    if (x === undefined || l3 === undefined) continue;
    const what = `64 B ${c} program cost <= 1.15x XDP L3FWD's (bpf_stats, ns per run)`;
    const a = x.progNs ?? x.trials[0]?.progNs;
    const b = l3.progNs ?? l3.trials[0]?.progNs;
    if (a === undefined || b === undefined || b === 0) out.push({ what, pass: undefined, detail: 'not measured' });
    else out.push({ what, pass: a / b <= 1.15, detail: `${a.toFixed(1)} / ${b.toFixed(1)} ns = ${(a / b).toFixed(2)}` });
  }
  for (const x of r.results) {
    if (x.error !== undefined || x.trials.length === 0) continue;
    out.push({ what: `${x.case} ${x.size} B${r.options.repeat > 1 ? ` (repetition ${x.rep})` : ''}: the rate found held (confirmed, no trial at or below it lost frames)`, ...heldCheck(x) });
  }
  return out;
}

/** The trials a case's throughput comes from (those at its confirmed rate; before confirmations, the one at that rate). */
function throughputTrials(x: CaseResult): CaseResult['trials'] {
  return x.trials.filter((t) => t.pass && (x.fpsOffered !== undefined ? t.offeredRate === x.fpsOffered : t.achievedRate === x.fps));
}

/** The generator fell short (sent under 95 % of the offered rate) in a trial the throughput comes from. */
export function throughputShort(x: CaseResult): boolean {
  return throughputTrials(x).some((t) => Number.isFinite(t.offeredRate) && t.achievedRate < 0.95 * t.offeredRate);
}

/** Whether a case's throughput is a rate that held: a verdict that can fail. */
export function heldCheck(x: CaseResult): { pass: boolean; detail: string } {
  const lost = x.trials.filter((t) => !t.pass);
  const tally = `${lost.length} of ${x.trials.length} trials lost`;
  if (x.generatorLimited) return { pass: false, detail: `generator-bound at ${mpps(x.topRate ?? 0)} Mpps: no trial lost, so no throughput is reported` };
  if (x.fps === 0) return { pass: false, detail: `no rate held: ${tally}` };
  const below = lost.filter((t) => t.achievedRate <= x.fps);
  if (below.length > 0) {
    return { pass: false, detail: `${below.length} trial(s) lost at or below ${mpps(x.fps)} Mpps (sent ${below.map((t) => mpps(t.achievedRate)).join(', ')}); ${tally}` };
  }
  const conf = throughputTrials(x).filter((t) => t.confirm === true).length;
  if (x.confirmed !== true || conf === 0) return { pass: false, detail: `${mpps(x.fps)} Mpps not confirmed by a repeat trial (one passing trial is one sample); ${tally}` };
  return { pass: true, detail: `${mpps(x.fps)} Mpps held in ${conf + 1} trials; ${tally}, all above it` };
}

/** The settings' words for the confirmation trials (reports from before them have none). */
function confirmText(n: number | undefined): string {
  return n === undefined ? ', no confirmation trials (before session 43: the throughput was the best single passing trial)'
    : ` then ${n} confirmation trial(s) at the rate found (reported only if all pass and no trial at or below it lost; a loss steps down)`;
}

const verdict = (t: PinnedTarget): string => (t.pass === undefined ? 'NOT MEASURED' : t.pass ? 'PASS' : 'FAIL');

/** The pinned mode's own sections: CPUs, bursts, tests §26.3 and §26.4, program cost, targets. */
function pinnedMarkdown(rep: Report): string[] {
  const r = rep.result;
  const o = r.options;
  const L: string[] = [];
  const p = r.cpuPlan;
  L.push('## Where things run (napi pinned)', '');
  if (p !== undefined) {
    L.push(`- Generator (this process, BPF_PROG_TEST_RUN live frames, bpf/bench/pacedgen.bpf.c${p.genPriority ? `, its thread SCHED_FIFO ${p.genPriority}` : ''}) and the sinks' NAPI threads on **CPU ${p.gen}**; the device under test's NAPI threads on **CPU ${p.dut}**, SCHED_FIFO 50:`);
    for (const t of p.threads) L.push(`  - napi/${t.dev} (thread ${t.tid}, ${t.role === 'dut' ? 'device under test' : 'sink'}): pinned to CPU ${t.cpu}`);
    const seen = [...new Set(r.results.flatMap((x) => x.trials.flatMap((t) => t.dut?.cpus ?? [])))];
    L.push(`- Checked during every trial (/proc/<tid>/stat): the DUT's threads ran on CPU ${seen.length > 0 ? seen.join(', ') : '-'}${seen.length === 1 && seen[0] === p.dut ? ' only' : ' (**not only the DUT\'s CPU**)'}; the trials table gives their busy share of that CPU.`);
  }
  L.push(`- Trials of ${o.trialMs / 1000} s${o.trialMs < 60_000 ? ` (**shorter than RFC 2544 §26.1's 60 s**${o.trialMs <= 1000 ? ', --quick' : ''}; \`--full\` runs 60 s trials)` : ' (RFC 2544 §26.1)'}; back-to-back: ${o.b2bTrials} trial(s) per case (RFC 2544 §26.4 asks for 50).`);
  L.push(`- Pacing: the first frame of each kernel batch of ${r.pacedBatch ?? '?'} waits in the generator's program until its time (bpf_loop on bpf_ktime_get_ns); the kernel flushes XDP_TX frames once per batch, so the DUT receives bursts of about one batch at the offered rate (up to 64 frames when the generator catches up after a preemption; further behind, the pace restarts). A trial's **sent** rate is what the generator achieved; under other load it falls short of the offered rate.`);
  const shortN = r.results.reduce((a, x) => a + x.trials.filter((t) => Number.isFinite(t.offeredRate) && t.achievedRate < 0.95 * t.offeredRate).length, 0);
  const allN = r.results.reduce((a, x) => a + x.trials.length, 0);
  L.push(`- The search bisects on the rates asked for, then repeats the highest rate that held ${o.confirm ?? 0} more time(s) ("(confirm)" in the trials table): the throughput is the lowest rate those trials reached, all without loss, with no trial of the search losing at or below it; a confirmation that loses steps down. A device that loses in a fraction p of trials at every rate still gets through each rate tried with a chance of (1 − p)^${(o.confirm ?? 0) + 1}.`);
  L.push(`- **${shortN} of ${allN} trials' generator reached less than 95 % of its offered rate** (marked "(short)" in the trials table: its CPU was shared with other work)${shortN > 0 ? '; a throughput from such a search is a lower bound of what a dedicated generator would show' : ''}.`);
  L.push('- Loss = frames sent − frames counted correct at the sink; where they went: the veth counters (`dut:da:rx_dropped` is the DUT\'s ring overflowing, with `a:ea:tx_dropped` its sending side) and the translator\'s drop reasons.', '');
  if ((r.bursts ?? []).length > 0) {
    L.push('### Bursts the device under test sees', '');
    L.push('The burst meter (bpf/bench/dutaux.bpf.c, on da in place of the DUT) counts runs of frames closer together than a quarter of the offered interval, by length; they include what the DUT\'s NAPI thread found queued after a wait for its CPU.', '');
    const head = ['offered Mpps', 'sent Mpps', 'frames', ...Array.from({ length: 10 }, (_, i) => (i === 0 ? '1' : `${2 ** i}–${2 ** (i + 1) - 1}`)), '≥1024'];
    L.push(`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`);
    for (const b of r.bursts!) {
      L.push(`| ${mpps(b.offeredRate)} | ${mpps(b.achievedRate)} | ${b.frames} | ${b.hist.slice(0, 10).join(' | ')} | ${b.hist.slice(10).reduce((a, c) => a + c, 0)} |`);
    }
    L.push('');
  }
  const withLoss = r.results.filter((x) => x.lossRate !== undefined);
  if (withLoss.length > 0) {
    L.push('## Frame loss rate (RFC 2544 §26.3)', '');
    L.push('Loss at 100 % of the maximum rate (the generator flat out: a veth has no line rate), then 90 %, 80 %, … until two steps in a row lose nothing.', '');
    L.push('| case | frame | % of max | offered Mpps | sent Mpps | sent | lost | loss |', '|---|---|---|---|---|---|---|---|');
    for (const x of withLoss) for (const st of x.lossRate!) L.push(`| ${x.case} | ${x.size} | ${st.percent} | ${mpps(st.offeredRate)} | ${mpps(st.achievedRate)} | ${st.sent} | ${st.lost} | ${(st.lossRatio * 100).toFixed(3)} % |`);
    L.push('');
  }
  const b2b = r.results.filter((x) => x.back2back !== undefined);
  if (b2b.length > 0) {
    L.push('## Back-to-back frames (RFC 2544 §26.4)', '');
    L.push('The longest burst at the maximum rate (the generator flat out) that arrives whole, by binary search per trial; the mean over the trials.', '');
    L.push('| case | frame | burst rate Mpps | longest bursts | mean | longest tried |', '|---|---|---|---|---|---|');
    for (const x of b2b) L.push(`| ${x.case} | ${x.size} | ${mpps(x.back2back!.rate)} | ${x.back2back!.bursts.join(', ')} | ${x.back2back!.mean.toFixed(0)} | ${x.back2back!.maxBurst} |`);
    L.push('');
  }
  const prog = r.results.filter((x) => x.trials.some((t) => t.progNs !== undefined));
  if (prog.length > 0) {
    L.push('## Program cost next to throughput', '');
    L.push('kernel.bpf_stats_enabled on for the run: the DUT program\'s run_time_ns / run_cnt over each trial (bpftool). The kernel baselines have no program of their own. With stats on, each run also pays two clock reads.', '');
    L.push('| case | frame | zero-loss Mpps | ns per run at that rate | ns per run flat out (trial 1) |', '|---|---|---|---|---|');
    for (const x of prog) L.push(`| ${x.case} | ${x.size} | ${x.fps > 0 ? mpps(x.fps) : '-'} | ${x.progNs?.toFixed(1) ?? '-'} | ${x.trials[0]?.progNs?.toFixed(1) ?? '-'} |`);
    L.push('');
  }
  L.push('## Targets (issue 20, issue 13)', '');
  for (const t of pinnedTargets(r)) L.push(`- **${verdict(t)}** ${t.what}: ${t.detail}`);
  L.push('');
  return L;
}

/** DUT ns per frame: the case's kernel time per frame minus the generator's alone (softirq mode). */
export function dutNs(r: Rfc2544Result, x: CaseResult): number | undefined {
  const g = genOnlyOf(r, x.size);
  if (!g || x.nsPerFrame === 0 || r.options.napi !== 'softirq') return undefined;
  return x.nsPerFrame - g.nsPerFrame;
}

/** Translator / baseline ratios from the DUT's share per frame (softirq mode only). */
export function shareRatios(r: Rfc2544Result): Ratio[] {
  const out: Ratio[] = [];
  for (const size of sizes(r)) {
    for (const [a, b] of [['uplink', 'xdp-l3fwd'], ['downlink', 'xdp-l3fwd'], ['uplink', 'kernel-ipv4'], ['downlink', 'kernel-ipv4']] as [CaseName, CaseName][]) {
      const x = find(r, a, size);
      const y = find(r, b, size);
      const dx = x && x.error === undefined ? dutNs(r, x) : undefined;
      const dy = y && y.error === undefined ? dutNs(r, y) : undefined;
      if (dx !== undefined && dy !== undefined && dx > 0 && dy > 0) out.push({ size, name: `${a} / ${b}`, value: dy / dx });
    }
  }
  return out;
}

/** Right-aligned columns, two spaces apart: the head line, then a line per row. */
function columns(head: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cols: readonly string[]): string => cols.map((c, i) => c.padStart(w[i]!)).join('  ');
  return [line(head), ...rows.map(line)];
}

/** The figures of one summary the report shows. */
export interface LatencyFigures {
  p50: number;
  p99: number;
  p999: number;
  max: number;
  /** p95 − p5. */
  jitter: number;
}

/** One load step of one case and size, as the tables show it. */
export interface LatencyRow {
  case: CaseName;
  size: number;
  rep: number;
  percent: number;
  /** Background load asked for and reached, frames per second. */
  offeredPps: number;
  achievedPps: number;
  bgLost: number;
  bgLossRatio: number;
  probesSent: number;
  probesLost: number;
  wire: LatencyFigures | null;
  residence: LatencyFigures | null;
}

function figures(s: Summary | null): LatencyFigures | null {
  return s === null ? null : { p50: s.percentiles.p50, p99: s.percentiles.p99, p999: s.percentiles['p99.9'], max: s.max, jitter: s.jitter };
}

/** Every load step measured, in the order of the run. */
export function latencyRows(r: Rfc2544Result): LatencyRow[] {
  return r.results.flatMap((x) =>
    (x.latency?.steps ?? []).map((s: LatencyStep) => ({
      case: x.case, size: x.size, rep: x.rep, percent: s.percent, offeredPps: s.offeredPps, achievedPps: s.background.achievedPps,
      bgLost: s.background.lost, bgLossRatio: s.background.lossRatio, probesSent: s.probes.sent, probesLost: s.probes.lost,
      wire: figures(s.wire), residence: figures(s.residence),
    })),
  );
}

const LATENCY_HEAD = ['case', 'frame', 'load', 'bg Mpps offered / sent', 'bg lost', 'probes lost'];
const LATENCY_TIMES = ['wire p50', 'p99', 'p99.9', 'max', 'jitter', 'residence p50', 'p99', 'p99.9', 'max', 'jitter'];

/**
 * The latency table: a row per case, size and step; each time column in one
 * unit, the unit of its largest value, named in its header (a column never
 * mixes ns and µs).
 */
function latencyTable(lat: readonly LatencyRow[]): { head: string[]; rows: string[][] } {
  const f = (v: LatencyFigures | null): (number | null)[] => (v === null ? [null, null, null, null, null] : [v.p50, v.p99, v.p999, v.max, v.jitter]);
  const times = unitColumns(LATENCY_TIMES, lat.map((x) => [...f(x.wire), ...f(x.residence)]));
  return {
    head: [...LATENCY_HEAD, ...times.head],
    rows: lat.map((x, i) => [
      x.case, `${x.size}`, `${x.percent} %`, `${mpps(x.offeredPps)} / ${mpps(x.achievedPps)}`, `${x.bgLost} (${(x.bgLossRatio * 100).toFixed(3)} %)`,
      `${x.probesLost} of ${x.probesSent}`, ...times.cells[i]!,
    ]),
  };
}

/** Cases and sizes without latency, and why (one line each, repetitions folded). */
function latencySkips(r: Rfc2544Result): string[] {
  if (r.options.latencyLoads.length === 0 || r.options.napi === 'pinned') return []; // off for the whole run: the settings say so once
  const by = new Map<string, number[]>();
  for (const x of r.results) {
    if (x.latencySkipped === undefined) continue;
    const k = `${x.case}: ${x.latencySkipped}`;
    by.set(k, [...new Set([...(by.get(k) ?? []), x.size])]);
  }
  return [...by].map(([k, ss]) => `${k} (${ss.join(', ')} B)`);
}

export function terminalTable(rep: Report): string {
  const r = rep.result;
  const cs = cases(r);
  const head = ['frame', ...cs];
  const rows = sizes(r).map((s) => [`${s}`, ...cs.map((c) => cell(find(r, c, s)))]);
  const lat = latencyRows(r);
  const out = [
    'Zero-loss throughput, Mpps / Gbit/s (frames as the DUT receives them):',
    ...columns(head, rows),
    '',
    ...ratios(r)
      .filter((x) => x.size === 64)
      .map((x) => `64B ${x.name}: ${pct(x.value)}`),
    ...targets(r).map((t) => `target ${t.what}: ${t.value === undefined ? 'not measured' : `${pct1(t.value)} ${t.met ? 'met' : 'MISSED'}`}`),
  ];
  if (r.options.napi === 'pinned') {
    out.splice(out.findIndex((l) => l.startsWith('target ')), Infinity);
    for (const x of r.results) {
      if (x.lossRate) out.push(`${x.case} ${x.size}B frame loss rate (§26.3): ${x.lossRate.map((st) => `${st.percent} % ${(st.lossRatio * 100).toFixed(2)} %`).join(', ')}`);
      if (x.back2back) out.push(`${x.case} ${x.size}B back-to-back (§26.4): ${x.back2back.bursts.join(', ')} frames, mean ${x.back2back.mean.toFixed(0)}`);
    }
    out.push('', ...pinnedTargets(r).map((t) => `${verdict(t)} ${t.what}: ${t.detail}`));
    out.push(`(load average ${rep.machine.loadStart.join(' / ')} at start${rep.machine.loadEnd ? `, ${rep.machine.loadEnd.join(' / ')} at end` : ''}; trials ${r.options.trialMs / 1000} s${r.options.trialMs < 60_000 ? ', shorter than RFC 2544 §26.1\'s 60 s' : ''})`);
  }
  if (lat.length > 0) {
    out.push('', `Latency at load (% of the zero-loss rate; background lost; one-way wire and in-program residence; ${r.options.probeRate} probes/s for ${r.options.probeSeconds} s a step):`);
    const t = latencyTable(lat);
    out.push(...columns(t.head, t.rows));
  }
  const skipped = latencySkips(r);
  if (skipped.length > 0) out.push('', ...skipped.map((l) => `no latency: ${l}`));
  if (r.options.repeat > 1) out.splice(1, 0, `(median of ${r.options.repeat} repetitions)`);
  if (r.interrupted) out.push('(interrupted: partial results)');
  return out.join('\n') + '\n';
}

export function markdown(rep: Report): string {
  const r = rep.result;
  const m = rep.machine;
  const o = r.options;
  const cs = cases(r);
  const L: string[] = [];
  L.push(`# RFC 2544 throughput and latency: srv6-mup translator against kernel and XDP baselines`, '');
  L.push(`Run ${r.startedAt} – ${r.finishedAt}${r.interrupted ? ' (**interrupted**: partial results)' : ''}.`, '');
  L.push('## Machine and settings', '');
  L.push(`- Host ${m.hostname}: ${m.cpu}, ${m.cpus} CPUs, Linux ${m.kernel}, Node ${m.node}`);
  L.push(`- Load average at start ${m.loadStart.join(' / ')}${m.loadEnd ? `, at end ${m.loadEnd.join(' / ')}` : ''} (1 / 5 / 15 min; other work shares the machine)`);
  const pinned = m.affinity !== 'unknown' && !m.affinity.includes('-') && !m.affinity.includes(',');
  if (o.napi === 'pinned') {
    L.push(`- ${o.repeat} repetition(s); trial ${o.trialMs / 1000} s, loss tolerance ${o.lossTolerance} (ratio), search resolution ${pct(o.resolution)}, at most ${o.maxTrials} trials per search${confirmText(o.confirm)}, ${o.flows} inner flows per stream, tests ${o.tests.join(', ')}; the device under test on its own CPU (see "Where things run").`);
    L.push('- Generator: BPF_PROG_TEST_RUN in live-frame mode, paced in its program (bpf/bench/pacedgen.bpf.c); sink: XDP program on the receiving veth that checks every frame and counts it (bpf/bench/sink.bpf.c).');
    L.push('- Latency at load: not measured in the pinned mode (`--napi softirq` measures it, with the generator on the DUT\'s core).', '');
  } else {
  L.push(`- CPUs this run could use: ${m.affinity}. **Generator and device under test share the machine's ${m.cpus} cores**` +
    (pinned ? ` (this run was pinned to CPU ${m.affinity}, so they shared that one)` : '') +
    (o.napi === 'softirq'
      ? ': in softirq mode the device under test runs its XDP and forwarding in the softirq that follows each generator batch, on the same core, so a rate is that of the generator and the DUT together.'
      : ': in threaded mode the DUT\'s veths run NAPI in kernel threads, which the scheduler may put on the other core.'));
  L.push(`- ${o.repeat} repetition(s); trial ${o.trialMs / 1000} s, loss tolerance ${o.lossTolerance} (ratio), search resolution ${pct(o.resolution)}, at most ${o.maxTrials} trials per search${confirmText(o.confirm)}, ${o.flows} inner flows (UDP source ports) per stream, live-frame kernel batch ${LIVE_BATCH}, NAPI ${o.napi}`);
  L.push('- Generator: BPF_PROG_TEST_RUN in live-frame mode (bpf/bench/trafficgen.bpf.c, XDP_TX out of a veth into the DUT), rate-controlled by batches of 20 ms of frames (each batch leaves at full speed); sink: XDP program on the receiving veth that checks every frame against the expected output and counts it (bpf/bench/sink.bpf.c). Loss = frames sent − frames counted correct at the sink.');
  L.push(o.latencyLoads.length === 0
    ? '- Latency: **not measured** in this run (--no-latency).'
    : `- Latency: after each search, at ${o.latencyLoads.join(', ')} % of the zero-loss rate it found (see "Latency at load").`, '');
  }
  L.push('## Frame sizes', '');
  L.push('RFC 2544 size − 18 (Ethernet header and FCS) is the inner IP packet, the same in every case; each case adds its own headers (no FCS on a veth):', '');
  L.push('| RFC 2544 size | inner IPv4 packet | GTP-U uplink frame (+58) | SRv6 downlink frame (+54) | plain IPv4 frame (+14, seg6 input) |');
  L.push('|---|---|---|---|---|');
  for (const s of sizes(r)) {
    const i = s - ETH_FCS_OVERHEAD;
    L.push(`| ${s} | ${i} | ${i + GTPU_OVERHEAD} | ${i + SRV6_OVERHEAD} | ${i + PLAIN_OVERHEAD} |`);
  }
  L.push('', '## Cases', '');
  for (const c of cs) L.push(`- **${c}**: ${CASE_TITLES[c]}${c === 'bidir' ? ' (uplink and downlink streams from one generator thread, alternating batches; the rate is their sum)' : ''}`);
  if (cs.includes('kernel-seg6')) L.push(`- kernel-seg6 uses \`encap seg6 mode ${r.seg6Mode}\` with one segment.`);
  L.push('- kernel-ipv4 and xdp-l3fwd forward the uplink GTP-U frames unchanged (TTL − 1).');
  if (r.nexthops !== undefined) {
    const fib = Object.entries(r.nexthops.fib).map(([k, n]) => `${n} by FIB lookup (${k})`);
    L.push(
      r.nexthops.mode === 'cache'
        ? `- The translator forwards by the next-hop cache (\`mup daemon\`'s): ${r.nexthops.cached} of its rules cached${fib.length > 0 ? `, ${fib.join(', ')}` : ''}` +
          `${r.nexthops.frames === undefined ? '' : ` (frames over the run: ${r.nexthops.frames.cached} by the cache, ${r.nexthops.frames.fib} by FIB lookup)`}; xdp-l3fwd does a FIB lookup per frame.`
        : '- The translator forwards by a FIB lookup per frame (next-hop cache off), as xdp-l3fwd.',
    );
  }
  L.push('- Every case runs in the same three namespaces with the same generator and sink; only the DUT\'s program (translator, L3FWD, or XDP_PASS for the kernel) changes.', '');
  L.push('## Zero-loss throughput (Mpps / Gbit/s of the frames the DUT receives)', '');
  if (o.repeat > 1) L.push(`Median of ${o.repeat} repetitions of the whole set (sizes × cases, interleaved); every repetition's Mpps is in the table after.`, '');
  L.push(`| frame | ${cs.join(' | ')} |`);
  L.push(`|---|${cs.map(() => '---').join('|')}|`);
  for (const s of sizes(r)) L.push(`| ${s} | ${cs.map((c) => cell(find(r, c, s))).join(' | ')} |`);
  L.push('', '![throughput](throughput.svg)', '');
  if (o.repeat > 1) {
    L.push('Every repetition, Mpps:', '');
    L.push(`| frame | ${cs.join(' | ')} |`);
    L.push(`|---|${cs.map(() => '---').join('|')}|`);
    for (const s of sizes(r)) L.push(`| ${s} | ${cs.map((c) => find(r, c, s)?.fpsAll.map(mpps).join(', ') ?? '-').join(' | ')} |`);
    L.push('');
  }
  const rs = ratios(r);
  if (rs.length > 0) {
    L.push('## Ratios (zero-loss frame rates)', '');
    const names = [...new Set(rs.map((x) => x.name))];
    L.push(`| frame | ${names.join(' | ')} |`);
    L.push(`|---|${names.map(() => '---').join('|')}|`);
    for (const s of sizes(r)) L.push(`| ${s} | ${names.map((n) => { const v = rs.find((x) => x.size === s && x.name === n); return v ? pct(v.value) : '-'; }).join(' | ')} |`);
    L.push('');
  }
  L.push('## Targets (issue 5, 64-byte class)', '');
  for (const t of targets(r)) L.push(`- ${t.what}: ${t.value === undefined ? 'not measured' : `${pct1(t.value)} — **${t.met ? 'met' : 'missed'}**`}`);
  L.push('');
  if (r.genOnly.length > 0) {
    L.push('## Generator alone and the DUT\'s share', '');
    L.push('The generator into a DUT that drops every frame on arrival, and per case the kernel time per frame of the best trial (BPF_PROG_TEST_RUN\'s own measure, without its few milliseconds of set-up per call; medians over repetitions)' +
      (o.napi === 'softirq' ? '; the difference is what the DUT, the veths and the sink cost per frame.' : '.'), '');
    L.push(`| frame | generator alone, Mpps | ns/frame | ${cs.map((c) => `${c} ns/frame${o.napi === 'softirq' ? ' (DUT share)' : ''}`).join(' | ')} |`);
    L.push(`|---|---|---|${cs.map(() => '---').join('|')}|`);
    for (const g of sizes(r).map((s) => genOnlyOf(r, s)).filter((g) => g !== undefined)) {
      L.push(`| ${g.size} | ${mpps(g.fps)} | ${g.nsPerFrame.toFixed(0)} | ${cs.map((c) => { const x = find(r, c, g.size); if (!x || x.nsPerFrame === 0) return '-'; const d = dutNs(r, x); return `${x.nsPerFrame.toFixed(0)}${d === undefined ? '' : ` (${d.toFixed(0)})`}`; }).join(' | ')} |`);
    }
    L.push('');
    const share = shareRatios(r);
    if (share.length > 0) {
      L.push('Ratios of the DUT\'s share alone (baseline ns / translator ns per frame). Indicative only: BPF_PROG_TEST_RUN times the NAPI work that runs inside it, not what the kernel defers to ksoftirqd, so these do not add up to the wall-clock rates above.', '');
      for (const x of share) L.push(`- ${x.size} B ${x.name}: ${pct(x.value)}`);
      L.push('');
    }
  }
  const limited = r.results.filter((x) => x.generatorLimited);
  if (limited.length > 0) {
    L.push(`${limited.length} of ${r.results.length} searches passed their first trial at full speed: no frame was lost even with the generator flat out, so the figure is the rate of generator and DUT together on their core${o.napi === 'softirq' ? ' (expected in softirq mode: the DUT paces the generator)' : ''}, not a loss point.`, '');
  }
  const errs = r.results.filter((x) => x.error !== undefined);
  if (errs.length > 0) {
    L.push('## Errors', '');
    for (const e of errs) L.push(`- ${e.case} ${e.size}${o.repeat > 1 ? ` (repetition ${e.rep})` : ''}: ${e.error}`);
    L.push('');
  }
  if (o.napi === 'pinned') L.push(...pinnedMarkdown(rep));
  L.push(...latencyMarkdown(r));
  L.push('## Trials', '');
  L.push('Drops: veth drop counters and the translator\'s non-forwarding events that moved during the trial (`side:interface:counter`, `translator:event`).', '');
  const pinnedCols = o.napi === 'pinned';
  L.push(`| case | frame | trial | offered Mpps | sent Mpps | sent | received | lost | loss | pass |${pinnedCols ? ' DUT CPU | DUT busy | program ns |' : ''} drops |`);
  L.push(`|---|---|---|---|---|---|---|---|---|---|${pinnedCols ? '---|---|---|' : ''}---|`);
  for (const x of r.results) {
    x.trials.forEach((t, i) => {
      const extra = pinnedCols ? ` ${t.dut?.cpus.join(',') ?? '-'} | ${t.dut ? pct(t.dut.busy) : '-'} | ${t.progNs?.toFixed(1) ?? '-'} |` : '';
      const short = pinnedCols && Number.isFinite(t.offeredRate) && t.achievedRate < 0.95 * t.offeredRate ? ' (short)' : '';
      L.push(`| ${x.case} | ${x.size} | ${i + 1}${t.confirm === true ? ' (confirm)' : ''} | ${Number.isFinite(t.offeredRate) ? mpps(t.offeredRate) : 'max'} | ${mpps(t.achievedRate)}${short} | ${t.sent} | ${t.received} | ${t.lost} | ${(t.lossRatio * 100).toFixed(3)} % | ${t.pass ? 'yes' : 'no'} |${extra} ${Object.entries(t.drops ?? {}).map(([k, v]) => `${k} ${v}`).join(', ')} |`);
    });
  }
  L.push('');
  return L.join('\n');
}

function latencyMarkdown(r: Rfc2544Result): string[] {
  const o = r.options;
  if (o.latencyLoads.length === 0 || o.napi === 'pinned') return [];
  const lat = latencyRows(r);
  const L: string[] = ['## Latency at load', ''];
  L.push(
    `After each case's search, for each load step the live-frame generator sends the case's own frames at that percentage of the zero-loss rate just found (in a child process, \`mup probe-loadgen\`, as \`mup probe --sweep\` does), ` +
      `while \`mup probe\` sends ${o.probeRate} probe frames/s for ${o.probeSeconds} s through the same device under test: frames of the same flow and size with the probe payload in an inner UDP packet to port 47000 (the background goes to port 9000). ` +
      'The sink on the receiving veth hands the frames that carry the probe\'s magic to the stack (XDP_PASS, counted apart from the background it drops), where the probe\'s packet socket captures them.',
    '',
    '- **wire**: one-way, the probe\'s TX software stamp on the sending veth to its RX stamp on the receiving veth: the generator\'s core, the veths, the DUT and the sink\'s XDP_PASS to the socket; both ends on this host\'s CLOCK_REALTIME. Measured for every case that has it, baselines included, so they stand next to each other.',
    '- **residence**: the translator\'s in-band stamps (bpf/probe.h): exit − entry of its XDP program for each probe, from its ring buffer records (translator cases only).',
    '- Percentiles are nearest-rank; jitter = p95 − p5; **bg Mpps offered / sent**: the step\'s load asked for and what the generator sent over its run (less when it could not keep up); **bg lost** = background frames sent − counted correct at the sink during the step (the step ran the load past the last probe, so its count is whole).',
    `- The generator, the device under test and the probe share ${r.options.napi === 'softirq' ? 'the CPU(s) this run had' : 'the machine'}: at 90 % of a rate where the core was the limit, the probe's own sends and receives wait for that core, and the wire figures hold that wait.`,
    '- A step\'s background can fall short of its offered rate near the top (a note says so): the load child paces by sends of 1/100 s and shares the core with the probe, and with the translator the probe\'s stamps, while on, read the clock twice for every frame (bpf/probe.h), background included, so its capacity during a step is below the rate the search found with them off.',
    '',
  );
  if (lat.length > 0) {
    const t = latencyTable(lat);
    L.push(`| ${t.head.join(' | ')} |`, `|${t.head.map(() => '---').join('|')}|`);
    for (const row of t.rows) L.push(`| ${row.join(' | ')} |`);
    L.push('');
    for (const [name] of latencySvgs(r)) L.push(`![${name}](${name})`);
    L.push('');
  }
  const notes = r.results.flatMap((x) => (x.latency?.steps ?? []).flatMap((s) => s.notes.map((n) => `${x.case} ${x.size} @ ${s.percent} %: ${n}`)));
  if (notes.length > 0) L.push('Notes from the probe:', '', ...notes.map((n) => `- ${n}`), '');
  const skipped = latencySkips(r);
  if (skipped.length > 0) L.push('Not measured:', '', ...skipped.map((l) => `- ${l}`), '');
  return L;
}

/** The step's figures as `mup probe --sweep` rows (p50, p99, jitter), one series per case, for its plot. */
function sweepRowsOf(rows: readonly LatencyRow[]): SweepRow[] {
  const pick = (v: LatencyFigures | null, k: 'p50' | 'p99' | 'jitter'): number | null => (v === null ? null : v[k]);
  return rows.map((x) => ({
    percent: x.percent, offeredPps: x.offeredPps, dir: x.case, achievedPps: x.achievedPps, lost: x.probesLost,
    wireP50: pick(x.wire, 'p50'), wireP99: pick(x.wire, 'p99'), wireJitter: pick(x.wire, 'jitter'),
    residenceP50: pick(x.residence, 'p50'), residenceP99: pick(x.residence, 'p99'), residenceJitter: pick(x.residence, 'jitter'),
  }));
}

/**
 * Latency plots, per frame size: wire latency against load for every case
 * measured (translator and baselines on one plot), and the translator's
 * residence. `mup probe --sweep`'s plot (log scale). First repetition only.
 */
export function latencySvgs(r: Rfc2544Result): [string, string][] {
  const rows = latencyRows(r).filter((x) => x.rep === 1);
  const out: [string, string][] = [];
  for (const size of [...new Set(rows.map((x) => x.size))]) {
    const at = sweepRowsOf(rows.filter((x) => x.size === size));
    out.push([`latency-wire-${size}.svg`, sweepSvg(at, 'wire', `Wire latency vs load, ${size} B class, ${r.options.probeRate} probes/s (x: background load reached)`)]);
    const res = at.filter((x) => x.residenceP50 !== null);
    if (res.length > 0) out.push([`latency-residence-${size}.svg`, sweepSvg(res, 'residence', `Translator residence vs load, ${size} B class`)]);
    // The distributions behind the figures (src/probe/plots.ts): a panel per case, a series per load step.
    for (const what of ['wire', 'residence'] as const) {
      const panels = r.results
        .filter((x) => x.rep === 1 && x.size === size)
        .map((x) => ({
          title: x.case,
          series: (x.latency?.steps ?? [])
            .filter((s) => (s.histograms?.[what] ?? null) !== null)
            .map((s) => distOfBuckets(`${s.percent} %, reached ${s.background.achievedPps}/s`, s.histograms![what]!, s[what]?.max)),
        }))
        .filter((p) => p.series.length > 0);
      if (panels.length === 0) continue;
      const f = latencyFigures(panels, {
        title: `${what === 'wire' ? 'Wire latency' : 'Translator residence'} per load step, ${size} B class`,
        quantity: what === 'wire' ? 'one-way wire latency' : 'residence time',
      });
      out.push([`latency-cdf-${what}-${size}.svg`, f.cdf], [`latency-ccdf-${what}-${size}.svg`, f.ccdf], [`latency-percentiles-${what}-${size}.svg`, f.percentiles]);
    }
  }
  return out;
}

/**
 * The latency steps' histograms as HdrHistogram interval logs, one per
 * frame size (`latency-SIZE.hlog`): a tag per case, step and quantity
 * (`uplink-50pct-wire`, `uplink-50pct-residence`), one interval of the
 * probe's length each. All repetitions: the tag ends in `-repN` past the first.
 */
export function latencyLogs(r: Rfc2544Result, startMs = Date.now()): [string, string][] {
  const out: [string, string][] = [];
  for (const size of [...new Set(r.results.filter((x) => x.latency !== undefined).map((x) => x.size))]) {
    const series: LogSeries[] = [];
    for (const x of r.results.filter((y) => y.size === size && y.latency !== undefined)) {
      for (const s of x.latency!.steps) {
        for (const what of ['wire', 'residence'] as const) {
          const b = s.histograms?.[what] ?? null;
          if (b === null || b.length === 0) continue;
          series.push({
            tag: `${x.case}-${s.percent}pct-${what}${x.rep > 1 ? `-rep${x.rep}` : ''}`,
            values: [],
            counted: { counts: b.map((k) => [Math.min(k.to, s[what]?.max ?? k.to), k.count] as [number, number]), seconds: x.latency!.probeSeconds },
          });
        }
      }
    }
    if (series.length > 0) {
      out.push([`latency-${size}.hlog`, hdrIntervalLog(series, { startMs, comment: `mup bench rfc2544: latency steps, ${size} B class; tag = case-load-quantity` })]);
    }
  }
  return out;
}

const COLORS: Record<CaseName, string> = {
  uplink: '#1f77b4',
  downlink: '#ff7f0e',
  bidir: '#2ca02c',
  'kernel-ipv4': '#d62728',
  'kernel-seg6': '#9467bd',
  'xdp-l3fwd': '#555555',
  'uplink-10k': '#17becf',
  'pe-downlink': '#bcbd22',
  'slow-dut': '#e377c2',
};

function esc(s: string): string {
  return s.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;');
}

/** Line plot: x = frame sizes (evenly spaced), y = metric, one line per case. */
export function svgPlot(r: Rfc2544Result, metric: 'mpps' | 'gbps'): string {
  const W = 760;
  const H = 420;
  const m = { l: 60, r: 250, t: 40, b: 50 };
  const ss = sizes(r);
  const cs = cases(r);
  const val = (x: CaseResult): number => (metric === 'mpps' ? x.fps / 1e6 : x.gbps);
  const maxV = Math.max(0.001, ...r.results.filter((x) => x.error === undefined).map(val));
  const step = niceStep(maxV);
  const top = Math.ceil(maxV / step) * step;
  const px = (i: number): number => m.l + (ss.length <= 1 ? (W - m.l - m.r) / 2 : (i * (W - m.l - m.r)) / (ss.length - 1));
  const py = (v: number): number => H - m.b - (v / top) * (H - m.t - m.b);
  const o: string[] = [];
  o.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`);
  o.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  o.push(`<text x="${m.l}" y="22" font-size="14">${metric === 'mpps' ? 'Zero-loss throughput, Mpps' : 'Zero-loss throughput, Gbit/s (DUT input frames)'} per RFC 2544 frame size</text>`);
  for (let v = 0; v <= top + 1e-9; v += step) {
    o.push(`<line x1="${m.l}" x2="${W - m.r}" y1="${py(v).toFixed(1)}" y2="${py(v).toFixed(1)}" stroke="#ddd"/>`);
    o.push(`<text x="${m.l - 6}" y="${(py(v) + 4).toFixed(1)}" text-anchor="end">${+v.toFixed(3)}</text>`);
  }
  ss.forEach((s, i) => o.push(`<text x="${px(i).toFixed(1)}" y="${H - m.b + 18}" text-anchor="middle">${s}</text>`));
  o.push(`<text x="${(m.l + W - m.r) / 2}" y="${H - 12}" text-anchor="middle">frame size (bytes, RFC 2544; inner packet = size − 18)</text>`);
  cs.forEach((c, k) => {
    const pts = ss
      .map((s, i) => ({ i, x: find(r, c, s) as CaseResult | undefined }))
      .filter((p): p is { i: number; x: CaseResult } => p.x !== undefined && p.x.error === undefined);
    if (pts.length > 0) {
      o.push(`<polyline fill="none" stroke="${COLORS[c]}" stroke-width="2" points="${pts.map((p) => `${px(p.i).toFixed(1)},${py(val(p.x)).toFixed(1)}`).join(' ')}"/>`);
      for (const p of pts) o.push(`<circle cx="${px(p.i).toFixed(1)}" cy="${py(val(p.x)).toFixed(1)}" r="3" fill="${COLORS[c]}"/>`);
    }
    const ly = m.t + 10 + k * 20;
    o.push(`<line x1="${W - m.r + 15}" x2="${W - m.r + 35}" y1="${ly}" y2="${ly}" stroke="${COLORS[c]}" stroke-width="2"/>`);
    o.push(`<text x="${W - m.r + 40}" y="${ly + 4}">${esc(c)}</text>`);
  });
  o.push('</svg>');
  return o.join('\n') + '\n';
}

function niceStep(max: number): number {
  const raw = max / 5;
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const f of [1, 2, 2.5, 5, 10]) if (f * p >= raw) return f * p;
  return 10 * p;
}
