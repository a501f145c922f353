/**
 * Long-running children spawned before the daemon's heap grows. A spawn
 * forks the daemon, and the fork copies the page tables of everything it
 * maps, on the event loop's thread: 4-10 ms from a 45 MB process, 15-18 ms
 * (once 213 ms) from a 377 MB one. A start spawned its five `ip` children
 * (the link monitor, the next-hop monitor, three table readers) right
 * after filling the tables, its largest moment, in the way of the API's
 * first answers. Spawned early they wait, parked, until their user takes
 * them (same command, same arguments); what nobody takes is killed
 * (dropEarly). Output a parked child writes waits in its pipe (up to the
 * pipe's size; a child that writes more blocks until taken): for children
 * that write nothing before they are asked, or whose early output would be
 * replayed to no harm.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readlinkSync } from 'node:fs';
import type { Readable } from 'node:stream';

/** Standard output and error are always pipes; standard input a pipe or nothing. */
export type ChildStdio = ['pipe' | 'ignore', 'pipe', 'pipe'];
export type PipedChild = ChildProcess & { readonly stdout: Readable; readonly stderr: Readable };

interface Parked {
  readonly child: ChildProcess;
  /** Whose it is: dropEarly(owner) kills only those (several daemons may run in one process: tests). */
  readonly owner: object | undefined;
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

/**
 * Spawn `cmd args` now, for a later spawnChild of the same command to take.
 * Best effort: a spawn that fails now (ENOMEM, EAGAIN) parks nothing, and
 * the taker spawns then. Returns the child, or undefined.
 */
export function spawnEarly(cmd: string, args: readonly string[], stdio: ChildStdio, owner?: object): ChildProcess | undefined {
  let child: ChildProcess;
  try {
    child = spawn(cmd, [...args], { stdio });
  } catch {
    return undefined;
  }
  const p: Parked = {
    child,
    owner,
    onError: () => {
      p.failed = true;
    },
    failed: false,
  };
  child.on('error', p.onError);
  const key = keyOf(cmd, args, stdio);
  parked.set(key, [...(parked.get(key) ?? []), p]);
  return child;
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

/** Kill the parked children of `owner` (every one: undefined) that nobody took; returns how many. */
export function dropEarly(owner?: object): number {
  let n = 0;
  for (const [key, list] of parked) {
    const keep = list.filter((p) => owner !== undefined && p.owner !== owner);
    for (const p of list) {
      if (keep.includes(p)) continue;
      p.child.kill('SIGKILL');
      n++;
    }
    if (keep.length === 0) parked.delete(key);
    else parked.set(key, keep);
  }
  return n;
}

/** Children parked now (tests). */
export function parkedCount(): number {
  let n = 0;
  for (const list of parked.values()) n += list.length;
  return n;
}
