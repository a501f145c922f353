/**
 * src/bgp/routes.ts on real gobgp 3.10 monitor output (test/fixtures/bgp,
 * captured by capture.sh there): all four MUP route types in both families,
 * as received from a peer and as originated locally, withdrawals, the
 * --current snapshot (several paths in one line) and graceful-restart stale
 * withdrawals.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { decodeMonitorLine, describeRoute, type MupRoute } from '../../src/bgp/routes.js';
import { formatIpv4, formatIpv6 } from '../../src/sid/addr.js';
import type { Ipv4Addr, Ipv6Addr } from '../../src/sid/types.js';

const fixture = (name: string): string[] => readFileSync(new URL(`../fixtures/bgp/${name}`, import.meta.url), 'utf8').split('\n').filter((l) => l !== '');
const decodeAll = (lines: string[]): MupRoute[] => lines.flatMap((l) => decodeMonitorLine(l).routes);

describe('gobgp 3.10 monitor lines', () => {
  const lines = fixture('received.jsonl');
  const routes = decodeAll(lines);

  it('the --current snapshot: several paths in one line', () => {
    const first = decodeMonitorLine(lines[0]!);
    expect(first.rejected).toEqual([]);
    expect(first.routes.map((r) => r.key)).toEqual([
      '[type:t2st][rd:65000:50][endpoint:198.51.100.2][teid:4294967295]',
      '[type:t2st][rd:65000:50][endpoint:198.51.100.3][teid:1]',
    ]);
  });

  it('every line decodes, nothing rejected or skipped', () => {
    for (const l of lines) {
      const d = decodeMonitorLine(l);
      expect(d.rejected).toEqual([]);
      expect(d.skipped).toBe(0);
    }
    expect(new Set(routes.map((r) => r.type))).toEqual(new Set(['isd', 'dsd', 't1st', 't2st']));
  });

  it('ISD (IPv4): prefix, SID, behavior 72, structure LB/LN/FN, RT, next hop, source-id', () => {
    const isd = routes.find((r) => r.key === '[type:isd][rd:65000:2][prefix:192.0.2.0/25]')!;
    expect(isd.type).toBe('isd');
    if (isd.type !== 'isd') return;
    expect(isd.afi).toBe(1);
    expect(isd.prefix.family).toBe(4);
    expect(formatIpv6(isd.sid!.sid)).toBe('2001:db8:a2::');
    expect(isd.sid!.behavior).toBe(72);
    expect(isd.sid!.structure).toEqual({ lb: 40, ln: 8, fn: 8, al: 0, tl: 0, to: 0 });
    expect(isd.rts).toEqual(['65000:100']);
    expect(isd.nexthop).toBe('2001:db8:ff::2');
    expect(isd.sourceId).toBe('10.255.0.21');
    expect(isd.neighbor).toBe('127.0.0.21');
    expect(isd.withdrawal).toBe(false);
  });

  it('ISD with an IPv4-address RD; IPv6 ISD (afi 2, behavior 71)', () => {
    expect(routes.some((r) => r.key === '[type:isd][rd:10.255.0.2:3][prefix:192.0.2.128/25]')).toBe(true);
    const v6 = routes.find((r) => r.key === '[type:isd][rd:65000:2][prefix:2001:db8:101::1/128]')!;
    expect(v6.afi).toBe(2);
    expect(v6.type === 'isd' && v6.sid?.behavior).toBe(71);
  });

  it('DSD: address, segment id (segmend_id), End.DT4 SID /64 structure; IPv6 DSD End.DT6', () => {
    const dsd = routes.find((r) => r.key === '[type:dsd][rd:65000:9][prefix:10.255.0.9]' && !r.withdrawal)!;
    if (dsd.type !== 'dsd') throw new Error('not a DSD');
    expect(dsd.segmentId).toBe('10:10');
    expect(formatIpv6(dsd.sid!.sid)).toBe('2001:db8:d9:1::');
    expect(dsd.sid!.behavior).toBe(19);
    expect(dsd.sid!.structure).toMatchObject({ lb: 64, ln: 16, fn: 16 });
    expect(dsd.address).toEqual({ family: 4, addr: expect.any(Number) });
    const v6 = routes.find((r) => r.key === '[type:dsd][rd:65000:19][prefix:2001:db8:ff::9]')!;
    expect(v6.type === 'dsd' && v6.sid?.behavior).toBe(18);
    expect(v6.type === 'dsd' && v6.segmentId).toBe('10:11');
  });

  it('T1ST: UE prefix, TEID, QFI, endpoint; no source in 3.10', () => {
    const t1 = routes.find((r) => r.key === '[type:t1st][rd:65000:50][prefix:10.60.0.1/32]' && !r.withdrawal)!;
    if (t1.type !== 't1st') throw new Error('not a T1ST');
    expect(t1.teid).toBe(2271560481);
    expect(t1.qfi).toBe(9);
    expect(formatIpv4(t1.endpoint.addr as Ipv4Addr)).toBe('192.0.2.10');
    expect(t1.source).toBeUndefined();
    expect(t1.nexthop).toBe('10.255.0.1');
    const v6 = routes.find((r) => r.key === '[type:t1st][rd:65000:50][prefix:2001:db8:60::1/128]')!;
    expect(v6.type === 't1st' && formatIpv6(v6.endpoint.addr as Ipv6Addr)).toBe('2001:db8:101::1');
  });

  it('T2ST: endpoint, full 32-bit TEID (also 0xffffffff), segment id, RT 65000:200 under an IPv4-address RD', () => {
    const t2 = routes.find((r) => r.key === '[type:t2st][rd:65000:50][endpoint:198.51.100.1][teid:305419896]' && !r.withdrawal)!;
    if (t2.type !== 't2st') throw new Error('not a T2ST');
    expect(t2.teid).toBe(0x12345678);
    expect(t2.teidLen).toBe(32);
    expect(t2.segmentId).toBe('10:10');
    const max = routes.find((r) => r.type === 't2st' && r.teid === 0xffffffff);
    expect(max).toBeDefined();
    const other = routes.find((r) => r.key === '[type:t2st][rd:10.255.0.2:7][endpoint:198.51.100.1][teid:103]')!;
    expect(other.rts).toEqual(['65000:200']);
    expect(routes.find((r) => r.key === '[type:t2st][rd:65000:50][endpoint:2001:db8:100::1][teid:777]')?.afi).toBe(2);
  });

  it('withdrawals of all four types carry "withdrawal": true and the same key', () => {
    const w = routes.filter((r) => r.withdrawal);
    expect(w.map((r) => r.type).sort()).toEqual(['dsd', 'isd', 't1st', 't2st']);
    for (const r of w) expect(routes.some((a) => !a.withdrawal && a.key === r.key)).toBe(true);
    expect(w.every((r) => !r.stale)).toBe(true);
  });

  it('locally originated paths have no source-id or neighbor', () => {
    const local = decodeAll(fixture('local.jsonl'));
    expect(local.length).toBeGreaterThan(10);
    expect(local.every((r) => r.sourceId === undefined && r.neighbor === undefined)).toBe(true);
  });

  it('graceful restart: [] lines while stale, then stale withdrawals of the paths not refreshed', () => {
    const lines = fixture('gr-stale.jsonl');
    expect(lines.filter((l) => l.trim() === '[]').length).toBeGreaterThan(0);
    expect(decodeMonitorLine('[]')).toEqual({ routes: [], rejected: [], skipped: 0 });
    const gr = decodeAll(lines);
    expect(gr.length).toBeGreaterThan(0);
    expect(gr.every((r) => r.withdrawal && r.stale)).toBe(true);
    // The re-advertised T2ST was refreshed, not withdrawn.
    expect(gr.some((r) => r.type === 't2st' && r.teid === 0xffffffff)).toBe(false);
  });

  it('describeRoute names the route for logs', () => {
    const t2 = routes.find((r) => r.type === 't2st')!;
    expect(describeRoute(t2)).toMatch(/^\[type:t2st\].* rt 65000:100 mup 10:10/);
  });
});

describe('bad and foreign input', () => {
  const t2 = fixture('received.jsonl').map((l) => JSON.parse(l) as unknown[]).find((a) => JSON.stringify(a).includes('"route_type":4'))![0] as Record<string, unknown>;
  const one = (p: unknown): ReturnType<typeof decodeMonitorLine> => decodeMonitorLine(JSON.stringify([p]));

  it('not JSON, not an array: one rejection each, no throw', () => {
    expect(decodeMonitorLine('{oops').rejected[0]!.reason).toMatch(/not JSON/);
    expect(decodeMonitorLine('{"a":1}').rejected[0]!.reason).toMatch(/not a JSON array/);
  });

  it('another family (safi 1) is skipped, not rejected', () => {
    const attrs = (t2['attrs'] as Record<string, unknown>[]).map((a) => (a['type'] === 14 ? { ...a, safi: 1 } : a));
    expect(one({ ...t2, attrs })).toMatchObject({ routes: [], rejected: [], skipped: 1 });
  });

  it('a malformed MUP path is rejected with the field named', () => {
    const nlri = t2['nlri'] as Record<string, unknown>;
    const value = nlri['value'] as Record<string, unknown>;
    expect(one({ ...t2, nlri: { ...nlri, value: { ...value, endpoint_address: '300.1.1.1' } } }).rejected[0]!.reason).toMatch(/endpoint_address/);
    expect(one({ ...t2, nlri: { ...nlri, value: { ...value, teid: -1 } } }).rejected[0]!.reason).toMatch(/teid/);
    expect(one({ ...t2, nlri: { ...nlri, route_type: 9 } }).rejected[0]!.reason).toMatch(/route_type 9/);
  });

  it('newer GoBGP: TEID as a dotted quad, endpoint_address_length', () => {
    const nlri = t2['nlri'] as Record<string, unknown>;
    const value = nlri['value'] as Record<string, unknown>;
    const r = one({ ...t2, nlri: { ...nlri, value: { ...value, teid: '18.52.0.0', endpoint_address_length: 48 } } }).routes[0]!;
    expect(r.type === 't2st' && [r.teid, r.teidLen]).toEqual([0x12340000, 16]);
  });
});

describe('sidecar input that is no MUP route of its own key (found in review, session 42)', () => {
  // A received T1ST of the fixture, with its NLRI's fields replaced.
  const base = JSON.parse(fixture('received.jsonl').find((l) => l.includes('"route_type":3'))!)[0] as Record<string, any>;
  const variant = (f: (nlri: Record<string, any>) => void): unknown => {
    const p = structuredClone(base);
    f(p.nlri);
    const mp = p.attrs.find((a: { type: number }) => a.type === 14);
    if (mp?.value !== undefined) mp.value = [p.nlri];
    return p;
  };
  const decode = (...paths: unknown[]): ReturnType<typeof decodeMonitorLine> => decodeMonitorLine(JSON.stringify(paths));

  it.each(['__proto__', 'constructor', 'toString', '3', 9])('route_type %j: rejected, the line\'s other paths decoded (was: a TypeError that ended the reader thread)', (type) => {
    const d = decode(variant((n) => (n.route_type = type)), base);
    expect(d.rejected).toHaveLength(1);
    expect(d.rejected[0]!.reason).toContain('unknown MUP route_type');
    expect(d.routes).toHaveLength(1);
  });

  it('a prefix with host bits is refused, not taken as the masked prefix (two routes of gobgpd were one key)', () => {
    const a = variant((n) => (n.value.prefix = '10.60.0.1/31'));
    const b = variant((n) => (n.value.prefix = '10.60.0.0/31'));
    const d = decode(a, b);
    expect(d.routes.map((r) => r.key)).toEqual(['[type:t1st][rd:65000:50][prefix:10.60.0.0/31]']);
    expect(d.rejected).toHaveLength(1);
    expect(d.rejected[0]!.reason).toMatch(/10\.60\.0\.1\/31 has host bits set.*refused/);
    expect(d.rejected[0]!.key).toBeUndefined();
  });

  it('RDs: one text per RD, each field in its type\'s range', () => {
    const rd = (v: unknown): string | undefined => {
      const d = decode(variant((n) => (n.value.rd = v)));
      return d.routes[0]?.rd ?? `refused: ${d.rejected[0]!.reason}`;
    };
    expect(rd({ type: 0, admin: 65000, assigned: 2 })).toBe('65000:2');
    // Type 2 with a 16-bit AS: gobgp's spelling of type 2, not type 0's text.
    expect(rd({ type: 2, admin: 65000, assigned: 2 })).toBe('0.65000:2');
    expect(rd({ type: 2, admin: 4200000000, assigned: 2 })).toBe('4200000000:2');
    expect(rd({ type: 1, admin: '10.0.0.1', assigned: 7 })).toBe('10.0.0.1:7');
    expect(rd({ type: 0, admin: 4000000000, assigned: 2 })).toMatch(/^refused: rd\.admin is not an integer 0\.\.65535/);
    expect(rd({ type: 1, admin: '10.0.0.1', assigned: 70000 })).toMatch(/^refused: rd\.assigned is not an integer 0\.\.65535/);
    expect(rd({ type: 2, admin: 4200000000, assigned: 70000 })).toMatch(/^refused: rd\.assigned/);
    expect(rd({ type: 1, admin: 'not-an-ip', assigned: 1 })).toMatch(/^refused: rd\.admin "not-an-ip" is not an IPv4 address/);
  });

  it('a line that is no list of paths says so (notPaths), for the learner not to take it as a table', () => {
    expect(decodeMonitorLine('not json').notPaths).toMatch(/^not JSON/);
    expect(decodeMonitorLine('{"paths":[]}').notPaths).toBe('not a JSON array of paths');
    expect(decodeMonitorLine('null').notPaths).toBe('not a JSON array of paths');
    expect(decodeMonitorLine('[]').notPaths).toBeUndefined();
    expect(decodeMonitorLine('{"error":"x"}')).toMatchObject({ error: 'x' });
  });
});
