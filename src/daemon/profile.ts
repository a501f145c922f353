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
  /** Stop sampling and write the file. */
  stop(): Promise<void>;
}

export function startServingProfile(file: string | undefined, intervalUs = 500): ServingProfile | undefined {
  if (file === undefined || file === '') return undefined;
  const s = new Session();
  s.connect();
  const post = (method: string, params?: object): Promise<unknown> =>
    new Promise((resolve, reject) => s.post(method, params, (e, r) => (e === null ? resolve(r) : reject(e))));
  const started = post('Profiler.enable')
    .then(() => post('Profiler.setSamplingInterval', { interval: intervalUs }))
    .then(() => post('Profiler.start'));
  return {
    async stop() {
      await started;
      const r = (await post('Profiler.stop')) as { profile: unknown };
      writeFileSync(file, JSON.stringify(r.profile));
      s.disconnect();
    },
  };
}
