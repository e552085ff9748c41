// The model as the views see it: tensors by name, the tree of stacks and blocks, the search
// rule, and what makes a tensor unusual. Layout fields (stack, block, role) come from the server.
import { naturalCompare } from './format.js';

/** An /api/tensors?form=columns answer's tensors as objects (the form=entries shape). */
function tensorsOf(columns, total) {
  const decode = (c) => (c && c.codes ? c.codes.map((i) => c.values[i]) : c);
  const fields = Object.entries(columns).filter(([k]) => k !== 'stats').map(([k, c]) => [k, decode(c)]);
  const stats = columns.stats ? Object.entries(columns.stats) : [];
  const tensors = new Array(total);
  for (let i = 0; i < total; ++i) {
    const t = {};
    for (const [k, c] of fields) t[k] = c[i];
    let s = null;
    if (stats.length && stats[0][1][i] !== null) {
      s = {};
      for (const [k, c] of stats) s[k] = c[i];
    }
    t.stats = s;
    tensors[i] = t;
  }
  return tensors;
}

/** Adds lookups to an /api/tensors answer (either form). */
export function prepareModel(answer) {
  const tensors = answer.columns ? tensorsOf(answer.columns, answer.total) : answer.tensors;
  const byName = new Map();
  for (const t of tensors) byName.set(t.name, t);
  const { columns, ...rest } = answer;
  return { ...rest, tensors, byName };
}

/** Number of non-finite values a tensor's index statistics found (0 when unknown). */
export const nonFinite = (t) => (t.stats ? t.stats.nan + t.stats.pos_inf + t.stats.neg_inf : 0);

// Values centred far from zero (norm weights near 1): the default view shows their spread around
// the centre instead of magnitudes that all look alike.
/** True when the tensor's values sit far from zero compared with their spread. */
export const isCentred = (s) => !!s && s.std > 0 && Math.abs(s.mean) > 3 * s.std;

/** An outlier score worth a badge: several standard deviations further than a Gaussian of this
 *  size would reach (about sqrt(2 ln n) + 2). */
export function outlierBadge(t) {
  const s = t.stats;
  if (!s || !(s.outlier_score > 0) || s.finite < 16) return null;
  const expected = Math.sqrt(2 * Math.log(s.finite)) + 2;
  return s.outlier_score > Math.max(6, 1.5 * expected) ? s.outlier_score : null;
}

/** Tensors ranked most unusual first: non-finite values, then outlier score beyond expectation. */
export function unusualTensors(model, limit = 8) {
  const scored = [];
  for (const t of model.tensors) {
    const bad = nonFinite(t);
    const s = t.stats;
    if (bad > 0) scored.push({ t, score: 1e12 + bad, why: describeNonFinite(s) });
    else if (outlierBadge(t)) scored.push({ t, score: s.outlier_score, why: `farthest value ${s.outlier_score.toFixed(1)} σ from the mean` });
  }
  scored.sort((a, b) => b.score - a.score);
  return scored.slice(0, limit);
}

/** "1 NaN, 1 +Inf". */
export function describeNonFinite(s) {
  if (!s) return '';
  return [[s.nan, 'NaN'], [s.pos_inf, '+Inf'], [s.neg_inf, '-Inf']].filter(([n]) => n > 0).map(([n, w]) => `${n.toLocaleString('en-US')} ${w}`).join(', ');
}

// Case-insensitive; every space-separated word must occur (in the name, the dtype or the role).
/** The search rule of the tree and the top bar. */
export function matcher(text) {
  const words = text.toLowerCase().split(/\s+/).filter(Boolean);
  if (!words.length) return null;
  return (t) => {
    const hay = `${t.name} ${t.dtype} ${t.role_label || ''}`.toLowerCase();
    return words.every((w) => hay.includes(w));
  };
}

const trees = new WeakMap();
/** The tree: top-level tensors in file order, and stacks of numbered blocks of tensors (made
 *  once per model). */
export function buildTree(model) {
  if (!trees.has(model)) trees.set(model, makeTree(model));
  return trees.get(model);
}

function makeTree(model) {
  const stacks = new Map();
  const roots = [];
  for (const t of model.tensors) {
    if (t.block === null || t.block === undefined) { roots.push({ kind: 'tensor', tensor: t, first: t.index }); continue; }
    const key = t.stack;
    if (!stacks.has(key)) {
      const node = { kind: 'stack', key, label: key || 'blocks', blocks: new Map(), first: t.index };
      stacks.set(key, node);
      roots.push(node);
    }
    const node = stacks.get(key);
    if (!node.blocks.has(t.block)) node.blocks.set(t.block, { kind: 'block', key: `${key}#${t.block}`, block: t.block, tensors: [] });
    node.blocks.get(t.block).tensors.push(t);
  }
  const order = roleOrder(model);
  for (const s of stacks.values()) {
    s.blockList = [...s.blocks.values()].sort((a, b) => a.block - b.block);
    for (const b of s.blockList) b.tensors.sort((x, y) => (order.get(x.role) ?? 1e9) - (order.get(y.role) ?? 1e9) || naturalCompare(x.role, y.role));
  }
  return roots;
}

/** Role → column position, from the server's per-stack role order. */
export function roleOrder(model) {
  const order = new Map();
  for (const s of model.stacks || []) s.roles.forEach((r, i) => { if (!order.has(r)) order.set(r, i); });
  return order;
}

const orders = new WeakMap();
/** Tensors in the order the tree shows them (for next/previous). */
export function treeOrder(tree) {
  if (!orders.has(tree)) orders.set(tree, makeOrder(tree));
  return orders.get(tree);
}

function makeOrder(tree) {
  const out = [];
  for (const n of tree) {
    if (n.kind === 'tensor') out.push(n.tensor);
    else for (const b of n.blockList) out.push(...b.tensors);
  }
  return out;
}

/** A short label for a tensor inside its block: its role label, else its role. */
export const shortName = (t) => (t.block !== null && t.block !== undefined ? t.role : t.name);
