// The playground's page. It only draws: every number and every point of
// every line comes from /api/run, which runs ratebucket's Go simulator.
// Times in the API are nanoseconds; the URL holds zoom in seconds.
"use strict";

const NS = "http://www.w3.org/2000/svg";
const SEC = 1e9;
const ALGOS = {
  token: { label: "Token bucket", color: "#0072B2", shape: "circle" },
  fixed: { label: "Fixed window", color: "#D55E00", shape: "square" },
  sliding: { label: "Sliding window", color: "#CC79A7", shape: "triangle" },
};
// The landing view: the boundary spike's first two and a half minutes, where
// the fixed window's spike at 1:00 and the token bucket's refill both show.
const LANDING = "?scenario=boundary-spike&from=0&to=150";
const MAX_MARKS = 600; // more requests in view than this are drawn binned per pixel

const $ = (sel) => document.querySelector(sel);
const form = $("#controls");
let data = null; // the last /api/run answer
let view = { from: null, to: null }; // zoom, in ns; null: the whole run
let renders = 0;

function el(name, attrs = {}, parent = null, text = null) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function html(name, attrs = {}, parent = null, text = null) {
  const e = document.createElement(name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

// fmtDur formats nanoseconds for people: 1m30s, 59.5s, 490ms, 12µs.
function fmtDur(ns) {
  const a = Math.abs(ns);
  if (a === 0) return "0";
  if (a >= 60 * SEC) {
    const m = Math.floor(ns / (60 * SEC));
    const s = +((ns - m * 60 * SEC) / SEC).toFixed(3);
    return s ? `${m}m${s}s` : `${m}m`;
  }
  if (a >= SEC) return `${+(ns / SEC).toFixed(3)}s`;
  if (a >= 1e6) return `${+(ns / 1e6).toFixed(3)}ms`;
  return `${+(ns / 1e3).toFixed(0)}µs`;
}

// ---- the form and the URL ----

function algosChecked() {
  return [...form.querySelectorAll("input[name=algo]:checked")].map((i) => i.value);
}

// queryFromForm writes the form (and the zoom) as the view's query string.
function queryFromForm(withZoom) {
  const q = new URLSearchParams();
  const sc = $("#scenario").value;
  q.set("scenario", sc);
  if (sc === "custom") {
    for (const line of $("#clients").value.split("\n")) if (line.trim()) q.append("client", line.trim());
  }
  const cost = $("#cost").value.trim();
  if (cost && !(sc === "custom" && cost === "1")) q.set("cost", cost);
  for (const id of ["capacity", "rate", "skew", "duration"]) if ($("#" + id).value.trim()) q.set(id, $("#" + id).value.trim());
  const algos = algosChecked();
  if (algos.length && algos.length < 3) q.set("algos", algos.join(","));
  const topo = form.querySelector("input[name=topology]:checked").value;
  if (topo !== "shared") q.set("topology", topo);
  if ($("#instances").value && $("#instances").value !== "3") q.set("instances", $("#instances").value);
  if ($("#seed").value && $("#seed").value !== "1") q.set("seed", $("#seed").value);
  if (withZoom && view.from !== null) {
    q.set("from", +(view.from / SEC).toFixed(6));
    q.set("to", +(view.to / SEC).toFixed(6));
  }
  return q;
}

// formFromQuery sets the form (and the zoom) from a query string.
function formFromQuery(q) {
  const sc = q.get("scenario") || "boundary-spike";
  if (![...$("#scenario").options].some((o) => o.value === sc)) {
    html("option", { value: sc }, $("#scenario"), sc + " (unknown)"); // the API says which exist
  }
  $("#scenario").value = sc;
  if (q.getAll("client").length) $("#clients").value = q.getAll("client").join("\n");
  $("#cost").value = q.get("cost") || "";
  for (const id of ["capacity", "rate", "skew", "duration"]) $("#" + id).value = q.get(id) || "";
  const algos = (q.get("algos") || "token,fixed,sliding").split(",");
  for (const i of form.querySelectorAll("input[name=algo]")) i.checked = algos.includes(i.value);
  const topo = q.get("topology") || "shared";
  for (const i of form.querySelectorAll("input[name=topology]")) i.checked = i.value === topo;
  $("#instances").value = q.get("instances") || "3";
  $("#seed").value = q.get("seed") || "1";
  const from = parseFloat(q.get("from")), to = parseFloat(q.get("to"));
  view = Number.isFinite(from) && Number.isFinite(to) && to > from ? { from: from * SEC, to: to * SEC } : { from: null, to: null };
  showCustom();
}

function showCustom() {
  const custom = $("#scenario").value === "custom";
  $("#custom").hidden = !custom;
  document.body.classList.toggle("custom", custom);
  const opt = $("#scenario").selectedOptions[0];
  $("#scenario-summary").textContent = opt ? opt.dataset.summary || "" : "";
}

function pushView(replace) {
  const url = "?" + queryFromForm(true).toString();
  if (url === location.search) return;
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
}

// ---- running ----

let pending = null;
async function run() {
  const q = queryFromForm(false);
  if (!algosChecked().length) {
    showError("Choose at least one algorithm.");
    return;
  }
  $("#status").textContent = "Running the simulator…";
  document.body.dataset.state = "running";
  if (pending) pending.abort();
  pending = new AbortController();
  const api = "api/run?" + q.toString();
  $("#api-link").href = api;
  try {
    const resp = await fetch(api, { signal: pending.signal });
    const body = await resp.json();
    if (!resp.ok) throw new Error(body.error || resp.statusText);
    data = body;
    showError(null);
    render();
  } catch (err) {
    if (err.name === "AbortError") return;
    showError(err.message);
    document.body.dataset.state = "error";
  }
}

function showError(msg) {
  const e = $("#error");
  e.hidden = !msg;
  e.textContent = msg || "";
  if (msg) $("#status").textContent = "The simulator refused this view.";
}

// ---- drawing ----

function duration() { return data.runs[0].timeline.duration; }
function span() {
  const d = duration();
  let from = view.from ?? 0, to = view.to ?? d;
  from = Math.max(0, Math.min(from, d));
  to = Math.max(from + 1000, Math.min(to, d)); // at least 1µs wide
  return [from, to];
}

function render() {
  const [from, to] = span();
  $("#from").value = +(from / SEC).toFixed(6);
  $("#to").value = +(to / SEC).toFixed(6);
  const tl0 = data.runs[0].timeline;
  const who = tl0.clients.join(", ");
  $("#status").textContent = `${data.scenario}: ${data.summary}. Policy ${data.policy}. Following key ${tl0.key}` +
    (who ? ` (requests from ${who})` : "") + `, ${fmtDur(from)} to ${fmtDur(to)} of ${fmtDur(tl0.duration)}.`;
  summaryTable();
  const charts = $("#charts");
  charts.replaceChildren();
  const width = Math.max(560, charts.clientWidth || 900);
  for (const run of data.runs) {
    charts.appendChild(chart(run, from, to, width, false));
    // A law broken in an instant is a sliver at this zoom: an inset shows it.
    const l = run.timeline.law, z = run.timeline.zoom;
    if (!l.holds && l.to - l.from < (to - from) / 20 && l.to > from && l.from < to) {
      charts.appendChild(chart(run, z.from, z.to, width - 20, true));
    }
  }
  lawChart(width);
  renders++;
  document.body.dataset.renders = String(renders);
  document.body.dataset.state = "ready";
}


function lawWords(tl) {
  const l = tl.law;
  if (!l.admitted) return "nothing admitted";
  const len = fmtDur(l.to - l.from);
  if (l.holds) return `law holds: at most ${l.admitted} of ${l.bound} in any ${len}`;
  return `law BROKEN: ${l.admitted} admitted in ${len} from ${fmtDur(l.from)}, bound ${l.bound} (${(l.admitted / l.bound).toFixed(2)}×)`;
}

function summaryTable() {
  const body = $("#summary tbody");
  body.replaceChildren();
  for (const run of data.runs) {
    const tl = run.timeline, l = tl.law, t = run.report.total;
    const tr = html("tr", { "data-algo": run.short }, body);
    html("th", { scope: "row" }, tr, ALGOS[run.short].label);
    html("td", { "data-k": "admitted" }, tr, String(tl.admitted));
    html("td", { "data-k": "denied" }, tr, String(tl.denied));
    html("td", { "data-k": "law", class: l.holds ? "" : "broken" }, tr, l.holds ? "holds" : "BROKEN");
    html("td", { "data-k": "interval" }, tr, l.admitted ? `${fmtDur(l.from)} – ${fmtDur(l.to)}` : "—");
    html("td", { "data-k": "in-interval" }, tr, String(l.admitted));
    html("td", { "data-k": "bound" }, tr, String(l.bound));
    html("td", { "data-k": "total" }, tr, `${t.admitted} / ${t.denied}`);
  }
}

// niceStep returns 1, 2 or 5 times a power of ten (in ns) giving about n
// ticks over a span.
function niceStep(spanNs, n) {
  const raw = spanNs / n;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

// timeStep is niceStep for a time axis: past a second, steps a clock
// reader expects (15 s, 30 s, 1 min, 2 min, 5 min, …).
function timeStep(spanNs, n) {
  const raw = spanNs / n;
  if (raw <= SEC) return niceStep(spanNs, n);
  for (const s of [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600]) if (s * SEC >= raw) return s * SEC;
  return Math.ceil(raw / (3600 * SEC)) * 3600 * SEC;
}

function lowerBound(arr, at) { // first index with arr[i].at >= at
  let lo = 0, hi = arr.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (arr[mid].at < at) lo = mid + 1; else hi = mid;
  }
  return lo;
}

function requestTitle(tl, q) {
  const who = tl.clients[q.client] ?? "?";
  const head = `${fmtDur(q.at)} · ${who} via instance ${q.instance} · cost ${q.cost}`;
  return q.allowed ? `${head} · admitted, ${q.remaining} left` : `${head} · denied, retry after ${fmtDur(q.retry_after || 0)}`;
}

// chart draws one run over [from, to]; an inset is a second, lower drawing
// of a run, zoomed on its worst interval, with no table of its own.
function chart(run, from, to, W, inset) {
  const tl = run.timeline, a = ALGOS[run.short];
  // With token leases the instances' lines are their batches, spent
  // against the shared bucket's line.
  const leased = run.report.topology === "leased";
  const ML = 48, MR = 28, TOP = 16, H = inset ? 80 : 120, S = 36, PW = W - ML - MR;
  const HT = TOP + H + S + 22;
  const box = html("figure", { class: inset ? "inset" : "chart", "data-algo": run.short });
  const h3 = html("h3", {}, box, a.label + (inset ? `, zoomed on ${fmtDur(from)} – ${fmtDur(to)} ` : " "));
  html("span", { class: "verdict" + (tl.law.holds ? "" : " broken") }, h3, "— " + lawWords(tl));
  const svg = el("svg", { width: W, height: HT, viewBox: `0 0 ${W} ${HT}`, role: "img",
    "aria-label": inset ? `${a.label}, zoomed on ${fmtDur(from)} to ${fmtDur(to)}: ${lawWords(tl)}.`
      : `${a.label}: ${tl.admitted} admitted and ${tl.denied} denied at ${tl.key}; ${lawWords(tl)}.` }, box);
  const id = run.short + (inset ? "-inset" : "");
  const defs = el("defs", {}, svg);
  const pat = el("pattern", { id: "hatch-" + id, width: 8, height: 8, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" }, defs);
  el("rect", { width: 8, height: 8, fill: "#E69F00", "fill-opacity": 0.18 }, pat);
  el("line", { x1: 0, y1: 0, x2: 0, y2: 8, stroke: "#E69F00", "stroke-width": 2, "stroke-opacity": 0.7 }, pat);
  const clip = el("clipPath", { id: "clip-" + id }, defs);
  el("rect", { x: ML, y: TOP - 2, width: PW, height: H + S + 4 }, clip);
  const x = (t) => ML + (t - from) / (to - from) * PW;
  const cap = tl.capacity;
  // A bucket in debt (a settled cost above its estimate) holds less than
  // nothing: the scale then reaches below zero, to the deepest debt drawn.
  const low = Math.min(0, ...tl.levels.flatMap((lv) => lv.points.map((p) => p.tokens)));
  const y = (v) => TOP + H - (v - low) / (cap - low) * H;
  const g = el("g", { "clip-path": `url(#clip-${id})` }, svg);

  // The worst interval, when the law is broken.
  const l = tl.law;
  if (!l.holds && l.to >= from && l.from <= to) {
    let x0 = x(l.from), x1 = x(l.to);
    if (x1 - x0 < 4) { const c = (x0 + x1) / 2; x0 = c - 2; x1 = c + 2; }
    const r = el("rect", { class: "worst", x: x0, y: TOP, width: x1 - x0, height: H + S, fill: `url(#hatch-${id})`,
      "data-from": l.from, "data-to": l.to }, g);
    el("title", {}, r, lawWords(tl));
    const mid = Math.min(Math.max((x0 + x1) / 2, ML + 120), ML + PW - 120);
    el("text", { class: "worst-label", x: mid, y: TOP + 30, "text-anchor": "middle" }, g,
      `${l.admitted} admitted in ${fmtDur(l.to - l.from)}: bound ${l.bound}`);
  }

  // Window boundaries and counts (the counts above the level lines).
  const counts = el("g", {});
  if (tl.window > 0 && (to - from) / tl.window <= 120) {
    // Each store's own boundaries, as the API places them: an instance's
    // store cuts windows on its skewed clock.
    const own = tl.levels.filter((lv) => lv.instance >= 0);
    const stores = own.length ? own : [{ instance: -1, window_start: tl.window_start, skew: 0 }];
    // Labelled "i0", "i1" … when the instances' boundaries stand apart.
    const phases = own.map((lv) => lv.window_start % tl.window).sort((a, b) => a - b);
    const gap = Math.min(...phases.map((p, k) => (k ? p - phases[k - 1] : p + tl.window - phases[phases.length - 1])));
    const labelled = own.length > 1 && gap / (to - from) * PW >= 18;
    for (const lv of stores) {
      const start = lv.window_start;
      const first = start + Math.max(Math.ceil((from - start) / tl.window), 0) * tl.window;
      for (let t = first; t <= to; t += tl.window) {
        const ln = el("line", { class: "boundary", x1: x(t), x2: x(t), y1: TOP, y2: TOP + H + S,
          "data-instance": lv.instance, "data-at": t }, g);
        if (lv.instance < 0) continue;
        el("title", {}, ln, `instance ${lv.instance}'s window boundary (its clock is ${fmtDur(lv.skew)} off)`);
        if (labelled) el("text", { class: "boundary-label", x: x(t) + 2, y: TOP + H + S - 3 }, g, `i${lv.instance}`);
      }
    }
    for (const w of tl.windows || []) {
      if (w.to <= from || w.from >= to || !w.admitted) continue;
      const wx0 = x(Math.max(w.from, from)), wx1 = x(Math.min(w.to, to));
      if (wx1 - wx0 < 28) continue;
      el("text", { x: (wx0 + wx1) / 2, y: TOP + 11, "text-anchor": "middle", class: "window-count" }, counts,
        wx1 - wx0 > 110 ? `${w.admitted} in window` : String(w.admitted));
    }
  }

  // The room left, a line per store.
  tl.levels.forEach((lv, i) => {
    const pts = lv.points;
    const lo = Math.max(lowerBound(pts, from) - 1, 0), hi = Math.min(lowerBound(pts, to) + 1, pts.length);
    let d = "";
    for (let k = lo; k < hi; k++) d += (k === lo ? "M" : "L") + x(pts[k].at).toFixed(2) + " " + y(pts[k].tokens).toFixed(2);
    const p = el("path", { class: "level", d, "stroke-dasharray": DASHES[i % DASHES.length],
      "data-instance": lv.instance }, g);
    el("title", {}, p, levelName(lv, leased));
  });
  g.appendChild(counts);

  // Requests: one mark each, or a tick per pixel column when too many.
  const reqs = tl.requests;
  const lo = lowerBound(reqs, from), hi = lowerBound(reqs, to);
  const ya = TOP + H + 4, yd = TOP + H + 21;
  if (hi - lo <= MAX_MARKS) {
    for (let k = lo; k < hi; k++) {
      const q = reqs[k], cx = x(q.at);
      const m = q.allowed
        ? el("path", { class: "mark admitted", d: `M${cx.toFixed(2)} ${ya} l4.5 8 h-9z` }, g)
        : el("path", { class: "mark denied", d: `M${(cx - 3.5).toFixed(2)} ${yd} l7 7 m0 -7 l-7 7` }, g);
      el("title", {}, m, requestTitle(tl, q));
    }
  } else {
    const cols = new Map();
    for (let k = lo; k < hi; k++) {
      const c = Math.min(Math.floor(x(reqs[k].at)), ML + PW - 1);
      const b = cols.get(c) || { a: 0, d: 0 };
      if (reqs[k].allowed) b.a++; else b.d++;
      cols.set(c, b);
    }
    let top = 1;
    for (const b of cols.values()) top = Math.max(top, b.a, b.d);
    for (const [c, b] of cols) {
      for (const [n, base, cls] of [[b.a, ya, "bin-admitted"], [b.d, yd, "bin-denied"]]) {
        if (!n) continue;
        const h = Math.max(2, Math.round(14 * n / top));
        const r = el("rect", { class: cls, x: c, y: base + 14 - h, width: 1, height: h }, g);
        el("title", {}, r, `${n} ${cls === "bin-admitted" ? "admitted" : "denied"} around ${fmtDur(from + (c - ML) / PW * (to - from))}`);
      }
    }
  }

  // Axes.
  el("path", { class: "axis", d: `M${ML} ${TOP} V${TOP + H + S} H${ML + PW}` }, svg);
  el("line", { x1: ML, x2: ML + PW, y1: TOP + H, y2: TOP + H, stroke: "#ccc" }, svg);
  for (const v of low < 0 ? [low, 0, cap] : [0, cap / 2, cap]) el("text", { x: ML - 5, y: y(v) + 4, "text-anchor": "end" }, svg, String(+v.toFixed(1)));
  if (low < 0) {
    el("line", { class: "zero", x1: ML, x2: ML + PW, y1: y(0), y2: y(0), stroke: "#999", "stroke-dasharray": "3 3" }, svg);
    el("text", { class: "debt-label", x: ML + 4, y: y(0) + 12 }, svg, "below 0: debt, waited out");
  }
  el("text", { x: ML - 5, y: ya + 9, "text-anchor": "end", fill: "#009E73" }, svg, "▲");
  el("text", { x: ML - 5, y: yd + 9, "text-anchor": "end", fill: "#D55E00" }, svg, "✕");
  const step = timeStep(to - from, Math.max(4, Math.floor(PW / 110)));
  for (let t = Math.ceil(from / step) * step; t <= to; t += step) {
    el("line", { x1: x(t), x2: x(t), y1: TOP + H + S, y2: TOP + H + S + 4, stroke: "#000" }, svg);
    el("text", { x: x(t), y: TOP + H + S + 16, "text-anchor": "middle" }, svg, fmtDur(t));
  }
  svg.addEventListener("click", (e) => {
    const r = svg.getBoundingClientRect(), px = (e.clientX - r.left) * W / r.width;
    if (px >= ML && px <= ML + PW) addBurst(from + (px - ML) / PW * (to - from));
  });
  if (tl.levels.length > 1) levelKey(tl, box, leased);
  if (!inset) requestTable(tl, lo, hi, box, a.label);
  return box;
}

// addBurst draws traffic by hand: in custom traffic, a click on a chart at
// time at (ns) adds "N at T over D" to the last client, and reruns.
function addBurst(at) {
  if ($("#scenario").value !== "custom") return;
  const n = Math.max(1, Math.round(+$("#burst-n").value || 50));
  const over = $("#burst-over").value.trim();
  const part = `${n} at ${+(at / SEC).toFixed(3)}s` + (over && over !== "0" ? ` over ${over}` : "");
  const lines = $("#clients").value.split("\n").filter((l) => l.trim());
  if (lines.length) lines[lines.length - 1] += ", " + part;
  else lines.push(part);
  $("#clients").value = lines.join("\n");
  pushView(false);
  run();
}

const DASHES = ["", "7 3", "2 2", "9 3 2 3", "4 4"];

function levelName(lv, leased) {
  if (lv.instance < 0) return "room left in the shared store's bucket";
  return leased ? `tokens left in instance ${lv.instance}'s leased batch` : `room left in instance ${lv.instance}'s own bucket`;
}

// levelKey says which line is which store's, when each instance has its
// own, or which is the shared bucket and which each instance's batch.
function levelKey(tl, box, leased) {
  const p = html("p", { class: "level-key" }, box, leased ? "Tokens: " : "Room left: ");
  tl.levels.forEach((lv, i) => {
    const s = el("svg", { width: 28, height: 10, "aria-hidden": "true" }, p);
    el("path", { class: "level", d: "M1 5 H27", "stroke-dasharray": DASHES[i % DASHES.length] }, s);
    p.append(lv.instance < 0 ? " the shared bucket " : leased ? ` instance ${lv.instance}'s batch ` : ` instance ${lv.instance}'s own store `);
  });
}

const MAX_ROWS = 500; // the most requests a chart's table lists

// requestTable lists the requests in view, tl.requests[lo:hi], in a table
// that opens on demand: the marks' hover text (retry-after included) for
// keyboards and screen readers.
function requestTable(tl, lo, hi, box, label) {
  const n = hi - lo;
  const det = html("details", { class: "requests" }, box);
  html("summary", {}, det, n > MAX_ROWS
    ? `The ${n} requests in view, as a table (the first ${MAX_ROWS}; zoom in for the rest)`
    : `The ${n} request${n === 1 ? "" : "s"} in view, as a table`);
  det.addEventListener("toggle", () => {
    if (!det.open || det.querySelector("table")) return;
    const wrap = html("div", { class: "scroll", tabindex: "0", role: "region", "aria-label": label + ": requests in view" }, det);
    const table = html("table", {}, wrap);
    const head = html("tr", {}, html("thead", {}, table));
    for (const h of ["time", "client", "instance", "cost", "answer", "retry after", "left"]) html("th", { scope: "col" }, head, h);
    const body = html("tbody", {}, table);
    for (let k = lo; k < Math.min(hi, lo + MAX_ROWS); k++) {
      const q = tl.requests[k];
      const tr = html("tr", { class: q.allowed ? "admitted" : "denied" }, body);
      for (const v of [fmtDur(q.at), tl.clients[q.client] ?? "?", String(q.instance), String(q.cost),
        q.allowed ? "admitted" : "denied", q.allowed ? "" : fmtDur(q.retry_after || 0), String(q.remaining)]) html("td", {}, tr, v);
    }
  });
}

// lawChart draws, per algorithm, the most admitted in any interval of each
// length against the bound capacity + rate·t, on a log axis of lengths.
function lawChart(W) {
  const box = $("#law");
  box.replaceChildren();
  const ML = 48, MR = 24, TOP = 10, H = 200, PW = W - ML - MR, HT = TOP + H + 40;
  const all = data.runs.flatMap((r) => r.timeline.peaks || []);
  if (!all.length) return;
  const wMin = Math.min(...all.map((p) => p.width)), wMax = Math.max(...all.map((p) => p.width));
  const top = Math.max(1, ...all.map((p) => Math.max(p.peak, p.bound)));
  const yMax = Math.ceil(top / niceStep(top, 4)) * niceStep(top, 4);
  const x = (w) => ML + (Math.log(w) - Math.log(wMin)) / Math.max(Math.log(wMax) - Math.log(wMin), 1e-9) * PW;
  const y = (v) => TOP + H - v / yMax * H;
  const words = data.runs.map((r) => `${ALGOS[r.short].label}: ${lawWords(r.timeline)}`).join("; ");
  const svg = el("svg", { width: W, height: HT, viewBox: `0 0 ${W} ${HT}`, role: "img", "aria-label": "The never-exceed law. " + words }, box);
  const bound = data.runs[0].timeline.peaks;
  el("path", { class: "bound", d: bound.map((p, i) => `${i ? "L" : "M"}${x(p.width).toFixed(2)} ${y(p.bound).toFixed(2)}`).join("") }, svg);
  data.runs.forEach((run, i) => {
    const a = ALGOS[run.short], pk = run.timeline.peaks;
    el("path", { d: pk.map((p, k) => `${k ? "L" : "M"}${x(p.width).toFixed(2)} ${y(p.peak).toFixed(2)}`).join(""),
      fill: "none", stroke: a.color, "stroke-width": 1.6, "stroke-dasharray": ["", "6 3", "2 2"][i % 3] }, svg);
    for (const p of pk) {
      const m = marker(svg, a.shape, x(p.width), y(p.peak), a.color, p.peak > p.bound);
      el("title", {}, m, `${a.label}: at most ${p.peak} admitted in any ${fmtDur(p.width)}; bound ${p.bound}`);
    }
    const ly = TOP + 14 + i * 20;
    marker(svg, a.shape, ML + 18, ly - 4, a.color, false);
    el("text", { x: ML + 28, y: ly }, svg, a.label);
  });
  const by = TOP + 14 + data.runs.length * 20;
  el("path", { class: "bound", d: `M${ML + 10} ${by - 4} h16` }, svg);
  el("text", { x: ML + 28, y: by }, svg, "capacity + rate·t (filled marks: above it)");
  el("path", { class: "axis", d: `M${ML} ${TOP} V${TOP + H} H${ML + PW}` }, svg);
  for (const v of [0, yMax / 2, yMax]) el("text", { x: ML - 5, y: y(v) + 4, "text-anchor": "end" }, svg, String(Math.round(v)));
  for (const p of bound) {
    if (!/^1/.test(String(p.width))) continue; // label the powers of ten
    el("text", { x: x(p.width), y: TOP + H + 14, "text-anchor": "middle" }, svg, fmtDur(p.width));
  }
  el("text", { x: ML + PW / 2, y: TOP + H + 32, "text-anchor": "middle" }, svg, "interval length t (log scale)");
}

function marker(svg, shape, cx, cy, color, filled) {
  const attrs = { fill: filled ? color : "#fff", stroke: color, "stroke-width": 1.5 };
  if (shape === "circle") return el("circle", { cx, cy, r: 4, ...attrs }, svg);
  if (shape === "square") return el("rect", { x: cx - 4, y: cy - 4, width: 8, height: 8, ...attrs }, svg);
  return el("path", { d: `M${cx} ${cy - 5} l5 9 h-10z`, ...attrs }, svg);
}

// ---- zoom ----

function zoomTo(from, to) {
  const d = duration();
  const w = Math.max(to - from, 1000);
  from = Math.max(0, Math.min(from, d - w));
  view = { from, to: Math.min(d, from + w) };
  pushView(false);
  render();
}

function worstZoom() {
  const broken = data.runs.find((r) => !r.timeline.law.holds);
  const tl = (broken || data.runs[0]).timeline;
  zoomTo(tl.zoom.from, tl.zoom.to);
  $("#status").textContent += broken
    ? ` Zoomed on where the ${ALGOS[broken.short].label.toLowerCase()} broke the law.`
    : " The law holds for every algorithm here: zoomed on the tightest interval.";
}

function wire() {
  form.addEventListener("submit", (e) => { e.preventDefault(); view = { from: null, to: null }; pushView(false); run(); });
  form.addEventListener("change", (e) => {
    if (e.target.id === "burst-n" || e.target.id === "burst-over") return; // used on the next click only
    if (e.target.id === "scenario") { showCustom(); view = { from: null, to: null }; }
    pushView(false);
    run();
  });
  $("#zoom-all").addEventListener("click", () => { view = { from: null, to: null }; pushView(false); render(); });
  $("#zoom-worst").addEventListener("click", worstZoom);
  const scale = (f) => { const [a, b] = span(); const c = (a + b) / 2, h = (b - a) * f / 2; zoomTo(c - h, c + h); };
  const pan = (f) => { const [a, b] = span(); zoomTo(a + (b - a) * f, b + (b - a) * f); };
  $("#zoom-in").addEventListener("click", () => scale(0.5));
  $("#zoom-out").addEventListener("click", () => scale(2));
  $("#pan-left").addEventListener("click", () => pan(-0.5));
  $("#pan-right").addEventListener("click", () => pan(0.5));
  for (const id of ["from", "to"]) {
    $("#" + id).addEventListener("change", (e) => {
      e.stopPropagation();
      const f = parseFloat($("#from").value) * SEC, t = parseFloat($("#to").value) * SEC;
      if (Number.isFinite(f) && Number.isFinite(t) && t > f) zoomTo(f, t);
    });
  }
  window.addEventListener("popstate", () => { formFromQuery(new URLSearchParams(location.search)); run(); });
  let resize = null;
  window.addEventListener("resize", () => { clearTimeout(resize); resize = setTimeout(() => data && render(), 150); });
}

async function init() {
  wire();
  try {
    const resp = await fetch("api/scenarios");
    const list = await resp.json();
    const sel = $("#scenario");
    for (const s of list) {
      const o = html("option", { value: s.name }, sel, s.name);
      o.dataset.summary = `${s.summary} Policy ${s.policy}; ${fmtDur(s.duration)}.`;
    }
    const o = html("option", { value: "custom" }, sel, "custom: draw your own");
    o.dataset.summary = "Your own requests, all on one key: write one client per line.";
  } catch (err) {
    showError("Could not list the scenarios: " + err.message);
    return;
  }
  if (!location.search) history.replaceState(null, "", LANDING);
  formFromQuery(new URLSearchParams(location.search));
  run();
}

init();
