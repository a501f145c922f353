/**
 * The smallest `mtu` a rule may have when its Packet Too Big goes to an
 * IPv6 sender. The data path reports `mtu` less what the translation adds
 * (bpf/mtu.h); an IPv6 sender does not go below 1280 (RFC 8200 §5, RFC 8201
 * §4), so a report under 1280 loses every packet between it and 1280 for
 * good: each is answered again, and never made smaller. The config refuses
 * such an mtu (docs/config.md, "mtu").
 *
 * The growth is the worst case over the packets the rule may see: the most
 * the translation adds less the least it takes off (an SRv6 packet may come
 * without an SRH: 40 bytes off; GTP-U/IPv6 without extension headers: 56).
 * The sizes are the data path's (bpf/gtp4e.h, gtp6e.h, gtp6d.h, session.h).
 */
import type { ContainerMode, LocalSidBehavior, SrhMode } from './types.js';

/** IPv6's minimum link MTU (RFC 8200 §5). */
export const IPV6_MIN_MTU = 1280;

const IPV6 = 40;
/** UDP 8 + GTP-U 8, and with the PDU Session Container: + 4 (optional fields) + 4 (the container). */
const GTPU = 16;
const PSC = 8;

/** An SRH of `entries` segments (none when 0). */
function srhBytes(entries: number): number {
  return entries === 0 ? 0 : 8 + 16 * entries;
}

/** What a rule's translation of an IPv6 packet may add at most, and why (for the message). */
export interface Growth {
  readonly bytes: number;
  readonly why: string;
}

/**
 * H.M.Session.Encaps of an IPv6 UE's packet: an IPv6 header and, unless
 * none is needed, an SRH of B and the segments (reduced: S1 in the DA).
 */
export function sessionGrowth(segments: number, srh: SrhMode): Growth {
  const entries = srh === 'reduced' ? segments : segments > 0 || srh === 'always' ? segments + 1 : 0;
  const bytes = IPV6 + srhBytes(entries);
  return { bytes, why: entries === 0 ? 'an IPv6 header' : `an IPv6 header and an SRH of ${entries} segment${entries === 1 ? '' : 's'}` };
}

/** A local SID's: End.M.GTP4.E, End.M.GTP6.E (GTP-U out, PSC unless container never), End.M.GTP6.D(.Di) (SRv6 out). */
export function localSidGrowth(behavior: LocalSidBehavior, container: ContainerMode, segments: number, srh: SrhMode): Growth {
  const psc = container === 'never' ? 0 : PSC;
  const pscWhy = psc === 0 ? '' : ' with its PDU Session Container';
  switch (behavior) {
    case 'end.m.gtp4.e':
      return { bytes: 20 + GTPU + psc - IPV6, why: `GTP-U/IPv4${pscWhy} for an IPv6 header without SRH` };
    case 'end.m.gtp6.e':
      return { bytes: IPV6 + GTPU + psc - IPV6, why: `GTP-U/IPv6${pscWhy} for an IPv6 header without SRH` };
    case 'end.m.gtp6.d':
    case 'end.m.gtp6.d.di': {
      // [B, Sk..S1] (and the Di's first SID); reduced leaves S1 out; one SID alone needs no SRH unless always.
      const n = segments + 1 + (behavior === 'end.m.gtp6.d.di' ? 1 : 0);
      const entries = srh === 'reduced' ? n - 1 : n === 1 && srh === 'auto' ? 0 : n;
      const bytes = IPV6 + srhBytes(entries) - (IPV6 + GTPU);
      return { bytes, why: `an IPv6 header${entries === 0 ? '' : ` and an SRH of ${entries} segments`} for GTP-U/IPv6` };
    }
  }
}

/** The smallest mtu that keeps every report at 1280 or more. */
export function mtuFloor(g: Growth): number {
  return IPV6_MIN_MTU + g.bytes;
}

/** Why `mtu` is refused (undefined: it is not). */
export function mtuTooSmall(mtu: number, g: Growth, fn: string): string | undefined {
  const floor = mtuFloor(g);
  if (mtu >= floor) return undefined;
  return (
    `${mtu} is too small: ${fn} adds up to ${g.bytes} bytes (${g.why}), so a Packet Too Big would report ${mtu - g.bytes}, ` +
    `below IPv6's minimum MTU of ${IPV6_MIN_MTU}, which senders never go under (RFC 8201 §4): packets between the two sizes would be lost for good; ` +
    `give mtu ${floor} or more`
  );
}
