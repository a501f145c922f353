/**
 * What one /metrics scrape and one GET /v1/counters read from the kernel,
 * with full tables (65,536 policies + 65,536 local SIDs): the counter map
 * range once (each CPU's copies copied from a mapping of the map; a
 * scrape's pass in slices, the event loop running between them), and no
 * element of it one by one.
 *
 * The daemon runs in this process (the real Daemon, data plane and
 * Prometheus registry of src/daemon/, on the compiled build/mup.bpf.o, its
 * pins in a bpffs the test mounts in a temporary directory; no interfaces,
 * so nothing is attached). The reads are counted in the libbpf binding
 * (traceMapReads around the lookup syscalls and the mappings), not in a
 * stand-in.
 * The reset (`mup stats --reset`) is checked the same way: one read, and
 * every slot that was not zero is zero after it.
 * The pins, the mount and the directory are removed in afterAll.
 */
import { loadavg } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../src/daemon/daemon.js';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';
import { createMetrics } from '../src/daemon/metrics.js';
import type { PerRuleSeries, Session } from '../src/config/types.js';
import { COUNTER_STRIDE, LAYOUTS, MUP_EVENT_SLOTS } from '../src/dataplane/codec.js';
import { numPossibleCpus, traceMapReads, type MapRead } from '../src/dataplane/libbpf.js';
import { COUNTER_MMAP_FROM, counterUpdate } from '../src/dataplane/counter-map.js';
import { COUNTER_SLICE } from '../src/dataplane/dataplane.js';
import { readSlotCounts } from '../src/dataplane/tables.js';

const isRoot = process.getuid?.() === 0;
const RULES = 65536;
/** The session table (empty here) has its counter slots after the rules': the one read covers them too. */
const SESSIONS = 1024;

function configText(): string {
  const out = ['settings:', `  max_policies: ${RULES}`, `  max_localsids: ${RULES}`, `  max_sessions: ${SESSIONS}`, 'policies:'];
  for (let i = 0; i < RULES; i++) {
    out.push(`  - name: p${i}`, `    match: 10.${i >> 8}.${i & 255}.0/24`, '    sr_prefix: "2001:db9::/48"', '    src_prefix: "2001:db8:ffff::/64"');
  }
  out.push('localsids:');
  for (let i = 0; i < RULES; i++) out.push(`  - name: l${i}`, `    sid: "2001:db8:${i.toString(16)}::/48"`, '    src_prefix_len: 64');
  return `${out.join('\n')}\n`;
}

describe.skipIf(!isRoot)('counter reads per scrape, 65,536 + 65,536 rules', () => {
  let run: InProcDaemon | undefined;
  let d: Daemon | undefined;

  beforeAll(async () => {
    run = await startInProcDaemon('scrape', configText());
    d = run.daemon;
  }, 120_000);

  afterAll(() => {
    run?.stop();
  });

  /** Reads of the counter map during `fn`. */
  async function countedReads(fn: () => unknown): Promise<MapRead[]> {
    const counters = d!.dataplane.maps.counters;
    const t = traceMapReads();
    try {
      await fn();
    } finally {
      t.stop();
    }
    return t.reads.filter((r) => r.fd === counters);
  }

  /**
   * The one read: the events and every rule slot up to the highest rule id
   * in use. The session table is empty, so its slots (all zero) are not read.
   */
  const wholeRange = (): MapRead => ({ fd: d!.dataplane.maps.counters, op: 'lookup_batch', elements: MUP_EVENT_SLOTS + 2 * RULES });
  /**
   * A read of a range of slots: one per CPU (each CPU's copies are apart in the map: src/dataplane/counter-map.ts),
   * from a mapping of the map from COUNTER_MMAP_FROM slots, else a batch read.
   */
  const perCpu = (r: MapRead): MapRead[] => Array.from({ length: numPossibleCpus() }, () => ({ ...r, op: r.elements >= COUNTER_MMAP_FROM ? 'mmap' : 'lookup_batch' }));
  /** A scrape's pass over the same range: in order, COUNTER_SLICE slots a read (the event loop runs between them). */
  const slicedRange = (): MapRead[] => {
    const n = wholeRange().elements;
    const out: MapRead[] = [];
    for (let first = 0; first < n; first += COUNTER_SLICE) out.push(...perCpu({ ...wholeRange(), elements: Math.min(COUNTER_SLICE, n - first) }));
    return out;
  };

  it('has the tables full', () => {
    const t = d!.status().tables;
    expect([t.policies.entries, t.localsids.entries]).toEqual([RULES, RULES]);
  });

  /** A scrape with the counter-map reads it made, its size and time (printed: the figures, never asserted). */
  async function scrape(perRule: PerRuleSeries | undefined, label: string): Promise<{ text: string; reads: MapRead[] }> {
    const reg = createMetrics(d!, perRule === undefined ? {} : { perRule });
    let text = '';
    const t0 = performance.now();
    const reads = await countedReads(async () => {
      text = await reg.metrics();
    });
    const ms = performance.now() - t0;
    console.log(`scrape, ${label}, ${2 * RULES} rules: ${ms.toFixed(1)} ms, ${(Buffer.byteLength(text) / 1024).toFixed(1)} KiB (load average ${loadavg()[0]!.toFixed(2)})`);
    return { text, reads };
  }
  const ruleLines = (text: string): string[] => text.split('\n').filter((l) => l.startsWith('mup_rule_packets_total{'));

  it('a default /metrics scrape reads the counter range once, and has no per-rule series', async () => {
    const { text, reads } = await scrape(undefined, 'default (per_rule off)');
    // The scrape is a real one: every function, the events, the tables.
    expect(text).toContain('mup_packets_total{function="End.M.GTP4.E"} 0');
    expect(text).toContain('mup_events_total{event="fwd_tx",class="fwd"} 0');
    expect(text).toContain(`mup_table_entries{table="policies"} ${RULES}`);
    expect(ruleLines(text)).toEqual([]);
    expect(text).toMatch(/^mup_rule_series_truncated 1$/m);
    expect(reads).toEqual(slicedRange());
  });

  it('a scrape lets the event loop run while it reads the counters (a timer set before it fires before it ends)', async () => {
    const reg = createMetrics(d!);
    let fired = false;
    const timer = setTimeout(() => (fired = true), 0);
    let firedBeforeEnd: boolean | undefined;
    await reg.metrics().then(() => (firedBeforeEnd = fired));
    clearTimeout(timer);
    expect(firedBeforeEnd).toBe(true);
  });

  it('per_rule all: one series per rule, from the same single read', async () => {
    const { text, reads } = await scrape('all', 'per_rule all');
    expect(ruleLines(text)).toHaveLength(2 * RULES);
    expect(text).toContain('mup_rule_packets_total{kind="policy",key="10.0.0.0/24",name="p0"} 0');
    expect(text).toContain('mup_rule_bytes_total{kind="localsid",key="2001:db8:ffff::/48",name="l65535"} 0');
    expect(text).toMatch(/^mup_rule_series_truncated 0$/m);
    expect(reads).toEqual(slicedRange());
  });

  it('GET /v1/counters (mup stats) reads it once too, whichever rules it lists', async () => {
    for (const rules of ['all', 'active', 'none', 10] as const) {
      const reads = await countedReads(() => d!.counters(rules));
      expect(reads, `rules=${rules}`).toEqual(perCpu(wholeRange()));
    }
  });

  it('a reset zeroes what is not zero, events and rules, after one read', async () => {
    const dp = d!.dataplane;
    // An event, counted by the program (an ARP frame: passed to the stack) ...
    const arp = Buffer.alloc(60);
    arp.writeUInt16BE(0x0806, 12);
    const ev = dp.run(arp).event;
    expect(ev).not.toBeNull();
    // ... and a rule's slot (no packet here can reach a rule: written as the program would count it).
    const rule = dp.rules.localsidRule(d!.config.localsids[5]!.sid)!;
    const ncpus = numPossibleCpus();
    const v = Buffer.alloc(COUNTER_STRIDE * ncpus);
    v.writeBigUInt64LE(7n, LAYOUTS.mup_counter.members.packets.offset);
    v.writeBigUInt64LE(700n, LAYOUTS.mup_counter.members.bytes.offset);
    const key = Buffer.alloc(4);
    key.writeUInt32LE(MUP_EVENT_SLOTS + rule);
    counterUpdate(dp.maps.counters, key, v, 1, numPossibleCpus());
    const before = d!.counters('active');
    expect(before.events[ev!]!.packets).toBeGreaterThanOrEqual(1n);
    expect(before.rules.map((r) => [r.name, r.packets, r.bytes])).toEqual([['l5', 7n, 700n]]);
    expect(before.functions.end_m_gtp4_e).toEqual({ packets: 7n, bytes: 700n });

    const reads = await countedReads(() => d!.resetCounters());
    expect(reads).toEqual(perCpu(wholeRange()));
    const after = d!.counters('active');
    expect(Object.values(after.events).every((x) => x.packets === 0n && x.bytes === 0n)).toBe(true);
    expect(after.rules).toEqual([]);
    expect(after.functions.end_m_gtp4_e).toEqual({ packets: 0n, bytes: 0n });
  });

  it('per_rule top:N: the N rules with the most packets, busiest first; rules without packets never', async () => {
    // Counted as the program would count them (no packet here can reach a rule).
    const rules = { l7: 30n, l9: 50n, p3: 40n };
    for (const [name, packets] of Object.entries(rules)) setRuleSlot(name, packets);
    try {
      const top2 = await scrape({ top: 2 }, 'per_rule top:2');
      expect(ruleLines(top2.text)).toEqual([
        'mup_rule_packets_total{kind="localsid",key="2001:db8:9::/48",name="l9"} 50',
        'mup_rule_packets_total{kind="policy",key="10.0.3.0/24",name="p3"} 40',
      ]);
      expect(top2.reads).toEqual(slicedRange());
      const top10 = await scrape({ top: 10 }, 'per_rule top:10');
      expect(ruleLines(top10.text).map((l) => /name="(\w+)"/.exec(l)?.[1])).toEqual(['l9', 'p3', 'l7']);
    } finally {
      for (const name of Object.keys(rules)) setRuleSlot(name, 0n);
    }
  });

  it('per-function totals are exact sums over every CPU, past 2^32 and 2^53 (the scrape sums 32-bit halves)', () => {
    const dp = d!.dataplane;
    const c = d!.config;
    const ncpus = numPossibleCpus();
    const { packets: po, bytes: bo } = LAYOUTS.mup_counter.members;
    // Per slot and CPU: packets, bytes (values as the program would count them; no packet here reaches a rule).
    const slots: Array<[string, bigint, bigint]> = [
      ['p1', 2n ** 40n + 5n, 2n ** 60n + 3n],
      ['p65535', 2n ** 32n - 1n, 2n ** 53n + 1n],
      ['l3', 2n ** 33n + 7n, 2n ** 55n + 11n],
    ];
    const write = (name: string, packets: bigint, bytes: bigint): void => {
      const pol = c.policies.find((x) => x.name === name);
      const rule = pol !== undefined ? dp.rules.policyRule(pol.match) : dp.rules.localsidRule(c.localsids.find((x) => x.name === name)!.sid);
      const v = Buffer.alloc(COUNTER_STRIDE * ncpus);
      for (let cpu = 0; cpu < ncpus; cpu++) {
        v.writeBigUInt64LE(packets + BigInt(cpu), cpu * COUNTER_STRIDE + po.offset);
        v.writeBigUInt64LE(bytes + BigInt(cpu), cpu * COUNTER_STRIDE + bo.offset);
      }
      const key = Buffer.alloc(4);
      key.writeUInt32LE(MUP_EVENT_SLOTS + rule!);
      counterUpdate(dp.maps.counters, key, v, 1, numPossibleCpus());
    };
    const cpuSum = (x: bigint): bigint => Array.from({ length: ncpus }, (_, cpu) => x + BigInt(cpu)).reduce((a, b) => a + b, 0n);
    try {
      for (const [name, packets, bytes] of slots) write(name, packets, bytes);
      const want = {
        h_m_gtp4_d: { packets: cpuSum(slots[0]![1]) + cpuSum(slots[1]![1]), bytes: cpuSum(slots[0]![2]) + cpuSum(slots[1]![2]) },
        end_m_gtp4_e: { packets: cpuSum(slots[2]![1]), bytes: cpuSum(slots[2]![2]) },
      };
      for (const rules of ['none', 'all'] as const) {
        const f = d!.counters(rules).functions;
        expect({ h_m_gtp4_d: f.h_m_gtp4_d, end_m_gtp4_e: f.end_m_gtp4_e }, `rules=${rules}`).toEqual(want);
        expect(f.end_m_gtp6_e, `rules=${rules}`).toEqual({ packets: 0n, bytes: 0n });
      }
    } finally {
      for (const [name] of slots) setRuleSlot(name, 0n);
    }
  });

  it('a session extends the one read to its slot, and its count reaches the totals; after it goes (and its grace period), its slot is zero and the total keeps its count', async () => {
    const ue = '10.60.0.1/32';
    let sessionRule: number | undefined;
    await d!.putRule('session', { name: 's1', ue, teid: 0x12345678, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64' }, 'add');
    try {
      const s1 = [...d!.ruleMap('session').values()].find((r) => r.name === 's1') as Session;
      const rule = d!.dataplane.rules.sessionRule(s1.ue);
      sessionRule = rule;
      expect(rule).toBeGreaterThanOrEqual(2 * RULES);
      const v = Buffer.alloc(COUNTER_STRIDE * numPossibleCpus());
      v.writeBigUInt64LE(3n, LAYOUTS.mup_counter.members.packets.offset);
      v.writeBigUInt64LE(300n, LAYOUTS.mup_counter.members.bytes.offset);
      const key = Buffer.alloc(4);
      key.writeUInt32LE(MUP_EVENT_SLOTS + rule!);
      counterUpdate(d!.dataplane.maps.counters, key, v, 1, numPossibleCpus());
      let c: ReturnType<Daemon['counters']> | undefined;
      const reads = await countedReads(() => (c = d!.counters('active')));
      expect(reads).toEqual(perCpu({ ...wholeRange(), elements: MUP_EVENT_SLOTS + rule! + 1 }));
      expect(c!.functions.h_m_session_encaps).toEqual({ packets: 3n, bytes: 300n });
      expect(c!.rules.map((r) => [r.name, r.packets])).toEqual([['s1', 3n]]);
    } finally {
      await d!.deleteRule('session', { name: 's1' });
    }
    // Its slot is zeroed once the delete's grace period has passed (no packet can count into it then), its
    // count moved to the function's retired slot: the total does not go down (a Prometheus counter that
    // goes down reads as a reset). Before, the total fell back to 0 here.
    const slot = MUP_EVENT_SLOTS + sessionRule!;
    const deadline = Date.now() + 20_000;
    while (readSlotCounts(d!.dataplane.maps.counters, [slot], numPossibleCpus())[0]!.packets !== 0n && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(readSlotCounts(d!.dataplane.maps.counters, [slot], numPossibleCpus())[0]).toEqual({ packets: 0n, bytes: 0n });
    expect(d!.counters('all').functions.h_m_session_encaps).toEqual({ packets: 3n, bytes: 300n });
  });

  /** Write a rule's counter slot (on CPU 0) as the program would count it. */
  function setRuleSlot(name: string, packets: bigint): void {
    const dp = d!.dataplane;
    const c = d!.config;
    const p = c.policies.find((x) => x.name === name);
    const l = c.localsids.find((x) => x.name === name);
    const rule = p !== undefined ? dp.rules.policyRule(p.match) : dp.rules.localsidRule(l!.sid);
    const v = Buffer.alloc(COUNTER_STRIDE * numPossibleCpus());
    v.writeBigUInt64LE(packets, LAYOUTS.mup_counter.members.packets.offset);
    v.writeBigUInt64LE(packets * 100n, LAYOUTS.mup_counter.members.bytes.offset);
    const key = Buffer.alloc(4);
    key.writeUInt32LE(MUP_EVENT_SLOTS + rule!);
    counterUpdate(dp.maps.counters, key, v, 1, numPossibleCpus());
  }
});
