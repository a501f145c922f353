/**
 * The BGP MUP learner and its daemon wiring (src/bgp/learner.ts,
 * src/daemon/bgp.ts) against a fake monitor reader (decoded lines posted as
 * the reader thread posts them) and a fake host whose applyLearned keeps
 * the learned rules and refuses the keys a "config/API rule" holds, as the
 * daemon's does. Found in review:
 * - a path whose key decoded but whose other fields did not (gobgpd 3.10
 *   passes a QFI of 64..255 through) was dropped whole: the rule of the
 *   route it replaced stayed installed, and so it did after the path's
 *   withdrawal (same bad fields), until the monitor restarted;
 * - a refused learned rule (its key held by an API rule) and a delta whose
 *   apply failed were tried again only when some other route changed;
 * - the set of rejections already logged grew with every rejected route
 *   ever seen, and a route rejected again after it went was not logged.
 */
import { EventEmitter } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import type { MonitorReader } from '../../src/bgp/learner.js';
import type { LearnedDelta } from '../../src/bgp/incremental.js';
import { decodeMonitorLine } from '../../src/bgp/routes.js';
import { policyKey, sessionKey } from '../../src/config/keys.js';
import type { BgpConfig, Policy, Session } from '../../src/config/types.js';
import { BgpService, type BgpServiceOptions, type LearnedApplied } from '../../src/daemon/bgp.js';
import type { Logger } from '../../src/daemon/log.js';
import { parseIpv4, parseIpv6Prefix } from '../../src/sid/addr.js';

type Json = Record<string, unknown>;
const rdJ = (assigned: number): Json => ({ type: 0, admin: 65000, assigned });
const BASE = [{ type: 1, value: 2 }, { type: 2, as_paths: [] }, { type: 5, value: 100 }];
const LEARNED = { 'source-id': '10.255.0.21', 'neighbor-ip': '127.0.0.21' };
const path = (routeType: number, value: Json, attrs: Json[], nexthop: string, o: { withdrawal?: boolean; own?: boolean }): Json => {
  const nlri = { arch_type: 1, route_type: routeType, value };
  return {
    nlri,
    age: 1,
    best: false,
    attrs: [...BASE, ...attrs, { type: 14, nexthop, afi: 1, safi: 85, value: [nlri] }],
    stale: false,
    ...(o.withdrawal === true ? { withdrawal: true } : {}),
    ...(o.own === true ? {} : LEARNED),
  };
};
const rtAttr = (extra: Json[] = []): Json => ({ type: 16, value: [{ type: 0, subtype: 2, value: '65000:100' }, ...extra] });
const sidAttr = (sid: string, behavior: number, lb: number, ln: number, fn: number): Json => ({
  type: 40,
  flags: 192,
  TLVs: [{ type: 5, SubTLVs: [{ type: 1, sid, flags: 0, endpoint_behavior: behavior, sub_sub_tlvs: [{ type: 1, locator_block_length: lb, locator_node_length: ln, function_length: fn, argument_length: 0, transposition_length: 0, transposition_offset: 0 }] }] }],
});

/** ISD 192.0.2.0/25, End.M.GTP4.E 2001:db8:a2::/56 (40/8/8). */
const isd = (o: { withdrawal?: boolean; own?: boolean } = {}): Json => path(1, { rd: rdJ(2), prefix: '192.0.2.0/25' }, [rtAttr(), sidAttr('IAENuACiAAAAAAAAAAAAAA==', 72, 40, 8, 8)], '2001:db8:ff::2', o);
/** DSD 10.255.0.9, End.DT4 2001:db8:d9:1::, segment id 10:10. */
const dsd = (o: { withdrawal?: boolean } = {}): Json =>
  path(2, { rd: rdJ(9), address: '10.255.0.9' }, [rtAttr([{ type: 12, subtype: 0, segmend_id: '10:10' }]), sidAttr('IAENuADZAAEAAAAAAAAAAA==', 19, 64, 16, 16)], '2001:db8:ff::9', o);
const t1st = (o: { teid: number; qfi: number; gnb: string; ue?: string; withdrawal?: boolean; own?: boolean }): Json =>
  path(3, { rd: rdJ(50), prefix: o.ue ?? '10.60.0.1/32', teid: o.teid, qfi: o.qfi, endpoint_address: o.gnb }, [rtAttr()], '10.255.0.1', o);
const t2st = (o: { ep: string; teid: number; seg?: string; withdrawal?: boolean }): Json =>
  path(4, { rd: rdJ(50), endpoint_address: o.ep, teid: o.teid }, [rtAttr([{ type: 12, subtype: 0, segmend_id: o.seg ?? '10:10' }])], '10.255.0.1', o);

const T1_KEY = '[type:t1st][rd:65000:50][prefix:10.60.0.1/32]';

/** The reader of one monitor run: lines are posted to the learner as the reader thread posts them. */
class FakeReader extends EventEmitter {
  postMessage(): void {}
  terminate(): Promise<number> {
    return Promise.resolve(0);
  }
  line(...paths: Json[]): void {
    const now = performance.timeOrigin + performance.now();
    this.emit('message', { t: 'lines', lines: [decodeMonitorLine(JSON.stringify(paths))], readAt: now, bytes: 0, decodeMs: 0 });
  }
}

const defaults = { srcPrefix: parseIpv6Prefix('2001:db8:ff:2::/64', 't'), segments: [], srh: 'auto' as const, hopLimit: 64 };
const config = (holdDown: number): BgpConfig => ({
  asn: 65000,
  routerId: '10.255.0.2',
  listen: { host: '127.0.0.2', port: 10179 },
  api: { host: '127.0.0.1', port: 50999 },
  neighbors: [],
  rd: '65000:2',
  rt: '65000:100',
  importRts: ['65000:100'],
  holdDown,
  gracefulRestart: 120,
  roles: ['gw', 'pe'],
  policyDefaults: defaults,
  sessionDefaults: { ...defaults, source: parseIpv4('198.51.100.1', 't') },
  dsd: [],
});

interface Harness {
  svc: BgpService;
  reader: FakeReader;
  policies: Map<string, Policy>;
  sessions: Map<string, Session>;
  /** "policy <key>" / "session <key>" a config/API rule holds: refused (conflict). */
  held: Set<string>;
  /** applyLearned calls, all of them. */
  calls: { n: number };
  /** Make the next applyLearned throw (as a failed table write does). */
  failNext: { n: number };
  warns: { msg: string; o: Json }[];
}

const running: BgpService[] = [];
afterEach(() => {
  for (const s of running.splice(0)) s.stop();
});

/** A service with a fake host: applyLearned refuses what `held` lists and tries the refused again at every call (the daemon's applyLearned). */
function harness(o: { holdDown?: number; retryMs?: readonly [number, number]; reconcile?: BgpServiceOptions['reconcile'] } = {}): Harness {
  const policies = new Map<string, Policy>();
  const sessions = new Map<string, Session>();
  const held = new Set<string>();
  const calls = { n: 0 };
  const failNext = { n: 0 };
  const warns: { msg: string; o: Json }[] = [];
  let refused = new Map<string, { kind: 'policy' | 'session'; rule: Policy | Session }>();
  const applyLearned = async (delta: LearnedDelta): Promise<LearnedApplied> => {
    calls.n++;
    if (failNext.n > 0) {
      failNext.n--;
      throw new Error('the table write failed');
    }
    let changed = 0;
    const next = new Map<string, { kind: 'policy' | 'session'; rule: Policy | Session }>();
    const one = <R extends Policy | Session>(kind: 'policy' | 'session', d: { put: R[]; del: R[] }, table: Map<string, R>, key: (r: R) => string): void => {
      const gone = new Set<string>();
      for (const r of d.del) {
        gone.add(key(r));
        if (table.delete(key(r))) changed++;
      }
      const want = new Map<string, R>();
      for (const x of refused.values()) if (x.kind === kind && !gone.has(key(x.rule as R))) want.set(key(x.rule as R), x.rule as R);
      for (const r of d.put) want.set(key(r), r);
      for (const [k, r] of want) {
        if (held.has(`${kind} ${k}`)) {
          next.set(`${kind} ${k}`, { kind, rule: r });
          continue;
        }
        if (table.get(k) !== r) changed++;
        table.set(k, r);
      }
    };
    one('policy', delta.policies, policies, policyKey);
    one('session', delta.sessions, sessions, sessionKey);
    refused = next;
    const installed = new Set([...[...policies.keys()].map((k) => `policy ${k}`), ...[...sessions.keys()].map((k) => `session ${k}`)]);
    return { installed, refused: [...next.keys()].map((rule) => ({ rule, reason: 'conflict' as const, why: 'an API rule holds it' })), changed };
  };
  const log = {
    info: () => undefined,
    debug: () => undefined,
    error: () => undefined,
    warn: (x: Json, msg: string) => warns.push({ msg, o: x }),
  } as unknown as Logger;
  const reader = new FakeReader();
  const svc = new BgpService(config(o.holdDown ?? 0), { log, applyLearned, sweep: () => Promise.resolve(0), localsids: () => [] }, {
    reader: () => reader as unknown as MonitorReader,
    peersReady: () => Promise.resolve(true),
    reconcile: o.reconcile ?? (() => Promise.resolve({ added: [], deleted: [], errors: [] })),
    ...(o.retryMs === undefined ? {} : { retryMs: o.retryMs }),
  });
  running.push(svc);
  // The learner's start: the fake reader takes the monitor's place.
  svc.start();
  return { svc, reader, policies, sessions, held, calls, failNext, warns };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
/** Let the learner's coalesced change (setImmediate) and the apply it starts run. */
async function settle(h: Harness): Promise<void> {
  await sleep(5);
  await h.svc.settled();
}
async function until(what: string, ms: number, ok: () => boolean): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(10);
  }
}
const teids = (h: Harness): number[] => [...h.sessions.values()].map((s) => s.teid);
const POLICY = 'policy 198.51.100.2/32 teid 0x00000007/32';

describe('a path whose key decodes but whose other fields do not is a withdrawal of that key', () => {
  it('decoding: the rejection carries the key when the NLRI fields of the key are good, none when they are not', () => {
    const bad = decodeMonitorLine(JSON.stringify([t1st({ teid: 200, qfi: 64, gnb: '192.0.2.20' })])).rejected;
    expect(bad).toHaveLength(1);
    expect(bad[0]).toMatchObject({ key: T1_KEY, learned: true, withdrawal: false });
    expect(bad[0]!.reason).toMatch(/qfi/);
    const seg = decodeMonitorLine(JSON.stringify([t2st({ ep: '198.51.100.2', teid: 7, seg: 'x', withdrawal: true })])).rejected[0]!;
    expect(seg).toMatchObject({ key: '[type:t2st][rd:65000:50][endpoint:198.51.100.2][teid:7]', withdrawal: true });
    const own = decodeMonitorLine(JSON.stringify([t1st({ teid: 200, qfi: 64, gnb: '192.0.2.20', own: true })])).rejected[0]!;
    expect(own).toMatchObject({ key: T1_KEY, learned: false });
    // The key's own field is bad: no key to withdraw.
    expect(decodeMonitorLine(JSON.stringify([t1st({ teid: 200, qfi: 9, gnb: '192.0.2.20', ue: '10.60.0.300/32' })])).rejected[0]!.key).toBeUndefined();
  });

  it('a replacement with a bad QFI takes the old session out; its withdrawal (same bad QFI) is harmless', async () => {
    const h = harness();
    h.reader.line(isd(), t1st({ teid: 100, qfi: 9, gnb: '192.0.2.10' }));
    await settle(h);
    expect(teids(h)).toEqual([100]);
    h.reader.line(t1st({ teid: 200, qfi: 64, gnb: '192.0.2.20' }));
    await settle(h);
    expect(teids(h)).toEqual([]);
    expect(h.svc.snapshot().routes.t1st.received).toBe(0);
    h.reader.line(t1st({ teid: 200, qfi: 64, gnb: '192.0.2.20', withdrawal: true }));
    await settle(h);
    expect(teids(h)).toEqual([]);
    expect(h.svc.snapshot().malformed).toBe(2);
    // A good path of the key afterwards is learned as usual.
    h.reader.line(t1st({ teid: 300, qfi: 9, gnb: '192.0.2.30' }));
    await settle(h);
    expect(teids(h)).toEqual([300]);
  });

  it('a withdrawal is applied by its key whatever its other fields say', async () => {
    const h = harness();
    h.reader.line(isd(), t1st({ teid: 100, qfi: 9, gnb: '192.0.2.10' }));
    await settle(h);
    h.reader.line(t1st({ teid: 100, qfi: 64, gnb: '192.0.2.10', withdrawal: true }));
    await settle(h);
    expect(teids(h)).toEqual([]);
  });

  it('as a withdrawal: held for the hold-down, and a good path in that time cancels it', async () => {
    const h = harness({ holdDown: 0.3 });
    h.reader.line(isd(), t1st({ teid: 100, qfi: 9, gnb: '192.0.2.10' }));
    await settle(h);
    h.reader.line(t1st({ teid: 200, qfi: 64, gnb: '192.0.2.20' }));
    await settle(h);
    expect(teids(h)).toEqual([100]);
    expect(h.svc.snapshot().routes.t1st.held).toBe(1);
    await until('the hold-down to pass', 2000, () => teids(h).length === 0);
    h.reader.line(t1st({ teid: 100, qfi: 9, gnb: '192.0.2.10' }));
    await settle(h);
    h.reader.line(t1st({ teid: 200, qfi: 64, gnb: '192.0.2.20' }));
    await settle(h);
    h.reader.line(t1st({ teid: 400, qfi: 9, gnb: '192.0.2.40' }));
    await settle(h);
    await sleep(400);
    expect(teids(h)).toEqual([400]);
  });

  it('a bad path of a key never learned, or one of our own paths, changes nothing', async () => {
    const h = harness();
    h.reader.line(isd(), t1st({ teid: 100, qfi: 9, gnb: '192.0.2.10' }));
    await settle(h);
    const before = h.calls.n;
    h.reader.line(t1st({ teid: 5, qfi: 64, gnb: '192.0.2.50', ue: '10.60.0.9/32' }), t1st({ teid: 5, qfi: 64, gnb: '192.0.2.50', ue: '10.60.0.9/32', withdrawal: true }));
    h.reader.line(t1st({ teid: 200, qfi: 64, gnb: '192.0.2.20', own: true }));
    await settle(h);
    expect(h.calls.n).toBe(before);
    expect(teids(h)).toEqual([100]);
    expect(h.svc.snapshot().malformed).toBe(3);
  });
});

describe('refused learned rules and a failed apply are tried again without waiting for another route', () => {
  it('the API rule holding a learned key goes: the learned policy is installed on the retry timer', async () => {
    const h = harness({ retryMs: [50, 400] });
    h.held.add(POLICY);
    h.reader.line(dsd(), t2st({ ep: '198.51.100.2', teid: 7 }));
    await settle(h);
    expect(h.policies.size).toBe(0);
    h.held.clear(); // the operator deletes the API policy
    await until('the learned policy', 2000, () => h.policies.size === 1);
  });

  it('rulesChanged(): tried again at once', async () => {
    const h = harness({ retryMs: [60_000, 60_000] });
    h.held.add(POLICY);
    h.reader.line(dsd(), t2st({ ep: '198.51.100.2', teid: 7 }));
    await settle(h);
    h.held.clear();
    h.svc.rulesChanged();
    await settle(h);
    expect(h.policies.size).toBe(1);
  });

  it('a delta whose apply failed is applied on the retry timer', async () => {
    const h = harness({ retryMs: [50, 400] });
    h.failNext.n = 1;
    h.reader.line(dsd(), t2st({ ep: '198.51.100.2', teid: 7 }));
    await settle(h);
    expect(h.policies.size).toBe(0);
    await until('the learned policy', 2000, () => h.policies.size === 1);
  });

  it('no work when nothing waits; backs off while a rule stays refused', async () => {
    const h = harness({ retryMs: [50, 200] });
    h.reader.line(dsd(), t2st({ ep: '198.51.100.2', teid: 7 }));
    await settle(h);
    // Installed: nothing waits, no retry is armed.
    expect(h.svc.retryWaitMs).toBeUndefined();
    const n = h.calls.n;
    await sleep(300);
    expect(h.calls.n).toBe(n);
    h.held.add(POLICY);
    h.reader.line(t2st({ ep: '198.51.100.2', teid: 7, withdrawal: true }));
    h.reader.line(t2st({ ep: '198.51.100.2', teid: 7 }));
    await settle(h);
    // Refused: a retry is armed at the first wait, which doubles with each retry that changes nothing, up to the last.
    const waits = [h.svc.retryWaitMs];
    for (let i = 0; i < 4; i++) {
      const m = h.calls.n;
      await until(`retry ${i + 1}`, 5000, () => h.calls.n > m);
      await h.svc.settled();
      waits.push(h.svc.retryWaitMs);
    }
    expect(waits).toEqual([50, 100, 200, 200, 200]);
  });
});

describe('rejections are logged once while they last, and forgotten when their route goes', () => {
  const notInstalled = (h: Harness): number => h.warns.filter((w) => w.msg === 'BGP: route not installed').length;
  const ruleRefused = (h: Harness): number => h.warns.filter((w) => w.msg === 'BGP: learned rule not installed').length;

  it('a rejected route: once while it lasts (a refresh is not logged); again when it comes back after its withdrawal', async () => {
    const h = harness();
    const v6 = (withdrawal = false): Json => t2st({ ep: '2001:db8::1', teid: 7, withdrawal });
    h.reader.line(dsd(), v6());
    await settle(h);
    expect(notInstalled(h)).toBe(1);
    h.reader.line(v6()); // the same route again (a refresh): not logged again
    await settle(h);
    expect(notInstalled(h)).toBe(1);
    h.reader.line(v6(true));
    await settle(h);
    h.reader.line(v6());
    await settle(h);
    expect(notInstalled(h)).toBe(2);
  });

  it('a refused rule: once while refused (whatever the retries); again when refused after it was installed', async () => {
    const h = harness({ retryMs: [20, 20] });
    h.held.add(POLICY);
    h.reader.line(dsd(), t2st({ ep: '198.51.100.2', teid: 7 }));
    await settle(h);
    await sleep(150);
    expect(ruleRefused(h)).toBe(1);
    h.held.clear();
    h.reader.line(t2st({ ep: '198.51.100.3', teid: 8 })); // another route's change: applied (and the refused one tried) at once
    await settle(h);
    expect(h.policies.size).toBe(2);
    h.reader.line(t2st({ ep: '198.51.100.2', teid: 7, withdrawal: true }));
    await settle(h);
    h.held.add(POLICY);
    h.reader.line(t2st({ ep: '198.51.100.2', teid: 7 }));
    await settle(h);
    expect(ruleRefused(h)).toBe(2);
  });
});

describe('the re-advertisement takes what the sidecar has of ours from the monitor', () => {
  it('reconcile gets our routes as the monitor showed them (no read of the whole table), and is not run while no table is read', async () => {
    const calls: (readonly string[] | undefined)[] = [];
    const h = harness({
      reconcile: (_api, _want, have) => {
        calls.push(have?.map((r) => r.key));
        return Promise.resolve({ added: [], deleted: [], errors: [] });
      },
    });
    h.svc.readvertise();
    await settle(h);
    expect(calls).toEqual([]); // no table read yet
    // The table: one learned route and our own ISD; the monitor's 'up' re-advertises.
    h.reader.line(isd(), isd({ own: true }));
    await settle(h);
    expect(calls).toEqual([['[type:isd][rd:65000:2][prefix:192.0.2.0/25]']]);
    // Ours withdrawn behind our back (gobgp global rib del at the sidecar): the next re-advertisement knows it.
    h.reader.line(isd({ own: true, withdrawal: true }));
    h.svc.readvertise();
    await settle(h);
    expect(calls.at(-1)).toEqual([]);
  });
});
