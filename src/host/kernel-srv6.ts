/**
 * Whether this kernel takes SRv6 routes: `encap seg6` (H.Encaps) and
 * `encap seg6local` (End, End.DX4, End.DT4 ...), the lightweight tunnels
 * of CONFIG_IPV6_SEG6_LWTUNNEL. The lab's core and PE, the RFC 2544
 * bench's kernel-seg6 baseline and the tests whose peer is the kernel's
 * SRv6 need them; a kernel built without them answers every such route
 * with "lwt encapsulation type not supported".
 *
 * Asked the way the lab asks: one route of each kind in a namespace of its
 * own, removed again. Once per process.
 */
import { execa } from 'execa';
import { sweepStale } from './netns-sweep.js';

/** iproute2's answer to a seg6 or seg6local route on a kernel without them. */
export const NO_SRV6_ROUTES = /lwt encapsulation type not supported/i;

/**
 * A command's stderr, trimmed, with what a known kernel refusal means added
 * to the line that says it (a failed lab start prints the first line, and
 * iproute2 prints it first): "lwt encapsulation type not supported" is
 * iproute2's answer to a seg6 or seg6local route on a kernel built without
 * CONFIG_IPV6_SEG6_LWTUNNEL, and the SRv6 peers of the lab and of the tests
 * are such routes. Any other stderr comes back as it was (trimmed).
 */
export function explainKernelError(stderr: string): string {
  const hint =
    ' (this kernel has no SRv6 routes: it was built without CONFIG_IPV6_SEG6_LWTUNNEL, see /proc/config.gz if it has one)';
  return stderr
    .trim()
    .split('\n')
    .map((l) => (NO_SRV6_ROUTES.test(l) ? l + hint : l))
    .join('\n');
}

export type KernelSrv6 =
  | { readonly ok: true }
  /** `missing`: the kernel refused the routes (the reason says so); `unknown`: the question could not be asked. */
  | { readonly ok: false; readonly why: 'missing' | 'unknown'; readonly reason: string };

let asked: Promise<KernelSrv6> | undefined;

/** The answer, asked once per process. */
export function kernelSrv6(): Promise<KernelSrv6> {
  asked ??= ask();
  return asked;
}

/** The throwaway namespaces' prefix: msr6-<pid>-ask. */
export const ASK_NETNS_PREFIX = 'msr6-';

/**
 * The sysctls that let a namespace's SRH endpoint process packets arriving
 * on `dev` (the kernel takes the lower of `all` and the device's value).
 */
export function seg6Enabled(dev: string, on = true): string[] {
  return [`net.ipv6.conf.all.seg6_enabled=${on ? 1 : 0}`, `net.ipv6.conf.${dev}.seg6_enabled=${on ? 1 : 0}`];
}

async function ask(): Promise<KernelSrv6> {
  // One left by a process killed while it asked (its pid is gone).
  await sweepStale(ASK_NETNS_PREFIX);
  const ns = `${ASK_NETNS_PREFIX}${process.pid}-ask`;
  const made = await execa('ip', ['netns', 'add', ns], { reject: false, timeout: 10_000 });
  if (made.exitCode !== 0) return { ok: false, why: 'unknown', reason: `could not make namespace ${ns} to ask: ${String(made.stderr).trim()}` };
  try {
    const lines = [
      'link set lo up',
      'route add 2001:db8:ffff::1/128 encap seg6local action End dev lo',
      'route add 2001:db8:ffff::2/128 encap seg6 mode encap segs 2001:db8:ffff::3 dev lo',
    ];
    const r = await execa('ip', ['-6', '-n', ns, '-batch', '-'], { input: lines.join('\n') + '\n', reject: false, timeout: 10_000 });
    if (r.exitCode === 0) return { ok: true };
    const said = String(r.stderr).trim();
    if (NO_SRV6_ROUTES.test(said)) return { ok: false, why: 'missing', reason: explainKernelError(said).split('\n')[0]! };
    return { ok: false, why: 'unknown', reason: `a seg6 route in ${ns} failed: ${said}` };
  } finally {
    await execa('ip', ['netns', 'delete', ns], { reject: false, timeout: 10_000 });
  }
}
