'use strict';
// The queues page: one page of the list at a time, filtered, sorted and
// paged by the broker with RabbitMQ's list parameters (page, page_size,
// name with use_regex, sort, sort_reverse) and cut to the fields the
// table shows (columns=, dotted paths), so that a refresh of 5,000 queues
// carries 100 rows, not the whole list (3.7 MB every 5 s before). Each
// refresh also feeds the console's history ring (history.js), drawn in
// the History column, which starts from the broker's samples of each
// queue the tab lists for the first time (one request with lengths_age
// for those). And the form that declares a queue, its type
// (classic, quorum, stream) chosen as RabbitMQ's UI chooses it: the
// x-queue-type argument. Loaded before console.js; uses its helpers only
// when called.

// QUEUE_COLUMNS are the fields the table and the history need.
const QUEUE_COLUMNS = ['name', 'vhost', 'type', 'durable', 'auto_delete', 'exclusive', 'policy', 'operator_policy',
  'messages_ready', 'messages_unacknowledged', 'consumers', 'head_message_timestamp_age_seconds',
  'message_stats.publish_details.rate', 'message_stats.deliver_get_details.rate', 'message_stats.ack_details.rate',
  'arguments.x-dead-letter-exchange', 'arguments.x-max-priority'];

const PAGE_SIZES = [20, 50, 100, 500];

function pageQueues() {
  const ms = k => r => (r.message_stats && r.message_stats[k + '_details'] ? r.message_stats[k + '_details'].rate : 0);
  const list = pagedList({ what: 'queues', pre: 'queue', path: 'queues', fields: QUEUE_COLUMNS, table: 'queues',
    onItems: (items, path) => {
      const t = Date.now();
      const fresh = items.filter(q => !qhist.has(histKey(q.vhost, q.name)));
      for (const q of items) histAdd(q, t);
      // Queues this tab sees for the first time: the broker's history of
      // them, once, then the refreshes go on from it.
      histSeedPage(path, fresh).then(() => list.redraw(), () => {});
    },
    extra: [h('span', { class: 'spacer' }), rangeSelect(() => list.redraw())],
    columns: [
      { key: 'vhost', label: 'Vhost', hideSm: true },
      { key: 'name', label: 'Name', cell: q => h('a', { href: '#/queues/' + enc(q.vhost) + '/' + enc(q.name) }, q.name) },
      { key: 'type', label: 'Type', hideSm: true, cell: q => q.type || 'classic' },
      { key: 'features', label: 'Features', hideSm: true, nosort: true, cell: q => [q.durable && 'D', q.auto_delete && 'AD', q.exclusive && 'Excl', q.arguments && q.arguments['x-dead-letter-exchange'] !== undefined && 'DLX', q.arguments && q.arguments['x-max-priority'] && 'Pri'].filter(Boolean).join(' ') },
      { key: 'policy', label: 'Policy', hideSm: true, cell: q => q.policy || q.operator_policy || '' },
      { key: 'messages_ready', label: 'Ready', num: true, cell: q => fmtNum(q.messages_ready) },
      { key: 'messages_unacknowledged', label: 'Unacked', num: true, cell: q => fmtNum(q.messages_unacknowledged) },
      { key: 'history', label: 'History', nosort: true, hideSm: true, cell: q => spark(histSeries(q.vhost, q.name).ready) },
      { key: 'message_stats.publish_details.rate', label: 'In /s', num: true, cell: q => fmtNum(ms('publish')(q)) },
      { key: 'message_stats.deliver_get_details.rate', label: 'Out /s', num: true, cell: q => fmtNum(ms('deliver_get')(q)) },
      { key: 'message_stats.ack_details.rate', label: 'Ack /s', num: true, hideSm: true, cell: q => fmtNum(ms('ack')(q)) },
      { key: 'consumers', label: 'Consumers', num: true },
      { key: 'head_message_timestamp_age_seconds', label: 'Oldest', num: true, cell: q => fmtAge(q.head_message_timestamp_age_seconds) },
    ] });
  main().replaceChildren(h('h1', {}, 'Queues'), ...list.els, addQueueForm());
  poll(st.page, list.refresh);
}

// pagedList is a list the broker filters, sorts and pages with RabbitMQ's
// list parameters, asked for only the fields o.fields (columns=): its
// toolbar (filter, count, o.extra), message line, table and pager (the
// element ids start with o.pre), a refresh for poll and a redraw. A list
// whose rows hold armed buttons (o.stable) is redrawn only when its rows
// change, so that a button armed by a first click stays armed.
function pagedList(o) {
  const page = st.page;
  const key = 'railmq.list.' + o.what;
  const saved = JSON.parse(sessionStorage.getItem(key) || 'null') || {};
  const ls = { page: saved.page || 1, size: saved.size || 100, filter: saved.filter || '', sort: saved.sort || 'name', desc: !!saved.desc };
  const save = () => sessionStorage.setItem(key, JSON.stringify(ls));
  const wrap = h('div', { class: 'panel' });
  const filter = h('input', { id: o.pre + '-filter', placeholder: 'Filter by name (regular expression)', value: ls.filter });
  const count = h('span', { class: 'small', id: o.pre + '-count' });
  const pageInfo = h('span', { class: 'small', id: o.pre + '-page' });
  const listMsg = h('div', { id: o.pre + '-list-result' });
  const size = h('select', { id: o.pre + '-page-size', title: 'Rows per page' }, PAGE_SIZES.map(n => h('option', { value: String(n) }, n + ' per page')));
  size.value = String(ls.size);
  const prev = h('button', { type: 'button', id: o.pre + '-prev' }, '‹ Previous');
  const next = h('button', { type: 'button', id: o.pre + '-next' }, 'Next ›');
  let last = null; // the last answer
  let shown = null; // what the table shows, for o.stable
  let seq = 0; // answers to older requests are dropped
  const query = () => {
    const q = new URLSearchParams({ page: String(ls.page), page_size: String(ls.size), columns: o.fields.join(',') });
    if (ls.filter) { q.set('name', ls.filter); q.set('use_regex', 'true'); }
    if (ls.sort) { q.set('sort', ls.sort); q.set('sort_reverse', String(!!ls.desc)); }
    return o.path + '?' + q.toString();
  };
  const onSort = k => { ls.desc = ls.sort === k ? !ls.desc : k !== 'name' && k !== 'vhost'; ls.sort = k; ls.page = 1; go(); };
  const draw = () => {
    const r = last;
    if (!r) return;
    count.textContent = fmtNum(r.filtered_count) + ' of ' + fmtNum(r.total_count) + ' ' + o.what;
    const from = r.filtered_count ? (r.page - 1) * r.page_size + 1 : 0;
    pageInfo.textContent = 'Page ' + r.page + ' of ' + r.page_count + ' (' + fmtNum(from) + '–' + fmtNum(from + r.item_count - (r.item_count ? 1 : 0)) + ')';
    prev.disabled = r.page <= 1; next.disabled = r.page >= r.page_count;
    wrap.replaceChildren(serverTable(o.table, o.columns, r.items, ls, onSort));
  };
  const refresh = async () => {
    const my = ++seq;
    let r;
    try { r = await api(query()); } catch (e) {
      if (e.status !== 400) throw e;
      if (my !== seq) return;
      // Page out of range (the list shrank): back to the first page.
      if (e.body.error === 'page_out_of_range' && ls.page > 1) { ls.page = 1; save(); return refresh(); }
      listMsg.replaceChildren(h('div', { class: 'msg err' }, 'The filter is not a valid regular expression.'));
      return;
    }
    if (my !== seq || st.page !== page) return;
    listMsg.replaceChildren();
    if (o.onItems) o.onItems(r.items, query());
    last = r;
    if (o.stable) {
      const now = JSON.stringify([r, ls]);
      if (now === shown) return;
      shown = now;
    }
    draw();
  };
  const go = () => { save(); shown = null; refresh().catch(e => note(listMsg, false, e.message)); };
  let timer = null;
  filter.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(() => { ls.filter = filter.value; ls.page = 1; go(); }, 250); });
  size.addEventListener('change', () => { ls.size = Number(size.value); ls.page = 1; go(); });
  prev.addEventListener('click', () => { if (ls.page > 1) { ls.page--; go(); } });
  next.addEventListener('click', () => { if (last && ls.page < last.page_count) { ls.page++; go(); } });
  return {
    els: [h('div', { class: 'toolbar' }, filter, count, ...(o.extra || [])), listMsg, wrap, h('div', { class: 'toolbar pager' }, prev, pageInfo, next, size)],
    refresh, redraw: () => { shown = null; draw(); },
  };
}

// serverTable renders rows as a table whose column headers ask the broker
// for another order (onSort(key)); ls.sort and ls.desc say the current one.
function serverTable(id, columns, rows, ls, onSort) {
  const head = h('tr', {}, columns.map(c => h('th', {
    class: [!c.nosort && 'sort', c.num && 'num', c.hideSm && 'hide-sm', c.key === ls.sort && (ls.desc ? 'desc' : 'asc')].filter(Boolean).join(' '),
    onclick: c.nosort ? undefined : () => onSort(c.key),
  }, c.label)));
  const body = rows.map(r => h('tr', {}, columns.map(c => h('td', { class: [c.num && 'num', c.hideSm && 'hide-sm'].filter(Boolean).join(' ') },
    c.cell ? c.cell(r) : c.get ? c.get(r) : r[c.key]))));
  return h('table', { id }, h('thead', {}, head), h('tbody', {}, body.length ? body : h('tr', {}, h('td', { colspan: columns.length, class: 'empty' }, 'Nothing here.'))));
}

// addQueueForm declares a queue. The type goes as RabbitMQ 3.10.8's UI
// sends it (deps/rabbitmq_management/priv/www/js/tmpl/queues.ejs: a
// "queuetype" select whose value becomes the x-queue-type argument); a
// quorum queue or a stream is durable and not auto-delete, as RabbitMQ
// requires.
function addQueueForm() {
  const vsel = h('select', { name: 'vhost' });
  const msg = h('div', { id: 'add-queue-result' });
  const type = h('select', { name: 'type' }, ['classic', 'quorum', 'stream'].map(t => h('option', { value: t }, t)));
  const durable = h('select', { name: 'durable' }, h('option', { value: 'true' }, 'yes'), h('option', { value: 'false' }, 'no'));
  type.addEventListener('change', () => { if (type.value !== 'classic') durable.value = 'true'; durable.disabled = type.value !== 'classic'; });
  const form = h('form', { class: 'panel stack', id: 'add-queue' }, h('h2', {}, 'Add a queue'),
    h('div', { class: 'row' }, h('label', {}, h('span', {}, 'Vhost'), vsel), h('label', {}, h('span', {}, 'Type'), type),
      h('label', {}, h('span', {}, 'Name'), h('input', { name: 'name', required: true })),
      h('label', {}, h('span', {}, 'Durable'), durable)),
    h('label', {}, h('span', {}, 'Arguments (JSON object)'), h('input', { name: 'arguments', placeholder: '{"x-dead-letter-exchange": "dlx"}' })),
    msg, h('button', { class: 'primary' }, 'Add queue'));
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    let args = {};
    try { args = f.get('arguments') ? JSON.parse(f.get('arguments')) : {}; } catch (e) { note(msg, false, 'Arguments are not JSON: ' + e.message); return; }
    if (type.value !== 'classic') args['x-queue-type'] = type.value;
    try {
      await api('queues/' + enc(f.get('vhost')) + '/' + enc(f.get('name')), { method: 'PUT', body: { durable: type.value !== 'classic' || durable.value === 'true', auto_delete: false, arguments: args } });
      note(msg, true, 'Queue declared');
    } catch (e) { note(msg, false, e.message); }
  });
  vhostOptions(vsel).catch(() => {});
  return form;
}
