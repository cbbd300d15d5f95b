"""The Grafana board and the alerting rules against a real Prometheus server (Debian's
`prometheus`): it scrapes a real coordinator and CPU workers that ran a sweep and the fleet's
checks, one worker slowed by the fault injector; every panel's query of
deploy/grafana/ringleader-dashboard.json returns series, the shipped quarantine alert fires, and
the regression alert fires after sweeps slowed by a straggler rank.
Skipped where no prometheus binary is installed, unless RINGLEADER_REQUIRE_PROMETHEUS=1 (.ci/run):
there it fails."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import grpc
import httpx
import pytest

from cluster import Cluster
from ports import free_port
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BOARD = ROOT / "deploy/grafana/ringleader-dashboard.json"
RULES = ROOT / "deploy/prometheus/rules/ringleader.rules.yml"
IDS = ["p0", "p1", "p2"]
SLOW = "p2"
FAULTY = {"RINGLEADER_FAULTS": "slow_compute=8", "RINGLEADER_FAULTS_ALLOWED": "tests"}
STRAGGLER = "p3"  # joins after the checks: its sweeps regress against the clean pair's baseline
STRAGGLING = {"RINGLEADER_FAULTS": "delay_op_ms=30", "RINGLEADER_FAULTS_ALLOWED": "tests"}
# Grafana's variables, as the board's "All" options and a short dashboard range would set them.
VARIABLES = {"$__rate_interval": "1m", "$__range": "1h", "$__interval": "15s"}
# Panels that read what only a GPU reports (NVML): a CPU worker exports no such series.
GPU_ONLY = {"GPU memory used", "GPU utilisation"}
# A healthy coordinator answers no REST call with a 5xx: that target is checked to parse and run
# (Prometheus answers it), not to return series.
NO_SERIES_WHEN_HEALTHY = {'sum by (route, status) (rate(ringleader_http_server_requests_total{status=~"5.."}[1m]))'}


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None)
    if found is None:
        if os.environ.get("RINGLEADER_REQUIRE_PROMETHEUS") == "1":
            pytest.fail("prometheus required (RINGLEADER_REQUIRE_PROMETHEUS=1) but not installed")
        pytest.skip("no prometheus server installed (Debian's `prometheus` package)")
    return found


def panel_queries() -> list[tuple[str, str]]:
    board = json.loads(BOARD.read_text())
    out = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            expr = re.sub(r'=~"\$\w+"', '=~".*"', expr)  # the template variables: All
            assert "$" not in expr, (panel["title"], expr)
            out.append((panel["title"], expr))
    return out


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    binary = prometheus_binary()
    tmp = tmp_path_factory.mktemp("prom")
    c = Cluster(tmp)
    prom = None
    try:
        c.start_coordinator(http=True, extra=["--quarantine-max-share", "1"])
        ports = {}
        for wid in IDS:
            ports[wid] = free_port()
            c.start_worker(wid, metrics_address=f"127.0.0.1:{ports[wid]}", env=FAULTY if wid == SLOW else None)
        c.wait_idle(IDS)
        coordinator = c.http_url.split("://", 1)[1].rstrip("/")
        config = tmp / "prometheus.yml"
        config.write_text(json.dumps({  # YAML is a superset of JSON
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {"job_name": "ringleader-coordinator", "static_configs": [{"targets": [coordinator]}]},
                {"job_name": "ringleader-worker",
                 "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports.values()]}]}]}))
        port = free_port()
        log = open(tmp / "prometheus.log", "ab")
        prom = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
        log.close()
        # A sweep on the clean pair, then every check kind over all three (the slow one fails).
        job = c.submit(world_size=2, workers=["p0", "p1"], op="all_reduce")
        assert c.wait_job(job.id).state == pb.SUCCEEDED
        answer = c.client.run_check(pb.RunCheckRequest(wait=True, timeout_s=240))
        assert all(j.state == pb.SUCCEEDED for j in answer.jobs), [j.reason for j in answer.jobs]
        assert {w.worker_id for w in answer.workers if w.health.verdict == pb.UNHEALTHY} == {SLOW}
        with pytest.raises(grpc.RpcError):  # a user's call answered NOT_FOUND: the gRPC error panel's series
            c.client.get("no-such-job")
        # A slowed sweep: the pair's baseline learnt from clean sweeps, then the same sweep with a
        # straggler rank (every op 30 ms late), several times so the regression counter rises
        # between scrapes (increase() needs two samples of a series).
        c.start_worker(STRAGGLER, env=STRAGGLING)
        c.wait_idle([STRAGGLER])
        for pair in [["p0", "p1"]] * 6 + [["p0", STRAGGLER]] * 4:
            job = c.wait_job(c.submit(world_size=2, workers=pair, op="all_reduce").id)
            assert job.state == pb.SUCCEEDED, job.reason
            if STRAGGLER in pair:
                scraped_after(f"http://127.0.0.1:{port}", time.time())
        yield f"http://127.0.0.1:{port}", tmp
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(30)
        c.close()


def scraped_after(url: str, t: float, timeout: float = 60) -> None:
    """Until Prometheus has scraped the coordinator after `t` (so each slowed sweep's count is its
    own sample): the scrape's time, not a fixed sleep of two scrape intervals."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{url}/api/v1/query", params={"query": 'timestamp(up{job="ringleader-coordinator"})'}, timeout=30)
        except httpx.TransportError:  # still starting
            r = None
        got = r.json()["data"]["result"] if r is not None and r.status_code == 200 else []
        if got and float(got[0]["value"][1]) > t:
            return
        time.sleep(0.1)
    raise AssertionError(f"prometheus did not scrape the coordinator within {timeout} s")


def query(url: str, expr: str) -> list:
    r = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=30)
    assert r.status_code == 200, (expr, r.text)
    return r.json()["data"]["result"]


def test_every_panel_of_the_board_returns_series_and_the_quarantine_and_regression_alerts_fire(scraped):
    url, tmp = scraped
    queries = panel_queries()
    assert len(queries) >= 30
    deadline = time.monotonic() + 90
    empty = [(t, e) for t, e in queries if t not in GPU_ONLY and e not in NO_SERIES_WHEN_HEALTHY]
    for expr in NO_SERIES_WHEN_HEALTHY:
        query(url, expr)  # parses and runs
    while empty and time.monotonic() < deadline:
        time.sleep(0.5)
        empty = [(t, e) for t, e in empty if not query(url, e)]
    assert not empty, f"panels without series: {empty}; prometheus log: {tmp / 'prometheus.log'}"
    targets = httpx.get(f"{url}/api/v1/targets", timeout=30).json()["data"]["activeTargets"]
    assert len(targets) == 1 + len(IDS) and all(t["health"] == "up" for t in targets), targets

    firing: dict[str, dict] = {}
    while time.monotonic() < deadline + 30 and len(firing) < 2:
        alerts = httpx.get(f"{url}/api/v1/alerts", timeout=30).json()["data"]["alerts"]
        firing = {a["labels"]["alertname"]: a for a in alerts if a["state"] == "firing"
                  and a["labels"]["alertname"] in ("RingleaderWorkerQuarantined", "RingleaderBaselineRegression")}
        time.sleep(0.25)
    assert firing.get("RingleaderWorkerQuarantined", {}).get("annotations", {}).get("summary") == \
        "1 ringleader worker(s) quarantined", alerts
    regression = firing.get("RingleaderBaselineRegression")
    assert regression and regression["labels"]["op"] == "all_reduce", alerts
    assert regression["annotations"]["summary"].startswith("all_reduce ("), regression
