import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "integration"))
from cluster import Cluster  # noqa: E402
from fleet import FLEET, make_whole, start_fleet  # noqa: E402


def pytest_collection_modifyitems(config, items):
    # This hook sees the whole session's items, not only this folder's: touch only gpu-marked ones.
    if len(FLEET) < 2:
        skip = pytest.mark.skip(reason="needs 2 CUDA GPUs and NCCL (none here), or one GPU with "
                                       "RINGLEADER_TEST_SHARED_GPU=N")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="module")
def gpu_module_cluster(tmp_path_factory):
    """A coordinator and one worker daemon per GPU (NCCL), or the shared-GPU fleet (fleet.py)."""
    c = Cluster(tmp_path_factory.mktemp("gpu"))
    try:
        c.start_coordinator()
        start_fleet(c)
        yield c
    finally:
        c.close()


@pytest.fixture
def gpu_cluster(gpu_module_cluster):
    """The module's cluster, put back whole first (a job a failed test left is cancelled, a killed
    daemon restarted under its id): one test's failure fails that test, never the next."""
    make_whole(gpu_module_cluster)
    return gpu_module_cluster
