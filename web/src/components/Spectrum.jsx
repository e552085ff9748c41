// The inspector's Spectrum section: the singular values of the tensor seen as a matrix (log y), the
// empirical spectral density on log-log axes with the fitted power law from xmin and the
// Marchenko-Pastur bulk edge, and the metrics built on them. An SVD costs far more than a pass over
// the values, so the section stays closed until asked (then it stays open for the next tensors);
// past a budget the consent dialog offers the cheaper rungs, as for quantiles.
import { useEffect, useRef, useState } from 'preact/hooks';

import { api } from '../lib/api.js';
import { singularValues, esdHistogram } from '../lib/charts.js';
import { fmt, count } from '../lib/format.js';
import * as S from '../lib/state.js';
import { Section, ErrorNote, ExportButtons } from './ui.jsx';

const css = (name, fallback) => getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;

/** One uPlot chart made by `make(element, width)` whenever `deps` change. */
function Chart({ id, make, deps }) {
  const ref = useRef(null);
  useEffect(() => {
    if (!ref.current) return undefined;
    const plot = make(ref.current, Math.max(240, ref.current.clientWidth));
    return () => plot.destroy();
  }, [...deps, S.theme.value]);
  return <div ref={ref} id={id} class="spectrum-chart" />;
}

function metricRows(d) {
  const m = d.metrics, pl = m.power_law;
  return [
    ['matrix', `${count(d.rows)} × ${count(d.cols)}`, 'the tensor seen as a matrix'],
    ['σ₁', fmt(m.spectral_norm), 'spectral norm: the largest singular value'],
    ['‖W‖_F', fmt(m.frobenius_norm), 'Frobenius norm: sqrt(Σ σᵢ²)'],
    ['stable rank', fmt(m.stable_rank, 4), '‖W‖_F² / σ₁²'],
    ['effective rank', fmt(m.effective_rank, 4), 'exp of the entropy of σᵢ / Σσ (Roy & Vetterli)'],
    ['rank', count(m.rank), 'singular values above max(rows, cols) · ε · σ₁'],
    ['MP spikes', count(m.mp_spikes), `eigenvalues λ = σ²/N above the Marchenko-Pastur bulk edge ${fmt(m.mp_bulk_edge, 4)}`],
    ['alpha', pl.fitted ? `${fmt(pl.alpha, 4)} (KS ${fmt(pl.ks_distance, 3)}, tail ${count(pl.tail_size)})` : `— (${pl.reason})`,
      'power-law exponent of the ESD tail λ ≥ xmin (WeightWatcher\'s fit); KS: its Kolmogorov-Smirnov distance; tail: eigenvalues fitted'],
    ['weighted alpha', fmt(m.weighted_alpha, 4), 'alpha · log10(σ₁²)'],
  ];
}

export function Spectrum({ ckptId, name }) {
  const [open, setOpen] = useState(S.spectrumOpen.value);
  const [rung, setRung] = useState(null);
  const [state, setState] = useState({ d: null, error: null, consent: null });
  useEffect(() => {
    if (!open) return undefined;
    let live = true;
    setState({ d: null, error: null, consent: null });
    const ask = (body) => S.askConsent({ op: 'spectrum', tensor: name, reason: body.reason, ladder: body.ladder, onChoose: (r) => setRung(r.id) });
    api('/api/spectrum', { ckpt: ckptId, tensor: name, consent: rung || undefined }).then(
      (d) => { if (!live) return; setState({ d, error: null, consent: null }); window.__tm.spectrum = { tensor: name, ...d }; },
      (e) => {
        if (!live) return;
        if (e.needsConsent) { setState({ d: null, error: null, consent: e.body }); ask(e.body); } else setState({ d: null, error: e, consent: null });
      });
    return () => { live = false; };
  }, [ckptId, name, rung, open]);
  const onToggle = (o) => { setOpen(o); S.setSpectrumOpen(o); };
  const { d, error, consent } = state;
  const accent = css('--accent', '#4666c8');
  const esd = d && d.esd;
  const rows = d ? d.values.map((v, i) => ({ rank: i + 1, sigma: v, bound: d.bounds[i] })) : [];
  return (
    <Section title="Spectrum" id="spectrum" open={open} onToggle={onToggle}
      actions={<ExportButtons name={`${name}-singular-values`} rows={rows} columns={[{ key: 'rank' }, { key: 'sigma' }, { key: 'bound' }]} />}>
      <ErrorNote error={error} what="Spectrum" id="spectrum-error" />
      {consent && <div class="needs-consent" id="spectrum-consent">The exact spectrum needs your consent: {consent.reason} <button type="button" class="small"
        onClick={() => S.askConsent({ op: 'spectrum', tensor: name, reason: consent.reason, ladder: consent.ladder, onChoose: (r) => setRung(r.id) })}>choose…</button></div>}
      {!d && !error && !consent && <div class="dim">computing the singular values…</div>}
      {d && <>
        {d.exactness !== 'exact' && <div class="note approx" id="spectrum-note">{d.exactness} ({d.rung}, consented): {d.error_bound}</div>}
        <div class="dim small-note">singular values σ (log scale){d.complete ? '' : ` · the largest ${d.values.length} only`}</div>
        <Chart id="spectrum-values" deps={[d]} make={(el, width) => singularValues(el, { values: d.values, width, height: 150, color: accent })} />
        {esd.counts.length > 0 && <>
          <div class="dim small-note">ESD: eigenvalues λ = σ²/N on log–log axes{esd.fit ? ', the fitted power law from xmin' : ''}{esd.mp_bulk_edge !== undefined ? ', the Marchenko-Pastur bulk edge' : ''}{esd.zeros ? ` · ${count(esd.zeros)} zero` : ''}</div>
          <Chart id="spectrum-esd" deps={[d]} make={(el, width) => esdHistogram(el, {
            edges: esd.edges, counts: esd.counts, fit: esd.fit, xmin: esd.power_law?.xmin, bulkEdge: esd.mp_bulk_edge, width, height: 180,
            color: accent, fitColor: css('--warn', '#d55e00'), edgeColor: css('--bad', '#cc3311') })} />
        </>}
        {d.metrics
          ? <table class="facts" id="spectrum-metrics">{metricRows(d).map(([k, v, why]) => <tr title={why}><th>{k}</th><td data-metric={k}>{d.exactness !== 'exact' ? '~' : ''}{v}</td></tr>)}</table>
          : <div class="dim small-note">metrics need every singular value; this rung gives the largest only</div>}
        <div class="dim small-note">{d.source === 'stored' ? 'kept from an earlier computation (nothing read now)' : 'computed just now'}</div>
      </>}
    </Section>
  );
}
