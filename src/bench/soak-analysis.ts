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
   * Frames lost here are inherent to the fault, not the translator's: they
   * had no wire (iface: from the delete until both ends of the recreated
   * veth are up again; a frame cannot cross an interface that does not
   * exist or is down, whatever the daemon does). Reported on a line of
   * their own ("no wire", with the window's length), not counted against
   * the target. A frame in an excused window and another (within the
   * grace) is excused.
   */
  readonly excused?: boolean;
  /** Name for the losses in this window instead of the fault's ('iface before attach'). */
  readonly label?: string;
}

/** What the sender of one direction printed (soak-frames.py send). */
export interface SendResult {
  readonly sent: number;
  /** Sends refused by the kernel (interface missing): no sequence number used. */
  readonly errors: number;
  /** [sequence number, CLOCK_MONOTONIC ns] every 20 ms, at the first send after failed ones, and (third element 1) every frame as it is sent while the soak asks for it (around a recreation). */
  readonly marks: readonly (readonly [number, number, 1?])[];
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
  /**
   * Inclusive ranges of the sequence numbers that arrived untranslated. Such
   * a frame had a wire (it crossed the translator's interface) and the
   * receiver never got it translated: lost, and never excused.
   */
  readonly untranslatedRanges?: readonly (readonly [number, number])[];
  /** Frames the kernel dropped because the receiver's socket buffer was full (it fell behind): lost, but not by the translator. */
  readonly socketDrops?: number;
  /** [frames dropped, CLOCK_MONOTONIC ns] as the receiver saw the drop count move. */
  readonly socketDropMarks?: readonly (readonly [number, number])[];
}

/**
 * Where the kernel dropped frames of one direction, from the veths' own
 * counters. What each veth counter counts (drivers/net/veth.c): a frame
 * sent into a veth whose peer's ring is full (or whose peer is down or gone)
 * is dropped by the SENDING device and counted in its tx dropped, not in
 * any per-queue counter of the receiving one; the receiving veth's
 * `rx_queue_N_drops` counts frames its XDP program redirected or sent back
 * when that failed (xdp_do_redirect: the target interface gone or down;
 * XDP_TX), and copies that could not be allocated; `tx_queue_N_xdp_xmit_errors`
 * counts frames redirected out of a veth that its peer's ring refused.
 * (Before session 10 the soak printed `rx_queue_N_drops` as "ring full";
 * in the iface fault they were redirects to the deleted interface.)
 */
export interface PathDrops {
  /** Not taken into the translator's interface: the veth ring in front of its program full, or the interface down or gone (the sending veth's tx dropped). */
  readonly ringIn: number;
  /** The translator's redirect failed in the kernel (xdp_do_redirect: the target gone or down), or XDP_TX did (rx_queue_N_drops of its ingress). */
  readonly redirectFailed: number;
  /** XDP_DROP by the translator's program (its own counters say why). */
  readonly xdpDrop: number;
  /** Redirected out of the translator's egress veth but not taken by its peer: ring full, or the peer not up (the egress veth's tx dropped). */
  readonly redirectOut: number;
  /** Dropped by the far end's veth on arrival (its rx_queue_N_drops: its XDP_PASS program's frame could not be copied). */
  readonly farEnd: number;
}

/** Counters of one veth (ethtool -S, per-queue fields summed: rx_queue_drops, rx_queue_xdp_drops, tx_queue_xdp_xmit_errors, ...; and tx_dropped from the device's stats). */
export type VethStats = Readonly<Record<string, number>>;

/** a minus b per field; a counter that went down (the device was made again) counts from 0. */
export function vethDelta(a: VethStats, b: VethStats): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(a)) out[k] = v >= (b[k] ?? 0) ? v - (b[k] ?? 0) : v;
  return out;
}

/**
 * One direction's kernel drops from deltas of the four veths (ea -- da
 * [translator] db -- eb): uplink is sent by ea, enters at da and leaves by
 * db to eb; downlink is sent by eb, enters at db and leaves by da to ea.
 */
export function pathDrops(dir: 'uplink' | 'downlink', d: Readonly<Record<string, Readonly<Record<string, number>>>>): PathDrops {
  const [sendDev, inDev, outDev, farDev] = dir === 'uplink' ? ['ea', 'da', 'db', 'eb'] : ['eb', 'db', 'da', 'ea'];
  const f = (dev: string, k: string): number => d[dev]?.[k] ?? 0;
  return {
    ringIn: f(sendDev, 'tx_dropped'),
    redirectFailed: f(inDev, 'rx_queue_drops'),
    xdpDrop: f(inDev, 'rx_queue_xdp_drops'),
    redirectOut: f(outDev, 'tx_dropped'),
    farEnd: f(farDev, 'rx_queue_drops'),
  };
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
  /** Lost in excused windows (no wire: interface missing or not yet up at both ends): part of `lost`. */
  readonly lostExcused: number;
  /** Lost frames that arrived untranslated (never excused): part of `lost`. */
  readonly lostUntranslated: number;
  /** Lengths (frames) of the runs of consecutive sequence numbers that arrived untranslated. */
  readonly untranslatedRuns: readonly number[];
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
 * One direction's frames: lost = sent but never received translated; each
 * lost frame dated by its send time and put in the fault windows it fell in
 * (a window widened by `graceMs` on both sides: frames in flight, clocks
 * sampled; an excused window only before its start: it ends when the
 * interface is back, and a frame sent after that had a wire). A lost frame
 * that arrived untranslated is never excused: it crossed the interface, so
 * the interface existed, and the translator let it through as it was.
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
  let lostUntranslated = 0;
  const runs: LostRun[] = [];
  const utr = [...(r.untranslatedRanges ?? [])].sort((x, y) => x[0] - y[0]);
  let ui = 0;
  for (const [a, b] of lostRanges) {
    const names = new Set<string>();
    for (let q = a; q <= b; q++) {
      const t = seqTimeMs(s.marks, q, t0Ns);
      while (ui < utr.length && utr[ui]![1] < q) ui++;
      const untranslated = ui < utr.length && utr[ui]![0] <= q;
      const inside = windows.filter((w) => t >= w.startMs - graceMs && t <= w.endMs + (w.excused === true ? 0 : graceMs));
      // Churn runs throughout: a loss is put on it only when no other fault was on.
      const other = inside.filter((w) => w.fault !== 'churn');
      const hit = other.length > 0 ? other : inside;
      const excused = !untranslated && hit.some((w) => w.excused === true);
      const key = (hit.length === 0 ? 'none' : [...new Set(hit.map((w) => w.label ?? w.fault))].join('+')) + (excused ? ' (no wire)' : untranslated ? ' (untranslated)' : '');
      lostBy[key] = (lostBy[key] ?? 0) + 1;
      names.add(key);
      if (excused) lostExcused++;
      if (untranslated) lostUntranslated++;
    }
    runs.push({ from: a, to: b, atMs: Math.round(seqTimeMs(s.marks, a, t0Ns)), faults: [...names].join(', ') });
  }
  const lost = lostRanges.reduce((n, [a, b]) => n + b - a + 1, 0);
  return { sent: s.sent, received, lost, lostExcused, lostUntranslated, untranslatedRuns: utr.map(([a, b]) => b - a + 1), duplicated: r.duplicated, reordered: r.reordered, untranslated: r.untranslated, sendErrors: s.errors, unknown, lostBy, runs };
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

/**
 * The memory of a daemon process right after one of its major garbage
 * collections (soak-preload.mjs, PerformanceObserver 'gc', kind major):
 * a trough of the collector's sawtooth, the floor the process returns to.
 */
export interface GcTrough {
  /** ms since the soak's start. */
  readonly tMs: number;
  readonly pid: number;
  /** ms since that daemon process started. */
  readonly lifeMs: number;
  readonly rssKb: number;
  readonly heapUsedKb: number;
  /** external (which includes arrayBuffers: Buffers). */
  readonly externalKb: number;
  /** V8's heap as committed (new, old, code and large-object spaces): what a growing young generation or old space shows in (absent in older logs). */
  readonly heapTotalKb?: number;
  /** VmRSS's file-backed part (RssFile, /proc/self/status): node's and the libraries' pages paged in (absent in older logs). */
  readonly rssFileKb?: number;
  /** heapTotal's new space (the young generation, two semi-spaces) and old space as committed (absent in older logs). */
  readonly newSpaceKb?: number;
  readonly oldSpaceKb?: number;
  /** A collection the soak asked for (soak-preload.mjs, `--gc-every`), not one V8 chose. */
  readonly forced?: boolean;
  /** With `--malloc-trim`: VmRSS after the forced collection and before malloc_trim(0); rssKb is after it. */
  readonly rssUntrimmedKb?: number;
  /** glibc's mallinfo2 at the trough: bytes malloc has handed out (in use), and free bytes its arenas keep. */
  readonly mallocInUseKb?: number;
  readonly mallocFreeKb?: number;
}

/**
 * soak-preload.mjs's JSON lines (pid, lifeMs, wallMs, rss, heapUsed,
 * external in bytes) as troughs on the soak's clock (`wallAtZero`: Date.now()
 * at the soak's time 0). A line that does not parse (torn by a kill) is skipped.
 */
export function parseGcLog(text: string, wallAtZero: number): GcTrough[] {
  const out: GcTrough[] = [];
  for (const l of text.split('\n')) {
    if (!l.startsWith('{')) continue;
    try {
      const o = JSON.parse(l) as Record<string, unknown>;
      const n = (k: string): number => (typeof o[k] === 'number' ? (o[k] as number) : NaN);
      const t: GcTrough = {
        tMs: Math.round(n('wallMs') - wallAtZero), pid: n('pid'), lifeMs: n('lifeMs'),
        rssKb: Math.round(n('rss') / 1024), heapUsedKb: Math.round(n('heapUsed') / 1024), externalKb: Math.round(n('external') / 1024),
      };
      if (Object.values(t).every(Number.isFinite)) {
        const kbIf = (k: 'rssFileKb' | 'rssUntrimmedKb' | 'mallocInUseKb' | 'mallocFreeKb' | 'newSpaceKb' | 'oldSpaceKb'): Partial<GcTrough> => (Number.isFinite(n(k)) ? { [k]: n(k) } : {});
        out.push({
          ...t, ...(Number.isFinite(n('heapTotal')) ? { heapTotalKb: Math.round(n('heapTotal') / 1024) } : {}), ...kbIf('rssFileKb'), ...(o.forced === true ? { forced: true } : {}),
          ...kbIf('rssUntrimmedKb'), ...kbIf('mallocInUseKb'), ...kbIf('mallocFreeKb'), ...kbIf('newSpaceKb'), ...kbIf('oldSpaceKb'),
        });
      }
    } catch {
      // torn line
    }
  }
  return out;
}

/** A life too short to judge is reported as such, never as flat. */
export type LifeVerdict = 'flat' | 'growing' | 'too short';
/** A run whose judged lives or troughs are too few is inconclusive, never flat. */
export type RunVerdict = 'flat' | 'growing' | 'inconclusive';

/** A least-squares line through points (x ms, y KB): its slope per minute and its rise from the first point to the last. */
export interface Trend {
  readonly n: number;
  readonly kbPerMin: number;
  /** Fitted rise over the points' own span, KB. */
  readonly riseKb: number;
}

export interface RssLife {
  readonly pid: number;
  /** First and last sample of this process, ms since the soak's start. */
  readonly fromMs: number;
  readonly toMs: number;
  /** 1 s samples after warm-up, and the time they span. */
  readonly samples: number;
  readonly warmMs: number;
  /** Over the 1 s samples after warm-up (0 when none). */
  readonly minKb: number;
  readonly medianKb: number;
  readonly maxKb: number;
  /** Least-squares slope of the 1 s samples, KB per minute (reported; it mostly measures the sawtooth's phase). */
  readonly slopeKbPerMin: number;
  /**
   * Reported, not judged (the judge before session 9): the lowest 1 s sample
   * of the last third of the warm phase minus that of the first third. A
   * third shorter than the sawtooth's period may hold no trough at all, so
   * this measures the phase of the sawtooth as much as a leak.
   */
  readonly thirdsGrowthKb: number;
  /** Major GCs after warm-up judged: the forced ones when the life has any, else all. */
  readonly troughs: number;
  /** How many of them the soak forced (`--gc-every`). */
  readonly forcedTroughs: number;
  /** Lowest judged trough (judgedKb) after warm-up, KB (0 when none): the life's floor. */
  readonly troughFloorKb: number;
  /** The post-GC troughs' trend as judged (judgedKb; null with fewer than two); heapUsed's and external's beside it, to tell which memory moves. */
  readonly troughRss: Trend | null;
  /** The troughs' VmRSS itself, new space included (when the log has the new space, so that troughRss is less it). */
  readonly troughRssRaw?: Trend | null;
  readonly troughHeapUsed: Trend | null;
  readonly troughExternal: Trend | null;
  /** heapTotal and native (rss - heapTotal - external) at the troughs; null when the log has no heapTotal. */
  readonly troughHeapTotal?: Trend | null;
  readonly troughNative?: Trend | null;
  /** The file-backed part of RSS at the troughs (RssFile); null when the log has none. */
  readonly troughFile?: Trend | null;
  /** heapTotal's new and old space at the troughs, and the new space's size at the first and last (absent when the log has none). */
  readonly troughNewSpace?: Trend | null;
  readonly troughOldSpace?: Trend | null;
  readonly newSpaceKb?: { readonly first: number; readonly last: number };
  /** With `--malloc-trim`: the troughs' VmRSS before the trim (not judged), its floor, and malloc's bytes in use and free at the troughs. */
  readonly troughUntrimmed?: Trend | null;
  readonly untrimmedFloorKb?: number;
  readonly troughMallocInUse?: Trend | null;
  readonly troughMallocFree?: Trend | null;
  readonly verdict: LifeVerdict;
  /** For 'too short': why. */
  readonly why: string;
}

export interface RssReport {
  readonly warmupMs: number;
  readonly minKb: number;
  readonly medianKb: number;
  readonly maxKb: number;
  /** Every daemon process sampled, in order of start. */
  readonly lives: readonly RssLife[];
  /** Lives judged (flat or growing), and how many the run needs for a verdict. */
  readonly judged: number;
  readonly needed: number;
  /** Share of the sampled time that judged warm phases cover. */
  readonly coverage: number;
  /** Troughs of the judged lives, and how many the pooled trend needs. */
  readonly pooledTroughs: number;
  readonly troughsNeeded: number;
  /**
   * Within lives, pooled: one least-squares slope through the post-GC RSS
   * troughs of every judged life, each life about its own mean (so a
   * difference between lives does not count), times the median warm phase:
   * what a leak common to the lives adds over one life. Null when not judged.
   */
  readonly pooledGrowthKb: number | null;
  readonly pooledVerdict: 'flat' | 'growing' | 'not judged';
  /**
   * Across lives: the rise of the trough floor (lowest post-GC RSS after
   * warm-up) over the judged lives, from a least-squares line through them
   * (first to last); null with fewer than two judged lives.
   */
  readonly acrossGrowthKb: number | null;
  readonly acrossVerdict: 'flat' | 'growing' | 'not judged';
  /** With `--malloc-trim`, for information (not judged): the same rise of the floor of the troughs before the trim. */
  readonly acrossUntrimmedKb?: number | null;
  readonly verdict: RunVerdict;
  /** Why, one line. */
  readonly why: string;
}

/** A life is judged when its warm phase (after warm-up) spans this long: a V8 heap needs minutes to show its floor. */
export const RSS_MIN_WARM_MS = 180_000;
/** ... with at least this share of its 1 s samples (a sampler starved by load does not judge). */
export const RSS_MIN_SAMPLE_SHARE = 0.5;
/** ... and at least two major GCs after warm-up this far apart (a trend needs two floors; under churn V8 collects every 50-110 s). */
export const RSS_MIN_TROUGH_SPAN_MS = 60_000;
/** The pooled within-life trend needs this many troughs over the judged lives, or the run is inconclusive. */
export const RSS_MIN_TROUGHS = 6;
/** Growth that counts as growing: more than this many KB and this share of the median. */
export const RSS_GROWTH_KB = 4096;
export const RSS_GROWTH_SHARE = 0.05;
/** Judged warm phases must cover this share of the sampled time, or the run is inconclusive. */
export const RSS_MIN_COVERAGE = 0.5;

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

const trend = (xs: readonly number[], ys: readonly number[]): Trend | null => {
  if (xs.length < 2) return null;
  const k = slope(xs, ys);
  return { n: xs.length, kbPerMin: k * 60_000, riseKb: k * (Math.max(...xs) - Math.min(...xs)) };
};

const growing = (growthKb: number, medianKb: number): boolean => growthKb > Math.max(RSS_GROWTH_KB, RSS_GROWTH_SHARE * medianKb);

/**
 * What a trough is judged on: its RSS less V8's new space as committed, when
 * the log has it. The new space (the young generation) is bounded by the
 * daemon's --max-semi-space-size (8 MB); V8 commits it up to that under
 * allocation and gives part of it back when the process looks idle (its
 * memory reducer), so a life's troughs rise or fall by up to 7 MB with the
 * phase of the API churn, whatever the daemon holds. The raw RSS trend is
 * reported beside it (RssLife.troughRssRaw).
 */
export const judgedKb = (g: GcTrough): number => g.rssKb - (g.newSpaceKb ?? 0);

/** How much a judgement needs (the RSS_MIN_* constants; a short real run in a test asks for less). */
export interface RssLimits {
  readonly minWarmMs: number;
  readonly minTroughSpanMs: number;
  readonly minTroughs: number;
}
export const RSS_LIMITS: RssLimits = { minWarmMs: RSS_MIN_WARM_MS, minTroughSpanMs: RSS_MIN_TROUGH_SPAN_MS, minTroughs: RSS_MIN_TROUGHS };

/**
 * The troughs a life is judged on, in order: after warm-up; when the soak
 * forced collections (`--gc-every`), those alone. Each is a full, atomic
 * collection at a fixed time; V8's own (incremental, started by allocation)
 * are listed in the report but may keep what died while they marked.
 */
export function judgedTroughs(troughs: readonly GcTrough[], pid: number, warmupMs: number): GcTrough[] {
  const after = troughs.filter((g) => g.pid === pid && g.lifeMs >= warmupMs).sort((a, b) => a.tMs - b.tMs);
  return after.some((g) => g.forced === true) ? after.filter((g) => g.forced === true) : after;
}

/**
 * RSS per daemon process (each restart starts a new one), judged on the
 * floor it returns to: its RSS right after each major garbage collection
 * (`troughs`, soak-preload.mjs) after `warmupMs` of its life, the forced
 * ones alone when there are any (judgedTroughs). The 1 s
 * `samples` give the warm phase's length, min/median/max and the
 * sawtooth; they do not judge (their lowest point in a stretch shorter
 * than the GC's period is the sawtooth's phase, not a floor).
 *
 * A life is judged when its warm phase spans RSS_MIN_WARM_MS with
 * RSS_MIN_SAMPLE_SHARE of its 1 s samples and holds two troughs
 * RSS_MIN_TROUGH_SPAN_MS apart; else it is "too short". A judged life
 * grows when the least-squares line through its troughs rises over their
 * span by more than RSS_GROWTH_KB and RSS_GROWTH_SHARE of its median.
 *
 * Pooled: with two or three troughs a life, one life sees only a fast
 * leak; one slope through the troughs of every judged life (each about its
 * own mean), projected over the median warm phase, sees a slower one that
 * every life shares; it needs RSS_MIN_TROUGHS troughs.
 *
 * Across lives: a fresh process rebuilds its state from the state file; a
 * leak there (state that only accumulates) shows as trough floors that
 * climb from one life to the next, by the same threshold.
 *
 * The run: growing if a judged life grows, the pooled trend grows or the
 * floors climb; otherwise inconclusive unless enough lives were judged (two
 * when the daemon was restarted, else one), their warm phases cover
 * RSS_MIN_COVERAGE of the sampled time and the pool holds RSS_MIN_TROUGHS
 * troughs; only then flat.
 */
export function rssSummary(samples: readonly RssSample[], warmupMs: number, troughs: readonly GcTrough[], limits: RssLimits = RSS_LIMITS): RssReport {
  const { minWarmMs, minTroughSpanMs, minTroughs } = limits;
  const lives: RssLife[] = [];
  const pids = [...new Set(samples.map((s) => s.pid))];
  let sampledMs = 0;
  let judgedMs = 0;
  for (const pid of pids) {
    const mine = samples.filter((s) => s.pid === pid);
    const ss = mine.filter((s) => s.lifeMs >= warmupMs);
    const kb = ss.map((s) => s.rssKb);
    const warmMs = ss.length < 2 ? 0 : ss.at(-1)!.lifeMs - ss[0]!.lifeMs;
    const third = Math.floor(kb.length / 3);
    const thirdsGrowthKb = third === 0 ? 0 : Math.min(...kb.slice(-third)) - Math.min(...kb.slice(0, third));
    const med = median(kb);
    const tr = judgedTroughs(troughs, pid, warmupMs);
    const xs = tr.map((g) => g.tMs);
    const troughRss = trend(xs, tr.map(judgedKb));
    const span = xs.length < 2 ? 0 : xs.at(-1)! - xs[0]!;
    const longEnough = warmMs >= minWarmMs && ss.length >= RSS_MIN_SAMPLE_SHARE * (warmMs / 1000);
    const why = !longEnough
      ? `warm phase ${Math.round(warmMs / 1000)} s with ${ss.length} samples (need ${minWarmMs / 1000} s, half of them sampled)`
      : span < minTroughSpanMs ? `${tr.length} major GCs after warm-up${tr.length >= 2 ? ` over ${Math.round(span / 1000)} s` : ''} (need two ${minTroughSpanMs / 1000} s apart)` : '';
    const verdict: LifeVerdict = why !== '' ? 'too short' : growing(troughRss!.riseKb, med) ? 'growing' : 'flat';
    sampledMs += mine.at(-1)!.tMs - mine[0]!.tMs;
    if (verdict !== 'too short') judgedMs += warmMs;
    lives.push({
      pid, fromMs: mine[0]!.tMs, toMs: mine.at(-1)!.tMs, samples: ss.length, warmMs,
      minKb: kb.length ? Math.min(...kb) : 0, medianKb: med, maxKb: kb.length ? Math.max(...kb) : 0,
      slopeKbPerMin: slope(ss.map((s) => s.tMs), kb) * 60_000, thirdsGrowthKb,
      troughs: tr.length, forcedTroughs: tr.filter((g) => g.forced === true).length, troughFloorKb: tr.length ? Math.min(...tr.map(judgedKb)) : 0,
      ...(tr.some((g) => g.newSpaceKb !== undefined) ? { troughRssRaw: trend(xs, tr.map((g) => g.rssKb)) } : {}),
      troughRss, troughHeapUsed: trend(xs, tr.map((g) => g.heapUsedKb)), troughExternal: trend(xs, tr.map((g) => g.externalKb)),
      ...(tr.every((g) => g.heapTotalKb !== undefined)
        ? { troughHeapTotal: trend(xs, tr.map((g) => g.heapTotalKb!)), troughNative: trend(xs, tr.map((g) => g.rssKb - g.heapTotalKb! - g.externalKb)) }
        : {}),
      ...(tr.every((g) => g.rssFileKb !== undefined) ? { troughFile: trend(xs, tr.map((g) => g.rssFileKb!)) } : {}),
      ...(tr.length > 0 && tr.every((g) => g.newSpaceKb !== undefined && g.oldSpaceKb !== undefined)
        ? {
            troughNewSpace: trend(xs, tr.map((g) => g.newSpaceKb!)),
            troughOldSpace: trend(xs, tr.map((g) => g.oldSpaceKb!)),
            newSpaceKb: { first: tr[0]!.newSpaceKb!, last: tr.at(-1)!.newSpaceKb! },
          }
        : {}),
      ...(tr.length > 0 && tr.every((g) => g.rssUntrimmedKb !== undefined)
        ? { troughUntrimmed: trend(xs, tr.map((g) => g.rssUntrimmedKb!)), untrimmedFloorKb: Math.min(...tr.map((g) => g.rssUntrimmedKb!)) }
        : {}),
      ...(tr.length > 0 && tr.every((g) => g.mallocInUseKb !== undefined && g.mallocFreeKb !== undefined)
        ? { troughMallocInUse: trend(xs, tr.map((g) => g.mallocInUseKb!)), troughMallocFree: trend(xs, tr.map((g) => g.mallocFreeKb!)) }
        : {}),
      verdict, why,
    });
  }
  lives.sort((a, b) => a.fromMs - b.fromMs);
  const all = samples.filter((s) => s.lifeMs >= warmupMs).map((s) => s.rssKb);
  const med = median(all);
  const judgedLives = lives.filter((l) => l.verdict !== 'too short');
  const needed = lives.length > 1 ? 2 : 1;
  const coverage = sampledMs === 0 ? 0 : judgedMs / sampledMs;
  // Pooled within-life slope: each judged life's troughs about their own means.
  let num = 0;
  let den = 0;
  let pooledTroughs = 0;
  for (const l of judgedLives) {
    const tr = judgedTroughs(troughs, l.pid, warmupMs);
    const mx = tr.reduce((a, g) => a + g.tMs, 0) / tr.length;
    const my = tr.reduce((a, g) => a + judgedKb(g), 0) / tr.length;
    for (const g of tr) {
      num += (g.tMs - mx) * (judgedKb(g) - my);
      den += (g.tMs - mx) ** 2;
    }
    pooledTroughs += tr.length;
  }
  const pooledGrowthKb = pooledTroughs < minTroughs || den === 0 ? null : (num / den) * median(judgedLives.map((l) => l.warmMs));
  const pooledVerdict = pooledGrowthKb === null ? 'not judged' : growing(pooledGrowthKb, med) ? 'growing' : 'flat';
  let acrossGrowthKb: number | null = null;
  if (judgedLives.length >= 2) {
    const xs = judgedLives.map((l) => (l.fromMs + l.toMs) / 2);
    acrossGrowthKb = slope(xs, judgedLives.map((l) => l.troughFloorKb)) * (xs.at(-1)! - xs[0]!);
  }
  const acrossVerdict = acrossGrowthKb === null ? 'not judged' : growing(acrossGrowthKb, med) ? 'growing' : 'flat';
  const untrimmed = judgedLives.filter((l) => l.untrimmedFloorKb !== undefined);
  let acrossUntrimmedKb: number | null | undefined;
  if (untrimmed.length > 0) {
    const xs = untrimmed.map((l) => (l.fromMs + l.toMs) / 2);
    acrossUntrimmedKb = untrimmed.length < 2 ? null : slope(xs, untrimmed.map((l) => l.untrimmedFloorKb!)) * (xs.at(-1)! - xs[0]!);
  }
  const grew = judgedLives.filter((l) => l.verdict === 'growing');
  const sign = (kb: number): string => `${kb >= 0 ? '+' : ''}${(kb / 1024).toFixed(1)} MB`;
  let verdict: RunVerdict;
  let why: string;
  if (grew.length > 0 || pooledVerdict === 'growing' || acrossVerdict === 'growing') {
    verdict = 'growing';
    why = [
      ...(grew.length > 0 ? [`${grew.length} of ${judgedLives.length} judged lives' post-GC troughs rise (pid ${grew.map((l) => l.pid).join(', ')})`] : []),
      ...(pooledVerdict === 'growing' ? [`the post-GC troughs of ${judgedLives.length} lives rise ${sign(pooledGrowthKb!)} over a life (pooled)`] : []),
      ...(acrossVerdict === 'growing' ? [`the trough floor climbs ${sign(acrossGrowthKb!)} across ${judgedLives.length} lives`] : []),
    ].join('; ');
  } else if (judgedLives.length < needed || coverage < RSS_MIN_COVERAGE || pooledVerdict === 'not judged') {
    verdict = 'inconclusive';
    why = `${judgedLives.length} of ${lives.length} lives judged (need ${needed}: a warm phase of ${minWarmMs / 1000} s after ${warmupMs / 1000} s warm-up ` +
      `with two major GCs ${minTroughSpanMs / 1000} s apart), covering ${Math.round(coverage * 100)} % of the sampled time (need ${RSS_MIN_COVERAGE * 100} %), ` +
      `${pooledTroughs} post-GC troughs (need ${minTroughs})`;
  } else {
    verdict = 'flat';
    why = `${judgedLives.length} of ${lives.length} lives judged on ${pooledTroughs} post-GC troughs, each flat within, pooled ${sign(pooledGrowthKb!)} over a life` +
      `${acrossGrowthKb === null ? '' : `, trough floor ${sign(acrossGrowthKb)} across them`}; ${Math.round(coverage * 100)} % of the sampled time judged`;
  }
  return {
    warmupMs, minKb: all.length ? Math.min(...all) : 0, medianKb: med, maxKb: all.length ? Math.max(...all) : 0,
    lives, judged: judgedLives.length, needed, coverage, pooledTroughs, troughsNeeded: minTroughs, pooledGrowthKb, pooledVerdict,
    acrossGrowthKb, acrossVerdict, ...(acrossUntrimmedKb === undefined ? {} : { acrossUntrimmedKb }), verdict, why,
  };
}

/**
 * `--min-life auto`: long enough for a judged warm phase (warm-up +
 * RSS_MIN_WARM_MS + 15 s of margin: the sampler starts after the API
 * answers) when the run holds two such lives; otherwise 0 (kills in the
 * schedule as they come: the RSS verdict is then inconclusive).
 */
export function minLifeAuto(durationMs: number, warmupMs: number): number {
  const life = warmupMs + RSS_MIN_WARM_MS + 15_000;
  return durationMs >= 2 * life ? life : 0;
}
