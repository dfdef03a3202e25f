// Calls to the server's API. The token is the one the API needs, asked for
// once and kept in this tab's session storage: it is sent as a bearer
// header, never in a URL or a cookie.

const TOKEN_KEY = 'weir-token';

/** The API answered 401: the token is missing (`sent` false) or wrong. */
export class Unauthorized extends Error {
  constructor(message, sent) {
    super(message);
    this.sent = sent;
  }
}

/** The server did not answer at all: it is down, or the network is. */
export class Unreachable extends Error {}

/** How long a call may wait for its answer before the server counts as unreachable. */
const CALL_TIMEOUT_MS = 8000;

/** The API refused a call; `status` is its HTTP status, the message its reason. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** `/v1/` and `segments`, each escaped whole (a name may hold any character but `/`). */
export function path(...segments) {
  return '/v1/' + segments.map((s) => encodeURIComponent(s)).join('/');
}

/** `path` with the query `params` (absent values left out). */
export function withQuery(path, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') query.set(key, value);
  }
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

/**
 * Calls the API; answers its JSON. A body goes as application/octet-stream,
 * the type the server takes changes in (never a form's).
 */
export async function call(method, url, body) {
  const headers = {};
  const bearer = token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers['Content-Type'] = 'application/octet-stream';
  // An upload may take long; a read that hangs means the server is gone.
  const signal = body === undefined ? AbortSignal.timeout(CALL_TIMEOUT_MS) : undefined;
  let response;
  let text;
  try {
    response = await fetch(url, { method, headers, body, cache: 'no-store', credentials: 'omit', signal });
    text = await response.text();
  } catch (error) {
    throw new Unreachable(`no answer from the server (${error.name === 'TimeoutError' ? 'timed out' : error.message})`);
  }
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  const reason = json && typeof json.error === 'string' ? json.error : text;
  if (response.status === 401) throw new Unauthorized(`The server answered 401: ${reason}`, Boolean(bearer));
  if (!response.ok) throw new ApiError(response.status, `The server answered ${response.status}: ${reason}`);
  return json;
}

export const get = (url) => call('GET', url);
