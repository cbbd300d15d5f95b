"""Fleet bandwidth over time (dashboard/trends_api.py) on a real coordinator process with its
dashboard and two real CPU workers, over a month of history for 5,000 simulated GPUs written into
its SQLite store beforehand (bench/trends_history.py: one host's all_reduce at 2^28 regressed in the
last days)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from bench.trends_history import LINK_BAD_DAYS, REGRESSED_DAYS
from cluster import running
from ringleader.v1 import jobs_pb2 as pb


@pytest.fixture(scope="module")
def served(tmp_path_factory, trends_month):
    tmp = tmp_path_factory.mktemp("trends-rest")
    history = trends_month(tmp / "jobs.db")  # every query here names the month's own `until`
    with running(tmp, ["t0", "t1"], http=True) as c:
        with httpx.Client(base_url=c.http_url, timeout=60) as client:
            yield client, history, c


def cpu_s(pid: int) -> float:
    """The CPU seconds a process has spent (user + system, all its threads): what answering a
    request costs it, whatever else the machine runs meanwhile."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_month_at_5000_workers_loads_in_under_a_second_and_marks_the_regression(served):
    api, history, c = served
    took, cpu = [], []
    for _ in range(3):  # the best of three
        t0, c0 = time.perf_counter(), cpu_s(c.coordinator.pid)
        r = api.get("/api/v1/trends", params={"days": 30, "until": history.until})
        took.append(time.perf_counter() - t0)
        cpu.append(cpu_s(c.coordinator.pid) - c0)
        assert r.status_code == 200, r.text
    # The coordinator's CPU time for the answer, not the wall clock: on a shared machine the wall
    # time is mostly the wait for a core (seen 3 s at load 20); the work is what the goal bounds.
    print(f"a month at 5,000 workers: {min(cpu):.2f} s of the coordinator's CPU, {min(took):.2f} s wall "
          f"(load {os.getloadavg()[0]:.1f})")
    assert min(cpu) < 1.0, (cpu, took)
    body = r.json()
    assert body["step_s"] == 3 * 3600 and len(body["keys"]) == history.keys
    marked = [k for k in body["keys"] if k["marked"]]
    assert [k["key"] for k in marked] == [history.key]  # first, and the only one
    assert body["keys"][0]["key"] == history.key
    # Marked: the buckets of the regressed days only (a daily job each), never before.
    first_bad = history.until - REGRESSED_DAYS * 86400 - 3 * 3600
    assert 1 <= len(marked[0]["marked"]) <= REGRESSED_DAYS and all(t >= first_bad for t in marked[0]["marked"])
    k = marked[0]
    assert k["baseline"]["threshold_gbps"] < k["baseline"]["median_gbps"]
    assert sum(k["n"]) == 30 * 625  # every host once a day


def test_filters_by_host_model_and_link(served):
    api, history, _ = served
    q = {"days": 30, "until": history.until}
    # A host's history older than 7 days is kept daily, its points merged to the day's midnight,
    # and the coordinator merges as it starts: the first day's point then sits before `until`
    # - 30 days (29 of 30 found, 3 runs in 5). 31 days hold the whole month.
    on_host = api.get("/api/v1/trends", params={**q, "days": 31, "host": history.host}).json()
    assert [k["key"] for k in on_host["keys"] if k["marked"]] == [history.key]
    assert sum(on_host["keys"][0]["n"]) == 30
    assert not any(k["marked"] for k in api.get("/api/v1/trends", params={**q, "host": "sim-h0001"}).json()["keys"])
    cross = api.get("/api/v1/trends", params={**q, "link": "cross"}).json()["keys"]
    assert cross and all(k["link"] == "cross" and not k["marked"] for k in cross)
    assert api.get("/api/v1/trends", params={**q, "gpu_model": "NVIDIA B200"}).json()["keys"] == []


def test_the_jobs_behind_a_marked_point_lead_with_the_regressed_job(served):
    api, history, _ = served
    k = api.get("/api/v1/trends", params={"days": 30, "until": history.until, "key": history.key}).json()["keys"][0]
    start = k["marked"][-1]
    hours = api.get("/api/v1/trends/jobs", params={"key": history.key, "start": start, "step_s": 3 * 3600}).json()["hours"]
    assert hours[0]["worst_job"] in history.jobs
    assert hours[0]["min_gbps"] < k["baseline"]["threshold_gbps"]
    job = api.get(f"/api/v1/jobs/{hours[0]['worst_job']}").json()
    assert job["state"] == "SUCCEEDED" and job["workers"][0]["host"] == history.host
    assert hours[0]["hosts"] == [history.host]  # where the point's lowest result ran, named


def test_the_hosts_behind_a_regressed_key_lead_with_the_regressed_host(served):
    api, history, _ = served
    body = api.get("/api/v1/trends/hosts", params={"key": history.key, "days": 30, "until": history.until}).json()
    assert [h["host"] for h in body["hosts"]] == [history.host] and body["low_hours"] == REGRESSED_DAYS
    assert body["hosts"][0]["job_id"] in history.jobs
    assert api.get("/api/v1/trends/hosts", params={"key": "x"}).json()["hosts"] == []  # no such key: none


def test_the_latest_link_matrix_by_host_lists_the_slow_pair_first(served):
    api, history, _ = served
    body = api.get("/api/v1/trends/matrix", params={"days": 30, "until": history.until}).json()
    number = int(history.host.rsplit("h", 1)[1])
    assert body["hosts"] == [f"sim-h{number + i:04}" for i in range(4)]
    assert body["jobs"] == [history.flagged_checks[-1]]  # the newest check measured every pair
    first = body["worst"][0]
    # No baseline for these links, and no registered model (no floor, no history): the check's peers judge.
    assert (first["a"], first["b"], first["low"], first["source"]) == (history.host, body["hosts"][1], True, "peers")
    assert body["low"] == 1 and len(body["cells"]) == 10  # 4 hosts: 6 pairs across, 4 inside


def test_a_real_sweep_feeds_the_trends_and_prometheus(served):
    api, _, c = served
    job = c.submit(op="all_reduce", sizes=[1 << 16, 1 << 20], iters=2)
    assert c.wait_job(job.id).state == pb.SUCCEEDED
    keys = api.get("/api/v1/trends", params={"days": 1, "op": "all_reduce", "link": "local"}).json()["keys"]
    mine = [k for k in keys if k["gpu_model"] != "NVIDIA H100 80GB HBM3"]
    assert sorted(k["size_bucket"] for k in mine) == [1 << 16, 1 << 20] and all(sum(k["n"]) == 1 for k in mine), mine
    metrics = api.get("/metrics").text
    assert 'ringleader_busbw_trend_gbps{' in metrics and 'size_bucket="1048576"' in metrics


def test_a_range_shorter_than_the_grain_reads_one_hour(served):
    r = served[0].get("/api/v1/trends", params={"days": 1e-9})
    assert r.status_code == 200 and r.json()["until"] - r.json()["since"] == 3600, r.text


@pytest.mark.parametrize("path, params, field", [("/api/v1/trends", {"days": 0}, "days"),
                                                ("/api/v1/trends", {"until": 1e12}, "until"),
                                                ("/api/v1/trends/links", {"host": ""}, "host"),
                                                ("/api/v1/trends/matrix", {"days": -1}, "days"),
                                                ("/api/v1/trends/hosts", {"key": ""}, "key"),
                                                ("/api/v1/trends", {"op": "a|b"}, "op"),
                                                ("/api/v1/trends/jobs", {"start": 0}, "key")])
def test_bad_queries_are_422_naming_the_field(served, path, params, field):
    r = served[0].get(path, params=params)
    assert r.status_code == 422 and field in str(r.json()["detail"]), r.text


def test_the_link_matrix_over_time_of_a_host(served):
    api, history, _ = served
    body = api.get("/api/v1/trends/links", params={"host": history.host, "days": 30, "until": history.until}).json()
    assert len(body["checks"]) == 30 and body["peers"][0] == history.host and len(body["peers"]) == 4
    flagged = [c["job_id"] for c in body["checks"] if any(link["flagged"] for link in c["links"])]
    assert flagged == history.flagged_checks[::-1] and len(flagged) == LINK_BAD_DAYS  # newest first
    slow = [link for link in body["checks"][0]["links"] if link["flagged"]]
    assert [(link["peer"], link["ratio"], link["links"]) for link in slow] == [(body["peers"][1], 0.25, 4)]
    # A host no check measured: no checks, no error.
    assert api.get("/api/v1/trends/links", params={"host": "sim-h0001", "days": 30}).json()["checks"] == []


def test_a_real_link_check_shows_in_the_matrix_as_it_finishes(served):
    api, _, c = served
    before = api.get("/api/v1/trends/matrix", params={"days": 1}).json()  # read, and kept for the next asks
    answer = c.client.run_check(pb.RunCheckRequest(worker_ids=["t0", "t1"], kinds=["link_matrix"], wait=True, timeout_s=120))
    job = answer.jobs[0]
    assert job.state == pb.SUCCEEDED, job.reason
    after = api.get("/api/v1/trends/matrix", params={"days": 1}).json()  # at once: not the kept answer
    assert job.id not in before["jobs"] and after["jobs"][0] == job.id
    host = job.workers[0].host
    i = after["hosts"].index(host)
    cell = next(x for x in after["cells"] if x[:2] == [i, i])  # both workers on this host: its links inside
    assert cell[2] == round(job.link_matrix.links[0].gbps, 4) and after["sources"][cell[4]] in ("baseline", "history", "peers")
