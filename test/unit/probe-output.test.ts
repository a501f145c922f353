/**
 * Probe output writers: CSV exactly as expected; the CDF SVG parsed as XML
 * (well formed, one step per sample, coordinates in the picture) and
 * rendered to PNG with resvg.
 */
import { describe, expect, it } from 'vitest';
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import { cdfPoints, cdfSvg, niceTicks, samplesCsv, toCsv } from '../../src/probe/output.js';

// resvg ships a prebuilt binary per platform inside npm packages; without one for this machine the render test is skipped.
const resvg = await import('@resvg/resvg-js').catch(() => null);

describe('CSV', () => {
  it('RFC 4180 quoting, empty fields for null, bigint as digits', () => {
    expect(toCsv(['a', 'b'], [['x,y', 'he said "hi"'], [null, 5n], ['two\nlines', 1.5]])).toBe(
      'a,b\n"x,y","he said ""hi"""\n,5\n"two\nlines",1.5\n',
    );
  });
  it('raw samples: a lost packet has no rx stamp and no latency', () => {
    expect(
      samplesCsv([
        { seq: 0, txNs: 1796040984041671745n, rxNs: 1796040984041673929n, latencyNs: 2184, clock: 'software' },
        { seq: 1, txNs: 1796040984041688818n, rxNs: null, latencyNs: null, clock: 'software' },
      ]),
    ).toBe(
      'seq,tx_ns,rx_ns,latency_ns,clock\n' +
        '0,1796040984041671745,1796040984041673929,2184,software\n' +
        '1,1796040984041688818,,,software\n',
    );
  });
  it('a row of the wrong length is an error', () => {
    expect(() => toCsv(['a', 'b'], [['x']])).toThrow(/row 0 has 1 fields/);
  });
});

describe('CDF points and ticks', () => {
  it('one point per sample: (value, rank / n)', () => {
    expect(cdfPoints([3, 1, 2])).toEqual([
      [1, 1 / 3],
      [2, 2 / 3],
      [3, 1],
    ]);
  });
  it('more samples than maxPoints: nearest-rank quantiles j/maxPoints', () => {
    // n = 10, 4 points: ranks ceil(2.5) = 3, 5, ceil(7.5) = 8, 10.
    expect(cdfPoints([10, 20, 30, 40, 50, 60, 70, 80, 90, 100], 4)).toEqual([
      [30, 0.3],
      [50, 0.5],
      [80, 0.8],
      [100, 1],
    ]);
  });
  it('round ticks', () => {
    expect(niceTicks(0, 97)).toEqual([0, 20, 40, 60, 80, 100]);
    expect(niceTicks(1.2, 1.9)).toEqual([1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9]);
    expect(niceTicks(5, 5)).toEqual([4.4, 4.6, 4.8, 5, 5.2, 5.4, 5.6]);
  });
});

describe('CDF SVG', () => {
  // Two series in ns: 100 values 10..1000 µs-ish, 5000 values (drawn at 2000 quantiles).
  const a = Array.from({ length: 100 }, (_, i) => 10_000 + i * 1_000);
  const b = Array.from({ length: 5000 }, (_, i) => 20_000 + ((i * 7919) % 5000) * 30);
  const svg = cdfSvg(
    [
      { name: 'uplink <GTP-U → SRv6>', values: a },
      { name: 'downlink & back', values: b },
    ],
    { title: 'probe "lab" CDF' },
  );
  const parser = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: '' });

  it('is well-formed XML with an svg root, title and escaped names', () => {
    expect(XMLValidator.validate(svg)).toBe(true);
    const doc = parser.parse(svg) as { svg: Record<string, unknown> };
    expect(doc.svg).toMatchObject({ xmlns: 'http://www.w3.org/2000/svg', width: '720', height: '440', title: 'probe "lab" CDF' });
    expect(svg).toContain('uplink &lt;GTP-U → SRv6&gt;');
  });

  it('one step line per series: two vertices per sample, at most maxPoints samples, rising to the right', () => {
    const doc = parser.parse(svg) as { svg: { polyline: { class: string; 'data-series': string; 'data-points': string; points: string }[] } };
    const lines = doc.svg.polyline.filter((p) => p.class === 'cdf');
    expect(lines.map((l) => l['data-series'])).toEqual(['uplink <GTP-U → SRv6>', 'downlink & back']);
    expect(lines.map((l) => Number(l['data-points']))).toEqual([100, 2000]);
    for (const l of lines) {
      const v = l.points.split(' ').map((p) => p.split(',').map(Number) as [number, number]);
      expect(v.length).toBe(2 * Number(l['data-points']));
      // Inside the plot area (margins 72 left, 24 right, 44 top, 58 bottom).
      const outside = v.filter(([x, y]) => !(x >= 72 - 0.01 && x <= 720 - 24 + 0.01 && y >= 44 - 0.01 && y <= 440 - 58 + 0.01));
      expect(outside).toEqual([]);
      // x never goes back, the fraction never falls (y grows downwards).
      const back = v.filter((p, i) => i > 0 && (p[0] < v[i - 1]![0] || p[1] > v[i - 1]![1]));
      expect(back).toEqual([]);
      expect(v[0]![1]).toBeCloseTo(440 - 58, 1); // starts at 0 %
      expect(v[v.length - 1]![1]).toBeCloseTo(44, 1); // ends at 100 %
    }
  });

  it('has axes with round ticks and labels in the chosen unit', () => {
    // largest value 20,000 + 4,999 * 30 = 169,970 ns -> µs; ticks 0..180 µs by 20 (niceTicks(10, 169.97)).
    const doc = parser.parse(svg) as { svg: { g: { class: string; text?: { '#text': string | number }[] }[]; text: ({ class?: string; '#text': string } | string)[] } };
    const xt = doc.svg.g.find((g) => g.class === 'x-ticks')!.text!.map((t) => String(t['#text']));
    expect(xt).toEqual(['0', '20', '40', '60', '80', '100', '120', '140', '160', '180']);
    const yt = doc.svg.g.find((g) => g.class === 'y-ticks')!.text!.map((t) => String(t['#text']));
    expect(yt).toEqual(['0 %', '25 %', '50 %', '75 %', '100 %']);
    expect(svg).toContain('one-way latency (µs)</text>');
    expect(svg).toContain('fraction of packets ≤ x</text>');
  });

  it('no samples: still a valid picture that says so', () => {
    const empty = cdfSvg([{ name: 'none', values: [] }]);
    expect(XMLValidator.validate(empty)).toBe(true);
    expect(empty).toContain('no samples');
    expect(empty).toContain('data-points="0"');
  });

  it.skipIf(resvg === null)('renders to a PNG with the curves drawn (resvg)', () => {
    const r = new resvg!.Resvg(svg, { background: '#ffffff' });
    const img = r.render();
    expect([img.width, img.height]).toEqual([720, 440]);
    const png = img.asPng();
    expect(png.subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
    // Pixels in each series' colour: #1f77b4 and #d62728.
    const px = img.pixels;
    const near = (r0: number, g0: number, b0: number): number => {
      let n = 0;
      for (let i = 0; i < px.length; i += 4) {
        if (Math.abs(px[i]! - r0) < 12 && Math.abs(px[i + 1]! - g0) < 12 && Math.abs(px[i + 2]! - b0) < 12) n++;
      }
      return n;
    };
    expect(near(0x1f, 0x77, 0xb4)).toBeGreaterThan(200);
    expect(near(0xd6, 0x27, 0x28)).toBeGreaterThan(200);
  });
});
