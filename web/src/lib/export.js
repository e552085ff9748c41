// Exports: every table as CSV or JSON, the heatmap view as PNG with its colour bar.
import { fmt } from './format.js';

/** Offers a Blob for download under `filename`. */
export function download(blob, filename) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// RFC 4180: quote a field holding a comma, quote or line break; double inner quotes.
const csvField = (v) => {
  const s = v === null || v === undefined ? '' : String(v);
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
};

/** CSV text of rows (objects) under columns [{key, label}]; values as the API gave them. */
export function toCsv(columns, rows) {
  const lines = [columns.map((c) => csvField(c.label || c.key)).join(',')];
  for (const r of rows) lines.push(columns.map((c) => csvField(typeof c.value === 'function' ? c.value(r) : r[c.key])).join(','));
  return lines.join('\r\n') + '\r\n';
}

/** A file name from parts: letters, digits, dots, dashes. */
export const fileName = (...parts) => parts.filter(Boolean).join('-').replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 120);

/** Downloads a table as CSV or JSON (the rows themselves). */
export function exportTable(kind, name, columns, rows) {
  if (kind === 'json') download(new Blob([JSON.stringify(rows, null, 1)], { type: 'application/json' }), `${name}.json`);
  else download(new Blob([toCsv(columns, rows)], { type: 'text/csv' }), `${name}.csv`);
}

/** The heatmap as the user sees it (tiles, value labels) with a colour bar and a caption below:
 *  a PNG Blob of the viewer's device-pixel size plus the legend band. */
export async function heatmapPng({ canvas, overlay, colors, lo, hi, caption }) {
  const band = Math.round(44 * (window.devicePixelRatio || 1));
  const out = document.createElement('canvas');
  out.width = canvas.width;
  out.height = canvas.height + band;
  const ctx = out.getContext('2d');
  ctx.fillStyle = '#ffffff';
  ctx.fillRect(0, 0, out.width, out.height);
  ctx.drawImage(canvas, 0, 0);
  if (overlay && overlay.width) ctx.drawImage(overlay, 0, 0, canvas.width, canvas.height);
  const scale = band / 44, pad = 8 * scale, barW = Math.min(256 * scale, out.width / 3), barY = canvas.height + 8 * scale;
  if (colors) {
    for (let x = 0; x < barW; ++x) {
      const c = colors[Math.min(255, Math.floor((x / barW) * 256))];
      ctx.fillStyle = `rgb(${c[0]},${c[1]},${c[2]})`;
      ctx.fillRect(pad + x, barY, 1, 12 * scale);
    }
  }
  ctx.fillStyle = '#111';
  ctx.font = `${11 * scale}px system-ui, sans-serif`;
  ctx.textBaseline = 'top';
  ctx.fillText(fmt(lo), pad, barY + 15 * scale);
  const hiText = fmt(hi);
  ctx.fillText(hiText, pad + barW - ctx.measureText(hiText).width, barY + 15 * scale);
  ctx.fillText(caption, pad * 2 + barW, barY);
  return new Promise((resolve) => out.toBlob(resolve, 'image/png'));
}
