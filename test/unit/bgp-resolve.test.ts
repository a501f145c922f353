/**
 * src/bgp/resolve.ts: T2ST -> DSD (segment id + intersecting RTs, any
 * arrival order), DSD withdrawn under live T2STs, T1ST -> ISD longest match,
 * RT mismatch, SID checks by reason, the /25 split for advertising.
 */
import { describe, expect, it } from 'vitest';
import { resolve, splitForIsd, type ResolveOptions } from '../../src/bgp/resolve.js';
import type { DsdRoute, IsdRoute, MupRoute, T1stRoute, T2stRoute } from '../../src/bgp/routes.js';
import { formatIpv4, formatIpv6, formatIpv6Prefix, parseIpv4, parseIpv4Prefix, parseIpv6, parseIpv6Prefix } from '../../src/sid/addr.js';

const common = { afi: 1 as const, withdrawal: false, stale: false };
const sid6 = (s: string, behavior: number, lb: number, ln: number, fn: number) => ({ sid: parseIpv6(s, 't'), behavior, structure: { lb, ln, fn, al: 0, tl: 0, to: 0 } });
const dsd = (rd: string, sid: string, seg: string, rts = ['65000:100'], behavior = 19): DsdRoute => ({
  ...common,
  type: 'dsd',
  key: `[type:dsd][rd:${rd}][prefix:10.255.0.9]`,
  rd,
  rts,
  address: { family: 4, addr: parseIpv4('10.255.0.9', 't') },
  segmentId: seg,
  sid: sid6(sid, behavior, 64, 16, 16),
});
const t2st = (ep: string, teid: number, seg: string, rts = ['65000:100'], rd = '65000:50'): T2stRoute => ({
  ...common,
  type: 't2st',
  key: `[type:t2st][rd:${rd}][endpoint:${ep}][teid:${teid}]`,
  rd,
  rts,
  endpoint: { family: 4, addr: parseIpv4(ep, 't') },
  teid,
  teidLen: 32,
  segmentId: seg,
});
const isd = (prefix: string, sid: string, lb: number, ln: number, fn: number, rts = ['65000:100'], behavior = 72): IsdRoute => ({
  ...common,
  type: 'isd',
  key: `[type:isd][rd:65000:2][prefix:${prefix}]`,
  rd: '65000:2',
  rts,
  prefix: { family: 4, prefix: parseIpv4Prefix(prefix, 't') },
  sid: sid6(sid, behavior, lb, ln, fn),
});
const t1st = (ue: string, gnb: string, teid = 7, rts = ['65000:100']): T1stRoute => ({
  ...common,
  type: 't1st',
  key: `[type:t1st][rd:65000:50][prefix:${ue}]`,
  rd: '65000:50',
  rts,
  prefix: { family: 4, prefix: parseIpv4Prefix(ue, 't') },
  teid,
  qfi: 9,
  endpoint: { family: 4, addr: parseIpv4(gnb, 't') },
});

const defaults = { srcPrefix: parseIpv6Prefix('2001:db8:ff:2::/64', 't'), segments: [], srh: 'auto' as const, hopLimit: 64 };
const opts: ResolveOptions = {
  importRts: ['65000:100'],
  gw: true,
  pe: true,
  policyDefaults: defaults,
  sessionDefaults: { ...defaults, source: parseIpv4('198.51.100.1', 't') },
};
const shuffle = <T>(a: T[], seed: number): T[] => {
  const out = [...a];
  let s = seed;
  for (let i = out.length - 1; i > 0; i--) {
    s = (s * 1103515245 + 12345) & 0x7fffffff;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
};

describe('gateway role: T2ST + DSD -> plain-SID policy', () => {
  it('resolves by segment id and RT; the policy is (endpoint/32, TEID/32) -> the DSD SID as is', () => {
    const r = resolve([t2st('198.51.100.1', 0x12345678, '10:10'), dsd('65000:9', '2001:db8:d9:1::', '10:10')], opts);
    expect(r.rejected).toEqual([]);
    expect(r.policies).toHaveLength(1);
    const p = r.policies[0]!;
    expect(formatIpv4(p.match.addr)).toBe('198.51.100.1');
    expect(p.match.len).toBe(32);
    expect(p.teid).toEqual({ value: 0x12345678, len: 32 });
    expect(formatIpv6(p.sid!)).toBe('2001:db8:d9:1::');
    expect(formatIpv6Prefix(p.srcPrefix)).toBe('2001:db8:ff:2::/64');
    expect(p.name).toBe('bgp:198.51.100.1:0x12345678');
  });

  it('order independent: every arrival order gives the same rules', () => {
    const routes: MupRoute[] = [
      t2st('198.51.100.1', 1, '10:10'),
      t2st('198.51.100.1', 2, '10:11'),
      t2st('198.51.100.2', 3, '10:10', ['65000:100'], '10.255.0.2:7'),
      dsd('65000:9', '2001:db8:d9:1::', '10:10'),
      dsd('65000:10', '2001:db8:d9:2::', '10:11'),
      dsd('65000:11', '2001:db8:d9:0::', '10:10', ['65000:999']),
    ];
    const want = JSON.stringify(resolve(routes, opts).policies, (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
    for (let seed = 1; seed < 20; seed++) {
      expect(JSON.stringify(resolve(shuffle(routes, seed), opts).policies, (_k, v) => (typeof v === 'bigint' ? v.toString() : v))).toBe(want);
    }
    expect(resolve(routes, opts).policies.map((p) => formatIpv6(p.sid!))).toEqual(['2001:db8:d9:1::', '2001:db8:d9:1::', '2001:db8:d9:2::']);
  });

  it('a T2ST before its DSD waits (unresolved), is installed when the DSD comes', () => {
    const t = t2st('198.51.100.1', 5, '10:10');
    const before = resolve([t], opts);
    expect(before.policies).toEqual([]);
    expect(before.unresolved).toEqual([{ key: t.key, type: 't2st', why: expect.stringMatching(/no DSD with segment id 10:10/) }]);
    expect(resolve([t, dsd('65000:9', '2001:db8:d9:1::', '10:10')], opts).policies).toHaveLength(1);
  });

  it('RT mismatch: a DSD of another RT does not resolve the T2ST; a T2ST of an RT not imported is filtered', () => {
    const r = resolve([t2st('198.51.100.1', 5, '10:10', ['65000:100']), dsd('65000:9', '2001:db8:d9:1::', '10:10', ['65000:200'])], { ...opts, importRts: [] });
    expect(r.policies).toEqual([]);
    expect(r.unresolved).toHaveLength(1);
    const f = resolve([t2st('198.51.100.1', 5, '10:10', ['65000:300']), dsd('65000:9', '2001:db8:d9:1::', '10:10')], opts);
    expect(f.policies).toEqual([]);
    expect(f.filtered).toBe(1);
    expect(f.filteredBy).toEqual({ isd: 0, dsd: 0, t1st: 0, t2st: 1 });
  });

  it('DSD withdrawn under live T2STs: their policies go, the T2STs wait again', () => {
    const ts = [t2st('198.51.100.1', 1, '10:10'), t2st('198.51.100.1', 2, '10:10')];
    const d = dsd('65000:9', '2001:db8:d9:1::', '10:10');
    expect(resolve([...ts, d], opts).policies).toHaveLength(2);
    const gone = resolve([...ts, { ...d, withdrawal: true }], opts);
    expect(gone.policies).toEqual([]);
    expect(gone.unresolved).toHaveLength(2);
  });

  it('two DSDs for one segment id: the lowest SID wins, whatever the order', () => {
    const a = dsd('65000:9', '2001:db8:d9:2::', '10:10');
    const b = dsd('65000:8', '2001:db8:d9:1::', '10:10');
    const t = t2st('198.51.100.1', 1, '10:10');
    expect(formatIpv6(resolve([t, a, b], opts).policies[0]!.sid!)).toBe('2001:db8:d9:1::');
    expect(formatIpv6(resolve([b, t, a], opts).policies[0]!.sid!)).toBe('2001:db8:d9:1::');
  });

  it('rejected by reason: DSD of an unknown behavior, without a segment id, without a SID; IPv6 endpoint', () => {
    const noSeg = { ...dsd('65000:3', '2001:db8:d9:3::', '10:10'), segmentId: undefined } as DsdRoute;
    const noSid = { ...dsd('65000:4', '2001:db8:d9:4::', '10:10'), sid: undefined } as DsdRoute;
    const v6: T2stRoute = { ...t2st('198.51.100.1', 1, '10:10'), key: 'v6', endpoint: { family: 6, addr: parseIpv6('2001:db8::1', 't') } };
    const r = resolve([dsd('65000:2', '2001:db8:d9:2::', '10:10', undefined, 72), noSeg, noSid, v6], opts);
    expect(r.rejected.map((x) => x.reason).sort()).toEqual(['no_segment_id', 'no_sid', 'unknown_behavior', 'unsupported']);
  });

  it('a DSD of End.DX4 (17) or End.DX6 (16) resolves like End.DT4: its SID used as is (a PE without VRFs); End.X (5) does not', () => {
    for (const behavior of [17, 16]) {
      const r = resolve([t2st('198.51.100.1', 1, '10:10'), dsd('65000:9', '2001:db8:d9:7::', '10:10', undefined, behavior)], opts);
      expect(r.rejected).toEqual([]);
      expect(r.policies.map((p) => formatIpv6(p.sid!))).toEqual(['2001:db8:d9:7::']);
    }
    const x = resolve([t2st('198.51.100.1', 1, '10:10'), dsd('65000:9', '2001:db8:d9:7::', '10:10', undefined, 5)], opts);
    expect(x.rejected.map((r) => r.reason)).toEqual(['unknown_behavior']);
  });
});

describe('PE role: T1ST + ISD -> session', () => {
  it('longest match over ISDs, RTs intersecting; isd = SID masked to L = LB+LN+FN', () => {
    const routes = [
      isd('192.0.2.0/25', '2001:db8:a1::', 40, 8, 8),
      isd('192.0.2.0/26', '2001:db8:a2::', 32, 8, 8),
      isd('192.0.2.0/27', '2001:db8:a3::', 40, 8, 8, ['65000:999']),
      t1st('10.60.0.1/32', '192.0.2.10'),
    ];
    for (let seed = 1; seed < 8; seed++) {
      const r = resolve(shuffle(routes, seed), { ...opts, importRts: [] });
      expect(r.sessions).toHaveLength(1);
      const s = r.sessions[0]!;
      expect(formatIpv6Prefix(s.isd)).toBe('2001:db8:a2::/48');
      expect(formatIpv4(s.endpoint)).toBe('192.0.2.10');
      expect(formatIpv4(s.source)).toBe('198.51.100.1');
      expect([s.teid, s.qfi, s.name]).toEqual([7, 9, 'bgp:10.60.0.1/32']);
    }
  });

  it('no covering ISD: unresolved; covered later: installed', () => {
    const t = t1st('10.60.0.1/32', '192.0.2.200');
    expect(resolve([isd('192.0.2.0/25', '2001:db8:a1::', 40, 8, 8), t], opts).unresolved).toHaveLength(1);
    expect(resolve([isd('192.0.2.128/25', '2001:db8:a1::', 40, 8, 8), t], opts).sessions).toHaveLength(1);
  });

  it('an embedding SID with L + 72 > 128 is rejected (sid_too_long); bad structure is rejected', () => {
    const r = resolve([isd('192.0.2.0/25', '2001:db8:a1::', 48, 8, 8), isd('192.0.2.128/25', '2001:db8:a1::', 0, 0, 0), t1st('10.60.0.1/32', '192.0.2.10')], opts);
    expect(r.rejected.map((x) => x.reason).sort()).toEqual(['bad_sid_structure', 'sid_too_long']);
    expect(r.sessions).toEqual([]);
    expect(r.rejected.find((x) => x.reason === 'sid_too_long')!.detail).toMatch(/L = LB\+LN\+FN = 64/);
  });

  it('a plain (DSD) SID has no such limit: /64 + 16 + 16 structure is fine', () => {
    expect(resolve([t2st('198.51.100.1', 1, '10:10'), dsd('65000:9', '2001:db8:d9:1::', '10:10')], opts).rejected).toEqual([]);
  });

  it('roles: a gw-only resolver ignores ISD/T1ST, a pe-only one T2ST/DSD', () => {
    const routes = [isd('192.0.2.0/25', '2001:db8:a1::', 40, 8, 8), t1st('10.60.0.1/32', '192.0.2.10'), t2st('198.51.100.1', 1, '10:10'), dsd('65000:9', '2001:db8:d9:1::', '10:10')];
    const gw = resolve(routes, { ...opts, pe: false });
    expect([gw.policies.length, gw.sessions.length]).toEqual([1, 0]);
    const pe = resolve(routes, { ...opts, gw: false });
    expect([pe.policies.length, pe.sessions.length]).toEqual([0, 1]);
  });
});

describe('ISD split for advertising (gobgpd 3.10 drops received ISDs shorter than /25 or /121)', () => {
  it('a /24 gives two /25s; /25 and longer stay', () => {
    const p = parseIpv4Prefix('192.0.2.0/24', 't');
    expect(splitForIsd({ family: 4, addr: p.addr, len: p.len })).toEqual(['192.0.2.0/25', '192.0.2.128/25']);
    const q = parseIpv4Prefix('192.0.2.128/26', 't');
    expect(splitForIsd({ family: 4, addr: q.addr, len: q.len })).toEqual(['192.0.2.128/26']);
    expect(splitForIsd({ family: 4, addr: p.addr, len: 23 }).length).toBe(4);
  });
  it('IPv6 to /121; more than 256 pieces refused', () => {
    const p = parseIpv6Prefix('2001:db8:101::/120', 't');
    expect(splitForIsd({ family: 6, addr: p.addr, len: p.len })).toEqual(['2001:db8:101::/121', '2001:db8:101::80/121']);
    expect(() => splitForIsd({ family: 4, addr: p.addr as never, len: 16 })).toThrow(/\/17 or longer/);
  });
});

describe('memo', () => {
  it('an unchanged rule is the same object in the next resolve; a changed one is new', () => {
    const memo = new WeakMap();
    const t = t2st('198.51.100.1', 1, '10:10');
    const t2 = t2st('198.51.100.1', 2, '10:10');
    const d1 = dsd('65000:9', '2001:db8:d9:1::', '10:10');
    const a = resolve([t, t2, d1], { ...opts, memo });
    const d2 = dsd('65000:9', '2001:db8:d9:2::', '10:10'); // re-advertised: a new route object
    const b = resolve([d2, t2, t], { ...opts, memo });
    expect(b.policies[0]).not.toBe(a.policies[0]);
    expect(formatIpv6(b.policies[0]!.sid!)).toBe('2001:db8:d9:2::');
    const c = resolve([t, t2, d2], { ...opts, memo });
    expect(c.policies[0]).toBe(b.policies[0]);
    expect(c.policies[1]).toBe(b.policies[1]);
  });
});
