/**
 * A POST /v1/batch body read from its bytes (readBatchBody, src/daemon/
 * api.ts; batchFromBytes, src/daemon/batch-bytes.ts) gives what the body
 * read as before gives (readBody's parse and check for repeated keys, then
 * batchOperations): the same error for a body either refuses, else
 * operations whose plan against the same rule set is the same (results,
 * counts, each key's rule as JSON, the state record, or the same
 * BatchError). Over generated bodies: flat adds and replaces of sessions
 * and policies (which the bytes' reader takes into rows) mixed with
 * operations it leaves to JSON.parse (deletes, local SIDs, path options,
 * IPv6 UEs, escapes, names outside ASCII, invalid values, extra members),
 * with random whitespace and member order; and bodies of the wrong shape.
 * The generated flat operations are checked to have been read from the
 * bytes (FlatOp), so the comparison is of the two paths.
 */
import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { PolicyRule, SessionRule, STORE_ROWS } from '../../src/config/rows.js';
import type { Policy, Session } from '../../src/config/types.js';
import { LARGE_BODY, MAX_BATCH_BODY, readBatchBody, readBody } from '../../src/daemon/api.js';
import { batchOperations, FlatOp, MAX_BATCH_OPERATIONS, planBatch } from '../../src/daemon/batch.js';
import { batchFromBytes, valueEnd } from '../../src/daemon/batch-bytes.js';
import { runNow } from '../../src/daemon/slices.js';
import { emptyOverlay, RULE_KINDS, RuleSet, type RuleKind } from '../../src/daemon/rules.js';

const CONFIG = parseConfig(
  'settings: { max_policies: 65536, max_sessions: 65536, max_localsids: 64 }\n' +
    'policies:\n  - { name: fp, match: 100.64.9.9/32, teid: 7/32, sr_prefix: "2001:db9:1::/48", src_prefix: "2001:db8:ffff::/64" }\n' +
    'sessions:\n  - { name: fs, ue: 10.9.9.9/32, teid: 1, qfi: 9, endpoint: 192.0.2.1, source: 198.51.100.1, isd: "2001:db8:2::/48", src_prefix: "2001:db8:ffff::/64" }\n',
  'bytes.yaml',
);

function request(body: Buffer, pieceSize: number, declare: boolean): IncomingMessage {
  const pieces: Buffer[] = [];
  for (let at = 0; at < body.length; at += pieceSize) pieces.push(body.subarray(at, at + pieceSize));
  const headers: Record<string, string> = { 'content-type': 'application/json', ...(declare ? { 'content-length': String(body.length) } : {}) };
  return Object.assign(Readable.from(pieces, { objectMode: false }), { headers }) as unknown as IncomingMessage;
}

type Outcome = { error: { name: string; status: unknown; message: string } } | { ops: unknown[] };

async function outcome(read: () => Promise<unknown[]>): Promise<Outcome> {
  try {
    return { ops: await read() };
  } catch (e) {
    return { error: { name: (e as Error).constructor.name, status: (e as { status?: unknown }).status, message: (e as Error).message } };
  }
}

/** A plan as comparable data, or its error. */
function planned(ops: unknown[]): unknown {
  const set = new RuleSet(CONFIG, emptyOverlay());
  try {
    const p = planBatch(set, ops);
    const delta: Record<string, unknown> = {};
    for (const [kind, d] of p.delta) {
      const k = RULE_KINDS[kind as RuleKind];
      delta[kind] = [...d].map(([key, r]) => [key, r === null ? null : k.json(r), r === null ? null : r.where, r?.name]);
    }
    return { results: p.results, counts: p.counts, delta, line: p.line.json };
  } catch (e) {
    const x = e as { status?: unknown; code?: unknown; index?: unknown; path?: unknown; message: string };
    return { error: [x.constructor.name, x.status, x.code, x.index, x.path, x.message] };
  }
}

/** Deterministic random numbers in [0, 1). */
function lcg(seed: number): () => number {
  let x = seed >>> 0;
  return () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

/** JSON text of `v` with random whitespace between its tokens and, for objects, members in random order when `shuffle`. */
function spaced(v: unknown, rnd: () => number, shuffle: boolean): string {
  const ws = (): string => (rnd() < 0.7 ? '' : [' ', '\n', '\t', '\r\n  '][Math.floor(rnd() * 4)]!);
  if (Array.isArray(v)) return `[${ws()}${v.map((x) => spaced(x, rnd, shuffle)).join(`${ws()},${ws()}`)}${ws()}]`;
  if (typeof v === 'object' && v !== null) {
    const entries = Object.entries(v);
    if (shuffle && rnd() < 0.3) entries.reverse();
    return `{${ws()}${entries.map(([k, x]) => `${JSON.stringify(k)}${ws()}:${ws()}${spaced(x, rnd, shuffle)}`).join(`${ws()},${ws()}`)}${ws()}}`;
  }
  return JSON.stringify(v);
}

const ip = (a: number): string => `${a >>> 24}.${(a >> 16) & 255}.${(a >> 8) & 255}.${a & 255}`;

/** One operation: mostly the flat forms the bytes' reader takes, the rest what it leaves to JSON.parse. */
function operation(rnd: () => number, i: number, mix: Mix, seen: { session: number[]; policy: number[] }): { op: unknown; raw?: string; n?: number } {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  // Mostly a key of its own; now and then an earlier flat operation's of the same kind (a replace of it, or an
  // add: exists), or a replace of a key no one has (no_such_rule), so that most plans run to their end.
  const r = rnd();
  const kind = r < 0.4 ? 'session' : 'policy';
  const earlier = seen[kind];
  const again = earlier.length > 0 && rnd() < 0.1;
  const n = again ? earlier[Math.floor(rnd() * earlier.length)]! : i;
  const session = (): Record<string, unknown> => ({
    ue: `${ip(0x0a000000 + n)}/32`,
    teid: pick(['0x1', 7, '4294967295', `0x${(n + 1).toString(16)}`]),
    qfi: pick([9, 0, 63]),
    endpoint: '192.0.2.1',
    source: pick(['198.51.100.1', '203.0.113.200']),
    isd: pick(['2001:db8:2::/48', '2001:db8:3::/56']),
    src_prefix: '2001:db8:ffff::/64',
    ...(rnd() < 0.2 ? { rqi: rnd() < 0.5 } : {}),
    ...(rnd() < 0.2 ? { name: `s${rnd() < 0.95 ? n : Math.floor(rnd() * 40)}` } : {}),
  });
  const policy = (): Record<string, unknown> => ({
    match: `${ip(0x64400000 + (n >> 2))}/32`,
    teid: `${n & 3}/32`,
    sr_prefix: pick(['2001:db9:1::/48', '2001:db9:2::/48']),
    src_prefix: '2001:db8:ffff::/64',
    ...(rnd() < 0.2 ? { name: `p${rnd() < 0.95 ? n : Math.floor(rnd() * 40)}` } : {}),
  });
  const op = again ? (rnd() < 0.9 ? 'replace' : 'add') : rnd() < 0.99 ? 'add' : 'replace';
  if (r < 0.4) return { op: { op, session: session() }, n };
  if (r < 0.75) return { op: { op, policy: policy() }, n };
  // What the bytes' reader leaves to JSON.parse: valid operations first, then ones a plan refuses, then texts
  // the body's read refuses (all of the body is then read as before).
  const ue = `${ip(0x0a000000 + n)}/32`;
  const valid = [
    () => ({ op: { op, localsid: { sid: `2001:db8:${(n + 1).toString(16)}::/48`, src_prefix_len: 64 } } }),
    () => ({ op: { op, session: { ...session(), segments: ['2001:db8:a::1'], mtu: 1400 } } }),
    () => ({ op: { op, session: { ...session(), ue: `2001:db8:77:${n.toString(16)}::/64` } } }),
    () => ({ op: { op, policy: { ...policy(), sid: '2001:db8:e::d4', sr_prefix: undefined } } }),
    // An escape in a value (the same text).
    () => ({ op: null, raw: `{"op":"${op}","session":{"ue":"${ue}","teid":1,"qfi":9,"endpoint":"192.0.2.\\u0031","source":"198.51.100.1","isd":"2001:db8:2::/48","src_prefix":"2001:db8:ffff::/64"}}` }),
  ];
  const refused = [
    () => ({ op: { op: 'delete', session: { ue } } }),
    () => ({ op: { op: 'delete', policy: { name: `p${n}` } } }),
    () => ({ op: { op: 'delete', session: { name: 'fs' } } }),
    () => ({ op: { op, session: { ...session(), ue: '10.0.0.7/24' } } }),
    () => ({ op: { op, session: { ...session(), qfi: 64 } } }),
    () => ({ op: { op, policy: { ...policy(), name: `zürich-${n}` } } }),
    () => ({ op: { op, session: session(), x: 1 } }),
    () => ({ op: { op: 'upsert', session: session() } }),
    () => ({ op: { op, session: session(), policy: policy() } }),
    () => ({ op: 5 }),
    () => ({ op: null }),
    // An escape in a key.
    () => ({ op: null, raw: `{"op":"${op}","policy":{"m\\u0061tch":"100.64.0.1/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64"}}` }),
  ];
  const unread = [
    // A key given twice in the rule, "op" twice, a leading zero, a bad token, a missing brace.
    () => ({ op: null, raw: `{"op":"${op}","policy":{"match":"100.64.0.${i & 255}/32","match":"100.64.1.1/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64"}}` }),
    () => ({ op: null, raw: `{"op":"add","op":"${op}","policy":{"match":"100.64.0.1/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64"}}` }),
    () => ({ op: null, raw: `{"op":"${op}","session":{"ue":"${ue}","teid":01,"qfi":9,"endpoint":"192.0.2.1","source":"198.51.100.1","isd":"2001:db8:2::/48","src_prefix":"2001:db8:ffff::/64"}}` }),
    () => ({ op: null, raw: `{"op":"${op}","session":{"ue":"${ue}","teid":1,"qfi":9,"rqi":truthy,"endpoint":"192.0.2.1","source":"198.51.100.1","isd":"2001:db8:2::/48","src_prefix":"2001:db8:ffff::/64"}}` }),
    () => ({ op: null, raw: `{"op":"${op}","session":{"ue":"${ue}","teid":1,"qfi":9,"endpoint":"192.0.2.1","source":"198.51.100.1","isd":"2001:db8:2::/48","src_prefix":"2001:db8:ffff::/64"}` }),
  ];
  const kinds = mix === 'valid' ? valid : mix === 'refused' ? [...valid, ...refused] : [...valid, ...refused, ...unread];
  return pick(kinds)();
}

/** Which operations the bytes' reader leaves to JSON.parse a body has: valid ones only, also ones a plan refuses, or any. */
type Mix = 'valid' | 'refused' | 'any';

function body(rnd: () => number, count: number, oddShare: number, mix: Mix): { text: string; flat: number } {
  const items: string[] = [];
  let flat = 0;
  const seen = { session: [] as number[], policy: [] as number[] };
  for (let i = 0; i < count; i++) {
    let o = operation(rnd, i, mix, seen);
    // Mostly flat ones: regenerate an odd one unless this body takes its share.
    while (rnd() >= oddShare && (o.raw !== undefined || !isFlat(o.op))) o = operation(rnd, i, mix, seen);
    if (o.raw === undefined && isFlat(o.op)) {
      flat++;
      seen['session' in (o.op as object) ? 'session' : 'policy'].push(o.n!);
    }
    items.push(o.raw ?? spaced(o.op, rnd, true));
  }
  return { text: `{"operations":[${items.join(',')}]}`, flat };
}

/** Whether the generator meant `op` as a flat add or replace (one the bytes' reader takes). */
function isFlat(op: unknown): boolean {
  if (typeof op !== 'object' || op === null) return false;
  const o = op as Record<string, unknown>;
  const keys = Object.keys(o);
  if (keys.length !== 2 || (o['op'] !== 'add' && o['op'] !== 'replace')) return false;
  const rule = (o['session'] ?? o['policy']) as Record<string, unknown> | undefined;
  if (rule === undefined) return false;
  if ('segments' in rule || 'sid' in rule || 'sr_prefix' in rule === false && 'policy' in o) return false;
  if (typeof rule['ue'] === 'string' && (rule['ue'].includes(':') || !rule['ue'].endsWith('/32'))) return false;
  if (rule['qfi'] === 64 || (typeof rule['name'] === 'string' && !/^[a-z0-9-]+$/.test(rule['name']))) return false;
  return true;
}

/** readBatchBody from the bytes (whatever the body's size, `bytesFrom` 0; the daemon's: LARGE_BODY) against the body read as before. */
async function compare(text: string | Buffer, label: string, pieceSize = 1 << 16, declare = true, bytesFrom = 0): Promise<{ ops?: unknown[] }> {
  const bytes = Buffer.isBuffer(text) ? text : Buffer.from(text);
  const viaBytes = await outcome(() => readBatchBody(request(bytes, pieceSize, declare), MAX_BATCH_BODY, bytesFrom));
  const before = await outcome(async () => batchOperations(await readBody(request(bytes, pieceSize, declare), MAX_BATCH_BODY)));
  if ('error' in before) {
    expect(viaBytes, label).toEqual(before);
    return {};
  }
  expect('ops' in viaBytes ? undefined : viaBytes, label).toBeUndefined();
  const ops = (viaBytes as { ops: unknown[] }).ops;
  expect(ops).toHaveLength(before.ops.length);
  expect(planned(ops), label).toEqual(planned(before.ops));
  return { ops };
}

describe('a batch body read from its bytes gives what it gave read as JSON', () => {
  it('300 generated bodies of 1-40 operations (flat ones and the others, random whitespace and member order)', async () => {
    const rnd = lcg(52);
    let flatRead = 0;
    let flatMeant = 0;
    let whole = 0;
    for (let run = 0; run < 300; run++) {
      const mix: Mix = run % 3 === 0 ? 'any' : run % 3 === 1 ? 'refused' : 'valid';
      const b = body(rnd, 1 + Math.floor(rnd() * 40), mix === 'any' ? 0.1 : mix === 'refused' ? 0.05 : 0.25, mix);
      const { ops } = await compare(b.text, `run ${run}: ${b.text.slice(0, 2000)}`, 1 + Math.floor(rnd() * 300), rnd() < 0.7);
      if (ops === undefined) continue;
      if (!JSON.stringify(planned(ops)).startsWith('{"error')) whole++;
      flatMeant += b.flat;
      flatRead += ops.filter((o) => o instanceof FlatOp).length;
    }
    // The flat operations were read from the bytes (a body with any operation JSON refuses is read whole, as before).
    expect(flatMeant).toBeGreaterThan(3000);
    // Most plans run to their end (a conflict ends one at its operation).
    expect(whole).toBeGreaterThan(100);
    expect(flatRead).toBe(flatMeant);
  });

  it(`a body of 3,000 flat operations (over 128 KiB: read from its bytes as the daemon does): rows in stores of at most ${STORE_ROWS}, the plan the same`, async () => {
    const rnd = lcg(7);
    const items: string[] = [];
    for (let i = 0; i < 3000; i++) {
      const x = i % 2 === 0
        ? { op: 'add', session: { ue: `${ip(0x0a100000 + i)}/32`, teid: `0x${(i + 1).toString(16)}`, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64' } }
        : { op: 'add', policy: { match: `${ip(0x64500000 + (i >> 4))}/32`, teid: `${i & 15}/32`, sr_prefix: '2001:db9:1::/48', src_prefix: '2001:db8:ffff::/64', ...(i % 7 === 0 ? { name: `n${i}` } : {}) } };
      items.push(spaced(x, rnd, true));
    }
    const text = `{\n  "operations": [\n${items.join(',\n')}\n]\n}\n`;
    expect(text.length).toBeGreaterThan(LARGE_BODY);
    const { ops } = await compare(text, '3000 flat', 1 << 16, true, LARGE_BODY);
    expect(ops!.every((o) => o instanceof FlatOp)).toBe(true);
    const stores = new Map<unknown, number>();
    for (const o of ops as FlatOp[]) {
      const store = o.kind === 'session' ? SessionRule.rowsOf(o.rule as Session) : PolicyRule.rowsOf(o.rule as Policy);
      stores.set(store, (stores.get(store) ?? 0) + 1);
    }
    expect(stores.size).toBe(2 * Math.ceil(1500 / STORE_ROWS));
    expect(Math.max(...stores.values())).toBe(STORE_ROWS);
  });

  it(`${MAX_BATCH_OPERATIONS} flat operations read from the bytes; a body of 128 KiB or less read as before (one JSON.parse); an operation over 64 KiB left to the sliced read`, async () => {
    const flat = (i: number): string => `{"op":"add","session":{"ue":"${ip(0x0a200000 + i)}/32","teid":"0x1","qfi":9,"endpoint":"192.0.2.1","source":"198.51.100.1","isd":"2001:db8:2::/48","src_prefix":"2001:db8:ffff::/64"}}`;
    const all = `{"operations":[${Array.from({ length: MAX_BATCH_OPERATIONS }, (_, i) => flat(i)).join(',')}]}`;
    const { ops } = await compare(all, `${MAX_BATCH_OPERATIONS} flat`, 1 << 16, true, LARGE_BODY);
    expect(ops!.filter((o) => o instanceof FlatOp)).toHaveLength(MAX_BATCH_OPERATIONS);
    // A small body, as the daemon reads it: JSON.parse whole, no FlatOp.
    const small = await readBatchBody(request(Buffer.from(`{"operations":[${flat(1)}]}`), 1 << 16, true));
    expect(small.some((o) => o instanceof FlatOp)).toBe(false);
    // One large operation (valid JSON, a local SID with a large unknown member): not read from the bytes.
    const large = `{"operations":[${flat(2)},{"op":"add","localsid":{"sid":"2001:db8::/48","src_prefix_len":64,"x":[${'0,'.repeat(40_000)}0]}}]}`;
    expect(runNow(batchFromBytes(Buffer.from(large), () => 'parsed'))).toBeUndefined();
    await compare(large, 'one large operation', 1 << 16, true, LARGE_BODY);
  });

  it('bodies of the wrong shape, or not JSON, get the same error', async () => {
    const flat = '{"op":"add","policy":{"match":"100.64.0.1/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64"}}';
    const cases = [
      '',
      ' ',
      '[]',
      '{}',
      `{"operations":[${flat}]`,
      `{"operations":[${flat}]}x`,
      `{"operations":[${flat}],"x":1}`,
      `{"x":1,"operations":[${flat}]}`,
      `{"operations":[${flat}],"operations":[]}`,
      `{"operations":{"op":"add"}}`,
      `{"operations":[${flat},]}`,
      `{"operations":[,${flat}]}`,
      `{"operations":[${flat} ${flat}]}`,
      `{"operations":[]}`,
      `  {  "operations" :  [ ]  }  \n`,
      `\ufeff{"operations":[${flat}]}`,
      `{"operations":[${flat.slice(0, -1)}]}`,
      `{"operations":[${flat.replace('}}', '}}}')}]}`,
      `{"operations":[{"op":"add","policy":{"match":"100.64.0.1/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64"},}]}`,
      `{"operations":[{"op":"add","policy":{"match":"100.64.0.1/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64",}}]}`,
      `{"operations":[{"op":"add","policy":{"match":"100.64.0.1/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64\u0001"}}]}`,
      `{"operations":[{"op":"add","session":{"ue":"10.0.0.1/32","teid":1,"qfi":9,"endpoint":"192.0.2.1","source":"198.51.100.1","isd":"2001:db8:2::/48","src_prefix":"2001:db8:ffff::/64","rqi":tru}}]}`,
      `{"operations":[{"op":"add","session":{"ue":"10.0.0.1/32","teid":1,"qfi":9,"endpoint":"192.0.2.1","source":"198.51.100.1","isd":"2001:db8:2::/48","src_prefix":"2001:db8:ffff::/64","rqi":true"}}]}`,
      `{"operations":["x\\"]}`,
      // A key given twice in a flat rule, in an operation; a third member: the reader of the bytes must not take them.
      `{"operations":[${flat},{"op":"add","policy":{"match":"100.64.0.5/32","match":"100.64.1.1/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64"}}]}`,
      `{"operations":[{"op":"replace","op":"add","policy":{"match":"100.64.0.5/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64"}}]}`,
      `{"operations":[{"op":"add","policy":{"match":"100.64.0.5/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64"},"policy":{"match":"100.64.0.6/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64"}}]}`,
      `{"operations":[{"op":"add","policy":{"match":"100.64.0.5/32","sr_prefix":"2001:db9:1::/48","src_prefix":"2001:db8:ffff::/64"},"op":"add"}]}`,
      `{"operations":[${flat}]} {}`,
      `{"operations":[${Array.from({ length: MAX_BATCH_OPERATIONS + 1 }, () => flat).join(',')}]}`,
    ];
    for (const c of cases) await compare(c, JSON.stringify(c.slice(0, 300)));
    // Invalid UTF-8 in a value: read as the whole body decodes it.
    await compare(Buffer.concat([Buffer.from('{"operations":[{"op":"delete","policy":{"name":"a'), Buffer.from([0xe6, 0x9d]), Buffer.from('b"}}]}')]), 'invalid UTF-8');
  });

  it('valueEnd finds where a value ends, strings and brackets counted, or -1 where the bytes end first', () => {
    const end = (s: string, i = 0): number => valueEnd(Buffer.from(s), i);
    expect(end('{"a":"}"}, 1')).toBe(9);
    expect(end('["\\"]", [1]] x')).toBe(12);
    expect(end('"a\\\\" ,')).toBe(5);
    expect(end('123,4')).toBe(3);
    expect(end('true]')).toBe(4);
    expect(end('{"a":[1,2}')).toBe(-1);
    expect(end('"abc')).toBe(-1);
    expect(end('null')).toBe(4);
  });
});
