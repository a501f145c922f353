/**
 * The tests that send real frames with a live-frame generator (the traffic
 * generator, the RFC 2544 bench's paced one) run only on a kernel that lets
 * this process run XDP in live-frame mode. On one that refuses it they are
 * skipped, and said so: their suite's (or test's) title carries
 * "[NOT RUN: <the kernel's refusal, explained>]", and
 * scripts/test-summary.mjs prints one NOT RUN line with the count, the
 * files and the reason at the end of `make test`.
 *
 * MUP_REQUIRE_LIVE_FRAMES=1 runs them anyway, to fail where the kernel
 * should allow it. Only the kernel's own refusal (EPERM, EACCES) skips: any
 * other failure to ask (say, the sink object not built) lets the tests run
 * and fail with their own errors.
 */
import { existsSync } from 'node:fs';
import { SINK_OBJECT } from '../../src/packet/generator.js';
import { liveFramesRefusal } from '../../src/packet/live-frames.js';

const isRoot = process.getuid?.() === 0;

function ask(): string | undefined {
  if (!isRoot || process.env.MUP_REQUIRE_LIVE_FRAMES === '1' || !existsSync(SINK_OBJECT)) return undefined;
  try {
    return liveFramesRefusal(SINK_OBJECT);
  } catch {
    return undefined; // not the kernel's refusal: the tests say what is wrong
  }
}

/** The kernel's refusal, explained, when this process may not run XDP in live-frame mode; undefined when it may (or is not asked). */
export const noLiveFrames: string | undefined = ask();

/** A suite's (or test's) title that says, when it is skipped for want of live frames, why. */
export function needsLiveFrames(title: string): string {
  return noLiveFrames === undefined ? title : `${title} [NOT RUN: ${noLiveFrames}]`;
}
