"""The fleet health checks' specs: defaults, limits and normalizers (JobSpec -> ValidJob).

Three kinds (proto: LinkMatrixSpec, GpuCheckSpec, SdcCheckSpec); their runners are in
worker/checks/, their verdicts in coordinator/health/verdicts.py. A check must be short, so that a user
job that arrives during a sweep waits at most one round of it: the limits bound one check's
work, not only its memory. Errors name the proto field ("link_matrix.iters").
"""

from __future__ import annotations

from ringleader import kinds, roundrobin
from ringleader.errors import InvalidSpec
from ringleader.jobspec import ValidJob, valid
from ringleader.v1 import jobs_pb2 as pb

# The checks are rows of the kind table (ringleader/kinds.py `_check`): these follow from it.
KINDS = tuple(k.name for k in kinds.checks())
# What a job's preflight (JobSpec.preflight) certifies its gang with, in this order.
PREFLIGHT_KINDS = tuple(k.name for k in kinds.checks() if k.preflight)
# The lowest priority: what the coordinator plans by itself yields to every user job.
CHECK_PRIORITY = -1000

# size_bytes 0: the runner chooses by link kind (worker/checks/link_sizes.py), at most LINK_AUTO_MAX_BYTES.
LINK_DEFAULTS = dict(size_bytes=0, iters=20, warmup=3)
LINK_AUTO_MAX_BYTES = 256 << 20
LINK_MAX_BYTES = 1 << 30
LINK_MAX_ITERS = 10_000
# n ranks meet in about n rounds; every link is one row of the result, so n(n-1)/2 rows.
LINK_MAX_RANKS = 512

GPU_DTYPES = ("bfloat16", "float16", "float32")
# The device's own defaults (the runner picks them once it knows the device). A CPU's products
# are a few milliseconds each, so that on a busy host some of them run without being descheduled.
# A CPU's copy stays in its core's own cache (512 KiB each way, in a 1-2 MiB L2): an 8 MiB copy
# ran through the L3 and memory bus every process on the host shares, and its loops read from
# 13 to 52 GB/s on a loaded 2-core VM, a clean worker's best at 0.68 of its peers'.
GPU_DEFAULTS = {"cuda": dict(matmul_n=8192, dtype="bfloat16", copy_bytes=1 << 30),
                "cpu": dict(matmul_n=512, dtype="float32", copy_bytes=512 << 10)}
GPU_MIN_N, GPU_MAX_N = 64, 32768
GPU_MAX_COPY_BYTES = 16 << 30
GPU_DEFAULT_ITERS, GPU_MAX_ITERS = 10, 1000

# Flags are noise-aware, not one fixed share of the median: ringleader/checkmath/flags.py.

SDC_DEFAULT_ROUNDS, SDC_MAX_ROUNDS = 4, 64
SDC_MAX_RANKS = 1024  # its exact sums of small integers stay exact in float32 up to here
SDC_N = 512  # side of the matrices the corruption check multiplies (its bytes: 3 x 1 MiB)


def _iters(field: str, value: int, default: int, limit: int) -> int:
    value = value or default
    if value > limit:
        raise InvalidSpec(field, f"at most {limit}, got {value}")
    return value


def check_link_matrix(out: pb.JobSpec) -> None:
    s, n = out.link_matrix, out.world_size
    if not 2 <= n <= LINK_MAX_RANKS:
        raise InvalidSpec("world_size", f"a link matrix needs between 2 and {LINK_MAX_RANKS} workers, got {n}")
    if s.size_bytes > LINK_MAX_BYTES:
        raise InvalidSpec("link_matrix.size_bytes", f"at most {LINK_MAX_BYTES} (1 GiB), got {s.size_bytes}")
    s.iters = _iters("link_matrix.iters", s.iters, LINK_DEFAULTS["iters"], LINK_MAX_ITERS)
    warmup = s.warmup if s.HasField("warmup") else LINK_DEFAULTS["warmup"]  # 0 given is 0
    if warmup > LINK_MAX_ITERS:
        raise InvalidSpec("link_matrix.warmup", f"at most {LINK_MAX_ITERS}, got {warmup}")
    s.warmup = warmup


def view_link_matrix(out: pb.JobSpec) -> ValidJob:
    s, n = out.link_matrix, out.world_size
    pairs = [p for r in roundrobin.rounds(n) for p in r]
    # A send and a receive buffer; progress counts rounds.
    size = s.size_bytes or LINK_AUTO_MAX_BYTES
    return valid(out, sizes=(size,), pairs=pairs, needs_bytes=2 * size,
                 total=roundrobin.round_count(n))


def check_gpu_check(out: pb.JobSpec) -> None:
    """0 / "" leave the device's default (GPU_DEFAULTS) to the runner."""
    g = out.gpu_check
    if g.matmul_n and not GPU_MIN_N <= g.matmul_n <= GPU_MAX_N:
        raise InvalidSpec("gpu_check.matmul_n", f"must be between {GPU_MIN_N} and {GPU_MAX_N} (0: the device's "
                          f"default), got {g.matmul_n}")
    if g.dtype and g.dtype not in GPU_DTYPES:
        raise InvalidSpec("gpu_check.dtype", f"must be one of {', '.join(GPU_DTYPES)}, got {g.dtype[:64]!r}")
    if g.copy_bytes > GPU_MAX_COPY_BYTES:
        raise InvalidSpec("gpu_check.copy_bytes", f"at most {GPU_MAX_COPY_BYTES} (16 GiB), got {g.copy_bytes}")
    g.iters = _iters("gpu_check.iters", g.iters, GPU_DEFAULT_ITERS, GPU_MAX_ITERS)


def view_gpu_check(out: pb.JobSpec) -> ValidJob:
    g, big = out.gpu_check, GPU_DEFAULTS["cuda"]
    n = g.matmul_n or big["matmul_n"]
    elem = 4 if g.dtype == "float32" else 2
    # Three matrices and the copy's source and destination (the GPU's defaults when unset).
    return valid(out, needs_bytes=3 * n * n * elem + 2 * (g.copy_bytes or big["copy_bytes"]), total=2)


def check_sdc_check(out: pb.JobSpec) -> None:
    if not 1 <= out.world_size <= SDC_MAX_RANKS:
        raise InvalidSpec("world_size", f"a corruption check runs on between 1 and {SDC_MAX_RANKS} workers, "
                          f"got {out.world_size}")
    s = out.sdc_check
    s.rounds = _iters("sdc_check.rounds", s.rounds, SDC_DEFAULT_ROUNDS, SDC_MAX_ROUNDS)


def view_sdc_check(out: pb.JobSpec) -> ValidJob:
    return valid(out, needs_bytes=4 * SDC_N * SDC_N * 4, total=out.sdc_check.rounds)


def is_check(spec: pb.JobSpec) -> bool:
    return spec.WhichOneof("kind") in KINDS


# What a check asks for when a sweep or a recheck leaves its settings unset (the `short` column):
# short rounds (the link's size chosen by its kind, worker/checks/link_sizes.py: 512 KiB between
# CPU workers, where a rate-limited link at 200 Mbit/s takes 21 ms a way, so a whole matrix of 8
# hosts stays within seconds; 256 MiB over NVLink, to saturate it; 20 round trips, of which the
# fastest counts, so that a busy host's scheduling delays do not, and whose total both ends time:
# with 4, honest ends' totals read 2x apart by noise on a busy 2-core machine and made a clean
# worker look like a rank that misreports its links).
def short_link_matrix() -> pb.LinkMatrixSpec:
    return pb.LinkMatrixSpec(size_bytes=0, iters=20, warmup=1)


def short_gpu_check() -> pb.GpuCheckSpec:
    return pb.GpuCheckSpec(iters=20)


def short_sdc_check() -> pb.SdcCheckSpec:
    return pb.SdcCheckSpec(rounds=2)
