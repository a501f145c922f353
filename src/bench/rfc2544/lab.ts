/**
 * The benchmark's namespace topology (three namespaces, two veth pairs):
 *
 *   a ── ea │ da ── dut ── db │ eb ── b
 *   generator + sink   device under test   generator + sink
 *
 * a is the gNB side (GTP-U/IPv4), b the SRv6 core side. Uplink frames are
 * generated in a (out of ea into da), forwarded by the device under test out
 * of db and counted by the sink on eb; downlink frames the other way round.
 * a and b have no addresses and IPv6 off (nothing of theirs enters the
 * measurement); dut has static neighbours for every next hop so no
 * resolution happens during a trial. Namespaces are `mup2544-<pid>-{a,dut,b}`;
 * destroy() deletes them, which takes veths, routes and XDP attachments
 * with them, and sweepStale() removes those of a benchmark that was killed.
 */
import { execa } from 'execa';
import { listNamespaces, sweepStale as sweepStaleNs } from '../../host/netns-sweep.js';
import { explainKernelError, NO_SRV6_ROUTES } from '../../host/kernel-srv6.js';

export const BENCH_NETNS_PREFIX = 'mup2544-';

export const MAC = {
  ea: '02:00:00:00:0a:01',
  da: '02:00:00:00:0a:02',
  db: '02:00:00:00:0b:02',
  eb: '02:00:00:00:0b:01',
} as const;

/** The gNB: outer IPv4 source of uplink GTP-U, destination of downlink GTP-U (next hop on da). */
export const GNB = '198.51.100.1';
/** The translator's GTP-U address: uplink destination (routed out of db by the kernel baselines). */
export const N3 = '192.0.2.10';
export const UE = '10.45.0.2';
export const DN = '203.0.113.5';
/** Next hops on the b side. */
export const B_V4 = '10.99.0.2';
export const B_V6 = 'fd00:b::1';
/** Uplink SID prefix (policy sr_prefix), routed out of db. */
export const SR_PREFIX = '2001:db8:1::/48';
/** The kernel SRv6 baseline's segment: what H.M.GTP4.D makes of the uplink frame (QFI 9, TEID 0x1000). */
export const SEG6_SID = '2001:db8:1:c000:20a:2400:10:0';
export const MTU = 1600;
/** Next hop on the a side for the PE downlink's SRv6 (pe-downlink case). */
export const A_V6 = 'fd00:a::1';
/** The gateway's End.M.GTP4.E SID prefix the PE sessions encapsulate to (cases.ts PE_ISD). */
export const PE_ISD_ROUTE = '2001:db8:2::/48';

export async function ip(args: readonly string[], input?: string): Promise<string> {
  const r = await execa('ip', args, { reject: false, timeout: 10_000, ...(input === undefined ? {} : { input }) });
  if (r.exitCode !== 0) throw new Error(`ip ${args.join(' ')} failed (exit ${r.exitCode}): ${explainKernelError(r.stderr)}${input ? `\ninput:\n${input}` : ''}`);
  return r.stdout;
}

/** Delete `mup2544-<pid>-*` namespaces whose process is gone. Returns their names. */
export function sweepStale(): Promise<string[]> {
  return sweepStaleNs(BENCH_NETNS_PREFIX);
}

export class BenchLab {
  readonly a: string;
  readonly dut: string;
  readonly b: string;
  /**
   * How the kernel-seg6 baseline's route encapsulates; 'none' on a kernel
   * without SRv6 routes (`noSeg6` says the kernel's refusal), where that
   * baseline cannot run and every other case can.
   */
  readonly seg6Mode: 'encap.red' | 'encap' | 'none';
  readonly noSeg6: string | undefined;

  private constructor(prefix: string, seg6Mode: 'encap.red' | 'encap') {
    this.a = `${prefix}a`;
    this.dut = `${prefix}dut`;
    this.b = `${prefix}b`;
    this.seg6Mode = seg6Mode;
    this.noSeg6 = undefined;
  }

  get names(): string[] {
    return [this.a, this.dut, this.b];
  }

  /**
   * Build the topology. On failure, removes what it made. `tag` makes the
   * prefix unique within a process. `o.seg6`: the kernel-seg6 baseline will
   * run, so a kernel without SRv6 routes is an error here, before anything
   * is measured; without it such a kernel leaves only that route out.
   */
  static async create(tag = '', o: { seg6?: boolean } = {}): Promise<BenchLab> {
    const lab = new BenchLab(`${BENCH_NETNS_PREFIX}${process.pid}-${tag}`, 'encap.red');
    try {
      await lab.#build();
      if (o.seg6 === true && lab.noSeg6 !== undefined) throw new Error(`the kernel-seg6 case cannot run here: ${lab.noSeg6}`);
      return lab;
    } catch (e) {
      await lab.destroy().catch(() => undefined);
      throw e;
    }
  }

  async #sysctl(ns: string, kv: string[]): Promise<void> {
    const r = await execa('ip', ['netns', 'exec', ns, 'sysctl', '-q', '-w', ...kv], { reject: false, timeout: 10_000 });
    if (r.exitCode !== 0) throw new Error(`sysctl in ${ns} failed: ${r.stderr.trim()}`);
  }

  async #build(): Promise<BenchLab> {
    for (const ns of this.names) await ip(['netns', 'add', ns]);
    const quiet = ['net.ipv4.conf.all.rp_filter=0', 'net.ipv4.conf.default.rp_filter=0', 'net.ipv6.conf.all.accept_dad=0', 'net.ipv6.conf.default.accept_dad=0'];
    const noV6 = ['net.ipv6.conf.all.disable_ipv6=1', 'net.ipv6.conf.default.disable_ipv6=1'];
    await this.#sysctl(this.a, [...quiet, ...noV6]);
    await this.#sysctl(this.b, [...quiet, ...noV6]);
    // No link-local addresses on the DUT's veths: no router or neighbour
    // solicitations, fewer multicast reports into the sinks.
    await this.#sysctl(this.dut, [...quiet, 'net.ipv6.conf.default.addr_gen_mode=1', 'net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1']);
    await ip(['-n', this.a, 'link', 'add', 'ea', 'address', MAC.ea, 'mtu', String(MTU), 'type', 'veth', 'peer', 'name', 'da', 'address', MAC.da, 'mtu', String(MTU), 'netns', this.dut]);
    await ip(['-n', this.b, 'link', 'add', 'eb', 'address', MAC.eb, 'mtu', String(MTU), 'type', 'veth', 'peer', 'name', 'db', 'address', MAC.db, 'mtu', String(MTU), 'netns', this.dut]);
    await ip(['-n', this.a, 'link', 'set', 'ea', 'up']);
    await ip(['-n', this.b, 'link', 'set', 'eb', 'up']);
    const lines =
      [
        'addr add 198.51.100.254/24 dev da',
        'addr add 10.99.0.1/24 dev db',
        'addr add fd00:a::2/64 dev da',
        'addr add fd00:b::2/64 dev db',
        'link set da up',
        'link set db up',
        `neigh replace ${GNB} lladdr ${MAC.ea} dev da nud permanent`,
        `neigh replace ${B_V4} lladdr ${MAC.eb} dev db nud permanent`,
        `neigh replace ${B_V6} lladdr ${MAC.eb} dev db nud permanent`,
        `neigh replace ${A_V6} lladdr ${MAC.ea} dev da nud permanent`,
        // PE downlink (H.M.Session.Encaps): to the gateway's End.M.GTP4.E SIDs, back out of da.
        `route add ${PE_ISD_ROUTE} via ${A_V6} dev da`,
        // Uplink GTP-U (kernel and XDP forwarding baselines).
        `route add 192.0.2.0/24 via ${B_V4} dev db`,
        // Uplink SRv6 (translator, kernel seg6 baseline).
        `route add ${SR_PREFIX} via ${B_V6} dev db`,
        // Kernel seg6 baseline: the inner IPv4 of the uplink, encapsulated.
        'sr tunsrc set 2001:db8:ff::c633:6401',
      ].join('\n') + '\n';
    await ip(['-n', this.dut, '-batch', '-'], lines);
    const seg6 = (mode: string): Promise<string> => ip(['-n', this.dut, 'route', 'add', '203.0.113.0/24', 'encap', 'seg6', 'mode', mode, 'segs', SEG6_SID, 'dev', 'db']);
    const set = (mode: BenchLab['seg6Mode'], why?: string): void => {
      Object.assign(this, { seg6Mode: mode, noSeg6: why });
    };
    const refused = (e: unknown): boolean => {
      const said = (e as Error).message;
      if (!NO_SRV6_ROUTES.test(said)) return false;
      set('none', said.slice(said.search(NO_SRV6_ROUTES)));
      return true;
    };
    try {
      await seg6('encap.red');
    } catch (e) {
      if (refused(e)) return this;
      // An iproute2 without encap.red: plain encap (one segment: an SRH with one SID).
      try {
        await seg6('encap');
        set('encap');
      } catch (e2) {
        if (!refused(e2)) throw e2;
      }
    }
    return this;
  }

  /** Delete the namespaces (and with them every veth, route and XDP attachment). Safe to call twice. */
  async destroy(): Promise<void> {
    const existing = new Set(await listNamespaces());
    const errors: string[] = [];
    for (const ns of this.names) {
      if (!existing.has(ns)) continue;
      await ip(['netns', 'delete', ns]).catch((e: Error) => errors.push(e.message));
    }
    const left = (await listNamespaces()).filter((n) => this.names.includes(n));
    if (left.length > 0 || errors.length > 0) throw new Error(`namespaces left behind: ${left.join(', ') || '(none)'}; ${errors.join('; ')}`);
  }
}
