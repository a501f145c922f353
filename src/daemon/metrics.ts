/**
 * Prometheus metrics (prom-client), read from the BPF counters at scrape
 * time: nothing is counted twice, and a scrape costs one read of the counter
 * map. Names follow Prometheus conventions (`_total` counters, base units).
 *
 *   mup_packets_total{function}           translated packets per RFC 9433 function
 *   mup_bytes_total{function}             their bytes, as received
 *   mup_events_total{event,class}         every packet, by what happened (class pass|fwd|drop)
 *   mup_drops_total{reason}               dropped packets by reason (the drop_* events)
 *   mup_rule_packets_total{kind,key,name} per rule (at most --metrics-rule-limit rules)
 *   mup_rule_bytes_total{kind,key,name}
 *   mup_rule_series_truncated             1 when rules were left out of the per-rule series
 *   mup_table_entries{table}, mup_table_capacity{table}
 *   mup_interface_attached{interface,mode} 1 when our program runs on it
 *   mup_program_info{id,tag}              1, the program the links run
 *   mup_config_reloads_total{result}
 *   mup_build_info{version,node,object_sha256}
 *   mup_event_loop_delay_seconds{quantile}   the loop's delay since the last scrape (0.5, 0.99, 1 = max)
 *   mup_nexthop_rules_resolved_total      rules whose next hop was resolved again (forwarding fib)
 *   mup_nexthop_passes_total{kind}        next-hop resolution passes, full or incremental
 * plus prom-client's process_* and nodejs_* metrics.
 */
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import type { Daemon } from './daemon.js';

export const DEFAULT_RULE_SERIES_LIMIT = 1000;

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

export function createMetrics(d: Daemon, ruleLimit = DEFAULT_RULE_SERIES_LIMIT): Registry {
  const reg = new Registry();
  collectDefaultMetrics({ register: reg });
  // One snapshot per scrape, shared by the collectors below: Daemon.counters
  // reads the whole counter map once (Dataplane.counters).
  let snap: ReturnType<Daemon['counters']> | undefined;
  let snapAt = 0;
  const counters = (): ReturnType<Daemon['counters']> => {
    if (snap === undefined || Date.now() - snapAt > 100) {
      // Functions and events are sums over every rule; per-rule series only for the first ruleLimit + 1.
      snap = d.counters(ruleLimit + 1);
      snapAt = Date.now();
    }
    return snap;
  };

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
  const ruleLabels = ['kind', 'key', 'name'];
  new Counter({
    name: 'mup_rule_packets_total',
    help: `Packets translated per rule (policy or local SID); the first ${ruleLimit} rules`,
    labelNames: ruleLabels,
    registers: [reg],
    collect() {
      this.reset();
      for (const r of counters().rules.slice(0, ruleLimit)) setCounter(this, { kind: r.kind, key: r.key, name: r.name ?? '' }, r.packets);
    },
  });
  new Counter({
    name: 'mup_rule_bytes_total',
    help: `Bytes translated per rule; the first ${ruleLimit} rules`,
    labelNames: ruleLabels,
    registers: [reg],
    collect() {
      this.reset();
      for (const r of counters().rules.slice(0, ruleLimit)) setCounter(this, { kind: r.kind, key: r.key, name: r.name ?? '' }, r.bytes);
    },
  });
  new Gauge({
    name: 'mup_rule_series_truncated',
    help: `1 when there are more rules than the per-rule series limit (${ruleLimit}; mup daemon --metrics-rule-limit)`,
    registers: [reg],
    collect() {
      const t = d.status().tables;
      this.set(t.policies.entries + t.localsids.entries > ruleLimit ? 1 : 0);
    },
  });
  new Gauge({
    name: 'mup_table_entries',
    help: 'Entries in each table',
    labelNames: ['table'],
    registers: [reg],
    collect() {
      const t = d.status().tables;
      this.set({ table: 'policies' }, t.policies.entries);
      this.set({ table: 'localsids' }, t.localsids.entries);
    },
  });
  new Gauge({
    name: 'mup_table_capacity',
    help: 'Capacity of each table (settings.max_policies, max_localsids)',
    labelNames: ['table'],
    registers: [reg],
    collect() {
      const t = d.status().tables;
      this.set({ table: 'policies' }, t.policies.capacity);
      this.set({ table: 'localsids' }, t.localsids.capacity);
    },
  });
  new Gauge({
    name: 'mup_interface_attached',
    help: '1 when the configured interface runs our program now (the XDP link the daemon holds, on its current device), else 0 (missing or detached)',
    labelNames: ['interface', 'mode'],
    registers: [reg],
    collect() {
      this.reset();
      for (const i of d.status().interfaces) this.set({ interface: i.name, mode: i.mode }, i.attached ? 1 : 0);
    },
  });
  new Gauge({
    name: 'mup_program_info',
    help: 'The XDP program the links run (kernel id and tag)',
    labelNames: ['id', 'tag'],
    registers: [reg],
    collect() {
      this.reset();
      const p = d.status().program;
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
      const s = d.status();
      this.set({ version: s.version, node: process.version, object_sha256: s.object.sha256 }, 1);
    },
  });
  new Gauge({
    name: 'mup_event_loop_delay_seconds',
    help: 'Delay of the daemon\'s event loop since the previous scrape (perf_hooks.monitorEventLoopDelay, 10 ms resolution); quantile 1 is the max',
    labelNames: ['quantile'],
    registers: [reg],
    collect() {
      const w = d.loop.takeScrapeWindow();
      this.set({ quantile: '0.5' }, w.p50);
      this.set({ quantile: '0.99' }, w.p99);
      this.set({ quantile: '1' }, w.max);
    },
  });
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
  return reg;
}
