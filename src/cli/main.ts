/**
 * The `mup` command line. Thin: each command parses its options, calls one
 * library function, prints. Errors print one line `mup: ...` on stderr and
 * exit with status 2.
 */
import { createHash } from 'node:crypto';
import { readFileSync, realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';
import type { Config } from '../config/types.js';
import { BUILD_INFO, DEFAULT_OBJECT, PACKAGE_ROOT } from '../host/paths.js';
import { runningVersion } from '../host/version.js';
import { leaves, replay, SKIP_REASONS, type ReplayFrame, type ReplayResult } from '../dataplane/replay.js';
import { registerBench } from './bench.js';
import { registerBgp } from './bgp.js';
import { addSessionCommands } from './bgp-session.js';
import { columnWidths } from './column-widths.js';
import { registerLab } from './lab.js';
import { registerOps } from './ops.js';
import { registerProbe } from './probe.js';

interface Io {
  out(s: string): void;
  err(s: string): void;
}

const stdio: Io = {
  out: (s) => void process.stdout.write(s),
  err: (s) => void process.stderr.write(s),
};

/** Run the CLI. `argv` as in process.argv (node, script, args...). Returns the exit status. */
export async function main(argv: string[], io: Io = stdio): Promise<number> {
  let status = 0;
  if (io === stdio) quietEpipe();
  const program = new Command('mup')
    .description('srv6-mup: stateless GTP-U <-> SRv6 translator (RFC 9433, GTP-U over IPv4 and IPv6) in XDP')
    .option('-V, --version', 'print the version, the git commit it was built from and the sha256 of the BPF object it loads')
    .exitOverride()
    .configureOutput({
      writeOut: io.out,
      writeErr: io.err,
      outputError: (s, write) => write(`mup: ${s.replace(/^error: /, '')}`),
    })
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  mup daemon --config /etc/mup/mup.yaml     # run the translator\n' +
        '  mup status                                # what it runs\n' +
        '  mup stats --watch                         # packet rates per function, rule, drop reason\n' +
        '  mup policy replace --match 10.45.0.0/16 --sr-prefix 2001:db8:b::/48 --src-prefix 2001:db8:ffff::/64\n' +
        '  mup replay --config config/example.yaml --in gtp.pcap --out srv6.pcap\n',
    );

  if (argv[2] === '-V' || argv[2] === '--version') {
    io.out(versionText());
    return 0;
  }
  // One line, before any errno, for the commands that load or attach BPF programs.
  program.hook('preAction', (_root, action) => {
    let top = action;
    while (top.parent !== null && top.parent !== program) top = top.parent;
    // `daemon --check` only reads files: no daemon, no root.
    const checkOnly = top.name() === 'daemon' && action.opts().check === true;
    const need = checkOnly ? undefined : PRIVILEGED[top.name()];
    const missing = need === undefined ? [] : missingCaps(need);
    if (missing.length > 0) {
      throw new Error(`${top.name()} needs root, or the capabilities ${need!.join(', ')} (missing ${missing.join(', ')}): run it with sudo, or as the mup@ service`);
    }
  });

  registerOps(program, io);
  registerBench(program, io);
  registerProbe(program, io);
  registerLab(program, io);
  addSessionCommands(registerBgp(program, io), io);

  program
    .command('replay')
    .summary('run a pcap through the XDP program, write what leaves it to another pcap')
    .description(
      'run every frame of a pcap through the XDP program (BPF_PROG_TEST_RUN, forwarding forced to tx) ' +
        'and write the frames that leave it to another pcap: translated frames as translated, ' +
        'untouched ones (pass) as they were, drops not at all',
    )
    .requiredOption('--config <file>', 'YAML configuration (policies, local SIDs, settings)')
    .requiredOption('--in <pcap>', 'input capture (Ethernet; pcap or pcapng)')
    .requiredOption('--out <pcap>', 'output pcap, written even when empty')
    .option('--json', 'one JSON line per frame instead of the summary')
    .option('--object <path>', 'BPF object to load', DEFAULT_OBJECT)
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  mup replay --config config/example.yaml --in gtp.pcap --out srv6.pcap\n' +
        '  mup replay --config config/example.yaml --in gtp.pcap --out srv6.pcap --json | jq -c \'select(.verdict=="drop")\'\n',
    )
    .action(async (opts: { config: string; in: string; out: string; json?: boolean; object: string }) => {
      const { loadConfigFile } = await import('../config/load.js');
      const config = await loadConfigFile(opts.config);
      printWarnings(config, io);
      const result = await replay({ config, inPath: opts.in, outPath: opts.out, object: opts.object });
      if (opts.json === true) for (const chunk of jsonLines(result.frames)) io.out(chunk);
      else io.out(summary(result, opts.in, opts.out));
    });

  try {
    await program.parseAsync(argv);
  } catch (e) {
    if (e instanceof CommanderError) {
      // Help and version exit 0; usage errors were already printed by outputError.
      return e.exitCode === 0 ? 0 : 2;
    }
    // The daemon logged its fatal error already (the log is its output): once is enough.
    if (!(e instanceof Error && (e as { logged?: boolean }).logged === true)) io.err(`mup: ${oneLine(e)}\n`);
    if (process.env['MUP_DEBUG'] === '1' && e instanceof Error && e.stack !== undefined) io.err(`${e.stack}\n`);
    // A command's own exit status (mup status: 1 degraded, 3 not running, 4 unknown); else 2.
    const own = (e as { exitStatus?: unknown } | null)?.exitStatus;
    status = typeof own === 'number' ? own : 2;
  }
  return status;
}

/** `mup --version`: what runs, from which commit, with which data plane. */
function versionText(): string {
  let commit = 'unknown';
  try {
    commit = (JSON.parse(readFileSync(BUILD_INFO, 'utf8')) as { commit?: string }).commit ?? 'unknown';
  } catch {
    // not built by `make` (scripts/build-info.sh): unknown
  }
  let object: string;
  try {
    object = `sha256 ${createHash('sha256').update(readFileSync(DEFAULT_OBJECT)).digest('hex')}`;
  } catch (e) {
    object = `missing (${(e as NodeJS.ErrnoException).code ?? 'unreadable'}): run make`;
  }
  return `mup ${runningVersion()}\ncommit ${commit}\nbpf object ${DEFAULT_OBJECT} ${object}\ninstalled in ${PACKAGE_ROOT}\n`;
}

// Capability bits (linux/capability.h) and what each command needs: the
// programs' load (BPF, PERFMON for the verifier), XDP and netlink (NET_ADMIN),
// namespaces and bpffs mounts (SYS_ADMIN); docs/install.md explains the service's set.
const CAP_BITS = { CAP_NET_ADMIN: 12, CAP_NET_RAW: 13, CAP_SYS_ADMIN: 21, CAP_PERFMON: 38, CAP_BPF: 39 } as const;
type Cap = keyof typeof CAP_BITS;
const PRIVILEGED: Readonly<Record<string, readonly Cap[]>> = {
  daemon: ['CAP_BPF', 'CAP_PERFMON', 'CAP_NET_ADMIN'],
  teardown: ['CAP_BPF', 'CAP_NET_ADMIN'],
  replay: ['CAP_BPF', 'CAP_PERFMON', 'CAP_NET_ADMIN'],
  lab: ['CAP_SYS_ADMIN', 'CAP_NET_ADMIN', 'CAP_BPF'],
  bench: ['CAP_SYS_ADMIN', 'CAP_NET_ADMIN', 'CAP_BPF'],
  // Packet sockets to send and capture, the stamp ring's pinned maps, --tx-netns/--rx-netns, hardware stamping.
  probe: ['CAP_BPF', 'CAP_NET_RAW', 'CAP_NET_ADMIN', 'CAP_SYS_ADMIN'],
};

/** The capabilities of `need` this process lacks (its effective set, /proc/self/status CapEff). */
function missingCaps(need: readonly Cap[]): Cap[] {
  let eff: bigint;
  try {
    eff = BigInt(`0x${/^CapEff:\s*([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '0'}`);
  } catch {
    return []; // no /proc: let the kernel answer
  }
  return need.filter((c) => ((eff >> BigInt(CAP_BITS[c])) & 1n) === 0n);
}

/** A reader that went away (`mup stats --watch --json | head`) ends the command quietly. */
function quietEpipe(): void {
  for (const s of [process.stdout, process.stderr]) {
    if (s.listenerCount('error') > 0) continue;
    s.on('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'EPIPE') process.exit(0);
      throw e;
    });
  }
}

function oneLine(e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e);
  return msg.split('\n')[0] ?? msg;
}

function printWarnings(config: Config, io: Io): void {
  for (const w of config.warnings ?? []) io.err(`mup: warning: ${w.message}\n`);
}

/** Why a frame did not leave: its skip reason, or the program's drop event; null if it left. */
function reason(f: ReplayFrame): string | null {
  if (f.skipped !== undefined) return f.skipped;
  return leaves(f.verdict) ? null : f.event;
}

/**
 * The frames' JSON lines, JSON_CHUNK frames a string: one string of every
 * frame passed V8's longest (about 7 million frames) and failed after the
 * output capture was written (found in review, session 43).
 */
const JSON_CHUNK = 10_000;
function* jsonLines(frames: readonly ReplayFrame[]): Generator<string> {
  for (let i = 0; i < frames.length; i += JSON_CHUNK) {
    yield frames
      .slice(i, i + JSON_CHUNK)
      .map(
        (f) =>
          JSON.stringify({
            index: f.index,
            verdict: f.verdict,
            reason: reason(f),
            event: f.event,
            out_len: f.outLen,
            ...(f.skipped === undefined ? {} : { in_len: f.inLen, detail: SKIP_REASONS[f.skipped] }),
          }) +
          '\n',
      )
      .join('');
  }
}

function countBy(frames: readonly ReplayFrame[], key: (f: ReplayFrame) => string): [string, number][] {
  const counts = new Map<string, number>();
  for (const f of frames) counts.set(key(f), (counts.get(key(f)) ?? 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
}

function table(title: string, rows: readonly [string, number][]): string {
  const width = Math.max(title.length, ...rows.map(([k]) => k.length));
  const num = Math.max(6, ...rows.map(([, n]) => String(n).length));
  return [
    `${title.padEnd(width)}  ${'frames'.padStart(num)}`,
    ...rows.map(([k, n]) => `${k.padEnd(width)}  ${String(n).padStart(num)}`),
  ].join('\n');
}

/** Per-function and per-rule counters, as the program counted them. */
function counterTable(r: ReplayResult): string {
  const rows: [string, string, string][] = [['translated by', 'packets', 'bytes']];
  for (const [fn, v] of Object.entries(r.counters.functions)) rows.push([fn, String(v.packets), String(v.bytes)]);
  for (const rule of r.counters.rules) rows.push([`  ${rule.where} (${rule.kind})`, String(rule.packets), String(rule.bytes)]);
  const w = columnWidths(rows);
  return rows.map(([a, b, c]) => `${a.padEnd(w[0]!)}  ${b.padStart(w[1]!)}  ${c.padStart(w[2]!)}`).join('\n');
}

/** Skipped frames by reason, each with what it means. */
function skippedTable(r: ReplayResult): string[] {
  if (r.skipped === 0) return [];
  const rows = countBy(
    r.frames.filter((f) => f.skipped !== undefined),
    (f) => f.skipped!,
  );
  const lines = table('skipped (not run)', rows).split('\n');
  const meaning = rows.map(([k]) => SKIP_REASONS[k as keyof typeof SKIP_REASONS]);
  return [[lines[0], ...lines.slice(1).map((l, i) => `${l}  ${meaning[i]}`)].join('\n'), ''];
}

function summary(r: ReplayResult, inPath: string, outPath: string): string {
  const skipped = r.skipped === 0 ? '' : `, ${r.skipped} skipped (not run through the program)`;
  const head = `${r.frames.length} frames from ${inPath}, ${r.written} written to ${outPath}${skipped}`;
  if (r.frames.length === 0) return `${head}\n`;
  const run = r.frames.filter((f) => f.skipped === undefined);
  return [
    head,
    '',
    table('verdict', countBy(r.frames, (f) => f.verdict)),
    '',
    ...skippedTable(r),
    table('event', countBy(run, (f) => f.event ?? '(none)')),
    '',
    counterTable(r),
    '',
    '(--json prints one line per frame)',
    '',
  ].join('\n');
}

// Run from the sources (`tsx src/cli/main.ts ARGS`): `npm run bench` is
// `mup bench rfc2544` so, and the benchmark's background load child
// (`probe-loadgen`) is started the same way. bin/mup.js runs the compiled
// CLI and calls main() itself.
function isEntry(): boolean {
  try {
    return process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url);
  } catch {
    return false; // argv[1] is no file (node -e, a REPL): not run as a script
  }
}
if (isEntry()) {
  void main(process.argv).then((code) => {
    process.exitCode = code;
  });
}
