/**
 * Node flags the daemon runs with: every launcher puts them before
 * bin/mup.js (the systemd unit through the file's own #! line, the lab, the
 * benchmarks and the test helper explicitly). They must be on the command
 * line: V8 sizes the heap when the process starts.
 *
 * --max-semi-space-size=4: the young generation (new space) grows to 8 MB
 * at most. By default V8 doubles it up to 16 MB a semi-space (32 MB of new
 * space) whenever many young objects survive a scavenge, and keeps it while
 * allocation goes on: under steady API churn the daemon's RSS rose 20-30 MB
 * a few minutes into each life with its live heap flat. 1 MB (no growth)
 * cost the 131,072-rule start 0.4-0.6 s and halved 4 writers' changes/s;
 * 4 MB measured like the default. Setting the growth factor at run time is
 * not enough: it holds until the first worker thread starts
 * (docs/daemon.md "Memory").
 */
export const DAEMON_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=4'];

/** The daemon's flags this process was started without (empty: all there). */
export function missingDaemonNodeFlags(execArgv: readonly string[] = process.execArgv): string[] {
  return DAEMON_NODE_FLAGS.filter((f) => !execArgv.includes(f));
}
