"""The coordinator's assembly of a check (coordinator/health/assemble.py) from each rank's own
evidence: what a rank says of a link it is not an end of is dropped, a link only one end reported
has no figure, and a rank that reported nothing is suspect, never judged on its peers' word."""

from __future__ import annotations

from coordinator.health import assemble, verdicts
from ringleader import roundrobin
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

N = 4
SPEC = pb.JobSpec(world_size=N, link_matrix=pb.LinkMatrixSpec(size_bytes=1 << 20, iters=20, warmup=2))
REFS = [pb.WorkerRef(worker_id=f"w{r}", rank=r, host="h1", device="cpu:0") for r in range(N)]
LINKS = [(a, b, r) for r, pairs in enumerate(roundrobin.rounds(N)) for a, b in pairs]


def _evidence(us=lambda k, rank: 100.0 + k, extra=None) -> dict:
    """Every rank's own ends of its links in one pass (`extra`: more ends a rank adds)."""
    out = {}
    for rank in range(N):
        ends = [wpb.H49eLinkEnd(link=k, size_bytes=1 << 20, fastest_us=us(k, rank), total_us=20 * us(k, rank))
                for k, (a, b, _) in enumerate(LINKS) if rank in (a, b)]
        ends += (extra or {}).get(rank, [])
        out[rank] = wpb.H49eLinkEvidence(size_reason="given", passes=[wpb.H49eLinkPass(iters=20, ends=ends)])
    return out


def _job(result: pb.LinkMatrixResult) -> pb.Job:
    return pb.Job(id="j", state=pb.SUCCEEDED, spec=SPEC, workers=REFS, link_matrix=result)


def test_a_ranks_word_on_links_it_is_not_an_end_of_is_dropped():
    honest = assemble.link_matrix(SPEC, REFS, ["cpu"] * N, _evidence())
    forged = {0: [wpb.H49eLinkEnd(link=k, size_bytes=1 << 20, fastest_us=1e6, total_us=2e7, wrong=5)
                  for k, (a, b, _) in enumerate(LINKS) if 0 not in (a, b)]}
    got = assemble.link_matrix(SPEC, REFS, ["cpu"] * N, _evidence(extra=forged))
    assert got == honest and not got.h49e_gaps
    assert len(got.links) == 6 and not any(x.flagged or x.ends_disagree or x.wrong for x in got.links)
    assert set(v.verdict for v in verdicts.of_job(_job(got)).values()) == {pb.HEALTHY}


def test_a_rank_without_evidence_is_suspect_and_its_links_have_no_figure():
    evidence = _evidence(us=lambda k, rank: 1e5 if 3 in LINKS[k][:2] else 100.0)  # its peers see its links slow
    del evidence[3]
    got = assemble.link_matrix(SPEC, REFS, ["cpu"] * N, evidence)
    assert [(g.rank, g.reason.split(":")[0]) for g in got.h49e_gaps] == [(3, "no evidence")]
    for x in got.links:
        assert x.ends_disagree == (3 in (x.a, x.b)) and not x.flagged
    found = verdicts.of_job(_job(got))
    assert {w: v.verdict for w, v in found.items()} == {"w0": pb.HEALTHY, "w1": pb.HEALTHY, "w2": pb.HEALTHY,
                                                       "w3": pb.SUSPECT}


def test_ends_that_report_different_sizes_give_their_link_no_figure():
    evidence = _evidence()
    k = next(k for k, (a, b, _) in enumerate(LINKS) if (a, b) == (0, 1))
    next(e for e in evidence[1].passes[0].ends if e.link == k).size_bytes = 1 << 30  # to look 1000x faster
    got = assemble.link_matrix(SPEC, REFS, ["cpu"] * N, evidence)
    assert [x.ends_disagree for x in got.links] == [i == k for i in range(len(LINKS))]
