/**
 * The tests whose peer is the kernel's SRv6 (seg6 and seg6local routes) run
 * only on a kernel that has it. On one built without it they are skipped,
 * and said so: their suite's title carries "[NOT RUN: <the kernel's
 * refusal, explained>]", and scripts/test-summary.mjs prints one NOT RUN
 * line with the count, the files and the reason at the end of `make test`.
 *
 * Suites that only need an independent SRv6 peer run on either kernel:
 * `corePeer` gives them the kernel's SRH code where the routes are missing,
 * and `peerTitle` says so in their title.
 *
 * MUP_REQUIRE_KERNEL_SRV6=1 runs them anyway, to fail where the kernel
 * should have it. Only the kernel's own refusal skips: any other failure
 * to ask (say, no namespace could be made) lets the tests run and fail
 * with their own errors.
 */
import { kernelSrv6 } from '../../src/host/kernel-srv6.js';

const isRoot = process.getuid?.() === 0;
const answer = isRoot && process.env.MUP_REQUIRE_KERNEL_SRV6 !== '1' ? await kernelSrv6() : ({ ok: true } as const);

/** The kernel's refusal, explained, when this kernel has no SRv6 routes; undefined when it has them (or is not asked). */
export const noKernelSrv6: string | undefined = !answer.ok && answer.why === 'missing' ? answer.reason : undefined;

/** A suite's (or test's) title that says, when it is skipped for want of kernel SRv6, why. */
export function needsKernelSrv6(title: string): string {
  return noKernelSrv6 === undefined ? title : `${title} [NOT RUN: ${noKernelSrv6}]`;
}

/**
 * The SRv6 peer core can be for a suite that can use either (topology.ts
 * CorePeer): the kernel's SRv6 routes where it has them, else its SRH code.
 */
export const corePeer: 'routes' | 'srh' = noKernelSrv6 === undefined ? 'routes' : 'srh';

/** A suite title that names the peer when it is not the kernel's SRv6 routes, and why. */
export function peerTitle(title: string): string {
  return corePeer === 'routes' ? title : `${title} [peer: the kernel's SRH endpoint, as this kernel has no seg6 routes]`;
}
