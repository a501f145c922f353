/**
 * A session's outer addresses as writeSession writes them (bytes, no
 * BigInt per session: src/dataplane/codec.ts) against the RFC 9433
 * encoders over BigInts (src/sid/mobile.ts: encodeGtp4Sid, encodeGtp4Src,
 * through sessionAddresses): random prefixes of every length L (0-56) and
 * P (0-96), host bits set in them, random endpoints, sources, QFIs, RQIs
 * and TEIDs, the extremes; and out-of-range values refused as before.
 */
import { describe, expect, it } from 'vitest';
import type { Session } from '../../src/config/types.js';
import { LAYOUTS, sessionAddresses, writeSession } from '../../src/dataplane/codec.js';
import type { Ipv4Addr, Ipv6Addr } from '../../src/sid/types.js';
import { xorshift32 } from '../helpers/rng.js';

const S = LAYOUTS.mup_session.members;

function session(o: { isd: bigint; L: number; src: bigint; P: number; endpoint: number; source: number; qfi: number; rqi: boolean; teid: number }): Session {
  return {
    where: 0,
    ue: { family: 4, prefix: { addr: 0x0a000001 as Ipv4Addr, len: 32 } },
    teid: o.teid,
    qfi: o.qfi,
    rqi: o.rqi,
    endpoint: o.endpoint as Ipv4Addr,
    source: o.source as Ipv4Addr,
    isd: { addr: o.isd as Ipv6Addr, len: o.L },
    srcPrefix: { addr: o.src as Ipv6Addr, len: o.P },
    segments: [],
    srh: 'auto',
    hopLimit: 64,
  };
}

const read128 = (b: Buffer, at: number): bigint => (b.readBigUInt64BE(at) << 64n) | b.readBigUInt64BE(at + 8);

describe('session addresses written as bytes', () => {
  const r = xorshift32(0x9433);
  const u32 = (): number => r() >>> 0;
  const u128 = (): bigint => (BigInt(u32()) << 96n) | (BigInt(u32()) << 64n) | (BigInt(u32()) << 32n) | BigInt(u32());

  it('the BigInt encoders\' addresses for 20,000 random sessions, every L and P, host bits set', () => {
    // A few prefix objects shared by many sessions (as a fill's profiles), some met once.
    const isds = Array.from({ length: 6 }, (_, i) => ({ addr: u128() as Ipv6Addr, len: (i * 11) % 57 }));
    const srcs = Array.from({ length: 6 }, (_, i) => ({ addr: u128() as Ipv6Addr, len: (i * 19) % 97 }));
    const b = Buffer.alloc(LAYOUTS.mup_session.size);
    for (let n = 0; n < 20_000; n++) {
      const isd = n % 3 === 0 ? { addr: u128() as Ipv6Addr, len: r() % 57 } : isds[r() % isds.length]!;
      const src = n % 5 === 0 ? { addr: u128() as Ipv6Addr, len: r() % 97 } : srcs[r() % srcs.length]!;
      const pick = r() % 8;
      const s = session({
        isd: isd.addr,
        L: isd.len,
        src: src.addr,
        P: src.len,
        endpoint: pick === 0 ? 0xffff_ffff : pick === 1 ? 0 : u32(),
        source: pick === 2 ? 0xffff_ffff : u32(),
        qfi: pick === 3 ? 63 : r() % 64,
        rqi: r() % 2 === 0,
        teid: pick === 4 ? 0xffff_ffff : pick === 5 ? 0 : u32(),
      });
      // Shared prefix objects stay shared: the session takes the same object.
      if (n % 3 !== 0) (s as { isd: unknown }).isd = isd;
      if (n % 5 !== 0) (s as { srcPrefix: unknown }).srcPrefix = src;
      b.fill(0);
      writeSession(s, 7, b, 0);
      const want = sessionAddresses(s);
      expect(read128(b, S.da.offset), `da, L ${s.isd.len}`).toBe(want.da);
      expect(read128(b, S.sa.offset), `sa, P ${s.srcPrefix.len}`).toBe(want.sa);
    }
  });

  it.each([
    ['a QFI of 64', { qfi: 64 }],
    ['a TEID past 32 bits', { teid: 2 ** 32 }],
    ['a negative TEID', { teid: -1 }],
    ['an endpoint past 32 bits', { endpoint: 2 ** 32 }],
    ['a source that is not an integer', { source: 1.5 }],
    ['an ISD prefix of 57', { L: 57 }],
    ['a source prefix of 97', { P: 97 }],
  ])('%s is refused, as the BigInt encoders refuse it', (_what, bad) => {
    const s = session({ isd: 0x20010db8n << 96n, L: 48, src: 0x20010db8ffffn << 80n, P: 64, endpoint: 0xc0000201, source: 0xc6336401, qfi: 9, rqi: false, teid: 1, ...bad });
    expect(() => sessionAddresses(s)).toThrow(RangeError);
    expect(() => writeSession(s, 1, Buffer.alloc(LAYOUTS.mup_session.size), 0)).toThrow(RangeError);
  });
});
