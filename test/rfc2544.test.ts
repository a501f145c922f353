/**
 * The RFC 2544 benchmark end to end, tiny: its namespaces, the live-frame
 * generator, the translator (and the XDP L3FWD baseline) on the device
 * under test and the counting sink. At a low rate every frame sent must be
 * counted at the sink, translated as expected (the sink checks every frame).
 * No timed assertions. Everything is removed in afterAll, also on failure;
 * and a benchmark interrupted with SIGINT removes its namespaces.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { caseSetup, translatorConfig, type CaseName } from '../src/bench/rfc2544/cases.js';
import { attachXdp, Generator, L3fwd, L3FWD_OBJECT, Sink, SINK_OBJECT, TRAFFICGEN_OBJECT } from '../src/bench/rfc2544/generator.js';
import { BENCH_NETNS_PREFIX, BenchLab } from '../src/bench/rfc2544/lab.js';
import { runTrial } from '../src/bench/rfc2544/search.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const objects = [DEFAULT_OBJECT, TRAFFICGEN_OBJECT, SINK_OBJECT, L3FWD_OBJECT];
const ready = process.getuid?.() === 0 && objects.every((o) => existsSync(o));
if (!ready) console.warn(`*** SKIPPING test/rfc2544.test.ts: needs root and ${objects.join(', ')} (make bpf)`);

async function benchNamespaces(pid: number): Promise<string[]> {
  const r = await execa('ip', ['netns', 'list']);
  return r.stdout.split('\n').map((l) => l.split(' ')[0] ?? '').filter((n) => n.startsWith(`${BENCH_NETNS_PREFIX}${pid}-`));
}

describe.skipIf(!ready)('RFC 2544 benchmark in namespaces', () => {
  let lab: BenchLab | undefined;
  let dp: Dataplane | undefined;
  let l3: L3fwd | undefined;
  const sinks: Partial<Record<'a' | 'b', Sink>> = {};
  const gens: Partial<Record<'a' | 'b', Generator>> = {};

  beforeAll(async () => {
    lab = await BenchLab.create('t');
    sinks.a = new Sink();
    sinks.b = new Sink();
    gens.a = new Generator();
    gens.b = new Generator();
    l3 = new L3fwd();
    dp = openDataplane({ config: translatorConfig() });
    sinks.a.attach('ea', lab.a);
    sinks.b.attach('eb', lab.b);
  });

  afterAll(async () => {
    // Namespaces first (that detaches everything), then the objects; each step even if another fails.
    const errors: unknown[] = [];
    await lab?.destroy().catch((e: unknown) => errors.push(e));
    for (const c of [dp, l3, sinks.a, sinks.b, gens.a, gens.b]) {
      try {
        c?.close();
      } catch (e) {
        errors.push(e);
      }
    }
    expect(await benchNamespaces(process.pid)).toEqual([]);
    if (errors.length > 0) throw errors[0];
  });

  it.each<[CaseName, 'translator' | 'l3fwd']>([
    ['uplink', 'translator'],
    ['downlink', 'translator'],
    ['xdp-l3fwd', 'l3fwd'],
  ])('%s: every frame sent at a low rate is counted at the sink, as expected', async (name, prog) => {
    const L = lab!;
    const fd = prog === 'translator' ? dp!.progFd : l3!.fwdFd;
    attachXdp(fd, 'da', L.dut);
    attachXdp(fd, 'db', L.dut);
    const setup = caseSetup(name, 64, 16);
    const s = setup.streams[0]!;
    const rx = s.from === 'a' ? 'b' : 'a';
    gens[s.from]!.configure(s.gen, s.from === 'a' ? 'ea' : 'eb', s.from === 'a' ? L.a : L.b);
    sinks[rx]!.expect(rx === 'a' ? 'ea' : 'eb', rx === 'a' ? L.a : L.b, 0, s.checks, s.minLen);
    sinks[rx]!.reset();
    const r = await runTrial(
      {
        send: (n) => gens[s.from]!.send(n),
        received: () => sinks[rx]!.read(0).frames,
        settle: () => new Promise((res) => setTimeout(res, 100)),
      },
      { rate: 20_000, durationMs: 300, batch: 256 },
    );
    expect(r.sent).toBeGreaterThan(0);
    expect(r.received).toBe(r.sent);
    expect(r.lost).toBe(0);
    expect(gens[s.from]!.programCount()).toBeGreaterThanOrEqual(r.sent);
  });

  it('a benchmark interrupted with SIGINT removes its namespaces and says so', async () => {
    const out = mkdtempSync(join(tmpdir(), 'mup-rfc2544-'));
    try {
      await interrupted(out);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });

  async function interrupted(out: string): Promise<void> {
    const proc = execa(join(ROOT, 'node_modules/.bin/tsx'), ['src/bench/rfc2544/main.ts', '--sizes', '64', '--cases', 'uplink', '--trial', '30', '--out', out], {
      cwd: ROOT,
      reject: false,
      timeout: 50_000,
    });
    let err = '';
    await new Promise<void>((resolve, reject) => {
      proc.stderr?.on('data', (c: Buffer) => {
        err += c.toString();
        // The search has started: a trial of 30 s is running.
        if (/check \d+\/\d+ ok/.test(err)) resolve();
      });
      proc.then(() => reject(new Error(`benchmark exited before its first trial: ${err}`)), reject);
    });
    // tsx -> node: signal the node process that runs the benchmark (the one that owns the namespaces).
    const names = (await execa('ip', ['netns', 'list'])).stdout.split('\n').map((l) => l.split(' ')[0] ?? '');
    // Only the benchmark this test started (tsx's child): other benchmarks may run on this machine.
    const parent = (pid: number): number => {
      try {
        return Number(/^\d+ \(.*\) \S+ (\d+)/s.exec(readFileSync(`/proc/${pid}/stat`, 'utf8'))?.[1]);
      } catch {
        return -1;
      }
    };
    const owner = names.map((n) => new RegExp(`^${BENCH_NETNS_PREFIX}(\\d+)-`).exec(n)?.[1]).find((p) => p !== undefined && parent(Number(p)) === proc.pid);
    expect(owner).toBeDefined();
    process.kill(Number(owner), 'SIGINT');
    const r = await proc;
    expect(r.exitCode).toBe(2);
    expect(String(r.stderr)).toMatch(/interrupted/);
    expect(await benchNamespaces(Number(owner))).toEqual([]);
  }
});
