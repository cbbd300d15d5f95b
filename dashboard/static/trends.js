// ringleader dashboard: the "Bandwidth over time" tab of the overview (GET /api/v1/trends).
//
// One small chart per baseline key (op, size bucket, ranks, link kind, GPU model), keys with a low
// result first: the mean busbw of each bucket, its lowest result, and the key's baseline band
// (median and threshold, dashed). A bucket whose lowest result is below the threshold carries a
// mark (✕, a button over the chart); a click on it, or on any point of a chart, lists the jobs
// behind that bucket (GET /api/v1/trends/jobs), the job of the lowest result first.
//
// app.js mounts it when the tab is first shown: RingleaderTrends.mount({getJSON, h, jobLink, fmtSize, fmtTime}).
// Tests read window.ringleaderTrends (the last answer and the charts by key).
"use strict";

window.RingleaderTrends = (function () {
  const API = "/api/v1";
  const FILTERS = ["gpu_model", "op", "link"];
  const COLORS = { mean: "#0072b2", min: "#56b4e9", median: "#009e73", threshold: "#d55e00" };

  class TrendsView {
    constructor(ui) {
      this.ui = ui;
      this.$ = (id) => document.getElementById(id);
      this.charts = new Map();
      this.answer = null;
      for (const id of ["trends-days", ...FILTERS.map((f) => `trends-${f}`)]) this.$(id).addEventListener("change", () => this.load());
      let typing = null;
      this.$("trends-host").addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(() => this.load(), 400); });
      window.ringleaderTrends = this;
      this.load();
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
      drawLinkHistory(node, answer, this.ui);
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
      return h("div", { class: `trend-card${k.marked.length ? " trend-low" : ""}`, "data-key": k.key },
        h("h3", {}, k.marked.length ? h("span", { class: "trend-mark-legend" }, "✕ ") : null, this.title(k)),
        h("p", { class: "muted" }, band
          ? `baseline ${band.median_gbps.toFixed(2)} GB/s, low below ${band.threshold_gbps.toFixed(2)} (${band.samples} samples)`
          : "no baseline yet"),
        h("div", { class: "trend-chart" }));
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
          hr.n > 1 ? h("span", { class: "muted" }, ` · ${hr.n} results: `,
            hr.jobs.filter((j) => j !== hr.worst_job).map((j) => [jobLink(j, j.slice(0, 8)), " "])) : null))));
      node.hidden = false;
    }
  }

  // Rows: peer hosts (the host itself first: its links inside); columns: checks, oldest left; a
  // cell's colour is the slowest link's ratio to the comparable median (blue 1, red 0.25 or less),
  // a flagged cell is crossed. A click on a column opens its check job; flagged checks are listed.
  function drawLinkHistory(node, answer, ui) {
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
