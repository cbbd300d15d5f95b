import pytest

from cluster import Cluster, running


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One coordinator and four CPU workers (w0..w3) shared by a test module."""
    with running(tmp_path_factory.mktemp("cluster"), [f"w{i}" for i in range(4)]) as c:
        yield c


@pytest.fixture
def fresh_cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()
