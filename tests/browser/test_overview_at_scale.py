"""The overview's promises that make it usable at fleet size, in headless Chromium against a real
coordinator and two real CPU workers (web_cluster): jobs and fleet are tabs; a new job never moves
a row (it waits behind the "N new jobs" bar); ages are computed when shown; every status that is
wrong has a mark as well as a colour.

(bench/ui_fleet.py measures the same page with 5,000 simulated workers and jobs streaming.)
"""

from __future__ import annotations

from functools import partial

import time

import pytest

from ringleader.v1 import jobs_pb2 as pb

pytest.importorskip("selenium", reason="needs selenium (pip install -e '.[dev]')")
import webui  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

pytestmark = pytest.mark.integration

WAIT_S = 60
ROWS = "[...document.querySelectorAll('#jobs-body tr[data-job]')]"
wait_for = partial(webui.wait_for, timeout=WAIT_S)  # this file\'s wait, not webui\'s


def quick_job(c) -> str:
    return c.client.submit(pb.JobSpec(world_size=1, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024],
                                                                                 iters=1, warmup=0))).id


def test_new_jobs_wait_behind_a_bar_and_no_row_moves(web_cluster, browser):
    c = web_cluster
    for _ in range(3):
        c.wait_job(quick_job(c))
    browser.get(f"{c.http_url}/")
    wait_for(browser, f"{ROWS}.length >= 3 && document.getElementById('live').textContent === 'live'")
    assert not browser.find_element(By.ID, "pane-jobs").get_attribute("hidden")
    assert browser.find_element(By.ID, "pane-fleet").get_attribute("hidden") is not None
    before = browser.execute_script(f"return {ROWS}.map((tr) => [tr.dataset.job, tr.getBoundingClientRect().top])")

    new = [quick_job(c) for _ in range(2)]
    for job_id in new:
        c.wait_job(job_id)
    wait_for(browser, "document.getElementById('jobs-new').textContent === '2 new jobs: show'")
    after = browser.execute_script(f"return {ROWS}.map((tr) => [tr.dataset.job, tr.getBoundingClientRect().top])")
    assert after == before  # the same rows at the same places, the bar included

    browser.find_element(By.ID, "jobs-new").click()
    wait_for(browser, "document.getElementById('jobs-new').hidden")
    shown = browser.execute_script(f"return {ROWS}.map((tr) => tr.dataset.job)")
    assert shown[:2] == new[::-1] and shown[2:2 + len(before)] == [job for job, _ in before]


def test_ages_are_computed_when_shown(web_cluster, browser):
    c = web_cluster
    c.wait_job(quick_job(c))
    browser.get(f"{c.http_url}/")
    wait_for(browser, f"{ROWS}.length >= 1")
    time.sleep(2.5)  # ages must move on by themselves
    ages = browser.execute_script(f"""return {ROWS}.map((tr) => {{
        const cell = tr.querySelector('td.age');
        return [Number(cell.dataset.t), cell.textContent, Date.now() / 1000];
    }})""")
    seconds = []
    for created, text, now in ages:
        value, unit = text.removesuffix(" ago").split(" ")
        scale = {"s": 1, "min": 60, "h": 3600, "d": 86400}[unit]
        seconds.append(float(value) * scale)
        # One tick (1 s) and the rounding of the unit at most away from the truth.
        assert abs(float(value) * scale - (now - created)) <= 1.1 + scale / 2, (text, now - created)
    assert seconds == sorted(seconds)  # newest first, so ages only grow down the table


def test_every_problem_has_a_mark_as_well_as_a_colour(web_cluster, browser):
    browser.get(f"{web_cluster.http_url}/#fleet")
    wait_for(browser, "document.querySelectorAll('#fleet [data-worker]').length >= 2")
    looks = browser.execute_script("""
        const out = {};
        for (const cls of ['failed', 'down', 'quarantined', 'executor', 'stale', 'suspect', 'starting', 'busy', 'ok', 'unchecked']) {
            const i = document.createElement('i');
            i.className = `cell cell-${cls}`;
            document.body.append(i);
            const s = getComputedStyle(i), a = getComputedStyle(i, '::after');
            out[cls] = [a.content, s.backgroundColor + ' ' + s.backgroundImage, s.boxShadow];
            i.remove();
        }
        return out;""")
    problems = ["failed", "down", "quarantined", "executor", "stale", "suspect"]
    marks = [looks[c][0] for c in problems]
    assert all(m not in ("none", "normal", "") for m in marks) and len(set(marks)) == len(marks), looks
    # Healthy and never checked differ in fill (solid against hollow), not only in hue.
    assert looks["ok"][2] == "none" and looks["unchecked"][2] != "none", looks
    assert browser.find_element(By.ID, "fleet-summary").text.startswith("nothing wrong")
