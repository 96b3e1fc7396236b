// The crawl dashboard's pages: poll the JSON API and fill the page. Text from crawled sites
// (URLs, messages) only ever goes in through textContent, never as HTML.
"use strict";

// Every few seconds: each refresh of the crawl page costs Redis ~25 round trips
// (bench/dashboard.py measures what an open page adds to a broad crawl's Redis CPU).
const REFRESH_MS = 3000;
const HOSTS_PER_PAGE = 50;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function cell(row, text, cls) { row.appendChild(el("td", text, cls)); }

function fmt(n, digits) {
  if (n === null || n === undefined) return "—";
  if (typeof n !== "number") return String(n);
  return n.toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 2 : digits });
}

function duration(s) {
  if (s === null || s === undefined) return "—";
  s = Math.max(0, s);
  if (s >= 86400) return (s / 86400).toFixed(1) + " d";
  if (s >= 3600) return (s / 3600).toFixed(1) + " h";
  if (s >= 60) return Math.round(s / 60) + " min";
  return Math.round(s) + " s";
}

function xsrf() {
  const m = document.cookie.match(/(?:^|; )_xsrf=([^;]*)/);
  return m ? decodeURIComponent(m[1]) : "";
}

async function api(path) {
  const r = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

async function post(path, fields) {
  const body = new URLSearchParams(fields || {});
  const r = await fetch(path, {
    method: "POST", credentials: "same-origin", body: body,
    headers: { "X-XSRFToken": xsrf() },
  });
  const data = await r.json().catch(() => ({}));
  return { ok: r.ok, status: r.status, data: data };
}

function problem(text) {
  const p = document.getElementById("problem");
  p.hidden = !text;
  p.textContent = text || "";
}

function stamp() { document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString(); }

function miniBar(fraction) {
  const bar = el("div", null, "mini");
  const fill = el("div", null, "mini-fill");
  fill.style.width = (fraction * 100).toFixed(1) + "%";
  bar.appendChild(fill);
  return bar;
}

// --- the crawls page -----------------------------------------------------------------------
function crawlRow(c) {
  const tr = el("tr");
  tr.dataset.crawl = c.crawl_id;
  const link = el("a", c.crawl_id);
  link.href = "/crawls/" + encodeURIComponent(c.crawl_id);
  const first = el("td"); first.appendChild(link); tr.appendChild(first);
  cell(tr, c.shown_status + (c.error ? " (" + c.error + ")" : ""), "status-" + c.shown_status);
  cell(tr, duration(c.age_s), "num");
  cell(tr, fmt(c.done, 0) + " / " + fmt(c.admitted, 0), "num done-admitted");
  const bar = el("td"); bar.appendChild(miniBar(c.done_share)); tr.appendChild(bar);
  cell(tr, fmt(c.failed, 0), "num");
  cell(tr, fmt(c.recent_pages_per_s), "num");
  cell(tr, fmt(c.pages_per_s), "num");
  cell(tr, eta(c), "num");
  const seeds = c.seeds[0] + (c.seeds.length > 1 ? " (+" + (c.seeds.length - 1) + ")" : "");
  cell(tr, seeds, "url");
  return tr;
}

async function refreshCrawls() {
  try {
    const data = await api("/api/crawls");
    const body = document.querySelector("#crawls tbody");
    body.replaceChildren(...data.crawls.map(crawlRow));
    document.getElementById("empty").hidden = data.crawls.length > 0;
    problem(null);
    stamp();
  } catch (e) { problem("cannot read the crawls: " + e.message); }
}

// --- the crawl page ------------------------------------------------------------------------
const crawlId = decodeURIComponent(location.pathname.split("/").pop());
const hosts = { sort: "pending", desc: true, offset: 0 };
function kv(table, pairs) {
  const body = table.querySelector("tbody");
  body.replaceChildren(...pairs.map(([k, v]) => {
    const tr = el("tr"); tr.dataset.key = k; cell(tr, k); cell(tr, v); return tr;
  }));
}

// The ETA cell: "done" once the crawl is final, "—" while there is none (paused, no pace).
function eta(f) { return f.final ? "done" : (f.eta_s === undefined ? "—" : duration(f.eta_s)); }

// Every figure comes computed from the API (state/figures.py): the page only formats them.
function showFigures(f, admission) {
  document.getElementById("crawl-id").textContent = f.crawl_id;
  const badge = document.getElementById("status");
  // shown_status: "failed" for a crawl over that fetched nothing, else its status.
  badge.textContent = f.shown_status + (f.paused && f.status !== "paused" ? " (paused)" : "");
  badge.className = "badge " + f.shown_status;
  for (const node of document.querySelectorAll("[data-figure]")) {
    node.textContent = fmt(f[node.dataset.figure]);
  }
  document.getElementById("bar-fill").style.width = (f.done_share * 100).toFixed(2) + "%";
  document.getElementById("percent").textContent = (f.done_share * 100).toFixed(1) + " %";
  document.getElementById("eta").textContent = eta(f);
  const notes = [f.error && "error: " + f.error, f.output && "output: " + f.output,
    f.admission_paused && "admission paused: Redis near maxmemory",
    f.redis_oom && "Redis refuses writes (maxmemory)"].filter(Boolean);
  const n = document.getElementById("notes");
  n.hidden = notes.length === 0; n.textContent = notes.join(" · ");
  const mem = f.redis_memory;
  kv(document.getElementById("admission"), [
    ["Redis memory", mem ? fmt(mem.used_bytes / 1048576, 1) + " MB of maxmemory " + fmt(mem.maxmemory_bytes / 1048576, 1) + " MB" : "no maxmemory (noeviction) set"],
    ["admission line", admission.line_bytes !== null ? fmt(admission.line_bytes / 1048576, 1) + " MB (" + fmt(admission.fraction * 100, 0) + " % of maxmemory), " + fmt(100 * admission.reached, 1) + " % reached" : "—"],
    ["admission", f.admission_paused ? "paused (Redis above the admission line)" : "open"],
    ["Redis refuses writes", f.redis_oom ? "yes" : "no"],
  ]);
}

// Pages/s and errors/s over time, with a time axis (clock time of the samples) and a rate axis.
function chart(series) {
  const svg = document.getElementById("chart");
  const ns = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  const W = 600, H = 200, left = 36, bottom = 22, right = 8, top = 8;
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.appendChild(node);
    return node;
  };
  add("line", { x1: left, y1: H - bottom, x2: W - right, y2: H - bottom, class: "axis" });
  add("line", { x1: left, y1: top, x2: left, y2: H - bottom, class: "axis" });
  document.getElementById("chart-span").textContent = series.length
    ? "(" + series.length + " points over " + duration(series[series.length - 1].t - series[0].t) + ", one per 5 s at most)" : "(no samples yet)";
  if (series.length < 1) return;
  const most = Math.max(1, ...series.map((p) => Math.max(p.pages_per_s, p.errors_per_s)));
  const t0 = series[0].t, span = Math.max(1, series[series.length - 1].t - t0);
  const x = (t) => left + ((t - t0) / span) * (W - left - right);
  const y = (v) => H - bottom - (v / most) * (H - bottom - top);
  for (const v of [0, most / 2, most]) {  // the rate axis: per second
    add("text", { x: left - 4, y: y(v) + 3, "text-anchor": "end", class: "tick" }, fmt(v, 1));
  }
  const ticks = Math.min(5, series.length);  // the time axis: clock time of the samples
  for (let i = 0; i < ticks; i++) {
    const t = t0 + (ticks === 1 ? 0 : (span * i) / (ticks - 1));
    const anchor = i === 0 ? "start" : (i === ticks - 1 ? "end" : "middle");
    add("line", { x1: x(t), y1: H - bottom, x2: x(t), y2: H - bottom + 4, class: "axis" });
    add("text", { x: x(t), y: H - 6, "text-anchor": anchor, class: "time" },
      new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" }));
  }
  for (const key of ["pages_per_s", "errors_per_s"]) {
    add("polyline", {
      class: key === "pages_per_s" ? "pages" : "errors",
      points: series.map((p) => x(p.t).toFixed(1) + "," + y(p[key]).toFixed(1)).join(" "),
    });
  }
}

function fillRows(id, rows, make) {
  document.querySelector("#" + id + " tbody").replaceChildren(...rows.map(make));
}

// Every counter, grouped and explained as declared once (formats.Counter, figures.Live).
function showCounters(rows) {
  const groups = new Map();
  for (const r of rows) {
    if (!groups.has(r.group)) groups.set(r.group, []);
    groups.get(r.group).push(r);
  }
  document.getElementById("counters").replaceChildren(...[...groups].map(([group, members]) => {
    const table = el("table", null, "kv");
    table.dataset.group = group;
    table.appendChild(el("caption", group));
    const body = el("tbody");
    for (const r of members) {
      const tr = el("tr"); tr.dataset.key = r.name;
      const name = el("td", r.name); name.title = r.help; tr.appendChild(name);
      cell(tr, fmt(r.value, 0), "num");
      body.appendChild(tr);
    }
    table.appendChild(body);
    return table;
  }));
}

// Which controls apply now, as the API says (surface/figures.py controls).
function showControls(applies) {
  for (const b of document.querySelectorAll("button[data-action]")) {
    b.disabled = !applies[b.dataset.action];
  }
}

function showRenderHosts(hostsSeen) {
  const entries = Object.entries(hostsSeen || {});
  document.getElementById("render-card").hidden = entries.length === 0;
  fillRows("render-hosts", entries, ([host, v]) => {
    const tr = el("tr"); tr.dataset.host = host;
    cell(tr, host); cell(tr, v.mode || "sampling");
    cell(tr, fmt(v.renders || 0, 0) + " / " + fmt(v.pages || 0, 0), "num");
    cell(tr, fmt(v.gains || 0, 0), "num");
    return tr;
  });
}

function showPage(d) {
  showFigures(d.figures, d.admission);
  showCounters(d.counters);
  showControls(d.controls);
  showRenderHosts(d.figures.render_hosts);
  chart(d.series);
  fillRows("status-codes", Object.entries(d.status_codes), ([code, n]) => {
    const tr = el("tr"); cell(tr, code); cell(tr, fmt(n, 0), "num"); return tr;
  });
  fillRows("errors", d.errors, (e) => {
    const tr = el("tr"); tr.dataset.class = e["class"];
    cell(tr, e["class"]); cell(tr, fmt(e.count, 0), "num"); cell(tr, e.url, "url"); cell(tr, e.message, "message");
    return tr;
  });
  fillRows("workers", d.workers, (w) => {
    const tr = el("tr"); cell(tr, w.worker); cell(tr, fmt(w.age_s, 1) + " s ago"); return tr;
  });
  document.getElementById("workers-gone").textContent = d.workers_gone
    ? d.workers_gone + " stopped process(es) not shown (no heartbeat lately)" : "";
  document.getElementById("actions").replaceChildren(...d.actions.map((a) => {
    const extra = a.host ? " " + a.host + " → " + a.rate + (a.action === "set_ceiling" ? " (all crawls)" : " (this crawl)")
      : (a.requeued !== undefined ? " (" + a.requeued + " URLs)" : "");
    const li = el("li", new Date(a.ts * 1000).toLocaleTimeString() + " " + a.action + extra + " by " + a.by);
    li.dataset.action = a.action;
    return li;
  }));
}

function hostCell(tr, key, value) {
  if (key === "rate" && value === null) { cell(tr, "no limit", "num"); return; }
  const numeric = typeof value === "number";
  const cls = numeric ? "num" : (key === "state" ? "state-" + value : (key === "why" ? "message" : ""));
  cell(tr, numeric ? fmt(value) : (value === null ? "—" : value), cls);
}

function showHosts(page) {
  if (page.reading) {  // the crawl's first read of its hosts is still running
    document.getElementById("hosts-total").textContent = "(reading the crawl's hosts…)";
    setTimeout(refreshHosts, 1000);
    return;
  }
  const head = document.querySelector("#hosts thead tr");
  head.replaceChildren(...page.columns.map(([key, title]) => {
    const th = el("th", title, "sortable");
    th.dataset.sort = key;
    if (key === page.sort) th.classList.add("sorted");
    if (key === page.sort && !page.desc) th.classList.add("asc");
    th.addEventListener("click", () => {
      hosts.desc = hosts.sort === key ? !hosts.desc : true;
      hosts.sort = key; hosts.offset = 0; refreshHosts();
    });
    return th;
  }));
  fillRows("hosts", page.rows, (r) => {
    const tr = el("tr"); tr.dataset.host = r.domain;
    for (const [key] of page.columns) hostCell(tr, key, r[key]);
    return tr;
  });
  const last = Math.min(page.total, page.offset + page.rows.length);
  document.getElementById("hosts-total").textContent = "(" + fmt(page.total, 0) + " with work)";
  document.getElementById("hosts-range").textContent = page.total ? (page.offset + 1) + "–" + last + " of " + fmt(page.total, 0) : "none";
  document.getElementById("hosts-prev").disabled = page.offset === 0;
  document.getElementById("hosts-next").disabled = last >= page.total;
}

async function refreshHosts() {
  const q = new URLSearchParams({ sort: hosts.sort, desc: hosts.desc ? "1" : "0", offset: hosts.offset, limit: HOSTS_PER_PAGE });
  try { showHosts(await api("/api/crawls/" + encodeURIComponent(crawlId) + "/hosts?" + q)); }
  catch (e) { problem("cannot read the hosts: " + e.message); }
}

// The host table is read with the rest of the page, so it is never older than the figures.
async function refreshCrawl() {
  refreshHosts();
  try {
    showPage(await api("/api/crawls/" + encodeURIComponent(crawlId) + "/page"));
    problem(null);
    stamp();
  } catch (e) { problem("cannot read the crawl: " + e.message); }
}

async function control(action, fields) {
  const r = await post("/api/crawls/" + encodeURIComponent(crawlId) + "/" + action, fields);
  const out = document.getElementById("control-result");
  out.textContent = r.ok ? action + ": done" : action + ": " + (r.data.error || r.status);
  out.dataset.status = r.status;
  refreshCrawl();
}

function startCrawlPage() {
  for (const b of document.querySelectorAll("button[data-action]")) {
    b.addEventListener("click", () => {
      // Cancel cannot be undone: the crawl's queued URLs are dropped.
      if (b.dataset.action === "cancel" && !window.confirm("Cancel crawl " + crawlId + "? Its queued URLs are dropped; this cannot be undone.")) return;
      control(b.dataset.action);
    });
  }
  for (const [form, action] of [["rate", "rate"], ["ceiling", "ceiling"]]) {
    document.getElementById(form + "-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      control(action, { host: document.getElementById(form + "-host").value, rate: document.getElementById(form + "-value").value });
    });
  }
  document.getElementById("hosts-prev").addEventListener("click", () => { hosts.offset = Math.max(0, hosts.offset - HOSTS_PER_PAGE); refreshHosts(); });
  document.getElementById("hosts-next").addEventListener("click", () => { hosts.offset += HOSTS_PER_PAGE; refreshHosts(); });
  refreshCrawl();
  setInterval(refreshCrawl, REFRESH_MS);
}

if (document.body.dataset.page === "crawls") {
  refreshCrawls();
  setInterval(refreshCrawls, REFRESH_MS);
} else {
  startCrawlPage();
}
