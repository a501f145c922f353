/**
 * The soak's conclusions (src/bench/soak-analysis.ts) from made-up records:
 * a soak that cannot report a loss proves nothing, so each comparison is
 * shown to detect one (a lost acknowledged change, a refused change come
 * back, lost and duplicated frames dated into their fault window, a growing
 * RSS) and to stay quiet when nothing is lost.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { analyzeStream, compareJournal, minLifeAuto, parseGcLog, pathDrops, rssSummary, vethDelta, type GcTrough, type JournalEntry, type RssReport, type RssSample, type Rule } from '../../src/bench/soak-analysis.js';

const P = (sr: string): Rule => ({ name: 'churn-p1', match: '10.200.1.0/24', sr_prefix: sr, src_prefix: '2001:db8:ff::/64' });
const KEY = 'policy:10.200.1.0/24';
const MEASURED: Rule = { name: 'measured-up', match: '192.0.2.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' };
const MKEY = 'policy:192.0.2.0/24';
/** What the daemon lists: the rule with its defaults and extra fields. */
const listed = (r: Rule): Rule => ({ ...r, srh: 'auto', hop_limit: 64, origin: 'api', rule: 3 });
let n = 0;
const entry = (op: JournalEntry['op'], status: number, rule?: Rule, key = KEY): JournalEntry => ({ n: n++, kind: 'policy', op, key, ...(rule ? { rule } : {}), status, atMs: n });

describe('soak journal vs final tables', () => {
  const initial = new Map([[MKEY, MEASURED]]);
  const journal = [entry('add', 201, P('2001:db8:101::/48')), entry('replace', 200, P('2001:db8:301::/48')), entry('replace', 200, MEASURED, MKEY)];

  it('finds nothing when the final tables are what the acknowledged changes made', () => {
    const final = new Map([[MKEY, listed(MEASURED)], [KEY, listed(P('2001:db8:301::/48'))]]);
    const r = compareJournal(initial, journal, final);
    expect(r).toMatchObject({ acknowledged: 3, refused: 0, lost: [], resurrected: [] });
  });

  it('reports an acknowledged change that is not in the final tables (the journal has one entry more)', () => {
    const extra = [...journal, entry('add', 201, { ...P('2001:db8:102::/48'), name: 'churn-p2', match: '10.200.2.0/24' }, 'policy:10.200.2.0/24')];
    const final = new Map([[MKEY, listed(MEASURED)], [KEY, listed(P('2001:db8:301::/48'))]]);
    const r = compareJournal(initial, extra, final);
    expect(r.lost.map((m) => m.key)).toEqual(['policy:10.200.2.0/24']);
    expect(r.lost[0]!.found).toBeNull();
  });

  it('reports an older value where the last acknowledged replace should be', () => {
    const final = new Map([[MKEY, listed(MEASURED)], [KEY, listed(P('2001:db8:101::/48'))]]);
    expect(compareJournal(initial, journal, final).lost.map((m) => m.key)).toEqual([KEY]);
  });

  it('reports a refused change that came back, and a deleted rule that came back as lost', () => {
    const refused = [...journal, entry('replace', 507, P('2001:db8:999::/48'))];
    const back = compareJournal(initial, refused, new Map([[MKEY, listed(MEASURED)], [KEY, listed(P('2001:db8:999::/48'))]]));
    expect(back).toMatchObject({ refused: 1, refusedBy: { '507': 1 }, lost: [] });
    expect(back.resurrected.map((m) => m.key)).toEqual([KEY]);
    const deleted = [...journal, entry('delete', 200)];
    expect(compareJournal(initial, deleted, new Map([[MKEY, listed(MEASURED)], [KEY, listed(P('2001:db8:301::/48'))]])).lost.map((m) => m.key)).toEqual([KEY]);
  });

  it('accepts either outcome of a change that got no answer, and nothing else', () => {
    const unanswered = [...journal, entry('replace', 0, P('2001:db8:555::/48'))];
    for (const sr of ['2001:db8:301::/48', '2001:db8:555::/48']) {
      expect(compareJournal(initial, unanswered, new Map([[MKEY, listed(MEASURED)], [KEY, listed(P(sr))]])).lost).toEqual([]);
    }
    expect(compareJournal(initial, unanswered, new Map([[MKEY, listed(MEASURED)], [KEY, listed(P('2001:db8:101::/48'))]])).lost).toHaveLength(1);
  });

  it('reports a config rule missing at the end (no change to it at all)', () => {
    expect(compareJournal(initial, [], new Map()).lost.map((m) => m.key)).toEqual([MKEY]);
  });
});

describe('soak frames', () => {
  // 1000 frames over 1 s (marks every 100 ms), t0 = 0.
  const marks = Array.from({ length: 11 }, (_, i) => [i * 100, i * 100e6] as const);
  const send = { sent: 1000, errors: 0, marks };

  it('counts nothing lost when every sequence number arrived', () => {
    const r = analyzeStream(send, { frames: 1000, ranges: [[0, 999]], duplicated: 0, reordered: 0, untranslated: 0 }, [], 0);
    expect(r).toMatchObject({ sent: 1000, received: 1000, lost: 0, runs: [] });
  });

  it('counts a gap and a lost tail, dated into the fault windows they fell in', () => {
    const r = analyzeStream(send, { frames: 890, ranges: [[0, 499], [510, 899]], duplicated: 3, reordered: 2, untranslated: 0 }, [
      { fault: 'churn', startMs: 0, endMs: 1000 },
      { fault: 'kill', startMs: 480, endMs: 530 },
    ], 0, 10);
    expect(r).toMatchObject({ received: 890, lost: 110, duplicated: 3, reordered: 2 });
    expect(r.lostBy).toEqual({ kill: 10, churn: 100 });
    expect(r.runs.map((x) => [x.from, x.to])).toEqual([[500, 509], [900, 999]]);
    expect(r.runs[0]!.atMs).toBe(500);
  });

  it('excuses losses while the interface did not exist, and only those', () => {
    const r = analyzeStream(send, { frames: 900, ranges: [[0, 199], [300, 899], [950, 999]], duplicated: 0, reordered: 0, untranslated: 0 }, [
      { fault: 'iface', startMs: 200, endMs: 300, excused: true },
    ], 0, 0);
    expect(r).toMatchObject({ lost: 150, lostExcused: 100 });
    expect(r.lostBy).toEqual({ 'iface (no wire)': 100, none: 50 });
  });

  it('counts frames that arrived untranslated as lost and never excused, even just after the interface came back', () => {
    // The interface is missing 200..300 ms; frames 300..329 reach the far end untranslated
    // (the daemon not yet re-attached); 330..339 vanish after it is back.
    const r = analyzeStream(send, {
      frames: 860, ranges: [[0, 199], [340, 999]], duplicated: 0, reordered: 0, untranslated: 30, untranslatedRanges: [[300, 329]],
    }, [{ fault: 'iface', startMs: 200, endMs: 300, excused: true }, { fault: 'iface', startMs: 300, endMs: 400 }], 0, 300);
    expect(r).toMatchObject({ lost: 140, lostExcused: 100, lostUntranslated: 30 });
    expect(r.lostBy).toEqual({ 'iface (no wire)': 100, 'iface (untranslated)': 30, iface: 10 });
  });

  it('does not stretch an excused window past its end by the grace', () => {
    const r = analyzeStream(send, { frames: 850, ranges: [[0, 199], [350, 999]], duplicated: 0, reordered: 0, untranslated: 0 }, [
      { fault: 'iface', startMs: 200, endMs: 299.5, excused: true },
    ], 0, 300);
    expect(r).toMatchObject({ lost: 150, lostExcused: 100 });
    expect(r.lostBy).toEqual({ 'iface (no wire)': 100, none: 50 });
  });

  it('names the losses of a labelled window by its label (the daemon attached after the interface was up)', () => {
    const r = analyzeStream(send, {
      frames: 970, ranges: [[0, 299], [330, 999]], duplicated: 0, reordered: 0, untranslated: 30, untranslatedRanges: [[300, 329]],
    }, [{ fault: 'iface', startMs: 300, endMs: 330, label: 'iface before attach' }], 0, 0);
    expect(r.lostBy).toEqual({ 'iface before attach (untranslated)': 30 });
  });

  it('counts sequence numbers never sent as unknown, not received', () => {
    const r = analyzeStream(send, { frames: 1001, ranges: [[0, 1000]], duplicated: 0, reordered: 0, untranslated: 0 }, [], 0);
    expect(r).toMatchObject({ received: 1000, lost: 0, unknown: 1 });
  });
});

describe('soak RSS', () => {
  /**
   * Daemon lives [pid, first second, length in s] as the soak records them: 1 s RSS samples and the
   * troughs (RSS right after each major GC). A V8 heap as session 8's 20-minute soak saw it: a climb
   * of 10 MB over 50 s after a start, then a sawtooth of 35 MB over that floor whose GC comes every
   * `period` s (at second t of a life when (t + phase) % period is 0); `extra(l, t)` KB on top
   * (a leak: it raises the troughs too).
   */
  const WARMUP = 60_000;
  const base = (t: number): number => 70_000 + Math.min(t, 50) * 200;
  const record = (spec: readonly (readonly [number, number, number])[], extra: (l: number, t: number) => number = () => 0, period = 100, phase = 30): [RssSample[], GcTrough[]] => {
    const gc = (t: number): boolean => t > 0 && (t + phase) % period === 0;
    const samples = spec.flatMap(([pid, from, len], l) =>
      Array.from({ length: len }, (_, t) => ({ tMs: (from + t) * 1000, pid, lifeMs: t * 1000, rssKb: base(t) + ((t + phase) % period) * (35_000 / period) + extra(l, t) })));
    const troughs = spec.flatMap(([pid, from, len], l) => Array.from({ length: len }, (_, t) => t).filter(gc)
      .map((t) => ({ tMs: (from + t) * 1000, pid, lifeMs: t * 1000, rssKb: base(t) + extra(l, t), heapUsedKb: 15_000, externalKb: 10_000 + extra(l, t) })));
    return [samples, troughs];
  };
  const judge = (...a: Parameters<typeof record>): RssReport => {
    const [samples, troughs] = record(...a);
    return rssSummary(samples, WARMUP, troughs);
  };
  /** Session 8's 20-minute soak: a kill every 260 s, four lives with a warm phase of 199 s each. */
  const FOUR = [[1, 0, 260], [2, 261, 260], [3, 522, 260], [4, 783, 260]] as const;

  it('calls a sawtooth whose period (100 s) is longer than a third of the warm phase flat when its troughs are flat; the judge before session 9 called it growing', () => {
    // GCs at 70 and 170 s of each life: the last third of the warm phase (193-259 s) holds no trough, its lowest sample is 8.2 MB up the tooth.
    const r = judge(FOUR);
    expect(r.lives.map((l) => l.thirdsGrowthKb)).toEqual([8400, 8400, 8400, 8400]);
    expect(r.lives.map((l) => l.thirdsGrowthKb > 4096)).toEqual([true, true, true, true]);
    expect(r.lives.map((l) => [l.troughs, l.verdict])).toEqual([[2, 'flat'], [2, 'flat'], [2, 'flat'], [2, 'flat']]);
    expect(r).toMatchObject({ verdict: 'flat', judged: 4, needed: 2, pooledTroughs: 8, pooledVerdict: 'flat', acrossVerdict: 'flat' });
    expect(r.pooledGrowthKb).toBeCloseTo(0, 3);
  });

  it('judges a life with forced collections on those alone: V8\'s own, taken mid-tooth, neither judge nor dilute them', () => {
    // Forced every 30 s from 60 s: flat at the floor; V8's own major GCs (period 100 s) land 20 MB up, as an incremental GC that kept what died while it marked.
    const [samples, natural] = record(FOUR);
    const forced = FOUR.flatMap(([pid, from, len]) => Array.from({ length: Math.floor(len / 30) }, (_, i) => (i + 1) * 30)
      .map((t) => ({ tMs: (from + t) * 1000, pid, lifeMs: t * 1000, rssKb: base(t), heapUsedKb: 15_000, externalKb: 10_000, forced: true })));
    const high = natural.map((g) => ({ ...g, rssKb: g.rssKb + 20_000 * (g.lifeMs > 100_000 ? 1 : 0) }));
    const r = rssSummary(samples, WARMUP, [...high, ...forced]);
    expect(r.lives.map((l) => [l.troughs, l.forcedTroughs, l.verdict])).toEqual(Array(4).fill([7, 7, 'flat']));
    expect(r).toMatchObject({ verdict: 'flat', pooledTroughs: 28 });
    // The same natural troughs alone: growing.
    expect(rssSummary(samples, WARMUP, high).verdict).toBe('growing');
  });

  it('calls troughs that a leak raises by 20 MB over a 260 s life growing within each life', () => {
    const r = judge(FOUR, (_, t) => (t * 20_480) / 260);
    expect(r.verdict).toBe('growing');
    expect(r.lives.map((l) => l.verdict)).toEqual(['growing', 'growing', 'growing', 'growing']);
    expect(r.lives[0]!.troughRss!.riseKb).toBeCloseTo(7877, -1);
    expect(r.lives[0]!.troughExternal!.riseKb).toBeCloseTo(7877, -1);
    expect(r.pooledVerdict).toBe('growing');
  });

  it('calls a leak of 2 MB/min, under the threshold between one life\'s two troughs, growing pooled over four lives', () => {
    const r = judge(FOUR, (_, t) => t * 34);
    expect(r.lives.map((l) => l.verdict)).toEqual(['flat', 'flat', 'flat', 'flat']);
    expect(r).toMatchObject({ verdict: 'growing', pooledVerdict: 'growing' });
    expect(r.pooledGrowthKb).toBeCloseTo(34 * 199, -1);
  });

  it('calls lives flat within but with trough floors that climb from life to life growing', () => {
    const r = judge(FOUR, (l) => l * 8000);
    expect(r.lives.map((l) => l.verdict)).toEqual(['flat', 'flat', 'flat', 'flat']);
    expect(r).toMatchObject({ verdict: 'growing', acrossVerdict: 'growing', pooledVerdict: 'flat' });
    expect(r.acrossGrowthKb).toBeCloseTo(24_000, -2);
  });

  it('calls a flat sawtooth with one GC per warm phase (period 150 s) inconclusive, never flat, each life too short', () => {
    const r = judge(FOUR, () => 0, 150);
    expect(r.lives.map((l) => [l.troughs, l.verdict])).toEqual([[1, 'too short'], [1, 'too short'], [1, 'too short'], [1, 'too short']]);
    expect(r.lives[0]!.why).toContain('1 major GCs after warm-up');
    expect(r).toMatchObject({ verdict: 'inconclusive', judged: 0 });
  });

  it('calls a run without any GC record (no post-GC log) inconclusive, never flat', () => {
    const [samples] = record(FOUR);
    expect(rssSummary(samples, WARMUP, [])).toMatchObject({ verdict: 'inconclusive', judged: 0, pooledTroughs: 0 });
  });

  it('calls two judged lives with too few troughs for the pooled trend inconclusive', () => {
    // Two lives of 260 s (two troughs each) among lives of 40 s: 4 troughs in the pool, 6 needed.
    const short = Array.from({ length: 4 }, (_, i) => [i + 3, 522 + i * 41, 40] as const);
    const r = judge([[1, 0, 260], [2, 261, 260], ...short]);
    expect(r).toMatchObject({ judged: 2, pooledTroughs: 4, pooledVerdict: 'not judged', verdict: 'inconclusive' });
  });

  it('does not judge the GCs of the warm-up (the climb after a start)', () => {
    // GCs every 30 s from 20 s of life: 20 and 50 s fall on the climb; with the 60 s warm-up they are left out, with none they are judged.
    const [samples, troughs] = record([[1, 0, 300]], () => 0, 30, 10);
    expect(rssSummary(samples, WARMUP, troughs).lives[0]!.troughs).toBe(8);
    expect(rssSummary(samples, 0, troughs).lives[0]!.troughs).toBe(10);
    expect(rssSummary(samples, 0, troughs).lives[0]!.troughFloorKb).toBe(74_000);
  });

  it('calls a kill every 40 s inconclusive, never flat, and each such life too short', () => {
    const r = judge(Array.from({ length: 30 }, (_, i) => [i + 1, i * 41, 40] as const), () => 0, 20);
    expect(r).toMatchObject({ verdict: 'inconclusive', judged: 0 });
    expect(new Set(r.lives.map((l) => l.verdict))).toEqual(new Set(['too short']));
  });

  it('calls one judged life among restarted short ones inconclusive (a restarted run needs two)', () => {
    const r = judge([[1, 0, 40], [2, 41, 40], [3, 82, 600], [4, 683, 40]]);
    expect(r).toMatchObject({ verdict: 'inconclusive', judged: 1, needed: 2 });
  });

  it('calls two judged lives that cover too little of the run inconclusive', () => {
    const short = Array.from({ length: 30 }, (_, i) => [i + 3, 1202 + i * 41, 40] as const);
    const r = judge([[1, 0, 600], [2, 601, 600], ...short]);
    expect(r.judged).toBe(2);
    expect(r.coverage).toBeLessThan(0.5);
    expect(r.verdict).toBe('inconclusive');
  });

  it('does not judge a life whose sampler was starved (too few samples over the warm phase)', () => {
    const [samples, troughs] = record([[1, 0, 600]]);
    expect(rssSummary(samples.filter((_, i) => i % 3 === 0), WARMUP, troughs)).toMatchObject({ verdict: 'inconclusive', judged: 0 });
  });

  it('reads the preload\'s post-GC log onto the soak\'s clock, skipping a torn line', () => {
    const line = (pid: number, wallMs: number): string => JSON.stringify({ pid, lifeMs: wallMs - 5000, wallMs, gcMs: 3, forced: false, rss: 90 * 1048576, heapTotal: 20 * 1048576, heapUsed: 15 * 1048576, external: 10 * 1048576, arrayBuffers: 0 });
    const g = parseGcLog(`${line(7, 11_000)}\n${line(7, 12_500)}\n{"pid":7,"lifeMs":9`, 1000);
    expect(g).toEqual([
      { tMs: 10_000, pid: 7, lifeMs: 6000, rssKb: 92_160, heapUsedKb: 15_360, externalKb: 10_240, heapTotalKb: 20_480 },
      { tMs: 11_500, pid: 7, lifeMs: 7500, rssKb: 92_160, heapUsedKb: 15_360, externalKb: 10_240, heapTotalKb: 20_480 },
    ]);
  });

  it('says which memory the troughs gained: a young generation grown by 30 MB shows in heapTotal, not in native memory', () => {
    // Session 10's soak before the daemon's young generation was fixed: RSS and heapTotal step up together, heapUsed flat.
    const step = (t: number): number => (t >= 150 ? 30_720 : 0);
    const [samples, troughs] = record(FOUR, (_, t) => step(t));
    const withTotal = troughs.map((g) => ({ ...g, externalKb: 10_000, heapTotalKb: 20_000 + step(g.lifeMs / 1000) }));
    const l = rssSummary(samples, WARMUP, withTotal).lives[0]!;
    expect(l.troughHeapTotal!.riseKb).toBeCloseTo(l.troughRss!.riseKb, 0);
    expect(l.troughRss!.riseKb).toBeGreaterThan(20_000);
    expect(Math.abs(l.troughNative!.riseKb)).toBeLessThan(1);
    // An older log without heapTotal: no such trends, the rest as before.
    expect(rssSummary(samples, WARMUP, troughs).lives[0]!.troughHeapTotal).toBeUndefined();
  });

  /** The troughs of `record` as soak-preload.mjs writes them, with the new space at `newKb(lifeS)` KB and RSS raised by it. */
  const withSpaces = (troughs: ReturnType<typeof record>[1], newKb: (lifeS: number) => number): string =>
    troughs
      .map((g) =>
        JSON.stringify({
          pid: g.pid, lifeMs: g.lifeMs, wallMs: g.tMs + 1000, forced: true, rss: (g.rssKb + newKb(g.lifeMs / 1000)) * 1024, heapTotal: (15_000 + newKb(g.lifeMs / 1000)) * 1024,
          heapUsed: g.heapUsedKb * 1024, external: g.externalKb * 1024, arrayBuffers: 0, newSpaceKb: newKb(g.lifeMs / 1000), oldSpaceKb: 15_000,
        }),
      )
      .join('\n');

  it('judges a trough on its RSS less the new space: a young generation V8 grew from 2 to 8 MB is not growth, and the raw RSS trend is listed beside', () => {
    const [samples, troughs] = record(FOUR);
    const parsed = parseGcLog(withSpaces(troughs, (t) => (t >= 150 ? 8192 : 2048)), 1000);
    expect(parsed[0]).toMatchObject({ newSpaceKb: 2048, oldSpaceKb: 15_000 });
    const r = rssSummary(samples, WARMUP, parsed);
    const l = r.lives[0]!;
    expect(l.troughRssRaw!.riseKb).toBeGreaterThan(4096); // growing, judged on RSS alone
    expect(l.troughNewSpace!.riseKb).toBeCloseTo(l.troughRssRaw!.riseKb, 0);
    expect(Math.abs(l.troughRss!.riseKb)).toBeLessThan(1);
    expect(Math.abs(l.troughOldSpace!.riseKb)).toBeLessThan(1);
    expect(l.newSpaceKb).toEqual({ first: 2048, last: 8192 });
    expect(r.verdict).toBe('flat');
  });

  it('still calls a leak growing when the new space is logged and stays the same', () => {
    const [samples, troughs] = record(FOUR, (_, t) => t * 40); // 40 KB a second: 7 MB over a judged phase
    const r = rssSummary(samples, WARMUP, parseGcLog(withSpaces(troughs, () => 8192), 1000));
    expect(r.verdict).toBe('growing');
    expect(r.lives.every((l) => l.troughRss!.riseKb === l.troughRssRaw!.riseKb)).toBe(true);
  });

  it('spaces kills so that each life has a judged warm phase when the run holds two such lives, else leaves them in the schedule', () => {
    expect(minLifeAuto(20 * 60_000, WARMUP)).toBe(255_000);
    expect(minLifeAuto(510_000, WARMUP)).toBe(255_000);
    expect(minLifeAuto(509_000, WARMUP)).toBe(0);
    expect(minLifeAuto(60_000, WARMUP)).toBe(0);
  });
});

describe('soak RSS on a real process (soak-preload.mjs)', () => {
  /**
   * A node process with the soak's preload and a workload that keeps a bounded set of objects and
   * replaces it all the time (a major GC every half second or so): once with the preload's test leak
   * (2 MB/s, kept resident), once without. Its real post-GC log and 1 s VmRSS go through rssSummary,
   * with limits scaled to a 20 s life: the leak must be called growing; the control must not grow by
   * anything like it.
   */
  const WORK = [
    'const ring = new Array(20000); let i = 0;',
    "setInterval(() => { for (let k = 0; k < 2000; k++) ring[i++ % ring.length] = { s: String(i).padEnd(120, '.'), n: [i, k] }; }, 10);",
    'setTimeout(() => process.exit(0), 20000);',
  ].join('\n');
  const PRELOAD = new URL('../../src/bench/soak-preload.mjs', import.meta.url).href;
  const LIMITS = { minWarmMs: 10_000, minTroughSpanMs: 5000, minTroughs: 6 };

  const run = async (dir: string, name: string, leakKbPerMin: number, work = WORK, gcEveryMs = 0, mallocTrim = false): Promise<RssReport> =>
    rssSummary(...(await runLog(dir, name, leakKbPerMin, work, gcEveryMs, mallocTrim)), LIMITS);

  /** The process's 1 s VmRSS samples, the soak's warm-up (3 s) and its post-GC log. */
  const runLog = async (dir: string, name: string, leakKbPerMin: number, work: string, gcEveryMs: number, mallocTrim: boolean): Promise<[RssSample[], number, GcTrough[]]> => {
    const gclog = join(dir, `${name}.jsonl`);
    const t0 = Date.now();
    const p = spawn(process.execPath, ['--max-semi-space-size=1', '--import', PRELOAD, '-e', work], {
      stdio: 'ignore', env: { ...process.env, MUP_SOAK_GCLOG: gclog, MUP_SOAK_LEAK_KB_PER_MIN: String(leakKbPerMin), MUP_SOAK_GC_EVERY_MS: String(gcEveryMs), MUP_SOAK_MALLOC_TRIM: mallocTrim ? '1' : '' },
    });
    const samples: RssSample[] = [];
    const timer = setInterval(() => {
      try {
        const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${p.pid}/status`, 'utf8'))?.[1]);
        if (Number.isFinite(kb)) samples.push({ tMs: Date.now() - t0, pid: p.pid!, lifeMs: Date.now() - t0, rssKb: kb });
      } catch {
        // exited
      }
    }, 1000);
    try {
      const code = await new Promise<number | null>((res) => p.once('exit', (c) => res(c)));
      expect(code).toBe(0);
    } finally {
      clearInterval(timer);
      if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    }
    // No file: the process had no major GC at all.
    return [samples, 3000, parseGcLog(existsSync(gclog) ? readFileSync(gclog, 'utf8') : '', t0)];
  };

  // The two cases side by side (it.concurrent): each waits 20 s of real time for its processes' lives,
  // and one after the other they were 40 s of a make test that must stay under 15 minutes on this host.
  it.concurrent('calls a process that keeps 2 MB a second growing, and one that does not, not so', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mup-soak-rss-'));
    try {
      const [leak, control] = await Promise.all([run(dir, 'leak', 120 * 1024), run(dir, 'control', 0)]);
      const [l] = leak.lives;
      const [c] = control.lives;
      expect(l!.troughs).toBeGreaterThanOrEqual(6);
      expect(leak.verdict).toBe('growing');
      // 2 MB/s kept: external (the Buffers) rises by that rate, and RSS after each GC with it.
      expect(l!.troughExternal!.kbPerMin / 1024).toBeGreaterThan(100);
      expect(l!.troughExternal!.kbPerMin / 1024).toBeLessThan(140);
      expect(l!.troughRss!.kbPerMin / 1024).toBeGreaterThan(60);
      expect(c!.troughs).toBeGreaterThanOrEqual(6);
      expect(Math.abs(c!.troughExternal!.riseKb)).toBeLessThan(1024);
      expect(c!.troughRss!.riseKb).toBeLessThan(l!.troughRss!.riseKb / 2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  /**
   * A process whose garbage dies young and whose old generation stays small, so that V8 alone would
   * not collect it in full once in 20 s (the daemon with its 8 MB young generation: one major GC in a
   * four-minute life). With `--gc-every` (MUP_SOAK_GC_EVERY_MS) the preload collects it every second:
   * the judge then has troughs, only forced ones, and calls the leak growing and the control not.
   */
  const QUIET = [
    'let keep = [];',
    "setInterval(() => { keep = []; for (let k = 0; k < 200; k++) keep.push({ s: String(k).padEnd(64, '.') }); }, 10);",
    'setTimeout(() => process.exit(0), 20000);',
  ].join('\n');

  it.concurrent('judges a process V8 rarely collects on the collections the soak forces, and tells the leak from the control', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mup-soak-gc-'));
    try {
      const [leak, control, alone] = await Promise.all([
        run(dir, 'leak', 120 * 1024, QUIET, 1000, true), run(dir, 'control', 0, QUIET, 1000, true), run(dir, 'alone', 0, QUIET, 0),
      ]);
      const [l] = leak.lives;
      const [c] = control.lives;
      // Without forcing, too few major GCs for a verdict: the case this option exists for.
      expect(alone.lives[0]!.forcedTroughs).toBe(0);
      expect(alone.verdict).toBe('inconclusive');
      expect(l!.forcedTroughs).toBeGreaterThanOrEqual(10);
      expect(l!.troughs).toBe(l!.forcedTroughs);
      // malloc_trim after each forced collection (on in both) does not hide a leak: what is kept is in use, as malloc counts it.
      expect(leak.verdict).toBe('growing');
      expect(l!.troughExternal!.kbPerMin / 1024).toBeGreaterThan(100);
      expect(l!.troughExternal!.kbPerMin / 1024).toBeLessThan(140);
      expect(l!.troughMallocInUse!.kbPerMin / 1024).toBeGreaterThan(100);
      expect(l!.troughUntrimmed?.n).toBe(l!.troughs);
      expect(c!.forcedTroughs).toBeGreaterThanOrEqual(10);
      expect(control.verdict).toBe('flat');
      // The log splits RSS: its file-backed part (node's pages) is read at every trough.
      expect(c!.troughFile?.n).toBe(c!.troughs);
      expect(Math.abs(c!.troughExternal!.riseKb)).toBeLessThan(1024);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe('soak RSS: malloc_trim after the forced collections (soak-preload.mjs, --malloc-trim)', () => {
  /**
   * 160 MB of 8 KB Buffers (malloc'd), one in 64 kept, the rest dropped after 2 s: the free chunks lie between
   * kept ones, so malloc cannot give them back from the top of its heap and keeps them. Without the trim every
   * later trough still carries them (and mallinfo2 calls them free); with it they go back to the kernel.
   */
  const FRAG = [
    'let all = []; const kept = [];',
    'for (let i = 0; i < 20000; i++) { const b = Buffer.alloc(8192, 1); all.push(b); if (i % 64 === 0) kept.push(b); }',
    'setTimeout(() => { all = null; }, 2000);',
    'setInterval(() => kept.length, 1000);',
    'setTimeout(() => process.exit(0), 9000);',
  ].join('\n');
  const PRELOAD = new URL('../../src/bench/soak-preload.mjs', import.meta.url).href;
  const troughs = async (dir: string, name: string, mallocTrim: boolean): Promise<GcTrough[]> => {
    const gclog = join(dir, `${name}.jsonl`);
    const p = spawn(process.execPath, ['--import', PRELOAD, '-e', FRAG], {
      stdio: 'ignore', env: { ...process.env, MUP_SOAK_GCLOG: gclog, MUP_SOAK_GC_EVERY_MS: '1000', MUP_SOAK_MALLOC_TRIM: mallocTrim ? '1' : '' },
    });
    try {
      expect(await new Promise<number | null>((res) => p.once('exit', (c) => res(c)))).toBe(0);
    } finally {
      if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    }
    return parseGcLog(readFileSync(gclog, 'utf8'), 0).filter((g) => g.forced === true);
  };

  it('gives the free memory malloc keeps back before the trough is read, and logs the reading before the trim', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mup-soak-trim-'));
    try {
      const [trimmed, kept] = await Promise.all([troughs(dir, 'trim', true), troughs(dir, 'keep', false)]);
      const MB = 1024;
      // Without the trim: the last troughs still hold the dropped 157 MB, which malloc counts as free.
      const last = kept.at(-1)!;
      expect(last.rssUntrimmedKb).toBeUndefined();
      expect(last.mallocFreeKb!).toBeGreaterThan(100 * MB);
      expect(last.rssKb).toBeGreaterThan(last.mallocInUseKb! + 100 * MB);
      // With it: the troughs read before their trims carried them (one or, as the Buffers are freed, a few), the last does not.
      expect(trimmed.every((g) => g.rssUntrimmedKb !== undefined)).toBe(true);
      expect(trimmed.reduce((a, g) => a + Math.max(0, g.rssUntrimmedKb! - g.rssKb), 0)).toBeGreaterThan(100 * MB);
      expect(trimmed.at(-1)!.rssKb).toBeLessThan(last.rssKb - 100 * MB);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe('soak kernel drops (veth counters)', () => {
  it('counts a counter that went down (the device was made again) from 0, and the others as differences', () => {
    expect(vethDelta({ rx_queue_drops: 5, tx_queue_xdp_xmit_errors: 7 }, { rx_queue_drops: 9, tx_queue_xdp_xmit_errors: 2 })).toEqual({ rx_queue_drops: 5, tx_queue_xdp_xmit_errors: 5 });
  });

  it('puts each veth counter on the direction whose frames it dropped', () => {
    const d = {
      da: { rx_queue_drops: 1, rx_queue_xdp_drops: 2, tx_queue_xdp_xmit_errors: 3, tx_dropped: 4 },
      db: { rx_queue_drops: 10, rx_queue_xdp_drops: 20, tx_queue_xdp_xmit_errors: 30, tx_dropped: 40 },
      ea: { rx_queue_drops: 100, tx_dropped: 400 },
      eb: { rx_queue_drops: 1000, tx_dropped: 4000 },
    };
    expect(pathDrops('uplink', d)).toEqual({ ringIn: 400, redirectFailed: 1, xdpDrop: 2, redirectOut: 40, farEnd: 1000 });
    expect(pathDrops('downlink', d)).toEqual({ ringIn: 4000, redirectFailed: 10, xdpDrop: 20, redirectOut: 4, farEnd: 100 });
  });

  it('does not call a failed redirect a full ring (rx_queue_N_drops of the ingress veth counts xdp_do_redirect failures)', () => {
    // The iface fault: db's program redirecting to the deleted da (xdp_do_redirect -EINVAL), nothing sent into a full ring.
    const p = pathDrops('downlink', { db: { rx_queue_drops: 46 }, eb: { tx_dropped: 0 } });
    expect(p.ringIn).toBe(0);
    expect(p.redirectFailed).toBe(46);
  });
});
