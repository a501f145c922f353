/**
 * A start's config read (Daemon.#readConfig): the bytes over a
 * SharedArrayBuffer (readFileSharedSync), hashed on a thread (sha256Soon)
 * and deflated on the threadpool (deflateSoon) while the event loop's
 * thread parses them. Each must give exactly what the plain read, hash and
 * deflate give, and the thread's and the pool's work must finish even when
 * this thread stays busy meanwhile (a synchronous parse turns no loop).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inflateRawSync } from 'node:zlib';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { deflateSoon, KeptText } from '../../src/daemon/kept-text.js';
import { sha256 } from '../../src/daemon/rules.js';
import { readFileSharedSync, readHead } from '../../src/host/read-shared.js';
import { parseConfig, peekSettings } from '../../src/config/load.js';
import { SHA_THREAD_FROM, sha256Soon } from '../../src/host/sha-thread.js';

/** The options of each zlib.deflateRaw call (the module is the real one, watched). */
const deflateOptions = vi.hoisted(() => [] as { chunkSize?: number }[]);
vi.mock('node:zlib', async (real) => {
  const z = await real<typeof import('node:zlib')>();
  return {
    ...z,
    deflateRaw: (...a: Parameters<typeof z.deflateRaw>) => {
      deflateOptions.push(a[1] as { chunkSize?: number });
      return (z.deflateRaw as (...b: unknown[]) => void)(...a);
    },
  };
});

const dir = mkdtempSync(join(tmpdir(), 'mup-start-read-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function bytesOf(n: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = (i * 131 + (i >> 12)) & 0xff;
  return b;
}

/** Bytes deflate cannot shrink (xorshift). */
function noise(n: number): Buffer {
  const b = Buffer.alloc(n);
  let x = 0x9e3779b9;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    b[i] = x & 0xff;
  }
  return b;
}

function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

describe('readFileSharedSync', () => {
  it.each([0, 1, 4095, 1 << 20, SHA_THREAD_FROM + 3])('%i bytes: the same bytes, shared', (n) => {
    const file = join(dir, `f${n}`);
    writeFileSync(file, bytesOf(n));
    const got = readFileSharedSync(file);
    if (n > 0) expect(got.buffer).toBeInstanceOf(SharedArrayBuffer);
    expect(got.equals(readFileSync(file))).toBe(true);
  });

  it('a file whose size says 0 though it has bytes (procfs) is read whole', () => {
    expect(readFileSharedSync('/proc/self/status').toString('utf8')).toMatch(/^Name:\t.*\n[\s\S]*VmRSS:/);
  });

  it('a missing file is the read error', () => {
    expect(() => readFileSharedSync(join(dir, 'nope'))).toThrow(/ENOENT/);
  });
});

describe('sha256Soon', () => {
  it.each([
    ['small, shared', 100, true],
    ['large, shared (the thread)', SHA_THREAD_FROM + 5, true],
    ['large, not shared (here)', SHA_THREAD_FROM + 5, false],
  ] as const)('%s: the digest of the bytes', async (_, n, shared) => {
    const want = bytesOf(n);
    const bytes = shared ? Buffer.from(new SharedArrayBuffer(n)) : Buffer.alloc(n);
    want.copy(bytes);
    const p = sha256Soon(bytes);
    busy(50);
    expect(await p).toBe(sha256(want));
  });

  it('a view into a larger shared buffer hashes the view only', async () => {
    const sab = Buffer.from(new SharedArrayBuffer(SHA_THREAD_FROM + 100));
    bytesOf(sab.length).copy(sab);
    const view = sab.subarray(7, SHA_THREAD_FROM + 50);
    expect(await sha256Soon(view)).toBe(sha256(Buffer.from(view)));
  });
});

describe('deflateSoon', () => {
  it('below the size kept as it is: undefined (the caller sets the bytes)', async () => {
    expect(await deflateSoon(Buffer.from('policies: []\n'))).toBeUndefined();
  });

  it.each([
    ['compressible', (n: number) => Buffer.from('- { name: p1, match: 10.0.0.0/24 }\n'.repeat(Math.ceil(n / 36)).slice(0, n))],
    ['incompressible', noise],
  ] as const)('%s bytes: in one piece, and inflated back to the same bytes', async (_, make) => {
    const bytes = make(3 << 20);
    const calls = deflateOptions.length;
    const p = deflateSoon(bytes);
    // One output piece with room for the whole (zlib's deflateBound: 5 bytes a 16 KB block, and a little):
    // in its default 16 KB pieces the stream came back to the event loop for each, which a loop busy with a
    // synchronous parse does not turn, so the deflate waited for the parse's end.
    expect(deflateOptions.length).toBe(calls + 1);
    expect(deflateOptions[calls]!.chunkSize).toBeGreaterThanOrEqual(bytes.length + Math.ceil(bytes.length / 16384) * 5 + 64);
    busy(100);
    const out = await p;
    expect(out).toBeDefined();
    expect(inflateRawSync(out!).equals(bytes)).toBe(true);
    const kept = new KeptText();
    kept.setDeflated(out!);
    expect(kept.heldText().deflated).toBe(out);
    // Kept in a buffer of its own size about (not a view of the input-sized output buffer: found in review).
    expect(out!.buffer.byteLength).toBeLessThanOrEqual(2 * out!.length + 8192);
  });
});

describe('readHead', () => {
  it('a file larger than the head: its first lines, cut after the last newline in the head, and its size', () => {
    const file = join(dir, 'head.yaml');
    const lines = Array.from({ length: 100 }, (_, i) => `line ${i} ${'x'.repeat(i % 7)}\n`).join('');
    writeFileSync(file, lines);
    const h = readHead(file, 100);
    expect(h).toBeDefined();
    expect(h!.size).toBe(Buffer.byteLength(lines));
    expect(lines.startsWith(h!.text)).toBe(true);
    expect(h!.text.endsWith('\n')).toBe(true);
    expect(h!.text.length).toBeLessThanOrEqual(100);
    // The next line does not fit in the 100 bytes.
    expect(h!.text.length + lines.slice(h!.text.length).indexOf('\n') + 1).toBeGreaterThan(100);
  });

  it('no newline in the head (a minified JSON file): the head as it is, and its settings read from it', () => {
    const file = join(dir, 'min.json');
    const text = JSON.stringify({ settings: { max_policies: 2000 }, policies: Array.from({ length: 50 }, (_, i) => ({ match: `10.0.${i}.0/24` })) });
    writeFileSync(file, text);
    const h = readHead(file, 200);
    expect(h?.text).toBe(text.slice(0, 200));
    expect(peekSettings(h!.text, false)).toEqual(parseConfig('{"settings": {"max_policies": 2000}}', 'x.json').settings);
    // Cut inside the settings: nothing read from it.
    expect(peekSettings(readHead(file, 20)!.text, false)).toBeUndefined();
  });

  it('UTF-8 cut at a newline only: no character split', () => {
    const file = join(dir, 'utf8.yaml');
    const text = `${'é'.repeat(40)}\n${'ü'.repeat(200)}\n`;
    writeFileSync(file, text);
    expect(readHead(file, 100)?.text).toBe(`${'é'.repeat(40)}\n`);
  });

  it.each([
    ['a file no larger than the head (read it whole)', (f: string) => writeFileSync(f, 'policies: []\n'), 100],
    ['a missing file (its whole read says why)', () => undefined, 100],
  ] as const)('%s: undefined', (_what, make, max) => {
    const file = join(dir, `none-${Math.random()}`);
    make(file);
    expect(readHead(file, max)).toBeUndefined();
  });
});
