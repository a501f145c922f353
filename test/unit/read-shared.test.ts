/**
 * A reload's config bytes: read into a SharedArrayBuffer (readFileShared),
 * so the parser's thread is given them without a copy on the event loop,
 * and hashed in slices (sha256Async). Both must give exactly what the
 * plain read and hash give, at every size around their slices.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { parseConfigOffLoop } from '../../src/config/parse-async.js';
import { sha256, sha256Async } from '../../src/daemon/rules.js';
import { readFileShared } from '../../src/host/read-shared.js';

const dir = mkdtempSync(join(tmpdir(), 'mup-read-shared-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('readFileShared and sha256Async', () => {
  it.each([0, 1, 4095, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) - 7])('%i bytes: the same bytes, shared, the same digest', async (n) => {
    const file = join(dir, `f${n}`);
    const want = Buffer.alloc(n);
    for (let i = 0; i < n; i++) want[i] = (i * 131 + (i >> 12)) & 0xff;
    writeFileSync(file, want);
    const got = await readFileShared(file);
    // An empty file is read as readFile reads it (procfs files say they are empty too).
    if (n > 0) expect(got.buffer).toBeInstanceOf(SharedArrayBuffer);
    expect(got.equals(readFileSync(file))).toBe(true);
    expect(await sha256Async(got)).toBe(sha256(want));
  });

  it('a file whose size says 0 though it has bytes (procfs) is read whole, not retried for ever (found in review)', async () => {
    const got = await readFileShared('/proc/self/status');
    expect(got.toString('utf8')).toMatch(/^Name:\t.*\n[\s\S]*VmRSS:/);
  });

  it('a missing file is the read error, not an empty file', async () => {
    await expect(readFileShared(join(dir, 'nope'))).rejects.toThrow(/ENOENT/);
  });

  it('the parser thread reads shared bytes as it reads any: the same config', async () => {
    const text = 'settings: { max_policies: 8, max_localsids: 4 }\npolicies:\n  - { name: p0, match: 10.0.0.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n';
    const file = join(dir, 'c.yaml');
    writeFileSync(file, text);
    expect(await parseConfigOffLoop(await readFileShared(file), file)).toEqual(parseConfig(text, file));
  });
});
