// The dashboard: hash routes (#/queues/q1), so a reload never leaves the dashboard's page and
// never needs a route of its own on the broker.

import { api, identity, loadIdentity, setToken, live } from './api.js';
import { h } from './ui.js';
import * as pages from './pages.js';

const routes = [
  [/^$/, pages.overview, 'overview', 'Overview'],
  [/^queues$/, pages.queues, 'queues', 'Queues'],
  [/^queues\/([^/]+)$/, pages.queue, 'queues', 'Queue'],
  [/^groups$/, pages.groups, 'groups', 'Consumer groups'],
  [/^messages$/, pages.messages, 'messages', 'Messages'],
  [/^messages\/([^/]+)\/(.+)$/, pages.message, 'messages', 'Message'],
  [/^dlq$/, pages.dlq, 'dlq', 'Dead letters'],
  [/^maintenance$/, pages.maintenance, 'maintenance', 'Maintenance'],
];

let stops = [];

function render() {
  stops.forEach((s) => s());
  stops = [];
  const main = document.getElementById('main');
  main.replaceChildren();
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, qs] = raw.split('?');
  const query = new URLSearchParams(qs || '');
  for (const [re, page, nav, title] of routes) {
    const m = path.match(re);
    if (!m) continue;
    document.title = `${title} · Queen broker`;
    for (const a of document.querySelectorAll('#nav a')) {
      if (a.dataset.page === nav) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
    if (identity.jwt && !identity.signedIn) {
      main.append(signIn());
      return;
    }
    const ctx = { live: (fn, ms) => { const s = live(fn, ms); stops.push(s); return s; } };
    page(main, m.slice(1).map(decodeURIComponent), query, ctx);
    return;
  }
  main.append(h('h1', {}, 'Not found'), h('p', {}, h('a', { href: '#/' }, 'Back to the overview')));
}

function signIn() {
  const input = h('textarea', { id: 'token', rows: 4, required: true, spellcheck: 'false', autocomplete: 'off' });
  const form = h('form', { class: 'signin', onsubmit: async (e) => {
    e.preventDefault();
    setToken(input.value.trim());
    await boot();
  } },
  h('h1', {}, 'Sign in'),
  h('p', {}, 'This broker verifies JWT bearer tokens. Paste a token: it is kept in this tab only (sessionStorage) and sent with every request.'),
  identity.error ? h('p', { class: 'error', role: 'alert' }, identity.error) : null,
  h('label', { for: 'token' }, 'Bearer token'), input,
  h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Sign in')));
  queueMicrotask(() => input.focus());
  return form;
}

function header() {
  const box = document.getElementById('identity');
  const banner = document.getElementById('banner');
  banner.replaceChildren();
  banner.className = '';
  if (!identity.jwt) {
    banner.className = 'banner warn';
    banner.append('Authentication off: this dashboard and the whole API are open to anyone who can reach this port (JWT_ENABLED=false).');
    box.replaceChildren(h('span', { class: 'muted' }, 'operator (no authentication)'));
    return;
  }
  if (!identity.signedIn) {
    box.replaceChildren(h('span', { class: 'muted' }, 'not signed in'));
    return;
  }
  // Signing out forgets the token and ends a session (behind queen-proxy, POST /auth/logout
  // clears its cookie; the broker alone answers it without effect).
  const out = h('button', { type: 'button', class: 'link', onclick: async () => {
    setToken('');
    try { await api('POST', '/auth/logout'); } catch (e) { console.warn(e); }
    boot();
  } }, 'Sign out');
  box.replaceChildren(
    h('span', { id: 'who' }, `Signed in as ${identity.subject || '(token without sub)'}`),
    h('span', { id: 'levels', class: 'muted' }, ` · ${[...identity.levels].join(', ') || 'no access level'}`), ' ', out);
}

async function boot() {
  try {
    await loadIdentity();
  } catch (e) {
    document.getElementById('main').replaceChildren(h('p', { class: 'error', role: 'alert' }, 'Cannot reach the broker: ' + e.message));
    return;
  }
  header();
  render();
}

window.addEventListener('hashchange', () => { render(); document.getElementById('main').focus({ preventScroll: true }); });
boot();
