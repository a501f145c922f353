/**
 * The probe's view of bpf/mup_shared.h and bpf/probe.h: the fields appended
 * to struct mup_config, the ring buffer record, the probe payload and the
 * per-CPU state. src/dataplane/btf.ts checks every offset here against the
 * object's BTF (checkProbeLayouts) before the probe writes or reads a byte.
 */
import type { StructLayout } from './codec.js';

const m = (offset: number, size: number) => ({ offset, size });

export const PROBE_LAYOUTS = {
  mup_config: {
    size: 108, // LAYOUTS.mup_config.size (codec.ts): sessions appended
    members: { probe_flags: m(52, 4), probe_sample: m(56, 4), probe_udp_port: m(60, 2) },
  },
  mup_probe_record: {
    size: 88,
    members: {
      entry_ns: m(0, 8),
      exit_ns: m(8, 8),
      gap_ns: m(16, 8),
      seq: m(24, 4),
      run: m(28, 4),
      cpu: m(32, 4),
      ifindex: m(36, 4),
      rx_queue: m(40, 4),
      cpu_count: m(44, 4),
      fn: m(48, 1),
      verdict: m(49, 1),
      flags: m(50, 1),
      proto: m(51, 1),
      sport: m(52, 2),
      dport: m(54, 2),
      saddr: m(56, 16),
      daddr: m(72, 16),
    },
  },
  mup_probe_payload: { size: 16, members: { magic: m(0, 4), run: m(4, 4), seq: m(8, 4), dir: m(12, 1) } },
  mup_probe_cpu: {
    size: 48,
    members: { t0: m(0, 8), seen: m(8, 8), last_exit_ns: m(16, 8), ring_full: m(24, 8), recorded: m(32, 8), proto_in: m(40, 2), len_in: m(42, 2) },
  },
} as const satisfies Record<string, StructLayout>;

export const PROBE_ENUMS = {
  mup_probe_flag: { MUP_PROBE_ON: 1, MUP_PROBE_NO_MAC: 2 },
  mup_probe_fn: { MUP_PROBE_FN_GTP4D: 1, MUP_PROBE_FN_GTP4E: 2, MUP_PROBE_FN_GTP6E: 3, MUP_PROBE_FN_GTP6D: 4, MUP_PROBE_FN_SESSION: 5 },
  mup_probe_rec_flag: { MUP_PROBE_REC_SEQ: 1, MUP_PROBE_REC_MAC: 2, MUP_PROBE_REC_INNER_V6: 4 },
  mup_probe_magic: { MUP_PROBE_MAGIC: 0x4d555052 },
} as const satisfies Record<string, Record<string, number>>;

export const PROBE_ON = PROBE_ENUMS.mup_probe_flag.MUP_PROBE_ON;
export const PROBE_NO_MAC = PROBE_ENUMS.mup_probe_flag.MUP_PROBE_NO_MAC;
export const PROBE_MAGIC = PROBE_ENUMS.mup_probe_magic.MUP_PROBE_MAGIC;
export const REC_SEQ = PROBE_ENUMS.mup_probe_rec_flag.MUP_PROBE_REC_SEQ;
export const REC_MAC = PROBE_ENUMS.mup_probe_rec_flag.MUP_PROBE_REC_MAC;
export const REC_INNER_V6 = PROBE_ENUMS.mup_probe_rec_flag.MUP_PROBE_REC_INNER_V6;

/** The ring buffer map and the per-CPU state map (bpf/maps.h). */
export const MAP_PROBE_RING = 'mup_probe_ring';
export const MAP_PROBE_STATE = 'mup_probe_state';

export type ProbeFunction = 'h_m_gtp4_d' | 'end_m_gtp4_e' | 'end_m_gtp6_e' | 'end_m_gtp6_d' | 'h_m_session_encaps';
const FN_NAMES: Record<number, ProbeFunction> = { 1: 'h_m_gtp4_d', 2: 'end_m_gtp4_e', 3: 'end_m_gtp6_e', 4: 'end_m_gtp6_d', 5: 'h_m_session_encaps' };
const VERDICT_NAMES = ['aborted', 'drop', 'pass', 'tx', 'redirect'] as const;

/** One struct mup_probe_record, decoded. Times are CLOCK_MONOTONIC ns (bpf_ktime_get_ns). */
export interface ProbeRecord {
  readonly entryNs: bigint;
  readonly exitNs: bigint;
  /** entry - exit of the previous recorded frame on this CPU; 0n for the first. */
  readonly gapNs: bigint;
  /** From the probe payload; null when the inner packet was not a probe frame. */
  readonly seq: number | null;
  readonly run: number | null;
  readonly cpu: number;
  readonly ifindex: number;
  readonly rxQueue: number;
  readonly cpuCount: number;
  readonly fn: ProbeFunction | `fn_${number}`;
  readonly verdict: string;
  /** The entry time's low 46 bits were written into the frame's source MAC (macStampBytes). */
  readonly macStamped: boolean;
  readonly proto: number;
  readonly sport: number;
  readonly dport: number;
  /** Inner addresses: dotted IPv4 or hex IPv6 (uncompressed groups). */
  readonly src: string;
  readonly dst: string;
}

function addr(b: Buffer, v6: boolean): string {
  if (!v6) return [...b.subarray(0, 4)].join('.');
  const g: string[] = [];
  for (let i = 0; i < 16; i += 2) g.push(b.readUInt16BE(i).toString(16));
  return g.join(':');
}

export function decodeRecord(b: Buffer): ProbeRecord {
  const R = PROBE_LAYOUTS.mup_probe_record.members;
  if (b.length < PROBE_LAYOUTS.mup_probe_record.size) {
    throw new RangeError(`a probe record is ${PROBE_LAYOUTS.mup_probe_record.size} bytes, got ${b.length}`);
  }
  const flags = b[R.flags.offset]!;
  const v6 = (flags & REC_INNER_V6) !== 0;
  const hasSeq = (flags & REC_SEQ) !== 0;
  const fn = b[R.fn.offset]!;
  const verdict = b[R.verdict.offset]!;
  return {
    entryNs: b.readBigUInt64LE(R.entry_ns.offset),
    exitNs: b.readBigUInt64LE(R.exit_ns.offset),
    gapNs: b.readBigUInt64LE(R.gap_ns.offset),
    seq: hasSeq ? b.readUInt32LE(R.seq.offset) : null,
    run: hasSeq ? b.readUInt32LE(R.run.offset) : null,
    cpu: b.readUInt32LE(R.cpu.offset),
    ifindex: b.readUInt32LE(R.ifindex.offset),
    rxQueue: b.readUInt32LE(R.rx_queue.offset),
    cpuCount: b.readUInt32LE(R.cpu_count.offset),
    fn: FN_NAMES[fn] ?? `fn_${fn}`,
    verdict: VERDICT_NAMES[verdict] ?? `verdict_${verdict}`,
    macStamped: (flags & REC_MAC) !== 0,
    proto: b[R.proto.offset]!,
    sport: b.readUInt16LE(R.sport.offset),
    dport: b.readUInt16LE(R.dport.offset),
    src: addr(b.subarray(R.saddr.offset, R.saddr.offset + 16), v6),
    dst: addr(b.subarray(R.daddr.offset, R.daddr.offset + 16), v6),
  };
}

export type Direction = 'uplink' | 'downlink';

/** The inner UDP payload of a probe frame: magic, run, seq, direction, then zero padding to `len` (>= 16). */
export function encodePayload(run: number, seq: number, dir: Direction, len = PROBE_LAYOUTS.mup_probe_payload.size): Buffer {
  const P = PROBE_LAYOUTS.mup_probe_payload.members;
  if (len < PROBE_LAYOUTS.mup_probe_payload.size) throw new RangeError(`a probe payload is at least 16 bytes, got ${len}`);
  const b = Buffer.alloc(len);
  b.writeUInt32BE(PROBE_MAGIC, P.magic.offset);
  b.writeUInt32BE(run >>> 0, P.run.offset);
  b.writeUInt32BE(seq >>> 0, P.seq.offset);
  b[P.dir.offset] = dir === 'uplink' ? 0 : 1;
  return b;
}

export interface DecodedPayload {
  readonly run: number;
  readonly seq: number;
  readonly dir: Direction;
}

/** A probe payload at `at`, or null when the bytes there are not one. */
export function decodePayload(b: Buffer, at: number): DecodedPayload | null {
  const P = PROBE_LAYOUTS.mup_probe_payload.members;
  if (at < 0 || at + PROBE_LAYOUTS.mup_probe_payload.size > b.length) return null;
  if (b.readUInt32BE(at + P.magic.offset) !== PROBE_MAGIC) return null;
  const d = b[at + P.dir.offset]!;
  if (d > 1) return null;
  return { run: b.readUInt32BE(at + P.run.offset), seq: b.readUInt32BE(at + P.seq.offset), dir: d === 0 ? 'uplink' : 'downlink' };
}

/** Bits of the entry time a MAC stamp holds (docs/probe.md, "The MAC stamp"). */
export const MAC_STAMP_BITS = 46;

/**
 * The source MAC bpf/probe.h writes for entry time `t`: bits 45..40 in the
 * first octet above its U/L bit (1: locally administered) and I/G bit (0:
 * unicast), bits 39..0 big endian in the other five octets, so that the
 * stamped frame keeps a valid unicast source address.
 */
export function macStampBytes(t: bigint): Buffer {
  const b = Buffer.alloc(6);
  b[0] = Number(((t >> 40n) & 0x3fn) << 2n) | 0x02;
  b[1] = Number((t >> 32n) & 0xffn);
  b.writeUInt32BE(Number(t & 0xffffffffn), 2);
  return b;
}

/**
 * The entry time in a stamped frame's source MAC (46 bits, laid out as
 * macStampBytes), unwrapped to the full CLOCK_MONOTONIC value nearest `near`
 * (any monotonic time within 2^45 ns, about 9.7 hours, of the stamp: the
 * record's exit time, or the receive time converted to monotonic).
 */
export function macStamp(frame: Buffer, near: bigint): bigint {
  if (frame.length < 12) throw new RangeError('a frame shorter than two MAC addresses');
  const low = (BigInt(frame[6]! >> 2) << 40n) | (BigInt(frame[7]!) << 32n) | BigInt(frame.readUInt32BE(8));
  const span = 1n << BigInt(MAC_STAMP_BITS);
  let t = (near & ~(span - 1n)) | low;
  if (t - near > span / 2n) t -= span;
  else if (near - t > span / 2n) t += span;
  return t;
}
