/**
 * `mup probe`: one-way latency through the translator with sequence-numbered
 * probe frames, wire stamps and the data plane's in-band stamps
 * (src/probe/). `--sweep` repeats it under increasing background load.
 */
import { execFileSync } from 'node:child_process';
import { Command, Option } from 'commander';
import { DEFAULT_OBJECT } from '../host/paths.js';
import type { Config } from '../config/types.js';
import { parseIpv4, parseIpv6 } from '../sid/addr.js';
import type { DirectionSetup, Endpoint, ProbeRunResult } from '../probe/probe.js';
import type { StampSession } from '../probe/session.js';
import type { TimestampMode } from '../probe/native.js';
import { registerLoadgen } from './probe-sweep.js';

interface Io {
  out(s: string): void;
  err(s: string): void;
}

export interface ProbeCliOpts {
  direction: 'uplink' | 'downlink' | 'both';
  rate: string;
  duration: string;
  size: string;
  udpPort: string;
  timestamping: TimestampMode;
  txNetns?: string;
  txDev?: string;
  rxNetns?: string;
  rxDev?: string;
  downTxNetns?: string;
  downTxDev?: string;
  downRxNetns?: string;
  downRxDev?: string;
  upDstMac?: string;
  downDstMac?: string;
  gnb: string;
  n3: string;
  teid: string;
  qfi: string;
  ue: string;
  dn: string;
  dlSrc?: string;
  dlSid?: string;
  socket?: string;
  config?: string;
  attach?: string;
  object?: string;
  xdpMode: 'native' | 'generic';
  inBand: boolean;
  sample: string;
  out?: string;
  json?: boolean;
  progress: boolean;
  grace: string;
  sweep?: boolean;
  sweepRate?: string;
  sweepSteps?: string;
  sweepSeconds?: string;
  lab?: string | true;
}

export function num(s: string, what: string, min: number, max: number, integer = false): number {
  // The whole text: parseInt stopped at the first bad digit, so --teid 0x1000zz was 4096.
  const n = /^0x/i.test(s) ? (/^0x[0-9a-f]+$/i.test(s) ? Number.parseInt(s.slice(2), 16) : NaN) : s.trim() === '' ? NaN : Number(s);
  if (!Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n))) {
    throw new Error(`--${what} ${s}: ${integer ? 'an integer' : 'a number'} from ${min} to ${max}`);
  }
  return n;
}

function endpoint(netns: string | undefined, dev: string | undefined, what: string, flag: string): Endpoint {
  if (dev === undefined) throw new Error(`${what}: give --${flag}-dev (and --${flag}-netns when it is in a namespace)`);
  return netns === undefined ? { dev } : { netns, dev };
}

/** NS/DEV or DEV. */
function parseAttach(s: string): Endpoint[] {
  return s
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '')
    .map((x) => {
      const i = x.lastIndexOf('/');
      return i < 0 ? { dev: x } : { netns: x.slice(0, i), dev: x.slice(i + 1) };
    });
}

/** The MAC of an interface, from `ip -j link show`. */
function macOf(e: Endpoint): string {
  const args = [...(e.netns === undefined ? [] : ['-n', e.netns]), '-j', 'link', 'show', 'dev', e.dev];
  let out: string;
  try {
    out = execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    throw new Error(`reading the MAC of ${e.netns ?? ''}${e.netns === undefined ? '' : '/'}${e.dev}: ${(err as Error).message.split('\n')[0]}`);
  }
  const mac = (JSON.parse(out) as { address?: string }[])[0]?.address;
  if (mac === undefined) throw new Error(`${e.dev} has no MAC address`);
  return mac;
}

/**
 * `--lab [PREFIX]`: the endpoints of a lab made by `mup lab up` (src/lab/topology.ts).
 * Uplink GTP-U is sent on the gNB's N3 veth and the SRv6 captured on the core's
 * veth facing the translator; downlink the reverse, to the lab's End.M.GTP4.E
 * SID from the core's seg6 source. The stamps are switched on in the lab's
 * daemon. Options given explicitly win.
 */
export async function applyLab(o: ProbeCliOpts, given: (key: string) => boolean): Promise<void> {
  if (o.lab === undefined) return;
  const { labTopology, DEFAULT_PREFIX } = await import('../lab/topology.js');
  const { labPaths } = await import('../lab/lab.js');
  const t = labTopology(o.lab === true ? DEFAULT_PREFIX : o.lab);
  const p = labPaths(t);
  const { existsSync } = await import('node:fs');
  if (!existsSync(p.socket)) {
    throw new Error(`--lab ${t.prefix}: no lab daemon socket at ${p.socket}; build the lab first: mup lab up${t.prefix === DEFAULT_PREFIX ? '' : ` --prefix ${t.prefix}`}`);
  }
  if (o.config !== undefined) throw new Error('--lab uses the lab\'s daemon: leave out --config');
  o.txNetns ??= t.ns.gnb;
  o.txDev ??= t.gnb.n3;
  o.rxNetns ??= t.ns.core;
  o.rxDev ??= t.core.toMup;
  o.upDstMac ??= macOf({ netns: t.ns.mup, dev: t.mup.n3 });
  o.downDstMac ??= macOf({ netns: t.ns.mup, dev: t.mup.core });
  o.dlSid ??= t.sids.dlSid;
  o.dlSrc ??= t.core.tunsrc;
  o.socket ??= p.socket;
  if (!given('gnb')) o.gnb = t.gnb.addr;
  if (!given('n3')) o.n3 = t.mup.n3Addr;
  if (!given('teid')) o.teid = String(t.gnb.ulTeid);
  if (!given('qfi')) o.qfi = String(t.gnb.qfi);
  if (!given('ue')) o.ue = t.ue.addr;
  if (!given('dn')) o.dn = t.dn.addr;
}

export async function directionSetups(o: ProbeCliOpts, attach: readonly Endpoint[]): Promise<DirectionSetup[]> {
  const { parseMac } = await import('../packet/probe-frames.js');
  const dirs = o.direction === 'both' ? (['uplink', 'downlink'] as const) : ([o.direction] as const);
  const out: DirectionSetup[] = [];
  for (const dir of dirs) {
    if (dir === 'uplink') {
      const tx = endpoint(o.txNetns, o.txDev, 'uplink: where GTP-U probes are sent toward the translator', 'tx');
      const rx = endpoint(o.rxNetns, o.rxDev, 'uplink: where the translated SRv6 frames are captured', 'rx');
      const mac = o.upDstMac ?? (attach[0] !== undefined ? macOf(attach[0]) : undefined);
      if (mac === undefined) throw new Error('uplink: give --up-dst-mac (the MAC of the translator\'s N3 interface), or --attach NS/N3DEV,...');
      out.push({
        dir, tx, rx, dstMac: parseMac(mac, '--up-dst-mac'),
        uplink: {
          gnb: parseIpv4(o.gnb, '--gnb'), n3: parseIpv4(o.n3, '--n3'), teid: num(o.teid, 'teid', 0, 0xffffffff, true),
          qfi: num(o.qfi, 'qfi', 0, 63, true), ue: parseIpv4(o.ue, '--ue'), dn: parseIpv4(o.dn, '--dn'),
        },
      });
    } else {
      const tx = endpoint(o.downTxNetns ?? (o.downTxDev === undefined ? o.rxNetns : undefined), o.downTxDev ?? o.rxDev, 'downlink: where SRv6 probes are sent toward the translator', 'down-tx');
      const rx = endpoint(o.downRxNetns ?? (o.downRxDev === undefined ? o.txNetns : undefined), o.downRxDev ?? o.txDev, 'downlink: where the translated GTP-U frames are captured', 'down-rx');
      const mac = o.downDstMac ?? (attach[1] !== undefined ? macOf(attach[1]) : undefined);
      if (mac === undefined) throw new Error('downlink: give --down-dst-mac (the MAC of the translator\'s core-side interface), or --attach NS/N3DEV,NS/COREDEV');
      if (o.dlSid === undefined || o.dlSrc === undefined) {
        throw new Error('downlink: give --dl-sid (the End.M.GTP4.E SID with its arguments: gNB, QFI, TEID) and --dl-src (outer IPv6 source)');
      }
      out.push({
        dir, tx, rx, dstMac: parseMac(mac, '--down-dst-mac'),
        downlink: { src: parseIpv6(o.dlSrc, '--dl-src'), sid: parseIpv6(o.dlSid, '--dl-sid'), dn: parseIpv4(o.dn, '--dn'), ue: parseIpv4(o.ue, '--ue') },
      });
    }
  }
  return out;
}

/** The in-band stamps: from the daemon, from a data plane loaded here, or none. */
export async function stampSession(o: ProbeCliOpts, attach: readonly Endpoint[], udpPort: number): Promise<StampSession | undefined> {
  const sample = num(o.sample, 'sample', 1, 0xffffffff, true);
  const { daemonSession, standaloneSession } = await import('../probe/session.js');
  if (!o.inBand) {
    if (o.socket !== undefined || o.config !== undefined) throw new Error('--no-in-band takes neither --socket nor --config');
    return undefined;
  }
  if ((o.socket === undefined) === (o.config === undefined)) {
    throw new Error(
      'say where the translator runs: --socket PATH (a running mup daemon), or --config FILE --attach NS/DEV,... ' +
        '(load and attach the data plane here), or --no-in-band (wire latency only)',
    );
  }
  if (o.socket !== undefined) return daemonSession({ socket: o.socket, udpPort, sample });
  if (attach.length === 0) throw new Error('--config needs --attach NS/N3DEV,NS/COREDEV: the translator\'s interfaces to attach the data plane to');
  const { loadConfigFile } = await import('../config/load.js');
  const config: Config = await loadConfigFile(o.config!);
  return standaloneSession({ config, attach, udpPort, sample, xdpMode: o.xdpMode, ...(o.object === undefined ? {} : { object: o.object }) });
}

export function registerProbe(program: Command, io: Io): void {
  registerLoadgen(program, io);
  program
    .command('probe')
    .summary('one-way latency through the translator: probes, wire stamps, in-band stamps')
    .description(
      'Send sequence-numbered probe frames through the translator (GTP-U uplink, SRv6 downlink, or both) at a rate, ' +
        'capture the translated frames on the far side, and report per direction: sent, received, lost, duplicated, ' +
        'reordered; one-way wire latency (TX stamp near side to RX stamp far side, software or hardware, the clock is ' +
        'named) and the translator\'s residence time from its in-band stamps (ring buffer record and the entry time in ' +
        'the source MAC); min/mean/max/stddev, p5..p99.99, jitter (p95 - p5), IPDV (RFC 3393), HDR histogram. ' +
        'The stamps are switched on in a running daemon (--socket) or in a data plane this command loads (--config --attach). ' +
        'Uplink: GTP-U is sent on --tx-dev and SRv6 captured on --rx-dev; downlink, the reverse (override with --down-*).',
    )
    .addOption(new Option('--direction <dir>', 'uplink, downlink or both').choices(['uplink', 'downlink', 'both']).default('both'))
    .option('--rate <pps>', 'probes per second, per direction', '1000')
    .option('--duration <s>', 'seconds of probing', '10')
    .option('--size <bytes>', 'Ethernet frame size of the probes (no FCS)', '128')
    .option('--udp-port <port>', 'inner UDP destination port of the probes (the data plane stamps only these)', '47000')
    .addOption(new Option('--timestamping <mode>', 'auto: hardware where the NIC can, else software (said in the report)').choices(['auto', 'software', 'hardware']).default('auto'))
    .option('--tx-netns <ns>', 'namespace of --tx-dev')
    .option('--tx-dev <dev>', 'uplink: GTP-U probes leave here toward the translator\'s N3 (downlink: GTP-U captured here)')
    .option('--rx-netns <ns>', 'namespace of --rx-dev')
    .option('--rx-dev <dev>', 'uplink: the translated SRv6 frames are captured here (downlink: SRv6 probes sent here)')
    .option('--down-tx-netns <ns>', 'downlink sender namespace (default --rx-netns)')
    .option('--down-tx-dev <dev>', 'downlink: SRv6 probes leave here (default --rx-dev)')
    .option('--down-rx-netns <ns>', 'downlink capture namespace (default --tx-netns)')
    .option('--down-rx-dev <dev>', 'downlink: translated GTP-U captured here (default --tx-dev)')
    .option('--up-dst-mac <mac>', 'destination MAC of the uplink probes (default: the first --attach interface\'s)')
    .option('--down-dst-mac <mac>', 'destination MAC of the downlink probes (default: the second --attach interface\'s)')
    .option('--gnb <ipv4>', 'uplink outer source (the gNB)', '198.51.100.1')
    .option('--n3 <ipv4>', 'uplink outer destination (the translator\'s N3 address, matched by a policy)', '192.0.2.10')
    .option('--teid <n>', 'uplink TEID', '0x1000')
    .option('--qfi <n>', 'uplink QFI', '9')
    .option('--ue <ipv4>', 'inner address of the UE', '10.45.0.2')
    .option('--dn <ipv4>', 'inner address in the data network', '203.0.113.5')
    .option('--dl-src <ipv6>', 'downlink outer IPv6 source')
    .option('--dl-sid <ipv6>', 'downlink outer IPv6 destination: an End.M.GTP4.E SID with its arguments (gNB, QFI, TEID)')
    .option('--lab [prefix]', 'probe the lab made by `mup lab up` (prefix mlab unless given): endpoints, addresses, MACs and the daemon from it')
    .option('--socket <path>', 'switch the stamps on in the mup daemon listening here')
    .option('--config <file>', 'no daemon: load the data plane with this configuration ...')
    .option('--attach <list>', '... and attach it to these interfaces, NS/DEV,NS/DEV (N3 side first, core side second)')
    .option('--object <path>', 'BPF object for --config', DEFAULT_OBJECT)
    .addOption(new Option('--xdp-mode <mode>', 'attach mode for --config').choices(['native', 'generic']).default('native'))
    .option('--no-in-band', 'no in-band stamps: wire latency only (no daemon, nothing loaded)')
    .option('--sample <n>', 'the data plane records 1 in N probes', '1')
    .option('--grace <ms>', 'wait this long for late frames after the last probe', '500')
    .option('--out <dir>', 'write report.json, report.txt, samples.csv, latency.hlog and the plots (cdf-, ccdf-, percentiles-wire.svg / -residence.svg) here')
    .option('--json', 'print the report as JSON instead of the table')
    .option('--no-progress', 'no progress bar on stderr')
    .option('--sweep', 'latency at 10 %..100 % of --sweep-rate background load (live-frame generator); see below')
    .option('--sweep-rate <pps>', 'background load at 100 % (frames/s, uplink GTP-U through the translator)', '200000')
    .option('--sweep-steps <list>', 'load steps in percent', '10,20,30,40,50,60,70,80,90,100')
    .option('--sweep-seconds <s>', 'probing per step', '3')
    .addHelpText(
      'after',
      '\nExamples (as root):\n' +
        '  # the lab (mup lab up): 10,000 probes/s each way for 10 s, report and plots in ./probe-out:\n' +
        '  mup lab up && mup probe --lab --rate 10000 --duration 10 --out probe-out; mup lab down\n' +
        '  # the daemon runs the translator; probes from the gNB side, captured on the core side:\n' +
        '  mup probe --socket /run/mup/mup.sock --direction uplink --rate 10000 --duration 10 \\\n' +
        '      --tx-netns gnb --tx-dev to-mup --rx-netns core --rx-dev to-mup --up-dst-mac 02:00:00:00:00:01\n' +
        '  # no daemon: load and attach the data plane here, both directions, files in ./probe-out:\n' +
        '  mup probe --config mup.yaml --attach mup/to-gnb,mup/to-core --tx-netns gnb --tx-dev to-mup \\\n' +
        '      --rx-netns core --rx-dev to-mup --dl-src 2001:db8:ff:0:c000:20a:: \\\n' +
        '      --dl-sid 2001:db8:2:c633:6401:1411:2233:4400 --out probe-out\n' +
        '  # latency against background load (10 %..100 % of 200,000 frames/s):\n' +
        '  mup probe --config mup.yaml --attach mup/to-gnb,mup/to-core ... --sweep --sweep-rate 200000 --out sweep-out\n' +
        '\nHardware timestamps need a NIC that takes SIOCSHWTSTAMP; veth does not, and --timestamping auto then says\n' +
        'so in the report and uses the kernel\'s software stamps (--timestamping hardware refuses to run instead).\n',
    )
    .action(async (o: ProbeCliOpts, cmd: Command) => {
      await applyLab(o, (k) => cmd.getOptionValueSource(k) === 'cli');
      const rate = num(o.rate, 'rate', 1, 1_000_000);
      const durationS = num(o.duration, 'duration', 0.001, 3600);
      const size = num(o.size, 'size', 60, 9000, true);
      const udpPort = num(o.udpPort, 'udp-port', 1, 65535, true);
      const graceMs = num(o.grace, 'grace', 0, 60_000);
      const attach = o.attach === undefined ? [] : parseAttach(o.attach);
      const setups = await directionSetups(o, attach);
      if (o.sweep === true) {
        const { runSweepCli } = await import('./probe-sweep.js');
        await runSweepCli(o, io, { setups, size, udpPort, graceMs, openSession: () => stampSession(o, attach, udpPort) });
        return;
      }
      const session = await stampSession(o, attach, udpPort);
      const { runProbe } = await import('../probe/probe.js');
      const { formatReport, progressLine, reportJson, writeOutputs } = await import('../probe/present.js');
      const ac = new AbortController();
      const onSig = (): void => ac.abort();
      process.once('SIGINT', onSig);
      const tty = o.progress && process.stderr.isTTY === true;
      let r: ProbeRunResult;
      try {
        r = await runProbe({
          directions: setups, rate, durationS, size, udpPort, timestamping: o.timestamping, graceMs, signal: ac.signal,
          ...(session === undefined ? {} : { ring: session.ring, counters: () => session.counters() }),
          ...(tty ? { onProgress: (p) => io.err(`\r${progressLine(p)}`) } : {}),
        });
      } finally {
        process.off('SIGINT', onSig);
        if (tty) io.err('\n');
        await session?.close();
      }
      if (o.out !== undefined) {
        const files = writeOutputs(r, o.out);
        io.err(`mup probe: wrote ${files.join(', ')}\n`);
      }
      io.out(o.json === true ? reportJson(r) : formatReport(r));
    });
}
