"""The fleet health view in a real browser: headless Chromium against a real coordinator (gRPC and
HTTP on loopback, SQLite) and 64 simulated worker daemons on the real WorkerService stream
(bench/simfleet.py), one of them with an unresponsive executor and one disconnected.

Until the fleet checks give verdicts on main, one worker's failed verdict comes from
`stand_in_verdicts` (bench/ui_fleet.py, test-only: it wraps the health book's reads, as a check's
verdict will fill it); the link matrix is a finished link_matrix job in the store, as a
check leaves it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request

import grpc
import pytest

from bench.simfleet import SimSpec, SimWorker, Stats, fleet_specs, run_fleet
from bench.ui_fleet import stand_in_verdicts
from coordinator.store.factory import open_store
from ringleader_app.process import CoordinatorConfig, RunningCoordinator
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc, workers_pb2 as wpb, workers_pb2_grpc

pytest.importorskip("selenium", reason="needs selenium (pip install -e '.[dev]')")
from conftest import chromium  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402
from webui import wait_for  # noqa: E402

pytestmark = pytest.mark.integration

WAIT_S = 30
SIMS = fleet_specs(64, prefix="sim")  # 8 hosts of 8
FAILED = "sim-h0002-d5"
LINK_RANKS = ["sim-h0000-d0", "sim-h0000-d1", "sim-h0001-d0", "sim-h0001-d1"]
CHECK_JOB = "0123456789ab"


class Unresponsive(SimWorker):
    """A daemon whose heartbeats say its executor stopped answering (what worker/daemon.py reports)."""

    async def _beat(self, interval: float) -> None:
        while True:
            self.send(heartbeat=wpb.Heartbeat(executor=pb.EXECUTOR_UNRESPONSIVE))
            await asyncio.sleep(interval)


def link_matrix_job() -> pb.Job:
    """A finished link matrix check over 4 workers of 2 hosts: the link 0-3 at a twentieth of the rest."""
    n = len(LINK_RANKS)
    gbps = [[-1.0 if a == b else 12.0 for b in range(n)] for a in range(n)]
    gbps[0][3] = gbps[3][0] = 0.6
    job = pb.Job(id="4c1c0ffee000", state=pb.SUCCEEDED, created_at=time.time() - 60, finished_at=time.time() - 50,
                 spec=pb.JobSpec(world_size=n, link_matrix=pb.LinkMatrixSpec(size_bytes=512 << 10)),
                 workers=[pb.WorkerRef(rank=r, worker_id=w, host=w[:9]) for r, w in enumerate(LINK_RANKS)])
    job.link_matrix.size_bytes = 512 << 10  # a check's size: said as such, not rounded to "1 MiB"
    job.link_matrix.matrix.extend(pb.P2PMatrixRow(gbps=row) for row in gbps)
    job.link_matrix.links.add(a=0, b=3, gbps=0.6, ratio=0.05, flagged=True)
    return job


class Served:
    """A coordinator and the simulated daemons, on an event loop in a thread of their own."""

    def __init__(self, tmp) -> None:
        store = open_store(str(tmp / "jobs.db"))
        store.create(link_matrix_job())
        store.close()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.rc = RunningCoordinator(CoordinatorConfig(grpc_address="127.0.0.1:0", http_address="127.0.0.1:0",
                                                       db=str(tmp / "jobs.db")))
        self.call(self.rc.start())
        self.url = self.rc.http_url
        self.stop, self.gone = asyncio.Event(), asyncio.Event()
        self.call(self._start_daemons())

    def call(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start_daemons(self) -> None:
        stats = Stats()
        hold = lambda a: float("inf") if a.spec.name == "hold" else 0.05  # noqa: E731
        self.tasks = [asyncio.create_task(run_fleet(self.rc.grpc_target, SIMS, self.stop, stats, hold))]
        self.channel = grpc.aio.insecure_channel(self.rc.grpc_target)
        stub = workers_pb2_grpc.WorkerServiceStub(self.channel)
        self.tasks += [asyncio.create_task(Unresponsive(stub, SimSpec("sim-h0005-d8", "sim-h0005", 8), stats).run(self.stop)),
                       asyncio.create_task(SimWorker(stub, SimSpec("sim-h0006-d8", "sim-h0006", 8), stats).run(self.gone))]
        while len(self.rc.core.workers.connected()) < len(SIMS) + 2:
            await asyncio.sleep(0.05)
        self.gone.set()  # sim-h0006-d8 leaves: listed as DISCONNECTED

    def set_verdicts(self, verdicts: dict[str, pb.WorkerHealth]) -> None:
        stand_in_verdicts(self.rc.core.fleet.book, verdicts)

    def submit(self, spec: pb.JobSpec) -> None:
        async def go() -> None:
            async with grpc.aio.insecure_channel(self.rc.grpc_target) as channel:
                await jobs_pb2_grpc.JobServiceStub(channel).SubmitJob(pb.SubmitJobRequest(spec=spec), timeout=30)
        self.call(go())

    def close(self) -> None:
        self.stop.set()
        self.call(asyncio.wait(self.tasks, timeout=10))
        self.call(self.channel.close())
        self.call(self.rc.stop(grace=0))
        self.loop.call_soon_threadsafe(self.loop.stop)


FAILED_HEALTH = pb.WorkerHealth(verdict=pb.UNHEALTHY, check="gpu_check", figure="412.0 TFLOP/s",
                                expected="median of 7 peers 781.2 TFLOP/s", at=time.time() - 30, job_id=CHECK_JOB)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    s = Served(tmp_path_factory.mktemp("fleet"))
    s.set_verdicts({FAILED: FAILED_HEALTH})
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def page(served, tmp_path_factory):
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    driver.set_window_size(1280, 900)
    try:
        driver.get(f"{served.url}/#fleet")  # the fleet tab (the overview opens on the jobs)
        wait_for(driver, f"document.querySelectorAll('#fleet [data-worker]').length === {len(SIMS) + 2}")
        yield driver
    finally:
        driver.quit()


def cell_class(driver, worker_id: str) -> str:
    return driver.execute_script(
        "return document.querySelector(`#fleet [data-worker='${arguments[0]}']`).className", worker_id)


def test_the_failed_worker_comes_first_and_its_evidence_is_one_click_away(page, tmp_path):
    wait_for(page, f"document.querySelector(\"#fleet [data-worker='{FAILED}']\").dataset.verdict === 'UNHEALTHY'")
    assert "cell-failed" in cell_class(page, FAILED)
    # Nothing that keeps a worker from its work is green.
    wait_for(page, "document.querySelector(\"#fleet [data-worker='sim-h0006-d8']\").classList.contains('cell-down')")
    assert "cell-executor" in cell_class(page, "sim-h0005-d8")
    listed = page.execute_script(
        "return [...document.querySelectorAll('#fleet-attention [data-worker]')].map((b) => b.dataset.worker)")
    assert listed == [FAILED, "sim-h0006-d8", "sim-h0005-d8"]

    page.find_element(By.CSS_SELECTOR, f"#fleet-attention [data-worker='{FAILED}']").click()
    evidence = page.find_element(By.CSS_SELECTOR, "#fleet-detail .evidence")
    for text in ("unhealthy", "gpu_check", "412.0 TFLOP/s", "median of 7 peers 781.2 TFLOP/s"):
        assert text in evidence.text
    for region in ("fleet-attention", "fleet-detail"):
        assert "null" not in page.find_element(By.ID, region).text
    link = evidence.find_element(By.CSS_SELECTOR, "a")
    assert link.get_attribute("href").endswith(f"/jobs/{CHECK_JOB}")
    page.save_screenshot(str(tmp_path / "fleet.png"))
    assert page.execute_script("return window.cspViolations") == []


def test_the_link_matrix_marks_the_flagged_link(page):
    wait_for(page, "!document.getElementById('fleet-links').hidden")
    assert page.execute_script("return document.querySelector('#fleet-links canvas').dataset.n") == "4"
    heading = page.find_element(By.CSS_SELECTOR, "#fleet-links h3").text
    assert "512 KiB ping-pong" in heading and "1 MiB" not in heading, heading
    assert "across hosts" in page.find_element(By.CSS_SELECTOR, "#fleet-links .links-side").text  # two hosts
    flagged = page.find_elements(By.CSS_SELECTOR, "#fleet-links .flagged-link")
    assert len(flagged) == 1
    assert "sim-h0000-d0@sim-h0000 ↔ sim-h0001-d1@sim-h0001" in flagged[0].text and "0.05×" in flagged[0].text
    flagged[0].click()  # opens the link's first worker
    wait_for(page, "document.querySelector('#fleet-detail strong').textContent === 'sim-h0000-d0'")


def test_a_change_repaints_its_cell_in_place(served, page):
    page.execute_script("document.querySelectorAll('#fleet [data-worker]').forEach((c) => { c.__kept = true; });")
    served.set_verdicts({FAILED: FAILED_HEALTH, "sim-h0003-d1": pb.WorkerHealth(
        verdict=pb.SUSPECT, check="sdc_check", figure="checksum 9f3e", expected="majority checksum 1a2b")})
    wait_for(page, "document.querySelector(\"#fleet [data-worker='sim-h0003-d1']\").classList.contains('cell-suspect')")
    assert page.execute_script("return [...document.querySelectorAll('#fleet [data-worker]')].every((c) => c.__kept)")


def test_running_jobs_are_counted_beyond_the_first_page(served, page):
    hold = pb.JobSpec(world_size=1, name="hold",
                      collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))
    for _ in range(55):
        served.submit(hold)
    wait_for(page, "document.getElementById('jobs-summary').textContent === '55 running, 0 queued'")
    # Opened afresh, the table holds its first page (50 jobs); the count is still every running job.
    page.get(f"{served.url}/")
    wait_for(page, "document.querySelectorAll('#jobs-body tr[data-job]').length === 50")
    wait_for(page, "document.getElementById('jobs-summary').textContent === '55 running, 0 queued'")
    # The jobs tab's label carries the same count; the fleet's is led by what is wrong.
    assert page.find_element(By.ID, "tab-jobs").text == "Jobs 55 running, 0 queued"
    assert page.find_element(By.ID, "tab-fleet").text.startswith("Fleet 1 failed, 1 disconnected, 1 executor unresponsive")
    page.find_element(By.ID, "tab-fleet").click()
    wait_for(page, "!document.getElementById('pane-fleet').hidden && document.getElementById('pane-jobs').hidden")


def test_search_and_filter_fold_away_the_rest(page):
    Select(page.find_element(By.ID, "fleet-filter")).select_by_value("UNHEALTHY")
    shown = page.execute_script("return [...document.querySelectorAll('#fleet .host')].filter((h) => !h.hidden)"
                                ".map((h) => h.dataset.host)")
    assert shown == [FAILED[:9]]
    Select(page.find_element(By.ID, "fleet-filter")).select_by_value("")
    page.find_element(By.ID, "fleet-search").send_keys("h0007")
    wait_for(page, "[...document.querySelectorAll('#fleet .host')].filter((h) => !h.hidden).length === 1")
    page.find_element(By.ID, "fleet-search").clear()


def test_the_feed_refuses_a_bad_version_naming_it(served):
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{served.url}/api/v1/fleet?since=-1", timeout=10)
    assert err.value.code == 422
    assert json.load(err.value)["detail"][0]["loc"] == ["query", "since"]


def test_the_overview_asks_for_the_fleet_once_while_its_scripts_load(served, tmp_path):
    """Where the API needs no token, the page preloads the fleet's first answer and its script
    takes that response: one request, made by the preload link (not once the scripts ran)."""
    driver = chromium(tmp_path / "chromium-profile")
    try:
        driver.get(f"{served.url}/#fleet")
        wait_for(driver, f"document.querySelectorAll('#fleet [data-worker]').length === {len(SIMS) + 2}")
        entries = driver.execute_script(
            "return performance.getEntriesByType('resource').map((e) => ({url: e.name, by: e.initiatorType}))")
        assert driver.execute_script("return window.cspViolations") == []
    finally:
        driver.quit()
    fleet = [e for e in entries if "/api/v1/fleet?since=0" in e["url"]]
    assert [e["by"] for e in fleet] == ["link"], entries
