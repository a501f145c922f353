/**
 * `mup daemon` for tests: a real daemon process (bin/mup.js, the compiled
 * dist/), with its own bpffs mount, socket and state file in a temporary
 * directory, so that test files running side by side never share pins.
 * cleanup() stops it, removes its links and pins (`mup teardown`), unmounts
 * the bpffs and deletes the directory, also after a failed test.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa, type ResultPromise } from 'execa';
import { DAEMON_NODE_FLAGS } from '../../src/host/node-flags.js';

export const MUP_BIN = fileURLToPath(new URL('../../bin/mup.js', import.meta.url));

export interface ApiAnswer {
  readonly status: number;
  readonly body: unknown;
  readonly text: string;
  readonly headers: Record<string, string | string[] | undefined>;
}

export interface RequestOptions {
  /** JSON body (content type and length set). */
  readonly body?: unknown;
  /** Body bytes as given (content type and length set unless `exactHeaders`). */
  readonly raw?: string | Buffer;
  /** Body written in these pieces, headers exactly as given (framing tests). */
  readonly chunks?: readonly Buffer[];
  readonly headers?: Record<string, string>;
}

/** One HTTP request to a unix socket (or host:port). */
export function apiRequest(socket: string | { host: string; port: number }, method: string, path: string, o: RequestOptions = {}): Promise<ApiAnswer> {
  const payload = o.raw ?? (o.body === undefined ? undefined : JSON.stringify(o.body));
  const headers: Record<string, string> = {
    ...(payload === undefined || o.chunks !== undefined ? {} : { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(payload)) }),
    ...o.headers,
  };
  return new Promise((resolve, reject) => {
    const req = request(
      { method, path, headers, ...(typeof socket === 'string' ? { socketPath: socket } : socket), timeout: 30_000 },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let body: unknown = text;
          try {
            body = JSON.parse(text);
          } catch {
            // text (metrics)
          }
          resolve({ status: res.statusCode ?? 0, body, text, headers: res.headers });
        });
      },
    );
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer within 30 s`)));
    if (o.chunks !== undefined) for (const c of o.chunks) req.write(c);
    else if (payload !== undefined) req.write(payload);
    req.end();
  });
}

export interface DaemonOptions {
  /** YAML config text, written to <dir>/mup.yaml. */
  readonly config: string;
  /** Network namespace the daemon runs in (--netns). */
  readonly netns?: string;
  readonly instance?: string;
  readonly args?: readonly string[];
}

export class TestDaemon {
  readonly dir: string;
  readonly configPath: string;
  readonly socket: string;
  readonly stateFile: string;
  readonly bpffs: string;
  readonly instance: string;
  #proc: ResultPromise | undefined;
  #log = '';
  readonly #o: DaemonOptions;

  constructor(o: DaemonOptions) {
    this.#o = o;
    this.dir = mkdtempSync(join(tmpdir(), 'mup-daemon-test-'));
    this.configPath = join(this.dir, 'mup.yaml');
    this.socket = join(this.dir, 'mup.sock');
    this.stateFile = join(this.dir, 'state.json');
    this.bpffs = join(this.dir, 'bpffs');
    this.instance = o.instance ?? `t${process.pid}`;
    writeFileSync(this.configPath, o.config);
  }

  /** Everything the daemon processes printed so far (JSON log lines). */
  get log(): string {
    return this.#log;
  }

  get pid(): number | undefined {
    return this.#proc?.pid;
  }

  writeConfig(text: string): void {
    writeFileSync(this.configPath, text);
  }

  /** CLI args of `mup daemon` for this test daemon. */
  daemonArgs(): string[] {
    return [
      'daemon',
      '--config', this.configPath,
      '--instance', this.instance,
      '--socket', this.socket,
      '--state-file', this.stateFile,
      '--bpffs', this.bpffs,
      '--log-format', 'json',
      ...(this.#o.netns === undefined ? [] : ['--netns', this.#o.netns]),
      ...(this.#o.args ?? []),
    ];
  }

  /** Start a daemon process and wait until its API answers. */
  async start(extra: readonly string[] = []): Promise<void> {
    if (this.#proc !== undefined) throw new Error('a daemon of this TestDaemon is running already');
    const proc = execa('node', [...DAEMON_NODE_FLAGS, MUP_BIN, ...this.daemonArgs(), ...extra], { reject: false, all: true });
    this.#proc = proc;
    proc.all?.on('data', (c: Buffer) => {
      this.#log += c.toString();
    });
    // 60 s: 2-3 s on a quiet host, but a restart took 18 s on a loaded 2-core one (the BPF load alone 6 s).
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (proc.exitCode !== null) {
        await proc;
        this.#proc = undefined;
        throw new Error(`mup daemon exited with ${proc.exitCode} before serving:\n${this.#log}`);
      }
      try {
        const r = await apiRequest(this.socket, 'GET', '/v1/status');
        if (r.status === 200 && (r.body as { pid?: number }).pid === proc.pid) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error(`mup daemon did not answer on ${this.socket} within 60 s:\n${this.#log}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** Start and expect it to fail; resolves with its exit code and output. */
  async startFailing(extra: readonly string[] = []): Promise<{ exitCode: number; output: string }> {
    const r = await execa('node', [...DAEMON_NODE_FLAGS, MUP_BIN, ...this.daemonArgs(), ...extra], { reject: false, all: true, timeout: 60_000 });
    return { exitCode: r.exitCode ?? -1, output: String(r.all ?? '') };
  }

  /** Signal the running daemon and wait for it to exit; its exit code. */
  async stop(signal: 'SIGTERM' | 'SIGKILL' | 'SIGINT' = 'SIGTERM'): Promise<number | null> {
    const proc = this.#proc;
    if (proc === undefined) return null;
    proc.kill(signal);
    const r = await proc;
    this.#proc = undefined;
    return r.exitCode ?? null;
  }

  api(method: string, path: string, o: RequestOptions = {}): Promise<ApiAnswer> {
    return apiRequest(this.socket, method, path, o);
  }

  /** Run the mup CLI against this daemon (MUP_SOCKET set). */
  cli(args: readonly string[]): Promise<{ exitCode: number; stdout: string; stderr: string }> {
    return execa('node', [MUP_BIN, ...args], { reject: false, env: { MUP_SOCKET: this.socket }, timeout: 30_000 }).then((r) => ({
      exitCode: r.exitCode ?? -1,
      stdout: String(r.stdout),
      stderr: String(r.stderr),
    }));
  }

  /** Stop (SIGKILL if need be), remove links and pins, unmount, delete the directory. Safe to call twice. */
  async cleanup(): Promise<void> {
    const errors: string[] = [];
    if (this.#proc !== undefined) {
      this.#proc.kill('SIGKILL');
      await this.#proc;
      this.#proc = undefined;
    }
    const down = await execa(
      'node',
      [MUP_BIN, 'teardown', '--instance', this.instance, '--bpffs', this.bpffs, ...(this.#o.netns === undefined ? [] : ['--netns', this.#o.netns])],
      { reject: false },
    );
    // A teardown that cannot enter a namespace already deleted is fine:
    // unmounting the bpffs below releases every pin (and so every link).
    void down;
    const um = await execa('umount', [this.bpffs], { reject: false });
    if (um.exitCode !== 0 && !/not mounted|no mount point/.test(String(um.stderr))) errors.push(`umount: ${String(um.stderr)}`);
    rmSync(this.dir, { recursive: true, force: true });
    if (errors.length > 0) throw new Error(errors.join('\n'));
  }
}

/**
 * A test file's afterAll: every daemon cleaned up (stopped, torn down,
 * unmounted), then the namespaces destroyed, each step tried whatever the
 * others did; one error naming every problem.
 */
export async function cleanupAll(daemons: readonly (TestDaemon | undefined)[], lab: { destroy(): Promise<void> } | undefined): Promise<void> {
  const problems: string[] = [];
  for (const t of daemons) {
    try {
      await t?.cleanup();
    } catch (e) {
      problems.push((e as Error).message);
    }
  }
  try {
    await lab?.destroy();
  } catch (e) {
    problems.push((e as Error).message);
  }
  if (problems.length > 0) throw new Error(problems.join('\n'));
}
