"""A month of bandwidth history for a simulated fleet, written through the store's own trend and
baseline methods, with one regression injected: what tests/integration/test_trends_rest.py and
tests/browser/test_trends_view.py load, and what `python bench/trends_history.py` times.

The fleet: `workers` GPUs, 8 per host (5,000: 625 hosts). Every host runs a local all_reduce and
all_gather sweep once a day (sizes 2^20, 2^24, 2^28, 2^30: 8 results), and every pair of hosts
a two-host sweep (2^28, 2^30: 4 results), each at its own hour; busbw is its key's nominal figure
within +-3 %. In the last REGRESSED_DAYS days, one host's local all_reduce at 2^28 runs at 55 %:
its jobs are the only ones stored as jobs (so their pages open), and the only results below their
baselines' thresholds. Baselines: 50 samples of each key's nominal figure (+-1 %).
A fixture and a timing: the tests that load it assert what the views show of it.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from coordinator.health import baselines
from coordinator.store.trends import HOUR_S, TrendPoint
from ringleader.v1 import jobs_pb2 as pb

MODEL = "NVIDIA H100 80GB HBM3"
PER_HOST = 8
NOMINAL = {("all_reduce", 20): 120.0, ("all_reduce", 24): 300.0, ("all_reduce", 28): 420.0, ("all_reduce", 30): 450.0,
           ("all_gather", 20): 100.0, ("all_gather", 24): 260.0, ("all_gather", 28): 380.0, ("all_gather", 30): 400.0}
CROSS = (28, 30)
CROSS_FACTOR = 0.1  # across hosts: a tenth of NVLink's
REGRESSED_DAYS = 3
REGRESSED_RATIO = 0.55


@dataclass
class History:
    points: int
    keys: int
    host: str  # the regressed host
    key: str  # its regressed key
    jobs: tuple[str, ...]  # the regressed jobs (stored as jobs)
    until: float
    flagged_checks: list[str] = field(default_factory=list)  # write_link_checks' flagged checks, when written


def entry(op: str, log2: int, ranks: int, hosts: int) -> pb.BaselineEntry:
    e = pb.BaselineEntry(gpu_model=MODEL, op=op, dtype="bfloat16", size_bucket=1 << log2, ranks=ranks, hosts=hosts,
                         link=baselines.link_kind(hosts), mode="eager")
    e.key = baselines.entry_key(e)
    return e


def regressed_job(job_id: str, host: str, at: float, busbw: float) -> pb.Job:
    job = pb.Job(id=job_id, state=pb.SUCCEEDED, created_at=at - 20, started_at=at - 15, finished_at=at, backend="nccl",
                 spec=pb.JobSpec(world_size=PER_HOST, name="daily sweep",
                                 collective=pb.CollectiveSpec(op="all_reduce", dtype="bfloat16", sizes=[1 << 28])),
                 workers=[pb.WorkerRef(rank=r, worker_id=f"{host}-d{r}", host=host, device="cuda:%d" % r)
                          for r in range(PER_HOST)])
    job.results.add(op="all_reduce", dtype="bfloat16", size_bytes=1 << 28, busbw_gbps=busbw, algbw_gbps=busbw / 1.75)
    return job


def write_month(store, workers: int = 5000, days: int = 30, until: float | None = None, seed: int = 7) -> History:
    """Write the history (see the module docstring) into `store`; the last day ends at `until` (now)."""
    rng = random.Random(seed)
    until = until or time.time()
    since = until - days * 86400
    hosts = [f"sim-h{i:04}" for i in range(workers // PER_HOST)]
    bad_host = hosts[len(hosts) // 2]
    keys = {}
    for (op, log2), gbps in NOMINAL.items():
        keys[(op, log2, 1)] = (entry(op, log2, PER_HOST, 1), gbps)
        if log2 in CROSS:
            keys[(op, log2, 2)] = (entry(op, log2, 2 * PER_HOST, 2), gbps * CROSS_FACTOR)
    for e, gbps in keys.values():
        e.samples.extend(gbps * rng.uniform(0.99, 1.01) for _ in range(baselines.WINDOW))
        baselines.recompute(e)
        store.put_baseline(e)
    bad_key = keys[("all_reduce", 28, 1)][0].key
    n, bad_jobs = 0, []
    for day in range(days):
        for i, host in enumerate(hosts):
            gangs = [((host,), 1)] + ([((host, hosts[i + 1]), 2)] if i % 2 == 0 and i + 1 < len(hosts) else [])
            for gang, span in gangs:
                at = since + day * 86400 + rng.randrange(24) * HOUR_S + rng.uniform(0, HOUR_S - 1)
                job_id = f"{day:02}{i:04}{span}{rng.getrandbits(20):05x}"
                for (op, log2, s), (e, gbps) in keys.items():
                    if s != span:
                        continue
                    busbw = gbps * rng.uniform(0.97, 1.03)
                    if e.key == bad_key and host == bad_host and day >= days - REGRESSED_DAYS:
                        busbw = gbps * REGRESSED_RATIO
                        bad_jobs.append(job_id)
                        store.create(regressed_job(job_id, host, at, busbw))
                    store.add_trend(TrendPoint(key=e.key, gpu_model=MODEL, op=op, link=e.link, at=at, busbw_gbps=busbw,
                                               job_id=job_id, hosts=gang))
                    n += 1
    return History(points=n, keys=len(keys), host=bad_host, key=bad_key, jobs=tuple(bad_jobs), until=until)


LINK_HOSTS, LINK_PER_HOST, LINK_BAD_DAYS = 4, 2, 2


def write_link_checks(store, host: str, days: int = 30, until: float | None = None) -> list[str]:
    """A finished link_matrix check a day over `host` and the three hosts after it (2 workers each):
    12 GB/s inside a host, 5 across; in the last LINK_BAD_DAYS days the links between `host` and the
    next host run at a quarter and are flagged. Returns the flagged checks' ids, newest last."""
    until = until or time.time()
    number = int(host.rsplit("h", 1)[1])
    hosts = [f"sim-h{number + i:04}" for i in range(LINK_HOSTS)]
    ranks = [(h, f"{h}-d{d}") for h in hosts for d in range(LINK_PER_HOST)]
    flagged = []
    for day in range(days):
        at = until - (days - day) * 86400 + 600
        job = pb.Job(id=f"lm{day:02}{number:04}", state=pb.SUCCEEDED, created_at=at - 30, started_at=at - 25, finished_at=at,
                     spec=pb.JobSpec(world_size=len(ranks), link_matrix=pb.LinkMatrixSpec(size_bytes=1 << 20, iters=20)),
                     workers=[pb.WorkerRef(rank=r, worker_id=w, host=h) for r, (h, w) in enumerate(ranks)])
        lm = job.link_matrix
        lm.size_bytes, lm.rounds = 1 << 20, len(ranks) - 1
        bad_day = day >= days - LINK_BAD_DAYS
        for a in range(len(ranks)):
            for b in range(a + 1, len(ranks)):
                same = ranks[a][0] == ranks[b][0]
                slow = bad_day and {ranks[a][0], ranks[b][0]} == {hosts[0], hosts[1]}
                gbps = (12.0 if same else 5.0) * (0.25 if slow else 1.0)
                lm.links.add(a=a, b=b, gbps=gbps, ratio=0.25 if slow else 1.0, flagged=slow, latency_us=20.0)
        lm.median_same_host_gbps, lm.median_cross_host_gbps = 12.0, 5.0
        store.create(job)
        if bad_day:
            flagged.append(job.id)
    return flagged


SWEEP_SIZE = 512 << 10  # the link check's size for a check (dashboard/fleet_api.py)


@dataclass
class LinkSweep:
    jobs: list[str]  # the sweep's check jobs (one per gang), in the order written
    hosts: int
    slow: tuple[str, str]  # the hosts of the slowed link
    slow_ranks: tuple[int, int]  # its ranks in its check
    slow_job: str
    fast: tuple[str, str]  # the hosts of a link 1.4 x its baseline: clean, never listed as slow


def write_fleet_link_sweep(store, workers: int = 5000, until: float | None = None, slow_ratio: float = 0.3,
                           seed: int = 11) -> LinkSweep:
    """The latest link check of a whole fleet of `workers` GPUs (8 per host), as the sweeper runs it:
    one finished link_matrix job per gang (coordinator/health/sweeper.py `gangs`: 4 hosts of 8 at
    most), every link measured, 12 GB/s inside a host and 5 across (+-3 %), each link's ratios to the
    comparable median and to its baseline set as the check leaves them. One cross-host link, in a
    gang a third of the way in, runs at `slow_ratio` and is flagged; one link of another gang runs at
    1.4 x. The jobs finish over the hour before `until`."""
    from coordinator.health import sweeper

    rng = random.Random(seed)
    until = until or time.time()
    infos = [pb.WorkerInfo(worker_id=f"sim-h{h:04}-d{d}", host=f"sim-h{h:04}", backend="nccl",
                           device=pb.Device(type="cuda", index=d, name=MODEL))
             for h in range(workers // PER_HOST) for d in range(PER_HOST)]
    host_of = {w.worker_id: w.host for w in infos}
    gangs = sweeper.gangs(infos)
    slow_gang, fast_gang = len(gangs) // 3, 2 * len(gangs) // 3
    out = LinkSweep(jobs=[], hosts=len({w.host for w in infos}), slow=("", ""), slow_ranks=(0, 0), slow_job="",
                    fast=("", ""))
    for g, ids in enumerate(gangs):
        at = until - 3600 + 3000 * g / len(gangs)
        job = pb.Job(id=f"sweep{g:04}{rng.getrandbits(16):04x}", state=pb.SUCCEEDED, created_at=at - 40,
                     started_at=at - 30, finished_at=at,
                     spec=pb.JobSpec(world_size=len(ids), link_matrix=pb.LinkMatrixSpec(size_bytes=SWEEP_SIZE)),
                     workers=[pb.WorkerRef(rank=r, worker_id=w, host=host_of[w], device=f"cuda:{r % PER_HOST}")
                              for r, w in enumerate(ids)])
        lm = job.link_matrix
        lm.size_bytes, lm.rounds, lm.size_reason = SWEEP_SIZE, len(ids) - 1, "a check's size"
        lm.median_same_host_gbps, lm.median_cross_host_gbps = 12.0, 5.0
        # The slowed link: the gang's first rank and the first rank of its second host.
        second = next((r for r, w in enumerate(ids) if host_of[w] != host_of[ids[0]]), -1)
        gbps = [[-1.0] * len(ids) for _ in ids]
        for a in range(len(ids)):
            for b in range(a + 1, len(ids)):
                nominal = 12.0 if host_of[ids[a]] == host_of[ids[b]] else 5.0
                factor = rng.uniform(0.97, 1.03)
                if g == slow_gang and (a, b) == (0, second):
                    factor = slow_ratio
                    out.slow, out.slow_ranks, out.slow_job = (host_of[ids[a]], host_of[ids[b]]), (a, b), job.id
                elif g == fast_gang and (a, b) == (0, second):
                    factor = 1.4
                    out.fast = (host_of[ids[a]], host_of[ids[b]])
                lm.links.add(a=a, b=b, gbps=nominal * factor, gbps_a=nominal * factor, gbps_b=nominal * factor,
                             ratio=factor, baseline_ratio=factor, flagged=factor < 0.5, latency_us=20.0,
                             size_bytes=SWEEP_SIZE, round_trips=20)
                gbps[a][b] = gbps[b][a] = nominal * factor
        lm.matrix.extend(pb.P2PMatrixRow(gbps=row) for row in gbps)
        store.create(job)
        out.jobs.append(job.id)
    return out


def main() -> None:
    import argparse
    import json
    import tempfile
    from pathlib import Path

    from coordinator.store.sqlite import SqliteJobStore
    from coordinator.store.trends import TrendQuery

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=5000)
    ap.add_argument("--days", type=int, default=30)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteJobStore(Path(tmp) / "jobs.db")
        store.defer_commits(lambda: None)
        t0 = time.perf_counter()
        history = write_month(store, a.workers, a.days)
        store.commit()
        written = time.perf_counter() - t0
        t0 = time.perf_counter()
        buckets = store.trend(TrendQuery(since=history.until - a.days * 86400, until=history.until, step_s=3 * HOUR_S))
        print(json.dumps({"points": history.points, "keys": history.keys, "write_s": round(written, 2),
                          "query_s": round(time.perf_counter() - t0, 4), "buckets": len(buckets),
                          "db_mb": round((Path(tmp) / "jobs.db").stat().st_size / 1e6, 1)}, indent=1))
        store.close()


if __name__ == "__main__":
    main()
