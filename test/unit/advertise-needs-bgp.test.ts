/**
 * A local SID with `advertise` needs the sidecar that advertises its ISD
 * routes: the file says so (`advertise needs a bgp section`), and the API
 * now says it too, for a single change and a batch. Taken through the API
 * before, the rule made every `config save` refused: the saved file did
 * not load (found in review, session 43).
 */
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors.js';
import { parseConfig } from '../../src/config/load.js';
import { BatchError, planBatch } from '../../src/daemon/batch.js';
import { emptyOverlay, RuleSet } from '../../src/daemon/rules.js';

const SID = { name: 'e1', sid: '2001:db8:a2::/56', src_prefix_len: 64, advertise: { prefixes: ['192.0.2.0/25'], lb: 40, ln: 8, fn: 8 } };
const BASE = 'settings: { max_policies: 8, max_localsids: 8 }\n';
const BGP = (nexthop: boolean): string =>
  'bgp:\n  asn: 65000\n  router_id: 10.255.0.2\n  api: 127.0.0.1:50072\n  neighbors: [{address: 127.0.0.1, port: 10179}]\n  rd: "65000:2"\n  rt: "65000:100"\n' +
  `  policy_defaults: {src_prefix: 2001:db8:ff:2::/64}\n${nexthop ? '  nexthop: 2001:db8:ff::2\n' : ''}`;

function batch(set: RuleSet, ops: unknown[]): unknown {
  try {
    return planBatch(set, ops);
  } catch (e) {
    if (e instanceof BatchError) return { status: e.status, path: e.path, message: e.message };
    throw e;
  }
}

describe('the API refuses advertise where the file would', () => {
  it('no bgp section: a single add is a ConfigError naming advertise; a batch add a 422 at its path', () => {
    const set = new RuleSet(parseConfig(BASE, 'c.yaml'), emptyOverlay());
    const e = (() => {
      try {
        set.check('localsid', SID, 'add');
        return undefined;
      } catch (x) {
        return x;
      }
    })();
    expect(e).toBeInstanceOf(ConfigError);
    expect((e as ConfigError).path).toBe('advertise');
    expect((e as Error).message).toMatch(/advertise needs a bgp section/);
    expect(batch(set, [{ op: 'add', localsid: SID }])).toMatchObject({ status: 422, path: 'operations[0].localsid.advertise', message: expect.stringMatching(/advertise needs a bgp section/) });
  });

  it('bgp without nexthop: refused, naming bgp.nexthop; with it: taken; without advertise: taken', () => {
    const noHop = new RuleSet(parseConfig(BASE + BGP(false), 'c.yaml'), emptyOverlay());
    expect(() => noHop.check('localsid', SID, 'add')).toThrow(/advertise needs bgp\.nexthop/);
    const ok = new RuleSet(parseConfig(BASE + BGP(true), 'c.yaml'), emptyOverlay());
    expect(ok.check('localsid', SID, 'add').advertise).toBeDefined();
    expect(batch(ok, [{ op: 'add', localsid: SID }])).toMatchObject({ counts: { added: 1 } });
    const { advertise: _, ...plain } = SID;
    expect(noHop.check('localsid', plain, 'add').advertise).toBeUndefined();
  });
});
