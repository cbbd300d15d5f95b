"""Each built-in job kind's part of `ringleader submit`: `KIND_flags` adds its own flags (an
argparse group), `KIND_spec` builds its spec message from the parsed flags. The table of kinds
(ringleader/kinds.py) names them.

Flags several kinds share (the sweep's --sizes/--min-bytes/--max-bytes/--factor, --iters,
--warmup, --dtype, --graph, --algo) are the command's own (ringleader_app/cli.py). Unset flags
stay None, so the spec's defaults apply and an explicit 0 still reaches validation.
"""

from __future__ import annotations

import argparse

from ringleader import jobspec
from ringleader import spec as specs
from ringleader_app.argtypes import size
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb


def _completer(action: argparse.Action, choices) -> None:
    import argcomplete

    action.completer = argcomplete.completers.ChoicesCompleter(choices)  # type: ignore[attr-defined]


def given(a: argparse.Namespace, *names: str) -> dict:
    """The flags among `names` the user gave (unset ones stay unset, for the spec's defaults)."""
    return {n: getattr(a, n) for n in names if getattr(a, n, None) is not None}


def sweep(a: argparse.Namespace) -> dict:
    return dict(sizes=a.sizes) if a.sizes else given(a, "min_bytes", "max_bytes", "factor")


def loop(a: argparse.Namespace) -> dict:
    return given(a, "iters", "warmup")


def collective_flags(g) -> None:
    _completer(g.add_argument("--op", default="", help="collective jobs: " + ", ".join(specs.OPS)), specs.OPS)
    _completer(g.add_argument("--reduce-op", default="", help=", ".join(specs.REDUCE_OPS)
                              + f" (default {specs.DEFAULTS['reduce_op']})"), specs.REDUCE_OPS)
    g.add_argument("--in-place", action="store_true",
                   help="output in the input buffer (all_gather, reduce_scatter, gather, scatter; "
                        "all_reduce, reduce and broadcast always run in one buffer)")
    g.add_argument("--root", "-r", type=int, default=0, help="the root rank of rooted ops (default 0)")


def collective_spec(a: argparse.Namespace) -> pb.CollectiveSpec:
    if not a.op:
        raise InvalidSpec("collective.op", "required for collective jobs (--op all_reduce, ...)")
    return pb.CollectiveSpec(op=a.op, dtype=a.dtype, reduce_op=a.reduce_op, in_place=a.in_place, root=a.root,
                             graph=a.graph, algo=a.algo, **sweep(a), **loop(a))


def p2p_flags(g) -> None:
    g.add_argument("--pairwise", action="store_true", help="p2p: every ordered pair in turn -> bandwidth matrix")
    g.add_argument("--async", dest="async_", action="store_true", help="p2p: isend/irecv + wait (default send/recv)")


def p2p_spec(a: argparse.Namespace) -> pb.P2PSpec:
    return pb.P2PSpec(pairwise=a.pairwise, mode="async" if a.async_ else "blocking", **sweep(a), **loop(a))


def gradient_average_flags(g) -> None:
    g.add_argument("--size", type=size, default=None, help="gradient-average: gradient bytes (default 64M)")


def gradient_average_spec(a: argparse.Namespace) -> pb.GradientAverageSpec:
    return pb.GradientAverageSpec(size_bytes=a.size or 0, **loop(a))


def train_flags(g) -> None:
    _completer(g.add_argument("--model", default="", help="train: linear (default) or mlp"), jobspec.MODELS)
    g.add_argument("--steps", type=int, default=None, help="train: steps (default 50)")
    g.add_argument("--batch-size", type=int, default=None, help="train: per-rank batch size (default 64)")
    g.add_argument("--lr", type=float, default=None, help="train: learning rate (default 0.05)")
    g.add_argument("--seed", type=int, default=0, help="train: data and weight seed")


def train_spec(a: argparse.Namespace) -> pb.TrainSpec:
    return pb.TrainSpec(model=a.model, seed=a.seed, **given(a, "steps", "batch_size", "lr"))


def algo_sweep_spec(a: argparse.Namespace) -> pb.AlgoSweepSpec:
    return pb.AlgoSweepSpec(algos=[x for x in a.algo.split(",") if x.strip()], graph=a.graph, dtype=a.dtype,
                            **sweep(a), **loop(a))
