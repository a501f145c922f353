/**
 * Loaded into the daemon with `node --import` before bin/mup.js by every
 * `npm run soak`; the daemon's own code is not touched.
 *
 * MUP_SOAK_GCLOG=FILE (always set by the soak): appends one JSON line at
 * the end of every major garbage collection (PerformanceObserver 'gc',
 * kind major: mark-sweep-compact), with process.memoryUsage() then and the
 * committed size of V8's heap spaces (new, old, code, large objects). The
 * soak's RSS verdict is judged on these post-GC troughs: the floor the
 * process really returns to, whatever the phase of the GC's sawtooth.
 *
 * MUP_SOAK_GC_EVERY_MS=N (`--gc-every`, 30 s by default): a full, non-incremental
 * collection every N ms of the process's life (V8's `gc()`, reached through
 * a new context after `--expose-gc` is set at run time). Its post-GC line is
 * marked `forced`. A process that only collects when V8 decides to may do so
 * once in a four-minute life (the young generation is capped at 8 MB); these
 * give the verdict a floor at fixed times, and a full collection leaves only
 * what is still referenced, so a leak shows in them and garbage does not.
 *
 * MUP_SOAK_MALLOC_TRIM=1 (`--malloc-trim on`, the default with `--gc-every`):
 * right after each forced collection, glibc's malloc_trim(0), which hands
 * the free pages inside malloc's arenas back to the kernel. Each thread that
 * mallocs (V8's compiler and GC threads, libuv's pool) gets an arena that
 * keeps the free memory of its busiest moment; which moment that was differs
 * from one process to the next, so without the trim the troughs carry a few
 * MB of free memory that says nothing about what the process holds. The
 * line of a trimmed trough also has the VmRSS read before the trim
 * (rssUntrimmedKb), and every line malloc's own count (mallinfo2: bytes in
 * use, and free bytes it keeps). A leak of malloc'd memory is in use, so
 * the trim cannot hide it.
 *
 * MUP_SOAK_LEAK_KB_PER_MIN=N (`--leak-kb-per-min N`): keeps N/60 KB every
 * second, written so that the pages are resident. The soak's RSS verdict
 * must call such a run growing; a verdict that cannot proves nothing.
 *
 * MUP_SOAK_MEMLOG=FILE (`--memory-log`): appends one JSON line every 5 s,
 * process.memoryUsage() with the pid, to tell a growing RSS apart: the JS
 * heap (heapUsed), memory held by JS objects outside it (external,
 * arrayBuffers), or native memory (rss minus all of these).
 *
 * MUP_SOAK_HEAPSNAP=DIR (`--heap-snapshots DIR`): a V8 heap snapshot at 90 s
 * of life and every 120 s after, DIR/<pid>-<s>.heapsnapshot, to diff which
 * objects accumulate (a snapshot stops the daemon for a moment).
 */
import { appendFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PerformanceObserver, constants, performance } from 'node:perf_hooks';
import { getHeapSpaceStatistics, setFlagsFromString, writeHeapSnapshot } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** VmRSS and its parts from /proc/self/status, KB. */
const statusKb = () => {
  const st = readFileSync('/proc/self/status', 'utf8');
  const kb = (k) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(st)?.[1] ?? NaN);
  return { rss: kb('VmRSS'), anon: kb('RssAnon'), file: kb('RssFile'), shmem: kb('RssShmem') };
};

/** V8's heap spaces as committed (space_size), KB: which space a growing heapTotal is. */
const spacesKb = () => {
  const out = {};
  for (const sp of getHeapSpaceStatistics()) {
    const name = { new_space: 'newSpaceKb', old_space: 'oldSpaceKb', code_space: 'codeSpaceKb', large_object_space: 'largeObjectSpaceKb' }[sp.space_name];
    if (name !== undefined) out[name] = Math.round(sp.space_size / 1024);
  }
  return out;
};

/** glibc's malloc statistics and malloc_trim through koffi (the daemon loads koffi too); undefined where there is no glibc. */
const malloc = await (async () => {
  const gclogSet = (process.env.MUP_SOAK_GCLOG ?? '') !== '';
  const trim = process.env.MUP_SOAK_MALLOC_TRIM === '1';
  if (!gclogSet && !trim) return undefined;
  try {
    const { default: koffi } = await import('koffi');
    const libc = koffi.load('libc.so.6');
    const size = 'size_t';
    const info = libc.func('mallinfo2', koffi.struct('soak_mallinfo2', {
      arena: size, ordblks: size, smblks: size, hblks: size, hblkhd: size, usmblks: size, fsmblks: size, uordblks: size, fordblks: size, keepcost: size,
    }), []);
    const mallocTrim = libc.func('malloc_trim', 'int', ['size_t']);
    return {
      trim,
      // In use: small and large chunks handed out (uordblks) plus chunks mmapped on their own (hblkhd); free: kept in the arenas (fordblks).
      info: () => {
        const m = info();
        return { inUseKb: Math.round((Number(m.uordblks) + Number(m.hblkhd)) / 1024), freeKb: Math.round(Number(m.fordblks) / 1024) };
      },
      trimNow: () => mallocTrim(0),
    };
  } catch (e) {
    // The trim changes what is judged: without it the soak must not pretend it ran.
    if (trim) throw new Error(`soak-preload: MUP_SOAK_MALLOC_TRIM=1 but glibc's malloc_trim cannot be reached through koffi: ${e.message}`);
    return undefined;
  }
})();
/**
 * Read in the same turn as a forced collection and its trim, for the post-GC line that follows (the observer
 * runs later, after other callbacks may have allocated): VmRSS before the trim, /proc/self/status and
 * process.memoryUsage() after it.
 */
let trimmed;

const kbPerMin = Number(process.env.MUP_SOAK_LEAK_KB_PER_MIN ?? 0);
if (Number.isFinite(kbPerMin) && kbPerMin > 0) {
  const kept = [];
  const bytes = Math.max(1, Math.round((kbPerMin * 1024) / 60));
  setInterval(() => kept.push(Buffer.alloc(bytes, 0xa5)), 1000).unref();
}

const gclog = process.env.MUP_SOAK_GCLOG;
if (gclog !== undefined && gclog !== '') {
  // lifeMs: ms since this process started (performance's time origin); wallMs to put it on the soak's clock.
  const obs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      if (e.detail?.kind !== constants.NODE_PERFORMANCE_GC_MAJOR) continue;
      const forced = (e.detail.flags & constants.NODE_PERFORMANCE_GC_FLAGS_FORCED) !== 0;
      const t = forced ? trimmed : undefined;
      if (forced) trimmed = undefined;
      try {
        const m = t?.m ?? process.memoryUsage();
        // VmRSS = RssAnon (heaps, malloc, stacks: what a leak grows) + RssFile (pages of node, the libraries and
        // other mapped files, paged in as code runs for the first time) + RssShmem.
        const kb = t?.kb ?? statusKb();
        const before = t?.beforeKb;
        const mi = t?.mi ?? malloc?.info();
        appendFileSync(gclog, `${JSON.stringify({
          rssAnonKb: kb.anon, rssFileKb: kb.file, rssShmemKb: kb.shmem,
          pid: process.pid, lifeMs: Math.round(performance.now()), wallMs: Date.now(), gcMs: Math.round(e.duration * 10) / 10,
          forced, ...(before === undefined ? {} : { rssUntrimmedKb: before }),
          ...(mi === undefined ? {} : { mallocInUseKb: mi.inUseKb, mallocFreeKb: mi.freeKb }),
          rss: t === undefined ? m.rss : kb.rss * 1024, heapTotal: m.heapTotal, heapUsed: m.heapUsed, external: m.external, arrayBuffers: m.arrayBuffers,
          ...(t?.spaces ?? spacesKb()),
        })}\n`);
      } catch {
        // the soak's directory is gone: it is over
      }
    }
  });
  obs.observe({ entryTypes: ['gc'] });
}

const gcEvery = Number(process.env.MUP_SOAK_GC_EVERY_MS ?? 0);
if (Number.isFinite(gcEvery) && gcEvery > 0) {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc');
  setInterval(() => {
    gc();
    if (malloc?.trim === true) {
      const beforeKb = statusKb().rss;
      malloc.trimNow();
      trimmed = { beforeKb, kb: statusKb(), m: process.memoryUsage(), mi: malloc.info(), spaces: spacesKb() };
    }
  }, gcEvery).unref();
}

const memlog = process.env.MUP_SOAK_MEMLOG;
if (memlog !== undefined && memlog !== '') {
  const t0 = Date.now();
  setInterval(() => {
    const m = process.memoryUsage();
    try {
      appendFileSync(memlog, `${JSON.stringify({ pid: process.pid, lifeMs: Date.now() - t0, rss: m.rss, heapTotal: m.heapTotal, heapUsed: m.heapUsed, external: m.external, arrayBuffers: m.arrayBuffers, ...spacesKb() })}\n`);
    } catch {
      // the soak's directory is gone: it is over
    }
  }, 5000).unref();
}

const snapDir = process.env.MUP_SOAK_HEAPSNAP;
if (snapDir !== undefined && snapDir !== '') {
  const t0 = Date.now();
  const snap = () => {
    try {
      writeHeapSnapshot(join(snapDir, `${process.pid}-${Math.round((Date.now() - t0) / 1000)}.heapsnapshot`));
    } catch {
      // the directory is gone
    }
  };
  setTimeout(() => {
    snap();
    setInterval(snap, 120_000).unref();
  }, 90_000).unref();
}
