#!/usr/bin/env python3
"""p2p, gradient-average and train jobs through ringleader on this machine's GPUs: latency,
bandwidth, the gradient average's device time against host staging, training throughput.
Asserts its scenario: every job must end SUCCEEDED, else the run is printed INVALID and exits 1.

    python bench/workloads.py --out DIR      -> DIR/workloads.md and DIR/workloads.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from run import Service, machine  # noqa: E402

from ringleader_app import table  # noqa: E402
from ringleader_app.demo import visible_gpu_count  # noqa: E402
from ringleader.jsonview import to_json  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    n = visible_gpu_count()
    info = machine()
    specs = {
        "p2p_blocking": pb.JobSpec(world_size=n, p2p=pb.P2PSpec(sizes=[8, 1 << 20, 1 << 30], iters=50, mode="blocking")),
        "p2p_async": pb.JobSpec(world_size=n, p2p=pb.P2PSpec(sizes=[8, 1 << 20, 1 << 30], iters=50, mode="async")),
        "p2p_pairwise": pb.JobSpec(world_size=n, p2p=pb.P2PSpec(sizes=[1 << 30], iters=10, pairwise=True)),
        "gradient_average_64M": pb.JobSpec(world_size=n, gradient_average=pb.GradientAverageSpec(size_bytes=64 << 20, iters=20)),
        "train_linear": pb.JobSpec(world_size=n, train=pb.TrainSpec(model="linear", steps=200, batch_size=256, lr=0.05)),
        "train_mlp": pb.JobSpec(world_size=n, train=pb.TrainSpec(model="mlp", steps=200, batch_size=256, lr=0.05)),
    }
    results, lines = {}, [f"# ringleader workloads, {n} GPUs", "",
                          f"Machine: {', '.join(info['gpus'])}; torch {info['torch']} (CUDA {info['cuda']}), "
                          f"NCCL {info['nccl']}; NCCL_NVLS_ENABLE={info['NCCL_NVLS_ENABLE']}; {info['date']}.", ""]
    with tempfile.TemporaryDirectory() as tmp:
        svc = Service(Path(tmp))
        try:
            svc.wait_idle(n)
            for name, spec in specs.items():
                job, secs = svc.run(spec)
                print(f"{name}: {pb.JobState.Name(job.state)} in {secs:.1f} s {job.reason}", flush=True)
                results[name] = to_json(job)
                lines += [f"## {name}", "", "```", table.outcome_table(job) or job.reason, "```", ""]
        finally:
            svc.close()
    (out / "workloads.md").write_text("\n".join(lines))
    (out / "workloads.json").write_text(json.dumps({"machine": info, "jobs": results}, indent=1))
    print("\n".join(lines))
    failed = [name for name, job in results.items() if job.get("state") != "SUCCEEDED"]
    if failed:
        sys.exit(f"INVALID: not every job succeeded: {failed}")


if __name__ == "__main__":
    main()
