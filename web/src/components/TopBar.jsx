// The top bar: the checkpoint (full paths, sizes, index progress), search, the views, the
// Compute status pill and the theme.
import { useState } from 'preact/hooks';

import { bytes, count, shortCount } from '../lib/format.js';
import { matcher } from '../lib/model.js';
import * as S from '../lib/state.js';
import { Progress } from './ui.jsx';

// The last component of a path as the user gave it ("demo" for /tmp/demo/); the full path is in
// the button's title and the list.
const baseName = (path) => path.split('/').filter(Boolean).pop() || path;

function CheckpointPicker() {
  const [open, setOpen] = useState(false);
  const list = S.checkpoints.value;
  const current = list.find((c) => c.id === S.ckpt.value);
  if (!current) return <div class="ckpt-picker" />;
  return (
    <div class="ckpt-picker">
      <button type="button" id="checkpoint" class="ckpt-button" aria-haspopup="listbox" aria-expanded={open}
        title={current.path} onClick={() => setOpen(!open)}>
        <span class="ckpt-name">{baseName(current.name)}</span>
        <span class="ckpt-meta">{current.format} · {shortCount(current.parameters)} params · {bytes(current.bytes)}</span>
        <span class="chevron">▾</span>
      </button>
      {open && (
        <ul class="ckpt-list" role="listbox" onMouseLeave={() => setOpen(false)}>
          {list.map((c) => (
            <li role="option" aria-selected={c.id === S.ckpt.value} class={c.id === S.ckpt.value ? 'on' : ''} data-id={c.id}
              onClick={() => { setOpen(false); S.go({ ckpt: c.id, view: S.view.value === 'tensor' ? 'overview' : S.view.value }); }}>
              <div class="path">{c.path}</div>
              <div class="dim">{c.format} · {count(c.tensors)} tensors · {count(c.parameters)} parameters · {bytes(c.bytes)} in {c.files} file{c.files === 1 ? '' : 's'} · index {c.index}</div>
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

function Search() {
  const onKey = (e) => {
    if (e.key !== 'Enter') return;
    const m = S.model.value, test = matcher(S.search.value);
    const hit = m && test && m.tensors.find(test);
    if (hit) { S.go({ tensor: hit.name, view: 'tensor' }); e.currentTarget.blur(); }
  };
  return (
    <input id="search" type="search" class="search" placeholder="Search tensors  ( / )" aria-label="search tensors"
      value={S.search.value} onInput={(e) => { S.search.value = e.currentTarget.value; }} onKeyDown={onKey} autocomplete="off" />
  );
}

function ViewTabs() {
  const tabs = [['overview', 'Overview'], ['tensor', 'Tensor'], ['metadata', 'Metadata'], ['compare', 'Compare']];
  return (
    <nav class="tabs" aria-label="views">
      {tabs.map(([v, label]) => (
        <button type="button" id={`tab-${v}`} class={S.view.value === v ? 'on' : ''} aria-current={S.view.value === v ? 'page' : undefined}
          onClick={() => S.go({ view: v })}>{label}</button>
      ))}
    </nav>
  );
}

/** "Auto · cpu 40 · cuda 2": where operations ran; opens the Compute drawer. */
function ComputePill() {
  const c = S.computeState.value;
  if (!c) return <button type="button" class="pill" id="compute-pill" disabled>Compute</button>;
  const mode = c.constraints.mode === 'auto' ? 'Auto' : c.constraints.mode;
  const by = c.summary ? Object.entries(c.summary.by_backend).filter(([, v]) => v.operations > 0) : [];
  const warn = c.summary && (c.summary.fallbacks > 0 || c.summary.approximate > 0);
  return (
    <button type="button" class={`pill${warn ? ' warn' : ''}`} id="compute-pill" aria-expanded={S.drawerOpen.value}
      title="where operations ran (p)" onClick={() => { S.drawerOpen.value = !S.drawerOpen.value; }}>
      <span>{mode}</span>
      {by.map(([name, v]) => <span class="pill-part">{name} {v.operations}</span>)}
      {c.summary && c.summary.fallbacks > 0 && <span class="pill-part warn">{c.summary.fallbacks} fallback{c.summary.fallbacks === 1 ? '' : 's'}</span>}
      {c.summary && c.summary.bounded > 0 && <span class="pill-part" title="within a stated error bound (spectra)">{c.summary.bounded} bounded</span>}
      {c.summary && c.summary.approximate > 0 && <span class="pill-part warn">{c.summary.approximate} approximate</span>}
    </button>
  );
}

function IndexStatus() {
  const c = S.checkpoints.value.find((x) => x.id === S.ckpt.value);
  if (!c || c.index === 'ready') return null;
  if (c.index === 'building') {
    const p = c.index_progress || {};
    const f = p.bytes_total > 0 ? p.bytes_done / p.bytes_total : null;
    return <div class="index-status" id="index-status"><Progress value={f} label={`indexing ${count(p.tensors_done || 0)} / ${count(p.tensors_total || c.tensors)} tensors`} /></div>;
  }
  return <div class="index-status warn" id="index-status" title="statistics are computed on request until an index exists">index {c.index}</div>;
}

export function TopBar() {
  return (
    <header class="topbar">
      <div class="brand" title="Tensormorph">Tensormorph</div>
      <CheckpointPicker />
      <Search />
      <ViewTabs />
      <IndexStatus />
      <div class="spacer" />
      <ComputePill />
      <button type="button" class="icon" id="theme" title={`switch to ${S.theme.value === 'dark' ? 'light' : 'dark'} theme`} onClick={S.toggleTheme}>
        {S.theme.value === 'dark' ? '☀' : '☾'}
      </button>
      <button type="button" class="icon" title="keyboard shortcuts (?)" onClick={() => window.dispatchEvent(new KeyboardEvent('keydown', { key: '?' }))}>?</button>
    </header>
  );
}
