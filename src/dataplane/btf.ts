/**
 * The object's BTF is the truth about the shared structs: checkLayouts()
 * refuses an object whose layouts or limits differ from the codec's (LAYOUTS,
 * MUP_LIMITS), and eventNames() reads the counter event names from
 * `enum mup_event`.
 */
import { ENUMS, LAYOUTS, MUP_EVENT_SLOTS, MUP_LIMITS, MUP_RETIRED_SLOT, type StructLayout } from './codec.js';
import { btfEnum, btfStruct, objectBtf, type BpfObject, type Btf } from './libbpf.js';
import { PROBE_ENUMS, PROBE_LAYOUTS } from './probe-layout.js';

/** The object and src/dataplane/codec.ts disagree. */
export class LayoutError extends Error {
  override readonly name = 'LayoutError';
  constructor(
    readonly object: string,
    readonly problems: readonly string[],
    summary = 'and src/dataplane/codec.ts disagree on the shared structs ' +
      '(rebuild with `make bpf`, or update LAYOUTS in codec.ts and MUP_LIMITS in src/config/limits.ts to bpf/mup_shared.h)',
  ) {
    super(`${object} ${summary}: ${problems.join('; ')}`);
  }
}

function structProblems(btf: Btf, name: string, want: StructLayout): string[] {
  const got = btfStruct(btf, name);
  if (got === undefined) return [`struct ${name} is not in the object's BTF`];
  const out: string[] = [];
  if (got.size !== want.size) out.push(`struct ${name} is ${got.size} bytes, codec expects ${want.size}`);
  for (const [member, w] of Object.entries(want.members)) {
    const g = got.members.find((x) => x.name === member);
    if (g === undefined) {
      out.push(`${name}.${member} is missing`);
    } else if (g.bitfieldSize !== 0) {
      out.push(`${name}.${member} is a bitfield`);
    } else if (g.offset !== w.offset || g.size !== w.size) {
      out.push(`${name}.${member} is at offset ${g.offset} size ${g.size}, codec expects offset ${w.offset} size ${w.size}`);
    }
  }
  return out;
}

function enumProblems(btf: Btf, name: string, want: Readonly<Record<string, number>>): string[] {
  const got = btfEnum(btf, name);
  // Enums only reach BTF when the program references the type; the fields
  // that hold them are __u8/__u32, so an absent enum is not an error.
  if (got === undefined) return [];
  const out: string[] = [];
  for (const [k, v] of Object.entries(want)) {
    const g = got.get(k);
    if (g !== v) out.push(`${k} is ${g ?? 'missing'}, codec expects ${v}`);
  }
  return out;
}

/** `enum mup_limits` must be there: the struct layouts above are sized by it, and config is checked against it. */
function limitProblems(btf: Btf): string[] {
  const got = btfEnum(btf, 'mup_limits');
  if (got === undefined) {
    return [
      'enum mup_limits is not in the BTF, so the limits in src/config/limits.ts cannot be checked; ' +
        'the program must use the type by name for clang to emit it, as bpf/counters.h does with mup_limits_btf',
    ];
  }
  const out: string[] = [];
  for (const [k, v] of Object.entries(MUP_LIMITS)) {
    const g = got.get(k);
    if (g !== v) out.push(`${k} is ${g ?? 'missing'} in enum mup_limits, src/config/limits.ts has ${v}`);
  }
  return out;
}

/**
 * Compare every struct size, member offset and member size the codec uses,
 * the limits (`enum mup_limits`), and the enum values it writes (when the
 * enum is in BTF) with the object's BTF. Throws a LayoutError listing every
 * difference. `what` names the object.
 */
export function checkLayouts(obj: BpfObject, what = 'the BPF object'): void {
  const btf = objectBtf(obj);
  const problems: string[] = [];
  problems.push(...limitProblems(btf));
  for (const [name, layout] of Object.entries(LAYOUTS)) problems.push(...structProblems(btf, name, layout));
  for (const [name, values] of Object.entries(ENUMS)) problems.push(...enumProblems(btf, name, values));
  problems.push(...probeProblems(btf, false));
  const events = btfEnum(btf, 'mup_event');
  for (const [k, v] of events ?? []) {
    if (k !== 'MUP_EV_MAX' && (v < 0 || v >= MUP_RETIRED_SLOT)) {
      problems.push(`${k} = ${v} is outside the event slots 0..${MUP_RETIRED_SLOT - 1} (the ${MUP_EVENT_SLOTS - MUP_RETIRED_SLOT} after them hold the counts of rules that are gone)`);
    }
  }
  if (problems.length > 0) throw new LayoutError(what, problems);
}

/**
 * Counter slot -> event name from `enum mup_event` (lower-case, without
 * MUP_EV_, MUP_EV_MAX skipped): 22 -> "drop_gtp_ext_zero".
 */
export function eventNames(obj: BpfObject, what = 'the BPF object'): Map<number, string> {
  const values = btfEnum(objectBtf(obj), 'mup_event');
  if (values === undefined) {
    throw new LayoutError(
      what,
      [
        'the program must reference the type for clang to emit it, ' +
          'e.g. `static const enum mup_event mup_event_btf __attribute__((used)) = MUP_EV_MAX;`',
      ],
      'has no enum mup_event in its BTF, so counter events cannot be named',
    );
  }
  const names = new Map<number, string>();
  for (const [k, v] of values) {
    if (k === 'MUP_EV_MAX') continue;
    names.set(v, k.replace(/^MUP_EV_/, '').toLowerCase());
  }
  return names;
}

/**
 * The latency probe's structs and enums (bpf/probe.h, src/dataplane/probe-layout.ts).
 * checkLayouts checks whatever of them the object has (mup_config's probe
 * fields always); checkProbeLayouts, run before the probe writes the config
 * or reads a record, also wants every one of them there.
 */
function probeProblems(btf: Btf, strict: boolean): string[] {
  const out: string[] = [];
  for (const [name, layout] of Object.entries(PROBE_LAYOUTS)) {
    if (!strict && name !== 'mup_config' && btfStruct(btf, name) === undefined) continue;
    out.push(...structProblems(btf, name, layout));
  }
  for (const [name, values] of Object.entries(PROBE_ENUMS)) {
    if (btfEnum(btf, name) === undefined) {
      if (strict) out.push(`enum ${name} is not in the object's BTF (bpf/probe.h keeps it there)`);
    } else {
      out.push(...enumProblems(btf, name, values));
    }
  }
  return out;
}

/** The probe's layouts, all of them required (the data plane without the probe has none). */
export function checkProbeLayouts(obj: BpfObject, what = 'the BPF object'): void {
  const problems = probeProblems(objectBtf(obj), true);
  if (problems.length > 0) throw new LayoutError(what, problems, 'and src/dataplane/probe-layout.ts disagree on the probe structs');
}
