/**
 * Running the lab's commands: ip, tc, bpftool, tools inside a namespace.
 * Each throws with the command and its stderr, so a failed step says what
 * failed and where.
 */
import { execa } from 'execa';

export interface RunResult {
  readonly stdout: string;
  readonly stderr: string;
  readonly exitCode: number;
}

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
    ' (this kernel has no SRv6 routes: it was built without CONFIG_IPV6_SEG6_LWTUNNEL, see /proc/config.gz if it has one; the kernel SRv6 peers of the lab and of the tests need them)';
  return stderr
    .trim()
    .split('\n')
    .map((l) => (NO_SRV6_ROUTES.test(l) ? l + hint : l))
    .join('\n');
}

/** Run a command; throws (command, exit status, stderr) unless it succeeds. */
export async function run(cmd: string, args: readonly string[], o: { input?: string; timeout?: number; allowFail?: boolean } = {}): Promise<RunResult> {
  const r = await execa(cmd, args, { reject: false, timeout: o.timeout ?? 20_000, ...(o.input === undefined ? {} : { input: o.input }) });
  const res = { stdout: String(r.stdout ?? ''), stderr: String(r.stderr ?? ''), exitCode: r.exitCode ?? -1 };
  if (res.exitCode !== 0 && o.allowFail !== true) {
    throw new Error(`${cmd} ${args.join(' ')} failed (exit ${r.exitCode ?? (r.timedOut ? 'timeout' : '?')}): ${explainKernelError(res.stderr) || res.stdout.trim()}`);
  }
  return res;
}

/** `ip -n NS -batch -` with one command per line. */
export async function ipBatch(ns: string, lines: readonly string[]): Promise<void> {
  await run('ip', ['-n', ns, '-batch', '-'], { input: lines.join('\n') + '\n' });
}

/** A command inside a namespace (`ip netns exec`). */
export function nsRun(ns: string, cmd: string, args: readonly string[], o: { timeout?: number; allowFail?: boolean } = {}): Promise<RunResult> {
  return run('ip', ['netns', 'exec', ns, cmd, ...args], o);
}

/** Interface index and MAC of `dev` in namespace `ns`. */
export async function linkInfo(ns: string, dev: string): Promise<{ ifindex: number; mac: string }> {
  const r = await run('ip', ['-n', ns, '-j', 'link', 'show', 'dev', dev]);
  const l = (JSON.parse(r.stdout) as { ifindex: number; address: string }[])[0];
  if (l === undefined) throw new Error(`no interface ${dev} in ${ns}`);
  return { ifindex: l.ifindex, mac: l.address };
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
