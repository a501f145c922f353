/**
 * The PE downlink (H.M.Session.Encaps, bpf/session.h) across daemon
 * restarts, on real veths between namespaces (test/helpers/topology.ts):
 * the data network sends sequence-numbered UDP to a UE of a session; the
 * core routes it to the translator (an IPv4 route via its IPv6 address), our
 * program encapsulates it in SRv6 to the session's SID and sends it back to
 * the core, which counts what arrives (seq-sniff) and drops it (blackhole).
 *
 * The sessions table is pinned like the others (src/daemon/pins.ts): a new
 * daemon takes it over as it is, so a restart (SIGTERM, then SIGKILL) loses
 * no frame, the sessions keep their rule ids, and their counters carry on
 * (a new, empty table would be filled again and start them from zero).
 * Every namespace, daemon, pin and bpffs mount is removed in afterAll.
 */
import { existsSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestDaemon } from './helpers/daemon.js';
import { Lab, type Listener } from './helpers/netns.js';
import { buildLab, CORE_V6, DN, MUP_V6 } from './helpers/topology.js';

const isRoot = process.getuid?.() === 0;
const UE_CONFIG = '10.60.0.1';
const UE_API = '10.60.0.2';
const DPORT = 7000;
/** The sessions' SID prefix: routed from the translator to the core, which drops it after the sniffer saw it. */
const ISD = '2001:db8:5::/48';
const SESSION = { endpoint: '198.51.100.1', source: '192.0.2.10', isd: ISD, src_prefix: '2001:db8:ff::/64' };
const CONFIG = `
settings: { forwarding: fib, max_policies: 8, max_localsids: 8, max_sessions: 8 }
interfaces:
  - { name: to-gnb }
  - { name: to-core }
sessions:
  - { name: ue-config, ue: ${UE_CONFIG}/32, teid: 7, qfi: 1, endpoint: ${SESSION.endpoint}, source: ${SESSION.source}, isd: "${ISD}", src_prefix: "${SESSION.src_prefix}" }
`;

interface SeqSummary {
  unique: number;
  duplicates: number;
  missing_count: number;
  missing: number[];
  malformed: number[];
}
interface SessionRow {
  name: string;
  ue: string;
  origin: string;
  rule: number | null;
}
interface RuleCounter {
  packets: number;
}

async function waitFor<T>(what: string, ms: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe.skipIf(!isRoot)('PE sessions across daemon restarts (pinned sessions table)', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;

  const sessions = async (): Promise<SessionRow[]> => ((await d!.api('GET', '/v1/sessions')).body as { sessions: SessionRow[] }).sessions;
  const sessionPackets = async (name: string): Promise<number> => {
    const r = await d!.api('GET', `/v1/counters?rule=${encodeURIComponent(name)}`);
    expect(r.status, r.text).toBe(200);
    return (r.body as { rule: RuleCounter }).rule.packets;
  };
  /** The data network sends `count` numbered datagrams to `ue` at `rate`/s; resolves when sending has started. */
  const send = async (ue: string, count: number, rate: number): Promise<Promise<unknown>> => {
    const l = await lab!.listen<{ sent: number }>(
      'dn',
      ['stream', '--plain', '--bind', DN, '--to', ue, '--inner-dport', String(DPORT), '--count', String(count), '--rate', String(rate), '--teid', '0', '--inner-src', DN, '--inner-dst', ue],
      20_000,
    );
    return l.done;
  };
  const sniff = (count: number, timeout: number): Promise<Listener<SeqSummary>> =>
    lab!.listen<SeqSummary>('core', ['seq-sniff', '--iface', 'to-mup', '--port', String(DPORT), '--count', String(count), '--timeout', String(timeout)]);

  beforeAll(async () => {
    lab = await Lab.create(['gnb', 'mup', 'core', 'dn']);
    await buildLab(lab, {
      // The PE downlink is the translator's, the core only captures it: no kernel SRv6 route.
      core: 'none',
      mupBatch: [`route add ${ISD} via ${CORE_V6} dev to-core`],
      coreBatch: [`route add 10.60.0.0/24 via inet6 ${MUP_V6} dev to-mup`, `route add blackhole ${ISD}`],
    });
    d = new TestDaemon({ config: CONFIG, netns: lab.ns('mup'), instance: `sessr${process.pid}` });
    await d.start();
    const add = await d.api('POST', '/v1/sessions', { body: { name: 'ue-api', ue: `${UE_API}/32`, teid: 8, qfi: 2, ...SESSION } });
    expect(add.status, add.text).toBe(201);
  }, 60_000);

  afterAll(async () => {
    try {
      await d?.cleanup();
    } finally {
      await lab?.destroy();
    }
  }, 60_000);

  it('a restart (SIGTERM, then SIGKILL) under PE downlink traffic loses no frame; the sessions keep their rule ids and counters', async () => {
    // Warm up (neighbours resolved, next-hop cache filled): every frame of a short stream arrives as SRv6.
    let warm: SeqSummary | undefined;
    await waitFor('the PE downlink working', 60_000, async () => {
      const rx = await sniff(20, 10);
      await (await send(UE_CONFIG, 20, 200));
      warm = (await rx.done)[0];
      return warm?.unique === 20 ? true : undefined;
    }).catch((e: Error) => {
      throw new Error(`${e.message}; last try: ${JSON.stringify(warm)}; daemon log:\n${d!.log.slice(-3000)}`);
    });
    const before = await sessions();
    expect(before.map((s) => [s.name, s.origin])).toEqual([
      ['ue-config', 'config'],
      ['ue-api', 'api'],
    ]);
    const start = await sessionPackets('ue-config');
    expect(start).toBeGreaterThan(0);

    const N = 6000;
    const rx = await sniff(N, 30);
    const sending = await send(UE_CONFIG, N, 1500);
    // Restart while the stream runs: wait until it is well under way (counted), not for a fixed time.
    await waitFor('the stream under way', 20_000, async () => ((await sessionPackets('ue-config')) - start > 300 ? true : undefined));
    expect(await d!.stop('SIGTERM'), 'exit status after SIGTERM').toBe(0);
    const pinned = existsSync(join(d!.bpffs, 'mup', d!.instance, 'sessions'));
    await d!.start();
    const st = (await d!.api('GET', '/v1/status')).body as { adopted: boolean };
    const mid = await sessionPackets('ue-config');
    await d!.stop('SIGKILL');
    await d!.start();

    await sending;
    const got = (await rx.done)[0]!;
    expect(got.missing_count, `PE downlink frames lost across the restarts (first missing: ${JSON.stringify(got.missing)})`).toBe(0);
    expect(got.duplicates).toBe(0);
    expect(got.malformed).toEqual([]);
    expect(got.unique).toBe(N);
    expect(st.adopted, 'the new daemon took over the pinned tables').toBe(true);
    expect(mid, 'session counters continue from where they were, not from zero').toBeGreaterThan(start + 300);
    expect((await sessionPackets('ue-config')) - start, 'every frame of the stream counted once, across three daemons').toBe(N);
    const after = await sessions();
    expect(after.map((s) => [s.name, s.origin, s.rule]), 'the sessions were kept (same rule ids), not installed again').toEqual(before.map((s) => [s.name, s.origin, s.rule]));
    expect(pinned, 'the sessions table was pinned while no daemon ran').toBe(true);
    expect(d!.log).not.toMatch(/a table pin was removed/);
  }, 120_000);

  it('takes over the pins of a daemon that did not pin the sessions table: fills a new one and pins it', async () => {
    const pin = join(d!.bpffs, 'mup', d!.instance, 'sessions');
    const before = await sessions();
    expect(await d!.stop('SIGTERM')).toBe(0);
    unlinkSync(pin); // as an older daemon left it
    await d!.start();
    expect(((await d!.api('GET', '/v1/status')).body as { adopted: boolean }).adopted).toBe(true);
    expect(existsSync(pin), 'the new sessions table is pinned').toBe(true);
    expect((await sessions()).map((s) => [s.name, s.ue, s.origin])).toEqual(before.map((s) => [s.name, s.ue, s.origin]));
    const rx = await sniff(20, 10);
    await (await send(UE_API, 20, 200));
    expect((await rx.done)[0]!.unique, 'the API session translates from the new table').toBe(20);
  }, 60_000);
});
