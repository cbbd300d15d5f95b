"""Expectations end to end: a real coordinator learns three CPU workers' gpu_check figures, the
workers are restarted with the same slowdown (the fault injector), and the next check, whose
peers all read alike, names every worker below expectation in one finding."""

from __future__ import annotations

import httpx
import pytest

from cluster import Cluster
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

IDS = ["e0", "e1", "e2"]
SLOW = {"RINGLEADER_FAULTS": "slow_compute=8", "RINGLEADER_FAULTS_ALLOWED": "tests"}


def _gpu_check(c: Cluster) -> pb.RunCheckResponse:
    answer = c.client.run_check(pb.RunCheckRequest(wait=True, timeout_s=120, kinds=["gpu_check"]))
    assert [j.state for j in answer.jobs] == [pb.SUCCEEDED], [j.reason for j in answer.jobs]
    return answer


def test_a_fleet_slowed_alike_is_named_below_expectation(tmp_path):
    c = Cluster(tmp_path)
    try:
        c.start_coordinator(http=True)  # the default circuit breaker: it holds 2 of the 3 quarantines
        state = {wid: ["--state-dir", str(tmp_path / wid)] for wid in IDS}  # a restarted daemon keeps its id
        for wid in IDS:
            c.start_worker(wid, extra=state[wid])
        c.wait_idle(IDS)
        learnt = [_gpu_check(c) for _ in range(2)]  # the figures the coordinator learns
        assert not learnt[-1].findings, learnt[-1]

        for wid in IDS:
            c.kill_worker(wid)
        for wid in IDS:
            c.start_worker(wid, extra=state[wid], env=SLOW)
        c.wait_idle(IDS)
        answer = _gpu_check(c)

        gpu = answer.jobs[0].gpu_check
        assert not any(w.flagged for w in gpu.workers), gpu  # the peers, all alike, see nothing
        health = {w.worker_id: w.health for w in answer.workers}
        assert sorted(health) == IDS
        assert all(h.verdict == pb.UNHEALTHY for h in health.values()), health
        assert len(answer.findings) == 1 and answer.findings[0].startswith("every worker below expectation: 3 of 3")
        for h in health.values():
            assert h.finding == answer.findings[0]
            assert h.expected.startswith("below expectation: history: TFLOP/s"), h.expected

        summary = httpx.get(f"{c.http_url}/api/v1/fleet/health", timeout=30).json()
        assert summary["findings"] == list(answer.findings)
        assert len(summary["breaker_held"]) == 2  # the breaker holds quarantines; the finding still shows
        assert any("every worker below expectation" in a for a in summary["alerts"])
        metrics = httpx.get(f"{c.http_url}/metrics", timeout=30).text
        assert 'ringleader_expectation_findings_total{scope="fleet"} 1.0' in metrics
    finally:
        c.close()
