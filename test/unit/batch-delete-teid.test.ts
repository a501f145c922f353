/**
 * A batch delete names a rule by its key (match, with teid for an (N3,
 * TEID) policy) or by its name. teid with a name was ignored: {"name":
 * "c1", "teid": "0x1/8"} deleted the plain policy c1 with a 200. It is
 * refused now (422, naming teid); teid with match still names the key.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { BatchError, planBatch } from '../../src/daemon/batch.js';
import { emptyOverlay, RuleSet } from '../../src/daemon/rules.js';

const config = parseConfig(
  'settings: { max_policies: 64, max_localsids: 16 }\npolicies:\n' +
    '  - { name: c1, match: 192.0.2.1/32, sr_prefix: "2001:db8:9::/48", src_prefix: "2001:db8:ff::/64" }\n' +
    '  - { name: t1, match: 192.0.2.1/32, teid: 0x01000000/8, sr_prefix: "2001:db8:9::/48", src_prefix: "2001:db8:ff::/64" }\n',
  'teid.yaml',
);

function plan(ops: unknown[]): ReturnType<typeof planBatch> | { status: number; code: string; path: string; message: string } {
  try {
    return planBatch(new RuleSet(config, emptyOverlay()), ops);
  } catch (e) {
    if (e instanceof BatchError) return { status: e.status, code: e.code!, path: e.path, message: e.message };
    throw e;
  }
}

describe('a batch delete with teid', () => {
  it('by name with teid: refused, naming teid', () => {
    expect(plan([{ op: 'delete', policy: { name: 'c1', teid: '0x1/8' } }])).toMatchObject({ status: 422, code: 'invalid', path: 'operations[0].policy.teid' });
    expect(plan([{ op: 'delete', policy: { name: 't1', teid: '0x01000000/8' } }])).toMatchObject({ status: 422, code: 'invalid', path: 'operations[0].policy.teid' });
  });

  it('by match with teid: the (N3, TEID) policy; by match alone: the address-only one; by name: that rule', () => {
    const byKey = plan([{ op: 'delete', policy: { match: '192.0.2.1/32', teid: '0x01000000/8' } }]);
    expect(byKey).toMatchObject({ counts: { deleted: 1 }, results: [{ key: '192.0.2.1/32 teid 0x01000000/8' }] });
    expect(plan([{ op: 'delete', policy: { match: '192.0.2.1/32' } }])).toMatchObject({ counts: { deleted: 1 }, results: [{ key: '192.0.2.1/32' }] });
    expect(plan([{ op: 'delete', policy: { name: 't1' } }])).toMatchObject({ counts: { deleted: 1 }, results: [{ key: '192.0.2.1/32 teid 0x01000000/8' }] });
  });
});
