// Colour tables come from the server (the same 256 entries the tiles are rendered with), so a
// colour bar, an overview cell and a heatmap pixel of one value always agree.
import { api } from './api.js';

const tables = new Map();
const loaded = new Map();
const cssOf = new WeakMap();
let paletteList = null;

/** /api/colormaps: the scales and the palettes with their properties. */
export async function palettes() {
  if (!paletteList) paletteList = api('/api/colormaps');
  return paletteList;
}

/** The 256 RGB entries of a scale under a palette (null: the scale's default). */
export async function colorTable(scale, palette) {
  const key = `${scale}/${palette || ''}`;
  if (!tables.has(key)) {
    tables.set(key, api(`/api/colormap/${scale}`, palette ? { palette } : null).then((r) => {
      loaded.set(key, r.colors);
      return r.colors;
    }));
  }
  return tables.get(key);
}

/** The table colorTable() has already fetched, or null: a view can draw in colour on its first render. */
export function loadedColorTable(scale, palette) {
  return loaded.get(`${scale}/${palette || ''}`) || null;
}

/** Table entry for t in [0, 1] (the renderer's rounding). */
export function colorAt(colors, t) {
  const i = !(t > 0) ? 0 : t >= 1 ? 255 : Math.floor(t * 255 + 0.5);
  let css = cssOf.get(colors);
  if (!css) {
    css = colors.map((c) => `rgb(${c[0]},${c[1]},${c[2]})`);  // a grid of 10,000 cells asks 10,000 times
    cssOf.set(colors, css);
  }
  return css[i];
}

/** Paints a horizontal colour bar across a canvas. */
export function paintBar(canvas, colors) {
  const ctx = canvas.getContext('2d');
  const w = canvas.width, h = canvas.height;
  for (let x = 0; x < w; ++x) {
    const c = colors[Math.min(255, Math.floor((x / w) * 256))];
    ctx.fillStyle = `rgb(${c[0]},${c[1]},${c[2]})`;
    ctx.fillRect(x, 0, 1, h);
  }
}

/** Colours for categories (storage types): Okabe–Ito, distinguishable with colour-blindness. */
export const CATEGORY_COLORS = ['#0072B2', '#E69F00', '#009E73', '#CC79A7', '#56B4E9', '#D55E00', '#F0E442', '#999999', '#000000'];

/** The non-finite colours of the renderer: NaN magenta, +Inf orange, -Inf cyan. */
export const NON_FINITE = { nan: 'rgb(255,0,255)', pos_inf: 'rgb(255,140,0)', neg_inf: 'rgb(0,230,255)' };
