"""The web UI in a real browser: headless Chromium against a real coordinator and CPU workers.

The charts must show exactly what the REST API serves; the job page's screenshot is kept in
docs/dashboard.png.
"""

from __future__ import annotations

import json
import math
import os
import urllib.request
from pathlib import Path

import pytest

from ringleader.v1 import jobs_pb2 as pb

pytest.importorskip("selenium", reason="needs selenium (pip install -e '.[dev]')")
from webui import wait_for  # noqa: E402
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

pytestmark = pytest.mark.integration

# The README's picture; rewritten only on request (RINGLEADER_SCREENSHOT=1), so test runs leave
# the committed file alone. Every run still takes a screenshot, into the test's tmp folder.
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"
# The first job sweeps enough sizes to make a chart worth looking at; both stay small and fast.
SWEEP = [1024, 4096, 16384, 65536, 262144, 1048576, 4194304]
SECOND = [1024, 65536, 1048576]
WAIT_S = 30


def _get(url: str, token: str):
    return urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}),
                                  timeout=30)


def get_json(url: str, token: str) -> dict:
    with _get(url, token) as r:
        return json.load(r)


def get_text(url: str, token: str) -> tuple[str, str]:
    with _get(url, token) as r:
        return r.headers.get_content_type(), r.read().decode()


@pytest.fixture(scope="module")
def jobs(web_cluster):
    """Two finished all_reduce sweeps, as the REST API shows them (with results)."""
    ids = []
    for sizes, iters in ((SWEEP, 5), (SECOND, 3)):
        job = web_cluster.submit(op="all_reduce", sizes=sizes, iters=iters)
        done = web_cluster.wait_job(job.id)
        assert done.state == pb.SUCCEEDED, done.reason
        ids.append(job.id)
    return [get_json(f"{web_cluster.http_url}/api/v1/jobs/{i}", web_cluster.users_token) for i in ids]



def chart(browser, name: str) -> dict:
    return browser.execute_script(
        "const c = window.ringleaderCharts[arguments[0]];"
        "return {data: c.data, labels: c.series.map((s) => s.label)};", name)


def set_viewport(browser, width: int, height: int) -> None:
    """Size the window so that the page itself (not the window) is width x height."""
    browser.set_window_size(width, height)
    inner_w, inner_h = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    browser.set_window_size(2 * width - inner_w, 2 * height - inner_h)


def assert_close(got: list, want: list) -> None:
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):
        assert g is not None and math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-12), (got, want)


def test_job_page_charts_the_api_results(web_cluster, jobs, browser, tmp_path):
    first = jobs[0]
    rows = sorted(first["results"], key=lambda r: r["size_bytes"])
    assert [r["size_bytes"] for r in rows] == SWEEP

    browser.get(f"{web_cluster.http_url}/")  # any page of the app, to measure the window
    set_viewport(browser, 1400, 900)
    browser.get(f"{web_cluster.http_url}/jobs/{first['id']}")
    wait_for(browser, f"window.ringleaderCharts && window.ringleaderCharts.busbw"
                      f" && window.ringleaderCharts.busbw.data[0].length === {len(SWEEP)}")

    busbw = chart(browser, "busbw")
    assert busbw["data"][0] == SWEEP  # x: exactly the job's sizes
    assert len(busbw["data"]) == 2  # one op, one line
    assert_close(busbw["data"][1], [r["busbw_gbps"] for r in rows])
    assert busbw["labels"][1] == "all_reduce"

    time_us = chart(browser, "time")
    assert time_us["data"][0] == SWEEP
    assert_close(time_us["data"][1], [r["time_us"] for r in rows])

    # The nccl-tests-style table: one row per size, in order, with the API's numbers.
    table = browser.execute_script(
        "return [...document.querySelectorAll('#results-body tr')]"
        ".map((tr) => [...tr.cells].map((td) => td.textContent));")
    assert [int(cells[0]) for cells in table] == SWEEP
    assert [int(cells[1]) for cells in table] == [r["count"] for r in rows]
    assert {cells[2] for cells in table} == {"float32"}
    assert {cells[3] for cells in table} == {"sum"}
    assert [int(cells[8]) for cells in table] == [0] * len(SWEEP)  # #wrong

    # Download links serve the job's results.
    json_href = browser.find_element(By.ID, "dl-json").get_attribute("href")
    csv_href = browser.find_element(By.ID, "dl-csv").get_attribute("href")
    token = web_cluster.users_token
    assert [r["size_bytes"] for r in get_json(json_href, token)["results"]] == [r["size_bytes"] for r in first["results"]]
    content_type, csv_text = get_text(csv_href, token)
    assert content_type == "text/csv"
    assert len(csv_text.strip().splitlines()) == 1 + len(SWEEP)
    # Clicking it saves the file: fetched with the token, saved from a blob.
    browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    browser.find_element(By.ID, "dl-csv").click()
    saved = tmp_path / f"{first['id']}.csv"
    WebDriverWait(browser, WAIT_S).until(lambda _: saved.exists() and saved.read_text().count("\n") == 1 + len(SWEEP))
    assert saved.read_bytes() == csv_text.encode()
    assert browser.execute_script("return window.cspViolations") == []  # the strict CSP blocked nothing

    # Let the page settle (fonts, layout) before keeping its picture.
    wait_for(browser, "document.fonts.status === 'loaded'")
    target = SCREENSHOT if os.environ.get("RINGLEADER_SCREENSHOT") else tmp_path / "dashboard.png"
    target.parent.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(target))


def test_compare_overlays_a_second_job(web_cluster, jobs, browser):
    first, second = jobs
    browser.get(f"{web_cluster.http_url}/jobs/{first['id']}")
    wait_for(browser, "window.ringleaderCharts && window.ringleaderCharts.busbw")
    wait_for(browser, f"document.querySelector('#compare option[value=\"{second['id']}\"]')")

    Select(browser.find_element(By.ID, "compare")).select_by_value(second["id"])
    wait_for(browser, "window.ringleaderCharts.busbw.series.length === 3")

    busbw = chart(browser, "busbw")
    assert busbw["labels"][1:] == [f"all_reduce · {first['id'][:8]}", f"all_reduce · {second['id'][:8]}"]
    xs = busbw["data"][0]
    assert xs == sorted(set(SWEEP) | set(SECOND))
    theirs = {r["size_bytes"]: r["busbw_gbps"] for r in second["results"]}
    overlay = busbw["data"][2]
    assert_close([overlay[xs.index(s)] for s in SECOND], [theirs[s] for s in SECOND])
    assert all(overlay[i] is None for i, x in enumerate(xs) if x not in theirs)  # gaps, not zeros
    assert chart(browser, "time")["labels"] == busbw["labels"]

    # The comparison is part of the address, so it can be shared.
    assert f"compare={second['id']}" in browser.current_url
    # The table gains a column comparing busbw size by size.
    cells = browser.execute_script(
        "return [...document.querySelectorAll('#results-body tr')].map((tr) => tr.cells.length);")
    assert cells == [10] * len(SWEEP)


def test_overview_lists_workers_and_jobs(web_cluster, jobs, browser):
    browser.get(f"{web_cluster.http_url}/#fleet")
    wait_for(browser, "document.querySelectorAll('#fleet [data-worker]').length >= 2")
    # A cell per worker (tests/browser/test_fleet_health_view.py covers the fleet view); its title says what it is.
    workers = browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#fleet [data-worker]')]"
        ".map((c) => [c.dataset.worker, [c.className, c.title]]));")
    for wid in ("w0", "w1"):
        cls, title = workers[wid]
        assert "cell-unchecked" in cls and title.startswith(f"{wid} · ") and " · idle" in title, (wid, cls, title)
    # The summary is drawn after the cells (at load 19 it was still empty when they appeared).
    wait_for(browser, "document.getElementById('fleet-summary').innerText.includes('on 1 host')")

    browser.find_element(By.ID, "tab-jobs").click()
    wait_for(browser, "document.querySelectorAll('#jobs-body tr[data-job]').length >= 2")
    listed = browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#jobs-body tr[data-job]')]"
        ".map((tr) => [tr.dataset.job, tr.cells[2].textContent]));")
    assert {j["id"]: "SUCCEEDED" for j in jobs}.items() <= listed.items()


def test_overview_is_live(web_cluster, jobs, browser):
    """A job submitted while the page is open appears, runs and finishes without a reload."""
    browser.get(f"{web_cluster.http_url}/")
    wait_for(browser, "document.getElementById('live').textContent === 'live'")
    job = web_cluster.submit(op="all_reduce", sizes=SECOND, iters=3)
    row = f"document.querySelector('#jobs-body tr[data-job=\"{job.id}\"]')"
    # It waits behind the "new jobs" bar (rows shown never move by themselves) until asked for.
    wait_for(browser, "document.querySelectorAll('#jobs-body tr[data-job]').length >= 2")
    wait_for(browser, "!document.getElementById('jobs-new').hidden")
    assert not browser.execute_script(f"return {row}")
    browser.find_element(By.ID, "jobs-new").click()
    wait_for(browser, row)
    wait_for(browser, f"{row}.cells[2].textContent === 'SUCCEEDED'", timeout=120)
    assert browser.execute_script(f"return {row}.querySelector('.progress-label').textContent") \
        == f"{len(SECOND)}/{len(SECOND)}"


def test_job_page_is_live(web_cluster, jobs, browser):
    """Opened while the job waits, the page follows it: RUNNING, points as sizes finish, SUCCEEDED."""
    # The job waits for a worker that is not there yet: the page is up before it starts.
    job = web_cluster.submit(workers=("w0", "late"), op="all_reduce", sizes=SWEEP, iters=20)
    browser.get(f"{web_cluster.http_url}/jobs/{job.id}")
    state = "document.getElementById('job-state').textContent"
    wait_for(browser, f"{state} === 'QUEUED' && document.getElementById('live').textContent === 'live'")
    # Record what the page shows, often, from here on.
    browser.execute_script(f"""
        window.seen = [];
        setInterval(() => {{
          const chart = window.ringleaderCharts.busbw;
          window.seen.push([{state}, chart ? chart.data[0].length : -1]);
        }}, 5);""")

    web_cluster.start_worker("late")
    try:
        wait_for(browser, f"{state} === 'SUCCEEDED'", timeout=120)
    except TimeoutException:
        done = web_cluster.client.get(job.id)
        pytest.fail(f"the page shows {browser.execute_script(f'return {state}')}; the job is "
                    f"{pb.JobState.Name(done.state)} ({done.reason}); logs in {web_cluster.tmp}")

    seen = browser.execute_script("return window.seen")
    while_running = {n for s, n in seen if s == "RUNNING"}
    assert while_running, "the page never showed the job RUNNING"
    assert any(0 < n < len(SWEEP) for n in while_running), f"no partial sweep seen: {sorted(while_running)}"
    rows = sorted(get_json(f"{web_cluster.http_url}/api/v1/jobs/{job.id}", web_cluster.users_token)["results"],
                  key=lambda r: r["size_bytes"])
    wait_for(browser, f"window.ringleaderCharts.busbw.data[0].length === {len(SWEEP)}")
    busbw = chart(browser, "busbw")
    assert busbw["data"][0] == SWEEP
    assert_close(busbw["data"][1], [r["busbw_gbps"] for r in rows])


def test_other_kinds_chart_their_results(web_cluster, browser):
    """p2p and training jobs (real ones, run by the workers) get their own charts."""
    c = web_cluster
    p2p = c.wait_job(c.client.submit(pb.JobSpec(world_size=2, p2p=pb.P2PSpec(sizes=[1024, 65536], iters=3))).id)
    train = c.wait_job(c.client.submit(pb.JobSpec(world_size=2, train=pb.TrainSpec(steps=8, batch_size=16))).id)
    assert p2p.state == train.state == pb.SUCCEEDED, (p2p.reason, train.reason)
    browser.get(f"{c.http_url}/jobs/{p2p.id}")
    wait_for(browser, "window.ringleaderCharts && window.ringleaderCharts.bandwidth")
    bw = chart(browser, "bandwidth")
    assert_close(bw["data"][0], [1024, 65536])
    assert_close(bw["data"][1], [r.bandwidth_gbps for r in p2p.p2p.rows])
    browser.get(f"{c.http_url}/jobs/{train.id}")
    wait_for(browser, "window.ringleaderCharts && window.ringleaderCharts.loss")
    loss = chart(browser, "loss")
    assert_close(loss["data"][0], list(range(1, 9)))
    assert_close(loss["data"][1], list(train.train.loss))
