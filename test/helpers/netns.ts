/**
 * Network namespace labs for tests: namespaces named `mupt-<pid>-<name>`,
 * configured with `ip -n NS -batch`, peers run with `ip netns exec`, all of
 * it removed by Lab.destroy(). Nothing is created in the root namespace.
 */
import { fileURLToPath } from 'node:url';
import { execa, type ResultPromise } from 'execa';
import { PYTHON } from './scapy.js';
import { listNamespaces, sweepStale } from '../../src/host/netns-sweep.js';
import { explainKernelError } from '../../src/host/kernel-srv6.js';

/** Every namespace a test creates starts with this. */
export const NETNS_TEST_PREFIX = 'mupt-';
export const PEER_SCRIPT = fileURLToPath(new URL('../fixtures/netns_peer.py', import.meta.url));
/** A program that passes every frame: the peer of a veth that XDP redirects into. */
export const TESTPEER_OBJECT = fileURLToPath(new URL('../../build/testpeer.bpf.o', import.meta.url));

/** `ip ARGS` (in namespace `netns` when given); stdout. Throws with ip's stderr. */
export async function ip(args: readonly string[], netns?: string): Promise<string> {
  const full = netns === undefined ? [...args] : ['-n', netns, ...args];
  const r = await execa('ip', full, { reject: false, timeout: 10_000 });
  if (r.exitCode !== 0) throw new Error(`ip ${full.join(' ')} failed (exit ${r.exitCode}): ${r.stderr.trim()}`);
  return r.stdout;
}

export { listNamespaces };

/**
 * Delete `mupt-<pid>-*` namespaces whose test process is gone (a run killed
 * before its cleanup). Namespaces of a live process are left alone. Best
 * effort: returns what it deleted.
 */
export function sweepStaleNamespaces(): Promise<string[]> {
  return sweepStale(NETNS_TEST_PREFIX);
}

/** A peer process in a namespace that prints "ready", then one JSON object per line. */
export interface Listener<T> {
  /** Resolves with every line printed after "ready", parsed, once the process exits. */
  readonly done: Promise<T[]>;
  /** Kill it now (the process this listener started, by pid). */
  stop(): void;
}

/** A set of namespaces, each under its short name. */
export class Lab {
  readonly prefix: string;
  readonly #names: Map<string, string>;
  readonly #procs = new Set<ResultPromise>();

  private constructor(prefix: string, names: readonly string[]) {
    this.prefix = prefix;
    this.#names = new Map(names.map((n) => [n, `${prefix}${n}`]));
  }

  /** Create namespaces `mupt-<pid>-<name>` with lo up. On failure, removes what it made. */
  static async create(names: readonly string[]): Promise<Lab> {
    const lab = new Lab(`${NETNS_TEST_PREFIX}${process.pid}-`, names);
    try {
      for (const full of lab.#names.values()) {
        await ip(['netns', 'add', full]);
        await ip(['link', 'set', 'lo', 'up'], full);
      }
    } catch (e) {
      await lab.destroy();
      throw e;
    }
    return lab;
  }

  /** Full namespace name of a short name. */
  ns(name: string): string {
    const full = this.#names.get(name);
    if (full === undefined) throw new Error(`no namespace "${name}" in this lab (${[...this.#names.keys()].join(', ')})`);
    return full;
  }

  /** `ip -n NS ...`. */
  ip(name: string, ...args: string[]): Promise<string> {
    return ip(args, this.ns(name));
  }

  /** `ip -n NS -batch -` with one command per line ('#' lines skipped). */
  async batch(name: string, lines: readonly string[], family?: '-4' | '-6'): Promise<void> {
    const input = lines.filter((l) => l.trim() !== '' && !l.trimStart().startsWith('#')).join('\n') + '\n';
    const args = ['-n', this.ns(name), ...(family === undefined ? [] : [family]), '-batch', '-'];
    const r = await execa('ip', args, { input, reject: false, timeout: 10_000 });
    if (r.exitCode !== 0) {
      throw new Error(`ip ${args.join(' ')} failed (exit ${r.exitCode}): ${explainKernelError(r.stderr)}\ninput:\n${input}`);
    }
  }

  /** `ip netns exec NS CMD ARGS`; stdout. */
  async exec(name: string, cmd: string, args: readonly string[], timeout = 10_000): Promise<string> {
    const r = await execa('ip', ['netns', 'exec', this.ns(name), cmd, ...args], { reject: false, timeout });
    if (r.exitCode !== 0) {
      throw new Error(`in ${this.ns(name)}: ${cmd} ${args.join(' ')} failed (exit ${r.exitCode}): ${r.stderr.trim()}`);
    }
    return r.stdout;
  }

  /** Write sysctls (`key=value`) in a namespace. */
  async sysctl(name: string, settings: readonly string[]): Promise<void> {
    await this.exec(name, 'sysctl', ['-q', '-w', ...settings]);
  }

  /** Run a subcommand of the peer script (test/fixtures/netns_peer.py). */
  peer(name: string, args: readonly string[], timeout = 15_000): Promise<string> {
    return this.exec(name, PYTHON, [PEER_SCRIPT, ...args], timeout);
  }

  /**
   * Start a receiving peer (udp-recv, sniff) and resolve once it is ready.
   * The process stops by itself after its --count or --timeout.
   */
  async listen<T>(name: string, args: readonly string[], readyWithinMs = 5_000): Promise<Listener<T>> {
    const proc = execa('ip', ['netns', 'exec', this.ns(name), PYTHON, PEER_SCRIPT, ...args], {
      reject: false,
      timeout: 30_000,
    });
    this.#procs.add(proc);
    const stop = (): void => {
      proc.kill('SIGKILL');
    };
    let out = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        stop();
        reject(new Error(`peer ${args.join(' ')} in ${this.ns(name)} not ready within ${readyWithinMs} ms`));
      }, readyWithinMs);
      proc.stdout?.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        if (out.startsWith('ready\n')) {
          clearTimeout(timer);
          resolve();
        }
      });
      proc.then(
        (r) => {
          clearTimeout(timer);
          reject(new Error(`peer ${args.join(' ')} in ${this.ns(name)} exited before ready (${r.exitCode}): ${String(r.stderr)}`));
        },
        reject,
      );
    });
    const done = proc.then((r) => {
      this.#procs.delete(proc);
      if (r.exitCode !== 0) throw new Error(`peer ${args.join(' ')} in ${this.ns(name)} failed (${r.exitCode}): ${String(r.stderr)}`);
      return String(r.stdout)
        .split('\n')
        .slice(1)
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as T);
    });
    // A listener whose test failed before awaiting it is killed by destroy():
    // that rejection is expected, not an unhandled one.
    done.catch(() => undefined);
    return { done, stop };
  }

  /**
   * Stop the peers still running, delete every namespace of the lab (which
   * takes their interfaces, addresses, routes and XDP attachments with it),
   * and check that none is left. Safe to call twice.
   */
  async destroy(): Promise<void> {
    for (const p of this.#procs) p.kill('SIGKILL');
    await Promise.allSettled([...this.#procs]);
    this.#procs.clear();
    const errors: string[] = [];
    const existing = new Set(await listNamespaces());
    for (const full of this.#names.values()) {
      if (!existing.has(full)) continue;
      try {
        await ip(['netns', 'delete', full]);
      } catch (e) {
        errors.push((e as Error).message);
      }
    }
    const left = (await listNamespaces()).filter((n) => n.startsWith(this.prefix));
    if (left.length > 0 || errors.length > 0) {
      throw new Error(`namespaces left behind: ${left.join(', ') || '(none)'}; ${errors.join('; ')}`);
    }
  }
}

/** Poll `check` (sync or async) until it gives a value other than undefined, or fail after `ms`. */
export async function waitFor<T>(what: string, ms: number, check: () => T | undefined | Promise<T | undefined>, every = 20): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, every));
  }
}

/** What closeLab undoes of a data plane a test opened and attached. */
export interface AttachedDataplane {
  readonly attachments: readonly { readonly ifname: string; readonly netns?: string }[];
  detach(ifname: string, o?: { netns?: string }): void;
  close(): void;
}

/**
 * A test's teardown of its data plane and lab: detach every attachment,
 * close the object, delete the namespaces, check none is left. Each step
 * runs even when one before it failed; every failure (with `problems`, a
 * caller's own) is thrown once at the end.
 */
export async function closeLab(dp: AttachedDataplane | undefined, lab: Lab | undefined, problems: string[] = []): Promise<void> {
  try {
    for (const a of dp?.attachments ?? []) dp!.detach(a.ifname, a.netns === undefined ? {} : { netns: a.netns });
  } catch (e) {
    problems.push((e as Error).message);
  }
  try {
    dp?.close();
  } catch (e) {
    problems.push((e as Error).message);
  }
  await lab?.destroy().catch((e: Error) => problems.push(e.message));
  const left = (await listNamespaces()).filter((n) => lab !== undefined && n.startsWith(lab.prefix));
  if (left.length > 0) problems.push(`namespaces left: ${left.join(', ')}`);
  if (problems.length > 0) throw new Error(problems.join('\n'));
}
