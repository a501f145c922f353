/**
 * A start's sessions read on a second thread (src/config/list-ahead.ts)
 * give the config a parse on one thread gives: the same rules field by
 * field, the same places of each item (a reload keeps rules by them), the
 * same warnings, the same key index, the same error for a bad file. Each
 * case is parsed twice from the same shared bytes, with the thread and
 * without; the thread is let begin first (on a file this small the parse
 * would otherwise reach the list before the thread has loaded).
 */
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { asciiJson } from '../../src/config/ascii-text.js';
import { ConfigError } from '../../src/config/errors.js';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { listAheadWorkerUrl, ListAheadThread } from '../../src/config/list-ahead.js';
import { filledIndexesTakenCount, itemSpansOf, parseConfig, readListAhead, takeRuleIndex, type ListAhead } from '../../src/config/load.js';
import { locateList } from '../../src/config/list-ahead-state.js';
import { policyKey, sessionKey } from '../../src/config/keys.js';
import { plainRule, SessionRows } from '../../src/config/rows.js';
import { RowKeyedMap } from '../../src/config/row-map.js';
import type { Config } from '../../src/config/types.js';

type Obj = Record<string, unknown>;
const session = (i: number, o: Obj = {}): Obj => ({ ue: `10.${i >> 8}.${i & 255}.0/24`, teid: `0x${(i + 1).toString(16)}`, qfi: 9, endpoint: '192.0.2.1', source: '198.51.100.1', isd: '2001:db8:2::/48', src_prefix: '2001:db8:ffff::/64', ...o });
const policy = (i: number, o: Obj = {}): Obj => ({ match: `100.64.${i >> 8}.${i & 255}/32`, teid: `${i}/32`, sr_prefix: '2001:db9:1::/48', src_prefix: '2001:db8:ffff::/64', ...o });
const many = (n: number, f: (i: number) => Obj): Obj[] => Array.from({ length: n }, (_, i) => f(i));

/** A JSON config as generated files write it: settings first, one item a line. */
function json(parts: { policies?: Obj[]; sessions?: Obj[]; sessionsFirst?: boolean; tail?: string }): string {
  const list = (l: Obj[]): string => `[${l.map((x) => `\n${JSON.stringify(x)}`).join(',')}]`;
  const members = [`"settings":${JSON.stringify({ max_policies: 65536, max_sessions: 65536 })}`];
  const p = `"policies":${list(parts.policies ?? [])}`;
  const s = `"sessions":${list(parts.sessions ?? [])}`;
  members.push(...(parts.sessionsFirst === true ? [s, p] : [p, s]), '"localsids":[]');
  return `{${members.join(',')}}${parts.tail ?? ''}\n`;
}

/** The text's bytes in a SharedArrayBuffer, as the daemon reads a file. */
function shared(text: string): Buffer {
  const n = Buffer.byteLength(text);
  const b = Buffer.from(new SharedArrayBuffer(n));
  b.write(text);
  return b;
}

const BIG = (_k: string, v: unknown): unknown => (typeof v === 'bigint' ? `0x${v.toString(16)}` : v);

/** What a parse gave: every rule as its plain fields, the items' places, the warnings, the key indexes' answers. */
function view(c: Config): string {
  const index = takeRuleIndex(c.sessions ?? []);
  const found = (c.sessions ?? []).map((s) => index?.byKey.get(sessionKey(s)) === s);
  const pIndex = takeRuleIndex(c.policies);
  const pFound = c.policies.every((p) => pIndex?.byKey.get(policyKey(p)) === p);
  return JSON.stringify(
    {
      policies: c.policies.map(plainRule),
      sessions: (c.sessions ?? []).map(plainRule),
      spans: Object.entries(itemSpansOf(c) ?? {}).map(([k, v]) => [k, [...v]]),
      warnings: c.warnings,
      indexSize: index?.byKey.size,
      // Whether pages go by the key bytes' order (IPv4 UEs only), as the index says.
      orderable: index?.byKey instanceof RowKeyedMap ? index.byKey.pageSlices(undefined, 1, () => false) !== undefined : undefined,
      found: found.every((x) => x),
      policyIndexSize: pIndex?.byKey.size,
      pFound,
    },
    BIG,
  );
}

function outcomeOf(f: () => Config): { view?: string; error?: string } {
  try {
    return { view: view(f()) };
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    return { error: `${e.path}: ${e.message}` };
  }
}

// The thread runs the build's script (dist/, made by `make`): without it every case would wait for a thread that never
// begins, and with an older build the thread's side tested would be that build's.
beforeAll(() => {
  const script = fileURLToPath(listAheadWorkerUrl());
  if (!existsSync(script)) throw new Error(`${script} is missing: build first (make, or npx tsc -p tsconfig.json)`);
  const built = Math.min(...['list-ahead-worker.js', 'load.js', 'rows.js', 'row-map.js', 'flat-rules.js'].map((f) => statSync(join(dirname(script), f)).mtimeMs));
  const src = fileURLToPath(new URL('../../src/config/', import.meta.url));
  for (const f of readdirSync(src)) {
    if (f.endsWith('.ts') && statSync(join(src, f)).mtimeMs > built) throw new Error(`src/config/${f} is newer than the build the thread runs (${dirname(script)}): build first (make, or npx tsc -p tsconfig.json)`);
  }
});

const threads: ListAheadThread[] = [];
afterEach(() => {
  for (const t of threads.splice(0)) t.stop();
});

/** The text parsed on one thread, and with the thread (once it has begun or finished). */
async function both(text: string): Promise<{ alone: ReturnType<typeof outcomeOf>; ahead: ReturnType<typeof outcomeOf>; thread: ListAheadThread }> {
  const b = shared(text);
  const alone = outcomeOf(() => parseConfig(asciiJson(b) ?? text, 'x.json', undefined, b));
  const t = new ListAheadThread();
  threads.push(t);
  t.give(b);
  await vi.waitFor(() => expect(t.phase).not.toBe('locating'), { timeout: 20_000, interval: 5 });
  const ahead = outcomeOf(() => parseConfig(asciiJson(b) ?? text, 'x.json', undefined, b, t));
  return { alone, ahead, thread: t };
}

describe('sessions read ahead on a second thread', () => {
  it.each<[string, Parameters<typeof json>[0], string]>([
    ['policies, then sessions, every item flat', { policies: many(300, (i) => policy(i)), sessions: many(300, (i) => session(i)) }, 'taken'],
    ['sessions first', { sessionsFirst: true, policies: many(50, (i) => policy(i)), sessions: many(300, (i) => session(i)) }, 'taken'],
    [
      'names, an IPv6 UE, segments and an MTU (items the rule reader reads there, as rows)',
      {
        policies: [policy(0, { name: 'sessions' })],
        sessions: [...many(100, (i) => session(i, i % 7 === 0 ? { name: `s-${i}` } : {})), session(100, { ue: '2001:db8:60::/64' }), session(101, { segments: ['2001:db8::1'], mtu: 1400 })],
      },
      'taken',
    ],
    ['a session that draws a warning (host bits in its UE)', { sessions: [...many(20, (i) => session(i)), session(20, { ue: '10.0.20.7/24' })] }, 'no answer'],
    ['a session refused (a bad TEID)', { sessions: [...many(20, (i) => session(i)), session(20, { teid: 'x' })] }, 'no answer'],
    ['no sessions', { policies: many(20, (i) => policy(i)), sessions: [] }, 'no answer'],
  ])('%s: the same config', async (_what, parts, outcome) => {
    const { alone, ahead, thread } = await both(json(parts));
    expect(ahead).toEqual(alone);
    expect(thread.outcome).toBe(outcome);
    if (outcome === 'taken') expect(thread.indexTaken).toBe(true);
  });

  it('a UE given twice: the same error, worded by this thread (the other sends no index)', async () => {
    const { alone, ahead, thread } = await both(json({ sessions: [...many(30, (i) => session(i)), session(7, { teid: 99 })] }));
    expect(alone.error).toMatch(/^sessions\[30\]\.ue: .*10\.0\.7\.0\/24 is already used by sessions\[7\]/);
    expect(ahead).toEqual(alone);
    expect(thread.outcome).toBe('taken');
    expect(thread.indexTaken).toBe(false);
  });

  it('a sessions list somewhere else first (inside an interface, refused there): the thread reads that one, and the parse reads the real one itself', async () => {
    const text = json({ sessions: many(30, (i) => session(i)) }).replace('{"settings"', `{"interfaces":[{"name":"mup0","sessions":[${JSON.stringify(session(99))}]}],"settings"`);
    const { alone, ahead, thread } = await both(text);
    expect(alone.error).toMatch(/^interfaces\[0\]\.sessions: /);
    expect(ahead).toEqual(alone);
    expect(thread.outcome).toBe('another place');
  });

  it('text after the top-level object: the same error (the list taken is thrown away with the streamed read)', async () => {
    const { alone, ahead, thread } = await both(json({ sessions: many(30, (i) => session(i)), tail: ' x' }));
    expect(alone.error).toBeDefined();
    expect(ahead).toEqual(alone);
    expect(thread.outcome).toBe('taken, then the file was read whole');
  });

  it('a list the parse reaches before the thread has begun is read here', () => {
    const text = json({ sessions: many(30, (i) => session(i)) });
    const b = shared(text);
    const t = new ListAheadThread();
    threads.push(t);
    t.give(b);
    // At once: the thread is still loading.
    const c = parseConfig(asciiJson(b)!, 'x.json', undefined, b, t);
    expect(t.outcome).toBe('not begun when the parse reached the list');
    expect(view(c)).toEqual(view(parseConfig(asciiJson(b)!, 'x.json', undefined, b)));
  });

  it('a thread that stops dead while it reads (no beat for 5 s) is given up on, and the list is read here', async () => {
    const was = process.env['MUP_TEST_LIST_AHEAD_HANG'];
    process.env['MUP_TEST_LIST_AHEAD_HANG'] = '1';
    let t: ListAheadThread;
    try {
      t = new ListAheadThread();
    } finally {
      if (was === undefined) delete process.env['MUP_TEST_LIST_AHEAD_HANG'];
      else process.env['MUP_TEST_LIST_AHEAD_HANG'] = was;
    }
    threads.push(t);
    const text = json({ policies: many(20, (i) => policy(i)), sessions: many(30, (i) => session(i)) });
    const b = shared(text);
    t.give(b);
    await vi.waitFor(() => expect(t.phase).toBe('reading'), { timeout: 20_000, interval: 5 });
    const c = parseConfig(asciiJson(b)!, 'x.json', undefined, b, t);
    expect(t.outcome).toBe('stalled');
    expect(view(c)).toEqual(view(parseConfig(asciiJson(b)!, 'x.json', undefined, b)));
    // Stopped, even in its wait: no thread is left.
    t.stop();
    await vi.waitFor(() => expect(ListAheadThread.live).toBe(0), { timeout: 10_000, interval: 10 });
  }, 30_000);

  it('bytes not in a SharedArrayBuffer are not given (they would be copied): the list is read here', async () => {
    const text = json({ sessions: many(30, (i) => session(i)) });
    const t = new ListAheadThread();
    threads.push(t);
    t.give(Buffer.from(text));
    const c = parseConfig(text, 'x.json', undefined, Buffer.from(text), t);
    expect(t.outcome).toBe('not asked');
    expect(c.sessions).toHaveLength(30);
  });

  it("rows only (the thread's store): a row added gives one object for all, an item that cannot be a row gives none", () => {
    const c = parseConfig(json({ sessions: many(3, (i) => session(i)) }), 'x.json');
    const rows = new SessionRows(false);
    const added = c.sessions!.map((s) => rows.add(plainRule(s)));
    expect(added[0]).toBeDefined();
    expect(new Set(added).size).toBe(1);
    expect(rows.count).toBe(3);
    // Its `where` is not the next row's: not added, and the caller keeps its own object.
    expect(rows.add(plainRule(c.sessions![0]!))).toBeUndefined();
    expect(rows.count).toBe(3);
  });

  // The main thread's side alone, the list read by readListAhead in this thread: while "the thread" reads, the parse
  // makes the list's rule objects and the policies' index a step at a time; the checks take that index.
  describe('what the parse does while it waits', () => {
    /** A ListAhead that answers with readListAhead's list after `meanwhile` has no more to do; its steps counted. */
    function inThisThread(b: Buffer, answer: boolean, most = Infinity): ListAhead & { steps: number } {
      const got = readListAhead(b, locateList(b, 'sessions'));
      return {
        steps: 0,
        take(_key, _at, meanwhile) {
          while (this.steps < most && meanwhile?.(got?.read.rows.count ?? 0) === true) this.steps++;
          return answer ? got?.read : undefined;
        },
        index: () => got?.index(),
        readWhole: () => undefined,
      };
    }

    it.each([
      ['taken', true, 2],
      ['read here after all', false, 1],
    ])('the list %s: the same config, the policies\' index made meanwhile', (_what, answer, indexes) => {
      const text = json({ policies: many(20_000, (i) => policy(i)), sessions: many(20_000, (i) => session(i)) });
      const b = shared(text);
      const ahead = inThisThread(b, answer);
      const taken = filledIndexesTakenCount();
      const c = parseConfig(asciiJson(b)!, 'x.json', undefined, b, ahead);
      // The list's 20,000 rules in 2 steps (16,384 a step), then the policies' 20,000 keys in 5 (4,096 a step).
      expect(ahead.steps).toBe(2 + 5);
      // The checks took the indexes made ahead: the policies', and the sessions' when the list was taken.
      expect(filledIndexesTakenCount() - taken).toBe(indexes);
      expect(view(c)).toEqual(view(parseConfig(asciiJson(b)!, 'x.json', undefined, b)));
    });

    it('a wait that ends before the policies\' index is whole: the check makes the rest of it, the same config', () => {
      const text = json({ policies: many(20_000, (i) => policy(i)), sessions: many(20_000, (i) => session(i)) });
      const b = shared(text);
      const ahead = inThisThread(b, true, 4);
      const taken = filledIndexesTakenCount();
      const c = parseConfig(asciiJson(b)!, 'x.json', undefined, b, ahead);
      expect(ahead.steps).toBe(4);
      expect(filledIndexesTakenCount() - taken).toBe(2);
      expect(view(c)).toEqual(view(parseConfig(asciiJson(b)!, 'x.json', undefined, b)));
    });

    it('a policy key given twice: the index made meanwhile stops, and the check words the same error', () => {
      const text = json({ policies: [...many(9000, (i) => policy(i)), policy(4321)], sessions: many(100, (i) => session(i)) });
      const b = shared(text);
      const alone = outcomeOf(() => parseConfig(asciiJson(b)!, 'x.json', undefined, b));
      expect(alone.error).toMatch(/^policies\[9000\]\.match: /);
      const taken = filledIndexesTakenCount();
      expect(outcomeOf(() => parseConfig(asciiJson(b)!, 'x.json', undefined, b, inThisThread(b, true)))).toEqual(alone);
      // The policies' index stopped at the repeat: the check made its own (and found it); the sessions' was not asked for.
      expect(filledIndexesTakenCount() - taken).toBe(0);
    });
  });
});
