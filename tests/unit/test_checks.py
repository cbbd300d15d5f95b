"""The checks' pure parts: the round-robin schedule, the specs' limits, and the results built
from measured figures (flags against the median of comparable peers)."""

from __future__ import annotations

import itertools
import random

import pytest

from ringleader import checks, jobspec, roundrobin
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb
from ringleader.checkmath import flags
from ringleader.checkmath import links as link_matrix
from ringleader.checkmath.sdc import sdc_result
from ringleader.checkmath import gpu as gpu_math
from coordinator.health import verdicts
from worker.checks import gpu_check, peers


@pytest.mark.parametrize("n", range(2, 18))
def test_round_robin_meets_every_pair_once_in_disjoint_rounds(n):
    schedule = roundrobin.rounds(n)
    assert len(schedule) == roundrobin.round_count(n) == (n - 1 if n % 2 == 0 else n)
    flat = [p for r in schedule for p in r]
    assert sorted(flat) == list(itertools.combinations(range(n), 2))
    for r in schedule:
        ranks = [x for p in r for x in p]
        assert len(ranks) == len(set(ranks)) and len(r) == n // 2
    for k, r in enumerate(schedule):
        for a, b in r:
            assert roundrobin.partner(schedule, k, a) == b and roundrobin.partner(schedule, k, b) == a


def test_round_robin_odd_rank_sits_out_and_bad_size_is_refused():
    assert roundrobin.partner(roundrobin.rounds(3), 0, next(
        x for x in range(3) if all(x not in p for p in roundrobin.rounds(3)[0]))) is None
    with pytest.raises(ValueError, match="world_size"):
        roundrobin.rounds(1)


def _spec(n=4, **kind) -> pb.JobSpec:
    return pb.JobSpec(world_size=n, **kind)


def test_link_matrix_defaults_and_limits():
    v = jobspec.normalize(_spec(link_matrix=pb.LinkMatrixSpec()))
    s = v.spec.link_matrix
    # size 0: the runner chooses by link kind (worker/checks/link_sizes.py); room for the largest.
    assert (s.size_bytes, s.iters, s.warmup) == (0, 20, 3)
    assert v.progress_total == 3 and len(v.pairs) == 6 and v.needs_bytes == 2 * checks.LINK_AUTO_MAX_BYTES
    assert jobspec.normalize(_spec(link_matrix=pb.LinkMatrixSpec(warmup=0))).spec.link_matrix.warmup == 0
    assert jobspec.normalize(_spec(link_matrix=pb.LinkMatrixSpec(size_bytes=1 << 30))).sizes == (1 << 30,)
    for spec, field in [(_spec(link_matrix=pb.LinkMatrixSpec(size_bytes=(1 << 30) + 1)), "link_matrix.size_bytes"),
                        (_spec(link_matrix=pb.LinkMatrixSpec(iters=10_001)), "link_matrix.iters"),
                        (_spec(link_matrix=pb.LinkMatrixSpec(warmup=10_001)), "link_matrix.warmup"),
                        (_spec(1, link_matrix=pb.LinkMatrixSpec()), "world_size"),
                        (_spec(513, link_matrix=pb.LinkMatrixSpec()), "world_size")]:
        with pytest.raises(InvalidSpec) as e:
            jobspec.normalize(spec)
        assert e.value.field == field
    assert jobspec.normalize(_spec(512, link_matrix=pb.LinkMatrixSpec())).progress_total == 511


def test_gpu_check_defaults_and_limits():
    v = jobspec.normalize(_spec(1, gpu_check=pb.GpuCheckSpec()))
    assert v.spec.gpu_check.iters == 10 and v.spec.gpu_check.matmul_n == 0  # the device picks n
    assert v.needs_bytes == 3 * 8192 * 8192 * 2 + 2 * (1 << 30)
    assert gpu_math.resolved(v.spec.gpu_check, "cuda") == (8192, "bfloat16", 1 << 30)
    assert gpu_math.resolved(v.spec.gpu_check, "cpu") == (512, "float32", 512 << 10)
    ok = pb.GpuCheckSpec(matmul_n=64, dtype="float16", copy_bytes=16 << 30, iters=1000)
    assert jobspec.normalize(_spec(gpu_check=ok)).spec.gpu_check.matmul_n == 64
    for bad, field in [(pb.GpuCheckSpec(matmul_n=63), "matmul_n"), (pb.GpuCheckSpec(matmul_n=32769), "matmul_n"),
                       (pb.GpuCheckSpec(dtype="int8"), "dtype"), (pb.GpuCheckSpec(copy_bytes=(16 << 30) + 1), "copy_bytes"),
                       (pb.GpuCheckSpec(iters=1001), "iters")]:
        with pytest.raises(InvalidSpec) as e:
            jobspec.normalize(_spec(gpu_check=bad))
        assert e.value.field == f"gpu_check.{field}"


def test_sdc_check_defaults_and_limits():
    assert jobspec.normalize(_spec(sdc_check=pb.SdcCheckSpec())).spec.sdc_check.rounds == 4
    assert jobspec.normalize(_spec(1024, sdc_check=pb.SdcCheckSpec(rounds=64))).progress_total == 64
    for spec, field in [(_spec(sdc_check=pb.SdcCheckSpec(rounds=65)), "sdc_check.rounds"),
                        (_spec(1025, sdc_check=pb.SdcCheckSpec()), "world_size")]:
        with pytest.raises(InvalidSpec) as e:
            jobspec.normalize(spec)
        assert e.value.field == field


def _links(hosts, gbps):
    """Rows for every pair of len(hosts) ranks; gbps(a, b) gives each link's figure."""
    n = len(hosts)
    return [dict(a=a, b=b, round=0, latency_us=1.0, gbps=gbps(a, b), wrong=0)
            for a in range(n) for b in range(a + 1, n)]


def test_link_result_compares_same_host_and_cross_host_links_apart():
    hosts = ["h0", "h0", "h1", "h1"]
    # Same-host links 10x faster than cross-host ones: neither kind is flagged against the other.
    rows = _links(hosts, lambda a, b: 10.0 if hosts[a] == hosts[b] else 1.0)
    r = link_matrix.link_result(rows, hosts, 1 << 20, 3)
    assert (r.median_same_host_gbps, r.median_cross_host_gbps) == (10.0, 1.0)
    assert not any(x.flagged for x in r.links) and all(x.ratio == 1.0 for x in r.links)


def test_link_result_flags_slow_and_corrupting_links():
    hosts = [f"h{i}" for i in range(6)]
    rows = _links(hosts, lambda a, b: 0.05 if 3 in (a, b) else 1.0)
    rows[0]["wrong"] = 2  # (0, 1): fast but corrupting
    r = link_matrix.link_result(rows, hosts, 1 << 20, 5)
    assert sorted((x.a, x.b) for x in r.links if x.flagged) == [(0, 1), (0, 3), (1, 3), (2, 3), (3, 4), (3, 5)]
    assert r.flag_cross_host_gbps == pytest.approx(0.7)  # identical clean links: the floor, 0.3 of the median


def test_link_flags_are_a_multiple_of_the_noise_of_comparable_links():
    hosts = [f"h{i}" for i in range(8)]
    # Clean links spread 0.8-1.2 (per-rank medians MAD about 0.05): a link at half is named...
    noisy = lambda a, b: 0.8 + 0.4 * ((a * 7 + b * 3) % 5) / 4  # noqa: E731
    half = link_matrix.link_result(_links(hosts, lambda a, b: 0.5 if 5 in (a, b) else noisy(a, b)), hosts, 8, 7)
    assert sorted((x.a, x.b) for x in half.links if x.flagged) == [(a, b) for a in range(8) for b in range(a + 1, 8)
                                                                    if 5 in (a, b)]
    assert not any(x.flagged for x in link_matrix.link_result(_links(hosts, noisy), hosts, 8, 7).links)
    # ...while under a wide spread (a loaded bed) the band widens, never below 0.25 of the median.
    assert flags.bound([0.3, 0.5, 1.0, 1.0, 1.5, 1.7]) == pytest.approx(0.25)
    assert flags.bound([0.9, 1.0, 1.0, 1.1]) == pytest.approx(0.7) and flags.bound([]) == 0.0
    assert flags.bound([1.0, 0.5]) == pytest.approx(0.525)  # two: the floor alone, so the slower half is flagged


def test_a_pass_too_noisy_to_judge_a_2x_slower_link_is_followed_by_another_whose_best_names_it():
    """Waiting for a CPU only slows a round trip: in each pass some ranks are starved (each of their
    links slowed to 0.2-0.9), every link a little (0.85-1), and host 5's links run at half. The
    first pass's band falls so low that no link of host 5 is flagged; the best of two names them all."""
    hosts = [f"h{i}" for i in range(8)]
    pairs = [(a, b) for a in range(8) for b in range(a + 1, 8)]
    draw = random.Random(3)  # a draw where the first pass misses (about 1 in 5 of this model's do)

    def measured() -> list[dict]:
        starved = {r: draw.uniform(0.2, 0.9) for r in range(8) if draw.random() < 0.3}
        return [dict(a=a, b=b, round=0, latency_us=1.0, wrong=0,
                     gbps=(0.5 if 5 in (a, b) else 1.0) * min(starved.get(a, 1.0), starved.get(b, 1.0))
                     * draw.uniform(0.85, 1.0)) for a, b in pairs]

    first, second = measured(), measured()
    one = link_matrix.link_result(first, hosts, 8, 7)
    assert link_matrix._noisy(one) and sum(x.flagged for x in one.links if 5 in (x.a, x.b)) < 4
    best = link_matrix.link_result([link_matrix._best(x, y) for x, y in zip(first, second)], hosts, 8, 7)
    assert sorted((x.a, x.b) for x in best.links if x.flagged) == [p for p in pairs if 5 in p]
    # Identical clean links, or a slow host among them: the floor sets the band; no second pass.
    assert not link_matrix._noisy(link_matrix.link_result(_links(hosts, lambda a, b: 0.5 if 5 in (a, b) else 1.0),
                                                          hosts, 8, 7))


def test_a_link_whose_ends_disagree_is_not_judged_on_its_figure():
    hosts = [f"h{i}" for i in range(4)]
    rows = _links(hosts, lambda a, b: 1.0)
    rows[0].update(gbps=0.01, ends_disagree=True)  # one end says 100x slower than the other
    r = link_matrix.link_result(rows, hosts, 8, 3)
    assert not any(x.flagged for x in r.links) and r.links[0].ends_disagree


def _honest(figures, n=8192, nbytes=1 << 30, iters=10, seen=None):
    """GPU check reports of ranks that each had a turn of their own, which every clock saw last
    as long as the ranks' figures claim (or `seen` says)."""
    seen = seen or [gpu_math.claimed_s(t, c, n, nbytes, iters) for t, c in figures]
    return [(r, (t, c, 0), seen) for r, (t, c) in enumerate(figures)]


def test_gpu_result_compares_peers_of_the_same_model_only():
    models = ["H200", "H200", "H200", "A100"]
    r = gpu_math.gpu_result(models, _honest([(800.0, 4000.0), (790.0, 4100.0), (390.0, 4000.0), (300.0, 1500.0)]),
                             8192, "bfloat16", 1 << 30, 10)
    assert [w.flagged for w in r.workers] == [False, False, True, False]  # a lone A100: no peers
    assert r.workers[2].tflops_ratio == pytest.approx(390 / 790)
    assert r.workers[3].tflops_ratio == 1.0
    slow_copy = gpu_math.gpu_result(models[:3], _honest([(800.0, 4000.0), (800.0, 1999.0), (800.0, 4000.0)], 8, 8),
                                     8, "x", 8, 10)
    assert [w.flagged for w in slow_copy.workers] == [False, True, False]


def test_a_cpu_worker_s_band_has_a_wider_floor():
    # Four clean CPU workers whose copies read alike but one, at 0.66 of the median: the host's
    # noise (a loaded VM's shared memory bus), not a slow device. Flagged under a GPU's floor
    # (0.7), not under a CPU's (0.6); a copy at half its peers' is flagged under both.
    n, nbytes, iters = 512, 512 << 10, 20
    for copy, flagged_gpu, flagged_cpu in ((33.0, True, False), (25.0, True, True)):
        reports = _honest([(0.1, 50.0), (0.1, copy), (0.1, 51.0), (0.1, 49.0)], n, nbytes, iters)
        for floor, flagged in ((flags.FLOOR, flagged_gpu), (gpu_math.FLOOR_CPU, flagged_cpu)):
            r = gpu_math.gpu_result(["cpu"] * 4, reports, n, "float32", nbytes, iters, gpu_math.ALLOW_CPU_S, 1, floor)
            assert [w.flagged for w in r.workers] == [False, flagged, False, False], (copy, floor)


def test_gpu_figures_their_turn_cannot_explain_are_refused():
    figures = [(800.0, 4000.0), (800.0, 4000.0), (800.0, 4000.0)]
    seen = [gpu_math.claimed_s(800.0, 4000.0, 8192, 1 << 30, 10) * k for k in (1.2, 8.0, 1.1)]
    r = gpu_math.gpu_result(["H100"] * 3, _honest(figures, seen=seen), 8192, "bfloat16", 1 << 30, 10)
    # Rank 1 claims what rank 0 does, but its turn took 8x: it is judged on what the clocks saw,
    # at the pace the other turns ran against their claims (1.2 and 1.1: 1.15).
    assert [w.refused for w in r.workers] == [False, True, False]
    assert r.workers[1].tflops == pytest.approx(800.0 * 1.15 / 8) and [w.flagged for w in r.workers] == [False, True, False]
    # A busy host stretches every turn 6x (CPU workers claim CPU time): nobody is refused; a
    # rank whose turn ran 8x longer than that still is, and is judged at an eighth.
    busy = [gpu_math.claimed_s(800.0, 4000.0, 8192, 1 << 30, 10) * k for k in (6.0, 6.2, 5.8, 48.0)]
    r = gpu_math.gpu_result(["H100"] * 4, _honest(figures + [(800.0, 4000.0)], seen=busy), 8192, "bfloat16", 1 << 30, 10)
    assert [w.refused for w in r.workers] == [False, False, False, True]
    assert r.workers[3].tflops == pytest.approx(100.0) and [w.flagged for w in r.workers] == [False, False, False, True]
    # Two ranks in one turn: the slowest claim must explain it; the turn's other rank is not named.
    turn = [1.5 * gpu_math.claimed_s(80.0, 400.0, 8192, 1 << 30, 1)]
    shared = [(0, (800.0, 4000.0, 0), turn), (0, (80.0, 400.0, 0), turn), (0, (800.0, 4000.0, 0), turn)]
    ok = gpu_math.gpu_result(["H100"] * 3, shared, 8192, "bfloat16", 1 << 30, 1)
    assert not any(w.refused for w in ok.workers) and [w.flagged for w in ok.workers] == [False, True, False]
    # Unexplained with two in the turn: both refused, neither judged on it (suspect, not failed).
    seen = [10 * turn[0], 0.06]
    both = [(0, (800.0, 4000.0, 0), seen), (0, (800.0, 4000.0, 0), seen), (1, (800.0, 4000.0, 0), seen)]
    r2 = gpu_math.gpu_result(["H100"] * 3, both, 8192, "bfloat16", 1 << 30, 1)
    assert [w.refused for w in r2.workers] == [True, True, False] and not any(w.flagged for w in r2.workers)


def test_a_rank_low_in_one_series_only_is_not_flagged_by_the_best_of_both():
    figures = [(800.0, 4000.0), (400.0, 4000.0), (790.0, 4100.0)]  # rank 1 at half, the first time
    first = _honest(figures)
    assert [w.flagged for w in gpu_math.gpu_result(["H100"] * 3, first, 8192, "bfloat16", 1 << 30, 10).workers] == \
        [False, True, False]
    again = _honest([(800.0, 4000.0), (795.0, 4000.0), (790.0, 4100.0)])
    both = gpu_check.merged(first, again)
    assert both[1][1] == (795.0, 4000.0, 0) and both[1][2] == [a + b for a, b in zip(first[1][2], again[1][2])]
    r = gpu_math.gpu_result(["H100"] * 3, both, 8192, "bfloat16", 1 << 30, 10, series=2)
    assert not any(w.flagged or w.refused for w in r.workers) and r.series == 2
    # A device that is slow reads low in both series, and is flagged on the best of them.
    still = gpu_check.merged(first, _honest(figures))
    assert [w.flagged for w in gpu_math.gpu_result(["H100"] * 3, still, 8192, "bfloat16", 1 << 30, 10,
                                                    series=2).workers] == [False, True, False]


def _sdc(*ranks):
    """(model, checksum) or (model, checksum, reduce wrong, wrong per sender) per rank."""
    n = len(ranks)
    return sdc_result([r if len(r) == 4 else (*r, 0, [0] * n) for r in ranks])


def test_sdc_result_names_the_odd_one_out_by_model():
    r = _sdc(("m", "aa"), ("m", "aa"), ("m", "bb"), ("m", "aa", 3, [0, 0, 0, 0]))
    # Rank 3's wrong sum is what it received: it names no sender and is not flagged for it.
    assert [w.flagged for w in r.workers] == [False, False, True, False] and r.majority_checksum == "aa"
    tie = _sdc(("m", "aa"), ("m", "bb"))
    assert not any(w.flagged for w in tie.workers) and tie.majority_checksum == ""
    two_models = _sdc(("m", "aa"), ("m", "aa"), ("k", "cc"))
    assert not any(w.flagged for w in two_models.workers)


def test_the_sender_of_wrong_data_is_named_by_its_receivers_never_a_receiver():
    # Rank 2 corrupted its share: every receiver saw its slice wrong, and the sum.
    r = _sdc(("m", "aa", 1, [0, 0, 5, 0]), ("m", "aa", 1, [0, 0, 5, 0]), ("m", "aa", 1, [0, 0, 0, 0]),
             ("m", "aa", 1, [0, 0, 5, 0]))
    assert [w.named_by for w in r.workers] == [0, 0, 3, 0] and [w.flagged for w in r.workers] == [False, False, True, False]
    # One liar accusing rank 1: a minority of rank 1's receivers, so nobody is flagged.
    liar = _sdc(("m", "aa", 0, [0, 9, 0, 0]), ("m", "aa"), ("m", "aa"), ("m", "aa"))
    assert liar.workers[1].named_by == 1 and not any(w.flagged for w in liar.workers)
    # Two ranks: the only receiver's word cannot name the only sender.
    pair = _sdc(("m", "aa", 1, [0, 5]), ("m", "aa", 1, [0, 0]))
    assert not any(w.flagged for w in pair.workers)


def test_ranks_sharing_a_device_take_turns():
    ps = [peers.Peer("h0", "cpu", "h0/cpu"), peers.Peer("h0", "cpu", "h0/cpu"), peers.Peer("h1", "cpu", "h1/cpu")]
    assert [peers.turns(ps, r) for r in range(3)] == [(0, 2), (1, 2), (0, 2)]


def test_flagged_links_are_measured_again_in_their_rounds_and_judged_against_their_round_mates():
    """Host 5's links run at half; clean link (1, 2) is slow in the first pass only. Then the bed
    slows to half (a fresh group's first seconds ran fast on the namespace bed), and a link alone
    reads lower still (0.6x). The passes after the first measure whole rounds, and each flagged
    link is judged against its round-mates of the same pass: host 5 stays flagged, (1, 2) is
    cleared, and the result keeps the first pass's median."""
    hosts = [f"h{i}" for i in range(8)]
    links = [(a, b, r) for r, pairs in enumerate(roundrobin.rounds(8)) for a, b in pairs]
    calls = []

    def measure(spec, batches, box_s=None, check=True):
        calls.append((spec.iters, [sorted(b) for b in batches], box_s))
        rows = [dict(a=a, b=b, round=r, latency_us=1.0, gbps=0.0, wrong=0, ends_disagree=True) for a, b, r in links]
        for batch in batches:
            for k in batch:
                a, b, _ = links[k]
                first = len(calls) == 1
                clean = 1.0 + 0.02 * ((a + b) % 3)
                gbps = (0.5 * clean if 5 in (a, b) else 0.5 if (a, b) == (1, 2) and first else clean) * (1.0 if first else 0.5)
                rows[k].update(gbps=gbps * (0.6 if len(batch) == 1 else 1.0), ends_disagree=False)
        return rows

    def judge(rows, reference=None, slow=None):
        return link_matrix.link_result(rows, hosts, 8, 7, "given", reference, slow)

    result = link_matrix.passes(pb.LinkMatrixSpec(iters=20, warmup=2), links, hosts, 7, measure, judge)
    assert sorted((x.a, x.b) for x in result.links if x.flagged) == sorted((a, b) for a, b, _ in links if 5 in (a, b))
    first_rounds = calls[0][1]
    assert [c[0] for c in calls] == [20, 60, 60] and all(c[1] == first_rounds for c in calls[1:])  # whole rounds, 3x
    assert [c[2] for c in calls] == [None, link_matrix.AGAIN_BOX_S, link_matrix.AGAIN_BOX_S]  # a shorter box past the first
    assert result.median_cross_host_gbps == pytest.approx(1.0, abs=0.05)  # the first pass's, held


def test_a_dispute_stands_only_when_the_ends_disagree_again():
    """Rank 3 lies about every end it times (its links disagree in every pass); link (0, 1) read
    apart once, in the first pass (an end that waited for a CPU). The rounds of disputed links are
    timed again: (0, 1) agrees and keeps the figures both ends agree on, rank 3's stay disputed,
    and no link is flagged on a disputed figure."""
    hosts = [f"h{i}" for i in range(8)]
    links = [(a, b, r) for r, pairs in enumerate(roundrobin.rounds(8)) for a, b in pairs]
    calls = []

    def measure(spec, batches, box_s=None, check=True):
        calls.append(sorted(k for b in batches for k in b))
        rows = [dict(a=a, b=b, round=r, latency_us=1.0, gbps=0.0, wrong=0, ends_disagree=True) for a, b, r in links]
        for k in (k for b in batches for k in b):
            a, b, _ = links[k]
            noise = (a, b) == (0, 1) and len(calls) == 1
            rows[k].update(gbps=0.2 if noise else 1.0 + 0.02 * ((a + b) % 3), ends_disagree=noise or 3 in (a, b))
        return rows

    def judge(rows, reference=None, slow=None):
        return link_matrix.link_result(rows, hosts, 8, 7, "given", reference, slow)

    result = link_matrix.passes(pb.LinkMatrixSpec(iters=20, warmup=2), links, hosts, 7, measure, judge)
    disputed = sorted((x.a, x.b) for x in result.links if x.ends_disagree)
    assert disputed == sorted((a, b) for a, b, _ in links if 3 in (a, b))
    assert not any(x.flagged for x in result.links)
    settled = next(x for x in result.links if (x.a, x.b) == (0, 1))
    assert settled.gbps == pytest.approx(1.02) and not settled.ends_disagree
    assert len(calls) == 1 + link_matrix.AGAIN  # rank 3 has a link in every round: all timed again
    assert verdicts.of_job(_job_of(result, hosts))["w3"].verdict == pb.SUSPECT


def _job_of(result: pb.LinkMatrixResult, hosts: list[str]) -> pb.Job:
    job = pb.Job(id="j", state=pb.SUCCEEDED)
    job.spec.link_matrix.SetInParent()
    job.link_matrix.CopyFrom(result)
    for r, h in enumerate(hosts):
        job.workers.add(worker_id=f"w{r}", rank=r, host=h)
    return job


def test_a_link_far_below_its_peers_sits_out_the_noisy_passes():
    """Host 5's links at 0.03 of the others' (200 Mbit/s against 1.8 GB/s on the namespace bed), the
    other links noisy enough that the first pass's band is wider than the floor's. Host 5's links
    are flagged whatever the band, so the noisy passes measure every other link and leave them out
    (a slow link holds its round for its time box); the two passes over their rounds, without the
    byte check, keep them flagged."""
    hosts = [f"h{i}" for i in range(8)]
    links = [(a, b, r) for r, pairs in enumerate(roundrobin.rounds(8)) for a, b in pairs]
    draw, calls = random.Random(7), []  # a first pass too noisy to judge a 2x slower link

    def measure(spec, batches, box_s=None, check=True):
        calls.append(([k for b in batches for k in b], check))
        rows = [dict(a=a, b=b, round=r, latency_us=1.0, gbps=0.0, wrong=0, ends_disagree=True) for a, b, r in links]
        starved = {r: draw.uniform(0.3, 0.9) for r in range(8) if draw.random() < 0.4}  # ranks waiting for a CPU
        for k in (k for b in batches for k in b):
            a, b, _ = links[k]
            gbps = 0.03 if 5 in (a, b) else min(starved.get(a, 1.0), starved.get(b, 1.0)) * draw.uniform(0.85, 1.0)
            rows[k].update(gbps=gbps, ends_disagree=False)
        return rows

    def judge(rows, reference=None, slow=None):
        return link_matrix.link_result(rows, hosts, 8, 7, "given", reference, slow)

    result = link_matrix.passes(pb.LinkMatrixSpec(iters=20, warmup=1), links, hosts, 7, measure, judge)
    h5 = {k for k, (a, b, _) in enumerate(links) if 5 in (a, b)}
    assert {k for k, x in enumerate(result.links) if x.flagged} >= h5
    noisy = [ks for ks, check in calls[1:] if check]
    assert noisy and all(not h5 & set(ks) for ks in noisy)  # the noisy passes left host 5 out
    again = [ks for ks, check in calls if not check]
    assert len(again) == 2 and all(h5 <= set(ks) for ks in again)  # over host 5's rounds, no byte check
