"""worker.workloads (ping-pong, gradient averaging, DDP training) on real gloo groups.

Process start is slow, so one spawned group of 2 ranks runs every 2-rank case and one of 3 ranks
the pairwise sweep, both started together by a module-scoped fixture; the tests then only look
at what the ranks wrote back. Pure helpers are tested in this process.
"""

from __future__ import annotations

import datetime
import json
import traceback
import types

import pytest
import torch

from ports import free_port
from ranks import rank_context
from worker.workloads import gradavg, p2p, train

P2P_SIZES = [1, 4096, 1 << 20]
P2P_ITERS, P2P_WARMUP = 4, 1
GA_NUMEL, GA_ITERS, GA_WARMUP = 100_003, 3, 1
TRAIN = dict(steps=30, batch_size=32, lr=0.05, seed=7)


def _run_cases(rank: int, n: int, out: dict) -> None:
    """Every case of one group, in the same order on every rank."""
    import torch.distributed as dist

    cpu = torch.device("cpu")
    if n == 3:
        counter = types.SimpleNamespace(value=0)
        out["pairwise"] = p2p.ping_pong([2048], iters=3, warmup=1, mode="blocking", device=cpu,
                                        counter=counter, pairs=p2p.all_ordered_pairs(n))
        out["pairwise_ops"] = counter.value
        return

    for mode in p2p.MODES:
        counter = types.SimpleNamespace(value=0)
        out[f"p2p_{mode}"] = p2p.ping_pong(P2P_SIZES, iters=P2P_ITERS, warmup=P2P_WARMUP,
                                           mode=mode, device=cpu, counter=counter)
        out[f"p2p_{mode}_ops"] = counter.value
    errors = []
    for pairs in ([(0, 0)], [(0, 2)], [(0, 1, 2)]):
        try:
            p2p.ping_pong([8], iters=1, warmup=0, mode="blocking", device=cpu, pairs=pairs)
        except ValueError as err:
            errors.append(str(err))
    out["p2p_errors"] = errors

    counter = types.SimpleNamespace(value=0)
    out["gradavg"] = gradavg.gradient_average(GA_NUMEL, iters=GA_ITERS, warmup=GA_WARMUP,
                                              device=cpu, counter=counter)
    out["gradavg_ops"] = counter.value
    # A caller's own gloo group, and the SUM-then-divide path for backends without float AVG.
    host_group = dist.new_group(backend="gloo")
    native = gradavg._native_avg
    gradavg._native_avg = lambda backend: False
    try:
        out["gradavg_fallback"] = gradavg.gradient_average(1000, iters=2, warmup=0, device=cpu,
                                                           host_group=host_group)
    finally:
        gradavg._native_avg = native
    dist.destroy_process_group(host_group)

    for model in train.MODELS:
        counter = types.SimpleNamespace(value=0)
        seen = []
        out[f"train_{model}"] = train.train(model, **TRAIN, device=cpu, counter=counter,
                                            on_step=lambda step, loss: seen.append([step, loss]))
        out[f"train_{model}_ops"] = counter.value
        out[f"train_{model}_on_step"] = seen
    out["train_linear_again"] = train.train("linear", **TRAIN, device=cpu)


def _rank_main(rank: int, n: int, port: int, path: str) -> None:
    """One rank (spawn target, so module level): run the cases, write what it saw as JSON."""
    import warnings

    import torch.distributed as dist

    warnings.simplefilter("error")  # as strict as pytest's filterwarnings=error
    torch.set_num_threads(1)  # 5 processes share 2 cores
    payload: dict = {}
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=n, timeout=datetime.timedelta(seconds=60))
        _run_cases(rank, n, payload)
        dist.destroy_process_group()
    except BaseException:
        payload["traceback"] = traceback.format_exc()
    with open(path, "w") as f:
        json.dump(payload, f)



@pytest.fixture(scope="module")
def groups(tmp_path_factory) -> dict[int, list[dict]]:
    """{world size: [payload of each rank]} for a 2-rank and a 3-rank group run side by side."""
    ctx = rank_context()
    tmp = tmp_path_factory.mktemp("workloads")
    procs, paths = {}, {}
    for n in (2, 3):
        port = free_port("127.0.0.1")
        paths[n] = [str(tmp / f"world{n}-rank{r}.json") for r in range(n)]
        procs[n] = [ctx.Process(target=_rank_main, args=(r, n, port, paths[n][r]))
                    for r in range(n)]
    for p in (p for ps in procs.values() for p in ps):
        p.start()
    for p in (p for ps in procs.values() for p in ps):
        p.join(timeout=150)
    for p in (p for ps in procs.values() for p in ps):
        if p.is_alive():
            p.kill()
            p.join()
    result = {}
    for n, ps in paths.items():
        result[n] = []
        for r, path in enumerate(ps):
            try:
                with open(path) as f:
                    payload = json.load(f)
            except FileNotFoundError:
                pytest.fail(f"rank {r} of {n} wrote nothing (exit code {procs[n][r].exitcode})")
            assert "traceback" not in payload, f"rank {r} of {n} failed:\n{payload['traceback']}"
            result[n].append(payload)
    return result


def _same_on_every_rank(payloads: list[dict], key: str):
    value = payloads[0][key]
    assert all(p[key] == value for p in payloads), f"{key} differs between ranks"
    return value


# ---- ping-pong ----------------------------------------------------------------------------------

ROW_KEYS = {"src", "dst", "size_bytes", "latency_us", "latency_min_us", "latency_p50_us",
            "bandwidth_gbps", "wrong", "mode", "iters"}


@pytest.mark.parametrize("mode", p2p.MODES)
def test_ping_pong_rows(groups, mode):
    payloads = groups[2]
    rows = _same_on_every_rank(payloads, f"p2p_{mode}")
    assert [(r["src"], r["dst"], r["size_bytes"]) for r in rows] == [(0, 1, s) for s in P2P_SIZES]
    for r in rows:
        assert set(r) == ROW_KEYS
        assert (r["mode"], r["iters"], r["wrong"]) == (mode, P2P_ITERS, 0)
        assert 0 < r["latency_min_us"] <= r["latency_p50_us"]
        assert r["latency_min_us"] <= r["latency_us"]
        assert r["bandwidth_gbps"] == pytest.approx(r["size_bytes"] / (r["latency_us"] * 1e-6) / 1e9)
    # every round trip (warm-up, timed, the check) is a send and a receive on both ends
    per_size = 2 * (P2P_WARMUP + P2P_ITERS + 1)
    assert [p[f"p2p_{mode}_ops"] for p in payloads] == [per_size * len(P2P_SIZES)] * 2


def test_ping_pong_rejects_bad_pairs_on_every_rank(groups):
    errors = _same_on_every_rank(groups[2], "p2p_errors")
    assert len(errors) == 3 and all(e.startswith("pairs: ") for e in errors)


def test_pairwise_over_three_ranks(groups):
    payloads = groups[3]
    rows = _same_on_every_rank(payloads, "pairwise")
    assert [(r["src"], r["dst"]) for r in rows] == p2p.all_ordered_pairs(3)
    assert len(rows) == 6 and all(r["wrong"] == 0 and r["bandwidth_gbps"] > 0 for r in rows)
    # each rank is in 4 of the 6 pairs, each pair 3 timed + 1 warm-up + 1 checked round trips
    assert [p["pairwise_ops"] for p in payloads] == [4 * 2 * 5] * 3
    m = p2p.pairwise_matrix(rows, 3, 2048)
    assert m["size_bytes"] == 2048
    assert [[v is None for v in line] for line in m["matrix"]] == \
        [[True, False, False], [False, True, False], [False, False, True]]
    assert m["median_gbps"] > 0
    for r in rows:
        assert m["matrix"][r["src"]][r["dst"]] == r["bandwidth_gbps"]


def test_all_ordered_pairs():
    assert p2p.all_ordered_pairs(1) == []
    assert p2p.all_ordered_pairs(3) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]


def test_pairwise_matrix_flags_a_slow_pair():
    gbps = {(0, 1): 10.0, (0, 2): 11.0, (1, 0): 9.0, (1, 2): 10.5, (2, 0): 9.5, (2, 1): 3.0}
    rows = [dict(src=s, dst=d, size_bytes=1 << 20, bandwidth_gbps=v) for (s, d), v in gbps.items()]
    rows.append(dict(src=0, dst=1, size_bytes=4096, bandwidth_gbps=0.1))  # another size: ignored
    m = p2p.pairwise_matrix(rows, 4, 1 << 20)
    assert m["median_gbps"] == pytest.approx(9.75)
    assert m["matrix"][2][1] == 3.0 and m["matrix"][0][1] == 10.0
    assert all(m["matrix"][i][i] is None for i in range(4))
    assert m["matrix"][3] == [None] * 4 and all(line[3] is None for line in m["matrix"])  # unmeasured
    assert m["flagged"] == [dict(src=2, dst=1, gbps=3.0, ratio_to_median=pytest.approx(3.0 / 9.75))]
    assert p2p.pairwise_matrix([], 2, 8) == {"size_bytes": 8, "matrix": [[None, None], [None, None]],
                                             "median_gbps": 0.0, "flagged": []}


def test_ping_pong_pattern_and_check():
    buf = torch.empty(1000, dtype=torch.uint8)
    p2p._fill(buf, p2p._CHECK_SEED)
    assert buf.unique().numel() > 200, "fresh, non-constant bytes"
    assert int(buf.max()) < p2p._SENTINEL
    assert p2p._count_wrong(buf, p2p._CHECK_SEED) == 0
    assert p2p._count_wrong(buf, p2p._TIMED_SEED) > 900, "the check data differs from the timed data"
    buf[17] += 1
    assert p2p._count_wrong(buf, p2p._CHECK_SEED) == 1
    assert p2p._count_wrong(torch.full((1000,), p2p._SENTINEL, dtype=torch.uint8), 1) == 1000


@pytest.mark.parametrize("kwargs,field", [
    (dict(mode="eager"), "mode"), (dict(sizes=[]), "sizes"), (dict(sizes=[0]), "sizes"),
    (dict(iters=0), "iters"), (dict(warmup=-1), "warmup"),
])
def test_ping_pong_validates_before_communicating(kwargs, field):
    args = dict(sizes=[8], iters=1, warmup=0, mode="blocking", device="cpu") | kwargs
    with pytest.raises(ValueError, match=f"^{field}: "):
        p2p.ping_pong(args.pop("sizes"), **args)  # no process group here: raises first


# ---- gradient averaging -----------------------------------------------------------------------

GA_KEYS = {"numel", "size_bytes", "device_time_us", "host_time_us", "speedup", "device_ok",
           "host_ok", "max_rel_error", "max_abs_error", "world_size", "iters"}


@pytest.mark.parametrize("key", ["gradavg", "gradavg_fallback"])
def test_gradient_average(groups, key):
    payloads = groups[2]
    r = _same_on_every_rank(payloads, key)
    assert set(r) == GA_KEYS
    numel, iters = (GA_NUMEL, GA_ITERS) if key == "gradavg" else (1000, 2)
    assert (r["numel"], r["size_bytes"], r["world_size"], r["iters"]) == (numel, 4 * numel, 2, iters)
    assert r["device_ok"] is True and r["host_ok"] is True
    assert 0 <= r["max_rel_error"] < 1e-6 and 0 <= r["max_abs_error"] < 1e-3
    assert r["device_time_us"] > 0 and r["host_time_us"] > 0
    assert r["speedup"] == pytest.approx(r["host_time_us"] / r["device_time_us"])
    if key == "gradavg":  # one all_reduce per run of each path: warm-up, timed, checked
        assert [p["gradavg_ops"] for p in payloads] == [2 * (GA_WARMUP + GA_ITERS + 1)] * 2


def test_gradient_average_check_catches_errors():
    n = 3
    grad = torch.empty(5000, dtype=torch.float32)
    gradavg._fill(grad, rank=(n - 1) / 2)  # the exact average, as every rank should end with
    ok, max_abs, max_rel = gradavg._errors(grad, n)
    assert ok and max_rel < 1e-7
    grad[4321] *= 1 + 1e-4
    ok, max_abs, max_rel = gradavg._errors(grad, n)
    assert not ok and max_rel == pytest.approx(1e-4, rel=1e-2)
    grad[1] = float("nan")
    assert gradavg._errors(grad, n)[0] is False


@pytest.mark.parametrize("kwargs,field", [(dict(numel=0), "numel"), (dict(iters=0), "iters"),
                                          (dict(warmup=-1), "warmup")])
def test_gradient_average_validates(kwargs, field):
    args = dict(numel=10, iters=1, warmup=0, device="cpu") | kwargs
    with pytest.raises(ValueError, match=f"^{field}: "):
        gradavg.gradient_average(args.pop("numel"), **args)


# ---- training ---------------------------------------------------------------------------------

TRAIN_KEYS = {"model", "steps", "batch_size", "lr", "world_size", "loss", "step_time_ms",
              "compute_ms", "comm_ms", "comm_share", "samples_per_s", "param_max_abs_diff",
              "params"}


@pytest.mark.parametrize("model", train.MODELS)
def test_train(groups, model):
    payloads = groups[2]
    r = _same_on_every_rank(payloads, f"train_{model}")
    assert set(r) == TRAIN_KEYS
    assert (r["model"], r["steps"], r["batch_size"], r["lr"], r["world_size"]) == \
        (model, TRAIN["steps"], TRAIN["batch_size"], TRAIN["lr"], 2)
    assert r["params"] == sum(p.numel() for p in train.build_model(model).parameters())
    loss = r["loss"]
    assert len(loss) == TRAIN["steps"] and all(v > 0 for v in loss)
    first, last = sum(loss[:3]) / 3, sum(loss[-3:]) / 3
    assert loss[-1] < loss[0] and last < 0.9 * first, f"loss did not fall: {loss}"
    assert r["param_max_abs_diff"] == 0.0
    assert r["comm_ms"] > 0 and r["compute_ms"] > 0
    assert r["step_time_ms"] == pytest.approx(r["compute_ms"] + r["comm_ms"])
    assert 0 < r["comm_share"] < 1
    assert r["comm_share"] == pytest.approx(r["comm_ms"] / r["step_time_ms"])
    assert r["samples_per_s"] == pytest.approx(TRAIN["batch_size"] * 2 / (r["step_time_ms"] / 1e3))
    # on_step ran on rank 0 only, with the losses returned
    assert payloads[0][f"train_{model}_on_step"] == [[i, v] for i, v in enumerate(loss)]
    assert payloads[1][f"train_{model}_on_step"] == []
    # per step: at least one bucket all_reduce and the loss reduce, the same on every rank
    ops = _same_on_every_rank(payloads, f"train_{model}_ops")
    assert ops >= 2 * TRAIN["steps"]


def test_train_is_deterministic(groups):
    first = groups[2][0]["train_linear"]
    again = _same_on_every_rank(groups[2], "train_linear_again")
    assert again["loss"] == first["loss"]


@pytest.mark.parametrize("kwargs,field", [
    (dict(model="resnet"), "model"), (dict(steps=0), "steps"), (dict(batch_size=0), "batch_size"),
    (dict(lr=0.0), "lr"), (dict(lr=-1e-3), "lr"), (dict(lr=float("nan")), "lr"),
])
def test_train_validates(kwargs, field):
    args = dict(model="linear", steps=1, batch_size=1, lr=0.1, seed=0, device="cpu") | kwargs
    with pytest.raises(ValueError, match=f"^{field}: "):
        train.train(args.pop("model"), **args)
