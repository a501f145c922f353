/**
 * src/bgp/monitor-stream.ts: the monitor's stdout, cut into chunks anywhere
 * (as the reader thread gets it from the pipe), gives the same decoded lines
 * as decoding each captured line whole (test/fixtures/bgp, real gobgp 3.10
 * monitor output): lines split across chunks, a UTF-8 character split across
 * them, the empty first line of an empty table, a last line without newline.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { MonitorLines } from '../../src/bgp/monitor-stream.js';
import { decodeMonitorLine, type DecodedLine } from '../../src/bgp/routes.js';

const fixture = (name: string): string => readFileSync(new URL(`../fixtures/bgp/${name}`, import.meta.url), 'utf8');

/** Feed `text` in chunks of `size` bytes; the decoded lines, in order. */
function chunked(text: string | Buffer, size: number): DecodedLine[] {
  const buf = Buffer.isBuffer(text) ? text : Buffer.from(text, 'utf8');
  const m = new MonitorLines();
  const out: DecodedLine[] = [];
  for (let i = 0; i < buf.length; i += size) out.push(...m.push(buf.subarray(i, i + size)));
  out.push(...m.end());
  return out;
}

const whole = (text: string): DecodedLine[] => text.split('\n').slice(0, text.endsWith('\n') ? -1 : undefined).map((l) => decodeMonitorLine(l));

describe('MonitorLines: chunks in, decoded lines out', () => {
  for (const name of ['received.jsonl', 'local.jsonl', 'gr-stale.jsonl']) {
    it(`${name}: every chunk size gives the lines decoded whole`, () => {
      const text = fixture(name);
      const want = whole(text);
      expect(want.flatMap((d) => d.routes).length).toBeGreaterThan(0);
      for (const size of [1, 2, 3, 7, 64, 333, 4096, 65536]) expect(chunked(text, size)).toEqual(want);
    });
  }

  it('several lines in one chunk, a line over many chunks', () => {
    const lines = fixture('received.jsonl').split('\n').filter((l) => l !== '');
    const big = `[${lines.map((l) => l.slice(1, -1)).filter((x) => x !== '').join(',')}]`;
    const text = `${big}\n${lines[1]}\n${lines[2]}\n`;
    const want = [decodeMonitorLine(big), decodeMonitorLine(lines[1]!), decodeMonitorLine(lines[2]!)];
    expect(want[0]!.routes.length).toBeGreaterThan(10);
    expect(chunked(text, 100)).toEqual(want);
    expect(chunked(text, text.length)).toEqual(want);
  });

  it('an empty line (the --current table of an empty RIB) is a line', () => {
    const m = new MonitorLines();
    expect(m.push(Buffer.from('\n'))).toEqual([{ routes: [], rejected: [], skipped: 0 }]);
    expect(m.lines).toBe(1);
  });

  it('a multi-byte UTF-8 character split between two chunks is read whole (a rejected path shows it)', () => {
    const line = '[{"nlri":{"arch_type":1,"route_type":9,"value":{"rd":"é€"}},"attrs":[{"type":14,"afi":1,"safi":85}]}]\n';
    const buf = Buffer.from(line, 'utf8');
    const want = [decodeMonitorLine(line.trimEnd())];
    expect(want[0]!.rejected).toHaveLength(1);
    for (let cut = 1; cut < buf.length; cut++) {
      const m = new MonitorLines();
      const got = [...m.push(buf.subarray(0, cut)), ...m.push(buf.subarray(cut)), ...m.end()];
      expect(got).toEqual(want);
    }
  });

  it('a last line without newline comes at the end; CRLF and bad JSON are handled', () => {
    const lines = fixture('received.jsonl').split('\n').filter((l) => l !== '');
    expect(chunked(`${lines[0]}\r\n${lines[1]}`, 50)).toEqual([decodeMonitorLine(lines[0]!), decodeMonitorLine(lines[1]!)]);
    const bad = chunked('{"not": "an array"}\n[{\n', 5);
    expect(bad.map((d) => d.rejected.length)).toEqual([1, 1]);
  });
});
