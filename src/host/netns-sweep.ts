/**
 * Namespaces named `<prefix><pid>-<name>` (test labs, benchmark labs) left
 * by a run that was killed before its cleanup: found and deleted, leaving
 * those of live processes alone. Shared by the benchmark and the tests.
 */
import { execa } from 'execa';
import { pidAlive } from './process.js';

/** Names of every network namespace (`ip netns list`). */
export async function listNamespaces(): Promise<string[]> {
  const r = await execa('ip', ['netns', 'list'], { reject: false, timeout: 10_000 });
  if (r.exitCode !== 0) throw new Error(`ip netns list failed (exit ${r.exitCode}): ${String(r.stderr).trim()}`);
  return String(r.stdout)
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter((n) => n !== '');
}

/** Delete `<prefix><pid>-*` namespaces whose process is gone. Best effort: returns what it deleted. */
export async function sweepStale(prefix: string): Promise<string[]> {
  const swept: string[] = [];
  for (const name of await listNamespaces()) {
    if (!name.startsWith(prefix)) continue;
    const pid = Number(/^(\d+)-/.exec(name.slice(prefix.length))?.[1]);
    if (!Number.isInteger(pid) || pid === process.pid || pidAlive(pid)) continue;
    const r = await execa('ip', ['netns', 'delete', name], { reject: false, timeout: 10_000 });
    if (r.exitCode === 0) swept.push(name);
  }
  return swept;
}
