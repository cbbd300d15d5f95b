"""The table of job kinds: each kind of job is one `Kind` entry in `TABLE`, read by everything that
lists or branches on kinds (the spec check, the executor's runner, the outcome's field on Job and
JobDone, the CLI's flags, choices, completion and tables, the REST filters and schemas, the UI).

Adding a kind = the proto's oneof member and result message, one entry here, its check and its
runner (the test in tests/unit/test_kinds_table.py counts it). Functions are named by import
string ("module:function"), resolved on first use, as uvicorn's tables do: this module stays the
bottom of the vocabulary (no torch: runners import it in the executor only; no cycle: the checks
live in modules that import this one).

What an entry's functions are:
  check(spec)        fills the kind's defaults into `spec` (a JobSpec whose common fields are
                     checked) in place; raises InvalidSpec naming the field ("p2p.mode").
  view(spec)         the ValidJob of a spec `check` has passed (sizes, pairs, memory, progress
                     total, anything a runner needs, e.g. a schedule the coordinator planned from
                     the spec alone): no check, so the executor derives it cheaply.
  runner(job, ctx)   runs on every rank (worker/kinds.py RunContext) and returns an Outcome.
  flags(group)       adds the kind's own flags to `ringleader submit` (an argparse group; flags
                     several kinds share, such as --sizes and --iters, are the command's).
  from_args(args)    the kind's spec message from the `ringleader submit` flags.
  table(outcome)     the CLI's text of its outcome: the `result` member, or Job.results' rows.
  header(spec)       the one-line header the web UI shows above a job ("gpu_check · 8192 · bf16";
                     ringleader/headers.py), served by GET /api/v1/kinds/header.
A fleet health check's entry also has:
  verdicts(result, ranks)  {rank: (verdict, figure, expected)} of a finished check
                     (coordinator/health/verdicts.py), which the control core applies as it ends;
  assemble(spec, workers, models, evidence)  the check's `result` message, built by the
                     coordinator from every rank's own evidence ({rank: its JobDone h49e_evidence})
                     and each worker's registration (coordinator/health/assemble.py);
  short()            the spec message a sweep or a recheck runs it with (short rounds);
  preflight          whether a job's preflight certifies its gang with it (in table order).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, replace
from typing import Any, Callable

from ringleader.errors import InvalidSpec
from ringleader.spec import OPS


@dataclass(frozen=True)
class Kind:
    """One kind of job (see the module docstring for what its import strings name)."""

    name: str  # the JobSpec oneof member, also what `jobs --op` / `?op=` filter on
    check: str
    view: str
    runner: str
    result: str  # the member of Job and JobDone holding its outcome; "" : rows in Job.results
    flags: str  # "" : only the flags the command shares between kinds
    from_args: str
    table: str
    help: str  # one line for `ringleader submit --help`
    # The names listings show and filter on: a collective sweep is listed by its op.
    ops: tuple[str, ...] = ()
    header: str = ""  # "" : ringleader.headers:{name}_header
    verdicts: str = ""  # a fleet health check's verdict function ("" : not a check)
    assemble: str = ""  # a check's result from every rank's own evidence
    short: str = ""  # a check's short settings, for sweeps and rechecks
    preflight: bool = False  # a job's preflight runs this check on its gang

    @property
    def is_check(self) -> bool:
        return bool(self.verdicts)

    @property
    def cli_name(self) -> str:
        """`ringleader submit --kind` takes it with dashes (algo-sweep)."""
        return self.name.replace("_", "-")

    @property
    def listed_as(self) -> tuple[str, ...]:
        return self.ops or (self.name,)

    def resolve(self, role: str) -> Callable[..., Any]:
        """The function this entry names for `role` ("check", "runner", ...)."""
        return resolve(getattr(self, role))


@functools.cache
def resolve(target: str) -> Callable[..., Any]:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _kind(name: str, *, result: str, help: str, ops: tuple[str, ...] = ()) -> Kind:
    """An entry whose functions follow the naming of the five kinds built in."""
    return Kind(name=name, check=f"ringleader.kindspecs:check_{name}", view=f"ringleader.kindspecs:view_{name}",
                runner=f"worker.kinds:run_{name}", result=result, flags=f"ringleader_app.kindargs:{name}_flags",
                from_args=f"ringleader_app.kindargs:{name}_spec", table=f"ringleader_app.table:{name}_table",
                help=help, ops=ops)


def _check(name: str, what: str, *, verdicts: str, preflight: bool = False, module: str = "ringleader.checks",
           verdicts_module: str = "coordinator.health.verdicts",
           assemble_module: str = "coordinator.health.assemble") -> Kind:
    """A fleet health check's entry: its spec functions in `module`, its verdict function, its
    short settings (`short_{name}` in `module`), its CLI parts in ringleader_app/check_cmds.py."""
    return Kind(name=name, check=f"{module}:check_{name}", view=f"{module}:view_{name}",
                runner=f"worker.checks.{name}:run_{name}", result=name, flags="",
                from_args=f"ringleader_app.check_cmds:{name}_spec", table=f"ringleader_app.check_cmds:{name}_table",
                help=f"fleet health check: {what} (also `ringleader check`)",
                verdicts=f"{verdicts_module}:{verdicts}", short=f"{module}:short_{name}", preflight=preflight,
                assemble=f"{assemble_module}:{name}")


TABLE: tuple[Kind, ...] = (
    replace(_kind("collective", result="", ops=OPS, help="an nccl-tests style sweep of one collective op (--op)"),
            table="ringleader_app.table:results_table"),
    _kind("p2p", result="p2p", help="point-to-point ping-pong: one-way latency and bandwidth per size"),
    _kind("gradient_average", result="gradient_average",
          help="gradient averaging on device against host staging (--size)"),
    _kind("train", result="train", help="data-parallel training on synthetic data (--model, --steps, ...)"),
    replace(_kind("algo_sweep", result="algo_sweep",
                  help="every all_reduce implementation over a size range, and the dispatch table"),
            flags=""),  # only the shared flags (--algo takes a comma-separated list)
    _check("link_matrix", "every link, in rounds of disjoint pairs", verdicts="_links"),
    _check("gpu_check", "matrix product and memory copy against same-model peers", verdicts="_gpus",
           preflight=True),
    _check("sdc_check", "silent data corruption: checksums and exact collectives", verdicts="_sdc", preflight=True),
)


def header(spec) -> str:
    """The one-line header of a job of this spec, by its kind's entry ("" for no kind)."""
    name = spec.WhichOneof("kind")
    if not name:
        return ""
    k = get(name)
    return resolve(k.header or f"ringleader.headers:{name}_header")(spec)


def checks() -> tuple[Kind, ...]:
    """The fleet health checks' entries, in table order."""
    return tuple(k for k in TABLE if k.is_check)


def names() -> tuple[str, ...]:
    return tuple(k.name for k in TABLE)


def get(name: str) -> Kind:
    for k in TABLE:
        if k.name == name:
            return k
    raise InvalidSpec("kind", f"unknown job kind {name[:64]!r}; expected one of {', '.join(names())}")


def by_cli_name(cli_name: str) -> Kind:
    return get(cli_name.replace("-", "_"))


def listed_names() -> tuple[str, ...]:
    """What job listings filter on (gRPC ListJobs, REST `?op=`, `jobs --op`, the UI): the ops
    of collective sweeps and the names of the other kinds."""
    return tuple(n for k in TABLE for n in k.listed_as)


def check_listed(op: str) -> None:
    """Refuse a listing filter no job can match ("" is no filter)."""
    if op and op not in listed_names():
        raise InvalidSpec("op", f"unknown op or job kind {op[:64]!r}; expected one of {', '.join(listed_names())}")


def result_fields() -> tuple[str, ...]:
    """The members of Job (and of JobDone's `outcome`) that hold a kind's outcome."""
    return tuple(k.result for k in TABLE if k.result)
