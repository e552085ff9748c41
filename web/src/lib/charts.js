// uPlot charts in the viewer's theme: histograms (log or linear counts, drag to zoom a range)
// and line charts of a statistic across blocks.
import uPlot from 'uplot';

import { fmt, ticks, shortCount } from './format.js';

const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

function axisStyle() {
  const stroke = css('--text-dim') || '#666', grid = css('--grid') || '#eee';
  return { stroke, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, font: '11px system-ui, sans-serif' };
}

// A log axis labels its decades only (uPlot ticks every multiple in between).
const logTicks = (u, splits) => splits.map((v) => (Number.isInteger(Math.log10(v)) ? shortCount(v) : ''));

/** A histogram of `bins` over [lo, hi]: bars, log counts (empty bins as gaps) or linear; a drag
 *  across it calls `onRange(a, b)`. Returns the uPlot instance. */
export function histogram(element, { lo, hi, bins, log, width, height, color, onRange }) {
  const w = (hi - lo) / bins.length;
  const xs = bins.map((_, i) => lo + (i + 0.5) * w);
  const ys = bins.map((c) => (log && c === 0 ? null : c));
  const a = axisStyle();
  return new uPlot({
    width, height, legend: { show: false },
    scales: { x: { time: false, range: [lo, hi] }, y: log ? { distr: 3, log: 10 } : { range: (u, mn, mx) => [0, Math.max(1, mx * 1.05)] } },
    axes: [
      { ...a, values: (u, splits) => ticks(splits) },
      { ...a, size: 48, values: log ? logTicks : (u, splits) => splits.map((v) => (Number.isInteger(v) ? shortCount(v) : '')) },
    ],
    cursor: { drag: { x: !!onRange, y: false, setScale: false }, points: { show: false } },
    hooks: { setSelect: [(u) => {
      if (!onRange || u.select.width < 3) return;
      const x0 = u.posToVal(u.select.left, 'x'), x1 = u.posToVal(u.select.left + u.select.width, 'x');
      u.setSelect({ width: 0, height: 0 }, false);
      onRange(x0, x1);
    }] },
    series: [{}, { label: 'count', fill: `${color}88`, stroke: color, paths: uPlot.paths.bars({ size: [1, 100] }), points: { show: false } }],
  }, [xs, ys], element);
}

/** Lines of one statistic across blocks, one series per role (coloured by `colorIndex` when
 *  given, else by position); `onPoint(role, block)` on click, `onHover(text)` with the values
 *  under the cursor. */
export function blockLines(element, { blocks, series, width, height, log, onPoint, onHover }) {
  const a = axisStyle();
  const palette = ['#0072B2', '#E69F00', '#009E73', '#CC79A7', '#56B4E9', '#D55E00', '#8c6d1f', '#999999', '#6a3d9a', '#b15928', '#1f78b4', '#33a02c'];
  const plot = new uPlot({
    width, height,
    legend: { show: true, live: false },
    scales: { x: { time: false }, y: log ? { distr: 3, log: 10 } : {} },
    axes: [{ ...a, label: 'block', values: (u, splits) => splits.map((v) => (Number.isInteger(v) ? String(v) : '')) },
      { ...a, size: 60, values: log ? (u, s) => s.map((v) => (Number.isInteger(Math.log10(v)) ? fmt(v, 2) : '')) : (u, splits) => ticks(splits) }],
    cursor: { points: { size: 6 }, focus: { prox: 16 } },
    focus: { alpha: 0.3 },
    series: [{ label: 'block' }, ...series.map((s, i) => ({ label: s.label, stroke: palette[(s.colorIndex ?? i) % palette.length], width: 1.5, spanGaps: false, points: { show: blocks.length <= 48 } }))],
    hooks: {
      setCursor: [(u) => {
        if (!onHover) return;
        const i = u.cursor.idx;
        if (i === null || i === undefined) return onHover('');
        onHover(`block ${blocks[i]}: ` + series.map((s) => `${s.label} ${fmt(s.values[i], 4)}`).join(' · '));
      }],
    },
  }, [blocks, ...series.map((s) => s.values.map((v) => (v === null || !Number.isFinite(v) || (log && v <= 0) ? null : v)))], element);
  if (onPoint) {
    plot.over.addEventListener('click', () => {
      const i = plot.cursor.idx;
      const s = plot.series.findIndex((x, k) => k > 0 && x._focus);
      if (i !== null && i !== undefined && s > 0) onPoint(series[s - 1].label, blocks[i]);
    });
  }
  return plot;
}

// A vertical marker at x (data units) across the plot, drawn after the series, with a label.
function drawMarker(u, x, color, label, dashed, line = 0) {
  if (!(x > 0) || x < u.scales.x.min || x > u.scales.x.max) return;
  const ctx = u.ctx, px = u.valToPos(x, 'x', true), ratio = window.devicePixelRatio || 1;
  ctx.save();
  ctx.strokeStyle = color; ctx.fillStyle = color; ctx.lineWidth = 1.5 * ratio;
  if (dashed) ctx.setLineDash([4 * ratio, 3 * ratio]);
  ctx.beginPath(); ctx.moveTo(px, u.bbox.top); ctx.lineTo(px, u.bbox.top + u.bbox.height); ctx.stroke();
  ctx.font = `${10 * ratio}px system-ui, sans-serif`;
  ctx.fillText(label, px + 3 * ratio, u.bbox.top + (11 + 12 * line) * ratio);  // one label per line: they may sit close
  ctx.restore();
}

/** Singular values by rank on a log y axis (zeros as gaps). Returns the uPlot instance. */
export function singularValues(element, { values, width, height, color }) {
  const a = axisStyle();
  const xs = values.map((_, i) => i + 1), ys = values.map((v) => (v > 0 ? v : null));
  return new uPlot({
    width, height, legend: { show: false },
    scales: { x: { time: false }, y: { distr: 3, log: 10 } },
    axes: [{ ...a, label: 'rank', labelSize: 16, size: 30, values: (u, splits) => splits.map((v) => (Number.isInteger(v) ? String(v) : '')) },
      { ...a, size: 48, values: (u, s) => s.map((v) => (Number.isInteger(Math.log10(v)) ? fmt(v, 2) : '')) }],
    cursor: { points: { size: 5 } },
    series: [{}, { label: 'σ', stroke: color, width: 1.5, points: { show: values.length <= 64 } }],
  }, [xs, ys], element);
}

/** The empirical spectral density on log-log axes: bars of `counts` over log-spaced `edges`, the
 *  counts a fitted power law expects (`fit`, null below xmin) as a line, and markers at xmin and
 *  at the Marchenko-Pastur bulk edge. Returns the uPlot instance. */
export function esdHistogram(element, { edges, counts, fit, xmin, bulkEdge, width, height, color, fitColor, edgeColor }) {
  const a = axisStyle();
  const xs = counts.map((_, i) => Math.sqrt(edges[i] * edges[i + 1]));  // geometric centres
  const series = [{}, { label: 'count', fill: `${color}88`, stroke: color, paths: uPlot.paths.bars({ size: [1, 100] }), points: { show: false } }];
  const data = [xs, counts.map((c) => (c > 0 ? c : null))];
  if (fit) {
    series.push({ label: 'power law', stroke: fitColor, width: 2, points: { show: false }, spanGaps: false });
    data.push(fit.map((v) => (v > 0 ? v : null)));
  }
  const logValues = (u, s) => s.map((v) => (Number.isInteger(Math.log10(v)) ? fmt(v, 2) : ''));
  return new uPlot({
    width, height, legend: { show: false },
    scales: { x: { time: false, distr: 3, log: 10, range: () => [edges[0], edges[edges.length - 1]] }, y: { distr: 3, log: 10 } },
    axes: [{ ...a, label: 'λ = σ² / N', labelSize: 16, size: 30, values: logValues }, { ...a, size: 48, values: logTicks }],
    cursor: { points: { show: false } },
    hooks: { draw: [(u) => {
      drawMarker(u, xmin, fitColor, 'xmin', true);
      drawMarker(u, bulkEdge, edgeColor, 'MP edge', false, 1);
    }] },
    series,
  }, data, element);
}
