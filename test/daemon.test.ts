/**
 * `mup daemon` on real interfaces (test/helpers/topology.ts: gnb, mup, core,
 * dn namespaces, the Linux kernel's SRv6 as the peer), as an operator runs
 * it: traffic through, counters through the API and /metrics, restarts under
 * traffic, and a SID replaced under traffic.
 *
 * Traffic: the gNB sends sequence-numbered G-PDUs at a steady rate; the data
 * network counts which numbers arrive (after our H.M.GTP4.D and the kernel's
 * End.DX4); where it matters, the core sniffs the SRv6 frames themselves.
 * Every namespace, daemon, pin and bpffs mount is removed in afterAll.
 */
import { copyFileSync, readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MUP_BIN, TestDaemon } from './helpers/daemon.js';
import { Lab, listNamespaces, sweepStaleNamespaces, type Listener } from './helpers/netns.js';
import { buildLab, CORE_V6, DN, GNB, N3, sendDownlink, sidToDn, UE } from './helpers/topology.js';
import { bpfCflags } from '../src/dataplane/cflags.js';
import { corePeer, peerTitle } from './helpers/kernel-srv6.js';

const isRoot = process.getuid?.() === 0;
const REPO = fileURLToPath(new URL('..', import.meta.url));
const DEFAULT_OBJECT = join(REPO, 'build/mup.bpf.o');
const UL_TEID = 0x0a0b0c0d;
const UL_DPORT = 5000;
/** First 6 bytes of the uplink SIDs: sr_prefix 2001:db8:1::/48 and, after the replace, 2001:db8:3::/48. */
const OLD_PREFIX = '20010db80001';
const NEW_PREFIX = '20010db80003';

/** With the kernel's SRH endpoint as core (corePeer 'srh'), the uplink must carry an SRH for it to decapsulate. */
const POLICY = { name: 'n3-uplink', match: `${N3}/32`, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64', ...(corePeer === 'srh' ? { srh: 'always' } : {}) };
const CONFIG = `
settings: { forwarding: fib, max_policies: 64, max_localsids: 64 }
# Per-rule series are opt-in: the busiest rules (the ones with traffic here).
daemon: { metrics: { per_rule: "top:10" } }
interfaces:
  - { name: to-gnb }
  - { name: to-core }
policies:
  - { name: ${POLICY.name}, match: ${POLICY.match}, sr_prefix: "${POLICY.sr_prefix}", src_prefix: "${POLICY.src_prefix}"${POLICY.srh === undefined ? '' : `, srh: ${POLICY.srh}`} }
localsids:
  - { name: n3-downlink, sid: "2001:db8:2::/48", src_prefix_len: 64 }
`;

interface SeqSummary {
  received: number;
  unique: number;
  duplicates: number;
  reordered: number;
  missing_count: number;
  missing: number[];
  malformed?: number[];
  prefixes?: [number, string][];
}

interface Counters {
  events: Record<string, { packets: number }>;
  functions: Record<string, { packets: number; bytes: number }>;
  rules: { rule: number; kind: string; key: string; name?: string; packets: number }[];
}

describe.skipIf(!isRoot)(peerTitle('mup daemon on veths between namespaces'), () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;

  const counters = async (): Promise<Counters> => {
    const r = await d!.api('GET', '/v1/counters');
    expect(r.status).toBe(200);
    return r.body as Counters;
  };
  const uplinkPackets = async (): Promise<number> => (await counters()).functions['h_m_gtp4_d']!.packets;

  /**
   * The gNB sends `count` numbered G-PDUs at `rate`/s. Resolves once sending
   * has started (after scapy's import); `done` when all are sent.
   */
  const stream = async (count: number, rate: number): Promise<{ done: Promise<unknown> }> => {
    const l = await lab!.listen<{ sent: number }>(
      'gnb',
      [
        'stream', '--bind', GNB, '--to', N3, '--count', String(count), '--rate', String(rate), '--teid', String(UL_TEID),
        '--inner-src', UE, '--inner-dst', DN, '--inner-dport', String(UL_DPORT),
      ],
      20_000,
    );
    // Wrapped: an async function returning l.done itself would wait for it.
    return { done: l.done };
  };
  const receiveInDn = (count: number, timeout: number): Promise<Listener<SeqSummary>> =>
    lab!.listen<SeqSummary>('dn', ['seq-recv', '--bind', DN, '--port', String(UL_DPORT), '--count', String(count), '--timeout', String(timeout)]);
  const sniffInCore = (count: number, timeout: number): Promise<Listener<SeqSummary>> =>
    lab!.listen<SeqSummary>('core', ['seq-sniff', '--iface', 'to-mup', '--port', String(UL_DPORT), '--count', String(count), '--timeout', String(timeout)]);
  const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
  /**
   * Wait until `n` more uplink frames than `since` are counted (the stream flows through the data plane
   * now), or the stream has ended: a condition, not a fixed sleep that assumes the sender runs by then.
   */
  const flowing = async (since: number, n: number, sending: Promise<unknown>): Promise<void> => {
    let ended = false;
    void sending.then(() => (ended = true), () => (ended = true));
    const deadline = Date.now() + 30_000;
    while (!ended && (await uplinkPackets()) < since + n) {
      if (Date.now() > deadline) throw new Error(`the stream did not flow: fewer than ${n} frames counted in 30 s`);
      await sleep(20);
    }
  };
  const xdpOnMup = async (): Promise<string[]> =>
    (await lab!.ip('mup', 'link', 'show')).split('\n').filter((l) => /prog\/xdp/.test(l));

  beforeAll(async () => {
    await sweepStaleNamespaces();
    lab = await Lab.create(['gnb', 'mup', 'core', 'dn']);
    await buildLab(lab, {
      core: corePeer,
      // The replace test's new SID prefix is routed to the core and ends in the data network too.
      mupBatch: [`route add 2001:db8:3::/48 via ${CORE_V6} dev to-core`],
      coreBatch: [sidToDn('2001:db8:3::/48', corePeer)],
    });
    d = new TestDaemon({ config: CONFIG, netns: lab.ns('mup') });
    await d.start();
  }, 60_000);

  afterAll(async () => {
    const problems: string[] = [];
    try {
      await d?.cleanup();
    } catch (e) {
      problems.push((e as Error).message);
    }
    try {
      if (lab !== undefined) {
        const left = await xdpOnMup().catch(() => []);
        await lab.destroy();
        expect(left, 'teardown detaches the program from every interface').toEqual([]);
        expect((await listNamespaces()).filter((n) => n.startsWith(lab!.prefix))).toEqual([]);
      }
    } catch (e) {
      problems.push((e as Error).message);
    }
    const daemons = await execa('pgrep', ['-f', `--instance ${d?.instance ?? 'none'} `], { reject: false });
    if (String(daemons.stdout).trim() !== '') problems.push(`daemon processes left: ${String(daemons.stdout)}`);
    if (problems.length > 0) throw new Error(problems.join('\n'));
  }, 60_000);

  it('attaches to both interfaces and reports it in status and /metrics', async () => {
    const s = (await d!.api('GET', '/v1/status')).body as {
      interfaces: { name: string; mode: string; attached: boolean }[];
      tables: { policies: { entries: number } };
      program: { id: number };
    };
    expect(s.interfaces.map((i) => [i.name, i.mode, i.attached])).toEqual([
      ['to-gnb', 'native', true],
      ['to-core', 'native', true],
    ]);
    expect(s.tables.policies.entries).toBe(1);
    const links = await xdpOnMup();
    expect(links, 'ip link shows our program on both veths').toHaveLength(2);
    for (const l of links) expect(l).toContain(`prog/xdp id ${s.program.id}`);
    const m = await d!.api('GET', '/metrics');
    expect(m.status).toBe(200);
    expect(m.text).toContain('mup_interface_attached{interface="to-gnb",mode="native"} 1');
    expect(m.text).toContain('mup_table_entries{table="policies"} 1');
    expect(m.text).toMatch(/^mup_build_info\{version="[^"]+",node="v\d+[^"]*",object_sha256="[0-9a-f]{64}"\} 1$/m);
  });

  it("exports the event loop's delay and the next-hop cache's work (status and /metrics)", async () => {
    type Delay = { p50: number; p99: number; max: number; samples: number };
    const s = (await d!.api('GET', '/v1/status')).body as {
      eventLoop: { resolutionMs: number; sinceStart: Delay; sinceLastScrape: Delay };
      nexthops: { rulesResolved: number; fullPasses: number; incrementalPasses: number } | null;
    };
    const sane = (x: Delay): void => {
      expect(x.samples).toBeGreaterThan(0);
      expect(0 <= x.p50 && x.p50 <= x.p99 && x.p99 <= x.max, JSON.stringify(x)).toBe(true);
      expect(x.max).toBeLessThan(10); // seconds: a daemon stalled this long would not have answered
    };
    expect(s.eventLoop.resolutionMs).toBe(10);
    sane(s.eventLoop.sinceStart);
    // forwarding fib: the cache ran its first (full) pass over the rules.
    expect(s.nexthops).not.toBeNull();
    expect(s.nexthops!.fullPasses).toBeGreaterThanOrEqual(1);
    expect(s.nexthops!.rulesResolved).toBeGreaterThanOrEqual(1);
    // Each scrape reads the window since the previous one and starts a new one.
    const gauge = (text: string, q: string): number => Number(new RegExp(`^mup_event_loop_delay_seconds\\{quantile="${q}"\\} (\\S+)$`, 'm').exec(text)?.[1]);
    await d!.api('GET', '/metrics');
    await new Promise((r) => setTimeout(r, 300));
    const m = (await d!.api('GET', '/metrics')).text;
    const [p50, p99, max] = ['0.5', '0.99', '1'].map((q) => gauge(m, q)) as [number, number, number];
    expect(0 <= p50 && p50 <= p99 && p99 <= max && max < 10, `${p50} ${p99} ${max}`).toBe(true); // NaN (no gauge) fails; an idle loop may read 0
    expect(Number(/^mup_nexthop_rules_resolved_total (\d+)$/m.exec(m)?.[1])).toBeGreaterThanOrEqual(s.nexthops!.rulesResolved);
    expect(Number(/^mup_nexthop_passes_total\{kind="full"\} (\d+)$/m.exec(m)?.[1])).toBeGreaterThanOrEqual(1);
    // Nothing lost by ip monitor and no failed pass on a quiet start: both series there, at 0.
    expect(m).toMatch(/^mup_nexthop_lost_event_resyncs_total 0$/m);
    expect(m).toMatch(/^mup_nexthop_failed_passes_total 0$/m);
    const after = ((await d!.api('GET', '/v1/status')).body as typeof s).eventLoop;
    sane(after.sinceStart);
    expect(after.sinceStart.samples).toBeGreaterThan(s.eventLoop.sinceStart.samples);
  });

  it('translates uplink and downlink traffic; the API and /metrics count it', async () => {
    const before = await counters();
    const N = 300;
    const rx = await receiveInDn(N, 20);
    await (await stream(N, 1000)).done;
    const got = (await rx.done)[0]!;
    expect(got.unique, `the data network got every uplink packet (missing ${JSON.stringify(got.missing)})`).toBe(N);

    // Downlink: the data network answers; the core's kernel encapsulates it to our End.M.GTP4.E.
    const DL_N = 50;
    const gnbRx = await lab!.listen<{ data: string }>('gnb', ['udp-recv', '--bind', GNB, '--port', '2152', '--count', String(DL_N), '--timeout', '10']);
    await sendDownlink(lab!, corePeer, { sport: 5001, dport: 6000, hex: Buffer.from('downlink').toString('hex'), count: DL_N, interval: 0.002 });
    const dl = await gnbRx.done;
    expect(dl.length, 'the gNB got every downlink packet as GTP-U').toBe(DL_N);

    const after = await counters();
    expect(after.functions['h_m_gtp4_d']!.packets - before.functions['h_m_gtp4_d']!.packets).toBe(N);
    expect(after.functions['end_m_gtp4_e']!.packets - before.functions['end_m_gtp4_e']!.packets).toBe(DL_N);
    const rule = (c: Counters, name: string): number => c.rules.find((r) => r.name === name)?.packets ?? -1;
    expect(rule(after, 'n3-uplink') - rule(before, 'n3-uplink')).toBe(N);
    expect(rule(after, 'n3-downlink') - rule(before, 'n3-downlink')).toBe(DL_N);

    const m = (await d!.api('GET', '/metrics')).text;
    const value = (re: RegExp): number => Number(re.exec(m)?.[1] ?? NaN);
    expect(value(/^mup_packets_total\{function="H\.M\.GTP4\.D"\} (\d+)$/m)).toBe(after.functions['h_m_gtp4_d']!.packets);
    expect(value(/^mup_packets_total\{function="End\.M\.GTP4\.E"\} (\d+)$/m)).toBe(after.functions['end_m_gtp4_e']!.packets);
    expect(value(/^mup_rule_packets_total\{kind="policy",key="192\.0\.2\.10\/32",name="n3-uplink"\} (\d+)$/m)).toBe(rule(after, 'n3-uplink'));
    expect(m).toMatch(/^mup_drops_total\{reason="gtp_bad_length"\} 0$/m);
  }, 60_000);

  it('restarts (SIGTERM, then SIGKILL) under steady traffic without losing a frame; counters carry on', async () => {
    const N = 8000;
    const RATE = 2000;
    const start = await uplinkPackets();
    const rx = await receiveInDn(N, 20);
    const sending = (await stream(N, RATE)).done;
    await flowing(start, 500, sending);

    // SIGTERM: the daemon exits 0, the pinned links keep the program on the interfaces.
    expect(await d!.stop('SIGTERM'), 'exit status after SIGTERM').toBe(0);
    expect(await xdpOnMup(), 'still attached with no daemon running').toHaveLength(2);
    const mid = await (async () => {
      await d!.start();
      return uplinkPackets();
    })();
    expect(mid, 'counters continue from where they were, not from zero').toBeGreaterThan(start);
    const st = (await d!.api('GET', '/v1/status')).body as { adopted: boolean };
    expect(st.adopted, 'the new daemon took over the pinned tables').toBe(true);

    await flowing(mid, 500, sending);
    // SIGKILL: no chance to clean up; nothing is lost either.
    await d!.stop('SIGKILL');
    expect(await xdpOnMup()).toHaveLength(2);
    await d!.start();

    await sending;
    const got = (await rx.done)[0]!;
    expect(got.missing_count, `frames lost across the restarts (first missing: ${JSON.stringify(got.missing)})`).toBe(0);
    expect(got.duplicates).toBe(0);
    expect(got.unique).toBe(N);
    expect((await uplinkPackets()) - start, 'every frame of the stream counted once, across three daemons').toBe(N);
    expect(d!.log).toContain('program swapped on the running link');
  }, 90_000);

  it("replaces a flow's SID under traffic: every frame arrives, translated with the old SID or the new", async () => {
    const N = 6000;
    const RATE = 2000;
    const ruleBefore = ((await d!.api('GET', '/v1/policies')).body as { policies: { name: string; rule: number }[] }).policies[0]!.rule;
    const rx = await receiveInDn(N, 20);
    const sniff = await sniffInCore(N, 20);
    const before = await uplinkPackets();
    const sending = (await stream(N, RATE)).done;
    // Some frames with the old SID, then the replace while most of the stream is still to come.
    await flowing(before, 200, sending);
    const r = await d!.api('PUT', '/v1/policies', { body: { ...POLICY, sr_prefix: '2001:db8:3::/48' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    await sending;
    const got = (await rx.done)[0]!;
    const seen = (await sniff.done)[0]!;
    // Put the original back for any later test.
    expect((await d!.api('PUT', '/v1/policies', { body: POLICY })).status).toBe(200);

    expect(got.missing_count, `frames lost at the data network (first missing: ${JSON.stringify(got.missing)})`).toBe(0);
    expect(seen.unique, 'the core saw every frame as SRv6').toBe(N);
    expect(seen.malformed, 'malformed frames (bad inner IPv4 checksum or lengths)').toEqual([]);
    const prefixes = new Map<string, number>();
    for (const [, p] of seen.prefixes!) prefixes.set(p, (prefixes.get(p) ?? 0) + 1);
    expect([...prefixes.keys()].sort(), `each frame has the old SID prefix or the new: ${JSON.stringify([...prefixes])}`).toEqual([OLD_PREFIX, NEW_PREFIX].sort());
    // In sequence order: old, old, ..., new, new: one switch, never back.
    const bySeq = [...seen.prefixes!].sort((a, b) => a[0] - b[0]).map(([, p]) => p);
    const switches = bySeq.filter((p, i) => i > 0 && p !== bySeq[i - 1]).length;
    expect(switches, 'the SID changes once in the stream').toBe(1);
    const ruleAfter = ((await d!.api('GET', '/v1/policies')).body as { policies: { rule: number }[] }).policies[0]!.rule;
    expect(ruleAfter, 'the rule keeps its counter slot across the replace').toBe(ruleBefore);
  }, 90_000);

  it('swaps in a new build of the program on reload, under traffic, without losing a frame', async () => {
    // The daemon runs a copy of the object; a second build (another MUP_BUILD_ID) replaces the copy.
    const object = join(d!.dir, 'mup.bpf.o');
    copyFileSync(DEFAULT_OBJECT, object);
    await d!.stop('SIGTERM');
    await d!.start(['--object', object]);
    const progOf = async (): Promise<number> => ((await d!.api('GET', '/v1/status')).body as { program: { id: number } }).program.id;
    const idBefore = await progOf();
    const next = join(d!.dir, 'next.bpf.o');
    await execa('clang', [...bpfCflags(), '-DMUP_BUILD_ID=2', '-c', join(REPO, 'bpf/mup.bpf.c'), '-o', next], { cwd: REPO });
    expect(readFileSync(next).equals(readFileSync(object)), 'the two builds differ').toBe(false);

    const N = 6000;
    const start = await uplinkPackets();
    const rx = await receiveInDn(N, 20);
    const sending = (await stream(N, 2000)).done;
    await flowing(start, 500, sending);
    renameSync(next, object);
    const r = await d!.api('POST', '/v1/reload');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ programReplaced: true });
    await sending;
    const got = (await rx.done)[0]!;
    expect(got.missing_count, `frames lost across the swap (first missing: ${JSON.stringify(got.missing)})`).toBe(0);
    expect(got.unique).toBe(N);
    const idAfter = await progOf();
    expect(idAfter).not.toBe(idBefore);
    for (const l of await xdpOnMup()) expect(l, 'both links run the new program').toContain(`prog/xdp id ${idAfter} `);
    expect((await uplinkPackets()) - start, 'counters carried over to the new program').toBe(N);
  }, 90_000);

  it('keeps GTP6 local SIDs added through the API across a restart, with every key', async () => {
    const sids = [
      { name: 'g6e', behavior: 'end.m.gtp6.e', sid: '2001:db8:600::/64', source: '2001:db8:ffff::6e', container: 'auto', hop_limit: 60, mtu: 1400 },
      { name: 'g6d', behavior: 'end.m.gtp6.d', sid: '2001:db8:700::/64', source: '2001:db8:ffff::6d', sr_prefix: '2001:db8:800::/64', segments: ['2001:db8:10::1'], srh: 'always', hop_limit: 61 },
      { name: 'g6di', behavior: 'end.m.gtp6.d.di', sid: '2001:db8:701::/64', source: '2001:db8:ffff::6d', sr_prefix: '2001:db8:600::/64', srh: 'reduced', hop_limit: 62 },
    ];
    for (const body of sids) {
      const r = await d!.api('POST', '/v1/localsids', { body });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
    }
    const list = async (): Promise<unknown[]> =>
      ((await d!.api('GET', '/v1/localsids')).body as { localsids: { name?: string }[] }).localsids.filter((l) => l.name?.startsWith('g6'));
    const before = await list();
    expect(before).toMatchObject(sids);
    await d!.stop('SIGTERM');
    await d!.start();
    expect(await list(), 'replayed from the state file, key for key').toEqual(before);
    for (const { name } of sids) expect((await d!.api('DELETE', `/v1/localsids?name=${name}`)).status).toBe(200);
  }, 60_000);

  it('refuses a second daemon for the same instance before it touches anything', async () => {
    const dump = async (): Promise<string> =>
      (await execa('bpftool', ['-j', 'map', 'dump', 'pinned', `${d!.bpffs}/mup/${d!.instance}/policies`])).stdout;
    const progs = async (): Promise<string[]> => (await xdpOnMup()).map((l) => /prog\/xdp id (\d+)/.exec(l)?.[1] ?? '');
    const tablesBefore = await dump();
    const progsBefore = await progs();
    // Another config for the same instance: other policy, same socket and pins.
    const other = new TestDaemon({ config: CONFIG.replace(POLICY.match, '10.7.0.0/16'), netns: lab!.ns('mup'), instance: d!.instance });
    try {
      const r = await execa('node', [MUP_BIN, ...other.daemonArgs().map((a) => (a === other.socket ? d!.socket : a === other.bpffs ? d!.bpffs : a))], {
        reject: false,
        all: true,
        timeout: 20_000,
      });
      expect(r.exitCode).toBe(2);
      expect(String(r.all)).toMatch(new RegExp(`instance ${d!.instance} is served by the daemon with pid ${d!.pid}`));
    } finally {
      await other.cleanup();
    }
    expect(await dump(), 'the pinned policy table is untouched').toBe(tablesBefore);
    expect(await progs(), 'the same program runs on both interfaces').toEqual(progsBefore);
    expect(((await d!.api('GET', '/v1/status')).body as { interfaces: { attached: boolean }[] }).interfaces.every((i) => i.attached)).toBe(true);
  });

  it('refuses new table sizes on the pinned tables; --replace-tables starts fresh ones', async () => {
    const bigger = CONFIG.replace('max_policies: 64', 'max_policies: 128');
    await d!.stop('SIGTERM');
    d!.writeConfig(bigger);
    const refused = await d!.startFailing();
    expect(refused.exitCode).toBe(2);
    expect(refused.output).toMatch(/mup_policies holds 64 entries, the config asks for 128.*--replace-tables/);
    expect(await xdpOnMup(), 'the running data plane is untouched').toHaveLength(2);
    await d!.start(['--replace-tables']);
    const s = (await d!.api('GET', '/v1/status')).body as { tables: { policies: { capacity: number; entries: number } }; interfaces: { attached: boolean }[] };
    expect(s.tables.policies).toEqual({ capacity: 128, entries: 1 });
    expect(s.interfaces.every((i) => i.attached)).toBe(true);
    expect(await uplinkPackets(), 'fresh counters').toBe(0);
    // Back to the sizes of the other tests.
    await d!.stop('SIGTERM');
    d!.writeConfig(CONFIG);
    await d!.start(['--replace-tables']);
  }, 60_000);

  it('reloads a changed config on SIGHUP, applying only the difference; the next-hop cache re-points only the rules the edit changed', async () => {
    type Nh = { rulesResolved: number; fullPasses: number; apiRules: number; last: unknown };
    const nexthops = async (): Promise<Nh> => ((await d!.api('GET', '/v1/status')).body as { nexthops: Nh }).nexthops;
    // The start's full pass done (this daemon was restarted by the tests before).
    for (let i = 0; i < 200 && (await nexthops()).last === null; i++) await sleep(50);
    const nh0 = await nexthops();
    expect(nh0.fullPasses, JSON.stringify(nh0)).toBeGreaterThanOrEqual(1);
    d!.writeConfig(CONFIG.replace('\nlocalsids:', `\n  - { name: extra, match: 192.0.2.99/32, sr_prefix: "2001:db8:5::/48", src_prefix: "2001:db8:ff::/64" }\nlocalsids:`));
    process.kill(d!.pid!, 'SIGHUP');
    // The table and the log line: two channels (the API, the daemon's stdout), each polled; the log
    // line read right after the table showed 2 could still be on its way.
    const reloaded = /"added":1,"replaced":0,"deleted":0,"unchanged":\d+.*"msg":"reloaded"/;
    const deadline = Date.now() + 30_000;
    let entries = 0;
    while (Date.now() < deadline) {
      const s = (await d!.api('GET', '/v1/status')).body as { tables: { policies: { entries: number } } };
      entries = s.tables.policies.entries;
      if (entries === 2 && reloaded.test(d!.log)) break;
      await sleep(50);
    }
    expect(entries, d!.log.split('\n').slice(-5).join('\n')).toBe(2);
    expect(d!.log).toMatch(reloaded);
    // A full pass would start within the cache's 50 ms debounce of the reload.
    await sleep(500);
    const nh1 = await nexthops();
    expect(nh1.fullPasses - nh0.fullPasses, `no pass over every rule for a one-rule edit: ${JSON.stringify([nh0, nh1])}`).toBe(0);
    // apiRules: rules pointed one by one (API changes, a reload's edit); route and neighbour events move rulesResolved only.
    expect(nh1.apiRules - nh0.apiRules, 'the added policy alone pointed at its next hop').toBe(1);
    d!.writeConfig(CONFIG);
    const r = await d!.api('POST', '/v1/reload');
    expect(r.body).toMatchObject({ added: 0, deleted: 1, replaced: 0 });
    await sleep(500);
    const nh2 = await nexthops();
    expect(nh2.fullPasses - nh0.fullPasses, `no pass over every rule for a one-rule delete: ${JSON.stringify([nh0, nh2])}`).toBe(0);
    expect(nh2.apiRules, 'a deleted rule is pointed at nothing, not resolved').toBe(nh1.apiRules);
  });
});

describe.skipIf(!isRoot)('mup daemon on an interface without native XDP', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;
  const config = (mode: string): string => `
settings: { max_policies: 8, max_localsids: 8 }
interfaces:
  - { name: dum0, xdp: ${mode} }
policies:
  - { match: 192.0.2.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
`;

  beforeAll(async () => {
    lab = await Lab.create(['x']);
    // A bridge: no native XDP in its driver (the kernel here has no dummy module).
    await lab.ip('x', 'link', 'add', 'dum0', 'type', 'bridge');
    await lab.ip('x', 'link', 'set', 'dum0', 'up');
  });
  afterAll(async () => {
    await d?.cleanup();
    await lab?.destroy();
  });

  it('refuses native mode naming the interface, the kernel reason and the generic hint; leaves nothing; generic works', async () => {
    d = new TestDaemon({ config: config('native'), netns: lab!.ns('x') });
    const r = await d.startFailing();
    expect(r.exitCode).toBe(2);
    expect(r.output).toMatch(/dum0 \(native\).*(not supported|EOPNOTSUPP).*xdp: generic/s);
    expect(await lab!.ip('x', 'link', 'show', 'dum0')).not.toMatch(/xdp/);
    expect((await execa('ls', ['-A', `${d.bpffs}/mup`], { reject: false })).stdout.trim(), 'no pins left by a failed first start').toBe('');
    d.writeConfig(config('generic'));
    await d.start();
    const s = (await d.api('GET', '/v1/status')).body as { interfaces: { name: string; mode: string; attached: boolean }[] };
    expect(s.interfaces).toMatchObject([{ name: 'dum0', mode: 'generic', attached: true }]);
    expect(await lab!.ip('x', 'link', 'show', 'dum0')).toMatch(/xdpgeneric/);
  }, 60_000);
});
