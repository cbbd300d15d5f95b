// ringleader dashboard: the fleet health view of the overview ("/"), built for thousands of GPUs.
//
// Every worker is one small cell in its host's block, coloured by what matters most about it
// (failed verdict, disconnected, quarantined, executor stopped or unresponsive, stale heartbeat,
// suspect, busy, idle); what is wrong is listed first; search and a filter dim the rest; a click
// on a cell or a listed worker opens its evidence (verdict, check, figure, expectation, the check
// job); the latest link matrix is a heat map with its flagged links marked and listed.
//
// It follows GET /api/v1/fleet?since=VERSION&wait=S (dashboard/fleet_view.py): a long poll that
// answers only the records changed since the version the page holds. A change updates its cell in
// place (class and title); no element the user may click is rebuilt under the pointer: the
// attention list and the detail panel wait while the pointer or focus is in them.
//
// app.js mounts it: RingleaderFleet.mount({getJSON, h, jobLink, fmtTime, fmtAge}); it returns
// the view, whose `jobs` holds the coordinator's running and queued job counts (all of them).
"use strict";

window.RingleaderFleet = (function () {
  const API = "/api/v1";
  const WAIT_S = 25;
  const ATTENTION_SHOWN = 60;
  // Plain code-unit order: ids, hosts and device types are ASCII, and localeCompare (an ICU
  // collator) took 10 ms of a 73 ms first drawing of 5,000 cells (a CPU profile of one load).
  const byText = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  // 5000 -> "5,000" without toLocaleString, which builds an ICU number format on every call
  // (8 ms of that first drawing, for a dozen numbers).
  const fmt = (v) => String(v).replace(/\B(?=(\d{3})+(?!\d))/g, ",");

  // A worker's look, most serious first: [class, label, rank in the attention list or null].
  // The arrays are shared (status() runs several times per worker on a full answer); never changed.
  const LOOK = Object.fromEntries(Object.entries({
    down: ["down", "disconnected", 1], failed: ["failed", "failed", 0],
    quarantined: ["quarantined", "quarantined", 2], cordoned: ["quarantined", "cordoned", 2],
    stopped: ["executor", "executor stopped", 3], unresponsive: ["executor", "executor unresponsive", 3],
    stale: ["stale", "no recent heartbeat", 4], suspect: ["suspect", "suspect", 5],
    starting: ["starting", "executor starting", 6], busy: ["busy", "busy", null],
    ok: ["ok", "healthy", null], unchecked: ["unchecked", "idle, never checked", null],
  }).map(([k, v]) => [k, Object.freeze(v)]));
  function status(w) {
    if (w.st === "DISCONNECTED") return LOOK.down;
    if (w.v === "UNHEALTHY") return LOOK.failed;
    if (w.st === "QUARANTINED") return w.cord ? LOOK.cordoned : LOOK.quarantined;
    if (w.ex === "EXECUTOR_STOPPED") return LOOK.stopped;
    if (w.ex === "EXECUTOR_UNRESPONSIVE") return LOOK.unresponsive;
    if (w.stale) return LOOK.stale;
    if (w.v === "SUSPECT") return LOOK.suspect;
    if (w.ex === "EXECUTOR_STARTING") return LOOK.starting;
    if (w.st === "BUSY") return LOOK.busy;
    return w.v === "HEALTHY" ? LOOK.ok : LOOK.unchecked;
  }

  const FILTERS = {
    "": () => true,
    problem: (w) => status(w)[2] !== null,
    UNHEALTHY: (w) => w.v === "UNHEALTHY",
    SUSPECT: (w) => w.v === "SUSPECT",
    QUARANTINED: (w) => w.st === "QUARANTINED",
    DISCONNECTED: (w) => w.st === "DISCONNECTED",
    executor: (w) => w.ex === "EXECUTOR_STOPPED" || w.ex === "EXECUTOR_UNRESPONSIVE",
    BUSY: (w) => w.st === "BUSY",
    IDLE: (w) => w.st === "IDLE",
  };

  // A region the user is pointing at or typing in is left alone; what changed meanwhile is drawn
  // when the pointer leaves (so a click never lands on an element replaced under it).
  class Steady {
    constructor(node, draw) {
      this.node = node;
      this.draw = draw;
      this.pending = false;
      this.held = 0;
      const hold = () => { this.held += 1; };
      const release = () => { this.held = Math.max(0, this.held - 1); if (!this.held && this.pending) this.redraw(); };
      node.addEventListener("pointerenter", hold);
      node.addEventListener("pointerleave", release);
      node.addEventListener("focusin", hold);
      node.addEventListener("focusout", release);
    }

    redraw() {
      if (this.held) { this.pending = true; return; }
      this.pending = false;
      this.draw();
    }
  }

  class FleetView {
    constructor(ui) {
      this.ui = ui;
      this.$ = (id) => document.getElementById(id);
      this.workers = new Map();   // id -> record
      this.cells = new Map();     // id -> its cell
      this.hosts = new Map();     // host -> {node, ids}
      this.version = 0;
      this.jobs = { running: 0, queued: 0 };
      this.linksJob = "";
      this.selected = null;
      this.attention = new Steady(this.$("fleet-attention"), () => this.drawAttention());
      this.detail = new Steady(this.$("fleet-detail"), () => this.drawDetail());
      this.$("fleet").addEventListener("click", (e) => {
        const cell = e.target.closest("[data-worker]");
        if (cell) this.select(cell.dataset.worker);
      });
      this.$("fleet-search").addEventListener("input", () => this.applyFilter());
      this.$("fleet-filter").addEventListener("change", () => this.applyFilter());
      window.ringleaderFleet = this;  // for tests and the console
      this.follow();
    }

    async follow() {
      for (;;) {
        try {
          const wait = this.version ? WAIT_S : 0;
          this.apply(await this.ui.getJSON(`${API}/fleet?since=${this.version}&wait=${wait}`));
        } catch (error) {
          this.$("fleet-summary").textContent = `cannot read the fleet: ${error.message}`;
          if (error.status === 401 || error.status === 403) return;
          await new Promise((resolve) => setTimeout(resolve, 2000));
        }
      }
    }

    apply(d) {
      // The attention list is redrawn only when a worker enters it, leaves it or changes in it.
      const listed = (w) => Boolean(w) && status(w)[2] !== null;
      let attention = d.full;
      if (d.full) {
        this.workers = new Map(d.workers.map((w) => [w.id, w]));
        this.buildGrid();
        if (!this.version) performance.mark("fleet:first-drawn");
      } else {
        for (const id of d.removed || []) {
          attention ||= listed(this.workers.get(id));
          this.removeWorker(id);
        }
        for (const w of d.workers) {
          attention ||= listed(this.workers.get(w.id)) || listed(w);
          this.updateWorker(w);
        }
      }
      this.version = d.version;
      this.jobs = d.jobs;
      this.observe = !!d.observe;  // --health-observe: verdicts quarantine nothing
      this.drawSummary();
      if (attention) this.attention.redraw();
      if (this.selected && (d.full || d.workers.some((w) => w.id === this.selected))) this.detail.redraw();
      if (d.links_job !== this.linksJob) this.loadLinks(d.links_job);
    }

    // ---- the grid: hosts and their cells ----------------------------------------------------

    buildGrid() {
      const { h } = this.ui;
      this.cells.clear();
      this.hosts.clear();
      const byHost = new Map();
      for (const w of this.workers.values()) {
        if (!byHost.has(w.host)) byHost.set(w.host, []);
        byHost.get(w.host).push(w);
      }
      const blocks = [...byHost.keys()].sort().map((host) => this.hostBlock(host, byHost.get(host)));
      this.$("fleet").replaceChildren(...(blocks.length ? blocks
        : [h("p", { class: "muted" }, "No workers connected. Start one with ", h("code", {}, "ringleader worker"), ".")]));
      // New cells are drawn undimmed and every host shown: only a search or filter changes that.
      // (apply() redraws the attention list after a full answer.)
      if (this.filtering()) this.applyFilter();
    }

    hostBlock(host, members) {
      const { h } = this.ui;
      members.sort((a, b) => byText(a.type, b.type) || a.idx - b.idx || byText(a.id, b.id));
      // One append of all the host's cells: h() appends them one by one (in one profile 42 ms of
      // a 93 ms first drawing at 5,000 workers).
      const cells = document.createElement("div");
      cells.className = "cells";
      cells.append(...members.map((w) => this.makeCell(w)));
      const node = h("div", { class: "host", "data-host": host },
        h("div", { class: "host-name mono", title: host }, host || "(unknown host)"), cells);
      this.hosts.set(host, { node, cells, ids: new Set(members.map((w) => w.id)) });
      return node;
    }

    makeCell(w) {
      const cell = document.createElement("span");
      this.cells.set(w.id, cell);
      this.paintCell(cell, w);
      return cell;
    }

    paintCell(cell, w) {
      const [cls, label] = status(w);
      cell.className = `cell cell-${cls}${cell.classList.contains("dim") ? " dim" : ""}${w.id === this.selected ? " selected" : ""}`;
      cell.setAttribute("data-worker", w.id);  // (dataset's names are converted on each use)
      if (w.v) cell.setAttribute("data-verdict", w.v); else cell.removeAttribute("data-verdict");
      cell.title = `${w.id} · ${w.dev || w.type}:${w.idx} · ${label}${w.job ? " · job " + w.job.slice(0, 8) : ""}`;
    }

    updateWorker(w) {
      const known = this.workers.get(w.id);
      this.workers.set(w.id, w);
      const cell = this.cells.get(w.id);
      if (!cell || !known || known.host !== w.host) {
        if (known) this.removeWorker(w.id, true);
        this.workers.set(w.id, w);
        this.insertCell(w);
      } else {
        this.paintCell(cell, w);
      }
      this.filterCell(w);
      this.filterHost(w.host);
    }

    // Cells never move under the pointer: a new host's block goes after the others (sorted again
    // on the next full drawing), a new worker after its host's cells, a gone one leaves a hollow
    // placeholder until then.
    insertCell(w) {
      let host = this.hosts.get(w.host);
      if (!host) {
        this.$("fleet").append(this.hostBlock(w.host, []));
        this.$("fleet").querySelector(":scope > p")?.remove();
        host = this.hosts.get(w.host);
      }
      host.ids.add(w.id);
      const gone = host.cells.querySelector(`[data-gone="${CSS.escape(w.id)}"]`);
      if (gone) gone.replaceWith(this.makeCell(w)); else host.cells.append(this.makeCell(w));
    }

    removeWorker(id, keepRecord = false) {
      const w = this.workers.get(id);
      const cell = this.cells.get(id);
      if (cell) {
        const placeholder = document.createElement("span");
        placeholder.className = "cell cell-gone";
        placeholder.dataset.gone = id;
        placeholder.title = `${id}: no longer listed`;
        cell.replaceWith(placeholder);
      }
      this.cells.delete(id);
      if (!keepRecord) this.workers.delete(id);
      const host = w && this.hosts.get(w.host);
      if (host) host.ids.delete(id);  // an empty host's block stays, its placeholders with it
    }

    // ---- search and filter: non-matching cells dim, hosts without a match fold away ---------

    matches(w) {
      const text = this.$("fleet-search").value.trim().toLowerCase();
      const wanted = FILTERS[this.$("fleet-filter").value] || FILTERS[""];
      return wanted(w) && (!text || [w.id, w.host, w.job, w.dev].some((s) => s && s.toLowerCase().includes(text)));
    }

    filtering() {
      return Boolean(this.$("fleet-search").value.trim() || this.$("fleet-filter").value);
    }

    filterCell(w) {
      const cell = this.cells.get(w.id);
      if (cell) cell.classList.toggle("dim", this.filtering() && !this.matches(w));
    }

    filterHost(name) {
      const host = this.hosts.get(name);
      if (!host) return;
      const shown = !this.filtering() || [...host.ids].some((id) => this.matches(this.workers.get(id)));
      host.node.hidden = !shown;
    }

    applyFilter() {
      for (const w of this.workers.values()) this.filterCell(w);
      for (const name of this.hosts.keys()) this.filterHost(name);
      this.attention.redraw();
    }

    // ---- summary, attention list, detail -----------------------------------------------------

    // Led by what is wrong, most serious first (then the rest, largest first); the same words
    // label the Fleet tab, so the jobs tab shows them too.
    drawSummary() {
      const counts = new Map();
      for (const w of this.workers.values()) {
        const [, label, rank] = status(w);
        const c = counts.get(label) || { n: 0, rank };
        c.n += 1;
        counts.set(label, c);
      }
      const n = this.workers.size;
      const all = [...counts].map(([label, c]) => ({ label, ...c }));
      const wrong = all.filter((c) => c.rank !== null).sort((a, b) => a.rank - b.rank);
      const fine = all.filter((c) => c.rank === null).sort((a, b) => b.n - a.n);
      const words = (cs) => cs.map((c) => `${fmt(c.n)} ${c.label}`).join(", ");
      this.$("fleet-summary").textContent = n
        ? [wrong.length ? words(wrong) : "nothing wrong", words(fine),
          `${fmt(n)} worker${n === 1 ? "" : "s"} on ${fmt(this.hosts.size)} host${this.hosts.size === 1 ? "" : "s"}`,
          this.observe ? "observe mode: no quarantine" : ""].filter(Boolean).join(" · ")
        : "";
      this.$("fleet-summary").title = this.$("fleet-summary").textContent;
      const note = this.$("tab-fleet-note");
      if (note) {
        note.replaceChildren(!n ? "" : wrong.length
          ? this.ui.h("span", { class: "bad" }, words(wrong)) : "all fine", n ? ` · ${fmt(n)}` : "");
      }
      // The whole coordinator's counts, not the jobs table's page.
      const jobs = `${this.jobs.running} running, ${this.jobs.queued} queued`;
      this.$("jobs-summary").textContent = jobs;
      if (this.$("tab-jobs-note")) this.$("tab-jobs-note").textContent = jobs;
    }

    drawAttention() {
      const { h } = this.ui;
      const wrong = [...this.workers.values()].filter((w) => status(w)[2] !== null && (!this.filtering() || this.matches(w)))
        .sort((a, b) => status(a)[2] - status(b)[2] || a.host.localeCompare(b.host) || a.id.localeCompare(b.id));
      const node = this.$("fleet-attention");  // always there, of a fixed height: the grid never moves
      const items = wrong.slice(0, ATTENTION_SHOWN).map((w) => {
        const [cls, label] = status(w);
        return h("li", {}, h("button", { type: "button", class: `attention-item cell-${cls}-line`, "data-worker": w.id,
          "data-verdict": w.v || null, onclick: () => this.select(w.id) },
        h("span", { class: `cell cell-${cls}` }), h("span", { class: "mono" }, w.id),
        h("span", { class: "muted" }, ` @ ${w.host} · `), h("strong", {}, label),
        w.check ? h("span", { class: "muted" }, ` · ${w.check}${w.fig ? ": " + w.fig : ""}`) : null));
      });
      const more = wrong.length - items.length;
      node.replaceChildren(h("h3", {}, wrong.length ? `Needs attention (${wrong.length})` : "Nothing needs attention"),
        h("ul", {}, items));
      if (more > 0) node.append(h("p", { class: "muted" }, `and ${more} more: filter "needs attention" shows them all in the grid`));
    }

    select(id) {
      const previous = this.selected && this.cells.get(this.selected);
      if (previous) previous.classList.remove("selected");
      this.selected = id;
      const cell = this.cells.get(id);
      if (cell) cell.classList.add("selected");
      this.detail.held = 0;  // the user asked for it: draw now
      this.detail.redraw();
    }

    drawDetail() {
      const { h, jobLink, fmtTime, fmtAge } = this.ui;
      const node = this.$("fleet-detail");
      const w = this.selected && this.workers.get(this.selected);
      node.hidden = !w;
      if (!w) return;
      const [cls, label] = status(w);
      const facts = (rows) => h("dl", { class: "facts" }, rows.filter(Boolean).map(([k, v]) =>
        h("div", { class: "fact" }, h("dt", {}, k), h("dd", {}, v))));
      const evidence = w.v ? h("div", { class: `evidence evidence-${(w.v || "").toLowerCase()}` },
        h("h4", {}, `Verdict: ${w.v.toLowerCase()}${w.cord ? " (cordoned by hand)" : ""}`),
        facts([["check", w.check || "—"], ["measured", w.fig || "—"], ["expected", w.exp || "—"],
          w.also ? ["also found", w.also] : null,
          ["when", w.at ? `${fmtTime(w.at)} (${fmtAge(Date.now() / 1000 - w.at)} ago)` : "—"],
          w.vjob ? ["check job", jobLink(w.vjob)] : null,
          w.re ? ["next recheck", fmtTime(w.re)] : null]))
        : h("p", { class: "muted" }, "No health verdict yet: no check has run on this worker.");
      node.replaceChildren(
        h("div", { class: "detail-head" }, h("span", { class: `cell cell-${cls}` }), h("strong", { class: "mono" }, w.id),
          h("button", { type: "button", class: "close", title: "close", onclick: () => this.select(null) }, "×")),
        facts([["status", label], ["state", w.st], ["host", w.host], ["device", `${w.dev || w.type} (${w.type}:${w.idx})`],
          w.ex ? ["executor", w.ex.replace("EXECUTOR_", "").toLowerCase()] : null,
          w.job ? ["job", jobLink(w.job)] : null,
          w.cfg ? ["configuration", `unlike its peers: ${w.cfg}`] : null]),
        evidence);
      if (w.st === "QUARANTINED") node.append(h("p", { class: "muted" }, "Back in service: ", h("code", {}, `ringleader workers uncordon ${w.id}`)));
    }

    // ---- the latest link matrix as a heat map ------------------------------------------------

    async loadLinks(jobId) {
      this.linksJob = jobId;
      if (!jobId) { this.$("fleet-links").hidden = true; return; }
      try {
        drawLinks(this.$("fleet-links"), await this.ui.getJSON(`${API}/fleet/links`), this);
      } catch (_) { this.linksJob = ""; /* try again with the next answer */ }
    }
  }

  // The link matrix, one pixel square per pair (rank by rank, or host by host for large fleets),
  // coloured by bandwidth against the median of the measured links; flagged links outlined and
  // listed, each listed link opening its first worker.
  function drawLinks(node, links, view) {
    const { h, jobLink } = view.ui;
    const n = links.labels.length;
    node.hidden = !n;
    if (!n) return;
    const px = Math.max(2, Math.min(24, Math.floor(480 / n)));
    const canvas = h("canvas", { width: n * px, height: n * px, class: "heatmap", "data-n": n });
    const values = links.matrix.flat().filter((v) => v > 0).sort((a, b) => a - b);
    const median = values.length ? values[Math.floor(values.length / 2)] : 1;
    const ctx = canvas.getContext("2d");
    links.matrix.forEach((row, i) => row.forEach((v, j) => {
      ctx.fillStyle = v < 0 ? "#f3f4f6" : heat(v / median);
      ctx.fillRect(j * px, i * px, px, px);
    }));
    const index = links.by === "rank" ? (rank) => rank : (rank) => links.labels.indexOf(links.ranks[rank].host);
    ctx.strokeStyle = "#111827";
    ctx.lineWidth = Math.max(1, px / 6);
    for (const f of links.flagged) {
      for (const [i, j] of [[index(f.a), index(f.b)], [index(f.b), index(f.a)]]) ctx.strokeRect(j * px, i * px, px, px);
    }
    canvas.addEventListener("mousemove", (e) => {
      const r = canvas.getBoundingClientRect();
      const i = Math.floor((e.clientY - r.top) / px), j = Math.floor((e.clientX - r.left) / px);
      const v = links.matrix[i] && links.matrix[i][j];
      canvas.title = v === undefined ? "" : `${links.labels[i]} ↔ ${links.labels[j]}: ${v < 0 ? "—" : v.toFixed(2) + " GB/s"}`;
    });
    const name = (rank) => `${links.ranks[rank].worker_id}@${links.ranks[rank].host}`;
    const flagged = links.flagged.map((f) => h("li", {}, h("button", {
      type: "button", class: "flagged-link", "data-worker": links.ranks[f.a].worker_id,
      onclick: () => view.select(links.ranks[f.a].worker_id) },
    `${name(f.a)} ↔ ${name(f.b)}: ${f.gbps.toFixed(2)} GB/s, ${f.ratio.toFixed(2)}× the comparable median`
      + (f.baseline_ratio ? `, ${f.baseline_ratio.toFixed(2)}× its baseline` : ""))));
    node.replaceChildren(
      h("h3", {}, "Links ", h("span", { class: "muted" }, `(latest link matrix `, jobLink(links.job_id, links.job_id.slice(0, 8)),
        `, ${n} ${links.by === "rank" ? "workers" : "hosts, slowest link per pair"}, ${binarySize(links.size_bytes)} ping-pong)`)),
      h("div", { class: "links-body" }, canvas, h("div", { class: "links-side" },
        h("p", { class: "muted" }, `median same host ${links.median_same_host_gbps.toFixed(2)} GB/s`
          + (new Set(links.ranks.map((r) => r.host)).size > 1 ? `, across hosts ${links.median_cross_host_gbps.toFixed(2)} GB/s` : " (one host)")
          + "; red: slow, outlined: flagged"),
        flagged.length ? h("ul", { class: "flagged" }, flagged) : h("p", {}, "No link flagged."))));
  }

  // A size as the checks are sized: 512 KiB, 1 MiB (not 512 KiB rounded to "1 MiB").
  function binarySize(bytes) {
    const [unit, scale] = bytes >= 2 ** 20 ? ["MiB", 2 ** 20] : bytes >= 1024 ? ["KiB", 1024] : ["B", 1];
    return `${+(bytes / scale).toFixed(1)} ${unit}`;
  }

  // Blue at the median and above, through yellow, to red at a quarter of it or less.
  function heat(ratio) {
    const r = Math.max(0, Math.min(1, (ratio - 0.25) / 0.65));
    const hue = r < 0.5 ? 120 * r : 60 + 300 * (r - 0.5);
    return `hsl(${Math.min(215, hue).toFixed(0)}, 75%, ${(55 - 10 * r).toFixed(0)}%)`;
  }

  return { mount: (ui) => new FleetView(ui), status, Steady };
})();
