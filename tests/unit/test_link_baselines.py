"""Each link of a link check against its own baseline (coordinator/health/link_baselines.py): the
row's ratio to its link's baseline, a step down raised on the second low check and never learnt,
disputed figures kept out, and the entries exported and imported like any other."""

from __future__ import annotations

import random

from coordinator.health import baselines as bl
from coordinator.health import link_baselines as lb
from coordinator.store.memory import MemoryJobStore
from ringleader.v1 import jobs_pb2 as pb

WORKERS = [pb.WorkerRef(worker_id=f"w{r}", host=f"h{r}", rank=r) for r in range(3)]
MODELS = ["cpu"] * 3


def result(gbps: dict[tuple[int, int], float], disputed: tuple = ()) -> pb.LinkMatrixResult:
    return pb.LinkMatrixResult(links=[pb.LinkRow(a=a, b=b, gbps=g, size_bytes=1 << 20, ends_disagree=(a, b) in disputed)
                                      for (a, b), g in gbps.items()])


def clean(rng: random.Random) -> dict[tuple[int, int], float]:
    return {(0, 1): rng.uniform(3.6, 4.4), (0, 2): rng.uniform(3.6, 4.4), (1, 2): rng.uniform(3.6, 4.4)}


def test_a_links_step_is_raised_on_its_second_low_check_and_its_baseline_stays():
    rng, store = random.Random(7), MemoryJobStore()
    for _ in range(bl.SETTLED + 5):  # clean checks: no regression, every link learns
        r = result(clean(rng))
        assert lb.record(store, r, WORKERS, MODELS, at=1.0) == []
    before = {e.algo: e.median_busbw_gbps for e in store.baselines()}
    assert set(before) == {"w0~w1", "w0~w2", "w1~w2"} and all(3.6 < m < 4.4 for m in before.values())
    r = result(clean(rng))
    lb.record(store, r, WORKERS, MODELS, at=2.0)
    assert all(0.8 < x.baseline_ratio < 1.25 for x in r.links)

    raised = []
    for check in range(3):  # w2's host slowed: its two links at 200 Mbit/s (0.025 GB/s)
        figures = clean(rng)
        figures[(0, 2)] = figures[(1, 2)] = 0.025
        r = result(figures)
        raised.append(lb.record(store, r, WORKERS, MODELS, at=3.0 + check))
        assert [round(x.baseline_ratio, 2) for x in r.links if 2 in (x.a, x.b)] == [0.01, 0.01]
    assert raised[0] == [] and {g.key.rsplit("|", 1)[-1] for g in raised[1]} == {"w0~w2", "w1~w2"}
    assert "link w0~w2 0.025 GB/s is 0.01 of its baseline" in raised[1][0].describe()
    after = {e.algo: e.median_busbw_gbps for e in store.baselines()}
    assert all(abs(after[k] / before[k] - 1) < 0.10 for k in before), (before, after)


def test_disputed_or_wrong_links_are_annotated_but_feed_nothing():
    store = MemoryJobStore()
    r = result({(0, 1): 4.0, (0, 2): 4.0}, disputed=((0, 2),))
    r.links[0].wrong = 3
    lb.record(store, r, WORKERS, MODELS, at=1.0)
    assert store.baselines() == []


def test_link_entries_export_and_import_as_any_baseline():
    store = MemoryJobStore()
    for _ in range(6):
        lb.record(store, result({(0, 1): 4.0}), WORKERS, MODELS, at=1.0)
    [e] = store.baselines()
    assert e.op == bl.LINK_OP and e.link == "cross" and e.ranks == 2 and e.hosts == 2
    again = bl.validated(e)
    assert again.key == e.key and again.median_busbw_gbps == 4.0


def test_a_long_or_odd_worker_id_makes_a_valid_key():
    name = lb.link_name("a|" + "x" * 80, "b")
    assert len(name) <= bl.TEXT_LIMITS["algo"] and "|" not in name
    assert lb.link_name("w2", "w1") == "w1~w2"
