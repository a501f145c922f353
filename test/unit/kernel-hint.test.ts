/**
 * A lab or test step refused by a kernel without SRv6 routes names the
 * missing kernel option on the line a failed start prints (found on a
 * machine whose kernel lacked CONFIG_IPV6_SEG6_LWTUNNEL: `make demo` stopped
 * at "Error: lwt encapsulation type not supported.", which does not say
 * what to change). Asking the kernel the same question up front, as the
 * suites that need its SRv6 do, and the NOT RUN line `make test` prints
 * when they are skipped.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { listNamespaces } from '../../src/host/netns-sweep.js';
import { ASK_NETNS_PREFIX, explainKernelError, kernelSrv6 } from '../../src/host/kernel-srv6.js';

describe('explainKernelError', () => {
  it("names CONFIG_IPV6_SEG6_LWTUNNEL on the first line of iproute2's refusal of a seg6 or seg6local route", () => {
    // iproute2's own words, as `ip -batch` prints them with the failing line.
    const got = explainKernelError('Error: lwt encapsulation type not supported.\nCommand failed -:7\n');
    const [first, second] = got.split('\n');
    expect(first).toMatch(/^Error: lwt encapsulation type not supported\. \(this kernel has no SRv6 routes: .*CONFIG_IPV6_SEG6_LWTUNNEL/);
    expect(second).toBe('Command failed -:7');
  });
  it('adds it to the line that says it, wherever it is', () => {
    const [first, second] = explainKernelError('Warning: something else\nError: lwt encapsulation type not supported.').split('\n');
    expect(first).toBe('Warning: something else');
    expect(second).toMatch(/^Error: lwt encapsulation type not supported\. \(this kernel has no SRv6 routes: .*CONFIG_IPV6_SEG6_LWTUNNEL/);
  });
  it('leaves other errors as they are (trimmed)', () => {
    expect(explainKernelError('RTNETLINK answers: File exists\n')).toBe('RTNETLINK answers: File exists');
    expect(explainKernelError('Error: Unknown device type.')).toBe('Error: Unknown device type.');
  });
});

const isRoot = process.getuid?.() === 0;

describe.skipIf(!isRoot)('kernelSrv6: asking the kernel whether it takes SRv6 routes', () => {
  it('agrees with the kernel\'s own build config where it has one, and leaves no namespace behind', async () => {
    const answer = await kernelSrv6();
    expect(await kernelSrv6(), 'asked once per process').toBe(answer);
    expect((await listNamespaces()).filter((n) => n.startsWith(`${ASK_NETNS_PREFIX}${process.pid}-`))).toEqual([]);
    let config = '';
    try {
      config = gunzipSync(readFileSync('/proc/config.gz')).toString();
    } catch {
      // No /proc/config.gz: only the answer's shape can be checked.
    }
    const line = /^(CONFIG_IPV6_SEG6_LWTUNNEL=y|# CONFIG_IPV6_SEG6_LWTUNNEL is not set)$/m.exec(config)?.[1];
    if (line === 'CONFIG_IPV6_SEG6_LWTUNNEL=y') expect(answer).toEqual({ ok: true });
    else if (line !== undefined) {
      expect(answer).toMatchObject({ ok: false, why: 'missing' });
      expect((answer as { reason: string }).reason).toMatch(/lwt encapsulation type not supported.*CONFIG_IPV6_SEG6_LWTUNNEL/);
    } else if (!answer.ok) {
      // No config to compare with: a refusal names the kernel option; any other failure says what failed.
      expect(answer.reason).toMatch(answer.why === 'missing' ? /CONFIG_IPV6_SEG6_LWTUNNEL/ : /namespace|seg6 route/);
    }
  });
});

describe('test-summary.mjs: the closing lines of make test', () => {
  it('prints one NOT RUN line per reason, with the count and the files, and leaves them out of neither total', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mup-summary-'));
    try {
      const why = 'Error: lwt encapsulation type not supported. (this kernel has no SRv6 routes: ...)';
      const t = (fullName: string, status: string): object => ({ fullName, title: fullName, status, failureMessages: [] });
      const result = {
        success: true, numPassedTests: 1, numFailedTests: 0, numPendingTests: 3, numTodoTests: 0,
        testResults: [
          { name: join(process.cwd(), 'test/a.test.ts'), status: 'passed', assertionResults: [t(`lab [NOT RUN: ${why}] one`, 'skipped'), t(`lab [NOT RUN: ${why}] two`, 'skipped'), t('plain', 'passed')] },
          { name: join(process.cwd(), 'test/b.test.ts'), status: 'passed', assertionResults: [t(`daemon [NOT RUN: ${why}] three`, 'skipped')] },
        ],
      };
      writeFileSync(join(dir, 'r.json'), JSON.stringify(result));
      const out = execFileSync('node', ['scripts/test-summary.mjs', join(dir, 'r.json')]).toString().trim().split('\n');
      expect(out).toEqual([`NOT RUN: 3 tests in 2 files (test/a.test.ts, test/b.test.ts): ${why}`, 'tests: 1 passed, 0 failed, 3 skipped']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it('sums the runs it is given (make test runs two) and counts a run that wrote no result as a failure', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mup-summary-'));
    try {
      const t = (title: string, status: string, failureMessages: string[] = []): object => ({ fullName: title, title, status, failureMessages });
      const unit = {
        success: true, numPassedTests: 2, numFailedTests: 0, numPendingTests: 1, numTodoTests: 0,
        testResults: [{ name: join(process.cwd(), 'test/unit/u.test.ts'), status: 'passed', assertionResults: [t('a', 'passed'), t('b', 'passed'), t('c', 'skipped')] }],
      };
      const system = {
        success: false, numPassedTests: 1, numFailedTests: 1, numPendingTests: 0, numTodoTests: 0,
        testResults: [{ name: join(process.cwd(), 'test/s.test.ts'), status: 'failed', assertionResults: [t('d', 'passed'), t('e', 'failed', ['AssertionError: expected 1 to be 2'])] }],
      };
      writeFileSync(join(dir, 'unit.json'), JSON.stringify(unit));
      writeFileSync(join(dir, 'system.json'), JSON.stringify(system));
      const run = (...files: string[]): string[] =>
        execFileSync('node', ['scripts/test-summary.mjs', ...files.map((f) => join(dir, f))]).toString().trim().split('\n');
      expect(run('unit.json', 'system.json')).toEqual(['FAILED test/s.test.ts > e: AssertionError: expected 1 to be 2', 'tests: 3 passed, 1 failed, 1 skipped']);
      const out = run('gone.json', 'unit.json');
      expect(out).toHaveLength(2);
      expect(out[0]).toMatch(/^FAILED no vitest result in .*gone\.json: ENOENT/);
      expect(out[1]).toBe('tests: 2 passed, 1 failed, 1 skipped');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it('names a test that ran past its timeout as timed out (vitest reports it as "Error: STACK_TRACE_ERROR")', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mup-summary-'));
    try {
      // What vitest 3's JSON reporter wrote for a test past its timeout in CI (issue 19, session 40).
      const stack = 'Error: STACK_TRACE_ERROR\n    at /check/test/change-memory.test.ts:137:3';
      const t = (title: string, status: string, failureMessages: string[] = []): object => ({ fullName: title, title, status, failureMessages });
      const result = {
        success: false, numPassedTests: 0, numFailedTests: 1, numPendingTests: 0, numTodoTests: 0,
        testResults: [{ name: join(process.cwd(), 'test/s.test.ts'), status: 'failed', assertionResults: [t('slow', 'failed', [stack])] }],
      };
      writeFileSync(join(dir, 'r.json'), JSON.stringify(result));
      const out = execFileSync('node', ['scripts/test-summary.mjs', join(dir, 'r.json')]).toString().trim().split('\n');
      expect(out[0]).toBe('FAILED test/s.test.ts > slow: timed out (past its timeout; vitest\'s JSON report says only "Error: STACK_TRACE_ERROR")');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
