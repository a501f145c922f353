/**
 * The API's request body (readBody, src/daemon/api.ts), decoded piece by
 * piece as it arrives and joined once (a batch's 1.3-2 MB were copied into
 * one Buffer and decoded from it in two long turns): the same text as the
 * whole body decoded at once, whatever the pieces, a character split
 * between two of them included; the checks as before.
 */
import { Readable } from 'node:stream';
import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { readBody } from '../../src/daemon/api.js';

function request(pieces: readonly Buffer[], headers: Record<string, string> = { 'content-type': 'application/json' }): IncomingMessage {
  return Object.assign(Readable.from(pieces, { objectMode: false }), { headers }) as unknown as IncomingMessage;
}

describe('readBody', () => {
  it('a body cut anywhere, a multi-byte character between two pieces included, reads as the whole', async () => {
    const value = { operations: [{ op: 'delete', policy: { name: 'zürich-東京-🚀' } }], pad: 'x'.repeat(200_000) };
    const bytes = Buffer.from(JSON.stringify(value));
    const at = bytes.indexOf(Buffer.from('東'));
    for (const cuts of [[at + 1], [at + 2, at + 2 + 1], [bytes.indexOf(Buffer.from('🚀')) + 3], [1, 2, 3, 100_000]]) {
      const pieces = [...cuts, bytes.length].map((c, i, all) => bytes.subarray(i === 0 ? 0 : all[i - 1], c));
      expect(await readBody(request(pieces), 1 << 24)).toEqual(value);
    }
  });

  it('invalid UTF-8 split between pieces: as Buffer#toString decodes it whole', async () => {
    const bytes = Buffer.concat([Buffer.from('{"name":"a'), Buffer.from([0xe6, 0x9d]), Buffer.from('b"}')]);
    const whole = JSON.parse(bytes.toString('utf8')) as unknown;
    expect(await readBody(request([bytes.subarray(0, 11), bytes.subarray(11)]))).toEqual(whole);
  });

  it('still refuses what it refused: not JSON, a key given twice, over the limit, no JSON type', async () => {
    await expect(readBody(request([Buffer.from('{"a": 1,')]))).rejects.toThrow(/body is not valid JSON/);
    await expect(readBody(request([Buffer.from('{"a": 1, '), Buffer.from('"a": 2}')]))).rejects.toThrow(/a: key given twice/);
    await expect(readBody(request([Buffer.alloc(40, 0x20), Buffer.alloc(40, 0x20)]), 64)).rejects.toThrow(/over the 64-byte limit/);
    await expect(readBody(request([Buffer.from('{}')], {}))).rejects.toThrow(/Content-Type: application\/json/);
  });
});
