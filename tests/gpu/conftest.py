import sys
from pathlib import Path

import pytest

from ringleader.app.demo import visible_gpu_count

sys.path.insert(0, str(Path(__file__).parent.parent / "integration"))
from cluster import Cluster  # noqa: E402

GPUS = visible_gpu_count()


def pytest_collection_modifyitems(config, items):
    # This hook sees the whole session's items, not only this folder's: touch only gpu-marked ones.
    if GPUS < 2:
        skip = pytest.mark.skip(reason="needs 2 CUDA GPUs and NCCL (none here)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory):
    """A coordinator and one worker daemon per GPU (NCCL)."""
    c = Cluster(tmp_path_factory.mktemp("gpu"))
    try:
        c.start_coordinator()
        ids = [f"g{i}" for i in range(GPUS)]
        for i, wid in enumerate(ids):
            c.start_worker(wid, device=f"cuda:{i}")
        c.wait_idle(ids, timeout=300)
        yield c
    finally:
        c.close()
