/**
 * Offline replay: every frame of a pcap through the real XDP program
 * (BPF_PROG_TEST_RUN), the frames that leave written to another pcap.
 *
 * Forwarding is forced to `tx`, so a translated frame comes back with
 * verdict `tx` and its translated bytes; a frame the program does not handle
 * comes back `pass` and is written unchanged; drops are not written.
 */
import type { Config } from './config/types.js';
import { openDataplane, type Counters, type Verdict } from './dataplane/index.js';
import { readPcap, writePcap, type PcapPacket } from './pcap.js';

export interface ReplayOptions {
  readonly config: Config;
  readonly inPath: string;
  readonly outPath: string;
  /** BPF object; default build/mup.bpf.o. */
  readonly object?: string;
}

export interface ReplayFrame {
  /** 0-based position in the input file. */
  readonly index: number;
  readonly verdict: Verdict;
  /** Counter event, e.g. "fwd_tx" or "drop_gtp_bad_length"; null if the program counted none. */
  readonly event: string | null;
  readonly inLen: number;
  /** Bytes written to the output (0 when dropped). */
  readonly outLen: number;
}

export interface ReplayResult {
  readonly frames: ReplayFrame[];
  /** Frames written to outPath. */
  readonly written: number;
  /** The program's counters after the run. */
  readonly counters: Counters;
}

/** Whether a frame with this verdict leaves the translator (and goes to the output pcap). */
export function leaves(verdict: Verdict): boolean {
  return verdict !== 'drop' && verdict !== 'aborted';
}

export async function replay(o: ReplayOptions): Promise<ReplayResult> {
  const input = await readPcap(o.inPath);
  const config: Config = { ...o.config, settings: { ...o.config.settings, forwarding: 'tx' } };
  const dp = openDataplane({ config, ...(o.object === undefined ? {} : { object: o.object }) });
  const frames: ReplayFrame[] = [];
  const out: PcapPacket[] = [];
  let counters: Counters;
  try {
    input.packets.forEach((p, index) => {
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
  } finally {
    dp.close();
  }
  await writePcap(o.outPath, out);
  return { frames, written: out.length, counters };
}
