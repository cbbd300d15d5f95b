"""Small-message latency on CPU: iteration calibration, the algo vocabulary and its refusals, group flavors in
a real coordinator (in process, its workers simulated by the messages a daemon sends), the
algo-sweep choice and dispatch table, and how the CLI and tables show them."""

import json
import os

import pytest

from coordinator.core import admission
from coordinator.shell.facade import Coordinator
from coordinator.store.memory import MemoryJobStore
from ringleader import algos, jobspec
from ringleader import spec as specs
from ringleader_app import table
from ringleader_app.cli import build_parser
from ringleader_app.commands import spec_from_args
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from worker import calibrate
from worker import algos as worker_algos

# ---- calibration: iterations from a probe ---------------------------------------------------


@pytest.mark.parametrize("probe_us,expected", [
    (50.0, 400),      # 8 B eager: 20 ms / 50 us
    (6.0, 3334),      # 8 B in graph mode: rounds up, so the loop lasts at least the target
    (1.0, 10_000),    # capped
    (2_000.0, 20),    # 10 ops would reach the target: the minimum wins
    (46_000.0, 20),   # 8 GiB all_reduce: nccl-tests' 20, about a second
    (0.0, 10_000),    # a clock too coarse to see the op
])
def test_iterations_from_a_probe(probe_us, expected):
    assert calibrate.iterations(probe_us) == expected


def test_iterations_respect_target_minimum_and_cap():
    assert calibrate.iterations(10.0, target_us=1_000.0, minimum=5, cap=50) == 50
    assert calibrate.iterations(10.0, target_us=1_000.0, minimum=5, cap=500) == 100
    assert calibrate.iterations(400.0, target_us=1_000.0, minimum=5, cap=500) == 5
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError):
            calibrate.iterations(bad)
    with pytest.raises(ValueError):
        calibrate.iterations(1.0, minimum=10, cap=5)


def test_graph_plan_packs_iterations_into_replays():
    assert calibrate.graph_plan(20) == (20, 1)
    assert calibrate.graph_plan(3334) == (20, 167)  # 3340 ops timed: at least what was asked
    assert calibrate.graph_plan(5) == (5, 1)  # an explicit small count: one graph of 5
    assert calibrate.graph_plan(45, 20) == (20, 3)
    with pytest.raises(ValueError):
        calibrate.graph_plan(0)


# ---- the algo vocabulary and what refuses it ------------------------------------------------


def collective(n=2, **kw):
    return pb.JobSpec(world_size=n, collective=pb.CollectiveSpec(op=kw.pop("op", "all_reduce"), **kw))


def test_algo_spellings_are_canonical_and_flavors_follow():
    assert algos.parse_algo("NCCL:Ring/LL") == "nccl:ring/ll"
    assert algos.parse_algo(" nccl:tree ") == algos.parse_algo("nccl:tree/") == "nccl:tree"
    assert algos.flavor("nccl:ring/ll") == "NCCL_ALGO=Ring,NCCL_PROTO=LL"
    assert algos.flavor("nccl:tree") == "NCCL_ALGO=Tree"
    assert algos.flavor("symm:one_shot") == algos.flavor("nccl") == algos.flavor("") == ""
    assert algos.flavor_env("NCCL_ALGO=Ring,NCCL_PROTO=LL128") == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128"}
    assert algos.flavor_env("") == {}
    v = jobspec.normalize(collective(algo="NCCL:Tree/Simple"))
    assert v.spec.collective.algo == "nccl:tree/simple" and v.flavor == "NCCL_ALGO=Tree,NCCL_PROTO=Simple"
    assert jobspec.normalize(collective(algo="symm:two_shot")).flavor == ""


@pytest.mark.parametrize("flavor", ["LD_PRELOAD=/tmp/x.so", "NCCL_ALGO=NVLS", "NCCL_ALGO=Ring,NCCL_ALGO=Tree",
                                    "NCCL_PROTO", "NCCL_DEBUG=INFO"])
def test_a_flavor_from_the_wire_sets_nothing_outside_the_vocabulary(flavor):
    with pytest.raises(InvalidSpec) as err:
        algos.flavor_env(flavor)
    assert err.value.field == "flavor"


@pytest.mark.parametrize("kw,field,words", [
    (dict(algo="nccl:nvls"), "collective.algo", "unknown algo"),
    (dict(algo="nccl:ring/ll,symm:one_shot"), "collective.algo", "unknown algo"),
    (dict(op="all_gather", algo="symm:one_shot"), "collective.algo", "all_reduce only"),
    (dict(dtype="float16", algo="symm:one_shot"), "collective.algo", "float32 and bfloat16 only"),
    (dict(reduce_op="max", algo="symm:two_shot"), "collective.algo", "sums only"),
    (dict(op="broadcast", algo="nccl:tree/ll"), "collective.algo", "tree algorithm implements all_reduce only"),
    (dict(sizes=[512 << 20], algo="symm:one_shot"), "collective.algo", "up to 256MB"),
    (dict(sizes=[6], dtype="bfloat16", algo="symm:one_shot"), "collective.algo", "4-byte words"),
    (dict(op="barrier", graph=True), "collective.graph", "cannot be captured"),
])
def test_algo_and_graph_are_checked_naming_the_field(kw, field, words):
    with pytest.raises(InvalidSpec) as err:
        jobspec.normalize(collective(**kw))
    assert err.value.field == field and words in err.value.message, str(err.value)


def test_graph_and_cuda_algos_are_refused_on_gloo_naming_the_field():
    for kw, field, words in ((dict(graph=True), "collective.graph", "CUDA graphs need CUDA devices"),
                             (dict(algo="symm:one_shot"), "collective.algo", "needs the nccl backend"),
                             (dict(algo="nccl:ring/ll"), "collective.algo", "needs the nccl backend")):
        v = jobspec.normalize(collective(**kw))
        why = v.refusal("gloo")
        assert (why.field, words in why.message) == (field, True), str(why)
        assert v.runs_on("nccl")
    assert jobspec.normalize(collective(algo="gloo")).refusal("nccl").field == "collective.algo"


def _fleet(backend):
    device = pb.Device(type="cuda" if backend == "nccl" else "cpu", name="H200", memory_bytes=140 << 30)
    return [wpb.Register(worker_id=f"w{i}", host="h", address="127.0.0.1", backend=backend, device=device)
            for i in range(2)]


def test_a_cpu_only_fleet_refuses_graph_mode_at_admission():
    with pytest.raises(InvalidSpec) as err:
        admission.check(jobspec.normalize(collective(graph=True)), _fleet("gloo"))
    assert str(err.value).startswith("collective.graph: CUDA graphs need CUDA devices")
    admission.check(jobspec.normalize(collective(graph=True)), _fleet("nccl"))
    sweep = jobspec.normalize(pb.JobSpec(world_size=2, algo_sweep=pb.AlgoSweepSpec(algos=["symm:one_shot"])))
    with pytest.raises(InvalidSpec) as err:
        admission.check(sweep, _fleet("gloo"))
    assert err.value.field == "algo_sweep.algos"


def test_algo_sweep_spec_defaults_and_refusals():
    v = jobspec.normalize(pb.JobSpec(world_size=2, algo_sweep=pb.AlgoSweepSpec(
        algos=["NCCL", "symm:one_shot"], sizes=[8, 6, 1 << 20])))
    a = v.spec.algo_sweep
    assert (a.dtype, a.iters, a.warmup, list(a.algos)) == ("float32", 0, 5, ["nccl", "symm:one_shot"])
    assert v.sizes == (8, 4, 1 << 20) and v.progress_total == 3 and v.flavor == ""
    assert v.runs_on("nccl") and not v.runs_on("gloo")
    assert jobspec.normalize(pb.JobSpec(world_size=2, algo_sweep=pb.AlgoSweepSpec())).runs_on("gloo")
    for sweep, field in ((pb.AlgoSweepSpec(dtype="float16"), "algo_sweep.dtype"),
                         (pb.AlgoSweepSpec(algos=["nccl", "nccl"]), "algo_sweep.algos"),
                         (pb.AlgoSweepSpec(algos=["gloo", "nccl"]), "algo_sweep.algos"),
                         (pb.AlgoSweepSpec(algos=["bogus"]), "algo_sweep.algos"),
                         (pb.AlgoSweepSpec(iters=10**6), "algo_sweep.iters")):
        with pytest.raises(InvalidSpec) as err:
            jobspec.normalize(pb.JobSpec(world_size=2, algo_sweep=sweep))
        assert err.value.field == field
    assert algos.default_algos("gloo") == ["gloo"]
    assert algos.default_algos("nccl")[0] == "nccl" and "nccl:tree/ll128" in algos.default_algos("nccl")


# ---- group flavors in a real coordinator (its two workers simulated) ------------------------


class Gang:
    """A Coordinator in this process, with two registered NCCL workers whose daemons are
    played by the test: it reads their outboxes and sends what a daemon would."""

    def __init__(self):
        self.core = Coordinator(MemoryJobStore())
        self.conns = [self.core.register(reg) for reg in _fleet("nccl")]

    def sent(self, i) -> list:
        out, q = [], self.conns[i].outbox
        while not q.empty():
            m = q.get_nowait()
            out.append(getattr(m, m.WhichOneof("msg")))
        return out

    def run(self, **kw) -> tuple[pb.Job, list[list]]:
        """Submit a collective job and play both daemons through it; returns the finished job
        and what each worker was sent, in order."""
        job = self.core.submit(collective(sizes=[8], **kw))
        seen = [self.sent(0), []]
        a0 = [m for m in seen[0] if isinstance(m, wpb.Assignment)][0]
        if a0.store_port == 0:  # a new group: rank 0 binds the store, then rank 1 is assigned
            self.core.on_message(self.conns[0], wpb.WorkerMessage(store_ready=wpb.StoreReady(
                job_id=job.id, group_key=a0.group_key, store_port=4242)))
        seen[1] = self.sent(1)
        for rank, conn in enumerate(self.conns):
            for m in seen[rank]:
                if isinstance(m, wpb.DropGroup):
                    self.core.on_message(conn, wpb.WorkerMessage(group_dropped=wpb.GroupDropped(group_key=m.group_key)))
        for rank, conn in enumerate(self.conns):
            self.core.on_message(conn, wpb.WorkerMessage(done=wpb.JobDone(
                job_id=job.id, rank=rank, ok=True, warm_group=a0.group_key, warm_start=a0.store_port != 0)))
        return self.core.get(job.id), seen


def _assignment(messages) -> wpb.Assignment:
    return [m for m in messages if isinstance(m, wpb.Assignment)][0]


def test_warm_group_is_reused_only_by_a_job_of_its_flavor():
    g = Gang()
    first, seen = g.run()
    key = _assignment(seen[0]).group_key
    assert first.state == pb.SUCCEEDED and not first.warm_start
    assert _assignment(seen[0]).flavor == "" and g.core.groups.get(key).flavor == ""

    again, seen = g.run(algo="nccl")  # the default implementation: same flavor, warm
    assert again.warm_start and _assignment(seen[1]).group_key == key

    pinned, seen = g.run(algo="nccl:ring/ll")
    a0 = _assignment(seen[0])
    assert not pinned.warm_start and pinned.state == pb.SUCCEEDED
    assert a0.group_key != key and a0.store_port == 0 and a0.flavor == "NCCL_ALGO=Ring,NCCL_PROTO=LL"
    for msgs in seen:  # each member drops the old group before its new assignment, in stream order
        kinds = [type(m).__name__ for m in msgs]
        assert kinds.index("DropGroup") < kinds.index("Assignment") and msgs[kinds.index("DropGroup")].group_key == key
    assert g.core.groups.get(key) is None  # both dropped it: destroyed
    assert g.core.groups.get(a0.group_key).flavor == "NCCL_ALGO=Ring,NCCL_PROTO=LL"

    same, seen = g.run(algo="NCCL:Ring/LL")
    assert same.warm_start and _assignment(seen[0]).group_key == a0.group_key
    assert _assignment(seen[1]).flavor == "NCCL_ALGO=Ring,NCCL_PROTO=LL"

    symm, seen = g.run(algo="symm:one_shot")  # default communicator: leaves the pinned group
    assert not symm.warm_start and _assignment(seen[0]).flavor == ""


# ---- the algo sweep's choice and how it is shown --------------------------------------------


def _row(size, algo, t, wrong=0):
    return dict(size_bytes=size, algo=algo, time_us=t, wrong=wrong)


def test_choose_fastest_per_size_and_merge_ranges():
    rows = [_row(8, "nccl", 7.0), _row(8, "symm:one_shot", 3.5), _row(8, "nccl:ring/ll", 6.0),
            _row(1024, "nccl", 7.5), _row(1024, "symm:one_shot", 4.0),
            _row(65536, "nccl", 9.0), _row(65536, "symm:one_shot", 1.0, wrong=3), _row(65536, "nccl:ring/ll", 8.0),
            _row(1 << 20, "nccl", 20.0), _row(1 << 20, "nccl:ring/ll", 30.0),
            _row(1 << 24, "nccl", 80.0)]
    best, table_rows = worker_algos.choose(rows, default="nccl")
    assert [(b["size_bytes"], b["algo"]) for b in best] == [
        (8, "symm:one_shot"), (1024, "symm:one_shot"), (65536, "nccl:ring/ll"), (1 << 20, "nccl"), (1 << 24, "nccl")]
    assert best[0]["speedup"] == pytest.approx(2.0) and best[3]["speedup"] == 1.0
    assert table_rows == [dict(min_bytes=8, max_bytes=1024, algo="symm:one_shot"),
                          dict(min_bytes=65536, max_bytes=65536, algo="nccl:ring/ll"),
                          dict(min_bytes=1 << 20, max_bytes=0, algo="nccl")]
    assert worker_algos.choose([_row(8, "a", 1.0), _row(8, "b", 1.0)], "c")[0][0]["algo"] == "a"  # ties: by name
    assert worker_algos.choose([], "nccl") == ([], [])


def test_runs_at_limits_symmetric_memory_sizes():
    assert worker_algos.runs_at("symm:one_shot", 8) and not worker_algos.runs_at("symm:one_shot", 6)
    assert not worker_algos.runs_at("symm:two_shot", 512 << 20) and worker_algos.runs_at("nccl", 512 << 20)


def test_comm_env_sets_then_restores():
    os.environ["NCCL_PROTO"] = "Simple"
    os.environ.pop("NCCL_ALGO", None)
    try:
        with worker_algos.comm_env({"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}):
            assert (os.environ["NCCL_ALGO"], os.environ["NCCL_PROTO"]) == ("Ring", "LL")
        assert os.environ["NCCL_PROTO"] == "Simple" and "NCCL_ALGO" not in os.environ
    finally:
        os.environ.pop("NCCL_PROTO", None)


def _sweep_result():
    def res(size, algo, t, wrong=0):
        return pb.SizeResult(op="all_reduce", size_bytes=size, algo=algo, time_us=t, wrong=wrong, mode="graph")
    results = [res(8, "nccl", 7.0), res(8, "symm:one_shot", 3.5), res(1 << 20, "nccl", 20.0),
               res(1 << 20, "symm:one_shot", 25.0, wrong=1)]
    best, rows = worker_algos.choose([dict(size_bytes=r.size_bytes, algo=r.algo, time_us=r.time_us, wrong=r.wrong)
                                      for r in results], "nccl")
    return pb.AlgoSweepResult(op="all_reduce", dtype="float32", world_size=2, mode="graph",
                              algos=["nccl", "symm:one_shot"], results=results,
                              best=[pb.AlgoChoice(**b) for b in best], table=[pb.AlgoRange(**t) for t in rows])


def test_algo_sweep_table_and_dispatch_json():
    r = _sweep_result()
    text = table.algo_sweep_table(r)
    assert "3.50*" in text and "25.00!" in text and "symm:one_shot" in text.splitlines()[2]
    assert "# 8 B up to 8 B: symm:one_shot" in text and "# 1MiB and above: nccl" in text
    d = table.dispatch_table(r)
    assert d["table"] == [{"max_bytes": 8, "algo": "symm:one_shot"}, {"max_bytes": None, "algo": "nccl"}]
    assert d["measured"][0] == {"size_bytes": 8, "algo": "symm:one_shot", "time_us": 3.5, "speedup": 2.0}
    job = pb.Job(id="j", spec=pb.JobSpec(world_size=2, algo_sweep=pb.AlgoSweepSpec()), algo_sweep=r)
    # -o json is REST's document: the dispatch table is the outcome's own `table` and `best`
    outcome = json.loads(table.job_json(job))["algo_sweep"]
    assert [{"max_bytes": t["max_bytes"] or None, "algo": t["algo"]} for t in outcome["table"]] == d["table"]
    assert [{k: b[k] for k in ("size_bytes", "algo", "time_us", "speedup")} for b in outcome["best"]] == d["measured"]
    assert table.outcome_table(job) == text


def test_results_table_shows_iterations_mode_and_algo():
    rows = [pb.SizeResult(op="all_reduce", dtype="float32", size_bytes=8, count=2, time_us=6.1, iters=3340,
                          mode="graph", algo="nccl", world_size=2)]
    text = table.results_table(rows)
    assert text.splitlines()[0].split()[-1] == "iters" and text.splitlines()[2].split()[-1] == "3340"
    assert "all_reduce, 2 ranks, in-place, nccl, graph mode" in text


def test_cli_builds_graph_algo_and_algo_sweep_specs():
    def spec(*argv):
        return spec_from_args(build_parser().parse_args(["submit", "--world-size", "2", *argv]))
    c = spec("--op", "all_reduce", "--graph", "--algo", "nccl:ring/ll", "--iters", "auto").collective
    assert (c.graph, c.algo, c.iters) == (True, "nccl:ring/ll", 0)
    assert spec("--op", "all_reduce", "-n", "50").collective.iters == 50
    s = spec("--kind", "algo-sweep", "--algo", "nccl,symm:one_shot", "--graph", "-d", "bfloat16", "--max-bytes", "1M")
    assert s.WhichOneof("kind") == "algo_sweep"
    assert (list(s.algo_sweep.algos), s.algo_sweep.graph, s.algo_sweep.dtype, s.algo_sweep.max_bytes) == \
        (["nccl", "symm:one_shot"], True, "bfloat16", 1 << 20)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["submit", "--world-size", "2", "--iters", "lots"])


def test_one_shot_is_out_of_place_and_needs_its_output_buffer():
    assert specs.physically_in_place("all_reduce", False, "symm:two_shot")
    assert not specs.physically_in_place("all_reduce", True, "symm:one_shot")
    assert specs.bytes_needed("all_reduce", 1 << 20, 2, False, "symm:one_shot") == 3 << 20
    assert jobspec.normalize(collective(sizes=[1 << 20], algo="symm:one_shot")).needs_bytes == 3 << 20
