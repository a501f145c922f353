/**
 * The MUP controller helper (src/bgp/controller.ts, `mup bgp session
 * add|del`) against a real gobgpd 3.10 on loopback (random free ports,
 * killed after): the CLI originates a session's T1ST and T2ST and withdraws
 * them; the BGP injector peers with the same gobgpd and its UPDATEs decode
 * there to the same routes, in bulk, and are withdrawn again.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BgpInjector, checkSession, encodeT1st, encodeT2st, parseRdRt, parseTeid, updates } from '../src/bgp/controller.js';
import { gobgp, startGobgpd, type GobgpApi, type GobgpdProcess } from '../src/bgp/gobgpd.js';
import { addSessionCommands } from '../src/cli/bgp-session.js';
import { freeTcpPort } from '../src/host/net.js';

const freePort = freeTcpPort;

const dir = mkdtempSync(join(tmpdir(), 'mup-bgpctl-'));
let rr: GobgpdProcess | undefined;
let api: GobgpApi;
let bgpPort = 0;
// A loopback address of our own for the injector's session (the gobgpd's neighbor).
const INJECTOR = `127.0.${40 + (process.pid % 200)}.9`;
const RR_ADDR = `127.0.${40 + (process.pid % 200)}.1`;

beforeAll(async () => {
  bgpPort = await freePort();
  api = { host: '127.0.0.1', port: await freePort() };
  const cfg = join(dir, 'rr.toml');
  writeFileSync(
    cfg,
    [
      '[global.config]',
      '  as = 65000',
      '  router-id = "10.255.0.1"',
      `  port = ${bgpPort}`,
      `  local-address-list = ["${RR_ADDR}"]`,
      '[[neighbors]]',
      '  [neighbors.config]',
      `    neighbor-address = "${INJECTOR}"`,
      '    peer-as = 65000',
      '  [neighbors.transport.config]',
      '    passive-mode = true',
      `    local-address = "${RR_ADDR}"`,
      // A short hold time: the injector must keep the session up with keepalives at the negotiated rate.
      '  [neighbors.timers.config]',
      '    hold-time = 3',
      '    keepalive-interval = 1',
      '  [neighbors.route-reflector.config]',
      '    route-reflector-client = true',
      '    route-reflector-cluster-id = "10.255.0.1"',
      '  [[neighbors.afi-safis]]',
      '    [neighbors.afi-safis.config]',
      '      afi-safi-name = "ipv4-mup"',
      '',
    ].join('\n'),
  );
  rr = await startGobgpd({ configFile: cfg, api, logFile: join(dir, 'rr.log') });
}, 30_000);

afterAll(async () => {
  await rr?.kill();
  rmSync(dir, { recursive: true, force: true });
});

interface RibPath {
  nlri: { route_type: number; value: Record<string, unknown> };
  attrs: { type: number; value?: unknown; nexthop?: string }[];
}

async function rib(): Promise<Record<string, RibPath[]>> {
  return JSON.parse((await gobgp(api, ['global', 'rib', '-a', 'mup-ipv4', '-j'], { timeout: 60_000 })) || '{}') as Record<string, RibPath[]>;
}

async function count(): Promise<number> {
  const out = await gobgp(api, ['global', 'rib', 'summary', '-a', 'mup-ipv4']);
  const m = /Destination: (\d+)/.exec(out);
  return m === null ? -1 : Number(m[1]);
}

async function cli(args: string[]): Promise<{ out: string; err: string }> {
  let out = '';
  let err = '';
  const io = { out: (s: string) => void (out += s), err: (s: string) => void (err += s) };
  const prog = new Command('mup').exitOverride().configureOutput({ writeOut: io.out, writeErr: io.err });
  addSessionCommands(prog.command('bgp'), io);
  await prog.parseAsync(['bgp', 'session', ...args], { from: 'user' });
  return { out, err };
}

const SESSION = ['--ue', '10.45.0.3/32', '--teid', '0x1002', '--dl-teid', '8195', '--qfi', '9', '--endpoint', '198.51.100.1', '--n3', '192.0.2.10', '--segment-id', '10:1', '--rd', '65000:50', '--rt', '65000:100'];

describe('controller: checks before anything is sent', () => {
  it('refuses what GoBGP 3.10 would refuse or silently change', () => {
    expect(() => parseTeid(0)).toThrow(/TEID 0/);
    expect(() => parseTeid('4294967296')).toThrow(/1 to 4294967295/);
    expect(parseTeid('0x1002')).toBe(4098);
    expect(() => parseRdRt('4200000000:9', 'rd')).toThrow(/4-byte ASN.*clamps/);
    expect(parseRdRt('10.255.0.1:7', 'rd')).toEqual({ kind: 'ip', ip: [10, 255, 0, 1], value: 7 });
    const base = { ue: '10.45.0.3/32', teid: 1, qfi: 9, endpoint: '198.51.100.1', n3: '192.0.2.10', segmentId: '10:1' };
    const d = { rd: '65000:1', rt: '65000:100' };
    expect(() => checkSession({ ...base, ue: '10.45.0.3/24' }, d)).toThrow(/ue: .*host bits/);
    expect(() => checkSession({ ...base, qfi: 64 }, d)).toThrow(/QFI from 0 to 63/);
    expect(() => checkSession({ ...base, segmentId: '70000:1' }, d)).toThrow(/segment-id/);
    expect(() => checkSession({ ...base, n3: '192.0.2' }, d)).toThrow(/n3: .*not an IPv4/);
  });

  it('encodes NLRIs as GoBGP 3.10 sends them (its own captured T1ST/T2ST)', () => {
    // Captured from gobgpd 3.10: T1ST 10.60.0.1/32 TEID 0x12345678 QFI 9 endpoint 192.0.2.10, T2ST 198.51.100.1 TEID 0x12345678, RD 65000:3.
    const s = checkSession({ ue: '10.60.0.1/32', teid: 0x12345678, qfi: 9, endpoint: '192.0.2.10', n3: '198.51.100.1', segmentId: '10:10', rd: '65000:3' }, { rd: '', rt: '65000:100' });
    expect(encodeT1st(s).toString('hex')).toBe('010003170000fde800000003200a3c0001123456780920c000020a');
    expect(encodeT2st(s).toString('hex')).toBe('010004110000fde80000000340c633640112345678');
    const [u] = updates([encodeT2st(s)], { nexthop: '10.255.0.2', rt: '65000:100', segmentId: '10:10' });
    // The same UPDATE 3.10 sent for that T2ST (LOCAL_PREF 100, next hop 10.255.0.2, RT + MUP EC).
    expect(u!.toString('hex')).toBe(
      'ffffffffffffffffffffffffffffffff005902000000424001010240020040050400000064800e1e000155040aff000200010004110000fde80000000340c633640112345678c010100002fde8000000640c00000a0000000a',
    );
  });
});

describe('controller against gobgpd 3.10', () => {
  it('session add originates T1ST and T2ST with the given fields; del withdraws both', async () => {
    const r = await cli(['add', '--api', `127.0.0.1:${api.port}`, ...SESSION]);
    expect(r.out).toMatch(/originated t1st 10\.45\.0\.3\/32 rd 65000:50 rt 65000:100 teid 8195 qfi 9 endpoint 198\.51\.100\.1/);
    expect(r.out).toMatch(/originated t2st 192\.0\.2\.10 rd 65000:50 rt 65000:100 teid 4098 mup 10:1/);
    const t = await rib();
    const t1 = t['[type:t1st][rd:65000:50][prefix:10.45.0.3/32]']?.[0];
    const t2 = t['[type:t2st][rd:65000:50][endpoint:192.0.2.10][teid:4098]']?.[0];
    expect(t1?.nlri.value).toMatchObject({ prefix: '10.45.0.3/32', teid: 8195, qfi: 9, endpoint_address: '198.51.100.1' });
    expect(t2?.nlri.value).toMatchObject({ endpoint_address: '192.0.2.10', teid: 4098 });
    expect(JSON.stringify(t2?.attrs)).toContain('"segmend_id":"10:1"');
    expect(JSON.stringify(t2?.attrs)).toContain('"value":"65000:100"');
    // The next hop defaults to the speaker's router id, not 0.0.0.0.
    expect(t2?.attrs.find((a) => a.type === 14)?.nexthop).toBe('10.255.0.1');

    await cli(['del', '--api', `127.0.0.1:${api.port}`, ...SESSION]);
    const after = await rib();
    expect(Object.keys(after).filter((k) => k.includes('rd:65000:50'))).toEqual([]);
  });

  it('a bad field fails with the field named and sends nothing', async () => {
    const before = await count();
    await expect(cli(['add', '--api', `127.0.0.1:${api.port}`, ...SESSION.map((a) => (a === '0x1002' ? '0' : a))])).rejects.toThrow(/teid: "0" is not a TEID/);
    await expect(cli(['add', '--api', `127.0.0.1:${api.port}`, ...SESSION.map((a) => (a === '65000:50' ? '4200000000:50' : a))])).rejects.toThrow(/rd: .*4-byte ASN/);
    await expect(cli(['add', '--api', '127.0.0.1', ...SESSION])).rejects.toThrow(/--api: "127.0.0.1" is not HOST:PORT/);
    expect(await count()).toBe(before);
  });

  it('the injector peers, announces 300 sessions (600 routes) in bulk, they decode as the CLI\'s do, and withdraws them', async () => {
    const before = await count();
    const inj = await BgpInjector.connect({ host: RR_ADDR, port: bgpPort, localAddress: INJECTOR, asn: 65000, routerId: '10.255.0.9' });
    try {
      const ss = Array.from({ length: 300 }, (_, i) =>
        checkSession(
          { ue: `10.46.${i >> 8}.${i & 0xff}/32`, teid: 0x10000 + i, dlTeid: 0x20000 + i, qfi: i % 64, endpoint: '198.51.100.1', n3: '192.0.2.20', segmentId: `10:${1 + (i % 2)}` },
          { rd: '10.255.0.9:1', rt: '65000:100' },
        ),
      );
      await inj.sessions('t2st', ss, { nexthop: '10.255.0.9' });
      await inj.sessions('t1st', ss, { nexthop: '10.255.0.9' });
      const deadline = Date.now() + 15_000;
      while ((await count()) < before + 600 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      expect(await count()).toBe(before + 600);
      // Longer than the speaker's hold time (3 s): the session and its routes stay.
      await new Promise((r) => setTimeout(r, 4500));
      expect(inj.down).toBeUndefined();
      expect(await count()).toBe(before + 600);
      const t = await rib();
      const t2 = t['[type:t2st][rd:10.255.0.9:1][endpoint:192.0.2.20][teid:65537]']?.[0];
      expect(t2?.nlri.value).toMatchObject({ endpoint_address: '192.0.2.20', teid: 65537 });
      expect(JSON.stringify(t2?.attrs)).toContain('"segmend_id":"10:2"');
      const t1 = t['[type:t1st][rd:10.255.0.9:1][prefix:10.46.1.1/32]']?.[0];
      expect(t1?.nlri.value).toMatchObject({ prefix: '10.46.1.1/32', teid: 0x20000 + 257, qfi: 257 % 64, endpoint_address: '198.51.100.1' });

      await inj.sessions('t2st', ss, { nexthop: '10.255.0.9', withdraw: true });
      await inj.sessions('t1st', ss, { nexthop: '10.255.0.9', withdraw: true });
      const d2 = Date.now() + 15_000;
      while ((await count()) > before && Date.now() < d2) await new Promise((r) => setTimeout(r, 100));
      expect(await count()).toBe(before);
    } finally {
      await inj.close();
    }
  }, 120_000);

  it('an injector the speaker does not know gets a clear error', async () => {
    await expect(BgpInjector.connect({ host: RR_ADDR, port: bgpPort, localAddress: '127.0.0.1', asn: 65000, routerId: '10.255.0.8', timeoutMs: 5000 })).rejects.toThrow(
      /BGP injector 127\.0\.0\.1 -> [\d.]+:\d+: (the speaker closed|NOTIFICATION|no session|read ECONNRESET)/,
    );
  }, 20_000);
});
