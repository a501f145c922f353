/**
 * `mup lab up --bgp`: the BGP MUP lab (issue 14, item 7). Namespaces
 * <prefix>-{gnb,gw1,gw2,pe,meca,mecb,rr}:
 *
 *            ┌── gw1 (mup daemon + sidecar gobgpd) ──┐
 *   gnb ═════┤   both own N3 192.0.2.10              ├═════ pe ── meca  (203.0.113.100)
 *  (GTP-U)   └── gw2 (mup daemon + sidecar gobgpd) ──┘      └── mecb  (203.0.113.100)
 *                       ╲         │         ╱
 *                        rr (route reflector gobgpd, the controller's API)
 *
 * - gnb routes to N3 over a kernel multipath route (one next hop per
 *   translator) with layer-4 hashing (net.ipv4.fib_multipath_hash_policy 1):
 *   each UE's GTP-U flow (its own UDP source port) sticks to one translator.
 * - gw1, gw2: our XDP translator (H.M.GTP4.D uplink, End.M.GTP4.E downlink)
 *   and a sidecar gobgpd, a route-reflector client with graceful restart.
 * - pe: the kernel's seg6local End.DX4 to MEC-A and to MEC-B (End.DT4 needs
 *   a VRF device, and this kernel has none: CONFIG_NET_VRF is off),
 *   advertised honestly as two DSDs of behavior End.DX4 (direct segment ids
 *   10:1 and 10:2) by its own gobgpd; the translators accept End.DX4 DSDs
 *   (docs/bgp.md "Resolution").
 * - rr: the route reflector; the controller originates the sessions' T1ST
 *   and T2ST at its API (`mup bgp session add --netns <prefix>-rr`).
 * - A management bridge in rr (10.255.0.0/24) carries BGP; every gobgpd has
 *   its API on 127.0.0.1:50051 of its own namespace.
 *
 * The translators' daemons run with a `bgp:` section (role gw) and learn
 * their uplink policies from their sidecar: T2ST (N3, TEID) resolved to the
 * DSD of its segment id ("origin": "bgp" in `mup policy list`). Each
 * sidecar's TOML is what `mup bgp config` makes of that section.
 */
import { existsSync, readFileSync, rmSync, writeFileSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify as toYaml } from 'yaml';
import { addSession, speakerToml, mupRoutes, neighborState, type PduSession } from '../bgp/controller.js';
import { gobgpdToml } from '../bgp/config.js';
import { parseConfig } from '../config/load.js';
import { gobgp, startGobgpd, type GobgpApi } from '../bgp/gobgpd.js';
import { listNamespaces } from '../host/netns-sweep.js';
import { LAB_RUN_DIR, startDaemon, stopDaemon, type DaemonFiles } from './lab.js';
import { ipBatch, nsRun, run, sleep } from './sh.js';
import { formatIpv6, parseIpv4, parseIpv6Prefix } from '../sid/addr.js';
import { encodeGtp4Sid, encodeGtp4Src, qfi, teid } from '../sid/mobile.js';
import { makeDirs } from '../host/mkdirs.js';

export const BGP_LAB_NODES = ['gnb', 'gw1', 'gw2', 'pe', 'meca', 'mecb', 'rr'] as const;
export type BgpLabNode = (typeof BGP_LAB_NODES)[number];
export const BGP_DEFAULT_PREFIX = 'mbgp';
export const TRANSLATORS = ['gw1', 'gw2'] as const;
export type Translator = (typeof TRANSLATORS)[number];

const XDP_PASS_OBJECT = fileURLToPath(new URL('../../build/testpeer.bpf.o', import.meta.url));
// From src/lab/ and from the compiled file alike (the .py is not copied at build).
export const BGP_STREAM_PY = fileURLToPath(new URL('../../src/lab/bgp-stream.py', import.meta.url));

/** One PDU session of the lab: UE i behind the gNB. */
export interface BgpLabUe {
  readonly index: number;
  readonly addr: string;
  readonly ulTeid: number;
  readonly dlTeid: number;
  readonly qfi: number;
  /** Which MEC site's direct segment its T2ST names. */
  readonly site: 'meca' | 'mecb';
}

export interface BgpLabTopology {
  readonly prefix: string;
  readonly ns: Readonly<Record<BgpLabNode, string>>;
  readonly asn: number;
  readonly rt: string;
  readonly gnb: { readonly addr: string; readonly n3: string; readonly links: Readonly<Record<Translator, { readonly dev: string; readonly own: string; readonly peer: string }>> };
  readonly gw: Readonly<Record<Translator, { readonly n3Dev: string; readonly peDev: string; readonly v6: string; readonly peV6: string; readonly mgmt: string }>>;
  readonly pe: { readonly mgmt: string; readonly sids: Readonly<Record<'meca' | 'mecb', { readonly sid: string; readonly segmentId: string; readonly dev: string; readonly own: string; readonly peer: string }>> };
  readonly rr: { readonly mgmt: string };
  readonly mec: { readonly anycast: string; readonly port: number };
  readonly srcPrefix: string;
  readonly dlPrefix: string;
  readonly api: GobgpApi;
  readonly bgpPort: number;
  readonly ues: readonly BgpLabUe[];
}

export function bgpLabTopology(prefix: string = BGP_DEFAULT_PREFIX, sessions = 8): BgpLabTopology {
  if (!/^[a-z][a-z0-9-]{0,19}$/.test(prefix)) throw new Error(`lab prefix "${prefix}": use 1-20 lowercase letters, digits or '-', starting with a letter`);
  if (!Number.isInteger(sessions) || sessions < 1 || sessions > 250) throw new Error(`sessions ${sessions}: 1 to 250`);
  const ns = Object.fromEntries(BGP_LAB_NODES.map((n) => [n, `${prefix}-${n}`])) as Record<BgpLabNode, string>;
  return {
    prefix,
    ns,
    asn: 65000,
    rt: '65000:100',
    gnb: {
      addr: '198.51.100.1',
      n3: '192.0.2.10',
      links: { gw1: { dev: 'to-gw1', own: '10.0.1.1', peer: '10.0.1.2' }, gw2: { dev: 'to-gw2', own: '10.0.2.1', peer: '10.0.2.2' } },
    },
    gw: {
      gw1: { n3Dev: 'to-gnb', peDev: 'to-pe', v6: '2001:db8:91::1', peV6: '2001:db8:91::2', mgmt: '10.255.0.2' },
      gw2: { n3Dev: 'to-gnb', peDev: 'to-pe', v6: '2001:db8:92::1', peV6: '2001:db8:92::2', mgmt: '10.255.0.3' },
    },
    pe: {
      mgmt: '10.255.0.4',
      sids: {
        meca: { sid: '2001:db8:d::a', segmentId: '10:1', dev: 'to-meca', own: '10.200.1.1', peer: '10.200.1.2' },
        mecb: { sid: '2001:db8:d::b', segmentId: '10:2', dev: 'to-mecb', own: '10.200.2.1', peer: '10.200.2.2' },
      },
    },
    rr: { mgmt: '10.255.0.1' },
    mec: { anycast: '203.0.113.100', port: 7000 },
    srcPrefix: '2001:db8:ff::/64',
    dlPrefix: '2001:db8:2::/48',
    api: { host: '127.0.0.1', port: 50051 },
    bgpPort: 179,
    ues: Array.from({ length: sessions }, (_, i) => ({ index: i, addr: `10.45.0.${2 + i}`, ulTeid: 0x1001 + i, dlTeid: 0x2002 + i, qfi: 9, site: 'meca' as const })),
  };
}

/** The downlink SID of UE u: End.M.GTP4.E prefix | gNB | QFI | downlink TEID (RFC 9433 6.6). */
export function dlSid(t: BgpLabTopology, u: BgpLabUe): string {
  return formatIpv6(encodeGtp4Sid(parseIpv6Prefix(t.dlPrefix, 'lab'), parseIpv4(t.gnb.addr, 'lab'), { qfi: qfi(u.qfi), r: false, u: false, teid: teid(u.dlTeid) }));
}

/** The PE's encapsulation source: src_prefix | N3, so End.M.GTP4.E's GTP-U comes from N3. */
export function peTunsrc(t: BgpLabTopology): string {
  return formatIpv6(encodeGtp4Src(parseIpv6Prefix(t.srcPrefix, 'lab'), parseIpv4(t.gnb.n3, 'lab')));
}

/** The controller's view of UE u: the PDU session it originates as T1ST + T2ST. */
export function labSession(t: BgpLabTopology, u: BgpLabUe, site: 'meca' | 'mecb' = u.site): PduSession {
  return { ue: `${u.addr}/32`, teid: u.ulTeid, dlTeid: u.dlTeid, qfi: u.qfi, endpoint: t.gnb.addr, n3: t.gnb.n3, segmentId: t.pe.sids[site].segmentId, rd: `${t.rr.mgmt}:1`, rt: t.rt };
}

export interface BgpLabPaths {
  readonly dir: string;
  readonly bpffs: string;
  readonly daemon: Readonly<Record<Translator, DaemonFiles>>;
}

export function bgpLabPaths(t: BgpLabTopology): BgpLabPaths {
  const dir = join(LAB_RUN_DIR, t.prefix);
  const bpffs = join(dir, 'bpffs');
  const d = (gw: Translator): DaemonFiles => ({
    config: join(dir, `${gw}.yaml`),
    instance: `lab-${t.prefix}-${gw}`,
    socket: join(dir, `${gw}.sock`),
    stateFile: join(dir, `${gw}.state.json`),
    bpffs,
    log: join(dir, `${gw}.log`),
    pidFile: join(dir, `${gw}.pid`),
  });
  return { dir, bpffs, daemon: { gw1: d('gw1'), gw2: d('gw2') } };
}

/**
 * A translator's config: no policies of its own; a `bgp:` section (role gw)
 * with which the daemon learns them from its sidecar gobgpd, a
 * route-reflector client of rr (docs/lab.md "The BGP lab").
 */
export function translatorConfig(t: BgpLabTopology, gw: Translator): string {
  const g = t.gw[gw];
  const c = {
    interfaces: [{ name: g.n3Dev }, { name: g.peDev }],
    settings: { forwarding: 'fib', max_policies: 1024, max_localsids: 64 },
    localsids: [{ name: 'n3-downlink', sid: t.dlPrefix, src_prefix_len: 64, container: 'always' }],
    bgp: {
      asn: t.asn,
      router_id: g.mgmt,
      listen: `${g.mgmt}:${t.bgpPort}`,
      api: `${t.api.host}:${t.api.port}`,
      neighbors: [{ address: t.rr.mgmt, port: t.bgpPort }],
      rd: `${g.mgmt}:1`,
      rt: t.rt,
      hold_down: BGP_LAB_HOLD_DOWN,
      graceful_restart: 120,
      roles: ['gw'],
      policy_defaults: { src_prefix: t.srcPrefix, segments: [], srh: 'auto' },
    },
  };
  return `# BGP lab translator ${gw} (src/lab/bgp-lab.ts)\n${toYaml(c)}`;
}

/**
 * Seconds a withdrawn route stays in a translator's data plane (the daemon's
 * default is 5). Longer in the lab: after a route-reflector restart, its
 * End-of-RIB sweeps the controller's stale T1ST/T2ST at the translators'
 * sidecars before the lab's controller (the gobgp CLI, a process per route)
 * has originated them again, which took over 5 s on a loaded 2-core host.
 */
export const BGP_LAB_HOLD_DOWN = 30;

/** The sidecar gobgpd TOML of a node: the translators' is what `mup bgp config` makes of their config's bgp section. */
export function sidecarToml(t: BgpLabTopology, node: 'gw1' | 'gw2' | 'pe' | 'rr', tomlPath?: string): string {
  if (node === 'gw1' || node === 'gw2') {
    const bgp = parseConfig(translatorConfig(t, node), `${node}.yaml`).bgp!;
    return gobgpdToml(bgp, tomlPath);
  }
  const mgmt = node === 'rr' ? t.rr.mgmt : t.pe.mgmt;
  const routerId = mgmt;
  if (node === 'rr') {
    const clients = [t.gw.gw1.mgmt, t.gw.gw2.mgmt, t.pe.mgmt];
    return speakerToml({ asn: t.asn, routerId, listen: mgmt, port: t.bgpPort, neighbors: clients.map((a) => ({ address: a, localAddress: mgmt, rrClient: true, gracefulRestart: 120 })) });
  }
  return speakerToml({ asn: t.asn, routerId, listen: mgmt, port: t.bgpPort, neighbors: [{ address: t.rr.mgmt, localAddress: mgmt, gracefulRestart: 120 }] });
}

/** One JSON GET to a translator daemon's API (undefined when it does not answer). */
export async function gwGet<T>(p: BgpLabPaths, gw: Translator, path: string): Promise<T | undefined> {
  const { request } = await import('node:http');
  return new Promise((res) => {
    const req = request({ socketPath: p.daemon[gw].socket, path, timeout: 10_000 }, (r) => {
      let b = '';
      r.on('data', (c: Buffer) => (b += c.toString()));
      r.on('end', () => {
        try {
          res(r.statusCode === 200 ? (JSON.parse(b) as T) : undefined);
        } catch {
          res(undefined);
        }
      });
    });
    req.on('error', () => res(undefined));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

export interface LearnedPolicy {
  readonly name: string;
  readonly match: string;
  readonly teid?: string;
  readonly sid?: string;
  readonly origin?: string;
}

/** A translator daemon's policies learned over BGP (origin "bgp"). */
export async function learnedPolicies(p: BgpLabPaths, gw: Translator): Promise<LearnedPolicy[]> {
  const out: LearnedPolicy[] = [];
  let after: string | undefined;
  for (;;) {
    const page = await gwGet<{ policies?: LearnedPolicy[]; next?: string }>(p, gw, `/v1/policies?limit=1000${after === undefined ? '' : `&after=${encodeURIComponent(after)}`}`);
    if (page === undefined) throw new Error(`${gw}: GET /v1/policies on ${p.daemon[gw].socket} failed; see ${p.daemon[gw].log}`);
    out.push(...(page.policies ?? []).filter((x) => x.origin === 'bgp'));
    if (page.next === undefined || page.next === null) return out;
    after = page.next;
  }
}

/** The SID each UE's learned uplink policy sends to at a translator (by UE index; absent: not learned). */
export async function learnedSids(t: BgpLabTopology, p: BgpLabPaths, gw: Translator): Promise<Map<number, string>> {
  const byTeid = new Map(t.ues.map((u) => [u.ulTeid, u.index]));
  const m = new Map<number, string>();
  for (const x of await learnedPolicies(p, gw)) {
    const teid = /^0x([0-9a-f]+)/i.exec(x.teid ?? '')?.[1];
    const i = teid === undefined ? undefined : byTeid.get(parseInt(teid, 16));
    if (i !== undefined && x.sid !== undefined && x.match.startsWith(`${t.gnb.n3}/`)) m.set(i, x.sid);
  }
  return m;
}

/**
 * Wait until both translators' data planes hold, for every UE, the policy
 * BGP gives: its T2ST's segment id -> that site's PE SID (`site(u)`, default
 * the UE's own). Polled, with a generous deadline (loaded hosts).
 */
export async function waitLearned(t: BgpLabTopology, p: BgpLabPaths, o: { site?: (u: BgpLabUe) => 'meca' | 'mecb'; timeoutMs?: number; gws?: readonly Translator[] } = {}): Promise<void> {
  const site = o.site ?? ((u: BgpLabUe) => u.site);
  const deadline = Date.now() + (o.timeoutMs ?? 60_000);
  for (const gw of o.gws ?? TRANSLATORS) {
    let last = '';
    for (;;) {
      const sids = await learnedSids(t, p, gw);
      const wrong = t.ues.filter((u) => sids.get(u.index) !== t.pe.sids[site(u)].sid);
      if (wrong.length === 0) break;
      last = wrong.map((u) => `ue${u.index}: ${sids.get(u.index) ?? 'none'} (want ${t.pe.sids[site(u)].sid})`).join(', ');
      if (Date.now() > deadline) throw new Error(`${gw}: the policies learned over BGP are not what the routes say within ${Math.round((o.timeoutMs ?? 60_000) / 1000)} s: ${last}; see ${p.daemon[gw].log}`);
      await sleep(100);
    }
  }
}

async function isMountpoint(dir: string): Promise<boolean> {
  return (await run('mountpoint', ['-q', dir], { allowFail: true })).exitCode === 0;
}

/** Remove everything a BGP lab with this prefix made: daemons, gobgpd and other processes in its namespaces, namespaces, pins. */
export async function bgpLabDown(prefix: string = BGP_DEFAULT_PREFIX): Promise<string[]> {
  const t = bgpLabTopology(prefix);
  const p = bgpLabPaths(t);
  const removed: string[] = [];
  for (const gw of TRANSLATORS) {
    const pid = await stopDaemon(p.daemon[gw].pidFile, p.daemon[gw].instance);
    if (pid !== undefined) removed.push(`${gw} daemon process ${pid}`);
  }
  const existing = new Set(await listNamespaces());
  for (const node of BGP_LAB_NODES) {
    const ns = t.ns[node];
    if (!existing.has(ns)) continue;
    const pids = (await run('ip', ['netns', 'pids', ns], { allowFail: true })).stdout.split('\n').filter((l) => /^\d+$/.test(l));
    for (const q of pids) {
      try {
        process.kill(Number(q), 'SIGKILL');
        removed.push(`process ${q} in ${ns}`);
      } catch {
        // gone
      }
    }
    await run('ip', ['netns', 'delete', ns]);
    removed.push(`namespace ${ns}`);
  }
  if (existsSync(p.bpffs) && (await isMountpoint(p.bpffs))) {
    await run('umount', [p.bpffs]);
    removed.push(`bpffs ${p.bpffs}`);
  }
  if (existsSync(p.dir)) {
    rmSync(p.dir, { recursive: true, force: true });
    removed.push(`directory ${p.dir}`);
    try {
      rmdirSync(LAB_RUN_DIR);
    } catch {
      // another lab's, or gone
    }
  }
  return removed;
}

export async function startSidecar(t: BgpLabTopology, p: BgpLabPaths, node: 'gw1' | 'gw2' | 'pe' | 'rr'): Promise<number> {
  const cfg = join(p.dir, `${node}-gobgpd.toml`);
  writeFileSync(cfg, sidecarToml(t, node, cfg));
  const g = await startGobgpd({ configFile: cfg, api: t.api, netns: t.ns[node], logFile: join(p.dir, `${node}-gobgpd.log`), readyTimeoutMs: 30_000 });
  g.child.unref(); // lives with the lab, not with this process: bgpLabDown kills it
  writeFileSync(join(p.dir, `${node}-gobgpd.pid`), `${g.pid}\n`);
  return g.pid;
}

/** The pid of a node's gobgpd (`ip netns exec` execs it, so it is the spawned pid). */
export function sidecarPid(p: BgpLabPaths, node: 'gw1' | 'gw2' | 'pe' | 'rr'): number {
  return Number(readFileSync(join(p.dir, `${node}-gobgpd.pid`), 'utf8').trim());
}

/** The PE's nexthop ids: the downlink group, then one per translator (gw1 +1, gw2 +2). */
export const PE_NH_BASE = 90;

const QUIET = ['net.ipv4.conf.all.rp_filter=0', 'net.ipv4.conf.default.rp_filter=0', 'net.ipv6.conf.all.accept_dad=0', 'net.ipv6.conf.default.accept_dad=0'];
const ROUTER = ['net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1'];

async function veth(t: BgpLabTopology, a: BgpLabNode, devA: string, b: BgpLabNode, devB: string): Promise<void> {
  await run('ip', ['-n', t.ns[a], 'link', 'add', devA, 'type', 'veth', 'peer', 'name', devB, 'netns', t.ns[b]]);
}

export type Progress = (msg: string) => void;

/** Build the BGP lab (after removing what a previous one with this prefix left); on failure everything is removed again. */
export async function bgpLabUp(prefix: string = BGP_DEFAULT_PREFIX, progress: Progress = () => undefined, o: { sessions?: number } = {}): Promise<{ topology: BgpLabTopology; paths: BgpLabPaths }> {
  const t = bgpLabTopology(prefix, o.sessions ?? 8);
  const p = bgpLabPaths(t);
  if (process.getuid?.() !== 0) throw new Error('mup lab up --bgp builds namespaces, veths, XDP attachments and a bpffs mount: run it as root');
  if (!existsSync(XDP_PASS_OBJECT)) throw new Error(`${XDP_PASS_OBJECT} is missing: build first (make bpf ts)`);
  await bgpLabDown(prefix);
  try {
    progress(`namespaces ${prefix}-{${BGP_LAB_NODES.join(',')}}`);
    makeDirs(p.bpffs);
    await run('mount', ['-t', 'bpf', 'bpf', p.bpffs]);
    for (const node of BGP_LAB_NODES) {
      await run('ip', ['netns', 'add', t.ns[node]]);
      await run('ip', ['-n', t.ns[node], 'link', 'set', 'lo', 'up']);
      await nsRun(t.ns[node], 'sysctl', ['-q', '-w', ...QUIET, ...(['gnb', 'gw1', 'gw2', 'pe'].includes(node) ? ROUTER : [])]);
    }
    // Layer-4 hashing over the translators; a next hop whose link is gone is not used.
    await nsRun(t.ns.gnb, 'sysctl', ['-q', '-w', 'net.ipv4.fib_multipath_hash_policy=1', 'net.ipv4.conf.all.ignore_routes_with_linkdown=1']);
    await nsRun(t.ns.pe, 'sysctl', ['-q', '-w', 'net.ipv6.fib_multipath_hash_policy=1', 'net.ipv6.conf.all.ignore_routes_with_linkdown=1']);
    progress('veths, addresses, routes; the kernel End.DX4 in pe');
    for (const gw of TRANSLATORS) {
      await veth(t, 'gnb', t.gnb.links[gw].dev, gw, t.gw[gw].n3Dev);
      await veth(t, gw, t.gw[gw].peDev, 'pe', `to-${gw}`);
      await veth(t, gw, 'mgmt', 'rr', `to-${gw}`);
    }
    await veth(t, 'pe', 'mgmt', 'rr', 'to-pe');
    for (const site of ['meca', 'mecb'] as const) await veth(t, 'pe', t.pe.sids[site].dev, site, 'to-pe');
    await ipBatch(t.ns.rr, ['link add br0 type bridge', `addr add ${t.rr.mgmt}/24 dev br0`, 'link set br0 up', ...['to-gw1', 'to-gw2', 'to-pe'].flatMap((d) => [`link set ${d} master br0`, `link set ${d} up`])]);
    await ipBatch(t.ns.gnb, [
      `addr add ${t.gnb.addr}/32 dev lo`,
      ...TRANSLATORS.flatMap((gw) => [`addr add ${t.gnb.links[gw].own}/30 dev ${t.gnb.links[gw].dev}`, `link set ${t.gnb.links[gw].dev} up`]),
      `route add ${t.gnb.n3}/32 src ${t.gnb.addr} ${TRANSLATORS.map((gw) => `nexthop via ${t.gnb.links[gw].peer} dev ${t.gnb.links[gw].dev}`).join(' ')}`,
    ]);
    for (const gw of TRANSLATORS) {
      const g = t.gw[gw];
      await ipBatch(t.ns[gw], [
        `addr add ${t.gnb.links[gw].peer}/30 dev ${g.n3Dev}`,
        `addr add ${t.gnb.n3}/32 dev ${g.n3Dev}`,
        `addr add ${g.v6}/64 dev ${g.peDev}`,
        `addr add ${g.mgmt}/24 dev mgmt`,
        ...[g.n3Dev, g.peDev, 'mgmt'].map((d) => `link set ${d} up`),
        `route add ${t.gnb.addr}/32 via ${t.gnb.links[gw].own} dev ${g.n3Dev}`,
        `route add 2001:db8:d::/48 via ${g.peV6} dev ${g.peDev}`,
      ]);
      await nsRun(t.ns[gw], 'sysctl', ['-q', '-w', `net.ipv4.conf.${g.peDev}.accept_local=1`]);
    }
    const pe: string[] = [`addr add ${t.pe.mgmt}/24 dev mgmt`, 'link set mgmt up'];
    for (const gw of TRANSLATORS) pe.push(`addr add ${t.gw[gw].peV6}/64 dev to-${gw}`, `link set to-${gw} up`);
    // Downlink to either translator's End.M.GTP4.E, over a nexthop group (one
    // nexthop object per translator), not a route's own `nexthop via` list:
    // every UE's seg6 encap below caches the IPv6 route it resolved, and a
    // next hop that loses carrier is only flagged linkdown in a multipath
    // route, which leaves those cached routes valid (the downlink of a dead
    // translator's UEs went on into its link to the end of the stream). A
    // nexthop object is removed when its link loses carrier, and that drops
    // the cached routes through it (docs/lab.md "The BGP lab").
    pe.push(...TRANSLATORS.map((gw, i) => `nexthop add id ${PE_NH_BASE + 1 + i} via ${t.gw[gw].v6} dev to-${gw}`));
    pe.push(`nexthop add id ${PE_NH_BASE} group ${TRANSLATORS.map((_, i) => PE_NH_BASE + 1 + i).join('/')}`);
    pe.push(`route add ${t.dlPrefix} nhid ${PE_NH_BASE}`);
    for (const site of ['meca', 'mecb'] as const) {
      const s = t.pe.sids[site];
      // End.DX4 to the site (this kernel has no VRF device, CONFIG_NET_VRF, which End.DT4's vrftable needs).
      pe.push(
        `addr add ${s.own}/24 dev ${s.dev}`,
        `link set ${s.dev} up`,
        `route add ${s.sid}/128 encap seg6local action End.DX4 nh4 ${s.peer} count dev ${s.dev}`,
      );
    }
    // Downlink: the PE's H.Encaps toward the End.M.GTP4.E SID composed for
    // each UE (SID | gNB | QFI | downlink TEID), from src_prefix | N3; the
    // kernel's seg6 encap stands in for the PE's T1ST + ISD resolution.
    pe.push(`sr tunsrc set ${peTunsrc(t)}`);
    for (const u of t.ues) pe.push(`route add ${u.addr}/32 encap seg6 mode encap segs ${dlSid(t, u)} dev to-gw1`);
    await ipBatch(t.ns.pe, pe);
    for (const site of ['meca', 'mecb'] as const) {
      const s = t.pe.sids[site];
      await ipBatch(t.ns[site], [`addr add ${s.peer}/24 dev to-pe`, `addr add ${t.mec.anycast}/32 dev to-pe`, 'link set to-pe up', `route add default via ${s.own}`]);
    }
    // Frames XDP redirects into a veth arrive only if the peer has an XDP program.
    for (const gw of TRANSLATORS) {
      await run('ip', ['-n', t.ns.gnb, 'link', 'set', 'dev', t.gnb.links[gw].dev, 'xdpdrv', 'obj', XDP_PASS_OBJECT, 'sec', 'xdp']);
      await run('ip', ['-n', t.ns.pe, 'link', 'set', 'dev', `to-${gw}`, 'xdpdrv', 'obj', XDP_PASS_OBJECT, 'sec', 'xdp']);
    }
    progress('gobgpd: route reflector in rr, sidecars in gw1, gw2, pe (graceful restart on)');
    for (const node of ['rr', 'gw1', 'gw2', 'pe'] as const) await startSidecar(t, p, node);
    for (const node of ['gw1', 'gw2', 'pe'] as const) {
      const mgmt = node === 'pe' ? t.pe.mgmt : t.gw[node].mgmt;
      const deadline = Date.now() + 60_000;
      while ((await neighborState(t.api, mgmt, t.ns.rr)) !== 'established') {
        if (Date.now() > deadline) throw new Error(`BGP session rr - ${node} (${mgmt}) not established within 60 s; see ${join(p.dir, 'rr-gobgpd.log')}`);
        await sleep(250);
      }
    }
    progress('pe advertises its End.DX4 SIDs (DSD, segment ids 10:1 -> MEC-A, 10:2 -> MEC-B)');
    for (const [i, site] of (['meca', 'mecb'] as const).entries()) {
      const s = t.pe.sids[site];
      await gobgp(t.api, ['global', 'rib', 'add', '-a', 'mup-ipv4', 'dsd', t.pe.mgmt, 'rd', `${t.pe.mgmt}:${i + 1}`, 'prefix', `${s.sid}/48`, 'locator-node-length', '16', 'function-length', '16', 'behavior', 'END_DX4', 'rt', t.rt, 'mup', s.segmentId, 'nexthop', t.gw.gw1.peV6], { netns: t.ns.pe });
    }
    progress(`controller: ${t.ues.length} PDU sessions (T1ST + T2ST each) at the route reflector's API`);
    for (const u of t.ues) await addSession(t.api, labSession(t, u), { netns: t.ns.rr });
    const want = 2 * t.ues.length + 2;
    for (const gw of TRANSLATORS) {
      const deadline = Date.now() + 30_000;
      while ((await mupRoutes(t.api, { netns: t.ns[gw] })) < want) {
        if (Date.now() > deadline) throw new Error(`${gw}'s gobgpd does not hold the ${want} MUP routes within 30 s`);
        await sleep(250);
      }
    }
    progress('translators: mup daemon in gw1 and gw2 (bgp: role gw), learning their policies from their sidecars');
    for (const gw of TRANSLATORS) writeFileSync(p.daemon[gw].config, translatorConfig(t, gw));
    await Promise.all(TRANSLATORS.map((gw) => startDaemon(t.ns[gw], p.daemon[gw])));
    await waitLearned(t, p);
    progress('first packets (neighbours resolved)');
    await warmUp(t);
  } catch (e) {
    await bgpLabDown(prefix).catch(() => undefined);
    throw new Error(`lab up --bgp failed (everything it made is removed again): ${(e as Error).message}`);
  }
  return { topology: t, paths: p };
}

/** Resolve neighbours on every path: a short stream from every UE until each site's receiver sees all UEs. */
async function warmUp(t: BgpLabTopology): Promise<void> {
  for (const gw of TRANSLATORS) {
    await nsRun(t.ns[gw], 'ping', ['-c', '2', '-i', '0.2', '-W', '1', t.gw[gw].peV6], { allowFail: true, timeout: 10_000 });
    await nsRun(t.ns[gw], 'ping', ['-c', '2', '-i', '0.2', '-W', '1', t.gnb.links[gw].own], { allowFail: true, timeout: 10_000 });
  }
  await stream(t, { rate: 200, seconds: 0.5 });
}

export interface StreamResult {
  readonly sent: readonly number[];
  /** Per UE: datagrams received (unique), lost, reordered (arrived after a later one of the same UE), and at which site. */
  readonly perUe: readonly {
    readonly ue: number;
    readonly sent: number;
    readonly got: number;
    readonly lost: number;
    readonly reordered: number;
    readonly sites: Readonly<Record<string, number>>;
    readonly lastSeq: number;
    readonly gapMs: number;
    /** Downlink: echoes that came back to the gNB (GTP-U, the UE's downlink TEID), and echoed ones that did not. */
    readonly dlGot: number;
    readonly dlLost: number;
    readonly dlReordered: number;
    /** Highest sequence number whose echo came back to the gNB (-1: none). */
    readonly dlLastSeq: number;
  }[];
  /** Every datagram that reached a site (uplink) and every echo back at the gNB (downlink): UE, sequence, and the sender's send time (CLOCK_MONOTONIC ns, the clock of `process.hrtime.bigint()`). */
  readonly ul: readonly { readonly ue: number; readonly seq: number; readonly sentNs: bigint }[];
  readonly dl: readonly { readonly ue: number; readonly seq: number; readonly sentNs: bigint }[];
  readonly lost: number;
  readonly reordered: number;
  readonly dlLost: number;
  readonly dlReordered: number;
  /** G-PDUs at the gNB that were not ours or carried another TEID than the UE's. */
  readonly dlMalformed: number;
}

/**
 * Run the per-UE GTP-U stream from gnb to the MEC anycast; `during` runs while it flows.
 * With `tailMs`, `seconds` is only the longest it runs: the sender stops `tailMs` after
 * `during` is done (a scenario that takes its time on a loaded host still ends under traffic).
 */
export async function stream(t: BgpLabTopology, o: { rate: number; seconds: number; during?: () => Promise<void>; tailMs?: number }): Promise<StreamResult> {
  const { execa } = await import('execa');
  const recv = (['meca', 'mecb'] as const).map((site) =>
    execa('ip', ['netns', 'exec', t.ns[site], 'python3', BGP_STREAM_PY, 'recv', '--dport', String(t.mec.port), '--site', site, '--echo', String(t.mec.port + 1)], { reject: false, buffer: true }),
  );
  const gtp = execa('ip', ['netns', 'exec', t.ns.gnb, 'python3', BGP_STREAM_PY, 'gtprecv', '--src', t.gnb.addr], { reject: false, buffer: true });
  const all = [...recv, gtp];
  // Wait for both receivers' "ready".
  await Promise.all(
    all.map(
      (r) =>
        new Promise<void>((res, rej) => {
          const to = setTimeout(() => rej(new Error('stream receiver not ready within 60 s')), 60_000);
          r.once('exit', (code) => {
            clearTimeout(to);
            rej(new Error(`stream receiver (${BGP_STREAM_PY}) exited with ${code} before it was ready`));
          });
          r.stdout!.on('data', (d: Buffer) => {
            if (d.toString().includes('ready')) {
              clearTimeout(to);
              res();
            }
          });
        }),
    ),
  );
  const ues = JSON.stringify(t.ues.map((u) => [u.addr, u.ulTeid, u.qfi]));
  const send = execa('ip', ['netns', 'exec', t.ns.gnb, 'python3', BGP_STREAM_PY, 'send', '--src', t.gnb.addr, '--n3', t.gnb.n3, '--ues', ues, '--dst', t.mec.anycast, '--dport', String(t.mec.port), '--rate', String(o.rate), '--seconds', String(o.seconds)], {
    reject: false,
    timeout: (o.seconds + 30) * 1000,
  });
  try {
    if (o.during !== undefined) await o.during();
    if (o.tailMs !== undefined) await sleep(o.tailMs);
  } finally {
    // Also when `during` failed: the sender stops now, not after `seconds`.
    if (o.tailMs !== undefined) send.kill('SIGUSR1');
    await send;
    await sleep(300);
    for (const r of recv) r.kill('SIGTERM');
    await Promise.all(recv);
    await sleep(300);
    gtp.kill('SIGTERM');
  }
  const s = await send;
  if (s.exitCode !== 0) throw new Error(`stream sender failed: ${String(s.stderr).trim()}`);
  const sent = (JSON.parse(String(s.stdout).trim().split('\n').pop()!) as { sent: number[] }).sent;
  const got: { ue: number; seq: number; ns: number; site: string; sentNs: bigint }[] = [];
  for (const r of recv) {
    const out = await r;
    const line = String(out.stdout).trim().split('\n').pop() ?? '';
    const j = JSON.parse(line) as { site: string; got: [number, number, number, number][] };
    for (const [ue, seq, ns, sent] of j.got) got.push({ ue, seq, ns, site: j.site, sentNs: BigInt(sent) });
  }
  got.sort((a, b) => a.ns - b.ns);
  const g = await gtp;
  const dl = JSON.parse(String(g.stdout).trim().split('\n').pop() ?? '{}') as { got?: [number, number, number, number, number][]; malformed?: number };
  const back = (dl.got ?? []).sort((a, b) => a[2] - b[2]);
  const perUe = t.ues.map((u, i) => {
    const mine = got.filter((g) => g.ue === i);
    const seen = new Set<number>();
    let max = -1;
    let reordered = 0;
    let gap = 0;
    let prevNs = -1;
    const sites: Record<string, number> = {};
    for (const g of mine) {
      seen.add(g.seq);
      if (g.seq < max) reordered++;
      max = Math.max(max, g.seq);
      sites[g.site] = (sites[g.site] ?? 0) + 1;
      if (prevNs >= 0) gap = Math.max(gap, (g.ns - prevNs) / 1e6);
      prevNs = g.ns;
    }
    const n = sent[i] ?? 0;
    // Downlink: what the sites echoed that came back to the gNB as GTP-U with the UE's downlink TEID.
    const mineBack = back.filter((b) => b[0] === i && b[3] === u.dlTeid);
    const backSeen = new Set(mineBack.map((b) => b[1]));
    let dlMax = -1;
    let dlReordered = 0;
    for (const b of mineBack) {
      if (b[1] < dlMax) dlReordered++;
      dlMax = Math.max(dlMax, b[1]);
    }
    return { ue: u.index, sent: n, got: seen.size, lost: n - seen.size, reordered, sites, lastSeq: max, gapMs: gap, dlGot: backSeen.size, dlLost: seen.size - backSeen.size, dlReordered, dlLastSeq: dlMax };
  });
  return {
    sent,
    perUe,
    lost: perUe.reduce((a, x) => a + x.lost, 0),
    reordered: perUe.reduce((a, x) => a + x.reordered, 0),
    dlLost: perUe.reduce((a, x) => a + x.dlLost, 0),
    dlReordered: perUe.reduce((a, x) => a + x.dlReordered, 0),
    dlMalformed: (dl.malformed ?? 0) + back.filter((b) => b[3] !== t.ues[b[0]]?.dlTeid).length,
    ul: got.map((x) => ({ ue: x.ue, seq: x.seq, sentNs: x.sentNs })),
    dl: back.filter((b) => b[3] === t.ues[b[0]]?.dlTeid).map((b) => ({ ue: b[0], seq: b[1], sentNs: BigInt(b[4]) })),
  };
}

/** H.M.GTP4.D (uplink) packets each translator has translated (its counters); `fn` end_m_gtp4_e for the downlink. */
export async function translatorPackets(p: BgpLabPaths, fn: 'h_m_gtp4_d' | 'end_m_gtp4_e' = 'h_m_gtp4_d'): Promise<Record<Translator, number>> {
  const { request } = await import('node:http');
  const one = (socketPath: string): Promise<number> =>
    new Promise((res) => {
      const req = request({ socketPath, path: '/v1/counters', timeout: 10_000 }, (r) => {
        let b = '';
        r.on('data', (c: Buffer) => (b += c.toString()));
        r.on('end', () => {
          try {
            res((JSON.parse(b) as { functions?: Record<string, { packets?: number } | undefined> }).functions?.[fn]?.packets ?? NaN);
          } catch {
            res(NaN);
          }
        });
      });
      req.on('error', () => res(NaN));
      req.on('timeout', () => req.destroy());
      req.end();
    });
  return { gw1: await one(p.daemon.gw1.socket), gw2: await one(p.daemon.gw2.socket) };
}
