"""Every job kind's page shows its outcome: one real job of each kind in the
kind table (ringleader/kinds.py), check kinds included, run by two real CPU workers (gloo), then
its page in headless Chromium: the header names the kind's own parameters (never another kind's),
and the outcome the job document carries is on the page."""

from __future__ import annotations

import pytest

from ringleader import kinds
from ringleader.v1 import jobs_pb2 as pb

pytest.importorskip("selenium", reason="needs selenium (pip install -e '.[dev]')")
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.integration

WAIT_S = 60

# One small spec per kind; the test fails when a kind is added to the table without one here.
SPECS = {
    "collective": pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024, 4096], iters=2)),
    "p2p": pb.JobSpec(world_size=2, p2p=pb.P2PSpec(sizes=[1024], iters=2)),
    "gradient_average": pb.JobSpec(world_size=2, gradient_average=pb.GradientAverageSpec(size_bytes=1 << 16)),
    "train": pb.JobSpec(world_size=2, train=pb.TrainSpec(steps=3, batch_size=8)),
    "algo_sweep": pb.JobSpec(world_size=2, algo_sweep=pb.AlgoSweepSpec(sizes=[1024, 4096], iters=2)),
    "link_matrix": pb.JobSpec(world_size=2, link_matrix=pb.LinkMatrixSpec(size_bytes=1 << 16, iters=3, warmup=1)),
    "gpu_check": pb.JobSpec(world_size=2, gpu_check=pb.GpuCheckSpec(matmul_n=64, copy_bytes=1 << 20, iters=2)),
    "sdc_check": pb.JobSpec(world_size=2, sdc_check=pb.SdcCheckSpec(rounds=1)),
}

# What each page must show: words of its header, and JS that finds its outcome on the page
# (the results table's cells, or the facts table, or the charts), returning a description.
HEADER = {"collective": "all_reduce", "p2p": "p2p", "gradient_average": "gradient averaging", "train": "training",
          "algo_sweep": "algo sweep", "link_matrix": "link matrix check", "gpu_check": "GPU check",
          "sdc_check": "silent data corruption check"}
CELLS = "[...document.querySelectorAll('#results-body tr')].map((tr) => [...tr.cells].map((c) => c.textContent))"


def outcome_on_page(driver, kind: str, job: pb.Job):
    """Wait until the page shows what the job's outcome holds; return the rows it shows."""
    rows = WebDriverWait(driver, WAIT_S).until(lambda d: d.execute_script(f"const r = {CELLS}; return r.length && r"))
    if kind == "link_matrix":
        assert len(rows) == len(job.link_matrix.links) == 1
        assert rows[0][0] == "0 ↔ 1" and rows[0][-1] in ("✓ ok", "✕ slow")
        assert float(rows[0][4]) == pytest.approx(job.link_matrix.links[0].gbps, rel=0.01, abs=0.01)
        heat = driver.execute_script("return !document.getElementById('matrix').hidden"
                                     " && document.querySelectorAll('#matrix td.num').length")
        assert heat == 2  # the two off-diagonal cells of a 2x2 heat map
    elif kind == "gpu_check":
        shown = {r[1]: r for r in rows}
        assert sorted(shown) == sorted(w.worker_id for w in job.workers), rows  # each row names its worker
        for w in job.gpu_check.workers:
            assert float(shown[w.worker_id][3]) == pytest.approx(w.tflops, rel=0.01, abs=0.01)
            assert shown[w.worker_id][-1] == ("✕ slow" if w.flagged else "✓ ok")
    elif kind == "sdc_check":
        shown = {r[1]: r for r in rows}
        assert sorted(shown) == sorted(w.worker_id for w in job.workers), rows
        for w in job.sdc_check.workers:
            assert shown[w.worker_id][3] == w.checksum
            assert shown[w.worker_id][-1] == ("✕ corrupt" if w.flagged else "✓ ok")
    elif kind in ("gradient_average", "train"):
        assert len(rows) >= 5 and all(r[1] for r in rows), rows
    else:
        assert len(rows) >= 1
    return rows


def test_the_table_has_a_spec_per_kind():
    assert set(SPECS) == set(kinds.names())


@pytest.mark.parametrize("kind", list(SPECS))
def test_every_kind_page_renders_its_outcome(web_cluster, browser, kind):
    c = web_cluster
    job = c.wait_job(c.client.submit(SPECS[kind]).id)
    assert job.state == pb.SUCCEEDED, (kind, job.reason)
    browser.get(f"{c.http_url}/jobs/{job.id}")
    header = WebDriverWait(browser, WAIT_S).until(lambda d: d.execute_script(
        "const dd = document.querySelector('.fact-job dd'); return dd && dd.textContent"))
    assert header.startswith(HEADER[kind]), header
    assert header == kinds.header(job.spec)  # the kind table's header (GET /api/v1/jobs/{id}/header)
    assert "training" not in header or kind == "train"
    outcome_on_page(browser, kind, job)
    assert "No results." not in browser.find_element("id", "results-foot").text
    assert browser.execute_script("return window.cspViolations") == []
