/**
 * `mup probe` on a real topology this test builds (test/helpers/topology.ts):
 * gnb — mup (XDP, loaded and attached by the probe) — core — dn. Probe
 * frames go out of the gNB's veth (uplink GTP-U) and the core's veth
 * (downlink SRv6, written by the probe), are translated by the XDP program,
 * and are captured on the far side with software stamps: core's own SRv6
 * plays no part, so it has none (CorePeer 'none') and this runs on a kernel
 * without seg6 routes; the in-band stamps come
 * from the ring buffer and the source MAC. The namespaces are removed at the
 * end, also on failure.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_OBJECT } from '../src/dataplane/index.js';
import { parseMac } from '../src/packet/probe-frames.js';
import { runProbe, type DirectionSetup, type ProbeRunResult } from '../src/probe/probe.js';
import { standaloneSession, type StampSession } from '../src/probe/session.js';
import { latencyLog, latencyPlots, samplesCsv, SAMPLE_HEADER } from '../src/probe/present.js';
import { readIntervalLog } from '../src/probe/hdrlog.js';
import { HdrHistogram } from '../src/probe/hdr.js';
import { canRender, inspectSvg, render } from './helpers/svgcheck.js';
import { parseConfig } from '../src/config/load.js';
import { parseIpv4, parseIpv6 } from '../src/sid/addr.js';
import { ADDON_PATH } from '../src/probe/native.js';
import { Lab, sweepStaleNamespaces, TESTPEER_OBJECT } from './helpers/netns.js';
import { buildLab, CORE_V6, DL_SID, DL_TUNSRC, DN, GNB, N3, UE } from './helpers/topology.js';
import { MUP_BIN, TestDaemon } from './helpers/daemon.js';
import { needsLiveFrames, noLiveFrames } from './helpers/live-frames.js';

const ready = existsSync(DEFAULT_OBJECT) && existsSync(TESTPEER_OBJECT) && existsSync(ADDON_PATH) && process.getuid?.() === 0;
const PORT = 47000;

const CONFIG = `
settings: { forwarding: fib, max_policies: 8, max_localsids: 4 }
policies:
  - { name: n3-uplink, match: ${N3}/32, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
localsids:
  - { name: n3-downlink, sid: "2001:db8:2::/48", src_prefix_len: 64 }
`;

describe.skipIf(!ready)('mup probe through the translator between namespaces', () => {
  let lab: Lab | undefined;
  let session: StampSession | undefined;
  let setups: DirectionSetup[];
  let result: ProbeRunResult;
  // Made in beforeAll: vitest runs a describe body even when the suite is skipped (a directory left behind).
  let dir = '';

  const mac = async (ns: string, dev: string): Promise<string> => {
    const m = (await lab!.ip(ns, 'link', 'show', dev)).match(/link\/ether ([0-9a-f:]+)/)?.[1];
    if (m === undefined) throw new Error(`no MAC on ${ns}/${dev}`);
    return m;
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mup-probe-'));
    await sweepStaleNamespaces();
    writeFileSync(join(dir, 'mup.yaml'), CONFIG);
    lab = await Lab.create(['gnb', 'mup', 'core', 'dn']);
    await buildLab(lab, { core: 'none' });
    // The translator's FIB next hops resolved before the run: a frame that
    // misses the neighbour goes to the kernel, which rewrites its MACs.
    await lab.exec('mup', 'ping', ['-6', '-c', '1', '-W', '2', CORE_V6]);
    await lab.exec('mup', 'ping', ['-c', '1', '-W', '2', GNB]);
    setups = [
      {
        dir: 'uplink',
        tx: { netns: lab.ns('gnb'), dev: 'to-mup' },
        rx: { netns: lab.ns('core'), dev: 'to-mup' },
        dstMac: parseMac(await mac('mup', 'to-gnb'), 'mup/to-gnb'),
        uplink: { gnb: parseIpv4(GNB, 'gnb'), n3: parseIpv4(N3, 'n3'), teid: 0x1000, qfi: 9, ue: parseIpv4(UE, 'ue'), dn: parseIpv4(DN, 'dn') },
      },
      {
        dir: 'downlink',
        tx: { netns: lab.ns('core'), dev: 'to-mup' },
        rx: { netns: lab.ns('gnb'), dev: 'to-mup' },
        dstMac: parseMac(await mac('mup', 'to-core'), 'mup/to-core'),
        downlink: { src: parseIpv6(DL_TUNSRC, 'src'), sid: parseIpv6(DL_SID, 'sid'), dn: parseIpv4(DN, 'dn'), ue: parseIpv4(UE, 'ue') },
      },
    ];
  });

  afterAll(async () => {
    try {
      await session?.close();
    } finally {
      await lab?.destroy();
      if (dir !== '') rmSync(dir, { recursive: true, force: true });
    }
  });

  it('2,000 probes/s for 1 s each way: nothing lost, wire latency and residence for every probe, ring and MAC agree', async () => {
    session = await standaloneSession({
      config: parseConfig(CONFIG, 'probe-lab.yaml'),
      attach: [
        { netns: lab!.ns('mup'), dev: 'to-gnb' },
        { netns: lab!.ns('mup'), dev: 'to-core' },
      ],
      udpPort: PORT,
    });
    try {
      result = await runProbe({
        directions: setups, rate: 2000, durationS: 1, size: 128, udpPort: PORT, timestamping: 'auto',
        ring: session.ring, counters: () => session!.counters(),
      });
    } finally {
      await session.close();
      session = undefined;
    }

    for (const d of result.directions) {
      const at = `${d.dir}`;
      expect(d.sequence.sent, at).toBe(2000);
      expect(d.sequence.lost, `${at}: lost ${d.sequence.lostSequences.slice(0, 10).join(',')}`).toBe(0);
      expect(d.sequence.duplicates, at).toBe(0);
      expect(d.txStamped, at).toBe(2000);
      // veth has no hardware stamps: auto fell back, and the report says so.
      expect(d.tx.clock, at).toBe('software');
      expect(d.tx.hardware.code, at).toBe('EOPNOTSUPP');
      expect(d.wireClock, at).toBe('software');
      expect(d.wire?.count, at).toBe(2000);
      expect(d.wire!.min, `${at}: RX after TX`).toBeGreaterThan(0);
      // Every probe has its record, its frame carried the stamp, and both
      // residences are the same to the nanosecond.
      expect(d.records, at).toBe(2000);
      expect(d.macStamped, at).toBe(2000);
      expect(d.agreement, at).toEqual({ compared: 2000, maxAbsDiffNs: 0, within100ns: 2000 });
      expect(d.residence!.min, at).toBeGreaterThan(0);
      // Residence is inside the wire latency (entry and exit are between TX and RX).
      expect(d.residence!.percentiles.p50, at).toBeLessThan(d.wire!.percentiles.p50);
      expect(d.entryToRx!.min, at).toBeGreaterThan(0);
      expect(d.ipdv.pairs, at).toBe(1999);
    }
    expect(result.notes.filter((n) => /no hardware timestamps/.test(n))).toHaveLength(4);
    expect(result.counters!.after.ringFull - result.counters!.before.ringFull).toBe(0n);
    const fns = new Set(result.directions.map((d) => d.dir));
    expect(fns).toEqual(new Set(['uplink', 'downlink']));
  });

  it('writes raw samples, the latency plots (log axes covering min..max, rendered) and an HdrHistogram log the library reads back', () => {
    const csv = samplesCsv(result.samples).trim().split('\n');
    expect(csv[0]).toBe(SAMPLE_HEADER.join(','));
    expect(csv).toHaveLength(1 + 4000);
    const row = csv[1]!.split(',');
    expect(row[0]).toBe('uplink');
    expect(Number(row[4])).toBeGreaterThan(0); // wire_ns
    // Every latency figure: CDF, CCDF and percentile plot, of the wire latency and of the residence, a panel per direction.
    const plots = latencyPlots(result);
    expect(plots.map(([n]) => n)).toEqual([
      'cdf-wire.svg', 'ccdf-wire.svg', 'percentiles-wire.svg', 'cdf-residence.svg', 'ccdf-residence.svg', 'percentiles-residence.svg',
    ]);
    for (const [name, svg] of plots) {
      const info = inspectSvg(svg);
      expect(info.panels.map((p) => p.series.length), name).toEqual([1, 1]);
      expect(svg).toMatch(/uplink/);
      expect(svg).toMatch(/downlink/);
      const d = result.directions;
      const sums = name.endsWith('-wire.svg') ? d.map((x) => x.wire!) : d.map((x) => x.residence!);
      const lo = Math.min(...sums.map((x) => x.min).filter((v) => v > 0));
      const hi = Math.max(...sums.map((x) => x.max));
      for (const p of info.panels) {
        const lat = name.startsWith('percentiles') ? p.y : p.x;
        expect(lat.scale, name).toBe('log');
        const unit = /\((ns|µs|ms), log scale\)$/.exec(lat.label)![1]!;
        const div = { ns: 1, µs: 1e3, ms: 1e6 }[unit]!;
        expect(lat.min * div, name).toBeLessThanOrEqual(lo);
        expect(lat.max * div, name).toBeGreaterThanOrEqual(hi);
      }
      if (canRender) expect(render(svg).inked(), name).toBeGreaterThan(5000);
    }
    // The HdrHistogram log, read back by the library: the table's percentiles within one bucket.
    const back = readIntervalLog(latencyLog(result));
    const layout = new HdrHistogram(3);
    for (const d of result.directions) {
      for (const [tag, sum] of [[`${d.dir}-wire`, d.wire!], [`${d.dir}-residence`, d.residence!]] as const) {
        const h = back.get(tag)!;
        expect(h.totalCount, tag).toBe(sum.count);
        for (const [k, want] of Object.entries(sum.percentiles)) {
          const b = layout.bucketRange(layout.indexOf(Math.round(want)));
          const got = h.getValueAtPercentile(Number(k.slice(1)));
          expect(got >= b.from && got <= b.to, `${tag} ${k}: table ${want}, log ${got}`).toBe(true);
        }
      }
    }
  });

  it('the CLI runs the same probe, loading the data plane itself, and writes its files', async () => {
    const cfg = join(dir, 'mup.yaml');
    const out = join(dir, 'out');
    const r = await execa(
      'node',
      [
        MUP_BIN, 'probe', '--config', cfg, '--attach', `${lab!.ns('mup')}/to-gnb,${lab!.ns('mup')}/to-core`,
        '--tx-netns', lab!.ns('gnb'), '--tx-dev', 'to-mup', '--rx-netns', lab!.ns('core'), '--rx-dev', 'to-mup',
        '--dl-src', DL_TUNSRC, '--dl-sid', DL_SID, '--rate', '500', '--duration', '0.5', '--timestamping', 'software',
        '--out', out, '--no-progress',
      ],
      { reject: false, timeout: 60_000 },
    );
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/uplink: .* sent 250, received 250, lost 0/);
    expect(r.stdout).toMatch(/downlink: .* sent 250, received 250, lost 0/);
    expect(r.stdout).toMatch(/residence, ring/);
    expect(r.stdout).toMatch(/ring vs MAC: 250\/250 within 100 ns/);
    const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as { directions: { dir: string; records: number }[] };
    expect(report.directions.map((d) => d.records)).toEqual([250, 250]);
    for (const f of ['samples.csv', 'latency.hlog', 'cdf-wire.svg', 'ccdf-wire.svg', 'percentiles-wire.svg', 'cdf-residence.svg', 'percentiles-residence.svg', 'report.txt']) expect(existsSync(join(out, f)), f).toBe(true);
    // Nothing left attached by the CLI.
    expect(await lab!.ip('mup', '-d', 'link', 'show')).not.toMatch(/prog\/xdp/);
  });

  it.skipIf(noLiveFrames !== undefined)(needsLiveFrames('--sweep: probes under 0, 50 and 100 % of a background load from the live-frame generator, plotted against it'), async () => {
    const out = join(dir, 'sweep');
    const r = await execa(
      'node',
      [
        MUP_BIN, 'probe', '--config', join(dir, 'mup.yaml'), '--attach', `${lab!.ns('mup')}/to-gnb,${lab!.ns('mup')}/to-core`,
        '--tx-netns', lab!.ns('gnb'), '--tx-dev', 'to-mup', '--rx-netns', lab!.ns('core'), '--rx-dev', 'to-mup',
        '--direction', 'uplink', '--rate', '500', '--timestamping', 'software', '--no-progress',
        '--sweep', '--sweep-rate', '20000', '--sweep-steps', '0,50,100', '--sweep-seconds', '0.5', '--out', out,
      ],
      { reject: false, timeout: 90_000 },
    );
    expect(r.exitCode, r.stderr).toBe(0);
    const sweep = JSON.parse(readFileSync(join(out, 'sweep.json'), 'utf8')) as {
      rows: { percent: number; offeredPps: number; achievedPps: number; lost: number; wireP50: number; residenceP50: number }[];
    };
    expect(sweep.rows.map((x) => [x.percent, x.offeredPps])).toEqual([
      [0, 0],
      [50, 10000],
      [100, 20000],
    ]);
    expect(sweep.rows[0]!.achievedPps).toBe(0);
    // The generator ran (what it reached depends on the host; it is reported, not judged).
    for (const row of sweep.rows.slice(1)) expect(row.achievedPps).toBeGreaterThan(0);
    for (const row of sweep.rows) {
      expect(row.wireP50).toBeGreaterThan(0);
      expect(row.residenceP50).toBeGreaterThan(0);
    }
    for (const f of ['sweep-wire.svg', 'sweep-residence.svg']) {
      const svg = readFileSync(join(out, f), 'utf8');
      const info = inspectSvg(svg);
      expect(svg).toMatch(/uplink p99/);
      // x: the background load reached, so the axis reaches the largest rate the generator got to.
      const p = info.panels[0]!;
      expect(p.x.label).toMatch(/^background load reached \((frames|kframes|Mframes)\/s\)$/);
      const rdiv = p.x.label.includes('kframes') ? 1e3 : p.x.label.includes('Mframes') ? 1e6 : 1;
      expect(p.x.max * rdiv).toBeGreaterThanOrEqual(Math.max(...sweep.rows.map((x) => x.achievedPps)));
      expect(p.y.scale).toBe('log');
      if (canRender) expect(render(svg).inked(), f).toBeGreaterThan(3000);
    }
    // The distribution figures: a series per step in the direction's panel; a log per step.
    for (const f of ['sweep-cdf-wire.svg', 'sweep-ccdf-wire.svg', 'sweep-percentiles-wire.svg', 'sweep-cdf-residence.svg']) {
      const info = inspectSvg(readFileSync(join(out, f), 'utf8'));
      expect(info.panels.map((p) => p.series.length), f).toEqual([3]);
    }
    for (const pct of [0, 50, 100]) expect(readIntervalLog(readFileSync(join(out, `step-${pct}.hlog`), 'utf8')).get('uplink-wire')!.totalCount).toBeGreaterThan(0);
    expect(await lab!.ip('mup', '-d', 'link', 'show')).not.toMatch(/prog\/xdp/);
  });

  it('with the daemon: POST /v1/probe switches the stamps, bad bodies get 400, and mup probe --socket reads them', async () => {
    const d = new TestDaemon({
      config: `interfaces:\n  - { name: to-gnb }\n  - { name: to-core }\n${CONFIG}`,
      netns: lab!.ns('mup'),
      instance: `probe${process.pid}`,
    });
    try {
      await d.start();
      const off = await d.api('GET', '/v1/probe');
      expect(off.status).toBe(200);
      expect(off.body).toMatchObject({ probe: { enabled: false, udp_port: 0, sample: 1, mac: true } });
      for (const [body, path] of [
        [{ enabled: 'yes' }, 'enabled'],
        [{ enabled: true, udp_port: 70000 }, 'udp_port'],
        [{ enabled: true, sample: 0 }, 'sample'],
        [{ enabled: true, colour: 'red' }, 'colour'],
      ] as const) {
        const r = await d.api('POST', '/v1/probe', { body });
        expect(r.status, JSON.stringify(body)).toBe(400);
        expect(r.body, JSON.stringify(body)).toMatchObject({ path });
      }
      const r = await execa(
        'node',
        [
          MUP_BIN, 'probe', '--socket', d.socket, '--up-dst-mac', await mac('mup', 'to-gnb'), '--down-dst-mac', await mac('mup', 'to-core'),
          '--tx-netns', lab!.ns('gnb'), '--tx-dev', 'to-mup', '--rx-netns', lab!.ns('core'), '--rx-dev', 'to-mup',
          '--dl-src', DL_TUNSRC, '--dl-sid', DL_SID, '--rate', '500', '--duration', '0.5', '--timestamping', 'software', '--json', '--no-progress',
        ],
        { reject: false, timeout: 60_000 },
      );
      expect(r.exitCode, r.stderr).toBe(0);
      const report = JSON.parse(r.stdout) as { directions: { dir: string; records: number; sequence: { lost: number }; agreement: { within100ns: number } }[] };
      for (const x of report.directions) {
        expect(x.sequence.lost, x.dir).toBe(0);
        expect(x.records, x.dir).toBe(250);
        expect(x.agreement.within100ns, x.dir).toBe(250);
      }
      // The probe switched the stamps off again when it was done.
      expect((await d.api('GET', '/v1/probe')).body).toMatchObject({ probe: { enabled: false } });
    } finally {
      await d.cleanup();
    }
  });

  // The acceptance run, 10,000 probes/s for 10 s each way: about 20 s,
  // so not part of \`make test\`. MUP_PROBE_ACCEPTANCE=1 npx vitest run test/probe.test.ts
  // writes its files to build/probe-acceptance/.
  it.runIf(process.env['MUP_PROBE_ACCEPTANCE'] === '1')('acceptance: 10,000 probes/s for 10 s each way, software stamps', async () => {
    const out = join(process.cwd(), 'build', 'probe-acceptance');
    const r = await execa(
      'node',
      [
        MUP_BIN, 'probe', '--config', join(dir, 'mup.yaml'), '--attach', `${lab!.ns('mup')}/to-gnb,${lab!.ns('mup')}/to-core`,
        '--tx-netns', lab!.ns('gnb'), '--tx-dev', 'to-mup', '--rx-netns', lab!.ns('core'), '--rx-dev', 'to-mup',
        '--dl-src', DL_TUNSRC, '--dl-sid', DL_SID, '--rate', '10000', '--duration', '10', '--timestamping', 'auto',
        '--out', out, '--no-progress',
      ],
      { reject: false, timeout: 120_000 },
    );
    console.log(r.stdout);
    expect(r.exitCode, r.stderr).toBe(0);
    const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as {
      directions: { dir: string; sequence: { sent: number; lost: number }; agreement: { compared: number; within100ns: number } }[];
    };
    for (const d of report.directions) {
      expect(d.sequence.sent, d.dir).toBe(100_000);
      expect(d.sequence.lost, d.dir).toBe(0);
      expect(d.agreement.within100ns, d.dir).toBe(d.agreement.compared);
      expect(d.agreement.compared, d.dir).toBe(100_000);
    }
  }, 180_000);

  // The sweep for the README: 10 %..100 % of 300,000 frames/s, 2 s per step.
  it.runIf(process.env['MUP_PROBE_ACCEPTANCE'] === '1')('acceptance: --sweep 10..100 % of 300,000 frames/s', async () => {
    const out = join(process.cwd(), 'build', 'probe-sweep');
    const r = await execa(
      'node',
      [
        MUP_BIN, 'probe', '--config', join(dir, 'mup.yaml'), '--attach', `${lab!.ns('mup')}/to-gnb,${lab!.ns('mup')}/to-core`,
        '--tx-netns', lab!.ns('gnb'), '--tx-dev', 'to-mup', '--rx-netns', lab!.ns('core'), '--rx-dev', 'to-mup',
        '--direction', 'uplink', '--rate', '2000', '--timestamping', 'software', '--no-progress',
        '--sweep', '--sweep-rate', '300000', '--sweep-seconds', '2', '--out', out,
      ],
      { reject: false, timeout: 170_000 },
    );
    console.log(r.stdout);
    expect(r.exitCode, r.stderr).toBe(0);
  }, 180_000);
});

