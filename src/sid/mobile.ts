/**
 * RFC 9433 encodings for GTP-U over IPv4 (spec §1, RFC 9433 §6.1 and
 * figures 9 and 10). An IPv6 address is a 128-bit big-endian integer:
 *
 *   args40 = QFI << 34 | R << 33 | U << 32 | TEID
 *   SID  B  = (sr_prefix & mask(L)) | IPv4DA << (96 - L) | args40 << (56 - L)   L <= 56
 *   SA   B' = (src_prefix & mask(P)) | IPv4SA << (96 - P)                       P <= 96
 */
import { ipv4Addr, mask6 } from './addr.js';
import type { Ipv4Addr, Ipv6Addr, Ipv6Prefix, MobArgs, Qfi, Teid } from './types.js';

/** Width of Args.Mob.Session. */
export const ARGS_MOB_SESSION_BITS = 40;
/** Longest SID prefix L: L + 32 (IPv4 DA) + 40 (Args.Mob.Session) <= 128. */
export const MAX_SID_PREFIX_LEN = 128 - 32 - ARGS_MOB_SESSION_BITS; // 56
/** Longest source prefix P: P + 32 (IPv4 SA) <= 128. */
export const MAX_SRC_PREFIX_LEN = 128 - 32; // 96

const ARGS_MASK = (1n << 40n) - 1n;
const U32_MASK = 0xffff_ffffn;

/** A GTP-U TEID: unsigned 32-bit. */
export function teid(n: number): Teid {
  if (!Number.isInteger(n) || n < 0 || n > 0xffff_ffff) {
    throw new RangeError(`TEID must be an integer in 0..0xffffffff, got ${n}`);
  }
  return n as Teid;
}

/** A QoS Flow Identifier: 0..63. */
export function qfi(n: number): Qfi {
  if (!Number.isInteger(n) || n < 0 || n > 63) {
    throw new RangeError(`QFI must be an integer in 0..63, got ${n}`);
  }
  return n as Qfi;
}

/** Args.Mob.Session as a 40-bit number: QFI(6) R(1) U(1) TEID(32). */
export function encodeArgs(args: MobArgs): bigint {
  const q = BigInt(qfi(args.qfi));
  const t = BigInt(teid(args.teid));
  return (q << 34n) | (BigInt(args.r) << 33n) | (BigInt(args.u) << 32n) | t;
}

/** Inverse of {@link encodeArgs}; `v` must fit in 40 bits. */
export function decodeArgs(v: bigint): MobArgs {
  if (v < 0n || v > ARGS_MASK) {
    throw new RangeError(`Args.Mob.Session must fit in 40 bits, got 0x${v.toString(16)}`);
  }
  return {
    qfi: Number((v >> 34n) & 0x3fn) as Qfi,
    r: ((v >> 33n) & 1n) === 1n,
    u: ((v >> 32n) & 1n) === 1n,
    teid: Number(v & U32_MASK) as Teid,
  };
}

function checkL(len: number): void {
  if (!Number.isInteger(len) || len < 0 || len > MAX_SID_PREFIX_LEN) {
    throw new RangeError(
      `SID prefix length must be 0..${MAX_SID_PREFIX_LEN} (L + 32-bit IPv4 DA + 40-bit Args.Mob.Session must fit in 128 bits), got ${len}`,
    );
  }
}

function checkP(len: number): void {
  if (!Number.isInteger(len) || len < 0 || len > MAX_SRC_PREFIX_LEN) {
    throw new RangeError(
      `source prefix length must be 0..${MAX_SRC_PREFIX_LEN} (P + 32-bit IPv4 SA must fit in 128 bits), got ${len}`,
    );
  }
}

/** H.M.GTP4.D last SID B = sr_prefix | IPv4 DA | Args.Mob.Session | 0 padding. */
export function encodeGtp4Sid(srPrefix: Ipv6Prefix, ipv4Da: Ipv4Addr, args: MobArgs): Ipv6Addr {
  const L = srPrefix.len;
  checkL(L);
  const prefix = mask6(srPrefix.addr, L); // never trust host bits
  const da = BigInt(ipv4Addr(ipv4Da));
  return (prefix | (da << BigInt(96 - L)) | (encodeArgs(args) << BigInt(56 - L))) as Ipv6Addr;
}

/** What End.M.GTP4.E reads from a SID of prefix length L. */
export interface Gtp4Sid {
  readonly ipv4Da: Ipv4Addr;
  readonly args: MobArgs;
}

/** Inverse of {@link encodeGtp4Sid} for a SID prefix of length L (the padding is ignored). */
export function decodeGtp4Sid(sid: Ipv6Addr, L: number): Gtp4Sid {
  checkL(L);
  return {
    ipv4Da: Number((sid >> BigInt(96 - L)) & U32_MASK) as Ipv4Addr,
    args: decodeArgs((sid >> BigInt(56 - L)) & ARGS_MASK),
  };
}

/** H.M.GTP4.D IPv6 source B' = src_prefix | IPv4 SA | 0. */
export function encodeGtp4Src(srcPrefix: Ipv6Prefix, ipv4Sa: Ipv4Addr): Ipv6Addr {
  const P = srcPrefix.len;
  checkP(P);
  const prefix = mask6(srcPrefix.addr, P);
  return (prefix | (BigInt(ipv4Addr(ipv4Sa)) << BigInt(96 - P))) as Ipv6Addr;
}

/** End.M.GTP4.E: the IPv4 SA at bits [P, P+32) of the IPv6 SA; P comes from local config. */
export function decodeGtp4Src(sa: Ipv6Addr, P: number): Ipv4Addr {
  checkP(P);
  return Number((sa >> BigInt(96 - P)) & U32_MASK) as Ipv4Addr;
}

// ---------------------------------------------------------------------------
// GTP-U over IPv6 (RFC 9433 §6.3-6.5): no IPv4 address in the SID, so
// Args.Mob.Session follows the L-bit prefix directly.
//
//   SID = (prefix & mask(L)) | args40 << (88 - L)      L <= 88

/** Longest GTP6 SID prefix L: L + 40 (Args.Mob.Session) <= 128. */
export const MAX_GTP6_SID_PREFIX_LEN = 128 - ARGS_MOB_SESSION_BITS; // 88

function checkL6(len: number): void {
  if (!Number.isInteger(len) || len < 0 || len > MAX_GTP6_SID_PREFIX_LEN) {
    throw new RangeError(
      `GTP6 SID prefix length must be 0..${MAX_GTP6_SID_PREFIX_LEN} (L + 40-bit Args.Mob.Session must fit in 128 bits), got ${len}`,
    );
  }
}

/** End.M.GTP6.D last SID B, or an End.M.GTP6.E SID: prefix | Args.Mob.Session | 0 padding. */
export function encodeGtp6Sid(prefix: Ipv6Prefix, args: MobArgs): Ipv6Addr {
  const L = prefix.len;
  checkL6(L);
  return (mask6(prefix.addr, L) | (encodeArgs(args) << BigInt(88 - L))) as Ipv6Addr;
}

/** Inverse of {@link encodeGtp6Sid} for a prefix of length L (the padding is ignored). */
export function decodeGtp6Sid(sid: Ipv6Addr, L: number): MobArgs {
  checkL6(L);
  return decodeArgs((sid >> BigInt(88 - L)) & ARGS_MASK);
}
