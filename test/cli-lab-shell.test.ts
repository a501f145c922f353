/**
 * `mup lab shell NODE -- CMD` ends with CMD's own exit status, as a shell
 * would: every failure was exit 2 (the CLI's usage error), so a script could
 * not tell ping's 1 from a mistyped command line (found in review, session
 * 43). A namespace of the lab's name, made and removed by this test, stands
 * for the lab (the command needs only that namespace to exist).
 */
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../src/cli/main.js';

const isRoot = process.getuid?.() === 0;
const prefix = `cls${process.pid % 100000}`;
const ns = `${prefix}-ue`;

async function mup(...args: string[]): Promise<{ code: number; err: string }> {
  const err: string[] = [];
  const code = await main(['node', 'mup', ...args], { out: () => undefined, err: (s) => err.push(s) });
  return { code, err: err.join('') };
}

describe.skipIf(!isRoot)('mup lab shell passes the command\'s exit status on', () => {
  beforeAll(() => {
    execFileSync('ip', ['netns', 'add', ns]);
  });
  afterAll(() => {
    execFileSync('ip', ['netns', 'del', ns]);
  });

  it('0, 1, 7 and a signal (128 + its number)', async () => {
    expect((await mup('lab', 'shell', 'ue', '--prefix', prefix, '--', 'true')).code).toBe(0);
    const one = await mup('lab', 'shell', 'ue', '--prefix', prefix, '--', 'false');
    expect(one.code).toBe(1);
    expect(one.err).toMatch(new RegExp(`false in ${ns} exited with 1`));
    expect((await mup('lab', 'shell', 'ue', '--prefix', prefix, '--', 'sh', '-c', 'exit 7')).code).toBe(7);
    const killed = await mup('lab', 'shell', 'ue', '--prefix', prefix, '--', 'sh', '-c', 'kill -TERM $$');
    expect(killed.code).toBe(143);
  });

  it('a usage error is still 2', async () => {
    expect((await mup('lab', 'shell', 'nosuchnode', '--prefix', prefix, '--', 'true')).code).toBe(2);
  });
});
