/**
 * The fuzzer (test/fuzz/fuzz.ts): a short run against the real object must
 * find no violation, satisfy the counting identities and exercise both the
 * translation and the drop paths; and its checker must not be vacuous (it
 * flags broken translations built by hand from the model's own output).
 * The full run is `npm run fuzz -- --frames 100000 --seed 1`.
 */
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { buildCorpus, checkFrame, formatReport, fuzz, fuzzConfig, mutate, Rng, type Seed } from './fuzz/fuzz.js';
import { model } from './model/rfc9433.js';
import { DEFAULT_OBJECT } from '../src/dataplane/index.js';

const OBJECT = process.env['MUP_BPF_OBJECT'] ?? DEFAULT_OBJECT;
const haveObject = existsSync(OBJECT);
if (!haveObject) {
  console.warn(
    `\n${'*'.repeat(78)}\n*** SKIPPING the fuzz run of test/fuzz.test.ts: ${OBJECT} does not exist.\n` +
      `*** Build it with \`make bpf\`.\n${'*'.repeat(78)}\n`,
  );
}

const FRAMES = 5000;
const SEED = 20240611;

describe.skipIf(!haveObject)(`fuzz ${FRAMES} frames through ${OBJECT}`, () => {
  it('finds no violation, counts every frame once, and both translates and drops', () => {
    const r = fuzz({ frames: FRAMES, seed: SEED, object: OBJECT });
    const report = formatReport(r);
    expect(r.violationCount, report).toBe(0);
    expect(r.violations, report).toEqual([]);
    for (const k of r.counting) expect(k.counted, `${k.what}\n${report}`).toBe(k.expected);

    const v = r.verdicts;
    expect(v.aborted + v.redirect, report).toBe(0);
    expect(v.tx + v.drop + v.pass, report).toBe(FRAMES);
    expect(v.tx / FRAMES, report).toBeGreaterThan(0.1);
    expect(v.drop / FRAMES, report).toBeGreaterThan(0.1);
    expect(r.modelChecked, report).toBe(v.tx);
    // Both directions are translated, and many drop reasons are reached.
    expect(r.families['gtpu']!.tx, report).toBeGreaterThan(FRAMES / 20);
    expect(r.families['srv6']!.tx, report).toBeGreaterThan(FRAMES / 20);
    // ... GTP6 ones too (gtp6 local SIDs in the fuzz config; their rules count).
    expect(r.events['drop_srh_sl_not_one'] ?? 0, report).toBeGreaterThan(0);
    expect(r.events['drop_gtp6_not_gtpu'] ?? 0, report).toBeGreaterThan(0);
    expect(Object.keys(r.events).filter((e) => e.startsWith('drop_')).length, report).toBeGreaterThanOrEqual(12);
  });
});

describe('fuzz checker', () => {
  const cfg = fuzzConfig();
  const corpus = buildCorpus(cfg, new Rng(7));
  const seed = (prefix: string): Seed => {
    const s = corpus.find((x) => x.name.startsWith(prefix));
    if (s === undefined) throw new Error(`no seed ${prefix}*`);
    return s;
  };
  const translated = (s: Seed): Buffer => {
    const m = model(s.frame, cfg);
    if (m.kind !== 'translate') throw new Error(`${s.name}: the model does not translate it (${m.kind})`);
    return m.out;
  };

  it('is deterministic for a seed', () => {
    const run = (): string[] => {
      const rng = new Rng(99);
      const c = buildCorpus(cfg, rng);
      return Array.from({ length: 200 }, () => mutate(rng, rng.pick(c), c).frame.toString('hex'));
    };
    expect(run()).toEqual(run());
  });

  it('every valid GTP-U and SRv6 seed is one the model translates', () => {
    for (const s of corpus.filter((x) => x.family !== 'other')) {
      expect(model(s.frame, cfg).kind, s.name).toBe('translate');
    }
  });

  it('accepts the model translation and flags broken ones', () => {
    const up = seed('gtpu/always-seg4/');
    const down = seed('srv6/e-48/');
    const up6 = translated(up);
    const down4 = translated(down);
    expect(checkFrame(cfg, up.frame, 'tx', up6).reason).toBeNull();
    expect(checkFrame(cfg, down.frame, 'tx', down4).reason).toBeNull();

    const badCsum = Buffer.from(down4);
    badCsum[24] = badCsum[24]! ^ 1;
    expect(checkFrame(cfg, down.frame, 'tx', badCsum).reason).toMatch(/bad IPv4 header checksum/);

    const badPl = Buffer.from(up6);
    badPl.writeUInt16BE(badPl.readUInt16BE(18) + 1, 18);
    expect(checkFrame(cfg, up.frame, 'tx', badPl).reason).toMatch(/IPv6 payload length .* != frame length/);

    const badSrh = Buffer.from(up6);
    badSrh[55] = badSrh[55]! + 2; // hdr ext len
    expect(checkFrame(cfg, up.frame, 'tx', badSrh).reason).toMatch(/SRH/);

    const badUdp = Buffer.from(down4);
    badUdp.writeUInt16BE(badUdp.readUInt16BE(38) - 1, 38);
    expect(checkFrame(cfg, down.frame, 'tx', badUdp).reason).toMatch(/UDP length/);

    const wrongTeid = Buffer.from(down4);
    wrongTeid[49] = wrongTeid[49]! ^ 0x80;
    expect(checkFrame(cfg, down.frame, 'tx', wrongTeid).reason).toMatch(/differs from the model translation at byte 49 \(gtp teid\)/);

    const modified = Buffer.from(up.frame);
    modified[30] = modified[30]! ^ 1;
    expect(checkFrame(cfg, up.frame, 'pass', modified).reason).toMatch(/passed frame modified/);
    expect(checkFrame(cfg, up.frame, 'pass', up.frame).reason).toMatch(/passed a frame the model translates/);
    expect(checkFrame(cfg, up.frame, 'drop', Buffer.alloc(0)).reason).toMatch(/dropped a frame the model translates/);
    expect(checkFrame(cfg, up.frame, 'aborted', Buffer.alloc(0)).reason).toMatch(/ABORTED/);
    expect(checkFrame(cfg, up.frame, 'redirect', Buffer.alloc(0)).reason).toMatch(/REDIRECT/);

    // GTP-U over IPv6: End.M.GTP6.E's UDP checksum is checked, End.M.GTP6.D's SRH too.
    const e6 = seed('srv6/e6-64/');
    const gtp6 = translated(e6);
    expect(checkFrame(cfg, e6.frame, 'tx', gtp6).reason).toBeNull();
    const badCsum6 = Buffer.from(gtp6);
    badCsum6[gtp6.length - 1] = badCsum6[gtp6.length - 1]! ^ 0x10;
    expect(checkFrame(cfg, e6.frame, 'tx', badCsum6).reason).toMatch(/bad UDP checksum over IPv6/);
    const d6 = seed('gtpu6/di6-48-seg2-reduced/');
    const srv6 = translated(d6);
    expect(checkFrame(cfg, d6.frame, 'tx', srv6).reason).toBeNull();
    const badDa = Buffer.from(srv6);
    badDa[53] = badDa[53]! ^ 1;
    expect(checkFrame(cfg, d6.frame, 'tx', badDa).reason).toMatch(/DA is not segment list|differs from the model/);

    const arp = seed('other/arp');
    expect(checkFrame(cfg, arp.frame, 'pass', arp.frame).reason).toBeNull();
    expect(checkFrame(cfg, arp.frame, 'tx', up6).reason).toMatch(/IPv6 output from ethertype 0x806/);
  });
});
