/**
 * scripts/vcpu-stalls.sh (`make stalls`, docs/bench.md "vCPU stalls and the
 * zero-loss rate"): it measures every CPU and puts the kernel's real-time
 * throttle back as it found it, also when the run is interrupted.
 */
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { describe, expect, it } from 'vitest';

const isRoot = process.getuid?.() === 0;
const THROTTLE = '/proc/sys/kernel/sched_rt_runtime_us';
const SCRIPT = new URL('../scripts/vcpu-stalls.sh', import.meta.url).pathname;

describe.skipIf(!isRoot)('scripts/vcpu-stalls.sh', () => {
  it('reports one line per CPU and leaves the real-time throttle as it was', () => {
    const before = readFileSync(THROTTLE, 'utf8').trim();
    const out = execFileSync(SCRIPT, ['1'], { encoding: 'utf8' });
    const lines = out.split('\n').filter((l) => /^cpu \d+, 1 s at SCHED_FIFO 50: longest gap \d+\.\d{3} ms; gaps >10us \d+/.test(l));
    expect(lines).toHaveLength(cpus().length);
    expect(readFileSync(THROTTLE, 'utf8').trim()).toBe(before);
  }, 60_000);

  it('puts the throttle back when interrupted mid-run', async () => {
    const before = readFileSync(THROTTLE, 'utf8').trim();
    const child = spawn(SCRIPT, ['30'], { stdio: ['ignore', 'pipe', 'pipe'] });
    // Wait until the run has started (the throttle lifted), then interrupt it.
    const deadline = Date.now() + 20_000;
    while (readFileSync(THROTTLE, 'utf8').trim() !== '-1' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(readFileSync(THROTTLE, 'utf8').trim()).toBe('-1');
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.kill('SIGINT');
    await new Promise((r) => child.once('exit', r));
    expect(readFileSync(THROTTLE, 'utf8').trim()).toBe(before);
    // The measuring thread was stopped, not left to finish its 30 s at real-time priority: no CPU's line was printed.
    expect(out).not.toMatch(/^cpu \d+, 30 s/m);
    expect(() => execFileSync('pgrep', ['-f', 'mup-vcpu-stalls'])).toThrow();
  }, 60_000);
});
