/**
 * The start's `ip` children spawned while the daemon is small
 * (src/host/spawn-early.ts): the next-hop table readers a daemon in
 * forwarding mode fib runs are the ones it spawned before reading its
 * config, started before its next-hop monitor (which it spawns after the
 * load, as before); in forwarding mode tx nothing takes them, and none is
 * left running. Real daemons (bin/mup.js) in a namespace this test makes.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cleanupAll, TestDaemon } from './helpers/daemon.js';
import { Lab } from './helpers/netns.js';

const isRoot = process.getuid?.() === 0;
const IFACE = 'se0';

const config = (forwarding: string): string => `
settings: { max_policies: 16, max_localsids: 16, forwarding: ${forwarding} }
interfaces:
  - { name: ${IFACE}, xdp: native }
policies:
  - { name: p1, match: 10.1.0.0/16, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
`;

interface Child {
  readonly pid: number;
  readonly cmd: string;
  /** Clock ticks after boot (/proc/PID/stat field 22). */
  readonly start: number;
}

/** The daemon's child processes (setpriv has exec'd ip in each). */
function children(pid: number): Child[] {
  const pids = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter((x) => x !== '').map(Number);
  return pids.map((c) => {
    const stat = readFileSync(`/proc/${c}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { pid: c, cmd: readFileSync(`/proc/${c}/cmdline`, 'utf8').split('\0').join(' ').trim(), start: Number(fields[19]) };
  });
}

describe.skipIf(!isRoot)('ip children spawned early', () => {
  let lab: Lab | undefined;
  const daemons: TestDaemon[] = [];

  beforeAll(async () => {
    lab = await Lab.create(['mup']);
    await lab.ip('mup', 'link', 'add', IFACE, 'type', 'veth', 'peer', 'name', `${IFACE}p`);
    await lab.ip('mup', 'link', 'set', IFACE, 'up');
    await lab.ip('mup', 'link', 'set', `${IFACE}p`, 'up');
  });

  afterAll(() => cleanupAll(daemons, lab));

  const start = async (forwarding: string): Promise<TestDaemon> => {
    const t = new TestDaemon({ config: config(forwarding), netns: lab!.ns('mup'), instance: `se${forwarding}${process.pid}` });
    daemons.push(t);
    await t.start();
    return t;
  };

  it('fib: its three table readers were spawned before the load, ahead of the next-hop monitor', async () => {
    const t = await start('fib');
    // The first pass reads the tables through the readers; wait until it has.
    for (let i = 0; i < 100; i++) {
      const st = (await t.api('GET', '/v1/status')).body as { nexthops?: { fullPasses?: number } | null };
      if ((st.nexthops?.fullPasses ?? 0) > 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const kids = children(t.pid!);
    const readers = kids.filter((c) => c.cmd.includes('-batch'));
    const monitor = kids.filter((c) => c.cmd.includes('monitor label route'));
    expect(readers.map((r) => r.cmd).sort()).toEqual(['ip -4 -json -batch -', 'ip -6 -json -batch -', 'ip -json -batch -']);
    expect(monitor).toHaveLength(1);
    // Before: spawned at the first read, after the monitor. Now before the
    // config was read; the monitor after the program was loaded (hundreds of ms).
    for (const r of readers) expect(r.start).toBeLessThan(monitor[0]!.start);
    expect(kids.filter((c) => c.cmd === 'ip monitor link')).toHaveLength(1);
    expect(await t.stop()).toBe(0);
    // Its program stays on the interface (pinned) until torn down: the next daemon attaches there.
    daemons.splice(daemons.indexOf(t), 1);
    await t.cleanup();
  });

  it('tx: the readers nobody takes are killed; the link monitor runs', async () => {
    const t = await start('tx');
    const kids = children(t.pid!);
    expect(kids.map((c) => c.cmd)).toEqual(['ip monitor link']);
    expect(await t.stop()).toBe(0);
  });
});
