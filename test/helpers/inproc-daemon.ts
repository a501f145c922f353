/**
 * A daemon run inside the test process (no child, no API socket): for
 * tests that count what the daemon's own code reads or allocates. Its
 * tables live on a bpffs it mounts in a temporary directory; stop() removes
 * the pins (detachOnExit), unmounts it and removes the directory, and
 * reports whatever of that failed.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach } from 'vitest';
import { Daemon } from '../../src/daemon/daemon.js';
import { createLogger } from '../../src/daemon/log.js';

export interface InProcDaemon {
  readonly daemon: Daemon;
  readonly dir: string;
  /** Stop it and remove what it made; throws if any of that failed. */
  stop(): void;
}

/**
 * Start a daemon on `config` (YAML text), instance `<name><pid>`, warnings
 * and worse logged nowhere. `object`: the daemon's --object. `netns`: the daemon's --netns, which moves this
 * thread into that namespace for good (a test file of its own: vitest runs
 * each file in a process of its own). `tmpfs`: the directory (config, state
 * file, bpffs mount point) on a tmpfs of its own, for a test that makes
 * thousands of changes and measures something other than the disk (each
 * change's fdatasync on this machine's disk doubled change-memory's time).
 */
export async function startInProcDaemon(
  name: string,
  config: string,
  o: { netns?: string; object?: string; tmpfs?: boolean; workerScripts?: readonly string[] } = {},
): Promise<InProcDaemon> {
  const dir = mkdtempSync(join(tmpdir(), `mup-${name}-`));
  if (o.tmpfs === true) {
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'mode=0700', 'mup-test', dir], { stdio: ['ignore', 'ignore', 'pipe'] });
    } catch (e) {
      rmSync(dir, { recursive: true, force: true });
      throw e;
    }
  }
  const bpffs = join(dir, 'bpffs');
  const configPath = join(dir, 'mup.yaml');
  writeFileSync(configPath, config);
  const quiet = new Writable({ write: (_c, _e, cb) => cb() });
  const daemon = new Daemon({
    configPath,
    instance: `${name}${process.pid}`,
    bpffs,
    stateFile: join(dir, 'state.json'),
    detachOnExit: true,
    ...(o.netns === undefined ? {} : { netns: o.netns }),
    ...(o.object === undefined ? {} : { object: o.object }),
    ...(o.workerScripts === undefined ? {} : { workerScripts: o.workerScripts }),
    log: createLogger({ instance: 'test', level: 'warn', json: true, stream: quiet }),
  });
  const stop = (): void => {
    const problems: string[] = [];
    try {
      daemon.stop(); // detachOnExit: removes the pins
    } catch (e) {
      problems.push(`stop: ${(e as Error).message}`);
    }
    try {
      execFileSync('umount', [bpffs], { stdio: ['ignore', 'ignore', 'pipe'] });
    } catch {
      // not mounted (the daemon did not get that far)
    }
    if (o.tmpfs === true) {
      try {
        execFileSync('umount', [dir], { stdio: ['ignore', 'ignore', 'pipe'] });
      } catch (e) {
        problems.push(`umount ${dir}: ${(e as Error).message}`);
      }
    }
    rmSync(dir, { recursive: true, force: true });
    if (problems.length > 0) throw new Error(problems.join('; '));
  };
  try {
    await daemon.start();
  } catch (e) {
    try {
      stop();
    } catch {
      // the start's error is the one to report
    }
    throw e;
  }
  return { daemon, dir, stop };
}

/**
 * For a describe block: a start function whose daemon is stopped after
 * each test (pins, bpffs mount, directory), whatever the test did.
 */
export function inProcDaemonPerTest(): (name: string, config: string, o?: Parameters<typeof startInProcDaemon>[2]) => Promise<InProcDaemon> {
  let run: InProcDaemon | undefined;
  afterEach(() => {
    try {
      run?.stop();
    } finally {
      run = undefined;
    }
  });
  return async (name, config, o) => (run = await startInProcDaemon(name, config, o));
}
