// Print vitest's JSON results (one file per run: `make test` runs the parallel project, then the serial one) as
// plain closing lines: each failed test (file, name, first line of its
// error), the tests not run for want of something the machine lacks, then "tests: N passed, N failed,
// N skipped". The failures come last so that a CI log cut to
// its tail still names them.
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

if (process.argv.length < 3) {
  console.log('usage: node scripts/test-summary.mjs VITEST.json...');
  process.exit(2);
}
// A run that wrote no result (vitest crashed, or was killed) counts as one failed test, named last.
const results = [];
const missing = [];
for (const file of process.argv.slice(2)) {
  try {
    results.push(JSON.parse(readFileSync(file, 'utf8')));
  } catch (e) {
    missing.push(`FAILED no vitest result in ${file}: ${e.message}`);
  }
}
const sum = (k) => results.reduce((a, x) => a + (x[k] ?? 0), 0);
const r = {
  testResults: results.flatMap((x) => x.testResults ?? []),
  success: results.every((x) => x.success !== false),
  numPassedTests: sum('numPassedTests'),
  numFailedTests: sum('numFailedTests') + missing.length,
  numPendingTests: sum('numPendingTests'),
  numTodoTests: sum('numTodoTests'),
};
const plain = (s) => String(s).replace(/\x1b\[[0-9;]*m/g, '');
for (const f of r.testResults ?? []) {
  const where = relative(process.cwd(), f.name ?? '');
  const failed = (f.assertionResults ?? []).filter((a) => a.status === 'failed');
  if (failed.length === 0 && f.status === 'failed') {
    console.log(`FAILED ${where}: ${plain(f.message ?? 'the file failed outside its tests').split('\n')[0]}`);
  }
  for (const a of failed) {
    let msg = plain((a.failureMessages ?? [])[0] ?? '').split('\n').find((l) => l.trim() !== '') ?? '';
    // A timeout: vitest's JSON report keeps only the stack of its timeout error, whose first line is that
    // of the placeholder it was made from, not the "Test timed out in N ms" its own log prints.
    if (msg.trim() === 'Error: STACK_TRACE_ERROR') msg = 'timed out (past its timeout; vitest\'s JSON report says only "Error: STACK_TRACE_ERROR")';
    console.log(`FAILED ${where} > ${a.fullName ?? a.title}: ${msg.slice(0, 300)}`);
  }
}
if (r.success === false && (r.numFailedTests ?? 0) === 0) {
  // Every test passed but vitest failed the run: an error outside the tests, e.g. an unhandled
  // rejection or "[vitest-worker]: Timeout calling onTaskUpdate" (a worker or the runner starved
  // past vitest's fixed 60 s RPC timeout on a loaded host). Vitest printed it above "Test Files".
  console.log('FAILED outside the tests: see "Unhandled Errors" above the totals');
}
// Suites skipped for want of something this machine lacks carry "[NOT RUN: reason]" in their title
// (test/helpers/kernel-srv6.ts, test/helpers/live-frames.ts): one line per reason, with the count and the files, so a kernel that
// cannot run them is plain in the log and not folded into the plain skips.
const notRun = new Map();
for (const f of r.testResults ?? []) {
  for (const a of f.assertionResults ?? []) {
    const m = /\[NOT RUN: (.*?)\]/.exec(a.fullName ?? '');
    if (m === null || a.status === 'passed' || a.status === 'failed') continue;
    const e = notRun.get(m[1]) ?? { tests: 0, files: new Set() };
    e.tests += 1;
    e.files.add(relative(process.cwd(), f.name ?? ''));
    notRun.set(m[1], e);
  }
}
for (const [reason, e] of notRun) {
  const n = (k, what) => `${k} ${what}${k === 1 ? '' : 's'}`;
  console.log(`NOT RUN: ${n(e.tests, 'test')} in ${n(e.files.size, 'file')} (${[...e.files].join(', ')}): ${reason}`);
}
for (const line of missing) console.log(line);
const skipped = (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0);
console.log(`tests: ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${skipped} skipped`);
