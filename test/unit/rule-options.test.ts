/**
 * Every key of every kind of rule, and of every local SID behaviour, is
 * reachable by a CLI option of `mup <verb> add|replace` (issue 15: GTP6 SIDs
 * were only possible with --json-body). The options are made from
 * RULE_COMMANDS' fields; this checks the fields against the config
 * loader's own key lists, then runs the real command line against a unix
 * socket that records the body the CLI sends, and checks that the body is
 * an entry the loader accepts with every key of the behaviour in it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fieldFlag, RULE_COMMANDS } from '../../src/cli/ops.js';
import { main } from '../../src/cli/main.js';
import { RULE_ENTRY_KEYS } from '../../src/config/load.js';
import { RULE_KINDS, type RuleKind } from '../../src/daemon/rules.js';

/** A command line with every key of one behaviour: flag values that the loader accepts together. */
const FULL: { kind: RuleKind; behavior?: string; args: string[] }[] = [
  {
    kind: 'policy',
    args: ['--behavior', 'h.m.gtp4.d', '--name', 'p', '--match', '192.0.2.10/32', '--teid', '0x12340000/16', '--sr-prefix', '2001:db8:1::/48',
      '--src-prefix', '2001:db8:ff::/64', '--segment', '2001:db8:5::1', '--segment', '2001:db8:5::2', '--srh', 'always', '--hop-limit', '30', '--mtu', '1400'],
  },
  { kind: 'policy', args: ['--match', '10.0.0.0/8', '--sid', '2001:db8:e::d4', '--src-prefix', '2001:db8:ff::/64'] },
  {
    kind: 'localsid',
    behavior: 'end.m.gtp4.e',
    args: ['--behavior', 'end.m.gtp4.e', '--name', 'a', '--sid', '2001:db8:2::/48', '--src-prefix-len', '64', '--container', 'never', '--ttl', '20', '--mtu', '1400',
      '--advertise', '{"prefixes":["192.0.2.0/25"],"lb":32,"ln":8,"fn":8}'],
  },
  {
    kind: 'localsid',
    behavior: 'end.m.gtp6.e',
    args: ['--behavior', 'end.m.gtp6.e', '--name', 'b', '--sid', '2001:db8:6::/64', '--source', '2001:db8:ff::1', '--container', 'always', '--hop-limit', '9', '--mtu', '1400',
      '--advertise', '{"prefixes":["2001:db8:101::/121"],"lb":48,"ln":8,"fn":8}'],
  },
  ...(['end.m.gtp6.d', 'end.m.gtp6.d.di'] as const).map((behavior) => ({
    kind: 'localsid' as const,
    behavior,
    args: ['--behavior', behavior, '--name', 'c', '--sid', '2001:db8:d::/64', '--source', '2001:db8:ff::1', '--sr-prefix', '2001:db8:b::/48',
      '--segment', '2001:db8:5::1', '--srh', 'reduced', '--hop-limit', '9', '--mtu', '1400'],
  })),
  {
    kind: 'session',
    args: ['--name', 's', '--ue', '10.60.0.1/32', '--teid', '0x12345678', '--qfi', '9', '--rqi', '--endpoint', '192.0.2.1', '--source', '198.51.100.1',
      '--isd', '2001:db8:2::/48', '--src-prefix', '2001:db8:ff::/64', '--segment', '2001:db8:5::1', '--srh', 'always', '--hop-limit', '9', '--mtu', '1400'],
  },
];

describe('CLI options of add and replace', () => {
  it('every key an entry of each kind takes has a field (an option), and no field is a key the loader refuses', () => {
    const keys: Record<RuleKind, readonly string[]> = { policy: RULE_ENTRY_KEYS.policy, localsid: RULE_ENTRY_KEYS.localsid, session: RULE_ENTRY_KEYS.session };
    for (const kind of Object.keys(RULE_COMMANDS) as RuleKind[]) {
      const fields = RULE_COMMANDS[kind].fields.map((f) => f.key);
      expect([...fields].sort(), kind).toEqual([...keys[kind]].sort());
      const flags = RULE_COMMANDS[kind].fields.map(fieldFlag);
      expect(new Set(flags).size, `${kind}: one flag per key`).toBe(flags.length);
    }
  });

  describe('the command line sends every key of every behaviour', () => {
    let server: Server;
    let dir: string;
    let sent: { method: string; url: string; body: Record<string, unknown> }[] = [];
    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), 'mup-rule-options-'));
      server = createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          sent.push({ method: req.method ?? '', url: req.url ?? '', body: JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as Record<string, unknown> });
          res.writeHead(201, { 'content-type': 'application/json' });
          res.end('{}');
        });
      });
      await new Promise<void>((r) => server.listen(join(dir, 'sock'), () => r()));
    });
    afterAll(async () => {
      await new Promise<void>((r) => server.close(() => r()));
      rmSync(dir, { recursive: true, force: true });
    });

    it.each(FULL.map((c) => ({ ...c, what: `${c.kind} ${c.behavior ?? c.args.slice(0, 4).join(' ')}` })))('$what', async (c) => {
      for (const op of ['add', 'replace'] as const) {
        sent = [];
        const out: string[] = [];
        const code = await main(['node', 'mup', RULE_COMMANDS[c.kind].verb, op, '--socket', join(dir, 'sock'), ...c.args], { out: (s) => void out.push(s), err: (s) => void out.push(s) });
        expect(code, out.join('')).toBe(0);
        expect(sent).toHaveLength(1);
        expect(sent[0]!.method).toBe(op === 'add' ? 'POST' : 'PUT');
        const body = sent[0]!.body;
        // The loader takes it as an entry, and every key of the behaviour (other than the other way to say the last SID) is in it.
        expect(() => RULE_KINDS[c.kind].parse(body, 'cli')).not.toThrow();
        if (c.kind === 'localsid') {
          const want = ['name', 'behavior', ...RULE_ENTRY_KEYS.localsidOf[c.behavior as keyof typeof RULE_ENTRY_KEYS.localsidOf]];
          expect(Object.keys(body).sort()).toEqual(want.sort());
        }
      }
    });

    it('every field is reached by one of the command lines above', () => {
      for (const kind of Object.keys(RULE_COMMANDS) as RuleKind[]) {
        const given = new Set(FULL.filter((c) => c.kind === kind).flatMap((c) => c.args.filter((a) => a.startsWith('--'))));
        for (const f of RULE_COMMANDS[kind].fields) expect(given.has(fieldFlag(f)), `${kind} ${fieldFlag(f)}`).toBe(true);
      }
    });
  });
});
