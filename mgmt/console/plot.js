// A small canvas line plot: time on x, one or more series on y, with a
// legend. railmq's own instead of a charting library, so that the console
// needs no build step and nothing but the broker serves it.
'use strict';

const PLOT_COLORS = ['#ff6a13', '#2b6cb0', '#1f9d55', '#9f3fbf', '#d8342c', '#4a5568'];

// drawPlot draws series [{name, points: [[t ms, v], ...]}] on canvas over
// the last spanMs up to now. It returns how many points it drew.
function drawPlot(canvas, series, opts) {
  opts = opts || {};
  // Up to the last 10 minutes: as far back as the samples go, at least one.
  const now = opts.now || Date.now();
  let first = now;
  for (const s of series) for (const [t] of s.points) if (t < first) first = t;
  const span = Math.min(opts.spanMs || 10 * 60 * 1000, Math.max(60 * 1000, now - first));
  const dpr = window.devicePixelRatio || 1;
  const cssW = canvas.clientWidth || 300, cssH = canvas.clientHeight || 200;
  canvas.width = Math.round(cssW * dpr);
  canvas.height = Math.round(cssH * dpr);
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, cssW, cssH);
  const t0 = now - span;
  let ymax = 0, drawn = 0;
  for (const s of series) for (const [t, v] of s.points) if (t >= t0 && v > ymax) ymax = v;
  ymax = niceMax(ymax);
  // The legend first: its rows set the plot's top.
  g.font = '11px system-ui, sans-serif';
  const legend = [];
  let lx = 48, ly = 9;
  series.forEach((s, i) => {
    const last = s.points.length ? s.points.reduce((a, b) => (b[0] > a[0] ? b : a))[1] : 0;
    const label = s.name + ' ' + fmtShort(last) + (opts.unit || '');
    const w = g.measureText(label).width + 30;
    if (lx + w > cssW && lx > 48) { lx = 48; ly += 16; }
    legend.push([label, lx, ly, i]);
    lx += w;
  });
  const left = 48, right = 14, top = ly + 13, bottom = 20;
  const w = cssW - left - right, h = cssH - top - bottom;
  const x = t => left + (t - t0) / span * w;
  const y = v => top + h - v / ymax * h;
  g.font = '11px system-ui, sans-serif';
  g.strokeStyle = '#e2e5eb'; g.fillStyle = '#677085'; g.lineWidth = 1;
  g.textAlign = 'right'; g.textBaseline = 'middle';
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4, yy = Math.round(y(v)) + 0.5;
    g.beginPath(); g.moveTo(left, yy); g.lineTo(left + w, yy); g.stroke();
    g.fillText(fmtShort(v) + (opts.unit || ''), left - 6, yy);
  }
  g.textBaseline = 'top';
  const step = span <= 120000 ? 15000 : 60000 * Math.max(1, Math.round(span / 60000 / 5));
  for (let d = 0; d <= span; d += step) {
    g.textAlign = d === 0 ? 'right' : 'center';
    g.fillText(d === 0 ? 'now' : '-' + (step < 60000 ? d / 1000 + 's' : d / 60000 + 'm'), x(now - d), top + h + 5);
  }
  series.forEach((s, i) => {
    const pts = s.points.filter(p => p[0] >= t0).sort((a, b) => a[0] - b[0]);
    g.strokeStyle = PLOT_COLORS[i % PLOT_COLORS.length]; g.lineWidth = 2;
    g.beginPath();
    pts.forEach(([t, v], j) => { if (j === 0) g.moveTo(x(t), y(v)); else g.lineTo(x(t), y(v)); });
    g.stroke();
    if (pts.length === 1) { g.fillStyle = g.strokeStyle; g.fillRect(x(pts[0][0]) - 2, y(pts[0][1]) - 2, 4, 4); }
    drawn += pts.length;
  });
  // The legend, with each series' latest value.
  g.textAlign = 'left'; g.textBaseline = 'middle';
  for (const [label, lx, ly, i] of legend) {
    g.fillStyle = PLOT_COLORS[i % PLOT_COLORS.length]; g.fillRect(lx, ly - 2, 10, 3);
    g.fillStyle = '#1d2430'; g.fillText(label, lx + 14, ly);
  }
  canvas.dataset.points = String(drawn);
  return drawn;
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function fmtShort(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(1).replace(/\.0$/, '') + 'G';
  if (a >= 1e6) return (v / 1e6).toFixed(1).replace(/\.0$/, '') + 'M';
  if (a >= 1e4) return (v / 1e3).toFixed(1).replace(/\.0$/, '') + 'k';
  if (a >= 100 || v === Math.round(v)) return String(Math.round(v));
  return v.toFixed(a >= 10 ? 1 : 2);
}

// rateSeries turns samples of a cumulative count, newest first as the
// API gives them, into per-second rates between successive samples.
function rateSeries(samples) {
  const s = (samples || []).slice().sort((a, b) => a.timestamp - b.timestamp);
  const out = [];
  for (let i = 1; i < s.length; i++) {
    const dt = (s[i].timestamp - s[i - 1].timestamp) / 1000;
    if (dt > 0) out.push([s[i].timestamp, Math.max(0, (s[i].sample - s[i - 1].sample) / dt)]);
  }
  return out;
}

function valueSeries(samples) {
  return (samples || []).map(p => [p.timestamp, p.sample]);
}
