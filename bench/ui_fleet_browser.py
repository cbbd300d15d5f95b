"""The headless Chromium side of bench/ui_fleet.py: open the overview, time its first render,
read the renderers' CPU, press on job links and worker cells as a person does (a click is right
only when the intended page or worker opens), and follow a failed worker's evidence. A run in
which the overview never shows every worker raises; wrong clicks are reported per click."""

from __future__ import annotations

import time
from pathlib import Path

from bench import loadstats

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
WIDTH, HEIGHT = 1280, 800
PRESS_S = 0.12  # a person's click: pointer down, then up this much later

# Before any script of the page: note when every worker is in the page (elements with
# data-worker inside #fleet), then the time of the frame after it; keep the page's errors.
PROBE = """
window.__firstRender = null;
window.__errors = [];
window.addEventListener('error', (e) => window.__errors.push(`${e.message} ${e.filename}:${e.lineno}`));
window.addEventListener('unhandledrejection', (e) => window.__errors.push(String(e.reason)));
const want = %d;
const obs = new MutationObserver(() => {
  if (document.querySelectorAll('#fleet [data-worker]').length < want) return;
  obs.disconnect();
  requestAnimationFrame(() => setTimeout(() => { window.__firstRender = performance.now(); }));
});
obs.observe(document, {childList: true, subtree: true});
"""
# Before any script of the page: the ids of jobs a jobs listing answered in a live state.
LISTED_LIVE = """
window.__listedLive = [];
const listedFetch = window.fetch;
window.fetch = async (url, options) => {
  const answer = await listedFetch(url, options);
  if (/\\/api\\/v1\\/jobs\\?/.test(String(url))) {
    answer.clone().json().then((body) => {
      for (const j of body.jobs || []) if (!["SUCCEEDED", "FAILED", "CANCELLED"].includes(j.state)) window.__listedLive.push(j.id);
    }).catch(() => {});
  }
  return answer;
};
"""
AIM_S = 0.3  # from seeing the target to the pointer being there
REST_S = 0.6  # "rest": the pointer stays on the target this long before pressing


class Browser:
    def __init__(self, profile: Path, workers: int, trace: tuple[str, Path, int] | None = None) -> None:
        """`trace`: (categories, file, seconds): Chromium records a trace of its first seconds to file."""
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", "--force-device-scale-factor=1", f"--window-size={WIDTH},{HEIGHT}",
                    f"--user-data-dir={profile}"):
            options.add_argument(arg)
        if trace:
            for arg in (f"--trace-startup={trace[0]}", f"--trace-startup-file={trace[1]}",
                        f"--trace-startup-duration={trace[2]}", "--trace-startup-format=json"):
                options.add_argument(arg)
        self.driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
        self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PROBE % workers})
        # A page starved of CPU on a loaded machine answers late, not never.
        self.driver.set_script_timeout(120)
        self.driver.set_page_load_timeout(180)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.driver.quit()

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def first_render(self, url: str, timeout: float = 180.0) -> dict:
        self.driver.get(url)
        deadline = time.monotonic() + timeout
        while (ms := self.js("return window.__firstRender")) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the overview never showed every worker")
            time.sleep(0.05)
        # Where the time went: the fleet's first answer (request sent, last byte in) and its drawing.
        steps = self.js("""
            const answer = performance.getEntriesByType('resource').find((e) => /\\/api\\/v1\\/(fleet\\?since=0|workers)/.test(e.name));
            const drawn = performance.getEntriesByName('fleet:first-drawn')[0];
            return {answer_requested_s: answer && answer.requestStart / 1000, answer_received_s: answer && answer.responseEnd / 1000,
                    drawn_s: drawn ? drawn.startTime / 1000 : null};
        """)
        return {"first_render_s": ms / 1000, "first_render_steps": steps,
                "workers_in_page": self.js("return document.querySelectorAll('#fleet [data-worker]').length"),
                "page_screens": self.js("return document.documentElement.scrollHeight / window.innerHeight")}

    def renderer_cpu_s(self) -> float:
        """CPU seconds of every renderer process under this browser."""
        root = self.driver.service.process.pid
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                pid, ppid = int(stat.parent.name), int(stat.read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(pid)
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            todo.extend(children.get(pid, []))
            try:
                renderer = b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if renderer:
                total += loadstats.cpu_seconds(pid)
        return total

    def move(self, x: float, y: float) -> None:
        self.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y, "button": "none"})

    def press(self, x: float, y: float) -> None:
        """A real pointer press and release at (x, y) of the viewport, PRESS_S apart."""
        self.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {
            "type": "mousePressed", "x": x, "y": y, "button": "left", "clickCount": 1})
        time.sleep(PRESS_S)
        self.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {
            "type": "mouseReleased", "x": x, "y": y, "button": "left", "clickCount": 1})

    def aim(self, selector: str) -> dict | None:
        """Scroll a random visible match of `selector` to the middle of the screen; its centre,
        its href and the worker it names."""
        # Read where it is once the scrolled page has been drawn (two frames): what a person sees.
        return self.driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            const all = [...document.querySelectorAll(arguments[0])].filter((e) => e.offsetParent !== null);
            if (!all.length) return done(null);
            const el = all[Math.floor(Math.random() * all.length)];
            el.scrollIntoView({block: 'center'});
            requestAnimationFrame(() => requestAnimationFrame(() => {
                const r = el.getBoundingClientRect();
                done({x: r.left + r.width / 2, y: r.top + r.height / 2, href: el.getAttribute('href'),
                      worker: el.dataset.worker || null});
            }));
        """, selector)

    def gesture(self, target: dict, mode: str) -> None:
        """The person aimed at `target` AIM_S ago; "arrive": the pointer gets there as it presses;
        "rest": it gets there, rests REST_S, then presses."""
        if mode == "rest":
            self.move(target["x"], target["y"])
            time.sleep(REST_S)
        else:
            self.move(target["x"], target["y"])
        self.press(target["x"], target["y"])

    def open_overview(self, base: str, tab: str, ready: str) -> None:
        self.driver.get(f"{base}/#{tab}")
        self.wait(ready, 60)

    def wait(self, script: str, timeout: float) -> object:
        deadline = time.monotonic() + timeout
        while not (value := self.js(f"return {script}")):
            if time.monotonic() > deadline:
                return value
            time.sleep(0.05)
        return value

    def click_job_links(self, base: str, n: int, mode: str) -> dict:
        """`n` presses on job links of the jobs tab while jobs arrive; right only when the
        intended job's page opens. The overview is opened afresh for each."""
        ready = "document.querySelectorAll('#jobs-body a[href^=\"/jobs/\"]').length >= 20"
        right, outcome = 0, []
        for i in range(n):
            self.open_overview(base, "jobs", ready)
            time.sleep(1 + (i % 3))  # the tab open a while, jobs arriving
            target = self.aim('#jobs-body a[href^="/jobs/"]')
            if target is None:
                outcome.append([None, "no job link shown"])
                continue
            time.sleep(AIM_S)
            self.gesture(target, mode)
            job_id = target["href"].rsplit("/", 1)[1]
            # Which page opened (its address), then whether it shows that job (its title holds the
            # id once the job is loaded; the page's placeholder title is "job").
            opened = self.wait("location.pathname.startsWith('/jobs/') && location.pathname", 5)
            shown = opened == target["href"] and self.wait(
                f"document.getElementById('job-title').textContent.includes('{job_id}')", 15)
            right += bool(shown)
            outcome.append([target["href"], "right" if shown else f"wrong: {opened or 'nothing opened'}"
                            + ("" if opened != target["href"] else " (its page never showed the job)")])
        return {"pressed": n, "right": right, "outcome": outcome}

    def stale_rows(self, base: str, n: int, ended_at, settle_s: float = 5.0) -> dict:
        """`n` loads of the jobs tab while jobs start and end: `settle_s` after each load shows
        rows, every row still in a live state (QUEUED, RUNNING, ...) whose job the coordinator
        says ended more than `settle_s` before the rows were read is stale (its end never reached
        the row). Counted beside: the jobs the page's listings answered live, and how many of them
        ended before the read (each a chance to go stale). `ended_at(ids)`: {job id: when it
        ended} of those of `ids` that have ended."""
        # The jobs each listing the page read answered live: the rows whose end must reach the page
        # (a job that ends between the listing and the live stream's start is the race).
        listed = self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": LISTED_LIVE})
        try:
            return self._stale_rows(base, n, ended_at, settle_s)
        finally:
            self.driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": listed["identifier"]})

    def _stale_rows(self, base: str, n: int, ended_at, settle_s: float) -> dict:
        ready = "document.querySelectorAll('#jobs-body tr[data-job]').length >= 20"
        rows_js = ("return [...document.querySelectorAll('#jobs-body tr[data-job]')]"
                   ".map((r) => [r.dataset.job, (r.className.match(/job-([a-z_]+)/) || [])[1] || ''])")
        ended_states = ("SUCCEEDED", "FAILED", "CANCELLED")
        stale, live_at_load, ended_since, loads = [], 0, 0, []
        for i in range(n):
            self.open_overview(base, "jobs", ready)
            time.sleep(settle_s)
            first = self.js("return window.__listedLive || []")
            read_at = time.time()
            live = [job for job, state in self.js(rows_js) if state.upper() not in ended_states]
            ended = ended_at(sorted(set(first) | set(live)))
            here = [job for job in live if job in ended and ended[job] < read_at - settle_s]
            live_at_load += len(set(first))
            ended_since += sum(1 for job in set(first) if job in ended and ended[job] < read_at - settle_s)
            loads.append(len(here))
            stale += [[i, job] for job in here]
        return {"loads": n, "loads_with_stale_rows": sum(1 for x in loads if x), "stale_rows": len(stale),
                "listed_live": live_at_load, "of_which_ended_before_the_read": ended_since, "stale": stale[:20]}

    def click_worker_cells(self, base: str, n: int) -> dict:
        """`n` presses on worker cells of the fleet tab (alternately arriving and resting); right
        only when the detail panel then names the intended worker."""
        self.open_overview(base, "fleet", "document.querySelectorAll('#fleet [data-worker]').length > 0")
        right, outcome = 0, []
        for i in range(n):
            target = self.aim("#fleet [data-worker]")
            time.sleep(AIM_S)
            self.gesture(target, ("arrive", "rest")[i % 2])
            shown = self.wait(f"(document.querySelector('#fleet-detail strong') || {{}}).textContent === '{target['worker']}'", 3)
            right += bool(shown)
            outcome.append([target["worker"], "right" if shown else "wrong"])
            time.sleep(0.5)
        return {"pressed": n, "right": right, "outcome": outcome}

    def evidence_clicks(self, base: str) -> dict:
        """Clicks from the overview to a failed worker's evidence: the Fleet tab, then the first
        failed worker the view names (data-verdict="UNHEALTHY"), then its evidence (.evidence)."""
        self.open_overview(base, "jobs", "document.querySelectorAll('#fleet [data-worker]').length > 0")
        time.sleep(0.5)
        tab = self.aim("#tab-fleet")
        self.gesture(tab, "arrive")
        clicks = 1
        if not self.wait("!document.getElementById('pane-fleet').hidden", 5):
            return {"reached": False, "clicks": clicks, "why": "the Fleet tab did not open"}
        self.wait("document.querySelector('#fleet-attention [data-verdict=\"UNHEALTHY\"]')", 5)
        for _ in range(2):
            if self.js("return !!document.querySelector('#fleet-detail .evidence')"):
                break
            target = self.aim('#fleet-attention [data-verdict="UNHEALTHY"], #fleet [data-verdict="UNHEALTHY"]')
            if target is None:
                return {"reached": False, "clicks": clicks, "why": "no failed worker is shown"}
            self.gesture(target, "arrive")
            clicks += 1
            time.sleep(0.5)
        text = self.js("const e = document.querySelector('#fleet-detail .evidence'); return e && e.innerText")
        return {"reached": bool(text), "clicks": clicks, "evidence": text}
