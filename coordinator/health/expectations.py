"""Expectations beside peers: what a check figure should be, by the fleet's own history for its
key and by a shipped floor for its GPU model. Judging is pure; the history is state the control
core holds beside the health book (docs/fleet-health.md, "Expectations").

Peers alone can never name a fleet, or a host, that degrades alike: a slowdown on every worker
moves the median with it. So after the peers' verdicts (coordinator/health/verdicts.py) each
figure is judged again here:

- history: the median of the last WINDOW figures of its key that passed (a worker judged healthy),
  once the key holds MIN_SAMPLES. A figure below BAND_GPU (BAND_CPU) x that median is below. The key
  is the check, the figure, the worker's device model from its registration (never the check
  payload's device string), and what sets the figure's scale (dtype and n; copy bytes; link kind
  and size).
- shipped floor: per GPU model (FLOORS), always, and per same-host NVLink pair of one SXM model
  (LINK_FLOORS): a fleet slow from its first check learns a slow history, and the floor still says
  what the hardware does.

A figure below its expectation fails the worker (UNHEALTHY), whatever its peers said. When every
judged worker of the run is below, that is ONE fleet-wide finding; when every worker of one host
is below (and not all of the run), a host-wide finding; each affected verdict carries it
(WorkerHealth.finding). A worker with neither peers of its model in the run nor an expectation is
"not yet judged": VERDICT_UNSPECIFIED with that said, never HEALTHY by default (see `judge`).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, replace
from typing import Mapping

from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb

WINDOW = 20  # passing figures a key keeps
MIN_SAMPLES = 3  # a key's history judges nothing before it holds this many
# Below this fraction of its key's history median a figure is below expectation. A GPU's figures
# hold within a few per cent from run to run (775-810 TFLOP/s on H200), so 0.6 leaves room for
# clocks and contention while a half-speed part falls below. A CPU worker shares its cores with
# whatever else the machine runs, and history spans runs under different loads (the peers of one
# run share its load; a loaded 2-core VM read clean copies at 0.707 of the peers' median): below a
# quarter, as the baselines' rule that a 4x drop is low however noisy the key.
BAND_GPU, BAND_CPU = 0.6, 0.25

FLEET, HOST = "fleet", "host"  # scopes of a finding (the metric's label)


@dataclass(frozen=True)
class Floor:
    """A shipped floor: the least a healthy part of this model does on the default check."""

    model: str  # matched as a substring of the registered device name, longest match first
    figure: str  # "tflops" (bf16, the GPU default) or "copy_gbps"
    value: float
    source: str


# A floor is a conservative fraction of the datasheet figure: TFLOP/s 0.5 of the dense bf16 peak
# (an n = 8192 product reached 775-810 of 989 TFLOP/s, 0.78-0.82, on H200); copy 0.4 of the HBM
# bandwidth (the copy read 3,005 of 4,800 GB/s, 0.63, on H200). A half-speed GPU falls below both.
# Sources per row in docs/fleet-health.md ("Expectations").
FLOORS: tuple[Floor, ...] = (
    Floor("H200", "tflops", 495.0, "NVIDIA H200 datasheet: 989 TFLOP/s dense bf16 (SXM)"),
    Floor("H200", "copy_gbps", 1920.0, "NVIDIA H200 datasheet: 4.8 TB/s HBM3e"),
    Floor("H100 PCIe", "tflops", 378.0, "NVIDIA H100 datasheet: 756 TFLOP/s dense bf16 (PCIe)"),
    Floor("H100 PCIe", "copy_gbps", 800.0, "NVIDIA H100 datasheet: 2.0 TB/s HBM2e (PCIe)"),
    Floor("H100", "tflops", 495.0, "NVIDIA H100 datasheet: 989 TFLOP/s dense bf16 (SXM)"),
    Floor("H100", "copy_gbps", 1340.0, "NVIDIA H100 datasheet: 3.35 TB/s HBM3 (SXM)"),
    Floor("A100", "tflops", 156.0, "NVIDIA A100 datasheet: 312 TFLOP/s dense bf16"),
    Floor("A100", "copy_gbps", 620.0, "NVIDIA A100 datasheet: 1.555 TB/s HBM2 (40GB; 80GB: 2.0 TB/s)"),
    Floor("B200", "tflops", 1125.0, "NVIDIA DGX B200 datasheet: 2.25 PFLOP/s dense bf16 per GPU"),
    Floor("B200", "copy_gbps", 3200.0, "NVIDIA B200 datasheet: 8 TB/s HBM3e"),
)


# The floors hold for the GPU default check's sizes (ringleader/checks.py GPU_DEFAULTS): a smaller
# product or copy spends more of its time in launch and tail effects and reads lower.
FLOOR_MIN_N, FLOOR_MIN_COPY_BYTES = 8192, 1 << 30


def floor_of(model: str, figure: str, dtype: str, n: int = FLOOR_MIN_N, copy_bytes: int = FLOOR_MIN_COPY_BYTES,
             floors: tuple[Floor, ...] = FLOORS) -> Floor | None:
    """The shipped floor of this device model's figure: TFLOP/s floors are bf16 figures of products
    of at least FLOOR_MIN_N, copy floors of copies of at least FLOOR_MIN_COPY_BYTES."""
    if figure == "tflops" and (dtype != "bfloat16" or n < FLOOR_MIN_N):
        return None
    if figure == "copy_gbps" and copy_bytes < FLOOR_MIN_COPY_BYTES:
        return None
    matches = [f for f in floors if f.figure == figure and f.model in model]
    best = max(matches, key=lambda f: len(f.model)) if matches else None
    return best if best is not None and best.value > 0 else None  # 0: this model has none


# Same-host links between two GPUs of one SXM model ride NVLink: the link check's GB/s (a timed round
# trip of both directions, 328-349 GB/s at 256 MiB on NV18 H200 pairs, where nccl-tests' sendrecv
# reads 306) against a third of one direction's NVLink bandwidth. A pair that lost its peer-to-peer
# path read 27-36 GB/s. PCIe cards (H100 PCIe, the NVL boards) have NVLink only where bridged: no
# floor (value 0). Links across hosts and smaller transfers have none either.
LINK_FLOOR_MIN_BYTES = 64 << 20
LINK_FLOORS: tuple[Floor, ...] = (
    Floor("H200", "link_gbps", 150.0, "NVLink 4 on H200 SXM: 18 links, 450 GB/s each way (NVIDIA H200 datasheet: 900 GB/s)"),
    Floor("H100", "link_gbps", 150.0, "NVLink 4 on H100 SXM: 18 links, 450 GB/s each way (NVIDIA H100 datasheet: 900 GB/s)"),
    Floor("A100", "link_gbps", 100.0, "NVLink 3 on A100 SXM: 12 links, 300 GB/s each way (NVIDIA A100 datasheet: 600 GB/s)"),
    Floor("B200", "link_gbps", 300.0, "NVLink 5 on B200: 18 links, 900 GB/s each way (NVIDIA B200 datasheet: 1.8 TB/s)"),
    Floor("H100 PCIe", "link_gbps", 0.0, "a PCIe card: NVLink only where bridged"),
    Floor("H100 NVL", "link_gbps", 0.0, "a PCIe card: NVLink only where bridged"),
    Floor("H200 NVL", "link_gbps", 0.0, "a PCIe card: NVLink only where bridged"),
    Floor("A100 PCIe", "link_gbps", 0.0, "a PCIe card: NVLink only where bridged"),
)


SHIPPED: tuple[Floor, ...] = FLOORS + LINK_FLOORS  # what judges when an operator gave no table of their own


def _gpu_of(w: pb.WorkerRef) -> tuple[str, str] | None:
    """The GPU a member runs on: its host and CUDA device, as the coordinator writes them (None: a
    CPU). Workers of the shared-GPU fleet share one (each its own NCCL_HOSTID: NCCL links them by
    socket, and their products run at once)."""
    return (w.host, w.device) if w.device.startswith("cuda") else None


def link_floor_of(model_a: str, model_b: str, same_host: bool, size_bytes: int,
                  floors: tuple[Floor, ...] = LINK_FLOORS) -> Floor | None:
    """The shipped floor of a same-host link between two GPUs of one model, at the link check's
    large sizes; None across hosts, between models, for PCIe cards, and below LINK_FLOOR_MIN_BYTES."""
    if not same_host or model_a != model_b or size_bytes < LINK_FLOOR_MIN_BYTES:
        return None
    return floor_of(model_a, "link_gbps", "", floors=floors)


class History:
    """The passing figures of each key (memory only: lost on a coordinator restart, learnt again)."""

    def __init__(self, floors: tuple[Floor, ...] | None = None) -> None:
        self._samples: dict[str, deque[float]] = {}
        self.findings: dict[str, int] = defaultdict(int)  # findings raised, by scope (a counter)
        # The floors judged by: the shipped table, or an operator's edit of it (--floors FILE).
        self.floors: tuple[Floor, ...] = floors if floors is not None else SHIPPED

    def median(self, key: str) -> tuple[float, int] | None:
        s = self._samples.get(key)
        if not s or len(s) < MIN_SAMPLES:
            return None
        return statistics.median(s), len(s)

    def learn(self, key: str, value: float) -> None:
        if value > 0:
            self._samples.setdefault(key, deque(maxlen=WINDOW)).append(value)

    def keys(self) -> list[str]:
        return sorted(self._samples)


@dataclass(frozen=True)
class Figure:
    """One figure of a check, with its key, as judged against expectations."""

    rank: int
    key: str
    name: str  # what it is, e.g. "TFLOP/s (bfloat16 n=8192)"
    value: float
    floor: Floor | None
    measured: str = ""  # what was measured when not the rank itself: a link ("0-1"), both of whose ends it is
    band: float = BAND_GPU  # of its history's median (BAND_CPU where a CPU worker measured it)


Found = dict[int, tuple[int, str, str]]  # rank -> (verdict, figure, expected): verdicts.Found


@dataclass
class Judged:
    """The verdicts after the expectations, and the findings (worker id -> finding) they raised."""

    found: Found
    finding_of: dict[int, str]
    findings: list[tuple[str, str]]  # (scope, text)


def figures(job: pb.Job, models: Mapping[str, str], floors: tuple[Floor, ...] | None = None) -> list[Figure]:
    """The figures of a finished check that expectations judge, keyed by registered model, each
    with its floor from `floors` (default: the shipped tables)."""
    floors = floors if floors is not None else SHIPPED
    kind = job.spec.WhichOneof("kind")
    ranks = {w.rank: w for w in job.workers}
    model = {r: models.get(w.worker_id) or "unknown" for r, w in ranks.items()}
    # The coordinator writes each member's device ("cpu:0", "cuda:3") from its registration.
    band = {r: BAND_CPU if w.device.startswith("cpu") else BAND_GPU for r, w in ranks.items()}
    out: list[Figure] = []
    if kind == "gpu_check":
        r = job.gpu_check
        # Ranks of this check on one GPU (the shared-GPU fleet) run their products at once, each
        # on its share: judged against their share of the floor, and their history kept apart.
        gpu = {k: _gpu_of(w) for k, w in ranks.items()}
        sharing = Counter(g for g in gpu.values() if g is not None)
        for w in r.workers:
            if w.rank not in ranks or w.refused or w.wrong:
                continue  # an untrusted or wrong figure is judged by the peers' rules only
            m, k = model[w.rank], sharing.get(gpu[w.rank], 1)
            shared = f"|shared{k}" if k > 1 else ""
            out.append(Figure(w.rank, f"gpu_check|tflops|{m}|{r.dtype}|n{r.matmul_n}{shared}",
                              f"TFLOP/s ({r.dtype} n={r.matmul_n})", w.tflops,
                              _share(floor_of(m, "tflops", r.dtype, r.matmul_n, floors=floors), k), band=band[w.rank]))
            out.append(Figure(w.rank, f"gpu_check|copy_gbps|{m}|{r.copy_bytes}{shared}",
                              f"copy GB/s ({r.copy_bytes} bytes)", w.copy_gbps,
                              _share(floor_of(m, "copy_gbps", r.dtype, copy_bytes=r.copy_bytes, floors=floors), k),
                              band=band[w.rank]))
    elif kind == "link_matrix":
        r = job.link_matrix
        host = {k: w.host for k, w in ranks.items()}
        for x in r.links:
            # A link whose ends' figures disagree rests on one end's word: judged by the peers' rules only.
            if x.a not in ranks or x.b not in ranks or x.wrong or x.gbps <= 0 or x.ends_disagree:
                continue
            where = "same-host" if host[x.a] == host[x.b] else "cross-host"
            if (gpu := _gpu_of(ranks[x.a])) is not None and gpu == _gpu_of(ranks[x.b]):
                where = "same-gpu"  # two workers sharing one GPU: no NVLink path between them, no link floor
            pair = "+".join(sorted({model[x.a], model[x.b]}))
            key = f"link_matrix|gbps|{pair}|{where}|{r.size_bytes}"
            floor = link_floor_of(model[x.a], model[x.b], where == "same-host", r.size_bytes, floors)
            for rank in (x.a, x.b):  # a link is a figure of both its ends
                out.append(Figure(rank, key, f"{where} link {x.a}-{x.b} GB/s ({r.size_bytes} bytes)", x.gbps, floor,
                                  f"{x.a}-{x.b}", min(band[x.a], band[x.b])))
    return out


def _share(floor: Floor | None, k: int) -> Floor | None:
    """A GPU's floor for one of `k` ranks of a check running on it at once."""
    if floor is None or k <= 1:
        return floor
    return replace(floor, value=floor.value / k, source=f"{floor.source}; 1/{k}: {k} ranks of this check share the GPU")


def judge(job: pb.Job, found: Found, models: Mapping[str, str], history: History) -> Judged:
    """The peers' verdicts (`found`) judged again against expectations. Pure: reads `history`."""
    figs = figures(job, models, history.floors)
    below: dict[int, list[str]] = defaultdict(list)  # rank -> what fell below
    seen: dict[int, list[str]] = defaultdict(list)  # rank -> each figure beside its expectation
    judged: set[int] = set()
    low_figures: dict[int, int] = defaultdict(int)
    for f in figs:
        fell = False
        for name, value, why in _yardsticks(f, history):
            judged.add(f.rank)
            ratio = f.value / value if value else 0.0
            limit = f.band * value if name == "history" else value
            line = f"{name}: {f.name} {f.value:.4g} is {ratio:.2f} of {value:.4g} ({why})"
            seen[f.rank].append(line)
            if f.value < limit:
                below[f.rank].append(line)
                fell = True
        low_figures[f.rank] += fell
    for rank in list(below):  # a link is below for both its ends: a worker is, when most of its links are
        links = [f for f in figs if f.rank == rank and f.measured]
        if links and 2 * low_figures[rank] <= len(links):
            del below[rank]
    out: Found = dict(found)
    lone = _without_peers(job, models)
    for rank, (verdict, figure, expected) in found.items():
        if rank in below:
            out[rank] = (pb.UNHEALTHY, figure, "below expectation: " + "; ".join(dict.fromkeys(below[rank]))
                         + f" (judged by it; the peers said {pb.Verdict.Name(verdict)}: {expected})")
        elif rank in seen:
            out[rank] = (verdict, figure, f"peers: {expected}; " + "; ".join(dict.fromkeys(seen[rank])))
        elif rank in lone and verdict == pb.HEALTHY:
            # No peer of its model in this run and nothing to expect: nothing judged it. Not HEALTHY
            # (that would certify it for preflight); not SUSPECT (a reason against it it does not have).
            out[rank] = (pb.VERDICT_UNSPECIFIED, figure, f"not yet judged: no peer of model {lone[rank]!r} in this "
                         f"run, no history of its key (fewer than {MIN_SAMPLES} passing checks) and no shipped "
                         f"floor; {expected}")
    finding_of, findings = _findings(job, below, judged | set(below))
    return Judged(out, finding_of, findings)


def _yardsticks(f: Figure, history: History) -> list[tuple[str, float, str]]:
    """(name, value, why) of each expectation that judges this figure: its history where the key
    has one, and its shipped floor always (a fleet that was slow from its first check has learnt a
    slow history; the floor still says what the hardware does)."""
    out = []
    h = history.median(f.key)
    if h is not None:
        out.append(("history", h[0], f"median of {h[1]} passing checks of {f.key}; below {f.band} x it is below"))
    if f.floor is not None:
        out.append(("shipped floor", f.floor.value, f"{f.floor.model}; {f.floor.source}"))
    return out


def _without_peers(job: pb.Job, models: Mapping[str, str]) -> dict[int, str]:
    """Ranks with no other worker of their registered model in the run: rank -> model."""
    model = {w.rank: models.get(w.worker_id) or "unknown" for w in job.workers}
    count: dict[str, int] = defaultdict(int)
    for m in model.values():
        count[m] += 1
    return {r: m for r, m in model.items() if count[m] == 1}


def _findings(job: pb.Job, below: dict[int, list[str]], judged: set[int]) -> tuple[dict[int, str], list[tuple[str, str]]]:
    """One finding for a run whose judged workers are all below (fleet), or for each host all of
    whose workers are (host): one cause, not N unrelated culprits."""
    if not below:
        return {}, []
    worker = {w.rank: w for w in job.workers}
    kind = job.spec.WhichOneof("kind")
    if len(judged) >= 2 and set(below) == judged:
        hosts = sorted({worker[r].host for r in below if r in worker})
        text = (f"every worker below expectation: {len(below)} of {len(judged)} workers judged by {kind} "
                f"(hosts {', '.join(hosts)}) fell below their expectation alike - a fleet-wide cause "
                f"(driver, firmware, setting, cooling), not {len(below)} culprits")
        return {r: text for r in below}, [(FLEET, text)]
    by_host: dict[str, list[int]] = defaultdict(list)
    for r in judged:
        if r in worker:
            by_host[worker[r].host].append(r)
    finding_of: dict[int, str] = {}
    findings: list[tuple[str, str]] = []
    for host, rs in sorted(by_host.items()):
        if len(rs) >= 2 and all(r in below for r in rs):  # one worker alone is its own verdict
            text = (f"every worker of host {host} below expectation: {len(rs)} of {len(rs)} judged by {kind} - "
                    "a host-wide cause")
            findings.append((HOST, text))
            finding_of.update({r: text for r in rs})
    return finding_of, findings


def learn(job: pb.Job, final: Mapping[int, int], models: Mapping[str, str], history: History) -> None:
    """Feed the history with the figures of workers whose final verdict is HEALTHY, or not yet
    judged (a lone worker's only way to get a yardstick; nothing said it was slow): a figure that
    failed or is suspect never becomes the expectation."""
    ranks_of: dict[tuple[str, str, float], list[int]] = defaultdict(list)  # a link is one figure of two ends
    for f in figures(job, models, history.floors):
        ranks_of[(f.key, f.measured or str(f.rank), f.value)].append(f.rank)
    for (key, _, value), ranks in ranks_of.items():
        if all(final.get(r) in (pb.HEALTHY, pb.VERDICT_UNSPECIFIED) for r in ranks):
            history.learn(key, value)


# ---- the floors as a document an operator exports, edits and gives a coordinator (--floors FILE)

FLOOR_FIGURES = ("tflops", "copy_gbps", "link_gbps")


def floors_doc(floors: tuple[Floor, ...]) -> dict:
    return {"floors": [{"model": f.model, "figure": f.figure, "value": f.value, "source": f.source} for f in floors]}


def floors_from(doc: object, shipped: tuple[Floor, ...] | None = None) -> tuple[Floor, ...]:
    """The shipped floors with an operator's document over them: a row of the same model and figure
    replaces the shipped one, others are added (value 0: no floor for that model). Raises
    InvalidSpec naming the field (floors[3].value) on anything else."""
    shipped = shipped if shipped is not None else SHIPPED
    rows = doc.get("floors") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise InvalidSpec("floors", 'expected {"floors": [{"model", "figure", "value", "source"}, ...]}')
    out = {(f.model, f.figure): f for f in shipped}
    for i, row in enumerate(rows):
        where = f"floors[{i}]"
        if not isinstance(row, dict):
            raise InvalidSpec(where, "expected an object with model, figure, value and source")
        unknown = set(row) - {"model", "figure", "value", "source"}
        if unknown:
            raise InvalidSpec(f"{where}.{sorted(unknown)[0]}", "unknown field")
        model, figure, value, source = row.get("model"), row.get("figure"), row.get("value"), row.get("source", "")
        if not isinstance(model, str) or not model.strip() or len(model) > 128:
            raise InvalidSpec(f"{where}.model", "a device model name (a part of the registered device name), 1-128 characters")
        if figure not in FLOOR_FIGURES:
            raise InvalidSpec(f"{where}.figure", f"one of {', '.join(FLOOR_FIGURES)}, got {str(figure)[:32]!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e7:
            raise InvalidSpec(f"{where}.value", f"a number of {'TFLOP/s' if figure == 'tflops' else 'GB/s'}, 0 or more")
        if not isinstance(source, str) or len(source) > 512:
            raise InvalidSpec(f"{where}.source", "where the figure comes from, at most 512 characters")
        out[(model.strip(), figure)] = Floor(model.strip(), figure, float(value), source or "operator's table")
    return tuple(out.values())
