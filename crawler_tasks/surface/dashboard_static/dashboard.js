// The crawl dashboard's pages: poll the JSON API and fill the page. Text from crawled sites
// (URLs, messages) only ever goes in through textContent, never as HTML.
"use strict";

// Every few seconds: each refresh of the crawl page costs Redis ~25 round trips
// (bench/dashboard.py measures what an open page adds to a broad crawl's Redis CPU).
const REFRESH_MS = 3000;
const HOSTS_REFRESH_MS = 6000;
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

function ratio(done, admitted) { return admitted ? Math.min(1, done / admitted) : 0; }

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
  cell(tr, c.status + (c.error ? " (" + c.error + ")" : ""));
  cell(tr, duration(Date.now() / 1000 - c.started_at), "num");
  cell(tr, fmt(c.done, 0) + " / " + fmt(c.admitted, 0), "num done-admitted");
  const bar = el("td"); bar.appendChild(miniBar(ratio(c.done, c.admitted))); tr.appendChild(bar);
  cell(tr, fmt(c.failed, 0), "num");
  cell(tr, fmt(c.recent_pages_per_s), "num");
  cell(tr, fmt(c.pages_per_s), "num");
  const over = ["finished", "cancelled"].includes(c.status);
  cell(tr, over ? "done" : (c.eta_s === undefined ? "—" : duration(c.eta_s)), "num");
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
const COUNTERS = ["discovered", "admitted", "deduplicated", "queued", "retrying", "in_flight",
  "outstanding", "done", "fetched", "parsed", "failed", "robots_disallowed", "cancelled",
  "items", "extract_errors", "bytes"];

function kv(table, pairs) {
  const body = table.querySelector("tbody");
  body.replaceChildren(...pairs.map(([k, v]) => {
    const tr = el("tr"); tr.dataset.key = k; cell(tr, k); cell(tr, v); return tr;
  }));
}

function showFigures(f, fraction) {
  document.getElementById("crawl-id").textContent = f.crawl_id;
  const badge = document.getElementById("status");
  badge.textContent = f.status + (f.paused && f.status !== "paused" ? " (paused)" : "");
  badge.className = "badge " + f.status;
  for (const node of document.querySelectorAll("[data-figure]")) {
    node.textContent = fmt(f[node.dataset.figure]);
  }
  const part = ratio(f.done, f.admitted);
  document.getElementById("bar-fill").style.width = (part * 100).toFixed(2) + "%";
  document.getElementById("percent").textContent = (part * 100).toFixed(1) + " %";
  const over = ["finished", "cancelled"].includes(f.status);
  document.getElementById("eta").textContent = over ? "done" : (f.eta_s === undefined ? "—" : duration(f.eta_s));
  const notes = [f.error && "error: " + f.error, f.output && "output: " + f.output,
    f.admission_paused && "admission paused: Redis near maxmemory",
    f.redis_oom && "Redis refuses writes (maxmemory)"].filter(Boolean);
  const n = document.getElementById("notes");
  n.hidden = notes.length === 0; n.textContent = notes.join(" · ");
  kv(document.getElementById("counters"), COUNTERS.map((k) => [k, fmt(f[k], 0)]));
  const mem = f.redis_memory;
  kv(document.getElementById("admission"), [
    ["Redis memory", mem ? fmt(mem.used_bytes / 1048576, 1) + " MB of maxmemory " + fmt(mem.maxmemory_bytes / 1048576, 1) + " MB" : "no maxmemory (noeviction) set"],
    ["admission line", mem ? fmt(mem.maxmemory_bytes * fraction / 1048576, 1) + " MB (" + fmt(fraction * 100, 0) + " % of maxmemory), " + fmt(100 * mem.used_bytes / (mem.maxmemory_bytes * fraction), 1) + " % reached" : "—"],
    ["admission", f.admission_paused ? "paused (Redis above the admission line)" : "open"],
    ["Redis refuses writes", f.redis_oom ? "yes" : "no"],
  ]);
}

function chart(series) {
  const svg = document.getElementById("chart");
  const ns = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  const W = 600, H = 200, pad = 28;
  const line = (x1, y1, x2, y2) => {
    const l = document.createElementNS(ns, "line");
    l.setAttribute("x1", x1); l.setAttribute("y1", y1); l.setAttribute("x2", x2); l.setAttribute("y2", y2);
    l.setAttribute("class", "axis"); svg.appendChild(l);
  };
  line(pad, H - pad, W - 4, H - pad); line(pad, 4, pad, H - pad);
  document.getElementById("chart-span").textContent = series.length
    ? "(" + series.length + " points over " + duration(series[series.length - 1].t - series[0].t) + ", one per 5 s at most)" : "(no samples yet)";
  if (series.length < 1) return;
  const top = Math.max(1, ...series.map((p) => Math.max(p.pages_per_s, p.errors_per_s)));
  const t0 = series[0].t, span = Math.max(1, series[series.length - 1].t - t0);
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", 2); label.setAttribute("y", 12); label.textContent = fmt(top, 1);
  svg.appendChild(label);
  for (const key of ["pages_per_s", "errors_per_s"]) {
    const path = document.createElementNS(ns, "polyline");
    path.setAttribute("class", key === "pages_per_s" ? "pages" : "errors");
    path.setAttribute("points", series.map((p) => {
      const x = pad + ((p.t - t0) / span) * (W - pad - 6);
      const y = H - pad - (p[key] / top) * (H - pad - 8);
      return x.toFixed(1) + "," + y.toFixed(1);
    }).join(" "));
    svg.appendChild(path);
  }
}

function fillRows(id, rows, make) {
  document.querySelector("#" + id + " tbody").replaceChildren(...rows.map(make));
}

function showPage(d) {
  showFigures(d.figures, d.admission_memory_fraction);
  chart(d.series);
  fillRows("status-codes", Object.entries(d.status_codes), ([code, n]) => {
    const tr = el("tr"); cell(tr, code); cell(tr, fmt(n, 0), "num"); return tr;
  });
  fillRows("errors", d.errors, (e) => {
    const tr = el("tr"); tr.dataset.class = e["class"];
    cell(tr, e["class"]); cell(tr, fmt(e.count, 0), "num"); cell(tr, e.url, "url"); cell(tr, e.message);
    return tr;
  });
  fillRows("workers", d.workers, (w) => {
    const tr = el("tr"); cell(tr, w.worker); cell(tr, fmt(w.age_s, 1) + " s ago"); cell(tr, w.alive ? "yes" : "no"); return tr;
  });
  document.getElementById("actions").replaceChildren(...d.actions.map((a) => {
    const extra = a.host ? " " + a.host + " → " + a.rate : (a.requeued !== undefined ? " (" + a.requeued + " URLs)" : "");
    const li = el("li", new Date(a.ts * 1000).toLocaleTimeString() + " " + a.action + extra + " by " + a.by);
    li.dataset.action = a.action;
    return li;
  }));
}

function hostCell(tr, key, value) {
  if (key === "rate" && value === null) { cell(tr, "no limit", "num"); return; }
  const numeric = typeof value === "number";
  cell(tr, numeric ? fmt(value) : (value === null ? "—" : value), numeric ? "num" : (key === "state" ? "state-" + value : ""));
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

async function refreshCrawl() {
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
    b.addEventListener("click", () => control(b.dataset.action));
  }
  document.getElementById("rate-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    control("rate", { host: document.getElementById("rate-host").value, rate: document.getElementById("rate-value").value });
  });
  document.getElementById("hosts-prev").addEventListener("click", () => { hosts.offset = Math.max(0, hosts.offset - HOSTS_PER_PAGE); refreshHosts(); });
  document.getElementById("hosts-next").addEventListener("click", () => { hosts.offset += HOSTS_PER_PAGE; refreshHosts(); });
  refreshCrawl(); refreshHosts();
  setInterval(refreshCrawl, REFRESH_MS);
  setInterval(refreshHosts, HOSTS_REFRESH_MS);
}

if (document.body.dataset.page === "crawls") {
  refreshCrawls();
  setInterval(refreshCrawls, REFRESH_MS);
} else {
  startCrawlPage();
}
