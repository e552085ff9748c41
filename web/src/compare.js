// Compare mode: two served checkpoints side by side. The most-changed table (/api/diff), the A | B |
// A−B heatmaps of one tensor with zoom and pan kept in step (A−B always on the diverging map,
// centred on zero), and the quantization view: per-tensor error figures, the error histogram and
// the anatomy of the block under a clicked cell (/api/quant-error, /api/block).
import OpenSeadragon from 'openseadragon';
import uPlot from 'uplot';

import { $, api, q, escapeHtml, fmt } from './util.js';

const cmp = { checkpoints: [], a: 0, b: 1, sort: 'rel_fro', diff: null, row: null, viewers: {}, syncing: false, plot: null, quant: null, block: null };
const kMetrics = ['rel_fro', 'max_abs', 'rmse', 'cosine', 'snr_db', 'differing'];
const kWhatIfTypes = ['Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q2_K', 'Q3_K', 'Q4_K', 'Q5_K', 'Q6_K', 'IQ4_NL', 'IQ4_XS'];
const isQuantized = (dtype) => /^(Q\d|IQ|TQ|MXFP4)/.test(dtype);

function expose() {
  window.__tm = { ...(window.__tm || {}), compare: cmp };
}

// ---- mode switch and checkpoint pickers ---------------------------------------------------------
export function initCompare() {
  $('mode-inspect').onclick = () => setMode(false);
  $('mode-compare').onclick = () => setMode(true);
  $('cmp-run').onclick = () => loadDiff();
  $('cmp-stat').onchange = () => cmp.row && reloadDiffTiles();
  for (const id of ['cmp-lo', 'cmp-hi']) $(id).onchange = () => { drawDiffColorbar(); reloadDiffTiles(); };
  $('cmp-robust').onclick = () => setDiffRange('robust');
  $('cmp-full').onclick = () => setDiffRange('symmetric');
  $('quant-run').onclick = () => cmp.row && loadQuant();
  $('quant-type').onchange = () => cmp.row && loadQuant();
  expose();
}

async function setMode(compare) {
  document.body.classList.toggle('comparing', compare);
  $('mode-inspect').classList.toggle('active', !compare);
  $('mode-compare').classList.toggle('active', compare);
  if (!compare || cmp.checkpoints.length) return;
  const { checkpoints } = await api('/api/checkpoints');
  cmp.checkpoints = checkpoints;
  const options = checkpoints.map((c) => `<option value="${c.id}">${escapeHtml(c.name)} (${c.format})</option>`).join('');
  $('cmp-a').innerHTML = options;
  $('cmp-b').innerHTML = options;
  $('cmp-a').value = '0';
  $('cmp-b').value = String(Math.min(1, checkpoints.length - 1));
  $('quant-type').innerHTML = kWhatIfTypes.map((t) => `<option>${t}</option>`).join('');
  $('quant-type').value = 'Q4_K';
  if (checkpoints.length > 1) await loadDiff();
  else $('cmp-summary').textContent = 'serve two checkpoints to compare them: tensormorph serve A B';
}

// ---- the most-changed table -------------------------------------------------------------------------
async function loadDiff() {
  cmp.a = Number($('cmp-a').value);
  cmp.b = Number($('cmp-b').value);
  $('cmp-summary').textContent = 'comparing…';
  const d = await api('/api/diff?' + q({ a: cmp.a, b: cmp.b, sort: cmp.sort }));
  cmp.diff = d;
  expose();
  const m = d.matching;
  const identical = d.tensors.filter((t) => t.identical).length;
  $('cmp-summary').textContent = `${m.matched} matched (${m.naming}), ${identical} identical, ${m.shape_mismatched.length} shape mismatched, ` +
    `${m.only_a.length} only in A, ${m.only_b.length} only in B; most changed first by ${d.sort}`;
  const head = `<tr><th>tensor</th><th>A</th><th>B</th>${kMetrics.map((k) => `<th data-metric="${k}" class="sortable${k === d.sort ? ' sorted' : ''}">${k}</th>`).join('')}<th>note</th></tr>`;
  const rows = d.tensors.map((t) => {
    const note = [t.a !== t.b ? `= ${t.b}` : '', t.transform || '', t.identical ? 'identical' : '', t.error || ''].filter(Boolean).join('; ');
    const cells = kMetrics.map((k) => `<td>${t.error ? '' : k === 'differing' ? t.counts.differing : fmt(t[k])}</td>`).join('');
    return `<tr class="matched" data-name="${escapeHtml(t.a)}"><td>${escapeHtml(t.a)}</td><td>${t.a_dtype}</td><td>${t.b_dtype}</td>${cells}<td>${escapeHtml(note)}</td></tr>`;
  });
  const blank = `<td colspan="${kMetrics.length}"></td>`;
  for (const s of m.shape_mismatched) {
    rows.push(`<tr class="unmatched" data-kind="shape"><td>${escapeHtml(s.a)}</td><td>[${s.a_shape.join(', ')}]</td><td>[${s.b_shape.join(', ')}]</td>${blank}<td>shape differs${s.a !== s.b ? ': ' + escapeHtml(s.b) : ''}</td></tr>`);
  }
  for (const n of m.only_a) rows.push(`<tr class="unmatched" data-kind="only_a"><td>${escapeHtml(n)}</td><td></td><td></td>${blank}<td>only in A</td></tr>`);
  for (const n of m.only_b) rows.push(`<tr class="unmatched" data-kind="only_b"><td>${escapeHtml(n)}</td><td></td><td></td>${blank}<td>only in B</td></tr>`);
  $('diff-table').innerHTML = `<thead>${head}</thead><tbody>${rows.join('')}</tbody>`;
  $('diff-table').querySelectorAll('th.sortable').forEach((th) => { th.onclick = () => { cmp.sort = th.dataset.metric; loadDiff(); }; });
  $('diff-table').querySelectorAll('tr.matched').forEach((tr) => { tr.onclick = () => selectPair(tr.dataset.name); });
}

// ---- A | B | A−B heatmaps -------------------------------------------------------------------------
async function selectPair(name) {
  const row = await api('/api/diff/tensor?' + q({ a: cmp.a, b: cmp.b, tensor: name }));
  cmp.row = row;
  cmp.block = null;
  $('diff-table').querySelectorAll('tr.matched').forEach((tr) => tr.classList.toggle('selected', tr.dataset.name === name));
  $('cmp-title').textContent = `${row.a} ${row.a_dtype} | ${row.b} ${row.b_dtype}  [${row.shape.join(', ')}]${row.transform ? '  (' + row.transform + ')' : ''}`;
  // A and B share one zero-centred range so that their colours compare.
  const [sa, sb] = await Promise.all([api('/api/tensor?' + q({ ckpt: cmp.a, tensor: row.a })), api('/api/tensor?' + q({ ckpt: cmp.b, tensor: row.b }))]);
  const r = Math.max(...[sa, sb].map((s) => (s.summary ? s.summary.range.diverging[1] : 1)));
  cmp.sideRange = [-r, r];
  setDiffRange('symmetric', false);
  openViewers();
  drawDiffColorbar();
  $('block-view').innerHTML = '<p class="note">click a cell of a heatmap to see its quantization block</p>';
  prepareQuant();
  expose();
}

function setDiffRange(kind, reload = true) {
  if (!cmp.row) return;
  const [lo, hi] = cmp.row.range[kind];
  $('cmp-lo').value = lo;
  $('cmp-hi').value = hi;
  if (reload) { drawDiffColorbar(); reloadDiffTiles(); }
}

function sources() {
  const row = cmp.row, z = row.zoom, stat = $('cmp-stat').value;
  const base = { width: z.width, height: z.height, tileSize: z.tile_size, tileOverlap: 0, minLevel: z.min_level, maxLevel: z.max_level };
  const side = q({ stat, cmap: 'diverging', lo: cmp.sideRange[0], hi: cmp.sideRange[1] });
  const diff = q({ stat, lo: $('cmp-lo').value, hi: $('cmp-hi').value });
  return {
    a: { ...base, getTileUrl: (l, x, y) => `/api/tile/${cmp.a}/${row.a_index}/${l}/${x}/${y}.png?${side}` },
    b: { ...base, getTileUrl: (l, x, y) => `/api/tile/${cmp.b}/${row.b_index}/${l}/${x}/${y}.png?${side}` },
    d: { ...base, getTileUrl: (l, x, y) => `/api/diff/tile/${cmp.a}/${cmp.b}/${row.a_index}/${l}/${x}/${y}.png?${diff}` },
  };
}

function openViewers() {
  const s = sources();
  for (const key of ['a', 'b', 'd']) {
    if (cmp.viewers[key]) { cmp.viewers[key].open(s[key]); continue; }
    const v = OpenSeadragon({
      element: $(`view-${key}`), showNavigationControl: false, imageSmoothingEnabled: false, maxZoomPixelRatio: 2,
      visibilityRatio: 0.2, minZoomImageRatio: 0.5, animationTime: 0.2, tileSources: s[key],
    });
    v.addHandler('viewport-change', () => syncFrom(key));
    v.addHandler('canvas-click', (e) => { if (e.quick) clickCell(v, e.position); });
    cmp.viewers[key] = v;
  }
  expose();
}

// All three images have the same width, so one viewport's zoom and centre are the others'.
function syncFrom(key) {
  if (cmp.syncing) return;
  cmp.syncing = true;
  const vp = cmp.viewers[key].viewport;
  for (const [other, v] of Object.entries(cmp.viewers)) {
    if (other === key || !v.world.getItemCount()) continue;
    v.viewport.zoomTo(vp.getZoom(true), null, true);
    v.viewport.panTo(vp.getCenter(true), true);
  }
  cmp.syncing = false;
}

function reloadDiffTiles() {
  if (!cmp.row) return;
  const s = sources();
  for (const key of ['a', 'b', 'd']) {
    const v = cmp.viewers[key];
    if (!v) continue;
    const zoom = v.viewport.getZoom(), center = v.viewport.getCenter();
    v.open(s[key]);
    v.addOnceHandler('open', () => { v.viewport.zoomTo(zoom, null, true); v.viewport.panTo(center, true); });
  }
}

async function drawDiffColorbar() {
  const { colors } = await api('/api/colormap/diverging');
  const ctx = $('cmp-colorbar').getContext('2d');
  colors.forEach((c, i) => { ctx.fillStyle = `rgb(${c[0]},${c[1]},${c[2]})`; ctx.fillRect(i, 0, 1, 12); });
  $('cmp-bar-lo').textContent = fmt(Number($('cmp-lo').value));
  $('cmp-bar-hi').textContent = fmt(Number($('cmp-hi').value));
}

// ---- quantization view --------------------------------------------------------------------------------
// The quantized side is measured against the other; with neither quantized, A against a what-if type.
function quantTarget() {
  const row = cmp.row;
  if (!row) return null;
  if (isQuantized(row.a_dtype) && !isQuantized(row.b_dtype)) return { ckpt: cmp.a, tensor: row.a, reference: cmp.b, dtype: row.a_dtype };
  if (isQuantized(row.b_dtype) && !isQuantized(row.a_dtype)) return { ckpt: cmp.b, tensor: row.b, reference: cmp.a, dtype: row.b_dtype };
  if (isQuantized(row.a_dtype)) return { ckpt: cmp.a, tensor: row.a, dtype: row.a_dtype };
  return { ckpt: cmp.a, tensor: row.a, type: $('quant-type').value, dtype: $('quant-type').value };
}

function prepareQuant() {
  const t = quantTarget();
  const whatIf = t && t.type !== undefined;
  $('quant-type').disabled = !whatIf;
  $('quant-mode').textContent = !t ? '' : t.reference !== undefined
    ? `${t.tensor} (${t.dtype}) measured against ${cmp.checkpoints[t.reference].name}`
    : whatIf ? `what-if: ${t.tensor} quantized to` : `${t.tensor} (${t.dtype}) has no unquantized counterpart`;
  cmp.quant = null;
  $('quant-figures').innerHTML = '';
  $('quant-histogram').replaceChildren();
  if (t && (t.reference !== undefined || whatIf)) loadQuant();
}

async function loadQuant() {
  const t = quantTarget();
  if (t.type !== undefined) t.type = t.dtype = $('quant-type').value;
  const params = { ckpt: t.ckpt, tensor: t.tensor, rows: 0 };
  if (t.reference !== undefined) params.reference = t.reference; else params.type = t.type;
  $('quant-figures').innerHTML = '<tr><td>measuring…</td></tr>';
  let e;
  try { e = await api('/api/quant-error?' + q(params)); } catch (err) { $('quant-figures').innerHTML = `<tr><td>${escapeHtml(err.message)}</td></tr>`; return; }
  cmp.quant = { ...e, target: t };
  expose();
  const figures = [['type', `${e.quantized} vs ${e.reference}`], ['RMSE', fmt(e.rmse)], ['max |e|', fmt(e.max_abs)], ['p95 |e|', fmt(e.p95_abs)],
    ['p99 |e|', fmt(e.p99_abs)], ['mean e', fmt(e.mean_error)], ['SNR dB', fmt(e.snr_db)]];
  $('quant-figures').innerHTML = figures.map(([k, v]) => `<tr><th>${k}</th><td data-figure="${k}">${v}</td></tr>`).join('');
  drawErrorHistogram(e.histogram);
}

function drawErrorHistogram(h) {
  const bins = h.counts.slice(0, -3), width = (h.hi - h.lo) / bins.length;
  const xs = bins.map((_, i) => h.lo + (i + 0.5) * width), ys = bins.map((c) => (c === 0 ? null : c));
  if (cmp.plot) cmp.plot.destroy();
  cmp.plot = new uPlot({
    width: 360, height: 150, legend: { show: false },
    scales: { x: { time: false, range: [h.lo, h.hi] }, y: { distr: 3, log: 10 } },
    axes: [{ values: (u, splits) => splits.map((v) => fmt(v)) },
      { size: 50, values: (u, splits) => splits.map((v) => (Number.isInteger(Math.log10(v)) ? fmt(v) : '')) }],
    series: [{}, { label: 'count', fill: 'rgba(200,80,60,0.5)', stroke: 'rgb(200,80,60)', paths: uPlot.paths.bars({ size: [1, 100] }) }],
  }, [xs, ys], $('quant-histogram'));
}

// A click on any of the three heatmaps: the quantization block holding that element.
async function clickCell(viewer, position) {
  if (!cmp.row) return;
  const image = viewer.viewport.viewerElementToImageCoordinates(position), ppe = cmp.row.zoom.pixels_per_element;
  const row = Math.floor(image.y / ppe), col = Math.floor(image.x / ppe);
  if (row < 0 || col < 0 || row >= cmp.row.rows || col >= cmp.row.cols) return;
  await showBlock(row, col);
}

export async function showBlock(row, col) {
  const t = quantTarget();
  if (!t || (!isQuantized(t.dtype))) return;
  const blockElements = cmp.quant && cmp.quant.block_elements ? cmp.quant.block_elements : null;
  const params = { ckpt: t.ckpt, tensor: t.tensor, row, block: 0 };
  if (t.reference !== undefined) params.reference = t.reference;
  if (t.type !== undefined) params.type = $('quant-type').value;
  // The block size comes with the first answer; ask again for the right block when it differs.
  params.block = blockElements ? Math.floor(col / blockElements) : 0;
  let b = await api('/api/block?' + q(params));
  if (Math.floor(col / b.block_elements) !== params.block) {
    params.block = Math.floor(col / b.block_elements);
    b = await api('/api/block?' + q(params));
  }
  cmp.block = { ...b, clicked: { row, col } };
  expose();
  const f = b.fields, fields = Object.entries(f).map(([k, v]) => `<tr><th>${k}</th><td data-field="${k}">${fmt(v)}</td></tr>`).join('');
  const subs = b.sub_blocks.map((s, i) => `<tr><td>${i}</td><td>${s.first}–${s.first + s.count - 1}</td><td>${s.scale_q}</td><td>${fmt(s.scale)}</td>` +
    `<td>${s.min_q ?? ''}</td><td>${s.min_q !== undefined ? fmt(s.min) : ''}</td></tr>`).join('');
  const hasRef = Array.isArray(b.reference);
  const elems = b.decoded.map((v, i) => `<tr data-col="${b.cols[0] + i}"${b.cols[0] + i === col ? ' class="selected"' : ''}><td>${b.cols[0] + i}</td>` +
    `<td>${b.quants.length ? b.quants[i] : ''}</td><td>${fmt(v)}</td>${hasRef ? `<td>${fmt(b.reference[i])}</td><td>${fmt(b.error[i])}</td>` : ''}</tr>`).join('');
  $('block-view').innerHTML =
    `<h3>${b.dtype} block ${b.block} of row ${b.row} (cols ${b.cols[0]}–${b.cols[1] - 1}, ${b.mode})</h3><p class="note">${escapeHtml(b.note)}</p>` +
    `<table id="block-fields">${fields}</table>` +
    (subs ? `<table id="block-subs"><thead><tr><th>sub</th><th>elements</th><th>scale q</th><th>scale</th><th>min q</th><th>min</th></tr></thead><tbody>${subs}</tbody></table>` : '') +
    `<table id="block-values"><thead><tr><th>col</th><th>quant</th><th>decoded</th>${hasRef ? '<th>reference</th><th>error</th>' : ''}</tr></thead><tbody>${elems}</tbody></table>`;
  const selected = $('block-values').querySelector('tr.selected');
  if (selected) selected.scrollIntoView({ block: 'nearest' });
}
