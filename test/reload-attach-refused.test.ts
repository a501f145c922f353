/**
 * A reload that an interface refuses at attach changes nothing: the program
 * the links run, the links and pins, the tables (the kernel's maps, entry for
 * entry) and the rule set stay as they were, and health has nothing to say.
 * Two ways in: the edit adds an interface that already runs another XDP
 * program (EBUSY) with the object unchanged, and the edit adds a bridge in
 * native mode (no native XDP in its driver: EOPNOTSUPP) while a new build of
 * the object waits to be swapped in.
 *
 * Before, with a new object, the new program was loaded on the tables with
 * the edit's rules and swapped in on the links before the refusal: the
 * daemon ran the new program on tables holding rules it did not list (the
 * log said "the tables are unchanged"), and never closed the old program.
 * Without a new object the tables were put back, but the interfaces
 * attached before the refused one kept a pinned link running the program,
 * outside the running config.
 *
 * A real daemon (bin/mup.js) in a namespace of its own, on a copy of the
 * object that the test replaces with another build (MUP_BUILD_ID).
 * afterAll stops it, tears its pins down, and deletes the namespace (which
 * takes the interfaces and their XDP programs with it).
 */
import { copyFileSync, existsSync, readFileSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bpfCflags } from '../src/dataplane/cflags.js';
import { DEFAULT_OBJECT } from '../src/dataplane/index.js';
import { cleanupAll, TestDaemon, type ApiAnswer } from './helpers/daemon.js';
import { Lab, sweepStaleNamespaces, TESTPEER_OBJECT } from './helpers/netns.js';

const REPO = fileURLToPath(new URL('..', import.meta.url));
const isRoot = process.getuid?.() === 0;

/** The interfaces: v0 runs the program from the start, v2 is added by the edits, v4 runs another XDP program, br0 has no native XDP. */
const IFACES = ['v0', 'v2', 'v4', 'br0'] as const;

const policy = (i: number, sr = '2001:db8:1::/48'): string =>
  `  - { name: p${i}, match: 10.0.${i}.0/24, sr_prefix: "${sr}", src_prefix: "2001:db8:ff::/64" }\n`;
/** p1..p4 and one local SID on `interfaces`; `edited`: p1 points elsewhere, p4 is gone, p5 is new, the local SID has an MTU. */
const config = (interfaces: readonly string[], edited: boolean): string =>
  'settings: { max_policies: 64, max_localsids: 16 }\n' +
  `interfaces:\n${interfaces.map((i) => `  - ${i}\n`).join('')}` +
  'policies:\n' +
  policy(1, edited ? '2001:db8:9::/48' : '2001:db8:1::/48') +
  policy(2) +
  policy(3) +
  (edited ? policy(5) : policy(4)) +
  `localsids:\n  - { name: l1, sid: "2001:db8:100::/48", src_prefix_len: 64${edited ? ', mtu: 1400' : ''} }\n`;
const V0 = '{ name: v0, xdp: native }';
const V2 = '{ name: v2, xdp: native }';
const V4 = '{ name: v4, xdp: generic }';
const BR0 = '{ name: br0, xdp: native }';

interface Status {
  program: { id: number } | null;
  interfaces: { name: string; attached: boolean }[];
}

/** What must not move when a reload is refused. */
interface Seen {
  program: number | undefined;
  /** Program id the kernel says runs on each interface (XDP, any mode). */
  xdp: Record<string, number | undefined>;
  pinnedProg: number;
  pins: string[];
  /** The kernel's maps, entry for entry (rule ids aside). */
  policies: string[];
  localsids: string[];
  rules: string[];
}

describe.skipIf(!isRoot || !existsSync(DEFAULT_OBJECT) || !existsSync(TESTPEER_OBJECT))('a reload refused at attach', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;
  let object = '';

  const pins = (): string => join(d!.bpffs, 'mup', d!.instance);
  const status = async (): Promise<Status> => (await d!.api('GET', '/v1/status')).body as Status;
  const xdpProg = async (ifname: string): Promise<number | undefined> =>
    (JSON.parse(await lab!.ip('mup', '-j', '-d', 'link', 'show', ifname)) as { xdp?: { prog?: { id: number } } }[])[0]?.xdp?.prog?.id;
  const bpftool = async (args: readonly string[]): Promise<unknown> => JSON.parse((await execa('bpftool', ['-j', ...args])).stdout) as unknown;
  /**
   * The entries of a pinned map as bpftool reads them with the map's BTF, but their rule ids: an entry the failed
   * reload deleted and the daemon wrote back has another id (docs/daemon.md, "Rule changes at scale").
   */
  const dump = async (map: string): Promise<string[]> =>
    ((await bpftool(['map', 'dump', 'pinned', join(pins(), map)])) as { formatted: { key: unknown; value: Record<string, unknown> } }[])
      .map(({ formatted: { key, value } }) => JSON.stringify({ key, value: { ...value, rule: undefined } }))
      .sort();
  const seen = async (): Promise<Seen> => {
    const xdp: Record<string, number | undefined> = {};
    for (const i of IFACES) xdp[i] = await xdpProg(i);
    const rules = ((await d!.api('GET', '/v1/policies')).body as { policies: { name: string; sr_prefix: string }[] }).policies.map((p) => `${p.name} ${p.sr_prefix}`);
    return {
      program: (await status()).program?.id,
      xdp,
      pinnedProg: ((await bpftool(['prog', 'show', 'pinned', join(pins(), 'prog')])) as { id: number }).id,
      pins: readdirSync(pins()).sort(),
      policies: await dump('policies'),
      localsids: await dump('localsids'),
      rules,
    };
  };
  const health = async (): Promise<unknown> => (await d!.api('GET', '/v1/health')).body;
  const reload = (text: string): Promise<ApiAnswer> => {
    d!.writeConfig(text);
    return d!.api('POST', '/v1/reload');
  };

  beforeAll(async () => {
    await sweepStaleNamespaces();
    lab = await Lab.create(['mup']);
    await lab.batch('mup', [
      'link add v0 type veth peer name v1',
      'link add v2 type veth peer name v3',
      'link add v4 type veth peer name v5',
      'link add br0 type bridge',
      ...['v0', 'v1', 'v2', 'v3', 'v4', 'v5', 'br0'].map((i) => `link set ${i} up`),
    ]);
    // Another program on v4 (generic mode): the daemon's link on it is refused (EBUSY).
    await lab.ip('mup', 'link', 'set', 'dev', 'v4', 'xdpgeneric', 'obj', TESTPEER_OBJECT, 'sec', 'xdp');
    d = new TestDaemon({ config: config([V0], false), netns: lab.ns('mup'), instance: `attref${process.pid}` });
    // The daemon runs a copy of the object, which the second test replaces with another build.
    object = join(d.dir, 'mup.bpf.o');
    copyFileSync(DEFAULT_OBJECT, object);
    await d.start(['--object', object]);
  }, 120_000);

  afterAll(async () => {
    await cleanupAll([d], lab);
  });

  it('the same program: the interface attached before the refused one is detached again, the tables are put back', async () => {
    const before = await seen();
    expect(before.program).toBeDefined();
    expect(before.xdp['v0']).toBe(before.program);
    expect(before.xdp['v2']).toBeUndefined();
    const other = before.xdp['v4'];
    expect(other, 'v4 runs the other program').toBeDefined();
    expect(await health()).toMatchObject({ status: 'ok', problems: [] });

    const r = await reload(config([V0, V2, V4], true));
    // The kernel's refusal is the request's to fix: 409 conflict, saying the reload was not applied (it was a 500).
    expect(r.status, r.text).toBe(409);
    expect(JSON.parse(r.text)).toMatchObject({ code: 'conflict' });
    expect(r.text).toMatch(/an interface refused the program, so the reload was not applied: .*v4/);
    expect(d!.log).toMatch(/reload failed; the tables are unchanged/);

    // Before the fix: v2 kept a pinned link running the program (pins and xdp differ).
    expect(await seen()).toEqual(before);
    expect(await health()).toMatchObject({ status: 'ok', problems: [] });
  });

  it('a new program: not swapped in, the running one stays on every link, the tables hold the running rules', async () => {
    const next = join(d!.dir, 'next.bpf.o');
    await execa('clang', [...bpfCflags(), '-DMUP_BUILD_ID=5', '-c', join(REPO, 'bpf/mup.bpf.c'), '-o', next], { cwd: REPO });
    expect(readFileSync(next).equals(readFileSync(object)), 'the two builds differ').toBe(false);
    renameSync(next, object);
    const before = await seen();

    const r = await reload(config([V0, V2, BR0], true));
    expect(r.status, r.text).toBe(409);
    expect(r.text).toMatch(/so the reload was not applied: .*br0/);

    // Before the fix: the new program ran on v0 (and v2), status named it, and the maps held p5, p1's new SID prefix
    // and the local SID's MTU while the daemon listed the running rules.
    expect(await seen()).toEqual(before);
    expect(await health()).toMatchObject({ status: 'ok', problems: [] });

    // The edit without the bridge: applied, and the new program swapped in on every link.
    const ok = await reload(config([V0, V2], true));
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body).toMatchObject({ programReplaced: true, added: 1, replaced: 2, deleted: 1, interfaces: { attached: ['v2'] } });
    const after = await seen();
    expect(after.program).not.toBe(before.program);
    expect(after.xdp).toMatchObject({ v0: after.program, v2: after.program, br0: undefined });
    expect(after.pinnedProg).toBe(after.program);
    expect(after.rules).toEqual(['p1 2001:db8:9::/48', 'p2 2001:db8:1::/48', 'p3 2001:db8:1::/48', 'p5 2001:db8:1::/48']);
    expect(after.policies).not.toEqual(before.policies);
    expect(await health()).toMatchObject({ status: 'ok', problems: [] });
  }, 120_000);

  it('a new object that does not load: refused before the tables are written', async () => {
    const good = readFileSync(object);
    try {
      // Cut short: libbpf refuses it (the new program is loaded before the edit is written, so nothing is to put back).
      writeFileSync(object, good.subarray(0, 4096));
      const before = await seen();
      const r = await reload(config([V0], false));
      expect(r.status, r.text).not.toBe(200);
      expect(await seen()).toEqual(before);
      expect(await health()).toMatchObject({ status: 'ok', problems: [] });
    } finally {
      writeFileSync(object, good);
    }
    // The same object again: the edit applies, no program swapped.
    const ok = await reload(config([V0], false));
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body).toMatchObject({ programReplaced: false, interfaces: { detached: ['v2'] } });
  });
});
