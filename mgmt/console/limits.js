'use strict';
// The limits page (administrators): RabbitMQ's per-vhost limits
// (max-connections, max-queues: /api/vhost-limits) and per-user limits
// (max-connections, max-channels: /api/user-limits), set and cleared
// with PUT and DELETE of /api/{vhost,user}-limits/{name}/{limit}
// {"value": N}, as RabbitMQ's UI does (its Admin › Limits page). Loaded
// before console.js; uses its helpers only when called.

function pageLimits() {
  const msg = h('div', { id: 'limits-result' });
  const vl = h('div', { class: 'panel', id: 'vhost-limits' });
  const ul = h('div', { class: 'panel', id: 'user-limits' });
  const vsel = h('select', { name: 'vhost' }), usel = h('select', { name: 'user' });
  const done = text => { note(msg, true, text); refresh(); };
  const fail = e => note(msg, false, e.message);
  const form = (id, title, sel, names, what) => {
    const f = h('form', { class: 'stack', id }, h('h2', {}, title),
      h('div', { class: 'row' }, h('label', {}, h('span', {}, what), sel),
        h('label', {}, h('span', {}, 'Limit'), h('select', { name: 'limit' }, names.map(n => h('option', {}, n)))),
        h('label', {}, h('span', {}, 'Value (negative: no limit)'), h('input', { name: 'value', type: 'number', required: true }))),
      h('button', { class: 'primary' }, 'Set limit'));
    f.addEventListener('submit', ev => {
      ev.preventDefault();
      const d = new FormData(f);
      api((what === 'Vhost' ? 'vhost-limits/' : 'user-limits/') + enc(d.get(what.toLowerCase())) + '/' + enc(d.get('limit')), { method: 'PUT', body: { value: Number(d.get('value')) } })
        .then(() => done('Limit set.'), fail);
    });
    return f;
  };
  const vform = form('set-vhost-limit', 'Set a vhost limit', vsel, ['max-connections', 'max-queues'], 'Vhost');
  const uform = form('set-user-limit', 'Set a user limit', usel, ['max-connections', 'max-channels'], 'User');
  // One row per limit: [owner, limit, value].
  const flat = (list, k) => list.flatMap(e => Object.entries(e.value || {}).map(([n, v]) => ({ owner: e[k], limit: n, value: v })));
  const table = (id, rows, base) => sortable(id, [
    { key: 'owner', label: base === 'vhost-limits/' ? 'Vhost' : 'User' }, { key: 'limit', label: 'Limit' }, { key: 'value', label: 'Value', num: true },
    { key: 'clear', label: '', cell: r => armed('Clear', () => api(base + enc(r.owner) + '/' + enc(r.limit), { method: 'DELETE' }).then(() => done('Limit cleared.'), fail)) },
  ], rows, { redraw() {} });
  main().replaceChildren(h('h1', {}, 'Limits'), msg, vl, ul);
  const refresh = async () => {
    const [vs, us, vhosts, users] = await Promise.all([api('vhost-limits'), api('user-limits'), api('vhosts'), api('users')]);
    vl.replaceChildren(h('h2', {}, 'Virtual host limits'), table('vhost-limits-table', flat(vs, 'vhost'), 'vhost-limits/'), vform);
    ul.replaceChildren(h('h2', {}, 'User limits'), table('user-limits-table', flat(us, 'user'), 'user-limits/'), uform);
    const keep = (sel, names) => { const v = sel.value; sel.replaceChildren(...names.map(n => h('option', {}, n))); if (names.includes(v)) sel.value = v; };
    keep(vsel, vhosts.map(v => v.name)); keep(usel, users.map(u => u.name));
  };
  refresh().catch(fail);
}
