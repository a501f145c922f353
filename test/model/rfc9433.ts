/**
 * An independent model of the RFC 9433 translations as this repository
 * implements them (docs/datapath.md): from an input frame and a
 * configuration, what the frame must become, or why it must not be
 * translated. Written from the documents, not from bpf/, so that it can serve
 * as a test oracle for the XDP program: the fuzzer (test/fuzz/fuzz.ts)
 * compares every frame's outcome with it, and packet tests can too.
 *
 * H.M.GTP4.D and End.M.GTP4.E (GTP-U over IPv4), End.M.GTP6.D / .D.Di and
 * End.M.GTP6.E (GTP-U over IPv6), GTP-U Echo answered, and the UDP checksum
 * rule of End.M.GTP6.E.
 */
import type { Config, LocalSid, Policy, Session } from '../../src/config/types.js';
import { ipv4Addr, ipv6FromBytes, ipv6ToBytes, mask6 } from '../../src/sid/addr.js';
import { decodeGtp4Sid, decodeGtp4Src, decodeGtp6Sid, encodeGtp4Sid, encodeGtp4Src, encodeGtp6Sid, qfi as mkQfi, teid as mkTeid } from '../../src/sid/mobile.js';
import type { Ipv6Addr } from '../../src/sid/types.js';
import { ipv4Checksum, ipv4Header } from '../../src/packet/frames.js';

const ETH_HLEN = 14;

// ---------------------------------------------------------------------------
// The reference model of a translation (docs/datapath.md, spec §2–4),
// independent of bpf/: what a frame must become, or why it must not be translated.

export type ModelResult =
  | {
      readonly kind: 'translate';
      readonly out: Buffer;
      readonly layout: readonly (readonly [number, string])[];
      /**
       * Set when the docs say translate but a stricter reading would drop
       * (e.g. an IPv6 version nibble that is not 6): either verdict passes,
       * a translation must still be the right one, and it is reported.
       */
      readonly doubt?: string;
    }
  | { readonly kind: 'not-ours' }
  | { readonly kind: 'malformed'; readonly why: string }
  /** A GTP-U Echo Request to us: answered with exactly this frame (XDP_TX). */
  | { readonly kind: 'reply'; readonly out: Buffer };

const MH_K = [
  0x9e3779b97f4a7c15n, 0xc2b2ae3d27d4eb4fn, 0x165667b19e3779f9n, 0xd6e8feb86659fd93n, 0xff51afd7ed558ccdn,
  0xc4ceb9fe1a85ec53n, 0x27d4eb2f165667c5n, 0x85ebca77c2b2ae63n, 0x94d049bb133111ebn, 0xbf58476d1ce4e5b9n,
] as const;

/** docs/datapath.md "Inner 5-tuple hash": multilinear multiply-shift, then one mixing round. */
function mh(words: readonly number[], seed: number): number {
  let sum = 0n;
  words.forEach((w, i) => {
    sum = BigInt.asUintN(64, sum + BigInt((w ^ seed) >>> 0) * MH_K[i]!);
  });
  let h = Number(sum >> 32n);
  h = (h ^ (h >>> 16)) >>> 0;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  return (h ^ (h >>> 13)) >>> 0;
}

/** Inner 5-tuple hash of docs/datapath.md over inner[0..len). */
function innerHash(inner: Buffer, seed: number): number {
  const withPorts = (p: number): boolean => p === 6 || p === 17 || p === 132;
  if (inner[0]! >> 4 === 4) {
    const ihl = (inner[0]! & 15) * 4;
    const proto = inner[9]!;
    const frag = inner.readUInt16BE(6) & 0x3fff;
    // L4 at IHL×4; an IHL below 5 has no L4 (the header would overlap it).
    const ports = withPorts(proto) && frag === 0 && ihl >= 20 && ihl + 4 <= inner.length ? inner.readUInt32BE(ihl) : 0;
    return mh([inner.readUInt32BE(12), inner.readUInt32BE(16), proto, ports], seed);
  }
  const words: number[] = [];
  for (let i = 0; i < 8; i++) words.push(inner.readUInt32BE(8 + 4 * i));
  const nh = inner[6]!;
  words.push(nh, withPorts(nh) && inner.length >= 44 ? inner.readUInt32BE(40) : 0);
  return mh(words, seed);
}

const mask32 = (len: number): number => (len === 0 ? 0 : (0xffffffff << (32 - len)) >>> 0);

/**
 * The policy of a G-PDU (teid given): the longest prefix of the 64-bit key
 * DA || TEID, a policy's key being its match and, with a TEID prefix, 32 +
 * that prefix's bits (docs/config.md). Without a TEID (any other message):
 * any policy whose match covers the address (docs/design.md).
 */
function policyFor(cfg: Config, da: number, teid?: number): Policy | undefined {
  let best: Policy | undefined;
  let bestLen = -1;
  for (const p of cfg.policies) {
    if (((da & mask32(p.match.len)) >>> 0) !== p.match.addr) continue;
    if (teid !== undefined && p.teid !== undefined && ((teid & mask32(p.teid.len)) >>> 0) !== p.teid.value) continue;
    const len = p.match.len + (p.teid?.len ?? 0);
    if (len > bestLen) {
      best = p;
      bestLen = len;
    }
  }
  return best;
}

function localSidFor(cfg: Config, da: Ipv6Addr): LocalSid | undefined {
  let best: LocalSid | undefined;
  for (const l of cfg.localsids) {
    if (mask6(da, l.sid.len) === l.sid.addr && (best === undefined || l.sid.len > best.sid.len)) best = l;
  }
  return best;
}

function sessionFor4(cfg: Config, da: number): Session | undefined {
  let best: Session | undefined;
  for (const x of cfg.sessions ?? []) {
    if (x.ue.family !== 4) continue;
    const m = x.ue.prefix.len === 0 ? 0 : (0xffffffff << (32 - x.ue.prefix.len)) >>> 0;
    if (((da & m) >>> 0) === x.ue.prefix.addr && (best === undefined || x.ue.prefix.len > best.ue.prefix.len)) best = x;
  }
  return best;
}

function sessionFor6(cfg: Config, da: Ipv6Addr): Session | undefined {
  let best: Session | undefined;
  for (const x of cfg.sessions ?? []) {
    if (x.ue.family !== 6) continue;
    if (mask6(da, x.ue.prefix.len) === x.ue.prefix.addr && (best === undefined || x.ue.prefix.len > best.ue.prefix.len)) best = x;
  }
  return best;
}

/**
 * H.M.Session.Encaps (docs/spec.md §6): the whole IP packet of the frame
 * (no Ethernet padding) behind IPv6 to isd | endpoint | Args.Mob.Session,
 * from src_prefix | source; traffic class = the inner DSCP/ECN.
 */
export function modelSession(f: Buffer, cfg: Config, x: Session): ModelResult {
  const o = ETH_HLEN;
  let inner: Buffer;
  let tc: number;
  if (x.ue.family === 4) {
    const ver = f[o]! >> 4;
    const ihl = (f[o]! & 15) * 4;
    const tot = f.readUInt16BE(o + 2);
    if (ver !== 4 || ihl < 20 || tot < ihl) return { kind: 'malformed', why: `IPv4 to a UE: version ${ver}, IHL ${ihl / 4}, total length ${tot}` };
    if (o + tot > f.length) return { kind: 'malformed', why: 'IPv4 to a UE: total length past the frame' };
    inner = f.subarray(o, o + tot);
    tc = f[o + 1]!;
  } else {
    if (f[o]! >> 4 !== 6) return { kind: 'malformed', why: 'IPv6 to a UE: version nibble' };
    const pl = f.readUInt16BE(o + 4);
    if (o + 40 + pl > f.length) return { kind: 'malformed', why: 'IPv6 to a UE: payload length past the frame' };
    inner = f.subarray(o, o + 40 + pl);
    tc = (f.readUInt32BE(o) >>> 20) & 0xff;
  }
  const k = x.segments.length;
  const entries = x.srh !== 'reduced' && (k > 0 || x.srh === 'always') ? k + 1 : k;
  const srhLen = entries ? 8 + 16 * entries : 0;
  const nh = x.ue.family === 4 ? 4 : 41;
  const out = Buffer.alloc(ETH_HLEN + 40 + srhLen + inner.length);
  f.copy(out, 0, 6, 12);
  f.copy(out, 6, 0, 6);
  out.writeUInt16BE(0x86dd, 12);
  const h = innerHash(inner, cfg.settings.hashSeed);
  out.writeUInt32BE(((6 << 28) | (tc << 20) | (h & 0xfffff)) >>> 0, 14);
  out.writeUInt16BE(srhLen + inner.length, 18);
  out[20] = entries ? 43 : nh;
  out[21] = x.hopLimit;
  ipv6ToBytes(encodeGtp4Src(x.srcPrefix, x.source)).copy(out, 22);
  const b = encodeGtp4Sid(x.isd, x.endpoint, { qfi: mkQfi(x.qfi), r: x.rqi, u: false, teid: mkTeid(x.teid) });
  const s1 = x.segments[0];
  ipv6ToBytes(entries && s1 !== undefined ? s1 : b).copy(out, 38);
  const layout: [number, string][] = [
    [0, 'eth dst'],
    [6, 'eth src'],
    [12, 'ethertype'],
    [14, 'ipv6 version/tc/flow label'],
    [18, 'ipv6 payload length'],
    [20, 'ipv6 next header'],
    [21, 'ipv6 hop limit'],
    [22, 'ipv6 SA'],
    [38, 'ipv6 DA'],
  ];
  if (entries) {
    const p = 54;
    out[p] = nh;
    out[p + 1] = 2 * entries;
    out[p + 2] = 4;
    out[p + 3] = k;
    out[p + 4] = entries - 1;
    const list: Ipv6Addr[] = [b, ...[...x.segments].reverse()].slice(0, entries);
    list.forEach((a, i) => ipv6ToBytes(a).copy(out, p + 8 + 16 * i));
    layout.push([p, 'srh']);
    list.forEach((_, i) => layout.push([p + 8 + 16 * i, `srh segment list[${i}]`]));
  }
  inner.copy(out, ETH_HLEN + 40 + srhLen);
  layout.push([ETH_HLEN + 40 + srhLen, 'inner packet']);
  return { kind: 'translate', out, layout };
}

/** GTP extension types a receiver may skip knowing only their length. */
function gtpExtKnown(t: number): boolean {
  return t < 0x80 || [0x81, 0x82, 0x83, 0x84, 0x85, 0xc0].includes(t);
}

/**
 * A GTP-U message other than a G-PDU to a policy prefix (docs/datapath.md,
 * "GTP-U signalling"): a well-formed Echo Request is answered, anything
 * else is dropped.
 */
function modelSignalling4(f: Buffer, o: number, u: number, g: number, gtpLen: number): ModelResult {
  const type = f[g + 1]!;
  if (type !== 1) return { kind: 'malformed', why: `GTP-U message type ${type}: dropped by reason` };
  if (!(f[g]! & 0x02) || gtpLen < 4) return { kind: 'malformed', why: 'Echo Request without a sequence number' };
  const ies = g + 12;
  let pos = 4;
  if (pos < gtpLen && f[ies]! === 14) {
    if (pos + 2 > gtpLen) return { kind: 'malformed', why: 'Recovery IE cut short' };
    pos += 2;
  }
  if (pos < gtpLen) {
    const at = g + 8 + pos;
    if (f[at] !== 255 || pos + 3 > gtpLen) return { kind: 'malformed', why: 'Echo Request IE other than Recovery, Private Extension' };
    pos += 3 + f.readUInt16BE(at + 1);
  }
  if (pos !== gtpLen) return { kind: 'malformed', why: 'Echo Request IEs do not fill the message' };
  // TS 29.281 §7.2.2: back to the sender's address and port, from 2152.
  const src = f.readUInt32BE(o + 16);
  const dst = f.readUInt32BE(o + 12);
  const dport = f.readUInt16BE(u);
  const gtp = Buffer.from([0x32, 2, 0, 6, 0, 0, 0, 0, f[g + 8]!, f[g + 9]!, 0, 0, 14, 0]);
  const udp = Buffer.alloc(8);
  udp.writeUInt16BE(2152, 0);
  udp.writeUInt16BE(dport, 2);
  udp.writeUInt16BE(8 + gtp.length, 4);
  const pseudo = Buffer.alloc(12);
  pseudo.writeUInt32BE(src, 0);
  pseudo.writeUInt32BE(dst, 4);
  pseudo[9] = 17;
  pseudo.writeUInt16BE(8 + gtp.length, 10);
  const sum = ipv4Checksum(Buffer.concat([pseudo, udp, gtp]));
  udp.writeUInt16BE(sum === 0 ? 0xffff : sum, 6);
  const ip = ipv4Header({ src: ipv4Addr(src), dst: ipv4Addr(dst), proto: 17, payloadLen: 8 + gtp.length, ttl: 64, id: 0, frag: 0x4000 });
  const eth = Buffer.concat([f.subarray(6, 12), f.subarray(0, 6), Buffer.from([0x08, 0x00])]);
  return { kind: 'reply', out: Buffer.concat([eth, ip, udp, gtp]) };
}

/** H.M.GTP4.D: what an IPv4 frame must become. */
export function modelGtp4d(f: Buffer, cfg: Config): ModelResult {
  const o = ETH_HLEN;
  if (f.length < o + 20) return { kind: 'malformed', why: 'IPv4 header cut short' };
  const ver = f[o]! >> 4;
  const ihl = (f[o]! & 15) * 4;
  const tot = f.readUInt16BE(o + 2);
  if (ver !== 4) return { kind: 'malformed', why: `IPv4 version nibble ${ver}` };
  if (ihl < 20 || tot < ihl || o + tot > f.length) return { kind: 'malformed', why: `IHL ${ihl / 4}, total length ${tot}, frame ${f.length}` };
  if (f[o + 9] !== 17) return { kind: 'not-ours' };
  if (f.readUInt16BE(o + 6) & 0x3fff) return { kind: 'not-ours' };
  const u = o + ihl;
  if (ihl + 8 > tot) return { kind: 'malformed', why: 'UDP header cut short' };
  if (f.readUInt16BE(u + 2) !== 2152) return { kind: 'not-ours' };
  const da = f.readUInt32BE(o + 16);
  if (policyFor(cfg, da) === undefined) return { kind: 'not-ours' };
  const udpLen = f.readUInt16BE(u + 4);
  if (udpLen !== tot - ihl) return { kind: 'malformed', why: `UDP length ${udpLen} != IPv4 payload ${tot - ihl}` };
  const g = u + 8;
  if (udpLen < 16) return { kind: 'malformed', why: 'GTP-U header cut short' };
  const flags = f[g]!;
  if ((flags & 0xf0) !== 0x30) return { kind: 'not-ours' };
  const gtpLen = f.readUInt16BE(g + 2);
  if (gtpLen + 16 !== udpLen) return { kind: 'malformed', why: `GTP length ${gtpLen} != UDP length ${udpLen} - 16` };
  if (f[g + 1] !== 0xff) return modelSignalling4(f, o, u, g, gtpLen);
  const pol = policyFor(cfg, da, f.readUInt32BE(g + 4));
  if (pol === undefined) return { kind: 'malformed', why: 'G-PDU to an N3 address whose TEID no policy covers: dropped by reason' };
  const gtpEnd = g + 8 + gtpLen; // == 14 + tot
  let hdr = 8;
  let qfi = 0;
  let rqi = 0;
  if (flags & 7) {
    if (hdr + 4 > 8 + gtpLen) return { kind: 'malformed', why: 'GTP optional fields cut short' };
    let next = flags & 4 ? f[g + 11]! : 0;
    hdr += 4;
    for (let n = 0; next; n++) {
      if (n === 8) return { kind: 'malformed', why: 'more than 8 GTP extension headers' };
      if (hdr + 4 > 8 + gtpLen) return { kind: 'malformed', why: 'GTP extension cut short' };
      const p = g + hdr;
      const len = f[p]! * 4;
      if (len === 0) return { kind: 'malformed', why: 'GTP extension of length 0' };
      if (hdr + len > 8 + gtpLen) return { kind: 'malformed', why: 'GTP extension past the GTP length' };
      if (!gtpExtKnown(next)) return { kind: 'malformed', why: `unknown comprehension-required GTP extension 0x${next.toString(16)}` };
      if (next === 0x85) {
        qfi = f[p + 2]! & 0x3f;
        rqi = f[p + 1]! >> 4 === 0 ? (f[p + 2]! >> 6) & 1 : 0;
      }
      next = f[p + len - 1]!;
      hdr += len;
    }
  }
  const inner = f.subarray(g + hdr, gtpEnd);
  if (inner.length < 1) return { kind: 'malformed', why: 'no inner packet' };
  const iv = inner[0]! >> 4;
  if (iv !== 4 && iv !== 6) return { kind: 'malformed', why: `inner version ${iv}` };
  if (inner.length < (iv === 4 ? 20 : 40)) return { kind: 'malformed', why: 'inner IP header cut short' };

  const k = pol.segments.length;
  const entries = pol.srh !== 'reduced' && (k > 0 || pol.srh === 'always') ? k + 1 : k;
  const srhLen = entries ? 8 + 16 * entries : 0;
  const out = Buffer.alloc(ETH_HLEN + 40 + srhLen + inner.length);
  f.copy(out, 0, 6, 12);
  f.copy(out, 6, 0, 6);
  out.writeUInt16BE(0x86dd, 12);
  const h = innerHash(inner, cfg.settings.hashSeed);
  out.writeUInt32BE(((6 << 28) | (f[o + 1]! << 20) | (h & 0xfffff)) >>> 0, 14);
  out.writeUInt16BE(srhLen + inner.length, 18);
  out[20] = entries ? 43 : iv === 4 ? 4 : 41;
  out[21] = pol.hopLimit;
  const sa = encodeGtp4Src(pol.srcPrefix, ipv4Addr(f.readUInt32BE(o + 12)));
  ipv6ToBytes(sa).copy(out, 22);
  const teid = f.readUInt32BE(g + 4);
  // A plain last SID is used as is (no DA, no Args).
  const b = pol.sid ?? encodeGtp4Sid(pol.srPrefix, ipv4Addr(da), { qfi: mkQfi(qfi), r: rqi === 1, u: false, teid: mkTeid(teid) });
  const s1 = pol.segments[0];
  ipv6ToBytes(entries && s1 !== undefined ? s1 : b).copy(out, 38);
  const layout: [number, string][] = [
    [0, 'eth dst'],
    [6, 'eth src'],
    [12, 'ethertype'],
    [14, 'ipv6 version/tc/flow label'],
    [18, 'ipv6 payload length'],
    [20, 'ipv6 next header'],
    [21, 'ipv6 hop limit'],
    [22, 'ipv6 SA'],
    [38, 'ipv6 DA'],
  ];
  if (entries) {
    const s = 54;
    out[s] = iv === 4 ? 4 : 41;
    out[s + 1] = 2 * entries;
    out[s + 2] = 4;
    out[s + 3] = k;
    out[s + 4] = entries - 1;
    const list: Ipv6Addr[] = [b, ...[...pol.segments].reverse()].slice(0, entries);
    list.forEach((a, i) => ipv6ToBytes(a).copy(out, s + 8 + 16 * i));
    layout.push([s, 'srh next header'], [s + 1, 'srh hdr ext len'], [s + 2, 'srh type'], [s + 3, 'srh segments left'], [s + 4, 'srh last entry'], [s + 5, 'srh flags/tag']);
    list.forEach((_, i) => layout.push([s + 8 + 16 * i, `srh segment list[${i}]`]));
  }
  inner.copy(out, ETH_HLEN + 40 + srhLen);
  layout.push([ETH_HLEN + 40 + srhLen, 'inner packet']);
  return { kind: 'translate', out, layout };
}

/** End.M.GTP4.E: what an IPv6 frame must become. */
export function modelGtp4e(f: Buffer, cfg: Config): ModelResult {
  const o = ETH_HLEN;
  if (f.length < o + 40) return { kind: 'malformed', why: 'IPv6 header cut short' };
  const da = ipv6FromBytes(f, o + 24);
  const ls = localSidFor(cfg, da);
  if (ls === undefined) return { kind: 'not-ours' };
  const pl = f.readUInt16BE(o + 4);
  if (o + 40 + pl > f.length) return { kind: 'malformed', why: `payload length ${pl} past the frame` };
  let nh = f[o + 6]!;
  let off = 0;
  for (let n = 0; nh === 0 || nh === 60 || nh === 43; n++) {
    if (n === 4) return { kind: 'malformed', why: 'more than 4 extension headers' };
    if (nh === 0 && n > 0) return { kind: 'malformed', why: 'Hop-by-Hop not first' };
    const p = o + 40 + off;
    if (off + 8 > pl) return { kind: 'malformed', why: 'extension header cut short' };
    const len = (f[p + 1]! + 1) * 8;
    if (off + len > pl) return { kind: 'malformed', why: 'extension header past the payload length' };
    // RFC 8200 §4.4: an unknown routing type with Segments Left 0 is ignored.
    if (nh === 43 && f[p + 2] !== 4 && f[p + 3] !== 0) return { kind: 'malformed', why: `routing type ${f[p + 2]}` };
    if (nh === 43 && f[p + 3] !== 0) return { kind: 'malformed', why: `segments left ${f[p + 3]}` };
    nh = f[p]!;
    off += len;
  }
  if (f[o + 7]! <= 1) return { kind: 'malformed', why: `hop limit ${f[o + 7]}` };
  if (nh !== 4 && nh !== 41) return { kind: 'malformed', why: `inner next header ${nh}` };
  const inner = f.subarray(o + 40 + off, o + 40 + pl);
  if (inner.length < 1) return { kind: 'malformed', why: 'no inner packet' };
  const iv = inner[0]! >> 4;
  if (iv !== (nh === 4 ? 4 : 6)) return { kind: 'malformed', why: `next header ${nh} but inner version ${iv}` };
  if (inner.length < (iv === 4 ? 20 : 40)) return { kind: 'malformed', why: 'inner IP header cut short' };

  // docs/datapath.md checks no IPv6 version; the kernel drops version != 6.
  const v6 = f[o]! >> 4;
  const doubt = v6 === 6 ? undefined : 'translated an IPv6 header whose version nibble is not 6';
  const { ipv4Da, args } = decodeGtp4Sid(da, ls.sid.len);
  const sa4 = decodeGtp4Src(ipv6FromBytes(f, o + 8), ls.srcPrefixLen);
  const psc = ls.container === 'always' || (ls.container === 'auto' && (args.qfi !== 0 || args.r));
  const hdr = psc ? 44 : 36;
  const tot = hdr + inner.length;
  const tos = (f.readUInt32BE(o) >>> 20) & 0xff;
  const out = Buffer.alloc(ETH_HLEN + tot);
  f.copy(out, 0, 6, 12);
  f.copy(out, 6, 0, 6);
  out.writeUInt16BE(0x0800, 12);
  const ip = ETH_HLEN;
  out[ip] = 0x45;
  out[ip + 1] = tos;
  out.writeUInt16BE(tot, ip + 2);
  out.writeUInt16BE(0x4000, ip + 6);
  out[ip + 8] = ls.ttl;
  out[ip + 9] = 17;
  out.writeUInt32BE(sa4, ip + 12);
  out.writeUInt32BE(ipv4Da, ip + 16);
  out.writeUInt16BE(ipv4Checksum(out, ip, ip + 20), ip + 10);
  const s = cfg.settings;
  const span = s.sourcePortMax - s.sourcePortMin + 1;
  const sport = s.sourcePortMin + Math.floor((innerHash(inner, s.hashSeed) * span) / 4294967296);
  out.writeUInt16BE(sport, ip + 20);
  out.writeUInt16BE(2152, ip + 22);
  out.writeUInt16BE(tot - 20, ip + 24);
  const g = ip + 28;
  out[g] = psc ? 0x34 : 0x30;
  out[g + 1] = 0xff;
  out.writeUInt16BE(tot - 36, g + 2);
  out.writeUInt32BE(args.teid, g + 4);
  if (psc) {
    out[g + 11] = 0x85;
    out[g + 12] = 1;
    out[g + 14] = ((args.r ? 1 : 0) << 6) | args.qfi;
  }
  inner.copy(out, ip + hdr);
  const layout: [number, string][] = [
    [0, 'eth dst'],
    [6, 'eth src'],
    [12, 'ethertype'],
    [14, 'ipv4 version/ihl'],
    [15, 'ipv4 tos'],
    [16, 'ipv4 total length'],
    [18, 'ipv4 id'],
    [20, 'ipv4 flags/fragment'],
    [22, 'ipv4 ttl'],
    [23, 'ipv4 protocol'],
    [24, 'ipv4 checksum'],
    [26, 'ipv4 SA'],
    [30, 'ipv4 DA'],
    [34, 'udp source port'],
    [36, 'udp destination port'],
    [38, 'udp length'],
    [40, 'udp checksum'],
    [42, 'gtp flags'],
    [43, 'gtp type'],
    [44, 'gtp length'],
    [46, 'gtp teid'],
  ];
  if (psc) layout.push([50, 'gtp optional fields'], [54, 'pdu session container']);
  layout.push([ip + hdr, 'inner packet']);
  return { kind: 'translate', out, layout, ...(doubt === undefined ? {} : { doubt }) };
}

// ---------------------------------------------------------------------------
// GTP-U over IPv6 (docs/datapath.md "GTP-U over IPv6")

/** Ones-complement sum of b[from, to) as big-endian 16-bit words, folded. */
function sum16(b: Buffer, from: number, to: number, start = 0): number {
  let s = start;
  for (let i = from; i < to; i += 2) s += (b[i]! << 8) | (i + 1 < to ? b[i + 1]! : 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

/** The UDP checksum over IPv6 of the frame's UDP header at u (IPv6 header at 14), written in place. */
function setUdp6Checksum(out: Buffer, u: number): void {
  const len = out.readUInt16BE(u + 4);
  out.writeUInt16BE(0, u + 6);
  const c = ~sum16(out, u, u + len, sum16(out, ETH_HLEN + 8, ETH_HLEN + 40, len + 17)) & 0xffff;
  out.writeUInt16BE(c === 0 ? 0xffff : c, u + 6);
}

/**
 * End.M.GTP6.E's sum of the inner packet for the outer UDP checksum, derived
 * from the inner packet's own checksums (docs/datapath.md, "UDP checksum of
 * End.M.GTP6.E"; bpf/csum.h csum_inner_derived): the header's words plus
 * -sum(pseudo header) for TCP, UDP and ICMPv6, plus nothing for ICMPv4.
 * null when the rule does not apply and the program sums the bytes. Equal to
 * sum16 of the bytes (mod 0xffff) when the inner L4 checksum is right.
 */
export function gtp6eDerivedInnerSum(inner: Buffer): number | null {
  const len = inner.length;
  if (len < 1) return null;
  let hdr: number;
  let ps: number;
  let proto: number;
  let l4: number;
  if (inner[0]! >> 4 === 4) {
    if (len < 20 || inner[0] !== 0x45 || inner.readUInt16BE(2) !== len || (inner.readUInt16BE(6) & 0x3fff) !== 0) return null;
    hdr = sum16(inner, 0, 20);
    ps = sum16(inner, 12, 20);
    proto = inner[9]!;
    l4 = 20;
    if (proto === 1) return len - l4 >= 8 ? hdr : null;
    if (proto !== 6 && proto !== 17) return null;
  } else {
    if (len < 40 || inner.readUInt16BE(4) + 40 !== len) return null;
    hdr = sum16(inner, 0, 40);
    ps = sum16(inner, 8, 40);
    proto = inner[6]!;
    l4 = 40;
    if (proto !== 6 && proto !== 17 && proto !== 58) return null;
  }
  const l4len = len - l4;
  let c: number;
  if (proto === 6) {
    if (l4len < 20) return null;
    c = inner.readUInt16BE(l4 + 16);
  } else if (proto === 17) {
    if (l4len < 8 || inner.readUInt16BE(l4 + 4) !== l4len) return null;
    c = inner.readUInt16BE(l4 + 6);
    if (c === 0) return null;
  } else {
    if (l4len < 8) return null;
    c = inner.readUInt16BE(l4 + 2);
  }
  const pf = sum16(Buffer.alloc(0), 0, 0, ps + l4len + proto); // 1..0xffff
  if (c === pf) return null; // a checksum offload's pseudo-header sum
  return sum16(Buffer.alloc(0), 0, 0, hdr + (0xffff - pf));
}

/**
 * The UDP checksum End.M.GTP6.E writes into the GTP-U/IPv6 frame `out` (UDP
 * header at u, inner packet at `inner`): the sum of pseudo header, UDP and
 * GTP-U headers, and the inner packet's derived sum when the rule applies,
 * its bytes otherwise. Written in place.
 */
function setGtp6eChecksum(out: Buffer, u: number, inner: number): void {
  const len = out.readUInt16BE(u + 4);
  out.writeUInt16BE(0, u + 6);
  const c = ~gtp6eSum(out, u, inner, len) & 0xffff;
  out.writeUInt16BE(c === 0 ? 0xffff : c, u + 6);
}

/**
 * A UDP-over-IPv6 frame (IPv6 header at 14, UDP right after it) whose UDP
 * checksum is what we send: End.M.GTP6.E's rule for a G-PDU (flags 0x30 or
 * 0x34, as it writes them), the plain sum over the bytes otherwise (Echo
 * Responses).
 */
export function udp6ChecksumOk(f: Buffer): boolean {
  const u = ETH_HLEN + 40;
  if (f.length < u + 8) return false;
  const len = f.readUInt16BE(ETH_HLEN + 4);
  if (u + len > f.length || len < 8) return false;
  const fl = f[u + 8];
  const inner = u + 8 + (fl === 0x34 ? 16 : 8);
  if (len >= 16 && (fl === 0x30 || fl === 0x34) && f[u + 9] === 0xff && inner <= u + len) return gtp6eSum(f, u, inner, len) === 0xffff;
  return sum16(f, u, u + len, sum16(f, ETH_HLEN + 8, ETH_HLEN + 40, len + 17)) === 0xffff;
}

/** Pseudo header + UDP/GTP-U headers + the inner packet as End.M.GTP6.E sums it, folded. */
export function gtp6eSum(f: Buffer, u: number, inner: number, len: number): number {
  const hdrs = sum16(f, u, inner, sum16(f, ETH_HLEN + 8, ETH_HLEN + 40, len + 17));
  const derived = gtp6eDerivedInnerSum(f.subarray(inner, u + len));
  return derived === null ? sum16(f, inner, u + len, hdrs) : sum16(Buffer.alloc(0), 0, 0, hdrs + derived);
}

type Walk = { readonly off: number; readonly nh: number; readonly srh: number } | { readonly why: string };

/** The extension headers End.M.GTP4.E/GTP6.* accept (srh = offset of the first SRH or -1). */
function walk6(f: Buffer, pl: number, wantSl: number): Walk {
  const o = ETH_HLEN;
  let nh = f[o + 6]!;
  let off = 0;
  let first = -1;
  for (let n = 0; nh === 0 || nh === 60 || nh === 43; n++) {
    if (n === 4) return { why: 'more than 4 extension headers' };
    if (nh === 0 && n > 0) return { why: 'Hop-by-Hop not first' };
    const p = o + 40 + off;
    if (off + 8 > pl) return { why: 'extension header cut short' };
    const len = (f[p + 1]! + 1) * 8;
    if (off + len > pl) return { why: 'extension header past the payload length' };
    // RFC 8200 §4.4: an unknown routing type with Segments Left 0 is ignored (not an SRH).
    if (nh === 43 && f[p + 2] !== 4 && f[p + 3] !== 0) return { why: `routing type ${f[p + 2]}` };
    if (nh === 43 && f[p + 2] === 4 && f[p + 3] !== wantSl) return { why: `segments left ${f[p + 3]}` };
    if (nh === 43 && f[p + 2] === 4 && first < 0) first = off;
    nh = f[p]!;
    off += len;
  }
  return { off, nh, srh: first };
}

function innerOk(inner: Buffer, want: number): string | null {
  if (inner.length < 1) return 'no inner packet';
  const iv = inner[0]! >> 4;
  if (iv !== 4 && iv !== 6) return `inner version ${iv}`;
  if (want && iv !== want) return `inner version ${iv}, next header says ${want}`;
  if (inner.length < (iv === 4 ? 20 : 40)) return 'inner IP header cut short';
  return null;
}

/** End.M.GTP6.E: SRv6 (SL 1) to the SID becomes GTP-U/IPv6 to SRH[0]. */
function modelGtp6e(f: Buffer, cfg: Config, ls: LocalSid, da: Ipv6Addr): ModelResult {
  const o = ETH_HLEN;
  if (f[o]! >> 4 !== 6) return { kind: 'malformed', why: 'IPv6 version' };
  const pl = f.readUInt16BE(o + 4);
  if (o + 40 + pl > f.length) return { kind: 'malformed', why: `payload length ${pl} past the frame` };
  const w = walk6(f, pl, 1);
  if ('why' in w) return { kind: 'malformed', why: w.why };
  if (w.srh < 0) return { kind: 'malformed', why: 'no SRH' };
  const sp = o + 40 + w.srh;
  if (f[sp + 1]! < 2) return { kind: 'malformed', why: 'SRH without segments' };
  if (f[o + 7]! <= 1) return { kind: 'malformed', why: `hop limit ${f[o + 7]}` };
  if (w.nh !== 4 && w.nh !== 41) return { kind: 'malformed', why: `inner next header ${w.nh}` };
  const inner = f.subarray(o + 40 + w.off, o + 40 + pl);
  const bad = innerOk(inner, w.nh === 4 ? 4 : 6);
  if (bad !== null) return { kind: 'malformed', why: bad };
  const args = decodeGtp6Sid(da, ls.sid.len);
  const psc = ls.container === 'always' || (ls.container === 'auto' && (args.qfi !== 0 || args.r));
  const udpLen = 8 + (psc ? 16 : 8) + inner.length;
  const out = Buffer.alloc(ETH_HLEN + 40 + udpLen);
  f.copy(out, 0, 6, 12);
  f.copy(out, 6, 0, 6);
  out.writeUInt16BE(0x86dd, 12);
  const s = cfg.settings;
  const h = innerHash(inner, s.hashSeed);
  out.writeUInt32BE(((6 << 28) | (((f.readUInt32BE(o) >>> 20) & 0xff) << 20) | (h & 0xfffff)) >>> 0, 14);
  out.writeUInt16BE(udpLen, 18);
  out[20] = 17;
  out[21] = ls.ttl;
  ipv6ToBytes(ls.source!).copy(out, 22);
  f.copy(out, 38, sp + 8, sp + 24); // SRH[0]: the gNB
  const u = ETH_HLEN + 40;
  const span = s.sourcePortMax - s.sourcePortMin + 1;
  out.writeUInt16BE(s.sourcePortMin + Math.floor((h * span) / 4294967296), u);
  out.writeUInt16BE(2152, u + 2);
  out.writeUInt16BE(udpLen, u + 4);
  const g = u + 8;
  out[g] = psc ? 0x34 : 0x30;
  out[g + 1] = 0xff;
  out.writeUInt16BE(udpLen - 16, g + 2);
  out.writeUInt32BE(args.teid, g + 4);
  if (psc) {
    out[g + 11] = 0x85;
    out[g + 12] = 1;
    out[g + 14] = ((args.r ? 1 : 0) << 6) | args.qfi;
  }
  inner.copy(out, g + (psc ? 16 : 8));
  setGtp6eChecksum(out, u, g + (psc ? 16 : 8));
  const layout: [number, string][] = [
    [0, 'eth'], [14, 'ipv6 version/tc/flow label'], [18, 'ipv6 payload length'], [20, 'ipv6 next header'], [21, 'ipv6 hop limit'],
    [22, 'ipv6 SA'], [38, 'ipv6 DA'], [u, 'udp source port'], [u + 2, 'udp destination port'], [u + 4, 'udp length'],
    [u + 6, 'udp checksum'], [g, 'gtp header'], [g + (psc ? 16 : 8), 'inner packet'],
  ];
  return { kind: 'translate', out, layout };
}

/** An Echo Request to an End.M.GTP6.D SID: answered (docs/datapath.md, "GTP-U signalling"). */
function modelSignalling6(f: Buffer, u: number, g: number, gtpLen: number): ModelResult {
  const type = f[g + 1]!;
  if (type !== 1) return { kind: 'malformed', why: `GTP-U message type ${type}: dropped by reason` };
  if (!(f[g]! & 0x02) || gtpLen < 4) return { kind: 'malformed', why: 'Echo Request without a sequence number' };
  let pos = 4;
  if (pos < gtpLen && f[g + 12] === 14) {
    if (pos + 2 > gtpLen) return { kind: 'malformed', why: 'Recovery IE cut short' };
    pos += 2;
  }
  if (pos < gtpLen) {
    const at = g + 8 + pos;
    if (f[at] !== 255 || pos + 3 > gtpLen) return { kind: 'malformed', why: 'Echo Request IE other than Recovery, Private Extension' };
    pos += 3 + f.readUInt16BE(at + 1);
  }
  if (pos !== gtpLen) return { kind: 'malformed', why: 'Echo Request IEs do not fill the message' };
  const out = Buffer.alloc(ETH_HLEN + 40 + 22);
  f.copy(out, 0, 6, 12);
  f.copy(out, 6, 0, 6);
  out.writeUInt16BE(0x86dd, 12);
  out.writeUInt32BE(0x60000000, 14);
  out.writeUInt16BE(22, 18);
  out[20] = 17;
  out[21] = 64;
  f.copy(out, 22, ETH_HLEN + 24, ETH_HLEN + 40);
  f.copy(out, 38, ETH_HLEN + 8, ETH_HLEN + 24);
  const r = ETH_HLEN + 40;
  out.writeUInt16BE(2152, r);
  out.writeUInt16BE(f.readUInt16BE(u), r + 2);
  out.writeUInt16BE(22, r + 4);
  Buffer.from([0x32, 2, 0, 6, 0, 0, 0, 0, f[g + 8]!, f[g + 9]!, 0, 0, 14, 0]).copy(out, r + 8);
  setUdp6Checksum(out, r);
  return { kind: 'reply', out };
}

/** End.M.GTP6.D / .D.Di: GTP-U/IPv6 to the SID becomes SRv6. */
function modelGtp6d(f: Buffer, cfg: Config, ls: LocalSid, da: Ipv6Addr): ModelResult {
  const o = ETH_HLEN;
  if (f[o]! >> 4 !== 6) return { kind: 'malformed', why: 'IPv6 version' };
  const pl = f.readUInt16BE(o + 4);
  if (o + 40 + pl > f.length) return { kind: 'malformed', why: `payload length ${pl} past the frame` };
  const w = walk6(f, pl, 0);
  if ('why' in w) return { kind: 'malformed', why: w.why };
  if (w.nh !== 17) return { kind: 'malformed', why: `next header ${w.nh}, not UDP` };
  const u = o + 40 + w.off;
  if (w.off + 8 > pl) return { kind: 'malformed', why: 'UDP header cut short' };
  if (f.readUInt16BE(u + 2) !== 2152) return { kind: 'malformed', why: 'UDP not to port 2152' };
  const udpLen = f.readUInt16BE(u + 4);
  if (udpLen !== pl - w.off) return { kind: 'malformed', why: `UDP length ${udpLen} != ${pl - w.off}` };
  const g = u + 8;
  if (udpLen < 16) return { kind: 'malformed', why: 'GTP-U header cut short' };
  const flags = f[g]!;
  if ((flags & 0xf0) !== 0x30) return { kind: 'not-ours' };
  const gtpLen = f.readUInt16BE(g + 2);
  if (gtpLen + 16 !== udpLen) return { kind: 'malformed', why: `GTP length ${gtpLen} != UDP length ${udpLen} - 16` };
  if (f[g + 1] !== 0xff) return modelSignalling6(f, u, g, gtpLen);
  // RFC 8200 §8.1: over IPv6 a zero UDP checksum is discarded (a non-zero one is not verified).
  if (f.readUInt16BE(u + 6) === 0) return { kind: 'malformed', why: 'UDP checksum 0 over IPv6' };
  let hdr = 8;
  let qfi = 0;
  let rqi = 0;
  if (flags & 7) {
    if (hdr + 4 > 8 + gtpLen) return { kind: 'malformed', why: 'GTP optional fields cut short' };
    let next = flags & 4 ? f[g + 11]! : 0;
    hdr += 4;
    for (let n = 0; next; n++) {
      if (n === 8) return { kind: 'malformed', why: 'more than 8 GTP extension headers' };
      if (hdr + 4 > 8 + gtpLen) return { kind: 'malformed', why: 'GTP extension cut short' };
      const p = g + hdr;
      const len = f[p]! * 4;
      if (len === 0) return { kind: 'malformed', why: 'GTP extension of length 0' };
      if (hdr + len > 8 + gtpLen) return { kind: 'malformed', why: 'GTP extension past the GTP length' };
      if (!gtpExtKnown(next)) return { kind: 'malformed', why: `unknown comprehension-required GTP extension 0x${next.toString(16)}` };
      if (next === 0x85) {
        qfi = f[p + 2]! & 0x3f;
        rqi = f[p + 1]! >> 4 === 0 ? (f[p + 2]! >> 6) & 1 : 0;
      }
      next = f[p + len - 1]!;
      hdr += len;
    }
  }
  const inner = f.subarray(g + hdr, g + 8 + gtpLen);
  const bad = innerOk(inner, 0);
  if (bad !== null) return { kind: 'malformed', why: bad };
  const iv = inner[0]! >> 4;
  const b = encodeGtp6Sid(ls.srPrefix!, { qfi: mkQfi(qfi), r: rqi === 1, u: false, teid: mkTeid(f.readUInt32BE(g + 4)) });
  const path: Ipv6Addr[] = [...(ls.segments ?? []), b, ...(ls.behavior === 'end.m.gtp6.d.di' ? [da] : [])];
  const n = path.length;
  const entries = ls.srh === 'reduced' ? n - 1 : ls.srh !== 'always' && n === 1 ? 0 : n;
  const srhLen = entries ? 8 + 16 * entries : 0;
  const out = Buffer.alloc(ETH_HLEN + 40 + srhLen + inner.length);
  f.copy(out, 0, 6, 12);
  f.copy(out, 6, 0, 6);
  out.writeUInt16BE(0x86dd, 12);
  const h = innerHash(inner, cfg.settings.hashSeed);
  out.writeUInt32BE(((6 << 28) | (((f.readUInt32BE(o) >>> 20) & 0xff) << 20) | (h & 0xfffff)) >>> 0, 14);
  out.writeUInt16BE(srhLen + inner.length, 18);
  out[20] = entries ? 43 : iv === 4 ? 4 : 41;
  out[21] = ls.ttl;
  ipv6ToBytes(ls.source!).copy(out, 22);
  ipv6ToBytes(path[0]!).copy(out, 38);
  const layout: [number, string][] = [
    [0, 'eth'], [14, 'ipv6 version/tc/flow label'], [18, 'ipv6 payload length'], [20, 'ipv6 next header'], [21, 'ipv6 hop limit'],
    [22, 'ipv6 SA'], [38, 'ipv6 DA'],
  ];
  if (entries) {
    const sp = 54;
    out[sp] = iv === 4 ? 4 : 41;
    out[sp + 1] = 2 * entries;
    out[sp + 2] = 4;
    out[sp + 3] = n - 1;
    out[sp + 4] = entries - 1;
    [...path].reverse().slice(0, entries).forEach((a, i) => ipv6ToBytes(a).copy(out, sp + 8 + 16 * i));
    layout.push([sp, 'srh header'], [sp + 8, 'srh segment list']);
  }
  inner.copy(out, ETH_HLEN + 40 + srhLen);
  layout.push([ETH_HLEN + 40 + srhLen, 'inner packet']);
  return { kind: 'translate', out, layout };
}

export function model(f: Buffer, cfg: Config): ModelResult {
  if (f.length < ETH_HLEN) return { kind: 'not-ours' };
  const t = f.readUInt16BE(12);
  // Precedence (docs/design.md): a local SID, then GTP-U to a policy, then a session's UE prefix.
  if (t === 0x0800) {
    if (f.length >= ETH_HLEN + 20) {
      const o = ETH_HLEN;
      const da = f.readUInt32BE(o + 16);
      const x = sessionFor4(cfg, da);
      if (x !== undefined) {
        const u = o + (f[o]! & 15) * 4;
        const gtpuToPolicy =
          f[o + 9] === 17 && (f.readUInt16BE(o + 6) & 0x1fff) === 0 && u + 8 <= f.length && f.readUInt16BE(u + 2) === 2152 && policyFor(cfg, da) !== undefined;
        if (!gtpuToPolicy) return modelSession(f, cfg, x);
      }
    }
    return modelGtp4d(f, cfg);
  }
  if (t === 0x86dd) {
    if (f.length >= ETH_HLEN + 40) {
      const da = ipv6FromBytes(f, ETH_HLEN + 24);
      const ls = localSidFor(cfg, da);
      const x = ls === undefined ? sessionFor6(cfg, da) : undefined;
      if (x !== undefined) return modelSession(f, cfg, x);
      if (ls?.behavior === 'end.m.gtp6.e') return modelGtp6e(f, cfg, ls, da);
      if (ls?.behavior === 'end.m.gtp6.d' || ls?.behavior === 'end.m.gtp6.d.di') return modelGtp6d(f, cfg, ls, da);
    }
    return modelGtp4e(f, cfg);
  }
  return { kind: 'not-ours' };
}
