/**
 * Byte layouts of the structs shared with the BPF program (bpf/mup_shared.h)
 * and their encoders/decoders. Every offset used below comes from LAYOUTS,
 * and src/dataplane/btf.ts checks LAYOUTS against the object's BTF before a
 * single byte is written, so the two sides cannot drift silently.
 *
 * Byte order: __u32/__u16/__u64 fields are host order (little-endian here)
 * except mup_policy_key.daddr and .teid, which are network order. Addresses
 * (__u8[16]) are network order by nature.
 */
import { MUP_EVENT_SLOTS, MUP_LIMITS, MUP_MAX_PLENS, MUP_MAX_SEGS, MUP_RETIRED_SLOT } from '../config/limits.js';
import { whereText } from '../config/keys.js';
import { PolicyRule } from '../config/rows.js';
import type { ContainerMode, ForwardingMode, LocalSid, LocalSidBehavior, Policy, Session, Settings, SrhMode, TeidPrefix } from '../config/types.js';
import { encodeGtp4Sid, encodeGtp4Src, MAX_SID_PREFIX_LEN, MAX_SRC_PREFIX_LEN, qfi, teid } from '../sid/mobile.js';
import { ipv4Addr, mask6 } from '../sid/addr.js';
import type { Ipv4Addr, Teid, Qfi } from '../sid/types.js';
import type { Ipv4Prefix, Ipv6Prefix } from '../sid/types.js';

/** `enum mup_limits`, defined once in src/config/limits.ts; checked against BTF by checkLayouts(). */
export { MUP_EVENT_SLOTS, MUP_LIMITS, MUP_MAX_PLENS, MUP_MAX_SEGS, MUP_RETIRED_SLOT };

export interface MemberLayout {
  readonly offset: number;
  readonly size: number;
}
export interface StructLayout {
  readonly size: number;
  readonly members: Readonly<Record<string, MemberLayout>>;
}

const m = (offset: number, size: number): MemberLayout => ({ offset, size });

/** The codec's view of bpf/mup_shared.h; checked against BTF by checkLayouts(). */
export const LAYOUTS = {
  mup_policy_key: { size: 12, members: { plen: m(0, 4), daddr: m(4, 4), teid: m(8, 4) } },
  mup_policy: {
    size: 108,
    members: {
      sr_prefix: m(0, 16),
      src_prefix: m(16, 16),
      segs: m(32, 16 * MUP_MAX_SEGS),
      rule: m(96, 4),
      sr_plen: m(100, 1),
      src_plen: m(101, 1),
      nsegs: m(102, 1),
      srh_mode: m(103, 1),
      hop_limit: m(104, 1),
      flags: m(105, 1),
      mtu: m(106, 2),
    },
  },
  mup_localsid_key: { size: 20, members: { plen: m(0, 4), addr: m(4, 16) } },
  mup_localsid: {
    size: 124,
    members: {
      rule: m(0, 4),
      sid_plen: m(4, 1),
      src_plen: m(5, 1),
      container: m(6, 1),
      ttl: m(7, 1),
      behavior: m(8, 1),
      mtu: m(10, 2),
      pol: m(16, 108), // a struct mup_policy, same layout as above
    },
  },
  mup_session_key: { size: 20, members: { family: m(0, 1), plen: m(1, 1), addr: m(4, 16) } },
  mup_session: {
    size: 108,
    members: {
      da: m(0, 16),
      sa: m(16, 16),
      segs: m(32, 16 * MUP_MAX_SEGS),
      rule: m(96, 4),
      nsegs: m(100, 1),
      srh_mode: m(101, 1),
      hop_limit: m(102, 1),
      src_plen: m(103, 1),
      mtu: m(104, 2),
    },
  },
  mup_config: {
    size: 108, // 52 + the probe's fields (src/dataplane/probe-layout.ts) + policy_gen, localsid_gen + the session lengths
    members: {
      fwd_mode: m(0, 4),
      hash_seed: m(4, 4),
      sport_base: m(8, 2),
      sport_span: m(12, 4),
      n_policy_plens: m(16, 1),
      n_localsid_plens: m(17, 1),
      policy_plens: m(18, MUP_MAX_PLENS),
      localsid_plens: m(34, MUP_MAX_PLENS),
      policy_gen: m(64, 4),
      localsid_gen: m(68, 4),
      n_session4_plens: m(72, 1),
      n_session6_plens: m(73, 1),
      session4_plens: m(74, MUP_MAX_PLENS),
      session6_plens: m(90, MUP_MAX_PLENS),
    },
  },
  mup_counter: { size: 16, members: { packets: m(0, 8), bytes: m(8, 8) } },
  mup_nexthop: {
    size: 36,
    members: { dst: m(0, 16), ifindex: m(16, 4), mtu: m(20, 2), plen: m(22, 1), family: m(23, 1), dmac: m(24, 6), smac: m(30, 6) },
  },
  mup_nh_lease: { size: 8, members: { expires_ns: m(0, 8) } },
} as const satisfies Record<string, StructLayout>;

/** Enum values the codec writes; checked against BTF when the enum is there. */
export const SRH_MODES: Readonly<Record<SrhMode, number>> = { auto: 0, always: 1, reduced: 2 };
export const CONTAINER_MODES: Readonly<Record<ContainerMode, number>> = { always: 0, auto: 1, never: 2 };
export const FWD_MODES: Readonly<Record<ForwardingMode, number>> = { fib: 0, tx: 1, kernel: 2 };
export const BEHAVIORS: Readonly<Record<LocalSidBehavior, number>> = {
  'end.m.gtp4.e': 0,
  'end.m.gtp6.e': 1,
  'end.m.gtp6.d': 2,
  'end.m.gtp6.d.di': 3,
};
export const ENUMS = {
  mup_srh_mode: { MUP_SRH_AUTO: 0, MUP_SRH_ALWAYS: 1, MUP_SRH_REDUCED: 2 },
  mup_container_mode: { MUP_CONTAINER_ALWAYS: 0, MUP_CONTAINER_AUTO: 1, MUP_CONTAINER_NEVER: 2 },
  mup_fwd_mode: { MUP_FWD_FIB: 0, MUP_FWD_TX: 1, MUP_FWD_KERNEL: 2 },
  mup_behavior: { MUP_BEH_GTP4E: 0, MUP_BEH_GTP6E: 1, MUP_BEH_GTP6D: 2, MUP_BEH_GTP6D_DI: 3 },
  mup_session_family: { MUP_SESSION_V4: 4, MUP_SESSION_V6: 6 },
  mup_policy_flag: { MUP_POL_PLAIN_SID: 1, MUP_POL_ADDR_ONLY: 2 },
  mup_function: {
    MUP_FN_H_M_GTP4_D: 0,
    MUP_FN_END_M_GTP4_E: 1,
    MUP_FN_END_M_GTP6_E: 2,
    MUP_FN_END_M_GTP6_D: 3,
    MUP_FN_END_M_GTP6_D_DI: 4,
    MUP_FN_H_M_SESSION_ENCAPS: 5,
    MUP_FN_COUNT: 6,
  },
} as const satisfies Record<string, Record<string, number>>;

const P = LAYOUTS.mup_policy.members;
const PK = LAYOUTS.mup_policy_key.members;
const L = LAYOUTS.mup_localsid.members;
const LK = LAYOUTS.mup_localsid_key.members;
const C = LAYOUTS.mup_config.members;
const N = LAYOUTS.mup_counter.members;

function nameOf<T extends string>(table: Readonly<Record<T, number>>, v: number, what: string): T {
  for (const [k, n] of Object.entries(table) as [T, number][]) if (n === v) return k;
  throw new RangeError(`${what} ${v} is not a known value`);
}

// ---------------------------------------------------------------------------
// mup_policy_key / mup_policy

export interface PolicyKeyFields {
  readonly plen: number;
  /** IPv4 address as a number (10.0.0.1 = 0x0a000001). */
  readonly daddr: number;
  readonly teid: number;
}

const IPV6_END = 1n << 128n;

/**
 * Unsigned integers into a buffer, little- or big-endian, refused (a
 * RangeError) unless the value is an integer in range and the field lies
 * inside the buffer at an integer offset: stricter than Buffer.writeUInt*,
 * which wrote 1 for 1.5 and 0 for NaN or undefined, and much cheaper. A
 * start's fill writes about twenty fields a rule, and Buffer.writeUInt8
 * cold ran about five times a plain byte store (bench:daemon's fill,
 * 131,072 rules).
 */
function u8(b: Buffer, o: number, v: number): void {
  if ((v & 0xff) !== v) throw new RangeError(`${v} does not fit in 8 unsigned bits`);
  if (!(o >>> 0 === o && o < b.length)) throw new RangeError(`byte ${o} is outside ${b.length} bytes`);
  b[o] = v;
}

function u16le(b: Buffer, o: number, v: number): void {
  if ((v & 0xffff) !== v) throw new RangeError(`${v} does not fit in 16 unsigned bits`);
  if (!(o >>> 0 === o && o + 2 <= b.length)) throw new RangeError(`bytes ${o}-${o + 1} are outside ${b.length} bytes`);
  b[o] = v;
  b[o + 1] = v >>> 8;
}

function u32le(b: Buffer, o: number, v: number): void {
  if (v >>> 0 !== v) throw new RangeError(`${v} does not fit in 32 unsigned bits`);
  if (!(o >>> 0 === o && o + 4 <= b.length)) throw new RangeError(`bytes ${o}-${o + 3} are outside ${b.length} bytes`);
  b[o] = v;
  b[o + 1] = v >>> 8;
  b[o + 2] = v >>> 16;
  b[o + 3] = v >>> 24;
}

function u32be(b: Buffer, o: number, v: number): void {
  if (v >>> 0 !== v) throw new RangeError(`${v} does not fit in 32 unsigned bits`);
  if (!(o >>> 0 === o && o + 4 <= b.length)) throw new RangeError(`bytes ${o}-${o + 3} are outside ${b.length} bytes`);
  b[o] = v >>> 24;
  b[o + 1] = v >>> 16;
  b[o + 2] = v >>> 8;
  b[o + 3] = v;
}

/** The DataView putIpv6 wrote through last, and the memory it views (a fill writes one buffer 131,072 times). */
let ipv6View: DataView | undefined;

/**
 * Write a 128-bit address, network order, at `at`. Through a DataView: two
 * Buffer.writeBigUInt64BE calls made about ten BigInts an address (the
 * shifts and masks inside them): 15-28 ms per 131,072 addresses against 4.
 * The view spans the buffer's whole ArrayBuffer (a small Buffer shares
 * Node's pool), so the bounds are checked here against the Buffer's own.
 */
export function putIpv6(b: Buffer, at: number, addr: bigint): void {
  if (!(at >= 0 && at + 16 <= b.length)) throw new RangeError(`an IPv6 address at byte ${at} does not fit in ${b.length} bytes`);
  if (!(addr >= 0n && addr < IPV6_END)) throw new RangeError(`${addr} is not a 128-bit address`);
  let v = ipv6View;
  if (v === undefined || v.buffer !== b.buffer) ipv6View = v = new DataView(b.buffer);
  const o = b.byteOffset + at;
  v.setBigUint64(o, addr >> 64n);
  v.setBigUint64(o + 8, BigInt.asUintN(64, addr));
}

/** Segments list `segs` as consecutive addresses from `at` (a loop: forEach's closure was made for every rule written). */
function putSegments(b: Buffer, at: number, segs: readonly bigint[]): void {
  for (let i = 0; i < segs.length; i++) putIpv6(b, at + 16 * i, segs[i]!);
}

/**
 * `into`/`at`: encode into a larger buffer (bulk loads) instead of a new
 * one, whose bytes there must be zero (padding is not written); returns the view.
 */
function target(size: number, into: Buffer | undefined, at: number): Buffer {
  return into === undefined ? Buffer.alloc(size) : into.subarray(at, at + size);
}

/** mup_policy.flags (enum mup_policy_flag). */
export const POLICY_FLAGS = { plainSid: 1, addrOnly: 2 } as const;

/**
 * The key of (match, teid): a TEID prefix (match /32) makes it 32 + its
 * length bits of DA || TEID; without one it is the match prefix (teid 0).
 */
export function encodePolicyKey(match: Ipv4Prefix, into?: Buffer, at = 0, teid?: TeidPrefix): Buffer {
  const b = target(LAYOUTS.mup_policy_key.size, into, at);
  writePolicyKey(match, teid, b, 0);
  return b;
}

/** encodePolicyKey into `b` at byte `o` (bytes there zero), without a view of its own: bulk loads. */
export function writePolicyKey(match: Ipv4Prefix, teid: TeidPrefix | undefined, b: Buffer, o: number): void {
  writePolicyKeyFields(match.addr, match.len, teid?.value ?? 0, teid?.len ?? 0, b, o);
}

/** writePolicyKey from the fields (teidLen 0: no TEID prefix, which a /0 is: config/keys.ts parseTeidPrefix); returns the key's prefix length. */
export function writePolicyKeyFields(addr: number, len: number, teidValue: number, teidLen: number, b: Buffer, o: number): number {
  const plen = teidLen === 0 ? len : 32 + teidLen;
  u32le(b, o + PK.plen.offset, plen);
  u32be(b, o + PK.daddr.offset, addr);
  u32be(b, o + PK.teid.offset, teidValue);
  return plen;
}

/**
 * The value of an address-only entry (MUP_POL_ADDR_ONLY): the /32 of an N3
 * address with TEID policies but no policy of its own (bpf/lookup.h),
 * written into `b` at byte `o` (bytes there zero).
 */
export function writeAddrOnlyPolicy(rule: number, b: Buffer, o: number): void {
  u32le(b, o + P.rule.offset, rule);
  u8(b, o + P.flags.offset, POLICY_FLAGS.addrOnly);
}

export function decodePolicyKey(b: Buffer): PolicyKeyFields {
  return {
    plen: b.readUInt32LE(PK.plen.offset),
    daddr: b.readUInt32BE(PK.daddr.offset),
    teid: b.readUInt32BE(PK.teid.offset),
  };
}

export interface PolicyFields {
  readonly srPrefix: Buffer;
  readonly srcPrefix: Buffer;
  /** The nsegs used segments, in path order. */
  readonly segs: readonly Buffer[];
  readonly rule: number;
  readonly srPlen: number;
  readonly srcPlen: number;
  readonly srh: SrhMode;
  readonly hopLimit: number;
  /** enum mup_policy_flag bits. */
  readonly flags: number;
}

/** mup_policy.flags of a policy's value (what writePolicy writes there). */
export function policyFlags(p: Policy): number {
  return p.sid !== undefined ? POLICY_FLAGS.plainSid : 0;
}

/** A policy's value for rule id `rule`, written into `b` at byte `o` (bytes there zero). `p` comes from src/config/load.ts, which refuses more than MUP_MAX_SEGS segments. */
export function writePolicy(p: Policy, rule: number, b: Buffer, o: number): void {
  if (p.segments.length > MUP_MAX_SEGS) {
    // Would overwrite the fields after segs[].
    throw new Error(`internal: ${whereText('policies', p)} has ${p.segments.length} segments; config validation should have refused it`);
  }
  putIpv6(b, o + P.sr_prefix.offset, p.srPrefix.addr);
  putIpv6(b, o + P.src_prefix.offset, p.srcPrefix.addr);
  putSegments(b, o + P.segs.offset, p.segments);
  u32le(b, o + P.rule.offset, rule);
  u8(b, o + P.sr_plen.offset, p.srPrefix.len);
  u8(b, o + P.src_plen.offset, p.srcPrefix.len);
  u8(b, o + P.nsegs.offset, p.segments.length);
  u8(b, o + P.srh_mode.offset, SRH_MODES[p.srh]);
  u8(b, o + P.hop_limit.offset, p.hopLimit);
  u8(b, o + P.flags.offset, policyFlags(p));
  u16le(b, o + P.mtu.offset, p.mtu ?? 0);
}

/**
 * writePolicy for the policies of a fill, in order. A policy's value is
 * its profile's fields (src/config/rows.ts: prefixes, a plain SID, which
 * sets the flags, segments, srh, hop limit, mtu; all writePolicy reads but
 * the rule id), so a row with the profile of the row before it takes that
 * row's bytes and its own id (a million (N3, TEID) policies of one
 * profile: 149 ms of writePolicy in a fill of 3.4 s). Any other policy is
 * written whole, and its bytes kept for the next.
 */
export function policyValueWriter(): (p: Policy, rule: number, b: Buffer, o: number) => void {
  const last = Buffer.alloc(LAYOUTS.mup_policy.size);
  let lastProfile: object | undefined;
  return (p, rule, b, o) => {
    const profile = PolicyRule.profileOf(p);
    if (profile !== undefined && profile === lastProfile) {
      last.copy(b, o);
      u32le(b, o + P.rule.offset, rule);
      return;
    }
    writePolicy(p, rule, b, o);
    lastProfile = profile;
    if (profile !== undefined) b.copy(last, 0, o, o + last.length);
  };
}

export function decodePolicy(b: Buffer): PolicyFields {
  const nsegs = b.readUInt8(P.nsegs.offset);
  const segs: Buffer[] = [];
  for (let i = 0; i < Math.min(nsegs, MUP_MAX_SEGS); i++) {
    segs.push(Buffer.from(b.subarray(P.segs.offset + 16 * i, P.segs.offset + 16 * (i + 1))));
  }
  return {
    srPrefix: Buffer.from(b.subarray(P.sr_prefix.offset, P.sr_prefix.offset + 16)),
    srcPrefix: Buffer.from(b.subarray(P.src_prefix.offset, P.src_prefix.offset + 16)),
    segs,
    rule: b.readUInt32LE(P.rule.offset),
    srPlen: b.readUInt8(P.sr_plen.offset),
    srcPlen: b.readUInt8(P.src_plen.offset),
    srh: nameOf(SRH_MODES, b.readUInt8(P.srh_mode.offset), 'srh_mode'),
    hopLimit: b.readUInt8(P.hop_limit.offset),
    flags: b.readUInt8(P.flags.offset),
  };
}

// ---------------------------------------------------------------------------
// mup_localsid_key / mup_localsid

export function encodeLocalSidKey(sid: Ipv6Prefix, into?: Buffer, at = 0): Buffer {
  const b = target(LAYOUTS.mup_localsid_key.size, into, at);
  writeLocalSidKey(sid, b, 0);
  return b;
}

/** encodeLocalSidKey into `b` at byte `o` (bytes there zero), without a view of its own: bulk loads. */
export function writeLocalSidKey(sid: Ipv6Prefix, b: Buffer, o: number): void {
  u32le(b, o + LK.plen.offset, sid.len);
  putIpv6(b, o + LK.addr.offset, sid.addr);
}

/** mup_localsid.behavior of a local SID's value (what writeLocalSid writes there). */
export function localSidBehavior(s: LocalSid): number {
  return BEHAVIORS[s.behavior ?? 'end.m.gtp4.e'];
}

/** A local SID's value for rule id `rule`, written into `b` at byte `o` (bytes there zero). */
export function writeLocalSid(s: LocalSid, rule: number, b: Buffer, o: number): void {
  u32le(b, o + L.rule.offset, rule);
  u8(b, o + L.sid_plen.offset, s.sid.len);
  u8(b, o + L.src_plen.offset, s.srcPrefixLen);
  u8(b, o + L.container.offset, CONTAINER_MODES[s.container]);
  u8(b, o + L.ttl.offset, s.ttl);
  u8(b, o + L.behavior.offset, localSidBehavior(s));
  u16le(b, o + L.mtu.offset, s.mtu ?? 0);
  // The GTP6 functions' SR policy and source address, in an embedded
  // struct mup_policy (match, rule and src_plen unused there).
  const pol = L.pol.offset;
  if (s.source !== undefined) putIpv6(b, o + pol + P.src_prefix.offset, s.source);
  u8(b, o + pol + P.src_plen.offset, 128);
  if (s.srPrefix !== undefined) {
    putIpv6(b, o + pol + P.sr_prefix.offset, s.srPrefix.addr);
    u8(b, o + pol + P.sr_plen.offset, s.srPrefix.len);
  }
  const segs = s.segments ?? [];
  if (segs.length > MUP_MAX_SEGS) {
    throw new Error(`internal: ${whereText('localsids', s)} has ${segs.length} segments; config validation should have refused it`);
  }
  putSegments(b, o + pol + P.segs.offset, segs);
  u8(b, o + pol + P.nsegs.offset, segs.length);
  u8(b, o + pol + P.srh_mode.offset, SRH_MODES[s.srh ?? 'auto']);
  u8(b, o + pol + P.hop_limit.offset, s.ttl);
  u32le(b, o + pol + P.rule.offset, rule);
}

// ---------------------------------------------------------------------------
// mup_session_key / mup_session (H.M.Session.Encaps, bpf/session.h)

const SK = LAYOUTS.mup_session_key.members;
const S = LAYOUTS.mup_session.members;

export function encodeSessionKey(ue: Session['ue'], into?: Buffer, at = 0): Buffer {
  const b = target(LAYOUTS.mup_session_key.size, into, at);
  writeSessionKey(ue, b, 0);
  return b;
}

/** writeSessionKey of an IPv4 UE prefix from its fields. */
export function writeSessionKey4(addr: number, len: number, b: Buffer, o: number): void {
  u8(b, o + SK.family.offset, 4);
  u8(b, o + SK.plen.offset, len);
  u32be(b, o + SK.addr.offset, addr);
}

/** encodeSessionKey into `b` at byte `o` (bytes there zero), without a view of its own: bulk loads. */
export function writeSessionKey(ue: Session['ue'], b: Buffer, o: number): void {
  if (ue.family === 4) {
    writeSessionKey4(ue.prefix.addr, ue.prefix.len, b, o);
    return;
  }
  u8(b, o + SK.family.offset, ue.family);
  u8(b, o + SK.plen.offset, ue.prefix.len);
  putIpv6(b, o + SK.addr.offset, ue.prefix.addr);
}

/**
 * The outer addresses of a session as 128-bit numbers (the program copies
 * them): DA = isd | endpoint | Args.Mob.Session(qfi, rqi, U = 0, teid), SA =
 * src_prefix | source, exactly End.M.GTP4.E's SID and source (RFC 9433 §6.1,
 * §6.6). writeSession writes the same as bytes (putSessionAddresses), and
 * comes here for the values the encoders refuse, to word the error.
 */
export function sessionAddresses(s: Session): { da: bigint; sa: bigint } {
  return {
    da: encodeGtp4Sid(s.isd, s.endpoint, { qfi: s.qfi as Qfi, r: s.rqi, u: false, teid: s.teid as Teid }),
    sa: encodeGtp4Src(s.srcPrefix, s.source as Ipv4Addr),
  };
}

/**
 * The 16 bytes of a prefix with its host bits cleared, for the last few
 * prefix objects met (the rules of a fill share a handful: their profiles').
 */
class PrefixBytes {
  readonly #objects: (Ipv6Prefix | undefined)[] = [undefined, undefined, undefined, undefined];
  readonly #bytes = Buffer.alloc(16 * 4);
  #next = 0;

  /** Write `p`'s bytes (host bits clear) at b[o, o + 16). */
  put(p: Ipv6Prefix, b: Buffer, o: number): void {
    let i = this.#objects.indexOf(p);
    if (i < 0) {
      i = this.#next;
      this.#next = (i + 1) % 4;
      this.#objects[i] = p;
      putIpv6(this.#bytes, 16 * i, mask6(p.addr, p.len));
    }
    // By hand: Buffer.copy's call costs more than 16 bytes (0.1 s of a million sessions' fill).
    const from = this.#bytes;
    for (let k = 0, f = 16 * i; k < 16; k++) b[o + k] = from[f + k]!;
  }
}

const sidPrefixes = new PrefixBytes();
const srcPrefixes = new PrefixBytes();
/** The bits put at a bit offset of an address (putBitsAt): at most 9 bytes (an IPv4 address and Args.Mob.Session). */
const FIELD = new Uint8Array(9);

/** OR FIELD's first `n` bytes into the address at b[o, o + 16) from its bit `bit` on (bits past the address are none). */
function putBitsAt(b: Buffer, o: number, bit: number, n: number): void {
  const at = o + (bit >>> 3);
  const shift = bit & 7;
  for (let j = 0; j < n; j++) {
    const x = FIELD[j]!;
    b[at + j] = b[at + j]! | (x >>> shift);
    if (shift !== 0 && x !== 0) b[at + j + 1] = b[at + j + 1]! | ((x << (8 - shift)) & 0xff);
  }
}

/**
 * encodeGtp4Sid(isd, endpoint, {qfi, rqi, u: 0, teid}) and
 * encodeGtp4Src(srcPrefix, source) written as bytes at b[o, o + 16) and
 * b[oSa, oSa + 16) (zero there), with no BigInt per session: the prefix's
 * bytes (one conversion per prefix object), then the IPv4 address and
 * Args.Mob.Session at bit L (P). Four BigInts an address were about 0.5 s
 * of a million sessions' fill. test/unit/codec-gtp4.test.ts holds both to
 * the BigInt encoders on random prefixes of every length.
 */
function putSessionAddresses(s: Session, b: Buffer, o: number, oSa: number): void {
  const L = s.isd.len;
  const P = s.srcPrefix.len;
  if (!(Number.isInteger(L) && L >= 0 && L <= MAX_SID_PREFIX_LEN) || !(Number.isInteger(P) && P >= 0 && P <= MAX_SRC_PREFIX_LEN)) {
    // The BigInt encoders word the error.
    const { da, sa } = sessionAddresses(s);
    putIpv6(b, o, da);
    putIpv6(b, oSa, sa);
    return;
  }
  const endpoint = ipv4Addr(s.endpoint);
  const q = qfi(s.qfi);
  const t = teid(s.teid);
  if (!(o >= 0 && o + 16 <= b.length && oSa >= 0 && oSa + 16 <= b.length)) throw new RangeError(`an IPv6 address at byte ${o} or ${oSa} does not fit in ${b.length} bytes`);
  sidPrefixes.put(s.isd, b, o);
  FIELD[0] = endpoint >>> 24;
  FIELD[1] = endpoint >>> 16;
  FIELD[2] = endpoint >>> 8;
  FIELD[3] = endpoint;
  // Args.Mob.Session: QFI(6) R(1) U(1) TEID(32).
  FIELD[4] = (q << 2) | (s.rqi ? 2 : 0);
  FIELD[5] = t >>> 24;
  FIELD[6] = t >>> 16;
  FIELD[7] = t >>> 8;
  FIELD[8] = t;
  putBitsAt(b, o, L, 9);
  const source = ipv4Addr(s.source);
  srcPrefixes.put(s.srcPrefix, b, oSa);
  FIELD[0] = source >>> 24;
  FIELD[1] = source >>> 16;
  FIELD[2] = source >>> 8;
  FIELD[3] = source;
  putBitsAt(b, oSa, P, 4);
}

/** A session's value for rule id `rule`, written into `b` at byte `o` (bytes there zero). */
export function writeSession(s: Session, rule: number, b: Buffer, o: number): void {
  if (s.segments.length > MUP_MAX_SEGS) {
    throw new Error(`internal: ${whereText('sessions', s)} has ${s.segments.length} segments; config validation should have refused it`);
  }
  putSessionAddresses(s, b, o + S.da.offset, o + S.sa.offset);
  putSegments(b, o + S.segs.offset, s.segments);
  u32le(b, o + S.rule.offset, rule);
  u8(b, o + S.nsegs.offset, s.segments.length);
  u8(b, o + S.srh_mode.offset, SRH_MODES[s.srh]);
  u8(b, o + S.hop_limit.offset, s.hopLimit);
  // P: where the IPv4 source sits in sa, the source of the program's ICMP errors about IPv4 packets to the UE.
  u8(b, o + S.src_plen.offset, s.srcPrefix.len);
  u16le(b, o + S.mtu.offset, s.mtu ?? 0);
}

// ---------------------------------------------------------------------------
// mup_config

export interface ConfigFields {
  readonly forwarding: ForwardingMode;
  readonly hashSeed: number;
  readonly sportBase: number;
  /** 1..65536 */
  readonly sportSpan: number;
  /** Longest first. */
  readonly policyPlens: readonly number[];
  readonly localsidPlens: readonly number[];
  /**
   * Changes with every policy put or delete: a CPU's copy of the policy it
   * found last (bpf/lookup.h) is good only under the value it was taken
   * under. Wraps at 2^32.
   */
  readonly policyGen: number;
  /** The same for local SIDs. */
  readonly localsidGen: number;
  /** UE prefix lengths of the sessions, per family, longest first (absent = none). */
  readonly session4Plens?: readonly number[];
  readonly session6Plens?: readonly number[];
}

/**
 * Distinct prefix lengths, longest first, as the data path wants them.
 * Config validation refuses more than MUP_MAX_PLENS; more here is a bug.
 */
export function prefixLengths(lens: Iterable<number>, what: string): number[] {
  const out = [...new Set(lens)].sort((a, b) => b - a);
  if (out.length > MUP_MAX_PLENS) {
    throw new Error(
      `internal: ${what}: ${out.length} distinct prefix lengths (${out.join(', ')}), the data path looks up at most ` +
        `${MUP_MAX_PLENS}; config validation should have refused them`,
    );
  }
  return out;
}

export function configFields(
  s: Settings,
  policies: readonly Policy[],
  localsids: readonly LocalSid[],
  sessions: readonly Session[] = [],
): ConfigFields {
  return {
    session4Plens: prefixLengths(sessions.filter((x) => x.ue.family === 4).map((x) => x.ue.prefix.len), 'IPv4 sessions'),
    session6Plens: prefixLengths(sessions.filter((x) => x.ue.family === 6).map((x) => x.ue.prefix.len), 'IPv6 sessions'),
    forwarding: s.forwarding,
    hashSeed: s.hashSeed,
    sportBase: s.sourcePortMin,
    sportSpan: s.sourcePortMax - s.sourcePortMin + 1,
    policyPlens: prefixLengths(
      policies.map((p) => p.match.len),
      'policies',
    ),
    localsidPlens: prefixLengths(
      localsids.map((l) => l.sid.len),
      'localsids',
    ),
    policyGen: 0,
    localsidGen: 0,
  };
}

/** Write `f` into `into` (a whole struct mup_config, or a larger .data section at `at`). */
export function encodeConfig(f: ConfigFields, into: Buffer = Buffer.alloc(LAYOUTS.mup_config.size), at = 0): Buffer {
  const b = into.subarray(at, at + LAYOUTS.mup_config.size);
  if (f.policyPlens.length > MUP_MAX_PLENS || f.localsidPlens.length > MUP_MAX_PLENS) {
    // Would overwrite the fields after the lists.
    throw new Error(`internal: more than ${MUP_MAX_PLENS} prefix lengths in a table; prefixLengths() should have refused them`);
  }
  b.writeUInt32LE(FWD_MODES[f.forwarding], C.fwd_mode.offset);
  b.writeUInt32LE(f.hashSeed >>> 0, C.hash_seed.offset);
  b.writeUInt16LE(f.sportBase, C.sport_base.offset);
  b.writeUInt32LE(f.sportSpan, C.sport_span.offset);
  b.writeUInt8(f.policyPlens.length, C.n_policy_plens.offset);
  b.writeUInt8(f.localsidPlens.length, C.n_localsid_plens.offset);
  b.fill(0, C.policy_plens.offset, C.policy_plens.offset + MUP_MAX_PLENS);
  b.fill(0, C.localsid_plens.offset, C.localsid_plens.offset + MUP_MAX_PLENS);
  f.policyPlens.forEach((l, i) => b.writeUInt8(l, C.policy_plens.offset + i));
  f.localsidPlens.forEach((l, i) => b.writeUInt8(l, C.localsid_plens.offset + i));
  b.writeUInt32LE(f.policyGen >>> 0, C.policy_gen.offset);
  b.writeUInt32LE(f.localsidGen >>> 0, C.localsid_gen.offset);
  const s4 = f.session4Plens ?? [];
  const s6 = f.session6Plens ?? [];
  if (s4.length > MUP_MAX_PLENS || s6.length > MUP_MAX_PLENS) {
    throw new Error(`internal: more than ${MUP_MAX_PLENS} UE prefix lengths in a family; prefixLengths() should have refused them`);
  }
  b.writeUInt8(s4.length, C.n_session4_plens.offset);
  b.writeUInt8(s6.length, C.n_session6_plens.offset);
  b.fill(0, C.session4_plens.offset, C.session4_plens.offset + MUP_MAX_PLENS);
  b.fill(0, C.session6_plens.offset, C.session6_plens.offset + MUP_MAX_PLENS);
  s4.forEach((l, i) => b.writeUInt8(l, C.session4_plens.offset + i));
  s6.forEach((l, i) => b.writeUInt8(l, C.session6_plens.offset + i));
  return into;
}

export function decodeConfig(into: Buffer, at = 0): ConfigFields {
  const b = into.subarray(at, at + LAYOUTS.mup_config.size);
  const np = Math.min(b.readUInt8(C.n_policy_plens.offset), MUP_MAX_PLENS);
  const nl = Math.min(b.readUInt8(C.n_localsid_plens.offset), MUP_MAX_PLENS);
  return {
    forwarding: nameOf(FWD_MODES, b.readUInt32LE(C.fwd_mode.offset), 'fwd_mode'),
    hashSeed: b.readUInt32LE(C.hash_seed.offset),
    sportBase: b.readUInt16LE(C.sport_base.offset),
    sportSpan: b.readUInt32LE(C.sport_span.offset),
    policyPlens: [...b.subarray(C.policy_plens.offset, C.policy_plens.offset + np)],
    localsidPlens: [...b.subarray(C.localsid_plens.offset, C.localsid_plens.offset + nl)],
    policyGen: b.readUInt32LE(C.policy_gen.offset),
    localsidGen: b.readUInt32LE(C.localsid_gen.offset),
    session4Plens: [...b.subarray(C.session4_plens.offset, C.session4_plens.offset + Math.min(b.readUInt8(C.n_session4_plens.offset), MUP_MAX_PLENS))],
    session6Plens: [...b.subarray(C.session6_plens.offset, C.session6_plens.offset + Math.min(b.readUInt8(C.n_session6_plens.offset), MUP_MAX_PLENS))],
  };
}

// ---------------------------------------------------------------------------
// mup_counter (per-CPU)

export interface CounterValue {
  readonly packets: bigint;
  readonly bytes: bigint;
}

/** Bytes per CPU in a per-CPU map value: value_size rounded up to 8. */
export const COUNTER_STRIDE = Math.ceil(LAYOUTS.mup_counter.size / 8) * 8;

/** Sum of one slot's per-CPU values; `b` holds ncpus values of COUNTER_STRIDE bytes from `at`. */
export function decodePercpuCounter(b: Buffer, ncpus: number, at = 0): CounterValue {
  let packets = 0n;
  let bytes = 0n;
  for (let cpu = 0; cpu < ncpus; cpu++) {
    const o = at + cpu * COUNTER_STRIDE;
    packets += b.readBigUInt64LE(o + N.packets.offset);
    bytes += b.readBigUInt64LE(o + N.bytes.offset);
  }
  return { packets, bytes };
}

// ---------------------------------------------------------------------------
// mup_nexthop (the next-hop cache, bpf/fwd.h)

export const AF_INET = 2;
export const AF_INET6 = 10;

export interface NextHopFields {
  readonly family: typeof AF_INET | typeof AF_INET6;
  /** The destination range the next hop was resolved for (masked prefix) and its length. */
  readonly dst: bigint;
  readonly plen: number;
  readonly ifindex: number;
  /** Egress MTU; larger translated packets take the FIB path. */
  readonly mtu: number;
  /** 6 bytes each. */
  readonly dmac: Buffer;
  readonly smac: Buffer;
}

const NH = LAYOUTS.mup_nexthop.members;

export function encodeNextHop(f: NextHopFields): Buffer {
  const b = Buffer.alloc(LAYOUTS.mup_nexthop.size);
  if (f.family === AF_INET6) putIpv6(b, NH.dst.offset, f.dst);
  else b.writeUInt32BE(Number(f.dst), NH.dst.offset);
  b.writeUInt32LE(f.ifindex, NH.ifindex.offset);
  b.writeUInt16LE(Math.min(f.mtu, 0xffff), NH.mtu.offset);
  b.writeUInt8(f.plen, NH.plen.offset);
  b.writeUInt8(f.family, NH.family.offset);
  f.dmac.copy(b, NH.dmac.offset, 0, 6);
  f.smac.copy(b, NH.smac.offset, 0, 6);
  return b;
}

export function decodeNextHop(b: Buffer): NextHopFields | undefined {
  const family = b.readUInt8(NH.family.offset);
  if (family !== AF_INET && family !== AF_INET6) return undefined;
  return {
    family,
    dst: family === AF_INET6 ? (b.readBigUInt64BE(NH.dst.offset) << 64n) | b.readBigUInt64BE(NH.dst.offset + 8) : BigInt(b.readUInt32BE(NH.dst.offset)),
    plen: b.readUInt8(NH.plen.offset),
    ifindex: b.readUInt32LE(NH.ifindex.offset),
    mtu: b.readUInt16LE(NH.mtu.offset),
    dmac: Buffer.from(b.subarray(NH.dmac.offset, NH.dmac.offset + 6)),
    smac: Buffer.from(b.subarray(NH.smac.offset, NH.smac.offset + 6)),
  };
}
