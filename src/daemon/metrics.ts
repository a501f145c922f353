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
 *   mup_bgp_routes{type,state}            BGP MUP routes (with bgp:): received, installed, rejected, held, unresolved
 *   mup_bgp_rejected_routes{reason}       routes not installed, by reason (docs/bgp.md)
 *   mup_bgp_monitor_up                    1 while the sidecar's table is being read
 *   mup_bgp_last_change_timestamp_seconds
 *   mup_bgp_route_latency_seconds         histogram: route read from the sidecar -> map written
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
