"""Data check for the collective benchmark: deterministic inputs and their closed-form results.

Every rank fills its input with small integers that depend on (source rank, element index, seed);
the expected output of each op is computed from a formula, never by running another collective,
so a broken collective cannot agree with itself. Values are chosen so that every intermediate
and final result is an exactly representable integer in the dtype (no int8 overflow, nothing
above 256 in bfloat16), whatever the reduction order. Work is done in chunks so an 8 GiB buffer
never needs an 8G-element int64 temporary.
"""

from __future__ import annotations

import torch

from ringleader import spec

# Elements per chunk: ~40 bytes of int64/float64 temporaries each, so ~640 MiB at most.
CHUNK = 1 << 24
SCRATCH_BYTES_PER_ELEM = 40
# Written into outputs before the check op; outside the range of every copy value (0..96) and
# exact in every dtype, so an op that writes nothing is caught.
SENTINEL = 113
_COPY_MOD = 97

# Largest L such that every integer in [0, L] is exact (floats) or in range (ints).
_EXACT_LIMIT = {
    "int8": 127, "uint8": 255, "int32": 2**31 - 1, "int64": 2**63 - 1,
    "float16": 2048, "bfloat16": 256, "float32": 2**24, "float64": 2**53,
}


def _hash(idx: torch.Tensor, seed: int) -> torch.Tensor:
    """A pseudo-random int64 in [0, 2^31) per element index and seed.

    Two rounds of a Lehmer multiply and xor-shift; every product stays below 2^63, so CPU and
    CUDA agree without relying on integer wrap-around.
    """
    h = (idx + seed * 1_000_003) * 48_271 % 2_147_483_647
    h ^= h >> 15
    h = h * 69_621 % 2_147_483_647
    return h ^ (h >> 13)


def _active(reduce_op: str, dtype: str, n: int) -> int:
    """How many ranks per element contribute a non-identity value, bounded so results fit."""
    limit = _EXACT_LIMIT[dtype]
    if reduce_op == "sum":
        return min(n, limit // 2)  # result <= 2K
    if reduce_op == "avg":
        return min(n, limit // (2 * n))  # intermediate sum n*(result) <= 2Kn (NCCL ints sum first)
    if reduce_op == "prod":
        return min(n, 6)  # result <= 2^6
    return n


def source_values(kind: str, dtype: str, src, idx: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """Input values (int64) of rank(s) `src` at element indices `idx`.

    kind is "copy" for ops that move data (any value identifies its source) or the reduce op.
    Reducing inputs rotate over ranks: rank s plays position d = (s + h) % n for element h, so
    every rank's contribution differs per element while the reduction keeps a closed form.
    """
    h = _hash(idx, seed)
    if kind == "copy":
        return (h + 5 * src) % _COPY_MOD
    d = (h + src) % n
    u = h // n
    if kind in ("min", "max"):
        return 1 + u % 4 + (d != 0) * (1 + d % 3)  # 1..7; the d == 0 rank holds the minimum
    k = _active(kind, dtype, n)
    m = u % (k + 1)  # 0..K ranks contribute the larger value
    if kind == "prod":
        return 1 + (d < m)  # product 2^m
    v = (d < k) * (1 + (d < m))  # K ranks give 1 or 2, the rest 0: sum K + m
    return v * n if kind == "avg" else v


def reduced_values(kind: str, dtype: str, idx: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """Closed-form reduction over all n ranks of source_values(kind, ..., idx)."""
    h = _hash(idx, seed)
    u = h // n
    if kind == "min":
        return 1 + u % 4
    if kind == "max":
        return 1 + u % 4 + (1 + min(n - 1, 2) if n > 1 else 0)
    k = _active(kind, dtype, n)
    m = u % (k + 1)
    if kind == "prod":
        return torch.bitwise_left_shift(torch.ones_like(m), m)
    return k + m  # sum, and avg (each value was multiplied by n)


def kind_of(op: str, reduce_op: str) -> str:
    return reduce_op if op in spec.REDUCING_OPS else "copy"


def fill(buf: torch.Tensor, *, kind: str, dtype: str, src: int, n: int, seed: int) -> None:
    """buf[j] = source_values(src, j) for every element, chunk by chunk on buf's device."""
    flat = buf.view(-1)
    for start in range(0, flat.numel(), CHUNK):
        stop = min(start + CHUNK, flat.numel())
        idx = torch.arange(start, stop, device=buf.device, dtype=torch.int64)
        flat[start:stop].copy_(source_values(kind, dtype, src, idx, n, seed))


def expected_values(op: str, reduce_op: str, dtype: str, *, rank: int, world_size: int, root: int,
                    count: int, seed: int, j: torch.Tensor) -> torch.Tensor:
    """Expected int64 values of this rank's output at output indices `j`.

    count is the elements of the op's largest buffer; chunked ops split it into n chunks of c.
    """
    n = world_size
    c = count // n
    kind = kind_of(op, reduce_op)
    if op in ("all_reduce", "reduce"):
        return reduced_values(kind, dtype, j, n, seed)
    if op == "reduce_scatter":
        return reduced_values(kind, dtype, rank * c + j, n, seed)
    if op == "broadcast":
        return source_values(kind, dtype, root, j, n, seed)
    if op in ("all_gather", "gather"):  # chunk s is rank s's whole input
        return source_values(kind, dtype, j // c, j % c, n, seed)
    if op == "alltoall":  # chunk s is chunk `rank` of rank s's input
        return source_values(kind, dtype, j // c, rank * c + j % c, n, seed)
    if op == "scatter":
        return source_values(kind, dtype, root, rank * c + j, n, seed)
    if op == "sendrecv":
        return source_values(kind, dtype, (rank - 1) % n, j, n, seed)
    raise ValueError(f"op: no data check for {op!r}")


def _tolerance(op: str, reduce_op: str, dtype: str) -> float:
    """Relative tolerance: only float avg may be inexact (NCCL pre-multiplies by 1/n)."""
    if kind_of(op, reduce_op) != "avg" or not torch_is_float(dtype):
        return 0.0
    return 1e-2 if dtype in ("float16", "bfloat16") else 1e-6


def torch_is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def count_wrong(out: torch.Tensor, *, op: str, dtype: str, reduce_op: str, rank: int,
                world_size: int, root: int, count: int, seed: int) -> int:
    """Elements of this rank's output `out` that differ from the expected result."""
    flat = out.reshape(-1)
    rtol = _tolerance(op, reduce_op, dtype)
    wrong = torch.zeros((), dtype=torch.int64, device=out.device)
    for start in range(0, flat.numel(), CHUNK):
        stop = min(start + CHUNK, flat.numel())
        j = torch.arange(start, stop, device=out.device, dtype=torch.int64)
        exp = expected_values(op, reduce_op, dtype, rank=rank, world_size=world_size, root=root,
                              count=count, seed=seed, j=j)
        got = flat[start:stop]
        if torch_is_float(dtype):
            got, exp = got.double(), exp.double()
            # written as "not within" so that NaN counts as wrong
            bad = ~((got - exp).abs() <= rtol * exp.abs())
        else:
            bad = got.long() != exp
        wrong += bad.sum()
    return int(wrong.item())
