/**
 * `mup lab up|down`: build the lab's namespaces, veths, addresses, routes,
 * the kernel's SRv6 in core, the gNB emulator and the translator (`mup
 * daemon` in the mup namespace, with a bpffs, socket and state file under
 * /run/mup-lab/<prefix>/), and remove exactly that again.
 */
import { spawn } from 'node:child_process';
import { existsSync, openSync, closeSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { kernelSrv6, seg6Enabled } from '../host/kernel-srv6.js';
import { listNamespaces } from '../host/netns-sweep.js';
import { pidAlive } from '../host/process.js';
import { startGnb } from './gnb.js';
import { corePoolBlackhole, PE_MODES, PE_SITES, peDaemonPaths, peDev, startKernelPes, stopKernelPes, writePeConfigs, type PeMode, type PeSite } from './pe.js';
import { ipBatch, nsRun, run, sleep } from './sh.js';
import { LAB_NODES, labTopology, type LabTopology, type LabUe } from './topology.js';
import { DAEMON_NODE_FLAGS } from '../host/node-flags.js';
import { makeDirs } from '../host/mkdirs.js';

export const LAB_CONFIG = fileURLToPath(new URL('../../config/lab.yaml', import.meta.url));
const MUP_BIN = fileURLToPath(new URL('../../bin/mup.js', import.meta.url));
const XDP_PASS_OBJECT = fileURLToPath(new URL('../../build/testpeer.bpf.o', import.meta.url));
export const LAB_RUN_DIR = '/run/mup-lab';

export type Progress = (msg: string) => void;

/**
 * How core ends the uplink (`mup lab up --core`):
 * - `routes`: the kernel's SRv6 routes, seg6local End.DX4 per site and End
 *   for a policy segment (CONFIG_IPV6_SEG6_LWTUNNEL);
 * - `srh`: for a kernel without them, the kernel's SRH code, which every
 *   IPv6 kernel has: core routes each site's SID prefix to the site over an
 *   IPv6 link, the site owns the prefix (a local route, seg6_enabled on) and
 *   its SRH endpoint decapsulates to itself; core's End for a policy segment
 *   is the same endpoint on a local /128. The translator writes an SRH on
 *   every policy (srh: always) so that there is one to process, and the PEs
 *   are ours (--pe mup): the kernel's seg6 encap is a route too.
 */
export type CoreMode = 'routes' | 'srh';
export const CORE_MODES: readonly CoreMode[] = ['routes', 'srh'];

/** Where a lab keeps its own files (bpffs mount, daemon socket, state, log, pid). */
export interface LabPaths {
  readonly dir: string;
  readonly bpffs: string;
  readonly socket: string;
  readonly stateFile: string;
  readonly log: string;
  readonly pidFile: string;
  readonly instance: string;
  /** The gateway's config: config/lab.yaml plus one (N3, TEID) policy per MEC user (written by lab up). */
  readonly config: string;
  /** Which PE builds the downlink (`mup` or `kernel`), written by lab up. */
  readonly peFile: string;
  /** How core ends the uplink (CoreMode), written by lab up. */
  readonly coreFile: string;
}

export function labPaths(t: LabTopology): LabPaths {
  const dir = join(LAB_RUN_DIR, t.prefix);
  return {
    dir,
    config: join(dir, 'gateway.yaml'),
    peFile: join(dir, 'pe'),
    coreFile: join(dir, 'core'),
    bpffs: join(dir, 'bpffs'),
    socket: join(dir, 'mup.sock'),
    stateFile: join(dir, 'state.json'),
    log: join(dir, 'daemon.log'),
    pidFile: join(dir, 'daemon.pid'),
    instance: `lab-${t.prefix}`,
  };
}

/** One JSON request to the lab's daemon (the gateway in mup). */
export function labApi<T = unknown>(p: LabPaths, method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
  return socketApi<T>(p.socket, method, path, body);
}

/** One JSON request to a PE daemon in core (--pe mup). */
export function peApi<T = unknown>(p: LabPaths, site: PeSite, method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
  return socketApi<T>(peDaemonPaths(p.dir, basename(p.dir), site).socket, method, path, body);
}

/** The PE mode of a lab that is up (what lab up wrote). */
export function labPe(p: LabPaths): PeMode {
  const m = existsSync(p.peFile) ? readFileSync(p.peFile, 'utf8').trim() : '';
  if (!(PE_MODES as readonly string[]).includes(m)) throw new Error(`${p.peFile}: no PE mode recorded (is the lab up? mup lab up)`);
  return m as PeMode;
}

/** The core mode of a lab that is up (what lab up wrote). */
export function labCore(p: LabPaths): CoreMode {
  const m = existsSync(p.coreFile) ? readFileSync(p.coreFile, 'utf8').trim() : '';
  if (!(CORE_MODES as readonly string[]).includes(m)) throw new Error(`${p.coreFile}: no core mode recorded (is the lab up? mup lab up)`);
  return m as CoreMode;
}

function socketApi<T>(socketPath: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        socketPath,
        method,
        path,
        timeout: 20_000,
        headers: payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(payload)) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          try {
            resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as T });
          } catch {
            reject(new Error(`${method} ${path}: answer is not JSON: ${text.slice(0, 200)}`));
          }
        });
      },
    );
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer from the lab's daemon within 20 s`)));
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

/** config/lab.yaml must describe the translator of this topology. */
function checkConfig(t: LabTopology, file: string): void {
  const c = parseYaml(readFileSync(file, 'utf8')) as {
    interfaces?: { name: string }[];
    policies?: { match: string; sr_prefix: string; src_prefix: string }[];
    localsids?: { sid: string; src_prefix_len?: number }[];
  };
  const problems: string[] = [];
  const names = (c.interfaces ?? []).map((i) => i.name).sort();
  if (names.join(',') !== [t.mup.core, t.mup.n3].sort().join(',')) problems.push(`interfaces must be ${t.mup.n3} and ${t.mup.core}`);
  const p = c.policies?.[0];
  if (p?.match !== `${t.mup.n3Addr}/32` || p.sr_prefix !== t.sids.dnPrefix || p.src_prefix !== t.sids.srcPrefix) {
    problems.push(`policies[0] must be match ${t.mup.n3Addr}/32, sr_prefix ${t.sids.dnPrefix}, src_prefix ${t.sids.srcPrefix}`);
  }
  const l = c.localsids?.[0];
  if (l?.sid !== t.sids.dlPrefix || (l.src_prefix_len ?? 64) !== 64) problems.push(`localsids[0] must be sid ${t.sids.dlPrefix}, src_prefix_len 64`);
  if (problems.length > 0) throw new Error(`${file} does not match the lab topology (src/lab/topology.ts): ${problems.join('; ')}`);
}

async function isMountpoint(dir: string): Promise<boolean> {
  return (await run('mountpoint', ['-q', dir], { allowFail: true })).exitCode === 0;
}

/** A daemon of a lab with this prefix, if its pid file names a live `mup daemon` of that instance. */
function daemonPid(pidFile: string, instance: string): number | undefined {
  if (!existsSync(pidFile)) return undefined;
  const pid = Number(readFileSync(pidFile, 'utf8').trim());
  if (!Number.isInteger(pid) || pid <= 0 || !pidAlive(pid)) return undefined;
  try {
    const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    if (cmd.includes('daemon') && cmd.includes(instance)) return pid;
  } catch {
    // gone
  }
  return undefined;
}

/** Stop one lab daemon (SIGTERM, then SIGKILL after 5 s); true if one ran. */
export async function stopDaemon(pidFile: string, instance: string): Promise<number | undefined> {
  const pid = daemonPid(pidFile, instance);
  if (pid === undefined) return undefined;
  process.kill(pid, 'SIGTERM');
  for (let i = 0; i < 50 && pidAlive(pid); i++) await sleep(100);
  if (pidAlive(pid)) process.kill(pid, 'SIGKILL');
  return pid;
}

/** Remove everything a lab with this prefix made. Returns what it removed (empty: nothing was there). */
export async function labDown(prefix: string, progress: Progress = () => undefined): Promise<string[]> {
  const t = labTopology(prefix);
  const p = labPaths(t);
  const removed: string[] = [];
  const pid = await stopDaemon(p.pidFile, p.instance);
  if (pid !== undefined) removed.push(`daemon process ${pid}`);
  for (const site of PE_SITES) {
    const d = peDaemonPaths(p.dir, t.prefix, site);
    const q = await stopDaemon(d.pidFile, d.instance);
    if (q !== undefined) removed.push(`PE daemon ${site} process ${q}`);
  }
  const existing = new Set(await listNamespaces());
  for (const node of LAB_NODES) {
    const ns = t.ns[node];
    if (!existing.has(ns)) continue;
    // Processes the lab started in its namespaces (iperf3, receivers, a shell).
    const pids = (await run('ip', ['netns', 'pids', ns], { allowFail: true })).stdout.split('\n').filter((l) => /^\d+$/.test(l));
    for (const q of pids) {
      try {
        process.kill(Number(q), 'SIGKILL');
        removed.push(`process ${q} in ${ns}`);
      } catch {
        // already gone
      }
    }
    await run('ip', ['netns', 'delete', ns]);
    removed.push(`namespace ${ns}`);
  }
  if (existsSync(p.bpffs) && (await isMountpoint(p.bpffs))) {
    await run('umount', [p.bpffs]);
    removed.push(`bpffs ${p.bpffs} (pins of the daemon and the gNB emulator)`);
  }
  if (existsSync(p.dir)) {
    rmSync(p.dir, { recursive: true, force: true });
    removed.push(`directory ${p.dir}`);
    try {
      rmdirSync(LAB_RUN_DIR); // only when no other lab has its directory there
    } catch {
      // another lab's, or gone
    }
  }
  if (removed.length > 0) progress(`removed ${removed.length} things of lab "${prefix}"`);
  return removed;
}

const QUIET = ['net.ipv4.conf.all.rp_filter=0', 'net.ipv4.conf.default.rp_filter=0', 'net.ipv6.conf.all.accept_dad=0', 'net.ipv6.conf.default.accept_dad=0'];
const ROUTER = ['net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1'];

async function veth(t: LabTopology, a: keyof LabTopology['ns'], devA: string, b: keyof LabTopology['ns'], devB: string, mtu: number): Promise<void> {
  await run('ip', ['-n', t.ns[a], 'link', 'add', devA, 'mtu', String(mtu), 'type', 'veth', 'peer', 'name', devB, 'mtu', String(mtu), 'netns', t.ns[b]]);
}

/** What a policy of the gateway adds for `core`: with the SRH endpoint as core, an SRH to process. */
const srhFor = (core: CoreMode): Record<string, unknown> => (core === 'srh' ? { srh: 'always' } : {});

/** The gateway's (N3, TEID/32) policy for one MEC user: its uplink to a MEC site's plain PE SID. */
export function uePolicy(t: LabTopology, u: LabUe, site: 'meca' | 'mecb', core: CoreMode): Record<string, unknown> {
  return { name: `ue${u.index}`, match: `${t.mup.n3Addr}/32`, teid: `0x${u.ulTeid.toString(16)}/32`, sid: t.peSids[site], src_prefix: t.sids.srcPrefix, ...srhFor(core) };
}

/** config/lab.yaml plus one (N3, TEID) policy per MEC user (to mec-a's PE), room for them. */
function writeGatewayConfig(t: LabTopology, p: LabPaths, core: CoreMode): void {
  const c = parseYaml(readFileSync(LAB_CONFIG, 'utf8')) as { settings?: Record<string, unknown>; policies?: Record<string, unknown>[] };
  c.settings = { ...(c.settings ?? {}), max_policies: 1024 };
  c.policies = [...(c.policies ?? []).map((x) => ({ ...x, ...srhFor(core) })), ...t.ues.slice(1).map((u) => uePolicy(t, u, 'meca', core))];
  writeFileSync(p.config, `# ${LAB_CONFIG} and the MEC users' (N3, TEID) policies (written by mup lab up, src/lab/lab.ts)\n${toYaml(c)}`);
}

export interface LabUpOptions {
  /** Who builds the core's PE downlink: our sessions (`mup daemon` per PE) or the kernel's seg6 encap. Default: kernel, mup with core srh. */
  readonly pe?: PeMode;
  /** How core ends the uplink. Default: routes, or srh on a kernel without SRv6 routes (said in a progress line). */
  readonly core?: CoreMode;
}

/** The core mode asked for, or the one this kernel can run. */
async function chooseCore(o: LabUpOptions, progress: Progress): Promise<CoreMode> {
  if (o.core !== undefined) return o.core;
  // The kernel's PE is a seg6 route: asked for, the routes are what it gets (and, without them, the kernel's refusal).
  if (o.pe === 'kernel') return 'routes';
  const k = await kernelSrv6();
  if (k.ok || k.why === 'unknown') return 'routes';
  progress(`${k.reason.replace(/^Error: /, '')}: core is the kernel's SRH endpoint instead (--core srh), the PEs are mup daemons (--pe mup); docs/lab.md`);
  return 'srh';
}

/** core's part of the uplink: End.DX4 per site and an End (routes), or the sites' SID prefixes routed to them (srh). */
function coreUplink(t: LabTopology, core: CoreMode): string[] {
  if (core === 'routes') {
    return [
      // Uplink: End.DX4 for every SID under each sr_prefix. The data-network
      // host owns the inner destination (End.DX4 resolves it by ARP on the link).
      `route add ${t.sids.dnPrefix} encap seg6local action End.DX4 nh4 ${t.dn.addr} count dev ${t.core.toDn}`,
      `route add ${t.sids.mecaPrefix} encap seg6local action End.DX4 nh4 ${t.mec.aAddr} count dev ${t.core.toMeca}`,
      `route add ${t.sids.mecbPrefix} encap seg6local action End.DX4 nh4 ${t.mec.bAddr} count dev ${t.core.toMecb}`,
      // End for a policy with segments: SRH [B, coreEnd], SL 1 -> End -> B's End.DX4.
      `route add ${t.sids.coreEnd}/128 encap seg6local action End count dev ${t.core.toMup}`,
    ];
  }
  return [
    ...PE_SITES.flatMap((site) => [
      `addr add ${t.srhLinks[site].core}/64 dev ${peDev(t, site)} nodad`,
      `route add ${sitePrefix(t, site)} via ${t.srhLinks[site].site} dev ${peDev(t, site)}`,
    ]),
    // End for a policy with segments: the SRH endpoint on a local /128 moves SRH [B, coreEnd] on to B.
    `route add local ${t.sids.coreEnd}/128 dev lo`,
  ];
}

const sitePrefix = (t: LabTopology, site: PeSite): string => (site === 'dn' ? t.sids.dnPrefix : site === 'meca' ? t.sids.mecaPrefix : t.sids.mecbPrefix);

/** --core srh: each site owns its SID prefix and decapsulates with its SRH endpoint; core's End likewise. */
async function srhEndpoints(t: LabTopology): Promise<void> {
  await nsRun(t.ns.core, 'sysctl', ['-q', '-w', ...seg6Enabled(t.core.toMup)]);
  for (const site of PE_SITES) {
    const ns = t.ns[site];
    const dev = site === 'dn' ? t.dn.dev : t.mec.dev;
    await nsRun(ns, 'sysctl', ['-q', '-w', ...seg6Enabled(dev)]);
    await ipBatch(ns, [`addr add ${t.srhLinks[site].site}/64 dev ${dev} nodad`, `route add local ${sitePrefix(t, site)} dev lo`]);
  }
}

/** Build the lab (after removing whatever a previous lab with this prefix left). */
export async function labUp(prefix: string, progress: Progress = () => undefined, o: LabUpOptions = {}): Promise<{ topology: LabTopology; paths: LabPaths }> {
  const t = labTopology(prefix);
  const p = labPaths(t);
  if (process.getuid?.() !== 0) throw new Error('mup lab builds network namespaces, veths, XDP and TC attachments and a bpffs mount: run it as root');
  checkConfig(t, LAB_CONFIG);
  const core = await chooseCore(o, progress);
  const pe = o.pe ?? (core === 'srh' ? 'mup' : 'kernel');
  if (core === 'srh' && pe === 'kernel') throw new Error("--pe kernel is the kernel's seg6 encap, a route, which --core srh does without: use --pe mup with --core srh");
  for (const f of [XDP_PASS_OBJECT, MUP_BIN]) if (!existsSync(f)) throw new Error(`${f} is missing: build first (make bpf ts)`);
  await labDown(prefix, progress);
  try {
    progress(`namespaces ${t.prefix}-{${LAB_NODES.join(',')}}`);
    makeDirs(p.dir);
    makeDirs(p.bpffs);
    await run('mount', ['-t', 'bpf', 'bpf', p.bpffs]);
    for (const node of LAB_NODES) {
      await run('ip', ['netns', 'add', t.ns[node]]);
      await run('ip', ['-n', t.ns[node], 'link', 'set', 'lo', 'up']);
      await nsRun(t.ns[node], 'sysctl', ['-q', '-w', ...QUIET, ...(['gnb', 'mup', 'core'].includes(node) ? ROUTER : [])]);
    }
    progress(`veths, addresses, routes, the kernel SRv6 in core (${core === 'routes' ? 'seg6local routes' : 'its SRH endpoint, and in the sites'})`);
    await veth(t, 'ue', t.ue.dev, 'gnb', t.gnb.toUe, t.ue.mtu);
    await veth(t, 'gnb', t.gnb.n3, 'mup', t.mup.n3, t.gnb.mtu);
    await veth(t, 'mup', t.mup.core, 'core', t.core.toMup, t.mup.mtu);
    // --core srh: the SRv6 packet itself crosses core's links to the sites
    // (the site decapsulates), so they take the transit MTU; the sites' own
    // IPv4 keeps the data network's MTU on its route (siteRoute).
    const siteLink = core === 'srh' ? t.mup.mtu : t.dn.mtu;
    const siteRoute = (gw: string): string => `route add default via ${gw}${core === 'srh' ? ` mtu ${t.dn.mtu}` : ''}`;
    await veth(t, 'core', t.core.toDn, 'dn', t.dn.dev, siteLink);
    await veth(t, 'core', t.core.toMeca, 'meca', t.mec.dev, siteLink);
    await veth(t, 'core', t.core.toMecb, 'mecb', t.mec.dev, siteLink);
    // End.M.GTP4.E output comes from N3, a local address of mup: when the
    // kernel forwards it (a FIB miss), it arrives from to-core with a local source.
    await nsRun(t.ns.mup, 'sysctl', ['-q', '-w', `net.ipv4.conf.${t.mup.core}.accept_local=1`]);
    await ipBatch(t.ns.ue, [
      `addr add ${t.ue.addr}/24 dev ${t.ue.dev}`,
      `addr add ${t.ue.plainAddr}/24 dev ${t.ue.dev}`,
      ...t.ues.filter((u) => u.addr !== t.ue.addr).map((u) => `addr add ${u.addr}/24 dev ${t.ue.dev}`),
      `link set ${t.ue.dev} up`,
      `route add default via ${t.gnb.ueGw} dev ${t.ue.dev}`,
    ]);
    await ipBatch(t.ns.gnb, [
      `addr add ${t.gnb.ueGw}/24 dev ${t.gnb.toUe}`,
      `addr add ${t.gnb.plainGw}/24 dev ${t.gnb.toUe}`,
      `addr add ${t.gnb.addr}/24 dev ${t.gnb.n3}`,
      `link set ${t.gnb.toUe} up`,
      `link set ${t.gnb.n3} up`,
      `route add default via ${t.mup.n3Link} dev ${t.gnb.n3}`,
    ]);
    await ipBatch(t.ns.mup, [
      `addr add ${t.mup.n3Link}/24 dev ${t.mup.n3}`,
      `addr add ${t.mup.n3Addr}/32 dev ${t.mup.n3}`,
      `addr add ${t.mup.v6}/64 dev ${t.mup.core}`,
      `addr add ${t.mup.plainV4}/30 dev ${t.mup.core}`,
      `link set ${t.mup.n3} up`,
      `link set ${t.mup.core} up`,
      `route add ${t.sids.dnPrefix} via ${t.core.v6} dev ${t.mup.core}`,
      `route add ${t.sids.mecaPrefix} via ${t.core.v6} dev ${t.mup.core}`,
      `route add ${t.sids.mecbPrefix} via ${t.core.v6} dev ${t.mup.core}`,
      `route add ${t.sids.coreEnd}/128 via ${t.core.v6} dev ${t.mup.core}`,
      `route add ${t.plainPool} via ${t.gnb.addr} dev ${t.mup.n3}`,
      `route add default via ${t.core.plainV4} dev ${t.mup.core}`,
    ]);
    await ipBatch(t.ns.core, [
      `addr add ${t.core.v6}/64 dev ${t.core.toMup}`,
      `addr add ${t.core.plainV4}/30 dev ${t.core.toMup}`,
      `addr add ${t.core.dnLink}/24 dev ${t.core.toDn}`,
      `addr add ${t.core.mecaLink}/24 dev ${t.core.toMeca}`,
      `addr add ${t.core.mecbLink}/24 dev ${t.core.toMecb}`,
      ...[t.core.toMup, t.core.toDn, t.core.toMeca, t.core.toMecb].map((d) => `link set ${d} up`),
      ...coreUplink(t, core),
      // Downlink: the PEs (src/lab/pe.ts) encapsulate to the SID naming gNB,
      // QFI and TEID of each UE; the kernel's PEs take this source.
      `sr tunsrc set ${t.core.tunsrc}`,
      `route add ${t.sids.dlPrefix} via ${t.mup.v6} dev ${t.core.toMup}`,
      // The plain baseline: routed IPv4 to the UE's second address.
      `route add ${t.plainPool} via ${t.mup.plainV4} dev ${t.core.toMup}`,
    ]);
    await ipBatch(t.ns.dn, [`addr add ${t.dn.addr}/24 dev ${t.dn.dev}`, `link set ${t.dn.dev} up`, siteRoute(t.core.dnLink)]);
    for (const [node, own, gw] of [
      ['meca', t.mec.aAddr, t.core.mecaLink],
      ['mecb', t.mec.bAddr, t.core.mecbLink],
    ] as const) {
      await ipBatch(t.ns[node], [
        `addr add ${own}/24 dev ${t.mec.dev}`,
        `addr add ${t.mec.anycast}/32 dev ${t.mec.dev}`,
        `link set ${t.mec.dev} up`,
        siteRoute(gw),
      ]);
    }
    if (core === 'srh') await srhEndpoints(t);
    // Hosts send with complete checksums (no CHECKSUM_PARTIAL left for a
    // "NIC" to finish): XDP translates bytes, and a veth never finishes them.
    // This also turns TSO off there, so no GSO packet reaches the gNB emulator.
    for (const [node, dev] of [
      ['ue', t.ue.dev],
      ['dn', t.dn.dev],
      ['meca', t.mec.dev],
      ['mecb', t.mec.dev],
    ] as const) {
      await nsRun(t.ns[node], 'ethtool', ['-K', dev, 'tx', 'off']);
    }
    // Frames XDP redirects into a veth arrive only if the peer has an XDP program.
    for (const [node, dev] of [
      ['gnb', t.gnb.n3],
      ['core', t.core.toMup],
    ] as const) {
      await run('ip', ['-n', t.ns[node], 'link', 'set', 'dev', dev, 'xdpdrv', 'obj', XDP_PASS_OBJECT, 'sec', 'xdp']);
    }
    progress(`gNB emulator (TC BPF) in gnb, ${t.ues.length} UEs`);
    await startGnb(t, p.bpffs);
    writeGatewayConfig(t, p, core);
    writeFileSync(p.coreFile, `${core}\n`);
    progress(`translator: mup daemon --config ${p.config} --netns ${t.ns.mup} (${LAB_CONFIG} and ${t.ues.length - 1} (N3, TEID) policies)`);
    await corePoolBlackhole(t);
    await Promise.all([startDaemon(t.ns.mup, p), startPes(t, p, pe, progress)]);
    progress('first packets (neighbours resolved)');
    await warmUp(t);
  } catch (e) {
    const log = existsSync(p.log) ? readFileSync(p.log, 'utf8').split('\n').slice(-5).join('\n') : '';
    await labDown(prefix).catch(() => undefined);
    throw new Error(`lab up failed (everything it made is removed again): ${(e as Error).message}${log === '' ? '' : `\ndaemon log:\n${log}`}`);
  }
  return { topology: t, paths: p };
}

/** The PEs of `mode` in core (the kernel's tables, or one mup daemon per PE). */
async function startPes(t: LabTopology, p: LabPaths, mode: PeMode, progress: Progress): Promise<void> {
  if (mode === 'kernel') {
    progress('PE downlink: the kernel seg6 encap, one table per PE (dn, mec-a, mec-b)');
    await startKernelPes(t);
  } else {
    progress(`PE downlink: mup daemon sessions, one daemon per PE (dn, mec-a, mec-b) in ${t.ns.core}`);
    writePeConfigs(t, p.dir);
    await Promise.all(PE_SITES.map((site) => startDaemon(t.ns.core, { ...peDaemonPaths(p.dir, t.prefix, site), bpffs: p.bpffs })));
  }
  writeFileSync(p.peFile, `${mode}\n`);
}

/** Switch a running lab's PEs to `mode` (sessions back where lab up puts them). */
export async function labSetPe(t: LabTopology, p: LabPaths, mode: PeMode, progress: Progress = () => undefined): Promise<void> {
  const now = labPe(p);
  if (now === mode) return;
  if (mode === 'kernel' && labCore(p) === 'srh') throw new Error("--pe kernel is the kernel's seg6 encap, a route, which this lab's core (--core srh) does without");
  if (now === 'kernel') await stopKernelPes(t);
  else {
    // A stopped daemon leaves its data plane running (pinned XDP links): teardown detaches it.
    for (const site of PE_SITES) {
      const d = peDaemonPaths(p.dir, t.prefix, site);
      await stopDaemon(d.pidFile, d.instance);
      await run(process.execPath, [MUP_BIN, 'teardown', '--instance', d.instance, '--bpffs', p.bpffs, '--netns', t.ns.core]);
    }
  }
  await startPes(t, p, mode, progress);
}

export interface DaemonFiles {
  readonly config: string;
  readonly instance: string;
  readonly socket: string;
  readonly stateFile: string;
  readonly bpffs: string;
  readonly log: string;
  readonly pidFile: string;
}

export async function startDaemon(ns: string, p: DaemonFiles): Promise<void> {
  const fd = openSync(p.log, 'a');
  const child = spawn(
    process.execPath,
    [...DAEMON_NODE_FLAGS, MUP_BIN, 'daemon', '--config', p.config, '--instance', p.instance, '--socket', p.socket, '--state-file', p.stateFile, '--bpffs', p.bpffs, '--netns', ns, '--log-format', 'json'],
    { detached: true, stdio: ['ignore', fd, fd] },
  );
  closeSync(fd);
  child.unref();
  if (child.pid === undefined) throw new Error('could not start mup daemon');
  writeFileSync(p.pidFile, `${child.pid}\n`);
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (!pidAlive(child.pid)) throw new Error(`mup daemon exited before serving; see ${p.log}`);
    try {
      const r = await socketApi<{ pid?: number; interfaces?: { attached: boolean }[] }>(p.socket, 'GET', '/v1/status');
      if (r.status === 200 && r.body.pid === child.pid) {
        if (!(r.body.interfaces ?? []).every((i) => i.attached)) throw new Error('mup daemon runs but is not attached to every interface');
        return;
      }
    } catch (e) {
      if ((e as Error).message.includes('not attached')) throw e;
    }
    if (Date.now() > deadline) throw new Error(`mup daemon did not answer on ${p.socket} within 20 s; see ${p.log}`);
    await sleep(100);
  }
}

/** Every path answers a ping (the first packets of each resolve the neighbours on the way). */
async function warmUp(t: LabTopology): Promise<void> {
  for (const [src, dst, what] of [
    [t.ue.addr, t.dn.addr, 'translated'],
    [t.ue.plainAddr, t.dn.addr, 'plain'],
    [t.ues[1]!.addr, t.mec.anycast, "a MEC user's (N3, TEID) policy to mec-a and mec-a's PE"],
  ] as const) {
    const r = await nsRun(t.ns.ue, 'ping', ['-c', '3', '-i', '0.1', '-W', '1', '-w', '5', '-I', src, dst], { allowFail: true, timeout: 10_000 });
    if (!/ [1-9]\d* received/.test(r.stdout)) {
      throw new Error(`the ${what} path does not answer: ping -I ${src} ${dst} in ${t.ns.ue}: ${r.stdout.split('\n').slice(-3).join(' ')}`);
    }
  }
}
