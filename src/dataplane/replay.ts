/**
 * Offline replay: every frame of a pcap through the real XDP program
 * (BPF_PROG_TEST_RUN), the frames that leave written to another pcap.
 *
 * Forwarding is forced to `tx`, so a translated frame comes back with
 * verdict `tx` and its translated bytes; a frame the program does not handle
 * comes back `pass` and is written unchanged; drops are not written.
 *
 * Frames BPF_PROG_TEST_RUN cannot give the program whole are `skipped`: not
 * run, not written, counted with a reason. A runt (under 14 bytes) is refused
 * by the kernel; a frame over TEST_RUN_MAX_FRAME bytes would reach a plain
 * `xdp` program cut to its first page and be misjudged on that part.
 */
import type { Config } from '../config/types.js';
import type { Counters, Verdict } from './index.js';
import { ETH_HLEN, TEST_RUN_MAX_FRAME } from './frame-limits.js';
import { openPcapOutput, readPcap, type PcapPacket } from './pcap.js';

export interface ReplayOptions {
  readonly config: Config;
  readonly inPath: string;
  readonly outPath: string;
  /** BPF object; default build/mup.bpf.o. */
  readonly object?: string;
}

/** Why a frame was not run through the program. */
export type SkipReason = 'frame_too_large' | 'runt' | 'cut_by_snaplen';

/** What each skip reason means, for people. */
export const SKIP_REASONS: Readonly<Record<SkipReason, string>> = {
  frame_too_large: `larger than one XDP buffer (${TEST_RUN_MAX_FRAME} bytes); multi-buffer XDP is not supported`,
  runt: `shorter than an Ethernet header (${ETH_HLEN} bytes)`,
  cut_by_snaplen: 'captured shorter than it was on the wire (snaplen): the program would judge a cut packet',
};

/** The program's verdict, or `skipped` for a frame that was not run. */
export type ReplayVerdict = Verdict | 'skipped';

export interface ReplayFrame {
  /** 0-based position in the input file. */
  readonly index: number;
  readonly verdict: ReplayVerdict;
  /** Set exactly when verdict is `skipped`. */
  readonly skipped?: SkipReason;
  /** Counter event, e.g. "fwd_tx" or "drop_gtp_bad_length"; null if the program counted none (or did not run). */
  readonly event: string | null;
  readonly inLen: number;
  /** Bytes written to the output (0 when dropped or skipped). */
  readonly outLen: number;
}

export interface ReplayResult {
  readonly frames: ReplayFrame[];
  /** Frames written to outPath. */
  readonly written: number;
  /** Frames not run through the program (verdict `skipped`). */
  readonly skipped: number;
  /** The program's counters after the run (skipped frames are not in them). */
  readonly counters: Counters;
}

/** Whether a frame with this verdict leaves the translator (and goes to the output pcap). */
export function leaves(verdict: ReplayVerdict): boolean {
  return verdict !== 'drop' && verdict !== 'aborted' && verdict !== 'skipped';
}

/**
 * Why a captured frame cannot be run as it was on the wire: BPF_PROG_TEST_RUN
 * cannot run it whole, or the capture kept only its first bytes. Undefined
 * if it can be run.
 */
export function skipReason(len: number, origLen = len): SkipReason | undefined {
  if (len < ETH_HLEN) return 'runt';
  if (len > TEST_RUN_MAX_FRAME) return 'frame_too_large';
  if (origLen > len) return 'cut_by_snaplen';
  return undefined;
}

export async function replay(o: ReplayOptions): Promise<ReplayResult> {
  // The output checked before any frame runs (found in review, session 43): the input named again was
  // replaced by the output, and a directory or an unwritable path was found only after every frame ran.
  const output = await openPcapOutput(o.outPath, o.inPath);
  let input;
  let dp;
  try {
    input = await readPcap(o.inPath);
    const config: Config = { ...o.config, settings: { ...o.config.settings, forwarding: 'tx' } };
    const { openDataplane } = await import('./index.js');
    dp = openDataplane({ config, ...(o.object === undefined ? {} : { object: o.object }) });
  } catch (e) {
    // Nothing left behind: a missing object or table sizes it refuses left the temporary output file.
    await output.abandon();
    throw e;
  }
  const frames: ReplayFrame[] = [];
  const out: PcapPacket[] = [];
  let counters: Counters;
  try {
    input.packets.forEach((p, index) => {
      const skipped = skipReason(p.data.length, p.origLen);
      if (skipped !== undefined) {
        frames.push({ index, verdict: 'skipped', skipped, event: null, inLen: p.data.length, outLen: 0 });
        return;
      }
      let r;
      try {
        r = dp.run(p.data);
      } catch (e) {
        throw new Error(`${o.inPath}: frame ${index} (${p.data.length} bytes): ${(e as Error).message}`, { cause: e });
      }
      let written: Buffer | undefined;
      if (leaves(r.verdict)) {
        written = r.verdict === 'pass' ? p.data : r.out;
        out.push({ ...p, origLen: written === p.data ? p.origLen : written.length, data: written });
      }
      frames.push({ index, verdict: r.verdict, event: r.event, inLen: p.data.length, outLen: written?.length ?? 0 });
    });
    counters = dp.counters();
  } catch (e) {
    await output.abandon();
    throw e;
  } finally {
    dp.close();
  }
  await output.commit(out);
  return { frames, written: out.length, skipped: frames.filter((f) => f.verdict === 'skipped').length, counters };
}
