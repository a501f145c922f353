/**
 * BGP MUP routes (AFI 1/2, SAFI 85; draft-mpmz-bess-mup-safi as GoBGP 3.10
 * speaks it) decoded from `gobgp monitor global rib -j [--current]`: one JSON
 * array of paths per line (docs/bgp.md "What the daemon reads").
 *
 * The monitor ignores `-a`, so every path is checked here: the NLRI's
 * arch_type 1 (3GPP 5G) and route_type 1..4, and the MP_REACH (type 14)
 * attribute's afi 1/2 and safi 85. Anything else is skipped (not ours);
 * a MUP path with a field missing or malformed is rejected with a reason
 * (counted by the caller), never half decoded. When the fields of its key
 * (RD and the type's key fields) decode, the rejection carries the key: the
 * path still replaces or withdraws the route of that key in gobgpd, so the
 * learner takes it as that route's withdrawal.
 */
import { formatIpv4 as formatA4, formatIpv6 as formatA6, ipv6FromBytes, parseIpv4, parseIpv4Prefix, parseIpv6, parseIpv6Prefix } from '../sid/addr.js';
import type { Ipv4Addr, Ipv4Prefix, Ipv6Addr, Ipv6Prefix } from '../sid/types.js';

export type RouteType = 'isd' | 'dsd' | 't1st' | 't2st';
export const ROUTE_TYPES: readonly RouteType[] = ['isd', 'dsd', 't1st', 't2st'];
/** NLRI route_type code points (draft §3.1): 1 ISD, 2 DSD, 3 T1ST, 4 T2ST. */
/** By route_type; a Map, so that "__proto__" or "constructor" is no type (an object's were: a TypeError, found in review). */
const ROUTE_TYPE_OF: ReadonlyMap<unknown, RouteType> = new Map<unknown, RouteType>([
  [1, 'isd'],
  [2, 'dsd'],
  [3, 't1st'],
  [4, 't2st'],
]);
export const MUP_SAFI = 85;
/** arch_type 1: 3gpp-5g. */
export const ARCH_3GPP_5G = 1;

/** An IPv4 or IPv6 address / prefix as carried in a route. */
export type Addr = { readonly family: 4; readonly addr: Ipv4Addr } | { readonly family: 6; readonly addr: Ipv6Addr };
export type Prefix = { readonly family: 4; readonly prefix: Ipv4Prefix } | { readonly family: 6; readonly prefix: Ipv6Prefix };

/** SRv6 SID information (Prefix-SID attribute, RFC 9252 SRv6 L3 Service TLV) with its structure. */
export interface Srv6Sid {
  readonly sid: Ipv6Addr;
  /** Endpoint behavior code point (RFC 8986 / RFC 9433 registry): 19 End.DT4, 18 End.DT6, 20 End.DT46, 72 End.M.GTP4.E, 71 End.M.GTP6.E. */
  readonly behavior: number;
  /** Locator block, locator node, function, argument lengths (bits); absent when the route carries no structure sub-sub-TLV. */
  readonly structure?: { readonly lb: number; readonly ln: number; readonly fn: number; readonly al: number; readonly tl: number; readonly to: number };
}

interface Common {
  /** The path's identity: route type, RD and the type's key fields (GoBGP's NLRI string form). */
  readonly key: string;
  readonly afi: 1 | 2;
  /** "65000:2" (2-byte ASN) or "10.255.0.2:7" (IPv4 address), as GoBGP prints it. */
  readonly rd: string;
  /** Route targets (extended community type 0/1/2, subtype 2), as printed. */
  readonly rts: readonly string[];
  readonly nexthop?: string;
  readonly withdrawal: boolean;
  /** Marked stale by graceful restart (a withdrawal of a stale path: not refreshed after the restart). */
  readonly stale: boolean;
  /** Originator (router id); absent for locally originated paths. */
  readonly sourceId?: string;
  readonly neighbor?: string;
}

export interface IsdRoute extends Common {
  readonly type: 'isd';
  readonly prefix: Prefix;
  readonly sid?: Srv6Sid;
}
export interface DsdRoute extends Common {
  readonly type: 'dsd';
  readonly address: Addr;
  /** MUP extended community (type 0x0c, subtype 0) "a:b". */
  readonly segmentId?: string;
  readonly sid?: Srv6Sid;
}
export interface T1stRoute extends Common {
  readonly type: 't1st';
  readonly prefix: Prefix;
  readonly teid: number;
  readonly qfi: number;
  readonly endpoint: Addr;
  /** mpmz-03+ only (GoBGP >= 3.22); 3.10 has none. */
  readonly source?: Addr;
}
export interface T2stRoute extends Common {
  readonly type: 't2st';
  readonly endpoint: Addr;
  readonly teid: number;
  /** TEID bits (Endpoint Address Length - address bits); 3.10: always 32. */
  readonly teidLen: number;
  readonly segmentId?: string;
}
export type MupRoute = IsdRoute | DsdRoute | T1stRoute | T2stRoute;

export interface Rejected {
  readonly reason: string;
  /** The path as read, for the log. */
  readonly path: unknown;
  /**
   * The path's key, when the fields that make it decoded and only others did
   * not (a T1ST's QFI of 64..255, which gobgpd 3.10 passes through): the
   * path still replaced or withdrew the route of that key in gobgpd, so the
   * learner withdraws it. Absent when the key itself could not be read.
   */
  readonly key?: string;
  /** With key: a learned path (source-id or neighbor), not one of our own. */
  readonly learned?: boolean;
  /** With key: the path is a withdrawal. */
  readonly withdrawal?: boolean;
}

export interface DecodedLine {
  readonly routes: MupRoute[];
  /** MUP paths that could not be decoded. */
  readonly rejected: Rejected[];
  /** Paths of other families (the monitor ignores -a). */
  readonly skipped: number;
  /**
   * gobgp's own failure, which it prints with -j as one object on stdout
   * (`{"error": "..."}`, then exit 1): not paths, and not a table.
   */
  readonly error?: string;
  /**
   * Why the line is no list of paths at all (not JSON, another JSON value):
   * as the monitor's first line it is no table, and taken as one (an empty
   * table) it withdrew every learned route (found in review, session 42).
   */
  readonly notPaths?: string;
}

type Json = Record<string, unknown>;

class Bad extends Error {}
/** A path whose key decoded, rejected for another field. */
class BadKeyed extends Bad {
  constructor(
    message: string,
    readonly key: string,
    readonly learned: boolean,
    readonly withdrawal: boolean,
  ) {
    super(message);
  }
}

function obj(v: unknown, what: string): Json {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Bad(`${what} is not an object`);
  return v as Json;
}
function str(v: unknown, what: string): string {
  if (typeof v !== 'string') throw new Bad(`${what} is not a string`);
  return v;
}
function uint(v: unknown, what: string, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max) throw new Bad(`${what} is not an integer 0..${max}`);
  return v;
}
function guard<T>(what: string, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    if (e instanceof Bad) throw e;
    throw new Bad(`${what}: ${(e as Error).message}`);
  }
}

function addr(v: unknown, what: string): Addr {
  const s = str(v, what);
  return s.includes(':') ? { family: 6, addr: guard(what, () => parseIpv6(s, what)) } : { family: 4, addr: guard(what, () => parseIpv4(s, what)) };
}
/**
 * A prefix of a route's key. One with host bits set is refused: gobgpd holds
 * 10.60.0.1/31 and 10.60.0.0/31 as two routes, and masked they were one key
 * here, so the withdrawal of either took the rule of the other, still
 * advertised (found in review).
 */
function prefix(v: unknown, what: string): Prefix {
  const s = str(v, what);
  const refuse = (_where: string, message: string): never => {
    throw new Bad(`${what}: ${message.replace(/; using .*$/, '')}: refused, gobgpd holds it apart from the prefix without them`);
  };
  return s.includes(':')
    ? { family: 6, prefix: guard(what, () => parseIpv6Prefix(s, what, refuse)) }
    : { family: 4, prefix: guard(what, () => parseIpv4Prefix(s, what, refuse)) };
}

/** A TEID: a number (3.10) or a dotted quad (newer GoBGP). */
function teid(v: unknown, what: string): number {
  if (typeof v === 'string' && /^\d+\.\d+\.\d+\.\d+$/.test(v)) return guard(what, () => parseIpv4(v, what)) as number;
  return uint(v, what, 0xffffffff);
}

/**
 * The RD as text, one text per RD (RFC 4364 4.2): type 0 "AS2:N32", type 1
 * "IPv4:N16", type 2 "AS4:N16", each field in its type's range. A type 2 RD
 * whose AS fits 16 bits is spelled "0.AS:N", as gobgp spells type 2 (and
 * reads it back as type 2): before, it was "AS:N", the text of the type 0
 * RD, and two routes of different RDs shared one key (found in review).
 */
function rdText(v: unknown): string {
  const rd = obj(v, 'rd');
  const type = uint(rd['type'], 'rd.type', 2);
  const admin = rd['admin'];
  if (type === 0) return `${uint(admin, 'rd.admin', 0xffff)}:${uint(rd['assigned'], 'rd.assigned', 0xffffffff)}`;
  const assigned = uint(rd['assigned'], 'rd.assigned', 0xffff);
  if (type === 1) {
    const ip = str(admin, 'rd.admin');
    try {
      parseIpv4(ip, 'rd.admin');
    } catch {
      throw new Bad(`rd.admin ${JSON.stringify(ip.slice(0, 40))} is not an IPv4 address (a type 1 RD's)`);
    }
    return `${ip}:${assigned}`;
  }
  const as = uint(admin, 'rd.admin', 0xffffffff);
  return as <= 0xffff ? `0.${as}:${assigned}` : `${as}:${assigned}`;
}

function sidOf(attr: Json): Srv6Sid | undefined {
  const tlvs = attr['TLVs'];
  if (!Array.isArray(tlvs)) return undefined;
  for (const t of tlvs) {
    const tlv = obj(t, 'prefix SID TLV');
    if (tlv['type'] !== 5 || !Array.isArray(tlv['SubTLVs'])) continue;
    for (const s of tlv['SubTLVs']) {
      const sub = obj(s, 'SRv6 service sub-TLV');
      if (sub['type'] !== 1) continue;
      const raw = Buffer.from(str(sub['sid'], 'sid'), 'base64');
      if (raw.length !== 16) throw new Bad(`sid is ${raw.length} bytes, not 16`);
      const behavior = uint(sub['endpoint_behavior'], 'endpoint_behavior', 0xffff);
      const sss = Array.isArray(sub['sub_sub_tlvs']) ? sub['sub_sub_tlvs'].map((x) => obj(x, 'SID structure')).find((x) => x['type'] === 1) : undefined;
      const structure =
        sss === undefined
          ? undefined
          : {
              lb: uint(sss['locator_block_length'], 'locator_block_length', 255),
              ln: uint(sss['locator_node_length'], 'locator_node_length', 255),
              fn: uint(sss['function_length'], 'function_length', 255),
              al: uint(sss['argument_length'] ?? 0, 'argument_length', 255),
              tl: uint(sss['transposition_length'] ?? 0, 'transposition_length', 255),
              to: uint(sss['transposition_offset'] ?? 0, 'transposition_offset', 255),
            };
      return { sid: ipv6FromBytes(raw), behavior, ...(structure === undefined ? {} : { structure }) };
    }
  }
  return undefined;
}

function fmt(a: Addr | Prefix): string {
  if ('addr' in a) {
    return a.family === 4 ? formatA4(a.addr) : formatA6(a.addr);
  }
  return a.family === 4 ? `${formatA4(a.prefix.addr)}/${a.prefix.len}` : `${formatA6(a.prefix.addr)}/${a.prefix.len}`;
}

/** The fields of a route's key (GoBGP's NLRI string form), decoded from the NLRI before anything else. */
type KeyOf =
  | { readonly type: 'isd'; readonly key: string; readonly prefix: Prefix }
  | { readonly type: 'dsd'; readonly key: string; readonly address: Addr }
  | { readonly type: 't1st'; readonly key: string; readonly prefix: Prefix }
  | { readonly type: 't2st'; readonly key: string; readonly endpoint: Addr; readonly teid: number };

function keyOf(type: RouteType, rd: string, v: Json): KeyOf {
  switch (type) {
    case 'isd': {
      const pf = prefix(v['prefix'], 'prefix');
      return { type, key: `[type:isd][rd:${rd}][prefix:${fmt(pf)}]`, prefix: pf };
    }
    case 'dsd': {
      const a = addr(v['address'], 'address');
      return { type, key: `[type:dsd][rd:${rd}][prefix:${fmt(a)}]`, address: a };
    }
    case 't1st': {
      const pf = prefix(v['prefix'], 'prefix');
      return { type, key: `[type:t1st][rd:${rd}][prefix:${fmt(pf)}]`, prefix: pf };
    }
    case 't2st': {
      const endpoint = addr(v['endpoint_address'], 'endpoint_address');
      const t = teid(v['teid'], 'teid');
      return { type, key: `[type:t2st][rd:${rd}][endpoint:${fmt(endpoint)}][teid:${t}]`, endpoint, teid: t };
    }
  }
}

/**
 * Decode one path object. Returns undefined for a path that is not a MUP
 * route (another family); throws Bad with the reason for a malformed one,
 * BadKeyed when its key decoded and another field did not.
 */
function decodePath(p: Json): MupRoute | undefined {
  const nlri = obj(p['nlri'], 'nlri');
  const attrs = Array.isArray(p['attrs']) ? (p['attrs'] as unknown[]).map((a) => obj(a, 'attribute')) : [];
  const mp = attrs.find((a) => a['type'] === 14);
  if (nlri['arch_type'] !== ARCH_3GPP_5G || mp === undefined || mp['safi'] !== MUP_SAFI) return undefined;
  const afi = mp['afi'];
  if (afi !== 1 && afi !== 2) return undefined;
  const type = ROUTE_TYPE_OF.get(nlri['route_type']);
  if (type === undefined) throw new Bad(`unknown MUP route_type ${JSON.stringify(nlri['route_type'])}`);
  const v = obj(nlri['value'], 'nlri.value');
  const rd = rdText(v['rd']);
  const k = keyOf(type, rd, v);
  const withdrawal = p['withdrawal'] === true;
  try {
    return decodeFields(p, k, v, attrs, mp, afi, rd, withdrawal);
  } catch (e) {
    // The key is known: gobgpd holds this path under it, replacing (or withdrawing) the route the learner has there.
    if (e instanceof Bad) throw new BadKeyed(e.message, k.key, typeof p['source-id'] === 'string' || typeof p['neighbor-ip'] === 'string', withdrawal);
    throw e;
  }
}

/** The rest of a path whose key decoded: its attributes and the NLRI fields outside the key. */
function decodeFields(p: Json, k: KeyOf, v: Json, attrs: Json[], mp: Json, afi: 1 | 2, rd: string, withdrawal: boolean): MupRoute {
  const rts: string[] = [];
  let segmentId: string | undefined;
  let sid: Srv6Sid | undefined;
  for (const a of attrs) {
    if (a['type'] === 16 && Array.isArray(a['value'])) {
      for (const c of a['value']) {
        const ec = obj(c, 'extended community');
        if (ec['subtype'] === 2 && (ec['type'] === 0 || ec['type'] === 1 || ec['type'] === 2)) rts.push(str(ec['value'], 'route target'));
        if (ec['type'] === 12 && ec['subtype'] === 0) {
          const s = str(ec['segmend_id'] ?? ec['segment_id'], 'MUP extended community segmend_id');
          if (!/^\d+:\d+$/.test(s)) throw new Bad(`MUP segment id ${JSON.stringify(s)} is not A:B`);
          segmentId = s;
        }
      }
    }
    if (a['type'] === 40) sid = sidOf(a);
  }
  const common = {
    key: k.key,
    afi,
    rd,
    rts,
    ...(typeof mp['nexthop'] === 'string' ? { nexthop: mp['nexthop'] } : {}),
    withdrawal,
    stale: p['stale'] === true,
    ...(typeof p['source-id'] === 'string' ? { sourceId: p['source-id'] } : {}),
    ...(typeof p['neighbor-ip'] === 'string' ? { neighbor: p['neighbor-ip'] } : {}),
  };
  switch (k.type) {
    case 'isd':
      return { type: k.type, ...common, prefix: k.prefix, ...(sid === undefined ? {} : { sid }) };
    case 'dsd':
      return { type: k.type, ...common, address: k.address, ...(segmentId === undefined ? {} : { segmentId }), ...(sid === undefined ? {} : { sid }) };
    case 't1st': {
      const t = teid(v['teid'], 'teid');
      const qfi = uint(v['qfi'], 'qfi', 63);
      const endpoint = addr(v['endpoint_address'], 'endpoint_address');
      const source = v['source_address'] === undefined || v['source_address'] === '' ? undefined : addr(v['source_address'], 'source_address');
      return {
        type: k.type,
        ...common,
        prefix: k.prefix,
        teid: t,
        qfi,
        endpoint,
        ...(source === undefined ? {} : { source }),
      };
    }
    case 't2st': {
      const { endpoint } = k;
      const bits = endpoint.family === 4 ? 32 : 128;
      const eal = v['endpoint_address_length'] === undefined ? bits + 32 : uint(v['endpoint_address_length'], 'endpoint_address_length', bits + 32);
      if (eal < bits) throw new Bad(`endpoint_address_length ${eal} is shorter than the ${bits}-bit endpoint`);
      return {
        type: k.type,
        ...common,
        endpoint,
        teid: k.teid,
        teidLen: eal - bits,
        ...(segmentId === undefined ? {} : { segmentId }),
      };
    }
  }
}

/** Decode one line of `gobgp monitor global rib -j`. A line that is not a JSON array is one rejection. */
export function decodeMonitorLine(line: string): DecodedLine {
  const out: DecodedLine = { routes: [], rejected: [], skipped: 0 };
  const text = line.trim();
  if (text === '') return out;
  let paths: unknown;
  try {
    paths = JSON.parse(text);
  } catch (e) {
    const reason = `not JSON (${(e as Error).message})`;
    out.rejected.push({ reason, path: text.slice(0, 200) });
    return { ...out, notPaths: reason };
  }
  const error = gobgpError(paths);
  if (error !== undefined) return { ...out, error };
  if (!Array.isArray(paths)) {
    const reason = 'not a JSON array of paths';
    out.rejected.push({ reason, path: typeof paths === 'object' && paths !== null ? JSON.stringify(paths).slice(0, 200) : paths });
    return { ...out, notPaths: reason };
  }
  return decodePaths(paths);
}

/** The text of gobgp's `{"error": "..."}` (its -j form of a failure), or undefined. */
export function gobgpError(v: unknown): string | undefined {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return undefined;
  const e = (v as Json)['error'];
  return typeof e === 'string' ? e : undefined;
}

/**
 * Paths (parsed JSON, as gobgp prints them) decoded. `bestOnly`: only those
 * marked best (a `gobgp global rib -j` destination lists every path it has;
 * the monitor's best-path events carry only the best, unmarked).
 */
export function decodePaths(paths: readonly unknown[], bestOnly = false): DecodedLine {
  const out: DecodedLine = { routes: [], rejected: [], skipped: 0 };
  let skipped = 0;
  for (const p of paths) {
    if (bestOnly && (typeof p !== 'object' || p === null || (p as Json)['best'] !== true)) {
      skipped++;
      continue;
    }
    try {
      const r = decodePath(obj(p, 'path'));
      if (r === undefined) skipped++;
      else out.routes.push(r);
    } catch (e) {
      // Any other error is a defect here, but one path's: rejected with its reason, not the whole line's end
      // (thrown, it ended the reader thread, and the monitor restarted for ever on the same table).
      const reason = e instanceof Bad ? e.message : `not decoded (${(e as Error).message})`;
      out.rejected.push(e instanceof BadKeyed ? { reason, path: p, key: e.key, learned: e.learned, withdrawal: e.withdrawal } : { reason, path: p });
    }
  }
  return { ...out, skipped };
}

/** Text of an address or prefix of a route (for names, logs, the CLI). */
export function formatAddr(a: Addr | Prefix): string {
  return fmt(a);
}

/** A route in one line for logs: type, key fields, SID. */
export function describeRoute(r: MupRoute): string {
  const rt = r.rts.length === 0 ? '' : ` rt ${r.rts.join(',')}`;
  const seg = 'segmentId' in r && r.segmentId !== undefined ? ` mup ${r.segmentId}` : '';
  const sid = 'sid' in r && r.sid !== undefined ? ` sid ${formatA6(r.sid.sid)} behavior ${r.sid.behavior}${r.sid.structure === undefined ? '' : ` lb ${r.sid.structure.lb} ln ${r.sid.structure.ln} fn ${r.sid.structure.fn}`}` : '';
  return `${r.key}${rt}${seg}${sid}${r.withdrawal ? ' (withdrawn)' : ''}${r.stale ? ' (stale)' : ''}`;
}
