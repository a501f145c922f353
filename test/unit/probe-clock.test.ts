/**
 * Clock conversions and ETHTOOL_GET_TS_INFO decoding as pure arithmetic, with
 * offsets and masks worked out by hand (the real PHC path needs a NIC this VM
 * does not have; test/native.test.ts covers the real clocks it has).
 */
import { describe, expect, it } from 'vitest';
import {
  describeTsInfo,
  monotonicToRealtime,
  phcToRealtime,
  ptpDevice,
  realtimeToMonotonic,
  realtimeToPhc,
  toMonotonic,
  toRealtime,
  type ClockOffsets,
} from '../../src/probe/native.js';

// Sampled at realtime 1,700,000,000.5 s, monotonic 1,000 s; the PHC runs on TAI, 37 s ahead.
const offsets: ClockOffsets = {
  realtimeNs: 1_700_000_000_500_000_000n,
  monotonicNs: 1_000_000_000_000n,
  realtimeMinusMonotonicNs: 1_699_999_000_500_000_000n,
  realtimeMonotonicUncertaintyNs: 20,
  samples: 9,
  phc: {
    device: '/dev/ptp0',
    method: 'PTP_SYS_OFFSET_EXTENDED',
    phcNs: 1_700_000_037_500_000_000n,
    phcMinusRealtimeNs: 37_000_000_000n,
    uncertaintyNs: 150,
  },
};

describe('clock conversions', () => {
  it('monotonic <-> realtime by the sampled offset', () => {
    expect(monotonicToRealtime(1_000_000_000_123n, offsets)).toBe(1_700_000_000_500_000_123n);
    expect(realtimeToMonotonic(1_700_000_000_500_000_123n, offsets)).toBe(1_000_000_000_123n);
  });
  it('a hardware (PHC) stamp 1 µs after the sample: realtime 37 s earlier, then monotonic', () => {
    const hw = { ns: 1_700_000_037_500_001_000n, clock: 'hardware' as const };
    expect(phcToRealtime(hw.ns, offsets)).toBe(1_700_000_000_500_001_000n);
    expect(realtimeToPhc(1_700_000_000_500_001_000n, offsets)).toBe(hw.ns);
    expect(toRealtime(hw, offsets)).toBe(1_700_000_000_500_001_000n);
    expect(toMonotonic(hw, offsets)).toBe(1_000_000_001_000n);
  });
  it('a software stamp is already realtime', () => {
    const sw = { ns: 1_700_000_000_500_000_777n, clock: 'software' as const };
    expect(toRealtime(sw, offsets)).toBe(sw.ns);
    expect(toMonotonic(sw, offsets)).toBe(1_000_000_000_777n);
  });
  it('a hardware stamp without PHC offsets is refused', () => {
    expect(() => toMonotonic({ ns: 1n, clock: 'hardware' }, { ...offsets, phc: null })).toThrow(/PHC offset/);
  });
});

describe('describeTsInfo', () => {
  it('a NIC with a PHC: hardware and software both ways, raw clock, TX on/off, RX all/none', () => {
    // so_timestamping = TX_HW 1 | TX_SW 2 | RX_HW 4 | RX_SW 8 | SOFTWARE 16 | RAW_HW 64 = 95
    // tx_types = 1 << OFF | 1 << ON = 3; rx_filters = 1 << NONE | 1 << ALL = 3
    expect(describeTsInfo({ ok: true, code: null, soTimestamping: 95, phcIndex: 2, txTypes: 3, rxFilters: 3 })).toEqual({
      capabilities: ['hardware-transmit', 'software-transmit', 'hardware-receive', 'software-receive', 'software-system-clock', 'hardware-raw-clock'],
      txTypes: ['off', 'on'],
      rxFilters: ['none', 'all'],
      ptp: '/dev/ptp2',
    });
  });
  it('PTP-only RX filters (1 << 12 PTP_V2_EVENT): the NIC cannot stamp every frame', () => {
    expect(describeTsInfo({ ok: true, code: null, soTimestamping: 0, phcIndex: -1, txTypes: 0, rxFilters: (1 << 0) | (1 << 12) }).rxFilters).toEqual([
      'none',
      'ptpv2-event',
    ]);
    expect(ptpDevice(-1)).toBeNull();
  });
});
