/**
 * sha256OfFile: a reload asks whether its file changed by hashing it a
 * piece at a time (an unchanged file is no longer read whole: 18 MB more
 * resident after a reload of bench:daemon's unchanged 11.6 MB config). Its
 * hash is the one of the whole file's bytes, at every size around the
 * piece's, and a missing file is an error, not a hash.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FILE_HASH_CHUNK, sha256OfFile } from '../../src/daemon/rules.js';

const dir = mkdtempSync(join(tmpdir(), 'mup-filesha-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('sha256OfFile', () => {
  const C = FILE_HASH_CHUNK;
  it.each([0, 1, C - 1, C, C + 1, 3 * C + 17])('is the SHA-256 of the whole file (%i bytes)', async (n) => {
    const bytes = randomBytes(n);
    const file = join(dir, `f${n}`);
    writeFileSync(file, bytes);
    expect(await sha256OfFile(file)).toBe(createHash('sha256').update(bytes).digest('hex'));
  });

  it('refuses a file it cannot read', async () => {
    await expect(sha256OfFile(join(dir, 'missing'))).rejects.toThrow(/ENOENT/);
  });
});
