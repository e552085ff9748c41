// The model tree: tensors outside blocks, stacks of numbered blocks (collapsible, in numeric
// order), tensors by role; search narrows it (case-insensitive words); badges mark NaN/Inf and
// outliers beyond what the tensor's size explains.
import { useMemo, useState, useEffect, useRef } from 'preact/hooks';

import { shape as shapeText, count, bytes } from '../lib/format.js';
import { buildTree, matcher, nonFinite, outlierBadge, describeNonFinite, shortName } from '../lib/model.js';
import * as S from '../lib/state.js';
import { Dotted } from './ui.jsx';

const kMaxRows = 150;

function TensorRow({ t, label, selected }) {
  const bad = nonFinite(t);
  const outlier = outlierBadge(t);
  const ref = useRef(null);
  useEffect(() => { if (selected && ref.current) ref.current.scrollIntoView({ block: 'nearest' }); }, [selected]);
  return (
    <div ref={ref} class={`tensor${selected ? ' selected' : ''}`} data-name={t.name} role="treeitem" aria-selected={selected}
      title={`${t.name}\n${t.dtype} ${shapeText(t.shape)} · ${count(t.elements)} elements · ${bytes(t.bytes)}`}
      onClick={() => S.go({ tensor: t.name, view: S.view.value === 'compare' ? 'compare' : 'tensor' })}>
      <span class="tname"><Dotted name={label} /></span>
      <span class="tmeta">
        {bad > 0 && <span class="badge bad" title={describeNonFinite(t.stats)}>NaN/Inf</span>}
        {outlier && <span class="badge outlier" title="the farthest value lies this many standard deviations from the mean">{outlier.toFixed(0)}σ</span>}
        <span class="badge dtype">{t.dtype}</span>
        <span class="shape">{shapeText(t.shape)}</span>
      </span>
    </div>
  );
}

const flags = new WeakMap();
/** How many tensors of a block hold NaN/Inf and how many carry an outlier badge (once per block). */
function blockFlags(block) {
  if (!flags.has(block)) {
    let bad = 0, outliers = 0;
    for (const t of block.tensors) { if (nonFinite(t) > 0) ++bad; if (outlierBadge(t)) ++outliers; }
    flags.set(block, { bad, outliers });
  }
  return flags.get(block);
}

export function Tree() {
  const m = S.model.value;
  const tree = useMemo(() => (m ? buildTree(m) : []), [m]);
  const [open, setOpen] = useState(() => new Set());
  const selected = S.tensorName.value;

  // A model with one or two stacks shows their blocks at once (still collapsed).
  useEffect(() => {
    const stacks = tree.filter((n) => n.kind === 'stack');
    setOpen(new Set(stacks.length <= 2 ? stacks.map((n) => `stack:${n.key}`) : []));
  }, [tree]);
  const test = matcher(S.search.value);

  // The selected tensor's stack and block open by themselves.
  useEffect(() => {
    const t = m && selected ? m.byName.get(selected) : null;
    if (!t || t.block === null || t.block === undefined) return;
    const keys = [`stack:${t.stack}`, `${t.stack}#${t.block}`];
    setOpen((prev) => (keys.every((k) => prev.has(k)) ? prev : new Set([...prev, ...keys])));
  }, [tree, selected]);

  if (!m) return <div class="tree dim">…</div>;
  const toggle = (key) => { const next = new Set(open); if (next.has(key)) next.delete(key); else next.add(key); setOpen(next); };

  if (test) {
    const hits = m.tensors.filter(test);
    return (
      <div class="tree" role="tree" id="tree">
        <div class="tree-note">{hits.length === 0 ? 'no tensor matches' : `${count(hits.length)} match${hits.length === 1 ? '' : 'es'}`}</div>
        {hits.slice(0, kMaxRows).map((t) => <TensorRow key={t.name} t={t} label={t.name} selected={t.name === selected} />)}
        {hits.length > kMaxRows && <div class="tree-note">{count(hits.length - kMaxRows)} more — add a word to narrow the search</div>}
      </div>
    );
  }

  return (
    <div class="tree" role="tree" id="tree">
      {tree.map((node) => {
        if (node.kind === 'tensor') return <TensorRow t={node.tensor} label={node.tensor.name} selected={node.tensor.name === selected} />;
        const key = `stack:${node.key}`, isOpen = open.has(key);
        return (
          <div class="stack" role="group">
            <button type="button" class="group-head" aria-expanded={isOpen} onClick={() => toggle(key)}>
              <span class="chevron">{isOpen ? '▾' : '▸'}</span><Dotted name={node.label} /><span class="dim"> · {node.blockList.length} blocks</span>
            </button>
            {isOpen && node.blockList.map((b) => {
              const bkey = `${node.key}#${b.block}`, bOpen = open.has(bkey), f = blockFlags(b);
              return (
                <div class="block" role="group">
                  <button type="button" class="block-head" aria-expanded={bOpen} data-block={b.block} onClick={() => toggle(bkey)}>
                    <span class="chevron">{bOpen ? '▾' : '▸'}</span>block {b.block}
                    <span class="dim"> · {b.tensors.length}</span>
                    {f.bad > 0 && <span class="badge bad">NaN/Inf</span>}
                    {f.outliers > 0 && <span class="badge outlier">{f.outliers} outlier{f.outliers === 1 ? '' : 's'}</span>}
                  </button>
                  {bOpen && b.tensors.map((t) => <TensorRow t={t} label={shortName(t)} selected={t.name === selected} />)}
                </div>
              );
            })}
          </div>
        );
      })}
    </div>
  );
}
