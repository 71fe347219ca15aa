'use strict';
// "Move messages" on the queue page, as RabbitMQ's management UI has it
// with rabbitmq_shovel_management enabled: a dynamic shovel that moves
// the queue's messages to another queue and deletes itself once it has
// moved as many as the queue held when it started (src-delete-after
// "queue-length"). Then its progress, until the shovel is gone.
// Loaded before console.js, whose helpers (h, api, enc, note, fmtNum,
// hasTag, armed, st, POLL_MS) it uses only when called.

// moveName is the shovel RabbitMQ's form names ("Move from <queue>").
function moveName(queue) { return 'Move from ' + queue; }

// moveBody is the PUT /api/parameters/shovel/{vhost}/{name} body exactly
// as RabbitMQ 3.10.8's UI sends it: the hidden fields of the form in
// deps/rabbitmq_management/priv/www/js/tmpl/queue.ejs, in their order,
// cast as the route shovel-parameters-move-messages
// (deps/rabbitmq_shovel_management/priv/www/js/shovel.js) and
// put_parameter (main.js) cast them: src-prefetch-count a number,
// dest-add-forward-headers a boolean, a URI field split on spaces (one
// is a string, several a list), src-consumer-args {} (from a stream
// {"x-stream-offset": "first"}). destURI, not in RabbitMQ's form, is
// amqp:///<vhost> (this broker) when empty, as there.
function moveBody(vhost, queue, destQueue, destURI, stream) {
  const local = 'amqp:///' + enc(vhost);
  const uris = String(destURI || '').split(/\s+/).filter(Boolean);
  return { component: 'shovel', vhost, name: moveName(queue), value: {
    'src-uri': local, 'src-queue': queue, 'src-protocol': 'amqp091', 'src-prefetch-count': 1000,
    'src-delete-after': 'queue-length', 'dest-protocol': 'amqp091',
    'dest-uri': uris.length === 0 ? local : (uris.length === 1 ? uris[0] : uris),
    'dest-add-forward-headers': false, 'ack-mode': 'on-confirm', 'dest-queue': destQueue,
    'src-consumer-args': stream ? { 'x-stream-offset': 'first' } : {} } };
}

// moveSection is the queue page's "Move messages" form and progress, for
// users who may define shovels (policymaker or administrator, as
// RabbitMQ's is_user_policymaker); null for the others (the API would
// refuse them anyway).
function moveSection(vhost, queue) {
  if (!hasTag('administrator', 'policymaker')) return null;
  const page = st.page;
  const name = moveName(queue);
  const param = 'parameters/shovel/' + enc(vhost) + '/' + enc(name);
  const key = 'railmq.move.' + vhost + '\n' + queue; // what the move started from, kept across pages
  const destQ = h('input', { name: 'dest-queue', required: true, placeholder: 'queue name' });
  const destURI = h('input', { name: 'dest-uri', placeholder: 'amqp:///' + enc(vhost) + ' (this broker)' });
  const button = h('button', { class: 'primary', id: 'move-button' }, 'Move messages');
  const out = h('div', { id: 'move-progress' });
  const form = h('form', { class: 'panel stack', id: 'move' }, h('h2', {}, 'Move messages'),
    h('p', { class: 'small' }, 'A shovel moves this queue\'s messages to another queue, on this broker or at the URI given, and deletes itself once it has moved as many as the queue holds when it starts. A message leaves this queue only once the destination has confirmed it.'),
    h('div', { class: 'row' }, h('label', {}, h('span', {}, 'Destination queue'), destQ), h('label', {}, h('span', {}, 'Destination URI (optional)'), destURI)),
    button, out);
  const depth = async () => { const q = await api('queues/' + enc(vhost) + '/' + enc(queue)); return { n: q.messages || 0, stream: q.type === 'stream' }; };
  let watching = false;

  // watch follows the move every second (or faster with ?poll=) until
  // the shovel's parameter is gone.
  const watch = async () => {
    if (watching) return;
    watching = true; button.disabled = true;
    let last = null, remainingNow = 0;
    // One Stop button for the whole watch: redrawn progress keeps it (and
    // its armed state between the two clicks) instead of a new one.
    const stop = armed('Stop the move', () => api(param, { method: 'DELETE' }).then(() => note(out, true, 'The move is stopped; ' + fmtNum(remainingNow) + ' message(s) stay in ' + queue + '.'), e => note(out, false, e.message)));
    const tick = async () => {
      if (st.page !== page || !out.isConnected) { watching = false; return; }
      const m = JSON.parse(sessionStorage.getItem(key) || 'null') || { total: null, t0: Date.now(), dest: '' };
      try {
        let gone = false;
        try { await api(param); } catch (e) { if (e.status !== 404) throw e; gone = true; }
        let state = null, reason = '';
        // A completed railmq shovel shows terminated "completed" until its parameter is deleted.
        // /api/shovels is for monitoring users and administrators.
        if (!gone && hasTag('administrator', 'monitoring')) {
          const sh = (await api('shovels/' + enc(vhost))).find(s => s.name === name);
          state = sh ? sh.state : 'starting'; reason = (sh && sh.reason) || '';
          if (state === 'terminated' && reason.includes('completed')) state = 'completed';
        }
        const remaining = (await depth()).n;
        const moved = m.total === null ? null : Math.max(0, m.total - remaining);
        const now = Date.now();
        const rate = last && moved !== null && now > last.t ? 1000 * (moved - last.moved) / (now - last.t) : null;
        last = { t: now, moved };
        if (gone) { moveDone(out, m, moved, remaining, now); sessionStorage.removeItem(key); watching = false; button.disabled = false; return; }
        remainingNow = remaining;
        moveShow(out, m, moved, remaining, rate, state, reason, stop);
      } catch (e) {
        if (e.status === 401) { watching = false; return; }
        note(out, false, 'Following the move: ' + e.message);
      }
      st.moveTimer = setTimeout(tick, Math.min(POLL_MS, 1000));
    };
    tick();
  };

  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    try {
      // A shovel of that name is a move under way: PUT would restart it.
      try { await api(param); note(out, false, 'A move from this queue is under way already.'); watch(); return; } catch (e) { if (e.status !== 404) throw e; }
      const q = await depth();
      const m = { total: q.n, t0: Date.now(), dest: destQ.value, stream: q.stream };
      sessionStorage.setItem(key, JSON.stringify(m));
      moveShow(out, m, 0, q.n, null, 'starting', '');
      await api(param, { method: 'PUT', body: moveBody(vhost, queue, destQ.value, destURI.value, q.stream) });
      watch();
    } catch (e) { sessionStorage.removeItem(key); note(out, false, 'Move messages: ' + e.message); }
  });
  // A move under way (started here or elsewhere) shows its progress.
  api(param).then(() => watch(), () => {});
  return form;
}

// moveShow draws a move in progress: moved of total (when this console
// started it), what remains in the queue, the rate, the shovel's state.
function moveShow(out, m, moved, remaining, rate, state, reason, stop) {
  // Drawn once, then updated in place: the Stop button stays the same
  // element in the page between its two clicks (a redraw that took it
  // out and put it back made the second click miss it).
  let v = out.moveView;
  if (!v || !out.contains(v.status)) {
    v = out.moveView = { fill: h('span'), status: h('div', { id: 'move-status' }), err: h('div', { class: 'msg err', id: 'move-error' }), tools: h('div', { class: 'toolbar' }) };
    v.bar = h('div', { class: 'bar' }, v.fill);
    out.replaceChildren(v.bar, v.status, v.err, v.tools);
  }
  const total = m.total;
  const trouble = state === 'terminated';
  v.err.hidden = !trouble;
  v.err.textContent = trouble ? 'The shovel terminated: ' + String(reason).replace(/^"|"$/g, '') +
    (String(reason).includes('needed a restart') ? ' (a broker closed its channel or connection with an error; the broker\'s log says which)' : '') +
    '. It starts again after its reconnect delay.' : '';
  if (stop && v.tools.firstChild !== stop) v.tools.replaceChildren(stop);
  v.tools.hidden = !stop;
  if (m.stream) {
    // What is read from a stream stays in it: its depth says nothing of
    // the progress.
    v.bar.hidden = true;
    v.status.textContent = 'Copying ' + fmtNum(total) + ' message(s)' + (m.dest ? ' to ' + m.dest : '') +
      ' from this stream (a stream keeps its messages)' + (state ? ' · shovel ' + state : '');
    return;
  }
  const pct = total ? Math.min(100, Math.round(100 * moved / total)) : 0;
  const parts = [];
  if (moved !== null) parts.push(fmtNum(moved) + ' of ' + fmtNum(total) + ' moved');
  parts.push(fmtNum(remaining) + ' remaining');
  if (rate !== null) parts.push(fmtNum(Math.max(0, Math.round(rate))) + '/s');
  if (state) parts.push('shovel ' + state);
  v.bar.hidden = false;
  v.bar.className = 'bar' + (trouble ? ' bad' : '');
  v.fill.style.width = pct + '%';
  v.status.textContent = 'Moving' + (m.dest ? ' to ' + m.dest : '') + ': ' + parts.join(' · ');
}

// moveDone says how the move ended once the shovel is gone.
function moveDone(out, m, moved, remaining, now) {
  const secs = (now - m.t0) / 1000;
  if (m.stream) {
    // The shovel has copied the stream's length as it read it at its start.
    out.replaceChildren(h('div', { class: 'msg ok', id: 'move-result' }, 'Copied ' + fmtNum(m.total) + ' message(s)' + (m.dest ? ' to ' + m.dest : '') +
      ' in ' + secs.toFixed(1) + ' s; the stream keeps them.'));
    return;
  }
  let text = moved === null ? 'The move is done' : 'Moved ' + fmtNum(moved) + ' message(s)' + (m.dest ? ' to ' + m.dest : '') + ' in ' + secs.toFixed(1) + ' s' + (secs > 0 ? ' (' + fmtNum(Math.round(moved / secs)) + '/s)' : '');
  text += '; ' + fmtNum(remaining) + ' remain in this queue.';
  out.replaceChildren(h('div', { class: 'bar' }, h('span', { style: 'width:100%' })), h('div', { class: 'msg ok', id: 'move-result' }, text));
}
