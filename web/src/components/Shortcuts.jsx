// Keyboard navigation: one table of shortcuts, shown by "?", handled here for the whole page.
import { useEffect, useState } from 'preact/hooks';

import * as S from '../lib/state.js';
import { stepTensor } from './App.jsx';

/** What the heatmap offers to the keyboard (set by the tensor view while it is shown). */
export const heatmapActions = { zoom: null, fit: null, jump: null, showElement: null, showChannel: null };

const SHORTCUTS = [
  ['/', 'search tensors'],
  ['j  or  ]', 'next tensor'],
  ['k  or  [', 'previous tensor'],
  ['+  /  -', 'zoom in / out'],
  ['0', 'fit the tensor'],
  ['a', 'jump to the largest |value|'],
  ['n', 'jump to the first NaN / Inf'],
  ['o  t  m  c', 'overview, tensor, metadata, compare'],
  ['p', 'Compute drawer (where operations ran)'],
  ['Esc', 'close a drawer or dialog'],
  ['?', 'this help'],
];

function typing(e) {
  const t = e.target;
  return t && (t.tagName === 'INPUT' || t.tagName === 'SELECT' || t.tagName === 'TEXTAREA' || t.isContentEditable);
}

export function Shortcuts() {
  const [open, setOpen] = useState(false);
  useEffect(() => {
    const onKey = (e) => {
      if (e.key === 'Escape') {
        if (open) return setOpen(false);
        if (S.drawerOpen.value) { S.drawerOpen.value = false; return; }
        if (typing(e)) e.target.blur();
        return;
      }
      if (typing(e) || e.ctrlKey || e.metaKey || e.altKey) {
        if ((e.ctrlKey || e.metaKey) && e.key === 'k') { e.preventDefault(); document.getElementById('search')?.focus(); }
        return;
      }
      const act = {
        '/': () => document.getElementById('search')?.focus(),
        j: () => stepTensor(1), ']': () => stepTensor(1),
        k: () => stepTensor(-1), '[': () => stepTensor(-1),
        '+': () => heatmapActions.zoom?.(1.6), '=': () => heatmapActions.zoom?.(1.6), '-': () => heatmapActions.zoom?.(1 / 1.6),
        0: () => heatmapActions.fit?.(),
        a: () => heatmapActions.jump?.('absmax'), n: () => heatmapActions.jump?.('nonfinite'),
        o: () => S.go({ view: 'overview' }), t: () => S.go({ view: 'tensor' }), m: () => S.go({ view: 'metadata' }), c: () => S.go({ view: 'compare' }),
        p: () => { S.drawerOpen.value = !S.drawerOpen.value; },
        '?': () => setOpen(!open),
      }[e.key];
      if (act) { e.preventDefault(); act(); }
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, [open]);
  if (!open) return null;
  return (
    <div class="modal-backdrop" onClick={() => setOpen(false)}>
      <div class="shortcuts" role="dialog" aria-label="keyboard shortcuts" onClick={(e) => e.stopPropagation()}>
        <h2>Keyboard</h2>
        <table>{SHORTCUTS.map(([k, what]) => <tr><td><kbd>{k}</kbd></td><td>{what}</td></tr>)}</table>
        <button type="button" onClick={() => setOpen(false)}>close</button>
      </div>
    </div>
  );
}
