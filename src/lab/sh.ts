/**
 * Running the lab's commands: ip, tc, bpftool, tools inside a namespace.
 * Each throws with the command and its stderr, so a failed step says what
 * failed and where.
 */
import { execa } from 'execa';
import { explainKernelError } from '../host/kernel-srv6.js';

export interface RunResult {
  readonly stdout: string;
  readonly stderr: string;
  readonly exitCode: number;
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
