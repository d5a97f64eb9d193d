// Small DOM helpers: elements, tables, confirmations and the result of every action.

// h builds an element: h('a', {href: '#/'}, 'text', child...). Attributes starting with "on"
// are listeners; false and null attributes are left out; strings become text, never HTML.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v === null || v === undefined) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export const num = (n) => (n === null || n === undefined ? '–' : Number(n).toLocaleString('en'));

export function bytes(n) {
  if (!n) return '0 B';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function when(iso) {
  if (!iso) return '–';
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toLocaleString('en-GB', { hour12: false });
}

export function duration(s) {
  s = Math.round(s || 0);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

// table renders rows under headers; each column is [header, row => cell].
export function table(label, columns, rows, empty = 'Nothing to show.') {
  if (!rows.length) return h('p', { class: 'muted empty' }, empty);
  return h('div', { class: 'scroll' },
    h('table', {},
      h('caption', { class: 'sr-only' }, label),
      h('thead', {}, h('tr', {}, columns.map(([name]) => h('th', { scope: 'col' }, name)))),
      h('tbody', {}, rows.map((r) => h('tr', {}, columns.map(([name, cell]) => h('td', { 'data-label': name }, cell(r))))))));
}

// card is one figure of an overview grid.
export const card = (title, value, ...detail) =>
  h('section', { class: 'card' }, h('h3', {}, title), h('div', { class: 'value' }, value), ...detail.map((d) => h('p', { class: 'muted' }, d)));

export function badge(text, kind) { return h('span', { class: 'badge ' + (kind || '') }, text); }

// confirmAction asks the operator with the modal dialog; resolves true on Confirm.
export function confirmAction(title, text, okLabel) {
  const dlg = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-ok').textContent = okLabel || 'Confirm';
  dlg.returnValue = '';
  dlg.showModal();
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok'), { once: true });
  });
}

// toast shows the outcome of an action for a while.
export function toast(text, ok) {
  const t = h('div', { class: 'toast ' + (ok ? 'ok' : 'err'), role: ok ? 'status' : 'alert' }, text);
  document.getElementById('toasts').append(t);
  setTimeout(() => t.remove(), ok ? 5000 : 10000);
}

// act runs an action after an optional confirmation, disables its button while it runs and
// reports the result (or the broker's error) in a toast and in the returned promise.
export async function act(button, { confirm, run, done }) {
  if (confirm && !(await confirmAction(confirm.title, confirm.text, confirm.ok))) return;
  button.disabled = true;
  try {
    const res = await run();
    toast(done ? done(res) : 'Done.', true);
    return res;
  } catch (e) {
    toast(e.message, false);
  } finally {
    button.disabled = false;
  }
}

// errorBox shows why a part of a page has no data.
export const errorBox = (e) => h('p', { class: 'error', role: 'alert' }, e.message || String(e));
