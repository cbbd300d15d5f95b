"""The table of job kinds (ringleader/kinds.py): every list of kinds is read from it, a new kind
is one entry plus its functions, and the executor derives the checked job without checking again."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from coordinator.shell.facade import Coordinator
from coordinator.store.memory import MemoryJobStore
from dashboard import api, spec_in
from ringleader import jobspec, kinds
from ringleader_app import cli, commands, table
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

ROOT = Path(__file__).resolve().parents[2]
KIND_ONEOF = [f.name for f in pb.JobSpec.DESCRIPTOR.oneofs_by_name["kind"].fields]
ROLES = ("check", "view", "runner", "flags", "from_args", "table")


def test_every_entry_names_a_proto_member_and_functions_that_exist():
    assert len(set(kinds.names())) == len(kinds.TABLE)
    for k in kinds.TABLE:
        assert k.name in KIND_ONEOF, k.name
        for role in ROLES:
            if getattr(k, role):
                assert callable(k.resolve(role)), (k.name, role)
        if k.result:  # the outcome travels in JobDone's oneof and lands in the Job member of that name
            done = wpb.JobDone.DESCRIPTOR.fields_by_name[k.result]
            assert done.containing_oneof.name == "outcome"
            assert done.message_type is pb.Job.DESCRIPTOR.fields_by_name[k.result].message_type
    checks = ("link_matrix", "gpu_check", "sdc_check")
    assert kinds.result_fields() == ("p2p", "gradient_average", "train", "algo_sweep", *checks)
    assert set(kinds.listed_names()) == {*kinds.get("collective").ops, "p2p", "gradient_average", "train",
                                         "algo_sweep", *checks}


def test_an_unknown_kind_or_filter_is_refused_naming_the_field():
    with pytest.raises(InvalidSpec) as err:
        kinds.get("link_matrix_v2")
    assert err.value.field == "kind" and "algo_sweep" in err.value.message
    kinds.check_listed("")
    kinds.check_listed("algo_sweep")
    with pytest.raises(InvalidSpec) as err:
        kinds.check_listed("collective")  # listings show a sweep by its op, never as "collective"
    assert err.value.field == "op"


def _action(parser: argparse.ArgumentParser, command: str, flag: str) -> argparse.Action:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return next(a for a in sub._actions if flag in a.option_strings)


def _rest(core: Coordinator) -> httpx.AsyncClient:
    app = FastAPI()
    app.include_router(api.router(core))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rest")


def _rest_lists() -> tuple[list[str], list[str], list[str]]:
    """What REST offers: the `op` filter's enum, the submit body's kinds, GET /kinds."""
    async def get():
        async with _rest(Coordinator(MemoryJobStore())) as c:
            return (await c.get("/openapi.json")).json(), (await c.get("/api/v1/kinds")).json()

    doc, listed = asyncio.run(get())
    op = next(p for p in doc["paths"]["/api/v1/jobs"]["get"]["parameters"] if p["name"] == "op")
    enum = next(s["enum"] for s in op["schema"]["anyOf"] if "enum" in s)
    body = [s["required"][0] for s in doc["components"]["schemas"]["JobSpecIn"]["oneOf"]]
    return enum, body, [n for k in listed["kinds"] for n in k["listed_as"]]


def test_cli_rest_and_ui_lists_are_the_table():
    parser = cli.build_parser()
    assert _action(parser, "submit", "--kind").choices == [k.cli_name for k in kinds.TABLE]
    assert "algo_sweep" in _action(parser, "jobs", "--op").completer.choices
    assert list(_action(parser, "jobs", "--op").completer.choices) == list(kinds.listed_names())
    enum, body, ui = _rest_lists()
    assert enum == ui == list(kinds.listed_names())
    assert body == list(kinds.names())
    # The UI keeps no list of its own: it reads GET /api/v1/kinds.
    app_js = (ROOT / "dashboard/static/app.js").read_text()
    assert 'getJSON("/api/v1/kinds")' in app_js
    for k in kinds.TABLE:
        assert not re.search(rf'["\']{k.name}["\']\s*,\s*["\']', app_js), f"a hard-coded list with {k.name}"


# ---- a test-only kind: one entry, and its functions in one module (this one) -------------------

TEST_KIND = KIND_ONEOF[-1]  # a proto member; its real entry, if any, is set aside for the test
MESSAGE = pb.JobSpec.DESCRIPTOR.fields_by_name[TEST_KIND].message_type.name


def check_test_kind(out: pb.JobSpec) -> None:
    msg = getattr(out, TEST_KIND)
    msg.seed = msg.seed or 7
    if out.world_size > 4:
        raise InvalidSpec(f"{TEST_KIND}.seed", "the test kind runs on at most 4 ranks")


def view_test_kind(out: pb.JobSpec) -> jobspec.ValidJob:
    return jobspec.valid(out, total=out.world_size)


def run_test_kind(job, ctx):
    from worker.kinds import Outcome

    return Outcome(message=getattr(pb.Job(), TEST_KIND).__class__())


def flags_of_test_kind(group) -> None:
    group.add_argument("--test-seed", type=int, default=None)


def spec_of_test_kind(a: argparse.Namespace):
    return getattr(pb, MESSAGE)(**({"seed": a.test_seed} if a.test_seed is not None else {}))


def table_of_test_kind(outcome) -> str:
    return f"test kind outcome: {type(outcome).__name__}"


@pytest.fixture
def extra_kind(monkeypatch):
    here = __name__
    entry = kinds.Kind(name=TEST_KIND, check=f"{here}:check_test_kind", view=f"{here}:view_test_kind",
                       runner=f"{here}:run_test_kind", result=TEST_KIND, flags=f"{here}:flags_of_test_kind",
                       from_args=f"{here}:spec_of_test_kind", table=f"{here}:table_of_test_kind", help="a test-only kind")
    monkeypatch.setattr(kinds, "TABLE", tuple(k for k in kinds.TABLE if k.name != TEST_KIND) + (entry,))
    return entry


def test_a_new_kind_is_one_entry_and_one_module(extra_kind):
    # The count this test stands for: the table, and the module its import strings name.
    touched = {kinds.__file__, *(sys.modules[kinds.resolve(getattr(extra_kind, r)).__module__].__file__
                                 for r in ROLES)}
    assert touched == {kinds.__file__, __file__}
    # The spec is checked (defaults, errors naming the field) and viewed like any other kind.
    v = jobspec.normalize(pb.JobSpec(world_size=2, **{TEST_KIND: getattr(pb, MESSAGE)()}))
    assert v.kind == v.op == TEST_KIND and getattr(v.spec, TEST_KIND).seed == 7 and v.progress_total == 2
    assert jobspec.ValidJob.from_normalized(v.spec) == v
    with pytest.raises(InvalidSpec) as err:
        jobspec.normalize(pb.JobSpec(world_size=5, **{TEST_KIND: getattr(pb, MESSAGE)()}))
    assert err.value.field == f"{TEST_KIND}.seed"
    # The CLI: --kind, its own flag, its table.
    a = cli.build_parser().parse_args(["submit", "--world-size", "2", "--kind", extra_kind.cli_name, "--test-seed", "3"])
    assert getattr(commands.spec_from_args(a), TEST_KIND).seed == 3
    job = pb.Job(spec=v.spec)
    getattr(job, TEST_KIND).SetInParent()
    assert table.outcome_table(job) == f"test kind outcome: {MESSAGE.replace('Spec', 'Result')}"
    # The worker: its runner, and its outcome in JobDone's member.
    from worker.kinds import _Runners

    outcome = _Runners()[TEST_KIND](v, None)
    assert outcome.serialized()[0] == TEST_KIND
    # REST: submitted with the generated request model, listed and filtered by its name.
    enum, body, ui = _rest_lists()
    assert TEST_KIND in enum and TEST_KIND in body and TEST_KIND in ui

    async def submit_and_list():
        async with _rest(Coordinator(MemoryJobStore())) as c:
            made = await c.post("/api/v1/jobs", json={"world_size": 2, "queue": True, TEST_KIND: {"seed": 1}})
            wrong = await c.post("/api/v1/jobs", json={"world_size": 2, TEST_KIND: {"seed": True}})
            listed = await c.get("/api/v1/jobs", params={"op": TEST_KIND})
            return made, wrong, listed.json()

    made, wrong, listed = asyncio.run(submit_and_list())
    assert made.status_code == 201, made.text
    assert wrong.status_code == 422 and wrong.json()["detail"][0]["loc"][-1] == "seed"
    assert [j["id"] for j in listed["jobs"]] == [made.json()["id"]]


def test_outcome_of_the_wrong_type_is_refused():
    from worker.kinds import Outcome

    assert Outcome().serialized() is None  # a sweep's rows travel in `results`
    assert Outcome(message=pb.TrainResult(steps=3)).serialized() == ("train", pb.TrainResult(steps=3).SerializeToString())
    with pytest.raises(TypeError, match="a SizeResult is no job kind's result"):
        Outcome(message=pb.SizeResult()).serialized()


def test_request_model_generated_from_a_proto_message_is_strict():
    model = spec_in.proto_input_model(pb.P2PSpec.DESCRIPTOR)
    assert model(warmup=None).warmup is None and model().iters == 0 and model().mode == ""
    for bad in ({"pairwise": 1}, {"iters": 2**32}, {"factor": float("nan")}, {"mode": "x" * 257}, {"nope": 1}):
        with pytest.raises(ValueError):
            model(**bad)


# ---- normalized once ---------------------------------------------------------------------------

SPECS = [
    pb.JobSpec(world_size=3, collective=pb.CollectiveSpec(op="all_gather", sizes=[8, 100, 1 << 20])),
    pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="barrier")),
    pb.JobSpec(world_size=4, collective=pb.CollectiveSpec(op="reduce", root=3, min_bytes=64, max_bytes=1 << 16,
                                                          factor=4, algo="gloo", warmup=0, in_place=True)),
    pb.JobSpec(world_size=3, p2p=pb.P2PSpec(pairwise=True, sizes=[4096], mode="async")),
    pb.JobSpec(world_size=2, p2p=pb.P2PSpec(max_bytes=1 << 10)),
    pb.JobSpec(world_size=2, gradient_average=pb.GradientAverageSpec()),
    pb.JobSpec(world_size=2, train=pb.TrainSpec(model="mlp", steps=7)),
    pb.JobSpec(world_size=2, algo_sweep=pb.AlgoSweepSpec(sizes=[6, 8, 1 << 20], algos=["gloo"])),
    pb.JobSpec(world_size=8, algo_sweep=pb.AlgoSweepSpec(dtype="bfloat16", graph=True)),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.WhichOneof("kind"))
def test_the_executor_derives_what_normalize_returned(spec):
    v = jobspec.normalize(spec)
    assert jobspec.ValidJob.from_normalized(v.spec) == v
    assert jobspec.normalize(v.spec) == v  # a normalized spec is a fixed point


def test_the_executor_does_not_check_again():
    v = jobspec.normalize(pb.JobSpec(world_size=2, train=pb.TrainSpec()))
    v.spec.train.lr = -1.0  # what normalize refuses, from_normalized derives without looking
    assert jobspec.ValidJob.from_normalized(v.spec).progress_total == 50
    with pytest.raises(InvalidSpec, match="train.lr"):
        jobspec.normalize(v.spec)
    with pytest.raises(InvalidSpec) as err:  # a spec no coordinator normalized is refused, not guessed at
        jobspec.ValidJob.from_normalized(pb.JobSpec(world_size=2, train=pb.TrainSpec()))
    assert err.value.field == "spec"


@pytest.mark.parametrize("spec, field", [
    (pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="all_reduce", sizes=range(1, 400_001))),
     "collective.sizes"),
    (pb.JobSpec(world_size=2, p2p=pb.P2PSpec(sizes=range(1, 40_001))), "p2p.sizes"),
    (pb.JobSpec(world_size=2, algo_sweep=pb.AlgoSweepSpec(algos=["gloo"] * 30_000)), "algo_sweep.algos"),
    (pb.JobSpec(world_size=6000, placement=pb.Placement(worker_ids=[f"worker-{i:08d}" for i in range(6000)]),
                collective=pb.CollectiveSpec(op="all_reduce", sizes=range(1, 60))), "placement.worker_ids"),
])
def test_an_oversized_spec_names_the_list_that_makes_it_large(spec, field):
    assert spec.ByteSize() > jobspec.MAX_SPEC_BYTES
    with pytest.raises(InvalidSpec) as err:
        jobspec.normalize(spec)
    assert err.value.field == field and "bytes serialized" in err.value.message
