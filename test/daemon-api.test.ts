/**
 * What `mup daemon` does with bad input: every invalid API request, config
 * reload and CLI call gets a clear error (HTTP status as src/daemon/api.ts
 * defines them, a message naming the problem and, where there is one, the
 * key path) and leaves the tables exactly as they were.
 *
 * "Exactly as they were" is checked, before and after each request, on:
 * GET /v1/policies and /v1/localsids (byte for byte), the entry counts in
 * /v1/status, the config hash and API-change count in /v1/status, the state
 * file, and the BPF maps themselves (bpftool dumps of the pinned policy and
 * local SID tables, and of the program's config map, which holds the prefix
 * lengths it looks up).
 *
 * One daemon serves the file: in a namespace the test creates, attached
 * (native XDP) to one end of a veth pair inside it, with the HTTP API on
 * 127.0.0.1 in that namespace, behind a bearer token. Its tables are set up
 * to sit at two limits: the policy table is full (4 of max_policies 4) and
 * the local SIDs use 16 distinct prefix lengths (the most the data path
 * looks up). Namespace, daemon, pins and bpffs are removed in afterAll.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MUP_BIN, TestDaemon, type ApiAnswer } from './helpers/daemon.js';
import { Lab } from './helpers/netns.js';
import { LAYOUTS } from '../src/dataplane/codec.js';

const isRoot = process.getuid?.() === 0;
/** The HTTP listener's port: the namespace is this test's own, so nothing else listens there. */
const PORT = 9180;
const TOKEN = 'c0ffee00'.repeat(4) + 'facade42'.repeat(4);
/** Interfaces: the daemon attaches to mup0; mup1 (its veth peer) is for the daemon that must not start. */
const IFACE = 'mup0';
const SPARE_IFACE = 'mup1';

/** The 4 policies (the table holds 4) and 16 local SIDs with lengths /33 ... /48. */
const POLICIES = [1, 2, 3, 4].map((i) => ({ name: `p${i}`, match: `10.0.${i}.0/24`, sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ffff::/64' }));
const LOCALSIDS = Array.from({ length: 16 }, (_, k) => ({ name: `l${k + 1}`, sid: `fd00:${k + 1}::/${33 + k}`, src_prefix_len: 64 }));

/** A valid policy that is in no table (the table is full, so adding it fails with 409). */
const NEW_POLICY = { name: 'new', match: '10.0.9.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ffff::/64' };
/** A valid local SID of an existing length (/48): adding it works. */
const NEW_LOCALSID = { name: 'new-sid', sid: 'fd00:99::/48', src_prefix_len: 64 };

function configText(tokenFile: string, o: { settings?: string; http?: string; policies?: string; localsids?: string } = {}): string {
  const p = POLICIES.map((x) => `  - name: ${x.name}\n    match: ${x.match}\n    sr_prefix: "${x.sr_prefix}"\n    src_prefix: "${x.src_prefix}"\n`).join('');
  const l = LOCALSIDS.map((x) => `  - name: ${x.name}\n    sid: "${x.sid}"\n    src_prefix_len: ${x.src_prefix_len}\n`).join('');
  return (
    `settings:\n${o.settings ?? '  max_policies: 4\n  max_localsids: 32\n'}` +
    `interfaces:\n  - name: ${IFACE}\n    xdp: native\n` +
    `daemon:\n  http:\n${o.http ?? `    listen: 127.0.0.1:${PORT}\n    token_file: ${tokenFile}\n`}` +
    `policies:\n${o.policies ?? p}` +
    `localsids:\n${o.localsids ?? l}`
  );
}

/** 1-based line of the first line of `text` containing `needle` (or matching it). */
function lineOf(text: string, needle: string | RegExp): number {
  const i = text.split('\n').findIndex((l) => (typeof needle === 'string' ? l.includes(needle) : needle.test(l)));
  if (i < 0) throw new Error(`test bug: ${JSON.stringify(needle)} is not in the config`);
  return i + 1;
}

interface ErrorBody {
  error: string;
  path?: string;
  file?: string;
  line?: number;
}

interface Status {
  pid: number;
  config: { sha256: string };
  state: { changes: number };
  interfaces: { name: string; attached: boolean; progId: number | null }[];
  program: { id: number } | null;
  tables: { policies: { entries: number; capacity: number }; localsids: { entries: number; capacity: number }; sessions: { entries: number; capacity: number } };
}

describe.skipIf(!isRoot)('mup daemon: invalid input gets a clear error and changes nothing', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;
  let tokenFile = '';
  let goodConfig = '';
  let cfgMapId = 0;
  let dumpBatch = '';

  const pins = (): string => join(d!.bpffs, 'mup', d!.instance);

  async function bpftool(args: readonly string[]): Promise<unknown> {
    const r = await execa('bpftool', ['-j', ...args], { reject: false, timeout: 10_000 });
    if (r.exitCode !== 0) throw new Error(`bpftool ${args.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout) as unknown;
  }

  /** Map entries as sorted hex lines (a hash map's dump order is not part of its content). */
  const entries = (dump: { key: string[]; value: string[] }[]): string[] =>
    dump.map((e) => `${e.key.join('')} ${e.value.join('')}`.replaceAll('0x', '')).sort();

  /** The policy and local SID tables and the program's config map, in one bpftool run. */
  async function dumpMaps(): Promise<{ policies: string[]; localsids: string[]; config: string[] }> {
    const r = await execa('bpftool', ['-j', 'batch', 'file', dumpBatch], { reject: false, timeout: 10_000 });
    if (r.exitCode !== 0) throw new Error(`bpftool batch: ${r.stderr}`);
    const out = JSON.parse(r.stdout) as { command: string[]; output: { key: string[]; value: string[] }[] | { error: string } }[];
    const [p, l, c] = out.map((o) => {
      if (!Array.isArray(o.output)) throw new Error(`bpftool ${o.command.join(' ')}: ${o.output.error}`);
      return entries(o.output);
    });
    return { policies: p!, localsids: l!, config: c! };
  }

  interface Snapshot {
    policies: string;
    localsids: string;
    tables: Status['tables'];
    configSha: string;
    apiChanges: number;
    stateFile: string | null;
    bpf: { policies: string[]; localsids: string[]; config: string[] };
  }

  /** Everything a refused request must leave alone. */
  async function snapshot(): Promise<Snapshot> {
    const [p, l, s, bpf] = await Promise.all([d!.api('GET', '/v1/policies'), d!.api('GET', '/v1/localsids'), d!.api('GET', '/v1/status'), dumpMaps()]);
    expect([p.status, l.status, s.status]).toEqual([200, 200, 200]);
    const st = s.body as Status;
    return {
      policies: p.text,
      localsids: l.text,
      tables: st.tables,
      configSha: st.config.sha256,
      apiChanges: st.state.changes,
      stateFile: existsSync(d!.stateFile) ? readFileSync(d!.stateFile, 'utf8') : null,
      bpf,
    };
  }

  /**
   * The snapshot with the config reduced to what the program reads: the
   * active copy of mup_cfgs[2] (the selector after the two copies picks it),
   * its table generations zeroed. A valid change flips the config (its
   * generations count changes, bpf/lookup.h), which leaves the idle copy
   * holding an older config, as designed.
   */
  function withoutGenerations(snap: Snapshot): Snapshot {
    const size = LAYOUTS.mup_config.size;
    const gens = LAYOUTS.mup_config.members.policy_gen.offset;
    const config = snap.bpf.config.map((line) => {
      const [key, value] = line.split(' ');
      const b = Buffer.from(value!, 'hex');
      const active = Buffer.from(b.subarray((b.readUInt32LE(2 * size) & 1) * size).subarray(0, size));
      active.fill(0, gens, gens + 8);
      return `${key} ${active.toString('hex')}`;
    });
    return { ...snap, bpf: { ...snap.bpf, config } };
  }

  interface Expect {
    status: number;
    error: RegExp;
    /** Key path the error must name; null: it must name none. */
    path?: string | null;
  }

  /** Send a request that must be refused; check the answer and that nothing changed. */
  async function refused(send: () => Promise<ApiAnswer>, e: Expect): Promise<ApiAnswer> {
    const before = await snapshot();
    const r = await send();
    expect(r.status, r.text).toBe(e.status);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    const body = r.body as ErrorBody;
    expect(body.error).toMatch(e.error);
    if (e.path === null) expect(body.path).toBeUndefined();
    else if (e.path !== undefined) expect(body.path).toBe(e.path);
    expect(await snapshot()).toEqual(before);
    return r;
  }

  /** A request over the unix socket with full control of the headers and the body's framing. */
  function raw(method: string, path: string, headers: Record<string, string>, chunks: readonly Buffer[]): Promise<ApiAnswer> {
    return d!.api(method, path, { headers, chunks });
  }

  /** A request to the HTTP listener, from inside the namespace (curl). `auth`: the Authorization header, if any. */
  async function http(method: string, path: string, o: { auth?: string; body?: unknown } = {}): Promise<ApiAnswer> {
    const args = ['-sS', '-i', '--max-time', '20', '-X', method];
    if (o.auth !== undefined) args.push('-H', `Authorization: ${o.auth}`);
    if (o.body !== undefined) args.push('-H', 'Content-Type: application/json', '--data-binary', JSON.stringify(o.body));
    args.push(`http://127.0.0.1:${PORT}${path}`);
    const out = await lab!.exec('mup', 'curl', args, 20_000);
    const split = out.indexOf('\r\n\r\n');
    const head = out.slice(0, split).split('\r\n');
    const text = out.slice(split + 4);
    const status = Number(/^HTTP\/[0-9.]+ ([0-9]{3})/.exec(head[0] ?? '')?.[1] ?? 0);
    const headers: Record<string, string> = {};
    for (const h of head.slice(1)) {
      const c = h.indexOf(':');
      headers[h.slice(0, c).toLowerCase()] = h.slice(c + 1).trim();
    }
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // /metrics is text
    }
    return { status, body, text, headers };
  }

  beforeAll(async () => {
    lab = await Lab.create(['mup']);
    await lab.ip('mup', 'link', 'add', IFACE, 'type', 'veth', 'peer', 'name', SPARE_IFACE);
    await lab.ip('mup', 'link', 'set', IFACE, 'up');
    await lab.ip('mup', 'link', 'set', SPARE_IFACE, 'up');
    d = new TestDaemon({ config: '', netns: lab.ns('mup'), instance: `api${process.pid}` });
    tokenFile = join(d.dir, 'token');
    writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    goodConfig = configText(tokenFile);
    d.writeConfig(goodConfig);
    await d.start();
    const prog = (await bpftool(['prog', 'show', 'pinned', join(pins(), 'prog')])) as { map_ids: number[] };
    for (const id of prog.map_ids) {
      const m = (await bpftool(['map', 'show', 'id', String(id)])) as { name: string };
      if (m.name.endsWith('.data.cfg')) cfgMapId = id;
    }
    if (cfgMapId === 0) throw new Error('the program has no .data.cfg map');
    dumpBatch = join(d.dir, 'dump.bpftool');
    writeFileSync(dumpBatch, `map dump pinned ${join(pins(), 'policies')}\nmap dump pinned ${join(pins(), 'localsids')}\nmap dump id ${cfgMapId}\n`);
  });

  afterAll(async () => {
    try {
      await d?.cleanup();
    } finally {
      await lab?.destroy();
    }
  });

  it('runs attached to the veth, with the tables at their limits', async () => {
    const st = (await d!.api('GET', '/v1/status')).body as Status;
    expect(st.interfaces).toEqual([expect.objectContaining({ name: IFACE, attached: true, progId: st.program?.id })]);
    const link = JSON.parse(await lab!.ip('mup', '-j', '-d', 'link', 'show', IFACE)) as { xdp?: { prog?: { id: number } } }[];
    expect(link[0]?.xdp?.prog?.id).toBe(st.program?.id);
    expect(st.tables).toEqual({ policies: { entries: 4, capacity: 4 }, localsids: { entries: 16, capacity: 32 }, sessions: { entries: 0, capacity: 65536 } });
    const s = await snapshot();
    expect(s.bpf.policies).toHaveLength(4);
    expect(s.bpf.localsids).toHaveLength(16);
  });

  it('the snapshot sees a change: a valid add changes it, deleting that entry restores it', async () => {
    const before = await snapshot();
    const add = await d!.api('POST', '/v1/localsids', { body: NEW_LOCALSID });
    expect(add.status, add.text).toBe(201);
    const during = await snapshot();
    expect(during.localsids).not.toBe(before.localsids);
    expect(during.bpf.localsids).toHaveLength(17);
    expect(during.tables.localsids.entries).toBe(17);
    const del = await d!.api('DELETE', `/v1/localsids?sid=${encodeURIComponent(NEW_LOCALSID.sid)}`);
    expect(del.status, del.text).toBe(200);
    const after = await snapshot();
    // The state file now exists (with no changes in it); all else is as
    // before but the config's table generations, which count every change
    // (bpf/lookup.h: what the per-CPU copies of the last entry are good for).
    expect(after.bpf.config).not.toEqual(before.bpf.config);
    expect({ ...withoutGenerations(after), stateFile: null }).toEqual({ ...withoutGenerations(before), stateFile: null });
  });

  // ----------------------------------------------------------------------- bodies
  const policy = (over: Record<string, unknown>): Record<string, unknown> => ({ ...NEW_POLICY, ...over });
  const localsid = (over: Record<string, unknown>): Record<string, unknown> => ({ ...NEW_LOCALSID, ...over });

  interface BodyCase extends Expect {
    name: string;
    method?: 'POST' | 'PUT';
    url: '/v1/policies' | '/v1/localsids';
    body: unknown;
  }

  const BODY_CASES: BodyCase[] = [
    // Bad prefixes.
    { name: 'match with a /33', url: '/v1/policies', body: policy({ match: '10.0.9.0/33' }), status: 400, path: 'match', error: /^request body: match: "10\.0\.9\.0\/33" has an invalid prefix length "33"; expected an integer from 0 to 32/ },
    { name: 'match not an IPv4 address', url: '/v1/policies', body: policy({ match: '300.0.9.0/24' }), status: 400, path: 'match', error: /match: "300\.0\.9\.0\/24" is not an IPv4 prefix/ },
    { name: 'match without a length', url: '/v1/policies', body: policy({ match: '10.0.9.0' }), status: 400, path: 'match', error: /match: "10\.0\.9\.0" has no prefix length; write ADDRESS\/LENGTH/ },
    { name: 'match given as IPv6', url: '/v1/policies', body: policy({ match: '2001:db8::/32' }), status: 400, path: 'match', error: /match: "2001:db8::\/32" is not an IPv4 prefix/ },
    { name: 'sr_prefix not IPv6', url: '/v1/policies', body: policy({ sr_prefix: '2001:db8:::1/48' }), status: 400, path: 'sr_prefix', error: /sr_prefix: "2001:db8:::1\/48" is not an IPv6 prefix/ },
    { name: 'sr_prefix given as IPv4', url: '/v1/policies', body: policy({ sr_prefix: '10.0.0.0/8' }), status: 400, path: 'sr_prefix', error: /sr_prefix: "10\.0\.0\.0\/8" is not an IPv6 prefix/ },
    { name: 'segment not an address', url: '/v1/policies', body: policy({ segments: ['2001:db8::1', '2001:db8::zz'] }), status: 400, path: 'segments[1]', error: /segments\[1\]: "2001:db8::zz" is not an IPv6 address/ },
    { name: 'sid with a /129', url: '/v1/localsids', body: localsid({ sid: 'fd00:99::/129' }), status: 400, path: 'sid', error: /sid: "fd00:99::\/129" has an invalid prefix length "129"; expected an integer from 0 to 128/ },
    // Prefix + 72 bits > 128 (and the source prefix + 32 > 128).
    { name: 'sr_prefix /57: 57 + 32 + 40 > 128', url: '/v1/policies', body: policy({ sr_prefix: '2001:db8:1::/57' }), status: 400, path: 'sr_prefix', error: /sr_prefix: 2001:db8:1::\/57: prefix length \/57 is too long; .*\(32 bits\) and Args\.Mob\.Session \(40 bits\).*L at most 56/ },
    { name: 'sr_prefix /64', url: '/v1/policies', body: policy({ sr_prefix: '2001:db8:1::/64' }), status: 400, path: 'sr_prefix', error: /prefix length \/64 is too long; .*L at most 56/ },
    { name: 'sid /57: 57 + 32 + 40 > 128', url: '/v1/localsids', body: localsid({ sid: 'fd00:99::/57' }), status: 400, path: 'sid', error: /sid: fd00:99::\/57: prefix length \/57 is too long; .*L at most 56/ },
    { name: 'src_prefix /97: 97 + 32 > 128', url: '/v1/policies', body: policy({ src_prefix: '2001:db8:ffff::/97' }), status: 400, path: 'src_prefix', error: /src_prefix: 2001:db8:ffff::\/97: prefix length \/97 is too long; .*P at most 96/ },
    { name: 'src_prefix_len 97', url: '/v1/localsids', body: localsid({ src_prefix_len: 97 }), status: 400, path: 'src_prefix_len', error: /src_prefix_len: expected an integer from 0 to 96 \(P plus the 32-bit IPv4 source must fit in 128 bits\), got the number 97/ },
    // Wrong types.
    { name: 'number for match', url: '/v1/policies', body: policy({ match: 5 }), status: 400, path: 'match', error: /match: expected an IPv4 prefix such as 192\.0\.2\.0\/24, got the number 5/ },
    { name: 'string for hop_limit', url: '/v1/policies', body: policy({ hop_limit: '64' }), status: 400, path: 'hop_limit', error: /hop_limit: expected an integer from 1 to 255, got the string "64"/ },
    { name: 'number for name', url: '/v1/policies', body: policy({ name: 7 }), status: 400, path: 'name', error: /name: expected a name .*got the number 7/ },
    { name: 'string for segments', url: '/v1/policies', body: policy({ segments: '2001:db8::1' }), status: 400, path: 'segments', error: /segments: expected a list of at most 4 IPv6 addresses.*got the string/ },
    { name: 'srh not one of its values', url: '/v1/policies', body: policy({ srh: 'sometimes' }), status: 400, path: 'srh', error: /srh: expected one of auto, always, reduced, got the string "sometimes"/ },
    { name: 'fraction for ttl', url: '/v1/localsids', body: localsid({ ttl: 1.5 }), status: 400, path: 'ttl', error: /ttl: expected an integer from 1 to 255, got the number 1\.5/ },
    { name: 'boolean for container', url: '/v1/localsids', body: localsid({ container: true }), status: 400, path: 'container', error: /container: expected one of always, auto, never, got true/ },
    { name: 'a list for the body', url: '/v1/policies', body: [NEW_POLICY], status: 400, path: null, error: /^request body: expected a mapping with keys name, match, .*got a list/ },
    { name: 'null for the body', url: '/v1/localsids', body: null, status: 400, path: null, error: /^request body: expected a mapping with keys name, sid, .*got nothing/ },
    { name: 'a string for the body', url: '/v1/policies', body: 'match=10.0.9.0/24', status: 400, path: null, error: /^request body: expected a mapping .*got the string/ },
    { name: 'required key missing', url: '/v1/policies', body: { match: '10.0.9.0/24', src_prefix: '2001:db8:ffff::/64' }, status: 400, path: 'sr_prefix', error: /sr_prefix: required key missing; give the IPv6 prefix of the last SID/ },
    // (N3, TEID) keys and plain SIDs (issue 13).
    { name: 'teid on a /24 match', url: '/v1/policies', body: policy({ teid: '0x12340000/16' }), status: 400, path: 'teid', error: /teid: teid needs a single-address match \(\/32\), but match is \/24/ },
    { name: 'teid with bits past its length', url: '/v1/policies', body: policy({ match: '10.0.9.1/32', teid: '0x12345678/16' }), status: 400, path: 'teid', error: /bits set past the first 16; write 0x12340000\/16/ },
    { name: 'teid /33', url: '/v1/policies', body: policy({ match: '10.0.9.1/32', teid: '0/33' }), status: 400, path: 'teid', error: /at most 32 bits long/ },
    { name: 'sid and sr_prefix', url: '/v1/policies', body: policy({ sid: '2001:db8:e::d4' }), status: 400, path: 'sid', error: /not both/ },
    { name: 'sid with a /64', url: '/v1/policies', body: policy({ sr_prefix: undefined, sid: '2001:db8:e::/64' }), status: 400, path: 'sid', error: /an address .*not a prefix/ },
    { name: 'a TEID policy when the table is full', url: '/v1/policies', body: policy({ match: '10.0.9.1/32', teid: '0x12340000/16', sr_prefix: undefined, sid: '2001:db8:e::d4' }), status: 409, error: /the policies table is full/ },
    // Unknown keys.
    { name: 'unknown key matchh', url: '/v1/policies', body: { ...policy({}), matchh: '10.0.9.0/24' }, status: 400, path: 'matchh', error: /matchh: unknown key \(did you mean match\?\); allowed keys in a policy: name, match, sr_prefix, src_prefix, segments, srh, hop_limit/ },
    { name: 'unknown key sr_prefx', url: '/v1/policies', body: { match: '10.0.9.0/24', sr_prefx: '2001:db8:1::/48', src_prefix: '2001:db8:ffff::/64' }, status: 400, path: 'sr_prefx', error: /sr_prefx: unknown key \(did you mean sr_prefix\?\)/ },
    { name: 'unknown key tll', url: '/v1/localsids', body: { ...localsid({}), tll: 9 }, status: 400, path: 'tll', error: /tll: unknown key \(did you mean ttl\?\); allowed keys in a local SID: name, sid, src_prefix_len, container, ttl/ },
    { name: 'unknown key without a near one', url: '/v1/localsids', body: { ...localsid({}), colour: 'blue' }, status: 400, path: 'colour', error: /colour: unknown key; allowed keys in a local SID/ },
    // Duplicate keys: rules and names.
    { name: 'POST of an existing match', url: '/v1/policies', body: policy({ name: undefined, match: '10.0.2.0/24' }), status: 409, path: null, error: /a policy with match 10\.0\.2\.0\/24 exists already \("p2"\); replace it with PUT/ },
    { name: 'POST of an existing match, host bits set', url: '/v1/policies', body: policy({ name: undefined, match: '10.0.2.77/24' }), status: 409, error: /a policy with match 10\.0\.2\.0\/24 exists already/ },
    { name: 'POST of an existing sid', url: '/v1/localsids', body: localsid({ name: undefined, sid: 'fd00:3::/35' }), status: 409, path: null, error: /a local SID with sid fd00:3::\/35 exists already \("l3"\)/ },
    { name: 'POST with a name in use', url: '/v1/policies', body: policy({ name: 'p3' }), status: 409, error: /name "p3" is already used by the policy with match 10\.0\.3\.0\/24; names must be unique/ },
    { name: 'PUT with the name of another rule', method: 'PUT', url: '/v1/policies', body: policy({ match: '10.0.1.0/24', name: 'p4' }), status: 409, error: /name "p4" is already used by the policy with match 10\.0\.4\.0\/24/ },
    { name: 'local SID POST with a name in use', url: '/v1/localsids', body: localsid({ name: 'l1' }), status: 409, error: /name "l1" is already used by the local SID with sid fd00:1::\/33/ },
    { name: 'PUT of a match not in the table', method: 'PUT', url: '/v1/policies', body: policy({}), status: 404, error: /no policy with match 10\.0\.9\.0\/24 to replace; add it with POST/ },
    { name: 'PUT of a sid not in the table', method: 'PUT', url: '/v1/localsids', body: localsid({}), status: 404, error: /no local SID with sid fd00:99::\/48 to replace; add it with POST/ },
    // Capacity.
    { name: 'table full (max_policies 4)', url: '/v1/policies', body: policy({}), status: 409, error: /the policies table is full \(settings\.max_policies = 4\); delete entries, or raise settings\.max_policies/ },
    { name: '17th distinct prefix length', url: '/v1/localsids', body: localsid({ sid: 'fd00:99::/56' }), status: 409, error: /local SIDs would use 17 distinct prefix lengths \(\/56 \/48 .* \/33\); the data path supports at most 16/ },
  ];

  it.each(BODY_CASES.map((c) => ({ method: 'POST', ...c })))('$method $url: $name -> $status', async (c) => {
    await refused(() => d!.api(c.method, c.url, { body: c.body }), c);
  });

  // ----------------------------------------------------------------------- framing
  const policyText = JSON.stringify(NEW_POLICY);
  const FRAMING_CASES: (Expect & { name: string; headers: Record<string, string>; chunks: Buffer[] })[] = [
    {
      name: 'a key given twice in the body',
      headers: { 'content-type': 'application/json' },
      chunks: [Buffer.from(`{"match": "10.0.2.0/24", ${policyText.slice(1)}`)],
      status: 400,
      path: 'match',
      error: /^request body: match: key given twice; give each key once/,
    },
    {
      name: 'a key given twice in a nested list',
      headers: { 'content-type': 'application/json' },
      chunks: [Buffer.from(`[${policyText}, {"a": [1, {"b": 1, "b": 2}]}]`)],
      status: 400,
      path: '[1].a[1].b',
      error: /key given twice/,
    },
    { name: 'body not JSON', headers: { 'content-type': 'application/json' }, chunks: [Buffer.from('{"match": "10.0.9.0/24",')], status: 400, path: null, error: /^body is not valid JSON: / },
    { name: 'body is YAML', headers: { 'content-type': 'application/json' }, chunks: [Buffer.from('match: 10.0.9.0/24\n')], status: 400, error: /^body is not valid JSON/ },
    { name: 'Content-Type text/plain', headers: { 'content-type': 'text/plain' }, chunks: [Buffer.from(policyText)], status: 415, path: null, error: /send the body as JSON with Content-Type: application\/json \(got "text\/plain"\)/ },
    { name: 'no Content-Type', headers: {}, chunks: [Buffer.from(policyText)], status: 415, error: /Content-Type: application\/json \(got "none"\)/ },
    // Found in review: application/json-seq went through as JSON.
    { name: 'Content-Type application/json-seq', headers: { 'content-type': 'application/json-seq' }, chunks: [Buffer.from(policyText)], status: 415, error: /\(got "application\/json-seq"\)/ },
    { name: 'Content-Type application/jsonx', headers: { 'content-type': 'application/jsonx' }, chunks: [Buffer.from(policyText)], status: 415, error: /\(got "application\/jsonx"\)/ },
    // With a parameter, or in capitals: JSON (the body gets through: the table is full).
    { name: 'Content-Type application/json; charset=utf-8', headers: { 'content-type': 'application/json; charset=utf-8' }, chunks: [Buffer.from(policyText)], status: 409, error: /table is full/ },
    { name: 'Content-Type APPLICATION/JSON', headers: { 'content-type': 'APPLICATION/JSON' }, chunks: [Buffer.from(policyText)], status: 409, error: /table is full/ },
    {
      name: 'body over 64 KiB (Content-Length)',
      headers: { 'content-type': 'application/json', 'content-length': String(70_000) },
      chunks: [Buffer.alloc(70_000, 0x20)],
      status: 413,
      path: null,
      error: /body of 70000 bytes is over the 65536-byte limit; send one rule per request/,
    },
    {
      name: 'body over 64 KiB (chunked, no length given)',
      headers: { 'content-type': 'application/json' },
      chunks: Array.from({ length: 9 }, () => Buffer.alloc(8192, 0x20)),
      status: 413,
      error: /body is over the 65536-byte limit/,
    },
  ];

  it.each(FRAMING_CASES)('POST /v1/policies: $name -> $status', async (c) => {
    await refused(() => raw('POST', '/v1/policies', c.headers, c.chunks), c);
  });

  it('a body of exactly 64 KiB is read (and judged on its content)', async () => {
    const padded = policyText.slice(0, -1) + ' '.repeat(65_536 - policyText.length) + '}';
    expect(Buffer.byteLength(padded)).toBe(65_536);
    // The policy itself is fine; the table is full: 409 shows the body got through.
    await refused(() => raw('POST', '/v1/policies', { 'content-type': 'application/json' }, [Buffer.from(padded)]), { status: 409, error: /table is full/ });
  });

  it('a batch body over 128 KiB (read and checked over several turns) with a key given twice near its end: 400 naming it', async () => {
    const ops = Array.from({ length: 2400 }, (_, i) => ({ op: 'add', policy: { ...NEW_POLICY, name: `big${i}`, match: `10.${100 + (i >> 8)}.${i & 255}.0/24` } }));
    const twice = JSON.stringify({ operations: ops }).replace('"name":"big2399"', '"name":"big2399","name":"again"');
    expect(Buffer.byteLength(twice)).toBeGreaterThan(2 * 128 * 1024);
    await refused(() => raw('POST', '/v1/batch', { 'content-type': 'application/json' }, [Buffer.from(twice)]), { status: 400, path: 'operations[2399].policy.name', error: /^request body: operations\[2399\]\.policy\.name: key given twice/ });
  });

  it('a body whose UTF-8 character is split between two pieces reads whole (each piece decoded as it comes)', async () => {
    const body = Buffer.from(JSON.stringify({ operations: [{ op: 'delete', policy: { name: 'zürich' } }] }));
    const at = body.indexOf(Buffer.from('ü')) + 1; // between the character's two bytes
    const r = await raw('POST', '/v1/batch', { 'content-type': 'application/json' }, [body.subarray(0, at), body.subarray(at)]);
    expect(r.text).toContain('no policy named \\"zürich\\"');
  });

  // ----------------------------------------------------------------------- DELETE
  const DELETE_CASES: (Expect & { name: string; url: string })[] = [
    { name: 'a match not in the table', url: '/v1/policies?match=10.0.9.0/24', status: 404, error: /no policy with match 10\.0\.9\.0\/24; list them with mup policy list/ },
    { name: 'a name not in the table', url: '/v1/policies?name=nope', status: 404, error: /no policy named "nope"/ },
    { name: 'a sid not in the table', url: `/v1/localsids?sid=${encodeURIComponent('fd00:99::/48')}`, status: 404, error: /no local SID with sid fd00:99::\/48; list them with mup sid list/ },
    { name: 'a policy name asked of the local SIDs', url: '/v1/localsids?name=p1', status: 404, error: /no local SID named "p1"/ },
    { name: 'a bad match prefix', url: '/v1/policies?match=10.0.1.0/33', status: 400, path: 'match', error: /match: "10\.0\.1\.0\/33" has an invalid prefix length "33"/ },
    { name: 'a bad sid prefix', url: '/v1/localsids?sid=fd00::1::/48', status: 400, path: 'sid', error: /sid: "fd00::1::\/48" is not an IPv6 prefix/ },
    { name: 'both selectors', url: '/v1/policies?match=10.0.1.0/24&name=p1', status: 400, error: /say which one to delete: \?match=PREFIX or \?name=NAME \(exactly one\)/ },
    { name: 'neither selector', url: '/v1/localsids', status: 400, error: /say which one to delete: \?sid=PREFIX or \?name=NAME \(exactly one\)/ },
    { name: 'an unknown query parameter', url: '/v1/policies?prefix=10.0.1.0/24', status: 400, error: /unknown query parameter prefix; use \?match=PREFIX or \?name=NAME/ },
  ];

  it.each(DELETE_CASES)('DELETE: $name -> $status', async (c) => {
    await refused(() => d!.api('DELETE', c.url), c);
  });

  // ----------------------------------------------------------------------- routes
  const ROUTE_CASES: (Expect & { name: string; method: string; url: string; allow?: string })[] = [
    { name: 'unknown endpoint', method: 'GET', url: '/v1/nope', status: 404, error: /no such endpoint \/v1\/nope; see the README \(Control API\)/ },
    { name: 'a rule by path (not an endpoint)', method: 'DELETE', url: '/v1/policies/10.0.1.0', status: 404, error: /no such endpoint \/v1\/policies\/10\.0\.1\.0/ },
    { name: 'unversioned path', method: 'GET', url: '/policies', status: 404, error: /no such endpoint \/policies/ },
    { name: 'PATCH on the policies', method: 'PATCH', url: '/v1/policies', status: 405, allow: 'GET, POST, PUT, DELETE', error: /PATCH is not allowed on \/v1\/policies; use GET or POST or PUT or DELETE/ },
    { name: 'POST on status', method: 'POST', url: '/v1/status', status: 405, allow: 'GET', error: /POST is not allowed on \/v1\/status; use GET/ },
    { name: 'GET on reload', method: 'GET', url: '/v1/reload', status: 405, allow: 'POST', error: /GET is not allowed on \/v1\/reload; use POST/ },
    { name: 'DELETE on counters', method: 'DELETE', url: '/v1/counters', status: 405, allow: 'GET', error: /DELETE is not allowed on \/v1\/counters/ },
    { name: 'GET on counters/reset', method: 'GET', url: '/v1/counters/reset', status: 405, allow: 'POST', error: /use POST/ },
    { name: 'PUT on metrics', method: 'PUT', url: '/metrics', status: 405, allow: 'GET', error: /PUT is not allowed on \/metrics/ },
  ];

  it.each(ROUTE_CASES)('$method $url: $name -> $status', async (c) => {
    const r = await refused(() => d!.api(c.method, c.url), c);
    expect(r.headers['allow']).toBe(c.allow);
  });

  // ----------------------------------------------------------------------- HTTP and the token
  describe('the HTTP listener wants the bearer token', () => {
    const TOKEN_CASES: { name: string; auth?: string }[] = [
      { name: 'no Authorization header' },
      { name: 'a wrong token of the same length', auth: `Bearer ${TOKEN.slice(0, -1)}0` },
      { name: 'a wrong token of another length', auth: `Bearer ${TOKEN}0` },
      { name: 'the token with another scheme', auth: `Basic ${TOKEN}` },
      { name: 'the scheme without a token', auth: 'Bearer ' },
    ];
    const REQUESTS: { what: string; method: string; path: string; body?: unknown }[] = [
      { what: 'GET /v1/status', method: 'GET', path: '/v1/status' },
      { what: 'GET /metrics', method: 'GET', path: '/metrics' },
      { what: 'POST a valid local SID', method: 'POST', path: '/v1/localsids', body: NEW_LOCALSID },
      { what: 'DELETE an existing policy', method: 'DELETE', path: '/v1/policies?name=p1' },
      { what: 'POST /v1/counters/reset', method: 'POST', path: '/v1/counters/reset' },
      { what: 'GET an unknown endpoint', method: 'GET', path: '/v1/nope' },
    ];
    it.each(TOKEN_CASES)('$name -> 401 on every endpoint, reads and changes alike', async (c) => {
      const before = await snapshot();
      for (const q of REQUESTS) {
        const r = await http(q.method, q.path, { ...(c.auth === undefined ? {} : { auth: c.auth }), ...(q.body === undefined ? {} : { body: q.body }) });
        expect(r.status, `${q.what}: ${r.text}`).toBe(401);
        expect(r.headers['www-authenticate'], q.what).toBe('Bearer');
        expect(r.headers['content-type'], q.what).toMatch(/^application\/json/);
        expect(r.body, q.what).toEqual({ error: 'missing or wrong bearer token: send Authorization: Bearer <token from daemon.http.token_file>', code: 'unauthorized' });
      }
      expect(await snapshot()).toEqual(before);
    });

    it('with the right token: status, metrics, and a change that goes through', async () => {
      const auth = `Bearer ${TOKEN}`;
      const st = await http('GET', '/v1/status', { auth });
      expect(st.status, st.text).toBe(200);
      expect((st.body as Status).pid).toBe(d!.pid);
      // The scheme is case-insensitive (RFC 9110 11.1); the token is not.
      expect((await http('GET', '/v1/status', { auth: `bearer ${TOKEN}` })).status).toBe(200);
      expect((await http('GET', '/v1/status', { auth: `Bearer ${TOKEN.toUpperCase()}` })).status).toBe(401);
      const m = await http('GET', '/metrics', { auth });
      expect(m.status, m.text).toBe(200);
      expect(m.headers['content-type']).toMatch(/^text\/plain/);
      expect(m.text).toMatch(/^mup_table_entries\{table="policies"\} 4$/m);
      // The token opens the API, not just the reads: an add and its delete.
      const before = await snapshot();
      const add = await http('POST', '/v1/localsids', { auth, body: NEW_LOCALSID });
      expect(add.status, add.text).toBe(201);
      expect((await snapshot()).tables.localsids.entries).toBe(17);
      const del = await http('DELETE', `/v1/localsids?name=${NEW_LOCALSID.name}`, { auth });
      expect(del.status, del.text).toBe(200);
      const after = await snapshot();
      // All as before but the table generations, which count every change.
      expect({ ...withoutGenerations(after), stateFile: null }).toEqual({ ...withoutGenerations(before), stateFile: null });
      // And bad input over HTTP is judged as on the socket.
      await refused(() => http('POST', '/v1/policies', { auth, body: policy({ sr_prefix: '2001:db8:1::/57' }) }), { status: 400, path: 'sr_prefix', error: /L at most 56/ });
    });
  });

  // ----------------------------------------------------------------------- CLI
  describe('the CLI', () => {
    it.each([
      { name: 'policy add with a bad match', args: ['policy', 'add', '--match', '10.0.9.0/33', '--sr-prefix', '2001:db8:1::/48', '--src-prefix', '2001:db8:ffff::/64'], error: /^mup: request body: match: "10\.0\.9\.0\/33" has an invalid prefix length "33"/ },
      { name: 'sid add with a bad sid', args: ['sid', 'add', '--sid', 'fd00:99::1::/48', '--src-prefix-len', '64'], error: /^mup: request body: sid: "fd00:99::1::\/48" is not an IPv6 prefix/ },
      { name: 'policy add to a full table', args: ['policy', 'add', '--match', '10.0.9.0/24', '--sr-prefix', '2001:db8:1::/48', '--src-prefix', '2001:db8:ffff::/64'], error: /^mup: the policies table is full/ },
    ])('$name: exit 2, one line', async (c) => {
      const before = await snapshot();
      const r = await d!.cli(c.args);
      expect(r.exitCode, r.stderr).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(c.error);
      expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(await snapshot()).toEqual(before);
    });

    it('mup status with no daemon at the socket says how to start one', async () => {
      const missing = join(d!.dir, 'missing.sock');
      const r = await execa('node', [MUP_BIN, 'status'], { reject: false, env: { MUP_SOCKET: missing }, timeout: 30_000 });
      expect(r.exitCode, 'LSB status: 3, not running').toBe(3);
      expect(r.stdout).toBe('');
      expect(String(r.stderr).trimEnd()).toBe(
        `mup: no daemon answers at ${missing}: start one with \`mup daemon --config FILE\`, or name it with --instance / --socket`,
      );
    });
  });

  // ----------------------------------------------------------------------- reload
  describe('an invalid config on reload is rejected whole', () => {
    interface ReloadCase {
      name: string;
      text: () => string;
      error: RegExp;
      path?: string;
      /** Text on the line the error must name. */
      at?: string | RegExp;
      /** Also check what `mup reload` prints. */
      cli?: boolean;
    }
    const sixteen = (): string => LOCALSIDS.map((x) => `  - { name: ${x.name}, sid: "${x.sid}", src_prefix_len: 64 }\n`).join('');
    const RELOAD_CASES: ReloadCase[] = [
      { name: 'YAML syntax error: a quote not closed', text: () => goodConfig.replace('match: 10.0.2.0/24', 'match: "10.0.2.0/24'), error: /YAML syntax error at column \d+: Missing closing "quote/, at: 'match: "10.0.2.0/24', cli: true },
      { name: 'YAML syntax error: a tab', text: () => goodConfig.replace('    match: 10.0.2.0/24', '\tmatch: 10.0.2.0/24'), error: /YAML syntax error at column 1: Tabs are not allowed as indentation/, at: '\tmatch' },
      { name: 'a key given twice', text: () => goodConfig.replace('    match: 10.0.3.0/24\n', '    match: 10.0.3.0/24\n    match: 10.0.7.0/24\n'), error: /YAML syntax error.*give each key once/, at: 'match: 10.0.7.0/24' },
      { name: 'unknown key', text: () => goodConfig.replace('  - name: l2\n', '  - name: l2\n    tll: 9\n'), error: /unknown key \(did you mean ttl\?\)/, path: 'localsids[1].tll', at: 'tll: 9', cli: true },
      { name: 'unknown top-level key', text: () => `${goodConfig}polices: []\n`, error: /unknown key \(did you mean policies\?\)/, path: 'polices', at: 'polices:' },
      { name: 'bad prefix', text: () => goodConfig.replace('match: 10.0.3.0/24', 'match: 10.0.3.0/33'), error: /has an invalid prefix length "33"/, path: 'policies[2].match', at: 'match: 10.0.3.0/33' },
      { name: 'sr_prefix longer than /56', text: () => goodConfig.replace('  - name: p4\n    match: 10.0.4.0/24\n    sr_prefix: "2001:db8:1::/48"', '  - name: p4\n    match: 10.0.4.0/24\n    sr_prefix: "2001:db8:1::/60"'), error: /prefix length \/60 is too long; .*L at most 56/, path: 'policies[3].sr_prefix', at: '2001:db8:1::/60' },
      { name: 'wrong type', text: () => goodConfig.replace('src_prefix_len: 64\n', 'src_prefix_len: "64"\n'), error: /expected an integer from 0 to 96 .*got the string "64"/, path: 'localsids[0].src_prefix_len', at: 'src_prefix_len: "64"' },
      { name: 'a match given twice (after masking)', text: () => goodConfig.replace('match: 10.0.4.0/24', 'match: 10.0.1.9/24'), error: /10\.0\.1\.0\/24 is already used by policies\[0\] \("p1"\)/, path: 'policies[3].match', at: 'match: 10.0.1.9/24' },
      { name: 'teid on a /24 match', text: () => goodConfig.replace('    match: 10.0.4.0/24\n', '    match: 10.0.4.0/24\n    teid: "0x12340000/16"\n'), error: /teid needs a single-address match \(\/32\), but match is \/24/, path: 'policies[3].teid', at: 'teid: "0x12340000/16"' },
      { name: 'a TEID prefix given twice (hex, decimal)', text: () => goodConfig.replace('    match: 10.0.4.0/24\n', '    match: 10.0.4.1/32\n    teid: "305397760/16"\n').replace('    match: 10.0.3.0/24\n', '    match: 10.0.4.1/32\n    teid: "0x12340000/16"\n'), error: /10\.0\.4\.1\/32 teid 0x12340000\/16 is already used by policies\[2\]/, path: 'policies[3].match' },
      { name: 'five policies for max_policies 4', text: () => configText(tokenFile, { policies: [...POLICIES, NEW_POLICY].map((x) => `  - { name: ${x.name}, match: ${x.match}, sr_prefix: "${x.sr_prefix}", src_prefix: "${x.src_prefix}" }\n`).join('') }), error: /5 policies but settings\.max_policies is 4/, path: 'policies', at: /^policies:/ },
      { name: '17 distinct local SID prefix lengths', text: () => configText(tokenFile, { localsids: `${sixteen()}  - { name: l17, sid: "fd00:99::/56", src_prefix_len: 64 }\n` }), error: /the 17th distinct prefix length among the sid prefixes/, path: 'localsids[16].sid', at: 'name: l17' },
      { name: 'HTTP off loopback without token_file', text: () => configText(tokenFile, { http: '    listen: 192.0.2.1:9180\n' }), error: /required when listen \(192\.0\.2\.1:9180\) is not a loopback address/, path: 'daemon.http.token_file', at: '  http:' },
      { name: 'HTTP on [::] without token_file', text: () => configText(tokenFile, { http: '    listen: "[::]:9180"\n' }), error: /required when listen \(\[::\]:9180\) is not a loopback address/, path: 'daemon.http.token_file', at: '  http:' },
      { name: 'a relative token_file', text: () => configText(tokenFile, { http: `    listen: 127.0.0.1:${PORT}\n    token_file: token\n` }), error: /"token" is not an absolute path/, path: 'daemon.http.token_file', at: 'token_file: token' },
      { name: 'table sizes changed', text: () => configText(tokenFile, { settings: '  max_policies: 8\n  max_localsids: 32\n' }), error: /table sizes changed \(max_policies 4 -> 8, max_localsids 32 -> 32, max_sessions 65536 -> 65536\); a loaded table cannot be resized: restart the daemon with --replace-tables/, path: 'settings' },
      // A session table cannot be resized either: this reload used to pass, the new size silently ignored.
      { name: 'session table size changed', text: () => configText(tokenFile, { settings: '  max_policies: 4\n  max_localsids: 32\n  max_sessions: 1024\n' }), error: /table sizes changed \(max_policies 4 -> 4, max_localsids 32 -> 32, max_sessions 65536 -> 1024\); a loaded table cannot be resized/, path: 'settings' },
    ];

    it.each(RELOAD_CASES)('$name -> 400, tables unchanged', async (c) => {
      const text = c.text();
      expect(text).not.toBe(goodConfig);
      const before = await snapshot();
      try {
        d!.writeConfig(text);
        const r = await refused(() => d!.api('POST', '/v1/reload'), { status: 400, error: c.error, path: c.path ?? null });
        const body = r.body as ErrorBody;
        expect(body.file).toBe(d!.configPath);
        if (c.at !== undefined) {
          expect(body.line).toBe(lineOf(text, c.at));
          expect(body.error.startsWith(`${d!.configPath}:${body.line}: ${c.path === undefined ? '' : `${c.path}: `}`)).toBe(true);
        }
        if (c.cli === true) {
          // The CLI says the same, on one line.
          const cli = await d!.cli(['reload']);
          expect(cli.exitCode).toBe(2);
          expect(cli.stderr.trimEnd()).toBe(`mup: ${body.error}`);
          expect(await snapshot()).toEqual(before);
        }
      } finally {
        d!.writeConfig(goodConfig);
      }
    });

    it('the fixed file then reloads, and its changes apply', async () => {
      const before = await snapshot();
      // Same file as loaded: nothing to do.
      const same = await d!.api('POST', '/v1/reload');
      expect(same.status, same.text).toBe(200);
      expect(same.body).toMatchObject({ configChanged: false, added: 0, replaced: 0, deleted: 0, unchanged: 20 });
      expect({ ...(await snapshot()), stateFile: null }).toEqual({ ...before, stateFile: null });
      // A real change (p4 to another SID prefix; HTTP on loopback read-only, without a token, is fine) applies, and back.
      const changed = configText(tokenFile, { http: `    listen: 127.0.0.1:${PORT}\n    open_reads: true\n` }).replace(
        '  - name: p4\n    match: 10.0.4.0/24\n    sr_prefix: "2001:db8:1::/48"',
        '  - name: p4\n    match: 10.0.4.0/24\n    sr_prefix: "2001:db8:4::/48"',
      );
      try {
        d!.writeConfig(changed);
        const r = await d!.api('POST', '/v1/reload');
        expect(r.status, r.text).toBe(200);
        expect(r.body).toMatchObject({ configChanged: true, added: 0, replaced: 1, deleted: 0, unchanged: 19 });
        const p4 = ((await d!.api('GET', '/v1/policies')).body as { policies: { name: string; sr_prefix: string }[] }).policies.find((p) => p.name === 'p4');
        expect(p4?.sr_prefix).toBe('2001:db8:4::/48');
        expect((await snapshot()).bpf.policies).not.toEqual(before.bpf.policies);
      } finally {
        d!.writeConfig(goodConfig);
      }
      const back = await d!.api('POST', '/v1/reload');
      expect(back.status, back.text).toBe(200);
      expect(back.body).toMatchObject({ configChanged: true, replaced: 1 });
      const after = await snapshot();
      // All as before but the table generations, which count every change.
      expect({ ...withoutGenerations(after), stateFile: null }).toEqual({ ...withoutGenerations(before), stateFile: null });
    });
  });

  // ----------------------------------------------------------------------- start
  describe('a daemon that must not start', () => {
    const refusedStart = async (name: string, config: (dir: string) => string): Promise<{ output: string; configPath: string; text: string }> => {
      const t = new TestDaemon({ config: '', netns: lab!.ns('mup'), instance: `api${process.pid}${name}` });
      try {
        const text = config(t.dir);
        t.writeConfig(text);
        const r = await t.startFailing();
        expect(r.exitCode, r.output).toBe(2);
        // Refused before touching anything: nothing pinned, nothing attached, no socket.
        expect(existsSync(join(t.bpffs, 'mup', t.instance))).toBe(false);
        expect(existsSync(t.socket)).toBe(false);
        const link = JSON.parse(await lab!.ip('mup', '-j', '-d', 'link', 'show', SPARE_IFACE)) as { xdp?: unknown }[];
        expect(link[0]?.xdp).toBeUndefined();
        return { output: r.output, configPath: t.configPath, text };
      } finally {
        await t.cleanup();
      }
    };
    // The error, with file:line and key path, once (the daemon's fatal log line; not again as text on stderr).
    const printedOnce = (output: string, message: string): void => {
      expect(output).toContain(message);
      expect(output.split(message).length - 1, output).toBe(1);
    };
    const spare = (http: string, more = ''): string =>
      `interfaces:\n  - name: ${SPARE_IFACE}\n    xdp: generic\ndaemon:\n  http:\n${http}${more}`;

    it('HTTP on a non-loopback address without token_file', async () => {
      const r = await refusedStart('b', () => spare('    listen: 192.0.2.1:9181\n'));
      printedOnce(r.output, `${r.configPath}:${lineOf(r.text, '  http:')}: daemon.http.token_file: required when listen (192.0.2.1:9181) is not a loopback address`);
    });

    it('a socket_group that does not exist', async () => {
      const r = await refusedStart('g', () => `interfaces:\n  - name: ${SPARE_IFACE}\n    xdp: generic\ndaemon:\n  socket_group: mupt-no-such-group\n`);
      printedOnce(r.output, 'in /etc/group; create it (groupadd mupt-no-such-group) or leave the key out');
    });

    it('a bad prefix in the config', async () => {
      const r = await refusedStart('d', () => spare(`    listen: 127.0.0.1:9181\n    open_reads: true\n`, 'policies:\n  - { match: 10.0.1.0/24, sr_prefix: "2001:db8:1::/57", src_prefix: "2001:db8:ffff::/64" }\n'));
      printedOnce(r.output, `${r.configPath}:${lineOf(r.text, '2001:db8:1::/57')}: policies[0].sr_prefix: 2001:db8:1::/57: prefix length /57 is too long`);
    });
  });

  it('GET /metrics: mup_api_request_duration_seconds counts each answer in its class', async () => {
    const counts = (text: string): Record<string, number> =>
      Object.fromEntries([...text.matchAll(/^mup_api_request_duration_seconds_count\{class="(\w+)"\} (\d+)$/gm)].map((m) => [m[1]!, Number(m[2])]));
    const m0 = await d!.api('GET', '/metrics');
    expect(m0.status).toBe(200);
    expect(Object.keys(counts(m0.text)).sort()).toEqual(['batch', 'change', 'other', 'read', 'reload']);
    expect((await d!.api('GET', '/v1/status')).status).toBe(200);
    expect((await d!.api('POST', '/v1/localsids', { body: NEW_LOCALSID })).status).toBe(201);
    expect((await d!.api('DELETE', `/v1/localsids?sid=${encodeURIComponent(NEW_LOCALSID.sid)}`)).status).toBe(200);
    expect((await d!.api('DELETE', `/v1/localsids?sid=${encodeURIComponent(NEW_LOCALSID.sid)}`)).status).toBe(404); // refused: counted all the same
    expect((await d!.api('POST', '/v1/batch', { body: { operations: [{ op: 'add', localsid: NEW_LOCALSID }] } })).status).toBe(200);
    expect((await d!.api('POST', '/v1/batch', { body: { operations: [{ op: 'delete', localsid: { sid: NEW_LOCALSID.sid } }] } })).status).toBe(200);
    expect((await d!.api('POST', '/v1/reload')).status).toBe(200);
    expect((await d!.api('POST', '/v1/counters/reset')).status).toBe(200);
    const m1 = await d!.api('GET', '/metrics');
    const [a, b] = [counts(m0.text), counts(m1.text)];
    // read: the first scrape (observed once answered) and the status.
    expect(Object.fromEntries(Object.keys(b).map((k) => [k, b[k]! - a[k]!]))).toEqual({ read: 2, change: 3, batch: 2, reload: 1, other: 1 });
    // Cumulative buckets, the last one the count.
    const buckets = [...m1.text.matchAll(/^mup_api_request_duration_seconds_bucket\{le="([^"]+)",class="change"\} (\d+)$/gm)].map((m) => Number(m[2]));
    expect(buckets.length).toBe(17);
    expect(buckets.every((n, i) => i === 0 || n >= buckets[i - 1]!)).toBe(true);
    expect(buckets.at(-1)).toBe(b['change']);
  });

  it('answered every bad request itself: no 500, no crash, still attached', async () => {
    const st = (await d!.api('GET', '/v1/status')).body as Status;
    expect(st.pid).toBe(d!.pid);
    expect(st.interfaces[0]?.attached).toBe(true);
    const errors = d!.log.split('\n').filter((l) => /"level":"(error|fatal)"/.test(l));
    expect(errors).toEqual([]);
  });
});
