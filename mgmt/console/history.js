'use strict';
// What the console remembers of each queue beside the broker's samples.
// The broker keeps every queue's history for 10 minutes from the queue's
// first sample (mgmt/queuehist.go), so a queue's page plots it at the
// first look from the samples its GET returns (lengths_age,
// msg_rates_age). This bounded ring per queue, fed by every refresh of
// the queues list (one page of it) and of a queue's page, draws the
// list's History column, fills in before the broker's first sample of a
// queue, and lets the plots reach past the broker's 10 minutes (the hour,
// 8 hours and day ranges) as far back as the console has seen the queue.
// Also the time-range selector the plots share. Loaded before console.js;
// uses its helpers (h) only when called.

// Bounds: HIST_POINTS samples per queue (when full, the older half is
// thinned to every other sample, so the ring spans more time at a coarser
// step rather than forgetting), HIST_QUEUES queues (the least recently
// seen is forgotten first). Each sample is 5 numbers in a Float64Array:
// at most 120 × 5 × 8 bytes = 4.8 KB a queue, 9.6 MB for 2,000.
const HIST_POINTS = 120;
const HIST_QUEUES = 2000;
const HIST_FIELDS = 5; // time (ms), ready, unacked, publish /s, deliver-get /s

const qhist = new Map(); // "vhost\nname" → {a: Float64Array, n}; Map order is least recently seen first

function histKey(vhost, name) { return vhost + '\n' + name; }

// histAdd records a queue object's figures (from /api/queues or
// /api/queues/{vhost}/{name}) at time t (ms).
function histAdd(q, t) {
  const k = histKey(q.vhost, q.name);
  let e = qhist.get(k);
  if (e) qhist.delete(k); // re-inserted below: most recently seen last
  else {
    e = { a: new Float64Array(HIST_POINTS * HIST_FIELDS), n: 0 };
    if (qhist.size >= HIST_QUEUES) qhist.delete(qhist.keys().next().value);
  }
  qhist.set(k, e);
  if (e.n > 0 && t - e.a[(e.n - 1) * HIST_FIELDS] < 1000) return; // the same refresh seen twice
  if (e.n === HIST_POINTS) {
    // Thin the older half: keep every other one of its samples.
    const half = HIST_POINTS / 2;
    let w = 0;
    for (let i = 0; i < HIST_POINTS; i++) {
      if (i < half && i % 2 === 1) continue;
      e.a.copyWithin(w * HIST_FIELDS, i * HIST_FIELDS, (i + 1) * HIST_FIELDS);
      w++;
    }
    e.n = w;
  }
  const ms = q.message_stats || {};
  const rate = d => (d && typeof d.rate === 'number' ? d.rate : 0);
  e.a.set([t, q.messages_ready || 0, q.messages_unacknowledged || 0, rate(ms.publish_details), rate(ms.deliver_get_details)], e.n * HIST_FIELDS);
  e.n++;
}

// histSeed puts the broker's samples of a queue (a list row asked for
// with lengths_age; rates from msg_rates_age when asked) before what the ring holds, once
// per queue: the list's History column then draws the queue's last
// minutes at the list's first look, not only what this tab saw since.
function histSeed(q) {
  const rs = (q.messages_ready_details || {}).samples || [];
  const e = qhist.get(histKey(q.vhost, q.name));
  if (!e || e.seeded || !rs.length) return;
  e.seeded = true;
  const us = (q.messages_unacknowledged_details || {}).samples || [];
  const ms = q.message_stats || {};
  const ps = (ms.publish_details || {}).samples || [], ds = (ms.deliver_get_details || {}).samples || [];
  // Samples are newest first; a rate is the count's rise to a sample.
  const rate = (s, i) => (s[i] && s[i + 1] && s[i].timestamp > s[i + 1].timestamp ? 1000 * (s[i].sample - s[i + 1].sample) / (s[i].timestamp - s[i + 1].timestamp) : 0);
  const first = e.n ? e.a[0] : Infinity;
  const pts = [];
  for (let i = rs.length - 1; i >= 0; i--) {
    if (rs[i].timestamp < first - 500) pts.push([rs[i].timestamp, rs[i].sample, us[i] ? us[i].sample : 0, rate(ps, i), rate(ds, i)]);
  }
  const take = pts.slice(Math.max(0, pts.length - (HIST_POINTS - e.n)));
  if (!take.length) return;
  e.a.copyWithin(take.length * HIST_FIELDS, 0, e.n * HIST_FIELDS);
  take.forEach((p, j) => e.a.set(p, j * HIST_FIELDS));
  e.n += take.length;
}

// histSeedPage asks the broker once for the samples of the queues of a
// list page (path: the page's query) that the ring has not had yet, and
// seeds them (histSeed).
async function histSeedPage(path, fresh) {
  if (!fresh.length) return;
  const [p, qs] = path.split('?');
  const q = new URLSearchParams(qs);
  // Depths only, about 30 samples a queue over the range the broker
  // keeps (10 minutes): a sparkline is 96 pixels wide, and a page of 100
  // queues' samples is then some 200 KB, once.
  const age = Math.min(rangeSeconds(), 600);
  q.set('columns', 'name,vhost,messages_ready_details,messages_unacknowledged_details');
  q.set('lengths_age', String(age)); q.set('lengths_incr', String(Math.max(1, Math.round(age / 30))));
  const want = new Set(fresh.map(x => histKey(x.vhost, x.name)));
  const r = await api(p + '?' + q.toString());
  for (const row of r.items || []) if (want.has(histKey(row.vhost, row.name))) histSeed(row);
}

// histSeries is what the console has seen of a queue as plot series
// {ready, unacked, publish, deliver}: [[t ms, v], ...], oldest first.
function histSeries(vhost, name) {
  const e = qhist.get(histKey(vhost, name));
  const out = { ready: [], unacked: [], publish: [], deliver: [] };
  if (!e) return out;
  for (let i = 0; i < e.n; i++) {
    const o = i * HIST_FIELDS, t = e.a[o];
    out.ready.push([t, e.a[o + 1]]); out.unacked.push([t, e.a[o + 2]]);
    out.publish.push([t, e.a[o + 3]]); out.deliver.push([t, e.a[o + 4]]);
  }
  return out;
}

// histMerge puts the console's older points before the broker's samples:
// the broker's are kept where they are; the console's fill in before the
// first of them.
function histMerge(server, mine) {
  const first = server.length ? Math.min(...server.map(p => p[0])) : Infinity;
  return mine.filter(p => p[0] < first).concat(server);
}

// --- time range ------------------------------------------------------------------------

// RabbitMQ's UI offers these ranges (last minute to last day); the
// broker's samples cover the last 10 minutes, the console's ring what it
// has seen since it opened.
const RANGES = [['Last minute', 60], ['Last 10 minutes', 600], ['Last hour', 3600], ['Last 8 hours', 28800], ['Last day', 86400]];

function rangeSeconds() {
  const v = Number(localStorage.getItem('railmq.range'));
  return RANGES.some(r => r[1] === v) ? v : 600;
}

// historyQuery is the API's sample parameters for the chosen range: at
// most about 120 samples, no closer than the broker's 5 s.
function historyQuery() {
  const age = rangeSeconds(), incr = Math.max(5, Math.round(age / 120));
  return 'lengths_age=' + age + '&lengths_incr=' + incr + '&msg_rates_age=' + age + '&msg_rates_incr=' + incr;
}

function rangeLabel() { return RANGES.find(r => r[1] === rangeSeconds())[0].toLowerCase(); }

// rangeSelect is the selector; onchange runs after the choice is stored.
function rangeSelect(onchange) {
  const sel = h('select', { id: 'range', title: 'Time range of the plots' }, RANGES.map(([label, s]) => h('option', { value: String(s) }, label)));
  sel.value = String(rangeSeconds());
  sel.addEventListener('change', () => {
    localStorage.setItem('railmq.range', sel.value);
    for (const el of document.querySelectorAll('.range-label')) el.textContent = rangeLabel();
    onchange();
  });
  return sel;
}

// spark draws one series as a small line (the queues list's history
// column); it returns the canvas.
function spark(points, id) {
  const c = h('canvas', { class: 'spark', width: 96, height: 22, id });
  const t1 = Date.now(), t0 = t1 - rangeSeconds() * 1000;
  const pts = points.filter(p => p[0] >= t0);
  c.dataset.points = String(pts.length);
  if (!pts.length) return c;
  const g = c.getContext('2d');
  let max = 0;
  for (const p of pts) max = Math.max(max, p[1]);
  max = max || 1;
  g.strokeStyle = '#ff6a13'; g.lineWidth = 1.5;
  g.beginPath();
  pts.forEach(([t, v], i) => {
    const x = 1 + (t - t0) / (t1 - t0) * 94, y = 21 - v / max * 19;
    if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
  });
  if (pts.length === 1) g.lineTo(95, 21 - pts[0][1] / max * 19);
  g.stroke();
  return c;
}
