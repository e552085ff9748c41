// Small building blocks shared by the views: segmented controls, sections, error and empty
// states, progress, and the data table every exportable table uses.
import { useState } from 'preact/hooks';

import { exportTable, fileName } from '../lib/export.js';

/** A row of mutually exclusive choices. options: [{value, label, title}]. */
export function Segmented({ value, options, onChange, label, id }) {
  return (
    <div class="segmented" role="radiogroup" aria-label={label} id={id}>
      {options.map((o) => (
        <button type="button" role="radio" aria-checked={o.value === value} class={o.value === value ? 'on' : ''}
          title={o.title || ''} data-value={o.value} onClick={() => onChange(o.value)}>{o.label}</button>
      ))}
    </div>
  );
}

/** A labelled select. options: [{value, label}] or strings. */
export function Select({ value, options, onChange, label, id, title }) {
  return (
    <label class="field" title={title || ''}>
      {label && <span>{label}</span>}
      <select id={id} value={value} onChange={(e) => onChange(e.currentTarget.value)}>
        {options.map((o) => (typeof o === 'string' ? <option value={o}>{o}</option> : <option value={o.value} disabled={o.disabled}>{o.label}</option>))}
      </select>
    </label>
  );
}

/** A titled panel of the inspector; collapsible (`onToggle(open)` hears each change), with
 *  actions on the right of its title. */
export function Section({ title, actions, children, id, open: initiallyOpen = true, onToggle }) {
  const [open, setOpen] = useState(initiallyOpen);
  const toggle = () => { setOpen(!open); if (onToggle) onToggle(!open); };
  return (
    <section class="section" id={id}>
      <header>
        <button type="button" class="section-toggle" aria-expanded={open} onClick={toggle}>
          <span class="chevron">{open ? '▾' : '▸'}</span>{title}
        </button>
        <div class="section-actions">{actions}</div>
      </header>
      {open && <div class="section-body">{children}</div>}
    </section>
  );
}

/** A failure shown where it happened: what went wrong and what to do. */
export function ErrorNote({ error, what, id }) {
  if (!error) return null;
  return (
    <div class="error-note" role="alert" id={id}>
      <strong>{what ? `${what} failed` : 'Failed'}:</strong> {error.message}
      {error.code && <span class="code"> ({error.code})</span>}
      {error.hint && <div class="hint">{error.hint}</div>}
    </div>
  );
}

/** A calm placeholder for a view with nothing to show yet. */
export function Empty({ title, children }) {
  return <div class="empty"><h3>{title}</h3>{children}</div>;
}

/** A progress bar; `value` in [0, 1] or null for "working". */
export function Progress({ value, label }) {
  return (
    <div class="progress" role="progressbar" aria-valuenow={value === null ? undefined : Math.round(value * 100)} aria-label={label}>
      <div class={value === null ? 'bar busy' : 'bar'} style={value === null ? {} : { width: `${Math.max(2, value * 100)}%` }} />
      {label && <span>{label}</span>}
    </div>
  );
}

/** CSV / JSON download buttons for a table; `rows` is the rows or a function making them (for
 *  tables too large to copy on every render). */
export function ExportButtons({ name, columns, rows }) {
  const disabled = !rows || (Array.isArray(rows) && rows.length === 0);
  const all = () => (typeof rows === 'function' ? rows() : rows);
  return (
    <span class="export">
      <button type="button" class="small" disabled={disabled} data-export="csv" title="download as CSV" onClick={() => exportTable('csv', fileName(name), columns, all())}>CSV</button>
      <button type="button" class="small" disabled={disabled} data-export="json" title="download as JSON" onClick={() => exportTable('json', fileName(name), columns, all())}>JSON</button>
    </span>
  );
}

/** A table of rows under columns [{key, label, render?, value?, align?, title?}]; rows clickable
 *  when `onRow` is given; `selected(row)` marks one. Sorting is by clicking a header when
 *  `sortable` (numbers by value, text naturally). */
export function DataTable({ columns, rows, onRow, selected, id, sortable = false, rowKey, empty = 'nothing to show', rowClass }) {
  const [sort, setSort] = useState(null);
  let shown = rows || [];
  if (sort) {
    const col = columns.find((c) => c.key === sort.key);
    const val = (r) => (col && typeof col.value === 'function' ? col.value(r) : r[sort.key]);
    shown = [...shown].sort((a, b) => {
      const x = val(a), y = val(b);
      const d = typeof x === 'number' && typeof y === 'number' ? x - y : String(x ?? '').localeCompare(String(y ?? ''), 'en', { numeric: true });
      return sort.dir * d;
    });
  }
  return (
    <table class="data" id={id}>
      <thead>
        <tr>{columns.map((c) => (
          <th class={[c.align === 'right' ? 'num' : '', sortable ? 'sortable' : '', sort && sort.key === c.key ? 'sorted' : ''].join(' ')} title={c.title || ''}
            onClick={sortable ? () => setSort(sort && sort.key === c.key ? { key: c.key, dir: -sort.dir } : { key: c.key, dir: -1 }) : undefined}>
            {c.label}{sort && sort.key === c.key ? (sort.dir < 0 ? ' ↓' : ' ↑') : ''}
          </th>))}
        </tr>
      </thead>
      <tbody>
        {shown.length === 0 && <tr><td colSpan={columns.length} class="dim">{empty}</td></tr>}
        {shown.map((r, i) => (
          <tr key={rowKey ? rowKey(r) : i} class={[onRow ? 'clickable' : '', selected && selected(r) ? 'selected' : '', rowClass ? rowClass(r) : ''].join(' ')}
            onClick={onRow ? () => onRow(r) : undefined}>
            {columns.map((c) => <td class={c.align === 'right' ? 'num' : ''}>{c.render ? c.render(r) : r[c.key]}</td>)}
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** A dotted name that may break after each dot, inside a word only when one part is too long. */
export function Dotted({ name }) {
  const parts = name.split('.');
  return <span class="dotted">{parts.map((p, i) => <>{p}{i < parts.length - 1 ? <>.<wbr /></> : null}</>)}</span>;
}
