// Number and size formatting shared by every view. Counts are always exact (grouped digits);
// measurements keep six significant digits; sizes say their unit.

/** A measured value: six significant digits, no trailing zeros; '—' when absent. */
export function fmt(v, digits = 6) {
  if (v === null || v === undefined || v === '') return '—';
  if (typeof v !== 'number') return String(v);
  if (Number.isNaN(v)) return 'NaN';
  if (!Number.isFinite(v)) return v > 0 ? '+Inf' : '-Inf';
  if (v === 0) return Object.is(v, -0) ? '-0' : '0';
  const a = Math.abs(v);
  if (a >= 1e-4 && a < 1e7) return String(Number(v.toPrecision(digits)));
  return v.toExponential(Math.max(0, digits - 3)).replace(/\.?0+e/, 'e');
}

/** An exact count with grouped digits: 1,048,576. */
export function count(n) {
  if (n === null || n === undefined) return '—';
  return typeof n === 'bigint' || Number.isInteger(n) ? n.toLocaleString('en-US') : String(n);
}

/** A short count for badges: 7.2B, 131k (the exact form goes in a title). */
export function shortCount(n) {
  if (n === null || n === undefined) return '—';
  const units = [[1e12, 'T'], [1e9, 'B'], [1e6, 'M'], [1e3, 'k']];
  for (const [size, unit] of units) if (n >= size) return `${Number((n / size).toPrecision(3))}${unit}`;
  return String(n);
}

/** Bytes in binary units: 1.5 GiB. */
export function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0, v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; ++i; }
  return i === 0 ? `${n} B` : `${Number(v.toPrecision(3))} ${units[i]}`;
}

/** Milliseconds, adaptive: 0.42 ms, 12.3 ms, 1.8 s. */
export function ms(v) {
  if (v === null || v === undefined || !(v >= 0)) return '—';
  if (v >= 1000) return `${Number((v / 1000).toPrecision(3))} s`;
  return `${Number(v.toPrecision(v < 1 ? 2 : 3))} ms`;
}

/** "[4096, 11008]". */
export const shape = (s) => `[${(s || []).join(', ')}]`;

/** Axis tick labels for evenly spaced values: just enough decimals to tell neighbours apart. */
export function ticks(values) {
  if (values.length < 2) return values.map((v) => fmt(v));
  const step = Math.abs(values[1] - values[0]);
  const big = Math.max(...values.map((v) => Math.abs(v)));
  if (step > 0 && (big >= 1e5 || big < 1e-3)) return values.map((v) => (v === 0 ? '0' : v.toExponential(1).replace('.0e', 'e')));
  const decimals = step > 0 ? Math.max(0, Math.min(8, -Math.floor(Math.log10(step) + 1e-9))) : 2;
  return values.map((v) => {
    const s = v.toFixed(decimals);
    return Number(s) === 0 ? '0' : s;
  });
}

/** The flat element index's N-D coordinates under `shape` (row-major). */
export function unravel(index, dims) {
  const out = new Array(dims.length).fill(0);
  let rest = index;
  for (let d = dims.length - 1; d >= 0; --d) {
    out[d] = rest % dims[d];
    rest = Math.floor(rest / dims[d]);
  }
  return out;
}

/** Compares names so that numbers inside them sort by value: blk.2 < blk.10. */
export const naturalCompare = new Intl.Collator('en', { numeric: true, sensitivity: 'base' }).compare;
