/**
 * The counter map is a plain array of every CPU's copy of every slot
 * (bpf/maps.h, src/dataplane/counter-map.ts): a packet counted on CPU c
 * lands in element c * slots + slot, and a read puts the copies side by
 * side as a per-CPU array's would be. A child process pinned to one CPU
 * (taskset) loads the program unpinned, runs frames through it
 * (BPF_PROG_TEST_RUN runs on the caller's CPU) and reads the slot back;
 * the copies of the other CPUs stay zero. Then the accessors themselves:
 * a range read and a write of slots with a different value per CPU, and
 * their refusals.
 */
import { existsSync, readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { COUNTER_STRIDE, LAYOUTS } from '../src/dataplane/codec.js';
import { COUNTER_MMAP_FROM, counterElements, counterLookup, counterRange, counterSlotsOf, counterUpdate } from '../src/dataplane/counter-map.js';
import { counterSlots, DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { mapInfo, numPossibleCpus } from '../src/dataplane/libbpf.js';
import { runDistChild } from './helpers/dist-child.js';

const isRoot = process.getuid?.() === 0;
const haveObject = existsSync(DEFAULT_OBJECT);
const NCPUS = numPossibleCpus();
/** CPUs this process may run on (and so its child under taskset): online, in its cpuset. */
const ALLOWED = ((): number[] => {
  const list = /^Cpus_allowed_list:\s*(.+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '';
  return list.split(',').flatMap((r) => {
    const [a, b] = r.split('-').map(Number);
    return Number.isInteger(a) ? Array.from({ length: (b ?? a!) - a! + 1 }, (_, i) => a! + i) : [];
  });
})();
/** The lowest and the highest of them: the first CPU's copy and one far from it. */
const CPUS = ALLOWED.length < 2 ? [] : [ALLOWED[0]!, ALLOWED[ALLOWED.length - 1]!];
const PACKETS = LAYOUTS.mup_counter.members.packets.offset;
const BYTES = LAYOUTS.mup_counter.members.bytes.offset;
const SETTINGS = 'settings: { forwarding: tx, max_policies: 8, max_localsids: 4, max_sessions: 4 }\n';

/** Packets of each CPU's copy in a slot's value (COUNTER_STRIDE bytes a CPU). */
const copies = (v: Buffer): bigint[] => Array.from({ length: NCPUS }, (_, c) => v.readBigUInt64LE(c * COUNTER_STRIDE + PACKETS));

describe.skipIf(!isRoot || !haveObject)('the counter map: a copy of every slot per CPU', () => {
  // Only with more than one CPU is there a copy other than the first's to miss.
  it.skipIf(CPUS.length < 2).each(CPUS)('a frame run on CPU %i counts in that CPU\'s copy only; the totals sum every copy', (cpu) => {
    const n = 3 + cpu;
    const out = runDistChild(
      { openDataplane: 'dataplane/dataplane.js', parseConfig: 'config/load.js', counterLookup: 'dataplane/counter-map.js', numPossibleCpus: 'dataplane/libbpf.js' },
      `
const dp = openDataplane({ config: parseConfig(${JSON.stringify(SETTINGS)}, 'c.yaml') });
const arp = Buffer.alloc(60);
arp.writeUInt16BE(0x0806, 12);
let event;
for (let i = 0; i < ${n}; i++) event = dp.run(arp).event;
const total = dp.counters(undefined, { rules: 'none' }).events[event].packets;
const slot = counterLookup(dp.tables.countersFd, 0, numPossibleCpus());
dp.close();
process.stdout.write(JSON.stringify({ event, total: String(total), slot: slot.toString('hex') }));
`,
      {},
      { cpu },
    );
    const r = JSON.parse(out) as { event: string; total: string; slot: string };
    // An ARP frame is not IP: passed to the stack, counted in event slot 0.
    expect(r.event).toBe('pass_not_ip');
    expect(BigInt(r.total)).toBe(BigInt(n));
    const want = Array.from({ length: NCPUS }, (_, c) => (c === cpu ? BigInt(n) : 0n));
    expect(copies(Buffer.from(r.slot, 'hex'))).toEqual(want);
  });

  describe('reads and writes', () => {
    let dp: Dataplane | undefined;
    afterEach(() => {
      dp?.close();
      dp = undefined;
    });

    it('is sized slots x CPUs; a range read gives each slot its copies side by side, as written', () => {
      // Room for ranges that span pages (a CPU's part: 16 bytes a slot).
      const config = parseConfig('settings: { forwarding: tx, max_policies: 1000, max_localsids: 4, max_sessions: 4 }\n', 'c.yaml');
      dp = openDataplane({ config });
      const fd = dp.tables.countersFd;
      const slots = counterSlots(config);
      expect(mapInfo(fd).maxEntries).toBe(counterElements(slots, NCPUS));
      expect(counterSlotsOf(fd, NCPUS)).toBe(slots);
      // Slots 70, 71 and the last: a value of its own for each CPU's copy.
      const at = [70, 71, slots - 1];
      const keys = Buffer.alloc(4 * at.length);
      const values = Buffer.alloc(COUNTER_STRIDE * NCPUS * at.length);
      at.forEach((slot, i) => {
        keys.writeUInt32LE(slot, 4 * i);
        for (let c = 0; c < NCPUS; c++) {
          values.writeBigUInt64LE(BigInt(1000 * slot + c), (i * NCPUS + c) * COUNTER_STRIDE + PACKETS);
          values.writeBigUInt64LE(BigInt(7 * slot + c), (i * NCPUS + c) * COUNTER_STRIDE + BYTES);
        }
      });
      counterUpdate(fd, keys, values, at.length, NCPUS);
      expect(counterLookup(fd, 71, NCPUS)).toEqual(values.subarray(COUNTER_STRIDE * NCPUS, 2 * COUNTER_STRIDE * NCPUS));
      const range = counterRange(fd, 69, 4, NCPUS);
      expect(range.subarray(0, COUNTER_STRIDE * NCPUS)).toEqual(Buffer.alloc(COUNTER_STRIDE * NCPUS));
      expect(range.subarray(COUNTER_STRIDE * NCPUS, 3 * COUNTER_STRIDE * NCPUS)).toEqual(values.subarray(0, 2 * COUNTER_STRIDE * NCPUS));
      expect(counterLookup(fd, slots - 1, NCPUS)).toEqual(values.subarray(2 * COUNTER_STRIDE * NCPUS));
      // Into a buffer at an odd offset (a Buffer of the pool can be): the same bytes.
      const odd = Buffer.alloc(1 + 4 * COUNTER_STRIDE * NCPUS);
      counterRange(fd, 69, 4, NCPUS, { values: odd.subarray(1), keys: Buffer.alloc(16) });
      expect(odd.subarray(1)).toEqual(range);
      // From COUNTER_MMAP_FROM slots a range is copied from a mapping of each CPU's part: the same bytes as the
      // slots read one by one (a batch read), from a slot inside a page to the last, into an aligned buffer or not.
      const from = slots - 300;
      const one = (first: number, count: number): Buffer => Buffer.concat(Array.from({ length: count }, (_, i) => counterLookup(fd, first + i, NCPUS)));
      const mapped = counterRange(fd, from, 300, NCPUS);
      expect(300).toBeGreaterThanOrEqual(COUNTER_MMAP_FROM);
      expect(mapped).toEqual(one(from, 300));
      expect(mapped.subarray(299 * COUNTER_STRIDE * NCPUS)).toEqual(values.subarray(2 * COUNTER_STRIDE * NCPUS));
      const low = counterRange(fd, 7, 100, NCPUS);
      expect(low).toEqual(one(7, 100));
      expect(copies(low.subarray((70 - 7) * COUNTER_STRIDE * NCPUS))).toEqual(Array.from({ length: NCPUS }, (_, c) => BigInt(70_000 + c)));
      const unaligned = Buffer.alloc(3 + 100 * COUNTER_STRIDE * NCPUS);
      counterRange(fd, 7, 100, NCPUS, { values: unaligned.subarray(3), keys: Buffer.alloc(400) });
      expect(unaligned.subarray(3)).toEqual(low);
    });

    it('refuses slots past the end, and more elements than a BPF array holds', () => {
      const config = parseConfig(SETTINGS, 'c.yaml');
      dp = openDataplane({ config });
      const fd = dp.tables.countersFd;
      const slots = counterSlots(config);
      expect(() => counterRange(fd, slots - 1, 2, NCPUS)).toThrow(/counter slots/);
      const key = Buffer.alloc(4);
      key.writeUInt32LE(slots);
      expect(() => counterUpdate(fd, key, Buffer.alloc(COUNTER_STRIDE * NCPUS), 1, NCPUS)).toThrow(/counter slot/);
      expect(() => counterElements(2 ** 30, 8)).toThrow(/more than a BPF array holds/);
    });
  });
});
