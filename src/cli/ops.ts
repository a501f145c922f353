/**
 * Operator commands: `mup daemon`, `mup teardown`, and the API clients
 * `mup status`, `mup policy ...`, `mup sid ...`, `mup stats`, `mup reload`.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import type { DaemonStatus, CountersSnapshot, ReloadResult } from '../daemon/daemon.js';
import type { RuleKind } from '../daemon/rules.js';
import { DEFAULT_BPFFS, DEFAULT_OBJECT } from '../host/paths.js';
import { MAX_PER_RULE_TOP, parsePerRule } from '../config/per-rule.js';
import type { PerRuleSeries } from '../config/types.js';
import { ApiError, call, ConnectError, ExitStatus, type Target } from './client.js';
import { columnWidths } from './column-widths.js';
// The daemon, libbpf and the metrics library load only for the commands that need them.

/**
 * One key of a rule entry as the CLI takes it: the body key (the config
 * file's), its flag and how the flag's text becomes the value. add and
 * replace get one option per field, so every key of every behaviour is
 * reachable without --json-body (test/unit/rule-options.test.ts checks it
 * against the config loader's key lists).
 */
export interface RuleField {
  /** The body key (snake_case, as the config file). */
  readonly key: string;
  /** The flag: `--<key with dashes>` unless given (segments: `--segment`, repeated). */
  readonly flag?: string;
  readonly help: string;
  /** string (default), int, bool (a switch), list (repeatable flag), or one of `choices`. */
  readonly type?: 'string' | 'int' | 'bool' | 'list' | 'json';
  readonly choices?: readonly string[];
  /** The value's placeholder in the help. */
  readonly arg?: string;
}

/** The flag of a field, e.g. `--sr-prefix`. */
export function fieldFlag(f: RuleField): string {
  return f.flag ?? `--${f.key.replace(/_/g, '-')}`;
}

/**
 * `mup policy|sid|session list|add|replace|del`, per kind of rule: the API's
 * names (as src/daemon/rules.ts RULE_KINDS has them; this module does not
 * load the daemon) and the CLI's own words, fields and examples. One entry
 * per kind.
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
  /** Every key of the entry, for every behaviour: the options of add and replace. */
  readonly fields: readonly RuleField[];
  examples(op: 'add' | 'replace'): string;
  readonly delExample: { readonly prefix: string; readonly name: string };
  /** A second part of the key `del` takes as a flag (policies: --teid), joined to the prefix as the key text is. */
  readonly delKeyFlag?: { readonly flag: string; readonly attr: string; readonly help: string; join(prefix: string, v: string): string };
}

const SRH_MODES = ['auto', 'always', 'reduced'] as const;
const NAME_FIELD: RuleField = { key: 'name', help: 'a name for the entry (unique)' };

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
    fields: [
      NAME_FIELD,
      { key: 'behavior', help: 'the behaviour (the only one, the default)', choices: ['h.m.gtp4.d'] },
      { key: 'match', arg: 'prefix', help: 'IPv4 destination prefix of the GTP-U packets, e.g. 10.45.0.0/16' },
      { key: 'teid', arg: 'prefix', help: 'only G-PDUs whose TEID is in this prefix VALUE/BITS (needs a /32 match), e.g. 0x12340000/16' },
      { key: 'sr_prefix', arg: 'prefix', help: 'IPv6 prefix of the last SID, length <= 56, e.g. 2001:db8:1::/48' },
      { key: 'sid', arg: 'addr', help: "instead of --sr-prefix: the last SID used as is (a PE's End.DT4/DT6/DT46), e.g. 2001:db8:e::d4" },
      { key: 'src_prefix', arg: 'prefix', help: 'IPv6 source prefix, length <= 96, e.g. 2001:db8:ffff::/64' },
      { key: 'segments', flag: '--segment', arg: 'addr', type: 'list', help: 'a segment S1..S4 before the last SID (repeat for more)' },
      { key: 'srh', arg: 'mode', help: 'SRH mode', choices: SRH_MODES },
      { key: 'hop_limit', arg: 'n', type: 'int', help: 'outer IPv6 hop limit' },
      { key: 'mtu', arg: 'n', type: 'int', help: 'largest encapsulated packet (1280..65535); larger ones get ICMP errors' },
    ],
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
    summary: 'list, add, replace or delete local SIDs (End.M.GTP4.E, End.M.GTP6.E, End.M.GTP6.D, End.M.GTP6.D.Di)',
    description:
      'local SIDs turn SRv6 back into GTP-U (End.M.GTP4.E: IPv4; End.M.GTP6.E: IPv6) or GTP-U/IPv6 into SRv6 (End.M.GTP6.D, .Di); ' +
      'changes apply at once, atomically for packets, and are saved in the state file. Which keys a behaviour takes: docs/config.md',
    columns: ['name', 'sid', 'behavior', 'src_prefix_len', 'source', 'sr_prefix', 'container', 'ttl', 'hop_limit', 'rule', 'origin'],
    fields: [
      NAME_FIELD,
      { key: 'behavior', help: 'the behaviour (default end.m.gtp4.e)', choices: ['end.m.gtp4.e', 'end.m.gtp6.e', 'end.m.gtp6.d', 'end.m.gtp6.d.di'] },
      { key: 'sid', arg: 'prefix', help: 'local SID prefix (locator+function), e.g. 2001:db8:2::/48 (gtp4.e: length <= 56; gtp6.*: <= 88)' },
      { key: 'src_prefix_len', arg: 'n', type: 'int', help: 'gtp4.e: P, the IPv4 source is read from IPv6 source bits [P, P+32)' },
      { key: 'container', arg: 'mode', help: 'gtp4.e, gtp6.e: PDU Session Container', choices: ['always', 'auto', 'never'] },
      { key: 'ttl', arg: 'n', type: 'int', help: 'gtp4.e: outer IPv4 TTL' },
      { key: 'source', arg: 'addr', help: 'gtp6.*: the IPv6 source address of the packets made, e.g. 2001:db8:ff::1' },
      { key: 'sr_prefix', arg: 'prefix', help: 'gtp6.d, gtp6.d.di: IPv6 prefix of the last SID' },
      { key: 'segments', flag: '--segment', arg: 'addr', type: 'list', help: 'gtp6.d, gtp6.d.di: a segment before the last SID (repeat for more)' },
      { key: 'srh', arg: 'mode', help: 'gtp6.d, gtp6.d.di: SRH mode', choices: SRH_MODES },
      { key: 'hop_limit', arg: 'n', type: 'int', help: 'gtp6.*: outer IPv6 hop limit' },
      { key: 'mtu', arg: 'n', type: 'int', help: 'largest packet made (1280..65535); larger ones get ICMP errors' },
      { key: 'advertise', arg: 'json', type: 'json', help: 'gtp4.e, gtp6.e: BGP MUP ISD routes, e.g. \'{"prefixes":["192.0.2.0/25"],"lb":40,"ln":8,"fn":8}\' (docs/bgp.md)' },
    ],
    examples: (op) =>
      `  mup sid ${op} --sid 2001:db8:2::/48 --src-prefix-len 64 --name gnb-n3\n` +
      `  mup sid ${op} --behavior end.m.gtp6.e --sid 2001:db8:6::/64 --source 2001:db8:ff::1 --name gnb6\n` +
      `  mup sid ${op} --behavior end.m.gtp6.d --sid 2001:db8:d::/64 --source 2001:db8:ff::1 --sr-prefix 2001:db8:b::/48\n`,
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
    fields: [
      NAME_FIELD,
      { key: 'ue', arg: 'prefix', help: 'UE prefix, IPv4 or IPv6, e.g. 10.60.0.1/32' },
      { key: 'teid', arg: 'teid', help: "the gNB's TEID, 0..4294967295, decimal or 0x hex" },
      { key: 'qfi', arg: 'n', type: 'int', help: 'QoS Flow Identifier, 0..63' },
      { key: 'rqi', type: 'bool', help: 'set the R bit (RQI) of Args.Mob.Session' },
      { key: 'endpoint', arg: 'ipv4', help: "the gNB's N3 IPv4 address, e.g. 192.0.2.1" },
      { key: 'source', arg: 'ipv4', help: "the UPF's N3 IPv4 address, e.g. 198.51.100.1" },
      { key: 'isd', arg: 'prefix', help: "the gateway's End.M.GTP4.E SID prefix, length <= 56, e.g. 2001:db8:2::/48" },
      { key: 'src_prefix', arg: 'prefix', help: 'IPv6 source prefix, length <= 96, e.g. 2001:db8:ffff::/64' },
      { key: 'segments', flag: '--segment', arg: 'addr', type: 'list', help: 'a segment S1..S4 before the gateway (repeat for more)' },
      { key: 'srh', arg: 'mode', help: 'SRH mode', choices: SRH_MODES },
      { key: 'hop_limit', arg: 'n', type: 'int', help: 'outer IPv6 hop limit' },
      { key: 'mtu', arg: 'n', type: 'int', help: 'largest encapsulated packet (1280..65535); larger ones get ICMP errors' },
    ],
    examples: (op) =>
      `  mup session ${op} --ue 10.60.0.1/32 --teid 0x12345678 --qfi 9 --endpoint 192.0.2.1 --source 198.51.100.1 ` +
      `--isd 2001:db8:2::/48 --src-prefix 2001:db8:ff::/64 --name ue1\n`,
    delExample: { prefix: '10.60.0.1/32', name: 'ue1' },
  },
};

/** The commander option of a field. */
function fieldOption(f: RuleField): Option {
  const flag = fieldFlag(f);
  if (f.type === 'bool') return new Option(flag, f.help);
  const o = new Option(`${flag} <${f.arg ?? 'value'}>`, f.help);
  if (f.choices !== undefined) o.choices(f.choices);
  if (f.type === 'int') o.argParser(int(flag));
  if (f.type === 'list') o.argParser((v: string, acc: string[] | undefined) => [...(acc ?? []), v]);
  if (f.type === 'json') {
    o.argParser((v: string) => {
      try {
        return JSON.parse(v) as unknown;
      } catch (e) {
        throw new InvalidArgumentError(`${flag}: not JSON (${(e as Error).message}); e.g. '{"prefixes":["192.0.2.0/25"],"lb":40,"ln":8,"fn":8}'`);
      }
    });
  }
  return o;
}

/** The entry a parsed add/replace command line describes: one body key per field given. */
export function fieldsBody(fields: readonly RuleField[], o: Record<string, unknown>): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  for (const f of fields) {
    const v = o[fieldOption(f).attributeName()];
    if (v === undefined || (Array.isArray(v) && v.length === 0)) continue;
    body[f.key] = v;
  }
  return body;
}

export interface Io {
  out(s: string): void;
  err(s: string): void;
}

export interface TargetOpts {
  instance: string;
  socket?: string;
  url?: string;
  tokenFile?: string;
}

export function target(o: TargetOpts): Target {
  return {
    instance: o.instance,
    ...(o.socket === undefined ? {} : { socket: o.socket }),
    ...(o.url === undefined ? {} : { url: o.url }),
    ...(o.tokenFile === undefined ? {} : { tokenFile: o.tokenFile }),
  };
}

/**
 * The target options of a command line as flags, for a command printed to
 * be pasted (the next page's): a cursor is a key, not tied to one daemon,
 * so the next page asked of another daemon would list its rules after that
 * key without an error.
 */
export function targetFlags(o: TargetOpts): string {
  const flags: string[] = [];
  if (o.socket !== undefined) flags.push('--socket', shellWord(o.socket));
  else if (o.url === undefined && o.instance !== 'default') flags.push('--instance', shellWord(o.instance));
  if (o.url !== undefined) flags.push('--url', shellWord(o.url));
  if (o.tokenFile !== undefined) flags.push('--token-file', shellWord(o.tokenFile));
  return flags.length === 0 ? '' : ` ${flags.join(' ')}`;
}

/** A word the shell reads back as it is: quoted when it holds anything but [A-Za-z0-9_./:@%+=,-]. */
function shellWord(w: string): string {
  return /^[A-Za-z0-9_./:@%+=,-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`;
}

/**
 * The options every API client command takes (defaults from MUP_INSTANCE,
 * MUP_SOCKET, MUP_URL, MUP_TOKEN_FILE). A daemon named on the command line
 * wins over one in the environment: MUP_SOCKET left in the shell sent
 * `mup status --instance lab` to the other daemon, and MUP_URL beat an
 * explicit --socket (found in review, session 43). --socket and --url
 * together are refused: one daemon.
 */
export function withTarget(c: Command): Command {
  return c
    .addOption(new Option('--instance <name>', 'daemon instance (socket /run/mup/<name>.sock)').env('MUP_INSTANCE').default('default'))
    .addOption(new Option('--socket <path>', 'control socket of the daemon (overrides --instance)').env('MUP_SOCKET'))
    .addOption(new Option('--url <url>', 'use the HTTP API instead, e.g. http://127.0.0.1:9180').env('MUP_URL'))
    .addOption(new Option('--token-file <file>', 'bearer token for --url').env('MUP_TOKEN_FILE'))
    .hook('preAction', (cmd) => {
      const from = (k: string): string | undefined => cmd.getOptionValueSource(k);
      const named = ['instance', 'socket', 'url'].filter((k) => from(k) === 'cli');
      if (named.length > 0) {
        for (const k of ['socket', 'url']) if (from(k) === 'env') cmd.setOptionValueWithSource(k, undefined, 'default');
      }
      if (from('socket') === 'cli' && from('url') === 'cli') throw new Error('give --socket or --url, not both: they name two daemons');
    });
}

function table(rows: readonly (readonly string[])[], right: ReadonlySet<number> = new Set()): string {
  if (rows.length === 0) return '';
  const w = columnWidths(rows);
  return rows.map((r) => r.map((c, i) => (right.has(i) ? c.padStart(w[i]!) : c.padEnd(w[i]!))).join('  ').trimEnd()).join('\n') + '\n';
}

function int(name: string): (v: string) => number {
  return (v) => {
    if (!/^[0-9]+$/.test(v)) throw new Error(`${name}: expected a whole number, got ${JSON.stringify(v)}`);
    return Number(v);
  };
}

/**
 * A whole number from min to max. Node takes a timer of 0 or of 2^31 ms
 * and more as 1 ms (or, for a request, 0 as none): `--timeout 0` waited
 * for ever, `--link-check-ms 0` checked every millisecond.
 */
function intIn(name: string, min: number, max: number, unit: string): (v: string) => number {
  const whole = int(name);
  return (v) => {
    const n = whole(v);
    if (n < min || n > max) throw new Error(`${name}: expected ${min} to ${max} ${unit}, got ${v}`);
    return n;
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
    .option('--metrics-per-rule <which>', 'per-rule Prometheus series: off, all, or top:N (the N rules with the most packets); default daemon.metrics.per_rule, else off', (v: string) => {
      const p = parsePerRule(v);
      if (p === undefined) throw new InvalidArgumentError(`use off, all or top:N (N from 1 to ${MAX_PER_RULE_TOP}), not ${JSON.stringify(v)}`);
      return p;
    })
    .option('--link-check-ms <ms>', 'how often links, pins and interfaces are checked and repaired besides on every link event of the kernel (10 to 3600000)', intIn('--link-check-ms', 10, 3_600_000, 'ms'), 1000)
    .option('--check', 'check the config (and the state file\'s API changes on top of it) and print what would load; start nothing (no root needed); exit 0 when valid')
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  mup daemon --config /etc/mup/mup.yaml\n' +
        '  mup daemon --config lab.yaml --instance lab --netns mup --socket /run/mup/lab.sock\n' +
        '  mup daemon --check --config /etc/mup/mup.yaml   # validate only\n' +
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
        metricsPerRule?: PerRuleSeries;
        linkCheckMs: number;
        check?: boolean;
      }) => {
        if (o.check === true) {
          const { checkDaemonConfig } = await import('../daemon/check.js');
          const r = checkDaemonConfig({ configPath: resolve(o.config), instance: o.instance, ...(o.stateFile === undefined ? {} : { stateFile: resolve(o.stateFile) }) });
          io.out(r.lines.map((l) => `${l}\n`).join(''));
          return;
        }
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
            ...(o.metricsPerRule === undefined ? {} : { metricsPerRule: o.metricsPerRule }),
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
          throw Object.assign(e as Error, { logged: true }); // main() does not print it a second time
        }
      },
    );

  program
    .command('teardown')
    .summary('detach an instance from its interfaces and remove its pins (stops forwarding)')
    .description(
      'remove everything a daemon instance left in bpffs: its XDP links (the program leaves the interfaces), ' +
        'program and tables. Refused while a daemon serves the instance (found by the instance lock, whatever its ' +
        'socket): stop it first, or --force stops it (SIGTERM, then waits). This is what --detach-on-exit does at exit. Needs root.',
    )
    .option('--instance <name>', 'instance name', 'default')
    .option('--bpffs <dir>', 'bpf filesystem of the pins', DEFAULT_BPFFS)
    .option('--netns <name>', 'network namespace of the interfaces (ip netns name)')
    .option('--force', 'stop the daemon serving the instance first (SIGTERM; waits --wait seconds for it to exit)')
    .option('--wait <seconds>', 'with --force: how long to wait for the daemon to exit', int('--wait'), 15)
    .addHelpText('after', '\nExamples:\n  mup teardown --instance lab\n  mup teardown --instance lab --force   # stop its daemon first\n')
    .action(async (o: { instance: string; bpffs: string; netns?: string; force?: boolean; wait: number }) => {
      const { enterNetns } = await import('../dataplane/netns.js');
      const { isBpffs, Pins } = await import('../daemon/pins.js');
      const { instanceLockHolder } = await import('../host/lock.js');
      // Without the privileges to see the pins, "nothing to remove" would be a lie.
      canSeePins(o.bpffs, o.instance);
      const holder = instanceLockHolder(o.instance, o.bpffs);
      if (holder !== undefined) {
        if (o.force !== true) {
          throw new Error(
            `instance ${o.instance}: daemon pid ${holder} serves it (holds ${o.bpffs}/mup/${o.instance}); nothing removed. ` +
              `Stop it first (systemctl stop mup@${o.instance}, or kill ${holder}), or run mup teardown --force to stop it and tear down`,
          );
        }
        await stopDaemon(holder, o.wait, () => instanceLockHolder(o.instance, o.bpffs));
        io.err(`mup: instance ${o.instance}: stopped daemon pid ${holder}\n`);
      }
      if (o.netns !== undefined) enterNetns(o.netns);
      if (!isBpffs(o.bpffs)) {
        io.out(`${o.bpffs} is not a bpf filesystem: nothing pinned there\n`);
        return;
      }
      const removed = new Pins(o.bpffs, o.instance).removeAll();
      io.out(removed.length === 0 ? `instance ${o.instance}: nothing to remove\n` : `instance ${o.instance}: removed ${removed.join(', ')}\n`);
    });

  // ---------------------------------------------------------------- status
  /** `mup status`'s grace line: what the host's grace periods cost the changes (a daemon before session 41 has none). */
  const graceLine = (g: DaemonStatus['grace']): string => {
    const mean = g.periods === 0 ? '' : `, ${((g.seconds / g.periods) * 1000).toFixed(2)} ms each`;
    const setting = g.rcuExpedited === null ? 'rcu_expedited unknown' : `rcu_expedited ${g.rcuExpedited}`;
    const hint = g.rcuExpedited === 0 ? ' (not expedited: an add or replace after a delete or replace waits milliseconds; docs/daemon.md)' : '';
    return `grace      ${setting}: ${g.periods} grace periods${mean}; table writes waited ${g.waitSeconds.toFixed(1)} s${hint}`;
  };
  withTarget(program.command('status'))
    .summary('what the daemon runs: program, interfaces, tables, config; the exit status says whether it is healthy')
    .description(
      'what the daemon runs, and its health as the exit status (the LSB convention for status): 0 running and healthy ' +
        '(every configured interface attached, the tables hold the running config), 1 running but degraded (what is wrong ' +
        'is printed), 3 no daemon runs for the instance, 4 cannot tell (no permission, no answer). Usage errors: 2.',
    )
    .option('--json', 'print the API answer as JSON (with its health verdict under "health")')
    .option('--timeout <seconds>', 'how long to wait for the answer before exit status 4 (1 to 86400)', intIn('--timeout', 1, 86_400, 'seconds'), 10)
    .addHelpText('after', '\nExamples:\n  mup status\n  mup status --instance lab --json | jq .interfaces\n  mup status >/dev/null; echo $?     # 0 healthy, 1 degraded, 3 not running, 4 unknown\n')
    .action(async (o: TargetOpts & { json?: boolean; timeout: number }) => {
      const t = { ...target(o), timeoutMs: o.timeout * 1000 };
      let s: DaemonStatus;
      let h: HealthAnswer;
      try {
        s = await call<DaemonStatus>(t, 'GET', '/v1/status');
        h = await call<HealthAnswer>(t, 'GET', '/v1/health').catch((e: unknown) => {
          // 503: degraded, with the verdict in the body.
          if (e instanceof ApiError && e.status === 503 && (e.body as HealthAnswer | undefined)?.status === 'degraded') return e.body as HealthAnswer;
          throw e;
        });
      } catch (e) {
        throw statusError(e);
      }
      const degraded = (): never => {
        throw new ExitStatus(`instance ${s.instance} runs degraded: ${h.problems.map((p) => p.message).join('; ')}`, 1);
      };
      if (o.json === true) {
        io.out(`${JSON.stringify({ ...s, health: h }, null, 2)}\n`);
        if (h.status !== 'ok') degraded();
        return;
      }
      const lines = [
        `instance   ${s.instance} (pid ${s.pid}, up ${s.uptimeSeconds} s${s.adopted ? ', took over a running data plane' : ''})`,
        `program    ${s.program === null ? 'not pinned' : `id ${s.program.id} tag ${s.program.tag}`}  ${s.object.path}`,
        `config     ${s.config.file} (loaded ${s.config.loadedAt})`,
        `state      ${s.state.file} (${s.state.changes} API changes on top of the file)`,
        `forwarding ${s.forwarding}`,
        `tables     policies ${s.tables.policies.entries}/${s.tables.policies.capacity}, local SIDs ${s.tables.localsids.entries}/${s.tables.localsids.capacity}` +
          (s.tables.sessions === undefined ? '' : `, sessions ${s.tables.sessions.entries}/${s.tables.sessions.capacity}`),
        ...(s.grace === undefined ? [] : [graceLine(s.grace)]),
        '',
      ].join('\n');
      const rows = [['interface', 'mode', 'ifindex', 'state', 'prog id']];
      for (const i of s.interfaces) {
        const state = i.ifindex === null ? 'MISSING (attached when it appears)' : !i.attached ? 'NOT ATTACHED' : i.pinned === false ? 'attached (pin being restored)' : 'attached';
        rows.push([i.name, i.mode, i.ifindex === null ? 'gone' : String(i.ifindex), state, i.progId === null ? '-' : String(i.progId)]);
      }
      const verdict = h.status === 'ok' ? 'health     ok\n' : `health     DEGRADED\n${h.problems.map((p) => `           - ${p.message}\n`).join('')}`;
      io.out(`${lines}\n${table(rows)}\n${verdict}`);
      if (h.status !== 'ok') degraded();
    });

  // ---------------------------------------------------------------- apply
  withTarget(program.command('apply'))
    .summary('apply many rule changes at once, all or nothing (POST /v1/batch)')
    .description(
      'send a document {"operations": [{"op": "add"|"replace"|"delete", "policy"|"localsid"|"session": {...}}, ...]} ' +
        '(JSON or YAML; up to 10,000 operations) to the daemon: every operation is checked first, then all are applied ' +
        'in one table update and saved as one state-file record; if one is invalid or conflicts, nothing changes and the ' +
        'error names its index and key. An entry is as in the config file (delete: the key or the name only).',
    )
    .requiredOption('-f, --file <file>', 'the operations document, - for stdin')
    .option('--json', 'print the API answer as JSON')
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  mup apply -f ops.json\n' +
        '  mup apply -f - <<EOF\n' +
        '  operations:\n' +
        '    - { op: add, policy: { name: p9, match: 10.9.0.0/16, sr_prefix: "2001:db8:9::/48", src_prefix: "2001:db8:ffff::/64" } }\n' +
        '    - { op: delete, localsid: { name: old-gnb } }\n' +
        '  EOF\n',
    )
    .action(async (o: TargetOpts & { file: string; json?: boolean }) => {
      const doc = await readOperations(o.file);
      const r = await call<BatchAnswer>(target(o), 'POST', '/v1/batch', doc);
      if (o.json === true) return io.out(`${JSON.stringify(r, null, 2)}\n`);
      const order = r.deletesFirst === true ? ' (a table was full: its deletes were written first, to make room)' : '';
      io.out(`applied ${r.applied} operations: ${r.added} added, ${r.replaced} replaced, ${r.deleted} deleted${order}\n`);
    });

  // ---------------------------------------------------------------- rules
  for (const c of Object.values(RULE_COMMANDS)) {
    const { verb: kind, path, keyName } = c;
    const group = program.command(kind).summary(c.summary).description(c.description);

    withTarget(group.command('list'))
      .summary(`list the ${c.labels} in the tables`)
      .option('--json', 'print the API answer as JSON')
      .option('--limit <n>', `one page of at most N entries, in key order (1 to ${LIST_MAX_PAGE}); the cursor of the next page goes to stderr`, int('--limit'))
      .option('--after <cursor>', 'the page after this cursor (the `next` a page before printed)')
      .addHelpText('after', `\nExamples:\n  mup ${kind} list\n  mup ${kind} list --limit 100\n  mup ${kind} list --limit 100 --after <cursor>\n`)
      .action(async (o: TargetOpts & { json?: boolean; limit?: number; after?: string }) => {
        const t = target(o);
        type Page = Record<string, Record<string, unknown>[]> & { next?: string | null };
        const get = (limit: number, after: string | undefined): Promise<Page> =>
          call<Page>(t, 'GET', `${path}?limit=${limit}${after === undefined ? '' : `&after=${encodeURIComponent(after)}`}`);
        let list: Record<string, unknown>[];
        let next: string | null = null;
        if (o.limit !== undefined || o.after !== undefined) {
          const r = await get(o.limit ?? LIST_DEFAULT_PAGE, o.after);
          list = r[c.listKey] ?? [];
          next = r.next ?? null;
        } else {
          // The whole list in config order, streamed by the daemon rule by rule.
          list = (await call<Page>(t, 'GET', path))[c.listKey] ?? [];
        }
        if (next !== null) io.err(`next page: mup ${kind} list${targetFlags(o)} --limit ${o.limit ?? LIST_DEFAULT_PAGE} --after ${next}\n`);
        if (o.json === true) return io.out(`${JSON.stringify(o.limit !== undefined || o.after !== undefined ? { [c.listKey]: list, next } : list, null, 2)}\n`);
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
        .option('--json-body <json>', 'the whole entry as JSON, with the config file\'s keys');
      for (const f of c.fields) cmd.addOption(fieldOption(f));
      cmd.addHelpText('after', `\nExamples:\n${c.examples(op)}`).action(async (o: TargetOpts & Record<string, unknown>) => {
        let body: Record<string, unknown>;
        if (typeof o['jsonBody'] === 'string') {
          // The flags were dropped silently: the rule went in without the name or mtu typed beside it.
          const also = c.fields.filter((f) => fieldsBody([f], o)[f.key] !== undefined).map((f) => fieldFlag(f));
          if (also.length > 0) throw new Error(`--json-body is the whole entry: put ${also.join(', ')} in it (as the config file's keys), or leave --json-body out`);
          try {
            body = JSON.parse(o['jsonBody']) as Record<string, unknown>;
          } catch (e) {
            throw new Error(`--json-body is not JSON: ${(e as Error).message}`);
          }
        } else {
          body = fieldsBody(c.fields, o);
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
    .option('--watch [seconds]', 'refresh every N seconds (0.1 to 3600, default 1) with rates per second; Ctrl-C stops')
    .option('--top <n>', 'rules shown (busiest first)', int('--top'), 20)
    .option('--reset', 'zero every counter (asks the daemon; Prometheus sees a counter reset)')
    .option('--rule <name>', 'the counters of one rule, by name or key (whatever daemon.metrics.per_rule says)')
    .addOption(new Option('--kind <kind>', 'with --rule: the kind of rule the name is of (when kinds share it)').choices(['policy', 'localsid', 'session']))
    .addHelpText('after', '\nExamples:\n  mup stats\n  mup stats --watch\n  mup stats --rule n3-uplink\n  mup stats --json | jq .events.drop_gtp_bad_length\n')
    .action(async (o: TargetOpts & { json?: boolean; watch?: string | boolean; top: number; reset?: boolean; rule?: string; kind?: string }) => {
      const t = target(o);
      if (o.kind !== undefined && o.rule === undefined) throw new Error('--kind goes with --rule NAME');
      if (o.rule !== undefined) {
        if (o.watch !== undefined || o.reset === true) throw new Error('--rule shows one rule once: leave out --watch and --reset');
        const q = `rule=${encodeURIComponent(o.rule)}${o.kind === undefined ? '' : `&kind=${o.kind}`}`;
        const r = await call<{ at: string; rule: { kind: string; key: string; name?: string; rule: number; packets: number; bytes: number } | null }>(t, 'GET', `/v1/counters?${q}`);
        if (o.json === true) return io.out(`${JSON.stringify(r, null, 2)}\n`);
        if (r.rule === null) return io.out(`counters at ${r.at}\n\n${o.rule}: not in the tables (no counter slot)\n`);
        const x = r.rule;
        io.out(`counters at ${r.at}\n\n${table([['rule', 'kind', 'name', 'slot', 'packets', 'bytes'], [x.key, x.kind, x.name ?? '-', String(x.rule), String(x.packets), String(x.bytes)]], new Set([3, 4, 5]))}`);
        return;
      }
      if (o.reset === true) {
        await call(t, 'POST', '/v1/counters/reset');
        io.out('counters reset\n');
        return;
      }
      // With big tables only rules that have packets are fetched (an idle
      // rule has no rate, and is not among the busiest); small tables whole.
      const st = await call<DaemonStatus>(t, 'GET', '/v1/status');
      const which = ruleCount(st) > STATS_ALL_RULES ? 'active' : 'all';
      if (o.watch === undefined || o.watch === false) {
        const c = await call<CountersSnapshot>(t, 'GET', `/v1/counters?rules=${which}`);
        if (o.json === true) return io.out(`${JSON.stringify(c, null, 2)}\n`);
        io.out(statsText(c, undefined, o.top, which === 'active'));
        return;
      }
      const secs = o.watch === true ? 1 : Number(o.watch);
      // Infinity, 1e-9 and 3000000 became 1 ms timers: the whole counter read 500 times a second.
      if (!(secs >= 0.1 && secs <= 3600)) throw new Error(`--watch: expected 0.1 to 3600 seconds, got ${JSON.stringify(o.watch)}`);
      let prev = await call<CountersSnapshot>(t, 'GET', `/v1/counters?rules=${which}`);
      const tty = process.stdout.isTTY;
      let stop = false;
      let wake: (() => void) | undefined;
      let timer: NodeJS.Timeout | undefined;
      // Ctrl-C ends the wait at once (it waited out the interval: 30 s with --watch 30).
      const onInt = (): void => {
        stop = true;
        clearTimeout(timer);
        wake?.();
      };
      process.once('SIGINT', onInt);
      try {
        while (!stop) {
          await new Promise<void>((r) => {
            wake = r;
            timer = setTimeout(r, secs * 1000);
          });
          if (stop) break;
          const cur = await call<CountersSnapshot>(t, 'GET', `/v1/counters?rules=${which}`);
          const text = o.json === true ? `${JSON.stringify({ at: cur.at, ...rates(prev, cur) })}\n` : statsText(cur, prev, o.top, which === 'active');
          io.out(o.json === true ? text : tty ? `\x1b[H\x1b[2J${text}` : `${text}\n`); // --json: one line per interval, no blank ones
          prev = cur;
        }
      } finally {
        process.removeListener('SIGINT', onInt);
      }
    });

  withTarget(program.command('reload'))
    .summary('re-read the config file and apply its changes since the last load (as SIGHUP does); --check: only show them')
    .description(
      'apply the config file\'s changes since it was last loaded on top of the running rules: API changes to rules the edit ' +
        'leaves alone are kept (an edit that touches a rule an API change touched too is refused, naming the rules, and nothing ' +
        'changes). --check validates and prints the diff it would apply, one line per rule, and applies nothing.',
    )
    .option('--json', 'print the API answer as JSON')
    .option('--check', 'validate and print the diff (+ added, - deleted, ~ changed: key old -> new); apply nothing; exit 0 when it would apply')
    .option('--force', 'apply it even if it deletes more than daemon.reload_max_delete_share of the rules (default half)')
    .addHelpText('after', '\nExamples:\n  vi /etc/mup/mup.yaml && mup reload --check && mup reload\n')
    .action(async (o: TargetOpts & { json?: boolean; force?: boolean; check?: boolean }) => {
      const q = [o.force === true ? 'force=true' : '', o.check === true ? 'check=true' : ''].filter((x) => x !== '').join('&');
      const r = await call<ReloadResult>(target(o), 'POST', `/v1/reload${q === '' ? '' : `?${q}`}`);
      if (o.json === true) return io.out(`${JSON.stringify(r, null, 2)}\n`);
      const kept = r.apiChanges > 0 ? `; ${r.apiChanges} API changes kept on top of the file` : '';
      const absorbed = r.absorbed.length > 0 ? `; ${r.absorbed.length} API changes are in the file now (config)` : '';
      const missing = (r.interfaces.missing ?? []).length > 0 ? `; interface missing, not attached: ${r.interfaces.missing.join(', ')} (attached when it appears)` : '';
      if (r.checked === true) {
        const diff = r.diff ?? [];
        return io.out(
          `${diff.map((l) => `${l}\n`).join('')}` +
            `check: valid; would apply ${r.added} added, ${r.replaced} changed, ${r.deleted} deleted${kept}${absorbed}${missing}; nothing applied\n`,
        );
      }
      io.out(
        `reloaded: ${r.added} added, ${r.replaced} replaced, ${r.deleted} deleted, ${r.unchanged} unchanged` +
          `${r.programReplaced ? '; new program swapped in' : ''}${r.deletesFirst === true ? '; a table was full: its deletes were written first, to make room' : ''}${missing}${kept}${absorbed}\n`,
      );
    });

  // ---------------------------------------------------------------- config
  const config = program.command('config').summary('the running config (file + API changes): show it, save it into the config file');
  withTarget(config.command('show'))
    .summary('print the running config as YAML that mup daemon --config loads as it is, each rule\'s origin as a comment')
    .option('--no-origins', 'leave out the # origin: comments')
    .addHelpText('after', '\nExamples:\n  mup config show\n  mup config show | grep -B1 -A0 "origin: api"\n')
    .action(async (o: TargetOpts & { origins: boolean }) => {
      const r = await call<{ yaml: string }>(target(o), 'GET', `/v1/config${o.origins ? '' : '?origins=false'}`);
      io.out(r.yaml);
    });
  withTarget(config.command('save'))
    .summary('write the running config into the daemon\'s config file (API changes become config), or --to another file')
    .description(
      'write the running config atomically (temp file, fsync, rename, fsync of the directory), keeping the file\'s comments ' +
        'where its entries still exist. Into the daemon\'s own config file (the default), the API changes become config and ' +
        'the state file is emptied; --to FILE writes a copy and changes nothing in the daemon.',
    )
    .option('--to <file>', 'write this file instead of the daemon\'s config file')
    .addHelpText('after', '\nExamples:\n  mup config save\n  mup config save --to /tmp/running.yaml\n')
    .action(async (o: TargetOpts & { to?: string }) => {
      const t = target(o);
      if (o.to !== undefined) {
        const { realpathSync } = await import('node:fs');
        const real = (p: string): string => {
          try {
            return realpathSync(p);
          } catch {
            return resolve(p);
          }
        };
        const s = await call<{ file: string; yaml: string; apiChanges: number }>(t, 'GET', '/v1/config?origins=false');
        if (real(o.to) !== real(s.file)) {
          // What is written must load, as the daemon's own save reads back what it writes (found in review, session 43).
          const { parseConfig } = await import('../config/load.js');
          try {
            parseConfig(s.yaml, o.to);
          } catch (e) {
            throw new Error(`the running config the daemon printed does not load (${(e as Error).message}); nothing was written to ${o.to}`);
          }
          const { saveTarget, writeFileAtomic } = await import('../daemon/rules.js');
          // Through a symlink to its file, that file's mode and owner kept (a new file: 0644).
          const target = saveTarget(resolve(o.to));
          writeFileAtomic(target.path, s.yaml, undefined, target.mode, target.owner);
          return io.out(`wrote the running config (${s.apiChanges} API changes in it) to ${target.path}; the daemon's config file is unchanged\n`);
        }
      }
      const r = await call<{ file: string; saved: number }>(t, 'POST', '/v1/config/save');
      io.out(`saved the running config into ${r.file}: ${r.saved} API changes are config now\n`);
    });
}

interface HealthAnswer {
  readonly status: 'ok' | 'degraded';
  readonly problems: readonly { readonly code: string; readonly message: string }[];
}

interface BatchAnswer {
  readonly applied: number;
  readonly added: number;
  readonly replaced: number;
  readonly deleted: number;
  /** A table was full and the batch's own deletes made the room: written deletes first. */
  readonly deletesFirst?: true;
  readonly results: readonly { index: number; op: string; kind: string; key: string }[];
}

/** mup status's exit status for a failed question: 3 when no daemon runs, 4 when it cannot tell. */
function statusError(e: unknown): ExitStatus {
  const msg = e instanceof Error ? e.message : String(e);
  if (e instanceof ConnectError && (e.code === 'ENOENT' || e.code === 'ECONNREFUSED')) return new ExitStatus(msg, 3);
  return new ExitStatus(`cannot tell: ${msg}`, 4);
}

/** The operations document of mup apply: a file or stdin, JSON or YAML. */
async function readOperations(file: string): Promise<unknown> {
  let text: string;
  try {
    if (file === '-') {
      const chunks: Buffer[] = [];
      for await (const c of process.stdin) chunks.push(c as Buffer);
      text = Buffer.concat(chunks).toString('utf8');
    } else {
      text = readFileSync(file, 'utf8');
    }
  } catch (e) {
    throw new Error(`cannot read ${file === '-' ? 'stdin' : file}: ${(e as Error).message}`);
  }
  const where = file === '-' ? 'stdin' : file;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    // YAML (JSON is YAML too, but JSON.parse is faster for big documents)
  }
  const yaml = (await import('js-yaml')).default;
  try {
    return yaml.load(text, { schema: yaml.CORE_SCHEMA }) as unknown;
  } catch (e) {
    throw new Error(`${where}: neither JSON nor YAML: ${(e as Error).message.split('\n')[0]}`);
  }
}

/** Exit unless this process may see (and remove) the instance's pins: root, or CAP_BPF and CAP_SYS_ADMIN, and a readable bpffs. */
function canSeePins(bpffs: string, instance: string): void {
  const need = `mup teardown needs root (CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN) to see and remove the pins of instance ${instance} under ${bpffs}; run it with sudo`;
  if (process.geteuid?.() !== 0) {
    let caps = 0n;
    try {
      const m = /^CapEff:\s*([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'));
      caps = BigInt(`0x${m?.[1] ?? '0'}`);
    } catch {
      // no /proc: assume none
    }
    const CAP_SYS_ADMIN = 21n;
    const CAP_BPF = 39n;
    if ((caps & (1n << CAP_SYS_ADMIN)) === 0n || (caps & (1n << CAP_BPF)) === 0n) throw new Error(need);
  }
  try {
    readdirSync(bpffs);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EACCES' || code === 'EPERM') throw new Error(`${need} (${bpffs}: permission denied)`);
    // ENOENT: no bpffs there, nothing pinned (said below)
  }
}

/** SIGTERM `pid`, then wait until `holder()` no longer names it (the daemon released the instance), at most `seconds`. */
async function stopDaemon(pid: number, seconds: number, holder: () => number | undefined): Promise<void> {
  try {
    process.kill(pid, 'SIGTERM');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ESRCH') throw new Error(`cannot stop daemon pid ${pid}: ${(e as Error).message}`);
  }
  const deadline = Date.now() + seconds * 1000;
  while (holder() === pid) {
    if (Date.now() > deadline) {
      throw new Error(`daemon pid ${pid} did not exit within ${seconds} s of SIGTERM; nothing removed (check it, kill -9 ${pid}, then run mup teardown again)`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
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

/** Entries per page of `mup ... list` when only --after is given; the most one page holds (the API's limits). */
const LIST_DEFAULT_PAGE = 1000;
const LIST_MAX_PAGE = 10_000;

function fmtRate(x: number): string {
  return x >= 1e6 ? `${(x / 1e6).toFixed(2)} M` : x >= 1e3 ? `${(x / 1e3).toFixed(1)} k` : x.toFixed(0);
}

/** The counters as tables; with `prev`, rates per second since then. */
/** Above this many rules `mup stats` fetches only the rules that have packets. */
export const STATS_ALL_RULES = 2000;

/** Every rule in the tables: policies, local SIDs and sessions. */
function ruleCount(st: DaemonStatus): number {
  const t = st.tables;
  return t.policies.entries + t.localsids.entries + (t.sessions?.entries ?? 0);
}

function statsText(cur: CountersSnapshot, prev: CountersSnapshot | undefined, top: number, activeOnly = false): string {
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
  if (ruleList.length > top) out.push(`(${ruleList.length - top} more rules${activeOnly ? ' with packets' : ''}; --top N shows more)\n`);
  return out.join('\n');
}
