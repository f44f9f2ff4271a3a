// genworker charts: a tiny SVG bar-chart drawer for the dashboard, no third-party code. Every chart is
// an <svg role="img"> with a text summary (aria-label) and its numbers in a table under "Show the numbers".
"use strict";

const Charts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const W = 640, H = 220, LEFT = 56, RIGHT = 8, TOP = 10, BOTTOM = 34;

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  }

  function nice(max) {  // a round axis maximum at or above `max`
    if (max <= 0) return 1;
    const step = 10 ** Math.floor(Math.log10(max));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * step >= max) return m * step;
    return 10 * step;
  }

  function short(n) {
    if (n >= 1e6) return `${+(n / 1e6).toFixed(1)}M`;
    if (n >= 1e3) return `${+(n / 1e3).toFixed(1)}k`;
    return `${+n.toFixed(n < 1 && n > 0 ? 3 : 1)}`;
  }

  // labels: x labels; series: [{name, values, cls}]; stacked: stack the series, else side by side.
  function bars({ title, labels, series, stacked = false, unit = "", format = short }) {
    const totals = labels.map((_, i) => stacked
      ? series.reduce((s, x) => s + (x.values[i] || 0), 0)
      : Math.max(0, ...series.map((x) => x.values[i] || 0)));
    const top = nice(Math.max(0, ...totals));
    const plotW = W - LEFT - RIGHT, plotH = H - TOP - BOTTOM;
    const slot = plotW / Math.max(1, labels.length);
    const barW = stacked ? slot * 0.7 : (slot * 0.8) / Math.max(1, series.length);
    const y = (v) => TOP + plotH - (v / top) * plotH;
    const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", preserveAspectRatio: "xMidYMid meet" });
    for (const f of [0, 0.5, 1]) {
      const v = top * f;
      chart.append(svg("line", { x1: LEFT, x2: W - RIGHT, y1: y(v), y2: y(v), class: "grid-line" }),
        svg("text", { x: LEFT - 6, y: y(v) + 4, class: "axis", "text-anchor": "end" }, format(v) + unit));
    }
    const every = Math.ceil(labels.length / 8);
    labels.forEach((label, i) => {
      let base = 0;
      series.forEach((s, k) => {
        const v = s.values[i] || 0;
        const x = LEFT + slot * i + (stacked ? slot * 0.15 : slot * 0.1 + barW * k);
        const from = stacked ? base : 0;
        if (v > 0) {
          chart.append(svg("rect", { x, y: y(from + v), width: Math.max(1, barW - 1), height: Math.max(1, y(from) - y(from + v)),
            class: `bar ${s.cls || `s${k}`}` }, svg("title", {}, `${label} · ${s.name}: ${format(v)}${unit}`)));
        }
        if (stacked) base += v;
      });
      if (i % every === 0) {
        chart.append(svg("text", { x: LEFT + slot * i + slot / 2, y: H - BOTTOM + 16, class: "axis", "text-anchor": "middle" }, label));
      }
    });
    const sums = series.map((s) => `${s.name} ${format(s.values.reduce((a, b) => a + (b || 0), 0))}${unit}`);
    chart.setAttribute("aria-label", `${title}: ${sums.join(", ")} over ${labels.length} days`);
    const legend = el("ul", { class: "legend" }, series.map((s, k) =>
      el("li", {}, el("span", { class: `swatch ${s.cls || `s${k}`}`, "aria-hidden": "true" }), s.name)));
    const numbers = el("details", { class: "numbers" }, el("summary", { text: "Show the numbers" }),
      el("table", {}, el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "Day" }),
        series.map((s) => el("th", { scope: "col", text: s.name })))),
      el("tbody", {}, labels.map((label, i) => el("tr", {}, el("td", { "data-label": "Day", text: label }),
        series.map((s) => el("td", { "data-label": s.name, text: `${format(s.values[i] || 0)}${unit}` })))))));
    return el("figure", { class: "chart-box" }, el("figcaption", { text: title }), chart, legend, numbers);
  }

  return { bars, short };
})();
