'use strict';
// An exchange's page (its bindings from and to it, add and remove; publish
// a message; delete the exchange) and the pieces the queue's page shares
// with it: the bindings panel and the publish form. The calls are
// RabbitMQ's: POST /api/bindings/{vhost}/e/{source}/{q|e}/{destination}
// {routing_key, arguments} binds, DELETE of the same path with the
// binding's properties_key unbinds, POST
// /api/exchanges/{vhost}/{exchange}/publish publishes (a queue's page
// publishes through the default exchange with the queue's name as the
// routing key, as RabbitMQ's does). Loaded before console.js; uses its
// helpers only when called.

// bindingPath is the API path of one binding, or of the bindings between
// a source and a destination (without props).
function bindingPath(vhost, b, props) {
  return 'bindings/' + enc(vhost) + '/e/' + enc(b.source) + '/' + (b.destination_type === 'exchange' ? 'e' : 'q') + '/' + enc(b.destination) +
    (props === undefined ? '' : '/' + enc(props));
}

// bindingsPanel lists bindings and binds more. side is 'source' (the
// exchange's bindings to others), 'destination' (others' bindings to this
// exchange) or 'queue' (bindings to this queue). It returns the panel and
// a refresh that reads them again.
function bindingsPanel(vhost, side, name, id) {
  const panel = h('div', { class: 'panel', id: id + '-panel' });
  const msg = h('div', { id: id + '-result' });
  const list = h('div');
  const other = h('input', { name: 'other', required: true, placeholder: side === 'source' ? 'queue or exchange name' : 'exchange name' });
  const kind = h('select', { name: 'destination_type' }, h('option', { value: 'queue' }, 'To queue'), h('option', { value: 'exchange' }, 'To exchange'));
  const key = h('input', { name: 'routing_key' });
  const args = h('input', { name: 'arguments', placeholder: '{"x-match": "all"}' });
  const form = h('form', { class: 'stack', id: id + '-add' },
    h('h2', {}, side === 'source' ? 'Add a binding from this exchange' : side === 'destination' ? 'Add a binding to this exchange' : 'Add a binding to this queue'),
    h('div', { class: 'row' }, side === 'source' ? h('label', {}, h('span', {}, 'Destination'), kind) : null,
      h('label', {}, h('span', {}, side === 'source' ? 'Name' : 'From exchange'), other),
      h('label', {}, h('span', {}, 'Routing key'), key),
      h('label', {}, h('span', {}, 'Arguments (JSON object)'), args)),
    h('button', { class: 'primary' }, 'Bind'));
  // The binding this form makes: source, destination and its kind.
  const made = () => (side === 'source' ? { source: name, destination: other.value, destination_type: kind.value }
    : { source: other.value, destination: name, destination_type: side === 'queue' ? 'queue' : 'exchange' });
  let refresh;
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    let a = {};
    try { a = args.value ? JSON.parse(args.value) : {}; } catch (e) { note(msg, false, 'Arguments are not JSON: ' + e.message); return; }
    try {
      await api(bindingPath(vhost, made()), { method: 'POST', body: { routing_key: key.value, arguments: a } });
      note(msg, true, 'Bound.'); other.value = ''; key.value = ''; args.value = '';
      await refresh();
    } catch (e) { note(msg, false, e.message); }
  });
  const unbind = b => armed('Unbind', async () => {
    try { await api(bindingPath(vhost, b, b.properties_key), { method: 'DELETE' }); note(msg, true, 'Unbound.'); await refresh(); } catch (e) { note(msg, false, e.message); }
  });
  const path = side === 'queue' ? 'queues/' + enc(vhost) + '/' + enc(name) + '/bindings' : 'exchanges/' + enc(vhost) + '/' + enc(name) + '/bindings/' + side;
  const title = side === 'source' ? 'Bindings from this exchange' : side === 'destination' ? 'Bindings to this exchange' : 'Bindings';
  const link = (n, type) => (type === 'queue' ? h('a', { href: '#/queues/' + enc(vhost) + '/' + enc(n) }, n) : h('a', { href: '#/exchanges/' + enc(vhost) + '/' + enc(n) }, n || '(AMQP default)'));
  let shown = null; // what the table shows: redrawn only when it changes, so that an armed Unbind stays armed
  refresh = async () => {
    const bs = await api(path);
    const now = JSON.stringify(bs);
    if (now === shown) return;
    shown = now;
    list.replaceChildren(sortable(id, [
      side === 'source' ? { key: 'destination', label: 'To', cell: b => link(b.destination, b.destination_type) } : { key: 'source', label: 'From', cell: b => link(b.source, 'exchange') },
      ...(side === 'source' ? [{ key: 'destination_type', label: 'Kind' }] : []),
      { key: 'routing_key', label: 'Routing key' },
      { key: 'arguments', label: 'Arguments', get: b => JSON.stringify(b.arguments || {}) },
      // The default exchange's binding of every queue is implicit: it cannot be removed (RabbitMQ shows no Unbind either).
      { key: 'unbind', label: '', cell: b => (b.source === '' ? h('span', { class: 'small' }, '(default exchange binding)') : unbind(b)) },
    ], bs, { redraw() {} }));
  };
  panel.replaceChildren(h('h2', {}, title), list, msg, form);
  return { panel, refresh };
}

// publishForm publishes a message to exchange (queue: through the default
// exchange to that queue, the routing key fixed to its name).
function publishForm(vhost, exchange, queue, id) {
  const msg = h('div', { id: id + '-result' });
  const form = h('form', { class: 'panel stack', id }, h('h2', {}, 'Publish a message'),
    queue ? h('p', { class: 'small' }, 'The message goes to this queue through the default exchange, its name the routing key.') : null,
    h('div', { class: 'row' }, queue ? null : h('label', {}, h('span', {}, 'Routing key'), h('input', { name: 'routing_key' })),
      h('label', {}, h('span', {}, 'Delivery mode'), h('select', { name: 'delivery_mode' }, h('option', { value: '1' }, '1 - non-persistent'), h('option', { value: '2' }, '2 - persistent')))),
    h('label', {}, h('span', {}, 'Headers (JSON object)'), h('input', { name: 'headers', placeholder: '{"x-key": "value"}' })),
    h('label', {}, h('span', {}, 'Properties (JSON object)'), h('input', { name: 'properties', placeholder: '{"content_type": "application/json", "message_id": "m-1"}' })),
    h('label', {}, h('span', {}, 'Payload'), h('textarea', { name: 'payload' })),
    msg, h('button', { class: 'primary' }, 'Publish message'));
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    let headers = {}, props = {};
    try { headers = f.get('headers') ? JSON.parse(f.get('headers')) : {}; } catch (e) { note(msg, false, 'Headers are not JSON: ' + e.message); return; }
    try { props = f.get('properties') ? JSON.parse(f.get('properties')) : {}; } catch (e) { note(msg, false, 'Properties are not JSON: ' + e.message); return; }
    try {
      const r = await api('exchanges/' + enc(vhost) + '/' + enc(exchange || 'amq.default') + '/publish', { method: 'POST', body: {
        routing_key: queue || f.get('routing_key'), payload: f.get('payload'), payload_encoding: 'string',
        properties: Object.assign({}, props, { delivery_mode: Number(f.get('delivery_mode')), headers }) } });
      note(msg, r.routed, r.routed ? 'Message published and routed.' : 'Message published, but not routed.');
    } catch (e) { note(msg, false, e.message); }
  });
  return form;
}

function pageExchange(vhost, name) {
  const info = h('div', { class: 'panel', id: 'exchange-info' });
  const msg = h('div', { id: 'exchange-result' });
  const from = name ? bindingsPanel(vhost, 'source', name, 'exchange-bindings') : null;
  const to = name ? bindingsPanel(vhost, 'destination', name, 'exchange-bindings-to') : null;
  const path = 'exchanges/' + enc(vhost) + '/' + enc(name || 'amq.default');
  // RabbitMQ refuses to delete the default exchange and the amq.* ones
  // (access_refused): no button for them.
  const del = !name || name.startsWith('amq.') ? null : h('div', { class: 'panel', id: 'exchange-delete' }, h('h2', {}, 'Delete this exchange'),
    h('div', { class: 'toolbar' }, armed('Delete', async () => {
      try { await api(path, { method: 'DELETE' }); location.hash = '#/exchanges'; } catch (e) { note(msg, false, e.message); }
    })), msg);
  main().replaceChildren(h('h1', {}, 'Exchange ', h('small', {}, (name || '(AMQP default)') + ' in ' + vhost)), info,
    from ? from.panel : h('div', { class: 'panel' }, h('p', { class: 'small' }, 'The default exchange routes to the queue named by the routing key.')),
    to ? to.panel : null, publishForm(vhost, name, '', 'publish'), del);
  poll(st.page, async () => {
    let x;
    try { x = await api(path); } catch (e) {
      if (e.status === 404) { main().replaceChildren(h('div', { class: 'panel' }, 'Exchange ' + name + ' does not exist (any more). ', h('a', { href: '#/exchanges' }, 'Exchanges'))); st.page = null; return; }
      throw e;
    }
    info.replaceChildren(h('table', { class: 'kv' }, h('tbody', {},
      h('tr', {}, h('td', {}, 'Type'), h('td', { id: 'x-type' }, x.type)),
      h('tr', {}, h('td', {}, 'Features'), h('td', {}, [x.durable && 'durable', x.auto_delete && 'auto-delete', x.internal && 'internal'].filter(Boolean).join(', '))),
      h('tr', {}, h('td', {}, 'Policy'), h('td', {}, x.policy || '—')),
      h('tr', {}, h('td', {}, 'Arguments'), h('td', {}, JSON.stringify(x.arguments || {}))))));
    if (from) await Promise.all([from.refresh(), to.refresh()]);
  });
}
