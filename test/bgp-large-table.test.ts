/**
 * A daemon restart against a sidecar whose MUP table is larger than one
 * gRPC message, with the real gobgpd 3.10 (on loopback, addresses and
 * ports of this test's own): a route reflector, our injector announcing
 * T2STs to it in bulk, the sidecar (`mup bgp config`'s TOML) behind it.
 *
 * `gobgp monitor global rib -j --current` sends the current table as one
 * message, and the gobgp CLI takes at most 4 MiB (about 6,000 MUP routes).
 * Before: its failure line (`{"error": ... larger than max ...}`) was read
 * as the first line of the run, i.e. as an empty table: the learner was
 * "synced", and after the hold-down every learned entry of the pinned
 * tables was deleted (the sweep of entries not learned again), while the
 * monitor failed the same way for ever. Now the learner reads such a table
 * with `gobgp global rib -j` beside a monitor without --current.
 *
 * Then the sidecar gobgpd itself restarts: its table is empty until its
 * session to the reflector is back (about 6 s here, against a hold-down of
 * 1 s). Before, that empty table was taken as the whole table: every
 * learned entry was withdrawn and deleted after the hold-down, then learned
 * again. Now the routes it lacks are kept until the sidecar's peers have
 * sent End-of-RIB.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gobgpdToml } from '../src/bgp/config.js';
import { BgpInjector, checkSession, mupRoutes, neighborState, reflectorToml, type CheckedSession } from '../src/bgp/controller.js';
import { gobgp, startGobgpd, type GobgpApi, type GobgpdProcess } from '../src/bgp/gobgpd.js';
import { parseConfig } from '../src/config/load.js';
import { freeTcpPort } from '../src/host/net.js';
import { pidAlive } from '../src/host/process.js';
import { TestDaemon } from './helpers/daemon.js';
import { waitFor } from './helpers/netns.js';

const isRoot = process.getuid?.() === 0;
/** T2STs announced: at about 700 bytes a path at the sidecar, well over 4 MiB. */
const N = 7000;


describe.runIf(isRoot)('BGP MUP: a sidecar table larger than one gRPC message', () => {
  // Made in beforeAll: vitest runs this body even when the suite is skipped (not root).
  let dir = '';
  const speakers: GobgpdProcess[] = [];
  let injector: BgpInjector | undefined;
  let d: TestDaemon | undefined;
  // A loopback /24 of this test's own (the bench uses 127.0.100-199.x).
  const net = `127.0.${200 + (process.pid % 50)}`;
  const RR = `${net}.1`;
  const SIDE = `${net}.2`;
  const INJ = `${net}.9`;
  let rrApi: GobgpApi;
  let sideApi: GobgpApi;
  let ss: CheckedSession[] = [];
  let bgpPort = 0;

  const bgpStatus = async (): Promise<{ synced: boolean; monitor: { up: boolean }; routes: Record<string, { received: number; installed: number }> }> =>
    (await d!.api('GET', '/v1/bgp')).body as never;
  const learnedPolicies = async (): Promise<number> =>
    ((await d!.api('GET', '/v1/policies')).body as { policies: { origin?: string }[] }).policies.filter((p) => p.origin === 'bgp').length;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mup-bgp-large-'));
    const port = (bgpPort = await freeTcpPort());
    rrApi = { host: '127.0.0.1', port: await freeTcpPort() };
    sideApi = { host: '127.0.0.1', port: await freeTcpPort() };
    writeFileSync(join(dir, 'rr.toml'), reflectorToml({ listen: RR, port, injector: INJ, sidecar: SIDE }));
    const config = [
      `settings: {forwarding: tx, max_policies: ${N + 1024}}`,
      'bgp:',
      '  asn: 65000',
      '  router_id: 10.255.0.2',
      `  listen: ${SIDE}:${port}`,
      `  api: ${sideApi.host}:${sideApi.port}`,
      `  neighbors: [{address: ${RR}, port: ${port}}]`,
      '  rd: "10.255.0.2:1"',
      '  rt: "65000:100"',
      '  hold_down: 1',
      '  roles: [gw]',
      '  policy_defaults: {src_prefix: 2001:db8:ff:2::/64}',
      '',
    ].join('\n');
    writeFileSync(join(dir, 'side.toml'), gobgpdToml(parseConfig(config).bgp!, join(dir, 'side.toml')));
    speakers.push(await startGobgpd({ configFile: join(dir, 'rr.toml'), api: rrApi, logFile: join(dir, 'rr.log') }));
    speakers.push(await startGobgpd({ configFile: join(dir, 'side.toml'), api: sideApi, logFile: join(dir, 'side.log') }));
    d = new TestDaemon({ config });
    await d.start();
    await waitFor('the sidecar session', 30_000, async () => ((await neighborState(sideApi, RR)) === 'established' ? true : undefined), 250);
  }, 90_000);

  afterAll(async () => {
    await injector?.close();
    await d?.cleanup();
    for (const s of speakers) await s.kill();
    for (const s of speakers) expect(pidAlive(s.pid)).toBe(false);
    if (dir !== '') rmSync(dir, { recursive: true, force: true });
  });

  it(`${N} T2STs learned as they come; after a restart they are read whole with \`global rib\`, one withdrawn meanwhile goes, none of the others`, async () => {
    await gobgp(rrApi, ['global', 'rib', 'add', '-a', 'mup-ipv4', 'dsd', '10.255.0.91', 'rd', '10.255.0.1:91', 'prefix', '2001:db8:d9:1::/64', 'locator-node-length', '16', 'function-length', '16',
      'behavior', 'END_DT4', 'rt', '65000:100', 'mup', '10:1', 'nexthop', '2001:db8:ff::9']);
    injector = await BgpInjector.connect({ host: RR, port: bgpPort, localAddress: INJ, asn: 65000, routerId: '10.255.0.9' });
    ss = Array.from({ length: N }, (_, i) =>
      checkSession({ ue: `10.64.${i >> 8}.${i & 0xff}/32`, teid: 0x10000 + i, qfi: 9, endpoint: `198.51.100.${1 + (i % 126)}`, n3: '192.0.2.10', segmentId: '10:1' }, { rd: '10.255.0.9:1', rt: '65000:100' }),
    );
    await injector.sessions('t2st', ss, { nexthop: '10.255.0.9' });
    await waitFor(`${N} T2STs at the sidecar`, 120_000, async () => ((await mupRoutes(sideApi)) >= N + 1 ? true : undefined), 500);
    await waitFor(`${N} learned policies`, 120_000, async () => ((await bgpStatus()).routes['t2st']?.installed === N ? true : undefined), 250);

    // The precondition: this sidecar's table does not fit --current's one message.
    const cur = await execa('gobgp', ['-u', sideApi.host, '-p', String(sideApi.port), 'monitor', 'global', 'rib', '-j', '--current'], { reject: false, timeout: 60_000 });
    expect(cur.exitCode).not.toBe(0);
    expect(cur.stdout).toMatch(/larger than max/);

    await d!.stop('SIGTERM');
    await injector.sessions('t2st', [ss[5]!], { nexthop: '10.255.0.9', withdraw: true });
    await waitFor('the withdrawal at the sidecar', 30_000, async () => ((await mupRoutes(sideApi)) === N ? true : undefined), 250);
    await d!.start();
    await waitFor('the table read whole (monitor up)', 120_000, async () => ((await bgpStatus()).monitor.up ? true : undefined), 250);
    // The sweep (after the 1-s hold-down) deletes the one entry not learned again, and only it.
    await waitFor('the sweep', 30_000, async () => (/not learned again are gone/.test(d!.log) ? true : undefined), 250);
    const s = await bgpStatus();
    expect(s.synced).toBe(true);
    expect(s.routes['t2st']).toMatchObject({ received: N - 1, installed: N - 1 });
    expect(await learnedPolicies()).toBe(N - 1);
    expect(d!.log).toMatch(/"deleted":1[,}]/);
    expect(d!.log).toMatch(/too large for one message/);
    // Later changes come on the monitor as usual.
    await injector.sessions('t2st', [ss[5]!], { nexthop: '10.255.0.9' });
    await waitFor('the route back', 30_000, async () => ((await bgpStatus()).routes['t2st']?.installed === N ? true : undefined), 250);
  }, 400_000);

  it('a sidecar gobgpd restart: the learned entries stay while its session to the reflector comes back', async () => {
    expect(await learnedPolicies()).toBe(N);
    const starts = (await bgpStatus()).monitor.starts;
    await speakers[1]!.kill();
    speakers.splice(1, 1);
    speakers.push(await startGobgpd({ configFile: join(dir, 'side.toml'), api: sideApi, logFile: join(dir, 'side2.log') }));
    // Watched every 200 ms until the sidecar has its table again and the daemon's monitor read it.
    let least = N;
    let kept = 0;
    await waitFor('the sidecar full again and read', 120_000, async () => {
      least = Math.min(least, await learnedPolicies());
      const s = await bgpStatus();
      kept = Math.max(kept, s.monitor.keptForPeers ?? 0); // (absent before session 35)
      return s.monitor.starts > starts && s.monitor.up && (s.monitor.keptForPeers ?? 0) === 0 && (await mupRoutes(sideApi)) >= N + 1 ? true : undefined;
    }, 200);
    await new Promise((r) => setTimeout(r, 1500)); // past the hold-down
    least = Math.min(least, await learnedPolicies());
    expect(least).toBe(N);
    expect(kept).toBeGreaterThan(0); // the wait was seen: the table read came before the session was back
    expect(d!.log).toMatch(/does not have every peer's table yet/);
  }, 200_000);
});
