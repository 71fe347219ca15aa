'use strict';
// The policies page: policies (policymakers and administrators) and, as
// in RabbitMQ's UI, operator policies below them (administrators only, as
// RabbitMQ 3.10.8 keeps them: /api/operator-policies). An operator policy
// applies to queues and takes the keys RabbitMQ allows there (expires,
// message-ttl, max-length, max-length-bytes, max-in-memory-length,
// max-in-memory-bytes, delivery-limit, overflow, queue-mode,
// target-group-size); the broker refuses the others and the page shows
// why. Loaded before console.js; uses its helpers only when called.

function pagePolicies() {
  const user = policySection('policies');
  const op = hasTag('administrator') ? policySection('operator-policies') : null;
  main().replaceChildren(h('h1', {}, 'Policies'), ...user.els, ...(op ? [h('h1', {}, 'Operator policies'), ...op.els] : []));
}

// policySection is the list and form of one kind ('policies' or
// 'operator-policies'): its elements, in order.
function policySection(kind) {
  const op = kind === 'operator-policies';
  const pre = op ? 'operator-policy' : 'policy';
  const wrap = h('div', { class: 'panel' });
  const msg = h('div', { id: pre + '-result' });
  let rows = [];
  const vsel = h('select', { name: 'vhost' });
  const applyTo = op ? ['queues'] : ['all', 'queues', 'exchanges'];
  const form = h('form', { class: 'panel stack', id: pre + '-form' }, h('h2', {}, op ? 'Add or update an operator policy' : 'Add or update a policy'),
    h('div', { class: 'row' }, h('label', {}, h('span', {}, 'Vhost'), vsel), h('label', {}, h('span', {}, 'Name'), h('input', { name: 'name', required: true })),
      h('label', {}, h('span', {}, 'Pattern'), h('input', { name: 'pattern', required: true, placeholder: '^orders\\.' }))),
    h('div', { class: 'row' }, h('label', {}, h('span', {}, 'Apply to'), h('select', { name: 'apply-to' }, applyTo.map(a => h('option', {}, a)))),
      h('label', {}, h('span', {}, 'Priority'), h('input', { name: 'priority', type: 'number', value: '0' }))),
    h('label', {}, h('span', {}, 'Definition (JSON object)'), h('textarea', { name: 'definition', placeholder: op ? '{"max-length": 100000, "message-ttl": 3600000}' : '{"max-length": 10000, "dead-letter-exchange": "dlx"}' })),
    msg, h('button', { class: 'primary' }, op ? 'Save operator policy' : 'Save policy'));
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    let def;
    try { def = JSON.parse(f.get('definition') || '{}'); } catch (e) { note(msg, false, 'The definition is not JSON: ' + e.message); return; }
    try {
      await api(kind + '/' + enc(f.get('vhost')) + '/' + enc(f.get('name')), { method: 'PUT', body: { pattern: f.get('pattern'), 'apply-to': f.get('apply-to'), priority: Number(f.get('priority')), definition: def } });
      note(msg, true, (op ? 'Operator policy ' : 'Policy ') + f.get('name') + ' saved.'); refresh();
    } catch (e) { note(msg, false, e.message); }
  });
  const edit = p => {
    form.elements.name.value = p.name; form.elements.pattern.value = p.pattern; form.elements['apply-to'].value = p['apply-to'];
    form.elements.priority.value = p.priority; form.elements.definition.value = JSON.stringify(p.definition, null, 2); vsel.value = p.vhost;
    form.scrollIntoView();
  };
  const ts = { redraw: () => draw() };
  const draw = () => wrap.replaceChildren(sortable(kind, [
    { key: 'vhost', label: 'Vhost' }, { key: 'name', label: 'Name' }, { key: 'pattern', label: 'Pattern' },
    { key: 'apply-to', label: 'Apply to' }, { key: 'priority', label: 'Priority', num: true },
    { key: 'definition', label: 'Definition', get: p => JSON.stringify(p.definition) },
    { key: 'edit', label: '', cell: p => h('span', {}, h('button', { type: 'button', onclick: () => edit(p) }, 'Edit'), ' ',
      armed('Delete', async () => { try { await api(kind + '/' + enc(p.vhost) + '/' + enc(p.name), { method: 'DELETE' }); note(msg, true, (op ? 'Operator policy' : 'Policy') + ' deleted.'); refresh(); } catch (e) { note(msg, false, e.message); } })) },
  ], rows, ts));
  const refresh = async () => { rows = await api(kind); draw(); };
  vhostOptions(vsel).catch(() => {});
  refresh().catch(e => note(msg, false, e.message));
  return { els: [wrap, form] };
}
