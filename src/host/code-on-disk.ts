/**
 * The scripts a running daemon starts threads from, as they were when it
 * started. A package upgraded under a running daemon (an upgrade does not
 * restart it: docs/install.md) replaces them: the daemon's next reload or
 * config show/save would run the new version's parser or printer beside
 * the old version's rule set, tables and state file, whose shapes need not
 * agree. Those are refused instead, naming the restart that takes the new
 * code (and the data plane) over without losing a packet (found in review,
 * session 43).
 *
 * A script is the same while its inode, size and modification time are:
 * dpkg renames a new file into place (a new inode), a build writes over it
 * (a new time).
 */
import { statSync } from 'node:fs';

function stampOf(path: string): string {
  try {
    const s = statSync(path, { bigint: true });
    return `${s.ino}:${s.size}:${s.mtimeNs}`;
  } catch (e) {
    return `missing (${(e as NodeJS.ErrnoException).code ?? 'error'})`;
  }
}

export class CodeOnDisk {
  readonly #stamps: ReadonlyMap<string, string>;

  constructor(readonly paths: readonly string[]) {
    this.#stamps = new Map(paths.map((p) => [p, stampOf(p)]));
  }

  /** The first script replaced or changed since the start, if any. */
  replaced(): string | undefined {
    for (const [p, was] of this.#stamps) if (stampOf(p) !== was) return p;
    return undefined;
  }

  /** Throws `make(message)` when a script was replaced: what would have run it is refused. */
  check(what: string, make: (message: string) => Error): void {
    const p = this.replaced();
    if (p === undefined) return;
    throw make(
      `${p} changed since this daemon started (mup was upgraded or rebuilt under it): ${what} would run the new code beside the old. ` +
        'Nothing was changed; restart the daemon (systemctl restart mup@<instance>: the new daemon takes the data plane over without losing a packet), then do it again',
    );
  }
}
