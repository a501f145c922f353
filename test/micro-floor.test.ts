/**
 * bench:micro's cold-lookup floor (bpf/bench/bench.bpf.c bench_lookup,
 * src/bench/micro.ts): its rows must time a hash lookup that FINDS its key
 * on every iteration, the TEID repeated and spread by the harness over the
 * whole table; a key layout that drifted from the table's (byte order, the
 * plen, the spread's values) would time misses and fall to XDP_DROP.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openColdFloor } from '../src/bench/micro.js';

const XDP_DROP = 1;
const XDP_TX = 3;

describe('bench:micro cold-lookup floor', () => {
  let floor: ReturnType<typeof openColdFloor>;
  beforeAll(() => {
    floor = openColdFloor(10); // 1,024 keys
  });
  afterAll(() => floor?.close());

  it('finds the repeated TEID on every iteration', () => {
    const r = floor.run(floor.frame(), 1000, false);
    expect(r.retval).toBe(XDP_TX);
    expect(r.hits).toBe(1000n);
  });

  it('finds every TEID the harness spreads over the table', () => {
    const r = floor.run(floor.frame(), 5000, true);
    expect(r.retval).toBe(XDP_TX);
    expect(r.hits).toBe(5000n);
  });

  it('drops a TEID that is not in the table (so a drifted key shows)', () => {
    const r = floor.run(floor.frame(1000), 100, false); // j = 1000 >= 128 per group
    expect(r.retval).toBe(XDP_DROP);
    expect(r.hits).toBe(0n);
  });
});
