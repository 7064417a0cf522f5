/* PocketMQ dashboard: line charts drawn as SVG, no library.
 *
 * lineChart(series, {title, unit, height}) -> <figure> holding an <svg class="chart">.
 * series: {name: [[t_ms, value], ...]}. The svg carries data-points (how many points it
 * drew in all); each series is one <polyline> and each point a <circle class="pt">
 * (only the last point of long series, to keep the page light).
 */
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const CHART_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                      "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];

function svgEl(tag, attrs) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  return el;
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function clock(t) {
  const d = new Date(t);
  return d.toTimeString().slice(0, 8);
}

function lineChart(series, opts) {
  opts = opts || {};
  const W = 720, H = opts.height || 220, L = 56, R = 12, T = 12, B = 28;
  const names = Object.keys(series);
  let tMin = Infinity, tMax = -Infinity, vMax = 0, total = 0;
  for (const name of names) {
    for (const [t, v] of series[name]) {
      tMin = Math.min(tMin, t); tMax = Math.max(tMax, t); vMax = Math.max(vMax, v); total++;
    }
  }
  const fig = document.createElement("figure");
  fig.className = "chart-box";
  if (opts.title) {
    const cap = document.createElement("figcaption");
    cap.textContent = opts.title;
    fig.appendChild(cap);
  }
  const svg = svgEl("svg", {viewBox: `0 0 ${W} ${H}`, class: "chart", "data-points": total,
                            role: "img", "aria-label": opts.title || "chart"});
  fig.appendChild(svg);
  if (!total) {
    const empty = svgEl("text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "muted"});
    empty.textContent = opts.empty || "no samples yet: the dashboard samples every few seconds";
    svg.appendChild(empty);
    return fig;
  }
  if (tMax === tMin) { tMin -= 5000; tMax += 5000; }
  const top = niceMax(vMax);
  const x = t => L + (t - tMin) / (tMax - tMin) * (W - L - R);
  const y = v => H - B - v / top * (H - T - B);
  for (let i = 0; i <= 4; i++) {                       // grid and value labels
    const v = top * i / 4, yy = y(v);
    svg.appendChild(svgEl("line", {x1: L, x2: W - R, y1: yy, y2: yy, class: "grid"}));
    const label = svgEl("text", {x: L - 6, y: yy + 4, "text-anchor": "end", class: "axis"});
    label.textContent = (Math.round(v * 100) / 100) + (opts.unit ? "" : "");
    svg.appendChild(label);
  }
  for (const [t, anchor] of [[tMin, "start"], [(tMin + tMax) / 2, "middle"], [tMax, "end"]]) {
    const label = svgEl("text", {x: x(t), y: H - 8, "text-anchor": anchor, class: "axis"});
    label.textContent = clock(t);
    svg.appendChild(label);
  }
  const legend = document.createElement("div");
  legend.className = "legend";
  names.forEach((name, i) => {
    const color = CHART_COLORS[i % CHART_COLORS.length];
    const pts = series[name];
    const line = svgEl("polyline", {fill: "none", stroke: color, "stroke-width": 1.8,
                                    "data-series": name,
                                    points: pts.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ")});
    svg.appendChild(line);
    const shown = pts.length > 60 ? pts.slice(-1) : pts;
    for (const [t, v] of shown) {
      const dot = svgEl("circle", {cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2.6,
                                   fill: color, class: "pt"});
      const tip = svgEl("title");
      tip.textContent = `${name}: ${v}${opts.unit ? " " + opts.unit : ""} at ${clock(t)}`;
      dot.appendChild(tip);
      svg.appendChild(dot);
    }
    const item = document.createElement("span");
    const swatch = document.createElement("i");
    swatch.style.background = color;
    item.appendChild(swatch);
    const last = pts.length ? pts[pts.length - 1][1] : "";
    item.appendChild(document.createTextNode(`${name} ${last}${opts.unit ? " " + opts.unit : ""}`));
    legend.appendChild(item);
  });
  fig.appendChild(legend);
  return fig;
}
