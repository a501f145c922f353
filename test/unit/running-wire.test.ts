/**
 * The running config's rules as they cross to its thread
 * (src/config/running-async.ts wireSections / unwireSections): JSON lines in
 * shared memory, written in slices. As objects, the Worker's constructor
 * cloned all of them in one turn (640 ms for the 524,288 API rules of a
 * `mup config save`, bench:daemon --sessions 262144, session 55).
 */
import { describe, expect, it } from 'vitest';
import { unwireSections, wireSections, type CompactSection } from '../../src/config/running-async.js';
import type { RunningRule } from '../../src/config/running.js';

const rule = (i: number, over: Partial<RunningRule> = {}): RunningRule => ({ key: `10.0.${i}.0/24`, json: { name: `p${i}`, match: `10.0.${i}.0/24`, hop_limit: 64, segments: ['2001:db8::1'] }, origin: 'api', ...over });

const CASES: { name: string; rules: RunningRule[] }[] = [
  { name: 'no rules', rules: [] },
  { name: 'one rule', rules: [rule(1)] },
  { name: 'a rule that replaces a file entry (replacesIndex)', rules: [rule(2, { replacesIndex: 7 })] },
  { name: 'a config rule not found in the file (fileIndex undefined)', rules: [rule(3, { origin: 'config', fileIndex: undefined })] },
  { name: 'names with a newline, a quote, a backslash and text outside the BMP', rules: [rule(4, { json: { name: 'a\nb"c\\d 🛰 é' } })] },
  { name: 'many rules', rules: Array.from({ length: 3000 }, (_, i) => rule(i)) },
];

describe('the running rules as they cross to the thread', () => {
  it.each(CASES)('$name: read back as they were, in order', async ({ rules }) => {
    const sections: CompactSection[] = [
      { section: 'policies', order: Int32Array.from(rules, (_, i) => -1 - i), rules },
      { section: 'localsids', order: Int32Array.from([0, 1]), rules: [] },
    ];
    const wire = await wireSections(sections);
    if (wire === 'aborted') throw new Error('aborted with no signal');
    expect(wire.every((w) => w.rules.buffer instanceof SharedArrayBuffer)).toBe(true);
    const back = unwireSections(wire);
    expect(back.map((s) => s.section)).toEqual(['policies', 'localsids']);
    expect(back[0]!.order).toEqual(sections[0]!.order);
    expect(back[0]!.rules).toEqual(JSON.parse(JSON.stringify(rules)));
    expect(back[1]!.rules).toEqual([]);
  });

  it('writes them in slices: the loop turns meanwhile', async () => {
    const rules = Array.from({ length: 200_000 }, (_, i) => rule(i & 0xffff));
    let turns = 0;
    let on = true;
    const spin = (): void => {
      if (!on) return;
      turns++;
      setImmediate(spin);
    };
    setImmediate(spin);
    const wire = await wireSections([{ section: 'policies', order: Int32Array.from(rules, (_, i) => -1 - i), rules }]);
    on = false;
    if (wire === 'aborted') throw new Error('aborted with no signal');
    expect(unwireSections(wire)[0]!.rules).toHaveLength(rules.length);
    expect(turns, 'turns of the loop while 200,000 rules were written').toBeGreaterThanOrEqual(3);
  });

  it('stops between slices once its signal aborts', async () => {
    const rules = Array.from({ length: 200_000 }, (_, i) => rule(i & 0xffff));
    const wanted = new AbortController();
    const wiring = wireSections([{ section: 'policies', order: Int32Array.from(rules, (_, i) => -1 - i), rules }], wanted.signal);
    wanted.abort();
    expect(await wiring).toBe('aborted');
  });
});
