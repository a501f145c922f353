/**
 * Where the event loop's long turns go, from a .cpuprofile (bench:daemon
 * --cpu-prof, src/daemon/profile.ts): a turn is a run of samples that are
 * not "(idle)"; for the turns longer than --over MS (default 10) it prints
 * each turn's length and its heaviest frames (inclusive sampled time,
 * "(garbage collector)" included), then the frames over all those turns.
 *
 *   npx tsx src/bench/long-turns.ts FILE.cpuprofile [--over MS] [--top N]
 *
 * Caveat: samples are taken every 0.5 ms (the profile's interval); a turn is
 * known to within about that, and a frame with few samples is noise.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

function main(argv: string[]): void {
  const usage = (why: string): never => {
    process.stderr.write(`long-turns: ${why}\nusage: long-turns FILE.cpuprofile [--over MS] [--top N]\n`);
    process.exit(2);
  };
  let parsed: ReturnType<typeof parseArgs<{ options: { over: { type: 'string' }; top: { type: 'string' } }; allowPositionals: true }>>;
  try {
    parsed = parseArgs({ args: argv, options: { over: { type: 'string' }, top: { type: 'string' } }, allowPositionals: true });
  } catch (e) {
    return usage((e as Error).message);
  }
  const num = (name: string, v: string | undefined, d: number): number => {
    if (v === undefined) return d;
    const n = Number(v);
    return Number.isFinite(n) && n >= 0 ? n : usage(`--${name} ${v}: not a number`);
  };
  if (parsed.positionals.length !== 1) usage('one profile file, please');
  const file = parsed.positionals[0]!;
  const overMs = num('over', parsed.values.over, 10);
  const top = num('top', parsed.values.top, 8);
  const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const label = (n: Node): string => {
    const f = n.callFrame;
    const where = f.url === '' ? '' : ` ${f.url.replace(/^.*\/(src|dist|node_modules)\//, '$1/')}:${f.lineNumber + 1}`;
    return `${f.functionName === '' ? '(anonymous)' : f.functionName}${where}`;
  };
  const stack = (id: number): string[] => {
    const out: string[] = [];
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const n = byId.get(at)!;
      if (n.callFrame.functionName !== '(root)') out.push(label(n));
    }
    return out;
  };
  const isIdle = (id: number): boolean => byId.get(id)!.callFrame.functionName === '(idle)';

  interface Turn { startMs: number; ms: number; frames: Map<string, number> }
  const turns: Turn[] = [];
  let t = p.startTime;
  let cur: Turn | undefined;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i]!;
    const dt = (p.timeDeltas[i + 1] ?? 0) / 1000;
    const id = p.samples[i]!;
    if (isIdle(id)) {
      if (cur !== undefined) turns.push(cur);
      cur = undefined;
      continue;
    }
    cur ??= { startMs: (t - p.startTime) / 1000, ms: 0, frames: new Map() };
    cur.ms += dt;
    for (const f of new Set(stack(id))) cur.frames.set(f, (cur.frames.get(f) ?? 0) + dt);
  }
  if (cur !== undefined) turns.push(cur);
  const long = turns.filter((x) => x.ms > overMs);
  const total = (p.samples.length > 0 ? (t - p.startTime) / 1000 : 0);
  process.stdout.write(`${file}: ${(total / 1000).toFixed(1)} s profiled, ${turns.length} turns, ${long.length} over ${overMs} ms\n`);
  const all = new Map<string, number>();
  const heaviest = (m: Map<string, number>, n: number): string =>
    [...m].sort((a, b) => b[1] - a[1]).slice(0, n).map(([f, ms]) => `      ${ms.toFixed(1).padStart(7)} ms  ${f}`).join('\n');
  for (const x of long.sort((a, b) => b.ms - a.ms).slice(0, 20)) {
    process.stdout.write(`  at ${(x.startMs / 1000).toFixed(2)} s: ${x.ms.toFixed(1)} ms\n${heaviest(x.frames, top)}\n`);
  }
  for (const x of long) for (const [f, ms] of x.frames) all.set(f, (all.get(f) ?? 0) + ms);
  process.stdout.write(`over all ${long.length} long turns (${long.reduce((s, x) => s + x.ms, 0).toFixed(0)} ms):\n${heaviest(all, top * 3)}\n`);
}

main(process.argv.slice(2));
