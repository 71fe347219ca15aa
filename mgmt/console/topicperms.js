'use strict';
// Topic permissions on the admin page: per user, vhost and topic
// exchange, the regular expressions a routing key must match to publish
// (write) and to bind or consume (read), as RabbitMQ's UI sets them (PUT
// /api/topic-permissions/{vhost}/{user} {exchange, write, read}). Clear
// removes that row's entry, one exchange's (DELETE
// /api/topic-permissions/{vhost}/{user}/{exchange}, as RabbitMQ 4's UI;
// 3.10.8's only DELETE removed all of the user's in the vhost). Loaded before
// console.js; uses its helpers only when called.

// topicPermissionsPanel returns the panel and its refresh.
function topicPermissionsPanel(msg) {
  const panel = h('div', { class: 'panel', id: 'topic-permissions' });
  const usel = h('select', { name: 'user' }), vsel = h('select', { name: 'vhost' });
  const fail = e => note(msg, false, e.message);
  const form = h('form', { class: 'stack', id: 'set-topic-permission' }, h('h2', {}, 'Set topic permissions'),
    h('div', { class: 'row' }, h('label', {}, h('span', {}, 'User'), usel), h('label', {}, h('span', {}, 'Vhost'), vsel),
      h('label', {}, h('span', {}, 'Exchange'), h('input', { name: 'exchange', value: 'amq.topic', required: true })),
      h('label', {}, h('span', {}, 'Write'), h('input', { name: 'write', value: '.*' })),
      h('label', {}, h('span', {}, 'Read'), h('input', { name: 'read', value: '.*' }))),
    h('button', { class: 'primary' }, 'Set topic permissions'));
  let refresh;
  form.addEventListener('submit', ev => {
    ev.preventDefault();
    const f = new FormData(form);
    api('topic-permissions/' + enc(f.get('vhost')) + '/' + enc(f.get('user')), { method: 'PUT', body: { exchange: f.get('exchange'), write: f.get('write'), read: f.get('read') } })
      .then(() => { note(msg, true, 'Topic permissions set.'); return refresh(); }).catch(fail);
  });
  refresh = async () => {
    const [tps, us, vs] = await Promise.all([api('topic-permissions'), api('users'), api('vhosts')]);
    panel.replaceChildren(h('h2', {}, 'Topic permissions'), sortable('topic-permissions-table', [
      { key: 'user', label: 'User' }, { key: 'vhost', label: 'Vhost' }, { key: 'exchange', label: 'Exchange' },
      { key: 'write', label: 'Write' }, { key: 'read', label: 'Read' },
      { key: 'del', label: '', cell: p => armed('Clear', () => api('topic-permissions/' + enc(p.vhost) + '/' + enc(p.user) + '/' + enc(p.exchange), { method: 'DELETE' })
        .then(() => { note(msg, true, 'Topic permission on ' + p.exchange + ' cleared.'); return refresh(); }).catch(fail)) },
    ], tps, { redraw() {} }), form);
    const keep = (sel, names) => { const v = sel.value; sel.replaceChildren(...names.map(n => h('option', {}, n))); if (names.includes(v)) sel.value = v; };
    keep(usel, us.map(u => u.name)); keep(vsel, vs.map(v => v.name));
  };
  return { panel, refresh };
}
