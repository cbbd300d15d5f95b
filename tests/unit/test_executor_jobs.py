"""worker/executor.Executor keeps the checked jobs of recent specs: a warm group's next job of the
same spec is not derived again, another spec is its own job, and only the last few are kept."""

from __future__ import annotations

from ringleader import jobspec
from ringleader.jobspec import ValidJob
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from worker.executor import Executor


def _assignment(size: int) -> wpb.Assignment:
    """As the executor gets it: the normalized spec, through the wire."""
    spec = jobspec.normalize(pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="all_reduce", sizes=[size],
                                                                                   iters=1, warmup=0))).spec
    return wpb.Assignment.FromString(wpb.Assignment(job_id="j", spec=spec).SerializeToString())


def test_the_same_spec_is_derived_once_and_another_is_its_own_job(monkeypatch):
    derived: list = []
    honest = ValidJob.from_normalized

    def counting(spec):
        derived.append(spec)
        return honest(spec)
    monkeypatch.setattr(ValidJob, "from_normalized", counting)
    ex = Executor(None, "cpu", None)
    first = ex._valid(_assignment(8).spec)
    again = ex._valid(_assignment(8).spec)
    other = ex._valid(_assignment(64).spec)
    assert again is first and len(derived) == 2
    assert first.sizes == (8,) and other.sizes != first.sizes
    for size in range(1, Executor.JOBS_KEPT + 1):  # as many other specs as are kept
        ex._valid(_assignment(size * 1024).spec)
    ex._valid(_assignment(8).spec)
    assert len(derived) == 2 + Executor.JOBS_KEPT + 1, "the oldest spec was forgotten, and derived again"


def test_a_capture_says_whether_the_job_wrote_anything(tmp_path):
    """StderrCapture on the real fd 2: a job that printed nothing needs no read of its log (the
    executor's Done then carries none), one that printed has it all, C-level writes included."""
    import os

    from worker import api
    from worker.executor import StderrCapture

    path = str(tmp_path / "j.rank0.log")
    with StderrCapture(path) as quiet:
        pass
    assert quiet.wrote is False and api.read_log(path) == ""
    with StderrCapture(path) as loud:
        os.write(2, b"NCCL WARN something\n")
    assert loud.wrote is True and "NCCL WARN something" in api.read_log(path)
