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
import { readFileSync, readdirSync } from 'node:fs';
import { innerUdp4, srv6Frame } from '../src/packet/frames.js';
import { ipv6Prefix, parseIpv4, parseIpv6 } from '../src/sid/addr.js';
import { encodeGtp4Sid, encodeGtp4Src, qfi, teid } from '../src/sid/mobile.js';
import { TESTPEER_OBJECT } from './helpers/netns.js';

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
      ['prog', 'policies', 'localsids', 'counters', 'sessions', `link_native_${IFACE}`].every((f) => existsSync(join(pins(), f))),
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

  it('a reload whose attach fails puts the tables back (a reload of the old file then finds them as they were)', async () => {
    // A bridge takes no native XDP: the edit's attach fails after its rules were written.
    await lab!.ip('mup', 'link', 'add', 'dum0', 'type', 'bridge');
    const policies = async (): Promise<number> => ((await d!.api('GET', '/v1/status')).body as { tables: { policies: { entries: number } } }).tables.policies.entries;
    const before = await policies();
    const good = config('  - { name: n3b, match: 10.98.0.0/16, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n');
    try {
      d!.writeConfig(
        config('  - { name: n3b, match: 10.98.0.0/16, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n  - { name: n3c, match: 10.97.0.0/16, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n').replace(
          `  - { name: ${IFACE}, xdp: native }`,
          `  - { name: ${IFACE}, xdp: native }\n  - { name: dum0, xdp: native }`,
        ),
      );
      const r = await d!.api('POST', '/v1/reload');
      expect(r.status, r.text).not.toBe(200);
      expect(await policies(), 'the edit\'s policy n3c is not left in the tables').toBe(before);
      // The file as it was: the same as loaded, so the daemon keeps its rules; the tables must hold just those.
      d!.writeConfig(good);
      const back = await d!.api('POST', '/v1/reload');
      expect(back.status, back.text).toBe(200);
      expect(back.body).toMatchObject({ configChanged: false });
      expect(await policies()).toBe(before);
      const list = (await d!.api('GET', '/v1/policies')).body as { policies: { name: string }[] };
      expect(list.policies.map((p) => p.name).sort()).toEqual(['n3', 'n3b']);
    } finally {
      d!.writeConfig(good);
      await lab!.ip('mup', 'link', 'del', 'dum0');
    }
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

/**
 * The first frames after a recreated interface is up (issue 16, soak fault
 * iface), with traffic from the gNB side already flowing.
 *   - uplink: the daemon attaches on the creation event, in that turn of its
 *     event loop (not 20 ms later, behind queued work), so the program is on
 *     the device before a frame can cross it: no G-PDU reaches the kernel
 *     untranslated. (On this loaded host the old code passed this too: the
 *     second `ip` run took longer than its 20 ms; with the daemon's link
 *     monitor stopped the test fails, so it does see a late attach.)
 *   - downlink (forwarding fib): the next-hop cache's slot named the old
 *     device's ifindex until the watcher re-read the kernel's tables; a
 *     frame translated meanwhile was redirected to the dead ifindex and lost.
 *     To make "meanwhile" last (as on a loaded host, where that re-read takes
 *     hundreds of ms), the watcher's own `ip monitor` is stopped (SIGSTOP)
 *     during the recreation: only the daemon's link event is left, and it
 *     must send those rules back to the FIB lookup at once.
 */
describe.skipIf(!isRoot)('the first frames through a recreated interface', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;
  let gpdu = '';
  const MAC_MUP = '02:00:00:00:99:01';
  const MAC_GNB = '02:00:00:00:99:02';
  const fibConfig = `
settings: { forwarding: fib, max_policies: 16, max_localsids: 16 }
interfaces:
  - { name: ${IFACE}, xdp: native }
policies:
  - { name: n3, match: ${MUP4}/32, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
localsids:
  - { name: n3d, sid: "2001:db8:2::/48", src_prefix_len: 64 }
`;
  /** G-PDUs that reached the mup kernel's UDP (nobody listens on 2152 there): untranslated. */
  const udpNoPorts = async (): Promise<number> => {
    const m = /UdpNoPorts\s+(\d+)/.exec((await execa('ip', ['netns', 'exec', lab!.ns('mup'), 'nstat', '-asz', 'UdpNoPorts'])).stdout);
    return Number(m?.[1] ?? 0);
  };
  const translated = async (fn: string): Promise<number> =>
    ((await d!.api('GET', '/v1/counters')).body as { functions: Record<string, { packets: number }> }).functions[fn]!.packets;
  const attached = async (): Promise<boolean> =>
    ((await d!.api('GET', '/v1/status')).body as Status).interfaces[0]!.attached;

  /** The pair made in separate steps (add: down; then address, up, neighbour), the gnb side able to take XDP_TX frames. */
  const addVeth = async (): Promise<void> => {
    await lab!.ip('mup', 'link', 'add', IFACE, 'address', MAC_MUP, 'type', 'veth', 'peer', 'name', 'to-mup', 'address', MAC_GNB, 'netns', lab!.ns('gnb'));
  };
  const upVeth = async (): Promise<void> => {
    await lab!.ip('gnb', 'link', 'set', 'to-mup', 'up');
    await lab!.batch('mup', [`addr add ${MUP4}/24 dev ${IFACE}`, `link set ${IFACE} up`, `neigh replace ${GNB4} lladdr ${MAC_GNB} dev ${IFACE} nud permanent`]);
  };
  const gnbSide = async (): Promise<void> => {
    await lab!.ip('gnb', 'addr', 'replace', `${GNB4}/24`, 'dev', 'to-mup');
    await lab!.ip('gnb', 'link', 'set', 'dev', 'to-mup', 'xdpdrv', 'obj', TESTPEER_OBJECT, 'sec', 'xdp');
    await lab!.peer('gnb', ['tx-csum-off', '--iface', 'to-mup']);
  };
  /** End.M.GTP4.E to the gNB (10.99.0.2, from the SID), sent raw from gnb to the veth. */
  const downFrame = (): string => {
    const f = srv6Frame({
      src: encodeGtp4Src(ipv6Prefix(parseIpv6('2001:db8:ff::', 't'), 64), parseIpv4('203.0.113.5', 't')),
      dst: encodeGtp4Sid(ipv6Prefix(parseIpv6('2001:db8:2::', 't'), 48), parseIpv4(GNB4, 't'), { qfi: qfi(9), r: false, u: false, teid: teid(0x1000) }),
      inner: innerUdp4({ src: parseIpv4('203.0.113.5', 't'), dst: parseIpv4('10.45.0.2', 't'), sport: 9000, dport: 40000, len: 46 }),
    });
    Buffer.from(MAC_MUP.replaceAll(':', ''), 'hex').copy(f, 0);
    Buffer.from(MAC_GNB.replaceAll(':', ''), 'hex').copy(f, 6);
    return f.toString('hex');
  };
  const sendDown = (): Promise<string> =>
    lab!.exec('gnb', 'python3', ['-c', 'import socket,sys;s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW);s.bind(("to-mup",0));s.send(bytes.fromhex(sys.argv[1]))', downFrame()], 30_000);
  /**
   * The GTP-U frame End.M.GTP4.E sent back to the gNB arrives on gnb's veth (IPv4 to 10.99.0.2, UDP 2152).
   * The sniffer's window opens before the sender process starts and must outlast its start: on a loaded
   * 2-core host \`ip netns exec python3\` took 3.3 s, and a 2 s window closed before the frame was sent
   * (the data plane had forwarded it: fwd_tx counted). With --count 1 it ends at the frame, so the long
   * window costs nothing when the frame comes; a lost frame never comes, whatever the window.
   */
  const downlinkArrives = async (): Promise<boolean> => {
    const l = await lab!.listen<{ frame: string }>('gnb', ['sniff', '--iface', 'to-mup', '--ethertype', '0x0800', '--count', '1', '--timeout', '25', '--filter', '30=0a630002', '--filter', '36=0868']);
    await sendDown();
    return (await l.done).length === 1;
  };
  /** The daemon's child that watches for the next-hop cache (`ip monitor route neigh link rule netconf`). */
  const nhMonitor = (): number => {
    const pid = d!.pid!;
    for (const t of readdirSync(`/proc/${pid}/task`)) {
      for (const c of readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)) {
        const cmd = readFileSync(`/proc/${c}/cmdline`, 'utf8');
        if (cmd.includes('monitor') && cmd.includes('neigh')) return Number(c);
      }
    }
    throw new Error('the next-hop watcher\'s ip monitor was not found');
  };

  beforeAll(async () => {
    lab = await Lab.create(['gnb', 'mup']);
    await lab.sysctl('mup', ['net.ipv4.conf.all.forwarding=1', 'net.ipv6.conf.all.forwarding=1']);
    await addVeth();
    await upVeth();
    await gnbSide();
    const spec = { teid: 0x1234, qfi: 9, inner_src: '10.60.0.1', inner_dst: '10.70.0.1', sport: 4000, dport: 5000, payload: Buffer.from('links').toString('hex') };
    gpdu = (JSON.parse(await lab.peer('gnb', ['gpdu', JSON.stringify([spec])])) as string[])[0]!;
    d = new TestDaemon({ config: fibConfig, netns: lab.ns('mup'), instance: `linkup${process.pid}`, args: ['--link-check-ms', '600000'] });
    await d.start();
    await waitUntil('the next hop of the End.M.GTP4.E rule cached', 15_000, () => Promise.resolve(/"cached":1\b/.test(d!.log)));
  });

  afterAll(async () => {
    try {
      await d?.cleanup();
    } finally {
      await lab?.destroy();
    }
  });

  it('uplink: the program is on the new device before it is up; no G-PDU reaches the kernel untranslated', async () => {
    await lab!.ip('mup', 'link', 'del', IFACE);
    await waitUntil('status: not attached', 10_000, async () => !(await attached()));
    // A sender in gnb already running (every 0.5 ms, errors ignored while
    // there is no route), UDP checksum 0 (no offload to undo); then the pair
    // made again in the quickest order: the mup side added, addressed and up
    // in one \`ip -batch\` (up before any daemon could react), then the gnb
    // side up in a second \`ip\` run: the first G-PDU can cross one process
    // start after the creation event. (The soak's order, gnb side first and
    // the dut's up last, leaves the daemon more time than this.)
    // The sender says "ready" once it sends and runs until SIGTERM (at most 60 s), not for a fixed
    // time: on a loaded host the recreation below can outlast any fixed time, and a sender that had
    // stopped (or not yet started) would leave nothing to check.
    const sender = execa('ip', ['netns', 'exec', lab!.ns('gnb'), 'python3', '-c',
      'import signal,socket,sys,time\n' +
        'stop=[]\n' +
        'signal.signal(signal.SIGTERM,lambda *_:stop.append(1))\n' +
        's=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.setsockopt(socket.SOL_SOCKET,11,1);s.bind(("0.0.0.0",2152))\n' +
        'p=bytes.fromhex(sys.argv[1]);end=time.monotonic()+60;n=0\n' +
        'print("ready",flush=True)\n' +
        'while not stop and time.monotonic()<end:\n' +
        ' try:\n  s.sendto(p,(sys.argv[2],2152));n+=1\n' +
        ' except OSError:\n  pass\n' +
        ' time.sleep(0.0005)\n' +
        'print(n)',
      gpdu,
      MUP4,
    ], { reject: false, timeout: 90_000 });
    let said = '';
    sender.stdout?.on('data', (c: Buffer) => (said += c.toString()));
    let noPortsBefore: number;
    let before: number;
    try {
      await waitUntil('the sender in gnb running', 30_000, () => Promise.resolve(said.startsWith('ready\n')));
      noPortsBefore = await udpNoPorts();
      before = await translated('h_m_gtp4_d');
      await execa('sh', ['-c', [
        `printf 'link add ${IFACE} address ${MAC_MUP} type veth peer name to-mup address ${MAC_GNB} netns ${lab!.ns('gnb')}\\naddr add ${MUP4}/24 dev ${IFACE}\\nlink set ${IFACE} up\\nneigh replace ${GNB4} lladdr ${MAC_GNB} dev ${IFACE} nud permanent\\n' | ip -n ${lab!.ns('mup')} -batch -`,
        `printf 'addr add ${GNB4}/24 dev to-mup\\nlink set to-mup up\\nneigh replace ${MUP4} lladdr ${MAC_MUP} dev to-mup nud permanent\\n' | ip -n ${lab!.ns('gnb')} -batch -`,
      ].join(' && ')]);
      // Frames cross the new interface (or the wait times out and the checks below say so), then the sender stops.
      await waitUntil('a G-PDU translated on the new interface', 30_000, async () => (await translated('h_m_gtp4_d')) > before).catch(() => undefined);
    } finally {
      sender.kill('SIGTERM');
    }
    const sent = await sender;
    expect(sent.exitCode, `the sender: ${sent.stderr}`).toBe(0);
    const untranslated = (await udpNoPorts()) - noPortsBefore;
    const done = (await translated('h_m_gtp4_d')) - before;
    expect(done, 'G-PDUs crossed the new interface and were translated').toBeGreaterThan(0);
    expect(untranslated, `G-PDUs that reached the kernel untranslated (the program not yet on the device when it came up); ${done} translated`).toBe(0);
    await gnbSide();
  });

  it('downlink: a cached next hop on the old device goes back to the FIB lookup on the link event', async () => {
    expect(await downlinkArrives(), 'downlink forwarded before the recreation').toBe(true);
    const mon = nhMonitor();
    process.kill(mon, 'SIGSTOP');
    try {
      await lab!.ip('mup', 'link', 'del', IFACE);
      await waitUntil('status: not attached', 10_000, async () => !(await attached()));
      await addVeth();
      await upVeth();
      await gnbSide();
      await waitUntil('status: attached again', 10_000, () => attached());
      expect(await downlinkArrives(), 'the first End.M.GTP4.E frame after the recreation reached the gNB').toBe(true);
    } finally {
      process.kill(mon, 'SIGCONT');
    }
  }, 120_000); // a lost frame fails each check after the sniffer's 25 s window, not at the 60 s default
});
