/**
 * The counter map (bpf/maps.h, mup_counters) read and written per slot, as
 * a per-CPU array's values would be: slot s's value is every CPU's copy of
 * it in CPU order, COUNTER_STRIDE bytes each. The map is a plain array of
 * slots x CPUs, CPU c's copy of slot s at element c * slots + s (slots:
 * its size over the possible CPUs), so a range of slots is read once per
 * CPU (from a mapping of the map from COUNTER_MMAP_FROM slots, else a
 * batch read), the copies then put side by side. Writes are batch
 * updates, an element per slot and CPU: their cost, and that of a lone
 * slot's read, grows with the CPUs.
 *
 * An older daemon pinned the counters as a PERCPU_ARRAY (one element a
 * slot): `isPercpuCounters` tells it apart, and the start makes a new map
 * instead, its counts added in (addOlderCounters; docs/daemon.md, "The
 * counters across an upgrade").
 */
import { COUNTER_STRIDE } from './codec.js';
import { mapInfo, mapLookupArrayRange, mapMmap, mapMunmap, mapUpdateBatch, noteMappedRead } from './libbpf.js';

const NAME = 'mup_counters';
/** enum bpf_map_type. */
export const BPF_MAP_TYPE_ARRAY = 2;
export const BPF_MAP_TYPE_PERCPU_ARRAY = 6;

/** Elements the counter map has for `slots` slots: a copy of each per possible CPU. */
export function counterElements(slots: number, ncpus: number): number {
  const n = slots * ncpus;
  // The key is a __u32, and the kernel's arrays index with one.
  if (!Number.isSafeInteger(n) || n > 0xffffffff) throw new RangeError(`${slots} counter slots x ${ncpus} CPUs is more than a BPF array holds (2^32 elements): lower the table sizes`);
  return n;
}

/** A pinned counter map of an older daemon: one per-CPU element a slot (addOlderCounters carries its counts over). */
export function isPercpuCounters(fd: number): boolean {
  return mapInfo(fd, NAME).type === BPF_MAP_TYPE_PERCPU_ARRAY;
}

/** Whether the counter slot at byte `at` of `raw` (`stride` bytes: every CPU's copy) is zero. */
export function slotIsZero(raw: Buffer, at: number, stride: number): boolean {
  for (let b = at; b < at + stride; b++) if (raw[b] !== 0) return false;
  return true;
}

/** Slots of the counter map `fd` (its elements over the CPUs). */
export function counterSlotsOf(fd: number, ncpus: number): number {
  return Math.floor(mapInfo(fd, NAME).maxEntries / ncpus);
}

const PAGE = 4096;
/** 64-bit words a slot's copy has (packets, bytes). */
const WORDS = COUNTER_STRIDE / 8;

/**
 * Ranges from this many slots are read through a read-only mapping of
 * each CPU's part of the map (mmapable: bpf/maps.h), unmapped after: a
 * batch read costs about 200 ns an element here, whatever its size
 * (131,136 slots x 2 CPUs: 59 ms), a copy from a mapping a few ns a slot.
 * Smaller ones, a batch read per CPU.
 */
export const COUNTER_MMAP_FROM = 64;

/**
 * Scratch for one CPU's part of a batch read (fewer than COUNTER_MMAP_FROM
 * slots), reused. Not small: a small typed array may live on V8's moving
 * heap, and koffi is given its address.
 */
const PART = { values: Buffer.from(new ArrayBuffer(Math.max(4096, COUNTER_MMAP_FROM * COUNTER_STRIDE))), keys: Buffer.from(new ArrayBuffer(4096)) };

/**
 * Run `use` on slots first..first+count-1 of CPU c's copies in a mapping
 * of the map (`view`: the ArrayBuffer of the mapping, `at`: the byte of
 * slot `first` in it), unmapped after: nothing of the mapping may outlive
 * `use`.
 */
function withCpuPart(fd: number, c: number, slots: number, first: number, count: number, readOnly: boolean, use: (view: ArrayBuffer, at: number) => void): void {
  const from = (c * slots + first) * COUNTER_STRIDE;
  const offset = Math.floor(from / PAGE) * PAGE;
  const m = mapMmap(fd, from + count * COUNTER_STRIDE - offset, NAME, offset, { readOnly });
  try {
    use(m.memory, from - offset);
  } finally {
    mapMunmap(m);
  }
}

/**
 * Slots first..first+count-1 of CPU c's copies, as 64-bit words (two a
 * slot), into `out` (Float64Array: an 8-byte load and store a word, so a
 * count the program writes meanwhile is never read half old, half new;
 * a count below 0x7ff0000000000000, about 9.2e18, is the bits of a finite
 * double and copies exactly) from word `at`, `step` words apart.
 */
function copyMapped(fd: number, c: number, slots: number, first: number, count: number, out: Float64Array, at: number, step: number): void {
  noteMappedRead(fd, count);
  withCpuPart(fd, c, slots, first, count, true, (view, byte) => {
    const src = new Float64Array(view, byte, count * WORDS);
    for (let i = 0, o = at, p = 0; i < count; i++, o += step) for (let w = 0; w < WORDS; w++) out[o + w] = src[p++]!;
  });
}

/**
 * Slots first..first+count-1, every CPU's copy (COUNTER_STRIDE * ncpus
 * bytes a slot), as mapLookupArrayRange reads a per-CPU array: into
 * `into.values` when given (the returned Buffer a view of it).
 */
export function counterRange(fd: number, first: number, count: number, ncpus: number, into?: { readonly values: Buffer; readonly keys: Buffer }): Buffer {
  const stride = COUNTER_STRIDE * ncpus;
  if (count === 0) return Buffer.alloc(0);
  const slots = counterSlotsOf(fd, ncpus);
  if (first < 0 || first + count > slots) throw new RangeError(`reading counter slots ${first}..${first + count - 1} of ${slots}`);
  if (into !== undefined && into.values.length < stride * count) throw new RangeError(`reading ${count} counter slots: the buffer given holds ${into.values.length} bytes`);
  const out = into?.values.subarray(0, stride * count) ?? Buffer.alloc(stride * count);
  if (count >= COUNTER_MMAP_FROM) {
    // Into `out` itself when it is 8-byte aligned (a Buffer of the pool may not be), else through an aligned copy.
    const aligned = out.byteOffset % 8 === 0;
    const words = aligned ? new Float64Array(out.buffer, out.byteOffset, out.length / 8) : new Float64Array(out.length / 8);
    for (let c = 0; c < ncpus; c++) copyMapped(fd, c, slots, first, count, words, c * WORDS, WORDS * ncpus);
    if (!aligned) Buffer.from(words.buffer).copy(out);
    return out;
  }
  if (ncpus === 1) return mapLookupArrayRange(fd, first, count, stride, NAME, into === undefined ? undefined : { values: out, keys: into.keys });
  for (let c = 0; c < ncpus; c++) {
    mapLookupArrayRange(fd, c * slots + first, count, COUNTER_STRIDE, NAME, PART);
    for (let i = 0; i < count; i++) PART.values.copy(out, i * stride + c * COUNTER_STRIDE, i * COUNTER_STRIDE, (i + 1) * COUNTER_STRIDE);
  }
  return out;
}

/** One slot's copies (COUNTER_STRIDE * ncpus bytes), as a per-CPU array's lookup gives them. */
export function counterLookup(fd: number, slot: number, ncpus: number): Buffer {
  return counterRange(fd, slot, 1, ncpus);
}

/**
 * Write `count` slots (their numbers: `keys`, u32 each; their values:
 * every CPU's copy in CPU order, as counterRange reads them) in one
 * BPF_MAP_UPDATE_BATCH.
 */
export function counterUpdate(fd: number, keys: Buffer, values: Buffer, count: number, ncpus: number): void {
  if (count === 0) return;
  const stride = COUNTER_STRIDE * ncpus;
  if (keys.length < 4 * count || values.length < stride * count) throw new RangeError(`writing ${count} counter slots: ${keys.length} key and ${values.length} value bytes given`);
  const slots = counterSlotsOf(fd, ncpus);
  const k = Buffer.allocUnsafe(4 * count * ncpus);
  const v = Buffer.allocUnsafe(COUNTER_STRIDE * count * ncpus);
  for (let c = 0, e = 0; c < ncpus; c++) {
    for (let i = 0; i < count; i++, e++) {
      const slot = keys.readUInt32LE(4 * i);
      if (slot >= slots) throw new RangeError(`writing counter slot ${slot} of ${slots}`);
      k.writeUInt32LE(c * slots + slot, 4 * e);
      values.copy(v, e * COUNTER_STRIDE, i * stride + c * COUNTER_STRIDE, i * stride + (c + 1) * COUNTER_STRIDE);
    }
  }
  mapUpdateBatch(fd, k, v, count * ncpus, NAME);
}

/** Slots of an older daemon's counters read per batch read when they are carried over. */
const CARRY_CHUNK = 65536;

/**
 * Add the counts of an older daemon's counters (`older`: a PERCPU_ARRAY
 * of as many slots, one element a slot) into this map's copies, each CPU's
 * into its own, through a writable mapping of each CPU's part. For a map
 * no program counts into yet (a start, before the swap): the adds race
 * nothing. Returns the slots that had a count.
 */
export function addOlderCounters(fd: number, older: number, ncpus: number): number {
  const slots = counterSlotsOf(fd, ncpus);
  const info = mapInfo(older, NAME);
  if (info.type !== BPF_MAP_TYPE_PERCPU_ARRAY || info.maxEntries !== slots || info.valueSize !== COUNTER_STRIDE) {
    throw new RangeError(
      `the older counters (type ${info.type}, ${info.maxEntries} elements of ${info.valueSize} bytes) are not ${slots} per-CPU slots of ${COUNTER_STRIDE} bytes: ` +
        'start with --replace-tables (fresh tables, the counters from zero)',
    );
  }
  const stride = COUNTER_STRIDE * ncpus;
  let carried = 0;
  for (let first = 0; first < slots; first += CARRY_CHUNK) {
    const n = Math.min(CARRY_CHUNK, slots - first);
    // A Buffer of its own (offset 0): its words are 8-byte aligned.
    const raw = mapLookupArrayRange(older, first, n, stride, NAME);
    const words = new BigUint64Array(raw.buffer, raw.byteOffset, raw.length / 8);
    const nonzero: number[] = [];
    for (let i = 0; i < n; i++) if (!slotIsZero(raw, i * stride, stride)) nonzero.push(i);
    if (nonzero.length === 0) continue;
    carried += nonzero.length;
    for (let c = 0; c < ncpus; c++) {
      withCpuPart(fd, c, slots, first, n, false, (view, byte) => {
        const dst = new BigUint64Array(view, byte, n * WORDS);
        // BigUint64Array stores wrap at 2^64, as the program's adds do.
        for (const i of nonzero) for (let w = 0; w < WORDS; w++) dst[i * WORDS + w] = dst[i * WORDS + w]! + words[(i * ncpus + c) * WORDS + w]!;
      });
    }
  }
  return carried;
}
