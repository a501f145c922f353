/**
 * A package upgraded under a running daemon (an upgrade does not restart
 * it) replaces the scripts its reload and config show/save run on threads:
 * the old daemon would have run the new version's parser and printer
 * beside its old rule set, tables and state file. Those are refused (409,
 * naming the restart), and nothing changes (found in review, session 43).
 *
 * The real Daemon in this process on the compiled object, its pins in a
 * bpffs mounted in a temporary directory, no interface; the scripts
 * watched are stand-ins in that directory (the daemon's own are dist's,
 * which this test must not touch), replaced as dpkg does: a new file
 * renamed into place.
 */
import { mkdirSync, readFileSync, renameSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { RuleError } from '../src/daemon/rules.js';
import { inProcDaemonPerTest } from './helpers/inproc-daemon.js';
import { CodeOnDisk } from '../src/host/code-on-disk.js';

const isRoot = process.getuid?.() === 0;
const CONFIG = 'settings: { forwarding: tx, max_policies: 8, max_localsids: 8 }\npolicies:\n  - { name: p1, match: 10.1.0.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n';

describe.skipIf(!isRoot)('a daemon whose thread scripts were replaced under it', () => {
  const start = inProcDaemonPerTest();

  it('refuses reload, reload --check, config show and save with 409, and changes nothing', async () => {
    // The stand-in is written before the daemon starts (the helper makes the directory: a path in /tmp first).
    const script = join(process.env['TMPDIR'] ?? '/tmp', `mup-upgrade-${process.pid}.js`);
    writeFileSync(script, '// version 1\n');
    try {
      const run = await start('upgrade', CONFIG, { workerScripts: [script] });
      const d = run.daemon;
      const edited = CONFIG.replace('2001:db8:1::/48', '2001:db8:2::/48');
      // Before the upgrade: a reload of an edit goes through.
      writeFileSync(join(run.dir, 'mup.yaml'), edited);
      expect((await d.reload()).replaced).toBe(1);
      // dpkg: the new file written beside, then renamed over the old one.
      writeFileSync(`${script}.new`, '// version 2\n');
      renameSync(`${script}.new`, script);
      writeFileSync(join(run.dir, 'mup.yaml'), CONFIG);
      const refused = async (p: Promise<unknown>): Promise<RuleError> => {
        const e = await p.then(() => undefined, (x: unknown) => x);
        expect(e).toBeInstanceOf(RuleError);
        expect((e as RuleError).status).toBe(409);
        return e as RuleError;
      };
      const r = await refused(d.reload());
      expect(r.message).toContain(`${script} changed since this daemon started`);
      expect(r.message).toMatch(/Nothing was changed; restart the daemon/);
      await refused(d.reload({ check: true }));
      await refused(d.runningConfig());
      await refused(d.saveConfig());
      // The rule as the reload before the upgrade left it; the file not saved over.
      expect((d.ruleMap('policy').get('10.1.0.0/24') as { srPrefix: { len: number } }).srPrefix.len).toBe(48);
      expect(d.status().config.file).toBe(join(run.dir, 'mup.yaml'));
      expect(readFileSync(join(run.dir, 'mup.yaml'), 'utf8')).toBe(CONFIG);
      expect(d.reloads.ok).toBe(1);
    } finally {
      rmSync(script, { force: true });
    }
  });
});

describe('CodeOnDisk', () => {
  it('names a script renamed over, written over, or gone; nothing when untouched', () => {
    const dir = join(process.env['TMPDIR'] ?? '/tmp', `mup-code-${process.pid}`);
    mkdirSync(dir, { recursive: true });
    try {
      const [a, b, c] = ['a.js', 'b.js', 'c.js'].map((f) => join(dir, f));
      for (const f of [a, b, c]) writeFileSync(f!, 'x\n');
      const code = new CodeOnDisk([a!, b!, c!]);
      expect(code.replaced()).toBeUndefined();
      writeFileSync(`${b}.new`, 'x\n');
      renameSync(`${b}.new`, b!);
      expect(code.replaced()).toBe(b);
      const again = new CodeOnDisk([a!, c!]);
      writeFileSync(c!, 'y\n');
      utimesSync(c!, new Date(), new Date(Date.now() + 5000));
      expect(again.replaced()).toBe(c);
      rmSync(a!);
      expect(new CodeOnDisk([c!]).replaced()).toBeUndefined();
      expect(again.replaced()).toBe(a);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
