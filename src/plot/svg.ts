/**
 * SVG plotting primitives shared by the probe, the benchmarks and the lab:
 * a figure of stacked panels, each with its own x and y axis (linear or
 * log), step or line series, point markers, vertical markers (an event at
 * a time, e.g. an API call), shaded x spans (how long a call took) and
 * horizontal guides, and a legend to the right of each panel. Self-contained SVG 1.1: no script, no embedded
 * fonts (text uses the generic sans-serif family), white background.
 *
 * The markup says what it draws, so tests can check a plot without a
 * renderer's help: each panel is a `<g class="panel">`, each axis a
 * `<g class="axis" data-axis="x|y" data-scale="linear|log" data-min
 * data-max>` holding its `<text class="tick" data-value>` labels and its
 * `<text class="axis-label">`, each series a `<polyline class="series"
 * data-series data-points>`.
 *
 * The layer is below everything else in src/: it imports nothing of ours.
 */

export type Scale = 'linear' | 'log';

export interface Tick {
  readonly value: number;
  readonly label: string;
}

export interface Axis {
  /** The axis label, units included, e.g. "one-way latency (µs, log scale)". */
  readonly label: string;
  readonly scale: Scale;
  /** The range drawn (for log: both > 0). */
  readonly min: number;
  readonly max: number;
  /** Tick marks; default: round numbers (linear) or decades (log). */
  readonly ticks?: readonly Tick[];
  /** Grid lines at the ticks (default true). */
  readonly grid?: boolean;
}

export interface Series {
  readonly name: string;
  /** [x, y] in the axes' units, drawn in this order. */
  readonly points: readonly (readonly [number, number])[];
  /** 'line' (default): straight segments; 'step': horizontal to the next x, then vertical (a CDF). */
  readonly style?: 'line' | 'step';
  /** A dot at each point. */
  readonly dots?: boolean;
  readonly dashed?: boolean;
  /** Default: the palette in series order. */
  readonly color?: string;
  /** A second, smaller legend line under the name (sample count, maximum). */
  readonly detail?: string;
}

/** A vertical line at x across the panel, labelled at its top (an event in time). */
export interface Marker {
  readonly x: number;
  readonly label: string;
  readonly color?: string;
  /** 'top' (default): centred above the panel; 'inside': at the bottom of the plot, right of the line (for markers close to another). */
  readonly labelAt?: 'top' | 'inside';
}

/** A dashed horizontal line at y with a label at the right (p50, p99, ...). */
export interface Guide {
  readonly y: number;
  readonly label: string;
}

/** A shaded stretch of x across the panel (a time an operation took), in the legend under its label. */
export interface Span {
  readonly from: number;
  readonly to: number;
  readonly label: string;
  readonly color: string;
}

export interface Panel {
  /** Shown above the panel. */
  readonly title?: string;
  readonly x: Axis;
  readonly y: Axis;
  readonly series: readonly Series[];
  readonly markers?: readonly Marker[];
  readonly guides?: readonly Guide[];
  /** Drawn under the grid and the data; clipped to the x range. */
  readonly spans?: readonly Span[];
  /** Lines of text under the legend (sample counts, notes). */
  readonly notes?: readonly string[];
}

export interface Figure {
  readonly title: string;
  /** A smaller line under the title (when and where it was measured). */
  readonly subtitle?: string;
  readonly panels: readonly Panel[];
  /** Total width (default 820). */
  readonly width?: number;
  /** Height of each panel's plot area (default 240). */
  readonly panelHeight?: number;
  /** Width of the legend column right of the plots (default 200). */
  readonly legendWidth?: number;
}

export const PALETTE = [
  '#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#17becf', '#e377c2', '#7f7f7f', '#bcbd22', '#393b79', '#637939',
] as const;

export function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c]!);
}

/** A number short: 6 significant digits, no trailing zeros, no float noise. */
export function fmtNum(v: number): string {
  return Number(v.toPrecision(6)).toString();
}

/** Round ticks (1, 2 or 5 times a power of ten) covering lo..hi. */
export function niceTicks(lo: number, hi: number, target = 6): number[] {
  if (!(hi > lo)) {
    const pad = lo === 0 ? 1 : Math.abs(lo) * 0.1;
    return niceTicks(lo - pad, hi + pad, target);
  }
  const raw = (hi - lo) / target;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  // 1.2 / 0.1 is 11.999999999999998: a tolerance keeps it at 12.
  const first = Math.floor(lo / step + 1e-9);
  const last = Math.ceil(hi / step - 1e-9);
  const ticks: number[] = [];
  for (let k = first; k <= last; k++) ticks.push(Number((k * step).toPrecision(12)));
  return ticks;
}

/** The decades that enclose lo..hi (both > 0): [10^floor(log lo), 10^ceil(log hi)], at least one decade wide. */
export function decadeRange(lo: number, hi: number): [number, number] {
  if (!(lo > 0 && hi > 0)) throw new RangeError(`a log axis needs values > 0, got ${lo}..${hi}`);
  const a = Math.floor(Math.log10(lo) + 1e-9);
  let b = Math.ceil(Math.log10(hi) - 1e-9);
  if (b <= a) b = a + 1;
  return [Number((10 ** a).toPrecision(12)), Number((10 ** b).toPrecision(12))];
}

/** One tick per decade from min to max (log axis). */
export function decadeTicks(min: number, max: number, label: (v: number) => string = fmtNum): Tick[] {
  const out: Tick[] = [];
  for (let e = Math.ceil(Math.log10(min) - 1e-9); e <= Math.floor(Math.log10(max) + 1e-9); e++) {
    const v = Number((10 ** e).toPrecision(12));
    out.push({ value: v, label: label(v) });
  }
  return out;
}

export type TimeUnit = 'ns' | 'µs' | 'ms' | 's';
export const UNIT_NS: Record<TimeUnit, number> = { ns: 1, µs: 1e3, ms: 1e6, s: 1e9 };

/** The unit for an axis or column of ns values whose largest is `maxNs`: the numbers stay below 10,000. */
export function timeUnit(maxNs: number): TimeUnit {
  if (!(maxNs >= 1e4)) return 'ns';
  if (maxNs < 1e7) return 'µs';
  if (maxNs < 1e10) return 'ms';
  return 's';
}

function defaultTicks(a: Axis): Tick[] {
  if (a.ticks !== undefined) return [...a.ticks];
  if (a.scale === 'log') return decadeTicks(a.min, a.max);
  return niceTicks(a.min, a.max)
    .filter((v) => v >= a.min - 1e-9 * Math.abs(a.max - a.min) && v <= a.max + 1e-9 * Math.abs(a.max - a.min))
    .map((v) => ({ value: v, label: fmtNum(v) }));
}

/** Maps a value of an axis to 0..1 along it (clamped: a point off the range is drawn at its edge). */
export function scaleOf(a: Axis): (v: number) => number {
  if (a.scale === 'log') {
    if (!(a.min > 0 && a.max > a.min)) throw new RangeError(`log axis "${a.label}": range ${a.min}..${a.max} must be > 0 and increasing`);
    const l0 = Math.log10(a.min);
    const span = Math.log10(a.max) - l0;
    return (v) => (v <= a.min ? 0 : v >= a.max ? 1 : (Math.log10(v) - l0) / span);
  }
  if (!(a.max > a.min)) throw new RangeError(`axis "${a.label}": range ${a.min}..${a.max} must be increasing`);
  return (v) => Math.max(0, Math.min(1, (v - a.min) / (a.max - a.min)));
}

/** The figure as an SVG document. */
export function figureSvg(f: Figure): string {
  const W = f.width ?? 820;
  const ph = f.panelHeight ?? 240;
  const legendW = f.legendWidth ?? 200;
  const m = { left: 78, right: legendW + 16, top: 30, bottom: 52 };
  const pw = W - m.left - m.right;
  const titleH = f.subtitle === undefined ? 36 : 52;
  const panelH = m.top + ph + m.bottom;
  const H = titleH + f.panels.length * panelH + 6;
  const c = (n: number): string => n.toFixed(2);
  const o: string[] = [];
  o.push(`<?xml version="1.0" encoding="UTF-8"?>`);
  o.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  o.push(`<title>${esc(f.title)}</title>`);
  o.push(`<rect x="0" y="0" width="${W}" height="${H}" fill="#ffffff"/>`);
  o.push(`<text class="figure-title" x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${esc(f.title)}</text>`);
  if (f.subtitle !== undefined) o.push(`<text class="figure-subtitle" x="${W / 2}" y="40" text-anchor="middle" fill="#444444" font-size="11">${esc(f.subtitle)}</text>`);
  let colorIndex = 0;
  f.panels.forEach((p, pi) => {
    const top = titleH + pi * panelH + m.top;
    const sx0 = scaleOf(p.x);
    const sy0 = scaleOf(p.y);
    const sx = (v: number): number => m.left + sx0(v) * pw;
    const sy = (v: number): number => top + (1 - sy0(v)) * ph;
    o.push(`<g class="panel" data-panel="${pi}"${p.title === undefined ? '' : ` data-title="${esc(p.title)}"`}>`);
    if (p.title !== undefined) o.push(`<text class="panel-title" x="${m.left}" y="${top - 10}" font-weight="bold">${esc(p.title)}</text>`);
    const xt = defaultTicks(p.x);
    const yt = defaultTicks(p.y);
    for (const sp of p.spans ?? []) {
      const a = Math.max(p.x.min, sp.from);
      const b = Math.min(p.x.max, sp.to);
      if (!(b > a)) continue;
      o.push(
        `<rect class="span" data-from="${sp.from}" data-to="${sp.to}" x="${c(sx(a))}" y="${top}" width="${c(Math.max(1, sx(b) - sx(a)))}" height="${ph}" fill="${sp.color}" fill-opacity="0.25"><title>${esc(sp.label)}</title></rect>`,
      );
    }
    // Grid first, data over it.
    o.push(`<g class="grid" stroke="#e4e4e4" stroke-width="1">`);
    if (p.x.grid !== false) for (const t of xt) o.push(`<line x1="${c(sx(t.value))}" y1="${top}" x2="${c(sx(t.value))}" y2="${top + ph}"/>`);
    if (p.y.grid !== false) for (const t of yt) o.push(`<line x1="${m.left}" y1="${c(sy(t.value))}" x2="${m.left + pw}" y2="${c(sy(t.value))}"/>`);
    o.push(`</g>`);
    for (const g of p.guides ?? []) {
      o.push(`<line class="guide" x1="${m.left}" y1="${c(sy(g.y))}" x2="${m.left + pw}" y2="${c(sy(g.y))}" stroke="#999999" stroke-dasharray="4 3"/>`);
      o.push(`<text class="guide-label" x="${m.left + pw - 4}" y="${c(sy(g.y) - 3)}" text-anchor="end" fill="#666666" font-size="10">${esc(g.label)}</text>`);
    }
    // Axes with their ticks and labels.
    const axis = (which: 'x' | 'y', a: Axis, ticks: Tick[]): void => {
      o.push(`<g class="axis" data-axis="${which}" data-scale="${a.scale}" data-min="${a.min}" data-max="${a.max}">`);
      if (which === 'x') {
        o.push(`<line x1="${m.left}" y1="${top + ph}" x2="${m.left + pw}" y2="${top + ph}" stroke="#000000"/>`);
        for (const t of ticks) {
          const x = c(sx(t.value));
          o.push(`<line x1="${x}" y1="${top + ph}" x2="${x}" y2="${top + ph + 5}" stroke="#000000"/>`);
          o.push(`<text class="tick" data-value="${t.value}" x="${x}" y="${top + ph + 18}" text-anchor="middle">${esc(t.label)}</text>`);
        }
        o.push(`<text class="axis-label" x="${m.left + pw / 2}" y="${top + ph + 38}" text-anchor="middle">${esc(a.label)}</text>`);
      } else {
        o.push(`<line x1="${m.left}" y1="${top}" x2="${m.left}" y2="${top + ph}" stroke="#000000"/>`);
        for (const t of ticks) {
          const y = c(sy(t.value));
          o.push(`<line x1="${m.left - 5}" y1="${y}" x2="${m.left}" y2="${y}" stroke="#000000"/>`);
          o.push(`<text class="tick" data-value="${t.value}" x="${m.left - 8}" y="${c(sy(t.value) + 4)}" text-anchor="end">${esc(t.label)}</text>`);
        }
        const cy = top + ph / 2;
        o.push(`<text class="axis-label" x="16" y="${c(cy)}" text-anchor="middle" transform="rotate(-90 16 ${c(cy)})">${esc(a.label)}</text>`);
      }
      o.push(`</g>`);
    };
    axis('x', p.x, xt);
    axis('y', p.y, yt);
    // Series.
    const legend: { name: string; color: string; dashed: boolean; detail: string | undefined }[] = [];
    for (const s of p.series) {
      const color = s.color ?? PALETTE[colorIndex++ % PALETTE.length]!;
      const v: string[] = [];
      let prevY: number | undefined;
      for (const [x, y] of s.points) {
        if (!Number.isFinite(x) || !Number.isFinite(y)) throw new RangeError(`series "${s.name}": point (${x}, ${y}) is not finite`);
        if (s.style === 'step' && prevY !== undefined) v.push(`${c(sx(x))},${c(sy(prevY))}`);
        v.push(`${c(sx(x))},${c(sy(y))}`);
        prevY = y;
      }
      const dash = s.dashed === true ? ' stroke-dasharray="6 3"' : '';
      o.push(
        `<polyline class="series" data-series="${esc(s.name)}" data-points="${s.points.length}" fill="none" stroke="${color}" stroke-width="2"${dash} points="${v.join(' ')}"/>`,
      );
      if (s.dots === true) for (const [x, y] of s.points) o.push(`<circle cx="${c(sx(x))}" cy="${c(sy(y))}" r="2.8" fill="${color}"/>`);
      legend.push({ name: s.name, color, dashed: s.dashed === true, detail: s.detail });
    }
    for (const mk of p.markers ?? []) {
      const x = c(sx(mk.x));
      const color = mk.color ?? '#000000';
      o.push(`<line class="marker" data-x="${mk.x}" x1="${x}" y1="${top}" x2="${x}" y2="${top + ph}" stroke="${color}" stroke-width="1.2" stroke-dasharray="2 2"/>`);
      if (mk.labelAt === 'inside') o.push(`<text class="marker-label" x="${c(sx(mk.x) + 3)}" y="${top + ph - 6}" fill="${color}" font-size="10">${esc(mk.label)}</text>`);
      else o.push(`<text class="marker-label" x="${x}" y="${top - 2}" text-anchor="middle" fill="${color}" font-size="10">${esc(mk.label)}</text>`);
    }
    if (p.series.every((s) => s.points.length === 0)) {
      o.push(`<text x="${m.left + pw / 2}" y="${top + ph / 2}" text-anchor="middle" fill="#666666">no samples</text>`);
    }
    // Legend right of the plot.
    const lx = m.left + pw + 14;
    o.push(`<g class="legend">`);
    let ly = top + 8;
    for (const l of legend) {
      o.push(`<line x1="${lx}" y1="${ly}" x2="${lx + 22}" y2="${ly}" stroke="${l.color}" stroke-width="2"${l.dashed ? ' stroke-dasharray="6 3"' : ''}/>`);
      o.push(`<text x="${lx + 28}" y="${ly + 4}">${esc(l.name)}</text>`);
      if (l.detail !== undefined) {
        ly += 13;
        o.push(`<text class="detail" x="${lx + 28}" y="${ly + 4}" fill="#555555" font-size="10">${esc(l.detail)}</text>`);
      }
      ly += 17;
    }
    for (const sp of p.spans ?? []) {
      o.push(`<rect x="${lx}" y="${ly - 4}" width="22" height="8" fill="${sp.color}" fill-opacity="0.25"/>`);
      o.push(`<text x="${lx + 28}" y="${ly + 4}">${esc(sp.label)}</text>`);
      ly += 17;
    }
    (p.notes ?? []).forEach((n, i) => {
      o.push(`<text class="note" x="${lx}" y="${ly + i * 15 + 4}" fill="#555555" font-size="11">${esc(n)}</text>`);
    });
    o.push(`</g>`);
    o.push(`</g>`);
  });
  o.push(`</svg>`);
  return o.join('\n') + '\n';
}
