"""Run the non-collective job kinds inside an executor and shape their outcome as protobuf.

Each function runs on every rank of the executor's process group and returns the outcome
message (identical on every rank; rank 0's is reported). `progress(done, total, size_bytes)`
tells the daemon how far the job is.
"""

from __future__ import annotations

from ringleader import jobspec
from ringleader.v1 import jobs_pb2 as pb


def run_p2p(spec: pb.JobSpec, device, counter, progress) -> pb.P2PResult:
    from worker.workloads import p2p

    p = spec.p2p
    sizes, pairs = jobspec.p2p_sizes(spec), jobspec.p2p_pairs(spec)
    rows: list[dict] = []
    for i, size in enumerate(sizes):  # one size at a time, so progress moves during long sweeps
        progress(i * len(pairs), len(sizes) * len(pairs), size)
        rows += p2p.ping_pong([size], iters=p.iters, warmup=p.warmup, mode=p.mode, device=device,
                              counter=counter, pairs=pairs)
    out = pb.P2PResult(rows=[pb.P2PRow(**r) for r in rows])
    if p.pairwise:
        largest = max(sizes)
        m = p2p.pairwise_matrix([r for r in rows if r["size_bytes"] == largest], spec.world_size, largest)
        out.matrix_size_bytes = largest
        out.median_gbps = m["median_gbps"]
        out.matrix.extend(pb.P2PMatrixRow(gbps=[-1.0 if g is None else g for g in row]) for row in m["matrix"])
        out.flagged.extend(pb.FlaggedPair(**f) for f in m["flagged"])
    return out


def run_gradient_average(spec: pb.JobSpec, device, counter, progress) -> pb.GradientAverageResult:
    from worker.workloads.gradavg import gradient_average

    g = spec.gradient_average
    progress(0, 1, g.size_bytes)
    return pb.GradientAverageResult(**gradient_average(g.size_bytes // 4, iters=g.iters, warmup=g.warmup,
                                                       device=device, counter=counter))


def run_train(spec: pb.JobSpec, device, counter, progress) -> pb.TrainResult:
    from worker.workloads.train import train

    t = spec.train
    result = train(t.model, steps=t.steps, batch_size=t.batch_size, lr=t.lr, seed=t.seed, device=device,
                   counter=counter, on_step=lambda step, loss: progress(step + 1, t.steps, 0))
    return pb.TrainResult(**result)


RUNNERS = {"p2p": run_p2p, "gradient_average": run_gradient_average, "train": run_train}
