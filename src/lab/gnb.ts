/**
 * The gNB emulator (bpf/lab/gnb.bpf.c): loaded with bpftool into the lab's own
 * bpffs, attached with tc (clsact ingress) on the gNB namespace's two
 * veths, configured through its config map, counters read back.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { linkInfo, run } from './sh.js';
import type { LabTopology } from './topology.js';

export const GNB_OBJECT = fileURLToPath(new URL('../../build/gnb.bpf.o', import.meta.url));
/** sizeof(struct gnb_cfg), struct gnb_ue_ul and struct gnb_ue_dl in bpf/lab/gnb.h. */
const CFG_SIZE = 44;
const UE_UL_SIZE = 8;
const UE_DL_SIZE = 8;

/** Counter names in the order of enum gnb_counter (bpf/lab/gnb.h). */
export const GNB_COUNTERS = [
  'ul_encap',
  'ul_pass',
  'ul_drop_gso',
  'ul_drop_room',
  'dl_decap',
  'dl_pass',
  'dl_drop_teid',
  'dl_drop_not_gpdu',
  'dl_drop_malformed',
  'dl_drop_inner',
  'dl_drop_room',
  'dl_qfi_mismatch',
  'dl_no_container',
  'dl_drop_ue',
] as const;
export type GnbCounters = Record<(typeof GNB_COUNTERS)[number], number>;

const progDir = (bpffs: string): string => join(bpffs, 'gnb');
const mapDir = (bpffs: string): string => join(bpffs, 'gnb_maps');

function mac(s: string): number[] {
  return s.split(':').map((h) => parseInt(h, 16));
}

function ip4(s: string): number[] {
  return s.split('.').map(Number);
}

function be32(n: number): number[] {
  return [(n >>> 24) & 0xff, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff];
}

function le32(n: number): number[] {
  return be32(n).reverse();
}

/** Load, configure and attach the emulator in the gNB namespace. */
export async function startGnb(t: LabTopology, bpffs: string): Promise<void> {
  await run('bpftool', ['prog', 'loadall', GNB_OBJECT, progDir(bpffs), 'type', 'classifier', 'pinmaps', mapDir(bpffs)]);
  const cfgMap = join(mapDir(bpffs), 'gnb_config');
  for (const [name, size] of [
    ['gnb_config', CFG_SIZE],
    ['gnb_ue_ul', UE_UL_SIZE],
    ['gnb_ue_dl', UE_DL_SIZE],
  ] as const) {
    const info = JSON.parse((await run('bpftool', ['-j', 'map', 'show', 'pinned', join(mapDir(bpffs), name)])).stdout) as { bytes_value: number };
    if (info.bytes_value !== size) {
      throw new Error(`${GNB_OBJECT}: ${name} value is ${info.bytes_value} bytes, src/lab/gnb.ts writes ${size}: rebuild (make bpf) or update src/lab/gnb.ts`);
    }
  }
  const toUe = await linkInfo(t.ns.gnb, t.gnb.toUe);
  const n3 = await linkInfo(t.ns.gnb, t.gnb.n3);
  const ue = await linkInfo(t.ns.ue, t.ue.dev); // every UE's address is on this one veth
  const mupN3 = await linkInfo(t.ns.mup, t.mup.n3);
  const value = [
    ...le32(toUe.ifindex),
    ...le32(n3.ifindex),
    ...ip4(t.gnb.addr),
    ...ip4(t.mup.n3Addr),
    64, // outer TTL
    1, // ready
    0,
    0,
    ...mac(mupN3.mac),
    ...mac(n3.mac),
    ...mac(ue.mac),
    ...mac(toUe.mac),
  ];
  if (value.length !== CFG_SIZE) throw new Error(`gnb_cfg encoding is ${value.length} bytes, expected ${CFG_SIZE}`);
  const hex = (b: number[]): string[] => b.map((x) => x.toString(16).padStart(2, '0'));
  // The UEs first (one bpftool batch: two entries per UE), then the config
  // entry that makes the programs act.
  const batch = t.ues.flatMap((u) => [
    `map update pinned ${join(mapDir(bpffs), 'gnb_ue_ul')} key hex ${hex(ip4(u.addr)).join(' ')} value hex ${hex([...be32(u.ulTeid), u.qfi, 0, 0, 0]).join(' ')}`,
    `map update pinned ${join(mapDir(bpffs), 'gnb_ue_dl')} key hex ${hex(be32(u.dlTeid)).join(' ')} value hex ${hex([...ip4(u.addr), u.qfi, 0, 0, 0]).join(' ')}`,
  ]);
  const batchFile = join(bpffs, '..', 'gnb-ues.batch');
  writeFileSync(batchFile, batch.join('\n') + '\n');
  await run('bpftool', ['batch', 'file', batchFile]);
  await run('bpftool', ['map', 'update', 'pinned', cfgMap, 'key', 'hex', ...hex([0, 0, 0, 0]), 'value', 'hex', ...hex(value)]);
  for (const [dev, prog] of [
    [t.gnb.toUe, 'gnb_uplink'],
    [t.gnb.n3, 'gnb_downlink'],
  ] as const) {
    await run('tc', ['-n', t.ns.gnb, 'qdisc', 'add', 'dev', dev, 'clsact']);
    await run('tc', ['-n', t.ns.gnb, 'filter', 'add', 'dev', dev, 'ingress', 'bpf', 'da', 'pinned', join(progDir(bpffs), prog)]);
  }
}

/** The emulator's counters, summed over CPUs. */
export async function gnbCounters(bpffs: string): Promise<GnbCounters> {
  const r = await run('bpftool', ['-j', 'map', 'dump', 'pinned', join(mapDir(bpffs), 'gnb_counters')]);
  // With BTF, bpftool adds "formatted" (key and per-CPU values as numbers).
  const rows = JSON.parse(r.stdout) as { formatted?: { key: number; values: { cpu: number; value: number }[] } }[];
  const out = Object.fromEntries(GNB_COUNTERS.map((n) => [n, 0])) as GnbCounters;
  for (const row of rows) {
    if (row.formatted === undefined) throw new Error('bpftool map dump gave no "formatted" values (BTF missing from build/gnb.bpf.o?)');
    const name = GNB_COUNTERS[row.formatted.key];
    if (name !== undefined) out[name] = row.formatted.values.reduce((s, v) => s + Number(v.value), 0);
  }
  return out;
}

/** Counter differences b - a. */
export function gnbDelta(a: GnbCounters, b: GnbCounters): GnbCounters {
  return Object.fromEntries(GNB_COUNTERS.map((n) => [n, b[n] - a[n]])) as GnbCounters;
}
