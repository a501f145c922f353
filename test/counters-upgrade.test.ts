/**
 * An upgrade from a daemon whose counters were a PERCPU_ARRAY (one element
 * a slot) to the counters of now (a plain array, a copy of every slot per
 * CPU: bpf/maps.h). The daemon's pins are made such as an older daemon
 * left them (bpftool makes the per-CPU map in place of the counters pin);
 * the new daemon takes the tables over, keeps every rule and its id, pins
 * new counters with the old counts in them (each CPU's into its own copy),
 * and says so in its log. Pinned per-CPU
 * counters of other table sizes are refused as any table of other sizes
 * is. A real daemon process (bin/mup.js: run `make ts` first), no
 * interfaces; its pins and bpffs go in afterAll.
 */
import { existsSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { counterSlots, DEFAULT_OBJECT } from '../src/dataplane/index.js';
import { BPF_ANY, closeFd, mapInfo, mapUpdate, numPossibleCpus, objGet, testRun } from '../src/dataplane/libbpf.js';
import { BPF_MAP_TYPE_ARRAY, counterLookup } from '../src/dataplane/counter-map.js';
import { decodePercpuCounter, MUP_EVENT_SLOTS, MUP_RETIRED_SLOT } from '../src/dataplane/codec.js';
import { parseConfig } from '../src/config/load.js';
import { TestDaemon } from './helpers/daemon.js';

const isRoot = process.getuid?.() === 0;
const haveObject = existsSync(DEFAULT_OBJECT);
const CONFIG =
  'settings: { forwarding: tx, max_policies: 8, max_localsids: 4, max_sessions: 4 }\npolicies:\n' +
  '  - { name: a, match: 10.0.1.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64" }\n' +
  '  - { name: b, match: 10.0.2.0/24, sr_prefix: "2001:db8:2::/48", src_prefix: "2001:db8:ffff::/64" }\n';

interface Row {
  name: string;
  rule: number | null;
}

/** Type and size of the map pinned at `pin`. */
function pinned(pin: string): { type: number; maxEntries: number } {
  const fd = objGet(pin, 'counters');
  try {
    return mapInfo(fd, 'counters');
  } finally {
    closeFd(fd);
  }
}

/**
 * Put a PERCPU_ARRAY of `slots` slots where the counters are pinned, as an older daemon pinned them,
 * `seeded` slot -> packets: CPU c's copy holds (c + 1) x that many (bytes: 100 x packets).
 * Returns each seeded slot's value as written (every CPU's copy, the per-CPU layout).
 */
async function olderCounters(pin: string, slots: number, seeded: ReadonlyMap<number, number> = new Map()): Promise<Map<number, Buffer>> {
  unlinkSync(pin);
  await execa('bpftool', ['map', 'create', pin, 'type', 'percpu_array', 'key', '4', 'value', '16', 'entries', String(slots), 'name', 'mup_counters']);
  const fd = objGet(pin, 'counters');
  try {
    const n = numPossibleCpus();
    const out = new Map<number, Buffer>();
    for (const [slot, packets] of seeded) {
      const key = Buffer.alloc(4);
      key.writeUInt32LE(slot);
      const value = Buffer.alloc(16 * n);
      for (let c = 0; c < n; c++) {
        value.writeBigUInt64LE(BigInt((c + 1) * packets), 16 * c);
        value.writeBigUInt64LE(BigInt(100 * (c + 1) * packets), 16 * c + 8);
      }
      mapUpdate(fd, key, value, BPF_ANY, 'counters');
      out.set(slot, value);
    }
    return out;
  } finally {
    closeFd(fd);
  }
}

/** Slot `slot` of the counters pinned at `pin` (every CPU's copy, the per-CPU layout). */
function slotOf(pin: string, slot: number): Buffer {
  const fd = objGet(pin, 'counters');
  try {
    return counterLookup(fd, slot, numPossibleCpus());
  } finally {
    closeFd(fd);
  }
}

const packetsOf = (v: Buffer): number => Number(decodePercpuCounter(v, numPossibleCpus()).packets);

/** Packets in event slot 0 of the counters pinned at `pin`, after a frame the pinned program passes (not IP) ran through it. */
function countedByPinnedProgram(prog: string, pin: string): bigint {
  const p = objGet(prog, 'program');
  const m = objGet(pin, 'counters');
  try {
    const arp = Buffer.alloc(60);
    arp.writeUInt16BE(0x0806, 12);
    testRun(p, { dataIn: arp, dataOutSize: 128 });
    return decodePercpuCounter(counterLookup(m, 0, numPossibleCpus()), numPossibleCpus()).packets;
  } finally {
    closeFd(p);
    closeFd(m);
  }
}

describe.skipIf(!isRoot || !haveObject)('counters pinned by an older daemon (one per-CPU element a slot)', () => {
  const daemons: TestDaemon[] = [];
  afterAll(async () => {
    for (const d of daemons) await d.cleanup();
  });

  it('are replaced by new counters, pinned, with their counts; the rules and their ids stay; a free slot\'s count is retired', async () => {
    const d = new TestDaemon({ config: CONFIG, instance: `cntup${process.pid}` });
    daemons.push(d);
    await d.start();
    const pin = join(d.bpffs, 'mup', d.instance, 'counters');
    const slots = counterSlots(parseConfig(CONFIG, 'c.yaml'));
    expect(pinned(pin)).toMatchObject({ type: BPF_MAP_TYPE_ARRAY, maxEntries: slots * numPossibleCpus() });
    const rows = async (): Promise<Row[]> => ((await d.api('GET', '/v1/policies')).body as { policies: Row[] }).policies;
    const before = await rows();
    expect(before.map((r) => r.name)).toEqual(['a', 'b']);
    expect(before.every((r) => typeof r.rule === 'number')).toBe(true);
    expect(await d.stop('SIGTERM')).toBe(0);
    // An event's count, policy a's, and a free policy id's (a daemon killed before it zeroed a deleted rule's slot).
    const a = before.find((r) => r.name === 'a')!.rule!;
    const free = 7;
    expect(before.map((r) => r.rule)).not.toContain(free);
    const had = await olderCounters(pin, slots, new Map([[0, 9], [MUP_EVENT_SLOTS + a, 5], [MUP_EVENT_SLOTS + free, 3]]));
    await d.start();
    expect(((await d.api('GET', '/v1/status')).body as { adopted: boolean }).adopted).toBe(true);
    expect(d.log).toMatch(/the pinned counters were of an older layout/);
    // The program was loaded while the config was read, on the pins as they were then.
    expect(d.log).toMatch(/"programLoad":"early/);
    expect(pinned(pin)).toMatchObject({ type: BPF_MAP_TYPE_ARRAY, maxEntries: slots * numPossibleCpus() });
    expect((await rows()).map((r) => [r.name, r.rule])).toEqual(before.map((r) => [r.name, r.rule]));
    expect(d.log).toMatch(/"carried":3[,}]/);
    // The old map's counts are in the new one, each CPU's copy where it was: the event's and a's.
    const counts = async (): Promise<{ events: Record<string, { packets: number }>; functions: Record<string, { packets: number }> }> =>
      (await d.api('GET', '/v1/counters?rules=none')).body as { events: Record<string, { packets: number }>; functions: Record<string, { packets: number }> };
    expect(slotOf(pin, 0)).toEqual(had.get(0));
    expect(slotOf(pin, MUP_EVENT_SLOTS + a)).toEqual(had.get(MUP_EVENT_SLOTS + a));
    const event0 = packetsOf(had.get(0)!);
    expect((await counts()).events['pass_not_ip']!.packets).toBe(event0);
    const ruleA = await d.api('GET', '/v1/counters?rule=a');
    expect(ruleA.status, ruleA.text).toBe(200);
    expect((ruleA.body as { rule: { packets: number } }).rule.packets).toBe(packetsOf(had.get(MUP_EVENT_SLOTS + a)!));
    // The free slot's count was carried before the takeover's scan, which zeroed the slot and retired its
    // count into H.M.GTP4.D's retired slot (the first function's): in the total, and nowhere else.
    expect(packetsOf(slotOf(pin, MUP_EVENT_SLOTS + free))).toBe(0);
    expect(packetsOf(slotOf(pin, MUP_RETIRED_SLOT))).toBe(packetsOf(had.get(MUP_EVENT_SLOTS + free)!));
    expect((await counts()).functions['h_m_gtp4_d']!.packets).toBe(packetsOf(had.get(MUP_EVENT_SLOTS + a)!) + packetsOf(had.get(MUP_EVENT_SLOTS + free)!));
    // The running program counts into the pinned map.
    expect(countedByPinnedProgram(join(d.bpffs, 'mup', d.instance, 'prog'), pin)).toBe(BigInt(event0 + 1));
    expect((await counts()).events['pass_not_ip']!.packets).toBe(event0 + 1);
    // A restart now takes the new counters over as they are: no second replacement.
    expect(await d.stop('SIGTERM')).toBe(0);
    const id = pinned(pin);
    await d.start();
    expect(d.log.match(/the pinned counters were of an older layout/g)).toHaveLength(1);
    expect(pinned(pin)).toEqual(id);
  }, 60_000);

  it('of other table sizes are refused, as any pinned table of other sizes', async () => {
    const d = new TestDaemon({ config: CONFIG, instance: `cntsz${process.pid}` });
    daemons.push(d);
    await d.start();
    const pin = join(d.bpffs, 'mup', d.instance, 'counters');
    expect(await d.stop('SIGTERM')).toBe(0);
    await olderCounters(pin, counterSlots(parseConfig(CONFIG, 'c.yaml')) + 1);
    const r = await d.startFailing();
    expect(r.exitCode).not.toBe(0);
    expect(r.output).toMatch(/the existing mup_counters holds \d+ entries, the config asks for \d+/);
  }, 60_000);
});
