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
import { DEFAULT_OBJECT } from '../src/dataplane/index.js';
import type { CaseName } from '../src/bench/rfc2544/cases.js';
import { attachXdp, L3FWD_OBJECT, SINK_OBJECT, TRAFFICGEN_OBJECT } from '../src/bench/rfc2544/generator.js';
import { BENCH_NETNS_PREFIX } from '../src/bench/rfc2544/lab.js';
import { runTrial } from '../src/bench/rfc2544/search.js';
import { closeBenchRig, openBenchRig, streamIo, type BenchRig } from './helpers/bench-rig.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const objects = [DEFAULT_OBJECT, TRAFFICGEN_OBJECT, SINK_OBJECT, L3FWD_OBJECT];
const ready = process.getuid?.() === 0 && objects.every((o) => existsSync(o));
if (!ready) console.warn(`*** SKIPPING test/rfc2544.test.ts: needs root and ${objects.join(', ')} (make bpf)`);

/** Whether `pid`'s chain of parents (/proc/PID/stat) reaches `ancestor`. */
function descends(pid: number, ancestor: number): boolean {
  for (let p = pid, hops = 0; p > 1 && hops < 32; hops++) {
    if (p === ancestor) return true;
    try {
      // "PID (comm) STATE PPID ...": comm may hold spaces, so read after the last ')'.
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      p = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    } catch {
      return false;
    }
  }
  return false;
}

async function benchNamespaces(pid: number): Promise<string[]> {
  const r = await execa('ip', ['netns', 'list']);
  return r.stdout.split('\n').map((l) => l.split(' ')[0] ?? '').filter((n) => n.startsWith(`${BENCH_NETNS_PREFIX}${pid}-`));
}

describe.skipIf(!ready)('RFC 2544 benchmark in namespaces', () => {
  let rig: BenchRig | undefined;

  beforeAll(async () => {
    rig = await openBenchRig('t', { withL3fwd: true });
  });

  afterAll(async () => {
    try {
      await closeBenchRig(rig);
    } finally {
      expect(await benchNamespaces(process.pid)).toEqual([]);
    }
  });

  it.each<[CaseName, 'translator' | 'l3fwd']>([
    ['uplink', 'translator'],
    ['downlink', 'translator'],
    ['xdp-l3fwd', 'l3fwd'],
  ])('%s: every frame sent at a low rate is counted at the sink, as expected', async (name, prog) => {
    const R = rig!;
    const fd = prog === 'translator' ? R.dp.progFd : R.l3!.fwdFd;
    attachXdp(fd, 'da', R.lab.dut);
    attachXdp(fd, 'db', R.lab.dut);
    const io = streamIo(R, name);
    io.sink.reset();
    const r = await runTrial(io, { rate: 20_000, durationMs: 300, batch: 256 });
    expect(r.sent).toBeGreaterThan(0);
    expect(r.received).toBe(r.sent);
    expect(r.lost).toBe(0);
    expect(io.gen.programCount()).toBeGreaterThanOrEqual(r.sent);
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
    // Only a descendant of the process this test started: other benchmarks may run on the machine.
    const owner = names
      .map((n) => new RegExp(`^${BENCH_NETNS_PREFIX}(\\d+)-`).exec(n)?.[1])
      .find((p) => p !== undefined && proc.pid !== undefined && descends(Number(p), proc.pid));
    expect(owner).toBeDefined();
    process.kill(Number(owner), 'SIGINT');
    const r = await proc;
    expect(r.exitCode).toBe(2);
    expect(String(r.stderr)).toMatch(/interrupted/);
    expect(await benchNamespaces(Number(owner))).toEqual([]);
  }
});
