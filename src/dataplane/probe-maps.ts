/**
 * The probe's side of the data plane: switch the in-band stamps on and off
 * (the probe fields of struct mup_config, both copies), find the probe's maps
 * of a loaded program, read the ring buffer (libbpf's ring_buffer through
 * koffi) and the per-CPU probe counters.
 */
import koffi from 'koffi';
import type { TableFds } from './tables.js';
import { graceClock } from './grace.js';
import {
  LibbpfError,
  closeFd,
  mapInfo,
  mapLookup,
  mapUpdate,
  numPossibleCpus,
  synchronizeRcu,
  BPF_ANY,
} from './libbpf.js';
import { MAP_PROBE_RING, MAP_PROBE_STATE, PROBE_LAYOUTS, PROBE_NO_MAC, PROBE_ON, decodeRecord, type ProbeRecord } from './probe-layout.js';

const lib = koffi.load('libbpf.so.1');

type Ptr = bigint | null;
const SampleFn = koffi.proto('int mup_probe_sample_fn(void *ctx, void *data, size_t size)');
const rb = {
  create: lib.func('void *ring_buffer__new(int map_fd, mup_probe_sample_fn *sample_cb, void *ctx, const void *opts)') as unknown as (
    fd: number,
    cb: unknown,
    ctx: Ptr,
    opts: Ptr,
  ) => Ptr,
  consume: lib.func('int ring_buffer__consume(void *rb)') as unknown as (r: Ptr) => number,
  free: lib.func('void ring_buffer__free(void *rb)') as unknown as (r: Ptr) => void,
  progInfo: lib.func('int bpf_obj_get_info_by_fd(int bpf_fd, void *info, _Inout_ uint32_t *info_len)') as unknown as (
    fd: number,
    info: Buffer,
    len: number[],
  ) => number,
  progFdById: lib.func('int bpf_prog_get_fd_by_id(uint32_t id)') as unknown as (id: number) => number,
  mapFdById: lib.func('int bpf_map_get_fd_by_id(uint32_t id)') as unknown as (id: number) => number,
};

function errnoOf(ret: number): number {
  return ret < 0 ? -ret : koffi.errno();
}

/** What the probe selects and how (struct mup_config's probe fields). */
export interface ProbeSelector {
  readonly enabled: boolean;
  /** Inner UDP destination port; 0 or undefined: every translated inner packet. */
  readonly udpPort?: number;
  /** Record 1 in N selected frames per CPU; 1 or undefined: every one. */
  readonly sample?: number;
  /** Record, but leave the source MAC as the translation wrote it. */
  readonly noMac?: boolean;
}

/** Checks a selector from the edge (CLI, API): a message per bad field. */
export function checkSelector(s: ProbeSelector): void {
  if (s.udpPort !== undefined && !(Number.isInteger(s.udpPort) && s.udpPort >= 0 && s.udpPort <= 65535)) {
    throw new RangeError(`probe udp_port must be an integer 0..65535 (0: any), got ${s.udpPort}`);
  }
  if (s.sample !== undefined && !(Number.isInteger(s.sample) && s.sample >= 1 && s.sample <= 0xffffffff)) {
    throw new RangeError(`probe sample must be an integer >= 1 (1 in N), got ${s.sample}`);
  }
}

const PC = PROBE_LAYOUTS.mup_config.members;

function encodeSelector(s: ProbeSelector, b: Buffer, at: number): void {
  const flags = s.enabled ? PROBE_ON | (s.noMac === true ? PROBE_NO_MAC : 0) : 0;
  b.writeUInt32LE(flags, at + PC.probe_flags.offset);
  b.writeUInt32LE(s.sample ?? 1, at + PC.probe_sample.offset);
  b.writeUInt16LE(s.udpPort ?? 0, at + PC.probe_udp_port.offset);
}

/** The selector the program reads now. */
export function readSelector(fds: Pick<TableFds, 'configFd' | 'configSize' | 'configOffsets' | 'selOffset'>): ProbeSelector {
  const cur = mapLookup(fds.configFd, Buffer.alloc(4), fds.configSize, 'mup_cfgs');
  if (cur === undefined) throw new Error('the configuration map has no value');
  const at = fds.configOffsets[(cur.readUInt32LE(fds.selOffset) & 1) as 0 | 1];
  const flags = cur.readUInt32LE(at + PC.probe_flags.offset);
  return {
    enabled: (flags & PROBE_ON) !== 0,
    udpPort: cur.readUInt16LE(at + PC.probe_udp_port.offset),
    sample: Math.max(1, cur.readUInt32LE(at + PC.probe_sample.offset)),
    noMac: (flags & PROBE_NO_MAC) !== 0,
  };
}

/**
 * Copy the active mup_config into the idle copy with the new selector, flip,
 * wait an RCU grace period, then make the retired copy the same: the table
 * code (src/dataplane/tables.ts) rewrites only its own fields of the idle
 * copy, so both copies must carry the probe's. Synchronous, like the
 * table code: the two never interleave in one process.
 */
export function writeSelector(fds: Pick<TableFds, 'configFd' | 'configSize' | 'configOffsets' | 'selOffset'>, s: ProbeSelector): void {
  checkSelector(s);
  // The table code's last flip may still have packets on the idle copy (src/dataplane/grace.ts).
  graceClock.waitSync(graceClock.requested);
  const key = Buffer.alloc(4);
  const cur = mapLookup(fds.configFd, key, fds.configSize, 'mup_cfgs');
  if (cur === undefined) throw new Error('the configuration map has no value');
  const sel = (cur.readUInt32LE(fds.selOffset) & 1) as 0 | 1;
  const next = (sel ^ 1) as 0 | 1;
  // The idle copy is the one the table code retired: it may hold older
  // prefix-length lists. Start from the active copy, change only the probe.
  const size = PROBE_LAYOUTS.mup_config.size;
  cur.copy(cur, fds.configOffsets[next], fds.configOffsets[sel], fds.configOffsets[sel] + size);
  encodeSelector(s, cur, fds.configOffsets[next]);
  mapUpdate(fds.configFd, key, cur, BPF_ANY, 'mup_cfgs');
  cur.writeUInt32LE(next, fds.selOffset);
  mapUpdate(fds.configFd, key, cur, BPF_ANY, 'mup_cfgs');
  synchronizeRcu();
  cur.copy(cur, fds.configOffsets[sel], fds.configOffsets[next], fds.configOffsets[next] + size);
  mapUpdate(fds.configFd, key, cur, BPF_ANY, 'mup_cfgs');
}

/** Map ids of a loaded program (BPF_OBJ_GET_INFO_BY_FD with map_ids). */
export function programMapIds(progFd: number): number[] {
  const info = Buffer.alloc(232);
  const ids = Buffer.alloc(4 * 64);
  info.writeUInt32LE(64, 52); // nr_map_ids
  info.writeBigUInt64LE(BigInt(koffi.address(ids)), 56); // map_ids
  const ret = rb.progInfo(progFd, info, [info.length]);
  if (ret < 0) throw new LibbpfError('reading the map ids of the data plane program', errnoOf(ret));
  const n = Math.min(info.readUInt32LE(52), 64);
  return Array.from({ length: n }, (_, i) => ids.readUInt32LE(4 * i));
}

/** The probe's maps of a loaded data plane program; the caller closes the fds (closeProbeMaps). */
export interface ProbeMaps {
  readonly ringFd: number;
  readonly stateFd: number;
  readonly ringBytes: number;
}

/** Open the probe's maps of the program `progFd` (or of program id `progId`). */
/**
 * Open the maps called `names` among a loaded program's maps (by fd, or by
 * id); the caller closes the fds. A name the program has no map of is
 * missing from the result.
 */
export function openProgramMaps(prog: { fd: number } | { id: number }, names: readonly string[]): Map<string, { fd: number; bytes: number }> {
  let progFd: number;
  let ownProg = false;
  if ('fd' in prog) {
    progFd = prog.fd;
  } else {
    progFd = rb.progFdById(prog.id);
    if (progFd < 0) throw new LibbpfError(`opening BPF program id ${prog.id} (is the daemon still running?)`, errnoOf(progFd));
    ownProg = true;
  }
  const found = new Map<string, { fd: number; bytes: number }>();
  try {
    for (const id of programMapIds(progFd)) {
      const fd = rb.mapFdById(id);
      if (fd < 0) throw new LibbpfError(`opening BPF map id ${id}`, errnoOf(fd));
      const info = mapInfo(fd, `map id ${id}`);
      if (names.includes(info.name) && !found.has(info.name)) {
        found.set(info.name, { fd, bytes: info.maxEntries });
      } else {
        closeFd(fd);
      }
    }
  } catch (e) {
    for (const v of found.values()) closeFd(v.fd);
    throw e;
  } finally {
    if (ownProg) closeFd(progFd);
  }
  return found;
}

export function openProbeMaps(prog: { fd: number } | { id: number }): ProbeMaps {
  const found = openProgramMaps(prog, [MAP_PROBE_RING, MAP_PROBE_STATE]);
  const ring = found.get(MAP_PROBE_RING);
  const state = found.get(MAP_PROBE_STATE);
  if (ring === undefined || state === undefined) {
    for (const v of found.values()) closeFd(v.fd);
    throw new Error(
      `the data plane program has no ${ring === undefined ? MAP_PROBE_RING : MAP_PROBE_STATE} map: ` +
        'it was built without the latency probe (bpf/probe.h); rebuild with `make bpf` and reload it',
    );
  }
  return { ringFd: ring.fd, stateFd: state.fd, ringBytes: ring.bytes };
}

export function closeProbeMaps(m: ProbeMaps): void {
  closeFd(m.ringFd);
  closeFd(m.stateFd);
}

/** The per-CPU probe counters, summed. */
export interface ProbeCounters {
  /** Frames that matched the selector (before 1-in-N sampling). */
  readonly seen: bigint;
  readonly recorded: bigint;
  /** Records lost because the ring buffer was full (the reader was too slow). */
  readonly ringFull: bigint;
}

export function readProbeCounters(stateFd: number): ProbeCounters {
  const ncpus = numPossibleCpus();
  const stride = Math.ceil(PROBE_LAYOUTS.mup_probe_cpu.size / 8) * 8;
  const v = mapLookup(stateFd, Buffer.alloc(4), stride * ncpus, MAP_PROBE_STATE);
  const S = PROBE_LAYOUTS.mup_probe_cpu.members;
  let seen = 0n;
  let recorded = 0n;
  let ringFull = 0n;
  for (let cpu = 0; v !== undefined && cpu < ncpus; cpu++) {
    seen += v.readBigUInt64LE(cpu * stride + S.seen.offset);
    recorded += v.readBigUInt64LE(cpu * stride + S.recorded.offset);
    ringFull += v.readBigUInt64LE(cpu * stride + S.ring_full.offset);
  }
  return { seen, recorded, ringFull };
}

/**
 * The ring buffer's reader. drain() takes every record there now (never
 * waits), so a caller polls it from a timer without blocking the event loop.
 */
export class ProbeRing {
  #rb: Ptr;
  #cb: unknown;
  #batch: ProbeRecord[] = [];
  #bad = 0;

  constructor(ringFd: number) {
    this.#cb = koffi.register((_ctx: Ptr, data: Ptr, size: number): number => {
      if (size < PROBE_LAYOUTS.mup_probe_record.size || data === null) {
        this.#bad++;
        return 0;
      }
      const bytes = Buffer.from(koffi.view(data, PROBE_LAYOUTS.mup_probe_record.size) as ArrayBuffer);
      this.#batch.push(decodeRecord(bytes));
      return 0;
    }, koffi.pointer(SampleFn));
    this.#rb = rb.create(ringFd, this.#cb, null, null);
    if (this.#rb === null) {
      koffi.unregister(this.#cb as never);
      throw new LibbpfError('opening the probe ring buffer (ring_buffer__new)', koffi.errno());
    }
  }

  /** Records of a size other than struct mup_probe_record's (none expected). */
  get malformed(): number {
    return this.#bad;
  }

  drain(): ProbeRecord[] {
    if (this.#rb === null) throw new Error('the probe ring buffer reader is closed');
    const ret = rb.consume(this.#rb);
    if (ret < 0) throw new LibbpfError('reading the probe ring buffer', -ret);
    const out = this.#batch;
    this.#batch = [];
    return out;
  }

  close(): void {
    if (this.#rb === null) return;
    rb.free(this.#rb);
    this.#rb = null;
    koffi.unregister(this.#cb as never);
  }
}
