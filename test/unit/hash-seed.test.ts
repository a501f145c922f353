/**
 * The daemon's hash tables of rule keys (KeyIndex, RowIndex) and
 * ShardedMap's choice of shard hash with a seed drawn per process
 * (src/host/hash-seed.ts): keys worked out offline against FNV-1a, as
 * anyone could before, no longer share a shard or a home slot; the same
 * key hashes differently in two processes and alike in two threads of one.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { finishHash, HASH_SEED_ENV, seedOf } from '../../src/host/hash-seed.js';
import { KEY_INDEX_SHARDS, KeyIndex, keyIndexHash } from '../../src/host/key-index.js';
import { rowIndexHash } from '../../src/config/row-map.js';
import { SHARDS, shardOf } from '../../src/host/sharded-map.js';
import { xorshift32 } from '../helpers/rng.js';

const ROOT = join(import.meta.dirname, '../..');

/** The hash both tables had before the seed: FNV-1a of the bytes, its high bits folded in, never 0; unsigned. */
function unseeded(b: Uint8Array): number {
  let f = 0x811c9dc5;
  for (const x of b) f = Math.imul(f ^ x, 0x01000193);
  const h = (f ^ (f >>> 15)) >>> 0;
  return h === 0 ? 1 : h;
}

/** A deterministic stream of keys (xorshift32), `len` bytes each. */
function* keys(len: number, seed = 1): Generator<Uint8Array> {
  const next = xorshift32(seed);
  for (;;) {
    const k = new Uint8Array(len);
    for (let i = 0; i < len; i++) k[i] = next() & 0xff;
    yield k;
  }
}

/** `n` keys whose unseeded hash passes `keep`: what an attacker works out offline. */
function crafted(n: number, len: number, keep: (h: number) => boolean): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const k of keys(len)) {
    if (keep(unseeded(k))) out.push(k);
    if (out.length === n) return out;
  }
  return out;
}

const latin1 = (b: Uint8Array): string => Buffer.from(b).toString('latin1');

describe('seeded hashes of rule keys', () => {
  it('keys crafted to share a KeyIndex shard without the seed spread over the shards', () => {
    const n = 2000;
    // The shard is the hash's top 6 bits: one key in 64 qualifies.
    const ks = crafted(n, 8, (h) => h >>> 26 === 0);
    expect(ks).toHaveLength(n);
    const index = new KeyIndex(8);
    ks.forEach((k, i) => index.set(latin1(k), i));
    expect(index.size).toBe(n);
    // Unseeded, all 2,000 were in one shard (each insert probing a cluster of them); spread, about n / 64 each.
    expect(index.largestShard).toBeLessThan(n / 8);
    expect(KEY_INDEX_SHARDS).toBe(64);
    // Every key is still found, by its text and by its bytes.
    ks.forEach((k, i) => {
      expect(index.get(latin1(k))).toBe(i);
      expect(index.getBytes(k, 0)).toBe(i);
    });
  });

  it('keys crafted to share a RowIndex home slot without the seed fall on many slots', () => {
    const n = 2000;
    // A full index of 2,000 rows has 2,668 slots (RowIndex.slotsFor); home = hash mod slots.
    const slots = Math.max(16, Math.ceil((n * 4) / 3) + 1);
    const ks = crafted(n, 12, (h) => h % slots === 0);
    expect(ks).toHaveLength(n);
    const homes = new Set(ks.map((k) => (rowIndexHash(k) >>> 0) % slots));
    // Random homes: about 1,400 distinct of 2,668 for 2,000 keys; unseeded, one.
    expect(homes.size).toBeGreaterThan(n / 2);
  });

  it('rule names crafted to share a ShardedMap shard without the seed spread over the shards', () => {
    // ShardedMap's shard before the seed: FNV-1a of the UTF-16 units, its four bytes folded.
    const oldShard = (text: string): number => {
      let h = 0x811c9dc5;
      for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
      return ((h >>> 24) ^ (h >>> 16) ^ (h >>> 8) ^ h) & 255;
    };
    const names: string[] = [];
    for (let i = 0; names.length < 2000; i++) if (oldShard(`rule-${i}`) === 0) names.push(`rule-${i}`);
    const per = new Array<number>(SHARDS).fill(0);
    for (const n of names) per[shardOf(n)]!++;
    // Unseeded, all 2,000 in shard 0; spread, about 8 a shard.
    expect(Math.max(...per)).toBeLessThan(names.length / 8);
  });

  it('the two writings of a KeyIndex hash agree, and neither is 0', () => {
    for (const k of [...Array(200)].map((_, i) => keys(16, i + 1).next().value as Uint8Array)) {
      const index = new KeyIndex(16);
      index.addBytes(k, 0, 7);
      expect(index.get(latin1(k))).toBe(7);
      expect(keyIndexHash(latin1(k))).not.toBe(0);
    }
    expect(finishHash(0)).not.toBe(0);
    expect(finishHash(0x811c9dc5 ^ 0x811c9dc5)).toBeGreaterThan(0);
  });

  it('reads a seed from the environment only as an unsigned 32-bit decimal', () => {
    expect(seedOf('0')).toBe(0);
    expect(seedOf('4294967295')).toBe(-1);
    expect(seedOf('4294967296')).toBeUndefined();
    expect(seedOf('-1')).toBeUndefined();
    expect(seedOf('0x10')).toBeUndefined();
    expect(seedOf('')).toBeUndefined();
    expect(seedOf(undefined)).toBeUndefined();
  });

  describe('across processes and threads (dist/, what bin/mup.js runs)', () => {
    // A process: its hashes of three keys, then a thread's hashes of the same keys (or its error).
    const WORK = `
      import { Worker } from 'node:worker_threads';
      import { keyIndexHash } from './dist/host/key-index.js';
      import { rowIndexHash } from './dist/config/row-map.js';
      const KEYS = ['\\x0a\\x00\\x00\\x01\\x00\\x00\\x00\\x01', 'abcdefgh', '\\xff\\xfe\\xfd\\xfc\\xfb\\xfa\\xf9\\xf8'];
      const mine = KEYS.map((k) => [keyIndexHash(k), rowIndexHash(Buffer.from(k, 'latin1'))]);
      // The thread's code is a module too (it inherits --input-type=module).
      const code = "import { parentPort, workerData } from 'node:worker_threads';" +
        "import(workerData.ki).then(async (ki) => { const rm = await import(workerData.rm);" +
        " parentPort.postMessage(workerData.keys.map((k) => [ki.keyIndexHash(k), rm.rowIndexHash(Buffer.from(k, 'latin1'))])); })" +
        ".catch((e) => parentPort.postMessage(String(e.message)));";
      const env = process.argv[1] === 'bare' ? {} : process.env;
      const w = new Worker(code, { eval: true, env, workerData: { keys: KEYS, ki: new URL('./dist/host/key-index.js', 'file://' + process.cwd() + '/').href, rm: new URL('./dist/config/row-map.js', 'file://' + process.cwd() + '/').href } });
      w.once('message', (theirs) => { console.log(JSON.stringify({ mine, theirs })); w.terminate(); });
    `;
    const run = (env: NodeJS.ProcessEnv, arg = 'env'): { mine: number[][]; theirs: number[][] | string } => {
      if (!existsSync(join(ROOT, 'dist/host/hash-seed.js'))) throw new Error('dist/ is missing: run `make` (make test builds it)');
      const r = spawnSync(process.execPath, ['--input-type=module', '-e', WORK, arg], { cwd: ROOT, encoding: 'utf8', env });
      if (r.status !== 0) throw new Error(`the child failed (${r.status}): ${r.stderr}`);
      return JSON.parse(r.stdout) as { mine: number[][]; theirs: number[][] | string };
    };
    const envWithout = (): NodeJS.ProcessEnv => {
      const e = { ...process.env };
      delete e[HASH_SEED_ENV];
      return e;
    };

    it('two processes hash the same keys differently; a thread hashes them as its process does', () => {
      const a = run(envWithout());
      const b = run(envWithout());
      expect(a.theirs).toEqual(a.mine);
      expect(b.theirs).toEqual(b.mine);
      // Three keys, two hashes each: equal by chance with odds of 2^-192.
      expect(b.mine).not.toEqual(a.mine);
    });

    it('a process given MUP_HASH_SEED hashes as another given the same', () => {
      const a = run({ ...envWithout(), [HASH_SEED_ENV]: '12345' });
      const b = run({ ...envWithout(), [HASH_SEED_ENV]: '12345' });
      expect(b.mine).toEqual(a.mine);
    });

    it('a thread made without the seed in its environment fails at once, saying why', () => {
      const r = run(envWithout(), 'bare');
      expect(r.theirs).toMatch(/MUP_HASH_SEED is not in this thread's environment/);
    });
  });
});
