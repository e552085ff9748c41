// The server's JSON API: one fetch wrapper whose errors carry the server's reason, code and hint.

/** An answer other than 2xx: `message` is the server's reason, `hint` what the user can do. */
export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.code = (body && body.code) || '';
    this.hint = (body && body.hint) || '';
    this.body = body || {};
  }
  /** True for the 409 "needs consent" answer, which carries the exactness ladder. */
  get needsConsent() { return this.status === 409 && !!this.body.needs_consent; }
}

/** Query string of an object, leaving out undefined and null values. */
export function q(params) {
  const clean = {};
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') clean[k] = v;
  return new URLSearchParams(clean).toString();
}

// State-changing requests carry JSON: the server refuses any other content type (a foreign page
// can send text/plain without a preflight, never application/json).
/** GET (or POST with `body`) a route; resolves the parsed JSON, rejects with ApiError. */
export async function api(path, params, options = {}) {
  const url = params ? `${path}?${q(params)}` : path;
  const early = window.__tmPrefetch && window.__tmPrefetch[url];
  if (early && options.body === undefined) {
    delete window.__tmPrefetch[url];
    const answer = await early;
    if (answer !== null) return answer;  // else ask again, to get the error itself
  }
  const init = options.body !== undefined
    ? { method: 'POST', body: JSON.stringify(options.body), headers: { 'Content-Type': 'application/json' }, signal: options.signal }
    : { signal: options.signal };
  let res;
  try {
    res = await fetch(url, init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, { error: 'the server does not answer (is tensormorph serve still running?)', code: 'UNAVAILABLE' });
  }
  let body = null;
  try { body = await res.json(); } catch { body = null; }
  if (!res.ok) throw new ApiError(res.status, body);
  return body;
}

/** A tile or other binary answer: the Blob, or an ApiError built from its JSON error body. */
export async function fetchBlob(url, signal) {
  let res;
  try {
    res = await fetch(url, { signal });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, { error: 'the server does not answer', code: 'UNAVAILABLE' });
  }
  if (res.ok) return res.blob();
  let body = null;
  try { body = await res.json(); } catch { body = null; }
  throw new ApiError(res.status, body);
}
