/**
 * Running packet cases through the data plane and checking the result
 * against the expectation built by test/fixtures/cases.py.
 */
import type { Dataplane, RunResult } from '../../src/dataplane/index.js';
import { describeMismatch, type PacketCase, type Verdict } from './scapy.js';
import { gtpuFrame, innerUdp4 } from '../../src/packet/frames.js';
import { parseIpv4 } from '../../src/sid/addr.js';

export interface Expectation {
  readonly verdict: Verdict;
  readonly event: string;
  /** hex; null = output not compared (drops). */
  readonly expected: string | null;
}

/** One run as seen by the test: what went in, what came out. */
export interface Seen {
  readonly name: string;
  readonly input: Buffer;
  readonly result: RunResult;
  /** Rule the case expects to count the packet (translated cases). */
  readonly rule?: string;
  /** The run met its case's expectation. */
  readonly ok: boolean;
}

/**
 * Run `input` and compare with `exp`. Returns the result, or throws an Error
 * whose message lists every difference (after handing the result to
 * `record`, so that counter checks see every run) and shows input, expected and actual
 * output decoded by scapy.
 */
export async function runAndCheck(
  dp: Dataplane,
  name: string,
  input: Buffer,
  exp: Expectation,
  record?: (r: RunResult, ok: boolean) => void,
): Promise<RunResult> {
  let r: RunResult;
  try {
    r = dp.run(input);
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    throw new Error(await describeMismatch(`${name}: dp.run threw`, [why], input, null, Buffer.alloc(0)));
  }
  const problems: string[] = [];
  if (r.verdict !== exp.verdict) problems.push(`verdict: expected ${exp.verdict}, got ${r.verdict}`);
  if (r.event !== exp.event) problems.push(`event: expected ${exp.event}, got ${r.event ?? 'null (no event counted)'}`);
  const expected = exp.expected === null ? null : Buffer.from(exp.expected, 'hex');
  if (expected !== null && !expected.equals(r.out)) problems.push('output bytes differ from the expected packet');
  record?.(r, problems.length === 0);
  if (problems.length > 0) {
    throw new Error(await describeMismatch(`${name}: mismatch`, problems, input, expected, r.out));
  }
  return r;
}

export function caseExpectation(c: PacketCase): Expectation {
  // "pass" must leave the frame unchanged; cases.py already sets expected = input then.
  return { verdict: c.verdict, event: c.event, expected: c.expected ?? (c.verdict === 'pass' ? c.input : null) };
}

/** The fields of an IPv4/UDP/GTP-U frame that a round trip must preserve. */
export interface GtpuFields {
  readonly src: string;
  readonly dst: string;
  readonly tos: number;
  readonly dport: number;
  readonly sport: number;
  readonly type: number;
  readonly teid: number;
  readonly qfi: number;
  readonly rqi: number;
  readonly container: boolean;
  readonly inner: Buffer;
}

function ipv4(b: Buffer): string {
  return [...b].join('.');
}

/** Parse Ethernet/IPv4/UDP/GTP-U (throws on anything else). */
export function parseGtpu(f: Buffer): GtpuFields {
  if (f.length < 14 + 20 + 8 + 8 || f.readUInt16BE(12) !== 0x0800) throw new Error('not an IPv4 frame long enough for GTP-U');
  const ip = 14;
  const ihl = (f[ip]! & 0x0f) * 4;
  const udp = ip + ihl;
  const g = udp + 8;
  const flags = f[g]!;
  const len = f.readUInt16BE(g + 2);
  let p = g + 8;
  let qfi = 0;
  let rqi = 0;
  let container = false;
  if (flags & 0x07) {
    let nt = flags & 0x04 ? f[p + 3]! : 0;
    p += 4;
    for (let n = 0; nt !== 0; n++) {
      if (n > 16) throw new Error('GTP-U extension chain longer than 16');
      const l = f[p]! * 4;
      if (l === 0) throw new Error('GTP-U extension of length 0');
      if (nt === 0x85) {
        container = true;
        qfi = f[p + 2]! & 0x3f;
        rqi = f[p + 1]! >> 4 === 0 ? (f[p + 2]! >> 6) & 1 : 0;
      }
      nt = f[p + l - 1]!;
      p += l;
    }
  }
  return {
    src: ipv4(f.subarray(ip + 12, ip + 16)),
    dst: ipv4(f.subarray(ip + 16, ip + 20)),
    tos: f[ip + 1]!,
    sport: f.readUInt16BE(udp),
    dport: f.readUInt16BE(udp + 2),
    type: f[g + 1]!,
    teid: f.readUInt32BE(g + 4),
    qfi,
    rqi,
    container,
    inner: f.subarray(p, g + 8 + len),
  };
}

/**
 * A G-PDU to `dst` (uplink: the gNB 198.51.100.1 to an N3 address), TEID
 * `teid` (0x1234 unless given), QFI 9, carrying a small UDP datagram: the frame tests send to
 * see where a policy's packets go.
 */
export function uplinkFrame(dst: string, teid = 0x1234): Buffer {
  return gtpuFrame({
    src: parseIpv4('198.51.100.1', 't'),
    dst: parseIpv4(dst, 't'),
    teid,
    qfi: 9,
    inner: innerUdp4({ src: parseIpv4('10.45.0.2', 't'), dst: parseIpv4('203.0.113.5', 't'), sport: 1, dport: 2, len: 40 }),
  });
}
