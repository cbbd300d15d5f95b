"""Baselines: is this number normal for this hardware? Keys, robust statistics and the regression
rule, pure (the store keeps the entries; docs/baselines.md explains the choices).

A result row is comparable with others of the same key: GPU model, op, dtype, size bucket (a
power of two), ranks, hosts, link kind (one host or across hosts), mode (eager/graph) and the
implementation (algo: nccl and a symmetric-memory kernel differ by 2x at small sizes). Each key
keeps the busbw of its last WINDOW results; the baseline is their median, its noise their MAD.

A result is low when it falls below median - max(K_MAD * 1.4826 * MAD, FLOOR * median): the
MAD term scales with the noise this key has shown (1.4826 * MAD estimates a normal sigma), the
floor keeps a baseline of near-identical samples from alerting on a 2 % dip, and a result below a
quarter of the median is low however noisy the key (a noisy key must still see a 4x drop). A regression is
REPEAT low results among the last RECENT judged, so one noisy run never alerts. Low results are
kept out of the window, so a regression does not become the new normal by itself: an operator
resets a key (import) after a deliberate change of hardware.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ringleader import spec
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb

WINDOW = 50  # results a baseline keeps
LINK_OP = "link_matrix"  # the op of a link's own baseline (coordinator/health/link_baselines.py)
MIN_SAMPLES = 5  # a baseline judges nothing before it has this many
K_MAD = 4.0  # how many noise sigmas below the median is low
FLOOR = 0.10  # and at least this fraction below it
# ...but at least this fraction while the window holds fewer than SETTLED results: five samples
# say little of a key's noise. On the 2-core namespace bed the first five 8-rank all_reduce
# sweeps read 3.7 % apart (MAD) where the next twenty read 14 % apart, and a clean sweep at 0.74
# of the median was a regression (1 clean run in 20).
EARLY_FLOOR, SETTLED = 0.30, 20
CEILING = 0.25  # but a result below this fraction of the median is low however noisy the key
RECENT, REPEAT = 3, 2  # a regression: REPEAT low among the last RECENT results judged
MAD_SIGMA = 1.4826  # MAD -> standard deviation of a normal distribution
# The slower detector beside the per-result rule: the last DRIFT_SHORT results fed to a settled
# window, all below the median of the window before them and their median below it by more than
# max(DRIFT_FLOOR, DRIFT_K sigmas of a median of DRIFT_SHORT), is a step the per-result band was
# too wide to see (a noisy key: on the loaded bed a link at 200 Mbit/s read 0.36-0.47 of its
# baseline, inside the band, and the key's median fell 40 % in 4 minutes). Those results leave the
# window again, so a step is raised, not learnt. (1.1926 sigma: the spread of a median of three.)
DRIFT_SHORT, DRIFT_FLOOR, DRIFT_K = 3, 0.15, 5.0
MEDIAN3_SIGMA = 1.1926 / DRIFT_SHORT ** 0.5
# Results a window holds before the detector judges: a MAD of twenty underestimated a 10 % noise
# by a third and raised a clean key (2 in 24,000 clean results).
DRIFT_MIN = 40


@dataclass(frozen=True)
class KeyFields:
    """What a row does not say itself about the gang that measured it."""

    gpu_model: str
    ranks: int
    hosts: int

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.hosts < 1:
            raise ValueError(f"key fields: ranks ({self.ranks}) and hosts ({self.hosts}) must be >= 1")


@dataclass(frozen=True)
class Regression:
    """A regression event's evidence."""

    key: str
    op: str
    busbw_gbps: float
    baseline_gbps: float
    threshold_gbps: float
    ratio: float
    low: int  # low results among the last judged
    judged: int

    def describe(self) -> str:
        what = f"link {self.key.rsplit('|', 1)[-1]}" if self.op == LINK_OP else f"{self.op} busbw"
        return (f"{what} {self.busbw_gbps:.3g} GB/s is {self.ratio:.2f} of its baseline "
                f"{self.baseline_gbps:.3g} (threshold {self.threshold_gbps:.3g}; {self.low} of the last "
                f"{self.judged} below) [{self.key}]")


def key_fields(job: pb.Job, model_of: dict[str, str]) -> KeyFields:
    """The gang's part of the key: `model_of` maps worker id -> device name (e.g. "NVIDIA H200").

    A gang of mixed models is keyed by its models joined with "+", so it never borrows the
    baseline of a uniform one.
    """
    models = sorted({model_of.get(w.worker_id, "") or "unknown" for w in job.workers})
    return KeyFields(gpu_model="+".join(models) or "unknown", ranks=max(1, len(job.workers)),
                     hosts=max(1, len({w.host for w in job.workers})))


def size_bucket(size_bytes: int) -> int:
    """The power of two at or below the size (0 for 0 bytes: barrier)."""
    return 1 << (size_bytes.bit_length() - 1) if size_bytes > 0 else 0


def link_kind(hosts: int) -> str:
    return "local" if hosts <= 1 else "cross"


def new_entry(row: pb.SizeResult, kf: KeyFields) -> pb.BaselineEntry:
    """An empty baseline for the row's key."""
    e = pb.BaselineEntry(gpu_model=kf.gpu_model, op=row.op, dtype=row.dtype, size_bucket=size_bucket(row.size_bytes),
                         ranks=kf.ranks, hosts=kf.hosts, link=link_kind(kf.hosts), mode=row.mode or "eager",
                         algo=row.algo)
    e.key = entry_key(e)
    return e


def entry_key(e: pb.BaselineEntry) -> str:
    """The key string of an entry's fields (the store's primary key)."""
    bucket = f"2^{e.size_bucket.bit_length() - 1}" if e.size_bucket else "0"
    return "|".join([e.gpu_model, e.op, e.dtype, bucket, f"r{e.ranks}", f"h{e.hosts}", e.link, e.mode, e.algo])


def row_key(row: pb.SizeResult, kf: KeyFields) -> str:
    return new_entry(row, kf).key


def recompute(e: pb.BaselineEntry) -> None:
    """Median and MAD of the entry's window (in place)."""
    if not e.samples:
        e.median_busbw_gbps = e.mad_busbw_gbps = 0.0
        return
    med = statistics.median(e.samples)
    e.median_busbw_gbps = med
    e.mad_busbw_gbps = statistics.median(abs(x - med) for x in e.samples)


def threshold(e: pb.BaselineEntry) -> float:
    """Below this busbw a result is low (0 while the baseline has too few samples to judge)."""
    if len(e.samples) < MIN_SAMPLES:
        return 0.0
    med = e.median_busbw_gbps
    floor = EARLY_FLOOR if len(e.samples) < SETTLED else FLOOR
    return max(med - max(K_MAD * MAD_SIGMA * e.mad_busbw_gbps, floor * med), CEILING * med)


def annotate(row: pb.SizeResult, e: pb.BaselineEntry | None) -> pb.SizeResult:
    """Set the row's baseline fields from its entry (None or empty: no baseline yet). In place."""
    if e is None or not e.samples or e.median_busbw_gbps <= 0:
        row.baseline_busbw_gbps = row.baseline_ratio = 0.0
        row.baseline_key = e.key if e is not None else ""
        return row
    row.baseline_key = e.key
    row.baseline_busbw_gbps = e.median_busbw_gbps
    row.baseline_ratio = row.busbw_gbps / e.median_busbw_gbps
    return row


def observe(e: pb.BaselineEntry, busbw_gbps: float, at: float) -> Regression | None:
    """Judge one result against the entry, then feed the entry (in place). Returns the regression
    this result completes, if any (each low result of a regressed key returns one)."""
    if busbw_gbps < 0:
        raise ValueError(f"busbw_gbps: must be >= 0, got {busbw_gbps}")
    limit = threshold(e)
    e.updated_at = at
    if limit <= 0:  # still learning: every result feeds the window
        _feed(e, busbw_gbps)
        return None
    low = busbw_gbps < limit
    e.recent_low.append(low)
    del e.recent_low[:-RECENT]
    if not low:
        _feed(e, busbw_gbps)
        return _drift(e, busbw_gbps, limit)
    n_low = sum(e.recent_low)
    if n_low < REPEAT:
        return None
    e.regressions += 1
    return Regression(key=e.key, op=e.op, busbw_gbps=busbw_gbps, baseline_gbps=e.median_busbw_gbps,
                      threshold_gbps=limit, ratio=busbw_gbps / e.median_busbw_gbps, low=n_low,
                      judged=len(e.recent_low))


def _drift(e: pb.BaselineEntry, busbw_gbps: float, limit: float) -> Regression | None:
    """The slower detector (DRIFT_*), after `busbw_gbps` was fed: a regression, the drifted results
    taken out of the window, when the recent ones stepped down together."""
    if len(e.samples) < DRIFT_MIN + DRIFT_SHORT:
        return None
    recent, before = list(e.samples[-DRIFT_SHORT:]), list(e.samples[:-DRIFT_SHORT])
    med = statistics.median(before)
    sigma = MAD_SIGMA * statistics.median(abs(x - med) for x in before)
    bound = med - max(DRIFT_FLOOR * med, DRIFT_K * MEDIAN3_SIGMA * sigma)
    if max(recent) >= med or statistics.median(recent) >= bound:
        return None
    del e.samples[-DRIFT_SHORT:]
    recompute(e)
    e.regressions += 1
    return Regression(key=e.key, op=e.op, busbw_gbps=busbw_gbps, baseline_gbps=e.median_busbw_gbps,
                      threshold_gbps=bound, ratio=busbw_gbps / e.median_busbw_gbps if e.median_busbw_gbps else 0.0,
                      low=DRIFT_SHORT, judged=DRIFT_SHORT)


def _feed(e: pb.BaselineEntry, busbw_gbps: float) -> None:
    e.samples.append(busbw_gbps)
    del e.samples[:-WINDOW]
    recompute(e)


MAX_BUCKET = 1 << 62  # sizes are int64 on the wire: the largest power of two a bucket can be
MAX_RANKS = 1 << 20
TEXT_LIMITS = {"gpu_model": 128, "op": 32, "dtype": 32, "mode": 8, "algo": 64}


def validated(e: pb.BaselineEntry, where: str = "entries") -> pb.BaselineEntry:
    """An imported entry, checked field by field and with its key and statistics recomputed
    (an import never trusts a key string or a median it was given). The one check of both APIs
    (gRPC ImportBaselines, REST /baselines/import): InvalidSpec names `where`.field."""
    def bad(name: str, why: str) -> InvalidSpec:
        return InvalidSpec(f"{where}.{name}", f"baseline {e.key[:200]!r}: {why}")

    if not e.mode:  # REST's default, so both APIs take the same table
        e = _copy_with(e, mode="eager")
    for name, limit in TEXT_LIMITS.items():
        value = getattr(e, name)
        if (not value and name != "algo") or len(value) > limit or not value.isprintable() or "|" in value:
            raise bad(name, f"must be {0 if name == 'algo' else 1}-{limit} printable characters without '|'")
    if e.op not in spec.OPS and e.op != LINK_OP:
        raise bad("op", f"unknown op {e.op!r}")
    if e.dtype not in spec.DTYPE_SIZES:
        raise bad("dtype", f"unknown dtype {e.dtype!r}; expected one of {', '.join(spec.DTYPE_SIZES)}")
    if e.mode not in ("eager", "graph"):
        raise bad("mode", f"must be eager or graph, not {e.mode!r}")
    for name in ("ranks", "hosts"):
        if not 1 <= getattr(e, name) <= MAX_RANKS:
            raise bad(name, f"must be between 1 and {MAX_RANKS}")
    if e.link != link_kind(e.hosts):
        raise bad("link", f"{e.link!r} does not match hosts={e.hosts}")
    if e.size_bucket & (e.size_bucket - 1) or e.size_bucket > MAX_BUCKET:
        raise bad("size_bucket", f"{e.size_bucket} is not a power of two up to 2^62")
    if not 1 <= len(e.samples) <= WINDOW:
        raise bad("samples", f"between 1 and {WINDOW} results, got {len(e.samples)}")
    if any(not (x >= 0) or x == float("inf") for x in e.samples):
        raise bad("samples", "must be finite and >= 0")
    if not (0 <= e.updated_at < float("inf")):
        raise bad("updated_at", f"must be a finite time in seconds, got {e.updated_at}")
    out = pb.BaselineEntry()
    out.CopyFrom(e)
    del out.recent_low[:]
    out.regressions = 0  # this coordinator's count: a counter starts from zero
    out.key = entry_key(out)
    recompute(out)
    return out


def _copy_with(e: pb.BaselineEntry, **fields) -> pb.BaselineEntry:
    out = pb.BaselineEntry()
    out.CopyFrom(e)
    for name, value in fields.items():
        setattr(out, name, value)
    return out


def validated_table(table: pb.BaselineTable) -> list[pb.BaselineEntry]:
    """Every entry of an import validated (all or nothing), naming the first bad one's index."""
    return [validated(e, f"entries.{i}") for i, e in enumerate(table.entries)]


def judged(row: pb.SizeResult) -> bool:
    """Whether a row feeds its baseline: a row with wrong data or no bandwidth (barrier) does not."""
    return row.wrong == 0 and row.busbw_gbps > 0


def record(store, row: pb.SizeResult, kf: KeyFields, at: float) -> Regression | None:
    """What the control core calls where it stores a result row: the row gets its baseline (as it
    stood before this result) and the result then feeds that baseline. `store`: a JobStore."""
    e = store.baseline(row_key(row, kf)) or new_entry(row, kf)
    annotate(row, e)
    if not judged(row):
        return None
    regression = observe(e, row.busbw_gbps, at)
    store.put_baseline(e)
    return regression


def put_imported(store, entries: list[pb.BaselineEntry]) -> None:
    """Replace the entries of these keys (validated ones); a key's regression count stays."""
    for e in entries:
        old = store.baseline(e.key)
        e.regressions = old.regressions if old is not None else 0  # the metric stays a counter
        store.put_baseline(e)
