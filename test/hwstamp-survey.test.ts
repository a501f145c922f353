/**
 * Which kernel devices here report hardware or driver timestamps (issue 18
 * item 5; the findings are in docs/probe.md, "Hardware timestamps"). This
 * kernel has no netdevsim and no PTP mock clock (CONFIG_NETDEVSIM,
 * CONFIG_PTP_1588_CLOCK_MOCK not set), so every kind of device this machine
 * can create in a namespace the test makes is asked, through the addon
 * (ETHTOOL_GET_TS_INFO) and through `ethtool -T` (netlink): both must agree,
 * and the addon's 'auto' mode must take hardware stamps exactly where the
 * driver lists hardware modes, and fall back to software, saying why,
 * everywhere else. A frame sent on each device that transmits software
 * stamps gets its TX stamp.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { ADDON_PATH, describeTsInfo, TimestampingSocket } from '../src/probe/native.js';
import { Lab, sweepStaleNamespaces } from './helpers/netns.js';

const ready = existsSync(ADDON_PATH) && process.getuid?.() === 0;

/** `ethtool -T` parsed: the capability names and whether any hardware mode or PHC is listed. */
function ethtoolT(out: string): { capabilities: string[]; ptp: string | null; hwTx: string[]; hwRx: string[] } {
  const section = (head: string): string[] => {
    const lines = out.split('\n');
    const i = lines.findIndex((l) => l.startsWith(head));
    if (i < 0) return [];
    const rest = lines[i]!.slice(head.length).trim();
    if (rest === 'none') return [];
    const items: string[] = rest === '' ? [] : [rest];
    for (const l of lines.slice(i + 1)) {
      if (!l.startsWith('\t')) break;
      items.push(l.trim().split(/\s+/)[0]!);
    }
    return items;
  };
  const ptp = /PTP Hardware Clock: (\S+)/.exec(out)?.[1] ?? null;
  return {
    capabilities: section('Capabilities:'),
    ptp: ptp === 'none' ? null : ptp,
    hwTx: section('Hardware Transmit Timestamp Modes:'),
    hwRx: section('Hardware Receive Filter Modes:'),
  };
}

// Kinds `ip link add` may create here; a kind this kernel lacks is reported and skipped.
const KINDS: [string, string][] = [
  ['veth', 'type veth peer name sv-peer'],
  ['bridge', 'type bridge'],
  ['vxlan', 'type vxlan id 42 dstport 4789 local 127.0.0.1'],
  ['ifb', 'type ifb'],
  ['dummy', 'type dummy'],
  ['macvlan', 'link sv-veth type macvlan'],
];

describe.skipIf(!ready)('hardware and driver timestamps on every device kind here', () => {
  let lab: Lab | undefined;
  const made: { kind: string; dev: string }[] = [];
  const missing: string[] = [];

  beforeAll(async () => {
    await sweepStaleNamespaces();
    lab = await Lab.create(['hw']);
    await lab.batch('hw', ['link set dev lo up']);
    made.push({ kind: 'loopback', dev: 'lo' });
    for (const [kind, spec] of KINDS) {
      const dev = kind === 'veth' ? 'sv-veth' : `sv-${kind}`;
      try {
        await lab.batch('hw', [`link add name ${dev} ${spec}`, `link set dev ${dev} up`, ...(kind === 'veth' ? ['link set dev sv-peer up'] : [])]);
        made.push({ kind, dev });
      } catch {
        missing.push(kind);
      }
    }
  });

  afterAll(async () => {
    await lab?.destroy();
  });

  it('the addon and ethtool agree on each; auto takes hardware only where the driver lists it, else falls back to software and says why', async () => {
    // veth, bridge and loopback exist on any kernel this project runs on (docs/platform.md).
    expect(made.map((m) => m.kind)).toEqual(expect.arrayContaining(['loopback', 'veth', 'bridge']));
    const found: string[] = [];
    for (const { kind, dev } of made) {
      const e = ethtoolT(await lab!.exec('hw', 'ethtool', ['-T', dev]));
      const s = TimestampingSocket.open({ ifname: dev, netns: lab!.ns('hw'), timestamping: 'auto' });
      try {
        const info = s.info();
        const d = describeTsInfo(info.tsInfo);
        expect(d.capabilities, kind).toEqual(e.capabilities);
        expect(d.ptp === null, kind).toBe(e.ptp === null);
        const hw = e.hwTx.length > 0 && e.hwRx.length > 0;
        if (hw) {
          // A device with hardware modes: auto must use them (none here so far; docs/probe.md lists what was found).
          expect(info.hardware.enabled, `${kind}: ${info.hardware.message}`).toBe(true);
          expect(info.clock, kind).toBe('hardware');
        } else {
          expect(info.clock, kind).toBe('software');
          expect(info.hardware.attempted, kind).toBe(true);
          expect(info.hardware.enabled, kind).toBe(false);
          expect(info.hardware.message, kind).toMatch(/SIOCSHWTSTAMP/);
        }
        found.push(`${kind}: ${e.capabilities.join(' ') || '-'}; PHC ${e.ptp ?? 'none'}; hw tx ${e.hwTx.join(' ') || 'none'}; hw rx ${e.hwRx.join(' ') || 'none'}`);
      } finally {
        s.close();
      }
    }
    // What this kernel offers, for the record in the test output.
    console.log(`timestamping by device kind:\n  ${found.join('\n  ')}${missing.length > 0 ? `\n  not creatable here: ${missing.join(', ')}` : ''}`);
  });

  it('a frame sent on a device with software-transmit gets its TX stamp (the software fallback end to end)', async () => {
    const sent: string[] = [];
    for (const { kind, dev } of made) {
      const e = ethtoolT(await lab!.exec('hw', 'ethtool', ['-T', dev]));
      if (!e.capabilities.includes('software-transmit')) continue;
      const s = TimestampingSocket.open({ ifname: dev, netns: lab!.ns('hw'), timestamping: 'auto' });
      try {
        const f = Buffer.alloc(60);
        f.fill(0xff, 0, 6);
        Buffer.from(s.info().mac.split(':').map((h) => parseInt(h, 16))).copy(f, 6);
        f.writeUInt16BE(0x88b5, 12);
        expect((await s.send([f])).sent, kind).toBe(1);
        const { stamps } = await s.txStamps({ max: 4, min: 1, timeoutMs: 2000 });
        expect(stamps.length, kind).toBe(1);
        expect(stamps[0]!.timestamp.clock, kind).toBe('software');
        expect(stamps[0]!.timestamp.ns, kind).toBeGreaterThan(0n);
        sent.push(kind);
      } finally {
        s.close();
      }
    }
    expect(sent).toEqual(expect.arrayContaining(['loopback', 'veth']));
  });
});
