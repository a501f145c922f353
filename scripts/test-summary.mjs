// Print vitest's JSON result as plain closing lines: each failed test (file, name, first line of its
// error), then "tests: N passed, N failed, N skipped". The failures come last so that a CI log cut to
// its tail still names them.
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

const file = process.argv[2];
let r;
try {
  r = JSON.parse(readFileSync(file, 'utf8'));
} catch (e) {
  console.log(`tests: 0 passed, 1 failed (no vitest result in ${file}: ${e.message})`);
  process.exit(1);
}
const plain = (s) => String(s).replace(/\x1b\[[0-9;]*m/g, '');
for (const f of r.testResults ?? []) {
  const where = relative(process.cwd(), f.name ?? '');
  const failed = (f.assertionResults ?? []).filter((a) => a.status === 'failed');
  if (failed.length === 0 && f.status === 'failed') {
    console.log(`FAILED ${where}: ${plain(f.message ?? 'the file failed outside its tests').split('\n')[0]}`);
  }
  for (const a of failed) {
    const msg = plain((a.failureMessages ?? [])[0] ?? '').split('\n').find((l) => l.trim() !== '') ?? '';
    console.log(`FAILED ${where} > ${a.fullName ?? a.title}: ${msg.slice(0, 300)}`);
  }
}
if (r.success === false && (r.numFailedTests ?? 0) === 0) {
  // Every test passed but vitest failed the run: an error outside the tests, e.g. an unhandled
  // rejection or "[vitest-worker]: Timeout calling onTaskUpdate" (a worker or the runner starved
  // past vitest's fixed 60 s RPC timeout on a loaded host). Vitest printed it above "Test Files".
  console.log('FAILED outside the tests: see "Unhandled Errors" above the totals');
}
const skipped = (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0);
console.log(`tests: ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${skipped} skipped`);
