// The exactness ladder, put to the user: an exact result is out of reach within the budgets, so
// nothing approximate runs until a rung is chosen; each rung says what it computes, its error
// bound and its estimated cost. Requests queue (one per operation and tensor).
import { useEffect, useRef } from 'preact/hooks';

import { ms } from '../lib/format.js';
import * as S from '../lib/state.js';

export function ConsentDialog() {
  const ref = useRef(null);
  const request = S.consentQueue.value[0] || null;
  useEffect(() => {
    const d = ref.current;
    if (request && !d.open) d.showModal();
    if (!request && d.open) d.close();
  }, [request]);
  const done = () => { S.consentQueue.value = S.consentQueue.value.slice(1); };
  return (
    <dialog ref={ref} id="consent" onCancel={(e) => { e.preventDefault(); done(); }}>
      {request && <>
        <h2>An exact answer is out of reach</h2>
        <p id="consent-reason"><b>{request.op}</b> on <b>{request.tensor}</b>: {request.reason}</p>
        <p class="dim">Nothing approximate runs unless you choose it. Each choice applies to this view only.</p>
        <ul id="consent-rungs">
          {(request.ladder || []).map((r) => (
            <li>
              <button type="button" data-rung={r.id} onClick={() => { done(); request.onChoose(r); }}>use {r.id}{r.backend ? ` on ${r.backend}` : ''}</button>
              <div><span>{r.computes}</span><br /><span class="dim">error: {r.error_bound} · about {ms(r.estimated_ms)}</span></div>
            </li>
          ))}
        </ul>
        <div class="row">
          <button type="button" id="consent-cancel" onClick={done}>keep exact only</button>
          <button type="button" class="link" onClick={() => { done(); S.drawerOpen.value = true; }}>raise a budget instead…</button>
        </div>
      </>}
    </dialog>
  );
}
