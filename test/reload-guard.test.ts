/**
 * Reload safety (issue 16, defect 5): a config file that would delete more
 * than daemon.reload_max_delete_share of the rules (default half; a file cut
 * short is often still valid) is refused unless forced (`mup reload
 * --force`, POST /v1/reload?force=true; SIGHUP never forces), naming how
 * many and which. (A changed config no longer drops API changes at all:
 * test/config-model.test.ts.)
 *
 * Daemons in the root namespace with no interfaces, each with its own
 * bpffs, socket and state file (test/helpers/daemon.ts).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { TestDaemon } from './helpers/daemon.js';
import { parseConfig } from '../src/config/load.js';

const isRoot = process.getuid?.() === 0;

const rule = (i: number, prefix = '2001:db8:1::/48'): string =>
  `  - { name: p${i}, match: 10.0.${i}.0/24, sr_prefix: "${prefix}", src_prefix: "2001:db8:ff::/64" }\n`;
/** Policies p1..pN, after an optional daemon section. */
const config = (n: number, daemon = '', prefix?: string): string =>
  `settings: { max_policies: 64, max_localsids: 16 }\n${daemon}policies:\n${Array.from({ length: n }, (_, i) => rule(i + 1, prefix)).join('')}`;

describe('daemon.reload_max_delete_share in the config', () => {
  it('takes a share from 0 to 1 and refuses anything else', () => {
    expect(parseConfig(config(1, 'daemon:\n  reload_max_delete_share: 0.25\n')).daemon?.reloadMaxDeleteShare).toBe(0.25);
    expect(parseConfig(config(1)).daemon?.reloadMaxDeleteShare).toBeUndefined();
    expect(() => parseConfig(config(1, 'daemon:\n  reload_max_delete_share: 1.5\n'))).toThrow(/reload_max_delete_share.*from 0 to 1/);
    expect(() => parseConfig(config(1, 'daemon:\n  reload_max_delete_share: half\n'))).toThrow(/reload_max_delete_share/);
  });
});

describe.skipIf(!isRoot)('mup reload: deletion guard', () => {
  let d: TestDaemon | undefined;
  afterEach(async () => {
    await d?.cleanup();
    d = undefined;
  });

  const names = async (): Promise<string[]> => {
    const r = await d!.api('GET', '/v1/policies');
    expect(r.status).toBe(200);
    return (r.body as { policies: { name: string }[] }).policies.map((p) => p.name);
  };
  const waitLog = async (re: RegExp): Promise<void> => {
    const deadline = Date.now() + 15_000;
    while (!re.test(d!.log)) {
      if (Date.now() > deadline) throw new Error(`no ${re} in the daemon log:\n${d!.log}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  it('refuses a reload that deletes more than half the rules, unless forced; says how many and which', async () => {
    d = new TestDaemon({ config: config(6) });
    await d.start();
    const all = ['p1', 'p2', 'p3', 'p4', 'p5', 'p6'];
    expect(await names()).toEqual(all);
    // A file cut short after p2: valid YAML, 4 of 6 rules gone.
    d.writeConfig(config(2));

    const cli = await d.cli(['reload']);
    expect(cli.exitCode).not.toBe(0);
    expect(cli.stderr).toMatch(/would delete 4 of the 6 rules/);
    expect(cli.stderr).toMatch(/policy 10\.0\.3\.0\/24 \(p3\).*policy 10\.0\.6\.0\/24 \(p6\)/);
    expect(cli.stderr).toMatch(/--force/);
    expect(await names(), 'refused: nothing changed').toEqual(all);

    const api = await d.api('POST', '/v1/reload');
    expect(api.status).toBe(409);
    expect(await names()).toEqual(all);

    // SIGHUP never forces.
    process.kill(d.pid!, 'SIGHUP');
    await waitLog(/reload refused: the config file would delete 4 of the 6 rules/);
    expect(await names()).toEqual(all);

    // Half (3 of 6) is allowed without --force.
    d.writeConfig(config(3));
    const half = await d.cli(['reload']);
    expect(half.exitCode, half.stderr).toBe(0);
    expect(await names()).toEqual(['p1', 'p2', 'p3']);

    d.writeConfig(config(1));
    expect((await d.cli(['reload'])).exitCode).not.toBe(0);
    const forced = await d.cli(['reload', '--force']);
    expect(forced.exitCode, forced.stderr).toBe(0);
    expect(forced.stdout).toMatch(/2 deleted/);
    expect(await names()).toEqual(['p1']);

    // The API's flag.
    d.writeConfig(config(6));
    expect((await d.api('POST', '/v1/reload')).status).toBe(200);
    d.writeConfig(config(1));
    expect((await d.api('POST', '/v1/reload?force=maybe')).status).toBe(400);
    expect((await d.api('POST', '/v1/reload?force=true')).status).toBe(200);
    expect(await names()).toEqual(['p1']);
  });

  it('daemon.reload_max_delete_share sets the share', async () => {
    const daemon = 'daemon:\n  reload_max_delete_share: 0.8\n';
    d = new TestDaemon({ config: config(6, daemon) });
    await d.start();
    d.writeConfig(config(2, daemon));
    const r = await d.cli(['reload']);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(await names()).toEqual(['p1', 'p2']);
  });
});
