/**
 * A takeover whose new XDP mode the interface refuses leaves the interface
 * running what it ran. br0 ran `xdp: generic`; with the daemon stopped (the
 * data plane left running) the file says native, which a bridge's driver
 * does not have (EOPNOTSUPP). The start is refused, naming the interface,
 * the kernel's reason and the generic hint, and br0 still runs the program
 * it ran, in generic mode, on a pinned link: G-PDUs sent while no daemon runs
 * are translated (the counters, which carry over, show them at the next
 * start).
 *
 * Before, Pins.attach removed the generic link's pin before it tried the
 * native link; nothing else held that link at a takeover, so br0 ran no
 * program at all after the refusal, its GTP-U was routed untranslated, and
 * every restart (systemd's Restart=on-failure) failed the same way.
 *
 * A real daemon (bin/mup.js) in a namespace "mup" whose bridge br0 holds the
 * veth to "gnb". afterAll stops it, tears its pins down and unmounts its
 * bpffs, and deletes the namespaces (with their interfaces and XDP), also
 * after a failed test.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_OBJECT } from '../src/dataplane/index.js';
import { cleanupAll, TestDaemon } from './helpers/daemon.js';
import { Lab, sweepStaleNamespaces } from './helpers/netns.js';

const isRoot = process.getuid?.() === 0;
const MUP4 = '10.99.0.1';
const GNB4 = '10.99.0.2';

/** br0 in `mode` (no `xdp:` line: native, the default). */
const config = (mode: 'generic' | 'native' | undefined): string => `
settings: { max_policies: 16, max_localsids: 16 }
interfaces:
  - { name: br0${mode === undefined ? '' : `, xdp: ${mode}`} }
policies:
  - { name: n3, match: ${MUP4}/32, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
`;

interface Status {
  program: { id: number } | null;
  interfaces: { name: string; mode: string; attached: boolean }[];
}

/** What the kernel says runs on an interface: the program and the mode (ip's xdp attach mode: 1 native, 2 generic). */
interface Xdp {
  prog: number | undefined;
  mode: number | undefined;
}

describe.skipIf(!isRoot || !existsSync(DEFAULT_OBJECT))('a takeover whose XDP mode the interface refuses', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;
  let gpdu = '';

  const pins = (): string => join(d!.bpffs, 'mup', d!.instance);
  const xdp = async (): Promise<Xdp> => {
    const l = (JSON.parse(await lab!.ip('mup', '-j', '-d', 'link', 'show', 'br0')) as { xdp?: { mode?: number; prog?: { id: number } } }[])[0];
    return { prog: l?.xdp?.prog?.id, mode: l?.xdp?.mode };
  };
  const translated = async (): Promise<number> =>
    ((await d!.api('GET', '/v1/counters')).body as { functions: Record<string, { packets: number }> }).functions['h_m_gtp4_d']!.packets;
  const send = (count: number): Promise<string> =>
    lab!.peer('gnb', ['udp-send', '--bind', GNB4, '--sport', '2152', '--to', MUP4, '--port', '2152', '--hex', gpdu, '--count', String(count)]);

  beforeAll(async () => {
    await sweepStaleNamespaces();
    lab = await Lab.create(['gnb', 'mup']);
    // A bridge: no native XDP in its driver (the kernel here has no dummy module); the veth to gnb is its port.
    await lab.ip('mup', 'link', 'add', 'to-gnb', 'type', 'veth', 'peer', 'name', 'to-mup', 'netns', lab.ns('gnb'));
    await lab.batch('mup', ['link add br0 type bridge', 'link set to-gnb master br0', `addr add ${MUP4}/24 dev br0`, 'link set to-gnb up', 'link set br0 up']);
    await lab.batch('gnb', [`addr add ${GNB4}/24 dev to-mup`, 'link set to-mup up']);
    await lab.peer('gnb', ['tx-csum-off', '--iface', 'to-mup']);
    const spec = { teid: 0x1234, qfi: 9, inner_src: '10.60.0.1', inner_dst: '10.70.0.1', sport: 4000, dport: 5000, payload: Buffer.from('mode').toString('hex') };
    gpdu = (JSON.parse(await lab.peer('gnb', ['gpdu', JSON.stringify([spec])])) as string[])[0]!;
    d = new TestDaemon({ config: config('generic'), netns: lab.ns('mup'), instance: `tkmode${process.pid}` });
  }, 60_000);

  afterAll(async () => {
    await cleanupAll([d], lab);
  }, 60_000);

  for (const [title, mode] of [
    ['set to native', 'native'],
    ['the xdp line deleted (native, the default)', undefined],
  ] as const) {
    it(`${title}: the start is refused, and br0 still runs the program it ran, in generic mode, and translates`, async () => {
      d!.writeConfig(config('generic'));
      await d!.start();
      const s = (await d!.api('GET', '/v1/status')).body as Status;
      expect(s.interfaces).toMatchObject([{ name: 'br0', mode: 'generic', attached: true }]);
      const prog = s.program!.id;
      expect(await xdp()).toEqual({ prog, mode: 2 });
      // One G-PDU at a time until one is translated: the bridge has learnt gnb's address and ARP is done.
      const first = await translated();
      for (let i = 0; (await translated()) === first; i++) {
        if (i === 50) throw new Error('no G-PDU translated by the program on br0');
        await send(1);
        await new Promise((r) => setTimeout(r, 100));
      }
      const before = await translated();
      expect(await d!.stop()).toBe(0);
      expect(await xdp(), 'a stopped daemon leaves the data plane running').toEqual({ prog, mode: 2 });

      d!.writeConfig(config(mode));
      const r = await d!.startFailing();
      expect(r.exitCode, r.output).toBe(2);
      expect(r.output).toMatch(/br0 \(native\).*(not supported|EOPNOTSUPP|ENOTSUP).*xdp: generic/s);
      expect(await xdp(), 'br0 runs the program it ran, in generic mode').toEqual({ prog, mode: 2 });
      expect(readdirSync(pins()).filter((f) => f.startsWith('link_')), 'its link pinned again, in its mode').toEqual(['link_generic_br0']);
      expect(r.output).toMatch(new RegExp(`br0 is back in generic mode, running the program it ran \\(id ${prog}\\)`));
      expect(r.output).not.toMatch(/NO XDP PROGRAM/);

      // Traffic while no daemon runs: translated by what runs on br0, counted in the pinned counters.
      await send(5);
      d!.writeConfig(config('generic'));
      await d!.start();
      expect(await translated(), 'the G-PDUs sent after the refused start were translated').toBeGreaterThanOrEqual(before + 5);
      expect(await d!.stop()).toBe(0);
    }, 120_000);
  }
});
