/**
 * The program is loaded (verified) on a worker thread while prepare() reads
 * the rules (issue 19, docs/daemon.md "Start"). What that must not change:
 * a start refused after the load began (a bad rule, a second daemon for the
 * instance) leaves no program or map behind in the process and no pin; a
 * restart on pinned tables runs on exactly those tables; pins that changed
 * between the config read and the lock are not bypassed (the program is
 * loaded again on the pins as they are); a program the verifier refuses is
 * reported with the verifier's own words, as before.
 *
 * The real Daemon of src/daemon/ in this process on the compiled
 * build/mup.bpf.o (and a copy with one instruction broken), its pins in a
 * bpffs mounted in a temporary directory; no interfaces, nothing attached.
 * Every daemon is stopped and the mount and directory removed in afterEach.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Daemon, type DaemonOptions } from '../src/daemon/daemon.js';
import { createLogger } from '../src/daemon/log.js';
import { DEFAULT_OBJECT } from '../src/dataplane/dataplane.js';
import { LibbpfError, mapInfo, objGet, closeFd } from '../src/dataplane/libbpf.js';
import { LockedError } from '../src/host/lock.js';
import { INSERT_CHUNK } from '../src/dataplane/tables.js';
import { WriteThread } from '../src/dataplane/write-thread.js';
import { ListAheadThread } from '../src/config/list-ahead.js';
import { parseConfig } from '../src/config/load.js';
import { plainRule } from '../src/config/rows.js';
import type { Session } from '../src/config/types.js';

const isRoot = process.getuid?.() === 0;

const GOOD = `
settings: { max_policies: 16, max_localsids: 16, max_sessions: 16 }
policies:
  - { name: p1, match: 10.1.0.0/16, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
localsids:
  - { name: l1, sid: "2001:db8:a::/48", src_prefix_len: 64 }
`;
/** Settings fine, the second policy not: refused after the program load began. */
const BAD_RULE = `
settings: { max_policies: 16, max_localsids: 16, max_sessions: 16 }
policies:
  - { name: p1, match: 10.1.0.0/16, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
  - { name: p2, match: 10.2.0.0/33, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
`;

/** BPF programs and maps this process holds open (fds of /proc/self/fd). */
function bpfFds(): { progs: number; maps: number } {
  let progs = 0;
  let maps = 0;
  for (const fd of readdirSync('/proc/self/fd')) {
    let target: string;
    try {
      target = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue; // closed meanwhile (readdir's own fd)
    }
    if (target === 'anon_inode:bpf-prog') progs++;
    else if (target === 'anon_inode:bpf-map') maps++;
  }
  return { progs, maps };
}

/**
 * A copy of the object whose program the verifier refuses: its first
 * instruction, `*(u64 *)(r10 - 88) = r1`, stores r9 instead, which nothing
 * has written ("R9 !read_ok").
 */
function brokenObject(to: string): void {
  const elf = readFileSync(DEFAULT_OBJECT);
  const shoff = Number(elf.readBigUInt64LE(0x28));
  const shentsize = elf.readUInt16LE(0x3a);
  const shnum = elf.readUInt16LE(0x3c);
  const shstrndx = elf.readUInt16LE(0x3e);
  const strOff = Number(elf.readBigUInt64LE(shoff + shstrndx * shentsize + 0x18));
  for (let i = 0; i < shnum; i++) {
    const sh = shoff + i * shentsize;
    const nameAt = strOff + elf.readUInt32LE(sh);
    if (elf.toString('latin1', nameAt, elf.indexOf(0, nameAt)) !== 'xdp') continue;
    const off = Number(elf.readBigUInt64LE(sh + 0x18));
    // opcode 0x7b (stx dw), regs: dst r10 (low nibble), src r1 (high nibble)
    if (elf[off] !== 0x7b || elf[off + 1] !== 0x1a) throw new Error(`unexpected first instruction of section xdp in ${DEFAULT_OBJECT}: update this test`);
    elf[off + 1] = 0x9a;
    writeFileSync(to, elf);
    return;
  }
  throw new Error(`no section xdp in ${DEFAULT_OBJECT}`);
}

describe.skipIf(!isRoot)('the program loaded while the config is read', () => {
  let dir: string | undefined;
  let bpffs = '';
  const daemons: Daemon[] = [];
  let n = 0;

  /** A daemon of this test's instance; `log` collects its lines (debug level). */
  function daemon(config: string, o: Partial<DaemonOptions> = {}): { d: Daemon; log: Record<string, unknown>[] } {
    dir ??= mkdtempSync(join(tmpdir(), 'mup-early-'));
    bpffs = join(dir, 'bpffs');
    const configPath = join(dir, `mup${++n}.yaml`);
    writeFileSync(configPath, config);
    const log: Record<string, unknown>[] = [];
    const sink = new Writable({
      write: (c: Buffer, _e, cb) => {
        for (const l of c.toString().split('\n')) if (l.trim() !== '') log.push(JSON.parse(l) as Record<string, unknown>);
        cb();
      },
    });
    const d = new Daemon({
      configPath,
      instance: `early${process.pid}`,
      bpffs,
      stateFile: join(dir, `state${n}.json`),
      log: createLogger({ instance: 'test', level: 'debug', json: true, stream: sink }),
      ...o,
    });
    daemons.push(d);
    return { d, log };
  }
  const pinDir = (): string => join(bpffs, 'mup', `early${process.pid}`);
  /** Kernel ids of the pinned tables. */
  const pinnedIds = (): Record<string, number> => {
    const out: Record<string, number> = {};
    for (const m of ['policies', 'localsids', 'counters', 'sessions']) {
      const fd = objGet(join(pinDir(), m), m);
      try {
        out[m] = mapInfo(fd).id;
      } finally {
        closeFd(fd);
      }
    }
    return out;
  };
  const msgs = (log: Record<string, unknown>[]): string[] => log.map((l) => String(l['msg']));
  const startLine = (log: Record<string, unknown>[]): Record<string, unknown> | undefined =>
    log.find((l) => l['msg'] === 'data plane loaded' || l['msg'] === 'took over the running data plane');

  afterEach(() => {
    const problems: string[] = [];
    for (const d of daemons.splice(0)) {
      try {
        d.stop();
      } catch (e) {
        problems.push(`stop: ${(e as Error).message}`);
      }
    }
    if (dir !== undefined) {
      try {
        execFileSync('umount', [bpffs], { stdio: ['ignore', 'ignore', 'pipe'] });
      } catch {
        // not mounted
      }
      rmSync(dir, { recursive: true, force: true });
      dir = undefined;
    }
    if (problems.length > 0) throw new Error(problems.join('; '));
  });

  it('a rule refused after the load began: no program, map or pin is left behind', async () => {
    const before = bpfFds();
    const { d, log } = daemon(BAD_RULE);
    await expect(d.prepare()).rejects.toThrow(/policies\[1\]\.match/);
    // The load did begin (so the test shows what it claims), and it is all given back.
    expect(log.find((l) => l['msg'] === 'loading the program while the rules are read')?.['settings']).toBe('read ahead');
    expect(bpfFds()).toEqual(before);
    expect(existsSync(bpffs)).toBe(false);
  });

  it('a JSON config: the settings are read ahead too (before, the load began after every rule was read)', async () => {
    const before = bpfFds();
    const json = JSON.stringify({
      settings: { max_policies: 16, max_localsids: 16, max_sessions: 16 },
      policies: [
        { name: 'p1', match: '10.1.0.0/16', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' },
        { name: 'p2', match: '10.2.0.0/33', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' },
      ],
    });
    const { d, log } = daemon(json);
    await expect(d.prepare()).rejects.toThrow(/policies\[1\]\.match/);
    expect(log.filter((l) => l['msg'] === 'loading the program while the rules are read').map((l) => l['settings'])).toEqual(['read ahead']);
    expect(bpfFds()).toEqual(before);
  });

  it('a second daemon for the instance, refused at the lock, unloads the program it loaded on the first one\'s tables', async () => {
    const first = daemon(GOOD, { detachOnExit: true });
    await first.d.start();
    expect(startLine(first.log)?.['programLoad']).toMatch(/^early/);
    const ids = pinnedIds();
    const before = bpfFds();
    const second = daemon(GOOD);
    await expect(second.d.start()).rejects.toBeInstanceOf(LockedError);
    expect(second.log.find((l) => l['msg'] === 'loading the program while the rules are read')?.['reuse']).toBe(true);
    expect(bpfFds()).toEqual(before);
    expect(pinnedIds()).toEqual(ids);
  });

  it('a restart runs the early program on the pinned tables; tables pinned anew meanwhile are not bypassed', async () => {
    const first = daemon(GOOD);
    await first.d.start();
    const ids = pinnedIds();
    first.d.stop(); // pins stay: the data plane keeps running
    daemons.splice(daemons.indexOf(first.d), 1);

    const second = daemon(GOOD);
    await second.d.start();
    const line = startLine(second.log);
    expect(line?.['programLoad']).toMatch(/^early/);
    expect(line?.['adopted']).toBe(true);
    const m = second.d.dataplane.maps;
    expect({ policies: mapInfo(m.policies).id, localsids: mapInfo(m.localsids).id, counters: mapInfo(m.counters).id, sessions: mapInfo(m.sessions).id }).toEqual(ids);
    expect(second.d.dataplane.rules.policyCount).toBe(1);
    second.d.stop();
    daemons.splice(daemons.indexOf(second.d), 1);

    // Prepared on these pins, which are replaced before the lock: loaded again on the new ones.
    const third = daemon(GOOD, { detachOnExit: true });
    await third.d.prepare();
    const other = daemon(GOOD, { replaceTables: true });
    await other.d.start(); // fresh tables, pinned in place of the old ones
    const fresh = pinnedIds();
    expect(fresh.policies).not.toBe(ids.policies);
    other.d.stop();
    daemons.splice(daemons.indexOf(other.d), 1);
    third.d.lock();
    third.d.takeOver();
    const l3 = startLine(third.log);
    expect(l3?.['programLoad']).toMatch(/^plain \(the pinned tables changed/);
    expect(mapInfo(third.d.dataplane.maps.policies).id).toBe(fresh.policies);
  });

  it('settings read ahead wrongly (a column-0 "settings:" inside a quoted string): the program is loaded again for the file\'s, the other one unloaded', async () => {
    const tricky = `daemon:\n  state_file: "/tmp/x\nsettings: { max_policies: 8, max_localsids: 8 }\n"\n${GOOD}`;
    const before = bpfFds();
    const { d, log } = daemon(tricky, { detachOnExit: true });
    await d.start();
    expect(log.filter((l) => l['msg'] === 'loading the program while the rules are read').map((l) => l['settings'])).toEqual(['read ahead', 'parsed']);
    expect(msgs(log)).toContain('the settings read ahead were not the file\'s: loading the program again');
    expect(startLine(log)?.['programLoad']).toBe('early (settings parsed)');
    // A small file: no write thread for its fill.
    expect(startLine(log)?.['fillThread']).toBeUndefined();
    expect(mapInfo(d.dataplane.maps.policies).maxEntries).toBe(16);
    expect(bpfFds().progs).toBe(before.progs + 1);
    d.stop();
    daemons.splice(daemons.indexOf(d), 1);
    expect(bpfFds()).toEqual(before);
  });

  /** A config of more than a megabyte: its settings (first, or `last`), 9,000 policies and 9,000 sessions (more than the thread's least). */
  function large(last = false): string {
    const settings = 'settings: { max_policies: 9000, max_localsids: 16, max_sessions: 9000 }\n';
    const out = [last ? '' : settings, 'policies:\n'];
    for (let i = 0; i < 9000; i++) out.push(`  - { name: policy-${i}, match: 10.${i >> 8}.${i & 255}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n`);
    out.push('sessions:\n');
    for (let i = 0; i < 9000; i++) out.push(`  - { name: session-${i}, ue: 10.200.${i >> 8}.${i & 255}/32, teid: ${i + 1}, qfi: 9, endpoint: 192.0.2.1, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ff::/64" }\n`);
    if (last) out.push(settings);
    const text = out.join('');
    if (text.length <= 1 << 20) throw new Error('the large config is not larger than the head the daemon reads first: make it larger');
    return text;
  }

  it.each([
    ['its settings first: read from its head, before the rest of the file', false],
    ['its settings last: read ahead from the whole text, as before', true],
  ])('a large config, %s; its fill written by two threads', async (_what, last) => {
    const before = bpfFds();
    const { d, log } = daemon(large(last), { detachOnExit: true, writeThreadFrom: 1 << 20 });
    await d.start();
    expect(log.filter((l) => l['msg'] === 'loading the program while the rules are read').map((l) => l['settings'])).toEqual(['read ahead']);
    const line = startLine(log);
    expect(line?.['programLoad']).toBe('early (settings read ahead)');
    // The thread wrote the first of the two largest tables (the policies: 9,000 in 5 chunks), unless it was not ready in
    // time (its load is 35-40 ms; a loaded host's may be later than this small parse); never 'failed'.
    expect(line?.['fillThread']).toBeDefined();
    expect(line?.['fillThread']).not.toBe('failed');
    if (line?.['fillThread'] !== 'not ready') expect(line?.['fillThread']).toEqual({ chunks: Math.ceil(9000 / INSERT_CHUNK) });
    expect([d.dataplane.rules.policyCount, d.dataplane.rules.sessionCount]).toEqual([9000, 9000]);
    d.stop();
    daemons.splice(daemons.indexOf(d), 1);
    expect(bpfFds()).toEqual(before);
    // Stopped after the fill: the thread has left.
    await vi.waitFor(() => expect(WriteThread.live).toBe(0), { timeout: 10_000, interval: 10 });
  });

  it('a large JSON config: its sessions read on a second thread, the rules as one thread reads them; the thread then ends', async () => {
    // Enough policies that the parse reaches the sessions after the thread has loaded (about 0.1-0.2 s).
    const policies = Array.from({ length: 100_000 }, (_, i) => `{"match":"100.${64 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}/32","sr_prefix":"2001:db8:1::/48","src_prefix":"2001:db8:ff::/64"}`);
    const sessions = Array.from({ length: 9000 }, (_, i) => `{"name":"session-${i}","ue":"10.200.${i >> 8}.${i & 255}/32","teid":${i + 1},"qfi":9,"endpoint":"192.0.2.1","source":"198.51.100.1","isd":"2001:db8:2::/48","src_prefix":"2001:db8:ff::/64"}`);
    const text = `{"settings":{"max_policies":100000,"max_localsids":16,"max_sessions":9000},"policies":[\n${policies.join(',\n')}],"localsids":[],"sessions":[\n${sessions.join(',\n')}]}\n`;
    const { d, log } = daemon(text, { detachOnExit: true, listAheadFrom: 1 << 20 });
    await d.start();
    const ahead = startLine(log)?.['listAhead'] as { outcome: string; indexTaken: boolean } | undefined;
    // Taken, unless a loaded host's thread had not begun when the parse got there (then read here, as without it).
    expect(['taken', 'not begun when the parse reached the list']).toContain(ahead?.outcome);
    if (ahead?.outcome === 'taken') expect(ahead.indexTaken).toBe(true);
    expect([d.dataplane.rules.policyCount, d.dataplane.rules.sessionCount]).toEqual([100_000, 9000]);
    const alone = parseConfig(text, 'alone.json');
    const plain = (c: { sessions?: readonly Session[] }): string => JSON.stringify((c.sessions ?? []).map(plainRule), (_k, v: unknown) => (typeof v === 'bigint' ? v.toString(16) : v));
    expect(plain(d.rules.effective())).toEqual(plain(alone));
    d.stop();
    daemons.splice(daemons.indexOf(d), 1);
    await vi.waitFor(() => expect(ListAheadThread.live).toBe(0), { timeout: 10_000, interval: 10 });
  });

  it('a restart onto pinned tables starts no write thread (their entries go through the change path)', async () => {
    const first = daemon(large(), { writeThreadFrom: 1 << 20 });
    await first.d.start();
    first.d.stop(); // pins stay: the data plane keeps running
    daemons.splice(daemons.indexOf(first.d), 1);
    await vi.waitFor(() => expect(WriteThread.live).toBe(0), { timeout: 10_000, interval: 10 });
    const started = WriteThread.started;
    const second = daemon(large(), { writeThreadFrom: 1 << 20, detachOnExit: true });
    await second.d.start();
    const line = startLine(second.log);
    expect(line?.['adopted']).toBe(true);
    expect(line?.['fillThread']).toBeUndefined();
    expect(WriteThread.started).toBe(started);
    expect(second.d.dataplane.rules.policyCount).toBe(9000);
  });

  it('a large config refused after the load began: the program, the maps and the write thread all go', async () => {
    const before = bpfFds();
    const bad = large().replace('match: 10.0.7.0/24', 'match: 10.0.7.0/33');
    // None left by the tests before (waited for: a thread leaves at its own pace).
    await vi.waitFor(() => expect(WriteThread.live).toBe(0), { timeout: 10_000, interval: 10 });
    const started = WriteThread.started;
    const { d, log } = daemon(bad, { writeThreadFrom: 1 << 20 });
    await expect(d.prepare()).rejects.toThrow(/policies\[7\]\.match/);
    // The thread was started for it (so the test shows what it claims), and it leaves with the refusal.
    expect(WriteThread.started).toBe(started + 1);
    await vi.waitFor(() => expect(WriteThread.live).toBe(0), { timeout: 10_000, interval: 10 });
    expect(log.find((l) => l['msg'] === 'loading the program while the rules are read')?.['settings']).toBe('read ahead');
    expect(bpfFds()).toEqual(before);
    expect(existsSync(bpffs)).toBe(false);
  });

  it('a program the verifier refuses: the start fails with the verifier\'s words, nothing left open', async () => {
    dir = mkdtempSync(join(tmpdir(), 'mup-early-'));
    const object = join(dir, 'broken.bpf.o');
    brokenObject(object);
    const before = bpfFds();
    const { d, log } = daemon(GOOD, { object, detachOnExit: true });
    const err = await d.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(LibbpfError);
    expect((err as LibbpfError).message).toMatch(/^loading .*broken\.bpf\.o: .*\(EACCES\)/);
    expect((err as LibbpfError).log.join('\n')).toMatch(/R9 !read_ok/);
    const w = log.find((l) => l['msg'] === 'the program loaded while the config was read is not used: loading it again now');
    expect(w?.['why']).toMatch(/^the early load failed \(loading .*\(EACCES\)\)/);
    expect(bpfFds().progs).toBe(before.progs);
  });

  it('changes the daemon before acknowledged after this one read the state file (before the lock) are read again at takeover', async () => {
    const policy = (name: string, match: string): Record<string, string> => ({ name, match, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' });
    const first = daemon(GOOD);
    await first.d.start();
    const stateFile = first.d.stateFile;
    await first.d.putRule('policy', policy('a1', '10.2.0.0/16'), 'add');
    // `kill PID; mup daemon ...`: the next daemon reads the state file while the one before still answers a change.
    const second = daemon(GOOD, { stateFile });
    await second.d.prepare();
    await first.d.putRule('policy', policy('a2', '10.3.0.0/16'), 'add');
    // And a compaction's temp file it left (a compaction killed part way) is not the reader's to remove.
    const temp = `${stateFile}.compacting-1-1`;
    writeFileSync(temp, 'half a compaction');
    first.d.stop();
    daemons.splice(daemons.indexOf(first.d), 1);
    expect(existsSync(temp)).toBe(true);
    second.d.lock();
    second.d.takeOver();
    expect([...second.d.ruleMap('policy').keys()].sort()).toEqual(['10.1.0.0/16', '10.2.0.0/16', '10.3.0.0/16']);
    expect(second.d.dataplane.rules.policyCount).toBe(3);
    expect(msgs(second.log)).toContain('the state file changed after it was read (the daemon before this one answered changes as it stopped): read again');
    expect(existsSync(temp)).toBe(false);
  });
});
