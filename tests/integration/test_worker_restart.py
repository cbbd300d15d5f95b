"""A restarted daemon keeps its id only if it kept its credential (--state-dir): real coordinator
and daemon processes on loopback."""

import time

import pytest

from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration


def _wait_log(path, said: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while said not in path.read_text():
        assert time.monotonic() < deadline, path.read_text()[-2000:]
        time.sleep(0.1)


def test_a_restarted_daemon_keeps_its_id_with_its_state_dir_and_is_refused_without(fresh_cluster, tmp_path):
    c = fresh_cluster
    c.start_coordinator()
    state = tmp_path / "state"
    c.start_worker("kept", extra=["--state-dir", str(state)])
    c.start_worker("lost")
    c.wait_idle(["kept", "lost"])
    deadline = time.monotonic() + 30  # the daemon writes it once it has read its Registered
    while not state.joinpath("worker-kept.secret").exists():
        assert time.monotonic() < deadline, "no credential file"
        time.sleep(0.05)
    assert [p.name for p in state.iterdir()] == ["worker-kept.secret"]
    assert oct(state.joinpath("worker-kept.secret").stat().st_mode & 0o777) == "0o600"
    for wid in ("kept", "lost"):
        c.kill_worker(wid)
    c.start_worker("kept", extra=["--state-dir", str(state)])
    c.start_worker("lost")
    c.wait_idle(["kept"])
    _wait_log(c.tmp / "lost.log", "register: worker id lost is bound to another daemon's credential "
                                  "(this one presented none)")
    assert "--forget-worker lost" in (c.tmp / "lost.log").read_text()
    job = c.wait_job(c.submit(world_size=1, workers=["kept"], op="all_reduce").id)
    assert job.state == pb.SUCCEEDED, job.reason
