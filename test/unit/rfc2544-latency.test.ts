/**
 * The RFC 2544 benchmark's latency steps, the pure parts: the load of each
 * step from the zero-loss rate, which cases get latency, and where the probe
 * payload lies in the frames the sink receives (from the header sizes of
 * RFC 9433's output, not from our own output), so the sink hands exactly the
 * probes to the stack.
 */
import { describe, expect, it } from 'vitest';
import { caseSetup, type CaseName, type ProbePlan } from '../../src/bench/rfc2544/cases.js';
import { latencySkip, stepRates } from '../../src/bench/rfc2544/latency.js';
import { MAC } from '../../src/bench/rfc2544/lab.js';
import { templateFrame } from '../../src/packet/probe-frames.js';

const ETH = 14;
const IPV4 = 20;
const IPV6 = 40;
const UDP = 8;
const GTPU_PSC = 8 + 8; // GTP-U header + PDU Session Container

describe('stepRates: the background load of each step', () => {
  it.each<[string, number, number[], number[]]>([
    ['10/50/90 % of 2.32 Mpps', 2_320_000, [10, 50, 90], [232_000, 1_160_000, 2_088_000]],
    ['rounded to a frame per second', 1001, [10, 50], [100, 501]],
    ['0 % is no load, 100 % the rate found', 3e6, [0, 100], [0, 3e6]],
    ['no rate found: no load', 0, [50], [0]],
  ])('%s', (_name, fps, percents, rates) => {
    expect(stepRates(fps, percents)).toEqual(percents.map((percent, i) => ({ percent, rate: rates[i] })));
  });

  it.each<[string, number, number[]]>([
    ['a step above 100 %', 1e6, [110]],
    ['a negative step', 1e6, [-1]],
    ['an infinite rate', Infinity, [10]],
  ])('refuses %s', (_name, fps, percents) => {
    expect(() => stepRates(fps, percents)).toThrow(RangeError);
  });
});

describe('latencySkip: which cases and results get latency', () => {
  const loads = { latencyLoads: [10, 50, 90] };
  it.each<[CaseName, number, { latencyLoads: number[] }, RegExp | undefined]>([
    ['uplink', 2e6, loads, undefined],
    ['downlink', 2e6, loads, undefined],
    ['kernel-ipv4', 1e6, loads, undefined],
    ['xdp-l3fwd', 2e6, loads, undefined],
    ['bidir', 3e6, loads, /two streams/],
    ['kernel-seg6', 1e6, loads, /plain inner IPv4/],
    ['uplink', 0, loads, /no zero-loss rate/],
    ['uplink', 2e6, { latencyLoads: [] }, /--no-latency/],
  ])('%s at %d frames/s', (name, fps, o, why) => {
    const r = latencySkip(caseSetup(name, 64), fps, o);
    if (why === undefined) expect(r).toBeUndefined();
    else expect(r).toMatch(why);
  });
});

describe('the probe plan of each case', () => {
  // Where the probe payload lies in what arrives at the sink: the output's headers, then inner IPv4 + UDP.
  it.each<[CaseName, 'uplink' | 'downlink', string, number]>([
    ['uplink', 'uplink', 'H.M.GTP4.D: Ethernet, IPv6 (no SRH)', ETH + IPV6 + IPV4 + UDP],
    ['downlink', 'downlink', 'End.M.GTP4.E: Ethernet, IPv4, UDP, GTP-U + PDU Session Container', ETH + IPV4 + UDP + GTPU_PSC + IPV4 + UDP],
    ['kernel-ipv4', 'uplink', 'GTP-U forwarded unchanged', ETH + IPV4 + UDP + GTPU_PSC + IPV4 + UDP],
    ['xdp-l3fwd', 'uplink', 'GTP-U forwarded unchanged', ETH + IPV4 + UDP + GTPU_PSC + IPV4 + UDP],
  ])('%s: %s probes, payload at %s', (name, dir, _out, off) => {
    const setup = caseSetup(name, 64);
    const plan = setup.probe as ProbePlan;
    expect(plan.dir).toBe(dir);
    expect(plan.outOff).toBe(off);
  });

  it.each<[CaseName]>([['uplink'], ['downlink'], ['kernel-ipv4'], ['xdp-l3fwd']])(
    '%s: the probe frames are the stream\'s flow and size: every byte before the inner UDP header is the generator\'s',
    (name) => {
      for (const size of [64, 1518]) {
        const setup = caseSetup(name, size);
        const s = setup.streams[0]!;
        const plan = setup.probe as ProbePlan;
        const { frame, payloadOffset } = templateFrame({
          dir: plan.dir, run: 1, size: s.gen.frame.length, udpPort: 47000,
          srcMac: Buffer.from((s.from === 'a' ? MAC.ea : MAC.eb).replaceAll(':', ''), 'hex'),
          dstMac: s.gen.frame.subarray(0, 6),
          ...(plan.uplink === undefined ? {} : { uplink: plan.uplink }),
          ...(plan.downlink === undefined ? {} : { downlink: plan.downlink }),
        });
        expect(frame.length).toBe(s.gen.frame.length);
        expect(frame.subarray(0, payloadOffset - UDP).toString('hex')).toBe(s.gen.frame.subarray(0, payloadOffset - UDP).toString('hex'));
      }
    },
  );
});
