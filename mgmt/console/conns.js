'use strict';
// Connections and channels: the lists, a connection's page (its figures,
// client properties and channels; close it with a reason) and a
// channel's page (its figures and consumers), each read alone
// (/api/connections/{name}/channels, /api/channels/{name}) rather than
// from the whole list. Loaded before console.js; uses its helpers only
// when called.

function stateCell(s) { return h('span', { class: 'state-' + s }, s); }

const connLink = n => h('a', { href: '#/connections/' + enc(n) }, n);
const chanLink = n => h('a', { href: '#/channels/' + enc(n) }, n);

// closeButton closes connection name with the reason the user typed (or
// the console's), as RabbitMQ's UI does (the X-Reason header).
function closeButton(name, reasonInput, msg, after) {
  return armed('Close', async () => {
    const reason = (reasonInput && reasonInput.value) || 'Closed via the railmq console';
    try { await api('connections/' + enc(name), { method: 'DELETE', headers: { 'X-Reason': reason } }); note(msg, true, 'Closed ' + name); if (after) after(); } catch (e) { note(msg, false, e.message); }
  });
}

function pageConnections() {
  const msg = h('div');
  // Paged, filtered and sorted by the broker like the queues (queues.js);
  // redrawn only when the rows change, so that an armed Close stays armed.
  const list = pagedList({ what: 'connections', pre: 'connection', path: 'connections', table: 'connections', stable: true,
    fields: ['name', 'vhost', 'user', 'state', 'client_properties.product', 'client_properties.version', 'channels', 'connected_at'],
    columns: [
      { key: 'name', label: 'Name', cell: r => connLink(r.name) },
      { key: 'vhost', label: 'Vhost', hideSm: true },
      { key: 'user', label: 'User' },
      { key: 'state', label: 'State', cell: r => stateCell(r.state) },
      { key: 'client_properties.product', label: 'Client', hideSm: true, cell: r => { const p = r.client_properties || {}; return [p.product, p.version].filter(Boolean).join(' '); } },
      { key: 'channels', label: 'Channels', num: true },
      { key: 'connected_at', label: 'Connected', hideSm: true, cell: r => new Date(r.connected_at).toLocaleTimeString() },
      { key: 'close', label: '', nosort: true, cell: r => closeButton(r.name, null, msg) },
    ] });
  main().replaceChildren(h('h1', {}, 'Connections'), msg, ...list.els);
  poll(st.page, list.refresh);
}

// kvRows are the rows [label, value] of fields that obj has.
function kvTable(id, obj, fields) {
  return h('table', { class: 'kv', id }, h('tbody', {}, fields.filter(([, k]) => obj[k] !== undefined && obj[k] !== null).map(([label, k, f]) =>
    h('tr', {}, h('td', {}, label), h('td', { id: id + '-' + k.replace(/_/g, '-') }, f ? f(obj[k], obj) : String(obj[k]))))));
}

function pageConnectionsDetail(name) {
  const info = h('div', { class: 'panel', id: 'connection-info' });
  const props = h('div', { class: 'panel', id: 'client-properties' });
  const chans = h('div', { class: 'panel', id: 'connection-channels' });
  const msg = h('div', { id: 'connection-result' });
  const reason = h('input', { name: 'reason', placeholder: 'Closed via the railmq console', id: 'close-reason' });
  const page = st.page;
  main().replaceChildren(h('h1', {}, 'Connection ', h('small', {}, name)), info, props, chans,
    h('div', { class: 'panel', id: 'close-connection' }, h('h2', {}, 'Close this connection'),
      h('div', { class: 'toolbar' }, h('label', {}, 'Reason '), reason, closeButton(name, reason, msg)), msg));
  let shownChans = null;
  poll(page, async () => {
    let c;
    try { c = await api('connections/' + enc(name)); } catch (e) {
      if (e.status === 404) {
        info.replaceChildren(h('div', { class: 'msg err', id: 'connection-gone' }, 'This connection is closed (or never was). '), h('a', { href: '#/connections' }, 'Connections'));
        st.page = null; return;
      }
      throw e;
    }
    info.replaceChildren(h('h2', {}, 'Details'), kvTable('conn', c, [['Vhost', 'vhost'], ['User', 'user'], ['State', 'state', s => stateCell(s)],
      ['Node', 'node'], ['Protocol', 'protocol'], ['Client address', 'peer_host', (v, o) => v + ':' + o.peer_port], ['Server address', 'host', (v, o) => v + ':' + o.port],
      ['Connected at', 'connected_at', v => new Date(v).toLocaleString()], ['Client-provided name', 'user_provided_name'],
      ['TLS', 'ssl', v => (v ? 'yes' : 'no')], ['Heartbeat', 'timeout', v => v + ' s'], ['Frame max', 'frame_max', v => fmtNum(v) + ' bytes'], ['Channel max', 'channel_max'],
      ['Channels', 'channels'], ['Received', 'recv_oct', v => fmtBytes(v)], ['Sent', 'send_oct', v => fmtBytes(v)],
      ['Received /s', 'recv_oct_details', v => fmtBytes(v.rate) + '/s'], ['Sent /s', 'send_oct_details', v => fmtBytes(v.rate) + '/s']]));
    const cp = c.client_properties || {};
    props.replaceChildren(h('h2', {}, 'Client properties'), h('table', { class: 'kv' }, h('tbody', {},
      Object.keys(cp).sort().map(k => h('tr', {}, h('td', {}, k), h('td', {}, typeof cp[k] === 'object' ? JSON.stringify(cp[k]) : String(cp[k])))))));
    // The connection's channels (GET /api/connections/{name}/channels).
    const mine = await api('connections/' + enc(name) + '/channels');
    const now = JSON.stringify(mine);
    if (now === shownChans) return;
    shownChans = now;
    chans.replaceChildren(h('h2', {}, 'Channels (' + mine.length + ')'), channelsTable('connection-channels-table', mine, { redraw() {} }));
  });
}

function channelsTable(id, rows, ts) { return sortable(id, channelColumns(), rows, ts); }

// channelColumns are a channels table's columns; their keys are the API's
// fields, by which the broker sorts the paged list.
function channelColumns() {
  return [
    { key: 'name', label: 'Channel', cell: r => chanLink(r.name) },
    { key: 'user', label: 'User', hideSm: true },
    { key: 'vhost', label: 'Vhost', hideSm: true },
    { key: 'state', label: 'State', cell: r => stateCell(r.state) },
    { key: 'confirm', label: 'Mode', get: r => (r.confirm ? 'C' : '') + (r.transactional ? 'T' : '') },
    { key: 'prefetch_count', label: 'Prefetch', num: true },
    { key: 'messages_unacknowledged', label: 'Unacked', num: true },
    { key: 'messages_unconfirmed', label: 'Unconfirmed', num: true, hideSm: true },
    { key: 'consumer_count', label: 'Consumers', num: true },
  ];
}

function pageChannels() {
  const list = pagedList({ what: 'channels', pre: 'channel', path: 'channels', table: 'channels',
    fields: ['name', 'user', 'vhost', 'state', 'confirm', 'transactional', 'prefetch_count', 'messages_unacknowledged', 'messages_unconfirmed', 'consumer_count'],
    columns: channelColumns() });
  main().replaceChildren(h('h1', {}, 'Channels'), ...list.els);
  poll(st.page, list.refresh);
}

function pageChannelsDetail(name) {
  const info = h('div', { class: 'panel', id: 'channel-info' });
  const cons = h('div', { class: 'panel', id: 'channel-consumers' });
  const pending = h('div', { class: 'panel', id: 'channel-pending' });
  main().replaceChildren(h('h1', {}, 'Channel ', h('small', {}, name)), info, cons, pending);
  poll(st.page, async () => {
    // GET /api/channels/{name}: 404 once the channel is closed.
    let c = null;
    try { c = await api('channels/' + enc(name)); } catch (e) {
      if (e.status !== 404) throw e;
    }
    if (!c) {
      info.replaceChildren(h('div', { class: 'msg err', id: 'channel-gone' }, 'This channel is closed (or never was). '), h('a', { href: '#/channels' }, 'Channels'));
      cons.replaceChildren(); pending.replaceChildren(); st.page = null; return;
    }
    info.replaceChildren(h('h2', {}, 'Details'), kvTable('chan', c, [['Connection', 'connection_details', v => connLink(v.name)], ['Number', 'number'],
      ['Vhost', 'vhost'], ['User', 'user'], ['State', 'state', s => stateCell(s)], ['Node', 'node'], ['Prefetch', 'prefetch_count'], ['Global prefetch', 'global_prefetch_count'],
      ['Confirm mode', 'confirm', v => (v ? 'yes' : 'no')], ['Transactional', 'transactional', v => (v ? 'yes' : 'no')],
      ['Unacked', 'messages_unacknowledged', fmtNum], ['Unconfirmed', 'messages_unconfirmed', fmtNum], ['Consumers', 'consumer_count']]));
    const cs = (await api('consumers/' + enc(c.vhost))).filter(x => x.channel_details && x.channel_details.name === name);
    cons.replaceChildren(h('h2', {}, 'Consumers (' + cs.length + ')'), sortable('channel-consumers-table', [
      { key: 'consumer_tag', label: 'Tag' },
      { key: 'queue', label: 'Queue', get: x => x.queue.name, cell: x => h('a', { href: '#/queues/' + enc(x.queue.vhost || c.vhost) + '/' + enc(x.queue.name) }, x.queue.name) },
      { key: 'ack_required', label: 'Ack', get: x => (x.ack_required ? 'manual' : 'auto') },
      { key: 'prefetch_count', label: 'Prefetch', num: true },
      { key: 'exclusive', label: 'Exclusive', get: x => (x.exclusive ? 'yes' : 'no') },
    ], cs, { redraw() {} }));
    pending.replaceChildren(...pendingAcks(c.pending_acks || [], c.messages_unacknowledged));
  });
}

// pendingAcks is a channel's unacked deliveries with their ack deadlines
// (pending_acks: the first 1,000; a lease moves a deadline, docs/leases.md).
function pendingAcks(ps, total) {
  const now = Date.now();
  const left = d => (d === null ? 'none' : new Date(d).toLocaleTimeString() + ' (' + (d > now ? 'in ' + Math.ceil((d - now) / 1000) + ' s' : 'due') + ')');
  return [h('h2', {}, 'Unacked deliveries (' + fmtNum(total) + ')'), sortable('channel-pending-table', [
    { key: 'delivery_tag', label: 'Tag', num: true },
    { key: 'queue', label: 'Queue' },
    { key: 'consumer_tag', label: 'Consumer', get: p => p.consumer_tag || '(get)' },
    { key: 'delivered_at', label: 'Delivered', num: true, cell: p => new Date(p.delivered_at).toLocaleTimeString() },
    { key: 'deadline', label: 'Ack deadline', num: true, cell: p => left(p.deadline) },
    { key: 'leased', label: 'Leased', get: p => (p.leased ? 'yes' : 'no') },
  ], ps, { redraw() {} })];
}
