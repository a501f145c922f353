import { Address4, Address6 } from 'ip-address';
import { describe, expect, it } from 'vitest';
import {
  AddressError,
  formatIpv4,
  formatIpv4Prefix,
  formatIpv6,
  formatIpv6Prefix,
  ipv4Addr,
  ipv4FromBytes,
  ipv4ToBytes,
  ipv6Addr,
  ipv6FromBytes,
  ipv6Prefix,
  ipv6ToBytes,
  mask4,
  mask6,
  parseIpv4,
  parseIpv4Prefix,
  parseIpv6,
  parseIpv6Prefix,
} from '../../src/sid/addr.js';
import {
  decodeArgs,
  decodeGtp4Sid,
  decodeGtp4Src,
  encodeArgs,
  encodeGtp4Sid,
  encodeGtp6Sid,
  decodeGtp6Sid,
  encodeGtp4Src,
  MAX_SID_PREFIX_LEN,
  MAX_SRC_PREFIX_LEN,
  qfi,
  teid,
} from '../../src/sid/mobile.js';
import type { Ipv6Addr, MobArgs } from '../../src/sid/types.js';

const v4 = (s: string) => parseIpv4(s, 'test');
const v6 = (s: string) => parseIpv6(s, 'test');
const args = (q: number, r: boolean, t: number, u = false): MobArgs => ({ qfi: qfi(q), r, u, teid: teid(t) });

/** Deterministic PRNG (mulberry32) so a failing round trip can be replayed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}
const rand128 = (next: () => number): Ipv6Addr =>
  ipv6Addr((BigInt(next()) << 96n) | (BigInt(next()) << 64n) | (BigInt(next()) << 32n) | BigInt(next()));

// ---------------------------------------------------------------------------
// Spec §1 worked values

describe('spec §1 worked values', () => {
  const sids = [
    { name: 'L32_qfi9_r0', prefix: '2001:db8::/32', da: '10.0.0.2', args: args(9, false, 0x12345678), sid: '2001:db8:a00:2:2412:3456:7800:0' },
    { name: 'L32_qfi9_r1', prefix: '2001:db8::/32', da: '10.0.0.2', args: args(9, true, 0x12345678), sid: '2001:db8:a00:2:2612:3456:7800:0' },
    { name: 'L44_qfi5', prefix: 'fc00:1::/44', da: '192.0.2.1', args: args(5, false, 0xdeadbeef), sid: 'fc00:1:c:0:2011:4dea:dbee:f000' },
  ];
  it.each(sids)('SID $name', ({ prefix, da, args: a, sid }) => {
    const p = parseIpv6Prefix(prefix, 'test');
    const b = encodeGtp4Sid(p, v4(da), a);
    expect(formatIpv6(b)).toBe(sid);
    expect(decodeGtp4Sid(v6(sid), p.len)).toEqual({ ipv4Da: v4(da), args: a });
  });

  const srcs = [
    { name: 'P64', prefix: '2001:db8:ffff::/64', sa: '10.0.0.1', addr: '2001:db8:ffff:0:a00:1::' },
    { name: 'P52', prefix: 'fc00:2::/52', sa: '198.51.100.7', addr: 'fc00:2:0:c63:3640:7000::' },
  ];
  it.each(srcs)('source $name', ({ prefix, sa, addr }) => {
    const p = parseIpv6Prefix(prefix, 'test');
    expect(formatIpv6(encodeGtp4Src(p, v4(sa)))).toBe(addr);
    expect(decodeGtp4Src(v6(addr), p.len)).toBe(v4(sa));
  });
});

// ---------------------------------------------------------------------------
// Args.Mob.Session

describe('Args.Mob.Session', () => {
  const rows = [
    { name: 'zero', a: args(0, false, 0), v: 0n },
    { name: 'qfi9_teid', a: args(9, false, 0x12345678), v: 0x24_12345678n },
    { name: 'r_only', a: args(0, true, 0), v: 1n << 33n },
    { name: 'u_only', a: args(0, false, 0, true), v: 1n << 32n },
    { name: 'all_ones', a: args(63, true, 0xffffffff, true), v: (1n << 40n) - 1n },
    { name: 'qfi63', a: args(63, false, 1), v: 0xfc_00000001n },
  ];
  it.each(rows)('$name', ({ a, v }) => {
    expect(encodeArgs(a)).toBe(v);
    expect(decodeArgs(v)).toEqual(a);
  });

  it.each([-1n, 1n << 40n])('decodeArgs rejects %s', (v) => {
    expect(() => decodeArgs(v)).toThrow(RangeError);
  });
  it.each([-1, 64, 1.5, Number.NaN])('qfi(%s) throws', (n) => expect(() => qfi(n)).toThrow(/QFI/));
  it.each([-1, 2 ** 32, 0.5])('teid(%s) throws', (n) => expect(() => teid(n)).toThrow(/TEID/));
  it('accepts the extremes', () => {
    expect(qfi(63)).toBe(63);
    expect(teid(0xffffffff)).toBe(0xffffffff);
  });
});

// ---------------------------------------------------------------------------
// Round trips at every L and P

describe('SID round trips', () => {
  const next = rng(9433);
  for (let L = 0; L <= MAX_SID_PREFIX_LEN; L++) {
    it(`L=${L}`, () => {
      for (let i = 0; i < 50; i++) {
        // a prefix with host bits set: they must not leak
        const raw = { addr: rand128(next), len: L };
        const da = ipv4Addr(next());
        const a = args(next() & 63, (next() & 1) === 1, next(), (next() & 1) === 1);
        const sid = encodeGtp4Sid(raw, da, a);
        expect(mask6(sid, L)).toBe(mask6(raw.addr, L));
        expect(sid & ((1n << BigInt(56 - L)) - 1n)).toBe(0n); // zero padding
        expect(decodeGtp4Sid(sid, L)).toEqual({ ipv4Da: da, args: a });
        // garbage in the padding is ignored on decode
        const noisy = ipv6Addr(sid | (rand128(next) & ((1n << BigInt(56 - L)) - 1n)));
        expect(decodeGtp4Sid(noisy, L)).toEqual({ ipv4Da: da, args: a });
      }
    });
  }
  it.each([57, 64, 128, -1, 32.5])('L=%s is rejected', (L) => {
    expect(() => encodeGtp4Sid({ addr: ipv6Addr(0n), len: L }, ipv4Addr(0), args(0, false, 0))).toThrow(/128 bits/);
    expect(() => decodeGtp4Sid(ipv6Addr(0n), L)).toThrow(RangeError);
  });
});

describe('source address round trips', () => {
  const next = rng(5952);
  for (let P = 0; P <= MAX_SRC_PREFIX_LEN; P++) {
    it(`P=${P}`, () => {
      for (let i = 0; i < 50; i++) {
        const raw = { addr: rand128(next), len: P };
        const sa = ipv4Addr(next());
        const b = encodeGtp4Src(raw, sa);
        expect(mask6(b, P)).toBe(mask6(raw.addr, P));
        expect(b & ((1n << BigInt(96 - P)) - 1n)).toBe(0n);
        expect(decodeGtp4Src(b, P)).toBe(sa);
        const noisy = ipv6Addr(b | (rand128(next) & ((1n << BigInt(96 - P)) - 1n)));
        expect(decodeGtp4Src(noisy, P)).toBe(sa);
      }
    });
  }
  it.each([97, 128, -1])('P=%s is rejected', (P) => {
    expect(() => encodeGtp4Src({ addr: ipv6Addr(0n), len: P }, ipv4Addr(0))).toThrow(/128 bits/);
    expect(() => decodeGtp4Src(ipv6Addr(0n), P)).toThrow(RangeError);
  });
});

// ---------------------------------------------------------------------------
// addr.ts

describe('IPv6 text (RFC 5952)', () => {
  const rows = [
    { in: '2001:0DB8:0000:0000:0000:0000:0000:0001', out: '2001:db8::1' },
    { in: '2001:db8:0:0:1:0:0:1', out: '2001:db8::1:0:0:1' }, // tie: first run
    { in: '2001:0:0:1:0:0:0:1', out: '2001:0:0:1::1' }, // longest run
    { in: '2001:db8::1:1:1:1:1', out: '2001:db8:0:1:1:1:1:1' }, // single zero group stays
    { in: '::', out: '::' },
    { in: '::1', out: '::1' },
    { in: '1::', out: '1::' },
    { in: 'FE80::A', out: 'fe80::a' },
    { in: '1:2:3:4:5:6:7:8', out: '1:2:3:4:5:6:7:8' },
    { in: '::ffff:192.0.2.1', out: '::ffff:c000:201' },
  ];
  it.each(rows)('$in -> $out', (r) => expect(formatIpv6(v6(r.in))).toBe(r.out));

  it('agrees with ip-address correctForm on random zero-heavy addresses', () => {
    const next = rng(1);
    for (let i = 0; i < 2000; i++) {
      let a = 0n;
      for (let g = 0; g < 8; g++) a = (a << 16n) | BigInt((next() & 3) === 0 ? next() & 0xffff : 0);
      const addr = ipv6Addr(a);
      expect(formatIpv6(addr)).toBe(Address6.fromBigInt(addr).correctForm());
      expect(v6(formatIpv6(addr))).toBe(addr);
    }
  });
});

describe('parsing', () => {
  it('parses IPv4', () => {
    expect(v4('10.0.0.1')).toBe(0x0a000001);
    expect(v4('255.255.255.255')).toBe(0xffffffff);
    expect(formatIpv4(v4('192.0.2.1'))).toBe('192.0.2.1');
  });

  const bad = [
    { name: 'v4_octet_range', fn: () => parseIpv4('10.0.0.256', 'p.x'), msg: /IPv4 address/ },
    { name: 'v4_three_octets', fn: () => parseIpv4('10.0.1', 'p.x'), msg: /IPv4 address/ },
    { name: 'v4_leading_zero', fn: () => parseIpv4('10.0.0.01', 'p.x'), msg: /leading zero/ },
    { name: 'v4_with_len', fn: () => parseIpv4('10.0.0.1/32', 'p.x'), msg: /without \/LENGTH/ },
    { name: 'v4_ipv6_given', fn: () => parseIpv4('2001:db8::1', 'p.x'), msg: /IPv4 address/ },
    { name: 'v6_garbage', fn: () => parseIpv6('2001:db8::g', 'p.x'), msg: /IPv6 address/ },
    { name: 'v6_two_double_colons', fn: () => parseIpv6('1::2::3', 'p.x'), msg: /IPv6 address/ },
    { name: 'v6_zone', fn: () => parseIpv6('fe80::1%eth0', 'p.x'), msg: /zone/ },
    { name: 'v6_with_len', fn: () => parseIpv6('2001:db8::/32', 'p.x'), msg: /without \/LENGTH/ },
    { name: 'v4p_no_len', fn: () => parseIpv4Prefix('10.0.0.0', 'p.x'), msg: /no prefix length/ },
    { name: 'v4p_len_33', fn: () => parseIpv4Prefix('10.0.0.0/33', 'p.x'), msg: /0 to 32/ },
    { name: 'v4p_len_text', fn: () => parseIpv4Prefix('10.0.0.0/abc', 'p.x'), msg: /0 to 32/ },
    { name: 'v4p_len_empty', fn: () => parseIpv4Prefix('10.0.0.0/', 'p.x'), msg: /0 to 32/ },
    { name: 'v4p_bad_addr', fn: () => parseIpv4Prefix('10.0.0/8', 'p.x'), msg: /IPv4 prefix/ },
    { name: 'v6p_no_len', fn: () => parseIpv6Prefix('2001:db8::', 'p.x'), msg: /no prefix length/ },
    { name: 'v6p_len_129', fn: () => parseIpv6Prefix('2001:db8::/129', 'p.x'), msg: /0 to 128/ },
    { name: 'v6p_negative', fn: () => parseIpv6Prefix('2001:db8::/-1', 'p.x'), msg: /0 to 128/ },
    { name: 'v6p_double_slash', fn: () => parseIpv6Prefix('2001:db8::/32/4', 'p.x'), msg: /0 to 128/ },
  ];
  it.each(bad)('$name', ({ fn, msg }) => {
    let err: unknown;
    try {
      fn();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(AddressError);
    expect((err as AddressError).where).toBe('p.x');
    expect((err as AddressError).message).toMatch(/^p\.x: /);
    expect((err as AddressError).message).toMatch(msg);
  });

  it('masks host bits and warns', () => {
    const warnings: string[] = [];
    const warn = (path: string, reason: string) => warnings.push(`${path}: ${reason}`);
    const p4 = parseIpv4Prefix('10.1.2.3/16', 'a', warn);
    expect(formatIpv4Prefix(p4)).toBe('10.1.0.0/16');
    const p6 = parseIpv6Prefix('2001:db8:1:2::1/44', 'b', warn);
    expect(formatIpv6Prefix(p6)).toBe('2001:db8::/44');
    expect(warnings).toEqual([
      'a: 10.1.2.3/16 has host bits set past /16; using 10.1.0.0/16',
      'b: 2001:db8:1:2::1/44 has host bits set past /44; using 2001:db8::/44',
    ]);
  });

  it('does not warn for clean prefixes', () => {
    const warnings: string[] = [];
    parseIpv4Prefix('0.0.0.0/0', 'a', (_p, r) => warnings.push(r));
    parseIpv4Prefix('10.0.0.1/32', 'a', (_p, r) => warnings.push(r));
    parseIpv6Prefix('2001:db8::/32', 'a', (_p, r) => warnings.push(r));
    parseIpv6Prefix('::/0', 'a', (_p, r) => warnings.push(r));
    expect(warnings).toEqual([]);
  });
});

describe('masks and bytes', () => {
  it.each([
    { len: 0, out: 0 },
    { len: 1, out: 0x80000000 },
    { len: 24, out: 0xffffff00 },
    { len: 31, out: 0xfffffffe },
    { len: 32, out: 0xffffffff },
  ])('mask4 /$len', ({ len, out }) => expect(mask4(ipv4Addr(0xffffffff), len)).toBe(out));

  it.each([0, 1, 56, 64, 96, 127, 128])('mask6 /%i', (len) => {
    const ones = ipv6Addr((1n << 128n) - 1n);
    const m = mask6(ones, len);
    expect(m).toBe(len === 0 ? 0n : ((1n << BigInt(len)) - 1n) << BigInt(128 - len));
  });

  it.each([-1, 33])('mask4 rejects /%i', (len) => expect(() => mask4(ipv4Addr(0), len)).toThrow(RangeError));
  it.each([-1, 129])('mask6 rejects /%i', (len) => expect(() => mask6(ipv6Addr(0n), len)).toThrow(RangeError));

  it('ipv6Prefix masks', () => {
    expect(ipv6Prefix(v6('2001:db8:ffff::1'), 32)).toEqual({ addr: v6('2001:db8::'), len: 32 });
  });

  it('IPv4 bytes', () => {
    const a = v4('192.0.2.1');
    expect([...ipv4ToBytes(a)]).toEqual([192, 0, 2, 1]);
    expect(ipv4FromBytes(Uint8Array.from([9, 192, 0, 2, 1]), 1)).toBe(a);
    expect(() => ipv4FromBytes(new Uint8Array(3))).toThrow(RangeError);
  });

  it('IPv6 bytes', () => {
    const a = v6('2001:db8::a00:1');
    const b = ipv6ToBytes(a);
    expect(b.toString('hex')).toBe('20010db8' + '0000'.repeat(4) + '0a000001');
    expect(b.length).toBe(16);
    expect(ipv6FromBytes(b)).toBe(a);
    const framed = Buffer.concat([Buffer.from([1, 2]), b]);
    expect(ipv6FromBytes(framed.subarray(1), 1)).toBe(a);
    expect(() => ipv6FromBytes(b, 1)).toThrow(RangeError);
    const next = rng(7);
    for (let i = 0; i < 200; i++) {
      const x = rand128(next);
      expect(ipv6FromBytes(ipv6ToBytes(x))).toBe(x);
    }
  });

  it('constructors range-check', () => {
    expect(() => ipv4Addr(-1)).toThrow(RangeError);
    expect(() => ipv4Addr(2 ** 32)).toThrow(RangeError);
    expect(() => ipv6Addr(-1n)).toThrow(RangeError);
    expect(() => ipv6Addr(1n << 128n)).toThrow(RangeError);
  });
});

describe('address parsing fast path agrees with ip-address', () => {
  // A deterministic generator (xorshift32), so a failure is reproducible.
  let seed = 0x2545f491;
  const rnd = (n: number): number => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) % n;
  };
  const forms = (groups: number[]): string[] => {
    const hex = groups.map((g) => g.toString(16));
    const out = [hex.join(':'), groups.map((g) => g.toString(16).padStart(4, '0').toUpperCase()).join(':')];
    // Compress one run of zero groups (any run, not only the longest).
    for (let i = 0; i < 8; i++) {
      if (groups[i] !== 0) continue;
      let j = i;
      while (j < 8 && groups[j] === 0) j++;
      out.push(`${hex.slice(0, i).join(':')}::${hex.slice(j).join(':')}`);
      i = j;
    }
    return out;
  };

  it('gives the same value for 3,000 generated IPv6 texts', () => {
    for (let n = 0; n < 1000; n++) {
      const groups = Array.from({ length: 8 }, () => (rnd(3) === 0 ? 0 : rnd(0x10000)));
      for (const text of forms(groups)) {
        expect(parseIpv6(text, 'x'), text).toBe(new Address6(text).bigInt());
      }
    }
  });

  it.each(['1::2::3', ':1:2:3:4:5:6:7', '1:2:3:4:5:6:7:8:9', '1:2:3:4:5:6:7', '12345::', 'g::1', '1:2:3:4:5:6:7::8', ':::', '::ffff:192.0.2.1', '1:', ':1', '1:::2', '1:2:3:4:5:6:7:8:', '::1:2:3:4:5:6:7:8', '1:2:3:4::5:6:7:8', '::', '0:0:0:0:0:0:0:0', 'FFFF:ffff::', '00001::'])(
    'treats %s as ip-address does',
    (text) => {
      let lib: bigint | undefined;
      try {
        lib = new Address6(text).bigInt();
      } catch {
        lib = undefined;
      }
      if (lib === undefined) expect(() => parseIpv6(text, 'x')).toThrow(AddressError);
      else expect(parseIpv6(text, 'x')).toBe(lib);
    },
  );

  it.each(['0.0.0.0', '255.255.255.255', '1.2.3.4.', '.1.2.3', '1..2.3', '01.2.3.4', '1.2.3.04', '1.2.3.00', '1.2.3.256', '1.2.3.1000', '1.2.3', '1.2.3.4.5', ' 1.2.3.4', '1.2.3.4 ', '1.2.3.a', '', '...', '10.0.0.255', '300.1.1.1'])(
    'treats the IPv4 text %j as ip-address does',
    (text) => {
      let lib: number | undefined;
      try {
        lib = Number(new Address4(text).bigInt());
      } catch {
        lib = undefined;
      }
      if (lib === undefined) expect(() => parseIpv4(text, 'x')).toThrow(AddressError);
      else expect(parseIpv4(text, 'x')).toBe(lib);
    },
  );

  it('IPv4: the same value for generated dotted quads; leading zeros and out-of-range octets go to ip-address', () => {
    for (let n = 0; n < 1000; n++) {
      const o = [rnd(256), rnd(256), rnd(256), rnd(256)];
      expect(parseIpv4(o.join('.'), 'x')).toBe(((o[0]! << 24) | (o[1]! << 16) | (o[2]! << 8) | o[3]!) >>> 0);
    }
    expect(() => parseIpv4('256.0.0.1', 'x')).toThrow(AddressError);
    expect(() => parseIpv4('1.2.3', 'x')).toThrow(AddressError);
  });
});

describe('GTP6 SIDs (Args.Mob.Session at bit L, L <= 88)', () => {
  it.each([
    ['2001:db8:1::/64', 9, false, 0x12345678, '2001:db8:1:0:2412:3456:7800:0'],
    ['2001:db8:1::/48', 9, true, 0x12345678, '2001:db8:1:2612:3456:7800::'],
    ['fc00::/88', 63, true, 0xffffffff, 'fc00::fe:ffff:ffff'],
  ] as const)('%s qfi %d r %s teid %d -> %s', (pfx, q, r, t, want) => {
    const p = parseIpv6Prefix(pfx, 'test');
    const sid = encodeGtp6Sid(p, { qfi: qfi(q), r, u: false, teid: teid(t) });
    expect(formatIpv6(sid)).toBe(want);
    expect(decodeGtp6Sid(sid, p.len)).toEqual({ qfi: q, r, u: false, teid: t });
  });
  it('refuses L = 89', () => {
    expect(() => encodeGtp6Sid({ addr: ipv6Addr(0n), len: 89 }, { qfi: qfi(0), r: false, u: false, teid: teid(0) })).toThrow(/128 bits/);
  });
});
