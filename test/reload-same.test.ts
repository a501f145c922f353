/**
 * A reload of the file as last loaded (the same bytes: its sha256) keeps
 * the running rule set: nothing is parsed, checked or diffed again (issue
 * 19: with 131,072 rules that held the daemon's event loop for 2.3 s, and
 * SIGHUP or `mup reload` without an edit is common). The rule objects the
 * daemon answers from stay the same objects; an edited file is parsed, the
 * rules it changed are new objects (the others stay the running ones:
 * src/config/parse-async.ts), and its change applies.
 *
 * The daemon runs in this process (startInProcDaemon: the real Daemon on
 * the compiled build/mup.bpf.o, its pins on a bpffs the test mounts in a
 * temporary directory and removes in afterAll).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../src/daemon/daemon.js';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';

/** The running config's YAML (GET /v1/config's `yaml`). */
async function runningYaml(d: Daemon): Promise<string> {
  return JSON.parse((await d.runningConfig()).yamlJson.toString('utf8')) as string;
}

const isRoot = process.getuid?.() === 0;
const N = 2000;

function configText(srPrefixOfP7: string, mtuOfL3?: number): string {
  const lines = ['settings:', '  max_policies: 4096', '  max_localsids: 4096', 'policies:'];
  for (let i = 0; i < N; i++) {
    lines.push(`  - name: p${i}`, `    match: 10.${i >> 8}.${i & 255}.0/24`, `    sr_prefix: ${i === 7 ? srPrefixOfP7 : '2001:db8:1::/48'}`, '    src_prefix: 2001:db8:ff::/64');
  }
  lines.push('localsids:');
  for (let i = 0; i < N; i++) {
    lines.push(`  - name: l${i}`, `    sid: 2001:db8:${(i + 16).toString(16)}::/48`, '    src_prefix_len: 64');
    if (i === 3 && mtuOfL3 !== undefined) lines.push(`    mtu: ${mtuOfL3}`);
  }
  return `${lines.join('\n')}\n`;
}

describe.skipIf(!isRoot)('a reload of the same file', () => {
  let run: InProcDaemon | undefined;
  beforeAll(async () => {
    run = await startInProcDaemon('reloadsame', configText('2001:db8:1::/48'));
  }, 60_000);
  afterAll(() => run?.stop());

  it('keeps the running rule set (the same rule objects), the API changes on top and the tables', async () => {
    const d = run!.daemon;
    const added = await d.putRule('policy', { name: 'api1', match: '10.200.0.0/24', sr_prefix: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' }, 'add');
    expect(added).toMatchObject({ name: 'api1' });
    const p0 = d.ruleMap('policy').get('10.0.0.0/24');
    const l5 = d.ruleMap('localsid').get('2001:db8:15::/48');
    expect(p0).toBeDefined();
    expect(l5).toBeDefined();
    const before = d.status().tables;

    const r = await d.reload({ reason: 'test' });
    expect(r).toMatchObject({ configChanged: false, programReplaced: false, added: 0, replaced: 0, deleted: 0, unchanged: 2 * N + 1, apiChanges: 1 });
    expect(d.ruleMap('policy').get('10.0.0.0/24'), 'the file was not read into new rules').toBe(p0);
    expect(d.ruleMap('localsid').get('2001:db8:15::/48')).toBe(l5);
    expect(d.ruleMap('policy').get('10.200.0.0/24')).toMatchObject({ name: 'api1' });
    expect(d.status().tables).toEqual(before);

    // ?check=true of the same file: an empty diff.
    const checked = await d.reload({ check: true, reason: 'test' });
    expect(checked).toMatchObject({ configChanged: false, checked: true, diff: [], added: 0, replaced: 0, deleted: 0 });
  });

  it('an edited file is read again: a new rule object where it changed (the running ones elsewhere), and its change applies', async () => {
    const d = run!.daemon;
    const p0 = d.ruleMap('policy').get('10.0.0.0/24');
    const p7was = d.ruleMap('policy').get('10.0.7.0/24');
    writeFileSync(join(run!.dir, 'mup.yaml'), configText('2001:db8:7::/48'));
    const r = await d.reload({ reason: 'test' });
    expect(r).toMatchObject({ configChanged: true, added: 0, replaced: 1, deleted: 0, apiChanges: 1 });
    // The first reload after the start compares with the file the start read: one rule crossed from the parser's thread.
    expect(d.lastReloadRules).toEqual({ kept: 2 * N - 1, crossed: 1 });
    // Unchanged in the file, at the same place: the running object (a reload of one edit no longer makes every rule anew).
    expect(d.ruleMap('policy').get('10.0.0.0/24')).toBe(p0);
    expect(d.ruleMap('policy').get('10.0.7.0/24')).not.toBe(p7was);
    expect(d.ruleMap('policy').get('10.0.7.0/24')).toMatchObject({ srPrefix: { len: 48 } });
    expect(d.dataplane.rules.policyCount).toBe(N + 1);
    // And the same edited file once more: kept.
    const p7 = d.ruleMap('policy').get('10.0.7.0/24');
    expect(await d.reload({ reason: 'test' })).toMatchObject({ configChanged: false, replaced: 0 });
    expect(d.ruleMap('policy').get('10.0.7.0/24')).toBe(p7);
  });

  it('only the rules whose text changed cross from the parser\'s thread, reload after reload; the file kept is the one read', async () => {
    const d = run!.daemon;
    const file = join(run!.dir, 'mup.yaml');
    const l3was = d.ruleMap('localsid').get('2001:db8:13::/48');
    const p8 = d.ruleMap('policy').get('10.0.8.0/24');
    writeFileSync(file, configText('2001:db8:7::/48', 1400));
    expect(await d.reload({ reason: 'test' })).toMatchObject({ configChanged: true, replaced: 1 });
    // One rule's text changed: one rule crossed; the others are the running objects, not copies compared there.
    expect(d.lastReloadRules).toEqual({ kept: 2 * N - 1, crossed: 1 });
    expect(d.ruleMap('localsid').get('2001:db8:13::/48')).not.toBe(l3was);
    expect(d.ruleMap('localsid').get('2001:db8:13::/48')).toMatchObject({ mtu: 1400 });
    expect(d.ruleMap('policy').get('10.0.8.0/24')).toBe(p8);
    // What `mup config show` builds on: this file (the API's policy api1 on top).
    expect(await runningYaml(d)).toContain('    src_prefix_len: 64\n    mtu: 1400\n');
    // The next reload compares with this file (its text and where its rules are came back with it).
    writeFileSync(file, configText('2001:db8:9::/48', 1400));
    expect(await d.reload({ reason: 'test' })).toMatchObject({ configChanged: true, replaced: 1 });
    expect(d.lastReloadRules).toEqual({ kept: 2 * N - 1, crossed: 1 });
    expect(d.ruleMap('policy').get('10.0.7.0/24')).toMatchObject({ srPrefix: { len: 48 } });
    expect(await runningYaml(d)).toContain('    sr_prefix: 2001:db8:9::/48\n');
  });
});
