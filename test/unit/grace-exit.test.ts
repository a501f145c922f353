/**
 * A process that exits while the grace clock's thread is loading koffi
 * (src/dataplane/grace.ts) aborted now and then: node-addon-api's fatal
 * "Error::ThrowAsJavaScriptException napi_throw" from koffi's module init
 * in the terminating thread. `mup replay` met it twice in a clean clone's
 * `make test` (its fill flips and asks for a grace period nobody waits for,
 * and the command ends soon after); `request()` then an exit 0-150 ms later
 * aborted 2 times in 400 on this host. The exit now waits for the load.
 *
 * Made certain here: the thread is held 400 ms before it loads koffi
 * (MUP_TEST_GRACE_LOAD_DELAY_MS); the child waits until the thread has
 * started, then ends; an 'exit' handler registered after the clock's reads
 * whether the load had finished. The child is a file module running the
 * compiled dist/ (make test builds it), as the CLI is.
 */
import { describe, expect, it } from 'vitest';
import { runDistChild } from '../helpers/dist-child.js';

/** Run `source` as a file module in a child node (env added to this one's), graceClock imported; its stdout. */
function runChild(source: string, env: Record<string, string> = {}): string {
  return runDistChild({ graceClock: 'dataplane/grace.js' }, source, env);
}

describe('the grace clock at exit', () => {
  it('a process that ends while the thread loads koffi waits for the load to end', () => {
    const out = runChild(
      `graceClock.request();
const nap = new Int32Array(new SharedArrayBuffer(4));
for (let t = Date.now(); graceClock.loaded === 0 && Date.now() - t < 20000; ) Atomics.wait(nap, 0, 0, 5);
process.on('exit', () => process.stdout.write('at exit: ' + graceClock.loaded + '\\n'));
`,
      { MUP_TEST_GRACE_LOAD_DELAY_MS: '400' },
    );
    // 1: loaded. Before the fix 3: the thread was stopped in its delay (or, unlucky, in koffi's init).
    expect(out).toBe('at exit: 1\n');
  });

  it('a process that ends before the thread has started tells it not to load koffi, and a grace period asked for then runs on the exiting thread', () => {
    // The exit comes microseconds after the thread is asked for; a thread takes milliseconds to start.
    const out = runChild(`graceClock.start();
process.on('exit', () => {
  const state = graceClock.loaded;
  graceClock.waitSync(graceClock.request()); // an 'exit' listener that settles tables: must not hang
  process.stdout.write('at exit: ' + state + ', grace period ' + (graceClock.done(1) ? 'done' : 'not done') + '\\n');
});
`);
    // 4: told not to load. Without the exit's compare-and-swap: 0 (nobody told it); with it but without #failed's
    // check of it, the clock has no thread and the wait hangs.
    expect(out).toBe('at exit: 4, grace period done\n');
  });

  it('a thread that cannot load koffi: waitSync runs the grace period itself, it does not wait for ever', () => {
    // The thread's 'error' (which marks the clock dead) is not delivered while waitSync holds the loop: the wait
    // went on in 1 s steps for ever (this child was killed by the 30 s timeout). Now the load's failure is seen.
    const out = runChild(
      `const n = graceClock.request();
graceClock.waitSync(n);
process.stdout.write('loaded ' + graceClock.loaded + ', done ' + graceClock.done(n) + ', runs ' + graceClock.runs + '\\n');
`,
      { MUP_TEST_GRACE_KOFFI: '/nonexistent/koffi-for-a-test' },
    );
    // 2: LOAD_FAILED; the grace period run by the caller (#fallback) and counted.
    expect(out).toBe('loaded 2, done true, runs 1\n');
  });
});
