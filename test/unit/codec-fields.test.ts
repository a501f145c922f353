/**
 * The bulk writers of src/dataplane/codec.ts store their integer fields
 * byte by byte (not through Buffer.writeUInt*, a start's fill writes about
 * twenty a rule): each field must be the bytes Buffer.writeUInt* would
 * write, little- or big-endian as the layout says, at its offset in a
 * larger buffer, nothing outside the entry touched; a value that is not
 * an integer in its field's range, or a field outside the buffer or at a
 * fractional offset, is refused with a RangeError (Buffer.writeUInt*
 * refused the out-of-range ones, and wrote 1 for 1.5).
 */
import { describe, expect, it } from 'vitest';
import { LAYOUTS, writeAddrOnlyPolicy, writeLocalSid, writeLocalSidKey, writePolicy, writePolicyKey, writeSession, writeSessionKey } from '../../src/dataplane/codec.js';
import type { LocalSid, Policy, Session } from '../../src/config/types.js';
import type { Ipv4Prefix, Ipv6Prefix } from '../../src/sid/types.js';
import { xorshift32 } from '../helpers/rng.js';

const P = LAYOUTS.mup_policy.members;
const PK = LAYOUTS.mup_policy_key.members;
const L = LAYOUTS.mup_localsid.members;
const S = LAYOUTS.mup_session.members;
const SK = LAYOUTS.mup_session_key.members;

const v4 = (addr: number, len: number): Ipv4Prefix => ({ addr, len }) as Ipv4Prefix;
const v6 = (addr: bigint, len: number): Ipv6Prefix => ({ addr, len }) as Ipv6Prefix;

function policy(hopLimit: number, mtu: number | undefined, srLen: number): Policy {
  return {
    where: 0,
    match: v4(0xc0000200, 24),
    srPrefix: v6(0x20010db8n << 96n, srLen),
    srcPrefix: v6(0x20010db8ffffn << 80n, 64),
    segments: [],
    srh: 'reduced',
    hopLimit,
    ...(mtu === undefined ? {} : { mtu }),
  } as Policy;
}

function localSid(ttl: number, mtu: number | undefined, srcPrefixLen: number): LocalSid {
  return { where: 0, sid: v6(0x20010db80002n << 80n, 48), srcPrefixLen, container: 'auto', ttl, ...(mtu === undefined ? {} : { mtu }) } as LocalSid;
}

function session(hopLimit: number, mtu: number | undefined): Session {
  return {
    where: 0,
    ue: { family: 4, prefix: v4(0x0a3c0001, 32) },
    teid: 0x12345678,
    qfi: 9,
    rqi: false,
    endpoint: 0xc0000201,
    source: 0xc6336401,
    isd: v6(0x20010db80002n << 80n, 48),
    srcPrefix: v6(0x20010db8ffffn << 80n, 64),
    segments: [],
    srh: 'auto',
    hopLimit,
    ...(mtu === undefined ? {} : { mtu }),
  } as Session;
}

/** The entry written at `at` in a buffer of 0xa5 bytes with room on both sides: its bytes, and whether the rest is untouched. */
function written(size: number, at: number, write: (b: Buffer, o: number) => void): { bytes: Buffer; around: boolean } {
  const b = Buffer.alloc(at + size + 9, 0xa5);
  b.fill(0, at, at + size); // the writers' contract: the entry's bytes are zero
  write(b, at);
  return { bytes: b.subarray(at, at + size), around: [...b.subarray(0, at), ...b.subarray(at + size)].every((x) => x === 0xa5) };
}

describe('codec: integer fields of the bulk writers', () => {
  const next = xorshift32(0xc0de);
  const rules = [0, 1, 0xff, 0x100, 0xffff, 0x10000, 0x7fff_ffff, 0xffff_ffff, ...Array.from({ length: 12 }, () => next() >>> 0)];

  it.each(rules)('rule id %i: the bytes Buffer.writeUInt* writes, at the offset asked, nothing around touched', (rule) => {
    for (const at of [0, 3, 17]) {
      const p = written(LAYOUTS.mup_policy.size, at, (b, o) => writePolicy(policy(255, 65535, 56), rule, b, o));
      expect(p.around).toBe(true);
      expect(p.bytes.readUInt32LE(P.rule.offset)).toBe(rule);
      expect([p.bytes[P.hop_limit.offset], p.bytes[P.sr_plen.offset], p.bytes.readUInt16LE(P.mtu.offset)]).toEqual([255, 56, 65535]);

      const l = written(LAYOUTS.mup_localsid.size, at, (b, o) => writeLocalSid(localSid(1, 68, 96), rule, b, o));
      expect(l.around).toBe(true);
      expect(l.bytes.readUInt32LE(L.rule.offset)).toBe(rule);
      expect(l.bytes.readUInt32LE(L.pol.offset + P.rule.offset)).toBe(rule);
      expect([l.bytes[L.ttl.offset], l.bytes[L.src_plen.offset], l.bytes.readUInt16LE(L.mtu.offset)]).toEqual([1, 96, 68]);

      const s = written(LAYOUTS.mup_session.size, at, (b, o) => writeSession(session(64, 1280), rule, b, o));
      expect(s.around).toBe(true);
      expect(s.bytes.readUInt32LE(S.rule.offset)).toBe(rule);
      expect([s.bytes[S.hop_limit.offset], s.bytes.readUInt16LE(S.mtu.offset)]).toEqual([64, 1280]);
    }
  });

  it('keys: lengths little-endian, IPv4 addresses and TEIDs big-endian (network order)', () => {
    for (const [addr, len, teid] of [
      [0xc0000200, 24, undefined],
      [0xffff_ffff, 32, { value: 0xffff_ffff, len: 32 }],
      [0x01020304, 32, { value: 0x12340000, len: 16 }],
    ] as const) {
      const k = written(LAYOUTS.mup_policy_key.size, 5, (b, o) => writePolicyKey(v4(addr, len), teid, b, o));
      expect(k.around).toBe(true);
      expect(k.bytes.readUInt32LE(PK.plen.offset)).toBe(teid === undefined ? len : 32 + teid.len);
      expect(k.bytes.readUInt32BE(PK.daddr.offset)).toBe(addr);
      expect(k.bytes.readUInt32BE(PK.teid.offset)).toBe(teid?.value ?? 0);
    }
    const l = written(LAYOUTS.mup_localsid_key.size, 2, (b, o) => writeLocalSidKey(v6(0x20010db8n << 96n, 128), b, o));
    expect(l.around).toBe(true);
    expect(l.bytes.readUInt32LE(0)).toBe(128);
    const a = written(LAYOUTS.mup_policy.size, 6, (b, o) => writeAddrOnlyPolicy(0x01020304, b, o));
    expect(a.around).toBe(true);
    expect([a.bytes.readUInt32LE(P.rule.offset), a.bytes[P.flags.offset]]).toEqual([0x01020304, 2]);
    const s = written(LAYOUTS.mup_session_key.size, 1, (b, o) => writeSessionKey({ family: 4, prefix: v4(0x0a3c0001, 31) }, b, o));
    expect(s.around).toBe(true);
    expect([s.bytes[SK.family.offset], s.bytes[SK.plen.offset], s.bytes.readUInt32BE(SK.addr.offset)]).toEqual([4, 31, 0x0a3c0001]);
  });

  it.each([
    ['an 8-bit field over 255', () => writePolicy(policy(256, undefined, 48), 1, Buffer.alloc(LAYOUTS.mup_policy.size), 0)],
    ['an 8-bit field negative', () => writeLocalSid(localSid(-1, undefined, 64), 1, Buffer.alloc(LAYOUTS.mup_localsid.size), 0)],
    ['an 8-bit field not an integer', () => writeSession(session(1.5, undefined), 1, Buffer.alloc(LAYOUTS.mup_session.size), 0)],
    ['a 16-bit field over 65535', () => writePolicy(policy(64, 65536, 48), 1, Buffer.alloc(LAYOUTS.mup_policy.size), 0)],
    ['a 32-bit field over 2^32 - 1', () => writePolicy(policy(64, undefined, 48), 2 ** 32, Buffer.alloc(LAYOUTS.mup_policy.size), 0)],
    ['a 32-bit field negative', () => writeLocalSid(localSid(64, undefined, 64), -1, Buffer.alloc(LAYOUTS.mup_localsid.size), 0)],
    ['an IPv4 address over 32 bits', () => writePolicyKey(v4(2 ** 32, 32), undefined, Buffer.alloc(LAYOUTS.mup_policy_key.size), 0)],
    ['an IPv4 address negative', () => writePolicyKey(v4(-1, 32), undefined, Buffer.alloc(LAYOUTS.mup_policy_key.size), 0)],
    // Each helper's bounds, through the last field it writes in its entry: one byte short of the entry's size.
    ['a 32-bit big-endian field past the buffer end', () => writePolicyKey(v4(1, 32), undefined, Buffer.alloc(PK.teid.offset + 3), 0)],
    ['a 32-bit little-endian field past the buffer end', () => writeAddrOnlyPolicy(1, Buffer.alloc(P.rule.offset + 3), 0)],
    ['a 16-bit field past the buffer end', () => writePolicy(policy(64, undefined, 48), 1, Buffer.alloc(P.mtu.offset + 1), 0)],
    ['an 8-bit field past the buffer end', () => writeSessionKey({ family: 4, prefix: v4(1, 32) }, Buffer.alloc(SK.plen.offset), 0)],
    ['a fractional offset', () => writeAddrOnlyPolicy(1, Buffer.alloc(LAYOUTS.mup_policy.size + 1), 0.5)],
  ])('%s: a RangeError', (_what, write) => {
    expect(write).toThrow(RangeError);
  });
});
