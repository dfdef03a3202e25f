// Calls to the server's API. The token is the one the API needs, asked for
// once and kept in this tab's session storage: it is sent as a bearer
// header, never in a URL or a cookie.

const TOKEN_KEY = 'weir-token';

/** The API answered 401: the token is missing or wrong. */
export class Unauthorized extends Error {}

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
  const response = await fetch(url, { method, headers, body, cache: 'no-store', credentials: 'omit' });
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  const reason = json && typeof json.error === 'string' ? json.error : text;
  if (response.status === 401) throw new Unauthorized(`The server answered 401: ${reason}`);
  if (!response.ok) throw new ApiError(response.status, `The server answered ${response.status}: ${reason}`);
  return json;
}

export const get = (url) => call('GET', url);
