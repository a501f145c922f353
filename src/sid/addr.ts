/**
 * Parse, format and convert the branded address types of ./types.ts.
 *
 * Parsing is the only way text becomes an address: the helpers here check
 * syntax and ranges once, at the edge, and throw an AddressError naming
 * `where` (the key path the caller gave) with a reason that says what would be
 * accepted; src/config/load.ts turns it into a ConfigError with file and line.
 * Prefixes are always masked to their length (spec §1: stray host bits must
 * not leak into SIDs); the caller hears about masked bits through the
 * optional `warn`.
 */
import { Address4, Address6 } from 'ip-address';
import type { Ipv4Addr, Ipv4Prefix, Ipv6Addr, Ipv6Prefix } from './types.js';

/** Text that is not the address or prefix expected. Message: `WHERE: REASON`. */
export class AddressError extends Error {
  override readonly name = 'AddressError';

  /**
   * @param where  what the text was, as the caller named it (a key path such as `policies[2].sr_prefix`)
   * @param reason what is wrong and what would be accepted
   */
  constructor(
    readonly where: string,
    readonly reason: string,
  ) {
    super(where === '' ? reason : `${where}: ${reason}`);
  }
}

/** Receives warnings from the parsers, e.g. "host bits set, masked"; `where` is the caller's. */
export type WarnFn = (where: string, reason: string) => void;

const U32_MAX = 0xffff_ffff;
const U64_MASK = (1n << 64n) - 1n;
const U128_MAX = (1n << 128n) - 1n;

// ---------------------------------------------------------------------------
// Checked constructors (RangeError: these are programming errors, not config)

/** An IPv4 address from its unsigned 32-bit value (10.0.0.1 = 0x0a000001). */
export function ipv4Addr(n: number): Ipv4Addr {
  if (!Number.isInteger(n) || n < 0 || n > U32_MAX) {
    throw new RangeError(`IPv4 address must be an integer in 0..0xffffffff, got ${n}`);
  }
  return n as Ipv4Addr;
}

/** An IPv6 address from its unsigned 128-bit value. */
export function ipv6Addr(n: bigint): Ipv6Addr {
  if (n < 0n || n > U128_MAX) {
    throw new RangeError(`IPv6 address must be in 0..2^128-1, got ${n}`);
  }
  return n as Ipv6Addr;
}

function checkLen(len: number, max: number, what: string): void {
  if (!Number.isInteger(len) || len < 0 || len > max) {
    throw new RangeError(`${what} prefix length must be an integer in 0..${max}, got ${len}`);
  }
}

/** Keep the top `len` bits of an IPv4 address (0..32). */
export function mask4(addr: Ipv4Addr, len: number): Ipv4Addr {
  checkLen(len, 32, 'IPv4');
  if (len === 0) return 0 as Ipv4Addr;
  return ((addr & (U32_MAX << (32 - len))) >>> 0) as Ipv4Addr;
}

/** mask6's masks by length, made once (each was four BigInts a call). */
const MASKS6: bigint[] = [];

/** Keep the top `len` bits of an IPv6 address (0..128). */
export function mask6(addr: Ipv6Addr, len: number): Ipv6Addr {
  checkLen(len, 128, 'IPv6');
  let keep = MASKS6[len];
  if (keep === undefined) {
    keep = ((1n << BigInt(len)) - 1n) << BigInt(128 - len);
    MASKS6[len] = keep;
  }
  return (addr & keep) as Ipv6Addr;
}

/** An IPv4 prefix with its host bits cleared. */
export function ipv4Prefix(addr: Ipv4Addr, len: number): Ipv4Prefix {
  return { addr: mask4(addr, len), len };
}

/** An IPv6 prefix with its host bits cleared. */
export function ipv6Prefix(addr: Ipv6Addr, len: number): Ipv6Prefix {
  return { addr: mask6(addr, len), len };
}

// ---------------------------------------------------------------------------
// Parsing (AddressError naming `where`)

const V4_EXAMPLE = '192.0.2.1';
const V6_EXAMPLE = '2001:db8::1';
const V4_PREFIX_EXAMPLE = '192.0.2.0/24';
const V6_PREFIX_EXAMPLE = '2001:db8:1::/48';

function libReason(e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e);
  return msg.replace(/\.$/, '');
}

/**
 * The plain forms (dotted quad without leading zeros; hex groups with at most
 * one "::", no embedded IPv4) parsed by hand: a config of 65,536 policies
 * holds 200,000 of them, and ip-address takes 3 µs each. Anything else, and
 * every error, goes to ip-address, which words the message. The forms taken
 * here are a subset of what ip-address accepts, with the same values.
 *
 * Four octets, each "0" or 1-3 digits without a leading zero and at most
 * 255, read from the character codes: a regular expression's match array
 * and four Number() calls took 1 µs an address, a second of a million
 * sessions' start (each holds three addresses and a prefix).
 */
function fastV4(s: string): number | undefined {
  let n = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x2e /* . */) {
      if (digits === 0 || dots === 3) return undefined;
      n = n * 256 + octet;
      octet = 0;
      digits = 0;
      dots++;
    } else if (c >= 0x30 && c <= 0x39) {
      if (digits === 3 || (digits === 1 && octet === 0)) return undefined;
      octet = octet * 10 + (c - 0x30);
      if (octet > 255) return undefined;
      digits++;
    } else return undefined;
  }
  if (digits === 0 || dots !== 3) return undefined;
  return n * 256 + octet;
}

/** hex digit value of a character code, or -1. */
function hexDigit(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x61 && c <= 0x66) return c - 0x57;
  if (c >= 0x41 && c <= 0x46) return c - 0x37;
  return -1;
}

/** The 16-bit groups of the address being parsed or formatted (one at a time: no array per address). */
const GROUPS = new Uint16Array(8);

/**
 * Groups of 1-4 hex digits separated by ":", at most one "::", read in one
 * pass over the characters (no split, no array of groups, four BigInts at
 * most): a config of 65,536 local SIDs parses 65,536 of them.
 */
function fastV6(s: string): bigint | undefined {
  const len = s.length;
  let i = 0;
  let n = 0; // groups read
  let dbl = -1; // groups before the "::", if any
  if (len >= 2 && s.charCodeAt(0) === 0x3a && s.charCodeAt(1) === 0x3a) {
    dbl = 0;
    i = 2;
  }
  while (i < len) {
    let v = 0;
    const from = i;
    for (; i < len && i - from <= 4; i++) {
      const h = hexDigit(s.charCodeAt(i));
      if (h < 0) break;
      v = v * 16 + h;
    }
    const digits = i - from;
    if (digits === 0 || digits > 4 || n === 8) return undefined;
    GROUPS[n++] = v;
    if (i === len) break;
    if (s.charCodeAt(i) !== 0x3a) return undefined;
    i++;
    if (i < len && s.charCodeAt(i) === 0x3a) {
      if (dbl >= 0) return undefined;
      dbl = n;
      i++;
    } else if (i === len) {
      return undefined;
    }
  }
  if (dbl < 0 ? n !== 8 : n > 7) return undefined;
  if (dbl >= 0) {
    // The groups after the "::" move to the end; zeros in between.
    const tail = n - dbl;
    GROUPS.copyWithin(8 - tail, dbl, n);
    GROUPS.fill(0, dbl, 8 - tail);
  }
  let out = 0n;
  for (let w = 0; w < 4; w++) {
    const word = (GROUPS[2 * w] ?? 0) * 0x10000 + (GROUPS[2 * w + 1] ?? 0);
    if (word !== 0) out |= BigInt(word) << BigInt(96 - 32 * w);
  }
  return out;
}

/** Parse the address part `s`; messages quote `shown` (the whole input). */
function v4(s: string, shown: string, where: string, expected: string): Ipv4Addr {
  const fast = fastV4(s);
  if (fast !== undefined) return fast as Ipv4Addr;
  try {
    return ipv4Addr(Number(new Address4(s).bigInt()));
  } catch (e) {
    throw new AddressError(where, `${JSON.stringify(shown)} is not ${expected} (${libReason(e)})`);
  }
}

function v6(s: string, shown: string, where: string, expected: string): Ipv6Addr {
  if (s.includes('%')) {
    throw new AddressError(where, `${JSON.stringify(shown)} has a zone index; expected ${expected} without %ZONE`);
  }
  const fast = fastV6(s);
  if (fast !== undefined) return fast as Ipv6Addr;
  try {
    return ipv6Addr(new Address6(s).bigInt());
  } catch (e) {
    throw new AddressError(where, `${JSON.stringify(shown)} is not ${expected} (${libReason(e)})`);
  }
}

/** Split "ADDR/LEN"; the length is decimal digits only. */
function splitPrefix(s: string, max: number, where: string, example: string): [string, number] {
  const slash = s.indexOf('/');
  if (slash < 0) {
    throw new AddressError(where, `${JSON.stringify(s)} has no prefix length; write ADDRESS/LENGTH, e.g. ${example}`);
  }
  const lenText = s.slice(slash + 1);
  if (!/^[0-9]{1,3}$/.test(lenText) || Number(lenText) > max) {
    throw new AddressError(
      where,
      `${JSON.stringify(s)} has an invalid prefix length ${JSON.stringify(lenText)}; expected an integer from 0 to ${max}, e.g. ${example}`,
    );
  }
  return [s.slice(0, slash), Number(lenText)];
}

function rejectSlash(s: string, where: string, expected: string): void {
  if (s.includes('/')) {
    throw new AddressError(where, `${JSON.stringify(s)} is a prefix; expected ${expected} without /LENGTH`);
  }
}

/** Parse a dotted-quad IPv4 address ("192.0.2.1"). */
export function parseIpv4(s: string, where: string): Ipv4Addr {
  const expected = `an IPv4 address such as ${V4_EXAMPLE}`;
  rejectSlash(s, where, expected);
  return v4(s, s, where, expected);
}

/** Parse an IPv6 address in any RFC 4291 text form ("2001:db8::1"). */
export function parseIpv6(s: string, where: string): Ipv6Addr {
  const expected = `an IPv6 address such as ${V6_EXAMPLE}`;
  rejectSlash(s, where, expected);
  return v6(s, s, where, expected);
}

/** Parse "ADDR/LEN" (LEN 0..32). Host bits are cleared and reported to `warn`. */
export function parseIpv4Prefix(s: string, where: string, warn?: WarnFn): Ipv4Prefix {
  const [addrText, len] = splitPrefix(s, 32, where, V4_PREFIX_EXAMPLE);
  const addr = v4(addrText, s, where, `an IPv4 prefix such as ${V4_PREFIX_EXAMPLE}`);
  const prefix = ipv4Prefix(addr, len);
  if (prefix.addr !== addr) {
    warn?.(where, `${s} has host bits set past /${len}; using ${formatIpv4Prefix(prefix)}`);
  }
  return prefix;
}

/** Parse "ADDR/LEN" (LEN 0..128). Host bits are cleared and reported to `warn`. */
export function parseIpv6Prefix(s: string, where: string, warn?: WarnFn): Ipv6Prefix {
  const [addrText, len] = splitPrefix(s, 128, where, V6_PREFIX_EXAMPLE);
  const addr = v6(addrText, s, where, `an IPv6 prefix such as ${V6_PREFIX_EXAMPLE}`);
  const prefix = ipv6Prefix(addr, len);
  if (prefix.addr !== addr) {
    warn?.(where, `${s} has host bits set past /${len}; using ${formatIpv6Prefix(prefix)}`);
  }
  return prefix;
}

// ---------------------------------------------------------------------------
// Formatting

/** Dotted quad. */
export function formatIpv4(addr: Ipv4Addr): string {
  return [addr >>> 24, (addr >>> 16) & 0xff, (addr >>> 8) & 0xff, addr & 0xff].join('.');
}

/**
 * RFC 5952 §4 text: lowercase hex, no leading zeros, the longest run of two or
 * more zero groups (the first one on a tie) shortened to "::". IPv4-mapped
 * addresses are printed in hex too (no dotted-quad tail), which is what SIDs want.
 */
export function formatIpv6(addr: Ipv6Addr): string {
  // The groups from the hex digits (one string, no BigInt per group).
  const hex = addr.toString(16);
  const pad = 32 - hex.length;
  GROUPS.fill(0);
  for (let i = 0; i < hex.length; i++) {
    const at = pad + i;
    GROUPS[at >> 2] = ((GROUPS[at >> 2] ?? 0) << 4) | hexDigit(hex.charCodeAt(i));
  }
  let bestStart = -1;
  let bestLen = 1; // a single zero group is never shortened
  for (let i = 0; i < 8; ) {
    if (GROUPS[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && GROUPS[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  // Joined, not added up: a string made by + is a tree of parts (more bytes kept a key).
  const parts = PARTS;
  parts.length = 0;
  for (let i = 0; i < 8; i++) {
    if (i === bestStart) {
      // An empty part where the run was ("a::b"), and one more at either end ("::b", "a::").
      if (i === 0) parts.push('');
      parts.push('');
      i += bestLen - 1;
      if (i === 7) parts.push('');
      continue;
    }
    parts.push((GROUPS[i] ?? 0).toString(16));
  }
  return parts.join(':');
}

const PARTS: string[] = [];

/*
 * Prefix texts are joined, not built with a template: V8 makes a string of
 * 13 characters or more built by `+` or a template a cons string (a node of
 * 32 bytes pointing at its parts, the parts kept besides), and a prefix text
 * is kept for every rule as its key. Joined, it is one flat string: 431 ->
 * 389 B of heap per rule (test/unit/rule-memory.test.ts).
 */
export function formatIpv4Prefix(p: Ipv4Prefix): string {
  return [formatIpv4(p.addr), p.len].join('/');
}

export function formatIpv6Prefix(p: Ipv6Prefix): string {
  return [formatIpv6(p.addr), p.len].join('/');
}

// ---------------------------------------------------------------------------
// Network byte order

/** 4 bytes, big-endian. */
export function ipv4ToBytes(addr: Ipv4Addr): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(addr, 0);
  return b;
}

/** Read 4 big-endian bytes at `offset`. */
export function ipv4FromBytes(bytes: Uint8Array, offset = 0): Ipv4Addr {
  checkSpan(bytes, offset, 4);
  const v = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).readUInt32BE(offset);
  return v as Ipv4Addr;
}

/** 16 bytes, big-endian. */
export function ipv6ToBytes(addr: Ipv6Addr): Buffer {
  const b = Buffer.alloc(16);
  b.writeBigUInt64BE(addr >> 64n, 0);
  b.writeBigUInt64BE(addr & U64_MASK, 8);
  return b;
}

/** Read 16 big-endian bytes at `offset`. */
export function ipv6FromBytes(bytes: Uint8Array, offset = 0): Ipv6Addr {
  checkSpan(bytes, offset, 16);
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return ((b.readBigUInt64BE(offset) << 64n) | b.readBigUInt64BE(offset + 8)) as Ipv6Addr;
}

function checkSpan(bytes: Uint8Array, offset: number, n: number): void {
  if (!Number.isInteger(offset) || offset < 0 || offset + n > bytes.length) {
    throw new RangeError(`need ${n} bytes at offset ${offset}, buffer has ${bytes.length}`);
  }
}
