// Line charts drawn as SVG, and the sample history they plot. The API gives
// the current rates and counts; each refresh adds one sample per series, so
// a chart shows the last few minutes the page has watched.

import { h } from './dom.js';

const COLORS = ['#0b5cad', '#1b7f3b', '#a35c00', '#7b2cbf', '#b3261e', '#00838f'];
const KEEP = 120;
const store = new Map();

/** Add one sample (an object of series values) to history `key`; returns it. */
export function record(key, values) {
  let hist = store.get(key);
  if (!hist) { hist = []; store.set(key, hist); }
  hist.push({ t: Date.now(), values });
  if (hist.length > KEEP) hist.shift();
  return hist;
}

/**
 * A chart of `hist` (from record) for the series `names` [[key, label]].
 * `unit` is appended to the axis labels.
 */
export function lineChart(title, hist, names, unit = '') {
  const W = 640, H = 180, L = 56, R = 8, T = 8, B = 22;
  let max = 0;
  for (const s of hist) for (const [k] of names) max = Math.max(max, Number(s.values[k]) || 0);
  max = max > 0 ? niceMax(max) : 1;
  const t0 = hist.length ? hist[0].t : 0;
  const t1 = hist.length ? hist[hist.length - 1].t : 1;
  const span = Math.max(t1 - t0, 1);
  const x = (t) => L + ((t - t0) / span) * (W - L - R);
  const y = (v) => T + (1 - v / max) * (H - T - B);
  const svg = h('svg:svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title });
  svg.append(h('svg:title', {}, title));
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    svg.append(h('svg:line', { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: '#d5d9e0' }));
    svg.append(h('svg:text', { x: L - 4, y: y(v) + 4, 'text-anchor': 'end', 'font-size': 11, fill: '#5b6475' },
      fmtAxis(v) + unit));
  }
  const secs = Math.round(span / 1000);
  svg.append(h('svg:text', { x: L, y: H - 4, 'font-size': 11, fill: '#5b6475' }, hist.length > 1 ? `${secs} s ago` : ''));
  svg.append(h('svg:text', { x: W - R, y: H - 4, 'font-size': 11, fill: '#5b6475', 'text-anchor': 'end' }, 'now'));
  names.forEach(([k], i) => {
    const pts = hist.map((s) => `${x(s.t).toFixed(1)},${y(Number(s.values[k]) || 0).toFixed(1)}`);
    if (pts.length === 1) pts.push(`${(W - R).toFixed(1)},${pts[0].split(',')[1]}`);
    if (pts.length) {
      svg.append(h('svg:polyline', { points: pts.join(' '), fill: 'none', stroke: COLORS[i % COLORS.length], 'stroke-width': 2 }));
    }
  });
  const last = hist.length ? hist[hist.length - 1].values : {};
  const legend = h('ul', { class: 'legend' }, names.map(([k, label], i) =>
    h('li', {}, swatch(COLORS[i % COLORS.length]), `${label}: ${fmtAxis(Number(last[k]) || 0)}${unit}`)));
  return h('figure', { class: 'chart' }, h('figcaption', {}, title), svg, legend);
}

function swatch(color) {
  const s = h('svg:svg', { width: 12, height: 12, 'aria-hidden': 'true', class: 'swatch' });
  s.append(h('svg:rect', { width: 12, height: 12, fill: color }));
  return s;
}

function niceMax(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function fmtAxis(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (v >= 1e4) return (v / 1e3).toFixed(0) + 'k';
  return Math.round(v * 10) / 10;
}
