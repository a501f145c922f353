/**
 * What the data path can hold: TypeScript's one copy of `enum mup_limits` in
 * bpf/mup_shared.h. src/config/load.ts refuses configs beyond them,
 * src/dataplane/codec.ts lays the shared structs out with them, and
 * src/dataplane/btf.ts checks every value here against the object's BTF.
 * Kept in config (the lowest module that needs them) so that config does not
 * import the dataplane.
 */
export const MUP_LIMITS = {
  /** Policy segments S1..Sk before the last SID. */
  MUP_MAX_SEGS: 4,
  /** Distinct prefix lengths per table: the data path does one exact-match lookup per length. */
  MUP_MAX_PLENS: 16,
  /** Counter slots before the per-rule ones (one per `enum mup_event` value). */
  MUP_EVENT_SLOTS: 64,
  /** First of the slots, one per `enum mup_function`, holding the counts of rules that are gone (src/dataplane/tables.ts). */
  MUP_RETIRED_SLOT: 58,
  /** GTP-U UDP port (3GPP TS 29.281). */
  MUP_GTPU_PORT: 2152,
} as const;

export const { MUP_MAX_SEGS, MUP_MAX_PLENS, MUP_EVENT_SLOTS, MUP_RETIRED_SLOT } = MUP_LIMITS;
