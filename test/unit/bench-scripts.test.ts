/**
 * The npm scripts of the benches and the soak make namespaces, bpffs mounts
 * and daemons, and remove them on SIGINT/SIGTERM. They must run as one node
 * process (`node --import tsx`): under the tsx CLI, a SIGTERM the script's
 * event loop did not acknowledge to tsx within 30 ms was followed by
 * SIGKILL, and bench:daemon stopped during its (b) phase left its
 * namespace and mount behind (1 of 3 tries).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const scripts = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { scripts: Record<string, string> }).scripts;

describe('bench scripts', () => {
  const benches = Object.entries(scripts).filter(([name]) => name === 'bench' || name.startsWith('bench:') || name === 'soak');

  it('there are the benches and the soak to check', () => {
    expect(benches.map(([n]) => n).sort()).toEqual(expect.arrayContaining(['bench', 'bench:daemon', 'bench:bgp', 'bench:micro', 'soak']));
  });

  it.each(benches)('%s runs as one node process, not under the tsx CLI', (_name, command) => {
    expect(command).toMatch(/(^|\s)node --import tsx /);
    expect(command.replaceAll('--import tsx', '')).not.toMatch(/\btsx\b/);
  });
});
