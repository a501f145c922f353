/**
 * The timeline of one relocation run as an SVG: per direction a panel with
 * the moved UE's frames per ms at site A and at site B (arrivals, in bins),
 * time on x from the relocation's API call (ms), the calls shaded and
 * marked. Drawn with the shared plot layer (src/plot/svg.ts).
 */
import { figureSvg, fmtNum, niceTicks, type Panel, type Span } from '../plot/svg.js';

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
  readonly spans: readonly Span[];
  readonly panels: readonly TimelinePanel[];
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

/** The API call (the policy PUT) is at 0: a red line in every panel. */
const CALL_COLOR = '#dd0000';
const MARK_COLOR = '#555555';

export function timelineSvg(s: TimelineSpec): string {
  // About ten x ticks (time reads better finely divided than the default six).
  const xTicks = niceTicks(s.from, s.to, 10)
    .filter((v) => v >= s.from && v <= s.to)
    .map((v) => ({ value: v, label: fmtNum(v) }));
  const panels = s.panels.map((p): Panel => {
    const bins = p.series.map((q) => binRate(q.t, s.from, s.to, s.binMs));
    const ymax = Math.max(1 / s.binMs, ...bins.flat()) * 1.1;
    return {
      title: p.title,
      x: { label: 'time from the API call (PUT /v1/policies, red line), ms', scale: 'linear', min: s.from, max: s.to, ticks: xTicks },
      y: { label: `frames per ms (${s.binMs} ms bins)`, scale: 'linear', min: 0, max: ymax },
      // A step a bin, from its start; the last bin ends at the edge.
      series: p.series.map((q, i) => {
        const b = bins[i]!;
        return {
          name: q.label,
          color: q.color,
          style: 'step',
          detail: `${q.t.length} frames`,
          points: [...b.map((v, j) => [s.from + j * s.binMs, v] as const), [s.to, b[b.length - 1]!] as const],
        };
      }),
      spans: s.spans,
      markers: [
        { x: 0, label: 'API call', color: CALL_COLOR },
        ...(p.marks ?? []).filter((m) => m.at >= s.from && m.at <= s.to).map((m) => ({ x: m.at, label: m.label, color: MARK_COLOR, labelAt: 'inside' as const })),
      ],
    };
  });
  return figureSvg({ title: s.title, subtitle: s.subtitle, panels, width: 900, panelHeight: 190, legendWidth: 250 });
}
