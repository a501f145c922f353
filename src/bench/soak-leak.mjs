/**
 * Test only (`npm run soak -- --leak-kb-per-min N`): loaded into the daemon
 * with `node --import` before bin/mup.js, it keeps N/60 KB every second,
 * written so that the pages are resident. The soak's RSS verdict must call
 * such a run growing; a verdict that cannot proves nothing. The daemon's
 * own code is not touched.
 */
const kbPerMin = Number(process.env.MUP_SOAK_LEAK_KB_PER_MIN ?? 0);
if (Number.isFinite(kbPerMin) && kbPerMin > 0) {
  const kept = [];
  const bytes = Math.max(1, Math.round((kbPerMin * 1024) / 60));
  const t = setInterval(() => kept.push(Buffer.alloc(bytes, 0xa5)), 1000);
  t.unref();
}
