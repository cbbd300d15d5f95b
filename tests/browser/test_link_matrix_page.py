"""Where, not only what: the "Bandwidth over time" tab in headless Chromium answers which host or
link, on a real coordinator process whose SQLite store holds a month of history for 5,000 simulated
GPUs with one regressed host (bench/trends_history.py) and the fleet's latest link sweep (157 gang
checks of 625 hosts, as the sweeper runs them) with one slowed link. From the tab, one click on the
listed worst pair (or on its cell of the host x host heat map) names the slow link's two hosts; a
regressed key's worst host stands beside its chart; a bad bucket's hours link to their hosts."""

from __future__ import annotations

from functools import partial

import time

import pytest

from bench.trends_history import write_fleet_link_sweep
from cluster import running
from coordinator.store.sqlite import SqliteJobStore

pytest.importorskip("selenium", reason="needs selenium (pip install -e '.[dev]')")
import webui  # noqa: E402
from conftest import chromium  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.integration

WAIT_S = 60
MAX_CLICKS = 2
wait_for = partial(webui.wait_for, timeout=WAIT_S)  # this file\'s wait, not webui\'s


@pytest.fixture(scope="module")
def served(tmp_path_factory, trends_month):
    tmp = tmp_path_factory.mktemp("link-matrix-ui")
    history = trends_month(tmp / "jobs.db", max_age_s=300)
    store = SqliteJobStore(tmp / "jobs.db")
    store.defer_commits(lambda: None)
    sweep = write_fleet_link_sweep(store, workers=5000, until=time.time())
    store.commit()
    store.close()
    with running(tmp, [], http=True) as c:
        yield c, history, sweep


@pytest.fixture(scope="module")
def page(served, tmp_path_factory):
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    driver.set_window_size(1280, 900)
    try:
        yield driver
    finally:
        driver.quit()


def open_trends(page, url: str) -> None:
    page.get("about:blank")  # a fresh page: from "/#trends?host=..." only the hash would change
    page.get(f"{url}/#trends")
    wait_for(page, "window.ringleaderTrends && window.ringleaderTrends.matrix && "
                   "document.querySelector('#trend-matrix canvas.link-matrix') && document.querySelectorAll('.trend-card').length > 0")


def pair_shown(page) -> str:
    return wait_for(page, "!document.getElementById('trend-pair').hidden && "
                          "document.querySelector('#trend-pair .pair-name') && document.getElementById('trend-pair').textContent")


def test_the_slow_links_two_hosts_are_one_click_from_the_bandwidth_view(served, page, tmp_path):
    c, _, sweep = served
    a, b = sweep.slow
    open_trends(page, c.http_url)
    m = page.execute_script("return window.ringleaderTrends.matrix")
    assert len(m["hosts"]) == 625 and m["checks"] == 157 and m["low"] == 1
    # The worst pair is listed first, naming both hosts; the pair at 1.4x its baseline is not low.
    rows = page.find_elements(By.CSS_SELECTOR, "#trend-matrix .worst-links tbody tr")
    assert rows[0].get_attribute("data-pair") == f"{a}|{b}" and "low" in rows[0].get_attribute("class")
    assert not any("low" in r.get_attribute("class") for r in rows[1:])
    assert f"{sweep.fast[0]}|{sweep.fast[1]}" not in [r.get_attribute("data-pair") for r in rows if "low" in r.get_attribute("class")]
    assert "as of" in page.find_element(By.ID, "trend-matrix-asof").text
    page.save_screenshot(str(tmp_path / "link-matrix.png"))

    clicks = 0
    link = rows[0].find_element(By.CSS_SELECTOR, "a.pair-link")
    assert link.tag_name == "a" and link.get_attribute("href").endswith(f"#trends?host={a}&peer={b}")
    link.click()
    clicks += 1
    text = pair_shown(page)
    assert f"{a} ↔ {b}" in text and "below its expectation" in text and sweep.slow_job[:8] in text, text
    # The page it leads to is the host's: its charts filtered to it, its links over time with the peer.
    wait_for(page, f"window.ringleaderTrends.host === '{a}' && !document.getElementById('trend-links').hidden")
    assert b in page.find_element(By.ID, "trend-links").text
    assert clicks <= MAX_CLICKS

    # The heat map's red cell, clicked (a pixel per host at 625 hosts: its mark is drawn larger).
    open_trends(page, c.http_url)
    assert page.find_element(By.ID, "trend-pair").get_attribute("hidden") is not None
    canvas = page.find_element(By.CSS_SELECTOR, "#trend-matrix canvas.link-matrix")
    i, j = m["hosts"].index(a), m["hosts"].index(b)
    px = page.execute_script("const c = arguments[0]; return c.width / Number(c.dataset.n)", canvas)
    width = canvas.size["width"]
    # Selenium's offsets are from the centre of the element's part in view: all of it in view.
    page.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    # Aim a pixel off the cell, as a hand would.
    ActionChains(page).move_to_element_with_offset(canvas, int((j + 0.5) * px - width / 2) + 1,
                                                   int((i + 0.5) * px - width / 2) - 1).click().perform()
    text = pair_shown(page)
    assert f"{a} ↔ {b}" in text, text
    assert page.execute_script("return window.cspViolations") == []


def test_the_matrix_is_read_again_while_the_tab_is_open(served, page):
    c, _, _ = served
    # The page's period (15 s) made short for this page load only, as a test hook the page reads.
    with webui.before_scripts(page, "window.RINGLEADER_MATRIX_REFRESH_MS = 1500"):
        open_trends(page, c.http_url)
    first = page.execute_script("return window.ringleaderTrends.matrixReadAt")
    wait_for(page, f"window.ringleaderTrends.matrixReadAt > {first}", timeout=20)
    assert "read" in page.find_element(By.ID, "trend-matrix-asof").text


def test_a_regressed_keys_worst_host_is_beside_it_and_a_bad_bucket_links_to_the_host(served, page):
    c, history, _ = served
    open_trends(page, c.http_url)
    card = f".trend-card[data-key=\"{history.key}\"]"
    first = wait_for(page, f"document.querySelector('{card} .trend-hosts li[data-host]') && "
                           f"document.querySelector('{card} .trend-hosts li[data-host]').dataset.host")
    assert first == history.host
    # A bad bucket's hours: each names its hosts as links (anchors, not text).
    page.find_elements(By.CSS_SELECTOR, f"{card} .trend-mark")[-1].click()
    host = WebDriverWait(page, WAIT_S).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, f"#trend-jobs li.low a[href='#trends?host={history.host}']"))[0]
    # Every job the hour names is a link too (they were written out as their URLs' text).
    item = page.find_element(By.CSS_SELECTOR, "#trend-jobs li.low")
    assert "http" not in item.text and len(item.find_elements(By.CSS_SELECTOR, "a[href^='/jobs/']")) >= 2, item.text
    host.click()
    wait_for(page, f"window.ringleaderTrends.host === '{history.host}' && !document.getElementById('trend-links').hidden")
    assert page.find_element(By.ID, "trends-host").get_attribute("value") == history.host
    assert f"Links of {history.host}" in page.find_element(By.ID, "trend-links").text
    assert page.execute_script("return window.cspViolations") == []


@pytest.mark.parametrize("any_signal", [True, False], ids=["AbortSignal.any", "older-browser"])
def test_pages_left_behind_hold_no_connection_the_next_page_waits_for(served, page, any_signal):
    """A page left its requests open (the fleet's long poll waits 25 s; the event stream, for
    good): a browser opens 6 connections to one host, so after a few loads of the tab (each with
    a click to a pair) the next page's script waited 21.8 s behind pages no longer shown. A page
    now ends its requests when it goes away (pagehide): no request of a new load waits 10 s; also
    in a browser without AbortSignal.any (before 2023), removed here before the page loads."""
    c, _, _ = served
    slowest = []
    with webui.before_scripts(page, "" if any_signal else "delete AbortSignal.any"):
        for _ in range(4):
            _load_and_leave_a_pair(page, c.http_url, slowest)
    worst = max(slowest)
    assert worst[0] < 10_000, f"a request of a new page waited {worst[0]} ms: {worst[1]} (each load's slowest: {slowest})"


def _load_and_leave_a_pair(page, url: str, slowest: list) -> None:
    """A load of the tab (its slowest request kept), then a click to the worst pair."""
    open_trends(page, url)
    slowest.append(page.execute_script("return performance.getEntriesByType('resource')"
                                       ".map(e => [Math.round(e.duration), e.name]).sort((a, b) => b[0] - a[0])[0]"))
    page.find_element(By.CSS_SELECTOR, "#trend-matrix .worst-links tbody tr a.pair-link").click()
    pair_shown(page)
