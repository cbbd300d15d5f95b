"""Judging check figures against expectations (coordinator/health/expectations.py), pure: the
fleet's own history per key, shipped floors, the fleet- and host-wide findings, not yet judged."""

from __future__ import annotations

from coordinator.health import expectations, verdicts
from ringleader.v1 import jobs_pb2 as pb
from worker.checks import gpu_check, link_matrix

from test_health import _by_verdict, _honest, _job


def _gpu_job(tflops: list[float], device: str = "H200", hosts=None, copy: float = 4300.0, dtype="bfloat16"):
    hosts = hosts or ["a"] * len(tflops)
    g = gpu_check.gpu_result([device] * len(tflops), _honest([(t, copy) for t in tflops], 8192, 1 << 30),
                             8192, dtype, 1 << 30, 10)
    return _job("gpu_check", g, hosts)


def _expect(job: pb.Job, model: str = "NVIDIA H200", history=None) -> verdicts.Expect:
    return verdicts.Expect({w.worker_id: model for w in job.workers}, history or expectations.History())


def test_a_fleet_slowed_alike_fails_with_one_fleet_wide_finding():
    history = expectations.History()
    for _ in range(2):  # clean runs are learnt
        clean = _gpu_job([800.0, 790.0, 810.0])
        assert _by_verdict(verdicts.of_job(clean, _expect(clean, "cpu x86", history)))[pb.HEALTHY] == ["w0", "w1", "w2"]
    slow = _gpu_job([100.0, 99.0, 101.0])  # every peer alike: the peers flag nobody
    assert _by_verdict(verdicts.of_job(slow))[pb.HEALTHY] == ["w0", "w1", "w2"]
    e = _expect(slow, "cpu x86", history)
    found = verdicts.of_job(slow, e)
    assert _by_verdict(found)[pb.UNHEALTHY] == ["w0", "w1", "w2"]
    assert len(e.findings) == 1 and e.findings[0][0] == expectations.FLEET
    assert e.findings[0][1].startswith("every worker below expectation: 3 of 3")
    assert all(h.finding == e.findings[0][1] for h in found.values())
    assert found["w0"].expected.startswith("below expectation: history: TFLOP/s (bfloat16 n=8192) 100 is 0.12 of 800")
    assert "peers said HEALTHY" in found["w0"].expected


def test_a_failing_figure_never_becomes_the_expectation():
    history = expectations.History()
    for _ in range(2):
        clean = _gpu_job([800.0, 790.0, 810.0])
        verdicts.of_job(clean, _expect(clean, "cpu", history))
    for _ in range(5):  # the fleet stays slow: it stays below, run after run
        slow = _gpu_job([100.0, 99.0, 101.0])
        assert _by_verdict(verdicts.of_job(slow, _expect(slow, "cpu", history)))[pb.UNHEALTHY] == ["w0", "w1", "w2"]
    assert history.median("gpu_check|tflops|cpu|bfloat16|n8192") == (800.0, 6)


def test_one_host_below_is_a_host_wide_finding_not_the_fleet():
    history = expectations.History()
    clean = _gpu_job([800.0] * 4, hosts=["a", "a", "b", "b"])
    verdicts.of_job(clean, _expect(clean, "cpu", history))
    slow = _gpu_job([800.0, 800.0, 120.0, 125.0], hosts=["a", "a", "b", "b"])
    e = _expect(slow, "cpu", history)
    found = verdicts.of_job(slow, e)
    assert _by_verdict(found)[pb.UNHEALTHY] == ["w2", "w3"]
    assert [s for s, _ in e.findings] == [expectations.HOST] and "every worker of host b" in e.findings[0][1]
    assert found["w0"].finding == "" and found["w0"].expected.startswith("peers: ")
    assert "history: TFLOP/s (bfloat16 n=8192) 800 is 1.00 of 800" in found["w0"].expected


def test_a_lone_gpu_is_judged_by_its_shipped_floor():
    ok, slow = _gpu_job([790.0]), _gpu_job([300.0])  # one GPU: no peers
    assert _by_verdict(verdicts.of_job(slow))[pb.HEALTHY] == ["w0"]  # peers alone call it healthy
    found = verdicts.of_job(ok, _expect(ok))
    assert found["w0"].verdict == pb.HEALTHY and "shipped floor: TFLOP/s" in found["w0"].expected
    found = verdicts.of_job(slow, _expect(slow))
    assert found["w0"].verdict == pb.UNHEALTHY
    assert found["w0"].expected.startswith("below expectation: shipped floor: TFLOP/s (bfloat16 n=8192) 300 is 0.61 "
                                           "of 495 (H200; NVIDIA H200 datasheet")
    assert found["w0"].finding == ""  # one worker: no fleet of alike workers to name


def test_the_model_comes_from_registration_not_the_payload():
    job = _gpu_job([300.0], device="NVIDIA H200")  # the payload claims an H200
    found = verdicts.of_job(job, _expect(job, model="Some Unknown GPU"))
    assert found["w0"].verdict == pb.VERDICT_UNSPECIFIED  # registered as a model with no floor
    assert found["w0"].expected.startswith("not yet judged: no peer of model 'Some Unknown GPU' in this run")


def test_with_neither_peers_nor_expectations_a_worker_is_not_yet_judged_until_its_history_exists():
    history = expectations.History()
    for i in range(expectations.MIN_SAMPLES):
        job = _gpu_job([1.0], device="cpu", dtype="float32")
        found = verdicts.of_job(job, _expect(job, "cpu x86", history))
        assert found["w0"].verdict == pb.VERDICT_UNSPECIFIED, i
    slow = _gpu_job([0.1], device="cpu", dtype="float32")
    assert verdicts.of_job(slow, _expect(slow, "cpu x86", history))["w0"].verdict == pb.UNHEALTHY


def test_floors_match_the_longest_model_name_and_only_bf16_products():
    assert expectations.floor_of("NVIDIA H100 PCIe", "tflops", "bfloat16").model == "H100 PCIe"
    assert expectations.floor_of("NVIDIA H100 80GB HBM3", "tflops", "bfloat16").model == "H100"
    assert expectations.floor_of("NVIDIA H200", "tflops", "float32") is None
    assert expectations.floor_of("NVIDIA H200", "copy_gbps", "float32").value == 1920.0
    assert expectations.floor_of("cpu x86_64", "copy_gbps", "float32") is None


def test_links_slowed_alike_on_every_host_are_one_finding():
    hosts = ["a", "a", "b", "b"]
    history = expectations.History()

    def run(gbps: float):
        rows = [dict(a=a, b=b, round=0, latency_us=1.0, gbps=gbps, wrong=0) for a in range(4) for b in range(a + 1, 4)]
        job = _job("link_matrix", link_matrix.link_result(rows, hosts, 1 << 20, 3), hosts)
        e = _expect(job, "cpu", history)
        return verdicts.of_job(job, e), e

    for _ in range(2):
        found, e = run(1.0)
        assert _by_verdict(found)[pb.HEALTHY] == ["w0", "w1", "w2", "w3"] and not e.findings
    found, e = run(0.2)  # every link alike: the peers flag none
    assert _by_verdict(found)[pb.UNHEALTHY] == ["w0", "w1", "w2", "w3"]
    assert [s for s, _ in e.findings] == [expectations.FLEET]
    assert "same-host link" in found["w0"].expected or "cross-host link" in found["w0"].expected


def test_one_link_below_its_history_names_nobody_but_most_of_a_workers_links_do():
    hosts = ["a", "a", "b", "b"]
    history = expectations.History()

    def run(slow=()):
        rows = [dict(a=a, b=b, round=0, latency_us=1.0, gbps=0.2 if (a, b) in slow else 1.0, wrong=0)
                for a in range(4) for b in range(a + 1, 4)]
        job = _job("link_matrix", link_matrix.link_result(rows, hosts, 1 << 20, 3), hosts)
        return verdicts.of_job(job, _expect(job, "cpu", history))

    run(), run()
    assert _by_verdict(run(slow={(0, 1)}))[pb.UNHEALTHY] == []  # one slow link: one figure, maybe noise
    assert _by_verdict(run(slow={(0, 1), (0, 2), (0, 3)}))[pb.UNHEALTHY] == ["w0"]


def test_a_cpu_worker_is_below_its_history_only_past_a_wider_band():
    def runs(device: str):
        history, out = expectations.History(), []
        for tflops in ([10.0] * 3, [4.0] * 3, [1.0] * 3):  # clean, at 0.4 (a loaded machine), at 0.1
            job = _gpu_job(tflops, device="x", dtype="float32")
            for w in job.workers:
                w.device = f"{device}:0"  # the coordinator's, from registration
            out.append(_by_verdict(verdicts.of_job(job, _expect(job, "m", history)))[pb.UNHEALTHY])
        return out

    assert runs("cuda") == [[], ["w0", "w1", "w2"], ["w0", "w1", "w2"]]
    assert runs("cpu") == [[], [], ["w0", "w1", "w2"]]


def test_check_output_shows_the_finding_and_an_unjudged_worker():
    from ringleader_app.check_cmds import check_doc, check_text

    finding = "every worker below expectation: 2 of 2 workers judged by gpu_check (hosts a) ..."
    r = pb.RunCheckResponse(findings=[finding], workers=[
        pb.WorkerInfo(worker_id="w0", host="a", health=pb.WorkerHealth(verdict=pb.UNHEALTHY, check="gpu_check",
                                                                       finding=finding, expected="below expectation")),
        pb.WorkerInfo(worker_id="w1", host="b", health=pb.WorkerHealth(check="gpu_check", expected="not yet judged: x"))])
    text = check_text(r)
    assert f"finding: {finding}" in text
    assert "UNJUDGED" in text and "expected not yet judged: x" in text
    assert check_doc(r)["findings"] == [finding]


def test_a_link_whose_ends_disagree_is_no_evidence_against_either_end():
    hosts = ["a", "b"]
    history = expectations.History()

    def run(gbps: float, disagree: bool = False):
        rows = [dict(a=0, b=1, round=0, latency_us=1.0, gbps=gbps, wrong=0)]
        job = _job("link_matrix", link_matrix.link_result(rows, hosts, 1 << 20, 1), hosts)
        job.link_matrix.links[0].ends_disagree = disagree
        return verdicts.of_job(job, _expect(job, "cpu", history))

    for _ in range(3):
        run(1.0)
    assert _by_verdict(run(0.1, disagree=True))[pb.UNHEALTHY] == []  # one end's word
    assert _by_verdict(run(0.1))[pb.UNHEALTHY] == ["w0", "w1"]  # a 2-host pair's only link: both ends


def test_a_slow_history_does_not_excuse_a_figure_below_the_floor():
    history = expectations.History()
    for _ in range(3):  # learnt before the floor shipped (or below it on another table): slow
        history.learn("gpu_check|tflops|NVIDIA H200|bfloat16|n8192", 300.0)
    job = _gpu_job([300.0, 300.0])
    found = verdicts.of_job(job, _expect(job, history=history))
    assert _by_verdict(found)[pb.UNHEALTHY] == ["w0", "w1"]  # 1.00 of its history, 0.61 of the floor
    assert "history: TFLOP/s (bfloat16 n=8192) 300 is 1.00 of 300" not in found["w0"].expected.split("(judged")[0]
    assert found["w0"].expected.startswith("below expectation: shipped floor: TFLOP/s (bfloat16 n=8192) 300 is 0.61")


def test_floors_hold_only_for_the_default_sizes():
    assert expectations.floor_of("NVIDIA H200", "tflops", "bfloat16", n=1024) is None  # a small product reads lower
    assert expectations.floor_of("NVIDIA H200", "copy_gbps", "bfloat16", copy_bytes=1 << 20) is None
    g = gpu_check.gpu_result(["H200"], _honest([(50.0, 100.0)], 1024, 1 << 20), 1024, "bfloat16", 1 << 20, 10)
    job = _job("gpu_check", g, ["a"])
    assert verdicts.of_job(job, _expect(job))["w0"].verdict == pb.VERDICT_UNSPECIFIED  # not judged by the floor


def test_a_same_host_nvlink_pair_that_lost_its_path_is_below_its_shipped_floor_from_the_first_check():
    """No history yet (a fresh fleet): a same-host H200 pair at 256 MiB reading 36 GB/s (peer to
    peer off) is below the NVLink floor; at 340 GB/s it is not; PCIe cards and cross-host links,
    and small transfers, have no link floor."""
    hosts = ["a", "a"]

    def run(gbps: float, model: str = "NVIDIA H200", size: int = 256 << 20, where=hosts):
        rows = [dict(a=0, b=1, round=0, latency_us=1.0, gbps=gbps, wrong=0)]
        job = _job("link_matrix", link_matrix.link_result(rows, where, size, 1), where)
        e = _expect(job, model)
        return verdicts.of_job(job, e), e

    found, e = run(36.0)
    assert _by_verdict(found)[pb.UNHEALTHY] == ["w0", "w1"]
    assert "shipped floor: same-host link 0-1 GB/s" in found["w0"].expected and "NVLink 4" in found["w0"].expected
    assert [s for s, _ in e.findings] == [expectations.FLEET]
    assert _by_verdict(run(340.0)[0])[pb.UNHEALTHY] == []
    for quiet in (run(36.0, "NVIDIA H200 NVL"), run(36.0, "NVIDIA H100 PCIe"), run(36.0, size=1 << 20),
                  run(36.0, where=["a", "b"])):
        assert _by_verdict(quiet[0])[pb.UNHEALTHY] == []


def test_two_workers_on_one_gpu_are_not_judged_by_the_nvlink_floor():
    """The shared-GPU fleet: two workers on cuda:0 of one host link by socket (their own
    NCCL_HOSTIDs), 2.3 GB/s on an H200; no NVLink path, so no NVLink floor. Two GPUs of that
    host at the same figure are below it."""
    rows = [dict(a=0, b=1, round=0, latency_us=1.0, gbps=2.3, wrong=0)]

    def run(devices):
        job = _job("link_matrix", link_matrix.link_result(rows, ["a", "a"], 256 << 20, 1), ["a", "a"])
        for w, d in zip(job.workers, devices):
            w.device = d
        return verdicts.of_job(job, _expect(job))

    assert _by_verdict(run(["cuda:0", "cuda:0"]))[pb.UNHEALTHY] == []
    assert _by_verdict(run(["cuda:0", "cuda:1"]))[pb.UNHEALTHY] == ["w0", "w1"]


def test_ranks_sharing_one_gpu_are_judged_against_their_share_of_its_floor():
    """The shared-GPU fleet's check: two ranks on cuda:0 of one H200 run their products at once,
    367 and 355 TFLOP/s, 1,914 GB/s copies (half the GPU each): above half the floor. Two GPUs
    reading that are below it; a history learnt on a whole GPU does not judge a shared one."""
    def run(devices, history=None):
        job = _gpu_job([367.0, 355.0], copy=1914.0)
        for w, d in zip(job.workers, devices):
            w.device = d
        return verdicts.of_job(job, _expect(job, history=history))

    assert _by_verdict(run(["cuda:0", "cuda:0"]))[pb.UNHEALTHY] == []
    found = run(["cuda:0", "cuda:1"])
    assert _by_verdict(found)[pb.UNHEALTHY] == ["w0", "w1"] and "shipped floor: TFLOP/s" in found["w0"].expected
    whole = expectations.History()
    for _ in range(3):
        whole.learn("gpu_check|tflops|NVIDIA H200|bfloat16|n8192", 800.0)
    assert _by_verdict(run(["cuda:0", "cuda:0"], whole))[pb.UNHEALTHY] == []


def test_an_operators_edited_floors_replace_the_shipped_rows_and_judge_by_them():
    """`ringleader floors export`, edited, then `coordinator --floors FILE`: a row of the same model
    and figure replaces the shipped one (here a stricter TFLOP/s floor), a value of 0 removes it."""
    doc = expectations.floors_doc(expectations.SHIPPED)
    assert {"model": "H200", "figure": "tflops", "value": 495.0,
            "source": "NVIDIA H200 datasheet: 989 TFLOP/s dense bf16 (SXM)"} in doc["floors"]
    stricter = expectations.floors_from({"floors": [{"model": "H200", "figure": "tflops", "value": 700,
                                                     "source": "our fleet"}]})
    job = _gpu_job([650.0, 650.0])
    shipped = verdicts.of_job(job, _expect(job))
    assert _by_verdict(shipped)[pb.UNHEALTHY] == []  # above 495
    edited = verdicts.of_job(job, _expect(job, history=expectations.History(stricter)))
    assert _by_verdict(edited)[pb.UNHEALTHY] == ["w0", "w1"] and "our fleet" in edited["w0"].expected
    none = expectations.floors_from({"floors": [{"model": "H200", "figure": "tflops", "value": 0}]})
    assert expectations.floor_of("NVIDIA H200", "tflops", "bfloat16", floors=none) is None


def test_a_bad_floors_row_is_refused_naming_its_field():
    import pytest
    from ringleader.errors import InvalidSpec
    for doc, field in [([], "floors"), ({"floors": [1]}, "floors[0]"),
                       ({"floors": [{"model": "", "figure": "tflops", "value": 1}]}, "floors[0].model"),
                       ({"floors": [{"model": "H200", "figure": "speed", "value": 1}]}, "floors[0].figure"),
                       ({"floors": [{"model": "H200", "figure": "tflops", "value": -1}]}, "floors[0].value"),
                       ({"floors": [{"model": "H200", "figure": "tflops", "value": True}]}, "floors[0].value"),
                       ({"floors": [{"model": "H200", "figure": "tflops", "value": 1, "x": 2}]}, "floors[0].x")]:
        with pytest.raises(InvalidSpec) as e:
            expectations.floors_from(doc)
        assert e.value.field == field, (doc, e.value)
