/**
 * An mtu whose Packet Too Big would report less than 1280 to an IPv6 sender
 * is refused (src/config/mtu-floor.ts): the sender never goes under 1280
 * (RFC 8201 §4), so the packets between the report and 1280 were lost for
 * good. Found in review (session 42); configs such as End.M.GTP6.D with 4
 * segments and mtu 1300 (report 1228) loaded before.
 *
 * The reports named here are the data path's own (the packet tables of
 * test/fixtures/cases6.py and sessions.py had 996, 1184 and 1280 for the
 * configs refused now): bpf/mtu.h reports the rule's mtu less what the
 * translation adds, and the floor is 1280 plus the most it can add.
 */
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { ConfigError } from '../../src/config/errors.js';
import { parseConfig } from '../../src/config/load.js';

type Obj = Record<string, unknown>;
const SEGS4 = ['2001:db8:a::1', '2001:db8:a::2', '2001:db8:a::3', '2001:db8:a::4'];
const gtp4e = (o: Obj): Obj => ({ sid: '2001:db8:2::/48', src_prefix_len: 64, ...o });
const gtp6e = (o: Obj): Obj => ({ sid: '2001:db8:7::/64', behavior: 'end.m.gtp6.e', source: '2001:db8:ff::2', ...o });
const gtp6d = (o: Obj): Obj => ({ sid: '2001:db8:6::/64', behavior: 'end.m.gtp6.d', source: '2001:db8:ff::1', sr_prefix: '2001:db8:1::/64', ...o });
const session = (o: Obj): Obj => ({
  ue: '2001:db8:64::1/128',
  teid: 7,
  qfi: 1,
  endpoint: '192.0.2.1',
  source: '198.51.100.1',
  isd: '2001:db8:2::/48',
  src_prefix: '2001:db8:ff::/64',
  ...o,
});
const BGP = {
  asn: 65001,
  router_id: '10.255.0.2',
  rd: '65001:1',
  rt: '65001:100',
  api: '127.0.0.1:50051',
  roles: ['pe'],
};

interface Case {
  readonly name: string;
  readonly path: string;
  /** The smallest mtu taken; one less is refused, saying so and the report it would have made. */
  readonly floor: number;
  readonly build: (mtu: number) => Obj;
}

const cases: Case[] = [
  // GTP-U/IPv4 with the container (44) for IPv6 without SRH (40): + 4.
  { name: 'End.M.GTP4.E, container always (the default)', path: 'localsids[0].mtu', floor: 1284, build: (mtu) => ({ localsids: [gtp4e({ mtu })] }) },
  { name: 'End.M.GTP4.E, container auto', path: 'localsids[0].mtu', floor: 1284, build: (mtu) => ({ localsids: [gtp4e({ mtu, container: 'auto' })] }) },
  // 36 for 40: - 4.
  { name: 'End.M.GTP4.E, container never', path: 'localsids[0].mtu', floor: 1276, build: (mtu) => ({ localsids: [gtp4e({ mtu, container: 'never' })] }) },
  // GTP-U/IPv6 with the container (64) for IPv6 without SRH: + 24; without it (56): + 16.
  { name: 'End.M.GTP6.E, container always', path: 'localsids[0].mtu', floor: 1304, build: (mtu) => ({ localsids: [gtp6e({ mtu })] }) },
  { name: 'End.M.GTP6.E, container never', path: 'localsids[0].mtu', floor: 1296, build: (mtu) => ({ localsids: [gtp6e({ mtu, container: 'never' })] }) },
  // IPv6 + SRH of [B, S4..S1] (40 + 88) for GTP-U/IPv6 (56): + 72; the review's 1300 reported 1228.
  { name: 'End.M.GTP6.D, 4 segments, srh always', path: 'localsids[0].mtu', floor: 1352, build: (mtu) => ({ localsids: [gtp6d({ mtu, segments: SEGS4, srh: 'always' })] }) },
  // Reduced: S1 in the DA, [B, S4..S2]: 40 + 72 - 56.
  { name: 'End.M.GTP6.D, 4 segments, srh reduced', path: 'localsids[0].mtu', floor: 1336, build: (mtu) => ({ localsids: [gtp6d({ mtu, segments: SEGS4, srh: 'reduced' })] }) },
  // .Di: B, the Di's first SID and the segments: [B, S1, S0]: 40 + 56 - 56.
  { name: 'End.M.GTP6.D.Di, 1 segment', path: 'localsids[0].mtu', floor: 1320, build: (mtu) => ({ localsids: [gtp6d({ mtu, behavior: 'end.m.gtp6.d.di', segments: SEGS4.slice(0, 1) })] }) },
  // An IPv6 UE: IPv6 + SRH of [B, S2, S1] (40 + 56): + 96; the session table's 1280 reported 1184.
  { name: 'session, IPv6 UE, 2 segments', path: 'sessions[0].mtu', floor: 1376, build: (mtu) => ({ sessions: [session({ mtu, segments: SEGS4.slice(0, 2) })] }) },
  { name: 'session, IPv6 UE, no segments, srh always', path: 'sessions[0].mtu', floor: 1344, build: (mtu) => ({ sessions: [session({ mtu, srh: 'always' })] }) },
  { name: 'session, IPv6 UE, no segments', path: 'sessions[0].mtu', floor: 1320, build: (mtu) => ({ sessions: [session({ mtu })] }) },
  {
    name: "bgp session_defaults (a learned session's UE may be IPv6)",
   
    path: 'bgp.session_defaults.mtu',
    floor: 1376,
    build: (mtu) => ({ bgp: { ...BGP, session_defaults: { src_prefix: '2001:db8:ff:9::/64', source: '198.51.100.1', segments: SEGS4.slice(0, 2), mtu } } }),
  },
];

function refusal(text: string): ConfigError | undefined {
  try {
    parseConfig(text, 'mtu.yaml');
    return undefined;
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
}

describe('an mtu whose Packet Too Big would report under 1280 to an IPv6 sender is refused', () => {
  for (const c of cases) {
    it(`${c.name}: ${c.floor} is taken, ${c.floor - 1} refused`, () => {
      expect(refusal(stringify(c.build(c.floor))), 'at the floor').toBeUndefined();
      const e = refusal(stringify(c.build(c.floor - 1)));
      expect(e, 'one under the floor').toBeDefined();
      expect(e!.message).toContain(`${c.path}: ${c.floor - 1} is too small`);
      expect(e!.message).toContain(`would report 1279, below IPv6's minimum MTU of 1280`);
      expect(e!.message).toContain(`give mtu ${c.floor} or more`);
    });
  }

  it("the data path's reports for the configs that loaded before", () => {
    const report = (text: string): string => /would report (\d+)/.exec(refusal(text)?.message ?? '')?.[1] ?? 'taken';
    expect(report(stringify({ localsids: [gtp6d({ mtu: 1300, segments: SEGS4, srh: 'always' })] }))).toBe('1228');
    expect(report(stringify({ sessions: [session({ mtu: 1280, segments: SEGS4.slice(0, 2) })] }))).toBe('1184');
    expect(report(stringify({ localsids: [gtp4e({ mtu: 1000 })] }))).toBe('996');
  });

  it('errors that go to an IPv4 sender have no such floor: an IPv4 UE, H.M.GTP4.D', () => {
    expect(refusal(stringify({ sessions: [session({ ue: '10.64.0.1/32', mtu: 1280, segments: SEGS4 })] }))).toBeUndefined();
    const policy = { match: '10.0.0.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64', segments: SEGS4, srh: 'always', mtu: 1280 };
    expect(refusal(stringify({ policies: [policy] }))).toBeUndefined();
    // End.M.GTP6.D without an SRH takes 16 bytes off: IPv6's own minimum applies.
    expect(refusal(stringify({ localsids: [gtp6d({ mtu: 1280 })] }))).toBeUndefined();
  });

  it('the API reads rules through the same check', async () => {
    const { parseSessionEntry, parseLocalSidEntry } = await import('../../src/config/load.js');
    expect(() => parseLocalSidEntry(gtp6d({ mtu: 1300, segments: SEGS4, srh: 'always' }), 'api')).toThrow(/1300 is too small/);
    expect(() => parseSessionEntry(session({ mtu: 1280, segments: SEGS4.slice(0, 2) }), 'api')).toThrow(/1280 is too small/);
  });
});
