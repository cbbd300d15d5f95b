import pytest

from cluster import Cluster, running


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """One coordinator and four CPU workers (w0..w3) shared by the modules that only run jobs on
    it and leave it idle (test_jobs.py, test_kinds.py): one start (4 daemons, 4 executors
    importing torch) instead of one a module."""
    with running(tmp_path_factory.mktemp("cluster"), [f"w{i}" for i in range(4)]) as c:
        yield c


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory):
    """The same, of a module's own: for a module that kills, stops or restarts its processes."""
    with running(tmp_path_factory.mktemp("own-cluster"), [f"w{i}" for i in range(4)]) as c:
        yield c


@pytest.fixture
def fresh_cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()
