/**
 * npm run bench:micro — ns per packet per function, BPF_PROG_TEST_RUN.
 *
 * Every iteration runs on the original frame: bench_restore (bpf/bench.bpf.c)
 * copies the template's headers back and tail-calls the program under test
 * (the repeat trap of shared/docs/platform.md). Its own cost is a row of its
 * own; the two baselines (XDP_TX only, MAC swap) run in the same harness.
 * Forwarding mode is tx, so a translation row is the translation alone.
 * Each row: median of 5 runs of `repeat` iterations. A row whose repeated
 * run does not give the same verdict and bytes as a single run is an error.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Config, LocalSid, Policy, Settings } from '../config/types.js';
import { DEFAULT_SETTINGS } from '../config/load.js';
import { openDataplane, VERDICTS, type Dataplane } from '../dataplane/index.js';
import {
  findMap, findProgram, mapFd, mapUpdate, objectClose, objectLoad, objectOpen, programFd, testRun, type BpfObject,
} from '../dataplane/libbpf.js';
import { ipv4Addr, ipv4Prefix, ipv6Addr, ipv6Prefix, parseIpv4, parseIpv6 } from '../sid/addr.js';
import { encodeGtp4Sid, encodeGtp4Src, qfi, teid } from '../sid/mobile.js';
import { GTPU_OVERHEAD, SRV6_OVERHEAD, gtpuFrame, innerUdp4, srv6Frame } from './frames.js';

const BENCH_OBJECT = fileURLToPath(new URL('../../build/bench.bpf.o', import.meta.url));
const RESTORE_MAX = 128;

export interface MicroOptions {
  repeat: number;
  runs: number;
  rules: number;
  /** The data plane object; default build/mup.bpf.o. */
  object?: string;
}

export interface Row {
  name: string;
  frameLen: number;
  nsMedian: number;
  nsRuns: number[];
  verdict: string;
}

/** The harness object: restore program, baselines, template and target maps. */
class Harness {
  private readonly obj: BpfObject;
  readonly restoreFd: number;
  readonly txOnlyFd: number;
  readonly macswapFd: number;
  private readonly tmplFd: number;
  private readonly targetFd: number;

  constructor() {
    this.obj = objectOpen(BENCH_OBJECT);
    objectLoad(this.obj, BENCH_OBJECT);
    this.restoreFd = programFd(findProgram(this.obj, 'bench_restore'));
    this.txOnlyFd = programFd(findProgram(this.obj, 'bench_tx_only'));
    this.macswapFd = programFd(findProgram(this.obj, 'bench_macswap'));
    this.tmplFd = mapFd(findMap(this.obj, 'bench_tmpl_map'));
    this.targetFd = mapFd(findMap(this.obj, 'bench_target'));
  }

  /** Time `targetFd` on `frame`, restored every iteration. */
  measure(name: string, targetFd: number, frame: Buffer, o: MicroOptions): Row {
    const restore = Math.min(RESTORE_MAX, frame.length & ~7);
    const tmpl = Buffer.alloc(8 + RESTORE_MAX);
    tmpl.writeUInt32LE(frame.length, 0);
    tmpl.writeUInt32LE(restore, 4);
    frame.copy(tmpl, 8, 0, restore);
    mapUpdate(this.tmplFd, u32(0), tmpl);
    mapUpdate(this.targetFd, u32(0), u32(targetFd));

    const once = testRun(targetFd, { dataIn: frame, dataOutSize: frame.length + 512 });
    const nsRuns: number[] = [];
    for (let i = 0; i < o.runs; i++) {
      const r = testRun(this.restoreFd, { dataIn: frame, dataOutSize: frame.length + 512, repeat: o.repeat });
      if (r.retval !== once.retval || !r.dataOut!.equals(once.dataOut!)) {
        throw new Error(
          `${name}: the repeated run (retval ${r.retval}, ${r.dataOut!.length} bytes) differs from a single run ` +
            `(retval ${once.retval}, ${once.dataOut!.length} bytes): the harness is not restoring the frame`,
        );
      }
      nsRuns.push(r.duration);
    }
    return { name, frameLen: frame.length, nsMedian: median(nsRuns), nsRuns, verdict: VERDICTS[once.retval] ?? String(once.retval) };
  }

  close(): void {
    objectClose(this.obj);
  }
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n >>> 0);
  return b;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

// --- configurations -------------------------------------------------------

const SETTINGS: Settings = { ...DEFAULT_SETTINGS, forwarding: 'tx' };
const N3 = parseIpv4('192.0.2.10', 'bench');
const GNB = parseIpv4('198.51.100.1', 'bench');

/** Policy i matches 10.(i>>8).(i&255).0/24 (i = 0: 192.0.2.0/24, the frame's). */
function policy(i: number, len = 24): Policy {
  const addr = i === 0 ? N3 : ipv4Addr(((10 << 24) | ((i >> 8) << 16) | ((i & 255) << 8)) >>> 0);
  return {
    where: `policies[${i}]`,
    match: ipv4Prefix(addr, len),
    srPrefix: ipv6Prefix(ipv6Addr((0x2001_0db8_0001n << 80n) | (BigInt(i) << 64n)), 48),
    srcPrefix: ipv6Prefix(parseIpv6('2001:db8:ff::', 'bench'), 64),
    segments: [],
    srh: 'auto',
    hopLimit: 64,
  };
}

/** Local SID j is 2001:db8:j::/48 shifted so j = 0 is 2001:db8:2::/48, the frame's. */
function localsid(j: number): LocalSid {
  return {
    where: `localsids[${j}]`,
    sid: ipv6Prefix(ipv6Addr((0x2001_0db8n << 96n) | (BigInt((j + 2) & 0xffff) << 80n) | (j >= 0xfffe ? BigInt(j) << 64n : 0n)), 48),
    srcPrefixLen: 64,
    container: 'always',
    ttl: 64,
  };
}

function config(nRules: number, policyLens?: number[]): Config {
  const lens = policyLens ?? [24];
  return {
    file: '<bench>',
    settings: { ...SETTINGS, maxPolicies: Math.max(nRules, 1), maxLocalSids: Math.max(nRules, 1) },
    // With several lengths, the frame's policy has the shortest: the worst case.
    policies: Array.from({ length: nRules }, (_, i) => policy(i, i === 0 ? lens[lens.length - 1]! : lens[i % lens.length]!)),
    localsids: Array.from({ length: nRules }, (_, j) => localsid(j)),
  };
}

// --- frames -----------------------------------------------------------------

const UE = parseIpv4('10.45.0.2', 'bench');
const DN = parseIpv4('203.0.113.5', 'bench');
/** A 64-byte Ethernet frame carries a 46-byte IP packet: the small inner packet. */
const SMALL_INNER = 46;

function uplink(frameLen: number): Buffer {
  const inner = innerUdp4({ src: UE, dst: DN, sport: 40000, dport: 9000, len: frameLen - GTPU_OVERHEAD });
  return gtpuFrame({ src: GNB, dst: N3, teid: 0x1000, qfi: 9, inner });
}

function downlink(frameLen: number): Buffer {
  const inner = innerUdp4({ src: DN, dst: UE, sport: 9000, dport: 40000, len: frameLen - SRV6_OVERHEAD });
  const dst = encodeGtp4Sid(localsid(0).sid, GNB, { qfi: qfi(9), r: false, u: false, teid: teid(0x1000) });
  const src = encodeGtp4Src(ipv6Prefix(parseIpv6('2001:db8:ff::', 'bench'), 64), DN);
  return srv6Frame({ src, dst, inner });
}

// --- the run ----------------------------------------------------------------

export function runMicro(o: MicroOptions, log: (s: string) => void = () => {}): Row[] {
  const h = new Harness();
  const rows: Row[] = [];
  const small4d = uplink(GTPU_OVERHEAD + SMALL_INNER);
  const small4e = downlink(SRV6_OVERHEAD + SMALL_INNER);
  const big4d = uplink(1400);
  const big4e = downlink(1400);
  try {
    const direct = testRun(h.txOnlyFd, { dataIn: small4d, repeat: o.repeat });
    const directRuns = [direct.duration];
    for (let i = 1; i < o.runs; i++) directRuns.push(testRun(h.txOnlyFd, { dataIn: small4d, repeat: o.repeat }).duration);
    rows.push({ name: 'xdp_tx_only, no harness', frameLen: small4d.length, nsMedian: median(directRuns), nsRuns: directRuns, verdict: 'tx' });
    rows.push(h.measure('harness -> xdp_tx_only', h.txOnlyFd, small4d, o));
    rows.push(h.measure('harness -> mac swap', h.macswapFd, small4d, o));
    log('baselines done');

    const sets: Array<[string, Config]> = [
      ['1 rule', config(1)],
      [`${o.rules} rules`, config(o.rules)],
      [`${o.rules} rules, 4 policy lengths, worst`, config(o.rules, [32, 28, 26, 24])],
    ];
    for (const [label, cfg] of sets) {
      let dp: Dataplane | undefined;
      try {
        dp = openDataplane({ config: cfg, object: o.object });
        const frames: Array<[string, Buffer]> = label.includes('lengths')
          ? [['gtp4d', small4d]]
          : [['gtp4d', small4d], ['gtp4d', big4d], ['gtp4e', small4e], ['gtp4e', big4e]];
        for (const [fn, f] of frames) {
          const row = h.measure(`harness -> ${fn}, ${label}`, dp.progFd, f, o);
          if (row.verdict !== 'tx') throw new Error(`${row.name}: verdict ${row.verdict}, expected tx: the frame was not translated`);
          rows.push(row);
        }
      } finally {
        dp?.close();
      }
      log(`${label} done`);
    }
  } finally {
    h.close();
  }
  return rows;
}

export function formatRows(rows: Row[]): string {
  const harness = rows.find((r) => r.name === 'harness -> xdp_tx_only')!.nsMedian;
  const direct = rows.find((r) => r.name === 'xdp_tx_only, no harness')!.nsMedian;
  const lines = [
    `${'case'.padEnd(52)} ${'frame B'.padStart(7)} ${'ns/pkt'.padStart(7)} ${'- harness'.padStart(9)}  runs`,
    `${'harness overhead (restore + tail call)'.padEnd(52)} ${''.padStart(7)} ${(harness - direct).toFixed(0).padStart(7)}`,
  ];
  for (const r of rows) {
    lines.push(
      `${r.name.padEnd(52)} ${String(r.frameLen).padStart(7)} ${String(r.nsMedian).padStart(7)} ${(r.nsMedian - (harness - direct)).toFixed(0).padStart(9)}  ${r.nsRuns.join(' ')}`,
    );
  }
  return lines.join('\n');
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const num = (flag: string, dflt: number): number => {
    const i = args.indexOf(flag);
    return i >= 0 ? Number(args[i + 1]) : dflt;
  };
  const o: MicroOptions = { repeat: num('--repeat', 1_000_000), runs: num('--runs', 5), rules: num('--rules', 65536) };
  const oi = args.indexOf('--object');
  if (oi >= 0) o.object = args[oi + 1];
  const rows = runMicro(o, (s) => process.stderr.write(`bench:micro: ${s}\n`));
  const out = fileURLToPath(new URL('../../build/bench/micro.json', import.meta.url));
  mkdirSync(new URL('../../build/bench/', import.meta.url), { recursive: true });
  writeFileSync(out, JSON.stringify({ date: new Date().toISOString(), options: o, rows }, null, 2));
  process.stdout.write(`${formatRows(rows)}\n\nns/pkt: median of ${o.runs} runs of ${o.repeat} iterations (BPF_PROG_TEST_RUN).\nJSON: ${out}\n`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().catch((e: unknown) => {
    process.stderr.write(`bench:micro: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exitCode = 1;
  });
}
