// The Compute drawer: where operations ran and why. A summary first (operations per backend,
// fallbacks, approximate results and the consents behind them), the constraints (prefer / never
// per backend, one choice each) and the budgets, then the placement records on demand — grouped
// per operation and tensor or one by one, filterable, exportable.
import { useEffect, useMemo, useState } from 'preact/hooks';

import { api } from '../lib/api.js';
import { ms, bytes, count } from '../lib/format.js';
import * as S from '../lib/state.js';
import { Segmented, ErrorNote, ExportButtons, DataTable } from './ui.jsx';

const kKeep = 3000;
let records = [];
let lastSequence = 0;
let edits = 0, pendingEdits = 0;

/** Polls /api/compute (new records only) into S.computeState; returns a stop function. */
export function startComputePolling() {
  let timer = 0, stopped = false;
  const poll = async () => {
    const mine = edits;
    try {
      const c = await api('/api/compute', lastSequence ? { since: lastSequence } : null);
      if (c.records.length) {
        records = records.concat(c.records).slice(-kKeep);
        lastSequence = records[records.length - 1].sequence;
      }
      // A poll that left before a constraint changed carries the old constraints: keep the click.
      const keep = mine !== edits || pendingEdits > 0;
      const previous = S.computeState.value;
      S.computeState.value = { ...c, constraints: keep && previous ? previous.constraints : c.constraints, records };
      window.__tm = { ...(window.__tm || {}), compute: S.computeState.value };
    } catch { /* the top bar shows a server that does not answer */ }
    if (!stopped) timer = setTimeout(poll, 1500);
  };
  poll();
  return () => { stopped = true; clearTimeout(timer); };
}

/** Polls now (after an action that ran operations). */
export async function refreshCompute() {
  const c = await api('/api/compute', lastSequence ? { since: lastSequence } : null);
  if (c.records.length) { records = records.concat(c.records).slice(-kKeep); lastSequence = records[records.length - 1].sequence; }
  S.computeState.value = { ...c, records };
}

async function setConstraint(backend, choice) {
  const c = S.computeState.value.constraints;
  const prefer = c.prefer.filter((b) => b !== backend), never = c.never.filter((b) => b !== backend);
  if (choice === 'prefer') prefer.push(backend);
  if (choice === 'never') never.push(backend);
  edits += 1; pendingEdits += 1;
  S.computeState.value = { ...S.computeState.value, constraints: { ...c, prefer, never, mode: prefer.length || never.length || c.only.length ? 'custom' : 'auto' } };
  try { await api('/api/compute', null, { body: { prefer, never, only: c.only } }); } finally { pendingEdits -= 1; }
  await refreshCompute();
}

const reasonText = (r) => (r.reason === 'cheapest' ? 'cheapest' : r.reason === 'preferred-unavailable' ? `preferred unavailable: ${r.reason_detail}`
  : r.reason === 'split' ? (r.split_part === 'merge' ? `split: ${r.reason_detail}` : `split ${r.split_part}`)
  : r.reason === 'fallback' || r.reason === 'consented' ? `${r.reason}${r.reason_detail ? `: ${r.reason_detail}` : ''}` : r.reason);

/** Newest first; an operation split across backends is its merge row with its parts under it. */
function eachRecord(list) {
  const parts = new Map();
  for (const r of list) {
    if (r.split_group && r.split_part !== 'merge') parts.set(r.split_group, [...(parts.get(r.split_group) || []), r]);
  }
  const rows = [];
  for (const r of list.slice(-300).reverse()) {
    if (r.split_group && r.split_part !== 'merge' && list.some((m) => m.split_group === r.split_group && m.split_part === 'merge')) continue;
    rows.push({ ...r, count: 1, why: reasonText(r) });
    if (r.split_group && r.split_part === 'merge') {
      for (const p of (parts.get(r.split_group) || []).slice().sort((a, b) => a.sequence - b.sequence)) {
        rows.push({ ...p, count: 1, why: reasonText(p), part: true });
      }
    }
  }
  return rows;
}

function Summary({ c }) {
  const s = c.summary;
  if (!s) return null;
  return (
    <div class="compute-summary" id="compute-summary">
      <div class="cards">
        {Object.entries(s.by_backend).map(([name, v]) => (
          <div class="card" data-backend={name}>
            <div class="card-title">{name}</div>
            <div class="big">{count(v.operations)}</div>
            <div class="dim">operations</div>
            {v.fallbacks > 0 && <div class="warn">{count(v.fallbacks)} after a fallback</div>}
            {v.bounded > 0 && <div class="dim">{count(v.bounded)} within a stated bound</div>}
            {v.approximate > 0 && <div class="warn">{count(v.approximate)} approximate</div>}
          </div>
        ))}
      </div>
      <div class="dim">{count(s.operations)} operations since the server started · {count(s.fallbacks)} fallbacks · {count(s.consented)} consented · {count(s.bounded || 0)} bounded · {count(s.approximate)} approximate</div>
      {s.consents && s.consents.length > 0 && (
        <div class="consents" id="consents">
          <strong>Approximate results you consented to</strong>
          <ul>{s.consents.slice().reverse().map((r) => <li><b>{r.op}</b> on {r.tensor || '—'} ({r.backend}, {r.exactness}){r.detail ? ` — ${r.detail}` : ''}</li>)}</ul>
        </div>
      )}
    </div>
  );
}

function Backends({ c }) {
  return (
    <table class="data backends" id="backends">
      <thead><tr><th>backend</th><th>device</th><th>use</th></tr></thead>
      <tbody>{c.backends.map((b) => {
        const choice = c.constraints.prefer.includes(b.name) ? 'prefer' : c.constraints.never.includes(b.name) ? 'never' : 'auto';
        return (
          <tr data-backend={b.name}>
            <td>{b.name}{b.lost ? <span class="bad" title={b.lost}> (lost)</span> : null}</td>
            <td class="dim">{b.device}</td>
            <td><Segmented label={`use ${b.name}`} value={choice} onChange={(v) => setConstraint(b.name, v)}
              options={[{ value: 'auto', label: 'auto', title: 'placed by cost' }, { value: 'prefer', label: 'prefer', title: `run on ${b.name} whenever it can` }, { value: 'never', label: 'never', title: `never run on ${b.name}` }]} /></td>
          </tr>
        );
      })}</tbody>
    </table>
  );
}

function Budget({ settingsKey, label, placeholder, help }) {
  const [value, setValue] = useState('');
  const [note, setNote] = useState(null);
  useEffect(() => { api('/api/settings').then((s) => { const v = (s.running || s.values)[settingsKey] || ''; setValue(v === '0' ? '' : v); }, () => {}); }, []);
  const apply = async () => {
    try {
      const r = await api('/api/settings', null, { body: { key: settingsKey, value: value.trim() || '0' } });
      setNote({ ok: `applies ${r.applies}` });
    } catch (e) { setNote({ error: e }); }
  };
  return (
    <label class="field budget" title={help}>
      <span>{label}</span>
      <input id={`budget-${settingsKey.split('.').pop()}`} value={value} placeholder={placeholder} onInput={(e) => setValue(e.currentTarget.value)}
        onChange={apply} onKeyDown={(e) => e.key === 'Enter' && apply()} />
      {note && note.ok && <span class="dim">{note.ok}</span>}
      {note && note.error && <span class="bad">{note.error.message}</span>}
    </label>
  );
}

/** compute.split: whether one operation may run in parts on several backends at once. */
function SplitSetting() {
  const [value, setValue] = useState(null);
  const [note, setNote] = useState(null);
  useEffect(() => { api('/api/settings').then((s) => setValue((s.running || s.values)['compute.split'] || 'auto'), () => {}); }, []);
  const choose = async (v) => {
    try {
      const r = await api('/api/settings', null, { body: { key: 'compute.split', value: v } });
      setValue(v);
      setNote({ ok: `applies ${r.applies}` });
    } catch (e) { setNote({ error: e }); }
  };
  if (value === null) return null;
  return (
    <div class="field" title="auto: when several backends can compute an operation and the model says they finish sooner together, it runs in parts on them at once, merged bit for bit; off: every operation runs whole on one backend">
      <span>split an operation across backends</span>
      <Segmented id="split-setting" label="split operations" value={value} onChange={choose}
        options={[{ value: 'auto', label: 'auto' }, { value: 'off', label: 'off' }]} />
      {note && note.ok && <span class="dim">{note.ok}</span>}
      {note && note.error && <span class="bad">{note.error.message}</span>}
    </div>
  );
}

function Records({ c }) {
  const [filter, setFilter] = useState('');
  const [grouped, setGrouped] = useState(true);
  const all = c.records;
  const rows = useMemo(() => {
    const words = filter.toLowerCase().split(/\s+/).filter(Boolean);
    const hit = (r) => words.every((w) => `${r.tensor || ''} ${r.op} ${r.backend} ${r.reason} ${r.exactness}`.toLowerCase().includes(w));
    const list = all.filter(hit);
    if (!grouped) return eachRecord(list);
    const groups = new Map();
    for (const r of list) {
      const key = `${r.op}\u0000${r.tensor || ''}\u0000${r.backend}\u0000${r.reason}\u0000${r.exactness}`;
      const g = groups.get(key) || { sequence: r.sequence, op: r.op, tensor: r.tensor || '', backend: r.backend, reason: r.reason, why: reasonText(r), exactness: r.exactness, count: 0, estimated_ms: 0, measured_ms: 0, bytes_moved: 0 };
      g.count += 1; g.estimated_ms += r.estimated_ms; g.measured_ms += r.measured_ms; g.bytes_moved += r.bytes_moved; g.sequence = Math.max(g.sequence, r.sequence);
      groups.set(key, g);
    }
    return [...groups.values()].sort((a, b) => b.sequence - a.sequence);
  }, [all, filter, grouped]);
  const columns = [
    { key: 'sequence', label: '#', align: 'right' },
    { key: 'tensor', label: 'tensor', render: (r) => <span class="tname" title={r.tensor}>{r.tensor || '—'}</span> },
    { key: 'op', label: 'operation', render: (r) => (r.part ? <span class="split-part" title="a part of the split above">↳ {r.op}</span> : r.op) },
    ...(grouped ? [{ key: 'count', label: 'runs', align: 'right' }] : []),
    { key: 'backend', label: 'backend' },
    { key: 'why', label: 'why', render: (r) => <span title={r.reason_detail || r.why}>{r.why}</span> },
    { key: 'estimated_ms', label: 'est', align: 'right', render: (r) => ms(r.estimated_ms) },
    { key: 'measured_ms', label: 'measured', align: 'right', render: (r) => ms(r.measured_ms) },
    { key: 'bytes_moved', label: 'moved', align: 'right', render: (r) => bytes(r.bytes_moved) },
    { key: 'exactness', label: 'exactness', render: (r) => <span class={r.exactness === 'approximate' ? 'warn' : ''}>{r.exactness}</span> },
  ];
  return (
    <div class="records-box">
      <div class="row">
        <input type="search" id="records-filter" placeholder="filter: tensor, operation, backend…" value={filter} onInput={(e) => setFilter(e.currentTarget.value)} />
        <Segmented label="records" value={grouped ? 'grouped' : 'each'} onChange={(v) => setGrouped(v === 'grouped')}
          options={[{ value: 'grouped', label: 'per operation and tensor' }, { value: 'each', label: 'each' }]} />
        <ExportButtons name="placements" rows={rows} columns={columns.map((col) => ({ key: col.key, label: col.label }))} />
      </div>
      <div class="records-scroll"><DataTable id="records" rows={rows} columns={columns} empty="no operation matches" rowKey={(r) => `${r.sequence}/${r.count}`} /></div>
    </div>
  );
}

export function ComputeDrawer() {
  const open = S.drawerOpen.value;
  const c = S.computeState.value;
  const [showRecords, setShowRecords] = useState(false);
  const [saveNote, setSaveNote] = useState(null);
  if (!open) return null;
  const save = async () => {
    try {
      const { prefer, never, only } = c.constraints;
      await api('/api/compute', null, { body: { prefer, never, only, persist: true } });
      const { running } = await api('/api/settings');
      for (const key of ['compute.memory_budget', 'compute.time_budget', 'compute.split']) {
        if (running[key] !== undefined) await api('/api/settings', null, { body: { key, value: running[key] || '0', persist: true } });
      }
      setSaveNote({ ok: `saved to ${c.settings_file}` });
    } catch (e) { setSaveNote({ error: e }); }
  };
  return (
    <aside class="drawer" id="compute" aria-label="Compute">
      <header>
        <h2 id="compute-mode">Compute: {c ? (c.constraints.mode === 'auto' ? 'Auto' : c.constraints.mode) : '…'}</h2>
        <button type="button" class="icon" title="close (Esc)" onClick={() => { S.drawerOpen.value = false; }}>✕</button>
      </header>
      {!c ? <div class="dim">…</div> : <>
        <Summary c={c} />
        <h3>Backends</h3>
        <Backends c={c} />
        {c.constraints.only && c.constraints.only.length > 0 && <div class="note">only: {c.constraints.only.join(', ')} (from the command line)</div>}
        <h3>Budgets</h3>
        <div class="budgets">
          <Budget settingsKey="compute.memory_budget" label="memory per operation" placeholder="unlimited" help="bytes, or with K, M, G, T (binary units); empty: unlimited. Over it, exact results ask for consent." />
          <Budget settingsKey="compute.time_budget" label="time per operation" placeholder="unlimited" help="e.g. 30s or 500ms; empty: unlimited. Over it, exact results ask for consent." />
          <SplitSetting />
        </div>
        <div class="row">
          <button type="button" id="save-default" title={`write the constraints and budgets to ${c.settings_file}`} onClick={save}>Save as default</button>
          <span class="dim">{saveNote && saveNote.ok ? saveNote.ok : 'changes apply to this server only'}</span>
        </div>
        <ErrorNote error={saveNote && saveNote.error} what="Saving" />
        <h3><button type="button" class="section-toggle" id="show-records" aria-expanded={showRecords} onClick={() => setShowRecords(!showRecords)}>
          <span class="chevron">{showRecords ? '▾' : '▸'}</span>Placement records <span class="dim">({count(c.records.length)} kept)</span></button></h3>
        {showRecords && <Records c={c} />}
        {c.load_reports && c.load_reports.some((r) => !r.available) && (
          <details class="dim"><summary>backends not available here</summary>
            <ul>{c.load_reports.filter((r) => !r.available).map((r) => <li>{r.name}: {r.detail}</li>)}</ul>
          </details>
        )}
      </>}
    </aside>
  );
}


