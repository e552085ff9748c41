// The inspector beside the heatmap: exact statistics, the distribution (exact quantiles and a
// histogram with log counts and range zoom), the outliers, each a click from the heatmap, and the
// spectrum of a matrix (Spectrum.jsx).
import { useEffect, useRef, useState } from 'preact/hooks';

import { api } from '../lib/api.js';
import { histogram } from '../lib/charts.js';
import { afterFirstHeatmap, heatmapPainted } from '../lib/heatmap.js';
import { fmt, count } from '../lib/format.js';
import * as S from '../lib/state.js';
import { heatmapActions } from './Shortcuts.jsx';
import { Spectrum } from './Spectrum.jsx';
import { Section, ErrorNote, ExportButtons, DataTable } from './ui.jsx';

/** Loads `path` with `params` whenever `deps` change; {data, error, busy, reload}. */
function useApi(path, params, deps) {
  const [state, setState] = useState({ data: null, error: null, busy: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    if (!params) { setState({ data: null, error: null, busy: false }); return undefined; }
    let live = true;
    setState((s) => ({ ...s, busy: true, error: null }));
    api(path, params).then((data) => live && setState({ data, error: null, busy: false }), (error) => live && setState({ data: null, error, busy: false }));
    return () => { live = false; };
  }, [...deps, tick]);
  return { ...state, reload: () => setTick(tick + 1) };
}

const percent = (n, total) => (total > 0 ? `${Number(((100 * n) / total).toPrecision(3))}%` : '');

function Statistics({ ckptId, name }) {
  // Each press of "recompute" reads the tensor again (a count, so that every press asks anew).
  const [recompute, setRecompute] = useState(0);
  const { data: s, error, busy } = useApi('/api/stats', { ckpt: ckptId, tensor: name, recompute: recompute > 0 ? 1 : 0 }, [ckptId, name, recompute]);
  useEffect(() => setRecompute(0), [name]);
  const rows = s ? [
    ['count', count(s.count)], ['finite', count(s.finite)], ['NaN', count(s.nan)], ['+Inf', count(s.pos_inf)], ['-Inf', count(s.neg_inf)],
    ['zeros', `${count(s.zeros)} ${s.count ? `(${percent(s.zeros, s.count)})` : ''}`], ['min', fmt(s.min)], ['max', fmt(s.max)], ['absmax', fmt(s.absmax)],
    ['mean', fmt(s.mean)], ['std', fmt(s.std)], ['outlier score', `${fmt(s.outlier_score, 3)} σ`],
  ] : [];
  const exportRows = s ? [{ statistic: 'source', value: s.source }, ...['count', 'finite', 'nan', 'pos_inf', 'neg_inf', 'zeros', 'min', 'max', 'absmax', 'mean', 'std', 'outlier_score'].map((k) => ({ statistic: k, value: s[k] }))] : [];
  return (
    <Section title="Statistics" id="statistics" actions={<>
      <button type="button" class="small" id="recompute" title="read every element again and compute exactly" onClick={() => setRecompute(recompute + 1)}>recompute</button>
      <ExportButtons name={`${name}-statistics`} rows={exportRows} columns={[{ key: 'statistic' }, { key: 'value' }]} />
    </>}>
      <ErrorNote error={error} what="Statistics" />
      {busy && !s && <div class="dim">computing…</div>}
      {s && <>
        <table class="facts" id="stats">{rows.map(([k, v]) => <tr class={(k === 'NaN' || k.endsWith('Inf')) && v !== '0' ? 'bad' : ''}><th>{k}</th><td data-stat={k}>{v}</td></tr>)}</table>
        <div class="dim small-note">from {s.source === 'index' ? 'the index (exact, nothing read now)' : s.source === 'exact' ? 'an exact computation in the tensor\'s own type' : 'a computation just now'}</div>
      </>}
    </Section>
  );
}

function Histogram({ ckptId, name, range, approximate }) {
  const ref = useRef(null), plotRef = useRef(null);
  const [log, setLog] = useState(true);
  const [span, setSpan] = useState(null);
  const [h, setH] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => setSpan(null), [name, range && range[0], range && range[1]]);
  const [lo, hi] = span || range || [null, null];
  useEffect(() => {
    if (lo === null) return undefined;
    let live = true;
    let a = lo, b = hi;
    if (!(a < b)) { const c = Number.isFinite(a) ? a : 0; a = c - 0.5; b = c + 0.5; }
    api('/api/histogram', { ckpt: ckptId, tensor: name, bins: 64, lo: a, hi: b }).then((r) => { if (live) { setH(r); setError(null); } }, (e) => live && setError(e));
    return () => { live = false; };
  }, [ckptId, name, lo, hi]);
  useEffect(() => {
    if (!h || !ref.current) return undefined;
    const style = getComputedStyle(document.documentElement);
    plotRef.current = histogram(ref.current, { lo: h.lo, hi: h.hi, bins: h.bins, log, width: Math.max(240, ref.current.clientWidth), height: 160,
      color: style.getPropertyValue('--accent').trim() || '#4666c8', onRange: (x, y) => setSpan([x, y]) });
    window.__tm.histogram = { tensor: name, ...h, log };
    return () => plotRef.current.destroy();
  }, [h, log, S.theme.value]);
  return (
    <div class="histogram-box">
      <div class="row">
        <label class="check"><input id="hist-log" type="checkbox" checked={log} onChange={(e) => setLog(e.currentTarget.checked)} /> log counts</label>
        <button type="button" class="small" id="hist-reset" title="the robust range (0.1% to 99.9%)" onClick={() => setSpan(null)}>robust</button>
        <button type="button" class="small" id="hist-full" title="from the minimum to the maximum" onClick={() => range && setSpan(range.full)}>full</button>
        <ExportButtons name={`${name}-histogram`} rows={h ? h.bins.map((c, i) => ({ lo: h.lo + (i * (h.hi - h.lo)) / h.bins.length, hi: h.lo + ((i + 1) * (h.hi - h.lo)) / h.bins.length, count: c })) : []}
          columns={[{ key: 'lo' }, { key: 'hi' }, { key: 'count' }]} />
      </div>
      <ErrorNote error={error} what="Histogram" />
      <div ref={ref} id="histogram" title="drag across to zoom into a range" />
      {h && <div class="dim small-note" id="hist-range">{fmt(h.lo)} … {fmt(h.hi)} · below {count(h.below)} · above {count(h.above)} · NaN {count(h.nan)}{approximate ? ' · range from approximate quantiles' : ''}</div>}
    </div>
  );
}

function Distribution({ ckptId, name }) {
  const [rung, setRung] = useState(null);
  const [state, setState] = useState({ d: null, error: null, consent: null });
  useEffect(() => setRung(null), [name]);
  useEffect(() => {
    let live = true;
    setState({ d: null, error: null, consent: null });
    api('/api/quantiles', { ckpt: ckptId, tensor: name, consent: rung || undefined }).then(
      (d) => { if (!live) return; setState({ d, error: null, consent: null }); window.__tm.quantiles = { tensor: name, ...d }; },
      (e) => {
        if (!live) return;
        if (e.needsConsent) {
          setState({ d: null, error: null, consent: e.body });
          S.askConsent({ op: 'quantiles', tensor: name, reason: e.body.reason, ladder: e.body.ladder, onChoose: (r) => setRung(r.id) });
        } else setState({ d: null, error: e, consent: null });
      });
    return () => { live = false; };
  }, [ckptId, name, rung]);
  const { d, error, consent } = state;
  const approximate = d && d.exactness === 'approximate';
  const rows = d ? d.quantiles.map((v) => ({ p: v.probability, quantile: `${Number((v.probability * 100).toPrecision(6))}%`, value: v.linear, interval: v.interval })) : [];
  if (d && d.median_absolute_deviation !== undefined) rows.push({ p: null, quantile: 'MAD', value: d.median_absolute_deviation });
  let range = null;
  if (d && d.finite > 0) { range = [...d.robust_range]; range.full = [d.quantiles[0].linear, d.quantiles[d.quantiles.length - 1].linear]; }
  return (
    <Section title="Distribution" id="distribution" actions={<ExportButtons name={`${name}-quantiles`} rows={rows} columns={[{ key: 'p', label: 'probability' }, { key: 'value' }]} />}>
      <ErrorNote error={error} what="Quantiles" />
      {consent && <div class="needs-consent" id="quantiles-consent">Exact quantiles need your consent: {consent.reason} <button type="button" class="small" onClick={() => S.askConsent({ op: 'quantiles', tensor: name, reason: consent.reason, ladder: consent.ladder, onChoose: (r) => setRung(r.id) })}>choose…</button></div>}
      {!d && !error && !consent && <div class="dim">computing exact quantiles…</div>}
      {d && d.finite === 0 && <div class="dim">no finite values</div>}
      {d && d.finite > 0 && (
        <table class="facts quantiles" id="quantiles">
          {rows.map((r) => <tr data-p={r.quantile} title={r.interval ? `within [${fmt(r.interval[0])}, ${fmt(r.interval[1])}]` : ''}><th>{r.quantile}</th><td>{approximate ? '~' : ''}{fmt(r.value)}</td></tr>)}
        </table>
      )}
      {approximate && <div class="note approx" id="quantiles-note">approximate ({d.rung}, consented): {d.error_bound}</div>}
      {d && <Histogram ckptId={ckptId} name={name} range={range} approximate={approximate} />}
    </Section>
  );
}

function Outliers({ ckptId, name }) {
  const { data: o, error } = useApi('/api/outliers', { ckpt: ckptId, tensor: name, k: 20 }, [ckptId, name]);
  useEffect(() => { if (o) window.__tm.outliers = { tensor: name, ...o }; }, [o]);
  const top = o ? o.top_k.map((e, i) => ({ rank: i + 1, ...e })) : [];
  const channels = o ? o.outlier_channels.slice(0, 50) : [];
  return (
    <Section title="Outliers" id="outliers-panel" actions={<ExportButtons name={`${name}-outliers`} rows={top} columns={[{ key: 'rank' }, { key: 'row' }, { key: 'col' }, { key: 'value' }]} />}>
      <ErrorNote error={error} what="Outliers" />
      {o && <>
        <div class="dim small-note">largest magnitudes (click to zoom there)</div>
        <DataTable id="outliers" rows={top} onRow={(r) => heatmapActions.showElement?.(r.row, r.col)}
          columns={[{ key: 'rank', label: '#' }, { key: 'row', label: 'row', align: 'right' }, { key: 'col', label: 'col', align: 'right' }, { key: 'value', label: 'value', align: 'right', render: (r) => fmt(r.value) }]} />
        <div class="row small-note"><span class="dim">outlier rows and columns: a value ≥ 6 in magnitude, or a norm far above the rest</span><span class="spacer" />
          <ExportButtons name={`${name}-outlier-channels`} rows={channels} columns={[{ key: 'axis' }, { key: 'index' }, { key: 'absmax' }, { key: 'l2' }, { key: 'robust_z' }, { key: 'why', value: (c) => c.why.join('; ') }]} /></div>
        <DataTable id="outlier-channels" rows={channels} onRow={(c) => heatmapActions.showChannel?.(c.axis, c.index)} empty="none"
          columns={[{ key: 'channel', label: 'channel', render: (c) => `${c.axis} ${c.index}` }, { key: 'absmax', label: 'absmax', align: 'right', render: (c) => fmt(c.absmax) },
            { key: 'l2', label: 'L2', align: 'right', render: (c) => fmt(c.l2) }, { key: 'why', label: 'why', render: (c) => c.why.join(', ') }]} />
      </>}
    </Section>
  );
}

export function Inspector() {
  const name = S.tensorName.value, ckptId = S.ckpt.value;
  const [heatmapFirst, setHeatmapFirst] = useState(() => !heatmapPainted());
  useEffect(() => (heatmapFirst ? afterFirstHeatmap(() => setHeatmapFirst(false)) : undefined), []);
  if (!name) return <div class="inspector dim">no tensor selected</div>;
  if (heatmapFirst) return <div class="inspector dim">statistics, distribution and outliers follow the heatmap…</div>;
  return (
    <div class="inspector" key={`${ckptId}/${name}`}>
      <Statistics ckptId={ckptId} name={name} />
      <Distribution ckptId={ckptId} name={name} />
      <Outliers ckptId={ckptId} name={name} />
      {/* Vectors have no spectrum beyond their norm. */}
      {(S.currentTensor.value?.shape.length ?? 0) >= 2 && <Spectrum ckptId={ckptId} name={name} />}
    </div>
  );
}
