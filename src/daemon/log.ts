/**
 * Structured logs: one JSON object per line on stdout (for journald, Loki,
 * jq), or readable text when stdout is a terminal. Every event has a short
 * `msg` and its facts as fields (interface, rule, file, ...).
 */
import { pino, type Logger } from 'pino';

export type { Logger };

const SKIP = new Set(['level', 'time', 'msg', 'pid', 'hostname', 'instance']);

/** Text for a terminal: `12:00:01 INFO  attached interface=eth1 mode=native`. */
function textLine(line: string): string {
  try {
    const o = JSON.parse(line) as Record<string, unknown>;
    const time = typeof o['time'] === 'string' ? o['time'].slice(11, 19) : '';
    const level = String(o['level']).toUpperCase().padEnd(5);
    const fields = Object.entries(o)
      .filter(([k]) => !SKIP.has(k))
      .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
      .join(' ');
    return `${time} ${level} ${String(o['msg'] ?? '')}${fields === '' ? '' : `  ${fields}`}\n`;
  } catch {
    return line;
  }
}

export function createLogger(o: { instance: string; level?: string; json?: boolean; stream?: NodeJS.WritableStream }): Logger {
  const out = o.stream ?? process.stdout;
  const json = o.json ?? !(out as NodeJS.WriteStream).isTTY;
  const dest = json
    ? out === process.stdout
      ? pino.destination({ fd: 1, sync: true })
      : { write: (s: string) => void out.write(s) }
    : { write: (s: string) => void out.write(textLine(s)) };
  return pino(
    {
      level: o.level ?? 'info',
      base: { instance: o.instance },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    dest,
  );
}
