/**
 * `mup bgp session add|del`: the MUP controller helper (src/bgp/controller.ts).
 * Originates or withdraws a PDU session's T1ST and T2ST at a gobgpd through
 * its API, as a MUP controller would from the SMF's data.
 */
import { Command, Option } from 'commander';
import { parseApi } from '../bgp/gobgpd.js';
import { sessionOp, type RouteType } from '../bgp/controller.js';
import type { Io } from './ops.js';


interface SessionOpts {
  api: string;
  ue: string;
  teid: string;
  dlTeid?: string;
  qfi: string;
  endpoint: string;
  n3: string;
  segmentId: string;
  rd?: string;
  rt?: string;
  nexthop?: string;
  only?: RouteType;
  netns?: string;
  json?: boolean;
}

/** Add `session add` and `session del` under the `bgp` command group. */
export function addSessionCommands(bgp: Command, io: Io): Command {
  const session = bgp
    .command('session')
    .summary("originate or withdraw a PDU session's T1ST/T2ST routes at a gobgpd (a MUP controller's job)")
    .description(
      'A MUP controller turns each PDU session into two BGP MUP routes: a Type 1 Session Transformed route (T1ST: UE prefix -> ' +
        'gNB endpoint, downlink TEID, QFI; the PEs use it for the downlink) and a Type 2 one (T2ST: UPF N3 address + uplink TEID -> ' +
        'direct segment id; the gateways resolve it to a PE\'s DSD for the uplink). These commands originate them at a gobgpd ' +
        '(the route reflector, or the controller\'s own speaker) through its gRPC API with the gobgp CLI.',
    );
  const common = (c: Command, verb: string): Command =>
    c
      .requiredOption('--api <host:port>', "the gobgpd's gRPC API, e.g. 127.0.0.1:50071")
      .requiredOption('--ue <prefix>', 'UE address or prefix (T1ST), e.g. 10.45.0.2/32')
      .requiredOption('--teid <n>', 'uplink TEID, the one the gNB sends to --n3 (T2ST); decimal or 0x hex, 1..4294967295')
      .option('--dl-teid <n>', 'downlink TEID, the gNB\'s (T1ST); default --teid')
      .requiredOption('--qfi <q>', 'QoS flow identifier (T1ST), 0..63')
      .requiredOption('--endpoint <gnb>', "the gNB's GTP-U address (T1ST endpoint), IPv4")
      .requiredOption('--n3 <upf>', 'the UPF N3 address the gNB sends GTP-U to (T2ST endpoint), IPv4')
      .requiredOption('--segment-id <a:b>', "the PE's direct segment id (MUP extended community), e.g. 10:10")
      .option('--rd <rd>', 'route distinguisher, ASN:N (2-byte ASN) or IPv4:N; default <router-id>:1 of the gobgpd')
      .option('--rt <rt>', 'route target (one: GoBGP 3.10 keeps only the last), same forms; default <asn>:100 of the gobgpd')
      .option('--nexthop <ip>', 'next hop of the routes; default the router id of the gobgpd')
      .addOption(new Option('--only <type>', `${verb} only one of the two routes`).choices(['t1st', 't2st']))
      .option('--netns <name>', 'run gobgp inside this network namespace (where the API listens)')
      .option('--json', 'print the routes as JSON');

  const run = async (op: 'add' | 'del', o: SessionOpts): Promise<void> => {
    const api = parseApi(o.api, '--api');
    const s = await sessionOp(
      op,
      api,
      {
        ue: o.ue,
        teid: teidArg(o.teid, '--teid'),
        ...(o.dlTeid === undefined ? {} : { dlTeid: teidArg(o.dlTeid, '--dl-teid') }),
        qfi: Number(o.qfi),
        endpoint: o.endpoint,
        n3: o.n3,
        segmentId: o.segmentId,
        ...(o.rd === undefined ? {} : { rd: o.rd }),
        ...(o.rt === undefined ? {} : { rt: o.rt }),
      },
      {
        ...(o.netns === undefined ? {} : { netns: o.netns }),
        ...(o.nexthop === undefined ? {} : { nexthop: o.nexthop }),
        ...(o.only === undefined ? {} : { types: [o.only] }),
      },
    );
    const types = o.only === undefined ? ['t1st', 't2st'] : [o.only];
    if (o.json === true) {
      io.out(`${JSON.stringify({ op, api: o.api, routes: types, session: s })}\n`);
    } else {
      const what = op === 'add' ? 'originated' : 'withdrew';
      if (types.includes('t1st')) io.out(`${what} t1st ${s.ue} rd ${s.rd} rt ${s.rt} teid ${s.dlTeid} qfi ${s.qfi} endpoint ${s.endpoint}\n`);
      if (types.includes('t2st')) io.out(`${what} t2st ${s.n3} rd ${s.rd} rt ${s.rt} teid ${s.teid} mup ${s.segmentId}\n`);
    }
  };

  common(session.command('add').summary("originate a PDU session's T1ST and T2ST"), 'originate')
    .addHelpText('after', '\nExample:\n  mup bgp session add --api 127.0.0.1:50071 --ue 10.45.0.3/32 --teid 4098 --qfi 9 --endpoint 198.51.100.1 --n3 192.0.2.10 --segment-id 10:1\n')
    .action((o: SessionOpts) => run('add', o));
  common(session.command('del').summary("withdraw a PDU session's T1ST and T2ST (same arguments as add)"), 'withdraw')
    .addHelpText('after', '\nExample:\n  mup bgp session del --api 127.0.0.1:50071 --ue 10.45.0.3/32 --teid 4098 --qfi 9 --endpoint 198.51.100.1 --n3 192.0.2.10 --segment-id 10:1\n')
    .action((o: SessionOpts) => run('del', o));
  return session;
}

/** TEIDs on the command line: decimal or 0x hex; the controller checks the range. */
function teidArg(s: string, where: string): number {
  const t = s.trim();
  const n = /^0x[0-9a-f]+$/i.test(t) ? parseInt(t, 16) : /^\d+$/.test(t) ? Number(t) : NaN;
  if (!Number.isFinite(n)) throw new Error(`${where} ${s}: a TEID, decimal or 0x hex (1..4294967295)`);
  return n;
}
