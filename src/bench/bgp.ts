/**
 * `npm run bench:bgp`: the BGP MUP control plane's figures (issue 14,
 * Performance), with PASS/FAIL lines. Everything on loopback: a route
 * reflector gobgpd, a translator's sidecar gobgpd (a route-reflector client
 * with graceful restart), and our BGP injector as the controller.
 *
 * 1. Bulk origination method: routes/s through the gobgp CLI (one process
 *    per route, sequential and 8 in parallel) against the injector (many
 *    NLRIs per UPDATE). GoBGP 3.10's `mrt inject` takes only IPv4/IPv6
 *    unicast RIB records, so it is no option for the MUP SAFI.
 * 2. Bulk: 10,000 T2ST + 10,000 T1ST in the RR, then the translator's
 *    gobgpd starts: time from its session being established to its table
 *    holding all of them (the BGP leg of "data plane complete < 3 s").
 * 3. 1,000 single T2ST changes (the MUP extended community flips between two
 *    segment ids): injector -> RR -> translator gobgpd, seen on
 *    `gobgp monitor global rib -j` at the translator: p50 / p99.
 * 4. gobgpd RSS with the 20,000 routes.
 * 5. The daemon legs: a `mup daemon` (roles gw + pe, its sidecar the
 *    translator's gobgpd, its pins on a bpffs mounted in the bench's
 *    temporary directory) learns the 10,000 T2ST + 10,000 T1ST (resolved to
 *    two DSDs and one ISD the RR originates):
 *    (a) data plane complete (every policy and session installed, as
 *        /v1/bgp counts them) after the translator's session comes up: the
 *        RR holds the session down (`gobgp neighbor <gw> disable`) until the
 *        daemon is up and reading its sidecar, then enables it;
 *    (b) the 1,000 single T2ST changes of 3. paced one at a time (the next
 *        once the daemon has applied the last): each change's route -> map
 *        write latency is the growth of the daemon's
 *        mup_bgp_route_latency_seconds_sum (monitor line read -> table
 *        write), p50 / p99; plus injector -> map write end to end;
 *    (c) the daemon's RSS with the 20,000 learned routes, next to gobgpd's;
 *    (d) the daemon's own event-loop delay over 31 s (one 30-s
 *        re-advertisement in it) with the routes learned;
 *    (e) the daemon restarted: its sidecar's table (about 14 MB) is beyond
 *        --current's 4 MiB gRPC message and is read with `gobgp global rib
 *        -j`; time to synced, and the learned entries its sweep took out of
 *        the data plane (none may be);
 *    (f) the sidecar gobgpd restarted (SIGKILL, started again): its table is
 *        empty until its session to the reflector is back; the daemon's
 *        installed learned rules, polled, may never drop.
 *
 * Options: --sessions N (10000), --changes N (1000), --cli N (40),
 * --out FILE (JSON report, default build/bench/bgp.json).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, copyFileSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { fileURLToPath } from 'node:url';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { BgpInjector, checkSession, mupRoutes, neighborState, reflectorToml, sessionArgs, speakerToml, type CheckedSession } from '../bgp/controller.js';
import { gobgp, startGobgpd, type GobgpApi, type GobgpdProcess } from '../bgp/gobgpd.js';
import { freeTcpPort } from '../host/net.js';
import { DAEMON_NODE_FLAGS } from '../host/node-flags.js';
import { makeDirs } from '../host/mkdirs.js';

function arg(name: string, def: number): number {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return def;
  const n = Number(process.argv[i + 1]);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} ${process.argv[i + 1]}: a positive integer`);
  return n;
}

function strArg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? def : (process.argv[i + 1] ?? def);
}

const freePort = freeTcpPort;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function rssKb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m === null ? NaN : Number(m[1]);
}

function pct(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

const MUP_BIN = fileURLToPath(new URL('../../bin/mup.js', import.meta.url));

/** One GET on the daemon's socket: status and body text (status 0: no answer). */
function daemonGet(socketPath: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((res) => {
    const req = request({ socketPath, path, timeout: 20_000 }, (r) => {
      let b = '';
      r.on('data', (c: Buffer) => (b += c.toString()));
      r.on('end', () => res({ status: r.statusCode ?? 0, body: b }));
    });
    req.on('error', () => res({ status: 0, body: '' }));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

/** The daemon's route -> map write histogram: sum (seconds) and count. */
async function latencySum(socketPath: string): Promise<{ sum: number; count: number }> {
  const r = await daemonGet(socketPath, '/metrics');
  const sum = /^mup_bgp_route_latency_seconds_sum(?:\{[^}]*\})? (\S+)$/m.exec(r.body);
  const count = /^mup_bgp_route_latency_seconds_count(?:\{[^}]*\})? (\S+)$/m.exec(r.body);
  if (sum === null || count === null) throw new Error(`GET /metrics: no mup_bgp_route_latency_seconds (status ${r.status})`);
  return { sum: Number(sum[1]), count: Number(count[1]) };
}

/** The daemon's own event-loop delay since its last /metrics scrape (GET /v1/status), seconds. */
async function loopSinceScrape(socketPath: string): Promise<{ max: number; p99: number }> {
  const r = await daemonGet(socketPath, '/v1/status');
  const l = (JSON.parse(r.body) as { eventLoop?: { sinceLastScrape?: { max?: number; p99?: number } } }).eventLoop?.sinceLastScrape;
  if (r.status !== 200 || l?.max === undefined || l.p99 === undefined) throw new Error(`GET /v1/status: no eventLoop.sinceLastScrape (status ${r.status})`);
  return { max: l.max, p99: l.p99 };
}

/** Learned rules installed, by the daemon's /v1/bgp. */
async function installed(socketPath: string): Promise<{ t2st: number; t1st: number } | undefined> {
  const r = await daemonGet(socketPath, '/v1/bgp');
  if (r.status !== 200) return undefined;
  const j = JSON.parse(r.body) as { routes?: Record<string, { installed?: number }> };
  return { t2st: j.routes?.['t2st']?.installed ?? 0, t1st: j.routes?.['t1st']?.installed ?? 0 };
}

const load = (): string => loadavg().map((x) => x.toFixed(2)).join(' ');

async function waitFor<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>, everyMs = 20): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(everyMs);
  }
}

/** CPU ms (utime + stime) of a process so far. */
function cpuMs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

/** The daemon's /v1/bgp "work" block (src/daemon/bgp.ts BgpWork). */
interface DaemonWork {
  reads: number;
  bytes: number;
  lines: number;
  routes: number;
  decodeMs: number;
  learnMs?: number;
  monitorCpuMs: number | null;
  applies: number;
  appliesAll: number;
  resolveMs: number;
  writeMs: number;
  firstRouteAt: string | null;
  lastLineAt: string | null;
  firstApplyAt?: string | null;
  lastApplyAt: string | null;
}

async function daemonWork(socketPath: string): Promise<DaemonWork> {
  const r = await daemonGet(socketPath, '/v1/bgp');
  const w = (JSON.parse(r.body) as { work?: DaemonWork }).work;
  if (r.status !== 200 || w === undefined) throw new Error(`GET /v1/bgp: no work block (status ${r.status})`);
  return w;
}

export interface BgpBenchReport {
  readonly host: { cpus: number; loadStart: string; loadEnd: string };
  readonly cli: { sequentialPerS: number; parallel8PerS: number; routes: number };
  readonly injector: { routes: number; seconds: number; perS: number };
  readonly bulk: { routes: number; establishedToCompleteS: number; startToEstablishedS: number };
  readonly changes: { n: number; p50Ms: number; p99Ms: number; maxMs: number };
  readonly rssKb: { rr: number; translatorGobgpd: number; daemon: number | null };
  /** (d)-(f): the loop over a re-advertisement, a daemon restart, a sidecar restart. */
  readonly restarts: { loopMaxMs: number; sweepLoopMaxMs: number; sweepMs: number; daemonSyncedS: number; daemonSwept: number; daemonInstalledAfter: number; tableReadWithRib: boolean; sidecarReadAgainS: number; sidecarLeastInstalled: number; keptForPeersMax: number };
  readonly daemon: {
    readonly startToReadyS: number;
    readonly establishedToCompleteS: number;
    readonly polledS: number;
    readonly cpuMs: number;
    readonly work: DaemonWork;
    readonly changes: { n: number; p50Ms: number; p99Ms: number; maxMs: number; e2eP50Ms: number; e2eP99Ms: number };
  };
  readonly lines: readonly string[];
  readonly pass: boolean;
}

async function main(): Promise<number> {
  const nSessions = arg('sessions', 10_000);
  const nChanges = arg('changes', 1000);
  const nCli = arg('cli', 40);
  const outFile = strArg('out', 'build/bench/bgp.json');
  const loadStart = load();
  const dir = mkdtempSync(join(tmpdir(), 'mup-bench-bgp-'));
  const procs: GobgpdProcess[] = [];
  let injector: BgpInjector | undefined;
  let monitor: ReturnType<typeof spawn> | undefined;
  let daemon: ChildProcess | undefined;
  const bpffs = join(dir, 'bpffs');
  let mounted = false;
  const cleanupSync = (): void => {
    monitor?.kill('SIGKILL');
    daemon?.kill('SIGKILL');
    for (const p of procs) p.child.kill('SIGKILL');
    if (mounted) spawnSync('umount', ['-l', bpffs]);
    rmSync(dir, { recursive: true, force: true });
  };
  const onSignal = (): void => {
    cleanupSync();
    process.exit(130);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const say = (s: string): void => void process.stderr.write(`[bench:bgp] ${s}\n`);
  try {
    const net = `127.0.${100 + (process.pid % 100)}`;
    const RR = `${net}.1`;
    const GW = `${net}.2`;
    const INJ = `${net}.9`;
    const port = await freePort();
    const rrApi: GobgpApi = { host: '127.0.0.1', port: await freePort() };
    const gwApi: GobgpApi = { host: '127.0.0.1', port: await freePort() };
    writeFileSync(join(dir, 'rr.toml'), reflectorToml({ listen: RR, port, injector: INJ, sidecar: GW }));
    writeFileSync(join(dir, 'gw.toml'), speakerToml({ asn: 65000, routerId: '10.255.0.2', listen: GW, port, neighbors: [{ address: RR, localAddress: GW, gracefulRestart: 120 }] }));
    say(`load ${loadStart}; route reflector ${RR}:${port} (API ${rrApi.port}), translator gobgpd ${GW} (API ${gwApi.port})`);
    const rr = await startGobgpd({ configFile: join(dir, 'rr.toml'), api: rrApi, logFile: join(dir, 'rr.log') });
    procs.push(rr);

    // 1. The gobgp CLI: one process per route.
    const cliSess = Array.from({ length: nCli * 3 }, (_, i) =>
      checkSession({ ue: `10.47.${i >> 8}.${i & 0xff}/32`, teid: 0x300000 + i, qfi: 9, endpoint: '198.51.100.1', n3: '192.0.2.30', segmentId: '10:1' }, { rd: '10.255.0.1:3', rt: '65000:100' }),
    );
    let t = performance.now();
    for (const s of cliSess.slice(0, nCli)) await gobgp(rrApi, sessionArgs('add', s, '10.255.0.1').t2st);
    const seqPerS = nCli / ((performance.now() - t) / 1000);
    const par = cliSess.slice(nCli, nCli * 3);
    t = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < par.length) {
          const s = par[next++]!;
          await gobgp(rrApi, sessionArgs('add', s, '10.255.0.1').t2st);
        }
      }),
    );
    const parPerS = par.length / ((performance.now() - t) / 1000);
    for (const s of cliSess) await gobgp(rrApi, sessionArgs('del', s, '10.255.0.1').t2st).catch(() => undefined);
    say(`gobgp CLI: ${seqPerS.toFixed(1)} routes/s sequential, ${parPerS.toFixed(1)} routes/s with 8 in parallel (load ${load()})`);

    // 2. The injector: nSessions T2ST + nSessions T1ST in the RR.
    injector = await BgpInjector.connect({ host: RR, port, localAddress: INJ, asn: 65000, routerId: '10.255.0.9' });
    const ss: CheckedSession[] = Array.from({ length: nSessions }, (_, i) =>
      checkSession(
        { ue: `10.${64 + (i >> 16)}.${(i >> 8) & 0xff}.${i & 0xff}/32`, teid: 0x10000 + i, dlTeid: 0x20000 + i, qfi: 1 + (i % 63), endpoint: `198.51.100.${1 + (i % 126)}`, n3: '192.0.2.10', segmentId: '10:1' },
        { rd: '10.255.0.9:1', rt: '65000:100' },
      ),
    );
    const total = 2 * nSessions;
    // What the daemon resolves them with: a DSD per segment id (10:1, 10:2) and an End.M.GTP4.E ISD over the gNBs (a /25: 3.10 drops shorter ones).
    const discovery = [
      ['dsd', '10.255.0.91', 'rd', '10.255.0.1:91', 'prefix', '2001:db8:d9:1::/64', 'locator-node-length', '16', 'function-length', '16', 'behavior', 'END_DT4', 'rt', '65000:100', 'mup', '10:1', 'nexthop', '2001:db8:ff::9'],
      ['dsd', '10.255.0.92', 'rd', '10.255.0.1:92', 'prefix', '2001:db8:d9:2::/64', 'locator-node-length', '16', 'function-length', '16', 'behavior', 'END_DT4', 'rt', '65000:100', 'mup', '10:2', 'nexthop', '2001:db8:ff::9'],
      ['isd', '198.51.100.0/25', 'rd', '10.255.0.1:93', 'prefix', '2001:db8:a2::/40', 'locator-node-length', '8', 'function-length', '8', 'behavior', 'ENDM_GTP4E', 'rt', '65000:100', 'nexthop', '2001:db8:ff::1'],
    ];
    for (const d of discovery) await gobgp(rrApi, ['global', 'rib', 'add', '-a', 'mup-ipv4', ...d]);
    t = performance.now();
    await injector.sessions('t2st', ss, { nexthop: '10.255.0.9' });
    await injector.sessions('t1st', ss, { nexthop: '10.255.0.9' });
    await waitFor(`${total} routes in the route reflector`, 120_000, async () => ((await mupRoutes(rrApi)) >= total + discovery.length ? true : undefined));
    const injS = (performance.now() - t) / 1000;
    say(`injector: ${total} routes in the RR's table in ${injS.toFixed(2)} s (${(total / injS).toFixed(0)} routes/s, load ${load()})`);

    // 3. The translator's gobgpd starts with the RR full.
    const tStart = performance.now();
    const gw = await startGobgpd({ configFile: join(dir, 'gw.toml'), api: gwApi, logFile: join(dir, 'gw.log') });
    procs.push(gw);
    await waitFor('translator session established', 60_000, async () => ((await neighborState(gwApi, RR)) === 'established' ? true : undefined));
    const tEst = performance.now();
    await waitFor(`${total} routes at the translator`, 120_000, async () => ((await mupRoutes(gwApi)) >= total + discovery.length ? true : undefined));
    const tFull = performance.now();
    const estToFull = (tFull - tEst) / 1000;
    say(`translator gobgpd: established ${((tEst - tStart) / 1000).toFixed(2)} s after start, all ${total} routes ${estToFull.toFixed(2)} s later (load ${load()})`);
    const rss = { rr: rssKb(rr.pid), gw: rssKb(gw.pid) };

    // 4. Single T2ST changes, seen at the translator's gobgpd.
    monitor = spawn('gobgp', ['-u', gwApi.host, '-p', String(gwApi.port), 'monitor', 'global', 'rib', '-j'], { stdio: ['ignore', 'pipe', 'ignore'] });
    const waiting = new Map<string, (t: number) => void>();
    createInterface({ input: monitor.stdout! }).on('line', (line) => {
      const now = performance.now();
      if (line.length < 3) return;
      let paths: { nlri?: { route_type?: number; value?: { endpoint_address?: string; teid?: number } }; attrs?: { type: number; value?: { segmend_id?: string }[] }[]; withdrawal?: boolean }[];
      try {
        paths = JSON.parse(line) as typeof paths;
      } catch {
        return;
      }
      for (const p of paths) {
        if (p.nlri?.route_type !== 4 || p.withdrawal === true) continue;
        const seg = p.attrs?.find((a) => a.type === 16)?.value?.find((e) => e.segmend_id !== undefined)?.segmend_id;
        const k = `${p.nlri.value?.endpoint_address}|${p.nlri.value?.teid}|${seg}`;
        waiting.get(k)?.(now);
      }
    });
    await sleep(500); // the monitor is up
    const lat: number[] = [];
    const segOf = new Map<number, string>();
    for (let i = 0; i < nChanges; i++) {
      const s = ss[i % Math.min(ss.length, 100)]!;
      const seg = (segOf.get(s.teid) ?? s.segmentId) === '10:1' ? '10:2' : '10:1';
      segOf.set(s.teid, seg);
      const changed: CheckedSession = { ...s, segmentId: seg };
      const key = `${s.n3}|${s.teid}|${seg}`;
      const seen = new Promise<number>((res, rej) => {
        const to = setTimeout(() => rej(new Error(`T2ST change ${i} (${key}) not seen at the translator within 10 s`)), 10_000);
        waiting.set(key, (tt) => {
          clearTimeout(to);
          waiting.delete(key);
          res(tt);
        });
      });
      const t0 = performance.now();
      await injector.sessions('t2st', [changed], { nexthop: '10.255.0.9' });
      lat.push((await seen) - t0);
    }
    lat.sort((a, b) => a - b);
    const p50 = pct(lat, 50);
    const p99 = pct(lat, 99);
    say(`${nChanges} single T2ST changes, injector -> RR -> translator gobgpd: p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms, max ${lat[lat.length - 1]!.toFixed(1)} ms (load ${load()})`);

    // 5. The daemon legs. The translator's gobgpd starts again with an empty table, the RR holding its session down.
    monitor.kill('SIGKILL');
    monitor = undefined;
    await gw.stop();
    procs.splice(procs.indexOf(gw), 1);
    await gobgp(rrApi, ['neighbor', GW, 'disable']);
    const gw2 = await startGobgpd({ configFile: join(dir, 'gw.toml'), api: gwApi, logFile: join(dir, 'gw.log') });
    procs.push(gw2);
    makeDirs(bpffs);
    const m = spawnSync('mount', ['-t', 'bpf', 'bpf', bpffs], { encoding: 'utf8' });
    if (m.status !== 0) throw new Error(`mount -t bpf bpf ${bpffs}: ${m.stderr.trim()} (run as root)`);
    mounted = true;
    const socket = join(dir, 'daemon.sock');
    const cap = nSessions + 1024;
    writeFileSync(
      join(dir, 'daemon.yaml'),
      [
        `settings: {forwarding: tx, max_policies: ${cap}, max_sessions: ${cap}}`,
        'bgp:',
        '  asn: 65000',
        '  router_id: 10.255.0.2',
        `  listen: ${GW}:${port}`,
        `  api: ${gwApi.host}:${gwApi.port}`,
        `  neighbors: [{address: ${RR}, port: ${port}}]`,
        '  rd: "10.255.0.2:1"',
        '  rt: "65000:100"',
        '  roles: [gw, pe]',
        '  policy_defaults: {src_prefix: 2001:db8:ff:2::/64}',
        '  session_defaults: {src_prefix: 2001:db8:ff:9::/64, source: 192.0.2.10}',
        '',
      ].join('\n'),
    );
    const startDaemon = (): ChildProcess => {
      const logFd = openSync(join(dir, 'daemon.log'), 'a');
      const child = spawn(
        process.execPath,
        [...DAEMON_NODE_FLAGS, MUP_BIN, 'daemon', '--config', join(dir, 'daemon.yaml'), '--instance', `bench-bgp-${process.pid}`, '--socket', socket, '--state-file', join(dir, 'daemon.state.json'), '--bpffs', bpffs, '--log-format', 'json'],
        { stdio: ['ignore', logFd, logFd] },
      );
      closeSync(logFd);
      return child;
    };
    const tDaemon = performance.now();
    daemon = startDaemon();
    const daemonLog = (): string => readFileSync(join(dir, 'daemon.log'), 'utf8').split('\n').slice(-5).join('\n');
    await waitFor('the daemon reading its sidecar (/v1/bgp monitor up)', 60_000, async () => {
      if (daemon?.exitCode !== null) throw new Error(`mup daemon exited (${daemon?.exitCode}): ${daemonLog()}`);
      const r = await daemonGet(socket, '/v1/bgp');
      return r.status === 200 && (JSON.parse(r.body) as { monitor?: { up?: boolean } }).monitor?.up === true ? true : undefined;
    });
    const daemonReadyS = (performance.now() - tDaemon) / 1000;
    await gobgp(rrApi, ['neighbor', GW, 'enable']);
    await waitFor('translator session established again', 60_000, async () => ((await neighborState(gwApi, RR)) === 'established' ? true : undefined));
    const dEst = performance.now();
    const dEstWall = Date.now();
    const cpu0 = cpuMs(daemon.pid!);
    // Polled every 200 ms (each GET /v1/bgp runs `gobgp neighbor` in the daemon: polling it every 20 ms, as
    // session 9's first runs did, loads the host it measures); the end is the daemon's own time of its last apply.
    await waitFor(
      `${nSessions} policies + ${nSessions} sessions installed by the daemon`,
      300_000,
      async () => {
        const n = await installed(socket);
        return n !== undefined && n.t2st >= nSessions && n.t1st >= nSessions ? true : undefined;
      },
      200,
    );
    const dPolled = (performance.now() - dEst) / 1000;
    const cpuDaemon = cpuMs(daemon.pid!) - cpu0;
    const work = await daemonWork(socket);
    const wall = (iso: string | null): number => (iso === null ? NaN : Date.parse(iso));
    const dEstToFull = (wall(work.lastApplyAt) - dEstWall) / 1000;
    const breakdown =
      `session up (polled, +-20 ms) -> first learned route line read ${((wall(work.firstRouteAt) - dEstWall) / 1000).toFixed(2)} s; ` +
      `first -> last line ${((wall(work.lastLineAt) - wall(work.firstRouteAt)) / 1000).toFixed(2)} s (${work.lines} lines, ${work.routes} routes, ${(work.bytes / 1e6).toFixed(1)} MB in ${work.reads} reads); ` +
      `first apply (the first rules: before it the ST routes wait for their DSD/ISD, or the main thread is busy) ${((wall(work.firstApplyAt ?? null) - dEstWall) / 1000).toFixed(2)} s after session up; ` +
      `last line -> last apply ${((wall(work.lastApplyAt) - wall(work.lastLineAt)) / 1000).toFixed(2)} s; ` +
      `daemon CPU ${(cpuDaemon / 1000).toFixed(2)} s of which decode ${(work.decodeMs / 1000).toFixed(2)} s (reader thread), learner table ${((work.learnMs ?? NaN) / 1000).toFixed(2)} s, resolve ${(work.resolveMs / 1000).toFixed(2)} s, ` +
      `applyLearned ${(work.writeMs / 1000).toFixed(2)} s in ${work.applies} applies (${work.appliesAll} with the empty ones); gobgp monitor CLI CPU ${work.monitorCpuMs === null ? '?' : (work.monitorCpuMs / 1000).toFixed(2)} s`;
    say(`daemon bulk breakdown: ${breakdown} (load ${load()})`);
    say(`daemon: up and reading its sidecar ${daemonReadyS.toFixed(2)} s after start; session up -> ${nSessions} policies + ${nSessions} sessions installed in ${dEstToFull.toFixed(2)} s (by the daemon's last apply; ${dPolled.toFixed(2)} s as polled) (load ${load()})`);
    const rssDaemon = rssKb(daemon.pid!);
    const rssGw2 = rssKb(gw2.pid);

    // (b) single T2ST changes, one at a time: each one's latency is the growth of the histogram's sum.
    const dLat: number[] = [];
    const e2e: number[] = [];
    const segNow = new Map<number, string>([...segOf]);
    for (let i = 0; i < nChanges; i++) {
      const s = ss[i % Math.min(ss.length, 100)]!;
      const seg = (segNow.get(s.teid) ?? s.segmentId) === '10:1' ? '10:2' : '10:1';
      segNow.set(s.teid, seg);
      const before = await latencySum(socket);
      const t0 = performance.now();
      await injector.sessions('t2st', [{ ...s, segmentId: seg }], { nexthop: '10.255.0.9' });
      const after = await waitFor(`T2ST change ${i} applied by the daemon`, 30_000, async () => {
        const x = await latencySum(socket);
        return x.count > before.count ? x : undefined;
      });
      e2e.push(performance.now() - t0);
      if (after.count === before.count + 1) dLat.push((after.sum - before.sum) * 1000);
    }
    dLat.sort((a, b) => a - b);
    e2e.sort((a, b) => a - b);
    const dP50 = pct(dLat, 50);
    const dP99 = pct(dLat, 99);
    say(`${dLat.length} of ${nChanges} single T2ST changes (one per histogram sample): route read -> map write p50 ${dP50.toFixed(2)} ms, p99 ${dP99.toFixed(2)} ms; injector -> map write (polled) p50 ${pct(e2e, 50).toFixed(1)} ms, p99 ${pct(e2e, 99).toFixed(1)} ms (load ${load()})`);

    // (d) The daemon's event loop over 31 s with the learned routes: one 30-s re-advertisement falls in it (before
    // session 35 it read the sidecar's whole table on the loop: 0.2 s with 7,000 routes, 0.8 s with 20,000).
    await daemonGet(socket, '/metrics'); // the daemon's "since the last scrape" window starts here
    await sleep(31_000);
    const loopReadv = await loopSinceScrape(socket);
    say(`event loop over 31 s with ${total} learned routes (one re-advertisement): max ${(loopReadv.max * 1000).toFixed(2)} ms, p99 ${(loopReadv.p99 * 1000).toFixed(2)} ms (load ${load()})`);

    // (e) The daemon restarts: its sidecar's table (${total} routes, about 14 MB) is too large for --current's one
    // gRPC message, so it is read with `gobgp global rib -j` beside the monitor. Watched: learned rules installed
    // (none may leave the data plane), time to the table read whole and the learner synced.
    const before = await installed(socket);
    const logAt = readFileSync(join(dir, 'daemon.log'), 'utf8').length;
    const gone = new Promise((r) => daemon!.once('exit', r));
    daemon.kill('SIGTERM');
    await gone;
    const tRestart = performance.now();
    daemon = startDaemon();
    // A restarted daemon's /v1/bgp counts start from nothing while its pinned tables keep forwarding; what would
    // take learned entries out of the data plane is the sweep of the entries not learned again (hold_down, 5 s,
    // after the sync): its log line says how many it deleted.
    await waitFor('the restarted daemon synced with its sidecar', 300_000, async () => {
      if (daemon?.exitCode !== null) throw new Error(`mup daemon exited (${daemon?.exitCode}): ${daemonLog()}`);
      const r = await daemonGet(socket, '/v1/bgp');
      if (r.status !== 200) return undefined;
      const j = JSON.parse(r.body) as { synced?: boolean; monitor?: { up?: boolean; keptForPeers?: number } };
      return j.synced === true && j.monitor?.up === true && j.monitor.keptForPeers === 0 ? true : undefined;
    }, 200);
    const restartS = (performance.now() - tRestart) / 1000;
    // The daemon's loop from here through the sweep (hold_down after the sync): one turn over every rule until
    // session 36 (247 ms at 20,000 learned rules), slices of about 4 ms since.
    await daemonGet(socket, '/metrics'); // the daemon's "since the last scrape" window starts here
    const sweepLine = /not learned again are gone|the sweep after the hold-down deleted none/;
    await waitFor('the restarted daemon\'s sweep (hold_down after the sync)', 120_000, async () => (sweepLine.test(readFileSync(join(dir, 'daemon.log'), 'utf8').slice(logAt)) ? true : undefined), 200);
    const loopSweep = await loopSinceScrape(socket);
    const afterRestart = await installed(socket);
    const restartLog = readFileSync(join(dir, 'daemon.log'), 'utf8').slice(logAt);
    const sweepMs = Number(new RegExp(`"ms":(\\d+)[^\\n]*(?:${sweepLine.source})`).exec(restartLog)?.[1] ?? NaN);
    const tooLarge = /too large for one message/.test(restartLog);
    const swept = [...restartLog.matchAll(/"deleted":(\d+)[^\n]*not learned again are gone/g)].reduce((n, m) => n + Number(m[1]), 0);
    const restartAfter = (afterRestart?.t2st ?? 0) + (afterRestart?.t1st ?? 0);
    say(`daemon restart: synced ${restartS.toFixed(2)} s after its start (table read with global rib: ${tooLarge}); T2ST+T1ST installed before ${(before?.t2st ?? 0) + (before?.t1st ?? 0)}, after ${restartAfter}; entries swept as not learned again: ${swept}; the sweep took ${sweepMs} ms, the daemon's loop from the sync through it max ${(loopSweep.max * 1000).toFixed(2)} ms, p99 ${(loopSweep.p99 * 1000).toFixed(2)} ms (load ${load()})`);

    // (f) The sidecar gobgpd restarts (SIGKILL, started again): its table is empty until its session to the route
    // reflector is back; the daemon keeps what it learned until the sidecar's peers have sent End-of-RIB.
    const gwOld = procs.find((p) => p.pid === gw2.pid)!;
    await gwOld.kill();
    procs.splice(procs.indexOf(gwOld), 1);
    const tSide = performance.now();
    const gw3 = await startGobgpd({ configFile: join(dir, 'gw.toml'), api: gwApi, logFile: join(dir, 'gw3.log') });
    procs.push(gw3);
    let sideMin = Infinity;
    let keptMax = 0;
    await waitFor('the sidecar full again and read by the daemon', 300_000, async () => {
      const r = await daemonGet(socket, '/v1/bgp');
      if (r.status !== 200) return undefined;
      const j = JSON.parse(r.body) as { monitor?: { up?: boolean; keptForPeers?: number }; routes?: Record<string, { installed?: number; received?: number }> };
      sideMin = Math.min(sideMin, (j.routes?.['t2st']?.installed ?? 0) + (j.routes?.['t1st']?.installed ?? 0));
      keptMax = Math.max(keptMax, j.monitor?.keptForPeers ?? 0);
      const received = (j.routes?.['t2st']?.received ?? 0) + (j.routes?.['t1st']?.received ?? 0);
      return j.monitor?.up === true && j.monitor.keptForPeers === 0 && received >= total ? true : undefined;
    }, 200);
    const sideS = (performance.now() - tSide) / 1000;
    say(`sidecar gobgpd restart: its table full and read again ${sideS.toFixed(2)} s after its start; learned routes kept while waiting for its peers, at most ${keptMax}; T2ST+T1ST installed, least seen ${sideMin} (load ${load()})`);

    const loadEnd = load();
    const lines: string[] = [];
    const pf = (ok: boolean, s: string): boolean => {
      lines.push(`${ok ? 'PASS' : 'FAIL'}  ${s}`);
      return ok;
    };
    const info = (s: string): void => void lines.push(`INFO  ${s}`);
    let pass = true;
    pass = pf(total / injS > parPerS, `bulk method: the BGP injector (${(total / injS).toFixed(0)} routes/s) beats the gobgp CLI (${seqPerS.toFixed(1)} routes/s sequential, ${parPerS.toFixed(1)} with 8 processes); 3.10's mrt inject refuses the MUP SAFI`) && pass;
    pass = pf(estToFull < 3, `bulk: ${nSessions} T2ST + ${nSessions} T1ST at the translator's gobgpd ${estToFull.toFixed(2)} s after its session is up (< 3 s; the BGP leg of "data plane complete")`) && pass;
    pass = pf(dEstToFull < 3, `bulk: the daemon's data plane complete (${nSessions} policies + ${nSessions} sessions installed) ${dEstToFull.toFixed(2)} s after its sidecar's session is up (< 3 s; daemon up ${daemonReadyS.toFixed(2)} s after its start)`) && pass;
    info(`daemon bulk breakdown: ${breakdown}`);
    info(`route -> translator gobgpd (injector -> RR -> translator's monitor), ${nChanges} single T2ST changes: p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms`);
    pass = pf(dLat.length >= nChanges * 0.9 && dP99 < 100, `route -> data plane, ${dLat.length} single T2ST changes (daemon's mup_bgp_route_latency_seconds, route read from its sidecar -> map write): p50 ${dP50.toFixed(2)} ms, p99 ${dP99.toFixed(2)} ms (< 100 ms)`) && pass;
    info(`injector -> RR -> sidecar -> daemon map write (polled on /metrics, so an upper bound): p50 ${pct(e2e, 50).toFixed(1)} ms, p99 ${pct(e2e, 99).toFixed(1)} ms`);
    pass = pf(loopReadv.max < 0.05, `event loop with ${total} learned routes over 31 s (one re-advertisement): max ${(loopReadv.max * 1000).toFixed(2)} ms, p99 ${(loopReadv.p99 * 1000).toFixed(2)} ms (max < 50 ms)`) && pass;
    pass = pf(tooLarge && swept === 0 && restartAfter >= total, `daemon restart against its sidecar's ${total} routes (beyond --current's 4 MiB: read with global rib ${tooLarge ? 'yes' : 'NO'}): synced in ${restartS.toFixed(2)} s, ${swept} learned entries swept from the data plane (0), ${restartAfter} installed after (${total})`) && pass;
    pass = pf(loopSweep.max < 0.05, `event loop of the restarted daemon from its sync through its sweep of the pinned tables' ${total} learned entries (${sweepMs} ms): max ${(loopSweep.max * 1000).toFixed(2)} ms, p99 ${(loopSweep.p99 * 1000).toFixed(2)} ms (max < 50 ms)`) && pass;
    pass = pf(sideMin >= total && keptMax > 0, `sidecar gobgpd restart: learned rules installed never below ${total} (least ${sideMin}; up to ${keptMax} kept while its peers' tables came back); full and read again in ${sideS.toFixed(2)} s`) && pass;
    info(`memory with ${total} learned routes: daemon RSS ${(rssDaemon / 1024).toFixed(1)} MiB, its sidecar gobgpd ${(rssGw2 / 1024).toFixed(1)} MiB (${(rss.gw / 1024).toFixed(1)} MiB before, without the daemon), route reflector gobgpd ${(rss.rr / 1024).toFixed(1)} MiB`);
    info(`host: ${cpus().length} CPUs, load average ${loadStart} at start, ${loadEnd} at the end: one sample on a loaded host is no final figure`);
    process.stdout.write(`${lines.join('\n')}\n`);
    const report: BgpBenchReport = {
      host: { cpus: cpus().length, loadStart, loadEnd },
      cli: { sequentialPerS: seqPerS, parallel8PerS: parPerS, routes: cliSess.length },
      injector: { routes: total, seconds: injS, perS: total / injS },
      bulk: { routes: total, establishedToCompleteS: estToFull, startToEstablishedS: (tEst - tStart) / 1000 },
      changes: { n: nChanges, p50Ms: p50, p99Ms: p99, maxMs: lat[lat.length - 1]! },
      rssKb: { rr: rss.rr, translatorGobgpd: rssGw2, daemon: rssDaemon },
      restarts: { loopMaxMs: loopReadv.max * 1000, sweepLoopMaxMs: loopSweep.max * 1000, sweepMs, daemonSyncedS: restartS, daemonSwept: swept, daemonInstalledAfter: restartAfter, tableReadWithRib: tooLarge, sidecarReadAgainS: sideS, sidecarLeastInstalled: sideMin, keptForPeersMax: keptMax },
      daemon: { startToReadyS: daemonReadyS, establishedToCompleteS: dEstToFull, polledS: dPolled, cpuMs: cpuDaemon, work, changes: { n: dLat.length, p50Ms: dP50, p99Ms: dP99, maxMs: dLat[dLat.length - 1] ?? NaN, e2eP50Ms: pct(e2e, 50), e2eP99Ms: pct(e2e, 99) } },
      lines,
      pass,
    };
    makeDirs(dirname(outFile));
    writeFileSync(outFile, `${JSON.stringify(report, null, 2)}\n`);
    return pass ? 0 : 1;
  } finally {
    monitor?.kill('SIGKILL');
    if (daemon !== undefined && daemon.exitCode === null) {
      const gone = new Promise((r) => daemon!.once('exit', r));
      daemon.kill('SIGTERM');
      const to = setTimeout(() => daemon?.kill('SIGKILL'), 10_000);
      await gone;
      clearTimeout(to);
    }
    await injector?.close().catch(() => undefined);
    for (const p of procs.reverse()) await p.kill();
    if (mounted) spawnSync('umount', [bpffs]);
    // The daemon's log stays for a look at where its time went ("learned rules applied" lines carry the apply's ms).
    try {
      copyFileSync(join(dir, 'daemon.log'), join(dirname(outFile), 'bgp-daemon.log'));
    } catch {
      // no daemon leg ran
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`bench:bgp: ${(e as Error).message}\n`);
    process.exit(2);
  },
);
