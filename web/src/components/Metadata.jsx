// The checkpoint's metadata: format facts (GGUF version, alignment, file type, bits per weight;
// safetensors headers; PyTorch archive facts), then every key/value; long arrays such as a
// vocabulary stay collapsed until opened, and can be paged and searched on the server.
import { useEffect, useState } from 'preact/hooks';

import { api } from '../lib/api.js';
import { count } from '../lib/format.js';
import * as S from '../lib/state.js';
import { ErrorNote, ExportButtons, Empty } from './ui.jsx';

const kPage = 200;

function ArrayEntry({ ckptId, entry }) {
  const [open, setOpen] = useState(false);
  const [find, setFind] = useState('');
  const [page, setPage] = useState({ items: null, offset: 0, error: null });
  useEffect(() => {
    if (!open) return undefined;
    let live = true;
    api('/api/metadata/array', { ckpt: ckptId, key: entry.key, offset: page.offset, limit: kPage, q: find || undefined })
      .then((r) => live && setPage((p) => ({ ...p, items: r.items, total: r.matches ?? r.length, error: null })), (e) => live && setPage((p) => ({ ...p, error: e })));
    return () => { live = false; };
  }, [open, page.offset, find]);
  return (
    <div class="array-entry">
      <span class="dim">{entry.type} · {count(entry.length)} items </span>
      {!open && <span class="preview">[{(entry.preview || []).map((v) => JSON.stringify(v)).join(', ')}, …]</span>}
      <button type="button" class="small" onClick={() => setOpen(!open)} aria-expanded={open}>{open ? 'collapse' : 'show all'}</button>
      {open && (
        <div class="array-body">
          <div class="row">
            <input type="search" placeholder="find in this array" value={find} onInput={(e) => { setFind(e.currentTarget.value); setPage((p) => ({ ...p, offset: 0 })); }} />
            <button type="button" class="small" disabled={page.offset === 0} onClick={() => setPage((p) => ({ ...p, offset: Math.max(0, p.offset - kPage) }))}>previous</button>
            <span class="dim">{page.items ? `${count(page.offset)}–${count(page.offset + page.items.length)}` : ''}</span>
            <button type="button" class="small" disabled={!page.items || page.items.length < kPage} onClick={() => setPage((p) => ({ ...p, offset: p.offset + kPage }))}>next</button>
          </div>
          <ErrorNote error={page.error} what="Reading the array" />
          {page.items && <table class="data array-items">{page.items.map((it) => <tr><td class="num dim">{it.i}</td><td>{JSON.stringify(it.value)}</td></tr>)}</table>}
        </div>
      )}
    </div>
  );
}

export function MetadataView() {
  const ckptId = S.ckpt.value;
  const [filter, setFilter] = useState('');
  const [state, setState] = useState({ m: null, error: null });
  useEffect(() => {
    let live = true;
    const timer = setTimeout(() => {
      api('/api/metadata', { ckpt: ckptId, q: filter || undefined }).then((m) => live && setState({ m, error: null }), (e) => live && setState({ m: null, error: e }));
    }, filter ? 150 : 0);
    return () => { live = false; clearTimeout(timer); };
  }, [ckptId, filter]);
  const { m, error } = state;
  return (
    <div class="metadata" id="metadata">
      <div class="toolbar">
        <input type="search" id="metadata-filter" placeholder="filter keys and values" value={filter} onInput={(e) => setFilter(e.currentTarget.value)} />
        <span class="spacer" />
        {m && <ExportButtons name="metadata" rows={m.entries.map((e) => ({ key: e.key, type: e.type, value: e.value !== undefined ? e.value : e.preview, length: e.length }))}
          columns={[{ key: 'key' }, { key: 'type' }, { key: 'length' }, { key: 'value', value: (r) => JSON.stringify(r.value) }]} />}
      </div>
      <ErrorNote error={error} what="Metadata" />
      {m && <>
        <h3>{m.format} file</h3>
        <table class="facts" id="metadata-facts">{m.facts.map((f) => <tr><th>{f.key}</th><td>{typeof f.value === 'object' ? JSON.stringify(f.value) : String(f.value)}</td></tr>)}</table>
        <h3>Key / values <span class="dim">({count(m.entries.length)}{filter ? ' matching' : ''})</span></h3>
        {m.entries.length === 0 ? <Empty title={filter ? 'Nothing matches' : 'No metadata'}>{filter ? 'Try another word.' : 'This checkpoint records no key/values.'}</Empty> : (
          <table class="data kv" id="metadata-entries">
            <thead><tr><th>key</th><th>type</th><th>value</th></tr></thead>
            <tbody>{m.entries.map((e) => (
              <tr data-key={e.key}>
                <td class="key">{e.key}</td><td class="dim">{e.type}</td>
                <td>{e.length !== undefined && e.value === undefined ? <ArrayEntry ckptId={ckptId} entry={e} /> : <span class="value">{typeof e.value === 'string' ? e.value : JSON.stringify(e.value)}</span>}</td>
              </tr>
            ))}</tbody>
          </table>
        )}
      </>}
    </div>
  );
}
