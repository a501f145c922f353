/**
 * Reading back the plots of src/plot/svg.ts: the panels, axes, ticks and
 * series the markup declares (parsed from the SVG text), and the picture
 * rendered to pixels with resvg (a real SVG renderer) to check that what
 * is declared is drawn.
 */
import { XMLValidator } from 'fast-xml-parser';

export interface AxisInfo {
  scale: 'linear' | 'log';
  min: number;
  max: number;
  ticks: { value: number; label: string }[];
  label: string;
}
export interface PanelInfo {
  title: string | undefined;
  x: AxisInfo;
  y: AxisInfo;
  series: { name: string; points: number; color: string; coords: [number, number][] }[];
  markers: number[];
}
export interface SvgInfo {
  width: number;
  height: number;
  title: string;
  panels: PanelInfo[];
}

const unesc = (s: string): string =>
  s.replace(/&(amp|lt|gt|quot|apos);/g, (_m, e: string) => ({ amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" })[e]!);

function axisOf(panel: string, which: 'x' | 'y'): AxisInfo {
  const m = new RegExp(`<g class="axis" data-axis="${which}" data-scale="(linear|log)" data-min="([^"]+)" data-max="([^"]+)">([\\s\\S]*?)</g>`).exec(panel);
  if (m === null) throw new Error(`no ${which} axis in panel`);
  const body = m[4]!;
  const ticks = [...body.matchAll(/<text class="tick" data-value="([^"]+)"[^>]*>([^<]*)<\/text>/g)].map((t) => ({ value: Number(t[1]), label: unesc(t[2]!) }));
  const label = /<text class="axis-label"[^>]*>([^<]*)<\/text>/.exec(body)?.[1];
  if (label === undefined) throw new Error(`no ${which} axis label`);
  return { scale: m[1] as 'linear' | 'log', min: Number(m[2]), max: Number(m[3]), ticks, label: unesc(label) };
}

/** The structure of a figure; throws if the SVG is not well-formed XML. */
export function inspectSvg(svg: string): SvgInfo {
  const valid = XMLValidator.validate(svg);
  if (valid !== true) throw new Error(`SVG is not well formed: ${JSON.stringify(valid)}`);
  const head = /<svg [^>]*width="(\d+)" height="(\d+)"/.exec(svg)!;
  const title = unesc(/<title>([^<]*)<\/title>/.exec(svg)?.[1] ?? '');
  const panels = svg.split('<g class="panel"').slice(1).map((p): PanelInfo => {
    const t = /^ data-panel="\d+"(?: data-title="([^"]*)")?/.exec(p);
    const series = [...p.matchAll(/<polyline class="series" data-series="([^"]*)" data-points="(\d+)" fill="none" stroke="([^"]+)"[^>]* points="([^"]*)"/g)].map((s) => ({
      name: unesc(s[1]!),
      points: Number(s[2]),
      color: s[3]!,
      coords: s[4]!.split(' ').filter((x) => x !== '').map((xy) => xy.split(',').map(Number) as [number, number]),
    }));
    const markers = [...p.matchAll(/<line class="marker" data-x="([^"]+)"/g)].map((x) => Number(x[1]));
    return { title: t?.[1] === undefined ? undefined : unesc(t[1]), x: axisOf(p, 'x'), y: axisOf(p, 'y'), series, markers };
  });
  return { width: Number(head[1]), height: Number(head[2]), title, panels };
}

export interface Rendered {
  width: number;
  height: number;
  png: Buffer;
  /** Pixels within 12 per channel of #rrggbb. */
  count(hex: string): number;
  /** Pixels that are not (near) white. */
  inked(): number;
}

// resvg ships a prebuilt binary per platform inside npm packages.
const resvg = await import('@resvg/resvg-js').catch(() => null);
export const canRender = resvg !== null;

export function render(svg: string): Rendered {
  if (resvg === null) throw new Error('@resvg/resvg-js has no binary for this platform');
  const img = new resvg.Resvg(svg, { background: '#ffffff' }).render();
  const px = img.pixels;
  return {
    width: img.width,
    height: img.height,
    png: img.asPng(),
    count(hex: string): number {
      const r0 = parseInt(hex.slice(1, 3), 16);
      const g0 = parseInt(hex.slice(3, 5), 16);
      const b0 = parseInt(hex.slice(5, 7), 16);
      let n = 0;
      for (let i = 0; i < px.length; i += 4) {
        if (Math.abs(px[i]! - r0) < 12 && Math.abs(px[i + 1]! - g0) < 12 && Math.abs(px[i + 2]! - b0) < 12) n++;
      }
      return n;
    },
    inked(): number {
      let n = 0;
      for (let i = 0; i < px.length; i += 4) if (px[i]! < 235 || px[i + 1]! < 235 || px[i + 2]! < 235) n++;
      return n;
    },
  };
}
