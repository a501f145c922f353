/**
 * localSidJson sets its fields on one object (objects spread into others
 * were promoted to the old space in a listing of 65,536 local SIDs: 4.5 MB
 * a listing, `--trace-gc-nvp`). Its answers must be what the spread
 * version gave, key order included (API answers, `config show`, the state
 * file): REFERENCE is that version, compared as JSON text over every
 * behaviour and optional field.
 */
import { describe, expect, it } from 'vitest';
import { parseLocalSidEntry } from '../../src/config/load.js';
import type { LocalSid } from '../../src/config/types.js';
import { localSidKey } from '../../src/config/keys.js';
import { localSidJson } from '../../src/daemon/rules.js';
import { formatIpv6, formatIpv6Prefix } from '../../src/sid/addr.js';

/** The spread version (before session 21), kept as the reference. */
function REFERENCE(l: LocalSid): Record<string, unknown> {
  const behavior = l.behavior ?? 'end.m.gtp4.e';
  const head = {
    ...(l.name === undefined ? {} : { name: l.name }),
    ...(l.behavior === undefined ? {} : { behavior }),
    sid: localSidKey(l),
  };
  const mtu = l.mtu === undefined ? {} : { mtu: l.mtu };
  const source = l.source === undefined ? {} : { source: formatIpv6(l.source) };
  const advertise = l.advertise === undefined ? {} : { advertise: { prefixes: [...l.advertise.prefixes], lb: l.advertise.lb, ln: l.advertise.ln, fn: l.advertise.fn } };
  switch (behavior) {
    case 'end.m.gtp4.e':
      return { ...head, src_prefix_len: l.srcPrefixLen, container: l.container, ttl: l.ttl, ...mtu, ...advertise };
    case 'end.m.gtp6.e':
      return { ...head, ...source, container: l.container, hop_limit: l.ttl, ...mtu, ...advertise };
    case 'end.m.gtp6.d':
    case 'end.m.gtp6.d.di':
      return {
        ...head,
        ...source,
        ...(l.srPrefix === undefined ? {} : { sr_prefix: formatIpv6Prefix(l.srPrefix) }),
        ...((l.segments ?? []).length === 0 ? {} : { segments: (l.segments ?? []).map((x) => formatIpv6(x)) }),
        srh: l.srh ?? 'auto',
        hop_limit: l.ttl,
        ...mtu,
      };
  }
}

const ENTRIES: Record<string, unknown>[] = [
  { sid: '2001:db8:4::/48', src_prefix_len: 64 },
  { name: 'e4', behavior: 'end.m.gtp4.e', sid: '2001:db8:4::/48', src_prefix_len: 56, container: 'never', ttl: 9, mtu: 1400 },
  { sid: '2001:db8:4::/40', src_prefix_len: 64, advertise: { prefixes: ['192.0.2.0/24'], lb: 32, ln: 4, fn: 4 } },
  { name: 'e6', behavior: 'end.m.gtp6.e', sid: '2001:db8:6::/64', source: '2001:db8:ff::1' },
  { behavior: 'end.m.gtp6.e', sid: '2001:db8:6::/48', source: '2001:db8:ff::1', container: 'auto', hop_limit: 7, mtu: 1500, advertise: { prefixes: ['2001:db8:a::/120'], lb: 32, ln: 8, fn: 8 } },
  { behavior: 'end.m.gtp6.d', sid: '2001:db8:d::/64', source: '2001:db8:ff::2', sr_prefix: '2001:db8:1::/64' },
  { name: 'd', behavior: 'end.m.gtp6.d', sid: '2001:db8:d::/64', source: '2001:db8:ff::2', sr_prefix: '2001:db8:1::/64', segments: ['2001:db8:2::1', '2001:db8:3::1'], srh: 'always', hop_limit: 3, mtu: 1320 },
  { behavior: 'end.m.gtp6.d.di', sid: '2001:db8:d1::/64', source: '2001:db8:ff::3', sr_prefix: '2001:db8:1::/48', srh: 'reduced' },
];

describe('localSidJson: the spread version\'s answers, key order included', () => {
  it.each(ENTRIES.map((e) => [JSON.stringify(e), e] as const))('%s', (_t, e) => {
    const l = parseLocalSidEntry(e, 'test');
    expect(JSON.stringify(localSidJson(l))).toBe(JSON.stringify(REFERENCE(l)));
    expect(Object.keys(localSidJson(l))).toEqual(Object.keys(REFERENCE(l)));
  });
});
