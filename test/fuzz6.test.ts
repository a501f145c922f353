/**
 * Mutated GTP-U-over-IPv6, Echo and MTU frames (the inputs of cases6.py,
 * bytes flipped, lengths changed, cut short) through the program. The main
 * fuzzer (test/fuzz/fuzz.ts) compares every GTP4 result with a model; for
 * these paths we check the invariants that need none:
 * - never XDP_ABORTED or XDP_REDIRECT (forwarding mode tx);
 * - every frame counted in exactly one event (dp.run refuses otherwise);
 * - a passed frame is unchanged, a dropped one has a drop_* event;
 * - what leaves by XDP_TX is a well-formed IPv4 or IPv6 frame: version,
 *   lengths equal to the frame, IPv4 header checksum, and for UDP over IPv6
 *   (GTP-U, Echo Responses) and ICMP/ICMPv6 errors a checksum that sums
 *   right (a G-PDU's by End.M.GTP6.E's rule, docs/datapath.md: over the
 *   inner packet as its own checksums describe it, so a mutated inner
 *   checksum must move the outer one by exactly as much).
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { udp6ChecksumOk } from './model/rfc9433.js';
import { openDataplane } from '../src/dataplane/index.js';
import { CASES6_SCRIPT, loadCases } from './helpers/scapy.js';
import { xorshift32 } from './helpers/rng.js';

/** xorshift32: the same frames every run. */
const rng = xorshift32;

function sum16(b: Buffer, from: number, to: number, start = 0): number {
  let s = start;
  for (let i = from; i < to; i += 2) s += (b[i]! << 8) | (i + 1 < to ? b[i + 1]! : 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

/** null when the frame is well formed, else why not. */
function malformed(f: Buffer): string | null {
  if (f.length < 14) return 'shorter than Ethernet';
  const type = f.readUInt16BE(12);
  if (type === 0x0800) {
    const ihl = (f[14]! & 15) * 4;
    if (f[14]! >> 4 !== 4 || ihl < 20) return 'IPv4 version/IHL';
    if (f.readUInt16BE(16) !== f.length - 14) return `IPv4 total length ${f.readUInt16BE(16)} != ${f.length - 14}`;
    if (sum16(f, 14, 14 + ihl) !== 0xffff) return 'IPv4 header checksum';
    if (f[23] === 1 && sum16(f, 14 + ihl, f.length) !== 0xffff) return 'ICMP checksum';
    return null;
  }
  if (type === 0x86dd) {
    if (f[14]! >> 4 !== 6) return 'IPv6 version';
    const plen = f.readUInt16BE(18);
    if (plen !== f.length - 54) return `IPv6 payload length ${plen} != ${f.length - 54}`;
    const nh = f[20]!;
    if (nh === 17 && !udp6ChecksumOk(f)) return 'UDP checksum over IPv6 (End.M.GTP6.E rule for a G-PDU)';
    if (nh === 58) {
      const pseudo = sum16(f, 22, 54, plen + nh);
      if (sum16(f, 54, f.length, pseudo) !== 0xffff) return 'ICMPv6 checksum';
    }
    return null;
  }
  return `ethertype 0x${type.toString(16)}`;
}

describe('mutated GTP6 / Echo / MTU frames', () => {
  it('never abort, count each frame once, pass unchanged, and send only well-formed frames', async () => {
    const { groups } = await loadCases(CASES6_SCRIPT);
    const next = rng(6);
    const verdicts: Record<string, number> = {};
    const problems: string[] = [];
    let frames = 0;
    for (const group of groups) {
      const dp = openDataplane({ config: parseConfig(group.config, group.name) });
      try {
        for (const c of group.cases) {
          const seed = Buffer.from(c.input, 'hex');
          for (let k = 0; k < 12; k++) {
            const f = Buffer.from(seed);
            const n = 1 + (next() % 3);
            for (let j = 0; j < n; j++) {
              const at = 14 + (next() % Math.max(1, Math.min(f.length - 14, 140)));
              const op = next() % 4;
              if (op === 0) f[at] = next() & 0xff;
              else if (op === 1) f[at] = f[at]! ^ (1 << (next() % 8));
              else if (op === 2 && at + 1 < f.length) f.writeUInt16BE(next() & 0xffff, at);
              else f[at] = f[at]! + (next() % 2 ? 1 : 255);
            }
            const frame = next() % 5 === 0 ? f.subarray(0, 14 + (next() % Math.max(1, f.length - 14))) : f;
            frames++;
            const r = dp.run(Buffer.from(frame));
            verdicts[r.verdict] = (verdicts[r.verdict] ?? 0) + 1;
            const where = `${group.name}/${c.name} mutation ${k}: ${frame.toString('hex').slice(0, 160)}`;
            if (r.verdict === 'aborted' || r.verdict === 'redirect') problems.push(`${where}: verdict ${r.verdict}`);
            if (r.verdict === 'pass' && !r.out.equals(frame)) problems.push(`${where}: passed frame modified`);
            if (r.verdict === 'drop' && !r.event?.startsWith('drop_')) problems.push(`${where}: drop counted as ${r.event}`);
            if (r.verdict === 'tx') {
              const bad = malformed(r.out);
              if (bad !== null) problems.push(`${where}: sent a malformed frame (${bad}), event ${r.event}: ${r.out.toString('hex').slice(0, 200)}`);
            }
          }
        }
      } finally {
        dp.close();
      }
    }
    expect(problems.slice(0, 10)).toEqual([]);
    expect(frames).toBeGreaterThan(2000);
    // the mutations reach every outcome
    expect(verdicts['tx'] ?? 0).toBeGreaterThan(100);
    expect(verdicts['drop'] ?? 0).toBeGreaterThan(100);
    expect(verdicts['pass'] ?? 0).toBeGreaterThan(10);
  }, 180_000); // 9 s on a quiet host; 64 s and 123 s in loaded runs (the 60 s default failed them)
});
