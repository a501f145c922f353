/**
 * The timeline of one relocation run as an SVG: per direction a panel with
 * the moved UE's frames per ms at site A and at site B (arrivals, in bins),
 * time on x from the relocation's API call (ms), the calls marked. Plain
 * SVG with no dependency; one function, so a shared plotting module can
 * replace it.
 */

export interface TimelineSeries {
  readonly label: string;
  readonly color: string;
  /** Arrival times, ms from the API call. */
  readonly t: readonly number[];
}

export interface TimelinePanel {
  readonly title: string;
  readonly series: readonly TimelineSeries[];
  /** Vertical markers (ms from the call), e.g. the first frame at B. */
  readonly marks?: readonly { readonly at: number; readonly label: string }[];
}

export interface TimelineSpec {
  readonly title: string;
  readonly subtitle: string;
  /** x range, ms from the API call. */
  readonly from: number;
  readonly to: number;
  /** Bin width, ms. */
  readonly binMs: number;
  /** Shaded spans: the API calls, ms from the policy call (which starts at 0). */
  readonly spans: readonly { readonly from: number; readonly to: number; readonly label: string; readonly color: string }[];
  readonly panels: readonly TimelinePanel[];
}

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** 1, 2, 5 x 10^k ticks covering [lo, hi], about `n` of them. */
export function niceTicks(lo: number, hi: number, n = 6): number[] {
  const span = hi - lo;
  if (!(span > 0)) return [lo];
  const raw = span / n;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw) ?? 10 * p;
  const out: number[] = [];
  for (let x = Math.ceil(lo / step) * step; x <= hi + step * 1e-9; x += step) out.push(Math.round(x / step) * step || 0); // no -0
  return out;
}

/** Frames per ms in bins of `binMs` from `from` to `to`. */
export function binRate(t: readonly number[], from: number, to: number, binMs: number): number[] {
  const n = Math.max(1, Math.ceil((to - from) / binMs));
  const out = new Array<number>(n).fill(0);
  for (const x of t) {
    const i = Math.floor((x - from) / binMs);
    if (i >= 0 && i < n) out[i]! += 1;
  }
  return out.map((c) => c / binMs);
}

export function timelineSvg(s: TimelineSpec): string {
  const W = 900;
  const left = 70;
  const right = 20;
  const top = 60;
  const panelH = 190;
  const gap = 50;
  const bottom = 50;
  const H = top + s.panels.length * panelH + (s.panels.length - 1) * gap + bottom;
  const pw = W - left - right;
  const x = (ms: number): number => left + ((ms - s.from) / (s.to - s.from)) * pw;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${esc(s.title)}</text>`,
    `<text x="${W / 2}" y="40" text-anchor="middle" fill="#444" font-size="11">${esc(s.subtitle)}</text>`,
  ];
  const xt = niceTicks(s.from, s.to, 10);
  s.panels.forEach((p, k) => {
    const y0 = top + k * (panelH + gap);
    const bins = p.series.map((q) => binRate(q.t, s.from, s.to, s.binMs));
    const ymax = Math.max(1 / s.binMs, ...bins.flat()) * 1.1;
    const y = (v: number): number => y0 + panelH - (v / ymax) * panelH;
    out.push(`<g class="panel" data-title="${esc(p.title)}">`);
    for (const sp of s.spans) {
      const a = Math.max(s.from, sp.from);
      const b = Math.min(s.to, sp.to);
      if (b > a) out.push(`<rect class="span" x="${x(a).toFixed(1)}" y="${y0}" width="${Math.max(1, x(b) - x(a)).toFixed(1)}" height="${panelH}" fill="${sp.color}" fill-opacity="0.25"><title>${esc(sp.label)}</title></rect>`);
    }
    out.push(`<rect x="${left}" y="${y0}" width="${pw}" height="${panelH}" fill="none" stroke="#000"/>`);
    out.push(`<text x="${left}" y="${y0 - 8}" font-weight="bold">${esc(p.title)}</text>`);
    for (const v of niceTicks(0, ymax, 4)) {
      if (v > ymax) continue;
      out.push(`<line x1="${left - 4}" x2="${left}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="#000"/><text x="${left - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${+v.toPrecision(3)}</text>`);
    }
    out.push(`<text transform="translate(18 ${y0 + panelH / 2}) rotate(-90)" text-anchor="middle">frames per ms (${s.binMs} ms bins)</text>`);
    for (const v of xt) out.push(`<line x1="${x(v).toFixed(1)}" x2="${x(v).toFixed(1)}" y1="${y0 + panelH}" y2="${y0 + panelH + 4}" stroke="#000"/><text x="${x(v).toFixed(1)}" y="${y0 + panelH + 16}" text-anchor="middle">${v}</text>`);
    // The API call (the policy PUT) starts at 0.
    out.push(`<line class="call" x1="${x(0).toFixed(1)}" x2="${x(0).toFixed(1)}" y1="${y0}" y2="${y0 + panelH}" stroke="#d00" stroke-width="1.5"/>`);
    for (const m of p.marks ?? []) {
      if (m.at < s.from || m.at > s.to) continue;
      out.push(`<line class="mark" x1="${x(m.at).toFixed(1)}" x2="${x(m.at).toFixed(1)}" y1="${y0}" y2="${y0 + panelH}" stroke="#555" stroke-dasharray="4 3"/><text x="${(x(m.at) + 3).toFixed(1)}" y="${y0 + panelH - 6}" fill="#555">${esc(m.label)}</text>`);
    }
    p.series.forEach((q, i) => {
      const b = bins[i]!;
      let d = `M${x(s.from).toFixed(1)},${y(0).toFixed(1)}`;
      b.forEach((v, j) => {
        const xa = x(s.from + j * s.binMs);
        const xb = x(Math.min(s.to, s.from + (j + 1) * s.binMs));
        d += ` L${xa.toFixed(1)},${y(v).toFixed(1)} L${xb.toFixed(1)},${y(v).toFixed(1)}`;
      });
      out.push(`<path class="series" data-label="${esc(q.label)}" d="${d}" fill="none" stroke="${q.color}" stroke-width="1.5"/>`);
      out.push(`<rect x="${left + pw - 250}" y="${y0 + 8 + i * 16}" width="12" height="3" fill="${q.color}"/><text x="${left + pw - 232}" y="${y0 + 13 + i * 16}">${esc(`${q.label} (${q.t.length} frames)`)}</text>`);
    });
    out.push('</g>');
  });
  const yb = top + s.panels.length * (panelH + gap) - gap;
  out.push(`<text x="${left + pw / 2}" y="${yb + 34}" text-anchor="middle">time from the API call (PUT /v1/policies, red line), ms</text>`);
  s.spans.forEach((sp, i) => out.push(`<rect x="${left + i * 260}" y="${yb + 40}" width="12" height="8" fill="${sp.color}" fill-opacity="0.25"/><text x="${left + 16 + i * 260}" y="${yb + 48}">${esc(sp.label)}</text>`));
  out.push('</svg>');
  return out.join('\n') + '\n';
}
