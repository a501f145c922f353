/**
 * `mup lab up|run|down|shell|relocate`: a whole mobile user plane in
 * network namespaces (src/lab/), as root.
 */
import { spawnSync } from 'node:child_process';
import { constants as osConstants } from 'node:os';
import { Command, Option } from 'commander';
import { LAB_NODES, DEFAULT_PREFIX, labTopology } from '../lab/topology.js';
import { ExitStatus } from './client.js';

interface Io {
  out(s: string): void;
  err(s: string): void;
}

function num(s: string, what: string, min: number, max: number): number {
  const n = Number(s);
  if (!Number.isFinite(n) || n < min || n > max) throw new Error(`--${what} ${s}: a number from ${min} to ${max}`);
  return n;
}

const peOption = (what: string): Option =>
  new Option('--pe <who>', `who builds the core's PE downlink ${what}: mup (our sessions, a mup daemon per PE) or kernel (seg6 encap)`).choices(['mup', 'kernel']);

const coreOption = (what: string): Option =>
  new Option(
    '--core <how>',
    `how core ends the uplink ${what}: routes (the kernel's seg6local End.DX4 per site) or srh (the kernel's SRH endpoint in each site, ` +
      'for a kernel built without SRv6 routes; the PEs are then mup daemons). Default: routes, or srh on such a kernel, said in a progress line',
  ).choices(['routes', 'srh']);

const prefixOption = (): Option =>
  new Option('--prefix <name>', `namespace prefix: namespaces are <prefix>-{${LAB_NODES.join(',')}}; a second lab needs another`).default(DEFAULT_PREFIX);

/**
 * Remove the lab on Ctrl-C / SIGTERM while `work` runs, then exit 130
 * (`down`: the BGP lab's teardown instead of the lab's). The teardown starts
 * at once; the work, whose commands now fail, is waited for, and the
 * teardown runs once more after it (it may have made something in between,
 * or raced the first one), so the process never ends half torn down.
 */
async function withSignals<T>(prefix: string, io: Io, work: () => Promise<T>, down?: (prefix: string) => Promise<unknown>): Promise<T> {
  const teardown = (): Promise<unknown> => (down === undefined ? import('../lab/lab.js').then((m) => m.labDown(prefix)) : down(prefix));
  let first: Promise<unknown> | undefined;
  const onSignal = (sig: string): void => {
    if (first !== undefined) return;
    io.err(`\nmup lab: ${sig}: removing lab "${prefix}"\n`);
    first = teardown().catch(() => undefined);
  };
  const handlers = (['SIGINT', 'SIGTERM'] as const).map((s) => [s, () => onSignal(s)] as const);
  for (const [s, h] of handlers) process.on(s, h);
  const stop = async (): Promise<never> => {
    await first;
    await teardown().catch((e: unknown) => io.err(`mup lab: removing lab "${prefix}": ${(e as Error).message}\n`));
    process.exit(130);
  };
  try {
    const r = await work();
    if (first !== undefined) return await stop();
    return r;
  } catch (e) {
    if (first !== undefined) return await stop();
    throw e;
  } finally {
    for (const [s, h] of handlers) process.removeListener(s, h);
  }
}

export function registerLab(program: Command, io: Io): void {
  const progress = (m: string): void => io.err(`[lab] ${m}\n`);
  const lab = program
    .command('lab')
    .summary('a whole mobile user plane in network namespaces: UE, gNB emulator, translator, kernel SRv6 core, data network')
    .description(
      'Build, measure and remove the lab (as root): namespaces <prefix>-ue, -gnb (gNB emulator, TC BPF), -mup ' +
        '(mup daemon with config/lab.yaml), -core (Linux kernel SRv6: End.DX4 uplink, seg6 encap downlink), -dn ' +
        '(data network), -meca and -mecb (two MEC sites). Addresses and SIDs: README "The lab", src/lab/topology.ts. ' +
        "On a kernel built without SRv6 routes the sites' SRH endpoints end the uplink and the PEs are mup daemons " +
        '(--core srh --pe mup, chosen and said at lab up; docs/lab.md).',
    )
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  mup lab run                      # what make demo runs: up, measure, report, down\n' +
        '  mup lab up && mup lab shell ue   # a shell on the UE: ping -I 10.45.0.2 203.0.113.5\n' +
        '  mup lab relocate                 # move one of 100 UEs from mec-a to mec-b under a stream\n' +
        '  mup lab down                     # remove everything the lab made\n',
    );

  lab
    .command('up')
    .summary('build the lab and start its translator (a previous lab with the prefix is removed first)')
    .addOption(prefixOption())
    .addOption(peOption('(default kernel; mup with --core srh)'))
    .addOption(coreOption('(docs/lab.md)'))
    .option('--bgp', 'the BGP MUP lab instead (docs/lab.md "The BGP lab"): route reflector, controller, two translators behind ECMP, PE; prefix mbgp unless --prefix')
    .option('--sessions <n>', 'with --bgp: PDU sessions the controller originates', '8')
    .addHelpText('after', '\nExamples:\n  mup lab up\n  mup lab up --pe mup         # the downlink from our sessions (H.M.Session.Encaps)\n  mup lab up --core srh       # core without seg6 routes: the kernel\'s SRH endpoint\n  mup lab up --prefix mlab2   # a second lab beside the first\n  mup lab up --bgp            # the BGP MUP lab (mup lab down --bgp removes it)\n')
    .action(async (o: { prefix: string; pe?: 'mup' | 'kernel'; core?: 'routes' | 'srh'; bgp?: boolean; sessions: string }, cmd: Command) => {
      if (o.bgp === true) {
        const { bgpLabUp, bgpLabDown, BGP_DEFAULT_PREFIX } = await import('../lab/bgp-lab.js');
        const prefix = cmd.getOptionValueSource('prefix') === 'default' ? BGP_DEFAULT_PREFIX : o.prefix;
        const sessions = num(o.sessions, 'sessions', 1, 250);
        const { topology: t, paths: p } = await withSignals(prefix, io, () => bgpLabUp(prefix, progress, { sessions }), bgpLabDown);
        io.out(
          `BGP lab "${prefix}" is up: namespaces ${Object.values(t.ns).join(' ')}\n` +
            `  routes:     ip netns exec ${t.ns.gw1} gobgp global rib -a mup-ipv4\n` +
            `  a session:  mup bgp session add --netns ${t.ns.rr} --api 127.0.0.1:${t.api.port} --ue 10.45.1.2/32 --teid 8193 --qfi 9 --endpoint ${t.gnb.addr} --n3 ${t.gnb.n3} --segment-id ${t.pe.sids.meca.segmentId} --rd ${t.rr.mgmt}:1 --rt ${t.rt}\n` +
            `  translator: MUP_SOCKET=${p.daemon.gw1.socket} mup stats\n` +
            `  remove it:  mup lab down --bgp${prefix === BGP_DEFAULT_PREFIX ? '' : ` --prefix ${prefix}`}\n`,
        );
        return;
      }
      const { labCore, labPe, labUp } = await import('../lab/lab.js');
      const modes = { ...(o.pe === undefined ? {} : { pe: o.pe }), ...(o.core === undefined ? {} : { core: o.core }) };
      const { topology: t, paths: p } = await withSignals(o.prefix, io, () => labUp(o.prefix, progress, modes));
      io.out(
        `lab "${o.prefix}" is up (--core ${labCore(p)} --pe ${labPe(p)}): namespaces ${Object.values(t.ns).join(' ')}\n` +
          `  translated: ip netns exec ${t.ns.ue} ping -I ${t.ue.addr} ${t.dn.addr}\n` +
          `  MEC user:   ip netns exec ${t.ns.ue} ping -I ${t.ues[1]!.addr} ${t.mec.anycast}   (${t.ues.length - 1} of them: ${t.ues[1]!.addr}..${t.ues[t.ues.length - 1]!.addr})\n` +
          `  plain:      ip netns exec ${t.ns.ue} ping -I ${t.ue.plainAddr} ${t.dn.addr}\n` +
          `  translator: MUP_SOCKET=${p.socket} mup stats\n` +
          `  remove it:  mup lab down${o.prefix === DEFAULT_PREFIX ? '' : ` --prefix ${o.prefix}`}\n`,
      );
    });

  lab
    .command('down')
    .summary('remove what a lab with this prefix made: daemon, processes in its namespaces, namespaces, pins')
    .addOption(prefixOption())
    .option('--bgp', 'remove a BGP lab (prefix mbgp unless --prefix)')
    .addHelpText('after', '\nExamples:\n  mup lab down\n  mup lab down --prefix mlab2\n  mup lab down --bgp\n')
    .action(async (o: { prefix: string; bgp?: boolean }, cmd: Command) => {
      if (o.bgp === true) {
        const { bgpLabDown, BGP_DEFAULT_PREFIX } = await import('../lab/bgp-lab.js');
        const prefix = cmd.getOptionValueSource('prefix') === 'default' ? BGP_DEFAULT_PREFIX : o.prefix;
        const removed = await bgpLabDown(prefix);
        io.out(removed.length === 0 ? `nothing of BGP lab "${prefix}" was there\n` : removed.map((r) => `removed ${r}\n`).join(''));
        return;
      }
      const { labDown } = await import('../lab/lab.js');
      const removed = await labDown(o.prefix);
      io.out(removed.length === 0 ? `nothing of lab "${o.prefix}" was there\n` : removed.map((r) => `removed ${r}\n`).join(''));
    });

  lab
    .command('run')
    .summary('lab up, ping / iperf3 TCP / iperf3 UDP through the translated and the plain path, report, lab down')
    .description(
      'Builds the lab, measures ping RTT, iperf3 TCP and iperf3 UDP at 500 Mbit/s offered from the UE to the data ' +
        'network through the translated path (GTP-U, H.M.GTP4.D, kernel End.DX4; back: kernel seg6 encap, ' +
        'End.M.GTP4.E) and through a plain routed path between the same namespaces, prints a table, the ' +
        "translator's counters and one tshark-decoded frame per wire, writes lab-run.json and lab-run.md, and " +
        'removes the lab (unless --keep). Timings depend on the host: the load average is in the report.',
    )
    .addOption(prefixOption())
    .option('--keep', 'leave the lab up afterwards (mup lab down removes it)')
    .option('--out <dir>', 'where the JSON, Markdown and pcaps go', 'build/lab')
    .option('--ping-count <n>', 'pings per path', '20')
    .option('--tcp-seconds <s>', 'iperf3 TCP duration per path', '10')
    .option('--udp-seconds <s>', 'iperf3 UDP duration per path', '10')
    .option('--udp-mbps <n>', 'iperf3 UDP offered rate, Mbit/s', '500')
    .option('--json', 'print the report as JSON instead of the table')
    .addHelpText('after', '\nExamples:\n  mup lab run\n  mup lab run --tcp-seconds 3 --udp-seconds 3 --keep\n  mup lab run --json | jq .ratio\n')
    .action(async (o: { prefix: string; keep?: boolean; out: string; pingCount: string; tcpSeconds: string; udpSeconds: string; udpMbps: string; json?: boolean }) => {
      const { runLab, renderText, RUN_DEFAULTS } = await import('../lab/demo.js');
      labTopology(o.prefix); // a bad prefix fails before anything is made
      const r = await withSignals(o.prefix, io, () =>
        runLab({
          prefix: o.prefix,
          out: o.out,
          keep: o.keep === true,
          pingCount: num(o.pingCount, 'ping-count', 1, 10_000),
          tcpSeconds: num(o.tcpSeconds, 'tcp-seconds', 1, 600),
          udpSeconds: num(o.udpSeconds, 'udp-seconds', 1, 600),
          udpMbps: num(o.udpMbps, 'udp-mbps', 1, 100_000),
          udpBytes: RUN_DEFAULTS.udpBytes,
          progress,
        }),
      );
      io.out(o.json === true ? JSON.stringify(r, null, 2) + '\n' : renderText(r));
    });

  lab
    .command('relocate')
    .summary('MEC relocation of one UE (its (N3, TEID) policy and its PE session) from mec-a to mec-b under streams to and from every UE, repeatable')
    .description(
      'Every MEC user (100 UEs) sends a sequence-numbered UDP stream to the anycast address of mec-a and mec-b, and ' +
        "the site that receives a frame echoes it back (--direction uplink, the default); with --direction downlink the " +
        'sites send a steady sequence-numbered stream to every UE instead, each UE from the site that serves it; --both ' +
        "runs the two. At --switch-at one UE moves: its session is added at mec-b's PE, its downlink sender moves to " +
        "mec-b, its (N3, TEID) policy is replaced with mec-b's PE SID (PUT /v1/policies, the API call), and once mec-a " +
        "has answered all it received its session is deleted at mec-a's PE. Per run (in <out>/run-<k>/): frames.csv " +
        '(every frame: stream, UE, sequence, send and receive time, site), timeline.svg (the moved UE\'s frames per ms ' +
        'at A and at B around the call) and lab-relocate.json; over the --repeat runs: the median and a 95 % ' +
        'order-statistic interval of the switch times, lost and reordered (lab-relocate-summary.json). The offered and ' +
        'achieved rate of each sender is printed; a sender short of the rate by more than 2 % gets a WARN (not an ' +
        'error). Uses a running lab with the prefix (and leaves it up, the UE back at mec-a), or builds one with --pe ' +
        'and removes it afterwards (unless --keep). Exits with status 1 when any run lost, duplicated, reordered or ' +
        'garbled a frame.',
    )
    .addOption(prefixOption())
    .addOption(peOption('of a lab it builds (default kernel, mup with --core srh; a running lab keeps its own)'))
    .addOption(coreOption('of a lab it builds (a running lab keeps its own)'))
    .option('--ue <n>', 'which UE moves: 1 to 100 (10.45.0.3 is 1)', '1')
    .option('--keep', 'leave a lab it built up afterwards')
    .option('--rate <pps>', 'frames per second of each stream, all UEs together', '10000')
    .option('--size <bytes>', 'UDP payload bytes per datagram (29 to 1472)', '100')
    .option('--seconds <s>', 'stream duration', '4')
    .option('--switch-at <s>', 'when the UE moves, seconds after the streams start (default: half-way)')
    .addOption(new Option('--direction <d>', 'which streams run: uplink (echoed back), downlink (a stream from the sites), both').choices(['uplink', 'downlink', 'both']).default('uplink'))
    .option('--both', 'the same as --direction both')
    .option('--repeat <n>', 'runs on the same lab, for the summary', '1')
    .option('--out <dir>', 'where run-<k>/ and lab-relocate-summary.json go', 'build/lab/relocate')
    .option('--json', 'print {summary, runs} as JSON')
    .addHelpText(
      'after',
      '\nExamples:\n  mup lab relocate\n  mup lab relocate --pe mup --ue 42\n  mup lab relocate --both --repeat 5 --rate 20000 --size 1200 --seconds 6 --switch-at 2\n  mup lab relocate --direction downlink --json | jq .summary.measures\n',
    )
    .action(
      async (o: { prefix: string; pe?: 'mup' | 'kernel'; core?: 'routes' | 'srh'; ue: string; keep?: boolean; rate: string; size: string; seconds: string; switchAt?: string; direction: 'uplink' | 'downlink' | 'both'; both?: boolean; repeat: string; out: string; json?: boolean }) => {
        const { relocate, renderRelocate, renderSummary, RELOCATE_SIZE } = await import('../lab/relocate.js');
        const t = labTopology(o.prefix);
        const seconds = num(o.seconds, 'seconds', 1, 600);
        const ue = num(o.ue, 'ue', 1, t.ues.length - 1);
        if (!Number.isInteger(ue)) throw new Error(`--ue ${o.ue}: a whole number from 1 to ${t.ues.length - 1}`);
        const size = num(o.size, 'size', RELOCATE_SIZE.min, RELOCATE_SIZE.max);
        if (!Number.isInteger(size)) throw new Error(`--size ${o.size}: a whole number of bytes from ${RELOCATE_SIZE.min} to ${RELOCATE_SIZE.max}`);
        const repeat = num(o.repeat, 'repeat', 1, 1000);
        if (!Number.isInteger(repeat)) throw new Error(`--repeat ${o.repeat}: a whole number from 1 to 1000`);
        const switchAfter = o.switchAt === undefined ? seconds / 2 : num(o.switchAt, 'switch-at', 0, seconds);
        if (switchAfter >= seconds) throw new Error(`--switch-at ${o.switchAt}: before the end of the stream (--seconds ${o.seconds})`);
        if (o.both === true && o.direction !== 'uplink' && o.direction !== 'both') throw new Error(`--both and --direction ${o.direction}: give one of them`);
        const direction = o.both === true ? 'both' : o.direction;
        const { runs, summary } = await withSignals(o.prefix, io, () =>
          relocate({
            prefix: o.prefix,
            out: o.out,
            keep: o.keep === true,
            rate: num(o.rate, 'rate', 1, 1_000_000),
            seconds,
            switchAfter,
            size,
            ue,
            direction,
            repeat,
            ...(o.pe === undefined ? {} : { pe: o.pe }),
            ...(o.core === undefined ? {} : { core: o.core }),
            progress,
          }),
        );
        if (o.json === true) io.out(JSON.stringify({ summary, runs }, null, 2) + '\n');
        else io.out(runs.map((r) => renderRelocate(r, { table: repeat === 1 })).join('') + renderSummary(summary));
        if (summary.shortRuns.length > 0) io.err(`mup lab relocate: WARN a sender fell more than 2 % short of ${summary.offered} frames/s in run(s) ${summary.shortRuns.join(', ')} (see the summary)\n`);
        const bad = runs.filter((r) => r.totals.lost + r.totals.duplicated + r.totals.reordered + r.totals.malformed > 0);
        if (bad.length > 0) {
          const x = bad[0]!.totals;
          throw new Error(
            `relocation: ${bad.length} of ${runs.length} run(s) with a non-zero count; the first: lost ${x.lost}, duplicated ${x.duplicated}, reordered ${x.reordered}, malformed ${x.malformed} frames over all UEs (per UE: ${bad[0]!.file})`,
          );
        }
      },
    );

  lab
    .command('shell')
    .summary('a shell (or a command) in one of the lab namespaces')
    .argument('<node>', `one of ${LAB_NODES.join(', ')}`)
    .argument('[command...]', 'command to run instead of a shell (after --)')
    .addOption(prefixOption())
    .addHelpText('after', '\nExamples:\n  mup lab shell ue\n  mup lab shell core -- ip -6 route          # a command goes after --: its options stay its own\n  mup lab shell gnb -- tcpdump -ni to-mup -c 4\n  mup lab shell ue --prefix mlab2 -- ping -I 10.45.0.2 203.0.113.5\n')
    .action(async (node: string, command: string[], o: { prefix: string }) => {
      const t = labTopology(o.prefix);
      if (!(LAB_NODES as readonly string[]).includes(node)) throw new Error(`no lab node "${node}": one of ${LAB_NODES.join(', ')}`);
      const ns = t.ns[node as (typeof LAB_NODES)[number]];
      const { listNamespaces } = await import('../host/netns-sweep.js');
      if (!(await listNamespaces()).includes(ns)) {
        throw new Error(`lab "${o.prefix}" is not up (no namespace ${ns}): mup lab up${o.prefix === DEFAULT_PREFIX ? '' : ` --prefix ${o.prefix}`}`);
      }
      const argv = command.length > 0 ? command : [process.env['SHELL'] ?? '/bin/bash'];
      const r = spawnSync('ip', ['netns', 'exec', ns, ...argv], { stdio: 'inherit' });
      if (r.error !== undefined) throw new Error(`cannot run ip netns exec: ${r.error.message}`);
      // The command's own exit status, as a shell's would be (ping's 1 was a 2, a usage error's).
      if (r.status !== 0 && command.length > 0) {
        throw new ExitStatus(`${argv.join(' ')} in ${ns} ${r.status === null ? `was killed by ${r.signal}` : `exited with ${r.status}`}`, r.status ?? 128 + (osConstants.signals[r.signal as keyof typeof osConstants.signals] ?? 0));
      }
    });
}
