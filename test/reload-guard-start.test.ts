/**
 * daemon.reload_max_delete_share takes effect at the next start, as
 * docs/config.md and docs/daemon.md say and as the reload's own log line
 * says of the daemon section: a reload that reads a new value keeps the
 * guard the daemon started with, raised or lowered.
 *
 * Before, the guard read the config of the last reload: a reload of the file
 * with `reload_max_delete_share: 1` (and no deletion) turned the guard off,
 * so the next reload of a file cut short deleted every rule without --force;
 * and a value lowered to 0 refused the next reload's deletions at once.
 *
 * Daemons in the root namespace with no interfaces, each with its own
 * bpffs, socket and state file (test/helpers/daemon.ts); afterEach stops
 * and tears down each one.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { TestDaemon } from './helpers/daemon.js';

const isRoot = process.getuid?.() === 0;

const rule = (i: number): string => `  - { name: p${i}, match: 10.0.${i}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n`;
/** Policies p1..pN; with `share`, a daemon section that sets the guard. */
const config = (n: number, share?: number): string =>
  'settings: { max_policies: 64, max_localsids: 16 }\n' +
  (share === undefined ? '' : `daemon:\n  reload_max_delete_share: ${share}\n`) +
  `policies:\n${Array.from({ length: n }, (_, i) => rule(i + 1)).join('')}`;
const names = (n: number): string[] => Array.from({ length: n }, (_, i) => `p${i + 1}`);

describe.skipIf(!isRoot)('daemon.reload_max_delete_share: the value the daemon started with', () => {
  let d: TestDaemon | undefined;
  afterEach(async () => {
    await d?.cleanup();
    d = undefined;
  });

  const listed = async (): Promise<string[]> => {
    const r = await d!.api('GET', '/v1/policies');
    expect(r.status).toBe(200);
    return (r.body as { policies: { name: string }[] }).policies.map((p) => p.name);
  };
  const reload = async (text: string): Promise<{ status: number; text: string }> => {
    d!.writeConfig(text);
    const r = await d!.api('POST', '/v1/reload');
    return { status: r.status, text: r.text };
  };
  const restart = async (): Promise<void> => {
    expect(await d!.stop()).toBe(0);
    await d!.start();
  };

  it('raised to 1 by a reload: the guard still refuses a file cut short, until the next start', async () => {
    d = new TestDaemon({ config: config(6), instance: `gup${process.pid}` });
    await d.start();
    const set = await reload(config(6, 1));
    expect(set.status, set.text).toBe(200);
    expect(d.log).toMatch(/the daemon section changed \(.*\): that takes effect at the next restart/);

    // Before the fix: 200, and p2..p6 gone without --force.
    const cut = await reload(config(1, 1));
    expect(cut.status, cut.text).toBe(409);
    expect(cut.text).toMatch(/would delete 5 of the 6 rules \(83%, more than daemon\.reload_max_delete_share 0\.5\)/);
    expect(await listed()).toEqual(names(6));

    // The next start takes the file's value: the guard is off.
    expect((await reload(config(6, 1))).status).toBe(200);
    await restart();
    const off = await reload(config(1, 1));
    expect(off.status, off.text).toBe(200);
    expect(await listed()).toEqual(['p1']);
  });

  it('lowered to 0 by a reload: deletions within the starting share still apply, until the next start', async () => {
    d = new TestDaemon({ config: config(6, 1), instance: `gdown${process.pid}` });
    await d.start();
    const set = await reload(config(6, 0));
    expect(set.status, set.text).toBe(200);

    // Before the fix: 409 (share 0: no deletion without --force).
    const cut = await reload(config(2, 0));
    expect(cut.status, cut.text).toBe(200);
    expect(await listed()).toEqual(names(2));

    // The next start takes the file's value: any deletion needs --force.
    await restart();
    const refused = await reload(config(1, 0));
    expect(refused.status, refused.text).toBe(409);
    expect(refused.text).toMatch(/would delete 1 of the 2 rules \(50%, more than daemon\.reload_max_delete_share 0\)/);
    expect(await listed()).toEqual(names(2));
  });
});
