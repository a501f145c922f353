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

/**
 * A command's stderr, trimmed, with what a known kernel refusal means added
 * to its first line (the line a failed lab start prints): iproute2 says
 * "lwt encapsulation type not supported" for a seg6 or seg6local route on a
 * kernel built without CONFIG_IPV6_SEG6_LWTUNNEL, and the lab's SRv6 peers
 * are exactly such routes. Any other stderr comes back as it was (trimmed).
 */
export function explainKernelError(stderr: string): string {
  const t = stderr.trim();
  if (!/lwt encapsulation type not supported/i.test(t)) return t;
  const hint =
    ' (this kernel has no SRv6 routes: it was built without CONFIG_IPV6_SEG6_LWTUNNEL, see /proc/config.gz if it has one; the lab\'s peers are the kernel\'s seg6 and seg6local routes, so it needs a kernel with them)';
  const nl = t.indexOf('\n');
  return nl < 0 ? t + hint : t.slice(0, nl) + hint + t.slice(nl);
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
