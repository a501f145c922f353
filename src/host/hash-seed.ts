/**
 * The seed of the daemon's own hash tables of rule keys (KeyIndex,
 * src/host/key-index.ts; RowIndex, src/config/row-map.ts): drawn at random
 * once per process. Their keys come from API clients and BGP peers; with
 * an unseeded FNV-1a anyone could work out offline keys that all fall in
 * one shard or on one home slot, and each insert and look-up would then
 * probe past all of them (the quadratic stall an index exists to avoid).
 *
 * Every thread of the process must use the same seed: the list-ahead
 * thread fills an index the main thread then probes. The main thread draws
 * it and puts it in process.env, which a Worker copies when it is made;
 * a thread reads it from there, and one that finds none throws at once
 * (a module that makes a Worker imports this module first, so that the
 * seed is drawn before). A process started with MUP_HASH_SEED in its
 * environment takes that seed (tests: the same hashes in two processes).
 */
import { randomBytes } from 'node:crypto';
import { isMainThread } from 'node:worker_threads';

/** The environment variable that carries the seed to the process's threads. */
export const HASH_SEED_ENV = 'MUP_HASH_SEED';

/** The seed a text of the environment gives (an unsigned 32-bit decimal), or undefined. */
export function seedOf(text: string | undefined): number | undefined {
  if (text === undefined || !/^[0-9]{1,10}$/.test(text)) return undefined;
  const n = Number(text);
  return n <= 0xffff_ffff ? n | 0 : undefined;
}

function drawSeed(): number {
  const given = seedOf(process.env[HASH_SEED_ENV]);
  if (given !== undefined) return given;
  if (!isMainThread) {
    throw new Error(
      `internal: ${HASH_SEED_ENV} is not in this thread's environment: the module that made the thread must import src/host/hash-seed.ts, so that its hash tables agree with the main thread's`,
    );
  }
  const seed = randomBytes(4).readUInt32LE(0);
  process.env[HASH_SEED_ENV] = String(seed);
  return seed | 0;
}

/** This process's seed (a signed 32-bit integer). */
export const HASH_SEED: number = drawSeed();

/** FNV-1a's offset basis, seeded. */
export const SEEDED_BASIS: number = (0x811c9dc5 ^ HASH_SEED) | 0;

/**
 * The end of a seeded FNV-1a: MurmurHash3's finaliser, so that every bit
 * of the result depends on every bit of the state (FNV-1a's low bits
 * depend on the low bits of the bytes only), then never 0 (a slot's
 * stored hash 0 means "empty"). Unsigned.
 */
export function finishHash(f: number): number {
  f ^= f >>> 16;
  f = Math.imul(f, 0x85eb_ca6b);
  f ^= f >>> 13;
  f = Math.imul(f, 0xc2b2_ae35);
  f ^= f >>> 16;
  f >>>= 0;
  return f === 0 ? 1 : f;
}
