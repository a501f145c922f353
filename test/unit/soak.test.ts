/**
 * The soak's conclusions (src/bench/soak-analysis.ts) from made-up records:
 * a soak that cannot report a loss proves nothing, so each comparison is
 * shown to detect one (a lost acknowledged change, a refused change come
 * back, lost and duplicated frames dated into their fault window, a growing
 * RSS) and to stay quiet when nothing is lost.
 */
import { describe, expect, it } from 'vitest';
import { analyzeStream, compareJournal, rssSummary, type JournalEntry, type Rule, type RssSample } from '../../src/bench/soak-analysis.js';

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
    expect(r.lostBy).toEqual({ 'iface (excused)': 100, none: 50 });
  });

  it('counts sequence numbers never sent as unknown, not received', () => {
    const r = analyzeStream(send, { frames: 1001, ranges: [[0, 1000]], duplicated: 0, reordered: 0, untranslated: 0 }, [], 0);
    expect(r).toMatchObject({ received: 1000, lost: 0, unknown: 1 });
  });
});

describe('soak RSS', () => {
  const life = (pid: number, kb: (i: number) => number, n = 30): RssSample[] => Array.from({ length: n }, (_, i) => ({ tMs: i * 1000, pid, lifeMs: i * 1000, rssKb: kb(i) }));

  it('calls a sawtooth of the garbage collector flat and a rising floor growing', () => {
    const saw = (i: number): number => 70_000 + (i % 6) * 2000;
    expect(rssSummary(life(1, saw), 5000).verdict).toBe('flat');
    const leak = (i: number): number => saw(i) + i * 500;
    const r = rssSummary(life(2, leak), 5000);
    expect(r.verdict).toBe('growing');
    expect(r.lives[0]!.floorGrowthKb).toBeGreaterThan(4096);
  });

  it('does not judge a life shorter than warm-up plus its minimum of samples', () => {
    expect(rssSummary(life(3, () => 70_000, 10), 5000).verdict).toBe('too short');
  });
});
