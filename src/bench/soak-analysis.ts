/**
 * What `npm run soak` (soak.ts) concludes from what it recorded, apart from
 * the running so that test/unit/soak.test.ts can show it detects a loss:
 * frames lost, duplicated and reordered per direction (and in which fault
 * window each loss fell), acknowledged API changes lost or refused ones
 * back (a client-side journal against the daemon's final tables), and
 * whether the daemon's RSS is flat after warm-up.
 */

export const FAULTS = ['kill', 'disk', 'pins', 'iface', 'churn'] as const;
export type Fault = (typeof FAULTS)[number];

/** A time span (ms since the soak's start) during which a fault was in effect. */
export interface FaultWindow {
  readonly fault: Fault;
  readonly startMs: number;
  readonly endMs: number;
  /**
   * Frames lost here are inherent to the fault, not the translator's: the
   * interface they leave by does not exist (iface, between delete and
   * recreate). Reported, not counted against the target. A frame in an
   * excused window and another (within the grace) is excused.
   */
  readonly excused?: boolean;
}

/** What the sender of one direction printed (soak-frames.py send). */
export interface SendResult {
  readonly sent: number;
  /** Sends refused by the kernel (interface missing): no sequence number used. */
  readonly errors: number;
  /** [sequence number, CLOCK_MONOTONIC ns] every 100 ms. */
  readonly marks: readonly (readonly [number, number])[];
}

/** What the receiver of one direction printed (soak-frames.py recv). */
export interface RecvResult {
  readonly frames: number;
  /** Inclusive ranges of the sequence numbers seen. */
  readonly ranges: readonly (readonly [number, number])[];
  readonly duplicated: number;
  readonly reordered: number;
  /** Frames of the stream that arrived not translated (wrong ethertype). */
  readonly untranslated: number;
}

export interface LostRun {
  readonly from: number;
  readonly to: number;
  /** Estimated send time of the first, ms since the soak's start. */
  readonly atMs: number;
  /** Fault windows it fell in ('none' if none). */
  readonly faults: string;
}

export interface StreamReport {
  readonly sent: number;
  readonly received: number;
  readonly lost: number;
  /** Lost in excused windows (interface missing): part of `lost`. */
  readonly lostExcused: number;
  readonly duplicated: number;
  readonly reordered: number;
  readonly untranslated: number;
  readonly sendErrors: number;
  /** Sequence numbers received that were never sent (corruption). */
  readonly unknown: number;
  /** Lost frames per fault of the window they fell in ('none': outside every window). */
  readonly lostBy: Readonly<Record<string, number>>;
  readonly runs: readonly LostRun[];
}

/** Send time (ms since t0) of sequence number `seq`, interpolated between the sender's marks. */
export function seqTimeMs(marks: SendResult['marks'], seq: number, t0Ns: number): number {
  if (marks.length === 0) return 0;
  let lo = 0;
  let hi = marks.length - 1;
  if (seq <= marks[0]![0]) return (marks[0]![1] - t0Ns) / 1e6;
  if (seq >= marks[hi]![0]) return (marks[hi]![1] - t0Ns) / 1e6;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (marks[mid]![0] <= seq) lo = mid;
    else hi = mid;
  }
  const [s0, n0] = marks[lo]!;
  const [s1, n1] = marks[hi]!;
  const ns = s1 === s0 ? n0 : n0 + ((seq - s0) * (n1 - n0)) / (s1 - s0);
  return (ns - t0Ns) / 1e6;
}

/**
 * One direction's frames: lost = sent but never received; each lost frame
 * dated by its send time and put in the fault windows it fell in (a window
 * widened by `graceMs` on both sides: frames in flight, clocks sampled).
 */
export function analyzeStream(s: SendResult, r: RecvResult, windows: readonly FaultWindow[], t0Ns: number, graceMs = 300): StreamReport {
  let received = 0;
  let unknown = 0;
  const lostRanges: [number, number][] = [];
  let next = 0;
  for (const [a, b] of [...r.ranges].sort((x, y) => x[0] - y[0])) {
    const lo = Math.max(a, next);
    const hi = Math.min(b, s.sent - 1);
    if (a > next && next < s.sent) lostRanges.push([next, Math.min(a, s.sent) - 1]);
    if (hi >= lo) received += hi - lo + 1;
    if (b >= s.sent) unknown += b - Math.max(a, s.sent) + 1;
    next = Math.max(next, b + 1);
  }
  if (next < s.sent) lostRanges.push([next, s.sent - 1]);
  const lostBy: Record<string, number> = {};
  let lostExcused = 0;
  const runs: LostRun[] = [];
  for (const [a, b] of lostRanges) {
    const names = new Set<string>();
    for (let q = a; q <= b; q++) {
      const t = seqTimeMs(s.marks, q, t0Ns);
      const inside = windows.filter((w) => t >= w.startMs - graceMs && t <= w.endMs + graceMs);
      // Churn runs throughout: a loss is put on it only when no other fault was on.
      const other = inside.filter((w) => w.fault !== 'churn');
      const hit = other.length > 0 ? other : inside;
      const excused = hit.some((w) => w.excused === true);
      const key = hit.length === 0 ? 'none' : [...new Set(hit.map((w) => w.fault))].join('+') + (excused ? ' (excused)' : '');
      lostBy[key] = (lostBy[key] ?? 0) + 1;
      names.add(key);
      if (excused) lostExcused++;
    }
    runs.push({ from: a, to: b, atMs: Math.round(seqTimeMs(s.marks, a, t0Ns)), faults: [...names].join(', ') });
  }
  const lost = lostRanges.reduce((n, [a, b]) => n + b - a + 1, 0);
  return { sent: s.sent, received, lost, lostExcused, duplicated: r.duplicated, reordered: r.reordered, untranslated: r.untranslated, sendErrors: s.errors, unknown, lostBy, runs };
}

// --- the API journal -----------------------------------------------------------

export type RuleKind = 'policy' | 'localsid';
export type Rule = Readonly<Record<string, unknown>>;

/** One change the soak asked of the daemon, and how it was answered. */
export interface JournalEntry {
  readonly n: number;
  readonly kind: RuleKind;
  readonly op: 'add' | 'replace' | 'delete';
  /** `policy:<match>` or `localsid:<sid>`. */
  readonly key: string;
  /** The rule as sent (add, replace); for a delete, undefined. */
  readonly rule?: Rule;
  /** HTTP status; 0: no answer (connection lost: it may or may not have been applied). */
  readonly status: number;
  readonly atMs: number;
  /** Time to the answer, ms. */
  readonly tookMs?: number;
}

export interface Mismatch {
  readonly key: string;
  readonly expected: Rule | null;
  readonly found: Rule | null;
  /** The journal entry that set the expected value (undefined: the config's). */
  readonly entry?: JournalEntry;
}

export interface JournalReport {
  readonly acknowledged: number;
  readonly refused: number;
  readonly unanswered: number;
  /** Keys whose final value is not what the last acknowledged change (or the config) made it. */
  readonly lost: readonly Mismatch[];
  /** Keys whose final value is a refused change's. */
  readonly resurrected: readonly Mismatch[];
  /** Refusals by status ("507": 12). */
  readonly refusedBy: Readonly<Record<string, number>>;
}

/** Does `found` (a rule the daemon lists, with defaults and extra fields) carry every field of `want` (as sent)? */
export function sameRule(found: Rule | null, want: Rule | null): boolean {
  if (found === null || want === null) return found === want;
  return Object.entries(want).every(([k, v]) => JSON.stringify(found[k]) === JSON.stringify(v));
}

export const ok2xx = (status: number): boolean => status >= 200 && status < 300;

/**
 * The daemon's final tables against the journal: every key must hold what
 * its last acknowledged change (or the config, if none) made it, or the
 * value of a change sent after that which got no answer. A final value
 * equal to a refused change's is a refused change come back.
 */
export function compareJournal(initial: ReadonlyMap<string, Rule>, journal: readonly JournalEntry[], final: ReadonlyMap<string, Rule>): JournalReport {
  interface Want {
    value: Rule | null;
    entry?: JournalEntry;
    maybe: (Rule | null)[];
    refused: JournalEntry[];
  }
  const want = new Map<string, Want>();
  for (const [k, v] of initial) want.set(k, { value: v, maybe: [], refused: [] });
  let acknowledged = 0;
  let refused = 0;
  let unanswered = 0;
  const refusedBy: Record<string, number> = {};
  for (const e of journal) {
    const w = want.get(e.key) ?? { value: null, maybe: [], refused: [] };
    want.set(e.key, w);
    const value = e.op === 'delete' ? null : (e.rule ?? null);
    if (ok2xx(e.status)) {
      acknowledged++;
      w.value = value;
      w.entry = e;
      w.maybe = [];
      w.refused = [];
    } else if (e.status === 0) {
      unanswered++;
      w.maybe.push(value);
    } else {
      refused++;
      refusedBy[String(e.status)] = (refusedBy[String(e.status)] ?? 0) + 1;
      w.refused.push(e);
    }
  }
  const lost: Mismatch[] = [];
  const resurrected: Mismatch[] = [];
  for (const key of new Set([...want.keys(), ...final.keys()])) {
    const w = want.get(key) ?? { value: null, maybe: [], refused: [] };
    const found = final.get(key) ?? null;
    if (sameRule(found, w.value) || w.maybe.some((m) => sameRule(found, m))) continue;
    const m: Mismatch = { key, expected: w.value, found, ...(w.entry === undefined ? {} : { entry: w.entry }) };
    const back = w.refused.some((r) => sameRule(found, r.op === 'delete' ? null : (r.rule ?? null)));
    (back ? resurrected : lost).push(m);
  }
  return { acknowledged, refused, unanswered, lost, resurrected, refusedBy };
}

// --- RSS -------------------------------------------------------------------------

export interface RssSample {
  /** ms since the soak's start. */
  readonly tMs: number;
  readonly pid: number;
  /** ms since that daemon process started. */
  readonly lifeMs: number;
  readonly rssKb: number;
}

export interface RssLife {
  readonly pid: number;
  readonly samples: number;
  readonly minKb: number;
  readonly medianKb: number;
  readonly maxKb: number;
  /** Least-squares slope, KB per minute (reported; noisy under the GC's sawtooth). */
  readonly slopeKbPerMin: number;
  /** The floor (lowest sample) of the last third of the life minus that of the first third: what the verdict uses. */
  readonly floorGrowthKb: number;
  readonly verdict: 'flat' | 'growing' | 'too short';
}

export interface RssReport {
  readonly warmupMs: number;
  readonly minKb: number;
  readonly medianKb: number;
  readonly maxKb: number;
  readonly lives: readonly RssLife[];
  /** growing if any life long enough grows; too short if none is long enough. */
  readonly verdict: 'flat' | 'growing' | 'too short';
}

/** Samples after warm-up a life needs to be judged. */
export const RSS_MIN_SAMPLES = 12;
/** Floor growth that counts as growing: more than this many KB and this share of the life's median. */
export const RSS_GROWTH_KB = 4096;
export const RSS_GROWTH_SHARE = 0.05;

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n === 0 ? 0 : n % 2 === 1 ? s[(n - 1) / 2]! : (s[n / 2 - 1]! + s[n / 2]!) / 2;
};

/** Least-squares slope of y over x. */
export function slope(xs: readonly number[], ys: readonly number[]): number {
  const n = xs.length;
  if (n < 2) return 0;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    num += (xs[i]! - mx) * (ys[i]! - my);
    den += (xs[i]! - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

/**
 * RSS per daemon process (each restart starts a new one), samples after
 * `warmupMs` of its life only. A garbage-collected heap saws up and down;
 * a leak raises the floor it falls back to, so the verdict compares the
 * lowest sample of the last third of a life with that of the first third.
 */
export function rssSummary(samples: readonly RssSample[], warmupMs: number): RssReport {
  const warm = samples.filter((s) => s.lifeMs >= warmupMs);
  const lives: RssLife[] = [];
  for (const pid of new Set(warm.map((s) => s.pid))) {
    const ss = warm.filter((s) => s.pid === pid);
    const kb = ss.map((s) => s.rssKb);
    const third = Math.floor(kb.length / 3);
    const floorGrowthKb = third === 0 ? 0 : Math.min(...kb.slice(-third)) - Math.min(...kb.slice(0, third));
    const med = median(kb);
    const verdict = ss.length < RSS_MIN_SAMPLES ? 'too short' : floorGrowthKb > Math.max(RSS_GROWTH_KB, RSS_GROWTH_SHARE * med) ? 'growing' : 'flat';
    lives.push({ pid, samples: ss.length, minKb: Math.min(...kb), medianKb: med, maxKb: Math.max(...kb), slopeKbPerMin: slope(ss.map((s) => s.tMs), kb) * 60_000, floorGrowthKb, verdict });
  }
  const all = warm.map((s) => s.rssKb);
  const judged = lives.filter((l) => l.verdict !== 'too short');
  const verdict = judged.length === 0 ? 'too short' : judged.some((l) => l.verdict === 'growing') ? 'growing' : 'flat';
  return { warmupMs, minKb: all.length ? Math.min(...all) : 0, medianKb: median(all), maxKb: all.length ? Math.max(...all) : 0, lives, verdict };
}
