/**
 * The program keeps a per-CPU copy of a policy or local SID entry until
 * the table's generation in the configuration changes (bpf/lookup.h), so
 * every change that writes an entry must change it. A change whose
 * configuration write failed, and whose write of a new generation after
 * the failure failed too, left the tables believing a new generation was
 * due already: every later change compared the configuration it wanted
 * with that belief, found them the same, and wrote no generation again
 * (found by the review of session 31: the generations stayed at 1, 1, 1, 1).
 * CPUs then kept translating with entries that had been replaced.
 */
import { existsSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';

const OBJECT = process.env['MUP_BPF_OBJECT'] ?? DEFAULT_OBJECT;
const isRoot = process.getuid?.() === 0;

const config = (hopLimit: number): ReturnType<typeof parseConfig> =>
  parseConfig(
    `settings: { forwarding: tx, max_policies: 8, max_localsids: 4 }
policies:
  - { match: 10.0.1.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ffff::/64", hop_limit: ${hopLimit} }
localsids:
  - { sid: "2001:db8:2::/48", src_prefix_len: 64, ttl: ${hopLimit} }
`,
    'gen.yaml',
  );

describe.skipIf(!isRoot || !existsSync(OBJECT))('the tables generation after failed configuration writes', () => {
  let dp: Dataplane | undefined;
  afterEach(() => {
    dp?.close();
    dp = undefined;
  });

  it('changes with every change that writes an entry, also after a change and its generation write both failed', () => {
    dp = openDataplane({ object: OBJECT, config: config(60) });
    const t = dp.rules;
    const gens = (): [number, number] => {
      const c = t.readConfig();
      return [c.policyGen, c.localsidGen];
    };
    const g0 = gens();
    // The change's configuration write fails, then the generation write after the failure.
    t.testFailConfigWrites = 2;
    expect(() => dp!.sync(config(61))).toThrow();
    expect(t.testFailConfigWrites).toBe(0);
    const seen = [gens()];
    for (const hop of [62, 63, 64]) {
      dp.sync(config(hop));
      seen.push(gens());
    }
    // Each successful change moved both generations on (before: they stayed where the failure left them).
    for (let i = 1; i < seen.length; i++) {
      expect(seen[i]![0], `policy generation after change ${i}: ${JSON.stringify([g0, ...seen])}`).not.toBe(seen[i - 1]![0]);
      expect(seen[i]![1], `local SID generation after change ${i}: ${JSON.stringify([g0, ...seen])}`).not.toBe(seen[i - 1]![1]);
    }
  });
});
