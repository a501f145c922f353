/**
 * `mup lab run` (what `make demo` calls): lab up, the three measurements on
 * the translated and the plain path, the translator's and the gNB
 * emulator's counters, one decoded frame per wire; JSON and Markdown
 * written; lab down unless kept.
 */
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { gnbCounters, gnbDelta, type GnbCounters } from './gnb.js';
import { labApi, labCore, labDown, labPe, labUp, type CoreMode, type LabPaths, type Progress } from './lab.js';
import type { PeMode } from './pe.js';
import { captureWires, iperfServer, ping, pingOneHop, tcp, udp, type PathName, type PingResult, type TcpResult, type UdpResult, type WireCapture } from './measure.js';
import type { LabTopology } from './topology.js';
import { makeDirs } from '../host/mkdirs.js';

export interface RunOptions {
  readonly prefix: string;
  readonly out: string;
  readonly keep: boolean;
  readonly pingCount: number;
  readonly tcpSeconds: number;
  readonly udpSeconds: number;
  readonly udpMbps: number;
  readonly udpBytes: number;
  readonly progress: Progress;
}

export const RUN_DEFAULTS = { pingCount: 20, tcpSeconds: 10, udpSeconds: 10, udpMbps: 500, udpBytes: 1400 } as const;

/** Pings back to back (one every 2 ms): no idle vCPU between them to wake up. */
export const BUSY_PING = { count: 200, interval: '0.002' } as const;

export interface PathResults {
  readonly ping: PingResult;
  readonly pingBusy: PingResult;
  readonly tcp: TcpResult;
  readonly udp: UdpResult;
}

interface FunctionCounters {
  readonly packets: number;
  readonly bytes: number;
}

export interface LabReport {
  readonly at: string;
  readonly host: { readonly loadavg: readonly number[]; readonly loadavgAfter: readonly number[]; readonly cpus: number };
  readonly mtu: { readonly ue: number; readonly transit: number };
  /** How core ends the uplink and who builds the PE downlink (docs/lab.md). */
  readonly core: CoreMode;
  readonly pe: PeMode;
  readonly translated: PathResults;
  readonly plain: PathResults;
  /** The same ping over one plain veth hop (dn to core): this host's floor. */
  readonly oneHop: PingResult;
  readonly ratio: { readonly tcp: number; readonly udpReceived: number };
  readonly translator: {
    readonly functions: Record<string, FunctionCounters>;
    readonly events: Record<string, FunctionCounters>;
  };
  readonly gnb: GnbCounters;
  readonly wires: readonly Omit<WireCapture, 'summary'>[];
  readonly seconds: number;
  readonly files: { readonly json: string; readonly markdown: string; readonly pcaps: readonly string[] };
}

async function measurePath(t: LabTopology, path: PathName, o: RunOptions): Promise<PathResults> {
  o.progress(`${path}: ping -c ${o.pingCount}`);
  const p = await ping(t, path, o.pingCount);
  const pb = await ping(t, path, BUSY_PING.count, t.dn.addr, BUSY_PING.interval);
  o.progress(`${path}: iperf3 TCP ${o.tcpSeconds} s`);
  const tc = await tcp(t, path, o.tcpSeconds);
  o.progress(`${path}: iperf3 UDP ${o.udpMbps} Mbit/s offered, ${o.udpSeconds} s`);
  const u = await udp(t, path, o.udpSeconds, o.udpMbps, o.udpBytes);
  return { ping: p, pingBusy: pb, tcp: tc, udp: u };
}

/** Measure on a lab that is up. */
export async function measureLab(t: LabTopology, paths: LabPaths, o: RunOptions): Promise<LabReport> {
  const started = Date.now();
  const load0 = loadavg();
  const out = resolve(o.out);
  makeDirs(out);
  const server = await iperfServer(t);
  try {
    const reset = await labApi(paths, 'POST', '/v1/counters/reset');
    if (reset.status !== 200) throw new Error(`counter reset: HTTP ${reset.status}`);
    const g0 = await gnbCounters(paths.bpffs);
    o.progress('capture on N3 and SRv6 wires (tcpdump), decode (tshark)');
    const wires = await captureWires(t, out, 4, () => ping(t, 'translated', 4));
    const translated = await measurePath(t, 'translated', o);
    const plain = await measurePath(t, 'plain', o);
    const oneHop = await pingOneHop(t, o.pingCount);
    const c = await labApi<{ functions: Record<string, FunctionCounters>; events: Record<string, FunctionCounters> }>(paths, 'GET', '/v1/counters?rules=none');
    const g = gnbDelta(g0, await gnbCounters(paths.bpffs));
    const events = Object.fromEntries(Object.entries(c.body.events).filter(([, v]) => v.packets > 0));
    const json = join(out, 'lab-run.json');
    const markdown = join(out, 'lab-run.md');
    const report: LabReport = {
      at: new Date(started).toISOString(),
      host: { loadavg: load0.map((x) => Math.round(x * 100) / 100), loadavgAfter: loadavg().map((x) => Math.round(x * 100) / 100), cpus: (await import('node:os')).cpus().length },
      mtu: { ue: t.ue.mtu, transit: t.mup.mtu },
      core: labCore(paths),
      pe: labPe(paths),
      translated,
      plain,
      oneHop,
      ratio: {
        tcp: plain.tcp.gbps > 0 ? translated.tcp.gbps / plain.tcp.gbps : 0,
        udpReceived: plain.udp.receivedMbps > 0 ? translated.udp.receivedMbps / plain.udp.receivedMbps : 0,
      },
      translator: { functions: c.body.functions, events },
      gnb: g,
      wires: wires.map(({ summary: _s, ...w }) => w),
      seconds: Math.round((Date.now() - started) / 100) / 10,
      files: { json, markdown, pcaps: wires.map((w) => w.file) },
    };
    writeFileSync(json, JSON.stringify(report, null, 2) + '\n');
    writeFileSync(markdown, renderMarkdown(report, wires));
    return report;
  } finally {
    await server.stop();
  }
}

/** Which kernel SRv6 the run had (--core, --pe), in a sentence. */
function coreLine(r: Pick<LabReport, 'core' | 'pe'>): string {
  const core = r.core === 'routes' ? "core: the kernel's seg6local End.DX4 (--core routes)" : "core: the kernel's SRH endpoint in each site, this kernel having no SRv6 routes (--core srh)";
  return `${core}; PE downlink: ${r.pe === 'kernel' ? "the kernel's seg6 encap" : 'mup daemon sessions'} (--pe ${r.pe}).`;
}

/** lab up, measure, lab down (unless keep). */
export async function runLab(o: RunOptions): Promise<LabReport> {
  o.progress(`lab up (prefix ${o.prefix})`);
  const { topology, paths } = await labUp(o.prefix, o.progress);
  try {
    return await measureLab(topology, paths, o);
  } finally {
    if (!o.keep) {
      o.progress('lab down');
      await labDown(o.prefix);
    } else {
      o.progress(`lab kept: mup lab shell ue --prefix ${o.prefix}; mup lab down --prefix ${o.prefix}`);
    }
  }
}

const f = (n: number, d = 2): string => n.toFixed(d);

function pingCell(p: PingResult): string {
  return p.rttMs === null ? `${p.received}/${p.sent}, no reply` : `${f(p.lossPct, 0)} % loss, median ${f(p.rttMs.median, 3)} ms (min ${f(p.rttMs.min, 3)}, max ${f(p.rttMs.max, 3)})`;
}

function udpCell(u: UdpResult): string {
  return `${f(u.lossPct, 3)} % loss (${u.lost}/${u.packets}; ${u.rcvbufErrors} at the server socket), sent ${f(u.sentMbps, 0)} Mbit/s`;
}

/** The result table (translated vs plain), as plain text rows for the terminal. */
export function resultRows(r: LabReport): string[][] {
  return [
    ['', 'translated (GTP-U + SRv6)', 'plain (routed IPv4)'],
    [`ping -c ${r.translated.ping.sent} -i 0.05`, pingCell(r.translated.ping), pingCell(r.plain.ping)],
    [`ping -c ${r.translated.pingBusy.sent} -i ${BUSY_PING.interval}`, pingCell(r.translated.pingBusy), pingCell(r.plain.pingBusy)],
    [
      `iperf3 TCP ${f(r.translated.tcp.seconds, 0)} s`,
      `${f(r.translated.tcp.gbps)} Gbit/s (${r.translated.tcp.retransmits} retr)`,
      `${f(r.plain.tcp.gbps)} Gbit/s (${r.plain.tcp.retransmits} retr)`,
    ],
    [`iperf3 UDP ${r.translated.udp.offeredMbps} Mbit/s offered, ${r.translated.udp.datagramBytes} B`, udpCell(r.translated.udp), udpCell(r.plain.udp)],
  ];
}

export function table(rows: string[][]): string {
  const w = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => c.padEnd(w[i]!)).join('  ').trimEnd()).join('\n') + '\n';
}

export function renderText(r: LabReport, wires?: readonly WireCapture[]): string {
  const lines: string[] = [];
  lines.push(`\nsrv6-mup lab, ${r.at}, load average ${r.host.loadavg.join(' ')} -> ${r.host.loadavgAfter.join(' ')} (${r.host.cpus} CPUs), MTU ${r.mtu.ue} (UE, DN) / ${r.mtu.transit} (N3, SRv6); iperf3 UDP -w ${r.translated.udp.socketBuffer}\n${coreLine(r)}\n`);
  lines.push(table(resultRows(r)));
  lines.push(`translated/plain: TCP ${f(r.ratio.tcp)}, UDP received ${f(r.ratio.udpReceived)}\n`);
  lines.push(`one veth hop (dn -> core, no XDP, no TC), ping -c ${r.oneHop.sent} -i 0.05: ${pingCell(r.oneHop)}: this host's wake-up floor\n`);
  lines.push('translator counters (mup daemon, /v1/counters):');
  for (const [k, v] of Object.entries(r.translator.functions)) lines.push(`  ${k.padEnd(20)} ${String(v.packets).padStart(10)} packets ${String(v.bytes).padStart(14)} bytes`);
  const ev = Object.entries(r.translator.events).map(([k, v]) => `${k} ${v.packets}`);
  lines.push(`  events: ${ev.join(', ') || '(none)'}`);
  lines.push('gNB emulator counters (bpf/lab/gnb.bpf.c):');
  lines.push(`  ${Object.entries(r.gnb).filter(([, v]) => v !== 0).map(([k, v]) => `${k} ${v}`).join(', ') || '(none)'}`);
  for (const w of r.wires) {
    lines.push(`\n${w.wire} wire (${w.ns} ${w.dev}): ${w.frames} frames captured, ${w.malformed} malformed; first frame decoded by tshark:`);
    const full = wires?.find((x) => x.wire === w.wire);
    if (full !== undefined) for (const s of full.summary) lines.push(`  | ${s.trim()}`);
    lines.push(...w.decoded.split('\n').map((l) => `    ${l}`));
  }
  lines.push(`\nwritten: ${r.files.json}, ${r.files.markdown}, ${r.files.pcaps.join(', ')} (${r.seconds} s)\n`);
  return lines.join('\n');
}

function renderMarkdown(r: LabReport, wires: readonly WireCapture[]): string {
  const rows = resultRows(r);
  const md = [
    `# srv6-mup lab run, ${r.at}`,
    '',
    `Load average ${r.host.loadavg.join(' ')} at the start, ${r.host.loadavgAfter.join(' ')} at the end, ${r.host.cpus} CPUs. MTU ${r.mtu.ue} on the UE and data network links, ${r.mtu.transit} on N3 and the SRv6 link. ${coreLine(r)}`,
    '',
    `| ${rows[0]!.join(' | ')} |`,
    `|${rows[0]!.map(() => '---').join('|')}|`,
    ...rows.slice(1).map((row) => `| ${row.join(' | ')} |`),
    '',
    `Translated/plain: TCP ${f(r.ratio.tcp)}, UDP received ${f(r.ratio.udpReceived)}.`,
    '',
    `One veth hop (dn to core, no XDP, no TC), ping -c ${r.oneHop.sent} -i 0.05: ${pingCell(r.oneHop)}. On a VM whose idle vCPUs sleep between pings each hop pays a wake-up; the ping every 2 ms above has none.`,
    '',
    '## Translator counters',
    '',
    '| function | packets | bytes |',
    '|---|---|---|',
    ...Object.entries(r.translator.functions).map(([k, v]) => `| ${k} | ${v.packets} | ${v.bytes} |`),
    '',
    `Events: ${Object.entries(r.translator.events).map(([k, v]) => `${k} ${v.packets}`).join(', ') || '(none)'}.`,
    '',
    `gNB emulator: ${Object.entries(r.gnb).filter(([, v]) => v !== 0).map(([k, v]) => `${k} ${v}`).join(', ') || '(none)'}.`,
    '',
    ...wires.flatMap((w) => [
      `## ${w.wire} wire (${w.ns} ${w.dev}): ${w.frames} frames, ${w.malformed} malformed`,
      '',
      '```',
      ...w.summary.map((s) => s.trim()),
      '',
      w.decoded,
      '```',
      '',
    ]),
  ];
  return md.join('\n');
}
