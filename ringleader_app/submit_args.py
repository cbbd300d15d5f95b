"""The flags of `ringleader submit`, with nccl-tests' short letters where the concept exists.

    nccl-tests            ringleader submit
    -b minbytes           -b / --min-bytes     (1K = 1024 bytes, as in nccl-tests)
    -e maxbytes           -e / --max-bytes
    -f stepfactor         -f / --factor
    -n iters              -n / --iters         (a count, or auto)
    -w warmup_iters       -w / --warmup
    -d datatype           -d / --dtype
    -r root               -r / --root
    -o op (sum, ...)      --reduce-op          (-o is the output format on every command, as in kubectl)
    -G graph launches     --graph              (on/off: the timed loop is captured once and replayed)
    -i stepbytes          --sizes              (explicit sizes; there is no byte increment)
    -c check              always on            (every op is checked; wrong elements are counted)
    -g, -t (GPUs, threads) --world-size       (long only: one rank per worker)

A short flag that meant something else before (-n was the world size, -i the iterations, -G a
switch) or that means something else in nccl-tests fails with one line naming the flag to use,
so an nccl-tests habit never becomes a silently different job.
"""

from __future__ import annotations

import argparse

from ringleader import kinds
from ringleader import spec as specs
from ringleader_app import argtypes
from ringleader.jobspec import MAX_WORLD_SIZE

# short flag -> why it is refused and what to use instead
MOVED = {
    "-i": "-i is nccl-tests' step in bytes, which ringleader does not take: give --sizes; "
          "the iteration count is -n/--iters",
    "-G": "-G takes a launch count in nccl-tests; here the graph mode is a switch: --graph",
    "-c": "the data check is always on (wrong elements are counted per size); drop -c",
    "-g": "one rank per worker: give the number of ranks with --world-size",
    "-t": "one rank per worker: give the number of ranks with --world-size",
}


class _Moved(argparse.Action):
    """A short flag kept only to say, in one line, which flag to use instead."""

    def __init__(self, option_strings, dest, **kwargs) -> None:
        kwargs.update(nargs="?", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.error(f"{option_string}: {MOVED[option_string]}")


def add_submit(s: argparse.ArgumentParser, completer) -> None:
    """Unset flags stay None so that the spec's own defaults (ringleader/spec.py) apply; op, dtype
    and reduce op are checked by the spec validation, for a one-line error naming the field. The
    flags of one kind only are the kind's (ringleader/kinds.py, ringleader_app/kindargs.py)."""
    s.epilog = ("Short flags as in nccl-tests: -b -e -f, -n iterations, -w warm-up, -d dtype, -r root. "
                "-o is the output format (nccl-tests' -o is --reduce-op here), nccl-tests' -G is --graph.")
    s.add_argument("--kind", default="collective", choices=[k.cli_name for k in kinds.TABLE],
                   help="; ".join(f"{k.cli_name}: {k.help}" for k in kinds.TABLE))
    s.add_argument("--world-size", type=int, default=None, metavar="N", help="number of ranks (required)")
    _add_sweep(s, completer)
    for flag in MOVED:
        s.add_argument(flag, action=_Moved)
    s.add_argument("--priority", type=int, default=0,
                   help="higher runs first among queued jobs (default 0; a queued job gains one level a minute)")
    s.add_argument("--name", default="", help="a label shown in listings and the web UI")
    s.add_argument("--host", default="", help="only workers on this host")
    s.add_argument("--gpu-model", default="", help='only GPUs whose name contains this, e.g. "H200"')
    s.add_argument("--workers", default="", help="exactly these worker ids, comma-separated")
    s.add_argument("--device-type", default="", choices=["", "cuda", "cpu"], metavar="{cuda,cpu}",
                   help="only workers of this device type (default: either)")
    s.add_argument("--op-timeout", type=float, default=0.0,
                   help=f"seconds without progress before failing (default {specs.DEFAULT_OP_TIMEOUT_S:g})")
    s.add_argument("--queue", action="store_true",
                   help="accept the job even if the connected workers cannot hold it now (default: refuse it)")
    s.add_argument("--queue-timeout", type=argtypes.seconds, default=None, metavar="SECONDS",
                   help="cancel the job if it is still queued after this long (default: wait forever)")
    s.add_argument("--graph", action="store_true",
                   help="capture the timed ops into a CUDA graph and replay it (NCCL; nccl-tests' -G)")
    s.add_argument("--algo", default="", help="collective: nccl, nccl:ring/ll, nccl:tree/simple, ..., symm:one_shot, "
                   "symm:two_shot; algo-sweep: a comma-separated list (default: every one available)")
    s.add_argument("--wait", action="store_true", help="show progress (on stderr), then the results")
    for k in kinds.TABLE:  # each kind's own flags, from the table
        if k.flags:
            k.resolve("flags")(s.add_argument_group(f"{k.cli_name} jobs"))


def _add_sweep(s: argparse.ArgumentParser, completer) -> None:
    dflt = specs.DEFAULTS
    s.add_argument("--min-bytes", "-b", type=argtypes.size, help=f"default {dflt['min_bytes']}")
    s.add_argument("--max-bytes", "-e", type=argtypes.size, help=f"default {specs.format_size(dflt['max_bytes'])}")
    s.add_argument("--factor", "-f", type=float, help=f"default {dflt['factor']:g}")
    s.add_argument("--sizes", type=argtypes.sizes, help="explicit sizes, e.g. 1K,1M,1G (overrides min/max/factor)")
    completer(s.add_argument("--dtype", "-d", default="", help=", ".join(specs.DTYPE_SIZES)
                             + f" (default {dflt['dtype']})"), specs.DTYPE_SIZES)
    s.add_argument("--iters", "-n", type=argtypes.iters, help="timed iterations, or auto: per size, enough for a 20 ms "
                   f"loop (collective and algo-sweep default: auto; others: {dflt['iters']})")
    s.add_argument("--warmup", "-w", type=argtypes.non_negative, help=f"warm-up iterations (default {dflt['warmup']})")


def world_size(a: argparse.Namespace) -> int:
    """The required --world-size, with the hint an nccl-tests or old habit needs when missing."""
    if a.world_size is None:
        from ringleader.errors import InvalidSpec

        hint = " (-n is the iteration count, as in nccl-tests)" if a.iters is not None else ""
        raise InvalidSpec("--world-size", f"required: the number of ranks{hint}")
    if not 1 <= a.world_size <= MAX_WORLD_SIZE:  # checked here: the message's field would not hold -1
        from ringleader.errors import InvalidSpec

        raise InvalidSpec("world_size", f"must be between 1 and {MAX_WORLD_SIZE}, got {a.world_size}")
    return a.world_size
