/**
 * Typed wrapper of the timestamping addon (native/, built by `make native`):
 * a raw AF_PACKET socket on one interface with SO_TIMESTAMPING, batched
 * send/receive, TX stamps from the error queue, and the clock offsets needed
 * to put a stamp on another clock.
 *
 * Clocks, stated on every stamp:
 * - `software`: the kernel's CLOCK_REALTIME, taken in the driver on TX
 *   (skb_tx_timestamp) and at receive on RX.
 * - `hardware`: the NIC's PTP hardware clock (PHC, /dev/ptpN), raw.
 * The data plane's bpf_ktime_get_ns() is CLOCK_MONOTONIC. Nothing converts
 * silently: sampleClocks() measures the offsets, toMonotonic() and friends
 * apply them.
 *
 * Every call that waits runs off the event loop: send on libuv's thread pool,
 * recv and txStamps on threads of their own (so they never hold the pool). close() wakes the calls still waiting.
 */
import { join } from 'node:path';
import { checkNetnsName, NETNS_DIR } from '../dataplane/netns.js';
import { loadNativeAddon } from '../host/native-addon.js';

export { ADDON_PATH } from '../host/native-addon.js';

export type TimestampClock = 'hardware' | 'software';
/** auto: hardware when the driver accepts SIOCSHWTSTAMP, else software (the reason is in info().hardware). */
export type TimestampMode = 'auto' | 'software' | 'hardware';

/** A system call failed in the addon: `code` is the errno name, the message says what to do. */
export class NativeError extends Error {
  override readonly name = 'NativeError';
  constructor(
    message: string,
    readonly code: string,
    readonly errno?: number,
    readonly syscall?: string,
  ) {
    super(message);
  }
}

export interface OpenOptions {
  /** Interface name, in `netns` when given. */
  readonly ifname: string;
  /** A namespace name (`ip netns` convention, /var/run/netns/NAME) or a path (/proc/PID/ns/net). */
  readonly netns?: string;
  /** EtherType to receive (host order); default ETH_P_ALL (every frame). */
  readonly protocol?: number;
  readonly timestamping?: TimestampMode;
  /** Do not receive the frames this socket sends (PACKET_IGNORE_OUTGOING); default true. */
  readonly ignoreOutgoing?: boolean;
  /** SO_RCVBUF(FORCE) in bytes; default 4 MiB. The error queue of TX stamps counts against it. */
  readonly rcvbufBytes?: number;
  /**
   * Receive only frames holding this 32-bit word (big endian) at some offset
   * in their first `within` bytes (at most 1024): a classic BPF socket filter
   * in the kernel, so other traffic on the interface costs no copy.
   */
  readonly match?: { readonly word: number; readonly within: number };
  /**
   * TX stamps carry a copy of their frame (no OPT_TSONLY; read it with
   * txStamps({ snaplen })): a stamp is tied to its frame by content, which
   * holds where the OPT_ID count cannot (native/README.md).
   */
  readonly txStampFrames?: boolean;
}

export interface Timestamp {
  /** Nanoseconds on `clock`: CLOCK_REALTIME for software, the PHC for hardware. */
  readonly ns: bigint;
  readonly clock: TimestampClock;
}

export interface TsInfo {
  /** ETHTOOL_GET_TS_INFO answered; else `code` is its errno name. */
  readonly ok: boolean;
  readonly code: string | null;
  /** SOF_TIMESTAMPING_* the driver supports (bit mask; names in describeTsInfo). */
  readonly soTimestamping: number;
  /** N of /dev/ptpN, -1: no PHC. */
  readonly phcIndex: number;
  readonly txTypes: number;
  readonly rxFilters: number;
}

export interface HardwareAttempt {
  /** SIOCSHWTSTAMP was tried (timestamping 'auto' or 'hardware'). */
  readonly attempted: boolean;
  readonly enabled: boolean;
  /** errno name of the refusal (EOPNOTSUPP on veth), null when enabled or not tried. */
  readonly code: string | null;
  readonly errno: number | null;
  readonly message: string | null;
  /** What the driver applied (HWTSTAMP_TX_*, HWTSTAMP_FILTER_*), when enabled. */
  readonly txType: number | null;
  readonly rxFilter: number | null;
  /** SIOCGHWTSTAMP answered before: that configuration is restored on close. */
  readonly previousKnown: boolean;
}

export interface SocketInfo {
  readonly ifname: string;
  readonly ifindex: number;
  /** The namespace path given to open(), null: the caller's. */
  readonly netns: string | null;
  readonly mac: string;
  readonly protocol: number;
  /** The clock of this socket's TX stamps (RX stamps say their own). */
  readonly clock: TimestampClock;
  /** SOF_TIMESTAMPING_* flags set on the socket. */
  readonly flags: number;
  readonly closed: boolean;
  readonly tsInfo: TsInfo;
  readonly hardware: HardwareAttempt;
}

export interface RxFrame {
  /** At most `snaplen` bytes. */
  readonly data: Buffer;
  /** Length on the wire (more than data.length when cut at snaplen). */
  readonly wireLength: number;
  /** sll_pkttype: 0 host, 1 broadcast, 2 multicast, 3 other host, 4 outgoing. */
  readonly pktType: number;
  /** The stamp to use: the NIC's when it took one, else the kernel's; null if neither. */
  readonly timestamp: Timestamp | null;
  /** ts[0] of SCM_TIMESTAMPING (CLOCK_REALTIME), null if not taken. */
  readonly software: bigint | null;
  /** ts[2] (raw PHC), null if not taken. */
  readonly hardware: bigint | null;
  /** The raw control messages (struct cmsghdr ...), with keepControl only. */
  readonly control?: Buffer;
}

export type TxStampType = 'sent' | 'scheduled' | 'acked' | 'unknown';

export interface TxStamp {
  /** SOF_TIMESTAMPING_OPT_ID: the n-th frame this socket sent (0-based); match with SendResult.firstId. */
  readonly id: number;
  /** SCM_TSTAMP_SND (sent: in the driver, or by the NIC), _SCHED, _ACK. */
  readonly type: TxStampType;
  readonly timestamp: Timestamp;
  /** The raw control messages of the error-queue message, with keepControl only. */
  readonly control?: Buffer;
  /** The stamped frame (at most `snaplen` bytes): txStampFrames sockets, txStamps with a snaplen. */
  readonly data?: Buffer;
}

export interface SendResult {
  readonly requested: number;
  /** Frames accepted, from the first in order. */
  readonly sent: number;
  /** TX stamp id of frames[0]; frames[i] has (firstId + i) mod 2^32 (caveats: native/README.md). */
  readonly firstId: number;
  /** Why the batch stopped early (some frames were sent). A batch with none sent rejects instead. */
  readonly error: NativeError | null;
}

// The addon's own shapes (see native/src/addon.cc).
interface RawSocket {
  send(frames: Uint8Array[], timeoutMs: number): Promise<{
    requested: number;
    sent: number;
    firstId: number;
    error: { code: string; errno: number; message: string } | null;
  }>;
  recv(max: number, min: number, timeoutMs: number, snaplen: number, keepControl: boolean): Promise<
    { data: Buffer; wireLength: number; pktType: number; software: bigint | null; hardware: bigint | null; control?: Buffer }[]
  >;
  txStamps(max: number, min: number, timeoutMs: number, keepControl: boolean, snaplen: number): Promise<{
    stamps: { id: number; tstype: number; ns: bigint; clock: TimestampClock; control?: Buffer; data?: Buffer }[];
    skipped: number;
  }>;
  close(): void;
  info(): SocketInfo;
}

interface RawClocks {
  realtimeNs: bigint;
  monotonicNs: bigint;
  realtimeMinusMonotonicNs: bigint;
  realtimeMonotonicUncertaintyNs: number;
  samples: number;
  phc: { device: string; method: string; phcNs: bigint; phcMinusRealtimeNs: bigint; uncertaintyNs: number } | null;
}

interface Addon {
  open(o: {
    ifname: string;
    netns?: string;
    protocol?: number;
    mode?: TimestampMode;
    ignoreOutgoing?: boolean;
    rcvbuf?: number;
    matchWord?: number;
    matchWithin?: number;
    txStampFrames?: boolean;
  }): RawSocket;
  sampleClocks(ptpDevice: string | null, samples: number): RawClocks;
  errnoName(errno: number): string;
  parseControl(control: Buffer, kind: 'rx'): { software: bigint | null; hardware: bigint | null };
  parseControl(control: Buffer, kind: 'errqueue'): ParsedErrqueue;
  /** A full collection that compacts V8's heap and gives its free pages back (src/daemon/memory.ts). */
  compactHeap(): void;
  /** V8's incremental marking, started now (moderate memory pressure); returns at once (src/daemon/memory.ts). */
  startHeapCollection(): void;
}

/** What the addon's error-queue parser makes of one message's control bytes. */
export interface ParsedErrqueue {
  /** A sock_extended_err with origin SO_EE_ORIGIN_TIMESTAMPING and ENOMSG, and a stamp. */
  readonly isTimestamp: boolean;
  readonly id: number | null;
  readonly tstype: number | null;
  readonly ns: bigint | null;
  readonly clock: TimestampClock | null;
  /** ee_errno of an extended error that is not a timestamp (0: none). */
  readonly otherErrno: number;
}

/** The addon, loaded once. Throws NativeError (code ENOENT) with `make native` as the fix when it is not built. */
export function loadAddon(): Addon {
  try {
    return loadNativeAddon() as Addon;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new NativeError((e as Error).message, 'ENOENT');
    throw e;
  }
}

/** Re-throw an addon failure as NativeError (TypeErrors for bad arguments stay TypeErrors). */
function rethrow(e: unknown): never {
  if (e instanceof Error && !(e instanceof TypeError) && typeof (e as NodeJS.ErrnoException).code === 'string') {
    const x = e as NodeJS.ErrnoException;
    throw new NativeError(x.message, x.code ?? 'EIO', x.errno, x.syscall);
  }
  throw e;
}

function netnsPath(netns: string | undefined): string | undefined {
  if (netns === undefined) return undefined;
  if (netns.includes('/')) return netns;
  checkNetnsName(netns);
  return join(NETNS_DIR, netns);
}

const TSTYPES: readonly TxStampType[] = ['sent', 'scheduled', 'acked'];

function checkCount(what: string, v: number, lo: number, hi: number): void {
  if (!Number.isInteger(v) || v < lo || v > hi) throw new RangeError(`${what} must be an integer from ${lo} to ${hi}, got ${v}`);
}

/** A raw packet socket on one interface with SO_TIMESTAMPING. */
export class TimestampingSocket {
  readonly #raw: RawSocket;

  private constructor(raw: RawSocket) {
    this.#raw = raw;
  }

  /**
   * Open and bind (synchronous: a few ioctls). With timestamping 'hardware',
   * a driver that refuses SIOCSHWTSTAMP is an error; with 'auto' (default)
   * the socket falls back to software and info().hardware says why.
   */
  static open(options: OpenOptions): TimestampingSocket {
    const a = loadAddon();
    try {
      return new TimestampingSocket(
        a.open({
          ifname: options.ifname,
          netns: netnsPath(options.netns),
          protocol: options.protocol,
          mode: options.timestamping ?? 'auto',
          ignoreOutgoing: options.ignoreOutgoing,
          rcvbuf: options.rcvbufBytes,
          matchWord: options.match?.word,
          matchWithin: options.match?.within,
          txStampFrames: options.txStampFrames,
        }),
      );
    } catch (e) {
      rethrow(e);
    }
  }

  info(): SocketInfo {
    return this.#raw.info();
  }

  /** Which clock this socket's TX stamps are on. */
  get clock(): TimestampClock {
    return this.#raw.info().clock;
  }

  /**
   * Send every frame once (sendmmsg; Ethernet header included, 1 to 1024
   * frames). Waits up to timeoutMs for room in the queue.
   */
  async send(frames: readonly Uint8Array[], opts: { timeoutMs?: number } = {}): Promise<SendResult> {
    let r;
    try {
      r = await this.#raw.send([...frames], opts.timeoutMs ?? 1000);
    } catch (e) {
      rethrow(e);
    }
    const error = r.error === null ? null : new NativeError(r.error.message, r.error.code, r.error.errno, 'sendmmsg');
    if (r.sent === 0 && error !== null) throw error;
    return { requested: r.requested, sent: r.sent, firstId: r.firstId, error };
  }

  /**
   * Receive up to `max` frames (recvmmsg): resolves once `min` arrived (default 1),
   * after timeoutMs, or when the socket is closed, with whatever came (maybe none).
   */
  async recv(
    opts: { max?: number; min?: number; timeoutMs?: number; snaplen?: number; keepControl?: boolean } = {},
  ): Promise<RxFrame[]> {
    const max = opts.max ?? 64;
    const min = Math.min(opts.min ?? 1, max);
    checkCount('recv max', max, 1, 1024);
    let raw;
    try {
      raw = await this.#raw.recv(max, min, opts.timeoutMs ?? 1000, opts.snaplen ?? 2048, opts.keepControl ?? false);
    } catch (e) {
      rethrow(e);
    }
    return raw.map((p) => ({
      ...p,
      timestamp:
        p.hardware !== null
          ? { ns: p.hardware, clock: 'hardware' as const }
          : p.software !== null
            ? { ns: p.software, clock: 'software' as const }
            : null,
    }));
  }

  /**
   * TX stamps from the error queue (MSG_ERRQUEUE, SCM_TIMESTAMPING), each with
   * the id of its frame. Same waiting rules as recv. `skipped` counts error
   * queue messages that were not timestamps.
   */
  async txStamps(
    opts: { max?: number; min?: number; timeoutMs?: number; keepControl?: boolean; snaplen?: number } = {},
  ): Promise<{ stamps: TxStamp[]; skipped: number }> {
    const max = opts.max ?? 64;
    const min = Math.min(opts.min ?? 1, max);
    checkCount('txStamps max', max, 1, 1024);
    let raw;
    try {
      raw = await this.#raw.txStamps(max, min, opts.timeoutMs ?? 1000, opts.keepControl ?? false, opts.snaplen ?? 0);
    } catch (e) {
      rethrow(e);
    }
    return {
      skipped: raw.skipped,
      stamps: raw.stamps.map((s) => ({
        id: s.id,
        type: TSTYPES[s.tstype] ?? 'unknown',
        timestamp: { ns: s.ns, clock: s.clock },
        ...(s.control === undefined ? {} : { control: s.control }),
        ...(s.data === undefined ? {} : { data: s.data }),
      })),
    };
  }

  /** Close (restoring the NIC's previous hardware timestamping config). Waiting calls resolve with what they have. Idempotent. */
  close(): void {
    this.#raw.close();
  }
}

/**
 * Run the addon's own control-message parser on bytes the caller supplies:
 * 'rx' as recv() parses each frame's, 'errqueue' as txStamps() parses each
 * error-queue message's. For diagnostics and tests (veth never sets a
 * hardware stamp; an edited copy of a real answer can).
 */
export function parseControl(control: Buffer, kind: 'rx'): { software: bigint | null; hardware: bigint | null };
export function parseControl(control: Buffer, kind: 'errqueue'): ParsedErrqueue;
export function parseControl(control: Buffer, kind: 'rx' | 'errqueue'): unknown {
  return kind === 'rx' ? loadAddon().parseControl(control, 'rx') : loadAddon().parseControl(control, 'errqueue');
}

/** Offsets between clocks, measured back to back (see sampleClocks). */
export interface ClockOffsets {
  readonly realtimeNs: bigint;
  readonly monotonicNs: bigint;
  /** realtime = monotonic + this. */
  readonly realtimeMinusMonotonicNs: bigint;
  /** Half the narrowest read window: how far off the offset may be. */
  readonly realtimeMonotonicUncertaintyNs: number;
  readonly samples: number;
  /** The NIC's PHC, when one was given. */
  readonly phc: {
    readonly device: string;
    /** PTP_SYS_OFFSET_EXTENDED (the driver's own triplets) or clock_gettime on the PHC's dynamic clock id. */
    readonly method: string;
    readonly phcNs: bigint;
    /** phc = realtime + this. */
    readonly phcMinusRealtimeNs: bigint;
    readonly uncertaintyNs: number;
  } | null;
}

/** /dev/ptpN of a socket's tsInfo.phcIndex; null when the NIC has none. */
export function ptpDevice(phcIndex: number): string | null {
  return phcIndex >= 0 ? `/dev/ptp${phcIndex}` : null;
}

/**
 * Read CLOCK_REALTIME, CLOCK_MONOTONIC (and the PHC `ptp`, a path or index)
 * back to back `samples` times; the narrowest window gives the offsets.
 */
export function sampleClocks(opts: { ptp?: string | number; samples?: number } = {}): ClockOffsets {
  const dev = typeof opts.ptp === 'number' ? ptpDevice(opts.ptp) : (opts.ptp ?? null);
  try {
    return loadAddon().sampleClocks(dev, opts.samples ?? 9);
  } catch (e) {
    rethrow(e);
  }
}

export function monotonicToRealtime(ns: bigint, o: ClockOffsets): bigint {
  return ns + o.realtimeMinusMonotonicNs;
}

export function realtimeToMonotonic(ns: bigint, o: ClockOffsets): bigint {
  return ns - o.realtimeMinusMonotonicNs;
}

function needPhc(o: ClockOffsets): NonNullable<ClockOffsets['phc']> {
  if (o.phc === null) {
    throw new NativeError(
      'a hardware stamp needs the PHC offset: call sampleClocks({ ptp: info().tsInfo.phcIndex }) for this NIC',
      'EINVAL',
    );
  }
  return o.phc;
}

export function phcToRealtime(ns: bigint, o: ClockOffsets): bigint {
  return ns - needPhc(o).phcMinusRealtimeNs;
}

export function realtimeToPhc(ns: bigint, o: ClockOffsets): bigint {
  return ns + needPhc(o).phcMinusRealtimeNs;
}

/** A stamp on CLOCK_REALTIME, whatever its clock. */
export function toRealtime(t: Timestamp, o: ClockOffsets): bigint {
  return t.clock === 'software' ? t.ns : phcToRealtime(t.ns, o);
}

/** A stamp on CLOCK_MONOTONIC (the BPF bpf_ktime_get_ns clock), whatever its clock. */
export function toMonotonic(t: Timestamp, o: ClockOffsets): bigint {
  return realtimeToMonotonic(toRealtime(t, o), o);
}

const SOF_NAMES = [
  // The first seven as `ethtool -T` prints them; the rest are socket options, not capabilities.
  'hardware-transmit', 'software-transmit', 'hardware-receive', 'software-receive', 'software-system-clock',
  'hardware-legacy-clock', 'hardware-raw-clock', 'opt-id', 'tx-sched', 'tx-ack', 'opt-cmsg', 'opt-tsonly', 'opt-stats', 'opt-pktinfo', 'opt-tx-swhw',
  'bind-phc', 'opt-id-tcp', 'opt-rx-filter', 'tx-completion',
] as const;
const TX_TYPE_NAMES = ['off', 'on', 'one-step-sync', 'one-step-p2p'] as const;
const RX_FILTER_NAMES = [
  'none', 'all', 'some', 'ptpv1-l4-event', 'ptpv1-l4-sync', 'ptpv1-l4-delay-req', 'ptpv2-l4-event',
  'ptpv2-l4-sync', 'ptpv2-l4-delay-req', 'ptpv2-l2-event', 'ptpv2-l2-sync', 'ptpv2-l2-delay-req',
  'ptpv2-event', 'ptpv2-sync', 'ptpv2-delay-req', 'ntp-all',
] as const;

function bitNames(mask: number, names: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < 32; i++) if ((mask >>> i) & 1) out.push(names[i] ?? `bit${i}`);
  return out;
}

/** ETHTOOL_GET_TS_INFO in words: the names `ethtool -T` prints. */
export function describeTsInfo(t: TsInfo): { capabilities: string[]; txTypes: string[]; rxFilters: string[]; ptp: string | null } {
  return {
    capabilities: bitNames(t.soTimestamping, SOF_NAMES),
    txTypes: bitNames(t.txTypes, TX_TYPE_NAMES),
    rxFilters: bitNames(t.rxFilters, RX_FILTER_NAMES),
    ptp: ptpDevice(t.phcIndex),
  };
}
