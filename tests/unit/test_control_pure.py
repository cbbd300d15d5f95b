"""The control core does no I/O inside an input: the same recorded inputs, at the same given
times, fed into two Controls (one over a real in-memory store, one over a store that raises on
any call once the core is built) give the same Outs, writes included. The store's reads that
remain inside an input (coordinator/core/writes.py: a reloaded job's event numbers, a result
row's baseline, a cancel of an ended job) are left out of the recording."""

from __future__ import annotations

import itertools

from coordinator.core.clock import Now
from coordinator.core.control import Control
from coordinator.core.inputs import CLOSE, Cancel, Cordon, Disconnect, Out, Place, Register, Submit, Tick, WorkerMsg
from coordinator.core.liveness import Timings
from coordinator.core.writes import apply
from coordinator.store.memory import MemoryJobStore
from ringleader import checks, jobspec
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb


class Raising(MemoryJobStore):
    """A store the core must not call: once armed, every attribute raises."""

    armed = False

    def __getattribute__(self, name: str):
        if object.__getattribute__(self, "armed") and not name.startswith("__"):
            raise AssertionError(f"the control core called the store: {name}")
        return object.__getattribute__(self, name)


def _value(x) -> object:
    if hasattr(x, "SerializeToString"):
        return (type(x).__name__, x.SerializeToString(deterministic=True))
    if isinstance(x, (list, tuple)):
        return tuple(_value(y) for y in x)
    return repr(x)


def flat(out: Out) -> tuple:
    """An Out as plain values, read as it comes (its protos change in later inputs)."""
    return (tuple((c.worker_id, "close" if m is CLOSE else _value(m)) for c, m in out.sends),
            tuple(_value(e) for e, _ in out.events), tuple(out.health), tuple(out.alerts),
            tuple((name, _value(args)) for name, args in out.writes), _value(out.job), out.place)


def recording(spec_of, conn_of) -> list:
    """The recorded session: (input maker, seconds since the start). Makers take the core's own
    connections (Register returns them) and the ids it gave."""
    def collective(n, **kw):
        return Submit(jobspec.normalize(pb.JobSpec(world_size=n, collective=pb.CollectiveSpec(
            op="all_reduce", sizes=[1024], iters=1), **kw)))

    def msg(wid, **m):
        return WorkerMsg(conn_of(wid), wpb.WorkerMessage(**m))

    job = spec_of  # the i-th submitted job's id, as this core made it
    steps = [lambda i=i: Register(wpb.Register(worker_id=f"w{i}", host="h1", address=f"10.0.0.{i + 1}",
                                              backend="gloo", device=pb.Device(type="cpu", index=i, name="cpu")))
             for i in range(4)]
    steps += [lambda: collective(2), lambda: Place(),
              lambda: msg("w0", store_ready=wpb.StoreReady(job_id=job(0), store_port=4242)),
              lambda: msg("w0", heartbeat=wpb.Heartbeat(job_id=job(0), op_seq=3)),
              lambda: msg("w0", progress=wpb.ProgressReport(job_id=job(0), progress=pb.Progress(done=1, total=1))),
              lambda: msg("w0", done=wpb.JobDone(job_id=job(0), rank=0, ok=True, log="rank 0 says hi")),
              lambda: msg("w1", done=wpb.JobDone(job_id=job(0), rank=1, ok=True)),
              lambda: Submit(jobspec.normalize(pb.JobSpec(world_size=2, priority=checks.CHECK_PRIORITY,
                                                          placement=pb.Placement(worker_ids=["w2", "w3"]),
                                                          gpu_check=pb.GpuCheckSpec()))),
              lambda: Place(),
              lambda: msg("w2", done=wpb.JobDone(job_id=job(1), rank=0, ok=False, failure=wpb.EXECUTOR_DIED,
                                                 error="CUDA error: an illegal memory access")),
              lambda: collective(4), lambda: Place(),
              lambda: Cancel(job(2), "changed my mind"),
              lambda: Cordon("w3", True),
              lambda: Disconnect(conn_of("w1"), "stream closed"),
              lambda: Tick(0.0)]
    return steps


def run(store: MemoryJobStore, arm) -> list[tuple]:
    ids = (f"{n:08x}{n:024x}" for n in itertools.count(1))  # unique in its first 8 and 12
    core = Control(store, Timings(heartbeat_timeout_s=30), new_id=lambda: next(ids))
    arm()
    conns, jobs, outs = {}, [], []
    steps = recording(lambda i: jobs[i], lambda wid: conns[wid])
    for n, step in enumerate(steps):
        inp = step()
        at = Now(mono=1000.0 + n, wall=1.7e9 + n)
        if isinstance(inp, Tick):
            inp = Tick(at.mono, wall=at.wall)
        out = core.handle(inp, at)
        if out.conn is not None:
            conns[out.conn.worker_id] = out.conn
        if isinstance(inp, Submit):
            jobs.append(out.job.id)
        outs.append(flat(out))
        if not isinstance(store, Raising):
            apply(out.writes, store)  # the shell's half, for the twin whose store works
    return outs


def test_the_same_inputs_at_the_same_times_give_the_same_outs_with_a_store_that_raises_on_any_call():
    raising = Raising()
    real = run(MemoryJobStore(), lambda: None)
    pure = run(raising, lambda: setattr(raising, "armed", True))
    assert pure == real
    kinds = {name for out in real for name, _ in out[4]}
    # The recording exercised what the core writes: jobs, events, a rank's log, a verdict.
    assert {"create", "update", "add_event", "set_rank_log", "set_worker_health"} <= kinds
    assert any(out[0] for out in real) and any(out[2] for out in real)  # sends, and a health change
