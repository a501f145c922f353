/**
 * A reload at a full table. A reload writes the edit's new and changed
 * entries before its deletes (a packet sees each entry before or after its
 * change); at a full table an edit that replaces a rule by one with a new
 * key found no free id for it and was refused, though its result fits,
 * with 500 `internal` (a raw table error) and advice to send the deletes
 * through the API. Since session 36 such an edit is written deletes first
 * (its own deletes make the room: Tables.applyRoomFirst, `deletesFirst` in
 * the answer), and an edit that does not fit is 409 `conflict`, as
 * docs/api.md says, the tables as they were.
 *
 * The real Daemon in this process (startInProcDaemon: build/mup.bpf.o, its
 * pins on a bpffs the helper mounts in a temporary directory and removes).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { health } from '../src/daemon/health.js';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';

const isRoot = process.getuid?.() === 0;

/** Policies on 10.1.<i>.0/24, one per i, in a table of 4. */
function configText(ids: readonly number[]): string {
  const lines = ['settings: { max_policies: 4, max_localsids: 2 }', 'policies:'];
  for (const i of ids) lines.push(`  - { name: p${i}, match: 10.1.${i}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`);
  lines.push('localsids: []');
  return `${lines.join('\n')}\n`;
}
const at = (i: number): number => ((10 << 24) | (1 << 16) | (i << 8)) >>> 0;

describe.skipIf(!isRoot)('a reload at a full table', () => {
  let run: InProcDaemon | undefined;
  beforeAll(async () => {
    run = await startInProcDaemon('reloadfull', configText([0, 1, 2, 3]));
  }, 60_000);
  afterAll(() => run?.stop());

  const write = (ids: readonly number[]): void => writeFileSync(join(run!.dir, 'mup.yaml'), configText(ids));
  const inTables = (): number[] => [0, 1, 2, 3, 4, 5, 6].filter((i) => run!.daemon.dataplane.rules.policyRule({ addr: at(i), len: 24 }) !== undefined);

  it('an edit that replaces a rule by one with a new key: written deletes first (deletesFirst), not refused', async () => {
    const d = run!.daemon;
    expect(inTables()).toEqual([0, 1, 2, 3]);
    write([0, 1, 2, 5]);
    const r = await d.reload({ reason: 'test' });
    expect(r).toMatchObject({ configChanged: true, added: 1, deleted: 1, deletesFirst: true });
    expect(inTables()).toEqual([0, 1, 2, 5]);
    expect(d.status().tables.policies.entries).toBe(4);
    expect(health(d).status).toBe('ok');
    // An edit with room needs no such order.
    write([0, 1, 2]);
    expect(await d.reload({ reason: 'test', force: true })).not.toHaveProperty('deletesFirst');
    write([0, 1, 2, 5]);
    expect(await d.reload({ reason: 'test' })).not.toHaveProperty('deletesFirst');
  });

  it('an edit whose entries do not fit (an N3 address with a TEID policy needs its address-only entry too): 409, the tables as they were', async () => {
    const d = run!.daemon;
    // Four rules (the file's limit allows it), five entries: p0-p2, the TEID policy, the address-only /32 of 100.64.0.1.
    writeFileSync(
      join(run!.dir, 'mup.yaml'),
      configText([0, 1, 2]).replace('localsids: []', '  - { name: t1, match: 100.64.0.1/32, teid: "7/32", sid: "fc00::1", src_prefix: "2001:db8:ff::/64" }\nlocalsids: []'),
    );
    const r = d.reload({ reason: 'test', force: true });
    await expect(r).rejects.toMatchObject({ status: 409 });
    await expect(r).rejects.toThrow(/the policies table is full \(settings\.max_policies = 4\)/);
    expect(inTables()).toEqual([0, 1, 2, 5]);
    expect(d.ruleMap('policy').has('10.1.5.0/24')).toBe(true);
    expect(d.dataplane.rules.addrOnlyCount).toBe(0);
    expect(d.tablesOutOfStep).toBe(false);
    expect(health(d).status).toBe('ok');
  });

  it("a table write that fails for another reason (a RangeError of V8's, an allocation) is not called the request's: not 409", async () => {
    const d = run!.daemon;
    write([0, 1, 2, 5]);
    await d.reload({ reason: 'test', force: true });
    const t = d.dataplane.rules;
    const apply = t.apply;
    let failed = 0;
    // Once, then the real write (the change's put-back goes through it).
    t.apply = function (this: typeof t, ...a: Parameters<typeof apply>) {
      if (failed++ === 0) throw new RangeError('Array buffer allocation failed');
      return apply.apply(this, a);
    };
    try {
      const r = d.putRule('policy', { name: 'p6', match: '10.1.6.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' }, 'add');
      await expect(r).rejects.toThrow(/Array buffer allocation failed/);
      // Before: a RuleError with 409 ("conflict": the client told its change does not fit).
      await expect(r).rejects.not.toHaveProperty('status', 409);
    } finally {
      t.apply = apply;
    }
    // A refusal of the tables' own is still 409 (the table of 4 is full).
    await expect(d.putRule('policy', { name: 'p6', match: '10.1.6.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' }, 'add')).rejects.toMatchObject({
      status: 409,
    });
    expect(inTables()).toEqual([0, 1, 2, 5]);
  });

  it('an edit that fits the file\'s limit but not with the API\'s rules on top: 409 (the tables\' refusal), not 500', async () => {
    const d = run!.daemon;
    write([0, 1, 2]);
    await d.reload({ reason: 'test', force: true });
    await d.putRule('policy', { name: 'p6', match: '10.1.6.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' }, 'add');
    expect(inTables()).toEqual([0, 1, 2, 6]);
    // Four policies in the file (its limit), five with the API's.
    write([0, 1, 2, 3]);
    const r = d.reload({ reason: 'test' });
    await expect(r).rejects.toMatchObject({ status: 409 });
    await expect(r).rejects.toThrow(/5 policies .* do not fit settings\.max_policies = 4/);
    expect(inTables()).toEqual([0, 1, 2, 6]);
    expect(health(d).status).toBe('ok');
  });
});
