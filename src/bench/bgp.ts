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
 *
 * The legs inside the daemon (UPDATE at its gobgpd -> map write, and the
 * data plane complete after a start) need the daemon to learn BGP routes;
 * until it does they are printed as FAIL "not measured", never as PASS.
 *
 * Options: --sessions N (10000), --changes N (1000), --cli N (40),
 * --out FILE (JSON report, default build/bench/bgp.json).
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { BgpInjector, checkSession, mupRoutes, neighborState, sessionArgs, speakerToml, type CheckedSession } from '../bgp/controller.js';
import { gobgp, startGobgpd, type GobgpApi, type GobgpdProcess } from '../bgp/gobgpd.js';
import { freeTcpPort } from '../host/net.js';

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

const load = (): string => loadavg().map((x) => x.toFixed(2)).join(' ');

async function waitFor<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(20);
  }
}

export interface BgpBenchReport {
  readonly host: { cpus: number; loadStart: string; loadEnd: string };
  readonly cli: { sequentialPerS: number; parallel8PerS: number; routes: number };
  readonly injector: { routes: number; seconds: number; perS: number };
  readonly bulk: { routes: number; establishedToCompleteS: number; startToEstablishedS: number };
  readonly changes: { n: number; p50Ms: number; p99Ms: number; maxMs: number };
  readonly rssKb: { rr: number; translatorGobgpd: number; daemon: number | null };
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
  const onSignal = (): void => {
    monitor?.kill('SIGKILL');
    for (const p of procs) p.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
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
    writeFileSync(
      join(dir, 'rr.toml'),
      speakerToml({
        asn: 65000,
        routerId: '10.255.0.1',
        listen: RR,
        port,
        neighbors: [
          { address: INJ, localAddress: RR, rrClient: true, passive: true },
          { address: GW, localAddress: RR, rrClient: true, gracefulRestart: 120 },
        ],
      }),
    );
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
        { ue: `10.${64 + (i >> 16)}.${(i >> 8) & 0xff}.${i & 0xff}/32`, teid: 0x10000 + i, dlTeid: 0x20000 + i, qfi: 1 + (i % 63), endpoint: `198.51.${100 + ((i >> 8) & 3)}.${1 + (i & 0xff) % 254}`, n3: '192.0.2.10', segmentId: '10:1' },
        { rd: '10.255.0.9:1', rt: '65000:100' },
      ),
    );
    const total = 2 * nSessions;
    t = performance.now();
    await injector.sessions('t2st', ss, { nexthop: '10.255.0.9' });
    await injector.sessions('t1st', ss, { nexthop: '10.255.0.9' });
    await waitFor(`${total} routes in the route reflector`, 120_000, async () => ((await mupRoutes(rrApi)) >= total ? true : undefined));
    const injS = (performance.now() - t) / 1000;
    say(`injector: ${total} routes in the RR's table in ${injS.toFixed(2)} s (${(total / injS).toFixed(0)} routes/s, load ${load()})`);

    // 3. The translator's gobgpd starts with the RR full.
    const tStart = performance.now();
    const gw = await startGobgpd({ configFile: join(dir, 'gw.toml'), api: gwApi, logFile: join(dir, 'gw.log') });
    procs.push(gw);
    await waitFor('translator session established', 60_000, async () => ((await neighborState(gwApi, RR)) === 'established' ? true : undefined));
    const tEst = performance.now();
    await waitFor(`${total} routes at the translator`, 120_000, async () => ((await mupRoutes(gwApi)) >= total ? true : undefined));
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
    pass = pf(false, 'bulk: data plane complete < 3 s after session up: not measured (the daemon in this build does not learn BGP routes)') && pass;
    info(`route -> translator gobgpd (injector -> RR -> translator's monitor), ${nChanges} single T2ST changes: p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms`);
    pass = pf(false, 'route -> data plane p99 < 100 ms (UPDATE at the translator\'s gobgpd -> map write): not measured (needs the daemon learning BGP routes)') && pass;
    info(`memory with ${total} routes: translator gobgpd RSS ${(rss.gw / 1024).toFixed(1)} MiB, route reflector gobgpd ${(rss.rr / 1024).toFixed(1)} MiB, daemon: not measured`);
    info(`host: ${cpus().length} CPUs, load average ${loadStart} at start, ${loadEnd} at the end: one sample on a loaded host is no final figure`);
    process.stdout.write(`${lines.join('\n')}\n`);
    const report: BgpBenchReport = {
      host: { cpus: cpus().length, loadStart, loadEnd },
      cli: { sequentialPerS: seqPerS, parallel8PerS: parPerS, routes: cliSess.length },
      injector: { routes: total, seconds: injS, perS: total / injS },
      bulk: { routes: total, establishedToCompleteS: estToFull, startToEstablishedS: (tEst - tStart) / 1000 },
      changes: { n: nChanges, p50Ms: p50, p99Ms: p99, maxMs: lat[lat.length - 1]! },
      rssKb: { rr: rss.rr, translatorGobgpd: rss.gw, daemon: null },
      lines,
      pass,
    };
    mkdirSync(dirname(outFile), { recursive: true });
    writeFileSync(outFile, `${JSON.stringify(report, null, 2)}\n`);
    return pass ? 0 : 1;
  } finally {
    monitor?.kill('SIGKILL');
    await injector?.close().catch(() => undefined);
    for (const p of procs.reverse()) await p.kill();
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
