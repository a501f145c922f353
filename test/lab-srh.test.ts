/**
 * The lab with `--core srh` (docs/lab.md "On a kernel without SRv6 routes"):
 * core without a seg6 or seg6local route, each site's SID prefix owned by
 * the site and ended by the kernel's SRH endpoint there, the gateway's
 * policies writing an SRH, the PEs mup daemons. It is what `make demo`
 * builds on a kernel without SRv6 routes, and it runs on every kernel.
 *
 * Controls show that the kernel's SRH code carries the traffic: with
 * seg6_enabled off in dn the translated path stops answering, and with it
 * off in core a policy whose SRH names core's End first stops too. The lab
 * (prefix mls<pid>) is removed in afterAll, also when a test failed.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seg6Enabled } from '../src/host/kernel-srv6.js';
import { listNamespaces } from '../src/host/netns-sweep.js';
import { pidAlive } from '../src/host/process.js';
import { labApi, labCore, labDown, labPaths, labPe, labUp, type LabPaths } from '../src/lab/lab.js';
import { iperfServer, ping, tcp } from '../src/lab/measure.js';
import { nsRun } from '../src/lab/sh.js';
import { labTopology, type LabTopology } from '../src/lab/topology.js';

const isRoot = process.getuid?.() === 0;
const PREFIX = `mls${process.pid}`;

interface Fn {
  packets: number;
}
interface PolicyRow {
  name?: string;
  srh?: string;
  segments?: string[];
}

describe.skipIf(!isRoot)("mup lab --core srh: the kernel's SRH endpoint ends the uplink, no seg6 route anywhere", () => {
  let t: LabTopology;
  let p: LabPaths;

  const functions = async (): Promise<Record<string, Fn>> => (await labApi<{ functions: Record<string, Fn> }>(p, 'GET', '/v1/counters?rules=none')).body.functions;
  const seg6 = (node: 'dn' | 'core', on: boolean): Promise<unknown> => {
    const dev = node === 'dn' ? t.dn.dev : t.core.toMup;
    return nsRun(t.ns[node], 'sysctl', ['-q', '-w', ...seg6Enabled(dev, on)]);
  };
  const UPLINK = (): Record<string, unknown> => ({ name: 'n3-uplink', match: `${t.mup.n3Addr}/32`, sr_prefix: t.sids.dnPrefix, src_prefix: t.sids.srcPrefix, srh: 'always' });

  beforeAll(async () => {
    // Labs of test runs killed before their cleanup (mls<dead pid>-*).
    for (const n of await listNamespaces()) {
      const pid = Number(/^mls(\d+)-/.exec(n)?.[1]);
      if (Number.isInteger(pid) && pid !== process.pid && !pidAlive(pid)) await labDown(`mls${pid}`);
    }
    ({ topology: t, paths: p } = await labUp(PREFIX, () => undefined, { core: 'srh' }));
  }, 120_000);

  afterAll(async () => {
    await labDown(PREFIX);
    expect((await listNamespaces()).filter((n) => n.startsWith(`${PREFIX}-`))).toEqual([]);
    expect(existsSync(labPaths(labTopology(PREFIX)).dir)).toBe(false);
  }, 60_000);

  it('records --core srh with --pe mup, and every policy of the gateway writes an SRH', async () => {
    expect(labCore(p)).toBe('srh');
    expect(labPe(p)).toBe('mup');
    const rows = (await labApi<{ policies: PolicyRow[] }>(p, 'GET', '/v1/policies?limit=1000')).body.policies;
    expect(rows).toHaveLength(t.ues.length); // n3-uplink and one (N3, TEID) policy per MEC user
    expect(rows.filter((r) => r.srh !== 'always').map((r) => r.name)).toEqual([]);
    const routes = (await nsRun(t.ns.core, 'ip', ['-6', 'route', 'show'])).stdout;
    expect(routes, 'no seg6 or seg6local route in core').not.toMatch(/encap seg6/);
  });

  it('ping and TCP cross the translated path: dn decapsulates, the PE session brings the answers back', async () => {
    const f0 = await functions();
    expect((await ping(t, 'translated', 5)).received).toBe(5);
    const server = await iperfServer(t, 5302);
    try {
      expect((await tcp(t, 'translated', 2, 5302)).gbps).toBeGreaterThan(0);
    } finally {
      await server.stop();
    }
    const f1 = await functions();
    expect(f1['h_m_gtp4_d']!.packets - f0['h_m_gtp4_d']!.packets).toBeGreaterThan(100);
    expect(f1['end_m_gtp4_e']!.packets - f0['end_m_gtp4_e']!.packets).toBeGreaterThan(100);
  }, 60_000);

  it('control: with seg6_enabled off in dn the translated path does not answer; back on, it does', async () => {
    await seg6('dn', false);
    try {
      expect((await ping(t, 'translated', 3)).received).toBe(0);
    } finally {
      await seg6('dn', true);
    }
    expect((await ping(t, 'translated', 3)).received).toBe(3);
  }, 30_000);

  it("a policy segment: SRH [B, S1] with S1 core's local /128, moved on to B by core's SRH endpoint (off: no answer)", async () => {
    const put = await labApi<{ error?: string }>(p, 'PUT', '/v1/policies', { ...UPLINK(), segments: [t.sids.coreEnd] });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    try {
      expect((await ping(t, 'translated', 3)).received).toBe(3);
      await seg6('core', false);
      try {
        expect((await ping(t, 'translated', 3)).received, "core's SRH endpoint off: S1 is not processed").toBe(0);
      } finally {
        await seg6('core', true);
      }
    } finally {
      expect((await labApi(p, 'PUT', '/v1/policies', UPLINK())).status).toBe(200);
    }
    expect((await ping(t, 'translated', 3)).received).toBe(3);
  }, 30_000);

  it("a MEC user reaches mec-a's anycast address through its (N3, TEID) policy and mec-a's PE", async () => {
    const r = await nsRun(t.ns.ue, 'ping', ['-c', '3', '-i', '0.1', '-W', '1', '-I', t.ues[1]!.addr, t.mec.anycast], { allowFail: true });
    expect(r.stdout).toMatch(/ 3 received/);
  });

  it('--core srh with --pe kernel is refused before anything is made', async () => {
    const other = `mlx${process.pid}`;
    await expect(labUp(other, () => undefined, { core: 'srh', pe: 'kernel' })).rejects.toThrow(/--pe kernel .*--core srh/);
    expect((await listNamespaces()).filter((n) => n.startsWith(`${other}-`))).toEqual([]);
  });
});
