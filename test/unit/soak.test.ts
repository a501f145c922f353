/**
 * The soak's conclusions (src/bench/soak-analysis.ts) from made-up records:
 * a soak that cannot report a loss proves nothing, so each comparison is
 * shown to detect one (a lost acknowledged change, a refused change come
 * back, lost and duplicated frames dated into their fault window, a growing
 * RSS) and to stay quiet when nothing is lost.
 */
import { describe, expect, it } from 'vitest';
import { analyzeStream, compareJournal, minLifeAuto, pathDrops, rssSummary, vethDelta, type JournalEntry, type Rule, type RssSample } from '../../src/bench/soak-analysis.js';

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
  /** 1 s samples of daemon lives [pid, first second, length in s]; kb(life index, second of that life). */
  const lives = (spec: readonly (readonly [number, number, number])[], kb: (l: number, t: number) => number): RssSample[] =>
    spec.flatMap(([pid, from, len], l) => Array.from({ length: len }, (_, t) => ({ tMs: (from + t) * 1000, pid, lifeMs: t * 1000, rssKb: kb(l, t) })));
  /** A V8 heap as the soak saw it: climbs for 50 s after a start, then saws (a GC every 7 s) over a fixed floor. */
  const heap = (t: number): number => 70_000 + Math.min(t, 50) * 900 + (t % 7) * 1500;
  const WARMUP = 60_000;
  const FOUR = [[1, 0, 300], [2, 301, 300], [3, 602, 300], [4, 903, 300]] as const;

  it('calls a garbage collector\'s sawtooth flat, in one long life and across four', () => {
    const one = rssSummary(lives([[1, 0, 300]], (_, t) => heap(t)), WARMUP);
    expect(one).toMatchObject({ verdict: 'flat', judged: 1, needed: 1, acrossVerdict: 'not judged' });
    const four = rssSummary(lives(FOUR, (_, t) => heap(t)), WARMUP);
    expect(four).toMatchObject({ verdict: 'flat', judged: 4, needed: 2, acrossVerdict: 'flat' });
    expect(four.lives.map((l) => l.verdict)).toEqual(['flat', 'flat', 'flat', 'flat']);
  });

  it('calls a heap that retains 3 MB/min growing within each life', () => {
    const r = rssSummary(lives(FOUR, (_, t) => heap(t) + t * 50), WARMUP);
    expect(r.verdict).toBe('growing');
    expect(r.lives.map((l) => l.verdict)).toEqual(['growing', 'growing', 'growing', 'growing']);
    expect(r.lives[0]!.floorGrowthKb).toBeGreaterThan(4096);
  });

  it('calls lives flat within but with warm floors that climb from life to life growing', () => {
    const r = rssSummary(lives(FOUR, (l, t) => heap(t) + l * 8000), WARMUP);
    expect(r.lives.map((l) => l.verdict)).toEqual(['flat', 'flat', 'flat', 'flat']);
    expect(r).toMatchObject({ verdict: 'growing', acrossVerdict: 'growing' });
    expect(r.acrossGrowthKb).toBeCloseTo(24_000, -2);
  });

  it('does not judge the climb after a start: a warm-up shorter than it calls the first minutes growing', () => {
    expect(rssSummary(lives([[1, 0, 300]], (_, t) => heap(t)), 10_000).verdict).toBe('growing');
  });

  it('calls a kill every 40 s inconclusive, never flat, and each such life too short', () => {
    const r = rssSummary(lives(Array.from({ length: 30 }, (_, i) => [i + 1, i * 41, 40] as const), (_, t) => heap(t)), WARMUP);
    expect(r).toMatchObject({ verdict: 'inconclusive', judged: 0 });
    expect(new Set(r.lives.map((l) => l.verdict))).toEqual(new Set(['too short']));
  });

  it('calls one judged life among restarted short ones inconclusive (a restarted run needs two)', () => {
    const r = rssSummary(lives([[1, 0, 40], [2, 41, 40], [3, 82, 300], [4, 383, 40]], (_, t) => heap(t)), WARMUP);
    expect(r).toMatchObject({ verdict: 'inconclusive', judged: 1, needed: 2 });
  });

  it('calls two judged lives that cover too little of the run inconclusive', () => {
    const short = Array.from({ length: 20 }, (_, i) => [i + 3, 602 + i * 41, 40] as const);
    const r = rssSummary(lives([[1, 0, 300], [2, 301, 300], ...short], (_, t) => heap(t)), WARMUP);
    expect(r.judged).toBe(2);
    expect(r.coverage).toBeLessThan(0.5);
    expect(r.verdict).toBe('inconclusive');
  });

  it('does not judge a life whose sampler was starved (too few samples over the warm phase)', () => {
    const sparse = lives([[1, 0, 300]], (_, t) => heap(t)).filter((_, i) => i % 3 === 0);
    expect(rssSummary(sparse, WARMUP)).toMatchObject({ verdict: 'inconclusive', judged: 0 });
  });

  it('spaces kills so that each life has a judged warm phase when the run holds two such lives, else leaves them in the schedule', () => {
    expect(minLifeAuto(20 * 60_000, WARMUP)).toBe(255_000);
    expect(minLifeAuto(510_000, WARMUP)).toBe(255_000);
    expect(minLifeAuto(509_000, WARMUP)).toBe(0);
    expect(minLifeAuto(60_000, WARMUP)).toBe(0);
  });
});

describe('soak kernel drops (veth counters)', () => {
  it('counts a counter that went down (the device was made again) from 0, and the others as differences', () => {
    expect(vethDelta({ rx_queue_drops: 5, tx_queue_xdp_xmit_errors: 7 }, { rx_queue_drops: 9, tx_queue_xdp_xmit_errors: 2 })).toEqual({ rx_queue_drops: 5, tx_queue_xdp_xmit_errors: 5 });
  });

  it('puts each veth counter on the direction whose frames it dropped', () => {
    const d = {
      da: { rx_queue_drops: 1, rx_queue_xdp_drops: 2, tx_queue_xdp_xmit_errors: 3 },
      db: { rx_queue_drops: 10, rx_queue_xdp_drops: 20, tx_queue_xdp_xmit_errors: 30 },
      ea: { rx_queue_drops: 100 },
      eb: { rx_queue_drops: 1000 },
    };
    expect(pathDrops('uplink', d)).toEqual({ ringIn: 1, xdpDrop: 2, redirectOut: 30, ringFar: 1000 });
    expect(pathDrops('downlink', d)).toEqual({ ringIn: 10, xdpDrop: 20, redirectOut: 3, ringFar: 100 });
  });
});
