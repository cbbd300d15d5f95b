// ringleader dashboard: the "Bandwidth over time" tab of the overview (GET /api/v1/trends).
//
// One small chart per baseline key (op, size bucket, ranks, link kind, GPU model), keys with a low
// result first: the mean busbw of each bucket, its lowest result, and the key's baseline band
// (median and threshold, dashed). A bucket whose lowest result is below the threshold carries a
// mark (✕, a button over the chart); a click on it, or on any point of a chart, lists the jobs
// behind that bucket (GET /api/v1/trends/jobs), the job of the lowest result first.
//
// Where, not only what: the link checks' latest figures host x host (GET /api/v1/trends/matrix), each
// pair's slowest link against its expectation, as a heat map with the worst pairs listed, read again
// every MATRIX_REFRESH_MS; beside a regressed key's chart, the hosts of its low results
// (GET /api/v1/trends/hosts). A host or a pair is a link: "#trends?host=A&peer=B" filters the tab by
// host A, shows A's links over time and the pair's latest figures.
//
// app.js mounts it when the tab is first shown: RingleaderTrends.mount({getJSON, h, jobLink, fmtSize, fmtTime}).
// Tests read window.ringleaderTrends (the last answer and the charts by key).
"use strict";

window.RingleaderTrends = (function () {
  const API = "/api/v1";
  const FILTERS = ["gpu_model", "op", "link"];
  const COLORS = { mean: "#0072b2", min: "#56b4e9", median: "#009e73", threshold: "#d55e00" };
  // A browser test sets window.RINGLEADER_MATRIX_REFRESH_MS before the page loads, not to wait 15 s.
  const MATRIX_REFRESH_MS = window.RINGLEADER_MATRIX_REFRESH_MS || 15000;
  const SOURCE = { baseline: "its baseline", history: "its key's history", floor: "the shipped floor", peers: "the check's comparable links" };
  // A host, or a pair of hosts, as a link within the tab.
  const hostHref = (host, peer) => `#trends?${new URLSearchParams(peer ? { host, peer } : { host })}`;

  class TrendsView {
    constructor(ui) {
      this.ui = ui;
      this.$ = (id) => document.getElementById(id);
      this.charts = new Map();
      this.answer = null;
      for (const id of ["trends-days", ...FILTERS.map((f) => `trends-${f}`)]) this.$(id).addEventListener("change", () => this.load());
      this.$("trends-days").addEventListener("change", () => this.loadMatrix());
      let typing = null;
      this.$("trends-host").addEventListener("input", () => { clearTimeout(typing); this.peer = ""; typing = setTimeout(() => this.load(), 400); });
      window.addEventListener("hashchange", () => this.fromHash());
      window.ringleaderTrends = this;
      this.peer = "";
      this.matrix = null;
      this.fromHash();
      this.loadMatrix();
    }

    // "#trends?host=A&peer=B": the host filter A, and the pair A-B shown.
    fromHash() {
      const [tab, params] = location.hash.slice(1).split("?");
      if (tab !== "trends") return;
      const q = new URLSearchParams(params || "");
      this.peer = q.get("peer") || "";
      const host = q.get("host") || "";
      if (host !== this.$("trends-host").value.trim() || !this.answer) {
        this.$("trends-host").value = host;
        this.load();
      } else {
        this.drawPair();
        this.loadLinks(this.query());
      }
    }

    // The latest link matrix, host by host: read now, then every MATRIX_REFRESH_MS while the tab shows.
    async loadMatrix() {
      clearTimeout(this.matrixTimer);
      this.matrixTimer = setTimeout(() => this.loadMatrix(), MATRIX_REFRESH_MS);
      if (this.matrix && (this.$("pane-trends").hidden || document.hidden)) return;
      const node = this.$("trend-matrix");
      let answer;
      try {
        answer = await this.ui.getJSON(`${API}/trends/matrix?${new URLSearchParams({ days: this.$("trends-days").value })}`);
      } catch (error) {
        node.replaceChildren(this.ui.h("p", { class: "muted" }, `cannot read the link matrix: ${error.message}`));
        return;
      }
      this.matrixReadAt = Date.now() / 1000;
      // Unchanged figures: only the time read is said again (the list and the map stay, so a
      // pointer on them never loses its target).
      const same = this.matrix && JSON.stringify([this.matrix.jobs, this.matrix.cells]) === JSON.stringify([answer.jobs, answer.cells]);
      this.matrix = answer;
      if (same && node.querySelector("#trend-matrix-asof")) {
        node.querySelector("#trend-matrix-asof").textContent = matrixAsOf(answer, this.ui, this.matrixReadAt);
        return;
      }
      drawMatrix(node, answer, this.ui, this.matrixReadAt);
      this.drawPair();
    }

    // The pair A-B of the address (a click on a listed pair or a cell): its latest figures.
    drawPair() {
      const { h, jobLink, fmtTime } = this.ui;
      const node = this.$("trend-pair");
      const host = this.$("trends-host").value.trim();
      if (!this.peer || !host || !this.matrix) { node.hidden = true; return; }
      const m = this.matrix;
      const [a, b] = [host, this.peer].sort();
      const at = new Map(m.hosts.map((x, i) => [x, i]));
      const cell = m.cells.find((c) => c[0] === at.get(a) && c[1] === at.get(b));
      const listed = m.worst.find((w) => w.a === a && w.b === b);
      const close = h("a", { href: hostHref(host), class: "close", title: "close" }, "×");
      node.hidden = false;
      if (!cell) {
        node.replaceChildren(h("div", { class: "detail-head" }, h("strong", { class: "pair-name" }, `${host} ↔ ${this.peer}`), close),
          h("p", { class: "muted" }, "No link check in the range measured this pair."));
        return;
      }
      const [, , gbps, ratio, src, low, flagged, job] = cell;
      const source = m.sources[src];
      node.replaceChildren(
        h("div", { class: "detail-head" }, h("strong", { class: "pair-name" }, `${host} ↔ ${this.peer}`), close),
        h("p", { class: low ? "low" : "" }, `slowest link ${gbps.toFixed(2)} GB/s, ${ratio.toFixed(2)}× ${SOURCE[source] || source}`,
          low ? " — below its expectation" : "", flagged ? ` · ${flagged} link${flagged === 1 ? "" : "s"} flagged by the check` : ""),
        listed ? h("p", {}, `between ${listed.workers[0]} (rank ${listed.ranks[0]}) and ${listed.workers[1]} (rank ${listed.ranks[1]}); `
          + `${listed.low_links} of ${listed.links} links below expectation`) : null,
        h("p", { class: "muted" }, "check ", jobLink(m.jobs[job], m.jobs[job].slice(0, 8)),
          ` · ${fmtTime(m.job_at[job])} · `, h("a", { href: hostHref(a) }, `${a} alone`),
          a !== b ? [" · ", h("a", { href: hostHref(b) }, `${b} alone`)] : null));
    }

    query() {
      const q = new URLSearchParams({ days: this.$("trends-days").value });
      for (const f of FILTERS) if (this.$(`trends-${f}`).value) q.set(f, this.$(`trends-${f}`).value);
      const host = this.$("trends-host").value.trim();
      if (host) q.set("host", host);
      return q;
    }

    async load() {
      const q = this.query();
      const started = performance.now();
      let answer;
      try {
        answer = await this.ui.getJSON(`${API}/trends?${q}`);
      } catch (error) {
        this.$("trends-summary").textContent = `cannot read the trends: ${error.message}`;
        return;
      }
      if (String(q) !== String(this.query())) return;  // a newer choice is on its way
      this.answer = answer;
      this.host = q.get("host") || "";
      this.fillChoices(answer.choices);
      this.draw(answer);
      this.drawPair();
      await this.loadLinks(q);
      this.loadedMs = performance.now() - started;
      performance.mark("trends:drawn");
    }

    // With a host chosen: its links in each link matrix check over the range, by peer host.
    async loadLinks(q) {
      const node = this.$("trend-links");
      const host = q.get("host");
      if (!host) { node.hidden = true; node.replaceChildren(); return; }
      let answer;
      try {
        answer = await this.ui.getJSON(`${API}/trends/links?${new URLSearchParams({ host, days: q.get("days") })}`);
      } catch (error) {
        node.replaceChildren(this.ui.h("p", { class: "muted" }, `cannot read the link history: ${error.message}`));
        node.hidden = false;
        return;
      }
      if (String(q) !== String(this.query())) return;
      drawLinkHistory(node, answer, this.ui, this.peer);
    }

    fillChoices(choices) {
      const { h } = this.ui;
      for (const f of FILTERS) {
        const select = this.$(`trends-${f}`);
        const value = select.value;
        const wanted = ["", ...(choices[f] || [])];
        if ([...select.options].map((o) => o.value).join("\n") === wanted.join("\n")) continue;
        select.replaceChildren(...wanted.map((v) => h("option", { value: v }, v || "all")));
        select.value = wanted.includes(value) ? value : "";
      }
    }

    draw(answer) {
      const { h } = this.ui;
      for (const chart of this.charts.values()) chart.destroy();
      this.charts.clear();
      const marked = answer.keys.filter((k) => k.marked.length).length;
      const step = answer.step_s >= 86400 ? `${answer.step_s / 86400} d` : `${answer.step_s / 3600} h`;
      this.$("trends-summary").textContent = answer.keys.length
        ? `${marked ? `${marked} key${marked === 1 ? "" : "s"} with low results · ` : "no low results · "}`
          + `${answer.keys.length}${answer.left_off ? ` of ${answer.keys.length + answer.left_off}` : ""} keys, ${step} buckets`
          + ` · as of ${this.ui.fmtTime(answer.until)}`
        : `as of ${this.ui.fmtTime(answer.until)}`;
      const cards = answer.keys.map((k) => this.card(k, answer));
      this.$("trends").replaceChildren(...(cards.length ? cards
        : [h("p", { class: "muted" }, "No results with a baseline in this range. Collective sweeps feed it as they finish.")]));
      for (const k of answer.keys) this.chart(k, answer);
    }

    title(k) {
      const { fmtSize } = this.ui;
      return [k.op, `${fmtSize(k.size_bucket)}B`, `${k.ranks} ranks`, k.link === "cross" ? `${k.hosts} hosts` : "one host",
        k.gpu_model, k.dtype, k.algo || null].filter(Boolean).join(" · ");
    }

    card(k) {
      const { h } = this.ui;
      const band = k.baseline;
      const card = h("div", { class: `trend-card${k.marked.length ? " trend-low" : ""}`, "data-key": k.key },
        h("h3", {}, k.marked.length ? h("span", { class: "trend-mark-legend" }, "✕ ") : null, this.title(k)),
        h("p", { class: "muted" }, band
          ? `baseline ${band.median_gbps.toFixed(2)} GB/s, low below ${band.threshold_gbps.toFixed(2)} (${band.samples} samples)`
          : "no baseline yet"),
        h("div", { class: "trend-body" }, h("div", { class: "trend-chart" }),
          k.marked.length ? h("div", { class: "trend-hosts" }, h("p", { class: "muted" }, "hosts of the low results…")) : null));
      if (k.marked.length) this.loadHosts(k, card.querySelector(".trend-hosts"));
      return card;
    }

    // Beside a regressed key's chart: the hosts of its low results, the host of the lowest first.
    async loadHosts(k, node) {
      const { h } = this.ui;
      const q = new URLSearchParams({ key: k.key, days: this.$("trends-days").value });
      let answer;
      try {
        answer = await this.ui.getJSON(`${API}/trends/hosts?${q}`);
      } catch (error) {
        node.replaceChildren(h("p", { class: "muted" }, `cannot read its hosts: ${error.message}`));
        return;
      }
      const hosts = answer.hosts.slice(0, 8);
      node.replaceChildren(h("strong", {}, "worst hosts"),
        hosts.length ? h("ol", {}, hosts.map((x) => h("li", { "data-host": x.host },
          h("a", { href: hostHref(x.host) }, x.host),
          x.with.length ? [" with ", x.with.slice(0, 3).map((w, i) => [i ? ", " : "", h("a", { href: hostHref(x.host, w) }, w)])] : null,
          h("span", { class: "muted" }, ` · ${x.min_gbps.toFixed(1)} GB/s, ${x.low_hours} low h`))))
          : h("p", { class: "muted" }, answer.jobs_gone ? "their jobs are no longer stored" : "none found"),
        answer.hosts.length > hosts.length ? h("p", { class: "muted" }, `and ${answer.hosts.length - hosts.length} more`) : null);
    }

    chart(k, answer) {
      const node = document.querySelector(`.trend-card[data-key="${CSS.escape(k.key)}"] .trend-chart`);
      const band = k.baseline || { median_gbps: null, threshold_gbps: null };
      const flat = (v) => k.t.map(() => v);
      const data = [k.t, k.mean, k.min, flat(band.median_gbps), flat(band.threshold_gbps || null)];
      const line = (label, stroke, extra) => ({ label, stroke, width: 1.5, spanGaps: false, ...extra,
        value: (u, v) => (v === null || v === undefined ? "—" : `${v.toFixed(2)} GB/s`) });
      const chart = new uPlot({
        width: Math.max(300, node.clientWidth || 380), height: 150,
        scales: { x: { time: true, range: [answer.since, answer.until] }, y: { range: (u, lo, hi) => [0, Math.max(hi, band.median_gbps || 0) * 1.1] } },
        series: [{}, line("mean", COLORS.mean, { width: 2, points: { show: k.t.length < 60, size: 4 } }),
          line("lowest", COLORS.min, { width: 1 }),
          line("baseline", COLORS.median, { dash: [6, 4] }), line("low below", COLORS.threshold, { dash: [3, 3] })],
        axes: [{ stroke: "#4b5563", grid: { stroke: "#eceef1" }, label: "time (local)", labelSize: 16 },
          { stroke: "#4b5563", grid: { stroke: "#eceef1" }, size: 44, label: "busbw (GB/s)", labelSize: 16 }],
        legend: { show: false },
        cursor: { points: { size: 6 } },
        hooks: { draw: [(u) => this.placeMarks(u, k, node)] },
      }, data, node);
      // A click on the chart: the bucket under the cursor.
      chart.over.addEventListener("click", () => {
        const i = chart.cursor.idx;
        if (i !== null && i !== undefined) this.showJobs(k, k.t[i], answer.step_s);
      });
      this.charts.set(k.key, chart);
    }

    // Marks over the chart (buttons, so they can be clicked and focused): at the bucket's lowest result.
    placeMarks(u, k, node) {
      const { h } = this.ui;
      node.querySelectorAll(".trend-mark").forEach((m) => m.remove());
      const at = new Map(k.t.map((t, i) => [t, i]));
      for (const t of k.marked) {
        const i = at.get(t);
        const x = u.valToPos(t, "x") + u.over.offsetLeft;
        const y = u.valToPos(k.min[i], "y") + u.over.offsetTop;
        node.append(h("button", { type: "button", class: "trend-mark", style: `left:${x.toFixed(0)}px;top:${y.toFixed(0)}px`,
          "data-t": t, title: `${this.ui.fmtTime(t)}: lowest ${k.min[i].toFixed(2)} GB/s`,
          onclick: () => this.showJobs(k, t, this.answer.step_s) }, "✕"));
      }
    }

    async showJobs(k, start, step) {
      const { h, jobLink, fmtTime } = this.ui;
      const q = new URLSearchParams({ key: k.key, start: String(start), step_s: String(step) });
      if (this.host) q.set("host", this.host);
      const node = this.$("trend-jobs");
      let answer;
      try {
        answer = await this.ui.getJSON(`${API}/trends/jobs?${q}`);
      } catch (error) {
        node.replaceChildren(h("p", {}, `cannot read the jobs: ${error.message}`));
        node.hidden = false;
        return;
      }
      const threshold = k.baseline ? k.baseline.threshold_gbps : 0;
      node.replaceChildren(
        h("div", { class: "detail-head" }, h("strong", {}, `${this.title(k)} · ${fmtTime(start)}`),
          h("button", { type: "button", class: "close", title: "close", onclick: () => { node.hidden = true; } }, "×")),
        h("ul", {}, answer.hours.map((hr) => h("li", { class: threshold && hr.min_gbps < threshold ? "low" : "" },
          `${fmtTime(hr.start)}: lowest ${hr.min_gbps.toFixed(2)} GB/s in `, jobLink(hr.worst_job, hr.worst_job.slice(0, 8)),
          hostLinks(h, hr.hosts || []),
          hr.n > 1 ? h("span", { class: "muted" }, ` · ${hr.n} results: `,
            hr.jobs.filter((j) => j !== hr.worst_job).map((j) => [jobLink(j, j.slice(0, 8)), " "])) : null))));
      node.hidden = false;
    }
  }

  // Where a result ran: its hosts, each a link to the host; two hosts also as their link.
  function hostLinks(h, hosts) {
    if (!hosts.length) return null;
    const shown = hosts.slice(0, 4);
    return h("span", { class: "hour-hosts" }, " on ", shown.map((x, i) => [i ? ", " : "", h("a", { href: hostHref(x) }, x)]),
      hosts.length > shown.length ? ` and ${hosts.length - shown.length} more` : "",
      hosts.length === 2 ? [" · ", h("a", { href: hostHref(hosts[0], hosts[1]), class: "pair-link" }, `link ${hosts[0]} ↔ ${hosts[1]}`)] : null);
  }

  // A cell's colour: its ratio to its expectation. Every ratio at or above 1 is one calm blue (a
  // link faster than expected is not a finding); below, through yellow to red; below its
  // expectation's line (`low`): red, whatever the ratio.
  function ratioColor(ratio, low) {
    if (low) return "#c81e1e";
    if (ratio >= 1) return "#9ec5e8";
    const r = Math.max(0, Math.min(1, (ratio - 0.5) / 0.5));
    return `hsl(${(20 + 190 * r).toFixed(0)}, 70%, ${(58 + 14 * r).toFixed(0)}%)`;
  }

  function matrixAsOf(m, ui, readAt) {
    return m.hosts.length
      ? `(${m.hosts.length} hosts, ${m.cells.length} host pairs from ${m.checks} link checks; as of ${ui.fmtTime(m.as_of)}, read ${ui.fmtTime(readAt)})`
      : `(no link check in the range; read ${ui.fmtTime(readAt)})`;
  }

  // The latest link matrix, host x host: a compact heat map (a pixel or more per host, each pair's
  // cell coloured by its slowest link's ratio to expectation, pairs below it drawn large in red),
  // and the worst pairs listed, each pair a link to its hosts.
  function drawMatrix(node, m, ui, readAt) {
    const { h, jobLink } = ui;
    const n = m.hosts.length;
    const head = h("h3", {}, "Links now, host × host ", h("span", { class: "muted", id: "trend-matrix-asof" }, matrixAsOf(m, ui, readAt)));
    if (!n) { node.replaceChildren(head); return; }
    const px = Math.max(1, Math.min(16, Math.floor(480 / n)));
    const size = n * px;
    const canvas = h("canvas", { width: size, height: size, class: "heatmap link-matrix", "data-n": n });
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = "#f3f4f6";
    ctx.fillRect(0, 0, size, size);
    const byCell = new Map();
    for (const c of m.cells) {
      byCell.set(`${c[0]},${c[1]}`, c).set(`${c[1]},${c[0]}`, c);
      ctx.fillStyle = ratioColor(c[3], c[5]);
      ctx.fillRect(c[1] * px, c[0] * px, px, px);
      ctx.fillRect(c[0] * px, c[1] * px, px, px);
    }
    // Pairs below expectation: large enough to see (and hit) at a pixel per host.
    const mark = Math.max(px, 7);
    ctx.strokeStyle = "#111827";
    for (const c of m.cells.filter((x) => x[5])) {
      for (const [i, j] of [[c[0], c[1]], [c[1], c[0]]]) {
        const x = j * px + px / 2 - mark / 2, y = i * px + px / 2 - mark / 2;
        ctx.fillStyle = "#c81e1e";
        ctx.fillRect(x, y, mark, mark);
        ctx.strokeRect(x + 0.5, y + 0.5, mark - 1, mark - 1);
      }
    }
    // The cell under the pointer, or the nearest measured one within a few pixels (low ones first).
    const near = (e) => {
      const b = canvas.getBoundingClientRect();
      const x = (e.clientX - b.left) / px, y = (e.clientY - b.top) / px;
      const reach = Math.max(1, Math.ceil(4 / px));
      let best = null;
      for (let i = Math.floor(y) - reach; i <= Math.floor(y) + reach; i++) {
        for (let j = Math.floor(x) - reach; j <= Math.floor(x) + reach; j++) {
          const c = byCell.get(`${i},${j}`);
          if (!c) continue;
          const d = (i + 0.5 - y) ** 2 + (j + 0.5 - x) ** 2 - (c[5] ? 100 : 0);
          if (!best || d < best[0]) best = [d, c];
        }
      }
      return best && best[1];
    };
    const say = (c) => `${m.hosts[c[0]]} ↔ ${m.hosts[c[1]]}: ${c[2].toFixed(2)} GB/s, ${c[3].toFixed(2)}× ${SOURCE[m.sources[c[4]]] || m.sources[c[4]]}`
      + `${c[5] ? ", below expectation" : ""}${c[6] ? `, ${c[6]} flagged` : ""}`;
    canvas.addEventListener("mousemove", (e) => { const c = near(e); canvas.title = c ? say(c) : ""; });
    canvas.addEventListener("click", (e) => { const c = near(e); if (c) location.hash = hostHref(m.hosts[c[0]], m.hosts[c[1]]); });
    const worst = m.worst.slice(0, 12);
    const rows = worst.map((w) => h("tr", { class: w.low ? "low" : "", "data-pair": `${w.a}|${w.b}` },
      h("td", {}, h("a", { href: hostHref(w.a, w.b), class: "pair-link" }, w.a === w.b ? `inside ${w.a}` : `${w.a} ↔ ${w.b}`)),
      h("td", { class: "num" }, `${w.gbps.toFixed(2)} GB/s`),
      h("td", { class: "num" }, `${w.ratio.toFixed(2)}× ${SOURCE[w.source] || w.source} (${w.expected_gbps.toFixed(2)} GB/s)`),
      h("td", {}, w.low ? `${w.low_links} of ${w.links} links below` : w.flagged_links ? `${w.flagged_links} flagged` : "within expectation"),
      h("td", {}, jobLink(w.job_id, w.job_id.slice(0, 8)))));
    node.replaceChildren(head,
      h("div", { class: "links-body" }, canvas, h("div", { class: "links-side" },
        h("p", { class: "muted" }, m.low ? `${m.low} host pair${m.low === 1 ? "" : "s"} below expectation, listed first.`
          : "No host pair below its expectation.", " Each cell: a pair's slowest link against its expectation (its baseline,"
          + " its key's history, the shipped floor; else the check's comparable links); blue at or above it, red below."),
        rows.length ? h("table", { class: "worst-links" }, h("thead", {}, h("tr", {}, ["host pair", "slowest link", "ratio to expectation", "", "check"]
          .map((t) => h("th", {}, t)))), h("tbody", {}, rows)) : null)));
  }

  // Rows: peer hosts (the host itself first: its links inside); columns: checks, oldest left; a
  // cell's colour is the slowest link's ratio to the comparable median (blue 1, red 0.25 or less),
  // a flagged cell is crossed. A click on a column opens its check job; flagged checks are listed.
  function drawLinkHistory(node, answer, ui, peer) {
    const { h, jobLink, fmtTime } = ui;
    const checks = [...answer.checks].reverse();
    node.hidden = false;
    if (!checks.length) {
      node.replaceChildren(h("h3", {}, `Links of ${answer.host} over time`), h("p", { class: "muted" }, "No link matrix check measured this host in the range."));
      return;
    }
    const cw = Math.max(3, Math.min(16, Math.floor(720 / checks.length))), ch = 14;
    const row = new Map(answer.peers.map((p, i) => [p, i]));
    const canvas = h("canvas", { width: checks.length * cw, height: answer.peers.length * ch, class: "heatmap link-history" });
    const ctx = canvas.getContext("2d");
    checks.forEach((c, j) => c.links.forEach((l) => {
      const r = Math.max(0, Math.min(1, (l.ratio - 0.25) / 0.75));
      ctx.fillStyle = `hsl(${(215 * r).toFixed(0)}, 70%, ${(50 + 5 * r).toFixed(0)}%)`;
      const y = row.get(l.peer) * ch;
      ctx.fillRect(j * cw, y, cw - 1, ch - 1);
      if (l.flagged) {
        ctx.strokeStyle = "#000";
        ctx.beginPath(); ctx.moveTo(j * cw, y); ctx.lineTo(j * cw + cw - 1, y + ch - 1);
        ctx.moveTo(j * cw + cw - 1, y); ctx.lineTo(j * cw, y + ch - 1); ctx.stroke();
      }
    }));
    const at = (e) => {
      const b = canvas.getBoundingClientRect();
      return [checks[Math.floor((e.clientX - b.left) / cw)], answer.peers[Math.floor((e.clientY - b.top) / ch)]];
    };
    canvas.addEventListener("mousemove", (e) => {
      const [c, peer] = at(e);
      const l = c && c.links.find((x) => x.peer === peer);
      canvas.title = c ? `${fmtTime(c.at)} · ${answer.host} ↔ ${peer}: ${l ? `${l.gbps.toFixed(2)} GB/s, ${l.ratio.toFixed(2)}× median${l.flagged ? ", flagged" : ""}` : "not measured"}` : "";
    });
    canvas.addEventListener("click", (e) => { const [c] = at(e); if (c) location.href = `/jobs/${encodeURIComponent(c.job_id)}`; });
    const flagged = checks.filter((c) => c.links.some((l) => l.flagged)).reverse();
    if (peer && row.has(peer)) {  // the pair asked for: its row outlined
      ctx.strokeStyle = "#111827";
      ctx.lineWidth = 2;
      ctx.strokeRect(1, row.get(peer) * ch + 1, checks.length * cw - 2, ch - 2);
    }
    node.replaceChildren(
      h("h3", {}, `Links of ${answer.host} over time `, h("span", { class: "muted" },
        `(${checks.length} link matrix checks; rows: ${answer.peers.map((p) => (p === answer.host ? "inside the host" : p)).join(", ")})`)),
      h("div", { class: "links-body" }, canvas, h("div", { class: "links-side" },
        flagged.length ? h("ul", { class: "flagged" }, flagged.slice(0, 20).map((c) => h("li", {}, fmtTime(c.at), " ", jobLink(c.job_id, c.job_id.slice(0, 8)),
          `: ${c.links.filter((l) => l.flagged).map((l) => l.peer).join(", ")}`)))
          : h("p", {}, "No link of this host flagged in the range."))));
  }

  return { mount: (ui) => new TrendsView(ui) };
})();
