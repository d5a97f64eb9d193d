// A small time-series line chart in SVG: a few series over the same timestamps, a y axis from
// zero to a rounded maximum, and a legend with each series' latest value.

const ns = 'http://www.w3.org/2000/svg';

function s(tag, attrs, text) {
  const el = document.createElementNS(ns, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

// niceMax rounds a maximum up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

// lineChart draws points [{t: ms, values: [..]}] for series [{name, color}].
export function lineChart(title, series, points, unit) {
  const W = 640, H = 220, L = 48, R = 12, T = 12, B = 28;
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': title });
  const max = niceMax(Math.max(0, ...points.flatMap((p) => p.values)));
  const t0 = points.length ? points[0].t : 0;
  const t1 = points.length > 1 ? points[points.length - 1].t : t0 + 1;
  const x = (t) => L + ((t - t0) / (t1 - t0 || 1)) * (W - L - R);
  const y = (v) => H - B - (v / max) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    svg.append(s('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), class: 'grid' }));
    svg.append(s('text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'tick' }, fmt(v)));
  }
  if (points.length > 1) {
    const secs = Math.round((t1 - t0) / 1000);
    const ago = secs >= 120 ? `${Math.round(secs / 60)} min ago` : `${secs} s ago`;
    svg.append(s('text', { x: L, y: H - 8, class: 'tick' }, ago));
    svg.append(s('text', { x: W - R, y: H - 8, 'text-anchor': 'end', class: 'tick' }, 'now'));
  }
  series.forEach((se, i) => {
    if (points.length < 2) return;
    const d = points.map((p, j) => `${j ? 'L' : 'M'}${x(p.t).toFixed(1)},${y(p.values[i]).toFixed(1)}`).join('');
    svg.append(s('path', { d, fill: 'none', stroke: se.color, 'stroke-width': 2 }));
  });
  if (points.length < 2) {
    svg.append(s('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'tick' }, 'collecting samples…'));
  }
  const last = points.length ? points[points.length - 1].values : [];
  const legend = document.createElement('ul');
  legend.className = 'legend';
  series.forEach((se, i) => {
    const li = document.createElement('li');
    const sw = document.createElement('span');
    sw.className = 'swatch';
    sw.style.background = se.color;
    li.append(sw, `${se.name}: ${last.length ? fmt(last[i]) : '–'} ${unit}`);
    legend.append(li);
  });
  const fig = document.createElement('figure');
  fig.className = 'chart-box';
  const cap = document.createElement('figcaption');
  cap.textContent = title;
  fig.append(cap, svg, legend);
  return fig;
}

function fmt(v) {
  if (v >= 1000) return Math.round(v).toLocaleString('en');
  if (v >= 10) return v.toFixed(0);
  return String(+v.toFixed(2));
}
