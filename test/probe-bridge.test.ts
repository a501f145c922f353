/**
 * The latency probe on every frame (udp_port 0) through a real Linux bridge
 * (issue 16, defect 6). The probe writes the entry time into the source MAC
 * of each translated frame; a bridge drops a frame whose source is a group
 * (multicast) address, so a stamp that sets the I/G bit loses traffic.
 *
 *   gnb (to-br) ── p-gnb ─[ br0 in ns br ]─ p-mup ── (to-br) mup, XDP, forwarding tx
 *
 * The gNB's kernel sends G-PDUs to a policy prefix; the translated SRv6
 * frames go back out of mup (XDP_TX, MACs swapped, source MAC stamped),
 * through the bridge, and are counted on the gNB's interface.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { DEFAULT_OBJECT, openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { closeProbeMaps, openProbeMaps, readProbeCounters, writeSelector, type ProbeMaps } from '../src/dataplane/probe-maps.js';
import { macStamp } from '../src/dataplane/probe-layout.js';
import { closeLab, Lab, sweepStaleNamespaces, TESTPEER_OBJECT } from './helpers/netns.js';

const isRoot = process.getuid?.() === 0;
const haveObjects = existsSync(DEFAULT_OBJECT) && existsSync(TESTPEER_OBJECT);

const GNB4 = '192.0.2.1';
const MUP4 = '192.0.2.2';
const COUNT = 200;

const CONFIG = `
settings:
  forwarding: tx
policies:
  - match: 10.0.1.0/24
    sr_prefix: 2001:db8:1::/48
    src_prefix: 2001:db8:ff::/64
`;

describe.skipIf(!haveObjects || !isRoot)('probe on every frame, through a Linux bridge', () => {
  let lab: Lab | undefined;
  let dp: Dataplane | undefined;
  let maps: ProbeMaps | undefined;

  beforeAll(async () => {
    await sweepStaleNamespaces();
    lab = await Lab.create(['gnb', 'br', 'mup']);
    await lab.ip('gnb', 'link', 'add', 'to-br', 'type', 'veth', 'peer', 'name', 'p-gnb', 'netns', lab.ns('br'));
    await lab.ip('mup', 'link', 'add', 'to-br', 'type', 'veth', 'peer', 'name', 'p-mup', 'netns', lab.ns('br'));
    await lab.batch('br', [
      'link add br0 type bridge stp_state 0',
      'link set p-gnb master br0',
      'link set p-mup master br0',
      'link set p-gnb up',
      'link set p-mup up',
      'link set br0 up',
    ]);
    // XDP_TX on a veth delivers only when the peer has an XDP program.
    await lab.ip('br', 'link', 'set', 'dev', 'p-mup', 'xdpdrv', 'obj', TESTPEER_OBJECT, 'sec', 'xdp');
    await lab.batch('gnb', ['link set to-br up', `addr add ${GNB4}/24 dev to-br`, `route add 10.0.1.0/24 via ${MUP4}`]);
    await lab.batch('mup', ['link set to-br up', `addr add ${MUP4}/24 dev to-br`]);
    dp = openDataplane({ config: parseConfig(CONFIG, 'probe-bridge') });
    dp.attach('to-br', { netns: lab.ns('mup'), mode: 'native' });
    maps = openProbeMaps({ fd: dp.progFd });
  });

  afterAll(async () => {
    const problems: string[] = [];
    try {
      if (maps !== undefined) closeProbeMaps(maps);
    } catch (e) {
      problems.push((e as Error).message);
    }
    await closeLab(dp, lab, problems);
  });

  it(`${COUNT} stamped frames all cross the bridge, each with a unicast, locally administered source MAC`, async () => {
    writeSelector(dp!.tables, { enabled: true, udpPort: 0 });
    const before = readProbeCounters(maps!.stateFd);
    const sniff = await lab!.listen<{ frame: string }>('gnb', [
      'sniff', '--iface', 'to-br', '--ethertype', '0x86dd', '--count', String(COUNT), '--timeout', '8',
      '--filter', '20=04', // IPv6 next header IPv4: the translated G-PDUs, not neighbour discovery
    ]);
    await lab!.peer('gnb', [
      'stream', '--bind', GNB4, '--to', '10.0.1.1', '--count', String(COUNT), '--rate', '1000', '--teid', '4660',
      '--inner-src', '10.45.0.1', '--inner-dst', '198.51.100.7', '--inner-dport', '5000',
    ]);
    const frames = (await sniff.done).map((f) => Buffer.from(f.frame, 'hex'));
    const after = readProbeCounters(maps!.stateFd);
    const ev = dp!.counters().events;
    const translated = Number(ev['fwd_tx']!.packets);
    const stamped = Number(after.seen - before.seen);
    // Everything was translated and stamped (the kernel may queue the first
    // few packets behind ARP, but none is lost on this idle link).
    expect(translated, 'translated (fwd_tx)').toBe(COUNT);
    expect(stamped, 'stamped by the probe').toBe(COUNT);
    const macs = frames.map((f) => f.subarray(6, 12).toString('hex'));
    const group = macs.filter((m) => (parseInt(m.slice(0, 2), 16) & 1) === 1);
    expect(frames.length, `frames through the bridge (${group.length} of the received had a group source MAC)`).toBe(COUNT);
    const now = process.hrtime.bigint();
    for (const f of frames) {
      expect(f[6]! & 0x03, `source MAC ${f.subarray(6, 12).toString('hex')}: U/L 1, I/G 0`).toBe(0x02);
      // The stamp decodes to an entry time of this run (within the last minute).
      const t = macStamp(f, now);
      expect(t <= now && now - t < 60_000_000_000n, `stamp ${t} vs now ${now}`).toBe(true);
    }
    writeSelector(dp!.tables, { enabled: false });
  });
});
