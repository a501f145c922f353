/**
 * Long-running children spawned before the daemon's heap grows. A spawn
 * forks the daemon, and the fork copies the page tables of everything it
 * maps, on the event loop's thread: 4-10 ms from a 45 MB process, 15-18 ms
 * (once 213 ms) from a 377 MB one. A start spawned its five `ip` children
 * (the link monitor, the next-hop monitor, three table readers) right
 * after filling the tables, its largest moment, in the way of the API's
 * first answers. Spawned early they wait, parked, until their user takes
 * them (same command, same arguments); what nobody takes is killed
 * (dropEarly). Output a parked child writes waits in its pipe: nothing is
 * lost.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readlinkSync } from 'node:fs';
import type { Readable } from 'node:stream';

/** Standard output and error are always pipes; standard input a pipe or nothing. */
export type ChildStdio = ['pipe' | 'ignore', 'pipe', 'pipe'];
export type PipedChild = ChildProcess & { readonly stdout: Readable; readonly stderr: Readable };

interface Parked {
  readonly child: ChildProcess;
  /** Listens while parked: an 'error' event with no listener would end the process. */
  readonly onError: (e: Error) => void;
  failed: boolean;
}

const parked = new Map<string, Parked[]>();

/**
 * A child runs in the network namespace its spawner was in: one parked in
 * another namespace (a daemon that entered its --netns since) is not the
 * same child.
 */
function netnsNow(): string {
  try {
    return readlinkSync('/proc/thread-self/ns/net');
  } catch {
    return '';
  }
}

function keyOf(cmd: string, args: readonly string[], stdio: ChildStdio): string {
  return JSON.stringify([netnsNow(), cmd, args, stdio]);
}

/** Spawn `cmd args` now, for a later spawnChild of the same command to take. */
export function spawnEarly(cmd: string, args: readonly string[], stdio: ChildStdio): void {
  const child = spawn(cmd, [...args], { stdio });
  const p: Parked = {
    child,
    onError: () => {
      p.failed = true;
    },
    failed: false,
  };
  child.on('error', p.onError);
  const key = keyOf(cmd, args, stdio);
  parked.set(key, [...(parked.get(key) ?? []), p]);
}

/**
 * A running child of `cmd args`: one spawned early if one is parked and
 * still running, else a new one. Its user attaches its listeners as after
 * spawn(): a parked child that failed or exited is never given.
 */
export function spawnChild(cmd: string, args: readonly string[], stdio: ChildStdio): PipedChild {
  const key = keyOf(cmd, args, stdio);
  const list = parked.get(key);
  while (list !== undefined && list.length > 0) {
    const p = list.shift()!;
    if (list.length === 0) parked.delete(key);
    if (!p.failed && p.child.exitCode === null && p.child.signalCode === null) {
      p.child.removeListener('error', p.onError);
      return p.child as PipedChild;
    }
    p.child.kill('SIGKILL');
  }
  return spawn(cmd, [...args], { stdio }) as PipedChild;
}

/** Kill every parked child nobody took; returns how many. */
export function dropEarly(): number {
  let n = 0;
  for (const list of parked.values()) {
    for (const p of list) {
      p.child.kill('SIGKILL');
      n++;
    }
  }
  parked.clear();
  return n;
}

/** Children parked now (tests). */
export function parkedCount(): number {
  let n = 0;
  for (const list of parked.values()) n += list.length;
  return n;
}
