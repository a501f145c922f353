/** bench:daemon's latency lines: n beside every p99, and a status line that FAILs on an error. */
import { describe, expect, it } from 'vitest';
import { nText, p99Text, statusTargetLine, summarize } from '../../src/bench/latency-lines.js';

describe('bench:daemon latency lines', () => {
  it('n beside a p99; under 100 samples the line says p99 is the max', () => {
    const few = summarize(Array.from({ length: 87 }, (_, i) => i / 10));
    expect(few.p99).toBe(few.max);
    expect(p99Text(few)).toBe('p99 8.60 (n=87; n < 100: p99 is the max)');
    const many = summarize(Array.from({ length: 1000 }, (_, i) => i / 100));
    expect(many.p99).toBeLessThan(many.max);
    expect(p99Text(many)).toBe('p99 9.89 (n=1000)');
    expect(nText(100)).toBe('n=100');
  });

  it('a status line with errors or resets FAILs and says how many', () => {
    const fast = summarize([0.3, 0.4, 0.5]);
    expect(statusTargetLine('churn', fast, 0, 0)).toMatch(/0 resets, 0 errors \(n=3; n < 100: p99 is the max\)  PASS$/);
    expect(statusTargetLine('churn', fast, 0, 2)).toMatch(/0 resets, 2 errors .*FAIL$/);
    expect(statusTargetLine('churn', fast, 1, 0)).toMatch(/1 resets, 0 errors .*FAIL$/);
    expect(statusTargetLine('churn', summarize([0.3, 60]), 0, 0)).toMatch(/FAIL$/);
  });
});
