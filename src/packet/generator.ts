/**
 * The BPF side of the RFC 2544 benchmark and of `mup probe --sweep`'s
 * background load: the traffic generator (live-frame BPF_PROG_TEST_RUN of
 * bpf/bench/trafficgen.bpf.c), the counting sink (bpf/bench/sink.bpf.c) and the XDP L3
 * forwarder baseline (bpf/bench/l3fwd.bpf.c).
 * Objects are loaded from the root namespace; sends and attachments happen
 * inside the lab's namespaces with setns() on this thread (inNetns).
 */
import { fileURLToPath } from 'node:url';
import { inNetns, ifIndex } from '../dataplane/netns.js';
import { testRunLive } from './live-frames.js';
import {
  findMap, findProgram, mapFd, mapLookup, mapUpdate, numPossibleCpus, objectClose, objectLoad,
  objectOpen, programFd, xdpAttach, xdpDetachProgram, XDP_FLAGS_DRV_MODE, type BpfObject,
} from '../dataplane/libbpf.js';

const obj = (name: string): string => fileURLToPath(new URL(`../../build/${name}.bpf.o`, import.meta.url));
export const TRAFFICGEN_OBJECT = obj('trafficgen');
export const SINK_OBJECT = obj('sink');
export const L3FWD_OBJECT = obj('l3fwd');

/** bpf/bench/rfc2544.h */
const TGEN_HEAD_MAX = 128;
const SINK_CHECKS = 6;
const SINK_SLOTS = 2;
const SINK_PASS_OFF = 16 + SINK_CHECKS * 12;
const SINK_CFG_SIZE = SINK_PASS_OFF + 8;
const SINK_COUNTERS_SIZE = 7 * 8;
/**
 * Frames per kernel batch in live-frame mode (at most 256). After each
 * batch the kernel flushes the frames into the veth and, in softirq mode,
 * runs the receivers' NAPI: 64, a NAPI budget, so that no ring on the way
 * (256 frames per veth) overflows within one batch.
 */
export const LIVE_BATCH = 64;

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n >>> 0);
  return b;
}

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

/** A frame to generate: its bytes and where its inner UDP source port is. */
export interface GenFrame {
  frame: Buffer;
  /** Offset of the inner source port; 0: do not vary. */
  sportOff: number;
  sportBase: number;
  /** Number of flows (source ports) cycled through. */
  flows: number;
}

/** One generator: its template and the interface (in a namespace) the frames leave by. */
export class Generator {
  readonly #obj: BpfObject;
  readonly #prog: number;
  readonly #tmpl: number;
  readonly #seq: number;
  #frame: Buffer | undefined;
  #ctx: Buffer | undefined;
  #netns: string | undefined;
  #sent = 0;
  #ns = 0;

  constructor() {
    this.#obj = loaded(TRAFFICGEN_OBJECT);
    this.#prog = programFd(findProgram(this.#obj, 'tgen_xmit'));
    this.#tmpl = mapFd(findMap(this.#obj, 'tgen_tmpl_map'));
    this.#seq = mapFd(findMap(this.#obj, 'tgen_seq'));
  }

  /** Frames leave by `ifname` in namespace `netns` (into its veth peer). */
  configure(g: GenFrame, ifname: string, netns: string): void {
    const f = g.frame;
    if (f.length < 60 || f.length > 3520) throw new RangeError(`frame of ${f.length} bytes: 60..3520 for live frames`);
    if (g.sportOff !== 0 && (g.sportOff + 2 > Math.min(f.length, TGEN_HEAD_MAX))) {
      throw new RangeError(`source port offset ${g.sportOff} outside the rewritten head of the frame`);
    }
    const head = Math.min(TGEN_HEAD_MAX, f.length & ~7);
    const t = Buffer.alloc(16 + TGEN_HEAD_MAX);
    t.writeUInt32LE(f.length, 0);
    t.writeUInt32LE(head, 4);
    t.writeUInt16LE(g.sportOff, 8);
    t.writeUInt16LE(g.sportBase, 10);
    t.writeUInt16LE(g.flows, 12);
    f.copy(t, 16, 0, head);
    mapUpdate(this.#tmpl, u32(0), t, undefined, 'tgen_tmpl_map');
    const ifindex = ifIndex(ifname, netns);
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex.
    const ctx = Buffer.alloc(24);
    ctx.writeUInt32LE(0, 0);
    ctx.writeUInt32LE(f.length, 4);
    ctx.writeUInt32LE(ifindex, 12);
    this.#frame = Buffer.from(f);
    this.#ctx = ctx;
    this.#netns = netns;
  }

  /**
   * Send `n` frames now (one BPF_PROG_TEST_RUN, repeat n). Returns n. Each
   * call costs a few milliseconds of set-up in the kernel (a page pool per
   * run) on top of the frames: send thousands at a time.
   */
  send(n: number): number {
    if (this.#frame === undefined || this.#ctx === undefined) throw new Error('Generator.send() before configure()');
    const frame = this.#frame;
    const ctx = this.#ctx;
    const r = inNetns(this.#netns, () => testRunLive(this.#prog, { dataIn: frame, ctxIn: ctx, repeat: n, batchSize: LIVE_BATCH }, 'tgen_xmit'));
    // The kernel's time per frame of the run (not its set-up): the generator
    // plus, in softirq mode, the receivers' NAPI run in between batches.
    this.#ns += r.duration * n;
    this.#sent += n;
    return n;
  }

  /** Frames sent and kernel nanoseconds spent on them since the last call (then reset). */
  takeTiming(): { frames: number; ns: number } {
    const t = { frames: this.#sent, ns: this.#ns };
    this.#sent = 0;
    this.#ns = 0;
    return t;
  }

  /** Frames the program ran for (its per-CPU sequence), to check `send`'s count. */
  programCount(): number {
    const ncpu = numPossibleCpus();
    const v = mapLookup(this.#seq, u32(0), 8 * ncpu, 'tgen_seq');
    let s = 0n;
    for (let i = 0; v && i < ncpu; i++) s += v.readBigUInt64LE(i * 8);
    return Number(s);
  }

  close(): void {
    objectClose(this.#obj);
  }
}

/** One check of a sampled frame: (big-endian word at `off`) & mask === value. */
export interface WordCheck {
  off: number;
  mask: number;
  value: number;
  /** What it checks, for messages. */
  what: string;
}

export interface SinkCounters {
  frames: number;
  bytes: number;
  checked: number;
  bad: number;
  unknown: number;
  /** Probe frames handed to the stack (Sink.expect's `pass`), not counted in `frames`. */
  passed: number;
}

/** Frames the sink hands to the stack instead of counting them: (big-endian word at `off`) === value. */
export interface SinkPass {
  off: number;
  value: number;
}

/** The counting sink, attached to the interfaces where the DUT's output arrives. */
export class Sink {
  readonly #obj: BpfObject;
  readonly progFd: number;
  readonly #cfg: number;
  readonly #counters: number;
  readonly #ncpu = numPossibleCpus();

  constructor() {
    this.#obj = loaded(SINK_OBJECT);
    this.progFd = programFd(findProgram(this.#obj, 'sink_count'));
    this.#cfg = mapFd(findMap(this.#obj, 'sink_cfg_map'));
    this.#counters = mapFd(findMap(this.#obj, 'sink_counters_map'));
  }

  /** Attach (native mode) to `ifname` in `netns`. Deleting the namespace detaches it. */
  attach(ifname: string, netns: string): void {
    inNetns(netns, () => xdpAttach(ifIndex(ifname), this.progFd, XDP_FLAGS_DRV_MODE, `${ifname} in ${netns}`));
  }

  /**
   * What frames arriving on `ifname` must look like; counted in `slot`.
   * sample: check 1 in 2^sample. pass: the latency probe's frames, which go
   * up the stack to its packet socket.
   */
  expect(ifname: string, netns: string, slot: number, checks: readonly WordCheck[], minLen: number, sample = 0, pass?: SinkPass): void {
    if (slot < 0 || slot >= SINK_SLOTS) throw new RangeError(`sink slot ${slot}`);
    if (checks.length > SINK_CHECKS) throw new RangeError(`at most ${SINK_CHECKS} checks`);
    const v = Buffer.alloc(SINK_CFG_SIZE);
    v.writeUInt32LE(slot, 0);
    v.writeUInt32LE(sample, 4);
    v.writeUInt32LE(checks.length, 8);
    v.writeUInt32LE(minLen, 12);
    checks.forEach((c, i) => {
      if (c.off + 4 > 255) throw new RangeError(`check offset ${c.off}: at most 251`);
      v.writeUInt32LE(c.off, 16 + i * 12);
      v.writeUInt32LE(c.mask >>> 0, 20 + i * 12);
      v.writeUInt32LE(c.value >>> 0, 24 + i * 12);
    });
    if (pass !== undefined) {
      if (pass.off < 1 || pass.off + 4 > 255) throw new RangeError(`pass offset ${pass.off}: 1 to 251`);
      v.writeUInt32LE(pass.off, SINK_PASS_OFF);
      v.writeUInt32LE(pass.value >>> 0, SINK_PASS_OFF + 4);
    }
    mapUpdate(this.#cfg, u32(ifIndex(ifname, netns)), v, undefined, 'sink_cfg_map');
  }

  /** Counters of `slot`, summed over CPUs. */
  read(slot: number): SinkCounters {
    const v = mapLookup(this.#counters, u32(slot), SINK_COUNTERS_SIZE * this.#ncpu, 'sink_counters_map');
    // struct sink_counters: frames, bytes, checked, bad, unknown, seen, passed.
    const s = [0n, 0n, 0n, 0n, 0n, 0n, 0n];
    for (let cpu = 0; v && cpu < this.#ncpu; cpu++) {
      for (let k = 0; k < 7; k++) s[k]! += v.readBigUInt64LE(cpu * SINK_COUNTERS_SIZE + k * 8);
    }
    const [frames, bytes, checked, bad, unknown, , passed] = s.map(Number) as number[] as [number, number, number, number, number, number, number];
    return { frames, bytes, checked, bad, unknown, passed };
  }

  /** Zero every slot. */
  reset(): void {
    const zero = Buffer.alloc(SINK_COUNTERS_SIZE * this.#ncpu);
    for (let slot = 0; slot < SINK_SLOTS; slot++) mapUpdate(this.#counters, u32(slot), zero, undefined, 'sink_counters_map');
  }

  close(): void {
    objectClose(this.#obj);
  }
}

/**
 * Wait for frames still in rings and NAPI threads: poll `count` (a sink
 * counter) every 10 ms until it stops moving, at most a second. Returns its
 * last value.
 */
export async function untilSteady(count: () => number): Promise<number> {
  let last = -1;
  for (let i = 0; i < 100; i++) {
    await new Promise((r) => setTimeout(r, 10));
    const now = count();
    if (now === last) break;
    last = now;
  }
  return last;
}

/** The XDP L3 forwarder baseline and the XDP_PASS program of the kernel baselines. */
export class L3fwd {
  readonly #obj: BpfObject;
  readonly fwdFd: number;
  readonly passFd: number;
  readonly dropFd: number;

  constructor() {
    this.#obj = loaded(L3FWD_OBJECT);
    this.fwdFd = programFd(findProgram(this.#obj, 'l3fwd_xdp'));
    this.passFd = programFd(findProgram(this.#obj, 'l3fwd_pass'));
    this.dropFd = programFd(findProgram(this.#obj, 'l3fwd_drop'));
  }

  close(): void {
    objectClose(this.#obj);
  }
}

/** Attach `progFd` natively to `ifname` in `netns`. */
export function attachXdp(progFd: number, ifname: string, netns: string): void {
  inNetns(netns, () => xdpAttach(ifIndex(ifname), progFd, XDP_FLAGS_DRV_MODE, `${ifname} in ${netns}`));
}

/** Detach `progFd` from `ifname` in `netns` if it is the one attached. */
export function detachXdp(progFd: number, ifname: string, netns: string): void {
  inNetns(netns, () => xdpDetachProgram(ifIndex(ifname), progFd, XDP_FLAGS_DRV_MODE, `${ifname} in ${netns}`));
}
