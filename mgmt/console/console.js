// The railmq console: a single page over the management HTTP API (the
// same routes rabbitmqadmin and the other tools use). It computes nothing
// the API already gives: figures, rates and the samples it plots come
// from the broker; it only draws them.
'use strict';

const params = new URLSearchParams(location.search);
const POLL_MS = Math.max(250, Number(params.get('poll')) || 5000);
const MGMT_TAGS = ['management', 'policymaker', 'monitoring', 'administrator'];

const st = { auth: sessionStorage.getItem('railmq.auth'), user: null, timer: null, page: null };

// --- DOM helpers -----------------------------------------------------------

// h builds an element: h('a', {href: '#'}, 'text', child...). Text is
// always set as text, never parsed as HTML.
function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined && k !== false) e.append(k instanceof Node ? k : String(k));
  return e;
}
const $ = sel => document.querySelector(sel);
const main = () => $('#main');
const enc = encodeURIComponent;
const fmtNum = n => (n === undefined || n === null ? '' : Number(n).toLocaleString('en-US', { maximumFractionDigits: 1 }));
const fmtRate = d => (d && typeof d.rate === 'number' ? fmtNum(d.rate) + '/s' : '');
function fmtBytes(b) {
  if (b === undefined || b === null) return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b) + ' ' + u[i];
}
function fmtAge(s) {
  if (s === undefined || s === null) return '';
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
  if (s < 3600) return (s / 60).toFixed(1) + ' min';
  if (s < 86400) return (s / 3600).toFixed(1) + ' h';
  return (s / 86400).toFixed(1) + ' d';
}
function stat(k, v, id) { return h('div', { class: 'stat' }, h('div', { class: 'v', id }, v), h('div', { class: 'k' }, k)); }
function note(el, ok, text) {
  el.replaceChildren(h('div', { class: 'msg ' + (ok ? 'ok' : 'err') }, text));
}
function hasTag(...tags) { return !!st.user && tags.some(t => st.user.tags.includes(t)); }

// armed is a button that asks for a second click instead of confirm().
function armed(label, action) {
  const b = h('button', { class: 'danger', type: 'button' }, label);
  let t = null;
  b.addEventListener('click', () => {
    if (!b.classList.contains('armed')) {
      b.classList.add('armed'); b.textContent = 'Click again to ' + label.toLowerCase();
      t = setTimeout(() => { b.classList.remove('armed'); b.textContent = label; }, 4000);
      return;
    }
    clearTimeout(t); b.classList.remove('armed'); b.textContent = label;
    action();
  });
  return b;
}

// --- API ---------------------------------------------------------------------

class APIError extends Error {
  constructor(status, body) {
    super((body && (body.reason || body.error)) || ('HTTP ' + status));
    this.status = status; this.body = body || {};
  }
}

async function api(path, opts) {
  opts = opts || {};
  const headers = { Authorization: 'Basic ' + st.auth };
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  Object.assign(headers, opts.headers || {});
  // credentials 'omit': the browser sends no cookies and, on a 401 with
  // WWW-Authenticate (RabbitMQ's answer, kept for the tools), shows no
  // password dialog of its own.
  const r = await fetch('api/' + path, { method: opts.method || 'GET', headers, credentials: 'omit', body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
  const text = await r.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = { reason: text }; }
  if (r.status === 503 && body && body.error === 'recovering') { showRecovering(body); throw new APIError(503, body); }
  if (!r.ok) {
    // RabbitMQ answers 401 both to credentials that no longer log in and
    // to a route this user may not use ("Not monitor user", "User not
    // authorised to access object"): the session ends only when whoami
    // refuses the credentials too.
    if (r.status === 401 && st.user && path !== 'whoami') {
      const auth = st.auth;
      const ok = await api('whoami').then(() => true, () => false);
      if (!ok && st.auth === auth) logout('Your session ended: ' + (body && body.reason));
    }
    throw new APIError(r.status, body);
  }
  return body;
}

// --- the frame: login, navigation, polling -------------------------------------

function banner(text, cls) {
  const b = $('#banner');
  b.hidden = !text; b.className = cls || ''; b.textContent = text || '';
}

function logout(why) {
  sessionStorage.removeItem('railmq.auth');
  st.auth = null; st.user = null;
  renderLogin(why);
}

function renderLogin(why) {
  stopPolling();
  $('#nav').hidden = true; $('#who').hidden = true;
  const out = h('div');
  if (why) note(out, false, why);
  const form = h('form', { class: 'panel stack login', id: 'login' },
    h('h1', {}, 'Log in to railmq'),
    h('label', {}, h('span', {}, 'Username'), h('input', { name: 'username', autocomplete: 'username', required: true, autofocus: true })),
    h('label', {}, h('span', {}, 'Password'), h('input', { name: 'password', type: 'password', autocomplete: 'current-password' })),
    out,
    h('button', { class: 'primary', type: 'submit' }, 'Log in'));
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    st.auth = btoa(unescape(encodeURIComponent(f.get('username') + ':' + f.get('password'))));
    try {
      await start();
      sessionStorage.setItem('railmq.auth', st.auth);
    } catch (e) {
      if (e.status === 503) return; // recovering: showRecovering logs in once the broker is up
      st.auth = null;
      if (e.status !== 503) note(out, false, e.status === 401 ? (e.message === 'Not management user' ? 'Not management user: this user has no management tag.' : 'Login failed.') : e.message);
    }
  });
  main().replaceChildren(form);
}

async function start() {
  const me = await api('whoami');
  const tags = Array.isArray(me.tags) ? me.tags : String(me.tags || '').split(',').filter(Boolean);
  if (!tags.some(t => MGMT_TAGS.includes(t))) throw new APIError(401, { reason: 'Not management user' });
  st.user = { name: me.name, tags };
  $('#nav').hidden = false; $('#who').hidden = false;
  $('#who-name').textContent = me.name + (tags.length ? ' (' + tags.join(', ') + ')' : '');
  for (const a of document.querySelectorAll('#nav a[data-tags]')) a.hidden = !hasTag(...a.dataset.tags.split(' '));
  route();
}

function stopPolling() { if (st.timer) clearTimeout(st.timer); st.timer = null; }

// poll runs refresh now and every POLL_MS while the page stays.
function poll(page, refresh) {
  stopPolling();
  const tick = async () => {
    if (st.page !== page) return;
    try { await refresh(); if (!$('#banner').classList.contains('alarm')) banner(''); } catch (e) {
      if (e.status !== 503 && e.status !== 401) banner('Cannot reach the broker: ' + e.message);
    }
    if (st.page === page) st.timer = setTimeout(tick, POLL_MS);
  };
  tick();
}

function showRecovering(body) {
  const r = body.recovery || {};
  st.page = 'recovering';
  const pct = r.queues ? Math.round(100 * r.queues_done / r.queues) : 0;
  main().replaceChildren(h('div', { class: 'panel recovering', id: 'recovering' },
    h('h1', {}, 'railmq is starting'),
    h('p', {}, body.reason || 'recovering'),
    h('div', { class: 'bar' }, h('span', { style: 'width:' + pct + '%' })),
    h('p', { class: 'small' }, 'This page carries on by itself once the broker is up.')));
  stopPolling();
  st.timer = setTimeout(() => { if (st.auth) start().catch(() => {}); else renderLogin(); }, 1000);
}

const routes = [
  [/^$/, pageOverview],
  [/^connections$/, pageConnections],
  [/^connections\/([^/]+)$/, pageConnectionsDetail],
  [/^channels$/, pageChannels],
  [/^channels\/([^/]+)$/, pageChannelsDetail],
  [/^nodes$/, pageNodes],
  [/^limits$/, pageLimits],
  [/^exchanges$/, pageExchanges],
  [/^exchanges\/([^/]+)\/([^/]*)$/, pageExchange],
  [/^queues$/, pageQueues],
  [/^queues\/([^/]+)\/([^/]+)$/, pageQueue],
  [/^policies$/, pagePolicies],
  [/^admin$/, pageAdmin],
];

function route() {
  if (!st.user) return;
  const path = location.hash.replace(/^#\/?/, '');
  for (const [re, page] of routes) {
    const m = path.match(re);
    if (m) {
      const name = page.name;
      st.page = path;
      for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', name.toLowerCase().startsWith('page' + a.dataset.page));
      stopPolling();
      page(...m.slice(1).map(decodeURIComponent));
      return;
    }
  }
  main().replaceChildren(h('div', { class: 'panel' }, 'No such page. ', h('a', { href: '#/' }, 'Overview')));
}

// sortable renders rows (objects) as a table with the given columns
// [{key, label, num, get(row), cell(row)}], sorted by a clicked column.
function sortable(id, columns, rows, state) {
  state.sort = state.sort || columns[0].key;
  const col = columns.find(c => c.key === state.sort) || columns[0];
  const get = col.get || (r => r[col.key]);
  const sorted = rows.slice().sort((a, b) => {
    const x = get(a), y = get(b);
    const c = typeof x === 'number' || typeof y === 'number' ? (x || 0) - (y || 0) : String(x ?? '').localeCompare(String(y ?? ''));
    return state.desc ? -c : c;
  });
  const head = h('tr', {}, columns.map(c => h('th', {
    class: ['sort', c.num && 'num', c.hideSm && 'hide-sm', c.key === state.sort && (state.desc ? 'desc' : 'asc')].filter(Boolean).join(' '),
    onclick: () => { state.desc = state.sort === c.key ? !state.desc : !!c.num; state.sort = c.key; state.redraw(); },
  }, c.label)));
  const body = sorted.map(r => h('tr', {}, columns.map(c => h('td', { class: [c.num && 'num', c.hideSm && 'hide-sm'].filter(Boolean).join(' ') },
    c.cell ? c.cell(r) : (c.get ? c.get(r) : r[c.key])))));
  return h('table', { id }, h('thead', {}, head), h('tbody', {}, body.length ? body : h('tr', {}, h('td', { colspan: columns.length, class: 'empty' }, 'Nothing here.'))));
}

// --- overview ----------------------------------------------------------------------

function pageOverview() {
  const totals = h('div', { class: 'stats', id: 'totals' });
  const rates = h('div', { class: 'stats', id: 'rates' });
  const node = h('div', { id: 'node' });
  const qplot = h('canvas', { class: 'plot', id: 'plot-overview-queued' });
  const rplot = h('canvas', { class: 'plot', id: 'plot-overview-rates' });
  let last = null;
  const plots = () => {
    const q = last.queue_totals || {}, ms = last.message_stats || {};
    // The broker's totals for the last 10 minutes, before them what this console has seen.
    const seen = histSeries('', ''), span = { spanMs: rangeSeconds() * 1000 };
    drawPlot(qplot, [{ name: 'ready', points: histMerge(valueSeries(q.messages_ready_details.samples), seen.ready) },
      { name: 'unacked', points: histMerge(valueSeries(q.messages_unacknowledged_details.samples), seen.unacked) }], span);
    drawPlot(rplot, [{ name: 'publish', points: histMerge(rateSeries(ms.publish_details.samples), seen.publish) },
      { name: 'deliver', points: histMerge(rateSeries(ms.deliver_get_details.samples), seen.deliver) },
      { name: 'ack', points: rateSeries(ms.ack_details.samples) }], Object.assign({ unit: '/s' }, span));
  };
  const rl = () => h('span', { class: 'range-label' }, rangeLabel());
  main().replaceChildren(
    h('h1', {}, 'Overview', h('small', { id: 'node-name' })),
    h('div', { class: 'grid' },
      h('div', { class: 'panel' }, h('h2', {}, 'Totals'), totals),
      h('div', { class: 'panel' }, h('h2', {}, 'Message rates'), rates),
      h('div', { class: 'panel' }, h('h2', {}, 'Node'), node)),
    h('div', { class: 'grid' },
      h('div', { class: 'panel' }, h('h2', {}, 'Queued messages, ', rl()), qplot),
      h('div', { class: 'panel' }, h('h2', {}, 'Message rates, ', rl()), rplot)),
    h('div', { class: 'toolbar' }, h('span', { class: 'spacer' }), rangeSelect(() => { if (last && last.queue_totals.messages_ready_details.samples) plots(); })));
  poll(st.page, async () => {
    const [o, nodes] = await Promise.all([api('overview?' + historyQuery()),
      // /api/nodes is for monitoring users and administrators: asked by
      // another user, its 401 would end the session (api).
      hasTag('administrator', 'monitoring') ? api('nodes') : Promise.resolve([])]);
    $('#node-name').textContent = o.node + ' · ' + o.product_name + ' ' + o.product_version;
    const q = o.queue_totals || {}, ot = o.object_totals || {}, ms = o.message_stats || {};
    totals.replaceChildren(stat('Ready', fmtNum(q.messages_ready), 'total-ready'), stat('Unacked', fmtNum(q.messages_unacknowledged), 'total-unacked'),
      stat('Total', fmtNum(q.messages)), stat('Queues', fmtNum(ot.queues), 'total-queues'), stat('Connections', fmtNum(ot.connections)),
      stat('Channels', fmtNum(ot.channels)), stat('Consumers', fmtNum(ot.consumers)), stat('Exchanges', fmtNum(ot.exchanges)));
    rates.replaceChildren(stat('Publish', fmtRate(ms.publish_details)), stat('Deliver / get', fmtRate(ms.deliver_get_details)),
      stat('Ack', fmtRate(ms.ack_details)), stat('Redeliver', fmtRate(ms.redeliver_details)));
    if (q.messages_ready_details && q.messages_ready_details.samples) {
      last = o;
      histAdd(Object.assign({ vhost: '', name: '', message_stats: ms }, q), Date.now());
      plots();
    } else {
      qplot.replaceWith(h('p', { class: 'small', id: 'plot-overview-queued' }, 'The history is shown to monitoring and administrator users.'));
    }
    const n = nodes.find(x => x.name === o.node); // /api/nodes lists every node of a cluster, by name
    if (!n) { node.replaceChildren(h('p', { class: 'small' }, 'Node figures need the monitoring tag.')); return; }
    const alarms = [n.mem_alarm && 'memory', n.disk_free_alarm && 'disk'].filter(Boolean);
    const bar = (used, limit, invert) => {
      const f = limit ? Math.min(1, used / limit) : 0;
      const level = invert ? (used < limit ? 'bad' : used < 2 * limit ? 'warn' : '') : (f >= 1 ? 'bad' : f > 0.8 ? 'warn' : '');
      return h('div', { class: 'bar ' + level }, h('span', { style: 'width:' + Math.round((invert ? Math.min(1, limit / Math.max(used, 1)) : f) * 100) + '%' }));
    };
    node.replaceChildren(
      h('div', {}, 'Memory ', h('b', {}, fmtBytes(n.mem_used)), ' of ', fmtBytes(n.mem_limit), ' high watermark'), bar(n.mem_used, n.mem_limit),
      h('div', {}, 'Disk free ', h('b', {}, fmtBytes(n.disk_free)), ', limit ', fmtBytes(n.disk_free_limit)), bar(n.disk_free, n.disk_free_limit, true),
      h('div', {}, 'File descriptors ', h('b', {}, fmtNum(n.fd_used)), ' of ', fmtNum(n.fd_total)), bar(n.fd_used, n.fd_total),
      h('div', { class: 'small' }, 'Uptime ', fmtAge(n.uptime / 1000)),
      h('div', { id: 'alarms' }, alarms.length ? h('div', { class: 'msg err' }, 'Alarm in effect: ' + alarms.join(', ') + '. Publishers are blocked.') : h('div', { class: 'msg ok' }, 'No alarms')));
    if (alarms.length) { banner('Resource alarm: ' + alarms.join(', ') + ' — publishers are blocked', 'alarm'); } else if ($('#banner').classList.contains('alarm')) banner('');
  });
}

// --- connections and channels -------------------------------------------------------

// --- exchanges -----------------------------------------------------------------------

async function vhostOptions(sel) {
  const vs = await api('vhosts');
  sel.replaceChildren(...vs.map(v => h('option', { value: v.name }, v.name)));
}

function pageExchanges() {
  // Paged, filtered and sorted by the broker, as the queues (queues.js).
  const list = pagedList({ what: 'exchanges', pre: 'exchange', path: 'exchanges', table: 'exchanges',
    fields: ['name', 'vhost', 'type', 'durable', 'auto_delete', 'internal', 'policy'],
    columns: [
      { key: 'vhost', label: 'Vhost', hideSm: true },
      { key: 'name', label: 'Name', cell: r => h('a', { href: '#/exchanges/' + enc(r.vhost) + '/' + enc(r.name) }, r.name || '(AMQP default)') },
      { key: 'type', label: 'Type' },
      { key: 'features', label: 'Features', nosort: true, get: r => [r.durable && 'D', r.auto_delete && 'AD', r.internal && 'I'].filter(Boolean).join(' ') },
      { key: 'policy', label: 'Policy', hideSm: true },
    ] });
  const vsel = h('select', { name: 'vhost' });
  const msg = h('div');
  const form = h('form', { class: 'panel stack', id: 'add-exchange' }, h('h2', {}, 'Add an exchange'),
    h('div', { class: 'row' }, h('label', {}, h('span', {}, 'Vhost'), vsel), h('label', {}, h('span', {}, 'Name'), h('input', { name: 'name', required: true })),
      h('label', {}, h('span', {}, 'Type'), h('select', { name: 'type' }, ['direct', 'fanout', 'topic', 'headers'].map(t => h('option', {}, t)))),
      h('label', {}, h('span', {}, 'Durable'), h('select', { name: 'durable' }, h('option', { value: 'true' }, 'yes'), h('option', { value: 'false' }, 'no')))),
    msg, h('button', { class: 'primary' }, 'Add exchange'));
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    try { await api('exchanges/' + enc(f.get('vhost')) + '/' + enc(f.get('name')), { method: 'PUT', body: { type: f.get('type'), durable: f.get('durable') === 'true' } }); note(msg, true, 'Exchange declared'); await list.refresh(); } catch (e) { note(msg, false, e.message); }
  });
  vhostOptions(vsel).catch(() => {});
  main().replaceChildren(h('h1', {}, 'Exchanges'), ...list.els, form);
  poll(st.page, list.refresh);
}

// --- queues -----------------------------------------------------------------------------

function messageView(m) {
  const props = Object.assign({}, m.properties || {});
  const deaths = props.headers && props.headers['x-death'];
  return h('div', { class: 'panel message' },
    h('div', { class: 'small' }, 'Exchange ', h('b', {}, m.exchange || '(AMQP default)'), ' · routing key ', h('b', {}, m.routing_key),
      m.redelivered ? ' · redelivered' : '', ' · ', fmtNum(m.payload_bytes), ' bytes'),
    deaths ? h('div', { class: 'small' }, 'Dead-lettered: ', deaths.map(d => d.reason + ' from ' + d.queue + ' (' + d.count + '×)').join('; ')) : null,
    h('pre', { class: 'payload' }, m.payload),
    h('details', {}, h('summary', { class: 'small' }, 'Properties'), h('pre', {}, JSON.stringify(props, null, 2))));
}

function pageQueue(vhost, name) {
  const path = 'queues/' + enc(vhost) + '/' + enc(name);
  const info = h('div', { class: 'panel', id: 'queue-info' });
  const depth = h('canvas', { class: 'plot', id: 'plot-depth' });
  const rates = h('canvas', { class: 'plot', id: 'plot-rates' });
  const age = h('canvas', { class: 'plot', id: 'plot-age' });
  const consumers = h('div', { class: 'panel' });
  const bindings = bindingsPanel(vhost, 'queue', name, 'bindings');
  const msgs = h('div', { id: 'messages' });
  const actionMsg = h('div', { id: 'action-result' });
  const count = h('input', { name: 'count', type: 'number', value: '5', min: '1', style: 'width:80px' });
  const ackmode = h('select', { name: 'ackmode' }, h('option', { value: 'ack_requeue_true' }, 'Nack, requeue'), h('option', { value: 'reject_requeue_true' }, 'Reject, requeue'), h('option', { value: 'ack_requeue_false' }, 'Ack (removes them)'));
  const show = ms => msgs.replaceChildren(...(ms.length ? ms.map(messageView) : [h('p', { class: 'empty' }, 'The queue is empty.')]));
  const act = async (what, f) => { try { note(actionMsg, true, await f()); } catch (e) { note(actionMsg, false, what + ': ' + e.message); } };
  const redriveMax = h('input', { name: 'max', type: 'number', min: '1', placeholder: 'all', style: 'width:90px' });
  const redriveX = h('input', { name: 'target_exchange', placeholder: 'where each died (x-first-death-exchange)' });
  const redriveK = h('input', { name: 'target_routing_key', placeholder: 'its routing keys' });
  const actions = h('div', { class: 'panel' }, h('h2', {}, 'Messages'),
    h('div', { class: 'toolbar' }, h('span', {}, 'Count'), count,
      h('button', { id: 'peek', type: 'button', onclick: () => act('Peek', async () => { const ms = await api(path + '/peek', { method: 'POST', body: { count: Number(count.value) } }); show(ms); return 'Peeked at ' + ms.length + ' message(s); they stay as they were.'; }) }, 'Peek'),
      ackmode,
      h('button', { id: 'get', type: 'button', onclick: () => act('Get', async () => { const ms = await api(path + '/get', { method: 'POST', body: { count: Number(count.value), ackmode: ackmode.value, encoding: 'auto' } }); show(ms); return 'Got ' + ms.length + ' message(s).'; }) }, 'Get messages'),
      armed('Purge', () => act('Purge', async () => { await api(path + '/contents', { method: 'DELETE' }); return 'Queue purged.'; })),
      armed('Delete', () => act('Delete', async () => { await api(path, { method: 'DELETE' }); location.hash = '#/queues'; return 'Queue deleted.'; }))),
    actionMsg, msgs);
  const redrive = h('form', { class: 'panel stack', id: 'redrive' }, h('h2', {}, 'Redrive dead-lettered messages'),
    h('p', { class: 'small' }, 'Moves the messages back to where they were dead-lettered from (each confirmed into its target before it leaves this queue), or to the exchange and routing key given.'),
    h('div', { class: 'row' }, h('label', {}, h('span', {}, 'At most'), redriveMax), h('label', {}, h('span', {}, 'Exchange'), redriveX), h('label', {}, h('span', {}, 'Routing key'), redriveK)),
    h('button', { class: 'primary', id: 'redrive-button' }, 'Redrive'));
  redrive.addEventListener('submit', ev => {
    ev.preventDefault();
    const body = {};
    if (redriveMax.value) body.max = Number(redriveMax.value);
    if (redriveX.value) body.target_exchange = redriveX.value;
    if (redriveK.value) body.target_routing_key = redriveK.value;
    act('Redrive', async () => { const r = await api(path + '/redrive', { method: 'POST', body }); return 'Redrove ' + r.moved + ' message(s); ' + r.unroutable + ' had no route; ' + r.remaining + ' remain.'; });
  });
  let q = null;
  const plots = () => {
    const m = q.message_stats || {};
    const seen = histSeries(vhost, name), span = { spanMs: rangeSeconds() * 1000 };
    drawPlot(depth, [{ name: 'ready', points: histMerge(valueSeries(q.messages_ready_details.samples), seen.ready) },
      { name: 'unacked', points: histMerge(valueSeries(q.messages_unacknowledged_details.samples), seen.unacked) }], span);
    drawPlot(rates, [{ name: 'publish', points: histMerge(rateSeries(m.publish_details.samples), seen.publish) },
      { name: 'deliver', points: histMerge(rateSeries(m.deliver_get_details.samples), seen.deliver) },
      { name: 'ack', points: rateSeries(m.ack_details.samples) }, { name: 'redeliver', points: rateSeries(m.redeliver_details.samples) }], Object.assign({ unit: '/s' }, span));
    drawPlot(age, [{ name: 'oldest', points: valueSeries(q.head_message_age_details.samples) }], Object.assign({ unit: 's' }, span));
  };
  const rl = () => h('span', { class: 'range-label' }, rangeLabel());
  main().replaceChildren(h('h1', {}, 'Queue ', h('small', {}, name + ' in ' + vhost)),
    h('div', { class: 'toolbar' }, h('span', { class: 'spacer' }), rangeSelect(() => { if (q) plots(); })),
    h('div', { class: 'grid' }, info,
      h('div', { class: 'panel' }, h('h2', {}, 'Messages in the queue, ', rl()), depth),
      h('div', { class: 'panel' }, h('h2', {}, 'Message rates, ', rl()), rates),
      h('div', { class: 'panel' }, h('h2', {}, 'Age of the oldest message, ', rl()), age)),
    consumers, bindings.panel, actions, publishForm(vhost, '', name, 'queue-publish'), redrive, ...[moveSection(vhost, name)].filter(Boolean));
  poll(st.page, async () => {
    try { q = await api(path + '?' + historyQuery()); } catch (e) {
      if (e.status === 404) { main().replaceChildren(h('div', { class: 'panel' }, 'Queue ' + name + ' does not exist (any more). ', h('a', { href: '#/queues' }, 'Queues'))); st.page = null; return; }
      throw e;
    }
    const m = q.message_stats || {};
    const args = q.arguments || {};
    info.replaceChildren(h('h2', {}, 'Details'), h('table', { class: 'kv' }, h('tbody', {},
      [['Type', q.type || 'classic'], ['State', q.state], ['Ready', fmtNum(q.messages_ready)], ['Unacked', fmtNum(q.messages_unacknowledged)], ['Total', fmtNum(q.messages)],
        ['Bytes', fmtBytes(q.message_bytes)], ['Consumers', fmtNum(q.consumers)], ['Consumer utilisation', Math.round(100 * (q.consumer_utilisation || 0)) + '%'],
        ['Oldest message', fmtAge(q.head_message_timestamp_age_seconds) || '—'], ['Publish', fmtRate(m.publish_details)], ['Deliver / get', fmtRate(m.deliver_get_details)],
        ['Policy', q.policy || '—'], ['Features', [q.durable && 'durable', q.auto_delete && 'auto-delete', q.exclusive && 'exclusive'].filter(Boolean).join(', ') || '—'],
        ['Arguments', Object.keys(args).length ? JSON.stringify(args) : '—'], ...(isStream(q) ? streamDetails(q) : [])].map(([k, v]) => h('tr', {}, h('td', {}, k), h('td', { id: 'q-' + k.toLowerCase().replace(/[^a-z]+/g, '-') }, v))))));
    plots();
    histAdd(q, Date.now());
    const [cs] = await Promise.all([api('consumers/' + enc(vhost)), bindings.refresh()]);
    const mine = cs.filter(c => c.queue && c.queue.name === name);
    consumers.replaceChildren(h('h2', {}, 'Consumers (' + mine.length + ')'), sortable('consumers', [
      { key: 'consumer_tag', label: 'Tag' },
      { key: 'channel', label: 'Channel', get: c => c.channel_details.name },
      { key: 'ack_required', label: 'Ack', get: c => (c.ack_required ? 'manual' : 'auto') },
      { key: 'prefetch_count', label: 'Prefetch', num: true },
      ...(isStream(q) ? streamConsumerColumns() : []),
    ], mine, { redraw() {} }));
    redrive.hidden = isStream(q); // nothing leaves a stream but by retention: there is nothing to move back
  });
}

// --- admin: users, vhosts, permissions, definitions ------------------------------------------

function pageAdmin() {
  const users = h('div', { class: 'panel', id: 'users' });
  const vhosts = h('div', { class: 'panel', id: 'vhosts' });
  const perms = h('div', { class: 'panel', id: 'permissions' });
  const defs = h('div', { class: 'panel', id: 'definitions' });
  const msg = h('div', { id: 'admin-result' });
  const done = (text) => { note(msg, true, text); refresh(); };
  const fail = e => note(msg, false, e.message);
  const uform = h('form', { class: 'stack', id: 'add-user' }, h('h2', {}, 'Add or update a user'),
    h('div', { class: 'row' }, h('label', {}, h('span', {}, 'Username'), h('input', { name: 'name', required: true })),
      h('label', {}, h('span', {}, 'Password'), h('input', { name: 'password', type: 'password', autocomplete: 'new-password' })),
      h('label', {}, h('span', {}, 'Tags (comma-separated)'), h('input', { name: 'tags', placeholder: 'administrator, monitoring, policymaker, management' }))),
    h('button', { class: 'primary' }, 'Save user'));
  uform.addEventListener('submit', ev => {
    ev.preventDefault();
    const f = new FormData(uform);
    api('users/' + enc(f.get('name')), { method: 'PUT', body: { password: f.get('password'), tags: f.get('tags') } }).then(() => done('User saved.'), fail);
  });
  const vform = h('form', { class: 'toolbar', id: 'add-vhost' }, h('input', { name: 'name', placeholder: 'new vhost', required: true }), h('button', { class: 'primary' }, 'Add vhost'));
  vform.addEventListener('submit', ev => {
    ev.preventDefault();
    api('vhosts/' + enc(new FormData(vform).get('name')), { method: 'PUT', body: {} }).then(() => done('Vhost added.'), fail);
  });
  const puser = h('select', { name: 'user' }), pvhost = h('select', { name: 'vhost' });
  const pform = h('form', { class: 'stack', id: 'set-permission' }, h('h2', {}, 'Set permissions'),
    h('div', { class: 'row' }, h('label', {}, h('span', {}, 'User'), puser), h('label', {}, h('span', {}, 'Vhost'), pvhost),
      h('label', {}, h('span', {}, 'Configure'), h('input', { name: 'configure', value: '.*' })),
      h('label', {}, h('span', {}, 'Write'), h('input', { name: 'write', value: '.*' })),
      h('label', {}, h('span', {}, 'Read'), h('input', { name: 'read', value: '.*' }))),
    h('button', { class: 'primary' }, 'Set permissions'));
  pform.addEventListener('submit', ev => {
    ev.preventDefault();
    const f = new FormData(pform);
    api('permissions/' + enc(f.get('vhost')) + '/' + enc(f.get('user')), { method: 'PUT', body: { configure: f.get('configure'), write: f.get('write'), read: f.get('read') } }).then(() => done('Permissions set.'), fail);
  });
  const file = h('input', { type: 'file', accept: 'application/json,.json', id: 'definitions-file' });
  const importBtn = h('button', { type: 'button', class: 'primary', onclick: async () => {
    if (!file.files[0]) { note(msg, false, 'Choose a definitions file first.'); return; }
    try { await api('definitions', { method: 'POST', body: JSON.parse(await file.files[0].text()) }); done('Definitions imported.'); } catch (e) { fail(e); }
  } }, 'Import definitions');
  const exportBtn = h('button', { type: 'button', id: 'export', onclick: async () => {
    try {
      const d = await api('definitions');
      const a = h('a', { href: URL.createObjectURL(new Blob([JSON.stringify(d, null, 2)], { type: 'application/json' })), download: 'railmq-definitions.json' });
      document.body.append(a); a.click(); a.remove();
      note(msg, true, 'Exported ' + (d.queues || []).length + ' queues, ' + (d.exchanges || []).length + ' exchanges, ' + (d.users || []).length + ' users.');
    } catch (e) { fail(e); }
  } }, 'Export definitions');
  defs.replaceChildren(h('h2', {}, 'Definitions'), h('p', { class: 'small' }, 'Users, vhosts, permissions, policies, exchanges, queues and bindings, in RabbitMQ\'s format.'),
    h('div', { class: 'toolbar' }, exportBtn), h('div', { class: 'toolbar' }, file, importBtn));
  const topics = topicPermissionsPanel(msg);
  main().replaceChildren(h('h1', {}, 'Admin'), msg, users, vhosts, perms, topics.panel, defs);
  const refresh = async () => {
    const [us, vs, ps] = await Promise.all([api('users'), api('vhosts'), api('permissions')]);
    users.replaceChildren(h('h2', {}, 'Users'), sortable('users-table', [
      { key: 'name', label: 'Name' },
      { key: 'tags', label: 'Tags', cell: u => (Array.isArray(u.tags) ? u.tags : String(u.tags || '').split(',')).filter(Boolean).map(t => h('span', { class: 'tag' }, t)) },
      { key: 'del', label: '', cell: u => armed('Delete', () => api('users/' + enc(u.name), { method: 'DELETE' }).then(() => done('User deleted.'), fail)) },
    ], us, { redraw() {} }), uform);
    vhosts.replaceChildren(h('h2', {}, 'Virtual hosts'), sortable('vhosts-table', [
      { key: 'name', label: 'Name' },
      { key: 'messages', label: 'Messages', num: true },
      { key: 'del', label: '', cell: v => armed('Delete', () => api('vhosts/' + enc(v.name), { method: 'DELETE' }).then(() => done('Vhost deleted.'), fail)) },
    ], vs, { redraw() {} }), vform);
    perms.replaceChildren(h('h2', {}, 'Permissions'), sortable('permissions-table', [
      { key: 'user', label: 'User' }, { key: 'vhost', label: 'Vhost' },
      { key: 'configure', label: 'Configure' }, { key: 'write', label: 'Write' }, { key: 'read', label: 'Read' },
      { key: 'del', label: '', cell: p => armed('Clear', () => api('permissions/' + enc(p.vhost) + '/' + enc(p.user), { method: 'DELETE' }).then(() => done('Permissions cleared.'), fail)) },
    ], ps, { redraw() {} }), pform);
    puser.replaceChildren(...us.map(u => h('option', {}, u.name)));
    pvhost.replaceChildren(...vs.map(v => h('option', {}, v.name)));
    await topics.refresh();
  };
  refresh().catch(fail);
}

// --- start -----------------------------------------------------------------------------------

$('#logout').addEventListener('click', () => logout());
window.addEventListener('hashchange', route);
if (st.auth) start().catch(e => { if (e.status !== 503) logout(); }); else renderLogin();
