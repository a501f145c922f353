/**
 * npm run fuzz -- --frames 100000 --seed 1   (also: make fuzz)
 *
 * Randomly mutated GTP-U/IPv4 and SRv6 frames through the real XDP program
 * (build/mup.bpf.o, BPF_PROG_TEST_RUN, repeat 1, forwarding mode tx), each
 * checked on its own, and the counters checked once at the end.
 *
 * Corpus: valid frames in both directions under a config of several policies
 * (match lengths /16../32, sr_prefix lengths /32../56, 0..4 segments, srh
 * auto/always/reduced) and local SIDs (/32../56, container always/auto/never):
 * GTP-U with and without optional fields and extension chains (container UL
 * and DL, PDCP number, RAN container, skippable unknown types, 8-header
 * chains), outer IPv4 options, inner IPv4/IPv6 TCP/UDP/ICMP, IPv4 fragments
 * and options; SRv6 with no SRH, an SRH of 1..4 entries at SL 0 (with and
 * without TLV padding), Hop-by-Hop and Destination Options; Ethernet padding;
 * plus a few frames that are not for us (ARP, VLAN, GTP-U signalling, other
 * ports and addresses).
 *
 * Mutations (deterministic from --seed): byte flips, mostly in the first 100
 * bytes; field-aware changes (length fields ±small / 0 / 0xffff, IHL,
 * version, GTP flags and type, extension lengths 0/255, next-extension and
 * next-header types, SRH type/SL/last entry/hdr len, hop limit, fragment
 * bits, ports, addresses); truncation; extension with random bytes or zero
 * padding; insertion and deletion of bytes; splicing two seeds.
 *
 * Per frame: the verdict is drop, pass or tx (never aborted or redirect); a
 * passed frame is byte-identical to the input; a tx frame is a well-formed
 * translation (IPv4: IHL 5, valid header checksum, total length = frame − 14,
 * UDP length = total − 20, GTP length = UDP length − 16, port 2152; IPv6:
 * payload length = frame − 54, SRH length consistent and inside the packet,
 * next header 4/41 matching the inner version; GTP-U over IPv6: the UDP
 * checksum by End.M.GTP6.E's rule, docs/datapath.md) AND equal, byte for byte, to
 * the translation an independent TypeScript model of docs/datapath.md
 * (test/model/rfc9433.ts) computes from the input; a frame that model finds well formed and
 * addressed to a rule must be translated. At the end: event counters sum to
 * the frames run, drop_* to the drop verdicts, pass_* to the pass verdicts,
 * fwd_tx to the tx verdicts, rule counters to the tx verdicts, counted bytes
 * to the bytes sent.
 *
 * Exit code 1 on any violation; the first 20 are printed with the input and
 * output frames in hex. Needs root (BPF) and `make bpf`.
 */
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { parseConfig } from '../../src/config/load.js';
import { whereText } from '../../src/config/keys.js';
import type { Config, LocalSid } from '../../src/config/types.js';
import { DEFAULT_OBJECT, VERDICTS, openDataplane, type Verdict } from '../../src/dataplane/index.js';
import { testRun } from '../../src/dataplane/libbpf.js';
import { ipv4Addr, ipv6Addr, ipv6ToBytes } from '../../src/sid/addr.js';
import { encodeGtp4Sid, encodeGtp6Sid, qfi as mkQfi, teid as mkTeid } from '../../src/sid/mobile.js';
import { ipv4Checksum, ipv4Header, writeUdp6Checksum, type Ipv4HeaderOptions } from '../../src/packet/frames.js';
import { gtp6eSum, model } from '../model/rfc9433.js';

// ---------------------------------------------------------------------------
// Options and report

export interface FuzzOptions {
  /** Frames to run (mutated seeds). */
  readonly frames: number;
  /** PRNG seed: the same seed and frame count give the same frames. */
  readonly seed: number;
  /** BPF object; default build/mup.bpf.o. */
  readonly object?: string;
  /** Called every `progressEvery` frames and at the end. */
  readonly onProgress?: (done: number, total: number) => void;
  readonly progressEvery?: number;
  /** Violations kept in full (with hex); default 20. All are counted. */
  readonly keepViolations?: number;
}

export interface Violation {
  /** 0-based frame number in the run; -1 for an end-of-run counting violation. */
  readonly index: number;
  /** Which invariant, and how it failed. */
  readonly reason: string;
  /** The seed frame and the mutations applied to it. */
  readonly seed: string;
  readonly mutations: readonly string[];
  readonly verdict: string;
  readonly input: string;
  readonly output: string;
}

export interface FuzzReport {
  readonly frames: number;
  readonly seed: number;
  readonly object: string;
  readonly corpus: number;
  readonly seconds: number;
  readonly framesPerSecond: number;
  readonly bytes: number;
  /** Frames per verdict (aborted and redirect included, normally 0). */
  readonly verdicts: Record<Verdict, number>;
  /** Event counter deltas over the run, non-zero ones. */
  readonly events: Record<string, number>;
  /** Frames per seed family and verdict. */
  readonly families: Record<string, Record<Verdict, number>>;
  /** Sum of the per-rule counters over the run. */
  readonly ruleHits: number;
  /** Frames whose translation was compared byte for byte with the model. */
  readonly modelChecked: number;
  /** Allowed but doubtful outcomes (see ModelResult doubt), with a count and the first input. */
  readonly notes: Record<string, { count: number; example: string }>;
  /** The counting identities, each with both sides. */
  readonly counting: readonly CountCheck[];
  /** Total number of violations (frames and counting). */
  readonly violationCount: number;
  /** The first `keepViolations` of them. */
  readonly violations: readonly Violation[];
}

export interface CountCheck {
  readonly what: string;
  readonly counted: number;
  readonly expected: number;
  readonly ok: boolean;
}

// ---------------------------------------------------------------------------
// Deterministic PRNG: sfc32 seeded through splitmix32.

export class Rng {
  #a: number;
  #b: number;
  #c: number;
  #d: number;

  constructor(seed: number) {
    let s = seed >>> 0;
    const mix = (): number => {
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.#a = mix();
    this.#b = mix();
    this.#c = mix();
    this.#d = mix();
    for (let i = 0; i < 12; i++) this.u32();
  }

  u32(): number {
    const t = (((this.#a + this.#b) | 0) + this.#d) | 0;
    this.#d = (this.#d + 1) | 0;
    this.#a = this.#b ^ (this.#b >>> 9);
    this.#b = (this.#c + (this.#c << 3)) | 0;
    this.#c = (this.#c << 21) | (this.#c >>> 11);
    this.#c = (this.#c + t) | 0;
    return t >>> 0;
  }

  /** 0..n-1 */
  int(n: number): number {
    return Math.floor((this.u32() / 4294967296) * n);
  }

  /** lo..hi inclusive */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }

  chance(p: number): boolean {
    return this.u32() / 4294967296 < p;
  }

  pick<T>(xs: readonly T[]): T {
    const x = xs[this.int(xs.length)];
    if (x === undefined) throw new RangeError('pick from an empty list');
    return x;
  }

  weighted<T>(xs: readonly (readonly [T, number])[]): T {
    let total = 0;
    for (const [, w] of xs) total += w;
    let r = (this.u32() / 4294967296) * total;
    for (const [x, w] of xs) {
      r -= w;
      if (r < 0) return x;
    }
    return xs[xs.length - 1]![0];
  }

  bytes(n: number): Buffer {
    const b = Buffer.alloc(n);
    for (let i = 0; i < n; i++) b[i] = this.u32() & 0xff;
    return b;
  }

  u128(): bigint {
    return (BigInt(this.u32()) << 96n) | (BigInt(this.u32()) << 64n) | (BigInt(this.u32()) << 32n) | BigInt(this.u32());
  }
}

// ---------------------------------------------------------------------------
// The configuration the corpus is built for

export const FUZZ_CONFIG_YAML = `
settings:
  forwarding: tx
  max_policies: 16
  max_localsids: 16
  max_sessions: 16
  hash_seed: 3054
  udp_source_ports: "40000-40999"
policies:
  - { name: n3-24, match: 192.0.2.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
  - { name: host-32-seg1, match: 198.51.100.7/32, sr_prefix: "fc00:1::/44", src_prefix: "fc00:ff::/52", segments: ["2001:db8:a::1"] }
  - name: reduced-seg2
    match: 10.10.0.0/16
    sr_prefix: "2001:db8:20::/56"
    src_prefix: "2001:db8:fe::/96"
    segments: ["2001:db8:a::1", "2001:db8:b::2"]
    srh: reduced
    hop_limit: 1
  - { name: nested-24-seg2, match: 10.10.5.0/24, sr_prefix: "2001:db8:21::/48", src_prefix: "2001:db8:fe::/64", segments: ["2001:db8:c::1", "2001:db8:c::2"] }
  - name: always-seg4
    match: 10.20.0.0/20
    sr_prefix: "2001:db8::/32"
    src_prefix: "2001:db8:fd::/80"
    segments: ["2001:db8:d::1", "2001:db8:d::2", "2001:db8:d::3", "2001:db8:d::4"]
    srh: always
    hop_limit: 255
  - { name: always-seg0, match: 172.16.5.0/25, sr_prefix: "2001:db8:3000::/40", src_prefix: "::/0", srh: always }
  - { name: auto-seg3, match: 172.16.6.0/23, sr_prefix: "2001:db8:4000::/35", src_prefix: "2001:db8:fc::/61", segments: ["2001:db8:e::1", "2001:db8:e::2", "2001:db8:e::3"] }
  - { name: reduced-seg1, match: 203.0.113.128/26, sr_prefix: "2001:db8:5::/53", src_prefix: "2001:db8:fb::/64", segments: ["2001:db8:f::1"], srh: reduced }
  # (N3, TEID) policies and plain last SIDs (issue 13): TEID prefixes over an
  # address that has its own /32 policy, over one that has none (a G-PDU no
  # prefix covers is dropped, other messages are matched by the address).
  - { name: teid-2-plain, match: 198.51.100.7/32, teid: "0x40000000/2", sid: "2001:db8:d4::4", src_prefix: "2001:db8:ff::/64" }
  - { name: teid-24-seg1, match: 198.51.100.7/32, teid: "0x12345600/24", sr_prefix: "2001:db8:24::/48", src_prefix: "2001:db8:fe::/64", segments: ["2001:db8:a::1"] }
  - { name: teid-only-1, match: 100.64.0.1/32, teid: "0x80000000/1", sid: "2001:db8:d6::6", src_prefix: "::/0", srh: always }
  - { name: teid-only-16-seg2, match: 100.64.0.1/32, teid: "0xdead0000/16", sid: "2001:db8:d46::46", src_prefix: "2001:db8:fd::/80", segments: ["2001:db8:c::1", "2001:db8:c::2"], srh: reduced }
  - { name: teid-only-32-zero, match: 100.64.0.1/32, teid: "0/32", sr_prefix: "fc00:1::/44", src_prefix: "fc00:ff::/52" }
  - { name: plain-24, match: 100.64.1.0/24, sid: "2001:db8:dd::46", src_prefix: "2001:db8:fb::/64", segments: ["2001:db8:e::1"] }
localsids:
  - { name: e-48, sid: "2001:db8:2::/48", src_prefix_len: 64 }
  - { name: e-44-auto, sid: "fc00:2::/44", src_prefix_len: 52, container: auto, ttl: 1 }
  - { name: e-56-never, sid: "2001:db8:3:4400::/56", src_prefix_len: 96, container: never, ttl: 255 }
  - { name: e-32-auto, sid: "2001:db9::/32", src_prefix_len: 0, container: auto }
  - { name: e-37, sid: "2001:dba:f800::/37", src_prefix_len: 75 }
  - { name: e6-64, behavior: end.m.gtp6.e, sid: "2001:db8:6e::/64", source: "2001:db8:ff::6e" }
  - { name: e6-88-auto, behavior: end.m.gtp6.e, sid: "fc00:6e::/88", source: "2001:db8:ff::6f", container: auto, hop_limit: 9 }
  - { name: d6-64, behavior: end.m.gtp6.d, sid: "2001:db8:6d::/64", source: "2001:db8:ff::6d", sr_prefix: "2001:db8:1::/64" }
  - name: di6-48-seg2-reduced
    behavior: end.m.gtp6.d.di
    sid: "2001:db8:6c::/48"
    source: "2001:db8:ff::6c"
    sr_prefix: "2001:db8:6e::/64"
    segments: ["2001:db8:a::1", "2001:db8:b::2"]
    srh: reduced
    hop_limit: 200
  - { name: d6-40-always, behavior: end.m.gtp6.d, sid: "2001:db8:6b00::/40", source: "2001:db8:ff::6b", sr_prefix: "fc00:1::/88", srh: always }
sessions:
  - { name: s-16, ue: 10.70.0.0/16, teid: 0x12345678, qfi: 9, endpoint: 192.0.2.1, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }
  - name: s-32-seg2-reduced
    ue: 10.70.1.1/32
    teid: 4294967295
    qfi: 63
    rqi: true
    endpoint: 203.0.113.9
    source: 198.51.100.2
    isd: "fc00:2::/44"
    src_prefix: "fc00:ff::/53"
    segments: ["2001:db8:a::1", "2001:db8:b::2"]
    srh: reduced
    hop_limit: 1
  - { name: s-policy-overlap, ue: 10.10.0.0/16, teid: 0, qfi: 0, endpoint: 192.0.2.7, source: 198.51.100.3, isd: "2001:db8:3:4400::/56", src_prefix: "::/0", srh: always }
  - { name: s6-48-seg1, ue: "2001:db8:70::/48", teid: 0x42, qfi: 1, endpoint: 192.0.2.8, source: 198.51.100.4, isd: "2001:db9::/32", src_prefix: "2001:db8:fe::/96", segments: ["2001:db8:c::1"] }
  - { name: s6-128, ue: "2001:db8:70:1::1/128", teid: 7, qfi: 5, endpoint: 192.0.2.9, source: 198.51.100.5, isd: "2001:dba:f800::/37", src_prefix: "2001:db8:fd::/75", srh: always, hop_limit: 255 }
  - { name: s6-sid-overlap, ue: "2001:db8:2::/48", teid: 8, qfi: 6, endpoint: 192.0.2.10, source: 198.51.100.6, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }
`;

export function fuzzConfig(): Config {
  return parseConfig(FUZZ_CONFIG_YAML, '<fuzz config>');
}

// ---------------------------------------------------------------------------
// Small packet builders (frames.ts builds the IPv4 header; the rest covers
// shapes the benchmarks do not need)

const ETH_HLEN = 14;
const MAC_A = Buffer.from('020000000001', 'hex');
const MAC_B = Buffer.from('020000000002', 'hex');
/** BPF_PROG_TEST_RUN takes XDP frames up to about a page minus head/tailroom. */
const MAX_FRAME = 1600;
const MIN_FRAME = ETH_HLEN;

function u16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n & 0xffff);
  return b;
}

function ether(type: number, payload: Buffer): Buffer {
  return Buffer.concat([MAC_B, MAC_A, u16(type), payload]);
}

interface V4Opts extends Omit<Ipv4HeaderOptions, 'src' | 'dst' | 'payloadLen'> {
  src: number;
  dst: number;
  payload: Buffer;
}

function ipv4(o: V4Opts): Buffer {
  const { payload, ...rest } = o;
  const h = ipv4Header({ ...rest, src: ipv4Addr(o.src >>> 0), dst: ipv4Addr(o.dst >>> 0), payloadLen: payload.length });
  return Buffer.concat([h, payload]);
}

interface V6Opts {
  src: bigint;
  dst: bigint;
  nh: number;
  payload: Buffer;
  tc?: number;
  flow?: number;
  hopLimit?: number;
  /** Override the payload length field. */
  payloadLen?: number;
}

function ipv6(o: V6Opts): Buffer {
  const h = Buffer.alloc(40);
  h.writeUInt32BE(((6 << 28) | ((o.tc ?? 0) << 20) | ((o.flow ?? 0) & 0xfffff)) >>> 0, 0);
  h.writeUInt16BE(o.payloadLen ?? o.payload.length, 4);
  h[6] = o.nh;
  h[7] = o.hopLimit ?? 64;
  ipv6ToBytes(ipv6Addr(o.src)).copy(h, 8);
  ipv6ToBytes(ipv6Addr(o.dst)).copy(h, 24);
  return Buffer.concat([h, o.payload]);
}

function udp(sport: number, dport: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt16BE(sport, 0);
  h.writeUInt16BE(dport, 2);
  h.writeUInt16BE(8 + payload.length, 4);
  return Buffer.concat([h, payload]);
}

function tcp(sport: number, dport: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(20);
  h.writeUInt16BE(sport, 0);
  h.writeUInt16BE(dport, 2);
  h.writeUInt32BE(0x01020304, 4);
  h[12] = 0x50;
  h[13] = 0x18;
  h.writeUInt16BE(0xffff, 14);
  return Buffer.concat([h, payload]);
}

function icmpEcho(type: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h[0] = type;
  h.writeUInt16BE(0x4242, 4);
  h.writeUInt16BE(1, 6);
  return Buffer.concat([h, payload]);
}

/** An IPv6 extension header (Hop-by-Hop / Destination Options) of 8·(1+units) bytes with PadN. */
function optsHeader(nh: number, units: number): Buffer {
  const h = Buffer.alloc(8 * (units + 1));
  h[0] = nh;
  h[1] = units;
  h[2] = 1; // PadN
  h[3] = h.length - 4;
  return h;
}

/** SRH with the given list; SL, TLV padding (8-byte units) selectable. */
function srh(nh: number, list: readonly bigint[], sl: number, tlvUnits = 0): Buffer {
  const h = Buffer.alloc(8 + 16 * list.length + 8 * tlvUnits);
  h[0] = nh;
  h[1] = 2 * list.length + tlvUnits;
  h[2] = 4;
  h[3] = sl;
  h[4] = list.length - 1;
  list.forEach((s, i) => ipv6ToBytes(ipv6Addr(s)).copy(h, 8 + 16 * i));
  if (tlvUnits > 0) {
    const t = 8 + 16 * list.length;
    h[t] = 4; // PadN TLV
    h[t + 1] = 8 * tlvUnits - 2;
  }
  return h;
}

interface GtpExt {
  type: number;
  /** 4·n − 2 bytes between the length and the next-type octets. */
  content: Buffer;
}

function gtpu(o: { flags: number; type: number; teid: number; seq?: number; exts: readonly GtpExt[]; inner: Buffer; firstNext?: number }): Buffer {
  const parts: Buffer[] = [];
  const hdr = Buffer.alloc(8);
  hdr[0] = o.flags;
  hdr[1] = o.type;
  hdr.writeUInt32BE(o.teid >>> 0, 4);
  parts.push(hdr);
  if (o.flags & 0x07) {
    const opt = Buffer.alloc(4);
    opt.writeUInt16BE(o.seq ?? 0, 0);
    opt[3] = o.firstNext ?? o.exts[0]?.type ?? 0;
    parts.push(opt);
    o.exts.forEach((e, i) => {
      const x = Buffer.alloc(e.content.length + 2);
      x[0] = x.length / 4;
      e.content.copy(x, 1);
      x[x.length - 1] = o.exts[i + 1]?.type ?? 0;
      parts.push(x);
    });
  }
  parts.push(o.inner);
  const b = Buffer.concat(parts);
  b.writeUInt16BE(b.length - 8, 2);
  return b;
}

/** PDU Session Container: UL (type 1) or DL (type 0, with RQI and PPP bits). */
function psc(o: { dl: boolean; qfi: number; rqi?: boolean; units?: number }): GtpExt {
  const c = Buffer.alloc(4 * (o.units ?? 1) - 2);
  c[0] = o.dl ? 0x00 : 0x10;
  c[1] = (o.qfi & 0x3f) | (o.dl && o.rqi ? 0x40 : 0);
  return { type: 0x85, content: c };
}

// ---------------------------------------------------------------------------
// Corpus

export type Family = 'gtpu' | 'srv6' | 'other';

export interface Seed {
  readonly name: string;
  readonly family: Family;
  readonly frame: Buffer;
  /** Fields the field-aware mutations know about. */
  readonly fields: readonly Field[];
}

type FieldKind =
  | 'ethertype'
  | 'version'
  | 'ihl'
  | 'byte'
  | 'len16'
  | 'frag16'
  | 'ttl'
  | 'proto'
  | 'port16'
  | 'gtpflags'
  | 'gtptype'
  | 'extlen'
  | 'nextext'
  | 'nexthdr'
  | 'exthdrlen'
  | 'srhtype'
  | 'srhsl'
  | 'srhlast';

interface Field {
  readonly off: number;
  readonly kind: FieldKind;
}

function randomIn(rng: Rng, addr: number, len: number): number {
  const host = len === 32 ? 0 : rng.u32() & (0xffffffff >>> len);
  return (addr | host) >>> 0;
}

function payloadBytes(rng: Rng): Buffer {
  const n = rng.weighted<number>([
    [0, 1],
    [rng.range(1, 16), 3],
    [rng.range(17, 120), 3],
    [rng.range(121, 600), 1],
  ]);
  return rng.bytes(n);
}

const UE_V6 = 0x2001_0db8_9999_0000_0000_0000_0000_0001n;

/** A random inner packet (the PDU), with a label. */
function innerPacket(rng: Rng): [string, Buffer] {
  const kind = rng.weighted<string>([
    ['v4-udp', 4],
    ['v4-tcp', 2],
    ['v4-icmp', 1],
    ['v4-opts', 1],
    ['v4-frag', 1],
    ['v4-sctp', 0.5],
    ['v6-udp', 3],
    ['v6-tcp', 1],
    ['v6-icmp', 1],
    ['v6-hbh', 0.5],
  ]);
  const src4 = (0x0a2d0000 | rng.int(65536)) >>> 0;
  const dst4 = rng.u32();
  const p = payloadBytes(rng);
  const sport = rng.range(1, 65535);
  const dport = rng.range(1, 65535);
  const src6 = UE_V6 + BigInt(rng.int(1 << 16));
  const dst6 = rng.u128();
  switch (kind) {
    case 'v4-udp':
      return [kind, ipv4({ src: src4, dst: dst4, proto: 17, payload: udp(sport, dport, p), tos: rng.int(256) })];
    case 'v4-tcp':
      return [kind, ipv4({ src: src4, dst: dst4, proto: 6, payload: tcp(sport, dport, p) })];
    case 'v4-icmp':
      return [kind, ipv4({ src: src4, dst: dst4, proto: 1, payload: icmpEcho(8, p) })];
    case 'v4-opts':
      return [kind, ipv4({ src: src4, dst: dst4, proto: 17, payload: udp(sport, dport, p), options: Buffer.from([1, 1, 1, 0, 7, 3, 4, 0]) })];
    case 'v4-frag':
      return [kind, ipv4({ src: src4, dst: dst4, proto: 17, payload: udp(sport, dport, p), frag: rng.pick([0x2000, 0x0010, 0x2020]) })];
    case 'v4-sctp':
      return [kind, ipv4({ src: src4, dst: dst4, proto: 132, payload: Buffer.concat([u16(sport), u16(dport), rng.bytes(8), p]) })];
    case 'v6-udp':
      return [kind, ipv6({ src: src6, dst: dst6, nh: 17, payload: udp(sport, dport, p) })];
    case 'v6-tcp':
      return [kind, ipv6({ src: src6, dst: dst6, nh: 6, payload: tcp(sport, dport, p) })];
    case 'v6-icmp':
      return [kind, ipv6({ src: src6, dst: dst6, nh: 58, payload: icmpEcho(128, p) })];
    default:
      return [kind, ipv6({ src: src6, dst: dst6, nh: 0, payload: Buffer.concat([optsHeader(17, 0), udp(sport, dport, p)]) })];
  }
}

/** Pad to the Ethernet minimum (60 bytes without FCS), sometimes beyond. */
function pad(rng: Rng, f: Buffer): [string, Buffer] {
  let out = f;
  let tag = '';
  if (out.length < 60) {
    out = Buffer.concat([out, Buffer.alloc(60 - out.length)]);
    tag = '+pad60';
  }
  if (rng.chance(0.12)) {
    const n = rng.range(1, 24);
    out = Buffer.concat([out, rng.chance(0.5) ? Buffer.alloc(n) : rng.bytes(n)]);
    tag += `+trail${n}`;
  }
  return [tag, out];
}

const GTP_SHAPES = [
  'plain',
  'S',
  'PN',
  'S+PN',
  'E-ul',
  'E-dl-rqi',
  'E-no-ext',
  'E+S+PN-dl',
  'pdcp+psc',
  'ran2+psc',
  'skip40+psc',
  'psc2units',
  'chain8',
  'psc-first-then-pdcp',
  'two-psc',
] as const;

function gtpShape(rng: Rng, shape: (typeof GTP_SHAPES)[number]): { flags: number; exts: GtpExt[]; firstNext?: number } {
  const q = rng.chance(0.2) ? 0 : rng.int(64);
  switch (shape) {
    case 'plain':
      return { flags: 0x30, exts: [] };
    case 'S':
      return { flags: 0x32, exts: [] };
    case 'PN':
      return { flags: 0x31, exts: [] };
    case 'S+PN':
      return { flags: 0x33, exts: [] };
    case 'E-ul':
      return { flags: 0x34, exts: [psc({ dl: false, qfi: q })] };
    case 'E-dl-rqi':
      return { flags: 0x34, exts: [psc({ dl: true, qfi: q, rqi: rng.chance(0.5) })] };
    case 'E-no-ext':
      return { flags: 0x34, exts: [], firstNext: 0 };
    case 'E+S+PN-dl':
      return { flags: 0x37, exts: [psc({ dl: true, qfi: q, rqi: true })] };
    case 'pdcp+psc':
      return { flags: 0x36, exts: [{ type: 0xc0, content: rng.bytes(2) }, psc({ dl: false, qfi: q })] };
    case 'ran2+psc':
      return { flags: 0x34, exts: [{ type: 0x81, content: rng.bytes(6) }, psc({ dl: false, qfi: q })] };
    case 'skip40+psc':
      return { flags: 0x34, exts: [{ type: 0x40, content: rng.bytes(2) }, psc({ dl: true, qfi: q, rqi: rng.chance(0.5) })] };
    case 'psc2units':
      return { flags: 0x34, exts: [psc({ dl: false, qfi: q, units: 2 })] };
    case 'chain8': {
      const exts: GtpExt[] = [];
      for (let i = 0; i < 7; i++) exts.push({ type: rng.pick([0xc0, 0x40, 0x82, 0x84, 0x01]), content: rng.bytes(rng.pick([2, 6])) });
      exts.splice(rng.int(8), 0, psc({ dl: rng.chance(0.5), qfi: q, rqi: true }));
      return { flags: 0x34, exts };
    }
    case 'psc-first-then-pdcp':
      return { flags: 0x34, exts: [psc({ dl: true, qfi: q, rqi: true }), { type: 0xc0, content: rng.bytes(2) }] };
    case 'two-psc':
      return { flags: 0x34, exts: [psc({ dl: true, qfi: q, rqi: true }), psc({ dl: false, qfi: rng.int(64) })] };
  }
}

const V4_OPTIONS = [Buffer.alloc(0), Buffer.from([1, 1, 1, 0]), Buffer.from([0x94, 4, 0, 0, 1, 1, 1, 0]), Buffer.concat([Buffer.from([7, 39, 4]), Buffer.alloc(37)])];

function gtpuSeed(rng: Rng, cfg: Config, i: number): Seed {
  const pi = i % cfg.policies.length;
  const pol = cfg.policies[pi]!;
  const shape = GTP_SHAPES[Math.floor(i / cfg.policies.length) % GTP_SHAPES.length]!;
  const g = gtpShape(rng, shape);
  const [innerKind, inner] = innerPacket(rng);
  const opts = rng.chance(0.8) ? V4_OPTIONS[0]! : rng.pick(V4_OPTIONS);
  // A TEID policy's seeds carry a TEID of its prefix (a valid seed is one
  // that translates); mutated TEIDs test the fallback to shorter prefixes,
  // or the drop when there is none.
  const teid =
    pol.teid !== undefined
      ? randomIn(rng, pol.teid.value, pol.teid.len) >>> 0
      : rng.chance(0.1)
        ? rng.pick([0, 0xffffffff])
        : rng.u32();
  const gtp = gtpu({ flags: g.flags, type: 0xff, teid, seq: rng.int(65536), exts: g.exts, inner, ...(g.firstNext === undefined ? {} : { firstNext: g.firstNext }) });
  const ip = ipv4({
    src: rng.u32(),
    dst: randomIn(rng, pol.match.addr, pol.match.len),
    proto: 17,
    payload: udp(rng.chance(0.5) ? 2152 : rng.range(1024, 65535), 2152, gtp),
    tos: rng.int(256),
    ttl: rng.pick([64, 1, 255]),
    options: opts,
    frag: rng.pick([0x4000, 0]),
  });
  const [padTag, frame] = pad(rng, ether(0x0800, ip));
  return { name: `gtpu/${pol.name ?? whereText('policies', pol)}/${shape}/${innerKind}${opts.length ? `/v4opts${opts.length}` : ''}${padTag}`, family: 'gtpu', frame, fields: describeFields(frame) };
}

const SRV6_SHAPES = ['none', 'srh1', 'srh2', 'srh3', 'srh4', 'srh2-tlv', 'hbh', 'dst', 'hbh+srh1', 'dst+srh3', 'hbh+dst+srh2+dst', 'srh-first-not-da'] as const;

const isGtp4e = (l: LocalSid): boolean => (l.behavior ?? 'end.m.gtp4.e') === 'end.m.gtp4.e';

function srv6Seed(rng: Rng, cfg: Config, i: number): Seed {
  const l4 = cfg.localsids.filter(isGtp4e);
  const ls = l4[i % l4.length]!;
  const shape = SRV6_SHAPES[Math.floor(i / cfg.localsids.length) % SRV6_SHAPES.length]!;
  const [innerKind, inner] = innerPacket(rng);
  const innerNh = (inner[0]! >> 4) === 4 ? 4 : 41;
  const args = { qfi: mkQfi(rng.chance(0.25) ? 0 : rng.int(64)), r: rng.chance(0.3), u: rng.chance(0.1), teid: mkTeid(rng.u32()) };
  let da: bigint = encodeGtp4Sid(ls.sid, ipv4Addr(rng.u32()), args);
  // The bits after L + 72 are padding: sometimes not zero.
  if (rng.chance(0.2)) da |= rng.u128() & ((1n << BigInt(56 - ls.sid.len)) - 1n);
  const sa = rng.u128();
  const seg = (): bigint => rng.u128();
  /** An extension header: its protocol number and how to build it given the next header. */
  type Ext = readonly [number, (next: number) => Buffer];
  const S = (n: number, tlv = 0, daFirst = true): Ext => [43, (next) => srh(next, [daFirst ? da : seg(), ...Array.from({ length: n - 1 }, seg)], 0, tlv)];
  const H: Ext = [0, (next) => optsHeader(next, rng.int(2))];
  const D: Ext = [60, (next) => optsHeader(next, rng.int(3))];
  const chains: Record<(typeof SRV6_SHAPES)[number], readonly Ext[]> = {
    none: [],
    srh1: [S(1)],
    srh2: [S(2)],
    srh3: [S(3)],
    srh4: [S(4)],
    'srh2-tlv': [S(2, 1)],
    hbh: [H],
    dst: [D],
    'hbh+srh1': [H, S(1)],
    'dst+srh3': [D, S(3)],
    'hbh+dst+srh2+dst': [H, D, S(2), D],
    'srh-first-not-da': [S(2, 0, false)],
  };
  const chain = chains[shape];
  const exts = chain.map(([, build], k) => build(chain[k + 1]?.[0] ?? innerNh));
  const nh = chain[0]?.[0] ?? innerNh;
  const ip = ipv6({
    src: sa,
    dst: da,
    nh,
    payload: Buffer.concat([...exts, inner]),
    tc: rng.int(256),
    flow: rng.int(1 << 20),
    hopLimit: rng.weighted<number>([
      [64, 8],
      [2, 1],
      [255, 1],
    ]),
  });
  const [padTag, frame] = pad(rng, ether(0x86dd, ip));
  return { name: `srv6/${ls.name ?? whereText('localsids', ls)}/${shape}/${innerKind}${padTag}`, family: 'srv6', frame, fields: describeFields(frame) };
}

/** An address inside a prefix, the rest random. */
function randomIn6(rng: Rng, p: { addr: bigint; len: number }): bigint {
  return p.len >= 128 ? p.addr : p.addr | (rng.u128() & ((1n << BigInt(128 - p.len)) - 1n));
}

const GTP6D_CHAINS = ['none', 'hbh', 'dst', 'srh0'] as const;
const GTP6E_SHAPES = ['full', 'reduced', 'three', 'hbh+reduced', 'full+dst'] as const;

/** GTP-U/IPv6 to an End.M.GTP6.D(.Di) SID, or SRv6 (SL 1) to an End.M.GTP6.E SID. */
function gtp6Seed(rng: Rng, ls: LocalSid, i: number): Seed {
  const [innerKind, inner] = innerPacket(rng);
  const S0 = (next: number): Buffer => srh(next, [rng.u128(), rng.u128()], 0);
  if (ls.behavior === 'end.m.gtp6.e') {
    const shape = GTP6E_SHAPES[Math.floor(i / 5) % GTP6E_SHAPES.length]!;
    const args = { qfi: mkQfi(rng.chance(0.25) ? 0 : rng.int(64)), r: rng.chance(0.3), u: rng.chance(0.1), teid: mkTeid(rng.u32()) };
    let da: bigint = encodeGtp6Sid(ls.sid, args);
    if (rng.chance(0.2) && ls.sid.len < 88) da |= rng.u128() & ((1n << BigInt(88 - ls.sid.len)) - 1n);
    const gnb = rng.u128();
    const innerNh = (inner[0]! >> 4) === 4 ? 4 : 41;
    const build: Record<(typeof GTP6E_SHAPES)[number], [number, Buffer]> = {
      full: [43, srh(innerNh, [gnb, da], 1)],
      reduced: [43, srh(innerNh, [gnb], 1)],
      three: [43, srh(innerNh, [gnb, da, rng.u128()], 1)],
      'hbh+reduced': [0, Buffer.concat([optsHeader(43, rng.int(2)), srh(innerNh, [gnb], 1)])],
      'full+dst': [43, Buffer.concat([srh(60, [gnb, da], 1), optsHeader(innerNh, rng.int(2))])],
    };
    const [nh, exts] = build[shape];
    const ip = ipv6({ src: rng.u128(), dst: da, nh, payload: Buffer.concat([exts, inner]), tc: rng.int(256), flow: rng.int(1 << 20), hopLimit: rng.pick([64, 2, 255]) });
    const [padTag, frame] = pad(rng, ether(0x86dd, ip));
    return { name: `srv6/${ls.name ?? whereText('localsids', ls)}/${shape}/${innerKind}${padTag}`, family: 'srv6', frame, fields: describeFields(frame) };
  }
  const shape = GTP_SHAPES[i % GTP_SHAPES.length]!;
  const chain = GTP6D_CHAINS[Math.floor(i / GTP_SHAPES.length) % GTP6D_CHAINS.length]!;
  const g = gtpShape(rng, shape);
  const teid = rng.chance(0.1) ? rng.pick([0, 0xffffffff]) : rng.u32();
  const gtp = gtpu({ flags: g.flags, type: 0xff, teid, seq: rng.int(65536), exts: g.exts, inner, ...(g.firstNext === undefined ? {} : { firstNext: g.firstNext }) });
  const u = udp(rng.chance(0.5) ? 2152 : rng.range(1024, 65535), 2152, gtp);
  const ext: Record<(typeof GTP6D_CHAINS)[number], [number, Buffer]> = {
    none: [17, Buffer.alloc(0)],
    hbh: [0, optsHeader(17, rng.int(2))],
    dst: [60, optsHeader(17, rng.int(3))],
    srh0: [43, S0(17)],
  };
  const [nh, exts] = ext[chain];
  const ip = ipv6({ src: rng.u128(), dst: randomIn6(rng, ls.sid), nh, payload: Buffer.concat([exts, u]), tc: rng.int(256), flow: rng.int(1 << 20), hopLimit: rng.pick([64, 1, 255]) });
  // Over IPv6 the UDP checksum is mandatory (a zero one is dropped: drop_udp_zero_checksum); the sum itself.
  writeUdp6Checksum(ip, 40 + exts.length);
  const [padTag, frame] = pad(rng, ether(0x86dd, ip));
  return { name: `gtpu6/${ls.name ?? whereText('localsids', ls)}/${shape}/${chain}/${innerKind}${padTag}`, family: 'gtpu', frame, fields: describeFields(frame) };
}

function otherSeeds(rng: Rng, cfg: Config): Seed[] {
  const pol = cfg.policies[0]!;
  const dst = randomIn(rng, pol.match.addr, pol.match.len);
  const [, inner] = innerPacket(rng);
  const g = (type: number, flags = 0x32): Buffer => gtpu({ flags, type, teid: rng.u32(), seq: 7, exts: [], inner: type === 0xff ? inner : rng.bytes(4) });
  const v4 = (o: Partial<V4Opts> & { payload: Buffer }): Buffer => ether(0x0800, ipv4({ src: rng.u32(), dst, proto: 17, ...o }));
  const list: [string, Buffer][] = [
    ['arp', ether(0x0806, Buffer.concat([Buffer.from('0001080006040001', 'hex'), MAC_A, Buffer.alloc(10), Buffer.alloc(8)]))],
    ['vlan-gtpu', Buffer.concat([MAC_B, MAC_A, u16(0x8100), u16(5), u16(0x0800), ipv4({ src: 1, dst, proto: 17, payload: udp(2152, 2152, g(0xff, 0x30)) })])],
    ['v4-dns', v4({ payload: udp(5353, 53, rng.bytes(30)) })],
    ['v4-tcp', v4({ proto: 6, payload: tcp(1234, 2152, rng.bytes(10)) })],
    ['gtp-echo', v4({ payload: udp(2152, 2152, g(1)) })],
    // Well-formed Echo Requests (answered): without IEs, with the Recovery IE.
    ['gtp-echo-plain', v4({ payload: udp(rng.int(65536), 2152, gtpu({ flags: 0x32, type: 1, teid: 0, seq: rng.int(65536), exts: [], inner: Buffer.alloc(0) })) })],
    ['gtp-echo-recovery', v4({ payload: udp(2152, 2152, gtpu({ flags: 0x32, type: 1, teid: 0, seq: rng.int(65536), exts: [], inner: Buffer.from([14, 3]) })) })],
    ['gtp-end-marker', v4({ payload: udp(2152, 2152, g(254, 0x30)) })],
    ['gtp-error-ind', v4({ payload: udp(2152, 2152, g(26)) })],
    ['gtpv2-header', v4({ payload: udp(2152, 2152, Buffer.concat([Buffer.from([0x48, 0xff]), u16(inner.length + 8), rng.bytes(8), inner])) })],
    ['gtpu-no-policy', ether(0x0800, ipv4({ src: 1, dst: 0xc0000301, proto: 17, payload: udp(2152, 2152, g(0xff, 0x30)) }))],
    ['gtpu-fragment', v4({ frag: 0x2000, payload: udp(2152, 2152, g(0xff, 0x30)) })],
    ['v6-not-sid', ether(0x86dd, ipv6({ src: rng.u128(), dst: 0x2001_0db8_7777n << 80n, nh: 4, payload: inner }))],
    ['v6-not-sid-srh', ether(0x86dd, ipv6({ src: rng.u128(), dst: 0xfc00_0003n << 96n, nh: 43, payload: Buffer.concat([srh(4, [1n, 2n], 1), inner]) }))],
  ];
  return list.map(([name, f]) => {
    const [padTag, frame] = pad(rng, f);
    return { name: `other/${name}${padTag}`, family: 'other' as const, frame, fields: describeFields(frame) };
  });
}

const SESSION_SHAPES = ['udp', 'tcp', 'icmp', 'frag', 'opts', 'gtpu'] as const;

/** IP to a session's UE prefix (H.M.Session.Encaps): IPv4 or IPv6 by the session's family. */
function sessionSeed(rng: Rng, x: NonNullable<Config['sessions']>[number], i: number): Seed {
  const shape = SESSION_SHAPES[i % SESSION_SHAPES.length]!;
  const p = payloadBytes(rng);
  const sport = rng.range(1, 65535);
  const dport = shape === 'gtpu' ? 2152 : rng.range(1, 65535);
  let ip: Buffer;
  if (x.ue.family === 4) {
    const dst = randomIn(rng, x.ue.prefix.addr, x.ue.prefix.len);
    const src = rng.u32();
    const tos = rng.int(256);
    ip =
      shape === 'tcp'
        ? ipv4({ src, dst, proto: 6, payload: tcp(sport, dport, p), tos })
        : shape === 'icmp'
          ? ipv4({ src, dst, proto: 1, payload: icmpEcho(8, p), tos })
          : shape === 'frag'
            ? ipv4({ src, dst, proto: 17, payload: udp(sport, dport, p), frag: rng.pick([0x2000, 0x0010, 0x2020]), tos })
            : shape === 'opts'
              ? ipv4({ src, dst, proto: 17, payload: udp(sport, dport, p), options: Buffer.from([1, 1, 1, 0, 7, 3, 4, 0]), tos })
              : ipv4({ src, dst, proto: 17, payload: udp(sport, dport, p), tos });
  } else {
    const host = x.ue.prefix.len >= 128 ? 0n : rng.u128() & ((1n << BigInt(128 - x.ue.prefix.len)) - 1n);
    const dst = x.ue.prefix.addr | host;
    const tc = rng.int(256);
    ip =
      shape === 'tcp'
        ? ipv6({ src: rng.u128(), dst, nh: 6, payload: tcp(sport, dport, p), tc, flow: rng.int(1 << 20) })
        : shape === 'icmp'
          ? ipv6({ src: rng.u128(), dst, nh: 58, payload: icmpEcho(128, p), tc })
          : ipv6({ src: rng.u128(), dst, nh: 17, payload: udp(sport, dport, p), tc });
  }
  const [padTag, frame] = pad(rng, ether(x.ue.family === 4 ? 0x0800 : 0x86dd, ip));
  return { name: `session/${x.name ?? whereText('sessions', x)}/${shape}${padTag}`, family: 'other', frame, fields: describeFields(frame) };
}

/** The seed corpus: every GTP-U shape for every policy, every SRv6 shape for every local SID, and more. */
export function buildCorpus(cfg: Config, rng: Rng): Seed[] {
  const seeds: Seed[] = [];
  const nGtp = Math.max(GTP_SHAPES.length * cfg.policies.length, 240);
  const nSrv6 = Math.max(SRV6_SHAPES.length * cfg.localsids.filter(isGtp4e).length, 240);
  for (let i = 0; i < nGtp; i++) seeds.push(gtpuSeed(rng, cfg, i));
  for (let i = 0; i < nSrv6; i++) seeds.push(srv6Seed(rng, cfg, i));
  const l6 = cfg.localsids.filter((l) => !isGtp4e(l));
  for (let i = 0; i < 24 * l6.length; i++) seeds.push(gtp6Seed(rng, l6[i % l6.length]!, i));
  seeds.push(...otherSeeds(rng, cfg), ...otherSeeds(rng, cfg));
  const sessions = cfg.sessions ?? [];
  for (let i = 0; i < 24 * sessions.length; i++) seeds.push(sessionSeed(rng, sessions[i % sessions.length]!, i));
  return seeds.filter((s) => s.frame.length <= MAX_FRAME);
}

// ---------------------------------------------------------------------------
// Field discovery (on seeds only)

function describeFields(f: Buffer): Field[] {
  const out: Field[] = [];
  const add = (off: number, kind: FieldKind): void => {
    if (off >= 0 && off < f.length) out.push({ off, kind });
  };
  if (f.length < ETH_HLEN) return out;
  add(12, 'ethertype');
  const type = f.readUInt16BE(12);
  if (type === 0x0800) describeV4(f, ETH_HLEN, true, add);
  else if (type === 0x86dd) describeV6(f, ETH_HLEN, true, add);
  return out;
}

type Add = (off: number, kind: FieldKind) => void;

function describeV4(f: Buffer, o: number, outer: boolean, add: Add): void {
  if (o + 20 > f.length) return;
  add(o, 'version');
  add(o, 'ihl');
  add(o + 1, 'byte');
  add(o + 2, 'len16');
  add(o + 6, 'frag16');
  add(o + 8, 'ttl');
  add(o + 9, 'proto');
  add(o + 19, 'byte');
  const ihl = (f[o]! & 15) * 4;
  const u = o + ihl;
  if (f[o + 9] !== 17 || u + 8 > f.length) return;
  add(u, 'port16');
  add(u + 2, 'port16');
  add(u + 4, 'len16');
  if (!outer || f.readUInt16BE(u + 2) !== 2152) return;
  const g = u + 8;
  if (g + 8 > f.length) return;
  add(g, 'gtpflags');
  add(g + 1, 'gtptype');
  add(g + 2, 'len16');
  add(g + 7, 'byte');
  let p = g + 8;
  if (f[g]! & 7) {
    add(g + 11, 'nextext');
    let next = f[g]! & 4 ? (f[g + 11] ?? 0) : 0;
    p += 4;
    for (let n = 0; next && n < 10 && p < f.length; n++) {
      const len = f[p]! * 4;
      if (!len) return;
      add(p, 'extlen');
      add(p + 1, 'byte');
      add(p + 2, 'byte');
      add(p + len - 1, 'nextext');
      next = f[p + len - 1] ?? 0;
      p += len;
    }
  }
  describeInner(f, p, add);
}

function describeInner(f: Buffer, p: number, add: Add): void {
  if (p >= f.length) return;
  add(p, 'version');
  if (f[p]! >> 4 === 4) {
    add(p, 'ihl');
    add(p + 2, 'len16');
    add(p + 6, 'frag16');
    add(p + 9, 'proto');
    add(p + 20, 'port16');
  } else {
    add(p + 4, 'len16');
    add(p + 6, 'nexthdr');
    add(p + 40, 'port16');
  }
}

function describeV6(f: Buffer, o: number, outer: boolean, add: Add): void {
  if (o + 40 > f.length) return;
  add(o, 'version');
  add(o + 1, 'byte');
  add(o + 4, 'len16');
  add(o + 6, 'nexthdr');
  add(o + 7, 'ttl');
  for (const k of [4, 6, 9, 12, 15]) add(o + 24 + k, 'byte'); // DA: prefix, IPv4 DA, args
  if (!outer) return;
  let nh = f[o + 6]!;
  let p = o + 40;
  for (let n = 0; (nh === 0 || nh === 43 || nh === 60) && n < 6 && p + 8 <= f.length; n++) {
    add(p, 'nexthdr');
    add(p + 1, 'exthdrlen');
    if (nh === 43) {
      add(p + 2, 'srhtype');
      add(p + 3, 'srhsl');
      add(p + 4, 'srhlast');
    }
    nh = f[p]!;
    p += (f[p + 1]! + 1) * 8;
  }
  if (nh === 4 || nh === 41) describeInner(f, p, add);
}

// ---------------------------------------------------------------------------
// Mutations

function mutateField(rng: Rng, f: Buffer, fd: Field): string {
  const { off, kind } = fd;
  const b = f[off]!;
  const set = (v: number): string => {
    f[off] = v & 0xff;
    return `${kind}@${off}=0x${(v & 0xff).toString(16)}`;
  };
  const set16 = (v: number): string => {
    if (off + 2 > f.length) return set(v >> 8);
    f.writeUInt16BE(v & 0xffff, off);
    return `${kind}@${off}=0x${(v & 0xffff).toString(16)}`;
  };
  const v16 = off + 2 <= f.length ? f.readUInt16BE(off) : b << 8;
  switch (kind) {
    case 'ethertype':
      return set16(rng.pick([0x0800, 0x86dd, 0x0806, 0x8100, 0x88cc, rng.int(65536)]));
    case 'version':
      return set((rng.pick([0, 4, 5, 6, 7, 15, rng.int(16)]) << 4) | (b & 15));
    case 'ihl':
      return set((b & 0xf0) | rng.pick([0, 1, 4, 5, 6, 7, 15, rng.int(16)]));
    case 'len16': {
      const d = rng.range(1, 8) * (rng.chance(0.5) ? 1 : -1);
      return set16(
        rng.weighted<number>([
          [v16 + d, 5],
          [v16 + rng.pick([4, 8, 16, 20, 40, 44, -4, -8, -16, -20, -40]), 2],
          [0, 1],
          [0xffff, 1],
          [rng.int(65536), 1],
          [rng.int(f.length + 16), 1],
        ]),
      );
    }
    case 'frag16':
      return set16(rng.pick([0, 0x4000, 0x2000, 0x0001, 0x1fff, 0x8000, 0x6000, rng.int(65536)]));
    case 'ttl':
      return set(rng.pick([0, 1, 2, 255, rng.int(256)]));
    case 'proto':
      return set(rng.pick([17, 6, 1, 4, 41, 132, 58, 0, rng.int(256)]));
    case 'port16':
      return set16(rng.pick([2152, 2151, 2153, 0, 53, 2123, rng.int(65536)]));
    case 'gtpflags':
      return set(rng.pick([0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x3c, 0x20, 0x10, 0x50, 0x48, 0x70, 0xff, 0x00, b ^ (1 << rng.int(8)), rng.int(256)]));
    case 'gtptype':
      return set(rng.pick([0xff, 1, 2, 26, 31, 254, 0, 0xfe, rng.int(256)]));
    case 'extlen':
      return set(rng.pick([0, 1, 2, 3, 255, b + 1, b - 1, rng.int(256)]));
    case 'nextext':
      return set(rng.pick([0, 0x85, 0xc0, 0x81, 0x82, 0x83, 0x84, 0x80, 0x86, 0xbf, 0xff, 0x40, 0x7f, 0x01, rng.int(256)]));
    case 'nexthdr':
      return set(rng.pick([0, 4, 41, 43, 60, 59, 6, 17, 58, 44, 50, rng.int(256)]));
    case 'exthdrlen':
      return set(rng.pick([0, 1, 2, 3, 8, 255, b + 1, b - 1, b + 2, rng.int(256)]));
    case 'srhtype':
      return set(rng.pick([4, 0, 2, 3, 5, rng.int(256)]));
    case 'srhsl':
      return set(rng.pick([0, 1, 2, 3, 4, 255, rng.int(256)]));
    case 'srhlast':
      return set(rng.pick([0, 1, 2, 3, 4, 255, rng.int(256)]));
    case 'byte':
      return set(rng.chance(0.5) ? b ^ (1 << rng.int(8)) : rng.int(256));
  }
}

const MUTATORS = [
  ['flip', 30],
  ['field', 40],
  ['truncate', 8],
  ['extend', 7],
  ['insert', 4],
  ['delete', 4],
  ['splice', 7],
] as const;

type Mutator = (typeof MUTATORS)[number][0];

/** A position, 80% of the time in the first 100 bytes. */
function headPos(rng: Rng, len: number): number {
  return rng.chance(0.8) ? rng.int(Math.min(100, len)) : rng.int(len);
}

/** Apply 0..5 mutations to a copy of the seed. */
export function mutate(rng: Rng, seed: Seed, corpus: readonly Seed[]): { frame: Buffer; ops: string[] } {
  let f = Buffer.from(seed.frame);
  const ops: string[] = [];
  const n = rng.weighted<number>([
    [0, 4],
    [1, 55],
    [2, 26],
    [3, 10],
    [5, 5],
  ]);
  for (let i = 0; i < n; i++) {
    const m: Mutator = rng.weighted(MUTATORS);
    switch (m) {
      case 'flip': {
        const k = rng.range(1, 4);
        const at: number[] = [];
        for (let j = 0; j < k; j++) {
          const p = headPos(rng, f.length);
          f[p] = f[p]! ^ rng.range(1, 255);
          at.push(p);
        }
        ops.push(`flip@${at.join(',')}`);
        break;
      }
      case 'field': {
        const fields = seed.fields.filter((x) => x.off < f.length);
        if (fields.length === 0) {
          const p = headPos(rng, f.length);
          f[p] = f[p]! ^ rng.range(1, 255);
          ops.push(`flip@${p}`);
        } else {
          ops.push(mutateField(rng, f, rng.pick(fields)));
        }
        break;
      }
      case 'truncate': {
        if (f.length <= MIN_FRAME) break;
        const to = rng.chance(0.6) ? rng.range(MIN_FRAME, Math.min(f.length - 1, 130)) : rng.range(MIN_FRAME, f.length - 1);
        f = f.subarray(0, to);
        ops.push(`truncate@${to}`);
        break;
      }
      case 'extend': {
        const k = rng.range(1, 64);
        f = Buffer.concat([f, rng.chance(0.5) ? Buffer.alloc(k) : rng.bytes(k)]);
        ops.push(`extend+${k}`);
        break;
      }
      case 'insert': {
        const p = rng.range(ETH_HLEN, Math.min(100, f.length));
        const k = rng.pick([1, 2, 4, 8, rng.range(1, 40)]);
        f = Buffer.concat([f.subarray(0, p), rng.bytes(k), f.subarray(p)]);
        ops.push(`insert@${p}+${k}`);
        break;
      }
      case 'delete': {
        if (f.length <= MIN_FRAME + 1) break;
        const p = rng.range(ETH_HLEN, Math.min(100, f.length - 1));
        const k = Math.min(f.length - p, rng.pick([1, 2, 4, 8, rng.range(1, 40)]));
        f = Buffer.concat([f.subarray(0, p), f.subarray(p + k)]);
        ops.push(`delete@${p}-${k}`);
        break;
      }
      case 'splice': {
        const other = rng.pick(corpus);
        const a = rng.range(MIN_FRAME, f.length);
        const b = rng.int(other.frame.length);
        f = Buffer.concat([f.subarray(0, a), other.frame.subarray(b)]);
        ops.push(`splice@${a}<-${other.name}@${b}`);
        break;
      }
    }
  }
  if (f.length > MAX_FRAME) {
    f = f.subarray(0, MAX_FRAME);
    ops.push(`cap@${MAX_FRAME}`);
  }
  if (f.length < MIN_FRAME) f = Buffer.concat([f, Buffer.alloc(MIN_FRAME - f.length)]);
  return { frame: Buffer.from(f), ops };
}

// ---------------------------------------------------------------------------
// Per-frame checks

/** Structural checks of a tx frame, independent of the model. Returns the first failure. */
export function checkTranslation(input: Buffer, out: Buffer): string | null {
  if (out.length < ETH_HLEN) return `output of ${out.length} bytes has no Ethernet header`;
  if (!out.subarray(0, 6).equals(input.subarray(6, 12)) || !out.subarray(6, 12).equals(input.subarray(0, 6))) {
    return 'MACs not swapped (forwarding tx)';
  }
  const inType = input.readUInt16BE(12);
  const type = out.readUInt16BE(12);
  if (type === 0x0800) {
    if (inType !== 0x86dd) return `IPv4 output from ethertype 0x${inType.toString(16)}`;
    const o = ETH_HLEN;
    if (out.length < o + 36) return `IPv4 output of ${out.length} bytes: no room for IPv4/UDP/GTP-U`;
    if (out[o] !== 0x45) return `IPv4 version/IHL 0x${out[o]!.toString(16)}, not 0x45`;
    if (ipv4Checksum(out, o, o + 20) !== 0) return `bad IPv4 header checksum 0x${out.readUInt16BE(o + 10).toString(16)}`;
    const tot = out.readUInt16BE(o + 2);
    if (tot !== out.length - ETH_HLEN) return `IPv4 total length ${tot} != frame length ${out.length} - 14`;
    if (out[o + 9] !== 17) return `IPv4 protocol ${out[o + 9]}, not UDP`;
    const ul = out.readUInt16BE(o + 24);
    if (ul !== tot - 20) return `UDP length ${ul} != total length ${tot} - 20`;
    if (out.readUInt16BE(o + 22) !== 2152) return `UDP destination port ${out.readUInt16BE(o + 22)}, not 2152`;
    const g = o + 28;
    const flags = out[g]!;
    if (flags !== 0x30 && flags !== 0x34) return `GTP flags 0x${flags.toString(16)}`;
    if (out[g + 1] !== 0xff) return `GTP type ${out[g + 1]}, not G-PDU`;
    const gl = out.readUInt16BE(g + 2);
    if (gl !== ul - 16) return `GTP length ${gl} != UDP length ${ul} - 16`;
    let inner = g + 8;
    if (flags === 0x34) {
      if (out.length < g + 16) return 'GTP container cut short';
      if (out[g + 11] !== 0x85 || out[g + 12] !== 1 || out[g + 15] !== 0) return 'GTP PDU Session Container malformed';
      inner += 8;
    }
    if (inner >= out.length) return 'no inner packet after GTP-U';
    const v = out[inner]! >> 4;
    if (v !== 4 && v !== 6) return `inner packet version ${v}`;
    return null;
  }
  if (type === 0x86dd) {
    if (inType !== 0x0800 && inType !== 0x86dd) return `IPv6 output from ethertype 0x${inType.toString(16)}`;
    const o = ETH_HLEN;
    if (out.length < o + 40) return `IPv6 output of ${out.length} bytes`;
    if (out[o]! >> 4 !== 6) return `IPv6 version ${out[o]! >> 4}`;
    const pl = out.readUInt16BE(o + 4);
    if (pl !== out.length - 54) return `IPv6 payload length ${pl} != frame length ${out.length} - 54`;
    let nh = out[o + 6]!;
    let p = o + 40;
    if (nh === 43) {
      if (p + 8 > out.length) return 'SRH cut short';
      const hl = out[p + 1]!;
      const len = (hl + 1) * 8;
      if (out[p + 2] !== 4) return `routing type ${out[p + 2]}`;
      if (p + len > out.length) return `SRH of ${len} bytes past the frame`;
      const last = out[p + 4]!;
      if (hl !== 2 * (last + 1)) return `SRH hdr ext len ${hl} != 2 x (last entry ${last} + 1)`;
      const sl = out[p + 3]!;
      if (sl > last + 1) return `segments left ${sl} > last entry ${last} + 1`;
      if (sl <= last && !out.subarray(p + 8 + 16 * sl, p + 24 + 16 * sl).equals(out.subarray(o + 24, o + 40))) {
        return `DA is not segment list[${sl}]`;
      }
      nh = out[p]!;
      p += len;
    }
    if (nh === 17) {
      // End.M.GTP6.E: GTP-U over IPv6, the UDP checksum mandatory.
      if (p !== o + 40) return 'GTP-U/IPv6 output with extension headers';
      if (out.length < p + 16) return 'GTP-U/IPv6 output cut short';
      if (out.readUInt16BE(p + 4) !== pl) return `UDP length ${out.readUInt16BE(p + 4)} != payload length ${pl}`;
      if (out.readUInt16BE(p + 2) !== 2152) return 'UDP destination port not 2152';
      const fl = out[p + 8]!;
      if ((fl !== 0x30 && fl !== 0x34) || out[p + 9] !== 0xff) return 'not a G-PDU';
      // The checksum sums right over the bytes, or over the inner packet
      // as its own checksums describe it (End.M.GTP6.E's rule).
      if (gtp6eSum(out, p, p + 8 + (fl === 0x34 ? 16 : 8), pl) !== 0xffff) return 'bad UDP checksum over IPv6 (End.M.GTP6.E rule)';
      if (out.readUInt16BE(p + 10) !== pl - 16) return 'GTP length != UDP length - 16';
      return null;
    }
    if (nh !== 4 && nh !== 41) return `next header chain ends in ${nh}, not 4 or 41`;
    if (p >= out.length) return 'no inner packet after the IPv6 headers';
    const v = out[p]! >> 4;
    if (v !== (nh === 4 ? 4 : 6)) return `next header ${nh} but inner version ${v}`;
    return null;
  }
  return `translated frame with ethertype 0x${type.toString(16)}`;
}

export interface FrameCheck {
  /** The invariant that failed, or null. */
  readonly reason: string | null;
  /** The output was compared byte for byte with the model's translation. */
  readonly modelChecked: boolean;
  /** Something allowed but worth reporting (see ModelResult doubt). */
  readonly note?: string;
}

/** Every check of one frame's outcome. */
export function checkFrame(cfg: Config, input: Buffer, verdict: Verdict, out: Buffer): FrameCheck {
  if (verdict === 'aborted') return { reason: 'verdict XDP_ABORTED', modelChecked: false };
  if (verdict === 'redirect') return { reason: 'verdict XDP_REDIRECT in forwarding mode tx', modelChecked: false };
  const m = model(input, cfg);
  if (m.kind === 'reply') {
    if (verdict !== 'tx') return { reason: `verdict ${verdict} for an Echo Request: not answered`, modelChecked: false };
    if (!m.out.equals(out)) return { reason: `Echo Response differs from the model (${diffAt(m.out, out)})`, modelChecked: true };
    return { reason: null, modelChecked: true };
  }
  const must = m.kind === 'translate' && m.doubt === undefined;
  if (verdict === 'pass') {
    if (!out.equals(input)) return { reason: `passed frame modified (${diffAt(input, out)})`, modelChecked: false };
    if (must) return { reason: 'passed a frame the model translates', modelChecked: false };
    return { reason: null, modelChecked: false };
  }
  if (verdict === 'drop') {
    if (must) return { reason: 'dropped a frame the model translates', modelChecked: false };
    return { reason: null, modelChecked: false };
  }
  const bad = checkTranslation(input, out);
  if (bad !== null) return { reason: `bad translation: ${bad}`, modelChecked: false };
  if (m.kind === 'not-ours') return { reason: 'translated a frame the model says is not for us', modelChecked: false };
  if (m.kind === 'malformed') return { reason: `translated a malformed frame: ${m.why}`, modelChecked: false };
  if (!m.out.equals(out)) {
    const i = firstDiff(m.out, out);
    let field = '?';
    for (const [at, name] of m.layout) if (at <= i) field = name;
    return {
      reason: `differs from the model translation at byte ${i} (${field}): expected ${hexAround(m.out, i)}, got ${hexAround(out, i)}; lengths ${m.out.length} / ${out.length}`,
      modelChecked: true,
    };
  }
  return { reason: null, modelChecked: true, ...(m.doubt === undefined ? {} : { note: m.doubt }) };
}

function firstDiff(a: Buffer, b: Buffer): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return n;
}

function diffAt(a: Buffer, b: Buffer): string {
  return a.length !== b.length ? `length ${a.length} -> ${b.length}` : `first difference at byte ${firstDiff(a, b)}`;
}

function hexAround(b: Buffer, i: number): string {
  return b.subarray(i, i + 8).toString('hex') || '(end)';
}

// ---------------------------------------------------------------------------
// The run

export function fuzz(o: FuzzOptions): FuzzReport {
  if (!Number.isSafeInteger(o.frames) || o.frames < 1) throw new RangeError(`frames must be a positive integer, got ${o.frames}`);
  if (!Number.isSafeInteger(o.seed)) throw new RangeError(`seed must be an integer, got ${o.seed}`);
  const cfg = fuzzConfig();
  const keep = o.keepViolations ?? 20;
  const every = o.progressEvery ?? 10_000;
  const rng = new Rng(o.seed);
  const corpus = buildCorpus(cfg, rng);
  const object = o.object ?? DEFAULT_OBJECT;
  const dp = openDataplane({ object, config: cfg });
  const verdicts: Record<Verdict, number> = { aborted: 0, drop: 0, pass: 0, tx: 0, redirect: 0 };
  const families: Record<string, Record<Verdict, number>> = {};
  const violations: Violation[] = [];
  const notes: Record<string, { count: number; example: string }> = {};
  let violationCount = 0;
  let modelChecked = 0;
  let bytes = 0;
  const t0 = performance.now();
  try {
    const record = (v: Omit<Violation, 'input' | 'output'> & { input: Buffer; output: Buffer }): void => {
      violationCount++;
      if (violations.length < keep) violations.push({ ...v, input: v.input.toString('hex'), output: v.output.toString('hex') });
    };
    const before = dp.counters();
    let ran = 0;
    for (let i = 0; i < o.frames; i++) {
      const seed = rng.pick(corpus);
      const { frame, ops } = mutate(rng, seed, corpus);
      let retval: number;
      let out: Buffer;
      try {
        const r = testRun(dp.progFd, { dataIn: frame, dataOutSize: frame.length + 256, repeat: 1 }, `frame ${i}`);
        retval = r.retval;
        out = r.dataOut ?? Buffer.alloc(0);
      } catch (e) {
        const why = e instanceof Error ? e.message : String(e);
        record({ index: i, reason: `BPF_PROG_TEST_RUN failed: ${why}`, seed: seed.name, mutations: ops, verdict: '-', input: frame, output: Buffer.alloc(0) });
        continue;
      }
      ran++;
      bytes += frame.length;
      const verdict = VERDICTS[retval];
      if (verdict === undefined) {
        record({ index: i, reason: `retval ${retval} is not an XDP action`, seed: seed.name, mutations: ops, verdict: String(retval), input: frame, output: out });
        continue;
      }
      verdicts[verdict]++;
      const fam = (families[seed.family] ??= { aborted: 0, drop: 0, pass: 0, tx: 0, redirect: 0 });
      fam[verdict]++;
      const c = checkFrame(cfg, frame, verdict, out);
      if (c.modelChecked) modelChecked++;
      if (c.note !== undefined) (notes[c.note] ??= { count: 0, example: frame.toString('hex') }).count++;
      if (c.reason !== null) record({ index: i, reason: c.reason, seed: seed.name, mutations: ops, verdict, input: frame, output: out });
      if (o.onProgress && (i + 1) % every === 0) o.onProgress(i + 1, o.frames);
    }
    const seconds = (performance.now() - t0) / 1000;
    const after = dp.counters();
    if (o.onProgress && o.frames % every !== 0) o.onProgress(o.frames, o.frames);

    const events: Record<string, number> = {};
    let evPackets = 0;
    let evBytes = 0;
    let drops = 0;
    let passes = 0;
    for (const [name, v] of Object.entries(after.events)) {
      const b = before.events[name] ?? { packets: 0n, bytes: 0n };
      const n = Number(v.packets - b.packets);
      evPackets += n;
      evBytes += Number(v.bytes - b.bytes);
      if (n !== 0) events[name] = n;
      if (name.startsWith('drop_')) drops += n;
      if (name.startsWith('pass_')) passes += n;
    }
    let ruleHits = 0;
    for (const r of after.rules) {
      const b = before.rules.find((x) => x.rule === r.rule);
      ruleHits += Number(r.packets - (b?.packets ?? 0n));
    }
    const counting: CountCheck[] = [
      cc('sum of event counters = frames run', evPackets, ran),
      cc('sum of event bytes = bytes sent', evBytes, bytes),
      cc('drop_* = drop verdicts', drops, verdicts.drop),
      cc('pass_* = pass verdicts', passes, verdicts.pass),
      cc('fwd_tx + reply_echo = tx verdicts', (events['fwd_tx'] ?? 0) + (events['reply_echo'] ?? 0), verdicts.tx),
      cc('rule counters = tx verdicts - reply_echo', ruleHits, verdicts.tx - (events['reply_echo'] ?? 0)),
    ];
    for (const k of counting) {
      if (k.ok) continue;
      violationCount++;
      if (violations.length < keep) {
        violations.push({ index: -1, reason: `counting: ${k.what}: counted ${k.counted}, expected ${k.expected}`, seed: '', mutations: [], verdict: '', input: '', output: '' });
      }
    }
    return {
      frames: o.frames,
      seed: o.seed,
      object,
      corpus: corpus.length,
      seconds,
      framesPerSecond: o.frames / seconds,
      bytes,
      verdicts,
      events,
      families,
      ruleHits,
      modelChecked,
      notes,
      counting,
      violationCount,
      violations,
    };
  } finally {
    dp.close();
  }
}

function cc(what: string, counted: number, expected: number): CountCheck {
  return { what, counted, expected, ok: counted === expected };
}

// ---------------------------------------------------------------------------
// Report and CLI

function pct(n: number, total: number): string {
  return `${((100 * n) / Math.max(total, 1)).toFixed(1)}%`;
}

export function formatReport(r: FuzzReport): string {
  const lines: string[] = [];
  lines.push(
    `fuzz: ${r.frames} frames (seed ${r.seed}, corpus ${r.corpus} seeds) in ${r.seconds.toFixed(1)} s, ` +
      `${Math.round(r.framesPerSecond).toLocaleString('en-US')} frames/s; ${r.object}`,
  );
  const v = r.verdicts;
  lines.push(
    `verdicts: tx ${v.tx} (${pct(v.tx, r.frames)})  drop ${v.drop} (${pct(v.drop, r.frames)})  pass ${v.pass} (${pct(v.pass, r.frames)})` +
      `  aborted ${v.aborted}  redirect ${v.redirect}`,
  );
  for (const [fam, fv] of Object.entries(r.families)) {
    const n = fv.tx + fv.drop + fv.pass + fv.aborted + fv.redirect;
    lines.push(`  ${fam.padEnd(5)} seeds: ${String(n).padStart(7)} frames  tx ${pct(fv.tx, n).padStart(6)}  drop ${pct(fv.drop, n).padStart(6)}  pass ${pct(fv.pass, n).padStart(6)}`);
  }
  lines.push(`translations compared byte for byte with the model: ${r.modelChecked}`);
  for (const [what, n] of Object.entries(r.notes)) lines.push(`note: ${what}: ${n.count} frames, e.g. ${n.example}`);
  lines.push('events:');
  for (const [name, n] of Object.entries(r.events).sort((a, b) => b[1] - a[1])) lines.push(`  ${name.padEnd(26)} ${String(n).padStart(8)}`);
  lines.push('counting:');
  for (const k of r.counting) lines.push(`  ${k.ok ? 'ok  ' : 'FAIL'} ${k.what}: ${k.counted} vs ${k.expected}`);
  lines.push(`violations: ${r.violationCount}`);
  r.violations.forEach((x, i) => {
    lines.push(`  #${i + 1} frame ${x.index}: ${x.reason}`);
    if (x.index >= 0) {
      lines.push(`     seed ${x.seed}; mutations ${x.mutations.join(' ') || '(none)'}; verdict ${x.verdict}`);
      lines.push(`     in  ${x.input}`);
      lines.push(`     out ${x.output}`);
    }
  });
  if (r.violationCount > r.violations.length) lines.push(`  ... and ${r.violationCount - r.violations.length} more`);
  return lines.join('\n');
}

const USAGE = `usage: npm run fuzz -- [--frames N] [--seed S] [--object PATH] [--json] [--quiet]
  --frames N     frames to run (default 100000)
  --seed S       PRNG seed (default 1); the same seed and N give the same frames
  --object PATH  BPF object (default build/mup.bpf.o)
  --json         print the report as JSON
  --quiet        no progress on stderr
Exit code 1 on any violation.`;

function main(): void {
  const { values } = parseArgs({
    options: {
      frames: { type: 'string', default: '100000' },
      seed: { type: 'string', default: '1' },
      object: { type: 'string' },
      json: { type: 'boolean', default: false },
      quiet: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
    allowPositionals: false,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const frames = Number(values.frames);
  const seed = Number(values.seed);
  if (!Number.isSafeInteger(frames) || frames < 1) throw new Error(`--frames ${values.frames}: expected a positive integer\n${USAGE}`);
  if (!Number.isSafeInteger(seed)) throw new Error(`--seed ${values.seed}: expected an integer\n${USAGE}`);
  const report = fuzz({
    frames,
    seed,
    ...(values.object === undefined ? {} : { object: values.object }),
    ...(values.quiet ? {} : { onProgress: (done: number, total: number) => process.stderr.write(`fuzz: ${done}/${total}\n`) }),
  });
  process.stdout.write(`${values.json ? JSON.stringify(report, null, 2) : formatReport(report)}\n`);
  if (report.violationCount > 0) process.exitCode = 1;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    main();
  } catch (e) {
    process.stderr.write(`fuzz: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exitCode = 1;
  }
}

