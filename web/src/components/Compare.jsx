// Compare mode: the shown checkpoint (A) against another served one (B). The most-changed table
// (/api/diff), A | B | A−B heatmaps of one tensor with zoom and pan kept in step (A−B on the
// diverging map centred on zero), and the quantization view: error figures, the error histogram
// and the anatomy of the block under a clicked cell (/api/quant-error, /api/block).
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';

import { api, q } from '../lib/api.js';
import { histogram } from '../lib/charts.js';
import { colorTable, paintBar } from '../lib/colors.js';
import { fmt, count, shape as shapeText } from '../lib/format.js';
import * as H from '../lib/heatmap.js';
import * as S from '../lib/state.js';
import { Select, ErrorNote, Empty, ExportButtons, DataTable } from './ui.jsx';

const kMetrics = [['rel_fro', '‖a−b‖/‖a‖'], ['max_abs', 'max |a−b|'], ['rmse', 'RMSE'], ['cosine', 'cosine'], ['snr_db', 'SNR dB'], ['differing', 'differing']];
const kWhatIfTypes = ['Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q2_K', 'Q3_K', 'Q4_K', 'Q5_K', 'Q6_K', 'IQ4_NL', 'IQ4_XS'];
const isQuantized = (dtype) => /^(Q\d|IQ|TQ|MXFP4)/.test(dtype);

function DiffTable({ diff, selected, sort, onSort }) {
  const rows = diff.tensors.map((t) => ({ ...t, differing: t.counts ? t.counts.differing : null }));
  const m = diff.matching;
  const unmatched = [
    ...m.shape_mismatched.map((s) => ({ a: s.a, note: `shape differs: [${s.a_shape.join(', ')}] vs [${s.b_shape.join(', ')}]` })),
    ...m.only_a.map((n) => ({ a: n, note: 'only in A' })), ...m.only_b.map((n) => ({ a: n, note: 'only in B' })),
  ];
  const columns = [
    { key: 'a', label: 'tensor', render: (t) => <span class="tname" title={t.a}>{t.a}</span> },
    { key: 'dtypes', label: 'A → B', render: (t) => `${t.a_dtype} → ${t.b_dtype}` },
    ...kMetrics.map(([k, label]) => ({ key: k, label, align: 'right', render: (t) => (t.error ? '' : k === 'differing' ? count(t.differing) : fmt(t[k], 4)) })),
    { key: 'note', label: 'note', render: (t) => [t.a !== t.b ? `= ${t.b}` : '', t.transform || '', t.identical ? 'identical' : '', t.error || ''].filter(Boolean).join('; ') },
  ];
  return (
    <>
      <div class="row">
        <Select id="diff-sort" label="most changed by" value={sort} onChange={onSort} options={kMetrics.map(([k, l]) => ({ value: k, label: l }))} />
        <span class="spacer" />
        <ExportButtons name="diff" rows={rows} columns={[{ key: 'a', label: 'tensor_a' }, { key: 'b', label: 'tensor_b' }, { key: 'a_dtype' }, { key: 'b_dtype' }, ...kMetrics.map(([k]) => ({ key: k })), { key: 'identical' }]} />
      </div>
      <div class="diff-scroll">
        <DataTable id="diff-table" rows={rows} columns={columns} rowKey={(t) => t.a} onRow={(t) => S.go({ tensor: t.a, view: 'compare' })} selected={(t) => t.a === selected} />
        {unmatched.length > 0 && <table class="data unmatched">{unmatched.map((u) => <tr class="warn"><td>{u.a}</td><td>{u.note}</td></tr>)}</table>}
      </div>
    </>
  );
}

function Triple({ a, b, row, stat, range, onCell }) {
  const refs = { a: useRef(null), b: useRef(null), d: useRef(null) };
  const viewers = useRef({});
  const rowRef = useRef(row), onCellRef = useRef(onCell);
  rowRef.current = row;
  onCellRef.current = onCell;
  const [errors, setErrors] = useState({});
  useEffect(() => {
    const sync = { busy: false };
    for (const key of ['a', 'b', 'd']) {
      const v = H.createViewer(refs[key].current);
      v.addHandler('viewport-change', () => {
        if (sync.busy) return;
        sync.busy = true;
        for (const [other, w] of Object.entries(viewers.current)) {
          if (other === key || !w.world.getItemCount()) continue;
          w.viewport.zoomTo(v.viewport.getZoom(true), null, true);
          w.viewport.panTo(v.viewport.getCenter(true), true);
        }
        sync.busy = false;
      });
      v.addHandler('canvas-click', (e) => {
        if (!e.quick) return;
        const r = rowRef.current, at = H.elementAt(v, e.position, r.zoom.pixels_per_element, r.rows, r.cols);
        if (at) onCellRef.current(at);
      });
      viewers.current[key] = v;
    }
    window.__tm = { ...(window.__tm || {}), compareViewers: viewers.current };
    return () => { for (const k of ['a', 'b', 'd']) viewers.current[k].destroy(); viewers.current = {}; };
  }, []);
  useEffect(() => {
    const z = row.zoom, side = q({ stat, cmap: 'diverging', lo: range.side[0], hi: range.side[1] }), diff = q({ stat, lo: range.diff[0], hi: range.diff[1] });
    const fail = (key) => (e) => setErrors((x) => ({ ...x, [key]: e }));
    setErrors({});
    const sources = {
      a: H.tileSource(z, (l, x, y) => `/api/tile/${a}/${row.a_index}/${l}/${x}/${y}.png?${side}`, fail('a')),
      b: H.tileSource(z, (l, x, y) => `/api/tile/${b}/${row.b_index}/${l}/${x}/${y}.png?${side}`, fail('b')),
      d: H.tileSource(z, (l, x, y) => `/api/diff/tile/${a}/${b}/${row.a_index}/${l}/${x}/${y}.png?${diff}`, fail('d')),
    };
    for (const key of ['a', 'b', 'd']) {
      const v = viewers.current[key];
      const at = v.world.getItemCount() ? H.viewOf(v) : null;
      H.openAt(v, sources[key], at);
    }
  }, [row, stat, range]);
  return (
    <div class="triple" id="triple">
      {[['a', 'A'], ['b', 'B'], ['d', 'A − B']].map(([key, label]) => (
        <figure>
          <figcaption>{label}</figcaption>
          <div ref={refs[key]} id={`view-${key}`} class="cmp-view" />
          {errors[key] && <div class="banner error" role="alert">{errors[key].message}{errors[key].hint ? ` — ${errors[key].hint}` : ''}</div>}
        </figure>
      ))}
    </div>
  );
}

function DiffColorBar({ lo, hi }) {
  const ref = useRef(null);
  useEffect(() => { colorTable('diverging', null).then((c) => ref.current && paintBar(ref.current, c)); }, []);
  return <span class="colorbar"><span>{fmt(lo, 3)}</span><canvas ref={ref} id="cmp-colorbar" width="160" height="10" title="A − B, zero at the centre" /><span>{fmt(hi, 3)}</span></span>;
}

function QuantView({ a, b, row, checkpoints, onBlockTarget }) {
  const [type, setType] = useState('Q4_K');
  const [state, setState] = useState({ e: null, error: null, busy: false });
  const ref = useRef(null);
  const target = useMemo(() => {
    if (isQuantized(row.a_dtype) && !isQuantized(row.b_dtype)) return { ckpt: a, tensor: row.a, reference: b, dtype: row.a_dtype };
    if (isQuantized(row.b_dtype) && !isQuantized(row.a_dtype)) return { ckpt: b, tensor: row.b, reference: a, dtype: row.b_dtype };
    if (isQuantized(row.a_dtype)) return { ckpt: a, tensor: row.a, dtype: row.a_dtype, none: true };
    return { ckpt: a, tensor: row.a, type, dtype: type };
  }, [row, a, b, type]);
  useEffect(() => { onBlockTarget(target); }, [target]);
  useEffect(() => {
    if (target.none) { setState({ e: null, error: null, busy: false }); return undefined; }
    let live = true;
    setState({ e: null, error: null, busy: true });
    api('/api/quant-error', { ckpt: target.ckpt, tensor: target.tensor, rows: 0, reference: target.reference, type: target.type })
      .then((e) => { if (live) { setState({ e, error: null, busy: false }); window.__tm.quant = { ...e, target }; } }, (error) => live && setState({ e: null, error, busy: false }));
    return () => { live = false; };
  }, [target]);
  useEffect(() => {
    const h = state.e && state.e.histogram;
    if (!h || !ref.current) return undefined;
    const bins = h.counts.slice(0, -3);
    const plot = histogram(ref.current, { lo: h.lo, hi: h.hi, bins, log: true, width: 360, height: 150, color: '#c8503c' });
    return () => plot.destroy();
  }, [state.e]);
  const e = state.e;
  const figures = e ? [['type', `${e.quantized} vs ${e.reference}`], ['RMSE', fmt(e.rmse)], ['max |e|', fmt(e.max_abs)], ['p95 |e|', fmt(e.p95_abs)], ['p99 |e|', fmt(e.p99_abs)], ['mean e', fmt(e.mean_error)], ['SNR dB', fmt(e.snr_db)]] : [];
  return (
    <section class="quant">
      <h3>Quantization error</h3>
      <p class="dim" id="quant-mode">
        {target.reference !== undefined ? `${target.tensor} (${target.dtype}) measured against ${checkpoints[target.reference]?.name}`
          : target.none ? `${target.tensor} (${target.dtype}) has no unquantized counterpart here`
          : <>what-if: {target.tensor} quantized with ggml's reference quantizer to <select id="quant-type" value={type} onChange={(ev) => setType(ev.currentTarget.value)}>{kWhatIfTypes.map((t) => <option>{t}</option>)}</select></>}
      </p>
      <ErrorNote error={state.error} what="Measuring the quantization error" />
      {state.busy && <div class="dim">measuring…</div>}
      {e && <ExportButtons name={`${target.tensor}-quantization-error`} rows={[e]} columns={['quantized', 'reference', 'rmse', 'max_abs', 'p50_abs', 'p95_abs', 'p99_abs', 'mean_error', 'rel_rms', 'snr_db', 'cosine'].map((key) => ({ key }))} />}
      {e && <table class="facts" id="quant-figures">{figures.map(([k, v]) => <tr><th>{k}</th><td data-figure={k}>{v}</td></tr>)}</table>}
      <div ref={ref} id="quant-histogram" title="error = quantized − reference" />
    </section>
  );
}

function BlockView({ target, cell }) {
  const [b, setB] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    setB(null); setError(null);
    if (!target || !cell || !isQuantized(target.dtype)) return undefined;
    let live = true;
    (async () => {
      const params = { ckpt: target.ckpt, tensor: target.tensor, row: cell.row, block: 0, reference: target.reference, type: target.type };
      let r = await api('/api/block', params);
      if (Math.floor(cell.col / r.block_elements) !== 0) r = await api('/api/block', { ...params, block: Math.floor(cell.col / r.block_elements) });
      if (live) { setB({ ...r, clicked: cell }); window.__tm.block = { ...r, clicked: cell }; }
    })().catch((e) => live && setError(e));
    return () => { live = false; };
  }, [target, cell]);
  if (!cell) return <section class="block-view" id="block-view"><p class="dim">Click a cell of a heatmap (zoomed in) to see its quantization block.</p></section>;
  if (error) return <section class="block-view" id="block-view"><ErrorNote error={error} what="Reading the block" /></section>;
  if (!b) return <section class="block-view" id="block-view"><p class="dim">{target && isQuantized(target.dtype) ? 'reading the block…' : 'neither side is quantized'}</p></section>;
  const hasRef = Array.isArray(b.reference);
  const values = b.decoded.map((v, i) => ({ col: b.cols[0] + i, quant: b.quants.length ? b.quants[i] : '', decoded: v, reference: hasRef ? b.reference[i] : null, error: hasRef ? b.error[i] : null }));
  return (
    <section class="block-view" id="block-view">
      <h3>{b.dtype} block {b.block} of row {b.row} (cols {b.cols[0]}–{b.cols[1] - 1}, {b.mode})</h3>
      <p class="dim">{b.note}</p>
      <table class="facts" id="block-fields">{Object.entries(b.fields).map(([k, v]) => <tr><th>{k}</th><td data-field={k}>{fmt(v)}</td></tr>)}</table>
      {b.sub_blocks.length > 0 && (
        <DataTable id="block-subs" rows={b.sub_blocks.map((s, i) => ({ i, ...s }))} columns={[{ key: 'i', label: 'sub' }, { key: 'first', label: 'elements', render: (s) => `${s.first}–${s.first + s.count - 1}` },
          { key: 'scale_q', label: 'scale q' }, { key: 'scale', label: 'scale', render: (s) => fmt(s.scale) }, { key: 'min_q', label: 'min q', render: (s) => s.min_q ?? '' }, { key: 'min', label: 'min', render: (s) => (s.min_q !== undefined ? fmt(s.min) : '') }]} />
      )}
      <ExportButtons name={`${b.dtype}-block-${b.row}-${b.block}`} rows={values} columns={[{ key: 'col' }, { key: 'quant' }, { key: 'decoded' }, { key: 'reference' }, { key: 'error' }]} />
      <DataTable id="block-values" rows={values} selected={(v) => v.col === cell.col}
        columns={[{ key: 'col', label: 'col' }, { key: 'quant', label: 'quant' }, { key: 'decoded', label: 'decoded', render: (v) => fmt(v.decoded) },
          ...(hasRef ? [{ key: 'reference', label: 'reference', render: (v) => fmt(v.reference) }, { key: 'error', label: 'error', render: (v) => fmt(v.error) }] : [])]} />
    </section>
  );
}

export function CompareView() {
  const list = S.checkpoints.value, a = S.ckpt.value;
  const others = list.filter((c) => c.id !== a);
  const b = S.compareWith.value !== null && S.compareWith.value !== a && list.some((c) => c.id === S.compareWith.value) ? S.compareWith.value : others[0]?.id ?? null;
  const [sort, setSort] = useState('rel_fro');
  const [diff, setDiff] = useState({ d: null, error: null });
  const [row, setRow] = useState(null);
  const [stat, setStat] = useState('mean');
  const [rangeKind, setRangeKind] = useState('symmetric');
  const [sideRange, setSideRange] = useState([-1, 1]);
  const [blockTarget, setBlockTarget] = useState(null);
  const [cell, setCell] = useState(null);
  const name = S.tensorName.value;

  useEffect(() => {
    if (b === null) return undefined;
    let live = true;
    setDiff((x) => ({ d: x.d && x.d.a_id === a && x.d.b_id === b ? x.d : null, error: null }));
    api('/api/diff', { a, b, sort }).then((d) => { if (live) { setDiff({ d, error: null }); window.__tm.diff = d; } }, (error) => live && setDiff({ d: null, error }));
    return () => { live = false; };
  }, [a, b, sort]);

  // The tensor of the table: the selected one when matched, else the most changed.
  const d = diff.d;
  const chosen = d && (d.tensors.find((t) => t.a === name) || d.tensors[0]);
  useEffect(() => {
    setRow(null); setCell(null);
    if (!chosen || b === null) return undefined;
    let live = true;
    (async () => {
      const r = await api('/api/diff/tensor', { a, b, tensor: chosen.a });
      const [sa, sb] = await Promise.all([api('/api/tensor', { ckpt: a, tensor: r.a }), api('/api/tensor', { ckpt: b, tensor: r.b })]);
      const m = Math.max(...[sa, sb].map((s) => (s.summary ? s.summary.range.diverging[1] : 1)));
      if (!live) return;
      setSideRange([-m, m]);
      setRow(r);
      window.__tm.compareRow = r;
    })().catch((error) => live && setDiff((x) => ({ ...x, error })));
    return () => { live = false; };
  }, [chosen && chosen.a, a, b]);

  const range = useMemo(() => (row ? { side: sideRange, diff: row.range[rangeKind] } : null), [row, sideRange, rangeKind]);
  if (list.length < 2) return <Empty title="Compare needs two checkpoints">Serve two: <code>tensormorph serve A B</code> (for the demo, its safetensors set and its GGUF twin).</Empty>;
  return (
    <div class="compare" id="compare">
      <div class="toolbar" id="cmp-controls">
        <span>A: <b>{list.find((c) => c.id === a)?.name}</b></span>
        <Select id="cmp-b" label="B" value={String(b)} onChange={(v) => { S.compareWith.value = Number(v); S.syncUrl(); }} options={others.map((c) => ({ value: String(c.id), label: c.name }))} />
        <span class="dim" id="cmp-summary">{!d ? 'comparing every matched tensor…' : `${count(d.matching.matched)} matched (${d.matching.naming}), ${count(d.tensors.filter((t) => t.identical).length)} identical, ${d.matching.shape_mismatched.length} shape mismatched, ${d.matching.only_a.length} only in A, ${d.matching.only_b.length} only in B`}</span>
      </div>
      <ErrorNote error={diff.error} what="Comparing" />
      {d && <DiffTable diff={d} selected={chosen && chosen.a} sort={sort} onSort={setSort} />}
      {row && <>
        <div class="toolbar" id="cmp-bar">
          <strong id="cmp-title">{row.a} {row.a_dtype} | {row.b} {row.b_dtype} {shapeText(row.shape)}{row.transform ? ` (${row.transform})` : ''}</strong>
          <Select id="cmp-stat" label="pixel" value={stat} onChange={setStat} options={['mean', 'absmax', 'min', 'max']} />
          <Select id="cmp-range" label="A−B range" value={rangeKind} onChange={setRangeKind} options={[{ value: 'symmetric', label: '±max |a−b|' }, { value: 'robust', label: 'robust (±4 RMSE)' }]} />
          <DiffColorBar lo={range.diff[0]} hi={range.diff[1]} />
        </div>
        <Triple a={a} b={b} row={row} stat={stat} range={range} onCell={setCell} />
        <div class="quant-grid">
          <QuantView a={a} b={b} row={row} checkpoints={list} onBlockTarget={setBlockTarget} />
          <BlockView target={blockTarget} cell={cell} />
        </div>
      </>}
    </div>
  );
}
