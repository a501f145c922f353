/**
 * A CPU profile of the serving daemon, for bench:daemon --cpu-prof: with
 * MUP_CPU_PROFILE=FILE in its environment the daemon starts V8's sampling
 * profiler once it serves (after the program is loaded: the profiler's
 * SIGPROF interrupts the kernel's verifier, and BPF_PROG_LOAD gives up with
 * EAGAIN) and writes FILE (.cpuprofile, for Chrome DevTools or
 * src/bench/long-turns.ts) when it stops.
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';

export interface ServingProfile {
  /** Stop sampling and write the file; a failure is returned, not thrown (a profile never fails the daemon's stop). */
  stop(): Promise<Error | undefined>;
}

export function startServingProfile(file: string | undefined, intervalUs = 500): ServingProfile | undefined {
  if (file === undefined || file === '') return undefined;
  const s = new Session();
  s.connect();
  const post = (method: string, params?: object): Promise<unknown> =>
    new Promise((resolve, reject) => s.post(method, params, (e, r) => (e === null ? resolve(r) : reject(e))));
  const started: Promise<Error | undefined> = post('Profiler.enable')
    .then(() => post('Profiler.setSamplingInterval', { interval: intervalUs }))
    .then(() => post('Profiler.start'))
    .then(
      () => undefined,
      (e: unknown) => new Error(`MUP_CPU_PROFILE: the profiler did not start: ${(e as Error).message}`),
    );
  return {
    async stop() {
      const notStarted = await started;
      try {
        if (notStarted !== undefined) return notStarted;
        const r = (await post('Profiler.stop')) as { profile: unknown };
        writeFileSync(file, JSON.stringify(r.profile));
        return undefined;
      } catch (e) {
        return new Error(`MUP_CPU_PROFILE: ${file} not written: ${(e as Error).message}`);
      } finally {
        s.disconnect();
      }
    },
  };
}
