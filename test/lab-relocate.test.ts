/**
 * The relocation report's per-UE arithmetic (src/lab/relocate.ts perUe),
 * without a lab: lost, duplicated, reordered and malformed per direction,
 * from what the sites' and the UEs' receivers recorded. The lab itself is
 * test/lab.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { perUe, type BackOut, type SiteOut } from '../src/lab/relocate.js';
import { labTopology } from '../src/lab/topology.js';

const t = labTopology('mlab');
const site = (rows: [ue: number, seq: number, t: number][], malformed = [0, 0]): SiteOut => ({
  ue: rows.map((r) => r[0]),
  seq: rows.map((r) => r[1]),
  t: rows.map((r) => r[2]),
  sent: rows.map(() => 0),
  malformed,
  unattributed: 0,
  echo_errors: 0,
});
const back = (rows: [ue: number, seq: number, t: number, site: 1 | 2][], malformed = [0, 0]): BackOut => ({
  ue: rows.map((r) => r[0]),
  seq: rows.map((r) => r[1]),
  t: rows.map((r) => r[2]),
  site: rows.map((r) => r[3]),
  malformed,
  unattributed: 0,
});

describe('relocation report per UE', () => {
  it('a clean switch: UE 1 (stream index 0) 0..1 at A, 2..3 at B, every echo back; UE 2 all at A', () => {
    const a = site([[0, 0, 10], [1, 0, 11], [0, 1, 20], [1, 1, 21], [1, 2, 31], [1, 3, 41]]);
    const b = site([[0, 2, 30], [0, 3, 40]]);
    const k = back([[0, 0, 12, 1], [0, 1, 22, 1], [0, 2, 32, 2], [0, 3, 42, 2], [1, 0, 13, 1], [1, 1, 23, 1], [1, 2, 33, 1], [1, 3, 43, 1]]);
    const r = perUe(t, 1, [4, 4], a, b, k);
    expect(r.map((u) => [u.addr, u.moved])).toEqual([
      ['10.45.0.3', true],
      ['10.45.0.4', false],
    ]);
    expect(r[0]!.uplink).toEqual({ sent: 4, received: 4, lost: 0, duplicated: 0, reordered: 0, malformed: 0, viaA: 2, viaB: 2 });
    expect(r[0]!.downlink).toEqual({ sent: 4, received: 4, lost: 0, duplicated: 0, reordered: 0, malformed: 0, viaA: 2, viaB: 2 });
    expect(r[1]!.uplink).toMatchObject({ lost: 0, viaA: 4, viaB: 0 });
  });

  it('uplink: a frame at B before an older one at A is reordered (one stream across sites); lost and duplicated counted', () => {
    const a = site([[0, 0, 10], [0, 2, 35]], [1, 0]);
    const b = site([[0, 3, 30], [0, 3, 31]]);
    const r = perUe(t, 1, [5, 0], a, b, back([]));
    // Arrival order 0, 3, 3, 2: 2 after 3 is reordered; 3 twice; 1 and 4 never arrived.
    expect(r[0]!.uplink).toEqual({ sent: 5, received: 4, lost: 2, duplicated: 1, reordered: 1, malformed: 1, viaA: 2, viaB: 2 });
    // The sites echoed 3 distinct numbers (3 twice); none came back.
    expect(r[0]!.downlink).toMatchObject({ sent: 3, received: 0, lost: 3 });
  });

  it("downlink: each site's echoes are their own stream; an echo from B before A's late one is not reordered, a backwards one within a site is", () => {
    const a = site([[0, 0, 10], [0, 1, 20]]);
    const b = site([[0, 2, 30], [0, 3, 40]]);
    const k = back([[0, 2, 31, 2], [0, 0, 32, 1], [0, 1, 33, 1], [0, 3, 29, 2]]);
    const r = perUe(t, 1, [4], a, b, k);
    // By time: 3 (B, t 29), 2 (B, t 31): reordered within B; 0, 1 from A after B's: not.
    expect(r[0]!.downlink).toMatchObject({ received: 4, lost: 0, duplicated: 0, reordered: 1, viaA: 2, viaB: 2 });
  });
});
