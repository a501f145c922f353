/**
 * Bridge to the scapy side of the packet tests: test/fixtures/cases.py builds
 * the cases (inputs and independently computed expected outputs), and scapy
 * decodes packets field by field for failure messages. scapy is importable
 * only from Debian's interpreter, /usr/bin/python3 (docs/platform.md).
 */
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';

export const PYTHON = '/usr/bin/python3';
export const CASES_SCRIPT = fileURLToPath(new URL('../fixtures/cases.py', import.meta.url));
/** GTP-U over IPv6 (End.M.GTP6.*), same format. */
export const CASES6_SCRIPT = fileURLToPath(new URL('../fixtures/cases6.py', import.meta.url));

export type Verdict = 'aborted' | 'drop' | 'pass' | 'tx' | 'redirect';

export interface RoundTrip {
  readonly verdict: Verdict;
  readonly event: string;
  /** Expected End.M.GTP4.E output for the GTP4.D output fed back (hex). */
  readonly expected: string;
  readonly rule: string;
  /** What must survive the round trip, from the original GTP-U input. */
  readonly teid: number;
  readonly qfi: number;
  readonly rqi: number;
  readonly src: string;
  readonly dst: string;
  readonly tos: number;
  /** Inner packet (hex). */
  readonly inner: string;
}

export interface PacketCase {
  readonly name: string;
  /** Ethernet frame (hex). */
  readonly input: string;
  readonly verdict: Verdict;
  readonly event: string;
  /** Expected output frame (hex); null for drops (output not compared). */
  readonly expected: string | null;
  /** Key path of the rule that must count a translated packet, e.g. "policies[3]". */
  readonly rule?: string;
  readonly roundtrip?: RoundTrip;
  /** A second stage: the output, MACs put back, run again; expected bytes built by scapy (cases6.py round trips). */
  readonly then?: { readonly verdict: Verdict; readonly event: string; readonly expected: string; readonly rule: string };
  /** hash_spread group: 'spread' (one of many flows) or 'same' (packets of one flow). */
  readonly flow?: 'spread' | 'same';
}

export interface CaseGroup {
  readonly name: string;
  /** 'table': plain rows; 'roundtrip': rows carry a second stage; 'spread': hash distribution. */
  readonly kind: 'table' | 'roundtrip' | 'spread';
  /** YAML config text for parseConfig. */
  readonly config: string;
  /** Outer UDP source port range of the config, inclusive. */
  readonly ports: readonly [number, number];
  readonly cases: readonly PacketCase[];
}

export interface CaseFile {
  readonly groups: readonly CaseGroup[];
}

const cached = new Map<string, Promise<CaseFile>>();

/** Run a cases script (default cases.py) once per process and parse its JSON. */
export function loadCases(script = CASES_SCRIPT): Promise<CaseFile> {
  let p = cached.get(script);
  if (p === undefined) {
    p = (async () => {
      const r = await execa(PYTHON, [script], { maxBuffer: 256 * 1024 * 1024, reject: false });
      if (r.exitCode !== 0) {
        throw new Error(`${PYTHON} ${script} failed (exit ${r.exitCode}):\n${r.stderr}`);
      }
      return JSON.parse(r.stdout) as CaseFile;
    })();
    cached.set(script, p);
  }
  return p;
}

const DECODE = `
import sys
from scapy.all import Ether, load_contrib
load_contrib('gtp')
for i, h in enumerate(sys.argv[1:]):
    if i:
        print('-' * 60)
    if not h:
        print('(empty frame)')
        continue
    print(Ether(bytes.fromhex(h)).show2(dump=True))
`;

/** scapy's show2() of each frame (hex or Buffer), separated by a line of dashes. */
export async function decodeWithScapy(...frames: readonly (string | Buffer)[]): Promise<string> {
  const hexes = frames.map((f) => (typeof f === 'string' ? f : f.toString('hex')));
  const r = await execa(PYTHON, ['-c', DECODE, ...hexes], { reject: false });
  if (r.exitCode !== 0) return `(scapy could not decode: ${r.stderr.split('\n').slice(-3).join(' ')})`;
  return r.stdout;
}

/** Offset of the first differing byte, or -1 when equal. A length difference counts at min(len). */
export function firstDifference(a: Buffer, b: Buffer): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

/** A few bytes of both frames around an offset, for the failure message. */
export function hexAround(expected: Buffer, got: Buffer, at: number): string {
  const from = Math.max(0, at - 8);
  const to = at + 16;
  const show = (b: Buffer): string => b.subarray(from, to).toString('hex').replace(/(..)/g, '$1 ').trim();
  return `  bytes ${from}..${to - 1}\n  expected: ${show(expected)}\n  got:      ${show(got)}`;
}

/** Full failure report: what differs, and both packets decoded by scapy. */
export async function describeMismatch(
  title: string,
  problems: readonly string[],
  input: Buffer,
  expected: Buffer | null,
  got: Buffer,
): Promise<string> {
  const lines = [title, ...problems.map((p) => `  - ${p}`)];
  if (expected !== null) {
    const at = firstDifference(expected, got);
    if (at >= 0) {
      lines.push(`  first differing byte at offset ${at} (expected ${expected.length} bytes, got ${got.length})`);
      lines.push(hexAround(expected, got, at));
    }
  }
  const frames = expected === null ? [input, got] : [input, expected, got];
  const decoded = await decodeWithScapy(...frames);
  const parts = decoded.split(/^-{60}$/m);
  const labels = expected === null ? ['INPUT', 'GOT (program output)'] : ['INPUT', 'EXPECTED (from the RFC rules)', 'GOT (program output)'];
  parts.forEach((p, i) => lines.push(`==== ${labels[i] ?? `frame ${i}`} ====`, p.trim()));
  return lines.join('\n');
}
