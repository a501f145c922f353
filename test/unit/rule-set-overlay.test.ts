/**
 * A rule set made from a checked config and API changes (the overlay)
 * applies the changes to the maps the config's checks built, in place,
 * instead of rebuilding every rule and checking the whole set again: with
 * 10,000 API changes that rebuild held a reload's event loop 300-380 ms
 * (issue 19, session 15). The result must be the rebuild's to the letter:
 * the same rules in the same order, the same names, sources and bases, and
 * the same refusal (two rules with one name, too many prefix lengths),
 * whatever the overlay. The rebuild is what a set made without the checks'
 * maps still does: the two are compared here over random overlays.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig, peekRuleIndex, takeRuleIndex } from '../../src/config/load.js';
import type { Config, Policy } from '../../src/config/types.js';
import { emptyOverlay, rebaseOverlay, rebaseOverlayAsync, REBASE_SLICE, RULE_KIND_LIST, RULE_KINDS, RuleSet, type Overlay, type RuleKind } from '../../src/daemon/rules.js';

const N = 24;
const pol = (i: number, name: string | undefined, len = 24, hop = 64): string =>
  `  - { ${name === undefined ? '' : `name: ${name}, `}match: 10.${i}.0.0/${len}, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64", hop_limit: ${hop} }\n`;
const sid = (i: number, name: string | undefined): string => `  - { ${name === undefined ? '' : `name: ${name}, `}behavior: end.m.gtp6.e, sid: "2001:db8:${i.toString(16)}::/48", source: "2001:db8:ffff::6e" }\n`;
const TEXT =
  'settings: { max_policies: 256, max_localsids: 64 }\npolicies:\n' +
  Array.from({ length: N }, (_, i) => pol(i, i % 3 === 2 ? undefined : `p${i}`)).join('') +
  'localsids:\n' +
  Array.from({ length: 8 }, (_, i) => sid(i + 1, i % 2 === 0 ? `s${i}` : undefined)).join('');

/** A rule as the API would make it (parsed the way the file's are). */
const policy = (i: number, name: string | undefined, len = 24, hop = 64): Policy =>
  parseConfig(`settings: { max_policies: 256, max_localsids: 64 }\npolicies:\n${pol(i, name, len, hop)}`).policies[0]!;
const localsid = (i: number, name: string | undefined): Config['localsids'][number] =>
  parseConfig(`settings: { max_policies: 256, max_localsids: 64 }\nlocalsids:\n${sid(i, name)}`).localsids[0]!;

/** A random overlay: puts (replacing, renaming, new keys, names taken from others, other lengths) and deletes. */
function randomOverlay(rnd: () => number): Overlay {
  const o = emptyOverlay();
  const pick = (n: number): number => Math.floor(rnd() * n);
  const name = (): string | undefined => (rnd() < 0.25 ? undefined : rnd() < 0.8 ? `p${pick(N + 8)}` : `n${pick(6)}`);
  for (let j = pick(8); j > 0; j--) {
    const i = pick(N + 8);
    const r = rnd();
    // Mostly /24; sometimes another length (a seventh or ninth distinct one refuses the set).
    const len = r < 0.85 ? 24 : 16 + pick(9);
    const key = RULE_KINDS.policy.key(policy(i, undefined, len));
    if (rnd() < 0.3) o.delPolicies.add(key);
    else o.policies.set(key, policy(i, name(), len, 1 + pick(200)));
  }
  for (let j = pick(3); j > 0; j--) {
    const i = 1 + pick(10);
    const key = RULE_KINDS.localsid.key(localsid(i, undefined));
    if (rnd() < 0.4) o.delLocalSids.add(key);
    else o.localsids.set(key, localsid(i, rnd() < 0.5 ? `s${pick(8)}` : undefined));
  }
  return o;
}

/** Everything a rule set answers from, as data. */
function view(set: RuleSet): unknown {
  const out: Record<string, unknown> = {};
  for (const k of RULE_KIND_LIST) {
    const rules = [...set.rules(k.kind)].map(([key, r]) => [key, JSON.stringify(k.json(r))]);
    const names = [...set.rules(k.kind).values()].flatMap((r) => (r.name === undefined ? [] : [[r.name, set.find(k.kind, { name: r.name })]]));
    const keys = new Set([...set.rules(k.kind).keys(), ...set.overlay[k.overlay.put].keys(), ...set.overlay[k.overlay.del]]);
    const sources = [...keys].map((key) => [key, set.rules(k.kind).has(key) ? set.source(k.kind, key) : '-', set.base(k.kind, key)]);
    out[k.kind] = { rules, names, sources };
  }
  return { ...out, footprint: set.footprint() };
}

/** A copy of an overlay (a rule set owns its overlay: it drops the entries that are the file's rules). */
function copy(o: Overlay): Overlay {
  const c = emptyOverlay();
  for (const k of RULE_KIND_LIST) {
    for (const [key, r] of o[k.overlay.put]) (c[k.overlay.put] as Map<string, unknown>).set(key, r);
    for (const key of o[k.overlay.del]) c[k.overlay.del].add(key);
  }
  return c;
}

/** The set made both ways: [incremental, rebuilt], or the error each threw. */
function both(overlay: Overlay): [unknown, unknown] {
  const make = (drop: boolean): unknown => {
    const config = parseConfig(TEXT, 'file.yaml');
    if (drop) for (const k of RULE_KIND_LIST) takeRuleIndex(config[k.section] ?? []);
    try {
      return view(new RuleSet(config, copy(overlay)));
    } catch (e) {
      return `threw: ${(e as Error).message}`;
    }
  };
  return [make(false), make(true)];
}

function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

describe('a rule set with API changes on a checked config', () => {
  it("takes the file's maps and changes them in place (no rebuild of every rule)", () => {
    const config = parseConfig(TEXT, 'file.yaml');
    const byKey = peekRuleIndex(config.policies)!.byKey;
    const o = emptyOverlay();
    o.policies.set('10.40.0.0/24', policy(40, 'new'));
    o.delPolicies.add('10.1.0.0/24');
    const set = new RuleSet(config, o);
    expect(set.rules('policy')).toBe(byKey);
    expect(set.find('policy', { name: 'new' })).toBe('10.40.0.0/24');
    expect(set.find('policy', { name: 'p1' })).toBeUndefined();
    expect(set.source('policy', '10.40.0.0/24')).toBe('api');
  });

  it.each([
    ['a file rule replaced and renamed', (o: Overlay) => o.policies.set('10.1.0.0/24', policy(1, 'renamed', 24, 9))],
    ['a new rule taking the name of a deleted one', (o: Overlay) => (o.delPolicies.add('10.1.0.0/24'), o.policies.set('10.50.0.0/24', policy(50, 'p1')))],
    ['two rules swapping names', (o: Overlay) => (o.policies.set('10.0.0.0/24', policy(0, 'p1')), o.policies.set('10.1.0.0/24', policy(1, 'p0')))],
    ['a new rule taking the name of an untouched one', (o: Overlay) => o.policies.set('10.50.0.0/24', policy(50, 'p4'))],
    ['two new rules with one name', (o: Overlay) => (o.policies.set('10.50.0.0/24', policy(50, 'x')), o.policies.set('10.51.0.0/24', policy(51, 'x')))],
    ['a key both put and deleted', (o: Overlay) => (o.delPolicies.add('10.1.0.0/24'), o.policies.set('10.1.0.0/24', policy(1, 'p1', 24, 7)))],
    ['a ninth prefix length', (o: Overlay) => [16, 17, 18, 19, 20, 21, 22, 23].forEach((l, j) => o.policies.set(`10.${60 + j}.0.0/${l}`, policy(60 + j, undefined, l)))],
    ['a local SID renamed to a taken name', (o: Overlay) => o.localsids.set('2001:db8:2::/48', localsid(2, 's2'))],
    ['an API rule the same as the file\'s (a delete and an add back)', (o: Overlay) => (o.policies.set('10.1.0.0/24', policy(1, 'p1')), o.policies.set('10.2.0.0/24', policy(2, undefined, 24, 9)))],
  ] as [string, (o: Overlay) => unknown][])('%s: as a rebuild has it', (_what, change) => {
    const o = emptyOverlay();
    change(o);
    const [inPlace, rebuilt] = both(o);
    expect(inPlace).toEqual(rebuilt);
  });

  it("takes an API rule the same as the file's as the file's: no overlay entry, the file's object, source config", () => {
    const config = parseConfig(TEXT, 'file.yaml');
    const fileRule = config.policies[1]!;
    const o = emptyOverlay();
    o.policies.set('10.1.0.0/24', policy(1, 'p1'));
    const set = new RuleSet(config, o);
    expect(set.overlay.policies.size).toBe(0);
    expect(set.rules('policy').get('10.1.0.0/24')).toBe(fileRule);
    // Through the API: deleted, then added back the same; then replaced, then replaced back.
    set.delete('policy', '10.1.0.0/24');
    expect(set.overlay.delPolicies.has('10.1.0.0/24')).toBe(true);
    set.put('policy', policy(1, 'p1'));
    expect(set.overlay.policies.size + set.overlay.delPolicies.size).toBe(0);
    expect(set.rules('policy').get('10.1.0.0/24')).toBe(fileRule);
    expect(set.source('policy', '10.1.0.0/24')).toBe('config');
    set.put('policy', policy(1, 'p1', 24, 7));
    expect(set.source('policy', '10.1.0.0/24')).toBe('api');
    set.put('policy', policy(1, 'p1'));
    expect(set.overlay.policies.size).toBe(0);
    expect(set.find('policy', { name: 'p1' })).toBe('10.1.0.0/24');
    // A new key is an API rule whatever it says.
    set.put('policy', policy(77, 'n77'));
    expect(set.overlay.policies.size).toBe(1);
  });

  it('drops a delete of a key the file has not (an older state file\'s): nothing to delete, nothing to keep or write again', () => {
    for (const checked of [true, false]) {
      const config = parseConfig(TEXT, 'file.yaml');
      if (!checked) takeRuleIndex(config.policies); // the rebuild's path: no maps of the checks
      const o = emptyOverlay();
      o.delPolicies.add('10.200.0.0/24'); // no file rule there
      o.delPolicies.add('10.1.0.0/24'); // the file's p1
      const set = new RuleSet(config, o);
      expect([...set.overlay.delPolicies], checked ? 'in place' : 'rebuilt').toEqual(['10.1.0.0/24']);
      expect(set.rules('policy').has('10.1.0.0/24')).toBe(false);
    }
  });

  it('the same as a rebuild over 400 random overlays (rules, order, names, sources, bases, refusals)', () => {
    const rnd = lcg(19);
    let refused = 0;
    for (let i = 0; i < 400; i++) {
      const o = randomOverlay(rnd);
      const [inPlace, rebuilt] = both(o);
      expect(inPlace, `overlay ${i}`).toEqual(rebuilt);
      if (typeof rebuilt === 'string') refused++;
    }
    // Both ways were exercised: sets made and sets refused.
    expect(refused).toBeGreaterThan(20);
    expect(refused).toBeLessThan(380);
  });
});

describe('rebaseOverlayAsync', () => {
  it('gives what rebaseOverlay gives, letting the event loop run between slices', async () => {
    const base = parseConfig(TEXT, 'file.yaml');
    const next = parseConfig(TEXT.replace('hop_limit: 64 }\n', 'hop_limit: 65 }\n'), 'file.yaml');
    const o = emptyOverlay();
    // Enough entries for several slices: puts the file agrees with (absorbed), puts on new keys (kept), deletes.
    for (let i = 0; i < 3 * REBASE_SLICE; i++) o.policies.set(`10.${100 + (i >> 8)}.${i & 255}.0/24`, policy(100, undefined));
    for (const p of next.policies.slice(3, 9)) o.policies.set(RULE_KINDS.policy.key(p), p);
    o.delPolicies.add('10.10.0.0/24');
    const digest = (kind: RuleKind, key: string): string | null => {
      const r = (base[RULE_KINDS[kind].section] ?? []).find((x) => RULE_KINDS[kind].key(x) === key);
      return r === undefined ? null : 'x';
    };
    let turns = 0;
    const tick = setInterval(() => turns++, 0);
    const got = await rebaseOverlayAsync(o, digest, next);
    clearInterval(tick);
    const want = rebaseOverlay(o, digest, next);
    expect(got.absorbed).toEqual(want.absorbed);
    expect(got.conflicts).toEqual(want.conflicts);
    expect([...got.overlay.policies.keys()]).toEqual([...want.overlay.policies.keys()]);
    expect([...got.overlay.delPolicies]).toEqual([...want.overlay.delPolicies]);
    expect(want.absorbed).toHaveLength(6);
    expect(turns, 'timers ran during the rebase').toBeGreaterThan(0);
  });
});
