"""The runners of the job kinds: what an executor runs for each kind of job, on every rank.

The table of kinds (ringleader/kinds.py) names each kind's runner by import string; RUNNERS
resolves them on first use. Each runner takes the checked job (ringleader.jobspec.ValidJob) and a RunContext, runs on every
rank of the executor's process group, and returns an Outcome: result rows (collective sweeps) or
an outcome message (the other kinds; identical on every rank, rank 0's is reported). A check
reports evidence instead, from every rank: that rank's own figures, which the coordinator
assembles and judges (its outcome message is the rank's own view, never reported).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ringleader import kinds as table
from ringleader.jobspec import ValidJob
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from worker import api


@dataclass
class RunContext:
    job_id: str
    rank: int
    device: object  # torch.device
    counter: object  # shared int whose .value grows by one per communication op
    send: Callable[[object], None]  # to the daemon

    def progress(self, done: int, total: int, size_bytes: int) -> None:
        self.send(api.Progress(self.job_id, done, total, size_bytes))

    def result(self, row: pb.SizeResult) -> None:
        """Stream a result row as soon as it exists (rank 0 reports; others keep quiet)."""
        if self.rank == 0:
            self.send(api.Result(self.job_id, row.SerializeToString()))


@dataclass
class Outcome:
    results: list[pb.SizeResult] = field(default_factory=list)
    message: object | None = None  # a jobs_pb2 outcome (P2PResult, ...) for the other kinds
    stragglers: pb.StragglerSummary | None = None  # collective sweeps: who reached the ops last
    evidence: object | None = None  # a check's: this rank's own figures (a JobDone h49e_evidence member)

    def serialized(self) -> tuple[str, bytes] | None:
        """(member, bytes) for JobDone's `outcome`: the member the table of kinds names as the
        `result` of the kind whose result message this is."""
        if self.message is None:
            return None
        for k in table.TABLE:
            member = wpb.JobDone.DESCRIPTOR.fields_by_name.get(k.result)
            if member is not None and member.message_type is type(self.message).DESCRIPTOR:
                return k.result, self.message.SerializeToString()
        raise TypeError(f"a {type(self.message).__name__} is no job kind's result (ringleader/kinds.py)")

    def evidence_serialized(self) -> tuple[str, bytes] | None:
        """(member, bytes) for JobDone's `h49e_evidence`, by the evidence message's type."""
        if self.evidence is None:
            return None
        for member in wpb.JobDone.DESCRIPTOR.oneofs_by_name["h49e_evidence"].fields:
            if member.message_type is type(self.evidence).DESCRIPTOR:
                return member.name, self.evidence.SerializeToString()
        raise TypeError(f"a {type(self.evidence).__name__} is no check's evidence (workers.proto JobDone)")


def run_collective(job: ValidJob, ctx: RunContext) -> Outcome:
    from worker import algos

    from worker.stragglers import StragglerTally

    c = job.collective
    rows, tally = [], StragglerTally()
    # nccl:ALGO/PROTO: the default group already has that flavor (the executor made it so).
    with algos.method(c.algo, graph=c.graph, device=ctx.device, max_bytes=max(job.sizes), own_group=False) as how:
        for i, size in enumerate(job.sizes):
            if len(job.sizes) > 1:  # one size: its Done says all (a message less before a warm job's op)
                ctx.progress(i, len(job.sizes), size)
            row = pb.SizeResult(**_measured(c.op, c.dtype, c.reduce_op, size, iters=c.iters, warmup=c.warmup,
                                            in_place=c.in_place, root=c.root, method=how, ctx=ctx, tally=tally))
            if i < len(job.sizes) - 1:  # the last row goes with the Done that follows at once
                ctx.result(row)
            rows.append(row)
    return Outcome(results=rows, stragglers=pb.StragglerSummary(**tally.summary()))


def _measured(op, dtype, reduce_op, size, *, iters, warmup, in_place, root, method, ctx, tally=None) -> dict:
    """One size measured on every rank and summarized: the SizeResult fields."""
    from worker import collectives

    local = collectives.measure(op, dtype, reduce_op, size, iters=iters, warmup=warmup, in_place=in_place,
                                root=root, device=ctx.device, counter=ctx.counter, method=method)
    return collectives.summarize(local, op=op, dtype=dtype, reduce_op=reduce_op, size_bytes=size, root=root,
                                 in_place=in_place, device=ctx.device, algo=method.algo, tally=tally)


def run_algo_sweep(job: ValidJob, ctx: RunContext) -> Outcome:
    """Every algo at every size (algo by algo: an NCCL variant's communicator lives for one
    algo), then the fastest per size and the dispatch table."""
    from ringleader import algos as vocab
    from worker import algos
    from worker.distutil import backend_for

    a = job.spec.algo_sweep
    backend = backend_for(ctx.device)
    chosen = list(a.algos) or vocab.default_algos(backend)
    if any(x in vocab.SYMM_ALGOS for x in chosen) and (why := algos.symm_unavailable(ctx.device)):
        if a.algos:
            raise ValueError(f"algo_sweep.algos: {why}")
        chosen = [x for x in chosen if x not in vocab.SYMM_ALGOS]  # the default list offers what runs
    units = [(x, s) for x in chosen for s in job.sizes if algos.runs_at(x, s)]
    rows: list[dict] = []
    for algo in chosen:
        sizes = [s for s in job.sizes if algos.runs_at(algo, s)]
        if not sizes:
            continue
        with algos.method(algo, graph=a.graph, device=ctx.device, max_bytes=max(sizes), own_group=True) as how:
            for size in sizes:
                ctx.progress(len(rows) * job.progress_total // len(units), job.progress_total, size)
                rows.append(_measured("all_reduce", a.dtype, "sum", size, iters=a.iters, warmup=a.warmup,
                                      in_place=False, root=0, method=how, ctx=ctx))
    best, table = algos.choose(rows, default=backend)
    return Outcome(message=pb.AlgoSweepResult(
        op="all_reduce", dtype=a.dtype, world_size=job.world_size, mode="graph" if a.graph else "eager",
        algos=[vocab.resolved_algo(x, backend) for x in chosen], results=[pb.SizeResult(**r) for r in rows],
        best=[pb.AlgoChoice(**b) for b in best], table=[pb.AlgoRange(**t) for t in table]))


def run_p2p(job: ValidJob, ctx: RunContext) -> Outcome:
    from worker.workloads import p2p

    p, pairs = job.spec.p2p, list(job.pairs)
    rows: list[dict] = []
    for i, size in enumerate(job.sizes):  # one size at a time, so progress moves during long sweeps
        ctx.progress(i * len(pairs), job.progress_total, size)
        rows += p2p.ping_pong([size], iters=p.iters, warmup=p.warmup, mode=p.mode, device=ctx.device,
                              counter=ctx.counter, pairs=pairs)
    out = pb.P2PResult(rows=[pb.P2PRow(**r) for r in rows])
    if p.pairwise:
        largest = max(job.sizes)
        m = p2p.pairwise_matrix([r for r in rows if r["size_bytes"] == largest], job.world_size, largest)
        out.matrix_size_bytes = largest
        out.median_gbps = m["median_gbps"]
        out.matrix.extend(pb.P2PMatrixRow(gbps=[-1.0 if g is None else g for g in row]) for row in m["matrix"])
        out.flagged.extend(pb.FlaggedPair(**f) for f in m["flagged"])
    return Outcome(message=out)


def run_gradient_average(job: ValidJob, ctx: RunContext) -> Outcome:
    from worker.workloads.gradavg import gradient_average

    g = job.spec.gradient_average
    ctx.progress(0, 1, g.size_bytes)
    return Outcome(message=pb.GradientAverageResult(**gradient_average(
        g.size_bytes // 4, iters=g.iters, warmup=g.warmup, device=ctx.device, counter=ctx.counter)))


def run_train(job: ValidJob, ctx: RunContext) -> Outcome:
    from worker.workloads.train import train

    t = job.spec.train
    result = train(t.model, steps=t.steps, batch_size=t.batch_size, lr=t.lr, seed=t.seed, device=ctx.device,
                   counter=ctx.counter, on_step=lambda step, loss: ctx.progress(step + 1, t.steps, 0))
    return Outcome(message=pb.TrainResult(**result))


class _Runners(dict):
    """kind -> runner, resolved from the table on first use (a test may set its own)."""

    def __missing__(self, kind: str) -> Callable[[ValidJob, RunContext], Outcome]:
        return self.setdefault(kind, table.get(kind).resolve("runner"))


RUNNERS = _Runners()
