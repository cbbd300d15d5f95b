"""worker.collectives on real gloo groups (spawned CPU processes), and the data check on its own.

Process start is slow, so every case of one world size runs in a single spawned group (a
module-scoped fixture); the parametrized tests then only look at the collected rows.
"""

from __future__ import annotations

import datetime
import json
import traceback
import types

import pytest
import torch

from ringleader import spec
from ringleader.v1 import jobs_pb2 as pb
from worker import calibrate, collectives, datacheck
from worker.algos import Method
from ranks import run_ranks

SIZES = (1000, 150_000)  # requested bytes; rounded by spec.effective_size per world size
ITERS, WARMUP = 3, 1


def _case(op, dtype="float32", reduce_op="sum", in_place=False, root=0, iters=ITERS, graph=False, algo=""):
    return dict(op=op, dtype=dtype, reduce_op=reduce_op, in_place=in_place, root=root, iters=iters,
                graph=graph, algo=algo)


def _cases() -> list[dict]:
    cases = []
    for op in spec.OPS:
        if op == "barrier":
            cases.append(_case(op))
            continue
        root = 1 if op in spec.ROOTED_OPS else 0  # a non-zero root catches rank-0 assumptions
        cases += [_case(op, "float32", root=root), _case(op, "int8", root=root),
                  _case(op, "bfloat16", root=root)]
    for op in ("all_reduce", "reduce"):
        for reduce_op in ("prod", "min", "max"):
            cases += [_case(op, "float32", reduce_op), _case(op, "int32", reduce_op),
                      _case(op, "float16", reduce_op)]
    for op in spec.REDUCING_OPS:
        cases += [_case(op, "float32", "avg"), _case(op, "bfloat16", "avg"),
                  _case(op, "uint8", "max"), _case(op, "int64", "sum"), _case(op, "float64", "prod")]
    for op in ("all_gather", "reduce_scatter", "gather", "scatter"):
        cases += [_case(op, "float32", in_place=True, root=1), _case(op, "int32", in_place=True)]
    cases.append(_case("all_reduce", "int32", "avg"))  # unsupported by gloo: refused up front
    # auto iterations (calibrated per size, agreed by every rank), gather/scatter's grouped p2p
    for op in ("all_reduce", "gather", "scatter"):
        cases.append(_case(op, "float32", root=1 if op != "all_reduce" else 0, iters=spec.AUTO_ITERS))
    # refused up front on gloo, naming the field: CUDA graphs and the CUDA-only algos
    cases += [_case("all_reduce", graph=True), _case("all_reduce", algo="symm:one_shot"),
              _case("broadcast", algo="nccl:ring/ll"), _case("all_reduce", algo="gloo")]
    return [dict(c, size=s) for c in cases for s in SIZES]


CASES = _cases()


def _case_id(c: dict) -> str:
    return "-".join([c["op"], c["dtype"], c["reduce_op"], f"root{c['root']}",
                     "inplace" if c["in_place"] else "oop", str(c["size"]), f"iters{c['iters'] or 'auto'}",
                     *(["graph"] if c["graph"] else []), *([c["algo"]] if c["algo"] else [])])


def _rank_main(rank: int, port: int, path: str, n: int, cases: list[dict]) -> None:
    """One rank: run every case, write what it saw as JSON (spawn target, so module level)."""
    import warnings

    import torch.distributed as dist

    warnings.simplefilter("error")  # as strict as pytest's filterwarnings=error
    payload: dict = {"rows": []}
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=n, timeout=datetime.timedelta(seconds=60))
        device = torch.device("cpu")
        for c in cases:
            size = spec.effective_size(c["op"], c["size"], c["dtype"], n)
            counter = types.SimpleNamespace(value=0)
            args = dict(op=c["op"], dtype=c["dtype"], reduce_op=c["reduce_op"], size_bytes=size,
                        root=c["root"], in_place=c["in_place"], device=device)
            method = Method(algo=c["algo"], graph=c["graph"])
            try:
                local = collectives.measure(**args, iters=c["iters"], warmup=WARMUP, counter=counter, method=method)
            except ValueError as err:
                payload["rows"].append({"error": str(err)})
                continue
            row = collectives.summarize(local, **args, algo=c["algo"])
            payload["rows"].append({"row": row, "ops_issued": counter.value,
                                    "local_wrong": local.wrong})
        dist.destroy_process_group()
    except BaseException:
        payload["traceback"] = traceback.format_exc()
    with open(path, "w") as f:
        json.dump(payload, f)



def _run_group(n: int, cases: list[dict], tmp_path) -> list[dict]:
    return run_ranks(_rank_main, n, tmp_path, args=(n, cases))


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"world{n}")
def world(request, tmp_path_factory):
    n = request.param
    return n, _run_group(n, CASES, tmp_path_factory.mktemp(f"world{n}"))


@pytest.mark.parametrize("i", range(len(CASES)), ids=[_case_id(c) for c in CASES])
def test_measure_and_summarize_on_gloo(world, i):
    n, payloads = world
    case = CASES[i]
    seen = [p["rows"][i] for p in payloads]
    refusal = spec.backend_refusal("gloo", op=case["op"], dtype=case["dtype"], reduce_op=case["reduce_op"],
                                   graph=case["graph"], algo=case["algo"])
    reason = str(refusal) if refusal else None
    if reason:
        assert all(s == {"error": reason} for s in seen)
        assert reason.split(":")[0] in ("reduce_op", "graph", "algo")
        return
    row = seen[0]["row"]
    assert all(s["row"] == row for s in seen), "summarize must give every rank the same row"
    size = spec.effective_size(case["op"], case["size"], case["dtype"], n)
    pb.SizeResult(**row)  # exactly the message's fields, with compatible types
    # Every field but those the coordinator sets from its baselines (baseline_*).
    assert set(row) == {f for f in pb.SizeResult.DESCRIPTOR.fields_by_name if not f.startswith("baseline_")}
    assert row["wrong"] == 0 and all(s["local_wrong"] == 0 for s in seen)
    assert (row["world_size"], row["mode"], row["algo"]) == (n, "eager", "gloo")
    auto = case["iters"] == spec.AUTO_ITERS
    if auto:  # chosen per size from the slowest rank's probe (identical rows: every rank agreed)
        assert calibrate.MIN_ITERS <= row["iters"] <= calibrate.MAX_AUTO_ITERS
    else:
        assert row["iters"] == ITERS
    assert {k: row[k] for k in ("op", "dtype", "reduce_op", "root", "in_place")} == \
        {k: case[k] for k in ("op", "dtype", "reduce_op", "root", "in_place")}
    assert row["size_bytes"] == size
    assert row["count"] == size // spec.DTYPE_SIZES[case["dtype"]]
    assert 0 < row["time_min_us"] <= row["time_p50_us"] <= row["time_p99_us"] <= row["time_max_us"]
    assert row["time_us"] > 0
    assert 0 <= row["slowest_rank"] < n
    assert row["slowest_rank_time_us"] == row["time_us"]
    if case["op"] == "barrier":
        assert row["algbw_gbps"] == row["busbw_gbps"] == 0
    else:
        assert row["algbw_gbps"] == pytest.approx(size / row["time_us"] / 1e3)
        assert row["busbw_gbps"] == pytest.approx(
            row["algbw_gbps"] * spec.busbw_factor(case["op"], n))
        assert row["busbw_gbps"] > 0
    # warm-up + the probe (auto) + timed + the check op, each counted once
    check_ops = 0 if case["op"] == "barrier" else 1
    probe = calibrate.PROBE_ITERS if auto else 0
    assert all(s["ops_issued"] == WARMUP + probe + row["iters"] + check_ops for s in seen)


# ---- the data check without a process group -------------------------------------------------

def _simulate(op: str, dtype: str, reduce_op: str, n: int, count: int, rank: int,
              root: int = 0, seed: int = 1) -> torch.Tensor:
    """This rank's output, computed by moving data as the op would (in the dtype, ring order)."""
    dt = collectives.torch_dtype(dtype)
    kind = datacheck.kind_of(op, reduce_op)
    c = count // n
    per_chunk = op in spec.CHUNKED_OPS and op not in ("reduce_scatter", "alltoall", "scatter")
    inputs = []
    for s in range(n):
        t = torch.empty(c if per_chunk else count, dtype=dt)
        datacheck.fill(t, kind=kind, dtype=dtype, src=s, n=n, seed=seed)
        inputs.append(t)
    if op in ("all_reduce", "reduce", "reduce_scatter"):
        acc = inputs[0].clone()
        for t in inputs[1:]:
            acc = {"sum": torch.add, "avg": torch.add, "prod": torch.mul,
                   "min": torch.minimum, "max": torch.maximum}[reduce_op](acc, t)
        if reduce_op == "avg":
            acc = acc / n if dt.is_floating_point else torch.div(acc, n, rounding_mode="trunc")
        return acc[rank * c:(rank + 1) * c] if op == "reduce_scatter" else acc
    if op in ("broadcast", "scatter"):
        return inputs[root] if op == "broadcast" else inputs[root][rank * c:(rank + 1) * c]
    if op in ("all_gather", "gather"):
        return torch.cat(inputs)
    if op == "alltoall":
        return torch.cat([t[rank * c:(rank + 1) * c] for t in inputs])
    return inputs[(rank - 1) % n]  # sendrecv


@pytest.mark.parametrize("dtype", list(spec.DTYPE_SIZES))
@pytest.mark.parametrize("n", [1, 2, 3, 8, 64])
def test_reduction_inputs_stay_exact_and_match_the_closed_form(dtype, n, monkeypatch):
    monkeypatch.setattr(datacheck, "CHUNK", 1000)  # exercise the chunk boundaries
    count = 64 * 50
    for reduce_op in spec.REDUCE_OPS:
        for op in ("all_reduce", "reduce_scatter"):
            rank = n - 1
            out = _simulate(op, dtype, reduce_op, n, count, rank)
            wrong = datacheck.count_wrong(out, op=op, dtype=dtype, reduce_op=reduce_op, rank=rank,
                                          world_size=n, root=0, count=count, seed=1)
            assert wrong == 0, (op, reduce_op)
            if not (dtype == "int8" and reduce_op == "avg" and n >= 64):  # no n*v fits int8
                assert out.unique().numel() > 1, "expected values should vary per element"


@pytest.mark.parametrize("op", [o for o in spec.OPS if o not in spec.REDUCING_OPS + ("barrier",)])
def test_copy_ops_match_the_closed_form(op):
    n, count = 3, 3 * 40
    for rank in range(n):
        out = _simulate(op, "int8", "sum", n, count, rank, root=2)
        assert datacheck.count_wrong(out, op=op, dtype="int8", reduce_op="sum", rank=rank,
                                     world_size=n, root=2, count=count, seed=1) == 0


@pytest.mark.parametrize("op,dtype,reduce_op", [
    ("all_reduce", "float32", "sum"), ("reduce_scatter", "int8", "max"),
    ("all_gather", "bfloat16", "sum"), ("alltoall", "uint8", "sum"), ("all_reduce", "float16", "avg"),
])
def test_data_check_counts_a_corrupted_element(op, dtype, reduce_op):
    n, count = 4, 4 * 64
    out = _simulate(op, dtype, reduce_op, n, count, rank=1)
    check = dict(op=op, dtype=dtype, reduce_op=reduce_op, rank=1, world_size=n, root=0,
                 count=count, seed=1)
    assert datacheck.count_wrong(out, **check) == 0
    out[7] += 1
    assert datacheck.count_wrong(out, **check) == 1
    assert datacheck.count_wrong(out, **dict(check, seed=2)) > out.numel() // 2, "seed matters"
    if out.is_floating_point():
        out[9] = float("nan")
        assert datacheck.count_wrong(out, **check) == 2


def test_float_avg_is_checked_with_a_tolerance():
    n, count = 4, 256
    out = _simulate("all_reduce", "bfloat16", "avg", n, count, rank=0)
    check = dict(op="all_reduce", dtype="bfloat16", reduce_op="avg", rank=0, world_size=n,
                 root=0, count=count, seed=1)
    assert datacheck.count_wrong(out * (1 + 2**-8), **check) == 0  # one bf16 ulp off: fine
    assert datacheck.count_wrong(out * 1.05, **check) == out.numel()


# ---- guards and small helpers -----------------------------------------------------------------

def test_check_fits_raises_with_the_numbers():
    with pytest.raises(MemoryError, match=r"^all_gather of 1048576\.0 GiB needs 2621440\.0 GiB "
                                          r"on cpu, \d+\.\d GiB free$"):
        collectives.check_fits("all_gather", 1 << 50, 2, False, torch.device("cpu"))
    collectives.check_fits("all_gather", 1 << 20, 2, False, torch.device("cpu"))
    collectives.check_fits("barrier", 0, 2, False, "cpu")


def test_backend_refusal():
    def refusal(backend, op, dtype, reduce_op):
        return spec.backend_refusal(backend, op=op, dtype=dtype, reduce_op=reduce_op)

    why = refusal("gloo", "all_reduce", "int32", "avg")
    assert (why.field, str(why)) == ("reduce_op", "reduce_op: avg on int32 is not supported by the gloo backend")
    for dtype in ("int8", "uint8", "int64"):
        for op in spec.REDUCING_OPS:
            assert refusal("gloo", op, dtype, "avg")
    # torch 2.13's gloo averages floats; non-reducing ops ignore reduce_op; NCCL does everything
    assert refusal("gloo", "all_reduce", "bfloat16", "avg") is None
    assert refusal("gloo", "broadcast", "int32", "avg") is None
    assert refusal("gloo", "alltoall", "int8", "sum") is None
    assert refusal("nccl", "reduce_scatter", "int8", "avg") is None


def test_build_result_reports_p99_and_max_apart_as_nccl_tests_dash_i():
    # 200 iterations, the per-iteration maximum across ranks is 1..200 (shuffled between ranks):
    # nearest-rank p99 is the 198th value, the max the 200th.
    slow_first = [float(k) for k in range(1, 201)]
    rank1 = [v - 0.5 for v in slow_first]
    row = collectives.build_result([slow_first, rank1], [100.5, 100.0], 0, op="all_reduce", dtype="float32",
                                   reduce_op="sum", size_bytes=8, root=0, in_place=False, iters=200)
    assert (row["time_min_us"], row["time_p99_us"], row["time_max_us"]) == (1.0, 198.0, 200.0)


def test_build_result_statistics():
    row = collectives.build_result([[1.0, 2.0, 3.0, 10.0], [2.0, 1.0, 5.0, 4.0]], [4.0, 3.5], 3,
                                   op="all_reduce", dtype="float32", reduce_op="sum", size_bytes=1000,
                                   root=0, in_place=False, iters=4)
    # time: the slowest rank's mean; distribution: per-iteration max 2, 2, 5, 10
    assert row["time_us"] == 4.0 and row["time_min_us"] == 2.0
    assert row["time_p50_us"] == 2.0 and row["time_p99_us"] == 10.0
    assert (row["slowest_rank"], row["slowest_rank_time_us"]) == (0, 4.0)
    assert row["algbw_gbps"] == pytest.approx(1000 / 4.0 / 1e3)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 1.0)  # 2(n-1)/n at n=2
    assert (row["count"], row["wrong"], row["world_size"]) == (250, 3, 2)
    barrier = collectives.build_result([[5.0], [7.0]], [5.0, 7.0], 0, op="barrier", dtype="float32",
                                       reduce_op="sum", size_bytes=123, root=0, in_place=False,
                                       iters=1)
    assert (barrier["size_bytes"], barrier["count"], barrier["algbw_gbps"],
            barrier["busbw_gbps"], barrier["time_us"]) == (0, 0, 0.0, 0.0, 7.0)


def test_vocabulary_maps_to_torch():
    for name, size in spec.DTYPE_SIZES.items():
        assert collectives.torch_dtype(name).itemsize == size
    for name in spec.REDUCE_OPS:
        collectives.torch_reduce_op(name)
    with pytest.raises(ValueError, match="dtype"):
        collectives.torch_dtype("complex64")
    with pytest.raises(ValueError, match="reduce_op"):
        collectives.torch_reduce_op("band")


# ---- the algo-sweep runner on gloo (spawned ranks, as the executor runs it) -----------------

def _sweep_main(rank: int, port: int, path: str, n: int) -> None:
    import torch.distributed as dist

    from ringleader import jobspec
    from worker.kinds import RUNNERS, RunContext

    payload: dict = {}
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                                timeout=datetime.timedelta(seconds=60))
        job = jobspec.normalize(pb.JobSpec(world_size=n, algo_sweep=pb.AlgoSweepSpec(sizes=[8, 4096], iters=5)))
        sent: list = []
        ctx = RunContext("j", rank, torch.device("cpu"), types.SimpleNamespace(value=0), sent.append)
        outcome = RUNNERS[job.kind](job, ctx)
        kind, raw = outcome.serialized()
        payload = {"kind": kind, "result": raw.hex(), "progress": [(p.done, p.total) for p in sent]}
        dist.destroy_process_group()
    except BaseException:
        payload["traceback"] = traceback.format_exc()
    with open(path, "w") as f:
        json.dump(payload, f)


def test_algo_sweep_runner_on_gloo(tmp_path):
    payloads = run_ranks(_sweep_main, 2, tmp_path, args=(2,))
    assert payloads[0]["result"] == payloads[1]["result"], "every rank reports the same outcome"
    assert payloads[0]["kind"] == "algo_sweep"
    r = pb.AlgoSweepResult.FromString(bytes.fromhex(payloads[0]["result"]))
    assert (r.op, r.dtype, r.world_size, r.mode, list(r.algos)) == ("all_reduce", "float32", 2, "eager", ["gloo"])
    assert [(x.size_bytes, x.algo, x.iters, x.wrong) for x in r.results] == [(8, "gloo", 5, 0), (4096, "gloo", 5, 0)]
    assert [(b.size_bytes, b.algo, b.speedup) for b in r.best] == [(8, "gloo", 1.0), (4096, "gloo", 1.0)]
    assert [(t.min_bytes, t.max_bytes, t.algo) for t in r.table] == [(8, 0, "gloo")]
    assert payloads[0]["progress"] == [[0, 2], [1, 2]]


# ---- a one-op job: the timed op is the checked op --------------------------------------------

def _one_op_main(rank: int, port: int, path: str, n: int) -> None:
    """One rank: a one-op measurement (iters 1, no warm-up) of all_reduce and of reduce (root 1),
    clean, then with rank 1's op writing one wrong element after it ran (a corrupting device)."""
    import torch.distributed as dist

    payload: dict = {"runs": []}
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                                timeout=datetime.timedelta(seconds=60))
        honest_init = collectives.OpSetup.__init__
        for corrupt in (False, True):
            def init(self, *a, **k):
                honest_init(self, *a, **k)
                run = self.run

                def corrupting_run():
                    run()
                    if self.out is not None and dist.get_rank() == 1:
                        self.out.view(-1)[0] += 1
                self.run = corrupting_run if corrupt else run
            collectives.OpSetup.__init__ = init
            collectives.forget_setups()  # no honest setup kept from the clean round
            for op, root in (("all_reduce", 0), ("reduce", 1)):
                counter = types.SimpleNamespace(value=0)
                args = dict(op=op, dtype="float32", reduce_op="sum", size_bytes=4096, root=root, in_place=False,
                            device=torch.device("cpu"))
                local = collectives.measure(**args, iters=1, warmup=0, counter=counter)
                row = collectives.summarize(local, **args)
                payload["runs"].append({"op": op, "corrupt": corrupt, "ops": counter.value, "local_wrong": local.wrong,
                                        "wrong": row["wrong"], "iters": row["iters"]})
        collectives.OpSetup.__init__ = honest_init
        # Setups kept between measurements of one shape (small ones only), until forgotten.
        made: list = []

        def counting(self, *a, **k):
            made.append(a[0])
            honest_init(self, *a, **k)
        collectives.OpSetup.__init__ = counting
        collectives.forget_setups()
        cpu = torch.device("cpu")
        for size in (4096, 4096, 4 << 20, 4 << 20, 4096):
            local = collectives.measure("all_reduce", "float32", "sum", size, iters=1, warmup=0, in_place=False,
                                        root=0, device=cpu)
            payload.setdefault("kept_wrong", []).append(local.wrong)
        payload["made"] = len(made)
        collectives.forget_setups()
        collectives.measure("all_reduce", "float32", "sum", 4096, iters=1, warmup=0, in_place=False, root=0, device=cpu)
        payload["made_after_forget"] = len(made)
        collectives.OpSetup.__init__ = honest_init
        # Auto iterations: probed once per shape while the group lives, then as agreed.
        auto = []
        for forget in (False, False, True, False):
            if forget:
                collectives.forget_setups()
            counter = types.SimpleNamespace(value=0)
            local = collectives.measure("all_reduce", "float32", "sum", 4096, iters=spec.AUTO_ITERS, warmup=0,
                                        in_place=False, root=0, device=cpu, counter=counter)
            auto.append((counter.value, local.iters, local.wrong))
        payload["auto"] = auto
        # Refilled between jobs: the next one-op job of the shape starts with its op, its output
        # checked as ever (inputs spoiled after the refill are caught).
        fills: list = []
        honest_fill = collectives.OpSetup.fill

        def counting_fill(self, seed):
            fills.append(seed)
            honest_fill(self, seed)
        collectives.OpSetup.fill = counting_fill
        collectives.forget_setups()
        refilled = []
        for spoil in (False, False, True):
            collectives.refill_kept()
            if spoil and dist.get_rank() == 0:
                next(iter(collectives._SETUPS.values())).inputs[0][0].view(-1)[0] += 1
            before = len(fills)
            local = collectives.measure("all_reduce", "float32", "sum", 4096, iters=1, warmup=0, in_place=False,
                                        root=0, device=cpu)
            refilled.append((len(fills) - before, local.wrong))
        collectives.OpSetup.fill = honest_fill
        payload["refilled"] = refilled
        dist.destroy_process_group()
    except BaseException:
        payload["traceback"] = traceback.format_exc()
    with open(path, "w") as f:
        json.dump(payload, f)


def test_a_one_op_measurement_checks_its_timed_op_and_issues_no_other(tmp_path):
    """iters 1 and no warm-up (a warm start's trivial job): one op in all, on the check's inputs,
    and its output is checked: a wrong element on rank 1 is counted in every rank's row."""
    payloads = run_ranks(_one_op_main, 2, tmp_path, args=(2,))
    for rank, payload in enumerate(payloads):
        for run in payload["runs"]:
            assert (run["ops"], run["iters"]) == (1, 1), run  # no op beyond the timed one
            checked = run["op"] == "all_reduce" or rank == 1  # reduce: only the root has an output
            expected_local = 1 if run["corrupt"] and rank == 1 and checked else 0
            assert run["local_wrong"] == expected_local, (rank, run)
            assert run["wrong"] == (1 if run["corrupt"] else 0), (rank, run)
        # 4 KiB made once for three jobs, 4 MiB (over SETUP_KEPT_BYTES) made for each; made again once forgotten
        assert (payload["made"], payload["made_after_forget"]) == (3, 4), payload
        assert payload["kept_wrong"] == [0] * 5
        (probed, n_iters, _), *later = payload["auto"]
        assert probed == calibrate.PROBE_ITERS + n_iters + 1  # the probe, the timed ops, the check op
        assert [a[2] for a in payload["auto"]] == [0, 0, 0, 0]
        assert later[0] == [n_iters + 1, n_iters, 0], "the second job of the shape probed again"
        assert later[1][0] == calibrate.PROBE_ITERS + later[1][1] + 1, "forgotten with the group: probed again"
        assert later[2] == [later[1][1] + 1, later[1][1], 0]
    assert payloads[0]["auto"] == payloads[1]["auto"], "every rank ran the same ops"
    for payload in payloads:  # the first job fills its new setup; then none fills: it was refilled
        assert payload["refilled"] == [[1, 0], [0, 0], [0, 1]], payload["refilled"]  # the spoilt sum: 1 wrong
