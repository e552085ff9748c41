// Helpers shared by the viewer's modules: element lookup, JSON requests and number formatting.
export const $ = (id) => document.getElementById(id);

// State-changing requests carry JSON: the server refuses any other content type (a foreign page
// can send text/plain without a preflight, never application/json).
export async function api(path, options) {
  const init = options && options.body !== undefined
    ? { ...options, headers: { 'Content-Type': 'application/json', ...(options.headers || {}) } } : options;
  const res = await fetch(path, init);
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}
export const q = (params) => new URLSearchParams(params).toString();
export const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
export const fmt = (v) => (v === null || v === undefined ? '—' : typeof v === 'number' ? Number(v.toPrecision(6)).toString() : String(v));
