/**
 * Group commit of the state file (issue 19): concurrent API changes share
 * fdatasyncs, and none is answered before its record is durable.
 *
 * A real daemon process (no interfaces; its own bpffs and state file), N
 * changes sent at once on N connections of the unix socket. The fdatasyncs
 * are counted from outside, by strace attached to every thread of the
 * daemon (the syncs run on libuv's threadpool), not by the daemon's own
 * figures (those are checked against strace's). Then the daemon is killed
 * (SIGKILL: no chance to write anything more) and started again: every
 * change that was answered 2xx is there.
 * The daemon, strace, the bpffs and the directory go in afterEach.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { execa, type ResultPromise } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { TestDaemon } from './helpers/daemon.js';

const isRoot = process.getuid?.() === 0;
const hasStrace = execa('strace', ['-V'], { reject: false }).then((r) => r.exitCode === 0);

const CONFIG = `
settings: { max_policies: 1024, max_localsids: 1024 }
policies:
  - { name: c1, match: 10.0.1.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
`;
const N = 64;

const policy = (i: number): Record<string, unknown> => ({
  name: `gc-${i}`,
  match: `10.${100 + (i >> 8)}.${i & 255}.0/24`,
  sr_prefix: '2001:db8:1::/48',
  src_prefix: '2001:db8:ff::/64',
});

interface State {
  syncs: number;
  records: number;
}

describe.skipIf(!isRoot)('group commit: concurrent changes share an fdatasync, each durable before its answer', () => {
  let d: TestDaemon | undefined;
  let strace: ResultPromise | undefined;

  afterEach(async () => {
    if (strace !== undefined && strace.exitCode === null) {
      strace.kill('SIGINT');
      await strace;
    }
    strace = undefined;
    await d?.cleanup();
    d = undefined;
  });

  it(`${N} concurrent changes: fewer fdatasyncs than changes; all there after SIGKILL and a restart`, async () => {
    expect(await hasStrace, 'strace is installed (Makefile DEB_PKGS)').toBe(true);
    d = new TestDaemon({ config: CONFIG });
    await d.start();
    const state = async (): Promise<State> => ((await d!.api('GET', '/v1/status')).body as { state: State }).state;
    const before = await state();

    // strace on every thread of the daemon; ready once it says it attached.
    const out = `${d.dir}/strace.out`;
    strace = execa('strace', ['-f', '-qq', '-e', 'trace=fdatasync,fsync', '-o', out, '-p', String(d.pid)], { reject: false, all: true });
    // Every thread traced (the fdatasyncs run on libuv's pool threads, not the main one), polled to a
    // 30 s deadline: 50 polls of the main thread alone could end before strace -f got to them all.
    const traced = (): boolean => {
      try {
        return readdirSync(`/proc/${d!.pid}/task`).every((t) => /TracerPid:\s+[1-9]/.test(readFileSync(`/proc/${d!.pid}/task/${t}/status`, 'utf8')));
      } catch {
        return false;
      }
    };
    const deadline = Date.now() + 30_000;
    while (strace.exitCode === null && !traced() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(strace.exitCode, 'strace is running').toBeNull();

    const answers = await Promise.all(Array.from({ length: N }, (_, i) => d!.api('POST', '/v1/policies', { body: policy(i) })));
    strace.kill('SIGINT');
    await strace;
    strace = undefined;

    expect(answers.map((a) => a.status)).toEqual(Array.from({ length: N }, () => 201));
    const syncs = readFileSync(out, 'utf8')
      .split('\n')
      .filter((l) => /\bf(data)?sync\(/.test(l)).length;
    const after = await state();
    console.log(`group commit: ${N} concurrent changes, ${syncs} fdatasyncs seen by strace; the daemon counts ${after.syncs - before.syncs} syncs for ${after.records - before.records} records`);
    expect(syncs, 'at least one fdatasync (the records are made durable)').toBeGreaterThan(0);
    expect(syncs, 'fewer fdatasyncs than changes').toBeLessThan(N);
    expect(after.records - before.records).toBe(N);
    expect(after.syncs - before.syncs).toBe(syncs);

    // Every answered change survives a SIGKILL.
    await d.stop('SIGKILL');
    await d.start();
    const listed = (await d.api('GET', '/v1/policies')).body as { policies: { name?: string }[] };
    const names = new Set(listed.policies.map((p) => p.name));
    const missing = Array.from({ length: N }, (_, i) => `gc-${i}`).filter((n) => !names.has(n));
    expect(missing).toEqual([]);
  }, 90_000);

  it('a burst of deletes and replaces is durable in its order: the last word on each rule wins after a restart', async () => {
    d = new TestDaemon({ config: CONFIG });
    await d.start();
    const K = 16;
    const first = await Promise.all(Array.from({ length: K }, (_, i) => d!.api('POST', '/v1/policies', { body: policy(i) })));
    expect(first.map((a) => a.status)).toEqual(Array.from({ length: K }, () => 201));
    // Concurrently: delete the even ones, replace the odd ones (another sr_prefix).
    const second = await Promise.all(
      Array.from({ length: K }, (_, i) =>
        i % 2 === 0 ? d!.api('DELETE', `/v1/policies?name=gc-${i}`) : d!.api('PUT', '/v1/policies', { body: { ...policy(i), sr_prefix: '2001:db8:7::/48' } }),
      ),
    );
    expect(second.map((a) => a.status)).toEqual(Array.from({ length: K }, () => 200));
    await d.stop('SIGKILL');
    await d.start();
    const listed = ((await d.api('GET', '/v1/policies')).body as { policies: { name?: string; sr_prefix: string }[] }).policies;
    const got = listed.filter((p) => p.name?.startsWith('gc-')).map((p) => [p.name, p.sr_prefix]);
    expect(got.sort()).toEqual(
      Array.from({ length: K }, (_, i) => i)
        .filter((i) => i % 2 === 1)
        .map((i) => [`gc-${i}`, '2001:db8:7::/48'])
        .sort(),
    );
  }, 90_000);
});
