/**
 * The RFC 2544 benchmark's paced generator (bpf/bench/pacedgen.bpf.c) and the
 * device-under-test helpers of bpf/bench/dutaux.bpf.c (a deliberately slow
 * forwarder, a burst meter).
 *
 * Why paced in BPF: a live-frame BPF_PROG_TEST_RUN call costs milliseconds
 * of set-up (a page pool per call, and its teardown waits for an RCU grace
 * period: tens of milliseconds on a loaded host), so pacing by many small
 * calls from user space cannot reach even 0.1 Mpps, and few large calls
 * land as bursts of thousands of frames at the generator's full speed.
 * Here one call sends a whole slice of a trial, and the program itself
 * holds each frame until its time; the kernel flushes XDP_TX frames once
 * per batch (`batch` frames), which is the burst the device under test
 * sees.
 */
import { fileURLToPath } from 'node:url';
import { inNetns, ifIndex } from '../../dataplane/netns.js';
import { testRunLive } from '../../packet/live-frames.js';
import {
  findMap, findProgram, mapFd, mapLookup, mapUpdate, numPossibleCpus, objectClose, objectLoad,
  objectOpen, programFd, type BpfObject,
} from '../../dataplane/libbpf.js';
import type { GenFrame } from '../../packet/generator.js';

const obj = (name: string): string => fileURLToPath(new URL(`../../../build/${name}.bpf.o`, import.meta.url));
export const PACEDGEN_OBJECT = obj('pacedgen');
export const DUTAUX_OBJECT = obj('dutaux');

/** bpf/bench/rfc2544.h */
const TGEN_HEAD_MAX = 128;
const TMPL_SIZE = 16 + TGEN_HEAD_MAX;
const CFG_SIZE = TMPL_SIZE + 16 + 16;
const STATE_SIZE = 4 * 8;
const BURST_BUCKETS = 16;
const BURST_SIZE = (3 + BURST_BUCKETS) * 8;

/** Frames per kernel batch (BPF_PROG_TEST_RUN batch_size, at most 256): the burst the DUT sees. */
export const PACED_BATCH = 16;
/**
 * How far behind its pace the generator may catch up, in frames: after a
 * preemption (a sink's NAPI thread, another process) the batches due go out
 * back to back up to this many frames, a quarter of the DUT's 256-frame
 * ring; beyond it the pace restarts (the frames are not sent: a shorter
 * trial rate, counted `late`).
 */
export const PACED_CATCHUP = 64;

/** Where the program waits for the pace: at each kernel batch (default) or before every frame. */
export type PaceAt = 'batch' | 'frame';

function loaded(path: string): BpfObject {
  const o = objectOpen(path);
  try {
    objectLoad(o, path);
  } catch (e) {
    objectClose(o);
    throw e;
  }
  return o;
}

const u32 = (n: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n >>> 0);
  return b;
};

function perCpuSum(fd: number, size: number, what: string): bigint[] {
  const ncpu = numPossibleCpus();
  const stride = Math.ceil(size / 8) * 8;
  const v = mapLookup(fd, u32(0), stride * ncpu, what);
  const out = new Array<bigint>(size / 8).fill(0n);
  for (let c = 0; v && c < ncpu; c++) for (let i = 0; i < size / 8; i++) out[i]! += v.readBigUInt64LE(c * stride + i * 8);
  return out;
}

/** A second per-frame field: a big-endian u32 (the GTP-U TEID) cycled through `count` values. */
export interface VariedU32 {
  off: number;
  base: number;
  count: number;
}

export interface PacedGenFrame extends GenFrame {
  teid?: VariedU32;
}

export class PacedGenerator {
  readonly #obj: BpfObject;
  readonly #prog: number;
  readonly #cfg: number;
  readonly #state: number;
  readonly batch: number;
  readonly paceAt: PaceAt;
  readonly catchUp: number;
  #tmpl: Buffer | undefined;
  #frame: Buffer | undefined;
  #ctx: Buffer | undefined;
  #netns: string | undefined;
  #rate = Infinity;

  constructor(batch = PACED_BATCH, o: { paceAt?: PaceAt; catchUp?: number } = {}) {
    if (!Number.isInteger(batch) || batch < 1 || batch > 256) throw new RangeError(`batch ${batch}: 1..256 frames`);
    this.batch = batch;
    this.paceAt = o.paceAt ?? 'batch';
    this.catchUp = Math.max(batch, o.catchUp ?? PACED_CATCHUP);
    this.#obj = loaded(PACEDGEN_OBJECT);
    this.#prog = programFd(findProgram(this.#obj, 'pgen_xmit'));
    this.#cfg = mapFd(findMap(this.#obj, 'pgen_cfg_map'));
    this.#state = mapFd(findMap(this.#obj, 'pgen_state_map'));
  }

  /** Frames leave by `ifname` in namespace `netns` (into its veth peer). */
  configure(g: PacedGenFrame, ifname: string, netns: string): void {
    const f = g.frame;
    if (f.length < 60 || f.length > 3520) throw new RangeError(`frame of ${f.length} bytes: 60..3520 for live frames`);
    const head = Math.min(TGEN_HEAD_MAX, f.length & ~7);
    for (const [what, off, len] of [['source port', g.sportOff, 2], ['TEID', g.teid?.off ?? 0, 4]] as const) {
      if (off !== 0 && off + len > head) throw new RangeError(`${what} offset ${off} outside the rewritten head of the frame (${head} bytes)`);
    }
    const t = Buffer.alloc(CFG_SIZE);
    t.writeUInt32LE(f.length, 0);
    t.writeUInt32LE(head, 4);
    t.writeUInt16LE(g.sportOff, 8);
    t.writeUInt16LE(g.sportBase, 10);
    t.writeUInt16LE(g.flows, 12);
    f.copy(t, 16, 0, head);
    t.writeUInt16LE(this.paceAt === 'batch' ? this.batch : 0, TMPL_SIZE + 2);
    if (g.teid !== undefined) {
      t.writeUInt16LE(g.teid.off, TMPL_SIZE);
      t.writeUInt32LE(g.teid.base >>> 0, TMPL_SIZE + 4);
      t.writeUInt32LE(g.teid.count >>> 0, TMPL_SIZE + 8);
    }
    this.#tmpl = t;
    const ctx = Buffer.alloc(24);
    ctx.writeUInt32LE(f.length, 4);
    ctx.writeUInt32LE(ifIndex(ifname, netns), 12);
    this.#frame = Buffer.from(f);
    this.#ctx = ctx;
    this.#netns = netns;
    this.setRate(this.#rate);
  }

  /** Offered rate in frames per second (Infinity: as fast as the generator goes). */
  setRate(fps: number): void {
    if (!(fps > 0)) throw new RangeError(`rate ${fps}: must be > 0 frames per second`);
    this.#rate = fps;
    if (this.#tmpl === undefined) return;
    const interval = Number.isFinite(fps) ? BigInt(Math.max(1, Math.round(1e12 / fps))) : 0n;
    this.#tmpl.writeBigUInt64LE(interval, TMPL_SIZE + 16);
    // The generator may catch up at most catchUp frames behind the pace, no more.
    this.#tmpl.writeBigUInt64LE(interval * BigInt(this.catchUp), TMPL_SIZE + 24);
    mapUpdate(this.#cfg, u32(0), this.#tmpl, undefined, 'pgen_cfg_map');
  }

  get rate(): number {
    return this.#rate;
  }

  /** Send `n` frames at the set rate: one BPF_PROG_TEST_RUN (blocks for n / rate seconds). Returns n. */
  send(n: number): number {
    if (this.#frame === undefined || this.#ctx === undefined) throw new Error('PacedGenerator.send() before configure()');
    const frame = this.#frame;
    const ctx = this.#ctx;
    inNetns(this.#netns, () => testRunLive(this.#prog, { dataIn: frame, ctxIn: ctx, repeat: n, batchSize: this.batch }, 'pgen_xmit'));
    return n;
  }

  /** Frames sent, frames that found the pace behind, nanoseconds spent waiting for it (all CPUs, since load). */
  state(): { sent: number; late: number; spunNs: number } {
    const [seq, , late, spun] = perCpuSum(this.#state, STATE_SIZE, 'pgen_state_map');
    return { sent: Number(seq), late: Number(late), spunNs: Number(spun) };
  }

  close(): void {
    objectClose(this.#obj);
  }
}

/** The slow forwarder and the burst meter (bpf/bench/dutaux.bpf.c). */
export class DutAux {
  readonly #obj: BpfObject;
  readonly #cfg: number;
  readonly #burst: number;
  readonly slowFd: number;
  readonly meterFd: number;
  #spinNs = 0;
  #gapNs = 1000;

  constructor() {
    this.#obj = loaded(DUTAUX_OBJECT);
    this.#cfg = mapFd(findMap(this.#obj, 'aux_cfg_map'));
    this.#burst = mapFd(findMap(this.#obj, 'burst_map'));
    this.slowFd = programFd(findProgram(this.#obj, 'slow_l3fwd'));
    this.meterFd = programFd(findProgram(this.#obj, 'burst_meter'));
  }

  #write(): void {
    const b = Buffer.alloc(16);
    b.writeBigUInt64LE(BigInt(this.#spinNs), 0);
    b.writeBigUInt64LE(BigInt(this.#gapNs), 8);
    mapUpdate(this.#cfg, u32(0), b, undefined, 'aux_cfg_map');
  }

  /** slow_l3fwd spins this long per frame before forwarding. */
  setSpin(ns: number): void {
    this.#spinNs = Math.max(0, Math.round(ns));
    this.#write();
  }

  /** The burst meter: frames closer than `gapNs` belong to one burst. Clears its histogram. */
  resetMeter(gapNs: number): void {
    this.#gapNs = Math.max(1, Math.round(gapNs));
    this.#write();
    const ncpu = numPossibleCpus();
    mapUpdate(this.#burst, u32(0), Buffer.alloc(BURST_SIZE * ncpu), undefined, 'burst_map');
  }

  /** Bursts by log2 of their length (bucket i: 2^i .. 2^(i+1) − 1 frames), and the frames counted. */
  bursts(): { frames: number; hist: number[] } {
    const v = perCpuSum(this.#burst, BURST_SIZE, 'burst_map');
    // Each CPU's run still open at the end counts too: the last burst.
    const hist = v.slice(3).map(Number);
    const open = Number(v[1]);
    if (open > 0) hist[Math.min(BURST_BUCKETS - 1, Math.floor(Math.log2(open)))]! += 1;
    return { frames: Number(v[2]), hist };
  }

  close(): void {
    objectClose(this.#obj);
  }
}
