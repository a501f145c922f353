/**
 * src/bgp/monitor-stream.ts: the monitor's stdout, cut into chunks anywhere
 * (as the reader thread gets it from the pipe), gives the same decoded lines
 * as decoding each captured line whole (test/fixtures/bgp, real gobgp 3.10
 * monitor output): lines split across chunks, a UTF-8 character split across
 * them, the empty first line of an empty table, a last line without newline.
 * And the table read (`gobgp global rib -a mup-ipv4 -j`, one JSON object,
 * rib-mup-ipv4.json captured from gobgpd 3.10 with one destination holding
 * two paths) cut the same way: each destination's best path decoded, gobgp's
 * error object and output that is no table given as errors.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { MonitorLines, RibDump } from '../../src/bgp/monitor-stream.js';
import { decodeMonitorLine, decodePaths, type DecodedLine } from '../../src/bgp/routes.js';

const fixture = (name: string): string => readFileSync(new URL(`../fixtures/bgp/${name}`, import.meta.url), 'utf8');

/** Feed `text` to a reader in chunks of `size` bytes; what it decoded, in order. */
function fed(reader: MonitorLines | RibDump, text: string | Buffer, size: number): DecodedLine[] {
  const buf = Buffer.isBuffer(text) ? text : Buffer.from(text, 'utf8');
  const out: DecodedLine[] = [];
  for (let i = 0; i < buf.length; i += size) out.push(...reader.push(buf.subarray(i, i + size)));
  out.push(...reader.end());
  return out;
}

/** The monitor's stdout in chunks: the decoded lines. */
const chunked = (text: string | Buffer, size: number): DecodedLine[] => fed(new MonitorLines(), text, size);

const whole = (text: string): DecodedLine[] => text.split('\n').slice(0, text.endsWith('\n') ? -1 : undefined).map((l) => decodeMonitorLine(l));

describe('MonitorLines: a line longer than it takes (found in review, session 42: grew until the thread failed)', () => {
  it('is dropped as one that is no list of paths; the lines around it are read', () => {
    const text = fixture('received.jsonl');
    const lines = text.split('\n').filter((l) => l !== '');
    const max = Math.max(...lines.map((l) => l.length));
    const long = `[${'x'.repeat(max + 100)}]`;
    const input = `${lines[0]}\n${long}\n${lines[1]}\n${long}`; // the last without its newline
    for (const size of [7, 333, 65536]) {
      const got = fed(new MonitorLines(max + 10), input, size);
      expect(got.map((d) => d.notPaths ?? 'paths')).toEqual(['paths', `a line longer than ${max + 10} characters, dropped`, 'paths', `a line longer than ${max + 10} characters, dropped`]);
      expect(got[0]).toEqual(decodeMonitorLine(lines[0]!));
      expect(got[2]).toEqual(decodeMonitorLine(lines[1]!));
    }
  });
});

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

/** A table read in chunks: its decoded destinations (and error lines). */
const dumped = (text: string | Buffer, size: number): DecodedLine[] => fed(new RibDump(), text, size);

describe('RibDump: a `gobgp global rib -j` table in chunks, destinations out', () => {
  it('rib-mup-ipv4.json: every chunk size gives each destination decoded whole, its best path only', () => {
    const text = fixture('rib-mup-ipv4.json');
    const table = JSON.parse(text) as Record<string, unknown[]>;
    const want = Object.values(table).map((paths) => decodePaths(paths, true));
    expect(want).toHaveLength(7);
    for (const size of [1, 2, 3, 7, 64, 333, 4096, 65536]) expect(dumped(text, size)).toEqual(want);
    const routes = want.flatMap((d) => d.routes);
    // The T2ST of TEID 65536 has two paths: ours (best) and the injector's (not best, not read).
    const t2 = routes.filter((r) => r.key === '[type:t2st][rd:10.255.0.9:1][endpoint:192.0.2.10][teid:65536]');
    expect(t2).toHaveLength(1);
    expect(t2[0]!.sourceId).toBeUndefined();
    expect(want.reduce((n, d) => n + d.skipped, 0)).toBe(1);
    expect(routes.filter((r) => r.sourceId === '10.255.0.9')).toHaveLength(5);
  });

  it('keys with brackets, braces and escaped quotes, split at every byte', () => {
    const paths = (JSON.parse(fixture('rib-mup-ipv4.json')) as Record<string, unknown[]>)['[type:t1st][rd:10.255.0.9:1][prefix:10.64.0.0/32]']!;
    const text = JSON.stringify({ 'a[{"]}\\': paths, '[x]': paths, 'b': [] }) + '\n';
    const want = [decodePaths(paths, true), decodePaths(paths, true), decodePaths([], true)];
    expect(want[0]!.routes).toHaveLength(1);
    for (let size = 1; size <= 17; size++) expect(dumped(text, size)).toEqual(want);
  });

  it('an empty table ({} or null) is no destination and no error', () => {
    for (const t of ['{}\n', 'null\n', ' { } ']) expect(dumped(t, 1)).toEqual([]);
  });

  it("gobgp's failure and output that is no table are errors, not an empty table", () => {
    expect(dumped('{"error":"context deadline exceeded"}\n', 5)).toEqual([{ routes: [], rejected: [], skipped: 0, error: 'context deadline exceeded' }]);
    expect(dumped('Network not in table\n', 4)[0]!.error).toMatch(/^not a table: "Network not in table"/);
    expect(dumped('', 4)[0]!.error).toMatch(/^not a table/);
    expect(dumped('[[]]', 1)[0]!.error).toMatch(/^not a table/);
    // Objects that are not tables of destinations (each would have been an empty table: every learned route withdrawn).
    for (const [t, why] of [
      ['{"a":"x"}', /"a" is a string/],
      ['{"error":{"m":1}}', /"error" is an object/],
      ['{"a":1}', /"a" is "1"/],
      ['{"a":true,"b":[]}', /"a" is "true"/],
      ['{} junk', /text after the table/],
      ['{}{}', /text after the table/],
      // Strings JSON.parse refuses: thrown before, they ended the reader thread (found in review, session 42).
      ['{"10.0.0.0/24\\x":[]}', /a string that is not JSON/],
      ['{"error":"bad \\q escape"}', /a string that is not JSON/],
      ['{"k\u0001":[]}', /a string that is not JSON/],
    ] as const) {
      for (const size of [1, 3, 100]) expect(dumped(t, size).at(-1)!.error, t).toMatch(why);
    }
    expect(dumped('{"x":null}', 1)).toEqual([]); // a destination without paths (Go's nil slice)
    const text = fixture('rib-mup-ipv4.json');
    const cut = dumped(text.slice(0, Math.floor(text.length / 2)), 100);
    expect(cut.at(-1)!.error).toMatch(/ended before its closing brace/);
  });

  it('a monitor line of gobgp\'s failure decodes as an error, not as paths', () => {
    expect(decodeMonitorLine('{"error":"rpc error: code = ResourceExhausted desc = grpc: received message larger than max (6188240 vs. 4194304)"}')).toEqual({
      routes: [],
      rejected: [],
      skipped: 0,
      error: 'rpc error: code = ResourceExhausted desc = grpc: received message larger than max (6188240 vs. 4194304)',
    });
    expect(decodeMonitorLine('{"other":1}').rejected[0]!.reason).toBe('not a JSON array of paths');
  });
});
