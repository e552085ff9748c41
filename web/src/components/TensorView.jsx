// The tensor view: what the tensor is (name, type, shape, size, where it is stored, how it is
// laid out on screen), the heatmap's settings with a colour bar, jumps to the extreme value and
// to the first NaN/Inf, PNG export, and the heatmap.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';

import { api, q } from '../lib/api.js';
import { colorTable, palettes, paintBar } from '../lib/colors.js';
import { heatmapPng, download, fileName } from '../lib/export.js';
import { fmt, count, bytes, shape as shapeText } from '../lib/format.js';
import { PIXEL_STATS, SCALES, effectiveHeat } from '../lib/heat_defaults.js';
import * as H from '../lib/heatmap.js';
import * as S from '../lib/state.js';
import { HeatmapPane } from './HeatmapPane.jsx';
import { heatmapActions } from './Shortcuts.jsx';
import { Select, Segmented, ErrorNote, Empty, Dotted } from './ui.jsx';

function ColorBar({ scale, palette, lo, hi }) {
  const ref = useRef(null);
  const [colors, setColors] = useState(null);
  useEffect(() => { colorTable(scale, palette || null).then(setColors, () => setColors(null)); }, [scale, palette]);
  useEffect(() => { if (colors && ref.current) paintBar(ref.current, colors); }, [colors]);
  const [a, b] = scale === 'diverging' ? [-Math.max(Math.abs(lo), Math.abs(hi)), Math.max(Math.abs(lo), Math.abs(hi))] : [lo, hi];
  return (
    <div class="colorbar" title={scale === 'log' ? 'log10 |value|' : scale === 'diverging' ? 'zero at the centre' : 'linear'}>
      <span id="bar-lo">{fmt(a, 4)}</span><canvas ref={ref} id="colorbar" width="160" height="10" /><span id="bar-hi">{fmt(b, 4)}</span>
    </div>
  );
}

function RangeInputs({ lo, hi, onChange }) {
  const [a, setA] = useState(String(lo)), [b, setB] = useState(String(hi));
  // A field being edited keeps what the user typed; the other follows the range.
  useEffect(() => {
    const editing = document.activeElement && document.activeElement.id;
    if (editing !== 'lo') setA(String(lo));
    if (editing !== 'hi') setB(String(hi));
  }, [lo, hi]);
  const commit = () => {
    const x = Number(a), y = Number(b);
    if (Number.isFinite(x) && Number.isFinite(y) && x < y) onChange(x, y); else { setA(String(lo)); setB(String(hi)); }
  };
  const key = (e) => { if (e.key === 'Enter') commit(); };
  return (
    <span class="range-inputs" title="colour range (Enter applies)">
      <input id="lo" type="text" inputMode="decimal" value={a} onInput={(e) => setA(e.currentTarget.value)} onBlur={commit} onKeyDown={key} aria-label="range low" />
      <span>…</span>
      <input id="hi" type="text" inputMode="decimal" value={b} onInput={(e) => setB(e.currentTarget.value)} onBlur={commit} onKeyDown={key} aria-label="range high" />
    </span>
  );
}

export function TensorView() {
  const name = S.tensorName.value, ckptId = S.ckpt.value;
  const [info, setInfo] = useState(null);
  const [error, setError] = useState(null);
  const [tileError, setTileError] = useState(null);
  const [consent, setConsent] = useState(null);   // {rung, detail} once the user consented for this tensor
  const [stripStat, setStripStat] = useState('absmax');
  const [strips, setStrips] = useState(null);
  const [paletteList, setPaletteList] = useState([]);
  const [jumpNote, setJumpNote] = useState(null);
  const viewerRef = useRef(null);

  useEffect(() => { palettes().then((p) => setPaletteList(p.palettes || []), () => setPaletteList([])); }, []);

  // The previous tensor stays on screen until the next one's description arrives: the heatmap is
  // never torn down between tensors, so nothing jumps while the new tiles stream in.
  useEffect(() => {
    setError(null); setTileError(null); setConsent(null); setJumpNote(null);
    if (!name) return undefined;
    let live = true;
    api('/api/tensor', { ckpt: ckptId, tensor: name }).then(async (i) => {
      // Before the index is built the robust ranges come from exact statistics computed now.
      if (!i.summary) { try { i.summary = await api('/api/stats', { ckpt: ckptId, tensor: name }); } catch { /* defaults below */ } }
      if (live) setInfo({ ...i, ckpt: ckptId });
    }, (e) => live && setError(e));
    return () => { live = false; };
  }, [name, ckptId]);

  // Marginal strips: one statistic per row and column of the matrix (shown when not folded).
  useEffect(() => {
    setStrips(null);
    if (!info || info.view.folded || stripStat === 'off') return undefined;
    let live = true;
    api('/api/channels', { ckpt: info.ckpt, tensor: info.name, stat: stripStat }).then((c) => {
      if (!live) return;
      const max = (v) => v.reduce((m, x) => (x > m ? x : m), 0);
      const s = { stat: stripStat, rows: c.rows, cols: c.cols, rowMax: max(c.rows), colMax: max(c.cols) };
      window.__tm.strips = { tensor: info.name, ...s };
      setStrips(s);
    }, (e) => live && setTileError({ message: `row/column strips: ${e.message}`, hint: e.hint }));
    return () => { live = false; };
  }, [info, stripStat]);

  const h = useMemo(() => (info ? effectiveHeat(S.heat.value, info.summary) : null), [info, S.heat.value]);
  const tileQuery = useMemo(() => (h ? q({ stat: h.stat, cmap: h.scale, lo: h.lo, hi: h.hi, palette: h.palette || undefined, consent: consent ? consent.rung : undefined }) : ''), [h, consent]);

  // Tiles answer for themselves: a refusal is shown on the heatmap, a consent request opens the dialog.
  const queryRef = useRef(tileQuery);
  queryRef.current = tileQuery;
  useEffect(() => { setTileError(null); }, [tileQuery]);
  const onTileError = useMemo(() => {
    const mine = tileQuery;
    return (e) => {
      if (mine !== queryRef.current) return;
      if (e.needsConsent) {
        S.askConsent({ op: e.body.op || 'render', tensor: name, reason: e.body.reason, ladder: e.body.ladder,
          onChoose: (rung) => setConsent({ rung: rung.id, detail: `${rung.computes}; ${rung.error_bound}` }) });
        setTileError({ message: 'this view needs your consent: an exact render is over a budget', hint: 'choose a rung in the dialog, or raise the budget in the Compute drawer', consent: true });
        return;
      }
      setTileError({ message: e.message, hint: e.hint, code: e.code });
    };
  }, [tileQuery, name]);

  heatmapActions.zoom = (f) => { const v = viewerRef.current; if (v) { v.viewport.zoomBy(f); v.viewport.applyConstraints(); } };
  heatmapActions.fit = () => viewerRef.current && viewerRef.current.viewport.goHome();
  heatmapActions.jump = (what) => jump(what);
  // Outliers name matrix coordinates; the heatmap may show a folded view of the same elements.
  heatmapActions.showElement = (row, col) => {
    if (!info || !viewerRef.current) return;
    const flat = row * info.matrix.cols + col;
    H.zoomToElements(viewerRef.current, Math.floor(flat / info.view.cols), flat % info.view.cols, 1, 1, info.zoom.pixels_per_element, true);
  };
  heatmapActions.showChannel = info && !info.view.folded ? (axis, index) => {
    const v = viewerRef.current, ppe = info.zoom.pixels_per_element;
    if (axis === 'row') H.zoomToElements(v, index, 0, 1, info.view.cols, ppe, true);
    else H.zoomToElements(v, 0, index, info.view.rows, 1, ppe, true);
  } : null;
  useEffect(() => () => { for (const k of Object.keys(heatmapActions)) heatmapActions[k] = null; }, []);

  async function jump(what) {
    if (!info || !viewerRef.current) return;
    setJumpNote({ busy: true, what });
    try {
      const r = await api('/api/locate', { ckpt: info.ckpt, tensor: info.name, what });
      if (!r.found) { setJumpNote({ what, text: what === 'nonfinite' ? 'no NaN or Inf in this tensor' : 'no finite value' }); return; }
      H.zoomToElements(viewerRef.current, r.view_row, r.view_col, 1, 1, info.zoom.pixels_per_element, true);
      setJumpNote({ what, text: `${r.kind === 'value' ? 'largest |value|' : `first ${r.kind}`} at [${r.coords.join(', ')}] = ${r.text}`, result: r });
      window.__tm.jumped = r;
    } catch (e) { setJumpNote({ what, error: e }); }
  }

  async function exportPng() {
    const v = viewerRef.current;
    const colors = await colorTable(h.scale, h.palette || null);
    const caption = `${info.name} · ${h.stat} · ${h.scale}${h.palette ? ` (${h.palette})` : ''}${consent ? ' · APPROXIMATE' : ''}`;
    const blob = await heatmapPng({ canvas: v.drawer.canvas, overlay: document.getElementById('values'), colors, lo: h.scale === 'diverging' ? -Math.max(Math.abs(h.lo), Math.abs(h.hi)) : h.lo, hi: h.scale === 'diverging' ? Math.max(Math.abs(h.lo), Math.abs(h.hi)) : h.hi, caption });
    window.__tm.exportedPng = { bytes: blob.size, canvas: [v.drawer.canvas.width, v.drawer.canvas.height] };
    download(blob, `${fileName(info.name, h.stat)}.png`);
  }

  if (!name) return <Empty title="No tensor selected">Pick one in the tree, press <kbd>j</kbd>, or open the overview.</Empty>;
  if (error) return <div class="tensor-view"><ErrorNote error={error} what={`Opening ${name}`} /></div>;
  if (!info || !h) return <div class="tensor-view"><div class="tensor-head"><h2><Dotted name={name} /></h2></div><Empty title="Opening…" /></div>;
  const opening = info.name !== name || info.ckpt !== ckptId;

  const s = info.summary;
  const bad = s ? s.nan + s.pos_inf + s.neg_inf : 0;
  const kinds = (paletteList || []).filter((p) => (h.scale === 'diverging' ? p.kind === 'diverging' : p.kind === 'sequential'));
  const setScale = (scale) => S.setHeat({ scale, lo: null, hi: null, palette: null });
  const setStat = (stat) => S.setHeat({ stat, lo: null, hi: null });
  const rangeButtons = [
    { label: 'default', title: 'robust range: mean ± 4 std within the extremes', f: () => S.setHeat({ lo: null, hi: null }) },
    { label: 'full', title: 'the finite extremes', f: () => s && S.setHeat(h.scale === 'log' ? { lo: Math.max(s.absmax * 1e-6, Number.MIN_VALUE), hi: s.absmax } : h.scale === 'diverging' || h.stat === 'absmax' || h.stat === 'std' ? { lo: h.scale === 'diverging' ? -s.absmax : 0, hi: s.absmax } : { lo: s.min, hi: s.max }) },
  ];

  return (
    <div class="tensor-view" id="tensor-view">
      <div class="tensor-head">
        <h2 id="title" title={name}><Dotted name={name} />{opening && <span class="dim"> · opening…</span>}</h2>
        <div class="facts-line">
          <span class="badge dtype">{info.dtype}</span> <span>{shapeText(info.shape)}</span>
          <span class="dim"> · {count(info.elements)} elements · {bytes(info.bytes)} · {info.chunks ? `${info.chunks} chunks, the first in ${info.file_name} @ byte ${count(info.offset)}` : `${info.file_name} @ byte ${count(info.offset)}`}</span>
          {bad > 0 && <span class="badge bad"> {bad} NaN/Inf</span>}
        </div>
        {info.view.folded && <div class="note" id="view-rule">Shown as {info.view.rows} × {info.view.cols}: {info.view.rule}. The read-out gives the tensor's own coordinates.</div>}
      </div>
      <div class="toolbar" id="controls">
        <Select id="stat" label="pixel" value={h.stat} options={PIXEL_STATS} onChange={setStat} title="what one pixel shows of the block of elements it covers" />
        <Segmented id="scale" label="colour scale" value={h.scale} options={SCALES} onChange={setScale} />
        <Select id="palette" label="colours" value={h.palette} onChange={(p) => S.setHeat({ palette: p })}
          options={[{ value: '', label: 'default' }, ...kinds.map((p) => ({ value: p.name, label: `${p.name}${p.colorblind_safe ? ' (colour-blind safe)' : ''}` }))]} />
        <RangeInputs lo={h.lo} hi={h.hi} onChange={(lo, hi) => S.setHeat({ lo, hi })} />
        {rangeButtons.map((b) => <button type="button" class="small" title={b.title} onClick={b.f}>{b.label}</button>)}
        <ColorBar scale={h.scale} palette={h.palette} lo={h.lo} hi={h.hi} />
        <span class="spacer" />
        <button type="button" class="small" id="jump-max" title="zoom to the element of largest magnitude (a)" onClick={() => jump('absmax')}>max |x|</button>
        <button type="button" class="small" id="jump-nonfinite" title="zoom to the first NaN or Inf (n)" disabled={s && bad === 0} onClick={() => jump('nonfinite')}>NaN/Inf</button>
        <Select id="strips" label="strips" value={info.view.folded ? 'off' : stripStat} onChange={setStripStat}
          options={[{ value: 'absmax', label: 'row/col absmax' }, { value: 'l2', label: 'row/col L2' }, { value: 'off', label: 'off' }]} title={info.view.folded ? 'strips follow rows and columns of the matrix; a folded view has none' : ''} />
        <button type="button" class="small" id="export-png" title="download the view as PNG with its colour bar" onClick={exportPng}>PNG</button>
      </div>
      {jumpNote && <div class="note" id="jump-note">{jumpNote.busy ? 'searching…' : jumpNote.error ? <ErrorNote error={jumpNote.error} what="Finding it" /> : jumpNote.text}</div>}
      <HeatmapPane info={info} ckptId={info.ckpt} tileQuery={tileQuery} strips={strips}
        onViewer={(v) => { viewerRef.current = v; }} onTileError={onTileError}
        banner={<>
          {consent && <div class="banner approx" id="approx-badge" title={consent.detail}>Approximate: rendered with the “{consent.rung}” rung you consented to — {consent.detail}</div>}
          {tileError && !tileError.consent && <div class="banner error" id="tile-error" role="alert">Some tiles could not be drawn: {tileError.message}{tileError.hint ? <div class="hint">{tileError.hint}</div> : null}</div>}
          {tileError && tileError.consent && <div class="banner approx" id="tile-consent">{tileError.message} — {tileError.hint}</div>}
        </>} />
    </div>
  );
}

