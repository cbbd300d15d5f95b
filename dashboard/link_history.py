"""The link checks' figures as the bandwidth view shows them, read from the store's finished
link_matrix jobs:

- the link matrix over time for one host (GET /api/v1/trends/links): for each check that measured
  the host, newest first, its links by peer host (the slowest link's bandwidth, its ratio to the
  comparable median, whether the check flagged any): rows bounded by the hosts of a check, not its
  ranks; at most MAX_JOBS checks (those of a month at one an hour fit three times over);
- the fleet's latest link matrix host by host (GET /api/v1/trends/matrix): each host pair's newest
  figures, each link against its expectation (its baseline, the history of its key, its shipped
  floor: coordinator/health/expectations.py), compact for hundreds of hosts, the worst pairs listed.
"""

from __future__ import annotations

from coordinator.health import expectations
from ringleader.v1 import jobs_pb2 as pb

MAX_JOBS = 240
PAGE = 100


def link_matrix_jobs(store, since: float, until: float, most: int = MAX_JOBS):
    """Finished link_matrix jobs created in [since, until), newest first, at most `most`."""
    before, seen = "", 0
    while seen < most:
        page = store.list(states=[pb.SUCCEEDED], op="link_matrix", limit=PAGE, before_id=before)
        for job in page:
            if job.created_at < since:
                return
            if job.created_at < until:
                seen += 1
                yield job
                if seen >= most:
                    return
        if len(page) < PAGE:
            return
        before = page[-1].id


def host_links(job: pb.Job, host: str) -> list[dict]:
    """The host's links in one check, by peer host (the host itself: its links inside): the slowest
    link's GB/s and ratio to the comparable median, how many links, and whether any was flagged."""
    host_of = {w.rank: w.host for w in job.workers}
    mine = {r for r, h in host_of.items() if h == host}
    by_peer: dict[str, dict] = {}
    for link in job.link_matrix.links:
        if link.a not in mine and link.b not in mine:
            continue
        peer = host_of.get(link.b if link.a in mine else link.a, "?")
        p = by_peer.setdefault(peer, {"peer": peer, "gbps": link.gbps, "ratio": link.ratio, "links": 0, "flagged": False})
        p["links"] += 1
        p["flagged"] |= link.flagged
        if link.ratio < p["ratio"]:
            p["gbps"], p["ratio"] = link.gbps, link.ratio
    return [{**p, "gbps": round(p["gbps"], 4), "ratio": round(p["ratio"], 4)} for _, p in sorted(by_peer.items())]


def history(store, host: str, since: float, until: float) -> dict:
    checks = []
    for job in link_matrix_jobs(store, since, until):
        links = host_links(job, host)
        if links:
            checks.append({"job_id": job.id, "at": job.finished_at or job.created_at, "links": links})
    peers = sorted({x["peer"] for c in checks for x in c["links"]}, key=lambda p: (p != host, p))
    return {"host": host, "since": since, "until": until, "peers": peers, "checks": checks}


# ---- the latest link matrix of the fleet, host by host, against expectations ---------------------

MATRIX_JOBS = 400  # checks read for the latest matrix: a 5,000-worker sweep is 157 gangs (sweeper.GANG_MAX)
WORST = 40  # host pairs listed in full, the lowest ratio first
# A link below its baseline's median by at least this much is low: the least drop a baseline ever
# calls low (coordinator/health/baselines.py FLOOR; its threshold is never above 0.9 x the median).
BASELINE_CUT = 0.9
# Where a cell's ratio comes from (the answer's `sources`, by index).
SOURCES = ("baseline", "history", "floor", "peers")


class HistorySnapshot:
    """The expectations' history as a link is judged by it (its medians and floors), copied on
    the coordinator's loop so that the matrix can be worked out on a thread."""

    def __init__(self, history: expectations.History) -> None:
        self.floors = history.floors
        self.medians = tuple((k, history.median(k)) for k in history.keys())
        self._of = dict(self.medians)

    def median(self, key: str) -> tuple[float, int] | None:
        return self._of.get(key)


def link_ratio(link: pb.LinkRow, fig, history) -> tuple[float, float, str, bool]:
    """(ratio, expected GB/s, source, low) of one link against its expectations: its baseline
    (LinkRow.baseline_ratio, when set), the history median of its key and its shipped floor
    (coordinator/health/expectations.py: `fig` is its Figure there, None when it judges none), else
    the median of comparable links in its check (`ratio`). Of several, the one it is furthest below
    (ratio to the line it is low under) is answered: a link slow against its floor stays slow
    whatever a history learnt slow says. A link above every expectation is not low."""
    seen: list[tuple[float, float, float, str]] = []  # (ratio / cut, ratio, expected, source)
    if link.baseline_ratio > 0:
        seen.append((link.baseline_ratio / BASELINE_CUT, link.baseline_ratio, link.gbps / link.baseline_ratio, "baseline"))
    if fig is not None:
        h = history.median(fig.key)
        if h is not None and h[0] > 0:
            seen.append((link.gbps / h[0] / fig.band, link.gbps / h[0], h[0], "history"))
        if fig.floor is not None:
            seen.append((link.gbps / fig.floor.value, link.gbps / fig.floor.value, fig.floor.value, "floor"))
    if not seen:
        peers = link.gbps / link.ratio if link.ratio > 0 else 0.0
        return link.ratio, peers, "peers", link.flagged
    judged, ratio, expected, source = min(seen)
    return ratio, expected, source, judged < 1.0


def check_cells(job: pb.Job, models, history) -> dict[tuple[str, str], dict]:
    """One check's links by host pair (a <= b): the link furthest below its expectation."""
    host_of = {w.rank: w.host for w in job.workers}
    worker_of = {w.rank: w.worker_id for w in job.workers}
    figs = {f.measured: f for f in expectations.figures(job, models, history.floors) if f.measured}
    cells: dict[tuple[str, str], dict] = {}
    for link in job.link_matrix.links:
        if link.a not in host_of or link.b not in host_of or link.gbps <= 0:
            continue
        ratio, expected, source, low = link_ratio(link, figs.get(f"{link.a}-{link.b}"), history)
        a, b = sorted((host_of[link.a], host_of[link.b]))
        cell = cells.get((a, b))
        mine = (not low, ratio)
        if cell is None:
            cell = cells[(a, b)] = {"links": 0, "low": 0, "flagged": 0}
        cell["links"] += 1
        cell["low"] += low
        cell["flagged"] += link.flagged
        if "ratio" not in cell or mine < (not cell["is_low"], cell["ratio"]):
            ends = sorted((link.a, link.b), key=lambda r: host_of[r] != a)
            cell.update(ratio=round(ratio, 4), gbps=round(link.gbps, 4), expected_gbps=round(expected, 4), source=source,
                        is_low=low, ranks=ends, workers=[worker_of[r] for r in ends])
    return cells


def fleet_matrix(store, since: float, until: float, models, history, max_jobs: int = MATRIX_JOBS) -> dict:
    """The latest figures of every host pair the link checks of [since, until) measured: for each
    pair, the newest check that measured it, its slowest link against its expectation
    (`link_ratio`). `models`: worker id -> registered device model; `history`: the expectations'
    history (median(key), floors). Answered compactly for hundreds of hosts: `hosts` by name,
    `cells` as [i, j, GB/s, ratio, source index, low, flagged links, check index], and the WORST
    pairs in full, those below expectation first, then by ratio."""
    seen: dict[tuple[str, str], tuple[dict, int]] = {}
    read: list[dict] = []
    for job in link_matrix_jobs(store, since, until, max_jobs):
        at = job.finished_at or job.created_at
        read.append({"job_id": job.id, "at": at, "size_bytes": job.link_matrix.size_bytes})
        for k, c in check_cells(job, models, history).items():
            # Listed newest first by creation; the newest finished one says (ties: the first listed).
            if k not in seen or at > read[seen[k][1]]["at"]:
                seen[k] = (c, len(read) - 1)
    # Only the checks some pair's figures come from, newest first.
    used = sorted({j for _, j in seen.values()}, key=lambda j: (-read[j]["at"], j))
    renumber = {j: i for i, j in enumerate(used)}
    jobs = [read[j] for j in used]
    seen = {k: (c, renumber[j]) for k, (c, j) in seen.items()}
    hosts = sorted({h for k in seen for h in k})
    index = {h: i for i, h in enumerate(hosts)}
    src = {s: i for i, s in enumerate(SOURCES)}
    cells = [[index[a], index[b], c["gbps"], c["ratio"], src[c["source"]], int(c["is_low"]), c["flagged"], j]
             for (a, b), (c, j) in sorted(seen.items())]
    order = sorted(seen.items(), key=lambda kv: (not kv[1][0]["is_low"], not kv[1][0]["flagged"], kv[1][0]["ratio"]))
    worst = [{"a": a, "b": b, "gbps": c["gbps"], "ratio": c["ratio"], "expected_gbps": c["expected_gbps"],
              "source": c["source"], "low": c["is_low"], "low_links": c["low"], "flagged_links": c["flagged"],
              "links": c["links"], "workers": c["workers"], "ranks": c["ranks"], **jobs[j]}
             for (a, b), (c, j) in order[:WORST] if c["is_low"] or c["flagged"] or c["ratio"] < 1.0]
    newest = max((j["at"] for j in jobs), default=0.0)
    return {"since": since, "until": until, "as_of": newest, "checks": len(jobs), "sources": list(SOURCES),
            "hosts": hosts, "jobs": [j["job_id"] for j in jobs], "job_at": [j["at"] for j in jobs], "cells": cells,
            "low": sum(1 for c, _ in seen.values() if c["is_low"]), "worst": worst}
