/**
 * The fill's write thread (src/dataplane/write-thread.ts) loads koffi, as
 * the grace clock's thread does, and a process that ended while such a
 * thread was in koffi's module init aborted (test/unit/grace-exit.test.ts).
 * The same guard: the exit waits for a load under way, and a thread not
 * started yet is told not to load. And a thread stopped, or one that ended,
 * answers no more: it is not ready, and it leaves the process. The child
 * is a file module running the compiled dist/ (make test builds it).
 */
import { describe, expect, it } from 'vitest';
import { runDistChild } from '../helpers/dist-child.js';

/** Run `source` as a file module in a child node (env added to this one's), fillWriteThread and WriteThread imported. */
function runChild(source: string, env: Record<string, string> = {}): string {
  return runDistChild({ fillWriteThread: 'dataplane/tables.js', WriteThread: 'dataplane/write-thread.js' }, source, env);
}

describe('the fill\'s write thread at exit', () => {
  it('a process that ends while the thread loads koffi waits for the load to end', () => {
    const out = runChild(
      `const w = fillWriteThread().start();
// Until the thread has begun its load (held 400 ms before koffi), then end.
for (let i = 0; i < 4000 && w.load === 'starting'; i++) await new Promise((r) => setTimeout(r, 5));
process.on('exit', () => process.stdout.write('at exit: ' + w.load + '\\n'));
`,
      { MUP_TEST_WRITE_THREAD_LOAD_DELAY_MS: '400' },
    );
    // Loaded: the exit waited. Without the wait the thread was stopped in its delay or in koffi's init.
    expect(out).toBe('at exit: ready\n');
  });

  it('a process that ends before the thread has started tells it not to load koffi', () => {
    const out = runChild(`const w = fillWriteThread().start();
process.on('exit', () => process.stdout.write('at exit: ' + w.load + '\\n'));
`);
    expect(out).toBe('at exit: failed\n');
  });

  it('a stopped thread is not ready and leaves the process; one that cannot load koffi is failed, never ready', () => {
    const out = runChild(
      `const w = fillWriteThread().start();
while (w.load === 'starting' || w.load === 'loading') await new Promise((r) => setTimeout(r, 5));
const before = [w.load, w.ready, WriteThread.live];
w.stop();
const stopped = w.ready;
for (let i = 0; i < 400 && WriteThread.live > 0; i++) await new Promise((r) => setTimeout(r, 5));
process.stdout.write(JSON.stringify({ before, stopped, live: WriteThread.live }) + '\\n');
`,
    );
    expect(JSON.parse(out)).toEqual({ before: ['ready', true, 1], stopped: false, live: 0 });
    const failed = runChild(
      `const w = fillWriteThread().start();
while (w.load === 'starting' || w.load === 'loading') await new Promise((r) => setTimeout(r, 5));
for (let i = 0; i < 400 && WriteThread.live > 0; i++) await new Promise((r) => setTimeout(r, 5));
process.stdout.write(JSON.stringify({ load: w.load, ready: w.ready, live: WriteThread.live }) + '\\n');
`,
      { MUP_TEST_WRITE_THREAD_KOFFI: '/nonexistent/koffi-for-a-test' },
    );
    expect(JSON.parse(failed)).toEqual({ load: 'failed', ready: false, live: 0 });
  });
});
