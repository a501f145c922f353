/**
 * The fill's write thread (src/dataplane/write-thread.ts) loads koffi, as
 * the grace clock's thread does, and a process that ended while such a
 * thread was in koffi's module init aborted (test/unit/grace-exit.test.ts).
 * The same guard: the exit waits for a load under way, and a thread not
 * started yet is told not to load. And a thread stopped, or one that ended,
 * answers no more: it is not ready, and it leaves the process. The child
 * is a file module running the compiled dist/ (make test builds it).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const TABLES = join(ROOT, 'dist/dataplane/tables.js');
const THREAD = join(ROOT, 'dist/dataplane/write-thread.js');

function runChild(source: string, env: Record<string, string> = {}): string {
  if (!existsSync(TABLES)) throw new Error('dist/ is missing: run `make` (make test builds it)');
  const dir = mkdtempSync(join(tmpdir(), 'mup-write-exit-'));
  try {
    const child = join(dir, 'child.mjs');
    writeFileSync(
      child,
      `import { fillWriteThread } from ${JSON.stringify(pathToFileURL(TABLES).href)};\nimport { WriteThread } from ${JSON.stringify(pathToFileURL(THREAD).href)};\n${source}`,
    );
    return execFileSync(process.execPath, [child], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 30_000 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('the fill\'s write thread at exit', () => {
  it('a process that ends while the thread loads koffi waits for the load to end', () => {
    const out = runChild(
      `const w = fillWriteThread().start();
const nap = new Int32Array(new SharedArrayBuffer(4));
// Until the thread has begun its load (held 400 ms before koffi), then end.
await new Promise((r) => setTimeout(r, 100));
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
while (w.load === 'loading') await new Promise((r) => setTimeout(r, 5));
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
while (w.load === 'loading') await new Promise((r) => setTimeout(r, 5));
for (let i = 0; i < 400 && WriteThread.live > 0; i++) await new Promise((r) => setTimeout(r, 5));
process.stdout.write(JSON.stringify({ load: w.load, ready: w.ready, live: WriteThread.live }) + '\\n');
`,
      { MUP_TEST_WRITE_THREAD_KOFFI: '/nonexistent/koffi-for-a-test' },
    );
    expect(JSON.parse(failed)).toEqual({ load: 'failed', ready: false, live: 0 });
  });
});
