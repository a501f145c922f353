/**
 * Prometheus metrics (prom-client), read from the BPF counters at scrape
 * time: nothing is counted twice, and a scrape costs one read of the counter
 * map. Names follow Prometheus conventions (`_total` counters, base units).
 *
 *   mup_packets_total{function}           translated packets per RFC 9433 function
 *   mup_bytes_total{function}             their bytes, as received
 *   mup_events_total{event,class}         every packet, by what happened (class pass|fwd|drop)
 *   mup_drops_total{reason}               dropped packets by reason (the drop_* events)
 *   mup_rule_packets_total{kind,key,name} per rule, opt-in (daemon.metrics.per_rule:
 *   mup_rule_bytes_total{kind,key,name}     off by default, all, or top:N by packets)
 *   mup_rule_series_truncated             1 when rules were left out of the per-rule series
 *   mup_table_entries{table}, mup_table_capacity{table}
 *   mup_interface_attached{interface,mode} 1 when our program runs on it
 *   mup_program_info{id,tag}              1, the program the links run
 *   mup_config_reloads_total{result}
 *   mup_build_info{version,node,object_sha256}
 *   mup_event_loop_delay_seconds{quantile}   the loop's delay since the last scrape (0.5, 0.99, 1 = max)
 *   mup_api_request_duration_seconds{class}  histogram: control API answer times (read, change, batch, reload, other)
 *   mup_nexthop_rules_resolved_total      rules whose next hop was resolved again (forwarding fib)
 *   mup_nexthop_passes_total{kind}        next-hop resolution passes, full or incremental
 *   mup_grace_periods_total, mup_grace_period_seconds_total, mup_grace_wait_seconds_total
 *                                         RCU grace periods run, their time, and the writes' waits for them
 *   mup_rcu_expedited                     the host's /sys/kernel/rcu_expedited (1 or 0)
 *   mup_bgp_routes{type,state}            BGP MUP routes (with bgp:): received, installed, rejected, held, unresolved
 *   mup_bgp_rejected_routes{reason}       routes not installed, by reason (docs/bgp.md)
 *   mup_bgp_monitor_up                    1 while the sidecar's table is being read
 *   mup_bgp_last_change_timestamp_seconds
 *   mup_bgp_route_latency_seconds         histogram: route read from the sidecar -> map written
 * plus prom-client's process_* and nodejs_* metrics.
 *
 * A scrape takes ONE counter snapshot (one read of the counter map) and one
 * status, before any collector runs; every series of the scrape comes from
 * them. Without per-rule series the scrape's size does not grow with the
 * number of rules (docs/metrics.md, "Cardinality").
 */
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import type { PerRuleSeries } from '../config/types.js';
import type { RuleCounter, RuleSelection } from '../dataplane/dataplane.js';
import type { CountersSnapshot, Daemon } from './daemon.js';
import { runNow, runYielding, SliceClock } from '../host/slice-clock.js';
import { graceClock, rcuExpedited } from '../dataplane/grace.js';

/** Per-rule series when neither the config nor the command line says: none. */
export const DEFAULT_PER_RULE: PerRuleSeries = 'off';

export interface MetricsOptions {
  /** Overrides daemon.metrics.per_rule of the running config (mup daemon --metrics-per-rule). */
  readonly perRule?: PerRuleSeries;
}

/** The text of a per-rule setting, as the config spells it. */
export function perRuleText(p: PerRuleSeries): string {
  return typeof p === 'string' ? p : `top:${p.top}`;
}

/** The `n` rules with the most packets (ties: config order), busiest first; rules without packets never. */
export function topRules(rules: Iterable<RuleCounter>, n: number): RuleCounter[] {
  return runNow(topRulesSlices(rules, n));
}

/**
 * topRules in slices: it yields when `clock` says a slice is over (the
 * scrape runs it with the event loop turning between slices). The n best
 * so far are a min-heap, the worst at its root: a rule that does not beat
 * the root costs one comparison, one that does about log2(n); the n are
 * then taken off the root worst first, in slices too. (A sorted
 * array with an insertion per rule moved up to n entries each time:
 * top:100000 over a million rules held the loop 34-103 s a scrape.)
 */
/** Rows picked by index (src/dataplane/dataplane.ts RuleCounterRows). */
interface PickRows {
  readonly length: number;
  packetsAt(i: number): bigint;
  row(i: number): RuleCounter;
}

function* indexes(n: number): Generator<number> {
  for (let i = 0; i < n; i++) yield i;
}

export function* topRulesSlices(rules: Iterable<RuleCounter>, n: number, clock = new SliceClock()): Generator<void, RuleCounter[]> {
  const heap: RuleCounter[] = [];
  /** Each heap entry's place in `rules`: the later of two equal counts is the worse. */
  const seq: number[] = [];
  const worse = (i: number, j: number): boolean => heap[i]!.packets < heap[j]!.packets || (heap[i]!.packets === heap[j]!.packets && seq[i]! > seq[j]!);
  const swap = (i: number, j: number): void => {
    const r = heap[i]!;
    heap[i] = heap[j]!;
    heap[j] = r;
    const q = seq[i]!;
    seq[i] = seq[j]!;
    seq[j] = q;
  };
  /** Down from `i` while a child (of the first `len`) is worse. */
  const down = (i: number, len: number): void => {
    for (;;) {
      const l = 2 * i + 1;
      if (l >= len) return;
      const c = l + 1 < len && worse(l + 1, l) ? l + 1 : l;
      if (!worse(c, i)) return;
      swap(i, c);
      i = c;
    }
  };
  let at = -1;
  // Counter rows (RuleCounterRows) are picked by their packets and made only when they get in: a row
  // made for every rule made every rule's key text, at a million TEID policies 0.7 s a pass (their
  // rules, kept as rows, hold none).
  const pick = rules as Partial<PickRows>;
  const byIndex = typeof pick.packetsAt === 'function' && typeof pick.row === 'function' && typeof pick.length === 'number' ? (pick as PickRows) : undefined;
  const each: Iterable<RuleCounter | number> = byIndex === undefined ? rules : indexes(byIndex.length);
  if (n > 0) {
    for (const item of each) {
      at++;
      if (clock.tick()) yield;
      const packets = typeof item === 'number' ? byIndex!.packetsAt(item) : item.packets;
      if (packets === 0n) continue;
      if (heap.length === n && packets <= heap[0]!.packets) continue;
      const r = typeof item === 'number' ? byIndex!.row(item) : item;
      if (heap.length < n) {
        // Up from the new leaf while it is worse than its parent.
        heap.push(r);
        seq.push(at);
        for (let i = heap.length - 1; i > 0; ) {
          const up = (i - 1) >> 1;
          if (!worse(i, up)) break;
          swap(i, up);
          i = up;
        }
        continue;
      }
      // Full: only a rule with more packets than the worst kept gets in (a tie keeps the earlier rule; above).
      heap[0] = r;
      seq[0] = at;
      down(0, heap.length);
    }
  }
  // Worst first off the root, each put after the heap's end: the array ends busiest first.
  for (let end = heap.length - 1; end > 0; end--) {
    if (clock.tick()) yield;
    swap(0, end);
    down(0, end);
  }
  return heap;
}

const FUNCTION_NAMES = {
  h_m_gtp4_d: 'H.M.GTP4.D',
  end_m_gtp4_e: 'End.M.GTP4.E',
  end_m_gtp6_e: 'End.M.GTP6.E',
  end_m_gtp6_d: 'End.M.GTP6.D',
  end_m_gtp6_d_di: 'End.M.GTP6.D.Di',
  h_m_session_encaps: 'H.M.Session.Encaps',
} as const;

function eventClass(name: string): string {
  return name.startsWith('drop_') ? 'drop' : name.startsWith('fwd_') ? 'fwd' : name.startsWith('pass_') ? 'pass' : 'other';
}

/** Counters read as absolute values: prom-client's counters are set by reset + inc. */
function setCounter(c: Counter<string>, labels: Record<string, string>, v: bigint): void {
  c.inc(labels, Number(v));
}

const RULE_PACKETS_HELP = 'Packets translated per rule (opt-in: daemon.metrics.per_rule all or top:N; mup stats --rule NAME for one rule)';
const RULE_BYTES_HELP = 'Bytes translated per rule (opt-in: daemon.metrics.per_rule)';

/** Per-rule lines a piece of the streamed answer (metricsPieces): the loop may turn between two pieces. */
export const RULE_LINES_PER_PIECE = 256;

/** The registry, and the scrape as pieces of text made as they are sent (GET /metrics). */
export type MupRegistry = Registry & {
  /**
   * One scrape: prom-client's series (one counter read, one status), then
   * the per-rule series, RULE_LINES_PER_PIECE lines a piece, made only when
   * the stream takes the piece. prom-client made them all at once: with
   * per_rule all on 131,072 rules, a turn of 1.2 s and 19 MB of text (plus
   * 262,144 value objects) at once, the daemon at 525 MB resident.
   * `metrics()` gives the same text whole.
   */
  metricsPieces(): Promise<Iterable<string>>;
};

/** A label value as the text format writes it (prom-client's escaping: backslash, newline, double quote). */
function labelValue(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

/** One per-rule counter (`name`, its `field`) of `rules`, as text: its HELP and TYPE lines, then a line a rule. */
function* ruleSeriesText(name: string, help: string, field: 'packets' | 'bytes', rules: Iterable<RuleCounter>): Generator<string> {
  // A blank line between two metrics, as prom-client writes them (its text ends with a newline).
  yield `\n# HELP ${name} ${help}\n# TYPE ${name} counter\n`;
  let lines = '';
  let n = 0;
  for (const r of rules) {
    lines += `${name}{kind="${r.kind}",key="${labelValue(r.key)}",name="${labelValue(r.name ?? '')}"} ${r[field]}\n`;
    if (++n === RULE_LINES_PER_PIECE) {
      yield lines;
      lines = '';
      n = 0;
    }
  }
  if (lines !== '') yield lines;
}

export function createMetrics(d: Daemon, o: MetricsOptions = {}): MupRegistry {
  const reg = new Registry() as MupRegistry;
  collectDefaultMetrics({ register: reg });
  const perRule = (): PerRuleSeries => o.perRule ?? d.config.daemon?.metrics?.perRule ?? DEFAULT_PER_RULE;
  // One snapshot per scrape, taken in metrics() below before any collector
  // runs (prom-client calls every collect() in the same tick): the counter
  // map is read once (Daemon.counters -> Dataplane.counters), the status
  // (which asks the kernel about the program and links) taken once.
  interface Scrape {
    /** The events' and functions' sums (the rules are in `rules`). */
    readonly counters: Pick<CountersSnapshot, 'at' | 'events' | 'functions'>;
    readonly status: ReturnType<Daemon['status']>;
    /**
     * The rules with their own series: with per_rule all the read's rows,
     * each rule's object made only as its line is (an array of 131,072 made
     * at once was a turn of 150 ms whose objects the collector promoted).
     */
    readonly rules: Iterable<RuleCounter> & { readonly length: number };
    readonly truncated: boolean;
  }
  let current: Scrape | undefined;
  const selection = (p: PerRuleSeries): RuleSelection => (p === 'off' ? 'none' : p === 'all' ? 'all' : 'active');
  // The counter map read in slices, the event loop running between them.
  const take = async (): Promise<Scrape> => {
    const p = perRule();
    if (typeof p !== 'object') {
      const c = await d.countersRowsAsync(selection(p));
      return snapshot(c, p === 'off' ? [] : c.rules);
    }
    // top:N: the active rules' rows made one at a time as the selection takes them, in slices too
    // (no array of every active rule; the rows are the read's, whatever changes meanwhile).
    const c = await d.countersRowsAsync('active');
    return snapshot(c, await runYielding(topRulesSlices(c.rules, p.top)));
  };
  const snapshot = (counters: Scrape['counters'], rules: Scrape['rules']): Scrape => {
    // Functions and events are sums over every rule's slot, whichever rules are listed.
    const status = d.status();
    const total = status.tables.policies.entries + status.tables.localsids.entries + status.tables.sessions.entries;
    return { counters, status, rules, truncated: rules.length < total };
  };
  // Collected outside metrics() (another prom-client entry point): one synchronous read.
  const scrape = (): Scrape => {
    if (current !== undefined) return current;
    const p = perRule();
    const c = d.counters(selection(p));
    current = snapshot(c, p === 'off' ? [] : p === 'all' ? c.rules : topRules(c.rules, p.top));
    return current;
  };
  const counters = (): Scrape['counters'] => scrape().counters;
  const metrics = reg.metrics.bind(reg);
  reg.metricsPieces = async (): Promise<Iterable<string>> => {
    const s = await take();
    current = s;
    let text: string;
    try {
      text = await metrics();
    } finally {
      current = undefined;
    }
    return (function* pieces(): Generator<string> {
      yield text;
      yield* ruleSeriesText('mup_rule_packets_total', RULE_PACKETS_HELP, 'packets', s.rules);
      yield* ruleSeriesText('mup_rule_bytes_total', RULE_BYTES_HELP, 'bytes', s.rules);
    })();
  };
  reg.metrics = async (): Promise<string> => [...(await reg.metricsPieces())].join('');

  new Counter({
    name: 'mup_packets_total',
    help: 'Packets translated, per RFC 9433 function',
    labelNames: ['function'],
    registers: [reg],
    collect() {
      this.reset();
      for (const [fn, v] of Object.entries(counters().functions)) setCounter(this, { function: FUNCTION_NAMES[fn as keyof typeof FUNCTION_NAMES] ?? fn }, v.packets);
    },
  });
  new Counter({
    name: 'mup_bytes_total',
    help: 'Bytes (as received) of packets translated, per RFC 9433 function',
    labelNames: ['function'],
    registers: [reg],
    collect() {
      this.reset();
      for (const [fn, v] of Object.entries(counters().functions)) setCounter(this, { function: FUNCTION_NAMES[fn as keyof typeof FUNCTION_NAMES] ?? fn }, v.bytes);
    },
  });
  new Counter({
    name: 'mup_events_total',
    help: 'Every packet the program saw, by what happened to it (see README: counters)',
    labelNames: ['event', 'class'],
    registers: [reg],
    collect() {
      this.reset();
      for (const [ev, v] of Object.entries(counters().events)) setCounter(this, { event: ev, class: eventClass(ev) }, v.packets);
    },
  });
  new Counter({
    name: 'mup_drops_total',
    help: 'Packets dropped, by reason',
    labelNames: ['reason'],
    registers: [reg],
    collect() {
      this.reset();
      for (const [ev, v] of Object.entries(counters().events)) {
        if (ev.startsWith('drop_')) setCounter(this, { reason: ev.slice('drop_'.length) }, v.packets);
      }
    },
  });
  // The per-rule series (mup_rule_packets_total, mup_rule_bytes_total) follow prom-client's text: metricsPieces.
  new Gauge({
    name: 'mup_rule_series_truncated',
    help: 'When 1, some rules have no per-rule series (daemon.metrics.per_rule off, the default, or top:N)',
    registers: [reg],
    collect() {
      this.set(scrape().truncated ? 1 : 0);
    },
  });
  new Gauge({
    name: 'mup_table_entries',
    help: 'Entries in each table',
    labelNames: ['table'],
    registers: [reg],
    collect() {
      const t = scrape().status.tables;
      this.set({ table: 'policies' }, t.policies.entries);
      this.set({ table: 'localsids' }, t.localsids.entries);
      this.set({ table: 'sessions' }, t.sessions.entries);
    },
  });
  new Gauge({
    name: 'mup_table_capacity',
    help: 'Capacity of each table (settings.max_policies, max_localsids, max_sessions)',
    labelNames: ['table'],
    registers: [reg],
    collect() {
      const t = scrape().status.tables;
      this.set({ table: 'policies' }, t.policies.capacity);
      this.set({ table: 'localsids' }, t.localsids.capacity);
      this.set({ table: 'sessions' }, t.sessions.capacity);
    },
  });
  new Gauge({
    name: 'mup_interface_attached',
    help: '1 when the configured interface runs our program now (the XDP link the daemon holds, on its current device), else 0 (missing or detached)',
    labelNames: ['interface', 'mode'],
    registers: [reg],
    collect() {
      this.reset();
      for (const i of scrape().status.interfaces) this.set({ interface: i.name, mode: i.mode }, i.attached ? 1 : 0);
    },
  });
  new Gauge({
    name: 'mup_program_info',
    help: 'The XDP program the links run (kernel id and tag)',
    labelNames: ['id', 'tag'],
    registers: [reg],
    collect() {
      this.reset();
      const p = scrape().status.program;
      if (p !== null) this.set({ id: String(p.id), tag: p.tag }, 1);
    },
  });
  new Counter({
    name: 'mup_config_reloads_total',
    help: 'Config reloads (SIGHUP, mup reload), by result',
    labelNames: ['result'],
    registers: [reg],
    collect() {
      this.reset();
      this.inc({ result: 'ok' }, d.reloads.ok);
      this.inc({ result: 'failed' }, d.reloads.failed);
    },
  });
  new Gauge({
    name: 'mup_build_info',
    help: 'Version of the daemon and of the BPF object it loaded',
    labelNames: ['version', 'node', 'object_sha256'],
    registers: [reg],
    collect() {
      this.reset();
      const s = scrape().status;
      this.set({ version: s.version, node: process.version, object_sha256: s.object.sha256 }, 1);
    },
  });
  new Gauge({
    name: 'mup_event_loop_delay_seconds',
    help: 'Delay of the daemon\'s event loop since the previous scrape (how late a 10 ms timer ticks); quantile 1 is the max',
    labelNames: ['quantile'],
    registers: [reg],
    collect() {
      const w = d.loop.takeScrapeWindow();
      this.set({ quantile: '0.5' }, w.p50);
      this.set({ quantile: '0.99' }, w.p99);
      this.set({ quantile: '1' }, w.max);
    },
  });
  reg.registerMetric(d.requests);
  new Counter({
    name: 'mup_nexthop_rules_resolved_total',
    help: 'Rules whose next hop was resolved again (forwarding fib): by route, neighbour and interface changes, and API changes',
    registers: [reg],
    collect() {
      this.reset();
      this.inc(d.nexthopTotals()?.rulesResolved ?? 0);
    },
  });
  new Counter({
    name: 'mup_nexthop_passes_total',
    help: 'Next-hop resolution passes: full (every range: start, reload, interface changes) or incremental (the ranges a change touched)',
    labelNames: ['kind'],
    registers: [reg],
    collect() {
      this.reset();
      const t = d.nexthopTotals();
      this.inc({ kind: 'full' }, t?.fullPasses ?? 0);
      this.inc({ kind: 'incremental' }, t?.incrementalPasses ?? 0);
    },
  });
  new Counter({
    name: 'mup_nexthop_lost_event_resyncs_total',
    help: 'Full next-hop passes run because ip monitor lost route or neighbour events (netlink ENOBUFS: a burst faster than it reads)',
    registers: [reg],
    collect() {
      this.reset();
      this.inc(d.nexthopTotals()?.lostEventResyncs ?? 0);
    },
  });
  new Counter({
    name: 'mup_nexthop_failed_passes_total',
    help: 'Next-hop passes that failed (a kernel read or a map write); each is tried again, after 100 ms doubling to 5 s while they fail',
    registers: [reg],
    collect() {
      this.reset();
      this.inc(d.nexthopTotals()?.failedPasses ?? 0);
    },
  });
  new Counter({
    name: 'mup_grace_periods_total',
    help: 'RCU grace periods run: a table write that reuses what a delete or replace freed waits for one (docs/daemon.md, "Grace periods and rcu_expedited")',
    registers: [reg],
    collect() {
      this.reset();
      this.inc(graceClock.runs);
    },
  });
  new Counter({
    name: 'mup_grace_period_seconds_total',
    help: 'Time the grace periods took, in total (on the clock\'s thread, or the caller\'s when that cannot run them): microseconds each with /sys/kernel/rcu_expedited 1, milliseconds with 0',
    registers: [reg],
    collect() {
      this.reset();
      this.inc(graceClock.seconds);
    },
  });
  new Counter({
    name: 'mup_grace_wait_seconds_total',
    help: 'Time table writes waited for a grace period: an add or replace right after a delete or replace answers that much later',
    registers: [reg],
    collect() {
      this.reset();
      this.inc(graceClock.waitedMs / 1000);
    },
  });
  // Only where the setting can be read (an unlabelled gauge always has a value: 0 would say "not expedited").
  if (rcuExpedited() !== undefined) {
    new Gauge({
      name: 'mup_rcu_expedited',
      help: "The host's /sys/kernel/rcu_expedited: 1, grace periods expedited (microseconds each); 0, the kernel's default (milliseconds each)",
      registers: [reg],
      collect() {
        const v = rcuExpedited();
        if (v !== undefined) this.set(v);
      },
    });
  }
  const bgp = d.bgp;
  if (bgp !== undefined) {
    reg.registerMetric(bgp.latency);
    let snap: ReturnType<typeof bgp.snapshot> | undefined;
    let snapAt = 0;
    const get = (): ReturnType<typeof bgp.snapshot> => {
      if (snap === undefined || Date.now() - snapAt > 100) {
        snap = bgp.snapshot();
        snapAt = Date.now();
      }
      return snap;
    };
    new Gauge({
      name: 'mup_bgp_routes',
      help: 'BGP MUP routes by type and state (received: live; held: withdrawn, in their hold-down)',
      labelNames: ['type', 'state'],
      registers: [reg],
      collect() {
        this.reset();
        for (const [type, c] of Object.entries(get().routes)) for (const [state, n] of Object.entries(c)) this.set({ type, state }, n);
      },
    });
    new Gauge({
      name: 'mup_bgp_rejected_routes',
      help: 'BGP MUP routes (or learned rules) not installed now, by reason',
      labelNames: ['reason'],
      registers: [reg],
      collect() {
        this.reset();
        for (const [reason, n] of Object.entries(get().rejected)) this.set({ reason }, n);
        this.set({ reason: 'malformed' }, get().malformed);
      },
    });
    new Gauge({
      name: 'mup_bgp_monitor_up',
      help: '1 while the sidecar gobgpd table is being read',
      registers: [reg],
      collect() {
        this.set(get().monitor.up ? 1 : 0);
      },
    });
    new Gauge({
      name: 'mup_bgp_last_change_timestamp_seconds',
      help: 'When a BGP MUP route last changed (0: never)',
      registers: [reg],
      collect() {
        const t = get().lastChange;
        this.set(t === null ? 0 : Date.parse(t) / 1000);
      },
    });
  }
  return reg;
}
