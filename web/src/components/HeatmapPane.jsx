// The tensor heatmap itself: deep-zoom tiles, rulers with element indices, marginal strips of a
// per-row and per-column statistic, the minimap, exact values drawn in cells once they are large
// enough, the hover read-out, and failures shown on the heatmap with their reason.
import { useEffect, useRef, useState } from 'preact/hooks';

import { api } from '../lib/api.js';
import { fmt, unravel } from '../lib/format.js';
import * as H from '../lib/heatmap.js';
import * as S from '../lib/state.js';

const kMinCellPixels = 30, kMaxWindow = 64, kRuler = 22;

/** Nice tick spacing (1, 2, 5 x 10^k) for about `target` ticks over `span` elements. */
function tickStep(span, target) {
  const raw = Math.max(1, span / target);
  const p = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
}

function drawRuler(canvas, viewer, info, horizontal) {
  const box = canvas.getBoundingClientRect(), ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(box.width * ratio); canvas.height = Math.round(box.height * ratio);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, box.width, box.height);
  if (!viewer || !viewer.world.getItemCount()) return;
  const ppe = info.zoom.pixels_per_element, rows = info.view.rows, cols = info.view.cols;
  const v = H.visibleRange(viewer, ppe, rows, cols);
  const [a, b] = horizontal ? [v.c0, v.c1] : [v.r0, v.r1];
  // Ticks spaced by the screen length the visible elements take (the image may not fill the ruler).
  const from = horizontal ? H.elementToScreen(viewer, 0, a, ppe).x : H.elementToScreen(viewer, a, 0, ppe).y;
  const to = horizontal ? H.elementToScreen(viewer, 0, b, ppe).x : H.elementToScreen(viewer, b, 0, ppe).y;
  const length = Math.max(1, Math.min(horizontal ? box.width : box.height, to - from));
  const step = tickStep(b - a, length / (horizontal ? 70 : 40));
  const style = getComputedStyle(document.documentElement);
  ctx.fillStyle = style.getPropertyValue('--text-dim').trim();
  ctx.strokeStyle = style.getPropertyValue('--border').trim();
  ctx.font = '10px system-ui, sans-serif';
  for (let i = Math.ceil(a / step) * step; i < b; i += step) {
    const p = horizontal ? H.elementToScreen(viewer, 0, i + 0.5, ppe).x : H.elementToScreen(viewer, i + 0.5, 0, ppe).y;
    ctx.beginPath();
    if (horizontal) { ctx.moveTo(p, kRuler - 5); ctx.lineTo(p, kRuler); ctx.stroke(); ctx.fillText(String(i), p + 2, 11); }
    else { ctx.moveTo(kRuler - 5, p); ctx.lineTo(kRuler, p); ctx.stroke(); ctx.save(); ctx.translate(11, p - 2); ctx.rotate(-Math.PI / 2); ctx.fillText(String(i), 0, 0); ctx.restore(); }
  }
}

// Each strip pixel shows the largest value of the channels under it, as a bar from the heatmap.
function drawStrip(canvas, viewer, info, strips, horizontal) {
  const box = canvas.getBoundingClientRect();
  canvas.width = Math.round(box.width); canvas.height = Math.round(box.height);
  const ctx = canvas.getContext('2d');
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  if (!strips || !viewer || !viewer.world.getItemCount()) return;
  const values = horizontal ? strips.cols : strips.rows, top = horizontal ? strips.colMax : strips.rowMax;
  if (!(top > 0)) return;
  const ppe = info.zoom.pixels_per_element, n = horizontal ? canvas.width : canvas.height, depth = horizontal ? canvas.height : canvas.width;
  ctx.fillStyle = getComputedStyle(document.documentElement).getPropertyValue('--accent').trim();
  // The view is not rotated: screen to image is affine along each axis, two points give it.
  const o = viewer.viewport.viewerElementToImageCoordinates(new H.OpenSeadragon.Point(0, 0));
  const u = viewer.viewport.viewerElementToImageCoordinates(new H.OpenSeadragon.Point(1, 1));
  const start = horizontal ? o.x : o.y, perPixel = horizontal ? u.x - o.x : u.y - o.y;
  for (let p = 0; p < n; ++p) {
    const i0 = Math.max(0, Math.floor((start + p * perPixel) / ppe)), i1 = Math.min(values.length, Math.ceil((start + (p + 1) * perPixel) / ppe));
    let m = -1;
    for (let i = i0; i < i1; ++i) if (values[i] > m) m = values[i];
    if (m < 0) continue;
    const len = Math.max(1, Math.round((m / top) * depth));
    if (horizontal) ctx.fillRect(p, 0, 1, len); else ctx.fillRect(0, p, len, 1);
  }
}

/** The element a view coordinate stands for: flat index, N-D coordinates and matrix position. */
export function elementOf(info, row, col) {
  const index = row * info.view.cols + col;
  return { index, coords: unravel(index, info.shape.length ? info.shape : [1]), matrixRow: Math.floor(index / info.matrix.cols), matrixCol: index % info.matrix.cols };
}

/** The heatmap pane. `info` is /api/tensor; `tileQuery` the tile parameters; `onViewer` hears the
 *  viewer once made; `onTileError` every refused tile; `strips` the marginal statistics or null. */
export function HeatmapPane({ info, ckptId, tileQuery, onViewer, onTileError, strips, banner }) {
  const osdRef = useRef(null), overlayRef = useRef(null), topRef = useRef(null), leftRef = useRef(null), rightRef = useRef(null), bottomRef = useRef(null);
  const viewerRef = useRef(null), valuesRef = useRef({ data: null, wanted: '', timer: 0 }), infoRef = useRef(info), stripsRef = useRef(strips);
  const [hover, setHover] = useState(null);
  const hoverTimer = useRef(0);
  infoRef.current = info;
  stripsRef.current = strips;

  const redraw = () => {
    const v = viewerRef.current, i = infoRef.current;
    if (!v || !i || !topRef.current) return;
    drawRuler(topRef.current, v, i, true);
    drawRuler(leftRef.current, v, i, false);
    drawStrip(rightRef.current, v, i, stripsRef.current, false);
    drawStrip(bottomRef.current, v, i, stripsRef.current, true);
    drawValues();
  };

  // Values drawn as text in magnified cells: fetched (tm.decode@1) for at most 64 x 64 visible elements.
  const visibleCells = () => {
    const v = viewerRef.current, i = infoRef.current;
    if (!v || !i) return null;
    const ppe = i.zoom.pixels_per_element, cell = H.cellPixels(v, ppe);
    if (cell < kMinCellPixels) return null;
    const r = H.visibleRange(v, ppe, i.view.rows, i.view.cols);
    if (r.r1 <= r.r0 || r.c1 <= r.c0 || r.r1 - r.r0 > kMaxWindow || r.c1 - r.c0 > kMaxWindow) return null;
    return { ...r, cell };
  };
  const drawValues = () => {
    const canvas = overlayRef.current, v = viewerRef.current, i = infoRef.current;
    if (!canvas || !v) return;
    const box = osdRef.current.getBoundingClientRect(), ratio = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(box.width * ratio) || canvas.height !== Math.round(box.height * ratio)) {
      canvas.width = Math.round(box.width * ratio); canvas.height = Math.round(box.height * ratio);
    }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, box.width, box.height);
    const cells = visibleCells(), w = valuesRef.current.data;
    window.__tm.shownValues = null;
    if (!cells || !w || w.tensor !== i.name) return;
    const ppe = i.zoom.pixels_per_element;
    ctx.font = `${Math.max(9, Math.min(14, cells.cell / 4.2))}px ui-monospace, monospace`;
    ctx.textAlign = 'center'; ctx.textBaseline = 'middle'; ctx.lineWidth = 2.5;
    ctx.strokeStyle = 'rgba(255,255,255,0.85)'; ctx.fillStyle = '#111';
    let drawn = 0;
    for (let r = Math.max(cells.r0, w.row); r < Math.min(cells.r1, w.row + w.rows); ++r) {
      for (let c = Math.max(cells.c0, w.col); c < Math.min(cells.c1, w.col + w.cols); ++c) {
        const k = (r - w.row) * w.cols + (c - w.col), value = w.values[k];
        const label = value === null ? w.text[k] : Number(value).toPrecision(cells.cell >= 72 ? 5 : cells.cell >= 44 ? 3 : 2);
        const p = H.elementToScreen(v, r + 0.5, c + 0.5, ppe);
        ctx.strokeText(label, p.x, p.y); ctx.fillText(label, p.x, p.y);
        ++drawn;
      }
    }
    window.__tm.shownValues = { row: w.row, col: w.col, rows: w.rows, cols: w.cols, text: w.text, drawn };
  };
  const fetchValues = () => {
    const state = valuesRef.current;
    clearTimeout(state.timer);
    state.timer = setTimeout(async () => {
      const i = infoRef.current, cells = visibleCells(), have = state.data;
      if (!cells) return drawValues();
      if (have && have.tensor === i.name && cells.r0 >= have.row && cells.c0 >= have.col && cells.r1 <= have.row + have.rows && cells.c1 <= have.col + have.cols) return drawValues();
      const key = `${i.name}/${cells.r0}/${cells.c0}`;
      state.wanted = key;
      try {
        const w = await api('/api/values', { ckpt: ckptId, tensor: i.name, row: cells.r0, col: cells.c0, rows: cells.r1 - cells.r0, cols: cells.c1 - cells.c0 });
        if (state.wanted !== key) return;
        state.data = { ...w, tensor: i.name };
      } catch (e) { setHover({ error: e }); }
      drawValues();
    }, 80);
  };

  // The viewer is made once; tensors and settings reopen its tile source.
  useEffect(() => {
    const v = H.createViewer(osdRef.current, { navigator: true });
    viewerRef.current = v;
    let frame = 0;
    const schedule = () => { if (!frame) frame = requestAnimationFrame(() => { frame = 0; redraw(); }); };
    v.addHandler('update-viewport', () => { schedule(); fetchValues(); });
    v.addHandler('animation-finish', () => {
      fetchValues();
      S.viewport.value = H.viewOf(v);
      S.syncUrl();
    });
    v.addHandler('resize', schedule);
    // The benchmark reads this mark: every tile of the first view drawn.
    v.world.addHandler('add-item', (e) => e.item.addHandler('fully-loaded-change', (f) => {
      if (f.fullyLoaded && !performance.getEntriesByName('tm-heatmap-painted').length) performance.mark('tm-heatmap-painted');
    }));
    new H.OpenSeadragon.MouseTracker({
      element: v.canvas,
      moveHandler: (e) => onMove(e.position),
      leaveHandler: () => setHover(null),
    });
    window.__tm = { ...(window.__tm || {}), viewer: v, OpenSeadragon: H.OpenSeadragon };
    onViewer(v);
    return () => {
      cancelAnimationFrame(frame);
      clearTimeout(valuesRef.current.timer);
      clearTimeout(hoverTimer.current);
      viewerRef.current = null;
      v.destroy();
    };
  }, []);

  useEffect(() => {
    const v = viewerRef.current;
    if (!v || !info) return;
    valuesRef.current.data = null;
    setHover(null);
    const id = ckptId, index = info.index;
    const source = H.tileSource(info.zoom, (l, x, y) => `/api/tile/${id}/${index}/${l}/${x}/${y}.png?${tileQuery}`, onTileError);
    const at = S.viewport.value, restore = at && S.tensorName.value === info.name ? at : null;
    H.openAt(v, source, restore, restore ? null : H.readableStart(v, info.view.rows, info.view.cols, info.zoom.pixels_per_element));
    window.__tm.pixelsPerElement = info.zoom.pixels_per_element;
    window.__tm.tensorInfo = info;
  }, [info, tileQuery]);

  useEffect(() => { redraw(); }, [strips]);

  // A viewport from the URL (back / forward) moves the view when it differs from what is shown.
  useEffect(() => S.viewport.subscribe((at) => {
    const v = viewerRef.current;
    if (!v || !at || !v.world.getItemCount()) return;
    const now = H.viewOf(v);
    if (Math.abs(now.zoom - at.zoom) / at.zoom > 1e-3 || Math.abs(now.cx - at.cx) > 1e-4 || Math.abs(now.cy - at.cy) > 1e-4) {
      v.viewport.zoomTo(at.zoom, null, true);
      v.viewport.panTo(new H.OpenSeadragon.Point(at.cx, at.cy), true);
    }
  }), []);

  const onMove = (position) => {
    const v = viewerRef.current, i = infoRef.current;
    if (!v || !i) return;
    const ppe = i.zoom.pixels_per_element;
    const at = H.elementAt(v, position, ppe, i.view.rows, i.view.cols);
    if (!at) return setHover(null);
    const cell = H.cellPixels(v, ppe);
    clearTimeout(hoverTimer.current);
    hoverTimer.current = setTimeout(async () => {
      try {
        if (cell >= 4) {
          const value = await api('/api/value', { ckpt: ckptId, tensor: i.name, row: at.row, col: at.col });
          if (infoRef.current !== i) return;
          setHover({ kind: 'value', tensor: i.name, ...at, value, element: elementOf(i, at.row, at.col) });
        } else {
          const z = i.zoom;
          const level = Math.max(z.min_level, Math.min(z.max_level, z.max_level + Math.floor(Math.log2(cell / ppe))));
          const s = await api('/api/cell', { ckpt: ckptId, tensor: i.name, level, row: at.row, col: at.col });
          if (infoRef.current !== i) return;
          setHover({ kind: 'cell', tensor: i.name, ...at, s });
        }
      } catch (e) { setHover({ error: e }); }
    }, 50);
  };

  return (
    <div class="heatmap-pane">
      <div class="corner" />
      <canvas ref={topRef} class="ruler top" aria-label="column indices" />
      <div class="corner" />
      <canvas ref={leftRef} class="ruler left" aria-label="row indices" />
      <div class="osd-box">
        <div ref={osdRef} id="viewer" class="osd" />
        <canvas ref={overlayRef} id="values" class="values-overlay" />
        {banner}
      </div>
      <canvas ref={rightRef} id="strip-rows" class="strip right" title="per-row statistic" style={{ visibility: strips ? 'visible' : 'hidden' }} />
      <div class="corner" />
      <canvas ref={bottomRef} id="strip-cols" class="strip bottom" title="per-column statistic" style={{ visibility: strips ? 'visible' : 'hidden' }} />
      <div class="corner" />
      <HoverLine hover={hover && (!hover.tensor || hover.tensor === info?.name) ? hover : null} info={info} />
    </div>
  );
}

function HoverLine({ hover, info }) {
  let body = <span class="dim">hover the heatmap for values · scroll or +/− to zoom · drag to pan · double-click to zoom in</span>;
  if (hover && hover.error) body = <span class="bad">{hover.error.message}{hover.error.hint ? ` — ${hover.error.hint}` : ''}</span>;
  else if (hover && hover.kind === 'value') {
    const e = hover.element, folded = info.view.folded;
    body = (
      <span>
        <span id="hover-coords">[{e.coords.join(', ')}]</span>
        {folded ? <span class="dim"> (shown at row {hover.row}, col {hover.col})</span> : <span class="dim"> row <span id="hover-row">{hover.row}</span>, col <span id="hover-col">{hover.col}</span></span>}
        {' = '}<b id="hover-value">{hover.value.text}</b>
      </span>
    );
  } else if (hover && hover.kind === 'cell') {
    const s = hover.s;
    body = (
      <span>rows {s.rows[0]}–{s.rows[1] - 1}, cols {s.cols[0]}–{s.cols[1] - 1}: mean {fmt(s.mean)} · std {fmt(s.std)} · min {fmt(s.min)} · max {fmt(s.max)} · absmax {fmt(s.absmax)}
        {s.nan + s.pos_inf + s.neg_inf > 0 && <b class="bad"> · NaN {s.nan} · Inf {s.pos_inf + s.neg_inf}</b>}</span>
    );
  }
  return <div class="hover-line" id="hover">{body}</div>;
}

