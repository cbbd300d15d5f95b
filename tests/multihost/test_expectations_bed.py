"""Expectations on the namespace bed: 4 hosts of one CPU worker each (gloo), the coordinator on
h0. After clean link checks the coordinator has learnt the cross-host links' figures; then every
host's cable is rate-limited alike (tc tbf on each host's eth0), so the peers of the run read
alike and flag nothing, and the next link check must still fail every worker with ONE fleet-wide
finding: every worker below expectation."""

from __future__ import annotations

import pytest

from hostcluster import bed_cluster
from test_fleet_checks import check, rate_limit

pytestmark = pytest.mark.multihost

WORKERS = {f"w{i}": f"h{i}" for i in range(1, 5)}


@pytest.mark.timeout(900)
def test_every_host_rate_limited_alike_is_one_finding(tmp_path):
    with bed_cluster(tmp_path, "open", WORKERS) as (bed, c):
        for _ in range(2):  # the history of the cross-host links
            answer, _, code = check(c)
            assert code == 0 and not answer.get("findings"), answer
        clean = answer["jobs"][0]["link_matrix"]
        for host in WORKERS.values():
            rate_limit(bed, host, on=True)
        try:
            answer, _, code = check(c)
        finally:
            for host in WORKERS.values():
                rate_limit(bed, host, on=False)
        job = answer["jobs"][0]
        assert job["state"] == "SUCCEEDED", job
        slow = job["link_matrix"]
        assert slow["size_bytes"] == clean["size_bytes"], (clean, slow)
        assert not any(x.get("flagged") for x in slow["links"]), slow  # alike: the peers see nothing
        health = {w["worker_id"]: w["health"] for w in answer["workers"]}
        assert {w: h["verdict"] for w, h in health.items()} == {w: "UNHEALTHY" for w in WORKERS}, health
        assert len(answer["findings"]) == 1 and answer["findings"][0].startswith("every worker below expectation: 4 of 4")
        assert all(h["finding"] == answer["findings"][0] for h in health.values())
        assert code == 1
