/**
 * parseConfig on a thread of its own (src/config/parse-worker.ts), for a
 * daemon that is serving: a reload's 11.6 MB of YAML took 1.0-1.2 s of the
 * event loop to read and check. The rules come back RULES_PER_MESSAGE a
 * message, each taken in a turn of its own, with their keys: the index the
 * file's checks built (names and keys, takeRuleIndex) is built from them
 * here, so the rule set is made from it as after parseConfig. The result is
 * what parseConfig gives (test/unit/parse-off-loop.test.ts); a refused file
 * is the same ConfigError. Given the text the running config was read
 * from, the thread sends a rule whose text is the same at the same place
 * as KEPT (src/config/parse-pieces.ts) and the running rule is taken: a
 * reload of one edit sends one rule. Bytes over a SharedArrayBuffer
 * (src/host/read-shared.ts) are shared with the thread; others are copied
 * to it.
 */
// Drawn before this module makes a thread, which takes the same seed (src/host/hash-seed.ts).
import '../host/hash-seed.js';
import { ShardedMap } from '../host/sharded-map.js';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { ConfigError } from './errors.js';
import { SECTION_KEY, seedRuleKey } from './keys.js';
import { itemSpansOf, keepItemSpans, keepRuleIndex, markReadByBlockReader, ruleKeyMap } from './load.js';
import { RepeatedRowKey, type RowKeyedMap } from './row-map.js';
import { KEPT, type FromParser, type HeldText, type PreviousText, type Section } from './parse-pieces.js';
import { sameData } from './same.js';
import type { Config, LocalSid, Policy, Session } from './types.js';
import type { Ipv6Prefix } from '../sid/types.js';

/**
 * The thread's script: the compiled one beside this module; when this
 * module is the TypeScript source (tests run src/ through vitest), the
 * build's (dist/), which `make` makes from the same source.
 */
export function parseWorkerUrl(): URL {
  const here = new URL('./parse-worker.js', import.meta.url);
  if (existsSync(fileURLToPath(here))) return here;
  return new URL('../../dist/config/parse-worker.js', import.meta.url);
}

/**
 * One object per distinct IPv6 prefix value. The thread shares the prefix
 * objects that thousands of rules have in common (a policy's sr_prefix and
 * src_prefix, a session's isd and src_prefix: readIpv6Prefix), but a
 * message is cloned on its own: with RULES_PER_MESSAGE rules a message
 * and 256 sr_prefixes in turn, each of 65,536 policies came with a prefix
 * object and a BigInt of its own (4.7 MB of 66 MB of heap after a start);
 * at a million sessions that would be 70 MB.
 */
class PrefixPool {
  readonly #byAddr = new Map<bigint, Ipv6Prefix[]>();
  get(p: Ipv6Prefix): Ipv6Prefix {
    const same = this.#byAddr.get(p.addr);
    if (same === undefined) {
      this.#byAddr.set(p.addr, [p]);
      return p;
    }
    for (const q of same) if (q.len === p.len) return q;
    same.push(p);
    return p;
  }
}

/** A rule fresh from the thread's message (no one else holds it): its shared prefixes replaced by the pool's. */
function shareSharedPrefixes(r: Policy | Session, pool: PrefixPool): void {
  const w = r as { srPrefix?: Ipv6Prefix; srcPrefix?: Ipv6Prefix; isd?: Ipv6Prefix };
  if (w.srPrefix !== undefined) w.srPrefix = pool.get(w.srPrefix);
  if (w.srcPrefix !== undefined) w.srcPrefix = pool.get(w.srcPrefix);
  if (w.isd !== undefined) w.isd = pool.get(w.isd);
}

/**
 * `previous`: the config the daemon runs now (a reload). A rule the thread
 * reads equal, as data and at the same place in its list, to the previous
 * config's there is that rule object, not the one just made: the new one
 * dies young in the turn it came in. Without this, a reload of a file
 * with one rule edited made 131,072 rule objects that all lived (the
 * collector copied and promoted them, pausing the loop 5-20 ms a time),
 * and the heap held both rule sets until the old one was let go.
 */
type Rule = Policy | LocalSid | Session;

/**
 * Of a config from parseConfigOffLoop (for the reload's log line): its rules
 * that are the previous config's objects, and the rules that crossed from
 * the thread (the others were sent as KEPT).
 */
const counts = new WeakMap<Config, { readonly kept: number; readonly crossed: number }>();
export function rulesKept(config: Config): number {
  return counts.get(config)?.kept ?? 0;
}
export function rulesCrossed(config: Config): number {
  return counts.get(config)?.crossed ?? 0;
}

/** The file of a config from parseConfigOffLoop, deflated by the thread (for KeptText.setDeflated). */
const deflatedFiles = new WeakMap<Config, Buffer>();
export function deflatedFile(config: Config): Buffer | undefined {
  return deflatedFiles.get(config);
}

/**
 * Sessions and policies indexed a turn (ruleKeyMap's fill) once all have
 * come: 16,384 keys took about 5 ms here on a quiet host, 10-13 ms in an
 * edited reload of bench:daemon's 131,072 rules beside its status poller
 * (over the loop's 10 ms p99 target); 4,096 a quarter of that (twice
 * that in the turn where the policies end and the sessions begin).
 */
const KEY_MAP_SLICE = 4096;

/**
 * `previousText`: the text `previous` was read from, as the daemon holds
 * it. With it (and where each of its rules was: itemSpansOf), the thread
 * sends a rule whose text is the same at the same place as KEPT, and the
 * running rule is taken without a copy crossing or a comparison.
 */
export function parseConfigOffLoop(bytes: Uint8Array, file: string, previous?: Config, previousText?: HeldText): Promise<Config> {
  const spans = previous === undefined ? undefined : itemSpansOf(previous);
  const prev: PreviousText | undefined = spans === undefined || previousText === undefined ? undefined : { held: previousText, spans };
  // The running config, until the answer; no closure here names `previous` itself. The thread's
  // listeners live until it has exited (tens of ms after terminate()), and a collection meanwhile
  // kept the config a reload replaced (test/reload-collect.test.ts).
  const running: { config?: Config } = { config: previous };
  // Made here, not in the promise's executor: the closures below would keep `prev` (the running file's
  // text, the running rules' places) as long as the thread's listeners, past the answer.
  let worker: Worker;
  try {
    worker = new Worker(parseWorkerUrl(), { workerData: { bytes, file, ...(prev === undefined ? {} : { previous: prev }) } });
  } catch (e) {
    return Promise.reject(e);
  }
  return new Promise((resolve, reject) => {
    let head: Omit<Config, 'policies' | 'localsids' | 'sessions'> | undefined;
    const lists: Record<Section, unknown[]> = { policies: [], localsids: [], sessions: [] };
    let keyMaps: [RowKeyedMap<unknown>, RowKeyedMap<unknown>] | undefined;
    let indexed = false;
    let done = false;
    const indexes: Record<Section, { byKey: Map<string, unknown>; names: Map<string, string> }> = {
      policies: { byKey: new Map(), names: new ShardedMap() },
      localsids: { byKey: new Map(), names: new ShardedMap() },
      sessions: { byKey: new Map(), names: new ShardedMap() },
    };
    const shared = new PrefixPool();
    let kept = 0;
    let crossed = 0;
    let settled = false;
    const settle = (f: () => void): void => {
      if (settled) return;
      settled = true;
      running.config = undefined;
      worker.off('message', onMessage);
      f();
      void worker.terminate();
    };
    const onMessage = (m: FromParser): void => {
      if (settled) return;
      switch (m.t) {
        case 'head':
          head = m.config;
          worker.postMessage({ t: 'next' });
          break;
        case 'rules': {
          const list = lists[m.section];
          const { byKey, names } = indexes[m.section];
          const was = (running.config?.[m.section] ?? []) as readonly Rule[];
          for (let i = 0; i < m.rules.length; i++) {
            const old = was[list.length];
            const sent = m.rules[i];
            if (sent === KEPT && old === undefined) {
              settle(() => reject(new Error(`the config parser's thread kept ${m.section}[${list.length}], which the running config does not have`)));
              return;
            }
            const fresh = sent === KEPT ? undefined : (sent as Rule);
            if (fresh !== undefined) crossed++;
            // The running rule where its text is the same (KEPT), or where the file still says the same at
            // the same place (its key is the same then).
            const r = fresh === undefined ? old! : old !== undefined && old.where === fresh.where && sameData(old, fresh) ? old : fresh;
            // A fresh rule keeps the message's key text (a kept local SID holds its own already).
            let k: string | undefined;
            if (r === fresh) {
              k = m.keys[i]!;
              if (m.section !== 'localsids') shareSharedPrefixes(r as Policy | Session, shared);
              seedRuleKey(r as never, k);
            } else {
              kept++;
            }
            list.push(r);
            // Sessions and policies are indexed by their key bytes once all are in (ruleKeyMap); a kept
            // rule's key text is made only for the maps that hold it (a row keeps none: made, a million
            // texts were held here again after a reload).
            if (m.section === 'localsids' || r.name !== undefined) {
              k ??= SECTION_KEY[m.section](r as never);
              if (m.section === 'localsids') byKey.set(k, r);
              if (r.name !== undefined) names.set(r.name, k);
            }
          }
          // The next piece in a later turn: reads are answered between the pieces.
          setImmediate(() => {
            if (!settled) worker.postMessage({ t: 'next' });
          });
          break;
        }
        case 'done':
          // The sessions' and policies' index, KEY_MAP_SLICE rules a turn, before the answer (the thread
          // may exit meanwhile: it has said all).
          done = true;
          if (!indexed) {
            if (keyMaps === undefined) {
              try {
                keyMaps = [ruleKeyMap('policies', lists.policies, false), ruleKeyMap('sessions', lists.sessions, false)];
              } catch (e) {
                settle(() => reject(e));
                return;
              }
            }
            try {
              indexed = keyMaps[0].fill(KEY_MAP_SLICE) && keyMaps[1].fill(KEY_MAP_SLICE);
            } catch (e) {
              // The thread checked the keys: a repeat here is a fault of ours.
              settle(() => reject(e instanceof RepeatedRowKey ? new Error(`the config parser's thread sent two rules with one key: ${e.message}`) : e));
              return;
            }
            setImmediate(() => onMessage(m));
            return;
          }
          // An empty list keeps its (empty) Map, as the file's checks do.
          if (lists.policies.length > 0) indexes.policies.byKey = keyMaps![0];
          if (lists.sessions.length > 0) indexes.sessions.byKey = keyMaps![1];
          settle(() => {
            if (head === undefined) return reject(new Error("the config parser's thread answered without the file's sections"));
            const config: Config = {
              ...head,
              policies: lists.policies as Policy[],
              localsids: lists.localsids as LocalSid[],
              sessions: lists.sessions as Session[],
            };
            for (const s of ['policies', 'localsids', 'sessions'] as const) keepRuleIndex(lists[s] as never[], indexes[s] as never);
            counts.set(config, { kept, crossed });
            if (m.spans !== undefined) keepItemSpans(config, m.spans);
            if (m.block === true) markReadByBlockReader(config);
            if (m.deflated !== undefined) deflatedFiles.set(config, Buffer.from(m.deflated.buffer, m.deflated.byteOffset, m.deflated.byteLength));
            resolve(config);
          });
          break;
        case 'refused':
          settle(() => reject(new ConfigError(m.file, m.path, m.reason, m.line)));
          break;
        case 'failed':
          settle(() => reject(new Error(`the config parser's thread failed: ${m.message}`)));
          break;
      }
    };
    worker.on('message', onMessage);
    // Once 'done' came every rule is in: an error or an exit of the thread meanwhile (the index is
    // still being built) does not throw the parse away.
    worker.on('error', (e) => done || settle(() => reject(e)));
    worker.on('exit', (code) => done || settle(() => reject(new Error(`the config parser's thread exited (code ${code}) before it answered`))));
  });
}
