/**
 * BGP MUP end to end with the real gobgpd 3.10 (issue 14): in a namespace
 * this test creates, a "controller" gobgpd (127.0.0.1) peers with our
 * sidecar gobgpd (127.0.0.2, its TOML made by gobgpdToml, i.e. `mup bgp
 * config`), and `mup daemon` learns from the sidecar (bgp.api).
 * - T2ST + DSD originated at the controller -> a policy with origin "bgp",
 *   and a GTP-U frame run through the daemon's pinned program
 *   (BPF_PROG_TEST_RUN) comes out as IPv6 to the DSD's SID, used as is;
 * - our ISDs (advertise of a local SID, /24 split into /25s) reach the
 *   controller (3.10 drops received ISDs shorter than /25);
 * - the API cannot overwrite a learned rule (409 learned);
 * - a withdrawal keeps the policy for the hold-down (1 s), then it goes.
 * Everything runs in the test's own namespace, so its fixed ports collide
 * with nothing; afterAll kills both gobgpd, the daemon, the namespace.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gobgpdToml } from '../src/bgp/config.js';
import { gobgp, startGobgpd, type GobgpdProcess } from '../src/bgp/gobgpd.js';
import { parseConfig } from '../src/config/load.js';
import { pidAlive } from '../src/host/process.js';
import { TestDaemon } from './helpers/daemon.js';
import { Lab, waitFor } from './helpers/netns.js';
import { PYTHON } from './helpers/scapy.js';

const isRoot = process.getuid?.() === 0;

const CTL_API = { host: '127.0.0.1', port: 50061 };
const SIDE_API = { host: '127.0.0.1', port: 50062 };
const SID = '2001:db8:d9:1::';

const CONFIG = `settings:
  forwarding: tx
bgp:
  asn: 65000
  router_id: 10.255.0.2
  listen: 127.0.0.2:10179
  api: 127.0.0.1:${SIDE_API.port}
  neighbors: [{address: 127.0.0.1, port: 10179}]
  rd: "65000:2"
  rt: "65000:100"
  hold_down: 1
  graceful_restart: 30
  roles: [gw, pe]
  nexthop: 2001:db8:ff::2
  policy_defaults: {src_prefix: 2001:db8:ff:2::/64}
  session_defaults: {src_prefix: 2001:db8:ff:9::/64, source: 198.51.100.1}
localsids:
  - name: gtp4e
    sid: 2001:db8:a2::/56
    src_prefix_len: 64
    advertise: {prefixes: [192.0.2.0/24], lb: 40, ln: 8, fn: 8}
`;

const CTL_TOML = `[global.config]
  as = 65000
  router-id = "10.255.0.1"
  port = 10179
  local-address-list = ["127.0.0.1"]
[[neighbors]]
  [neighbors.config]
    neighbor-address = "127.0.0.2"
    peer-as = 65000
  [neighbors.transport.config]
    local-address = "127.0.0.1"
    remote-port = 10179
  [neighbors.timers.config]
    connect-retry = 1
  [neighbors.graceful-restart.config]
    enabled = true
    restart-time = 30
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-mup"
    [neighbors.afi-safis.mp-graceful-restart.config]
      enabled = true
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv6-mup"
    [neighbors.afi-safis.mp-graceful-restart.config]
      enabled = true
`;

const T2ST = ['-a', 'mup-ipv4', 't2st', '198.51.100.1', 'rd', '65000:50', 'rt', '65000:100', 'teid', String(0x12345678), 'mup', '10:10', 'nexthop', '10.255.0.1'];
const DSD = ['-a', 'mup-ipv4', 'dsd', '10.255.0.9', 'rd', '65000:9', 'prefix', `${SID}/64`, 'locator-node-length', '16', 'function-length', '16', 'behavior', 'END_DT4', 'rt', '65000:100', 'mup', '10:10', 'nexthop', '2001:db8:ff::9'];

describe.runIf(isRoot)('BGP MUP: learn from the sidecar gobgpd', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;
  const speakers: GobgpdProcess[] = [];
  // Made in beforeAll: vitest runs this body even when the suite is skipped (not root).
  let dir = '';
  let ns = '';
  let pins = '';
  const ctl = (args: string[]): Promise<string> => gobgp(CTL_API, args, { netns: ns });

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mup-bgp-test-'));
    lab = await Lab.create(['bgp']);
    ns = lab.ns('bgp');
    writeFileSync(join(dir, 'ctl.toml'), CTL_TOML);
    writeFileSync(join(dir, 'side.toml'), gobgpdToml(parseConfig(CONFIG).bgp!, join(dir, 'side.toml')));
    speakers.push(await startGobgpd({ configFile: join(dir, 'ctl.toml'), api: CTL_API, netns: ns, logFile: join(dir, 'ctl.log') }));
    speakers.push(await startGobgpd({ configFile: join(dir, 'side.toml'), api: SIDE_API, netns: ns, logFile: join(dir, 'side.log') }));
    d = new TestDaemon({ config: CONFIG, netns: ns });
    await d.start();
    await waitFor('the BGP session', 20_000, async () => (/Establ/.test(await ctl(['neighbor'])) ? true : undefined), 250);
  }, 60_000);

  afterAll(async () => {
    await d?.cleanup();
    for (const s of speakers) await s.kill();
    for (const s of speakers) expect(pidAlive(s.pid)).toBe(false);
    await lab?.destroy();
    if (dir !== '') rmSync(dir, { recursive: true, force: true });
  });

  /** Run a GTP-U frame to 198.51.100.1 with this TEID through the pinned program; the verdict and the frame out. */
  const runFrame = async (pins: string, teid: number): Promise<{ verdict: number; out: Buffer }> => {
    const frameIn = join(dir, `in-${teid}.bin`);
    const frameOut = join(dir, `out-${teid}.bin`);
    await execa(PYTHON, [
      '-c',
      'import sys\nfrom scapy.all import Ether, IP, UDP, Raw\nfrom scapy.contrib.gtp import GTP_U_Header\n' +
        'f = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")/IP(src="192.0.2.10", dst="198.51.100.1")/UDP(sport=2152, dport=2152)/' +
        `GTP_U_Header(teid=${teid})/IP(src="10.60.0.1", dst="203.0.113.1")/UDP(sport=1000, dport=2000)/Raw(b"bgp-test")\n` +
        'open(sys.argv[1], "wb").write(bytes(f))\n',
      frameIn,
    ]);
    const run = await execa('bpftool', ['prog', 'run', 'pinned', join(pins, 'prog'), 'data_in', frameIn, 'data_out', frameOut]);
    const m = /Return value: (\d+)/.exec(run.stdout + run.stderr);
    return { verdict: Number(m?.[1] ?? -1), out: readFileSync(frameOut) };
  };

  const policies = async (): Promise<Record<string, unknown>[]> => ((await d!.api('GET', '/v1/policies')).body as { policies: Record<string, unknown>[] }).policies;

  it('the sidecar TOML: first line is the gobgpd command, GR and both MUP families', () => {
    const toml = readFileSync(join(dir, 'side.toml'), 'utf8');
    expect(toml.split('\n')[0]).toBe(`# gobgpd -f ${join(dir, 'side.toml')} --api-hosts 127.0.0.1:${SIDE_API.port} --pprof-disable`);
    expect(toml).toMatch(/restart-time = 30/);
    expect(toml).toMatch(/afi-safi-name = "ipv4-mup"/);
    expect(toml).toMatch(/afi-safi-name = "ipv6-mup"/);
  });

  it('T2ST + DSD at the controller -> a policy with origin bgp, the frame goes to the plain SID', async () => {
    await ctl(['global', 'rib', 'add', ...T2ST]);
    await ctl(['global', 'rib', 'add', ...DSD]);
    const p = await waitFor('the learned policy', 10_000, async () => (await policies()).find((x) => x['origin'] === 'bgp'), 100);
    expect(p).toMatchObject({ match: '198.51.100.1/32', teid: '0x12345678/32', sid: SID, src_prefix: '2001:db8:ff:2::/64', name: 'bgp:198.51.100.1:0x12345678' });
    // The real program on the real (pinned) tables, through BPF_PROG_TEST_RUN.
    pins = ((await d!.api('GET', '/v1/status')).body as { pins: string }).pins;
    const { verdict, out } = await runFrame(pins, 0x12345678);
    expect(verdict).toBe(3); // XDP_TX (forwarding: tx)
    expect(out.readUInt16BE(12)).toBe(0x86dd);
    const da = out.subarray(14 + 24, 14 + 40).toString('hex');
    expect(da).toBe('20010db800d900010000000000000000');
    // The source: src_prefix (P = 64) || the gNB's IPv4 at bit 64 (RFC 9433 §6.5).
    expect(out.subarray(14 + 8, 14 + 24).toString('hex')).toBe('20010db800ff0002c000020a00000000');
  });

  it('our ISDs reach the controller, split into /25s', async () => {
    const rib = await waitFor('our ISDs at the controller', 10_000, async () => {
      const t = JSON.parse((await ctl(['global', 'rib', '-a', 'mup-ipv4', '-j'])) || '{}') as Record<string, unknown>;
      const keys = Object.keys(t).filter((k) => k.startsWith('[type:isd]'));
      return keys.length === 2 ? keys : undefined;
    }, 200);
    expect(rib.sort()).toEqual(['[type:isd][rd:65000:2][prefix:192.0.2.0/25]', '[type:isd][rd:65000:2][prefix:192.0.2.128/25]']);
  });

  it('one of our ISDs deleted at the sidecar behind our back is advertised again at the next re-advertisement (a reload)', async () => {
    // What the sidecar has of ours comes from the daemon's monitor, not from a read of its whole table.
    const side = (args: string[]): Promise<string> => gobgp(SIDE_API, args, { netns: ns });
    const isds = async (): Promise<string[]> =>
      Object.keys(JSON.parse((await ctl(['global', 'rib', '-a', 'mup-ipv4', '-j'])) || '{}') as Record<string, unknown>).filter((k) => k.startsWith('[type:isd][rd:65000:2]'));
    await side(['global', 'rib', 'del', '-a', 'mup-ipv4', 'isd', '192.0.2.0/25', 'rd', '65000:2', 'prefix', '2001:db8:a2::/40', 'locator-node-length', '8', 'function-length', '8',
      'behavior', 'ENDM_GTP4E', 'rt', '65000:100', 'nexthop', '2001:db8:ff::2']);
    await waitFor('the ISD gone at the controller', 10_000, async () => ((await isds()).length === 1 ? true : undefined), 200);
    d!.writeConfig(`${CONFIG}# edited: a reload re-advertises\n`);
    const r = await d!.api('POST', '/v1/reload');
    expect(r.status, r.text).toBe(200);
    const back = await waitFor('the ISD back at the controller', 10_000, async () => {
      const k = await isds();
      return k.length === 2 ? k : undefined;
    }, 200);
    expect(back.sort()).toEqual(['[type:isd][rd:65000:2][prefix:192.0.2.0/25]', '[type:isd][rd:65000:2][prefix:192.0.2.128/25]']);
    expect(d!.log).toMatch(/advertised routes updated/);
    // Once the monitor has shown it, the next re-advertisement finds nothing to do (it would add it again if the
    // monitor's view of our routes were not kept).
    await new Promise((res) => setTimeout(res, 500));
    const at = d!.log.length;
    d!.writeConfig(`${CONFIG}# edited again\n`);
    expect((await d!.api('POST', '/v1/reload')).status).toBe(200);
    await new Promise((res) => setTimeout(res, 1000));
    expect(d!.log.slice(at)).not.toMatch(/advertised routes updated/);
  });

  it('status and metrics: received and installed per type; the API cannot overwrite a learned rule', async () => {
    // Synced once the sidecar's peers are in: asked again after 0.5, 1, 2, 4 s... (PEERS_POLL_MS), so up to 4 s after they are.
    await waitFor('the learner synced', 15_000, async () => (((await d!.api('GET', '/v1/bgp')).body as { synced?: boolean }).synced === true ? true : undefined), 100);
    const s = (await d!.api('GET', '/v1/bgp')).body as { routes: Record<string, { received: number; installed: number }>; sessions: { state: string }[]; synced: boolean };
    expect(s.synced).toBe(true);
    expect(s.routes['t2st']).toMatchObject({ received: 1, installed: 1 });
    expect(s.routes['dsd']).toMatchObject({ received: 1, installed: 1 });
    expect(s.sessions[0]?.state).toBe('established');
    const r = await d!.api('POST', '/v1/policies', { body: { match: '198.51.100.1/32', teid: '0x12345678/32', sid: '2001:db8::1', src_prefix: '2001:db8:ff::/64' } });
    expect(r.status).toBe(409);
    expect(r.body).toMatchObject({ code: 'learned' });
    const m = (await d!.cli(['bgp', 'status', '--json'])).stdout;
    expect(JSON.parse(m)).toMatchObject({ routes: { t2st: { installed: 1 } } });
    const metrics = (await d!.api('GET', '/metrics')).text;
    expect(metrics).toMatch(/mup_bgp_route_latency_seconds_count [1-9]/);
    expect(metrics).toMatch(/mup_bgp_routes\{type="t2st",state="installed"\} 1/);
    // One learned rule's counters, by name and by key, like any other rule's (mup stats --rule).
    const c = await d!.api('GET', `/v1/counters?rule=${encodeURIComponent('bgp:198.51.100.1:0x12345678')}`);
    expect(c.status, c.text).toBe(200);
    expect(c.text).toContain('bgp:198.51.100.1:0x12345678');
  });

  it('PE role: ISD + T1ST at the controller -> a session with origin bgp, isd = the SID cut to LB+LN+FN', async () => {
    await ctl(['global', 'rib', 'add', '-a', 'mup-ipv4', 'isd', '192.0.2.0/25', 'rd', '65000:7', 'prefix', '2001:db8:a1::/40', 'locator-node-length', '8', 'function-length', '8',
      'behavior', 'ENDM_GTP4E', 'rt', '65000:100', 'nexthop', '2001:db8:ff::7']);
    await ctl(['global', 'rib', 'add', '-a', 'mup-ipv4', 't1st', '10.60.0.1/32', 'rd', '65000:50', 'rt', '65000:100', 'teid', '2271560481', 'qfi', '9', 'endpoint', '192.0.2.10', 'nexthop', '10.255.0.1']);
    const sessions = async (): Promise<Record<string, unknown>[]> => ((await d!.api('GET', '/v1/sessions')).body as { sessions: Record<string, unknown>[] }).sessions;
    const x = await waitFor('the learned session', 10_000, async () => (await sessions()).find((y) => y['origin'] === 'bgp'), 100);
    expect(x).toMatchObject({ name: 'bgp:10.60.0.1/32', ue: '10.60.0.1/32', teid: 2271560481, qfi: 9, endpoint: '192.0.2.10', source: '198.51.100.1', isd: '2001:db8:a1::/56', src_prefix: '2001:db8:ff:9::/64' });
  });

  it('a withdrawal keeps the policy for the hold-down, then it goes', async () => {
    await ctl(['global', 'rib', 'del', ...T2ST]);
    const t0 = Date.now();
    await new Promise((r) => setTimeout(r, 300));
    const held = (await policies()).some((x) => x['origin'] === 'bgp');
    const gone = await waitFor('the policy gone', 10_000, async () => ((await policies()).some((x) => x['origin'] === 'bgp') ? undefined : Date.now()), 100);
    expect(held).toBe(true);
    expect(gone - t0).toBeGreaterThanOrEqual(900);
  });

  it('a daemon restart keeps the learned entries; one withdrawn meanwhile goes after the first table read and the hold-down', async () => {
    const T2 = (teid: number): string[] => T2ST.map((a) => (a === String(0x12345678) ? String(teid) : a));
    await ctl(['global', 'rib', 'add', ...T2(0x12345678)]);
    await ctl(['global', 'rib', 'add', ...T2(2)]);
    await waitFor('two learned policies', 10_000, async () => ((await policies()).filter((x) => x['origin'] === 'bgp').length === 2 ? true : undefined));
    await d!.stop('SIGTERM');
    await ctl(['global', 'rib', 'del', ...T2(2)]);
    // No daemon: the pinned program and tables forward both, the withdrawn one too.
    expect((await runFrame(pins, 2)).verdict).toBe(3);
    await d!.start();
    await waitFor('the sweep', 10_000, async () => (/not learned again are gone/.test(d!.log) ? true : undefined), 100);
    expect((await runFrame(pins, 2)).verdict).not.toBe(3);
    expect((await runFrame(pins, 0x12345678)).verdict).toBe(3);
    expect((await policies()).filter((x) => x['origin'] === 'bgp').map((x) => x['name'])).toEqual(['bgp:198.51.100.1:0x12345678']);
  });
});
