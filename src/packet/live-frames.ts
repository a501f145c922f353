/**
 * Whether this kernel runs an XDP program in live-frame mode for this
 * process (BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES, Linux 5.18
 * and later): the traffic generator (src/packet/generator.ts) and the RFC
 * 2544 bench's paced generator send their frames that way. A kernel may
 * refuse it: 6.18.44-fc-v1300 answers EPERM to root for the same program
 * it runs without the flag (which check refuses it was not found; its
 * lockdown LSM is in integrity mode, which in mainline does not block
 * this call).
 *
 * Asked once per process: the counting sink's program (bpf/bench/sink.bpf.c,
 * freshly loaded, so it drops every frame) run on one frame, live, in this
 * process's network namespace; nothing is sent.
 */
import { BPF_F_TEST_XDP_LIVE_FRAMES, findProgram, LibbpfError, objectClose, objectLoad, objectOpen, programFd, testRun, type TestRunOptions, type TestRunResult } from '../dataplane/libbpf.js';

/** What this kernel says to a live-frame run, when it refuses one. */
export function liveFramesRefusal(sinkObject: string): string | undefined {
  cached ??= { refusal: ask(sinkObject) };
  return cached.refusal;
}

let cached: { readonly refusal: string | undefined } | undefined;

/** The sentence a refused live-frame run is explained with (the generators' errors say it too). */
export function liveFramesRefused(code: string): string {
  return `this kernel refuses BPF_PROG_TEST_RUN in live-frame mode (BPF_F_TEST_XDP_LIVE_FRAMES): ${code} for a program it runs without the flag, so no frame generator can send here`;
}

function ask(sinkObject: string): string | undefined {
  const obj = objectOpen(sinkObject);
  try {
    objectLoad(obj, sinkObject);
    const fd = programFd(findProgram(obj, 'sink_count'), 'sink_count');
    // A fresh sink has no config for any interface: it counts the frame as unknown and drops it.
    const frame = Buffer.alloc(64);
    // Without the flag first: a refusal of that is not about live frames (it throws).
    testRun(fd, { dataIn: frame, repeat: 1 }, 'sink_count');
    try {
      testRun(fd, { dataIn: frame, repeat: 1, flags: BPF_F_TEST_XDP_LIVE_FRAMES, batchSize: 1 }, 'sink_count (live)');
      return undefined;
    } catch (e) {
      const code = refusal(e);
      if (code !== undefined) return liveFramesRefused(code);
      throw e;
    }
  } finally {
    objectClose(obj);
  }
}

/** The kernel's refusal of a run (its errno's name), if the error is one. */
function refusal(e: unknown): string | undefined {
  return e instanceof LibbpfError && (e.code === 'EPERM' || e.code === 'EACCES') ? e.code : undefined;
}

/**
 * A generator's run of `prog` in live-frame mode (testRun with
 * BPF_F_TEST_XDP_LIVE_FRAMES); a refusal is thrown explained
 * (liveFramesRefused), any other error as it was.
 */
export function testRunLive(prog: number, o: Omit<TestRunOptions, 'flags'>, what: string): TestRunResult {
  try {
    return testRun(prog, { ...o, flags: BPF_F_TEST_XDP_LIVE_FRAMES }, what);
  } catch (e) {
    const code = refusal(e);
    throw code === undefined ? e : new Error(`${(e as Error).message}: ${liveFramesRefused(code)}`, { cause: e });
  }
}
