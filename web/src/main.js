// The Tensormorph viewer: tensor browser, deep-zoom heatmap (OpenSeadragon), statistics with a
// histogram (uPlot) and the Compute panel. All numbers come from the server's JSON API.
import OpenSeadragon from 'openseadragon';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import './app.css';

import { $, api, q, escapeHtml, fmt } from './util.js';
import { initCompare } from './compare.js';

const state = { ckpt: 0, tensors: [], tensor: null, info: null, consent: '', seenConsent: 0, consentQueue: [], consentShown: null, lastRecord: 0, viewer: null, plot: null,
  computeEdits: 0, pendingEdits: 0 };

// ---- tensor browser --------------------------------------------------------------------------
async function loadCheckpoints() {
  const { checkpoints } = await api('/api/checkpoints');
  $('checkpoint').innerHTML = checkpoints.map((c) => `<option value="${c.id}">${c.name} (${c.format}, ${c.tensors})</option>`).join('');
  $('checkpoint').onchange = () => { state.ckpt = Number($('checkpoint').value); loadTensors(); };
  await loadTensors();
}

async function loadTensors() {
  const { tensors } = await api('/api/tensors?' + q({ ckpt: state.ckpt }));
  state.tensors = tensors;
  renderTensorList();
}

function renderTensorList() {
  const filter = $('filter').value.trim();
  const groups = new Map();
  for (const t of state.tensors) {
    if (filter && !t.name.includes(filter)) continue;
    if (!groups.has(t.group)) groups.set(t.group, []);
    groups.get(t.group).push(t);
  }
  const box = $('tensors');
  box.replaceChildren();
  for (const [group, list] of groups) {
    const head = document.createElement('div');
    head.className = 'group';
    head.textContent = group;
    box.append(head);
    for (const t of list) {
      const row = document.createElement('div');
      row.className = 'tensor' + (state.tensor && state.tensor.name === t.name ? ' selected' : '');
      row.dataset.name = t.name;
      row.textContent = t.name;
      const badges = [`<span class="badge">${t.dtype}</span>`, `<span class="badge">[${t.shape.join(', ')}]</span>`];
      if (t.nonfinite > 0) badges.push(`<span class="badge bad" title="NaN or Inf present">NaN/Inf ${t.nonfinite}</span>`);
      if (t.outlier_score > 10) badges.push(`<span class="badge outlier" title="absmax / std">outlier ${t.outlier_score.toFixed(0)}σ</span>`);
      row.insertAdjacentHTML('beforeend', badges.join(''));
      row.onclick = () => selectTensor(t);
      box.append(row);
    }
  }
}

// ---- heatmap ---------------------------------------------------------------------------------
function defaultRange() {
  const s = state.info && state.info.summary;
  if (!s) return [-1, 1];
  const stat = $('stat').value, cmap = $('cmap').value;
  if (cmap === 'log') return s.range.log;
  if (stat === 'absmax' || stat === 'std') return s.range.magnitude[1] > 0 ? s.range.magnitude : [0, 1];
  return cmap === 'diverging' ? s.range.diverging : s.range.sequential;
}

function tileQuery() {
  const p = { stat: $('stat').value, cmap: $('cmap').value, lo: $('lo').value, hi: $('hi').value };
  if (state.consent) p.consent = state.consent;
  return q(p);
}

async function selectTensor(t) {
  state.tensor = t;
  state.consent = '';
  renderTensorList();
  state.info = await api('/api/tensor?' + q({ ckpt: state.ckpt, tensor: t.name }));
  $('title').textContent = `${t.name}  ${t.dtype} [${t.shape.join(', ')}]`;
  const [lo, hi] = defaultRange();
  $('lo').value = lo; $('hi').value = hi;
  openHeatmap();
  drawColorbar();
  loadStats(false);
}

function openHeatmap() {
  const z = state.info.zoom, t = state.tensor, ckpt = state.ckpt;
  const source = {
    width: z.width, height: z.height, tileSize: z.tile_size, tileOverlap: 0, minLevel: z.min_level, maxLevel: z.max_level,
    getTileUrl: (level, x, y) => `/api/tile/${ckpt}/${t.index}/${level}/${x}/${y}.png?${tileQuery()}`,
  };
  if (!state.viewer) {
    state.viewer = OpenSeadragon({
      element: $('viewer'), showNavigationControl: false, imageSmoothingEnabled: false, maxZoomPixelRatio: 2,
      visibilityRatio: 0.2, minZoomImageRatio: 0.5, animationTime: 0.4, tileSources: source,
    });
    state.viewer.addHandler('tile-load-failed', () => pollCompute());
    state.viewer.addHandler('update-viewport', () => { requestAnimationFrame(drawValues); requestAnimationFrame(drawStrips); scheduleValueFetch(); });
    state.viewer.addHandler('animation-finish', () => scheduleValueFetch());
    new OpenSeadragon.MouseTracker({ element: state.viewer.canvas, moveHandler: (e) => hover(e.position) });
  } else {
    state.viewer.open(source);
  }
  valueWindow.data = null;
  window.__tm = { ...(window.__tm || {}), viewer: state.viewer, OpenSeadragon, shownValues: null, pixelsPerElement: z.pixels_per_element };
}

// ---- values drawn as text in magnified cells ---------------------------------------------------
// Past the deepest level each element is a square of many screen pixels; once it is large enough
// and few enough are visible (the server's window is at most 64 x 64), their exact values are
// fetched (tm.decode@1) and drawn over the heatmap.
const kMinCellPixels = 28, kMaxWindow = 64;
const valueWindow = { data: null, wanted: '', timer: 0 };

function visibleElements() {
  if (!state.viewer || !state.info) return null;
  const vp = state.viewer.viewport, z = state.info.zoom, ppe = z.pixels_per_element;
  const cell = vp.viewportToImageZoom(vp.getZoom(true)) * ppe;
  if (cell < kMinCellPixels) return null;
  const b = vp.viewportToImageRectangle(vp.getBounds(true));
  const r0 = Math.max(0, Math.floor(b.y / ppe)), c0 = Math.max(0, Math.floor(b.x / ppe));
  const r1 = Math.min(state.tensor.rows, Math.ceil((b.y + b.height) / ppe));
  const c1 = Math.min(state.tensor.cols, Math.ceil((b.x + b.width) / ppe));
  if (r1 <= r0 || c1 <= c0 || r1 - r0 > kMaxWindow || c1 - c0 > kMaxWindow) return null;
  return { r0, c0, rows: r1 - r0, cols: c1 - c0, cell };
}

function scheduleValueFetch() {
  clearTimeout(valueWindow.timer);
  valueWindow.timer = setTimeout(async () => {
    const v = visibleElements();
    const have = valueWindow.data;
    if (!v || (have && have.tensor === state.tensor.name && v.r0 >= have.row && v.c0 >= have.col &&
                v.r0 + v.rows <= have.row + have.rows && v.c0 + v.cols <= have.col + have.cols)) return drawValues();
    const key = `${state.tensor.name}/${v.r0}/${v.c0}/${v.rows}/${v.cols}`;
    valueWindow.wanted = key;
    try {
      const w = await api('/api/values?' + q({ ckpt: state.ckpt, tensor: state.tensor.name, row: v.r0, col: v.c0, rows: v.rows, cols: v.cols }));
      if (valueWindow.wanted !== key) return;
      valueWindow.data = { ...w, tensor: state.tensor.name };
      pollCompute();
    } catch (e) { $('hover').textContent = e.message; }
    drawValues();
  }, 80);
}

function drawValues() {
  const canvas = $('values');
  const box = $('viewer').getBoundingClientRect(), ratio = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(box.width * ratio) || canvas.height !== Math.round(box.height * ratio)) {
    canvas.width = Math.round(box.width * ratio); canvas.height = Math.round(box.height * ratio);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, box.width, box.height);
  const v = visibleElements(), w = valueWindow.data;
  if (!v || !w || w.tensor !== state.tensor.name) { if (window.__tm) window.__tm.shownValues = null; return; }
  const vp = state.viewer.viewport, ppe = state.info.zoom.pixels_per_element;
  const font = Math.max(7, Math.min(14, v.cell / 4.6));
  ctx.font = `${font}px monospace`; ctx.textAlign = 'center'; ctx.textBaseline = 'middle';
  ctx.lineWidth = 3; ctx.strokeStyle = 'rgba(255,255,255,0.85)'; ctx.fillStyle = '#111';
  let drawn = 0;
  for (let r = Math.max(v.r0, w.row); r < Math.min(v.r0 + v.rows, w.row + w.rows); ++r) {
    for (let c = Math.max(v.c0, w.col); c < Math.min(v.c0 + v.cols, w.col + w.cols); ++c) {
      const i = (r - w.row) * w.cols + (c - w.col);
      const value = w.values[i];
      const label = value === null ? w.text[i] : Number(value).toPrecision(v.cell >= 72 ? 5 : v.cell >= 44 ? 3 : 2);
      const p = vp.imageToViewerElementCoordinates(new OpenSeadragon.Point((c + 0.5) * ppe, (r + 0.5) * ppe));
      ctx.strokeText(label, p.x, p.y); ctx.fillText(label, p.x, p.y);
      ++drawn;
    }
  }
  window.__tm.shownValues = { row: w.row, col: w.col, rows: w.rows, cols: w.cols, text: w.text, drawn };
}

function reloadTiles() { if (state.viewer && state.info) { const c = state.viewer.viewport.getCenter(); const z = state.viewer.viewport.getZoom(); openHeatmap(); state.viewer.addOnceHandler('open', () => { state.viewer.viewport.zoomTo(z, null, true); state.viewer.viewport.panTo(c, true); }); } }

let hoverTimer = 0;
function hover(position) {
  if (!state.info) return;
  const vp = state.viewer.viewport, z = state.info.zoom;
  const p = vp.viewerElementToImageCoordinates(position);
  const row = Math.floor(p.y / z.pixels_per_element), col = Math.floor(p.x / z.pixels_per_element);
  if (row < 0 || col < 0 || row >= state.tensor.rows || col >= state.tensor.cols) return;
  const screenPerElement = vp.viewportToImageZoom(vp.getZoom(true)) * z.pixels_per_element;
  clearTimeout(hoverTimer);
  hoverTimer = setTimeout(async () => {
    try {
      if (screenPerElement >= 4) {
        const v = await api('/api/value?' + q({ ckpt: state.ckpt, tensor: state.tensor.name, row, col }));
        $('hover').innerHTML = `(<span id="hover-row">${row}</span>, <span id="hover-col">${col}</span>) = <span id="hover-value">${v.text}</span>`;
      } else {
        const level = Math.max(z.min_level, Math.min(z.max_level, z.max_level + Math.floor(Math.log2(screenPerElement / z.pixels_per_element))));
        const s = await api('/api/cell?' + q({ ckpt: state.ckpt, tensor: state.tensor.name, level, row, col }));
        $('hover').textContent = `rows ${s.rows[0]}–${s.rows[1] - 1}, cols ${s.cols[0]}–${s.cols[1] - 1}: mean ${fmt(s.mean)} std ${fmt(s.std)} min ${fmt(s.min)} max ${fmt(s.max)} absmax ${fmt(s.absmax)} NaN ${s.nan} Inf ${s.pos_inf + s.neg_inf}`;
      }
    } catch (e) { $('hover').textContent = e.message; }
  }, 60);
}

async function drawColorbar() {
  const { colors } = await api('/api/colormap/' + $('cmap').value);
  const ctx = $('colorbar').getContext('2d');
  colors.forEach((c, i) => { ctx.fillStyle = `rgb(${c[0]},${c[1]},${c[2]})`; ctx.fillRect(i, 0, 1, 12); });
  $('colorbar').title = `${$('lo').value} … ${$('hi').value}`;
}

// ---- statistics --------------------------------------------------------------------------------
async function loadStats(recompute) {
  const t = state.tensor;
  const s = await api('/api/stats?' + q({ ckpt: state.ckpt, tensor: t.name, recompute: recompute ? 1 : 0 }));
  const rows = [['source', s.source], ['count', s.count], ['finite', s.finite], ['NaN', s.nan], ['+Inf', s.pos_inf], ['-Inf', s.neg_inf],
    ['zeros', s.zeros], ['min', fmt(s.min)], ['max', fmt(s.max)], ['absmax', fmt(s.absmax)], ['mean', fmt(s.mean)], ['std', fmt(s.std)]];
  $('stats').innerHTML = rows.map(([k, v]) => `<tr><th>${k}</th><td data-stat="${k}">${v}</td></tr>`).join('');
  await loadDistribution(t);
  await loadOutliers(t);
  await loadStrips(t);
  pollCompute();
}

// ---- distribution: exact quantiles and a zoomable histogram ------------------------------------
const percent = (p) => `${Number((p * 100).toPrecision(6))}%`;

// Exact when within the budgets; otherwise the server answers 409 with the ladder, which the
// consent dialog offers (it calls this again with the rung chosen).
async function loadDistribution(t, consent) {
  state.quantiles = null;
  const params = { ckpt: state.ckpt, tensor: t.name };
  if (consent) params.consent = consent;
  const res = await fetch('/api/quantiles?' + q(params));
  const d = await res.json();
  if (t !== state.tensor) return;
  if (res.status === 409 && d.needs_consent) {
    $('quantiles').tBodies[0].innerHTML = '<tr><td colspan="2" class="needs-consent">exact quantiles need consent: ' +
      `${escapeHtml(d.reason)}</td></tr>`;
    $('quantiles-note').textContent = '';
    showConsent(d);
    const [lo, hi] = defaultRange();
    await drawHistogram(t, lo, hi);
    return;
  }
  if (!res.ok) throw new Error(d.error || res.statusText);
  state.quantiles = d;
  if (window.__tm) window.__tm.quantiles = { tensor: t.name, ...d };
  const approximate = d.exactness === 'approximate';
  const rows = d.quantiles.map((v) => [percent(v.probability), v.linear, v.interval]);
  if (d.median_absolute_deviation !== undefined) rows.push(['MAD', d.median_absolute_deviation]);
  $('quantiles').tBodies[0].innerHTML = d.finite === 0 ? '<tr><td colspan="2">no finite values</td></tr>'
    : rows.map(([k, v, iv]) => `<tr data-p="${k}"${iv ? ` title="within [${fmt(iv[0])}, ${fmt(iv[1])}]"` : ''}><th>${k}</th>` +
      `<td>${approximate ? '~' : ''}${fmt(v)}</td></tr>`).join('');
  $('quantiles-note').textContent = approximate ? `approximate (${d.rung}, consented): ${d.error_bound}` : '';
  const [lo, hi] = d.finite > 0 ? d.robust_range : [-1, 1];
  await drawHistogram(t, lo, hi);
}

// The histogram of [lo, hi] (64 bins, exact counts), with what lies outside said in words.
async function drawHistogram(t, lo, hi) {
  if (!(lo < hi)) { const c = Number.isFinite(lo) ? lo : 0; lo = c - 0.5; hi = c + 0.5; }
  const h = await api('/api/histogram?' + q({ ckpt: state.ckpt, tensor: t.name, bins: 64, lo, hi }));
  if (t !== state.tensor) return;
  state.histRange = [h.lo, h.hi];
  const width = (h.hi - h.lo) / h.bins.length;
  const xs = h.bins.map((_, i) => h.lo + (i + 0.5) * width);
  const log = $('hist-log').checked;
  // A log axis cannot show zero: empty bins are drawn as gaps.
  const ys = h.bins.map((c) => (log && c === 0 ? null : c));
  if (state.plot) state.plot.destroy();
  state.plot = new uPlot({
    width: 400, height: 170, legend: { show: false },
    scales: { x: { time: false, range: [h.lo, h.hi] }, y: log ? { distr: 3, log: 10 } : {} },
    // A log axis labels its decades only (uPlot ticks every integer multiple in between).
    axes: [{ values: (u, splits) => splits.map((v) => fmt(v)) },
      { size: 60, values: (u, splits) => splits.map((v) => (!log || Number.isInteger(Math.log10(v)) ? fmt(v) : '')) }],
    cursor: { drag: { x: true, y: false, setScale: false } },
    hooks: { setSelect: [(u) => {
      if (u.select.width < 3) return;
      const a = u.posToVal(u.select.left, 'x'), b = u.posToVal(u.select.left + u.select.width, 'x');
      u.setSelect({ width: 0, height: 0 }, false);
      drawHistogram(state.tensor, a, b);
    }] },
    series: [{}, { label: 'count', fill: 'rgba(70,110,200,0.5)', stroke: 'rgb(70,110,200)', paths: uPlot.paths.bars({ size: [1, 100] }) }],
  }, [xs, ys], $('histogram'));
  $('hist-range').textContent = `${fmt(h.lo)} … ${fmt(h.hi)}`;
  $('hist-outside').textContent = `below: ${h.below} · above: ${h.above} · NaN: ${h.nan}`;
}

$('hist-log').onchange = () => { if (state.tensor && state.histRange) drawHistogram(state.tensor, ...state.histRange); };
$('hist-reset').onclick = () => { if (state.quantiles && state.quantiles.finite > 0) drawHistogram(state.tensor, ...state.quantiles.robust_range); };
$('hist-full').onclick = () => {
  const d = state.quantiles;
  if (d && d.finite > 0) drawHistogram(state.tensor, d.quantiles[0].linear, d.quantiles[d.quantiles.length - 1].linear);
};

// ---- outliers: the largest magnitudes and the outlier channels, each a click from the heatmap --------
async function loadOutliers(t) {
  const o = await api('/api/outliers?' + q({ ckpt: state.ckpt, tensor: t.name, k: 20 }));
  if (t !== state.tensor) return;
  if (window.__tm) window.__tm.outliers = { tensor: t.name, ...o };
  $('outliers').tBodies[0].innerHTML = o.top_k.map((e, i) =>
    `<tr data-row="${e.row}" data-col="${e.col}"><td>${i + 1}</td><td>${e.row}</td><td>${e.col}</td><td>${fmt(e.value)}</td></tr>`).join('');
  $('outlier-channels').tBodies[0].innerHTML = o.outlier_channels.length === 0
    ? '<tr><td colspan="4">none (no |x| ≥ 6, no norm far above the rest)</td></tr>'
    : o.outlier_channels.slice(0, 50).map((c) =>
      `<tr data-axis="${c.axis}" data-index="${c.index}"><td>${c.axis} ${c.index}</td><td>${fmt(c.absmax)}</td><td>${fmt(c.l2)}</td><td>${c.why.join(', ')}</td></tr>`).join('');
  for (const tr of $('outliers').tBodies[0].rows) tr.onclick = () => showElement(Number(tr.dataset.row), Number(tr.dataset.col));
  for (const tr of $('outlier-channels').tBodies[0].rows) {
    if (tr.dataset.axis) tr.onclick = () => showChannel(tr.dataset.axis, Number(tr.dataset.index));
  }
}

// Zooms the heatmap onto a rectangle of elements and outlines it.
function highlight(row, col, rows, cols, zoomToIt) {
  const vp = state.viewer.viewport, ppe = state.info.zoom.pixels_per_element;
  const rect = vp.imageToViewportRectangle(col * ppe, row * ppe, cols * ppe, rows * ppe);
  state.viewer.clearOverlays();
  const box = document.createElement('div');
  box.className = 'highlight';
  box.id = 'highlight';
  state.viewer.addOverlay({ element: box, location: rect });
  zoomToIt(vp, rect);
}

function showElement(row, col) {
  highlight(row, col, 1, 1, (vp, rect) => {
    const center = new OpenSeadragon.Point(rect.x + rect.width / 2, rect.y + rect.height / 2);
    vp.zoomTo(vp.imageToViewportZoom(1.0), center, true);
    vp.panTo(center, true);
  });
}

// A whole row or column, fitted into view (its length fills the viewer).
function showChannel(axis, index) {
  const m = state.info, fit = (vp, rect) => vp.fitBoundsWithConstraints(rect, true);
  if (axis === 'row') highlight(index, 0, 1, m.cols, fit);
  else highlight(0, index, m.rows, 1, fit);
}

// ---- marginal strips: a statistic of every row and column beside the heatmap, following its zoom --------
async function loadStrips(t) {
  const stat = $('strips').value;
  state.strips = null;
  if (stat !== 'off') {
    const c = await api('/api/channels?' + q({ ckpt: state.ckpt, tensor: t.name, stat }));
    if (t !== state.tensor) return;
    const max = (v) => v.reduce((m, x) => (x > m ? x : m), 0);
    state.strips = { stat, rows: c.rows, cols: c.cols, rowMax: max(c.rows), colMax: max(c.cols) };
    if (window.__tm) window.__tm.strips = { tensor: t.name, ...state.strips };
  }
  drawStrips();
}

// Each strip pixel shows the largest value of the channels under it, as a bar from the heatmap's edge.
function drawStrips() {
  for (const id of ['strip-rows', 'strip-cols']) {
    const canvas = $(id), box = canvas.getBoundingClientRect();
    canvas.width = box.width; canvas.height = box.height;
    canvas.getContext('2d').clearRect(0, 0, canvas.width, canvas.height);
    canvas.style.display = state.strips ? '' : 'none';
  }
  const s = state.strips;
  if (!s || !state.viewer || !state.info) return;
  const vp = state.viewer.viewport, ppe = state.info.zoom.pixels_per_element;
  const draw = (canvas, values, top, along) => {
    const ctx = canvas.getContext('2d'), n = along ? canvas.height : canvas.width, depth = along ? canvas.width : canvas.height;
    ctx.fillStyle = 'rgb(200,40,120)';
    for (let p = 0; p < n; ++p) {
      const a = vp.viewerElementToImageCoordinates(new OpenSeadragon.Point(along ? 0 : p, along ? p : 0));
      const b = vp.viewerElementToImageCoordinates(new OpenSeadragon.Point(along ? 0 : p + 1, along ? p + 1 : 0));
      const i0 = Math.max(0, Math.floor((along ? a.y : a.x) / ppe)), i1 = Math.min(values.length, Math.ceil((along ? b.y : b.x) / ppe));
      let m = -1;
      for (let i = i0; i < i1; ++i) if (values[i] > m) m = values[i];
      if (m < 0 || !(top > 0)) continue;
      const len = Math.max(1, Math.round((m / top) * depth));
      if (along) ctx.fillRect(depth - len, p, len, 1); else ctx.fillRect(p, depth - len, 1, len);
    }
  };
  draw($('strip-rows'), s.rows, s.rowMax, true);
  draw($('strip-cols'), s.cols, s.colMax, false);
}

$('strips').onchange = () => { if (state.tensor) loadStrips(state.tensor); };

// ---- the Compute panel ---------------------------------------------------------------------------
function constraintsFromToggles() {
  const prefer = [], never = [];
  document.querySelectorAll('#backends input').forEach((box) => { if (box.checked) (box.dataset.kind === 'prefer' ? prefer : never).push(box.dataset.backend); });
  return { prefer, never };
}

async function pollCompute() {
  // A poll that was already on its way when the user toggled a constraint carries the old state:
  // it must not undo the click (the poll after that change's POST shows the new state).
  const edits = state.computeEdits;
  const c = await api('/api/compute');
  const current = edits === state.computeEdits && state.pendingEdits === 0;
  if (current) $('compute-mode').textContent = c.constraints.mode === 'auto' ? 'Compute: Auto' : `Compute: ${c.constraints.mode}`;
  const body = $('backends').tBodies[0];
  if (body.dataset.names !== c.backends.map((b) => b.name).join()) {
    body.dataset.names = c.backends.map((b) => b.name).join();
    body.innerHTML = c.backends.map((b) => `<tr><td>${b.name}</td><td>${b.device}</td>` +
      `<td><input type="checkbox" data-kind="prefer" data-backend="${b.name}" aria-label="prefer ${b.name}"></td>` +
      `<td><input type="checkbox" data-kind="never" data-backend="${b.name}" aria-label="never ${b.name}"></td></tr>`).join('');
    body.querySelectorAll('input').forEach((box) => { box.onchange = setConstraints; });
  }
  if (current) body.querySelectorAll('input').forEach((box) => { box.checked = c.constraints[box.dataset.kind].includes(box.dataset.backend); });
  const rows = c.records.slice(-40).reverse().map((r) => `<tr data-op="${r.op}" data-backend="${r.backend}"><td>${r.sequence}</td><td>${r.op}</td><td>${r.backend}</td>` +
    `<td title="${r.reason_detail.replace(/"/g, '&quot;')}">${r.reason}${r.reason === 'fallback' ? ': ' + r.reason_detail : ''}</td><td>${fmt(r.estimated_ms)}</td><td>${fmt(r.measured_ms)}</td>` +
    `<td>${r.bytes_moved}</td><td>${r.exactness}</td></tr>`);
  $('records').tBodies[0].innerHTML = rows.join('');
  const fresh = c.consent_requests.filter((r) => r.sequence > state.seenConsent);
  if (fresh.length) state.seenConsent = fresh[fresh.length - 1].sequence;
  fresh.forEach(showConsent);
}

async function setConstraints() {
  state.computeEdits += 1;
  state.pendingEdits += 1;
  try {
    await api('/api/compute', { method: 'POST', body: JSON.stringify(constraintsFromToggles()) });
  } finally {
    state.pendingEdits -= 1;
  }
  pollCompute();
}

// The memory budget applies to the next operation (an exact result over it asks for consent).
// Toggles and the budget change only this server; "Save as default" writes them to the settings
// file that later commands read.
async function loadBudget() {
  const s = await api('/api/settings');
  const value = (s.running || s.values)['compute.memory_budget'] || '';
  $('budget').value = value === '0' ? '' : value;
  $('save-default').title = `write the constraints and the memory budget to ${s.file}`;
}

async function setBudget() {
  const value = $('budget').value.trim() || '0';
  try {
    const r = await api('/api/settings', { method: 'POST', body: JSON.stringify({ key: 'compute.memory_budget', value }) });
    $('budget-note').textContent = `applies ${r.applies}`;
  } catch (e) {
    $('budget-note').textContent = String(e.message || e);
  }
  reloadTiles();
}

async function saveAsDefault() {
  $('save-note').textContent = '';
  try {
    // What the server runs with now (including an `only` from --compute, which has no toggle).
    const { constraints } = await api('/api/compute');
    const { prefer, never, only } = constraints;
    await api('/api/compute', { method: 'POST', body: JSON.stringify({ prefer, never, only, persist: true }) });
    const { running } = await api('/api/settings');
    const value = running['compute.memory_budget'] || '0';
    await api('/api/settings', { method: 'POST', body: JSON.stringify({ key: 'compute.memory_budget', value, persist: true }) });
    $('save-note').textContent = 'saved as default';
  } catch (e) {
    $('save-note').textContent = String(e.message || e);
  }
}

// A rung chosen for quantiles reloads the distribution with it; one for a render, the tiles. A
// request that arrives while the dialog is open waits its turn (once per operation and tensor);
// one for a tensor no longer shown is dropped.
const consentKey = (r) => `${r.op}\u0000${r.tensor}`;
function showConsent(request) {
  if ($('consent').open) {
    if (state.consentShown !== consentKey(request) && !state.consentQueue.some((r) => consentKey(r) === consentKey(request))) {
      state.consentQueue.push(request);
    }
    return;
  }
  if (request.tensor && state.tensor && request.tensor !== state.tensor.name) return showNextConsent();
  state.consentShown = consentKey(request);
  $('consent-reason').textContent = `${request.op} on ${request.tensor}: ${request.reason}`;
  $('consent-rungs').innerHTML = request.ladder.map((r) => `<li><button data-rung="${escapeHtml(r.id)}">use ${escapeHtml(r.id)} on ${escapeHtml(r.backend)}</button> — ` +
    `${escapeHtml(r.computes)}; ${escapeHtml(r.error_bound)}; about ${fmt(r.estimated_ms)} ms</li>`).join('');
  $('consent-rungs').querySelectorAll('button').forEach((b) => {
    b.onclick = () => {
      $('consent').close();
      if (request.op === 'quantiles') {
        if (state.tensor && state.tensor.name === request.tensor) loadDistribution(state.tensor, b.dataset.rung);
      } else {
        state.consent = b.dataset.rung;
        reloadTiles();
      }
    };
  });
  $('consent').showModal();
}

// ---- wiring ---------------------------------------------------------------------------------------
$('filter').oninput = renderTensorList;
for (const id of ['stat', 'cmap']) $(id).onchange = () => { const [lo, hi] = defaultRange(); $('lo').value = lo; $('hi').value = hi; drawColorbar(); reloadTiles(); };
for (const id of ['lo', 'hi']) $(id).onchange = () => { drawColorbar(); reloadTiles(); };
// The colour range from the exact quantiles (0.1% to 99.9%) once they are in, else from the statistics.
function robustRange() {
  const d = state.quantiles, stat = $('stat').value, cmap = $('cmap').value;
  if (!d || d.finite === 0 || cmap === 'log' || stat === 'absmax' || stat === 'std') return defaultRange();
  const [a, b] = d.robust_range;
  if (cmap === 'diverging') { const r = Math.max(Math.abs(a), Math.abs(b)); return r > 0 ? [-r, r] : defaultRange(); }
  return a < b ? [a, b] : defaultRange();
}
$('robust').onclick = () => { const [lo, hi] = robustRange(); $('lo').value = lo; $('hi').value = hi; drawColorbar(); reloadTiles(); };
$('recompute').onclick = () => state.tensor && loadStats(true);
$('consent-cancel').onclick = () => $('consent').close();
function showNextConsent() {
  const next = state.consentQueue.shift();
  if (next) showConsent(next);
}
$('consent').addEventListener('close', () => { state.consentShown = null; setTimeout(showNextConsent, 0); });
$('budget').onchange = setBudget;
$('save-default').onclick = saveAsDefault;
setInterval(() => pollCompute().catch(() => {}), 1500);
loadCheckpoints().then(pollCompute).then(loadBudget).catch(() => {});
initCompare();
