/**
 * What a restart brings back is what was running (src/daemon/rules.ts): a
 * rule set changed through the API (put and delete, as Daemon.putRule and
 * deleteRule record them: the state line made after the set changed, with
 * the file's `base`), its records replayed from the state file into a new
 * rule set on the same config, must hold the same rules, with the same
 * sources, and the same overlay (what status counts as API changes and
 * every compaction writes). Also after a compaction of the records. Over
 * random sequences: new keys, the file's keys replaced, put back as the file
 * has them, deleted, added again. A delete of an API-only rule came back as
 * a delete entry after a restart (session 41): this fails on that code.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { API_WHERE } from '../../src/config/keys.js';
import { parseConfig, placed } from '../../src/config/load.js';
import { emptyOverlay, RULE_KIND_LIST, RULE_KINDS, RuleSet, StateStore, type Overlay, type RuleKind, type StateChange } from '../../src/daemon/rules.js';

const SHA = 'cd'.repeat(32);
const FILE_POLICIES = 8;
const FILE_SIDS = 4;
const TEXT =
  'settings: { max_policies: 64, max_localsids: 64 }\npolicies:\n' +
  Array.from({ length: FILE_POLICIES }, (_, i) => `  - { name: p${i}, match: 10.0.${i}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n`).join('') +
  'localsids:\n' +
  Array.from({ length: FILE_SIDS }, (_, i) => `  - { name: s${i}, sid: "2001:db8:${(i + 1).toString(16)}::/48", src_prefix_len: 64 }\n`).join('');

/** Deterministic random numbers in [0, 1). */
function lcg(seed: number): () => number {
  let x = seed >>> 0;
  return () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

/** The API's rule at index i of a kind (keys past the file's are API-only); `v` 0 is the file's own. */
function apiRule(kind: 'policy' | 'localsid', i: number, v: number): Record<string, unknown> {
  if (kind === 'policy') {
    return { name: `p${i}`, match: `10.0.${i}.0/24`, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64', ...(v === 0 ? {} : { hop_limit: 64 - v }) };
  }
  return { name: `s${i}`, sid: `2001:db8:${(i + 1).toString(16)}::/48`, src_prefix_len: v === 0 ? 64 : 64 - 8 * v };
}

/** A set's rules (key, JSON, source) and its overlay, as comparable data. */
function view(set: RuleSet): unknown {
  const out: Record<string, unknown> = {};
  for (const k of RULE_KIND_LIST) {
    out[k.kind] = [...set.rules(k.kind)].map(([key, r]) => [key, k.json(r), set.source(k.kind, key)]).sort();
    out[`overlay.${k.overlay.put}`] = [...set.overlay[k.overlay.put].keys()].sort();
    out[`overlay.${k.overlay.del}`] = [...set.overlay[k.overlay.del]].sort();
  }
  return out;
}

describe('a restart brings back what was running: API changes replayed from the state file', () => {
  let dir = '';
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'mup-replay-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('the same rules, sources and overlay after a replay and after a compaction, over 200 random sequences', () => {
    const rnd = lcg(41);
    for (let run = 0; run < 200; run++) {
      const path = join(dir, `state-${run}.json`);
      const set = new RuleSet(parseConfig(TEXT, 'file.yaml'), emptyOverlay());
      const s = new StateStore(path);
      s.rewrite('t', 'file.yaml', SHA, emptyOverlay());
      const ops: string[] = [];
      for (let n = 0; n < 30; n++) {
        const kind: 'policy' | 'localsid' = rnd() < 0.6 ? 'policy' : 'localsid';
        const k = RULE_KINDS[kind];
        const i = Math.floor(rnd() * (kind === 'policy' ? FILE_POLICIES + 6 : FILE_SIDS + 4));
        const key = k.key(k.parse(apiRule(kind, i, 0), 't'));
        let line: StateChange;
        if (set.rules(kind).has(key) && rnd() < 0.4) {
          set.delete(kind, key);
          line = { del: kind, key, base: set.base(kind, key) };
          ops.push(`del ${kind} ${i}`);
        } else {
          const v = Math.floor(rnd() * 3);
          const tagged = placed(k.parse(apiRule(kind, i, v), 't'), API_WHERE);
          set.put(kind, tagged);
          line = { put: kind, rule: k.json(tagged), base: set.base(kind, key) };
          ops.push(`put ${kind} ${i} v${v}`);
        }
        s.append(line);
      }
      s.close();
      const running = view(set);
      const replayed = new StateStore(path).read()!;
      expect(view(new RuleSet(parseConfig(TEXT, 'file.yaml'), replayed.overlay)), `replayed, run ${run}: ${ops.join(', ')}`).toEqual(running);
      // Compacted: the file rewritten with the net changes (as compactSoon and a start's rewrite write them).
      const c = new StateStore(path);
      c.rewrite('t', 'file.yaml', SHA, set.overlay as Overlay, (kind: RuleKind, key: string) => set.base(kind, key));
      c.close();
      const compacted = new StateStore(path).read()!;
      expect(view(new RuleSet(parseConfig(TEXT, 'file.yaml'), compacted.overlay)), `compacted, run ${run}: ${ops.join(', ')}`).toEqual(running);
    }
  });
});
