"""What the executor saves by deriving the checked job (ValidJob.from_normalized) instead of
checking the spec again (jobspec.normalize), per job kind, in-process.

    python bench/normalize_once.py > bench/results/DATE-normalize-once/README.md

Both return the same ValidJob (tests/unit/test_kinds_table.py); the executor runs the first once
per job and rank. Timed with time.perf_counter over many repetitions; the median of 7 rounds.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ringleader import jobspec  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb  # noqa: E402

SPECS = {
    "collective (default sweep, 8 B - 64 MiB)": pb.JobSpec(world_size=8, collective=pb.CollectiveSpec(op="all_reduce")),
    "collective (64 explicit sizes)": pb.JobSpec(world_size=8, collective=pb.CollectiveSpec(
        op="all_gather", sizes=[1024 * (i + 1) for i in range(64)])),
    "p2p pairwise (16 ranks)": pb.JobSpec(world_size=16, p2p=pb.P2PSpec(pairwise=True, sizes=[1 << 20])),
    "gradient_average": pb.JobSpec(world_size=8, gradient_average=pb.GradientAverageSpec()),
    "train": pb.JobSpec(world_size=8, train=pb.TrainSpec()),
    "algo_sweep": pb.JobSpec(world_size=8, algo_sweep=pb.AlgoSweepSpec()),
}


def per_call_us(fn, arg, n: int = 2000) -> float:
    rounds = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(n):
            fn(arg)
        rounds.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(rounds)


def main() -> None:
    print(f"# normalize vs from_normalized, {time.strftime('%Y-%m-%d')}, {platform.node()}, "
          f"{platform.processor() or platform.machine()}, Python {platform.python_version()}\n")
    print("| spec | normalize (us) | from_normalized (us) | ratio |")
    print("|---|---:|---:|---:|")
    for name, spec in SPECS.items():
        normalized = jobspec.normalize(spec).spec
        a, b = per_call_us(jobspec.normalize, spec), per_call_us(jobspec.ValidJob.from_normalized, normalized)
        print(f"| {name} | {a:.1f} | {b:.1f} | {a / b:.1f}x |")


if __name__ == "__main__":
    main()
