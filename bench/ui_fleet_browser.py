"""The headless Chromium side of bench/ui_fleet.py: open the overview, time its first render,
read the renderers' CPU, press on links as a person does, and follow a failed worker's evidence."""

from __future__ import annotations

import time
from pathlib import Path

from bench import loadstats

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
WIDTH, HEIGHT = 1280, 800
PRESS_S = 0.12  # a person's click: pointer down, then up this much later

# Before any script of the page: note when every worker is in the page (elements with
# data-worker inside #fleet), then the time of the frame after it; and record every click that
# reaches a job link, without following it (the page stays open for the next one).
PROBE = """
window.__firstRender = null;
window.__clicks = [];
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
document.addEventListener('click', (e) => {
  const a = e.target.closest && e.target.closest('a[href^="/jobs/"]');
  if (a) { window.__clicks.push(a.getAttribute('href')); e.preventDefault(); }
}, true);
"""


class Browser:
    def __init__(self, profile: Path, workers: int) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", "--force-device-scale-factor=1", f"--window-size={WIDTH},{HEIGHT}",
                    f"--user-data-dir={profile}"):
            options.add_argument(arg)
        self.driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
        self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PROBE % workers})

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

    def press(self, x: float, y: float) -> None:
        """A real pointer press and release at (x, y) of the viewport, PRESS_S apart."""
        for kind in ("mouseMoved", "mousePressed"):
            self.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {
                "type": kind, "x": x, "y": y, "button": "left" if kind != "mouseMoved" else "none", "clickCount": 1})
        time.sleep(PRESS_S)
        self.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {
            "type": "mouseReleased", "x": x, "y": y, "button": "left", "clickCount": 1})

    def aim(self, selector: str) -> dict | None:
        """Scroll a random visible match of `selector` to the middle of the screen; its centre."""
        return self.js("""
            const all = [...document.querySelectorAll(arguments[0])].filter((e) => e.offsetParent !== null);
            if (!all.length) return null;
            const el = all[Math.floor(Math.random() * all.length)];
            el.scrollIntoView({block: 'center'});
            const r = el.getBoundingClientRect();
            return {x: r.left + r.width / 2, y: r.top + r.height / 2, href: el.getAttribute('href')};
        """, selector)

    def click_job_links(self, n: int) -> dict:
        """`n` presses on job links, alternately in the fleet and in the jobs table (where the
        fleet has none: the jobs table's), 1-2 s apart while the page updates."""
        places = ['#fleet a[href^="/jobs/"], #fleet-detail a[href^="/jobs/"]', '#jobs-body a[href^="/jobs/"]']
        lost, wrong, done, outcome = 0, 0, 0, []
        for i in range(n):
            target = self.aim(places[i % 2]) or self.aim(places[(i + 1) % 2])
            if target is None:
                continue
            time.sleep(0.3)  # after the scroll, as a person moves to the link
            before = self.js("return window.__clicks.length")
            self.press(target["x"], target["y"])
            time.sleep(0.3)
            got = self.js("return window.__clicks.slice(arguments[0])", before)
            done += 1
            lost += not got
            wrong += bool(got) and got[0] != target["href"]
            outcome.append([target["href"], "lost" if not got else "ok" if got[0] == target["href"] else "another link"])
            time.sleep(1 + (i % 2))
        return {"pressed": done, "lost": lost, "reached_another_link": wrong, "outcome": outcome}

    def evidence_clicks(self) -> dict:
        """Clicks from the overview to a failed worker's evidence: press the first failed worker
        the view names (data-verdict="UNHEALTHY"), then look for its evidence (.evidence)."""
        self.js("window.scrollTo(0, 0)")
        time.sleep(0.5)
        clicks = 0
        for _ in range(2):
            if self.js("return !!document.querySelector('#fleet-detail .evidence')"):
                break
            target = self.aim('#fleet-attention [data-verdict="UNHEALTHY"], #fleet [data-verdict="UNHEALTHY"]')
            if target is None:
                return {"reached": False, "clicks": clicks, "why": "no failed worker is shown"}
            self.press(target["x"], target["y"])
            clicks += 1
            time.sleep(0.5)
        text = self.js("const e = document.querySelector('#fleet-detail .evidence'); return e && e.innerText")
        return {"reached": bool(text), "clicks": clicks, "evidence": text}
