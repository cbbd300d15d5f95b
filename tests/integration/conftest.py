import pytest

from cluster import Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One coordinator and four CPU workers (w0..w3) shared by a test module."""
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.start_coordinator()
        for i in range(4):
            c.start_worker(f"w{i}")
        c.wait_idle([f"w{i}" for i in range(4)])
        yield c
    finally:
        c.close()


@pytest.fixture
def fresh_cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()
