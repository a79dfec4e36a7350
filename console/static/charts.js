// Charts for the mcpcancel console, drawn as SVG from the "stats" events
// of the calls page's event stream (console/stats.go says what they hold).
// No library: lines, stacked bars, histograms and horizontal bars, each a
// few lines. Every chart records what it drew in data-total (the sum of
// its values) and data-series, so a test can tell an empty chart from a
// drawn one.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const W = 460, H = 170, M = { left: 38, right: 8, top: 8, bottom: 24 };
const COLORS = {
  completed: "#16a34a", tool_error: "#ca8a04", cancelled: "#ea580c", failed: "#dc2626", cancel_lost: "#7c3aed",
  client: "#2563eb", timeout: "#0891b2", disconnect: "#64748b", shutdown: "#475569", operator: "#db2777",
  worker_lost: "#dc2626", tool: "#ca8a04", none: "#16a34a", in_flight: "#2563eb",
};
const PALETTE = ["#2563eb", "#16a34a", "#ea580c", "#7c3aed", "#0891b2", "#db2777", "#ca8a04", "#475569"];

function colorOf(name, i) { return COLORS[name] || PALETTE[i % PALETTE.length]; }

function el(name, attrs, text) {
  const e = document.createElementNS(SVGNS, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// frame empties a chart's svg and draws its axes for values up to top.
function frame(fig, top, xLabels) {
  const svg = fig.querySelector("svg");
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const ph = H - M.top - M.bottom;
  for (const f of [0, 0.5, 1]) {
    const y = M.top + ph * (1 - f);
    svg.append(el("line", { x1: M.left, x2: W - M.right, y1: y, y2: y, class: "grid" }));
    svg.append(el("text", { x: M.left - 4, y: y + 4, class: "tick", "text-anchor": "end" }, fmtNum(top * f)));
  }
  const pw = W - M.left - M.right;
  xLabels.forEach(([f, text]) => {
    const anchor = f === 0 ? "start" : f === 1 ? "end" : "middle";
    svg.append(el("text", { x: M.left + pw * f, y: H - 6, class: "tick", "text-anchor": anchor }, text));
  });
  return { svg, pw, ph, y: (v) => M.top + ph * (1 - v / top) };
}

function fmtNum(v) {
  if (v >= 100 || v === 0) return String(Math.round(v));
  return v >= 10 ? v.toFixed(0) : v.toFixed(v >= 1 ? 1 : 2);
}

function fmtSecs(s) {
  if (s < 1) return Math.round(s * 1000) + "ms";
  return s < 60 ? s + "s" : s / 60 + "m";
}

// niceTop rounds a maximum up to 1, 2 or 5 times a power of ten.
function niceTop(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  return [1, 2, 5, 10].map((m) => m * p).find((t) => t >= v);
}

function timeLabels(st, n) {
  const label = (i) => new Date(st.start + i * st.step_ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  return [[0, label(0)], [0.5, label(n / 2)], [1, label(n)]];
}

function legend(fig, names) {
  const box = fig.querySelector(".legend");
  box.replaceChildren();
  names.forEach((name, i) => {
    const s = document.createElement("span");
    s.innerHTML = `<i style="background:${colorOf(name, i)}"></i>`;
    s.append(name);
    box.append(s);
  });
}

function mark(fig, total, series) {
  fig.dataset.total = String(total);
  fig.dataset.series = series.join(",");
  fig.classList.toggle("nodata", total === 0);
}

// line draws each series as a line over the buckets.
function line(fig, st, series) {
  const names = Object.keys(series);
  const n = series[names[0]].length;
  const all = names.flatMap((k) => series[k]);
  const c = frame(fig, niceTop(Math.max(...all)), timeLabels(st, n));
  names.forEach((name, i) => {
    const pts = series[name].map((v, j) => `${M.left + (c.pw * (j + 1)) / n},${c.y(v)}`);
    c.svg.append(el("polyline", { points: pts.join(" "), fill: "none", stroke: colorOf(name, i), "stroke-width": 2, class: "series" }));
  });
  legend(fig, names);
  mark(fig, all.reduce((a, b) => a + b, 0), names);
}

// stacked draws the series as stacked bars per bucket, as a rate per second.
function stacked(fig, st, series) {
  const names = Object.keys(series).sort();
  const len = names.length ? series[names[0]].length : st.in_flight.length;
  const perSec = (v) => v / (st.step_ms / 1000);
  const sums = Array.from({ length: len }, (_, j) => names.reduce((a, k) => a + perSec(series[k][j]), 0));
  const c = frame(fig, niceTop(Math.max(0, ...sums)), timeLabels(st, len));
  const bw = c.pw / len;
  for (let j = 0; j < len; j++) {
    let acc = 0;
    names.forEach((name, i) => {
      const v = perSec(series[name][j]);
      if (!v) return;
      c.svg.append(el("rect", { x: M.left + bw * j + 0.5, width: Math.max(1, bw - 1), y: c.y(acc + v), height: c.y(acc) - c.y(acc + v), fill: colorOf(name, i), class: "series" }));
      acc += v;
    });
  }
  legend(fig, names);
  mark(fig, names.reduce((a, k) => a + series[k].reduce((x, y) => x + y, 0), 0), names);
}

// histogram draws counts per latency bucket.
function histogram(fig, h, color) {
  const counts = h.counts;
  const c = frame(fig, niceTop(Math.max(...counts)), []);
  const bw = c.pw / counts.length;
  counts.forEach((v, j) => {
    if (v) c.svg.append(el("rect", { x: M.left + bw * j + 1, width: bw - 2, y: c.y(v), height: c.y(0) - c.y(v), fill: color, class: "series" }));
    const label = j < h.bounds.length ? "≤" + fmtSecs(h.bounds[j]) : ">" + fmtSecs(h.bounds[h.bounds.length - 1]);
    if (j % 3 === 0) {
      c.svg.append(el("text", { x: M.left + bw * (j + 0.5), y: H - 6, class: "tick", "text-anchor": "middle" }, label));
    }
  });
  const total = counts.reduce((a, b) => a + b, 0);
  fig.querySelector(".legend").textContent = total + " calls";
  mark(fig, total, ["count"]);
}

// hbars draws one horizontal bar per worker: its running handlers.
function hbars(fig, workers) {
  const svg = fig.querySelector("svg");
  svg.replaceChildren();
  const rows = Math.max(1, workers.length);
  const h = Math.max(H, M.top + M.bottom + rows * 22);
  svg.setAttribute("viewBox", `0 0 ${W} ${h}`);
  const top = niceTop(Math.max(1, ...workers.map((w) => Math.max(w.running, w.capacity || 0))));
  const left = 110, pw = W - left - 30;
  workers.forEach((w, i) => {
    const y = M.top + i * 22;
    svg.append(el("text", { x: left - 6, y: y + 14, class: "tick", "text-anchor": "end" }, w.name + (w.draining ? " (draining)" : "")));
    svg.append(el("rect", { x: left, y: y + 2, width: pw, height: 16, class: "track" }));
    if (w.running) svg.append(el("rect", { x: left, y: y + 2, width: (pw * w.running) / top, height: 16, fill: PALETTE[0], class: "series" }));
    svg.append(el("text", { x: left + pw + 4, y: y + 14, class: "tick" }, String(w.running)));
  });
  fig.querySelector(".legend").textContent = workers.length ? `scale 0–${top} running handlers` : "no worker attached";
  mark(fig, workers.reduce((a, w) => a + w.running, 0), workers.map((w) => w.name));
}

function drawCharts(st) {
  const fig = (name) => document.querySelector(`figure[data-chart="${name}"]`);
  if (!fig("in_flight")) return;
  line(fig("in_flight"), st, { in_flight: st.in_flight });
  stacked(fig("outcomes"), st, st.outcomes);
  stacked(fig("initiators"), st, st.initiators);
  histogram(fig("stop_latency"), st.stop_latency, "#ea580c");
  histogram(fig("duration"), st.duration, "#2563eb");
  hbars(fig("workers"), st.workers || []);
  stacked(fig("cancel_lost"), st, { cancel_lost: st.outcomes.cancel_lost || st.in_flight.map(() => 0) });
  const note = document.getElementById("charts-note");
  if (note) note.textContent = `${st.records} audit records in the last ${Math.round((st.in_flight.length * st.step_ms) / 60000)} minutes` + (st.truncated ? " (the newest left out: too many)" : "");
}

window.mcpcancelCharts = { draw: drawCharts };
