"""The REST routes of baselines and localization (dashboard/baselines_api.py) on a real
coordinator with its dashboard."""

from __future__ import annotations

import time

import httpx
import pytest

from cluster import running

ENTRY = {"gpu_model": "NVIDIA H200", "op": "all_reduce", "dtype": "bfloat16", "size_bucket": 1 << 30,
         "ranks": 8, "hosts": 1, "link": "local", "samples": [460.0, 455.0, 462.0]}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    with running(tmp_path_factory.mktemp("baselines-rest"), ["b0", "b1"], http=True) as c:
        with httpx.Client(base_url=c.http_url, timeout=60) as client:
            yield client


def test_import_then_export(api):
    r = api.post("/api/v1/baselines/import", json={"entries": [ENTRY]})
    assert r.status_code == 200 and r.json() == {"imported": 1}, r.text
    [e] = api.get("/api/v1/baselines").json()["entries"]
    assert e["key"] == "NVIDIA H200|all_reduce|bfloat16|2^30|r8|h1|local|eager|" and e["median_busbw_gbps"] == 460.0


@pytest.mark.parametrize("bad, field", [({"link": "cross"}, "entries"), ({"samples": []}, "samples"),
                                        ({"op": "nope"}, "entries"), ({"extra": 1}, "extra")])
def test_bad_entries_are_422_naming_the_field(api, bad, field):
    r = api.post("/api/v1/baselines/import", json={"entries": [{**ENTRY, **bad}]})
    assert r.status_code == 422 and field in str(r.json()["detail"][0]["loc"]), r.text


def test_localize_unknown_job_is_404_and_a_queued_one_409(api):
    assert api.post("/api/v1/jobs/nope/localize").status_code == 404
    job = api.post("/api/v1/jobs", json={"world_size": 2, "placement": {"host": "nowhere"}, "queue": True,
                                         "collective": {"op": "all_reduce", "sizes": [1024]}}).json()
    r = api.post(f"/api/v1/jobs/{job['id']}/localize")
    assert r.status_code == 409 and "collective job that ran" in r.json()["detail"], r.text
    api.post(f"/api/v1/jobs/{job['id']}/cancel")


def test_localize_over_rest_names_nobody_on_a_clean_gang(api):
    job = api.post("/api/v1/jobs", json={"world_size": 2, "placement": {"worker_ids": ["b0", "b1"]},
                                         "collective": {"op": "all_reduce", "sizes": [65536], "iters": 3}}).json()
    for _ in range(600):
        state = api.get(f"/api/v1/jobs/{job['id']}").json()["state"]
        if state in ("SUCCEEDED", "FAILED"):
            break
        time.sleep(0.1)
    assert state == "SUCCEEDED"
    r = api.post(f"/api/v1/jobs/{job['id']}/localize")
    # Two workers and no spare one: halves of one worker cannot be tested alone.
    assert r.status_code == 200 and r.json()["culprits"] == [] and "no culprit" in r.json()["verdict"], r.text
