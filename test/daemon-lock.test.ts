/**
 * One daemon per instance (issue 16, defect 1): a second `mup daemon` for an
 * instance that runs (another socket, another state file, another HTTP port
 * or the same busy one), or for another instance naming the same state file,
 * is refused before it touches anything, naming the first's pid; the first
 * keeps its pins, links, program and state file and keeps steering traffic.
 * After the first dies (SIGKILL), a new one starts.
 *
 * Real daemons (bin/mup.js) in a namespace this test makes, on a veth.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cleanupAll, MUP_BIN, TestDaemon } from './helpers/daemon.js';
import { Lab } from './helpers/netns.js';
import { instanceLockHolder, stateLockHolder } from '../src/host/lock.js';

const isRoot = process.getuid?.() === 0;
const IFACE = 'lk0';
const TOKEN = 'feedface'.repeat(4);

const config = (port: number, tokenFile: string, policy = '10.1.0.0/16'): string => `
settings: { max_policies: 16, max_localsids: 16 }
interfaces:
  - { name: ${IFACE}, xdp: native }
daemon:
  http: { listen: "127.0.0.1:${port}", token_file: ${tokenFile} }
policies:
  - { name: p1, match: ${policy}, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
`;

interface PinIds {
  [pin: string]: { id: number; prog_id?: number };
}

describe.skipIf(!isRoot)('one daemon per instance', () => {
  let lab: Lab | undefined;
  let first: TestDaemon | undefined;
  const others: TestDaemon[] = [];

  /** Kernel ids of everything pinned for the first daemon's instance (links with their program). */
  const pinIds = async (): Promise<PinIds> => {
    const dir = join(first!.bpffs, 'mup', first!.instance);
    const out: PinIds = {};
    for (const f of readdirSync(dir).sort()) {
      const kind = f.startsWith('link_') ? 'link' : f === 'prog' ? 'prog' : 'map';
      const j = JSON.parse((await execa('bpftool', ['-j', kind, 'show', 'pinned', join(dir, f)])).stdout) as { id: number; prog_id?: number };
      out[f] = { id: j.id, ...(j.prog_id === undefined ? {} : { prog_id: j.prog_id }) };
    }
    return out;
  };
  /** The program the interface runs, as the kernel says. */
  const linkProg = async (): Promise<number | undefined> =>
    (JSON.parse(await lab!.ip('mup', '-j', '-d', 'link', 'show', IFACE)) as { xdp?: { prog?: { id: number } } }[])[0]?.xdp?.prog?.id;
  /** Entries of the policy table the running program reads (found from the program itself). */
  const runningPolicies = async (): Promise<number> => {
    const prog = JSON.parse((await execa('bpftool', ['-j', 'prog', 'show', 'id', String(await linkProg())])).stdout) as { map_ids: number[] };
    for (const id of prog.map_ids) {
      const m = JSON.parse((await execa('bpftool', ['-j', 'map', 'show', 'id', String(id)])).stdout) as { name: string };
      if (m.name === 'mup_policies') return (JSON.parse((await execa('bpftool', ['-j', 'map', 'dump', 'id', String(id)])).stdout) as unknown[]).length;
    }
    throw new Error('the running program has no mup_policies map');
  };

  /** Run a second `mup daemon` with `other`'s args, `swap` replacing some of them. */
  const second = async (other: TestDaemon, swap: Record<string, string>): Promise<{ exitCode: number; output: string; pid: number }> => {
    const p = execa('node', [MUP_BIN, ...other.daemonArgs().map((a) => swap[a] ?? a)], { reject: false, all: true, timeout: 20_000 });
    const r = await p;
    return { exitCode: r.exitCode ?? -1, output: String(r.all ?? ''), pid: p.pid ?? 0 };
  };

  const newOther = (port: number, instance: string): TestDaemon => {
    const t = new TestDaemon({ config: '', netns: lab!.ns('mup'), instance });
    const tokenFile = join(t.dir, 'token');
    writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    t.writeConfig(config(port, tokenFile, '10.7.0.0/16'));
    others.push(t);
    return t;
  };

  beforeAll(async () => {
    lab = await Lab.create(['mup']);
    await lab.ip('mup', 'link', 'add', IFACE, 'type', 'veth', 'peer', 'name', `${IFACE}p`);
    await lab.ip('mup', 'link', 'set', IFACE, 'up');
    await lab.ip('mup', 'link', 'set', `${IFACE}p`, 'up');
    first = new TestDaemon({ config: '', netns: lab.ns('mup'), instance: `lock${process.pid}` });
    const tokenFile = join(first.dir, 'token');
    writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    first.writeConfig(config(9281, tokenFile));
    await first.start();
  });

  afterAll(() => cleanupAll([...others, first], lab));

  it('names the running daemon: instanceLockHolder and stateLockHolder', () => {
    expect(instanceLockHolder(first!.instance, first!.bpffs)).toBe(first!.pid);
    expect(stateLockHolder(first!.stateFile)).toBe(first!.pid);
    expect(instanceLockHolder(`none${process.pid}`, first!.bpffs)).toBeUndefined();
  });

  it.each([
    { what: 'another socket, state file and HTTP port', port: 9282 },
    { what: 'another socket and state file, the same (busy) HTTP port', port: 9281 },
  ])('refuses a second daemon for the instance ($what), naming the first; the first keeps steering', async ({ port }) => {
    const pins = await pinIds();
    const prog = await linkProg();
    const status = (await first!.api('GET', '/v1/status')).body as { program: { id: number } };
    expect(prog).toBe(status.program.id);
    const state = readFileSync(first!.stateFile, 'utf8');
    const before = await runningPolicies();

    const other = newOther(port, first!.instance);
    const r = await second(other, { [other.bpffs]: first!.bpffs });
    expect(r.exitCode, r.output).not.toBe(0);
    expect(r.output).toMatch(new RegExp(`instance ${first!.instance} is served by the daemon with pid ${first!.pid}`));

    expect(await pinIds(), 'pins, links and their program are untouched').toEqual(pins);
    expect(await linkProg(), 'the interface runs the first daemon\'s program').toBe(prog);
    expect(readFileSync(first!.stateFile, 'utf8'), 'the state file is untouched').toBe(state);
    // A change through the first daemon reaches the table the running program reads.
    const add = await first!.api('POST', '/v1/policies', { body: { name: `x${port}`, match: `10.${port % 200}.0.0/16`, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' } });
    expect(add.status, add.text).toBe(201);
    expect(await runningPolicies()).toBe(before + 1);
    const del = await first!.api('DELETE', `/v1/policies?name=x${port}`);
    expect(del.status, del.text).toBe(200);
  });

  it('refuses a daemon of another instance that names the same state file', async () => {
    const state = readFileSync(first!.stateFile, 'utf8');
    const other = newOther(9283, `lockb${process.pid}`);
    const r = await second(other, { [other.stateFile]: first!.stateFile });
    expect(r.exitCode, r.output).not.toBe(0);
    expect(r.output).toMatch(new RegExp(`state file ${first!.stateFile} is used by instance ${first!.instance}, the daemon with pid ${first!.pid}`));
    expect(readFileSync(first!.stateFile, 'utf8')).toBe(state);
    // It left nothing of its own instance behind either.
    expect(existsSync(join(other.bpffs, 'mup', other.instance))).toBe(false);
    expect(await linkProg()).toBe(((await first!.api('GET', '/v1/status')).body as { program: { id: number } }).program.id);
  });

  it('after the first daemon dies (SIGKILL), a new one takes the instance over', async () => {
    const pid = first!.pid;
    await first!.stop('SIGKILL');
    expect(instanceLockHolder(first!.instance, first!.bpffs), 'the kernel dropped the lock with the process').toBeUndefined();
    await first!.start();
    expect(first!.pid).not.toBe(pid);
    expect(instanceLockHolder(first!.instance, first!.bpffs)).toBe(first!.pid);
    const s = (await first!.api('GET', '/v1/status')).body as { adopted: boolean; interfaces: { attached: boolean }[] };
    expect(s.adopted).toBe(true);
    expect(s.interfaces.every((i) => i.attached)).toBe(true);
  });
});
