/**
 * A state file past V8's longest string (0x1fffffe8 characters, 512 MiB):
 * two million sessions' records reach it (about 244 bytes each). The file
 * was read as one string: the start failed with ERR_STRING_TOO_LONG,
 * naming neither file nor line, and the acknowledged changes in it could
 * not be replayed (found in review, session 42). It is read a line at a
 * time now. The records here are deletes padded to 1,000 bytes (a put is
 * validated as a rule, about 5 us each: two million of them would be the
 * test's whole budget); the reader does not care what a line holds.
 *
 * The writers' side (a rewrite, a compaction) joins its lines a block at a
 * time into Buffers (jsonLinesBytes): checked here byte for byte against
 * one string, on a small overlay.
 */
import { mkdtempSync, openSync, rmSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { jsonLinesBytes, StateStore, STATE_VERSION } from '../../src/daemon/rules.js';

const dir = mkdtempSync(join(tmpdir(), 'mup-state-large-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** V8's longest string, in UTF-16 units (Node 20). */
const LONGEST = 0x1fffffe8;

describe('a state file larger than the longest string', () => {
  it('is read line by line: every record replayed, none lost', () => {
    const path = join(dir, 'big.state.json');
    const header = `${JSON.stringify({ mup_state: STATE_VERSION, instance: 't', config: { file: 'c.yaml', sha256: '00'.repeat(32) }, savedAt: new Date(0).toISOString() })}\n`;
    const line = (i: number): string => {
      const head = JSON.stringify({ del: 'policy', key: `10.${(i >> 8) & 255}.${i & 255}.0/24`, pad: '' });
      return `${head.slice(0, -2)}${'x'.repeat(999 - head.length)}"}\n`;
    };
    expect(Buffer.byteLength(line(7))).toBe(1000);
    const n = Math.ceil(LONGEST / 1000) + 2_000;
    const fd = openSync(path, 'w');
    writeSync(fd, header);
    // Written in blocks of 1,000 records: 1 MB each.
    for (let at = 0; at < n; at += 1000) {
      const block: string[] = [];
      for (let i = at; i < Math.min(n, at + 1000); i++) block.push(line(i));
      writeSync(fd, block.join(''));
    }
    closeSync(fd);
    const got = new StateStore(path).read()!;
    expect(got.torn).toBe(false);
    // Every delete of a key (base absent: an older file) is kept; 65,536 distinct keys.
    expect(got.overlay.delPolicies.size).toBe(Math.min(n, 65_536));
    expect(got.overlay.delPolicies.has('10.255.255.0/24')).toBe(true);
    rmSync(path);
  }, 120_000);

  it('the writers: lines joined a block at a time are the bytes of one string', () => {
    const items = Array.from({ length: 10_007 }, (_, i) => ({ put: 'session', rule: { name: `s${i}`, ue: `10.0.${i >> 8}.${i & 255}/32`, note: i % 3 === 0 ? 'é€𝄞' : '' } }));
    const want = Buffer.from(items.map((x) => `${JSON.stringify(x)}\n`).join(''));
    for (const block of [1, 7, 4096, 20_000]) expect(jsonLinesBytes(items, block).equals(want)).toBe(true);
    expect(jsonLinesBytes([]).length).toBe(0);
  });
});
