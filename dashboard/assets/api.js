// The broker's public HTTP API, as any client calls it. The token (JWT on) is kept in
// sessionStorage: it lasts as long as the tab and is sent as a bearer token.

const tokenKey = 'queen.dashboard.token';

export class APIError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

export function token() { return sessionStorage.getItem(tokenKey) || ''; }
export function setToken(t) {
  if (t) sessionStorage.setItem(tokenKey, t); else sessionStorage.removeItem(tokenKey);
}

// api sends one request and returns the decoded JSON answer; an answer that is not 2xx throws
// an APIError carrying the broker's error text.
export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (token()) headers.Authorization = 'Bearer ' + token();
  const init = { method, headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new APIError(0, 'the broker did not answer: ' + e.message);
  }
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = text; }
  if (!res.ok) {
    const msg = (data && (data.error || data.message)) || res.statusText;
    throw new APIError(res.status, `${res.status} ${msg}`, data);
  }
  return data;
}

export const get = (path) => api('GET', path);
export const enc = encodeURIComponent;

// identity is what GET /auth/me says: {jwt, signedIn, subject, levels}. With JWT off every
// level passes.
export const identity = { jwt: false, signedIn: false, subject: '', levels: new Set() };
const allLevels = ['read-only', 'write-only', 'read-write', 'admin'];

export async function loadIdentity() {
  try {
    const me = await api('GET', '/auth/me');
    identity.jwt = me.authMode === 'jwt';
    identity.signedIn = true;
    identity.subject = me.subject || (me.user && me.user.username) || '';
    identity.levels = new Set(identity.jwt ? me.levels : allLevels);
  } catch (e) {
    if (e.status !== 401) throw e;
    if (e.body && typeof e.body.login === 'string' && e.body.login.startsWith('/')) {
      // Behind queen-proxy: people sign in on its page, which sets the session cookie.
      location.assign(e.body.login + '?next=' + encodeURIComponent('/' + location.hash));
      return;
    }
    identity.jwt = true;
    identity.signedIn = false;
    identity.subject = '';
    identity.levels = new Set();
    if (token()) {
      setToken('');
      identity.error = 'the broker refused the token: ' + e.message;
    }
  }
}

// can reports whether the signed-in token passes a route level.
export const can = (level) => identity.levels.has(level);

// live runs fn now and then every ms milliseconds while the page is shown: the next run is
// scheduled only when the previous one is done (no pile-up behind a slow broker), and nothing
// runs while the tab is hidden (it catches up at once when the tab is shown again). The
// returned function stops it; its now() runs fn at once (after an action).
export function live(fn, ms) {
  let timer = 0;
  let stopped = false;
  let running = false;
  const run = async () => {
    clearTimeout(timer);
    if (stopped || running) return;
    if (document.visibilityState === 'hidden') return;
    running = true;
    try { await fn(); } catch (e) { console.warn(e); }
    running = false;
    if (!stopped) timer = setTimeout(run, ms);
  };
  const onVisible = () => { if (document.visibilityState === 'visible') run(); };
  document.addEventListener('visibilitychange', onVisible);
  run();
  const stop = () => {
    stopped = true;
    clearTimeout(timer);
    document.removeEventListener('visibilitychange', onVisible);
  };
  stop.now = run;
  return stop;
}
