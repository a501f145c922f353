/**
 * The full collection after a reload (releaseMemorySoon) is a pause of
 * 70-150 ms with 131,072 rules: it waits for a quiet spell of the API
 * (QUIET_MS without a request), and runs anyway MAX_WAIT_MS after it was
 * asked when no such spell comes (left to V8 under steady requests, the
 * daemon grew to 790 MB in bench:daemon). Before, it ran a second after
 * the reload whatever came. A collection in a quiet second compacts the
 * heap (longer: 150-200 ms); a forced one is V8's incremental marking (no
 * long pause; it was a plain full collection of 51-57 ms), and the
 * compacting one follows in the next quiet second.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeServer } from '../../src/daemon/api.js';
import { BATCH_GAP_MS, batchEnded, batchStarted, collectAfterBatches, MAX_WAIT_MS, QUIET_MS, releaseCounts, releaseMemorySoon, releaseMemoryWhenQuiet, requestEnded, requestStarted, requestsInFlight } from '../../src/daemon/memory.js';

/** The fake clock of every test, each well past the one before (its "at most once every 2 s", its last request). */
let clock = Date.now();
function fakeClockPerTest(): void {
  beforeEach(() => {
    vi.useFakeTimers();
    clock += 60_000;
    vi.setSystemTime(clock);
  });
  afterEach(() => vi.useRealTimers());
}

/** A request every 200 ms, each 100 ms in flight, for `ms` of the fake clock: never a quiet second. */
function busy(ms: number): void {
  for (let t = 0; t < ms; t += 200) {
    requestStarted();
    vi.advanceTimersByTime(100);
    requestEnded();
    vi.advanceTimersByTime(100);
  }
}

type Counts = ReturnType<typeof releaseCounts>;

/** One collection in a quiet second more than `c`: it compacts the heap (the native addon is built for the tests). */
const quietOneMore = (c: Counts): Counts => ({ ...c, quiet: c.quiet + 1, compacted: c.compacted + 1 });

/**
 * After a forced collection: the compacting one follows in the next quiet
 * second, never between requests.
 */
function compactsWhenQuiet(afterForced: Counts): void {
  busy(3 * MAX_WAIT_MS);
  expect(releaseCounts(), 'requests all along: no second collection').toEqual(afterForced);
  vi.advanceTimersByTime(QUIET_MS + 2100);
  expect(releaseCounts()).toEqual(quietOneMore(afterForced));
}

/**
 * A forced ask now, under steady requests: no collection until MAX_WAIT_MS,
 * then one forced, its note called once: V8's incremental marking, not a
 * full collection's pause between requests (the native addon is built for
 * the tests); then the compacting one once quiet.
 */
function forcedAtMaxWait(before: Counts, notYet: string): void {
  let forcedSeen = 0;
  releaseMemorySoon(() => forcedSeen++);
  busy(MAX_WAIT_MS - 600);
  expect(releaseCounts(), notYet).toEqual(before);
  busy(1200);
  const forced = { ...before, forced: before.forced + 1, incremental: before.incremental + 1 };
  expect(releaseCounts()).toEqual(forced);
  expect(forcedSeen).toBe(1);
  // glibc's free pages go back once that collection ends (or 10 s on, if none is seen): within compactsWhenQuiet's requests.
  compactsWhenQuiet({ ...forced, trimmedAfterIncremental: forced.trimmedAfterIncremental + 1 });
}

describe('releaseMemorySoon', () => {
  fakeClockPerTest();

  it('waits while a request is in flight, then for a quiet spell after it', () => {
    const before = releaseCounts();
    requestStarted();
    releaseMemorySoon();
    vi.advanceTimersByTime(3000);
    expect(releaseCounts(), 'a request in flight: not yet').toEqual(before);
    requestEnded();
    vi.advanceTimersByTime(QUIET_MS / 2);
    expect(releaseCounts(), 'quiet for half the spell: not yet').toEqual(before);
    vi.advanceTimersByTime(QUIET_MS);
    expect(releaseCounts()).toEqual(quietOneMore(before));
  });

  it('runs a second after it is asked when nothing comes', () => {
    vi.advanceTimersByTime(5000);
    const before = releaseCounts();
    releaseMemorySoon();
    vi.advanceTimersByTime(1100);
    expect(releaseCounts()).toEqual(quietOneMore(before));
  });

  it('runs anyway MAX_WAIT_MS after it was asked when requests never leave a quiet second', () => {
    vi.advanceTimersByTime(5000);
    const before = releaseCounts();
    forcedAtMaxWait(before, 'not before MAX_WAIT_MS');
    // And a later ask starts again.
    const then = releaseCounts();
    releaseMemorySoon();
    vi.advanceTimersByTime(2100);
    expect(releaseCounts()).toEqual(quietOneMore(then));
  });
});

describe('releaseMemoryWhenQuiet (after a large batch)', () => {
  fakeClockPerTest();

  it('never runs between requests, however long they keep coming; runs in the first quiet second', () => {
    const before = releaseCounts();
    releaseMemoryWhenQuiet();
    busy(4 * MAX_WAIT_MS);
    expect(releaseCounts(), 'requests all along: no collection, not even a forced one').toEqual(before);
    vi.advanceTimersByTime(QUIET_MS + 1100);
    expect(releaseCounts()).toEqual(quietOneMore(before));
  });

  it('a reload\'s ask joining it waits a second from that ask, like an ask of its own (found in review)', () => {
    // Before: the pending ask's next look, up to a second after it, ran the collection a moment after the
    // reload's ask, while the reload still held the rule set it replaced.
    const before = releaseCounts();
    releaseMemoryWhenQuiet();
    vi.advanceTimersByTime(900);
    releaseMemorySoon();
    vi.advanceTimersByTime(150);
    expect(releaseCounts(), '150 ms after the reload\'s ask').toEqual(before);
    vi.advanceTimersByTime(1000);
    expect(releaseCounts()).toEqual(quietOneMore(before));
  });

  it('a second forced ask late in the wait of a first is not forced within a second of its own', () => {
    const before = releaseCounts();
    releaseMemorySoon();
    busy(MAX_WAIT_MS - 400);
    releaseMemorySoon();
    busy(600);
    expect(releaseCounts(), 'MAX_WAIT_MS after the first ask, 600 ms after the second').toEqual(before);
    busy(600);
    const forced = { ...before, forced: before.forced + 1, incremental: before.incremental + 1 };
    expect(releaseCounts()).toEqual(forced);
    compactsWhenQuiet({ ...forced, trimmedAfterIncremental: forced.trimmedAfterIncremental + 1 });
  });

  it('a reload\'s ask while it waits is still forced MAX_WAIT_MS after that ask', () => {
    const before = releaseCounts();
    releaseMemoryWhenQuiet();
    busy(3 * MAX_WAIT_MS);
    forcedAtMaxWait(before, 'not before MAX_WAIT_MS from the forced ask');
  });
});

describe('collectAfterBatches (after a run of large batches)', () => {
  fakeClockPerTest();
  /** V8's incremental marking started once more than in `c`, for a run of batches. */
  const oneMore = (c: Counts): Counts => ({ ...c, afterBatches: c.afterBatches + 1, incremental: c.incremental + 1 });

  it('starts V8\'s incremental marking BATCH_GAP_MS after the last batch of a run, under requests too; once for the run', () => {
    // Before, a batch's garbage waited for a quiet second: under single requests after it, 60-80 MB for good.
    const before = releaseCounts();
    collectAfterBatches();
    // The next batch of the run within the gap: none between them (marking beside a batch slows it).
    vi.advanceTimersByTime(BATCH_GAP_MS - 50);
    collectAfterBatches();
    vi.advanceTimersByTime(BATCH_GAP_MS - 50);
    expect(releaseCounts(), 'within the gap after the second batch').toEqual(before);
    busy(200);
    expect(releaseCounts()).toEqual(oneMore(before));
    busy(3 * MAX_WAIT_MS);
    // glibc's free pages back when that collection ends (10 s on at the latest); nothing else started.
    expect(releaseCounts()).toEqual({ ...oneMore(before), trimmedAfterIncremental: before.trimmedAfterIncremental + 1 });
  });

  it('not while a batch is under way (its body still being read counts): when none is', () => {
    const before = releaseCounts();
    collectAfterBatches();
    // The next batch's request arrives within the gap; its body is read and parsed for longer than the gap.
    vi.advanceTimersByTime(BATCH_GAP_MS - 50);
    batchStarted();
    vi.advanceTimersByTime(5 * BATCH_GAP_MS);
    expect(releaseCounts(), 'a batch under way all along').toEqual(before);
    // A small batch ends (it does not ask): the next look finds none under way.
    batchEnded();
    vi.advanceTimersByTime(BATCH_GAP_MS);
    expect(releaseCounts()).toEqual(oneMore(before));
    vi.advanceTimersByTime(10_000);
  });
});

describe('the API server counts its requests in flight', () => {
  it('pipelined requests still queued when their connection closes are ended too (found in review: the count stayed up for good)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mup-inflight-'));
    const path = join(dir, 'sock');
    // Answers each request after 300 ms: the pipelined ones queue behind the first.
    const server = makeServer((_req, res) => void setTimeout(() => res.end('ok\n'), 300));
    try {
      await new Promise<void>((resolve) => server.listen(path, resolve));
      const before = requestsInFlight();
      const c = connect(path);
      await new Promise<void>((resolve) => c.once('connect', resolve));
      c.write('GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n');
      await new Promise((r) => setTimeout(r, 100));
      expect(requestsInFlight() - before, 'the three pipelined requests are in flight').toBeGreaterThanOrEqual(1);
      c.destroy();
      await new Promise((r) => setTimeout(r, 700));
      expect(requestsInFlight()).toBe(before);
    } finally {
      await new Promise((resolve) => server.close(resolve));
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
