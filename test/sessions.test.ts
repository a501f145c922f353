/**
 * H.M.Session.Encaps (the PE downlink, bpf/session.h) through the real
 * program (BPF_PROG_TEST_RUN). Inputs and expected outputs come from
 * test/fixtures/sessions.py (scapy and cases.py's RFC 9433 encoders, never
 * our output). Round trips run the session's output, MACs put back, through
 * End.M.GTP4.E of the same program, and check that it gives back the
 * session's gNB, UPF source, TEID, QFI, R and the inner packet bit for bit.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { openDataplane, type Dataplane } from '../src/dataplane/index.js';
import { caseExpectation, parseGtpu, runAndCheck, type Seen } from './helpers/packets.js';
import { describeMismatch, loadCases, type PacketCase } from './helpers/scapy.js';

const SESSIONS_SCRIPT = fileURLToPath(new URL('./fixtures/sessions.py', import.meta.url));
const file = await loadCases(SESSIONS_SCRIPT);

interface Want {
  readonly teid: number;
  readonly qfi: number;
  readonly rqi: number;
  readonly src: string;
  readonly dst: string;
  readonly inner: string;
}

function checkCounters(dp: Dataplane, seen: readonly Seen[]): void {
  const c = dp.counters();
  const want = new Map<string, bigint>();
  for (const s of seen) want.set(s.result.event ?? '(none)', (want.get(s.result.event ?? '(none)') ?? 0n) + 1n);
  const got: Record<string, bigint> = {};
  for (const [name, v] of Object.entries(c.events)) if (v.packets !== 0n || want.has(name)) got[name] = v.packets;
  expect(got).toEqual(Object.fromEntries(want));
  if (seen.some((s) => !s.ok)) return; // reported by the failing case itself
  const wantRules = new Map<string, bigint>();
  for (const s of seen) if (s.rule !== undefined) wantRules.set(s.rule, (wantRules.get(s.rule) ?? 0n) + 1n);
  const gotRules: Record<string, bigint> = {};
  for (const r of c.rules) if (r.packets !== 0n || wantRules.has(r.where)) gotRules[r.where] = r.packets;
  expect(gotRules, 'per-rule counters (which session / policy / local SID matched)').toEqual(Object.fromEntries(wantRules));
  const sessionPackets = [...wantRules].filter(([w]) => w.startsWith('sessions[')).reduce((a, [, n]) => a + n, 0n);
  expect(c.functions.h_m_session_encaps.packets, 'the function total is the sum of the session rules').toBe(sessionPackets);
}

for (const group of file.groups) {
  describe(`${group.name} (${group.cases.length} cases)`, () => {
    let dp: Dataplane;
    const seen: Seen[] = [];
    beforeAll(() => {
      dp = openDataplane({ config: parseConfig(group.config, group.name) });
    });
    afterAll(() => {
      dp?.close();
    });

    it.each(group.cases.map((c) => [c.name, c] as const))('%s', async (_name, c: PacketCase) => {
      const input = Buffer.from(c.input, 'hex');
      const r = await runAndCheck(dp, c.name, input, caseExpectation(c), (result, ok) =>
        seen.push({ name: c.name, input, result, ok, ...(c.rule === undefined ? {} : { rule: c.rule }) }),
      );
      const then = c.then;
      if (then === undefined) return;
      // The output itself (not the expected one), MACs put back, into End.M.GTP4.E.
      const fed = Buffer.concat([input.subarray(0, 12), r.out.subarray(12)]);
      const back = await runAndCheck(dp, `${c.name} (End.M.GTP4.E stage)`, fed, then, (result, ok) =>
        seen.push({ name: `${c.name}/then`, input: fed, result, ok, rule: then.rule }),
      );
      const want = (c as PacketCase & { want: Want }).want;
      const g = parseGtpu(back.out);
      const problems: string[] = [];
      const check = (what: string, w: unknown, got: unknown): void => {
        if (w !== got) problems.push(`${what}: session ${String(w)}, after End.M.GTP4.E ${String(got)}`);
      };
      check('TEID', want.teid, g.teid);
      check('QFI', want.qfi, g.qfi);
      check('R', want.rqi, g.rqi);
      check('IPv4 source (UPF)', want.src, g.src);
      check('IPv4 destination (gNB)', want.dst, g.dst);
      check('inner packet', want.inner, g.inner.toString('hex'));
      check('inner packet = the session input', input.subarray(14).toString('hex'), g.inner.toString('hex'));
      if (problems.length > 0) {
        throw new Error(await describeMismatch(`${c.name}: round trip lost information`, problems, input, null, back.out));
      }
    });

    it('counters: one event per frame, translated frames in the expected rule, the function total', () => {
      checkCounters(dp, seen);
    });
  });
}
