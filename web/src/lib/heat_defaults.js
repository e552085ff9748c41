// The heatmap's defaults, chosen to show structure: magnitudes (absmax) on a sequential map for
// weights centred on zero; values around their centre for tensors centred far from zero (norm
// weights near 1). Ranges are robust (mean ± 4 std within the extremes, from the server).
import { isCentred } from './model.js';

export const PIXEL_STATS = [
  { value: 'absmax', label: 'absmax', title: 'largest |value| of the block a pixel covers' },
  { value: 'std', label: 'std', title: 'standard deviation of the block' },
  { value: 'mean', label: 'mean', title: 'mean of the block' },
  { value: 'envelope', label: 'signed extreme', title: 'the min or max of the block, whichever is further from zero' },
  { value: 'min', label: 'min' },
  { value: 'max', label: 'max' },
  { value: 'nonfinite', label: 'NaN/Inf mask', title: 'blocks holding NaN (magenta), +Inf (orange), -Inf (cyan)' },
];

export const SCALES = [
  { value: 'sequential', label: 'linear', title: 'lo → hi on a sequential palette' },
  { value: 'diverging', label: 'diverging', title: 'centred on zero: −max(|lo|,|hi|) → +max' },
  { value: 'log', label: 'log |v|', title: 'log10 of the magnitude between lo > 0 and hi' },
];

/** The default pixel statistic and scale for a tensor's summary. */
export function defaultStatScale(summary) {
  if (isCentred(summary)) return { stat: 'mean', scale: 'sequential' };
  return { stat: 'absmax', scale: 'sequential' };
}

/** The default range of a statistic on a scale, from the summary's robust ranges. */
export function defaultRange(summary, stat, scale) {
  if (!summary || !summary.range) return scale === 'log' ? [1e-4, 1] : scale === 'diverging' ? [-1, 1] : [0, 1];
  const r = summary.range;
  if (scale === 'log') return r.log;
  if (scale === 'diverging') return r.diverging;
  if (stat === 'absmax' || stat === 'std') return r.magnitude[1] > 0 ? r.magnitude : [0, 1];
  return r.sequential;
}

/** The settings in effect: the user's choices where made, else the defaults. */
export function effectiveHeat(heat, summary) {
  const d = defaultStatScale(summary);
  const stat = heat.stat || d.stat, scale = heat.scale || d.scale;
  const [dlo, dhi] = defaultRange(summary, stat, scale);
  const lo = heat.lo ?? dlo, hi = heat.hi ?? dhi;
  return { stat, scale, palette: heat.palette || '', lo, hi, custom: heat.lo !== null && heat.hi !== null };
}
