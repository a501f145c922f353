/**
 * Forwarding mode fib: after a batch whose table write failed part way,
 * the rules written back point at their next hop again. The batch deleted
 * a chunk of entries before its second delete write failed; the daemon
 * puts them back (test/write-failure.test.ts), where they take other rule
 * ids, and the next-hop cache indexes every rule again. Without that pass
 * the cache knew the rules by their old ids: the rules written back kept
 * whatever their new ids pointed at (here, for some, nothing: their packets
 * went to the kernel's FIB lookup, event fwd_redirect, instead of the
 * cached next hop), until a full pass for another reason.
 *
 * The daemon runs in this process (startInProcDaemon) with --netns: this
 * thread moves into the test's namespace for good, which is why the test
 * has a file (a process) of its own. Real routes and neighbours in the
 * namespace; frames through the real program (BPF_PROG_TEST_RUN there).
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_OBJECT } from '../src/dataplane/index.js';
import { DELETE_CHUNK } from '../src/dataplane/tables.js';
import { startInProcDaemon, type InProcDaemon } from './helpers/inproc-daemon.js';
import { uplinkFrame } from './helpers/packets.js';
import { Lab, sweepStaleNamespaces } from './helpers/netns.js';

const isRoot = process.getuid?.() === 0;

const N = 2 * DELETE_CHUNK + 10;
/** Even policies go by route 1 (to MAC_A), odd ones by route 2 (to MAC_B). */
const MAC_A = '02:00:00:00:0a:02';
const MAC_B = '02:00:00:00:0b:02';
const macOf = (i: number): string => (i % 2 === 0 ? MAC_A : MAC_B);
const match = (i: number): string => `10.${i >> 8}.${i & 255}.0/24`;
const CONFIG =
  `settings: { forwarding: fib, max_policies: ${N + 8}, max_localsids: 8 }\npolicies:\n` +
  Array.from({ length: N }, (_, i) => `  - { name: p${i}, match: ${match(i)}, sr_prefix: 2001:db8:${(i % 2) + 1}::/48, src_prefix: 2001:db8:ff::/64 }\n`).join('');
/**
 * The batch deletes every policy in this order (1021 is prime to N): its
 * first delete chunk is spread over both routes, and the rules written back
 * take the freed ids in another order than they had them, so a rule's new
 * id is mostly one a rule of the other route had.
 */
const order = Array.from({ length: N }, (_, i) => (i * 1021) % N);

const frame = (i: number): Buffer => uplinkFrame(`10.${i >> 8}.${i & 255}.5`);

describe.skipIf(!isRoot || !existsSync(DEFAULT_OBJECT))('forwarding fib: rules written back after a failed batch write point at their next hop', () => {
  let lab: Lab | undefined;
  let run: InProcDaemon | undefined;

  beforeAll(async () => {
    await sweepStaleNamespaces();
    lab = await Lab.create(['dut', 'a']);
    // Before the link exists: no duplicate address detection on it (fewer netlink events for the cache to see).
    await lab.sysctl('dut', ['net.ipv6.conf.all.forwarding=1', 'net.ipv6.conf.all.accept_dad=0', 'net.ipv6.conf.default.accept_dad=0']);
    await lab.ip('dut', 'link', 'add', 'x0', 'type', 'veth', 'peer', 'name', 'y0', 'netns', lab.ns('a'));
    await lab.batch('dut', [
      'link set x0 up',
      'addr add fd00:a::1/64 dev x0 nodad',
      `neigh replace fd00:a::2 lladdr ${MAC_A} dev x0 nud permanent`,
      `neigh replace fd00:a::3 lladdr ${MAC_B} dev x0 nud permanent`,
      'route add 2001:db8:1::/48 via fd00:a::2 dev x0',
      'route add 2001:db8:2::/48 via fd00:a::3 dev x0',
    ]);
    await lab.ip('a', 'link', 'set', 'y0', 'up');
    run = await startInProcDaemon('writefailfib', CONFIG, { netns: lab.ns('dut') });
  }, 60_000);

  afterAll(async () => {
    try {
      run?.stop();
    } finally {
      await lab?.destroy();
    }
  });

  /** Full passes of the next-hop cache so far. */
  const fullPasses = (): number => run!.daemon.status().nexthops?.fullPasses ?? -1;
  async function until(what: string, ok: () => boolean): Promise<void> {
    const t0 = performance.now();
    while (!ok()) {
      if (performance.now() - t0 > 15_000) throw new Error(`${what}: not after 15 s (${JSON.stringify(run!.daemon.status().nexthops)})`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  /** Policy i's frame: the cached next hop's MAC, or the event. */
  const where = (i: number): string => {
    const r = run!.daemon.dataplane.run(frame(i));
    return r.event === 'fwd_cached' ? [...r.out.subarray(0, 6)].map((x) => x.toString(16).padStart(2, '0')).join(':') : r.event;
  };
  /** Policies not forwarded through their own route's cached next hop, and where they went. */
  const astray = (): string[] => Array.from({ length: N }, (_, i) => i).flatMap((i) => (where(i) === macOf(i) ? [] : [`p${i}: ${where(i)}`]));

  it('every rule of the first delete chunk, written back on other ids, forwards through its own next hop', async () => {
    const d = run!.daemon;
    await until('the first full pass', () => fullPasses() >= 1 && astray().length === 0);
    const ids = (): (number | null)[] => d.listRules('policy').map((r) => r.rule);
    const before = ids();
    const passes = fullPasses();
    const t = d.dataplane.rules;
    t.testFailDeletesFrom = 1;
    try {
      await expect(d.applyBatch(order.map((i) => ({ op: 'delete', policy: { match: match(i) } })))).rejects.toThrow(/delete write refused/);
    } finally {
      t.testFailDeletesFrom = undefined;
    }
    expect(t.policyCount).toBe(N);
    // Right away (before the cache's pass, which waits 50 ms for more events): no policy goes to the other route's
    // neighbour, some to the kernel's FIB lookup. The daemon points the deleted rules' ids at nothing, and the data
    // path would not use a slot of another range anyway (bpf/fwd.h checks the slot's prefix against the packet's).
    const wrong = Array.from({ length: N }, (_, i) => i).filter((i) => where(i) === macOf(i + 1));
    expect(wrong.slice(0, 8), 'policies sent to the other route\'s neighbour').toEqual([]);
    const after = ids();
    const owner = new Map(before.map((id, i) => [id, i]));
    const crossed = after.filter((id, i) => id !== before[i] && owner.has(id) && owner.get(id)! % 2 !== i % 2).length;
    expect(crossed, 'rules written back on an id a rule of the other route had').toBeGreaterThan(DELETE_CHUNK / 4);
    // The pass after the failure (a few ms); without one, the packets show where the stale cache sends them.
    const t0 = performance.now();
    while (astray().length > 0 && performance.now() - t0 < 5_000) await new Promise((r) => setTimeout(r, 20));
    expect(astray().slice(0, 8), 'policies not forwarded through their own route').toEqual([]);
    expect(fullPasses()).toBeGreaterThan(passes);
  });

  it('a delete whose state record cannot be made durable is undone, and the rule forwards through its next hop again', async () => {
    // The undo writes the rule back (on another id, or the same one pointed at nothing by the delete) without the
    // next-hop cache: before, it stayed on the kernel's FIB lookup (fwd_redirect) until a full pass for another reason.
    const d = run!.daemon;
    expect(where(1)).toBe(MAC_B);
    const passes = fullPasses();
    d.testFailSyncs = 'EIO';
    try {
      await expect(d.deleteRule('policy', { name: 'p1' })).rejects.toThrow(/fdatasync refused.*the change was not saved, so it was undone/);
    } finally {
      d.testFailSyncs = undefined;
    }
    expect(d.listRules('policy').some((r) => r.name === 'p1')).toBe(true);
    const t0 = performance.now();
    while (where(1) !== MAC_B && performance.now() - t0 < 5_000) await new Promise((r) => setTimeout(r, 20));
    expect(where(1), 'policy p1 after the undo').toBe(MAC_B);
    expect(fullPasses()).toBeGreaterThan(passes);
  });
});
