// The management API client: every request carries the user's basic-auth
// credentials and goes to the same /api endpoints rabbitmqadmin uses. Errors
// become ApiError with a sentence a person can read.

const KEY = 'stablemq-auth';

/** An API refusal or a lost connection, in words. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** The stored credentials ({user, header}) or null. */
export function session() {
  try {
    const raw = sessionStorage.getItem(KEY);
    return raw ? JSON.parse(raw) : null;
  } catch (_) {
    return null;
  }
}

export function saveSession(user, password, tags) {
  const header = 'Basic ' + btoa(unescape(encodeURIComponent(user + ':' + password)));
  sessionStorage.setItem(KEY, JSON.stringify({ user, header, tags }));
}

export function clearSession() {
  sessionStorage.removeItem(KEY);
}

/** Percent-encode one path segment (a vhost "/" is "%2F"). */
export const enc = (s) => encodeURIComponent(s);

function describe(status, body) {
  const reason = body && (body.reason || body.error) ? String(body.reason || body.error) : '';
  switch (status) {
    case 400: return 'Bad request: ' + (reason || 'the server refused the input');
    case 401: return reason && reason !== 'Login failed' ? 'Not authorised: ' + reason : 'Login failed: wrong user name or password';
    case 403: return 'Access refused: ' + (reason || 'you lack the permission for this');
    case 404: return 'Not found: the object does not exist (any more)';
    case 405: return 'Not allowed: ' + (reason || 'this method is not supported here');
    case 406: return 'Not acceptable: ' + (reason || 'the server cannot answer this request');
    case 503: return 'The node cannot answer now: ' + (reason || 'service unavailable');
    default: return 'The server answered ' + status + (reason ? ': ' + reason : '');
  }
}

/**
 * One API call. `body` is sent as JSON. Resolves to the parsed JSON answer
 * (null for an empty one); rejects with ApiError.
 */
export async function api(method, path, body, opts = {}) {
  const s = opts.auth ? { header: opts.auth } : session();
  const headers = { Accept: 'application/json' };
  if (s) headers.Authorization = s.header;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (opts.headers) Object.assign(headers, opts.headers);
  let resp;
  try {
    // 'omit': the browser never shows its own login dialog on a 401.
    resp = await fetch(path, {
      method,
      headers,
      credentials: 'omit',
      cache: 'no-store',
      body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)),
    });
  } catch (_) {
    throw new ApiError(0, 'Lost connection to the node: it does not answer (is it running?)');
  }
  const text = await resp.text().catch(() => '');
  let json = null;
  if (text) {
    try { json = JSON.parse(text); } catch (_) { json = null; }
  }
  if (!resp.ok) throw new ApiError(resp.status, describe(resp.status, json));
  return json;
}

export const get = (path) => api('GET', path);
export const put = (path, body) => api('PUT', path, body ?? {});
export const post = (path, body) => api('POST', path, body ?? {});
export const del = (path, headers) => api('DELETE', path, undefined, { headers });
