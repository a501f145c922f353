/**
 * Address and prefix values that carry their meaning. Constructed only by the
 * functions in src/sid/addr.ts, which check them: a prefix length is in range
 * and the address has no bits set past it.
 */
declare const brand: unique symbol;

/** IPv4 address as an unsigned 32-bit number. */
export type Ipv4Addr = number & { readonly [brand]: 'Ipv4Addr' };
/** IPv6 address as an unsigned 128-bit bigint. */
export type Ipv6Addr = bigint & { readonly [brand]: 'Ipv6Addr' };

export interface Ipv4Prefix {
  readonly addr: Ipv4Addr; // host bits cleared
  readonly len: number; // 0..32
}
export interface Ipv6Prefix {
  readonly addr: Ipv6Addr; // host bits cleared
  readonly len: number; // 0..128
}

/** GTP-U TEID: unsigned 32-bit. */
export type Teid = number & { readonly [brand]: 'Teid' };
/** QoS Flow Identifier: 0..63. */
export type Qfi = number & { readonly [brand]: 'Qfi' };

/** RFC 9433 §6.1 Args.Mob.Session. */
export interface MobArgs {
  readonly qfi: Qfi;
  /** R bit (reflective QoS indication). */
  readonly r: boolean;
  /** U bit, unused by the RFC; we write 0. */
  readonly u: boolean;
  readonly teid: Teid;
}
