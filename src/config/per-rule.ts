/** daemon.metrics.per_rule and mup daemon --metrics-per-rule: one parser for both (docs/metrics.md). */
import type { PerRuleSeries } from './types.js';

/** Largest N of daemon.metrics.per_rule top:N. */
export const MAX_PER_RULE_TOP = 100_000;

/** off | all | top:N (also the CLI's --metrics-per-rule); undefined when it is none of them. */
export function parsePerRule(x: unknown): PerRuleSeries | undefined {
  if (x === false || x === 'off') return 'off'; // YAML 1.1 readers turn a bare off into false
  if (x === 'all') return 'all';
  const t = typeof x === 'string' ? /^top:([0-9]{1,6})$/.exec(x) : null;
  const n = Number(t?.[1]);
  return t !== null && n >= 1 && n <= MAX_PER_RULE_TOP ? { top: n } : undefined;
}
