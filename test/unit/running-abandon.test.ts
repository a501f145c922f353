/**
 * `mup config show` whose client goes away: the running config's thread is
 * stopped, not left building (13-18 s of a core at 131,072 rules, with the
 * next show waiting behind it in the one-build queue).
 */
import { describe, expect, it } from 'vitest';
import { RunningConfigAbandoned, runningConfigOffLoop, runningConfigThreads, type CompactSection } from '../../src/config/running-async.js';

const RULES = 3000;
const text = ['policies:', ...Array.from({ length: RULES }, (_, i) => `  - { match: 10.${i >> 8}.${i & 255}.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }`), ''].join('\n');
const sections: CompactSection[] = [{ section: 'policies', order: Int32Array.from({ length: RULES }, (_, i) => i), rules: [] }];

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

describe('the running config built on a thread, its caller gone', () => {
  it('stops the thread when the signal aborts, and rejects once the thread has exited', async () => {
    const before = runningConfigThreads();
    const wanted = new AbortController();
    const built = runningConfigOffLoop({ text }, sections, { origins: true, asJsonString: false, signal: wanted.signal });
    // The thread starts once the rules are written for it (wireSections, a turn or more).
    await until(() => runningConfigThreads().live === before.live + 1, 'the thread to start');
    wanted.abort();
    await expect(built).rejects.toBeInstanceOf(RunningConfigAbandoned);
    // Before: the signal was not looked at; the build ran to its end and resolved with the YAML.
    expect(runningConfigThreads()).toEqual({ live: before.live, abandoned: before.abandoned + 1 });
  });

  it('starts no thread for a signal aborted while the rules were written for it', async () => {
    const before = runningConfigThreads();
    const wanted = new AbortController();
    const api = Array.from({ length: 20_000 }, (_, i) => ({ key: `k${i}`, json: { name: `a${i}`, match: `10.${i >> 8}.${i & 255}.0/24` }, origin: 'api' as const }));
    const many: CompactSection[] = [{ section: 'policies', order: Int32Array.from({ length: api.length }, (_, i) => -1 - i), rules: api }];
    const built = runningConfigOffLoop({ text }, many, { origins: true, asJsonString: false, signal: wanted.signal });
    wanted.abort();
    await expect(built).rejects.toBeInstanceOf(RunningConfigAbandoned);
    expect(runningConfigThreads()).toEqual({ live: before.live, abandoned: before.abandoned + 1 });
  });

  it('starts no thread for a signal aborted already', async () => {
    const before = runningConfigThreads();
    await expect(runningConfigOffLoop({ text }, sections, { origins: true, asJsonString: false, signal: AbortSignal.abort() })).rejects.toBeInstanceOf(RunningConfigAbandoned);
    expect(runningConfigThreads()).toEqual(before);
  });

  it('builds the whole YAML when nothing aborts, and the thread goes', async () => {
    const before = runningConfigThreads();
    const wanted = new AbortController();
    const yaml = (await runningConfigOffLoop({ text }, sections, { origins: true, asJsonString: false, signal: wanted.signal })).toString('utf8');
    expect(yaml.match(/origin: config/g)).toHaveLength(RULES);
    wanted.abort(); // after the answer: nothing left to stop
    await until(() => runningConfigThreads().live === before.live, 'the thread to exit');
    expect(runningConfigThreads().abandoned).toBe(before.abandoned);
  });
});
