#!/usr/bin/env node
// mup(1) from the CLI's own help: `mup --help` and `mup <command> --help`
// for every command and subcommand commander knows, each as printed, in
// one roff page on stdout. Run against an installed tree (--lib) so that the
// defaults it shows are the installed paths (--as: what --lib will be on the
// target system).
//
//   node scripts/man.mjs [--lib DIR] [--as /usr/lib/srv6-mup] [--sysconfdir /etc]
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1] : dflt;
};
const lib = resolve(opt('--lib', new URL('..', import.meta.url).pathname));
const as = opt('--as', lib);
const sysconfdir = opt('--sysconfdir', '/etc');
const { main } = await import(pathToFileURL(join(lib, 'dist/cli/main.js')).href);
const pkg = JSON.parse(readFileSync(join(lib, 'package.json'), 'utf8'));

async function help(path) {
  let out = '';
  const io = { out: (s) => void (out += s), err: (s) => void (out += s) };
  const code = await main(['node', 'mup', ...path, '--help'], io);
  if (code !== 0) throw new Error(`mup ${path.join(' ')} --help exited ${code}: ${out}`);
  return out.replaceAll(lib, as).replace(/\s+$/, '');
}

/** Subcommand names from the "Commands:" section of a help text (not `help` itself). */
function commands(text) {
  const m = /\nCommands:\n([\s\S]*?)(\n\n|$)/.exec(text);
  if (m === null) return [];
  return m[1]
    .split('\n')
    .map((l) => /^ {2}([a-z0-9][a-z0-9-]*)/.exec(l)?.[1])
    .filter((n) => n !== undefined && n !== 'help');
}

const sections = [];
async function walk(path) {
  const text = await help(path);
  sections.push({ path, text });
  for (const c of commands(text)) await walk([...path, c]);
}
await walk([]);

/** Text as roff: backslashes escaped, no line starting with a control character. */
const roff = (s) =>
  s
    .replaceAll('\\', '\\e')
    .split('\n')
    .map((l) => (/^[.']/.test(l) ? `\\&${l}` : l))
    .join('\n');

const top = sections[0].text;
const summary = /\n\n(.*?)\n\n/s.exec(top)?.[1].replace(/\s+/g, ' ') ?? 'stateless GTP-U <-> SRv6 translator';
const date = process.env.SOURCE_DATE_EPOCH ? new Date(Number(process.env.SOURCE_DATE_EPOCH) * 1000) : new Date();
const out = [
  `.TH MUP 1 "${date.toISOString().slice(0, 10)}" "srv6-mup ${pkg.version}" "User Commands"`,
  '.SH NAME',
  `mup \\- ${roff(summary.replace(/^srv6-mup: /, ''))}`,
  '.SH SYNOPSIS',
  '.B mup',
  '.I command',
  '[options]',
  '.SH DESCRIPTION',
  'Each section below is the help the command prints itself',
  '(\\fBmup\\fR \\fIcommand\\fR \\fB\\-\\-help\\fR).',
  ...sections.flatMap(({ path, text }) => [
    path.length === 0 ? '.SH OPTIONS AND COMMANDS' : `.SS "mup ${path.join(' ')}"`,
    '.nf',
    roff(text),
    '.fi',
  ]),
  '.SH FILES',
  '.TP',
  `.I ${sysconfdir}/mup/<instance>.yaml`,
  'the configuration of the daemon of an instance (the mup@<instance> service);',
  `.I ${sysconfdir}/mup/example.yaml`,
  'explains it key by key',
  '.TP',
  '.I /run/mup/<instance>.sock',
  'the control API of the daemon',
  '.TP',
  '.I /var/lib/mup/<instance>.state.json',
  'changes made through the API',
  '.TP',
  `.I ${as}/build/mup.bpf.o`,
  'the XDP program (\\fBmup \\-\\-version\\fR prints its sha256)',
  '.SH EXIT STATUS',
  '0 on success; 2 for usage errors and failures, with one line on standard error.',
  '.SH SEE ALSO',
  '.BR systemctl (1),',
  '.BR bpftool (8),',
  '.BR ip (8)',
  '',
];
process.stdout.write(out.join('\n'));
