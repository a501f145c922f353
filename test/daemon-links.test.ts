/**
 * Pins removed and an interface made again under a running daemon (issue
 * 16, defect 7): the daemon holds its links, pins them again, attaches to a
 * recreated interface by itself, logs each event, reports the truth in
 * status and /metrics, and accepts a reload while an interface is missing.
 *
 * A real daemon (bin/mup.js) in a namespace "mup", a veth to "gnb"; G-PDUs
 * sent from gnb's socket show that the program on the veth translates.
 */
import { existsSync, renameSync, rmSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestDaemon } from './helpers/daemon.js';
import { Lab } from './helpers/netns.js';
import { instanceLockHolder } from '../src/host/lock.js';

const isRoot = process.getuid?.() === 0;
const IFACE = 'to-gnb';
const MUP4 = '10.99.0.1';
const GNB4 = '10.99.0.2';

const config = (extra = ''): string => `
settings: { max_policies: 16, max_localsids: 16 }
interfaces:
  - { name: ${IFACE}, xdp: native }
policies:
  - { name: n3, match: ${MUP4}/32, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
${extra}`;

interface Status {
  program: { id: number } | null;
  interfaces: { name: string; attached: boolean; ifindex: number | null; progId: number | null; pinned: boolean }[];
}

async function waitUntil(what: string, ms: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe.skipIf(!isRoot)('links and interfaces under a running daemon', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;
  let gpdu = '';

  const pins = (): string => join(d!.bpffs, 'mup', d!.instance);
  const linkPin = (): string => join(pins(), `link_native_${IFACE}`);
  const status = async (): Promise<Status> => (await d!.api('GET', '/v1/status')).body as Status;
  /** Program the kernel says runs on the interface. */
  const xdpProg = async (): Promise<number | undefined> =>
    (JSON.parse(await lab!.ip('mup', '-j', '-d', 'link', 'show', IFACE)) as { xdp?: { prog?: { id: number } } }[])[0]?.xdp?.prog?.id;
  const linkId = async (): Promise<number> => (JSON.parse((await execa('bpftool', ['-j', 'link', 'show', 'pinned', linkPin()])).stdout) as { id: number }).id;
  const translated = async (): Promise<number> =>
    ((await d!.api('GET', '/v1/counters')).body as { functions: Record<string, { packets: number }> }).functions['h_m_gtp4_d']!.packets;
  const attachedMetric = async (): Promise<string | undefined> =>
    /^mup_interface_attached\{interface="to-gnb",mode="native"\} (\d)$/m.exec((await d!.api('GET', '/metrics')).text)?.[1];

  /** The gnb side of the veth: address, up, software checksums. */
  const veth = async (): Promise<void> => {
    await lab!.ip('mup', 'link', 'add', IFACE, 'type', 'veth', 'peer', 'name', 'to-mup', 'netns', lab!.ns('gnb'));
    await lab!.ip('mup', 'addr', 'add', `${MUP4}/24`, 'dev', IFACE);
    await lab!.ip('gnb', 'addr', 'add', `${GNB4}/24`, 'dev', 'to-mup');
    await lab!.ip('mup', 'link', 'set', IFACE, 'up');
    await lab!.ip('gnb', 'link', 'set', 'to-mup', 'up');
    await lab!.peer('gnb', ['tx-csum-off', '--iface', 'to-mup']);
  };

  /** Send G-PDUs from gnb to the veth until the uplink counter moves (the program on the veth translated one). */
  const expectTranslation = async (): Promise<void> => {
    const before = await translated();
    await waitUntil('a G-PDU translated by the program on the veth', 15_000, async () => {
      await lab!.peer('gnb', ['udp-send', '--bind', GNB4, '--sport', '2152', '--to', MUP4, '--port', '2152', '--hex', gpdu, '--count', '1']);
      return (await translated()) > before;
    });
  };

  beforeAll(async () => {
    lab = await Lab.create(['gnb', 'mup']);
    await veth();
    const spec = { teid: 0x1234, qfi: 9, inner_src: '10.60.0.1', inner_dst: '10.70.0.1', sport: 4000, dport: 5000, payload: Buffer.from('links').toString('hex') };
    gpdu = (JSON.parse(await lab.peer('gnb', ['gpdu', JSON.stringify([spec])])) as string[])[0]!;
    d = new TestDaemon({ config: config(), netns: lab.ns('mup'), instance: `links${process.pid}` });
    await d.start();
  });

  afterAll(async () => {
    try {
      await d?.cleanup();
    } finally {
      await lab?.destroy();
    }
  });

  it('keeps running when the link pin is removed, pins it again and logs it', async () => {
    const prog = (await status()).program!.id;
    expect(await xdpProg()).toBe(prog);
    const id = await linkId();
    unlinkSync(linkPin());
    // The daemon holds the link: removing the pin does not detach it.
    expect(await xdpProg(), 'the interface still runs our program').toBe(prog);
    await waitUntil('the link pin made again', 10_000, async () => existsSync(linkPin()));
    expect(await linkId(), 'the same link, pinned again').toBe(id);
    expect(d!.log).toMatch(/the link pin was removed: pinned it again/);
    const s = await status();
    expect(s.interfaces).toEqual([expect.objectContaining({ name: IFACE, attached: true, progId: prog, pinned: true })]);
    await expectTranslation();
  });

  it('pins everything again when the whole pin directory is removed, and locks the new one', async () => {
    const prog = (await status()).program!.id;
    // Moved away in one step, then removed: \`rm -r\` on the directory itself
    // races with the daemon pinning again into it (and may fail, ENOTEMPTY).
    renameSync(pins(), `${pins()}-gone`);
    rmSync(`${pins()}-gone`, { recursive: true });
    expect(await xdpProg()).toBe(prog);
    await waitUntil('every pin made again', 10_000, async () =>
      ['prog', 'policies', 'localsids', 'counters', `link_native_${IFACE}`].every((f) => existsSync(join(pins(), f))),
    );
    expect(d!.log).toMatch(/the pin directory was removed/);
    expect(instanceLockHolder(d!.instance, d!.bpffs), 'the new directory is locked by the daemon').toBe(d!.pid);
    const pinnedProg = JSON.parse((await execa('bpftool', ['-j', 'prog', 'show', 'pinned', join(pins(), 'prog')])).stdout) as { id: number };
    expect(pinnedProg.id).toBe(prog);
    expect((await status()).interfaces[0]).toMatchObject({ attached: true, progId: prog });
    await expectTranslation();
  });

  it('reports a deleted interface, reloads while it is missing, and attaches again when it comes back', async () => {
    const prog = (await status()).program!.id;
    await lab!.ip('mup', 'link', 'del', IFACE);
    await waitUntil('status: not attached', 10_000, async () => {
      const i = (await status()).interfaces[0]!;
      return !i.attached && i.ifindex === null;
    });
    expect(await attachedMetric()).toBe('0');
    await waitUntil('the log line', 5_000, () => Promise.resolve(/the interface is gone/.test(d!.log)));

    // A reload while it is missing applies the rules and names it.
    d!.writeConfig(config('  - { name: n3b, match: 10.98.0.0/16, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n'));
    const r = await d!.api('POST', '/v1/reload');
    expect(r.status, r.text).toBe(200);
    expect(r.body).toMatchObject({ added: 1, interfaces: { missing: [IFACE] } });
    const list = (await d!.api('GET', '/v1/policies')).body as { policies: { name: string }[] };
    expect(list.policies.map((p) => p.name)).toContain('n3b');

    await veth();
    await waitUntil('status: attached again', 15_000, async () => (await status()).interfaces[0]!.attached);
    expect(await xdpProg()).toBe(prog);
    expect(await attachedMetric()).toBe('1');
    expect(d!.log).toMatch(/the interface came back \(a new device\): attached our program again/);
    await expectTranslation();
  });
});

/**
 * A recreated interface is attached on the kernel's link event, not at the
 * next periodic check: this daemon checks every 10 minutes only, so the
 * interface coming back within the wait below is the event's doing. (With
 * the 1 s check alone, the frames between the interface's return and the
 * next tick were lost: npm run soak, fault iface.)
 */
describe.skipIf(!isRoot)('a recreated interface, attached on the link event', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;

  const status = async (): Promise<Status> => (await d!.api('GET', '/v1/status')).body as Status;
  const veth = async (): Promise<void> => {
    await lab!.ip('mup', 'link', 'add', IFACE, 'type', 'veth', 'peer', 'name', 'to-mup', 'netns', lab!.ns('gnb'));
    await lab!.ip('mup', 'link', 'set', IFACE, 'up');
    await lab!.ip('gnb', 'link', 'set', 'to-mup', 'up');
  };

  beforeAll(async () => {
    lab = await Lab.create(['gnb', 'mup']);
    await veth();
    d = new TestDaemon({ config: config(), netns: lab.ns('mup'), instance: `linkev${process.pid}`, args: ['--link-check-ms', '600000'] });
    await d.start();
  });

  afterAll(async () => {
    try {
      await d?.cleanup();
    } finally {
      await lab?.destroy();
    }
  });

  it('attaches again within seconds although the periodic check is 10 minutes away', async () => {
    const prog = (await status()).program!.id;
    expect((await status()).interfaces[0]!.attached).toBe(true);
    await lab!.ip('mup', 'link', 'del', IFACE);
    await waitUntil('status: not attached', 10_000, async () => !(await status()).interfaces[0]!.attached);
    await veth();
    await waitUntil('status: attached again (on the link event)', 15_000, async () => (await status()).interfaces[0]!.attached);
    const xdp = (JSON.parse(await lab!.ip('mup', '-j', '-d', 'link', 'show', IFACE)) as { xdp?: { prog?: { id: number } } }[])[0]?.xdp?.prog?.id;
    expect(xdp).toBe(prog);
  });
});
