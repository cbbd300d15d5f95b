"""The link matrix over time for one host (GET /api/v1/trends/links): for each finished link_matrix
check that measured the host, newest first, its links by peer host (the slowest link's bandwidth,
its ratio to the comparable median, whether the check flagged any): rows bounded by the hosts of a
check, not its ranks. Read from the store's finished link_matrix
jobs, at most MAX_JOBS of them (the checks of a month at one an hour fit three times over)."""

from __future__ import annotations

from ringleader.v1 import jobs_pb2 as pb

MAX_JOBS = 240
PAGE = 100


def link_matrix_jobs(store, since: float, until: float):
    """Finished link_matrix jobs created in [since, until), newest first, at most MAX_JOBS."""
    before, seen = "", 0
    while seen < MAX_JOBS:
        page = store.list(states=[pb.SUCCEEDED], op="link_matrix", limit=PAGE, before_id=before)
        for job in page:
            if job.created_at < since:
                return
            if job.created_at < until:
                seen += 1
                yield job
                if seen >= MAX_JOBS:
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
