"""The collective-benchmark vocabulary shared by CLI, coordinator and worker (no torch here).

Measurement conventions follow nccl-tests so that numbers compare:
size is the bytes of the op's largest buffer, algbw = size / time, busbw = algbw * factor.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ringleader.algos import BACKENDS  # noqa: F401 - the vocabulary of backends lives with the algos
from ringleader.algos import SYMM_ALGOS, SYMM_MAX_BYTES, algo_backend, check_algo, parse_algo
from ringleader.errors import InvalidSpec

OPS = (
    "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter",
    "alltoall", "gather", "scatter", "sendrecv", "barrier",
)
ROOTED_OPS = ("reduce", "broadcast", "gather", "scatter")
REDUCING_OPS = ("all_reduce", "reduce", "reduce_scatter")
# Ops whose largest buffer is split into world_size equal chunks, so sizes round to a multiple.
CHUNKED_OPS = ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter")
REDUCE_OPS = ("sum", "prod", "min", "max", "avg")
DTYPE_SIZES = {
    "float32": 4, "float16": 2, "bfloat16": 2, "float64": 8,
    "int8": 1, "uint8": 1, "int32": 4, "int64": 8,
}
INTEGER_DTYPES = ("int8", "uint8", "int32", "int64")

DEFAULTS = dict(
    dtype="float32", reduce_op="sum", min_bytes=8, max_bytes=64 << 20, factor=2.0,
    iters=20, warmup=5,
)
AUTO_ITERS = 0  # iters of a collective sweep: choose per size (worker/calibrate.py)
MODES = ("eager", "graph")

DEFAULT_OP_TIMEOUT_S = 120.0
MAX_SIZES = 64
MAX_FACTOR = 1024
MAX_ITERS = 100_000
MAX_BYTES = 1 << 40  # one buffer; nothing larger exists on one device

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str, field: str = "size") -> int:
    """Parse '8', '64K', '1M', '8G' (binary suffixes, as nccl-tests) into bytes."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise InvalidSpec(field, f"cannot parse size {text!r} (use e.g. 8, 64K, 1M, 8G)")
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if value != int(value):
        raise InvalidSpec(field, f"size {text!r} is not a whole number of bytes")
    return int(value)


def format_size(n: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def format_gib(n: int) -> str:
    """Bytes as GiB with one decimal, for messages about memory."""
    return f"{n / (1 << 30):.1f} GiB"


def busbw_factor(op: str, world_size: int) -> float:
    """nccl-tests' bus-bandwidth factor: busbw = algbw * factor."""
    n = world_size
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in CHUNKED_OPS:
        return (n - 1) / n
    if op in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    return 0.0  # barrier moves no payload


def effective_size(op: str, size_bytes: int, dtype: str, world_size: int) -> int:
    """Round a requested size down to what the op can move (whole elements, equal chunks)."""
    if op == "barrier":
        return 0
    unit = DTYPE_SIZES[dtype] * (world_size if op in CHUNKED_OPS else 1)
    return max(unit, size_bytes // unit * unit)


def sweep_sizes(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    sizes, s = [], min_bytes
    while s <= max_bytes and len(sizes) <= MAX_SIZES:
        sizes.append(s)
        # At least one byte more each step, so a factor like 1.1 cannot repeat a small size.
        s = max(s + 1, int(s * factor)) if factor > 1 else max_bytes + 1
    return sizes


def resolve_sizes(sizes: list[int], min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """An explicit size list, or the geometric sweep min..max (defaults for unset fields)."""
    if sizes:
        if any(not 1 <= s <= MAX_BYTES for s in sizes):
            raise InvalidSpec("sizes", f"every size must be between 1 byte and {format_size(MAX_BYTES)}")
        if len(sizes) > MAX_SIZES:
            raise InvalidSpec("sizes", f"at most {MAX_SIZES} sizes per job")
        return list(sizes)
    min_bytes = min_bytes or DEFAULTS["min_bytes"]
    max_bytes = max_bytes or DEFAULTS["max_bytes"]
    factor = factor or DEFAULTS["factor"]
    if max_bytes < min_bytes:
        raise InvalidSpec("max_bytes", f"{max_bytes} is below min_bytes {min_bytes}")
    if max_bytes > MAX_BYTES:
        raise InvalidSpec("max_bytes", f"at most {format_size(MAX_BYTES)}, got {max_bytes}")
    if not math.isfinite(factor) or not 1 <= factor <= MAX_FACTOR:
        raise InvalidSpec("factor", f"must be between 1 and {MAX_FACTOR}, got {factor}")
    if factor == 1 and max_bytes != min_bytes:
        raise InvalidSpec("factor", "1 only makes sense with min_bytes == max_bytes")
    chosen = sweep_sizes(min_bytes, max_bytes, factor)
    if len(chosen) > MAX_SIZES:
        raise InvalidSpec("factor", f"the sweep would have more than {MAX_SIZES} sizes")
    return chosen


def check_iters(iters: int, warmup: int | None, *, auto: bool = False) -> tuple[int, int]:
    """Timed and warm-up iterations with their defaults (warmup None: unset; 0 is allowed).
    With `auto`, iters 0 stays 0: the worker chooses per size."""
    iters = iters or (AUTO_ITERS if auto else DEFAULTS["iters"])
    if iters > MAX_ITERS:
        raise InvalidSpec("iters", f"at most {MAX_ITERS}")
    warmup = DEFAULTS["warmup"] if warmup is None else warmup
    if warmup > MAX_ITERS:
        raise InvalidSpec("warmup", f"at most {MAX_ITERS}")
    return iters, warmup


@dataclass(frozen=True)
class Collective:
    """A validated collective sweep (the domain form of CollectiveSpec)."""

    op: str
    dtype: str
    reduce_op: str
    sizes: tuple[int, ...]  # requested sizes; per-job rounding happens with world_size known
    iters: int  # AUTO_ITERS: chosen per size
    warmup: int
    in_place: bool
    root: int
    graph: bool = False
    algo: str = ""  # canonical (parse_algo); "" the backend's own

    def sizes_for(self, world_size: int) -> list[int]:
        """The distinct effective sizes this sweep runs on `world_size` ranks."""
        out: list[int] = []
        for s in self.sizes:
            e = effective_size(self.op, s, self.dtype, world_size)
            if e not in out:
                out.append(e)
        return out


def validate_collective(
    *, op: str, dtype: str, reduce_op: str, sizes: list[int], min_bytes: int, max_bytes: int,
    factor: float, iters: int, warmup: int, in_place: bool, root: int, world_size: int,
    backend: str | None = None, graph: bool = False, algo: str = "",
) -> Collective:
    """Check every field, naming the first bad one; fill defaults for empty ones."""
    if world_size < 1:
        raise InvalidSpec("world_size", "must be at least 1")
    if op not in OPS:
        raise InvalidSpec("op", f"unknown op {op!r}; expected one of {', '.join(OPS)}")
    dtype = dtype or DEFAULTS["dtype"]
    if dtype not in DTYPE_SIZES:
        raise InvalidSpec("dtype", f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_SIZES)}")
    reduce_op = reduce_op or DEFAULTS["reduce_op"]
    if reduce_op not in REDUCE_OPS:
        raise InvalidSpec("reduce_op", f"unknown reduce op {reduce_op!r}; expected one of {', '.join(REDUCE_OPS)}")
    algo = parse_algo(algo)
    check_algo(algo, op=op, dtype=dtype, reduce_op=reduce_op)
    if graph and op == "barrier":
        raise InvalidSpec("graph", "barrier cannot be captured in a CUDA graph (it waits on the host)")
    refusal = backend_refusal(backend, op=op, dtype=dtype, reduce_op=reduce_op, graph=graph,
                              algo=algo) if backend else None
    if refusal:
        raise refusal
    if op == "sendrecv" and world_size < 2:
        raise InvalidSpec("world_size", "sendrecv needs at least 2 ranks")
    if op in ROOTED_OPS and root >= world_size:
        raise InvalidSpec("root", f"root {root} is out of range for world_size {world_size}")
    chosen = resolve_sizes(sizes, min_bytes, max_bytes, factor)
    if algo in SYMM_ALGOS:
        if max(chosen) > SYMM_MAX_BYTES:
            raise InvalidSpec("algo", f"{algo} runs sizes up to {format_size(SYMM_MAX_BYTES)}B, "
                                      f"the sweep reaches {format_size(max(chosen))}B")
        odd = [s for s in chosen if effective_size(op, s, dtype, world_size) % 4]
        if odd:
            raise InvalidSpec("algo", f"{algo} moves whole 4-byte words: size {odd[0]} is not a multiple of 4")
    iters, warmup = check_iters(iters, warmup, auto=True)
    if op == "barrier":
        chosen = [0]
    return Collective(op, dtype, reduce_op, tuple(chosen), iters, warmup, bool(in_place), root,
                      bool(graph), algo)


def backend_refusal(backend: str, *, op: str, dtype: str, reduce_op: str, graph: bool = False,
                    algo: str = "") -> InvalidSpec | None:
    """Why `backend` cannot run this combination (an InvalidSpec naming the field), or None.

    The one rule of what each backend runs, used at submit, placement and in the executor.
    Measured with torch 2.11-2.13: NCCL runs the whole vocabulary; gloo runs every op and dtype,
    and avg on floating dtypes, but its avg divides in place and cannot cast back to integers.
    CUDA graphs and the nccl/symm algos need CUDA devices, which only NCCL workers have.
    """
    if backend == "gloo" and op in REDUCING_OPS and reduce_op == "avg" and dtype in INTEGER_DTYPES:
        return InvalidSpec("reduce_op", f"avg on {dtype} is not supported by the gloo backend")
    if graph and backend != "nccl":
        return InvalidSpec("graph", f"CUDA graphs need CUDA devices (nccl); the {backend} backend runs on the CPU")
    need = algo_backend(algo)
    if need and need != backend:
        return InvalidSpec("algo", f"{algo} needs the {need} backend, not {backend}")
    return None


def physically_in_place(op: str, in_place: bool, algo: str = "") -> bool:
    """Whether the op really runs on one buffer: torch's all_reduce/reduce/broadcast always do
    (and symm:two_shot), alltoall, sendrecv and symm:one_shot never can."""
    if algo == "symm:one_shot":
        return False
    if op in ("all_reduce", "reduce", "broadcast"):
        return True
    return in_place and op not in ("alltoall", "sendrecv")


def bytes_needed(op: str, size_bytes: int, world_size: int, in_place: bool, algo: str = "") -> int:
    """Device bytes one rank allocates for one size: its buffers plus the data check's reserve
    (one largest buffer), so a size that passes here fits with the allocator's slack."""
    if op == "barrier":
        return 0
    in_place = physically_in_place(op, in_place, algo)
    n = world_size
    largest = size_bytes
    if op in ("all_gather", "gather"):
        other = largest // n  # send chunk
    elif op in ("reduce_scatter", "scatter"):
        other = largest // n  # receive chunk
    else:
        other = largest
    buffers = largest if in_place else largest + other
    return buffers + largest  # + expected values for the check
