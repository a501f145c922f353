/**
 * The RFC 2544 bench's namespaces with a generator and a sink on each side
 * and the translator loaded (not attached): what the RFC 2544 test and the
 * next-hop cache test send real frames through.
 */
import { caseSetup, translatorConfig, type CaseName } from '../../src/bench/rfc2544/cases.js';
import { Generator, L3fwd, Sink } from '../../src/packet/generator.js';
import { BenchLab } from '../../src/bench/rfc2544/lab.js';
import type { TrialIo } from '../../src/bench/rfc2544/search.js';
import { openDataplane, type Dataplane } from '../../src/dataplane/index.js';

type Side = 'a' | 'b';

export interface BenchRig {
  readonly lab: BenchLab;
  readonly dp: Dataplane;
  readonly sinks: Record<Side, Sink>;
  readonly gens: Record<Side, Generator>;
  /** Only when asked for (withL3fwd). */
  readonly l3: L3fwd | undefined;
}

/** Namespaces `name`, sinks attached to both outer ends, generators and the translator ready. */
export async function openBenchRig(name: string, o: { withL3fwd?: boolean } = {}): Promise<BenchRig> {
  const closers: Array<{ close(): void }> = [];
  const lab = await BenchLab.create(name);
  try {
    const make = <T extends { close(): void }>(x: T): T => (closers.push(x), x);
    const sinks = { a: make(new Sink()), b: make(new Sink()) };
    const gens = { a: make(new Generator()), b: make(new Generator()) };
    const l3 = o.withL3fwd === true ? make(new L3fwd()) : undefined;
    const dp = make(openDataplane({ config: translatorConfig() }));
    sinks.a.attach('ea', lab.a);
    sinks.b.attach('eb', lab.b);
    return { lab, dp, sinks, gens, l3 };
  } catch (e) {
    await lab.destroy().catch(() => undefined);
    for (const c of closers) c.close();
    throw e;
  }
}

/** Namespaces first (that detaches everything), then the objects; each step even if another fails; throws the first error. */
export async function closeBenchRig(rig: BenchRig | undefined): Promise<void> {
  if (rig === undefined) return;
  const errors: unknown[] = [];
  await rig.lab.destroy().catch((e: unknown) => errors.push(e));
  for (const c of [rig.dp, rig.l3, rig.sinks.a, rig.sinks.b, rig.gens.a, rig.gens.b]) {
    try {
      c?.close();
    } catch (e) {
      errors.push(e);
    }
  }
  if (errors.length > 0) throw errors[0];
}

/** One stream of case `name` (64-byte frames, 16 flows): the generator on its side set up, the sink on the other expecting it. */
export function streamIo(rig: BenchRig, name: CaseName): TrialIo & { readonly gen: Generator; readonly sink: Sink } {
  const L = rig.lab;
  const s = caseSetup(name, 64, 16).streams[0]!;
  const rx: Side = s.from === 'a' ? 'b' : 'a';
  const gen = rig.gens[s.from];
  const sink = rig.sinks[rx];
  gen.configure(s.gen, s.from === 'a' ? 'ea' : 'eb', s.from === 'a' ? L.a : L.b);
  sink.expect(rx === 'a' ? 'ea' : 'eb', rx === 'a' ? L.a : L.b, 0, s.checks, s.minLen);
  return {
    gen,
    sink,
    send: (n) => gen.send(n),
    received: () => sink.read(0).frames,
    settle: () => new Promise<void>((res) => setTimeout(res, 100)),
  };
}
