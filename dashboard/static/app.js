// ringleader dashboard: plain JS on top of the REST API (/api/v1), no build step.
//
//   /           the fleet health view (fleet.js, following /api/v1/fleet) and the jobs table (live
//               through /api/v1/events)
//   /jobs/{id}  a job: busbw and time against size (uPlot, log-log), the nccl-tests-style table,
//               an overlay of a second job, downloads; live through /api/v1/jobs/{id}/events
//
// Other job kinds get their own charts and table (p2p: bandwidth and latency against size;
// training: loss per step; gradient averaging: figures only).
//
// Tests read the charts through window.ringleaderCharts: the uPlot instances by name (busbw and
// time for a collective sweep; bandwidth and latency for p2p; loss for training) and `series`,
// the line labels.
//
// A coordinator with a users' token answers 401: the page then asks for the token once, keeps it
// in sessionStorage (this tab only, gone when it closes) and sends it as `Authorization: Bearer`
// on every request. Live updates therefore use fetch() streams, not EventSource (which cannot
// send headers), and downloads are fetched, then saved from a blob. No token ever goes in a URL.
"use strict";

(function () {
  const API = "/api/v1";
  const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
  const ROOTED_OPS = new Set(["reduce", "broadcast", "gather", "scatter"]);
  const REDUCING_OPS = new Set(["all_reduce", "reduce", "reduce_scatter"]);
  const QUEUED_REFRESH_MS = 2000;
  // The placement a job really runs with, as the CLI prints it (ringleader/spec.py's
  // physically_in_place): torch's all_reduce/reduce/broadcast always use one buffer.
  const placement = (op, inPlace, algo) => {
    if (algo === "symm:one_shot") return "out-of-place";
    if (["all_reduce", "reduce", "broadcast"].includes(op)) return "in-place";
    return inPlace && !["alltoall", "sendrecv"].includes(op) ? "in-place" : "out-of-place";
  };
  const COLORS = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#ca8a04", "#db2777"];

  window.ringleaderCharts = {};

  // ---- small helpers ------------------------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  // h("td", {class: "num", title: "..."}, child, "text", ...): a DOM element; text is never parsed
  // as HTML, so job names and reasons are safe to show.
  function h(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "style") node.style.cssText = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat(Infinity)) {  // nested lists of nodes too (never their text)
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  // ---- the users' token --------------------------------------------------------------------

  const TOKEN_KEY = "ringleader.token";
  let askingForToken = false;

  function authHeaders(headers) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    return token ? { ...headers, Authorization: `Bearer ${token}` } : { ...headers };
  }

  // Every request of this page ends when the page goes away. Left to the browser, a left page's
  // long poll (the fleet's, 25 s) or event stream kept one of the 6 connections a browser opens
  // to one host, and the next pages' requests waited behind them: 15-22 s for the trends tab
  // after a few page loads in headless Chromium (tests/browser/test_link_matrix_page.py). A page
  // brought back from the back/forward cache is read again.
  const leaving = new AbortController();
  window.addEventListener("pagehide", () => leaving.abort());
  window.addEventListener("pageshow", (e) => { if (e.persisted) location.reload(); });
  function untilLeaving(signal) {  // AbortSignal.any where the browser has it (2023 and on)
    if (!signal) return leaving.signal;
    if (AbortSignal.any) return AbortSignal.any([signal, leaving.signal]);
    const either = new AbortController();
    for (const s of [signal, leaving.signal]) s.addEventListener("abort", () => either.abort(), { once: true });
    return either.signal;
  }

  // Every API call: with the token; a refusal (401, or 403 for a token of the wrong role)
  // shows the sign-in form instead of the page.
  async function apiFetch(path, headers, signal) {
    const response = await fetch(path, { headers: authHeaders(headers), cache: "no-store", signal: untilLeaving(signal) });
    if (response.status === 401 || response.status === 403) askForToken(response.clone());
    return response;
  }

  async function askForToken(response) {
    if (askingForToken) return;
    askingForToken = true;
    let detail = "";
    try { detail = (await response.json()).detail || ""; } catch (_) { /* not JSON */ }
    const refused = sessionStorage.getItem(TOKEN_KEY) !== null;
    sessionStorage.removeItem(TOKEN_KEY);
    $("login-error").textContent = refused ? `The coordinator refused that token (${response.status}): ${detail}` : "";
    $("login-error").hidden = !refused;
    $("logout").hidden = true;
    setLive("idle", "");
    showView("login-view");
    $("login-token").focus();
  }

  function setUpLogin() {
    $("login-form").addEventListener("submit", (e) => {
      e.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, $("login-token").value.trim());
      location.reload();  // start the page afresh, now with the token
    });
    $("logout").hidden = sessionStorage.getItem(TOKEN_KEY) === null;
    $("logout").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      location.reload();
    });
  }

  async function getJSON(path) {
    const response = await apiFetch(path, { Accept: "application/json" });
    if (!response.ok) {
      let detail = "";
      try { detail = (await response.json()).detail || ""; } catch (_) { /* not JSON */ }
      const error = new Error(`${response.status} ${response.statusText}${detail ? ": " + detail : ""}`);
      error.status = response.status;
      throw error;
    }
    return response.json();
  }

  // Server-Sent Events over fetch(), so the stream carries the token: the parts of EventSource
  // this page uses (addEventListener by event name, onopen, onerror, close, readyState), with
  // its reconnection (Last-Event-ID) and its stop on 204.
  class EventStream {
    constructor(url) {
      this.url = url;
      this.listeners = new Map();
      this.readyState = EventStream.CONNECTING;
      this.lastEventId = null;
      this.onopen = null;
      this.onerror = null;
      this.abort = null;
      this.run();
    }

    addEventListener(name, fn) {
      if (!this.listeners.has(name)) this.listeners.set(name, []);
      this.listeners.get(name).push(fn);
    }

    close() {
      this.readyState = EventStream.CLOSED;
      if (this.abort) this.abort.abort();
    }

    async run() {
      while (this.readyState !== EventStream.CLOSED) {
        this.abort = new AbortController();
        try {
          const headers = { Accept: "text/event-stream" };
          if (this.lastEventId !== null) headers["Last-Event-ID"] = this.lastEventId;
          const response = await apiFetch(this.url, headers, this.abort.signal);
          if (response.status === 204 || response.status === 401 || response.status === 403) {
            this.close();  // nothing more to send, or signed out
            return;
          }
          if (!response.ok) throw new Error(`${response.status}`);
          this.readyState = EventStream.OPEN;
          if (this.onopen) this.onopen();
          await this.read(response.body);
        } catch (_) { /* a broken stream: reconnect below */ }
        if (this.readyState === EventStream.CLOSED) return;
        this.readyState = EventStream.CONNECTING;
        if (this.onerror) this.onerror();
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    }

    async read(body) {
      const reader = body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer = (buffer + value).replace(/\r\n?/g, "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          this.dispatch(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    }

    dispatch(frame) {
      let name = "message";
      const data = [];
      for (const line of frame.split("\n")) {
        if (!line || line.startsWith(":")) continue;  // keep-alive comments
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") name = value;
        else if (field === "data") data.push(value);
        else if (field === "id") this.lastEventId = value;
      }
      if (!data.length) return;
      const message = { type: name, data: data.join("\n"), lastEventId: this.lastEventId };
      for (const fn of this.listeners.get(name) || []) fn(message);
    }
  }
  EventStream.CONNECTING = 0;
  EventStream.OPEN = 1;
  EventStream.CLOSED = 2;

  // A download link whose file needs the token: fetched on click, then saved from a blob. The
  // link keeps the API address in its href (what the file is), for a reader and the tests.
  function tokenDownload(link, filename) {
    link.setAttribute("download", filename);
    link.addEventListener("click", async (e) => {
      e.preventDefault();
      const response = await apiFetch(link.href, {});
      if (!response.ok) return;
      const url = URL.createObjectURL(await response.blob());
      const save = h("a", { href: url, download: filename, hidden: true });
      document.body.append(save);
      save.click();
      save.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    });
  }

  // Binary units, as nccl-tests and `ringleader submit` sizes: 1024 -> "1K", 1048576 -> "1M".
  function fmtSize(bytes) {
    if (bytes === null || bytes === undefined) return "";
    for (const [unit, scale] of [["G", 2 ** 30], ["M", 2 ** 20], ["K", 2 ** 10]]) {
      if (bytes >= scale) {
        const v = bytes / scale;
        return (Number.isInteger(v) ? v : v.toPrecision(3)) + unit;
      }
    }
    return String(bytes);
  }

  function fmtBytesLong(bytes) {
    const short = fmtSize(bytes);
    return short === String(bytes) ? `${bytes} B` : `${short}B (${bytes.toLocaleString("en-US")} B)`;
  }

  // Two decimals as nccl-tests, but keep small CPU-loopback numbers readable.
  function fmtFixed(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "";
    if (v !== 0 && Math.abs(v) < 0.01) return v.toPrecision(2);
    return v.toFixed(2);
  }

  // Tick labels on log axes: 0.001, 0.5, 20, 3k, 1.2M.
  function fmtTick(v) {
    if (v === null || v === undefined) return "";
    const a = Math.abs(v);
    if (a >= 1e9) return +(v / 1e9).toPrecision(3) + "G";
    if (a >= 1e6) return +(v / 1e6).toPrecision(3) + "M";
    if (a >= 1e4) return +(v / 1e3).toPrecision(3) + "k";
    return String(+v.toPrecision(3));
  }

  // Grid lines of a log10 axis: every decade, and 2x and 5x in it when the range is short
  // (uPlot's default, 1x..9x, paints a dense band at every decade).
  function logSplits(u, axisIdx, min, max) {
    const lo = Math.floor(Math.log10(min));
    const hi = Math.ceil(Math.log10(max));
    const steps = hi - lo <= 2 ? [1, 2, 5] : [1];
    const splits = [];
    for (let e = lo; e <= hi; e++) {
      for (const m of steps) {
        const v = +(m * 10 ** e).toPrecision(12);
        if (v >= min * (1 - 1e-9) && v <= max * (1 + 1e-9)) splits.push(v);
      }
    }
    return splits;
  }

  // A log10 y range that starts and ends on a power of ten, so that both ends are labelled.
  function fullDecades(u, min, max) {
    if (!(min > 0 && max > 0)) return [1, 10];
    return uPlot.rangeLog(min, max, 10, true);
  }

  function fmtAge(seconds) {
    if (!Number.isFinite(seconds)) return "";
    seconds = Math.max(0, seconds);
    if (seconds < 10) return seconds.toFixed(1) + " s";
    if (seconds < 90) return Math.round(seconds) + " s";
    if (seconds < 90 * 60) return Math.round(seconds / 60) + " min";
    if (seconds < 36 * 3600) return Math.round(seconds / 3600) + " h";
    return Math.round(seconds / 86400) + " d";
  }

  function fmtDuration(seconds) {
    if (!Number.isFinite(seconds) || seconds < 0) return "";
    if (seconds < 60) return seconds.toFixed(seconds < 10 ? 2 : 1) + " s";
    const m = Math.floor(seconds / 60);
    return `${m} min ${Math.round(seconds - 60 * m)} s`;
  }

  function fmtTime(unixSeconds) {
    if (!unixSeconds) return "";
    const d = new Date(unixSeconds * 1000);
    const pad = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} `
      + `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  const now = () => Date.now() / 1000;

  function stateBadge(state) {
    return h("span", { class: `state state-${String(state || "").toLowerCase()}` }, state || "?");
  }

  function progressBar(job) {
    const p = job.progress || {};
    const total = p.total || 0;
    const done = job.state === "SUCCEEDED" ? total : Math.min(p.done || 0, total);
    const fraction = total ? done / total : 0;
    const running = job.state === "RUNNING";
    const label = total ? `${done}/${total}` + (running && p.size_bytes ? ` · ${fmtSize(p.size_bytes)}` : "") : "";
    return h("div", { class: `progress progress-${String(job.state).toLowerCase()}`, title: label },
      h("div", { class: "progress-fill", style: `width:${(100 * fraction).toFixed(1)}%` }),
      h("span", { class: "progress-label" }, label));
  }

  // A table row brought up to date cell by cell: cells whose content is unchanged (the job's link)
  // stay the same elements, so a click in progress on them is not lost.
  function patchRow(row, fresh) {
    row.className = fresh.className;
    [...fresh.cells].forEach((cell, i) => {
      const old = row.cells[i];
      if (!old) row.append(cell);
      else if (old.innerHTML !== cell.innerHTML || old.className !== cell.className) old.replaceWith(cell);
      else old.title = cell.title;
    });
  }

  const shortId = (id) => String(id || "").slice(0, 8);
  const jobLink = (id, text) => h("a", { href: `/jobs/${encodeURIComponent(id)}`, class: "mono" }, text || id);

  function collective(job) {
    return (job.spec && job.spec.collective) || {};
  }

  // The kinds of jobs, from the coordinator's table (GET /api/v1/kinds): filled in at start.
  let KINDS = [];
  // A job's kind: the member of the spec's oneof that is set (the others are absent).
  function jobKind(job) {
    return KINDS.map((k) => k.name).find((k) => job.spec && job.spec[k]) || "unknown";
  }
  // What listings filter on (`op`): a sweep's op, else the kind's name.
  function jobListedAs(job) {
    return jobKind(job) === "collective" ? collective(job).op : jobKind(job);
  }

  // What a listing says a job does: the op of a sweep, else its kind.
  function jobWhat(job) {
    const kind = jobKind(job);
    if (kind === "collective") return collective(job).op;
    if (kind === "p2p") return job.spec.p2p.pairwise ? "p2p pairwise" : "p2p";
    if (kind === "train") return `train ${job.spec.train.model || "linear"}`;
    return kind;
  }

  // The live indicator in the top bar.
  function setLive(state, text) {
    const node = $("live");
    node.className = `live live-${state}`;
    node.textContent = text;
  }

  // ---- scripts (and styles) loaded when first needed ----------------------------------------

  const UPLOT = "/static/vendor/uplot/uPlot.iife.min.js";
  const UPLOT_CSS = "/static/vendor/uplot/uPlot.min.css";
  const TRENDS = "/static/trends.js";
  const loading = new Map();  // src -> its promise: each file is loaded once

  function loadScript(src) {
    if (!loading.has(src)) {
      loading.set(src, new Promise((resolve, reject) => {
        const node = src.endsWith(".css") ? h("link", { rel: "stylesheet", href: src }) : h("script", { src });
        node.addEventListener("load", resolve);
        node.addEventListener("error", () => reject(new Error(`cannot load ${src}`)));
        document.head.append(node);
      }));
    }
    return loading.get(src);
  }

  // uPlot's script and its style, which only its charts use.
  const loadCharts = () => Promise.all([loadScript(UPLOT), loadScript(UPLOT_CSS)]);

  // ---- routing ------------------------------------------------------------------------------

  async function route() {
    const match = location.pathname.match(/^\/jobs\/([^/]+)\/?$/);
    // The overview asks for the fleet at once, beside the kinds: at 5,000 workers its answer is
    // the page's longest wait, and it needs nothing from the kinds table.
    if (!match) showView("overview-view");
    if (!match) RingleaderFleet.mount({ getJSON, h, jobLink, fmtTime, fmtAge });
    const charts = match ? loadCharts() : null;  // a job's page draws with uPlot
    try {
      KINDS = (await getJSON("/api/v1/kinds")).kinds;
    } catch (err) {
      console.warn("job kinds:", err);  // the pages still work; jobs show their kind as "unknown"
    }
    if (match) {
      try {
        await charts;
      } catch (err) {
        showError(err.message);
        return;
      }
      showView("job-view");
      new JobPage(decodeURIComponent(match[1])).start();
    } else {
      new Overview().start();
    }
  }

  function showView(id) {
    for (const view of document.querySelectorAll("main")) view.hidden = view.id !== id;
  }

  function showError(text) {
    if (askingForToken) return;  // the sign-in form is what the page needs now
    setLive("idle", "");
    $("error-text").textContent = text;
    showView("error-view");
  }

  // ---- overview: fleet + jobs ---------------------------------------------------------------

  class Overview {
    constructor() {
      this.jobs = new Map();        // id -> Job JSON (without results)
      this.incoming = new Map();    // id -> Job JSON: new jobs waiting behind the "N new jobs" bar
      this.nextBefore = null;
      this.keep = 50;               // jobs the table holds: the pages it loaded
      this.events = null;
      this.hadError = false;
    }

    start() {
      document.title = "ringleader";
      // Rows come and go only when the user asks (a filter, "older jobs", the "N new jobs" bar);
      // events patch rows in place. Redraws the user asked for still wait while the pointer is in
      // the table, so a click never loses its row.
      this.jobsTable = new RingleaderFleet.Steady($("jobs-body").closest("table"), () => this.drawJobs());
      $("jobs-new").addEventListener("click", () => this.showIncoming());
      window.addEventListener("hashchange", () => this.showTab());
      this.showTab();
      const select = $("filter-op");  // every op and kind listings filter on, from the table
      select.replaceChildren(h("option", { value: "" }, "all"),
        ...KINDS.flatMap((k) => k.listed_as).map((name) => h("option", { value: name }, name)));
      $("filter-state").addEventListener("change", () => this.loadJobs());
      $("filter-op").addEventListener("change", () => this.loadJobs());
      $("jobs-more").addEventListener("click", () => this.loadJobs(this.nextBefore));
      // Ages are computed when shown, every second, from each job's submission time: one text
      // per visible row, never a stale figure.
      setInterval(() => this.tickAges(), 1000);
      setInterval(() => this.refreshQueued(), QUEUED_REFRESH_MS);
      this.loaded = this.loadJobs();
      this.listen();
    }

    // A queued job's waiting reason changes without an event (a worker comes or goes): read the
    // queued jobs again every QUEUED_REFRESH_MS, so their rows say why they wait now, as
    // `ringleader watch` does.
    async refreshQueued() {
      if (![...this.jobs.values()].some((j) => j.state === "QUEUED")) return;
      const page = await getJSON(`${API}/jobs?state=QUEUED&limit=100&view=full`).catch(() => null);
      for (const job of page ? page.jobs : []) {
        const known = this.jobs.get(job.id);
        if (known && known.reason !== job.reason) this.onJobEvent({ state: { state: job.state, reason: job.reason } }, job);
      }
    }

    // -- tabs: jobs, fleet (location.hash; jobs by default)

    showTab() {
      const wanted = location.hash.slice(1).split("?")[0];  // "#trends?host=A&peer=B": the trends tab, at a link
      const tab = document.getElementById(`tab-${wanted}`) ? wanted : "jobs";
      for (const node of document.querySelectorAll(".tabs .tab")) node.classList.toggle("active", node.dataset.tab === tab);
      for (const pane of document.querySelectorAll("#overview-view .pane")) pane.hidden = pane.id !== `pane-${tab}`;
      this.tab = tab;
      if (tab === "jobs") this.tickAges();
      // The trends are read when first asked for: the jobs and the fleet do not wait for them.
      if (tab === "trends" && !this.trends) {
        this.trends = loadCharts().then(() => loadScript(TRENDS))
          .then(() => RingleaderTrends.mount({ getJSON, h, jobLink, fmtSize, fmtTime }))
          .catch((err) => { $("trends-summary").textContent = err.message; this.trends = null; });
      }
    }

    tickAges() {
      if (this.tab !== "jobs") return;
      const t = now();
      for (const cell of $("jobs-body").querySelectorAll("td.age")) {
        const text = fmtAge(t - Number(cell.dataset.t)) + " ago";
        if (cell.textContent !== text) cell.textContent = text;
      }
    }

    // -- jobs

    filters() {
      return { state: $("filter-state").value, op: $("filter-op").value };
    }

    matches(job) {
      const f = this.filters();
      return (!f.state || job.state === f.state) && (!f.op || jobListedAs(job) === f.op);
    }

    async loadJobs(before) {
      const f = this.filters();
      const query = new URLSearchParams({ limit: "50" });
      if (f.state) query.set("state", f.state);
      if (f.op) query.set("op", f.op);
      if (before) query.set("before", before);
      let page;
      try {
        page = await getJSON(`${API}/jobs?${query}&view=full`);
      } catch (error) {
        $("jobs-summary").textContent = `cannot list jobs: ${error.message}`;
        return;
      }
      if (!before) { this.jobs.clear(); this.incoming.clear(); }
      for (const job of page.jobs) this.jobs.set(job.id, job);
      this.nextBefore = page.next_before || null;
      this.keep = Math.max(50, this.jobs.size);
      this.renderJobs();
    }

    // The live table holds as many jobs as the pages it loaded: a new job pushes the oldest out
    // (one "older jobs" away), so an open tab's table does not grow without end.
    dropOldest() {
      const oldest = [...this.jobs.values()].sort((a, b) => a.created_at - b.created_at);
      while (this.jobs.size > this.keep) this.jobs.delete(oldest.shift().id);
      this.nextBefore = oldest[0].id;
    }

    renderJobs() {
      this.jobsTable.redraw();
      this.drawIncoming();
    }

    // New jobs (and rows gone from the filter) wait for the user: the bar says how many.
    drawIncoming() {
      const n = this.incoming.size;
      const bar = $("jobs-new");
      bar.hidden = !n;
      bar.textContent = n ? `${n} new job${n === 1 ? "" : "s"}: show` : "";
    }

    showIncoming() {
      for (const [id, job] of this.incoming) this.jobs.set(id, job);
      this.incoming.clear();
      for (const [id, job] of this.jobs) if (!this.matches(job)) this.jobs.delete(id);
      if (this.jobs.size > this.keep) this.dropOldest();
      this.renderJobs();
    }

    // (The jobs summary, running and queued counts of the whole coordinator, is the fleet view's.)
    // Rows already shown are kept (events patch them in place; ages every 10 s): a new job costs
    // one row, not the whole table.
    drawJobs() {
      const jobs = [...this.jobs.values()].sort((a, b) => b.created_at - a.created_at);
      const body = $("jobs-body");
      const shown = new Map([...body.rows].map((row) => [row.dataset.job, row]));
      const rows = jobs.map((job) => shown.get(job.id) || this.jobRow(job));
      rows.forEach((row, i) => { if (body.rows[i] !== row) body.insertBefore(row, body.rows[i] || null); });
      while (body.rows.length > rows.length) body.lastElementChild.remove();
      $("jobs-empty").hidden = jobs.length > 0;
      $("jobs-more").hidden = !this.nextBefore;
      this.tickAges();
    }

    jobRow(job) {
      const c = collective(job);
      const open = (e) => { if (!e.target.closest("a")) location.href = `/jobs/${encodeURIComponent(job.id)}`; };
      const gone = this.jobs.has(job.id) && !this.matches(job);  // kept still until the user asks
      return h("tr", { "data-job": job.id, class: `job job-${job.state.toLowerCase()}${gone ? " gone" : ""}`, onclick: open },
        h("td", {}, jobLink(job.id, shortId(job.id))),
        h("td", { class: "name" }, job.spec.name || ""),
        h("td", {}, stateBadge(job.state)),
        h("td", { class: "mono" }, jobWhat(job)),
        h("td", { class: "mono" }, c.dtype || ""),
        h("td", { class: "num" }, job.spec.world_size),
        h("td", {}, progressBar(job)),
        h("td", { class: "reason", title: job.reason }, job.reason || ""),
        h("td", { class: "num muted age", "data-t": job.created_at, title: fmtTime(job.created_at) },
          fmtAge(now() - job.created_at) + " ago"));
    }

    // One job's state, reason or progress changed: update its row (or add/remove it).
    onJobEvent(event, job) {
      if (event.progress) job.progress = event.progress;
      if (event.state) Object.assign(job, { state: event.state.state, reason: event.state.reason });
      const known = this.jobs.get(job.id);
      if (!known) {
        // A new job: behind the bar while rows are shown (it would push them down), at once into
        // an empty table. One that no longer matches the filter leaves the bar.
        const waiting = this.incoming.get(job.id);
        if (!this.matches(job)) { if (waiting) { this.incoming.delete(job.id); this.drawIncoming(); } return; }
        if (!waiting && this.nextBefore && job.created_at < this.oldestShown()) return;  // not on this page
        const fresh = { ...waiting, ...job, results: undefined };
        if (this.jobs.size) { this.incoming.set(job.id, fresh); this.drawIncoming(); return; }
        this.jobs.set(job.id, fresh);
        this.renderJobs();
        return;
      }
      // A shown job: its row changes in place (one that left the filter is greyed until the
      // user shows the new jobs), so nothing moves. An ended job stays ended: a listing read
      // before its end can answer after the event that said so.
      if (TERMINAL.has(known.state) && !TERMINAL.has(job.state)) return;
      this.jobs.set(job.id, { ...known, ...job, results: undefined });
      const row = document.querySelector(`tr[data-job="${CSS.escape(job.id)}"]`);
      if (row) patchRow(row, this.jobRow(this.jobs.get(job.id)));
    }

    // After a broken stream: shown jobs are brought up to date in place, new ones go behind the bar.
    async catchUp() {
      const page = await getJSON(`${API}/jobs?limit=50&view=full`).catch(() => null);
      for (const job of page ? [...page.jobs].reverse() : []) this.onJobEvent({}, job);
    }

    oldestShown() {
      return Math.min(...[...this.jobs.values()].map((j) => j.created_at));
    }

    listen() {
      this.events = new EventStream(`${API}/events`);
      // On every open, the first included: what changed between the listing's read and the
      // stream's start (a job that ended meanwhile) reaches no stream, so the rows are read again
      // once the listing is in; from then on the stream carries every change.
      this.events.onopen = () => {
        setLive("on", "live");
        (this.loaded || Promise.resolve()).then(() => this.catchUp());
        this.hadError = false;
      };
      this.events.onerror = () => {
        this.hadError = true;
        setLive("off", "reconnecting…");
      };
      // Frames are named after the event (state, progress, result); data: {event, job}.
      const onFrame = (message) => {
        const { event, job } = JSON.parse(message.data);
        this.onJobEvent(event, job);
      };
      for (const name of ["message", "state", "progress", "result"]) this.events.addEventListener(name, onFrame);
    }
  }

  // ---- a job's page -------------------------------------------------------------------------

  // Rows of a sweep are keyed by what makes them unique.
  const resultKey = (r) => `${r.op}|${r.dtype}|${r.reduce_op}|${r.in_place}|${r.size_bytes}`;
  const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);
  const positive = (v) => (num(v) !== null && v > 0 ? v : null);  // log axes cannot show 0

  // The fleet health checks' pages: each check's outcome (job.link_matrix, job.gpu_check,
  // job.sdc_check) as a table with a verdict per row, in words and a mark, not only a colour.
  const rankName = (job, rank) => {
    const w = (job.workers || []).find((x) => x.rank === rank);
    return w ? `${w.worker_id}@${w.host}` : `rank ${rank}`;
  };
  const verdictCell = (flagged, bad) => (flagged ? `✕ ${bad}` : "✓ ok");
  const byFlaggedThenRank = (a, b) => (b.flagged ? 1 : 0) - (a.flagged ? 1 : 0) || (a.rank ?? a.a) - (b.rank ?? b.a) || (a.b ?? 0) - (b.b ?? 0);
  const CHECK_VIEWS = {
    link_matrix: {
      charts: {},
      title: (job) => `link matrix · ${job.spec.world_size} workers · ${((job.link_matrix || {}).links || []).length} links`
        + ` in ${(job.link_matrix || {}).rounds ?? 0} rounds of disjoint pairs`,
      columns: [
        { head: "link", cell: (r) => `${r.a} ↔ ${r.b}`, title: (r) => `${r.aName} ↔ ${r.bName}` },
        { head: "workers", cell: (r) => `${r.aName} ↔ ${r.bName}` },
        { head: "round", num: true, cell: (r) => r.round ?? 0 },
        { head: "latency", unit: "(µs)", num: true, cell: (r) => fmtFixed(r.latency_us ?? 0) },
        { head: "bandwidth", unit: "(GB/s)", num: true, strong: true, cell: (r) => fmtFixed(r.gbps ?? 0) },
        { head: "vs peers", unit: "(×)", num: true, cell: (r) => fmtFixed(r.ratio ?? 0), bad: (r) => r.flagged },
        { head: "vs baseline", unit: "(×)", num: true, cell: (r) => (r.baseline_ratio ? fmtFixed(r.baseline_ratio) : "—") },
        { head: "#wrong", num: true, cell: (r) => r.wrong ?? 0, bad: (r) => r.wrong > 0 },
        { head: "verdict", cell: (r) => verdictCell(r.flagged, "slow"), bad: (r) => r.flagged },
      ],
      rows: (job) => [...((job.link_matrix || {}).links || [])].sort(byFlaggedThenRank)
        .map((r) => ({ ...r, aName: rankName(job, r.a ?? 0), bName: rankName(job, r.b ?? 0) })),
      match: (r) => `${r.a}|${r.b}`,
      metric: { label: "bandwidth", unit: "GB/s", value: (r) => r.gbps },
      matrix: (job) => {
        const lm = job.link_matrix || {};
        const values = (lm.matrix || []).flatMap((row) => row.gbps || []).filter((v) => v > 0).sort((a, b) => a - b);
        return { matrix: (lm.matrix || []).map((row) => row.gbps || []), median: values[Math.floor(values.length / 2)] || 0,
          title: `Link heat map at ${fmtSize(lm.size_bytes)}B` };
      },
      foot(job, rows) {
        const lm = job.link_matrix || {};
        const flagged = rows.filter((r) => r.flagged).length;
        const hosts = new Set((job.workers || []).map((w) => w.host)).size;
        return rows.length ? `# Median link : ${fmtFixed(lm.median_same_host_gbps ?? 0)} GB/s same host`
          + (hosts > 1 ? `, ${fmtFixed(lm.median_cross_host_gbps ?? 0)} GB/s across hosts` : " (one host)")
          + `\n# Flagged links : ${flagged}` : "";
      },
    },
    gpu_check: {
      charts: {},
      title: (job) => `GPU check · ${job.spec.world_size} workers, each against the median of its model`,
      columns: [
        { head: "rank", num: true, cell: (r) => r.rank ?? 0 },
        { head: "worker", cell: (r) => r.worker_id },
        { head: "device", cell: (r) => r.device },
        { head: "matmul", unit: "(TFLOP/s)", num: true, strong: true, cell: (r) => fmtFixed(r.tflops ?? 0) },
        { head: "vs model", unit: "(×)", num: true, cell: (r) => fmtFixed(r.tflops_ratio ?? 0) },
        { head: "copy", unit: "(GB/s)", num: true, cell: (r) => fmtFixed(r.copy_gbps ?? 0) },
        { head: "vs model", unit: "(×)", num: true, cell: (r) => fmtFixed(r.copy_ratio ?? 0) },
        { head: "verdict", cell: (r) => verdictCell(r.flagged, "slow"), bad: (r) => r.flagged },
      ],
      rows: (job) => [...((job.gpu_check || {}).workers || [])].sort(byFlaggedThenRank),
      match: (r) => r.worker_id,
      metric: { label: "matmul", unit: "TFLOP/s", value: (r) => r.tflops },
      foot(job, rows) {
        const g = job.gpu_check || {};
        return rows.length ? `# matrix product ${g.matmul_n ?? ""}² ${g.dtype || ""}, memory copy ${fmtSize(g.copy_bytes)}B\n`
          + `# Flagged workers : ${rows.filter((r) => r.flagged).length}` : "";
      },
    },
    sdc_check: {
      charts: {},
      title: (job) => `silent data corruption check · ${job.spec.world_size} workers`,
      columns: [
        { head: "rank", num: true, cell: (r) => r.rank ?? 0 },
        { head: "worker", cell: (r) => r.worker_id },
        { head: "device", cell: (r) => r.device },
        { head: "checksum", cell: (r) => r.checksum, bad: (r) => r.checksum !== r.majority,
          title: (r) => (r.checksum === r.majority ? "the majority's checksum" : `the majority's is ${r.majority}`) },
        { head: "collectives #wrong", num: true, cell: (r) => r.collective_wrong ?? 0, bad: (r) => r.collective_wrong > 0 },
        { head: "verdict", cell: (r) => verdictCell(r.flagged, "corrupt"), bad: (r) => r.flagged },
      ],
      rows: (job) => {
        const majority = (job.sdc_check || {}).majority_checksum || "";
        return [...((job.sdc_check || {}).workers || [])].sort(byFlaggedThenRank).map((r) => ({ ...r, majority }));
      },
      match: (r) => r.worker_id,
      metric: { label: "wrong", unit: "", value: (r) => r.collective_wrong },
      foot(job, rows) {
        return rows.length ? `# Majority checksum : ${(job.sdc_check || {}).majority_checksum || ""}\n`
          + `# Flagged workers : ${rows.filter((r) => r.flagged).length}` : "";
      },
    },
  };

  // What a job page shows, per job kind: up to two charts against a shared x (slots a and b),
  // the lines a job contributes to them, and the table beside them.
  const VIEWS = {
    collective: {
      charts: {
        a: { name: "busbw", title: "Bus bandwidth", unit: "GB/s", x: "size" },
        b: { name: "time", title: "Time per op", unit: "µs", x: "size" },
      },
      // One line per op (and placement, should a job mix them).
      lines(job, results) {
        const byOp = groupBy(results, (r) => r.op + (r.in_place ? " in-place" : ""));
        return [...byOp].map(([op, rows]) => ({
          name: op,
          xs: rows.map((r) => r.size_bytes),
          a: rows.map((r) => positive(r.busbw_gbps)),
          b: rows.map((r) => positive(r.time_us)),
        }));
      },
      title(job) {
        const c = job.spec.collective;
        return `${c.op} · ${job.spec.world_size} ranks · ${placement(c.op, c.in_place, c.algo)}`;
      },
      // nccl-tests' columns.
      columns: [
        { head: "size", unit: "(B)", num: true, cell: (r) => r.size_bytes, title: (r) => fmtBytesLong(r.size_bytes) },
        { head: "count", unit: "(elements)", num: true, cell: (r) => r.count },
        { head: "type", cell: (r) => r.dtype },
        { head: "redop", cell: (r) => (REDUCING_OPS.has(r.op) ? r.reduce_op : "none") },
        { head: "root", num: true, cell: (r) => (ROOTED_OPS.has(r.op) ? r.root : -1) },
        { head: "time", unit: "(µs)", num: true, cell: (r) => fmtFixed(r.time_us),
          title: (r) => `min ${fmtFixed(r.time_min_us)} · p50 ${fmtFixed(r.time_p50_us)} · p99 `
            + `${fmtFixed(r.time_p99_us)} µs; slowest rank ${r.slowest_rank}` },
        { head: "algbw", unit: "(GB/s)", num: true, cell: (r) => fmtFixed(r.algbw_gbps) },
        { head: "busbw", unit: "(GB/s)", num: true, strong: true, cell: (r) => fmtFixed(r.busbw_gbps) },
        { head: "#wrong", num: true, cell: (r) => r.wrong, bad: (r) => r.wrong > 0 },
      ],
      rows: (job, results) => results,
      // The matching row of the compared job, and the value to compare: placement is not part
      // of the key, so a job compares with its --in-place twin.
      match: (r) => `${r.op}|${r.size_bytes}`,
      metric: { label: "busbw", unit: "GB/s", value: (r) => r.busbw_gbps },
      foot(job, rows) {
        if (!rows.length) return "";
        const avg = rows.reduce((s, r) => s + r.busbw_gbps, 0) / rows.length;
        const wrong = rows.reduce((s, r) => s + r.wrong, 0);
        return `# Out of bounds values : ${wrong} ${wrong ? "FAILED" : "OK"}\n`
          + `# Avg bus bandwidth    : ${fmtFixed(avg)} GB/s`;
      },
      csv: true,
    },

    p2p: {
      charts: {
        a: { name: "bandwidth", title: "Bandwidth", unit: "GB/s", x: "size" },
        b: { name: "latency", title: "One-way latency", unit: "µs", x: "size" },
      },
      lines(job) {
        const byPair = groupBy(p2pRows(job), (r) => `${r.src}→${r.dst}${r.mode && r.mode !== "blocking" ? " " + r.mode : ""}`);
        return [...byPair].map(([pair, rows]) => ({
          name: `p2p ${pair}`,
          xs: rows.map((r) => r.size_bytes),
          a: rows.map((r) => positive(r.bandwidth_gbps)),
          b: rows.map((r) => positive(r.latency_us)),
        }));
      },
      title(job) {
        const p = job.spec.p2p;
        return `point-to-point · ${p.pairwise ? "every pair" : "rank 0 ↔ 1"} · ${p.mode || "blocking"}`;
      },
      columns: [
        { head: "src", num: true, cell: (r) => r.src },
        { head: "dst", num: true, cell: (r) => r.dst },
        { head: "size", unit: "(B)", num: true, cell: (r) => r.size_bytes, title: (r) => fmtBytesLong(r.size_bytes) },
        { head: "latency", unit: "(µs)", num: true, cell: (r) => fmtFixed(r.latency_us),
          title: (r) => `min ${fmtFixed(r.latency_min_us)} µs` },
        { head: "bandwidth", unit: "(GB/s)", num: true, strong: true, cell: (r) => fmtFixed(r.bandwidth_gbps) },
        { head: "#wrong", num: true, cell: (r) => r.wrong, bad: (r) => r.wrong > 0 },
      ],
      rows: (job) => p2pRows(job),
      matrix: (job) => {
        const p = job.p2p || {};
        return { matrix: (p.matrix || []).map((row) => row.gbps || []), median: p.median_gbps || 0,
          title: `Bandwidth matrix at ${fmtSize(p.matrix_size_bytes)}B` };
      },
      match: (r) => `${r.src}|${r.dst}|${r.size_bytes}`,
      metric: { label: "bandwidth", unit: "GB/s", value: (r) => r.bandwidth_gbps },
      foot(job, rows) {
        const p = job.p2p || {};
        const flagged = (p.flagged || []).map((f) => `${f.src}→${f.dst} ${fmtFixed(f.gbps)} GB/s (${fmtFixed(f.ratio_to_median)}× median)`);
        const wrong = rows.reduce((s, r) => s + r.wrong, 0);
        return [rows.length ? `# Out of bounds values : ${wrong} ${wrong ? "FAILED" : "OK"}` : "",
          p.median_gbps ? `# Median pair bandwidth at ${fmtSize(p.matrix_size_bytes)}B : ${fmtFixed(p.median_gbps)} GB/s` : "",
          flagged.length ? `# Slow pairs : ${flagged.join(", ")}` : ""].filter(Boolean).join("\n");
      },
    },

    // Every all_reduce implementation at every size: one line per algo; the dispatch table below.
    algo_sweep: {
      charts: {
        a: { name: "time", title: "Time per op", unit: "µs", x: "size" },
        b: { name: "busbw", title: "Bus bandwidth", unit: "GB/s", x: "size" },
      },
      lines(job) {
        return [...groupBy(sweepRows(job), (r) => r.algo)].map(([algo, rows]) => ({
          name: algo,
          xs: rows.map((r) => r.size_bytes),
          a: rows.map((r) => positive(r.time_us)),
          b: rows.map((r) => positive(r.busbw_gbps)),
        }));
      },
      title: (job) => `algo sweep · all_reduce · ${job.spec.world_size} ranks · ${job.spec.algo_sweep.graph ? "graph" : "eager"} mode`,
      columns: [
        { head: "size", unit: "(B)", num: true, cell: (r) => r.size_bytes, title: (r) => fmtBytesLong(r.size_bytes) },
        { head: "algo", cell: (r) => r.algo },
        { head: "time", unit: "(µs)", num: true, strong: true, cell: (r) => fmtFixed(r.time_us),
          title: (r) => `p50 ${fmtFixed(r.time_p50_us)} · p99 ${fmtFixed(r.time_p99_us)} µs; ${r.iters} iterations` },
        { head: "busbw", unit: "(GB/s)", num: true, cell: (r) => fmtFixed(r.busbw_gbps) },
        { head: "#wrong", num: true, cell: (r) => r.wrong, bad: (r) => r.wrong > 0 },
      ],
      rows: (job) => sweepRows(job),
      match: (r) => `${r.algo}|${r.size_bytes}`,
      metric: { label: "time", unit: "µs", value: (r) => r.time_us },
      foot(job) {
        const ranges = (job.algo_sweep && job.algo_sweep.table) || [];
        return ranges.map((t) => `# ${fmtSize(t.min_bytes)}B ${t.max_bytes ? "up to " + fmtSize(t.max_bytes) + "B" : "and above"}`
          + ` : ${t.algo}`).join("\n");
      },
    },

    gradient_average: {
      charts: {},
      title: () => "gradient averaging: on device vs staged through the host",
      facts: (job) => {
        const g = job.gradient_average || {};
        if (!g.size_bytes) return [];
        return [
          ["gradient", g.size_bytes ? fmtBytesLong(g.size_bytes) : ""],
          ["elements", g.numel],
          ["on device", g.device_time_us ? `${fmtFixed(g.device_time_us)} µs` : ""],
          ["via host", g.host_time_us ? `${fmtFixed(g.host_time_us)} µs` : ""],
          ["speedup", g.speedup ? `${fmtFixed(g.speedup)}×` : ""],
          ["device check", g.size_bytes ? (g.device_ok ? "OK" : "FAILED") : ""],
          ["host check", g.size_bytes ? (g.host_ok ? "OK" : "FAILED") : ""],
          ["max relative error", g.size_bytes ? String(g.max_rel_error) : ""],
        ];
      },
    },

    ...CHECK_VIEWS,

    train: {
      charts: { a: { name: "loss", title: "Training loss", unit: "loss", x: "step" } },
      lines(job) {
        const loss = (job.train && job.train.loss) || [];
        return loss.length ? [{ name: `${job.train.model || "train"}`, xs: loss.map((_, i) => i + 1), a: loss.map(num) }] : [];
      },
      title: (job) => `data-parallel training · ${job.spec.train.model || "linear"}`,
      facts: (job) => {
        const t = job.train || {};
        const loss = t.loss || [];
        if (!t.steps) return [];
        return [
          ["model", t.model], ["parameters", t.params], ["steps", t.steps],
          ["batch per rank", t.batch_size], ["learning rate", t.lr],
          ["first / last loss", loss.length ? `${loss[0].toPrecision(4)} → ${loss[loss.length - 1].toPrecision(4)}` : ""],
          ["step time", t.step_time_ms ? `${fmtFixed(t.step_time_ms)} ms` : ""],
          ["compute / comm", t.step_time_ms ? `${fmtFixed(t.compute_ms)} / ${fmtFixed(t.comm_ms)} ms` : ""],
          ["comm share", t.step_time_ms ? `${(100 * t.comm_share).toFixed(1)} %` : ""],
          ["samples/s", t.samples_per_s ? fmtFixed(t.samples_per_s) : ""],
          ["replica divergence", t.steps ? String(t.param_max_abs_diff) : ""],
        ];
      },
    },
  };

  function groupBy(items, keyOf) {
    const groups = new Map();
    for (const item of items) {
      const key = keyOf(item);
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(item);
    }
    return groups;
  }

  function sweepRows(job) {
    return [...((job.algo_sweep && job.algo_sweep.results) || [])].sort((a, b) =>
      a.algo.localeCompare(b.algo) || a.size_bytes - b.size_bytes);
  }

  function p2pRows(job) {
    return [...((job.p2p && job.p2p.rows) || [])].sort((a, b) =>
      a.src - b.src || a.dst - b.dst || a.size_bytes - b.size_bytes);
  }

  class JobPage {
    constructor(id) {
      this.id = id;
      this.job = null;              // Job JSON without `results`
      this.results = new Map();     // resultKey -> SizeResult JSON (collective sweeps)
      this.compare = null;          // the compared job, with `results`
      this.events = null;
      this.charts = { a: null, b: null };
      this.chartKey = "";
      this.redrawQueued = false;
    }

    get view() {
      return VIEWS[jobKind(this.job)] || { charts: {}, title: () => jobKind(this.job), facts: () => [] };
    }

    async start() {
      try {
        await this.load();
      } catch (error) {
        showError(error.status === 404 ? `No job ${this.id}.` : `Cannot load job ${this.id}: ${error.message}`);
        return;
      }
      const base = `${API}/jobs/${encodeURIComponent(this.id)}`;
      // Sweeps download their rows; other kinds the whole job (their result lives in it). The page
      // reads full documents (?view=full: epoch times, every field); the REST default is lean.
      $("dl-json").href = this.view.csv ? `${base}/results?format=json` : base;
      tokenDownload($("dl-json"), `${this.id}.json`);
      $("dl-csv").href = `${base}/results?format=csv`;
      tokenDownload($("dl-csv"), `${this.id}.csv`);
      $("dl-csv").hidden = !this.view.csv;
      $("compare").addEventListener("change", () => this.setCompare($("compare").value));
      new ResizeObserver(() => this.resizeCharts()).observe($("chart-a"));
      this.render();
      if (TERMINAL.has(this.job.state)) setLive("idle", "finished");
      else this.listen();
      await this.fillCompareChoices();
      const wanted = new URLSearchParams(location.search).get("compare");
      if (wanted) await this.setCompare(wanted);
    }

    async load() {
      const job = await getJSON(`${API}/jobs/${encodeURIComponent(this.id)}?view=full`);
      // The header comes from the kind's row of the coordinator's table (ringleader/headers.py),
      // so a kind added there is shown in its own words; without it, the kind's name.
      if (!this.header) {
        this.header = (await getJSON(`${API}/jobs/${encodeURIComponent(this.id)}/header`).catch(() => null))?.header;
      }
      this.results.clear();
      for (const r of job.results || []) this.results.set(resultKey(r), r);
      delete job.results;
      this.job = job;
    }

    listen() {
      this.events = new EventStream(`${API}/jobs/${encodeURIComponent(this.id)}/events`);
      this.events.onopen = () => setLive("on", "live");
      this.events.onerror = () => {
        if (this.events.readyState !== EventStream.CLOSED && !TERMINAL.has(this.job.state)) setLive("off", "reconnecting…");
      };
      this.events.addEventListener("progress", (m) => {
        this.job.progress = JSON.parse(m.data).progress;
        this.renderHead();
      });
      this.events.addEventListener("result", (m) => {
        const r = JSON.parse(m.data).result;
        this.results.set(resultKey(r), r);
        this.queueRedraw();
      });
      this.events.addEventListener("state", async (m) => {
        const change = JSON.parse(m.data).state;
        Object.assign(this.job, { state: change.state, reason: change.reason });
        if (TERMINAL.has(change.state)) {
          this.events.close();  // the stream ends here; an EventStream would reconnect
          setLive("idle", "finished");
        }
        // RUNNING brings workers, backend and start time; a finished job its complete results
        // (rank 0's final report replaces rows that streamed in).
        try { await this.load(); } catch (_) { /* keep what we have */ }
        this.render();
      });
    }

    async fillCompareChoices() {
      let jobs = [];
      try {
        jobs = (await getJSON(`${API}/jobs?limit=200&view=full`)).jobs;
      } catch (_) { /* leave the selector empty */ }
      const kind = jobKind(this.job);
      const what = jobWhat(this.job);
      const candidates = jobs.filter((j) => j.id !== this.id && j.state !== "QUEUED" && jobKind(j) === kind);
      const option = (j) => {
        const dtype = collective(j).dtype;
        const label = [shortId(j.id), `${jobWhat(j)}${dtype ? " " + dtype : ""}`, `${j.spec.world_size} ranks`,
          j.backend, j.spec.name].filter(Boolean).join(" · ")
          + (j.state === "SUCCEEDED" ? "" : ` (${j.state.toLowerCase()})`);
        return h("option", { value: j.id }, label);
      };
      const same = candidates.filter((j) => jobWhat(j) === what);
      const other = candidates.filter((j) => jobWhat(j) !== what);
      const select = $("compare");
      select.replaceChildren(h("option", { value: "" }, "—"));
      if (same.length) select.append(h("optgroup", { label: what }, same.map(option)));
      if (other.length) select.append(h("optgroup", { label: "others" }, other.map(option)));
      select.parentElement.hidden = !candidates.length;
    }

    async setCompare(id) {
      const url = new URL(location.href);
      this.compare = null;
      url.searchParams.delete("compare");
      if (id) {
        try {
          this.compare = await getJSON(`${API}/jobs/${encodeURIComponent(id)}?view=full`);
          url.searchParams.set("compare", id);
          if (![...$("compare").options].some((o) => o.value === id)) {
            $("compare").append(h("option", { value: id }, shortId(id)));
          }
        } catch (_) { /* an unknown id: compare with nothing */ }
      }
      $("compare").value = this.compare ? this.compare.id : "";
      history.replaceState(null, "", url);
      this.render();
    }

    sortedResults(results) {
      return [...results].sort((a, b) =>
        a.op.localeCompare(b.op) || (a.in_place - b.in_place) || (a.size_bytes - b.size_bytes));
    }

    queueRedraw() {
      if (this.redrawQueued) return;
      this.redrawQueued = true;
      requestAnimationFrame(() => {
        this.redrawQueued = false;
        this.render();
      });
    }

    render() {
      this.renderHead();
      this.renderCharts();
      this.renderTable();
    }

    // -- header: title, state, facts, progress, reason

    renderHead() {
      const job = this.job;
      const c = collective(job);
      document.title = `${shortId(job.id)} ${jobWhat(job)} · ringleader`;
      $("job-title").replaceChildren(h("span", { class: "mono" }, job.id));
      if (job.spec.name) $("job-title").append(h("span", { class: "job-name" }, job.spec.name));
      $("job-state").replaceWith(Object.assign(stateBadge(job.state), { id: "job-state" }));
      $("job-warm").hidden = !job.warm_start;

      const kind = jobKind(job);
      const spec = job.spec[kind] || {};
      const workers = [...(job.workers || [])].sort((a, b) => a.rank - b.rank)
        .map((w) => `${w.rank}: ${w.worker_id}@${w.host} ${w.device}`).join(", ");
      const ended = job.finished_at || (TERMINAL.has(job.state) ? 0 : now());
      const what = this.header || jobKind(job);
      const sizes = spec.sizes && spec.sizes.length
        ? `${spec.sizes.length} size${spec.sizes.length === 1 ? "" : "s"}, ${fmtSize(Math.min(...spec.sizes))}–${fmtSize(Math.max(...spec.sizes))}`
        : spec.max_bytes ? `${fmtSize(spec.min_bytes)}–${fmtSize(spec.max_bytes)}, ×${spec.factor}` : null;
      const facts = [
        ["job", what],
        ["ranks", `${job.spec.world_size}${job.backend ? " · " + job.backend : ""}`],
        sizes ? ["sizes", sizes] : null,
        spec.iters ? ["iters", `${spec.iters}${spec.warmup !== undefined ? ` + ${spec.warmup} warm-up` : ""}`] : null,
        ["submitted", fmtTime(job.created_at)],
        ["ran", job.started_at ? fmtDuration(ended - job.started_at) : "—"],
        ["workers", workers || "—"],
      ].filter(Boolean);
      $("job-facts").replaceChildren(...facts.map(([k, v]) =>
        h("div", { class: `fact fact-${k}` }, h("dt", {}, k), h("dd", {}, v))));

      const row = $("job-progress-row");
      row.hidden = job.state === "SUCCEEDED" || !(job.progress && job.progress.total);
      row.replaceChildren(progressBar(job));
      const reason = $("job-reason");
      reason.textContent = job.reason || "";
      reason.className = `reason reason-${job.state.toLowerCase()}`;
    }

    // -- charts

    // This job's lines, then the compared job's (dashed), on one x axis (gaps are spanned).
    chartLines() {
      const view = this.view;
      if (!view.lines) return [];
      const comparing = this.compare && VIEWS[jobKind(this.compare)] === view;
      // Lines are named after what they show, and after their job once there are two jobs.
      const lines = view.lines(this.job, this.sortedResults(this.results.values())).map((l) => ({
        ...l, label: comparing ? `${l.name} · ${shortId(this.job.id)}` : l.name, compared: false }));
      if (comparing) {
        for (const l of view.lines(this.compare, this.sortedResults(this.compare.results || []))) {
          lines.push({ ...l, label: `${l.name} · ${shortId(this.compare.id)}`, compared: true });
        }
      }
      return lines;
    }

    chartData(lines, slot, xKind) {
      let xs = [...new Set(lines.flatMap((l) => l.xs))].sort((a, b) => a - b);
      if (xKind === "size") xs = xs.filter((x) => x > 0);  // a log axis has no 0 (barrier)
      return [xs, ...lines.map((l) => {
        const at = new Map(l.xs.map((x, i) => [x, l[slot][i]]));
        return xs.map((x) => (at.has(x) ? at.get(x) : null));
      })];
    }

    renderCharts() {
      const view = this.view;
      const lines = this.chartLines();
      // A finished job with nothing to draw (it failed early, or its kind has no chart): no panel.
      const slots = lines.length || !TERMINAL.has(this.job.state) ? Object.keys(view.charts) : [];
      $("charts").hidden = !slots.length;
      $("job-body").classList.toggle("no-charts", !slots.length);
      const key = lines.map((l) => l.label).join("\n");
      const exposed = { series: lines.map((l) => l.label) };
      for (const slot of ["a", "b"]) {
        const spec = slots.includes(slot) ? view.charts[slot] : null;
        $(`chart-${slot}-title`).hidden = !spec;
        $(`chart-${slot}`).hidden = !spec;
        if (!spec) {
          if (this.charts[slot]) this.charts[slot].destroy();
          this.charts[slot] = null;
          continue;
        }
        const data = this.chartData(lines, slot, spec.x);
        if (key !== this.chartKey || !this.charts[slot]) {
          if (this.charts[slot]) this.charts[slot].destroy();
          $(`chart-${slot}-title`).replaceChildren(spec.title, " ",
            h("span", { class: "muted" }, spec.x === "size" ? `(${spec.unit}, log-log)` : `(per ${spec.x})`));
          this.charts[slot] = this.makeChart($(`chart-${slot}`), lines, data, spec);
        } else {
          this.charts[slot].setData(data);
        }
        exposed[spec.name] = this.charts[slot];
        $(`chart-${slot}`).classList.toggle("empty", !data[0].length);
      }
      this.chartKey = key;
      window.ringleaderCharts = exposed;
    }

    makeChart(container, lines, data, spec) {
      const sized = spec.x === "size";
      const series = [
        { label: sized ? "size" : spec.x,
          value: (u, v) => (v === null || v === undefined ? "—" : sized ? fmtSize(v) + "B" : String(v)) },
        ...lines.map((l, i) => ({
          label: l.label,
          stroke: COLORS[i % COLORS.length],
          width: l.compared ? 1.5 : 2,
          dash: l.compared ? [6, 4] : undefined,
          spanGaps: true,
          points: { show: sized, size: l.compared ? 5 : 6, fill: "#fff" },
          value: (u, v) => (v === null || v === undefined ? "—" : sized ? `${fmtFixed(v)} ${spec.unit}` : v.toPrecision(4)),
        })),
      ];
      const axis = { stroke: "#4b5563", grid: { stroke: "#eceef1", width: 1 }, ticks: { stroke: "#d1d5db", width: 1 } };
      const options = {
        width: Math.max(320, container.clientWidth),
        height: 210,
        scales: sized
          ? { x: { time: false, distr: 3, log: 2 }, y: { distr: 3, log: 10, range: fullDecades } }
          : { x: { time: false } },
        axes: [
          { ...axis, values: sized ? (u, splits) => splits.map((v) => fmtSize(v)) : undefined, space: sized ? 44 : 50 },
          { ...axis, values: (u, splits) => splits.map(fmtTick), splits: sized ? logSplits : undefined,
            filter: sized ? (u, splits) => splits : undefined,  // logSplits is sparse: label them all
            size: 56, label: spec.unit, labelSize: 20 },
        ],
        series,
        cursor: { points: { size: 8 } },
        legend: { live: true },
      };
      container.replaceChildren();
      const chart = new uPlot(options, data, container);
      container.append(h("p", { class: "muted chart-empty" },
        TERMINAL.has(this.job.state) ? "No results." : "Waiting for the first results…"));
      return chart;
    }

    resizeCharts() {
      for (const [slot, chart] of Object.entries(this.charts)) {
        if (!chart) continue;
        const width = Math.max(320, $(`chart-${slot}`).clientWidth);
        if (width !== chart.width) chart.setSize({ width, height: chart.height });
      }
    }

    // -- the table beside the charts

    renderTable() {
      const view = this.view;
      $("results-title").textContent = view.title(this.job);
      $("matrix").hidden = true;
      if (view.facts) return this.renderFactsTable(view);

      const rows = view.rows(this.job, this.sortedResults(this.results.values()));
      const compare = this.compare && VIEWS[jobKind(this.compare)] === view ? this.compare : null;
      const theirs = compare ? new Map(view.rows(compare, this.sortedResults(compare.results || [])).map((r) => [view.match(r), r])) : null;

      const heads = view.columns.map((col) => h("th", { class: col.num ? "num" : "" },
        col.head, col.unit ? [h("br"), h("span", {}, col.unit)] : null));
      if (compare) {
        heads.push(h("th", { class: "num", title: `${view.metric.label} against job ${compare.id}` },
          "vs", h("br"), h("span", {}, "(%)")));
      }
      $("results-head").replaceChildren(h("tr", {}, heads));

      $("results-body").replaceChildren(...rows.map((r) => {
        const cells = view.columns.map((col) => h("td", {
          class: [col.num ? "num" : "", col.strong ? "strong" : "", col.bad && col.bad(r) ? "bad" : ""].join(" ").trim(),
          title: col.title ? col.title(r) : null,
        }, col.cell(r)));
        if (compare) cells.push(this.deltaCell(view, r, theirs.get(view.match(r))));
        return h("tr", { "data-size": r.size_bytes, class: r.wrong ? "wrong" : "" }, cells);
      }));

      const foot = view.foot(this.job, rows);
      $("results-foot").textContent = foot || (rows.length ? "" : TERMINAL.has(this.job.state) ? "No results." : "Waiting for results…");
      if (view.matrix) this.renderMatrix(view.matrix(this.job));
    }

    deltaCell(view, mine, theirs) {
      const a = mine && view.metric.value(mine);
      const b = theirs && view.metric.value(theirs);
      if (!(a > 0 && b > 0)) return h("td", { class: "num muted" }, "—");
      const pct = 100 * (a / b - 1);
      return h("td", { class: `num ${pct >= 0 ? "better" : "worse"}`,
        title: `${view.metric.label} ${fmtFixed(a)} vs ${fmtFixed(b)} ${view.metric.unit}` },
      `${pct >= 0 ? "+" : ""}${pct.toFixed(0)}%`);
    }

    // Kinds with one result (gradient averaging, training): a list of figures, side by side
    // with the compared job's.
    renderFactsTable(view) {
      const compare = this.compare && VIEWS[jobKind(this.compare)] === view ? this.compare : null;
      const mine = view.facts(this.job);
      const theirs = compare ? new Map(view.facts(compare)) : null;
      $("results-table").hidden = !mine.length;
      $("results-table").classList.add("facts-table");
      $("results-head").replaceChildren(h("tr", {}, h("th", {}, ""),
        h("th", { class: "num mono" }, shortId(this.job.id)),
        compare ? h("th", { class: "num mono" }, shortId(compare.id)) : null));
      $("results-body").replaceChildren(...mine.map(([k, v]) => h("tr", {},
        h("td", { class: "label" }, k), h("td", { class: "num" }, v ?? ""),
        compare ? h("td", { class: "num" }, theirs.get(k) ?? "") : null)));
      $("results-foot").textContent = mine.length ? ""
        : TERMINAL.has(this.job.state) ? "No results." : "Results appear when the job finishes.";
    }

    // A pair matrix (pairwise p2p, link matrix): bandwidth from each rank (row) to each other
    // (column), shaded against the median, slow pairs in bold red.
    renderMatrix({ matrix, median, title }) {
      if (!matrix.length) return;
      const n = matrix.length;
      const cell = (v) => {
        if (v < 0) return h("td", { class: "diag" }, "");
        const ratio = median ? v / median : 1;
        const shade = Math.max(0, Math.min(1, ratio));
        return h("td", { class: `num${ratio < 0.8 ? " slow" : ""}`, style: `background: rgba(37, 99, 235, ${(0.08 + 0.3 * shade).toFixed(2)})`,
          title: `${fmtFixed(v)} GB/s (${fmtFixed(ratio)}× median)` }, fmtFixed(v));
      };
      const node = $("matrix");
      node.replaceChildren(h("h3", {}, title, " ", h("span", { class: "muted" }, "(GB/s, src ↓ dst →)")),
        h("table", { class: "grid" },
          h("thead", {}, h("tr", {}, h("th", {}, ""), [...Array(n).keys()].map((j) => h("th", { class: "num" }, j)))),
          h("tbody", {}, matrix.map((row, i) => h("tr", {}, h("th", {}, i), row.map(cell))))));
      node.hidden = false;
    }
  }

  setUpLogin();
  route();
})();
