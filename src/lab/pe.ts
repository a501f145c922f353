/**
 * The core's PEs: the downlink of every UE, composed per UE session
 * (UE address -> gNB, TEID, QFI) into the gateway's End.M.GTP4.E SID.
 *
 * core hosts three PEs, one per site it serves, each on the interface that
 * site's traffic arrives on: `dn` (to-dn), `meca` (to-meca), `mecb`
 * (to-mecb). A PE holds the sessions of the UEs served from its site: dn's
 * has every UE, mec-a's the MEC users (ues[1..]) at first, mec-b's none;
 * `mup lab relocate` moves one UE's session from mec-a's PE to mec-b's.
 * Two ways to build them (`mup lab up --pe`):
 *
 * - `mup`: one `mup daemon` per PE in core (sessions: table, H.M.Session.Encaps
 *   in XDP on that interface). A packet for a UE whose session is not at
 *   the site passes to the kernel, whose route for the UE pool is a blackhole.
 * - `kernel`: the Linux kernel's seg6 encap, one routing table per PE
 *   (`ip rule iif <dev> lookup <table>`), a /32 encap route per session and
 *   a blackhole for the rest of the pool. The kernel takes the IPv6 source
 *   from `ip sr tunsrc` (one per namespace, so all three PEs share it, and
 *   every session's UPF source is the N3 address) and sets traffic class 0
 *   for inner IPv4, where our sessions copy the inner DSCP/ECN (docs/lab.md).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { ipBatch, run } from './sh.js';
import type { LabTopology, LabUe } from './topology.js';

export type PeMode = 'mup' | 'kernel';
export const PE_MODES: readonly PeMode[] = ['mup', 'kernel'];
export const PE_SITES = ['dn', 'meca', 'mecb'] as const;
export type PeSite = (typeof PE_SITES)[number];

/** Routing table of each PE with --pe kernel. */
const PE_TABLE: Record<PeSite, number> = { dn: 100, meca: 101, mecb: 102 };

export function peDev(t: LabTopology, site: PeSite): string {
  return site === 'dn' ? t.core.toDn : site === 'meca' ? t.core.toMeca : t.core.toMecb;
}

/** Where one PE daemon (--pe mup) keeps its files, under the lab's directory. */
export interface PeDaemonPaths {
  readonly config: string;
  readonly socket: string;
  readonly stateFile: string;
  readonly log: string;
  readonly pidFile: string;
  readonly instance: string;
}

export function peDaemonPaths(dir: string, prefix: string, site: PeSite): PeDaemonPaths {
  return {
    config: join(dir, `pe-${site}.yaml`),
    socket: join(dir, `pe-${site}.sock`),
    stateFile: join(dir, `pe-${site}.state.json`),
    log: join(dir, `pe-${site}.log`),
    pidFile: join(dir, `pe-${site}.pid`),
    instance: `lab-${prefix}-pe-${site}`,
  };
}

/** The session of one UE (the same at every PE): config and API form. */
export function ueSession(t: LabTopology, u: LabUe): Record<string, unknown> {
  return {
    name: `ue${u.index}`,
    ue: `${u.addr}/32`,
    teid: u.dlTeid,
    qfi: u.qfi,
    endpoint: t.gnb.addr,
    source: t.mup.n3Addr,
    isd: t.sids.dlPrefix,
    src_prefix: t.sids.srcPrefix,
  };
}

/** The UEs whose sessions each PE holds when the lab comes up. */
export function initialSessions(t: LabTopology): Record<PeSite, readonly LabUe[]> {
  return { dn: t.ues, meca: t.ues.slice(1), mecb: [] };
}

/** The config file of one PE daemon. */
export function peConfig(t: LabTopology, site: PeSite, ues: readonly LabUe[]): string {
  return (
    `# PE ${site} of lab ${t.prefix} (written by mup lab up --pe mup, src/lab/pe.ts)\n` +
    toYaml({
      interfaces: [{ name: peDev(t, site) }],
      settings: { forwarding: 'fib', max_sessions: 4096 },
      sessions: ues.map((u) => ueSession(t, u)),
    })
  );
}

/** Write the PE daemons' config files (--pe mup). */
export function writePeConfigs(t: LabTopology, dir: string): void {
  const init = initialSessions(t);
  for (const site of PE_SITES) writeFileSync(peDaemonPaths(dir, t.prefix, site).config, peConfig(t, site, init[site]));
}

/** The pool's blackhole in core's main table: a UE packet no PE took goes nowhere (both modes). */
export async function corePoolBlackhole(t: LabTopology): Promise<void> {
  await ipBatch(t.ns.core, [`route add blackhole ${t.uePool}`]);
}

const kernelRoute = (t: LabTopology, site: PeSite, u: LabUe): string =>
  `${u.addr}/32 encap seg6 mode encap segs ${u.dlSid} dev ${t.core.toMup} table ${PE_TABLE[site]}`;

/** --pe kernel: one table per PE, its rule, its sessions as seg6 encap routes. */
export async function startKernelPes(t: LabTopology): Promise<void> {
  const init = initialSessions(t);
  const lines: string[] = [];
  for (const site of PE_SITES) {
    lines.push(`rule add iif ${peDev(t, site)} lookup ${PE_TABLE[site]} pref ${1000 + PE_TABLE[site]}`);
    lines.push(`route add blackhole ${t.uePool} table ${PE_TABLE[site]}`);
    for (const u of init[site]) lines.push(`route add ${kernelRoute(t, site, u)}`);
  }
  await ipBatch(t.ns.core, lines);
}

/** Undo startKernelPes (switching a running lab to --pe mup). */
export async function stopKernelPes(t: LabTopology): Promise<void> {
  for (const site of PE_SITES) {
    await run('ip', ['-n', t.ns.core, 'rule', 'del', 'pref', String(1000 + PE_TABLE[site])], { allowFail: true });
    await run('ip', ['-n', t.ns.core, 'route', 'flush', 'table', String(PE_TABLE[site])], { allowFail: true });
  }
}

/** Add one UE's session at a PE (--pe kernel: its route in the PE's table). */
export async function kernelPeAdd(t: LabTopology, site: PeSite, u: LabUe): Promise<void> {
  await run('ip', ['-n', t.ns.core, 'route', 'add', ...kernelRoute(t, site, u).split(' ')]);
}

export async function kernelPeDel(t: LabTopology, site: PeSite, u: LabUe): Promise<void> {
  await run('ip', ['-n', t.ns.core, 'route', 'del', `${u.addr}/32`, 'table', String(PE_TABLE[site])]);
}
