/**
 * GoBGP as a separate process: the sidecar speaker (gobgpd) and its CLI
 * (gobgp). The daemon never starts gobgpd in production (the operator or the
 * sidecar's unit does); the lab and the tests do, through `startGobgpd`.
 *
 * gobgpd 3.10's TOML has no key for the gRPC API address, so it is always
 * given on the command line (`--api-hosts`), loopback only, with pprof off.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { openSync, closeSync } from 'node:fs';

/** host:port of a gobgpd gRPC API. */
export interface GobgpApi {
  readonly host: string;
  readonly port: number;
}

export function parseApi(text: string, where = 'api'): GobgpApi {
  const m = /^(\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:]+\]|localhost):(\d{1,5})$/.exec(text.trim());
  const port = m === null ? NaN : Number(m[2]);
  if (m === null || !(port >= 1 && port <= 65535)) {
    throw new Error(`${where}: "${text}" is not HOST:PORT (e.g. 127.0.0.1:50072)`);
  }
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port };
}

export function apiText(a: GobgpApi): string {
  return a.host.includes(':') ? `[${a.host}]:${a.port}` : `${a.host}:${a.port}`;
}

/** The exact command line that runs gobgpd on `configFile` with its API at `api`. */
export function gobgpdArgv(configFile: string, api: GobgpApi): string[] {
  return ['gobgpd', '-f', configFile, '--api-hosts', apiText(api), '--pprof-disable'];
}

/** Run `gobgp -u HOST -p PORT ARGS...`; throws with the command and its stderr unless it succeeds. */
export async function gobgp(api: GobgpApi, args: readonly string[], o: { timeout?: number; netns?: string } = {}): Promise<string> {
  const argv = ['gobgp', '-u', api.host, '-p', String(api.port), ...args];
  const full = o.netns === undefined ? argv : ['ip', 'netns', 'exec', o.netns, ...argv];
  // Imported when first used: execa and what it pulls in cost every `mup` command and the daemon's start 100-130 ms.
  const { execa } = await import('execa');
  const r = await execa(full[0]!, full.slice(1), { reject: false, timeout: o.timeout ?? 20_000 });
  if (r.exitCode !== 0) {
    throw new Error(`${full.join(' ')} failed (exit ${r.exitCode ?? (r.timedOut ? 'timeout' : '?')}): ${String(r.stderr || r.stdout).trim()}`);
  }
  return String(r.stdout ?? '');
}

export interface GobgpdProcess {
  readonly pid: number;
  readonly api: GobgpApi;
  readonly child: ChildProcess;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when the process has exited. */
  stop(graceMs?: number): Promise<void>;
  /** SIGKILL at once (a crash, for tests of graceful restart); resolves on exit. */
  kill(): Promise<void>;
}

export interface StartOptions {
  readonly configFile: string;
  readonly api: GobgpApi;
  /** Run inside this network namespace (`ip netns exec`). */
  readonly netns?: string;
  /** gobgpd's log (stdout and stderr) goes here; default: discarded. */
  readonly logFile?: string;
  /** Extra gobgpd options (e.g. ['-r'] to flag restart state). */
  readonly extra?: readonly string[];
  /** How long to wait for the API to answer; default 10 s. */
  readonly readyTimeoutMs?: number;
}

/**
 * Start gobgpd and wait until its API answers `gobgp global`. Throws (and
 * kills the process) if it exits or does not answer in time; the error
 * carries the tail of its log when one was given.
 */
export async function startGobgpd(o: StartOptions): Promise<GobgpdProcess> {
  const argv = [...gobgpdArgv(o.configFile, o.api), ...(o.extra ?? [])];
  const full = o.netns === undefined ? argv : ['ip', 'netns', 'exec', o.netns, ...argv];
  const fd = o.logFile === undefined ? 'ignore' : openSync(o.logFile, 'a');
  const child = spawn(full[0]!, full.slice(1), { stdio: ['ignore', fd, fd], detached: false });
  if (typeof fd === 'number') closeSync(fd);
  let exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  const exit = new Promise<void>((res) => {
    child.once('exit', (code, signal) => {
      exited = { code, signal };
      res();
    });
    child.once('error', () => res());
  });
  const stopWith = async (sig: NodeJS.Signals, graceMs: number): Promise<void> => {
    if (exited !== undefined || child.pid === undefined) return;
    child.kill(sig);
    const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await exit;
    clearTimeout(t);
  };
  const proc: GobgpdProcess = {
    pid: child.pid ?? -1,
    api: o.api,
    child,
    stop: (graceMs = 3000) => stopWith('SIGTERM', graceMs),
    kill: () => stopWith('SIGKILL', 0),
  };
  const deadline = Date.now() + (o.readyTimeoutMs ?? 10_000);
  let last = '';
  while (Date.now() < deadline) {
    if (exited !== undefined) break;
    try {
      await gobgp(o.api, ['global'], { timeout: 2000, ...(o.netns === undefined ? {} : { netns: o.netns }) });
      return proc;
    } catch (e) {
      last = (e as Error).message;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  await proc.kill();
  const why = exited !== undefined ? `exited (code ${exited.code}, signal ${exited.signal})` : `API ${apiText(o.api)} did not answer: ${last}`;
  throw new Error(`gobgpd ${full.join(' ')}: ${why}${o.logFile === undefined ? '' : ` (log: ${o.logFile})`}`);
}
