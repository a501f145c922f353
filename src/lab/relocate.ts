/**
 * `mup lab relocate`: the MEC relocation scenario. The UE sends a steady,
 * sequence-numbered UDP stream to the anycast address both MEC sites carry;
 * the uplink policy points at site A's End.DX4 SID prefix, and mid-stream it
 * is replaced through the daemon's API (PUT /v1/policies) with site B's.
 * Receivers on mec-a and mec-b record every sequence number and its arrival
 * time (CLOCK_MONOTONIC, the clock of process.hrtime here), so the report
 * gives frames lost, duplicated, reordered, and the time from the API call
 * to the first frame at B and to the last frame at A.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa, type ResultPromise } from 'execa';
import { labApi, labDown, labUp, labPaths, type LabPaths, type Progress } from './lab.js';
import { ping, type PingResult } from './measure.js';
import { sleep } from './sh.js';
import { labTopology, type LabTopology } from './topology.js';

const STREAM_PY = fileURLToPath(new URL('../../src/lab/stream.py', import.meta.url));
const PYTHON = '/usr/bin/python3';
const PORT = 7000;

export interface RelocateOptions {
  readonly prefix: string;
  readonly out: string;
  readonly keep: boolean;
  /** Packets per second of the stream. */
  readonly rate: number;
  readonly seconds: number;
  /** When to switch, seconds after the stream starts. */
  readonly switchAfter: number;
  readonly size: number;
  readonly progress: Progress;
}

export const RELOCATE_DEFAULTS = { rate: 20_000, seconds: 4, switchAfter: 2, size: 100 } as const;

export interface SiteResult {
  readonly received: number;
  readonly malformed: number;
  readonly firstSeq: number | null;
  readonly lastSeq: number | null;
  /** First and last arrival, ms after the API call (negative: before it). */
  readonly firstMs: number | null;
  readonly lastMs: number | null;
  /** When the UE sent the first and the last of them, ms after the API call. */
  readonly firstSentMs: number | null;
  readonly lastSentMs: number | null;
}

export interface RelocateReport {
  readonly at: string;
  readonly loadavg: readonly number[];
  readonly sent: number;
  readonly rate: number;
  readonly lost: number;
  readonly duplicated: number;
  readonly reordered: number;
  readonly malformed: number;
  readonly siteA: SiteResult;
  readonly siteB: SiteResult;
  /** API call -> answer (the policy written), ms. */
  readonly apiMs: number;
  /** API call -> first frame at B; API call -> last frame at A (ms). */
  readonly firstAtBMs: number | null;
  readonly lastAtAMs: number | null;
  /** Lost sequence numbers (at most the first 50). */
  readonly lostSeqs: readonly number[];
  readonly downlinkAfter: PingResult;
  readonly file: string;
}

interface RecvOut {
  seqs: number[];
  times: number[];
  sent: number[];
  malformed: number;
}

async function receiver(t: LabTopology, node: 'meca' | 'mecb', seconds: number, size: number): Promise<{ done: Promise<RecvOut>; kill: () => void }> {
  const proc: ResultPromise = execa('ip', ['netns', 'exec', t.ns[node], PYTHON, STREAM_PY, 'recv', '--bind', t.mec.anycast, '--port', String(PORT), '--seconds', String(seconds), '--idle', '1.5', '--size', String(size)], {
    reject: false,
    timeout: (seconds + 10) * 1000,
    maxBuffer: 256 * 1024 * 1024,
  });
  let out = '';
  await new Promise<void>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`receiver in ${t.ns[node]} not ready within 5 s`)), 5000);
    proc.stdout?.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.startsWith('ready\n')) {
        clearTimeout(timer);
        res();
      }
    });
    proc.then((r) => {
      clearTimeout(timer);
      rej(new Error(`receiver in ${t.ns[node]} exited (${r.exitCode}): ${String(r.stderr)}`));
    }, rej);
  });
  const done = proc.then((r) => {
    const line = String(r.stdout).split('\n').slice(1).find((l) => l.startsWith('{'));
    if (r.exitCode !== 0 || line === undefined) throw new Error(`receiver in ${t.ns[node]} failed (${r.exitCode}): ${String(r.stderr)}`);
    return JSON.parse(line) as RecvOut;
  });
  done.catch(() => undefined);
  return { done, kill: () => proc.kill('SIGKILL') };
}

function site(r: RecvOut, t0: bigint): SiteResult {
  const ms = (ns: number): number => Number(BigInt(ns) - t0) / 1e6;
  const n = r.seqs.length;
  return {
    received: n,
    malformed: r.malformed,
    firstSeq: n > 0 ? r.seqs[0]! : null,
    lastSeq: n > 0 ? r.seqs[n - 1]! : null,
    firstMs: n > 0 ? ms(r.times[0]!) : null,
    lastMs: n > 0 ? ms(r.times[n - 1]!) : null,
    firstSentMs: n > 0 ? ms(r.sent[0]!) : null,
    lastSentMs: n > 0 ? ms(r.sent[n - 1]!) : null,
  };
}

async function setPolicy(t: LabTopology, p: LabPaths, srPrefix: string): Promise<void> {
  const r = await labApi<{ error?: string }>(p, 'PUT', '/v1/policies', { name: 'n3-uplink', match: `${t.mup.n3Addr}/32`, sr_prefix: srPrefix, src_prefix: t.sids.srcPrefix });
  if (r.status !== 200) throw new Error(`PUT /v1/policies (sr_prefix ${srPrefix}): HTTP ${r.status} ${r.body.error ?? ''}`);
}

/** Run the scenario on a lab that is up. */
export async function relocateOnLab(t: LabTopology, p: LabPaths, o: RelocateOptions): Promise<RelocateReport> {
  const at = new Date().toISOString();
  const load = loadavg().map((x) => Math.round(x * 100) / 100);
  o.progress(`policy n3-uplink -> site A (${t.sids.mecaPrefix})`);
  await setPolicy(t, p, t.sids.mecaPrefix);
  const recvSeconds = o.seconds + 6;
  const [a, b] = [await receiver(t, 'meca', recvSeconds, o.size), await receiver(t, 'mecb', recvSeconds, o.size)];
  try {
    o.progress(`stream: ${o.rate} packets/s for ${o.seconds} s from ${t.ue.addr} to ${t.mec.anycast}:${PORT}; switch to site B (${t.sids.mecbPrefix}) after ${o.switchAfter} s`);
    const sender = execa('ip', ['netns', 'exec', t.ns.ue, PYTHON, STREAM_PY, 'send', '--src', t.ue.addr, '--dst', t.mec.anycast, '--port', String(PORT), '--rate', String(o.rate), '--seconds', String(o.seconds), '--size', String(o.size)], {
      reject: false,
      timeout: (o.seconds + 20) * 1000,
    });
    await sleep(o.switchAfter * 1000 + 150); // python's start-up, then the stream's first switchAfter seconds
    const t0 = process.hrtime.bigint();
    await setPolicy(t, p, t.sids.mecbPrefix);
    const apiMs = Number(process.hrtime.bigint() - t0) / 1e6;
    const s = await sender;
    const sline = String(s.stdout).split('\n').find((l) => l.startsWith('{'));
    if (s.exitCode !== 0 || sline === undefined) throw new Error(`sender failed (${s.exitCode}): ${String(s.stderr)}`);
    const sent = JSON.parse(sline) as { sent: number; rate: number };
    o.progress('waiting for the receivers (1.5 s without a frame ends each)');
    const [ra, rb] = await Promise.all([a.done, b.done]);
    // Merge both sites' arrivals in time order: reordered = a frame whose
    // number is below one that arrived before it (at either site).
    const all = [...ra.seqs.map((s2, i) => [ra.times[i]!, s2] as const), ...rb.seqs.map((s2, i) => [rb.times[i]!, s2] as const)].sort((x, y) => x[0] - y[0]);
    let max = -1;
    let reordered = 0;
    const seen = new Uint8Array(sent.sent);
    let duplicated = 0;
    for (const [, q] of all) {
      if (q < max) reordered++;
      else max = q;
      if (q < sent.sent) {
        if (seen[q] === 1) duplicated++;
        seen[q] = 1;
      }
    }
    const lostSeqs: number[] = [];
    let lost = 0;
    for (let i = 0; i < sent.sent; i++) {
      if (seen[i] === 0) {
        lost++;
        if (lostSeqs.length < 50) lostSeqs.push(i);
      }
    }
    const siteA = site(ra, t0);
    const siteB = site(rb, t0);
    o.progress(`downlink after the switch: ping ${t.mec.anycast} (site B answers)`);
    const downlinkAfter = await ping(t, 'translated', 5, t.mec.anycast);
    mkdirSync(resolve(o.out), { recursive: true });
    const file = join(resolve(o.out), 'lab-relocate.json');
    const report: RelocateReport = {
      at,
      loadavg: load,
      sent: sent.sent,
      rate: Math.round(sent.rate),
      lost,
      duplicated,
      reordered,
      malformed: ra.malformed + rb.malformed,
      siteA,
      siteB,
      apiMs,
      firstAtBMs: siteB.firstMs,
      lastAtAMs: siteA.lastMs,
      lostSeqs,
      downlinkAfter,
      file,
    };
    writeFileSync(file, JSON.stringify(report, null, 2) + '\n');
    return report;
  } finally {
    a.kill();
    b.kill();
  }
}

/** lab up (unless a lab with this prefix is up), the scenario, lab down (unless kept or it was up before). */
export async function relocate(o: RelocateOptions): Promise<RelocateReport> {
  const t = labTopology(o.prefix);
  const p = labPaths(t);
  const running = await labApi(p, 'GET', '/v1/status').then(
    (r) => r.status === 200,
    () => false,
  );
  if (!running) {
    o.progress(`lab up (prefix ${o.prefix})`);
    await labUp(o.prefix, o.progress);
  } else {
    o.progress(`using the running lab "${o.prefix}"`);
  }
  try {
    return await relocateOnLab(t, p, o);
  } finally {
    if (running || o.keep) {
      await setPolicy(t, p, t.sids.dnPrefix).catch(() => undefined);
      o.progress(`policy n3-uplink back to the data network (${t.sids.dnPrefix}); lab kept`);
    } else {
      o.progress('lab down');
      await labDown(o.prefix);
    }
  }
}

export function renderRelocate(r: RelocateReport): string {
  const ms = (x: number | null): string => (x === null ? 'never' : `${x.toFixed(3)} ms`);
  return [
    '',
    `MEC relocation, ${r.at}, load average ${r.loadavg.join(' ')}`,
    `  stream: ${r.sent} frames at ${r.rate} frames/s (UE -> anycast, uplink policy switched from site A to site B through PUT /v1/policies)`,
    `  lost ${r.lost}, duplicated ${r.duplicated}, reordered ${r.reordered}, malformed ${r.malformed}${r.lost > 0 ? ` (first lost: ${r.lostSeqs.slice(0, 10).join(', ')})` : ''}`,
    `  site A: ${r.siteA.received} frames (seq ${r.siteA.firstSeq ?? '-'}..${r.siteA.lastSeq ?? '-'}); site B: ${r.siteB.received} frames (seq ${r.siteB.firstSeq ?? '-'}..${r.siteB.lastSeq ?? '-'})`,
    `  API call -> answer ${r.apiMs.toFixed(3)} ms; -> first frame at B ${ms(r.firstAtBMs)}; -> last frame at A ${ms(r.lastAtAMs)}`,
    `  (sent by the UE: the last frame of A at ${ms(r.siteA.lastSentMs)}, the first of B at ${ms(r.siteB.firstSentMs)}, from the API call; times are CLOCK_MONOTONIC, negative = before the call)`,
    `  downlink after the switch: ping ${r.downlinkAfter.received}/${r.downlinkAfter.sent}${r.downlinkAfter.rttMs === null ? '' : `, median ${r.downlinkAfter.rttMs.median.toFixed(3)} ms`}`,
    `  written: ${r.file}`,
    '',
  ].join('\n');
}
