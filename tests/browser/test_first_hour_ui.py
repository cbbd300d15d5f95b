"""A user's first hour in the web UI: a job's placement label is the CLI's (torch's all_reduce runs in one
buffer, so an out-of-place request is labelled in-place, as the CLI's table says), and a queued
job's row shows its live waiting reason (a worker joining changes it without a state change)."""

from __future__ import annotations

from functools import partial

import pytest

import webui
from ringleader_app import table
from ringleader.v1 import jobs_pb2 as pb

WAIT_S = 60
wait_for = partial(webui.wait_for, timeout=WAIT_S)  # this file's wait, not webui's


def test_the_job_page_labels_placement_as_the_cli_does(web_cluster, browser):
    job = web_cluster.wait_job(web_cluster.submit(op="all_reduce", sizes=[1024], iters=3).id)
    assert job.state == pb.SUCCEEDED and not job.spec.collective.in_place
    assert "2 ranks, in-place" in table.results_table(job.results)
    browser.get(f"{web_cluster.http_url}/jobs/{job.id}")
    facts = wait_for(browser, "document.querySelector('.fact-job dd') && document.querySelector('.fact-job dd').textContent")
    assert "in-place" in facts and "out-of-place" not in facts


def test_a_job_compares_with_its_in_place_twin(web_cluster, browser):
    sizes = [4096, 65536]
    first = web_cluster.wait_job(web_cluster.submit(op="all_gather", sizes=sizes, iters=3).id)
    twin = web_cluster.wait_job(web_cluster.submit(op="all_gather", sizes=sizes, iters=3, in_place=True).id)
    assert first.state == twin.state == pb.SUCCEEDED
    browser.get(f"{web_cluster.http_url}/jobs/{first.id}?compare={twin.id}")
    rows = "[...document.querySelectorAll('#results-body tr')]"
    wait_for(browser, f"{rows}.length === 2 && {rows}.every((tr) => tr.cells.length === 10)")
    compared = browser.execute_script(f"return {rows}.map((tr) => tr.cells[9].textContent.trim());")
    assert all(c and c not in ("-", "—") for c in compared), compared  # a value per size, not "-"


def test_a_queued_jobs_row_shows_its_live_reason(web_cluster, browser):
    job = web_cluster.client.submit(pb.JobSpec(world_size=4, collective=pb.CollectiveSpec(op="all_reduce")))
    row = f"document.querySelector('tr[data-job=\"{job.id}\"] td.reason')"
    try:
        browser.get(f"{web_cluster.http_url}/")
        assert "2 connected" in wait_for(browser, f"{row} && {row}.textContent")
        web_cluster.start_worker("w2")
        web_cluster.wait_idle(["w2"])
        # no state change: only the fleet's refresh brings the new reason
        assert wait_for(browser, f"{row}.textContent.includes('3 connected') && {row}.textContent")
    finally:
        web_cluster.client.cancel(job.id)
        web_cluster.kill_worker("w2")


pytestmark = pytest.mark.integration


# Holds the Jobs list's live stream (a fetch of /api/v1/events) until the test lets it go, so a
# change can land between the listing's read and the stream's start.
HOLD_EVENTS = """
window.__holdEvents = true;
const realFetch = window.fetch;
window.fetch = async (url, options) => {
  while (String(url).includes("/api/v1/events") && window.__holdEvents) await new Promise((r) => setTimeout(r, 50));
  return realFetch(url, options);
};
"""


def test_a_job_that_ends_before_the_live_stream_starts_is_not_left_stale(web_cluster, browser):
    job = web_cluster.client.submit(pb.JobSpec(world_size=4, collective=pb.CollectiveSpec(op="all_reduce")))
    row = f"document.querySelector('tr[data-job=\"{job.id}\"]')"
    try:
        with webui.before_scripts(browser, HOLD_EVENTS):
            browser.get(f"{web_cluster.http_url}/")
            assert "QUEUED" in wait_for(browser, f"{row} && {row}.textContent")
            web_cluster.client.cancel(job.id)  # its event reaches no stream: none has started
            assert web_cluster.client.get(job.id).state == pb.CANCELLED
            browser.execute_script("window.__holdEvents = false;")
            assert wait_for(browser, f"{row}.textContent.includes('CANCELLED')")
    finally:
        if web_cluster.client.get(job.id).state == pb.QUEUED:
            web_cluster.client.cancel(job.id)
