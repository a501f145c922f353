/**
 * The largest reads give the event loop back while they are made and sent
 * (and the running config, `mup config show`, is built on a thread).
 * Found with a 1 ms loop-lag probe beside bench:daemon (session 29): with
 * 131,072 rules, GET /v1/counters?rules=all held the daemon's loop 100-440
 * ms in one turn (its rows' ids looked up in one go, then the answer
 * written whole: a client that reads as fast as the daemon writes drains
 * the socket within the same turn, so write()'s backpressure never gave
 * the loop a turn), and GET /v1/policies 100-220 ms. bench:daemon's
 * "reads" lines measure it (loop max 490 -> 12 ms there).
 *
 * Counted in turns of the event loop, not in milliseconds: a slice of 0 ms
 * gives a turn at every look at the clock.
 */
import { EventEmitter } from 'node:events';
import { request, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiHandler, makeServer, stream } from '../src/daemon/api.js';
import { runningConfigThreads } from '../src/config/running-async.js';
import { createMetrics, RULE_LINES_PER_PIECE } from '../src/daemon/metrics.js';
import { createLogger } from '../src/daemon/log.js';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';
import { uplinkFrame } from './helpers/packets.js';
import { parseIpv4Prefix } from '../src/sid/addr.js';

const isRoot = process.getuid?.() === 0;

/** Turns of the event loop while `work` runs: a setImmediate chain counting itself. */
async function turnsDuring<T>(work: () => Promise<T>): Promise<{ value: T; turns: number }> {
  let turns = 0;
  let done = false;
  const tick = (): void => {
    if (done) return;
    turns++;
    setImmediate(tick);
  };
  setImmediate(tick);
  try {
    return { value: await work(), turns };
  } finally {
    done = true;
  }
}

/** A response whose client takes everything at once: write() says "wait", and 'drain' comes before the loop runs again. */
class DrainingAtOnce extends EventEmitter {
  destroyed = false;
  readonly written: string[] = [];
  writeHead(): this {
    return this;
  }
  write(text: string): boolean {
    this.written.push(text);
    queueMicrotask(() => this.emit('drain'));
    return false;
  }
  end(text: string): void {
    this.written.push(text);
  }
}

describe('a streamed answer', () => {
  it('gives the loop a turn after each slice, also when the client drained the socket within the same turn', async () => {
    const pieces = Array.from({ length: 20 }, (_, i) => String.fromCharCode(97 + i).repeat(64 * 1024));
    const res = new DrainingAtOnce();
    const { turns } = await turnsDuring(() => stream(res as unknown as ServerResponse, 200, 'text/plain', pieces, 0));
    expect(res.written.join('')).toBe(pieces.join(''));
    // One write per piece (each is a whole PIECE), a turn after each: before, none (drain came at once).
    expect(turns).toBeGreaterThanOrEqual(pieces.length - 1);
  });

  it('sends what it has made when the slice is up, before a whole piece is made', async () => {
    const pieces = Array.from({ length: 50 }, (_, i) => `${i},`.repeat(300));
    const res = new DrainingAtOnce();
    const { turns } = await turnsDuring(() => stream(res as unknown as ServerResponse, 200, 'text/plain', pieces, 0));
    expect(res.written.join('')).toBe(pieces.join(''));
    // Each small piece written and followed by a turn: before, they waited for 64 KB (all of them, one write, no turn).
    expect(res.written.length).toBeGreaterThanOrEqual(pieces.length);
    expect(turns).toBeGreaterThanOrEqual(pieces.length - 1);
  });
});

describe.skipIf(!isRoot)('large reads of 9,000 rules', () => {
  const RULES = 9000;
  let run: InProcDaemon | undefined;
  beforeAll(async () => {
    // More policy places than one block of the per-function sums (SUM_SLICE, 8,192 slots): the sums are split.
    const lines = [`settings: { forwarding: tx, max_policies: 20000, max_localsids: 64 }`, 'policies:'];
    for (let i = 0; i < RULES; i++) lines.push(`  - { name: p${i}, match: 10.${i >> 8}.${i & 255}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`);
    lines.push('localsids:');
    for (let i = 0; i < 40; i++) lines.push(`  - { sid: "fc00:${i.toString(16)}::/48", src_prefix_len: 64 }`);
    run = await startInProcDaemon('lstyield', `${lines.join('\n')}\n`);
  }, 60_000);
  afterAll(() => run?.stop());

  it('is built in slices, the loop running between them, and lists what the one-turn read lists', async () => {
    const d = run!.daemon;
    const dp = d.dataplane;
    const cfg = (): ReturnType<typeof d.rules.effective> => d.rules.effective();
    // Packets on a few policies, the last of them past the first block of the sums.
    for (const i of [0, 1, RULES - 1]) expect(dp.run(uplinkFrame(`10.${i >> 8}.${i & 255}.5`)).verdict).toBe('tx');
    const { value, turns } = await turnsDuring(() => dp.countersRowsAsync(cfg, { rules: 'all', sliceMs: 0 }));
    const once = dp.countersRows(cfg, { rules: 'all' });
    expect(value.rules).toHaveLength(RULES + 40);
    expect([...value.rules]).toEqual([...once.rules]);
    expect(value.functions).toEqual(once.functions);
    // The sums cover every block (the last policy's id is past the first 8,192 slots).
    const perRule = [...value.rules].reduce((a, r) => a + r.packets, 0n);
    expect(perRule).toBe(3n);
    expect(value.functions.h_m_gtp4_d.packets).toBe(perRule);
    // The clock is looked at every 64 rules; with a slice of 0 ms each look gives a turn.
    expect(turns).toBeGreaterThanOrEqual(Math.floor((RULES + 40) / 64) - 1);
  });

  it('is read again in one go when a listed rule has an id given back meanwhile (and only then)', async () => {
    const d = run!.daemon;
    const dp = d.dataplane;
    const t = dp.rules;
    const cfg = (): ReturnType<typeof d.rules.effective> => d.rules.effective();
    // The tables keep the ids they give back: a real delete, its grace period and reclaim.
    const victim = { name: 'gone1', match: '10.251.0.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' };
    await d.putRule('policy', victim, 'add');
    const id = t.policyRule(parseIpv4Prefix(victim.match, 't'))!;
    const mark = t.idsReclaimed;
    await d.deleteRule('policy', { name: 'gone1' });
    for (let i = 0; i < 500 && t.idsReclaimed === mark; i++) await new Promise((r) => setTimeout(r, 2));
    expect(t.reclaimedSince(mark)).toContain(id);
    expect(t.reclaimedSince(mark - 1_000_000)).toBeUndefined();
    // Whether a read is made again, as if these ids had been given back during it.
    const once = dp.countersRows.bind(dp);
    let again = 0;
    Object.assign(dp, { countersRows: (...a: Parameters<typeof once>) => (again++, once(...a)) });
    const listedId = once(cfg, { rules: 1 }).rules.hasAnyId(new Set([t.policyRule(parseIpv4Prefix('10.0.0.0/24', 't'))!]));
    expect(listedId).toBe(true);
    try {
      for (const [since, reads] of [
        [[t.policyRule(parseIpv4Prefix('10.0.0.0/24', 't'))!], 1], // a listed rule's id: read again
        [[19_999], 0], // an id no listed rule has: the read stands
        [[], 0],
        [undefined, 1], // more given back than the tables keep: read again
      ] as const) {
        Object.assign(t, { reclaimedSince: () => since });
        again = 0;
        const rows = await dp.countersRowsAsync(cfg, { rules: 'all', sliceMs: 0 });
        expect(again, JSON.stringify(since)).toBe(reads);
        expect([...rows.rules]).toEqual([...once(cfg, { rules: 'all' }).rules]);
      }
      // No rule listed (/metrics' default read): an id given back alone does not read again, a local SID's
      // neither (the totals take its function from the tables, which keep it until the id is taken again);
      // counts moved into the retired slots during the read do (a rule slot read before its move and the
      // retired slot after it, or the other way round: a total off by the moved counts for one read).
      const localSidId = t.localsidRule(d.rules.effective().localsids[0]!.sid)!;
      expect(localSidId).toBeGreaterThanOrEqual(20_000);
      let moves = 0;
      for (const [since, moving, reads] of [
        [[localSidId], false, 0],
        [[t.policyRule(parseIpv4Prefix('10.0.0.0/24', 't'))!], false, 0],
        [[], true, 1],
      ] as const) {
        Object.assign(t, { reclaimedSince: () => since });
        if (moving) Object.defineProperty(t, 'countsMoved', { configurable: true, get: () => moves++ });
        again = 0;
        const none = await dp.countersRowsAsync(cfg, { rules: 'none', sliceMs: 0 });
        delete (t as unknown as Record<string, unknown>)['countsMoved'];
        expect(again, `rules none, ${JSON.stringify(since)}, counts moved ${moving}`).toBe(reads);
        expect(none.functions).toEqual(once(cfg, { rules: 'none' }).functions);
      }
    } finally {
      delete (t as unknown as Record<string, unknown>)['countsMoved'];
      delete (t as unknown as Record<string, unknown>)['reclaimedSince'];
      delete (dp as unknown as Record<string, unknown>)['countersRows'];
    }
  });

  it('the running config (GET /v1/config) is built off the event loop, and lists every rule', async () => {
    const d = run!.daemon;
    await d.putRule('policy', { name: 'api1', match: '10.250.0.0/24', sr_prefix: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' }, 'add');
    try {
      const { value, turns } = await turnsDuring(() => d.runningConfig({ origins: true }));
      // Before: built in one turn on this thread (bench:daemon's config held the loop 12.9 s).
      expect(turns).toBeGreaterThan(10);
      const yaml = JSON.parse(value.yamlJson.toString('utf8')) as string;
      expect(yaml.match(/origin: config/g)).toHaveLength(RULES + 40);
      expect(yaml.match(/origin: api/g)).toHaveLength(1);
      expect(yaml).toContain('name: api1');
      expect(value.apiChanges).toBe(1);
    } finally {
      await d.deleteRule('policy', { name: 'api1' });
    }
  });

  it('GET /v1/config whose client goes away stops the build, and the next one is answered', async () => {
    const d = run!.daemon;
    const logged: string[] = [];
    const log = createLogger({ instance: 'test', level: 'warn', json: true, stream: new Writable({ write: (c, _e, cb) => (logged.push(String(c)), cb()) }) });
    const server = makeServer(apiHandler({ daemon: d, metrics: createMetrics(d), log }));
    const socket = join(run!.dir, 'api.sock');
    await new Promise<void>((resolve) => server.listen(socket, resolve));
    const get = (): Promise<{ status: number | undefined; body: string }> =>
      new Promise((resolve, reject) => {
        const r = request({ socketPath: socket, path: '/v1/config' }, (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (b: string) => (body += b));
          res.on('end', () => resolve({ status: res.statusCode, body }));
        });
        r.on('error', reject);
        r.end();
      });
    const until = async (cond: () => boolean, what: string): Promise<void> => {
      for (let i = 0; i < 1000 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
      if (!cond()) throw new Error(`timed out waiting for ${what}`);
    };
    try {
      // An earlier build's thread exits a moment after its answer.
      await until(() => runningConfigThreads().live === 0, 'earlier threads to go');
      const before = runningConfigThreads();
      const client = connect(socket);
      client.on('error', () => undefined);
      client.write('GET /v1/config HTTP/1.1\r\nHost: x\r\n\r\n');
      // The build of 9,000 rules takes a second or so on its thread (flow-style entries: the `yaml` package's
      // document, not the splice): gone while it runs.
      await until(() => runningConfigThreads().live > 0, 'the build to start');
      client.destroy();
      await until(() => runningConfigThreads().live === 0, 'the thread to go');
      // Before: the thread built on to its end (live back to before only then) and was never counted abandoned.
      expect(runningConfigThreads().abandoned).toBe(before.abandoned + 1);
      const answer = await get();
      expect(answer.status).toBe(200);
      expect((JSON.parse(answer.body) as { yaml: string }).yaml.match(/origin: config/g)).toHaveLength(RULES + 40);
      expect(logged.filter((l) => l.includes('API request failed'))).toEqual([]);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it('a /metrics scrape with per_rule all makes its per-rule series in pieces as they are sent, the loop turning between them', async () => {
    // Before, prom-client made every series at once (and the scrape listed every rule's object first): with
    // 131,072 rules a turn of 1.2-1.3 s, and the daemon at 525 MB resident.
    const d = run!.daemon;
    const reg = createMetrics(d, { perRule: 'all' });
    const whole = await reg.metrics();
    const pieces = await reg.metricsPieces();
    const res = new DrainingAtOnce();
    const { turns } = await turnsDuring(() => stream(res as unknown as ServerResponse, 200, reg.contentType, pieces, 0));
    const text = res.written.join('');
    const ruleLines = (t: string): string[] => t.split('\n').filter((l) => /^mup_rule_(packets|bytes)_total\{/.test(l));
    // Every rule twice (packets, bytes), as the whole text has them, each metric's HELP and TYPE before its lines.
    expect(ruleLines(text)).toHaveLength(2 * (RULES + 40));
    expect(ruleLines(text)).toEqual(ruleLines(whole));
    expect(text).toContain('# TYPE mup_rule_packets_total counter\nmup_rule_packets_total{kind="policy",key="10.0.0.0/24",name="p0"} ');
    expect(text).toMatch(/^mup_rule_bytes_total\{kind="localsid",key="fc00:27::\/48",name=""\} 0$/m);
    // A turn after each piece of RULE_LINES_PER_PIECE lines (a slice of 0 ms).
    expect(turns).toBeGreaterThanOrEqual(Math.floor((2 * (RULES + 40)) / RULE_LINES_PER_PIECE) - 1);
  });

  it('through the daemon (GET /v1/counters): the same rows as counters()', async () => {
    const d = run!.daemon;
    const rows = await d.countersRowsAsync('all');
    expect([...rows.rules]).toEqual(d.counters('all').rules);
  });
});
