/**
 * The timestamping addon against the real kernel: a veth pair in a namespace
 * this file creates (and always removes). veth has no hardware timestamping,
 * so the hardware path is checked as the kernel refuses it (EOPNOTSUPP) and
 * the software path end to end: frames out of one end with TX stamps from
 * the error queue, in at the other with RX stamps.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import {
  describeTsInfo,
  NativeError,
  sampleClocks,
  TimestampingSocket,
  toMonotonic,
  toRealtime,
  type RxFrame,
} from '../src/probe/native.js';
import { ifIndex, inNetns } from '../src/dataplane/netns.js';
import { Lab, sweepStaleNamespaces } from './helpers/netns.js';

/** IEEE 802 local experimental EtherType: nothing else on the link uses it. */
const ETHERTYPE = 0x88b5;
const MAGIC = 0x4d555054; // "MUPT"

function macBytes(mac: string): Buffer {
  return Buffer.from(mac.split(':').map((h) => parseInt(h, 16)));
}

/** 60-byte frame dst <- src, EtherType 0x88b5, payload "MUPT" + 32-bit sequence number. */
function frame(dst: string, src: string, seq: number, len = 60): Buffer {
  const f = Buffer.alloc(len);
  macBytes(dst).copy(f, 0);
  macBytes(src).copy(f, 6);
  f.writeUInt16BE(ETHERTYPE, 12);
  f.writeUInt32BE(MAGIC, 14);
  f.writeUInt32BE(seq, 18);
  return f;
}

function seqOf(p: RxFrame): number | undefined {
  if (p.data.length < 22 || p.data.readUInt16BE(12) !== ETHERTYPE || p.data.readUInt32BE(14) !== MAGIC) return undefined;
  return p.data.readUInt32BE(18);
}

/** Capabilities listed by `ethtool -T IF` (ethtool asks over netlink; the addon uses the ioctl). */
function ethtoolCapabilities(out: string): string[] {
  const lines = out.split('\n');
  const start = lines.findIndex((l) => l.startsWith('Capabilities:'));
  const caps: string[] = [];
  for (const l of lines.slice(start + 1)) {
    if (!l.startsWith('\t')) break;
    caps.push(l.trim().split(/\s+/)[0] ?? '');
  }
  return caps;
}

describe('timestamping addon on a veth pair', () => {
  let lab: Lab | undefined;
  const open: TimestampingSocket[] = [];
  const ns = (): string => lab!.ns('ts');
  const sock = (o: Parameters<typeof TimestampingSocket.open>[0]): TimestampingSocket => {
    const s = TimestampingSocket.open(o);
    open.push(s);
    return s;
  };

  beforeAll(async () => {
    await sweepStaleNamespaces();
    lab = await Lab.create(['ts']);
    await lab.batch('ts', [
      'link add name tx0 type veth peer name rx0',
      'link set dev tx0 up',
      'link set dev rx0 up',
    ]);
  });

  afterEach(() => {
    for (const s of open.splice(0)) s.close();
  });

  afterAll(async () => {
    for (const s of open.splice(0)) s.close();
    await lab?.destroy();
  });

  it('hardware timestamping required on veth: SIOCSHWTSTAMP is refused (EOPNOTSUPP) and the error says what to do', () => {
    let err: unknown;
    try {
      sock({ ifname: 'tx0', netns: ns(), timestamping: 'hardware' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(NativeError);
    const e = err as NativeError;
    expect(e.code).toBe('EOPNOTSUPP');
    expect(e.errno).toBe(95);
    expect(e.syscall).toBe('ioctl(SIOCSHWTSTAMP)');
    expect(e.message).toContain('tx0');
    expect(e.message).toContain("use timestamping 'software'");
  });

  it("timestamping 'auto' on veth falls back to software, says why, and reports the driver's capabilities as ethtool does", async () => {
    const s = sock({ ifname: 'tx0', netns: ns() });
    const info = s.info();
    expect(info.clock).toBe('software');
    expect(info.hardware).toMatchObject({ attempted: true, enabled: false, code: 'EOPNOTSUPP', errno: 95 });
    expect(info.hardware.message).toContain('SIOCSHWTSTAMP');
    expect(info.tsInfo.ok).toBe(true);
    const d = describeTsInfo(info.tsInfo);
    const ethtool = await lab!.exec('ts', 'ethtool', ['-T', 'tx0']);
    expect(d.capabilities).toEqual(ethtoolCapabilities(ethtool));
    expect(d.capabilities).toEqual(['software-transmit', 'software-receive', 'software-system-clock']);
    expect(d.ptp).toBeNull();
    expect(ethtool).toContain('PTP Hardware Clock: none');
    expect(d.txTypes).toEqual([]);
    expect(d.rxFilters).toEqual([]);
    // 'software' does not even try the ioctl.
    const sw = sock({ ifname: 'rx0', netns: ns(), timestamping: 'software' });
    expect(sw.info().hardware.attempted).toBe(false);
    expect(sw.info().ifindex).toBeGreaterThan(0);
  });

  it('sends batches, gets one TX stamp per frame with consecutive ids, receives every frame with RX stamp >= TX stamp', async () => {
    const tx = sock({ ifname: 'tx0', netns: ns(), timestamping: 'software' });
    const rx = sock({ ifname: 'rx0', netns: ns(), timestamping: 'software', protocol: ETHERTYPE });
    const [txMac, rxMac] = [tx.info().mac, rx.info().mac];
    const batches = 4;
    const perBatch = 32;
    const total = batches * perBatch;
    const before = sampleClocks();
    const receiving = rx.recv({ max: 1024, min: total, timeoutMs: 5000 });
    const idOfSeq = new Map<number, number>();
    for (let b = 0; b < batches; b++) {
      const frames = Array.from({ length: perBatch }, (_, i) => frame(rxMac, txMac, b * perBatch + i));
      const r = await tx.send(frames);
      expect(r).toMatchObject({ requested: perBatch, sent: perBatch, error: null });
      expect(r.firstId).toBe(b * perBatch); // OPT_ID counts from the socket's first frame
      frames.forEach((_, i) => idOfSeq.set(b * perBatch + i, r.firstId + i));
    }
    const { stamps, skipped } = await tx.txStamps({ max: 1024, min: total, timeoutMs: 5000 });
    const received = await receiving;
    const after = sampleClocks();

    expect(skipped).toBe(0);
    expect(stamps.map((s) => s.id)).toEqual(Array.from({ length: total }, (_, i) => i));
    const txById = new Map(stamps.map((s) => [s.id, s]));
    for (const s of stamps) {
      expect(s.type).toBe('sent');
      expect(s.timestamp.clock).toBe('software');
      // Software stamps are CLOCK_REALTIME: inside the window sampled around the run.
      expect(s.timestamp.ns).toBeGreaterThanOrEqual(before.realtimeNs);
      expect(s.timestamp.ns).toBeLessThanOrEqual(after.realtimeNs);
    }
    for (let i = 1; i < stamps.length; i++) expect(stamps[i]!.timestamp.ns).toBeGreaterThanOrEqual(stamps[i - 1]!.timestamp.ns);

    expect(received.map(seqOf)).toEqual(Array.from({ length: total }, (_, i) => i));
    for (const p of received) {
      const seq = seqOf(p)!;
      const t = txById.get(idOfSeq.get(seq)!)!;
      expect(p.timestamp?.clock).toBe('software');
      expect(p.hardware).toBeNull(); // the kernel leaves ts[2] zero on veth
      expect(p.software).toBe(p.timestamp!.ns);
      expect(p.wireLength).toBe(60);
      expect(p.pktType).toBe(0); // PACKET_HOST: addressed to rx0's MAC
      const oneWay = p.timestamp!.ns - t.timestamp.ns;
      expect(oneWay).toBeGreaterThanOrEqual(0n);
      expect(oneWay).toBeLessThan(1_000_000_000n);
    }
  });

  it('cuts frames at snaplen and still reports the length on the wire', async () => {
    const tx = sock({ ifname: 'tx0', netns: ns(), timestamping: 'software' });
    const rx = sock({ ifname: 'rx0', netns: ns(), timestamping: 'software', protocol: ETHERTYPE });
    const receiving = rx.recv({ max: 4, min: 1, timeoutMs: 3000, snaplen: 22 });
    await tx.send([frame(rx.info().mac, tx.info().mac, 7, 300)]);
    const [p] = await receiving;
    expect(p?.data.length).toBe(22);
    expect(p?.wireLength).toBe(300);
    expect(seqOf(p!)).toBe(7);
  });

  it('waits on the thread pool: timers keep firing during recv, and close() wakes a waiting recv', async () => {
    const rx = sock({ ifname: 'rx0', netns: ns(), timestamping: 'software', protocol: ETHERTYPE });
    let ticks = 0;
    const timer = setInterval(() => ticks++, 10);
    try {
      const got = await rx.recv({ max: 4, timeoutMs: 300 });
      expect(got).toEqual([]);
    } finally {
      clearInterval(timer);
    }
    expect(ticks).toBeGreaterThanOrEqual(10);

    const t0 = Date.now();
    const waiting = rx.recv({ max: 4, timeoutMs: 30_000 });
    setTimeout(() => rx.close(), 50);
    expect(await waiting).toEqual([]);
    expect(Date.now() - t0).toBeLessThan(2000);
    await expect(rx.recv({ max: 1, timeoutMs: 10 })).rejects.toMatchObject({ code: 'EBADF', name: 'NativeError' });
    await expect(rx.send([Buffer.alloc(60)])).rejects.toThrow(/closed/);
  });

  it('the caller may enter the namespace itself (setns on this thread) instead of passing netns', () => {
    const s = inNetns(ns(), () => sock({ ifname: 'rx0', timestamping: 'software' }));
    expect(s.info().netns).toBeNull();
    expect(s.info().ifindex).toBe(ifIndex('rx0', ns()));
    // Back in the root namespace, where rx0 does not exist.
    expect(() => sock({ ifname: 'rx0' })).toThrow(expect.objectContaining({ code: 'ENODEV' }));
  });

  it('clear errors: unknown interface, unknown namespace, bad frames', async () => {
    expect(() => sock({ ifname: 'nosuch0', netns: ns() })).toThrow(
      expect.objectContaining({ code: 'ENODEV', message: expect.stringContaining('no such interface in this network namespace') }),
    );
    expect(() => sock({ ifname: 'tx0', netns: `${ns()}-missing` })).toThrow(
      expect.objectContaining({ code: 'ENOENT', message: expect.stringContaining('ip netns add') }),
    );
    const tx = sock({ ifname: 'tx0', netns: ns(), timestamping: 'software' });
    await expect(tx.send([Buffer.alloc(10)])).rejects.toThrow(/14 to 65535 bytes/);
  });

  it("a frame longer than the MTU is refused with EMSGSIZE and the OPT_ID counter doesn't move", async () => {
    const tx = sock({ ifname: 'tx0', netns: ns(), timestamping: 'software' });
    const mac = tx.info().mac;
    await expect(tx.send([frame(mac, mac, 1, 1600)])).rejects.toMatchObject({ code: 'EMSGSIZE' });
    const ok = await tx.send([frame(mac, mac, 2), frame(mac, mac, 3, 1600), frame(mac, mac, 4)]);
    expect(ok).toMatchObject({ sent: 1, firstId: 0 });
    expect(ok.error?.code).toBe('EMSGSIZE');
    const { stamps } = await tx.txStamps({ max: 8, min: 1, timeoutMs: 2000 });
    expect(stamps.map((s) => s.id)).toEqual([0]);
  });
});

describe('clock offsets', () => {
  it('CLOCK_REALTIME and CLOCK_MONOTONIC sampled back to back agree with Node’s own clocks', () => {
    const hr = process.hrtime.bigint(); // libuv: CLOCK_MONOTONIC
    const now = BigInt(Date.now()) * 1_000_000n;
    const c = sampleClocks({ samples: 16 });
    expect(c.phc).toBeNull();
    expect(c.realtimeMinusMonotonicNs).toBe(c.realtimeNs - c.monotonicNs);
    expect(Number(c.monotonicNs - hr)).toBeGreaterThanOrEqual(0);
    expect(Number(c.monotonicNs - hr)).toBeLessThan(50e6);
    expect(Math.abs(Number(c.realtimeNs - now))).toBeLessThan(50e6);
    expect(c.realtimeMonotonicUncertaintyNs).toBeLessThan(100_000);
    // The explicit conversions undo each other, and a software stamp lands on the BPF clock.
    expect(toMonotonic({ ns: c.realtimeNs, clock: 'software' }, c)).toBe(c.monotonicNs);
    expect(toRealtime({ ns: c.realtimeNs, clock: 'software' }, c)).toBe(c.realtimeNs);
  });

  it('a hardware stamp without a sampled PHC is an error, not a silent guess', () => {
    const c = sampleClocks();
    expect(() => toRealtime({ ns: 1n, clock: 'hardware' }, c)).toThrow(/PHC offset/);
  });

  it('a PHC that does not exist: ENOENT naming the device and what to check', () => {
    expect(() => sampleClocks({ ptp: 99 })).toThrow(
      expect.objectContaining({ code: 'ENOENT', message: expect.stringContaining('/dev/ptp99') }),
    );
  });

  it.skipIf(!existsSync('/dev/ptp0'))('with /dev/ptp0 present (this VM has none): the PHC is sampled against CLOCK_REALTIME', () => {
    const c = sampleClocks({ ptp: 0 });
    expect(c.phc?.device).toBe('/dev/ptp0');
    const hw = { ns: c.phc!.phcNs, clock: 'hardware' as const };
    expect(toRealtime(hw, c)).toBe(c.phc!.phcNs - c.phc!.phcMinusRealtimeNs);
  });
});
