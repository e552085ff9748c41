// The viewer's state as signals, and the URL that holds it: every view a person can share is a
// URL (checkpoint, view, tensor, pixel statistic, colour scale and palette, range, zoom, centre),
// history entries for moves between views and tensors, quiet replacement for zoom and pan.
import { signal, computed, batch } from '@preact/signals';

export const VIEWS = ['overview', 'tensor', 'metadata', 'compare'];

/** /api/checkpoints. */
export const checkpoints = signal([]);
/** The checkpoint shown (its id). */
export const ckpt = signal(0);
/** /api/tensors of the shown checkpoint, with `byName` added. */
export const model = signal(null);
/** overview | tensor | metadata | compare. */
export const view = signal('overview');
/** The selected tensor's name, or null. */
export const tensorName = signal(null);
/** Heatmap settings chosen by the user; null fields take the tensor's defaults. */
export const heat = signal({ stat: null, scale: null, palette: null, lo: null, hi: null });
/** The heatmap's zoom and centre (OpenSeadragon viewport units), when known. */
export const viewport = signal(null);
/** The checkpoint compared against (Compare mode and the overview's difference), or null. */
export const compareWith = signal(null);
/** The overview's cell statistic. */
export const overviewStat = signal('std');
/** The tree's search text. */
export const search = signal('');
/** Whether the Compute drawer is open. */
export const drawerOpen = signal(false);
/** light | dark. */
export const theme = signal(initialTheme());
/** The last /api/compute answer. */
export const computeState = signal(null);
/** Operations waiting for the user's consent: {op, tensor, reason, ladder, onChoose}. */
export const consentQueue = signal([]);
/** Whether the inspector's Spectrum section is open (an SVD per tensor opened: off until asked,
 *  then remembered in this browser). */
export const spectrumOpen = signal(localStorage.getItem('tm-spectrum-open') === '1');

/** Opens or closes the Spectrum section for every tensor from now on. */
export function setSpectrumOpen(open) {
  spectrumOpen.value = open;
  localStorage.setItem('tm-spectrum-open', open ? '1' : '0');
}

/** The selected tensor's /api/tensors entry. */
export const currentTensor = computed(() => {
  const m = model.value;
  return m && tensorName.value ? m.byName.get(tensorName.value) || null : null;
});

function initialTheme() {
  const saved = localStorage.getItem('tm-theme');
  if (saved === 'light' || saved === 'dark') return saved;
  return window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}

/** Switches light/dark and remembers the choice in this browser. */
export function toggleTheme() {
  theme.value = theme.value === 'dark' ? 'light' : 'dark';
  localStorage.setItem('tm-theme', theme.value);
}

// ---- the URL ------------------------------------------------------------------------------------
const numberOrNull = (v) => (v === null || v === undefined || v === '' || !Number.isFinite(Number(v)) ? null : Number(v));

/** The state a URL describes (fields absent from it are undefined). */
export function parseUrl(search) {
  const p = new URLSearchParams(search);
  const out = {};
  if (p.has('ckpt')) out.ckpt = numberOrNull(p.get('ckpt')) ?? 0;
  if (p.has('view') && VIEWS.includes(p.get('view'))) out.view = p.get('view');
  if (p.has('tensor')) out.tensor = p.get('tensor');
  out.heat = { stat: p.get('stat'), scale: p.get('scale'), palette: p.get('palette'), lo: numberOrNull(p.get('lo')), hi: numberOrNull(p.get('hi')) };
  const zoom = numberOrNull(p.get('zoom')), cx = numberOrNull(p.get('cx')), cy = numberOrNull(p.get('cy'));
  out.viewport = zoom !== null && cx !== null && cy !== null ? { zoom, cx, cy } : null;
  if (p.has('b')) out.compareWith = numberOrNull(p.get('b'));
  if (p.has('ostat')) out.overviewStat = p.get('ostat');
  return out;
}

/** The URL of the current state. */
export function currentUrl() {
  const p = new URLSearchParams();
  p.set('ckpt', ckpt.value);
  p.set('view', view.value);
  if (tensorName.value) p.set('tensor', tensorName.value);
  if (view.value === 'tensor') {
    const h = heat.value;
    for (const k of ['stat', 'scale', 'palette']) if (h[k]) p.set(k, h[k]);
    if (h.lo !== null && h.hi !== null) { p.set('lo', String(h.lo)); p.set('hi', String(h.hi)); }
    const v = viewport.value;
    if (v) { p.set('zoom', round(v.zoom)); p.set('cx', round(v.cx)); p.set('cy', round(v.cy)); }
  }
  if (compareWith.value !== null) p.set('b', compareWith.value);
  if (view.value === 'overview' && overviewStat.value !== 'std') p.set('ostat', overviewStat.value);
  return `${location.pathname}?${p.toString()}`;
}

const round = (x) => String(Number(x.toPrecision(9)));

/** Applies a parsed URL to the state. */
export function applyUrl(u) {
  batch(() => {
    if (u.ckpt !== undefined) ckpt.value = u.ckpt;
    if (u.view) view.value = u.view;
    tensorName.value = u.tensor ?? null;
    heat.value = u.heat || { stat: null, scale: null, palette: null, lo: null, hi: null };
    viewport.value = u.viewport || null;
    if (u.compareWith !== undefined) compareWith.value = u.compareWith;
    if (u.overviewStat) overviewStat.value = u.overviewStat;
  });
}

/** Moves somewhere new (a history entry): view, tensor or checkpoint. A new tensor starts from
 *  its default heatmap settings and a fitted view unless `keep` says otherwise. */
export function go({ view: v, tensor, ckpt: c, keepHeat = false } = {}) {
  batch(() => {
    if (c !== undefined && c !== ckpt.value) { ckpt.value = c; tensorName.value = null; }
    if (tensor !== undefined && tensor !== tensorName.value) {
      tensorName.value = tensor;
      if (!keepHeat) heat.value = { stat: null, scale: null, palette: null, lo: null, hi: null };
      viewport.value = null;
    }
    if (v !== undefined) view.value = v;
  });
  history.pushState(null, '', currentUrl());
}

let replaceTimer = 0;
/** Rewrites the URL for a change that is no move of its own (zoom, pan, colours): debounced. */
export function syncUrl() {
  clearTimeout(replaceTimer);
  replaceTimer = setTimeout(() => history.replaceState(null, '', currentUrl()), 150);
}

/** Sets heatmap settings (merged) and records them in the URL. */
export function setHeat(patch) {
  heat.value = { ...heat.value, ...patch };
  syncUrl();
}

/** Queues a consent request; `onChoose(rung)` runs when the user picks a rung. */
export function askConsent(request) {
  const key = `${request.op}\u0000${request.tensor}`;
  if (consentQueue.value.some((r) => `${r.op}\u0000${r.tensor}` === key)) return;
  consentQueue.value = [...consentQueue.value, request];
}
