import { IncrementalResolver } from '/work/wt-bgpinc/src/bgp/incremental.ts';
import { resolve } from '/work/wt-bgpinc/src/bgp/resolve.ts';
import { parseIpv4, parseIpv4Prefix, parseIpv6, parseIpv6Prefix } from '/work/wt-bgpinc/src/sid/addr.ts';
const common = { afi: 1 as const, withdrawal: false, stale: false, sourceId: '1.1.1.1' };
const routes: any[] = [];
const sid = (s: string, b: number) => ({ sid: parseIpv6(s, 't'), behavior: b, structure: { lb: 40, ln: 8, fn: 8, al: 0, tl: 0, to: 0 } });
routes.push({ ...common, type: 'dsd', key: 'dsd1', rd: '1:1', rts: ['65000:100'], address: { family: 4, addr: parseIpv4('10.0.0.1', 't') }, segmentId: '10:10', sid: sid('2001:db8:d::', 19) });
routes.push({ ...common, type: 'isd', key: 'isd1', rd: '1:1', rts: ['65000:100'], prefix: { family: 4, prefix: parseIpv4Prefix('192.0.2.0/25', 't') }, sid: sid('2001:db8:e::', 72) });
for (let i = 0; i < 10000; i++) {
  routes.push({ ...common, type: 't2st', key: `t2st${i}`, rd: '1:1', rts: ['65000:100'], endpoint: { family: 4, addr: parseIpv4('198.51.100.1', 't') }, teid: i + 1, teidLen: 32, segmentId: '10:10' });
  routes.push({ ...common, type: 't1st', key: `t1st${i}`, rd: '1:1', rts: ['65000:100'], prefix: { family: 4, prefix: ((0x0a000000 + i) >>> 0, parseIpv4Prefix(`10.${(i >> 8) & 255}.${i & 255}.1/32`, 't')) }, teid: i + 1, qfi: 9, endpoint: { family: 4, addr: parseIpv4('192.0.2.5', 't') } });
}
const d = { srcPrefix: parseIpv6Prefix('2001:db8:ff:2::/64', 't'), segments: [], srh: 'auto' as const, hopLimit: 64 };
const o = { importRts: ['65000:100'], gw: true, pe: true, policyDefaults: d, sessionDefaults: { ...d, source: parseIpv4('198.51.100.1', 't') } };
let t = performance.now(); resolve(routes, o); console.log('full resolve', (performance.now() - t).toFixed(1), 'ms');
const m = new Map(routes.map((r) => [r.key, r]));
const inc = new IncrementalResolver(o);
t = performance.now(); const dl = inc.update(m.keys(), (k) => m.get(k)); console.log('incremental all at once', (performance.now() - t).toFixed(1), 'ms', dl.policies.put.length, dl.sessions.put.length);
const inc2 = new IncrementalResolver(o);
const keys = [...m.keys()]; t = performance.now();
for (let i = 0; i < keys.length; i += 75) inc2.update(keys.slice(i, i + 75), (k) => m.get(k));
console.log('incremental in batches of 75', (performance.now() - t).toFixed(1), 'ms');
t = performance.now(); inc.view(); console.log('view', (performance.now() - t).toFixed(1), 'ms');
const r = { ...routes[5], segmentId: '10:10', teid: 777777 }; m.set(r.key, r);
t = performance.now(); inc.update([r.key], (k) => m.get(k)); console.log('one change', (performance.now() - t).toFixed(2), 'ms');
