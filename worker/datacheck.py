"""Data check for the collective benchmark: deterministic inputs and their closed-form results.

Every rank fills its input with small integers that depend on (source rank, element index, seed);
the expected output of each op is computed from a formula, never by running another collective,
so a broken collective cannot agree with itself. Values are chosen so that every intermediate
and final result is an exactly representable integer in the dtype (no int8 overflow, nothing
above 256 in bfloat16), whatever the reduction order.

The values repeat every PERIOD elements (the hash reads the index modulo a prime), so a fill or a
check computes the formula over one period at most and then only copies or compares it, tiled,
in the buffer's own dtype. Computing the formula for every element (about 20 int64 passes per
fill and as many per check) cost 10-20x the timed ops of a CPU sweep per size; a tiled copy or
compare costs about one op. Work is done in blocks of at most CHUNK elements, so an 8 GiB buffer
never needs an 8 GiB temporary.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import torch

from ringleader import spec

# Elements per block: a check's temporaries (a bool mask; float avg: two float64 copies) stay
# below 40 bytes an element, ~640 MiB at most; the period's own formula, ~40 bytes an element
# of one period, much less.
CHUNK = 1 << 24
SCRATCH_BYTES_PER_ELEM = 40
# A prime, so that no power-of-two chunk offset of a misplaced block is a whole number of periods
# (a block moved by one would still read as wrong). Below torch's grain size (32768 elements), so
# the formula's ~30 small ops over one period run on one thread: with two OpenMP threads on a
# busy CPU, each small op waited for both to be scheduled (0.1-1 s per fill at load 20, 10 ms on
# one thread). 32749 distinct positions are far more than an op could confuse.
PERIOD = 32_749
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
    """A pseudo-random int64 in [0, 2^31) per element index (modulo PERIOD) and seed.

    Two rounds of a Lehmer multiply and xor-shift; every product stays below 2^63, so CPU and
    CUDA agree without relying on integer wrap-around.
    """
    h = (idx % PERIOD + seed * 1_000_003) * 48_271 % 2_147_483_647
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


REDUCED = -1  # Formula.src of the reduction over every rank


@dataclass(frozen=True)
class Formula:
    """int64 values at int64 element indices: source rank `src`'s inputs, or (src REDUCED) the
    closed-form reduction over all n ranks. A value, not a closure, so that a period of it can be
    kept (_period)."""
    kind: str
    dtype: str
    src: int
    n: int
    seed: int

    def __call__(self, idx: torch.Tensor) -> torch.Tensor:
        if self.src == REDUCED:
            return reduced_values(self.kind, self.dtype, idx, self.n, self.seed)
        return source_values(self.kind, self.dtype, self.src, idx, self.n, self.seed)


# Periods kept per process (an executor serves one device): a warm job repeats its fills and its
# check, and the formula's ~30 small ops were most of a small job's data check on GPUs (two fills
# and a check, 1.3 ms of an 8 B job's ~2.7 ms in its executor on H200s). 32 periods of 8-byte
# values are 8 MiB at most.
_PERIODS: collections.OrderedDict = collections.OrderedDict()
PERIODS_KEPT = 32


def _period(values: Formula, start: int, length: int, dtype: torch.dtype, device) -> torch.Tensor:
    """values(idx) for the first min(length, PERIOD) indices from `start`, in `dtype`: what every
    later period of the range repeats (the values are exact integers in every dtype). Kept: never
    write into what this returns."""
    p = min(length, PERIOD)
    key = (values, start % PERIOD, p, dtype, torch.device(device))  # values depend on the index mod PERIOD only
    if (kept := _PERIODS.get(key)) is not None:
        _PERIODS.move_to_end(key)
        return kept
    idx = torch.arange(start, start + p, device=device, dtype=torch.int64)
    out = _PERIODS[key] = values(idx).to(dtype)
    while len(_PERIODS) > PERIODS_KEPT:
        _PERIODS.popitem(last=False)
    return out


def _tiles(flat: torch.Tensor, period: torch.Tensor):
    """(part of `flat`, the period values it must hold) pairs covering `flat`: blocks of whole
    periods as (rows, period) views, at most CHUNK elements each, then the partial last period."""
    p, total = period.numel(), flat.numel()
    if p == 0:
        return
    full, rows = total // p, max(1, CHUNK // p)
    for r in range(0, full, rows):
        k = min(rows, full - r)
        yield flat[r * p:(r + k) * p].view(k, p), period.expand(k, p)
    if total % p:
        yield flat[full * p:], period[:total - full * p]


def fill(buf: torch.Tensor, *, kind: str, dtype: str, src: int, n: int, seed: int) -> None:
    """buf[j] = source_values(src, j) for every element, on buf's device."""
    flat = buf.view(-1)
    period = _period(Formula(kind, dtype, src, n, seed), 0, flat.numel(), buf.dtype, buf.device)
    for part, values in _tiles(flat, period):
        part.copy_(values)


def expected_segments(op: str, reduce_op: str, dtype: str, *, rank: int, world_size: int, root: int,
                      count: int, seed: int) -> list[tuple[int, int, Formula, int]]:
    """This rank's expected output as segments (output start, length, values, index start):
    output element out_start + k holds values(index_start + k).

    count is the elements of the op's largest buffer; chunked ops split it into n chunks of c.
    """
    n = world_size
    c = count // n
    kind = kind_of(op, reduce_op)

    def src(s: int) -> Formula:
        return Formula(kind, dtype, s, n, seed)

    reduced = Formula(kind, dtype, REDUCED, n, seed)

    if op in ("all_reduce", "reduce"):
        return [(0, count, reduced, 0)]
    if op == "reduce_scatter":
        return [(0, c, reduced, rank * c)]
    if op == "broadcast":
        return [(0, count, src(root), 0)]
    if op in ("all_gather", "gather"):  # chunk s is rank s's whole input
        return [(s * c, c, src(s), 0) for s in range(n)]
    if op == "alltoall":  # chunk s is chunk `rank` of rank s's input
        return [(s * c, c, src(s), rank * c) for s in range(n)]
    if op == "scatter":
        return [(0, c, src(root), rank * c)]
    if op == "sendrecv":
        return [(0, count, src((rank - 1) % n), 0)]
    raise ValueError(f"op: no data check for {op!r}")


def _tolerance(op: str, reduce_op: str, dtype: str) -> float:
    """Relative tolerance: only float avg may be inexact (NCCL pre-multiplies by 1/n)."""
    if kind_of(op, reduce_op) != "avg" or not torch_is_float(dtype):
        return 0.0
    return 1e-2 if dtype in ("float16", "bfloat16") else 1e-6


def torch_is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _wrong_in(got: torch.Tensor, exp: torch.Tensor, rtol: float) -> torch.Tensor:
    if rtol == 0:
        return torch.count_nonzero(got != exp)  # exact values: NaN differs from everything
    got, exp = got.double(), exp.double()
    return torch.count_nonzero(~((got - exp).abs() <= rtol * exp.abs()))  # "not within": NaN counts


def count_wrong(out: torch.Tensor, *, op: str, dtype: str, reduce_op: str, rank: int,
                world_size: int, root: int, count: int, seed: int) -> int:
    """Elements of this rank's output `out` that differ from the expected result."""
    flat = out.reshape(-1)
    rtol = _tolerance(op, reduce_op, dtype)
    wrong = torch.zeros((), dtype=torch.int64, device=out.device)
    for start, length, values, index in expected_segments(op, reduce_op, dtype, rank=rank, world_size=world_size,
                                                          root=root, count=count, seed=seed):
        seg = flat[start:start + length]
        period = _period(values, index, seg.numel(), out.dtype, out.device)
        for got, exp in _tiles(seg, period):
            wrong += _wrong_in(got, exp, rtol)
    return int(wrong.item())
