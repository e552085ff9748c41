// The overview's spectra: for each stack, the power-law alpha and the stable rank of every matrix
// across blocks, one line per role. What earlier runs kept shows at once; "Compute spectra" asks
// the server for the rest one tensor at a time (exact SVDs within the budgets only), so that the
// charts fill in as it goes and it can be stopped. Tensors that need consent or fail are listed.
import { useEffect, useRef, useState } from 'preact/hooks';

import { api } from '../lib/api.js';
import { blockLines } from '../lib/charts.js';
import { count } from '../lib/format.js';
import * as S from '../lib/state.js';
import { ErrorNote } from './ui.jsx';

const METRICS = [
  { key: 'alpha', label: 'power-law alpha', value: (m) => m.power_law.alpha },
  { key: 'stable_rank', label: 'stable rank', value: (m) => m.stable_rank },
];

/** One metric across the blocks of a stack, a line per role with at least one value. */
function MetricLines({ stack, known, metric }) {
  const ref = useRef(null);
  const [hover, setHover] = useState('');
  useEffect(() => {
    const blocks = stack.blockList.map((b) => b.block);
    const index = new Map(blocks.map((b, i) => [b, i]));
    // Each role keeps the colour it has in the statistic's lines above (its index in the stack).
    const series = stack.roles.map((r, i) => ({ role: r, label: stack.labels[i], colorIndex: i, values: new Array(blocks.length).fill(null) }));
    const byRole = new Map(series.map((s) => [s.role, s]));
    for (const t of stack.tensors) {
      const m = known.get(t.name)?.metrics;
      const v = m ? metric.value(m) : null;
      if (v !== null && v !== undefined) byRole.get(t.role).values[index.get(t.block)] = v;
    }
    const shown = series.filter((s) => s.values.some((v) => v !== null));
    window.__tm.spectraCharts = { ...(window.__tm.spectraCharts || {}), [`${stack.key}/${metric.key}`]: { blocks, series: shown } };
    if (!shown.length) return undefined;
    const plot = blockLines(ref.current, {
      blocks, series: shown, width: Math.max(320, ref.current.clientWidth), height: 200, onHover: setHover,
      onPoint: (label, block) => {
        const t = stack.tensors.find((x) => x.block === block && stack.labels[stack.roles.indexOf(x.role)] === label);
        if (t) S.go({ tensor: t.name, view: 'tensor' });
      },
    });
    return () => plot.destroy();
  }, [stack, known, S.theme.value]);
  return (
    <div class="role-lines">
      <div class="row"><strong>{metric.label} by block</strong><span class="dim hover-line">{hover}</span></div>
      <div ref={ref} class="chart spectra-chart" data-stack={stack.key} data-metric={metric.key} />
    </div>
  );
}

/** Names (at most five) and what they share (`what`: [singular, plural]), for the tensors left out. */
function LeftOut({ rows, what, id }) {
  if (!rows.length) return null;
  return (
    <div class="note" id={id}>{count(rows.length)} {rows.length === 1 ? `tensor ${what[0]}` : `tensors ${what[1]}`}:{' '}
      {rows.slice(0, 5).map((r) => (
        <button type="button" class="link" title={r.reason || r.error} onClick={() => S.go({ tensor: r.name, view: 'tensor' })}>{r.name} </button>
      ))}{rows.length > 5 ? '…' : ''}
    </div>
  );
}

export function SpectraPanel({ stacks }) {
  const ckptId = S.ckpt.value;
  const [known, setKnown] = useState(() => new Map());  // name -> /api/spectra row
  const [progress, setProgress] = useState(null);       // {done, total, name, running}
  const [error, setError] = useState(null);
  const run = useRef(0);  // the running walk's number; another number stops it
  useEffect(() => {
    run.current += 1;
    setKnown(new Map()); setProgress(null); setError(null);
    api('/api/spectra', { ckpt: ckptId }).then((r) => setKnown(new Map(r.tensors.map((t) => [t.name, t]))), setError);
    return () => { run.current += 1; };
  }, [ckptId]);

  const compute = async () => {
    const mine = ++run.current;
    const map = new Map(known);
    setError(null);
    let from = 0, total = Infinity;
    try {
      while (from < total && run.current === mine) {
        const r = await api('/api/spectra', { ckpt: ckptId, compute: 1, from, limit: 1 });
        if (run.current !== mine) return;
        total = r.total;
        for (const t of r.tensors) map.set(t.name, t);
        setKnown(new Map(map));
        setProgress({ done: r.next, total, name: r.tensors[0]?.name, running: r.next < total });
        if (r.next <= from) break;
        from = r.next;
      }
    } catch (e) { if (run.current === mine) setError(e); }
    if (run.current === mine) setProgress((p) => (p ? { ...p, running: false } : p));
  };
  const stop = () => { run.current += 1; setProgress((p) => (p ? { ...p, running: false } : p)); };

  const rows = [...known.values()];
  const withMetrics = rows.filter((r) => r.metrics).length;
  const running = progress && progress.running;
  window.__tm.spectra = { known: withMetrics, progress };
  return (
    <div class="spectra" id="spectra">
      <div class="row">
        <h3>Spectra</h3>
        <span class="dim">{withMetrics ? `${count(withMetrics)} matrices known` : 'no spectra computed yet'}</span>
        <span class="spacer" />
        {running
          ? <button type="button" id="spectra-stop" onClick={stop}>stop</button>
          : <button type="button" id="spectra-compute" title="the exact singular values of every matrix not yet known, one at a time, within the compute budgets" onClick={compute}>Compute spectra</button>}
      </div>
      {progress && <div class="dim small-note" id="spectra-progress">{running ? `computing ${count(progress.done)} / ${count(progress.total)} · ${progress.name || ''}` : `done: ${count(progress.done)} / ${count(progress.total)} matrices`}</div>}
      <ErrorNote error={error} what="Spectra" />
      <LeftOut rows={rows.filter((r) => r.state === 'needs_consent')} what={['needs consent for its exact spectrum (open it to choose a rung)', 'need consent for their exact spectrum (open one to choose a rung)']} id="spectra-consent" />
      <LeftOut rows={rows.filter((r) => r.state === 'error')} what={['has no spectrum', 'have no spectrum']} id="spectra-errors" />
      {withMetrics > 0 && stacks.map((s) => (
        <div class="spectra-stack">
          {stacks.length > 1 && <strong>{s.key}</strong>}
          {METRICS.map((m) => <MetricLines stack={s} known={known} metric={m} />)}
        </div>
      ))}
    </div>
  );
}
