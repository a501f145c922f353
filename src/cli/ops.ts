/**
 * Operator commands: `mup daemon`, `mup teardown`, and the API clients
 * `mup status`, `mup policy ...`, `mup sid ...`, `mup stats`, `mup reload`.
 */
import { resolve } from 'node:path';
import { Command, Option } from 'commander';
import type { DaemonStatus, CountersSnapshot, ReloadResult } from '../daemon/daemon.js';
import type { RuleKind } from '../daemon/rules.js';
import { DEFAULT_BPFFS, DEFAULT_OBJECT } from '../host/paths.js';
import { call, type Target } from './client.js';
// The daemon, libbpf and the metrics library load only for the commands that need them.

/**
 * `mup policy|sid list|add|replace|del`, per kind of rule: the API's names
 * (as src/daemon/rules.ts RULE_KINDS has them; this module does not load the
 * daemon) and the CLI's own words, flags and examples. One entry per kind.
 */
interface RuleCommands {
  /** The API's name of the kind: the key of the rule in a POST/PUT answer. */
  readonly kind: RuleKind;
  /** `mup <verb> ...`. */
  readonly verb: string;
  readonly path: string;
  /** The key in the API's list answer. */
  readonly listKey: string;
  /** The key's name: the DELETE query, messages. */
  readonly keyName: string;
  readonly label: string;
  readonly labels: string;
  readonly summary: string;
  readonly description: string;
  /** Columns of `list`. */
  readonly columns: readonly string[];
  /** Columns `list` leaves out when no entry has a value in them. */
  readonly optionalColumns?: readonly string[];
  /** The flags of add and replace. */
  options(c: Command): void;
  /** Flag (commander's camelCase) -> body key. */
  readonly flags: readonly (readonly [string, string])[];
  /** A repeatable flag that becomes a list in the body, sent when given at least once. */
  readonly repeated?: { readonly flag: string; readonly key: string };
  examples(op: 'add' | 'replace'): string;
  readonly delExample: { readonly prefix: string; readonly name: string };
  /** A second part of the key `del` takes as a flag (policies: --teid), joined to the prefix as the key text is. */
  readonly delKeyFlag?: { readonly flag: string; readonly attr: string; readonly help: string; join(prefix: string, v: string): string };
}

export const RULE_COMMANDS: Readonly<Record<RuleKind, RuleCommands>> = {
  policy: {
    kind: 'policy',
    verb: 'policy',
    path: '/v1/policies',
    listKey: 'policies',
    keyName: 'match',
    label: 'policy',
    labels: 'policies',
    summary: 'list, add, replace or delete H.M.GTP4.D policies',
    description: 'policies map GTP-U/IPv4 destinations to SRv6 (H.M.GTP4.D); changes apply at once, atomically for packets, and are saved in the state file',
    columns: ['name', 'match', 'teid', 'sr_prefix', 'sid', 'src_prefix', 'segments', 'srh', 'hop_limit', 'rule', 'origin'],
    optionalColumns: ['teid', 'sid'],
    options: (c) => {
      c.option('--match <prefix>', 'IPv4 destination prefix of the GTP-U packets, e.g. 10.45.0.0/16')
        .option('--teid <prefix>', 'only G-PDUs whose TEID is in this prefix VALUE/BITS (needs a /32 match), e.g. 0x12340000/16')
        .option('--sr-prefix <prefix>', 'IPv6 prefix of the last SID, length <= 56, e.g. 2001:db8:1::/48')
        .option('--sid <addr>', 'instead of --sr-prefix: the last SID used as is (a PE\'s End.DT4/DT6/DT46), e.g. 2001:db8:e::d4')
        .option('--src-prefix <prefix>', 'IPv6 source prefix, length <= 96, e.g. 2001:db8:ffff::/64')
        .option('--segment <addr>', 'a segment S1..S4 before the last SID (repeat for more)', (v: string, acc: string[]) => [...acc, v], [] as string[])
        .addOption(new Option('--srh <mode>', 'SRH mode').choices(['auto', 'always', 'reduced']))
        .option('--hop-limit <n>', 'outer IPv6 hop limit', int('--hop-limit'));
    },
    flags: [['name', 'name'], ['match', 'match'], ['teid', 'teid'], ['srPrefix', 'sr_prefix'], ['sid', 'sid'], ['srcPrefix', 'src_prefix'], ['srh', 'srh'], ['hopLimit', 'hop_limit']],
    repeated: { flag: 'segment', key: 'segments' },
    examples: (op) =>
      `  mup policy ${op} --match 10.45.0.0/16 --sr-prefix 2001:db8:a::/48 --src-prefix 2001:db8:ffff::/64 --name ue-pool\n` +
      `  mup policy ${op} --match 192.0.2.10/32 --teid 0x12340000/16 --sid 2001:db8:e::d4 --src-prefix 2001:db8:ffff::/64\n` +
      `  mup policy ${op} --json-body '{"match":"10.45.0.0/16","sr_prefix":"2001:db8:b::/48","src_prefix":"2001:db8:ffff::/64"}'\n`,
    delExample: { prefix: '10.45.0.0/16', name: 'ue-pool' },
    delKeyFlag: {
      flag: '--teid <prefix>',
      attr: 'teid',
      help: 'the TEID prefix of an (N3, TEID) policy, e.g. 0x12340000/16',
      join: (prefix, v) => `${prefix} teid ${v}`,
    },
  },
  localsid: {
    kind: 'localsid',
    verb: 'sid',
    path: '/v1/localsids',
    listKey: 'localsids',
    keyName: 'sid',
    label: 'local SID',
    labels: 'local SIDs',
    summary: 'list, add, replace or delete End.M.GTP4.E local SIDs',
    description: 'local SIDs turn SRv6 back into GTP-U/IPv4 (End.M.GTP4.E); changes apply at once, atomically for packets, and are saved in the state file',
    columns: ['name', 'sid', 'behavior', 'src_prefix_len', 'source', 'sr_prefix', 'container', 'ttl', 'hop_limit', 'rule', 'origin'],
    options: (c) => {
      c.option('--sid <prefix>', 'local SID prefix (locator+function), length <= 56, e.g. 2001:db8:2::/48')
        .option('--src-prefix-len <n>', 'P: the IPv4 source is read from IPv6 source bits [P, P+32)', int('--src-prefix-len'))
        .addOption(new Option('--container <mode>', 'PDU Session Container').choices(['always', 'auto', 'never']))
        .option('--ttl <n>', 'outer IPv4 TTL', int('--ttl'));
    },
    flags: [['name', 'name'], ['sid', 'sid'], ['srcPrefixLen', 'src_prefix_len'], ['container', 'container'], ['ttl', 'ttl']],
    examples: (op) => `  mup sid ${op} --sid 2001:db8:2::/48 --src-prefix-len 64 --name gnb-n3\n`,
    delExample: { prefix: '2001:db8:2::/48', name: 'gnb-n3' },
  },
  session: {
    kind: 'session',
    verb: 'session',
    path: '/v1/sessions',
    listKey: 'sessions',
    keyName: 'ue',
    label: 'session',
    labels: 'sessions',
    summary: 'list, add, replace or delete PE downlink sessions (H.M.Session.Encaps)',
    description:
      "sessions encapsulate IP packets to a UE prefix in SRv6 to the gateway's End.M.GTP4.E SID (isd | gNB | Args.Mob.Session); changes apply at once, atomically for packets, and are saved in the state file",
    columns: ['name', 'ue', 'teid', 'qfi', 'rqi', 'endpoint', 'source', 'isd', 'src_prefix', 'segments', 'srh', 'hop_limit', 'rule', 'origin'],
    options: (c) => {
      c.option('--ue <prefix>', 'UE prefix, IPv4 or IPv6, e.g. 10.60.0.1/32')
        .option('--teid <teid>', "the gNB's TEID, 0..4294967295, decimal or 0x hex")
        .option('--qfi <n>', 'QoS Flow Identifier, 0..63', int('--qfi'))
        .option('--rqi', 'set the R bit (RQI) of Args.Mob.Session')
        .option('--endpoint <ipv4>', "the gNB's N3 IPv4 address, e.g. 192.0.2.1")
        .option('--source <ipv4>', "the UPF's N3 IPv4 address, e.g. 198.51.100.1")
        .option('--isd <prefix>', "the gateway's End.M.GTP4.E SID prefix, length <= 56, e.g. 2001:db8:2::/48")
        .option('--src-prefix <prefix>', 'IPv6 source prefix, length <= 96, e.g. 2001:db8:ffff::/64')
        .option('--segment <addr>', 'a segment S1..S4 before the gateway (repeat for more)', (v: string, acc: string[]) => [...acc, v], [] as string[])
        .addOption(new Option('--srh <mode>', 'SRH mode').choices(['auto', 'always', 'reduced']))
        .option('--hop-limit <n>', 'outer IPv6 hop limit', int('--hop-limit'))
        .option('--mtu <n>', 'largest encapsulated packet (1280..65535); larger ones get ICMP errors', int('--mtu'));
    },
    flags: [
      ['name', 'name'], ['ue', 'ue'], ['teid', 'teid'], ['qfi', 'qfi'], ['rqi', 'rqi'], ['endpoint', 'endpoint'], ['source', 'source'],
      ['isd', 'isd'], ['srcPrefix', 'src_prefix'], ['srh', 'srh'], ['hopLimit', 'hop_limit'], ['mtu', 'mtu'],
    ],
    repeated: { flag: 'segment', key: 'segments' },
    examples: (op) =>
      `  mup session ${op} --ue 10.60.0.1/32 --teid 0x12345678 --qfi 9 --endpoint 192.0.2.1 --source 198.51.100.1 ` +
      `--isd 2001:db8:2::/48 --src-prefix 2001:db8:ff::/64 --name ue1\n`,
    delExample: { prefix: '10.60.0.1/32', name: 'ue1' },
  },
};

export interface Io {
  out(s: string): void;
  err(s: string): void;
}

interface TargetOpts {
  instance: string;
  socket?: string;
  url?: string;
  tokenFile?: string;
}

function target(o: TargetOpts): Target {
  return {
    instance: o.instance,
    ...(o.socket === undefined ? {} : { socket: o.socket }),
    ...(o.url === undefined ? {} : { url: o.url }),
    ...(o.tokenFile === undefined ? {} : { tokenFile: o.tokenFile }),
  };
}

/** The options every API client command takes (defaults from MUP_INSTANCE, MUP_SOCKET, MUP_URL, MUP_TOKEN_FILE). */
function withTarget(c: Command): Command {
  return c
    .addOption(new Option('--instance <name>', 'daemon instance (socket /run/mup/<name>.sock)').env('MUP_INSTANCE').default('default'))
    .addOption(new Option('--socket <path>', 'control socket of the daemon (overrides --instance)').env('MUP_SOCKET'))
    .addOption(new Option('--url <url>', 'use the HTTP API instead, e.g. http://127.0.0.1:9180').env('MUP_URL'))
    .addOption(new Option('--token-file <file>', 'bearer token for --url').env('MUP_TOKEN_FILE'));
}

function table(rows: readonly (readonly string[])[], right: ReadonlySet<number> = new Set()): string {
  if (rows.length === 0) return '';
  const w = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => (right.has(i) ? c.padStart(w[i]!) : c.padEnd(w[i]!))).join('  ').trimEnd()).join('\n') + '\n';
}

function int(name: string): (v: string) => number {
  return (v) => {
    if (!/^[0-9]+$/.test(v)) throw new Error(`${name}: expected a whole number, got ${JSON.stringify(v)}`);
    return Number(v);
  };
}

export function registerOps(program: Command, io: Io): void {
  // ---------------------------------------------------------------- daemon
  program
    .command('daemon')
    .summary('run the translator on the configured interfaces and serve the control API')
    .description(
      'load the XDP program (or take over the one an earlier daemon left running), attach it to the ' +
        'interfaces in the config, keep the tables in step with the config file and the API, and serve the ' +
        'control API on a unix socket (and HTTP, if daemon.http is set). SIGHUP reloads the config; SIGTERM ' +
        'stops the daemon but leaves the data plane forwarding (pinned under <bpffs>/mup/<instance>), so a ' +
        'new daemon takes over without losing a packet.',
    )
    .requiredOption('--config <file>', 'YAML configuration (interfaces, daemon, settings, policies, localsids)')
    .option('--instance <name>', 'instance name: pins, socket and state file are per instance', 'default')
    .option('--socket <path>', 'control socket (default: daemon.socket, else /run/mup/<instance>.sock)')
    .option('--state-file <path>', 'where API changes are saved (default /var/lib/mup/<instance>.state.json)')
    .option('--bpffs <dir>', 'bpf filesystem for the pins (mounted if it is not one)', DEFAULT_BPFFS)
    .option('--object <path>', 'BPF object to load', DEFAULT_OBJECT)
    .option('--netns <name>', 'run inside this network namespace (ip netns name)')
    .option('--detach-on-exit', 'on SIGTERM/SIGINT, detach from the interfaces and remove the pins')
    .option('--replace-tables', 'do not carry the pinned tables and counters over: start with fresh ones, filled before the new program is swapped in (counters start from zero)')
    .addOption(new Option('--log-format <format>', 'log format (default: text on a terminal, json otherwise)').choices(['json', 'text']))
    .addOption(new Option('--log-level <level>', 'least important log level shown').choices(['debug', 'info', 'warn', 'error']).default('info'))
    .option('--metrics-rule-limit <n>', 'rules with their own Prometheus series (the first N)', int('--metrics-rule-limit'), 1000)
    .option('--link-check-ms <ms>', 'how often links, pins and interfaces are checked and repaired besides on every link event of the kernel', int('--link-check-ms'), 1000)
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  mup daemon --config /etc/mup/mup.yaml\n' +
        '  mup daemon --config lab.yaml --instance lab --netns mup --socket /run/mup/lab.sock\n' +
        '  kill -HUP $(pidof mup)     # reload after editing the config (or: mup reload)\n',
    )
    .action(
      async (o: {
        config: string;
        instance: string;
        socket?: string;
        stateFile?: string;
        bpffs: string;
        object: string;
        netns?: string;
        detachOnExit?: boolean;
        replaceTables?: boolean;
        logFormat?: 'json' | 'text';
        logLevel: string;
        metricsRuleLimit: number;
        linkCheckMs: number;
      }) => {
        const { createLogger } = await import('../daemon/log.js');
        const { daemonMain } = await import('../daemon/serve.js');
        const log = createLogger({ instance: o.instance, level: o.logLevel, ...(o.logFormat === undefined ? {} : { json: o.logFormat === 'json' }) });
        try {
          const code = await daemonMain({
            configPath: resolve(o.config),
            instance: o.instance,
            bpffs: o.bpffs,
            object: o.object,
            log,
            metricsRuleLimit: o.metricsRuleLimit,
            linkCheckMs: o.linkCheckMs,
            ...(o.socket === undefined ? {} : { socket: o.socket }),
            ...(o.stateFile === undefined ? {} : { stateFile: o.stateFile }),
            ...(o.netns === undefined ? {} : { netns: o.netns }),
            ...(o.detachOnExit === true ? { detachOnExit: true } : {}),
            ...(o.replaceTables === true ? { replaceTables: true } : {}),
          });
          if (code !== 0) throw new Error('the daemon stopped with an error (see the log)');
        } catch (e) {
          log.fatal({ error: (e as Error).message }, 'daemon failed');
          throw e;
        }
      },
    );

  program
    .command('teardown')
    .summary('detach an instance from its interfaces and remove its pins (stops forwarding)')
    .description(
      'remove everything a daemon instance left in bpffs: its XDP links (the program leaves the interfaces), ' +
        'program and tables. Stop the daemon first; this is what --detach-on-exit does at exit.',
    )
    .option('--instance <name>', 'instance name', 'default')
    .option('--bpffs <dir>', 'bpf filesystem of the pins', DEFAULT_BPFFS)
    .option('--netns <name>', 'network namespace of the interfaces (ip netns name)')
    .addHelpText('after', '\nExample:\n  mup teardown --instance lab\n')
    .action(async (o: { instance: string; bpffs: string; netns?: string }) => {
      const { enterNetns } = await import('../dataplane/netns.js');
      const { isBpffs, Pins } = await import('../daemon/pins.js');
      if (o.netns !== undefined) enterNetns(o.netns);
      if (!isBpffs(o.bpffs)) {
        io.out(`${o.bpffs} is not a bpf filesystem: nothing pinned there\n`);
        return;
      }
      const removed = new Pins(o.bpffs, o.instance).removeAll();
      io.out(removed.length === 0 ? `instance ${o.instance}: nothing to remove\n` : `instance ${o.instance}: removed ${removed.join(', ')}\n`);
    });

  // ---------------------------------------------------------------- status
  withTarget(program.command('status'))
    .summary('what the daemon runs: program, interfaces, tables, config')
    .option('--json', 'print the API answer as JSON')
    .addHelpText('after', '\nExamples:\n  mup status\n  mup status --instance lab --json | jq .interfaces\n')
    .action(async (o: TargetOpts & { json?: boolean }) => {
      const s = await call<DaemonStatus>(target(o), 'GET', '/v1/status');
      if (o.json === true) return io.out(`${JSON.stringify(s, null, 2)}\n`);
      const lines = [
        `instance   ${s.instance} (pid ${s.pid}, up ${s.uptimeSeconds} s${s.adopted ? ', took over a running data plane' : ''})`,
        `program    ${s.program === null ? 'not pinned' : `id ${s.program.id} tag ${s.program.tag}`}  ${s.object.path}`,
        `config     ${s.config.file} (loaded ${s.config.loadedAt})`,
        `state      ${s.state.file} (${s.state.changes} API changes on top of the file)`,
        `forwarding ${s.forwarding}`,
        `tables     policies ${s.tables.policies.entries}/${s.tables.policies.capacity}, local SIDs ${s.tables.localsids.entries}/${s.tables.localsids.capacity}` +
          (s.tables.sessions === undefined ? '' : `, sessions ${s.tables.sessions.entries}/${s.tables.sessions.capacity}`),
        '',
      ].join('\n');
      const rows = [['interface', 'mode', 'ifindex', 'state', 'prog id']];
      for (const i of s.interfaces) {
        const state = i.ifindex === null ? 'MISSING (attached when it appears)' : !i.attached ? 'NOT ATTACHED' : i.pinned === false ? 'attached (pin being restored)' : 'attached';
        rows.push([i.name, i.mode, i.ifindex === null ? 'gone' : String(i.ifindex), state, i.progId === null ? '-' : String(i.progId)]);
      }
      io.out(`${lines}\n${table(rows)}`);
    });

  // ---------------------------------------------------------------- rules
  for (const c of Object.values(RULE_COMMANDS)) {
    const { verb: kind, path, keyName } = c;
    const group = program.command(kind).summary(c.summary).description(c.description);

    withTarget(group.command('list'))
      .summary(`list the ${c.labels} in the tables`)
      .option('--json', 'print the API answer as JSON')
      .addHelpText('after', `\nExample:\n  mup ${kind} list\n`)
      .action(async (o: TargetOpts & { json?: boolean }) => {
        const r = await call<Record<string, Record<string, unknown>[]>>(target(o), 'GET', path);
        const list = r[c.listKey] ?? [];
        if (o.json === true) return io.out(`${JSON.stringify(list, null, 2)}\n`);
        const cols = c.columns.filter((col) => !(c.optionalColumns ?? []).includes(col) || list.some((e) => e[col] !== undefined));
        // A local SID without a behaviour is End.M.GTP4.E (the config's default).
        const cell = (e: Record<string, unknown>, col: string): string =>
          col === 'behavior' && e[col] === undefined ? 'end.m.gtp4.e' : e[col] === undefined ? '-' : Array.isArray(e[col]) ? (e[col] as unknown[]).join(',') : String(e[col]);
        const rows = [cols, ...list.map((e) => cols.map((col) => cell(e, col)))];
        io.out(table(rows));
      });

    for (const op of ['add', 'replace'] as const) {
      const cmd = withTarget(group.command(op))
        .summary(op === 'add' ? `add a ${c.label}` : `replace the ${c.label} with the same ${keyName} (atomic for packets)`)
        .option('--json-body <json>', 'the whole entry as JSON, with the config file\'s keys')
        .option('--name <name>', 'a name for the entry (unique)');
      c.options(cmd);
      cmd.addHelpText('after', `\nExamples:\n${c.examples(op)}`).action(async (o: TargetOpts & Record<string, unknown>) => {
        let body: Record<string, unknown>;
        if (typeof o['jsonBody'] === 'string') {
          try {
            body = JSON.parse(o['jsonBody']) as Record<string, unknown>;
          } catch (e) {
            throw new Error(`--json-body is not JSON: ${(e as Error).message}`);
          }
        } else {
          body = {};
          for (const [from, to] of c.flags) if (o[from] !== undefined) body[to] = o[from];
          if (c.repeated !== undefined && Array.isArray(o[c.repeated.flag]) && (o[c.repeated.flag] as unknown[]).length > 0) body[c.repeated.key] = o[c.repeated.flag];
        }
        const r = await call<Record<string, unknown>>(target(o), op === 'add' ? 'POST' : 'PUT', path, body);
        io.out(`${op === 'add' ? 'added' : 'replaced'}: ${JSON.stringify(r[c.kind])}\n`);
      });
    }

    const del = withTarget(group.command('del'))
      .summary(`delete a ${c.label} by ${keyName} prefix or by name`)
      .argument('[prefix]', `the ${keyName} prefix`)
      .option('--name <name>', 'delete the entry with this name instead');
    const extra = c.delKeyFlag;
    if (extra !== undefined) del.option(extra.flag, extra.help);
    del
      .addHelpText('after', `\nExamples:\n  mup ${kind} del ${c.delExample.prefix}\n  mup ${kind} del --name ${c.delExample.name}\n`)
      .action(async (prefix: string | undefined, o: TargetOpts & { name?: string } & Record<string, unknown>) => {
        if ((prefix === undefined) === (o.name === undefined)) throw new Error(`give the ${keyName} prefix or --name (one of them)`);
        const more = extra === undefined ? undefined : o[extra.attr];
        if (typeof more === 'string' && prefix === undefined) throw new Error(`${extra!.flag.split(' ')[0]} goes with the ${keyName} prefix, not --name`);
        const key = prefix !== undefined && typeof more === 'string' ? extra!.join(prefix, more) : prefix;
        const q = key !== undefined ? `${keyName}=${encodeURIComponent(key)}` : `name=${encodeURIComponent(o.name!)}`;
        const r = await call<{ deleted: unknown }>(target(o), 'DELETE', `${path}?${q}`);
        io.out(`deleted: ${JSON.stringify(r.deleted)}\n`);
      });
  }

  // ---------------------------------------------------------------- stats
  withTarget(program.command('stats'))
    .summary('packet counters: per function, per rule, per drop reason; rates with --watch')
    .option('--json', 'print the API answer as JSON')
    .option('--watch [seconds]', 'refresh every N seconds (default 1) with rates per second; Ctrl-C stops')
    .option('--top <n>', 'rules shown (busiest first)', int('--top'), 20)
    .option('--reset', 'zero every counter (asks the daemon; Prometheus sees a counter reset)')
    .addHelpText('after', '\nExamples:\n  mup stats\n  mup stats --watch\n  mup stats --json | jq .events.drop_gtp_bad_length\n')
    .action(async (o: TargetOpts & { json?: boolean; watch?: string | boolean; top: number; reset?: boolean }) => {
      const t = target(o);
      if (o.reset === true) {
        await call(t, 'POST', '/v1/counters/reset');
        io.out('counters reset\n');
        return;
      }
      if (o.watch === undefined || o.watch === false) {
        const c = await call<CountersSnapshot>(t, 'GET', '/v1/counters');
        if (o.json === true) return io.out(`${JSON.stringify(c, null, 2)}\n`);
        io.out(statsText(c, undefined, o.top));
        return;
      }
      const secs = o.watch === true ? 1 : Number(o.watch);
      if (!(secs > 0)) throw new Error(`--watch: expected a number of seconds, got ${JSON.stringify(o.watch)}`);
      // With big tables, only rules that have packets are fetched (an idle
      // rule has no rate); small tables are shown whole.
      const st = await call<DaemonStatus>(t, 'GET', '/v1/status');
      const which = st.tables.policies.entries + st.tables.localsids.entries > 2000 ? 'active' : 'all';
      let prev = await call<CountersSnapshot>(t, 'GET', `/v1/counters?rules=${which}`);
      const tty = process.stdout.isTTY;
      let stop = false;
      process.once('SIGINT', () => {
        stop = true;
      });
      while (!stop) {
        await new Promise((r) => setTimeout(r, secs * 1000));
        if (stop) break;
        const cur = await call<CountersSnapshot>(t, 'GET', `/v1/counters?rules=${which}`);
        const text = o.json === true ? `${JSON.stringify(rates(prev, cur))}\n` : statsText(cur, prev, o.top);
        io.out(tty && o.json !== true ? `\x1b[H\x1b[2J${text}` : `${text}\n`);
        prev = cur;
      }
    });

  withTarget(program.command('reload'))
    .summary('re-read the config file and apply the difference (as SIGHUP does)')
    .option('--json', 'print the API answer as JSON')
    .option('--force', 'apply it even if it deletes more than daemon.reload_max_delete_share of the rules (default half)')
    .addHelpText('after', '\nExample:\n  vi /etc/mup/mup.yaml && mup reload\n')
    .action(async (o: TargetOpts & { json?: boolean; force?: boolean }) => {
      const r = await call<ReloadResult>(target(o), 'POST', o.force === true ? '/v1/reload?force=true' : '/v1/reload');
      if (o.json === true) return io.out(`${JSON.stringify(r, null, 2)}\n`);
      io.out(
        `reloaded: ${r.added} added, ${r.replaced} replaced, ${r.deleted} deleted, ${r.unchanged} unchanged` +
          `${r.programReplaced ? '; new program swapped in' : ''}` +
          `${(r.interfaces.missing ?? []).length > 0 ? `; not attached, interface missing: ${r.interfaces.missing.join(', ')} (attached when it appears)` : ''}` +
          `${r.discardedChanges > 0 ? `; the config file changed, so ${r.discardedChanges} API changes were dropped (kept in ${r.discardedTo ?? 'the .discarded state file'})` : ''}\n`,
      );
    });
}


const n = (v: unknown): number => Number(v ?? 0);

interface Rates {
  readonly seconds: number;
  readonly functions: Record<string, { pps: number; bps: number; packets: number }>;
  readonly events: Record<string, { pps: number; packets: number }>;
  readonly rules: { kind: string; key: string; name?: string; pps: number; packets: number }[];
}

function rates(prev: CountersSnapshot, cur: CountersSnapshot): Rates {
  const dt = Math.max(1e-3, (Date.parse(cur.at) - Date.parse(prev.at)) / 1000);
  const functions: Rates['functions'] = {};
  for (const [k, v] of Object.entries(cur.functions)) {
    const p = prev.functions[k as keyof typeof prev.functions];
    functions[k] = { pps: (n(v.packets) - n(p?.packets)) / dt, bps: ((n(v.bytes) - n(p?.bytes)) * 8) / dt, packets: n(v.packets) };
  }
  const events: Rates['events'] = {};
  for (const [k, v] of Object.entries(cur.events)) events[k] = { pps: (n(v.packets) - n(prev.events[k]?.packets)) / dt, packets: n(v.packets) };
  const before = new Map(prev.rules.map((r) => [`${r.kind} ${r.key}`, n(r.packets)]));
  const rules = cur.rules.map((r) => ({
    kind: r.kind,
    key: r.key,
    ...(r.name === undefined ? {} : { name: r.name }),
    pps: (n(r.packets) - (before.get(`${r.kind} ${r.key}`) ?? 0)) / dt,
    packets: n(r.packets),
  }));
  return { seconds: dt, functions, events, rules };
}

function fmtRate(x: number): string {
  return x >= 1e6 ? `${(x / 1e6).toFixed(2)} M` : x >= 1e3 ? `${(x / 1e3).toFixed(1)} k` : x.toFixed(0);
}

/** The counters as tables; with `prev`, rates per second since then. */
function statsText(cur: CountersSnapshot, prev: CountersSnapshot | undefined, top: number): string {
  const r = prev === undefined ? undefined : rates(prev, cur);
  const out: string[] = [`counters at ${cur.at}${r === undefined ? '' : ` (rates over ${r.seconds.toFixed(1)} s)`}`, ''];
  const fnRows = [['function', 'packets', 'bytes', ...(r === undefined ? [] : ['pkt/s', 'bit/s'])]];
  for (const [k, v] of Object.entries(cur.functions)) {
    fnRows.push([k, String(v.packets), String(v.bytes), ...(r === undefined ? [] : [fmtRate(r.functions[k]?.pps ?? 0), fmtRate(r.functions[k]?.bps ?? 0)])]);
  }
  out.push(table(fnRows, new Set([1, 2, 3, 4])));
  const evRows = [['event', 'packets', ...(r === undefined ? [] : ['pkt/s'])]];
  for (const [k, v] of Object.entries(cur.events)) {
    if (n(v.packets) === 0) continue;
    evRows.push([k, String(v.packets), ...(r === undefined ? [] : [fmtRate(r.events[k]?.pps ?? 0)])]);
  }
  out.push(evRows.length > 1 ? table(evRows, new Set([1, 2])) : 'no packets seen yet\n');
  const ruleList = r === undefined ? cur.rules.map((x) => ({ ...x, pps: 0, packets: n(x.packets) })) : r.rules;
  const busiest = [...ruleList].sort((a, b) => b.pps - a.pps || b.packets - a.packets).slice(0, top);
  const ruleRows = [['rule', 'kind', 'name', 'packets', ...(r === undefined ? [] : ['pkt/s'])]];
  for (const x of busiest) ruleRows.push([x.key, x.kind, x.name ?? '-', String(x.packets), ...(r === undefined ? [] : [fmtRate(x.pps)])]);
  out.push(table(ruleRows, new Set([3, 4])));
  if (ruleList.length > top) out.push(`(${ruleList.length - top} more rules; --top N shows more)\n`);
  return out.join('\n');
}
