/**
 * The rule set's index of a list kept as rows (src/config/row-map.ts) is a
 * Map<string, rule> to its users: held here to a Map through random
 * changes (gets and has of canonical and other texts, sets of a row's key
 * to its own or another rule, deletes, keys set again after a delete, new
 * keys), comparing every answer and the iteration order after each step.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { policyKey, sessionKey } from '../../src/config/keys.js';
import { ruleKeyMap, takeRuleIndex } from '../../src/config/load.js';
import { RowKeyedMap } from '../../src/config/row-map.js';
import { policyTextBytes, POLICY_KEY_BYTES, sessionTextBytes } from '../../src/config/rows.js';
import type { Policy, Session } from '../../src/config/types.js';

/** A small deterministic generator (tests repeat). */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function config(): { sessions: readonly Session[]; policies: readonly Policy[] } {
  const sessions: Record<string, unknown>[] = [];
  for (let i = 0; i < 40; i++) {
    const ue = i % 5 === 4 ? `2001:db8:60:${i.toString(16)}::/64` : `10.${i}.0.${i & 1 ? 128 : 0}/25`;
    sessions.push({ ue, teid: i, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64', ...(i % 7 === 0 ? { name: `s${i}` } : {}) });
  }
  const policies: Record<string, unknown>[] = [];
  for (let i = 0; i < 40; i++) {
    policies.push(i % 3 === 0 ? { match: `10.${i}.0.0/16`, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' } : { match: `100.64.0.${i}/32`, teid: `0x${(i << 24 >>> 0).toString(16)}/8`, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' });
  }
  const c = parseConfig(JSON.stringify({ settings: { max_sessions: 64, max_policies: 64 }, policies, localsids: [], sessions }), 'row-map.json');
  return { sessions: c.sessions!, policies: c.policies };
}

/** valuesInto writes the values in order from its index and says where they end; the list's entries before are left. */
function valuesIntoIs(m: Map<string, unknown>, values: unknown[]): void {
  const out: unknown[] = ['before'];
  expect((m as RowKeyedMap<unknown>).valuesInto(out, 1)).toBe(values.length + 1);
  expect(out).toEqual(['before', ...values]);
}

describe('RowKeyedMap', () => {
  for (const kind of ['sessions', 'policies'] as const) {
    it(`is a Map to its users: ${kind}, 3,000 random steps`, () => {
      const c = config();
      const rules = c[kind] as readonly (Session | Policy)[];
      const key = (r: Session | Policy): string => (kind === 'sessions' ? sessionKey(r as Session) : policyKey(r as Policy));
      const index = takeRuleIndex(rules);
      expect(index?.byKey).toBeInstanceOf(RowKeyedMap);
      const m = index!.byKey;
      const ref = new Map(rules.map((r) => [key(r), r]));
      const texts = [...ref.keys()];
      // Texts no row has: new keys, and spellings of a row's key that are not its key text.
      const others = kind === 'sessions' ? ['10.99.0.0/25', '2001:db8:99::/64', '10.1.0.128/25 ', '010.1.0.128/25', '10.1.0.129/25', '2001:DB8:60:4::/64'] : ['10.99.0.0/16', '100.64.0.1/32 teid 0x01000000/8', '100.64.0.1/32 teid 0x1000000/8', '100.64.0.01/32 teid 0x01000000/8', '100.64.0.1/32 teid 0X01000000/8', '10.3.0.0/016'];
      const pool = [...texts, ...others];
      const random = rng(kind === 'sessions' ? 7 : 11);
      const pick = <T>(a: readonly T[]): T => a[Math.floor(random() * a.length)]!;
      const other = { ...rules[0]! } as Session | Policy;
      // Before any change: every row's own rule (valuesInto's path without replaced rows).
      valuesIntoIs(m, [...ref.values()]);
      for (let step = 0; step < 3000; step++) {
        const k = pick(pool);
        const what = random();
        if (what < 0.3) {
          expect(m.delete(k), `${step} delete ${k}`).toBe(ref.delete(k));
        } else if (what < 0.5) {
          // undefined too: a Map holds the key with no value (found in review: the row's rule came back).
          const pickV = random();
          const v = (pickV < 0.1 ? undefined : pickV < 0.55 ? other : (rules.find((r) => key(r) === k) ?? other)) as Session | Policy;
          m.set(k, v);
          ref.set(k, v);
        } else {
          expect(m.get(k), `${step} get ${k}`).toBe(ref.get(k));
          expect(m.has(k), `${step} has ${k}`).toBe(ref.has(k));
        }
        expect(m.size).toBe(ref.size);
        if (step % 50 === 0 || step === 2999) {
          expect([...m.keys()]).toEqual([...ref.keys()]);
          expect([...m.values()]).toEqual([...ref.values()]);
          valuesIntoIs(m, [...ref.values()]);
          expect([...m]).toEqual([...ref]);
          const seen: string[] = [];
          m.forEach((v, kk) => {
            expect(v).toBe(ref.get(kk));
            seen.push(kk);
          });
          expect(seen).toEqual([...ref.keys()]);
        }
      }
      m.clear();
      expect(m.size).toBe(0);
      expect([...m]).toEqual([]);
      expect(m.get(texts[0]!)).toBeUndefined();
    });
  }

  for (const kind of ['sessions', 'policies'] as const) {
    for (const start of [0, 50]) {
      it(`grows past its list as a Map does: ${kind} from ${start} rows, 40,000 random steps of mostly new keys with their own rules`, () => {
        // 3,000 rules: the list is the first `start`; the others come through set() (the API's rules), found
        // by their key bytes (added rows) unless set with a rule not their own or in another spelling.
        const sessions: Record<string, unknown>[] = [];
        const policies: Record<string, unknown>[] = [];
        for (let i = 0; i < 3000; i++) {
          const ue = i % 50 === 49 ? `2001:db8:60:${i.toString(16)}::/64` : `10.${i >> 8}.${i & 255}.0/24`;
          sessions.push({ ue, teid: i, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' });
          policies.push({ match: `100.64.${i >> 8}.${i & 255}/32`, teid: `0x${(i * 4096).toString(16).padStart(8, '0')}/20`, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' });
        }
        const c = parseConfig(JSON.stringify({ settings: { max_sessions: 4096, max_policies: 4096 }, policies, localsids: [], sessions }), 'grow.json');
        const all = c[kind] as readonly (Session | Policy)[];
        const key = (r: Session | Policy): string => (kind === 'sessions' ? sessionKey(r as Session) : policyKey(r as Policy));
        const m = ruleKeyMap<Session | Policy>(kind, all.slice(0, start));
        const ref = new Map(all.slice(0, start).map((r) => [key(r), r]));
        const random = rng(start + (kind === 'sessions' ? 1 : 2));
        const odd = kind === 'sessions' ? ['10.0.1.00/24', '2001:DB8:60:31::/64', ' 10.0.2.0/24'] : ['100.64.0.01/32 teid 0x00001000/20', '100.64.0.1/32 teid 0x1000/20'];
        let iterated = 0;
        for (let step = 0; step < 40_000; step++) {
          // The keys of a window that moves up the list: sets, deletes and sets again of the same keys, so that most of
          // the added rows go (their compaction) while new ones come.
          const at = Math.min(all.length - 1, Math.floor(step / 14) + Math.floor(random() * 200));
          const r = all[at]!;
          const k = random() < 0.02 ? odd[Math.floor(random() * odd.length)]! : key(r);
          const what = random();
          if (what < 0.35) {
            expect(m.delete(k), `${step} delete ${k}`).toBe(ref.delete(k));
          } else if (what < 0.75) {
            // Mostly its own rule; sometimes another's (kept by its text), or a copy of its own.
            const p = random();
            const v = p < 0.9 ? r : p < 0.95 ? all[(at + 1) % all.length]! : ({ ...r } as Session | Policy);
            // A rule at its own key: set by its bytes (setOwn) half the time, as the rule set sets it.
            if (v === r && k === key(r) && random() < 0.5) m.setOwn(r);
            else m.set(k, v);
            ref.set(k, v);
          } else {
            expect(m.get(k), `${step} get ${k}`).toBe(ref.get(k));
            expect(m.has(k), `${step} has ${k}`).toBe(ref.has(k));
            if (k === key(r)) expect(m.getOwn(r), `${step} getOwn ${k}`).toBe(ref.get(k));
          }
          expect(m.size, `${step} size`).toBe(ref.size);
          if (step % 997 === 0 || step === 39_999) {
            expect([...m.keys()], `${step} keys`).toEqual([...ref.keys()]);
            expect([...m.values()]).toEqual([...ref.values()]);
            valuesIntoIs(m, [...ref.values()]);
            for (const [kk, v] of ref) expect(m.get(kk)).toBe(v);
          }
          if (step % 4999 === 0) {
            // Deletes while the map is walked (no compaction under the walk): the keys not yet met are still met.
            const seen: string[] = [];
            const want = [...ref.keys()];
            let n = 0;
            for (const [kk] of m) {
              seen.push(kk);
              if (n++ % 3 === 0 && n < want.length) {
                const later = want[n + 1];
                if (later !== undefined && m.delete(later)) ref.delete(later);
              }
            }
            expect(seen).toEqual(want.filter((x) => ref.has(x) || seen.includes(x)));
            iterated++;
          }
        }
        expect(iterated).toBeGreaterThan(5);
        m.clear();
        expect(m.size).toBe(0);
        expect([...m]).toEqual([]);
        m.set(key(all[7]!), all[7]!);
        expect([...m.keys()]).toEqual([key(all[7]!)]);
      });
    }
  }

  it('keeps no more than about twice its live keys after churn, and its slots likewise (the added rows renumbered at a rebuild)', () => {
    const c = config();
    const all = c.sessions as readonly Session[];
    const m = ruleKeyMap<Session>('sessions', all.slice(0, 20));
    const made = parseConfig(JSON.stringify({ settings: { max_sessions: 4096 }, sessions: Array.from({ length: 3000 }, (_, i) => ({ ue: `10.${i >> 8}.${i & 255}.0/24`, teid: i, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' })) }), 'churn.json').sessions!;
    // 200 keys live at a time, 60,000 adds and deletes.
    for (let i = 0; i < 60_000; i++) {
      m.setOwn(made[i % 3000]!);
      if (i >= 200) expect(m.delete(sessionKey(made[(i - 200) % 3000]!))).toBe(true);
    }
    expect(m.size).toBe(220);
    const f = m.footprint();
    expect(f.added).toBeLessThan(2 * 400);
    expect(f.slots).toBeLessThan(8 * 220);
    expect([...m.keys()]).toEqual([...all.slice(0, 20).map(sessionKey), ...made.slice(0, 60_000 % 3000 === 0 ? 3000 : 60_000 % 3000).slice(-200).map(sessionKey)].slice(0, 220));
  });

  it('takes any key a Map takes (not a text), and a walk after clear() goes on with the keys set since', () => {
    const m = ruleKeyMap<unknown>('policies', []);
    const k = 1 as unknown as string;
    m.set(k, 'one');
    m.set('10.0.0.0/8', 'p');
    expect(m.get(k)).toBe('one');
    expect(m.has(k)).toBe(true);
    expect(m.size).toBe(2);
    expect(m.delete(k)).toBe(true);
    expect(m.has(k)).toBe(false);
    expect(m.size).toBe(1);
    const ref = new Map<string, unknown>([['10.0.0.0/8', 'p'], ['10.1.0.0/16', 'q']]);
    m.set('10.1.0.0/16', 'q');
    const walk = m.keys();
    const refWalk = ref.keys();
    expect(walk.next().value).toBe(refWalk.next().value);
    m.clear();
    ref.clear();
    for (const t of ['10.2.0.0/16', '10.3.0.0/16', '10.4.0.0/16']) {
      m.set(t, t);
      ref.set(t, t);
    }
    expect([...walk]).toEqual([...refWalk]);
  });

  it('takes only the canonical key text of a row (policyKey, sessionKey): other spellings are other keys, as in a Map', () => {
    const b = new Uint8Array(POLICY_KEY_BYTES);
    expect(policyTextBytes('100.64.0.1/32 teid 0x01000000/8', b)).toBe(true);
    for (const t of ['100.64.0.1/32 teid 0x1000000/8', '100.64.0.1/32 teid 0x01000000/08', '100.64.0.1/32 teid 0x01000001/8', '100.64.0.0/24 teid 0x01000000/8', '100.64.0.1/33', '256.0.0.0/8', '10.0.0.1/24', '1.2.3/24', ' 1.2.3.4/32', '1.2.3.4/32 ', '100.64.0.1/32 teid 0x01000000/0']) {
      expect(policyTextBytes(t, b), t).toBe(false);
    }
    const s = new Uint8Array(18);
    expect(sessionTextBytes('0.0.0.0/0', s, () => undefined)).toBe(true);
    expect(sessionTextBytes('255.255.255.255/32', s, () => undefined)).toBe(true);
    expect(sessionTextBytes('11.0.0.0/7', s, () => undefined)).toBe(false);
    expect(sessionTextBytes('10.0.0.0/7', s, () => undefined)).toBe(true);
  });

  it('a repeated key in a list of rows is refused as in a list of objects, naming both', () => {
    const s = { ue: '10.60.0.1/32', teid: 1, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' };
    const text = JSON.stringify({ settings: { max_sessions: 64 }, sessions: [s, { ...s, ue: '10.60.0.2/32' }, { ...s, teid: 3 }] });
    expect(() => parseConfig(text, 'rep.json')).toThrow('sessions[2].ue: 10.60.0.1/32 is already used by sessions[0]');
    const named = JSON.stringify({ settings: { max_sessions: 64 }, sessions: [{ ...s, name: 'a' }, { ...s, name: 'a', ue: '10.60.0.2/32' }, { ...s, teid: 3 }] });
    expect(() => parseConfig(named, 'rep.json')).toThrow(/sessions\[1\]\.name: "a" is already used by sessions\[0\]/);
  });
});

describe('the index a reload builds (parseConfigOffLoop)', () => {
  it('is by key bytes too, over the running rows it kept and the objects of the rules that changed, in the list order', async () => {
    const { parseConfigOffLoop } = await import('../../src/config/parse-async.js');
    const { deflateRawSync } = await import('node:zlib');
    const s = (i: number): Record<string, unknown> => ({ ue: `10.60.${i >> 8}.${i & 255}/32`, teid: i, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' });
    const p = (i: number): Record<string, unknown> => ({ match: `100.64.0.${i & 255}/32`, teid: `${i}/32`, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' });
    const text = (edit: boolean): string => {
      const lines = ['{"settings":{"max_sessions":4096,"max_policies":4096},"localsids":[],', '"policies":['];
      for (let i = 0; i < 2000; i++) lines.push(`${i === 0 ? '' : ','}${JSON.stringify(edit && i === 7 ? { ...p(7), teid: '99999/32' } : p(i))}`);
      lines.push('],"sessions":[');
      for (let i = 0; i < 2000; i++) lines.push(`${i === 0 ? '' : ','}${JSON.stringify(edit && i === 5 ? { ...s(5), ue: '10.99.0.1/32' } : s(i))}`);
      lines.push(']}');
      return lines.join('\n');
    };
    const before = parseConfig(text(false), 'reload.json');
    const after = await parseConfigOffLoop(Buffer.from(text(true)), 'reload.json', before, { deflated: deflateRawSync(Buffer.from(text(false))) });
    for (const [list, was, key] of [
      [after.sessions!, before.sessions!, (r: unknown) => sessionKey(r as Session)],
      [after.policies, before.policies, (r: unknown) => policyKey(r as Policy)],
    ] as const) {
      const byKey = takeRuleIndex(list as readonly (Session | Policy)[])!.byKey;
      expect(byKey).toBeInstanceOf(RowKeyedMap);
      // The unchanged rules are the running ones (rows); the changed one is an object, at its place.
      expect(list.filter((r, i) => r === was[i])).toHaveLength(1999);
      expect([...byKey.keys()]).toEqual(list.map(key));
      for (const r of list) expect(byKey.get(key(r))).toBe(r);
    }
    expect(takeRuleIndex(after.sessions!)).toBeUndefined();
  });
});

describe('a rule set built on a config whose index was taken', () => {
  it('indexes its sessions and policies by key bytes too (no key text per rule), with the same answers', async () => {
    const { RuleSet, emptyOverlay } = await import('../../src/daemon/rules.js');
    const c = parseConfig(JSON.stringify({ settings: { max_sessions: 64, max_policies: 64 }, localsids: [], policies: [{ name: 'p', match: '10.0.0.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' }], sessions: [{ name: 's', ue: '2001:db8:60::/64', teid: 1, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' }] }), 'two.json');
    const first = new RuleSet(c, emptyOverlay());
    // Before: the second set (mup daemon --check, a state file read again) built a Map of key texts.
    const second = new RuleSet(c, emptyOverlay());
    for (const set of [first, second]) {
      expect(set.sessions).toBeInstanceOf(RowKeyedMap);
      expect(set.policies).toBeInstanceOf(RowKeyedMap);
      expect(set.sessions.get('2001:db8:60::/64')).toBe(c.sessions![0]);
      expect(set.sessions.get('2001:DB8:60::/64')).toBeUndefined();
      expect(set.find('session', { name: 's' })).toBe('2001:db8:60::/64');
      expect(set.find('policy', { name: 'p' })).toBe('10.0.0.0/24');
    }
  });
});

describe('pages by key bytes (RowKeyedMap.pageSlices)', () => {
  it('give the pages pageKeys gives from the key texts: every cursor, deleted rows, keys set after, /0 to /32, TEIDs', async () => {
    const { pageKeys } = await import('../../src/daemon/api.js');
    const { runNow } = await import('../../src/host/slice-clock.js');
    const random = rng(3);
    const octet = (): number => [0, 1, 2, 9, 10, 19, 100, 199, 200, 255][Math.floor(random() * 10)]!;
    const sessions: Record<string, unknown>[] = [];
    const policies: Record<string, unknown>[] = [];
    const seenS = new Set<string>();
    const seenP = new Set<string>();
    while (sessions.length < 300) {
      const len = [0, 1, 3, 8, 16, 24, 30, 32][Math.floor(random() * 8)]!;
      const a = ((octet() << 24) | (octet() << 16) | (octet() << 8) | octet()) >>> 0;
      const m = len === 0 ? 0 : (a & ((0xffff_ffff << (32 - len)) >>> 0)) >>> 0;
      const ue = `${m >>> 24}.${(m >> 16) & 255}.${(m >> 8) & 255}.${m & 255}/${len}`;
      if (seenS.has(ue)) continue;
      seenS.add(ue);
      sessions.push({ ue, teid: 1, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' });
      const tlen = [0, 1, 2, 8, 31, 32][Math.floor(random() * 6)]!;
      const tv = tlen === 0 ? 0 : (Math.floor(random() * 2 ** 32) & ((0xffff_ffff << (32 - tlen)) >>> 0)) >>> 0;
      const match = tlen === 0 ? ue : `${a >>> 24}.${(a >> 16) & 255}.${(a >> 8) & 255}.${a & 255}/32`;
      const pk = `${match} ${tv}/${tlen}`;
      if (seenP.has(pk)) continue;
      seenP.add(pk);
      policies.push({ match, ...(tlen === 0 ? {} : { teid: `${tv}/${tlen}` }), sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' });
    }
    const c = parseConfig(JSON.stringify({ settings: { max_sessions: 1024, max_policies: 1024 }, localsids: [], policies, sessions }), 'pages.json');
    for (const [list, key, grown] of [
      [c.sessions!, (r: unknown) => sessionKey(r as Session), false],
      [c.policies, (r: unknown) => policyKey(r as Policy), false],
      // The same keys put one by one on an empty list (the API's): added rows, paged by their bytes too.
      [c.sessions!, (r: unknown) => sessionKey(r as Session), true],
      [c.policies, (r: unknown) => policyKey(r as Policy), true],
    ] as const) {
      const section = list === c.sessions ? 'sessions' : 'policies';
      const m = grown ? ruleKeyMap<unknown>(section, []) : (takeRuleIndex(list as readonly (Session | Policy)[])!.byKey as RowKeyedMap<unknown>);
      if (grown) for (const r of list) (m as RowKeyedMap<unknown>).setOwn(r);
      // Some rows deleted, some set again after their delete, a key no row has.
      for (let i = 0; i < list.length; i += 7) m.delete(key(list[i]));
      for (let i = 0; i < list.length; i += 21) m.set(key(list[i]), list[i]);
      m.set(list === c.sessions ? '10.255.0.0/16' : '203.0.113.9/32 teid 0x00001000/20', list[1]);
      for (const limit of [1, 7, 64, 1000]) {
        let after: string | undefined;
        for (let pages = 0; ; pages++) {
          const want = pageKeys(m.keys(), after, limit);
          const got = runNow(m.pageSlices(after, limit, () => pages % 2 === 0)!);
          expect(got, `limit ${limit} after ${after}`).toEqual(want);
          if (!want.more) break;
          after = want.keys.at(-1);
        }
      }
    }
  });

  it('leaves a map with an IPv6 session, or a cursor that is not a key text, to the texts', () => {
    const c = parseConfig(JSON.stringify({ settings: { max_sessions: 8 }, sessions: [{ ue: '2001:db8:60::/64', teid: 1, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' }] }), 'v6.json');
    expect((takeRuleIndex(c.sessions!)!.byKey as RowKeyedMap<unknown>).pageSlices(undefined, 10, () => false)).toBeUndefined();
    const d = parseConfig(JSON.stringify({ settings: { max_sessions: 8 }, sessions: [{ ue: '10.0.0.1/32', teid: 1, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' }] }), 'v4.json');
    const m = takeRuleIndex(d.sessions!)!.byKey as RowKeyedMap<unknown>;
    expect(m.pageSlices('10.0.0.01/32', 10, () => false)).toBeUndefined();
    expect(m.pageSlices('10.0.0.0/32', 10, () => false)).toBeDefined();
  });
});
