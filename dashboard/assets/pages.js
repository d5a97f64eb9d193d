// The pages. Each takes (root, params, query, ctx): it renders into root and registers its
// refreshes with ctx.live, which the router stops when the operator leaves the page.

import { api, get, enc, can, identity } from './api.js';
import { h, num, bytes, when, duration, table, card, badge, act, errorBox } from './ui.js';
import { lineChart } from './chart.js';

const refreshMs = 3000;

// slot is a part of a page that a refresh replaces, only when its data changed (so focus and
// scroll stay put between refreshes that bring nothing new).
function slot(label) {
  const el = h('div', { class: 'slot', 'aria-label': label });
  let last;
  el.show = (data, render) => {
    const key = JSON.stringify(data);
    if (key === last) return;
    last = key;
    el.replaceChildren(render(data));
  };
  el.fail = (e) => { last = undefined; el.replaceChildren(errorBox(e)); };
  return el;
}

const needs = (level) => h('p', { class: 'muted' }, `Needs a token with ${level} access.`);

// guarded disables a control the signed-in token cannot use and says why.
function guarded(level, el) {
  if (!can(level)) {
    el.disabled = true;
    el.title = `needs ${level} access`;
  }
  return el;
}

function heading(title, ...extra) {
  return h('div', { class: 'page-head' }, h('h1', {}, title), ...extra);
}

// ---------------------------------------------------------------- Overview

// The chart draws the cluster's per-minute statistics of the last hour (GET /api/v1/status,
// every broker's counts): it is full when the page opens and the same on every broker. A
// minute without a point had no traffic.
const statusWindowMs = 3600 * 1000;
const statusRefreshMs = 15000;

// throughput turns the status points (newest first, minutes without traffic left out) into
// one point per bucket of the window, oldest first, in messages per second.
function throughput(st) {
  const step = (st.bucketMinutes || 1) * 60000;
  const byTime = new Map(st.throughput.map((p) => [Date.parse(p.timestamp), p]));
  const to = Date.parse(st.timeRange.to), from = Date.parse(st.timeRange.from);
  const pts = [];
  for (let t = Math.floor(from / step) * step; t <= to; t += step) {
    const p = byTime.get(t);
    pts.push({ t, values: p ? [p.ingestedPerSecond, p.popPerSecond, p.processedPerSecond] : [0, 0, 0] });
  }
  return pts;
}

export function overview(root, _p, _q, ctx) {
  const chart = slot('Throughput');
  const figures = slot('Figures');
  const mesh = slot('Brokers');
  root.append(heading('Overview'), chart, figures, h('h2', {}, 'Brokers on the mesh'), mesh);
  ctx.live(async () => {
    if (!can('read-only')) {
      chart.show({ needs: true }, () => needs('read-only'));
      return;
    }
    const to = new Date(), from = new Date(to.getTime() - statusWindowMs);
    try {
      const st = await get(`/api/v1/status?from=${enc(from.toISOString())}&to=${enc(to.toISOString())}`);
      const pts = throughput(st);
      const sum = (k) => st.throughput.reduce((a, p) => a + p[k], 0);
      const totals = { pushed: sum('ingested'), popped: sum('popMessages'), acked: sum('processed') };
      chart.show({ pts, totals }, () => h('div', {},
        lineChart('Messages per second, last hour, all brokers', [
          { name: 'push', color: '#4f46e5' }, { name: 'pop', color: '#0891b2' }, { name: 'ack', color: '#16a34a' },
        ], pts, '/s'),
        h('p', { class: 'muted small', id: 'hour-totals' },
          `${num(totals.pushed)} pushed, ${num(totals.popped)} popped, ${num(totals.acked)} acknowledged in the last hour`)));
    } catch (e) {
      chart.fail(e);
    }
  }, statusRefreshMs);
  ctx.live(async () => {
    const [m, queues, dlq, spool, shared] = await Promise.allSettled([
      get('/metrics'),
      can('read-only') ? get('/api/v1/resources/queues') : Promise.reject(new Error('needs read-only access')),
      can('read-only') ? get('/api/v1/dlq?limit=1') : Promise.reject(new Error('needs read-only access')),
      can('read-only') ? get('/api/v1/status/buffers') : Promise.reject(new Error('needs read-only access')),
      can('admin') ? get('/api/v1/system/shared-state') : Promise.reject(new Error('needs admin access')),
    ]);
    const val = (r, f) => (r.status === 'fulfilled' ? f(r.value) : r.reason.message);
    const data = {
      pending: val(queues, (v) => v.queues.reduce((a, q) => a + q.messages.pending, 0)),
      processing: val(queues, (v) => v.queues.reduce((a, q) => a + q.messages.processing, 0)),
      queues: val(queues, (v) => v.queues.length),
      dlq: val(dlq, (v) => v.total),
      db: m.status === 'fulfilled' ? m.value.database : null,
      spool: spool.status === 'fulfilled' ? spool.value : spool.reason.message,
      shared: shared.status === 'fulfilled' ? shared.value : shared.reason.message,
    };
    figures.show(data, (d) => {
      const n = (v) => (typeof v === 'number' ? num(v) : h('span', { class: 'muted small' }, v));
      const sp = d.spool, sh = d.shared;
      return h('div', { class: 'grid' },
        card('Pending messages', n(d.pending), typeof d.queues === 'number' ? `in ${num(d.queues)} queues` : ''),
        card('Processing (leased)', n(d.processing)),
        card('Dead letters', n(d.dlq), h('a', { href: '#/dlq' }, 'Open dead letters')),
        card('Database pool', d.db ? `${num(d.db.idleConnections)} idle` : '–',
          d.db ? `of at most ${num(d.db.poolSize)} connections; ${d.db.waitingRequests.toFixed(2)} callers waiting for one on average` : ''),
        card('Spool', typeof sp === 'object' ? `${num(sp.pending)} records` : n(sp),
          typeof sp === 'object' ? `${num(sp.files)} files, ${bytes(sp.bytes)}, oldest ${duration(sp.oldestAgeSeconds)}` : '',
          typeof sp === 'object' ? (sp.dbHealthy ? 'database takes pushes' : 'database unavailable: pushes go to the spool') : '',
          typeof sp === 'object' && sp.failed ? `${num(sp.failed)} records refused for good` : ''),
        card('Maintenance', typeof sh === 'object'
          ? h('span', {}, flag('push', sh.maintenance_mode), ' ', flag('pop', sh.pop_maintenance_mode))
          : n(sh), h('a', { href: '#/maintenance' }, 'Open maintenance')));
    });
    mesh.show(data.shared, (sh) => (typeof sh === 'object' ? brokers(sh) : needs('admin')));
  }, refreshMs);
}

function flag(name, on) {
  return badge(`${name} ${on ? 'ON' : 'off'}`, on ? 'warn' : 'ok');
}

// brokers lists this broker and its peers from a shared-state answer.
function brokers(sh) {
  const rows = [{ serverId: sh.server_id, host: 'this broker', alive: true, connected: true, self: true }, ...(sh.peers || [])];
  return h('div', {},
    sh.enabled ? h('p', { class: 'muted' }, `${num(sh.servers_alive)} peers alive, ${num(sh.servers_dead)} not answering`)
      : h('p', { class: 'muted' }, 'No mesh: this broker runs alone.'),
    table('Brokers', [
      ['Server', (r) => r.serverId || '–'],
      ['Address', (r) => r.host],
      ['State', (r) => (r.alive ? badge('alive', 'ok') : badge('not answering', 'bad'))],
      ['Last seen', (r) => (r.self ? 'now' : when(r.lastSeen))],
    ], rows));
}

// ---------------------------------------------------------------- Queues

function filterInput(id, label, value, oninput) {
  return h('label', { for: id }, label, h('input', { id, type: 'search', value: value || '', oninput, autocomplete: 'off' }));
}

export function queues(root, _p, query, ctx) {
  const f = { name: query.get('name') || '', namespace: '', task: '' };
  const list = slot('Queues');
  let data = null;
  const render = () => {
    if (!data) return;
    const m = (v, s) => !s || (v || '').toLowerCase().includes(s.toLowerCase());
    const rows = data.queues.filter((q) => m(q.name, f.name) && m(q.namespace, f.namespace) && m(q.task, f.task));
    list.show({ rows }, () => table('Queues', [
      ['Queue', (q) => h('a', { href: '#/queues/' + enc(q.name) }, q.name)],
      ['Namespace', (q) => q.namespace || '–'],
      ['Task', (q) => q.task || '–'],
      ['Partitions', (q) => num(q.partitions)],
      ['Pending', (q) => num(q.messages.pending)],
      ['Processing', (q) => num(q.messages.processing)],
      ['Total', (q) => num(q.messages.total)],
      ['Created', (q) => when(q.createdAt)],
    ], rows, data.queues.length ? 'No queue matches the filter.' : 'No queues yet.'));
  };
  const on = (k) => (e) => { f[k] = e.target.value; render(); };
  root.append(heading('Queues'),
    h('form', { class: 'filters', role: 'search', onsubmit: (e) => e.preventDefault() },
      filterInput('f-name', 'Name', f.name, on('name')),
      filterInput('f-ns', 'Namespace', '', on('namespace')),
      filterInput('f-task', 'Task', '', on('task'))),
    list);
  if (!can('read-only')) { list.replaceChildren(needs('read-only')); return; }
  ctx.live(async () => {
    try { data = await get('/api/v1/resources/queues'); render(); } catch (e) { list.fail(e); }
  }, refreshMs);
}

const optionLabels = {
  leaseTime: 'Lease time (s)', retryLimit: 'Retry limit', retryDelay: 'Retry delay (ms)', maxSize: 'Max size',
  ttl: 'TTL (s)', priority: 'Priority', delayedProcessing: 'Delayed processing (s)', windowBuffer: 'Window buffer (s)',
  deadLetterQueue: 'Dead-letter queue', dlqAfterMaxRetries: 'DLQ after max retries', retentionEnabled: 'Retention',
  retentionSeconds: 'Retention (s)', completedRetentionSeconds: 'Completed retention (s)',
  encryptionEnabled: 'Encryption', maxWaitTimeSeconds: 'Max wait time (s)',
};

const stats = (s) => `${num(s.pending)} pending, ${num(s.processing)} processing, ${num(s.completed)} completed, ${num(s.deadLetter)} dead`;

export function queue(root, [name], _q, ctx) {
  const body = slot('Queue');
  const groupsSlot = slot('Consumer groups');
  root.append(heading('Queue ' + name,
    h('a', { class: 'button', href: '#/messages?queue=' + enc(name) }, 'Browse messages'),
    h('a', { class: 'button', href: '#/dlq?queue=' + enc(name) }, 'Dead letters')),
  body, h('h2', {}, 'Consumer groups'), groupsSlot);
  if (!can('read-only')) { body.replaceChildren(needs('read-only')); return; }
  ctx.live(async () => {
    const [q, groups] = await Promise.allSettled([get('/api/v1/resources/queues/' + enc(name)), get('/api/v1/consumer-groups')]);
    if (q.status === 'rejected') body.fail(q.reason);
    else body.show(q.value, (d) => h('div', {},
      h('p', {}, `Namespace ${d.namespace || '–'}, task ${d.task || '–'}, created ${when(d.createdAt)}. `, stats(d.totals), '.'),
      h('h2', {}, 'Partitions'),
      table('Partitions', [
        ['Partition', (p) => p.name],
        ['Pending', (p) => num(p.stats.pending)],
        ['Processing', (p) => num(p.stats.processing)],
        ['Completed', (p) => num(p.stats.completed)],
        ['Dead letters', (p) => num(p.stats.deadLetter)],
        ['Total', (p) => num(p.stats.total)],
        ['Oldest', (p) => when(p.oldestMessage)],
        ['Newest', (p) => when(p.newestMessage)],
      ], d.partitions),
      h('h2', {}, 'Configuration'),
      d.options ? h('dl', { class: 'options' }, Object.entries(optionLabels).flatMap(([k, label]) =>
        [h('dt', {}, label), h('dd', {}, typeof d.options[k] === 'boolean' ? (d.options[k] ? 'on' : 'off') : num(d.options[k]))]))
        : h('p', { class: 'muted' }, 'Not reported by this broker.')));
    if (groups.status === 'rejected') groupsSlot.fail(groups.reason);
    else groupsSlot.show(groups.value.filter((g) => g.queueName === name), (rows) => groupTable(rows, false));
  }, refreshMs);
}

// ---------------------------------------------------------------- Consumer groups

const queueMode = '__QUEUE_MODE__';
const groupName = (g) => (g.name === queueMode ? 'queue mode (no group)' : g.name);

function groupTable(rows, actions) {
  const cols = [
    ['Group', (g) => groupName(g)],
    ['Queue', (g) => h('a', { href: '#/queues/' + enc(g.queueName) }, g.queueName)],
    ['State', (g) => badge(g.state, g.state === 'Stable' ? 'ok' : g.totalLag ? 'warn' : '')],
    ['Lag (messages)', (g) => num(g.totalLag)],
    ['Partitions lagging', (g) => num(g.partitionsWithLag)],
    ['Oldest unread', (g) => (g.maxTimeLag ? duration(g.maxTimeLag) : '–')],
    ['Consumers', (g) => num(g.members)],
  ];
  if (actions) cols.push(['Actions', groupActions]);
  return table('Consumer groups', cols, rows, 'No consumer groups.');
}

function groupActions(g) {
  const id = `seek-${g.name}-${g.queueName}`.replace(/[^A-Za-z0-9_-]/g, '_');
  const path = `/api/v1/consumer-groups/${enc(g.name)}/queues/${enc(g.queueName)}`;
  const time = h('input', { id, type: 'datetime-local', step: 1 });
  const toEnd = guarded('read-write', h('button', { type: 'button' }, 'Seek to end'));
  toEnd.onclick = () => act(toEnd, {
    confirm: { title: 'Seek to end', ok: 'Seek to end',
      text: `Group "${groupName(g)}" will skip every message of queue ${g.queueName} not yet read (${num(g.totalLag)} now): its consumers continue with new messages only. Skipped messages are not deleted.` },
    run: () => api('POST', path + '/seek', { toEnd: true }),
    done: (r) => `Group ${groupName(g)} moved to the end of ${r.queueName} on ${num(r.partitionsUpdated)} partitions.`,
  });
  const toTime = guarded('read-write', h('button', { type: 'button' }, 'Seek to time'));
  toTime.onclick = () => {
    if (!time.value) { time.focus(); time.reportValidity(); return; }
    const ts = new Date(time.value).toISOString();
    act(toTime, {
      confirm: { title: 'Seek to a time', ok: 'Seek',
        text: `Group "${groupName(g)}" will read queue ${g.queueName} again from ${when(ts)}: messages after that time are delivered again (or skipped, when the time is later than its position).` },
      run: () => api('POST', path + '/seek', { timestamp: ts }),
      done: (r) => `Group ${groupName(g)} moved to ${when(r.targetTimestamp)} on ${num(r.partitionsUpdated)} partitions.`,
    });
  };
  const del = guarded('admin', h('button', { type: 'button', class: 'danger' }, 'Delete'));
  del.onclick = () => act(del, {
    confirm: { title: 'Delete consumer group', ok: 'Delete',
      text: `The position of group "${groupName(g)}" on queue ${g.queueName} is deleted, with its subscription. If its consumers come back they start as a new group (by default from the newest messages). No message is deleted.` },
    run: () => api('DELETE', path),
    done: (r) => `Group ${groupName(g)} deleted from ${r.queueName} (${num(r.deletedPartitions)} partition cursors).`,
  });
  return h('div', { class: 'row-actions' }, toEnd,
    h('span', { class: 'inline' }, h('label', { for: id, class: 'sr-only' }, `Time to seek ${groupName(g)} to`), time, toTime), del);
}

export function groups(root, _p, _q, ctx) {
  const list = slot('Consumer groups');
  let data = null;
  let f = '';
  const render = () => {
    if (!data) return;
    const rows = data.filter((g) => !f || g.name.includes(f) || g.queueName.includes(f));
    list.show({ rows, levels: [...identity.levels] }, () => groupTable(rows, true));
  };
  root.append(heading('Consumer groups'),
    h('form', { class: 'filters', role: 'search', onsubmit: (e) => e.preventDefault() },
      filterInput('f-group', 'Group or queue', '', (e) => { f = e.target.value; render(); })),
    list);
  if (!can('read-only')) { list.replaceChildren(needs('read-only')); return; }
  ctx.live(async () => {
    try { data = await get('/api/v1/consumer-groups'); render(); } catch (e) { list.fail(e); }
  }, refreshMs);
}

// ---------------------------------------------------------------- Messages

function queryForm(fields, query, onsubmit) {
  const inputs = {};
  const form = h('form', { class: 'filters', role: 'search' },
    fields.map(([key, label, type]) => {
      const input = h('input', { id: 'q-' + key, name: key, type: type || 'search', value: query.get(key) || '', autocomplete: 'off' });
      inputs[key] = input;
      return h('label', { for: 'q-' + key }, label, input);
    }),
    h('button', { type: 'submit' }, 'Apply'));
  form.onsubmit = (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [k, input] of Object.entries(inputs)) if (input.value) q.set(k, input.value);
    onsubmit(q);
  };
  return form;
}

const statusKind = { pending: '', processing: 'warn', completed: 'ok', dead_letter: 'bad' };

export function messages(root, _p, query, ctx) {
  const list = slot('Messages');
  root.append(heading('Messages'),
    queryForm([['queue', 'Queue'], ['partition', 'Partition'], ['status', 'Status']], query,
      (q) => { location.hash = '#/messages?' + q; }),
    h('p', { class: 'muted small' }, 'Without a time window the broker lists the last hour. Status is pending, processing, completed or dead_letter.'),
    list);
  if (!can('read-only')) { list.replaceChildren(needs('read-only')); return; }
  const q = new URLSearchParams(query);
  q.set('limit', '100');
  ctx.live(async () => {
    try {
      const d = await get('/api/v1/messages?' + q);
      list.show(d.messages, (rows) => table('Messages', [
        ['Transaction', (m) => h('a', { href: `#/messages/${enc(m.partitionId)}/${enc(m.transactionId)}` }, m.transactionId)],
        ['Queue', (m) => m.queue],
        ['Partition', (m) => m.partition],
        ['Status', (m) => badge(m.status, statusKind[m.status])],
        ['Created', (m) => when(m.createdAt)],
      ], rows, 'No messages in this window.'));
    } catch (e) { list.fail(e); }
  }, refreshMs);
}

export function message(root, [pid, tx]) {
  const body = slot('Message');
  root.append(heading('Message'), body);
  if (!can('read-only')) { body.replaceChildren(needs('read-only')); return; }
  get(`/api/v1/messages/${enc(pid)}/${enc(tx)}`).then((m) => {
    const del = guarded('read-write', h('button', { type: 'button', class: 'danger' }, 'Delete message'));
    del.onclick = async () => {
      const r = await act(del, {
        confirm: { title: 'Delete message', ok: 'Delete',
          text: `Message ${m.transactionId} is removed from queue ${m.queue} for every consumer group, with its dead-letter entries. This cannot be undone.` },
        run: () => api('DELETE', `/api/v1/messages/${enc(pid)}/${enc(tx)}`),
        done: (r) => r.message,
      });
      if (r && r.success) location.hash = '#/messages?queue=' + enc(m.queue);
    };
    body.show(m, () => h('div', {},
      h('dl', { class: 'options' }, [
        ['Queue', h('a', { href: '#/queues/' + enc(m.queue) }, m.queue)], ['Partition', m.partition],
        ['Transaction', m.transactionId], ['Status', badge(m.status, statusKind[m.status])],
        ['Created', when(m.createdAt)], ['Retries', num(m.retryCount)], ['Trace', m.traceId || '–'],
        ['Producer', m.producerSub || '–'], ['Encrypted', m.isEncrypted ? 'yes' : 'no'],
        ['Error', m.errorMessage || '–'],
      ].flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
      h('h2', {}, 'Payload'),
      h('pre', { class: 'payload', tabindex: 0, 'aria-label': 'Payload' }, JSON.stringify(m.payload, null, 2)),
      m.consumerGroups && m.consumerGroups.length ? [h('h2', {}, 'Consumer groups'), table('Groups', [
        ['Group', (g) => groupName(g)], ['Consumed', (g) => (g.consumed ? 'yes' : 'no')], ['Lease until', (g) => when(g.leaseExpiresAt)],
      ], m.consumerGroups)] : null,
      h('div', { class: 'actions' }, del)));
  }, (e) => body.fail(e));
}

// ---------------------------------------------------------------- Dead letters

export function dlq(root, _p, query, ctx) {
  const list = slot('Dead letters');
  root.append(heading('Dead letters'),
    queryForm([['queue', 'Queue'], ['consumerGroup', 'Consumer group'], ['partition', 'Partition'],
      ['from', 'Failed from (RFC 3339)'], ['to', 'Failed until (RFC 3339)']], query,
    (q) => { location.hash = '#/dlq?' + q; }),
    list);
  if (!can('read-only')) { list.replaceChildren(needs('read-only')); return; }
  const q = new URLSearchParams(query);
  q.set('limit', '100');
  const refresh = ctx.live(async () => {
    try {
      const d = await get('/api/v1/dlq?' + q);
      list.show({ d, levels: [...identity.levels] }, () => h('div', {},
        h('p', { class: 'muted' }, `${num(d.total)} dead letters match${d.total > d.messages.length ? `; the ${d.messages.length} newest are shown` : ''}.`),
        table('Dead letters', [
          ['Transaction', (m) => h('a', { href: `#/messages/${enc(m.partitionId)}/${enc(m.transactionId)}` }, m.transactionId)],
          ['Queue', (m) => m.queue],
          ['Partition', (m) => m.partition],
          ['Group', (m) => groupName({ name: m.consumerGroup })],
          ['Error', (m) => h('span', { class: 'error-text' }, m.errorMessage || '–')],
          ['Retries', (m) => num(m.retryCount)],
          ['Failed', (m) => when(m.failedAt)],
          ['Payload', (m) => h('code', { class: 'clip' }, JSON.stringify(m.data))],
          ['Actions', (m) => replayButton(m, refresh)],
        ], d.messages, 'No dead letters.')));
    } catch (e) { list.fail(e); }
  }, refreshMs);
}

function replayButton(m, refresh) {
  const b = guarded('admin', h('button', { type: 'button', 'aria-label': `Replay ${m.transactionId}` }, 'Replay'));
  b.onclick = async () => {
    const r = await act(b, {
      confirm: { title: 'Replay dead letter', ok: 'Replay',
        text: `A copy of message ${m.transactionId} is pushed into queue ${m.queue}, partition ${m.partition}, as a new message (every consumer group reads it), and this dead letter is removed.` },
      run: () => api('POST', `/api/v1/dlq/${enc(m.partitionId)}/${enc(m.transactionId)}/replay`),
      done: (r) => `Replayed into ${r.queue}/${r.partition} as ${r.transactionId}.`,
    });
    if (r) refresh.now();
  };
  return b;
}

// ---------------------------------------------------------------- Maintenance

const switches = [
  { key: 'push', label: 'Push maintenance', path: '/api/v1/system/maintenance', field: 'maintenance_mode',
    on: 'Every broker stops writing pushes to PostgreSQL and appends them to its disk spool instead. Producers keep getting their pushes accepted; consumers see nothing new until it is switched off and the spool drains.',
    off: 'Pushes go to PostgreSQL again, and each broker drains its spool into the database in the background.' },
  { key: 'pop', label: 'Pop maintenance', path: '/api/v1/system/maintenance/pop', field: 'pop_maintenance_mode',
    on: 'Every pop on every broker answers empty: consumers receive no messages (long polls wait out their timeout). Producers are not affected and messages accumulate.',
    off: 'Pops deliver messages again; consumers pick up what accumulated.' },
];

export function maintenance(root, _p, _q, ctx) {
  const sw = slot('Switches');
  const state = slot('State per broker');
  const spool = slot('Spool');
  root.append(heading('Maintenance'), sw, h('h2', {}, 'Flags on every broker'), state, h('h2', {}, 'Spool of this broker'), spool);
  if (!can('admin')) {
    sw.show({}, () => h('div', {}, needs('admin'), switchesView(null)));
    state.replaceChildren(needs('admin'));
  }
  const refresh = ctx.live(async () => {
    const [m, shared, buf] = await Promise.allSettled([
      can('admin') ? get('/api/v1/system/maintenance') : Promise.reject(new Error('needs admin access')),
      can('admin') ? get('/api/v1/system/shared-state') : Promise.reject(new Error('needs admin access')),
      can('read-only') ? get('/api/v1/status/buffers') : Promise.reject(new Error('needs read-only access')),
    ]);
    if (can('admin')) {
      if (m.status === 'fulfilled') sw.show(m.value, (d) => switchesView({ push: d.maintenanceMode, pop: d.popMaintenanceMode }, refresh));
      else sw.fail(m.reason);
      if (shared.status === 'fulfilled') state.show(shared.value, flagsPerBroker); else state.fail(shared.reason);
    }
    if (buf.status === 'fulfilled') spool.show(buf.value, (b) => h('div', { class: 'grid' },
      card('Records waiting', num(b.pending), `${num(b.files)} files, ${bytes(b.bytes)}`),
      card('Oldest record', b.pending ? duration(b.oldestAgeSeconds) : '–', b.pending ? 'draining into PostgreSQL' : 'nothing to drain'),
      card('Database', b.dbHealthy ? badge('takes pushes', 'ok') : badge('unavailable', 'bad')),
      card('Refused for good', num(b.failed))));
    else spool.fail(buf.reason);
  }, refreshMs);
}

function switchesView(flags, refresh) {
  return h('div', { class: 'grid' }, switches.map((s) => {
    const on = flags ? flags[s.key] : null;
    const b = guarded('admin', h('button', { type: 'button', id: `switch-${s.key}`, class: on ? '' : 'danger',
      'aria-pressed': on ? 'true' : 'false' }, on ? `Switch ${s.key} maintenance off` : `Switch ${s.key} maintenance on`));
    if (!flags) b.textContent = `Switch ${s.key} maintenance`;
    b.onclick = async () => {
      const r = await act(b, {
        confirm: { title: `${s.label} ${on ? 'off' : 'on'}`, text: on ? s.off : s.on, ok: on ? 'Switch off' : 'Switch on' },
        run: () => api('POST', s.path, { enabled: !on }),
        done: (r) => r.message,
      });
      if (r) refresh.now();
    };
    return h('section', { class: 'card' }, h('h3', {}, s.label),
      h('div', { class: 'value' }, on === null ? '–' : badge(on ? 'ON' : 'off', on ? 'warn' : 'ok')),
      h('p', { class: 'muted' }, on ? s.off : s.on), b);
  }));
}

function flagsPerBroker(sh) {
  const self = { serverId: sh.server_id, host: 'this broker', alive: true, self: true };
  const rows = [self, ...(sh.peers || [])];
  return h('div', {},
    table('Flags per broker', [
      ['Server', (r) => r.serverId || '–'],
      ['Address', (r) => r.host],
      ['Alive', (r) => (r.alive ? badge('alive', 'ok') : badge('not answering', 'bad'))],
      ['Push maintenance', (r) => (r.self ? flag('push', sh.maintenance_mode) : 'follows the cluster flag')],
      ['Pop maintenance', (r) => (r.self ? flag('pop', sh.pop_maintenance_mode) : 'follows the cluster flag')],
    ], rows),
    h('p', { class: 'muted small' }, 'The flags are stored in PostgreSQL and announced over the mesh; a peer that is not answering reads them at its next refresh.'));
}
