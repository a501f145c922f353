/**
 * What we advertise through the sidecar (docs/bgp.md "Advertised routes"):
 * one ISD per served access prefix of each End.M.GTP4.E / End.M.GTP6.E
 * local SID with `advertise:` (split to /25 or /121: gobgpd 3.10 drops
 * shorter received ISDs), and the PE's DSDs from `bgp.dsd`. Reconciled
 * against the sidecar's own (locally originated) ISD/DSD paths with the
 * gobgp CLI: missing ones added, changed ones added again (same NLRI:
 * replaced), extra ones deleted.
 */
import type { BgpConfig, LocalSid } from '../config/types.js';
import { formatIpv6, parseIpv4Prefix, parseIpv6Prefix } from '../sid/addr.js';
import { gobgp, type GobgpApi } from './gobgpd.js';
import { BEHAVIOR, splitForIsd } from './resolve.js';
import { decodePaths, formatAddr, type MupRoute } from './routes.js';

/** gobgp CLI behavior names (GoBGP's SRv6Behavior enum). */
const BEHAVIOR_NAME: Readonly<Record<number, string>> = {
  [BEHAVIOR.END_DT4]: 'END_DT4',
  [BEHAVIOR.END_DT6]: 'END_DT6',
  [BEHAVIOR.END_DT46]: 'END_DT46',
  [BEHAVIOR.END_M_GTP4_E]: 'ENDM_GTP4E',
  [BEHAVIOR.END_M_GTP6_E]: 'ENDM_GTP6E',
};
const DSD_BEHAVIOR = { 'end.dt4': BEHAVIOR.END_DT4, 'end.dt6': BEHAVIOR.END_DT6, 'end.dt46': BEHAVIOR.END_DT46 } as const;

export interface OwnRoute {
  readonly key: string;
  /** Key and every attribute we set: equal signatures need no re-advertisement. */
  readonly sig: string;
  /** `gobgp global rib` arguments after add/del. */
  readonly args: readonly string[];
}

interface Fields {
  type: 'isd' | 'dsd';
  family: 4 | 6;
  nlri: string;
  rd: string;
  sid: bigint;
  behavior: number;
  lb: number;
  ln: number;
  fn: number;
  rt: string;
  segmentId?: string;
  nexthop: string;
}

function own(f: Fields): OwnRoute {
  const key = `[type:${f.type}][rd:${f.rd}][prefix:${f.nlri}]`;
  const sid = formatIpv6(f.sid as never);
  const args = [
    '-a',
    f.family === 4 ? 'mup-ipv4' : 'mup-ipv6',
    f.type,
    f.nlri,
    'rd',
    f.rd,
    'prefix',
    `${sid}/${f.lb}`,
    'locator-node-length',
    String(f.ln),
    'function-length',
    String(f.fn),
    'behavior',
    BEHAVIOR_NAME[f.behavior] ?? String(f.behavior),
    'rt',
    f.rt,
    ...(f.segmentId === undefined ? [] : ['mup', f.segmentId]),
    'nexthop',
    f.nexthop,
  ];
  return { key, sig: `${key} ${sid} ${f.behavior} ${f.lb}/${f.ln}/${f.fn} ${f.rt} ${f.segmentId ?? '-'} ${f.nexthop}`, args };
}

/** The ISD and DSD routes the config (and the running local SIDs) say we advertise. */
export function desiredRoutes(bgp: BgpConfig, localsids: Iterable<LocalSid>): OwnRoute[] {
  const out = new Map<string, OwnRoute>();
  const nh = bgp.nexthop === undefined ? undefined : formatIpv6(bgp.nexthop);
  for (const l of localsids) {
    const a = l.advertise;
    if (a === undefined || nh === undefined) continue;
    const gtp4 = (l.behavior ?? 'end.m.gtp4.e') === 'end.m.gtp4.e';
    if (!gtp4 && l.behavior !== 'end.m.gtp6.e') continue;
    for (const text of a.prefixes) {
      const pieces = gtp4
        ? (() => {
            const p = parseIpv4Prefix(text, 'advertise');
            return splitForIsd({ family: 4, addr: p.addr, len: p.len });
          })()
        : (() => {
            const p = parseIpv6Prefix(text, 'advertise');
            return splitForIsd({ family: 6, addr: p.addr, len: p.len });
          })();
      for (const nlri of pieces) {
        const r = own({
          type: 'isd',
          family: gtp4 ? 4 : 6,
          nlri,
          rd: bgp.rd,
          sid: l.sid.addr,
          behavior: gtp4 ? BEHAVIOR.END_M_GTP4_E : BEHAVIOR.END_M_GTP6_E,
          lb: a.lb,
          ln: a.ln,
          fn: a.fn,
          rt: bgp.rt,
          nexthop: nh,
        });
        out.set(r.key, r);
      }
    }
  }
  for (const d of bgp.dsd) {
    if (nh === undefined) continue;
    const r = own({
      type: 'dsd',
      family: d.address.includes(':') ? 6 : 4,
      nlri: d.address,
      rd: bgp.rd,
      sid: d.sid,
      behavior: DSD_BEHAVIOR[d.behavior],
      lb: d.lb,
      ln: d.ln,
      fn: d.fn,
      rt: bgp.rt,
      segmentId: d.segmentId,
      nexthop: nh,
    });
    out.set(r.key, r);
  }
  return [...out.values()];
}

/** An own route as gobgpd holds it, with the arguments that delete it. */
export function ownOf(r: MupRoute): OwnRoute | undefined {
  if ((r.type !== 'isd' && r.type !== 'dsd') || r.sid === undefined || r.sid.structure === undefined) return undefined;
  const s = r.sid.structure;
  return own({
    type: r.type,
    family: r.afi === 1 ? 4 : 6,
    nlri: formatAddr(r.type === 'isd' ? r.prefix : r.address),
    rd: r.rd,
    sid: r.sid.sid,
    behavior: r.sid.behavior,
    lb: s.lb,
    ln: s.ln,
    fn: s.fn,
    rt: r.rts[0] ?? '',
    ...(r.type === 'dsd' && r.segmentId !== undefined ? { segmentId: r.segmentId } : {}),
    nexthop: r.nexthop ?? '',
  });
}

/**
 * The locally originated ISD/DSD paths in the sidecar's table, read from
 * the whole table (every learned route too: at 20,000 of them 0.8 s of the
 * caller's thread). The daemon takes them from its monitor instead
 * (Learner.ownRoutes); this is for the CLI and tests.
 */
export async function ownRoutes(api: GobgpApi): Promise<OwnRoute[]> {
  const out: OwnRoute[] = [];
  for (const family of ['mup-ipv4', 'mup-ipv6']) {
    const text = await gobgp(api, ['global', 'rib', '-a', family, '-j']);
    const table = text.trim() === '' ? {} : (JSON.parse(text) as Record<string, unknown[]> | null);
    const paths = Object.values(table ?? {}).flat();
    for (const r of decodePaths(paths).routes) {
      if (r.sourceId !== undefined || r.neighbor !== undefined) continue;
      const o = ownOf(r);
      if (o !== undefined) out.push(o);
    }
  }
  return out;
}

export interface ReconcileResult {
  readonly added: string[];
  readonly deleted: string[];
  readonly errors: string[];
}

/**
 * Make the sidecar advertise exactly `want` (of our ISD/DSD routes).
 * `have`: the sidecar's own routes as the daemon's monitor sees them; read
 * from the sidecar's whole table (ownRoutes) when not given.
 */
export async function reconcileOwn(api: GobgpApi, want: readonly OwnRoute[], have0?: readonly OwnRoute[]): Promise<ReconcileResult> {
  const have = have0 ?? (await ownRoutes(api));
  const haveSig = new Set(have.map((r) => r.sig));
  const wantKeys = new Set(want.map((r) => r.key));
  const added: string[] = [];
  const deleted: string[] = [];
  const errors: string[] = [];
  for (const r of have) {
    if (wantKeys.has(r.key)) continue;
    try {
      await gobgp(api, ['global', 'rib', 'del', ...r.args]);
      deleted.push(r.key);
    } catch (e) {
      errors.push((e as Error).message);
    }
  }
  for (const r of want) {
    if (haveSig.has(r.sig)) continue;
    try {
      await gobgp(api, ['global', 'rib', 'add', ...r.args]);
      added.push(r.key);
    } catch (e) {
      errors.push((e as Error).message);
    }
  }
  return { added, deleted, errors };
}
