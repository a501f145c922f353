/**
 * The CLI against tables of the sizes issue 19 names, through the real
 * command line and a unix socket that answers as the daemon would and
 * records what it was asked:
 * - `mup session list` of 200,000 sessions printed nothing and exited 2
 *   ("Maximum call stack size exceeded": the column widths spread one
 *   argument per row);
 * - `mup stats` fetched every rule's counters whatever the table sizes,
 *   and `--watch` left sessions out of its 2,000-rule threshold: with a
 *   million sessions, 100 MB of JSON a refresh;
 * - the next page's command left out the target options, so pasted it
 *   asked the default daemon for the page after a key of another one.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';

let dir: string;
let socket: string;
let server: Server;
let answer: (req: IncomingMessage, res: ServerResponse) => void = (_req, res) => res.end('{}');
const asked: string[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'mup-cli-scale-'));
  socket = join(dir, 'api.sock');
  server = createServer((req, res) => {
    asked.push(`${req.method} ${req.url}`);
    res.setHeader('content-type', 'application/json');
    answer(req, res);
  });
  await new Promise<void>((r) => server.listen(socket, r));
});

afterAll(async () => {
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

async function mup(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  asked.length = 0;
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['node', 'mup', ...args], { out: (s) => out.push(s), err: (s) => err.push(s) });
  return { code, out: out.join(''), err: err.join('') };
}

function status(policies: number, localsids: number, sessions: number): unknown {
  const t = (entries: number): { entries: number; capacity: number } => ({ entries, capacity: 2_097_152 });
  return { tables: { policies: t(policies), localsids: t(localsids), sessions: t(sessions) } };
}

const COUNTERS = { at: '2026-12-05T00:00:00.000Z', events: {}, functions: { h_m_session_encaps: { packets: '5', bytes: '500' } }, rules: [] };

describe('the CLI at a million rules', () => {
  it('lists 200,000 sessions as a table: a line each and the header', async () => {
    const n = 200_000;
    const sessions = Array.from({ length: n }, (_, i) => ({ name: `s${i}`, ue: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}/32`, teid: i, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' }));
    const body = JSON.stringify({ sessions });
    answer = (_req, res) => res.end(body);
    const r = await mup('session', 'list', '--socket', socket);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const lines = r.out.trimEnd().split('\n');
    expect(lines).toHaveLength(n + 1);
    expect(lines[n]).toMatch(/^s199999 /);
  });

  for (const [what, tables, rules] of [
    ['a million sessions (and one policy, one local SID)', status(1, 1, 1_000_000), 'active'],
    ['2,001 rules of all kinds', status(1000, 1000, 1), 'active'],
    ['2,000 rules', status(1000, 999, 1), 'all'],
  ] as const) {
    it(`mup stats with ${what} fetches ?rules=${rules}`, async () => {
      answer = (req, res) => res.end(JSON.stringify(req.url === '/v1/status' ? tables : COUNTERS));
      const r = await mup('stats', '--socket', socket);
      expect(r.err).toBe('');
      expect(r.code).toBe(0);
      expect(asked).toEqual(['GET /v1/status', `GET /v1/counters?rules=${rules}`]);
      expect(r.out).toMatch(/h_m_session_encaps\s+5\s+500/);
    });
  }

  it("the next page's command names the daemon the page came from", async () => {
    answer = (_req, res) => res.end(JSON.stringify({ policies: [{ match: '10.0.0.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' }], next: 'CURSOR' }));
    const bySocket = await mup('policy', 'list', '--socket', socket, '--limit', '1');
    expect(bySocket.code).toBe(0);
    expect(bySocket.err).toBe(`next page: mup policy list --socket ${socket} --limit 1 --after CURSOR\n`);
    expect(asked).toEqual(['GET /v1/policies?limit=1']);
    // A path the shell would split is quoted.
    const spaced = join(dir, 'a b');
    const other = createServer((_req, res) => res.end(JSON.stringify({ policies: [], next: 'C2' })));
    await new Promise<void>((r) => other.listen(spaced, r));
    try {
      const r = await mup('policy', 'list', '--socket', spaced, '--limit', '5');
      expect(r.err).toBe(`next page: mup policy list --socket '${spaced}' --limit 5 --after C2\n`);
    } finally {
      await new Promise<void>((r) => other.close(() => r()));
    }
  });
});
