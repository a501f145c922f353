/**
 * `mup bench rfc2544` as one library call: run the benchmark, write JSON,
 * Markdown and SVG into a directory, return the report and the terminal
 * table. The CLI (src/cli/bench.ts) parses options and prints.
 */
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { CASES, RFC2544_SIZES, type CaseName } from './cases.js';
import { DEFAULT_CASES, DEFAULT_SIZES } from './defaults.js';
import { latencyLogs, latencySvgs, machineInfo, markdown, svgPlot, terminalTable, type Report } from './report.js';
import { DEFAULTS, runRfc2544, type Rfc2544Options } from './rfc2544.js';
import { makeDirs } from '../../host/mkdirs.js';

export { CASES, RFC2544_SIZES, DEFAULTS };
export type { CaseName, Report };

export interface BenchRfc2544Options extends Partial<Omit<Rfc2544Options, 'log' | 'progress'>> {
  /** Output directory; created. */
  outDir: string;
  log?: (line: string) => void;
  progress?: (what: string, fraction: number) => void;
}

export interface BenchRfc2544Output {
  report: Report;
  table: string;
  files: string[];
}

export async function benchRfc2544(o: BenchRfc2544Options): Promise<BenchRfc2544Output> {
  const machine = machineInfo();
  const result = await runRfc2544({
    ...DEFAULTS,
    sizes: DEFAULT_SIZES,
    cases: DEFAULT_CASES,
    ...Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)),
  } as Rfc2544Options);
  machine.loadEnd = loadavg().map((x) => Math.round(x * 100) / 100);
  const report: Report = { machine, result };
  makeDirs(o.outDir);
  const files: [string, string][] = [
    ['report.json', JSON.stringify(report, (_k, v: unknown) => (v === Infinity ? 'max' : v), 2) + '\n'],
    ['report.md', markdown(report)],
    ['throughput.svg', svgPlot(result, 'mpps')],
    ['throughput-gbps.svg', svgPlot(result, 'gbps')],
    ...latencySvgs(result),
    ...latencyLogs(result),
  ];
  for (const [name, text] of files) writeFileSync(join(o.outDir, name), text);
  return { report, table: terminalTable(report), files: files.map(([n]) => join(o.outDir, n)) };
}
